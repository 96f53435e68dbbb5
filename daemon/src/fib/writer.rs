//! The FIB writer thread: takes route batches from the RIB tasks and kernel notifications from
//! the monitor thread through one bounded channel, has the planner turn each drained round into
//! one ordered plan, sends it (the executor: `kernel.rs`, many requests per `sendmsg`, ACKs
//! matched by sequence number), and hands the planner's replay requests to the RIB tasks.

use super::batch::RouteBatch;
use super::kernel::Kernel;
use super::msg::{self, RouteKey, RouteTarget, RTPROT_UPLINK};
use super::plan::{ObjectOp, Plan, Request, RouteAction};
use super::planner::{Event, Planner, ResyncCounts};
use super::stats::{FibStats, RouteCounts};
use super::{FibInstanceState, FibSlot};
use crate::config::FibConfig;
use ipnet::IpNet;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, oneshot};
use tracing::{error, info, warn};

/// Route requests from which a plan is sent in scattered order (see `scatter`).
const SCATTER_FROM: usize = 1024;

/// Commands drained into one plan at most, and route requests a plan is closed at: a plan is
/// sent whole, so a bound keeps the writer's memory and its latency to a `flush` small.
const MAX_COMMANDS_PER_ROUND: usize = 256;
const MAX_ROUTES_PER_ROUND: usize = 64 * 1024;

/// How long changes must be quiet before groups that serve more than one next-hop set are
/// split (`Planner::settle`): long enough that a peer re-sending its table is not split
/// half-way, short enough that ECMP for routes whose peer came back with only part of its
/// table is not held back for long.
const SETTLE_AFTER: Duration = Duration::from_secs(3);

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

pub(super) enum Command {
    /// A batch from the RIB of `instance`.
    Routes {
        instance: usize,
        batch: RouteBatch,
    },
    /// Part of a RIB's answer to a replay request.
    Replay {
        token: u64,
        batch: RouteBatch,
        done: bool,
    },
    Kernel(Vec<Event>),
    /// The monitor lost notifications: resynchronise with a dump.
    Overflow,
    Show(oneshot::Sender<Vec<FibInstanceState>>),
    /// Answered once everything sent before it is in the kernel.
    Flush(oneshot::Sender<()>),
    /// A reload: the instances after it, index for index (`Fib::configure`). Those beyond the
    /// writer's list are new; those newly retired leave the kernel.
    Configure(Vec<FibSlot>),
    /// A reload changed `[fib] nexthop_objects` (`Fib::set_nexthop_objects`).
    NexthopObjects(bool, oneshot::Sender<Result<(), String>>),
    /// Our graceful restart is over: what the previous run left and nobody wants now goes.
    EndRestart,
    /// Every route leaves the kernel (shutdown without graceful restart); answered when done.
    Clear(oneshot::Sender<()>),
}

enum Reply {
    Show(oneshot::Sender<Vec<FibInstanceState>>),
    Flush(oneshot::Sender<()>),
}

pub(super) struct Writer {
    kernel: Kernel,
    planner: Planner,
    /// Where to post each instance's replay requests.
    slots: Vec<FibSlot>,
    resync: bool,
    /// Leave the kernel's nexthop compatibility mode as it is.
    keep_compat_mode: bool,
    stats: Arc<FibStats>,
    /// Route counts per instance, index for index with `slots` (the metrics' view).
    counts: Vec<Arc<RouteCounts>>,
    /// The reload waiting for a switch of nexthop objects to end.
    switch_reply: Option<oneshot::Sender<Result<(), String>>>,
}

impl Writer {
    /// With `keep_previous` (graceful restart, RFC 4724 §4.1) the previous run's routes and
    /// nexthops stay in the kernel until [`Command::EndRestart`].
    pub(super) fn new(
        kernel: Kernel,
        slots: Vec<FibSlot>,
        settings: &FibConfig,
        keep_previous: bool,
        stats: Arc<FibStats>,
    ) -> Self {
        let configs = slots.iter().map(|s| s.config.clone()).collect();
        let mut planner = Planner::new(configs, settings.nexthop_objects, Instant::now());
        planner.set_keep_previous(keep_previous);
        let keep_compat_mode = settings.nexthop_compat_mode;
        let counts = slots.iter().map(|_| stats.add_instance()).collect();
        Writer {
            kernel,
            planner,
            slots,
            resync: false,
            keep_compat_mode,
            stats,
            counts,
            switch_reply: None,
        }
    }

