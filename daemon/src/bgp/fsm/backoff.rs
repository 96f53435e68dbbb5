//! Connect-retry delays: capped exponential backoff with jitter (RFC 4271 §10) from a small
//! deterministic PRNG, so tests that seed it see the same delays every run.

use std::time::Duration;

/// SplitMix64 (Steele, Lea, Flood 2014): tiny, fast and good enough for timer jitter.
#[derive(Debug, Clone)]
struct SplitMix64(u64);

impl SplitMix64 {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}

/// The delay before the next connection attempt. Starts at `initial`, doubles after each
/// use up to `cap`, and every delay handed out is jittered to 75–100 % of its base.
#[derive(Debug, Clone)]
pub struct Backoff {
    initial: Duration,
    cap: Duration,
    current: Duration,
    rng: SplitMix64,
}

impl Backoff {
    pub fn new(initial: Duration, cap: Duration, seed: u64) -> Self {
        let cap = cap.max(initial);
        Self { initial, cap, current: initial, rng: SplitMix64(seed) }
    }

    /// The un-jittered base of the next delay.
    #[cfg(test)]
    pub fn current_base(&self) -> Duration {
        self.current
    }

    /// Hands out the next delay and doubles the base for the one after.
    pub fn next_delay(&mut self) -> Duration {
        let base = self.current;
        self.current = base.checked_mul(2).unwrap_or(self.cap).min(self.cap);
        self.jitter(base)
    }

    /// Back to the initial delay (after a session has been Established).
    pub fn reset(&mut self) {
        self.current = self.initial;
    }

    /// RFC 4271 §10: "the jitter ... SHOULD be determined by multiplying the base value of
    /// the appropriate timer by a random factor, which is uniformly distributed in the range
    /// from 0.75 to 1.0".
    fn jitter(&mut self, base: Duration) -> Duration {
        let per_mille = 750 + u128::from(self.rng.next() % 251);
        let nanos = base.as_nanos().saturating_mul(per_mille) / 1000;
        Duration::from_nanos(u64::try_from(nanos).unwrap_or(u64::MAX))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grows_doubles_and_caps_within_jitter_bounds() {
        let mut b = Backoff::new(Duration::from_secs(2), Duration::from_secs(30), 7);
        let bases = [2, 4, 8, 16, 30, 30, 30];
        for base in bases {
            let base = Duration::from_secs(base);
            assert_eq!(b.current_base(), base);
            let d = b.next_delay();
            assert!(d <= base && d >= base.mul_f64(0.75), "{d:?} outside jitter of {base:?}");
        }
        b.reset();
        assert_eq!(b.current_base(), Duration::from_secs(2));
    }

    #[test]
    fn same_seed_same_delays_and_jitter_varies() {
        let run = |seed| {
            let mut b = Backoff::new(Duration::from_secs(10), Duration::from_secs(10), seed);
            (0..50).map(|_| b.next_delay()).collect::<Vec<_>>()
        };
        assert_eq!(run(1), run(1));
        assert_ne!(run(1), run(2));
        let delays = run(3);
        let min = delays.iter().min().unwrap();
        let max = delays.iter().max().unwrap();
        assert!(*min >= Duration::from_millis(7500) && *max <= Duration::from_secs(10));
        // Spread: 50 draws over a 2.5 s window are not all in one half of it.
        assert!(*max - *min > Duration::from_millis(1250));
    }

    #[test]
    fn cap_below_initial_keeps_initial() {
        let mut b = Backoff::new(Duration::from_secs(5), Duration::from_secs(1), 0);
        b.next_delay();
        assert_eq!(b.current_base(), Duration::from_secs(5));
    }
}
