//! Kernel nexthop objects and groups, counted (model: FRR `zebra_nhg.h`). Pure bookkeeping: the
//! planner turns what these calls return into kernel requests.
//!
//! One nexthop object per (gateway, interface). A group serves one or more BGP next-hop sets
//! of one instance ("hosted" sets) and counts, per set, the routes the RIB has told the writer
//! about: that count is all the writer keeps per route. Every set maps to exactly one group
//! (`by_key`), so a route's group follows from the set the RIB names.
//!
//! A group's kernel members are the resolved hops of the next hops *every* hosted set has
//! (minus those the RIB declared down): a valid way to forward for each of them. A group
//! hosts more than one set while routes move between sets without a kernel message — when a
//! lost next hop leaves a set (the members already lack it) or a returning one joins (the
//! members gain it once the last route of the old set has moved). When routes stay split over
//! two sets for good, the planner's `settle` gives the minority set its own group.

use super::msg::Hop;
use super::route::NextHop;
use std::collections::{HashMap, HashSet};

/// A BGP next-hop set a group serves and how many routes have it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hosted {
    pub hops: Box<[NextHop]>,
    pub routes: u32,
    /// Its routes are being moved to another group (`Registry::depart`): the set no longer
    /// maps here, but still constrains the members until the move is done.
    pub departing: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Group {
    pub id: u32,
    pub instance: usize,
    pub hosted: Vec<Hosted>,
    /// Resolved hops, sorted; empty when no next hop is reachable: the group is then not in the
    /// kernel, and neither are its routes.
    pub members: Vec<Hop>,
    /// Replays in flight that move routes off this group: it stays until they are done.
    pub holds: u32,
}

impl Group {
    pub fn routes(&self) -> u32 {
        self.hosted.iter().map(|h| h.routes).fold(0, u32::saturating_add)
    }

    pub fn in_kernel(&self) -> bool {
        !self.members.is_empty()
    }

    /// The next hops every hosted set has, minus `down`, sorted.
    pub fn basis(&self, down: &HashSet<NextHop>) -> Vec<NextHop> {
        basis(self.hosted.iter().map(|h| &*h.hops), down)
    }

    /// The sets whose routes are (still) on this group.
    pub fn live_sets(&self) -> impl Iterator<Item = &[NextHop]> {
        self.hosted.iter().filter(|h| !h.departing).map(|h| &*h.hops)
    }
}

/// The intersection of `sets` (each sorted) minus `down`.
pub fn basis<'a>(
    mut sets: impl Iterator<Item = &'a [NextHop]>,
    down: &HashSet<NextHop>,
) -> Vec<NextHop> {
    let Some(first) = sets.next() else { return Vec::new() };
    let mut out: Vec<NextHop> = first.iter().filter(|h| !down.contains(h)).copied().collect();
    for set in sets {
        out.retain(|h| set.binary_search(h).is_ok());
    }
    out
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct NexthopObject {
    id: u32,
    /// Groups that have this hop as a member.
    groups: usize,
}

/// What [`Registry::set_members`] changed, in the order the kernel must see it: create
/// `created` objects, then replace the group with `member_ids` (delete it when empty), then
/// delete `unused`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MemberChange {
    pub created: Vec<(u32, Hop)>,
    pub member_ids: Vec<u32>,
    pub unused: Vec<u32>,
    pub was_empty: bool,
}

/// The first id uplink hands out; ids below are left to other daemons (FRR's zebra counts up
/// from 1).
pub const FIRST_ID: u32 = 0x0100_0000;

#[derive(Debug)]
pub struct Registry {
    groups: HashMap<u32, Group>,
    /// Per instance: set -> the group its routes are on.
    by_key: HashMap<usize, HashMap<Box<[NextHop]>, u32>>,
    nexthops: HashMap<Hop, NexthopObject>,
    next_id: u32,
    /// Set once the id space has wrapped: from then on, ids still in use must be skipped.
    wrapped: bool,
    /// Ids other owners hold in the kernel, never handed out.
    foreign: HashSet<u32>,
}

impl Default for Registry {
    fn default() -> Self {
        Self::new()
    }
}

impl Registry {
    pub fn new() -> Self {
        Self {
            groups: HashMap::new(),
            by_key: HashMap::new(),
            nexthops: HashMap::new(),
            next_id: FIRST_ID,
            wrapped: false,
            foreign: HashSet::new(),
        }
    }

