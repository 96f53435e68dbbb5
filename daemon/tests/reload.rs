//! Config reload against real FRR and BIRD, by SIGHUP and by `uplink reload`: a neighbor
//! added or removed starts or ends only its own session, a neighbor whose session settings
//! changed is reset alone, filters, communities, BFD timers, `always_block` and `[fib]`
//! settings change on the running sessions and kernel routes, and a config with an error — or
//! one that cannot be applied — changes nothing. The sessions a change did not touch never
//! flap.

mod common;
use common::*;
use std::time::Duration;

const UP: Duration = Duration::from_secs(60);

fn neighbor(address: &str, asn: u32, extra: &str) -> String {
    format!(
        "\n[[bgp.routers.neighbors]]\naddress = \"{address}\"\nasn = {asn}\nconnect_time = \"1s\"\n{extra}\n"
    )
}

fn config(neighbors: &[String]) -> String {
    let mut c = String::from("[[bgp.routers]]\nasn = 65001\nid = \"10.0.0.9\"\ninstall = false\n");
    for n in neighbors {
        c.push_str(n);
    }
    c
}

fn spec(asn: u32, id: &str, node: &str) -> SpeakerSpec {
    SpeakerSpec {
        asn,
        router_id: id.into(),
        neighbors: vec![NeighborSpec { address: node.into(), asn: 65001, ..Default::default() }],
        announce: vec![],
    }
}

/// FRR's count of sessions established with the node, and its last reset reason.
fn frr_sessions(frr: &Frr) -> (u64, String) {
    let v = frr.json("show bgp neighbors 10.0.1.2 json");
    let n = &v["10.0.1.2"];
    (
        n["connectionsEstablished"].as_u64().unwrap_or(0),
        n["lastResetDueTo"].as_str().unwrap_or("").to_string(),
    )
}

/// uplink's neighbors and their states, from `show bgp summary --json`.
fn uplink_peers(uplink: &Uplink) -> Vec<(String, String)> {
    let v = uplink.json(&["show", "bgp", "summary"]).unwrap_or_default();
    let mut out: Vec<(String, String)> = v["ipv4Unicast"]["peers"]
        .as_object()
        .map(|peers| {
            peers
                .iter()
                .map(|(a, p)| (a.clone(), p["state"].as_str().unwrap_or("").to_string()))
                .collect()
        })
        .unwrap_or_default();
    out.sort();
    out
}

fn reload(uplink: &Uplink, text: &str) {
    std::fs::write(&uplink.config, text).unwrap();
    run(&["pkill", "-HUP", "-f", &format!("run --config {}", uplink.config.display())]);
}

