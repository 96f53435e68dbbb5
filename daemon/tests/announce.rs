//! Announcement tier: an FRR "tor" and two uplink nodes in network namespaces. LoadBalancer
//! VIPs with health checks, traffic policies, communities, LOCAL_PREF and aggregation; and the
//! seed deck's pod network, EgressIP and Layer2 network examples as manifests, checked against
//! the routes the deck shows on r2. A dual-stack service, announced over one session per
//! family.

mod common;
use common::*;
use std::process::Command;
use std::time::Duration;

const UP: Duration = Duration::from_secs(45);

/// Serves HTTP on `address:port` in `ns` (the health-check target), under `label`.
fn http_server(lab: &mut Lab, ns: &Ns, label: &str, address: &str, port: u16) {
    let mut cmd: Command = ns.command("/usr/bin/python3");
    let dir = lab.dir.path().to_str().unwrap().to_string();
    cmd.args(["-m", "http.server", &port.to_string(), "--bind", address, "--directory", &dir]);
    lab.spawn(label, cmd);
}

fn node_config(name: &str, id: &str, tor: &str) -> String {
    format!(
        r#"
drain_time = "3s"

[node]
name = "{name}"

[[bgp.routers]]
asn = 65801
id = "{id}"
[[bgp.routers.neighbors]]
address = "{tor}"
asn = 65801
connect_time = "1s"

[[pools]]
name = "vips"
addresses = ["192.0.2.0/28"]

[[pools]]
name = "aggregated"
addresses = ["198.51.100.0/28"]
auto_assign = false

[[communities]]
name = "vip"
value = "65000:100"

# `local` with a healthy endpoint on each node: ECMP on the tor.
[[services]]
name = "web"
namespace = "demo"
load_balancer_ip = "192.0.2.5"
traffic_policy = "local"
endpoints = [{{ address = "10.0.1.2", node = "node1" }}, {{ address = "10.0.2.2", node = "node2" }}]
health = {{ type = "http", port = 18080, path = "/", expected_status = 200, interval = "300ms", timeout = "250ms", rise = 1, fall = 2 }}

# `local` with an endpoint on node1 only.
[[services]]
name = "single"
namespace = "demo"
load_balancer_ip = "192.0.2.6"
traffic_policy = "local"
endpoints = [{{ address = "10.0.1.2", node = "node1" }}]

# Two addresses rolled up into one /28.
[[services]]
name = "agg-a"
namespace = "demo"
address_pool = "aggregated"
load_balancer_ip = "198.51.100.3"
[[services]]
name = "agg-b"
namespace = "demo"
address_pool = "aggregated"
load_balancer_ip = "198.51.100.9"

[[advertisements]]
name = "vips"
ip_address_pools = ["vips"]
communities = ["vip", "large:65801:0:7"]
local_pref = 150

[[advertisements]]
name = "rolled-up"
ip_address_pools = ["aggregated"]
aggregation_length = 28


# The node's pod subnet (below): stays announced through a drain.
{pod_network}"#,
        pod_network = pod_network(name.trim_start_matches("node")),
    )
}

const TOR_IBGP: &str = r#"
frr defaults datacenter
hostname tor
router bgp 65801
 bgp router-id 10.0.1.1
 no bgp ebgp-requires-policy
 neighbor 10.0.1.2 remote-as 65801
 neighbor 10.0.2.2 remote-as 65801
 address-family ipv4 unicast
  maximum-paths ibgp 8
 exit-address-family
"#;

fn established(tor: &Frr, peer: &str) -> bool {
    tor.peer_state("ipv4Unicast", peer) == "Established"
}

/// How many times the tor's session with `peer` has come up: unchanged means no reset.
fn connections(tor: &Frr, peer: &str) -> u64 {
    tor.json(&format!("show bgp neighbors {peer} json"))[peer]["connectionsEstablished"]
        .as_u64()
        .unwrap_or(0)
}

