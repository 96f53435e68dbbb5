//! The FIB planner: desired state and kernel view in, plans out. Pure — no sockets, no threads,
//! no clock — so it is tested against an in-memory kernel (`model.rs`).
//!
//! What it keeps (and what it does not): the RIB is the desired state, so the planner holds no
//! route. It holds the nexthop groups with a route count per BGP next-hop set (`groups.rs`),
//! the next hops the RIB declared lost, the routes the kernel refused, and the replays it asked
//! a RIB for. Every change names the set the route had and the set it should have, which is
//! enough to keep the counts right and to know which group a route is on.
//!
//! Prefix-independent convergence: a lost next hop (`RouteBatch::hops_down`) replaces every
//! group containing it — one kernel message per group, before any route of the plan — so no
//! route forwards over it, however many routes there are. The per-prefix withdrawals that
//! follow only move counts: the group keeps serving the routes under their new, smaller set
//! (`Registry::host`). When the hop comes back, routes move back the same way and the group
//! regains the hop once the last route of the smaller set has moved.

use super::batch::RouteBatch;
use super::groups::{basis, Registry};
use super::msg::{self, Hop, KernelLink, KernelNexthop, KernelRoute, RouteKey, RTPROT_UPLINK};
use super::plan::{ObjectOp, Plan, Request, RouteAction, RouteOp};
use super::replay::{ReplayRequest, ReplayScope};
use super::resolve::Resolver;
use super::route::NextHop;
use super::{FibHopView, FibInstanceConfig, FibRouteView, FibSlot};
use ipnet::IpNet;
use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};
use tracing::{debug, info, warn};

/// A refused kernel write is tried again after 1 s, then 2, 4, … up to 30 s (FRR's zebra
/// gives up on a refused route; a next-hop device coming up, a full table freeing room or
/// another daemon's route leaving make the same write succeed later).
const RETRY_FIRST: Duration = Duration::from_secs(1);
const RETRY_MAX: Duration = Duration::from_secs(30);

/// The wait after `attempts` failed attempts.
pub fn backoff(attempts: u32) -> Duration {
    let doublings = attempts.saturating_sub(1).min(5);
    RETRY_FIRST.saturating_mul(1 << doublings).min(RETRY_MAX)
}

/// When the next attempt is due, `attempts` failed attempts after `now`.
fn retry_time(now: Instant, attempts: u32) -> Instant {
    now.checked_add(backoff(attempts)).unwrap_or(now)
}

/// A kernel notification that is not the echo of one of our requests.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    NewRoute(KernelRoute),
    DelRoute(KernelRoute),
    Link(KernelLink),
    DelLink(u32),
    Address,
    DelNexthop(u32),
    /// Another daemon's nexthop object (id, protocol): its id is not ours to use.
    ForeignNexthop(u32, u8),
}

pub(super) struct Instance {
    pub(super) config: FibInstanceConfig,
    /// Removed by a reload: its routes are gone and it takes no more (indexes stay stable).
    pub(super) retired: bool,
    /// Where routes go; `None` while the VRF device is missing.
    pub(super) table: Option<u32>,
    /// Where next hops are resolved: the main table for the default VRF, else the VRF's.
    pub(super) lookup: Option<u32>,
    /// Next hops the RIB declared lost.
    down: HashSet<NextHop>,
    /// A leak added by a reload, waiting for its source's routes: changes sent before the
    /// source read the request are not this instance's yet.
    filling: Option<u64>,
}

impl Instance {
    fn new(config: FibInstanceConfig) -> Self {
        // The default VRF's table is main; another VRF's is its device's, found later.
        let main_if_default = |vrf: &str| vrf.is_empty().then_some(msg::RT_TABLE_MAIN);
        let lookup = main_if_default(config.resolve_vrf());
        let table = config.table.or(main_if_default(&config.vrf));
        Instance { config, table, lookup, retired: false, down: HashSet::new(), filling: None }
    }

    fn route_key(&self, prefix: IpNet) -> Option<RouteKey> {
        Some(RouteKey { table: self.table?, prefix, metric: self.config.metric })
    }

    fn active(&self) -> bool {
        self.config.install && !self.retired
    }
}

/// A replay asked of a RIB and not yet answered.
#[derive(Debug)]
struct Replay {
    target: usize,
    /// A new leak's first fill: the routes count (rather than being re-written).
    fill: bool,
    /// Groups kept until the replay has moved their departing routes.
    holds: Vec<u32>,
    /// Groups whose routes the replay writes again (see `Planner::refreshing`).
    refreshes: Vec<u32>,
}

/// A route the kernel refused, or that another daemon's route keeps out; tried again at
/// `retry_at` until a write lands (`Planner::record`) or the route goes.
#[derive(Debug, Clone)]
struct Failure {
    group: u32,
    error: String,
    attempts: u32,
    retry_at: Instant,
}

/// A deletion the kernel refused (other than "already gone"), tried again the same way.
#[derive(Debug, Clone)]
struct FailedDelete {
    instance: usize,
    error: String,
    attempts: u32,
    retry_at: Instant,
}

/// What a resync counted while streaming the kernel's routes.
#[derive(Debug, Default)]
pub struct ResyncCounts {
    per_group: HashMap<u32, u32>,
    per_instance: HashMap<usize, u32>,
    stale: usize,
    /// Stale routes kept for a graceful restart.
    kept: usize,
}

/// A reload's switch of `[fib] nexthop_objects` ([`Planner::set_objects`]): the routes are
/// written again in their new form from the RIBs' replays, in place.
#[derive(Debug)]
struct Switch {
    /// Set when the round that started the switch ends: the replays it asked for have tokens
    /// below this one, and the switch is over when none of them is outstanding.
    until: Option<u64>,
    /// Switching off: the objects to delete once every route carries its hops inline.
    cleanup: Vec<u32>,
}

pub struct Planner {
    instances: Vec<Instance>,
    registry: Registry,
    resolver: Resolver,
    links: HashMap<u32, KernelLink>,
    /// Whether the kernel takes nexthop objects; else routes carry their hops (RTA_MULTIPATH).
    objects: bool,
    failures: HashMap<(usize, IpNet), Failure>,
    failed_deletes: HashMap<RouteKey, FailedDelete>,
    /// Refused nexthop objects or groups: a resync (which restores what the kernel lacks) is
    /// due at the instant, after that many attempts.
    object_retry: Option<(u32, Instant)>,
    /// Rounds in a row whose objects the kernel refused (the backoff of `object_retry`).
    object_attempts: u32,
    /// Routes of other daemons (another protocol) at the table and metric of one of our
    /// instances, with their protocol, from the kernel's dumps and notifications. uplink never
    /// writes over them (`Planner::set_route`).
    foreign: HashMap<RouteKey, u8>,
    /// The time of the round being planned (the writer passes it in; the planner has no
    /// clock).
    now: Instant,
    /// Writes tried again after a refusal (the metrics' `uplink_fib_retries_total`).
    retries: u64,
    /// zebra (FRR) has nexthop objects in the kernel (`Planner::take_zebra_seen`).
    zebra_seen: bool,
    replays: HashMap<u64, Replay>,
    next_token: u64,
    /// Groups whose routes a replay in flight writes again, with the number of such replays.
    /// The replay names next-hop sets as they were when it was asked for: a route of the
    /// group that moves to another set meanwhile is written by its change instead.
    refreshing: HashMap<u32, u32>,
    /// Replays to ask for at the end of the round, merged per target instance.
    ensure_all: HashSet<usize>,
    ensure_sets: HashMap<usize, HashSet<Box<[NextHop]>>>,
    ensure_prefixes: HashMap<usize, Vec<IpNet>>,
    ensure_groups: HashSet<u32>,
    /// Requests ready for the RIBs: (source instance, request).
    outbox: Vec<(usize, ReplayRequest)>,
    /// Groups removed this round while not in the kernel: requests to them are dropped.
    dead: HashSet<u32>,
    resolution_dirty: bool,
    /// Some group serves more than one set (see [`Planner::settle`]).
    unsettled: bool,
    /// A kernel object of ours vanished: the writer should resynchronise.
    resync_wanted: bool,
    inconsistencies: u64,
    /// Graceful restart (RFC 4724 §4.1): a resync keeps the previous run's routes and nexthops
    /// that nobody wants yet, instead of deleting them, until the restart is over.
    keep_previous: bool,
    /// Whether the kernel has nexthop objects at all (a reload may switch them on).
    kernel_objects: bool,
    switch: Option<Switch>,
    /// A switch ended in the last round ([`Planner::take_switch_complete`]).
    switch_complete: bool,
}

