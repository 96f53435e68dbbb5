//! Interop tier: uplink against real FRR 8.4, BIRD 2 and GoBGP 3 in network namespaces.
//! Every scenario runs against each implementation (see the macro at the end).

mod common;
use common::*;
use std::time::Duration;

const UP: Duration = Duration::from_secs(45);

/// uplink's config for the node side of a scenario.
struct NodeNeighbor<'a> {
    address: &'a str,
    asn: u32,
    extra: &'a str,
}

fn uplink_config(asn: u32, id: &str, prefixes: &[&str], neighbors: &[NodeNeighbor]) -> String {
    let mut c = format!(
        "[[bgp.routers]]\nasn = {asn}\nid = \"{id}\"\nprefixes = [{}]\n",
        prefixes.iter().map(|p| format!("\"{p}\"")).collect::<Vec<_>>().join(", ")
    );
    for n in neighbors {
        c.push_str(&format!(
            "\n[[bgp.routers.neighbors]]\naddress = \"{}\"\nasn = {}\nconnect_time = \"1s\"\n{}\n",
            n.address, n.asn, n.extra
        ));
    }
    c
}

fn wait_established(
    lab: &Lab,
    uplink: &Uplink,
    peer: &Speaker,
    uplink_side: &str,
    peer_side: &str,
) {
    let family = if uplink_side.contains(':') { "ipv6Unicast" } else { "ipv4Unicast" };
    wait_for(&format!("session {uplink_side} <-> {peer_side} Established"), UP, || {
        let ours = uplink.peer_state(family, uplink_side)?;
        let theirs = peer.established(peer_side);
        if ours == "Established" && theirs {
            Ok(())
        } else {
            Err(format!(
                "uplink says {ours}, {} established={theirs}\n{}",
                peer.label(),
                lab.dump_logs()
            ))
        }
    });
}

/// The link-local address of `ifname` in `ns`.
fn link_local_of(ns: &Ns, ifname: &str) -> String {
    let out = ns.run(&["ip", "-6", "-j", "addr", "show", "dev", ifname, "scope", "link"]);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let addresses = v[0]["addr_info"].as_array().cloned().unwrap_or_default();
    let link_local =
        addresses.iter().find_map(|a| a["local"].as_str().filter(|l| l.starts_with("fe80")));
    link_local.unwrap_or_else(|| panic!("no link-local: {out}")).into()
}

fn uplink_has(uplink: &Uplink, prefix: &str) -> bool {
    uplink.route_nexthops(prefix).map(|h| !h.is_empty()).unwrap_or(false)
}

