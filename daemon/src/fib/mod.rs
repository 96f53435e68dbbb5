//! The FIB writer: the only code in uplink that programs kernel routes (DESIGN.md).
//!
//! Each routing instance's RIB task sends compact batches of route changes through a bounded
//! channel ([`FibSender`]); the writer thread plans them into kernel requests (`planner`, pure
//! and tested against an in-memory kernel in `model`), and sends them batched, many per
//! `sendmsg`, with ACKs matched by sequence number (`kernel`). ECMP goes through kernel nexthop
//! objects and groups, one per next-hop set and replaced in place; a next hop the RIB loses is
//! taken out of every group first, one message per group whatever the number of routes. Next
//! hops are resolved against the kernel's own routes (`resolve`), and the writer reconciles
//! with the kernel: at startup it removes `proto uplink` routes and nexthops uplink does not
//! want (its own protocol, `msg::RTPROT_UPLINK`: another daemon's are never touched), and it
//! restores routes deleted behind its back. A monitor thread feeds it link, address, route and
//! nexthop notifications, minus our echoes. Refused writes are tried again with a backoff
//! (`Planner::retry_due`).
//!
//! The writer holds no copy of the routes: the RIB is the desired state. It counts routes per
//! next-hop set, and asks a RIB to replay routes when it must write some it was not just told
//! about (`replay`).
//!
//! Modules: `batch` (what a RIB sends), `msg` (message layouts), `kernel` (sockets, batching,
//! ACKs), `groups` (nexthop objects and groups, counted), `resolve` (next-hop reachability),
//! `plan` and `planner` (decisions), `writer` (the thread), `stats` (its counters, read by
//! the metrics endpoint without asking the writer).

pub mod batch;
pub mod groups;
pub mod kernel;
#[cfg(test)]
mod model;
pub mod msg;
pub mod plan;
pub mod planner;
pub mod replay;
pub mod resolve;
pub mod route;
pub mod stats;
mod writer;

use crate::config::{FibConfig, Router};
pub use batch::{RouteBatch, RouteBatchBuilder};
use ipnet::IpNet;
use replay::ReplaySlot;
pub use replay::{ReplayRequest, ReplayScope};
pub use route::NextHop;
use serde::Serialize;
use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, RwLock};
use tokio::sync::{mpsc, oneshot};
use tracing::{error, warn};
use writer::{Command, Writer};

/// Depth of the writer's channel, in batches: the RIB tasks wait when the kernel is behind.
const CHANNEL_DEPTH: usize = 64;

/// How long a reload waits for the routes to change form (`Fib::set_nexthop_objects`).
const SWITCH_LIMIT: std::time::Duration = std::time::Duration::from_secs(60);

/// What the writer needs to know of one routing instance (`[[bgp.routers]]`), or of one VRF
/// leak (routes learned in `leaked_from` installed into `vrf`'s table).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FibInstanceConfig {
    /// "" for the default VRF. Routes go into its table.
    pub vrf: String,
    pub install: bool,
    /// Overrides the table: main for the default VRF, else the VRF device's table.
    pub table: Option<u32>,
    pub metric: u32,
    /// For a leak: the VRF the routes are learned in, where their next hops are resolved (so
    /// they leave through that VRF's interfaces, as FRR's `import vrf` installs them).
    pub leaked_from: Option<String>,
}

impl FibInstanceConfig {
    pub fn of(router: &Router) -> Self {
        Self {
            vrf: router.vrf.clone(),
            install: router.install,
            table: router.table,
            metric: router.metric,
            leaked_from: None,
        }
    }

    /// The VRF whose table resolves next hops.
    pub fn resolve_vrf(&self) -> &str {
        self.leaked_from.as_deref().unwrap_or(&self.vrf)
    }
}

