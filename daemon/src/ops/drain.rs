//! `uplink drain` / `undrain`: the drained mark on disk (so a daemon restart keeps it) and the
//! announcer's drain flag.

use std::path::{Path, PathBuf};

use tracing::info;

use crate::announce::runtime::AnnouncerHandle;

/// Where the drain state is kept: `drained` in the control socket's directory.
pub fn marker(socket: &Path) -> PathBuf {
    socket.parent().unwrap_or(Path::new(".")).join("drained")
}

/// Whether the node was drained when the daemon last stopped.
pub fn is_marked(marker: &Path) -> bool {
    marker.exists()
}

/// Records the state (so a restart keeps it), then tells the announcer. The marker is written
/// first: if it cannot be, nothing changes.
pub async fn set(
    announcer: &AnnouncerHandle,
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
