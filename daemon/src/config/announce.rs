//! The announcement sections of a config file — `[node]`, `[[pools]]`, `[[services]]`,
//! `[[advertisements]]`, `[[communities]]`, `[[networks]]`, `[[route_advertisements]]` — as
//! written (`Raw*`, with spans), validated per file (`validate`), and merged across files
//! (`merge`) into [`AnnounceConfig`].
//!
//! Merge rule, as for the BGP sections (frr-k8s: configs only extend each other):
//! - `[node]`: `name` is adopted from whichever file sets it; two different names conflict.
//!   `labels` are unioned; one key with two values conflicts.
//! - pools, services (by `namespace/name`), advertisements, communities, route advertisements
//!   and named peers: identical copies are fine, different definitions under one name conflict.
//! - networks (by `name`) extend each other field by field, so a manifest can define a
//!   ClusterUserDefinedNetwork and a TOML fragment add this node's `host_subnet` and
//!   `egress_ips`: `topology`, `subnet` and `vrf` are adopted or conflict, `host_subnet` and
//!   `egress_ips` and `labels` are unioned.
//!
//! After merging, community aliases are resolved and networks are checked for completeness.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::Duration;

use ipnet::IpNet;
use serde::Deserialize;

use super::community::Community;
use super::duration::{bare_number_hint, parse_duration};
use super::error::{ConfigError, Loc};
use super::raw::{RawDuration, S};
use super::source::SourceText;
use crate::announce::model::{
    AddressRange, Advertisement, AdvertisementKind, AnnounceConfig, CommunityAlias, Endpoint,
    HealthCheck, IpFamily, IpFamilyPolicy, Labels, Network, NetworkSelector, PeerName, Pool,
    ProbeKind, RouteAdvertisement, RouterLabels, Service, ServiceAllocation, TargetVrf, Topology,
    TrafficPolicy, DEFAULT_NETWORK,
};
use crate::announce::selector::{LabelSelector, Operator, Requirement};

pub(crate) const DEFAULT_HEALTH_INTERVAL: Duration = Duration::from_secs(5);
pub(crate) const DEFAULT_HEALTH_TIMEOUT: Duration = Duration::from_secs(2);
pub(crate) const DEFAULT_RISE: u32 = 2;
pub(crate) const DEFAULT_FALL: u32 = 3;

// ---------------------------------------------------------------------------------------------
// Raw

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, expecting = "a [node] table (name, labels)")]
pub(crate) struct RawNode {
    pub name: Option<S<String>>,
    #[serde(default)]
    pub labels: BTreeMap<String, S<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, expecting = "a label selector { match_labels, match_expressions }")]
pub(crate) struct RawSelector {
    #[serde(default)]
    pub match_labels: BTreeMap<String, S<String>>,
    #[serde(default)]
    pub match_expressions: Vec<S<RawRequirement>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, expecting = "a table { key, operator, values }")]
pub(crate) struct RawRequirement {
    pub key: S<String>,
    pub operator: S<String>,
    #[serde(default)]
    pub values: Vec<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, expecting = "a [[pools]] table")]
pub(crate) struct RawPool {
    pub name: S<String>,
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    #[serde(default)]
    pub addresses: Vec<S<String>>,
    pub auto_assign: Option<bool>,
    pub avoid_buggy_ips: Option<bool>,
    pub service_allocation: Option<S<RawServiceAllocation>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, expecting = "a service_allocation table")]
pub(crate) struct RawServiceAllocation {
    pub priority: Option<S<i64>>,
    #[serde(default)]
    pub namespaces: Vec<String>,
    #[serde(default)]
    pub namespace_selectors: Vec<S<RawSelector>>,
    #[serde(default)]
    pub service_selectors: Vec<S<RawSelector>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, expecting = "a [[services]] table")]
pub(crate) struct RawService {
    pub name: S<String>,
    pub namespace: Option<S<String>>,
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    #[serde(default)]
    pub namespace_labels: BTreeMap<String, String>,
    pub address_pool: Option<S<String>>,
    pub load_balancer_ip: Option<S<String>>,
    pub load_balancer_ips: Option<S<Vec<S<String>>>>,
    pub ip_family_policy: Option<S<String>>,
    pub ip_families: Option<S<Vec<S<String>>>>,
    pub traffic_policy: Option<S<String>>,
    #[serde(default)]
    pub endpoints: Vec<S<RawEndpoint>>,
    pub health: Option<S<RawHealth>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, expecting = "a table { address, node }")]
pub(crate) struct RawEndpoint {
    pub address: S<String>,
    pub node: S<String>,
}

#[derive(Debug, Deserialize)]
#[serde(
    deny_unknown_fields,
    expecting = "a health table (type, port, path, expected_status, command, interval, timeout, rise, fall)"
)]
pub(crate) struct RawHealth {
    #[serde(rename = "type")]
    pub kind: S<String>,
    pub port: Option<S<i64>>,
    pub path: Option<S<String>>,
    pub expected_status: Option<S<i64>>,
    pub command: Option<S<Vec<String>>>,
    pub interval: Option<S<RawDuration>>,
    pub timeout: Option<S<RawDuration>>,
    pub rise: Option<S<i64>>,
    pub fall: Option<S<i64>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, expecting = "an [[advertisements]] table")]
pub(crate) struct RawAdvertisement {
    pub name: S<String>,
    #[serde(default)]
    pub ip_address_pools: Vec<String>,
    #[serde(default)]
    pub ip_address_pool_selectors: Vec<S<RawSelector>>,
    pub aggregation_length: Option<S<i64>>,
    pub aggregation_length_v6: Option<S<i64>>,
    #[serde(default)]
    pub communities: Vec<S<String>>,
    pub local_pref: Option<S<i64>>,
    #[serde(default)]
    pub peers: Vec<String>,
    #[serde(default)]
    pub node_selectors: Vec<S<RawSelector>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, expecting = "a [[communities]] table { name, value }")]
pub(crate) struct RawCommunityAlias {
    pub name: S<String>,
    pub value: S<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, expecting = "a [[networks]] table")]
pub(crate) struct RawNetwork {
    pub name: S<String>,
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    pub topology: Option<S<String>>,
    pub subnet: Option<S<StringOrList>>,
    pub host_subnet: Option<S<StringOrList>>,
    pub vrf: Option<S<String>>,
    #[serde(default)]
    pub egress_ips: Vec<S<String>>,
}

/// `"10.0.0.0/16"` or `["10.0.0.0/16", "fd00::/48"]` (dual stack).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct StringOrList(pub Vec<String>);

impl<'de> Deserialize<'de> for StringOrList {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Visit;
        impl<'de> serde::de::Visitor<'de> for Visit {
            type Value = StringOrList;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a CIDR string or a list of CIDR strings")
            }
            fn visit_str<E: serde::de::Error>(self, value: &str) -> Result<StringOrList, E> {
                Ok(StringOrList(vec![value.to_string()]))
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> Result<StringOrList, A::Error> {
                let mut out = Vec::new();
                while let Some(item) = seq.next_element::<String>()? {
                    out.push(item);
                }
                Ok(StringOrList(out))
            }
        }
        deserializer.deserialize_any(Visit)
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, expecting = "a [[route_advertisements]] table")]
pub(crate) struct RawRouteAdvertisement {
    pub name: S<String>,
    #[serde(default)]
    pub advertisements: Vec<S<String>>,
    #[serde(default)]
    pub network_selectors: Vec<S<RawNetworkSelector>>,
    pub node_selector: Option<S<RawSelector>>,
    pub target_vrf: Option<S<String>>,
    pub frr_configuration_selector: Option<S<RawSelector>>,
}

