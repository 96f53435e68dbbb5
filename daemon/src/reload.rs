//! Reload: re-read the config and apply the difference, touching only what changed. It runs on
//! SIGHUP and on `uplink reload` (a control request that waits for the [`ReloadOutcome`]),
//! one reload at a time.
//!
//! A config with an error changes nothing. Otherwise the node's network policies are applied
//! first (`netconf::gate`, docs/network.md), and a new router whose VRF device is still
//! missing waits for it (it starts when the device appears). Then the reload is prepared — everything
//! that can fail happens before anything running changes: each new or reset neighbor's OPEN
//! and BFD profile are checked, new routers' listening sockets are bound, new TCP-MD5 keys are
//! installed (and removed again if a later step fails). A failure there rejects the reload
//! whole and the running state stays. Then, router by router (one per VRF):
//! - a router kept: neighbors are added, removed, reset or updated live one by one
//!   ([`Instance::apply`]): a neighbor is reset only for a setting its session cannot change
//!   while up (`bgp::reconfigure`), filters, communities, LOCAL_PREF and prefix limits change
//!   on the running session, BFD timers with a Poll Sequence; `maximum_paths`,
//!   `multipath_relax` and `always_block` change in its RIB;
//! - a router removed: its sessions end with Cease/Peer De-configured (RFC 4486 subcode 3) and
//!   its routes leave the kernel;
//! - a router whose AS, id or FIB instance (`install`, `table`, `metric`) changed: its sessions
//!   end with Cease/Other Configuration Change (subcode 6) and it starts again on the same
//!   listening socket, as FRR does for a changed router-id; other routers are not touched;
//! - a router added: it starts.
//!
//! `prefixes`, `imports` and everything the announcer computes change the announcements only
//! (no session reset); the FIB writer's VRF leaks follow the new `imports`, and `[fib]`
//! settings apply to the routes in the kernel. Then `show running-config` shows the new config.

use crate::announce::runtime::AnnouncerHandle;
use crate::announce::{compute_config, router_inputs, Announcements, RuntimeState};
use crate::bgp::instance::{Instance, Prepared, ReloadReport};
use crate::config::{self, vrf_display_name, ConfigError, Router};
use crate::fib::{Fib, FibInstanceConfig};
use crate::netconf::gate::NetworkGate;
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::net::TcpListener;
use tokio::sync::{mpsc, oneshot, watch};
use tracing::{error, info, warn};

/// The running routing instances. A reload publishes a new list; readers take a snapshot.
pub type InstanceList = Arc<Vec<Arc<Instance>>>;

/// How long a stopped instance may take to let go of its BFD sockets.
const RELEASE_TIMEOUT: Duration = Duration::from_secs(5);

/// What a reload works on.
pub struct Reloader {
    pub config_path: PathBuf,
    pub fib: Fib,
    pub announcer: AnnouncerHandle,
    pub instances: watch::Sender<InstanceList>,
    pub running: watch::Sender<Arc<config::Config>>,
    pub stats: Arc<ReloadStats>,
    /// The node's network: policies applied before the router diff; routers waiting for
    /// their VRF.
    pub network: NetworkGate,
}

/// Reload outcomes for the metrics endpoint (named after Prometheus's own
/// `prometheus_config_last_reload_*`): counts, and when the config last loaded.
#[derive(Debug)]
pub struct ReloadStats {
    pub succeeded: AtomicU64,
    pub failed: AtomicU64,
    /// Whether the last reload was applied (true until one is rejected).
    pub last_ok: AtomicBool,
    /// Unix seconds of the last config applied: the start, then each successful reload.
    pub last_success: AtomicU64,
}

impl ReloadStats {
    /// At start: the config just loaded counts as the last success.
    pub fn started() -> Self {
        Self {
            succeeded: AtomicU64::new(0),
            failed: AtomicU64::new(0),
            last_ok: AtomicBool::new(true),
            last_success: AtomicU64::new(unix_now()),
        }
    }

    fn record(&self, ok: bool) {
        let count = if ok { &self.succeeded } else { &self.failed };
        count.fetch_add(1, Ordering::Relaxed);
        self.last_ok.store(ok, Ordering::Relaxed);
        if ok {
            self.last_success.store(unix_now(), Ordering::Relaxed);
        }
    }
}

fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |since| since.as_secs())
}

/// Asks the reloader for a reload (`uplink reload`) and waits for what it did.
#[derive(Clone)]
pub struct ReloadHandle {
    requests: mpsc::Sender<oneshot::Sender<ReloadOutcome>>,
}

