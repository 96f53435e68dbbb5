//! Logging through `tracing`: to journald when systemd started us with a journal stream, to
//! stderr otherwise. `RUST_LOG` filters (default `info`).
//!
//! In the journal, every field of an event and of the spans around it is a journal field of
//! the same name upper-cased (tracing-journald), without the crate's default `F_` prefix: the
//! BGP session, RIB and BFD spans carry `peer` and `vrf`, and events about one prefix carry
//! `prefix`, so `journalctl -u uplink PEER=192.0.2.1`, `VRF=red` or `PREFIX=198.51.100.0/24`
//! select them. VRFs are named as FRR names them ("default" for the default VRF).

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
            let journald = journald.with_field_prefix(None);
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