#[derive(Debug, Deserialize)]
#[serde(
    deny_unknown_fields,
    expecting = "a network selector { network_selection_type, cluster_user_defined_network_selector }"
)]
pub(crate) struct RawNetworkSelector {
    pub network_selection_type: S<String>,
    pub cluster_user_defined_network_selector: Option<S<RawCudnSelector>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, expecting = "a table { network_selector }")]
pub(crate) struct RawCudnSelector {
    pub network_selector: S<RawSelector>,
}

/// A router's `imports = [{ vrf = "…" }]` entry.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, expecting = "a table { vrf }")]
pub(crate) struct RawImport {
    pub vrf: S<String>,
}

/// The announcement sections of one file, as `RawFile` holds them.
#[derive(Debug, Default)]
pub(crate) struct RawAnnounce {
    pub node: Option<S<RawNode>>,
    pub pools: Vec<S<RawPool>>,
    pub services: Vec<S<RawService>>,
    pub advertisements: Vec<S<RawAdvertisement>>,
    pub communities: Vec<S<RawCommunityAlias>>,
    pub networks: Vec<S<RawNetwork>>,
    pub route_advertisements: Vec<S<RawRouteAdvertisement>>,
}

// ---------------------------------------------------------------------------------------------
// Validated fragment

/// An item with where it was written.
#[derive(Debug, Clone)]
pub(crate) struct Placed<T> {
    pub item: T,
    pub loc: Loc,
    pub field: String,
}

/// An advertisement whose communities may still be alias names.
#[derive(Debug, Clone)]
pub(crate) struct PendingAdvertisement {
    pub advertisement: Advertisement,
    /// As written, with where: resolved against `[[communities]]` after merging.
    pub communities: Vec<(String, Loc, String)>,
}

/// Equal when the advertisements and the community texts are (positions aside).
impl PartialEq for PendingAdvertisement {
    fn eq(&self, other: &Self) -> bool {
        self.advertisement == other.advertisement
            && self.communities.iter().map(|c| &c.0).eq(other.communities.iter().map(|c| &c.0))
    }
}

#[derive(Debug, Default)]
pub(crate) struct AnnounceFragment {
    pub node_name: Option<Placed<String>>,
    pub node_labels: Vec<Placed<(String, String)>>,
    pub pools: Vec<Placed<Pool>>,
    pub services: Vec<Placed<Service>>,
    pub advertisements: Vec<Placed<PendingAdvertisement>>,
    pub communities: Vec<Placed<CommunityAlias>>,
    pub networks: Vec<Placed<NetworkFragment>>,
    pub route_advertisements: Vec<Placed<RouteAdvertisement>>,
    pub peer_names: Vec<Placed<PeerName>>,
    pub router_labels: Vec<RouterLabels>,
}

/// A network as one file describes it: any field may be left to another file.
#[derive(Debug, Clone, Default)]
pub(crate) struct NetworkFragment {
    pub name: String,
    pub labels: Labels,
    pub topology: Option<Topology>,
    pub subnets: Vec<IpNet>,
    pub host_subnets: Vec<IpNet>,
    pub vrf: Option<String>,
    pub egress_ips: Vec<IpAddr>,
}

struct Check<'s, 'e> {
    source: &'s SourceText<'s>,
    errors: &'e mut Vec<ConfigError>,
}

impl Check<'_, '_> {
    fn fail<T>(&mut self, value: &S<T>, field: &str, message: impl Into<String>) {
        self.errors.push(self.source.error_at(&value.span(), field, message));
    }

    fn loc<T>(&self, value: &S<T>) -> Loc {
        self.source.loc(value.span().start)
    }

    fn name(&mut self, value: &S<String>, field: &str) -> Option<String> {
        let name = value.get_ref().trim();
        if name.is_empty() {
            self.fail(value, field, "must not be empty");
            return None;
        }
        Some(name.to_string())
    }

    fn int<T: TryFrom<i64>>(
        &mut self,
        value: &S<i64>,
        field: &str,
        low: i64,
        high: i64,
    ) -> Option<T> {
        let n = *value.get_ref();
        if n < low || n > high {
            self.fail(value, field, format!("{n} is out of range; valid: {low}..={high}"));
            return None;
        }
        T::try_from(n).ok()
    }

    fn address(&mut self, value: &S<String>, field: &str) -> Option<IpAddr> {
        match IpAddr::from_str(value.get_ref().trim()) {
            Ok(address) => Some(address),
            Err(_) => {
                let text = value.get_ref();
                self.fail(value, field, format!("\"{text}\" is not an IP address; write e.g. \"192.0.2.10\" or \"2001:db8::10\""));
                None
            }
        }
    }

    fn prefix(&mut self, value: &S<String>, field: &str) -> Option<IpNet> {
        let text = value.get_ref().trim();
        match IpNet::from_str(text) {
            Ok(net) if net.trunc() == net => Some(net),
            Ok(net) => {
                self.fail(
                    value,
                    field,
                    format!("{text} has host bits set; did you mean {}?", net.trunc()),
                );
                None
            }
            Err(_) => {
                self.fail(
                    value,
                    field,
                    format!("\"{text}\" is not a CIDR prefix; write e.g. \"10.128.0.0/16\""),
                );
                None
            }
        }
    }

    fn duration(&mut self, value: &S<RawDuration>, field: &str) -> Option<Duration> {
        match value.get_ref() {
            RawDuration::Number(n) => {
                self.fail(value, field, bare_number_hint(n));
                None
            }
            RawDuration::Text(text) => match parse_duration(text) {
                Ok(d) if !d.is_zero() => Some(d),
                Ok(_) => {
                    self.fail(value, field, "must be longer than zero");
                    None
                }
                Err(error) => {
                    self.fail(value, field, error.to_string());
                    None
                }
            },
        }
    }

    fn selector(&mut self, raw: &S<RawSelector>, field: &str) -> Option<LabelSelector> {
        let raw = raw.get_ref();
        let mut ok = true;
        let mut expressions = Vec::new();
        for (index, requirement) in raw.match_expressions.iter().enumerate() {
            let r = requirement.get_ref();
            let name = format!("{field}.match_expressions[{index}]");
            let Some(operator) = Operator::parse(r.operator.get_ref()) else {
                self.fail(
                    &r.operator,
                    &format!("{name}.operator"),
                    format!(
                        "unknown operator \"{}\"; valid: In, NotIn, Exists, DoesNotExist",
                        r.operator.get_ref()
                    ),
                );
                ok = false;
                continue;
            };
            let needs_values = matches!(operator, Operator::In | Operator::NotIn);
            if needs_values == r.values.is_empty() {
                let message = if needs_values {
                    "In and NotIn need at least one value"
                } else {
                    "Exists and DoesNotExist take no values"
                };
                self.fail(requirement, &format!("{name}.values"), message);
                ok = false;
                continue;
            }
            expressions.push(Requirement {
                key: r.key.get_ref().clone(),
                operator,
                values: r.values.clone(),
            });
        }
        ok.then(|| LabelSelector {
            match_labels: raw
                .match_labels
                .iter()
                .map(|(k, v)| (k.clone(), v.get_ref().clone()))
                .collect(),
            match_expressions: expressions,
        })
    }

    fn selectors(&mut self, raws: &[S<RawSelector>], field: &str) -> Vec<LabelSelector> {
        raws.iter()
            .enumerate()
            .filter_map(|(i, s)| self.selector(s, &format!("{field}[{i}]")))
            .collect()
    }