/// Dual-stack eBGP with a 4-octet local ASN: sessions over IPv4 and IPv6, routes both ways
/// in both families, `to_receive` filtering, the peer restarting, and uplink stopping.
fn dual_stack_ebgp(kind: Kind) {
    let mut lab = Lab::new("dual");
    let node = lab.ns("node");
    let peer_ns = lab.ns("peer");
    let (node_if, peer_if) = lab.link(
        &node,
        &["10.0.1.2/24", "fd00:1::2/64"],
        &peer_ns,
        &["10.0.1.1/24", "fd00:1::1/64"],
    );

    let spec = SpeakerSpec {
        asn: 65102,
        router_id: "10.0.1.1".into(),
        neighbors: vec![
            NeighborSpec { address: "10.0.1.2".into(), asn: 4_200_000_001, ..Default::default() },
            NeighborSpec { address: "fd00:1::2".into(), asn: 4_200_000_001, ..Default::default() },
        ],
        announce: vec![
            "198.51.100.0/24".into(),
            "203.0.113.0/24".into(),
            "2001:db8:100::/48".into(),
        ],
    };
    // The wire, independently of how each peer shows it: the UPDATEs uplink sends.
    let capture = lab.path("bgp.pcap");
    let mut tcpdump = peer_ns.command("tcpdump");
    tcpdump.args(["-i", &peer_if, "-U", "-w"]).arg(&capture).args(["tcp", "port", "179"]);
    lab.spawn("tcpdump", tcpdump);
    let peer = Speaker::start(kind, &mut lab, &peer_ns, &spec);
    let receive_v4 = r#"to_receive = { allowed = { prefixes = [{ prefix = "198.51.100.0/24" }] } }
to_advertise = { allowed = { mode = "all" } }"#;
    let receive_v6 = r#"to_receive = { allowed = { prefixes = [{ prefix = "2001:db8::/32", le = 64 }] } }
to_advertise = { allowed = { mode = "all" } }"#;
    let config = uplink_config(
        4_200_000_001,
        "10.0.1.2",
        &["192.0.2.10/32", "2001:db8:200::/48"],
        &[
            NodeNeighbor { address: "10.0.1.1", asn: 65102, extra: receive_v4 },
            NodeNeighbor { address: "fd00:1::1", asn: 65102, extra: receive_v6 },
        ],
    );
    let uplink = Uplink::start(&mut lab, &node, "uplink", &config);

    wait_established(&lab, &uplink, &peer, "10.0.1.1", "10.0.1.2");
    wait_established(&lab, &uplink, &peer, "fd00:1::1", "fd00:1::2");

    // Routes from the peer: the allowed ones arrive with the peer as next hop.
    wait_for("uplink learns 198.51.100.0/24 via 10.0.1.1", UP, || {
        let hops = uplink.route_nexthops("198.51.100.0/24")?;
        (hops == ["10.0.1.1"]).then_some(()).ok_or(format!("next hops {hops:?}"))
    });
    wait_for("uplink learns 2001:db8:100::/48", UP, || {
        uplink_has(&uplink, "2001:db8:100::/48").then_some(()).ok_or("absent".to_string())
    });
    // to_receive: 203.0.113.0/24 is not allowed, so it never enters the table.
    std::thread::sleep(Duration::from_secs(1));
    assert!(!uplink_has(&uplink, "203.0.113.0/24"), "203.0.113.0/24 passed the to_receive filter");
    let summary = uplink.json(&["show", "bgp", "summary"]).unwrap();
    assert_eq!(summary["ipv4Unicast"]["peers"]["10.0.1.1"]["pfxRcd"], 1, "{summary:#}");
    assert_eq!(summary["ipv4Unicast"]["as"], 4_200_000_001u64);

    // Our routes on the peer, both families.
    for prefix in ["192.0.2.10/32", "2001:db8:200::/48"] {
        wait_for(&format!("{} learns {prefix}", peer.label()), UP, || {
            peer.has_route(prefix).then_some(()).ok_or("absent".to_string())
        });
    }
    let text = peer.route_text("192.0.2.10/32").unwrap();
    assert!(text.contains("4200000001"), "the AS path should carry the 4-octet ASN: {text}");
    // RFC 2545 §3: on the shared link, the IPv6 next hop is our global address plus our
    // link-local address on that link.
    let link_local = link_local_of(&node, &node_if);
    let detail = peer.route_detail("2001:db8:200::/48");
    assert!(detail.contains("fd00:1::2"), "next hop fd00:1::2 expected: {detail}");
    // GoBGP accepts the pair but shows only the global address in its CLI.
    if kind != Kind::Gobgp {
        assert!(
            detail.contains(&link_local),
            "{} should show link-local {link_local} beside fd00:1::2: {detail}",
            peer.label()
        );
    }
    lab.stop("tcpdump");
    let decoded = node.run(&["tcpdump", "-nn", "-vv", "-r", &capture.to_string_lossy()]);
    assert!(
        decoded.contains(&format!("fd00:1::2, {link_local}")),
        "the MP_REACH_NLRI uplink sent should carry fd00:1::2 and {link_local}:\n{decoded}"
    );

    // The text CLI works too.
    let summary_text = uplink.cli(&["show", "bgp", "summary"]).unwrap();
    assert!(summary_text.contains("10.0.1.1") && summary_text.contains("65102"), "{summary_text}");

    // ROUTE-REFRESH from the peer: uplink sends its routes again (RFC 2918 §4).
    let updates_sent = |u: &Uplink| -> u64 {
        let v = u.json(&["show", "bgp", "neighbors", "10.0.1.1"]).unwrap();
        v["10.0.1.1"]["messageStats"]["updatesSent"].as_u64().unwrap_or(0)
    };
    let before = updates_sent(&uplink);
    if peer.request_refresh("10.0.1.2") {
        wait_for("uplink answers ROUTE-REFRESH with its routes", UP, || {
            let now = updates_sent(&uplink);
            (now > before).then_some(()).ok_or(format!("updatesSent still {now}"))
        });
        let v = uplink.json(&["show", "bgp", "neighbors", "10.0.1.1"]).unwrap_or_default();
        let refreshes = &v["10.0.1.1"]["messageStats"]["routeRefreshRecv"];
        assert!(refreshes.as_u64().unwrap_or(0) >= 1, "routeRefreshRecv {refreshes}");
    }

    // The peer restarts: its routes leave, the session comes back, they return.
    let label = peer.label();
    lab.stop(&label);
    wait_for("uplink drops the peer's routes", UP, || {
        (!uplink_has(&uplink, "198.51.100.0/24")).then_some(()).ok_or("still there".to_string())
    });
    let peer = Speaker::start(kind, &mut lab, &peer_ns, &spec);
    wait_established(&lab, &uplink, &peer, "10.0.1.1", "10.0.1.2");
    wait_for("routes return after the peer restarts", UP, || {
        uplink_has(&uplink, "198.51.100.0/24").then_some(()).ok_or("absent".to_string())
    });
    wait_for("peer relearns our route", UP, || {
        peer.has_route("192.0.2.10/32").then_some(()).ok_or("absent".to_string())
    });

    // uplink stops: the peer withdraws what it learned from us.
    lab.stop("uplink");
    wait_for("peer withdraws 192.0.2.10/32 after uplink stops", UP, || {
        (!peer.has_route("192.0.2.10/32")).then_some(()).ok_or("still there".to_string())
    });
}