/// Like `Uplink::start`, but returns the daemon's pid too (for SIGHUP).
fn start_uplink(lab: &mut Lab, ns: &Ns, label: &str, config: &str) -> (Uplink, u32) {
    let dir = lab.path(label);
    std::fs::create_dir_all(dir.join("conf.d")).unwrap();
    let config_path = dir.join("uplink.toml");
    std::fs::write(&config_path, config).unwrap();
    let socket = dir.join("uplink.sock");
    let mut cmd = ns.command(uplink_bin());
    cmd.args([
        "run",
        "--config",
        config_path.to_str().unwrap(),
        "--socket",
        socket.to_str().unwrap(),
    ]);
    cmd.env("RUST_LOG", "uplink=debug");
    let pid = lab.spawn(label, cmd);
    (Uplink { ns: ns.clone(), label: label.to_string(), config: config_path, socket }, pid)
}

#[test]
fn vips_ecmp_health_local_policy_attributes_and_aggregation() {
    let mut lab = Lab::new("vip");
    let tor_ns = lab.ns("tor");
    let n1 = lab.ns("node1");
    let n2 = lab.ns("node2");
    lab.link(&tor_ns, &["10.0.1.1/24"], &n1, &["10.0.1.2/24"]);
    lab.link(&tor_ns, &["10.0.2.1/24"], &n2, &["10.0.2.2/24"]);
    http_server(&mut lab, &n1, "http-node1", "10.0.1.2", 18080);
    http_server(&mut lab, &n2, "http-node2", "10.0.2.2", 18080);
    let tor = Frr::start(&mut lab, &tor_ns, TOR_IBGP);
    let (node1, node1_pid) =
        start_uplink(&mut lab, &n1, "uplink1", &node_config("node1", "10.0.1.2", "10.0.1.1"));
    let node2 =
        Uplink::start(&mut lab, &n2, "uplink2", &node_config("node2", "10.0.2.2", "10.0.2.1"));
    wait_for("both sessions Established on the tor", UP, || {
        if established(&tor, "10.0.1.2") && established(&tor, "10.0.2.2") {
            Ok(())
        } else {
            Err(lab.dump_logs())
        }
    });

    // One VIP, both nodes healthy: ECMP with both nodes as next hops.
    wait_for("192.0.2.5/32 via both nodes", UP, || {
        let hops = tor.route_nexthops("192.0.2.5/32");
        if hops == ["10.0.1.2", "10.0.2.2"] {
            Ok(())
        } else {
            Err(format!("next hops {hops:?}\n{}", tor.vtysh("show bgp ipv4 unicast")))
        }
    });
    // Communities and LOCAL_PREF as the advertisement says (LOCAL_PREF: iBGP, RFC 4271 §5.1.5).
    let path = tor.route("192.0.2.5/32").to_string();
    assert!(path.contains("65000:100"), "standard community missing: {path}");
    assert!(path.contains("65801:0:7"), "large community missing: {path}");
    assert!(path.contains("\"locPrf\":150"), "local-pref missing: {path}");

    // `local` with an endpoint on node1 only: only node1 announces it.
    wait_for("192.0.2.6/32 via node1 only", UP, || {
        let hops = tor.route_nexthops("192.0.2.6/32");
        if hops == ["10.0.1.2"] {
            Ok(())
        } else {
            Err(format!("next hops {hops:?}"))
        }
    });
    // Aggregation: the /28, not the members.
    wait_for("aggregate 198.51.100.0/28", UP, || {
        let hops = tor.route_nexthops("198.51.100.0/28");
        if hops == ["10.0.1.2", "10.0.2.2"] {
            Ok(())
        } else {
            Err(format!("next hops {hops:?}\n{}", tor.vtysh("show bgp ipv4 unicast")))
        }
    });
    assert!(tor.route_nexthops("198.51.100.3/32").is_empty(), "members must not be announced");

    // Fail node2's health check: one next hop remains; the session stays up.
    let (sessions1, sessions2) = (connections(&tor, "10.0.1.2"), connections(&tor, "10.0.2.2"));
    assert!(sessions1 >= 1 && sessions2 >= 1);
    lab.stop("http-node2");
    wait_for("192.0.2.5/32 via node1 only", Duration::from_secs(15), || {
        let hops = tor.route_nexthops("192.0.2.5/32");
        if hops == ["10.0.1.2"] {
            Ok(())
        } else {
            Err(format!("next hops {hops:?}"))
        }
    });
    assert!(established(&tor, "10.0.2.2"), "a health change must not reset the session");
    let shown = node2.json(&["show", "announcements"]).unwrap();
    let candidate = shown["candidates"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["prefix"] == "192.0.2.5/32")
        .cloned()
        .unwrap();
    assert_eq!(candidate["state"], "withdrawn", "{shown}");
    assert!(candidate["detail"].as_str().unwrap().contains("no healthy local endpoint"), "{shown}");
    let text = node2.cli(&["show", "announcements"]).unwrap();
    assert!(text.contains("192.0.2.5/32") && text.contains("withdrawn"), "{text}");

    // Recovery announces again after `rise`.
    http_server(&mut lab, &n2, "http-node2", "10.0.2.2", 18080);
    wait_for("192.0.2.5/32 via both nodes again", Duration::from_secs(15), || {
        let hops = tor.route_nexthops("192.0.2.5/32");
        if hops == ["10.0.1.2", "10.0.2.2"] {
            Ok(())
        } else {
            Err(format!("next hops {hops:?}"))
        }
    });
    assert_eq!(connections(&tor, "10.0.2.2"), sessions2, "health changes must not reset sessions");

    // A config change (SIGHUP) adds a service: announced without resetting the session, and
    // without touching the health-checked VIP (its check and verdict are kept through the
    // reload: the path the ToR has from node1 is the same one, not withdrawn and sent again).
    let web_path_since = |tor: &Frr| -> u64 {
        let paths = tor.route("192.0.2.5/32")["paths"].clone();
        paths
            .as_array()
            .into_iter()
            .flatten()
            .find(|p| p["peer"]["peerId"] == "10.0.1.2")
            .and_then(|p| p["lastUpdate"]["epoch"].as_u64())
            .unwrap_or_else(|| panic!("no path from node1 for 192.0.2.5/32: {paths}"))
    };
    let web_before = web_path_since(&tor);
    // lastUpdate counts whole seconds of wall clock less the path's monotonic age, so two
    // reads of one path differ by up to a second; a path sent again after 3 s shows 2 or more.
    std::thread::sleep(Duration::from_millis(3100));
    let mut config = node_config("node1", "10.0.1.2", "10.0.1.1");
    config.push_str(
        "\n[[services]]\nname = \"late\"\nnamespace = \"demo\"\nload_balancer_ip = \"192.0.2.9\"\n",
    );
    std::fs::write(&node1.config, config).unwrap();
    run(&["kill", "-HUP", &node1_pid.to_string()]);
    wait_for("192.0.2.9/32 after reload", Duration::from_secs(15), || {
        let hops = tor.route_nexthops("192.0.2.9/32");
        if hops == ["10.0.1.2"] {
            Ok(())
        } else {
            Err(format!("next hops {hops:?}\n{}", lab.dump_logs()))
        }
    });
    assert_eq!(connections(&tor, "10.0.1.2"), sessions1, "a reload must not reset sessions");
    std::thread::sleep(Duration::from_millis(1100));
    let web_after = web_path_since(&tor);
    assert!(
        web_after.abs_diff(web_before) <= 1,
        "a reload that leaves the health-checked 192.0.2.5 alone withdrew and re-sent it: \
         lastUpdate {web_before} -> {web_after}"
    );
    let running = node1.json(&["show", "running-config"]).unwrap();
    let names: Vec<&str> = running["announce"]["services"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|s| s["name"].as_str())
        .collect();
    assert!(names.contains(&"web") && names.contains(&"late"), "{running}");

    // `uplink drain` on node2: its service addresses leave the tor, its pod subnet and its
    // session stay, and `show announcements` says why.
    let via = |prefix: &str, want: &[&str], why: &str| {
        wait_for(&format!("{prefix} via {want:?} ({why})"), Duration::from_secs(15), || {
            let hops = tor.route_nexthops(prefix);
            if hops == want {
                Ok(())
            } else {
                Err(format!("next hops {hops:?}\n{}", tor.vtysh("show bgp ipv4 unicast")))
            }
        })
    };
    via("10.244.2.0/24", &["10.0.2.2"], "pod subnet before the drain");
    // First GRACEFUL_SHUTDOWN with LOCAL_PREF 0 on everything node2 originates (RFC 8326):
    // the tor prefers node1 while node2 still announces the VIP; then, after drain_time,
    // node2 withdraws it.
    let drained = node2.cli(&["drain", "--no-wait"]).unwrap();
    assert!(drained.contains("draining"), "{drained}");
    let drain_started = std::time::Instant::now();
    wait_for(
        "node2's VIP path with graceful-shutdown and LOCAL_PREF 0",
        Duration::from_secs(3),
        || {
            let route = tor.route("192.0.2.5/32");
            let from_node2 = route["paths"].as_array().into_iter().flatten().find(|p| {
                p["peer"]["peerId"] == "10.0.2.2" || p["nexthops"][0]["ip"] == "10.0.2.2"
            });
            match from_node2 {
                Some(p)
                    if p["community"]["string"]
                        .as_str()
                        .is_some_and(|c| c.contains("graceful-shutdown"))
                        && p["locPrf"] == 0 =>
                {
                    Ok(())
                }
                _ => Err(format!("{route:#}")),
            }
        },
    );
    wait_for("the tor prefers node1 while node2 drains", Duration::from_secs(2), || {
        let hops = tor.route_nexthops("192.0.2.5/32");
        (hops == ["10.0.1.2"]).then_some(()).ok_or_else(|| format!("next hops {hops:?}"))
    });

    assert!(
        drain_started.elapsed() < Duration::from_secs(3),
        "GRACEFUL_SHUTDOWN came before the withdrawal"
    );
    via("192.0.2.5/32", &["10.0.1.2"], "node2 drained");
    wait_for("node2 withdraws its VIP after drain_time", Duration::from_secs(10), || {
        let route = tor.route("192.0.2.5/32");
        let paths = route["paths"].as_array().map_or(0, Vec::len);
        (paths == 1).then_some(()).ok_or_else(|| format!("{route:#}"))
    });
    assert!(drain_started.elapsed() >= Duration::from_secs(3), "withdrawn only after drain_time");
    // `uplink drain` (waiting) on a drained node answers at once.
    let drained = node2.cli(&["drain"]).unwrap();
    assert!(drained.contains("drained"), "{drained}");
    via("198.51.100.0/28", &["10.0.1.2"], "node2 drained");
    assert_eq!(tor.route_nexthops("10.244.2.0/24"), ["10.0.2.2"], "pod subnet stays");
    assert_eq!(connections(&tor, "10.0.2.2"), sessions2, "a drain must not reset the session");
    let text = node2.cli(&["show", "announcements"]).unwrap();
    assert!(text.contains("drained"), "{text}");

    // The drain survives a daemon restart: node2 comes back with its pod subnet only.
    lab.kill9(&node2.label);
    node2.launch(&mut lab);
    wait_for("node2's session again", UP, || {
        if connections(&tor, "10.0.2.2") > sessions2 && established(&tor, "10.0.2.2") {
            Ok(())
        } else {
            Err(lab.dump_logs())
        }
    });
    via("10.244.2.0/24", &["10.0.2.2"], "pod subnet after the restart");
    // Several health-check intervals: the VIP would be back by now if the drain were lost.
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(tor.route_nexthops("192.0.2.5/32"), ["10.0.1.2"], "still drained after a restart");

    // `uplink undrain`: the VIP is ECMP again.
    node2.cli(&["undrain"]).unwrap();
    via("192.0.2.5/32", &["10.0.1.2", "10.0.2.2"], "node2 undrained");
    via("198.51.100.0/28", &["10.0.1.2", "10.0.2.2"], "node2 undrained");
}