    fn range(&mut self, value: &S<String>, field: &str) -> Option<AddressRange> {
        let text = value.get_ref().trim();
        if let Some((a, b)) = text.split_once('-') {
            let (Ok(first), Ok(last)) = (IpAddr::from_str(a.trim()), IpAddr::from_str(b.trim()))
            else {
                self.fail(
                    value,
                    field,
                    format!("\"{text}\" is not a range; write \"192.0.2.10-192.0.2.20\""),
                );
                return None;
            };
            let valid = match (first, last) {
                (IpAddr::V4(x), IpAddr::V4(y)) => x <= y,
                (IpAddr::V6(x), IpAddr::V6(y)) => x <= y,
                _ => false,
            };
            if !valid {
                self.fail(value, field, format!("\"{text}\": both ends must be of one family and the first must not be above the last"));
                return None;
            }
            return Some(AddressRange { first, last, cidr: None });
        }
        match IpNet::from_str(text) {
            Ok(net) if net.trunc() == net => {
                Some(AddressRange { first: net.network(), last: net.broadcast(), cidr: Some(net) })
            }
            Ok(net) => {
                self.fail(
                    value,
                    field,
                    format!("{text} has host bits set; did you mean {}?", net.trunc()),
                );
                None
            }
            Err(_) => {
                self.fail(value, field, format!("\"{text}\" is neither a CIDR (\"192.0.2.0/24\") nor a range (\"192.0.2.10-192.0.2.20\")"));
                None
            }
        }
    }
}

/// Validates one file's announcement sections.
pub(crate) fn validate(
    source: &SourceText<'_>,
    raw: RawAnnounce,
    errors: &mut Vec<ConfigError>,
) -> AnnounceFragment {
    let mut check = Check { source, errors };
    let mut out = AnnounceFragment::default();
    let file = source.path.clone();
    if let Some(node) = &raw.node {
        let node = node.get_ref();
        if let Some(name) = &node.name {
            if let Some(n) = check.name(name, "node.name") {
                out.node_name =
                    Some(Placed { item: n, loc: check.loc(name), field: "node.name".into() });
            }
        }
        for (key, value) in &node.labels {
            out.node_labels.push(Placed {
                item: (key.clone(), value.get_ref().clone()),
                loc: check.loc(value),
                field: format!("node.labels.{key}"),
            });
        }
    }
    for (index, raw) in raw.pools.iter().enumerate() {
        let field = format!("pools[{index}]");
        if let Some(pool) = pool(&mut check, raw.get_ref(), &field, &file) {
            let loc = check.loc(&raw.get_ref().name);
            push_unique(
                &mut check,
                &mut out.pools,
                Placed { item: pool, loc, field },
                |p| p.name.clone(),
                "pool",
            );
        }
    }
    for (index, raw) in raw.services.iter().enumerate() {
        let field = format!("services[{index}]");
        if let Some(service) = service(&mut check, raw.get_ref(), &field, &file) {
            let loc = check.loc(&raw.get_ref().name);
            push_unique(
                &mut check,
                &mut out.services,
                Placed { item: service, loc, field },
                Service::key,
                "service",
            );
        }
    }
    for (index, raw) in raw.advertisements.iter().enumerate() {
        let field = format!("advertisements[{index}]");
        if let Some(adv) = advertisement(&mut check, raw.get_ref(), &field, &file) {
            let loc = check.loc(&raw.get_ref().name);
            push_unique(
                &mut check,
                &mut out.advertisements,
                Placed { item: adv, loc, field },
                |a| a.advertisement.name.clone(),
                "advertisement",
            );
        }
    }
    for (index, raw) in raw.communities.iter().enumerate() {
        let field = format!("communities[{index}]");
        let r = raw.get_ref();
        let Some(name) = check.name(&r.name, &format!("{field}.name")) else { continue };
        let value = match Community::from_str(r.value.get_ref()) {
            Ok(value) => value,
            Err(error) => {
                check.fail(&r.value, &format!("{field}.value"), error.to_string());
                continue;
            }
        };
        let loc = check.loc(&r.name);
        push_unique(
            &mut check,
            &mut out.communities,
            Placed { item: CommunityAlias { name, value }, loc, field },
            |c| c.name.clone(),
            "community",
        );
    }
    for (index, raw) in raw.networks.iter().enumerate() {
        let field = format!("networks[{index}]");
        if let Some(network) = network(&mut check, raw.get_ref(), &field) {
            let loc = check.loc(&raw.get_ref().name);
            push_unique(
                &mut check,
                &mut out.networks,
                Placed { item: network, loc, field },
                |n| n.name.clone(),
                "network",
            );
        }
    }
    for (index, raw) in raw.route_advertisements.iter().enumerate() {
        let field = format!("route_advertisements[{index}]");
        if let Some(ra) = route_advertisement(&mut check, raw.get_ref(), &field, &file) {
            let loc = check.loc(&raw.get_ref().name);
            push_unique(
                &mut check,
                &mut out.route_advertisements,
                Placed { item: ra, loc, field },
                |r| r.name.clone(),
                "route advertisement",
            );
        }
    }
    out
}

/// One name once per file.
fn push_unique<T>(
    check: &mut Check<'_, '_>,
    list: &mut Vec<Placed<T>>,
    item: Placed<T>,
    key: impl Fn(&T) -> String,
    what: &str,
) {
    let name = key(&item.item);
    if let Some(first) = list.iter().find(|p| key(&p.item) == name) {
        check.errors.push(item.loc.error(
            format!("{}.name", item.field),
            format!(
                "{what} \"{name}\" is already defined at line {} ({}); give each a distinct name",
                first.loc.line, first.field
            ),
        ));
        return;
    }
    list.push(item);
}

fn pool(check: &mut Check<'_, '_>, raw: &RawPool, field: &str, file: &Path) -> Option<Pool> {
    let name = check.name(&raw.name, &format!("{field}.name"));
    let mut addresses = Vec::new();
    for (index, text) in raw.addresses.iter().enumerate() {
        if let Some(range) = check.range(text, &format!("{field}.addresses[{index}]")) {
            addresses.push(range);
        }
    }
    let service_allocation = raw.service_allocation.as_ref().map(|alloc| {
        let a = alloc.get_ref();
        ServiceAllocation {
            priority: a.priority.as_ref().and_then(|p| {
                check.int(
                    p,
                    &format!("{field}.service_allocation.priority"),
                    i64::from(i32::MIN),
                    i64::from(i32::MAX),
                )
            }),
            namespaces: a.namespaces.clone(),
            namespace_selectors: check.selectors(
                &a.namespace_selectors,
                &format!("{field}.service_allocation.namespace_selectors"),
            ),
            service_selectors: check.selectors(
                &a.service_selectors,
                &format!("{field}.service_allocation.service_selectors"),
            ),
        }
    });
    Some(Pool {
        name: name?,
        labels: raw.labels.clone(),
        addresses,
        auto_assign: raw.auto_assign.unwrap_or(true),
        avoid_buggy_ips: raw.avoid_buggy_ips.unwrap_or(false),
        service_allocation,
        sources: vec![file.to_path_buf()],
    })
}

