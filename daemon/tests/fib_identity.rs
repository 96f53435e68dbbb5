//! FIB identity and retries. uplink's routes and nexthop objects carry its own protocol (117,
//! `proto uplink`), so another routing daemon on the node — FRR's zebra here — and uplink never
//! delete or replace each other's: not at uplink's start, resync or shutdown, not when uplink
//! learns a prefix FRR has installed, not at FRR's restart. And a kernel write that fails is
//! tried again and lands once the kernel takes it, without a new BGP message.

mod common;
use common::*;
use serde_json::Value;
use std::collections::BTreeSet;
use std::time::{Duration, Instant};

const UP: Duration = Duration::from_secs(60);
/// FRR learns it from its peer.
const FRR_BGP: &str = "10.61.0.0/24";
/// uplink learns it from its own peer.
const UPLINK_BGP: &str = "10.62.0.0/24";
/// FRR's static route (staticd, through zebra).
const FRR_STATIC: &str = "10.63.0.0/24";

fn bird_peer(asn: u32, id: &str, node: &str, announce: &[&str]) -> SpeakerSpec {
    SpeakerSpec {
        asn,
        router_id: id.into(),
        neighbors: vec![NeighborSpec { address: node.into(), asn: 65001, ..Default::default() }],
        announce: announce.iter().map(|s| s.to_string()).collect(),
    }
}

fn uplink_config(peer: &str, asn: u32) -> String {
    format!(
        "[[bgp.routers]]\nasn = 65001\nid = \"10.0.0.9\"\n\n[[bgp.routers.neighbors]]\n\
         address = \"{peer}\"\nasn = {asn}\nconnect_time = \"1s\"\n\
         to_receive = {{ allowed = {{ mode = \"all\" }} }}\n"
    )
}

fn json_list(out: &str) -> Vec<Value> {
    let text = if out.trim().is_empty() { "[]" } else { out };
    serde_json::from_str::<Value>(text).ok().and_then(|v| v.as_array().cloned()).unwrap_or_default()
}

fn text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

/// FRR's routes (zebra's BGP, 186, and static, 196) and every nexthop object not uplink's, in
/// a form that does not depend on `nexthop_compat_mode` (which uplink turns off).
fn frr_state(node: &Ns) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for proto in ["186", "196"] {
        for r in json_list(&node.run(&["ip", "-j", "route", "show", "proto", proto])) {
            out.insert(format!(
                "route {} proto {proto} metric {} nhid {}",
                text(&r["dst"]),
                text(&r["metric"]),
                text(&r["nhid"])
            ));
        }
    }
    for nh in json_list(&node.run(&["ip", "-j", "nexthop", "show"])) {
        let protocol = text(&nh["protocol"]);
        if protocol == "117" || protocol == "uplink" {
            continue;
        }
        out.insert(format!(
            "nexthop {} {protocol} via {} dev {} group {}",
            text(&nh["id"]),
            text(&nh["gateway"]),
            text(&nh["dev"]),
            text(&nh["group"])
        ));
    }
    out
}

/// FRR's routes are as they were, and so are its nexthop objects (zebra may have added some:
/// it makes one for each kernel route it learns, uplink's among them).
fn assert_frr_kept(before: &BTreeSet<String>, now: &BTreeSet<String>) {
    let routes = |s: &BTreeSet<String>| -> Vec<String> {
        s.iter().filter(|l| l.starts_with("route ")).cloned().collect()
    };
    assert_eq!(routes(now), routes(before), "FRR's routes changed");
    let lost: Vec<&String> = before.difference(now).collect();
    assert!(lost.is_empty(), "FRR's nexthop objects changed or went: {lost:?}\nnow: {now:?}");
}

/// uplink's routes and nexthop objects.
fn uplink_state(node: &Ns) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for r in json_list(&node.run(&["ip", "-j", "route", "show", "proto", UPLINK_PROTO])) {
        out.insert(format!("route {} nhid {}", text(&r["dst"]), text(&r["nhid"])));
    }
    let nexthops = node.run(&["ip", "-j", "nexthop", "show", "protocol", UPLINK_PROTO]);
    for nh in json_list(&nexthops) {
        out.insert(format!("nexthop {} group {}", text(&nh["id"]), text(&nh["group"])));
    }
    out
}

