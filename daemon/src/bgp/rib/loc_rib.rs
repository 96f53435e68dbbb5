//! Loc-RIB storage: per family, a hash map from prefix to the paths received for it (the
//! post-policy Adj-RIBs-In and the Loc-RIB in one structure, as holo keeps them per destination).
//!
//! Memory layout, the reason for each choice (x86-64):
//! - `Path` is an `Arc` (8) + `PeerId` (4) + two flags and the reason (3) = 16 bytes.
//! - `Destination` is `One(Path)` or `Many(Box<Vec<Path>>)`; the box is 8 bytes, so the enum
//!   takes its tag from a niche in `Path` and stays 16 bytes: no heap allocation per route in
//!   the common single-path case (asserted in the tests).
//! - An IPv4 entry `(Ipv4Net, Destination)` is 5 + 3 padding + 16 = 24 bytes; hashbrown adds one
//!   control byte per bucket and keeps at most 7/8 of the buckets full, so a million routes sit
//!   in 2^21 buckets: 2^21 * 25 B = 52 MB, about 52 bytes per route (46 bytes at 900k routes).
//! - Attributes are interned (`intern.rs`), so routes sharing a set add nothing per route.

use std::collections::HashMap;
use std::fmt::Debug;
use std::hash::Hash;
use std::net::IpAddr;
use std::sync::Arc;

use ipnet::{IpNet, Ipv4Net, Ipv6Net};

use crate::bgp::rib::decision::Rejected;
use crate::bgp::rib::PeerId;
use crate::bgp::wire::attributes::{Family, NextHop, PathAttributes};
use crate::fib;

/// A prefix type with its own table per family.
pub trait Prefix: Copy + Eq + Hash + Ord + Debug + Into<IpNet> {
    const FAMILY: Family;
}

impl Prefix for Ipv4Net {
    const FAMILY: Family = Family::IPV4_UNICAST;
}

impl Prefix for Ipv6Net {
    const FAMILY: Family = Family::IPV6_UNICAST;
}

/// Where a path came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Source {
    /// Originated by this router (`prefixes` of the router config).
    Local,
    Peer(PeerId),
}

/// One path to a destination.
#[derive(Debug, Clone)]
pub struct Path {
    /// `PeerId::LOCAL` for locally originated paths (keeps `Path` at 16 bytes).
    pub(crate) peer: PeerId,
    pub(crate) attrs: Arc<PathAttributes>,
    pub(crate) best: bool,
    pub(crate) multipath: bool,
    /// Kept from a peer that is restarting (RFC 4724 §4.2) and not yet re-advertised since;
    /// fits in the padding, so a path stays 16 bytes.
    pub(crate) stale: bool,
    pub(crate) reason: Option<Rejected>,
}

impl Path {
    pub(crate) fn new(peer: PeerId, attrs: Arc<PathAttributes>) -> Self {
        Self { peer, attrs, best: false, multipath: false, stale: false, reason: None }
    }

    pub fn source(&self) -> Source {
        if self.peer == PeerId::LOCAL {
            Source::Local
        } else {
            Source::Peer(self.peer)
        }
    }

    pub fn attrs(&self) -> &Arc<PathAttributes> {
        &self.attrs
    }

    pub fn is_best(&self) -> bool {
        self.best
    }

    /// Part of an ECMP set of more than one path (the best path included).
    pub fn is_multipath(&self) -> bool {
        self.multipath
    }

    /// Kept from a restarting peer that has not advertised it again yet (RFC 4724).
    pub fn is_stale(&self) -> bool {
        self.stale
    }

    /// Why this path is not the best one (`None` for the best path).
    pub fn reason(&self) -> Option<Rejected> {
        self.reason
    }
}

/// The paths of one prefix. Never empty: a prefix with no path is removed from the table.
#[derive(Debug, Clone)]
pub(crate) enum Destination {
    One(Path),
    /// Two or more paths; boxed so the common case stays small.
    #[allow(clippy::box_collection)]
    Many(Box<Vec<Path>>),
}

impl Destination {
    pub(crate) fn paths(&self) -> &[Path] {
        match self {
            Destination::One(p) => std::slice::from_ref(p),
            Destination::Many(v) => v,
        }
    }

