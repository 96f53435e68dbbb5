//! Kubernetes `Service` (`v1`) and `EndpointSlice` (`discovery.k8s.io/v1`) as MetalLB's speaker
//! reads them: a Service of `type: LoadBalancer` becomes a `[[services]]` entry whose endpoints
//! are the ready endpoints of the EndpointSlices labelled `kubernetes.io/service-name` with its
//! name, in its namespace — from any manifest of the config or from the API. The
//! entry says `announce_without_endpoints = false`: a Service with no ready endpoint is not
//! announced, as MetalLB does, where a TOML `[[services]]` without endpoints is plain anycast.
//!
//! What a Service's spec holds beyond what decides the announcement (ports, selector, cluster
//! IPs, session affinity, ...) is Kubernetes' business and accepted as it is. A Service of
//! another type, or of another `loadBalancerClass` than `[kubernetes] load_balancer_class`
//! (none: only Services without a class), is skipped as MetalLB skips it.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::net::IpAddr;
use std::sync::Arc;

use serde_norway::{Mapping, Value};

use super::super::validate::Fragment;
use super::{labels_value, list, Context, Document, Meta};
use crate::config::announce::{Endpoint, Endpoints};

/// `metallb.io/address-pool`: the pool to allocate from.
const ADDRESS_POOL: &str = "metallb.io/address-pool";
/// `metallb.io/loadBalancerIPs`: the requested addresses, comma-separated, one per family.
const LOAD_BALANCER_IPS: &str = "metallb.io/loadBalancerIPs";
/// `metallb.io/allow-shared-ip`: a sharing key for two Services on one address.
const ALLOW_SHARED_IP: &str = "metallb.io/allow-shared-ip";
/// The label that ties an EndpointSlice to its Service.
const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";

/// `ServiceSpec` fields (Kubernetes 1.37) that do not change what is announced.
const IGNORED_SPEC_FIELDS: [&str; 14] = [
    "ports",
    "selector",
    "clusterIP",
    "clusterIPs",
    "externalIPs",
    "externalName",
    "sessionAffinity",
    "sessionAffinityConfig",
    "loadBalancerSourceRanges",
    "healthCheckNodePort",
    "publishNotReadyAddresses",
    "allocateLoadBalancerNodePorts",
    "internalTrafficPolicy",
    "trafficDistribution",
];

/// The ready endpoints of every EndpointSlice in the config, by namespace and service name:
/// nested, so the Services' lookups (one per Service and reload) make no key. A Service with
/// one slice (nearly all) shares that slice's list, and its Service shares it too (see
/// [`share_endpoints`]): one copy of the endpoints where there were three.
/// The ready endpoints of each Service, by namespace and name. A Service's name is its
/// slice's copy, which the translation's question about its endpoints shares too
/// ([`EndpointIndex::name`]): one copy of the name where there were three per Service.
#[derive(Debug, Default)]
pub(crate) struct EndpointIndex(BTreeMap<String, BTreeMap<Arc<str>, Endpoints>>);

