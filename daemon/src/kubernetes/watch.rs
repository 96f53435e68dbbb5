//! One watcher per kind, and the set of objects they publish together.

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use futures_lite::StreamExt;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind};
use kube::runtime::watcher::{self, Event};
use kube::Client;
use serde_json::Value;
use tokio::sync::{watch as channel, Notify};
use tracing::{info, warn};

use super::health::{self, Health, SourceHealth, WatchState};
use super::probe::{self, Returns};
use crate::config::{
    says_network_unavailable, ApiObjects, KubernetesConfig, Source, API_SOURCE_PREFIX,
    NETWORK_UNAVAILABLE,
};
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
    /// A field selector: only these objects are listed and watched.
    fields: &'static str,
}

const fn kind(
    group: &'static str,
    version: &'static str,
    kind: &'static str,
    plural: &'static str,
    scope: Scope,
) -> Kind {
    Kind { group, version, kind, plural, scope, fields: "" }
}

/// What is watched: the kinds the manifest parser reads, at the versions upstream serves.
const KINDS: [Kind; 16] = [
    kind("", "v1", "Node", "nodes", Scope::ThisNode),
    kind("", "v1", "Namespace", "namespaces", Scope::Cluster),
    // Only the type `passwordSecret` may name: uplink neither reads nor keeps the others.
    Kind {
        fields: "type=kubernetes.io/basic-auth",
        ..kind("", "v1", "Secret", "secrets", Scope::OwnNamespace)
    },
    kind("", "v1", "Service", "services", Scope::AllNamespaces),
    kind("discovery.k8s.io", "v1", "EndpointSlice", "endpointslices", Scope::AllNamespaces),
    kind("metallb.io", "v1beta1", "IPAddressPool", "ipaddresspools", Scope::OwnNamespace),
    kind("metallb.io", "v1beta1", "BGPAdvertisement", "bgpadvertisements", Scope::OwnNamespace),
    kind("metallb.io", "v1beta1", "L2Advertisement", "l2advertisements", Scope::OwnNamespace),
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
    kind("k8s.ovn.org", "v1", "EgressIP", "egressips", Scope::Cluster),
    kind(
        "nmstate.io",
        "v1",
        "NodeNetworkConfigurationPolicy",
        "nodenetworkconfigurationpolicies",
        Scope::Cluster,
    ),
];

/// The least time between two sets: a burst of events (a relist, a Deployment's endpoints)
/// is gathered into one set per this time. A change after a quiet spell is taken at once,
/// not held for it: the reloader takes only the latest set, so the changes that come while it
/// applies one are applied together anyway.
const GATHER: Duration = Duration::from_millis(20);

/// How long a change to a Service's status alone waits for a change that publishes at once.
/// The allocation reads a status only to keep that Service's address at its next run, which
/// any other change starts (and the set it gets holds every status as it is then): published
/// at once, each status uplink writes back would be a reload of its own, a burst of them
/// (every Service of a new cluster) thousands.
const STATUS_ALONE: Duration = Duration::from_secs(1);

/// The Service objects the watch holds, as what writes about a Service reads them: its uid (an
/// Event's `regarding`) and whether it is read from the API at all. Looked up in the watch's
/// own table: a map of its own, with a copy of every Service's key, uid and status, was a
/// tenth of a kilobyte per Service. The status writer compares with the status the config
/// read (`kubernetes/status.rs`).
#[derive(Clone)]
pub(super) struct Services(Arc<Shared>);

impl Services {
    /// The text of the Service `namespace/name` as the watch holds it (see [`reduce`]).
    fn text(&self, key: &str) -> Option<Arc<str>> {
        let index = KINDS.iter().position(|kind| kind.kind == "Service")?;
        let path = PathBuf::from(format!("{API_SOURCE_PREFIX}Service/{key}"));
        let kinds = self.0.kinds.lock().unwrap_or_else(PoisonError::into_inner);
        kinds.get(index)?.get(&path).cloned()
    }

    /// Whether the API has the Service `namespace/name` (as last listed or watched).
    pub fn contains(&self, key: &str) -> bool {
        self.text(key).is_some()
    }

    /// The uid of the Service `namespace/name`, read from its text (an Event is sent on a
    /// Service's change of state only, not at every change).
    pub fn uid(&self, key: &str) -> Option<String> {
        let text = self.text(key)?;
        let object: serde_json::Value = serde_norway::from_str(&text).ok()?;
        object.pointer("/metadata/uid")?.as_str().map(str::to_string)
    }
}

