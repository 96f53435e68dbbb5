//! The RIB of one routing instance (VRF): Adj-RIBs-In (post-policy), Loc-RIB with best path and
//! ECMP, and one Adj-RIB-Out per peer. Plain synchronous data; the instance's tokio task owns
//! it and feeds it events; every call returns which peers have output to drain, and records
//! what changed for the FIB in compact batches ([`Rib::take_fib`]) (DESIGN.md: one RIB task per
//! instance; model holo `holo-bgp/src/rib.rs`).
//!
//! For the FIB the RIB is the desired state: the writer keeps no copy of the routes. Each
//! change names the next-hop set the writer was told before and the one it should have now,
//! and when a session goes down the RIB first says which next hops it lost, so the writer can
//! take them out of every nexthop group before the per-prefix withdrawals arrive.

pub mod adj_out;
pub mod decision;
pub mod intern;
pub mod loc_rib;

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::Arc;

use ipnet::{IpNet, Ipv4Net, Ipv6Net};

pub use adj_out::OutboundBatch;
pub use decision::Rejected;
pub use intern::AttrInterner;
pub use loc_rib::{Path, Prefix, Source};

use crate::bgp::policy::{self, ExportPolicy, ExportSource, ImportPolicy, ImportReject};
use crate::bgp::wire::attributes::{Afi, AsPath, Family, NextHop, Origin, PathAttributes};
use crate::fib::{self, RouteBatch, RouteBatchBuilder};
use adj_out::AdjRibOut;
use decision::{Candidate, MultipathConfig};
use loc_rib::{Destination, Removal, Table};
use std::collections::hash_map::Entry;

/// A peer of this RIB, allocated by [`Rib::peer_up`]. Ids are never reused within one RIB, so
/// a stale id from a session that went down refers to nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PeerId(pub u32);

impl PeerId {
    /// Marks locally originated paths; never handed out to a peer.
    pub const LOCAL: PeerId = PeerId(0);
}

/// What the RIB needs to know about an established session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerInfo {
    pub address: IpAddr,
    pub remote_asn: u32,
    pub local_asn: u32,
    /// The peer's BGP identifier from its OPEN.
    pub remote_id: Ipv4Addr,
    pub ebgp: bool,
    /// Our address on the session, used as next hop (next-hop-self).
    pub local_address: IpAddr,
    /// Our link-local address on the session's interface, sent with IPv6 next hops.
    pub local_link_local: Option<Ipv6Addr>,
    /// Families negotiated on the session.
    pub families: Vec<Family>,
    pub import: ImportPolicy,
    pub export: ExportPolicy,
}

/// Per-instance settings that the decision process and import need.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RibConfig {
    pub router_id: Ipv4Addr,
    /// Largest ECMP set (FRR `maximum-paths`), best path included.
    pub maximum_paths: u16,
    /// Allow ECMP across different neighbouring ASes (FRR `bestpath as-path multipath-relax`).
    pub multipath_relax: bool,
    /// Node-wide: a prefix equal to or inside one of these is never accepted from a peer.
    pub always_block: Vec<IpNet>,
}

impl RibConfig {
    pub const DEFAULT_MAXIMUM_PATHS: u16 = 64;

    pub fn new(router_id: Ipv4Addr) -> Self {
        Self {
            router_id,
            maximum_paths: Self::DEFAULT_MAXIMUM_PATHS,
            multipath_relax: false,
            always_block: Vec::new(),
        }
    }
}

/// What one call changed for the peers (the FIB's part goes to [`Rib::take_fib`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Changes {
    /// Peers whose Adj-RIB-Out has output waiting: drain them with [`Rib::take_pending`].
    pub outbound: BTreeSet<PeerId>,
}

/// What the FIB is told, and scratch space to compute it without allocating per prefix.
#[derive(Debug, Default)]
struct FibOut {
    batches: RouteBatchBuilder,
    before: Vec<fib::NextHop>,
    after: Vec<fib::NextHop>,
    /// Next hops declared lost (their last session went down) and not seen since.
    down: Vec<fib::NextHop>,
    /// A peer being removed: its paths are still being withdrawn, and their next hops must
    /// read as they did while it was up (its address anchors link-local next hops).
    departing: Option<(PeerId, IpAddr)>,
}

/// The result of [`Rib::apply_update`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UpdateOutcome {
    pub changes: Changes,
    /// Announcements refused by import policy, with the reason (each was treated as a withdraw).
    pub rejected: Vec<(IpNet, ImportReject)>,
    /// Prefixes now accepted from this peer, for the driver to compare with `max_prefixes`
    /// (exceeding it: NOTIFICATION Cease, subcode 1, RFC 4486 §4).
    pub accepted_count: usize,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum RibError {
    #[error("unknown peer {0:?}")]
    UnknownPeer(PeerId),
}

#[derive(Debug)]
struct Peer {
    info: PeerInfo,
    accepted: FamilyCounts,
    /// The FIB next hops of the paths this peer sent (distinct; a handful): when the session
    /// goes down, those no other peer uses are lost.
    fib_hops: Vec<fib::NextHop>,
    out_v4: AdjRibOut<Ipv4Net>,
    out_v6: AdjRibOut<Ipv6Net>,
    /// The table versions the Adj-RIB-Out was last drained at.
    synced_version: PerFamily<u64>,
    /// The session is down but its routes are kept as stale (RFC 4724 §4.2): nothing is
    /// exported to it until it comes back.
    restarting: bool,
}

impl Peer {
    fn new(info: PeerInfo) -> Self {
        Self {
            info,
            accepted: FamilyCounts::default(),
            fib_hops: Vec::new(),
            out_v4: AdjRibOut::default(),
            out_v6: AdjRibOut::default(),
            synced_version: PerFamily::default(),
            restarting: false,
        }
    }
}

