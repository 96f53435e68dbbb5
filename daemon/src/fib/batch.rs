//! What a RIB task hands the FIB writer: compact batches of route changes.
//!
//! A change names its prefix and two next-hop sets — the one the writer was last told for that
//! prefix and the one it should have now — by index into the batch's own table of sets, so a
//! change is 10 octets (IPv4) or 22 (IPv6) and no change owns a heap allocation. Carrying the
//! old set is what lets the writer keep no per-route state: the RIB is the desired state, and
//! the writer counts routes per set (see `groups.rs`).
//!
//! A batch also carries next hops the RIB lost or regained (a session went down, or its first
//! route came back), which the writer applies before the batch's routes: every nexthop group
//! containing a lost hop is replaced first, one kernel message per group, whatever the number
//! of routes (prefix-independent convergence).

use super::route::NextHop;
use ipnet::{IpNet, Ipv4Net, Ipv6Net};
use std::collections::HashMap;

/// The index of a next-hop set within one batch; 0 is the empty set ("no route").
pub type SetIndex = u16;

/// A batch is sealed once it holds this many changes, so the writer can start on it while the
/// RIB goes on.
const MAX_CHANGES: usize = 32 * 1024;

/// One prefix's change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Change<P> {
    pub prefix: P,
    /// The set the writer was told before (0 when the prefix had no route).
    pub old: SetIndex,
    /// The set to install now (0 to remove the route).
    pub new: SetIndex,
}

/// Route changes and next-hop events of one RIB, in the order the writer applies them:
/// `hops_down`, `hops_up`, then the changes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RouteBatch {
    hops_down: Vec<NextHop>,
    hops_up: Vec<NextHop>,
    /// Every set's hops, concatenated; set `i` (from 1) ends at `ends[i - 1]`.
    hops: Vec<NextHop>,
    ends: Vec<u32>,
    v4: Vec<Change<Ipv4Net>>,
    v6: Vec<Change<Ipv6Net>>,
}

impl RouteBatch {
    pub fn is_empty(&self) -> bool {
        self.hops_down.is_empty()
            && self.hops_up.is_empty()
            && self.v4.is_empty()
            && self.v6.is_empty()
    }

    fn has_changes(&self) -> bool {
        !(self.v4.is_empty() && self.v6.is_empty())
    }

    /// Number of route changes.
    pub fn len(&self) -> usize {
        self.v4.len().saturating_add(self.v6.len())
    }

    pub fn hops_down(&self) -> &[NextHop] {
        &self.hops_down
    }

    pub fn hops_up(&self) -> &[NextHop] {
        &self.hops_up
    }

    /// The hops of set `index` (empty for 0 or an index the batch does not have).
    pub fn set(&self, index: SetIndex) -> &[NextHop] {
        let Some(i) = usize::from(index).checked_sub(1) else { return &[] };
        let start = match i.checked_sub(1) {
            Some(before) => self.ends.get(before).copied().unwrap_or(0),
            None => 0,
        };
        let end = self.ends.get(i).copied().unwrap_or(start);
        self.hops.get(start as usize..end as usize).unwrap_or(&[])
    }

    pub fn v4(&self) -> &[Change<Ipv4Net>] {
        &self.v4
    }

    pub fn v6(&self) -> &[Change<Ipv6Net>] {
        &self.v6
    }

    /// Every change as (prefix, old hops, new hops), IPv4 first.
    pub fn changes(&self) -> impl Iterator<Item = (IpNet, &[NextHop], &[NextHop])> + '_ {
        let v4 = self.v4.iter().map(|c| (IpNet::V4(c.prefix), c.old, c.new));
        let v6 = self.v6.iter().map(|c| (IpNet::V6(c.prefix), c.old, c.new));
        v4.chain(v6).map(|(p, old, new)| (p, self.set(old), self.set(new)))
    }

    /// Heap bytes the batch holds (for the memory accounting in docs/BENCHMARKS.md).
    pub fn heap_bytes(&self) -> usize {
        use std::mem::size_of;
        self.hops.capacity() * size_of::<NextHop>()
            + self.ends.capacity() * 4
            + self.v4.capacity() * size_of::<Change<Ipv4Net>>()
            + self.v6.capacity() * size_of::<Change<Ipv6Net>>()
    }
}

/// Builds [`RouteBatch`]es: interns each batch's sets and seals a batch when it is full or
/// when a next-hop event must not be applied before changes already recorded.
#[derive(Debug, Default)]
pub struct RouteBatchBuilder {
    sealed: Vec<RouteBatch>,
    current: RouteBatch,
    index: HashMap<Box<[NextHop]>, SetIndex>,
    /// The last two sets looked up: consecutive prefixes usually share them, and comparing a
    /// slice is cheaper than hashing it.
    recent: [SetIndex; 2],
}

impl RouteBatchBuilder {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn is_empty(&self) -> bool {
        self.sealed.is_empty() && self.current.is_empty()
    }

    /// Route changes recorded so far.
    pub fn len(&self) -> usize {
        self.sealed.iter().map(RouteBatch::len).sum::<usize>().saturating_add(self.current.len())
    }

