//! Prefix-independent convergence in the kernel: two upstreams (BIRD 2) send the same 20,000
//! prefixes, which uplink installs with 2-way ECMP through one nexthop group. One upstream's
//! session is cut: within a second every route forwards only via the other, and an
//! `ip monitor` in uplink's namespace sees a few events for the group, none per route. The
//! upstream returns: ECMP comes back the same way.

mod common;
use common::*;
use serde_json::Value;
use std::collections::BTreeSet;
use std::process::Command;
use std::time::{Duration, Instant};

const COUNT: usize = 20_000;
const UP: Duration = Duration::from_secs(90);
const A: &str = "10.0.1.1";
const B: &str = "10.0.2.1";

/// A BIRD exporting the same COUNT /24s (16.0.0.0/24 upwards) to the node, in AS 65102 like
/// its twin, so uplink keeps both paths as ECMP.
fn upstream_conf(id: &str, node: &str) -> String {
    let spec = SpeakerSpec {
        asn: 65102,
        router_id: id.into(),
        neighbors: vec![NeighborSpec { address: node.into(), asn: 65001, ..Default::default() }],
        announce: vec![],
    };
    bird_bulk_conf(&spec, COUNT)
}

/// Every route of ours in the main table and the gateways it forwards over, as (route count,
/// the distinct gateway sets).
fn forwarding(ns: &Ns) -> Result<(usize, BTreeSet<Vec<String>>), String> {
    let out = ns.run(&["ip", "-j", "route", "show", "proto", UPLINK_PROTO]);
    let routes: Vec<Value> = serde_json::from_str(if out.trim().is_empty() { "[]" } else { &out })
        .map_err(|e| format!("{e}"))?;
    let out = ns.run(&["ip", "-j", "nexthop", "show"]);
    let objects: Vec<Value> = serde_json::from_str(if out.trim().is_empty() { "[]" } else { &out })
        .map_err(|e| format!("{e}"))?;
    let gateway_of = |id: u64| -> Option<String> {
        let nh = objects.iter().find(|o| o["id"].as_u64() == Some(id))?;
        nh["gateway"].as_str().map(String::from)
    };
    let mut sets = BTreeSet::new();
    for r in &routes {
        let id = r["nhid"].as_u64().ok_or(format!("a route without a nexthop object: {r}"))?;
        let nh = objects.iter().find(|o| o["id"].as_u64() == Some(id)).ok_or("no such nexthop")?;
        let mut gateways: Vec<String> = match nh["group"].as_array() {
            Some(members) => members.iter().filter_map(|m| gateway_of(m["id"].as_u64()?)).collect(),
            None => gateway_of(id).into_iter().collect(),
        };
        gateways.sort();
        sets.insert(gateways);
    }
    Ok((routes.len(), sets))
}

fn wait_forwarding(lab: &Lab, ns: &Ns, gateways: &[&str], timeout: Duration) -> Duration {
    let start = Instant::now();
    let want: Vec<String> = gateways.iter().map(|g| g.to_string()).collect();
    wait_for(&format!("{COUNT} routes via {gateways:?} only"), timeout, || {
        let (n, sets) = forwarding(ns)?;
        if n == COUNT && sets.len() == 1 && sets.contains(&want) {
            Ok(())
        } else {
            Err(format!("{n} routes via {sets:?}\n{}", lab.dump_logs()))
        }
    });
    start.elapsed()
}

/// `ip monitor route nexthop` in `ns`, writing to a file.
struct Monitor {
    child: std::process::Child,
    path: std::path::PathBuf,
}

impl Monitor {
    fn start(lab: &Lab, ns: &Ns, name: &str) -> Monitor {
        let path = lab.path(name);
        let file = std::fs::File::create(&path).unwrap();
        let child = Command::new("ip")
            .args(["-n", &ns.name, "monitor", "route", "nexthop"])
            .stdout(file)
            .spawn()
            .unwrap();
        // `ip monitor` subscribes before it prints anything; give it a moment.
        std::thread::sleep(Duration::from_millis(200));
        Monitor { child, path }
    }

