//! Kernel nexthop objects and groups, reference-counted (model: FRR `zebra_nhg.h`).
//!
//! One nexthop object per (gateway, interface); one group per distinct set of BGP next hops of
//! an instance, shared by every route with that set. A group's kernel members are the resolved
//! hops of its BGP next hops, so when a member leaves or joins only the group is replaced and
//! no route is touched. Pure bookkeeping: the writer turns what these calls return into netlink
//! messages.

use super::msg::Hop;
use super::route::NextHop;
use std::collections::{HashMap, HashSet};

/// The BGP next hops of a route (sorted, deduplicated) in one routing instance.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct GroupKey {
    pub instance: usize,
    pub next_hops: Vec<NextHop>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Group {
    pub id: u32,
    pub key: GroupKey,
    /// Routes pointing at this group.
    pub routes: usize,
    /// Resolved hops, sorted; empty when no BGP next hop is reachable (the group is then not
    /// in the kernel and its routes are pending).
    pub members: Vec<Hop>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct NexthopObject {
    id: u32,
    /// Groups that have this hop as a member.
    groups: usize,
}

/// What [`Registry::set_members`] changed, in the order the kernel must see it: create
/// `created` objects, then replace the group with `member_ids`, then delete `unused`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MemberChange {
    pub created: Vec<(u32, Hop)>,
    pub member_ids: Vec<u32>,
    pub unused: Vec<u32>,
    pub was_empty: bool,
}

/// The first id uplink hands out; ids below are left to other daemons (FRR's zebra counts up
/// from 1).
const FIRST_ID: u32 = 0x0100_0000;

#[derive(Debug)]
pub struct Registry {
    groups: HashMap<u32, Group>,
    by_key: HashMap<GroupKey, u32>,
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

    pub fn find(&self, key: &GroupKey) -> Option<u32> {
        self.by_key.get(key).copied()
    }