/// The tor of the dual-stack test: one iBGP session per family with each node (MetalLB's usual
/// dual-stack setup), ECMP in both families.
const TOR_DUAL: &str = r#"
frr defaults datacenter
hostname tor
router bgp 65801
 bgp router-id 10.0.1.1
 no bgp ebgp-requires-policy
 neighbor 10.0.1.2 remote-as 65801
 neighbor 10.0.2.2 remote-as 65801
 neighbor fd00:1::2 remote-as 65801
 neighbor fd00:2::2 remote-as 65801
 address-family ipv4 unicast
  no neighbor fd00:1::2 activate
  no neighbor fd00:2::2 activate
  maximum-paths ibgp 8
 exit-address-family
 address-family ipv6 unicast
  neighbor fd00:1::2 activate
  neighbor fd00:2::2 activate
  maximum-paths ibgp 8
 exit-address-family
"#;

fn dual_node_config(name: &str, slot: u8) -> String {
    format!(
        r#"
drain_time = "1s"

[node]
name = "{name}"

[[bgp.routers]]
asn = 65801
id = "10.0.{slot}.2"
[[bgp.routers.neighbors]]
address = "10.0.{slot}.1"
asn = 65801
connect_time = "1s"
[[bgp.routers.neighbors]]
address = "fd00:{slot}::1"
asn = 65801
connect_time = "1s"

[[pools]]
name = "dual"
addresses = ["192.0.2.0/28", "2001:db8:5::/120"]

[[advertisements]]
name = "dual"
ip_address_pools = ["dual"]

# Allocated, not manual: both nodes must compute the same pair on their own.
[[services]]
name = "dual"
namespace = "demo"
ip_family_policy = "require-dual-stack"
"#
    )
}

