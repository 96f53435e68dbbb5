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
use tracing::{error, info, warn};

use crate::config::network::{NetworkBackend, NetworkPolicy};
use crate::config::node_values::{resolve_json, NodeIdentity};
use crate::config::Config;

use super::backend::{Backend, Snapshot};
use super::enactment::{
    decide, interrupted, Decision, Enactment, EnactmentStatus, InFlight, ProbeOutcome,
};
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

/// What one run of the selected policies did.
#[derive(Debug, Default)]
pub struct PolicyRun {
    /// Every selected policy's enactment, in order.
    pub enactments: Vec<Enactment>,
    /// The policies this run changed the node for (Available now), in the order applied, each
    /// with the state that undoes it (`None`: nmstate could not compute one).
    pub applied: Vec<(String, Option<Value>)>,
    /// The policies this run tried that did not end Available (rolled back, or refused).
    pub failed: Vec<String>,
}

/// What `apply_one` did to the node.
enum Attempt {
    /// Nothing: skipped, already in place, or not tried (the state could not be read).
    Untouched,
    /// Applied, probes passed, committed; the state that undoes it.
    Applied(Option<Value>),
    /// Tried and rolled back, or refused.
    Failed,
}

/// Applies every policy of `config.network` that needs it. Enactments are saved after every
/// transition.
pub async fn apply_policies(config: &Config, options: ApplyOptions) -> PolicyRun {
    let network = &config.network;
    let backend = Backend { kind: network.backend };
    // Without the record of what failed before, a policy that once cut the node off could
    // run again: none runs until an operator says so (`--retry`).
    let (mut store, unreadable) = match EnactmentStore::open(&network.state_dir) {
        Ok(store) => (store, None),
        Err(error) => {
            let (store, note) = EnactmentStore::recover(&network.state_dir, &error, now());
            error!(
                "network: {note}: no policy is applied until `uplink apply network --retry` \
                 (which of them failed before is unknown)"
            );
            (store, Some(note))
        }
    };
    let hold = unreadable.as_deref().filter(|_| !options.retry);
    let start = now();
    finish_interrupted(&backend, &mut store, start).await;
    // Removing a policy does not undo it (kubernetes-nmstate's rule): `state: absent` does.
    let selected: BTreeSet<&str> = network.policies.iter().map(|p| p.name.as_str()).collect();
    let removed: Vec<String> =
        store.enactments.keys().filter(|n| !selected.contains(n.as_str())).cloned().collect();
    for name in removed {
        info!(policy = %name, "network: policy removed or no longer selecting this node; what it configured stays (write `state: absent` to remove it)");
        store.enactments.remove(&name);
    }
    save(&store);
    let mut run = PolicyRun::default();
    // One reading of the node's state serves the policies in a row that change nothing (a
    // restart's or a reload's drift checks): each reading is a whole NetworkManager dump, a
    // second or more on a small or emulated node.
    let mut unchanged: Option<Snapshot> = None;
    for policy in &network.policies {
        let current = match unchanged.take() {
            Some(snapshot) => Ok(snapshot),
            None => backend.current().await,
        };
        let (enactment, attempt) =
            apply_one(config, policy, &backend, &mut store, options, hold, &current).await;
        match attempt {
            Attempt::Untouched => unchanged = current.ok(),
            Attempt::Applied(revert) => run.applied.push((policy.name.clone(), revert)),
            Attempt::Failed => run.failed.push(policy.name.clone()),
        }
        run.enactments.push(enactment);
    }
    run
}

/// Undoes what a run applied, last first, when the reload that ran it is refused after all (a
/// router cannot start): each policy's state from before is applied again (committed at once:
/// NetworkManager keeps one checkpoint open per device, so the policies of one reload cannot
/// all stay uncommitted until the routers are prepared). The policies go back to Pending, so
/// the next reload applies them again. Returns what could not be undone.
pub async fn undo_policies(
    config: &Config,
    applied: &[(String, Option<Value>)],
    reason: &str,
) -> Vec<String> {
    let network = &config.network;
    let backend = Backend { kind: network.backend };
    let mut store = match EnactmentStore::open(&network.state_dir) {
        Ok(store) => Some(store),
        Err(error) => {
            warn!(%error, "network: the enactments of the undone policies are not recorded");
            None
        }
    };
    let mut failed = Vec::new();
    for (name, revert) in applied.iter().rev() {
        let undone = match revert {
            Some(revert) => reapply(&backend, revert, name).await,
            None => false,
        };
        if !undone {
            warn!(policy = %name, "network: cannot undo the policy of a refused reload");
            failed.push(name.clone());
            continue;
        }
        info!(policy = %name, %reason, "network: policy undone: the reload that applied it was refused");
        let Some(store) = store.as_mut() else { continue };
        if let Some(mut enactment) = store.enactments.get(name).cloned() {
            enactment.transition(
                EnactmentStatus::Pending,
                format!("undone: the reload that applied it was refused ({reason})"),
                now(),
            );
            record(store, enactment);
        }
    }
    failed
}