    /// Runs until the channel closes. `started` hears, after the startup reconcile, whether a
    /// previous run's routes were kept.
    pub(super) fn run(
        mut self,
        mut rx: mpsc::Receiver<Command>,
        started: std::sync::mpsc::SyncSender<bool>,
    ) {
        // A runtime of its own, for the channel and the settle timer only.
        let runtime = match tokio::runtime::Builder::new_current_thread().enable_time().build() {
            Ok(runtime) => runtime,
            Err(e) => {
                error!("cannot start the FIB writer's timer: {e}");
                return;
            }
        };
        // Startup: remove every `proto uplink` route and nexthop uplink does not want — which,
        // before any session is up, is all of them — unless graceful restart keeps them.
        let kept = self.reconcile(true);
        if kept > 0 {
            info!(
                "graceful restart: keeping {kept} route(s) of the previous run until the peers' \
                 End-of-RIB"
            );
        }
        let _ = started.send(kept > 0);
        // When the last command came: groups are settled once changes have been quiet.
        let mut last_command = Instant::now();
        loop {
            let settle_at = self
                .planner
                .unsettled()
                .then(|| last_command.checked_add(SETTLE_AFTER).unwrap_or(last_command));
            // Failed writes are tried again when their backoff runs out, commands or not.
            let wake_at = settle_at.into_iter().chain(self.planner.next_retry()).min();
            let first = match wake_at {
                Some(at) => {
                    let at = tokio::time::Instant::from_std(at);
                    match runtime.block_on(async { tokio::time::timeout_at(at, rx.recv()).await }) {
                        Ok(Some(command)) => Some(command),
                        Ok(None) => return,
                        Err(_) => None,
                    }
                }
                None => match runtime.block_on(rx.recv()) {
                    Some(command) => Some(command),
                    None => return,
                },
            };
            let now = Instant::now();
            self.planner.set_now(now);
            let Some(first) = first else {
                let mut plan = Plan::default();
                if settle_at.is_some_and(|at| at <= now) {
                    self.planner.settle(&mut plan);
                }
                self.retry(now, &mut plan);
                self.finish_round(plan, Vec::new(), Vec::new());
                self.resync_if_wanted(&rx);
                continue;
            };
            last_command = now;
            let mut plan = Plan::default();
            let mut replies = Vec::new();
            let mut purges = Vec::new();
            let mut end_restart = false;
            let mut next = Some(first);
            let mut drained = 0;
            while let Some(command) = next.take() {
                let mut urgent = false;
                match command {
                    Command::Routes { instance, batch } => {
                        // A lost next hop: its groups go out now, not after a full round.
                        urgent = !batch.hops_down().is_empty();
                        self.planner.apply(instance, &batch, &mut plan)
                    }
                    Command::Replay { token, batch, done } => {
                        self.planner.replayed(token, &batch, done, &mut plan)
                    }
                    Command::Kernel(events) => {
                        for event in events {
                            self.planner.kernel_event(event);
                        }
                    }
                    Command::Overflow => self.resync = true,
                    Command::Show(reply) => replies.push(Reply::Show(reply)),
                    Command::Flush(reply) => replies.push(Reply::Flush(reply)),
                    Command::Configure(slots) => {
                        purges.extend(self.planner.configure(&slots, &mut plan));
                        while self.counts.len() < slots.len() {
                            self.counts.push(self.stats.add_instance());
                        }
                        self.slots = slots;
                    }
                    Command::NexthopObjects(on, reply) => {
                        match self.planner.set_objects(on, &mut plan) {
                            Ok(true) => {
                                if let Some(earlier) = self.switch_reply.replace(reply) {
                                    let _ =
                                        earlier.send(Err("superseded by a later reload".into()));
                                }
                            }
                            Ok(false) if self.planner.switching() => {
                                // Back to the form being left while switching: the switch goes on.
                                let _ = reply
                                    .send(Err("a switch of nexthop objects is under way".into()));
                            }
                            Ok(false) => {
                                let _ = reply.send(Ok(()));
                            }
                            Err(e) => {
                                let _ = reply.send(Err(e));
                            }
                        }
                    }
                    Command::EndRestart => end_restart = true,
                    Command::Clear(reply) => {
                        for index in 0..self.slots.len() {
                            purges.extend(self.planner.clear(index, &mut plan));
                        }
                        replies.push(Reply::Flush(reply));
                    }
                }
                drained += 1;
                if !urgent
                    && drained < MAX_COMMANDS_PER_ROUND
                    && plan.routes.len() < MAX_ROUTES_PER_ROUND
                {
                    next = rx.try_recv().ok();
                }
            }
            self.retry(now, &mut plan);
            self.finish_round(plan, replies, purges);
            if self.planner.take_zebra_seen() {
                self.leave_objects_to_zebra();
            }
            if end_restart && self.planner.keeps_previous() {
                self.planner.set_keep_previous(false);
                info!(
                    "graceful restart over: removing what the previous run left and nobody wants"
                );
                self.reconcile(false);
            }
            self.resync_if_wanted(&rx);
        }
    }

