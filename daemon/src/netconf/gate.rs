//! The order the daemon keeps at start and on every reload (docs/network.md): the network
//! policies first, then the BGP routers whose VRF devices exist. A router whose VRF is missing
//! waits — `show bgp summary` and the log say so — and starts by itself when the kernel
//! reports the VRF ([`links::watch_node`]).
//!
//! The gate decides and tells; it does not start routers. The reloader, which owns the running
//! routers at start and on every reload, asks [`NetworkGate::hold`] which routers must wait,
//! applies the policies with [`NetworkGate::apply_policies`] (and undoes them with
//! [`NetworkGate::undo`] when the reload is refused after all), starts the others, and on
//! [`NetworkGate::view`] changes asks again and starts the ones that may go now.
//!
//! At start a policy that fails (or is rolled back, or takes longer than [`APPLY_WAIT`]) never
//! keeps the routers from starting on whatever network exists; a reload whose policy fails is
//! refused whole.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;
use tokio::sync::watch;
use tracing::{info, warn};

use crate::config::{vrf_display_name, Config, Router};

use super::apply::{now, ApplyOptions};
use super::backend::BUILT;
use super::enactment::EnactmentStatus;
use super::links::{self, NodeView};
use super::readiness::{router_waits_for, waiting_neighbors};
use super::worker::{Applied, NetconfWorker};

/// How long the daemon waits for the policies before it starts its routers anyway. Below
/// uplink.service's `TimeoutStartSec` (120 s), above one failing policy with the default
/// probe timeouts. The apply goes on in its thread; a router it was to make ready starts when
/// its VRF appears.
pub const APPLY_WAIT: Duration = Duration::from_secs(90);

/// What a reload (or the start) did to one network policy: `uplink reload` prints it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PolicyOutcome {
    pub policy: String,
    /// The enactment's status (`Available`, `Failing`, ...).
    pub status: &'static str,
    pub message: String,
    /// This run changed the node for it (applied, or tried and rolled back).
    pub changed: bool,
}

/// What a run of the policies did, for the reload that ran it.
#[derive(Debug, Default)]
pub struct PolicyReport {
    pub policies: Vec<PolicyOutcome>,
    /// What to undo if the reload is refused after all.
    pub applied: Applied,
    /// The policies this run tried that did not end Available.
    pub failed: Vec<String>,
    /// The run did not finish (or could not start): why.
    pub unfinished: Option<String>,
}

/// A router that has not started, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct WaitingRouter {
    pub asn: u32,
    /// What it waits for ("VRF device cudn3").
    pub waiting_for: String,
    /// Unix seconds.
    pub since: u64,
}

/// Waiting routers by VRF name.
pub type WaitingRouters = BTreeMap<String, WaitingRouter>;

/// What `show` reads: the waiting routers and the kernel's view of the node.
#[derive(Clone)]
pub struct GateView {
    pub waiting: watch::Receiver<Arc<WaitingRouters>>,
    pub node: watch::Receiver<Arc<NodeView>>,
}

pub struct NetworkGate {
    worker: NetconfWorker,
    node: watch::Receiver<Arc<NodeView>>,
    waiting: watch::Sender<Arc<WaitingRouters>>,
}

impl NetworkGate {
    /// Starts the network-policy thread and the link watch.
    pub fn start() -> Result<NetworkGate, String> {
        let worker = NetconfWorker::spawn()?;
        let node = links::watch_node()?;
        let (waiting, _) = watch::channel(Arc::new(WaitingRouters::new()));
        Ok(NetworkGate { worker, node, waiting })
    }

