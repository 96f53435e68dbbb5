//! `uplink run`: load the config, start one routing instance per `[[bgp.routers]]`, serve the
//! control socket, tell systemd we are ready, and shut down cleanly on SIGTERM/SIGINT
//! (every session gets a Cease/Administrative Shutdown, RFC 4486 §4).

use crate::bgp::instance::Instance;
use crate::config;
use crate::control::protocol::Request;
use crate::ops::systemd;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use tracing::{error, info, warn};

/// Runs the daemon until a termination signal. A config with a mistake never half-applies:
/// it is rejected before anything starts.
pub fn run(config_path: &Path, socket: &Path) -> Result<(), String> {
    let config =
        config::load(config_path).map_err(|e| format!("config rejected, not starting:\n{e}"))?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .thread_name("uplink")
        .build()
        .map_err(|e| format!("cannot start the runtime: {e}"))?;
    runtime.block_on(async move {
        // The FIB writer starts first: it purges stale routes before any session is up.
        let fib_instances =
            config.bgp.routers.iter().map(crate::fib::FibInstanceConfig::of).collect();
        let fib = crate::fib::start(fib_instances, config.fib.nexthop_objects)?;
        let mut instances = Vec::new();
        for router in &config.bgp.routers {
            let instance = Instance::start(router, &config, Some(&fib)).await.map_err(|e| {
                format!("router {} (vrf {:?}): {e}", router.asn, router.vrf)
            })?;
            instances.push(instance);
        }
        let ribs = instances.iter().map(|i| (i.vrf.clone(), i.rib.clone())).collect();
        // A drain outlives a daemon restart (an upgrade in a maintenance window must not
        // bring the VIPs back); the marker lives beside the socket, in /run, so a reboot
        // clears it.
        let marker = drain_marker(socket);
        let drained = marker.exists();
        if drained {
            info!(marker = %marker.display(), "starting drained: service addresses withdrawn");
        }
        let announcer = crate::announce::runtime::spawn(
            config.announce.clone(),
            crate::announce::router_inputs(&config),
            ribs,
            drained,
        );
        let (running_tx, running) = tokio::sync::watch::channel(Arc::new(config));
        let instances = Arc::new(instances);
        reload_on_sighup(config_path.to_path_buf(), instances.clone(), announcer.clone(), running_tx);
        let handler_instances = instances.clone();
        let _control = crate::control::server::serve(socket, move |request: Request| {
            let instances = handler_instances.clone();
            let (announcer, fib) = (announcer.clone(), fib.clone());
            let config = running.borrow().clone();
            let marker = marker.clone();
            async move {
                if crate::control::announcements::handles(&request) {
                    return crate::control::announcements::handle(&announcer, &config, &request);
                }
                match request {
                    Request::Fib { vrf } => crate::control::handler::fib(&fib, &vrf).await,
                    Request::Drain { drained } => set_drained(&announcer, &marker, drained).await,
                    other => crate::control::handler::handle(&instances, other).await,
                }
            }
        })
        .map_err(|e| format!("cannot open the control socket {}: {e}", socket.display()))?;
        info!(socket = %socket.display(), "uplink running with {} routing instance(s)", instances.len());
        systemd::ready(&format!("{} routing instance(s)", instances.len()));
        systemd::spawn_watchdog();

        wait_for_shutdown().await;
        systemd::stopping();
        info!("shutting down: sending Cease/Administrative Shutdown to every peer");
        for instance in instances.iter() {
            instance.shutdown().await;
        }
        // Give the NOTIFICATIONs a moment to leave.
        tokio::time::sleep(Duration::from_millis(300)).await;
        let _ = std::fs::remove_file(socket);
        Ok(())
    })
}

/// SIGHUP: re-reads the config. A config with an error changes nothing (the errors are
/// logged). Otherwise neighbors are added, removed or reset one by one (`Instance::reload`:
/// sessions whose neighbor did not change are not touched), the announcements follow, and
/// `show running-config` shows the new config. Routers added or removed need a restart.
fn reload_on_sighup(
    config_path: PathBuf,
    instances: Arc<Vec<Instance>>,
    announcer: crate::announce::runtime::AnnouncerHandle,
    running: tokio::sync::watch::Sender<Arc<config::Config>>,
) {
    use tokio::signal::unix::{signal, SignalKind};
    let Ok(mut hup) = signal(SignalKind::hangup()) else {
        error!("cannot install the SIGHUP handler; the config reloads only on restart");
        return;
    };
    tokio::spawn(async move {
        while hup.recv().await.is_some() {
            let config = match config::load(&config_path) {
                Ok(config) => config,
                Err(errors) => {
                    warn!("reload rejected, the running config stays:\n{errors}");
                    continue;
                }
            };
            for router in &config.bgp.routers {
                match instances.iter().find(|i| i.vrf == router.vrf) {
                    Some(instance) => {
                        let report = instance.reload(router, &config).await;
                        info!(
                            vrf = %router.vrf,
                            added = ?report.added, removed = ?report.removed, reset = ?report.reset,
                            "reload: neighbors updated; other sessions untouched"
                        );
                        for note in &report.deferred {
                            warn!(vrf = %router.vrf, "reload: {note}");
                        }
                    }
                    None => warn!(vrf = %router.vrf, "reload: a new router starts after a restart"),
                }
            }
            for instance in instances.iter() {
                if !config.bgp.routers.iter().any(|r| r.vrf == instance.vrf) {
                    warn!(vrf = %instance.vrf, "reload: removing a router needs a restart; it keeps running");
                }
            }
            let routers = crate::announce::router_inputs(&config);
            announcer.replace_config(config.announce.clone(), routers).await;
            info!("reload: applied {}", config_path.display());
            running.send_replace(Arc::new(config));
        }
    });
}

/// Where the drain state is kept: `drained` in the control socket's directory.
fn drain_marker(socket: &Path) -> PathBuf {
    socket.parent().unwrap_or(Path::new(".")).join("drained")
}

/// `uplink drain` / `undrain`: records the state (so a restart keeps it), then tells the
/// announcer. The marker is written first: if it cannot be, nothing changes.
async fn set_drained(
    announcer: &crate::announce::runtime::AnnouncerHandle,
    marker: &Path,
    drained: bool,
) -> Result<serde_json::Value, String> {
    let recorded = if drained {
        std::fs::write(marker, b"drained by `uplink drain`\n")
    } else {
        match std::fs::remove_file(marker) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            other => other,
        }
    };
    recorded.map_err(|e| format!("cannot record the drain state in {}: {e}", marker.display()))?;
    info!(drained, "drain requested over the control socket");
    announcer.drain(drained).await;
    Ok(serde_json::json!({ "drained": drained }))
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