    /// Lost notifications, unanswered requests and refused objects are made up for with one
    /// dump once a burst is over, not one per event.
    fn resync_if_wanted(&mut self, rx: &mpsc::Receiver<Command>) {
        if self.resync && rx.is_empty() {
            self.resync = false;
            info!("resynchronising with the kernel (lost notifications or answers, or refused objects)");
            FibStats::count(&self.stats.resyncs, 1);
            self.reconcile(false);
        }
    }

    /// zebra runs on the node (`Planner::take_zebra_seen`): routes carry their hops inline
    /// from now on, switched in place like a reload's `nexthop_objects = false`.
    fn leave_objects_to_zebra(&mut self) {
        if !self.planner.objects() {
            return;
        }
        warn!(
            "zebra (FRR) runs on this node: it takes other programs' nexthop objects for its own \
             and puts back any change to them, so uplink installs its routes with their next \
             hops inline (as with nexthop_objects = false)"
        );
        let mut plan = Plan::default();
        if let Err(e) = self.planner.set_objects(false, &mut plan) {
            warn!("cannot switch nexthop objects off: {e}");
        }
        self.finish_round(plan, Vec::new(), Vec::new());
    }

    /// Plans the writes whose retry is due (`Planner::retry_due`) and counts them.
    fn retry(&mut self, now: Instant, plan: &mut Plan) {
        let tried = self.planner.retry_due(now, plan);
        if tried > 0 {
            FibStats::count(&self.stats.retries, tried);
            info!("trying {tried} failed kernel write(s) again");
        }
    }

    /// Sends a round's plan, posts the replays it asked for and answers `show` and `flush`.
    fn finish_round(&mut self, mut plan: Plan, replies: Vec<Reply>, purges: Vec<(u32, u32)>) {
        self.planner.finish(&mut plan);
        self.execute(&mut plan);
        for (table, metric) in purges {
            self.purge(table, metric);
        }
        for (source, request) in self.planner.take_requests() {
            match self.slots.get(source) {
                Some(slot) => slot.replay.post(request),
                None => {
                    warn!(instance = source, "a replay for an instance the writer does not know")
                }
            }
        }
        if self.planner.take_resync_wanted() {
            self.resync = true;
        }
        if self.planner.take_switch_complete() {
            if let Some(reply) = self.switch_reply.take() {
                let _ = reply.send(Ok(()));
            }
        }
        for (counts, [installed, pending, failed]) in
            self.counts.iter().zip(self.planner.route_counts())
        {
            counts.set(installed, pending, failed);
        }
        for reply in replies {
            match reply {
                Reply::Show(reply) => {
                    let _ = reply.send(self.planner.state());
                }
                Reply::Flush(reply) => {
                    let _ = reply.send(());
                }
            }
        }
    }

    /// Sends a plan and tells the planner what the kernel refused.
    fn execute(&mut self, plan: &mut Plan) {
        if plan.is_empty() {
            return;
        }
        if plan.routes.len() >= SCATTER_FROM {
            // The kernel's FIB trie resizes a node at a time: adding or deleting neighbouring
            // prefixes in address order makes it grow and halve the same nodes over and over.
            // A scattered order is measurably faster (bench/fib.sh). The sort is stable and
            // keyed by prefix, so two requests for one prefix keep their order.
            plan.routes.sort_by_cached_key(|op| scatter(&op.key.prefix));
        }
        let plan_ref: &Plan = plan;
        let outcome = self.kernel.execute(plan_ref.len(), |index, seq, buf| {
            encode(plan_ref, index, seq, buf);
        });
        FibStats::count(&self.stats.kernel_requests, plan.len());
        let failures = &outcome.failures;
        let refusals = failures.iter().filter(|(index, e)| refused(plan, *index, e)).count();
        FibStats::count(&self.stats.kernel_errors, refusals);
        if !outcome.unanswered.is_empty() {
            // The answers were lost (ENOBUFS on our socket), not the requests: the kernel may
            // well have applied them. What it holds is read back with a resync, which deletes
            // what uplink does not want and writes what is missing.
            warn!(
                "{} kernel answers were lost: reading back what the kernel holds",
                outcome.unanswered.len()
            );
            self.resync = true;
        }
        self.planner.record(plan, failures, &outcome.unanswered);
    }

