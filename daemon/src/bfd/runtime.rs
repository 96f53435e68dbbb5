//! The BFD thread of one routing instance: it owns the UDP sockets and every session, so
//! packets go out on time whatever the rest of the daemon is doing (a busy RIB, a slow
//! netlink write). It is a plain OS thread, not a tokio task.
//!
//! Receiving runs in one small thread per listening socket (blocking `recv_from`), which
//! decodes the packet and hands it to the session thread over a bounded queue; the session
//! thread sleeps in `recv_timeout` until the next packet or the next timer, whichever comes
//! first. Commands (add, remove, show) come over a channel of their own, so a flood of packets
//! never holds them up. State changes reach the BGP side through a `tokio::sync::watch` per
//! peer, which never blocks this thread.
//!
//! What a stranger can make this thread do is bounded: the kernel drops packets whose TTL is
//! too low or whose source is not a configured peer before they wake a receive thread (a
//! socket filter, [`admission_filter`]); the receive thread checks the source again and drops a
//! packet naming a discriminator that is not the peer's session before it is queued, and one
//! naming none while the session would discard it anyway (Up, authenticated or not), so forged
//! packets cannot crowd the peer's own out of the queue nor make the session thread hash them;
//! the queue has a fixed size; and every log line a packet can trigger is summarised
//! ([`LogThrottle`]).

use super::auth::Authentication;
use super::packet::{ControlPacket, Diagnostic, State};
use super::session::{Action, Counters, Discard, Event, Session, SessionConfig};
use crate::logthrottle::{held_back_note, LogThrottle, LOG_PERIOD};
use socket2::{Domain, Protocol, SockAddr, SockFilter, Socket, Type};
use std::collections::HashMap;
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, PoisonError, RwLock};
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
/// Received packets waiting for the session thread. A peer sends one per interval (10 ms at
/// the fastest a profile allows), and the session thread handles one in microseconds, so this
/// is a second of backlog for ten fast peers; beyond it packets are dropped, not stored.
const RECEIVE_QUEUE: usize = 1024;
/// A receive error that repeats (the socket is broken) is retried after this much, doubling
/// up to [`RECEIVE_BACKOFF_MAX`], instead of in a busy loop.
const RECEIVE_BACKOFF_MIN: Duration = Duration::from_millis(10);
const RECEIVE_BACKOFF_MAX: Duration = Duration::from_secs(1);
/// How late the session thread may wake before it counts as stopped by the node. A
/// real-time thread wakes within a millisecond; a normal one on a busy node within a few.
const STALL: Duration = Duration::from_millis(20);

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
    /// RFC 5880 §6.7: the profile's authentication, if any.
    pub auth: Option<Authentication>,
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

/// What the rest of the daemon asks of the BFD thread.
enum Command {
    Add(PeerSpec, watch::Sender<BfdLink>),
    /// The neighbor was removed from the config.
    Remove(IpAddr),
    /// A reload changed the peer's profile timers (and nothing else about it).
    Reconfigure(IpAddr, SessionConfig, String),
    Snapshot(oneshot::Sender<Vec<PeerView>>),
}

/// What arrives on the bounded queue.
enum Inbound {
    Packet {
        from: IpAddr,
        hop: Hop,
        packet: ControlPacket,
    },
    /// A command is waiting.
    Wake,
}

/// The peers packets are accepted from, by address and hop, with what the receive threads need
/// to know of their sessions. Written by the session thread, read by the receive threads for
/// every packet.
type Admitted = Arc<RwLock<HashMap<(IpAddr, Hop), Admission>>>;

/// What a receive thread knows of one admitted peer's session.
#[derive(Debug, Clone)]
struct Admission {
    /// The session's discriminator: a packet naming another is for no session of this peer.
    discriminator: u32,
    /// [`Session::takes_zero_discriminator`], kept current by the session thread.
    takes_zero_discriminator: bool,
    /// Packets for the session that the receive thread discarded in its stead.
    discarded: Arc<AtomicU64>,
}

/// The way in for commands: a channel of their own, plus a wake-up on the packet queue.
#[derive(Clone)]
struct Commands {
    commands: mpsc::Sender<Command>,
    wake: mpsc::SyncSender<Inbound>,
}

impl Commands {
    fn send(&self, command: Command) -> Result<(), String> {
        self.commands.send(command).map_err(|_| "the BFD thread has stopped")?;
        // A full queue means the thread is busy and looks at its commands between packets.
        let _ = self.wake.try_send(Inbound::Wake);
        Ok(())
    }
}

/// Adds sessions to a running BFD thread (it does not keep the thread alive).
#[derive(Clone)]
pub struct BfdRegistrar {
    commands: Commands,
}

