//! The tokio driver of one BGP neighbor. It owns the TCP connections (at most two during a
//! collision, RFC 4271 §6.8), feeds bytes and time into the sans-IO [`Fsm`], carries out the
//! actions it returns, decodes UPDATEs with the negotiated context and hands them to the RIB
//! task, and pulls the peer's Adj-RIB-Out from the RIB when the socket can take more.
//!
//! Reading and writing run in their own tasks per connection so a peer that stops reading
//! never stops us from reading it (and the other way round). The session never waits on its
//! writer ([`Outbox`]): a peer that stops reading only stops getting UPDATEs, and the
//! SendHoldTimer (RFC 9687, in the FSM) ends the connection; commands, timers and the
//! listener's hand-overs are handled meanwhile.

use super::fsm::{self, Action, ConnId, Event, Fsm, Negotiated};
use super::graceful_restart::{self, DownCause};
use super::link_local;
use super::max_prefix::PrefixLimit;
use super::outbox::Outbox;
use super::policy::{ExportPolicy, ImportPolicy};
use super::rib::PeerInfo;
use super::rib_task::{PeerLink, PeerPolicy, PeerSignal, RibHandle};
use super::stats::PeerStats;
use super::transport::{self, TransportOptions};
use super::wire::attr_codec::EncodeContext;
use super::wire::attributes::Family;
use super::wire::message::{
    decode_message, encode_route_refresh, frame_len, Message, RouteRefresh,
};
use super::wire::notification::Notification;
use super::wire::packer::{end_of_rib, pack_announcements, pack_withdrawals};
use super::wire::rfc7606::UPDATE_MESSAGE_ERROR;
use super::wire::update::{decode_update, UpdateContext};
use crate::logthrottle::{held_back_note, LogThrottle, LOG_PERIOD};
use std::net::{IpAddr, SocketAddr};
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::time::Instant;
use tokio::io::AsyncReadExt;
use tokio::net::TcpStream;
use tokio::sync::{mpsc, oneshot};
use tracing::{debug, info, warn, Instrument};

/// Messages to a session task.
#[derive(Debug)]
pub enum SessionCommand {
    /// The instance's listener accepted a connection from this neighbor.
    Accepted(TcpStream),
    /// Stop the session with a Cease NOTIFICATION of this subcode (RFC 4486).
    Stop { subcode: u8, reason: String },
    /// Like `Stop`, then end the task: the neighbor left the config (or changed, and a new
    /// session replaces this one).
    Remove { subcode: u8, reason: String },
    /// The neighbor's BFD session changed (RFC 5882 §4.3): Down stops BGP at once with
    /// Cease/"BFD Down" (RFC 9384) and holds it down; Up lets it start again.
    BfdState { up: bool },
    /// A reload: new policies (`None`: unchanged) applied without a reset, and with `refresh`
    /// the peer asked to send its routes again because import now allows more.
    Reconfigure { policy: Option<PeerPolicy>, refresh: bool, reply: oneshot::Sender<LiveOutcome> },
    /// `clear bgp`: reset the session or exchange the routes again; answered with what was
    /// done, or why it cannot be.
    Clear { how: ClearHow, reply: oneshot::Sender<Result<String, String>> },
}

/// What `clear bgp` does to a session, as FRR's `clear bgp ADDR [soft [in|out]]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ClearHow {
    /// Cease/Administrative Reset (RFC 4486 §4, subcode 4), then connect again.
    Hard,
    /// Ask the peer to send its routes again (ROUTE-REFRESH, RFC 2918).
    SoftIn,
    /// Send ours again.
    SoftOut,
    /// Both.
    Soft,
}

/// RFC 4486 §4: Cease subcode 4, "Administrative Reset".
const CEASE_ADMINISTRATIVE_RESET: u8 = 4;

/// What [`SessionCommand::Reconfigure`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LiveOutcome {
    /// Applied to the established session; `refreshed` when ROUTE-REFRESH went out.
    Applied { refreshed: bool },
    /// The session is not established: the new policies apply when it comes up.
    NotEstablished,
    /// The peer cannot resend its routes (it did not advertise route refresh), so the session
    /// was reset to learn them again under the new policy; the reason says so.
    Reset(String),
}

/// RFC 9384 §2: Cease subcode 10, "BFD Down".
pub const CEASE_BFD_DOWN: u8 = 10;

/// What a connection's reader task reports.
enum ReadEvent {
    /// Bytes holding one or more complete messages.
    Frames(Vec<u8>),
    /// A framing error: the NOTIFICATION to send.
    Malformed(Notification, String),
    Closed(String),
}