    /// Applies `config`'s selected policies and says what happened to each. `wait` bounds how
    /// long the caller waits (the start: [`APPLY_WAIT`], then the routers start on the network
    /// as it is while the apply goes on); `None` waits for the end (a reload, whose answer
    /// depends on it). Never fails: what went wrong is in the report, the log and the
    /// enactments.
    pub async fn apply_policies(&self, config: &Config, wait: Option<Duration>) -> PolicyReport {
        let policies = &config.network.policies;
        if policies.is_empty() {
            return PolicyReport::default();
        }
        if !BUILT {
            warn!(
                count = policies.len(),
                "network: this uplink was built without the `netconf` feature; the network \
                 policies are not applied"
            );
            return PolicyReport::default();
        }
        info!(
            count = policies.len(),
            "network: applying the selected policies before the BGP routers"
        );
        let done = match self.worker.apply(Arc::new(config.clone()), ApplyOptions::default()).await
        {
            Ok(done) => done,
            Err(error) => {
                warn!(%error, "network: policies not applied");
                return PolicyReport { unfinished: Some(error), ..Default::default() };
            }
        };
        let run = match wait {
            Some(limit) => match tokio::time::timeout(limit, done).await {
                Ok(run) => run,
                Err(_) => {
                    let note = format!(
                        "the policies take longer than {limit:?}; the routers start now, and \
                         those waiting for a VRF start when it appears"
                    );
                    warn!("network: {note}");
                    return PolicyReport { unfinished: Some(note), ..Default::default() };
                }
            },
            None => done.await,
        };
        let Ok(run) = run else {
            let note = "the policy thread stopped during the apply".to_string();
            warn!("network: {note}");
            return PolicyReport { unfinished: Some(note), ..Default::default() };
        };
        let failing: Vec<String> = run
            .enactments
            .iter()
            .filter(|e| e.status != EnactmentStatus::Available)
            .map(|e| format!("{} {:?}: {}", e.policy, e.status, e.message))
            .collect();
        if failing.is_empty() {
            info!(count = run.enactments.len(), "network: every selected policy is Available");
        } else {
            warn!(
                "network: {} of {} policies not Available: {}",
                failing.len(),
                run.enactments.len(),
                failing.join("; ")
            );
        }
        PolicyReport {
            policies: run
                .enactments
                .iter()
                .map(|e| PolicyOutcome {
                    policy: e.policy.clone(),
                    status: e.status.name(),
                    message: e.message.clone(),
                    changed: run.applied.iter().any(|(name, _)| *name == e.policy)
                        || run.failed.contains(&e.policy),
                })
                .collect(),
            applied: run.applied,
            failed: run.failed,
            unfinished: None,
        }
    }

    /// Undoes what [`Self::apply_policies`] applied (`report.applied`), for a reload refused
    /// after it; returns the policies that could not be undone.
    pub async fn undo(&self, config: &Config, applied: Applied, reason: &str) -> Vec<String> {
        if applied.is_empty() {
            return Vec::new();
        }
        let names: Vec<String> = applied.iter().map(|(name, _)| name.clone()).collect();
        match self.worker.undo(Arc::new(config.clone()), applied, reason.to_string()).await {
            Ok(failed) => failed,
            Err(error) => {
                warn!(%error, "network: the policies of the refused reload are not undone");
                names
            }
        }
    }

    /// Of `routers`, those not in `running` whose VRF device is missing: they wait. Publishes
    /// the waiting list (for `show bgp summary`) and logs what changed in it, and what the
    /// routers allowed to start still lack (a neighbor's source address).
    pub fn hold(&self, routers: &[Router], running: &BTreeSet<String>) -> BTreeSet<String> {
        // A fresh read: the notifications of what the policies just did may still be on
        // their way to the watch.
        let view = match NodeView::read() {
            Ok(view) => Arc::new(view),
            Err(error) => {
                warn!(%error, "network: cannot read the node's links; using the last view");
                self.node.borrow().clone()
            }
        };
        let before = self.waiting.borrow().clone();
        let mut waiting = WaitingRouters::new();
        for router in routers.iter().filter(|r| !running.contains(&r.vrf)) {
            let vrf = vrf_display_name(&router.vrf);
            match router_waits_for(router, &view) {
                Some(what) => {
                    let since = match before.get(&router.vrf) {
                        Some(w) if w.waiting_for == what => w.since,
                        _ => {
                            info!(%vrf, asn = router.asn, "BGP router waits for {what}; it starts when that appears");
                            now()
                        }
                    };
                    waiting.insert(
                        router.vrf.clone(),
                        WaitingRouter { asn: router.asn, waiting_for: what, since },
                    );
                }
                None => {
                    if let Some(w) = before.get(&router.vrf) {
                        info!(%vrf, asn = router.asn, "{} is there: the BGP router starts", w.waiting_for);
                    }
                    for note in waiting_neighbors(router, &view) {
                        info!(%vrf, "{note}; its session connects once it is there");
                    }
                }
            }
        }
        let held = waiting.keys().cloned().collect();
        self.waiting.send_replace(Arc::new(waiting));
        held
    }

    /// The VRFs of the routers waiting now.
    pub fn waiting_vrfs(&self) -> BTreeSet<String> {
        self.waiting.borrow().keys().cloned().collect()
    }

    /// Changes whenever the kernel's links or addresses do: the moment to ask [`Self::hold`]
    /// again.
    pub fn view(&self) -> watch::Receiver<Arc<NodeView>> {
        self.node.clone()
    }

    /// For `show bgp summary`.
    pub fn show(&self) -> GateView {
        GateView { waiting: self.waiting.subscribe(), node: self.node.clone() }
    }
}