impl Planner {
    pub fn new(configs: Vec<FibInstanceConfig>, objects: bool, now: Instant) -> Self {
        Planner {
            failed_deletes: HashMap::new(),
            object_retry: None,
            object_attempts: 0,
            foreign: HashMap::new(),
            now,
            retries: 0,
            zebra_seen: false,
            instances: configs.into_iter().map(Instance::new).collect(),
            registry: Registry::new(),
            resolver: Resolver::default(),
            links: HashMap::new(),
            objects,
            failures: HashMap::new(),
            replays: HashMap::new(),
            next_token: 1,
            refreshing: HashMap::new(),
            ensure_all: HashSet::new(),
            ensure_sets: HashMap::new(),
            ensure_prefixes: HashMap::new(),
            ensure_groups: HashSet::new(),
            outbox: Vec::new(),
            dead: HashSet::new(),
            resolution_dirty: false,
            unsettled: false,
            resync_wanted: false,
            inconsistencies: 0,
            keep_previous: false,
            kernel_objects: true,
            switch: None,
            switch_complete: false,
        }
    }

    pub fn objects(&self) -> bool {
        self.objects
    }

    /// The kernel has no nexthop objects: routes carry their hops from now on.
    pub fn without_objects(&mut self) {
        self.objects = false;
        self.kernel_objects = false;
    }

    pub fn registry(&self) -> &Registry {
        &self.registry
    }

    /// Replay requests to hand to the RIB tasks: (source instance, request).
    pub fn take_requests(&mut self) -> Vec<(usize, ReplayRequest)> {
        std::mem::take(&mut self.outbox)
    }

    /// Whether groups serve more than one set for now: [`Planner::settle`] once things are
    /// quiet.
    pub fn unsettled(&self) -> bool {
        self.unsettled
    }

    pub fn take_resync_wanted(&mut self) -> bool {
        std::mem::take(&mut self.resync_wanted)
    }

    /// Changes that named a set the planner did not know (a bug elsewhere; logged).
    pub fn inconsistencies(&self) -> u64 {
        self.inconsistencies
    }

    /// The instance whose RIB feeds `index`: itself, or a leak's source router.
    fn source_of(&self, index: usize) -> Option<usize> {
        let inst = self.instances.get(index)?;
        match &inst.config.leaked_from {
            None => Some(index),
            Some(from) => self.instances.iter().position(|i| {
                !i.retired && i.config.leaked_from.is_none() && i.config.vrf == *from
            }),
        }
    }

    /// The instances a batch from the RIB of `source` applies to: its own, and the active
    /// leaks of its VRF. A retired source's last changes reach neither.
    fn targets_of(&self, source: usize) -> Vec<usize> {
        let Some(src) = self.instances.get(source).filter(|i| !i.retired) else {
            return Vec::new();
        };
        let vrf = &src.config.vrf;
        let mut out = Vec::new();
        if src.active() {
            out.push(source);
        }
        for (index, i) in self.instances.iter().enumerate() {
            if i.active() && i.config.leaked_from.as_deref() == Some(vrf.as_str()) {
                out.push(index);
            }
        }
        out
    }

    fn in_kernel(&self, group: u32) -> bool {
        self.registry.group(group).is_some_and(|g| g.in_kernel())
    }

    /// Whether a route of `group` may be in the kernel: with nexthop objects exactly when the
    /// group is (routes leave with it); without, an inline route stays until deleted.
    fn route_may_be_in_kernel(&self, group: u32) -> bool {
        !self.objects || self.in_kernel(group)
    }

    // ---- changes from the RIBs ----------------------------------------------------------

    /// Applies one batch from the RIB of instance `source`.
    pub fn apply(&mut self, source: usize, batch: &RouteBatch, plan: &mut Plan) {
        for target in self.targets_of(source) {
            for hop in batch.hops_down() {
                self.hop_down(target, *hop, plan);
            }
            for hop in batch.hops_up() {
                self.hop_up(target, *hop, plan);
            }
            if self.instances.get(target).is_some_and(|i| i.filling.is_some()) {
                continue;
            }
            for (prefix, old, new) in batch.changes() {
                self.change(target, prefix, old, new, plan);
            }
        }
    }

    /// A RIB's answer to replay `token`; `done` on its last batch.
    pub fn replayed(&mut self, token: u64, batch: &RouteBatch, done: bool, plan: &mut Plan) {
        let Some((target, fill)) = self.replays.get(&token).map(|r| (r.target, r.fill)) else {
            return;
        };
        if self.instances.get(target).is_some_and(Instance::active) {
            for (prefix, _, hops) in batch.changes() {
                if fill {
                    self.change(target, prefix, &[], hops, plan);
                } else {
                    self.ensure(target, prefix, hops, plan);
                }
            }
        }
        if done {
            self.replay_done(token, plan);
        }
    }

    fn replay_done(&mut self, token: u64, plan: &mut Plan) {
        let Some(replay) = self.replays.remove(&token) else { return };
        self.refreshed(&replay.refreshes);
        self.check_switch(plan);
        if replay.fill {
            if let Some(inst) = self.instances.get_mut(replay.target) {
                inst.filling = None;
            }
        }
        for group in replay.holds {
            self.registry.release(group);
            match self.registry.group(group) {
                Some(g) if g.routes() == 0 && g.holds == 0 => self.remove_group(group, plan),
                Some(_) => self.refresh_group(group, plan),
                None => {}
            }
        }
    }