    pub(crate) fn paths_mut(&mut self) -> &mut [Path] {
        match self {
            Destination::One(p) => std::slice::from_mut(p),
            Destination::Many(v) => v,
        }
    }

    /// Adds `path`, replacing the path from the same source if there is one.
    pub(crate) fn upsert(&mut self, path: Path) {
        match self {
            Destination::One(p) if p.peer == path.peer => *p = path,
            Destination::One(p) => *self = Destination::Many(Box::new(vec![p.clone(), path])),
            Destination::Many(v) => match v.iter_mut().find(|p| p.peer == path.peer) {
                Some(p) => *p = path,
                None => v.push(path),
            },
        }
    }

    /// Removes the path from `peer`. Returns whether one was removed; when the destination
    /// would become empty it is left untouched and `Removal::LastPath` is returned.
    pub(crate) fn remove(&mut self, peer: PeerId) -> Removal {
        match self {
            Destination::One(p) if p.peer == peer => Removal::LastPath,
            Destination::One(_) => Removal::NotPresent,
            Destination::Many(v) => {
                let Some(index) = v.iter().position(|p| p.peer == peer) else {
                    return Removal::NotPresent;
                };
                v.swap_remove(index);
                if let [only] = v.as_slice() {
                    *self = Destination::One(only.clone());
                }
                Removal::Removed
            }
        }
    }

    pub(crate) fn best(&self) -> Option<&Path> {
        self.paths().iter().find(|p| p.best)
    }

    /// The next hops to install, into `out`: those of the best path and its multipaths,
    /// sorted and deduplicated; empty when the best path is local (nothing to install) or
    /// there is none. `peer_address` gives each path's session address (see
    /// [`forwarding_next_hop`]). `out` is the caller's, reused, so no prefix allocates.
    pub(crate) fn fib_next_hops(
        &self,
        peer_address: impl Fn(PeerId) -> Option<IpAddr>,
        out: &mut Vec<fib::NextHop>,
    ) {
        out.clear();
        for p in self.paths() {
            if !(p.best || p.multipath) || p.peer == PeerId::LOCAL {
                continue;
            }
            let hop = forwarding_next_hop(p.attrs.next_hop, peer_address(p.peer));
            if let Some(hop) = to_fib(hop).filter(|h| !out.contains(h)) {
                out.push(hop);
            }
        }
        out.sort_unstable();
    }
}

/// A BGP next hop in the FIB writer's terms; `None` for an unspecified one (nothing to install).
pub(crate) fn to_fib(hop: NextHop) -> Option<fib::NextHop> {
    match hop {
        NextHop::Unspecified => None,
        NextHop::V4(a) => Some(fib::NextHop::V4(a)),
        NextHop::V6 { global, link_local } => Some(fib::NextHop::V6 { global, link_local }),
    }
}