#[derive(Default)]
struct KindState {
    /// Listed at least once (or not served by this API server).
    ready: bool,
    /// Sorted by path. Shared with the sets published, which take it as it is: a change made
    /// while a set holds it changes a copy ([`Arc::make_mut`]), as publishing copied every
    /// object's place anyway; between events it is the one table of the kind's objects.
    objects: Arc<Vec<Source>>,
    /// Counts the changes to `objects`: an event that changes nothing the config reads (most
    /// of a status, the apiserver's bookkeeping) leaves it, and publishes nothing.
    version: u64,
}

impl KindState {
    /// Where `path` is in `objects`, or would be.
    fn find(&self, path: &Path) -> Result<usize, usize> {
        self.objects.binary_search_by(|(held, _)| (**held).cmp(path))
    }

    fn get(&self, path: &Path) -> Option<&Arc<str>> {
        let at = self.find(path).ok()?;
        self.objects.get(at).map(|(_, text)| text)
    }

    fn insert(&mut self, path: Arc<Path>, text: Arc<str>) {
        match self.find(&path) {
            Ok(at) => {
                if self.objects.get(at).is_some_and(|(_, held)| *held == text) {
                    return;
                }
                if let Some(entry) = Arc::make_mut(&mut self.objects).get_mut(at) {
                    entry.1 = text;
                }
            }
            Err(at) => {
                let objects = Arc::make_mut(&mut self.objects);
                // Room for one more, not twice the room: a copy has none to spare, and a
                // doubled table would be kept at up to twice its size. The insert moves the
                // rest of the table anyway.
                objects.reserve_exact(1);
                objects.insert(at, (path, text));
            }
        }
        self.version = self.version.wrapping_add(1);
    }

    fn remove(&mut self, path: &Path) {
        if let Ok(at) = self.find(path) {
            Arc::make_mut(&mut self.objects).remove(at);
            self.version = self.version.wrapping_add(1);
        }
    }

    /// The objects of a new list, in any order. Those whose text is unchanged keep their copy,
    /// so the manifest cache knows them without reading them.
    fn replace(&mut self, mut objects: Vec<Source>) {
        objects.sort_by(|a, b| a.0.cmp(&b.0));
        // A name listed twice (no API server does): its last text, as a map kept it. The
        // sort is stable, so reversed the last comes first, and `dedup_by` keeps the first.
        objects.reverse();
        objects.dedup_by(|this, kept| this.0 == kept.0);
        objects.reverse();
        // Compared once: the same objects when every one is held with the same text.
        let mut same = objects.len() == self.objects.len();
        for (path, text) in objects.iter_mut() {
            match self.get(path) {
                Some(held) if held == text => *text = held.clone(),
                _ => same = false,
            }
        }
        if !same {
            objects.shrink_to_fit();
            self.objects = Arc::new(objects);
            self.version = self.version.wrapping_add(1);
        }
    }
}

struct Shared {
    kinds: Mutex<Vec<KindState>>,
    changed: Notify,
    /// A Service's status changed, and nothing else of it ([`STATUS_ALONE`]).
    status_alone: Notify,
    /// A kind's watch failed: the probe asks whether the API server is there ([`probe`]).
    failed: Notify,
    /// The API server is back (the probe found it ready, or a kind listed again after
    /// failing): the failing kinds list at once instead of waiting out their back-off (up to
    /// [`RETRY_MAX`]).
    returned: Returns,
    health: Health,
}

/// Starts a watcher per kind and the task that publishes their objects together.
pub(super) fn spawn(
    client: Client,
    settings: &KubernetesConfig,
    node: &str,
    publish: channel::Sender<Arc<ApiObjects>>,
    health: Health,
) -> Services {
    let shared = Arc::new(Shared {
        kinds: Mutex::new(KINDS.iter().map(|_| KindState::default()).collect()),
        changed: Notify::new(),
        status_alone: Notify::new(),
        failed: Notify::new(),
        returned: Returns::default(),
        health,
    });
    for (index, kind) in KINDS.iter().enumerate() {
        shared.health(|h| h.register(kind.kind, &kind.api_version()));
        let api = api_for(&client, kind, &settings.namespace);
        // Each watch request lasts `watch_timeout`, then kube renews it from where it was
        // (a renewal the API server answers with 410 Gone ends it: listed again below).
        let timeout = u32::try_from(settings.watch_timeout.as_secs()).unwrap_or(u32::MAX);
        let base = watcher::Config::default().timeout(timeout);
        let config = match kind.scope {
            Scope::ThisNode => base.fields(&format!("metadata.name={node}")),
            _ if !kind.fields.is_empty() => base.fields(kind.fields),
            _ => base,
        };
        tokio::spawn(watch_kind(api, config, kind, index, shared.clone()));
    }
    let services = Services(shared.clone());
    let probing = shared.clone();
    tokio::spawn(async move {
        probe::run(client, &probing.failed, &probing.returned, &probing.health).await;
    });
    tokio::spawn(publish_sets(shared, publish));
    services
}