fn service(
    check: &mut Check<'_, '_>,
    raw: &RawService,
    field: &str,
    file: &Path,
) -> Option<Service> {
    let name = check.name(&raw.name, &format!("{field}.name"));
    let namespace = match &raw.namespace {
        Some(ns) => check.name(ns, &format!("{field}.namespace")),
        None => Some("default".to_string()),
    };
    let families = ip_families(check, raw, field);
    let load_balancer_ips = load_balancer_ips(check, raw, field, &families)?;
    let traffic_policy = match raw.traffic_policy.as_ref().map(|t| (t, t.get_ref().as_str())) {
        None | Some((_, "cluster" | "Cluster")) => TrafficPolicy::Cluster,
        Some((_, "local" | "Local")) => TrafficPolicy::Local,
        Some((value, other)) => {
            check.fail(
                value,
                &format!("{field}.traffic_policy"),
                format!("unknown traffic policy \"{other}\"; valid: \"cluster\", \"local\""),
            );
            TrafficPolicy::Cluster
        }
    };
    let mut endpoints = Vec::new();
    for (index, endpoint) in raw.endpoints.iter().enumerate() {
        let e = endpoint.get_ref();
        let name = format!("{field}.endpoints[{index}]");
        let address = check.address(&e.address, &format!("{name}.address"));
        let node = check.name(&e.node, &format!("{name}.node"));
        if let (Some(address), Some(node)) = (address, node) {
            endpoints.push(Endpoint { address, node });
        }
    }
    let health = match &raw.health {
        Some(h) => Some(health(check, h.get_ref(), &format!("{field}.health"))?),
        None => None,
    };
    Some(Service {
        name: name?,
        namespace: namespace?,
        labels: raw.labels.clone(),
        namespace_labels: raw.namespace_labels.clone(),
        address_pool: raw.address_pool.as_ref().map(|p| p.get_ref().clone()),
        load_balancer_ips,
        ip_family_policy: families.policy,
        ip_families: families.families,
        traffic_policy,
        endpoints,
        health,
        sources: vec![file.to_path_buf()],
    })
}

/// A service's `ip_family_policy` and `ip_families`, validated together.
struct Families {
    policy: IpFamilyPolicy,
    families: Vec<IpFamily>,
}

fn ip_families(check: &mut Check<'_, '_>, raw: &RawService, field: &str) -> Families {
    // Both spellings, as for traffic_policy: ours and Kubernetes' `spec.ipFamilyPolicy`.
    let policy = match raw.ip_family_policy.as_ref().map(|p| (p, p.get_ref().as_str())) {
        None | Some((_, "single-stack" | "SingleStack")) => IpFamilyPolicy::SingleStack,
        Some((_, "prefer-dual-stack" | "PreferDualStack")) => IpFamilyPolicy::PreferDualStack,
        Some((_, "require-dual-stack" | "RequireDualStack")) => IpFamilyPolicy::RequireDualStack,
        Some((value, other)) => {
            check.fail(
                value,
                &format!("{field}.ip_family_policy"),
                format!("unknown ip_family_policy \"{other}\"; valid: \"single-stack\", \"prefer-dual-stack\", \"require-dual-stack\""),
            );
            IpFamilyPolicy::SingleStack
        }
    };
    let mut families = Vec::new();
    if let Some(list) = &raw.ip_families {
        for (index, text) in list.get_ref().iter().enumerate() {
            let name = format!("{field}.ip_families[{index}]");
            let family = match text.get_ref().as_str() {
                "ipv4" | "IPv4" => IpFamily::Ipv4,
                "ipv6" | "IPv6" => IpFamily::Ipv6,
                other => {
                    check.fail(
                        text,
                        &name,
                        format!("unknown family \"{other}\"; valid: \"ipv4\", \"ipv6\""),
                    );
                    continue;
                }
            };
            if families.contains(&family) {
                check.fail(text, &name, format!("{family} is listed twice"));
                continue;
            }
            families.push(family);
        }
        if families.len() > 1 && policy == IpFamilyPolicy::SingleStack {
            check.fail(
                list,
                &format!("{field}.ip_families"),
                "single-stack takes one family; set ip_family_policy = \"prefer-dual-stack\" or \"require-dual-stack\" for both",
            );
        }
    }
    Families { policy, families }
}

/// `load_balancer_ip` or `load_balancer_ips` (not both), at most one address per family, and
/// consistent with the family policy. Ordered primary family first when `ip_families` is set.
fn load_balancer_ips(
    check: &mut Check<'_, '_>,
    raw: &RawService,
    field: &str,
    families: &Families,
) -> Option<Vec<IpAddr>> {
    let (list, name): (Vec<(&S<String>, String)>, String) =
        match (&raw.load_balancer_ip, &raw.load_balancer_ips) {
            (Some(one), Some(many)) => {
                let line = check.loc(one).line;
                check.fail(
                    many,
                    &format!("{field}.load_balancer_ips"),
                    format!(
                        "give either load_balancer_ip (line {line}) or load_balancer_ips, not both"
                    ),
                );
                return None;
            }
            (Some(one), None) => (
                vec![(one, format!("{field}.load_balancer_ip"))],
                format!("{field}.load_balancer_ip"),
            ),
            (None, Some(many)) => (
                many.get_ref()
                    .iter()
                    .enumerate()
                    .map(|(i, a)| (a, format!("{field}.load_balancer_ips[{i}]")))
                    .collect(),
                format!("{field}.load_balancer_ips"),
            ),
            (None, None) => return Some(Vec::new()),
        };
    let mut ok = true;
    let mut addresses: Vec<IpAddr> = Vec::new();
    for (value, name) in &list {
        let Some(address) = check.address(value, name) else {
            ok = false;
            continue;
        };
        let family = IpFamily::of(address);
        if let Some(first) = addresses.iter().find(|a| IpFamily::of(**a) == family) {
            check.fail(
                value,
                name,
                format!("at most one address per family; {first} is {family} too"),
            );
            ok = false;
            continue;
        }
        let single = families.policy == IpFamilyPolicy::SingleStack;
        if let Some(want) = families.families.first().filter(|f| single && **f != family) {
            check.fail(
                value,
                name,
                format!("{address} is {family}, but ip_families asks for {want}"),
            );
            ok = false;
            continue;
        }
        addresses.push(address);
    }
    if !ok {
        return None;
    }
    let Some((first, _)) = list.first() else { return Some(addresses) };
    match (families.policy, addresses.len()) {
        (IpFamilyPolicy::SingleStack, n) if n > 1 => {
            check.fail(
                first,
                &name,
                "one address per family means dual stack: set ip_family_policy = \"require-dual-stack\" or \"prefer-dual-stack\"",
            );
            return None;
        }
        (IpFamilyPolicy::RequireDualStack, 1) => {
            let missing = addresses.first().map(|a| IpFamily::of(*a).other());
            check.fail(
                first,
                &name,
                format!(
                    "require-dual-stack needs one address of each family; add the {} address to load_balancer_ips, or leave the addresses to the pool",
                    missing.map(|f| f.to_string()).unwrap_or_default()
                ),
            );
            return None;
        }
        _ => {}
    }
    if !families.families.is_empty() {
        addresses.sort_by_key(|a| {
            families.families.iter().position(|f| *f == IpFamily::of(*a)).unwrap_or(usize::MAX)
        });
    }
    Some(addresses)
}

fn health(check: &mut Check<'_, '_>, raw: &RawHealth, field: &str) -> Option<HealthCheck> {
    let port = |check: &mut Check<'_, '_>| match &raw.port {
        Some(p) => check.int::<u16>(p, &format!("{field}.port"), 1, 65535),
        None => {
            check.fail(&raw.kind, &format!("{field}.port"), "this check needs a port");
            None
        }
    };
    let probe = match raw.kind.get_ref().as_str() {
        "tcp" => ProbeKind::Tcp { port: port(check)? },
        kind @ ("http" | "https") => {
            let expected_status = match &raw.expected_status {
                Some(s) => check.int::<u16>(s, &format!("{field}.expected_status"), 100, 599)?,
                None => 200,
            };
            ProbeKind::Http {
                port: port(check)?,
                path: raw.path.as_ref().map_or_else(|| "/".to_string(), |p| p.get_ref().clone()),
                expected_status,
                tls: kind == "https",
            }
        }
        "exec" => match &raw.command {
            Some(command) if !command.get_ref().is_empty() => {
                ProbeKind::Exec { command: command.get_ref().clone() }
            }
            _ => {
                check.fail(
                    &raw.kind,
                    &format!("{field}.command"),
                    "an exec check needs a non-empty command = [\"program\", \"arg\", ...]",
                );
                return None;
            }
        },
        other => {
            check.fail(
                &raw.kind,
                &format!("{field}.type"),
                format!(
                    "unknown check type \"{other}\"; valid: \"tcp\", \"http\", \"https\", \"exec\""
                ),
            );
            return None;
        }
    };
    let interval = match &raw.interval {
        Some(d) => check.duration(d, &format!("{field}.interval"))?,
        None => DEFAULT_HEALTH_INTERVAL,
    };
    let timeout = match &raw.timeout {
        Some(d) => check.duration(d, &format!("{field}.timeout"))?,
        None => DEFAULT_HEALTH_TIMEOUT.min(interval),
    };
    let rise = match &raw.rise {
        Some(n) => check.int(n, &format!("{field}.rise"), 1, 100)?,
        None => DEFAULT_RISE,
    };
    let fall = match &raw.fall {
        Some(n) => check.int(n, &format!("{field}.fall"), 1, 100)?,
        None => DEFAULT_FALL,
    };
    Some(HealthCheck { probe, interval, timeout, rise, fall })
}

