//! One routing instance (VRF): its RIB task, one session task per neighbor, and the listener
//! that hands incoming connections to the right session.

use super::announced::AnnouncedSet;
use super::configure::{
    bfd_spec, export_policy, fsm_config, import_policy, prefix_limit, transport_options, Restart,
};
use super::fsm::Fsm;
use super::reconfigure::{router_change, NeighborChange, NeighborStep};
use super::rib::RibConfig;
use super::rib_task::{self, PeerPolicy, RibHandle, RibSetup};
use super::session::{self, ClearHow, LiveOutcome, SessionCommand, SessionParams};
use super::stats::PeerStats;
use super::transport;
use crate::bfd::runtime::{BfdLink, BfdRegistrar, BfdRuntime, PeerSpec};
use crate::config::{self, vrf_display_name, GracefulRestartConfig, Neighbor, Password, Router};
use crate::logthrottle::{held_back_note, LogThrottle, LOG_PERIOD};
use ipnet::IpNet;
use serde::Serialize;
use std::net::{IpAddr, Ipv4Addr, SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError, RwLock};
use std::time::{Duration, Instant};
use tokio::net::TcpListener;
use tokio::sync::{mpsc, oneshot, watch};
use tracing::{debug, info, warn};

/// The BGP port (RFC 4271 §8.2.1).
pub const BGP_PORT: u16 = 179;

/// A configured neighbor and its running session.
#[derive(Clone)]
pub struct NeighborHandle {
    pub config: Neighbor,
    pub stats: Arc<PeerStats>,
    commands: mpsc::Sender<SessionCommand>,
    /// The task carrying BFD state to the session; ended when the neighbor is removed.
    bfd_follow: Option<tokio::task::AbortHandle>,
    /// The BFD session as configured (its profile's timers and authentication), shared with
    /// the task that registers it once BGP is up, so a reload that changes only the timers
    /// reaches it whether or not it is registered yet.
    bfd_spec: Option<Arc<Mutex<PeerSpec>>>,
}

impl NeighborHandle {
    fn bfd_spec(&self) -> Option<PeerSpec> {
        self.bfd_spec.as_ref().map(|s| s.lock().unwrap_or_else(PoisonError::into_inner).clone())
    }
}

/// The neighbors of an instance, shared with its listener (which hands each accepted
/// connection to the neighbor's session) and changed by a reload.
type Registry = Arc<RwLock<Vec<NeighborHandle>>>;

pub struct Instance {
    /// "" for the default VRF.
    pub vrf: String,
    pub asn: u32,
    pub router_id: Ipv4Addr,
    pub rib: RibHandle,
    neighbors: Registry,
    /// The router as running: a reload applies neighbor and RIB changes in place
    /// ([`Instance::prepare`]), and a changed AS, id or FIB instance by starting it again.
    router: Mutex<Router>,
    /// Kept for TCP-MD5 keys of neighbors added by a reload (RFC 2385: on the listener).
    listener: Arc<TcpListener>,
    listener_task: tokio::task::JoinHandle<()>,
    /// Seeds the jitter of neighbors added later, so no two share one.
    spawned: AtomicU64,
    /// The BFD thread: started with the first neighbor that has a `bfd_profile` (at start or
    /// on a reload).
    bfd: OnceLock<BfdRuntime>,
    /// The daemon started with the previous run's routes in the kernel (RFC 4724 R bit), and
    /// the Restart Time its neighbors advertise.
    restart: Restart,
}

impl Drop for Instance {
    fn drop(&mut self) {
        self.listener_task.abort();
    }
}

