//! Layer 2 mode (MetalLB's `L2Advertisement`): which node answers ARP (IPv4) and NDP (IPv6)
//! for a Service's addresses. A pure function of what every node knows alike — the
//! advertisements, the Services' ready endpoints, and the alive members with the
//! advertisements that select each (a node says its own in its membership identity, so its
//! labels need not be known elsewhere) — so every node computes the same answer and no leader
//! is elected.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt;
use std::net::IpAddr;
use std::sync::Arc;

use ring::digest::{digest, SHA256};
use serde::Serialize;

use super::allocate::{Allocation, ServiceKey};
use super::compute::EXCLUDE_LABEL;
use crate::config::announce::{AnnounceConfig, L2Advertisement, Pool, Service, TrafficPolicy};
use crate::config::selector::any_matches;

/// The alive members, each with the names of the layer 2 advertisements that select it.
pub type Members = BTreeMap<String, BTreeSet<String>>;

/// The layer 2 advertisements whose `node_selectors` select this node (none when it is
/// labelled out of external load balancers or its network is unavailable, as MetalLB): what
/// this node says of itself in the membership.
pub fn selected_by(config: &AnnounceConfig) -> BTreeSet<String> {
    let labels = config.node.effective_labels();
    if labels.contains_key(EXCLUDE_LABEL) || config.node.network_unavailable {
        return BTreeSet::new();
    }
    config
        .l2_advertisements
        .iter()
        .filter(|adv| any_matches(&adv.node_selectors, &labels))
        .map(|adv| adv.name.clone())
        .collect()
}

/// The interfaces an address is answered on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Interfaces {
    /// Every interface that does ARP or NDP (an advertisement without `interfaces`).
    All,
    Only(BTreeSet<String>),
}

/// Why this node answers for a Service's addresses, or does not.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "state")]
pub enum L2State {
    Answering,
    /// Another node answers: it ranks first among the candidates, this node among them.
    RankedBelow {
        node: Arc<str>,
    },
    /// No layer 2 advertisement of the pool selects this node.
    NotSelected,
    /// `externalTrafficPolicy: Local`, and this node has no ready endpoint.
    NoLocalEndpoint,
    /// No ready endpoint anywhere: nobody answers.
    NoReadyEndpoint,
    /// No alive member may answer.
    NoCandidate,
}

impl fmt::Display for L2State {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            L2State::Answering => f.write_str("this node answers"),
            L2State::RankedBelow { node } => write!(f, "{node} answers (ranks first)"),
            L2State::NotSelected => f.write_str("no L2Advertisement of the pool selects this node"),
            L2State::NoLocalEndpoint => {
                f.write_str("externalTrafficPolicy Local: no ready endpoint on this node")
            }
            L2State::NoReadyEndpoint => f.write_str("no ready endpoint"),
            L2State::NoCandidate => f.write_str("no alive node may answer"),
        }
    }
}

/// One Service's addresses in layer 2 mode.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct L2Service {
    pub service: ServiceKey,
    /// Primary first: the first one ranks the nodes.
    pub addresses: Vec<IpAddr>,
    pub pool: Arc<str>,
    /// The node that answers, if any.
    pub answering: Option<Arc<str>>,
    pub state: L2State,
    /// Where this node answers (when it does): the union of the interfaces of the
    /// advertisements that select it. Shared by the pool's Services.
    pub interfaces: Arc<Interfaces>,
}

/// Every Service with an address in a pool that a layer 2 advertisement applies to, in key
/// order, with the node that answers for it among `members` (this node included when it is
/// alive in its own view: always).
pub fn elect(
    config: &AnnounceConfig,
    allocation: &Allocation,
    members: &Members,
) -> Vec<L2Service> {
    if config.l2_advertisements.is_empty() {
        return Vec::new();
    }
    let node = config.node.name.as_deref().unwrap_or_default();
    let own = selected_by(config);
    // What every Service of a pool shares, and the members' names, made once: thousands of
    // Services hold a copy of each only by pointer.
    let mut pools: HashMap<&str, Option<PoolInL2<'_>>> = HashMap::new();
    let names: Vec<(&str, &BTreeSet<String>, Arc<str>)> =
        members.iter().map(|(name, by)| (name.as_str(), by, Arc::from(name.as_str()))).collect();
    let mut out = Vec::new();
    for service in &config.services {
        let Some((service_key, Ok(assigned))) = allocation.services.get_key_value(&*service.key)
        else {
            continue;
        };
        let in_l2 = pools
            .entry(&*assigned.pool)
            .or_insert_with(|| PoolInL2::of(config, &assigned.pool, &own));
        let Some(pool) = in_l2 else { continue };
        let addresses: Vec<IpAddr> = assigned.ips().collect();
        let Some(first) = addresses.first().copied() else { continue };
        let serves = |member: &str| has_ready_endpoint(service, member);
        let candidates = names
            .iter()
            .filter(|(member, selected, _)| pool.selects(selected) && serves(member))
            .map(|(member, _, _)| *member);
        let answering = answering_node(candidates, first)
            .and_then(|name| names.iter().find(|(member, ..)| *member == name))
            .map(|(_, _, shared)| shared.clone());
        let state = if answering.as_deref() == Some(node) {
            L2State::Answering
        } else if !any_ready_endpoint(service) {
            L2State::NoReadyEndpoint
        } else if !pool.selects_this_node {
            L2State::NotSelected
        } else if !serves(node) {
            L2State::NoLocalEndpoint
        } else if let Some(other) = &answering {
            L2State::RankedBelow { node: other.clone() }
        } else {
            L2State::NoCandidate
        };
        out.push(L2Service {
            service: service_key.clone(),
            addresses,
            pool: pool.name.clone(),
            answering,
            state,
            interfaces: pool.interfaces.clone(),
        });
    }
    out.sort_by(|a, b| a.service.cmp(&b.service));
    out
}