/// One TCP connection and its reader/writer tasks.
struct Conn {
    id: ConnId,
    /// Our end of the connection: the next hop we announce (next-hop-self).
    local: Option<SocketAddr>,
    outbox: Arc<Outbox>,
    reader: mpsc::Receiver<ReadEvent>,
    reader_task: tokio::task::JoinHandle<()>,
    writer_task: Option<tokio::task::JoinHandle<()>>,
}

/// How long a closed connection's writer may take to flush its last messages (usually a
/// NOTIFICATION) before it is cut off.
const FLUSH_GRACE: std::time::Duration = std::time::Duration::from_secs(5);

impl Drop for Conn {
    fn drop(&mut self) {
        self.reader_task.abort();
        // The writer ends once its queue is written (usually a NOTIFICATION), or is cut off.
        self.outbox.close();
        if let Some(writer) = self.writer_task.take() {
            tokio::spawn(async move {
                tokio::time::sleep(FLUSH_GRACE).await;
                writer.abort();
            });
        }
    }
}

/// Static settings of one session.
pub struct SessionParams {
    pub remote: SocketAddr,
    pub local_asn: u32,
    pub transport: TransportOptions,
    pub max_prefixes: Option<PrefixLimit>,
    pub import: ImportPolicy,
    pub export: ExportPolicy,
    /// RFC 4724 helper: keep the peer's routes while it restarts (the neighbor's
    /// `graceful_restart`), and for how long to wait for its End-of-RIB once it is back.
    pub graceful_restart: bool,
    pub stale_path_time: std::time::Duration,
}

/// Spawns the task of one neighbor. Returns the command sender the instance keeps.
pub fn spawn(
    params: SessionParams,
    fsm: Fsm,
    rib: RibHandle,
    stats: Arc<PeerStats>,
) -> mpsc::Sender<SessionCommand> {
    let (tx, rx) = mpsc::channel(16);
    // `peer` and `vrf` become PEER= and VRF= on every event of the session in the journal
    // (`ops::logging`), so `journalctl PEER=192.0.2.1` shows one neighbor's story.
    let vrf = params.transport.device.as_deref().unwrap_or("default");
    let span = tracing::info_span!("session", peer = %params.remote.ip(), vrf);
    let helper = graceful_restart::Helper::new(params.graceful_restart, params.stale_path_time);
    let session = Session {
        params,
        helper,
        restarting: None,
        fsm,
        rib,
        stats,
        commands: rx,
        conns: Vec::new(),
        connecting: None,
        connect_requested: false,
        md5_hint_given: false,
        held_by_bfd: false,
        next_conn: 0,
        established: None,
        pending_out: false,
        signal: Arc::new(PeerSignal::default()),
        discard_log: LogThrottle::new(LOG_PERIOD),
        refresh_log: LogThrottle::new(LOG_PERIOD),
    };
    tokio::spawn(session.run().instrument(span));
    tx
}

struct EstablishedState {
    conn: ConnId,
    link: PeerLink,
    ctx: UpdateContext,
    encode: EncodeContext,
    families: Vec<Family>,
    /// End-of-RIB (RFC 4724 §2) goes out once, after the initial table.
    eor_sent: bool,
    /// The peer advertised the Route Refresh capability (RFC 2918 §2).
    route_refresh: bool,
}

struct Session {
    params: SessionParams,
    /// RFC 4724 helper state: the peer's routes kept while it restarts.
    helper: graceful_restart::Helper,
    /// The RIB's link of a peer that is restarting (its routes kept as stale), handed back
    /// when the session returns so the RIB replaces them in place.
    restarting: Option<PeerLink>,
    fsm: Fsm,
    rib: RibHandle,
    stats: Arc<PeerStats>,
    commands: mpsc::Receiver<SessionCommand>,
    conns: Vec<Conn>,
    connecting: Option<tokio::task::JoinHandle<()>>,
    /// The FSM asked for an outgoing connection; started after the current event.
    connect_requested: bool,
    /// The "no answer" diagnosis was logged since the session was last up.
    md5_hint_given: bool,
    /// Stopped because BFD went Down; started again when it is Up.
    held_by_bfd: bool,
    next_conn: u64,
    established: Option<EstablishedState>,
    /// The RIB has announced pending Adj-RIB-Out changes for this peer.
    pending_out: bool,
    /// The RIB wakes the session through it: output queued, or a Cease asked for.
    signal: Arc<PeerSignal>,
    /// RFC 7606 outcomes are logged once per period, with a count of the rest.
    discard_log: LogThrottle,
    /// ROUTE-REFRESH requests are logged the same way.
    refresh_log: LogThrottle,
}

/// What woke the session loop.
enum Wake {
    Command(Option<SessionCommand>),
    Read(usize, Option<ReadEvent>),
    Deadline,
    /// The RIB task has output for the peer, or asks for a Cease.
    Rib,
    WriterReady,
    Connected(ConnId, std::io::Result<TcpStream>),
}

