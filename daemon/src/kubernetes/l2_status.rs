//! MetalLB's `ServiceL2Status` (metallb.io/v1beta1) for each Service read from the API that
//! this node answers for in layer 2 mode, in `[kubernetes] namespace`, with upstream's labels
//! (`metallb.io/node`, `metallb.io/service-name`, `metallb.io/service-namespace`) and status
//! (`node`, `serviceName`, `serviceNamespace`, `interfaces` when the advertisements name
//! some), so `kubectl get servicel2statuses` shows which node takes each Service's traffic;
//! and the `nodeAssigned` event ("announcing from node "wk1" with protocol "layer2"") when this
//! node starts answering for a Service.
//!
//! As MetalLB's speaker does it: each node writes only its own objects; the node that takes a
//! Service over deletes the other nodes' objects of that Service (the node it took it from may
//! be dead and unable to); a node that stops answering deletes its own. Names are
//! `l2-<digest of node and Service>` rather than generated ones (MetalLB's `l2-xxxxx`), so a
//! write needs no lookup. Nothing is written while the answers are not decided (the
//! membership joining at a start): the objects the last run left stay until then.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use futures_lite::StreamExt;
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams,
};
use kube::runtime::watcher::{self, Event};
use kube::runtime::WatchStreamExt;
use kube::Client;
use ring::digest::{digest, SHA256};
use serde_json::json;
use tokio::sync::{mpsc, watch};

use super::events::Events;
use super::health::Health;
use super::status::FIELD_MANAGER;
use super::watch::Services;
use super::write_outcomes::WriteOutcomes;
use crate::announce::l2::Interfaces;
use crate::l2::runtime::L2Status;

const NODE_LABEL: &str = "metallb.io/node";
const SERVICE_NAME_LABEL: &str = "metallb.io/service-name";
const SERVICE_NAMESPACE_LABEL: &str = "metallb.io/service-namespace";
const API_VERSION: &str = "metallb.io/v1beta1";

/// What this node's object of one Service says: the interfaces it answers on (none: all).
type Answer = Vec<String>;

pub(super) fn spawn(
    client: Client,
    namespace: &str,
    node: &str,
    mut layer2: watch::Receiver<Arc<L2Status>>,
    services: Services,
    events: Arc<Events>,
    health: Health,
) {
    let gvk = GroupVersionKind::gvk("metallb.io", "v1beta1", "ServiceL2Status");
    let resource = ApiResource::from_gvk_with_plural(&gvk, "servicel2statuses");
    let api: Api<DynamicObject> = Api::namespaced_with(client, namespace, &resource);
    let mut writer = Writer { api: api.clone(), node: node.to_string(), written: None };
    let mut gone = watch_own(api, node);
    tokio::spawn(async move {
        let mut outcomes = WriteOutcomes::new(
            "ServiceL2Status",
            "deploy/kubernetes/crds/metallb.yaml",
            |h| &mut h.layer2_status_writes,
            health,
        );
        // The Services this node has said it announces (`nodeAssigned`) since it last
        // stopped answering for them.
        let mut told: BTreeSet<String> = BTreeSet::new();
        loop {
            let status = layer2.borrow_and_update().clone();
            if status.settled {
                let wanted = answered_from_api(&status, &services);
                for key in wanted.keys().filter(|key| !told.contains(*key)) {
                    events.node_assigned(key, "layer2").await;
                }
                told = wanted.keys().cloned().collect();
                match writer.sync(&wanted).await {
                    Ok(writes) => outcomes.succeeded(writes),
                    Err(e) => {
                        let retry = outcomes.failed(&e, writer.written.is_some());
                        if retry.relearn {
                            writer.written = None;
                        }
                        tokio::select! {
                            changed = layer2.changed() => if changed.is_err() { return },
                            () = tokio::time::sleep(retry.wait) => {}
                        }
                        continue;
                    }
                }
            }
            tokio::select! {
                changed = layer2.changed() => if changed.is_err() { return },
                Some(seen) = gone.recv() => writer.forget(&seen),
            }
        }
    });
}

