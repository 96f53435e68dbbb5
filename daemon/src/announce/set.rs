//! What one router originates, as the BGP side applies it: a plain set of prefixes, each with
//! its communities, LOCAL_PREF and audience. The announcer publishes one set per VRF
//! ([`super::runtime::AnnouncerHandle::subscribe`]); the router's RIB task turns it into
//! originated routes and export policy.

use std::collections::{BTreeSet, HashMap};
use std::net::IpAddr;
use std::sync::Arc;

use ipnet::IpNet;

use super::compute::{Announcements, PeerSet, GRACEFUL_SHUTDOWN};
use crate::config::Community;

/// One announced prefix with its attributes and audience.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct AnnouncedRoute {
    pub communities: Vec<Community>,
    /// RFC 4271 §5.1.5: only sent to internal peers (the export policy enforces that).
    pub local_pref: Option<u32>,
    /// `None`: every peer of the router. An empty set: no peer beyond those whose own
    /// `to_advertise` already allows the prefix.
    pub peers: Option<BTreeSet<IpAddr>>,
    /// RFC 8326: the node is draining; the route's LOCAL_PREF 0 wins over a configured one.
    pub graceful_shutdown: bool,
}

/// One router's announced prefixes, in order, each with its attributes.
///
/// Kept by the router's RIB task between changes, a cluster's thousands of prefixes: a sorted
/// list, each distinct set of attributes kept once and shared (a pool's Services have the
/// same communities and audience), is 32 bytes a prefix, where a B-tree with the attributes
/// inline was 109.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AnnouncedSet {
    /// Sorted by prefix, each prefix once.
    routes: Vec<(IpNet, Arc<AnnouncedRoute>)>,
}

impl AnnouncedSet {
    pub fn new() -> AnnouncedSet {
        AnnouncedSet::default()
    }

    /// Adds `prefix`, or changes its attributes.
    pub fn insert(&mut self, prefix: IpNet, route: AnnouncedRoute) {
        match self.routes.binary_search_by(|(p, _)| p.cmp(&prefix)) {
            Ok(at) => {
                if let Some(entry) = self.routes.get_mut(at) {
                    entry.1 = Arc::new(route);
                }
            }
            Err(at) => self.routes.insert(at, (prefix, Arc::new(route))),
        }
    }

    pub fn get(&self, prefix: &IpNet) -> Option<&AnnouncedRoute> {
        let at = self.routes.binary_search_by(|(p, _)| p.cmp(prefix)).ok()?;
        self.routes.get(at).map(|(_, route)| &**route)
    }

    /// The prefixes and their attributes, in prefix order.
    pub fn iter(&self) -> impl Iterator<Item = (&IpNet, &AnnouncedRoute)> {
        self.routes.iter().map(|(prefix, route)| (prefix, &**route))
    }

    pub fn keys(&self) -> impl Iterator<Item = &IpNet> {
        self.routes.iter().map(|(prefix, _)| prefix)
    }

    pub fn values(&self) -> impl Iterator<Item = &AnnouncedRoute> {
        self.routes.iter().map(|(_, route)| &**route)
    }

    pub fn len(&self) -> usize {
        self.routes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.routes.is_empty()
    }
}

/// Makes the shared copies of a set's attributes: one per distinct value.
#[derive(Default)]
struct Interner {
    made: HashMap<AnnouncedRoute, Arc<AnnouncedRoute>, foldhash::fast::RandomState>,
    /// The last one given: prefixes in order mostly have their neighbour's attributes (a
    /// pool's Services), found without hashing.
    last: Option<Arc<AnnouncedRoute>>,
}

impl Interner {
    fn share(&mut self, route: AnnouncedRoute) -> Arc<AnnouncedRoute> {
        if let Some(last) = self.last.as_ref().filter(|last| ***last == route) {
            return last.clone();
        }
        let shared = match self.made.get(&route) {
            Some(shared) => shared.clone(),
            None => {
                let shared = Arc::new(route.clone());
                self.made.insert(route, shared.clone());
                shared
            }
        };
        self.last = Some(shared.clone());
        shared
    }
}

/// One router's originations as its RIB task applies them: its own prefixes, then the ones it
/// imports from another VRF (frr-k8s `imports`), which only reach the peers whose
/// `to_advertise` allows them, without the source's communities (frr-k8s sets those per
/// neighbor, so a leaked route does not carry them).
pub fn announced_set(announcements: &Announcements, vrf: &str) -> AnnouncedSet {
    let Some(router) = announcements.router(vrf) else { return AnnouncedSet::new() };
    let graceful_shutdown = router.graceful_shutdown;
    let mut shared = Interner::default();
    // In the originations' (prefix) order.
    let mut routes: Vec<(IpNet, Arc<AnnouncedRoute>)> = Vec::with_capacity(router.originate.len());
    for (prefix, route) in &router.originate {
        let peers = match &route.peers {
            PeerSet::All => None,
            PeerSet::Only(set) => Some(set.clone()),
            PeerSet::ByPolicy => Some(BTreeSet::new()),
        };
        let route = AnnouncedRoute {
            communities: route.communities.iter().copied().collect(),
            local_pref: route.local_pref,
            peers,
            graceful_shutdown,
        };
        routes.push((*prefix, shared.share(route)));
    }
    let imported = AnnouncedRoute {
        communities: if graceful_shutdown { vec![GRACEFUL_SHUTDOWN] } else { Vec::new() },
        local_pref: graceful_shutdown.then_some(0),
        peers: Some(BTreeSet::new()),
        graceful_shutdown,
    };
    let imported = shared.share(imported);
    let originated = routes.len();
    for prefix in router.imported.keys() {
        let own = routes.get(..originated).unwrap_or_default();
        if own.binary_search_by(|(p, _)| p.cmp(prefix)).is_err() {
            routes.push((*prefix, imported.clone()));
        }
    }
    if routes.len() > originated {
        routes.sort_unstable_by_key(|(prefix, _)| *prefix);
    }
    routes.shrink_to_fit();
    AnnouncedSet { routes }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn route(local_pref: u32) -> AnnouncedRoute {
        AnnouncedRoute {
            communities: vec![Community::Standard(local_pref)],
            local_pref: Some(local_pref),
            peers: None,
            graceful_shutdown: false,
        }
    }

    #[test]
    fn a_set_keeps_its_prefixes_in_order_and_each_distinct_route_once() {
        let mut set = AnnouncedSet::new();
        for (prefix, pref) in [("10.0.0.3/32", 1), ("10.0.0.1/32", 2), ("10.0.0.2/32", 1)] {
            set.insert(prefix.parse().unwrap(), route(pref));
        }
        set.insert("10.0.0.1/32".parse().unwrap(), route(3));
        let keys: Vec<String> = set.keys().map(ToString::to_string).collect();
        assert_eq!(keys, ["10.0.0.1/32", "10.0.0.2/32", "10.0.0.3/32"]);
        assert_eq!(set.get(&"10.0.0.1/32".parse().unwrap()), Some(&route(3)));
        assert_eq!(set.len(), 3);

        let mut shared = Interner::default();
        let made: Vec<Arc<AnnouncedRoute>> =
            [1, 1, 2, 1, 2].into_iter().map(|pref| shared.share(route(pref))).collect();
        assert!(Arc::ptr_eq(&made[0], &made[1]) && Arc::ptr_eq(&made[0], &made[3]));
        assert!(Arc::ptr_eq(&made[2], &made[4]));
        assert!(!Arc::ptr_eq(&made[0], &made[2]));
    }
}