impl EndpointIndex {
    /// Collects the slices read from the documents (see [`super::Facts`]); malformed ones were
    /// left out there and are reported where their document is translated.
    pub fn of<'a>(slices: impl Iterator<Item = &'a Slice>) -> Self {
        let mut gathered: BTreeMap<(&str, &str), Gathered<'_>> = BTreeMap::new();
        for slice in slices {
            gathered.entry(slice.service()).or_default().add(slice);
        }
        let mut index = Self::default();
        for ((namespace, _), gathered) in gathered {
            index.update(namespace, gathered);
        }
        index
    }

    /// Sets the entry of (namespace, its name) to what `gathered` found, if it found any.
    fn update(&mut self, namespace: &str, gathered: Gathered<'_>) {
        if let (Some(name), Some(endpoints)) = (gathered.name, combined(&gathered.parts)) {
            self.set(namespace, name, endpoints);
        }
    }

    /// Sets the entry of (namespace, `name`); a new entry keeps `name` itself.
    fn set(&mut self, namespace: &str, name: &Arc<str>, endpoints: Endpoints) {
        let services = match self.0.get_mut(namespace) {
            Some(services) => services,
            None => self.0.entry(namespace.to_string()).or_default(),
        };
        match services.get_mut(&**name) {
            Some(entry) => *entry = endpoints,
            None => {
                services.insert(Arc::clone(name), endpoints);
            }
        }
    }

    /// A Service's entry: the index's copy of its name, to share, and its list.
    pub(super) fn entry(&self, namespace: &str, service: &str) -> Option<(&Arc<str>, &Endpoints)> {
        self.0.get(namespace)?.get_key_value(service)
    }

    pub(super) fn endpoints(&self, namespace: &str, service: &str) -> &[Endpoint] {
        self.entry(namespace, service).map_or(&[], |(_, endpoints)| endpoints)
    }

    /// Makes the entries of the `touched` Services (namespace, name) again from `slices`
    /// (every slice of the load, in one pass): what [`EndpointIndex::of`] would make for them,
    /// without making the others again. The Services whose entry changed.
    pub fn remake<'a>(
        &mut self,
        touched: &HashSet<(String, String), foldhash::fast::RandomState>,
        slices: impl Iterator<Item = &'a Slice>,
    ) -> Vec<(String, String)> {
        let mut gathered: Vec<((&str, &str), Gathered<'_>)> =
            touched.iter().map(|(n, s)| ((n.as_str(), s.as_str()), Gathered::default())).collect();
        // Every slice of the load is looked up: with the one or two Services an event touches,
        // compared with them rather than hashed (1.5% of the daemon's work over the
        // benchmark's events at 10,000 slices).
        let places: Option<HashMap<(&str, &str), usize, foldhash::fast::RandomState>> =
            (gathered.len() > FEW_TOUCHED)
                .then(|| gathered.iter().enumerate().map(|(at, (key, _))| (*key, at)).collect());
        for slice in slices {
            let service = slice.service();
            let place = match &places {
                Some(places) => places.get(&service).copied(),
                None => gathered.iter().position(|(key, _)| *key == service),
            };
            if let Some((_, found)) = place.and_then(|at| gathered.get_mut(at)) {
                found.add(slice);
            }
        }
        let mut changed = Vec::new();
        for ((namespace, service), found) in gathered {
            let endpoints = combined(&found.parts);
            if self.endpoints(namespace, service) == endpoints.as_deref().unwrap_or_default() {
                continue;
            }
            changed.push((namespace.to_string(), service.to_string()));
            match endpoints {
                None => {
                    if let Some(services) = self.0.get_mut(namespace) {
                        services.remove(service);
                        if services.is_empty() {
                            self.0.remove(namespace);
                        }
                    }
                }
                // A Service with endpoints has a slice, which names it.
                Some(endpoints) => {
                    if let Some(name) = found.name {
                        self.set(namespace, name, endpoints);
                    }
                }
            }
        }
        changed
    }
}

/// One Service's slices, as an index gathers them: their endpoints, and the name of the
/// first (each slice names its Service).
#[derive(Default)]
struct Gathered<'a> {
    name: Option<&'a Arc<str>>,
    parts: Vec<&'a Endpoints>,
}

impl<'a> Gathered<'a> {
    fn add(&mut self, slice: &'a Slice) {
        self.name.get_or_insert(&slice.service);
        self.parts.push(&slice.endpoints);
    }
}

/// A Service's endpoints from its slices' (each sorted, without repeats): the one slice's list
/// itself, or the lists merged; `None` when there are none.
fn combined(parts: &[&Endpoints]) -> Option<Endpoints> {
    match parts {
        [] => None,
        [one] if one.is_empty() => None,
        [one] => Some(Arc::clone(one)),
        several => {
            let mut endpoints: Vec<Endpoint> =
                several.iter().flat_map(|part| part.iter().cloned()).collect();
            endpoints.sort();
            endpoints.dedup();
            (!endpoints.is_empty()).then(|| endpoints.into())
        }
    }
}

/// Gives the Services of `fragment` (one Service's translation) the index's list of their
/// endpoints, where they listed the same: the endpoints went through the parser as any
/// manifest's, and the copy it made is let go.
fn share_endpoints(fragment: &mut Fragment, shared: &Endpoints) {
    for placed in &mut fragment.announce.services {
        if let Some(service) = Arc::get_mut(&mut placed.item) {
            if service.endpoints == *shared {
                service.endpoints = Arc::clone(shared);
            }
        }
    }
}

/// Up to this many Services touched, [`EndpointIndex::remake`] finds a slice's by comparing.
const FEW_TOUCHED: usize = 4;

/// One EndpointSlice's ready endpoints.
#[derive(Debug)]
pub(crate) struct Slice {
    /// Shared with the namespace's other objects: a cluster has tens of thousands of slices
    /// and a few namespaces.
    namespace: Arc<str>,
    /// Shared with the index and with the question about the Service's endpoints.
    service: Arc<str>,
    /// Sorted, without repeats: what the index keeps for a Service with this slice alone.
    endpoints: Endpoints,
}

impl Slice {
    /// The Service it belongs to: (namespace, name).
    pub fn service(&self) -> (&str, &str) {
        (&self.namespace, &self.service)
    }
}

