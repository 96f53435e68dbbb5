//! The planner against an in-memory kernel: unit tests of prefix-independent convergence and
//! property tests that any sequence of route changes, peer losses and returns, link flaps and
//! settles leaves the kernel equal to the desired state — and that no route ever forwards
//! over a hop its desired set lacks.
//!
//! `MemKernel` models what the planner relies on: a group needs existing single nexthops; a
//! deleted nexthop leaves its groups, an emptied group is deleted, and a deleted object takes
//! the routes using it along; a route to a missing object is refused.

use super::batch::{RouteBatch, RouteBatchBuilder};
use super::kernel::{KernelError, ENOENT, ESRCH};
use super::msg::{
    Hop, KernelLink, KernelNexthop, KernelRoute, RouteKey, RTN_UNICAST, RTPROT_UPLINK,
};
use super::plan::{ObjectOp, Plan, Request, RouteAction};
use super::planner::{Event, Planner, ResyncCounts};
use super::route::NextHop;
use super::FibInstanceConfig;
use ipnet::IpNet;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::{IpAddr, Ipv4Addr};
use std::time::{Duration, Instant};

#[derive(Debug, Clone, PartialEq, Eq)]
enum Target {
    Object(u32),
    Inline(Vec<Hop>),
}

#[derive(Debug, Default)]
struct MemKernel {
    nexthops: HashMap<u32, Hop>,
    groups: HashMap<u32, Vec<u32>>,
    routes: HashMap<RouteKey, Target>,
    /// Route additions, replacements and deletions (what `ip monitor route` would print).
    route_events: usize,
    /// Nexthop and group changes.
    object_events: usize,
    /// Other daemons' routes, with their protocol. A route of ours at the same key replaces
    /// one (as NLM_F_REPLACE does in the kernel); a deletion of ours never matches one.
    foreign: HashMap<RouteKey, u8>,
    /// Prefixes whose routes the kernel refuses (a fault), and whose deletion it refuses.
    refuse: BTreeSet<IpNet>,
    refuse_delete: BTreeSet<IpNet>,
}

const EINVAL: i32 = 22;

fn error(errno: i32) -> KernelError {
    KernelError { errno, message: None }
}

impl MemKernel {
    fn execute(&mut self, plan: &Plan) -> Vec<(usize, KernelError)> {
        let mut failures = Vec::new();
        for (index, request) in plan.requests().enumerate() {
            let result = match request {
                Request::Object(ObjectOp::Nexthop { id, hop }) => {
                    if self.groups.contains_key(id) {
                        Err(error(EINVAL))
                    } else {
                        self.nexthops.insert(*id, *hop);
                        self.object_events += 1;
                        Ok(())
                    }
                }
                Request::Object(ObjectOp::Group { id, members }) => {
                    if members.is_empty() || !members.iter().all(|m| self.nexthops.contains_key(m))
                    {
                        Err(error(EINVAL))
                    } else {
                        self.groups.insert(*id, members.clone());
                        self.object_events += 1;
                        Ok(())
                    }
                }
                Request::Object(ObjectOp::Delete(id)) => self.delete_object(*id),
                Request::Route(op) => match op.action {
                    RouteAction::Set(group) => {
                        let target = if plan.inline.is_empty() {
                            let exists = self.groups.contains_key(&group)
                                || self.nexthops.contains_key(&group);
                            exists.then_some(Target::Object(group))
                        } else {
                            plan.inline.get(&group).cloned().map(Target::Inline)
                        };
                        match target {
                            _ if self.refuse.contains(&op.key.prefix) => Err(error(EINVAL)),
                            Some(t) => {
                                self.foreign.remove(&op.key);
                                self.routes.insert(op.key, t);
                                self.route_events += 1;
                                Ok(())
                            }
                            None => Err(error(EINVAL)),
                        }
                    }
                    RouteAction::Delete if self.refuse_delete.contains(&op.key.prefix) => {
                        Err(error(EINVAL))
                    }
                    RouteAction::Delete => match self.routes.remove(&op.key) {
                        Some(_) => {
                            self.route_events += 1;
                            Ok(())
                        }
                        None => Err(error(ESRCH)),
                    },
                },
            };
            if let Err(e) = result {
                failures.push((index, e));
            }
        }
        failures
    }

    fn delete_object(&mut self, id: u32) -> Result<(), KernelError> {
        if self.groups.remove(&id).is_some() {
            self.object_events += 1;
            self.drop_routes_via(id);
            return Ok(());
        }
        if self.nexthops.remove(&id).is_none() {
            return Err(error(ENOENT));
        }
        self.object_events += 1;
        self.drop_routes_via(id);
        let emptied: Vec<u32> = self
            .groups
            .iter_mut()
            .filter_map(|(g, members)| {
                members.retain(|m| *m != id);
                members.is_empty().then_some(*g)
            })
            .collect();
        for g in emptied {
            self.groups.remove(&g);
            self.drop_routes_via(g);
        }
        Ok(())
    }

