//! The last set of objects read from the API, kept in the state directory: a node that starts
//! while the API server is away (a reboot during an outage) starts from it and announces what
//! it did, instead of withdrawing every Service until the API returns.
// Written by the source, which needs the `kubernetes` feature.
#![cfg_attr(not(feature = "kubernetes"), allow(dead_code))]

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch as channel;
use tracing::{error, warn};

use crate::config::ApiObjects;

/// The file, beside the drain mark and the enactments.
const FILE: &str = "kubernetes-objects.json";

pub struct Snapshot;

impl Snapshot {
    pub fn path(state_dir: &Path) -> PathBuf {
        state_dir.join(FILE)
    }

    /// The set kept by the last run, if any; an unreadable one is logged and not used.
    pub fn read(state_dir: &Path) -> ApiObjects {
        let path = Self::path(state_dir);
        match std::fs::read(&path) {
            Ok(bytes) => serde_json::from_slice(&bytes).unwrap_or_else(|e| {
                error!(file = %path.display(), "the kept Kubernetes objects are unreadable ({e}); starting from the files alone until the API answers");
                ApiObjects::default()
            }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => ApiObjects::default(),
            Err(e) => {
                error!(file = %path.display(), "cannot read the kept Kubernetes objects: {e}");
                ApiObjects::default()
            }
        }
    }
}

/// A set is written once the sets have stopped changing for this long. At a cluster's size
/// the set is megabytes to encode: encoded beside a reload, it delayed the reload (a sample in
/// ten of `make bench-k8s`, each event applied in tens of milliseconds, had the encoding on
/// the other core). A stop before it leaves the set before, which the next start's first
/// list corrects.
const QUIET: Duration = Duration::from_secs(1);
/// While the sets keep changing (a rollout), one is written at least this long after the
/// first change not yet written.
const WRITE_WITHIN: Duration = Duration::from_secs(30);

/// Writes the sets the source publishes: the latest, once they are quiet.
pub(super) fn spawn(mut objects: channel::Receiver<Arc<ApiObjects>>, state_dir: &Path) {
    let path = Snapshot::path(state_dir);
    tokio::spawn(async move {
        while objects.changed().await.is_ok() {
            let due = tokio::time::Instant::now() + WRITE_WITHIN;
            let mut open = true;
            while open {
                // Seen: the next `changed` waits for a newer set.
                objects.borrow_and_update();
                let wait = QUIET.min(due.saturating_duration_since(tokio::time::Instant::now()));
                match tokio::time::timeout(wait, objects.changed()).await {
                    Ok(Ok(())) => {}
                    // The source has stopped: its last set is written.
                    Ok(Err(_)) => open = false,
                    Err(_quiet_or_due) => break,
                }
            }
            let set = objects.borrow_and_update().clone();
            let target = path.clone();
            // Encoding and writing are blocking work: off the runtime's workers.
            let written = tokio::task::spawn_blocking(move || {
                let bytes = serde_json::to_vec(set.as_ref())
                    .map_err(|e| format!("cannot encode the Kubernetes objects: {e}"))?;
                crate::state_file::write(&target, &bytes)
                    .map_err(|e| format!("cannot keep the Kubernetes objects: {e}"))
            })
            .await;
            if let Ok(Err(e)) = written {
                warn!(file = %path.display(), "{e}");
            }
            if !open {
                return;
            }
        }
    });
}
