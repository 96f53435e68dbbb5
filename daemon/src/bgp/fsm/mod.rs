//! The BGP finite state machine (RFC 4271 §8), sans-IO: no sockets, no tokio, no clock.
//! The driver feeds [`Event`]s with the current time and carries out the [`Action`]s.
//!
//! One `Fsm` is one configured peer. It may hold an outgoing and an incoming TCP connection at
//! once and resolves the collision by BGP Identifier (RFC 4271 §6.8). The session-level state
//! is Idle/Connect/Active while no connection has reached OpenSent, else the most advanced
//! connection's state.
//!
//! After a session goes Down the FSM waits in Idle for a backoff delay and then restarts by
//! itself (as FRR does). While it waits it still accepts the peer's connections, so a peer
//! that reconnects first is not refused; only a ManualStop makes Idle refuse them (§8.2.2).
//!
//! Timers are deadlines the FSM keeps; the driver sleeps until [`Fsm::next_deadline`] and
//! sends [`Event::Tick`].
//!
//! Besides RFC 4271's timers it keeps the SendHoldTimer of RFC 9687 (a peer that stops
//! reading is dropped instead of holding the session open forever: the driver reports
//! [`Event::SendProgress`] while its writes make progress) and a max-prefix hold-down (FRR's
//! `maximum-prefix … restart`): after Cease/Maximum Number of Prefixes Reached the session
//! stays down, refusing the peer, until the restart time has passed.

mod backoff;
#[cfg(test)]
mod tests;

use std::fmt;
use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

use self::backoff::Backoff;
use super::wire::attributes::Family;
use super::wire::message::{encode_keepalive, encode_notification, encode_open, Message};
use super::wire::notification::{cease_subcode, code, fsm_subcode, open_subcode, Notification};
use super::wire::open::{encode_capabilities, Capability, GracefulRestart, Open, BGP_VERSION};

/// RFC 4271 §8.2.2: on entering OpenSent "the HoldTimer is set to a large value ... A
/// HoldTimer value of 4 minutes is suggested."
pub const OPEN_SENT_HOLD_TIME: Duration = Duration::from_secs(240);

/// RFC 9687 §3: how long the writes to a peer may make no progress before the connection is
/// dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SendHoldTime {
    /// Twice the negotiated hold time, as BIRD does (twice the 240 s of OpenSent before the
    /// OPENs are exchanged); none with a hold time of zero.
    TwiceHoldTime,
    Fixed(Duration),
    /// No SendHoldTimer (RFC 9687 §5 advises against it).
    Off,
}

impl SendHoldTime {
    fn for_hold_time(self, hold: Duration) -> Option<Duration> {
        match self {
            Self::TwiceHoldTime => (!hold.is_zero()).then(|| hold.saturating_mul(2)),
            Self::Fixed(d) => (!d.is_zero()).then_some(d),
            Self::Off => None,
        }
    }
}

/// Identifies one TCP connection; the driver allocates them (also for outgoing attempts,
/// before they connect, so that [`Event::TcpFailed`] can name the attempt).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ConnId(pub u64);

/// Which peer AS is acceptable (frr-k8s/FRR `remote-as <n> | internal | external`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RemoteAsn {
    Fixed(u32),
    /// The peer must be in our AS (iBGP).
    Internal,
    /// The peer must not be in our AS (eBGP).
    External,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FsmConfig {
    pub local_asn: u32,
    pub local_id: Ipv4Addr,
    pub remote_asn: RemoteAsn,
    /// Proposed Hold Time: zero (no keepalives) or at least 3 s (RFC 4271 §4.2).
    pub hold_time: Duration,
    /// Upper bound of the keepalive interval; zero means hold time / 3.
    pub keepalive_time: Duration,
    /// The smallest Hold Time accepted in the peer's OPEN while ours is not zero (FRR
    /// `bgp minimum-holdtime`); zero accepts any the RFC allows.
    pub minimum_hold_time: Duration,
    /// RFC 9687 SendHoldTimer.
    pub send_hold_time: SendHoldTime,
    /// Initial connect-retry delay.
    pub connect_retry: Duration,
    /// Cap of the exponential connect-retry backoff.
    pub connect_retry_max: Duration,
    /// Never initiate connections; wait for the peer in Active.
    pub passive: bool,
    /// Families to negotiate; empty means IPv4 unicast without a Multiprotocol capability.
    pub families: Vec<Family>,
    /// Graceful Restart capability to advertise (RFC 4724); the procedures live elsewhere.
    pub graceful_restart: Option<GracefulRestart>,
    /// Seed of the jitter PRNG, so tests see the same delays every run.
    pub jitter_seed: u64,
}