/// At start: an enactment left Progressing means uplink stopped between apply and commit. Its
/// NetworkManager checkpoint may still be open (its timeout has not passed): rolled back now,
/// by its own path, so the change that was never confirmed goes at once and the next policy's
/// checkpoint is not refused as overlapping.
async fn finish_interrupted(backend: &Backend, store: &mut EnactmentStore, now: u64) {
    let interrupted_any =
        store.enactments.values().any(|e| e.status == EnactmentStatus::Progressing);
    if !interrupted_any {
        return;
    }
    let open = match backend.kind {
        NetworkBackend::NetworkManager => match backend.checkpoints().await {
            Ok(open) => open,
            Err(error) => {
                warn!(%error, "network: cannot list NetworkManager's checkpoints");
                Vec::new()
            }
        },
        NetworkBackend::Kernel => Vec::new(),
    };
    for enactment in store.enactments.values_mut() {
        if enactment.status != EnactmentStatus::Progressing {
            continue;
        }
        let in_flight = enactment.in_flight.clone().unwrap_or_default();
        let left = in_flight.left_open(&open);
        let revert = in_flight.revert.as_ref();
        let how = match (backend.kind, left) {
            (NetworkBackend::NetworkManager, Some(path)) => {
                let how = roll_back(backend, &path, revert, &enactment.policy).await;
                format!("its uncommitted change was {how} now ({path})")
            }
            (NetworkBackend::Kernel, _) if revert.is_some() => {
                let how = roll_back(backend, "", revert, &enactment.policy).await;
                format!("its change was {how} now (the state from before it)")
            }
            _ => "NetworkManager's checkpoint rolls such a change back by itself".to_string(),
        };
        warn!(policy = %enactment.policy, "network: interrupted while applying: {how}");
        interrupted(enactment, now, &how);
    }
}

/// The state `policy` asks for on this node: per-node values resolved, then (with a
/// `capture`) nmstate's templates filled from its captures of `current`, as kubernetes-nmstate's
/// handler does.
pub fn resolved_state(
    policy: &NetworkPolicy,
    node: &NodeIdentity,
    current: &Snapshot,
) -> Result<Value, String> {
    let mut desired = policy.desired_state.to_json();
    resolve_json(&mut desired, node)?;
    if !policy.capture.is_empty() {
        desired = Backend::fill_captures(&policy.capture, &desired, current)?;
    }
    Backend::validate(&desired)?;
    Ok(desired)
}