/// The RIB of one routing instance.
#[derive(Debug)]
pub struct Rib {
    config: RibConfig,
    interner: AttrInterner,
    v4: Table<Ipv4Net>,
    v6: Table<Ipv6Net>,
    peers: BTreeMap<PeerId, Peer>,
    next_peer: u32,
    /// The interner is swept when it grows to this many sets (amortised O(1) per call).
    next_sweep_at: usize,
    /// Whether changes are recorded for the FIB; off when nothing installs routes, so ingest
    /// does not compute next-hop sets that nobody reads.
    track_fib: bool,
    fib: FibOut,
}

const MIN_SWEEP_THRESHOLD: usize = 1024;

/// One value per address family: a peer's accepted or sent prefixes (FRR gives `pfxRcd` and
/// `pfxSnt` per family; `max_prefixes` is checked against the sum), or a table version.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PerFamily<T> {
    pub v4: T,
    pub v6: T,
}

impl<T: Copy> PerFamily<T> {
    pub fn of(&self, afi: Afi) -> T {
        match afi {
            Afi::Ipv4 => self.v4,
            Afi::Ipv6 => self.v6,
        }
    }

    fn of_mut(&mut self, afi: Afi) -> &mut T {
        match afi {
            Afi::Ipv4 => &mut self.v4,
            Afi::Ipv6 => &mut self.v6,
        }
    }
}

impl PerFamily<usize> {
    pub fn total(&self) -> usize {
        self.v4.saturating_add(self.v6)
    }
}

/// Prefix counts per family.
pub type FamilyCounts = PerFamily<usize>;

/// A change to the paths of one prefix.
enum PathChange {
    /// A path from `peer` with `attrs`, new or replacing that peer's.
    Upsert {
        peer: PeerId,
        attrs: Arc<PathAttributes>,
    },
    Remove(PeerId),
    /// No change to the paths; rerun the decision (configuration changed).
    Recompute,
}

/// Whether a change added a new path or removed one (for the per-peer accepted count).
#[derive(Debug, Clone, Copy, Default)]
struct PathDelta {
    added: bool,
    removed: bool,
}

/// The fields of a [`Rib`] one family's operations need, borrowed separately.
struct Parts<'a, P: Prefix> {
    config: &'a RibConfig,
    interner: &'a mut AttrInterner,
    table: &'a mut Table<P>,
    peers: &'a mut BTreeMap<PeerId, Peer>,
    track_fib: bool,
    fib: &'a mut FibOut,
}

/// Per-family access to a [`Rib`]'s table and a peer's Adj-RIB-Out.
trait RibFamily: Prefix {
    fn parts(rib: &mut Rib) -> Parts<'_, Self>;
    fn adj_out(peer: &mut Peer) -> &mut AdjRibOut<Self>;
}

impl RibFamily for Ipv4Net {
    fn parts(rib: &mut Rib) -> Parts<'_, Self> {
        Parts {
            config: &rib.config,
            interner: &mut rib.interner,
            table: &mut rib.v4,
            peers: &mut rib.peers,
            track_fib: rib.track_fib,
            fib: &mut rib.fib,
        }
    }
    fn adj_out(peer: &mut Peer) -> &mut AdjRibOut<Self> {
        &mut peer.out_v4
    }
}

impl RibFamily for Ipv6Net {
    fn parts(rib: &mut Rib) -> Parts<'_, Self> {
        Parts {
            config: &rib.config,
            interner: &mut rib.interner,
            table: &mut rib.v6,
            peers: &mut rib.peers,
            track_fib: rib.track_fib,
            fib: &mut rib.fib,
        }
    }
    fn adj_out(peer: &mut Peer) -> &mut AdjRibOut<Self> {
        &mut peer.out_v6
    }
}

/// Runs the decision process on one destination and stores the verdicts on its paths.
fn decide(dest: &mut Destination, peers: &BTreeMap<PeerId, Peer>, config: &RibConfig) {
    if let Destination::One(p) = dest {
        p.best = true;
        p.multipath = false;
        p.reason = None;
        return;
    }
    let candidates: Vec<Candidate<'_>> = dest
        .paths()
        .iter()
        .map(|p| {
            let local = p.peer == PeerId::LOCAL;
            let info = peers.get(&p.peer).map(|peer| &peer.info);
            Candidate {
                attrs: &p.attrs,
                local,
                ebgp: info.is_some_and(|i| i.ebgp),
                // RFC 4456 §9: ORIGINATOR_ID stands in for the BGP identifier when present.
                router_id: p.attrs.originator_id().unwrap_or(match info {
                    Some(i) => i.remote_id,
                    None if local => config.router_id,
                    None => Ipv4Addr::BROADCAST,
                }),
                address: info.map_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED), |i| i.address),
                peer: p.peer,
            }
        })
        .collect();
    let verdicts = decision::select(
        &candidates,
        MultipathConfig { maximum_paths: config.maximum_paths, relax: config.multipath_relax },
    );
    drop(candidates);
    for (path, verdict) in dest.paths_mut().iter_mut().zip(verdicts) {
        path.best = verdict.best;
        path.multipath = verdict.multipath;
        path.reason = verdict.reason;
    }
}

/// Identifies a destination's best path (source and attribute set) without holding a
/// reference: comparing keys before and after a change tells whether export must run. An
/// attribute set's address cannot be reused while the key is compared, because the interner
/// holds every set until its next sweep, which never runs inside a change.
type BestKey = Option<(PeerId, *const PathAttributes)>;

fn peer_address(
    peers: &BTreeMap<PeerId, Peer>,
    departing: Option<(PeerId, IpAddr)>,
    id: PeerId,
) -> Option<IpAddr> {
    match peers.get(&id) {
        Some(p) => Some(p.info.address),
        None => departing.filter(|(d, _)| *d == id).map(|(_, a)| a),
    }
}

fn best_key(dest: &Destination) -> BestKey {
    dest.best().map(|p| (p.peer, Arc::as_ptr(&p.attrs)))
}

/// A best path with what export needs to know about its source.
#[derive(Clone, Copy)]
struct ExportCandidate<'a> {
    from: PeerId,
    attrs: &'a PathAttributes,
    /// `None` for a local path, else whether it was learned over eBGP.
    learned_ebgp: Option<bool>,
}