    /// `prefix` had `old` (empty: no route) and should now have `new` (empty: remove it).
    /// Both must be canonical: sorted and without duplicates. Equal sets record nothing.
    pub fn change(&mut self, prefix: IpNet, old: &[NextHop], new: &[NextHop]) {
        if old == new {
            return;
        }
        if self.current.len() >= MAX_CHANGES || self.current.ends.len() + 2 > SetIndex::MAX.into() {
            self.seal();
        }
        let old = self.intern(old);
        let new = self.intern(new);
        match prefix {
            IpNet::V4(prefix) => self.current.v4.push(Change { prefix, old, new }),
            IpNet::V6(prefix) => self.current.v6.push(Change { prefix, old, new }),
        }
    }

    /// The RIB lost `hop`: no route may forward over it any more.
    pub fn hop_down(&mut self, hop: NextHop) {
        if self.current.has_changes() {
            self.seal();
        }
        self.current.hops_up.retain(|h| *h != hop);
        self.current.hops_down.push(hop);
    }

    /// `hop` is usable again (a route over it is about to be recorded).
    pub fn hop_up(&mut self, hop: NextHop) {
        if self.current.has_changes() {
            self.seal();
        }
        self.current.hops_down.retain(|h| *h != hop);
        self.current.hops_up.push(hop);
    }

    /// The batches, in order; the builder is empty afterwards.
    pub fn take(&mut self) -> Vec<RouteBatch> {
        self.seal();
        std::mem::take(&mut self.sealed)
    }

    fn seal(&mut self) {
        if !self.current.is_empty() {
            self.sealed.push(std::mem::take(&mut self.current));
        }
        self.index.clear();
        self.recent = [0; 2];
    }

    fn intern(&mut self, hops: &[NextHop]) -> SetIndex {
        if hops.is_empty() {
            return 0;
        }
        for index in self.recent {
            if index != 0 && self.current.set(index) == hops {
                return index;
            }
        }
        let index = match self.index.get(hops) {
            Some(index) => *index,
            None => {
                self.current.hops.extend_from_slice(hops);
                self.current.ends.push(u32::try_from(self.current.hops.len()).unwrap_or(u32::MAX));
                let index = SetIndex::try_from(self.current.ends.len()).unwrap_or(SetIndex::MAX);
                self.index.insert(hops.into(), index);
                index
            }
        };
        self.recent = [index, self.recent[0]];
        index
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    fn hop(n: u8) -> NextHop {
        NextHop::V4(Ipv4Addr::new(10, 0, 0, n))
    }

    fn net(s: &str) -> IpNet {
        s.parse().unwrap()
    }

    #[test]
    fn changes_share_their_sets_and_keep_their_order() {
        let mut b = RouteBatchBuilder::new();
        b.change(net("10.1.0.0/24"), &[], &[hop(1), hop(2)]);
        b.change(net("10.2.0.0/24"), &[], &[hop(1), hop(2)]);
        b.change(net("2001:db8::/32"), &[hop(1), hop(2)], &[hop(2)]);
        b.change(net("10.1.0.0/24"), &[hop(1), hop(2)], &[]);
        b.change(net("10.3.0.0/24"), &[hop(3)], &[hop(3)]); // no change: nothing recorded
        let batches = b.take();
        assert_eq!(batches.len(), 1);
        let batch = &batches[0];
        assert_eq!(batch.ends.len(), 2, "two distinct sets");
        let changes: Vec<_> =
            batch.changes().map(|(p, o, n)| (p, o.to_vec(), n.to_vec())).collect();
        assert_eq!(
            changes,
            vec![
                (net("10.1.0.0/24"), vec![], vec![hop(1), hop(2)]),
                (net("10.2.0.0/24"), vec![], vec![hop(1), hop(2)]),
                (net("10.1.0.0/24"), vec![hop(1), hop(2)], vec![]),
                (net("2001:db8::/32"), vec![hop(1), hop(2)], vec![hop(2)]),
            ]
        );
        assert!(b.is_empty());
    }

    #[test]
    fn a_change_is_ten_octets_for_ipv4() {
        assert_eq!(std::mem::size_of::<Change<Ipv4Net>>(), 10);
        assert_eq!(std::mem::size_of::<Change<Ipv6Net>>(), 22);
    }

    #[test]
    fn hop_events_go_before_the_changes_recorded_after_them() {
        let mut b = RouteBatchBuilder::new();
        b.change(net("10.1.0.0/24"), &[], &[hop(1)]);
        b.hop_down(hop(1));
        b.change(net("10.1.0.0/24"), &[hop(1)], &[]);
        b.hop_up(hop(1));
        b.change(net("10.1.0.0/24"), &[], &[hop(1)]);
        let batches = b.take();
        assert_eq!(batches.len(), 3);
        assert!(batches[0].hops_down().is_empty() && batches[0].len() == 1);
        assert_eq!((batches[1].hops_down(), batches[1].len()), (&[hop(1)][..], 1));
        assert_eq!((batches[2].hops_up(), batches[2].len()), (&[hop(1)][..], 1));
    }

    #[test]
    fn full_batches_are_sealed() {
        let mut b = RouteBatchBuilder::new();
        for i in 0..(MAX_CHANGES as u32 + 10) {
            let prefix = Ipv4Net::new(Ipv4Addr::from(i << 8), 24).unwrap();
            b.change(IpNet::V4(prefix), &[], &[hop((i % 3) as u8)]);
        }
        let batches = b.take();
        assert_eq!(batches.len(), 2);
        assert_eq!(batches[1].len(), 10);
        assert_eq!(batches[1].set(batches[1].v4()[0].new).len(), 1);
        assert_eq!(batches[0].set(0), &[] as &[NextHop]);
        assert_eq!(batches[0].set(999), &[] as &[NextHop]);
    }
}