fn advertisement(
    check: &mut Check<'_, '_>,
    raw: &RawAdvertisement,
    field: &str,
    file: &Path,
) -> Option<PendingAdvertisement> {
    let name = check.name(&raw.name, &format!("{field}.name"));
    let aggregation_length = match &raw.aggregation_length {
        Some(n) => check.int(n, &format!("{field}.aggregation_length"), 0, 32)?,
        None => 32,
    };
    let aggregation_length_v6 = match &raw.aggregation_length_v6 {
        Some(n) => check.int(n, &format!("{field}.aggregation_length_v6"), 0, 128)?,
        None => 128,
    };
    let local_pref = match &raw.local_pref {
        Some(n) => Some(check.int(n, &format!("{field}.local_pref"), 0, i64::from(u32::MAX))?),
        None => None,
    };
    let communities = raw
        .communities
        .iter()
        .enumerate()
        .map(|(i, c)| (c.get_ref().clone(), check.loc(c), format!("{field}.communities[{i}]")))
        .collect();
    Some(PendingAdvertisement {
        advertisement: Advertisement {
            name: name?,
            ip_address_pools: raw.ip_address_pools.clone(),
            ip_address_pool_selectors: check.selectors(
                &raw.ip_address_pool_selectors,
                &format!("{field}.ip_address_pool_selectors"),
            ),
            aggregation_length,
            aggregation_length_v6,
            communities: Vec::new(),
            local_pref,
            peers: raw.peers.clone(),
            node_selectors: check
                .selectors(&raw.node_selectors, &format!("{field}.node_selectors")),
            sources: vec![file.to_path_buf()],
        },
        communities,
    })
}

fn network(check: &mut Check<'_, '_>, raw: &RawNetwork, field: &str) -> Option<NetworkFragment> {
    let name = check.name(&raw.name, &format!("{field}.name"))?;
    let topology = match &raw.topology {
        None => None,
        Some(t) => match t.get_ref().to_ascii_lowercase().as_str() {
            "layer3" => Some(Topology::Layer3),
            "layer2" => Some(Topology::Layer2),
            other => {
                check.fail(
                    t,
                    &format!("{field}.topology"),
                    format!("unknown topology \"{other}\"; valid: \"layer3\", \"layer2\""),
                );
                None
            }
        },
    };
    let mut cidrs = |value: &Option<S<StringOrList>>, name: &str| -> Vec<IpNet> {
        let Some(value) = value else { return Vec::new() };
        let span = value.span();
        value
            .get_ref()
            .0
            .iter()
            .filter_map(|text| {
                check.prefix(&S::new(span.clone(), text.clone()), &format!("{field}.{name}"))
            })
            .collect()
    };
    let subnets = cidrs(&raw.subnet, "subnet");
    let host_subnets = cidrs(&raw.host_subnet, "host_subnet");
    let egress_ips = raw
        .egress_ips
        .iter()
        .enumerate()
        .filter_map(|(i, s)| check.address(s, &format!("{field}.egress_ips[{i}]")))
        .collect();
    Some(NetworkFragment {
        name,
        labels: raw.labels.clone(),
        topology,
        subnets,
        host_subnets,
        vrf: raw.vrf.as_ref().map(|v| v.get_ref().clone()),
        egress_ips,
    })
}

fn route_advertisement(
    check: &mut Check<'_, '_>,
    raw: &RawRouteAdvertisement,
    field: &str,
    file: &Path,
) -> Option<RouteAdvertisement> {
    let name = check.name(&raw.name, &format!("{field}.name"));
    let mut advertisements = Vec::new();
    for (index, kind) in raw.advertisements.iter().enumerate() {
        match kind.get_ref().as_str() {
            "PodNetwork" => advertisements.push(AdvertisementKind::PodNetwork),
            "EgressIP" => advertisements.push(AdvertisementKind::EgressIp),
            other => check.fail(
                kind,
                &format!("{field}.advertisements[{index}]"),
                format!("unknown advertisement \"{other}\"; valid: \"PodNetwork\", \"EgressIP\""),
            ),
        }
    }
    let mut network_selectors = Vec::new();
    for (index, selector) in raw.network_selectors.iter().enumerate() {
        let s = selector.get_ref();
        let name = format!("{field}.network_selectors[{index}]");
        match s.network_selection_type.get_ref().as_str() {
            "DefaultNetwork" => network_selectors.push(NetworkSelector::DefaultNetwork),
            "ClusterUserDefinedNetworks" => match &s.cluster_user_defined_network_selector {
                Some(cudn) => {
                    if let Some(network_selector) = check.selector(&cudn.get_ref().network_selector, &format!("{name}.cluster_user_defined_network_selector.network_selector")) {
                        network_selectors.push(NetworkSelector::ClusterUserDefinedNetworks { network_selector });
                    }
                }
                None => check.fail(selector, &format!("{name}.cluster_user_defined_network_selector"), "ClusterUserDefinedNetworks needs a cluster_user_defined_network_selector"),
            },
            other => check.fail(&s.network_selection_type, &format!("{name}.network_selection_type"), format!("unsupported network_selection_type \"{other}\"; valid: \"DefaultNetwork\", \"ClusterUserDefinedNetworks\"")),
        }
    }
    let target_vrf = match raw.target_vrf.as_ref().map(|t| (t, t.get_ref().as_str())) {
        None | Some((_, "" | "default")) => TargetVrf::Default,
        Some((_, "auto")) => TargetVrf::Auto,
        Some((value, other)) => {
            check.fail(value, &format!("{field}.target_vrf"), format!("unsupported target_vrf \"{other}\"; OVN-Kubernetes supports \"default\" (or \"\") and \"auto\""));
            return None;
        }
    };
    let node_selector = match &raw.node_selector {
        Some(s) => check.selector(s, &format!("{field}.node_selector"))?,
        None => LabelSelector::default(),
    };
    let frr_configuration_selector = match &raw.frr_configuration_selector {
        Some(s) => check.selector(s, &format!("{field}.frr_configuration_selector"))?,
        None => LabelSelector::default(),
    };
    Some(RouteAdvertisement {
        name: name?,
        advertisements,
        network_selectors,
        node_selector,
        target_vrf,
        frr_configuration_selector,
        sources: vec![file.to_path_buf()],
    })
}

// ---------------------------------------------------------------------------------------------
// Merge