impl FsmConfig {
    /// Checks what the OPEN encoding relies on.
    pub fn validate(&self) -> Result<(), String> {
        let hold = self.hold_time.as_secs();
        if hold != 0 && hold < 3 {
            // RFC 4271 §4.2: "the Hold Time MUST be either zero or at least three seconds".
            return Err(format!("hold time {hold}s must be 0 or at least 3 s"));
        }
        if hold > u64::from(u16::MAX) {
            return Err(format!("hold time {hold}s exceeds 65535 s"));
        }
        if self.local_id.is_unspecified() {
            return Err("router id 0.0.0.0 is not a valid BGP Identifier".into());
        }
        if self.local_asn == 0 {
            return Err("local AS 0 is reserved".into());
        }
        if self.minimum_hold_time.as_secs() > u64::from(u16::MAX) {
            return Err("minimum hold time exceeds 65535 s".into());
        }
        if self.connect_retry.is_zero() {
            return Err("connect retry must be positive".into());
        }
        Ok(())
    }

    fn hold_secs(&self) -> u16 {
        match u16::try_from(self.hold_time.as_secs()).unwrap_or(u16::MAX) {
            // A 1 or 2 s hold time must not go on the wire (validate() rejects it).
            1 | 2 => 3,
            secs => secs,
        }
    }

    fn families_or_default(&self) -> Vec<Family> {
        if self.families.is_empty() {
            vec![Family::IPV4_UNICAST]
        } else {
            self.families.clone()
        }
    }

    /// Our OPEN (RFC 4271 §4.2) with the capabilities we support.
    fn open(&self) -> Open {
        let mut caps: Vec<Capability> =
            self.families.iter().copied().map(Capability::MultiProtocol).collect();
        caps.push(Capability::RouteRefresh);
        caps.push(Capability::FourOctetAs(self.local_asn));
        if let Some(gr) = &self.graceful_restart {
            caps.push(Capability::GracefulRestart(gr.clone()));
        }
        Open::new(self.local_asn, self.hold_secs(), self.local_id, caps)
    }
}

/// RFC 4271 §8.2.2 states.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum State {
    Idle,
    Connect,
    Active,
    OpenSent,
    OpenConfirm,
    Established,
}

impl fmt::Display for State {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event<'a> {
    ManualStart,
    /// Stop the session and stay down; `subcode` is the Cease subcode to send and `reason`
    /// its shutdown communication (RFC 9003) where the subcode allows one.
    ManualStop {
        subcode: u8,
        reason: String,
    },
    /// The time reached [`Fsm::next_deadline`] (early or late ticks are harmless).
    Tick,
    /// The outgoing connection that [`Action::Connect`] asked for is up.
    TcpConnected(ConnId),
    /// The peer connected to us.
    TcpAccepted(ConnId),
    /// The connection (or the outgoing attempt) failed.
    TcpFailed(ConnId),
    /// The peer closed the connection.
    TcpClosed(ConnId),
    Received(ConnId, Message<'a>),
    /// An UPDATE went out on this connection: restart the KeepaliveTimer (RFC 4271 §8.2.2).
    UpdateSent(ConnId),
    /// The UPDATE decoder asks for a session reset with this NOTIFICATION (RFC 7606 §2).
    FatalUpdateError(ConnId, Notification),
    /// RFC 9687 §3: the writes to this connection made progress (bytes left for the peer, or
    /// nothing is waiting) at the time given with the event: restart its SendHoldTimer.
    SendProgress(ConnId),
    /// The peer sent more prefixes than allowed: Cease/Maximum Number of Prefixes Reached
    /// (RFC 4486 §4), then stay down, refusing the peer, for `restart_after` (FRR
    /// `maximum-prefix … restart`), or until the next ManualStart when `None`.
    MaxPrefixExceeded {
        reason: String,
        restart_after: Option<Duration>,
    },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Open an outgoing TCP connection to the peer. A new `Connect` supersedes an attempt
    /// still in flight.
    Connect,
    /// Write this encoded message to the connection.
    Send(ConnId, Vec<u8>),
    /// Close the connection (after writing what was sent before) and forget it.
    Close(ConnId),
    /// The session is up on this connection with these parameters.
    Established(ConnId, Negotiated),
    /// The session attempt ended; the FSM is Idle and restarts by itself after a backoff
    /// delay unless it was stopped.
    Down { reason: DownReason },
}

/// What both sides agreed in their OPENs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Negotiated {
    pub remote_asn: u32,
    pub remote_id: Ipv4Addr,
    /// Zero: no hold timer and no keepalives (RFC 4271 §4.2).
    pub hold_time: Duration,
    pub keepalive_time: Duration,
    /// Families both sides support, in our configured order.
    pub families: Vec<Family>,
    /// Both sides speak 4-octet AS numbers (RFC 6793); we always advertise it.
    pub four_octet_as: bool,
    /// The peer accepts ROUTE-REFRESH (RFC 2918); we always advertise it.
    pub route_refresh: bool,
    pub remote_graceful_restart: Option<GracefulRestart>,
    pub is_ebgp: bool,
    pub capabilities: CapabilityExchange,
}

