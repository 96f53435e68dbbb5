//! Reload: re-read the config and apply the difference, touching only what changed. It runs on
//! SIGHUP, on `uplink reload` (a control request that waits for the [`ReloadOutcome`]) and on
//! every change of the objects read from the Kubernetes API, one reload at a time.
//!
//! The start is a reload too, from a config with no routers and no policies
//! ([`Reloader::start`]): one path starts every router, at start, on a reload and when a VRF
//! device appears.
//!
//! A config with an error changes nothing. Otherwise the reload is prepared — everything that
//! can fail happens before anything running changes, in this order:
//! 1. each new or reset neighbor's OPEN and BFD profile are checked, the listening sockets of
//!    new routers whose VRF device exists are bound, new TCP-MD5 keys are installed, a new
//!    `[metrics] listen` address is bound (`metrics`);
//! 2. the node's network policies are applied (`netconf::gate`, docs/network.md); a policy
//!    that fails (and is rolled back by its checkpoint) refuses the reload. A change of the
//!    API's objects that leaves the network's config as it runs skips this step;
//! 3. the new routers whose VRF device the policies just made are checked and bound; a new
//!    router whose VRF device is still missing waits for it (it starts when it appears).
//!
//! A failure in any step undoes the steps before it — the keys are removed, the sockets closed,
//! the policies this reload applied are undone — and the running state stays, network
//! included. Then, router by router (one per VRF):
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

pub mod metrics;
pub mod plan;

use crate::announce::router_inputs;
use crate::announce::runtime::AnnouncerHandle;
use crate::bgp::instance::{Instance, Prepared, ReloadReport};
use crate::config::{self, vrf_display_name, ConfigError, Router};
use crate::fib::{Fib, FibInstanceConfig};
use crate::netconf::gate::{NetworkGate, PolicyOutcome, PolicyReport, APPLY_WAIT};
use plan::{NodeView, RouterStep};
use serde::Serialize;
use std::collections::BTreeSet;
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
    /// The metrics endpoint's socket, served by `control::metrics`.
    pub metrics: watch::Sender<metrics::Published>,
    /// Objects from the Kubernetes API (`[kubernetes]`): a reload when they change, and part
    /// of every reload's config.
    pub api: Option<ApiInput>,
}

