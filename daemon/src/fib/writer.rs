//! The FIB writer: the only code in uplink that programs kernel routes (DESIGN.md). It runs on
//! its own thread, takes route changes from the RIB tasks and kernel notifications from the
//! monitor thread through one bounded channel, turns each drained batch into one ordered plan
//! (nexthop objects and groups, then routes, then what became unused) and sends it batched.

use super::groups::{GroupKey, Registry};
use super::kernel::{self, Kernel, KernelError};
use super::msg::{self, Hop, KernelLink, KernelRoute, RouteKey, RouteTarget, RTPROT_BGP};
use super::resolve::Resolver;
use super::route::{NextHop, RouteChange};
use super::stats::{FibStats, RouteCounts, RouteState};
use super::{FibHopView, FibInstanceConfig, FibInstanceView, FibRouteView};
use crate::config::vrf_display_name;
use ipnet::IpNet;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use tokio::sync::{mpsc, oneshot};
use tracing::{debug, info, warn};

/// Route requests from which a plan is sent in scattered order (see `scatter`).
const SCATTER_FROM: usize = 1024;

/// A well-mixed 64-bit key of a prefix (splitmix64 finalizer), to order requests away from
/// address order.
fn scatter(prefix: &IpNet) -> u64 {
    let bits = match prefix.network() {
        std::net::IpAddr::V4(a) => u64::from(u32::from(a)),
        std::net::IpAddr::V6(a) => {
            let v = u128::from(a);
            (v as u64) ^ ((v >> 64) as u64)
        }
    };
    let mut z = (bits ^ u64::from(prefix.prefix_len())).wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Commands drained per batch before the plan is sent.
const MAX_COMMANDS_PER_BATCH: usize = 256;

pub(super) enum Command {
    Changes {
        instance: usize,
        changes: Vec<RouteChange>,
    },
    Kernel(Vec<Event>),
    /// The monitor lost notifications: resynchronise with a dump.
    Overflow,
    Show(oneshot::Sender<Vec<FibInstanceView>>),
    /// Answered once everything sent before it is in the kernel.
    Flush(oneshot::Sender<()>),
    /// A reload: the instances after it, index for index (`Fib::configure`). Those beyond the
    /// writer's list are new; those newly retired leave the kernel.
    Configure(Vec<super::FibSlot>),
    /// A reload changed `[fib] nexthop_objects` (`Fib::set_nexthop_objects`).
    NexthopObjects(bool, oneshot::Sender<Result<(), String>>),
    /// Our graceful restart is over: what the previous run left and nobody wants now goes.
    EndRestart,
    /// Every route leaves the kernel (shutdown without graceful restart); answered when done.
    Clear(oneshot::Sender<()>),
}

enum Reply {
    Show(oneshot::Sender<Vec<FibInstanceView>>),
    Flush(oneshot::Sender<()>),
}

/// A kernel notification that is not our own echo.
#[derive(Debug)]
pub(super) enum Event {
    NewRoute(KernelRoute),
    DelRoute(KernelRoute),
    Link(KernelLink),
    DelLink(u32),
    Address,
    DelNexthop(u32),
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum State {
    Installed,
    /// Waiting: no next hop is reachable, the VRF table is unknown, or a request is in flight.
    Pending,
    Failed(String),
}

impl State {
    fn kind(&self) -> RouteState {
        match self {
            State::Installed => RouteState::Installed,
            State::Pending => RouteState::Pending,
            State::Failed(_) => RouteState::Failed,
        }
    }
}

/// Keeps an instance's route counts (the metrics' view, `stats.rs`) true as one of its routes
/// appears (`from` is `None`), changes state, or goes (`to` is `None`).
fn tally(instances: &[Instance], instance: usize, from: Option<&State>, to: Option<&State>) {
    if let Some(i) = instances.get(instance) {
        i.counts.moved(from.map(State::kind), to.map(State::kind));
    }
}

/// The VRF of an instance as logs name it (`VRF=` in the journal): "default" for the default.
fn vrf_of(instances: &[Instance], instance: usize) -> &str {
    instances.get(instance).map_or("", |i| vrf_display_name(&i.config.vrf))
}

/// Whether the kernel refused a request (deleting what is already gone is no refusal).
fn refused(op: &Op, result: &Result<(), KernelError>) -> bool {
    match (op, result) {
        (_, Ok(())) => false,
        (Op::DelRoute(_) | Op::DelNexthop(_), Err(e)) => {
            e.errno != kernel::ESRCH && e.errno != kernel::ENOENT
        }
        (_, Err(_)) => true,
    }
}

#[derive(Debug)]
struct Route {
    group: u32,
    state: State,
}

struct Instance {
    config: FibInstanceConfig,
    /// Removed by a reload: its routes are gone and it takes no more (indexes stay stable).
    retired: bool,
    /// Where routes go; `None` while the VRF device is missing.
    table: Option<u32>,
    /// Where next hops are resolved: the main table for the default VRF, else the VRF's.
    lookup: Option<u32>,
    /// How many of its routes are installed, pending and failed.
    counts: Arc<RouteCounts>,
}

impl Instance {
    fn new(config: FibInstanceConfig, counts: Arc<RouteCounts>) -> Self {
        // The default VRF's table is main; another VRF's is its device's, found later.
        let main_if_default = |vrf: &str| vrf.is_empty().then_some(msg::RT_TABLE_MAIN);
        let lookup = main_if_default(config.resolve_vrf());
        let table = config.table.or(main_if_default(&config.vrf));
        Instance { config, table, lookup, retired: false, counts }
    }

    fn route_key(&self, prefix: IpNet) -> Option<RouteKey> {
        Some(RouteKey { table: self.table?, prefix, metric: self.config.metric })
    }
}

enum Op {
    Nexthop { id: u32, hop: Hop },
    Group { id: u32, members: Vec<u32> },
    DelNexthop(u32),
    Route { key: RouteKey, target: RouteTarget, subject: (usize, IpNet) },
    DelRoute(RouteKey),
}

/// Messages in the order the kernel must see them.
#[derive(Default)]
struct Plan {
    objects: Vec<Op>,
    routes: Vec<Op>,
    cleanup: Vec<Op>,
}

impl Plan {
    fn is_empty(&self) -> bool {
        self.objects.is_empty() && self.routes.is_empty() && self.cleanup.is_empty()
    }
}

pub(super) struct Writer {
    kernel: Kernel,
    instances: Vec<Instance>,
    routes: HashMap<(usize, IpNet), Route>,
    registry: Registry,
    resolver: Resolver,
    links: HashMap<u32, KernelLink>,
    /// Whether the kernel takes nexthop objects; else routes carry their hops (RTA_MULTIPATH).
    objects: bool,
    /// Whether the kernel has nexthop objects at all (its last nexthop dump worked).
    kernel_objects: bool,
    resolution_dirty: bool,
    resync: bool,
    stats: Arc<FibStats>,
    /// Graceful restart (RFC 4724 §4.1): the previous run's routes and nexthops that nobody
    /// wants yet are kept (not deleted by a reconcile) until the restart is over.
    keep_previous: bool,
}

fn normalize(mut hops: Vec<NextHop>) -> Vec<NextHop> {
    hops.sort_unstable();
    hops.dedup();
    hops
}

impl Writer {
    pub(super) fn new(
        kernel: Kernel,
        configs: Vec<FibInstanceConfig>,
        objects: bool,
        keep_previous: bool,
        stats: Arc<FibStats>,
    ) -> Self {
        Writer {
            kernel,
            instances: configs
                .into_iter()
                .map(|c| Instance::new(c, stats.add_instance()))
                .collect(),
            routes: HashMap::new(),
            registry: Registry::new(),
            resolver: Resolver::default(),
            links: HashMap::new(),
            objects,
            kernel_objects: true,
            resolution_dirty: false,
            resync: false,
            stats,
            keep_previous,
        }
    }

    pub(super) fn run(
        mut self,
        mut rx: mpsc::Receiver<Command>,
        started: std::sync::mpsc::SyncSender<bool>,
    ) {
        // Startup: remove every `proto bgp` route and nexthop uplink does not want — which,
        // before any session is up, is all of them — unless graceful restart keeps them.
        let kept = self.reconcile(true);
        let _ = started.send(kept > 0);
        while let Some(first) = rx.blocking_recv() {
            let mut plan = Plan::default();
            let mut shows = Vec::new();
            let mut end_restart = false;
            let mut next = Some(first);
            let mut drained = 0;
            while let Some(command) = next.take() {
                match command {
                    Command::Changes { instance, changes } => {
                        self.apply_changes(instance, changes, &mut plan)
                    }
                    Command::Kernel(events) => {
                        for event in events {
                            self.kernel_event(event, &mut plan);
                        }
                    }
                    Command::Overflow => self.resync = true,
                    Command::Show(reply) => shows.push(Reply::Show(reply)),
                    Command::Flush(reply) => shows.push(Reply::Flush(reply)),
                    Command::Configure(slots) => self.configure(slots, &mut plan),
                    Command::NexthopObjects(on, reply) => {
                        // What came before goes out in the old form.
                        self.execute(std::mem::take(&mut plan));
                        let _ = reply.send(self.set_objects(on));
                    }
                    Command::EndRestart => end_restart = true,
                    Command::Clear(reply) => {
                        for index in 0..self.instances.len() {
                            self.clear(index, &mut plan);
                        }
                        shows.push(Reply::Flush(reply));
                    }
                }
                drained += 1;
                if drained < MAX_COMMANDS_PER_BATCH {
                    next = rx.try_recv().ok();
                }
            }
            if self.resolution_dirty {
                self.resolution_dirty = false;
                let ids: Vec<u32> = self.registry.groups().map(|g| g.id).collect();
                for id in ids {
                    self.refresh_group(id, &mut plan);
                }
            }
            self.execute(plan);
            for reply in shows {
                match reply {
                    Reply::Show(reply) => {
                        let _ = reply.send(self.views());
                    }
                    Reply::Flush(reply) => {
                        let _ = reply.send(());
                    }
                }
            }
            if end_restart && self.keep_previous {
                self.keep_previous = false;
                info!(
                    "graceful restart over: removing what the previous run left and nobody wants"
                );
                self.reconcile(false);
            }
            // Notifications lost in a burst (mostly our own echoes) are made up for with one
            // dump once the burst is over, not one per overflow.
            if self.resync && rx.is_empty() {
                self.resync = false;
                info!("kernel notifications were lost: resynchronising with a dump");
                FibStats::count(&self.stats.resyncs, 1);
                self.reconcile(false);
            }
        }
    }

    /// Applies one RIB batch. When every route of a group moves to the same new set of next
    /// hops (a peer went down or came up), the group is re-keyed and replaced in place instead
    /// of re-pointing each route.
    fn apply_changes(&mut self, instance: usize, changes: Vec<RouteChange>, plan: &mut Plan) {
        // The VRFs importing this instance's routes get them too (`Command::Changes` comes
        // from the source instance's RIB task only). A retired source's last withdrawals do
        // not reach them: its replacement feeds them now.
        let source = self.instances.get(instance).filter(|i| !i.retired);
        if let Some(source) = source.map(|i| i.config.vrf.clone()) {
            for leak in self.leaks_from(&source) {
                self.apply_to(leak, changes.clone(), plan);
            }
        }
        self.apply_to(instance, changes, plan);
    }

    /// The active leak instances fed by the router of `vrf`.
    fn leaks_from(&self, vrf: &str) -> Vec<usize> {
        (0..self.instances.len())
            .filter(|i| {
                self.instances
                    .get(*i)
                    .is_some_and(|x| !x.retired && x.config.leaked_from.as_deref() == Some(vrf))
            })
            .collect()
    }

    /// Takes every route of an instance out of the kernel.
    fn clear(&mut self, index: usize, plan: &mut Plan) {
        let prefixes: Vec<IpNet> =
            self.routes.keys().filter(|(i, _)| *i == index).map(|(_, p)| *p).collect();
        for prefix in prefixes {
            self.apply_one(index, prefix, Vec::new(), plan);
        }
    }

    fn apply_to(&mut self, instance: usize, changes: Vec<RouteChange>, plan: &mut Plan) {
        if self.instances.get(instance).is_none_or(|i| !i.config.install || i.retired) {
            return;
        }
        let changes: Vec<(IpNet, Vec<NextHop>)> =
            changes.into_iter().map(|c| (c.prefix, normalize(c.next_hops))).collect();
        // Which groups lose all of their routes to one same new set?
        let mut moves: HashMap<u32, (usize, Option<Vec<NextHop>>, bool)> = HashMap::new();
        for (prefix, hops) in &changes {
            let Some(route) = self.routes.get(&(instance, *prefix)) else { continue };
            let entry = moves.entry(route.group).or_insert((0, None, true));
            entry.0 += 1;
            match &entry.1 {
                None => entry.1 = Some(hops.clone()),
                Some(target) if target != hops => entry.2 = false,
                Some(_) => {}
            }
        }
        for (id, (count, target, same)) in moves {
            let Some(target) = target.filter(|t| same && !t.is_empty()) else { continue };
            let Some(group) = self.registry.group(id) else { continue };
            if group.routes == count && group.key.next_hops != target {
                let key = GroupKey { instance, next_hops: target };
                if self.registry.rekey(id, key) {
                    debug!(
                        group = id,
                        "every route of the group moved together: replacing it in place"
                    );
                    self.refresh_group(id, plan);
                }
            }
        }
        for (prefix, hops) in changes {
            self.apply_one(instance, prefix, hops, plan);
        }
    }

    fn apply_one(&mut self, instance: usize, prefix: IpNet, hops: Vec<NextHop>, plan: &mut Plan) {
        let Some(inst) = self.instances.get(instance) else { return };
        let route_key = inst.route_key(prefix);
        let slot = (instance, prefix);
        if hops.is_empty() {
            if let Some(old) = self.routes.remove(&slot) {
                tally(&self.instances, instance, Some(&old.state), None);
                if let (Some(key), State::Installed | State::Pending) = (route_key, &old.state) {
                    if self.group_has_members(old.group) {
                        plan.routes.push(Op::DelRoute(key));
                    }
                }
                self.release(old.group, plan);
            }
            return;
        }
        let key = GroupKey { instance, next_hops: hops };
        let old_group = self.routes.get(&slot).map(|r| r.group);
        if let Some(old) = old_group {
            if self.registry.group(old).is_some_and(|g| g.key == key) {
                return; // Same set (or the group was re-keyed): the kernel is already right.
            }
        }
        let (id, created) = self.registry.acquire(&key);
        if created {
            self.refresh_group(id, plan);
        }
        let state = match (route_key, self.target(id)) {
            (Some(route_key), Some(target)) => {
                plan.routes.push(Op::Route { key: route_key, target, subject: slot });
                State::Pending
            }
            (route_key, _) => {
                // Unreachable now: take the old route out of the kernel.
                if let (Some(route_key), Some(old)) = (route_key, old_group) {
                    if self.group_has_members(old) {
                        plan.routes.push(Op::DelRoute(route_key));
                    }
                }
                State::Pending
            }
        };
        let old = self.routes.insert(slot, Route { group: id, state });
        tally(&self.instances, instance, old.as_ref().map(|r| &r.state), Some(&State::Pending));
        if let Some(old) = old_group {
            self.release(old, plan);
        }
    }

    /// A reload's instances: retires those that left (their routes leave the kernel), adds
    /// the new ones, and fills a new leak with the routes its source already has.
    fn configure(&mut self, slots: Vec<super::FibSlot>, plan: &mut Plan) {
        for (index, slot) in slots.iter().enumerate() {
            match self.instances.get(index) {
                Some(inst) if slot.retired && !inst.retired => {
                    // A router's leaks go too; its replacement (if any) fills them again.
                    let leaks = match &inst.config.leaked_from {
                        None => self.leaks_from(&inst.config.vrf.clone()),
                        Some(_) => Vec::new(),
                    };
                    for target in leaks.into_iter().chain([index]) {
                        self.clear(target, plan);
                    }
                    if let Some(inst) = self.instances.get_mut(index) {
                        inst.retired = true;
                    }
                    info!(vrf = vrf_display_name(&slot.config.vrf), leaked_from = ?slot.config.leaked_from, "FIB instance retired by a reload");
                }
                Some(_) => {}
                None => {
                    let counts = self.stats.add_instance();
                    self.instances.push(Instance::new(slot.config.clone(), counts));
                    self.adopt_vrf_tables(index, plan);
                    self.fill_leak(index, plan);
                    info!(vrf = vrf_display_name(&slot.config.vrf), leaked_from = ?slot.config.leaked_from, "FIB instance added by a reload");
                }
            }
        }
    }

    /// A new instance's tables, from the VRF devices already known.
    fn adopt_vrf_tables(&mut self, index: usize, plan: &mut Plan) {
        let Some(inst) = self.instances.get(index) else { return };
        let names = [inst.config.vrf.clone(), inst.config.resolve_vrf().to_string()];
        let links: Vec<KernelLink> = self
            .links
            .values()
            .filter(|l| l.vrf_table.is_some() && names.contains(&l.name))
            .cloned()
            .collect();
        for link in links {
            self.link(link, plan);
        }
    }

    /// A leak added by a reload starts with what its source has installed so far.
    fn fill_leak(&mut self, index: usize, plan: &mut Plan) {
        let Some(from) = self.instances.get(index).and_then(|i| i.config.leaked_from.clone())
        else {
            return;
        };
        let source = self
            .instances
            .iter()
            .position(|i| !i.retired && i.config.leaked_from.is_none() && i.config.vrf == from);
        let Some(source) = source else { return };
        let changes: Vec<RouteChange> = self
            .routes
            .iter()
            .filter(|((i, _), _)| *i == source)
            .filter_map(|((_, prefix), route)| {
                let group = self.registry.group(route.group)?;
                Some(RouteChange { prefix: *prefix, next_hops: group.key.next_hops.clone() })
            })
            .collect();
        self.apply_to(index, changes, plan);
    }

    fn group_has_members(&self, id: u32) -> bool {
        self.registry.group(id).is_some_and(|g| !g.members.is_empty())
    }

    /// What a route of group `id` points at; `None` when no next hop is reachable.
    fn target(&self, id: u32) -> Option<RouteTarget> {
        let group = self.registry.group(id)?;
        if group.members.is_empty() {
            None
        } else if self.objects {
            Some(RouteTarget::Object(id))
        } else {
            Some(RouteTarget::Inline(group.members.clone()))
        }
    }

    fn release(&mut self, id: u32, plan: &mut Plan) {
        if let Some((group, unused)) = self.registry.release(id) {
            if self.objects {
                if !group.members.is_empty() {
                    plan.cleanup.push(Op::DelNexthop(group.id));
                }
                plan.cleanup.extend(unused.into_iter().map(Op::DelNexthop));
            }
        }
    }

    /// Re-resolves a group's next hops and replaces it in the kernel when its members changed;
    /// its routes leave the kernel when none is reachable and come back when one is.
    fn refresh_group(&mut self, id: u32, plan: &mut Plan) {
        let Some(group) = self.registry.group(id) else { return };
        let instance = group.key.instance;
        let lookup = self.instances.get(instance).and_then(|i| i.lookup);
        let hops: Vec<Hop> = match lookup {
            Some(table) => {
                group.key.next_hops.iter().flat_map(|nh| self.resolver.resolve(table, nh)).collect()
            }
            None => Vec::new(),
        };
        let Some(change) = self.registry.set_members(id, hops) else { return };
        let now_empty = change.member_ids.is_empty();
        if self.objects {
            for (nh_id, hop) in &change.created {
                plan.objects.push(Op::Nexthop { id: *nh_id, hop: *hop });
            }
            if now_empty {
                plan.cleanup.push(Op::DelNexthop(id));
            } else {
                plan.objects.push(Op::Group { id, members: change.member_ids.clone() });
            }
            plan.cleanup.extend(change.unused.iter().map(|n| Op::DelNexthop(*n)));
        }
        // Routes follow when the group appears or disappears, or always without objects.
        if now_empty || change.was_empty || !self.objects {
            self.rewrite_routes_of(id, now_empty, plan);
        }
    }

    fn rewrite_routes_of(&mut self, id: u32, remove: bool, plan: &mut Plan) {
        let target = self.target(id);
        for ((instance, prefix), route) in self.routes.iter_mut().filter(|(_, r)| r.group == id) {
            let Some(key) = self.instances.get(*instance).and_then(|i| i.route_key(*prefix)) else {
                continue;
            };
            match (&target, remove) {
                (Some(target), false) => {
                    plan.routes.push(Op::Route {
                        key,
                        target: target.clone(),
                        subject: (*instance, *prefix),
                    });
                }
                _ => {
                    if route.state == State::Installed {
                        plan.routes.push(Op::DelRoute(key));
                    }
                }
            }
            tally(&self.instances, *instance, Some(&route.state), Some(&State::Pending));
            route.state = State::Pending;
        }
    }

    fn instance_of_table(&self, table: u32, metric: u32) -> Option<usize> {
        self.instances.iter().position(|i| {
            i.config.install && !i.retired && i.table == Some(table) && i.config.metric == metric
        })
    }

    fn kernel_event(&mut self, event: Event, plan: &mut Plan) {
        match event {
            Event::NewRoute(route) => {
                if self.resolver.add_route(&route) {
                    self.resolution_dirty = true;
                }
            }
            Event::DelRoute(route) if route.protocol == RTPROT_BGP => {
                // Someone deleted one of our routes: put it back.
                let Some(instance) = self.instance_of_table(route.table, route.metric) else {
                    return;
                };
                let slot = (instance, route.prefix);
                let Some(entry) = self.routes.get(&slot) else { return };
                if entry.state != State::Installed {
                    return;
                }
                let group = entry.group;
                if let (Some(key), Some(target)) = (
                    self.instances.get(instance).and_then(|i| i.route_key(route.prefix)),
                    self.target(group),
                ) {
                    info!(vrf = vrf_of(&self.instances, instance), prefix = %route.prefix, table = route.table, "route deleted behind uplink's back: restoring it");
                    plan.routes.push(Op::Route { key, target, subject: slot });
                }
            }
            Event::DelRoute(route) => {
                if self.resolver.remove_route(&route) {
                    self.resolution_dirty = true;
                }
            }
            Event::Link(link) => self.link(link, plan),
            Event::DelLink(index) => {
                self.links.remove(&index);
                self.resolver.remove_link(index);
                self.resolution_dirty = true;
            }
            Event::Address => self.resolution_dirty = true,
            Event::DelNexthop(id) => {
                if self.registry.owns(id) {
                    warn!(
                        id,
                        "a nexthop object of uplink's was deleted from outside: resynchronising"
                    );
                    self.resync = true;
                }
            }
        }
    }

    fn link(&mut self, link: KernelLink, plan: &mut Plan) {
        if self.resolver.set_link(link.index, link.up) {
            self.resolution_dirty = true;
        }
        if let Some(table) = link.vrf_table {
            let indexes: Vec<usize> = (0..self.instances.len())
                .filter(|i| {
                    self.instances.get(*i).is_some_and(|x| {
                        x.config.vrf == link.name || x.config.resolve_vrf() == link.name
                    })
                })
                .collect();
            for index in indexes {
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
                }
                self.resolution_dirty = true;
                // Routes waiting for the table: write them now.
                let groups: HashSet<u32> = self
                    .routes
                    .iter()
                    .filter(|((i, _), _)| *i == index)
                    .map(|(_, r)| r.group)
                    .collect();
                for group in groups {
                    self.rewrite_routes_of(group, false, plan);
                }
            }
        }
        self.links.insert(link.index, link);
    }

    /// Sends a plan and records each route's outcome.
    fn execute(&mut self, plan: Plan) {
        if plan.is_empty() {
            return;
        }
        let mut routes = plan.routes;
        if routes.len() >= SCATTER_FROM {
            // The kernel's FIB trie resizes a node at a time: adding or deleting neighbouring
            // prefixes in address order makes it grow and halve the same nodes over and over.
            // A scattered order is measurably faster (bench/fib.sh). The sort is stable and
            // keyed by prefix, so two requests for one prefix keep their order.
            routes.sort_by_cached_key(|op| match op {
                Op::Route { key, .. } | Op::DelRoute(key) => scatter(&key.prefix),
                _ => 0,
            });
        }
        let ops: Vec<Op> = plan.objects.into_iter().chain(routes).chain(plan.cleanup).collect();
        let results = self.kernel.execute(ops.len(), |index, seq, buf| {
            let Some(op) = ops.get(index) else { return };
            match op {
                Op::Nexthop { id, hop } => msg::new_nexthop(buf, seq, *id, hop),
                Op::Group { id, members } => msg::new_group(buf, seq, *id, members),
                Op::DelNexthop(id) => msg::del_nexthop(buf, seq, *id),
                Op::Route { key, target, .. } => msg::new_route(buf, seq, key, target),
                Op::DelRoute(key) => msg::del_route(buf, seq, key),
            }
        });
        FibStats::count(&self.stats.kernel_requests, ops.len());
        let mut failures = 0usize;
        for (op, result) in ops.iter().zip(results) {
            if refused(op, &result) {
                FibStats::count(&self.stats.kernel_errors, 1);
            }
            match (op, result) {
                (Op::Route { subject, .. }, result) => {
                    let Some(route) = self.routes.get_mut(subject) else { continue };
                    let state = match result {
                        Ok(()) => State::Installed,
                        Err(e) => {
                            failures += 1;
                            if failures <= 3 {
                                let vrf = vrf_of(&self.instances, subject.0);
                                warn!(vrf, prefix = %subject.1, "kernel refused the route: {e}");
                            }
                            State::Failed(e.to_string())
                        }
                    };
                    tally(&self.instances, subject.0, Some(&route.state), Some(&state));
                    route.state = state;
                }
                (_, Ok(())) => {}
                // Already gone: the goal is reached.
                (Op::DelRoute(_) | Op::DelNexthop(_), Err(KernelError { errno, .. }))
                    if errno == kernel::ESRCH || errno == kernel::ENOENT => {}
                (Op::DelRoute(key), Err(e)) => {
                    warn!(prefix = %key.prefix, "cannot delete route: {e}")
                }
                (Op::Nexthop { id, hop }, Err(e)) => {
                    warn!(id, gateway = %hop.gateway, ifindex = hop.ifindex, "kernel refused the nexthop: {e}")
                }
                (Op::Group { id, .. }, Err(e)) => {
                    warn!(id, "kernel refused the nexthop group: {e}")
                }
                (Op::DelNexthop(id), Err(e)) => warn!(id, "cannot delete nexthop: {e}"),
            }
        }
        if failures > 3 {
            warn!("kernel refused {failures} routes in one batch (first three logged)");
        }
    }

    /// Reads links, routes and nexthops from the kernel and makes it hold exactly what uplink
    /// wants: stale `proto bgp` routes and nexthops in its tables go (or, during a graceful
    /// restart, stay: their number is returned), missing ones come back.
    fn reconcile(&mut self, startup: bool) -> usize {
        let mut links = Vec::new();
        if let Err(e) = self.kernel.dump(msg::RTM_GETLINK, msg::AF_UNSPEC, |m| {
            if let Some(link) = msg::parse_link(m.payload) {
                links.push(link);
            }
        }) {
            warn!("cannot read the interfaces: {e}");
        }
        self.resolver.clear();
        self.links.clear();
        let mut plan = Plan::default();
        for link in links {
            self.link(link, &mut plan);
        }
        // Routes of ours in the kernel: (table, prefix, metric) -> nexthop id.
        let our_tables: HashSet<u32> = self.instances.iter().filter_map(|i| i.table).collect();
        let mut kernel_bgp: HashMap<RouteKey, Option<u32>> = HashMap::new();
        for family in [msg::AF_INET, msg::AF_INET6] {
            let resolver = &mut self.resolver;
            if let Err(e) = self.kernel.dump(msg::RTM_GETROUTE, family, |m| {
                let Some(route) = msg::parse_route(m.payload) else { return };
                if route.protocol == RTPROT_BGP {
                    if our_tables.contains(&route.table) {
                        let key = RouteKey {
                            table: route.table,
                            prefix: route.prefix,
                            metric: route.metric,
                        };
                        kernel_bgp.insert(key, route.nh_id);
                    }
                } else {
                    resolver.add_route(&route);
                }
            }) {
                warn!("cannot read the routes: {e}");
            }
        }
        let mut kernel_nexthops = HashSet::new();
        let mut stale_nexthops = Vec::new();
        let mut foreign = Vec::new();
        match self.kernel.dump(msg::RTM_GETNEXTHOP, msg::AF_UNSPEC, |m| {
            if let Some(nh) = msg::parse_nexthop(m.payload) {
                if nh.protocol == RTPROT_BGP {
                    kernel_nexthops.insert(nh.id);
                } else {
                    foreign.push(nh.id);
                }
            }
        }) {
            Ok(()) => self.kernel_objects = true,
            Err(e) if startup => {
                warn!(
                    "the kernel has no nexthop objects ({e}): installing routes with RTA_MULTIPATH"
                );
                self.objects = false;
                self.kernel_objects = false;
            }
            Err(e) => warn!("cannot read the nexthops: {e}"),
        }
        self.registry.reserve_foreign(foreign);
        for id in &kernel_nexthops {
            if !self.registry.owns(*id) {
                stale_nexthops.push(*id);
            }
        }
        // Groups: re-resolve, and re-create what the kernel lost.
        let ids: Vec<u32> = self.registry.groups().map(|g| g.id).collect();
        for id in &ids {
            self.refresh_group(*id, &mut plan);
        }
        if self.objects {
            let nexthops: Vec<(u32, Hop)> = self.registry.nexthops().collect();
            for (id, hop) in nexthops {
                if !kernel_nexthops.contains(&id) {
                    plan.objects.push(Op::Nexthop { id, hop });
                }
            }
            for id in &ids {
                if kernel_nexthops.contains(id) {
                    continue;
                }
                if let Some(group) = self.registry.group(*id).filter(|g| !g.members.is_empty()) {
                    let members =
                        group.members.iter().filter_map(|h| self.registry.nexthop_id(h)).collect();
                    plan.objects.push(Op::Group { id: *id, members });
                }
            }
        }
        // Routes: what should be there, against what is.
        let mut wanted = HashSet::new();
        for ((instance, prefix), route) in self.routes.iter_mut() {
            let Some(key) = self.instances.get(*instance).and_then(|i| i.route_key(*prefix)) else {
                continue;
            };
            let Some(group) = self.registry.group(route.group).filter(|g| !g.members.is_empty())
            else {
                continue;
            };
            wanted.insert(key);
            let target = if self.objects {
                RouteTarget::Object(group.id)
            } else {
                RouteTarget::Inline(group.members.clone())
            };
            let present = kernel_bgp.get(&key);
            let right = match (&target, present) {
                (RouteTarget::Object(id), Some(Some(nh))) => id == nh,
                (RouteTarget::Inline(_), Some(_)) => true,
                _ => false,
            };
            if !right {
                plan.routes.push(Op::Route { key, target, subject: (*instance, *prefix) });
                tally(&self.instances, *instance, Some(&route.state), Some(&State::Pending));
                route.state = State::Pending;
            }
        }
        let stale_routes: Vec<RouteKey> =
            kernel_bgp.keys().filter(|k| !wanted.contains(*k)).copied().collect();
        let kept = if self.keep_previous {
            // RFC 4724 §4.1: the previous run's forwarding state stays until the restart is
            // over; its nexthop ids are not handed out again meanwhile.
            if startup && !stale_routes.is_empty() {
                info!(
                    "graceful restart: keeping {} route(s) of the previous run until the peers' \
                     End-of-RIB",
                    stale_routes.len()
                );
            }
            self.registry.reserve_foreign(stale_nexthops.iter().copied());
            stale_routes.len()
        } else {
            if !stale_routes.is_empty() {
                info!(
                    "removing {} stale proto bgp route(s) uplink does not want",
                    stale_routes.len()
                );
            }
            plan.routes.extend(stale_routes.into_iter().map(Op::DelRoute));
            if !stale_nexthops.is_empty() {
                info!("removing {} stale proto bgp nexthop(s)", stale_nexthops.len());
            }
            // Order does not matter here: deleting a member takes it out of its groups, and an
            // already-gone object is not an error (ENOENT is ignored).
            plan.cleanup.extend(stale_nexthops.into_iter().map(Op::DelNexthop));
            0
        };
        self.resolution_dirty = false;
        self.execute(plan);
        kept
    }

    /// Switches between nexthop objects and inline hops with every route staying in the
    /// kernel: each is replaced in place (RTM_NEWROUTE with NLM_F_REPLACE) by its other form,
    /// and the objects are created first or deleted after.
    fn set_objects(&mut self, on: bool) -> Result<(), String> {
        if on == self.objects {
            return Ok(());
        }
        if on && !self.kernel_objects {
            return Err("the kernel has no nexthop objects; routes keep their hops inline".into());
        }
        self.objects = on;
        if on {
            // Creates every group's objects, then points each route at its group.
            info!("nexthop objects on: routes move onto nexthop groups");
            self.reconcile(false);
            return Ok(());
        }
        info!("nexthop objects off: routes carry their hops inline (RTA_MULTIPATH)");
        let mut plan = Plan::default();
        for ((instance, prefix), route) in self.routes.iter_mut() {
            let Some(key) = self.instances.get(*instance).and_then(|i| i.route_key(*prefix)) else {
                continue;
            };
            let Some(group) = self.registry.group(route.group).filter(|g| !g.members.is_empty())
            else {
                continue;
            };
            let target = RouteTarget::Inline(group.members.clone());
            plan.routes.push(Op::Route { key, target, subject: (*instance, *prefix) });
            route.state = State::Pending;
        }
        // Groups before their members.
        plan.cleanup.extend(self.registry.groups().map(|g| Op::DelNexthop(g.id)));
        plan.cleanup.extend(self.registry.nexthops().map(|(id, _)| Op::DelNexthop(id)));
        self.execute(plan);
        Ok(())
    }

    fn views(&self) -> Vec<FibInstanceView> {
        // Retired instances keep their index but show nothing (and hold no routes).
        let mut out: Vec<FibInstanceView> = self
            .instances
            .iter()
            .map(|i| FibInstanceView {
                vrf: i.config.vrf.clone(),
                leaked_from: i.config.leaked_from.clone(),
                install: i.config.install,
                table: i.table,
                metric: i.config.metric,
                nexthop_objects: self.objects,
                routes: Vec::new(),
            })
            .collect();
        for ((instance, prefix), route) in &self.routes {
            let Some(view) = out.get_mut(*instance) else { continue };
            let group = self.registry.group(route.group);
            let (state, error) = match &route.state {
                State::Installed => ("installed", None),
                State::Pending => ("pending", None),
                State::Failed(e) => ("failed", Some(e.clone())),
            };
            view.routes.push(FibRouteView {
                prefix: *prefix,
                next_hops: group
                    .map(|g| g.key.next_hops.iter().map(NextHop::to_string).collect())
                    .unwrap_or_default(),
                via: group
                    .map(|g| {
                        g.members
                            .iter()
                            .map(|h| FibHopView {
                                gateway: h.gateway,
                                interface: self
                                    .links
                                    .get(&h.ifindex)
                                    .map(|l| l.name.clone())
                                    .unwrap_or_else(|| h.ifindex.to_string()),
                                nexthop_id: self.registry.nexthop_id(h).filter(|_| self.objects),
                            })
                            .collect()
                    })
                    .unwrap_or_default(),
                nexthop_group: self.objects.then_some(route.group),
                state,
                error,
            });
        }
        for view in &mut out {
            view.routes.sort_by_key(|r| r.prefix);
        }
        out.into_iter().zip(&self.instances).filter(|(_, i)| !i.retired).map(|(v, _)| v).collect()
    }
}

/// Turns a datagram of notifications into events, dropping the echoes of our own requests.
pub(super) fn events(datagram: &[u8], own_pid: u32) -> Vec<Event> {
    let mut out = Vec::new();
    for m in msg::messages(datagram) {
        if m.pid == own_pid && own_pid != 0 {
            continue;
        }
        match m.kind {
            msg::RTM_NEWROUTE => {
                if let Some(route) = msg::parse_route(m.payload) {
                    // Someone else's BGP route does not change resolution.
                    if route.protocol != RTPROT_BGP {
                        out.push(Event::NewRoute(route));
                    }
                }
            }
            msg::RTM_DELROUTE => {
                if let Some(route) = msg::parse_route(m.payload) {
                    out.push(Event::DelRoute(route));
                }
            }
            msg::RTM_NEWLINK => {
                if let Some(link) = msg::parse_link(m.payload) {
                    out.push(Event::Link(link));
                }
            }
            msg::RTM_DELLINK => {
                if let Some(link) = msg::parse_link(m.payload) {
                    out.push(Event::DelLink(link.index));
                }
            }
            msg::RTM_NEWADDR | msg::RTM_DELADDR => out.push(Event::Address),
            msg::RTM_DELNEXTHOP => {
                if let Some(nh) = msg::parse_nexthop(m.payload) {
                    out.push(Event::DelNexthop(nh.id));
                }
            }
            _ => {}
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fib::msg::Hop;

    fn route_notification(buf: &mut Vec<u8>, kind: u16, pid: u32, protocol: u8) {
        // A notification as the kernel sends it: our own request bytes with the sender's pid.
        let mut request = Vec::new();
        let key = RouteKey { table: 254, prefix: "10.1.0.0/24".parse().unwrap(), metric: 20 };
        let target =
            RouteTarget::Inline(vec![Hop { gateway: "10.0.0.1".parse().unwrap(), ifindex: 2 }]);
        if kind == msg::RTM_NEWROUTE {
            msg::new_route(&mut request, 1, &key, &target);
        } else {
            msg::del_route(&mut request, 1, &key);
        }
        request[12..16].copy_from_slice(&pid.to_ne_bytes());
        request[16 + 5] = protocol;
        buf.extend_from_slice(&request);
    }

    #[test]
    fn own_echoes_are_dropped_and_others_kept() {
        let mut buf = Vec::new();
        route_notification(&mut buf, msg::RTM_NEWROUTE, 4242, RTPROT_BGP);
        route_notification(&mut buf, msg::RTM_DELROUTE, 4242, RTPROT_BGP);
        route_notification(&mut buf, msg::RTM_DELROUTE, 77, RTPROT_BGP);
        route_notification(&mut buf, msg::RTM_NEWROUTE, 77, RTPROT_BGP);
        route_notification(&mut buf, msg::RTM_NEWROUTE, 77, 4);
        let events = events(&buf, 4242);
        assert_eq!(events.len(), 2, "{events:?}");
        // Someone else deleted a BGP route: reported, so it can be restored.
        assert!(matches!(&events[0], Event::DelRoute(r) if r.protocol == RTPROT_BGP));
        // Someone else's BGP route does not matter; a static one feeds resolution.
        assert!(matches!(&events[1], Event::NewRoute(r) if r.protocol == 4));
    }

    #[test]
    fn scatter_spreads_neighbouring_prefixes_and_is_stable_per_prefix() {
        let a: IpNet = "16.0.0.0/24".parse().unwrap();
        let b: IpNet = "16.0.1.0/24".parse().unwrap();
        assert_eq!(scatter(&a), scatter(&a));
        assert_ne!(scatter(&a), scatter(&b));
        assert_ne!(scatter(&a), scatter(&"16.0.0.0/23".parse().unwrap()));
        // Sorted by the key, 1,000 consecutive /24s rarely stay next to their neighbours.
        let mut prefixes: Vec<u32> = (0..1000).collect();
        prefixes.sort_by_cached_key(|i| {
            scatter(
                &IpNet::new(std::net::Ipv4Addr::from(0x1000_0000 + i * 256).into(), 24).unwrap(),
            )
        });
        let adjacent = prefixes.windows(2).filter(|w| w[0].abs_diff(w[1]) == 1).count();
        assert!(adjacent < 20, "{adjacent} neighbours stayed adjacent");
    }

    #[test]
    fn next_hops_are_normalized_into_one_group_key() {
        let a = NextHop::V4("10.0.0.2".parse().unwrap());
        let b = NextHop::V4("10.0.0.1".parse().unwrap());
        assert_eq!(normalize(vec![a, b, a]), vec![b, a]);
    }
}