/// What the watch of this node's own objects saw go.
enum Gone {
    /// One deleted (by the node that took its Service over while this one could not see
    /// it, or by hand).
    Deleted(String),
    /// Listed again: every object not among these is gone.
    Listed(BTreeSet<String>),
}

/// Watches this node's objects, and says which went: another node deletes them when it takes
/// a Service over, also while this node is cut off and still answers (two nodes that cannot
/// see each other both do), and this node must write its object again when it keeps the
/// Service.
fn watch_own(api: Api<DynamicObject>, node: &str) -> mpsc::Receiver<Gone> {
    let (tell, gone) = mpsc::channel(64);
    let config = watcher::Config::default().labels(&format!("{NODE_LABEL}={node}"));
    tokio::spawn(async move {
        let mut stream = watcher::watcher(api, config).default_backoff().boxed();
        let mut listing = BTreeSet::new();
        while let Some(event) = stream.next().await {
            let said = match event {
                Ok(Event::Delete(object)) => object.metadata.name.map(Gone::Deleted),
                Ok(Event::Init) => {
                    listing.clear();
                    None
                }
                Ok(Event::InitApply(object)) => {
                    listing.extend(object.metadata.name);
                    None
                }
                Ok(Event::InitDone) => Some(Gone::Listed(std::mem::take(&mut listing))),
                // Failures are retried with back-off; the writer's own writes report the API's
                // absence.
                Ok(Event::Apply(_)) | Err(_) => None,
            };
            if let Some(said) = said {
                if tell.send(said).await.is_err() {
                    return;
                }
            }
        }
    });
    gone
}

/// The Services read from the API that this node answers for, by `namespace/name`, with the
/// interfaces it answers on. A file's Service has no object to point at.
fn answered_from_api(status: &L2Status, services: &Services) -> BTreeMap<String, Answer> {
    status
        .answered()
        .filter(|service| services.contains(&service.service))
        .map(|service| {
            let interfaces = match &*service.interfaces {
                Interfaces::All => Vec::new(),
                Interfaces::Only(names) => names.iter().cloned().collect(),
            };
            (service.service.to_string(), interfaces)
        })
        .collect()
}

struct Writer {
    api: Api<DynamicObject>,
    node: String,
    /// This node's objects as last written or listed, by Service (`None`: listed, content
    /// unknown); `None` before the first listing.
    written: Option<BTreeMap<String, Option<Answer>>>,
}

