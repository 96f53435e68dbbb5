//! `uplink-fibwatch`: what the kernel's FIB does after a next hop is lost, seen from the
//! outside (the failover benchmark, `bench/failover.sh`). Works for any daemon: it tracks every
//! route of the main table (inline next hops or a nexthop object) and every nexthop object,
//! and counts the routes that forward via `--gateway`.
//!
//! It subscribes to route and nexthop notifications, then dumps the tables (so nothing falls
//! between the two), prints `ready`, and from the first notification on records: the moment
//! the last route stopped forwarding via the gateway (`clean_ns`), the moment of the last
//! notification (`last_ns`), and how many route and nexthop notifications came. It stops once
//! notifications have been quiet for `--quiet-ms`. Times are Unix-epoch nanoseconds, taken
//! when a datagram is read, for the script to subtract its own "session cut" time from.

use std::collections::HashMap;
use std::io::Write;
use std::net::IpAddr;
use std::process::ExitCode;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use clap::Parser;
use ipnet::IpNet;
use netlink_sys::{protocols::NETLINK_ROUTE, Socket};
use uplink::fib::msg;

#[derive(Debug, Parser)]
#[command(name = "uplink-fibwatch", about = "Time a FIB failover from kernel notifications")]
struct Args {
    /// The next hop that is about to be lost.
    #[arg(long)]
    gateway: IpAddr,
    /// Stop after this long without a notification (once one came).
    #[arg(long, default_value_t = 3000)]
    quiet_ms: u64,
    /// Stop after this long in any case.
    #[arg(long, default_value_t = 300)]
    max_seconds: u64,
    /// Only dump and print `routes=N via_gateway=M`, then exit.
    #[arg(long)]
    check: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Target {
    Object(u32),
    Inline(Vec<IpAddr>),
}

#[derive(Debug, Clone)]
enum Object {
    Single(Option<IpAddr>),
    Group(Vec<u32>),
}

#[derive(Default)]
struct Fib {
    routes: HashMap<IpNet, Target>,
    objects: HashMap<u32, Object>,
    /// Routes per nexthop object, and inline routes via the gateway.
    per_object: HashMap<u32, usize>,
    inline_via: usize,
}

impl Fib {
    fn object_via(&self, id: u32, gateway: IpAddr) -> bool {
        match self.objects.get(&id) {
            Some(Object::Single(gw)) => *gw == Some(gateway),
            Some(Object::Group(members)) => members.iter().any(
                |m| matches!(self.objects.get(m), Some(Object::Single(Some(gw))) if *gw == gateway),
            ),
            None => false,
        }
    }

    fn routes_via(&self, gateway: IpAddr) -> usize {
        let via_objects: usize = self
            .per_object
            .iter()
            .filter(|(id, _)| self.object_via(**id, gateway))
            .map(|(_, n)| *n)
            .sum();
        via_objects + self.inline_via
    }

    fn forget(&mut self, prefix: &IpNet, gateway: IpAddr) {
        match self.routes.remove(prefix) {
            Some(Target::Object(id)) => {
                if let Some(n) = self.per_object.get_mut(&id) {
                    *n = n.saturating_sub(1);
                }
            }
            Some(Target::Inline(gws)) if gws.contains(&gateway) => {
                self.inline_via = self.inline_via.saturating_sub(1)
            }
            _ => {}
        }
    }

    fn set(&mut self, prefix: IpNet, target: Target, gateway: IpAddr) {
        self.forget(&prefix, gateway);
        match &target {
            Target::Object(id) => *self.per_object.entry(*id).or_default() += 1,
            Target::Inline(gws) if gws.contains(&gateway) => self.inline_via += 1,
            Target::Inline(_) => {}
        }
        self.routes.insert(prefix, target);
    }

    /// Applies one message; true when it was a route or nexthop change.
    fn apply(&mut self, m: &msg::Message<'_>, gateway: IpAddr) -> Option<Kind> {
        match m.kind {
            msg::RTM_NEWROUTE | msg::RTM_DELROUTE => {
                let r = msg::parse_route(m.payload)?;
                // The daemons' routes: not the kernel's own (local, connected).
                if r.table != msg::RT_TABLE_MAIN
                    || r.protocol <= 4
                    || r.route_type != msg::RTN_UNICAST
                {
                    return None;
                }
                if m.kind == msg::RTM_DELROUTE {
                    self.forget(&r.prefix, gateway);
                } else {
                    let target = match r.nh_id {
                        Some(id) => Target::Object(id),
                        None => Target::Inline(r.hops.iter().filter_map(|(gw, _)| *gw).collect()),
                    };
                    self.set(r.prefix, target, gateway);
                }
                Some(Kind::Route)
            }
            msg::RTM_NEWNEXTHOP | msg::RTM_DELNEXTHOP => {
                let nh = msg::parse_nexthop(m.payload)?;
                if m.kind == msg::RTM_DELNEXTHOP {
                    self.objects.remove(&nh.id);
                } else if nh.group {
                    self.objects.insert(nh.id, Object::Group(nh.members));
                } else {
                    self.objects.insert(nh.id, Object::Single(nh.gateway));
                }
                Some(Kind::Nexthop)
            }
            _ => None,
        }
    }
}

enum Kind {
    Route,
    Nexthop,
}

fn epoch_ns() -> u128 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or_default()
}