impl<'a> ExportCandidate<'a> {
    fn new(peers: &BTreeMap<PeerId, Peer>, from: PeerId, attrs: &'a PathAttributes) -> Self {
        let learned_ebgp =
            (from != PeerId::LOCAL).then(|| peers.get(&from).is_some_and(|p| p.info.ebgp));
        Self { from, attrs, learned_ebgp }
    }
}

/// Queues the new state of `prefix` to every peer that negotiated the family.
fn export_to_all<P: RibFamily>(
    peers: &mut BTreeMap<PeerId, Peer>,
    interner: &mut AttrInterner,
    prefix: P,
    best: Option<&Path>,
    changes: &mut Changes,
) {
    let candidate = best.map(|b| ExportCandidate::new(peers, b.peer, &b.attrs));
    for (id, peer) in peers.iter_mut() {
        export_to_peer(interner, prefix, candidate, *id, peer, changes);
    }
}

/// Computes what `peer` should have for `prefix` and queues the difference.
fn export_to_peer<P: RibFamily>(
    interner: &mut AttrInterner,
    prefix: P,
    best: Option<ExportCandidate<'_>>,
    id: PeerId,
    peer: &mut Peer,
    changes: &mut Changes,
) {
    if peer.restarting || !peer.info.families.contains(&P::FAMILY) {
        return;
    }
    let desired = best.and_then(|b| {
        let source = match b.learned_ebgp {
            None => ExportSource::Local,
            Some(ebgp) => ExportSource::Learned { from_same_peer: b.from == id, ebgp },
        };
        policy::export_route(&prefix.into(), b.attrs, source, &peer.info)
            .map(|out| interner.intern_owned(out))
    });
    let out = P::adj_out(peer);
    out.set(prefix, desired);
    if out.has_pending() {
        changes.outbound.insert(id);
    }
}