    /// The kernel removes routes through a deleted object without a request for each.
    fn drop_routes_via(&mut self, id: u32) {
        self.routes.retain(|_, t| *t != Target::Object(id));
    }

    /// The hops a route forwards over, sorted.
    fn forwarding(&self, key: &RouteKey) -> Option<Vec<Hop>> {
        let mut hops = match self.routes.get(key)? {
            Target::Inline(hops) => hops.clone(),
            Target::Object(id) => match self.groups.get(id) {
                Some(members) => {
                    members.iter().filter_map(|m| self.nexthops.get(m)).copied().collect()
                }
                None => self.nexthops.get(id).copied().into_iter().collect(),
            },
        };
        hops.sort();
        Some(hops)
    }

    fn dump_nexthops(&self) -> Vec<KernelNexthop> {
        let nh = |id: u32, group: bool| KernelNexthop {
            id,
            protocol: RTPROT_UPLINK,
            group,
            gateway: None,
            ifindex: None,
            members: Vec::new(),
        };
        let singles = self.nexthops.keys().map(|id| nh(*id, false));
        let groups = self.groups.keys().map(|id| nh(*id, true));
        singles.chain(groups).collect()
    }

    fn dump_routes(&self) -> Vec<KernelRoute> {
        let foreign = self.foreign.iter().map(|(key, protocol)| foreign_route(*key, *protocol));
        self.routes
            .iter()
            .map(|(key, target)| KernelRoute {
                table: key.table,
                prefix: key.prefix,
                protocol: RTPROT_UPLINK,
                route_type: RTN_UNICAST,
                metric: key.metric,
                nh_id: match target {
                    Target::Object(id) => Some(*id),
                    Target::Inline(_) => None,
                },
                hops: match target {
                    Target::Object(_) => Vec::new(),
                    Target::Inline(h) => h.iter().map(|h| (Some(h.gateway), h.ifindex)).collect(),
                },
            })
            .chain(foreign)
            .collect()
    }
}

/// Another daemon's route (a static one through a gateway).
fn foreign_route(key: RouteKey, protocol: u8) -> KernelRoute {
    KernelRoute {
        table: key.table,
        prefix: key.prefix,
        protocol,
        route_type: RTN_UNICAST,
        metric: key.metric,
        nh_id: None,
        hops: vec![(Some(IpAddr::V4(Ipv4Addr::new(10, 0, 3, 9))), 5)],
    }
}

const PEERS: u8 = 4;
const TABLE: u32 = 254;
const METRIC: u32 = 20;

fn bgp_hop(n: u8) -> NextHop {
    NextHop::V4(Ipv4Addr::new(10, 0, n, 2))
}

fn kernel_hop(n: u8) -> Hop {
    Hop { gateway: IpAddr::V4(Ipv4Addr::new(10, 0, n, 2)), ifindex: u32::from(n) + 2 }
}

fn link(n: u8, up: bool) -> KernelLink {
    KernelLink {
        index: u32::from(n) + 2,
        name: format!("up{n}"),
        up,
        vrf_table: None,
        master: None,
    }
}

fn connected(n: u8) -> KernelRoute {
    KernelRoute {
        table: TABLE,
        prefix: format!("10.0.{n}.0/24").parse().unwrap(),
        protocol: 2,
        route_type: RTN_UNICAST,
        metric: 0,
        nh_id: None,
        hops: vec![(None, u32::from(n) + 2)],
    }
}

fn prefix(i: u32) -> IpNet {
    IpNet::V4(ipnet::Ipv4Net::new(Ipv4Addr::from(0x1000_0000 + (i << 8)), 24).unwrap())
}

fn set(peers: &[u8]) -> Vec<NextHop> {
    let mut s: Vec<NextHop> = peers.iter().map(|n| bgp_hop(*n)).collect();
    s.sort();
    s.dedup();
    s
}

/// A planner, an in-memory kernel, and a model RIB (one instance: main table, metric 20)
/// that answers replays from its desired state.
struct Harness {
    planner: Planner,
    kernel: MemKernel,
    desired: BTreeMap<IpNet, Vec<NextHop>>,
    down: BTreeSet<u8>,
    links_up: [bool; PEERS as usize],
}

