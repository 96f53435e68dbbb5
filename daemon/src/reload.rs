//! SIGHUP: re-read the config and apply the difference, touching only what changed.
//!
//! A config with an error changes nothing (the errors are logged). Otherwise, router by router
//! (one per VRF):
//! - unchanged router settings: neighbors are added, removed or reset one by one
//!   ([`Instance::reload`]); sessions whose neighbor did not change are not touched;
//! - a router removed: its sessions end with Cease/Peer De-configured (RFC 4486 subcode 3) and
//!   its routes leave the kernel;
//! - a router whose own settings changed (asn, id, paths, install/table/metric): its sessions
//!   end with Cease/Other Configuration Change (subcode 6) and it starts again, as FRR does for
//!   a changed router-id; other routers' sessions are not touched;
//! - a router added: it starts.
//!
//! `prefixes`, `imports` and everything the announcer computes change the announcements only
//! (no session reset); the FIB writer's VRF leaks follow the new `imports`. Then
//! `show running-config` shows the new config.

use crate::announce::runtime::AnnouncerHandle;
use crate::announce::{compute_config, router_inputs, Announcements, RuntimeState};
use crate::bgp::instance::Instance;
use crate::config::{self, Router};
use crate::fib::{Fib, FibInstanceConfig};
use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;
use tracing::{error, info, warn};

/// The running routing instances. A reload publishes a new list; readers take a snapshot.
pub type InstanceList = Arc<Vec<Arc<Instance>>>;

/// How long a stopped instance may take to let go of its listening socket.
const RELEASE_TIMEOUT: Duration = Duration::from_secs(5);

/// What a reload works on.
pub struct Reloader {
    pub config_path: PathBuf,
    pub fib: Fib,
    pub announcer: AnnouncerHandle,
    pub instances: watch::Sender<InstanceList>,
    pub running: watch::Sender<Arc<config::Config>>,
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

impl Reloader {
    /// Reloads on every SIGHUP until the process ends.
    pub fn spawn(self) {
        use tokio::signal::unix::{signal, SignalKind};
        let Ok(mut hup) = signal(SignalKind::hangup()) else {
            error!("cannot install the SIGHUP handler; the config reloads only on restart");
            return;
        };
        tokio::spawn(async move {
            while hup.recv().await.is_some() {
                self.reload().await;
            }
        });
    }

    async fn reload(&self) {
        let config = match config::load(&self.config_path) {
            Ok(config) => config,
            Err(errors) => {
                warn!("reload rejected, the running config stays:\n{errors}");
                return;
            }
        };
        // Only the VRFs each router imports from are read from it (for the FIB's leaks).
        let announcements = compute_config(&config, RuntimeState::default());
        let current = self.instances.borrow().clone();

        // Routers that leave, or whose own settings changed, stop first.
        let mut kept: Vec<Arc<Instance>> = Vec::new();
        let mut stopped: Vec<Arc<Instance>> = Vec::new();
        for instance in current.iter() {
            match config.bgp.routers.iter().find(|r| r.vrf == instance.vrf) {
                None => {
                    info!(vrf = %instance.vrf, "reload: router removed, ending its sessions");
                    instance.stop(3, "router de-configured").await;
                    stopped.push(instance.clone());
                }
                Some(router)
                    if !instance.reloads_in_place(router)
                        || !self.fib.has_instance(&FibInstanceConfig::of(router)) =>
                {
                    info!(vrf = %instance.vrf, "reload: router settings changed, starting it again");
                    instance.stop(6, "router settings changed").await;
                    stopped.push(instance.clone());
                }
                Some(_) => kept.push(instance.clone()),
            }
        }
        drop(current);
        self.instances.send_replace(Arc::new(kept.clone()));
        if let Err(e) = self.fib.configure(fib_instances(&config, &announcements)).await {
            error!("reload: {e}");
        }
        for instance in stopped {
            release(instance).await;
        }

        // Routers that stay: neighbor by neighbor. New (and changed) routers: start.
        let mut next = Vec::new();
        for router in &config.bgp.routers {
            match kept.iter().find(|i| i.vrf == router.vrf) {
                Some(instance) => {
                    let report = instance.reload(router, &config).await;
                    info!(
                        vrf = %router.vrf,
                        added = ?report.added, removed = ?report.removed, reset = ?report.reset,
                        bfd_restarted = ?report.bfd_restarted,
                        "reload: neighbors updated; other sessions untouched"
                    );
                    for note in &report.deferred {
                        warn!(vrf = %router.vrf, "reload: {note}");
                    }
                    next.push(instance.clone());
                }
                None => match self.start(router, &config).await {
                    Ok(instance) => next.push(Arc::new(instance)),
                    Err(e) => {
                        error!(vrf = %router.vrf, "reload: router {} not started: {e}", router.asn)
                    }
                },
            }
        }
        self.instances.send_replace(Arc::new(next));
        self.announcer.replace_config(config.announce.clone(), router_inputs(&config)).await;
        info!("reload: applied {}", self.config_path.display());
        self.running.send_replace(Arc::new(config));
    }

    /// Starts a router; retries while a stopped instance of the same VRF still holds port 179.
    /// It starts from the announcer's current set for its VRF (health verdicts and the drain
    /// state included) and follows it.
    async fn start(&self, router: &Router, config: &config::Config) -> Result<Instance, String> {
        let deadline = tokio::time::Instant::now() + RELEASE_TIMEOUT;
        loop {
            let announced = self.announcer.subscribe(&router.vrf);
            match Instance::start(router, config, Some(&self.fib), announced).await {
                Ok(instance) => {
                    info!(vrf = %router.vrf, asn = router.asn, "reload: router started");
                    return Ok(instance);
                }
                Err(e) if tokio::time::Instant::now() < deadline && e.contains("listen") => {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                Err(e) => return Err(e),
            }
        }
    }
}

/// Waits until nobody (a control request in flight) holds a stopped instance any more, and
/// drops it: that closes its listening socket.
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