fn has_route(node: &Ns, prefix: &str, proto: &str) -> bool {
    !json_list(&node.run(&["ip", "-j", "route", "show", prefix, "proto", proto])).is_empty()
}

/// Starts `ip monitor` of routes and nexthops in `ns`; its output is the lab's `label.log`.
fn monitor(lab: &mut Lab, ns: &Ns, label: &str) -> std::path::PathBuf {
    let mut cmd = ns.command("ip");
    cmd.args(["-o", "monitor", "route", "nexthop"]);
    lab.spawn(label, cmd);
    // `ip monitor` subscribes at once; give it a moment before what it must see.
    std::thread::sleep(Duration::from_millis(200));
    lab.path(&format!("{label}.log"))
}

/// Lines of a monitor log that delete or overwrite one of `watched` (prefixes, or nexthop
/// ids as `id N`).
fn touching(log: &std::path::Path, watched: &[String], overwrite_by: &[&str]) -> Vec<String> {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    text.lines()
        .filter(|line| {
            let words: Vec<&str> = line.split_whitespace().collect();
            let names = |w: &String| {
                let w: Vec<&str> = w.split_whitespace().collect();
                words.windows(w.len()).any(|x| x == w.as_slice())
            };
            let about = watched.iter().any(names);
            let deleted = words.first() == Some(&"Deleted");
            let overwritten =
                overwrite_by.iter().any(|p| words.windows(2).any(|x| x == ["proto", *p]));
            about && (deleted || overwritten)
        })
        .map(str::to_string)
        .collect()
}

fn nexthop_ids(state: &BTreeSet<String>) -> Vec<String> {
    state
        .iter()
        .filter_map(|l| l.strip_prefix("nexthop "))
        .filter_map(|l| l.split_whitespace().next())
        .map(|id| format!("id {id}"))
        .collect()
}

