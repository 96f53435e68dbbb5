//! The BFD thread of one routing instance: it owns the UDP sockets and every session, so
//! packets go out on time whatever the rest of the daemon is doing (a busy RIB, a slow
//! netlink write). It is a plain OS thread, not a tokio task.
//!
//! Receiving runs in one small thread per listening socket (blocking `recv_from`), which
//! decodes the packet and hands it to the session thread over a channel; the session thread
//! sleeps in `recv_timeout` until the next packet or the next timer, whichever comes first.
//! State changes reach the BGP side through a `tokio::sync::watch` per peer, which never
//! blocks this thread.

use super::packet::{ControlPacket, Diagnostic, State};
use super::session::{Action, Counters, Event, Session, SessionConfig};
use socket2::{Domain, Protocol, SockAddr, SockFilter, Socket, Type};
use std::collections::HashMap;
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};
use tokio::sync::{oneshot, watch};
use tracing::{debug, info, warn};

/// RFC 5881 §4: "BFD Control packets MUST be transmitted in UDP packets with destination
/// port 3784".
pub const SINGLE_HOP_PORT: u16 = 3784;
/// RFC 5883 §5: multihop Control packets go to UDP port 4784.
pub const MULTI_HOP_PORT: u16 = 4784;
/// RFC 5881 §4: "The source port MUST be in the range 49152 through 65535."
const SOURCE_PORTS: std::ops::RangeInclusive<u16> = 49152..=65535;
/// RFC 5881 §5: single-hop packets are sent with TTL 255 and received only with TTL 255.
const SINGLE_HOP_TTL: u8 = 255;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Hop {
    /// RFC 5881: a directly connected peer.
    Single,
    /// RFC 5883: a peer several hops away (eBGP multihop).
    Multi,
}

/// One BFD peer to run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerSpec {
    pub peer: IpAddr,
    /// Source address to send from (the BGP neighbor's `source_address`), if fixed.
    pub local: Option<IpAddr>,
    pub hop: Hop,
    pub config: SessionConfig,
    /// Multihop only: the lowest TTL accepted (RFC 5883 §5 leaves the check to policy).
    pub minimum_ttl: u8,
    pub profile: String,
}

/// What the BGP side sees of one BFD peer: whether it is Up, and how many times it went
/// Down in a way that must take BGP down (so no Down is lost between two looks).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BfdLink {
    pub up: bool,
    pub downs: u64,
}

/// A peer as `show bfd peers` prints it.
#[derive(Debug, Clone, PartialEq)]
pub struct PeerView {
    pub spec: PeerSpec,
    pub vrf: String,
    pub local_address: Option<IpAddr>,
    pub state: State,
    /// Time since the last state change.
    pub since_change: Duration,
    pub local_discriminator: u32,
    pub remote_discriminator: u32,
    pub local_diagnostic: Diagnostic,
    pub remote_diagnostic: Diagnostic,
    pub remote_desired_min_tx: Duration,
    pub remote_required_min_rx: Duration,
    pub remote_detect_mult: u8,
    pub transmit_interval: Option<Duration>,
    pub detection_time: Option<Duration>,
    pub counters: Counters,
}

enum Input {
    Add(PeerSpec, watch::Sender<BfdLink>),
    /// The neighbor was removed from the config.
    Remove(IpAddr),
    Received {
        from: IpAddr,
        hop: Hop,
        packet: ControlPacket,
    },
    Snapshot(oneshot::Sender<Vec<PeerView>>),
}

/// Adds sessions to a running BFD thread (it does not keep the thread alive).
#[derive(Clone)]
pub struct BfdRegistrar {
    input: mpsc::Sender<Input>,
}

impl BfdRegistrar {
    /// Starts a session to `spec.peer`. The returned watch follows its state for BGP.
    pub fn add_peer(&self, spec: PeerSpec) -> Result<watch::Receiver<BfdLink>, String> {
        let (tx, rx) = watch::channel(BfdLink::default());
        self.input.send(Input::Add(spec, tx)).map_err(|_| "the BFD thread has stopped")?;
        Ok(rx)
    }
}

