//! One routing instance (VRF): its RIB task, one session task per neighbor, and the listener
//! that hands incoming connections to the right session.

use super::announced::AnnouncedSet;
use super::configure::{
    bfd_spec, export_policy, fsm_config, import_policy, prefix_limit, transport_options, Restart,
};
use super::fsm::Fsm;
use super::rib_task::{self, RibHandle, RibSetup};
use super::session::{self, SessionCommand, SessionParams};
use super::stats::PeerStats;
use super::transport;
use crate::logthrottle::{held_back_note, LogThrottle, LOG_PERIOD};
use crate::bfd::runtime::{BfdLink, BfdRegistrar, BfdRuntime, PeerSpec};
use crate::config::{self, Neighbor, Router};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock, RwLock};
use std::time::{Duration, Instant};
use tokio::net::TcpListener;
use tokio::sync::{mpsc, watch};
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
    /// The BFD session as configured (its profile's timers and authentication), so a reload
    /// that changes the profile restarts it.
    bfd_spec: Option<PeerSpec>,
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
    /// The router as started: a reload applies neighbor changes and reports the rest.
    router: Router,
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

/// What a reload did to one instance.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct ReloadReport {
    pub added: Vec<IpAddr>,
    pub removed: Vec<IpAddr>,
    /// Neighbors whose settings changed: their session was reset (Cease subcode 6).
    pub reset: Vec<IpAddr>,
    /// Neighbors whose BFD profile changed: their BFD session started again (AdminDown to the
    /// peer, so its BGP stays up, RFC 5882 §3.2), their BGP session was not touched.
    pub bfd_restarted: Vec<IpAddr>,
    /// Neighbors that could not be started, with the reason.
    pub deferred: Vec<String>,
}

impl Instance {
    /// Starts the router: its RIB task (originating what `announced` holds, and following it),
    /// its listener and one session per neighbor.
    pub async fn start(
        router: &Router,
        config: &config::Config,
        fib: Option<&crate::fib::Fib>,
        announced: watch::Receiver<Arc<AnnouncedSet>>,
    ) -> Result<Instance, String> {
        let router_id = match router.id {
            Some(id) => id,
            None => derive_router_id(router).ok_or(
                "no router id: set `id` on the router (no IPv4 route towards a neighbor to derive one from)",
            )?,
        };
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

        let listener = Arc::new(
            transport::listen(BGP_PORT, &router.vrf)
                .map_err(|e| format!("cannot listen on TCP port {BGP_PORT}: {e}"))?,
        );

        let neighbors: Registry = Arc::new(RwLock::new(Vec::new()));
        let listener_task = tokio::spawn(accept_loop(
            Arc::clone(&listener),
            Arc::clone(&neighbors),
            router.vrf.clone(),
        ));
        let instance = Instance {
            vrf: router.vrf.clone(),
            asn: router.asn,
            router_id,
            rib,
            neighbors,
            router: router.clone(),
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
            let handle = instance.spawn_neighbor(n, config)?;
            instance.registry_mut().push(handle);
        }
        info!(vrf = %router.vrf, asn = router.asn, %router_id, "routing instance started with {} neighbor(s)", router.neighbors.len());
        Ok(instance)
    }

    /// The configured neighbors and their sessions, in config order.
    pub fn neighbors(&self) -> Vec<NeighborHandle> {
        self.neighbors.read().map(|n| n.clone()).unwrap_or_default()
    }

