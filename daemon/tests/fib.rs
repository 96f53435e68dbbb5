//! FIB tier: uplink installs what it learns from real FRR and BIRD into the kernel of its
//! namespace — ECMP through nexthop groups, groups that shrink and grow in place, routes that
//! leave and return with their peers, routes restored after `ip route del`, stale routes purged
//! after a SIGKILL and a restart, 100,000 routes in and out, and installs into another table.

mod common;
use common::*;
use serde_json::Value;
use std::time::Duration;

const UP: Duration = Duration::from_secs(60);
const DEFAULT: &str = "default";
const PREFIX: &str = "198.51.100.0/24";

fn uplink_config(extra_router: &str, neighbors: &[(&str, u32)], receive: &str) -> String {
    let mut c = format!("[[bgp.routers]]\nasn = 65001\nid = \"10.0.0.9\"\n{extra_router}\n");
    for (address, asn) in neighbors {
        c.push_str(&format!(
            "\n[[bgp.routers.neighbors]]\naddress = \"{address}\"\nasn = {asn}\nconnect_time = \"1s\"\n{receive}\n"
        ));
    }
    c
}

const RECEIVE_ALL: &str = r#"to_receive = { allowed = { mode = "all" } }"#;

fn spec(asn: u32, id: &str, node: &str, announce: &[&str]) -> SpeakerSpec {
    SpeakerSpec {
        asn,
        router_id: id.into(),
        neighbors: vec![NeighborSpec { address: node.into(), asn: 65001, ..Default::default() }],
        announce: announce.iter().map(|s| s.to_string()).collect(),
    }
}

/// `ip -j route show proto uplink` in `table`, keyed by destination.
fn bgp_routes(ns: &Ns, table: &str) -> Vec<Value> {
    // A table that does not exist yet has no routes.
    let (ok, out) =
        ns.try_run(&["ip", "-j", "route", "show", "table", table, "proto", UPLINK_PROTO]);
    if !ok {
        return vec![];
    }
    serde_json::from_str::<Value>(if out.trim().is_empty() { "[]" } else { &out })
        .unwrap_or(Value::Null)
        .as_array()
        .cloned()
        .unwrap_or_default()
}

fn route<'a>(routes: &'a [Value], dst: &str) -> Option<&'a Value> {
    routes.iter().find(|r| r["dst"] == dst)
}

/// The gateways of nexthop object `id` (a group: its members' gateways), sorted.
fn group_gateways(ns: &Ns, id: u64) -> Result<Vec<String>, String> {
    let out = ns.run(&["ip", "-j", "nexthop", "show", "id", &id.to_string()]);
    let v: Value = serde_json::from_str(&out).map_err(|e| format!("{e}: {out}"))?;
    let nh = v.as_array().and_then(|a| a.first()).ok_or(format!("no nexthop {id}: {out}"))?;
    let mut gateways = vec![];
    match nh["group"].as_array() {
        Some(members) => {
            for m in members {
                let member = m["id"].as_u64().ok_or("member without id")?;
                let out = ns.run(&["ip", "-j", "nexthop", "show", "id", &member.to_string()]);
                let mv: Value = serde_json::from_str(&out).map_err(|e| e.to_string())?;
                gateways.push(mv[0]["gateway"].as_str().unwrap_or("?").to_string());
            }
        }
        None => gateways.push(nh["gateway"].as_str().unwrap_or("?").to_string()),
    }
    gateways.sort();
    Ok(gateways)
}

/// Waits until both prefixes point at one group whose members are exactly `gateways`; returns
/// the group id.
fn wait_group(lab: &Lab, ns: &Ns, gateways: &[&str]) -> u64 {
    wait_for(&format!("routes via a group of {gateways:?}"), UP, || {
        let routes = bgp_routes(ns, "main");
        let mut ids = vec![];
        for dst in [DEFAULT, PREFIX] {
            let r = route(&routes, dst).ok_or(format!("no {dst} in {routes:?}"))?;
            assert_eq!(r["metric"], 20, "metric 20 by default: {r}");
            ids.push(r["nhid"].as_u64().ok_or(format!("{dst} has no nexthop id: {r}"))?);
        }
        if ids[0] != ids[1] {
            return Err(format!("two groups {ids:?}"));
        }
        let got = group_gateways(ns, ids[0])?;
        if got == gateways {
            Ok(ids[0])
        } else {
            Err(format!("group {} has {got:?}\n{}", ids[0], lab.dump_logs()))
        }
    })
}