impl<P: RibFamily> Parts<'_, P> {
    /// Applies one change to one prefix, reruns the decision, and records FIB and export
    /// consequences in `changes`.
    ///
    /// Written for the ingest loop of [`Rib::apply_update`], where each new prefix's table
    /// slot is a cache miss: the store to it waits in the store buffer, and any later read
    /// that the buffer cannot serve (an atomic, or a value read back at another width than it
    /// was written) waits for it. So the prefix comes by reference, straight from the UPDATE's
    /// list (a 17-octet `Ipv6Net` passed by value was copied unaligned and read back wider),
    /// and the function is inlined into the loop rather than passed its arguments through the
    /// stack (perf: 5-8% of IPv6 RIB time; about 18 KiB of code).
    #[inline(always)]
    fn change_path(&mut self, prefix: &P, change: PathChange, changes: &mut Changes) -> PathDelta {
        let mut delta = PathDelta::default();
        let track_fib = self.track_fib;
        let departing = self.fib.departing;
        // One hash lookup per change: everything below works on this entry. No reference
        // count is incremented here (the caller made the path's): on a million-route ingest an
        // atomic increment per prefix was the largest single cost (it waits for the table store).
        let (old_best, mut dest) = match self.table.map.entry(*prefix) {
            Entry::Vacant(slot) => {
                let PathChange::Upsert { peer, attrs } = change else { return delta };
                delta.added = true;
                // A new prefix: decide and export on a local copy, then move it into the
                // slot. Reading the slot back right after writing it waited out its cache miss
                // (the table is larger than L2): a quarter of IPv6 ingest CPU in `perf`.
                let mut dest = Destination::One(Path::new(peer, attrs));
                decide(&mut dest, self.peers, self.config);
                if track_fib {
                    let FibOut { batches, after, .. } = &mut *self.fib;
                    dest.fib_next_hops(|id| peer_address(self.peers, departing, id), after);
                    batches.change((*prefix).into(), &[], after);
                }
                export_to_all(self.peers, self.interner, *prefix, dest.best(), changes);
                slot.insert(dest);
                self.table.version += 1;
                return delta;
            }
            Entry::Occupied(mut slot) => {
                let old_best = best_key(slot.get());
                if track_fib {
                    let before = &mut self.fib.before;
                    slot.get().fib_next_hops(|id| peer_address(self.peers, departing, id), before);
                }
                let removal = match change {
                    PathChange::Upsert { peer, attrs } => {
                        let path = Path::new(peer, attrs);
                        let dest = slot.get_mut();
                        delta.added = !dest.paths().iter().any(|p| p.peer == path.peer);
                        dest.upsert(path);
                        Removal::NotPresent
                    }
                    PathChange::Remove(peer) => match slot.get_mut().remove(peer) {
                        Removal::NotPresent => return delta,
                        removal => {
                            delta.removed = true;
                            removal
                        }
                    },
                    PathChange::Recompute => Removal::NotPresent,
                };
                if removal == Removal::LastPath {
                    slot.remove();
                    (old_best, None)
                } else {
                    (old_best, Some(slot.into_mut()))
                }
            }
        };
        if let Some(dest) = dest.as_deref_mut() {
            decide(dest, self.peers, self.config);
        }
        let dest = dest.as_deref();
        if track_fib {
            let FibOut { batches, before, after, .. } = &mut *self.fib;
            match dest {
                Some(d) => d.fib_next_hops(|id| peer_address(self.peers, departing, id), after),
                None => after.clear(),
            }
            batches.change((*prefix).into(), before, after);
        }
        if old_best != dest.and_then(best_key) {
            let best = dest.and_then(Destination::best);
            export_to_all(self.peers, self.interner, *prefix, best, changes);
            self.table.version += 1;
        }
        delta
    }

    /// Re-evaluates export of the whole table to one peer (session up, export policy change).
    fn export_table_to_peer(&mut self, id: PeerId, changes: &mut Changes) {
        for (prefix, dest) in self.table.map.iter() {
            let best = dest.best().map(|p| ExportCandidate::new(self.peers, p.peer, &p.attrs));
            let Some(peer) = self.peers.get_mut(&id) else { return };
            export_to_peer(self.interner, *prefix, best, id, peer, changes);
        }
    }

    /// Re-evaluates export of one prefix to one peer (its export policy changed for it).
    fn export_prefix_to_peer(&mut self, id: PeerId, prefix: P, changes: &mut Changes) {
        let best = self.table.map.get(&prefix).and_then(|dest| dest.best());
        let best = best.map(|p| ExportCandidate::new(self.peers, p.peer, &p.attrs));
        let Some(peer) = self.peers.get_mut(&id) else { return };
        export_to_peer(self.interner, prefix, best, id, peer, changes);
    }

    /// After a configuration change: drops learned paths that `always_block` now covers, and
    /// reruns the decision everywhere. Returns how many paths each peer lost.
    fn reapply_config(&mut self, changes: &mut Changes) -> BTreeMap<PeerId, usize> {
        let lost = self.drop_rejected(None, changes);
        let prefixes: Vec<P> = self.table.map.keys().copied().collect();
        for prefix in prefixes {
            self.change_path(&prefix, PathChange::Recompute, changes);
        }
        lost
    }

    /// Withdraws the learned paths that import policy refuses now (`always_block`, and each
    /// peer's `to_receive`), from every peer or from `only`. Returns how many paths each peer
    /// lost.
    fn drop_rejected(
        &mut self,
        only: Option<PeerId>,
        changes: &mut Changes,
    ) -> BTreeMap<PeerId, usize> {
        let (peers, always_block) = (&*self.peers, &self.config.always_block);
        let refused = |net: &IpNet, from: PeerId| match peers.get(&from) {
            Some(peer) => {
                policy::check_import_prefix(net, always_block, &peer.info.import).is_err()
            }
            // A path whose session is gone (kept stale): only the node-wide list applies.
            None => always_block.iter().any(|b| b.contains(net)),
        };
        let rejected: Vec<(P, PeerId)> = self
            .table
            .map
            .iter()
            .flat_map(|(prefix, d)| {
                let net: IpNet = (*prefix).into();
                d.paths()
                    .iter()
                    .filter(|p| p.peer != PeerId::LOCAL && only.is_none_or(|o| o == p.peer))
                    .filter(|p| refused(&net, p.peer))
                    .map(|p| (*prefix, p.peer))
                    .collect::<Vec<_>>()
            })
            .collect();
        let mut lost: BTreeMap<PeerId, usize> = BTreeMap::new();
        for (prefix, peer) in rejected {
            if self.change_path(&prefix, PathChange::Remove(peer), changes).removed {
                let n = lost.entry(peer).or_default();
                *n = n.saturating_add(1);
            }
        }
        lost
    }

    /// Marks every path from `peer` stale.
    fn mark_stale(&mut self, peer: PeerId) {
        for dest in self.table.map.values_mut() {
            for path in dest.paths_mut().iter_mut().filter(|p| p.peer == peer) {
                path.stale = true;
            }
        }
    }

    /// How many paths `peer` has in this family.
    fn count_paths_of(&self, peer: PeerId) -> usize {
        self.table.map.values().filter(|d| d.paths().iter().any(|p| p.peer == peer)).count()
    }

    /// Removes the paths from `peer` that are still stale; returns how many.
    fn remove_stale_paths(&mut self, peer: PeerId, changes: &mut Changes) -> usize {
        let prefixes: Vec<P> = self
            .table
            .map
            .iter()
            .filter(|(_, d)| d.paths().iter().any(|p| p.peer == peer && p.stale))
            .map(|(p, _)| *p)
            .collect();
        for prefix in &prefixes {
            self.change_path(prefix, PathChange::Remove(peer), changes);
        }
        prefixes.len()
    }

    /// Removes every path from `peer`.
    fn remove_peer_paths(&mut self, peer: PeerId, changes: &mut Changes) {
        let prefixes: Vec<P> = self
            .table
            .map
            .iter()
            .filter(|(_, d)| d.paths().iter().any(|p| p.peer == peer))
            .map(|(p, _)| *p)
            .collect();
        for prefix in prefixes {
            self.change_path(&prefix, PathChange::Remove(peer), changes);
        }
    }
}

impl Rib {
    pub fn new(config: RibConfig) -> Self {
        Self {
            config,
            interner: AttrInterner::new(),
            v4: Table::default(),
            v6: Table::default(),
            peers: BTreeMap::new(),
            next_peer: 1,
            next_sweep_at: MIN_SWEEP_THRESHOLD,
            track_fib: true,
            fib: FibOut::default(),
        }
    }

    /// What changed for the FIB since the last call, in order.
    pub fn take_fib(&mut self) -> Vec<RouteBatch> {
        self.fib.batches.take()
    }

    /// Every route with something to install: `each(prefix, next hops)`.
    pub fn fib_routes(&self, mut each: impl FnMut(IpNet, &[fib::NextHop])) {
        let mut hops = Vec::new();
        let address = |id| peer_address(&self.peers, None, id);
        for (prefix, dest) in &self.v4.map {
            dest.fib_next_hops(address, &mut hops);
            if !hops.is_empty() {
                each(IpNet::V4(*prefix), &hops);
            }
        }
        for (prefix, dest) in &self.v6.map {
            dest.fib_next_hops(address, &mut hops);
            if !hops.is_empty() {
                each(IpNet::V6(*prefix), &hops);
            }
        }
    }

    /// The next hops to install for one prefix (empty: none).
    pub fn fib_route(&self, prefix: &IpNet) -> Vec<fib::NextHop> {
        let mut hops = Vec::new();
        let address = |id| peer_address(&self.peers, None, id);
        match prefix {
            IpNet::V4(p) => self.v4.map.get(p).map(|d| d.fib_next_hops(address, &mut hops)),
            IpNet::V6(p) => self.v6.map.get(p).map(|d| d.fib_next_hops(address, &mut hops)),
        };
        hops
    }