    /// Stops it and returns (route events, nexthop events).
    fn stop(mut self) -> (usize, usize, String) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let text = std::fs::read_to_string(&self.path).unwrap_or_default();
        // "id N ..." and "Deleted id N ..." are nexthop objects; every other line a route.
        let events: Vec<&str> = text
            .lines()
            .map(|l| l.trim_start_matches("Deleted "))
            .filter(|l| !l.trim().is_empty())
            .collect();
        let nexthops = events.iter().filter(|l| l.starts_with("id ")).count();
        let routes = events.len() - nexthops;
        (routes, nexthops, text.lines().take(20).collect::<Vec<_>>().join("\n"))
    }
}

impl Drop for Monitor {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Waits until uplink's RIB has taken in `peer`'s state (routes or none) and the FIB writer
/// has gone quiet, so the monitor has seen everything the change caused.
fn wait_settled(uplink: &Uplink, peer: &str, up: bool) {
    wait_for(&format!("{peer} {}", if up { "up with its routes" } else { "gone" }), UP, || {
        let v = uplink.json(&["show", "bgp", "summary"])?;
        let p = &v["ipv4Unicast"]["peers"][peer];
        let established = p["state"] == "Established";
        let routes = p["pfxRcd"].as_u64().unwrap_or(0) as usize;
        match (up, established, routes) {
            (true, true, COUNT) | (false, false, _) => Ok(()),
            _ => Err(format!("{p}")),
        }
    });
    std::thread::sleep(Duration::from_millis(1500));
}

#[test]
fn losing_an_upstream_touches_the_group_not_the_routes() {
    let mut lab = Lab::new("fibpic");
    let node = lab.ns("node");
    let a_ns = lab.ns("a");
    let b_ns = lab.ns("b");
    lab.link(&node, &["10.0.1.2/24"], &a_ns, &["10.0.1.1/24"]);
    lab.link(&node, &["10.0.2.2/24"], &b_ns, &["10.0.2.1/24"]);
    let a = Bird::start(&mut lab, &a_ns, &upstream_conf(A, "10.0.1.2"));
    let _b = Bird::start(&mut lab, &b_ns, &upstream_conf(B, "10.0.2.2"));
    let config = format!(
        "[[bgp.routers]]\nasn = 65001\nid = \"10.0.0.9\"\n\n\
         [[bgp.routers.neighbors]]\naddress = \"{A}\"\nasn = 65102\nconnect_time = \"1s\"\n\
         to_receive = {{ allowed = {{ mode = \"all\" }} }}\n\n\
         [[bgp.routers.neighbors]]\naddress = \"{B}\"\nasn = 65102\nconnect_time = \"1s\"\n\
         to_receive = {{ allowed = {{ mode = \"all\" }} }}\n"
    );
    let uplink = Uplink::start(&mut lab, &node, "uplink", &config);
    wait_forwarding(&lab, &node, &[A, B], UP);
    wait_settled(&uplink, A, true);
    wait_settled(&uplink, B, true);
    let proto = bird_proto("10.0.1.2");

    // A's session is cut (BIRD ends it with a Cease).
    let monitor = Monitor::start(&lab, &node, "down.monitor");
    let cut = Instant::now();
    a.birdc(&format!("disable {proto}"));
    let took = wait_forwarding(&lab, &node, &[B], Duration::from_secs(10));
    assert!(took < Duration::from_secs(1), "every route via B only after {took:?}");
    wait_settled(&uplink, A, false);
    let (routes, nexthops, sample) = monitor.stop();
    eprintln!(
        "cut: all routes via B {:?} after the cut; {routes} route and {nexthops} nexthop events",
        cut.elapsed().min(took)
    );
    assert!(routes <= 4, "{routes} route events for {COUNT} routes in one group:\n{sample}");
    assert!(nexthops <= 6, "{nexthops} nexthop events:\n{sample}");

    // A comes back: its hop rejoins the group once its routes are back.
    let monitor = Monitor::start(&lab, &node, "up.monitor");
    let back = Instant::now();
    a.birdc(&format!("enable {proto}"));
    wait_forwarding(&lab, &node, &[A, B], UP);
    let took = back.elapsed();
    wait_settled(&uplink, A, true);
    let (routes, nexthops, sample) = monitor.stop();
    eprintln!("return: ECMP back {took:?} after the session was enabled; {routes} route and {nexthops} nexthop events");
    assert!(routes <= 4, "{routes} route events for {COUNT} routes in one group:\n{sample}");
    assert!(nexthops <= 6, "{nexthops} nexthop events:\n{sample}");
}
