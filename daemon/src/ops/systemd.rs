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

/// Pets the watchdog at half the interval systemd asked for, if it asked.
pub fn spawn_watchdog() {
    let mut usec = 0u64;
    if !sd_notify::watchdog_enabled(false, &mut usec) || usec == 0 {
        return;
    }
    let period = Duration::from_micros(usec / 2);
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(period);
        loop {
            tick.tick().await;
            let _ = sd_notify::notify(false, &[NotifyState::Watchdog]);
        }
    });
}
