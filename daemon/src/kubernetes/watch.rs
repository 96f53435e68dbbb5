//! One watcher per kind, and the set of objects they publish together.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use futures_lite::StreamExt;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, ListParams};
use kube::runtime::watcher::{self, Event};
use kube::runtime::WatchStreamExt;
use kube::Client;
use serde_json::Value;
use tokio::sync::{watch as channel, Notify};
use tracing::{info, warn};

use crate::config::{ApiObjects, KubernetesConfig, API_SOURCE_PREFIX};
use crate::logthrottle::{held_back_note, LogThrottle, LOG_PERIOD};

/// Where the objects of a kind are read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Scope {
    /// Namespaced, in every namespace (Services, EndpointSlices).
    AllNamespaces,
    /// Namespaced, in `[kubernetes] namespace` (MetalLB's and frr-k8s's objects).
    OwnNamespace,
    /// Cluster-scoped.
    Cluster,
    /// The `Node` named as this node.
    ThisNode,
}

struct Kind {
    group: &'static str,
    version: &'static str,
    kind: &'static str,
    plural: &'static str,
    scope: Scope,
}

const fn kind(
    group: &'static str,
    version: &'static str,
    kind: &'static str,
    plural: &'static str,
    scope: Scope,
) -> Kind {
    Kind { group, version, kind, plural, scope }
}

/// What is watched: the kinds the manifest parser reads, at the versions upstream serves.
const KINDS: [Kind; 12] = [
    kind("", "v1", "Node", "nodes", Scope::ThisNode),
    kind("", "v1", "Service", "services", Scope::AllNamespaces),
    kind("discovery.k8s.io", "v1", "EndpointSlice", "endpointslices", Scope::AllNamespaces),
    kind("metallb.io", "v1beta1", "IPAddressPool", "ipaddresspools", Scope::OwnNamespace),
    kind("metallb.io", "v1beta1", "BGPAdvertisement", "bgpadvertisements", Scope::OwnNamespace),
    kind("metallb.io", "v1beta2", "BGPPeer", "bgppeers", Scope::OwnNamespace),
    kind("metallb.io", "v1beta1", "BFDProfile", "bfdprofiles", Scope::OwnNamespace),
    kind("metallb.io", "v1beta1", "Community", "communities", Scope::OwnNamespace),
    kind(
        "frrk8s.metallb.io",
        "v1beta1",
        "FRRConfiguration",
        "frrconfigurations",
        Scope::OwnNamespace,
    ),
    kind("k8s.ovn.org", "v1", "RouteAdvertisements", "routeadvertisements", Scope::Cluster),
    kind(
        "k8s.ovn.org",
        "v1",
        "ClusterUserDefinedNetwork",
        "clusteruserdefinednetworks",
        Scope::Cluster,
    ),
    kind(
        "nmstate.io",
        "v1",
        "NodeNetworkConfigurationPolicy",
        "nodenetworkconfigurationpolicies",
        Scope::Cluster,
    ),
];

/// How long a burst of events (a relist, a Deployment's endpoints) is gathered into one set.
const GATHER: Duration = Duration::from_millis(20);

/// Each Service's `status.loadBalancer.ingress` addresses as the API has them, by
/// `namespace/name`, for the status writer.
pub(super) type Ingresses = Arc<Mutex<BTreeMap<String, Vec<IpAddr>>>>;

#[derive(Default)]
struct KindState {
    /// Listed at least once (or not served by this API server).
    ready: bool,
    objects: BTreeMap<PathBuf, String>,
}

struct Shared {
    kinds: Mutex<Vec<KindState>>,
    changed: Notify,
    ingresses: Ingresses,
}

