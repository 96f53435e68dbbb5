//! Logging through `tracing`: to journald when systemd started us with a journal stream, to
//! stderr otherwise. `RUST_LOG` filters (default `info`).

use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::EnvFilter;

/// Installs the global subscriber. Safe to call once; later calls are ignored.
pub fn init() {
    let filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info,nispor=error"));
    // systemd sets JOURNAL_STREAM for services whose stdout/stderr go to the journal.
    if std::env::var_os("JOURNAL_STREAM").is_some() {
        if let Ok(journald) = tracing_journald::layer() {
            let _ = tracing_subscriber::registry().with(filter).with(journald).try_init();
            return;
        }
    }
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let fmt = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_target(false)
        .with_ansi(ansi);
    let _ = tracing_subscriber::registry().with(filter).with(fmt).try_init();
}