#[test]
fn sighup_changes_only_the_sessions_whose_neighbors_changed() {
    let mut lab = Lab::new("reload");
    let node = lab.ns("node");
    let frr_ns = lab.ns("frr");
    let bird_ns = lab.ns("bird");
    lab.link(&node, &["10.0.1.2/24"], &frr_ns, &["10.0.1.1/24"]);
    lab.link(&node, &["10.0.2.2/24"], &bird_ns, &["10.0.2.1/24"]);
    let frr = Frr::start(&mut lab, &frr_ns, &frr_conf(&spec(65101, "10.0.1.1", "10.0.1.2")));
    let bird = Speaker::start(Kind::Bird, &mut lab, &bird_ns, &spec(65102, "10.0.2.1", "10.0.2.2"));
    let frr_n = neighbor("10.0.1.1", 65101, "");
    let bird_n = neighbor("10.0.2.1", 65102, "");
    let uplink = Uplink::start(&mut lab, &node, "uplink", &config(std::slice::from_ref(&frr_n)));
    let all_up = |want: &[&str]| {
        wait_for(&format!("uplink peers {want:?} Established"), UP, || {
            let peers = uplink_peers(&uplink);
            let got: Vec<&str> = peers.iter().map(|(a, _)| a.as_str()).collect();
            if got == want && peers.iter().all(|(_, s)| s == "Established") {
                Ok(())
            } else {
                Err(format!("{peers:?}\n{}", lab.dump_logs()))
            }
        })
    };
    all_up(&["10.0.1.1"]);
    assert_eq!(frr_sessions(&frr).0, 1);

    // Add BIRD: its session starts; FRR's is not touched.
    reload(&uplink, &config(&[frr_n, bird_n.clone()]));
    all_up(&["10.0.1.1", "10.0.2.1"]);
    wait_for("BIRD sees the session", UP, || {
        if bird.established("10.0.2.2") {
            Ok(())
        } else {
            Err(lab.dump_logs())
        }
    });
    assert_eq!(frr_sessions(&frr).0, 1, "adding a neighbor must not reset another session");

    // Change FRR's hold time: its session alone is reset (Cease/Other Configuration Change).
    let bird_sessions = |u: &Uplink| {
        u.json(&["show", "bgp", "neighbors", "10.0.2.1"]).unwrap_or_default()["10.0.2.1"]
            ["connectionsEstablished"]
            .as_u64()
    };
    let bird_before = bird_sessions(&uplink);
    reload(&uplink, &config(&[neighbor("10.0.1.1", 65101, "hold_time = \"30s\""), bird_n.clone()]));
    wait_for("FRR's session reset once and back", UP, || {
        let (count, why) = frr_sessions(&frr);
        if count == 2 && frr.peer_state("ipv4Unicast", "10.0.1.2") == "Established" {
            Ok(why)
        } else {
            Err(format!("{count} {why}"))
        }
    });
    assert_eq!(bird_sessions(&uplink), bird_before, "BIRD's session must not be touched");
    let shown = uplink.json(&["show", "bgp", "neighbors", "10.0.1.1"]).unwrap();
    assert_eq!(shown["10.0.1.1"]["bgpTimerConfiguredHoldTimeMsecs"], 30000, "{shown}");

    // A config with an error: nothing changes.
    reload(&uplink, &config(&[neighbor("10.0.1.1", 65101, "hold_time = \"1s\""), bird_n.clone()]));
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(frr_sessions(&frr).0, 2, "a rejected config must not reset sessions");
    all_up(&["10.0.1.1", "10.0.2.1"]);

    // Remove BIRD: its session ends (Cease/Peer De-configured); FRR's stays.
    reload(&uplink, &config(&[neighbor("10.0.1.1", 65101, "hold_time = \"30s\"")]));
    all_up(&["10.0.1.1"]);
    wait_for("BIRD's session closed", UP, || {
        if !bird.established("10.0.2.2") {
            Ok(())
        } else {
            Err(lab.dump_logs())
        }
    });
    assert_eq!(frr_sessions(&frr).0, 2, "removing a neighbor must not reset another session");

    // The router's `prefixes` change: FRR gets the new prefix and loses the old one, and the
    // session is not reset (frr-k8s: `prefixes` go to neighbors whose toAdvertise allows them).
    let frr_all = neighbor(
        "10.0.1.1",
        65101,
        "hold_time = \"30s\"\nto_advertise = { allowed = { mode = \"all\" } }",
    );
    let with_prefixes = |prefixes: &str| {
        config(std::slice::from_ref(&frr_all)).replacen(
            "install = false\n",
            &format!("install = false\nprefixes = [{prefixes}]\n"),
            1,
        )
    };
    reload(&uplink, &with_prefixes("\"10.77.1.0/24\""));
    wait_for("FRR has 10.77.1.0/24", UP, || match frr.route_nexthops("10.77.1.0/24").as_slice() {
        [hop] if hop == "10.0.1.2" => Ok(()),
        other => Err(format!("{other:?}")),
    });
    let sessions = frr_sessions(&frr).0;
    reload(&uplink, &with_prefixes("\"10.77.2.0/24\""));
    wait_for("FRR has 10.77.2.0/24 and not 10.77.1.0/24", UP, || {
        let (new, old) = (frr.route_nexthops("10.77.2.0/24"), frr.route_nexthops("10.77.1.0/24"));
        if new.len() == 1 && old.is_empty() {
            Ok(())
        } else {
            Err(format!("new {new:?} old {old:?}"))
        }
    });
    assert_eq!(frr_sessions(&frr).0, sessions, "changing prefixes must not reset the session");
}