    /// `prefix` of instance `target` had `old` and now has `new` (either may be empty).
    fn change(
        &mut self,
        target: usize,
        prefix: IpNet,
        old: &[NextHop],
        new: &[NextHop],
        plan: &mut Plan,
    ) {
        if old == new {
            return;
        }
        let key = self.instances.get(target).and_then(|i| i.route_key(prefix));
        let old_group = if old.is_empty() {
            None
        } else {
            let found = self.registry.find(target, old);
            if found.is_none() {
                self.inconsistent(target, prefix, old);
            }
            found
        };
        if new.is_empty() {
            if let Some(group) = old_group {
                self.clear_failure(target, prefix);
                if let Some(key) = key.filter(|_| self.route_may_be_in_kernel(group)) {
                    plan.routes.push(route_op(key, target, RouteAction::Delete));
                }
                self.detach(group, old, plan);
            }
            return;
        }
        let new_group = match self.registry.find(target, new) {
            Some(group) => group,
            None => match old_group.filter(|g| self.can_host(*g, new)) {
                Some(group) => {
                    self.registry.host(group, new);
                    self.unsettled = true;
                    group
                }
                None => self.create_group(target, new, plan),
            },
        };
        self.registry.add_route(new_group, new);
        let refused = !self.failures.is_empty() && self.failures.contains_key(&(target, prefix));
        // Staying on its group under another set needs no message — unless the route carries
        // its hops inline, or a replay that will not name its new set is to rewrite it.
        let rewrite = Some(new_group) == old_group
            && (!self.objects || self.refreshing.contains_key(&new_group));
        if Some(new_group) != old_group || refused || rewrite {
            // The route moves to another group (or is tried again after a refusal).
            match key {
                Some(key) if self.in_kernel(new_group) => {
                    self.set_route(key, target, new_group, plan)
                }
                _ => {
                    // Pending (its group is out of the kernel, or its table unknown).
                    self.clear_failure(target, prefix);
                    if let Some(key) =
                        key.filter(|_| old_group.is_some_and(|g| self.route_may_be_in_kernel(g)))
                    {
                        plan.routes.push(route_op(key, target, RouteAction::Delete));
                    }
                }
            }
        }
        if let Some(group) = old_group {
            self.detach(group, old, plan);
        }
    }

    /// A replayed route: make the kernel hold it as its group says.
    fn ensure(&mut self, target: usize, prefix: IpNet, hops: &[NextHop], plan: &mut Plan) {
        let Some(key) = self.instances.get(target).and_then(|i| i.route_key(prefix)) else {
            return;
        };
        let Some(group) = self.registry.find(target, hops) else {
            self.inconsistent(target, prefix, hops);
            return;
        };
        if self.in_kernel(group) {
            self.set_route(key, target, group, plan);
        } else {
            // Waiting for its group (it comes back with a replay): pending, not failed.
            self.clear_failure(target, prefix);
            if !self.objects {
                // An inline route does not leave with its group: take it out.
                plan.routes.push(route_op(key, target, RouteAction::Delete));
            }
        }
    }

    /// Points the route at `group` — unless another daemon's route holds its table, prefix
    /// and metric. Adds replace (NLM_F_REPLACE, so moving one of our routes to another group
    /// or taking over the previous run's after a graceful restart is one message), and the
    /// kernel replaces whatever route sits at that key, whoever wrote it; so the planner
    /// checks its view of the kernel instead, which the monitor keeps current with every
    /// other daemon's routes at our tables and metrics. A route kept out that way is failed,
    /// and tried again when the other route leaves (or on the retry schedule). What remains is
    /// a route another daemon adds at the same instant, before its notification is read.
    fn set_route(&mut self, key: RouteKey, target: usize, group: u32, plan: &mut Plan) {
        if !self.failed_deletes.is_empty() {
            self.failed_deletes.remove(&key);
        }
        if let Some(protocol) = self.foreign.get(&key).copied() {
            let error = format!(
                "another daemon's route (proto {}) holds table {} metric {}: not replaced",
                protocol_name(protocol),
                key.table,
                key.metric
            );
            self.fail(target, key.prefix, group, error);
            return;
        }
        plan.routes.push(route_op(key, target, RouteAction::Set(group)));
    }

    /// Records a failed write of the route (one more attempt), due again after the backoff.
    fn fail(&mut self, target: usize, prefix: IpNet, group: u32, error: String) {
        let attempts = self.failures.get(&(target, prefix)).map_or(0, |f| f.attempts) + 1;
        let retry_at = retry_time(self.now, attempts);
        self.failures.insert((target, prefix), Failure { group, error, attempts, retry_at });
    }

    /// The route is gone or waits for its group: no refusal stands for it any more.
    fn clear_failure(&mut self, target: usize, prefix: IpNet) {
        if !self.failures.is_empty() {
            self.failures.remove(&(target, prefix));
        }
    }

    fn inconsistent(&mut self, target: usize, prefix: IpNet, hops: &[NextHop]) {
        self.inconsistencies = self.inconsistencies.saturating_add(1);
        if self.inconsistencies <= 3 {
            warn!(instance = target, %prefix, ?hops, "a route change names a next-hop set the FIB writer has no group for");
        }
    }

    /// Whether group `group` can serve `hops` too without changing its members: the next
    /// hops all its sets share (minus those lost) are the same with `hops` added, and there
    /// are some. Then a route moving to `hops` needs no kernel message.
    fn can_host(&self, group: u32, hops: &[NextHop]) -> bool {
        let Some(g) = self.registry.group(group) else { return false };
        let Some(inst) = self.instances.get(g.instance) else { return false };
        let now = g.basis(&inst.down);
        if now.is_empty() {
            return false;
        }
        let with = basis(g.hosted.iter().map(|h| &*h.hops).chain([hops]), &inst.down);
        with == now
    }

    /// A route of `hops` left group `group`.
    fn detach(&mut self, group: u32, hops: &[NextHop], plan: &mut Plan) {
        if !self.registry.remove_route(group, hops) {
            return;
        }
        match self.registry.group(group) {
            Some(g) if g.routes() == 0 && g.holds == 0 => self.remove_group(group, plan),
            // A set left: the members may grow.
            Some(_) => self.refresh_group(group, plan),
            None => {}
        }
    }

    fn create_group(&mut self, instance: usize, hops: &[NextHop], plan: &mut Plan) -> u32 {
        let id = self.registry.create(instance, hops);
        self.refresh_group(id, plan);
        id
    }

    fn remove_group(&mut self, id: u32, plan: &mut Plan) {
        let Some((group, unused)) = self.registry.remove(id) else { return };
        if self.objects {
            if group.in_kernel() {
                plan.cleanup.push(ObjectOp::Delete(id));
            }
            plan.cleanup.extend(unused.into_iter().map(ObjectOp::Delete));
        }
        if !group.in_kernel() {
            self.dead.insert(id);
        }
    }

    /// Re-resolves a group and replaces it in the kernel when its members changed. A group
    /// with no reachable next hop leaves the kernel (and its routes with it); when it comes
    /// back, its routes are replayed.
    fn refresh_group(&mut self, id: u32, plan: &mut Plan) {
        let Some(group) = self.registry.group(id) else { return };
        let Some(inst) = self.instances.get(group.instance) else { return };
        let hops: Vec<Hop> = match inst.lookup {
            Some(table) => group
                .basis(&inst.down)
                .iter()
                .flat_map(|nh| self.resolver.resolve(table, nh))
                .collect(),
            None => Vec::new(),
        };
        let routes = group.routes();
        let old_members = group.members.clone();
        let Some(change) = self.registry.set_members(id, hops) else { return };
        let now_empty = change.member_ids.is_empty();
        if self.objects {
            for (nh, hop) in &change.created {
                plan.objects.push(ObjectOp::Nexthop { id: *nh, hop: *hop });
            }
            let grows_only = !change.was_empty
                && self
                    .registry
                    .group(id)
                    .is_some_and(|g| old_members.iter().all(|h| g.members.contains(h)));
            let op = if now_empty {
                ObjectOp::Delete(id)
            } else {
                ObjectOp::Group { id, members: change.member_ids.clone() }
            };
            // Losing a member is urgent (traffic over it is lost): before any route of the
            // plan. Gaining one waits until the routes of the plan have moved, so a route on
            // its way out never forwards over a hop it does not have.
            if grows_only {
                plan.cleanup.push(op);
            } else {
                plan.objects.push(op);
            }
            plan.cleanup.extend(change.unused.iter().map(|n| ObjectOp::Delete(*n)));
        }
        // The routes are written again when they left the kernel with the group and it is
        // back, and always when they carry their hops inline.
        if routes > 0 && (!self.objects || change.was_empty && !now_empty) {
            self.replay_group(id);
        }
    }

