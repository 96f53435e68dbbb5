//! Max-prefix (FRR `neighbor X maximum-prefix N [threshold] [warning-only|restart M]`),
//! sans-IO: how many more new prefixes a peer may add, and what to say or do as its count
//! moves. The RIB task asks before an UPDATE reaches the Loc-RIB, so a peer never has more
//! than `limit` prefixes in the Loc-RIB (and so in the kernel), and reports the count after.

use std::time::Duration;

/// A neighbor's limit, as configured.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PrefixLimit {
    pub limit: u32,
    /// Warn once when the count reaches this percentage of `limit` (FRR default 75).
    pub threshold_percent: u8,
    /// Only warn past the limit; keep the session and every route.
    pub warning_only: bool,
    /// After the Cease, start the session again this long later.
    pub restart_time: Option<Duration>,
}

impl PrefixLimit {
    fn threshold_count(&self) -> u64 {
        u64::from(self.limit) * u64::from(self.threshold_percent) / 100
    }
}

/// What the count of one session calls for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// The count reached the warning threshold (said once until it falls below again).
    ThresholdReached { count: u64, threshold: u64, limit: u32 },
    /// Past the limit with `warning_only` (said once until it falls back under the limit).
    ExceededWarningOnly { count: u64, limit: u32 },
    /// A new prefix found no room: end the session with Cease/Maximum Number of Prefixes
    /// Reached (RFC 4486 §4). Returned once per session.
    Cease { limit: u32 },
}

/// The state of one session's count.
#[derive(Debug, Clone)]
pub struct PrefixGuard {
    limit: PrefixLimit,
    threshold_said: bool,
    exceeded_said: bool,
    tripped: bool,
}

impl PrefixGuard {
    pub fn new(limit: PrefixLimit) -> Self {
        Self { limit, threshold_said: false, exceeded_said: false, tripped: false }
    }

    pub fn limit(&self) -> &PrefixLimit {
        &self.limit
    }

    /// The Cease was asked for: the peer's UPDATEs are ignored until the session ends.
    pub fn tripped(&self) -> bool {
        self.tripped
    }

    /// How many prefixes not yet accepted from the peer may still be added, at `count`;
    /// `None` when there is no bound (warning only).
    pub fn room(&self, count: u64) -> Option<u64> {
        if self.limit.warning_only {
            None
        } else {
            Some(u64::from(self.limit.limit).saturating_sub(count))
        }
    }

    /// After an UPDATE batch was applied: the count now, and whether a new prefix was cut off
    /// for lack of room.
    pub fn observe(&mut self, count: u64, cut_off: bool) -> Vec<Verdict> {
        let mut out = Vec::new();
        let limit = self.limit.limit;
        let threshold = self.limit.threshold_count();
        if count >= threshold && !self.threshold_said {
            self.threshold_said = true;
            out.push(Verdict::ThresholdReached { count, threshold, limit });
        } else if count < threshold {
            self.threshold_said = false;
        }
        if self.limit.warning_only {
            if count > u64::from(limit) && !self.exceeded_said {
                self.exceeded_said = true;
                out.push(Verdict::ExceededWarningOnly { count, limit });
            } else if count <= u64::from(limit) {
                self.exceeded_said = false;
            }
        } else if cut_off && !self.tripped {
            self.tripped = true;
            out.push(Verdict::Cease { limit });
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limit(warning_only: bool) -> PrefixLimit {
        PrefixLimit { limit: 1000, threshold_percent: 75, warning_only, restart_time: None }
    }

    #[test]
    fn threshold_is_said_once_per_crossing() {
        let mut guard = PrefixGuard::new(limit(false));
        assert_eq!(guard.observe(749, false), []);
        let reached = Verdict::ThresholdReached { count: 750, threshold: 750, limit: 1000 };
        assert_eq!(guard.observe(750, false), [reached]);
        assert_eq!(guard.observe(900, false), []);
        // Below again, then back up: said again.
        assert_eq!(guard.observe(10, false), []);
        assert_eq!(guard.observe(800, false).len(), 1);
    }

    #[test]
    fn room_bounds_new_prefixes_and_a_cut_off_asks_for_one_cease() {
        let mut guard = PrefixGuard::new(limit(false));
        assert_eq!(guard.room(0), Some(1000));
        assert_eq!(guard.room(999), Some(1));
        assert_eq!(guard.room(1000), Some(0));
        // A full table that fit: no Cease.
        assert!(!guard.observe(1000, false).contains(&Verdict::Cease { limit: 1000 }));
        assert!(!guard.tripped());
        assert_eq!(guard.observe(1000, true), [Verdict::Cease { limit: 1000 }]);
        assert!(guard.tripped());
        assert_eq!(guard.observe(1000, true), []);
    }

    #[test]
    fn warning_only_has_no_bound_and_warns_once_per_excess() {
        let mut guard = PrefixGuard::new(limit(true));
        assert_eq!(guard.room(5000), None);
        assert_eq!(guard.observe(1000, false).len(), 1); // the threshold
        assert_eq!(
            guard.observe(1001, false),
            [Verdict::ExceededWarningOnly { count: 1001, limit: 1000 }]
        );
        assert_eq!(guard.observe(100_000, false), []);
        assert!(!guard.tripped());
        assert_eq!(guard.observe(1000, false), []);
        assert_eq!(guard.observe(1002, false).len(), 1);
    }
}