impl Harness {
    fn new(objects: bool) -> Harness {
        let config = FibInstanceConfig {
            vrf: String::new(),
            install: true,
            table: None,
            metric: METRIC,
            leaked_from: None,
        };
        let mut h = Harness {
            planner: Planner::new(vec![config], objects, Instant::now()),
            kernel: MemKernel::default(),
            desired: BTreeMap::new(),
            down: BTreeSet::new(),
            links_up: [true; PEERS as usize],
        };
        let plan = Plan::default();
        for n in 0..PEERS {
            h.planner.link(link(n, true));
            h.planner.kernel_event(Event::NewRoute(connected(n)));
        }
        h.round(plan);
        h
    }

    /// Finishes a plan, runs it, answers the replays it asked for, until nothing is asked.
    fn round(&mut self, mut plan: Plan) {
        for _ in 0..20 {
            self.planner.finish(&mut plan);
            let failures = self.kernel.execute(&plan);
            self.planner.record(&plan, &failures, &[]);
            let requests = self.planner.take_requests();
            if requests.is_empty() {
                return;
            }
            plan = Plan::default();
            for (source, request) in requests {
                assert_eq!(source, 0);
                let mut b = RouteBatchBuilder::new();
                for (p, hops) in &self.desired {
                    if request.scope.wants(p, hops) {
                        b.change(*p, &[], hops);
                    }
                }
                let batches = b.take();
                let last = batches.len().saturating_sub(1);
                if batches.is_empty() {
                    self.planner.replayed(request.token, &RouteBatch::default(), true, &mut plan);
                }
                for (i, batch) in batches.iter().enumerate() {
                    self.planner.replayed(request.token, batch, i == last, &mut plan);
                }
            }
        }
        panic!("replays did not converge");
    }

    fn send(&mut self, mut b: RouteBatchBuilder) {
        let mut plan = Plan::default();
        for batch in b.take() {
            self.planner.apply(0, &batch, &mut plan);
        }
        self.round(plan);
    }

    fn announce(&mut self, prefixes: impl IntoIterator<Item = IpNet>, peers: &[u8]) {
        let new = set(peers);
        assert!(
            peers.iter().all(|p| !self.down.contains(p)),
            "the RIB has no path over a lost hop"
        );
        let mut b = RouteBatchBuilder::new();
        for p in prefixes {
            let old = self.desired.get(&p).cloned().unwrap_or_default();
            b.change(p, &old, &new);
            if new.is_empty() {
                self.desired.remove(&p);
            } else {
                self.desired.insert(p, new.clone());
            }
        }
        self.send(b);
    }

    /// A session went down: the RIB says so first, then every route loses the hop.
    fn peer_down(&mut self, n: u8) {
        let mut b = RouteBatchBuilder::new();
        b.hop_down(bgp_hop(n));
        self.down.insert(n);
        let hop = bgp_hop(n);
        for (p, hops) in self.desired.iter_mut() {
            if hops.contains(&hop) {
                let old = hops.clone();
                hops.retain(|h| *h != hop);
                b.change(*p, &old, hops);
            }
        }
        self.desired.retain(|_, h| !h.is_empty());
        self.send(b);
    }

    /// The session is back: the RIB says so before the first route over it.
    fn peer_up(&mut self, n: u8, prefixes: impl IntoIterator<Item = IpNet>) {
        self.down.remove(&n);
        let mut b = RouteBatchBuilder::new();
        b.hop_up(bgp_hop(n));
        for p in prefixes {
            let old = self.desired.get(&p).cloned().unwrap_or_default();
            let mut new = old.clone();
            new.push(bgp_hop(n));
            new.sort();
            new.dedup();
            b.change(p, &old, &new);
            self.desired.insert(p, new);
        }
        self.send(b);
    }

    fn set_link(&mut self, n: u8, up: bool) {
        self.links_up[usize::from(n)] = up;
        let plan = Plan::default();
        self.planner.kernel_event(Event::Link(link(n, up)));
        self.round(plan);
    }

    fn settle(&mut self) {
        let mut plan = Plan::default();
        self.planner.settle(&mut plan);
        self.round(plan);
    }

    /// A reload switches nexthop objects on or off: the routes change form in place, from the
    /// RIB's replays, and the switch ends within the round.
    fn switch_objects(&mut self, on: bool) {
        let mut plan = Plan::default();
        let change = on != self.planner.objects();
        let started = self.planner.set_objects(on, &mut plan).unwrap();
        assert_eq!(started, change);
        self.round(plan);
        assert_eq!(self.planner.take_switch_complete(), started, "the switch ended");
        assert!(!self.planner.switching());
    }

