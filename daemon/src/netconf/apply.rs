//! The apply flow, kubernetes-nmstate's: for each selected policy in name order, choose the
//! probes (those that pass before the change), apply without commit under a NetworkManager
//! checkpoint, run the probes, then commit — or roll back and say which probe failed.
//!
//! Kernel mode has no checkpoint: uplink computes the state that undoes the policy (nmstate's
//! `generate_revert`) before applying and applies that on a failed probe. It cannot undo what
//! nmstate cannot express as a revert, and nothing protects the node if uplink dies between
//! apply and probes (NetworkManager's checkpoint would roll back by itself); see
//! docs/network.md.

use std::collections::BTreeSet;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::Value;
use tracing::{info, warn};

use crate::config::network::{NetworkBackend, NetworkPolicy};
use crate::config::node_values::{resolve_json, NodeIdentity};
use crate::config::Config;

use super::backend::{Backend, Snapshot};
use super::enactment::{decide, interrupted, Decision, Enactment, EnactmentStatus, ProbeOutcome};
use super::identity::node_identity;
use super::probe::{affected_vrfs, candidates, Probe};
use super::probe_run;
use super::state::effective_change;
use super::store::EnactmentStore;

/// Seconds since the Unix epoch.
pub fn now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

/// How a run treats policies that failed before.
#[derive(Debug, Clone, Copy, Default)]
pub struct ApplyOptions {
    /// Re-run Failing and Aborted policies even though they did not change.
    pub retry: bool,
}

/// Applies every policy of `config.network` that needs it; returns the enactments of the
/// selected policies, in order. Enactments are saved after every transition.
pub async fn apply_policies(config: &Config, options: ApplyOptions) -> Vec<Enactment> {
    let network = &config.network;
    let backend = Backend { kind: network.backend };
    let mut store = match EnactmentStore::open(&network.state_dir) {
        Ok(store) => store,
        Err(error) => {
            warn!(%error, "network: starting with no enactments");
            EnactmentStore::empty(&network.state_dir)
        }
    };
    let start = now();
    for enactment in store.enactments.values_mut() {
        interrupted(enactment, start);
    }
    // Removing a policy does not undo it (kubernetes-nmstate's rule): `state: absent` does.
    let selected: BTreeSet<&str> = network.policies.iter().map(|p| p.name.as_str()).collect();
    let removed: Vec<String> =
        store.enactments.keys().filter(|n| !selected.contains(n.as_str())).cloned().collect();
    for name in removed {
        info!(policy = %name, "network: policy removed or no longer selecting this node; what it configured stays (write `state: absent` to remove it)");
        store.enactments.remove(&name);
    }
    save(&store);
    let mut out = Vec::with_capacity(network.policies.len());
    for policy in &network.policies {
        let enactment = apply_one(config, policy, &backend, &mut store, options).await;
        out.push(enactment);
    }
    out
}

/// The state `policy` asks for on this node, per-node values resolved.
pub fn resolved_state(policy: &NetworkPolicy, node: &NodeIdentity) -> Result<Value, String> {
    let mut desired = policy.desired_state.to_json();
    resolve_json(&mut desired, node)?;
    Backend::validate(&desired)?;
    Ok(desired)
}