    /// Tells the FIB every route is gone (the RIB is going away).
    pub fn withdraw_fib(&mut self) {
        if !self.track_fib {
            return;
        }
        let mut gone = RouteBatchBuilder::new();
        self.fib_routes(|prefix, hops| gone.change(prefix, hops, &[]));
        for batch in gone.take() {
            for (prefix, old, _) in batch.changes() {
                self.fib.batches.change(prefix, old, &[]);
            }
        }
    }

    /// Turns recording for the FIB on or off (on by default). Turning it on does not report
    /// the routes already present: enable it before the first route arrives.
    pub fn set_fib_tracking(&mut self, on: bool) {
        self.track_fib = on;
    }

    pub fn config(&self) -> &RibConfig {
        &self.config
    }

    /// Inlined for the same reason as [`Parts::change_path`].
    #[inline(always)]
    fn change(&mut self, prefix: &IpNet, change: PathChange, changes: &mut Changes) -> PathDelta {
        match prefix {
            IpNet::V4(p) => Ipv4Net::parts(self).change_path(p, change, changes),
            IpNet::V6(p) => Ipv6Net::parts(self).change_path(p, change, changes),
        }
    }

    fn maybe_sweep(&mut self) {
        if self.interner.len() >= self.next_sweep_at {
            self.interner.sweep();
            self.next_sweep_at = self.interner.len().saturating_mul(2).max(MIN_SWEEP_THRESHOLD);
        }
    }

    /// Applies a new instance configuration (router id, multipath settings, `always_block`):
    /// newly blocked learned routes are dropped and every destination is decided again.
    /// Routes that a shorter `always_block` now allows come back when the peer re-sends them.
    pub fn set_config(&mut self, config: RibConfig) -> Changes {
        self.config = config;
        let mut changes = Changes::default();
        let lost = Ipv4Net::parts(self).reapply_config(&mut changes);
        self.forget_accepted(Afi::Ipv4, lost);
        let lost = Ipv6Net::parts(self).reapply_config(&mut changes);
        self.forget_accepted(Afi::Ipv6, lost);
        self.maybe_sweep();
        changes
    }

    /// Lowers each peer's accepted count of one family by the paths it lost.
    fn forget_accepted(&mut self, afi: Afi, lost: BTreeMap<PeerId, usize>) {
        for (peer, n) in lost {
            if let Some(p) = self.peers.get_mut(&peer) {
                let count = p.accepted.of_mut(afi);
                *count = count.saturating_sub(n);
            }
        }
    }

    /// Drops attribute sets no route or Adj-RIB-Out references any more; returns how many.
    pub fn sweep_attributes(&mut self) -> usize {
        self.interner.sweep()
    }

    /// Registers an established session and queues the current table for it (the initial
    /// advertisement; the driver sends End-of-RIB after draining it).
    pub fn peer_up(&mut self, info: PeerInfo) -> PeerId {
        let id = PeerId(self.next_peer);
        self.next_peer = self.next_peer.saturating_add(1);
        self.peers.insert(id, Peer::new(info));
        let mut changes = Changes::default();
        Ipv4Net::parts(self).export_table_to_peer(id, &mut changes);
        Ipv6Net::parts(self).export_table_to_peer(id, &mut changes);
        id
    }

    /// Forgets a session: removes its paths and its Adj-RIB-Out; returns the consequences
    /// (FIB changes, other peers' re-advertisements of new best paths).
    pub fn peer_down(&mut self, id: PeerId) -> Changes {
        let mut changes = Changes::default();
        self.declare_lost_hops(id);
        let Some(peer) = self.peers.remove(&id) else { return changes };
        self.fib.departing = Some((id, peer.info.address));
        Ipv4Net::parts(self).remove_peer_paths(id, &mut changes);
        Ipv6Net::parts(self).remove_peer_paths(id, &mut changes);
        self.fib.departing = None;
        changes.outbound.remove(&id);
        self.maybe_sweep();
        changes
    }

    /// RFC 4724 §4.2: the session of a graceful-restart peer ended without a NOTIFICATION.
    /// Its routes of `families` stay, marked stale, and keep forwarding; those of other
    /// families go now. Nothing is exported to it until [`Rib::peer_resumed`].
    pub fn peer_restarting(&mut self, id: PeerId, families: &[Family]) -> Changes {
        let mut changes = Changes::default();
        let Some(peer) = self.peers.get_mut(&id) else { return changes };
        peer.restarting = true;
        peer.out_v4 = AdjRibOut::default();
        peer.out_v6 = AdjRibOut::default();
        if families.contains(&Family::IPV4_UNICAST) {
            Ipv4Net::parts(self).mark_stale(id);
        } else {
            Ipv4Net::parts(self).remove_peer_paths(id, &mut changes);
        }
        if families.contains(&Family::IPV6_UNICAST) {
            Ipv6Net::parts(self).mark_stale(id);
        } else {
            Ipv6Net::parts(self).remove_peer_paths(id, &mut changes);
        }
        changes.outbound.remove(&id);
        self.recount(id);
        changes
    }

    /// The restarting peer's session is back: same id, its new session's settings, and the
    /// current table queued for it (the initial advertisement). Its stale paths stay until
    /// [`Rib::purge_stale`].
    pub fn peer_resumed(&mut self, id: PeerId, info: PeerInfo) -> Result<(), RibError> {
        let peer = self.peers.get_mut(&id).ok_or(RibError::UnknownPeer(id))?;
        peer.info = info;
        peer.restarting = false;
        let mut changes = Changes::default();
        Ipv4Net::parts(self).export_table_to_peer(id, &mut changes);
        Ipv6Net::parts(self).export_table_to_peer(id, &mut changes);
        Ok(())
    }