    /// Uplink starts again over the kernel this one leaves: a new planner, with `keep` the
    /// previous run's routes kept (graceful restart); returns how many were kept.
    fn restart(self, keep: bool) -> (Harness, usize) {
        let mut h = Harness::new(self.planner.objects());
        h.kernel = self.kernel;
        h.planner.set_keep_previous(keep);
        let kept = h.resync();
        (h, kept)
    }

    /// Runs a resync the way the writer does: nexthops, then the routes streamed. Returns how
    /// many stale routes a graceful restart kept.
    fn resync(&mut self) -> usize {
        let mut plan = Plan::default();
        self.planner.resync_nexthops(&self.kernel.dump_nexthops(), &mut plan);
        let failures = self.kernel.execute(&plan);
        self.planner.record(&plan, &failures, &[]);
        let mut plan = Plan::default();
        let mut counts = ResyncCounts::default();
        for n in 0..PEERS {
            self.planner.resync_route(&mut counts, &connected(n), &mut plan);
        }
        for route in self.kernel.dump_routes() {
            self.planner.resync_route(&mut counts, &route, &mut plan);
        }
        let kept = self.planner.resync_finish(counts);
        self.round(plan);
        kept
    }

    /// Another daemon adds a route (the monitor tells the planner).
    fn add_foreign(&mut self, key: RouteKey, protocol: u8) {
        self.kernel.foreign.insert(key, protocol);
        self.planner.kernel_event(Event::NewRoute(foreign_route(key, protocol)));
        self.round(Plan::default());
    }

    fn remove_foreign(&mut self, key: RouteKey) {
        let protocol = self.kernel.foreign.remove(&key).unwrap();
        self.planner.kernel_event(Event::DelRoute(foreign_route(key, protocol)));
        self.round(Plan::default());
    }

    /// The writer's retry timer fires at `at`.
    fn retry_at(&mut self, at: Instant) -> usize {
        let mut plan = Plan::default();
        let tried = self.planner.retry_due(at, &mut plan);
        self.round(plan);
        tried
    }

    fn state_of(&self, p: IpNet) -> &'static str {
        let hops = self.desired.get(&p).cloned().unwrap_or_default();
        self.planner.state()[0].route(p, &hops).state
    }

    /// The kernel hops a desired set should forward over.
    fn expected(&self, hops: &[NextHop]) -> Vec<Hop> {
        let mut out: Vec<Hop> = (0..PEERS)
            .filter(|n| hops.contains(&bgp_hop(*n)) && self.links_up[usize::from(*n)])
            .filter(|n| !self.down.contains(n))
            .map(kernel_hop)
            .collect();
        out.sort();
        out
    }

    fn key(p: IpNet) -> RouteKey {
        RouteKey { table: TABLE, prefix: p, metric: METRIC }
    }

    /// Safety, true at all times: every kernel route is desired and forwards only over hops
    /// of its desired set (never over a lost hop or a down link).
    fn check_safe(&self) {
        for key in self.kernel.routes.keys() {
            let hops = self.desired.get(&key.prefix);
            assert!(hops.is_some(), "{} is in the kernel but not desired", key.prefix);
            let expected = self.expected(hops.unwrap());
            let got = self.kernel.forwarding(key).unwrap();
            assert!(!got.is_empty(), "{} forwards nowhere", key.prefix);
            for hop in &got {
                assert!(
                    expected.contains(hop),
                    "{} forwards over {hop:?}, not in {expected:?}",
                    key.prefix
                );
            }
        }
    }

    /// Once settled: the kernel holds exactly the desired routes with exactly their hops.
    fn check_exact(&self) {
        self.check_safe();
        for (p, hops) in &self.desired {
            let expected = self.expected(hops);
            let got = self.kernel.forwarding(&Self::key(*p)).unwrap_or_default();
            assert_eq!(got, expected, "{p} with {hops:?}");
        }
        assert_eq!(self.planner.inconsistencies(), 0);
    }
}

#[test]
fn a_lost_peer_costs_one_group_message_and_no_route_message() {
    let mut h = Harness::new(true);
    h.announce((0..1000).map(prefix), &[0, 1]);
    h.check_exact();
    assert_eq!(h.kernel.routes.len(), 1000);
    assert_eq!(h.kernel.groups.len(), 1, "one group for one set");
    let (routes, objects) = (h.kernel.route_events, h.kernel.object_events);

    h.peer_down(0);
    h.check_exact();
    assert_eq!(h.kernel.route_events - routes, 0, "no route was touched");
    // The group replaced once, and hop 0's nexthop object deleted.
    assert_eq!(h.kernel.object_events - objects, 2);

    let (routes, objects) = (h.kernel.route_events, h.kernel.object_events);
    h.peer_up(0, (0..1000).map(prefix));
    h.check_exact();
    assert_eq!(h.kernel.route_events - routes, 0, "no route was touched on the way back");
    assert!(h.kernel.object_events - objects <= 2, "hop 0's object and the group");
    assert_eq!(h.kernel.groups.len(), 1);
}