/// The capabilities of both OPENs as they were sent: what `show bgp neighbors` reports as
/// advertised, received, or both (FRR's `neighborCapabilities`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CapabilityExchange {
    pub sent: Vec<Capability>,
    pub received: Vec<Capability>,
}

impl CapabilityExchange {
    /// The peer's Graceful Restart capability (RFC 4724 §3): its Restart Time, R and N bits,
    /// and the families it preserves.
    pub fn remote_graceful_restart(&self) -> Option<&GracefulRestart> {
        super::wire::open::graceful_restart_of(&self.received)
    }
}

/// Why a session went down.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DownCause {
    NotificationSent(Notification),
    NotificationReceived(Notification),
    ConnectionClosed,
    ConnectionFailed,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DownReason {
    pub cause: DownCause,
    /// For logs and `show`, e.g. "Notification sent (OPEN Message Error/Bad Peer AS): …".
    pub text: String,
    /// The session had reached Established (routes learned from it must be withdrawn).
    pub was_established: bool,
}

impl fmt::Display for DownReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Direction {
    Outgoing,
    Incoming,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum ConnState {
    OpenSent,
    OpenConfirm,
    Established,
}

#[derive(Debug, Clone)]
struct Connection {
    id: ConnId,
    direction: Direction,
    state: ConnState,
    negotiated: Option<Negotiated>,
    hold_deadline: Option<Instant>,
    keepalive_deadline: Option<Instant>,
    /// RFC 9687: dropped when the writes make no progress until then.
    send_hold_deadline: Option<Instant>,
    send_hold_time: Option<Duration>,
}

impl Connection {
    fn hold_time(&self) -> Duration {
        self.negotiated.as_ref().map_or(Duration::ZERO, |n| n.hold_time)
    }

    fn keepalive_time(&self) -> Duration {
        self.negotiated.as_ref().map_or(Duration::ZERO, |n| n.keepalive_time)
    }

    /// RFC 4271 §8.2.2: received KEEPALIVE/UPDATE restart the HoldTimer "if the negotiated
    /// HoldTime value is non-zero".
    fn restart_hold_timer(&mut self, now: Instant) {
        let hold = self.hold_time();
        self.hold_deadline = (!hold.is_zero()).then(|| now.checked_add(hold)).flatten();
    }

    /// RFC 9687 §3: the SendHoldTimer restarts whenever the writes make progress.
    fn restart_send_hold_timer(&mut self, now: Instant) {
        self.send_hold_deadline = self.send_hold_time.and_then(|d| now.checked_add(d));
    }

    fn restart_keepalive_timer(&mut self, now: Instant) {
        let keepalive = self.keepalive_time();
        self.keepalive_deadline =
            (!keepalive.is_zero()).then(|| now.checked_add(keepalive)).flatten();
    }
}

/// Session-level state while no connection has reached OpenSent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Idle,
    Connect,
    Active,
}

pub struct Fsm {
    config: FsmConfig,
    /// ManualStart seen and no ManualStop since: restart automatically after Down.
    started: bool,
    phase: Phase,
    /// An outgoing attempt is in flight (an [`Action::Connect`] not yet answered).
    connect_pending: bool,
    conns: Vec<Connection>,
    connect_retry_deadline: Option<Instant>,
    restart_deadline: Option<Instant>,
    /// Max-prefix hold-down: down and refusing the peer until then, then started again.
    hold_down_until: Option<Instant>,
    backoff: Backoff,
}

fn encoded_notification(n: &Notification) -> Vec<u8> {
    let mut out = Vec::new();
    encode_notification(n, &mut out);
    out
}

fn encoded_keepalive() -> Vec<u8> {
    let mut out = Vec::new();
    encode_keepalive(&mut out);
    out
}

fn open_error(subcode: u8, data: Vec<u8>, detail: String) -> (Notification, String) {
    (Notification::new(code::OPEN_MESSAGE_ERROR, subcode, data), detail)
}

impl Fsm {
    pub fn new(config: FsmConfig) -> Self {
        let backoff =
            Backoff::new(config.connect_retry, config.connect_retry_max, config.jitter_seed);
        Self {
            config,
            started: false,
            phase: Phase::Idle,
            connect_pending: false,
            conns: Vec::new(),
            connect_retry_deadline: None,
            restart_deadline: None,
            hold_down_until: None,
            backoff,
        }
    }

    pub fn config(&self) -> &FsmConfig {
        &self.config
    }

    pub fn state(&self) -> State {
        match self.conns.iter().map(|c| c.state).max() {
            Some(ConnState::Established) => State::Established,
            Some(ConnState::OpenConfirm) => State::OpenConfirm,
            Some(ConnState::OpenSent) => State::OpenSent,
            None => match self.phase {
                Phase::Idle => State::Idle,
                Phase::Connect => State::Connect,
                Phase::Active => State::Active,
            },
        }
    }

