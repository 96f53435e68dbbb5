//! What one router originates, as the BGP side applies it: a plain set of prefixes, each with
//! its communities, LOCAL_PREF and audience. The announcer publishes one set per VRF
//! ([`super::runtime::AnnouncerHandle::subscribe`]); the router's RIB task turns it into
//! originated routes and export policy.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

use ipnet::IpNet;

use super::compute::{Announcements, PeerSet, GRACEFUL_SHUTDOWN};
use crate::config::Community;

/// One announced prefix with its attributes and audience.
#[derive(Debug, Clone, PartialEq, Eq)]
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

pub type AnnouncedSet = BTreeMap<IpNet, AnnouncedRoute>;

/// One router's originations as its RIB task applies them: its own prefixes, then the ones it
/// imports from another VRF (frr-k8s `imports`), which only reach the peers whose
/// `to_advertise` allows them, without the source's communities (frr-k8s sets those per
/// neighbor, so a leaked route does not carry them).
pub fn announced_set(announcements: &Announcements, vrf: &str) -> AnnouncedSet {
    let Some(router) = announcements.router(vrf) else { return AnnouncedSet::new() };
    let mut set: AnnouncedSet = router
        .originate
        .iter()
        .map(|(prefix, route)| {
            let peers = match &route.peers {
                PeerSet::All => None,
                PeerSet::Only(set) => Some(set.clone()),
                PeerSet::ByPolicy => Some(BTreeSet::new()),
            };
            let communities = route.communities.iter().copied().collect();
            let route = AnnouncedRoute {
                communities,
                local_pref: route.local_pref,
                peers,
                graceful_shutdown: router.graceful_shutdown,
            };
            (*prefix, route)
        })
        .collect();
    for prefix in router.imported.keys() {
        let graceful_shutdown = router.graceful_shutdown;
        set.entry(*prefix).or_insert_with(|| AnnouncedRoute {
            communities: if graceful_shutdown { vec![GRACEFUL_SHUTDOWN] } else { Vec::new() },
            local_pref: graceful_shutdown.then_some(0),
            peers: Some(BTreeSet::new()),
            graceful_shutdown,
        });
    }
    set
}
