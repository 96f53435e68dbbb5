//! One file's announcement sections → a validated fragment, every problem reported.

use std::net::IpAddr;
use std::path::Path;
use std::str::FromStr;
use std::sync::Arc;

use ipnet::IpNet;

use super::model::*;
use super::raw::*;
use super::{DEFAULT_FALL, DEFAULT_HEALTH_INTERVAL, DEFAULT_HEALTH_TIMEOUT, DEFAULT_RISE};
use crate::config::check::{is_device_name, Checker};
use crate::config::community::Community;
use crate::config::error::{ConfigError, Loc};
use crate::config::raw::S;
use crate::config::selector::{LabelSelector, Operator, Requirement};
use crate::config::source::SourceText;

/// An item with where it was written.
#[derive(Debug, Clone)]
pub(crate) struct Placed<T> {
    pub item: T,
    pub loc: Loc,
    /// Shared, as `loc`'s file.
    pub field: Arc<str>,
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

#[derive(Debug, Clone, Default)]
pub(crate) struct AnnounceFragment {
    pub node_name: Option<Placed<String>>,
    pub node_labels: Vec<Placed<(String, String)>>,
    pub pools: Vec<Placed<Pool>>,
    pub services: Vec<Placed<Arc<Service>>>,
    pub advertisements: Vec<Placed<PendingAdvertisement>>,
    pub l2_advertisements: Vec<Placed<L2Advertisement>>,
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

/// Label selectors, address ranges: the announcement-only value checks.
fn selector(
    check: &mut Checker<'_, '_>,
    raw: &S<RawSelector>,
    field: &str,
) -> Option<LabelSelector> {
    let raw = raw.get_ref();
    let mut ok = true;
    let mut expressions = Vec::new();
    for (index, requirement) in raw.match_expressions.iter().enumerate() {
        let r = requirement.get_ref();
        let name = format!("{field}.match_expressions[{index}]");
        let Some(operator) = Operator::parse(r.operator.get_ref()) else {
            check.fail(
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
            check.fail(requirement, &format!("{name}.values"), message);
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

fn selectors(
    check: &mut Checker<'_, '_>,
    raws: &[S<RawSelector>],
    field: &str,
) -> Vec<LabelSelector> {
    raws.iter()
        .enumerate()
        .filter_map(|(i, s)| selector(check, s, &format!("{field}[{i}]")))
        .collect()
}

fn range(check: &mut Checker<'_, '_>, value: &S<String>, field: &str) -> Option<AddressRange> {
    let text = value.get_ref().trim();
    if let Some((a, b)) = text.split_once('-') {
        let (Ok(first), Ok(last)) = (IpAddr::from_str(a.trim()), IpAddr::from_str(b.trim())) else {
            check.fail(
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
            check.fail(value, field, format!("\"{text}\": both ends must be of one family and the first must not be above the last"));
            return None;
        }
        return Some(AddressRange { first, last, cidr: None });
    }
    match IpNet::from_str(text) {
        Ok(net) if net.trunc() == net => {
            Some(AddressRange { first: net.network(), last: net.broadcast(), cidr: Some(net) })
        }
        Ok(net) => {
            check.fail(
                value,
                field,
                format!("{text} has host bits set; did you mean {}?", net.trunc()),
            );
            None
        }
        Err(_) => {
            check.fail(value, field, format!("\"{text}\" is neither a CIDR (\"192.0.2.0/24\") nor a range (\"192.0.2.10-192.0.2.20\")"));
            None
        }
    }
}

/// Validates one file's announcement sections.
pub(crate) fn validate(
    source: &SourceText<'_>,
    raw: RawAnnounce,
    errors: &mut Vec<ConfigError>,
) -> AnnounceFragment {
    let mut check = Checker::new(source, errors);
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
                field: format!("node.labels.{key}").into(),
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
                Placed { item: pool, loc, field: field.into() },
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
                Placed { item: Arc::new(service), loc, field: field.into() },
                |service| service.key.to_string(),
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
                Placed { item: adv, loc, field: field.into() },
                |a| a.advertisement.name.clone(),
                "advertisement",
            );
        }
    }
    for (index, raw) in raw.l2_advertisements.iter().enumerate() {
        let field = format!("l2_advertisements[{index}]");
        if let Some(adv) = l2_advertisement(&mut check, raw.get_ref(), &field, &file) {
            let loc = check.loc(&raw.get_ref().name);
            push_unique(
                &mut check,
                &mut out.l2_advertisements,
                Placed { item: adv, loc, field: field.into() },
                |a| a.name.clone(),
                "L2 advertisement",
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
            Placed { item: CommunityAlias { name, value }, loc, field: field.into() },
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
                Placed { item: network, loc, field: field.into() },
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
                Placed { item: ra, loc, field: field.into() },
                |r| r.name.clone(),
                "route advertisement",
            );
        }
    }
    // A reload keeps each Kubernetes object's fragment (`config/manifest/cache.rs`): a Vec
    // grown for one Service holds room for four, 1.4 KB a Service at a cluster's size.
    out.services.shrink_to_fit();
    out
}

/// One name once per file.
fn push_unique<T>(
    check: &mut Checker<'_, '_>,
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

fn pool(check: &mut Checker<'_, '_>, raw: &RawPool, field: &str, file: &Arc<Path>) -> Option<Pool> {
    let name = check.name(&raw.name, &format!("{field}.name"));
    let mut addresses = Vec::new();
    for (index, text) in raw.addresses.iter().enumerate() {
        if let Some(range) = range(check, text, &format!("{field}.addresses[{index}]")) {
            addresses.push(range);
        }
    }
    let service_allocation = raw.service_allocation.as_ref().map(|alloc| {
        let a = alloc.get_ref();
        ServiceAllocation {
            priority: a.priority.as_ref().and_then(|p| {
                check.int_in(
                    p,
                    &format!("{field}.service_allocation.priority"),
                    i64::from(i32::MIN)..=i64::from(i32::MAX),
                    "priority",
                )
            }),
            namespaces: a.namespaces.clone(),
            namespace_selectors: selectors(
                check,
                &a.namespace_selectors,
                &format!("{field}.service_allocation.namespace_selectors"),
            ),
            service_selectors: selectors(
                check,
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
        sources: smallvec::smallvec![file.clone()],
    })
}

fn service(
    check: &mut Checker<'_, '_>,
    raw: &RawService,
    field: &str,
    file: &Arc<Path>,
) -> Option<Service> {
    let name = check.name(&raw.name, &format!("{field}.name"));
    let namespace = match &raw.namespace {
        Some(ns) => check.name(ns, &format!("{field}.namespace")).filter(|namespace| {
            // The `/` ends the namespace in the Service's key (`namespace/name`): one in the
            // namespace would make two Services' keys the same. Kubernetes allows none.
            let fine = !namespace.contains('/');
            if !fine {
                check.fail(ns, &format!("{field}.namespace"), "must not contain '/'");
            }
            fine
        }),
        None => Some("default".to_string()),
    };
    let families = ip_families(check, raw, field);
    let load_balancer_ips = load_balancer_ips(check, raw, field, &families)?;
    let held_ips: Addresses = ip_list(check, &raw.held_ips, &format!("{field}.held_ips"));
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
    let mut endpoints = Vec::with_capacity(raw.endpoints.len());
    for (index, endpoint) in raw.endpoints.iter().enumerate() {
        let e = endpoint.get_ref();
        let name = format!("{field}.endpoints[{index}]");
        let address = check.ip(&e.address, &format!("{name}.address"));
        let node = match &e.node {
            Some(node) => check.name(node, &format!("{name}.node")),
            None => Some(String::new()),
        };
        let node = node.map(|node| crate::config::shared::NodeName::new(&node));
        if let (Some(address), Some(node)) = (address, node) {
            endpoints.push(Endpoint { address, node });
        }
    }
    let health = match &raw.health {
        Some(h) => Some(Box::new(health(check, h.get_ref(), &format!("{field}.health"))?)),
        None => None,
    };
    let (name, namespace) = (name?, namespace?);
    Some(Service {
        key: super::service_key(&namespace, &name),
        labels: raw.labels.clone(),
        namespace_labels: crate::config::shared::labels(&raw.namespace_labels),
        address_pool: raw.address_pool.as_ref().map(|p| p.get_ref().as_str().into()),
        load_balancer_ips,
        held_ips,
        ip_family_policy: families.policy,
        ip_families: families.families,
        traffic_policy,
        endpoints: endpoints.into(),
        announce_without_endpoints: raw
            .announce_without_endpoints
            .as_ref()
            .is_none_or(|a| *a.get_ref()),
        health,
        sources: smallvec::smallvec![file.clone()],
    })
}

/// A list of addresses, each checked (`field[i]` named in an error); the valid ones. Collected
/// into what keeps them: a `Vec` collected first and turned into a Service's inline
/// [`Addresses`] stayed on the heap, with room for four (80 bytes per Service).
fn ip_list<C: FromIterator<IpAddr>>(
    check: &mut Checker<'_, '_>,
    list: &[S<String>],
    field: &str,
) -> C {
    list.iter()
        .enumerate()
        .filter_map(|(i, address)| check.ip(address, &format!("{field}[{i}]")))
        .collect()
}

/// A service's `ip_family_policy` and `ip_families`, validated together.
struct Families {
    policy: IpFamilyPolicy,
    /// Inline, as the Service keeps them: at most two, once each.
    families: IpFamilies,
}

fn ip_families(check: &mut Checker<'_, '_>, raw: &RawService, field: &str) -> Families {
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
    let mut families = IpFamilies::new();
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
            // Two families, each listed once (above): always room.
            if families.try_push(family).is_err() {
                check.fail(text, &name, format!("{family}: at most two families"));
            }
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
    check: &mut Checker<'_, '_>,
    raw: &RawService,
    field: &str,
    families: &Families,
) -> Option<Addresses> {
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
            (None, None) => return Some(Addresses::new()),
        };
    let mut ok = true;
    // Inline in the Service (see `ip_list`).
    let mut addresses = Addresses::new();
    for (value, name) in &list {
        let Some(address) = check.ip(value, name) else {
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

fn health(check: &mut Checker<'_, '_>, raw: &RawHealth, field: &str) -> Option<HealthCheck> {
    let port = |check: &mut Checker<'_, '_>| match &raw.port {
        Some(p) => check.int_in::<u16>(p, &format!("{field}.port"), 1..=65535, "TCP port"),
        None => {
            check.fail(&raw.kind, &format!("{field}.port"), "this check needs a port");
            None
        }
    };
    let probe = match raw.kind.get_ref().as_str() {
        "tcp" => ProbeKind::Tcp { port: port(check)? },
        kind @ ("http" | "https") => {
            let expected_status = match &raw.expected_status {
                Some(s) => check.int_in::<u16>(
                    s,
                    &format!("{field}.expected_status"),
                    100..=599,
                    "HTTP status",
                )?,
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
        Some(d) => check.positive_duration(d, &format!("{field}.interval"))?,
        None => DEFAULT_HEALTH_INTERVAL,
    };
    let timeout = match &raw.timeout {
        Some(d) => check.positive_duration(d, &format!("{field}.timeout"))?,
        None => DEFAULT_HEALTH_TIMEOUT.min(interval),
    };
    let rise = match &raw.rise {
        Some(n) => check.int_in(n, &format!("{field}.rise"), 1..=100, "probes")?,
        None => DEFAULT_RISE,
    };
    let fall = match &raw.fall {
        Some(n) => check.int_in(n, &format!("{field}.fall"), 1..=100, "probes")?,
        None => DEFAULT_FALL,
    };
    Some(HealthCheck { probe, interval, timeout, rise, fall })
}

fn advertisement(
    check: &mut Checker<'_, '_>,
    raw: &RawAdvertisement,
    field: &str,
    file: &Arc<Path>,
) -> Option<PendingAdvertisement> {
    let name = check.name(&raw.name, &format!("{field}.name"));
    let aggregation_length = match &raw.aggregation_length {
        Some(n) => {
            check.int_in(n, &format!("{field}.aggregation_length"), 0..=32, "prefix length")?
        }
        None => 32,
    };
    let aggregation_length_v6 = match &raw.aggregation_length_v6 {
        Some(n) => {
            check.int_in(n, &format!("{field}.aggregation_length_v6"), 0..=128, "prefix length")?
        }
        None => 128,
    };
    let local_pref = match &raw.local_pref {
        Some(n) => Some(check.int_in(
            n,
            &format!("{field}.local_pref"),
            0..=i64::from(u32::MAX),
            "LOCAL_PREF",
        )?),
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
            ip_address_pool_selectors: selectors(
                check,
                &raw.ip_address_pool_selectors,
                &format!("{field}.ip_address_pool_selectors"),
            ),
            aggregation_length,
            aggregation_length_v6,
            communities: Vec::new(),
            local_pref,
            peers: raw.peers.clone(),
            node_selectors: selectors(
                check,
                &raw.node_selectors,
                &format!("{field}.node_selectors"),
            ),
            sources: smallvec::smallvec![file.clone()],
        },
        communities,
    })
}

fn l2_advertisement(
    check: &mut Checker<'_, '_>,
    raw: &RawL2Advertisement,
    field: &str,
    file: &Arc<Path>,
) -> Option<L2Advertisement> {
    let name = check.name(&raw.name, &format!("{field}.name"));
    let mut interfaces = Vec::new();
    for (index, interface) in raw.interfaces.iter().enumerate() {
        let text = interface.get_ref().trim();
        if is_device_name(text) {
            interfaces.push(text.to_string());
        } else {
            check.fail(
                interface,
                &format!("{field}.interfaces[{index}]"),
                format!(
                    "\"{text}\" is not an interface name: 1 to 15 characters, no '/', ':' or \
                     whitespace (the kernel's IFNAMSIZ)"
                ),
            );
        }
    }
    Some(L2Advertisement {
        name: name?,
        ip_address_pools: raw.ip_address_pools.clone(),
        ip_address_pool_selectors: selectors(
            check,
            &raw.ip_address_pool_selectors,
            &format!("{field}.ip_address_pool_selectors"),
        ),
        node_selectors: selectors(check, &raw.node_selectors, &format!("{field}.node_selectors")),
        interfaces,
        sources: smallvec::smallvec![file.clone()],
    })
}

fn network(check: &mut Checker<'_, '_>, raw: &RawNetwork, field: &str) -> Option<NetworkFragment> {
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
    let egress_ips: Vec<IpAddr> = ip_list(check, &raw.egress_ips, &format!("{field}.egress_ips"));
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
    check: &mut Checker<'_, '_>,
    raw: &RawRouteAdvertisement,
    field: &str,
    file: &Arc<Path>,
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
    for (index, entry) in raw.network_selectors.iter().enumerate() {
        let s = entry.get_ref();
        let name = format!("{field}.network_selectors[{index}]");
        match s.network_selection_type.get_ref().as_str() {
            "DefaultNetwork" => network_selectors.push(NetworkSelector::DefaultNetwork),
            "ClusterUserDefinedNetworks" => match &s.cluster_user_defined_network_selector {
                Some(cudn) => {
                    if let Some(network_selector) = selector(check, &cudn.get_ref().network_selector, &format!("{name}.cluster_user_defined_network_selector.network_selector")) {
                        network_selectors.push(NetworkSelector::ClusterUserDefinedNetworks { network_selector });
                    }
                }
                None => check.fail(entry, &format!("{name}.cluster_user_defined_network_selector"), "ClusterUserDefinedNetworks needs a cluster_user_defined_network_selector"),
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
        Some(s) => selector(check, s, &format!("{field}.node_selector"))?,
        None => LabelSelector::default(),
    };
    let frr_configuration_selector = match &raw.frr_configuration_selector {
        Some(s) => selector(check, s, &format!("{field}.frr_configuration_selector"))?,
        None => LabelSelector::default(),
    };
    Some(RouteAdvertisement {
        name: name?,
        advertisements,
        network_selectors,
        node_selector,
        target_vrf,
        frr_configuration_selector,
        sources: smallvec::smallvec![file.clone()],
    })
}