/// Handle on the BFD thread of one routing instance. Dropping it stops the thread.
pub struct BfdRuntime {
    input: mpsc::Sender<Input>,
    stop: Arc<AtomicBool>,
}

impl Drop for BfdRuntime {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

impl BfdRuntime {
    /// Starts the thread for the instance of `vrf` ("" for the default VRF): its sockets are
    /// bound to the VRF device otherwise.
    pub fn start(vrf: &str) -> io::Result<BfdRuntime> {
        let (input, inbox) = mpsc::channel();
        let stop = Arc::new(AtomicBool::new(false));
        let worker = Worker {
            vrf: vrf.to_string(),
            inbox,
            input: input.clone(),
            stop: stop.clone(),
            peers: Vec::new(),
            listening: HashMap::new(),
        };
        let name = if vrf.is_empty() { "bfd".to_string() } else { format!("bfd-{vrf}") };
        thread::Builder::new().name(name).spawn(move || worker.run())?;
        Ok(BfdRuntime { input, stop })
    }

    /// Starts a session to `spec.peer`. The returned watch follows its state for BGP.
    pub fn add_peer(&self, spec: PeerSpec) -> Result<watch::Receiver<BfdLink>, String> {
        self.registrar().add_peer(spec)
    }

    /// Stops the thread (as dropping the handle does) while others may still hold it.
    pub fn stop(&self) {
        self.stop.store(true, Ordering::Relaxed);
    }

    /// A handle that can add sessions later, from another task.
    pub fn registrar(&self) -> BfdRegistrar {
        BfdRegistrar { input: self.input.clone() }
    }

    /// Ends the session to `peer`: it sends AdminDown once (RFC 5880 §6.8.16, so the peer's
    /// clients do not take it for a failure, RFC 5882 §3.2) and is forgotten.
    pub fn remove_peer(&self, peer: IpAddr) {
        let _ = self.input.send(Input::Remove(peer));
    }

    /// Every peer's state, for `show bfd peers`.
    pub async fn peers(&self) -> Result<Vec<PeerView>, String> {
        let (tx, rx) = oneshot::channel();
        self.input.send(Input::Snapshot(tx)).map_err(|_| "the BFD thread has stopped")?;
        rx.await.map_err(|_| "the BFD thread did not answer".to_string())
    }
}

struct Peer {
    spec: PeerSpec,
    session: Session,
    socket: UdpSocket,
    link: watch::Sender<BfdLink>,
}

/// The session thread's state.
struct Worker {
    vrf: String,
    inbox: mpsc::Receiver<Input>,
    /// For the receive threads.
    input: mpsc::Sender<Input>,
    stop: Arc<AtomicBool>,
    peers: Vec<Peer>,
    /// Receive sockets opened so far, by (IPv4?, hop), with the TTL their filter requires.
    listening: HashMap<(bool, Hop), u8>,
}

impl Worker {
    fn run(mut self) {
        if let Err(e) = super::realtime::raise_current_thread() {
            warn!("BFD thread keeps normal priority: {e}; under CPU load packets may be late");
        }
        loop {
            let now = Instant::now();
            for index in 0..self.peers.len() {
                let due = self
                    .peers
                    .get(index)
                    .and_then(|p| p.session.next_deadline())
                    .is_some_and(|d| d <= now);
                if due {
                    self.feed(index, Event::Tick, now);
                }
            }
            let next = self.peers.iter().filter_map(|p| p.session.next_deadline()).min();
            let wait = next
                .map_or(Duration::from_secs(1), |d| d.saturating_duration_since(Instant::now()));
            match self.inbox.recv_timeout(wait) {
                Ok(input) => self.on_input(input),
                Err(mpsc::RecvTimeoutError::Timeout) => {}
                Err(mpsc::RecvTimeoutError::Disconnected) => break,
            }
            if self.stop.load(Ordering::Relaxed) {
                break;
            }
        }
        debug!(vrf = %self.vrf, "BFD thread stopped");
    }

