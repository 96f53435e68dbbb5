//! Per-neighbor counters and state for `show`, written by the session task and read by the
//! control socket. Counters are atomics; the state strings change rarely and sit behind a
//! mutex that the hot path never takes.

use super::fsm::State;
use super::wire::attributes::Family;
use super::wire::header::{MessageType, HEADER_LEN};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime};

#[derive(Default)]
pub struct PeerStats {
    pub msgs_rcvd: AtomicU64,
    pub msgs_sent: AtomicU64,
    pub updates_rcvd: AtomicU64,
    pub updates_sent: AtomicU64,
    pub keepalives_rcvd: AtomicU64,
    pub keepalives_sent: AtomicU64,
    pub notifications_rcvd: AtomicU64,
    pub notifications_sent: AtomicU64,
    pub opens_rcvd: AtomicU64,
    pub opens_sent: AtomicU64,
    pub refreshes_rcvd: AtomicU64,
    pub refreshes_sent: AtomicU64,
    pub established_count: AtomicU64,
    pub dropped_count: AtomicU64,
    slow: Mutex<Slow>,
}

#[derive(Default)]
struct Slow {
    state: Option<State>,
    /// When the session last reached or left Established.
    since: Option<Instant>,
    last_error: Option<String>,
    last_reset_at: Option<SystemTime>,
    remote_id: Option<std::net::Ipv4Addr>,
    remote_asn: Option<u32>,
    local_address: Option<std::net::IpAddr>,
    negotiated: Option<NegotiatedView>,
    /// End-of-RIB (RFC 4724 §2) of the current session: the families negotiated, those the
    /// peer has sent it for, and whether we sent ours. What `uplink wait-ready` waits for.
    families: Vec<Family>,
    end_of_rib_received: Vec<Family>,
    end_of_rib_sent: bool,
    /// Down after Cease/Maximum Number of Prefixes Reached, until then (or for good: `Some`
    /// of `None`).
    held_down: Option<Option<Instant>>,
    established_at: Option<SystemTime>,
    /// The established connection's queue of messages to write (FRR's `outq`).
    outbox: Option<std::sync::Arc<super::outbox::Outbox>>,
}

/// What `show bgp neighbors` prints of the negotiation.
#[derive(Default, Clone, Debug)]
pub struct NegotiatedView {
    /// Seconds.
    pub hold_time: u64,
    pub keepalive: u64,
    /// Both OPENs' capabilities (FRR's `neighborCapabilities`; the peer's graceful restart).
    pub capabilities: super::fsm::CapabilityExchange,
}

/// A consistent copy for rendering.
#[derive(Clone, Debug, Default)]
pub struct PeerSnapshot {
    pub state: String,
    pub uptime: Option<Duration>,
    pub last_error: Option<String>,
    pub msgs_rcvd: u64,
    pub msgs_sent: u64,
    pub updates_rcvd: u64,
    pub updates_sent: u64,
    pub keepalives_rcvd: u64,
    pub keepalives_sent: u64,
    pub notifications_rcvd: u64,
    pub notifications_sent: u64,
    pub opens_rcvd: u64,
    pub opens_sent: u64,
    pub refreshes_rcvd: u64,
    pub refreshes_sent: u64,
    pub established_count: u64,
    pub dropped_count: u64,
    pub remote_id: Option<std::net::Ipv4Addr>,
    pub remote_asn: Option<u32>,
    pub local_address: Option<std::net::IpAddr>,
    pub negotiated: Option<NegotiatedView>,
    /// The peer has sent End-of-RIB for every negotiated family in this session.
    pub end_of_rib_received: bool,
    /// We have sent our initial table and End-of-RIB in this session.
    pub end_of_rib_sent: bool,
    /// The session's families, and those the peer has sent End-of-RIB for.
    pub families: Vec<Family>,
    pub end_of_rib_received_families: Vec<Family>,
    /// Down after max-prefix: `Some(None)` until a reload or restart, `Some(Some(t))` until t.
    pub held_down: Option<Option<Instant>>,
    /// Messages waiting to be written to the established connection.
    pub outq: usize,
    /// When the session came up, as wall-clock time (FRR's `peerUptimeEstablishedEpoch`).
    pub established_at: Option<SystemTime>,
}

fn kind(frame: &[u8]) -> Option<MessageType> {
    frame.get(HEADER_LEN - 1).and_then(|t| MessageType::from_code(*t))
}