/// The prefixes `show announcements` lists for `service`, in candidate order.
fn service_prefixes(node: &Uplink, service: &str) -> Vec<String> {
    let shown = node.json(&["show", "announcements"]).unwrap();
    let origin = format!("service {service} ");
    shown["candidates"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["origin"].as_str().is_some_and(|o| o.starts_with(&origin)))
        .filter_map(|c| c["prefix"].as_str().map(str::to_string))
        .collect()
}

#[test]
fn dual_stack_service_is_announced_in_both_families() {
    let mut lab = Lab::new("dstk");
    let tor_ns = lab.ns("tor");
    let n1 = lab.ns("node1");
    let n2 = lab.ns("node2");
    lab.link(&tor_ns, &["10.0.1.1/24", "fd00:1::1/64"], &n1, &["10.0.1.2/24", "fd00:1::2/64"]);
    lab.link(&tor_ns, &["10.0.2.1/24", "fd00:2::1/64"], &n2, &["10.0.2.2/24", "fd00:2::2/64"]);
    let tor = Frr::start(&mut lab, &tor_ns, TOR_DUAL);
    let node1 = Uplink::start(&mut lab, &n1, "uplink1", &dual_node_config("node1", 1));
    let node2 = Uplink::start(&mut lab, &n2, "uplink2", &dual_node_config("node2", 2));
    wait_for("four sessions Established on the tor", UP, || {
        let up = tor.peer_state("ipv4Unicast", "10.0.1.2") == "Established"
            && tor.peer_state("ipv4Unicast", "10.0.2.2") == "Established"
            && tor.peer_state("ipv6Unicast", "fd00:1::2") == "Established"
            && tor.peer_state("ipv6Unicast", "fd00:2::2") == "Established";
        if up {
            Ok(())
        } else {
            Err(format!("{}\n{}", tor.vtysh("show bgp summary"), lab.dump_logs()))
        }
    });

    // One /32 and one /128, the same on both nodes (allocation is a pure function).
    let prefixes = service_prefixes(&node1, "demo/dual");
    assert_eq!(prefixes.len(), 2, "{prefixes:?}");
    let (v4, v6) = (prefixes[0].clone(), prefixes[1].clone());
    assert!(v4.starts_with("192.0.2.") && v4.ends_with("/32"), "{v4}");
    assert!(v6.starts_with("2001:db8:5::") && v6.ends_with("/128"), "{v6}");
    assert_eq!(service_prefixes(&node2, "demo/dual"), prefixes, "nodes disagree");

    let via = |prefix: &str, want: &[&str], why: &str| {
        wait_for(&format!("{prefix} via {want:?} ({why})"), UP, || {
            let hops = tor.route_nexthops(prefix);
            if hops == want {
                Ok(())
            } else {
                let afi = if prefix.contains(':') { "ipv6" } else { "ipv4" };
                Err(format!(
                    "next hops {hops:?}\n{}\n{}",
                    tor.vtysh(&format!("show bgp {afi} unicast")),
                    lab.dump_logs()
                ))
            }
        })
    };
    via(&v4, &["10.0.1.2", "10.0.2.2"], "ECMP");
    via(&v6, &["fd00:1::2", "fd00:2::2"], "ECMP");
    let text = node1.cli(&["show", "announcements"]).unwrap();
    assert!(text.contains(&v4) && text.contains(&v6), "{text}");

    // Drain applies to the service as a whole: node2 withdraws both addresses.
    node2.cli(&["drain"]).unwrap();
    via(&v4, &["10.0.1.2"], "node2 drained");
    via(&v6, &["fd00:1::2"], "node2 drained");
    node2.cli(&["undrain"]).unwrap();
    via(&v4, &["10.0.1.2", "10.0.2.2"], "node2 undrained");
    via(&v6, &["fd00:1::2", "fd00:2::2"], "node2 undrained");
}