/// Router-level changes: a new router id restarts that router (its sessions end with
/// Cease/Other Configuration Change and come back under the new id); removing the router ends
/// its sessions with Cease/Peer De-configured and takes its routes out of the kernel; adding it
/// back starts it; a new kernel metric moves its routes. All without restarting uplink.
#[test]
fn sighup_restarts_removes_and_adds_routers() {
    let mut lab = Lab::new("reload-router");
    let node = lab.ns("node");
    let frr_ns = lab.ns("frr");
    lab.link(&node, &["10.0.1.2/24"], &frr_ns, &["10.0.1.1/24"]);
    let mut frr_spec = spec(65101, "10.0.1.1", "10.0.1.2");
    frr_spec.announce = vec!["10.88.0.0/24".into()];
    let frr = Frr::start(&mut lab, &frr_ns, &frr_conf(&frr_spec));
    let router = |id: &str| {
        format!(
            "[[bgp.routers]]\nasn = 65001\nid = \"{id}\"\nprefixes = [\"10.77.0.0/24\"]\n{}",
            neighbor(
                "10.0.1.1",
                65101,
                "to_advertise = { allowed = { mode = \"all\" } }\nto_receive = { allowed = { mode = \"all\" } }"
            )
        )
    };
    let uplink = Uplink::start(&mut lab, &node, "uplink", &router("10.0.0.9"));
    let frr_sees = |id: &str| {
        wait_for(&format!("FRR Established with router id {id} and 10.77.0.0/24"), UP, || {
            let v = frr.json("show bgp neighbors 10.0.1.2 json");
            let n = &v["10.0.1.2"];
            let routes = frr.route_nexthops("10.77.0.0/24");
            if n["bgpState"] == "Established" && n["remoteRouterId"] == id && routes.len() == 1 {
                Ok(())
            } else {
                Err(format!("{} {} {routes:?}", n["bgpState"], n["remoteRouterId"]))
            }
        })
    };
    let kernel_route = || route_with_nexthops(&node, &format!("10.88.0.0/24 proto {UPLINK_PROTO}"));
    frr_sees("10.0.0.9");
    wait_for("10.88.0.0/24 in the node's kernel", UP, || {
        let r = kernel_route();
        if r.contains("via 10.0.1.1") {
            Ok(())
        } else {
            Err(r)
        }
    });

    reload(&uplink, &router("10.0.0.10"));
    frr_sees("10.0.0.10");
    let (count, why) = frr_sessions(&frr);
    assert_eq!(count, 2, "one reset for the new router id ({why})");
    // FRR forgets the NOTIFICATION's reason once the session is back; it keeps the count.
    let v = frr.json("show bgp neighbors 10.0.1.2 json");
    let notifications = v["10.0.1.2"]["messageStats"]["notificationsRecv"].as_u64();
    assert!(notifications >= Some(1), "FRR got no NOTIFICATION for the reset ({why}): {v}");

    // Remove the router: its session ends, its routes leave the kernel.
    reload(&uplink, "[node]\nname = \"n1\"\n");
    wait_for("FRR's session closed and the kernel route gone", UP, || {
        let state = frr.peer_state("ipv4Unicast", "10.0.1.2");
        let r = kernel_route();
        if state != "Established" && r.trim().is_empty() {
            Ok(())
        } else {
            Err(format!("{state} {r}"))
        }
    });
    let v = frr.json("show bgp neighbors 10.0.1.2 json");
    assert_eq!(v["10.0.1.2"]["lastNotificationReason"], "Cease/Peer De-configured", "{v}");

    // Add it back: it starts (port 179 was released).
    reload(&uplink, &router("10.0.0.10"));
    frr_sees("10.0.0.10");
    wait_for("10.88.0.0/24 back in the node's kernel", UP, || {
        let r = kernel_route();
        if r.contains("via 10.0.1.1") {
            Ok(())
        } else {
            Err(r)
        }
    });

    // A new kernel metric: the router starts again with a new FIB instance; the route moves
    // from metric 20 to 30 and no copy stays behind at the old metric.
    reload(&uplink, &router("10.0.0.10").replacen("prefixes", "metric = 30\nprefixes", 1));
    wait_for("10.88.0.0/24 at metric 30 only", UP, || {
        let r = kernel_route();
        if r.contains("metric 30") && !r.contains("metric 20") && r.contains("via 10.0.1.1") {
            Ok(())
        } else {
            Err(r)
        }
    });
}

/// The node's config in the live-change test: one FRR neighbor with a BFD profile, filters in
/// both directions and a community; `in_fragment` puts the neighbor in `conf.d/peer.toml`.
struct Live {
    receive: Vec<&'static str>,
    advertise: Vec<&'static str>,
    community: &'static str,
    bfd_ms: u32,
    always_block: Option<&'static str>,
    in_fragment: bool,
}

impl Live {
    /// (main file, conf.d/peer.toml or None).
    fn files(&self) -> (String, Option<String>) {
        let quoted =
            |list: &[&str]| list.iter().map(|p| format!("\"{p}\"")).collect::<Vec<_>>().join(", ");
        let receive = self
            .receive
            .iter()
            .map(|p| format!("{{ prefix = \"{p}\" }}"))
            .collect::<Vec<_>>()
            .join(", ");
        let mut main = String::new();
        if let Some(block) = self.always_block {
            main.push_str(&format!("always_block = [\"{block}\"]\n"));
        }
        main.push_str(&format!(
            "[[bgp.bfd_profiles]]\nname = \"fast\"\ntransmit_interval = \"{0}ms\"\nreceive_interval = \"{0}ms\"\n\n\
             [[bgp.routers]]\nasn = 65001\nid = \"10.0.0.9\"\ninstall = false\n\
             prefixes = [\"10.77.1.0/24\", \"10.77.2.0/24\"]\n",
            self.bfd_ms
        ));
        let neighbor = format!(
            "[[bgp.routers.neighbors]]\naddress = \"10.0.1.1\"\nasn = 65101\nconnect_time = \"1s\"\n\
             bfd_profile = \"fast\"\nto_receive = {{ allowed = {{ prefixes = [{receive}] }} }}\n\
             to_advertise = {{ allowed = {{ prefixes = [{}] }}, with_community = [{{ community = \"{}\", prefixes = [\"10.77.1.0/24\"] }}] }}\n",
            quoted(&self.advertise),
            self.community
        );
        if self.in_fragment {
            (main, Some(format!("[[bgp.routers]]\nasn = 65001\n{neighbor}")))
        } else {
            (main + &neighbor, None)
        }
    }
}

/// Writes the config files and runs `uplink reload`; returns (succeeded, stdout + stderr).
fn reload_cli(uplink: &Uplink, live: &Live) -> (bool, String) {
    let (main, fragment) = live.files();
    std::fs::write(&uplink.config, main).unwrap();
    let peer_file = uplink.config.parent().unwrap().join("conf.d/peer.toml");
    match fragment {
        Some(text) => std::fs::write(&peer_file, text).unwrap(),
        None => {
            let _ = std::fs::remove_file(&peer_file);
        }
    }
    match uplink.cli(&["reload"]) {
        Ok(out) => (true, out),
        Err(out) => (false, out),
    }
}