    /// Ids found in the kernel that belong to someone else.
    pub fn reserve_foreign(&mut self, ids: impl IntoIterator<Item = u32>) {
        self.foreign.extend(ids);
    }

    /// Ids are never reused while uplink runs, so a delete and a create of one id can never
    /// meet in one batch.
    fn allocate(&mut self) -> u32 {
        loop {
            let id = self.next_id;
            self.next_id = self.next_id.checked_add(1).unwrap_or_else(|| {
                self.wrapped = true;
                FIRST_ID
            });
            if !(self.foreign.contains(&id) || self.wrapped && self.owns(id)) {
                return id;
            }
        }
    }

    pub fn group(&self, id: u32) -> Option<&Group> {
        self.groups.get(&id)
    }

    pub fn groups(&self) -> impl Iterator<Item = &Group> {
        self.groups.values()
    }

    pub fn group_ids(&self) -> Vec<u32> {
        self.groups.keys().copied().collect()
    }

    /// The group the routes of `hops` in `instance` are on.
    pub fn find(&self, instance: usize, hops: &[NextHop]) -> Option<u32> {
        self.by_key.get(&instance)?.get(hops).copied()
    }

    /// Every nexthop object: (id, hop).
    pub fn nexthops(&self) -> impl Iterator<Item = (u32, Hop)> + '_ {
        self.nexthops.iter().map(|(hop, n)| (n.id, *hop))
    }

    pub fn nexthop_id(&self, hop: &Hop) -> Option<u32> {
        self.nexthops.get(hop).map(|n| n.id)
    }

    /// A new group serving `hops`, with no routes and no members yet (resolve it and call
    /// [`Registry::set_members`]).
    pub fn create(&mut self, instance: usize, hops: &[NextHop]) -> u32 {
        let id = self.allocate();
        let hosted = vec![Hosted { hops: hops.into(), routes: 0, departing: false }];
        self.groups.insert(id, Group { id, instance, hosted, members: Vec::new(), holds: 0 });
        self.by_key.entry(instance).or_default().insert(hops.into(), id);
        id
    }

    /// `hops` (which no group serves) is served by group `id` from now on.
    pub fn host(&mut self, id: u32, hops: &[NextHop]) {
        let Some(group) = self.groups.get_mut(&id) else { return };
        group.hosted.push(Hosted { hops: hops.into(), routes: 0, departing: false });
        self.by_key.entry(group.instance).or_default().insert(hops.into(), id);
    }

    /// One more route of `hops` on group `id`.
    pub fn add_route(&mut self, id: u32, hops: &[NextHop]) {
        let Some(group) = self.groups.get_mut(&id) else { return };
        if let Some(h) = group.hosted.iter_mut().find(|h| !h.departing && *h.hops == *hops) {
            h.routes = h.routes.saturating_add(1);
        }
    }

    /// One route of `hops` fewer on group `id`. Returns true when that was the set's last
    /// route: the group no longer serves it, and its members may grow.
    pub fn remove_route(&mut self, id: u32, hops: &[NextHop]) -> bool {
        let Some(group) = self.groups.get_mut(&id) else { return false };
        let Some(index) = group.hosted.iter().position(|h| !h.departing && *h.hops == *hops) else {
            return false;
        };
        let Some(h) = group.hosted.get_mut(index) else { return false };
        h.routes = h.routes.saturating_sub(1);
        if h.routes > 0 {
            return false;
        }
        // The last set of a group stays, so the group keeps a basis until it is removed.
        if group.hosted.len() == 1 {
            return true;
        }
        let gone = group.hosted.swap_remove(index);
        if let Some(map) = self.by_key.get_mut(&group.instance) {
            if map.get(&gone.hops) == Some(&id) {
                map.remove(&gone.hops);
            }
        }
        true
    }

    /// The routes of `hops` move from group `from` to group `to` (new, serving `hops`): `to`
    /// takes the set and its count; `from` keeps the set as departing, and is held until
    /// [`Registry::release`].
    pub fn depart(&mut self, from: u32, hops: &[NextHop], to: u32) {
        let Some(group) = self.groups.get_mut(&from) else { return };
        let Some(h) = group.hosted.iter_mut().find(|h| !h.departing && *h.hops == *hops) else {
            return;
        };
        let routes = std::mem::take(&mut h.routes);
        h.departing = true;
        group.holds = group.holds.saturating_add(1);
        let instance = group.instance;
        if let Some(target) = self.groups.get_mut(&to) {
            if let Some(t) = target.hosted.iter_mut().find(|t| *t.hops == *hops) {
                t.routes = t.routes.saturating_add(routes);
            }
        }
        self.by_key.entry(instance).or_default().insert(hops.into(), to);
    }

    /// A move started by [`Registry::depart`] is done: once no move holds the group, its
    /// departing sets go.
    pub fn release(&mut self, id: u32) {
        let Some(group) = self.groups.get_mut(&id) else { return };
        group.holds = group.holds.saturating_sub(1);
        if group.holds == 0 && group.hosted.iter().any(|h| !h.departing) {
            group.hosted.retain(|h| !h.departing);
        }
    }

    /// Removes a group with no routes and nothing holding it; returns it with the nexthop
    /// objects no other group uses (delete the group first, then those).
    pub fn remove(&mut self, id: u32) -> Option<(Group, Vec<u32>)> {
        let group = self.groups.remove(&id)?;
        if let Some(map) = self.by_key.get_mut(&group.instance) {
            for h in &group.hosted {
                if map.get(&h.hops) == Some(&id) {
                    map.remove(&h.hops);
                }
            }
        }
        let unused = self.drop_members(&group.members);
        Some((group, unused))
    }

    /// Sets the resolved members of a group; `None` when nothing changed.
    pub fn set_members(&mut self, id: u32, mut hops: Vec<Hop>) -> Option<MemberChange> {
        hops.sort();
        hops.dedup();
        let old = &self.groups.get(&id)?.members;
        if *old == hops {
            return None;
        }
        let old = old.clone();
        let mut change = MemberChange { was_empty: old.is_empty(), ..MemberChange::default() };
        for hop in hops.iter().filter(|h| old.binary_search(h).is_err()) {
            match self.nexthops.get_mut(hop) {
                Some(n) => n.groups += 1,
                None => {
                    let nh_id = self.allocate();
                    self.nexthops.insert(*hop, NexthopObject { id: nh_id, groups: 1 });
                    change.created.push((nh_id, *hop));
                }
            }
        }
        let gone: Vec<Hop> =
            old.iter().filter(|h| hops.binary_search(h).is_err()).copied().collect();
        change.unused = self.drop_members(&gone);
        change.member_ids = hops.iter().filter_map(|h| self.nexthop_id(h)).collect();
        if let Some(group) = self.groups.get_mut(&id) {
            group.members = hops;
        }
        Some(change)
    }

    fn drop_members(&mut self, hops: &[Hop]) -> Vec<u32> {
        let mut unused = Vec::new();
        for hop in hops {
            if let Some(n) = self.nexthops.get_mut(hop) {
                n.groups = n.groups.saturating_sub(1);
                if n.groups == 0 {
                    unused.push(n.id);
                    self.nexthops.remove(hop);
                }
            }
        }
        unused
    }

    /// Whether `id` is one of ours (a group or a nexthop object).
    pub fn owns(&self, id: u32) -> bool {
        self.groups.contains_key(&id) || self.nexthops.values().any(|n| n.id == id)
    }

    /// Forgets every group of `instance` (retired by a reload); returns their ids and the
    /// nexthop objects left unused.
    pub fn remove_instance(&mut self, instance: usize) -> (Vec<u32>, Vec<u32>) {
        let ids: Vec<u32> =
            self.groups.values().filter(|g| g.instance == instance).map(|g| g.id).collect();
        let mut unused = Vec::new();
        for id in &ids {
            if let Some((_, u)) = self.remove(*id) {
                unused.extend(u);
            }
        }
        self.by_key.remove(&instance);
        (ids, unused)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    fn bgp(n: u8) -> NextHop {
        NextHop::V4(Ipv4Addr::new(10, 0, n, 2))
    }

    fn hop(n: u8) -> Hop {
        Hop { gateway: Ipv4Addr::new(10, 0, n, 2).into(), ifindex: u32::from(n) }
    }

    fn set(hops: &[u8]) -> Vec<NextHop> {
        hops.iter().map(|n| bgp(*n)).collect()
    }

    #[test]
    fn a_set_maps_to_one_group_which_counts_its_routes() {
        let mut r = Registry::new();
        let g = r.create(0, &set(&[1, 2]));
        r.add_route(g, &set(&[1, 2]));
        r.add_route(g, &set(&[1, 2]));
        assert_eq!(r.find(0, &set(&[1, 2])), Some(g));
        assert_eq!(r.find(1, &set(&[1, 2])), None, "sets are per instance");
        assert_eq!(r.group(g).unwrap().routes(), 2);
        assert!(!r.remove_route(g, &set(&[1, 2])));
        assert!(r.remove_route(g, &set(&[1, 2])));
        assert_eq!(r.group(g).unwrap().routes(), 0);
        r.remove(g).unwrap();
        assert_eq!(r.find(0, &set(&[1, 2])), None);
    }

    #[test]
    fn a_hosted_set_leaves_with_its_last_route_and_the_basis_grows() {
        let mut r = Registry::new();
        let g = r.create(0, &set(&[2]));
        r.add_route(g, &set(&[2]));
        r.host(g, &set(&[1, 2]));
        r.add_route(g, &set(&[1, 2]));
        let none = HashSet::new();
        assert_eq!(r.group(g).unwrap().basis(&none), set(&[2]));
        assert!(r.remove_route(g, &set(&[2])));
        assert_eq!(r.find(0, &set(&[2])), None);
        assert_eq!(r.find(0, &set(&[1, 2])), Some(g));
        assert_eq!(r.group(g).unwrap().basis(&none), set(&[1, 2]));
        let down: HashSet<NextHop> = [bgp(1)].into();
        assert_eq!(r.group(g).unwrap().basis(&down), set(&[2]));
    }

    #[test]
    fn nexthop_objects_are_shared_between_groups_and_freed_with_the_last() {
        let mut r = Registry::new();
        let g12 = r.create(0, &set(&[1, 2]));
        let g1 = r.create(0, &set(&[1]));
        let change = r.set_members(g12, vec![hop(2), hop(1)]).unwrap();
        assert!(change.was_empty);
        assert_eq!(change.created.len(), 2);
        let change = r.set_members(g1, vec![hop(1)]).unwrap();
        assert!(change.created.is_empty(), "hop 1 already has an object");
        let id1 = r.nexthop_id(&hop(1)).unwrap();
        assert_eq!(change.member_ids, vec![id1]);
        assert_eq!(r.set_members(g1, vec![hop(1)]), None);
        let id2 = r.nexthop_id(&hop(2)).unwrap();
        let change = r.set_members(g12, vec![hop(1)]).unwrap();
        assert_eq!(change.unused, vec![id2]);
        let (_, unused) = r.remove(g12).unwrap();
        assert!(unused.is_empty(), "g1 still uses hop 1");
        let (_, unused) = r.remove(g1).unwrap();
        assert_eq!(unused, vec![id1]);
        assert_eq!(r.nexthops().count(), 0);
    }

    #[test]
    fn departing_sets_hold_the_group_until_released() {
        let mut r = Registry::new();
        let g = r.create(0, &set(&[2]));
        r.add_route(g, &set(&[2]));
        r.host(g, &set(&[1, 2]));
        r.add_route(g, &set(&[1, 2]));
        r.add_route(g, &set(&[1, 2]));
        let to = r.create(0, &set(&[1, 2]));
        r.depart(g, &set(&[1, 2]), to);
        assert_eq!(r.find(0, &set(&[1, 2])), Some(to));
        assert_eq!(r.group(to).unwrap().routes(), 2);
        let from = r.group(g).unwrap();
        assert_eq!((from.routes(), from.holds, from.hosted.len()), (1, 1, 2));
        // The departing set still constrains the basis.
        assert_eq!(from.basis(&HashSet::new()), set(&[2]));
        r.release(g);
        assert_eq!(r.group(g).unwrap().hosted.len(), 1);
    }

    #[test]
    fn ids_skip_foreign_ones_and_are_not_reused() {
        let mut r = Registry::new();
        r.reserve_foreign([FIRST_ID, FIRST_ID + 1]);
        let g = r.create(0, &set(&[1]));
        assert_eq!(g, FIRST_ID + 2);
        r.remove(g);
        let again = r.create(0, &set(&[1]));
        assert_ne!(again, g);
        assert!(r.owns(again));
        assert!(!r.owns(FIRST_ID));
    }
}