/// Starts a watcher per kind and the task that publishes their objects together.
pub(super) fn spawn(
    client: Client,
    settings: &KubernetesConfig,
    node: &str,
    publish: channel::Sender<Arc<ApiObjects>>,
) -> Ingresses {
    let shared = Arc::new(Shared {
        kinds: Mutex::new(KINDS.iter().map(|_| KindState::default()).collect()),
        changed: Notify::new(),
        ingresses: Arc::default(),
    });
    for (index, kind) in KINDS.iter().enumerate() {
        let api = api_for(&client, kind, &settings.namespace);
        let config = match kind.scope {
            Scope::ThisNode => watcher::Config::default().fields(&format!("metadata.name={node}")),
            _ => watcher::Config::default(),
        };
        tokio::spawn(watch_kind(api, config, kind, index, shared.clone()));
    }
    let ingresses = shared.ingresses.clone();
    tokio::spawn(publish_sets(shared, publish));
    ingresses
}

fn api_for(client: &Client, kind: &Kind, namespace: &str) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk(kind.group, kind.version, kind.kind);
    let resource = ApiResource::from_gvk_with_plural(&gvk, kind.plural);
    match kind.scope {
        Scope::OwnNamespace => Api::namespaced_with(client.clone(), namespace, &resource),
        _ => Api::all_with(client.clone(), &resource),
    }
}

/// Lists and watches one kind until the process ends. A kind the API server does not serve
/// (its CRD is not installed), or that RBAC does not let uplink read, counts as listed and
/// empty: one missing kind must not hold back every other.
async fn watch_kind(
    api: Api<DynamicObject>,
    config: watcher::Config,
    kind: &'static Kind,
    index: usize,
    shared: Arc<Shared>,
) {
    if let Err(kube::Error::Api(status)) = api.list_metadata(&ListParams::default().limit(1)).await
    {
        let why = match status.code {
            404 => Some("not served by this API server (no CRD)"),
            403 => Some("forbidden by RBAC (deploy/kubernetes/rbac.yaml lists what uplink reads)"),
            _ => None,
        };
        if let Some(why) = why {
            warn!(kind = kind.kind, "{why}: not watched until uplink starts again");
            shared.update(index, |state| state.ready = true);
            return;
        }
    }
    let mut stream = watcher::watcher(api, config).default_backoff().boxed();
    let mut listing: Option<BTreeMap<PathBuf, String>> = None;
    let mut failures = LogThrottle::new(LOG_PERIOD);
    while let Some(event) = stream.next().await {
        match event {
            Ok(Event::Init) => listing = Some(BTreeMap::new()),
            Ok(Event::InitApply(object)) => {
                shared.note_ingress(kind, &object, false);
                if let Some(listing) = listing.as_mut() {
                    let (path, text) = reduce(kind, object);
                    listing.insert(path, text);
                }
            }
            Ok(Event::InitDone) => {
                let listed = listing.take().unwrap_or_default();
                shared.update(index, |state| {
                    state.objects = listed;
                    state.ready = true;
                });
            }
            Ok(Event::Apply(object)) => {
                shared.note_ingress(kind, &object, false);
                let (path, text) = reduce(kind, object);
                shared.update(index, |state| {
                    state.objects.insert(path, text);
                });
            }
            Ok(Event::Delete(object)) => {
                shared.note_ingress(kind, &object, true);
                let (path, _) = reduce(kind, object);
                shared.update(index, |state| {
                    state.objects.remove(&path);
                });
            }
            Err(error) => {
                if let Some(held_back) = failures.event(Instant::now()) {
                    warn!(
                        kind = kind.kind,
                        "watch failed, retrying; what was read stays in force: {error}{}",
                        held_back_note(held_back)
                    );
                }
            }
        }
    }
}

impl Shared {
    fn update(&self, index: usize, change: impl FnOnce(&mut KindState)) {
        let mut kinds = self.kinds.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(state) = kinds.get_mut(index) {
            change(state);
        }
        drop(kinds);
        self.changed.notify_one();
    }