#[test]
fn the_group_is_right_before_the_withdrawals_arrive() {
    let mut h = Harness::new(true);
    h.announce((0..100).map(prefix), &[0, 1]);
    // Only the RIB's first message (hop 0 lost) has arrived.
    let mut b = RouteBatchBuilder::new();
    b.hop_down(bgp_hop(0));
    let mut plan = Plan::default();
    for batch in b.take() {
        h.planner.apply(0, &batch, &mut plan);
    }
    h.round(plan);
    for i in 0..100 {
        assert_eq!(h.kernel.forwarding(&Harness::key(prefix(i))), Some(vec![kernel_hop(1)]));
    }
}

#[test]
fn a_peer_that_was_the_only_hop_takes_its_routes_out_in_one_message() {
    let mut h = Harness::new(true);
    h.announce((0..500).map(prefix), &[2]);
    let (routes, objects) = (h.kernel.route_events, h.kernel.object_events);
    h.peer_down(2);
    h.check_exact();
    assert!(h.kernel.routes.is_empty());
    assert_eq!(h.kernel.route_events - routes, 0, "the routes left with their group");
    assert!(h.kernel.object_events - objects <= 2, "the group and its nexthop");
}

#[test]
fn routes_whose_smaller_set_has_a_group_already_move_to_it() {
    let mut h = Harness::new(true);
    h.announce((0..10).map(prefix), &[0, 1]);
    h.announce((10..20).map(prefix), &[1]);
    let routes = h.kernel.route_events;
    h.peer_down(0);
    h.check_exact();
    // Forwarding was right at once (the {0,1} group lost 0); the ten routes then joined the
    // {1} group: one message each.
    assert_eq!(h.kernel.route_events - routes, 10);
    assert_eq!(h.kernel.groups.len(), 1);
}

#[test]
fn a_partial_return_is_split_off_when_things_settle() {
    let mut h = Harness::new(true);
    h.announce((0..100).map(prefix), &[0, 1]);
    h.peer_down(0);
    // Peer 0 comes back with half of the routes: they share the {1} group for now (valid:
    // they have hop 1), with ECMP waiting for the other half.
    h.peer_up(0, (0..50).map(prefix));
    h.check_safe();
    assert!(h.planner.unsettled());
    h.settle();
    h.check_exact();
    assert_eq!(h.kernel.groups.len(), 2);
    assert!(!h.planner.unsettled());
}

#[test]
fn unreachable_groups_leave_the_kernel_and_come_back_with_a_replay() {
    let mut h = Harness::new(true);
    h.announce((0..50).map(prefix), &[3]);
    h.announce((50..60).map(prefix), &[2, 3]);
    h.set_link(3, false);
    h.check_exact();
    assert_eq!(h.kernel.routes.len(), 10, "only the routes with hop 2 stay");
    h.set_link(3, true);
    h.check_exact();
    assert_eq!(h.kernel.routes.len(), 60);
}

#[test]
fn a_route_deleted_behind_our_back_is_replayed() {
    let mut h = Harness::new(true);
    h.announce((0..5).map(prefix), &[0]);
    let key = Harness::key(prefix(3));
    let Some(Target::Object(id)) = h.kernel.routes.remove(&key) else { panic!() };
    let plan = Plan::default();
    let route = KernelRoute {
        table: TABLE,
        prefix: prefix(3),
        protocol: RTPROT_UPLINK,
        route_type: RTN_UNICAST,
        metric: METRIC,
        nh_id: Some(id),
        hops: vec![],
    };
    h.planner.kernel_event(Event::DelRoute(route));
    h.round(plan);
    h.check_exact();
}

#[test]
fn a_resync_restores_lost_routes_and_removes_stale_ones() {
    let mut h = Harness::new(true);
    h.announce((0..20).map(prefix), &[0, 1]);
    h.kernel.routes.remove(&Harness::key(prefix(7)));
    // A stale route of an earlier run, through an object that is not ours.
    h.kernel.nexthops.insert(7, kernel_hop(0));
    h.kernel.routes.insert(Harness::key(prefix(999)), Target::Object(7));
    h.resync();
    h.check_exact();
    assert!(!h.kernel.nexthops.contains_key(&7));
}

#[test]
fn without_objects_routes_carry_their_hops_and_still_converge() {
    let mut h = Harness::new(false);
    h.announce((0..30).map(prefix), &[0, 1]);
    h.check_exact();
    h.peer_down(0);
    h.check_exact();
    h.peer_up(0, (0..30).map(prefix));
    h.settle();
    h.check_exact();
    h.set_link(1, false);
    h.check_exact();
}

