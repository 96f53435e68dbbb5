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
}