    fn registry_mut(&self) -> std::sync::RwLockWriteGuard<'_, Vec<NeighborHandle>> {
        // A panic while holding the lock cannot leave the list half-changed (pushes and
        // removals only), so a poisoned lock is still usable.
        self.neighbors.write().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Starts the session (and BFD session) of one neighbor.
    fn spawn_neighbor(
        &self,
        n: &Neighbor,
        config: &config::Config,
    ) -> Result<NeighborHandle, String> {
        if let Some(password) = &n.password {
            // RFC 2385: the key must be on the listening socket before the peer's SYN.
            transport::set_md5_key(
                self.listener.as_raw_fd(),
                n.address,
                password.expose().as_bytes(),
            )
            .map_err(|e| format!("neighbor {}: cannot set the TCP-MD5 key: {e}", n.address))?;
        }
        let index = self.spawned.fetch_add(1, Ordering::Relaxed);
        let stats = Arc::new(PeerStats::default());
        let restart = Restart {
            restart_time: config.graceful_restart.restart_time,
            restarted: self.restart.restarted,
        };
        let fsm_config = fsm_config(&self.router, n, self.router_id, index, restart);
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
            stale_path_time: config.graceful_restart.stale_path_time,
        };
        let bfd_spec = bfd_spec(n, config)?;
        let commands = session::spawn(params, fsm, self.rib.clone(), stats.clone());
        let bfd_follow = match &bfd_spec {
            Some(spec) => Some(self.start_bfd(spec.clone(), &stats, &commands)?),
            None => None,
        };
        Ok(NeighborHandle { config: n.clone(), stats, commands, bfd_follow, bfd_spec })
    }

    /// Starts a neighbor's BFD session (once its BGP session is up) and the task that carries
    /// its state to BGP.
    fn start_bfd(
        &self,
        spec: PeerSpec,
        stats: &Arc<PeerStats>,
        commands: &mpsc::Sender<SessionCommand>,
    ) -> Result<tokio::task::AbortHandle, String> {
        let registrar = self.bfd_runtime()?.registrar();
        let task = start_bfd_after_bgp(registrar, spec, stats.clone(), commands.clone());
        Ok(tokio::spawn(task).abort_handle())
    }

    /// Starts the BFD session of an unchanged neighbor again when its profile changed (new
    /// timers or authentication). Its BGP session is not touched: the old BFD session ends
    /// with AdminDown, which is no failure (RFC 5882 §3.2), and its state is no longer
    /// followed.
    fn restart_bfd(&self, address: IpAddr, spec: Option<PeerSpec>) -> Result<(), String> {
        let mut list = self.registry_mut();
        let Some(handle) = list.iter_mut().find(|n| n.config.address == address) else {
            return Ok(());
        };
        if let Some(task) = handle.bfd_follow.take() {
            task.abort();
        }
        if let (Some(runtime), Some(_)) = (self.bfd.get(), &handle.bfd_spec) {
            runtime.remove_peer(address);
        }
        handle.bfd_spec = spec.clone();
        if let Some(spec) = spec {
            handle.bfd_follow = Some(self.start_bfd(spec, &handle.stats, &handle.commands)?);
        }
        Ok(())
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
        if let (Some(runtime), Some(_)) = (self.bfd.get(), &handle.config.bfd_profile) {
            runtime.remove_peer(address);
        }
        let _ = handle
            .commands
            .send(SessionCommand::Remove { subcode, reason: reason.to_string() })
            .await;
    }

    /// Applies a reloaded config to this instance: neighbors that are new start, neighbors
    /// that left end with Cease/Peer De-configured (RFC 4486 subcode 3), neighbors whose
    /// settings changed are reset with Cease/Other Configuration Change (subcode 6), and every
    /// other session is not touched. Router-level changes are the caller's
    /// ([`Instance::reloads_in_place`]).
    pub async fn reload(&self, router: &Router, config: &config::Config) -> ReloadReport {
        let mut report = ReloadReport::default();
        let running = self.neighbors();
        for old in &running {
            match router.neighbors.iter().find(|n| n.address == old.config.address) {
                None => {
                    self.remove_neighbor(old.config.address, 3, "peer de-configured").await;
                    report.removed.push(old.config.address);
                }
                Some(new) if *new != old.config => {
                    self.remove_neighbor(old.config.address, 6, "configuration changed").await;
                    report.reset.push(old.config.address);
                }
                Some(same) => match bfd_spec(same, config) {
                    Ok(spec) if spec != old.bfd_spec => {
                        match self.restart_bfd(same.address, spec) {
                            Ok(()) => report.bfd_restarted.push(same.address),
                            Err(e) => {
                                report.deferred.push(format!("neighbor {}: {e}", same.address))
                            }
                        }
                    }
                    Ok(_) => {}
                    Err(e) => report.deferred.push(format!("neighbor {}: {e}", same.address)),
                },
            }
        }
        for n in &router.neighbors {
            let unchanged = running.iter().any(|old| old.config == *n);
            if unchanged {
                continue;
            }
            match self.spawn_neighbor(n, config) {
                Ok(handle) => {
                    if !report.reset.contains(&n.address) {
                        report.added.push(n.address);
                    }
                    self.registry_mut().push(handle);
                }
                Err(e) => report.deferred.push(format!("neighbor {}: {e}", n.address)),
            }
        }
        report
    }

    /// Whether `router` differs from the running one only in what [`Instance::reload`]
    /// applies in place (neighbors) or the announcer applies (`prefixes`, `imports`).
    pub fn reloads_in_place(&self, router: &Router) -> bool {
        let settings = |r: &Router| Router {
            neighbors: Vec::new(),
            prefixes: Vec::new(),
            imports: Vec::new(),
            sources: Vec::new(),
            ..r.clone()
        };
        settings(router) == settings(&self.router)
    }

    /// Ends the instance for a reload: every session with Cease `subcode` (RFC 4486: 3 for a
    /// router removed, 6 for one whose settings changed), then the listener and BFD thread, so
    /// a new instance can take the VRF's port 179.
    pub async fn stop(&self, subcode: u8, reason: &str) {
        for n in self.neighbors() {
            self.remove_neighbor(n.config.address, subcode, reason).await;
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
async fn accept_loop(listener: Arc<TcpListener>, neighbors: Registry, vrf: String) {
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
                    warn!(vrf = %vrf, "accept failed: {e}{}", held_back_note(held));
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
                        vrf = %vrf,
                        "refused connection from {ip}: its SYN arrived with TTL {syn_ttl:?}, \
                         ttl_security requires at least {min_ttl} (RFC 5082){}",
                        held_back_note(held)
                    );
                }
            }
            Some((_, tx)) => {
                debug!(vrf = %vrf, "accepted connection from {ip}");
                match tx.try_send(SessionCommand::Accepted(stream)) {
                    Ok(()) => {}
                    Err(mpsc::error::TrySendError::Full(_)) => {
                        if let Some(held) = busy_sessions.event(now) {
                            warn!(
                                vrf = %vrf,
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
                        vrf = %vrf,
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
    spec: PeerSpec,
    stats: Arc<PeerStats>,
    session: mpsc::Sender<SessionCommand>,
) {
    while stats.established_count.load(Ordering::Relaxed) == 0 {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let peer = spec.peer;
    match registrar.add_peer(spec) {
        Ok(link) => follow_bfd(link, session).await,
        Err(e) => warn!(%peer, "cannot start the BFD session: {e}"),
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