impl Session {
    async fn run(mut self) {
        let (connected_tx, mut connected_rx) =
            mpsc::channel::<(ConnId, std::io::Result<TcpStream>)>(1);
        self.apply(Event::ManualStart).await;
        loop {
            let deadline = match (self.fsm.next_deadline(), self.helper.deadline()) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            // Output is waiting but the writer was full: wake when it has room again.
            let blocked_writer = self
                .established
                .as_ref()
                .filter(|_| self.pending_out)
                .and_then(|est| self.conns.iter().find(|c| c.id == est.conn))
                .map(|c| c.outbox.clone());
            let wake = tokio::select! {
                cmd = self.commands.recv() => Wake::Command(cmd),
                (index, ev) = recv_any(&mut self.conns) => Wake::Read(index, ev),
                _ = sleep_until(deadline) => Wake::Deadline,
                _ = self.signal.woken(), if self.established.is_some() => Wake::Rib,
                _ = writer_room(blocked_writer) => Wake::WriterReady,
                res = connected_rx.recv() => match res {
                    Some((id, r)) => Wake::Connected(id, r),
                    None => continue,
                },
            };
            match wake {
                Wake::Command(None) => {
                    // The instance dropped us: the neighbor was removed from the config.
                    self.apply(Event::ManualStop {
                        subcode: 3,
                        reason: "peer de-configured".into(),
                    })
                    .await;
                    break;
                }
                Wake::Command(Some(SessionCommand::Accepted(stream))) => {
                    let peer = self.params.remote.ip();
                    if let Err(e) = transport::apply_ttl(
                        stream.as_raw_fd(),
                        peer,
                        self.params.transport.ttl,
                        self.params.transport.min_ttl,
                    ) {
                        warn!("cannot set TTL options on accepted connection: {e}");
                    }
                    let _ = stream.set_nodelay(true);
                    let id = self.new_conn_id();
                    self.add_conn(id, stream);
                    self.apply(Event::TcpAccepted(id)).await;
                }
                Wake::Command(Some(SessionCommand::Stop { subcode, reason })) => {
                    self.apply(Event::ManualStop { subcode, reason }).await;
                    self.stats.set_held_down_state(None);
                }
                Wake::Command(Some(SessionCommand::Remove { subcode, reason })) => {
                    info!("neighbor removed from the running config: {reason}");
                    self.apply(Event::ManualStop { subcode, reason }).await;
                    break;
                }
                Wake::Command(Some(SessionCommand::BfdState { up })) => {
                    if !up && !self.held_by_bfd {
                        self.held_by_bfd = true;
                        info!("BFD down: closing the session (Cease/BFD Down, RFC 9384)");
                        let reason = "BFD Down".to_string();
                        self.apply(Event::ManualStop { subcode: CEASE_BFD_DOWN, reason }).await;
                    } else if up && std::mem::take(&mut self.held_by_bfd) {
                        info!("BFD up again: restarting the session");
                        self.apply(Event::ManualStart).await;
                    }
                }
                Wake::Command(Some(SessionCommand::Reconfigure { policy, refresh, reply })) => {
                    let outcome = self.reconfigure(policy, refresh).await;
                    let _ = reply.send(outcome);
                }
                Wake::Command(Some(SessionCommand::Clear { how, reply })) => {
                    let outcome = self.clear(how).await;
                    let _ = reply.send(outcome);
                }
                Wake::Read(i, ev) => self.on_read(i, ev).await,
                Wake::Deadline => {
                    // RFC 9687: tell the FSM how far each writer has got before its timers run.
                    let now = Instant::now();
                    for conn in &self.conns {
                        let progress = conn.outbox.progress(now);
                        let _ = self.fsm.handle(Event::SendProgress(conn.id), progress);
                    }
                    self.apply(Event::Tick).await;
                    if self.stats.snapshot_held_down().is_some_and(|until| until.is_some())
                        && self.fsm.held_down_until().is_none()
                    {
                        // The max-prefix hold-down is over: the session is starting again.
                        self.stats.set_held_down_state(None);
                    }
                    let actions = self.helper.tick(Instant::now());
                    self.graceful_restart(actions).await;
                }
                Wake::Rib => {
                    if let Some((subcode, reason)) = self.signal.take_cease() {
                        self.rib_cease(subcode, reason).await;
                    } else {
                        self.pending_out = true;
                        self.flush_outbound().await;
                    }
                }
                Wake::WriterReady => self.flush_outbound().await,
                Wake::Connected(id, result) => {
                    self.connecting = None;
                    match result {
                        Ok(stream) => {
                            self.add_conn(id, stream);
                            self.apply(Event::TcpConnected(id)).await;
                        }
                        Err(e) => {
                            if e.kind() == std::io::ErrorKind::TimedOut {
                                self.no_answer();
                            } else {
                                debug!("connect to {} failed: {e}", self.params.remote);
                            }
                            self.stats.set_last_error(format!("connect: {e}"));
                            self.apply(Event::TcpFailed(id)).await;
                        }
                    }
                }
            }
            self.start_pending_connect(&connected_tx);
        }
        // The neighbor is gone: routes kept for a restart it will not finish go too.
        if let Some(link) = self.restarting.take() {
            link.peer_down().await;
        }
    }

