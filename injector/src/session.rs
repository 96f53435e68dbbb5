//! Just enough of a BGP speaker to get a session to Established and keep it there: OPEN,
//! KEEPALIVE, and a reader that drains whatever the peer sends so its writes never block.
//! There is no FSM: any surprise ends the process with a message.

use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use uplink::bgp::wire::attributes::Family;
use uplink::bgp::wire::message::{
    decode_message, encode_keepalive, encode_open, frame_len, Message,
};
use uplink::bgp::wire::open::{Capability, Open};

/// What the injector says in its OPEN.
#[derive(Debug, Clone)]
pub struct Local {
    pub asn: u32,
    pub router_id: Ipv4Addr,
    pub hold_time: u16,
    pub family: Family,
}

/// Reads BGP messages off a stream, keeping partial ones between reads.
pub struct Framer {
    stream: TcpStream,
    buf: Vec<u8>,
}

/// One message as the injector cares about it.
#[derive(Debug)]
pub enum Event {
    Open(Open),
    Keepalive,
    Update,
    Other(String),
}

impl Framer {
    pub fn new(stream: TcpStream) -> Self {
        Self { stream, buf: Vec::with_capacity(1 << 16) }
    }

    /// The next message, blocking; an error for EOF, a NOTIFICATION or a malformed message.
    pub fn next(&mut self) -> Result<Event, String> {
        loop {
            if let Some(len) = frame_len(&self.buf).map_err(|e| format!("bad header: {e:?}"))? {
                let event = match self.buf.get(..len).map(decode_message) {
                    Some(Ok(Message::Open(open))) => Event::Open(open),
                    Some(Ok(Message::Keepalive)) => Event::Keepalive,
                    Some(Ok(Message::Update(_))) => Event::Update,
                    Some(Ok(Message::Notification(n))) => {
                        return Err(format!("peer sent NOTIFICATION {n}"))
                    }
                    Some(Ok(other)) => Event::Other(format!("{:?}", other.kind())),
                    Some(Err(e)) => return Err(format!("malformed message: {e:?}")),
                    None => return Err("frame length past the buffer".into()),
                };
                self.buf.drain(..len);
                return Ok(event);
            }
            let mut chunk = [0u8; 1 << 16];
            let n = self.stream.read(&mut chunk).map_err(|e| format!("read: {e}"))?;
            if n == 0 {
                return Err("peer closed the connection".into());
            }
            self.buf.extend_from_slice(chunk.get(..n).unwrap_or_default());
        }
    }
}

/// Connects to `peer`, retrying while nothing listens yet (the daemon may still be starting).
pub fn connect(
    peer: SocketAddr,
    source: Option<IpAddr>,
    patience: Duration,
) -> Result<TcpStream, String> {
    let start = Instant::now();
    loop {
        match connect_from(peer, source) {
            Ok(s) => return Ok(s),
            Err(e) if start.elapsed() < patience => {
                let _ = e;
                std::thread::sleep(Duration::from_millis(200));
            }
            Err(e) => return Err(format!("connect to {peer}: {e}")),
        }
    }
}

/// One attempt, from `source` when given (two injectors on one link, as two upstreams).
fn connect_from(peer: SocketAddr, source: Option<IpAddr>) -> std::io::Result<TcpStream> {
    let Some(source) = source else {
        return TcpStream::connect_timeout(&peer, Duration::from_secs(2));
    };
    let socket = socket2::Socket::new(
        socket2::Domain::for_address(peer),
        socket2::Type::STREAM,
        Some(socket2::Protocol::TCP),
    )?;
    socket.bind(&SocketAddr::new(source, 0).into())?;
    socket.connect_timeout(&peer.into(), Duration::from_secs(2))?;
    Ok(socket.into())
}

/// RFC 4271 §8.2.2: send OPEN, get OPEN, send KEEPALIVE, get KEEPALIVE. Returns the peer's
/// OPEN and the framer, positioned after the peer's first KEEPALIVE.
pub fn establish(stream: &mut TcpStream, local: &Local) -> Result<(Open, Framer), String> {
    let open = Open::new(
        local.asn,
        local.hold_time,
        local.router_id,
        vec![Capability::MultiProtocol(local.family), Capability::FourOctetAs(local.asn)],
    );
    let mut out = Vec::new();
    encode_open(&open, &mut out);
    stream.write_all(&out).map_err(|e| format!("write OPEN: {e}"))?;
    let reader = stream.try_clone().map_err(|e| format!("clone socket: {e}"))?;
    let mut framer = Framer::new(reader);
    let theirs = match framer.next()? {
        Event::Open(o) => o,
        other => return Err(format!("expected OPEN, got {other:?}")),
    };
    out.clear();
    encode_keepalive(&mut out);
    stream.write_all(&out).map_err(|e| format!("write KEEPALIVE: {e}"))?;
    loop {
        match framer.next()? {
            Event::Keepalive => return Ok((theirs, framer)),
            Event::Update => {} // RFC 4271 §8.2.2 allows only KEEPALIVE here, but be lenient.
            Event::Other(kind) => return Err(format!("expected KEEPALIVE, got {kind}")),
            other => return Err(format!("expected KEEPALIVE, got {other:?}")),
        }
    }
}

/// Drains the peer's messages on a thread of its own; the process exits when the session
/// ends, since a benchmark with a dead session has no result.
pub fn spawn_drain(mut framer: Framer) {
    std::thread::spawn(move || loop {
        if let Err(e) = framer.next() {
            eprintln!("uplink-inject: session ended: {e}");
            std::process::exit(3);
        }
    });
}

/// The address family a next hop or a prefix's address belongs to, as a BGP family.
pub fn family_of(addr: IpAddr) -> Family {
    match addr {
        IpAddr::V4(_) => Family::IPV4_UNICAST,
        IpAddr::V6(_) => Family::IPV6_UNICAST,
    }
}
