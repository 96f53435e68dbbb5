//! Graceful restart (RFC 4724) against FRR, both roles: uplink killed with SIGKILL and started
//! again while FRR helps, and FRR's bgpd killed and started again while uplink helps. The
//! routes stay in both kernels and BGP tables the whole time, and once End-of-RIB has been
//! exchanged exactly the routes that came back remain.

mod common;
use common::*;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const UP: Duration = Duration::from_secs(60);

/// node (uplink) ── tor (FRR bgpd) ── far (203.0.113.1, the ping target behind the tor).
struct Topology {
    lab: Lab,
    node: Ns,
    tor: Ns,
}

fn topology(name: &str) -> Topology {
    let mut lab = Lab::new(name);
    let node = lab.ns("node");
    let tor = lab.ns("tor");
    let far = lab.ns("far");
    lab.link(&node, &["10.0.1.2/24"], &tor, &["10.0.1.1/24"]);
    lab.link(&tor, &["203.0.113.254/24"], &far, &["203.0.113.1/24"]);
    far.run(&["ip", "route", "add", "default", "via", "203.0.113.254"]);
    Topology { lab, node, tor }
}

/// FRR on the tor: graceful restart with its forwarding state preserved (as frr-k8s runs it),
/// announcing `prefixes` (held as static routes to Null0 so bgpd alone can announce them).
fn frr_conf(prefixes: &[&str]) -> String {
    let mut networks = String::new();
    for p in prefixes {
        networks.push_str(&format!("  network {p}\n"));
    }
    format!(
        "router bgp 65102\n bgp router-id 10.0.1.1\n no bgp ebgp-requires-policy\n \
         no bgp network import-check\n bgp graceful-restart\n bgp graceful-restart preserve-fw-state\n \
         bgp graceful-restart restart-time 60\n neighbor 10.0.1.2 remote-as 65801\n \
         neighbor 10.0.1.2 timers 3 9\n neighbor 10.0.1.2 timers connect 1\n \
         address-family ipv4 unicast\n{networks} exit-address-family\n"
    )
}

fn uplink_conf(prefixes: &[&str]) -> String {
    let list: Vec<String> = prefixes.iter().map(|p| format!("\"{p}\"")).collect();
    format!(
        r#"[graceful_restart]
restart_time = "60s"
select_defer_time = "30s"

[[bgp.routers]]
asn = 65801
id = "10.0.1.2"
prefixes = [{}]

[[bgp.routers.neighbors]]
address = "10.0.1.1"
asn = 65102
hold_time = "9s"
connect_time = "1s"
graceful_restart = true
to_advertise = {{ allowed = {{ mode = "all" }} }}
to_receive = {{ allowed = {{ mode = "all" }} }}
"#,
        list.join(", ")
    )
}

/// The kernel route to `prefix` in `ns`, if any.
/// The route and, for a nexthop group, its members' `via` lines (uplink turns the nexthop
/// compatibility mode off, so the route names only its group).
fn kernel_route(ns: &Ns, prefix: &str) -> Option<String> {
    let out = common::route_with_nexthops(ns, &format!("exact {prefix}"));
    let out = out.trim();
    (!out.is_empty()).then(|| out.to_string())
}

fn frr_has(frr: &Frr, prefix: &str) -> bool {
    frr.route(prefix)["paths"].as_array().is_some_and(|p| !p.is_empty())
}

fn frr_path_is_stale(frr: &Frr, prefix: &str) -> bool {
    frr.route(prefix)["paths"]
        .as_array()
        .is_some_and(|paths| paths.iter().any(|p| p["stale"].as_bool().unwrap_or(false)))
}

/// Checks `check` every 100 ms on another thread until stopped; returns the failures seen.
struct Watch {
    stop: Arc<AtomicBool>,
    handle: std::thread::JoinHandle<Vec<String>>,
}

impl Watch {
    fn start(check: impl Fn() -> Option<String> + Send + 'static) -> Watch {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let handle = std::thread::spawn(move || {
            let mut failures = Vec::new();
            while !flag.load(Ordering::Relaxed) {
                if let Some(failure) = check() {
                    failures.push(failure);
                }
                std::thread::sleep(Duration::from_millis(100));
            }
            failures
        });
        Watch { stop, handle }
    }

    fn finish(self) -> Vec<String> {
        self.stop.store(true, Ordering::Relaxed);
        self.handle.join().unwrap_or_default()
    }
}