#[test]
fn refused_routes_are_failures_until_a_request_for_them_succeeds() {
    let mut h = Harness::new(true);
    h.announce([prefix(1)], &[0]);
    let mut plan = Plan::default();
    let mut b = RouteBatchBuilder::new();
    b.change(prefix(2), &[], &set(&[0]));
    h.desired.insert(prefix(2), set(&[0]));
    for batch in b.take() {
        h.planner.apply(0, &batch, &mut plan);
    }
    h.planner.finish(&mut plan);
    let index = plan.objects.len();
    h.planner.record(&plan, &[(index, error(EINVAL))], &[]);
    let state = h.planner.state();
    assert_eq!(state[0].route(prefix(2), &set(&[0])).state, "failed");
    assert_eq!(state[0].route(prefix(1), &set(&[0])).state, "installed");
    // The next change for it clears the failure.
    h.announce([prefix(2)], &[0, 1]);
    assert_eq!(h.planner.state()[0].route(prefix(2), &set(&[0, 1])).state, "installed");
}

#[test]
fn switching_nexthop_objects_rewrites_every_route_in_place() {
    let mut h = Harness::new(true);
    h.announce((0..100).map(prefix), &[0, 1]);
    h.announce((100..150).map(prefix), &[2]);
    h.check_exact();
    let routes = h.kernel.route_events;

    h.switch_objects(false);
    h.check_exact();
    assert!(h.kernel.groups.is_empty() && h.kernel.nexthops.is_empty(), "objects deleted");
    assert!(h.kernel.routes.values().all(|t| matches!(t, Target::Inline(_))));
    // One replacement per route, no deletion (a deletion would have lost the route here).
    assert_eq!(h.kernel.route_events - routes, 150);
    h.peer_down(0);
    h.check_exact();

    let routes = h.kernel.route_events;
    h.switch_objects(true);
    h.check_exact();
    assert!(h.kernel.routes.values().all(|t| matches!(t, Target::Object(_))));
    assert_eq!(h.kernel.route_events - routes, 150);
    // Already on: nothing to do.
    h.switch_objects(true);
    assert_eq!(h.kernel.route_events - routes, 150);
}

#[test]
fn the_route_counts_follow_the_groups() {
    let mut h = Harness::new(true);
    h.announce((0..10).map(prefix), &[0, 1]);
    h.announce((10..13).map(prefix), &[2]);
    assert_eq!(h.planner.route_counts(), vec![[13, 0, 0]]);
    // Hop 2's link goes down: its routes wait for it.
    h.set_link(2, false);
    assert_eq!(h.planner.route_counts(), vec![[10, 3, 0]]);
}

#[test]
fn a_graceful_restart_keeps_the_previous_runs_routes_until_it_is_over() {
    let mut h = Harness::new(true);
    h.announce((0..100).map(prefix), &[0, 1]);
    h.check_exact();
    let previous: BTreeSet<u32> = h.kernel.groups.keys().copied().collect();

    let (mut h, kept) = h.restart(true);
    assert_eq!(kept, 100);
    assert_eq!(h.kernel.routes.len(), 100, "the previous run's routes keep forwarding");
    // The peers send part of the table again: those routes move to the new run's group, in
    // place, and its ids are not the previous run's.
    h.announce((0..60).map(prefix), &[0, 1]);
    assert_eq!(h.kernel.routes.len(), 100);
    assert!(h.kernel.groups.keys().filter(|g| !previous.contains(g)).count() == 1);
    // A resync during the restart keeps them too.
    assert_eq!(h.resync(), 40);

    // The restart is over: what did not come back goes, with the previous run's objects.
    h.planner.set_keep_previous(false);
    assert_eq!(h.resync(), 0);
    h.check_exact();
    assert_eq!(h.kernel.routes.len(), 60);
    assert!(h.kernel.groups.keys().all(|g| !previous.contains(g)));

    // Without graceful restart, a start removes everything uplink does not want.
    let (h, kept) = h.restart(false);
    assert_eq!(kept, 0);
    assert!(h.kernel.routes.is_empty() && h.kernel.groups.is_empty());
}