impl BfdRegistrar {
    /// Starts a session to `spec.peer`. The returned watch follows its state for BGP.
    pub fn add_peer(&self, spec: PeerSpec) -> Result<watch::Receiver<BfdLink>, String> {
        let (tx, rx) = watch::channel(BfdLink::default());
        self.commands.send(Command::Add(spec, tx))?;
        Ok(rx)
    }
}

/// Handle on the BFD thread of one routing instance. Dropping it stops the thread.
pub struct BfdRuntime {
    commands: Commands,
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
        let (commands, command_inbox) = mpsc::channel();
        let (packets, packet_inbox) = mpsc::sync_channel(RECEIVE_QUEUE);
        let stop = Arc::new(AtomicBool::new(false));
        let worker = Worker {
            vrf: vrf.to_string(),
            commands: command_inbox,
            packets: packet_inbox,
            packet_queue: packets.clone(),
            admitted: Arc::default(),
            stop: stop.clone(),
            peers: Vec::new(),
            listening: HashMap::new(),
            unmatched: LogThrottle::new(LOG_PERIOD),
            stalls: LogThrottle::new(LOG_PERIOD),
        };
        let name = if vrf.is_empty() { "bfd".to_string() } else { format!("bfd-{vrf}") };
        thread::Builder::new().name(name).spawn(move || worker.run())?;
        Ok(BfdRuntime { commands: Commands { commands, wake: packets }, stop })
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
        BfdRegistrar { commands: self.commands.clone() }
    }

    /// Ends the session to `peer`: it sends AdminDown once (RFC 5880 §6.8.16, so the peer's
    /// clients do not take it for a failure, RFC 5882 §3.2) and is forgotten.
    pub fn remove_peer(&self, peer: IpAddr) {
        let _ = self.commands.send(Command::Remove(peer));
    }

    /// New timers for the session to `peer` (its profile changed, named `profile` now): an Up
    /// session changes them with a Poll Sequence (RFC 5880 §6.8.3) and stays Up.
    pub fn reconfigure_peer(&self, peer: IpAddr, config: SessionConfig, profile: String) {
        let _ = self.commands.send(Command::Reconfigure(peer, config, profile));
    }

    /// Every peer's state, for `show bfd peers`.
    pub async fn peers(&self) -> Result<Vec<PeerView>, String> {
        let (tx, rx) = oneshot::channel();
        self.commands.send(Command::Snapshot(tx))?;
        rx.await.map_err(|_| "the BFD thread did not answer".to_string())
    }
}

struct Peer {
    spec: PeerSpec,
    session: Session,
    socket: UdpSocket,
    link: watch::Sender<BfdLink>,
    /// Summarises the lines about this peer's discarded packets (a wrong key, a spoof).
    discards: LogThrottle,
    /// Packets the receive thread discarded for this session ([`Admission::discarded`]).
    discarded_unqueued: Arc<AtomicU64>,
}

impl Peer {
    fn admission(&self) -> Admission {
        Admission {
            discriminator: self.session.local_discriminator(),
            takes_zero_discriminator: self.session.takes_zero_discriminator(),
            discarded: self.discarded_unqueued.clone(),
        }
    }

    /// The session's counters with the packets the receive thread discarded for it.
    fn counters(&self) -> Counters {
        let mut counters = self.session.counters();
        let unqueued = self.discarded_unqueued.load(Ordering::Relaxed);
        counters.control_input = counters.control_input.saturating_add(unqueued);
        counters.control_discarded = counters.control_discarded.saturating_add(unqueued);
        counters
    }
}

/// A receive socket and the TTL its filter requires.
struct Listener {
    /// The receive thread's socket (a second descriptor), to change its filter.
    socket: Socket,
    minimum_ttl: u8,
}

/// The session thread's state.
struct Worker {
    vrf: String,
    commands: mpsc::Receiver<Command>,
    packets: mpsc::Receiver<Inbound>,
    /// For the receive threads.
    packet_queue: mpsc::SyncSender<Inbound>,
    admitted: Admitted,
    stop: Arc<AtomicBool>,
    peers: Vec<Peer>,
    /// Receive sockets opened so far, by (IPv4?, hop).
    listening: HashMap<(bool, Hop), Listener>,
    /// Summarises queued packets that no session takes.
    unmatched: LogThrottle,
    /// Summarises the thread's own stalls.
    stalls: LogThrottle,
}