    /// The connection the session is Established on, with what was negotiated.
    pub fn established(&self) -> Option<(ConnId, &Negotiated)> {
        self.conns
            .iter()
            .filter(|c| c.state == ConnState::Established)
            .find_map(|c| c.negotiated.as_ref().map(|n| (c.id, n)))
    }

    /// Until when a max-prefix hold-down keeps the session down, if one runs.
    pub fn held_down_until(&self) -> Option<Instant> {
        self.hold_down_until
    }

    /// When the driver must send [`Event::Tick`] next, if any timer runs.
    pub fn next_deadline(&self) -> Option<Instant> {
        let conn_deadlines = self
            .conns
            .iter()
            .flat_map(|c| [c.hold_deadline, c.keepalive_deadline, c.send_hold_deadline]);
        [self.connect_retry_deadline, self.restart_deadline, self.hold_down_until]
            .into_iter()
            .chain(conn_deadlines)
            .flatten()
            .min()
    }

    pub fn handle(&mut self, event: Event<'_>, now: Instant) -> Vec<Action> {
        let mut actions = Vec::new();
        match event {
            Event::ManualStart => self.manual_start(now, &mut actions),
            Event::ManualStop { subcode, reason } => {
                self.hold_down_until = None;
                let notification = Notification::cease_with_communication(subcode, &reason);
                self.stop(notification, &reason, &mut actions)
            }
            Event::MaxPrefixExceeded { reason, restart_after } => {
                let notification = Notification::cease(cease_subcode::MAX_PREFIXES_REACHED);
                self.stop(notification, &reason, &mut actions);
                self.hold_down_until = restart_after.and_then(|d| now.checked_add(d));
            }
            Event::SendProgress(id) => {
                if let Some(conn) = self.conn_mut(id) {
                    conn.restart_send_hold_timer(now);
                }
            }
            Event::Tick => self.tick(now, &mut actions),
            Event::TcpConnected(id) => self.tcp_connected(id, now, &mut actions),
            Event::TcpAccepted(id) => self.tcp_accepted(id, now, &mut actions),
            Event::TcpFailed(id) => self.tcp_failed(id, now, &mut actions),
            Event::TcpClosed(id) => {
                let text = "Connection closed by peer".to_owned();
                self.drop_connection(id, now, None, DownCause::ConnectionClosed, text, &mut actions)
            }
            Event::Received(id, message) => self.received(id, message, now, &mut actions),
            Event::UpdateSent(id) => {
                if let Some(conn) = self.conn_mut(id) {
                    if conn.state == ConnState::Established {
                        conn.restart_keepalive_timer(now);
                    }
                }
            }
            Event::FatalUpdateError(id, notification) => {
                self.send_notification_and_drop(id, notification, String::new(), now, &mut actions)
            }
        }
        actions
    }

    fn conn_mut(&mut self, id: ConnId) -> Option<&mut Connection> {
        self.conns.iter_mut().find(|c| c.id == id)
    }

    fn manual_start(&mut self, now: Instant, actions: &mut Vec<Action>) {
        self.hold_down_until = None;
        if self.started {
            return;
        }
        self.started = true;
        self.backoff.reset();
        self.begin(now, actions);
    }

    /// Leaves Idle: Connect (RFC 4271 §8.2.2 Idle, Event 1) or, when passive, Active (Event 4).
    fn begin(&mut self, now: Instant, actions: &mut Vec<Action>) {
        self.restart_deadline = None;
        if self.config.passive {
            self.phase = Phase::Active;
            self.connect_retry_deadline = None;
        } else {
            self.connect(now, actions);
        }
    }

    /// Starts an outgoing attempt and the ConnectRetryTimer with the next backoff delay.
    fn connect(&mut self, now: Instant, actions: &mut Vec<Action>) {
        self.phase = Phase::Connect;
        self.connect_pending = true;
        // A delay past the end of `Instant` cannot happen with u64 seconds of backoff; if
        // it did, the timer would simply not run.
        self.connect_retry_deadline = now.checked_add(self.backoff.next_delay());
        actions.push(Action::Connect);
    }

    /// Stops the session with `notification` (a Cease) and stays down.
    fn stop(&mut self, notification: Notification, reason: &str, actions: &mut Vec<Action>) {
        if !self.started && self.conns.is_empty() {
            return;
        }
        // RFC 4271 §8.2.2 Event 2: send the NOTIFICATION with a Cease, release the
        // connections and go to Idle. RFC 9003 carries the operator's reason.
        let was_established = self.conns.iter().any(|c| c.state == ConnState::Established);
        let had_connections = !self.conns.is_empty();
        for conn in std::mem::take(&mut self.conns) {
            actions.push(Action::Send(conn.id, encoded_notification(&notification)));
            actions.push(Action::Close(conn.id));
        }
        self.started = false;
        self.phase = Phase::Idle;
        self.connect_pending = false;
        self.connect_retry_deadline = None;
        self.restart_deadline = None;
        self.backoff.reset();
        if had_connections {
            let mut text = format!("Notification sent ({notification})");
            if !reason.is_empty() && notification.shutdown_communication().is_none() {
                text.push_str(&format!(": {reason}"));
            }
            actions.push(Action::Down {
                reason: DownReason {
                    cause: DownCause::NotificationSent(notification),
                    text,
                    was_established,
                },
            });
        }
    }