impl Kind {
    fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.to_string()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }
}

fn api_for(client: &Client, kind: &Kind, namespace: &str) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk(kind.group, kind.version, kind.kind);
    let resource = ApiResource::from_gvk_with_plural(&gvk, kind.plural);
    match kind.scope {
        Scope::OwnNamespace => Api::namespaced_with(client.clone(), namespace, &resource),
        _ => Api::all_with(client.clone(), &resource),
    }
}

/// The first wait before listing a failing kind again; it doubles up to [`RETRY_MAX`].
const RETRY_FIRST: Duration = Duration::from_millis(500);
/// The longest wait between two lists of a failing kind (with up to a quarter of jitter), as
/// client-go's reflector has it. An API server that was away is found by the [`probe`] within
/// a second of its return, which wakes every failing kind: this paces only a kind that fails
/// while the server answers.
const RETRY_MAX: Duration = Duration::from_secs(30);
/// How often a kind the API server does not serve, or RBAC forbids, is tried again (a CRD
/// installed or a role granted later is then picked up).
const RETRY_ABSENT: Duration = Duration::from_secs(60);

/// How one watch of a kind ended.
enum Ended {
    /// The kind is not served (404) or not readable (403).
    Absent(WatchState, String),
    /// Any other failure: the connection, the API server, a `410 Gone`.
    Failed(String),
}

/// Lists and watches one kind until the process ends. After any failure it lists the kind
/// again rather than resuming the watch: the new list replaces what was held, so what changed
/// while uplink could not see it (a Service deleted) is found, and a list that finds what was
/// there changes nothing. Until that list completes, what was read stays in force.
async fn watch_kind(
    api: Api<DynamicObject>,
    config: watcher::Config,
    kind: &'static Kind,
    index: usize,
    shared: Arc<Shared>,
) {
    let mut failures = LogThrottle::new(LOG_PERIOD);
    let mut retry = RETRY_FIRST;
    loop {
        let returns_before = shared.returned.count();
        let (ended, listed) = watch_once(&api, &config, kind, index, &shared).await;
        if listed {
            retry = RETRY_FIRST;
        }
        match ended {
            Ended::Absent(state, why) => {
                let changed = shared.health(|h| {
                    let Some(k) = h.kind_mut(kind.kind) else { return false };
                    let changed = k.state != state;
                    k.state = state;
                    k.error = Some(why.clone());
                    changed
                });
                if changed {
                    warn!(
                        kind = kind.kind,
                        "{state}: not watched; tried again every minute ({why})"
                    );
                }
                // Never listed: counts as listed and empty, so one missing kind does not
                // hold back every other. Listed before: what was read stays.
                shared.update(index, |state| state.ready = true);
                tokio::time::sleep(RETRY_ABSENT).await;
            }
            Ended::Failed(error) => {
                // Listening for the server's return from before the probe is asked, so that
                // no answer of the probe falls between the two.
                let returned = shared.returned.next();
                tokio::pin!(returned);
                returned.as_mut().enable();
                // The server's return was announced while this list was under way, before
                // the kind waited for it: it waits only the first back-off before listing
                // again. Otherwise a list begun before the server was ready, and failing
                // after it said so, waits out a back-off grown in the outage.
                if shared.returned.count() != returns_before {
                    retry = RETRY_FIRST;
                }
                shared.failed.notify_one();
                if let Some(held_back) = failures.event(Instant::now()) {
                    warn!(
                        kind = kind.kind,
                        "watch failed; what was read stays in force, listing again: {error}{}",
                        held_back_note(held_back)
                    );
                }
                shared.health(|h| {
                    if let Some(k) = h.kind_mut(kind.kind) {
                        k.state = WatchState::Failing;
                        k.failing_since.get_or_insert_with(health::unix_now);
                        k.last_failure = Some(error.clone());
                        k.error = Some(error);
                    }
                });
                let wait = retry.mul_f64(rand::random_range(0.75..1.0));
                retry = retry.saturating_mul(2).min(RETRY_MAX);
                tokio::select! {
                    () = tokio::time::sleep(wait) => {}
                    // Back: its lists may fail a little longer (caches still filling), and
                    // are tried again soon rather than after a back-off grown in the outage.
                    () = returned => retry = RETRY_FIRST,
                }
            }
        }
    }
}

