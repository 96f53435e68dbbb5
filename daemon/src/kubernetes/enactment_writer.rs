//! kubernetes-nmstate's `NodeNetworkConfigurationEnactment` (nmstate.io/v1beta1, cluster-scoped,
//! named `<node>.<policy>`, labelled `nmstate.io/node` and `nmstate.io/policy`, owned by the
//! Node) for each policy read from the API that selects this node, and the policies'
//! `status.conditions`, as the nmstate handler writes them: `kubectl get nnce` and
//! `kubectl get nncp` answer what they answer with kubernetes-nmstate.
//!
//! - An enactment is read from the enactments file the policy thread writes (the record
//!   `uplink show network enactments` shows), looked at every 2 s, and its NNCE written
//!   (server-side apply) when it changed or its policy did (a new generation). The NNCE of a
//!   policy this node no longer has (deleted, its nodeSelector no longer matching, refused)
//!   is deleted — once the objects were listed, never while the last run's set is in force.
//! - A policy's conditions count every node's NNCEs (listed by the policy label) as
//!   kubernetes-nmstate counts them. Every node computes the same from the same objects, so
//!   any node may write them, with no leader: each looks after a change of its own NNCE or of
//!   the policy, and again 5 s and 30 s later (another node's change that raced with the list
//!   shows by then), and writes only when the API's conditions say something else.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Node;
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams,
};
use kube::Client;
use serde_json::{json, Value};
use tokio::sync::watch as channel;
use tracing::warn;

use super::health::{self, Health};
use super::nmstate_conditions::{self as conditions, Counts};
use super::status::FIELD_MANAGER;
use super::write_outcomes::WriteOutcomes;
use crate::config::{ApiObjects, Config, API_SOURCE_PREFIX};
use crate::logthrottle::{held_back_note, LogThrottle, LOG_PERIOD};
use crate::netconf::enactment::rfc3339;
use crate::netconf::{Enactment, EnactmentStore};

const POLICY_KIND: &str = "NodeNetworkConfigurationPolicy";
const ENACTMENT_API_VERSION: &str = "nmstate.io/v1beta1";
const NODE_LABEL: &str = "nmstate.io/node";
const POLICY_LABEL: &str = "nmstate.io/policy";

/// How often the enactments file is looked at.
const PERIOD: Duration = Duration::from_secs(2);
/// When a policy's conditions are looked at again after a change.
const RECHECKS: [Duration; 2] = [Duration::from_secs(5), Duration::from_secs(30)];

pub(super) fn spawn(
    client: Client,
    node: &str,
    running: channel::Receiver<Arc<Config>>,
    objects: channel::Receiver<Arc<ApiObjects>>,
    health: Health,
) {
    let mut writer = Writer::new(client, node);
    tokio::spawn(async move {
        let mut outcomes = WriteOutcomes::new(
            "NodeNetworkConfigurationEnactment",
            "deploy/kubernetes/crds/nmstate.yaml",
            |h| &mut h.enactment_writes,
            health.clone(),
        );
        let mut tick = tokio::time::interval(PERIOD);
        let mut pause_until = Instant::now();
        loop {
            tick.tick().await;
            if Instant::now() < pause_until {
                continue;
            }
            let config = running.borrow().clone();
            let objects = objects.borrow().clone();
            let synced = health::update(&health, |h| h.last_sync.is_some());
            match writer.tick(&config, &objects, synced).await {
                Ok(writes) => outcomes.succeeded(writes),
                Err(e) => {
                    let retry = outcomes.failed(&e, writer.written.is_some());
                    if retry.relearn {
                        writer.written = None;
                    }
                    pause_until = Instant::now() + retry.wait;
                }
            }
        }
    });
}

/// What an NNCE in the API was written from.
#[derive(Debug, Clone, PartialEq)]
struct Written {
    enactment: Enactment,
    generation: Option<i64>,
}

struct Writer {
    enactments: Api<DynamicObject>,
    policies: Api<DynamicObject>,
    nodes: Api<Node>,
    node: String,
    /// The Node's uid, for the NNCE's owner reference (upstream's: the NNCEs go with the Node).
    node_uid: Option<String>,
    /// This node's NNCEs in the API, by policy: `None` until listed; an entry's value is what
    /// it was written from (`None`: found by the list, or its policy changed since).
    written: Option<BTreeMap<String, Option<Written>>>,
    /// The API's policies as last seen (name → the object as the config reads it).
    seen: BTreeMap<String, String>,
    /// When each policy's conditions are to be looked at.
    due: BTreeSet<(Instant, String)>,
    /// An enactments file that cannot be read is said once a period, not every look.
    unreadable: LogThrottle,
}