/// An EndpointSlice document (`kind` already known), or the field that is wrong and why.
pub(super) fn read_slice(top: &Mapping) -> Result<Slice, (String, String)> {
    let metadata = top.get("metadata").and_then(Value::as_mapping);
    let namespace = crate::config::shared::name(
        metadata.and_then(|m| m.get("namespace")).and_then(Value::as_str).unwrap_or("default"),
    );
    let Some(service) = metadata
        .and_then(|m| m.get("labels"))
        .and_then(|labels| labels.get(SERVICE_NAME_LABEL))
        .and_then(Value::as_str)
    else {
        return Err((
            "metadata.labels".into(),
            format!("missing `{SERVICE_NAME_LABEL}`: it names the Service the slice belongs to"),
        ));
    };
    let family = match top.get("addressType").and_then(Value::as_str) {
        Some("IPv4") => Some(true),
        Some("IPv6") => Some(false),
        // FQDN endpoints have no address to announce for.
        Some("FQDN") => None,
        other => {
            return Err((
                "addressType".into(),
                format!("{other:?} is not an address type; valid: IPv4, IPv6, FQDN"),
            ))
        }
    };
    let listed = match top.get("endpoints") {
        None | Some(Value::Null) => &[][..],
        Some(Value::Sequence(list)) => list.as_slice(),
        Some(_) => return Err(("endpoints".into(), "must be a list".into())),
    };
    let mut endpoints = Vec::with_capacity(listed.len());
    for (i, endpoint) in listed.iter().enumerate() {
        let field = format!("endpoints[{i}]");
        let Value::Mapping(endpoint) = endpoint else {
            return Err((field, "must be a mapping with addresses".into()));
        };
        let Some(Value::Sequence(addresses)) = endpoint.get("addresses") else {
            return Err((format!("{field}.addresses"), "missing; a list of addresses".into()));
        };
        let Some(is_v4) = family else { continue };
        if !can_serve(endpoint.get("conditions")) {
            continue;
        }
        // Empty when not known, as a `[[services]]` endpoint without `node`.
        let node = crate::config::shared::NodeName::new(
            endpoint.get("nodeName").and_then(Value::as_str).unwrap_or_default(),
        );
        for (j, address) in addresses.iter().enumerate() {
            let parsed = address.as_str().and_then(|a| a.parse::<IpAddr>().ok());
            match parsed {
                Some(address) if address.is_ipv4() == is_v4 => {
                    endpoints.push(Endpoint { address, node: node.clone() })
                }
                _ => {
                    return Err((
                        format!("{field}.addresses[{j}]"),
                        format!(
                            "{address:?} is not an {} address",
                            if is_v4 { "IPv4" } else { "IPv6" }
                        ),
                    ))
                }
            }
        }
    }
    endpoints.sort();
    endpoints.dedup();
    Ok(Slice { namespace, service: service.into(), endpoints: endpoints.into() })
}

/// MetalLB's `EndpointCanServe`: `ready` unset (unknown counts as ready, as the API says) or
/// true, or `serving` true (a terminating endpoint that still serves).
fn can_serve(conditions: Option<&Value>) -> bool {
    let condition = |name: &str| conditions.and_then(|c| c.get(name)).and_then(Value::as_bool);
    condition("ready").is_none_or(|ready| ready) || condition("serving") == Some(true)
}

