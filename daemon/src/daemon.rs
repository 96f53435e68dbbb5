//! `uplink run`: load the config, start one routing instance per `[[bgp.routers]]`, serve the
//! control socket, tell systemd we are ready, and shut down cleanly on SIGTERM/SIGINT
//! (every session gets a Cease/Administrative Shutdown, RFC 4486 §4).

use crate::announce::runtime::DrainPhase;
use crate::bgp::instance::Instance;
use crate::config;
use crate::control::dispatch;
use crate::control::protocol::Request;
use crate::kubernetes::sessions::{SessionReport, SessionReports};
use crate::ops::{drain, systemd};
use crate::reload::{fib_instances, ApiInput, InstanceList, ReloadStats, Reloader};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;
use tracing::{error, info};

/// Runs the daemon until a termination signal. A config with a mistake never half-applies:
/// it is rejected before anything starts.
pub fn run(config_path: &Path, socket: &Path, state_dir: &Path) -> Result<(), String> {
    let config =
        config::load(config_path).map_err(|e| format!("config rejected, not starting:\n{e}"))?;
    // With `[kubernetes]`, the objects the last run read from the API take part from the
    // start: a node that boots while the API server is away announces what it did.
    let kept_objects = kept_api_objects(&config, state_dir)?;
    let mut refused_at_start = Vec::new();
    // What this load translates, the reloads use again.
    let mut manifests = config::ManifestCache::default();
    let config = match &kept_objects {
        Some(objects) => {
            let (loaded, refused) = config::load_with_api(config_path, objects, &mut manifests);
            for error in &refused {
                tracing::warn!("kept Kubernetes object refused, left out: {error}");
            }
            refused_at_start = refused;
            loaded.map_err(|e| format!("config rejected, not starting:\n{e}"))?
        }
        None => config,
    };
    // Before anything touches the kernel: a second daemon in this namespace stops here.
    let _instance_lock = crate::ops::instance_lock::acquire()?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .thread_name("uplink")
        .build()
        .map_err(|e| format!("cannot start the runtime: {e}"))?;
    runtime.block_on(async move {
        let network = crate::netconf::gate::NetworkGate::start()?;
        // The drain state and the announcements are known before any session starts, so a
        // peer's first UPDATEs already carry the node's prefixes. An operator's drain outlives
        // a daemon restart (an upgrade in a maintenance window must not bring the VIPs back).
        std::fs::create_dir_all(state_dir)
            .map_err(|e| format!("cannot create the state directory {}: {e}", state_dir.display()))?;
        let drain_marker = drain::marker(state_dir);
        let drain_phase = drain::initial_phase(&drain_marker);
        if drain_phase != DrainPhase::Serving {
            info!(marker = %drain_marker.display(), "starting drained: service addresses withdrawn");
        }
        let announcer = crate::announce::runtime::spawn(
            config.announce.clone(),
            crate::announce::router_inputs(&config),
            drain_phase,
        );
        let drain = drain::spawn(announcer.clone(), drain_marker, config.drain_time, drain_phase);
        crate::ops::inhibit::spawn(drain.clone(), config.drain_time);
        // The FIB writer starts before any session: it purges stale routes first, or, with
        // graceful restart, keeps the previous run's until the peers have sent End-of-RIB.
        let graceful = config.bgp.routers.iter().flat_map(|r| &r.neighbors).any(|n| n.graceful_restart.restarts());
        let fib = crate::fib::start(
            fib_instances(&config),
            &config.fib,
            graceful,
        )?;
        // The start is a reload from a config with no routers and no policies: the same
        // prepare (the policies first, then the routers whose VRF exists; docs/network.md)
        // and apply as every reload. Routers whose VRF is missing wait and start when it
        // appears.
        let empty = crate::reload::plan::empty_like(&config);
        let select_defer_time = config.graceful_restart.select_defer_time;
        let (running_tx, running) = watch::channel(Arc::new(empty));
        let (instances_tx, instances) = watch::channel::<InstanceList>(Arc::new(Vec::new()));
        let network_view = network.show();
        let reloads = Arc::new(ReloadStats::started());
        let (metrics_tx, metrics_sockets) = watch::channel(None);
        // Layer 2 mode's status, which the Kubernetes source writes as `ServiceL2Status`, and
        // what its membership reads from the API.
        let (layer2_status_tx, layer2_status) = crate::l2::runtime::status_channel();
        let (membership_from_api_tx, membership_from_api) = watch::channel(Arc::default());
        let api = match kept_objects {
            Some(objects) => {
                let links = crate::kubernetes::Links {
                    sessions: report_sessions(instances.clone()),
                    layer2: layer2_status,
                    layer2_membership: membership_from_api_tx,
                };
                let started = start_kubernetes(
                    &config,
                    state_dir,
                    running.clone(),
                    announcer.clone(),
                    links,
                    objects,
                    manifests,
                );
                Some(started.await?)
            }
            None => None,
        };
        // What `show kubernetes` and the metrics read. The start applies the kept set.
        let kubernetes = api.as_ref().map(|api| api.health.clone());
        let membership_from_api = api.is_some().then_some(membership_from_api);
        let reloader = Reloader {
            config_path: config_path.to_path_buf(),
            fib: fib.clone(),
            announcer: announcer.clone(),
            instances: instances_tx,
            running: running_tx,
            stats: reloads.clone(),
            network,
            metrics: metrics_tx,
            api,
        };
        if !config.network.policies.is_empty() {
            systemd::status("applying network policies");
        }
        let count = reloader.start(config).await.map_err(|e| format!("not starting: {e}"))?;
        if let Some(health) = &kubernetes {
            crate::kubernetes::health::update(health, |h| {
                h.applied = true;
                h.set_refused(&refused_at_start);
            });
        }
        tokio::spawn(finish_restart(
            instances.borrow().as_ref().clone(),
            fib.clone(),
            select_defer_time,
        ));
        let layer2 = crate::l2::runtime::spawn(
            running.clone(),
            &announcer,
            layer2_status_tx,
            membership_from_api,
        );
        let reload = reloader.spawn();
        crate::control::metrics::spawn(
            crate::control::metrics::Sources {
                instances: instances.clone(),
                fib: fib.clone(),
                announcer: announcer.clone(),
                reloads,
                running: running.clone(),
                kubernetes: kubernetes.clone(),
                layer2: Some(layer2.clone()),
            },
            metrics_sockets,
        );
        let fib_for_shutdown = fib.clone();
        let context = dispatch::Context {
            instances: instances.clone(),
            running,
            announcer,
            fib,
            drain: drain.clone(),
            reload,
            network: network_view,
            kubernetes,
            layer2: layer2.clone(),
        };
        let _control = crate::control::server::serve(socket, move |request: Request| {
            dispatch::answer(context.clone(), request)
        })
        .map_err(|e| format!("cannot open the control socket {}: {e}", socket.display()))?;
        info!(socket = %socket.display(), "uplink running with {count} routing instance(s)");
        systemd::ready(&format!("{count} routing instance(s)"));
        let (watched, watched_fib) = (instances.clone(), fib_for_shutdown.clone());
        systemd::spawn_watchdog(move || {
            let (instances, fib) = (watched.borrow().clone(), watched_fib.clone());
            async move { alive(&instances, &fib).await }
        });

        wait_for_shutdown().await;
        systemd::stopping();
        layer2.leave().await;
        // With graceful restart the peers keep our routes and the kernel keeps theirs until
        // we are back, also after an operator's drain (an upgrade is drain, restart; the
        // prefixes the drain kept must stay). After a drain for a shutdown the node is going
        // away: every session ends with a Cease and our routes leave the kernel.
        let graceful = graceful && !drain.for_shutdown();
        if graceful {
            info!("shutting down for a graceful restart: routes stay in the kernel and at the peers");
        } else {
            info!("shutting down: sending Cease/Administrative Shutdown to every peer");
        }
        let instances = instances.borrow().clone();
        for instance in instances.iter() {
            instance.shutdown(graceful).await;
        }
        if !graceful {
            if let Err(e) = fib_for_shutdown.clear().await {
                error!("cannot remove uplink's routes from the kernel: {e}");
            }
        }
        // Give the NOTIFICATIONs a moment to leave.
        tokio::time::sleep(Duration::from_millis(300)).await;
        let _ = std::fs::remove_file(socket);
        Ok(())
    })
}

