//! Graceful restart (RFC 4724), the Receiving Speaker's side ("helper") for one neighbor, as a
//! sans-IO state machine: the session task feeds it the session's ups and downs and the
//! End-of-RIB markers it receives, with the time, and carries out what it returns on the RIB
//! (keep the peer's routes as stale, purge what is still stale).
//!
//! The restarting side (our own restart) is elsewhere: the Graceful Restart capability we send
//! is built in `configure.rs`, and the FIB keeps the previous run's routes until every
//! graceful-restart peer has sent End-of-RIB (`rib_task.rs`).

use std::time::{Duration, Instant};

use super::wire::attributes::Family;
use super::wire::open::GracefulRestart;

/// Why a session ended, as far as graceful restart cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DownCause {
    /// The TCP connection closed or failed with no NOTIFICATION either way: the peer's BGP
    /// may be restarting (RFC 4724 §4.2).
    ConnectionLost,
    /// A NOTIFICATION was sent or received (hold timer, error, Cease): without RFC 8538's N
    /// bit, which uplink does not advertise, this ends graceful restart.
    Notification,
    /// BFD saw the forwarding path fail. uplink's BFD and a peer's that sends the C bit clear
    /// share fate with the control plane, so a BFD Down cannot tell a restart from a broken
    /// link (RFC 5882 §4.3.2); uplink chooses the fast failover BFD is configured for and
    /// flushes the peer's routes.
    BfdDown,
    /// The session was stopped here (config change, shutdown, max-prefix).
    Stopped,
}

/// What the session task must do to the RIB.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Keep the peer's routes of these families as stale; remove the rest now.
    KeepStale(Vec<Family>),
    /// Remove the peer's routes still marked stale in this family (End-of-RIB or timeout).
    PurgeStale(Family),
    /// Remove every route of the peer (no graceful restart, or the peer did not come back).
    Flush,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Phase {
    /// Nothing stale.
    Idle,
    /// The session is down; the peer has until `deadline` (its Restart Time) to come back.
    Restarting { families: Vec<Family>, deadline: Instant },
    /// The session is back; stale routes of `families` go at their End-of-RIB, or at
    /// `deadline` (the stale-path time).
    AwaitingEndOfRib { families: Vec<Family>, deadline: Instant },
}

/// The helper state of one neighbor.
#[derive(Debug, Clone)]
pub struct Helper {
    enabled: bool,
    stale_path_time: Duration,
    /// The peer's capability in the session that is (or was last) up.
    peer_capability: Option<GracefulRestart>,
    phase: Phase,
}

impl Helper {
    /// `enabled`: the neighbor is configured with `graceful_restart = true` (we advertise the
    /// capability, so the peer knows we keep its routes).
    pub fn new(enabled: bool, stale_path_time: Duration) -> Self {
        Self { enabled, stale_path_time, peer_capability: None, phase: Phase::Idle }
    }

    /// When [`Helper::tick`] must be called next.
    pub fn deadline(&self) -> Option<Instant> {
        match &self.phase {
            Phase::Idle => None,
            Phase::Restarting { deadline, .. } | Phase::AwaitingEndOfRib { deadline, .. } => {
                Some(*deadline)
            }
        }
    }

    /// Whether routes of the peer are being kept as stale.
    pub fn holding_stale(&self) -> bool {
        self.phase != Phase::Idle
    }

    /// The session reached Established; `peer` is the capability in the peer's OPEN.
    pub fn session_up(&mut self, peer: Option<&GracefulRestart>, now: Instant) -> Vec<Action> {
        self.peer_capability = peer.cloned();
        let Phase::Restarting { families, .. } = std::mem::replace(&mut self.phase, Phase::Idle)
        else {
            return Vec::new();
        };
        // RFC 4724 §4.2: with no capability in the new OPEN, or without the family, or with
        // its F bit clear (the peer did not keep its forwarding state), the stale routes of
        // that family go at once.
        let mut actions = Vec::new();
        let mut waiting = Vec::new();
        for family in families {
            let kept_forwarding =
                peer.is_some_and(|gr| gr.families.iter().any(|(f, kept)| *f == family && *kept));
            if kept_forwarding {
                waiting.push(family);
            } else {
                actions.push(Action::PurgeStale(family));
            }
        }
        if !waiting.is_empty() {
            self.phase =
                Phase::AwaitingEndOfRib { families: waiting, deadline: now + self.stale_path_time };
        }
        actions
    }

    /// The peer sent End-of-RIB for `family` (RFC 4724 §2): what is still stale is gone.
    pub fn end_of_rib(&mut self, family: Family) -> Vec<Action> {
        let Phase::AwaitingEndOfRib { families, .. } = &mut self.phase else { return Vec::new() };
        let Some(position) = families.iter().position(|f| *f == family) else {
            return Vec::new();
        };
        families.remove(position);
        if families.is_empty() {
            self.phase = Phase::Idle;
        }
        vec![Action::PurgeStale(family)]
    }

    /// The session went down.
    pub fn session_down(&mut self, cause: DownCause, now: Instant) -> Vec<Action> {
        let peer = self.peer_capability.take();
        let helps = self.enabled && cause == DownCause::ConnectionLost;
        match (helps, peer) {
            // RFC 4724 §4.2: retain the routes of the families in the peer's capability for
            // its Restart Time. A peer that goes down again before its End-of-RIB keeps
            // everything it has as stale, under a new Restart Time.
            (true, Some(gr)) if gr.restart_time > 0 && !gr.families.is_empty() => {
                let families: Vec<Family> = gr.families.iter().map(|(f, _)| *f).collect();
                let deadline = now + Duration::from_secs(u64::from(gr.restart_time));
                self.phase = Phase::Restarting { families: families.clone(), deadline };
                vec![Action::KeepStale(families)]
            }
            _ => {
                self.phase = Phase::Idle;
                vec![Action::Flush]
            }
        }
    }