    fn tick(&mut self, now: Instant, actions: &mut Vec<Action>) {
        if self.hold_down_until.is_some_and(|d| d <= now) {
            // FRR `maximum-prefix … restart`: the hold-down is over, start again.
            self.manual_start(now, actions);
        }
        if self.restart_deadline.is_some_and(|d| d <= now) {
            self.begin(now, actions);
        }
        // RFC 4271 §8.2.2 Connect/Active, Event 9: ConnectRetryTimer expires -> new attempt.
        if self.conns.is_empty() && self.connect_retry_deadline.is_some_and(|d| d <= now) {
            self.connect(now, actions);
        }
        let expired: Vec<ConnId> = self
            .conns
            .iter()
            .filter(|c| c.hold_deadline.is_some_and(|d| d <= now))
            .map(|c| c.id)
            .collect();
        for id in expired {
            // RFC 4271 §6.5: "If a system does not receive successive KEEPALIVE, UPDATE,
            // and/or NOTIFICATION messages within the period specified in the Hold Time
            // field of the OPEN message, then the NOTIFICATION message with the Hold Timer
            // Expired Error Code is sent and the BGP connection is closed."
            let n = Notification::new(code::HOLD_TIMER_EXPIRED, 0, Vec::new());
            self.send_notification_and_drop(id, n, String::new(), now, actions);
        }
        let stalled: Vec<(ConnId, Duration)> = self
            .conns
            .iter()
            .filter(|c| c.send_hold_deadline.is_some_and(|d| d <= now))
            .map(|c| (c.id, c.send_hold_time.unwrap_or_default()))
            .collect();
        for (id, send_hold) in stalled {
            // RFC 9687 §3, Event 29 (SendHoldTimer_Expires): the peer has not taken any of our
            // data for SendHoldTime. Send Send Hold Timer Expired if it can still go out (the
            // driver never waits for it), drop the connection and go to Idle.
            let n = Notification::new(code::SEND_HOLD_TIMER_EXPIRED, 0, Vec::new());
            let detail = format!("the peer took none of our data for {} s", send_hold.as_secs());
            self.send_notification_and_drop(id, n, detail, now, actions);
        }
        for conn in &mut self.conns {
            if conn.keepalive_deadline.is_some_and(|d| d <= now) {
                // RFC 4271 §8.2.2 OpenConfirm/Established, Event 11: send a KEEPALIVE and
                // restart the KeepaliveTimer.
                actions.push(Action::Send(conn.id, encoded_keepalive()));
                conn.restart_keepalive_timer(now);
            }
        }
    }

    fn tcp_connected(&mut self, id: ConnId, now: Instant, actions: &mut Vec<Action>) {
        let ours = self.started && self.connect_pending;
        if !ours || self.conns.iter().any(|c| c.direction == Direction::Outgoing) {
            // A stale attempt (superseded, or finished after a stop): not ours to use.
            actions.push(Action::Close(id));
            return;
        }
        self.connect_pending = false;
        if self.established().is_some() {
            // RFC 4271 §6.8: a connection colliding with an Established one is closed.
            self.reject_with_collision(id, actions);
            return;
        }
        self.add_connection(id, Direction::Outgoing, now, actions);
    }

    fn tcp_accepted(&mut self, id: ConnId, now: Instant, actions: &mut Vec<Action>) {
        if !self.started {
            // RFC 4271 §8.2.2 Idle: "any TCP connection attempts ... are refused".
            actions.push(Action::Close(id));
            return;
        }
        if self.established().is_some() {
            // RFC 4271 §6.8: "Unless allowed via configuration, a connection collision with
            // an existing BGP connection that is in the Established state causes closing of
            // the newly created connection."
            self.reject_with_collision(id, actions);
            return;
        }
        // Our own attempt is still in TCP's handshake: give it up and use the peer's. Had both
        // connections gone on, we could answer the peer's OPEN with a KEEPALIVE here (the
        // peer then counts this connection Established) and only later see its OPEN on ours;
        // §6.8 by identifier could then close the connection the peer already runs, and the
        // session would flap at start. A late completion of the attempt is closed as stale.
        self.connect_pending = false;
        // A second incoming connection means the peer gave up on the first: replace it.
        if let Some(old) = self.conns.iter().position(|c| c.direction == Direction::Incoming) {
            let old = self.conns.remove(old);
            let n = Notification::cease(cease_subcode::CONNECTION_COLLISION_RESOLUTION);
            actions.push(Action::Send(old.id, encoded_notification(&n)));
            actions.push(Action::Close(old.id));
        }
        self.add_connection(id, Direction::Incoming, now, actions);
    }