async fn apply_one(
    config: &Config,
    policy: &NetworkPolicy,
    backend: &Backend,
    store: &mut EnactmentStore,
    options: ApplyOptions,
) -> Enactment {
    let unresolved = policy.desired_state.to_json();
    let current = match backend.current().await {
        Ok(current) => current,
        Err(error) => {
            // Not the policy's fault: it stays Pending and is tried again next time.
            let mut enactment = Enactment::new(&policy.name, unresolved, now());
            enactment.message = format!("cannot read the node's network state: {error}");
            warn!(policy = %policy.name, %error, "network: policy not applied");
            return record(store, enactment);
        }
    };
    let node = node_identity(config.announce.node.name.as_deref(), &config.network, &current.json);
    let desired = match resolved_state(policy, &node) {
        Ok(desired) => desired,
        Err(error) => {
            let mut enactment = Enactment::new(&policy.name, unresolved, now());
            enactment.transition(EnactmentStatus::Failing, error.clone(), now());
            warn!(policy = %policy.name, %error, "network: policy cannot be resolved for this node");
            return record(store, enactment);
        }
    };
    let previous = store.enactments.get(&policy.name);
    match decide(previous, &desired, options.retry) {
        Decision::Skip(reason) => {
            let enactment =
                previous.cloned().unwrap_or_else(|| Enactment::new(&policy.name, desired, now()));
            info!(policy = %policy.name, %reason, "network: policy skipped");
            return enactment;
        }
        Decision::ApplyIfDrifted => match Backend::diff(&desired, &current)
            .map(|diff| effective_change(diff, &desired, &current.json))
        {
            Ok(Value::Null) => {
                let enactment = previous
                    .cloned()
                    .unwrap_or_else(|| Enactment::new(&policy.name, desired, now()));
                info!(policy = %policy.name, "network: policy already in place");
                return enactment;
            }
            Ok(_) => {
                info!(policy = %policy.name, "network: the node drifted from an Available policy; applying it again")
            }
            Err(error) => {
                warn!(policy = %policy.name, %error, "network: cannot compare with the current state; applying")
            }
        },
        Decision::Apply => {}
    }
    let mut enactment = Enactment::new(&policy.name, desired.clone(), now());
    enactment.transition(EnactmentStatus::Progressing, "choosing probes", now());
    let mut enactment = record(store, enactment);

    let affected = affected_vrfs(&desired, &current.json);
    let settings = &config.network.probes;
    let mut required: Vec<Probe> = Vec::new();
    for probe in candidates(&current.json, &config.bgp.routers, &affected) {
        match probe_run::run(&probe, backend, settings, settings.pre_timeout).await {
            Ok(()) => required.push(probe),
            Err(error) => {
                info!(policy = %policy.name, %probe, %error, "network: probe fails before the change; not required after it")
            }
        }
    }
    let names: Vec<String> = required.iter().map(ToString::to_string).collect();
    enactment.transition(
        EnactmentStatus::Progressing,
        format!("applying; probes: {}", list(&names)),
        now(),
    );
    let mut enactment = record(store, enactment);
    info!(policy = %policy.name, probes = %list(&names), backend = config.network.backend.name(), "network: applying policy");

    // The checkpoint must outlive every probe, or NetworkManager rolls back under them.
    let probe_time =
        settings.timeout.saturating_mul(u32::try_from(required.len()).unwrap_or(u32::MAX));
    let checkpoint = config.network.rollback_timeout.max(probe_time + Duration::from_secs(10));
    // The state that undoes the policy: kernel mode's only rollback, and NetworkManager's
    // second line when its checkpoint cannot restore everything (NetworkManager 1.42 does not
    // bring back a software device that the change deleted and re-created).
    let revert = match Backend::revert(&desired, &current) {
        Ok(revert) => Some(revert),
        Err(error) => {
            warn!(policy = %policy.name, %error, "network: no revert state; only the checkpoint can undo this policy");
            None
        }
    };
    let kernel = backend.kind == NetworkBackend::Kernel;
    if let Err(error) = backend.apply(&desired, Some(checkpoint)).await {
        // nmstate rolls a failed NetworkManager apply back itself; kernel mode has no
        // checkpoint, so uplink applies the previous state.
        let how = match (kernel, &revert) {
            (false, _) => "rolled back",
            (true, Some(revert)) if reapply(backend, revert, &policy.name).await => "rolled back",
            (true, _) => "rollback FAILED",
        };
        enactment.transition(EnactmentStatus::Failing, format!("{error}; {how}"), now());
        warn!(policy = %policy.name, %error, "network: apply failed; rolled back");
        return record(store, enactment);
    }
    for probe in &required {
        let result = probe_run::run(probe, backend, settings, settings.timeout).await;
        enactment
            .probes
            .push(ProbeOutcome { probe: probe.to_string(), error: result.clone().err() });
        if let Err(error) = result {
            let how = roll_back(backend, revert.as_ref(), &policy.name).await;
            let message = format!("probe {probe} failed after the change: {error}; {how}");
            warn!(policy = %policy.name, %message, "network: policy failed");
            enactment.transition(EnactmentStatus::Failing, message, now());
            return record(store, enactment);
        }
    }
    if backend.kind == NetworkBackend::NetworkManager {
        if let Err(error) = backend.commit().await {
            // The checkpoint's timeout rolls the change back by itself.
            enactment.transition(
                EnactmentStatus::Failing,
                format!("cannot commit: {error}"),
                now(),
            );
            warn!(policy = %policy.name, %error, "network: commit failed");
            return record(store, enactment);
        }
    }
    enactment.transition(
        EnactmentStatus::Available,
        format!("applied; probes passed: {}", list(&names)),
        now(),
    );
    info!(policy = %policy.name, "network: policy Available");
    record(store, enactment)
}