/// `uplink check` says which services collide on a home slot (allocation is a pure function
/// of the config, so this is known before anything runs).
#[test]
fn check_reports_allocation_collisions() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("uplink.toml");
    // FNV-1a puts default/s0 and default/s4 on slot 0 of a four-address pool (default/s1 on
    // slot 3); a one-address pool for two services leaves one without an address.
    let mut text = String::from(
        "[[pools]]\nname = \"four\"\naddresses = [\"192.0.2.1-192.0.2.4\"]\n\
         [[pools]]\nname = \"one\"\naddresses = [\"192.0.2.9/32\"]\nauto_assign = false\n",
    );
    for name in ["s0", "s1", "s4"] {
        text.push_str(&format!("[[services]]\nname = \"{name}\"\naddress_pool = \"four\"\n"));
    }
    for name in ["x", "y"] {
        text.push_str(&format!("[[services]]\nname = \"{name}\"\naddress_pool = \"one\"\n"));
    }
    // Dual stack from an IPv4-only pool: no address, and the reason says why.
    text.push_str(
        "[[services]]\nname = \"d\"\naddress_pool = \"four\"\nip_family_policy = \"require-dual-stack\"\n",
    );
    std::fs::write(&config, text).unwrap();
    let out = Command::new(uplink_bin())
        .args(["check", "--config", config.to_str().unwrap()])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", String::from_utf8_lossy(&out.stderr));
    assert!(
        stdout.contains(
            "note: service default/s4 hashes to 192.0.2.1 in pool four, held by default/s0; it got 192.0.2.2 instead"
        ),
        "{stdout}"
    );
    assert!(
        stdout.contains("warning: service default/y gets no address: pool exhausted (one)"),
        "{stdout}"
    );
    assert!(
        stdout.contains("warning: service default/d gets no address: no candidate pool has IPv4 and IPv6 addresses (ip_family_policy require-dual-stack; candidates: four)"),
        "{stdout}"
    );
}