impl Document<'_> {
    /// An EndpointSlice: checked here, used by the Service it names (see [`EndpointIndex`]).
    pub(super) fn endpoint_slice(&mut self, top: &Mapping) -> Option<Fragment> {
        if let Err((field, message)) = read_slice(top) {
            self.fail(&field, message);
        }
        None
    }

    pub(super) fn service(
        &mut self,
        mut spec: Mapping,
        status: Option<&Value>,
        meta: Meta,
        context: &Context<'_>,
    ) -> Option<Fragment> {
        let service_type = spec.remove("type");
        if service_type.as_ref().and_then(Value::as_str) != Some("LoadBalancer") {
            return None;
        }
        // MetalLB's `--lb-class`: the Services of the configured class, or without a class.
        let class = spec.remove("loadBalancerClass");
        if class.as_ref().and_then(Value::as_str) != context.load_balancer_class() {
            return None;
        }
        for field in IGNORED_SPEC_FIELDS {
            spec.remove(field);
        }
        let namespace = meta.namespace.clone().unwrap_or_else(|| "default".to_string());
        let mut entry = Mapping::new();
        entry.insert(Value::from("name"), Value::from(meta.name.as_str()));
        entry.insert(Value::from("namespace"), Value::from(namespace.as_str()));
        entry.insert(Value::from("labels"), labels_value(&meta.labels));
        if let Some(labels) = context.namespace_labels(&namespace) {
            entry.insert(Value::from("namespace_labels"), labels_value(labels));
        }
        if meta.annotations.contains_key(ALLOW_SHARED_IP) {
            self.fail(
                &format!("metadata.annotations[{ALLOW_SHARED_IP}]"),
                "sharing an address between Services is not supported yet; give each Service \
                 its own address",
            );
            return None;
        }
        if let Some(pool) = meta.annotations.get(ADDRESS_POOL) {
            entry.insert(Value::from("address_pool"), Value::from(pool.as_str()));
        }
        if let Some(ips) = meta.annotations.get(LOAD_BALANCER_IPS) {
            let ips = ips.split(',').map(|ip| Value::from(ip.trim())).collect();
            entry.insert(Value::from("load_balancer_ips"), Value::Sequence(ips));
        }
        let held = held_ips(status);
        if !held.is_empty() {
            entry.insert(Value::from("held_ips"), Value::Sequence(held));
        }
        for (from, to) in [
            ("loadBalancerIP", "load_balancer_ip"),
            ("ipFamilyPolicy", "ip_family_policy"),
            ("ipFamilies", "ip_families"),
            ("externalTrafficPolicy", "traffic_policy"),
        ] {
            if let Some(value) = spec.remove(from).filter(|v| !v.is_null()) {
                entry.insert(Value::from(to), value);
            }
        }
        if let Some((key, _)) = spec.iter().next() {
            let key = key.as_str().unwrap_or("?").to_string();
            self.fail(&format!("spec.{key}"), format!("unknown field `{key}` of a Service"));
            return None;
        }
        let endpoints = context.endpoints(&namespace, &meta.name);
        let listed: Vec<Value> = endpoints
            .map_or(&[][..], |endpoints| endpoints)
            .iter()
            .map(|endpoint| {
                let mut map = Mapping::new();
                map.insert(Value::from("address"), Value::from(endpoint.address.to_string()));
                if !endpoint.node.is_empty() {
                    map.insert(Value::from("node"), Value::from(&*endpoint.node));
                }
                Value::Mapping(map)
            })
            .collect();
        entry.insert(Value::from("endpoints"), Value::Sequence(listed));
        entry.insert(Value::from("announce_without_endpoints"), Value::Bool(false));
        let mut fragment = self.emit_with("services", list(Value::Mapping(entry)), service_field);
        if let (Some(fragment), Some(endpoints)) = (&mut fragment, endpoints) {
            share_endpoints(fragment, endpoints);
        }
        fragment
    }
}

/// The addresses of `status.loadBalancer.ingress`, which the Service keeps while they stay
/// valid (MetalLB: "the assigned LB IP is the end state of convergence"). What a controller
/// wrote there is not the user's ask: an entry without an address (a `hostname`) or with one
/// that does not parse is passed over, never a reason to refuse the Service.
fn held_ips(status: Option<&Value>) -> Vec<Value> {
    let ingress = status
        .and_then(|s| s.get("loadBalancer"))
        .and_then(|lb| lb.get("ingress"))
        .and_then(Value::as_sequence);
    ingress
        .into_iter()
        .flatten()
        .filter_map(|entry| entry.get("ip").and_then(Value::as_str))
        .filter(|ip| ip.parse::<IpAddr>().is_ok())
        .map(Value::from)
        .collect()
}