    /// The group's routes are to be written again: its RIB replays the sets the group serves
    /// when the round ends (not now: changes later in the round may still move routes).
    fn replay_group(&mut self, id: u32) {
        self.ensure_groups.insert(id);
    }

    /// The RIB lost `hop`: every group of `target` with it is replaced without it.
    fn hop_down(&mut self, target: usize, hop: NextHop, plan: &mut Plan) {
        let Some(inst) = self.instances.get_mut(target) else { return };
        if !inst.down.insert(hop) {
            return;
        }
        debug!(instance = target, %hop, "next hop lost: replacing the groups that have it");
        for id in self.groups_with(target, &hop) {
            self.refresh_group(id, plan);
        }
    }

    fn hop_up(&mut self, target: usize, hop: NextHop, plan: &mut Plan) {
        let Some(inst) = self.instances.get_mut(target) else { return };
        if !inst.down.remove(&hop) {
            return;
        }
        for id in self.groups_with(target, &hop) {
            self.refresh_group(id, plan);
        }
    }

    fn groups_with(&self, instance: usize, hop: &NextHop) -> Vec<u32> {
        self.registry
            .groups()
            .filter(|g| g.instance == instance && g.hosted.iter().any(|h| h.hops.contains(hop)))
            .map(|g| g.id)
            .collect()
    }

    /// Gives every set that shares a group with a larger one its own group, and asks its RIB
    /// to replay the set's routes onto it. Call it once changes have been quiet for a while: a
    /// group serves two sets only while routes move between them, or when a set lost a hop
    /// another set never had; if the move stopped half-way, the routes that moved would keep
    /// forwarding over the shared hops only.
    pub fn settle(&mut self, plan: &mut Plan) {
        self.unsettled = false;
        let mixed: Vec<u32> = self
            .registry
            .groups()
            .filter(|g| g.live_sets().nth(1).is_some())
            .map(|g| g.id)
            .collect();
        for id in mixed {
            let Some(group) = self.registry.group(id) else { continue };
            let instance = group.instance;
            let mut live: Vec<(Box<[NextHop]>, u32)> = group
                .hosted
                .iter()
                .filter(|h| !h.departing)
                .map(|h| (h.hops.clone(), h.routes))
                .collect();
            // The set with the most routes stays.
            live.sort_by_key(|l| std::cmp::Reverse(l.1));
            let moving: Vec<Box<[NextHop]>> = live.into_iter().skip(1).map(|(h, _)| h).collect();
            if moving.is_empty() {
                continue;
            }
            info!(
                group = id,
                sets = moving.len(),
                "routes stayed split over next-hop sets: giving each set its own group"
            );
            for hops in &moving {
                let to = self.create_group(instance, hops, plan);
                self.registry.depart(id, hops, to);
            }
            let holds = vec![id; moving.len()];
            self.request(instance, ReplayScope::Sets(moving), false, holds);
        }
    }

    /// Asks the RIB feeding `target` for a replay now (not merged with others).
    fn request(
        &mut self,
        target: usize,
        scope: ReplayScope,
        fill: bool,
        holds: Vec<u32>,
    ) -> Option<u64> {
        let Some(source) = self.source_of(target) else {
            // Nobody can answer: let go of what the replay would have held.
            for group in holds {
                self.registry.release(group);
            }
            if fill {
                if let Some(inst) = self.instances.get_mut(target) {
                    inst.filling = None;
                }
            }
            return None;
        };
        let token = self.next_token;
        self.next_token = self.next_token.wrapping_add(1);
        if fill {
            if let Some(inst) = self.instances.get_mut(target) {
                inst.filling = Some(token);
            }
        }
        self.replays.insert(token, Replay { target, fill, holds, refreshes: Vec::new() });
        self.outbox.push((source, ReplayRequest { token, scope }));
        Some(token)
    }

    /// Records that replay `token` writes the routes of `groups` again.
    fn refreshing(&mut self, token: Option<u64>, groups: Vec<u32>) {
        let Some(replay) = token.and_then(|t| self.replays.get_mut(&t)) else { return };
        for group in &groups {
            *self.refreshing.entry(*group).or_default() += 1;
        }
        replay.refreshes.extend(groups);
    }

    /// A replay that rewrote `groups` is over (answered, or dropped).
    fn refreshed(&mut self, groups: &[u32]) {
        for group in groups {
            if let Some(n) = self.refreshing.get_mut(group) {
                *n = n.saturating_sub(1);
                if *n == 0 {
                    self.refreshing.remove(group);
                }
            }
        }
    }

    /// Ends a round of planning: re-resolves groups if the kernel's routes changed, drops
    /// requests to groups that left the kernel (their routes come back with a replay), and
    /// turns the replays asked for into requests.
    pub fn finish(&mut self, plan: &mut Plan) {
        if std::mem::take(&mut self.resolution_dirty) {
            for id in self.registry.group_ids() {
                self.refresh_group(id, plan);
            }
        }
        let registry = &self.registry;
        let dead = &self.dead;
        plan.routes.retain(|op| match op.action {
            RouteAction::Set(group) => match registry.group(group) {
                Some(g) => g.in_kernel(),
                None => !dead.contains(&group),
            },
            RouteAction::Delete => true,
        });
        self.dead.clear();
        if !self.objects {
            for op in &plan.routes {
                if let RouteAction::Set(group) = op.action {
                    if let Some(g) = self.registry.group(group) {
                        plan.inline.entry(group).or_insert_with(|| g.members.clone());
                    }
                }
            }
        }
        let mut refreshes: HashMap<usize, Vec<u32>> = HashMap::new();
        for id in std::mem::take(&mut self.ensure_groups) {
            if let Some(group) = self.registry.group(id) {
                let sets = self.ensure_sets.entry(group.instance).or_default();
                sets.extend(group.live_sets().map(Box::<[NextHop]>::from));
                refreshes.entry(group.instance).or_default().push(id);
            }
        }
        for target in std::mem::take(&mut self.ensure_all) {
            self.ensure_sets.remove(&target);
            let token = self.request(target, ReplayScope::All, false, Vec::new());
            self.refreshing(token, refreshes.remove(&target).unwrap_or_default());
        }
        for (target, sets) in std::mem::take(&mut self.ensure_sets) {
            let scope = ReplayScope::Sets(sets.into_iter().collect());
            let token = self.request(target, scope, false, Vec::new());
            self.refreshing(token, refreshes.remove(&target).unwrap_or_default());
        }
        for (target, prefixes) in std::mem::take(&mut self.ensure_prefixes) {
            self.request(target, ReplayScope::Prefixes(prefixes), false, Vec::new());
        }
        if let Some(switch) = self.switch.as_mut().filter(|s| s.until.is_none()) {
            switch.until = Some(self.next_token);
        }
        self.check_switch(plan);
    }