    /// The RIB asks for a Cease: max-prefix (RFC 4486 subcode 1), which may start the
    /// session again after `max_prefixes_restart_time`.
    async fn rib_cease(&mut self, subcode: u8, reason: String) {
        let max_prefix = super::wire::notification::cease_subcode::MAX_PREFIXES_REACHED;
        if subcode != max_prefix {
            warn!("ending the session: {reason}");
            self.apply(Event::ManualStop { subcode, reason }).await;
            return;
        }
        let restart_after = self.params.max_prefixes.and_then(|m| m.restart_time);
        match restart_after {
            Some(after) => warn!(
                "ending the session with Cease/Maximum Number of Prefixes Reached: {reason}; \
                 starting it again in {} s (max_prefixes_restart_time)",
                after.as_secs()
            ),
            None => warn!(
                "ending the session with Cease/Maximum Number of Prefixes Reached: {reason}; \
                 it stays down until a reload or restart (no max_prefixes_restart_time)"
            ),
        }
        self.apply(Event::MaxPrefixExceeded { reason, restart_after }).await;
        self.stats.set_held_down_state(Some(self.fsm.held_down_until()));
    }

    /// Starts the outgoing connection the FSM asked for, if any.
    fn start_pending_connect(&mut self, done: &mpsc::Sender<(ConnId, std::io::Result<TcpStream>)>) {
        if !std::mem::take(&mut self.connect_requested) {
            return;
        }
        // A new Connect supersedes an attempt still in flight.
        if let Some(old) = self.connecting.take() {
            old.abort();
            self.no_answer();
        }
        let id = self.new_conn_id();
        let remote = self.params.remote;
        let opts = self.params.transport.clone();
        let done = done.clone();
        self.connecting = Some(tokio::spawn(async move {
            let _ = done.send((id, transport::connect(remote, &opts).await)).await;
        }));
    }

    /// An outgoing attempt got no answer at all (timed out, or was superseded by the next
    /// retry). With TCP-MD5 that is the signature of a password mismatch: RFC 2385 segments
    /// with a wrong or missing signature are dropped without a reply. Said once per outage.
    fn no_answer(&mut self) {
        if self.md5_hint_given {
            return;
        }
        self.md5_hint_given = true;
        if self.params.transport.md5_key.is_some() {
            warn!(
                "no answer from {} to our connection attempts; TCP-MD5 is configured for this \
                 neighbor, so a password mismatch on either side is the likely cause",
                self.params.remote
            );
        } else {
            info!("no answer from {} to our connection attempts", self.params.remote);
        }
    }

    fn new_conn_id(&mut self) -> ConnId {
        self.next_conn += 1;
        ConnId(self.next_conn)
    }

    fn add_conn(&mut self, id: ConnId, stream: TcpStream) {
        let local = stream.local_addr().ok();
        let (read, write) = stream.into_split();
        let outbox = Arc::new(Outbox::default());
        let (rtx, rrx) = mpsc::channel::<ReadEvent>(8);
        let writer = tokio::spawn({
            let outbox = outbox.clone();
            async move { outbox.write_to(write).await }
        });
        let reader = tokio::spawn(read_frames(read, rtx));
        self.conns.push(Conn {
            id,
            local,
            outbox,
            reader: rrx,
            reader_task: reader,
            writer_task: Some(writer),
        });
    }

    async fn on_read(&mut self, index: usize, ev: Option<ReadEvent>) {
        let Some(conn) = self.conns.get(index) else { return };
        let id = conn.id;
        match ev {
            None | Some(ReadEvent::Closed(_)) => {
                if let Some(ReadEvent::Closed(why)) = &ev {
                    debug!("connection closed: {why}");
                }
                self.apply(Event::TcpClosed(id)).await;
            }
            Some(ReadEvent::Malformed(notification, why)) => {
                warn!("malformed message: {why}");
                self.apply(Event::FatalUpdateError(id, notification)).await;
            }
            Some(ReadEvent::Frames(bytes)) => self.on_frames(id, &bytes).await,
        }
    }

