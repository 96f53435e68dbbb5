//! nmstate, the only code here that changes the node's network: its NetworkManager backend
//! (D-Bus through zbus, with checkpoints) or its kernel mode (netlink through nispor).
//!
//! Built without the `netconf` cargo feature, every call says so instead: the pure logic
//! around it (selection, probes, enactments) still builds and is tested without compiling
//! nmstate.

use std::time::Duration;

use serde_json::Value;

use crate::config::network::NetworkBackend;

/// What nmstate reports about the node right now.
#[derive(Debug, Clone)]
pub struct Snapshot {
    /// nmstate's JSON (`nmstatectl show`): interfaces, routes (running and config), rules, DNS.
    pub json: Value,
    #[cfg(feature = "netconf")]
    state: nmstate::NetworkState,
}

/// nmstate with the node's backend.
#[derive(Debug, Clone, Copy)]
pub struct Backend {
    pub kind: NetworkBackend,
}

/// Whether this binary has nmstate (the `netconf` feature).
pub const BUILT: bool = cfg!(feature = "netconf");

#[cfg(not(feature = "netconf"))]
const NOT_BUILT: &str = "this uplink was built without the `netconf` feature: it cannot read \
                         or change the node's network (build with `--features netconf`, as \
                         `make static` does)";

#[cfg(feature = "netconf")]
mod imp {
    use super::*;
    use nmstate::NetworkState;

    fn message(error: nmstate::NmstateError) -> String {
        format!("nmstate: {}: {}", error.kind(), error.msg())
    }

    fn parse(desired: &Value) -> Result<NetworkState, String> {
        NetworkState::new_from_json(&desired.to_string()).map_err(message)
    }

    impl Backend {
        /// The current state (secrets hidden).
        pub async fn current(&self) -> Result<Snapshot, String> {
            let mut state = NetworkState::new();
            state.set_kernel_only(self.kind == NetworkBackend::Kernel);
            state.retrieve_async().await.map_err(message)?;
            let json = serde_json::to_value(&state).map_err(|e| format!("nmstate state: {e}"))?;
            Ok(Snapshot { json, state })
        }

        /// Applies `desired`. With NetworkManager and `checkpoint` set, the change stays
        /// uncommitted under a checkpoint that NetworkManager rolls back by itself after that
        /// long unless `commit` comes first; nmstate rolls back itself when the apply or its
        /// own verification fails.
        pub async fn apply(
            &self,
            desired: &Value,
            checkpoint: Option<Duration>,
        ) -> Result<(), String> {
            let mut state = parse(desired)?;
            match self.kind {
                NetworkBackend::Kernel => {
                    state.set_kernel_only(true);
                }
                NetworkBackend::NetworkManager => {
                    if let Some(timeout) = checkpoint {
                        state.set_commit(false);
                        state.set_timeout(
                            u32::try_from(timeout.as_secs()).unwrap_or(u32::MAX).max(1),
                        );
                    }
                }
            }
            state.apply_async().await.map_err(message)
        }

        /// Makes the uncommitted change under `checkpoint` permanent (destroys it). The path
        /// is always named: nmstate's "" picks NetworkManager's first checkpoint, which may be
        /// another tool's.
        pub async fn commit(&self, checkpoint: &str) -> Result<(), String> {
            NetworkState::checkpoint_commit_async(checkpoint).await.map_err(message)
        }

        /// Rolls NetworkManager back to `checkpoint`.
        pub async fn rollback(&self, checkpoint: &str) -> Result<(), String> {
            NetworkState::checkpoint_rollback_async(checkpoint).await.map_err(message)
        }