/// FRR's view of its session with the node: (connectionsEstablished, the epoch it came up,
/// ROUTE-REFRESH messages received).
fn frr_session(frr: &Frr) -> (u64, u64, u64) {
    let v = frr.json("show bgp neighbors 10.0.1.2 json");
    let n = &v["10.0.1.2"];
    (
        n["connectionsEstablished"].as_u64().unwrap_or(0),
        n["bgpTimerUpEstablishedEpoch"].as_u64().unwrap_or(0),
        n["messageStats"]["routeRefreshRecv"].as_u64().unwrap_or(0),
    )
}

/// FRR bfdd's peer entry for the node.
fn frr_bfd(frr: &Frr) -> serde_json::Value {
    let v = frr.json("show bfd peers json");
    v.as_array()
        .into_iter()
        .flatten()
        .find(|p| p["peer"] == "10.0.1.2")
        .cloned()
        .unwrap_or_default()
}

/// The communities FRR holds on its path for `prefix`.
fn frr_communities(frr: &Frr, prefix: &str) -> String {
    let v = frr.route(prefix);
    v["paths"][0]["community"]["string"].as_str().unwrap_or("").to_string()
}

/// Issue #13: reloads that change a neighbor's `to_receive` (wider, then narrower), its
/// `to_advertise` and community, move it to another file, change its BFD profile's interval
/// and add and remove `always_block` — each applied on the running session, each said so by
/// `uplink reload`, in effect on both sides, and FRR's session never reset (same
/// connectionsEstablished and established epoch) nor its BFD session restarted (same remote
/// discriminator). A rejected config exits non-zero with its file:line:column error and changes
/// nothing.
#[test]
fn uplink_reload_changes_policies_live_without_resetting_the_session() {
    let mut lab = Lab::new("reload-live");
    let node = lab.ns("node");
    let frr_ns = lab.ns("frr");
    lab.link(&node, &["10.0.1.2/24"], &frr_ns, &["10.0.1.1/24"]);
    let frr = Frr::start_with_bfd(
        &mut lab,
        &frr_ns,
        "frr defaults datacenter\nbfd\n peer 10.0.1.2\n  transmit-interval 100\n  receive-interval 100\n !\n!\n\
         router bgp 65101\n bgp router-id 10.0.1.1\n no bgp ebgp-requires-policy\n no bgp network import-check\n\
         neighbor 10.0.1.2 remote-as 65001\n neighbor 10.0.1.2 timers connect 1\n\
         address-family ipv4 unicast\n  network 10.88.1.0/24\n  network 10.88.2.0/24\n exit-address-family\n",
    );
    let mut live = Live {
        receive: vec!["10.88.1.0/24"],
        advertise: vec!["10.77.1.0/24"],
        community: "65000:1",
        bfd_ms: 300,
        always_block: None,
        in_fragment: false,
    };
    let uplink = Uplink::start(&mut lab, &node, "uplink", &live.files().0);
    let has = |prefix: &str| uplink.route_nexthops(prefix).unwrap_or_default() == ["10.0.1.1"];
    let frr_has = |prefix: &str| frr.route_nexthops(prefix) == ["10.0.1.2"];
    wait_for("the session, BFD on both sides and the first routes", UP, || {
        let bfd = frr_bfd(&frr);
        if frr.peer_state("ipv4Unicast", "10.0.1.2") == "Established"
            && bfd["status"] == "up"
            && has("10.88.1.0/24")
            && frr_has("10.77.1.0/24")
        {
            Ok(())
        } else {
            Err(format!("FRR BFD {bfd}\n{}", lab.dump_logs()))
        }
    });
    assert!(!has("10.88.2.0/24") && !frr_has("10.77.2.0/24"));
    assert_eq!(frr_communities(&frr, "10.77.1.0/24"), "65000:1");
    let (connections, epoch, _) = frr_session(&frr);
    assert_eq!(connections, 1);
    let discriminator = frr_bfd(&frr)["remote-id"].clone();
    let untouched = |step: &str| {
        let (c, e, _) = frr_session(&frr);
        // FRR derives the epoch from the uptime: it moves by a second without a reset.
        assert!(
            c == connections && e.abs_diff(epoch) <= 1,
            "{step}: FRR's session was reset: {:?} then {:?}",
            (connections, epoch),
            (c, e)
        );
        let bfd = frr_bfd(&frr);
        assert_eq!(bfd["status"], "up", "{step}: {bfd}");
        assert_eq!(bfd["remote-id"], discriminator, "{step}: the BFD session restarted: {bfd}");
    };

    // to_receive wider: ROUTE-REFRESH, and FRR's second prefix arrives.
    live.receive = vec!["10.88.1.0/24", "10.88.2.0/24"];
    let (ok, out) = reload_cli(&uplink, &live);
    assert!(ok, "{out}");
    assert!(
        out.contains("neighbor 10.0.1.1: updated live: to_receive (ROUTE-REFRESH sent"),
        "{out}"
    );
    wait_for("10.88.2.0/24 learned after the ROUTE-REFRESH", UP, || {
        if has("10.88.2.0/24") && frr_session(&frr).2 >= 1 {
            Ok(())
        } else {
            Err(format!("{:?}", frr_session(&frr)))
        }
    });
    untouched("to_receive wider");

    // to_receive narrower: what it refuses now goes at once, without asking the peer.
    live.receive = vec!["10.88.2.0/24"];
    let refreshes = frr_session(&frr).2;
    let (ok, out) = reload_cli(&uplink, &live);
    assert!(ok && out.contains("updated live: to_receive (narrower"), "{out}");
    assert!(!out.contains("ROUTE-REFRESH"), "a narrower filter needs no refresh: {out}");
    wait_for("10.88.1.0/24 withdrawn", UP, || {
        (!has("10.88.1.0/24")).then_some(()).ok_or("still there".to_string())
    });
    assert!(has("10.88.2.0/24"));
    assert_eq!(frr_session(&frr).2, refreshes);
    untouched("to_receive narrower");

    // to_advertise and the community: new UPDATEs.
    live.advertise = vec!["10.77.1.0/24", "10.77.2.0/24"];
    live.community = "65000:2";
    let (ok, out) = reload_cli(&uplink, &live);
    assert!(
        ok && out.contains("to_advertise allowed prefixes, with_community (new UPDATEs"),
        "{out}"
    );
    wait_for("FRR has 10.77.2.0/24 and 10.77.1.0/24 with 65000:2", UP, || {
        let c = frr_communities(&frr, "10.77.1.0/24");
        if frr_has("10.77.2.0/24") && c == "65000:2" {
            Ok(())
        } else {
            Err(c)
        }
    });
    untouched("to_advertise and community");

    // The neighbor moves to conf.d/peer.toml: nothing to do.
    live.in_fragment = true;
    let (ok, out) = reload_cli(&uplink, &live);
    assert!(ok && out.contains("1 neighbor(s) unchanged"), "{out}");
    assert!(!out.contains("updated") && !out.contains("reset"), "{out}");
    let shown = uplink.json(&["show", "running-config"]).unwrap().to_string();
    assert!(shown.contains("peer.toml"), "{shown}");
    untouched("moved to another file");

    // The BFD profile's interval: a Poll Sequence, FRR sees the new interval.
    live.bfd_ms = 200;
    let (ok, out) = reload_cli(&uplink, &live);
    assert!(ok && out.contains("new timers (Poll Sequence"), "{out}");
    wait_for("FRR sees the 200 ms interval", UP, || {
        let bfd = frr_bfd(&frr);
        (bfd["remote-transmit-interval"] == 200).then_some(()).ok_or(bfd.to_string())
    });
    untouched("BFD interval");

    // always_block: the learned prefix goes; removing it brings it back (ROUTE-REFRESH).
    live.always_block = Some("10.88.0.0/16");
    let (ok, out) = reload_cli(&uplink, &live);
    assert!(ok && out.contains("node: always_block [] → [10.88.0.0/16]"), "{out}");
    wait_for("10.88.2.0/24 blocked", UP, || {
        (!has("10.88.2.0/24")).then_some(()).ok_or("still there".to_string())
    });
    live.always_block = None;
    let (ok, out) = reload_cli(&uplink, &live);
    assert!(ok && out.contains("ROUTE-REFRESH"), "{out}");
    wait_for("10.88.2.0/24 back", UP, || {
        has("10.88.2.0/24").then_some(()).ok_or("not yet".to_string())
    });
    untouched("always_block");

    // A rejected config: non-zero, the error with its position, nothing changed.
    let (_, fragment) = live.files();
    let peer_file = uplink.config.parent().unwrap().join("conf.d/peer.toml");
    let broken = fragment.unwrap().replace("connect_time", "hold_time = \"1s\"\nconnect_time");
    std::fs::write(&peer_file, broken).unwrap();
    let (ok, out) = match uplink.cli(&["reload"]) {
        Ok(out) => (true, out),
        Err(out) => (false, out),
    };
    assert!(!ok, "a rejected config must fail `uplink reload`: {out}");
    assert!(out.contains("rejected; nothing changed"), "{out}");
    assert!(out.contains("peer.toml:6:13: bgp.routers[0].neighbors[0].hold_time"), "{out}");
    let json = match uplink.cli(&["reload", "--json"]) {
        Ok(out) | Err(out) => out,
    };
    let v: serde_json::Value =
        serde_json::from_str(&json).unwrap_or_else(|e| panic!("{e}: {json}"));
    assert_eq!(v["applied"], false, "{v}");
    assert!(v["config_errors"][0]["line"].as_u64() > Some(0), "{v}");
    assert!(has("10.88.2.0/24") && frr_has("10.77.2.0/24"));
    untouched("rejected config");
    let ours = uplink.json(&["show", "bgp", "neighbors", "10.0.1.1"]).unwrap();
    assert_eq!(ours["10.0.1.1"]["connectionsEstablished"], 1, "{ours}");
}