    fn reject_with_collision(&mut self, id: ConnId, actions: &mut Vec<Action>) {
        let n = Notification::cease(cease_subcode::CONNECTION_COLLISION_RESOLUTION);
        actions.push(Action::Send(id, encoded_notification(&n)));
        actions.push(Action::Close(id));
    }

    /// A TCP connection is up: send OPEN and enter OpenSent (RFC 4271 §8.2.2 Connect/Active,
    /// Events 16/17).
    fn add_connection(
        &mut self,
        id: ConnId,
        direction: Direction,
        now: Instant,
        actions: &mut Vec<Action>,
    ) {
        let mut open = Vec::new();
        encode_open(&self.config.open(), &mut open);
        actions.push(Action::Send(id, open));
        let mut conn = Connection {
            id,
            direction,
            state: ConnState::OpenSent,
            negotiated: None,
            hold_deadline: now.checked_add(OPEN_SENT_HOLD_TIME),
            keepalive_deadline: None,
            send_hold_deadline: None,
            send_hold_time: self.config.send_hold_time.for_hold_time(OPEN_SENT_HOLD_TIME),
        };
        // RFC 9687 §3: the SendHoldTimer runs in OpenSent, OpenConfirm and Established.
        conn.restart_send_hold_timer(now);
        self.conns.push(conn);
        // The ConnectRetryTimer stops once a connection reaches OpenSent.
        self.connect_retry_deadline = None;
        self.restart_deadline = None;
    }

    fn tcp_failed(&mut self, id: ConnId, now: Instant, actions: &mut Vec<Action>) {
        if self.conns.iter().any(|c| c.id == id) {
            let text = "TCP connection failed".to_owned();
            self.drop_connection(id, now, None, DownCause::ConnectionFailed, text, actions);
        } else if self.connect_pending {
            // RFC 4271 §8.2.2 Connect, Event 18: keep the ConnectRetryTimer running, listen
            // for the peer, and change to Active.
            self.connect_pending = false;
            if self.conns.is_empty() && self.phase == Phase::Connect {
                self.phase = Phase::Active;
            }
        }
    }

    fn send_notification_and_drop(
        &mut self,
        id: ConnId,
        notification: Notification,
        detail: String,
        now: Instant,
        actions: &mut Vec<Action>,
    ) {
        let mut text = format!("Notification sent ({notification})");
        if !detail.is_empty() {
            text.push_str(": ");
            text.push_str(&detail);
        }
        let cause = DownCause::NotificationSent(notification.clone());
        self.drop_connection(id, now, Some(notification), cause, text, actions);
    }

    /// Closes one connection, sending `notification` first if given. When it was the last
    /// one the session is Down: Idle, and a restart after the next backoff delay.
    fn drop_connection(
        &mut self,
        id: ConnId,
        now: Instant,
        notification: Option<Notification>,
        cause: DownCause,
        text: String,
        actions: &mut Vec<Action>,
    ) {
        let Some(index) = self.conns.iter().position(|c| c.id == id) else { return };
        let conn = self.conns.remove(index);
        if let Some(n) = &notification {
            actions.push(Action::Send(id, encoded_notification(n)));
        }
        actions.push(Action::Close(id));
        if !self.conns.is_empty() {
            return;
        }
        let was_established = conn.state == ConnState::Established;
        if was_established {
            self.backoff.reset();
        }
        actions.push(Action::Down { reason: DownReason { cause, text, was_established } });
        // RFC 4271 §8.2.2: errors take the FSM to Idle; like FRR we then restart by
        // ourselves, after a growing delay (the DampPeerOscillations idea of §8.1.1).
        self.phase = Phase::Idle;
        self.connect_pending = false;
        self.connect_retry_deadline = None;
        self.restart_deadline =
            self.started.then(|| now.checked_add(self.backoff.next_delay())).flatten();
    }