        /// NetworkManager's open checkpoints (D-Bus object paths). nmstate creates one per
        /// apply and does not say which: the one that appears across an apply is ours.
        pub async fn checkpoints(&self) -> Result<Vec<String>, String> {
            let failed = |e: zbus::Error| format!("NetworkManager's checkpoints: {e}");
            let bus = zbus::Connection::system().await.map_err(failed)?;
            let proxy: zbus::Proxy<'_> = zbus::proxy::Builder::new(&bus)
                .destination("org.freedesktop.NetworkManager")
                .map_err(failed)?
                .path("/org/freedesktop/NetworkManager")
                .map_err(failed)?
                .interface("org.freedesktop.NetworkManager")
                .map_err(failed)?
                .cache_properties(zbus::proxy::CacheProperties::No)
                .build()
                .await
                .map_err(failed)?;
            let paths: Vec<zbus::zvariant::OwnedObjectPath> =
                proxy.get_property("Checkpoints").await.map_err(failed)?;
            Ok(paths.into_iter().map(|p| p.as_str().to_string()).collect())
        }

        /// What `desired` would change in `current` (empty when nothing).
        pub fn diff(desired: &Value, current: &Snapshot) -> Result<Value, String> {
            let diff = parse(desired)?.gen_diff(&current.state).map_err(message)?;
            if diff.is_empty() {
                return Ok(Value::Null);
            }
            serde_json::to_value(&diff).map_err(|e| format!("nmstate diff: {e}"))
        }

        /// The state that undoes `desired` on top of `current` (kernel mode's rollback).
        pub fn revert(desired: &Value, current: &Snapshot) -> Result<Value, String> {
            let revert = parse(desired)?.generate_revert(&current.state).map_err(message)?;
            serde_json::to_value(&revert).map_err(|e| format!("nmstate revert: {e}"))
        }

        /// Whether nmstate accepts `desired` (its own schema check, stricter than ours).
        pub fn validate(desired: &Value) -> Result<(), String> {
            parse(desired).map(|_| ())
        }

        /// `desired` with its `{{ capture.… }}` templates filled from `capture` run against
        /// `current`, by nmstate's policy code. The whole filled state, not nmstate's diff of
        /// it against `current` (`NetworkState::try_from(NetworkPolicy)`): the diff is empty
        /// once applied, so it would differ from the enactment's state at every reload and be
        /// applied again; the filled state stays the same while what it captures does.
        pub fn fill_captures(
            capture: &std::collections::BTreeMap<String, String>,
            desired: &Value,
            current: &Snapshot,
        ) -> Result<Value, String> {
            let failed = |e: serde_json::Error| format!("nmstate policy: {e}");
            let rules: nmstate::NetworkCaptureRules =
                serde_json::from_value(serde_json::json!(capture)).map_err(failed)?;
            let template: nmstate::NetworkStateTemplate =
                serde_json::from_value(desired.clone()).map_err(failed)?;
            let captured = rules.execute(&current.state).map_err(message)?;
            let state = template.fill_with_captured_data(&captured).map_err(message)?;
            serde_json::to_value(&state).map_err(failed)
        }
    }
}

#[cfg(not(feature = "netconf"))]
impl Backend {
    pub async fn current(&self) -> Result<Snapshot, String> {
        Err(NOT_BUILT.into())
    }
    pub async fn apply(
        &self,
        _desired: &Value,
        _checkpoint: Option<Duration>,
    ) -> Result<(), String> {
        Err(NOT_BUILT.into())
    }
    pub async fn commit(&self, _checkpoint: &str) -> Result<(), String> {
        Err(NOT_BUILT.into())
    }
    pub async fn rollback(&self, _checkpoint: &str) -> Result<(), String> {
        Err(NOT_BUILT.into())
    }
    pub async fn checkpoints(&self) -> Result<Vec<String>, String> {
        Err(NOT_BUILT.into())
    }
    pub fn diff(_desired: &Value, _current: &Snapshot) -> Result<Value, String> {
        Err(NOT_BUILT.into())
    }
    pub fn revert(_desired: &Value, _current: &Snapshot) -> Result<Value, String> {
        Err(NOT_BUILT.into())
    }
    pub fn validate(_desired: &Value) -> Result<(), String> {
        Ok(())
    }
    pub fn fill_captures(
        _capture: &std::collections::BTreeMap<String, String>,
        _desired: &Value,
        _current: &Snapshot,
    ) -> Result<Value, String> {
        Err(NOT_BUILT.into())
    }
}
