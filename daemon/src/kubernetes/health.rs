//! What the Kubernetes source knows about itself, for `uplink show kubernetes` and the metrics:
//! the API server, each kind's watch, the writes, and the objects the config refused. The
//! watchers, the writers and the reloader each write their part; readers take a copy.
// Written by the source, which needs the `kubernetes` feature.
#![cfg_attr(not(feature = "kubernetes"), allow(dead_code))]

use std::sync::{Arc, Mutex, PoisonError};
use std::time::{SystemTime, UNIX_EPOCH};

use serde::Serialize;

use crate::config::ConfigError;

/// The shared record.
pub type Health = Arc<Mutex<SourceHealth>>;

#[derive(Debug, Clone, Default, Serialize)]
pub struct SourceHealth {
    /// The API server's URL.
    pub server: String,
    /// Where MetalLB's, frr-k8s's objects and the password Secrets are read.
    pub namespace: String,
    /// This node's `Node` object.
    pub node: String,
    /// Unix seconds since the API server has not answered its `/readyz` with ready (asked
    /// while a watch fails), and why; `None` when it is ready.
    pub server_not_ready_since: Option<u64>,
    pub server_not_ready: Option<String>,
    /// Unix seconds of the last complete set of objects (every kind listed) handed to the
    /// reloader; `None` while the set kept by the last run is in force.
    pub last_sync: Option<u64>,
    /// Objects in that set.
    pub objects: usize,
    pub kinds: Vec<KindHealth>,
    /// Objects the config refused at the last reload (the rest applies without them).
    pub refused: Vec<RefusedObject>,
    /// Whether a config with the API's objects (read, or kept by the last run) has been
    /// applied by this run: MetalLB's `config_loaded_bool`.
    pub applied: bool,
    /// Why the last reload was rejected; `None` when it applied.
    pub last_reload: Option<String>,
    /// `status.loadBalancer.ingress` writes.
    pub status_writes: WriteCounts,
    /// `BGPSessionState` writes.
    pub session_writes: WriteCounts,
    /// `FRRNodeState` writes.
    pub node_state_writes: WriteCounts,
    /// `ServiceL2Status` writes.
    pub layer2_status_writes: WriteCounts,
    /// `NodeNetworkConfigurationEnactment` and policy condition writes.
    pub enactment_writes: WriteCounts,
}

#[derive(Debug, Clone, Serialize)]
pub struct KindHealth {
    pub kind: String,
    pub api_version: String,
    pub state: WatchState,
    pub objects: usize,
    /// Unix seconds of the last complete list.
    pub last_list: Option<u64>,
    /// Complete lists since the start: the first, and one after each failure (a `410 Gone`,
    /// a lost connection).
    pub lists: u64,
    /// Unix seconds since the watch has been failing, and why.
    pub failing_since: Option<u64>,
    pub error: Option<String>,
    /// Why the watch failed last, kept after it recovered.
    pub last_failure: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum WatchState {
    /// The first list, or a list again after a failure, is under way.
    Listing,
    /// Listed; changes arrive as they happen.
    Watching,
    /// The API server did not answer or refused; what was read stays in force, and the
    /// watch lists again when it answers.
    Failing,
    /// The API server does not serve the kind (its CRD is not installed).
    NotServed,
    /// RBAC does not let uplink read the kind.
    Forbidden,
}

impl std::fmt::Display for WatchState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Listing => "listing",
            Self::Watching => "watching",
            Self::Failing => "failing",
            Self::NotServed => "not served (no CRD)",
            Self::Forbidden => "forbidden by RBAC",
        })
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct RefusedObject {
    /// `Kind/namespace/name`.
    pub object: String,
    pub field: String,
    pub message: String,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct WriteCounts {
    pub succeeded: u64,
    pub failed: u64,
    pub last_error: Option<String>,
}

impl SourceHealth {
    pub fn new(server: String, namespace: String, node: String) -> Self {
        Self { server, namespace, node, ..Self::default() }
    }

    /// MetalLB's `metallb_k8s_client_config_stale_bool`: the config in force may not be what
    /// the cluster says — a watch is failing or still listing, or an object was refused.
    pub fn stale(&self) -> bool {
        !self.refused.is_empty()
            || self
                .kinds
                .iter()
                .any(|k| matches!(k.state, WatchState::Listing | WatchState::Failing))
    }

    /// Adds a kind, before its watch starts.
    pub fn register(&mut self, kind: &str, api_version: &str) {
        self.kinds.push(KindHealth {
            kind: kind.to_string(),
            api_version: api_version.to_string(),
            state: WatchState::Listing,
            objects: 0,
            last_list: None,
            lists: 0,
            failing_since: None,
            error: None,
            last_failure: None,
        });
    }

    pub fn kind_mut(&mut self, kind: &str) -> Option<&mut KindHealth> {
        self.kinds.iter_mut().find(|k| k.kind == kind)
    }

    /// Records the objects refused at a reload (their sources are `kubernetes:Kind/ns/name`).
    pub fn set_refused(&mut self, refused: &[ConfigError]) {
        self.refused = refused
            .iter()
            .map(|e| RefusedObject {
                object: e
                    .file
                    .to_string_lossy()
                    .trim_start_matches(crate::config::API_SOURCE_PREFIX)
                    .to_string(),
                field: e.field.clone(),
                message: e.message.clone(),
            })
            .collect();
    }
}

/// Changes the record.
pub fn update<T>(health: &Health, change: impl FnOnce(&mut SourceHealth) -> T) -> T {
    change(&mut health.lock().unwrap_or_else(PoisonError::into_inner))
}

/// A copy of the record.
pub fn read(health: &Health) -> SourceHealth {
    health.lock().unwrap_or_else(PoisonError::into_inner).clone()
}

pub fn unix_now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |since| since.as_secs())
}