    async fn on_frames(&mut self, id: ConnId, mut bytes: &[u8]) {
        let mut updates = Vec::new();
        while let Ok(Some(len)) = frame_len(bytes) {
            let Some((frame, rest)) = bytes.split_at_checked(len) else { break };
            bytes = rest;
            self.stats.count_received(frame);
            let message = match decode_message(frame) {
                Ok(m) => m,
                Err(e) => {
                    warn!("{e}");
                    self.apply(Event::FatalUpdateError(id, e.notification.clone())).await;
                    return;
                }
            };
            if let Message::Update(body) = &message {
                match self.established.as_ref() {
                    Some(est) if est.conn == id => match decode_update(body, &est.ctx) {
                        Ok(decoded) => {
                            // A peer can send these in every UPDATE: one line per period,
                            // with the count of the rest.
                            let problems = decoded.discarded.len()
                                + usize::from(decoded.treat_as_withdraw.is_some());
                            let mut due = None;
                            for _ in 0..problems {
                                due = self.discard_log.event(Instant::now()).or(due);
                            }
                            if let Some(held) = due {
                                let first = decoded
                                    .treat_as_withdraw
                                    .as_ref()
                                    .map(|p| ("treat-as-withdraw", p))
                                    .or(decoded
                                        .discarded
                                        .first()
                                        .map(|p| ("attribute discarded", p)));
                                if let Some((what, problem)) = first {
                                    warn!(
                                        attribute = problem.type_code,
                                        "{what}: {} ({}){}",
                                        problem.rule,
                                        problem.detail,
                                        held_back_note(held)
                                    );
                                }
                            }
                            let end_of_rib = decoded.end_of_rib;
                            updates.push(decoded);
                            if let Some(family) = end_of_rib {
                                // What came before the marker reaches the RIB first.
                                self.flush_updates(&mut updates).await;
                                self.stats.end_of_rib_received(family);
                                let actions = self.helper.end_of_rib(family);
                                self.graceful_restart(actions).await;
                            }
                        }
                        Err(e) => {
                            warn!("UPDATE error, resetting the session: {}", e.reason);
                            self.flush_updates(&mut updates).await;
                            let n = Notification::new(
                                UPDATE_MESSAGE_ERROR,
                                e.subcode.code(),
                                e.data.clone(),
                            );
                            self.apply(Event::FatalUpdateError(id, n)).await;
                            return;
                        }
                    },
                    _ => {}
                }
            }
            if let Message::RouteRefresh(rr) = &message {
                self.on_route_refresh(id, rr.afi, rr.safi).await;
            }
            let is_update = matches!(message, Message::Update(_));
            self.apply(Event::Received(id, message)).await;
            if !is_update {
                // Keep UPDATEs in order relative to a NOTIFICATION or OPEN after them.
                self.flush_updates(&mut updates).await;
            }
        }
        self.flush_updates(&mut updates).await;
    }

    /// RFC 2918 §4: re-advertise the Adj-RIB-Out of the requested family, if negotiated.
    async fn on_route_refresh(&mut self, id: ConnId, afi: u16, safi: u8) {
        let Some(est) = self.established.as_ref().filter(|e| e.conn == id) else { return };
        let family =
            est.families.iter().find(|f| f.afi as u16 == afi && f.safi as u8 == safi).copied();
        match family {
            Some(family) => {
                // A peer can send these in a loop: one line per period, with a count.
                if let Some(held) = self.refresh_log.event(Instant::now()) {
                    info!(
                        "ROUTE-REFRESH for {family:?}: re-sending our routes{}",
                        held_back_note(held)
                    );
                }
                est.link.route_refresh(family).await;
            }
            // RFC 2918 §4: ignore a refresh for a family that was not negotiated.
            None => debug!("ignoring ROUTE-REFRESH for AFI {afi} SAFI {safi}: not negotiated"),
        }
    }

    async fn flush_updates(&mut self, updates: &mut Vec<super::wire::update::DecodedUpdate>) {
        if updates.is_empty() {
            return;
        }
        let batch = std::mem::take(updates);
        if let Some(est) = &self.established {
            est.link.send_updates(batch).await;
        }
    }