    // ---- switching nexthop objects on and off (a reload) ------------------------------

    /// A reload changed `[fib] nexthop_objects`. Every route is written again in the other
    /// form and replaced in place (RTM_NEWROUTE with NLM_F_REPLACE: none is withdrawn), from
    /// its RIB's replay: switching on, the objects and groups are created first; switching
    /// off, they are deleted once every route carries its hops inline. Returns whether a
    /// switch started ([`Planner::take_switch_complete`] says when it is over).
    pub fn set_objects(&mut self, on: bool, plan: &mut Plan) -> Result<bool, String> {
        if on == self.objects {
            return Ok(false);
        }
        if on && !self.kernel_objects {
            return Err("the kernel has no nexthop objects; routes keep their hops inline".into());
        }
        self.objects = on;
        let mut cleanup = Vec::new();
        if on {
            info!("nexthop objects on: routes move onto nexthop groups");
            // Nothing of ours is in the kernel as an object: all are created, and the routes
            // of every group are replayed onto it.
            self.restore_objects(&HashSet::new(), plan);
        } else {
            info!("nexthop objects off: routes carry their hops inline (RTA_MULTIPATH)");
            // Groups before their members.
            cleanup.extend(self.registry.groups().filter(|g| g.in_kernel()).map(|g| g.id));
            cleanup.extend(self.registry.nexthops().map(|(id, _)| id));
            // Only instances with routes: one whose RIB task has not started has none, and
            // the switch must not wait for it.
            for (index, inst) in self.instances.iter().enumerate() {
                if inst.active() && self.registry.groups().any(|g| g.instance == index) {
                    self.ensure_all.insert(index);
                }
            }
        }
        self.switch = Some(Switch { until: None, cleanup });
        Ok(true)
    }

    /// Ends the switch once the replays it asked for are all answered.
    fn check_switch(&mut self, plan: &mut Plan) {
        let Some(until) = self.switch.as_ref().and_then(|s| s.until) else { return };
        if self.replays.keys().any(|token| *token < until) {
            return;
        }
        if let Some(switch) = self.switch.take() {
            plan.cleanup.extend(switch.cleanup.into_iter().map(ObjectOp::Delete));
        }
        self.switch_complete = true;
    }

    pub fn take_switch_complete(&mut self) -> bool {
        std::mem::take(&mut self.switch_complete)
    }

    /// Whether a switch of nexthop objects is under way.
    pub fn switching(&self) -> bool {
        self.switch.is_some()
    }

    /// Per instance, index for index: its routes installed, pending and failed (the metrics'
    /// view, `stats.rs`). From the group counts: a few dozen groups, not a walk of the routes.
    pub fn route_counts(&self) -> Vec<[u64; 3]> {
        let mut out = vec![[0u64; 3]; self.instances.len()];
        for group in self.registry.groups() {
            let Some(inst) = self.instances.get(group.instance) else { continue };
            let Some(counts) = out.get_mut(group.instance) else { continue };
            let routes = u64::from(group.routes());
            let written = inst.active() && inst.table.is_some() && inst.filling.is_none();
            if written && group.in_kernel() {
                counts[0] += routes;
            } else {
                counts[1] += routes;
            }
        }
        for (instance, _) in self.failures.keys() {
            if let Some(counts) = out.get_mut(*instance) {
                counts[0] = counts[0].saturating_sub(1);
                counts[2] += 1;
            }
        }
        for (counts, inst) in out.iter_mut().zip(&self.instances) {
            if !inst.active() {
                *counts = [0; 3];
            }
        }
        out
    }

    /// What the kernel said to each request of `plan` that failed (index into
    /// [`Plan::requests`]): refused routes and deletions are failed and tried again after a
    /// backoff; routes and deletions that went through clear their earlier failure.
    /// Requests in `unanswered` had their answer lost: neither failed nor known to be done
    /// (the writer resynchronises).
    pub fn record(
        &mut self,
        plan: &Plan,
        failures: &[(usize, super::kernel::KernelError)],
        unanswered: &[usize],
    ) {
        let mut refused = 0usize;
        let mut failed_routes: HashSet<usize> = unanswered.iter().copied().collect();
        let mut objects_refused = false;
        for (index, error) in failures {
            let Some(request) = plan.request(*index) else { continue };
            let gone = error.errno == super::kernel::ENOENT || error.errno == super::kernel::ESRCH;
            match request {
                Request::Route(op) => match op.action {
                    RouteAction::Set(group) => {
                        refused += 1;
                        failed_routes.insert(*index);
                        let instance = op.instance as usize;
                        if refused <= 3 {
                            let vrf =
                                self.instances.get(instance).map_or("", |i| i.config.vrf.as_str());
                            let vrf = crate::config::vrf_display_name(vrf);
                            warn!(vrf, prefix = %op.key.prefix, "kernel refused the route: {error} (tried again later)");
                        }
                        self.fail(instance, op.key.prefix, group, error.to_string());
                    }
                    // Already gone: the goal is reached.
                    RouteAction::Delete if gone => {}
                    RouteAction::Delete => {
                        failed_routes.insert(*index);
                        warn!(prefix = %op.key.prefix, "cannot delete route: {error} (tried again later)");
                        let attempts =
                            self.failed_deletes.get(&op.key).map_or(0, |f| f.attempts) + 1;
                        let retry_at = retry_time(self.now, attempts);
                        let instance = op.instance as usize;
                        let error = error.to_string();
                        let failed = FailedDelete { instance, error, attempts, retry_at };
                        self.failed_deletes.insert(op.key, failed);
                    }
                },
                Request::Object(ObjectOp::Delete(_)) if gone => {}
                Request::Object(op) => {
                    match op {
                        ObjectOp::Delete(id) => warn!(id, "cannot delete nexthop: {error}"),
                        ObjectOp::Nexthop { id, hop } => {
                            warn!(id, gateway = %hop.gateway, ifindex = hop.ifindex, "kernel refused the nexthop: {error}")
                        }
                        ObjectOp::Group { id, .. } => {
                            warn!(id, "kernel refused the nexthop group: {error}")
                        }
                    }
                    objects_refused = true;
                }
            }
        }
        if refused > 3 {
            warn!("kernel refused {refused} routes in one batch (first three logged)");
        }
        if objects_refused {
            // A resync later reads what the kernel holds and writes what it lacks.
            self.object_attempts = self.object_attempts.saturating_add(1);
            let at = retry_time(self.now, self.object_attempts);
            self.object_retry = Some((self.object_attempts, at));
        } else if plan
            .objects
            .iter()
            .chain(&plan.cleanup)
            .any(|op| !matches!(op, ObjectOp::Delete(_)))
        {
            self.object_attempts = 0;
        }
        if self.failures.is_empty() && self.failed_deletes.is_empty() {
            return;
        }
        // Writes that went through end their failure.
        let base = plan.objects.len();
        for (offset, op) in plan.routes.iter().enumerate() {
            if failed_routes.contains(&(base + offset)) {
                continue;
            }
            match op.action {
                RouteAction::Set(_) => {
                    self.failures.remove(&(op.instance as usize, op.key.prefix));
                }
                RouteAction::Delete => {
                    self.failed_deletes.remove(&op.key);
                }
            }
        }
    }