/// Merges the announcement fragments of all files, in order.
pub(crate) fn merge(
    fragments: Vec<(PathBuf, AnnounceFragment)>,
    errors: &mut Vec<ConfigError>,
) -> AnnounceConfig {
    let mut out = AnnounceConfig::default();
    let mut node_name: Option<Placed<String>> = None;
    let mut node_labels: BTreeMap<String, Placed<String>> = BTreeMap::new();
    let mut pools: Vec<Placed<Pool>> = Vec::new();
    let mut services: Vec<Placed<Service>> = Vec::new();
    let mut advertisements: Vec<Placed<PendingAdvertisement>> = Vec::new();
    let mut communities: Vec<Placed<CommunityAlias>> = Vec::new();
    let mut networks: Vec<(Placed<NetworkFragment>, Vec<PathBuf>)> = Vec::new();
    let mut route_advertisements: Vec<Placed<RouteAdvertisement>> = Vec::new();
    let mut peer_names: Vec<Placed<PeerName>> = Vec::new();
    for (file, fragment) in fragments {
        if let Some(name) = fragment.node_name {
            match &node_name {
                Some(first) if first.item != name.item => errors.push(name.loc.error(
                    name.field.clone(),
                    format!(
                        "node name \"{}\" conflicts with \"{}\" at {}; one node has one name",
                        name.item, first.item, first.loc
                    ),
                )),
                Some(_) => {}
                None => node_name = Some(name),
            }
        }
        for label in fragment.node_labels {
            let (key, value) = label.item.clone();
            match node_labels.get(&key) {
                Some(first) if first.item != value => errors.push(label.loc.error(
                    label.field.clone(),
                    format!(
                        "node label {key}={value} conflicts with {key}={} at {}",
                        first.item, first.loc
                    ),
                )),
                Some(_) => {}
                None => {
                    node_labels
                        .insert(key, Placed { item: value, loc: label.loc, field: label.field });
                }
            }
        }
        merge_identical(
            &mut pools,
            fragment.pools,
            |p| p.name.clone(),
            |p| Some(&mut p.sources),
            "pool",
            errors,
        );
        merge_identical(
            &mut services,
            fragment.services,
            Service::key,
            |s| Some(&mut s.sources),
            "service",
            errors,
        );
        merge_identical(
            &mut advertisements,
            fragment.advertisements,
            |a| a.advertisement.name.clone(),
            |a| Some(&mut a.advertisement.sources),
            "advertisement",
            errors,
        );
        merge_identical(
            &mut communities,
            fragment.communities,
            |c| c.name.clone(),
            |_| None,
            "community",
            errors,
        );
        merge_identical(
            &mut route_advertisements,
            fragment.route_advertisements,
            |r| r.name.clone(),
            |r| Some(&mut r.sources),
            "route advertisement",
            errors,
        );
        merge_identical(
            &mut peer_names,
            fragment.peer_names,
            |p| p.name.clone(),
            |_| None,
            "BGP peer",
            errors,
        );
        for network in fragment.networks {
            match networks.iter_mut().find(|(n, _)| n.item.name == network.item.name) {
                Some((existing, sources)) => {
                    extend_network(existing, network, errors);
                    if !sources.contains(&file) {
                        sources.push(file.clone());
                    }
                }
                None => networks.push((network, vec![file.clone()])),
            }
        }
        out.router_labels.extend(fragment.router_labels);
    }
    out.node.name = node_name.map(|n| n.item);
    out.node.labels = node_labels.into_iter().map(|(k, v)| (k, v.item)).collect();
    out.pools = pools.into_iter().map(|p| p.item).collect();
    out.services = services.into_iter().map(|p| p.item).collect();
    out.communities = communities.iter().map(|p| p.item.clone()).collect();
    out.route_advertisements = route_advertisements.into_iter().map(|p| p.item).collect();
    out.peer_names = peer_names.into_iter().map(|p| p.item).collect();
    for placed in advertisements {
        let mut adv = placed.item.advertisement;
        for (text, loc, field) in placed.item.communities {
            // MetalLB: a community is a literal value or the name of a Community alias.
            if let Some(alias) = out.communities.iter().find(|c| c.name == text) {
                adv.communities.push(alias.value);
                continue;
            }
            match Community::from_str(&text) {
                Ok(value) => adv.communities.push(value),
                Err(error) => errors.push(loc.error(
                    field,
                    format!("neither a [[communities]] alias nor a community value: {error}"),
                )),
            }
        }
        out.advertisements.push(adv);
    }
    for (placed, sources) in networks {
        let n = placed.item;
        let Some(topology) = n.topology else {
            errors.push(placed.loc.error(format!("{}.topology", placed.field), format!("network \"{}\" has no topology in any file; set topology = \"layer3\" or \"layer2\"", n.name)));
            continue;
        };
        for host in &n.host_subnets {
            if topology == Topology::Layer2 {
                errors.push(placed.loc.error(format!("{}.host_subnet", placed.field), format!("network \"{}\" is layer2: every node announces the whole subnet, so it has no host_subnet", n.name)));
            } else if !n.subnets.iter().any(|s| s.contains(host)) {
                errors.push(placed.loc.error(
                    format!("{}.host_subnet", placed.field),
                    format!(
                        "host_subnet {host} is not inside the subnet of network \"{}\"",
                        n.name
                    ),
                ));
            }
        }
        let vrf = n.vrf.unwrap_or_else(|| {
            if n.name == DEFAULT_NETWORK {
                String::new()
            } else {
                n.name.clone()
            }
        });
        out.networks.push(Network {
            name: n.name,
            labels: n.labels,
            topology,
            subnets: n.subnets,
            host_subnets: n.host_subnets,
            vrf,
            egress_ips: n.egress_ips,
            sources,
        });
    }
    out
}

/// Identical copies merge (their sources add up); different definitions under one name conflict.
fn merge_identical<T: Clone + PartialEq>(
    merged: &mut Vec<Placed<T>>,
    new: Vec<Placed<T>>,
    key: impl Fn(&T) -> String,
    sources: fn(&mut T) -> Option<&mut Vec<PathBuf>>,
    what: &str,
    errors: &mut Vec<ConfigError>,
) {
    for item in new {
        let name = key(&item.item);
        match merged.iter_mut().find(|m| key(&m.item) == name) {
            None => merged.push(item),
            Some(first) => {
                let mut a = first.item.clone();
                let mut b = item.item.clone();
                let new_sources = sources(&mut b).map(std::mem::take).unwrap_or_default();
                if let Some(s) = sources(&mut a) {
                    s.clear();
                }
                if a == b {
                    if let Some(s) = sources(&mut first.item) {
                        for source in new_sources {
                            if !s.contains(&source) {
                                s.push(source);
                            }
                        }
                    }
                } else {
                    errors.push(item.loc.error(
                        format!("{}.name", item.field),
                        format!("{what} \"{name}\" is also defined at {} ({}) with different settings; definitions with one name must be identical — make them equal or rename one", first.loc, first.field),
                    ));
                }
            }
        }
    }
}