impl Writer {
    fn new(client: Client, node: &str) -> Writer {
        let api = |kind: &str, version: &str, plural: &str| -> Api<DynamicObject> {
            let gvk = GroupVersionKind::gvk("nmstate.io", version, kind);
            Api::all_with(client.clone(), &ApiResource::from_gvk_with_plural(&gvk, plural))
        };
        Writer {
            enactments: api(
                "NodeNetworkConfigurationEnactment",
                "v1beta1",
                "nodenetworkconfigurationenactments",
            ),
            policies: api(POLICY_KIND, "v1", "nodenetworkconfigurationpolicies"),
            nodes: Api::all(client.clone()),
            node: node.to_string(),
            node_uid: None,
            written: None,
            seen: BTreeMap::new(),
            due: BTreeSet::new(),
            unreadable: LogThrottle::new(LOG_PERIOD),
        }
    }

    /// One look: the NNCEs brought to the enactments, then the conditions that are due.
    /// Returns how many objects it wrote.
    async fn tick(
        &mut self,
        config: &Config,
        objects: &ApiObjects,
        synced: bool,
    ) -> Result<u64, kube::Error> {
        let now = Instant::now();
        let mut writes = 0;
        // The API's policies: a new or changed one is due, and this node's NNCE of it is
        // written again (its generation moved).
        let policies = api_policies(objects);
        for (name, text) in &policies {
            if self.seen.get(name) != Some(text) {
                self.schedule(name, now);
                if let Some(Some(entry)) = self.written.as_mut().and_then(|w| w.get_mut(name)) {
                    entry.generation = None;
                }
            }
        }
        self.seen = policies;
        if self.seen.is_empty() && self.written.is_none() {
            // No policy in the cluster (or no nmstate CRD): nothing to list or write.
            return Ok(writes);
        }

        if self.written.is_none() {
            // What a previous run left is listed, so what is gone gets deleted.
            let listed = self
                .enactments
                .list_metadata(
                    &ListParams::default().labels(&format!("{NODE_LABEL}={}", self.node)),
                )
                .await?;
            let policies = listed
                .items
                .into_iter()
                .filter_map(|o| o.metadata.labels?.get(POLICY_LABEL).cloned());
            self.written = Some(policies.map(|policy| (policy, None)).collect());
        }
        let Some(wanted) = self.wanted(config) else { return Ok(writes) };
        for (policy, enactment) in &wanted {
            let current = self.written.as_ref().and_then(|w| w.get(policy)).cloned().flatten();
            if current.as_ref().is_some_and(|c| c.enactment == *enactment && c.generation.is_some())
            {
                continue;
            }
            let generation =
                self.policies.get_opt(policy).await?.and_then(|p| p.metadata.generation);
            if current
                .as_ref()
                .is_some_and(|c| c.enactment == *enactment && c.generation == generation)
            {
                self.remember(policy, Written { enactment: enactment.clone(), generation });
                continue;
            }
            self.write(policy, enactment, generation, current.is_none()).await?;
            self.remember(policy, Written { enactment: enactment.clone(), generation });
            self.schedule(policy, now);
            writes += 1;
        }
        if synced {
            let gone: Vec<String> = self
                .written
                .iter()
                .flat_map(|w| w.keys())
                .filter(|policy| !wanted.contains_key(*policy))
                .cloned()
                .collect();
            for policy in gone {
                let name = self.object_name(&policy);
                match self.enactments.delete(&name, &DeleteParams::default()).await {
                    Ok(_) => {}
                    Err(kube::Error::Api(status)) if status.code == 404 => {}
                    Err(e) => return Err(e),
                }
                if let Some(written) = self.written.as_mut() {
                    written.remove(&policy);
                }
                self.schedule(&policy, now);
            }
        }

        let due: Vec<(Instant, String)> =
            self.due.iter().take_while(|(at, _)| *at <= now).cloned().collect();
        for entry in due {
            if self.seen.contains_key(&entry.1) && self.write_conditions(&entry.1).await? {
                writes += 1;
            }
            self.due.remove(&entry);
        }
        Ok(writes)
    }

    /// The enactments of the policies from the API that select this node, by policy; `None`
    /// when the enactments file cannot be read (nothing is written or deleted then).
    fn wanted(&mut self, config: &Config) -> Option<BTreeMap<String, Enactment>> {
        let store = match EnactmentStore::open(&config.network.state_dir) {
            Ok(store) => store,
            Err(error) => {
                if let Some(held_back) = self.unreadable.event(Instant::now()) {
                    warn!(
                        "the NodeNetworkConfigurationEnactments wait for a readable enactments \
                         file: {error}{}",
                        held_back_note(held_back)
                    );
                }
                return None;
            }
        };
        let wanted = config
            .network
            .policies
            .iter()
            .filter(|p| p.from_api())
            .filter_map(|p| Some((p.name.clone(), store.enactments.get(&p.name)?.clone())))
            .collect();
        Some(wanted)
    }