fn wait_no_bgp_routes(ns: &Ns, table: &str) {
    wait_for("no proto uplink routes", UP, || {
        let routes = bgp_routes(ns, table);
        if routes.is_empty() {
            Ok(())
        } else {
            Err(format!("{routes:?}"))
        }
    });
}

/// FRR and BIRD both announce a default route and a /24: one group with both next hops; the
/// group shrinks and grows in place as peers leave and return; `ip route del` is undone.
#[test]
fn ecmp_group_follows_the_peers() {
    let mut lab = Lab::new("fibecmp");
    let node = lab.ns("node");
    let frr_ns = lab.ns("frr");
    let bird_ns = lab.ns("bird");
    lab.link(&node, &["10.0.1.2/24"], &frr_ns, &["10.0.1.1/24"]);
    lab.link(&node, &["10.0.2.2/24"], &bird_ns, &["10.0.2.1/24"]);
    let announce = ["0.0.0.0/0", PREFIX];
    let _frr = Speaker::start(
        Kind::Frr,
        &mut lab,
        &frr_ns,
        &spec(65101, "10.0.1.1", "10.0.1.2", &announce),
    );
    let bird_spec = spec(65102, "10.0.2.1", "10.0.2.2", &announce);
    let _bird = Speaker::start(Kind::Bird, &mut lab, &bird_ns, &bird_spec);
    let uplink = Uplink::start(
        &mut lab,
        &node,
        "uplink",
        &uplink_config("", &[("10.0.1.1", 65101), ("10.0.2.1", 65102)], RECEIVE_ALL),
    );

    let group = wait_group(&lab, &node, &["10.0.1.1", "10.0.2.1"]);

    // show fib agrees with the kernel.
    let fib = uplink.json(&["show", "fib"]).unwrap();
    let entry = &fib[PREFIX][0];
    assert_eq!(entry["state"], "installed", "{fib}");
    assert_eq!(entry["nexthopGroupId"].as_u64(), Some(group), "{fib}");
    assert_eq!(entry["nexthops"].as_array().map(Vec::len), Some(2), "{fib}");
    let text = uplink.cli(&["show", "fib"]).unwrap();
    assert!(
        text.contains(&format!("{PREFIX} [table 254, metric 20] nhg {group} installed")),
        "{text}"
    );

    // FRR goes: the same group now has BIRD alone.
    lab.stop(&format!("frr-{}", frr_ns.name));
    let shrunk = wait_group(&lab, &node, &["10.0.2.1"]);
    assert_eq!(shrunk, group, "the group is replaced in place, routes untouched");

    // Deleting a route by hand: uplink puts it back.
    node.run(&["ip", "route", "del", PREFIX, "proto", UPLINK_PROTO, "metric", "20"]);
    wait_group(&lab, &node, &["10.0.2.1"]);

    // BIRD goes too: nothing left to install.
    lab.stop(&format!("bird-{}", bird_ns.name));
    wait_no_bgp_routes(&node, "main");
    wait_for("uplink's nexthops removed", UP, || {
        let out = node.run(&["ip", "nexthop", "show"]);
        if out.trim().is_empty() {
            Ok(())
        } else {
            Err(out)
        }
    });

    // BIRD returns: so do the routes.
    let _bird = Speaker::start(Kind::Bird, &mut lab, &bird_ns, &bird_spec);
    wait_group(&lab, &node, &["10.0.2.1"]);
}

