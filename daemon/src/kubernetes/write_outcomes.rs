//! What a writer of upstream's status objects (`BGPSessionState`, `FRRNodeState`,
//! `ServiceL2Status`, `NodeNetworkConfigurationEnactment`) does with its writes' outcomes, the
//! same for every kind:
//!
//! - each write and each failure counted in the health record (`uplink show kubernetes`);
//! - a failure said in the log, one line per period ([`LogThrottle`]), a forbidden one with
//!   where uplink's permissions are (the API's message names the verb and the resource);
//! - a `404` while the writer knows its objects (listed or made them): one of them was deleted
//!   under the write, by hand or by another node; the writer forgets what it knows and lists
//!   or makes them again at the next try;
//! - a `404` before that: the kind is not served (its CRD not installed, or installed and not
//!   established yet), said once, and once more when it is served; tried again in a minute,
//!   as the watches try an absent kind;
//! - the wait before the next try: short at first, doubling while the API server keeps
//!   refusing (a write RBAC forbids, an object it rejects), so a refusal brings no storm of
//!   tries; short while it does not answer at all (a cut link, a restart), so the writes follow
//!   within seconds of its return, and a try costs it nothing meanwhile.

use std::time::{Duration, Instant};

use tracing::{info, warn};

use super::health::{self, Health, SourceHealth, WriteCounts};
use crate::logthrottle::{held_back_note, LogThrottle, LOG_PERIOD};

/// The wait after the first refusal, after each failure to reach the API server, and after an
/// object deleted under a write.
const RETRY_FIRST: Duration = Duration::from_secs(2);
/// The longest wait between two tries of a write the API server keeps refusing.
const RETRY_MAX: Duration = Duration::from_secs(60);
/// The wait after a write found the kind not served.
const RETRY_NOT_SERVED: Duration = Duration::from_secs(60);

/// One writer's outcomes.
pub(super) struct WriteOutcomes {
    /// The kind it writes, as the log names it.
    kind: &'static str,
    /// The manifest that installs the kind's CRD.
    crds: &'static str,
    /// The writer's counts in the health record.
    counts: fn(&mut SourceHealth) -> &mut WriteCounts,
    health: Health,
    failures: LogThrottle,
    /// The last write found the kind not served (said once until it is).
    not_served: bool,
    /// The wait after the next refusal.
    next_wait: Duration,
}

/// What the writer should do after a failed write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Retry {
    /// How long to wait (a change of what it writes may end the wait sooner).
    pub wait: Duration,
    /// Forget the objects it knows, to list or make them again.
    pub relearn: bool,
}

impl WriteOutcomes {
    pub(super) fn new(
        kind: &'static str,
        crds: &'static str,
        counts: fn(&mut SourceHealth) -> &mut WriteCounts,
        health: Health,
    ) -> WriteOutcomes {
        WriteOutcomes {
            kind,
            crds,
            counts,
            health,
            failures: LogThrottle::new(LOG_PERIOD),
            not_served: false,
            next_wait: RETRY_FIRST,
        }
    }

    /// Writes that went through (`writes` objects written; none when nothing differed).
    pub(super) fn succeeded(&mut self, writes: u64) {
        if std::mem::take(&mut self.not_served) {
            info!("{} is served now: written again", self.kind);
        }
        self.next_wait = RETRY_FIRST;
        let counts = self.counts;
        health::update(&self.health, |h| counts(h).succeeded += writes);
    }