    /// Reads links, nexthops and routes from the kernel and makes it hold exactly what uplink
    /// wants: stale `proto uplink` routes and nexthops in its tables go, missing ones come back.
    /// The routes are streamed against the planner's counts, never held. Returns how many
    /// stale routes a graceful restart kept.
    fn reconcile(&mut self, startup: bool) -> usize {
        let mut links = Vec::new();
        if let Err(e) = self.kernel.dump(msg::RTM_GETLINK, msg::AF_UNSPEC, |m| {
            if let Some(link) = msg::parse_link(m.payload) {
                links.push(link);
            }
        }) {
            warn!("cannot read the interfaces: {e}");
        }
        self.planner.forget_kernel_view();
        for link in links {
            self.planner.link(link);
        }
        let mut nexthops = Vec::new();
        match self.kernel.dump(msg::RTM_GETNEXTHOP, msg::AF_UNSPEC, |m| {
            if let Some(nh) = msg::parse_nexthop(m.payload) {
                nexthops.push(nh);
            }
        }) {
            Ok(()) => {}
            Err(e) if startup => {
                warn!(
                    "the kernel has no nexthop objects ({e}): installing routes with RTA_MULTIPATH"
                );
                self.planner.without_objects();
            }
            Err(e) => warn!("cannot read the nexthops: {e}"),
        }
        if nexthops.iter().any(|n| n.protocol == msg::RTPROT_ZEBRA) {
            // Before nexthop compatibility mode is turned off: zebra relies on it.
            self.leave_objects_to_zebra();
        }
        if startup && self.planner.objects() && !self.keep_compat_mode {
            match super::kernel::disable_nexthop_compat_mode() {
                Ok(true) => info!("net.ipv4.nexthop_compat_mode set to 0: replacing a nexthop group no longer notifies every route using it"),
                Ok(false) => {}
                Err(e) => warn!("cannot turn net.ipv4.nexthop_compat_mode off ({e}): every group change will notify each of its routes"),
            }
        }
        let mut plan = Plan::default();
        if self.planner.objects() {
            // Stale objects go first: their routes leave with them.
            self.planner.resync_nexthops(&nexthops, &mut plan);
        } else {
            // Routes carry their hops inline; objects of ours left by an earlier run (or by
            // this one before it switched) go.
            self.planner.drop_stale_objects(&nexthops, &mut plan);
        }
        self.execute(&mut plan);
        let mut counts = ResyncCounts::default();
        let mut plan = Plan::default();
        for family in [msg::AF_INET, msg::AF_INET6] {
            let planner = &mut self.planner;
            if let Err(e) = self.kernel.dump(msg::RTM_GETROUTE, family, |m| {
                if let Some(route) = msg::parse_route(m.payload) {
                    planner.resync_route(&mut counts, &route, &mut plan);
                }
            }) {
                warn!("cannot read the routes: {e}");
            }
        }
        let kept = self.planner.resync_finish(counts);
        self.finish_round(plan, Vec::new(), Vec::new());
        kept
    }

    /// Deletes every `proto uplink` route of `table` at `metric` (a retired instance whose
    /// routes carry their hops inline, so they did not leave with a group).
    fn purge(&mut self, table: u32, metric: u32) {
        let mut plan = Plan::default();
        for family in [msg::AF_INET, msg::AF_INET6] {
            let routes = &mut plan.routes;
            let _ = self.kernel.dump(msg::RTM_GETROUTE, family, |m| {
                let Some(r) = msg::parse_route(m.payload) else { return };
                if r.protocol == RTPROT_UPLINK && r.table == table && r.metric == metric {
                    let key = RouteKey { table, prefix: r.prefix, metric };
                    routes.push(super::plan::RouteOp {
                        key,
                        instance: u32::MAX,
                        action: RouteAction::Delete,
                    });
                }
            });
        }
        self.execute(&mut plan);
    }
}