    /// Feeds one event to the FSM and carries out its actions.
    async fn apply(&mut self, event: Event<'_>) {
        let actions = self.fsm.handle(event, Instant::now());
        // The FSM closes a connection before it says why the session went down; graceful
        // restart needs the why when the RIB is told.
        let cause = actions.iter().find_map(|a| match a {
            Action::Down { reason } => Some(down_cause(&reason.cause)),
            _ => None,
        });
        for action in actions {
            match action {
                Action::Connect => self.connect_requested = true,
                Action::Send(id, bytes) => {
                    if let Some(conn) = self.conns.iter().find(|c| c.id == id) {
                        self.stats.count_sent(&bytes);
                        // Never waits: the FSM's messages always fit (see `Outbox`).
                        conn.outbox.push(bytes);
                    }
                }
                Action::Close(id) => {
                    if self.established.as_ref().is_some_and(|e| e.conn == id) {
                        self.session_down(cause.unwrap_or(DownCause::ConnectionLost)).await;
                    }
                    // Dropping the connection lets its writer flush what is queued (a
                    // NOTIFICATION) and then close.
                    self.conns.retain(|c| c.id != id);
                }
                Action::Established(id, negotiated) => self.session_up(id, negotiated).await,
                Action::Down { reason } => {
                    info!("session down: {reason}");
                    self.stats.set_last_error(reason.to_string());
                    self.session_down(down_cause(&reason.cause)).await;
                    self.stats.set_state(self.fsm.state());
                }
            }
        }
        self.stats.set_state(self.fsm.state());
    }

    async fn session_up(&mut self, id: ConnId, negotiated: Negotiated) {
        info!(
            "session established: AS {} id {} hold {}s families {:?}",
            negotiated.remote_asn,
            negotiated.remote_id,
            negotiated.hold_time.as_secs(),
            negotiated.families
        );
        let local = self.conns.iter().find(|c| c.id == id).and_then(|c| c.local);
        let local_address = local.map(|a| a.ip().to_canonical()).unwrap_or(self.params.remote.ip());
        // RFC 2545 §3: our link-local address goes beside the global next hop when the peer
        // shares our session address's subnet.
        let local_link_local = match (local_address, self.params.remote.ip()) {
            (IpAddr::V6(local), IpAddr::V6(peer)) => link_local::shared_link_local(local, peer),
            _ => None,
        };
        let info = PeerInfo {
            address: self.params.remote.ip(),
            remote_asn: negotiated.remote_asn,
            local_asn: self.params.local_asn,
            remote_id: negotiated.remote_id,
            ebgp: negotiated.is_ebgp,
            local_address,
            local_link_local,
            families: negotiated.families.clone(),
            import: self.params.import.clone(),
            export: self.params.export.clone(),
        };
        self.stats.set_session(
            negotiated.remote_id,
            negotiated.remote_asn,
            Some(local_address),
            super::stats::NegotiatedView {
                hold_time: negotiated.hold_time.as_secs(),
                keepalive: negotiated.keepalive_time.as_secs(),
                capabilities: negotiated.capabilities.clone(),
            },
        );
        // A restarting peer's RIB entry is resumed: its stale routes are replaced in place.
        let resume = self.restarting.take().map(|link| link.id);
        let Some(link) =
            self.rib.peer_up(info, self.signal.clone(), self.params.max_prefixes, resume).await
        else {
            return;
        };
        self.stats.set_families(&negotiated.families);
        let actions =
            self.helper.session_up(negotiated.remote_graceful_restart.as_ref(), Instant::now());
        let ctx = UpdateContext {
            four_octet_as: negotiated.four_octet_as,
            ebgp: negotiated.is_ebgp,
            families: negotiated.families.clone(),
        };
        let outbox = self.conns.iter().find(|c| c.id == id).map(|c| c.outbox.clone());
        self.stats.established(outbox);
        self.md5_hint_given = false;
        self.established = Some(EstablishedState {
            conn: id,
            link,
            ctx,
            encode: EncodeContext { four_octet_as: negotiated.four_octet_as },
            families: negotiated.families,
            eor_sent: false,
            route_refresh: negotiated.route_refresh,
        });
        self.graceful_restart(actions).await;
        self.pending_out = true;
        self.flush_outbound().await;
    }

    /// A reload's new policies, applied without a reset. The session's own copy changes (for
    /// when it next comes up); an established session also hands them to the RIB. When import
    /// now allows more, the peer is asked to send its routes again (RFC 2918 §3: only to a
    /// peer that advertised the capability); one that cannot is reset instead, as the routes
    /// the old policy refused were not kept.
    async fn reconfigure(&mut self, policy: Option<PeerPolicy>, refresh: bool) -> LiveOutcome {
        if let Some(policy) = &policy {
            self.params.import = policy.import.clone();
            self.params.export = policy.export.clone();
            let limit_changed = self.params.max_prefixes != policy.max_prefixes;
            self.params.max_prefixes = policy.max_prefixes;
            if limit_changed && self.stats.snapshot_held_down().is_some() {
                // Down after max-prefix: a new limit is the operator's answer, start again.
                info!("max_prefixes changed: starting the session held down by max-prefix");
                self.stats.set_held_down_state(None);
                self.apply(Event::ManualStart).await;
            }
        }
        let Some(est) = &self.established else { return LiveOutcome::NotEstablished };
        if refresh && !est.route_refresh {
            let reason = "the import policy now accepts more and the peer did not advertise \
                          route refresh (RFC 2918), so it cannot send its routes again"
                .to_string();
            warn!("resetting the session: {reason}");
            // RFC 4486 §4: Cease, Other Configuration Change.
            let stop = Event::ManualStop { subcode: 6, reason: "configuration changed".into() };
            self.apply(stop).await;
            self.apply(Event::ManualStart).await;
            return LiveOutcome::Reset(reason);
        }
        if let Some(policy) = policy {
            est.link.set_policy(policy).await;
        }
        if !refresh {
            return LiveOutcome::Applied { refreshed: false };
        }
        if !self.send_route_refresh() {
            return LiveOutcome::NotEstablished;
        }
        info!("import policy changed: ROUTE-REFRESH sent for {:?}", est.families);
        LiveOutcome::Applied { refreshed: true }
    }