impl ReloadHandle {
    pub async fn reload(&self) -> Result<ReloadOutcome, String> {
        let (reply, outcome) = oneshot::channel();
        self.requests.send(reply).await.map_err(|_| "the reloader has stopped".to_string())?;
        outcome.await.map_err(|_| "the reloader has stopped".to_string())
    }
}

/// What one reload did: `uplink reload` prints it, `--json` as is.
#[derive(Debug, Clone, Serialize)]
pub struct ReloadOutcome {
    /// The main config file (its `conf.d/` beside it).
    pub config: PathBuf,
    /// `false`: rejected, nothing changed.
    pub applied: bool,
    /// Why the config was rejected, each with file, line, column and field.
    pub config_errors: Vec<ConfigError>,
    /// Why a valid config could not be applied (a VRF without its device, say).
    pub error: Option<String>,
    /// One entry per router before or after the reload.
    pub routers: Vec<RouterOutcome>,
    /// Node-wide settings applied (`always_block`, `[fib]`).
    pub node: Vec<String>,
    pub duration_ms: u64,
}

#[derive(Debug, Clone, Serialize)]
pub struct RouterOutcome {
    /// "default" for the default VRF.
    pub vrf: String,
    pub asn: u32,
    pub action: RouterAction,
    /// Why it was restarted (the settings and their old and new values), or why it could not
    /// be.
    pub reason: Option<String>,
    #[serde(flatten)]
    pub neighbors: ReloadReport,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum RouterAction {
    Added,
    Removed,
    Restarted,
    Kept,
    /// Configured, but its VRF device is not there yet.
    Waiting,
}

impl std::fmt::Display for RouterAction {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Added => "added",
            Self::Removed => "removed",
            Self::Restarted => "restarted",
            Self::Kept => "kept",
            Self::Waiting => "waiting for its VRF device",
        })
    }
}

impl ReloadOutcome {
    fn new(config: PathBuf) -> Self {
        Self {
            config,
            applied: false,
            config_errors: Vec::new(),
            error: None,
            routers: Vec::new(),
            node: Vec::new(),
            duration_ms: 0,
        }
    }

    /// Logs what happened, one line per change, so SIGHUP leaves the same record as
    /// `uplink reload`.
    fn log(&self) {
        if !self.applied {
            match &self.error {
                Some(e) => warn!("reload rejected, the running config stays: {e}"),
                None => {
                    let errors: Vec<String> =
                        self.config_errors.iter().map(|e| e.to_string()).collect();
                    warn!("reload rejected, the running config stays:\n{}", errors.join("\n"));
                }
            }
            return;
        }
        for note in &self.node {
            info!("reload: {note}");
        }
        for r in &self.routers {
            let vrf = &r.vrf;
            match (&r.action, &r.reason) {
                (RouterAction::Kept, _) => {}
                (action, Some(reason)) => info!(%vrf, "reload: router {action}: {reason}"),
                (action, None) => info!(%vrf, "reload: router {action}"),
            }
            let n = &r.neighbors;
            for setting in &n.settings {
                info!(%vrf, "reload: {setting}");
            }
            for address in &n.added {
                info!(%vrf, "reload: neighbor {address} added");
            }
            for address in &n.removed {
                info!(%vrf, "reload: neighbor {address} removed");
            }
            for reset in &n.reset {
                info!(%vrf, "reload: neighbor {} reset: {}", reset.address, reset.reason);
            }
            for update in &n.updated {
                info!(%vrf, "reload: neighbor {} updated: {}", update.address, update.applied.join("; "));
            }
            for note in &n.deferred {
                warn!(%vrf, "reload: {note}");
            }
        }
        info!("reload: applied {} in {} ms", self.config.display(), self.duration_ms);
    }
}

/// Which VRFs each router (configured, or implied by a route advertisement) imports from.
pub fn imports_of(announcements: &Announcements) -> BTreeMap<String, BTreeSet<String>> {
    announcements.routers.iter().map(|r| (r.vrf.clone(), r.imports.clone())).collect()
}

/// The FIB writer's instances for `config`: one per router, one per VRF leak.
pub fn fib_instances(
    config: &config::Config,
    announcements: &Announcements,
) -> Vec<FibInstanceConfig> {
    crate::fib::instances_for(&config.bgp.routers, &imports_of(announcements))
}