    fn on_input(&mut self, input: Input) {
        match input {
            Input::Add(spec, link) => {
                if let Err(e) = self.add(spec.clone(), link) {
                    warn!(peer = %spec.peer, "cannot start the BFD session: {e}");
                }
            }
            Input::Received { from, hop, packet } => {
                // RFC 5880 §6.8.6: select the session by Your Discriminator when it is
                // nonzero, else by the addresses (RFC 5881 §3 / RFC 5883 §4).
                let found = self.peers.iter().position(|p| {
                    p.spec.peer == from
                        && p.spec.hop == hop
                        && (packet.your_discriminator == 0
                            || packet.your_discriminator == p.session.local_discriminator())
                });
                match found {
                    Some(index) => self.feed(index, Event::Received(packet), Instant::now()),
                    None => debug!(
                        %from,
                        your = packet.your_discriminator,
                        "BFD packet for no session; discarded (RFC 5880 §6.8.6)"
                    ),
                }
            }
            Input::Snapshot(reply) => {
                let _ = reply.send(self.snapshot());
            }
            Input::Remove(peer) => {
                if let Some(index) = self.peers.iter().position(|p| p.spec.peer == peer) {
                    self.feed(index, Event::AdminDown, Instant::now());
                    self.peers.remove(index);
                    info!(vrf = %self.vrf, %peer, "BFD session removed (AdminDown sent)");
                }
            }
        }
    }

    fn add(&mut self, spec: PeerSpec, link: watch::Sender<BfdLink>) -> io::Result<()> {
        self.listen(spec.peer.is_ipv4(), spec.hop, spec.minimum_ttl)?;
        let socket = self.transmit_socket(&spec)?;
        let discriminator = loop {
            // RFC 5880 §6.8.1: bfd.LocalDiscr is "nonzero" and "unique across all BFD
            // sessions on this system".
            let candidate: u32 = rand::random();
            let taken = self.peers.iter().any(|p| p.session.local_discriminator() == candidate);
            if candidate != 0 && !taken {
                break candidate;
            }
        };
        let session = Session::new(spec.config, discriminator, rand::random(), Instant::now());
        info!(
            vrf = %self.vrf, peer = %spec.peer, hop = ?spec.hop, profile = %spec.profile,
            "BFD session started: tx {:?} rx {:?} x{}{}",
            spec.config.desired_min_tx, spec.config.required_min_rx, spec.config.detect_mult,
            if spec.config.passive { " (passive)" } else { "" }
        );
        self.peers.push(Peer { spec, session, socket, link });
        Ok(())
    }

    fn feed(&mut self, index: usize, event: Event, now: Instant) {
        let Some(peer) = self.peers.get_mut(index) else { return };
        let actions = peer.session.handle(event, now);
        for action in actions {
            match action {
                Action::Send(packet) => {
                    let port = match peer.spec.hop {
                        Hop::Single => SINGLE_HOP_PORT,
                        Hop::Multi => MULTI_HOP_PORT,
                    };
                    let to = SocketAddr::new(peer.spec.peer, port);
                    if let Err(e) = peer.socket.send_to(&packet.encode(), to) {
                        debug!(peer = %peer.spec.peer, "BFD send failed: {e}");
                    }
                }
                Action::StateChanged { from, to, diagnostic, remote_admin_down } => {
                    info!(
                        vrf = %self.vrf, peer = %peer.spec.peer,
                        "BFD {from} -> {to} ({}){}",
                        diagnostic.frr_name(),
                        if remote_admin_down { ", peer is AdminDown: BGP left up (RFC 5882 §3.2)" } else { "" }
                    );
                    peer.link.send_modify(|link| {
                        if to == State::Up {
                            link.up = true;
                        } else if from == State::Up {
                            link.up = false;
                            // RFC 5882 §3.2: a peer going AdminDown is not a failure.
                            if !remote_admin_down {
                                link.downs = link.downs.saturating_add(1);
                            }
                        }
                    });
                }
            }
        }
    }

