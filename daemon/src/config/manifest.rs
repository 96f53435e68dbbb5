//! Kubernetes manifests in `conf.d/*.yaml`: the objects operators already have — frr-k8s
//! `FRRConfiguration`, MetalLB `IPAddressPool`, `BGPAdvertisement`, `BGPPeer`, `BFDProfile`,
//! `Community`, OVN-Kubernetes `RouteAdvertisements`, `ClusterUserDefinedNetwork` and
//! `EgressIP` (`manifest/egress_ip.rs`), nmstate `NodeNetworkConfigurationPolicy`
//! (`manifest/nncp.rs`), Kubernetes `Service` with its `EndpointSlice`s
//! (`manifest/service.rs`), the `Namespace`s whose labels its pool selection reads
//! (`manifest/namespace.rs`) and the `Secret`s `passwordSecret` names (`manifest/secret.rs`) —
//! mapped onto the same model as the TOML sections.
//!
//! Each document is translated into the equivalent TOML table (keys from camelCase to the
//! snake_case the TOML sections use) and then parsed and validated by exactly the code that
//! reads TOML files, so both kinds of file mean the same thing and merge under the same rules.
//! Errors are then rewritten to name the YAML file, the line where the document starts, the
//! document index and the field path in the manifest's own spelling
//! (`documents[1].spec.bgp.routers[0].neighbors[0].holdTime`). A field uplink does not implement
//! is rejected by name, never silently ignored; a document whose `nodeSelector` does not match
//! this node (its `[node]` labels) is skipped, as the controller would not apply it here.
//!
//! Mapping notes:
//! - `FRRConfiguration`: `spec.bgp` is `[bgp]`. A neighbor carries its own address's family;
//!   `dualStackAddressFamily: true` gives it both (`families = ["ipv4-unicast",
//!   "ipv6-unicast"]`), as frr-k8s and MetalLB do; the deprecated `disableMP` is ignored, as
//!   upstream ignores it. The object's labels are kept for
//!   `RouteAdvertisements.frrConfigurationSelector`.
//! - BFD intervals are integers of milliseconds in both APIs; they become `"<n>ms"`.
//! - `BGPPeer` becomes a router (`myASN`, `vrf`, `routerID`) with one neighbor, named by the
//!   object's name for `BGPAdvertisement.peers`.
//! - `ClusterUserDefinedNetwork` becomes a `[[networks]]` entry in the VRF of its name;
//!   `namespaceSelector`, `role` and `ipam.lifecycle` decide which pods use the network, not
//!   what is announced, and are accepted. The node's own `host_subnet` (OVN-Kubernetes assigns
//!   it) and its EgressIPs come from a TOML `[[networks]]` entry of the same name; those of
//!   the default network also from `EgressIP` objects.

mod cache;
mod context;
mod egress_ip;
mod namespace;
mod nncp;
mod secret;
mod service;

use std::path::Path;
use std::sync::Arc;

use serde::Deserialize;
use serde_norway::{Mapping, Value};

use super::error::ConfigError;
use super::model::SkippedDocument;
use super::raw::RawFile;
use super::source::SourceText;
use super::validate::{validate_file, Fragment, TimerDefaults};
use crate::config::announce::{Labels, PeerName, RouterLabels};
use crate::config::selector::{LabelSelector, Operator, Requirement};
pub use cache::ManifestCache;
pub(crate) use context::{Context, Inputs};
pub(crate) use namespace::NamespaceIndex;
pub(crate) use secret::SecretIndex;
pub(crate) use service::EndpointIndex;

/// The kinds understood, with their API groups ("" is the core group, `apiVersion: v1`).
const KINDS: [(&str, &str); 16] = [
    ("FRRConfiguration", "frrk8s.metallb.io"),
    ("IPAddressPool", "metallb.io"),
    ("BGPAdvertisement", "metallb.io"),
    ("L2Advertisement", "metallb.io"),
    ("BGPPeer", "metallb.io"),
    ("BFDProfile", "metallb.io"),
    ("Community", "metallb.io"),
    ("RouteAdvertisements", "k8s.ovn.org"),
    ("ClusterUserDefinedNetwork", "k8s.ovn.org"),
    ("EgressIP", "k8s.ovn.org"),
    ("NodeNetworkConfigurationPolicy", "nmstate.io"),
    ("Service", ""),
    ("EndpointSlice", "discovery.k8s.io"),
    ("Node", ""),
    ("Secret", ""),
    ("Namespace", ""),
];

/// The API groups of the projects uplink stands in for: a kind of theirs that uplink does not
/// implement is an error (the config asks for something that would not happen). A kind of any
/// other group (an application's `Deployment`, a `ConfigMap`) is skipped with a note, as the
/// speaker and frr-k8s ignore what they do not watch.
const ACTED_ON_GROUPS: [&str; 4] = ["metallb.io", "frrk8s.metallb.io", "k8s.ovn.org", "nmstate.io"];

/// `ObjectMeta` fields the apiserver sets (as `kubectl get -o yaml` shows them): accepted and
/// ignored, so an object read back from a cluster means what it meant when applied.
const SERVER_METADATA: [&str; 11] = [
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "managedFields",
    "finalizers",
    "ownerReferences",
    "generateName",
    "selfLink",
];

/// Keys whose snake_case is not the mechanical one.
const RENAMES: [(&str, &str); 7] = [
    ("ebgpMultiHop", "ebgp_multihop"),
    // MetalLB BGPPeer and frr-k8s neighbors: RFC 4724 graceful restart, both roles.
    ("enableGracefulRestart", "graceful_restart"),
    ("dynamicASN", "dynamic_asn"),
    ("avoidBuggyIPs", "avoid_buggy_ips"),
    ("targetVRF", "target_vrf"),
    ("routerID", "id"),
    ("minimumTtl", "minimum_ttl"),
];

/// Maps whose keys are label names, copied as written.
/// Also `node_selector`, nmstate's `desired_state` (kebab-case keys of its own) and an NNCP's
/// `capture` (names its templates use).
const VERBATIM: [&str; 6] =
    ["matchLabels", "labels", "namespaceLabels", "node_selector", "desired_state", "capture"];

/// One document of a manifest file, parsed, with where it starts.
pub(crate) struct ManifestDocument {
    /// The source's own (shared) copy: what validation keeps of where a value was written
    /// shares it, not a copy per value.
    pub path: Arc<Path>,
    /// Its place in the file, for `documents[N]` in messages.
    pub index: usize,
    pub line: usize,
    pub value: Value,
}

/// The documents of one manifest file; YAML syntax errors go to `errors`.
pub(crate) fn parse(
    path: &Arc<Path>,
    text: &str,
    errors: &mut Vec<ConfigError>,
) -> Vec<ManifestDocument> {
    if let Some((line, column, what)) = foreign_line_break(text) {
        errors.push(ConfigError {
            file: path.to_path_buf(),
            line,
            column,
            field: String::new(),
            message: format!(
                "{what}: YAML takes it for a line break, so it would count lines differently \
                 from your editor and from these messages; save the file with LF or CRLF line \
                 endings"
            ),
        });
        return Vec::new();
    }
    let starts = document_start_lines(text);
    let mut out = Vec::new();
    for (index, document) in serde_norway::Deserializer::from_str(text).enumerate() {
        let line = starts.get(index).copied().unwrap_or(1);
        let value = match Value::deserialize(document) {
            Ok(value) => value,
            Err(error) => {
                let (line, column) = error.location().map_or((line, 1), |l| (l.line(), l.column()));
                errors.push(ConfigError {
                    file: path.to_path_buf(),
                    line,
                    column,
                    field: format!("documents[{index}]"),
                    message: format!("not valid YAML: {error}"),
                });
                // The YAML parser cannot continue past a syntax error.
                break;
            }
        };
        if value.is_null() {
            continue; // An empty document, e.g. after a trailing `---`.
        }
        out.push(ManifestDocument { path: path.clone(), index, line, value });
    }
    out
}

/// What the config's indexes read of one document, found once when it is parsed: an
/// EndpointSlice's endpoints, a Namespace's labels, a primary network's namespaces, a
/// Secret's key, a Node's labels. A malformed document has none; its errors come from its
/// translation.
///
/// Kept per document with facts, an EndpointSlice's for each of a cluster's Services: the rare
/// kinds' larger parts are boxed so that the enum is the size of a slice's (56 bytes, where a
/// Secret's entry inline made every slice's 96).
#[derive(Debug)]
pub(crate) enum Facts {
    None,
    Slice(service::Slice),
    Namespace { name: String, labels: Labels },
    PrimaryNetwork { name: String, selector: Box<LabelSelector> },
    Secret { name: String, entry: Box<secret::SecretEntry> },
    Node { name: String, labels: Labels, network_unavailable: bool },
}

impl Facts {
    fn of(value: &Value) -> Facts {
        let Value::Mapping(top) = value else { return Facts::None };
        let read = match top.get("kind").and_then(Value::as_str) {
            Some("EndpointSlice") => service::read_slice(top).ok().map(Facts::Slice),
            Some("Secret") => secret::read_secret(top)
                .ok()
                .map(|(name, entry)| Facts::Secret { name, entry: Box::new(entry) }),
            Some("Node") => {
                let metadata = top.get("metadata");
                let name = metadata.and_then(|m| m.get("name")).and_then(Value::as_str);
                let labels = metadata.and_then(|m| m.get("labels")).and_then(string_map);
                name.map(|name| Facts::Node {
                    name: name.to_string(),
                    labels: labels.unwrap_or_default(),
                    network_unavailable: network_unavailable(top),
                })
            }
            Some(kind @ ("Namespace" | "ClusterUserDefinedNetwork")) => {
                namespace::facts_of(kind, value)
            }
            _ => None,
        };
        read.unwrap_or(Facts::None)
    }
}

/// The indexes a translation reads, made from every document's facts.
pub(crate) struct Indexes {
    pub endpoints: EndpointIndex,
    pub secrets: SecretIndex,
    pub namespaces: NamespaceIndex,
    /// Each `Node` object's name, labels, and whether its network is unavailable.
    nodes: Vec<(String, Labels, bool)>,
}

impl Indexes {
    pub fn of(facts: &[&Facts]) -> Self {
        Indexes {
            endpoints: EndpointIndex::of(facts.iter().filter_map(|f| match f {
                Facts::Slice(slice) => Some(slice),
                _ => None,
            })),
            secrets: SecretIndex::of(facts.iter().filter_map(|f| match f {
                Facts::Secret { name, entry } => Some((name, &**entry)),
                _ => None,
            })),
            namespaces: NamespaceIndex::of(facts.iter().copied()),
            nodes: facts
                .iter()
                .filter_map(|f| match f {
                    Facts::Node { name, labels, network_unavailable } => {
                        Some((name.clone(), labels.clone(), *network_unavailable))
                    }
                    _ => None,
                })
                .collect(),
        }
    }