/// A `[[services]]` field path as the Service manifest spells it, for error messages.
fn service_field(field: &str) -> String {
    let rest = field.strip_prefix("services[0]").unwrap_or(field);
    let rest = rest.strip_prefix('.').unwrap_or(rest);
    let (head, tail) = match rest.find(['.', '[']) {
        Some(at) => rest.split_at(at),
        None => (rest, ""),
    };
    let mapped = match head {
        "name" => "metadata.name".to_string(),
        "namespace" => "metadata.namespace".to_string(),
        "labels" => "metadata.labels".to_string(),
        "address_pool" => format!("metadata.annotations[{ADDRESS_POOL}]"),
        "load_balancer_ips" => format!("metadata.annotations[{LOAD_BALANCER_IPS}]"),
        "load_balancer_ip" => "spec.loadBalancerIP".to_string(),
        "held_ips" => "status.loadBalancer.ingress".to_string(),
        "ip_family_policy" => "spec.ipFamilyPolicy".to_string(),
        "ip_families" => "spec.ipFamilies".to_string(),
        "traffic_policy" => "spec.externalTrafficPolicy".to_string(),
        "endpoints" => "EndpointSlice endpoints".to_string(),
        "" => "spec".to_string(),
        other => format!("spec.{other}"),
    };
    format!("{mapped}{tail}")
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;
    use crate::config::announce::{Endpoint, IpFamily, TrafficPolicy};
    use crate::config::{load_sources, Config, ConfigErrors};

    const MAIN: &str = "[node]\nname = \"wk1\"\n[[bgp.routers]]\nasn = 65801\n";

    fn load(files: &[(&str, &str)]) -> Result<Config, ConfigErrors> {
        let mut sources = vec![(PathBuf::from("uplink.toml"), MAIN.to_string())];
        sources.extend(files.iter().map(|(name, text)| (PathBuf::from(name), text.to_string())));
        load_sources(&sources)
    }

    /// A Service as `kubectl get -o yaml` shows it: server-set metadata and status included.
    const WEB: &str = r#"
apiVersion: v1
kind: Service
metadata:
  name: web
  namespace: shop
  uid: 6c1f2b9e-0d6e-4a43-9a55-1f0c4f3e2a11
  resourceVersion: "4711"
  creationTimestamp: "2026-12-01T10:00:00Z"
  labels: {app: web}
  annotations:
    metallb.io/address-pool: vips
    metallb.io/loadBalancerIPs: "192.0.2.7"
    kubectl.kubernetes.io/last-applied-configuration: "{}"
spec:
  type: LoadBalancer
  selector: {app: web}
  ports: [{port: 80, targetPort: 8080, protocol: TCP}]
  clusterIP: 10.96.4.5
  clusterIPs: [10.96.4.5]
  ipFamilies: [IPv4]
  ipFamilyPolicy: SingleStack
  externalTrafficPolicy: Local
  internalTrafficPolicy: Cluster
  sessionAffinity: None
  allocateLoadBalancerNodePorts: true
status:
  loadBalancer:
    ingress: [{ip: 192.0.2.7, ipMode: VIP}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: web-abcde
  namespace: shop
  labels: {kubernetes.io/service-name: web}
addressType: IPv4
endpoints:
- addresses: [10.128.1.5]
  conditions: {ready: true}
  nodeName: wk1
- addresses: [10.128.2.5]
  conditions: {ready: false, serving: false}
  nodeName: wk2
ports: [{port: 8080, protocol: TCP}]
"#;

    /// A second slice of the same Service, in another file; and a slice of another namespace.
    const MORE: &str = r#"
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: web-fghij
  namespace: shop
  labels: {kubernetes.io/service-name: web}
addressType: IPv4
endpoints:
- addresses: [10.128.3.5]
  nodeName: wk3
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: web-klmno
  namespace: other
  labels: {kubernetes.io/service-name: web}
addressType: IPv4
endpoints:
- addresses: [10.128.4.5]
  nodeName: wk1
"#;

    const POOL: &str = "[[pools]]\nname = \"vips\"\naddresses = [\"192.0.2.0/28\"]\n";

    /// The index keeps a Service's name as its first slice has it, when the entry is made
    /// (by `of` or by `remake`), and hands out that one copy.
    #[test]
    fn the_index_keeps_its_slices_copy_of_a_name() {
        let slice = |service: &str, address: &str| {
            let text = format!("apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata:\n  name: {service}-{address}\n  namespace: shop\n  labels: {{kubernetes.io/service-name: {service}}}\naddressType: IPv4\nendpoints:\n- addresses: [{address}]\n  nodeName: wk1\n");
            let top: Mapping = serde_norway::from_str(&text).unwrap();
            read_slice(&top).unwrap()
        };
        let touched = |service: &str| {
            let mut set: HashSet<(String, String), foldhash::fast::RandomState> =
                HashSet::default();
            set.insert(("shop".to_string(), service.to_string()));
            set
        };
        let (web, web_2, db) =
            (slice("web", "10.128.1.5"), slice("web", "10.128.2.5"), slice("db", "10.128.3.5"));
        let mut index = EndpointIndex::of([&web, &web_2, &db].into_iter());
        assert!(Arc::ptr_eq(index.entry("shop", "web").unwrap().0, &web.service));
        assert_eq!(index.endpoints("shop", "web").len(), 2);
        // db's slice changes: its entry is made again, under the name it had.
        let db_again = slice("db", "10.128.3.6");
        let changed = index.remake(&touched("db"), [&web, &web_2, &db_again].into_iter());
        assert_eq!(changed, [("shop".to_string(), "db".to_string())]);
        assert!(Arc::ptr_eq(index.entry("shop", "db").unwrap().0, &db.service));
        assert_eq!(index.endpoints("shop", "db"), &*db_again.endpoints);
        // A new Service's entry takes its slice's name; one without a slice has none.
        let api = slice("api", "10.128.4.5");
        index.remake(&touched("api"), [&web, &web_2, &db_again, &api].into_iter());
        assert!(Arc::ptr_eq(index.entry("shop", "api").unwrap().0, &api.service));
        index.remake(&touched("api"), [&web, &web_2, &db_again].into_iter());
        assert!(index.entry("shop", "api").is_none());
    }

    /// The status's addresses are what the Service holds; a `hostname` entry or an address
    /// that does not parse (another controller's writing, not the user's ask) is passed over
    /// and refuses nothing.
    #[test]
    fn a_services_status_addresses_are_held_and_nothing_else_of_the_status_is_read() {
        let service = "apiVersion: v1\nkind: Service\nmetadata: {name: web, namespace: shop}\nspec: {type: LoadBalancer}\nstatus:\n  loadBalancer:\n    ingress:\n    - {ip: 192.0.2.9, ipMode: VIP}\n    - {hostname: lb.example.com}\n    - {ip: not-an-address}\n    - {ip: \"2001:db8::9\"}\n  conditions: [{type: Ready, status: \"True\"}]\n";
        let config =
            load(&[("pool.toml", POOL), ("web.yaml", service)]).unwrap_or_else(|e| panic!("{e}"));
        let [service] = config.announce.services.as_slice() else {
            panic!("{:?}", config.announce.services)
        };
        let want: Vec<IpAddr> =
            ["192.0.2.9", "2001:db8::9"].iter().map(|a| a.parse().unwrap()).collect();
        assert_eq!(service.held_ips.to_vec(), want);
    }

    #[test]
    fn a_service_takes_the_ready_endpoints_of_its_slices_from_any_file() {
        let config = load(&[("pool.toml", POOL), ("10-web.yaml", WEB), ("20-slices.yaml", MORE)])
            .unwrap_or_else(|e| panic!("{e}"));
        let [service] = config.announce.services.as_slice() else {
            panic!("{:?}", config.announce.services)
        };
        assert_eq!((service.namespace(), service.name()), ("shop", "web"));
        assert_eq!(service.address_pool.as_deref(), Some("vips"));
        assert_eq!(
            service.load_balancer_ips.to_vec(),
            vec!["192.0.2.7".parse::<IpAddr>().unwrap()]
        );
        assert_eq!(service.held_ips.to_vec(), vec!["192.0.2.7".parse::<IpAddr>().unwrap()]);
        assert_eq!(service.ip_families.to_vec(), vec![IpFamily::Ipv4]);
        assert_eq!(service.traffic_policy, TrafficPolicy::Local);
        assert!(!service.announce_without_endpoints);
        let endpoint = |address: &str, node: &str| Endpoint {
            address: address.parse().unwrap(),
            node: node.into(),
        };
        assert_eq!(
            *service.endpoints,
            [endpoint("10.128.1.5", "wk1"), endpoint("10.128.3.5", "wk3")]
        );
    }

    /// A Service with one slice keeps the slice's list of endpoints, as the index does: one
    /// copy where a cluster's size made three, a fifth of a kilobyte each. With two slices,
    /// the Service keeps the index's merged list.
    #[test]
    fn a_services_endpoints_are_its_slices_list_not_a_copy() {
        let count_with = |files: &[(&str, &str)]| {
            let sources: Vec<crate::config::Source> = [("uplink.toml", MAIN), ("pool.toml", POOL)]
                .iter()
                .chain(files)
                .map(|(name, text)| (Arc::from(std::path::Path::new(name)), Arc::from(*text)))
                .collect();
            let sources: Vec<&crate::config::Source> = sources.iter().collect();
            // Kept, as the daemon keeps it: the slices' facts and the index live in it.
            let mut cache = crate::config::ManifestCache::default();
            let config = crate::config::load_sources_kept(&sources, &mut cache)
                .unwrap_or_else(|e| panic!("{e}"));
            let [service] = config.announce.services.as_slice() else {
                panic!("{:?}", config.announce.services)
            };
            (service.endpoints.len(), Arc::strong_count(&service.endpoints))
        };
        // The slice's facts, the index and the Service.
        assert_eq!(count_with(&[("10-web.yaml", WEB)]), (1, 3));
        // The index and the Service.
        assert_eq!(count_with(&[("10-web.yaml", WEB), ("20-slices.yaml", MORE)]), (2, 2));
    }

    /// What the Kubernetes source hands over: objects named `kubernetes:Kind/ns/name`, this
    /// node's `Node` among them. One object the config refuses is left out, the rest applies.
    #[test]
    fn objects_from_the_api_load_beside_the_files_and_a_bad_one_is_left_out() {
        let dir = tempfile::tempdir().unwrap();
        let main = dir.path().join("uplink.toml");
        std::fs::write(&main, format!("{MAIN}{POOL}")).unwrap();
        let object = |name: &str, text: &str| (std::path::Path::new(name).into(), text.into());
        let node = "apiVersion: v1\nkind: Node\nmetadata:\n  name: wk1\n  labels: {rack: r7}\nspec: {podCIDR: 10.128.1.0/24}\n";
        let other_node =
            "apiVersion: v1\nkind: Node\nmetadata:\n  name: wk2\n  labels: {rack: r9}\n";
        let bad = "apiVersion: v1\nkind: Service\nmetadata:\n  name: bad\n  namespace: shop\nspec:\n  type: LoadBalancer\n  loadBalancerIP: 203.0.113.300\n";
        let objects = crate::config::ApiObjects::new(vec![
            object("kubernetes:Node/wk1", node),
            object("kubernetes:Node/wk2", other_node),
            object("kubernetes:Service/shop/bad", bad),
            object("kubernetes:Service/shop/web", WEB.split("---").next().unwrap()),
        ]);
        let (loaded, refused) =
            crate::config::load_with_api(&main, &objects, &mut Default::default());
        let config = loaded.unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(config.announce.node.labels.get("rack").map(String::as_str), Some("r7"));
        assert!(!config.announce.node.network_unavailable);
        let names: Vec<&str> = config.announce.services.iter().map(|s| s.name()).collect();
        assert_eq!(names, ["web"]);
        // This node's network unavailable (the other's does not count): nothing announced.
        let unavailable = format!(
            "{node}status:\n  conditions:\n  - {{type: NetworkUnavailable, status: \"True\"}}\n"
        );
        let other_unavailable = format!(
            "{other_node}status:\n  conditions:\n  - {{type: NetworkUnavailable, status: \"True\"}}\n"
        );
        for (this, other, expected) in
            [(unavailable.as_str(), other_node, true), (node, other_unavailable.as_str(), false)]
        {
            let objects = crate::config::ApiObjects::new(vec![
                object("kubernetes:Node/wk1", this),
                object("kubernetes:Node/wk2", other),
            ]);
            let (loaded, _) =
                crate::config::load_with_api(&main, &objects, &mut Default::default());
            let config = loaded.unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(config.announce.node.network_unavailable, expected, "{this}");
        }
        assert_eq!(refused.len(), 1, "{refused:?}");
        assert_eq!(refused[0].file, PathBuf::from("kubernetes:Service/shop/bad"));
        assert_eq!(refused[0].field, "documents[0].spec.loadBalancerIP");
        // A mistake in a file still refuses the whole.
        std::fs::write(&main, format!("{MAIN}{POOL}bogus = 1\n")).unwrap();
        let (loaded, _) = crate::config::load_with_api(&main, &objects, &mut Default::default());
        assert!(loaded.is_err());
    }

    #[test]
    fn services_of_other_types_or_classes_are_skipped() {
        let other = |spec: &str| {
            format!("apiVersion: v1\nkind: Service\nmetadata: {{name: a}}\nspec: {spec}\n")
        };
        for spec in [
            "{type: ClusterIP, ports: [{port: 80}]}",
            "{type: NodePort}",
            "{type: LoadBalancer, loadBalancerClass: example.com/other}",
        ] {
            let config = load(&[("a.yaml", &other(spec))]).unwrap_or_else(|e| panic!("{e}"));
            assert!(config.announce.services.is_empty(), "{spec}");
        }
    }

    /// A pool's `namespaceSelectors` match the labels of the Service's `Namespace` object,
    /// as MetalLB's controller reads them (the apiserver's `kubernetes.io/metadata.name`
    /// included); a Service in a namespace the config has no object for matches none.
    #[test]
    fn namespace_labels_choose_the_pool() {
        let pools = "apiVersion: metallb.io/v1beta1\nkind: IPAddressPool\nmetadata: {name: gold}\nspec:\n  addresses: [198.51.100.0/28]\n  serviceAllocation:\n    namespaceSelectors:\n    - matchLabels: {tier: gold}\n---\napiVersion: metallb.io/v1beta1\nkind: IPAddressPool\nmetadata: {name: plain}\nspec:\n  addresses: [192.0.2.0/28]\n";
        let namespace = "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: shop\n  labels: {tier: gold, kubernetes.io/metadata.name: shop}\nspec: {finalizers: [kubernetes]}\nstatus: {phase: Active}\n";
        let service = |ns: &str| {
            format!("apiVersion: v1\nkind: Service\nmetadata: {{name: web, namespace: {ns}}}\nspec: {{type: LoadBalancer}}\n")
        };
        let address = |files: &[(&str, &str)]| {
            let config = load(files).unwrap_or_else(|e| panic!("{e}"));
            let announce = &config.announce;
            let service = &announce.services[0];
            crate::announce::allocate::allocate(&announce.pools, &announce.services)
                .addresses_of(&service.key)
        };
        let shop = service("shop");
        let within = |got: Vec<std::net::IpAddr>, pool: &str| {
            let pool: ipnet::IpNet = pool.parse().unwrap();
            assert!(got.len() == 1 && pool.contains(&got[0]), "{got:?} not from {pool}");
        };
        let got = address(&[("pools.yaml", pools), ("ns.yaml", namespace), ("svc.yaml", &shop)]);
        within(got, "198.51.100.0/28");
        let other = service("other");
        let got = address(&[("pools.yaml", pools), ("ns.yaml", namespace), ("svc.yaml", &other)]);
        within(got, "192.0.2.0/28");
    }

    /// `[kubernetes] load_balancer_class` (MetalLB's `--lb-class`): only Services of that
    /// class; without it, only Services without a class.
    #[test]
    fn the_configured_load_balancer_class_is_answered_for() {
        let service = |class: &str| {
            format!("apiVersion: v1\nkind: Service\nmetadata: {{name: a}}\nspec: {{type: LoadBalancer{class}}}\n")
        };
        let class = "[kubernetes]\nload_balancer_class = \"uplink.example/bgp\"\n";
        for (settings, spec, answered) in [
            ("", "", true),
            ("", ", loadBalancerClass: uplink.example/bgp", false),
            (class, ", loadBalancerClass: uplink.example/bgp", true),
            (class, "", false),
            (class, ", loadBalancerClass: other.example/l2", false),
        ] {
            let config =
                load(&[("pool.toml", POOL), ("k8s.toml", settings), ("a.yaml", &service(spec))])
                    .unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(
                config.announce.services.len(),
                usize::from(answered),
                "{settings:?} {spec:?}"
            );
        }
    }

    #[test]
    fn errors_name_the_service_and_its_field() {
        let one = |service: &str| {
            let errors = load(&[("pool.toml", POOL), ("a.yaml", service)]).unwrap_err();
            assert_eq!(errors.0.len(), 1, "{errors}");
            let error = &errors.0[0];
            (error.field.clone(), error.message.clone())
        };
        let service = |extra: &str| {
            format!(
                "apiVersion: v1\nkind: Service\nmetadata:\n  name: web\n{extra}spec:\n  type: LoadBalancer\n"
            )
        };
        let (field, message) =
            one(&service("  annotations: {metallb.io/loadBalancerIPs: \"192.0.2.300\"}\n"));
        assert_eq!(field, "documents[0].metadata.annotations[metallb.io/loadBalancerIPs][0]");
        assert!(message.starts_with("Service \"web\": "), "{message}");
        let (field, message) = one(&service("  annotations: {metallb.io/allow-shared-ip: key}\n"));
        assert_eq!(field, "documents[0].metadata.annotations[metallb.io/allow-shared-ip]");
        assert!(message.contains("not supported"), "{message}");
        let (field, _) = one(&format!("{}  externalTrafficPolicy: Nowhere\n", service("")));
        assert_eq!(field, "documents[0].spec.externalTrafficPolicy");
        let (field, message) = one(&format!("{}  loadBalancerIPs: [1.2.3.4]\n", service("")));
        assert_eq!(
            (field.as_str(), message.as_str()),
            (
                "documents[0].spec.loadBalancerIPs",
                "Service \"web\": unknown field `loadBalancerIPs` of a Service"
            )
        );
        let slice = "apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata:\n  name: s\n  labels: {kubernetes.io/service-name: web}\naddressType: IPv4\nendpoints:\n- addresses: [\"2001:db8::1\"]\n";
        let (field, _) = one(slice);
        assert_eq!(field, "documents[0].endpoints[0].addresses[0]");
        let (field, _) = one("apiVersion: v2\nkind: Service\nmetadata: {name: a}\n");
        assert_eq!(field, "documents[0].apiVersion");
    }

    #[test]
    fn service_fields_read_as_the_manifest_spells_them() {
        assert_eq!(service_field("services[0].load_balancer_ip"), "spec.loadBalancerIP");
        assert_eq!(
            service_field("services[0].load_balancer_ips[1]"),
            "metadata.annotations[metallb.io/loadBalancerIPs][1]"
        );
        assert_eq!(service_field("services[0].traffic_policy"), "spec.externalTrafficPolicy");
        assert_eq!(service_field("services[0]"), "spec");
    }

    #[test]
    fn endpoints_that_can_serve_follow_metallb() {
        let conditions = |text: &str| serde_norway::from_str::<Value>(text).unwrap();
        assert!(can_serve(None));
        assert!(can_serve(Some(&conditions("{}"))));
        assert!(can_serve(Some(&conditions("{ready: true}"))));
        assert!(!can_serve(Some(&conditions("{ready: false}"))));
        assert!(can_serve(Some(&conditions("{ready: false, serving: true, terminating: true}"))));
        assert!(!can_serve(Some(&conditions("{ready: false, serving: false}"))));
    }
}
