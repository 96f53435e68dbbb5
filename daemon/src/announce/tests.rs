//! Tests of [`compute`](super::compute): what each router originates and why.

use std::collections::BTreeSet;
use std::net::IpAddr;
use std::sync::Arc;

use ipnet::IpNet;

use super::allocate::tests_support::{advertisement, pool, service, tcp_check};
use super::compute::{compute, PeerSet, Reason, RouterInput, RuntimeState, State};
use super::readiness::{HealthStates, Readiness};
use crate::config::announce::*;
use crate::config::selector::LabelSelector;
use crate::config::Community;

fn net(text: &str) -> IpNet {
    text.parse().unwrap()
}

fn ip(text: &str) -> IpAddr {
    text.parse().unwrap()
}

fn labels(pairs: &[(&str, &str)]) -> Labels {
    pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

fn router(vrf: &str, neighbors: &[&str]) -> RouterInput {
    RouterInput {
        vrf: vrf.into(),
        neighbors: neighbors.iter().map(|n| ip(n)).collect(),
        imports: vec![],
        prefixes: vec![],
    }
}

fn node(name: &str, node_labels: &[(&str, &str)]) -> Node {
    Node { name: Some(name.into()), labels: labels(node_labels), network_unavailable: false }
}

/// One pool, one manual VIP, one advertisement: the node's default router originates the VIP.
fn vip_config(vip: &str) -> AnnounceConfig {
    let mut svc = service("ns", "web");
    svc.load_balancer_ips = smallvec::smallvec![ip(vip)];
    AnnounceConfig {
        node: node("wk1", &[]),
        pools: vec![pool("vips", &["172.18.20.200/29"])],
        services: vec![Arc::new(svc)],
        advertisements: vec![advertisement("all")],
        ..Default::default()
    }
}

fn originated(result: &super::Announcements, vrf: &str) -> Vec<IpNet> {
    result.router(vrf).map(|r| r.originate.keys().copied().collect()).unwrap_or_default()
}

/// A route's origins as `uplink show announcements` writes them.
fn origin_texts(route: &super::Route) -> Vec<String> {
    route.origins.iter().map(ToString::to_string).collect()
}

#[test]
fn vip_is_originated_to_all_peers_of_every_router() {
    let config = vip_config("172.18.20.201");
    let routers =
        [router("", &["172.18.20.1"]), router("blue", &["10.9.0.1"]), router("idle", &[])];
    let result = compute(&config, &routers, RuntimeState::default());
    assert_eq!(originated(&result, ""), vec![net("172.18.20.201/32")]);
    assert_eq!(originated(&result, "blue"), vec![net("172.18.20.201/32")]);
    assert!(originated(&result, "idle").is_empty(), "a router without neighbors gets nothing");
    let route = &result.router("").unwrap().originate[&net("172.18.20.201/32")];
    assert_eq!(route.peers, PeerSet::All);
    assert_eq!(origin_texts(route), ["service ns/web (advertisement all)"]);
}

#[test]
fn unhealthy_service_is_withdrawn_with_the_reason() {
    let mut config = vip_config("172.18.20.201");
    Arc::make_mut(&mut config.services[0]).health = Some(Box::new(tcp_check(8080)));
    Arc::make_mut(&mut config.services[0]).endpoints =
        Arc::new([Endpoint { address: ip("10.128.1.5"), node: "wk2".into() }]);
    let routers = [router("", &["172.18.20.1"])];
    let mut health = HealthStates::new();
    health.insert(("ns/web".into(), ip("10.128.1.5")), false);
    let result = compute(
        &config,
        &routers,
        RuntimeState { health: Some(&health), drained: false, graceful_shutdown: false },
    );
    assert!(originated(&result, "").is_empty());
    assert_eq!(
        result.candidates[0].state,
        State::Withdrawn { reason: Reason::NotReady { readiness: Readiness::NoHealthyEndpoint } }
    );
    assert_eq!(result.candidates[0].prefix, Some(net("172.18.20.201/32")));
    health.insert(("ns/web".into(), ip("10.128.1.5")), true);
    let result = compute(
        &config,
        &routers,
        RuntimeState { health: Some(&health), drained: false, graceful_shutdown: false },
    );
    assert_eq!(originated(&result, ""), vec![net("172.18.20.201/32")]);

    // local: only the node with the endpoint announces.
    Arc::make_mut(&mut config.services[0]).traffic_policy = TrafficPolicy::Local;
    let result = compute(
        &config,
        &routers,
        RuntimeState { health: Some(&health), drained: false, graceful_shutdown: false },
    );
    assert!(originated(&result, "").is_empty());
    config.node = node("wk2", &[]);
    let result = compute(
        &config,
        &routers,
        RuntimeState { health: Some(&health), drained: false, graceful_shutdown: false },
    );
    assert_eq!(originated(&result, ""), vec![net("172.18.20.201/32")]);
}

#[test]
fn drained_and_excluded_nodes_withdraw_vips() {
    let config = vip_config("172.18.20.201");
    let routers = [router("", &["172.18.20.1"])];
    let result = compute(
        &config,
        &routers,
        RuntimeState { health: None, drained: true, graceful_shutdown: false },
    );
    assert!(originated(&result, "").is_empty());
    assert_eq!(result.candidates[0].state, State::Withdrawn { reason: Reason::Drained });
    let mut excluded = config.clone();
    excluded.node.labels.insert(super::compute::EXCLUDE_LABEL.into(), String::new());
    let result = compute(&excluded, &routers, RuntimeState::default());
    assert_eq!(result.candidates[0].state, State::Withdrawn { reason: Reason::NodeExcluded });
    // A Node whose network plugin says NetworkUnavailable announces nothing (MetalLB).
    let mut unavailable = config.clone();
    unavailable.node.network_unavailable = true;
    let result = compute(&unavailable, &routers, RuntimeState::default());
    assert!(originated(&result, "").is_empty());
    assert_eq!(
        result.candidates[0].state,
        State::Withdrawn { reason: Reason::NodeNetworkUnavailable }
    );
}

#[test]
fn node_selectors_pick_the_announcing_nodes() {
    let mut config = vip_config("172.18.20.201");
    config.advertisements[0].node_selectors = vec![LabelSelector {
        match_labels: labels(&[("kubernetes.io/hostname", "wk3")]),
        match_expressions: vec![],
    }];
    let routers = [router("", &["172.18.20.1"])];
    let result = compute(&config, &routers, RuntimeState::default());
    assert!(originated(&result, "").is_empty());
    assert_eq!(
        result.candidates[0].state,
        State::Withdrawn { reason: Reason::NodeNotSelected { by: "advertisement all".into() } }
    );
    config.node = node("wk3", &[]);
    let result = compute(&config, &routers, RuntimeState::default());
    assert_eq!(originated(&result, ""), vec![net("172.18.20.201/32")]);
}

#[test]
fn advertisements_select_pools_by_name_or_label() {
    let mut config = vip_config("172.18.20.201");
    config.pools[0].labels = labels(&[("expose", "yes")]);
    config.advertisements[0].ip_address_pools = vec!["other".into()];
    let routers = [router("", &["172.18.20.1"])];
    let result = compute(&config, &routers, RuntimeState::default());
    assert_eq!(
        result.candidates[0].state,
        State::Withdrawn { reason: Reason::NoAdvertisement { pool: "vips".into() } }
    );
    config.advertisements[0].ip_address_pool_selectors = vec![LabelSelector {
        match_labels: labels(&[("expose", "yes")]),
        match_expressions: vec![],
    }];
    let result = compute(&config, &routers, RuntimeState::default());
    assert_eq!(originated(&result, ""), vec![net("172.18.20.201/32")]);
}

#[test]
fn communities_local_pref_and_peers_are_carried_per_prefix() {
    let mut config = vip_config("172.18.20.201");
    config.advertisements[0].communities = vec![Community::Standard(0xFDE8_0064)];
    config.advertisements[0].local_pref = Some(200);
    config.advertisements[0].peers = vec!["tor-b".into()];
    config.peer_names = vec![
        PeerName { name: "tor-a".into(), vrf: String::new(), address: ip("172.18.20.1") },
        PeerName { name: "tor-b".into(), vrf: String::new(), address: ip("172.18.20.2") },
    ];
    let mut second = advertisement("second");
    second.communities = vec![Community::Large(65801, 0, 1)];
    second.peers = vec!["172.18.20.3".into()];
    config.advertisements.push(second);
    let routers = [router("", &["172.18.20.1", "172.18.20.2", "172.18.20.3"])];
    let result = compute(&config, &routers, RuntimeState::default());
    let route = &result.router("").unwrap().originate[&net("172.18.20.201/32")];
    let expected: BTreeSet<Community> =
        [Community::Standard(0xFDE8_0064), Community::Large(65801, 0, 1)].into();
    assert_eq!(route.communities, expected);
    assert_eq!(route.local_pref, Some(200));
    assert_eq!(route.peers, PeerSet::Only([ip("172.18.20.2"), ip("172.18.20.3")].into()));

    config.advertisements[0].peers = vec!["nobody".into()];
    config.advertisements.truncate(1);
    let result = compute(&config, &routers, RuntimeState::default());
    assert_eq!(
        result.candidates[0].state,
        State::Withdrawn { reason: Reason::UnknownPeers { peers: vec!["nobody".into()] } }
    );
}

#[test]
fn aggregation_announces_the_aggregate_and_explains_the_members() {
    let mut config = vip_config("172.18.20.201");
    let mut second = service("ns", "api");
    second.load_balancer_ips = smallvec::smallvec![ip("172.18.20.202")];
    config.services.push(Arc::new(second));
    config.advertisements[0].aggregation_length = 24;
    config.advertisements[0].communities = vec![Community::Standard(1)];
    let routers = [router("", &["172.18.20.1"])];
    let result = compute(&config, &routers, RuntimeState::default());
    assert_eq!(originated(&result, ""), vec![net("172.18.20.0/24")]);
    let route = &result.router("").unwrap().originate[&net("172.18.20.0/24")];
    assert_eq!(
        origin_texts(route),
        ["aggregate of service ns/api", "aggregate of service ns/web"],
        "in key order"
    );
    assert!(route.communities.contains(&Community::Standard(1)));
    let members: Vec<_> = result
        .candidates
        .iter()
        .filter(|c| c.prefix.is_some_and(|p| p.prefix_len() == 32))
        .map(|c| c.state.clone())
        .collect();
    assert_eq!(members.len(), 2);
    for state in members {
        assert_eq!(
            state,
            State::Withdrawn {
                reason: Reason::AggregatedInto { aggregate: net("172.18.20.0/24") }
            }
        );
    }
    // IPv6 uses aggregation_length_v6.
    let mut v6 = vip_config("2001:db8::1");
    v6.pools = vec![pool("v6", &["2001:db8::/64"])];
    v6.advertisements[0].aggregation_length_v6 = 64;
    let result = compute(&v6, &[router("", &["2001:db8::ff"])], RuntimeState::default());
    assert_eq!(originated(&result, ""), vec![net("2001:db8::/64")]);
}

#[test]
fn allocation_failures_are_explained() {
    let mut config = vip_config("192.0.2.1");
    Arc::make_mut(&mut config.services[0]).load_balancer_ips = smallvec::smallvec![ip("192.0.2.1")];
    let result = compute(&config, &[router("", &["172.18.20.1"])], RuntimeState::default());
    assert!(matches!(
        &result.candidates[0].state,
        State::Withdrawn { reason: Reason::NoAddress { .. } }
    ));
    assert_eq!(result.candidates[0].prefix, None);
}

/// A dual-stack service from a pool with both families.
fn dual_stack_config() -> AnnounceConfig {
    let mut svc = service("ns", "web");
    svc.ip_family_policy = IpFamilyPolicy::RequireDualStack;
    svc.load_balancer_ips = smallvec::smallvec![ip("172.18.20.201"), ip("2001:db8::5")];
    AnnounceConfig {
        node: node("wk1", &[]),
        pools: vec![pool("vips", &["172.18.20.200/29", "2001:db8::/120"])],
        services: vec![Arc::new(svc)],
        advertisements: vec![advertisement("all")],
        ..Default::default()
    }
}

#[test]
fn dual_stack_service_announces_both_addresses_each_on_its_own_line() {
    let mut config = dual_stack_config();
    let routers = [router("", &["172.18.20.1", "2001:db8:ff::1"])];
    let result = compute(&config, &routers, RuntimeState::default());
    assert_eq!(originated(&result, ""), vec![net("172.18.20.201/32"), net("2001:db8::5/128")]);
    let lines: Vec<_> = result.candidates.iter().map(|c| (c.prefix, c.state.clone())).collect();
    assert_eq!(
        lines,
        vec![
            (Some(net("172.18.20.201/32")), State::Announced { peers: PeerSet::All }),
            (Some(net("2001:db8::5/128")), State::Announced { peers: PeerSet::All }),
        ]
    );

    // Each family has its own aggregation length.
    config.advertisements[0].aggregation_length = 29;
    let result = compute(&config, &routers, RuntimeState::default());
    assert_eq!(originated(&result, ""), vec![net("172.18.20.200/29"), net("2001:db8::5/128")]);
    config.advertisements[0].aggregation_length = 32;
    config.advertisements[0].aggregation_length_v6 = 120;
    let result = compute(&config, &routers, RuntimeState::default());
    assert_eq!(originated(&result, ""), vec![net("172.18.20.201/32"), net("2001:db8::/120")]);
    let member = result.candidates.iter().find(|c| c.prefix == Some(net("2001:db8::5/128")));
    assert_eq!(
        member.unwrap().state,
        State::Withdrawn { reason: Reason::AggregatedInto { aggregate: net("2001:db8::/120") } }
    );
}

#[test]
fn dual_stack_readiness_and_drain_apply_to_the_service_as_a_whole() {
    let mut config = dual_stack_config();
    Arc::make_mut(&mut config.services[0]).health = Some(Box::new(tcp_check(8080)));
    Arc::make_mut(&mut config.services[0]).endpoints =
        Arc::new([Endpoint { address: ip("10.128.1.5"), node: "wk1".into() }]);
    let routers = [router("", &["172.18.20.1"])];
    let mut health = HealthStates::new();
    health.insert(("ns/web".into(), ip("10.128.1.5")), false);
    let result = compute(
        &config,
        &routers,
        RuntimeState { health: Some(&health), drained: false, graceful_shutdown: false },
    );
    assert!(originated(&result, "").is_empty());
    let not_ready =
        State::Withdrawn { reason: Reason::NotReady { readiness: Readiness::NoHealthyEndpoint } };
    let withdrawn: Vec<_> = result.candidates.iter().map(|c| (c.prefix, c.state.clone())).collect();
    assert_eq!(
        withdrawn,
        vec![
            (Some(net("172.18.20.201/32")), not_ready.clone()),
            (Some(net("2001:db8::5/128")), not_ready),
        ]
    );
    health.insert(("ns/web".into(), ip("10.128.1.5")), true);
    let result = compute(
        &config,
        &routers,
        RuntimeState { health: Some(&health), drained: false, graceful_shutdown: false },
    );
    assert_eq!(originated(&result, "").len(), 2);
    let result = compute(
        &config,
        &routers,
        RuntimeState { health: Some(&health), drained: true, graceful_shutdown: false },
    );
    assert!(originated(&result, "").is_empty());
    assert_eq!(result.candidates.len(), 2);
    assert!(result
        .candidates
        .iter()
        .all(|c| c.state == State::Withdrawn { reason: Reason::Drained }));
}

#[test]
fn require_dual_stack_without_a_dual_pool_says_why() {
    let mut config = dual_stack_config();
    config.pools = vec![pool("vips", &["172.18.20.200/29"])];
    Arc::make_mut(&mut config.services[0]).load_balancer_ips = smallvec::smallvec![];
    let result = compute(&config, &[router("", &["172.18.20.1"])], RuntimeState::default());
    assert!(originated(&result, "").is_empty());
    let State::Withdrawn { reason } = &result.candidates[0].state else { panic!("announced") };
    assert_eq!(
        reason.to_string(),
        "no address: no candidate pool has IPv4 and IPv6 addresses (ip_family_policy require-dual-stack; candidates: vips)"
    );
}

/// The deck's default pod network: wk3 has 10.128.7.0/24 and EgressIP 172.18.20.201.
fn deck_default_network() -> AnnounceConfig {
    AnnounceConfig {
        node: node("wk3", &[("node-role.kubernetes.io/worker", "")]),
        networks: vec![Network {
            name: DEFAULT_NETWORK.into(),
            labels: Labels::new(),
            topology: Topology::Layer3,
            subnets: vec![net("10.128.0.0/16")],
            host_subnets: vec![net("10.128.7.0/24")],
            vrf: String::new(),
            egress_ips: vec![ip("172.18.20.201")],
            sources: Default::default(),
        }],
        route_advertisements: vec![RouteAdvertisement {
            name: "default".into(),
            advertisements: vec![AdvertisementKind::PodNetwork, AdvertisementKind::EgressIp],
            network_selectors: vec![NetworkSelector::DefaultNetwork],
            node_selector: LabelSelector::default(),
            target_vrf: TargetVrf::Default,
            frr_configuration_selector: LabelSelector {
                match_labels: labels(&[("routeAdvertisements", "receive-all")]),
                match_expressions: vec![],
            },
            sources: Default::default(),
        }],
        router_labels: vec![RouterLabels {
            config_name: "receive-all".into(),
            labels: labels(&[("routeAdvertisements", "receive-all")]),
            vrf: String::new(),
            neighbors: vec![ip("172.18.20.1")],
        }],
        ..Default::default()
    }
}

#[test]
fn deck_pod_network_and_egress_ip() {
    let config = deck_default_network();
    let routers = [router("", &["172.18.20.1", "172.18.20.9"])];
    let result = compute(&config, &routers, RuntimeState::default());
    // Slide 20: `network 10.128.7.0/24` and `network 172.18.20.201/32`, to 172.18.20.1 only.
    assert_eq!(originated(&result, ""), vec![net("10.128.7.0/24"), net("172.18.20.201/32")]);
    for route in result.router("").unwrap().originate.values() {
        assert_eq!(route.peers, PeerSet::Only([ip("172.18.20.1")].into()));
    }
    // A selector that matches no FRRConfiguration explains itself.
    let mut other = config.clone();
    other.router_labels[0].labels = labels(&[("routeAdvertisements", "other")]);
    let result = compute(&other, &routers, RuntimeState::default());
    assert!(originated(&result, "").is_empty());
    assert_eq!(
        result.candidates[0].state,
        State::Withdrawn { reason: Reason::NoMatchingRouter { vrf: String::new() } }
    );
    // node_selector excludes this node.
    let mut elsewhere = config;
    elsewhere.route_advertisements[0].node_selector = LabelSelector {
        match_labels: labels(&[("kubernetes.io/hostname", "wk4")]),
        match_expressions: vec![],
    };
    let result = compute(&elsewhere, &routers, RuntimeState::default());
    assert!(originated(&result, "").is_empty());
    assert!(matches!(
        &result.candidates[0].state,
        State::Withdrawn { reason: Reason::NodeNotSelected { .. } }
    ));
}

/// The same selection from plain TOML: `labels` on a `[[bgp.routers]]` table stand in for the
/// FRRConfiguration's labels, and pick that table's neighbors.
#[test]
fn frr_configuration_selector_matches_labels_on_a_toml_router() {
    let text = r#"
[[bgp.routers]]
asn = 65801
labels = { routeAdvertisements = "receive-all" }
[[bgp.routers.neighbors]]
address = "172.18.20.1"
asn = 65102
[[bgp.routers.neighbors]]
address = "172.18.20.9"
asn = 65102

[[networks]]
name = "default"
topology = "layer3"
subnet = "10.128.0.0/16"
host_subnet = "10.128.7.0/24"

[[route_advertisements]]
name = "default"
advertisements = ["PodNetwork"]
network_selectors = [{ network_selection_type = "DefaultNetwork" }]
frr_configuration_selector = { match_labels = { routeAdvertisements = "receive-all" } }
"#;
    let config = crate::config::load_str("uplink.toml", text).unwrap();
    let routers = crate::announce::router_inputs(&config);
    let result = compute(&config.announce, &routers, RuntimeState::default());
    assert_eq!(originated(&result, ""), vec![net("10.128.7.0/24")]);
    let route = result.router("").unwrap().originate.values().next().unwrap();
    assert_eq!(route.peers, PeerSet::Only([ip("172.18.20.1"), ip("172.18.20.9")].into()));

    let unlabelled = text.replace("labels = { routeAdvertisements = \"receive-all\" }\n", "");
    let config = crate::config::load_str("uplink.toml", &unlabelled).unwrap();
    let result = compute(&config.announce, &routers, RuntimeState::default());
    assert!(originated(&result, "").is_empty(), "no router carries the label");
}

fn cudn(name: &str, topology: Topology, subnet: &str, host: Option<&str>) -> Network {
    Network {
        name: name.into(),
        labels: labels(&[("export", "true")]),
        topology,
        subnets: vec![net(subnet)],
        host_subnets: host.map(net).into_iter().collect(),
        vrf: name.into(),
        egress_ips: vec![],
        sources: Default::default(),
    }
}

fn cudn_advertisement(name: &str, target_vrf: TargetVrf) -> RouteAdvertisement {
    RouteAdvertisement {
        name: name.into(),
        advertisements: vec![AdvertisementKind::PodNetwork],
        network_selectors: vec![NetworkSelector::ClusterUserDefinedNetworks {
            network_selector: LabelSelector {
                match_labels: labels(&[("export", "true")]),
                match_expressions: vec![],
            },
        }],
        node_selector: LabelSelector::default(),
        target_vrf,
        frr_configuration_selector: LabelSelector::default(),
        sources: Default::default(),
    }
}

#[test]
fn deck_layer2_cudn_is_announced_whole_from_the_default_vrf_with_leaking() {
    let config = AnnounceConfig {
        node: node("wk3", &[]),
        networks: vec![cudn("cudn2", Topology::Layer2, "172.22.0.0/16", None)],
        route_advertisements: vec![cudn_advertisement("adv-cudn1", TargetVrf::Default)],
        ..Default::default()
    };
    let result = compute(&config, &[router("", &["172.18.20.1"])], RuntimeState::default());
    // Slide 34: `network 172.22.0.0/16` in the default router, `import vrf cudn2` there and
    // `import vrf default` in cudn2's.
    assert_eq!(originated(&result, ""), vec![net("172.22.0.0/16")]);
    let default = result.router("").unwrap();
    assert_eq!(default.imports, ["cudn2".to_string()].into());
    let cudn2 = result.router("cudn2").unwrap();
    assert!(!cudn2.configured);
    assert_eq!(cudn2.imports, [String::new()].into());
    assert_eq!(cudn2.imported.get(&net("172.22.0.0/16")), Some(&String::new()));
    assert_imports_agree(&config, &[router("", &["172.18.20.1"])]);
}

/// [`super::compute::imports`], which the FIB's leaks are made from without an allocation,
/// says what [`compute`] says.
fn assert_imports_agree(config: &AnnounceConfig, routers: &[RouterInput]) {
    let full = compute(config, routers, RuntimeState::default());
    let from_compute: std::collections::BTreeMap<String, std::collections::BTreeSet<String>> =
        full.routers.iter().map(|r| (r.vrf.clone(), r.imports.clone())).collect();
    assert_eq!(super::compute::imports(config, routers), from_compute);
}

#[test]
fn deck_vrf_lite_layer3_and_layer2_from_their_own_vrfs() {
    let config = AnnounceConfig {
        node: node("wk3", &[]),
        networks: vec![
            cudn("cudn3", Topology::Layer3, "172.23.0.0/16", Some("172.23.5.0/24")),
            cudn("cudn4", Topology::Layer2, "172.24.0.0/16", None),
            cudn("cudn5", Topology::Layer3, "172.25.0.0/16", None),
        ],
        route_advertisements: vec![cudn_advertisement("advertise-vrf-lite", TargetVrf::Auto)],
        ..Default::default()
    };
    let routers = [
        router("", &["172.18.20.1"]),
        router("cudn3", &["172.19.23.1"]),
        router("cudn4", &["172.19.24.1"]),
    ];
    let result = compute(&config, &routers, RuntimeState::default());
    assert!(originated(&result, "").is_empty());
    assert_eq!(originated(&result, "cudn3"), vec![net("172.23.5.0/24")]);
    assert_eq!(originated(&result, "cudn4"), vec![net("172.24.0.0/16")]);
    // No leaking with VRF-lite.
    assert!(result.router("cudn3").unwrap().imports.is_empty());
    assert_imports_agree(&config, &routers);
    let reasons: Vec<&Reason> = result
        .candidates
        .iter()
        .filter_map(|c| match &c.state {
            State::Withdrawn { reason } => Some(reason),
            State::Announced { .. } => None,
        })
        .collect();
    assert_eq!(reasons, vec![&Reason::NoHostSubnet]);
    // Without the router in the network's VRF, the reason says so.
    let result = compute(&config, &routers[..1], RuntimeState::default());
    assert!(result
        .candidates
        .iter()
        .any(|c| c.state == State::Withdrawn { reason: Reason::NoRouter { vrf: "cudn3".into() } }));
}

#[test]
fn router_imports_list_the_routes_of_the_other_vrf() {
    let mut config = vip_config("172.18.20.201");
    config.advertisements[0].peers = vec!["172.18.20.1".into()];
    let mut blue = router("blue", &["10.9.0.1"]);
    blue.imports = vec![String::new()];
    let routers = [router("", &["172.18.20.1"]), blue];
    let result = compute(&config, &routers, RuntimeState::default());
    assert!(originated(&result, "blue").is_empty());
    let blue_router = result.router("blue").unwrap();
    assert_eq!(blue_router.imported.get(&net("172.18.20.201/32")), Some(&String::new()));
    assert_imports_agree(&config, &routers);
}

#[test]
fn router_prefixes_go_to_the_peers_their_policy_allows_and_are_imported_like_the_rest() {
    let mut config = vip_config("172.18.20.201");
    config.advertisements[0].peers = vec!["172.18.20.1".into()];
    let mut default = router("", &["172.18.20.1"]);
    default.prefixes = vec![net("10.0.0.0/24")];
    let mut blue = router("blue", &["10.9.0.1"]);
    blue.imports = vec![String::new()];
    blue.prefixes = vec![net("10.9.9.0/24")];
    let result = compute(&config, &[default, blue], RuntimeState::default());
    let own = &result.router("").unwrap().originate[&net("10.0.0.0/24")];
    assert_eq!(own.peers, PeerSet::ByPolicy);
    assert_eq!(origin_texts(own), ["router prefixes"]);
    // Imported: the default router's prefix and its VIP, not what blue itself originates.
    let blue = result.router("blue").unwrap();
    let imported: Vec<IpNet> = blue.imported.keys().copied().collect();
    assert_eq!(imported, vec![net("10.0.0.0/24"), net("172.18.20.201/32")]);
    // What blue's RIB gets: its own prefix, and the imported ones for the peers whose
    // `to_advertise` allows them (an empty widening set), without the source's attributes.
    let set = super::announced_set(&result, "blue");
    let keys: Vec<IpNet> = set.keys().copied().collect();
    assert_eq!(keys, vec![net("10.0.0.0/24"), net("10.9.9.0/24"), net("172.18.20.201/32")]);
    for route in set.values() {
        assert_eq!(route.peers, Some(BTreeSet::new()));
        assert!(route.communities.is_empty() && route.local_pref.is_none());
    }
    // A prefix announced for some peers keeps that audience when the router also lists it.
    let mut default = router("", &["172.18.20.1"]);
    default.prefixes = vec![net("172.18.20.201/32")];
    let result = compute(&config, &[default], RuntimeState::default());
    let vip = &result.router("").unwrap().originate[&net("172.18.20.201/32")];
    assert_eq!(vip.peers, PeerSet::Only([ip("172.18.20.1")].into()));
}

/// The allocation and the computation at a cluster's size, timed (docs/BENCHMARKS.md):
/// 10,000 Services with a manual address and five endpoints each, one pool, one
/// advertisement, one router.
/// `cargo test --release -p uplink --lib announcements_at_ten_thousand_services -- --ignored --nocapture`
#[test]
#[ignore]
fn announcements_at_ten_thousand_services() {
    use super::allocate::{allocate, allocate_one_more};
    use super::compute::compute_allocated;
    use super::set::announced_set;
    const SERVICES: u32 = 10_000;
    let services: Vec<Arc<Service>> = (0..SERVICES)
        .map(|i| {
            let [_, _, high, low] = i.to_be_bytes();
            let mut s = service("shop", &format!("svc-{i:05}"));
            s.load_balancer_ips = smallvec::smallvec![IpAddr::from([10, 200, high, low])];
            s.announce_without_endpoints = false;
            s.endpoints = (0..5u8)
                .map(|k| Endpoint {
                    address: IpAddr::from([10, 128, low, k]),
                    node: format!("n{:03}", (i * 5 + u32::from(k)) % 500).as_str().into(),
                })
                .collect();
            Arc::new(s)
        })
        .collect();
    let mut all = advertisement("all");
    all.ip_address_pools = vec!["vips".into()];
    let config = AnnounceConfig {
        node: node("wk1", &[]),
        pools: vec![pool("vips", &["10.200.0.0/16"])],
        services,
        advertisements: vec![all],
        ..Default::default()
    };
    let routers = [router("", &["10.99.1.1"])];
    let rounds = 30;
    let started = std::time::Instant::now();
    let allocation = Arc::new(allocate(&config.pools, &config.services));
    let full = started.elapsed();
    // One more Service with an address of its own: the last allocation plus it.
    let mut more = config.services.clone();
    let mut new = service("shop", "svc-new");
    new.load_balancer_ips = smallvec::smallvec![IpAddr::from([10, 200, 255, 1])];
    more.push(Arc::new(new));
    let started = std::time::Instant::now();
    for _ in 0..rounds {
        let last = (&*allocation, config.pools.as_slice(), config.services.as_slice());
        assert!(allocate_one_more(last, &config.pools, &more).is_some());
    }
    let one_more = started.elapsed() / rounds;
    let health = HealthStates::new();
    let runtime = RuntimeState { health: Some(&health), ..Default::default() };
    let started = std::time::Instant::now();
    // The last result is dropped while the next is made, as in the announcer.
    let mut last = compute_allocated(&config, allocation.clone(), &routers, runtime);
    for _ in 0..rounds {
        last = compute_allocated(&config, allocation.clone(), &routers, runtime);
    }
    let compute = started.elapsed() / (rounds + 1);
    let started = std::time::Instant::now();
    for _ in 0..rounds {
        assert_eq!(announced_set(&last, "").len(), SERVICES as usize);
    }
    let set = started.elapsed() / rounds;
    println!(
        "{SERVICES} Services: allocation {full:?}, one more {one_more:?}, compute {compute:?}, \
         one router's set {set:?}"
    );
}