/// One router's part of a prepared reload.
enum Plan {
    Remove(Arc<Instance>),
    /// Start again on the old instance's listening socket.
    Restart {
        instance: Arc<Instance>,
        router: Router,
        reason: String,
    },
    Keep(Arc<Instance>, Prepared),
    Start(Router, Arc<TcpListener>),
    /// A new router whose VRF device is missing: it starts when the device appears.
    Wait(Router),
}

impl Reloader {
    /// Reloads on every SIGHUP and every request until the process ends, one at a time;
    /// starts waiting routers when the node's links or addresses change.
    pub fn spawn(self) -> ReloadHandle {
        use tokio::signal::unix::{signal, SignalKind};
        let (requests, mut inbox) = mpsc::channel::<oneshot::Sender<ReloadOutcome>>(4);
        let mut hup = match signal(SignalKind::hangup()) {
            Ok(hup) => Some(hup),
            Err(e) => {
                error!("cannot install the SIGHUP handler ({e}); `uplink reload` still works");
                None
            }
        };
        let mut links = self.network.view();
        tokio::spawn(async move {
            loop {
                let reply = tokio::select! {
                    Some(()) = async { hup.as_mut()?.recv().await } => None,
                    request = inbox.recv() => match request {
                        Some(reply) => Some(reply),
                        None => return,
                    },
                    Ok(()) = links.changed() => {
                        self.start_waiting().await;
                        continue;
                    }
                };
                let outcome = self.reload().await;
                outcome.log();
                self.stats.record(outcome.applied);
                if let Some(reply) = reply {
                    let _ = reply.send(outcome);
                }
            }
        });
        ReloadHandle { requests }
    }

    async fn reload(&self) -> ReloadOutcome {
        let started = Instant::now();
        let mut outcome = ReloadOutcome::new(self.config_path.clone());
        let config = match config::load(&self.config_path) {
            Ok(config) => config,
            Err(errors) => {
                outcome.config_errors = errors.0;
                return outcome;
            }
        };
        let old = self.running.borrow().clone();
        // The node's network first (docs/network.md): the policies, then the routers whose
        // VRF exists; `held` wait for theirs and start when it appears.
        let running_vrfs = self.instances.borrow().iter().map(|i| i.vrf.clone()).collect();
        let held = self.network.prepare(&config, &running_vrfs).await;
        let plans = match self.prepare(&config, &old, &held) {
            Ok(plans) => plans,
            Err(e) => {
                outcome.error = Some(e);
                return outcome;
            }
        };
        self.apply(plans, &config, &old, &mut outcome).await;
        outcome.applied = true;
        outcome.duration_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.running.send_replace(Arc::new(config));
        outcome
    }

    /// Plans every router's part and does what can fail; on an error undoes it and changes
    /// nothing.
    fn prepare(
        &self,
        config: &config::Config,
        old: &config::Config,
        held: &BTreeSet<String>,
    ) -> Result<Vec<Plan>, String> {
        let current = self.instances.borrow().clone();
        let mut plans = Vec::new();
        match self.prepare_into(config, old, &current, held, &mut plans) {
            Ok(()) => Ok(plans),
            Err(e) => {
                for plan in plans {
                    if let Plan::Keep(instance, prepared) = plan {
                        instance.abandon(prepared);
                    }
                }
                Err(e)
            }
        }
    }

    fn prepare_into(
        &self,
        config: &config::Config,
        old: &config::Config,
        current: &[Arc<Instance>],
        held: &BTreeSet<String>,
        plans: &mut Vec<Plan>,
    ) -> Result<(), String> {
        let always_block = (&old.always_block[..], &config.always_block[..]);
        let named = |router: &Router| {
            format!("router {} (vrf {})", router.asn, vrf_display_name(&router.vrf))
        };
        for instance in current {
            let Some(router) = config.bgp.routers.iter().find(|r| r.vrf == instance.vrf) else {
                plans.push(Plan::Remove(instance.clone()));
                continue;
            };
            let reasons = instance.restart_reasons(router);
            if reasons.is_empty() {
                let prepared = instance
                    .prepare(router, config, always_block)
                    .map_err(|e| format!("{}: {e}", named(router)))?;
                plans.push(Plan::Keep(instance.clone(), prepared));
            } else {
                Instance::check(router, config).map_err(|e| format!("{}: {e}", named(router)))?;
                plans.push(Plan::Restart {
                    instance: instance.clone(),
                    router: router.clone(),
                    reason: reasons.join(", "),
                });
            }
        }
        for router in &config.bgp.routers {
            if current.iter().any(|i| i.vrf == router.vrf) {
                continue;
            }
            if held.contains(&router.vrf) {
                plans.push(Plan::Wait(router.clone()));
                continue;
            }
            Instance::check(router, config).map_err(|e| format!("{}: {e}", named(router)))?;
            let listener =
                Instance::bind(&router.vrf).map_err(|e| format!("{}: {e}", named(router)))?;
            plans.push(Plan::Start(router.clone(), listener));
        }
        Ok(())
    }