    /// The labels of the `Node` object named `node`.
    pub fn node_labels(&self, node: &str) -> Labels {
        self.nodes
            .iter()
            .filter(|(name, ..)| name == node)
            .flat_map(|(_, labels, _)| labels.clone())
            .collect()
    }

    /// Whether the `Node` object named `node` has the `NetworkUnavailable` condition.
    pub fn node_network_unavailable(&self, node: &str) -> bool {
        self.nodes.iter().any(|(name, _, unavailable)| name == node && *unavailable)
    }
}

/// Whether a `Node` object's `status.conditions` hold `NetworkUnavailable` with status
/// `True`: its network plugin has not set up the node's routes (MetalLB's speakers announce
/// nothing from such a node).
fn network_unavailable(node: &serde_norway::Mapping) -> bool {
    let conditions = node.get("status").and_then(|s| s.get("conditions"));
    let conditions = conditions.and_then(Value::as_sequence).map(Vec::as_slice).unwrap_or_default();
    conditions.iter().any(|condition| {
        says_network_unavailable(
            condition.get("type").and_then(Value::as_str),
            condition.get("status").and_then(Value::as_str),
        )
    })
}

/// Whether a Node condition of this `type` and `status` says the network plugin has not set
/// up the node's routes. One rule for a manifest's YAML and the API's JSON (`kubernetes/watch.rs`
/// keeps only such a condition of a Node's status).
pub fn says_network_unavailable(condition: Option<&str>, status: Option<&str>) -> bool {
    condition == Some(NETWORK_UNAVAILABLE) && status == Some("True")
}

/// The Node condition a network plugin sets `True` until the node's routes are set up.
pub const NETWORK_UNAVAILABLE: &str = "NetworkUnavailable";

/// The fragment of one document, if it applies here, and its errors. What it read of the
/// rest of the config is on `context`'s record.
fn translate(
    document: ManifestDocument,
    context: &Context<'_>,
) -> (Option<Fragment>, Vec<ConfigError>) {
    let ManifestDocument { path, index, line, value } = document;
    let mut doc = Document {
        path: &path,
        index,
        line,
        kind: String::new(),
        name: String::new(),
        errors: Vec::new(),
        read_a_file: false,
    };
    let fragment = doc.translate(value, context);
    if doc.read_a_file {
        context.read_a_file();
    }
    (fragment, doc.errors)
}

/// The first line break YAML knows that is not `\n` or `\r\n` (a lone `\r`, and libyaml's
/// NEL, LS and PS), as (line, column, what) counting lines at `\n` only. Found by the
/// manifests fuzz target: with one of these, the YAML parser's error lines pointed past the end
/// of the file as an editor shows it.
fn foreign_line_break(text: &str) -> Option<(usize, usize, &'static str)> {
    let mut chars = text.chars().peekable();
    let (mut line, mut column) = (1usize, 1usize);
    while let Some(c) = chars.next() {
        let what = match c {
            '\n' => {
                (line, column) = (line.saturating_add(1), 1);
                continue;
            }
            '\r' if chars.peek() == Some(&'\n') => None,
            '\r' => Some("a carriage return without a newline"),
            '\u{85}' => Some("a NEL character (U+0085)"),
            '\u{2028}' => Some("a line separator (U+2028)"),
            '\u{2029}' => Some("a paragraph separator (U+2029)"),
            _ => None,
        };
        if let Some(what) = what {
            return Some((line, column, what));
        }
        column = column.saturating_add(1);
    }
    None
}

/// The 1-based line each document starts on (its first content line), in the order the YAML
/// parser yields documents. An empty document between two `---` starts after the first one.
fn document_start_lines(text: &str) -> Vec<usize> {
    let mut starts = Vec::new();
    // (start line, has content, opened by a separator)
    let mut current: (usize, bool, bool) = (1, false, false);
    for (number, line) in text.lines().enumerate() {
        let number = number.saturating_add(1);
        if line.starts_with("---") {
            if current.1 || current.2 {
                starts.push(current.0);
            }
            current = (number.saturating_add(1), false, true);
            continue;
        }
        let trimmed = line.trim();
        if !current.1 && !trimmed.is_empty() && !trimmed.starts_with('#') {
            current = (number, true, current.2);
        }
    }
    if current.1 {
        starts.push(current.0);
    }
    starts
}

struct Document<'a> {
    path: &'a Arc<Path>,
    index: usize,
    line: usize,
    kind: String,
    name: String,
    errors: Vec<ConfigError>,
    /// Its validation read a key file (`password_file`): a later load must read it again.
    read_a_file: bool,
}