/// After SIGKILL the kernel keeps uplink's routes; a restart with a config that no longer wants
/// them removes them (and keeps what is still wanted).
#[test]
fn restart_removes_stale_routes() {
    let mut lab = Lab::new("fibstale");
    let node = lab.ns("node");
    let bird_ns = lab.ns("bird");
    lab.link(&node, &["10.0.2.2/24"], &bird_ns, &["10.0.2.1/24"]);
    let _bird = Speaker::start(
        Kind::Bird,
        &mut lab,
        &bird_ns,
        &spec(65102, "10.0.2.1", "10.0.2.2", &["0.0.0.0/0", PREFIX]),
    );
    let uplink = Uplink::start(
        &mut lab,
        &node,
        "uplink",
        &uplink_config("", &[("10.0.2.1", 65102)], RECEIVE_ALL),
    );
    wait_group(&lab, &node, &["10.0.2.1"]);

    lab.kill9(&uplink.label);
    assert_eq!(bgp_routes(&node, "main").len(), 2, "the kernel keeps routes of a killed daemon");

    // Only the /24 is wanted now.
    let only_prefix =
        format!(r#"to_receive = {{ allowed = {{ prefixes = [{{ prefix = "{PREFIX}" }}] }} }}"#);
    std::fs::write(&uplink.config, uplink_config("", &[("10.0.2.1", 65102)], &only_prefix))
        .unwrap();
    uplink.launch(&mut lab);
    wait_for("only the /24 left", UP, || {
        let routes = bgp_routes(&node, "main");
        match (route(&routes, DEFAULT), route(&routes, PREFIX)) {
            (None, Some(r)) if r["nhid"].is_u64() => Ok(()),
            _ => Err(format!("{routes:?}\n{}", lab.dump_logs())),
        }
    });

    // Killed again, and restarted with install = false: nothing of ours may stay.
    lab.kill9(&uplink.label);
    std::fs::write(
        &uplink.config,
        uplink_config("install = false", &[("10.0.2.1", 65102)], RECEIVE_ALL),
    )
    .unwrap();
    uplink.launch(&mut lab);
    wait_no_bgp_routes(&node, "main");
    wait_for("stale nexthops removed", UP, || {
        let out = node.run(&["ip", "nexthop", "show"]);
        if out.trim().is_empty() {
            Ok(())
        } else {
            Err(out)
        }
    });
    // The session still runs: install = false only keeps routes out of the kernel.
    wait_for("session up without installing", UP, || {
        match uplink.peer_state("ipv4Unicast", "10.0.2.1")?.as_str() {
            "Established" => Ok(()),
            other => Err(other.to_string()),
        }
    });
    assert!(bgp_routes(&node, "main").is_empty());
}

/// `table = 100` on the default-VRF router: routes go to table 100, none to main. (VRF devices
/// are not in the host kernel; the VM tier covers real VRF tables.)
#[test]
fn table_override_installs_into_that_table() {
    let mut lab = Lab::new("fibtable");
    let node = lab.ns("node");
    let bird_ns = lab.ns("bird");
    lab.link(&node, &["10.0.2.2/24"], &bird_ns, &["10.0.2.1/24"]);
    let _bird = Speaker::start(
        Kind::Bird,
        &mut lab,
        &bird_ns,
        &spec(65102, "10.0.2.1", "10.0.2.2", &[PREFIX]),
    );
    let uplink = Uplink::start(
        &mut lab,
        &node,
        "uplink",
        &uplink_config("table = 100\nmetric = 50", &[("10.0.2.1", 65102)], RECEIVE_ALL),
    );
    wait_for("route in table 100", UP, || {
        let routes = bgp_routes(&node, "100");
        match route(&routes, PREFIX) {
            Some(r) if r["metric"] == 50 && r["nhid"].is_u64() => Ok(()),
            _ => Err(format!("{routes:?}\n{}", lab.dump_logs())),
        }
    });
    assert!(bgp_routes(&node, "main").is_empty(), "nothing in main");
    let fib = uplink.json(&["show", "fib"]).unwrap();
    assert_eq!(fib[PREFIX][0]["table"], 100, "{fib}");
}

fn bgp_route_count(ns: &Ns) -> usize {
    let out = ns.run(&["ip", "route", "show", "proto", UPLINK_PROTO]);
    out.lines().count()
}

/// 100,000 routes from one BIRD are all in the kernel, and all leave when BIRD stops.
#[test]
fn hundred_thousand_routes_in_and_out() {
    const COUNT: usize = 100_000;
    let mut lab = Lab::new("fib100k");
    let node = lab.ns("node");
    let bird_ns = lab.ns("bird");
    lab.link(&node, &["10.0.2.2/24"], &bird_ns, &["10.0.2.1/24"]);
    let conf = bird_bulk_conf(&spec(65102, "10.0.2.1", "10.0.2.2", &[]), COUNT);
    let bird = Bird::start(&mut lab, &bird_ns, &conf);
    let _uplink = Uplink::start(
        &mut lab,
        &node,
        "uplink",
        &uplink_config("", &[("10.0.2.1", 65102)], RECEIVE_ALL),
    );
    wait_for("100,000 routes in the kernel", Duration::from_secs(180), || {
        let n = bgp_route_count(&node);
        if n == COUNT {
            Ok(())
        } else {
            Err(format!("{n} routes\n{}", lab.dump_logs()))
        }
    });
    lab.stop(&bird.label);
    wait_for("every route gone", Duration::from_secs(120), || {
        let n = bgp_route_count(&node);
        if n == 0 {
            Ok(())
        } else {
            Err(format!("{n} routes left"))
        }
    });
}

/// The link-local address of `ifname` in `ns` (assigned by the kernel when the link came up).
fn link_local(ns: &Ns, ifname: &str) -> String {
    wait_for(&format!("a link-local address on {ifname}"), UP, || {
        let out = ns.run(&["ip", "-j", "-6", "addr", "show", "dev", ifname, "scope", "link"]);
        let v: Value = serde_json::from_str(&out).map_err(|e| format!("{e}: {out}"))?;
        v[0]["addr_info"]
            .as_array()
            .and_then(|a| a.iter().find_map(|i| i["local"].as_str()))
            .filter(|a| a.starts_with("fe80:"))
            .map(str::to_string)
            .ok_or(out)
    })
}

/// RFC 2545 §3: a peer on the link may send only its link-local address as the IPv6 next hop
/// (GoBGP over iBGP keeps the next hop it is given). The route is installed via that
/// link-local address on the session's interface, and leaves with the peer.
#[test]
fn link_local_only_next_hop_goes_out_the_session_interface() {
    let mut lab = Lab::new("fibll");
    let node = lab.ns("node");
    let peer_ns = lab.ns("gobgp");
    let (node_if, peer_if) = lab.link(&node, &["fd00:2::2/64"], &peer_ns, &["fd00:2::1/64"]);
    let peer_ll = link_local(&peer_ns, &peer_if);
    // A second link: fe80::/64 is now on two interfaces, so only the session can tell which.
    let other = lab.ns("other");
    lab.link(&node, &["fd00:3::2/64"], &other, &["fd00:3::1/64"]);
    let gobgp = Gobgp::start(
        &mut lab,
        &peer_ns,
        &gobgp_conf(&SpeakerSpec {
            asn: 65001,
            router_id: "10.0.2.1".into(),
            neighbors: vec![NeighborSpec {
                address: "fd00:2::2".into(),
                asn: 65001,
                ..Default::default()
            }],
            announce: vec![],
        }),
    );
    let uplink = Uplink::start(
        &mut lab,
        &node,
        "uplink",
        &uplink_config(
            "",
            &[("fd00:2::1", 65001)],
            &format!("families = [\"ipv6-unicast\"]\n{RECEIVE_ALL}"),
        ),
    );
    wait_for("iBGP session with GoBGP", UP, || {
        match uplink.peer_state("ipv6Unicast", "fd00:2::1")?.as_str() {
            "Established" => Ok(()),
            other => Err(format!("{other}\n{}", lab.dump_logs())),
        }
    });
    let added = gobgp.gobgp(&[
        "global",
        "rib",
        "-a",
        "ipv6",
        "add",
        "2001:db8:99::/48",
        "nexthop",
        &peer_ll,
    ]);
    assert!(!added.contains("rror"), "gobgp refused the route: {added}");

    wait_for("the route via the peer's link-local address on the session's link", UP, || {
        let out = node.run(&[
            "ip",
            "-j",
            "-6",
            "route",
            "show",
            "2001:db8:99::/48",
            "proto",
            UPLINK_PROTO,
        ]);
        let routes: Vec<Value> =
            serde_json::from_str(if out.trim().is_empty() { "[]" } else { &out })
                .map_err(|e| format!("{e}: {out}"))?;
        let r = routes.first().ok_or(format!("not installed\n{}", lab.dump_logs()))?;
        let id = r["nhid"].as_u64().ok_or(format!("no nexthop object: {r}"))?;
        let show = |id: u64| -> Result<Value, String> {
            let out = node.run(&["ip", "-j", "nexthop", "show", "id", &id.to_string()]);
            let v: Value = serde_json::from_str(&out).map_err(|e| format!("{e}: {out}"))?;
            Ok(v[0].clone())
        };
        let mut nh = show(id)?;
        // A group of one: its member carries the gateway and device.
        if let Some(member) = nh["group"][0]["id"].as_u64() {
            nh = show(member)?;
        }
        match (nh["gateway"].as_str(), nh["dev"].as_str()) {
            (Some(gw), Some(dev)) if gw == peer_ll && dev == node_if => Ok(()),
            _ => Err(format!("nexthop {nh}")),
        }
    });
    let shown = uplink.cli(&["show", "fib"]).unwrap_or_default();
    assert!(shown.contains("2001:db8:99::/48") && shown.contains(&peer_ll), "show fib: {shown}");

    lab.stop(&gobgp.label);
    wait_no_bgp_routes(&node, "main");
}

/// The gateways of `dst` in `ip -j route` output: inline hops (RTA_MULTIPATH) or the single
/// gateway; an error if the route uses a nexthop object.
fn inline_gateways(routes: &[Value], dst: &str) -> Result<Vec<String>, String> {
    let r = route(routes, dst).ok_or(format!("no {dst} in {routes:?}"))?;
    if r["nhid"].is_u64() {
        return Err(format!("{dst} uses a nexthop object: {r}"));
    }
    let mut gateways: Vec<String> = match r["nexthops"].as_array() {
        Some(hops) => hops.iter().filter_map(|h| h["gateway"].as_str().map(String::from)).collect(),
        None => r["gateway"].as_str().map(String::from).into_iter().collect(),
    };
    gateways.sort();
    Ok(gateways)
}

/// `[fib] nexthop_objects = false` (FRR: `no zebra nexthop kernel enable`), the path the
/// writer also takes on kernels without nexthop objects: ECMP routes carry their hops inline
/// (RTA_MULTIPATH), shrink when a peer leaves and go when both have left.
#[test]
fn without_nexthop_objects_routes_carry_their_hops() {
    let mut lab = Lab::new("fibmp");
    let node = lab.ns("node");
    let frr_ns = lab.ns("frr");
    let bird_ns = lab.ns("bird");
    lab.link(&node, &["10.0.1.2/24"], &frr_ns, &["10.0.1.1/24"]);
    lab.link(&node, &["10.0.2.2/24"], &bird_ns, &["10.0.2.1/24"]);
    let _frr = Speaker::start(
        Kind::Frr,
        &mut lab,
        &frr_ns,
        &spec(65101, "10.0.1.1", "10.0.1.2", &[PREFIX]),
    );
    let _bird = Speaker::start(
        Kind::Bird,
        &mut lab,
        &bird_ns,
        &spec(65102, "10.0.2.1", "10.0.2.2", &[PREFIX]),
    );
    let config = uplink_config("", &[("10.0.1.1", 65101), ("10.0.2.1", 65102)], RECEIVE_ALL);
    let _uplink = Uplink::start(
        &mut lab,
        &node,
        "uplink",
        &format!("{config}\n[fib]\nnexthop_objects = false\n"),
    );

    let wait_gateways = |lab: &Lab, want: &[&str]| {
        wait_for(&format!("{PREFIX} via {want:?} inline"), UP, || {
            let got = inline_gateways(&bgp_routes(&node, "main"), PREFIX)?;
            if got == want {
                Ok(())
            } else {
                Err(format!("{got:?}\n{}", lab.dump_logs()))
            }
        });
    };
    wait_gateways(&lab, &["10.0.1.1", "10.0.2.1"]);
    assert!(node.run(&["ip", "nexthop", "show"]).trim().is_empty(), "no nexthop objects");

    lab.stop(&format!("frr-{}", frr_ns.name));
    wait_gateways(&lab, &["10.0.2.1"]);
    lab.stop(&format!("bird-{}", bird_ns.name));
    wait_no_bgp_routes(&node, "main");
}