/// iBGP with TCP-MD5 on both sides; a second uplink with a wrong password never comes up
/// and says why in its log.
fn ibgp_md5(kind: Kind) {
    let mut lab = Lab::new("md5");
    let node = lab.ns("node");
    let bad = lab.ns("bad");
    let peer_ns = lab.ns("peer");
    lab.link(&node, &["10.0.1.2/24"], &peer_ns, &["10.0.1.1/24"]);
    lab.link(&bad, &["10.0.2.2/24"], &peer_ns, &["10.0.2.1/24"]);
    let spec = SpeakerSpec {
        asn: 65001,
        router_id: "10.0.1.1".into(),
        neighbors: vec![
            NeighborSpec {
                address: "10.0.1.2".into(),
                asn: 65001,
                password: Some("s3cret".into()),
                ..Default::default()
            },
            NeighborSpec {
                address: "10.0.2.2".into(),
                asn: 65001,
                password: Some("s3cret".into()),
                ..Default::default()
            },
        ],
        announce: vec!["198.51.100.0/24".into()],
    };
    let peer = Speaker::start(kind, &mut lab, &peer_ns, &spec);
    let allow = r#"password = "s3cret"
to_receive = { allowed = { mode = "all" } }
to_advertise = { allowed = { mode = "all" } }"#;
    let uplink = Uplink::start(
        &mut lab,
        &node,
        "uplink",
        &uplink_config(
            65001,
            "10.0.1.2",
            &["192.0.2.10/32"],
            &[NodeNeighbor { address: "10.0.1.1", asn: 65001, extra: allow }],
        ),
    );
    let wrong = r#"password = "wrong""#;
    let bad_uplink = Uplink::start(
        &mut lab,
        &bad,
        "bad-uplink",
        &uplink_config(
            65001,
            "10.0.2.2",
            &[],
            &[NodeNeighbor { address: "10.0.2.1", asn: 65001, extra: wrong }],
        ),
    );
    wait_established(&lab, &uplink, &peer, "10.0.1.1", "10.0.1.2");
    wait_for("iBGP route arrives", UP, || {
        uplink_has(&uplink, "198.51.100.0/24").then_some(()).ok_or("absent".to_string())
    });
    let route = uplink.json(&["show", "bgp", "routes", "198.51.100.0/24"]).unwrap();
    assert_eq!(route["paths"][0]["peer"]["type"], "internal", "{route:#}");
    wait_for("peer learns our route over iBGP", UP, || {
        peer.has_route("192.0.2.10/32").then_some(()).ok_or("absent".to_string())
    });
    // Wrong password: no session, and a log line that names the likely cause.
    std::thread::sleep(Duration::from_secs(8));
    assert_ne!(bad_uplink.peer_state("ipv4Unicast", "10.0.2.1").unwrap(), "Established");
    assert!(!peer.established("10.0.2.2"));
    let log = std::fs::read_to_string(lab.path("bad-uplink.log")).unwrap();
    assert!(log.contains("TCP-MD5"), "the log should name TCP-MD5 as the likely cause:\n{log}");
}