fn wait_uplink_ready(uplink: &Uplink, lab: &Lab) {
    wait_for("uplink's session Established with End-of-RIB both ways", UP, || {
        let v = uplink.json(&["show", "bgp", "neighbors", "10.0.1.1"])?;
        let n = &v["10.0.1.1"];
        let gr = &n["gracefulRestartInfo"];
        let ok = n["bgpState"] == "Established"
            && gr["endOfRibRecv"]["ipv4Unicast"] == true
            && gr["endOfRibSend"]["ipv4Unicast"] == true;
        ok.then_some(()).ok_or_else(|| format!("{n:#}\n{}", lab.dump_logs()))
    });
}

/// uplink is killed (SIGKILL) and started again: FRR keeps the node's routes (stale, then
/// refreshed), the node's kernel keeps FRR's routes, a ping through them never stops, and
/// after End-of-RIB what did not come back is gone on both sides.
#[test]
fn uplink_killed_and_restarted_keeps_forwarding() {
    let Topology { mut lab, node, tor } = topology("grup");
    let frr = Frr::start_daemons(
        &mut lab,
        &tor,
        &frr_conf(&["203.0.113.0/24", "198.51.100.0/24"]),
        &["bgpd"],
    );
    let uplink =
        Uplink::start(&mut lab, &node, "uplink", &uplink_conf(&["192.0.2.10/32", "192.0.2.11/32"]));
    wait_uplink_ready(&uplink, &lab);
    for prefix in ["203.0.113.0/24", "198.51.100.0/24"] {
        wait_for(&format!("{prefix} in the node's kernel"), UP, || {
            kernel_route(&node, prefix).ok_or("absent".to_string())
        });
    }
    for prefix in ["192.0.2.10/32", "192.0.2.11/32"] {
        wait_for(&format!("FRR learns {prefix}"), UP, || {
            frr_has(&frr, prefix).then_some(()).ok_or("absent".to_string())
        });
    }

    // A ping through the learned route, all along.
    let pinger = node.clone();
    let ping = std::thread::spawn(move || {
        pinger.try_run(&["ping", "-n", "-q", "-i", "0.05", "-w", "12", "-W", "1", "203.0.113.1"])
    });
    let watch_node = node.clone();
    let node_kernel = Watch::start(move || {
        kernel_route(&watch_node, "203.0.113.0/24")
            .is_none()
            .then(|| "203.0.113.0/24 left the node's kernel".to_string())
    });
    let watch_tor = Frr { ns: frr.ns.clone(), label: frr.label.clone() };
    let frr_table = Watch::start(move || {
        (!frr_has(&watch_tor, "192.0.2.10/32")).then(|| "FRR lost 192.0.2.10/32".to_string())
    });

    std::thread::sleep(Duration::from_secs(1));
    lab.kill9("uplink");
    // While uplink is down: FRR keeps the node's routes as stale and withdraws one of its own.
    wait_for("FRR marks the node's routes stale", UP, || {
        frr_path_is_stale(&frr, "192.0.2.10/32").then_some(()).ok_or("not stale".to_string())
    });
    frr.vtysh("configure terminal\nrouter bgp 65102\naddress-family ipv4 unicast\nno network 198.51.100.0/24");
    std::thread::sleep(Duration::from_secs(2));
    // Back, without 192.0.2.11/32.
    std::fs::write(&uplink.config, uplink_conf(&["192.0.2.10/32"])).unwrap();
    let restarted = Instant::now();
    uplink.launch(&mut lab);
    wait_uplink_ready(&uplink, &lab);
    let ours = uplink.json(&["show", "bgp", "neighbors", "10.0.1.1"]).unwrap();
    assert_eq!(ours["10.0.1.1"]["gracefulRestartInfo"]["localRestarted"], true, "{ours:#}");
    let theirs = frr.json("show bgp neighbors 10.0.1.2 json");
    assert_eq!(
        theirs["10.0.1.2"]["gracefulRestartInfo"]["rBit"], true,
        "FRR sees the R bit of the restarted uplink: {theirs:#}"
    );

    // After End-of-RIB both ways: exactly what came back.
    wait_for("FRR drops 192.0.2.11/32 after uplink's End-of-RIB", UP, || {
        (!frr_has(&frr, "192.0.2.11/32")).then_some(()).ok_or("still there".to_string())
    });
    assert!(!frr_path_is_stale(&frr, "192.0.2.10/32"), "192.0.2.10/32 refreshed, not stale");
    wait_for("the node's kernel drops 198.51.100.0/24 after FRR's End-of-RIB", UP, || {
        kernel_route(&node, "198.51.100.0/24").map_or(Ok(()), |r| Err(format!("still there: {r}")))
    });
    let route = kernel_route(&node, "203.0.113.0/24").expect("203.0.113.0/24 stays");
    assert!(route.contains("10.0.1.1"), "{route}");

    let (_, ping_out) = ping.join().unwrap();
    let lost = node_kernel.finish();
    assert!(lost.is_empty(), "{lost:?}");
    let lost = frr_table.finish();
    assert!(lost.is_empty(), "{lost:?}");
    assert!(
        ping_out.contains(" 0% packet loss"),
        "the ping through the learned route stopped while uplink restarted \
         ({:.1} s ago):\n{ping_out}\n{}",
        restarted.elapsed().as_secs_f64(),
        lab.dump_logs()
    );
}