/// Whether the kernel refused request `index` of `plan` (the metrics' error count): deleting
/// what is already gone is no refusal.
fn refused(plan: &Plan, index: usize, error: &super::kernel::KernelError) -> bool {
    let gone = error.errno == super::kernel::ENOENT || error.errno == super::kernel::ESRCH;
    let deletion = match plan.request(index) {
        Some(Request::Object(ObjectOp::Delete(_))) => true,
        Some(Request::Route(op)) => op.action == RouteAction::Delete,
        _ => false,
    };
    !(deletion && gone)
}

/// Appends request `index` of `plan` to `buf`.
fn encode(plan: &Plan, index: usize, seq: u32, buf: &mut Vec<u8>) {
    match plan.request(index) {
        Some(Request::Object(ObjectOp::Nexthop { id, hop })) => {
            msg::new_nexthop(buf, seq, *id, hop)
        }
        Some(Request::Object(ObjectOp::Group { id, members })) => {
            msg::new_group(buf, seq, *id, members)
        }
        Some(Request::Object(ObjectOp::Delete(id))) => msg::del_nexthop(buf, seq, *id),
        Some(Request::Route(op)) => match op.action {
            RouteAction::Set(group) => {
                let target = match plan.inline.get(&group) {
                    Some(hops) => RouteTarget::Inline(hops),
                    None => RouteTarget::Object(group),
                };
                msg::new_route(buf, seq, &op.key, target)
            }
            RouteAction::Delete => msg::del_route(buf, seq, &op.key),
        },
        None => {}
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
                    if route.protocol != RTPROT_UPLINK {
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
            msg::RTM_NEWNEXTHOP => {
                if let Some(nh) = msg::parse_nexthop(m.payload) {
                    if nh.protocol != RTPROT_UPLINK {
                        out.push(Event::ForeignNexthop(nh.id, nh.protocol));
                    }
                }
            }
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
        let hops = [Hop { gateway: "10.0.0.1".parse().unwrap(), ifindex: 2 }];
        if kind == msg::RTM_NEWROUTE {
            msg::new_route(&mut request, 1, &key, RouteTarget::Inline(&hops));
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
        route_notification(&mut buf, msg::RTM_NEWROUTE, 4242, RTPROT_UPLINK);
        route_notification(&mut buf, msg::RTM_DELROUTE, 4242, RTPROT_UPLINK);
        route_notification(&mut buf, msg::RTM_DELROUTE, 77, RTPROT_UPLINK);
        route_notification(&mut buf, msg::RTM_NEWROUTE, 77, RTPROT_UPLINK);
        route_notification(&mut buf, msg::RTM_NEWROUTE, 77, 4);
        route_notification(&mut buf, msg::RTM_NEWROUTE, 77, msg::RTPROT_BGP);
        let events = events(&buf, 4242);
        assert_eq!(events.len(), 3, "{events:?}");
        // Someone else deleted one of our routes: reported, so it can be restored.
        assert!(matches!(&events[0], Event::DelRoute(r) if r.protocol == RTPROT_UPLINK));
        // A route with our protocol from another process does not matter; a static one feeds
        // resolution, and another daemon's (zebra's BGP) is one uplink must not write over.
        assert!(matches!(&events[1], Event::NewRoute(r) if r.protocol == 4));
        assert!(matches!(&events[2], Event::NewRoute(r) if r.protocol == msg::RTPROT_BGP));
    }

    #[test]
    fn other_daemons_nexthop_objects_are_reported() {
        let hop = Hop { gateway: "10.0.0.1".parse().unwrap(), ifindex: 2 };
        let mut buf = Vec::new();
        msg::new_nexthop(&mut buf, 1, 7, &hop);
        buf[12..16].copy_from_slice(&77u32.to_ne_bytes());
        let ours = buf.clone();
        buf[16 + 2] = 11; // zebra's
        let mut both = ours;
        both.extend_from_slice(&buf);
        let events = events(&both, 4242);
        assert_eq!(events.len(), 1, "{events:?}");
        assert!(matches!(&events[0], Event::ForeignNexthop(7, 11)));
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
}
