//! One 64-bit digest of a value, for records that keep what they saw as a number rather than
//! as a copy: a translation's answers (the manifest cache), a Service's last event (the
//! Kubernetes source's Events). Here, in the lowest layer, for both.

use std::hash::{BuildHasher, Hash};
use std::sync::LazyLock;

/// foldhash's quality hasher, seeded at random once per run: the same value gives the same
/// digest all run long, and no object can be written to collide with another's. Thousands of
/// answers are digested at each reload: SipHash was a tenth of the config load's time at 5,000
/// Services.
pub fn digest<T: Hash + ?Sized>(value: &T) -> u64 {
    static STATE: LazyLock<foldhash::quality::RandomState> = LazyLock::new(Default::default);
    STATE.hash_one(value)
}