    fn note_ingress(&self, kind: &Kind, object: &DynamicObject, deleted: bool) {
        if kind.kind != "Service" {
            return;
        }
        let key = format!(
            "{}/{}",
            object.metadata.namespace.as_deref().unwrap_or("default"),
            object.metadata.name.as_deref().unwrap_or_default()
        );
        let mut ingresses = self.ingresses.lock().unwrap_or_else(PoisonError::into_inner);
        if deleted {
            ingresses.remove(&key);
            return;
        }
        let listed = object
            .data
            .pointer("/status/loadBalancer/ingress")
            .and_then(Value::as_array)
            .map(|list| {
                list.iter()
                    .filter_map(|entry| entry.get("ip").and_then(Value::as_str))
                    .filter_map(|ip| ip.parse().ok())
                    .collect()
            })
            .unwrap_or_default();
        ingresses.insert(key, listed);
    }
}

/// Publishes the objects of every kind as one set, once every kind has been listed, whenever
/// it differs from the last one published.
async fn publish_sets(shared: Arc<Shared>, publish: channel::Sender<Arc<ApiObjects>>) {
    let mut waiting_logged = false;
    loop {
        shared.changed.notified().await;
        tokio::time::sleep(GATHER).await;
        let objects = {
            let kinds = shared.kinds.lock().unwrap_or_else(PoisonError::into_inner);
            if !kinds.iter().all(|k| k.ready) {
                if !waiting_logged {
                    info!("waiting for the first list of every kind");
                    waiting_logged = true;
                }
                continue;
            }
            let mut objects: Vec<(PathBuf, String)> = kinds
                .iter()
                .flat_map(|k| k.objects.iter().map(|(p, t)| (p.clone(), t.clone())))
                .collect();
            objects.sort();
            objects
        };
        publish.send_if_modified(|current| {
            if current.objects == objects {
                return false;
            }
            *current = Arc::new(ApiObjects { objects });
            true
        });
    }
}

/// An object as a config source: its name, and its text with only what the config reads —
/// `status` and the server's metadata go, so neither our status writes nor the apiserver's
/// bookkeeping make a new set.
fn reduce(kind: &Kind, object: DynamicObject) -> (PathBuf, String) {
    let name = object.metadata.name.clone().unwrap_or_default();
    let path = match &object.metadata.namespace {
        Some(namespace) => format!("{API_SOURCE_PREFIX}{}/{namespace}/{name}", kind.kind),
        None => format!("{API_SOURCE_PREFIX}{}/{name}", kind.kind),
    };
    let mut metadata = serde_json::Map::new();
    metadata.insert("name".into(), Value::from(name));
    if let Some(namespace) = object.metadata.namespace {
        metadata.insert("namespace".into(), Value::from(namespace));
    }
    if let Some(labels) = object.metadata.labels.filter(|l| !l.is_empty()) {
        metadata.insert("labels".into(), serde_json::to_value(labels).unwrap_or_default());
    }
    let annotations = object.metadata.annotations.map(|mut annotations| {
        annotations.remove("kubectl.kubernetes.io/last-applied-configuration");
        annotations
    });
    if let Some(annotations) = annotations.filter(|a| !a.is_empty()) {
        metadata
            .insert("annotations".into(), serde_json::to_value(annotations).unwrap_or_default());
    }
    let mut top = serde_json::Map::new();
    let api_version = if kind.group.is_empty() {
        kind.version.to_string()
    } else {
        format!("{}/{}", kind.group, kind.version)
    };
    top.insert("apiVersion".into(), Value::from(api_version));
    top.insert("kind".into(), Value::from(kind.kind));
    top.insert("metadata".into(), Value::Object(metadata));
    if let Value::Object(data) = object.data {
        for (key, value) in data {
            if key != "status" && key != "apiVersion" && key != "kind" && key != "metadata" {
                top.insert(key, value);
            }
        }
    }
    let text = serde_norway::to_string(&Value::Object(top)).unwrap_or_default();
    (PathBuf::from(path), text)
}