impl Document<'_> {
    fn fail(&mut self, field: &str, message: impl Into<String>) {
        let what = if self.name.is_empty() {
            self.kind.clone()
        } else {
            format!("{} \"{}\"", self.kind, self.name)
        };
        let field = if field.is_empty() {
            format!("documents[{}]", self.index)
        } else {
            format!("documents[{}].{field}", self.index)
        };
        let message = message.into();
        let message = if what.is_empty() { message } else { format!("{what}: {message}") };
        self.errors.push(ConfigError {
            file: self.path.to_path_buf(),
            line: self.line,
            column: 1,
            field,
            message,
        });
    }

    fn translate(&mut self, value: Value, context: &Context<'_>) -> Option<Fragment> {
        let Value::Mapping(mut top) = value else {
            self.fail(
                "",
                "a manifest document must be a mapping with apiVersion, kind, metadata and spec",
            );
            return None;
        };
        let kind = take_str(&mut top, "kind");
        let api_version = take_str(&mut top, "apiVersion");
        let metadata = top.remove("metadata");
        let spec = top.remove("spec").unwrap_or(Value::Mapping(Mapping::new()));
        let Some(kind) = kind else {
            self.fail("kind", "missing; every document needs apiVersion and kind");
            return None;
        };
        self.kind = kind.clone();
        let Some((_, group)) = KINDS.iter().find(|(k, _)| *k == kind) else {
            let version = api_version.unwrap_or_default();
            let group = version.split_once('/').map_or("", |(group, _)| group);
            if version.is_empty() || ACTED_ON_GROUPS.contains(&group) {
                let known: Vec<&str> = KINDS.iter().map(|(k, _)| *k).collect();
                self.fail(
                    "kind",
                    format!(
                        "kind \"{kind}\" is not supported here; supported: {}",
                        known.join(", ")
                    ),
                );
                return None;
            }
            return Some(self.skipped(kind, version, metadata.as_ref()));
        };
        let group_matches = match api_version.as_deref() {
            Some("v1") => group.is_empty(),
            Some(version) => version.split_once('/').is_some_and(|(g, _)| g == *group),
            None => false,
        };
        if !group_matches {
            let expected =
                if group.is_empty() { "v1".to_string() } else { format!("{group}/<version>") };
            self.fail(
                "apiVersion",
                format!(
                    "expected {expected} for {kind}, found {:?}",
                    api_version.unwrap_or_default()
                ),
            );
            return None;
        }
        // What the object's controllers report, not what it asks for — except an EgressIP's,
        // whose status says which node holds each address, and a Service's addresses, which
        // it keeps.
        let status = top.remove("status");
        if kind == "EndpointSlice" {
            if let Some(metadata) = metadata {
                top.insert(Value::from("metadata"), metadata);
            }
            return self.endpoint_slice(&top);
        }
        if kind == "Secret" {
            if let Some(metadata) = metadata {
                top.insert(Value::from("metadata"), metadata);
            }
            self.secret(&top);
            return None;
        }
        if let Some((key, _)) = top.iter().next() {
            let key = key.as_str().unwrap_or("?").to_string();
            self.fail(
                &key,
                format!(
                    "unknown top-level field `{key}`; expected apiVersion, kind, metadata, spec"
                ),
            );
            return None;
        }
        let meta = self.metadata(metadata)?;
        self.name = meta.name.clone();
        if kind == "Node" {
            // Only this node's labels matter (see `node_labels`); its spec and the others' are
            // the kubelet's business.
            return (context.node_name() == Some(meta.name.as_str())).then(|| {
                let mut node = Mapping::new();
                node.insert(Value::from("labels"), labels_value(&meta.labels));
                self.emit("node", Value::Mapping(node), "node", "metadata", None)
            })?;
        }
        if kind == "Namespace" {
            // Its labels are read by `NamespaceIndex`; its spec is the apiserver's.
            return None;
        }
        if kind == "Service" {
            let Value::Mapping(spec) = spec else {
                self.fail("spec", "must be a mapping");
                return None;
            };
            return self.service(spec, status.as_ref(), meta, context);
        }
        let Meta { name, labels, .. } = meta;
        let Value::Mapping(mut spec) = spec else {
            self.fail("spec", "must be a mapping");
            return None;
        };
        match kind.as_str() {
            "FRRConfiguration" => self.frr_configuration(spec, name, labels, context),
            "BGPPeer" => self.bgp_peer(spec, name, context),
            "BFDProfile" => {
                spec.insert(Value::from("name"), Value::from(name));
                self.emit(
                    "bgp",
                    wrap("bfd_profiles", list(Value::Mapping(spec))),
                    "bgp.bfd_profiles[0]",
                    "spec",
                    None,
                )
            }
            "IPAddressPool" => {
                spec.insert(Value::from("name"), Value::from(name));
                spec.insert(Value::from("labels"), labels_value(&labels));
                self.emit("pools", list(Value::Mapping(spec)), "pools[0]", "spec", None)
            }
            "BGPAdvertisement" => {
                spec.insert(Value::from("name"), Value::from(name));
                self.emit(
                    "advertisements",
                    list(Value::Mapping(spec)),
                    "advertisements[0]",
                    "spec",
                    None,
                )
            }
            "L2Advertisement" => {
                spec.insert(Value::from("name"), Value::from(name));
                self.emit(
                    "l2_advertisements",
                    list(Value::Mapping(spec)),
                    "l2_advertisements[0]",
                    "spec",
                    None,
                )
            }
            "Community" => {
                let communities = spec.remove("communities").unwrap_or(Value::Sequence(Vec::new()));
                if let Some((key, _)) = spec.iter().next() {
                    let key = key.as_str().unwrap_or("?").to_string();
                    self.fail(
                        &format!("spec.{key}"),
                        format!("unknown field `{key}`; expected communities"),
                    );
                    return None;
                }
                self.emit("communities", communities, "communities", "spec.communities", None)
            }
            "RouteAdvertisements" => {
                spec.insert(Value::from("name"), Value::from(name));
                self.emit(
                    "route_advertisements",
                    list(Value::Mapping(spec)),
                    "route_advertisements[0]",
                    "spec",
                    None,
                )
            }
            "ClusterUserDefinedNetwork" => self.cudn(spec, name, labels),
            "EgressIP" => self.egress_ip(&spec, status.as_ref(), context),
            "NodeNetworkConfigurationPolicy" => self.nncp(spec, name),
            _ => None,
        }
    }

    fn metadata(&mut self, metadata: Option<Value>) -> Option<Meta> {
        let Some(Value::Mapping(mut metadata)) = metadata else {
            self.fail("metadata", "missing; every object needs metadata.name");
            return None;
        };
        let name = take_str(&mut metadata, "name");
        let mut maps = [Labels::new(), Labels::new()];
        for (key, map) in ["labels", "annotations"].into_iter().zip(maps.iter_mut()) {
            match metadata.remove(key) {
                None | Some(Value::Null) => {}
                Some(value) => match string_map(&value) {
                    Some(read) => *map = read,
                    None => {
                        self.fail(&format!("metadata.{key}"), "must map names to strings");
                        return None;
                    }
                },
            }
        }
        let [labels, annotations] = maps;
        let namespace = take_str(&mut metadata, "namespace");
        for field in SERVER_METADATA {
            metadata.remove(field);
        }
        if let Some((key, _)) = metadata.iter().next() {
            let key = key.as_str().unwrap_or("?").to_string();
            self.fail(
                &format!("metadata.{key}"),
                format!("unknown field `{key}`; expected name, namespace, labels, annotations"),
            );
            return None;
        }
        let Some(name) = name.filter(|n| !n.is_empty()) else {
            self.fail("metadata.name", "missing");
            return None;
        };
        Some(Meta { name, namespace, labels, annotations })
    }

    /// `nodeSelector` (a single selector): does it select this node?
    fn selected(
        &mut self,
        selector: Option<Value>,
        field: &str,
        node_labels: &Labels,
    ) -> Option<bool> {
        match selector {
            None | Some(Value::Null) => Some(true),
            Some(value) => match selector_of(&value) {
                Ok(selector) => Some(selector.matches(node_labels)),
                Err(message) => {
                    self.fail(field, message);
                    None
                }
            },
        }
    }

    fn frr_configuration(
        &mut self,
        mut spec: Mapping,
        name: String,
        labels: Labels,
        context: &Context<'_>,
    ) -> Option<Fragment> {
        if !self.selected(
            spec.remove("nodeSelector"),
            "spec.nodeSelector",
            context.node_labels(),
        )? {
            return None;
        }
        let bgp = spec.remove("bgp").unwrap_or(Value::Mapping(Mapping::new()));
        if let Some((key, _)) = spec.iter().next() {
            let key = key.as_str().unwrap_or("?").to_string();
            self.fail(
                &format!("spec.{key}"),
                format!("unknown or unsupported field `{key}`; expected nodeSelector, bgp"),
            );
            return None;
        }
        let Value::Mapping(mut bgp) = bgp else {
            self.fail("spec.bgp", "must be a mapping");
            return None;
        };
        let mut router_labels = Vec::new();
        if let Some(Value::Sequence(routers)) = bgp.get_mut("routers") {
            for (r, router) in routers.iter_mut().enumerate() {
                let Value::Mapping(router) = router else { continue };
                let vrf = router.get("vrf").and_then(Value::as_str).unwrap_or("").to_string();
                let mut neighbors = Vec::new();
                if let Some(Value::Sequence(list)) = router.get_mut("neighbors") {
                    for (n, neighbor) in list.iter_mut().enumerate() {
                        let Value::Mapping(neighbor) = neighbor else { continue };
                        let field = format!("spec.bgp.routers[{r}].neighbors[{n}]");
                        self.resolve_password_secret(neighbor, &field, context)?;
                        // frr-k8s's JSON name is all lower case, MetalLB's BGPPeer's camel case.
                        if let Some(source) = neighbor.remove("sourceaddress") {
                            neighbor.insert(Value::from("sourceAddress"), source);
                        }
                        // frr-k8s's CRD defaults it to [unicast], which is what uplink runs.
                        if let Some(families) = neighbor.remove("addressFamilies") {
                            let unicast = families.as_sequence().is_some_and(|list| {
                                list.iter().all(|f| f.as_str() == Some("unicast"))
                            });
                            if !unicast {
                                self.fail(
                                    &format!("{field}.addressFamilies"),
                                    "only unicast is supported here (not evpn)",
                                );
                                return None;
                            }
                        }
                        if let Some(address) = neighbor
                            .get("address")
                            .and_then(Value::as_str)
                            .and_then(|a| a.parse().ok())
                        {
                            neighbors.push(address);
                        }
                        address_families(neighbor);
                    }
                }
                router_labels.push(RouterLabels {
                    config_name: name.clone(),
                    labels: labels.clone(),
                    vrf,
                    neighbors,
                });
            }
        }
        let mut fragment = self.emit("bgp", Value::Mapping(bgp), "bgp", "spec.bgp", None)?;
        fragment.announce.router_labels = router_labels;
        Some(fragment)
    }

    fn bgp_peer(
        &mut self,
        mut spec: Mapping,
        name: String,
        context: &Context<'_>,
    ) -> Option<Fragment> {
        let node_labels = context.node_labels();
        match spec.remove("nodeSelectors") {
            None | Some(Value::Null) => {}
            Some(Value::Sequence(list)) if list.is_empty() => {}
            Some(Value::Sequence(list)) => {
                let mut any = false;
                for (i, value) in list.iter().enumerate() {
                    match selector_of(value) {
                        Ok(s) => any |= s.matches(node_labels),
                        Err(message) => {
                            self.fail(&format!("spec.nodeSelectors[{i}]"), message);
                            return None;
                        }
                    }
                }
                if !any {
                    return None;
                }
            }
            Some(_) => {
                self.fail("spec.nodeSelectors", "must be a list of label selectors");
                return None;
            }
        }
        let mut router = Mapping::new();
        for (from, to) in [("myASN", "asn"), ("vrf", "vrf"), ("routerID", "id")] {
            if let Some(value) = spec.remove(from) {
                router.insert(Value::from(to), value);
            }
        }
        let mut neighbor = Mapping::new();
        for (from, to) in [("peerAddress", "address"), ("peerASN", "asn"), ("peerPort", "port")] {
            if let Some(value) = spec.remove(from) {
                neighbor.insert(Value::from(to), value);
            }
        }
        let vrf = router.get("vrf").and_then(Value::as_str).unwrap_or("").to_string();
        let address = neighbor.get("address").and_then(Value::as_str).and_then(|a| a.parse().ok());
        self.resolve_password_secret(&mut spec, "spec", context)?;
        // The rest are neighbor settings under their own names (sourceAddress, holdTime, ...).
        for (key, value) in spec {
            neighbor.insert(key, value);
        }
        address_families(&mut neighbor);
        router.insert(Value::from("neighbors"), list(Value::Mapping(neighbor)));
        let mut fragment = self.emit(
            "bgp",
            wrap("routers", list(Value::Mapping(router))),
            "bgp.routers[0]",
            "spec",
            Some("bgp.routers[0].neighbors[0]"),
        )?;
        if let Some(address) = address {
            fragment.announce.peer_names.push(super::announce::Placed {
                item: PeerName { name, vrf, address },
                loc: super::error::Loc { file: self.path.clone(), line: self.line, column: 1 },
                field: format!("documents[{}].metadata.name", self.index).into(),
            });
        }
        Some(fragment)
    }

    fn cudn(&mut self, mut spec: Mapping, name: String, labels: Labels) -> Option<Fragment> {
        // Which namespaces use the network does not change what is announced.
        spec.remove("namespaceSelector");
        let network = spec.remove("network");
        if let Some((key, _)) = spec.iter().next() {
            let key = key.as_str().unwrap_or("?").to_string();
            self.fail(
                &format!("spec.{key}"),
                format!(
                    "unknown or unsupported field `{key}`; expected namespaceSelector, network"
                ),
            );
            return None;
        }
        let Some(Value::Mapping(mut network)) = network else {
            self.fail("spec.network", "missing; a ClusterUserDefinedNetwork needs spec.network");
            return None;
        };
        let topology = take_str(&mut network, "topology");
        let (key, topology) = match topology.as_deref() {
            Some("Layer3") => ("layer3", "layer3"),
            Some("Layer2") => ("layer2", "layer2"),
            other => {
                self.fail(
                    "spec.network.topology",
                    format!("{other:?} is not supported; valid: Layer3, Layer2"),
                );
                return None;
            }
        };
        let Some(Value::Mapping(mut layer)) = network.remove(key) else {
            self.fail(
                &format!("spec.network.{key}"),
                format!("missing; topology {topology} needs spec.network.{key}"),
            );
            return None;
        };
        if let Some((other, _)) = network.iter().next() {
            let other = other.as_str().unwrap_or("?").to_string();
            self.fail(
                &format!("spec.network.{other}"),
                format!("unknown or unsupported field `{other}`"),
            );
            return None;
        }
        // role (Primary/Secondary), the MTU, the join subnets (inside OVN's own topology) and
        // the IPAM lifecycle decide how pods attach, not what is announced.
        for attachment in ["role", "mtu", "joinSubnets", "ipamLifecycle"] {
            layer.remove(attachment);
        }
        let mut ipam_disabled = false;
        if let Some(Value::Mapping(mut ipam)) = layer.remove("ipam") {
            ipam.remove("lifecycle");
            match take_str(&mut ipam, "mode").as_deref() {
                None | Some("Enabled") => {}
                Some("Disabled") => ipam_disabled = true,
                Some(other) => {
                    self.fail(
                        &format!("spec.network.{key}.ipam.mode"),
                        format!("{other:?} is not a mode; valid: Enabled, Disabled"),
                    );
                    return None;
                }
            }
            if let Some((other, _)) = ipam.iter().next() {
                let other = other.as_str().unwrap_or("?").to_string();
                self.fail(
                    &format!("spec.network.{key}.ipam.{other}"),
                    format!("unknown or unsupported field `{other}`"),
                );
                return None;
            }
        }
        if ipam_disabled {
            // No subnets (OVN-Kubernetes requires them unset): layer 2 only, nothing to announce.
            if layer.contains_key("subnets") {
                self.fail(
                    &format!("spec.network.{key}.subnets"),
                    "must be unset when ipam.mode is Disabled (OVN-Kubernetes's rule)",
                );
            }
            return None;
        }
        let mut subnets = Vec::new();
        if let Some(Value::Sequence(list)) = layer.remove("subnets") {
            for (i, subnet) in list.into_iter().enumerate() {
                match subnet {
                    Value::String(cidr) => subnets.push(Value::String(cidr)),
                    // Layer3: { cidr, hostSubnet }; the host subnet length is OVN-Kubernetes's
                    // business, this node's slice comes from `[[networks]] host_subnet`.
                    Value::Mapping(mut m) => {
                        m.remove("hostSubnet");
                        match m.remove("cidr") {
                            Some(cidr) => subnets.push(cidr),
                            None => {
                                self.fail(
                                    &format!("spec.network.{key}.subnets[{i}].cidr"),
                                    "missing",
                                );
                                return None;
                            }
                        }
                    }
                    _ => {
                        self.fail(
                            &format!("spec.network.{key}.subnets[{i}]"),
                            "must be a CIDR string or { cidr, hostSubnet }",
                        );
                        return None;
                    }
                }
            }
        }
        if let Some((other, _)) = layer.iter().next() {
            let other = other.as_str().unwrap_or("?").to_string();
            self.fail(
                &format!("spec.network.{key}.{other}"),
                format!("unknown or unsupported field `{other}`"),
            );
            return None;
        }
        let mut entry = Mapping::new();
        entry.insert(Value::from("name"), Value::from(name));
        entry.insert(Value::from("labels"), labels_value(&labels));
        entry.insert(Value::from("topology"), Value::from(topology));
        entry.insert(Value::from("subnet"), Value::Sequence(subnets));
        self.emit("networks", list(Value::Mapping(entry)), "networks[0]", "spec.network", None)
    }

    /// The fragment of a document of a kind uplink does not act on: nothing but its note.
    fn skipped(&self, kind: String, api_version: String, metadata: Option<&Value>) -> Fragment {
        let name = metadata.and_then(|m| m.get("name")).and_then(Value::as_str).unwrap_or("");
        let mut fragment = Fragment::empty(self.path.to_path_buf());
        fragment.skipped.push(SkippedDocument {
            file: self.path.to_path_buf(),
            line: self.line,
            index: self.index,
            api_version,
            kind,
            name: name.to_string(),
        });
        fragment
    }

    /// Validates `value` as the TOML table `key = value`, as if a TOML file held it.
    /// `toml_prefix` is the field path that corresponds to `yaml_prefix` in error messages.
    fn emit(
        &mut self,
        key: &str,
        value: Value,
        toml_prefix: &str,
        yaml_prefix: &str,
        alt_prefix: Option<&str>,
    ) -> Option<Fragment> {
        self.emit_with(key, value, |field| yaml_path(field, toml_prefix, yaml_prefix, alt_prefix))
    }

    /// [`Self::emit`] with the TOML → manifest field mapping given by `yaml_field`.
    fn emit_with(
        &mut self,
        key: &str,
        value: Value,
        yaml_field: impl Fn(&str) -> String,
    ) -> Option<Fragment> {
        let table = match to_toml(&value, true) {
            Ok(table) => table,
            Err(message) => {
                self.fail(&yaml_field(""), message);
                return None;
            }
        };
        // Every position validation records (in errors, and in the fragment for the merge's
        // messages) is the document's start in the YAML file: offsets into this text would
        // point elsewhere, and past the file's end where a string holds a line break.
        let text = format!("{key} = {table}\n");
        let source = SourceText::made_from(self.path, self.line, &text);
        let mut errors = Vec::new();
        let fragment = match toml::from_str::<RawFile>(&text) {
            Ok(raw) => Some(validate_file(&source, raw, TimerDefaults::Upstream, &mut errors)),
            Err(error) => {
                errors.push(source.toml_error(&error));
                None
            }
        };
        self.read_a_file |= source.read_a_file();
        for error in errors {
            self.fail(&yaml_field(&error.field), camel_case_message(&error.message));
        }
        fragment
    }
}