    /// Asks the peer of the established session to send its routes again, every negotiated
    /// family (RFC 2918 §3); false when no session is established.
    fn send_route_refresh(&self) -> bool {
        let Some(est) = &self.established else { return false };
        let Some(conn) = self.conns.iter().find(|c| c.id == est.conn) else { return false };
        let mut messages = Vec::new();
        for family in &est.families {
            // RFC 2918 §3: AFI, a reserved octet (0: a plain request), SAFI.
            let request =
                RouteRefresh { afi: family.afi as u16, subtype: 0, safi: family.safi as u8 };
            let mut message = Vec::new();
            encode_route_refresh(&request, &mut message);
            self.stats.count_sent(&message);
            messages.extend(message);
        }
        conn.outbox.push(messages);
        true
    }

    /// `clear bgp`. A hard clear also starts a session held down by max-prefix, as FRR's
    /// does; one held down by BFD waits for BFD. A soft clear needs an established session,
    /// and inbound the peer's Route Refresh capability: uplink keeps no copy of what its
    /// import policy refused (FRR's `soft-reconfiguration inbound`).
    async fn clear(&mut self, how: ClearHow) -> Result<String, String> {
        if how == ClearHow::Hard {
            info!("clear bgp: resetting the session (Cease/Administrative Reset)");
            let reason = "administrative reset".to_string();
            self.apply(Event::ManualStop { subcode: CEASE_ADMINISTRATIVE_RESET, reason }).await;
            self.stats.set_held_down_state(None);
            if self.held_by_bfd {
                return Ok("reset (Cease/Administrative Reset); it starts when BFD is up".into());
            }
            self.apply(Event::ManualStart).await;
            return Ok("reset (Cease/Administrative Reset)".into());
        }
        let Some(est) = &self.established else {
            return Err("not established: nothing to exchange again".into());
        };
        let (inbound, outbound) = (how != ClearHow::SoftOut, how != ClearHow::SoftIn);
        if inbound && !est.route_refresh {
            return Err("the peer did not advertise route refresh (RFC 2918), so it cannot send \
                        its routes again; `clear bgp ADDR` resets the session instead"
                .into());
        }
        let mut done = Vec::new();
        if outbound {
            for family in &est.families {
                est.link.route_refresh(*family).await;
            }
            done.push("our routes sent again");
        }
        if inbound && self.send_route_refresh() {
            done.push("ROUTE-REFRESH sent");
        }
        info!("clear bgp soft: {}", done.join("; "));
        Ok(done.join("; "))
    }

    async fn session_down(&mut self, cause: DownCause) {
        if let Some(est) = self.established.take() {
            self.stats.dropped();
            let actions = self.helper.session_down(cause, Instant::now());
            // A link still held from an earlier restart is the same RIB peer.
            self.restarting = Some(est.link);
            self.graceful_restart(actions).await;
        }
        self.pending_out = false;
    }

    /// Carries out what the graceful restart helper decided, on the RIB.
    async fn graceful_restart(&mut self, actions: Vec<graceful_restart::Action>) {
        for action in actions {
            let link = match &self.established {
                Some(est) => Some(&est.link),
                None => self.restarting.as_ref(),
            };
            let Some(link) = link else { return };
            match action {
                graceful_restart::Action::KeepStale(families) => {
                    info!(
                        "graceful restart: keeping the peer's routes of {families:?} as stale \
                         while it restarts (RFC 4724 §4.2)"
                    );
                    link.peer_restarting(families).await;
                }
                graceful_restart::Action::PurgeStale(family) => {
                    info!("graceful restart: removing the peer's stale {family:?} routes");
                    link.purge_stale(family).await;
                }
                graceful_restart::Action::Flush => {
                    if let Some(link) = self.restarting.take() {
                        link.peer_down().await;
                    }
                }
            }
        }
    }