/// The Kubernetes source as the reloader sees it.
pub struct ApiInput {
    pub objects: watch::Receiver<Arc<config::ApiObjects>>,
    /// Where the reloader records the objects it refused and whether a set applied.
    pub health: crate::kubernetes::Health,
    /// The objects' translations, kept from one reload to the next (`config::ManifestCache`).
    pub manifests: std::sync::Mutex<config::ManifestCache>,
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
    /// Why a valid config could not be applied (a port taken, a policy that failed).
    pub error: Option<String>,
    /// Objects from the Kubernetes API left out because the config refuses them (the rest
    /// applies without them), each with kind, namespace, name and field.
    pub refused_objects: Vec<ConfigError>,
    /// The node's network policies: what this reload did to each.
    pub network: Vec<PolicyOutcome>,
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
            refused_objects: Vec::new(),
            network: Vec::new(),
            routers: Vec::new(),
            node: Vec::new(),
            duration_ms: 0,
        }
    }

    /// Why a rejected reload was rejected, in one text.
    fn rejection(&self) -> String {
        match &self.error {
            Some(error) => error.clone(),
            None => {
                let errors: Vec<String> =
                    self.config_errors.iter().map(|e| e.to_string()).collect();
                errors.join("\n")
            }
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
        for refused in &self.refused_objects {
            warn!("reload: Kubernetes object refused, left out: {refused}");
        }
        for note in &self.node {
            info!("reload: {note}");
        }
        for policy in self.network.iter().filter(|p| p.changed) {
            info!(policy = %policy.policy, "reload: network policy {}: {}", policy.status, policy.message);
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

/// The FIB writer's instances for `config`: one per router, one per VRF leak (what each
/// router, configured or implied by a route advertisement, imports from).
pub fn fib_instances(config: &config::Config) -> Vec<FibInstanceConfig> {
    let imports = crate::announce::compute::imports(&config.announce, &router_inputs(config));
    crate::fib::instances_for(&config.bgp.routers, &imports)
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
        let mut api = self.api.as_ref().map(|api| api.objects.clone());
        tokio::spawn(async move {
            loop {
                let (reply, trigger) = tokio::select! {
                    Some(Ok(())) = async { Some(api.as_mut()?.changed().await) } => {
                        (None, Trigger::ApiObjects)
                    }
                    Some(()) = async { hup.as_mut()?.recv().await } => (None, Trigger::Operator),
                    request = inbox.recv() => match request {
                        Some(reply) => (Some(reply), Trigger::Operator),
                        None => return,
                    },
                    Ok(()) = links.changed() => {
                        self.start_waiting().await;
                        continue;
                    }
                };
                let outcome = self.reload(trigger).await;
                outcome.log();
                self.stats.record(outcome.applied);
                if let Some(reply) = reply {
                    let _ = reply.send(outcome);
                }
            }
        });
        ReloadHandle { requests }
    }

    async fn reload(&self, trigger: Trigger) -> ReloadOutcome {
        let (loaded, refused) = match &self.api {
            Some(api) => {
                let objects = api.objects.borrow().clone();
                let mut manifests =
                    api.manifests.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                config::load_with_api(&self.config_path, &objects, &mut manifests)
            }
            None => (config::load(&self.config_path), Vec::new()),
        };
        let mut outcome = match loaded {
            Ok(config) => self.change_to(config, Occasion::Reload(trigger)).await,
            Err(errors) => {
                let mut outcome = ReloadOutcome::new(self.config_path.clone());
                outcome.config_errors = errors.0;
                outcome
            }
        };
        if let Some(api) = &self.api {
            crate::kubernetes::health::update(&api.health, |health| {
                health.set_refused(&refused);
                health.applied |= outcome.applied;
                health.last_reload = (!outcome.applied).then(|| outcome.rejection());
            });
        }
        outcome.refused_objects = refused;
        outcome
    }

    /// The start: a reload from the running config (which has no routers and no policies yet)
    /// to `config`. Fails when a router cannot start (its port taken, its key refused); a
    /// network policy that fails does not stop the start (the log and the enactments say so).
    pub async fn start(&self, config: config::Config) -> Result<usize, String> {
        let outcome = self.change_to(config, Occasion::Start).await;
        outcome.log();
        if let Some(error) = outcome.error.filter(|_| !outcome.applied) {
            return Err(error);
        }
        let failed: Vec<String> = outcome
            .routers
            .iter()
            .filter(|r| r.action == RouterAction::Removed)
            .map(|r| {
                format!(
                    "router {} (vrf {}): {}",
                    r.asn,
                    r.vrf,
                    r.reason.clone().unwrap_or_default()
                )
            })
            .collect();
        if !failed.is_empty() {
            return Err(failed.join("; "));
        }
        Ok(self.instances.borrow().len())
    }

    /// Prepares the change from the running config to `config` (everything that can fail, the
    /// network policies included) and applies it, or changes nothing.
    async fn change_to(&self, config: config::Config, occasion: Occasion) -> ReloadOutcome {
        let started = Instant::now();
        let mut outcome = ReloadOutcome::new(self.config_path.clone());
        let old = self.running.borrow().clone();
        // Said once, when a document is first left out (not at every reload).
        for skipped in config.skipped.iter().filter(|s| !old.skipped.contains(s)) {
            info!("config: {skipped}");
        }
        let running_vrfs: BTreeSet<String> =
            self.instances.borrow().iter().map(|i| i.vrf.clone()).collect();
        // 1. What needs no change to the node's network. New routers whose VRF device is
        //    missing wait for step 3.
        //    The metrics endpoint's socket is bound here too.
        let missing = self.network.hold(&config.bgp.routers, &running_vrfs);
        let prepared =
            self.prepare(&config, &old, &missing).and_then(|plans| {
                match metrics::prepare(&self.metrics, old.metrics.listen, config.metrics.listen) {
                    Ok(metrics) => Ok((plans, metrics)),
                    Err(e) => {
                        self.abandon(plans);
                        Err(e)
                    }
                }
            });
        let (mut plans, metrics) = match prepared {
            Ok(prepared) => prepared,
            Err(e) => return self.refused(outcome, &old, &running_vrfs, e),
        };
        // 2. The node's network (docs/network.md). A change of the API's objects that leaves
        //    the network's config as it runs (a Service, an EndpointSlice: nearly every event)
        //    leaves the policies be: checking them for drift reads the node's whole state
        //    through nmstate once per policy and writes the enactments file, at every event.
        //    A start, an operator's reload and `uplink apply network` still check.
        let wait = match occasion {
            Occasion::Start => Some(APPLY_WAIT),
            Occasion::Reload(_) => None,
        };
        let network_untouched = matches!(occasion, Occasion::Reload(Trigger::ApiObjects))
            && config.network == old.network;
        let policies = if network_untouched {
            PolicyReport::default()
        } else {
            self.network.apply_policies(&config, wait).await
        };
        outcome.network = policies.policies.clone();
        // A policy in a file that fails refuses the reload, as any mistake in the files does;
        // one from the API is only Failing (its enactment says so) and the other objects of
        // the change apply, as beside any refused object (docs/kubernetes.md).
        let from_api =
            |name: &str| config.network.policies.iter().any(|p| p.name == name && p.from_api());
        let failed_in_files: Vec<String> =
            policies.failed.iter().filter(|name| !from_api(name)).cloned().collect();
        let refused = match (&occasion, failed_in_files.as_slice()) {
            (Occasion::Reload(_), [_, ..]) => Some(format!(
                "network policy {} failed and was rolled back ({})",
                failed_in_files.join(", "),
                failure_messages(&outcome.network, &failed_in_files)
            )),
            _ => None,
        };
        // 3. The new routers whose VRF device the policies made; the others wait.
        let step3 = match refused {
            Some(reason) => Err(reason),
            None => self.prepare_late(&config, &missing, &running_vrfs, &mut plans),
        };
        if let Err(reason) = step3 {
            self.abandon(plans);
            // A refused reload leaves the network as it was. A start that fails stops the
            // daemon: what the policies made stays for the next start.
            let applied = match occasion {
                Occasion::Reload(_) => policies.applied,
                Occasion::Start => Vec::new(),
            };
            let not_undone = self.network.undo(&config, applied, &reason).await;
            let mut error = reason;
            if !not_undone.is_empty() {
                error.push_str(&format!(
                    "; network policy {} could NOT be undone (see its enactment)",
                    not_undone.join(", ")
                ));
            }
            return self.refused(outcome, &old, &running_vrfs, error);
        }
        self.apply(plans, &config, &old, &mut outcome).await;
        let moved = metrics::apply(&self.metrics, metrics);
        // At the start the address is no change of config (the metrics task logs it).
        if old.metrics.listen != config.metrics.listen {
            outcome.node.extend(moved);
        }
        outcome.applied = true;
        outcome.duration_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.running.send_replace(Arc::new(config));
        outcome
    }

    /// The end of a refused reload, once what it prepared is undone: the routers waiting for
    /// their VRF device are the running config's again.
    fn refused(
        &self,
        mut outcome: ReloadOutcome,
        old: &config::Config,
        running_vrfs: &BTreeSet<String>,
        error: String,
    ) -> ReloadOutcome {
        self.network.hold(&old.bgp.routers, running_vrfs);
        outcome.error = Some(error);
        outcome
    }

    /// Step 3 of a reload: of the new routers that waited for their VRF device (`missing`),
    /// checks and binds those whose device is there now; the others wait.
    fn prepare_late(
        &self,
        config: &config::Config,
        missing: &BTreeSet<String>,
        running: &BTreeSet<String>,
        plans: &mut Vec<Plan>,
    ) -> Result<(), String> {
        if missing.is_empty() {
            return Ok(());
        }
        let still_missing = self.network.hold(&config.bgp.routers, running);
        for router in config.bgp.routers.iter().filter(|r| missing.contains(&r.vrf)) {
            if still_missing.contains(&router.vrf) {
                plans.push(Plan::Wait(router.clone()));
            } else {
                plans.push(prepare_start(router, config)?);
            }
        }
        Ok(())
    }

    /// Undoes what preparing `plans` did.
    fn abandon(&self, plans: Vec<Plan>) {
        for plan in plans {
            if let Plan::Keep(instance, prepared) = plan {
                instance.abandon(prepared);
            }
        }
    }

    /// Plans every running and new router's part and does what can fail; on an error undoes
    /// it and changes nothing. New routers in `missing` (no VRF device yet) are left out.
    fn prepare(
        &self,
        config: &config::Config,
        old: &config::Config,
        missing: &BTreeSet<String>,
    ) -> Result<Vec<Plan>, String> {
        let current = self.instances.borrow().clone();
        let mut plans = Vec::new();
        match self.prepare_into(config, old, &current, missing, &mut plans) {
            Ok(()) => Ok(plans),
            Err(e) => {
                self.abandon(plans);
                Err(e)
            }
        }
    }

    fn prepare_into(
        &self,
        config: &config::Config,
        old: &config::Config,
        current: &[Arc<Instance>],
        missing: &BTreeSet<String>,
        plans: &mut Vec<Plan>,
    ) -> Result<(), String> {
        let always_block = (&old.always_block[..], &config.always_block[..]);
        let named = |router: &Router| {
            format!("router {} (vrf {})", router.asn, vrf_display_name(&router.vrf))
        };
        let node = NodeView {
            running: current.iter().map(|i| i.vrf.clone()).collect(),
            missing_devices: missing.clone(),
        };
        for step in plan::routers(old, config, &node) {
            let instance = current.iter().find(|i| i.vrf == step.vrf());
            let router = config.bgp.routers.iter().find(|r| r.vrf == step.vrf());
            match (step, instance, router) {
                (RouterStep::Remove { .. }, Some(instance), _) => {
                    plans.push(Plan::Remove(instance.clone()));
                }
                (RouterStep::Restart { reasons, .. }, Some(instance), Some(router)) => {
                    Instance::check(router, config)
                        .map_err(|e| format!("{}: {e}", named(router)))?;
                    plans.push(Plan::Restart {
                        instance: instance.clone(),
                        router: router.clone(),
                        reason: reasons.join(", "),
                    });
                }
                (RouterStep::Keep { neighbors, .. }, Some(instance), Some(router)) => {
                    let prepared = instance
                        .prepare(router, &neighbors, config, always_block)
                        .map_err(|e| format!("{}: {e}", named(router)))?;
                    plans.push(Plan::Keep(instance.clone(), prepared));
                }
                (RouterStep::Start { .. }, _, Some(router)) => {
                    plans.push(prepare_start(router, config)?);
                }
                // Decided again once the policies ran (step 3).
                (RouterStep::Wait { .. }, _, _) => {}
                (step, _, _) => {
                    return Err(format!("internal: no running router or config for {step:?}"));
                }
            }
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
        if let Err(e) = self.fib.configure(fib_instances(config)).await {
            error!("reload: {e}");
        }
        if config.fib.nexthop_compat_mode != old.fib.nexthop_compat_mode {
            outcome.node.push(format!(
                "fib.nexthop_compat_mode {} → {}: applies when uplink starts next",
                old.fib.nexthop_compat_mode, config.fib.nexthop_compat_mode
            ));
        }
        // The class is read at every load, so it applies now; the connection does not move.
        let connection = |k: &Option<config::KubernetesConfig>| {
            k.as_ref().map(|k| (k.kubeconfig.clone(), k.namespace.clone()))
        };
        if connection(&config.kubernetes) != connection(&old.kubernetes) {
            outcome.node.push(
                "kubernetes: the source keeps its connection and namespace; the change applies \
                 when uplink starts next"
                    .to_string(),
            );
        }
        if config.fib.nexthop_objects != old.fib.nexthop_objects {
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
                        .start_router(&router, config, listener.clone())
                        .await
                    {
                        Ok(instance) => (RouterAction::Restarted, reason, Some(instance)),
                        Err(e) => {
                            // Back to the router as it ran, on the same socket.
                            error!(vrf = %router.vrf, "reload: router not started again: {e}");
                            let back =
                                self.start_router(&previous.router_config(), old, listener).await;
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
                        .start_router(&router, config, listener)
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
            let started = match prepare_start(router, &config) {
                Ok(Plan::Start(router, listener)) => {
                    self.start_router(&router, &config, listener).await
                }
                Ok(_) => continue,
                Err(e) => Err(e),
            };
            match started {
                Ok(instance) => next.push(Arc::new(instance)),
                Err(e) => error!(vrf = %router.vrf, "router {} not started: {e}", router.asn),
            }
        }
        self.instances.send_replace(Arc::new(next));
    }

    /// Starts a router on `listener`, from the announcer's current set for its VRF (health
    /// verdicts and the drain state included), following it: the one way a router starts.
    async fn start_router(
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
}

/// When a change of config is made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Occasion {
    /// The daemon's start: policies that fail do not keep the routers from starting.
    Start,
    /// Applied whole or not at all.
    Reload(Trigger),
}

/// What asked for a reload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Trigger {
    /// `uplink reload`, SIGHUP.
    Operator,
    /// A change of the objects read from the Kubernetes API.
    ApiObjects,
}

/// A new router's preparation: what it relies on checked (router id, OPENs, BFD profiles),
/// its VRF's listening socket bound. The one way a router is prepared to start, at start, on
/// a reload and when its VRF device appears.
fn prepare_start(router: &Router, config: &config::Config) -> Result<Plan, String> {
    let named = format!("router {} (vrf {})", router.asn, vrf_display_name(&router.vrf));
    Instance::check(router, config).map_err(|e| format!("{named}: {e}"))?;
    let listener = Instance::bind(&router.vrf).map_err(|e| format!("{named}: {e}"))?;
    Ok(Plan::Start(router.clone(), listener))
}

/// The messages of the `failed` policies among `outcomes`.
fn failure_messages(outcomes: &[PolicyOutcome], failed: &[String]) -> String {
    outcomes
        .iter()
        .filter(|p| failed.contains(&p.policy))
        .map(|p| format!("{}: {}", p.policy, p.message))
        .collect::<Vec<_>>()
        .join("; ")
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
