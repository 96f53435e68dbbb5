//! `Type=notify` support: READY, STATUS and the watchdog (sd_notify(3)). Every call is a no-op
//! when not started by systemd (no NOTIFY_SOCKET).

use sd_notify::NotifyState;
use std::time::Duration;

pub fn ready(status: &str) {
    let _ = sd_notify::notify(false, &[NotifyState::Ready, NotifyState::Status(status)]);
}

pub fn status(status: &str) {
    let _ = sd_notify::notify(false, &[NotifyState::Status(status)]);
}

pub fn stopping() {
    let _ = sd_notify::notify(false, &[NotifyState::Stopping]);
}

/// Pets the watchdog at half the interval systemd asked for, if it asked — but only after
/// `alive` says, within that half, that the parts doing the work answer. A stuck RIB task, FIB
/// writer or BFD thread thus gets the daemon restarted by systemd (`WatchdogSec=`).
pub fn spawn_watchdog<F, Fut>(alive: F)
where
    F: Fn() -> Fut + Send + 'static,
    Fut: std::future::Future<Output = Result<(), String>> + Send,
{
    let mut usec = 0u64;
    if !sd_notify::watchdog_enabled(false, &mut usec) || usec == 0 {
        return;
    }
    let period = Duration::from_micros(usec / 2);
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(period);
        loop {
            tick.tick().await;
            match tokio::time::timeout(period, alive()).await {
                Ok(Ok(())) => {
                    let _ = sd_notify::notify(false, &[NotifyState::Watchdog]);
                }
                Ok(Err(stuck)) => tracing::error!("not petting the watchdog: {stuck}"),
                Err(_) => tracing::error!(
                    "not petting the watchdog: the RIB, FIB or BFD did not answer within {period:?}"
                ),
            }
        }
    });
}