    /// Sends the peer's pending Adj-RIB-Out when its writer has room. What stays in the
    /// Adj-RIB-Out meanwhile keeps coalescing, so a slow peer gets the latest state, not
    /// every intermediate one.
    async fn flush_outbound(&mut self) {
        if !self.pending_out {
            return;
        }
        let Some(est) = &mut self.established else { return };
        let Some(conn) = self.conns.iter().find(|c| c.id == est.conn) else { return };
        if !conn.outbox.has_room() {
            return;
        }
        let outbox = conn.outbox.clone();
        self.pending_out = false;
        let mut messages = Vec::new();
        for batch in est.link.take_pending().await {
            if !batch.withdraw.is_empty() {
                if let Err(e) = pack_withdrawals(batch.family, &batch.withdraw, &mut messages) {
                    warn!("cannot encode withdrawals: {e}");
                }
            }
            for (attrs, prefixes) in &batch.announce {
                if let Err(e) =
                    pack_announcements(attrs, batch.family, prefixes, &est.encode, &mut messages)
                {
                    warn!("cannot encode announcements: {e}");
                }
            }
        }
        if !est.eor_sent {
            est.eor_sent = true;
            messages.extend(est.families.iter().map(|f| end_of_rib(*f)));
            self.stats.end_of_rib_sent();
        }
        if messages.is_empty() {
            return;
        }
        for m in &messages {
            self.stats.count_sent(m);
        }
        outbox.push(messages.concat());
        let conn = est.conn;
        let _ = self.fsm.handle(Event::UpdateSent(conn), Instant::now());
    }
}

/// How much the reader asks the socket for at a time.
const READ_CHUNK: usize = 64 * 1024;

/// Reads the socket into frames: each event carries only complete messages.
async fn read_frames(mut read: tokio::net::tcp::OwnedReadHalf, tx: mpsc::Sender<ReadEvent>) {
    let mut buf: Vec<u8> = Vec::with_capacity(READ_CHUNK);
    loop {
        buf.reserve(READ_CHUNK);
        match read.read_buf(&mut buf).await {
            Ok(0) => {
                let _ = tx.send(ReadEvent::Closed("closed by peer".into())).await;
                return;
            }
            Ok(_) => {}
            Err(e) => {
                let _ = tx.send(ReadEvent::Closed(e.to_string())).await;
                return;
            }
        }
        // Find the end of the last complete frame.
        let mut complete = 0;
        loop {
            let rest = buf.get(complete..).unwrap_or_default();
            match frame_len(rest) {
                Ok(Some(len)) => complete += len,
                Ok(None) => break,
                Err(e) => {
                    if complete > 0 {
                        let frames: Vec<u8> = buf.drain(..complete).collect();
                        let _ = tx.send(ReadEvent::Frames(frames)).await;
                    }
                    let _ =
                        tx.send(ReadEvent::Malformed(e.notification.clone(), e.to_string())).await;
                    return;
                }
            }
        }
        if complete > 0 {
            let rest = buf.split_off(complete);
            let frames = std::mem::replace(&mut buf, rest);
            if tx.send(ReadEvent::Frames(frames)).await.is_err() {
                return;
            }
        }
    }
}

async fn writer_room(writer: Option<Arc<Outbox>>) {
    match writer {
        Some(outbox) => outbox.room().await,
        None => std::future::pending().await,
    }
}

/// The next event from any connection's reader, with the connection's index.
async fn recv_any(conns: &mut [Conn]) -> (usize, Option<ReadEvent>) {
    if conns.is_empty() {
        return std::future::pending().await;
    }
    std::future::poll_fn(|cx| {
        for (index, conn) in conns.iter_mut().enumerate() {
            if let std::task::Poll::Ready(ev) = conn.reader.poll_recv(cx) {
                return std::task::Poll::Ready((index, ev));
            }
        }
        std::task::Poll::Pending
    })
    .await
}

async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(tokio::time::Instant::from_std(d)).await,
        None => std::future::pending().await,
    }
}

/// The FSM's reason for a session ending, as graceful restart sees it.
fn down_cause(cause: &fsm::DownCause) -> DownCause {
    match cause {
        fsm::DownCause::ConnectionClosed | fsm::DownCause::ConnectionFailed => {
            DownCause::ConnectionLost
        }
        // RFC 9384: our Cease/BFD Down, sent when BFD saw the path fail.
        fsm::DownCause::NotificationSent(n)
            if n.code == super::wire::notification::code::CEASE && n.subcode == CEASE_BFD_DOWN =>
        {
            DownCause::BfdDown
        }
        fsm::DownCause::NotificationSent(_) | fsm::DownCause::NotificationReceived(_) => {
            DownCause::Notification
        }
    }
}