    fn received(
        &mut self,
        id: ConnId,
        message: Message<'_>,
        now: Instant,
        actions: &mut Vec<Action>,
    ) {
        let Some(state) = self.conns.iter().find(|c| c.id == id).map(|c| c.state) else {
            return;
        };
        match (state, message) {
            // RFC 4271 §8.2.2, Event 25 in every state: close without answering.
            (_, Message::Notification(n)) => {
                let text = format!("Notification received ({n})");
                let cause = DownCause::NotificationReceived(n);
                self.drop_connection(id, now, None, cause, text, actions);
            }
            (ConnState::OpenSent, Message::Open(open)) => {
                self.open_received(id, open, now, actions)
            }
            (ConnState::OpenConfirm, Message::Keepalive) => self.establish(id, now, actions),
            // RFC 4271 §8.2.2 Established, Events 26/27: KEEPALIVE and UPDATE restart the
            // HoldTimer; a ROUTE-REFRESH is as much a sign of life.
            (
                ConnState::Established,
                Message::Keepalive | Message::Update(_) | Message::RouteRefresh(_),
            ) => {
                if let Some(conn) = self.conn_mut(id) {
                    conn.restart_hold_timer(now);
                }
            }
            (state, message) => {
                // RFC 6608 §4: an unexpected message gets an FSM Error with the state's
                // subcode.
                let subcode = match state {
                    ConnState::OpenSent => fsm_subcode::UNEXPECTED_MESSAGE_IN_OPEN_SENT,
                    ConnState::OpenConfirm => fsm_subcode::UNEXPECTED_MESSAGE_IN_OPEN_CONFIRM,
                    ConnState::Established => fsm_subcode::UNEXPECTED_MESSAGE_IN_ESTABLISHED,
                };
                let n = Notification::new(code::FSM_ERROR, subcode, Vec::new());
                let detail = format!("{:?} received in {state:?}", message.kind());
                self.send_notification_and_drop(id, n, detail, now, actions);
            }
        }
    }

    fn open_received(&mut self, id: ConnId, open: Open, now: Instant, actions: &mut Vec<Action>) {
        let negotiated = match self.check_open(&open) {
            Ok(negotiated) => negotiated,
            Err((notification, detail)) => {
                self.send_notification_and_drop(id, notification, detail, now, actions);
                return;
            }
        };
        if !self.resolve_collision(id, &open, now, actions) {
            return;
        }
        let send_hold_time = self.config.send_hold_time.for_hold_time(negotiated.hold_time);
        let Some(conn) = self.conn_mut(id) else { return };
        // RFC 4271 §8.2.2 OpenSent, Event 19: send KEEPALIVE, set the timers from the
        // negotiated hold time, and enter OpenConfirm.
        conn.state = ConnState::OpenConfirm;
        conn.send_hold_time = send_hold_time;
        conn.negotiated = Some(negotiated);
        conn.restart_hold_timer(now);
        conn.restart_keepalive_timer(now);
        conn.restart_send_hold_timer(now);
        actions.push(Action::Send(id, encoded_keepalive()));
    }

    /// Connection collision detection (RFC 4271 §6.8). Returns whether connection `id`
    /// survives. The other connection, if any, is the same peer, so the BGP Identifier in
    /// this OPEN is its identifier too.
    fn resolve_collision(
        &mut self,
        id: ConnId,
        open: &Open,
        now: Instant,
        actions: &mut Vec<Action>,
    ) -> bool {
        let Some(this) = self.conns.iter().find(|c| c.id == id).map(|c| c.direction) else {
            return false;
        };
        let Some(other) = self.conns.iter().find(|c| c.id != id).map(|c| (c.id, c.state)) else {
            return true;
        };
        let loser = match other.1 {
            // "a connection collision with an existing BGP connection that is in the
            // Established state causes closing of the newly created connection".
            ConnState::Established => id,
            ConnState::OpenSent | ConnState::OpenConfirm => {
                // "If the value of the local BGP Identifier is less than the remote one, the
                // local system closes the BGP connection that already exists (the one that
                // is already in the OpenConfirm state), and accepts the BGP connection
                // initiated by the remote system. Otherwise, the local system closes the
                // newly created BGP connection (the one associated with the newly received
                // OPEN message), and continues to use the existing one" -- i.e. the
                // connection initiated by the system with the higher identifier survives.
                // RFC 6286 §2.3: equal identifiers are broken by the larger AS number.
                let local = u32::from(self.config.local_id);
                let remote = u32::from(open.bgp_id);
                let local_wins =
                    local > remote || (local == remote && self.config.local_asn > open.peer_asn());
                let keep = if local_wins { Direction::Outgoing } else { Direction::Incoming };
                if this == keep {
                    other.0
                } else {
                    id
                }
            }
        };
        let n = Notification::cease(cease_subcode::CONNECTION_COLLISION_RESOLUTION);
        self.send_notification_and_drop(loser, n, "connection collision".into(), now, actions);
        loser != id
    }

    fn establish(&mut self, id: ConnId, now: Instant, actions: &mut Vec<Action>) {
        // RFC 4271 §6.8: once Established, any other connection to the peer is closed.
        let others: Vec<ConnId> = self.conns.iter().filter(|c| c.id != id).map(|c| c.id).collect();
        for other in others {
            self.reject_with_collision(other, actions);
            self.conns.retain(|c| c.id != other);
        }
        let Some(conn) = self.conn_mut(id) else { return };
        // RFC 4271 §8.2.2 OpenConfirm, Event 26: restart the HoldTimer, enter Established.
        conn.state = ConnState::Established;
        conn.restart_hold_timer(now);
        let negotiated = conn.negotiated.clone();
        self.backoff.reset();
        if let Some(negotiated) = negotiated {
            actions.push(Action::Established(id, negotiated));
        }
    }

