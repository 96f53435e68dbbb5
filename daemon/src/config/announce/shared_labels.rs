//! One copy of each namespace's labels, shared by the namespace's Services.
//!
//! Every Service carries its namespace's labels (for the pools' `namespace_selectors`), and a
//! Kubernetes namespace always has at least `kubernetes.io/metadata.name`: a map of its own per
//! Service was about 600 bytes each (a B-tree node holds eleven entries), a tenth of what
//! uplink kept per Service at 10,000 of them. The Services are validated one by one (each
//! from its own manifest, and kept between loads), so the copies are joined here, by value.

use std::collections::HashMap;
use std::sync::{Arc, LazyLock, Mutex, PoisonError, Weak};

use super::Labels;

/// The label sets handed out, while a Service still holds them.
static SHARED: LazyLock<Mutex<HashMap<Labels, Weak<Labels>>>> = LazyLock::new(Default::default);

/// `labels`, shared with every other Service whose namespace has the same labels.
pub fn shared(labels: &Labels) -> Arc<Labels> {
    if labels.is_empty() {
        // Nothing to share: an empty map owns no memory.
        return Arc::default();
    }
    // Held only to look up or insert one entry: a poisoned lock left no half-made entry.
    let mut sets = SHARED.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(set) = sets.get(labels).and_then(Weak::upgrade) {
        return set;
    }
    // The sets no Service holds any more are dropped each time the table doubles, so it
    // stays within twice the sets in use.
    if sets.len() >= 16 && sets.len().is_power_of_two() {
        sets.retain(|_, set| set.strong_count() > 0);
    }
    let set = Arc::new(labels.clone());
    sets.insert(labels.clone(), Arc::downgrade(&set));
    set
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(namespace: &str) -> Labels {
        Labels::from([("kubernetes.io/metadata.name".to_string(), namespace.to_string())])
    }

    #[test]
    fn equal_labels_are_one_copy_and_a_dropped_copy_is_made_again() {
        let shop = shared(&labels("shop"));
        assert!(Arc::ptr_eq(&shop, &shared(&labels("shop"))));
        assert!(!Arc::ptr_eq(&shop, &shared(&labels("bank"))));
        assert_eq!(*shop, labels("shop"));
        drop(shop);
        assert_eq!(*shared(&labels("shop")), labels("shop"));
        assert!(shared(&Labels::new()).is_empty());
    }

    #[test]
    fn sets_no_one_holds_do_not_pile_up() {
        for n in 0..1000 {
            let _ = shared(&labels(&format!("gone-{n}")));
        }
        let sets = SHARED.lock().unwrap_or_else(PoisonError::into_inner);
        let gone = sets.keys().filter(|l| l.values().any(|v| v.starts_with("gone-"))).count();
        assert!(gone < 100, "{gone} label sets kept for nobody");
    }
}