    /// Tries again the writes whose backoff has run out at `now`: a failed route is asked of
    /// its RIB again (a replay of its prefix, so it is written as the RIB has it now), a
    /// failed deletion is sent again, refused objects are restored by a resync
    /// ([`Planner::take_resync_wanted`]). Returns how many were tried.
    pub fn retry_due(&mut self, now: Instant, plan: &mut Plan) -> usize {
        self.now = now;
        let mut tried = 0usize;
        for ((instance, prefix), failure) in self.failures.iter_mut() {
            if failure.retry_at > now {
                continue;
            }
            // Due again after the next backoff if this try does not land either.
            failure.retry_at = retry_time(now, failure.attempts.saturating_add(1));
            self.ensure_prefixes.entry(*instance).or_default().push(*prefix);
            tried += 1;
        }
        for (key, failed) in self.failed_deletes.iter_mut() {
            if failed.retry_at > now {
                continue;
            }
            failed.retry_at = retry_time(now, failed.attempts.saturating_add(1));
            plan.routes.push(route_op(*key, failed.instance, RouteAction::Delete));
            tried += 1;
        }
        if let Some((attempts, at)) = self.object_retry {
            if at <= now {
                self.object_retry = None;
                self.resync_wanted = true;
                tried += 1;
                debug!(attempts, "nexthop objects were refused: resynchronising to restore them");
            }
        }
        self.retries = self.retries.saturating_add(u64::try_from(tried).unwrap_or(u64::MAX));
        tried
    }

    /// When the next retry is due, if any write is failed.
    pub fn next_retry(&self) -> Option<Instant> {
        let routes = self.failures.values().map(|f| f.retry_at);
        let deletes = self.failed_deletes.values().map(|f| f.retry_at);
        routes.chain(deletes).chain(self.object_retry.map(|(_, at)| at)).min()
    }

    /// The time of the round about to be planned.
    pub fn set_now(&mut self, now: Instant) {
        self.now = now;
    }

    /// Writes tried again so far.
    pub fn retries(&self) -> u64 {
        self.retries
    }

    /// Whether zebra's nexthop objects were seen since the last call. zebra (FRR) takes every
    /// nexthop object in the kernel for its own when a route it knows of uses it — uplink's
    /// routes are such routes to it — and puts back its copy when another program replaces
    /// or deletes it ("Kernel updated a nexthop group … sending it back down",
    /// `zebra/zebra_nhg.c`): a group uplink shrinks for a lost peer would grow back. Beside
    /// zebra, uplink's routes carry their next hops inline instead.
    pub fn take_zebra_seen(&mut self) -> bool {
        std::mem::take(&mut self.zebra_seen)
    }

    // ---- reloads -----------------------------------------------------------------------

    /// A reload's instances, index for index: retires those that left (their groups, and the
    /// routes with them, leave the kernel), adds the new ones and fills a new leak from its
    /// source's RIB. Returns the (table, metric) pairs whose routes the writer must purge
    /// itself (without nexthop objects, routes do not leave with a group).
    pub fn configure(&mut self, slots: &[FibSlot], plan: &mut Plan) -> Vec<(u32, u32)> {
        let mut purge = Vec::new();
        for (index, slot) in slots.iter().enumerate() {
            match self.instances.get(index) {
                Some(inst) if slot.retired && !inst.retired => {
                    // A router's leaks go too; its replacement (if any) fills them again.
                    let mut gone = vec![index];
                    if inst.config.leaked_from.is_none() {
                        let vrf = inst.config.vrf.clone();
                        gone.extend(self.instances.iter().enumerate().filter_map(|(i, x)| {
                            (!x.retired && x.config.leaked_from.as_deref() == Some(vrf.as_str()))
                                .then_some(i)
                        }));
                    }
                    for target in gone {
                        if let Some(key) = self.clear(target, plan) {
                            purge.push(key);
                        }
                    }
                    info!(vrf = crate::config::vrf_display_name(&slot.config.vrf), leaked_from = ?slot.config.leaked_from, "FIB instance retired by a reload");
                }
                Some(_) => {}
                None => {
                    self.instances.push(Instance::new(slot.config.clone()));
                    self.adopt_vrf_tables(index);
                    if slot.config.leaked_from.is_some() && slot.config.install {
                        self.request(index, ReplayScope::All, true, Vec::new());
                    }
                    info!(vrf = crate::config::vrf_display_name(&slot.config.vrf), leaked_from = ?slot.config.leaked_from, "FIB instance added by a reload");
                }
            }
        }
        purge
    }

    /// Takes every route of an instance out of the kernel and retires it (a reload, or a
    /// shutdown without graceful restart). Returns the (table, metric) whose routes the writer
    /// must purge itself (without nexthop objects, routes do not leave with a group).
    pub fn clear(&mut self, index: usize, plan: &mut Plan) -> Option<(u32, u32)> {
        let (ids, unused) = self.registry.remove_instance(index);
        if self.objects {
            plan.cleanup.extend(ids.into_iter().map(ObjectOp::Delete));
            plan.cleanup.extend(unused.into_iter().map(ObjectOp::Delete));
        }
        self.failures.retain(|(i, _), _| *i != index);
        self.failed_deletes.retain(|_, f| f.instance != index);
        let tokens: Vec<u64> =
            self.replays.iter().filter(|(_, r)| r.target == index).map(|(t, _)| *t).collect();
        for token in tokens {
            if let Some(replay) = self.replays.remove(&token) {
                self.refreshed(&replay.refreshes);
            }
        }
        let inst = self.instances.get_mut(index)?;
        let was_active = inst.active();
        inst.retired = true;
        let key = inst.table.map(|t| (t, inst.config.metric));
        key.filter(|_| was_active && !self.objects)
    }

    /// A new instance's tables, from the VRF devices already known.
    fn adopt_vrf_tables(&mut self, index: usize) {
        let Some(inst) = self.instances.get(index) else { return };
        let names = [inst.config.vrf.clone(), inst.config.resolve_vrf().to_string()];
        let links: Vec<KernelLink> = self
            .links
            .values()
            .filter(|l| l.vrf_table.is_some() && names.contains(&l.name))
            .cloned()
            .collect();
        for link in links {
            self.link(link);
        }
    }

    // ---- the kernel's side ---------------------------------------------------------------

    fn instance_of_table(&self, table: u32, metric: u32) -> Option<usize> {
        self.instances
            .iter()
            .position(|i| i.active() && i.table == Some(table) && i.config.metric == metric)
    }