/// The deck's r2: eBGP AS 65102 on 172.18.20.1, nodes wk3 (.113) and wk4 (.114) on one segment.
const R2: &str = r#"
frr defaults datacenter
hostname r2
router bgp 65102
 bgp router-id 172.18.0.2
 no bgp ebgp-requires-policy
 neighbor 172.18.20.113 remote-as 65801
 neighbor 172.18.20.114 remote-as 65801
 address-family ipv4 unicast
  maximum-paths 8
 exit-address-family
"#;

/// Puts `node` on r2's bridge with `address`.
fn attach(lab: &Lab, r2: &Ns, node: &Ns, index: u32, address: &str) {
    let outer = format!("v{}r{index}", lab.id);
    let inner = format!("v{}n{index}", lab.id);
    run(&[
        "ip", "link", "add", &outer, "netns", &r2.name, "type", "veth", "peer", "name", &inner,
        "netns", &node.name,
    ]);
    r2.run(&["ip", "link", "set", &outer, "master", "net20", "up"]);
    node.run(&["ip", "addr", "add", address, "dev", &inner]);
    node.run(&["ip", "link", "set", &inner, "up"]);
}

fn deck_node(lab: &mut Lab, ns: &Ns, name: &str, host_subnet: &str, egress_ip: &str) -> Uplink {
    let config = format!(
        r#"
[node]
name = "{name}"
labels = {{ "node-role.kubernetes.io/worker" = "" }}

[[networks]]
name = "default"
topology = "layer3"
subnet = "10.128.0.0/16"
host_subnet = "{host_subnet}"
egress_ips = ["{egress_ip}"]
"#
    );
    let dir = lab.path(name);
    std::fs::create_dir_all(dir.join("conf.d")).unwrap();
    let fixtures =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/manifests");
    for file in ["deck-default-pod-network.yaml", "deck-cudn-layer2.yaml"] {
        std::fs::copy(fixtures.join(file), dir.join("conf.d").join(file)).unwrap();
    }
    Uplink::start(lab, ns, name, &config)
}