/// A peer that did not advertise route refresh (BIRD with `enable route refresh off`) cannot
/// send its routes again, so a wider `to_receive` resets its session — and `uplink reload`
/// says why; a narrower one is applied live. A router for a VRF without its device waits for
/// it and changes nothing else.
#[test]
fn a_peer_without_route_refresh_is_reset_and_a_router_waits_for_its_vrf() {
    let mut lab = Lab::new("reload-norr");
    let node = lab.ns("node");
    let bird_ns = lab.ns("bird");
    lab.link(&node, &["10.0.2.2/24"], &bird_ns, &["10.0.2.1/24"]);
    let bird = Bird::start(
        &mut lab,
        &bird_ns,
        "router id 10.0.2.1;\nprotocol device {}\n\
         protocol static { ipv4; route 10.99.1.0/24 blackhole; route 10.99.2.0/24 blackhole; }\n\
         protocol bgp uplink {\n  local as 65102;\n  neighbor 10.0.2.2 as 65001;\n\
         connect retry time 1;\n  error wait time 1, 5;\n  enable route refresh off;\n\
         ipv4 { import all; export where source = RTS_STATIC; };\n}\n",
    );
    let config = |receive: &str, extra_router: &str| {
        format!(
            "[[bgp.routers]]\nasn = 65001\nid = \"10.0.0.9\"\ninstall = false\n\
             [[bgp.routers.neighbors]]\naddress = \"10.0.2.1\"\nasn = 65102\nconnect_time = \"1s\"\n\
             to_receive = {{ allowed = {{ prefixes = [{receive}] }} }}\n{extra_router}"
        )
    };
    let one = "{ prefix = \"10.99.1.0/24\" }";
    let both = "{ prefix = \"10.99.1.0/24\" }, { prefix = \"10.99.2.0/24\" }";
    let uplink = Uplink::start(&mut lab, &node, "uplink", &config(one, ""));
    let has = |prefix: &str| uplink.route_nexthops(prefix).unwrap_or_default() == ["10.0.2.1"];
    let connections = || {
        let v = uplink.json(&["show", "bgp", "neighbors", "10.0.2.1"]).unwrap_or_default();
        v["10.0.2.1"]["connectionsEstablished"].as_u64().unwrap_or(0)
    };
    wait_for("the session and 10.99.1.0/24", UP, || {
        (has("10.99.1.0/24") && bird.established("uplink")).then_some(()).ok_or(lab.dump_logs())
    });
    let shown = uplink.json(&["show", "bgp", "neighbors", "10.0.2.1"]).unwrap();
    assert!(!shown.to_string().contains("\"routeRefresh\":true"), "BIRD offered it: {shown}");
    assert_eq!(connections(), 1);

    // Wider: reset, with the reason; BIRD's second prefix arrives with the new session.
    std::fs::write(&uplink.config, config(both, "")).unwrap();
    let out = uplink.cli(&["reload"]).unwrap_or_else(|e| panic!("{e}"));
    assert!(
        out.contains("neighbor 10.0.2.1: reset: the import policy now accepts more and the peer did not advertise route refresh"),
        "{out}"
    );
    wait_for("10.99.2.0/24 after the reset", UP, || {
        (has("10.99.2.0/24") && connections() == 2).then_some(()).ok_or(lab.dump_logs())
    });

    // Narrower, and a prefix limit: live, no reset.
    std::fs::write(&uplink.config, config(one, "max_prefixes = 1\n")).unwrap();
    let out = uplink.cli(&["reload"]).unwrap_or_else(|e| panic!("{e}"));
    assert!(out.contains("updated live: to_receive (narrower"), "{out}");
    assert!(out.contains("; max_prefixes 1"), "{out}");
    wait_for("10.99.2.0/24 withdrawn", UP, || {
        (!has("10.99.2.0/24")).then_some(()).ok_or("still there".to_string())
    });
    assert_eq!(connections(), 2);

    // A new router for a VRF whose device is not there (no VRF devices on this kernel) waits
    // for it; the rest of the reload applies.
    let red = "max_prefixes = 1\n[[bgp.routers]]\nasn = 65001\nvrf = \"red\"\nid = \"10.0.0.9\"\ninstall = false\n";
    std::fs::write(&uplink.config, config(one, red)).unwrap();
    let out = uplink.cli(&["reload"]).unwrap_or_else(|e| panic!("{e}"));
    assert!(out.contains("router 65001 (vrf red): waiting: no VRF device \"red\" yet"), "{out}");
    assert_eq!(connections(), 2, "a router waiting in another VRF reset this one's session");
    let summary = uplink.json(&["show", "bgp", "summary", "--vrf", "all"]).unwrap().to_string();
    assert!(summary.contains("red"), "{summary}");
}