    /// Removes the peer's paths of `family` that are still stale (its End-of-RIB came, or the
    /// wait for it ran out).
    pub fn purge_stale(&mut self, id: PeerId, family: Family) -> Changes {
        let mut changes = Changes::default();
        if !self.peers.contains_key(&id) {
            return changes;
        }
        if family == Family::IPV4_UNICAST {
            Ipv4Net::parts(self).remove_stale_paths(id, &mut changes);
        } else if family == Family::IPV6_UNICAST {
            Ipv6Net::parts(self).remove_stale_paths(id, &mut changes);
        }
        self.recount(id);
        self.maybe_sweep();
        changes
    }

    /// Whether a peer is restarting (its routes kept as stale).
    pub fn is_restarting(&self, id: PeerId) -> bool {
        self.peers.get(&id).is_some_and(|p| p.restarting)
    }

    /// Recomputes a peer's accepted count after paths were removed wholesale.
    fn recount(&mut self, id: PeerId) {
        let count = FamilyCounts {
            v4: Ipv4Net::parts(self).count_paths_of(id),
            v6: Ipv6Net::parts(self).count_paths_of(id),
        };
        if let Some(peer) = self.peers.get_mut(&id) {
            peer.accepted = count;
        }
    }

    /// Prefix-independent convergence: records for the FIB the next hops that only `id`'s
    /// paths use, as lost. [`Rib::peer_down`] does it first thing; a driver calls it (and
    /// sends [`Rib::take_fib`]) before `peer_down` so the FIB hears it before the withdrawals
    /// are even computed.
    pub fn declare_lost_hops(&mut self, id: PeerId) {
        let Some(peer) = self.peers.get(&id).filter(|_| self.track_fib) else { return };
        for hop in &peer.fib_hops {
            let shared =
                self.peers.iter().any(|(other, p)| *other != id && p.fib_hops.contains(hop));
            if !shared && !self.fib.down.contains(hop) {
                self.fib.batches.hop_down(*hop);
                self.fib.down.push(*hop);
            }
        }
    }

    /// Replaces a peer's export policy and re-evaluates what it should have.
    pub fn set_export_policy(
        &mut self,
        id: PeerId,
        export: ExportPolicy,
    ) -> Result<Changes, RibError> {
        let peer = self.peers.get_mut(&id).ok_or(RibError::UnknownPeer(id))?;
        let changed = peer.info.export.changed_prefixes(&export);
        peer.info.export = export;
        let mut changes = Changes::default();
        match changed {
            Some(prefixes) => {
                for prefix in prefixes {
                    match prefix {
                        IpNet::V4(p) => {
                            Ipv4Net::parts(self).export_prefix_to_peer(id, p, &mut changes)
                        }
                        IpNet::V6(p) => {
                            Ipv6Net::parts(self).export_prefix_to_peer(id, p, &mut changes)
                        }
                    }
                }
            }
            None => {
                Ipv4Net::parts(self).export_table_to_peer(id, &mut changes);
                Ipv6Net::parts(self).export_table_to_peer(id, &mut changes);
            }
        }
        Ok(changes)
    }

    /// Replaces a peer's import policy. Routes from the peer that it refuses are withdrawn at
    /// once (each a withdrawal towards the FIB and the other peers). Routes it newly allows are
    /// not here: the RIB keeps no pre-policy copy of what a peer sent (memory per route), so
    /// they come back when the peer sends them again — the driver asks for that with
    /// ROUTE-REFRESH (RFC 2918 §3).
    pub fn set_import_policy(
        &mut self,
        id: PeerId,
        import: ImportPolicy,
    ) -> Result<Changes, RibError> {
        let peer = self.peers.get_mut(&id).ok_or(RibError::UnknownPeer(id))?;
        peer.info.import = import;
        let mut changes = Changes::default();
        let lost = Ipv4Net::parts(self).drop_rejected(Some(id), &mut changes);
        self.forget_accepted(Afi::Ipv4, lost);
        let lost = Ipv6Net::parts(self).drop_rejected(Some(id), &mut changes);
        self.forget_accepted(Afi::Ipv6, lost);
        self.maybe_sweep();
        Ok(changes)
    }