#[test]
fn deck_pod_network_egress_ip_and_layer2_network_on_r2() {
    let mut lab = Lab::new("deck");
    let r2_ns = lab.ns("r2");
    let wk3 = lab.ns("wk3");
    let wk4 = lab.ns("wk4");
    r2_ns.run(&["ip", "link", "add", "net20", "type", "bridge"]);
    r2_ns.run(&["ip", "addr", "add", "172.18.20.1/24", "dev", "net20"]);
    r2_ns.run(&["ip", "link", "set", "net20", "up"]);
    attach(&lab, &r2_ns, &wk3, 1, "172.18.20.113/24");
    attach(&lab, &r2_ns, &wk4, 2, "172.18.20.114/24");
    let r2 = Frr::start(&mut lab, &r2_ns, R2);
    let _wk3 = deck_node(&mut lab, &wk3, "wk3", "10.128.7.0/24", "172.18.20.201");
    let _wk4 = deck_node(&mut lab, &wk4, "wk4", "10.128.6.0/24", "172.18.20.202");

    // Slide 17: each node's /24 and its EgressIP /32 via that node; slide 33: the Layer2
    // network's whole /16 from every node, as ECMP.
    let expected = [
        ("10.128.7.0/24", vec!["172.18.20.113"]),
        ("10.128.6.0/24", vec!["172.18.20.114"]),
        ("172.18.20.201/32", vec!["172.18.20.113"]),
        ("172.18.20.202/32", vec!["172.18.20.114"]),
        ("172.22.0.0/16", vec!["172.18.20.113", "172.18.20.114"]),
    ];
    for (prefix, hops) in expected {
        wait_for(&format!("{prefix} on r2 via {hops:?}"), UP, || {
            let got = r2.route_nexthops(prefix);
            if got == hops {
                Ok(())
            } else {
                Err(format!("{got:?}\n{}\n{}", r2.vtysh("show bgp ipv4 unicast"), lab.dump_logs()))
            }
        });
    }
}