    /// Time passed: a Restart Time or stale-path time that ran out.
    pub fn tick(&mut self, now: Instant) -> Vec<Action> {
        match &self.phase {
            Phase::Restarting { deadline, .. } if *deadline <= now => {
                // RFC 4724 §4.2: the peer did not come back within its Restart Time.
                self.phase = Phase::Idle;
                vec![Action::Flush]
            }
            Phase::AwaitingEndOfRib { families, deadline } if *deadline <= now => {
                let actions = families.iter().map(|f| Action::PurgeStale(*f)).collect();
                self.phase = Phase::Idle;
                actions
            }
            _ => Vec::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const V4: Family = Family::IPV4_UNICAST;
    const V6: Family = Family::IPV6_UNICAST;

    fn capability(restart_time: u16, families: &[(Family, bool)]) -> GracefulRestart {
        GracefulRestart {
            restart_state: false,
            notification: false,
            restart_time,
            families: families.to_vec(),
        }
    }

    #[test]
    fn a_lost_connection_keeps_routes_until_end_of_rib() {
        let t0 = Instant::now();
        let mut h = Helper::new(true, Duration::from_secs(360));
        let gr = capability(120, &[(V4, true), (V6, true)]);
        assert!(h.session_up(Some(&gr), t0).is_empty());
        assert_eq!(
            h.session_down(DownCause::ConnectionLost, t0),
            [Action::KeepStale(vec![V4, V6])]
        );
        assert_eq!(h.deadline(), Some(t0 + Duration::from_secs(120)));
        // Back after 10 s, forwarding kept for both: wait for End-of-RIB.
        let t1 = t0 + Duration::from_secs(10);
        assert!(h.session_up(Some(&gr), t1).is_empty());
        assert_eq!(h.deadline(), Some(t1 + Duration::from_secs(360)));
        assert_eq!(h.end_of_rib(V4), [Action::PurgeStale(V4)]);
        assert!(h.holding_stale());
        assert_eq!(h.end_of_rib(V6), [Action::PurgeStale(V6)]);
        assert!(!h.holding_stale());
        assert_eq!(h.end_of_rib(V6), [], "a second End-of-RIB changes nothing");
    }

    #[test]
    fn restart_time_runs_out() {
        let t0 = Instant::now();
        let mut h = Helper::new(true, Duration::from_secs(360));
        h.session_up(Some(&capability(30, &[(V4, true)])), t0);
        h.session_down(DownCause::ConnectionLost, t0);
        assert!(h.tick(t0 + Duration::from_secs(29)).is_empty());
        assert_eq!(h.tick(t0 + Duration::from_secs(30)), [Action::Flush]);
        assert_eq!(h.deadline(), None);
    }

    #[test]
    fn stale_path_time_bounds_the_wait_for_end_of_rib() {
        let t0 = Instant::now();
        let mut h = Helper::new(true, Duration::from_secs(5));
        let gr = capability(120, &[(V4, true)]);
        h.session_up(Some(&gr), t0);
        h.session_down(DownCause::ConnectionLost, t0);
        h.session_up(Some(&gr), t0);
        assert_eq!(h.tick(t0 + Duration::from_secs(5)), [Action::PurgeStale(V4)]);
    }

    #[test]
    fn no_forwarding_state_or_no_capability_purges_at_once() {
        let t0 = Instant::now();
        let mut h = Helper::new(true, Duration::from_secs(360));
        h.session_up(Some(&capability(120, &[(V4, true), (V6, true)])), t0);
        h.session_down(DownCause::ConnectionLost, t0);
        // Back with the F bit clear for IPv6.
        let actions = h.session_up(Some(&capability(120, &[(V4, true), (V6, false)])), t0);
        assert_eq!(actions, [Action::PurgeStale(V6)]);
        h.session_down(DownCause::ConnectionLost, t0);
        // Back without graceful restart at all.
        assert_eq!(h.session_up(None, t0), [Action::PurgeStale(V4), Action::PurgeStale(V6)]);
        assert!(!h.holding_stale());
    }

    #[test]
    fn notifications_bfd_and_disabled_helpers_flush() {
        let t0 = Instant::now();
        let gr = capability(120, &[(V4, true)]);
        for cause in [DownCause::Notification, DownCause::BfdDown, DownCause::Stopped] {
            let mut h = Helper::new(true, Duration::from_secs(360));
            h.session_up(Some(&gr), t0);
            assert_eq!(h.session_down(cause, t0), [Action::Flush], "{cause:?}");
        }
        let mut off = Helper::new(false, Duration::from_secs(360));
        off.session_up(Some(&gr), t0);
        assert_eq!(off.session_down(DownCause::ConnectionLost, t0), [Action::Flush]);
        // A peer that advertised Restart Time 0 or no family gets no help either.
        let mut h = Helper::new(true, Duration::from_secs(360));
        h.session_up(Some(&capability(0, &[(V4, true)])), t0);
        assert_eq!(h.session_down(DownCause::ConnectionLost, t0), [Action::Flush]);
    }
}