    pub fn kernel_event(&mut self, event: Event) {
        match event {
            Event::NewRoute(route) => {
                if self.resolver.add_route(&route) {
                    self.resolution_dirty = true;
                }
                self.note_foreign(&route);
            }
            Event::DelRoute(route) if route.protocol == RTPROT_UPLINK => {
                // Someone deleted one of our routes: ask its RIB for it and put it back. A
                // route that left with a group we deleted names a group not in the kernel.
                let Some(instance) = self.instance_of_table(route.table, route.metric) else {
                    return;
                };
                let ours = match route.nh_id {
                    Some(id) => self
                        .registry
                        .group(id)
                        .is_some_and(|g| g.instance == instance && g.in_kernel()),
                    None => !self.objects,
                };
                if ours {
                    let vrf = self.instances.get(instance).map_or("", |i| i.config.vrf.as_str());
                    let vrf = crate::config::vrf_display_name(vrf);
                    info!(vrf, prefix = %route.prefix, table = route.table, "route deleted behind uplink's back: restoring it");
                    self.ensure_prefixes.entry(instance).or_default().push(route.prefix);
                }
            }
            Event::DelRoute(route) => {
                if self.resolver.remove_route(&route) {
                    self.resolution_dirty = true;
                }
                // Another daemon's route left a place of ours: a route of ours kept out of it
                // (or replaced by it) is written now, if its RIB has it.
                let key =
                    RouteKey { table: route.table, prefix: route.prefix, metric: route.metric };
                if self.foreign.remove(&key).is_some() {
                    if let Some(instance) = self.instance_of_table(route.table, route.metric) {
                        self.ensure_prefixes.entry(instance).or_default().push(route.prefix);
                    }
                }
            }
            Event::Link(link) => self.link(link),
            Event::DelLink(index) => {
                self.links.remove(&index);
                self.resolver.remove_link(index);
                self.resolution_dirty = true;
            }
            Event::Address => self.resolution_dirty = true,
            Event::ForeignNexthop(id, protocol) => {
                self.zebra_seen |= protocol == msg::RTPROT_ZEBRA;
                if self.registry.owns(id) {
                    warn!(
                        id,
                        "another daemon wrote over a nexthop object of uplink's: resynchronising"
                    );
                    self.resync_wanted = true;
                }
                self.registry.reserve_foreign([id]);
            }
            Event::DelNexthop(id) => {
                if self.registry.owns(id) {
                    warn!(
                        id,
                        "a nexthop object of uplink's was deleted from outside: resynchronising"
                    );
                    self.resync_wanted = true;
                }
            }
        }
    }

    pub fn link(&mut self, link: KernelLink) {
        if self.resolver.set_link(link.index, link.up) {
            self.resolution_dirty = true;
        }
        if let Some(table) = link.vrf_table {
            for index in 0..self.instances.len() {
                let Some(inst) = self.instances.get_mut(index) else { continue };
                let resolves_here = inst.config.resolve_vrf() == link.name;
                let installs_here = inst.config.vrf == link.name && inst.config.table.is_none();
                if (!resolves_here || inst.lookup == Some(table))
                    && (!installs_here || inst.table == Some(table))
                {
                    continue;
                }
                info!(vrf = %link.name, table, "VRF device found");
                if resolves_here {
                    inst.lookup = Some(table);
                }
                if installs_here {
                    inst.table = Some(table);
                    // Routes waiting for the table: written once the RIB replays them.
                    if inst.active() {
                        self.ensure_all.insert(index);
                    }
                }
                self.resolution_dirty = true;
            }
        }
        self.links.insert(link.index, link);
    }

    /// Starts a resync: the kernel view (links, resolution, other daemons' routes) is read
    /// again from scratch.
    pub fn forget_kernel_view(&mut self) {
        self.resolver.clear();
        self.links.clear();
        self.foreign.clear();
    }

    /// Remembers another daemon's route that sits at the table and metric of one of our
    /// instances (see [`Planner::set_route`]).
    fn note_foreign(&mut self, route: &KernelRoute) {
        if route.protocol == RTPROT_UPLINK
            || self.instance_of_table(route.table, route.metric).is_none()
        {
            return;
        }
        let key = RouteKey { table: route.table, prefix: route.prefix, metric: route.metric };
        if self.foreign.insert(key, route.protocol).is_none() {
            debug!(prefix = %route.prefix, table = route.table, protocol = route.protocol, "another daemon's route at uplink's table and metric: uplink will not replace it");
        }
    }

    /// The kernel's nexthop objects (id, protocol): stale ones of ours go, ones we lost come
    /// back. Run before the routes are streamed, so routes through stale objects leave with
    /// them (one message instead of one per route).
    pub fn resync_nexthops(&mut self, present: &[KernelNexthop], plan: &mut Plan) {
        self.registry
            .reserve_foreign(present.iter().filter(|n| n.protocol != RTPROT_UPLINK).map(|n| n.id));
        self.zebra_seen |= present.iter().any(|n| n.protocol == msg::RTPROT_ZEBRA);
        let ids: HashSet<u32> = present.iter().map(|n| n.id).collect();
        let stale: Vec<u32> = present
            .iter()
            .filter(|n| n.protocol == RTPROT_UPLINK && !self.registry.owns(n.id))
            .map(|n| n.id)
            .collect();
        if self.keep_previous {
            // Graceful restart: the previous run's objects stay (its kept routes use them),
            // and their ids are not handed out again meanwhile.
            self.registry.reserve_foreign(stale);
        } else {
            if !stale.is_empty() {
                info!("removing {} stale proto uplink nexthop(s)", stale.len());
            }
            self.delete_stale_objects(present, stale, plan);
        }
        // Ours that the kernel lost: nexthops first, then the groups using them (whose
        // routes went with them: replayed).
        self.restore_objects(&ids, plan);
    }

    /// Without nexthop objects: every object of ours in the kernel is stale (unless a graceful
    /// restart keeps the previous run's for now).
    pub fn drop_stale_objects(&mut self, present: &[KernelNexthop], plan: &mut Plan) {
        self.zebra_seen |= present.iter().any(|n| n.protocol == msg::RTPROT_ZEBRA);
        if self.keep_previous {
            return;
        }
        let stale: Vec<u32> = present
            .iter()
            .filter(|n| n.protocol == RTPROT_UPLINK && !self.registry.owns(n.id))
            .map(|n| n.id)
            .collect();
        self.delete_stale_objects(present, stale, plan);
    }

    fn delete_stale_objects(&self, present: &[KernelNexthop], stale: Vec<u32>, plan: &mut Plan) {
        // Groups first (a group is deleted with its routes), then their members.
        let is_group = |id: &u32| present.iter().any(|n| n.id == *id && n.group);
        let (groups, members): (Vec<u32>, Vec<u32>) = stale.into_iter().partition(is_group);
        plan.objects.extend(groups.into_iter().chain(members).map(ObjectOp::Delete));
    }

    /// Creates the objects of ours that are not among `ids` (the kernel's), and the groups
    /// using them; the routes of a group that was missing are replayed.
    fn restore_objects(&mut self, ids: &HashSet<u32>, plan: &mut Plan) {
        let missing: Vec<(u32, Hop)> =
            self.registry.nexthops().filter(|(id, _)| !ids.contains(id)).collect();
        for (id, hop) in &missing {
            plan.objects.push(ObjectOp::Nexthop { id: *id, hop: *hop });
        }
        for id in self.registry.group_ids() {
            let Some(group) = self.registry.group(id).filter(|g| g.in_kernel()) else { continue };
            let lost_member = group.members.iter().any(|h| {
                self.registry.nexthop_id(h).is_some_and(|n| missing.iter().any(|(m, _)| *m == n))
            });
            if ids.contains(&id) && !lost_member {
                continue;
            }
            let members =
                group.members.iter().filter_map(|h| self.registry.nexthop_id(h)).collect();
            plan.objects.push(ObjectOp::Group { id, members });
            if !ids.contains(&id) && group.routes() > 0 {
                self.replay_group(id);
            }
        }
    }