    fn remember(&mut self, policy: &str, written: Written) {
        if let Some(all) = self.written.as_mut() {
            all.insert(policy.to_string(), Some(written));
        }
    }

    fn schedule(&mut self, policy: &str, now: Instant) {
        self.due.insert((now, policy.to_string()));
        for later in RECHECKS {
            self.due.insert((now + later, policy.to_string()));
        }
    }

    /// `<node>.<policy>`, upstream's name.
    fn object_name(&self, policy: &str) -> String {
        format!("{}.{policy}", self.node)
    }

    /// Writes the NNCE of `policy`; `create` also writes its metadata (labels, owner).
    async fn write(
        &mut self,
        policy: &str,
        enactment: &Enactment,
        generation: Option<i64>,
        create: bool,
    ) -> Result<(), kube::Error> {
        let name = self.object_name(policy);
        let params = PatchParams::apply(FIELD_MANAGER).force();
        if create {
            if self.node_uid.is_none() {
                self.node_uid = self.nodes.get_opt(&self.node).await?.and_then(|n| n.metadata.uid);
            }
            let mut metadata = json!({
                "name": name,
                "labels": { NODE_LABEL: self.node, POLICY_LABEL: policy },
            });
            if let (Some(uid), Some(map)) = (&self.node_uid, metadata.as_object_mut()) {
                map.insert(
                    "ownerReferences".into(),
                    json!([{ "apiVersion": "v1", "kind": "Node", "name": self.node, "uid": uid }]),
                );
            }
            let object = json!({
                "apiVersion": ENACTMENT_API_VERSION,
                "kind": "NodeNetworkConfigurationEnactment",
                "metadata": metadata,
            });
            self.enactments.patch(&name, &params, &Patch::Apply(&object)).await?;
        }
        let object = json!({
            "apiVersion": ENACTMENT_API_VERSION,
            "kind": "NodeNetworkConfigurationEnactment",
            "metadata": { "name": name },
            "status": enactment_status(enactment, generation),
        });
        self.enactments.patch_status(&name, &params, &Patch::Apply(&object)).await?;
        Ok(())
    }

    /// Counts the policy's NNCEs and writes its conditions where the API's differ; whether
    /// it wrote.
    async fn write_conditions(&self, policy: &str) -> Result<bool, kube::Error> {
        let Some(object) = self.policies.get_opt(policy).await? else { return Ok(false) };
        let listed = self
            .enactments
            .list(&ListParams::default().labels(&format!("{POLICY_LABEL}={policy}")))
            .await?;
        let counts = Counts::of(
            listed.items.iter().map(|nnce| {
                let status = nnce.data.get("status");
                let generation =
                    status.and_then(|s| s.get("policyGeneration")).and_then(Value::as_i64);
                (generation, status.and_then(conditions::true_condition))
            }),
            object.metadata.generation,
        );
        let wanted = conditions::policy_conditions(&counts);
        let current: Vec<Value> = object
            .data
            .get("status")
            .and_then(|s| s.get("conditions"))
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        if conditions::unchanged(&wanted, &current) {
            return Ok(false);
        }
        let now = rfc3339(health::unix_now());
        let body = json!({
            "apiVersion": "nmstate.io/v1",
            "kind": POLICY_KIND,
            "metadata": { "name": policy },
            "status": { "conditions": conditions::policy_conditions_json(&wanted, &current, &now) },
        });
        let params = PatchParams::apply(FIELD_MANAGER).force();
        self.policies.patch_status(policy, &params, &Patch::Apply(&body)).await?;
        Ok(true)
    }
}

/// The API's policies (every one, selecting this node or not), by name.
fn api_policies(objects: &ApiObjects) -> BTreeMap<String, String> {
    let prefix = format!("{API_SOURCE_PREFIX}{POLICY_KIND}/");
    objects
        .iter()
        .filter_map(|(path, text)| {
            let name = path.to_str()?.strip_prefix(&prefix)?;
            Some((name.to_string(), text.to_string()))
        })
        .collect()
}

/// The NNCE's status: the desired state as resolved for this node, when, for which generation
/// of the policy, and the conditions of the enactment's status (their times: when it took it).
fn enactment_status(enactment: &Enactment, generation: Option<i64>) -> Value {
    let time = rfc3339(enactment.time);
    let conditions: Vec<Value> =
        conditions::enactment_conditions(enactment.status, &enactment.message)
            .iter()
            .map(|c| c.to_json(&time, &time))
            .collect();
    let mut status = json!({
        "desiredState": enactment.desired_state,
        "desiredStateMetaInfo": { "time": time },
        "conditions": conditions,
    });
    if let (Some(generation), Some(map)) = (generation, status.as_object_mut()) {
        map.insert("policyGeneration".into(), Value::from(generation));
    }
    status
}