    /// Opens (once per family and hop) the socket that receives from every peer, with a
    /// socket filter that drops packets below the required TTL in the kernel.
    fn listen(&mut self, ipv4: bool, hop: Hop, minimum_ttl: u8) -> io::Result<()> {
        let required = match hop {
            // RFC 5881 §5: "received ... with a TTL or Hop Limit value of 255".
            Hop::Single => SINGLE_HOP_TTL,
            Hop::Multi => minimum_ttl,
        };
        if let Some(current) = self.listening.get(&(ipv4, hop)).copied() {
            if hop == Hop::Multi && required < current {
                // One socket serves every multihop peer: it admits the lowest minimum.
                warn!(
                    "multihop BFD peers with different minimum_ttl share one socket; \
                     accepting TTL >= {required} from all of them"
                );
            }
            return Ok(());
        }
        let port = match hop {
            Hop::Single => SINGLE_HOP_PORT,
            Hop::Multi => MULTI_HOP_PORT,
        };
        let (domain, any) = if ipv4 {
            (Domain::IPV4, IpAddr::V4(Ipv4Addr::UNSPECIFIED))
        } else {
            (Domain::IPV6, IpAddr::V6(Ipv6Addr::UNSPECIFIED))
        };
        let socket = Socket::new(domain, Type::DGRAM, Some(Protocol::UDP))?;
        socket.set_reuse_address(true)?;
        if !ipv4 {
            socket.set_only_v6(true)?;
        }
        if !self.vrf.is_empty() {
            socket.bind_device(Some(self.vrf.as_bytes()))?;
        }
        socket.attach_filter(&ttl_filter(ipv4, required))?;
        socket.bind(&SockAddr::from(SocketAddr::new(any, port)))?;
        socket.set_read_timeout(Some(Duration::from_millis(500)))?;
        let socket: UdpSocket = socket.into();
        let input = self.input.clone();
        let stop = self.stop.clone();
        let name = format!("bfd-rx-{port}-{}", if ipv4 { "v4" } else { "v6" });
        thread::Builder::new().name(name).spawn(move || receive(socket, hop, input, stop))?;
        self.listening.insert((ipv4, hop), required);
        Ok(())
    }

    /// RFC 5881 §4: one socket per session, from a fixed source port in 49152-65535, TTL 255.
    fn transmit_socket(&self, spec: &PeerSpec) -> io::Result<UdpSocket> {
        let ipv4 = spec.peer.is_ipv4();
        let domain = if ipv4 { Domain::IPV4 } else { Domain::IPV6 };
        let local = spec.local.unwrap_or(if ipv4 {
            IpAddr::V4(Ipv4Addr::UNSPECIFIED)
        } else {
            IpAddr::V6(Ipv6Addr::UNSPECIFIED)
        });
        let mut last = io::Error::new(io::ErrorKind::AddrInUse, "no free source port");
        for _ in 0..64 {
            let socket = Socket::new(domain, Type::DGRAM, Some(Protocol::UDP))?;
            if !self.vrf.is_empty() {
                socket.bind_device(Some(self.vrf.as_bytes()))?;
            }
            // RFC 5881 §5 / RFC 5883 §5: send with TTL (Hop Limit) 255.
            if ipv4 {
                socket.set_ttl_v4(u32::from(SINGLE_HOP_TTL))?;
            } else {
                socket.set_unicast_hops_v6(u32::from(SINGLE_HOP_TTL))?;
            }
            let port = rand::random_range(SOURCE_PORTS);
            match socket.bind(&SockAddr::from(SocketAddr::new(local, port))) {
                Ok(()) => return Ok(socket.into()),
                Err(e) if e.kind() == io::ErrorKind::AddrInUse => last = e,
                Err(e) => return Err(e),
            }
        }
        Err(last)
    }