/// The writer's instances for `routers` and the VRF leaks their `imports` ask for.
///
/// A leak installs the routes learned in the source VRF into the importing VRF's table (its
/// router's `table` when it has one) at the importing router's metric plus one, plus the
/// source's position among its imports: the kernel prefers the VRF's own BGP routes, and one
/// prefix leaked from two VRFs does not overwrite itself. VRFs that only a route advertisement
/// names (`target_vrf = "default"`, no router there) import with the defaults.
pub fn instances_for(
    routers: &[Router],
    imports: &std::collections::BTreeMap<String, std::collections::BTreeSet<String>>,
) -> Vec<FibInstanceConfig> {
    let mut out: Vec<FibInstanceConfig> = routers.iter().map(FibInstanceConfig::of).collect();
    for (vrf, sources) in imports {
        let router = routers.iter().find(|r| &r.vrf == vrf);
        if router.is_some_and(|r| !r.install) {
            continue;
        }
        for (position, from) in sources.iter().filter(|from| *from != vrf).enumerate() {
            let base = router.map_or(crate::config::DEFAULT_METRIC, |r| r.metric);
            let offset = u32::try_from(position).unwrap_or(u32::MAX).saturating_add(1);
            out.push(FibInstanceConfig {
                vrf: vrf.clone(),
                install: true,
                table: router.and_then(|r| r.table),
                metric: base.saturating_add(offset),
                leaked_from: Some(from.clone()),
            });
        }
    }
    out
}

/// One of the writer's instances. A reload retires instances rather than removing them, so
/// the index each RIB task's [`FibSender`] holds stays valid.
#[derive(Debug, Clone)]
pub struct FibSlot {
    pub config: FibInstanceConfig,
    pub retired: bool,
    /// Where the writer asks the instance's RIB task for replays.
    replay: Arc<ReplaySlot>,
}

impl FibSlot {
    fn new(config: FibInstanceConfig) -> Self {
        FibSlot { config, retired: false, replay: Arc::default() }
    }
}

/// The running writer.
#[derive(Clone)]
pub struct Fib {
    tx: mpsc::Sender<Command>,
    instances: Arc<RwLock<Vec<FibSlot>>>,
    /// The kernel held routes of a previous run at start, and they were kept.
    previous_run_kept: bool,
    stats: Arc<stats::FibStats>,
}

/// How many routes one instance holds in each state, read from the writer's counters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FibRouteCounts {
    pub config: FibInstanceConfig,
    /// Installed, pending, failed.
    pub routes: [(stats::RouteState, u64); 3],
}

/// One instance's channel to the writer.
#[derive(Clone)]
pub struct FibSender {
    tx: mpsc::Sender<Command>,
    instance: usize,
    replay: Arc<ReplaySlot>,
}

impl FibSender {
    /// Hands a batch of changes to the writer; waits only when its channel is full.
    pub async fn send(&self, batch: RouteBatch) {
        if batch.is_empty() {
            return;
        }
        let _ = self.tx.send(Command::Routes { instance: self.instance, batch }).await;
    }

    /// Part of the answer to replay request `token`: the routes as they are now (a batch's
    /// changes from the empty set); `done` on the last part.
    pub async fn send_replay(&self, token: u64, batch: RouteBatch, done: bool) {
        let command = Command::Replay { token, batch, done };
        let _ = self.tx.send(command).await;
    }

    /// Resolves when the writer has asked for a replay ([`FibSender::take_replays`]).
    pub async fn replay_wanted(&self) {
        self.replay.wanted().await;
    }

    pub fn take_replays(&self) -> Vec<ReplayRequest> {
        self.replay.take()
    }
}

