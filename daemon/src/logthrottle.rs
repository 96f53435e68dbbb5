//! Log lines that a peer or a stranger can trigger, one per packet, are summarised instead:
//! the first goes out, the rest within a period are counted and reported with the next line.
//! Pure (time passed in) and std-only, so every layer can use it: BFD's receive path, BGP's
//! sessions and listener, the control socket.

use std::time::{Duration, Instant};

/// How often a throttled kind of line may be written.
pub const LOG_PERIOD: Duration = Duration::from_secs(30);

#[derive(Debug, Clone)]
pub struct LogThrottle {
    period: Duration,
    next_line: Option<Instant>,
    held_back: u64,
}

impl LogThrottle {
    pub const fn new(period: Duration) -> LogThrottle {
        LogThrottle { period, next_line: None, held_back: 0 }
    }

    /// Counts one event. When a line is due, returns how many events were held back since the
    /// last one (to say in the line); otherwise `None` and the caller writes nothing.
    pub fn event(&mut self, now: Instant) -> Option<u64> {
        if self.next_line.is_some_and(|t| now < t) {
            self.held_back = self.held_back.saturating_add(1);
            return None;
        }
        self.next_line = now.checked_add(self.period);
        Some(std::mem::take(&mut self.held_back))
    }
}

/// The tail of a summarised line: "" or " (41 more since the last report)".
pub fn held_back_note(held_back: u64) -> String {
    if held_back == 0 {
        String::new()
    } else {
        format!(" ({held_back} more since the last report)")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_line_per_period_with_the_count_of_the_rest() {
        let t0 = Instant::now();
        let mut throttle = LogThrottle::new(Duration::from_secs(10));
        assert_eq!(throttle.event(t0), Some(0));
        for ms in 1..1000 {
            assert_eq!(throttle.event(t0 + Duration::from_millis(ms)), None);
        }
        assert_eq!(throttle.event(t0 + Duration::from_secs(10)), Some(999));
        assert_eq!(throttle.event(t0 + Duration::from_secs(11)), None);
        assert_eq!(throttle.event(t0 + Duration::from_secs(30)), Some(1));
        assert_eq!(held_back_note(0), "");
        assert_eq!(held_back_note(3), " (3 more since the last report)");
    }
}