fn extend_network(
    existing: &mut Placed<NetworkFragment>,
    new: Placed<NetworkFragment>,
    errors: &mut Vec<ConfigError>,
) {
    let name = existing.item.name.clone();
    let conflict = |errors: &mut Vec<ConfigError>, what: &str, a: String, b: String| {
        errors.push(new.loc.error(
            format!("{}.{what}", new.field),
            format!(
                "network \"{name}\" has {what} {b} here but {a} at {} ({})",
                existing.loc, existing.field
            ),
        ));
    };
    let n = new.item.clone();
    match (existing.item.topology, n.topology) {
        (Some(a), Some(b)) if a != b => {
            conflict(errors, "topology", format!("{a:?}"), format!("{b:?}"))
        }
        (None, Some(b)) => existing.item.topology = Some(b),
        _ => {}
    }
    if !n.subnets.is_empty() {
        if existing.item.subnets.is_empty() {
            existing.item.subnets = n.subnets;
        } else if existing.item.subnets != n.subnets {
            conflict(
                errors,
                "subnet",
                format!("{:?}", existing.item.subnets),
                format!("{:?}", n.subnets),
            );
        }
    }
    match (&existing.item.vrf, &n.vrf) {
        (Some(a), Some(b)) if a != b => conflict(errors, "vrf", a.clone(), b.clone()),
        (None, Some(b)) => existing.item.vrf = Some(b.clone()),
        _ => {}
    }
    for host in n.host_subnets {
        if !existing.item.host_subnets.contains(&host) {
            existing.item.host_subnets.push(host);
        }
    }
    for ip in n.egress_ips {
        if !existing.item.egress_ips.contains(&ip) {
            existing.item.egress_ips.push(ip);
        }
    }
    for (k, v) in n.labels {
        existing.item.labels.entry(k).or_insert(v);
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::super::load::{load_sources, load_str};
    use super::*;
    use crate::announce::model::ProbeKind;

    const FULL: &str = r#"
[node]
name = "wk1"
labels = { zone = "a" }

[[pools]]
name = "vips"
labels = { expose = "yes" }
addresses = ["172.18.20.200/29", "10.0.0.10-10.0.0.20", "2001:db8::/120"]
avoid_buggy_ips = true
[pools.service_allocation]
priority = 10
namespaces = ["web"]
namespace_selectors = [{ match_labels = { tier = "gold" } }]
service_selectors = [{ match_expressions = [{ key = "app", operator = "In", values = ["web"] }] }]

[[services]]
name = "frontend"
namespace = "web"
labels = { app = "web" }
address_pool = "vips"
load_balancer_ip = "172.18.20.201"
traffic_policy = "local"
endpoints = [{ address = "10.128.1.5", node = "wk1" }]
health = { type = "http", port = 8080, path = "/healthz", expected_status = 204, interval = "2s", timeout = "500ms", rise = 2, fall = 3 }

[[communities]]
name = "vip-community"
value = "65000:100"

[[advertisements]]
name = "all"
ip_address_pools = ["vips"]
aggregation_length = 28
communities = ["vip-community", "large:65801:0:1"]
local_pref = 150
peers = ["172.18.20.1"]
node_selectors = [{ match_labels = { zone = "a" } }]

[[networks]]
name = "default"
topology = "layer3"
subnet = "10.128.0.0/16"
host_subnet = "10.128.1.0/24"
egress_ips = ["172.18.20.210"]

[[route_advertisements]]
name = "default"
advertisements = ["PodNetwork", "EgressIP"]
network_selectors = [{ network_selection_type = "DefaultNetwork" }]
target_vrf = "default"

[[bgp.routers]]
asn = 65801
imports = [{ vrf = "blue" }]
[[bgp.routers.neighbors]]
address = "172.18.20.1"
asn = 65102
"#;

    fn net(text: &str) -> IpNet {
        text.parse().unwrap()
    }

    #[test]
    fn every_section_loads_into_the_model() {
        let config = load_str("uplink.toml", FULL).unwrap_or_else(|e| panic!("{e}"));
        let a = &config.announce;
        assert_eq!(a.node.name.as_deref(), Some("wk1"));
        assert_eq!(a.node.labels.get("zone").map(String::as_str), Some("a"));
        let pool = &a.pools[0];
        assert_eq!(pool.addresses.len(), 3);
        assert_eq!(pool.addresses[1].to_string(), "10.0.0.10-10.0.0.20");
        assert!(pool.auto_assign && pool.avoid_buggy_ips);
        let alloc = pool.service_allocation.as_ref().unwrap();
        assert_eq!(alloc.priority, Some(10));
        assert_eq!(alloc.service_selectors[0].match_expressions[0].operator, Operator::In);
        let service = &a.services[0];
        assert_eq!(service.key(), "web/frontend");
        assert_eq!(service.traffic_policy, TrafficPolicy::Local);
        let health = service.health.as_ref().unwrap();
        assert_eq!(
            health.probe,
            ProbeKind::Http {
                port: 8080,
                path: "/healthz".into(),
                expected_status: 204,
                tls: false
            }
        );
        assert_eq!(
            (health.interval, health.timeout),
            (Duration::from_secs(2), Duration::from_millis(500))
        );
        let adv = &a.advertisements[0];
        assert_eq!(
            adv.communities,
            vec![Community::Standard(65000 << 16 | 100), Community::Large(65801, 0, 1)]
        );
        assert_eq!(
            (adv.aggregation_length, adv.aggregation_length_v6, adv.local_pref),
            (28, 128, Some(150))
        );
        let network = &a.networks[0];
        assert_eq!((network.topology, network.vrf.as_str()), (Topology::Layer3, ""));
        assert_eq!(network.host_subnets, vec![net("10.128.1.0/24")]);
        assert_eq!(a.route_advertisements[0].advertisements.len(), 2);
        assert_eq!(config.bgp.routers[0].imports, vec!["blue".to_string()]);
        // JSON (show running-config) carries every section.
        let json = serde_json::to_value(&config).unwrap();
        assert_eq!(json["announce"]["pools"][0]["addresses"][0], "172.18.20.200/29");
        assert_eq!(json["announce"]["services"][0]["health"]["type"], "http");
    }

    #[test]
    fn errors_point_at_the_value_and_say_what_is_valid() {
        let text = r#"
[[pools]]
name = "p"
addresses = ["10.0.0.20-10.0.0.10", "10.0.0.1/8"]

[[services]]
name = "s"
traffic_policy = "nearest"
health = { type = "tcp" }

[[advertisements]]
name = "a"
aggregation_length = 33
node_selectors = [{ match_expressions = [{ key = "k", operator = "Maybe" }] }]
communities = ["not-an-alias"]

[[route_advertisements]]
name = "r"
advertisements = ["Everything"]
target_vrf = "blue"
"#;
        let errors = load_str("f.toml", text).unwrap_err().0;
        let found: Vec<(usize, &str)> = errors.iter().map(|e| (e.line, e.field.as_str())).collect();
        assert_eq!(
            found,
            vec![
                (4, "pools[0].addresses[0]"),
                (4, "pools[0].addresses[1]"),
                (8, "services[0].traffic_policy"),
                (9, "services[0].health.port"),
                (13, "advertisements[0].aggregation_length"),
                (19, "route_advertisements[0].advertisements[0]"),
                (20, "route_advertisements[0].target_vrf"),
            ],
            "{errors:?}"
        );
        assert!(errors[1].message.contains("did you mean 10.0.0.0/8"), "{}", errors[1].message);
        assert!(errors[2].message.contains("\"cluster\", \"local\""));
        // The unknown operator is reported even though the advertisement failed elsewhere.
        let text = "[[advertisements]]\nname = \"a\"\nnode_selectors = [{ match_expressions = [{ key = \"k\", operator = \"Maybe\" }] }]\ncommunities = [\"nope\"]\n";
        let errors = load_str("f.toml", text).unwrap_err().0;
        assert_eq!(
            errors[0].field,
            "advertisements[0].node_selectors[0].match_expressions[0].operator"
        );
        assert_eq!(errors[1].field, "advertisements[0].communities[0]");
        assert!(
            errors[1].message.contains("neither a [[communities]] alias"),
            "{}",
            errors[1].message
        );
    }

    #[test]
    fn fragments_extend_networks_and_conflicts_reject() {
        let main = "[node]\nname = \"wk1\"\n[[networks]]\nname = \"cudn3\"\ntopology = \"layer3\"\nsubnet = \"172.23.0.0/16\"\n";
        let extra = "[[networks]]\nname = \"cudn3\"\nhost_subnet = \"172.23.5.0/24\"\n";
        let config = load_sources(&[
            (PathBuf::from("main.toml"), main.to_string()),
            (PathBuf::from("conf.d/node.toml"), extra.to_string()),
        ])
        .unwrap();
        let network = &config.announce.networks[0];
        assert_eq!(
            (network.vrf.as_str(), network.host_subnets.clone()),
            ("cudn3", vec![net("172.23.5.0/24")])
        );
        assert_eq!(network.sources.len(), 2);

        let wrong = "[node]\nname = \"wk2\"\n[[networks]]\nname = \"cudn3\"\ntopology = \"layer2\"\nhost_subnet = \"172.99.0.0/24\"\n";
        let errors = load_sources(&[
            (PathBuf::from("main.toml"), main.to_string()),
            (PathBuf::from("conf.d/bad.toml"), wrong.to_string()),
        ])
        .unwrap_err()
        .0;
        let fields: Vec<&str> = errors.iter().map(|e| e.field.as_str()).collect();
        assert_eq!(
            fields,
            vec!["node.name", "networks[0].topology", "networks[0].host_subnet"],
            "{errors:?}"
        );
        assert!(errors[0].message.contains("main.toml:2:8"), "{}", errors[0].message);
    }

    #[test]
    fn identical_definitions_merge_and_different_ones_conflict() {
        let pool = "[[pools]]\nname = \"p\"\naddresses = [\"10.0.0.0/24\"]\n";
        let config = load_sources(&[
            (PathBuf::from("a.toml"), pool.to_string()),
            (PathBuf::from("b.toml"), pool.to_string()),
        ])
        .unwrap();
        assert_eq!(
            config.announce.pools[0].sources,
            vec![PathBuf::from("a.toml"), PathBuf::from("b.toml")]
        );
        let other = "[[pools]]\nname = \"p\"\naddresses = [\"10.0.1.0/24\"]\n";
        let errors = load_sources(&[
            (PathBuf::from("a.toml"), pool.to_string()),
            (PathBuf::from("b.toml"), other.to_string()),
        ])
        .unwrap_err()
        .0;
        assert_eq!(errors.len(), 1);
        assert_eq!(
            (errors[0].file.as_path(), errors[0].field.as_str()),
            (std::path::Path::new("b.toml"), "pools[0].name")
        );
        assert!(errors[0].message.contains("also defined at a.toml:2:8"), "{}", errors[0].message);
    }

    #[test]
    fn dual_stack_service_fields_load() {
        let text = r#"
[[pools]]
name = "vips"
addresses = ["192.0.2.0/28", "2001:db8::/120"]

[[services]]
name = "pair"
ip_family_policy = "require-dual-stack"
ip_families = ["ipv6", "ipv4"]
load_balancer_ips = ["192.0.2.5", "2001:db8::5"]

[[services]]
name = "k8s-spelling"
ip_family_policy = "PreferDualStack"
ip_families = ["IPv4"]

[[services]]
name = "plain"
load_balancer_ip = "192.0.2.6"
"#;
        let config = load_str("f.toml", text).unwrap_or_else(|e| panic!("{e}"));
        let s = &config.announce.services;
        assert_eq!(s[0].ip_family_policy, IpFamilyPolicy::RequireDualStack);
        assert_eq!(s[0].ip_families, vec![IpFamily::Ipv6, IpFamily::Ipv4]);
        // Primary family first, as ip_families orders them.
        let want: Vec<IpAddr> = vec!["2001:db8::5".parse().unwrap(), "192.0.2.5".parse().unwrap()];
        assert_eq!(s[0].load_balancer_ips, want);
        assert_eq!(
            (s[1].ip_family_policy, s[1].ip_families.clone()),
            (IpFamilyPolicy::PreferDualStack, vec![IpFamily::Ipv4])
        );
        assert_eq!(s[2].ip_family_policy, IpFamilyPolicy::SingleStack);
        assert_eq!(s[2].load_balancer_ips, vec!["192.0.2.6".parse::<IpAddr>().unwrap()]);
        let json = serde_json::to_value(&config).unwrap();
        assert_eq!(json["announce"]["services"][0]["ip_family_policy"], "require-dual-stack");
        assert_eq!(json["announce"]["services"][0]["ip_families"][0], "ipv6");
    }

    #[test]
    fn dual_stack_errors_name_line_and_field() {
        let text = r#"
[[services]]
name = "both"
load_balancer_ip = "192.0.2.1"
load_balancer_ips = ["192.0.2.1"]

[[services]]
name = "policy"
ip_family_policy = "dual"

[[services]]
name = "families"
ip_families = ["ipv4", "ipv5", "ipv4"]

[[services]]
name = "single-two-families"
ip_families = ["ipv4", "ipv6"]

[[services]]
name = "same-family"
ip_family_policy = "prefer-dual-stack"
load_balancer_ips = ["192.0.2.1", "192.0.2.2"]

[[services]]
name = "single-two-addresses"
load_balancer_ips = ["192.0.2.1", "2001:db8::1"]

[[services]]
name = "require-one"
ip_family_policy = "require-dual-stack"
load_balancer_ip = "192.0.2.1"

[[services]]
name = "mismatch"
ip_families = ["ipv6"]
load_balancer_ips = ["192.0.2.1"]
"#;
        let errors = load_str("f.toml", text).unwrap_err().0;
        let found: Vec<(usize, &str)> = errors.iter().map(|e| (e.line, e.field.as_str())).collect();
        assert_eq!(
            found,
            vec![
                (5, "services[0].load_balancer_ips"),
                (9, "services[1].ip_family_policy"),
                (13, "services[2].ip_families[1]"),
                (13, "services[2].ip_families[2]"),
                (17, "services[3].ip_families"),
                (22, "services[4].load_balancer_ips[1]"),
                (26, "services[5].load_balancer_ips"),
                (31, "services[6].load_balancer_ip"),
                (36, "services[7].load_balancer_ips[0]"),
            ],
            "{errors:?}"
        );
        let message = |i: usize| errors[i].message.clone();
        assert!(message(0).contains("either load_balancer_ip (line 4) or load_balancer_ips"));
        assert!(message(1).contains("\"require-dual-stack\""), "{}", message(1));
        assert!(message(3).contains("IPv4 is listed twice"), "{}", message(3));
        assert!(message(4).contains("single-stack takes one family"), "{}", message(4));
        assert!(message(5).contains("192.0.2.1 is IPv4 too"), "{}", message(5));
        assert!(message(6).contains("ip_family_policy"), "{}", message(6));
        assert!(message(7).contains("add the IPv6 address"), "{}", message(7));
        assert!(message(8).contains("ip_families asks for IPv6"), "{}", message(8));
        assert!(errors[0].to_string().contains("f.toml:5"), "{}", errors[0]);
    }

    /// The example in docs/announcements.md must load and mean what it says.
    #[test]
    fn documented_example_loads() {
        let path =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/announcements.md");
        let doc = std::fs::read_to_string(&path).unwrap();
        let start = doc.find("```toml\n").unwrap() + "```toml\n".len();
        let end = start + doc[start..].find("```").unwrap();
        // The example ends with its [[bgp.routers]] table: give it a neighbor.
        let text = format!(
            "{}[[bgp.routers.neighbors]]\naddress = \"172.18.20.1\"\nasn = 65102\n",
            &doc[start..end]
        );
        let config = load_str("announcements.md", &text).unwrap_or_else(|e| panic!("{e}"));
        let a = &config.announce;
        assert_eq!((a.pools.len(), a.services.len(), a.advertisements.len()), (1, 1, 1));
        assert_eq!(a.route_advertisements[0].network_selectors.len(), 2);
        let result = crate::announce::compute_config(&config, Default::default());
        // The service has a health check and no verdict yet: withdrawn, with the reason.
        assert!(result.candidates.iter().any(|c| c.prefix == Some(net("192.0.2.5/32"))));
        let default = result.router("").unwrap();
        assert!(default.originate.contains_key(&net("10.128.7.0/24")));
        assert!(default.originate.contains_key(&net("172.18.20.201/32")));
    }
}