/// Starts the writer and monitor threads. The writer first reconciles with the kernel, then
/// applies changes as they come. Without `keep_previous` the startup reconcile removes every
/// stale `proto uplink` route in uplink's tables; with it (graceful restart, RFC 4724 §4.1) the
/// previous run's routes and nexthops stay and keep forwarding until [`Fib::end_restart`].
/// `nexthop_objects = false` installs ECMP routes with RTA_MULTIPATH (the writer also falls
/// back to that by itself when the kernel has no nexthop objects); with objects, the kernel's
/// nexthop compatibility mode is turned off unless `nexthop_compat_mode` asks to keep it.
pub fn start(
    instances: Vec<FibInstanceConfig>,
    settings: &FibConfig,
    keep_previous: bool,
) -> Result<Fib, String> {
    let kernel = kernel::Kernel::open()
        .map_err(|e| format!("cannot open a netlink socket for the FIB: {e}"))?;
    let own_pid = kernel.pid();
    let mut monitor = kernel::Monitor::open(own_pid)
        .map_err(|e| format!("cannot subscribe to kernel route notifications: {e}"))?;
    let (tx, rx) = mpsc::channel(CHANNEL_DEPTH);
    let events = tx.clone();
    std::thread::Builder::new()
        .name("uplink-fib-monitor".into())
        .spawn(move || loop {
            let command = match monitor.next_datagram() {
                Ok(datagram) => {
                    let events = writer::events(datagram, own_pid);
                    if events.is_empty() {
                        continue;
                    }
                    Command::Kernel(events)
                }
                Err(e) if kernel::is_overflow(&e) => Command::Overflow,
                Err(e) => {
                    warn!("reading kernel notifications failed: {e}");
                    std::thread::sleep(std::time::Duration::from_millis(100));
                    continue;
                }
            };
            if events.blocking_send(command).is_err() {
                return;
            }
        })
        .map_err(|e| format!("cannot start the FIB monitor thread: {e}"))?;
    let slots: Vec<FibSlot> = instances.into_iter().map(FibSlot::new).collect();
    let stats = Arc::new(stats::FibStats::default());
    let writer = Writer::new(kernel, slots.clone(), settings, keep_previous, Arc::clone(&stats));
    let (started_tx, started) = std::sync::mpsc::sync_channel(1);
    std::thread::Builder::new()
        .name("uplink-fib".into())
        .spawn(move || {
            writer.run(rx, started_tx);
            error!("the FIB writer stopped");
        })
        .map_err(|e| format!("cannot start the FIB writer thread: {e}"))?;
    // The startup reconcile says whether a previous run's routes were kept (sessions then
    // advertise that they restarted).
    let previous_run_kept =
        started.recv().map_err(|_| "the FIB writer stopped during its startup".to_string())?;
    Ok(Fib { tx, instances: Arc::new(RwLock::new(slots)), previous_run_kept, stats })
}

impl Fib {
    /// The channel for the instance of `vrf`; `None` when neither it installs routes nor
    /// another VRF imports them.
    pub fn sender(&self, vrf: &str) -> Option<FibSender> {
        let slots = self.instances.read().ok()?;
        let active = |s: &&FibSlot| !s.retired;
        let instance = slots
            .iter()
            .position(|s| !s.retired && s.config.vrf == vrf && s.config.leaked_from.is_none())?;
        let leaked =
            slots.iter().filter(active).any(|s| s.config.leaked_from.as_deref() == Some(vrf));
        let slot = slots.get(instance)?;
        let installs = slot.config.install;
        let replay = Arc::clone(&slot.replay);
        (installs || leaked).then(|| FibSender { tx: self.tx.clone(), instance, replay })
    }

    /// A reload: the instances (routers and leaks) wanted now. Unchanged ones are kept; the
    /// others are retired (their routes leave the kernel) and the new ones added, so a router
    /// whose FIB settings changed must be started again to get a sender for its new instance.
    pub async fn configure(&self, wanted: Vec<FibInstanceConfig>) -> Result<(), String> {
        let slots = {
            let mut slots = self.instances.write().map_err(|_| "the FIB state is poisoned")?;
            for slot in slots.iter_mut().filter(|s| !s.retired) {
                slot.retired = !wanted.contains(&slot.config);
            }
            for config in wanted {
                if !slots.iter().any(|s| !s.retired && s.config == config) {
                    slots.push(FibSlot::new(config));
                }
            }
            slots.clone()
        };
        self.tx
            .send(Command::Configure(slots))
            .await
            .map_err(|_| "the FIB writer has stopped".into())
    }