/// One list and watch of `kind`, until it fails; whether the list completed.
async fn watch_once(
    api: &Api<DynamicObject>,
    config: &watcher::Config,
    kind: &'static Kind,
    index: usize,
    shared: &Shared,
) -> (Ended, bool) {
    let mut stream = watcher::watcher(api.clone(), config.clone()).boxed();
    let mut listing: Option<Vec<Source>> = None;
    let mut listed = false;
    while let Some(event) = stream.next().await {
        match event {
            Ok(Event::Init) => {
                listing = Some(Vec::new());
                shared.health(|h| {
                    if let Some(k) = h.kind_mut(kind.kind) {
                        if k.state != WatchState::Failing {
                            k.state = WatchState::Listing;
                        }
                    }
                });
            }
            Ok(Event::InitApply(object)) => {
                if let Some(listing) = listing.as_mut() {
                    listing.push(reduce(kind, object));
                }
            }
            Ok(Event::InitDone) => {
                listed = true;
                let objects = listing.take().unwrap_or_default();
                let count = objects.len();
                shared.update(index, |state| {
                    state.replace(objects);
                    state.ready = true;
                });
                let was_failing = shared.health(|h| {
                    let Some(k) = h.kind_mut(kind.kind) else { return false };
                    let was_failing = k.state == WatchState::Failing;
                    k.state = WatchState::Watching;
                    k.objects = count;
                    k.last_list = Some(health::unix_now());
                    k.lists += 1;
                    k.failing_since = None;
                    k.error = None;
                    was_failing
                });
                if was_failing {
                    info!(kind = kind.kind, "listed again after the failure; watching");
                    shared.returned.announce();
                }
            }
            Ok(Event::Apply(object)) => {
                let (path, text) = reduce(kind, object);
                let count = shared.apply(index, path, text, kind.kind == "Service");
                shared.count(kind, count);
            }
            Ok(Event::Delete(object)) => {
                let (path, _) = reduce(kind, object);
                let count = shared.update(index, |state| {
                    state.remove(&path);
                    state.objects.len()
                });
                shared.count(kind, count);
            }
            Err(error) => {
                let status = match &error {
                    watcher::Error::InitialListFailed(kube::Error::Api(status))
                    | watcher::Error::WatchStartFailed(kube::Error::Api(status)) => {
                        Some(status.code)
                    }
                    _ => None,
                };
                let ended = match status {
                    Some(404) => Ended::Absent(
                        WatchState::NotServed,
                        "the API server does not serve it: install its CRD (deploy/kubernetes/crds)"
                            .into(),
                    ),
                    Some(403) => Ended::Absent(
                        WatchState::Forbidden,
                        format!(
                            "RBAC does not let uplink list {}: deploy/kubernetes/rbac.yaml grants it",
                            kind.plural
                        ),
                    ),
                    _ => Ended::Failed(error.to_string()),
                };
                return (ended, listed);
            }
        }
    }
    (Ended::Failed("the watch ended".into()), listed)
}

impl Shared {
    fn update<T: Default>(&self, index: usize, change: impl FnOnce(&mut KindState) -> T) -> T {
        let mut kinds = self.kinds.lock().unwrap_or_else(PoisonError::into_inner);
        let out = kinds.get_mut(index).map(change).unwrap_or_default();
        drop(kinds);
        self.changed.notify_one();
        out
    }

    /// An object added or changed; its kind's object count after. A change to a Service's
    /// status alone wakes the publisher late ([`STATUS_ALONE`]); every other one at once (an
    /// EgressIP's status says where its addresses are announced).
    fn apply(&self, index: usize, path: Arc<Path>, text: Arc<str>, service: bool) -> usize {
        let mut kinds = self.kinds.lock().unwrap_or_else(PoisonError::into_inner);
        let Some(state) = kinds.get_mut(index) else { return 0 };
        let status_alone = service
            && state
                .get(&path)
                .is_some_and(|old| *old != text && without_status(old) == without_status(&text));
        state.insert(path, text);
        let count = state.objects.len();
        drop(kinds);
        if status_alone {
            self.status_alone.notify_one();
        } else {
            self.changed.notify_one();
        }
        count
    }

    fn health<T>(&self, change: impl FnOnce(&mut SourceHealth) -> T) -> T {
        health::update(&self.health, change)
    }

    /// A kind's object count after a change.
    fn count(&self, kind: &Kind, count: usize) {
        self.health(|h| {
            if let Some(k) = h.kind_mut(kind.kind) {
                k.objects = count;
            }
        });
    }
}