/// Undoes an applied policy; says how, for the enactment. NetworkManager: back to the
/// checkpoint, then the revert state wherever the checkpoint fell short. Kernel: the revert
/// state.
async fn roll_back(backend: &Backend, revert: Option<&Value>, policy: &str) -> &'static str {
    if backend.kind == NetworkBackend::Kernel {
        return match revert {
            Some(revert) if reapply(backend, revert, policy).await => "rolled back",
            _ => "rollback FAILED",
        };
    }
    if let Err(error) = backend.rollback().await {
        warn!(%policy, %error, "network: checkpoint rollback failed");
    }
    let Some(revert) = revert else { return "rolled back to the checkpoint" };
    let after = match backend.current().await {
        Ok(after) => after,
        Err(error) => {
            warn!(%policy, %error, "network: cannot check the rollback");
            return "rolled back to the checkpoint (not verified)";
        }
    };
    match Backend::diff(revert, &after).map(|diff| effective_change(diff, revert, &after.json)) {
        Ok(Value::Null) => "rolled back",
        Ok(missing) => {
            info!(%policy, missing = %missing, "network: the checkpoint did not restore everything; re-applying the previous state");
            if reapply(backend, revert, policy).await {
                "rolled back (the previous state re-applied where NetworkManager's checkpoint fell short)"
            } else {
                "rollback FAILED"
            }
        }
        Err(error) => {
            warn!(%policy, %error, "network: cannot check the rollback");
            "rolled back to the checkpoint (not verified)"
        }
    }
}

/// Applies a revert state (committed at once: there is nothing to probe it against).
async fn reapply(backend: &Backend, revert: &Value, policy: &str) -> bool {
    match backend.apply(revert, None).await {
        Ok(()) => true,
        Err(error) => {
            warn!(%policy, %error, "network: re-applying the previous state failed");
            false
        }
    }
}

fn list(names: &[String]) -> String {
    if names.is_empty() {
        "none".into()
    } else {
        names.join(", ")
    }
}

fn record(store: &mut EnactmentStore, enactment: Enactment) -> Enactment {
    if let Err(error) = store.put(enactment.clone()) {
        warn!(%error, "network: cannot save enactments");
    }
    enactment
}

fn save(store: &EnactmentStore) {
    if let Err(error) = store.save() {
        warn!(%error, "network: cannot save enactments");
    }
}

/// What applying each selected policy would change on this node, for `uplink check`.
pub async fn plan(config: &Config) -> Result<Vec<(String, Result<Value, String>)>, String> {
    let backend = Backend { kind: config.network.backend };
    let current: Snapshot = backend.current().await?;
    let node = node_identity(config.announce.node.name.as_deref(), &config.network, &current.json);
    Ok(config
        .network
        .policies
        .iter()
        .map(|policy| {
            let change = resolved_state(policy, &node).and_then(|desired| {
                Backend::diff(&desired, &current)
                    .map(|diff| effective_change(diff, &desired, &current.json))
            });
            (policy.name.clone(), change)
        })
        .collect())
}