/// An object's `metadata`, as far as it matters here.
struct Meta {
    name: String,
    namespace: Option<String>,
    labels: Labels,
    annotations: Labels,
}

/// The families a manifest neighbor carries, as frr-k8s and MetalLB decide them
/// (`addressFamilyForNeighbor`): its own address's family, and both with
/// `dualStackAddressFamily: true`. `disableMP` is deprecated upstream and ignored there (the
/// CRDs still default it to false); accepted and ignored here too.
fn address_families(neighbor: &mut Mapping) {
    neighbor.remove("disableMP");
    let dual = matches!(neighbor.remove("dualStackAddressFamily"), Some(Value::Bool(true)));
    if dual && !neighbor.contains_key("families") {
        neighbor.insert(
            Value::from("families"),
            Value::Sequence(vec![Value::from("ipv4-unicast"), Value::from("ipv6-unicast")]),
        );
    }
}

fn take_str(map: &mut Mapping, key: &str) -> Option<String> {
    map.remove(key).and_then(|v| v.as_str().map(str::to_string))
}

fn list(value: Value) -> Value {
    Value::Sequence(vec![value])
}

fn wrap(key: &str, value: Value) -> Value {
    let mut map = Mapping::new();
    map.insert(Value::from(key), value);
    Value::Mapping(map)
}

fn labels_value(labels: &Labels) -> Value {
    let mut map = Mapping::new();
    for (k, v) in labels {
        map.insert(Value::from(k.as_str()), Value::from(v.as_str()));
    }
    Value::Mapping(map)
}

fn string_map(value: &Value) -> Option<Labels> {
    let Value::Mapping(map) = value else { return None };
    map.iter()
        .map(|(k, v)| {
            let value = match v {
                Value::String(s) => s.clone(),
                Value::Bool(b) => b.to_string(),
                Value::Number(n) => n.to_string(),
                Value::Null => String::new(),
                _ => return None,
            };
            Some((k.as_str()?.to_string(), value))
        })
        .collect()
}

/// A YAML label selector (`matchLabels`, `matchExpressions`).
fn selector_of(value: &Value) -> Result<LabelSelector, String> {
    let Value::Mapping(map) = value else { return Err("must be a label selector mapping".into()) };
    let mut selector = LabelSelector::default();
    for (key, value) in map {
        match key.as_str() {
            Some("matchLabels") => {
                selector.match_labels =
                    string_map(value).ok_or("matchLabels must map label names to strings")?;
            }
            Some("matchExpressions") => {
                let Value::Sequence(list) = value else {
                    return Err("matchExpressions must be a list".into());
                };
                for item in list {
                    let key = item
                        .get("key")
                        .and_then(Value::as_str)
                        .ok_or("each matchExpressions entry needs a key")?;
                    let operator = item
                        .get("operator")
                        .and_then(Value::as_str)
                        .and_then(Operator::parse)
                        .ok_or("operator must be In, NotIn, Exists or DoesNotExist")?;
                    let values = match item.get("values") {
                        Some(Value::Sequence(v)) => {
                            v.iter().filter_map(|v| v.as_str().map(str::to_string)).collect()
                        }
                        _ => Vec::new(),
                    };
                    selector.match_expressions.push(Requirement {
                        key: key.to_string(),
                        operator,
                        values,
                    });
                }
            }
            Some(other) => {
                return Err(format!(
                    "unknown selector field `{other}`; expected matchLabels, matchExpressions"
                ))
            }
            None => return Err("selector keys must be strings".into()),
        }
    }
    Ok(selector)
}

/// camelCase → snake_case, with the few upstream names that do not follow the pattern.
fn snake_case(key: &str) -> String {
    if let Some((_, to)) = RENAMES.iter().find(|(from, _)| *from == key) {
        return to.to_string();
    }
    let mut out = String::with_capacity(key.len().saturating_add(4));
    let mut previous_lower = false;
    for c in key.chars() {
        if c.is_ascii_uppercase() {
            if previous_lower {
                out.push('_');
            }
            out.push(c.to_ascii_lowercase());
            previous_lower = false;
        } else {
            out.push(c);
            previous_lower = c.is_ascii_lowercase() || c.is_ascii_digit();
        }
    }
    out
}

/// snake_case → the manifest's camelCase, for error messages.
fn camel_case(key: &str) -> String {
    if let Some((from, _)) = RENAMES.iter().find(|(_, to)| *to == key) {
        return from.to_string();
    }
    let mut out = String::with_capacity(key.len());
    let mut upper = false;
    for c in key.chars() {
        if c == '_' {
            upper = true;
        } else if upper {
            out.push(c.to_ascii_uppercase());
            upper = false;
        } else {
            out.push(c);
        }
    }
    out
}

/// Rewrites a TOML field path as the manifest's: swap the prefix, camelCase each key.
fn yaml_path(
    field: &str,
    toml_prefix: &str,
    yaml_prefix: &str,
    alt_prefix: Option<&str>,
) -> String {
    let rest = [alt_prefix, Some(toml_prefix)]
        .into_iter()
        .flatten()
        .find_map(|p| field.strip_prefix(p))
        .unwrap_or(field);
    let camel: Vec<String> = rest
        .split('.')
        .map(|part| match part.split_once('[') {
            Some((key, index)) => format!("{}[{index}", camel_case(key)),
            None => camel_case(part),
        })
        .collect();
    let rest = camel.join(".");
    if rest.is_empty() || rest.starts_with('[') || rest.starts_with('.') {
        format!("{yaml_prefix}{rest}")
    } else {
        format!("{yaml_prefix}.{rest}")
    }
}

/// Field names in backticks (serde's "unknown field `x`, expected one of `y`, `z`") in the
/// manifest's spelling.
fn camel_case_message(message: &str) -> String {
    let mut out = String::with_capacity(message.len());
    for (i, part) in message.split('`').enumerate() {
        if i > 0 {
            out.push('`');
        }
        if i % 2 == 1 {
            out.push_str(&camel_case(part));
        } else {
            out.push_str(part);
        }
    }
    out
}

/// The session timers of frr-k8s's and MetalLB's neighbors: `metav1.Duration`, which the
/// apiserver parses with Go's `time.ParseDuration` ("1.5s", "1m30s", "300ms").
const GO_DURATIONS: [&str; 3] = ["hold_time", "keepalive_time", "connect_time"];

/// A Go duration in the config's own form (`"1m30s"`), so it means what it means to the
/// apiserver; finer than a millisecond is refused rather than rounded.
fn go_duration(text: &str) -> Result<String, String> {
    let duration = super::duration::parse_go_duration(text)?;
    if duration.subsec_nanos() % 1_000_000 != 0 {
        return Err(format!("\"{text}\" is finer than a millisecond"));
    }
    Ok(super::duration::format_duration(duration))
}