/// FRR (zebra, staticd, bgpd) and uplink in one namespace, each with its own BGP peer; uplink's
/// peer also sends FRR's prefix. uplink's start, a resync and its shutdown leave FRR's routes
/// and nexthop objects as they were — never deleted, never replaced, not even for an instant
/// (an `ip monitor` watches) — and FRR's restart leaves uplink's alone.
#[test]
fn frr_and_uplink_on_one_node_leave_each_others_routes_alone() {
    let mut lab = Lab::new("fibown");
    let node = lab.ns("node");
    let frr_peer = lab.ns("pa");
    let uplink_peer = lab.ns("pb");
    lab.link(&node, &["10.0.1.2/24"], &frr_peer, &["10.0.1.1/24"]);
    lab.link(&node, &["10.0.2.2/24"], &uplink_peer, &["10.0.2.1/24"]);
    let _a = Speaker::start(
        Kind::Bird,
        &mut lab,
        &frr_peer,
        &bird_peer(65101, "10.0.1.1", "10.0.1.2", &[FRR_BGP]),
    );
    let _b = Speaker::start(
        Kind::Bird,
        &mut lab,
        &uplink_peer,
        &bird_peer(65102, "10.0.2.1", "10.0.2.2", &[UPLINK_BGP, FRR_BGP]),
    );
    let frr_conf = format!(
        "frr defaults datacenter\n\
         ip route {FRR_STATIC} 10.0.1.1\n\
         router bgp 65001\n bgp router-id 10.0.1.2\n no bgp ebgp-requires-policy\n\
         \x20neighbor 10.0.1.1 remote-as 65101\n neighbor 10.0.1.1 timers connect 1\n"
    );
    let frr = Frr::start_beside(&mut lab, &node, &frr_conf);
    let frr_up = |node: &Ns| {
        wait_for("FRR's routes in the kernel", UP, || {
            let state = frr_state(node);
            let routes = state.iter().filter(|l| l.starts_with("route ")).count();
            let nexthops = state.iter().filter(|l| l.starts_with("nexthop ")).count();
            if has_route(node, FRR_BGP, "186") && has_route(node, FRR_STATIC, "196") && nexthops > 0
            {
                Ok(state)
            } else {
                Err(format!("{routes} route(s), {nexthops} nexthop(s): {state:?}"))
            }
        })
    };
    let before = frr_up(&node);

    // uplink starts: it installs its own prefix, and not FRR's (another daemon's route holds
    // that place in the table).
    let watch = monitor(&mut lab, &node, "monitor-uplink");
    let uplink = Uplink::start(&mut lab, &node, "uplink", &uplink_config("10.0.2.1", 65102));
    wait_for("uplink's route, and FRR's prefix refused", UP, || {
        let fib = uplink.json(&["show", "fib"])?;
        let held = &fib[FRR_BGP][0];
        let refused = held["state"] == "failed"
            && held["error"].as_str().is_some_and(|e| e.contains("proto bgp"));
        if has_route(&node, UPLINK_BGP, UPLINK_PROTO) && refused {
            Ok(())
        } else {
            Err(format!("{fib}"))
        }
    });
    let text = uplink.cli(&["show", "fib"]).unwrap();
    assert!(text.contains("ip route show proto uplink"), "show fib names the protocol: {text}");

    // zebra takes other programs' nexthop objects for its own and puts back any change to
    // them: beside it, uplink's routes carry their hops inline.
    let log = std::fs::read_to_string(lab.path("uplink.log")).unwrap_or_default();
    assert!(log.contains("zebra (FRR) runs on this node"), "{log}");
    let objects = node.run(&["ip", "nexthop", "show", "protocol", UPLINK_PROTO]);
    assert!(objects.trim().is_empty(), "uplink's nexthop objects beside zebra: {objects}");

    // A resync: notifications lost while uplink did not read them (stopped during a burst of
    // 50,000 route changes elsewhere) make it read the kernel back in full.
    let pid = lab.pid_of("uplink").expect("uplink's pid").to_string();
    run(&["kill", "-STOP", &pid]);
    let batch = lab.path("burst.batch");
    let lines: String = (0..50_000u32)
        .map(|i| format!("route add 10.100.{}.{}/32 dev lo table 100\n", i / 256, i % 256))
        .collect();
    std::fs::write(&batch, lines).unwrap();
    node.run(&["ip", "-batch", batch.to_str().unwrap()]);
    run(&["kill", "-CONT", &pid]);
    wait_for("uplink resynchronised", UP, || {
        let log = std::fs::read_to_string(lab.path("uplink.log")).unwrap_or_default();
        if log.contains("resynchronising with the kernel") {
            Ok(())
        } else {
            Err("no resync yet".to_string())
        }
    });
    node.run(&["ip", "route", "flush", "table", "100"]);
    assert!(uplink.json(&["show", "fib"]).is_ok(), "uplink answers after the resync");
    assert!(has_route(&node, UPLINK_BGP, UPLINK_PROTO));

    // Shutdown (no graceful restart): uplink's routes and objects go, FRR's stay.
    lab.stop("uplink");
    wait_for("uplink's routes gone", UP, || {
        let left = uplink_state(&node);
        if left.is_empty() {
            Ok(())
        } else {
            Err(format!("{left:?}"))
        }
    });
    let mut watched = vec![FRR_BGP.to_string(), FRR_STATIC.to_string()];
    watched.extend(nexthop_ids(&before));
    let touched = touching(&watch, &watched, &[UPLINK_PROTO, "uplink"]);
    assert!(touched.is_empty(), "uplink touched FRR's routes or nexthops: {touched:#?}");
    lab.stop("monitor-uplink");
    assert_frr_kept(&before, &frr_state(&node));

    // The reverse: FRR restarts (zebra sweeps what it takes for its own previous run) while
    // uplink runs; uplink's routes and nexthops stay.
    uplink.launch(&mut lab);
    let ours = wait_for("uplink's route back", UP, || {
        let ours = uplink_state(&node);
        if has_route(&node, UPLINK_BGP, UPLINK_PROTO) {
            Ok(ours)
        } else {
            Err(format!("{ours:?}"))
        }
    });
    let watch = monitor(&mut lab, &node, "monitor-frr");
    lab.stop(&frr.label);
    let _frr = Frr::start_beside(&mut lab, &node, &frr_conf);
    // zebra is back when staticd's route is (the BGP session waits for the peer's reconnect
    // delay); its sweep of what it takes for its previous run's routes follows its start.
    wait_for("zebra back", UP, || {
        if has_route(&node, FRR_STATIC, "196") {
            Ok(())
        } else {
            Err(format!("{:?}", frr_state(&node)))
        }
    });
    std::thread::sleep(Duration::from_secs(3));
    let mut watched = vec![UPLINK_BGP.to_string()];
    watched.extend(nexthop_ids(&ours));
    let touched = touching(&watch, &watched, &[]);
    assert!(touched.is_empty(), "FRR touched uplink's routes or nexthops: {touched:#?}");
    // Nothing of uplink's went; FRR's BGP route for the prefix both learn left with zebra's
    // stop, so uplink's own (failed while FRR's held the place) may have taken it.
    let now = uplink_state(&node);
    assert!(ours.is_subset(&now), "uplink's routes changed: {ours:?} -> {now:?}");
}