/// Publishes the objects of every kind as one set, once every kind has been listed, whenever
/// it differs from the last one published.
async fn publish_sets(shared: Arc<Shared>, publish: channel::Sender<Arc<ApiObjects>>) {
    let mut waiting_logged = false;
    // The kinds' versions at the last set published: none yet.
    let mut published: Option<Vec<u64>> = None;
    let order = kinds_in_path_order();
    // When the last set was taken.
    let mut taken: Option<tokio::time::Instant> = None;
    loop {
        tokio::select! {
            () = shared.changed.notified() => {}
            () = shared.status_alone.notified() => {
                tokio::select! {
                    () = shared.changed.notified() => {}
                    () = tokio::time::sleep(STATUS_ALONE) => {}
                }
            }
        }
        if let Some(taken) = taken {
            tokio::time::sleep_until(taken + GATHER).await;
        }
        taken = Some(tokio::time::Instant::now());
        let objects = {
            let kinds = shared.kinds.lock().unwrap_or_else(PoisonError::into_inner);
            if !kinds.iter().all(|k| k.ready) {
                if !waiting_logged {
                    info!("waiting for the first list of every kind");
                    waiting_logged = true;
                }
                continue;
            }
            let versions: Vec<u64> = kinds.iter().map(|k| k.version).collect();
            if published.as_ref() == Some(&versions) {
                None
            } else {
                published = Some(versions);
                // Each kind's objects are in path order, and their paths begin with the
                // kind's name: taken kind by kind in name order, the set is in path order
                // without sorting tens of thousands of paths at each event. Each kind's list
                // is shared, not copied.
                let lists = order
                    .iter()
                    .filter_map(|&index| kinds.get(index))
                    .map(|k| k.objects.clone())
                    .collect();
                Some(ApiObjects::from_lists(lists))
            }
        };
        // A kind's version moves only when its objects change (`KindState`): a new set
        // differs from the last one without comparing them.
        if let Some(objects) = objects {
            let count = objects.len();
            publish.send_replace(Arc::new(objects));
            shared.health(|h| h.objects = count);
        }
        shared.health(|h| h.last_sync = Some(health::unix_now()));
    }
}

/// The indexes of [`KINDS`] in the order of their objects' paths, which begin with
/// `kubernetes:KIND/`: `Node` before `NodeNetworkConfigurationPolicy`.
fn kinds_in_path_order() -> Vec<usize> {
    let mut order: Vec<(PathBuf, usize)> = KINDS
        .iter()
        .enumerate()
        .map(|(index, kind)| (PathBuf::from(format!("{API_SOURCE_PREFIX}{}", kind.kind)), index))
        .collect();
    order.sort();
    order.into_iter().map(|(_, index)| index).collect()
}