/// eBGP multihop through a router namespace; then GTSM (ttl_security = 1 hop) refuses the
/// same peer, which is two hops away.
fn multihop_and_gtsm(kind: Kind) {
    let mut lab = Lab::new("mh");
    let node = lab.ns("node");
    let router = lab.ns("rtr");
    let peer_ns = lab.ns("peer");
    lab.link(&node, &["10.0.1.2/24"], &router, &["10.0.1.1/24"]);
    lab.link(&router, &["10.0.2.1/24"], &peer_ns, &["10.0.2.2/24"]);
    node.run(&["ip", "route", "add", "default", "via", "10.0.1.1"]);
    peer_ns.run(&["ip", "route", "add", "default", "via", "10.0.2.1"]);
    let spec = SpeakerSpec {
        asn: 65102,
        router_id: "10.0.2.2".into(),
        neighbors: vec![NeighborSpec {
            address: "10.0.1.2".into(),
            asn: 65801,
            multihop: Some(3),
            source: Some("10.0.2.2".into()),
            ..Default::default()
        }],
        announce: vec!["198.51.100.0/24".into()],
    };
    let peer = Speaker::start(kind, &mut lab, &peer_ns, &spec);
    let multihop = r#"ebgp_multihop = 3
source_address = "10.0.1.2"
to_receive = { allowed = { mode = "all" } }"#;
    let uplink = Uplink::start(
        &mut lab,
        &node,
        "uplink",
        &uplink_config(
            65801,
            "10.0.1.2",
            &[],
            &[NodeNeighbor { address: "10.0.2.2", asn: 65102, extra: multihop }],
        ),
    );
    wait_established(&lab, &uplink, &peer, "10.0.2.2", "10.0.1.2");
    wait_for("route over the multihop session", UP, || {
        uplink_has(&uplink, "198.51.100.0/24").then_some(()).ok_or("absent".to_string())
    });

    // Same peer, now with GTSM expecting a directly connected neighbor.
    lab.stop("uplink");
    let gtsm = r#"ttl_security = 1
to_receive = { allowed = { mode = "all" } }"#;
    let guarded = Uplink::start(
        &mut lab,
        &node,
        "gtsm-uplink",
        &uplink_config(
            65801,
            "10.0.1.2",
            &[],
            &[NodeNeighbor { address: "10.0.2.2", asn: 65102, extra: gtsm }],
        ),
    );
    std::thread::sleep(Duration::from_secs(12));
    assert_ne!(
        guarded.peer_state("ipv4Unicast", "10.0.2.2").unwrap(),
        "Established",
        "GTSM must refuse a peer two hops away"
    );
    assert!(!peer.established("10.0.1.2"));
}

/// The same prefix from two peers of one implementation is ECMP in `show bgp routes`.
fn ecmp_two_peers(kind: Kind) {
    let mut lab = Lab::new("ecmp");
    let node = lab.ns("node");
    let p1 = lab.ns("p1");
    let p2 = lab.ns("p2");
    lab.link(&node, &["10.0.1.2/24"], &p1, &["10.0.1.1/24"]);
    lab.link(&node, &["10.0.2.2/24"], &p2, &["10.0.2.1/24"]);
    let spec = |addr: &str, id: &str, asn: u32| SpeakerSpec {
        asn,
        router_id: id.into(),
        neighbors: vec![NeighborSpec { address: addr.into(), asn: 65801, ..Default::default() }],
        announce: vec!["0.0.0.0/0".into(), "198.51.100.0/24".into()],
    };
    let peer1 = Speaker::start(kind, &mut lab, &p1, &spec("10.0.1.2", "10.0.1.1", 65101));
    let peer2 = Speaker::start(kind, &mut lab, &p2, &spec("10.0.2.2", "10.0.2.1", 65102));
    let allow = r#"to_receive = { allowed = { mode = "all" } }"#;
    let uplink = Uplink::start(
        &mut lab,
        &node,
        "uplink",
        &uplink_config(
            65801,
            "10.0.1.2",
            &[],
            &[
                NodeNeighbor { address: "10.0.1.1", asn: 65101, extra: allow },
                NodeNeighbor { address: "10.0.2.1", asn: 65102, extra: allow },
            ],
        ),
    );
    wait_established(&lab, &uplink, &peer1, "10.0.1.1", "10.0.1.2");
    wait_established(&lab, &uplink, &peer2, "10.0.2.1", "10.0.2.2");
    for prefix in ["198.51.100.0/24", "0.0.0.0/0"] {
        wait_for(&format!("{prefix} is ECMP over both peers"), UP, || {
            let hops = uplink.route_nexthops(prefix)?;
            (hops == ["10.0.1.1", "10.0.2.1"]).then_some(()).ok_or(format!("next hops {hops:?}"))
        });
    }
    let table = uplink.cli(&["show", "bgp", "routes"]).unwrap();
    assert!(table.contains("*>") && table.contains("*="), "one best and one multipath: {table}");
    // One peer leaves: the other remains the only path.
    lab.stop(&peer1.label());
    wait_for("ECMP shrinks to one path", UP, || {
        let hops = uplink.route_nexthops("198.51.100.0/24")?;
        (hops == ["10.0.2.1"]).then_some(()).ok_or(format!("next hops {hops:?}"))
    });
}