impl Writer {
    /// Brings the API's objects of this node to `wanted`, and deletes the other nodes'
    /// objects of the Services it takes over; how many it wrote.
    async fn sync(&mut self, wanted: &BTreeMap<String, Answer>) -> Result<u64, kube::Error> {
        // The first time: every object is listed, so what a previous run left is deleted and
        // what other nodes wrote of the Services this node answers for goes.
        let mut others: BTreeMap<String, Vec<String>> = BTreeMap::new();
        if self.written.is_none() {
            let mut own = BTreeMap::new();
            // This node's objects under other names (a MetalLB speaker's, before uplink).
            let mut leftovers = Vec::new();
            for object in self.api.list_metadata(&ListParams::default()).await?.items {
                let Some(name) = object.metadata.name else { continue };
                let labels = object.metadata.labels.unwrap_or_default();
                let key =
                    match (labels.get(SERVICE_NAMESPACE_LABEL), labels.get(SERVICE_NAME_LABEL)) {
                        (Some(namespace), Some(service)) => format!("{namespace}/{service}"),
                        _ => continue,
                    };
                if labels.get(NODE_LABEL) != Some(&self.node) {
                    others.entry(key).or_default().push(name);
                } else if name == object_name(&self.node, &key) {
                    own.insert(key, None);
                } else {
                    leftovers.push(name);
                }
            }
            for name in leftovers {
                delete(&self.api, &name).await?;
            }
            self.written = Some(own);
        }
        let Some(written) = self.written.as_mut() else { return Ok(0) };
        let mut writes = 0;
        for (key, interfaces) in wanted {
            let taken = match written.get(key) {
                Some(Some(current)) if current == interfaces => continue,
                Some(_) => false,
                None => true,
            };
            let (namespace, service) = key.split_once('/').unwrap_or(("", key));
            let name = object_name(&self.node, key);
            if taken {
                let stale = match others.remove(key) {
                    Some(names) => names,
                    None => other_nodes_objects(&self.api, &self.node, namespace, service).await?,
                };
                for other in stale {
                    delete(&self.api, &other).await?;
                }
                let object = json!({
                    "apiVersion": API_VERSION,
                    "kind": "ServiceL2Status",
                    "metadata": {
                        "name": name,
                        "labels": {
                            NODE_LABEL: self.node,
                            SERVICE_NAME_LABEL: service,
                            SERVICE_NAMESPACE_LABEL: namespace,
                        },
                    },
                    "spec": {},
                });
                let params = PatchParams::apply(FIELD_MANAGER).force();
                self.api.patch(&name, &params, &Patch::Apply(&object)).await?;
            }
            let interfaces_field: Vec<_> =
                interfaces.iter().map(|name| json!({ "name": name })).collect();
            let status = json!({
                "apiVersion": API_VERSION,
                "kind": "ServiceL2Status",
                "status": {
                    "node": self.node,
                    "serviceName": service,
                    "serviceNamespace": namespace,
                    "interfaces": interfaces_field,
                },
            });
            let params = PatchParams::apply(FIELD_MANAGER).force();
            self.api.patch_status(&name, &params, &Patch::Apply(&status)).await?;
            written.insert(key.clone(), Some(interfaces.clone()));
            writes += 1;
        }
        let gone: Vec<String> =
            written.keys().filter(|key| !wanted.contains_key(*key)).cloned().collect();
        for key in gone {
            delete(&self.api, &object_name(&self.node, &key)).await?;
            written.remove(&key);
        }
        Ok(writes)
    }
}

impl Writer {
    /// Forgets the objects that went, so the next sync writes them again if they are wanted.
    fn forget(&mut self, gone: &Gone) {
        let Some(written) = self.written.as_mut() else { return };
        let node = &self.node;
        written.retain(|key, _| {
            let name = object_name(node, key);
            match gone {
                Gone::Deleted(deleted) => name != *deleted,
                Gone::Listed(listed) => listed.contains(&name),
            }
        });
    }
}

/// The names of the other nodes' objects of the Service `namespace/service`.
async fn other_nodes_objects(
    api: &Api<DynamicObject>,
    node: &str,
    namespace: &str,
    service: &str,
) -> Result<Vec<String>, kube::Error> {
    let selector = format!(
        "{SERVICE_NAMESPACE_LABEL}={namespace},{SERVICE_NAME_LABEL}={service},{NODE_LABEL}!={node}"
    );
    let listed = api.list_metadata(&ListParams::default().labels(&selector)).await?;
    Ok(listed.items.into_iter().filter_map(|o| o.metadata.name).collect())
}

/// Deletes the object `name`; one already gone is no error.
async fn delete(api: &Api<DynamicObject>, name: &str) -> Result<(), kube::Error> {
    match api.delete(name, &DeleteParams::default()).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(()),
        Err(e) => Err(e),
    }
}

/// `l2-` and 16 hex digits of the SHA-256 of node and Service: a valid object name whatever
/// their lengths, the same at every start.
fn object_name(node: &str, key: &str) -> String {
    let hashed = digest(&SHA256, format!("{node}\n{key}").as_bytes());
    let hex: String = hashed.as_ref().iter().take(8).map(|b| format!("{b:02x}")).collect();
    format!("l2-{hex}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_short_stable_and_per_node() {
        let name = object_name("wk1", "shop/web");
        assert_eq!(name.len(), 3 + 16);
        assert!(name.starts_with("l2-"));
        assert_eq!(name, object_name("wk1", "shop/web"));
        assert_ne!(name, object_name("wk2", "shop/web"));
        assert_ne!(name, object_name("wk1", "shop/webs"));
    }
}