/// FRR's bgpd is killed and started again with one prefix fewer: uplink keeps FRR's routes
/// installed while it restarts, then removes the one that did not come back.
#[test]
fn frr_restarting_is_helped() {
    let Topology { mut lab, node, tor } = topology("grhelp");
    let conf = frr_conf(&["203.0.113.0/24", "198.51.100.0/24"]);
    let frr = Frr::start_daemons(&mut lab, &tor, &conf, &["bgpd"]);
    let uplink = Uplink::start(&mut lab, &node, "uplink", &uplink_conf(&["192.0.2.10/32"]));
    wait_uplink_ready(&uplink, &lab);
    for prefix in ["203.0.113.0/24", "198.51.100.0/24"] {
        wait_for(&format!("{prefix} in the node's kernel"), UP, || {
            kernel_route(&node, prefix).ok_or("absent".to_string())
        });
    }
    let watch_node = node.clone();
    let node_kernel = Watch::start(move || {
        kernel_route(&watch_node, "203.0.113.0/24")
            .is_none()
            .then(|| "203.0.113.0/24 left the node's kernel while FRR restarted".to_string())
    });

    lab.kill9_pidfiles(&frr.label);
    wait_for("uplink keeps FRR's routes as stale", UP, || {
        let v = uplink.json(&["show", "bgp", "routes", "203.0.113.0/24"])?;
        let stale = v["paths"]
            .as_array()
            .is_some_and(|p| p.iter().any(|p| p["stale"].as_bool().unwrap_or(false)));
        stale.then_some(()).ok_or_else(|| format!("{v:#}"))
    });
    std::thread::sleep(Duration::from_secs(2));
    assert!(kernel_route(&node, "198.51.100.0/24").is_some(), "kept while FRR restarts");

    let frr = Frr::start_daemons(&mut lab, &tor, &frr_conf(&["203.0.113.0/24"]), &["bgpd"]);
    wait_for("FRR's session back", UP, || {
        let s = frr.peer_state("ipv4Unicast", "10.0.1.2");
        (s == "Established").then_some(()).ok_or(s)
    });
    wait_for("uplink removes the stale 198.51.100.0/24 after FRR's End-of-RIB", UP, || {
        kernel_route(&node, "198.51.100.0/24").map_or(Ok(()), |r| Err(format!("still there: {r}")))
    });
    let v = uplink.json(&["show", "bgp", "routes", "203.0.113.0/24"]).unwrap();
    assert!(
        v["paths"].as_array().is_some_and(|p| p.iter().all(|p| p["stale"] != true)),
        "refreshed: {v:#}"
    );
    let lost = node_kernel.finish();
    assert!(lost.is_empty(), "{lost:?}\n{}", lab.dump_logs());
}