impl Worker {
    fn run(mut self) {
        let _span = thread_span(&self.vrf);
        if let Err(e) = super::realtime::raise_current_thread() {
            warn!("BFD thread keeps normal priority: {e}; under CPU load packets may be late");
        }
        // When this thread asked to run again; waking much later means the node stopped it.
        let mut asked_until = Instant::now();
        loop {
            loop {
                match self.commands.try_recv() {
                    Ok(command) => self.on_command(command),
                    Err(mpsc::TryRecvError::Empty) => break,
                    // Every handle is gone: nobody can add, remove or look any more.
                    Err(mpsc::TryRecvError::Disconnected) => return self.stopped(),
                }
            }
            // Packets that arrived before a deadline count before it is checked: after a
            // stall, the queue holds the peers' proof of life. At most one queue's worth, so a
            // flood cannot keep the timers from being looked at.
            for _ in 0..RECEIVE_QUEUE {
                match self.packets.try_recv() {
                    Ok(Inbound::Packet { from, hop, packet }) => self.on_packet(from, hop, packet),
                    Ok(Inbound::Wake) => {}
                    Err(mpsc::TryRecvError::Empty) => break,
                    Err(mpsc::TryRecvError::Disconnected) => return self.stopped(),
                }
            }
            let now = Instant::now();
            let late = now.saturating_duration_since(asked_until);
            if late > STALL {
                self.excuse_stall(late, now);
            }
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
            let now = Instant::now();
            let wait = next.map_or(Duration::from_secs(1), |d| d.saturating_duration_since(now));
            asked_until = now + wait;
            match self.packets.recv_timeout(wait) {
                Ok(Inbound::Packet { from, hop, packet }) => self.on_packet(from, hop, packet),
                Ok(Inbound::Wake) | Err(mpsc::RecvTimeoutError::Timeout) => {}
                Err(mpsc::RecvTimeoutError::Disconnected) => return self.stopped(),
            }
            if self.stop.load(Ordering::Relaxed) {
                return self.stopped();
            }
        }
    }

    /// This thread ran `late` after it asked to: the node did not run it, so a detection
    /// time that ran out meanwhile says nothing about the peer (see
    /// [`Session::excuse_local_stall`]).
    fn excuse_stall(&mut self, late: Duration, now: Instant) {
        let excused: Vec<IpAddr> = self
            .peers
            .iter_mut()
            .filter_map(|p| p.session.excuse_local_stall(now).then_some(p.spec.peer))
            .collect();
        if !excused.is_empty() {
            if let Some(held_back) = self.stalls.event(now) {
                warn!(
                    ?late, peers = ?excused,
                    "BFD thread ran late (the node stopped it): detection time measured again \
                     from now{}",
                    held_back_note(held_back)
                );
            }
        }
    }

    fn stopped(&self) {
        debug!("BFD thread stopped");
    }

    fn on_command(&mut self, command: Command) {
        match command {
            Command::Add(spec, link) => {
                if let Err(e) = self.add(spec.clone(), link) {
                    warn!(peer = %spec.peer, "cannot start the BFD session: {e}");
                }
            }
            Command::Snapshot(reply) => {
                let _ = reply.send(self.snapshot());
            }
            Command::Reconfigure(peer, config, profile) => {
                if let Some(index) = self.peers.iter().position(|p| p.spec.peer == peer) {
                    if let Some(p) = self.peers.get_mut(index) {
                        p.spec.config = config;
                        p.spec.profile = profile;
                    }
                    self.feed(index, Event::Reconfigure(config), Instant::now());
                    info!(vrf = %self.vrf, %peer, "BFD timers changed (Poll Sequence, RFC 5880 §6.8.3)");
                }
            }
            Command::Remove(peer) => {
                if let Some(index) = self.peers.iter().position(|p| p.spec.peer == peer) {
                    self.feed(index, Event::AdminDown, Instant::now());
                    let removed = self.peers.remove(index);
                    self.admit_peers(removed.spec.peer.is_ipv4(), removed.spec.hop);
                    info!(%peer, "BFD session removed (AdminDown sent)");
                }
            }
        }
    }