    /// Carries out the prepared plans. Routers that leave or start again stop first, so the
    /// FIB's instances can follow before the new ones start.
    async fn apply(
        &self,
        plans: Vec<Plan>,
        config: &config::Config,
        old: &config::Config,
        outcome: &mut ReloadOutcome,
    ) {
        let vrf = |v: &str| vrf_display_name(v).to_string();
        let mut kept: Vec<Arc<Instance>> = Vec::new();
        let mut stopped: Vec<Arc<Instance>> = Vec::new();
        for plan in &plans {
            match plan {
                Plan::Remove(instance) => {
                    let neighbors = instance.neighbors();
                    instance.stop(3, "router de-configured").await;
                    outcome.routers.push(RouterOutcome {
                        vrf: vrf(&instance.vrf),
                        asn: instance.asn,
                        action: RouterAction::Removed,
                        reason: None,
                        neighbors: ReloadReport {
                            removed: neighbors.iter().map(|n| n.config.address).collect(),
                            ..Default::default()
                        },
                    });
                    stopped.push(instance.clone());
                }
                Plan::Restart { instance, reason, .. } => {
                    info!(vrf = %instance.vrf, "reload: router settings changed ({reason}), starting it again");
                    instance.stop(6, "router settings changed").await;
                    stopped.push(instance.clone());
                }
                Plan::Keep(instance, _) => kept.push(instance.clone()),
                Plan::Start(..) | Plan::Wait(_) => {}
            }
        }
        self.instances.send_replace(Arc::new(kept));
        // Only the VRFs each router imports from are read from it (for the FIB's leaks).
        let announcements = compute_config(config, RuntimeState::default());
        if let Err(e) = self.fib.configure(fib_instances(config, &announcements)).await {
            error!("reload: {e}");
        }
        if config.fib != old.fib {
            match self.fib.set_nexthop_objects(config.fib.nexthop_objects).await {
                Ok(()) => outcome.node.push(format!(
                    "fib.nexthop_objects {} → {}",
                    old.fib.nexthop_objects, config.fib.nexthop_objects
                )),
                Err(e) => outcome.node.push(format!("fib.nexthop_objects not changed: {e}")),
            }
        }
        if config.graceful_restart != old.graceful_restart {
            // RFC 4724 §3: the Restart Time is in the OPEN; no session is reset for it.
            outcome.node.push(format!(
                "graceful_restart timers changed (restart_time {} → {}): sessions started from \
                 now on use them; established ones keep what they negotiated",
                crate::config::duration::format_duration(old.graceful_restart.restart_time),
                crate::config::duration::format_duration(config.graceful_restart.restart_time),
            ));
        }
        if config.always_block != old.always_block {
            let list = |l: &[ipnet::IpNet]| {
                format!("[{}]", l.iter().map(|n| n.to_string()).collect::<Vec<_>>().join(", "))
            };
            let mut note = format!(
                "always_block {} → {}",
                list(&old.always_block),
                list(&config.always_block)
            );
            if crate::bgp::reconfigure::always_block_widened(
                &old.always_block,
                &config.always_block,
            ) {
                note.push_str(" (each peer is asked to send its routes again: ROUTE-REFRESH)");
            }
            outcome.node.push(note);
        }

        let mut next = Vec::new();
        for plan in plans {
            match plan {
                Plan::Remove(_) => {}
                Plan::Keep(instance, prepared) => {
                    let report = instance.apply(prepared).await;
                    outcome.routers.push(RouterOutcome {
                        vrf: vrf(&instance.vrf),
                        asn: instance.asn,
                        action: RouterAction::Kept,
                        reason: None,
                        neighbors: report,
                    });
                    next.push(instance);
                }
                Plan::Restart { instance: previous, router, reason } => {
                    let listener = previous.listener();
                    let (action, reason, instance) = match self
                        .start(&router, config, listener.clone())
                        .await
                    {
                        Ok(instance) => (RouterAction::Restarted, reason, Some(instance)),
                        Err(e) => {
                            // Back to the router as it ran, on the same socket.
                            error!(vrf = %router.vrf, "reload: router not started again: {e}");
                            let back = self.start(&previous.router_config(), old, listener).await;
                            (
                                    RouterAction::Kept,
                                    format!("could not start with the new settings ({e}); the old ones run again"),
                                    back.ok(),
                                )
                        }
                    };
                    let neighbors = ReloadReport {
                        reset: router
                            .neighbors
                            .iter()
                            .map(|n| crate::bgp::instance::NeighborReset {
                                address: n.address,
                                reason: format!("router {reason}"),
                            })
                            .collect(),
                        ..Default::default()
                    };
                    outcome.routers.push(RouterOutcome {
                        vrf: vrf(&router.vrf),
                        asn: router.asn,
                        action,
                        reason: Some(reason),
                        neighbors,
                    });
                    next.extend(instance.map(Arc::new));
                }
                Plan::Wait(router) => outcome.routers.push(RouterOutcome {
                    vrf: vrf(&router.vrf),
                    asn: router.asn,
                    action: RouterAction::Waiting,
                    reason: Some(format!(
                        "no VRF device {:?} yet; the router starts when it appears",
                        router.vrf
                    )),
                    neighbors: ReloadReport::default(),
                }),
                Plan::Start(router, listener) => {
                    let (action, reason, instance) = match self
                        .start(&router, config, listener)
                        .await
                    {
                        Ok(instance) => (RouterAction::Added, None, Some(instance)),
                        Err(e) => (RouterAction::Removed, Some(format!("not started: {e}")), None),
                    };
                    outcome.routers.push(RouterOutcome {
                        vrf: vrf(&router.vrf),
                        asn: router.asn,
                        action,
                        reason,
                        neighbors: ReloadReport {
                            added: router.neighbors.iter().map(|n| n.address).collect(),
                            ..Default::default()
                        },
                    });
                    next.extend(instance.map(Arc::new));
                }
            }
        }
        self.instances.send_replace(Arc::new(next));
        for instance in stopped {
            release(instance).await;
        }
        self.announcer.replace_config(config.announce.clone(), router_inputs(config)).await;
    }