impl PeerStats {
    fn slow(&self) -> std::sync::MutexGuard<'_, Slow> {
        self.slow.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    pub fn count_received(&self, frame: &[u8]) {
        self.msgs_rcvd.fetch_add(1, Ordering::Relaxed);
        let counter = match kind(frame) {
            Some(MessageType::Update) => &self.updates_rcvd,
            Some(MessageType::Keepalive) => &self.keepalives_rcvd,
            Some(MessageType::Notification) => &self.notifications_rcvd,
            Some(MessageType::Open) => &self.opens_rcvd,
            Some(MessageType::RouteRefresh) => &self.refreshes_rcvd,
            None => return,
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts one message the FSM sends (OPEN, KEEPALIVE, NOTIFICATION).
    pub fn count_sent(&self, frame: &[u8]) {
        self.msgs_sent.fetch_add(1, Ordering::Relaxed);
        let counter = match kind(frame) {
            Some(MessageType::Update) => &self.updates_sent,
            Some(MessageType::Keepalive) => &self.keepalives_sent,
            Some(MessageType::Notification) => &self.notifications_sent,
            Some(MessageType::Open) => &self.opens_sent,
            Some(MessageType::RouteRefresh) => &self.refreshes_sent,
            _ => return,
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }

    pub fn set_state(&self, state: State) {
        let mut slow = self.slow();
        if slow.state != Some(state) {
            slow.state = Some(state);
        }
    }

    /// The session is held down by max-prefix (`Some`), until the instant given if any.
    pub fn set_held_down_state(&self, held: Option<Option<Instant>>) {
        self.slow().held_down = held;
    }

    pub fn snapshot_held_down(&self) -> Option<Option<Instant>> {
        self.slow().held_down
    }

    pub fn set_last_error(&self, error: String) {
        let mut slow = self.slow();
        slow.last_error = Some(error);
        slow.last_reset_at = Some(SystemTime::now());
    }

    pub fn set_session(
        &self,
        remote_id: std::net::Ipv4Addr,
        remote_asn: u32,
        local_address: Option<std::net::IpAddr>,
        negotiated: NegotiatedView,
    ) {
        let mut slow = self.slow();
        slow.remote_id = Some(remote_id);
        slow.remote_asn = Some(remote_asn);
        slow.local_address = local_address;
        slow.negotiated = Some(negotiated);
    }

    /// The session is up; `outbox` holds what waits to be written to it.
    pub fn established(&self, outbox: Option<std::sync::Arc<super::outbox::Outbox>>) {
        self.established_count.fetch_add(1, Ordering::Relaxed);
        let mut slow = self.slow();
        slow.since = Some(Instant::now());
        slow.established_at = Some(SystemTime::now());
        slow.outbox = outbox;
    }

    pub fn dropped(&self) {
        self.dropped_count.fetch_add(1, Ordering::Relaxed);
        let mut slow = self.slow();
        slow.since = Some(Instant::now());
        slow.established_at = None;
        slow.outbox = None;
        slow.negotiated = None;
        slow.families.clear();
        slow.end_of_rib_received.clear();
        slow.end_of_rib_sent = false;
    }

    /// A new session's families: no End-of-RIB yet either way.
    pub fn set_families(&self, families: &[Family]) {
        let mut slow = self.slow();
        slow.families = families.to_vec();
        slow.end_of_rib_received.clear();
        slow.end_of_rib_sent = false;
    }

    pub fn end_of_rib_received(&self, family: Family) {
        let mut slow = self.slow();
        if !slow.end_of_rib_received.contains(&family) {
            slow.end_of_rib_received.push(family);
        }
    }

    pub fn end_of_rib_sent(&self) {
        self.slow().end_of_rib_sent = true;
    }

    pub fn snapshot(&self) -> PeerSnapshot {
        let slow = self.slow();
        let load = |c: &AtomicU64| c.load(Ordering::Relaxed);
        PeerSnapshot {
            state: slow.state.map(|s| s.to_string()).unwrap_or_else(|| "Idle".into()),
            uptime: slow.since.map(|t| t.elapsed()),
            last_error: slow.last_error.clone(),
            msgs_rcvd: load(&self.msgs_rcvd),
            msgs_sent: load(&self.msgs_sent),
            updates_rcvd: load(&self.updates_rcvd),
            updates_sent: load(&self.updates_sent),
            keepalives_rcvd: load(&self.keepalives_rcvd),
            keepalives_sent: load(&self.keepalives_sent),
            notifications_rcvd: load(&self.notifications_rcvd),
            notifications_sent: load(&self.notifications_sent),
            opens_rcvd: load(&self.opens_rcvd),
            opens_sent: load(&self.opens_sent),
            refreshes_rcvd: load(&self.refreshes_rcvd),
            refreshes_sent: load(&self.refreshes_sent),
            established_count: load(&self.established_count),
            dropped_count: load(&self.dropped_count),
            remote_id: slow.remote_id,
            remote_asn: slow.remote_asn,
            local_address: slow.local_address,
            negotiated: slow.negotiated.clone(),
            end_of_rib_received: !slow.families.is_empty()
                && slow.families.iter().all(|f| slow.end_of_rib_received.contains(f)),
            end_of_rib_sent: slow.end_of_rib_sent,
            families: slow.families.clone(),
            end_of_rib_received_families: slow.end_of_rib_received.clone(),
            held_down: slow.held_down,
            outq: slow.outbox.as_ref().map_or(0, |o| o.queued_messages()),
            established_at: slow.established_at,
        }
    }
}