/// A pool's layer 2 advertisements as this node sees them.
struct PoolInL2<'a> {
    name: Arc<str>,
    advertisements: Vec<&'a L2Advertisement>,
    selects_this_node: bool,
    /// Where this node answers for the pool's addresses.
    interfaces: Arc<Interfaces>,
}

impl<'a> PoolInL2<'a> {
    /// `None` when no layer 2 advertisement applies to the pool.
    fn of(config: &'a AnnounceConfig, name: &str, own: &BTreeSet<String>) -> Option<Self> {
        let pool = config.pool(name)?;
        let advertisements: Vec<&L2Advertisement> =
            config.l2_advertisements.iter().filter(|adv| applies(adv, pool)).collect();
        if advertisements.is_empty() {
            return None;
        }
        let selecting = advertisements.iter().copied().filter(|adv| own.contains(&adv.name));
        Some(PoolInL2 {
            name: Arc::from(name),
            selects_this_node: advertisements.iter().any(|adv| own.contains(&adv.name)),
            interfaces: Arc::new(interfaces(selecting)),
            advertisements,
        })
    }

    /// Whether a member selected by these advertisements may answer for the pool.
    fn selects(&self, selected_by: &BTreeSet<String>) -> bool {
        self.advertisements.iter().any(|adv| selected_by.contains(&adv.name))
    }
}

/// Whether a layer 2 advertisement applies to `pool`.
pub fn in_layer2(config: &AnnounceConfig, pool: &Pool) -> bool {
    config.l2_advertisements.iter().any(|adv| applies(adv, pool))
}

/// Whether `advertisement` applies to `pool`: by name, by label, or (naming none) to all.
fn applies(advertisement: &L2Advertisement, pool: &Pool) -> bool {
    advertisement.ip_address_pools.contains(&pool.name)
        || advertisement.ip_address_pool_selectors.iter().any(|s| s.matches(&pool.labels))
        || (advertisement.ip_address_pools.is_empty()
            && advertisement.ip_address_pool_selectors.is_empty())
}

/// A Service's traffic reaches `node`'s answer: for `Local`, a ready endpoint on it; for
/// `Cluster`, one anywhere (kube-proxy forwards). A Service that lists no endpoints and may
/// be announced without (a file's plain address) is served everywhere.
fn has_ready_endpoint(service: &Service, node: &str) -> bool {
    match service.traffic_policy {
        TrafficPolicy::Cluster => any_ready_endpoint(service),
        TrafficPolicy::Local => {
            (service.endpoints.is_empty() && service.announce_without_endpoints)
                || service.endpoints.iter().any(|e| *e.node == *node)
        }
    }
}

fn any_ready_endpoint(service: &Service) -> bool {
    !service.endpoints.is_empty() || service.announce_without_endpoints
}

/// The interfaces of these advertisements together; all of them if one names none.
fn interfaces<'a>(advertisements: impl Iterator<Item = &'a L2Advertisement>) -> Interfaces {
    let mut named = BTreeSet::new();
    for adv in advertisements {
        if adv.interfaces.is_empty() {
            return Interfaces::All;
        }
        named.extend(adv.interfaces.iter().cloned());
    }
    Interfaces::Only(named)
}