    /// One route of the kernel's dump: non-BGP routes feed resolution; BGP routes in our
    /// tables are counted against the groups, and the ones uplink does not want go.
    pub fn resync_route(
        &mut self,
        counts: &mut ResyncCounts,
        route: &KernelRoute,
        plan: &mut Plan,
    ) {
        if route.protocol != RTPROT_UPLINK {
            self.resolver.add_route(route);
            self.note_foreign(route);
            return;
        }
        let ours = self.instances.iter().any(|i| i.active() && i.table == Some(route.table));
        if !ours {
            return;
        }
        let key = RouteKey { table: route.table, prefix: route.prefix, metric: route.metric };
        let Some(instance) = self.instance_of_table(route.table, route.metric) else {
            self.stale_route(counts, key, usize::MAX, plan);
            return;
        };
        if self.objects {
            let group = route
                .nh_id
                .filter(|id| self.registry.group(*id).is_some_and(|g| g.instance == instance));
            match group {
                Some(id) => *counts.per_group.entry(id).or_default() += 1,
                None => self.stale_route(counts, key, instance, plan),
            }
        } else if self.registry.groups().any(|g| g.instance == instance) {
            *counts.per_instance.entry(instance).or_default() += 1;
        } else {
            // Without objects a route cannot be told from a wanted one, but an instance with
            // no routes wants none.
            self.stale_route(counts, key, instance, plan);
        }
    }

    /// Ends a resync: groups (or, without objects, instances) whose routes the kernel does
    /// not all have are replayed by their RIB.
    /// Returns how many stale routes were kept for a graceful restart.
    pub fn resync_finish(&mut self, counts: ResyncCounts) -> usize {
        if counts.stale > 0 {
            info!("removing {} stale proto uplink route(s) uplink does not want", counts.stale);
        }
        let mut failed: HashMap<u32, u32> = HashMap::new();
        for f in self.failures.values() {
            *failed.entry(f.group).or_default() += 1;
        }
        if self.objects {
            let short: Vec<u32> = self
                .registry
                .groups()
                .filter(|g| g.in_kernel())
                .filter(|g| {
                    let expected =
                        g.routes().saturating_sub(failed.get(&g.id).copied().unwrap_or(0));
                    counts.per_group.get(&g.id).copied().unwrap_or(0) < expected
                })
                .map(|g| g.id)
                .collect();
            for id in short {
                self.replay_group(id);
            }
        } else {
            for (index, inst) in self.instances.iter().enumerate() {
                if !inst.active() {
                    continue;
                }
                let expected: u32 = self
                    .registry
                    .groups()
                    .filter(|g| g.instance == index && g.in_kernel())
                    .map(|g| g.routes())
                    .sum();
                if counts.per_instance.get(&index).copied().unwrap_or(0) != expected {
                    self.ensure_all.insert(index);
                }
            }
        }
        self.resolution_dirty = true;
        counts.kept
    }

    /// A `proto uplink` route in our tables that uplink does not want: deleted, or kept while a
    /// graceful restart lasts (RFC 4724 §4.1: the previous run's forwarding state stays until
    /// the peers have sent their routes again).
    fn stale_route(
        &self,
        counts: &mut ResyncCounts,
        key: RouteKey,
        instance: usize,
        plan: &mut Plan,
    ) {
        if self.keep_previous {
            counts.kept += 1;
        } else {
            counts.stale += 1;
            plan.routes.push(route_op(key, instance, RouteAction::Delete));
        }
    }

    /// Graceful restart: resyncs keep what a previous run left (see [`Planner::stale_route`])
    /// until this is turned off at the end of the restart.
    pub fn set_keep_previous(&mut self, keep: bool) {
        self.keep_previous = keep;
    }

    pub fn keeps_previous(&self) -> bool {
        self.keep_previous
    }

    // ---- show ------------------------------------------------------------------------------

    pub fn state(&self) -> Vec<super::FibInstanceState> {
        let hop_view = |h: &Hop| FibHopView {
            gateway: h.gateway,
            interface: self
                .links
                .get(&h.ifindex)
                .map(|l| l.name.clone())
                .unwrap_or_else(|| h.ifindex.to_string()),
            nexthop_id: self.registry.nexthop_id(h).filter(|_| self.objects),
        };
        self.instances
            .iter()
            .enumerate()
            .filter(|(_, i)| !i.retired)
            .map(|(index, i)| {
                let mut groups = Vec::new();
                let mut by_set = HashMap::new();
                for g in self.registry.groups().filter(|g| g.instance == index) {
                    for set in g.live_sets() {
                        by_set.insert(Box::<[NextHop]>::from(set), groups.len());
                    }
                    groups.push(super::FibGroupView {
                        id: g.id,
                        sets: g.live_sets().map(<[NextHop]>::to_vec).collect(),
                        via: g.members.iter().map(hop_view).collect(),
                        routes: g.routes(),
                    });
                }
                let failures = self
                    .failures
                    .iter()
                    .filter(|((i, _), _)| *i == index)
                    .map(|((_, p), f)| {
                        let retry_in = f.retry_at.saturating_duration_since(self.now);
                        (
                            *p,
                            super::FibFailure {
                                error: f.error.clone(),
                                attempts: f.attempts,
                                retry_in,
                            },
                        )
                    })
                    .collect();
                let failed_deletes = self
                    .failed_deletes
                    .iter()
                    .filter(|(_, f)| f.instance == index)
                    .map(|(key, f)| super::FibFailedDelete {
                        prefix: key.prefix,
                        error: f.error.clone(),
                        attempts: f.attempts,
                        retry_in: f.retry_at.saturating_duration_since(self.now),
                    })
                    .collect();
                super::FibInstanceState {
                    vrf: i.config.vrf.clone(),
                    leaked_from: i.config.leaked_from.clone(),
                    install: i.config.install,
                    table: i.table,
                    metric: i.config.metric,
                    nexthop_objects: self.objects,
                    filling: i.filling.is_some(),
                    down: i.down.iter().copied().collect(),
                    groups,
                    by_set,
                    failures,
                    failed_deletes,
                }
            })
            .collect()
    }
}

/// A route protocol as `ip route` names it (`/etc/iproute2/rt_protos`), or its number.
fn protocol_name(protocol: u8) -> String {
    match protocol {
        2 => "kernel".into(),
        3 => "boot".into(),
        4 => "static".into(),
        12 => "bird".into(),
        16 => "dhcp".into(),
        msg::RTPROT_BGP => "bgp".into(),
        188 => "ospf".into(),
        196 => "static (FRR)".into(),
        other => other.to_string(),
    }
}

fn route_op(key: RouteKey, instance: usize, action: RouteAction) -> RouteOp {
    RouteOp { key, instance: u32::try_from(instance).unwrap_or(u32::MAX), action }
}

impl super::FibInstanceState {
    /// How a route of the RIB with `hops` stands in the kernel.
    pub fn route(&self, prefix: IpNet, hops: &[NextHop]) -> FibRouteView {
        let group = self.by_set.get(hops).and_then(|i| self.groups.get(*i));
        let failure = self.failures.get(&prefix);
        let error = failure.map(|f| f.error.clone());
        let installed =
            self.table.is_some() && !self.filling && group.is_some_and(|g| !g.via.is_empty());
        let state = match (&error, installed) {
            (Some(_), _) => "failed",
            (None, true) => "installed",
            (None, false) => "pending",
        };
        FibRouteView {
            prefix,
            next_hops: hops.iter().map(NextHop::to_string).collect(),
            via: group.map(|g| g.via.clone()).unwrap_or_default(),
            nexthop_group: group.filter(|_| self.nexthop_objects).map(|g| g.id),
            state,
            error,
            attempts: failure.map(|f| f.attempts),
            retry_in: failure.map(|f| f.retry_in),
        }
    }
}