/// `[fib] nexthop_objects` takes effect on reload: the ECMP route of two peers moves from inline
/// hops (RTA_MULTIPATH) onto a nexthop group and back, replaced in place — `ip monitor` never
/// sees it deleted — and no nexthop object is left behind.
#[test]
fn fib_settings_change_on_reload_without_withdrawing_routes() {
    const PREFIX: &str = "198.51.100.0/24";
    let mut lab = Lab::new("reload-fib");
    let node = lab.ns("node");
    let frr_ns = lab.ns("frr");
    let bird_ns = lab.ns("bird");
    lab.link(&node, &["10.0.1.2/24"], &frr_ns, &["10.0.1.1/24"]);
    lab.link(&node, &["10.0.2.2/24"], &bird_ns, &["10.0.2.1/24"]);
    for (kind, ns, asn, id) in
        [(Kind::Frr, &frr_ns, 65101, "10.0.1.1"), (Kind::Bird, &bird_ns, 65102, "10.0.2.1")]
    {
        let mut s = spec(asn, id, "10.0.1.2");
        s.neighbors[0].address = if kind == Kind::Frr { "10.0.1.2" } else { "10.0.2.2" }.into();
        s.announce = vec![PREFIX.into()];
        let _ = Speaker::start(kind, &mut lab, ns, &s);
    }
    let config = |objects: bool| {
        let all = "to_receive = { allowed = { mode = \"all\" } }";
        format!(
            "[fib]\nnexthop_objects = {objects}\n[[bgp.routers]]\nasn = 65001\nid = \"10.0.0.9\"\n{}{}",
            neighbor("10.0.1.1", 65101, all),
            neighbor("10.0.2.1", 65102, all)
        )
    };
    let uplink = Uplink::start(&mut lab, &node, "uplink", &config(false));
    // (nexthop id, gateways) of PREFIX in the kernel.
    let kernel = || -> Result<(Option<u64>, Vec<String>), String> {
        let out = node.run(&["ip", "-j", "route", "show", PREFIX, "proto", UPLINK_PROTO]);
        let v: serde_json::Value = serde_json::from_str(&out).map_err(|e| e.to_string())?;
        let r = v.get(0).ok_or(format!("no route: {out}"))?;
        let mut gateways: Vec<String> = match (r["nhid"].as_u64(), r["nexthops"].as_array()) {
            (Some(id), _) => {
                let group = node.run(&["ip", "-j", "nexthop", "show", "id", &id.to_string()]);
                let g: serde_json::Value =
                    serde_json::from_str(&group).map_err(|e| e.to_string())?;
                g[0]["group"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|m| {
                        let member = m["id"].to_string();
                        let out = node.run(&["ip", "-j", "nexthop", "show", "id", &member]);
                        let mv: serde_json::Value = serde_json::from_str(&out).unwrap_or_default();
                        mv[0]["gateway"].as_str().unwrap_or("?").to_string()
                    })
                    .collect()
            }
            (None, Some(hops)) => {
                hops.iter().filter_map(|h| h["gateway"].as_str().map(String::from)).collect()
            }
            (None, None) => r["gateway"].as_str().map(String::from).into_iter().collect(),
        };
        gateways.sort();
        Ok((r["nhid"].as_u64(), gateways))
    };
    let both = vec!["10.0.1.1".to_string(), "10.0.2.1".to_string()];
    wait_for("the ECMP route with inline hops", UP, || match kernel()? {
        (None, g) if g == both => Ok(()),
        other => Err(format!("{other:?}\n{}", lab.dump_logs())),
    });
    let mut monitor = node.command("ip");
    monitor.args(["monitor", "route"]);
    lab.spawn("monitor", monitor);
    std::thread::sleep(Duration::from_millis(300));

    std::fs::write(&uplink.config, config(true)).unwrap();
    let out = uplink.cli(&["reload"]).unwrap_or_else(|e| panic!("{e}"));
    assert!(out.contains("node: fib.nexthop_objects false → true"), "{out}");
    wait_for("the route on a nexthop group of both peers", UP, || match kernel()? {
        (Some(_), g) if g == both => Ok(()),
        other => Err(format!("{other:?}")),
    });

    std::fs::write(&uplink.config, config(false)).unwrap();
    let out = uplink.cli(&["reload"]).unwrap_or_else(|e| panic!("{e}"));
    assert!(out.contains("node: fib.nexthop_objects true → false"), "{out}");
    wait_for("inline hops again and no nexthop object left", UP, || {
        let objects = node.run(&["ip", "nexthop", "show"]);
        match kernel()? {
            (None, g) if g == both && objects.trim().is_empty() => Ok(()),
            other => Err(format!("{other:?} {objects}")),
        }
    });
    let log = std::fs::read_to_string(lab.path("monitor.log")).unwrap_or_default();
    assert!(log.contains(PREFIX), "ip monitor saw no change at all: {log}");
    assert!(
        !log.lines().any(|l| l.starts_with("Deleted") && l.contains(PREFIX)),
        "the route left the kernel while changing form:\n{log}"
    );
    let sessions = uplink.json(&["show", "bgp", "summary"]).unwrap();
    for peer in ["10.0.1.1", "10.0.2.1"] {
        assert_eq!(sessions["ipv4Unicast"]["peers"][peer]["state"], "Established", "{sessions}");
    }
}