/// With `[kubernetes]`: the objects kept by the last run (none yet: an empty set).
fn kept_api_objects(
    config: &config::Config,
    state_dir: &Path,
) -> Result<Option<config::ApiObjects>, String> {
    if config.kubernetes.is_none() {
        return Ok(None);
    }
    if cfg!(not(feature = "kubernetes")) {
        return Err(
            "the config has [kubernetes], but this uplink was built without the \
                    `kubernetes` feature; use a build with it (make static) or remove the section"
                .to_string(),
        );
    }
    Ok(Some(crate::kubernetes::Snapshot::read(state_dir)))
}

/// Starts watching the API server; its objects reach the reloader.
#[cfg(feature = "kubernetes")]
async fn start_kubernetes(
    config: &config::Config,
    state_dir: &Path,
    running: watch::Receiver<Arc<config::Config>>,
    announcer: crate::announce::runtime::AnnouncerHandle,
    links: crate::kubernetes::Links,
    kept: config::ApiObjects,
    manifests: config::ManifestCache,
) -> Result<ApiInput, String> {
    let (Some(settings), Some(node)) = (&config.kubernetes, &config.announce.node.name) else {
        return Err("[kubernetes] needs [node] name: the name of this node's Node object".into());
    };
    let source =
        crate::kubernetes::start(settings, node, state_dir, running, announcer, links, kept)
            .await?;
    Ok(ApiInput {
        objects: source.objects,
        health: source.health,
        manifests: std::sync::Mutex::new(manifests),
    })
}