    fn on_packet(&mut self, from: IpAddr, hop: Hop, packet: ControlPacket) {
        // RFC 5880 §6.8.6: select the session by Your Discriminator when it is nonzero, else by
        // the addresses (RFC 5881 §3 / RFC 5883 §4). The session checks the rest.
        let found = self.peers.iter().position(|p| {
            p.spec.peer == from
                && p.spec.hop == hop
                && (packet.your_discriminator == 0
                    || packet.your_discriminator == p.session.local_discriminator())
        });
        match found {
            Some(index) => self.feed(index, Event::Received(packet), Instant::now()),
            None => {
                if let Some(held_back) = self.unmatched.event(Instant::now()) {
                    info!(
                        peer = %from, your = packet.your_discriminator,
                        "BFD packet for no session; discarded (RFC 5880 §6.8.6){}",
                        held_back_note(held_back)
                    );
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
        let mut session = Session::new(spec.config, discriminator, rand::random(), Instant::now());
        if let Some(auth) = &spec.auth {
            session = session.authenticated(auth.clone(), rand::random());
        }
        info!(
            peer = %spec.peer, hop = ?spec.hop, profile = %spec.profile,
            "BFD session started: tx {:?} rx {:?} x{}{}{}",
            spec.config.desired_min_tx, spec.config.required_min_rx, spec.config.detect_mult,
            if spec.config.passive { " (passive)" } else { "" },
            spec.auth.as_ref().map(|a| format!(", {} key ID {}", a.auth_type, a.key_id)).unwrap_or_default()
        );
        let (ipv4, hop) = (spec.peer.is_ipv4(), spec.hop);
        self.peers.push(Peer {
            spec,
            session,
            socket,
            link,
            discards: LogThrottle::new(LOG_PERIOD),
            discarded_unqueued: Arc::default(),
        });
        self.admit_peers(ipv4, hop);
        Ok(())
    }

    /// Tells the receive threads and the kernel which peers of a family and hop to accept
    /// packets from, after a session was added or removed.
    fn admit_peers(&mut self, ipv4: bool, hop: Hop) {
        let peers: Vec<(IpAddr, Admission)> = self
            .peers
            .iter()
            .filter(|p| p.spec.peer.is_ipv4() == ipv4 && p.spec.hop == hop)
            .map(|p| (p.spec.peer, p.admission()))
            .collect();
        {
            let mut admitted = self.admitted.write().unwrap_or_else(PoisonError::into_inner);
            admitted.retain(|(address, h), _| !(address.is_ipv4() == ipv4 && *h == hop));
            admitted.extend(peers.iter().map(|(address, a)| ((*address, hop), a.clone())));
        }
        let Some(listener) = self.listening.get(&(ipv4, hop)) else { return };
        let addresses: Vec<IpAddr> = peers.iter().map(|(address, _)| *address).collect();
        let filter = admission_filter(ipv4, listener.minimum_ttl, &addresses);
        if let Err(e) = listener.socket.attach_filter(&filter) {
            // The receive thread still checks every source; only the kernel's early drop is lost.
            warn!("cannot update the BFD socket filter: {e}");
        }
    }

    fn feed(&mut self, index: usize, event: Event, now: Instant) {
        let Some(peer) = self.peers.get_mut(index) else { return };
        let actions = peer.session.handle(event, now);
        if actions.iter().any(|a| matches!(a, Action::StateChanged { .. })) {
            // What the receive thread drops for this session depends on its state.
            let admission = peer.admission();
            let mut admitted = self.admitted.write().unwrap_or_else(PoisonError::into_inner);
            if let Some(entry) = admitted.get_mut(&(peer.spec.peer, peer.spec.hop)) {
                *entry = admission;
            }
        }
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
                        peer = %peer.spec.peer,
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
                Action::Discarded(why) => {
                    if let Some(held_back) = peer.discards.event(now) {
                        warn!(
                            peer = %peer.spec.peer,
                            "BFD packet discarded: {why}{}",
                            held_back_note(held_back)
                        );
                    }
                }
            }
        }
    }

    /// Opens (once per family and hop) the socket that receives from every peer, with a
    /// socket filter that drops packets below the required TTL or from other sources in the
    /// kernel.
    fn listen(&mut self, ipv4: bool, hop: Hop, minimum_ttl: u8) -> io::Result<()> {
        let required = match hop {
            // RFC 5881 §5: "received ... with a TTL or Hop Limit value of 255".
            Hop::Single => SINGLE_HOP_TTL,
            Hop::Multi => minimum_ttl,
        };
        if let Some(listener) = self.listening.get_mut(&(ipv4, hop)) {
            if hop == Hop::Multi && required < listener.minimum_ttl {
                // One socket serves every multihop peer: it admits the lowest minimum.
                warn!(
                    "multihop BFD peers with different minimum_ttl share one socket; \
                     accepting TTL >= {required} from all of them"
                );
                listener.minimum_ttl = required;
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
        // No peer of this kind is admitted yet: the caller's `admit_peers` opens the filter.
        socket.attach_filter(&admission_filter(ipv4, required, &[]))?;
        socket.bind(&SockAddr::from(SocketAddr::new(any, port)))?;
        socket.set_read_timeout(Some(Duration::from_millis(500)))?;
        let control = socket.try_clone()?;
        let receiver = Receiver {
            socket: socket.into(),
            hop,
            queue: self.packet_queue.clone(),
            admitted: self.admitted.clone(),
            stop: self.stop.clone(),
            vrf: self.vrf.clone(),
        };
        let name = format!("bfd-rx-{port}-{}", if ipv4 { "v4" } else { "v6" });
        thread::Builder::new().name(name).spawn(move || receiver.run())?;
        self.listening.insert((ipv4, hop), Listener { socket: control, minimum_ttl: required });
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
                    counters: p.counters(),
                }
            })
            .collect()
    }
}