    /// A reload changed `[fib] nexthop_objects`: the routes in the kernel change form (nexthop
    /// groups, or hops inline) in place, none is withdrawn. Returns once done.
    pub async fn set_nexthop_objects(&self, on: bool) -> Result<(), String> {
        let (reply, rx) = oneshot::channel();
        self.tx
            .send(Command::NexthopObjects(on, reply))
            .await
            .map_err(|_| "the FIB writer has stopped")?;
        // The routes are rewritten from the RIBs' replays; a RIB that does not answer must
        // not hold the reload forever.
        match tokio::time::timeout(SWITCH_LIMIT, rx).await {
            Ok(answer) => answer.map_err(|_| "the FIB writer has stopped".to_string())?,
            Err(_) => Err(format!("still rewriting the routes after {SWITCH_LIMIT:?}")),
        }
    }

    /// Whether the instance of `vrf` would be installed with `config` (else a reload must
    /// start the router again).
    pub fn has_instance(&self, config: &FibInstanceConfig) -> bool {
        self.instances
            .read()
            .is_ok_and(|slots| slots.iter().any(|s| !s.retired && s.config == *config))
    }

    /// Whether the kernel held a previous run's routes at start and they were kept.
    pub fn previous_run_kept(&self) -> bool {
        self.previous_run_kept
    }

    /// RFC 4724 §4.1: our restart is over (every graceful-restart peer has sent End-of-RIB,
    /// or the wait ran out): the previous run's routes that did not come back leave the
    /// kernel.
    pub async fn end_restart(&self) -> Result<(), String> {
        self.tx.send(Command::EndRestart).await.map_err(|_| "the FIB writer has stopped".into())
    }

    /// Takes every route uplink installed out of the kernel (a shutdown without graceful
    /// restart) and returns once that is done.
    pub async fn clear(&self) -> Result<(), String> {
        let (reply, rx) = oneshot::channel();
        self.tx.send(Command::Clear(reply)).await.map_err(|_| "the FIB writer has stopped")?;
        rx.await.map_err(|_| "the FIB writer has stopped".to_string())
    }

    /// Returns once every change sent before this call has been written to the kernel.
    pub async fn flush(&self) -> Result<(), String> {
        let (reply, rx) = oneshot::channel();
        self.tx.send(Command::Flush(reply)).await.map_err(|_| "the FIB writer has stopped")?;
        rx.await.map_err(|_| "the FIB writer has stopped".to_string())
    }

    /// The writer's counters (kernel requests, errors, resyncs).
    pub fn stats(&self) -> &stats::FibStats {
        &self.stats
    }

    /// Route counts of every active instance (routers and leaks), without asking the writer.
    pub fn route_counts(&self) -> Vec<FibRouteCounts> {
        let Ok(slots) = self.instances.read() else { return Vec::new() };
        slots
            .iter()
            .enumerate()
            .filter(|(_, slot)| !slot.retired && slot.config.install)
            .map(|(index, slot)| {
                let counts = self.stats.instance(index);
                let count = |state| counts.as_ref().map_or(0, |c| c.get(state));
                FibRouteCounts {
                    config: slot.config.clone(),
                    routes: stats::RouteState::ALL.map(|state| (state, count(state))),
                }
            })
            .collect()
    }

    /// Every instance's groups, lost next hops and refused routes; join them with the RIB's
    /// routes with [`FibInstanceState::route`].
    pub async fn show(&self) -> Result<Vec<FibInstanceState>, String> {
        let (reply, rx) = oneshot::channel();
        self.tx.send(Command::Show(reply)).await.map_err(|_| "the FIB writer has stopped")?;
        rx.await.map_err(|_| "the FIB writer has stopped".to_string())
    }
}

