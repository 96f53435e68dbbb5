//! The last set of objects read from the API, kept in the state directory: a node that starts
//! while the API server is away (a reboot during an outage) starts from it and announces what
//! it did, instead of withdrawing every Service until the API returns.
// Written by the source, which needs the `kubernetes` feature.
#![cfg_attr(not(feature = "kubernetes"), allow(dead_code))]

use std::path::{Path, PathBuf};
use std::sync::Arc;

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

/// Writes every set the source publishes.
pub(super) fn spawn(mut objects: channel::Receiver<Arc<ApiObjects>>, state_dir: &Path) {
    let path = Snapshot::path(state_dir);
    tokio::spawn(async move {
        while objects.changed().await.is_ok() {
            let set = objects.borrow_and_update().clone();
            let bytes = match serde_json::to_vec(set.as_ref()) {
                Ok(bytes) => bytes,
                Err(e) => {
                    error!("cannot encode the Kubernetes objects: {e}");
                    continue;
                }
            };
            let target = path.clone();
            let written =
                tokio::task::spawn_blocking(move || crate::state_file::write(&target, &bytes))
                    .await;
            if let Ok(Err(e)) = written {
                warn!(file = %path.display(), "cannot keep the Kubernetes objects: {e}");
            }
        }
    });
}