// Classic BPF (linux/filter.h): BPF_LD|BPF_B|BPF_ABS, BPF_LD|BPF_W|BPF_ABS,
// BPF_JMP|BPF_JGE|BPF_K, BPF_JMP|BPF_JEQ|BPF_K, BPF_RET|BPF_K; and SKF_NET_OFF, the offset that
// addresses the network header from a transport socket.
const LD_B_ABS: u16 = 0x30;
const LD_W_ABS: u16 = 0x20;
const JGE_K: u16 = 0x35;
const JEQ_K: u16 = 0x15;
const RET_K: u16 = 0x06;
const SKF_NET_OFF: u32 = 0xfff0_0000;
/// Conditional jumps reach at most 255 instructions ahead, which bounds the sources one
/// program can list: one compare each for IPv4, eight instructions each for IPv6. With more
/// peers than this the kernel checks the TTL only and the receive thread checks sources alone.
const FILTER_MAX_V4_SOURCES: usize = 250;
const FILTER_MAX_V6_SOURCES: usize = 31;

/// A classic BPF program for a receive socket: accept only packets whose IPv4 TTL (octet 8 of
/// the IP header) or IPv6 Hop Limit (octet 7) is at least `minimum_ttl` and whose source is
/// one of `sources`. The kernel runs it before queueing, so a spoofed packet from further away,
/// or any packet from a stranger, never wakes the receive thread.
fn admission_filter(ipv4: bool, minimum_ttl: u8, sources: &[IpAddr]) -> Vec<SockFilter> {
    let ttl_offset = if ipv4 { 8 } else { 7 };
    let mut v4 = Vec::new();
    let mut v6 = Vec::new();
    for source in sources {
        match source {
            IpAddr::V4(address) => v4.push(u32::from(*address)),
            IpAddr::V6(address) => v6.push(address.octets()),
        }
    }
    // The source checks, each ending in a jump `accept` instructions ahead of its own position
    // (the program closes with "drop" then "accept"). Built back to front, so the distance
    // to the end is known.
    let mut checks: Vec<SockFilter> = Vec::new();
    let too_many =
        if ipv4 { v4.len() > FILTER_MAX_V4_SOURCES } else { v6.len() > FILTER_MAX_V6_SOURCES };
    if ipv4 && !too_many {
        // Octets 12-15 of the IPv4 header, loaded once; each compare jumps to "accept".
        checks.push(SockFilter::new(LD_W_ABS, 0, 0, SKF_NET_OFF + 12));
        for (index, address) in v4.iter().enumerate() {
            // Past the remaining compares and "drop".
            let to_accept = jump(v4.len() - index);
            checks.push(SockFilter::new(JEQ_K, to_accept, 0, *address));
        }
    } else if !ipv4 && !too_many {
        // Octets 8-23 of the IPv6 header, four words; a mismatch moves to the next address.
        for (index, octets) in v6.iter().enumerate() {
            let later_blocks = (v6.len() - index - 1) * 8;
            for (word_index, word) in octets.chunks_exact(4).enumerate() {
                let Ok(word) = <[u8; 4]>::try_from(word).map(u32::from_be_bytes) else { continue };
                let offset = 8 + 4 * u32::try_from(word_index).unwrap_or(0);
                checks.push(SockFilter::new(LD_W_ABS, 0, 0, SKF_NET_OFF + offset));
                if word_index == 3 {
                    checks.push(SockFilter::new(JEQ_K, jump(later_blocks + 1), 0, word));
                } else {
                    let rest_of_block = (3 - word_index) * 2;
                    checks.push(SockFilter::new(JEQ_K, 0, jump(rest_of_block), word));
                }
            }
        }
    }
    let mut program = vec![SockFilter::new(LD_B_ABS, 0, 0, SKF_NET_OFF + ttl_offset)];
    // TTL too low: to "drop", past the checks. Enough: on to the checks, or straight to
    // "accept" when the sources are not checked here.
    let to_drop = jump(checks.len());
    let to_checks = if too_many { to_drop.saturating_add(1) } else { 0 };
    program.push(SockFilter::new(JGE_K, to_checks, to_drop, u32::from(minimum_ttl)));
    program.extend(checks);
    program.push(SockFilter::new(RET_K, 0, 0, 0));
    program.push(SockFilter::new(RET_K, 0, 0, u32::MAX));
    program
}

