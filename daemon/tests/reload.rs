//! Config reload (SIGHUP) against real FRR and BIRD: a neighbor added or removed starts or
//! ends only its own session, a changed neighbor is reset alone, and a config with an error
//! changes nothing. The sessions a change did not touch never flap.

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
    let kernel_route = || route_with_nexthops(&node, "10.88.0.0/24 proto bgp");
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