    /// Applies one UPDATE from `peer`: `withdrawn`, then `announced` with `attrs`.
    /// Given the attributes by value, a new set is interned without a copy (the decoded set
    /// becomes the shared one: a full table has hundreds of thousands of sets).
    pub fn apply_update<'a>(
        &mut self,
        peer: PeerId,
        announced: &[IpNet],
        attrs: impl Into<Cow<'a, PathAttributes>>,
        withdrawn: &[IpNet],
    ) -> Result<UpdateOutcome, RibError> {
        let attrs: Cow<'a, PathAttributes> = attrs.into();
        if self.track_fib && !announced.is_empty() {
            self.note_fib_hop(peer, attrs.next_hop);
        }
        let info = &self.peers.get(&peer).ok_or(RibError::UnknownPeer(peer))?.info;
        let attr_check = policy::check_import_attributes(&attrs, info, self.config.router_id);
        let mut outcome = UpdateOutcome::default();
        let rejected = &mut outcome.rejected;
        let interner = &mut self.interner;
        let mut interned: Option<Arc<PathAttributes>> = None;
        let mut source = Some(attrs);
        // Every announcement's change is built here, before the table is touched (see
        // `change_path`): an accepted path holds a clone of the interned set, an atomic
        // increment, which on x86 waits until every earlier store has reached the cache. Done
        // between table inserts it waited out each insert's cache miss in turn (perf: a third
        // of IPv6 ingest CPU); here the increments run back to back.
        let announcements: Vec<PathChange> = announced
            .iter()
            .map(|prefix| {
                let verdict = attr_check.and_then(|()| {
                    let family = match prefix {
                        IpNet::V4(_) => Family::IPV4_UNICAST,
                        IpNet::V6(_) => Family::IPV6_UNICAST,
                    };
                    if !info.families.contains(&family) {
                        return Err(ImportReject::FamilyNotNegotiated);
                    }
                    policy::check_import_prefix(prefix, &self.config.always_block, &info.import)
                });
                match verdict {
                    Ok(()) => {
                        let shared = interned.get_or_insert_with(|| {
                            interner.intern_cow(source.take().unwrap_or_default())
                        });
                        PathChange::Upsert { peer, attrs: Arc::clone(shared) }
                    }
                    Err(reason) => {
                        rejected.push((*prefix, reason));
                        // A refused announcement replaces the previous one: an implicit withdraw.
                        PathChange::Remove(peer)
                    }
                }
            })
            .collect();
        drop(interned);

        // Paths added and removed, per family.
        let (mut added, mut removed) = (FamilyCounts::default(), FamilyCounts::default());
        let mut count = |prefix: &IpNet, delta: PathDelta| {
            let afi = match prefix {
                IpNet::V4(_) => Afi::Ipv4,
                IpNet::V6(_) => Afi::Ipv6,
            };
            let (a, r) = (added.of_mut(afi), removed.of_mut(afi));
            *a = a.saturating_add(usize::from(delta.added));
            *r = r.saturating_add(usize::from(delta.removed));
        };
        // RFC 4271 §3.1: a prefix in both WITHDRAWN ROUTES and NLRI is treated as announced, so
        // withdrawals go first.
        for prefix in withdrawn {
            count(prefix, self.change(prefix, PathChange::Remove(peer), &mut outcome.changes));
        }
        for (prefix, change) in announced.iter().zip(announcements) {
            count(prefix, self.change(prefix, change, &mut outcome.changes));
        }
        if let Some(p) = self.peers.get_mut(&peer) {
            for afi in [Afi::Ipv4, Afi::Ipv6] {
                let n = p.accepted.of_mut(afi);
                *n = n.saturating_add(added.of(afi)).saturating_sub(removed.of(afi));
            }
            outcome.accepted_count = p.accepted.total();
        }
        self.maybe_sweep();
        Ok(outcome)
    }

    /// Records the FIB next hop of a peer's paths; a next hop declared lost is back, which the
    /// FIB hears before the routes over it.
    fn note_fib_hop(&mut self, peer: PeerId, next_hop: NextHop) {
        let Some(p) = self.peers.get_mut(&peer) else { return };
        let forwarding = loc_rib::forwarding_next_hop(next_hop, Some(p.info.address));
        let Some(hop) = loc_rib::to_fib(forwarding) else { return };
        if !p.fib_hops.contains(&hop) {
            p.fib_hops.push(hop);
        }
        if let Some(i) = self.fib.down.iter().position(|h| *h == hop) {
            self.fib.down.swap_remove(i);
            self.fib.batches.hop_up(hop);
        }
    }

    /// Originates `prefix` from this router. Origin IGP, an empty AS_PATH and an unspecified
    /// next hop are imposed (export fills in next-hop-self); other attributes are kept.
    pub fn originate(&mut self, prefix: IpNet, attrs: &PathAttributes) -> Changes {
        let local = PathAttributes {
            origin: Origin::Igp,
            as_path: AsPath::default(),
            next_hop: NextHop::Unspecified,
            ..attrs.clone()
        };
        let shared = self.interner.intern_owned(local);
        let mut changes = Changes::default();
        self.change(
            &prefix,
            PathChange::Upsert { peer: PeerId::LOCAL, attrs: shared },
            &mut changes,
        );
        self.maybe_sweep();
        changes
    }

    /// Stops originating `prefix`.
    pub fn withdraw_local(&mut self, prefix: IpNet) -> Changes {
        let mut changes = Changes::default();
        self.change(&prefix, PathChange::Remove(PeerId::LOCAL), &mut changes);
        self.maybe_sweep();
        changes
    }

    /// Drains the pending output of one peer for one family.
    pub fn take_pending(&mut self, peer: PeerId, family: Family) -> Option<OutboundBatch> {
        let version = self.table_version().of(family.afi);
        let p = self.peers.get_mut(&peer)?;
        let batch = match family.afi {
            Afi::Ipv4 => p.out_v4.take(),
            Afi::Ipv6 => p.out_v6.take(),
        };
        *p.synced_version.of_mut(family.afi) = version;
        batch
    }

    /// Prefixes the peer should have once its pending changes are sent, over all families.
    pub fn pfx_desired(&self, peer: PeerId) -> usize {
        self.peers
            .get(&peer)
            .map_or(0, |p| p.out_v4.desired_count().saturating_add(p.out_v6.desired_count()))
    }

    /// The table versions a peer's Adj-RIB-Out was last brought up to (FRR's per-peer
    /// `tableVersion`).
    pub fn synced_version(&self, peer: PeerId) -> PerFamily<u64> {
        self.peers.get(&peer).map_or_else(PerFamily::default, |p| p.synced_version)
    }

    /// Queues the peer's whole Adj-RIB-Out of `family` again (RFC 2918 §4, ROUTE-REFRESH).
    /// Returns whether the peer exists.
    pub fn route_refresh(&mut self, peer: PeerId, family: Family) -> bool {
        let Some(p) = self.peers.get_mut(&peer) else { return false };
        match family.afi {
            Afi::Ipv4 => p.out_v4.resend_all(),
            Afi::Ipv6 => p.out_v6.resend_all(),
        }
        true
    }

    pub fn has_pending(&self, peer: PeerId) -> bool {
        self.peers.get(&peer).is_some_and(|p| p.out_v4.has_pending() || p.out_v6.has_pending())
    }

    // ---- read access for `show` ----

    pub fn peer_info(&self, id: PeerId) -> Option<&PeerInfo> {
        self.peers.get(&id).map(|p| &p.info)
    }

    pub fn peers(&self) -> impl Iterator<Item = (PeerId, &PeerInfo)> {
        self.peers.iter().map(|(id, p)| (*id, &p.info))
    }

    /// Prefixes accepted from `peer` (FRR `pfxRcd`); what `max_prefixes` is checked against.
    pub fn accepted_count(&self, peer: PeerId) -> usize {
        self.peers.get(&peer).map_or(0, |p| p.accepted.total())
    }

    /// Prefixes accepted from `peer`, per family (FRR `pfxRcd` of each family).
    pub fn pfx_received(&self, peer: PeerId) -> FamilyCounts {
        self.peers.get(&peer).map_or_else(FamilyCounts::default, |p| p.accepted)
    }

    /// Max-prefix, before an UPDATE is applied: keeps of `prefixes` (announced by `peer` with
    /// `attrs`) the part that adds at most `room` prefixes to the peer's count, in order, and
    /// takes what it kept from `room`. A prefix the peer already has, or one that import
    /// refuses (for the same reasons and in the same order as [`Rib::apply_update`]: it only
    /// withdraws), takes no room. Returns whether a prefix was cut off.
    pub fn fit_to_room(
        &self,
        peer: PeerId,
        prefixes: &mut Vec<IpNet>,
        attrs: &PathAttributes,
        room: &mut u64,
    ) -> bool {
        // Most UPDATEs are far from the limit: no per-prefix look-up then.
        let len = prefixes.len() as u64;
        if len <= *room {
            *room -= len;
            return false;
        }
        let Some(info) = self.peer_info(peer) else { return false };
        let attrs_ok = policy::check_import_attributes(attrs, info, self.config.router_id).is_ok();
        let takes_room = |prefix: &IpNet| {
            let family = match prefix {
                IpNet::V4(_) => Family::IPV4_UNICAST,
                IpNet::V6(_) => Family::IPV6_UNICAST,
            };
            let accepted = attrs_ok
                && info.families.contains(&family)
                && policy::check_import_prefix(prefix, &self.config.always_block, &info.import)
                    .is_ok();
            let known = self
                .route(prefix)
                .is_some_and(|paths| paths.iter().any(|p| p.source() == Source::Peer(peer)));
            accepted && !known
        };
        let mut keep = prefixes.len();
        for (index, prefix) in prefixes.iter().enumerate() {
            if !takes_room(prefix) {
                continue;
            }
            if *room == 0 {
                keep = index;
                break;
            }
            *room -= 1;
        }
        let cut = keep < prefixes.len();
        prefixes.truncate(keep);
        cut
    }

    /// Prefixes sent to `peer` and not withdrawn, per family (FRR `pfxSnt` of each family).
    pub fn pfx_sent(&self, peer: PeerId) -> FamilyCounts {
        self.peers.get(&peer).map_or_else(FamilyCounts::default, |p| FamilyCounts {
            v4: p.out_v4.sent_count(),
            v6: p.out_v6.sent_count(),
        })
    }

    /// The prefixes sent to the peer at `address` for one family, sorted (FRR's
    /// `advertised-routes`); `None` when no session with it is in the RIB.
    pub fn advertised_to(&self, address: IpAddr, family: Family) -> Option<Vec<IpNet>> {
        let (id, _) = self.peers.iter().find(|(_, p)| p.info.address == address)?;
        Some(self.advertised(*id, family))
    }

    /// Prefixes sent to `peer` for one family, sorted (FRR `advertised-routes`).
    pub fn advertised(&self, peer: PeerId, family: Family) -> Vec<IpNet> {
        let Some(p) = self.peers.get(&peer) else { return Vec::new() };
        let mut out: Vec<IpNet> = match family.afi {
            Afi::Ipv4 => p.out_v4.sent_prefixes().map(IpNet::V4).collect(),
            Afi::Ipv6 => p.out_v6.sent_prefixes().map(IpNet::V6).collect(),
        };
        out.sort_unstable();
        out
    }

    /// The paths for one prefix (exact match).
    pub fn route(&self, prefix: &IpNet) -> Option<&[Path]> {
        match prefix {
            IpNet::V4(p) => self.v4.map.get(p).map(Destination::paths),
            IpNet::V6(p) => self.v6.map.get(p).map(Destination::paths),
        }
    }

    /// All destinations of a family, sorted by prefix, with their paths.
    pub fn routes(&self, family: Family) -> Vec<(IpNet, &[Path])> {
        let mut out: Vec<(IpNet, &[Path])> = match family.afi {
            Afi::Ipv4 => self.v4.map.iter().map(|(p, d)| (IpNet::V4(*p), d.paths())).collect(),
            Afi::Ipv6 => self.v6.map.iter().map(|(p, d)| (IpNet::V6(*p), d.paths())).collect(),
        };
        out.sort_unstable_by_key(|(p, _)| *p);
        out
    }

    /// The prefixes of a family, unsorted (cheap: `show` sorts them outside the RIB task).
    pub fn prefixes(&self, family: Family) -> Vec<IpNet> {
        match family.afi {
            Afi::Ipv4 => self.v4.map.keys().map(|p| IpNet::V4(*p)).collect(),
            Afi::Ipv6 => self.v6.map.keys().map(|p| IpNet::V6(*p)).collect(),
        }
    }

    /// Number of destinations (prefixes) in a family.
    /// FRR's `tableVersion` of each family: best-path changes so far.
    pub fn table_version(&self) -> PerFamily<u64> {
        PerFamily { v4: self.v4.version, v6: self.v6.version }
    }

    pub fn prefix_count(&self, family: Family) -> usize {
        match family.afi {
            Afi::Ipv4 => self.v4.map.len(),
            Afi::Ipv6 => self.v6.map.len(),
        }
    }

    /// Number of paths in a family, over all destinations.
    pub fn path_count(&self, family: Family) -> usize {
        match family.afi {
            Afi::Ipv4 => self.v4.path_count(),
            Afi::Ipv6 => self.v6.path_count(),
        }
    }

    /// Distinct attribute sets held by the interner.
    pub fn attribute_sets(&self) -> usize {
        self.interner.len()
    }

    /// Approximate heap bytes of the Loc-RIB tables (excluding attribute sets and Adj-RIB-Out).
    pub fn approx_table_bytes(&self) -> usize {
        self.v4.approx_heap_bytes().saturating_add(self.v6.approx_heap_bytes())
    }
}

#[cfg(test)]
mod tests;