/// A jump distance; the callers keep programs short enough for it to fit.
fn jump(distance: usize) -> u8 {
    u8::try_from(distance).unwrap_or(u8::MAX)
}

/// One listening socket's receive loop, in its own thread.
struct Receiver {
    socket: UdpSocket,
    hop: Hop,
    queue: mpsc::SyncSender<Inbound>,
    admitted: Admitted,
    stop: Arc<AtomicBool>,
    vrf: String,
}

/// What a receive thread drops, each kind summarised in the log on its own.
#[derive(Default)]
struct Drops {
    errors: Option<LogThrottle>,
    strangers: Option<LogThrottle>,
    malformed: Option<LogThrottle>,
    foreign_discriminator: Option<LogThrottle>,
    zero_discriminator: Option<LogThrottle>,
    queue_full: Option<LogThrottle>,
}

/// Counts one drop of a kind; true when a line about it is due (and sets the held-back count).
fn due(throttle: &mut Option<LogThrottle>, now: Instant, held_back: &mut u64) -> bool {
    match throttle.get_or_insert_with(|| LogThrottle::new(LOG_PERIOD)).event(now) {
        Some(count) => {
            *held_back = count;
            true
        }
        None => false,
    }
}

impl Receiver {
    fn run(self) {
        let _span = thread_span(&self.vrf);
        // The BFD thread has said whether real-time priority is available; no second warning.
        let _ = super::realtime::raise_current_thread();
        let mut buf = [0u8; 512];
        let mut drops = Drops::default();
        let mut backoff = RECEIVE_BACKOFF_MIN;
        let mut held_back = 0;
        while !self.stop.load(Ordering::Relaxed) {
            let (len, from) = match self.socket.recv_from(&mut buf) {
                Ok(pair) => {
                    backoff = RECEIVE_BACKOFF_MIN;
                    pair
                }
                Err(e)
                    if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut) =>
                {
                    continue
                }
                Err(e) => {
                    if due(&mut drops.errors, Instant::now(), &mut held_back) {
                        warn!(
                            "BFD receive error: {e}; retrying in {backoff:?}{}",
                            held_back_note(held_back)
                        );
                    }
                    thread::sleep(backoff);
                    backoff = backoff.saturating_mul(2).min(RECEIVE_BACKOFF_MAX);
                    continue;
                }
            };
            let from = from.ip().to_canonical();
            let now = Instant::now();
            let admission = self
                .admitted
                .read()
                .unwrap_or_else(PoisonError::into_inner)
                .get(&(from, self.hop))
                .cloned();
            let Some(admission) = admission else {
                if due(&mut drops.strangers, now, &mut held_back) {
                    warn!(
                        %from,
                        "BFD packet from an address that is no configured peer: dropped{}",
                        held_back_note(held_back)
                    );
                }
                continue;
            };
            let bytes = buf.get(..len).unwrap_or_default();
            let packet = match ControlPacket::decode(bytes) {
                Ok(packet) => packet,
                Err(e) => {
                    if due(&mut drops.malformed, now, &mut held_back) {
                        warn!(
                            peer = %from, "BFD packet discarded: {e}{}",
                            held_back_note(held_back)
                        );
                    }
                    continue;
                }
            };
            // RFC 5880 §6.8.6: a nonzero Your Discriminator selects the session; one that is not
            // this peer's session selects none, and need not wait in the queue to be told so.
            if packet.your_discriminator != 0
                && packet.your_discriminator != admission.discriminator
            {
                if due(&mut drops.foreign_discriminator, now, &mut held_back) {
                    warn!(
                        peer = %from, your = packet.your_discriminator,
                        "BFD packet for no session of this peer: dropped (RFC 5880 §6.8.6){}",
                        held_back_note(held_back)
                    );
                }
                continue;
            }
            // One naming no session while the session would discard it (Up, with or without
            // authentication) is discarded here, in its name: a flood of forged ones then never
            // fills the queue, and no forged digest is checked (RFC 5880 §6.8.6: the session is
            // selected before the packet is authenticated).
            if packet.your_discriminator == 0 && !admission.takes_zero_discriminator {
                admission.discarded.fetch_add(1, Ordering::Relaxed);
                if due(&mut drops.zero_discriminator, now, &mut held_back) {
                    warn!(
                        peer = %from,
                        "BFD packet discarded: {}{}",
                        Discard::ZeroDiscriminatorWhileUp(packet.state),
                        held_back_note(held_back)
                    );
                }
                continue;
            }
            match self.queue.try_send(Inbound::Packet { from, hop: self.hop, packet }) {
                Ok(()) => {}
                Err(mpsc::TrySendError::Full(_)) => {
                    if due(&mut drops.queue_full, now, &mut held_back) {
                        warn!(
                            peer = %from,
                            "BFD receive queue full ({RECEIVE_QUEUE} packets): packet dropped{}",
                            held_back_note(held_back)
                        );
                    }
                }
                Err(mpsc::TrySendError::Disconnected(_)) => return,
            }
        }
    }
}

