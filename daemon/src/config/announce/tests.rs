use std::net::IpAddr;
use std::path::PathBuf;

use ipnet::IpNet;

use super::*;
use crate::config::community::Community;
use crate::config::load::{load_sources, load_str};
use crate::config::selector::Operator;

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
    assert_eq!(&*service.key, "web/frontend");
    assert_eq!(service.name(), "frontend");
    assert_eq!(service.traffic_policy, TrafficPolicy::Local);
    let health = service.health.as_ref().unwrap();
    assert_eq!(
        health.probe,
        ProbeKind::Http { port: 8080, path: "/healthz".into(), expected_status: 204, tls: false }
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
    assert!(errors[1].message.contains("neither a [[communities]] alias"), "{}", errors[1].message);
    // A `/` in a namespace would make `a/b` + `c` and `a` + `b/c` one key (`a/b/c`).
    let text = "[[services]]\nname = \"c\"\nnamespace = \"a/b\"\n";
    let errors = load_str("f.toml", text).unwrap_err().0;
    let found: Vec<(usize, &str, &str)> =
        errors.iter().map(|e| (e.line, e.field.as_str(), e.message.as_str())).collect();
    assert_eq!(found, [(3, "services[0].namespace", "must not contain '/'")]);
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
        config.announce.pools[0].sources.iter().map(|s| s.to_path_buf()).collect::<Vec<_>>(),
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
held_ips = ["192.0.2.6"]
ip_families = ["ipv4"]
"#;
    let config = load_str("f.toml", text).unwrap_or_else(|e| panic!("{e}"));
    let s = &config.announce.services;
    assert_eq!(s[0].ip_family_policy, IpFamilyPolicy::RequireDualStack);
    assert_eq!(s[0].ip_families.to_vec(), vec![IpFamily::Ipv6, IpFamily::Ipv4]);
    // Primary family first, as ip_families orders them.
    let want: Vec<IpAddr> = vec!["2001:db8::5".parse().unwrap(), "192.0.2.5".parse().unwrap()];
    assert_eq!(s[0].load_balancer_ips.to_vec(), want);
    assert_eq!(
        (s[1].ip_family_policy, s[1].ip_families.to_vec()),
        (IpFamilyPolicy::PreferDualStack, vec![IpFamily::Ipv4])
    );
    assert_eq!(s[2].ip_family_policy, IpFamilyPolicy::SingleStack);
    assert_eq!(s[2].load_balancer_ips.to_vec(), vec!["192.0.2.6".parse::<IpAddr>().unwrap()]);
    assert_eq!(s[2].held_ips, s[2].load_balancer_ips);
    // One address is kept inline, not on the heap (the families always are): a cluster's
    // Services are nearly all single stack, and a list collected first kept room for four on
    // the heap.
    let inline =
        |s: &std::sync::Arc<Service>| !s.load_balancer_ips.spilled() && !s.held_ips.spilled();
    assert!(s[1..].iter().all(inline), "{s:?}");
    let json = serde_json::to_value(&config).unwrap();
    assert_eq!(json["announce"]["services"][0]["ip_family_policy"], "require-dual-stack");
    assert_eq!(json["announce"]["services"][0]["ip_families"][0], "ipv6");
    // The key shown as the Service's name and namespace.
    let shown = &json["announce"]["services"][0];
    assert_eq!((&shown["name"], &shown["namespace"]), (&"pair".into(), &"default".into()));
    assert_eq!(s[0].namespace(), "default");
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
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/announcements.md");
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