/// Never called: `kept_api_objects` refuses `[kubernetes]` in a build without the feature.
#[cfg(not(feature = "kubernetes"))]
async fn start_kubernetes(
    _config: &config::Config,
    _state_dir: &Path,
    _running: watch::Receiver<Arc<config::Config>>,
    _announcer: crate::announce::runtime::AnnouncerHandle,
    _links: crate::kubernetes::Links,
    _kept: config::ApiObjects,
    _manifests: config::ManifestCache,
) -> Result<ApiInput, String> {
    Err("built without the `kubernetes` feature".into())
}

/// How often the sessions are looked at for `BGPSessionState`.
const SESSION_REPORT_PERIOD: Duration = Duration::from_secs(2);

/// Each session's BGP and BFD state, for frr-k8s's `BGPSessionState` (the Kubernetes source
/// cannot see the routing instances): looked at every 2 s, handed over when one changed.
fn report_sessions(instances: watch::Receiver<InstanceList>) -> SessionReports {
    let (reports, receiver) = watch::channel(Vec::new());
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(SESSION_REPORT_PERIOD);
        loop {
            tick.tick().await;
            let list = instances.borrow().clone();
            let mut now = Vec::new();
            for instance in list.iter() {
                let bfd = match instance.bfd() {
                    Some(bfd) => bfd.peers().await.unwrap_or_default(),
                    None => Vec::new(),
                };
                for neighbor in instance.neighbors() {
                    let address = neighbor.config.address;
                    let bfd_state = match neighbor.config.bfd_profile {
                        None => "N/A",
                        Some(_) => match bfd.iter().find(|p| p.spec.peer == address) {
                            Some(p) if p.state == crate::bfd::packet::State::Up => "Up",
                            _ => "Down",
                        },
                    };
                    now.push(SessionReport {
                        vrf: instance.vrf.clone(),
                        peer: address,
                        bgp: neighbor.stats.snapshot().state,
                        bfd: bfd_state.to_string(),
                    });
                }
            }
            now.sort();
            let changed = reports.send_if_modified(|current| {
                let changed = *current != now;
                if changed {
                    *current = std::mem::take(&mut now);
                }
                changed
            });
            if !changed && reports.is_closed() {
                return;
            }
        }
    });
    receiver
}

/// RFC 4724 §4.1, the restarting side: once every graceful-restart neighbor is back and has
/// sent End-of-RIB — or `select_defer_time` has passed — the previous run's routes that did
/// not come back leave the kernel.
async fn finish_restart(instances: Vec<Arc<Instance>>, fib: crate::fib::Fib, limit: Duration) {
    if fib.previous_run_kept() {
        let deadline = tokio::time::Instant::now() + limit;
        while !instances.iter().all(|i| i.restart_converged()) {
            if tokio::time::Instant::now() >= deadline {
                info!("graceful restart: not every peer sent End-of-RIB within {limit:?}");
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    if let Err(e) = fib.end_restart().await {
        error!("{e}");
    }
}

/// Whether the parts that do the work answer: every RIB task, the FIB writer (everything sent
/// to it is written), every BFD thread.
async fn alive(instances: &[Arc<Instance>], fib: &crate::fib::Fib) -> Result<(), String> {
    for instance in instances {
        let vrf = config::vrf_display_name(&instance.vrf);
        instance.rib.summary().await.map_err(|e| format!("RIB of VRF {vrf}: {e}"))?;
        if let Some(bfd) = instance.bfd() {
            bfd.peers().await.map_err(|e| format!("BFD of VRF {vrf}: {e}"))?;
        }
    }
    fib.flush().await.map_err(|e| format!("FIB writer: {e}"))
}

async fn wait_for_shutdown() {
    use tokio::signal::unix::{signal, SignalKind};
    let (Ok(mut term), Ok(mut int)) =
        (signal(SignalKind::terminate()), signal(SignalKind::interrupt()))
    else {
        error!("cannot install signal handlers; running until killed");
        return std::future::pending().await;
    };
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
}