    fn snapshot(&self) -> Vec<PeerView> {
        let now = Instant::now();
        self.peers
            .iter()
            .map(|p| {
                let s = &p.session;
                let (remote_tx, remote_rx, remote_mult) = s.remote_timers();
                PeerView {
                    spec: p.spec.clone(),
                    vrf: self.vrf.clone(),
                    local_address: p.spec.local.or_else(|| route_source(&self.vrf, p.spec.peer)),
                    state: s.state(),
                    since_change: now.saturating_duration_since(s.last_change()),
                    local_discriminator: s.local_discriminator(),
                    remote_discriminator: s.remote_discriminator(),
                    local_diagnostic: s.local_diagnostic(),
                    remote_diagnostic: s.remote_diagnostic(),
                    remote_desired_min_tx: remote_tx,
                    remote_required_min_rx: remote_rx,
                    remote_detect_mult: remote_mult,
                    transmit_interval: (s.state() == State::Up)
                        .then(|| s.transmit_interval())
                        .flatten(),
                    detection_time: (s.state() == State::Up).then(|| s.detection_time()).flatten(),
                    counters: s.counters(),
                }
            })
            .collect()
    }
}

/// A classic BPF program for a UDP socket: accept only packets whose IPv4 TTL (octet 8 of
/// the IP header) or IPv6 Hop Limit (octet 7) is at least `minimum`. The kernel runs it
/// before queueing, so a spoofed packet from further away never reaches the session.
fn ttl_filter(ipv4: bool, minimum: u8) -> [SockFilter; 4] {
    // linux/filter.h: BPF_LD|BPF_B|BPF_ABS, BPF_JMP|BPF_JGE|BPF_K, BPF_RET|BPF_K; and
    // SKF_NET_OFF, the offset that addresses the network header from a transport socket.
    const LD_B_ABS: u16 = 0x30;
    const JGE_K: u16 = 0x35;
    const RET_K: u16 = 0x06;
    const SKF_NET_OFF: u32 = 0xfff0_0000;
    let ttl_offset = if ipv4 { 8 } else { 7 };
    [
        SockFilter::new(LD_B_ABS, 0, 0, SKF_NET_OFF + ttl_offset),
        SockFilter::new(JGE_K, 0, 1, u32::from(minimum)),
        SockFilter::new(RET_K, 0, 0, u32::MAX),
        SockFilter::new(RET_K, 0, 0, 0),
    ]
}

/// The receive loop of one listening socket.
fn receive(socket: UdpSocket, hop: Hop, input: mpsc::Sender<Input>, stop: Arc<AtomicBool>) {
    // The BFD thread has said whether real-time priority is available; no second warning.
    let _ = super::realtime::raise_current_thread();
    let mut buf = [0u8; 512];
    while !stop.load(Ordering::Relaxed) {
        let (len, from) = match socket.recv_from(&mut buf) {
            Ok(pair) => pair,
            Err(e) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut) => {
                continue
            }
            Err(e) => {
                debug!("BFD receive error: {e}");
                continue;
            }
        };
        let bytes = buf.get(..len).unwrap_or_default();
        match ControlPacket::decode(bytes) {
            Ok(packet) => {
                let from = from.ip().to_canonical();
                if input.send(Input::Received { from, hop, packet }).is_err() {
                    return;
                }
            }
            Err(e) => debug!(%from, "BFD packet discarded: {e}"),
        }
    }
}