    /// A write that failed with `error`; `objects_known`: the writer had listed or made its
    /// objects, so a 404 means one of them went rather than the kind.
    pub(super) fn failed(&mut self, error: &kube::Error, objects_known: bool) -> Retry {
        let kind = self.kind;
        if let kube::Error::Api(status) = error {
            if status.code == 404 && objects_known {
                info!("a {kind} object went under a write (deleted by hand or by another node): this node's are listed and made again");
                return Retry { wait: RETRY_FIRST, relearn: true };
            }
            if status.code == 404 {
                if !std::mem::replace(&mut self.not_served, true) {
                    info!(
                        "{kind} is not served (install {}): not written; tried again every minute",
                        self.crds
                    );
                }
                return Retry { wait: RETRY_NOT_SERVED, relearn: false };
            }
        }
        let why = explain(error);
        // An answer of the server's own (403, 422, 500...) or none (the server away).
        let refused = matches!(error, kube::Error::Api(_));
        let wait = if refused { self.next_wait } else { RETRY_FIRST };
        if let Some(held_back) = self.failures.event(Instant::now()) {
            warn!(
                "cannot write {kind}, trying again in {} s: {why}{}",
                wait.as_secs(),
                held_back_note(held_back)
            );
        }
        let counts = self.counts;
        health::update(&self.health, |h| {
            let counts = counts(h);
            counts.failed += 1;
            counts.last_error = Some(why);
        });
        if refused {
            self.next_wait = wait.saturating_mul(2).min(RETRY_MAX);
        }
        Retry { wait, relearn: false }
    }
}

/// A write's failure as the operator needs it: a forbidden one says where uplink's
/// permissions are.
pub(super) fn explain(error: &kube::Error) -> String {
    match error {
        kube::Error::Api(status) if status.code == 403 => format!(
            "forbidden: uplink's ClusterRole (deploy/kubernetes/rbac.yaml) lacks it: {}",
            status.message
        ),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    fn api_error(code: u16) -> kube::Error {
        kube::Error::Api(
            kube::core::Status::failure(&format!("code {code}"), "").with_code(code).boxed(),
        )
    }

    #[test]
    fn refusals_wait_longer_until_a_write_goes_through() {
        let health: Health = Arc::new(Mutex::new(SourceHealth::default()));
        let mut outcomes = WriteOutcomes::new(
            "BGPSessionState",
            "crds.yaml",
            |h| &mut h.session_writes,
            health.clone(),
        );
        let waits: Vec<u64> =
            (0..7).map(|_| outcomes.failed(&api_error(403), true).wait.as_secs()).collect();
        assert_eq!(waits, [2, 4, 8, 16, 32, 60, 60]);
        let record = health::read(&health);
        assert_eq!(record.session_writes.failed, 7);
        let last = record.session_writes.last_error.unwrap_or_default();
        assert!(last.starts_with("forbidden: uplink's ClusterRole"), "{last}");
        // The server away: tried again soon, however long the refusals before went on.
        let away = kube::Error::Service("connection refused".into());
        assert_eq!(outcomes.failed(&away, true).wait, RETRY_FIRST);
        assert_eq!(outcomes.failed(&api_error(403), true).wait, RETRY_MAX);
        outcomes.succeeded(3);
        assert_eq!(health::read(&health).session_writes.succeeded, 3);
        assert_eq!(outcomes.failed(&api_error(500), true).wait, RETRY_FIRST);
    }

    #[test]
    fn a_404_is_an_object_gone_once_the_objects_are_known_and_the_kind_before() {
        let health: Health = Arc::new(Mutex::new(SourceHealth::default()));
        let mut outcomes = WriteOutcomes::new(
            "FRRNodeState",
            "crds.yaml",
            |h| &mut h.node_state_writes,
            health.clone(),
        );
        assert_eq!(
            outcomes.failed(&api_error(404), true),
            Retry { wait: RETRY_FIRST, relearn: true }
        );
        assert_eq!(
            outcomes.failed(&api_error(404), false),
            Retry { wait: RETRY_NOT_SERVED, relearn: false }
        );
        assert!(outcomes.not_served);
        outcomes.succeeded(1);
        assert!(!outcomes.not_served);
        // Neither is a failure of the write's own: the counts say what the operator must fix.
        assert_eq!(health::read(&health).node_state_writes.failed, 0);
    }
}