/// The node that answers for a Service whose first address is `first`, among the `eligible`
/// ones: MetalLB's choice (its speaker's `ShouldAnnounce`), each node ranked by the SHA-256 of
/// `"<node>#<first address>"`, the lowest first. The same node as MetalLB's speakers would
/// choose, so a fleet moving from MetalLB to uplink does not move its VIPs, and the Services'
/// addresses spread over the nodes rather than all landing on one.
pub fn answering_node<'a>(
    eligible: impl IntoIterator<Item = &'a str>,
    first: IpAddr,
) -> Option<&'a str> {
    let address = first.to_string();
    eligible.into_iter().min_by_key(|node| rank(node, &address))
}

/// A node's place for an address: the digest's bytes, compared as MetalLB compares them.
fn rank(node: &str, address: &str) -> [u8; 32] {
    let mut text = String::with_capacity(node.len() + 1 + address.len());
    text.push_str(node);
    text.push('#');
    text.push_str(address);
    let mut out = [0u8; 32];
    out.copy_from_slice(digest(&SHA256, text.as_bytes()).as_ref());
    out
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::super::allocate::allocate;
    use super::super::allocate::tests_support::{pool, service};
    use super::*;
    use crate::config::announce::{Endpoint, Node};
    use crate::config::selector::LabelSelector;

    fn l2(
        name: &str,
        pools: &[&str],
        node_selectors: &[&str],
        interfaces: &[&str],
    ) -> L2Advertisement {
        L2Advertisement {
            name: name.into(),
            ip_address_pools: pools.iter().map(|p| p.to_string()).collect(),
            ip_address_pool_selectors: vec![],
            node_selectors: node_selectors
                .iter()
                .map(|host| LabelSelector {
                    match_labels: [("kubernetes.io/hostname".to_string(), host.to_string())].into(),
                    match_expressions: vec![],
                })
                .collect(),
            interfaces: interfaces.iter().map(|i| i.to_string()).collect(),
            sources: Default::default(),
        }
    }

    /// `web` at 192.0.2.1 (ranked wk3, wk1, wk2: see the test below) in the `l2` pool, and
    /// `db` in a pool no layer 2 advertisement names, seen from `node`.
    fn config(node: &str, l2_advertisements: Vec<L2Advertisement>) -> AnnounceConfig {
        let mut web = service("shop", "web");
        web.load_balancer_ips = smallvec::smallvec!["192.0.2.1".parse().unwrap()];
        let mut db = service("shop", "db");
        db.load_balancer_ips = smallvec::smallvec!["198.51.100.1".parse().unwrap()];
        AnnounceConfig {
            node: Node { name: Some(node.into()), ..Default::default() },
            pools: vec![pool("l2", &["192.0.2.0/24"]), pool("bgp", &["198.51.100.0/24"])],
            services: vec![Arc::new(web), Arc::new(db)],
            l2_advertisements,
            ..Default::default()
        }
    }

    fn members(entries: &[(&str, &[&str])]) -> Members {
        entries
            .iter()
            .map(|(node, by)| (node.to_string(), by.iter().map(|b| b.to_string()).collect()))
            .collect()
    }

    fn web(config: &AnnounceConfig, members: &Members) -> L2Service {
        let allocation = allocate(&config.pools, &config.services);
        let elected = elect(config, &allocation, members);
        elected.into_iter().find(|s| &*s.service == "shop/web").expect("web in layer 2")
    }

    #[test]
    fn every_node_elects_the_same_one_and_says_why_it_is_not_it() {
        let all = members(&[("wk1", &["adv"]), ("wk2", &["adv"]), ("wk3", &["adv"])]);
        let advs = || vec![l2("adv", &["l2"], &[], &["eth1"])];
        // `db`'s pool has no layer 2 advertisement: not in layer 2 mode.
        let config_wk3 = config("wk3", advs());
        let allocation = allocate(&config_wk3.pools, &config_wk3.services);
        let elected: Vec<_> = elect(&config_wk3, &allocation, &all);
        assert_eq!(elected.iter().map(|s| &*s.service).collect::<Vec<_>>(), ["shop/web"]);
        let on_wk3 = web(&config("wk3", advs()), &all);
        assert_eq!(on_wk3.answering.as_deref(), Some("wk3"));
        assert_eq!(on_wk3.state, L2State::Answering);
        assert_eq!(*on_wk3.interfaces, Interfaces::Only(["eth1".to_string()].into()));
        let on_wk1 = web(&config("wk1", advs()), &all);
        assert_eq!(on_wk1.answering.as_deref(), Some("wk3"));
        assert_eq!(on_wk1.state, L2State::RankedBelow { node: "wk3".into() });
        // wk3 no longer alive: the next in the address's order.
        let without_wk3 = members(&[("wk1", &["adv"]), ("wk2", &["adv"])]);
        assert_eq!(web(&config("wk1", advs()), &without_wk3).state, L2State::Answering);
        // A member the pool's advertisements do not select is passed over.
        let wk3_elsewhere = members(&[("wk1", &["adv"]), ("wk2", &["adv"]), ("wk3", &["other"])]);
        assert_eq!(web(&config("wk1", advs()), &wk3_elsewhere).state, L2State::Answering);
    }

    #[test]
    fn node_selectors_interfaces_and_exclusion_decide_what_this_node_says_of_itself() {
        let advs = vec![
            l2("on-wk1", &["l2"], &["wk1"], &["eth1"]),
            l2("on-wk2", &["l2"], &["wk2"], &["eth2"]),
            l2("anywhere-else", &["bgp"], &[], &[]),
        ];
        let on_wk1 = config("wk1", advs.clone());
        assert_eq!(
            selected_by(&on_wk1),
            ["anywhere-else", "on-wk1"].map(String::from).into_iter().collect()
        );
        let only_wk2 = members(&[("wk1", &["anywhere-else"]), ("wk2", &["on-wk2"])]);
        let elected = web(&config("wk1", vec![advs[0].clone(), advs[1].clone()]), &only_wk2);
        assert_eq!(elected.answering.as_deref(), Some("wk2"));
        let mut excluded = config("wk1", advs.clone());
        excluded.node.labels.insert(EXCLUDE_LABEL.into(), String::new());
        assert!(selected_by(&excluded).is_empty());
        let mut unavailable = config("wk1", advs.clone());
        unavailable.node.network_unavailable = true;
        assert!(selected_by(&unavailable).is_empty());
        let not_selected = config("wk3", vec![advs[0].clone(), advs[1].clone()]);
        assert_eq!(web(&not_selected, &only_wk2).state, L2State::NotSelected);
        // Two advertisements select the node: their interfaces together; one without any
        // means every interface.
        let both = l2("both", &["l2"], &[], &["eth9"]);
        let config = config("wk1", vec![advs[0].clone(), both]);
        let all = members(&[("wk1", &["on-wk1", "both"])]);
        assert_eq!(
            *web(&config, &all).interfaces,
            Interfaces::Only(["eth1", "eth9"].map(String::from).into_iter().collect())
        );
        let mut every = config.clone();
        every.l2_advertisements.push(l2("every", &[], &[], &[]));
        assert_eq!(*web(&every, &all).interfaces, Interfaces::All);
    }

    #[test]
    fn traffic_policy_local_elects_among_the_nodes_with_a_ready_endpoint() {
        let all = members(&[("wk1", &["adv"]), ("wk2", &["adv"]), ("wk3", &["adv"])]);
        let mut config = config("wk3", vec![l2("adv", &[], &[], &[])]);
        let mut web = Service::clone(&config.services[0]);
        web.traffic_policy = TrafficPolicy::Local;
        web.announce_without_endpoints = false;
        web.endpoints =
            Arc::new([Endpoint { address: "10.244.2.5".parse().unwrap(), node: "wk2".into() }]);
        config.services[0] = Arc::new(web.clone());
        let elected = super::tests::web(&config, &all);
        assert_eq!(elected.answering.as_deref(), Some("wk2"));
        assert_eq!(elected.state, L2State::NoLocalEndpoint);
        // wk2's endpoint gone, one on wk1: wk1 takes over.
        web.endpoints =
            Arc::new([Endpoint { address: "10.244.1.5".parse().unwrap(), node: "wk1".into() }]);
        config.services[0] = Arc::new(web.clone());
        assert_eq!(super::tests::web(&config, &all).answering.as_deref(), Some("wk1"));
        // No ready endpoint anywhere: nobody answers.
        web.endpoints = Arc::new([]);
        config.services[0] = Arc::new(web);
        let elected = super::tests::web(&config, &all);
        assert_eq!((elected.answering, elected.state), (None, L2State::NoReadyEndpoint));
    }

    /// The order of `sha256("<node>#<address>")` (worked out with Python's hashlib): each
    /// address has its own order, so the addresses spread over the nodes.
    #[test]
    fn the_lowest_digest_of_node_and_address_answers() {
        let nodes = ["wk1", "wk2", "wk3"];
        let first = |address: &str| answering_node(nodes, address.parse().unwrap());
        assert_eq!(first("192.0.2.1"), Some("wk3"));
        assert_eq!(first("192.0.2.2"), Some("wk1"));
        assert_eq!(first("2001:db8::1"), Some("wk3"));
        // wk3 gone: the next in 192.0.2.1's order; the order of the list does not matter.
        assert_eq!(answering_node(["wk2", "wk1"], "192.0.2.1".parse().unwrap()), Some("wk1"));
        assert_eq!(answering_node([], "192.0.2.1".parse().unwrap()), None);
    }
}
