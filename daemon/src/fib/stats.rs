//! Counters of the FIB writer for the metrics endpoint: atomics the writer thread bumps as it
//! works and any thread reads, so a scrape never waits for the writer (which may be busy
//! installing a million routes) and the writer never takes a lock per route.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, PoisonError, RwLock};

/// The state of a route the writer is told about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RouteState {
    Installed,
    /// Waiting for a reachable next hop, a VRF table, or the kernel's answer.
    Pending,
    /// The kernel refused it.
    Failed,
}

impl RouteState {
    pub const ALL: [RouteState; 3] =
        [RouteState::Installed, RouteState::Pending, RouteState::Failed];

    /// The word `show fib` and the metrics use.
    pub fn name(self) -> &'static str {
        match self {
            RouteState::Installed => "installed",
            RouteState::Pending => "pending",
            RouteState::Failed => "failed",
        }
    }
}

/// How many routes of one writer instance are in each state. Only the writer thread writes,
/// once per round of work.
#[derive(Debug, Default)]
pub struct RouteCounts {
    installed: AtomicU64,
    pending: AtomicU64,
    failed: AtomicU64,
}

impl RouteCounts {
    fn slot(&self, state: RouteState) -> &AtomicU64 {
        match state {
            RouteState::Installed => &self.installed,
            RouteState::Pending => &self.pending,
            RouteState::Failed => &self.failed,
        }
    }

    /// The writer's counts after a round of work (it has them per group, not per route).
    pub(super) fn set(&self, installed: u64, pending: u64, failed: u64) {
        self.installed.store(installed, Ordering::Relaxed);
        self.pending.store(pending, Ordering::Relaxed);
        self.failed.store(failed, Ordering::Relaxed);
    }

    pub fn get(&self, state: RouteState) -> u64 {
        self.slot(state).load(Ordering::Relaxed)
    }
}

/// The writer's counters, shared with the [`super::Fib`] handle.
#[derive(Debug, Default)]
pub struct FibStats {
    /// Route counts per writer instance, index for index with the `Fib`'s slots.
    instances: RwLock<Vec<Arc<RouteCounts>>>,
    /// Netlink requests sent: routes, nexthop objects and groups, deletions.
    pub kernel_requests: AtomicU64,
    /// Requests the kernel refused (a deletion of something already gone is no refusal).
    pub kernel_errors: AtomicU64,
    /// Full dumps after lost kernel notifications or answers (the startup reconciliation not
    /// counted).
    pub resyncs: AtomicU64,
    /// Failed writes (routes, deletions, objects) tried again after their backoff.
    pub retries: AtomicU64,
}

impl FibStats {
    /// The counts of a new writer instance (it takes the next index). Rare: at start and on a
    /// reload that adds an instance.
    pub(super) fn add_instance(&self) -> Arc<RouteCounts> {
        let counts = Arc::new(RouteCounts::default());
        self.instances.write().unwrap_or_else(PoisonError::into_inner).push(Arc::clone(&counts));
        counts
    }

    /// The counts of instance `index`, if the writer has created it yet.
    pub fn instance(&self, index: usize) -> Option<Arc<RouteCounts>> {
        self.instances.read().unwrap_or_else(PoisonError::into_inner).get(index).cloned()
    }

    pub fn count(counter: &AtomicU64, by: usize) {
        counter.fetch_add(u64::try_from(by).unwrap_or(u64::MAX), Ordering::Relaxed);
    }

    pub fn load(counter: &AtomicU64) -> u64 {
        counter.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_are_set_together() {
        let counts = RouteCounts::default();
        counts.set(3, 2, 1);
        let all = |c: &RouteCounts| RouteState::ALL.map(|s| c.get(s));
        assert_eq!(all(&counts), [3, 2, 1]);
        counts.set(0, 0, 0);
        assert_eq!(all(&counts), [0, 0, 0]);
    }

    #[test]
    fn instances_keep_their_index() {
        let stats = FibStats::default();
        let first = stats.add_instance();
        let _second = stats.add_instance();
        first.set(1, 0, 0);
        assert_eq!(stats.instance(0).map(|c| c.get(RouteState::Installed)), Some(1));
        assert_eq!(stats.instance(1).map(|c| c.get(RouteState::Installed)), Some(0));
        assert!(stats.instance(2).is_none());
    }
}