/// What the writer holds for one instance (`show fib`).
#[derive(Debug, Clone)]
pub struct FibInstanceState {
    pub vrf: String,
    /// For a leak: the VRF its routes were learned in (their next hops are there).
    pub leaked_from: Option<String>,
    pub install: bool,
    pub table: Option<u32>,
    pub metric: u32,
    /// False when the kernel refused nexthop objects and routes carry their hops inline.
    pub nexthop_objects: bool,
    /// A new leak waiting for its source's routes.
    pub filling: bool,
    /// Next hops the RIB declared lost.
    pub down: Vec<NextHop>,
    pub groups: Vec<FibGroupView>,
    /// Next-hop set -> index into `groups`.
    by_set: HashMap<Box<[NextHop]>, usize>,
    /// Routes the kernel refused (or another daemon's route keeps out), with the error and
    /// the retry.
    failures: HashMap<IpNet, FibFailure>,
    /// Deletions the kernel refused, tried again.
    pub failed_deletes: Vec<FibFailedDelete>,
}

/// A failed write of a route, and when it is tried again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FibFailure {
    pub error: String,
    /// Writes tried so far.
    pub attempts: u32,
    /// Until the next try (as of the writer's last round).
    pub retry_in: std::time::Duration,
}

/// A route of ours the kernel would not delete; the deletion is tried again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FibFailedDelete {
    pub prefix: IpNet,
    pub error: String,
    pub attempts: u32,
    pub retry_in: std::time::Duration,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FibGroupView {
    pub id: u32,
    /// The BGP next-hop sets whose routes use it (more than one while routes move).
    pub sets: Vec<Vec<NextHop>>,
    pub via: Vec<FibHopView>,
    pub routes: u32,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FibRouteView {
    pub prefix: IpNet,
    /// The BGP next hops of the best path and its multipaths.
    pub next_hops: Vec<String>,
    /// The resolved kernel next hops.
    pub via: Vec<FibHopView>,
    pub nexthop_group: Option<u32>,
    /// "installed", "pending" or "failed".
    pub state: &'static str,
    /// The kernel's error when failed (or the other daemon's route that keeps it out).
    pub error: Option<String>,
    /// When failed: the writes tried so far, and the time until the next.
    pub attempts: Option<u32>,
    pub retry_in: Option<std::time::Duration>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FibHopView {
    pub gateway: IpAddr,
    pub interface: String,
    pub nexthop_id: Option<u32>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::{BTreeMap, BTreeSet};

    fn router(vrf: &str, metric: u32, table: Option<u32>) -> Router {
        let mut router = crate::config::load_str("t", "[[bgp.routers]]\nasn = 1\n")
            .map(|c| c.bgp.routers.into_iter().next().unwrap())
            .unwrap();
        router.vrf = vrf.into();
        router.metric = metric;
        router.table = table;
        router
    }

    #[test]
    fn leaks_install_into_the_importer_at_a_higher_metric_and_resolve_in_the_source() {
        let routers = [router("", 20, None), router("blue", 30, Some(1001))];
        let imports: BTreeMap<String, BTreeSet<String>> = [
            ("blue".to_string(), ["".to_string(), "red".to_string()].into()),
            // A VRF without a router (a route advertisement's `target_vrf = "default"`).
            ("udn".to_string(), ["".to_string()].into()),
            // Importing from itself is no leak.
            ("".to_string(), ["".to_string()].into()),
        ]
        .into();
        let out = instances_for(&routers, &imports);
        let leaks: Vec<(&str, &str, Option<u32>, u32)> = out
            .iter()
            .filter_map(|i| Some((i.vrf.as_str(), i.leaked_from.as_deref()?, i.table, i.metric)))
            .collect();
        assert_eq!(
            leaks,
            vec![
                ("blue", "", Some(1001), 31),
                ("blue", "red", Some(1001), 32),
                ("udn", "", None, 21)
            ]
        );
        assert_eq!(out.iter().filter(|i| i.leaked_from.is_none()).count(), 2);
        assert_eq!(out.get(2).map(FibInstanceConfig::resolve_vrf), Some(""));
    }
}