/// `uplink clear bgp`: `soft in` sends FRR a ROUTE-REFRESH and `soft out` our UPDATEs again,
/// neither resetting the session; a hard clear ends it with Cease/Administrative Reset (RFC
/// 4486) and it comes back; an unknown neighbor or a wrong word exits 1 and touches nothing.
#[test]
fn clear_bgp_refreshes_or_resets_the_session() {
    let mut lab = Lab::new("clear");
    let node = lab.ns("node");
    let frr_ns = lab.ns("frr");
    lab.link(&node, &["10.0.1.2/24"], &frr_ns, &["10.0.1.1/24"]);
    let frr = Frr::start(
        &mut lab,
        &frr_ns,
        "frr defaults datacenter\nrouter bgp 65101\n bgp router-id 10.0.1.1\n no bgp ebgp-requires-policy\n\
         no bgp network import-check\n neighbor 10.0.1.2 remote-as 65001\n neighbor 10.0.1.2 timers connect 1\n\
         address-family ipv4 unicast\n  network 10.88.1.0/24\n exit-address-family\n",
    );
    let config = "[[bgp.routers]]\nasn = 65001\nid = \"10.0.0.9\"\ninstall = false\nprefixes = [\"10.77.1.0/24\"]\n\
                  [[bgp.routers.neighbors]]\naddress = \"10.0.1.1\"\nasn = 65101\nconnect_time = \"1s\"\n\
                  to_receive = { allowed = { mode = \"all\" } }\nto_advertise = { allowed = { mode = \"all\" } }\n";
    let uplink = Uplink::start(&mut lab, &node, "uplink", config);
    wait_for("the session and the routes both ways", UP, || {
        let ours = uplink.route_nexthops("10.88.1.0/24").unwrap_or_default();
        if ours == ["10.0.1.1"] && frr.route_nexthops("10.77.1.0/24") == ["10.0.1.2"] {
            Ok(())
        } else {
            Err(lab.dump_logs())
        }
    });
    let updates_received = || {
        let v = frr.json("show bgp neighbors 10.0.1.2 json");
        v["10.0.1.2"]["messageStats"]["updatesRecv"].as_u64().unwrap_or(0)
    };
    let (connections, epoch, refreshes) = frr_session(&frr);
    let updates = updates_received();

    let out =
        uplink.cli(&["clear", "bgp", "10.0.1.1", "soft", "in"]).unwrap_or_else(|e| panic!("{e}"));
    assert!(out.contains("neighbor 10.0.1.1 (vrf default): ROUTE-REFRESH sent"), "{out}");
    wait_for("FRR to receive the ROUTE-REFRESH", UP, || match frr_session(&frr) {
        (_, _, r) if r > refreshes => Ok(()),
        other => Err(format!("{other:?}")),
    });
    let out = uplink.cli(&["clear", "bgp", "*", "soft", "out"]).unwrap_or_else(|e| panic!("{e}"));
    assert!(out.contains("our routes sent again"), "{out}");
    wait_for("FRR to receive our UPDATEs again", UP, || {
        let now = updates_received();
        (now > updates).then_some(()).ok_or(format!("updatesRecv {now}, was {updates}"))
    });
    let (c, e, _) = frr_session(&frr);
    assert!(c == connections && e.abs_diff(epoch) <= 1, "a soft clear reset the session");

    for (args, expect) in [
        (&["clear", "bgp", "10.0.9.9"][..], "no neighbor 10.0.9.9"),
        (&["clear", "bgp", "10.0.1.1", "soft", "sideways"][..], "`soft sideways`"),
    ] {
        let error = uplink.cli(args).expect_err("accepted");
        assert!(error.contains(expect), "{args:?}: {error}");
    }
    assert_eq!(frr_session(&frr).0, connections, "a refused clear touched the session");

    let notifications_received = || {
        let v = frr.json("show bgp neighbors 10.0.1.2 json");
        v["10.0.1.2"]["messageStats"]["notificationsRecv"].as_u64().unwrap_or(0)
    };
    let before = notifications_received();
    let out = uplink.cli(&["clear", "bgp", "10.0.1.1"]).unwrap_or_else(|e| panic!("{e}"));
    assert!(out.contains("reset (Cease/Administrative Reset)"), "{out}");
    // FRR 8.4 keeps its first reset reason in `lastResetDueTo`; the NOTIFICATIONs it counted
    // (ours, and a collision's when both sides connect again at once), the new connection
    // and uplink's log say what happened.
    wait_for("the session back after a hard clear, with FRR counting our NOTIFICATION", UP, || {
        let v = frr.json("show bgp neighbors 10.0.1.2 json");
        let n = &v["10.0.1.2"];
        let notifications = n["messageStats"]["notificationsRecv"].as_u64().unwrap_or(0);
        match (frr_session(&frr).0, n["bgpState"].as_str(), notifications) {
            (c, Some("Established"), count) if c == connections + 1 && count > before => Ok(()),
            other => Err(format!("(connections, state, notifications) {other:?}")),
        }
    });
    let log = std::fs::read_to_string(lab.path("uplink.log")).unwrap_or_default();
    assert!(log.contains("Cease/Administrative Reset"), "uplink's log does not say why:\n{log}");
}