/// YAML → TOML, renaming keys to snake_case except inside label maps. BFD intervals, integers
/// of milliseconds in the Kubernetes APIs, become duration strings.
fn to_toml(value: &Value, rename: bool) -> Result<toml::Value, String> {
    Ok(match value {
        Value::Null => return Err("null values are not supported; leave the field out".into()),
        Value::Bool(b) => toml::Value::Boolean(*b),
        Value::Number(n) => match (n.as_i64(), n.as_f64()) {
            (Some(i), _) => toml::Value::Integer(i),
            (None, Some(f)) => toml::Value::Float(f),
            _ => return Err(format!("number {n} is out of range")),
        },
        Value::String(s) => toml::Value::String(s.clone()),
        Value::Sequence(items) => {
            toml::Value::Array(items.iter().map(|v| to_toml(v, rename)).collect::<Result<_, _>>()?)
        }
        Value::Mapping(map) => {
            let mut table = toml::map::Map::new();
            for (key, value) in map {
                let Some(key) = key.as_str() else {
                    return Err("mapping keys must be strings".into());
                };
                if value.is_null() {
                    continue; // `field: ~` is the same as leaving it out, as in Kubernetes.
                }
                let name = if rename { snake_case(key) } else { key.to_string() };
                let converted = match (name.as_str(), value) {
                    (
                        "receive_interval" | "transmit_interval" | "echo_interval",
                        Value::Number(n),
                    ) if rename => toml::Value::String(format!("{n}ms")),
                    (name, Value::String(text)) if rename && GO_DURATIONS.contains(&name) => {
                        toml::Value::String(go_duration(text).map_err(|e| format!("{key}: {e}"))?)
                    }
                    _ => to_toml(value, rename && !VERBATIM.contains(&key))?,
                };
                table.insert(name, converted);
            }
            toml::Value::Table(table)
        }
        Value::Tagged(tagged) => to_toml(&tagged.value, rename)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_names_map_both_ways() {
        for (camel, snake) in [
            ("holdTime", "hold_time"),
            ("toAdvertise", "to_advertise"),
            ("aggregationLengthV6", "aggregation_length_v6"),
            ("ipAddressPoolSelectors", "ip_address_pool_selectors"),
            ("ebgpMultiHop", "ebgp_multihop"),
            ("avoidBuggyIPs", "avoid_buggy_ips"),
            ("targetVRF", "target_vrf"),
            ("frrConfigurationSelector", "frr_configuration_selector"),
        ] {
            assert_eq!(snake_case(camel), snake);
            assert_eq!(camel_case(snake), camel);
        }
        assert_eq!(
            yaml_path("bgp.routers[0].neighbors[1].hold_time", "bgp", "spec.bgp", None),
            "spec.bgp.routers[0].neighbors[1].holdTime"
        );
        assert_eq!(yaml_path("pools[0].auto_assign", "pools[0]", "spec", None), "spec.autoAssign");
        assert_eq!(
            camel_case_message("unknown field `log_level`, expected `hold_time`"),
            "unknown field `logLevel`, expected `holdTime`"
        );
    }

    #[test]
    fn document_start_lines_follow_separators() {
        assert_eq!(document_start_lines("a: 1\n---\nb: 2\n---\nc: 3\n"), vec![1, 3, 5]);
        assert_eq!(document_start_lines("# c\n---\na: 1\n---\nb: 1\n"), vec![3, 5]);
    }

    use std::net::IpAddr;
    use std::path::PathBuf;

    use ipnet::IpNet;

    use super::super::load::load_sources;
    use super::super::model::{AddressFamily, AllowMode, Config, RemoteAsn};
    use super::super::ConfigErrors;
    use crate::announce::{compute_config, PeerSet, RuntimeState};

    fn fixture(name: &str) -> (PathBuf, String) {
        let path =
            Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/manifests").join(name);
        let text = std::fs::read_to_string(&path).unwrap();
        (path, text)
    }

    fn load(toml: &str, yaml: &[(PathBuf, String)]) -> Result<Config, ConfigErrors> {
        let mut sources = vec![(PathBuf::from("uplink.toml"), toml.to_string())];
        sources.extend(yaml.iter().cloned());
        load_sources(&sources)
    }

    fn net(text: &str) -> IpNet {
        text.parse().unwrap()
    }

    fn ip(text: &str) -> IpAddr {
        text.parse().unwrap()
    }

    /// wk3 of the deck: its slice of the default pod network and its EgressIP.
    const WK3: &str = r#"
[node]
name = "wk3"
labels = { "node-role.kubernetes.io/worker" = "" }

[[networks]]
name = "default"
topology = "layer3"
subnet = "10.128.0.0/16"
host_subnet = "10.128.7.0/24"
egress_ips = ["172.18.20.201"]
"#;

    /// MetalLB's `L2Advertisement` reads as `[[l2_advertisements]]`, beside a
    /// `BGPAdvertisement` of the same pool; an interface name the kernel would refuse is an
    /// error at its line and field.
    #[test]
    fn an_l2_advertisement_reads_as_its_toml_beside_a_bgp_one() {
        let pool = "apiVersion: metallb.io/v1beta1\nkind: IPAddressPool\nmetadata: {name: lan, namespace: metallb-system, labels: {zone: a}}\nspec:\n  addresses: [192.0.2.0/28]\n";
        let manifests = format!(
            "{pool}---\napiVersion: metallb.io/v1beta1\nkind: BGPAdvertisement\nmetadata: {{name: bgp, namespace: metallb-system}}\nspec:\n  ipAddressPools: [lan]\n---\napiVersion: metallb.io/v1beta1\nkind: L2Advertisement\nmetadata: {{name: l2, namespace: metallb-system}}\nspec:\n  ipAddressPoolSelectors: [{{matchLabels: {{zone: a}}}}]\n  nodeSelectors: [{{matchLabels: {{rack: r1}}}}]\n  interfaces: [eth0, bond0.100]\n"
        );
        let from_manifest = load("", &[(PathBuf::from("conf.d/l2.yaml"), manifests)])
            .unwrap_or_else(|e| panic!("{e}"));
        let toml = "[[l2_advertisements]]\nname = \"l2\"\nip_address_pool_selectors = [{ match_labels = { zone = \"a\" } }]\nnode_selectors = [{ match_labels = { rack = \"r1\" } }]\ninterfaces = [\"eth0\", \"bond0.100\"]\n";
        let from_toml = load(toml, &[]).unwrap_or_else(|e| panic!("{e}"));
        let l2 = &from_manifest.announce.l2_advertisements;
        assert_eq!(l2.len(), 1);
        assert_eq!(l2[0].interfaces, ["eth0", "bond0.100"]);
        assert_eq!(l2[0].node_selectors.len(), 1);
        assert_eq!(from_manifest.announce.advertisements.len(), 1, "the BGP one beside it");
        let mut toml_l2 = from_toml.announce.l2_advertisements.clone();
        for adv in &mut toml_l2 {
            adv.sources = l2[0].sources.clone();
        }
        assert_eq!(&toml_l2, l2);

        let bad = "apiVersion: metallb.io/v1beta1\nkind: L2Advertisement\nmetadata: {name: l2}\nspec:\n  interfaces: [eth0, \"not/a-name\"]\n";
        let errors = load("", &[(PathBuf::from("x.yaml"), bad.to_string())]).unwrap_err().0;
        assert_eq!(errors.len(), 1, "{errors:?}");
        assert_eq!(errors[0].field, "documents[0].spec.interfaces[1]");
        assert!(errors[0].message.contains("not an interface name"), "{}", errors[0].message);
    }

    #[test]
    fn deck_default_pod_network_and_egress_ip() {
        let config = load(WK3, &[fixture("deck-default-pod-network.yaml")])
            .unwrap_or_else(|e| panic!("{e}"));
        let router = &config.bgp.routers[0];
        assert_eq!((router.asn, router.vrf.as_str()), (65801, ""));
        let neighbor = &router.neighbors[0];
        assert_eq!(neighbor.address, ip("172.18.20.1"));
        assert_eq!(neighbor.remote_asn, RemoteAsn::Fixed(65102));
        assert_eq!(neighbor.families, vec![AddressFamily::Ipv4Unicast], "disableMP: true");
        assert_eq!(neighbor.to_receive.mode, AllowMode::All);
        let result = compute_config(&config, RuntimeState::default());
        // Slide 20's running-config: `network 10.128.7.0/24`, `network 172.18.20.201/32`, both
        // permitted out to 172.18.20.1.
        let default = result.router("").unwrap();
        let prefixes: Vec<IpNet> = default.originate.keys().copied().collect();
        assert_eq!(prefixes, vec![net("10.128.7.0/24"), net("172.18.20.201/32")]);
        for route in default.originate.values() {
            assert_eq!(route.peers, PeerSet::Only([ip("172.18.20.1")].into()));
        }
    }

    #[test]
    fn deck_layer2_cudn_from_every_node_with_leaking() {
        let config = load("[node]\nname = \"wk3\"\n", &[fixture("deck-cudn-layer2.yaml")])
            .unwrap_or_else(|e| panic!("{e}"));
        let network = &config.announce.networks[0];
        assert_eq!((network.name.as_str(), network.vrf.as_str()), ("cudn2", "cudn2"));
        assert_eq!(network.subnets, vec![net("172.22.0.0/16")]);
        let result = compute_config(&config, RuntimeState::default());
        let default = result.router("").unwrap();
        assert_eq!(
            default.originate.keys().copied().collect::<Vec<_>>(),
            vec![net("172.22.0.0/16")]
        );
        // Slide 34: `import vrf cudn2` in the default router, `import vrf default` in cudn2's.
        assert!(default.imports.contains("cudn2"));
        assert!(result.router("cudn2").unwrap().imports.contains(""));
    }

    #[test]
    fn deck_vrf_lite_layer3_and_layer2() {
        let node = "[node]\nname = \"wk3\"\n[[networks]]\nname = \"cudn3\"\nhost_subnet = \"172.23.5.0/24\"\n";
        let config = load(node, &[fixture("deck-vrf-lite.yaml")]).unwrap_or_else(|e| panic!("{e}"));
        let vrfs: Vec<&str> = config.bgp.routers.iter().map(|r| r.vrf.as_str()).collect();
        assert_eq!(vrfs, vec!["cudn3", "cudn4"]);
        let result = compute_config(&config, RuntimeState::default());
        let cudn3 = result.router("cudn3").unwrap();
        assert_eq!(cudn3.originate.keys().copied().collect::<Vec<_>>(), vec![net("172.23.5.0/24")]);
        assert_eq!(
            cudn3.originate[&net("172.23.5.0/24")].peers,
            PeerSet::Only([ip("172.19.23.1")].into())
        );
        let cudn4 = result.router("cudn4").unwrap();
        assert_eq!(cudn4.originate.keys().copied().collect::<Vec<_>>(), vec![net("172.24.0.0/16")]);
        assert!(cudn3.imports.is_empty() && cudn4.imports.is_empty());
    }

    #[test]
    fn all_three_deck_files_load_together() {
        let config = load(
            WK3,
            &[
                fixture("deck-cudn-layer2.yaml"),
                fixture("deck-default-pod-network.yaml"),
                fixture("deck-vrf-lite.yaml"),
            ],
        )
        .unwrap_or_else(|e| panic!("{e}"));
        // receive-all is in two files, identically: one router, one neighbor.
        assert_eq!(config.bgp.routers.len(), 3);
        assert_eq!(config.bgp.routers[0].neighbors.len(), 1);
    }

    #[test]
    fn metallb_objects_map_onto_the_model() {
        let yaml = r#"
apiVersion: metallb.io/v1beta1
kind: IPAddressPool
metadata:
  name: vips
  namespace: metallb-system
  labels: {expose: "yes"}
spec:
  addresses: ["192.0.2.0/28", "192.0.2.100-192.0.2.110"]
  autoAssign: false
  avoidBuggyIPs: true
  serviceAllocation:
    priority: 5
    namespaces: [web]
---
apiVersion: metallb.io/v1beta1
kind: Community
metadata: {name: communities}
spec:
  communities:
  - name: vip
    value: "65000:300"
---
apiVersion: metallb.io/v1beta1
kind: BGPAdvertisement
metadata: {name: adv}
spec:
  ipAddressPoolSelectors:
  - matchLabels: {expose: "yes"}
  aggregationLengthV6: 64
  communities: [vip]
  localPref: 120
  peers: [tor]
---
apiVersion: metallb.io/v1beta2
kind: BGPPeer
metadata: {name: tor}
spec:
  myASN: 65801
  peerASN: 65102
  peerAddress: 172.18.20.1
  holdTime: 30s
  bfdProfile: fast
  ebgpMultiHop: true
---
apiVersion: metallb.io/v1beta2
kind: BGPPeer
metadata: {name: elsewhere}
spec:
  myASN: 65801
  peerASN: 65102
  peerAddress: 172.18.20.9
  nodeSelectors:
  - matchLabels: {kubernetes.io/hostname: wk9}
---
apiVersion: metallb.io/v1beta1
kind: BFDProfile
metadata: {name: fast}
spec:
  receiveInterval: 100
  transmitInterval: 100
  detectMultiplier: 5
"#;
        let config = load(
            "[node]\nname = \"wk1\"\n",
            &[(PathBuf::from("conf.d/metallb.yaml"), yaml.to_string())],
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let pool = &config.announce.pools[0];
        assert_eq!((pool.auto_assign, pool.avoid_buggy_ips), (false, true));
        assert_eq!(pool.labels.get("expose").map(String::as_str), Some("yes"));
        assert_eq!(pool.service_allocation.as_ref().unwrap().priority, Some(5));
        let adv = &config.announce.advertisements[0];
        assert_eq!(adv.communities, vec![crate::config::Community::Standard(65000 << 16 | 300)]);
        assert_eq!(
            (adv.aggregation_length, adv.aggregation_length_v6, adv.local_pref),
            (32, 64, Some(120))
        );
        let router = &config.bgp.routers[0];
        assert_eq!(router.neighbors.len(), 1, "the peer for wk9 is not applied on wk1");
        let neighbor = &router.neighbors[0];
        assert_eq!(neighbor.hold_time, std::time::Duration::from_secs(30));
        assert_eq!(neighbor.bfd_profile.as_deref(), Some("fast"));
        assert_eq!(neighbor.families, vec![AddressFamily::Ipv4Unicast], "its own family");
        assert_eq!(
            config.bgp.bfd_profiles[0].receive_interval,
            std::time::Duration::from_millis(100)
        );
        assert_eq!(config.announce.peer_names[0].address, ip("172.18.20.1"));
    }

    #[test]
    fn errors_name_file_document_and_field_path() {
        let yaml = "apiVersion: frrk8s.metallb.io/v1beta1\nkind: FRRConfiguration\nmetadata: {name: one}\nspec:\n  bgp:\n    routers:\n    - asn: 65801\n---\napiVersion: frrk8s.metallb.io/v1beta1\nkind: FRRConfiguration\nmetadata: {name: two}\nspec:\n  bgp:\n    routers:\n    - asn: 65801\n      neighbors:\n      - address: 172.18.20.1\n        asn: 65102\n        enableGracefulRestart: true\n        prefixSets: x\n        holdTime: 90\n  raw:\n    rawConfig: x\n";
        let errors =
            load("", &[(PathBuf::from("conf.d/frr.yaml"), yaml.to_string())]).unwrap_err().0;
        assert_eq!(errors.len(), 1, "{errors:?}");
        let error = &errors[0];
        assert_eq!((error.file.as_path(), error.line), (Path::new("conf.d/frr.yaml"), 9));
        assert_eq!(error.field, "documents[1].spec.raw");
        assert!(
            error
                .message
                .starts_with("FRRConfiguration \"two\": unknown or unsupported field `raw`"),
            "{}",
            error.message
        );

        let yaml = yaml.replace("  raw:\n    rawConfig: x\n", "");
        let errors = load("", &[(PathBuf::from("conf.d/frr.yaml"), yaml.clone())]).unwrap_err().0;
        assert_eq!(
            errors[0].field, "documents[1].spec.bgp.routers[0].neighbors[0].prefixSets",
            "{errors:?}"
        );
        assert!(errors[0].message.contains("unknown field `prefixSets`"), "{}", errors[0].message);
        // enableGracefulRestart is graceful_restart.
        let yaml =
            yaml.replace("        prefixSets: x\n", "").replace("holdTime: 90", "holdTime: 90s");
        let config = load("", &[(PathBuf::from("conf.d/frr.yaml"), yaml)]).unwrap();
        assert_eq!(
            config.bgp.routers[0].neighbors[0].graceful_restart,
            crate::config::GracefulRestartMode::Enabled
        );

        let hold = "apiVersion: metallb.io/v1beta2\nkind: BGPPeer\nmetadata: {name: p}\nspec:\n  myASN: 65801\n  peerASN: 65102\n  peerAddress: 10.0.0.1\n  holdTime: 90\n";
        let errors = load("", &[(PathBuf::from("x.yaml"), hold.to_string())]).unwrap_err().0;
        assert_eq!(errors[0].field, "documents[0].spec.holdTime", "{errors:?}");
        assert!(errors[0].message.contains("\"90s\""), "{}", errors[0].message);
    }

    /// What decides how pods attach to a user-defined network (its MTU, join subnets, IPAM
    /// lifecycle) is accepted and changes nothing announced; with IPAM disabled the network has
    /// no subnets and nothing to announce.
    #[test]
    fn a_cudns_attachment_settings_are_accepted() {
        let cudn = |name: &str, network: &str| {
            format!("---\napiVersion: k8s.ovn.org/v1\nkind: ClusterUserDefinedNetwork\nmetadata: {{name: {name}}}\nspec:\n  namespaceSelector: {{matchLabels: {{team: {name}}}}}\n  network:\n{network}")
        };
        let yaml = [
            cudn("blue", "    topology: Layer3\n    layer3:\n      role: Primary\n      mtu: 1400\n      joinSubnets: [100.66.0.0/16]\n      subnets: [{cidr: 172.25.0.0/16, hostSubnet: 24}]\n"),
            cudn("green", "    topology: Layer2\n    layer2:\n      role: Primary\n      mtu: 9000\n      subnets: [172.26.0.0/16]\n      ipam: {mode: Enabled, lifecycle: Persistent}\n"),
            cudn("plain", "    topology: Layer2\n    layer2:\n      role: Secondary\n      ipam: {mode: Disabled}\n"),
        ]
        .concat();
        let config = load("", &[(PathBuf::from("cudn.yaml"), yaml.clone())]).unwrap();
        let networks: Vec<(&str, Vec<IpNet>)> =
            config.announce.networks.iter().map(|n| (n.name.as_str(), n.subnets.clone())).collect();
        assert_eq!(
            networks,
            [("blue", vec![net("172.25.0.0/16")]), ("green", vec![net("172.26.0.0/16")])]
        );

        let both = yaml.replace(
            "      ipam: {mode: Disabled}\n",
            "      ipam: {mode: Disabled}\n      subnets: [172.27.0.0/16]\n",
        );
        let errors = load("", &[(PathBuf::from("cudn.yaml"), both)]).unwrap_err().0;
        assert_eq!(errors[0].field, "documents[2].spec.network.layer2.subnets", "{errors:?}");
        let mode = yaml.replace("mode: Disabled", "mode: Off");
        let errors = load("", &[(PathBuf::from("cudn.yaml"), mode)]).unwrap_err().0;
        assert_eq!(errors[0].field, "documents[2].spec.network.layer2.ipam.mode", "{errors:?}");
    }

    /// The source address in each project's own spelling: frr-k8s's `sourceaddress`, MetalLB's
    /// `sourceAddress`.
    #[test]
    fn source_addresses_in_frr_k8s_and_metallb_spelling() {
        let frr = "apiVersion: frrk8s.metallb.io/v1beta1\nkind: FRRConfiguration\nmetadata: {name: f}\nspec:\n  bgp:\n    routers:\n    - asn: 65801\n      neighbors:\n      - address: 10.0.0.5\n        asn: 65102\n        sourceaddress: 10.0.0.9\n";
        let peer = "apiVersion: metallb.io/v1beta2\nkind: BGPPeer\nmetadata: {name: p}\nspec:\n  myASN: 65801\n  peerASN: 65102\n  peerAddress: 10.0.0.1\n  sourceAddress: 10.0.0.8\n";
        let config = load(
            "",
            &[
                (PathBuf::from("frr.yaml"), frr.to_string()),
                (PathBuf::from("p.yaml"), peer.to_string()),
            ],
        )
        .unwrap();
        let sources: Vec<Option<IpAddr>> = config
            .bgp
            .routers
            .iter()
            .flat_map(|r| r.neighbors.iter().map(|n| n.source_address))
            .collect();
        assert_eq!(sources, [Some(ip("10.0.0.9")), Some(ip("10.0.0.8"))]);
    }

    /// An application's objects beside its pool (MetalLB's samples put a `Deployment` and its
    /// `Service` in the pool's file) are skipped with a note; a kind of the groups uplink stands
    /// in for that it does not implement, or a document without `apiVersion`, stays an error.
    #[test]
    fn kinds_uplink_does_not_act_on_are_skipped_and_named() {
        let pool = "apiVersion: metallb.io/v1beta1\nkind: IPAddressPool\nmetadata: {name: vips}\nspec:\n  addresses: [10.9.0.0/24]\n";
        let app = format!(
            "{pool}---\napiVersion: apps/v1\nkind: Deployment\nmetadata: {{name: web}}\nspec:\n  replicas: 2\n---\napiVersion: v1\nkind: ConfigMap\nmetadata: {{name: settings}}\ndata: {{a: b}}\n"
        );
        let config = load("", &[(PathBuf::from("conf.d/app.yaml"), app)]).unwrap();
        assert_eq!(config.announce.pools.len(), 1);
        let notes: Vec<String> = config.skipped.iter().map(ToString::to_string).collect();
        assert_eq!(
            notes,
            [
                "conf.d/app.yaml:7: documents[1]: Deployment \"web\" (apps/v1) skipped: uplink does not act on this kind",
                "conf.d/app.yaml:13: documents[2]: ConfigMap \"settings\" (v1) skipped: uplink does not act on this kind",
            ]
        );

        for (document, field) in [
            (
                "apiVersion: metallb.io/v1beta1\nkind: ServiceL2Status\nmetadata: {name: l2}\n",
                "documents[0].kind",
            ),
            (
                "apiVersion: frrk8s.metallb.io/v1beta1\nkind: FRRNodeState\nmetadata: {name: n}\n",
                "documents[0].kind",
            ),
            (
                "apiVersion: nmstate.io/v1\nkind: NMState\nmetadata: {name: nmstate}\n",
                "documents[0].kind",
            ),
            ("kind: Deployment\nmetadata: {name: web}\n", "documents[0].kind"),
        ] {
            let errors =
                load("", &[(PathBuf::from("x.yaml"), document.to_string())]).unwrap_err().0;
            assert_eq!(errors.len(), 1, "{document}: {errors:?}");
            assert_eq!(errors[0].field, field, "{document}");
            assert!(
                errors[0].message.contains("not supported here; supported: FRRConfiguration"),
                "{}",
                errors[0].message
            );
        }
    }

    /// An EgressIP's `status.items` say which node holds each address: this node's become
    /// egress IPs of the default network; the others' are not this node's to announce.
    #[test]
    fn egress_ips_held_by_this_node_join_the_default_network() {
        let egress = "apiVersion: k8s.ovn.org/v1\nkind: EgressIP\nmetadata: {name: shop}\nspec:\n  egressIPs: [172.18.20.50, 172.18.20.51]\n  namespaceSelector: {matchLabels: {team: shop}}\nstatus:\n  items:\n  - {node: wk1, egressIP: 172.18.20.50}\n  - {node: wk2, egressIP: 172.18.20.51}\n";
        let node = |name: &str| format!("[node]\nname = \"{name}\"\n");
        let config = load(&node("wk1"), &[(PathBuf::from("e.yaml"), egress.to_string())])
            .unwrap_or_else(|e| panic!("{e}"));
        let network = &config.announce.networks[0];
        assert_eq!(
            (network.name.as_str(), network.egress_ips.clone()),
            ("default", vec![ip("172.18.20.50")])
        );
        let config = load(&node("wk3"), &[(PathBuf::from("e.yaml"), egress.to_string())]).unwrap();
        assert!(config.announce.networks.is_empty(), "{:?}", config.announce.networks);
        let bad = egress.replace("{node: wk2, egressIP: 172.18.20.51}", "{node: wk2}");
        let errors = load(&node("wk1"), &[(PathBuf::from("e.yaml"), bad)]).unwrap_err().0;
        assert_eq!(errors[0].field, "documents[0].status.items[1]");
    }

    /// An EgressIP serves the pods of the namespaces it selects: its addresses join each one's
    /// network — the primary ClusterUserDefinedNetwork that selects the namespace, or the
    /// default network — as OVN-Kubernetes's RouteAdvertisements controller decides; one that
    /// selects no namespace is announced nowhere.
    #[test]
    fn egress_ips_join_the_network_of_the_namespaces_they_serve() {
        let cluster = "apiVersion: v1\nkind: Namespace\nmetadata: {name: shop, labels: {team: shop}}\n---\napiVersion: v1\nkind: Namespace\nmetadata: {name: bank, labels: {team: bank}}\n---\napiVersion: k8s.ovn.org/v1\nkind: ClusterUserDefinedNetwork\nmetadata: {name: blue}\nspec:\n  namespaceSelector: {matchLabels: {team: bank}}\n  network:\n    topology: Layer3\n    layer3:\n      role: Primary\n      subnets: [{cidr: 172.25.0.0/16}]\n";
        let egress = |name: &str, address: &str| {
            format!("---\napiVersion: k8s.ovn.org/v1\nkind: EgressIP\nmetadata: {{name: {name}}}\nspec:\n  egressIPs: [{address}]\n  namespaceSelector: {{matchLabels: {{team: {name}}}}}\nstatus:\n  items:\n  - {{node: wk1, egressIP: {address}}}\n")
        };
        let text = format!(
            "{cluster}{}{}{}",
            egress("shop", "172.18.20.50"),
            egress("bank", "172.18.20.60"),
            egress("nobody", "172.18.20.70")
        );
        let config = load("[node]\nname = \"wk1\"\n", &[(PathBuf::from("e.yaml"), text)])
            .unwrap_or_else(|e| panic!("{e}"));
        let mut held: Vec<(String, Vec<IpAddr>)> = config
            .announce
            .networks
            .iter()
            .map(|n| (n.name.clone(), n.egress_ips.clone()))
            .collect();
        held.sort();
        assert_eq!(
            held,
            vec![
                ("blue".to_string(), vec![ip("172.18.20.60")]),
                ("default".to_string(), vec![ip("172.18.20.50")])
            ]
        );
    }

    /// Upstream's families: a neighbor's own, both with `dualStackAddressFamily: true`; the
    /// deprecated `disableMP` (which the CRDs default to false) changes nothing.
    #[test]
    fn a_neighbor_carries_its_own_family_unless_dual_stack() {
        let peer = |extra: &str| {
            let yaml = format!("apiVersion: metallb.io/v1beta2\nkind: BGPPeer\nmetadata: {{name: p}}\nspec:\n  myASN: 65801\n  peerASN: 65102\n  peerAddress: 10.0.0.1\n{extra}");
            let config =
                load("", &[(PathBuf::from("p.yaml"), yaml)]).unwrap_or_else(|e| panic!("{e}"));
            config.bgp.routers[0].neighbors[0].families.clone()
        };
        let own = vec![AddressFamily::Ipv4Unicast];
        assert_eq!(peer(""), own);
        assert_eq!(peer("  disableMP: false\n  dualStackAddressFamily: false\n"), own);
        assert_eq!(peer("  disableMP: true\n"), own);
        assert_eq!(
            peer("  dualStackAddressFamily: true\n"),
            vec![AddressFamily::Ipv4Unicast, AddressFamily::Ipv6Unicast]
        );
        // frr-k8s's `addressFamilies` (its CRD defaults it to [unicast]); EVPN is refused.
        let frr = |families: &str| {
            let yaml = format!("apiVersion: frrk8s.metallb.io/v1beta1\nkind: FRRConfiguration\nmetadata: {{name: f}}\nspec:\n  bgp:\n    routers:\n    - asn: 65801\n      neighbors:\n      - address: 10.0.0.5\n        asn: 65102\n        addressFamilies: {families}\n");
            load("", &[(PathBuf::from("f.yaml"), yaml)])
        };
        frr("[unicast]").unwrap_or_else(|e| panic!("{e}"));
        let errors = frr("[unicast, evpn]").unwrap_err().0;
        assert_eq!(
            errors[0].field,
            "documents[0].spec.bgp.routers[0].neighbors[0].addressFamilies"
        );
    }

    /// `passwordSecret` of a BGPPeer and of an frr-k8s neighbor takes the key from a Secret of
    /// type `kubernetes.io/basic-auth` in any manifest (here another file), as upstream does;
    /// a missing Secret or one of another type is refused by the reference's field, and no
    /// message shows a key.
    #[test]
    fn password_secret_takes_the_key_from_a_basic_auth_secret() {
        let secret = "apiVersion: v1\nkind: Secret\nmetadata: {name: tor-key, namespace: metallb-system}\ntype: kubernetes.io/basic-auth\ndata:\n  username: dXBsaW5r\n  password: czNjcmV0\n";
        let peer = "apiVersion: metallb.io/v1beta2\nkind: BGPPeer\nmetadata: {name: tor, namespace: metallb-system}\nspec:\n  myASN: 65801\n  peerASN: 65102\n  peerAddress: 10.0.0.1\n  passwordSecret: {name: tor-key, namespace: metallb-system}\n";
        let frr = "apiVersion: frrk8s.metallb.io/v1beta1\nkind: FRRConfiguration\nmetadata: {name: f, namespace: metallb-system}\nspec:\n  bgp:\n    routers:\n    - asn: 65801\n      neighbors:\n      - address: 10.0.0.5\n        asn: 65102\n        passwordSecret: {name: tor-key}\n      - address: 10.0.0.6\n        asn: 65102\n        passwordSecret: {}\n";
        let files = [
            (PathBuf::from("peer.yaml"), format!("{peer}---\n{frr}")),
            (PathBuf::from("secret.yaml"), secret.to_string()),
        ];
        let config = load("", &files).unwrap();
        let keys: Vec<Option<&str>> = config.bgp.routers[0]
            .neighbors
            .iter()
            .map(|n| n.password.as_ref().map(|p| p.expose()))
            .collect();
        assert_eq!(keys, [Some("s3cret"), Some("s3cret"), None]);

        let refused = |yaml: String| {
            let errors = load("", &[(PathBuf::from("peer.yaml"), yaml)]).unwrap_err().0;
            assert!(errors.iter().all(|e| !e.message.contains("s3cret")), "{errors:?}");
            (errors[0].field.clone(), errors[0].message.clone())
        };
        let (field, message) = refused(peer.to_string());
        assert_eq!(field, "documents[0].spec.passwordSecret.name");
        assert!(
            message.contains("Secret \"tor-key\" in namespace metallb-system not found"),
            "{message}"
        );
        let opaque = secret.replace("type: kubernetes.io/basic-auth\n", "type: Opaque\n");
        let (field, message) = refused(format!("{frr}---\n{opaque}"));
        assert_eq!(field, "documents[0].spec.bgp.routers[0].neighbors[0].passwordSecret.name");
        assert!(
            message.contains("is of type Opaque, expected kubernetes.io/basic-auth"),
            "{message}"
        );
        let both = peer.replace("  passwordSecret:", "  password: other\n  passwordSecret:");
        let (field, message) = refused(format!("{both}---\n{secret}"));
        assert_eq!(field, "documents[0].spec.passwordSecret");
        assert!(message.contains("either password or passwordSecret"), "{message}");
        let (field, message) = refused(secret.replace("czNjcmV0", "not*base64"));
        assert_eq!(
            (field.as_str(), message.as_str()),
            ("documents[0].data[password]", "Secret \"tor-key\": is not valid base64")
        );
    }

    #[test]
    fn yaml_and_toml_conflicts_reject_the_config() {
        let toml = "[[bgp.routers]]\nasn = 65999\n[[pools]]\nname = \"vips\"\naddresses = [\"10.0.0.0/24\"]\n";
        let yaml = "apiVersion: metallb.io/v1beta1\nkind: IPAddressPool\nmetadata: {name: vips}\nspec:\n  addresses: [10.9.0.0/24]\n";
        let mut sources = vec![fixture("deck-default-pod-network.yaml")];
        sources.push((PathBuf::from("pool.yaml"), yaml.to_string()));
        let errors = load(toml, &sources).unwrap_err().0;
        let found: Vec<(String, String)> = errors
            .iter()
            .map(|e| (e.file.file_name().unwrap().to_string_lossy().into_owned(), e.field.clone()))
            .collect();
        assert_eq!(
            found,
            vec![
                ("deck-default-pod-network.yaml".to_string(), "bgp.routers[0].asn".to_string()),
                ("pool.yaml".to_string(), "pools[0].name".to_string()),
            ],
            "{errors:?}"
        );
        assert!(
            errors[0].message.contains("asn = 65801 here but asn = 65999 at uplink.toml:2:7"),
            "{}",
            errors[0].message
        );
    }

    #[test]
    fn yaml_syntax_errors_have_a_position() {
        let errors = load("", &[(PathBuf::from("x.yaml"), "kind: [\n".to_string())]).unwrap_err().0;
        assert_eq!(errors[0].field, "documents[0]");
        assert!(
            errors[0].line >= 1 && errors[0].message.starts_with("not valid YAML"),
            "{errors:?}"
        );
    }

    /// A neighbor that leaves its timers out gets MetalLB's and frr-k8s's defaults (FRR's
    /// built-in keepalive 60 s, hold 180 s, connect 120 s); one of hold and keepalive derives the
    /// other as MetalLB does; a TOML neighbor keeps uplink's 90 s / 30 s / 5 s.
    #[test]
    fn manifest_neighbors_get_upstream_timer_defaults() {
        use std::time::Duration;
        let secs = Duration::from_secs;
        let peer = |name: &str, address: &str, timers: &str| {
            format!(
                "apiVersion: metallb.io/v1beta2\nkind: BGPPeer\nmetadata: {{name: {name}}}\nspec:\n  myASN: 65801\n  peerASN: 65102\n  peerAddress: {address}\n{timers}---\n"
            )
        };
        let frr = "apiVersion: frrk8s.metallb.io/v1beta1\nkind: FRRConfiguration\nmetadata: {name: f}\nspec:\n  bgp:\n    routers:\n    - asn: 65801\n      neighbors:\n      - address: 10.0.0.5\n        asn: 65102\n";
        let yaml = [
            peer("plain", "10.0.0.1", ""),
            peer("hold", "10.0.0.2", "  holdTime: 90s\n"),
            peer("keepalive", "10.0.0.3", "  keepaliveTime: 20s\n"),
            peer("both", "10.0.0.4", "  holdTime: 30s\n  keepaliveTime: 10s\n  connectTime: 7s\n"),
            frr.to_string(),
        ]
        .concat();
        let toml = "[[bgp.routers]]\nasn = 65801\n[[bgp.routers.neighbors]]\naddress = \"10.0.0.9\"\nasn = 65102\n";
        let config = load(toml, &[(PathBuf::from("conf.d/peers.yaml"), yaml)])
            .unwrap_or_else(|e| panic!("{e}"));
        let timers = |address: &str| {
            let n = config.bgp.routers[0]
                .neighbors
                .iter()
                .find(|n| n.address == ip(address))
                .unwrap_or_else(|| panic!("no neighbor {address}"));
            (n.hold_time, n.keepalive_time, n.connect_time)
        };
        assert_eq!(timers("10.0.0.9"), (secs(90), secs(30), secs(5)), "TOML: uplink's");
        assert_eq!(timers("10.0.0.1"), (secs(180), secs(60), secs(120)), "BGPPeer: upstream's");
        assert_eq!(timers("10.0.0.5"), (secs(180), secs(60), secs(120)), "FRRConfiguration");
        assert_eq!(timers("10.0.0.2"), (secs(90), secs(30), secs(120)), "keepalive = hold / 3");
        assert_eq!(timers("10.0.0.3"), (secs(60), secs(20), secs(120)), "hold = 3 × keepalive");
        assert_eq!(timers("10.0.0.4"), (secs(30), secs(10), secs(7)), "as written");
    }

    /// The timers are `metav1.Duration`s: whatever Go's `time.ParseDuration` takes, the
    /// apiserver stores, so uplink reads them the same way ("1.5m", "90000ms", units in any
    /// order); what Go refuses is refused with the manifest's field name.
    #[test]
    fn manifest_timers_are_go_durations() {
        use std::time::Duration;
        let peer = |timers: &str| {
            format!(
                "apiVersion: metallb.io/v1beta2\nkind: BGPPeer\nmetadata: {{name: p}}\nspec:\n  myASN: 65801\n  peerASN: 65102\n  peerAddress: 10.0.0.1\n{timers}"
            )
        };
        let yaml = peer("  holdTime: 1.5m\n  keepaliveTime: 30000ms\n  connectTime: 1s1m\n");
        let config = load("", &[(PathBuf::from("conf.d/peer.yaml"), yaml)])
            .unwrap_or_else(|e| panic!("{e}"));
        let n = &config.bgp.routers[0].neighbors[0];
        assert_eq!(
            (n.hold_time, n.keepalive_time, n.connect_time),
            (Duration::from_secs(90), Duration::from_secs(30), Duration::from_secs(61))
        );
        for (timers, says) in [
            ("  holdTime: 1.2.3s\n", "holdTime: \"1.2.3s\" is not a duration"),
            ("  connectTime: 1500us\n", "connectTime: \"1500us\" is finer than a millisecond"),
            ("  keepaliveTime: -10s\n", "keepaliveTime: \"-10s\": a negative duration"),
        ] {
            let errors =
                load("", &[(PathBuf::from("conf.d/peer.yaml"), peer(timers))]).expect_err(timers);
            assert!(errors.to_string().contains(says), "{timers}: {errors}");
        }
    }

    /// The same neighbor in a TOML file and a manifest, timers left out in both: the defaults
    /// differ, and the error says so instead of pointing at a value nobody wrote.
    #[test]
    fn a_neighbor_in_toml_and_a_manifest_with_different_default_timers_is_explained() {
        let toml = "[[bgp.routers]]\nasn = 65801\n[[bgp.routers.neighbors]]\naddress = \"10.0.0.1\"\nasn = 65102\nto_receive = { allowed = { mode = \"all\" } }\n";
        let yaml = "apiVersion: metallb.io/v1beta2\nkind: BGPPeer\nmetadata: {name: p}\nspec:\n  myASN: 65801\n  peerASN: 65102\n  peerAddress: 10.0.0.1\n  disableMP: true\n";
        let errors = load(toml, &[(PathBuf::from("conf.d/peer.yaml"), yaml.to_string())])
            .expect_err("the defaults differ");
        let text = errors.to_string();
        assert!(text.contains("hold_time") || text.contains("holdTime"), "{text}");
        assert!(text.contains("neither file sets it"), "{text}");
        // Written the same in both, they merge.
        let yaml = yaml
            .replace("disableMP: true\n", "disableMP: true\n  holdTime: 90s\n  connectTime: 5s\n");
        load(toml, &[(PathBuf::from("conf.d/peer.yaml"), yaml)]).unwrap_or_else(|e| panic!("{e}"));
    }

    /// Found by the manifests fuzz target: YAML takes a lone `\r` for a line break, so its
    /// error pointed at line 70 of a 46-line file. Such files are refused where the first one
    /// is, in the lines an editor shows; CRLF files load.
    #[test]
    fn line_breaks_that_yaml_and_editors_count_differently_are_refused() {
        let peer = "apiVersion: metallb.io/v1beta2\nkind: BGPPeer\nmetadata: {name: p}\nspec:\n  myASN: 65801\n  peerASN: 65102\n  peerAddress: 10.0.0.1\n  holdTime: 90s\n";
        let crlf = peer.replace('\n', "\r\n");
        load("", &[(PathBuf::from("crlf.yaml"), crlf)]).unwrap_or_else(|e| panic!("{e}"));
        let old_mac = peer.replacen("kind: BGPPeer\n", "kind: BGPPeer\r", 1);
        let errors = load("", &[(PathBuf::from("cr.yaml"), old_mac)]).unwrap_err().0;
        assert_eq!(errors.len(), 1, "{errors:?}");
        let error = &errors[0];
        assert_eq!((error.file.as_path(), error.line, error.column), (Path::new("cr.yaml"), 2, 14));
        assert!(
            error.message.starts_with("a carriage return without a newline"),
            "{}",
            error.message
        );
        let separator = peer.replace("name: p}", "name: p}\u{2028}");
        let errors = load("", &[(PathBuf::from("ls.yaml"), separator)]).unwrap_err().0;
        assert_eq!((errors[0].line, errors[0].column), (3, 20), "{errors:?}");
    }

    /// Found by the manifests fuzz target: the positions a translated document left in its
    /// fragment were offsets into the TOML made from it, so the merge named columns the YAML
    /// does not have and, with a line break in a string, a line past the end of the file.
    /// Every position is now the document's start.
    #[test]
    fn merge_errors_point_at_the_documents_they_are_about() {
        let pool = |addresses: &str| {
            format!(
                "apiVersion: metallb.io/v1beta1\nkind: IPAddressPool\nmetadata:\n  name: vips\n  \
                 namespace: metallb-system\nspec:\n  addresses: {addresses}\n"
            )
        };
        let first = pool(r#"["192.0.2.0/28"]"#);
        let second = format!(
            "# the same pool, other addresses\n{}",
            pool(r#"["192.0.2.16/28", "a\nb\nc"]"#)
        );
        let errors = load(
            "",
            &[(PathBuf::from("conf.d/a.yaml"), first), (PathBuf::from("conf.d/b.yaml"), second)],
        )
        .unwrap_err()
        .0;
        let merge = errors
            .iter()
            .find(|e| e.message.contains("also defined at"))
            .unwrap_or_else(|| panic!("no merge error: {errors:?}"));
        assert_eq!(
            (merge.file.as_path(), merge.line, merge.column),
            (Path::new("conf.d/b.yaml"), 2, 1)
        );
        assert!(merge.message.contains("also defined at conf.d/a.yaml:1:1 "), "{}", merge.message);
        for error in &errors {
            assert_eq!((error.line, error.column), (2, 1), "{error}");
        }
    }
}