    /// Starts the waiting routers whose VRF device is there now.
    async fn start_waiting(&self) {
        let waited = self.network.waiting_vrfs();
        if waited.is_empty() {
            return;
        }
        let config = self.running.borrow().clone();
        let current = self.instances.borrow().clone();
        let held = self
            .network
            .hold(&config.bgp.routers, &current.iter().map(|i| i.vrf.clone()).collect());
        let mut next = current.as_ref().clone();
        for router in
            config.bgp.routers.iter().filter(|r| waited.contains(&r.vrf) && !held.contains(&r.vrf))
        {
            match self.bind_and_start(router, &config).await {
                Ok(instance) => next.push(Arc::new(instance)),
                Err(e) => error!(vrf = %router.vrf, "router {} not started: {e}", router.asn),
            }
        }
        self.instances.send_replace(Arc::new(next));
    }

    /// Starts a router on `listener`, from the announcer's current set for its VRF (health
    /// verdicts and the drain state included), following it.
    async fn start(
        &self,
        router: &Router,
        config: &config::Config,
        listener: Arc<TcpListener>,
    ) -> Result<Instance, String> {
        let announced = self.announcer.subscribe(&router.vrf);
        let instance =
            Instance::start_on(router, config, Some(&self.fib), announced, listener).await?;
        info!(vrf = %router.vrf, asn = router.asn, "reload: router started");
        Ok(instance)
    }

    /// Starts a router that waited for its VRF device, on a socket of its own.
    async fn bind_and_start(
        &self,
        router: &Router,
        config: &config::Config,
    ) -> Result<Instance, String> {
        let listener = Instance::bind(&router.vrf)?;
        self.start(router, config, listener).await
    }
}

/// Waits until nobody (a control request in flight) holds a stopped instance any more, and
/// drops it: that ends its BFD thread and, unless a successor took it, closes its listener.
async fn release(mut instance: Arc<Instance>) {
    let deadline = tokio::time::Instant::now() + RELEASE_TIMEOUT;
    loop {
        match Arc::try_unwrap(instance) {
            Ok(owned) => return drop(owned),
            Err(shared) if tokio::time::Instant::now() < deadline => {
                instance = shared;
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            Err(_) => {
                warn!("reload: a stopped routing instance is still in use");
                return;
            }
        }
    }
}