/// The source address the kernel would use towards `peer` (for display only).
fn route_source(vrf: &str, peer: IpAddr) -> Option<IpAddr> {
    let domain = if peer.is_ipv4() { Domain::IPV4 } else { Domain::IPV6 };
    let socket = Socket::new(domain, Type::DGRAM, Some(Protocol::UDP)).ok()?;
    if !vrf.is_empty() {
        socket.bind_device(Some(vrf.as_bytes())).ok()?;
    }
    socket.connect(&SockAddr::from(SocketAddr::new(peer, SINGLE_HOP_PORT))).ok()?;
    let local = socket.local_addr().ok()?.as_socket()?.ip();
    (!local.is_unspecified()).then_some(local)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn packet(state: State, my: u32, your: u32) -> ControlPacket {
        ControlPacket {
            diagnostic: Diagnostic::None,
            state,
            poll: false,
            final_bit: false,
            control_plane_independent: false,
            demand: false,
            detect_mult: 3,
            my_discriminator: my,
            your_discriminator: your,
            desired_min_tx_us: 20_000,
            required_min_rx_us: 20_000,
            required_min_echo_rx_us: 0,
        }
    }

    /// Two runtimes cannot share port 3784 in one namespace, so this drives a runtime over
    /// loopback from a hand-made peer: the session comes Up, the BGP watch follows, and a
    /// silent peer takes it Down within the detection time.
    #[test]
    fn loopback_session_comes_up_and_detects_silence() {
        let runtime = match BfdRuntime::start("") {
            Ok(r) => r,
            Err(e) => panic!("cannot start: {e}"),
        };
        let spec = PeerSpec {
            // Not 127.0.0.1: our own packets to the peer come back from 127.0.0.1 and must
            // not look like the peer's.
            peer: IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2)),
            local: None,
            hop: Hop::Multi,
            config: SessionConfig {
                desired_min_tx: Duration::from_millis(20),
                required_min_rx: Duration::from_millis(20),
                detect_mult: 3,
                passive: false,
            },
            minimum_ttl: 254,
            profile: "test".into(),
        };
        let mut link = runtime.add_peer(spec).unwrap();
        // The fake peer cannot listen on 4784 (we do), so it learns our discriminator from
        // the snapshot.
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let Some(ours) =
            rt.block_on(runtime.peers()).unwrap().first().map(|v| v.local_discriminator)
        else {
            return; // port 4784 is taken on this host: nothing to learn here
        };
        let peer = UdpSocket::bind("127.0.0.2:0").unwrap();
        peer.set_ttl(255).unwrap(); // below the profile's minimum_ttl it would be filtered
        let to: SocketAddr = "127.0.0.1:4784".parse().unwrap();
        peer.send_to(&packet(State::Down, 77, 0).encode(), to).unwrap();
        std::thread::sleep(Duration::from_millis(50));
        let view = rt.block_on(runtime.peers()).unwrap();
        assert_eq!(view[0].state, State::Init);
        assert_eq!(view[0].remote_discriminator, 77);
        peer.send_to(&packet(State::Up, 77, ours).encode(), to).unwrap();
        std::thread::sleep(Duration::from_millis(20));
        assert!(link.borrow_and_update().up);
        // Silence: 3 × 20 ms detection.
        std::thread::sleep(Duration::from_millis(120));
        let now = *link.borrow_and_update();
        assert_eq!(now, BfdLink { up: false, downs: 1 });
        let view = rt.block_on(runtime.peers()).unwrap();
        assert_eq!(view[0].local_diagnostic, Diagnostic::ControlDetectionTimeExpired);
    }

    #[test]
    fn ttl_filter_checks_the_right_octet() {
        let v4 = UdpSocket::bind("127.0.0.1:0").unwrap();
        let socket = Socket::from(v4);
        socket.attach_filter(&ttl_filter(true, 255)).unwrap();
        socket.set_read_timeout(Some(Duration::from_millis(200))).unwrap();
        let v4: UdpSocket = socket.into();
        let to = v4.local_addr().unwrap();
        let sender = Socket::new(Domain::IPV4, Type::DGRAM, None).unwrap();
        for (ttl, delivered) in [(254u32, false), (255, true)] {
            sender.set_ttl_v4(ttl).unwrap();
            sender.send_to(&[ttl as u8], &to.into()).unwrap();
            let mut buf = [0u8; 4];
            let got = v4.recv_from(&mut buf).map(|(n, _)| buf[..n].to_vec());
            assert_eq!(got.is_ok(), delivered, "TTL {ttl}");
        }
    }
}