/// What a reload did to one instance. Serialised into `uplink reload`'s answer.
#[derive(Debug, Default, Clone, PartialEq, Eq, Serialize)]
pub struct ReloadReport {
    pub added: Vec<IpAddr>,
    /// Ended with Cease/Peer De-configured (RFC 4486 subcode 3).
    pub removed: Vec<IpAddr>,
    /// Ended with Cease/Other Configuration Change (subcode 6) and started again, each with
    /// the settings that required it.
    pub reset: Vec<NeighborReset>,
    /// Changed on the running session, each with what was applied.
    pub updated: Vec<NeighborUpdate>,
    /// The router's own settings applied live (`maximum_paths`, `multipath_relax`).
    pub settings: Vec<String>,
    /// Neighbors whose configuration did not change (a move to another file included).
    pub unchanged: usize,
    /// What could not be done, with the reason.
    pub deferred: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NeighborReset {
    pub address: IpAddr,
    pub reason: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NeighborUpdate {
    pub address: IpAddr,
    pub applied: Vec<String>,
}

/// A reload of one running instance, checked and prepared by [`Instance::prepare`] (where
/// everything that can fail happens) and carried out by [`Instance::apply`], or dropped with
/// [`Instance::abandon`] when another part of the reload failed.
#[derive(Debug)]
pub struct Prepared {
    router: Router,
    steps: Vec<Step>,
    /// The RIB's new settings, when `always_block` or the decision settings changed.
    rib_config: Option<RibConfig>,
    settings: Vec<String>,
    /// `always_block` may let through what it blocked: every session is asked to resend.
    refresh_all: bool,
    /// TCP-MD5 keys set on the listener, with the key each replaced.
    md5_undo: Vec<(IpAddr, Option<Password>)>,
    /// The node's graceful restart timers, for the sessions started.
    graceful: GracefulRestartConfig,
}

#[derive(Debug)]
enum Step {
    Remove(IpAddr),
    Reset { neighbor: Neighbor, reason: String, bfd: Option<PeerSpec> },
    Add { neighbor: Neighbor, bfd: Option<PeerSpec> },
    Update { neighbor: Neighbor, change: NeighborChange, bfd: BfdStep },
}

/// What a reload does to a kept neighbor's BFD session.
#[derive(Debug, PartialEq)]
enum BfdStep {
    Keep,
    /// Only the profile's timers (or its name) changed: a Poll Sequence, no restart.
    Retime(PeerSpec),
    /// Authentication, TTL or the profile itself (added, removed): a new BFD session.
    Restart(Option<PeerSpec>),
}

/// How long a session may take to take a reload's new policies.
const RECONFIGURE_TIMEOUT: Duration = Duration::from_secs(10);

impl Instance {
    /// The VRF's BGP listening socket, for [`Instance::start_on`].
    pub fn bind(vrf: &str) -> Result<Arc<TcpListener>, String> {
        transport::listen(BGP_PORT, vrf)
            .map(Arc::new)
            .map_err(|e| format!("cannot listen on TCP port {BGP_PORT}: {e}"))
    }

    /// The router id `router` runs with: configured, or derived from the node's addresses.
    pub fn router_id(router: &Router) -> Result<Ipv4Addr, String> {
        match router.id {
            Some(id) => Ok(id),
            None => derive_router_id(router).ok_or_else(|| {
                "no router id: set `id` on the router (no IPv4 route towards a neighbor to derive one from)"
                    .to_string()
            }),
        }
    }

    /// Checks what starting `router` relies on, without starting anything: its router id, the
    /// OPEN each session would send, each neighbor's BFD profile.
    pub fn check(router: &Router, config: &config::Config) -> Result<(), String> {
        let router_id = Self::router_id(router)?;
        for (index, n) in router.neighbors.iter().enumerate() {
            check_neighbor(router, n, router_id, index as u64, config)?;
        }
        Ok(())
    }

    /// Starts the router — its RIB task (originating what `announced` holds, and following
    /// it), its listener task and one session per neighbor — on a listening socket already
    /// bound for its VRF when the reload was prepared (a router started again gets its
    /// predecessor's socket, so port 179 is never given up).
    pub async fn start_on(
        router: &Router,
        config: &config::Config,
        fib: Option<&crate::fib::Fib>,
        announced: watch::Receiver<Arc<AnnouncedSet>>,
        listener: Arc<TcpListener>,
    ) -> Result<Instance, String> {
        let router_id = Self::router_id(router)?;
        let rib = rib_task::spawn(RibSetup {
            vrf: router.vrf.clone(),
            local_asn: router.asn,
            router_id,
            maximum_paths: router.maximum_paths,
            multipath_relax: router.multipath_relax,
            announced,
            always_block: config.always_block.clone(),
            fib: fib.and_then(|f| f.sender(&router.vrf)),
        });

        let neighbors: Registry = Arc::new(RwLock::new(Vec::new()));
        // The listener was bound when the reload was prepared: a peer's connection may wait in
        // its backlog (a peer reconnecting while we restart). Accepted before its neighbor is
        // registered, it would be refused as a stranger's; it waits for the neighbors instead.
        let (registered, neighbors_registered) = oneshot::channel();
        let listener_task = tokio::spawn(accept_loop(
            Arc::clone(&listener),
            Arc::clone(&neighbors),
            router.vrf.clone(),
            neighbors_registered,
        ));
        let instance = Instance {
            vrf: router.vrf.clone(),
            asn: router.asn,
            router_id,
            rib,
            neighbors,
            router: Mutex::new(router.clone()),
            listener,
            listener_task,
            spawned: AtomicU64::new(0),
            bfd: OnceLock::new(),
            restart: Restart {
                restart_time: config.graceful_restart.restart_time,
                restarted: fib.is_some_and(crate::fib::Fib::previous_run_kept),
            },
        };
        for n in &router.neighbors {
            if let Some(password) = &n.password {
                instance.set_md5_key(n.address, Some(password))?;
            }
            let handle =
                instance.spawn_neighbor(n, bfd_spec(n, config)?, &config.graceful_restart)?;
            instance.registry_mut().push(handle);
        }
        let _ = registered.send(());
        info!(vrf = vrf_display_name(&router.vrf), asn = router.asn, %router_id, "routing instance started with {} neighbor(s)", router.neighbors.len());
        Ok(instance)
    }

    /// The configured neighbors and their sessions, in config order.
    pub fn neighbors(&self) -> Vec<NeighborHandle> {
        self.neighbors.read().map(|n| n.clone()).unwrap_or_default()
    }

    /// `clear bgp`: each selected neighbor (`None`: all of them) with what its session did,
    /// or why it could not.
    pub async fn clear(
        &self,
        address: Option<IpAddr>,
        how: ClearHow,
    ) -> Vec<(IpAddr, Result<String, String>)> {
        let mut out = Vec::new();
        for handle in self.neighbors() {
            let neighbor = handle.config.address;
            if address.is_some_and(|a| a != neighbor) {
                continue;
            }
            let (reply, answer) = oneshot::channel();
            let outcome = match handle.commands.send(SessionCommand::Clear { how, reply }).await {
                Err(_) => Err("its session has ended".to_string()),
                Ok(()) => match tokio::time::timeout(RECONFIGURE_TIMEOUT, answer).await {
                    Ok(Ok(outcome)) => outcome,
                    Ok(Err(_)) => Err("its session has ended".to_string()),
                    Err(_) => Err("its session did not answer in time".to_string()),
                },
            };
            out.push((neighbor, outcome));
        }
        out
    }

    fn registry_mut(&self) -> std::sync::RwLockWriteGuard<'_, Vec<NeighborHandle>> {
        // A panic while holding the lock cannot leave the list half-changed (pushes and
        // removals only), so a poisoned lock is still usable.
        self.neighbors.write().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The running router's settings.
    pub fn router_config(&self) -> Router {
        self.router()
    }

    fn router(&self) -> Router {
        self.router.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// The listening socket, handed to a successor when the router starts again.
    pub fn listener(&self) -> Arc<TcpListener> {
        Arc::clone(&self.listener)
    }

    /// Installs (or with `None` removes) a neighbor's TCP-MD5 key on the listener: RFC 2385
    /// keys must be on the listening socket before the peer's SYN.
    fn set_md5_key(&self, address: IpAddr, password: Option<&Password>) -> Result<(), String> {
        let key = password.map_or(&[][..], |p| p.expose().as_bytes());
        match transport::set_md5_key(self.listener.as_raw_fd(), address, key) {
            Ok(()) => Ok(()),
            // Removing a key that is not there.
            Err(e) if password.is_none() && e.raw_os_error() == Some(libc::ENOENT) => Ok(()),
            Err(e) => Err(format!("neighbor {address}: cannot set the TCP-MD5 key: {e}")),
        }
    }

    /// Starts the session (and BFD session, `bfd`) of one neighbor. Its TCP-MD5 key is on the
    /// listener already.
    fn spawn_neighbor(
        &self,
        n: &Neighbor,
        bfd: Option<PeerSpec>,
        graceful: &GracefulRestartConfig,
    ) -> Result<NeighborHandle, String> {
        let index = self.spawned.fetch_add(1, Ordering::Relaxed);
        let stats = Arc::new(PeerStats::default());
        let restart =
            Restart { restart_time: graceful.restart_time, restarted: self.restart.restarted };
        let fsm_config = fsm_config(&self.router(), n, self.router_id, index, restart);
        // The config layer checked each setting; this checks what the OPEN relies on, the
        // derived router id included, before a session can send a wrong one.
        fsm_config.validate().map_err(|e| format!("neighbor {}: {e}", n.address))?;
        let fsm = Fsm::new(fsm_config);
        let params = SessionParams {
            remote: SocketAddr::new(n.address, n.port),
            local_asn: self.asn,
            transport: transport_options(n, &self.vrf),
            max_prefixes: prefix_limit(n),
            import: import_policy(n),
            export: export_policy(n),
            graceful_restart: n.graceful_restart.helps(),
            stale_path_time: graceful.stale_path_time,
        };
        let commands = session::spawn(params, fsm, self.rib.clone(), stats.clone());
        let bfd_spec = bfd.map(|spec| Arc::new(Mutex::new(spec)));
        let bfd_follow = match &bfd_spec {
            Some(spec) => Some(self.start_bfd(Arc::clone(spec), &stats, &commands)?),
            None => None,
        };
        Ok(NeighborHandle { config: n.clone(), stats, commands, bfd_follow, bfd_spec })
    }

    /// Starts a neighbor's BFD session (once its BGP session is up) and the task that carries
    /// its state to BGP.
    fn start_bfd(
        &self,
        spec: Arc<Mutex<PeerSpec>>,
        stats: &Arc<PeerStats>,
        commands: &mpsc::Sender<SessionCommand>,
    ) -> Result<tokio::task::AbortHandle, String> {
        let registrar = self.bfd_runtime()?.registrar();
        let task = start_bfd_after_bgp(registrar, spec, stats.clone(), commands.clone());
        Ok(tokio::spawn(task).abort_handle())
    }

    /// A reload's change to an unchanged neighbor's BFD session. New timers reach a running
    /// session as a Poll Sequence (RFC 5880 §6.8.3): it stays Up. Anything else (the profile
    /// added or removed, new authentication) starts it again: the old session ends with
    /// AdminDown, which is no failure (RFC 5882 §3.2), so the BGP session is not touched.
    fn change_bfd(&self, handle: &mut NeighborHandle, step: BfdStep) -> Result<(), String> {
        match step {
            BfdStep::Keep => Ok(()),
            BfdStep::Retime(spec) => {
                let Some(shared) = &handle.bfd_spec else { return Ok(()) };
                // Under the lock, so the registering task sends either the old spec before
                // this command or the new one after it (`start_bfd_after_bgp`).
                let mut current = shared.lock().unwrap_or_else(PoisonError::into_inner);
                if let Some(runtime) = self.bfd.get() {
                    runtime.reconfigure_peer(spec.peer, spec.config, spec.profile.clone());
                }
                *current = spec;
                Ok(())
            }
            BfdStep::Restart(spec) => {
                if let Some(task) = handle.bfd_follow.take() {
                    task.abort();
                }
                if let (Some(runtime), Some(_)) = (self.bfd.get(), &handle.bfd_spec) {
                    runtime.remove_peer(handle.config.address);
                }
                handle.bfd_spec = spec.map(|spec| Arc::new(Mutex::new(spec)));
                if let Some(spec) = &handle.bfd_spec {
                    let task = self.start_bfd(Arc::clone(spec), &handle.stats, &handle.commands)?;
                    handle.bfd_follow = Some(task);
                }
                Ok(())
            }
        }
    }

    /// The instance's BFD thread (RFC 5880), started by the first neighbor that asks for BFD.
    fn bfd_runtime(&self) -> Result<&BfdRuntime, String> {
        if let Some(runtime) = self.bfd.get() {
            return Ok(runtime);
        }
        let runtime = BfdRuntime::start(&self.vrf)
            .map_err(|e| format!("cannot start the BFD thread: {e}"))?;
        // Neighbors are spawned one at a time; were two to race, the loser's thread stops
        // when its handle is dropped here.
        let _ = self.bfd.set(runtime);
        self.bfd.get().ok_or_else(|| "the BFD thread did not start".to_string())
    }

    /// The BFD thread, when a neighbor has asked for BFD.
    pub fn bfd(&self) -> Option<&BfdRuntime> {
        self.bfd.get()
    }

    /// Ends a neighbor's session with Cease `subcode` and forgets it.
    async fn remove_neighbor(&self, address: IpAddr, subcode: u8, reason: &str) {
        let removed = {
            let mut list = self.registry_mut();
            list.iter().position(|n| n.config.address == address).map(|i| list.remove(i))
        };
        let Some(handle) = removed else { return };
        if let Some(task) = &handle.bfd_follow {
            task.abort();
        }
        if let (Some(runtime), Some(_)) = (self.bfd.get(), &handle.bfd_spec) {
            runtime.remove_peer(address);
        }
        let _ = handle
            .commands
            .send(SessionCommand::Remove { subcode, reason: reason.to_string() })
            .await;
    }

    /// Prepares the reload's plan for this instance (`neighbors`, from
    /// `reconfigure::neighbor_steps`) and does what can fail, changing nothing that runs:
    /// checks every new or reset neighbor's OPEN and BFD profile, starts the BFD thread if a
    /// neighbor needs it now, and installs new TCP-MD5 keys on the listener (undone by
    /// [`Instance::abandon`]). `always_block` is the node's old and new list.
    pub fn prepare(
        &self,
        router: &Router,
        neighbors: &[NeighborStep],
        config: &config::Config,
        always_block: (&[IpNet], &[IpNet]),
    ) -> Result<Prepared, String> {
        let running = self.neighbors();
        let mut steps = Vec::new();
        let mut keys: Vec<(IpAddr, Option<Password>, Option<Password>)> = Vec::new();
        let mut needs_bfd = false;
        let configured = |address: IpAddr| {
            router.neighbors.iter().find(|n| n.address == address).ok_or_else(|| {
                format!("internal: the plan names neighbor {address}, the config not")
            })
        };
        for step in neighbors {
            let (address, reset) = match step {
                NeighborStep::Remove(address) => {
                    steps.push(Step::Remove(*address));
                    continue;
                }
                NeighborStep::Reset { address, reasons } => (*address, Some(reasons)),
                NeighborStep::Update { address, .. } | NeighborStep::Add(address) => {
                    (*address, None)
                }
            };
            let new = configured(address)?;
            let bfd = bfd_spec(new, config)?;
            needs_bfd |= bfd.is_some();
            let old = running.iter().find(|old| old.config.address == address);
            match (step, old) {
                (NeighborStep::Update { change, .. }, Some(old)) => {
                    let bfd = match (old.bfd_spec(), bfd) {
                        (old, new) if old == new => BfdStep::Keep,
                        (Some(old), Some(new)) if only_timers_differ(&old, &new) => {
                            BfdStep::Retime(new)
                        }
                        (_, new) => BfdStep::Restart(new),
                    };
                    steps.push(Step::Update { neighbor: new.clone(), change: change.clone(), bfd });
                }
                (_, Some(old)) => {
                    check_neighbor(router, new, self.router_id, 0, config)?;
                    if old.config.password != new.password {
                        keys.push((address, old.config.password.clone(), new.password.clone()));
                    }
                    let reason = match reset {
                        Some(reasons) => reasons.join(", "),
                        None => "configuration changed".to_string(),
                    };
                    steps.push(Step::Reset { neighbor: new.clone(), reason, bfd });
                }
                (_, None) => {
                    check_neighbor(router, new, self.router_id, 0, config)?;
                    if new.password.is_some() {
                        keys.push((address, None, new.password.clone()));
                    }
                    steps.push(Step::Add { neighbor: new.clone(), bfd });
                }
            }
        }
        if needs_bfd {
            self.bfd_runtime()?;
        }

        let current = self.router();
        let settings = router_change(&current, router).live;
        let (old_block, new_block) = always_block;
        let rib_config = (!settings.is_empty() || old_block != new_block).then(|| RibConfig {
            router_id: self.router_id,
            maximum_paths: router.maximum_paths,
            multipath_relax: router.multipath_relax,
            always_block: new_block.to_vec(),
        });
        let mut prepared = Prepared {
            router: router.clone(),
            steps,
            rib_config,
            settings,
            refresh_all: super::reconfigure::always_block_widened(old_block, new_block),
            md5_undo: Vec::new(),
            graceful: config.graceful_restart.clone(),
        };
        // Last, as the one step here that changes the kernel: undone if it fails half-way.
        for (address, old, new) in keys {
            if let Err(e) = self.set_md5_key(address, new.as_ref()) {
                self.abandon(prepared);
                return Err(e);
            }
            prepared.md5_undo.push((address, old));
        }
        Ok(prepared)
    }

    /// Undoes what [`Instance::prepare`] did: the TCP-MD5 keys it installed.
    pub fn abandon(&self, prepared: Prepared) {
        for (address, old) in prepared.md5_undo.into_iter().rev() {
            if let Err(e) = self.set_md5_key(address, old.as_ref()) {
                warn!(vrf = %self.vrf, "reload abandoned: {e}");
            }
        }
    }

    /// Carries out a prepared reload: neighbors that left end with Cease/Peer De-configured
    /// (RFC 4486 subcode 3); neighbors whose session settings changed are reset with
    /// Cease/Other Configuration Change (subcode 6); policies, prefix limits and BFD timers
    /// change on the running sessions; new neighbors start. Every other session is not touched.
    pub async fn apply(&self, prepared: Prepared) -> ReloadReport {
        let mut report = ReloadReport { settings: prepared.settings, ..Default::default() };
        *self.router.lock().unwrap_or_else(PoisonError::into_inner) = prepared.router;
        // The RIB first: a ROUTE-REFRESH sent below must meet the new `always_block`.
        if let Some(rib_config) = prepared.rib_config {
            if let Err(e) = self.rib.set_config(rib_config).await {
                report.deferred.push(format!("RIB settings: {e}"));
            }
        }
        for step in prepared.steps {
            match step {
                Step::Remove(address) => {
                    self.remove_neighbor(address, 3, "peer de-configured").await;
                    if let Err(e) = self.set_md5_key(address, None) {
                        report.deferred.push(e);
                    }
                    report.removed.push(address);
                }
                Step::Reset { neighbor, reason, bfd } => {
                    let address = neighbor.address;
                    info!(vrf = %self.vrf, "reload: resetting neighbor {address}: {reason}");
                    self.remove_neighbor(address, 6, "configuration changed").await;
                    self.start_neighbor(&neighbor, bfd, &prepared.graceful, &mut report);
                    report.reset.push(NeighborReset { address, reason });
                }
                Step::Add { neighbor, bfd } => {
                    self.start_neighbor(&neighbor, bfd, &prepared.graceful, &mut report);
                    report.added.push(neighbor.address);
                }
                Step::Update { neighbor, change, bfd } => {
                    let refresh = change.import_widened || prepared.refresh_all;
                    if change.is_empty() && bfd == BfdStep::Keep && !refresh {
                        report.unchanged += 1;
                        self.set_config_of(&neighbor);
                        continue;
                    }
                    let applied = self.update_neighbor(&neighbor, &change, bfd, refresh).await;
                    match applied {
                        Ok(applied) if applied.is_empty() => report.unchanged += 1,
                        Ok(applied) => report
                            .updated
                            .push(NeighborUpdate { address: neighbor.address, applied }),
                        Err(Reset(reason)) => {
                            report.reset.push(NeighborReset { address: neighbor.address, reason })
                        }
                    }
                }
            }
        }
        report
    }

    fn start_neighbor(
        &self,
        n: &Neighbor,
        bfd: Option<PeerSpec>,
        graceful: &GracefulRestartConfig,
        report: &mut ReloadReport,
    ) {
        match self.spawn_neighbor(n, bfd, graceful) {
            Ok(handle) => self.registry_mut().push(handle),
            Err(e) => report.deferred.push(format!("neighbor {}: {e}", n.address)),
        }
    }

    /// Records a neighbor's new configuration (its source files, say) on its handle.
    fn set_config_of(&self, n: &Neighbor) {
        if let Some(handle) = self.registry_mut().iter_mut().find(|h| h.config.address == n.address)
        {
            handle.config = n.clone();
        }
    }

    /// Applies a kept neighbor's live changes: new policies to its session (and the RIB),
    /// ROUTE-REFRESH when more may be accepted now, its BFD session's new timers or a new BFD
    /// session. Returns what was applied, or the reason the session had to be reset.
    async fn update_neighbor(
        &self,
        n: &Neighbor,
        change: &NeighborChange,
        bfd: BfdStep,
        refresh: bool,
    ) -> Result<Vec<String>, Reset> {
        let mut applied = Vec::new();
        let commands = {
            let mut list = self.registry_mut();
            let Some(handle) = list.iter_mut().find(|h| h.config.address == n.address) else {
                return Ok(applied);
            };
            handle.config = n.clone();
            let note = match &bfd {
                BfdStep::Keep => None,
                BfdStep::Retime(spec) => Some(format!(
                    "bfd_profile {:?}: new timers (Poll Sequence, RFC 5880 §6.8.3; the BFD session stays up)",
                    spec.profile
                )),
                BfdStep::Restart(Some(spec)) => {
                    Some(format!("bfd_profile {:?}: BFD session started again", spec.profile))
                }
                BfdStep::Restart(None) => Some("bfd_profile removed: BFD session ended".into()),
            };
            match self.change_bfd(handle, bfd) {
                Ok(()) => applied.extend(note),
                Err(e) => applied.push(format!("BFD not changed: {e}")),
            }
            handle.commands.clone()
        };
        if !change.policy() && !refresh {
            return Ok(applied);
        }
        let policy = change.policy().then(|| PeerPolicy {
            import: import_policy(n),
            export: export_policy(n),
            max_prefixes: prefix_limit(n),
        });
        let (reply, answer) = oneshot::channel();
        let command = SessionCommand::Reconfigure { policy, refresh, reply };
        if commands.send(command).await.is_err() {
            return Ok(applied);
        }
        let outcome = tokio::time::timeout(RECONFIGURE_TIMEOUT, answer).await;
        let established = match outcome {
            Ok(Ok(LiveOutcome::Reset(reason))) => return Err(Reset(reason)),
            Ok(Ok(LiveOutcome::Applied { refreshed })) => Some(refreshed),
            Ok(Ok(LiveOutcome::NotEstablished)) => None,
            Ok(Err(_)) | Err(_) => {
                applied.push("the session did not confirm the new policies in time".into());
                None
            }
        };
        if change.import {
            let what = match established {
                Some(true) => "to_receive (ROUTE-REFRESH sent; what it refuses now was withdrawn)",
                Some(false) => "to_receive (narrower: what it refuses now was withdrawn)",
                None => "to_receive",
            };
            applied.push(what.to_string());
        } else if established == Some(true) {
            applied.push("always_block: ROUTE-REFRESH sent".into());
        }
        if change.export {
            applied.push(format!(
                "to_advertise {} (new UPDATEs for what changed)",
                change.export_parts.join(", ")
            ));
        }
        if change.max_prefixes {
            applied.push(format!(
                "max_prefixes {}",
                n.max_prefixes.map_or("none".to_string(), |m| m.limit.to_string())
            ));
        }
        if established.is_none() && change.policy() {
            applied.push("(the session is not up: it starts with them)".into());
        }
        Ok(applied)
    }

    /// Ends the instance for a reload: every session with Cease `subcode` (RFC 4486: 3 for a
    /// router removed, 6 for one whose settings changed), then the listener and BFD thread, so
    /// a new instance can take the VRF's port 179.
    pub async fn stop(&self, subcode: u8, reason: &str) {
        for n in self.neighbors() {
            self.remove_neighbor(n.config.address, subcode, reason).await;
            // A successor may take the listener over: it starts with no key of ours on it.
            if n.config.password.is_some() {
                if let Err(e) = self.set_md5_key(n.config.address, None) {
                    warn!(vrf = %self.vrf, "{e}");
                }
            }
        }
        self.listener_task.abort();
        if let Some(bfd) = self.bfd.get() {
            bfd.stop();
        }
    }

    /// This run started with the previous run's routes in the kernel (a graceful restart).
    pub fn restarted(&self) -> bool {
        self.restart.restarted
    }

    /// The Restart Time this router's graceful-restart neighbors advertise.
    pub fn restart_time(&self) -> Duration {
        self.restart.restart_time
    }

    /// Whether every neighbor with graceful restart is Established and has sent End-of-RIB
    /// for all its families: after our restart, the point where the previous run's routes
    /// that did not come back can go (RFC 4724 §4.1).
    pub fn restart_converged(&self) -> bool {
        self.neighbors().iter().filter(|n| n.config.graceful_restart.restarts()).all(|n| {
            let snap = n.stats.snapshot();
            snap.state == "Established" && snap.end_of_rib_received
        })
    }

    /// Stops the sessions for a daemon shutdown. With `graceful`, a neighbor with graceful
    /// restart gets no NOTIFICATION: its connection simply closes when the process exits, so
    /// the peer keeps our routes for our Restart Time (RFC 4724 §4.2). Every other session
    /// ends with Cease/Administrative Shutdown (RFC 4486 §4, subcode 2) and an RFC 9003
    /// message.
    pub async fn shutdown(&self, graceful: bool) {
        for n in self.neighbors() {
            if graceful && n.config.graceful_restart.restarts() {
                continue;
            }
            let _ = n
                .commands
                .send(SessionCommand::Stop { subcode: 2, reason: "uplink is shutting down".into() })
                .await;
        }
    }
}

/// Hands each accepted connection to its neighbor's session, after the GTSM check. It never
/// waits on a session (a full command queue drops the connection: the peer retries), and
/// what strangers and misconfigured peers cause is logged once per period with a count.
async fn accept_loop(
    listener: Arc<TcpListener>,
    neighbors: Registry,
    vrf: String,
    neighbors_registered: oneshot::Receiver<()>,
) {
    // The instance failed to start (its sender dropped): nothing to accept for.
    if neighbors_registered.await.is_err() {
        return;
    }
    let vrf_name = vrf_display_name(&vrf);
    let mut accept_errors = LogThrottle::new(LOG_PERIOD);
    let mut gtsm_refusals = LogThrottle::new(LOG_PERIOD);
    let mut busy_sessions = LogThrottle::new(LOG_PERIOD);
    let mut strangers = LogThrottle::new(LOG_PERIOD);
    loop {
        let (stream, from) = match listener.accept().await {
            Ok(pair) => pair,
            Err(e) => {
                // EMFILE and the like: wait instead of spinning.
                if let Some(held) = accept_errors.event(Instant::now()) {
                    warn!(vrf = vrf_name, "accept failed: {e}{}", held_back_note(held));
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let ip = from.ip().to_canonical();
        // The kernel hands the saved SYN out once: read it for every connection.
        let syn_ttl = transport::syn_ttl(stream.as_raw_fd());
        let found = neighbors.read().ok().and_then(|list| {
            list.iter()
                .find(|n| n.config.address == ip)
                .map(|n| (transport_options(&n.config, &vrf).min_ttl, n.commands.clone()))
        });
        let now = Instant::now();
        match found {
            Some((Some(min_ttl), _)) if syn_ttl.is_none_or(|ttl| ttl < min_ttl) => {
                // RFC 5082 §3: a GTSM peer's packets must arrive with TTL >= 256 - hops.
                if let Some(held) = gtsm_refusals.event(now) {
                    warn!(
                        vrf = vrf_name, peer = %ip,
                        "refused connection from {ip}: its SYN arrived with TTL {syn_ttl:?}, \
                         ttl_security requires at least {min_ttl} (RFC 5082){}",
                        held_back_note(held)
                    );
                }
            }
            Some((_, tx)) => {
                debug!(vrf = vrf_name, peer = %ip, "accepted connection from {ip}");
                match tx.try_send(SessionCommand::Accepted(stream)) {
                    Ok(()) => {}
                    Err(mpsc::error::TrySendError::Full(_)) => {
                        if let Some(held) = busy_sessions.event(now) {
                            warn!(
                                vrf = vrf_name, peer = %ip,
                                "closed connection from {ip}: its session has not taken the \
                                 previous ones yet{}",
                                held_back_note(held)
                            );
                        }
                    }
                    // The neighbor is being removed.
                    Err(mpsc::error::TrySendError::Closed(_)) => {}
                }
            }
            // RFC 4271 §8.2.1.5 leaves unconfigured peers to policy: refuse them.
            None => {
                if let Some(held) = strangers.event(now) {
                    info!(
                        vrf = vrf_name, peer = %ip,
                        "refused connection from unconfigured peer {ip}{}",
                        held_back_note(held)
                    );
                }
            }
        }
    }
}

/// Starts the neighbor's BFD session once its BGP session has been Established, then follows
/// it for good. FRR's bgpd does the same: it (re)registers its BFD session when the BGP
/// session comes up, with the session's addresses, and its bfdd then restarts that session.
/// A BFD session of ours already Up at that moment saw the peer signal Down, and took BGP down
/// with it: one flap at every start (seen in the VM tier against FRR 8.4).
async fn start_bfd_after_bgp(
    registrar: BfdRegistrar,
    spec: Arc<Mutex<PeerSpec>>,
    stats: Arc<PeerStats>,
    session: mpsc::Sender<SessionCommand>,
) {
    while stats.established_count.load(Ordering::Relaxed) == 0 {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Registered under the lock a reload's new timers take (`Instance::change_bfd`).
    let registered = {
        let spec = spec.lock().unwrap_or_else(PoisonError::into_inner);
        registrar.add_peer(spec.clone()).map_err(|e| (spec.peer, e))
    };
    match registered {
        Ok(link) => follow_bfd(link, session).await,
        Err((peer, e)) => warn!(%peer, "cannot start the BFD session: {e}"),
    }
}

/// Carries a neighbor's BFD state to its session task (RFC 5882 §4.3): every Down is
/// delivered, even when BFD is already Up again by the time this task runs.
async fn follow_bfd(mut link: watch::Receiver<BfdLink>, session: mpsc::Sender<SessionCommand>) {
    let mut downs_seen = 0;
    while link.changed().await.is_ok() {
        let now = *link.borrow_and_update();
        if now.downs > downs_seen {
            downs_seen = now.downs;
            if session.send(SessionCommand::BfdState { up: false }).await.is_err() {
                return;
            }
        }
        if now.up && session.send(SessionCommand::BfdState { up: true }).await.is_err() {
            return;
        }
    }
}

/// A session reset by a reload, with the reason.
struct Reset(String);

/// Checks what a neighbor's session relies on: the OPEN it would send, its BFD profile.
fn check_neighbor(
    router: &Router,
    n: &Neighbor,
    router_id: Ipv4Addr,
    index: u64,
    config: &config::Config,
) -> Result<(), String> {
    let restart = Restart { restart_time: config.graceful_restart.restart_time, restarted: false };
    fsm_config(router, n, router_id, index, restart)
        .validate()
        .map_err(|e| format!("neighbor {}: {e}", n.address))?;
    bfd_spec(n, config)?;
    Ok(())
}

/// Whether two BFD sessions differ in their profile's timers (or its name) only.
fn only_timers_differ(old: &PeerSpec, new: &PeerSpec) -> bool {
    let PeerSpec { peer, local, hop, config: _, minimum_ttl, profile: _, auth } = new;
    old.peer == *peer
        && old.local == *local
        && old.hop == *hop
        && old.minimum_ttl == *minimum_ttl
        && old.auth == *auth
}

/// The node's source address towards its first IPv4 neighbor, as FRR would pick an
/// interface address: `connect` on a UDP socket sends nothing but selects the route.
fn derive_router_id(router: &Router) -> Option<Ipv4Addr> {
    router.neighbors.iter().find_map(|n| {
        let IpAddr::V4(_) = n.address else { return None };
        let sock = UdpSocket::bind("0.0.0.0:0").ok()?;
        sock.connect(SocketAddr::new(n.address, BGP_PORT)).ok()?;
        match sock.local_addr().ok()?.ip() {
            IpAddr::V4(v4) if !v4.is_unspecified() => Some(v4),
            _ => None,
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bfd::runtime::Hop;
    use crate::bfd::session::SessionConfig;

    fn spec(interval_ms: u64, minimum_ttl: u8) -> PeerSpec {
        let interval = Duration::from_millis(interval_ms);
        PeerSpec {
            peer: "10.0.0.1".parse().unwrap(),
            local: None,
            hop: Hop::Single,
            config: SessionConfig {
                desired_min_tx: interval,
                required_min_rx: interval,
                detect_mult: 3,
                passive: false,
            },
            minimum_ttl,
            profile: "fast".into(),
            auth: None,
        }
    }

    /// A peer that connected while the router was starting (its connection waiting in the
    /// listener's backlog, as a ToR's does while uplink restarts) gets its session's OPEN, not
    /// a connection closed as a stranger's.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_connection_waiting_at_the_start_reaches_its_neighbor() {
        use tokio::io::AsyncReadExt;
        let text = "[[bgp.routers]]\nasn = 65001\nid = \"192.0.2.1\"\n\n\
                    [[bgp.routers.neighbors]]\naddress = \"127.0.0.1\"\nasn = 65002\n";
        let config = crate::config::load_str("uplink.toml", text).unwrap_or_else(|e| panic!("{e}"));
        let router = config.bgp.routers.first().expect("a router");
        for attempt in 0..20 {
            let listener = Arc::new(TcpListener::bind("127.0.0.1:0").await.unwrap());
            let port = listener.local_addr().unwrap().port();
            let mut peer = tokio::net::TcpStream::connect(("127.0.0.1", port)).await.unwrap();
            let (_set, announced) = watch::channel(Arc::new(AnnouncedSet::default()));
            let instance = Instance::start_on(router, &config, None, announced, listener).await;
            let _instance = instance.unwrap_or_else(|e| panic!("{e}"));
            let mut header = [0u8; 19];
            tokio::time::timeout(Duration::from_secs(5), peer.read_exact(&mut header))
                .await
                .expect("an OPEN within 5 s")
                .unwrap_or_else(|e| panic!("attempt {attempt}: the connection was closed: {e}"));
            assert_eq!(header[..16], [0xff; 16]);
            assert_eq!(header[18], 1, "an OPEN");
        }
    }

    /// A profile's timers change with a Poll Sequence; anything else about the BFD session
    /// starts it again.
    #[test]
    fn only_timer_changes_keep_the_bfd_session() {
        assert!(only_timers_differ(&spec(300, 254), &spec(200, 254)));
        let mut renamed = spec(200, 254);
        renamed.profile = "faster".into();
        assert!(only_timers_differ(&spec(300, 254), &renamed));
        assert!(!only_timers_differ(&spec(300, 254), &spec(300, 250)));
        let mut multihop = spec(300, 254);
        multihop.hop = Hop::Multi;
        assert!(!only_timers_differ(&spec(300, 254), &multihop));
    }
}
