//! One copy of each value that thousands of config items repeat: a namespace's labels (every
//! Service of the namespace carries them) and a node's name (every endpoint on the node).
//!
//! The items are validated one by one (each from its own manifest, and kept between loads),
//! so the copies are joined here, by value, for as long as an item holds them. At 10,000
//! Services a map of its own per Service was about 600 bytes each (a B-tree node holds eleven
//! entries, and a Kubernetes namespace always has `kubernetes.io/metadata.name`), a tenth of
//! what uplink kept per Service; a node name per endpoint, five per Service in three places;
//! a namespace per question a translation asked about it (`manifest/context.rs`).

use std::borrow::Borrow;
use std::collections::HashMap;
use std::fmt;
use std::hash::Hash;
use std::sync::{Arc, LazyLock, Mutex, PoisonError, Weak};

use super::announce::Labels;

/// Values handed out while something still holds them, by value.
struct Table<K, T: ?Sized> {
    values: HashMap<K, Weak<T>, foldhash::fast::RandomState>,
    /// The size at which the values nobody holds are swept out: twice what was left by the
    /// last sweep, so each insertion pays for a bounded part of it.
    sweep_at: usize,
}

impl<K: Hash + Eq, T: ?Sized> Default for Table<K, T> {
    fn default() -> Self {
        Table { values: HashMap::default(), sweep_at: 16 }
    }
}

/// The shared copy of `key`'s value, made by `make` when nothing holds one.
fn shared<K, T, Q>(
    table: &Mutex<Table<K, T>>,
    key: &Q,
    make: impl FnOnce() -> (K, Arc<T>),
) -> Arc<T>
where
    K: Hash + Eq + Borrow<Q>,
    T: ?Sized,
    Q: Hash + Eq + ?Sized,
{
    // Held only to look up or insert one entry: a poisoned lock left no half-made entry.
    let mut table = table.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(value) = table.values.get(key).and_then(Weak::upgrade) {
        return value;
    }
    if table.values.len() >= table.sweep_at {
        table.values.retain(|_, value| value.strong_count() > 0);
        table.sweep_at = (table.values.len() * 2).max(16);
    }
    let (key, value) = make();
    table.values.insert(key, Arc::downgrade(&value));
    value
}

static LABELS: LazyLock<Mutex<Table<Labels, Labels>>> = LazyLock::new(Default::default);
static NAMES: LazyLock<Mutex<Table<Box<str>, str>>> = LazyLock::new(Default::default);
static NODE_NAMES: LazyLock<Mutex<Table<Box<str>, Box<str>>>> = LazyLock::new(Default::default);

/// `labels`, shared with every other holder of the same labels.
pub fn labels(labels: &Labels) -> Arc<Labels> {
    if labels.is_empty() {
        // Nothing to share: an empty map owns no memory.
        return Arc::default();
    }
    shared(&LABELS, labels, || (labels.clone(), Arc::new(labels.clone())))
}

/// `name` (a node's, a namespace's), shared with every other holder of the same name.
pub fn name(name: &str) -> Arc<str> {
    shared(&NAMES, name, || (Box::from(name), Arc::from(name)))
}

/// A node's name as an endpoint keeps it: the one shared copy, one pointer wide where an
/// `Arc<str>` is two (its length). A cluster's Services hold five endpoints each, and an
/// endpoint is its address and this: 32 bytes rather than 40.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct NodeName(Arc<Box<str>>);

impl NodeName {
    /// `name`, shared with every other holder of the same node name.
    pub fn new(name: &str) -> Self {
        NodeName(shared(&NODE_NAMES, name, || (Box::from(name), Arc::new(Box::from(name)))))
    }
}

impl std::ops::Deref for NodeName {
    type Target = str;
    fn deref(&self) -> &str {
        &self.0
    }
}

impl From<&str> for NodeName {
    fn from(name: &str) -> Self {
        NodeName::new(name)
    }
}

impl fmt::Debug for NodeName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&**self, f)
    }
}

impl fmt::Display for NodeName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self)
    }
}

impl serde::Serialize for NodeName {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn namespace(name: &str) -> Labels {
        Labels::from([("kubernetes.io/metadata.name".to_string(), name.to_string())])
    }

    #[test]
    fn equal_values_are_one_copy_and_a_dropped_copy_is_made_again() {
        let shop = labels(&namespace("shop"));
        assert!(Arc::ptr_eq(&shop, &labels(&namespace("shop"))));
        assert!(!Arc::ptr_eq(&shop, &labels(&namespace("bank"))));
        assert_eq!(*shop, namespace("shop"));
        drop(shop);
        assert_eq!(*labels(&namespace("shop")), namespace("shop"));
        assert!(labels(&Labels::new()).is_empty());

        let wk1 = name("wk1");
        assert!(Arc::ptr_eq(&wk1, &name("wk1")));
        assert_eq!((&*wk1, &*name("wk2")), ("wk1", "wk2"));

        let node = NodeName::new("wk1");
        assert!(Arc::ptr_eq(&node.0, &NodeName::new("wk1").0));
        assert_eq!((&*node, &*NodeName::new("wk2")), ("wk1", "wk2"));
        assert_eq!(std::mem::size_of::<super::super::announce::Endpoint>(), 32);
    }

    #[test]
    fn values_no_one_holds_do_not_pile_up() {
        let kept: Vec<Arc<str>> = (0..100).map(|n| name(&format!("kept-{n}"))).collect();
        for n in 0..5000 {
            let _ = name(&format!("gone-{n}"));
        }
        let table = NAMES.lock().unwrap_or_else(PoisonError::into_inner);
        let gone = table.values.keys().filter(|n| n.starts_with("gone-")).count();
        assert!(gone <= 300, "{gone} names kept for nobody");
        assert!(kept.iter().all(|n| table.values.get(&**n).is_some_and(|w| w.strong_count() > 0)));
    }
}