/// The next hop as the FIB should resolve it. RFC 2545 §3: a peer on a shared link may send
/// only its link-local address (as the one next hop, or beside `::`); a link-local address
/// means nothing without an interface, and the interface is the session's. It is expressed as
/// the peer's own (global) address with the link-local beside it, which the FIB resolves to
/// "via the link-local, on the interface the peer's address is connected to" — the same rule
/// as for a global + link-local pair. A session over IPv4 gives no such anchor: the hop is left
/// as received and stays pending.
pub(crate) fn forwarding_next_hop(hop: NextHop, peer: Option<IpAddr>) -> NextHop {
    let NextHop::V6 { global, link_local } = hop else { return hop };
    let Some(IpAddr::V6(peer)) = peer else { return hop };
    match link_local {
        None if global.is_unicast_link_local() => {
            NextHop::V6 { global: peer, link_local: Some(global) }
        }
        Some(ll) if global.is_unspecified() || global.is_unicast_link_local() => {
            NextHop::V6 { global: peer, link_local: Some(ll) }
        }
        _ => hop,
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Removal {
    NotPresent,
    Removed,
    LastPath,
}

/// The routes of one family.
/// Prefix-keyed map with a fast hasher (seeded per process; see Cargo.toml for why).
pub(crate) type PrefixMap<P, V> = HashMap<P, V, foldhash::fast::RandomState>;

#[derive(Debug)]

pub(crate) struct Table<P: Prefix> {
    pub(crate) map: PrefixMap<P, Destination>,
    /// FRR's table version: one more each time a prefix's best path changes.
    pub(crate) version: u64,
}

impl<P: Prefix> Default for Table<P> {
    fn default() -> Self {
        Self { map: PrefixMap::default(), version: 0 }
    }
}

impl<P: Prefix> Table<P> {
    pub(crate) fn path_count(&self) -> usize {
        self.map.values().map(|d| d.paths().len()).sum()
    }

    /// Heap bytes of the table (map buckets and multipath vectors), excluding the shared
    /// attribute sets: the arithmetic of the module comment, applied to the current capacity.
    pub(crate) fn approx_heap_bytes(&self) -> usize {
        let capacity = self.map.capacity();
        let buckets =
            if capacity == 0 { 0 } else { (capacity.saturating_mul(8) / 7).next_power_of_two() };
        let entry = std::mem::size_of::<(P, Destination)>().saturating_add(1);
        let many: usize = self
            .map
            .values()
            .map(|d| match d {
                Destination::One(_) => 0,
                Destination::Many(v) => std::mem::size_of::<Vec<Path>>()
                    .saturating_add(v.capacity().saturating_mul(std::mem::size_of::<Path>())),
            })
            .sum();
        buckets.saturating_mul(entry).saturating_add(many)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn per_route_layout_stays_small() {
        assert_eq!(std::mem::size_of::<Path>(), 16);
        assert_eq!(std::mem::size_of::<Destination>(), 16);
        assert_eq!(std::mem::size_of::<(Ipv4Net, Destination)>(), 24);
        assert_eq!(std::mem::size_of::<(Ipv6Net, Destination)>(), 40);
    }

    #[test]
    fn link_local_only_next_hops_are_anchored_to_the_session() {
        let ll: std::net::Ipv6Addr = "fe80::2".parse().unwrap();
        let peer: IpAddr = "2001:db8::2".parse().unwrap();
        let anchored = NextHop::V6 { global: "2001:db8::2".parse().unwrap(), link_local: Some(ll) };
        let only_ll = NextHop::V6 { global: ll, link_local: None };
        assert_eq!(forwarding_next_hop(only_ll, Some(peer)), anchored);
        let unspecified_and_ll =
            NextHop::V6 { global: std::net::Ipv6Addr::UNSPECIFIED, link_local: Some(ll) };
        assert_eq!(forwarding_next_hop(unspecified_and_ll, Some(peer)), anchored);
        // A global next hop is kept, with or without its link-local.
        let global = NextHop::V6 { global: "2001:db8::9".parse().unwrap(), link_local: Some(ll) };
        assert_eq!(forwarding_next_hop(global, Some(peer)), global);
        // Over an IPv4 session there is no IPv6 anchor: left as received.
        assert_eq!(forwarding_next_hop(only_ll, Some("192.0.2.2".parse().unwrap())), only_ll);
        assert_eq!(
            forwarding_next_hop(NextHop::V4("192.0.2.9".parse().unwrap()), Some(peer)),
            NextHop::V4("192.0.2.9".parse().unwrap())
        );
    }

    #[test]
    fn destination_upsert_and_remove_keep_the_inline_case() {
        let attrs = Arc::new(PathAttributes::default());
        let mut d = Destination::One(Path::new(PeerId(1), Arc::clone(&attrs)));
        d.upsert(Path::new(PeerId(1), Arc::clone(&attrs)));
        assert!(matches!(d, Destination::One(_)));
        d.upsert(Path::new(PeerId(2), Arc::clone(&attrs)));
        assert_eq!(d.paths().len(), 2);
        assert_eq!(d.remove(PeerId(3)), Removal::NotPresent);
        assert_eq!(d.remove(PeerId(1)), Removal::Removed);
        assert!(matches!(&d, Destination::One(p) if p.peer == PeerId(2)));
        assert_eq!(d.remove(PeerId(2)), Removal::LastPath);
    }
}