/// An object as a config source: its name, and its text with only what the config reads —
/// `status` and the server's metadata go, so the apiserver's bookkeeping makes no new set
/// (a Service keeps its uid, which never changes, for its Events). An
/// EgressIP keeps its status (which node holds each address), and a Service the addresses of
/// its `status.loadBalancer.ingress` (which the allocation keeps).
fn reduce(kind: &Kind, object: DynamicObject) -> Source {
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
    // A Service's uid, which its Events name (the config does not read it).
    if let Some(uid) = object.metadata.uid.filter(|_| kind.kind == "Service") {
        metadata.insert("uid".into(), Value::from(uid));
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
    top.insert("apiVersion".into(), Value::from(kind.api_version()));
    top.insert("kind".into(), Value::from(kind.kind));
    top.insert("metadata".into(), Value::Object(metadata));
    let mut status = None;
    if let Value::Object(data) = object.data {
        for (key, value) in data {
            match key.as_str() {
                "apiVersion" | "kind" | "metadata" => {}
                "status" if kind.kind == "EgressIP" => {
                    top.insert(key, value);
                }
                "status" if kind.kind == "Service" => status = service_addresses(&value),
                "status" if kind.kind == "Node" => {
                    if let Some(unavailable) = network_unavailable(&value) {
                        top.insert(key, unavailable);
                    }
                }
                "status" => {}
                _ => {
                    top.insert(key, value);
                }
            }
        }
    }
    let mut text = serde_norway::to_string(&Value::Object(top)).unwrap_or_default();
    // A Service's status goes last, under its own top-level key, so that
    // [`without_status`] finds where it begins.
    if let Some(status) = status {
        let mut last = serde_json::Map::new();
        last.insert("status".into(), status);
        text.push_str(&serde_norway::to_string(&Value::Object(last)).unwrap_or_default());
    }
    (Arc::from(Path::new(&path)), Arc::from(text))
}

/// A reduced object's text without its status (a Service's, which [`reduce`] puts last): a
/// top-level key is the only line that begins `status:` at its first column — nested keys
/// are indented, and a multi-line value is indented or quoted.
fn without_status(text: &str) -> &str {
    match text.find("\nstatus:\n") {
        Some(at) => text.get(..=at).unwrap_or(text),
        None => text,
    }
}

/// A Node's status as far as the config reads it: its `NetworkUnavailable` condition when it
/// is `True`, nothing else (the kubelet's heartbeats in the other conditions would make a
/// reload every few seconds that changes nothing).
fn network_unavailable(status: &Value) -> Option<Value> {
    let conditions = status.get("conditions").and_then(Value::as_array)?;
    let unavailable = conditions.iter().any(|condition| {
        says_network_unavailable(
            condition.get("type").and_then(Value::as_str),
            condition.get("status").and_then(Value::as_str),
        )
    });
    unavailable.then(
        || serde_json::json!({ "conditions": [{ "type": NETWORK_UNAVAILABLE, "status": "True" }] }),
    )
}

/// A Service's status as far as the config reads it: the addresses of
/// `status.loadBalancer.ingress`, which the allocation keeps (its conditions and ports, or a
/// `hostname` entry, would only make reloads that change nothing).
fn service_addresses(status: &Value) -> Option<Value> {
    let addresses: Vec<Value> =
        ingress_ips(status).iter().map(|ip| serde_json::json!({ "ip": ip.to_string() })).collect();
    (!addresses.is_empty()).then(|| serde_json::json!({ "loadBalancer": { "ingress": addresses } }))
}

/// The addresses of a Service's `status.loadBalancer.ingress` (an entry without one, a
/// `hostname`, or one that does not parse is passed over): what the config keeps, and what the
/// status writer compares with the allocation.
fn ingress_ips(status: &Value) -> Vec<IpAddr> {
    let ingress = status.pointer("/loadBalancer/ingress").and_then(Value::as_array);
    ingress
        .into_iter()
        .flatten()
        .filter_map(|entry| entry.get("ip").and_then(Value::as_str))
        .filter_map(|ip| ip.parse().ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;
    use std::path::PathBuf;

    use std::path::Path;
    use std::sync::Arc;
    use std::time::Duration;

    use tokio::sync::Notify;

    use super::{
        kinds_in_path_order, reduce, without_status, KindState, Returns, Services, Shared, KINDS,
    };
    use crate::config::API_SOURCE_PREFIX;

    /// A Service keeps its uid in its text, where its Events find it; another kind keeps none.
    #[test]
    fn a_services_uid_is_read_from_the_watchs_table() {
        let uid = "0f9a1c3e-5b7d-4e2f-8a6b-1c2d3e4f5a6b";
        let object = |kind: &str| {
            serde_json::from_value::<kube::api::DynamicObject>(serde_json::json!({
                "apiVersion": "v1",
                "kind": kind,
                "metadata": {"name": "web", "namespace": "shop", "uid": uid},
                "spec": {"type": "LoadBalancer"},
            }))
            .expect("a DynamicObject")
        };
        let kind_of = |name: &str| KINDS.iter().position(|k| k.kind == name).expect("watched");
        let (service, slice) = (kind_of("Service"), kind_of("EndpointSlice"));
        let (_, slice_text) = reduce(&KINDS[slice], object("EndpointSlice"));
        assert!(!slice_text.contains(uid), "{slice_text}");
        let shared = Arc::new(Shared {
            kinds: std::sync::Mutex::new(KINDS.iter().map(|_| KindState::default()).collect()),
            changed: Notify::new(),
            status_alone: Notify::new(),
            failed: Notify::new(),
            returned: Returns::default(),
            health: Default::default(),
        });
        let services = Services(shared.clone());
        assert!(!services.contains("shop/web"));
        let (path, text) = reduce(&KINDS[service], object("Service"));
        shared.apply(service, path, text, true);
        assert!(services.contains("shop/web"));
        assert_eq!(services.uid("shop/web").as_deref(), Some(uid));
        assert_eq!(services.uid("shop/db"), None);
    }

    /// A Service's status is kept as far as the allocation reads it (the addresses of
    /// `loadBalancer.ingress`), so that a change to the rest of it makes no reload.
    #[test]
    fn a_service_keeps_its_status_addresses_and_nothing_else_of_its_status() {
        let kind = KINDS.iter().find(|k| k.kind == "Service").expect("Service is watched");
        let object = |status: serde_json::Value| {
            serde_json::from_value::<kube::api::DynamicObject>(serde_json::json!({
                "apiVersion": "v1",
                "kind": "Service",
                "metadata": {"name": "web", "namespace": "shop", "resourceVersion": "7"},
                "spec": {"type": "LoadBalancer"},
                "status": status,
            }))
            .expect("a DynamicObject")
        };
        let (_, text) = reduce(
            kind,
            object(serde_json::json!({
                "loadBalancer": {"ingress": [{"ip": "192.0.2.9", "ipMode": "VIP"}, {"hostname": "lb.example.com"}]},
                "conditions": [{"type": "Ready", "status": "True"}],
            })),
        );
        assert!(text.contains("ip: 192.0.2.9"), "{text}");
        for left_out in ["ipMode", "hostname", "conditions", "resourceVersion"] {
            assert!(!text.contains(left_out), "{left_out} in {text}");
        }
        let (_, other_conditions) = reduce(
            kind,
            object(serde_json::json!({
                "loadBalancer": {"ingress": [{"ip": "192.0.2.9"}]},
                "conditions": [{"type": "Ready", "status": "False"}],
            })),
        );
        assert_eq!(other_conditions, text);
        let (_, without) = reduce(kind, object(serde_json::json!({"loadBalancer": {}})));
        assert!(!without.contains("status"), "{without}");
        // The status goes last: what is left without it is the object without a status.
        assert_eq!(without_status(&text), &*without);
        assert_eq!(without_status(&without), &*without);
    }

    /// A Node keeps of its status only a `NetworkUnavailable` condition that is `True`: the
    /// kubelet's heartbeats change nothing.
    #[test]
    fn a_node_keeps_only_its_network_unavailable_condition() {
        let kind = KINDS.iter().find(|k| k.kind == "Node").expect("Node is watched");
        let node = |conditions: serde_json::Value| {
            let object = serde_json::json!({
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {"name": "wk1", "labels": {"rack": "r1"}},
                "spec": {"podCIDR": "10.244.1.0/24"},
                "status": {"conditions": conditions, "nodeInfo": {"kubeletVersion": "v1.34.1"}},
            });
            let object = serde_json::from_value::<kube::api::DynamicObject>(object);
            reduce(kind, object.expect("a DynamicObject")).1
        };
        let heartbeat = |at: &str, network: &str| {
            serde_json::json!([
                {"type": "Ready", "status": "True", "lastHeartbeatTime": at},
                {"type": "NetworkUnavailable", "status": network, "lastHeartbeatTime": at},
            ])
        };
        let fine = node(heartbeat("2026-12-06T09:00:00Z", "False"));
        assert!(!fine.contains("status"), "{fine}");
        assert_eq!(node(heartbeat("2026-12-06T09:00:10Z", "False")), fine);
        let unavailable = node(heartbeat("2026-12-06T09:00:00Z", "True"));
        assert!(unavailable.contains("NetworkUnavailable"), "{unavailable}");
        for left_out in ["Ready", "lastHeartbeatTime", "kubeletVersion"] {
            assert!(!unavailable.contains(left_out), "{left_out} in {unavailable}");
        }
        assert_eq!(node(heartbeat("2026-12-06T09:00:10Z", "True")), unavailable);
    }

    /// A Service's status changed alone wakes the publisher late; any other change, or a
    /// status change of another kind, at once.
    #[tokio::test]
    async fn a_services_status_alone_is_published_late() {
        async fn woke(notify: &Notify) -> bool {
            tokio::time::timeout(Duration::from_millis(1), notify.notified()).await.is_ok()
        }
        let shared = Shared {
            kinds: std::sync::Mutex::new(vec![KindState::default()]),
            changed: Notify::new(),
            status_alone: Notify::new(),
            failed: Notify::new(),
            returned: Returns::default(),
            health: Default::default(),
        };
        let path: Arc<Path> = Arc::from(Path::new("kubernetes:Service/shop/web"));
        let spec = "apiVersion: v1\nkind: Service\nspec:\n  type: LoadBalancer\n";
        let with = |status: &str| -> Arc<str> { format!("{spec}status:\n  {status}\n").into() };
        shared.apply(0, path.clone(), spec.into(), true);
        assert!(woke(&shared.changed).await, "a new object");
        shared.apply(0, path.clone(), with("ip: 192.0.2.9"), true);
        assert!(!woke(&shared.changed).await, "its status alone");
        assert!(woke(&shared.status_alone).await, "its status alone");
        shared.apply(
            0,
            path.clone(),
            format!("{spec}  ports: []\nstatus:\n  ip: 192.0.2.9\n").into(),
            true,
        );
        assert!(woke(&shared.changed).await, "its spec");
        shared.apply(0, path.clone(), with("ip: 192.0.2.10"), false);
        assert!(woke(&shared.changed).await, "an EgressIP's status");
    }

    /// A kind's table stays sorted through every change, a set published keeps what it took
    /// while the table changes after it, an unchanged object keeps its copy through a new list,
    /// and only a change moves the version.
    #[test]
    fn a_kinds_table_is_sorted_and_shared_until_it_changes() {
        let source = |name: &str, text: &str| -> (Arc<Path>, Arc<str>) {
            (Arc::from(Path::new(&format!("{API_SOURCE_PREFIX}Service/{name}"))), text.into())
        };
        let names = |objects: &[(Arc<Path>, Arc<str>)]| -> Vec<String> {
            objects.iter().map(|(p, t)| format!("{}={t}", p.display())).collect()
        };
        let mut state = KindState::default();
        for (name, text) in [("shop/b", "1"), ("shop/a", "1"), ("shop-2/c", "1"), ("shop/d", "1")] {
            let (path, text) = source(name, text);
            state.insert(path, text);
        }
        // In the order of paths (by component: `shop/d` before `shop-2/c`).
        assert!(state.objects.is_sorted_by(|a, b| a.0 < b.0), "{:?}", names(&state.objects));
        assert_eq!(state.version, 4);

        // A set takes the table as it is; the changes after it are the table's alone.
        let published = crate::config::ApiObjects::from_lists(vec![state.objects.clone()]);
        let (path, text) = source("shop/a", "1");
        state.insert(path.clone(), text);
        assert_eq!(state.version, 4, "the same text is no change");
        assert!(Arc::ptr_eq(&state.objects, &published_list(&published)));
        state.insert(path.clone(), "2".into());
        state.remove(Path::new("kubernetes:Service/shop/b"));
        state.remove(Path::new("kubernetes:Service/shop/none"));
        assert_eq!(state.version, 6);
        let before: Vec<String> =
            published.iter().map(|(p, t)| format!("{}={t}", p.display())).collect();
        assert_eq!(before.len(), 4);
        assert!(before.contains(&format!("{API_SOURCE_PREFIX}Service/shop/a=1")));
        assert_eq!(
            names(&state.objects),
            [
                format!("{API_SOURCE_PREFIX}Service/shop/a=2"),
                format!("{API_SOURCE_PREFIX}Service/shop/d=1"),
                format!("{API_SOURCE_PREFIX}Service/shop-2/c=1"),
            ]
        );

        // A new list in any order: the same objects change nothing, and keep their copies.
        let held = state.get(&path).cloned().unwrap();
        let again = vec![source("shop-2/c", "1"), source("shop/d", "1"), source("shop/a", "2")];
        state.replace(again);
        assert_eq!(state.version, 6);
        assert!(Arc::ptr_eq(state.get(&path).unwrap(), &held));
        // One text changed and one object gone: a new table, the unchanged one's copy kept.
        state.replace(vec![source("shop/a", "2"), source("shop/d", "3")]);
        assert_eq!(state.version, 7);
        assert!(Arc::ptr_eq(state.get(&path).unwrap(), &held));
        assert_eq!(
            names(&state.objects),
            [
                format!("{API_SOURCE_PREFIX}Service/shop/a=2"),
                format!("{API_SOURCE_PREFIX}Service/shop/d=3"),
            ]
        );
    }

    fn published_list(set: &crate::config::ApiObjects) -> Arc<Vec<(Arc<Path>, Arc<str>)>> {
        set.lists().first().cloned().unwrap_or_default()
    }

    /// The set published is the kinds' objects taken in this order: it must be the order a
    /// sort of every path gives (the config merges the objects in it).
    #[test]
    fn the_kinds_taken_in_path_order_make_a_sorted_set() {
        let names = ["a", "shop/web", "shop-2/a", "z.z", "Z/0"];
        let per_kind: Vec<BTreeSet<PathBuf>> = KINDS
            .iter()
            .map(|kind| {
                names
                    .iter()
                    .map(|name| PathBuf::from(format!("{API_SOURCE_PREFIX}{}/{name}", kind.kind)))
                    .collect()
            })
            .collect();
        let taken: Vec<&PathBuf> = kinds_in_path_order()
            .into_iter()
            .filter_map(|index| per_kind.get(index))
            .flatten()
            .collect();
        let mut sorted = taken.clone();
        sorted.sort();
        assert_eq!(taken.len(), KINDS.len() * names.len());
        assert_eq!(taken, sorted);
    }
}
