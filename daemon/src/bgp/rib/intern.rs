//! Path attribute interning: one `Arc<PathAttributes>` per distinct attribute set, so a million
//! routes from one peer that share attributes cost one pointer each, and so that "same
//! attributes" is a pointer comparison when outgoing prefixes are grouped into UPDATEs.

use std::collections::HashSet;
use std::sync::Arc;

use crate::bgp::wire::attributes::PathAttributes;

#[derive(Debug, Default)]
pub struct AttrInterner {
    sets: HashSet<Arc<PathAttributes>>,
}

impl AttrInterner {
    pub fn new() -> Self {
        Self::default()
    }

    /// The shared copy of `attrs`, creating it if no equal set is interned yet.
    pub fn intern(&mut self, attrs: &PathAttributes) -> Arc<PathAttributes> {
        if let Some(existing) = self.sets.get(attrs) {
            return Arc::clone(existing);
        }
        let mut owned = attrs.clone();
        owned.rare.shrink();
        let fresh = Arc::new(owned);
        self.sets.insert(Arc::clone(&fresh));
        fresh
    }

    /// Like [`intern`](Self::intern) but takes ownership, saving a clone for a new set.
    pub fn intern_owned(&mut self, mut attrs: PathAttributes) -> Arc<PathAttributes> {
        if let Some(existing) = self.sets.get(&attrs) {
            return Arc::clone(existing);
        }
        attrs.rare.shrink();
        let fresh = Arc::new(attrs);
        self.sets.insert(Arc::clone(&fresh));
        fresh
    }

    pub fn intern_cow(
        &mut self,
        attrs: std::borrow::Cow<'_, PathAttributes>,
    ) -> Arc<PathAttributes> {
        match attrs {
            std::borrow::Cow::Borrowed(attrs) => self.intern(attrs),
            std::borrow::Cow::Owned(attrs) => self.intern_owned(attrs),
        }
    }

    /// Drops the sets that nothing but the interner references any more; returns how many.
    pub fn sweep(&mut self) -> usize {
        let before = self.sets.len();
        self.sets.retain(|set| Arc::strong_count(set) > 1);
        before.saturating_sub(self.sets.len())
    }

    /// Number of distinct attribute sets held (live or awaiting a sweep).
    pub fn len(&self) -> usize {
        self.sets.len()
    }

    pub fn is_empty(&self) -> bool {
        self.sets.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bgp::wire::attributes::AsPath;

    fn attrs(path: Vec<u32>) -> PathAttributes {
        PathAttributes { as_path: AsPath::sequence(path), ..Default::default() }
    }

    #[test]
    fn equal_sets_share_one_arc() {
        let mut interner = AttrInterner::new();
        let a = interner.intern(&attrs(vec![65001]));
        let b = interner.intern_owned(attrs(vec![65001]));
        let c = interner.intern(&attrs(vec![65002]));
        assert!(Arc::ptr_eq(&a, &b));
        assert!(!Arc::ptr_eq(&a, &c));
        assert_eq!(interner.len(), 2);
    }

    #[test]
    fn sweep_frees_unreferenced_sets_only() {
        let mut interner = AttrInterner::new();
        let kept = interner.intern(&attrs(vec![65001]));
        let dropped = interner.intern(&attrs(vec![65002]));
        drop(dropped);
        assert_eq!(interner.sweep(), 1);
        assert_eq!(interner.len(), 1);
        // The kept set is still the one handed out.
        assert!(Arc::ptr_eq(&kept, &interner.intern(&attrs(vec![65001]))));
        drop(kept);
        assert_eq!(interner.sweep(), 1);
        assert!(interner.is_empty());
    }
}