async fn apply_one(
    config: &Config,
    policy: &NetworkPolicy,
    backend: &Backend,
    store: &mut EnactmentStore,
    options: ApplyOptions,
    hold: Option<&str>,
    current: &Result<Snapshot, String>,
) -> (Enactment, Attempt) {
    let unresolved = policy.desired_state.to_json();
    let current = match current {
        Ok(current) => current,
        Err(error) => {
            // Not the policy's fault: it stays Pending and is tried again next time.
            let mut enactment = Enactment::new(&policy.name, unresolved, now());
            enactment.message = format!("cannot read the node's network state: {error}");
            warn!(policy = %policy.name, %error, "network: policy not applied");
            return (record(store, enactment), Attempt::Untouched);
        }
    };
    let node = node_identity(config.announce.node.name.as_deref(), &config.network);
    let desired = match resolved_state(policy, &node, current) {
        Ok(desired) => desired,
        Err(error) => {
            // The same failure as last time is no new failure (a reload must not be refused
            // again and again for a policy nobody changed).
            let previous = store.enactments.get(&policy.name).filter(|e| {
                e.status == EnactmentStatus::Failing
                    && e.message == error
                    && e.desired_state == unresolved
            });
            if let Some(previous) = previous {
                return (previous.clone(), Attempt::Untouched);
            }
            let mut enactment = Enactment::new(&policy.name, unresolved, now());
            enactment.transition(EnactmentStatus::Failing, error.clone(), now());
            warn!(policy = %policy.name, %error, "network: policy cannot be resolved for this node");
            return (record(store, enactment), Attempt::Failed);
        }
    };
    if let Some(why) = hold {
        // Aborted with the state it asks for: the restart rule (`decide`) keeps it from
        // running again on later starts until it changes or `--retry`.
        let mut enactment = Enactment::new(&policy.name, desired, now());
        enactment.transition(
            EnactmentStatus::Aborted,
            format!(
                "not applied: the enactments file was unreadable ({why}); run `uplink apply \
                 network --retry` to apply it"
            ),
            now(),
        );
        warn!(policy = %policy.name, "network: policy not applied (the enactments file was unreadable)");
        return (record(store, enactment), Attempt::Untouched);
    }
    let previous = store.enactments.get(&policy.name);
    match decide(previous, &desired, options.retry) {
        Decision::Skip(reason) => {
            let enactment =
                previous.cloned().unwrap_or_else(|| Enactment::new(&policy.name, desired, now()));
            info!(policy = %policy.name, %reason, "network: policy skipped");
            return (enactment, Attempt::Untouched);
        }
        Decision::ApplyIfDrifted => match Backend::diff(&desired, current)
            .map(|diff| effective_change(diff, &desired, &current.json))
        {
            Ok(Value::Null) => {
                let enactment = previous
                    .cloned()
                    .unwrap_or_else(|| Enactment::new(&policy.name, desired, now()));
                info!(policy = %policy.name, "network: policy already in place");
                return (enactment, Attempt::Untouched);
            }
            Ok(drift) => {
                info!(policy = %policy.name, %drift, "network: the node drifted from an Available policy; applying it again")
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
    // The state that undoes the policy: kernel mode's only rollback, and NetworkManager's
    // second line when its checkpoint cannot restore everything (NetworkManager 1.42 does not
    // bring back a software device that the change deleted and re-created). Kept with the
    // enactment while it is Progressing, for a restart after a crash.
    let revert = match Backend::revert(&desired, current) {
        Ok(revert) => Some(revert),
        Err(error) => {
            warn!(policy = %policy.name, %error, "network: no revert state; only the checkpoint can undo this policy");
            None
        }
    };
    // Which checkpoints are others' (or stale): the one the apply opens is ours.
    let nm = backend.kind == NetworkBackend::NetworkManager;
    let mut in_flight = InFlight { revert: revert.clone(), ..Default::default() };
    if nm {
        match backend.checkpoints().await {
            Ok(before) => in_flight.before = Some(before),
            Err(error) => {
                warn!(policy = %policy.name, %error, "network: cannot list NetworkManager's checkpoints")
            }
        }
    }
    enactment.in_flight = Some(in_flight);
    let mut enactment = record(store, enactment);
    info!(policy = %policy.name, probes = %list(&names), backend = config.network.backend.name(), "network: applying policy");

    // The checkpoint must outlive every probe, or NetworkManager rolls back under them.
    let probe_time =
        settings.timeout.saturating_mul(u32::try_from(required.len()).unwrap_or(u32::MAX));
    let checkpoint = config.network.rollback_timeout.max(probe_time + Duration::from_secs(10));
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
        return (record(store, enactment), Attempt::Failed);
    }
    // Our checkpoint, by its path: commit and rollback name it (nmstate's "" would take
    // NetworkManager's first one, which may be another tool's).
    let mut ours = String::new();
    if let (true, Some(own)) = (nm, enactment.in_flight.as_mut()) {
        match backend.checkpoints().await.map(|open| own.left_open(&open)) {
            Ok(Some(path)) => {
                ours = path.clone();
                own.path = Some(path);
            }
            Ok(None) => {
                warn!(policy = %policy.name, "network: cannot tell which checkpoint the apply opened; using NetworkManager's first")
            }
            Err(error) => {
                warn!(policy = %policy.name, %error, "network: cannot list NetworkManager's checkpoints")
            }
        }
        enactment = record(store, enactment);
    }
    for probe in &required {
        let result = probe_run::run(probe, backend, settings, settings.timeout).await;
        enactment
            .probes
            .push(ProbeOutcome { probe: probe.to_string(), error: result.clone().err() });
        if let Err(error) = result {
            let how = roll_back(backend, &ours, revert.as_ref(), &policy.name).await;
            let message = format!("probe {probe} failed after the change: {error}; {how}");
            warn!(policy = %policy.name, %message, "network: policy failed");
            enactment.transition(EnactmentStatus::Failing, message, now());
            return (record(store, enactment), Attempt::Failed);
        }
    }
    if backend.kind == NetworkBackend::NetworkManager {
        if let Err(error) = backend.commit(&ours).await {
            // The checkpoint's timeout rolls the change back by itself.
            enactment.transition(
                EnactmentStatus::Failing,
                format!("cannot commit: {error}"),
                now(),
            );
            warn!(policy = %policy.name, %error, "network: commit failed");
            return (record(store, enactment), Attempt::Failed);
        }
    }
    enactment.transition(
        EnactmentStatus::Available,
        format!("applied; probes passed: {}", list(&names)),
        now(),
    );
    info!(policy = %policy.name, "network: policy Available");
    (record(store, enactment), Attempt::Applied(revert))
}

/// Undoes an applied policy; says how, for the enactment. NetworkManager: back to the
/// checkpoint, then the revert state wherever the checkpoint fell short. Kernel: the revert
/// state.
async fn roll_back(
    backend: &Backend,
    checkpoint: &str,
    revert: Option<&Value>,
    policy: &str,
) -> &'static str {
    if backend.kind == NetworkBackend::Kernel {
        return match revert {
            Some(revert) if reapply(backend, revert, policy).await => "rolled back",
            _ => "rollback FAILED",
        };
    }
    if let Err(error) = backend.rollback(checkpoint).await {
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
    let node = node_identity(config.announce.node.name.as_deref(), &config.network);
    Ok(config
        .network
        .policies
        .iter()
        .map(|policy| {
            let change = resolved_state(policy, &node, &current).and_then(|desired| {
                Backend::diff(&desired, &current)
                    .map(|diff| effective_change(diff, &desired, &current.json))
            });
            (policy.name.clone(), change)
        })
        .collect())
}