/// A route whose next hop the kernel refuses (the connected route to it has global scope, so
/// the kernel finds no on-link gateway, while uplink's resolution takes it) is failed, shown
/// with its error and its retries, and lands within a few seconds of the fault going away —
/// with no new BGP message.
#[test]
fn a_refused_kernel_write_is_retried_and_lands() {
    const PREFIX: &str = "10.64.0.0/24";
    let mut lab = Lab::new("fibretry");
    let node = lab.ns("node");
    let peer = lab.ns("peer");
    let (node_if, _) = lab.link(&node, &["10.0.2.2/24"], &peer, &["10.0.2.1/24"]);
    let connected = |scope: &str| {
        node.run(&[
            "ip",
            "route",
            "replace",
            "10.0.2.0/24",
            "dev",
            &node_if,
            "proto",
            "kernel",
            "scope",
            scope,
            "src",
            "10.0.2.2",
        ]);
    };
    // The fault: forwarding still works (the session comes up), nexthop objects are refused.
    connected("global");
    let _bird = Speaker::start(
        Kind::Bird,
        &mut lab,
        &peer,
        &bird_peer(65102, "10.0.2.1", "10.0.2.2", &[PREFIX]),
    );
    let uplink = Uplink::start(&mut lab, &node, "uplink", &uplink_config("10.0.2.1", 65102));
    let entry = |uplink: &Uplink| -> Result<Value, String> {
        Ok(uplink.json(&["show", "fib"])?[PREFIX][0].clone())
    };
    // Refused, then tried again (a second attempt after about a second).
    let failed = wait_for("the route failed and retried", UP, || {
        let e = entry(&uplink)?;
        if e["state"] == "failed" && e["attempts"].as_u64().is_some_and(|n| n >= 2) {
            Ok(e)
        } else {
            Err(format!("{e}"))
        }
    });
    assert!(failed["error"].as_str().is_some_and(|e| !e.is_empty()), "{failed}");
    assert!(failed["retryInSeconds"].as_f64().is_some_and(|s| s <= 30.0), "{failed}");
    assert!(!has_route(&node, PREFIX, UPLINK_PROTO));
    let text = uplink.cli(&["show", "fib"]).unwrap();
    assert!(text.contains("next try in"), "{text}");
    let updates = |uplink: &Uplink| {
        let v = uplink.json(&["show", "bgp", "neighbors", "10.0.2.1"]).unwrap();
        v["10.0.2.1"]["messageStats"]["updatesRecv"].as_u64().expect("updatesRecv")
    };
    let updates_before = updates(&uplink);

    // The fault goes away: the route lands on a retry, within the backoff then in force.
    connected("link");
    let fixed = Instant::now();
    wait_for("the route in the kernel", Duration::from_secs(20), || {
        if has_route(&node, PREFIX, UPLINK_PROTO) {
            Ok(())
        } else {
            Err(format!("{}", entry(&uplink).unwrap_or_default()))
        }
    });
    let took = fixed.elapsed();
    eprintln!("the route landed {took:?} after the fault went away");
    assert_eq!(entry(&uplink).unwrap()["state"], "installed");
    assert_eq!(updates(&uplink), updates_before, "no BGP message brought it");
}