/// The source address the kernel would use towards `peer` (for display only).
/// The span a BFD thread runs in: its events carry the VRF (`VRF=` in the journal, "default"
/// for the default VRF as FRR names it); the events about one session add `peer`.
fn thread_span(vrf: &str) -> tracing::span::EnteredSpan {
    tracing::info_span!("bfd", vrf = crate::config::vrf_display_name(vrf)).entered()
}

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
            auth: None,
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
            auth: None,
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
        // While Up, a Down naming no session may be forged: it is discarded (by the receive
        // thread, once it knows the session is Up) and counted as the session's.
        peer.send_to(&packet(State::Down, 78, 0).encode(), to).unwrap();
        std::thread::sleep(Duration::from_millis(10));
        let view = rt.block_on(runtime.peers()).unwrap();
        assert_eq!(view[0].counters.control_discarded, 1);
        assert_eq!(view[0].counters.control_input, 3);
        assert_ne!(view[0].local_diagnostic, Diagnostic::NeighborSignaledSessionDown);
        // Silence: 3 × 20 ms detection.
        std::thread::sleep(Duration::from_millis(120));
        let now = *link.borrow_and_update();
        assert_eq!(now, BfdLink { up: false, downs: 1 });
        let view = rt.block_on(runtime.peers()).unwrap();
        assert_eq!(view[0].local_diagnostic, Diagnostic::ControlDetectionTimeExpired);
    }

    /// Polls the runtime's view of its only peer until `ok` holds (2 s at most).
    fn wait_view(
        rt: &tokio::runtime::Runtime,
        runtime: &BfdRuntime,
        what: &str,
        ok: impl Fn(&PeerView) -> bool,
    ) -> PeerView {
        let deadline = Instant::now() + Duration::from_secs(2);
        loop {
            let view = rt.block_on(runtime.peers()).unwrap();
            match view.first() {
                Some(v) if ok(v) => return v.clone(),
                last if Instant::now() > deadline => panic!("{what}: {last:?}"),
                _ => std::thread::sleep(Duration::from_millis(5)),
            }
        }
    }

    /// An authenticated single-hop session over loopback (port 3784; the test above has 4784):
    /// once Up, packets without its discriminator are discarded in its name, a forged digest
    /// and the peer's own signature alike (RFC 5880 §6.8.6), and only the peer's Down that
    /// names the session takes it down.
    #[test]
    fn an_up_authenticated_session_drops_zero_discriminator_packets() {
        use crate::bfd::auth::{AuthState, Key};
        use crate::bfd::packet::{AuthSection, AuthType};
        let kind = AuthType::MeticulousKeyedSha1;
        let auth =
            Authentication { auth_type: kind, key_id: 1, key: Key::new(kind, b"k").unwrap() };
        let runtime = BfdRuntime::start("").unwrap();
        let spec = PeerSpec {
            peer: IpAddr::V4(Ipv4Addr::new(127, 0, 0, 3)),
            local: None,
            hop: Hop::Single,
            config: SessionConfig {
                desired_min_tx: Duration::from_millis(20),
                required_min_rx: Duration::from_millis(20),
                detect_mult: 3,
                passive: false,
            },
            minimum_ttl: 255,
            profile: "test".into(),
            auth: Some(auth.clone()),
        };
        let mut link = runtime.add_peer(spec).unwrap();
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let peer = UdpSocket::bind("127.0.0.3:0").unwrap();
        peer.set_ttl(255).unwrap(); // RFC 5881 §5: anything lower is filtered
        let to: SocketAddr = "127.0.0.1:3784".parse().unwrap();
        let mut signer = AuthState::new(auth, 1000);
        // The peer advertises 1 s × 3, so the session stays Up through the test without more
        // packets from it.
        let mut send = |state: State, your: u32| {
            let mut p = packet(state, 77, your);
            p.desired_min_tx_us = 1_000_000;
            signer.sign(&mut p, Instant::now());
            peer.send_to(&p.encode(), to).unwrap();
        };
        // Once the session is listed, its socket listens and admits the peer.
        wait_view(&rt, &runtime, "the session", |v| v.state == State::Down);
        send(State::Down, 0);
        let view = wait_view(&rt, &runtime, "Init", |v| v.state == State::Init);
        send(State::Up, view.local_discriminator);
        let up = wait_view(&rt, &runtime, "Up", |v| v.state == State::Up);
        assert!(link.borrow_and_update().up);
        assert_eq!(up.counters.control_discarded, 0);
        // A forger's packet (made-up digest) and the peer's own signed Down, neither naming
        // the session.
        let mut forged = packet(State::Down, 78, 0);
        forged.auth = Some(AuthSection {
            auth_type: kind,
            key_id: 1,
            reserved: 0,
            sequence: 2000,
            digest: [0x5a; 20],
        });
        peer.send_to(&forged.encode(), to).unwrap();
        send(State::Down, 0);
        let view = wait_view(&rt, &runtime, "two discards", |v| v.counters.control_discarded == 2);
        assert_eq!(view.state, State::Up, "{view:?}");
        assert_eq!(view.local_diagnostic, Diagnostic::None, "{view:?}");
        assert_eq!(*link.borrow_and_update(), BfdLink { up: true, downs: 0 });
        // The peer's signed Down with our discriminator is obeyed.
        send(State::Down, view.local_discriminator);
        let down = wait_view(&rt, &runtime, "Down", |v| v.state != State::Up);
        assert_eq!(down.local_diagnostic, Diagnostic::NeighborSignaledSessionDown);
        assert_eq!(down.counters.control_discarded, 2);
    }

    /// Sends one datagram from `from` with `ttl` to `to` and says whether it was delivered.
    fn delivered(to: &UdpSocket, from: SocketAddr, ttl: u32) -> bool {
        let domain = if from.is_ipv4() { Domain::IPV4 } else { Domain::IPV6 };
        let sender = Socket::new(domain, Type::DGRAM, None).unwrap();
        if from.is_ipv4() {
            sender.set_ttl_v4(ttl).unwrap();
        } else {
            sender.set_unicast_hops_v6(ttl).unwrap();
        }
        sender.bind(&from.into()).unwrap();
        sender.send_to(&[1], &to.local_addr().unwrap().into()).unwrap();
        let mut buf = [0u8; 4];
        to.recv_from(&mut buf).is_ok()
    }

    fn filtered(bind: &str, filter: &[SockFilter]) -> UdpSocket {
        let socket = Socket::from(UdpSocket::bind(bind).unwrap());
        socket.attach_filter(filter).unwrap();
        socket.set_read_timeout(Some(Duration::from_millis(100))).unwrap();
        socket.into()
    }

    #[test]
    fn the_socket_filter_checks_ttl_and_source_in_the_kernel() {
        let any = |a: &str| SocketAddr::new(a.parse().unwrap(), 0);
        let peers: Vec<IpAddr> =
            ["127.0.0.5", "127.0.0.2", "127.0.0.7"].iter().map(|a| a.parse().unwrap()).collect();
        let v4 = filtered("127.0.0.1:0", &admission_filter(true, 255, &peers));
        assert!(!delivered(&v4, any("127.0.0.2"), 254), "TTL 254 from a peer");
        assert!(delivered(&v4, any("127.0.0.2"), 255), "TTL 255 from a peer");
        assert!(delivered(&v4, any("127.0.0.7"), 255), "the last peer");
        assert!(!delivered(&v4, any("127.0.0.3"), 255), "a stranger");
        // No peers: nothing passes. Too many to list: the TTL alone decides.
        let none = filtered("127.0.0.1:0", &admission_filter(true, 255, &[]));
        assert!(!delivered(&none, any("127.0.0.2"), 255));
        let many: Vec<IpAddr> = (0..=FILTER_MAX_V4_SOURCES as u32)
            .map(|i| IpAddr::V4(Ipv4Addr::from(0x0a00_0000 + i)))
            .collect();
        let ttl_only = filtered("127.0.0.1:0", &admission_filter(true, 255, &many));
        assert!(delivered(&ttl_only, any("127.0.0.3"), 255));
        assert!(!delivered(&ttl_only, any("127.0.0.3"), 254));
        // IPv6: the four words of the source, after another peer's block.
        let v6_peers: Vec<IpAddr> =
            ["2001:db8::1", "::1"].iter().map(|a| a.parse().unwrap()).collect();
        let v6 = filtered("[::1]:0", &admission_filter(false, 255, &v6_peers));
        assert!(delivered(&v6, any("::1"), 255), "IPv6 peer");
        assert!(!delivered(&v6, any("::1"), 254), "IPv6 Hop Limit 254");
        let other = filtered("[::1]:0", &admission_filter(false, 255, &v6_peers[..1]));
        assert!(!delivered(&other, any("::1"), 255), "IPv6 stranger");
    }
}
