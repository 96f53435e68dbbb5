//! `uplink-inject`: the route injector of the ingest benchmark (`bench/ingest.sh`).
//!
//! It encodes every UPDATE before it connects, brings one eBGP session up, optionally waits
//! for a go signal (a file appearing), then writes the whole buffer with large writes, so the
//! receiver, not the injector, is the bottleneck. It prints when the first and the last UPDATE
//! octet were handed to the kernel, as Unix-epoch nanoseconds so a script can compare them
//! with its own clock, and stays up sending KEEPALIVEs until `--hold` runs out or it is killed.

mod routes;
mod session;

use std::io::Write;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use clap::Parser;
use ipnet::IpNet;
use uplink::bgp::wire::message::encode_keepalive;

use routes::RouteSet;
use session::Local;

#[derive(Debug, Parser)]
#[command(name = "uplink-inject", about = "Blast pre-encoded BGP UPDATEs at a peer")]
struct Args {
    /// The daemon to inject into.
    #[arg(long)]
    target: IpAddr,
    #[arg(long, default_value_t = 179)]
    port: u16,
    /// The injector's ASN (4-octet AS capability always sent).
    #[arg(long, default_value_t = 65002)]
    asn: u32,
    #[arg(long, default_value = "10.99.0.2")]
    router_id: Ipv4Addr,
    /// The first prefix; the others follow it in blocks of its length.
    /// Default: 16.0.0.0/24 for an IPv4 next hop, 2a00::/48 for IPv6.
    #[arg(long)]
    first: Option<IpNet>,
    /// How many prefixes.
    #[arg(long, default_value_t = 1_000_000)]
    count: u32,
    /// The next hop of every route; its family picks the address family.
    #[arg(long)]
    next_hop: IpAddr,
    /// Distinct attribute sets, spread like a full table's (AS paths of 1-10, 0-6
    /// communities, a MED on a third); 1 gives every route the same set.
    #[arg(long, default_value_t = 1)]
    attr_sets: u32,
    /// The address to connect from (default: the kernel picks).
    #[arg(long)]
    source: Option<IpAddr>,
    /// After the session is up, wait until this file exists before sending.
    #[arg(long)]
    go_file: Option<PathBuf>,
    /// Seconds to stay connected after the last UPDATE (default: until killed).
    #[arg(long)]
    hold: Option<u64>,
}

fn epoch_ns() -> u128 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or_default()
}

fn say(line: &str) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

fn run(args: Args) -> Result<(), String> {
    let family = session::family_of(args.next_hop);
    let first = args.first.unwrap_or_else(|| match args.next_hop {
        IpAddr::V4(_) => {
            IpNet::V4(ipnet::Ipv4Net::new(Ipv4Addr::new(16, 0, 0, 0), 24).unwrap_or_default())
        }
        IpAddr::V6(_) => IpNet::V6(
            ipnet::Ipv6Net::new(std::net::Ipv6Addr::new(0x2a00, 0, 0, 0, 0, 0, 0, 0), 48)
                .unwrap_or_default(),
        ),
    });
    let set = RouteSet {
        first,
        count: args.count,
        next_hop: args.next_hop,
        asn: args.asn,
        attr_sets: args.attr_sets,
    };
    let encode_start = Instant::now();
    let (buf, updates) = routes::encode(&set).map_err(|e| e.to_string())?;
    say(&format!(
        "encoded {} prefixes from {first} in {updates} UPDATEs, {} octets, in {} ms",
        args.count,
        buf.len(),
        encode_start.elapsed().as_millis()
    ));

    let peer = SocketAddr::new(args.target, args.port);
    let mut stream = session::connect(peer, args.source, Duration::from_secs(60))?;
    let local = Local { asn: args.asn, router_id: args.router_id, hold_time: 180, family };
    let (open, framer) = session::establish(&mut stream, &local)?;
    let hold = open.hold_time.min(local.hold_time);
    say(&format!("established with {peer} AS {} hold {hold}s", open.peer_asn()));
    session::spawn_drain(framer);

    if let Some(go) = &args.go_file {
        while !go.exists() {
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    let _ = stream.set_nodelay(false);
    let first_ns = epoch_ns();
    let sent = Instant::now();
    stream.write_all(&buf).map_err(|e| format!("write UPDATEs: {e}"))?;
    let elapsed = sent.elapsed();
    say(&format!("first_write_ns={first_ns}"));
    say(&format!("last_write_ns={} write_ms={:.1}", epoch_ns(), elapsed.as_secs_f64() * 1000.0));

    // RFC 4271 §4.4: KEEPALIVEs at a third of the hold time (none when it is zero).
    let interval = Duration::from_secs(u64::from(hold / 3).max(1));
    let deadline = args.hold.map(|s| Instant::now() + Duration::from_secs(s));
    let mut keepalive = Vec::new();
    encode_keepalive(&mut keepalive);
    loop {
        let nap = match deadline {
            Some(d) => {
                let left = d.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    return Ok(());
                }
                left.min(interval)
            }
            None => interval,
        };
        std::thread::sleep(nap);
        if hold > 0 {
            stream.write_all(&keepalive).map_err(|e| format!("write KEEPALIVE: {e}"))?;
        }
    }
}

fn main() -> ExitCode {
    match run(Args::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("uplink-inject: {e}");
            ExitCode::FAILURE
        }
    }
}