/// `max_prefixes`: one prefix too many closes the session with Cease/Maximum Number of
/// Prefixes Reached (RFC 4486 §4), which the peer reports.
#[test]
fn frr_max_prefixes() {
    let mut lab = Lab::new("maxpfx");
    let node = lab.ns("node");
    let peer_ns = lab.ns("peer");
    lab.link(&node, &["10.0.1.2/24"], &peer_ns, &["10.0.1.1/24"]);
    let spec = SpeakerSpec {
        asn: 65102,
        router_id: "10.0.1.1".into(),
        neighbors: vec![NeighborSpec {
            address: "10.0.1.2".into(),
            asn: 65801,
            ..Default::default()
        }],
        announce: vec![
            "198.51.100.0/24".into(),
            "198.51.101.0/24".into(),
            "198.51.102.0/24".into(),
        ],
    };
    let peer = Speaker::start(Kind::Frr, &mut lab, &peer_ns, &spec);
    let Speaker::Frr(frr) = &peer else { unreachable!() };
    let extra = r#"max_prefixes = 2
to_receive = { allowed = { mode = "all" } }"#;
    let uplink = Uplink::start(
        &mut lab,
        &node,
        "uplink",
        &uplink_config(
            65801,
            "10.0.1.2",
            &[],
            &[NodeNeighbor { address: "10.0.1.1", asn: 65102, extra }],
        ),
    );
    wait_for("FRR reports our Cease/Maximum Number of Prefixes Reached", UP, || {
        let v = frr.json("show bgp neighbors 10.0.1.2 json");
        let reason =
            v["10.0.1.2"]["lastNotificationReason"].as_str().unwrap_or_default().to_string()
                + v["10.0.1.2"]["lastResetDueTo"].as_str().unwrap_or_default();
        reason.contains("Maximum Number of Prefixes").then_some(()).ok_or(format!("{v}"))
    });
    let v = uplink.json(&["show", "bgp", "neighbors", "10.0.1.1"]).unwrap();
    assert_ne!(v["10.0.1.1"]["bgpState"], "Established", "{v:#}");
    assert!(!uplink_has(&uplink, "198.51.100.0/24"), "routes of a closed session must be gone");
    // Held down until a reload, in FRR's words (`show bgp summary json`).
    let summary = uplink.json(&["show", "bgp", "summary"]).unwrap();
    let peer = &summary["ipv4Unicast"]["peers"]["10.0.1.1"];
    assert_eq!(peer["peerState"], "PfxCt", "{summary:#}");
    assert_eq!(peer["state"], "Idle (PfxCt)", "{summary:#}");
}

macro_rules! per_implementation {
    ($($scenario:ident),*) => {
        mod frr { $( #[test] fn $scenario() { super::$scenario(super::Kind::Frr) } )* }
        mod bird { $( #[test] fn $scenario() { super::$scenario(super::Kind::Bird) } )* }
        mod gobgp { $( #[test] fn $scenario() { super::$scenario(super::Kind::Gobgp) } )* }
    };
}

per_implementation!(dual_stack_ebgp, ibgp_md5, multihop_and_gtsm, ecmp_two_peers);