#[test]
fn another_daemons_route_is_never_replaced_and_ours_lands_when_it_leaves() {
    let mut h = Harness::new(true);
    h.announce((0..3).map(prefix), &[0]);
    // A static route at our table, prefix and metric; another at the same prefix but another
    // metric does not stand in the way.
    let held = Harness::key(prefix(5));
    h.add_foreign(held, 4);
    h.add_foreign(RouteKey { metric: METRIC + 1, ..Harness::key(prefix(6)) }, 4);
    h.announce([prefix(5), prefix(6)], &[0]);
    assert_eq!(h.kernel.foreign.len(), 2, "the other daemon's routes are untouched");
    assert!(!h.kernel.routes.contains_key(&held));
    assert!(h.kernel.routes.contains_key(&Harness::key(prefix(6))));
    assert_eq!(h.state_of(prefix(5)), "failed");
    let view = h.planner.state()[0].route(prefix(5), &set(&[0]));
    assert!(view.error.as_deref().is_some_and(|e| e.contains("proto static")), "{view:?}");
    assert_eq!(h.planner.route_counts(), vec![[4, 0, 1]]);
    // A resync (or a restart) leaves it alone too, and does not write over it.
    h.resync();
    assert_eq!(h.kernel.foreign.get(&held), Some(&4));
    let retries = h.planner.retries();
    h.retry_at(Instant::now() + Duration::from_secs(2));
    assert!(h.planner.retries() > retries);
    assert_eq!(h.kernel.foreign.get(&held), Some(&4), "a retry does not replace it either");
    // It leaves: ours is written at once, without a new BGP message.
    h.remove_foreign(held);
    assert!(h.kernel.routes.contains_key(&held));
    assert_eq!(h.state_of(prefix(5)), "installed");
    h.check_exact();
    assert_eq!(h.planner.next_retry(), None);
}

#[test]
fn a_refused_route_is_tried_again_with_backoff_until_it_lands() {
    let mut h = Harness::new(true);
    let start = Instant::now();
    h.planner.set_now(start);
    h.kernel.refuse.insert(prefix(2));
    h.announce((0..4).map(prefix), &[0, 1]);
    assert_eq!(h.state_of(prefix(2)), "failed");
    assert_eq!(h.planner.next_retry(), Some(start + Duration::from_secs(1)));
    // Not yet due.
    assert_eq!(h.retry_at(start + Duration::from_millis(500)), 0);
    // Due: refused again, the wait doubles (2 s, 4 s, …) up to 30 s.
    let mut at = start + Duration::from_secs(1);
    for wait in [2, 4, 8, 16, 30, 30] {
        assert_eq!(h.retry_at(at), 1);
        assert_eq!(h.state_of(prefix(2)), "failed");
        let next = h.planner.next_retry().unwrap();
        assert_eq!(next - at, Duration::from_secs(wait));
        at = next;
    }
    let view = h.planner.state()[0].route(prefix(2), &set(&[0, 1]));
    assert_eq!(view.attempts, Some(7));
    // The fault is gone: the next retry lands, with no change from the RIB.
    h.kernel.refuse.clear();
    assert_eq!(h.retry_at(at), 1);
    assert_eq!(h.state_of(prefix(2)), "installed");
    assert_eq!(h.planner.next_retry(), None);
    h.check_exact();
    assert_eq!(h.planner.route_counts(), vec![[4, 0, 0]]);
}

#[test]
fn a_refused_deletion_is_tried_again() {
    let mut h = Harness::new(false);
    let start = Instant::now();
    h.planner.set_now(start);
    h.announce((0..3).map(prefix), &[0]);
    h.kernel.refuse_delete.insert(prefix(1));
    h.announce([prefix(1)], &[]);
    assert!(h.kernel.routes.contains_key(&Harness::key(prefix(1))), "the kernel kept it");
    let failed = &h.planner.state()[0].failed_deletes;
    assert_eq!(failed.iter().map(|f| f.prefix).collect::<Vec<_>>(), vec![prefix(1)]);
    h.kernel.refuse_delete.clear();
    assert_eq!(h.retry_at(start + Duration::from_secs(1)), 1);
    h.check_exact();
    assert!(h.planner.state()[0].failed_deletes.is_empty());
    assert_eq!(h.planner.next_retry(), None);
}

#[test]
fn a_failed_route_that_is_withdrawn_is_no_longer_tried() {
    let mut h = Harness::new(true);
    h.kernel.refuse.insert(prefix(1));
    h.announce([prefix(1)], &[0]);
    assert!(h.planner.next_retry().is_some());
    h.announce([prefix(1)], &[]);
    assert_eq!(h.planner.next_retry(), None);
    h.check_exact();
}

