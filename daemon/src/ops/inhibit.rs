//! Draining before a shutdown or reboot: uplink holds a logind "delay" inhibitor
//! (org.freedesktop.login1.Manager.Inhibit), and when logind announces the shutdown
//! (PrepareForShutdown(true)) it drains — GRACEFUL_SHUTDOWN, `drain_time`, withdrawal — and
//! only then releases the inhibitor, so the fabric has moved traffic away before the node goes.
//!
//! logind caps the delay at `InhibitDelayMaxSec` (5 s by default): the node image raises it
//! above `drain_time` (image/overlay/common/etc/systemd/logind.conf.d). Without logind (a
//! container, the test namespaces) this does nothing and says so once.

use std::time::Duration;

use futures_lite::StreamExt;
use tracing::{info, warn};
use zbus::zvariant::OwnedFd;

use super::drain::{DrainHandle, DrainReason, Outcome};

#[zbus::proxy(
    interface = "org.freedesktop.login1.Manager",
    default_service = "org.freedesktop.login1",
    default_path = "/org/freedesktop/login1"
)]
trait Manager {
    /// Returns a file descriptor that holds the inhibitor until it is closed.
    fn inhibit(&self, what: &str, who: &str, why: &str, mode: &str) -> zbus::Result<OwnedFd>;

    #[zbus(signal)]
    fn prepare_for_shutdown(&self, start: bool) -> zbus::Result<()>;
}

/// Holds the inhibitor and drains on shutdown, until the process ends.
pub fn spawn(drain: DrainHandle, drain_time: Duration) {
    tokio::spawn(async move {
        if let Err(e) = run(drain, drain_time).await {
            info!("no drain before shutdown (logind is not reachable over D-Bus: {e})");
        }
    });
}

async fn run(drain: DrainHandle, drain_time: Duration) -> zbus::Result<()> {
    let bus = zbus::Connection::system().await?;
    let manager = ManagerProxy::new(&bus).await?;
    let mut signals = manager.receive_prepare_for_shutdown().await?;
    let mut inhibitor = Some(take(&manager).await?);
    // Whether this module drained the node (an operator's drain is not undone here).
    let mut drained_for_shutdown = false;
    info!("holding a logind delay inhibitor: a shutdown or reboot drains this node first");
    while let Some(signal) = signals.next().await {
        let Ok(args) = signal.args() else { continue };
        if args.start {
            info!(?drain_time, "shutdown or reboot: draining before letting it proceed");
            drained_for_shutdown = drain.phase() == crate::announce::runtime::DrainPhase::Serving;
            // Not recorded: after the reboot the node serves again. The daemon's stop that
            // follows ends the sessions (no graceful restart: the node is going away).
            match drain.drain(DrainReason::Shutdown, true).await {
                Ok(Outcome::Drained) => info!("drained: letting the shutdown proceed"),
                Ok(other) => info!(?other, "drain ended early: letting the shutdown proceed"),
                Err(e) => warn!("drain before shutdown failed: {e}"),
            }
            // Closing the descriptor releases the delay.
            inhibitor = None;
        } else {
            // The shutdown was cancelled: serve again and be ready for the next one.
            if std::mem::take(&mut drained_for_shutdown) {
                if let Err(e) = drain.undrain().await {
                    warn!("cannot undrain after a cancelled shutdown: {e}");
                }
            }
            if inhibitor.is_none() {
                inhibitor = Some(take(&manager).await?);
            }
        }
    }
    drop(inhibitor);
    Ok(())
}

async fn take(manager: &ManagerProxy<'_>) -> zbus::Result<OwnedFd> {
    manager
        .inhibit("shutdown", "uplink", "drain BGP announcements before the node goes down", "delay")
        .await
}