/// RFC 5882 §4.3 with a shared-fate BFD: uplink hangs (SIGSTOP, as a stuck daemon would) and
/// is then killed and started again (what systemd's watchdog does). Its BFD stops at once, but
/// FRR, told that a Down of a BFD with the C bit clear may be a control-plane restart
/// (`bfd check-control-plane-failure`), keeps the node's routes through the restart.
#[test]
fn hung_uplink_with_bfd_keeps_its_routes_at_frr() {
    let Topology { mut lab, node, tor } = topology("grbfd");
    let conf = frr_conf(&["203.0.113.0/24"]).replace(
        " neighbor 10.0.1.2 timers 3 9\n",
        " neighbor 10.0.1.2 timers 3 9\n neighbor 10.0.1.2 bfd\n \
         neighbor 10.0.1.2 bfd check-control-plane-failure\n",
    );
    let frr = Frr::start_with_bfd(
        &mut lab,
        &tor,
        &format!(
            "bfd\n peer 10.0.1.2\n  transmit-interval 200\n  receive-interval 200\n !\n!\n{conf}"
        ),
    );
    let config = format!(
        "[[bgp.bfd_profiles]]\nname = \"tor\"\ntransmit_interval = \"200ms\"\nreceive_interval = \"200ms\"\n\n{}",
        uplink_conf(&["192.0.2.10/32"]).replace(
            "graceful_restart = true\n",
            "graceful_restart = true\nbfd_profile = \"tor\"\n"
        )
    );
    let uplink = Uplink::start(&mut lab, &node, "uplink", &config);
    wait_uplink_ready(&uplink, &lab);
    wait_for("FRR's BFD session with the node Up", UP, || {
        let v = frr.json("show bfd peers json");
        let up = v
            .as_array()
            .into_iter()
            .flatten()
            .any(|p| p["peer"] == "10.0.1.2" && p["status"] == "up");
        up.then_some(()).ok_or_else(|| format!("{v:#}"))
    });
    wait_for("FRR learns 192.0.2.10/32", UP, || {
        frr_has(&frr, "192.0.2.10/32").then_some(()).ok_or("absent".to_string())
    });
    let watch_tor = Frr { ns: frr.ns.clone(), label: frr.label.clone() };
    let frr_table = Watch::start(move || {
        (!frr_has(&watch_tor, "192.0.2.10/32")).then(|| "FRR lost 192.0.2.10/32".to_string())
    });

    let pid = lab.pid_of(&uplink.label).expect("uplink's pid");
    node.run(&["kill", "-STOP", &pid.to_string()]);
    // BFD detection is 600 ms; the hold timer 9 s: BFD is what FRR sees first.
    wait_for("FRR's BFD session Down", UP, || {
        let v = frr.json("show bfd peers json");
        let down = v
            .as_array()
            .into_iter()
            .flatten()
            .any(|p| p["peer"] == "10.0.1.2" && p["status"] == "down");
        down.then_some(()).ok_or_else(|| format!("{v:#}"))
    });
    std::thread::sleep(Duration::from_secs(3));
    lab.kill9("uplink");
    uplink.launch(&mut lab);
    wait_uplink_ready(&uplink, &lab);
    let lost = frr_table.finish();
    assert!(lost.is_empty(), "{lost:?}\n{}", lab.dump_logs());
    assert!(!frr_path_is_stale(&frr, "192.0.2.10/32"), "refreshed after uplink's End-of-RIB");
}

/// A node with a VIP and a pod subnet, for the drain tests: `uplink_conf`'s session with the
/// tor, a LoadBalancer VIP (withdrawn by a drain) and the node's pod subnet (kept by it).
fn drain_conf() -> String {
    let session = uplink_conf(&[]).replace("prefixes = []\n", "");
    format!(
        r#"drain_time = "1s"

[node]
name = "node1"

[[pools]]
name = "vips"
addresses = ["192.0.2.0/28"]

[[services]]
name = "web"
namespace = "demo"
load_balancer_ip = "192.0.2.5"

[[advertisements]]
name = "vips"
ip_address_pools = ["vips"]
{pod_network}
{session}"#,
        pod_network = pod_network("1"),
    )
}

const VIP: &str = "192.0.2.5/32";
const POD_SUBNET: &str = "10.244.1.0/24";
const LEARNED: &str = "203.0.113.0/24";

/// Why FRR last lost its session with the node ("BGP Notification received" after a Cease).
fn frr_last_reset(frr: &Frr) -> String {
    let v = frr.json("show bgp neighbors 10.0.1.2 json");
    v["10.0.1.2"]["lastResetDueTo"].as_str().unwrap_or("").to_string()
}

/// The drained node with its VIP withdrawn and its pod subnet and learned route in place.
fn drained_node(name: &str) -> (Topology, Frr, Uplink) {
    let Topology { mut lab, node, tor } = topology(name);
    let frr = Frr::start_daemons(&mut lab, &tor, &frr_conf(&[LEARNED]), &["bgpd"]);
    let uplink = Uplink::start(&mut lab, &node, "uplink", &drain_conf());
    wait_uplink_ready(&uplink, &lab);
    for prefix in [VIP, POD_SUBNET] {
        wait_for(&format!("FRR learns {prefix}"), UP, || {
            frr_has(&frr, prefix).then_some(()).ok_or_else(|| lab.dump_logs())
        });
    }
    wait_for("the learned route in the node's kernel", UP, || {
        kernel_route(&node, LEARNED).ok_or("absent".to_string())
    });
    let out = uplink.cli(&["drain"]).unwrap();
    assert!(out.contains("drained"), "{out}");
    wait_for("FRR loses the VIP after the drain", UP, || {
        (!frr_has(&frr, VIP)).then_some(()).ok_or("still there".to_string())
    });
    assert!(frr_has(&frr, POD_SUBNET), "a drain keeps the pod subnet");
    (Topology { lab, node, tor }, frr, uplink)
}