#[test]
fn other_daemons_nexthop_ids_are_never_taken_and_zebra_is_noticed() {
    let mut h = Harness::new(true);
    let first = super::groups::FIRST_ID;
    h.planner.kernel_event(Event::ForeignNexthop(first, 12));
    assert!(!h.planner.take_zebra_seen(), "BIRD's is not zebra's");
    h.planner.kernel_event(Event::ForeignNexthop(first + 1, super::msg::RTPROT_ZEBRA));
    assert!(h.planner.take_zebra_seen());
    assert!(!h.planner.take_zebra_seen(), "said once");
    h.announce((0..3).map(prefix), &[0, 1]);
    h.check_exact();
    let ours: Vec<u32> = h.kernel.groups.keys().chain(h.kernel.nexthops.keys()).copied().collect();
    assert!(!ours.contains(&first) && !ours.contains(&(first + 1)), "{ours:?}");
}

#[test]
fn a_lost_answer_neither_fails_a_route_nor_ends_its_failure() {
    let mut h = Harness::new(true);
    h.kernel.refuse.insert(prefix(1));
    h.announce([prefix(1)], &[0]);
    assert_eq!(h.state_of(prefix(1)), "failed");
    // The next writes of it and of another route: their answers are lost (ENOBUFS on the
    // request socket). Neither is taken as refused nor as done: the writer reads back.
    let mut plan = Plan::default();
    let mut b = RouteBatchBuilder::new();
    b.change(prefix(1), &set(&[0]), &set(&[0, 1]));
    b.change(prefix(2), &[], &set(&[0, 1]));
    h.desired.insert(prefix(1), set(&[0, 1]));
    h.desired.insert(prefix(2), set(&[0, 1]));
    for batch in b.take() {
        h.planner.apply(0, &batch, &mut plan);
    }
    h.planner.finish(&mut plan);
    let unanswered: Vec<usize> = (0..plan.len()).collect();
    h.planner.record(&plan, &[], &unanswered);
    assert_eq!(h.state_of(prefix(1)), "failed");
    assert_ne!(h.state_of(prefix(2)), "failed");
}

mod properties {
    use super::*;
    use proptest::prelude::*;

    #[derive(Debug, Clone)]
    enum Op {
        /// Prefixes `from..from+count` get a path over each peer in `peers` (a bit mask).
        Announce {
            from: u32,
            count: u32,
            peers: u8,
        },
        Withdraw {
            from: u32,
            count: u32,
        },
        PeerDown(u8),
        /// The peer is back, with routes for `from..from+count`.
        PeerUp {
            peer: u8,
            from: u32,
            count: u32,
        },
        Link {
            peer: u8,
            up: bool,
        },
        Settle,
        Resync,
        /// A reload switches nexthop objects on or off.
        Switch(bool),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            4 => (0u32..60, 1u32..30, 1u8..16).prop_map(|(from, count, peers)| Op::Announce { from, count, peers }),
            2 => (0u32..60, 1u32..30).prop_map(|(from, count)| Op::Withdraw { from, count }),
            2 => (0..PEERS).prop_map(Op::PeerDown),
            2 => (0..PEERS, 0u32..60, 0u32..40).prop_map(|(peer, from, count)| Op::PeerUp { peer, from, count }),
            1 => (0..PEERS, any::<bool>()).prop_map(|(peer, up)| Op::Link { peer, up }),
            1 => Just(Op::Settle),
            1 => Just(Op::Resync),
            1 => any::<bool>().prop_map(Op::Switch),
        ]
    }

    fn run(objects: bool, ops: Vec<Op>) {
        let mut h = Harness::new(objects);
        for op in ops {
            match op {
                Op::Announce { from, count, peers } => {
                    let up: Vec<u8> = (0..PEERS)
                        .filter(|n| peers & (1 << n) != 0 && !h.down.contains(n))
                        .collect();
                    if !up.is_empty() {
                        h.announce((from..from + count).map(prefix), &up);
                    }
                }
                Op::Withdraw { from, count } => h.announce((from..from + count).map(prefix), &[]),
                Op::PeerDown(n) => {
                    if !h.down.contains(&n) {
                        h.peer_down(n);
                    }
                }
                Op::PeerUp { peer, from, count } => {
                    if h.down.contains(&peer) {
                        h.peer_up(peer, (from..from + count).map(prefix));
                    }
                }
                Op::Link { peer, up } => h.set_link(peer, up),
                Op::Settle => h.settle(),
                Op::Resync => {
                    h.resync();
                }
                Op::Switch(on) => h.switch_objects(on),
            }
            h.check_safe();
        }
        h.settle();
        h.check_exact();
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

        #[test]
        fn any_sequence_leaves_the_kernel_equal_to_the_desired_state(ops in prop::collection::vec(op(), 1..40)) {
            run(true, ops);
        }

        #[test]
        fn the_same_without_nexthop_objects(ops in prop::collection::vec(op(), 1..25)) {
            run(false, ops);
        }
    }
}