    /// The checks of RFC 4271 §6.2 that depend on configuration, then negotiation.
    fn check_open(&self, open: &Open) -> Result<Negotiated, (Notification, String)> {
        let cfg = &self.config;
        if open.version != BGP_VERSION {
            return Err(open_error(
                open_subcode::UNSUPPORTED_VERSION_NUMBER,
                u16::from(BGP_VERSION).to_be_bytes().to_vec(),
                format!("peer speaks BGP version {}", open.version),
            ));
        }
        // RFC 6793 §4.1: the 4-octet capability's ASN is the peer's AS when present.
        let remote_asn = open.peer_asn();
        // RFC 7607 §2: "If a BGP speaker receives zero as the peer AS in an OPEN message, it
        // MUST abort the connection and send a NOTIFICATION with Error Code "OPEN Message
        // Error" and subcode "Bad Peer AS"" -- in My AS or in the 4-octet capability.
        if remote_asn == 0 || open.my_as == 0 {
            return Err(open_error(
                open_subcode::BAD_PEER_AS,
                Vec::new(),
                "peer AS 0 is reserved (RFC 7607)".to_string(),
            ));
        }
        let as_ok = match cfg.remote_asn {
            RemoteAsn::Fixed(asn) => remote_asn == asn,
            RemoteAsn::Internal => remote_asn == cfg.local_asn,
            RemoteAsn::External => remote_asn != cfg.local_asn,
        };
        if !as_ok {
            return Err(open_error(
                open_subcode::BAD_PEER_AS,
                Vec::new(),
                format!("peer AS {remote_asn} does not match {:?}", cfg.remote_asn),
            ));
        }
        let is_ebgp = remote_asn != cfg.local_asn;
        // RFC 6286 §2.2: a nonzero identifier, and for iBGP one that differs from ours.
        if open.bgp_id.is_unspecified() || (!is_ebgp && open.bgp_id == cfg.local_id) {
            return Err(open_error(
                open_subcode::BAD_BGP_IDENTIFIER,
                Vec::new(),
                format!("peer BGP identifier {} is not acceptable", open.bgp_id),
            ));
        }
        // RFC 4271 §6.2: "An implementation MUST reject Hold Time values of one or two
        // seconds."
        if open.hold_time == 1 || open.hold_time == 2 {
            return Err(open_error(
                open_subcode::UNACCEPTABLE_HOLD_TIME,
                Vec::new(),
                format!("peer hold time {} s", open.hold_time),
            ));
        }
        // FRR `bgp minimum-holdtime`: a peer may not force a shorter (or no) Hold Time on us,
        // unless we ourselves propose none.
        let minimum = cfg.minimum_hold_time.as_secs();
        if cfg.hold_secs() != 0 && u64::from(open.hold_time) < minimum {
            return Err(open_error(
                open_subcode::UNACCEPTABLE_HOLD_TIME,
                Vec::new(),
                format!(
                    "peer hold time {} s is below minimum_hold_time {minimum} s",
                    open.hold_time
                ),
            ));
        }
        let ours = cfg.families_or_default();
        let theirs = open.families();
        let families: Vec<Family> = ours.iter().copied().filter(|f| theirs.contains(f)).collect();
        if families.is_empty() {
            // RFC 5492 §3: Unsupported Capability, data = the capabilities that cause it.
            // Like FRR, a session without a common family is refused.
            let mut data = Vec::new();
            let mp: Vec<Capability> = ours.iter().copied().map(Capability::MultiProtocol).collect();
            encode_capabilities(&mp, &mut data);
            return Err(open_error(
                open_subcode::UNSUPPORTED_CAPABILITY,
                data,
                format!("no common address family: ours {ours:?}, peer's {theirs:?}"),
            ));
        }
        // RFC 4271 §4.2: the Hold Time is the smaller of the two; zero disables it.
        let hold = open.hold_time.min(cfg.hold_secs());
        let hold_time = Duration::from_secs(u64::from(hold));
        // RFC 4271 §4.4: "A reasonable maximum time between KEEPALIVE messages would be one
        // third of the Hold Time interval." Whole seconds, at least one.
        let keepalive_time = if hold == 0 {
            Duration::ZERO
        } else {
            let third = Duration::from_secs(u64::from(hold / 3).max(1));
            if cfg.keepalive_time.is_zero() {
                third
            } else {
                cfg.keepalive_time.min(third)
            }
        };
        Ok(Negotiated {
            remote_asn,
            remote_id: open.bgp_id,
            hold_time,
            keepalive_time,
            families,
            four_octet_as: open.four_octet_asn().is_some(),
            route_refresh: open.supports_route_refresh(),
            remote_graceful_restart: open.graceful_restart().cloned(),
            is_ebgp,
            capabilities: CapabilityExchange {
                sent: cfg.open().capabilities,
                received: open.capabilities.clone(),
            },
        })
    }
}