    /// Every nexthop object: (id, hop).
    pub fn nexthops(&self) -> impl Iterator<Item = (u32, Hop)> + '_ {
        self.nexthops.iter().map(|(hop, n)| (n.id, *hop))
    }

    pub fn nexthop_id(&self, hop: &Hop) -> Option<u32> {
        self.nexthops.get(hop).map(|n| n.id)
    }

    /// Takes a reference on the group of `key`; `true` when it was created (with no members:
    /// resolve it and call [`Registry::set_members`]).
    pub fn acquire(&mut self, key: &GroupKey) -> (u32, bool) {
        if let Some(id) = self.by_key.get(key) {
            if let Some(group) = self.groups.get_mut(id) {
                group.routes += 1;
                return (*id, false);
            }
        }
        let id = self.allocate();
        self.groups.insert(id, Group { id, key: key.clone(), routes: 1, members: Vec::new() });
        self.by_key.insert(key.clone(), id);
        (id, true)
    }

    /// Drops a route's reference. When it was the last, the group is removed and returned with
    /// the nexthop objects no other group uses (delete the group first, then those).
    pub fn release(&mut self, id: u32) -> Option<(Group, Vec<u32>)> {
        let group = self.groups.get_mut(&id)?;
        group.routes = group.routes.saturating_sub(1);
        if group.routes > 0 {
            return None;
        }
        let group = self.groups.remove(&id)?;
        self.by_key.remove(&group.key);
        let unused = self.drop_members(&group.members);
        Some((group, unused))
    }

    /// Gives a group a new key in place: every route of the group moved to the same new set
    /// and no group has that set yet, so the group is replaced instead of every route.
    pub fn rekey(&mut self, id: u32, key: GroupKey) -> bool {
        if self.by_key.contains_key(&key) {
            return false;
        }
        let Some(group) = self.groups.get_mut(&id) else { return false };
        self.by_key.remove(&group.key);
        group.key = key.clone();
        self.by_key.insert(key, id);
        true
    }

    /// Sets the resolved members of a group; `None` when nothing changed.
    pub fn set_members(&mut self, id: u32, mut hops: Vec<Hop>) -> Option<MemberChange> {
        hops.sort();
        hops.dedup();
        let old = self.groups.get(&id)?.members.clone();
        if old == hops {
            return None;
        }
        let mut change = MemberChange { was_empty: old.is_empty(), ..MemberChange::default() };
        for hop in hops.iter().filter(|h| !old.contains(h)) {
            match self.nexthops.get_mut(hop) {
                Some(n) => n.groups += 1,
                None => {
                    let nh_id = self.allocate();
                    self.nexthops.insert(*hop, NexthopObject { id: nh_id, groups: 1 });
                    change.created.push((nh_id, *hop));
                }
            }
        }
        let gone: Vec<Hop> = old.iter().filter(|h| !hops.contains(h)).copied().collect();
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

    fn key(hops: &[u8]) -> GroupKey {
        GroupKey { instance: 0, next_hops: hops.iter().map(|n| bgp(*n)).collect() }
    }

    #[test]
    fn routes_with_one_set_share_one_group_until_the_last_leaves() {
        let mut r = Registry::new();
        let (a, created) = r.acquire(&key(&[1, 2]));
        assert!(created);
        let (b, created) = r.acquire(&key(&[1, 2]));
        assert_eq!((a, created), (b, false));
        let (c, _) = r.acquire(&key(&[1]));
        assert_ne!(a, c);
        assert_eq!(r.group(a).unwrap().routes, 2);
        assert!(r.release(a).is_none());
        let (gone, _) = r.release(a).unwrap();
        assert_eq!(gone.id, a);
        assert!(r.group(a).is_none());
        assert_eq!(r.find(&key(&[1, 2])), None);
        assert_eq!(r.find(&key(&[1])), Some(c));
    }

    #[test]
    fn nexthop_objects_are_shared_between_groups_and_freed_with_the_last() {
        let mut r = Registry::new();
        let (g12, _) = r.acquire(&key(&[1, 2]));
        let (g1, _) = r.acquire(&key(&[1]));
        let change = r.set_members(g12, vec![hop(2), hop(1)]).unwrap();
        assert!(change.was_empty);
        assert_eq!(change.created.len(), 2);
        assert_eq!(change.member_ids.len(), 2);
        let change = r.set_members(g1, vec![hop(1)]).unwrap();
        assert!(change.created.is_empty(), "hop 1 already has an object");
        let id1 = r.nexthop_id(&hop(1)).unwrap();
        assert_eq!(change.member_ids, vec![id1]);
        // The same members again: nothing to do.
        assert_eq!(r.set_members(g1, vec![hop(1)]), None);
        // g12 loses hop 2: its object is unused; hop 1's is still used by g1.
        let id2 = r.nexthop_id(&hop(2)).unwrap();
        let change = r.set_members(g12, vec![hop(1)]).unwrap();
        assert_eq!(change.unused, vec![id2]);
        assert_eq!(change.member_ids, vec![id1]);
        let (_, unused) = r.release(g12).unwrap();
        assert!(unused.is_empty(), "g1 still uses hop 1");
        let (_, unused) = r.release(g1).unwrap();
        assert_eq!(unused, vec![id1]);
        assert_eq!(r.nexthops().count(), 0);
    }

    #[test]
    fn rekey_moves_a_group_to_a_new_set_unless_that_set_has_a_group() {
        let mut r = Registry::new();
        let (g, _) = r.acquire(&key(&[1, 2]));
        assert!(r.rekey(g, key(&[2])));
        assert_eq!(r.find(&key(&[2])), Some(g));
        assert_eq!(r.find(&key(&[1, 2])), None);
        let (other, _) = r.acquire(&key(&[3]));
        assert!(!r.rekey(g, key(&[3])));
        assert_eq!(r.find(&key(&[3])), Some(other));
    }

    #[test]
    fn ids_skip_foreign_ones_and_are_not_reused() {
        let mut r = Registry::new();
        r.reserve_foreign([FIRST_ID, FIRST_ID + 1]);
        let (g, _) = r.acquire(&key(&[1]));
        assert_eq!(g, FIRST_ID + 2);
        r.release(g);
        let (again, _) = r.acquire(&key(&[1]));
        assert_ne!(again, g);
        assert!(r.owns(again));
        assert!(!r.owns(FIRST_ID));
    }
}