/// The documented upgrade is drain, then restart: the restart of a drained daemon is still a
/// graceful restart (RFC 4724). The tor never loses the node's pod subnet, the node's kernel
/// never loses the learned route (both sampled every 100 ms), the VIP stays withdrawn, and no
/// Cease is sent.
#[test]
fn a_drained_node_restarts_gracefully() {
    let (Topology { mut lab, node, .. }, frr, uplink) = drained_node("grdrain");
    let watch_node = node.clone();
    let node_kernel = Watch::start(move || {
        kernel_route(&watch_node, LEARNED)
            .is_none()
            .then(|| format!("{LEARNED} left the node's kernel"))
    });
    let watch_tor = Frr { ns: frr.ns.clone(), label: frr.label.clone() };
    let tor_table = Watch::start(move || {
        if !frr_has(&watch_tor, POD_SUBNET) {
            Some(format!("the tor lost {POD_SUBNET}"))
        } else if frr_has(&watch_tor, VIP) {
            Some(format!("the tor has the drained node's VIP {VIP}"))
        } else {
            None
        }
    });
    std::thread::sleep(Duration::from_millis(500));
    lab.stop("uplink");
    let log = std::fs::read_to_string(lab.path("uplink.log")).unwrap();
    assert!(
        log.contains("shutting down for a graceful restart") && !log.contains("sending Cease"),
        "a drained daemon stopped without graceful restart:\n{log}"
    );
    wait_for("FRR keeps the node's pod subnet as stale", UP, || {
        frr_path_is_stale(&frr, POD_SUBNET).then_some(()).ok_or("not stale".to_string())
    });
    uplink.launch(&mut lab);
    wait_uplink_ready(&uplink, &lab);
    wait_for("the pod subnet refreshed at the tor", UP, || {
        (!frr_path_is_stale(&frr, POD_SUBNET)).then_some(()).ok_or("still stale".to_string())
    });
    // Several seconds: the VIP would be back by now if the restart forgot the drain.
    std::thread::sleep(Duration::from_secs(3));
    let lost = node_kernel.finish();
    assert!(lost.is_empty(), "{lost:?}\n{}", lab.dump_logs());
    let lost = tor_table.finish();
    assert!(lost.is_empty(), "{lost:?}\n{}", lab.dump_logs());
    let reset = frr_last_reset(&frr);
    assert!(!reset.contains("Notification received"), "uplink sent a NOTIFICATION: {reset}");
    let text = uplink.cli(&["show", "announcements"]).unwrap();
    assert!(text.contains("drained"), "the drain did not outlive the restart: {text}");
}

/// A drain for a shutdown (what logind's PrepareForShutdown does; `uplink drain --shutdown`)
/// is the node going away: the stop that follows ends the session with a Cease and takes the
/// node's routes out of the kernel.
#[test]
fn a_drain_for_a_shutdown_ends_the_sessions() {
    let (Topology { mut lab, node, .. }, frr, uplink) = drained_node("grshut");
    let out = uplink.cli(&["drain", "--shutdown"]).unwrap();
    assert!(out.contains("drained"), "{out}");
    lab.stop("uplink");
    let log = std::fs::read_to_string(lab.path("uplink.log")).unwrap();
    assert!(log.contains("sending Cease"), "no Cease after a drain for a shutdown:\n{log}");
    wait_for("FRR ends the session on the Cease", UP, || {
        let reset = frr_last_reset(&frr);
        reset.contains("Notification received").then_some(()).ok_or(reset)
    });
    wait_for(
        "FRR drops the node's pod subnet at once (no stale path)",
        Duration::from_secs(5),
        || (!frr_has(&frr, POD_SUBNET)).then_some(()).ok_or("still there".to_string()),
    );
    assert!(kernel_route(&node, LEARNED).is_none(), "the learned route stayed in the kernel");
}