fn dump(
    socket: &Socket,
    kind: u16,
    family: u8,
    fib: &mut Fib,
    gateway: IpAddr,
) -> Result<(), String> {
    let mut request = Vec::new();
    msg::dump(&mut request, 1, kind, family);
    socket.send(&request, 0).map_err(|e| format!("dump request: {e}"))?;
    let mut buf = Vec::with_capacity(1 << 20);
    loop {
        buf.clear();
        socket.recv(&mut buf, 0).map_err(|e| format!("dump: {e}"))?;
        for m in msg::messages(&buf) {
            match m.kind {
                msg::NLMSG_DONE | msg::NLMSG_ERROR => return Ok(()),
                _ => {
                    fib.apply(&m, gateway);
                }
            }
        }
    }
}

fn run(args: Args) -> Result<(), String> {
    let mut monitor = Socket::new(NETLINK_ROUTE).map_err(|e| e.to_string())?;
    monitor.bind_auto().map_err(|e| e.to_string())?;
    // Big enough for a million notifications in a burst; an overflow is reported.
    let _ = monitor.set_rx_buf_sz(256 * 1024 * 1024);
    for group in [msg::RTNLGRP_IPV4_ROUTE, msg::RTNLGRP_NEXTHOP] {
        monitor.add_membership(group).map_err(|e| format!("subscribe: {e}"))?;
    }
    let mut fib = Fib::default();
    let mut dumper = Socket::new(NETLINK_ROUTE).map_err(|e| e.to_string())?;
    dumper.bind_auto().map_err(|e| e.to_string())?;
    dump(&dumper, msg::RTM_GETNEXTHOP, msg::AF_UNSPEC, &mut fib, args.gateway)?;
    dump(&dumper, msg::RTM_GETROUTE, msg::AF_INET, &mut fib, args.gateway)?;
    let gateway = args.gateway;
    let via_at_start = fib.routes_via(gateway);
    if args.check {
        println!("routes={} via_gateway={via_at_start}", fib.routes.len());
        return Ok(());
    }
    {
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "ready routes={} via_gateway={via_at_start}", fib.routes.len());
        let _ = out.flush();
    }
    monitor.set_non_blocking(true).map_err(|e| format!("non-blocking monitor: {e}"))?;
    let start = Instant::now();
    let quiet = Duration::from_millis(args.quiet_ms);
    let (mut routes, mut nexthops, mut overflows) = (0usize, 0usize, 0usize);
    let (mut first_ns, mut last_ns, mut clean_ns) = (None, None, None);
    let mut last_event = None::<Instant>;
    let mut buf = Vec::with_capacity(1 << 20);
    loop {
        if start.elapsed() > Duration::from_secs(args.max_seconds) {
            break;
        }
        if last_event.is_some_and(|t| t.elapsed() > quiet) {
            break;
        }
        buf.clear();
        match monitor.recv(&mut buf, 0) {
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_micros(200));
                continue;
            }
            Err(e) if e.raw_os_error() == Some(105) => {
                overflows += 1;
                continue;
            }
            Err(e) => return Err(format!("monitor: {e}")),
        }
        let now = epoch_ns();
        let mut any = false;
        for m in msg::messages(&buf) {
            match fib.apply(&m, gateway) {
                Some(Kind::Route) => routes += 1,
                Some(Kind::Nexthop) => nexthops += 1,
                None => continue,
            }
            any = true;
        }
        if !any {
            continue;
        }
        first_ns.get_or_insert(now);
        last_ns = Some(now);
        last_event = Some(Instant::now());
        let via = fib.routes_via(gateway);
        if via == 0 && clean_ns.is_none() && via_at_start > 0 {
            clean_ns = Some(now);
        } else if via > 0 {
            clean_ns = None;
        }
    }
    let show = |v: Option<u128>| v.map_or("-".to_string(), |n| n.to_string());
    println!(
        "first_ns={} clean_ns={} last_ns={} route_events={routes} nexthop_events={nexthops} \
         overflows={overflows} routes_left={} via_gateway_left={}",
        show(first_ns),
        show(clean_ns),
        show(last_ns),
        fib.routes.len(),
        fib.routes_via(gateway)
    );
    Ok(())
}

fn main() -> ExitCode {
    match run(Args::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("uplink-fibwatch: {e}");
            ExitCode::FAILURE
        }
    }
}
