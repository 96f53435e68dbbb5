//! Hostile and broken neighbours (issue #16), against a raw speaker (tests/tools/hostile_bgp.py)
//! and a real FRR: a peer that stops reading never stalls uplink and is dropped by the RFC 9687
//! SendHoldTimer; a peer that sends more than `max_prefixes` never gets more than the limit
//! into the kernel, gets Cease/1, and comes back after `max_prefixes_restart_time`.

mod common;
use common::*;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const UP: Duration = Duration::from_secs(45);

fn tool() -> &'static str {
    concat!(env!("CARGO_MANIFEST_DIR"), "/tests/tools/hostile_bgp.py")
}

/// Runs the speaker in `ns` in the background; its JSON lines come back when it exits.
fn speaker(ns: &Ns, args: &[&str]) -> std::thread::JoinHandle<Vec<serde_json::Value>> {
    let ns = ns.clone();
    let mut cmd: Vec<String> = vec!["python3".into(), tool().into()];
    cmd.extend(args.iter().map(|a| a.to_string()));
    std::thread::spawn(move || {
        let args: Vec<&str> = cmd.iter().map(String::as_str).collect();
        let out = ns.run(&args);
        out.lines().filter_map(|l| serde_json::from_str(l).ok()).collect()
    })
}

fn kernel_routes(ns: &Ns, starting: &str) -> usize {
    let (_, out) = ns.try_run(&["ip", "-4", "route", "show", "proto", UPLINK_PROTO]);
    out.lines().filter(|l| l.starts_with(starting)).count()
}

fn neighbor(uplink: &Uplink, peer: &str) -> Result<serde_json::Value, String> {
    let v = uplink.json(&["show", "bgp", "neighbors", peer])?;
    Ok(v[peer].clone())
}

const FRR_CONF: &str = "frr defaults datacenter\nrouter bgp 65103\n bgp router-id 10.0.2.1\n \
    no bgp ebgp-requires-policy\n no bgp network import-check\n neighbor 10.0.2.2 remote-as 65801\n \
    neighbor 10.0.2.2 timers connect 1\n address-family ipv4 unicast\n  network 203.0.113.0/24\n \
    exit-address-family\n";

fn stall_config(with_raw_peer: bool) -> String {
    let raw = if with_raw_peer {
        r#"
[[bgp.routers.neighbors]]
address = "10.0.1.1"
asn = 65102
passive = true
hold_time = "3s"
keepalive_time = "1s"
to_receive = { allowed = { mode = "all" } }
# The node's 256 prefixes go to it again at every ROUTE-REFRESH: data it does not read.
to_advertise = { allowed = { mode = "all" } }
"#
    } else {
        ""
    };
    let prefixes: Vec<String> = (0..256).map(|i| format!("\"198.18.{i}.0/24\"")).collect();
    let prefixes = prefixes.join(", ");
    format!(
        r#"
[[bgp.routers]]
asn = 65801
id = "10.0.1.2"
prefixes = [{prefixes}]
{raw}
[[bgp.routers.neighbors]]
address = "10.0.2.1"
asn = 65103
connect_time = "1s"
to_receive = {{ allowed = {{ mode = "all" }} }}
"#
    )
}

#[test]
fn a_peer_that_stops_reading_is_dropped_by_the_send_hold_timer_and_stalls_nothing() {
    require_tool("python3");
    let mut lab = Lab::new("stall");
    let node = lab.ns("node");
    let raw = lab.ns("raw");
    let frr_ns = lab.ns("frr");
    lab.link(&node, &["10.0.1.2/24"], &raw, &["10.0.1.1/24"]);
    lab.link(&node, &["10.0.2.2/24"], &frr_ns, &["10.0.2.1/24"]);
    let frr = Frr::start(&mut lab, &frr_ns, FRR_CONF);
    let uplink = Uplink::start(&mut lab, &node, "uplink", &stall_config(true));
    wait_for("FRR session up", UP, || {
        let s = uplink.peer_state("ipv4Unicast", "10.0.2.1")?;
        (s == "Established").then_some(()).ok_or(s)
    });

    // 1. The raw peer stops reading; removing it by reload still works at once, and takes its
    //    prefix out of the kernel.
    let stalled =
        speaker(&raw, &["stall", "10.0.1.2", "65102", "10.0.1.1", "3", "198.51.100.0/24", "60"]);
    wait_for("the raw peer's prefix in the kernel", UP, || {
        (kernel_routes(&node, "198.51.100.0/24") == 1).then_some(()).ok_or("not yet".to_string())
    });
    // Long enough for its TCP window to close and the queues to fill.
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(uplink.peer_state("ipv4Unicast", "10.0.1.1").unwrap(), "Established");
    std::fs::write(&uplink.config, stall_config(false)).unwrap();
    let started = Instant::now();
    let out =
        uplink.cli(&["reload"]).unwrap_or_else(|e| panic!("reload: {e}\n{}", lab.dump_logs()));
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "reload took {:?}: {out}",
        started.elapsed()
    );
    wait_for("the removed peer's prefix gone from the kernel", Duration::from_secs(5), || {
        (kernel_routes(&node, "198.51.100.0/24") == 0)
            .then_some(())
            .ok_or("still there".to_string())
    });
    drop(stalled.join());

    // 2. Back in the config, it stops reading again: the SendHoldTimer (twice the negotiated
    //    hold time of 3 s) ends the session, while FRR's session resets and comes back
    //    normally meanwhile.
    std::fs::write(&uplink.config, stall_config(true)).unwrap();
    uplink.cli(&["reload"]).unwrap_or_else(|e| panic!("reload: {e}"));
    let stalled =
        speaker(&raw, &["stall", "10.0.1.2", "65102", "10.0.1.1", "3", "198.51.100.0/24", "40"]);
    wait_for("the raw peer Established again", UP, || {
        let s = uplink.peer_state("ipv4Unicast", "10.0.1.1")?;
        (s == "Established").then_some(()).ok_or(s)
    });
    let stall_seen = Instant::now();
    let before = neighbor(&uplink, "10.0.2.1").unwrap()["connectionsEstablished"].as_u64();
    frr.vtysh("clear ip bgp *");
    wait_for("FRR's session re-established while the raw peer is stalled", UP, || {
        let n = neighbor(&uplink, "10.0.2.1")?;
        let again = n["bgpState"] == "Established" && n["connectionsEstablished"].as_u64() > before;
        again.then_some(()).ok_or(format!("{}", n["bgpState"]))
    });
    let down = wait_for("the stalled session to end", Duration::from_secs(40), || {
        let n = neighbor(&uplink, "10.0.1.1")?;
        let reason = n["lastResetDueTo"].as_str().unwrap_or_default().to_string();
        reason.contains("Send Hold Timer Expired").then_some(reason).ok_or(format!("{n}"))
    });
    let after = stall_seen.elapsed();
    // The peer stopped reading one second after it came up; the timer is 6 s from the last
    // progress of our writes, which stop a little after that (the buffers fill first).
    assert!(after >= Duration::from_secs(4), "down after {after:?}: {down}");
    assert!(after < Duration::from_secs(25), "down after {after:?}: {down}");
    assert!(down.contains("the peer took none of our data for 6 s"), "{down}");
    // FRR's session was never disturbed by it.
    assert_eq!(uplink.peer_state("ipv4Unicast", "10.0.2.1").unwrap(), "Established");
    let lines = stalled.join().unwrap();
    assert!(lines.iter().any(|l| l["stalled"] == true), "{lines:?}");
}

fn limit_config() -> String {
    r#"
[[bgp.routers]]
asn = 65801
id = "10.0.1.2"

[[bgp.routers.neighbors]]
address = "10.0.1.1"
asn = 65102
passive = true
max_prefixes = 1000
max_prefixes_restart_time = "4s"
to_receive = { allowed = { mode = "all" } }

[[bgp.routers.neighbors]]
address = "10.0.3.1"
asn = 65103
passive = true
max_prefixes = 1000
max_prefixes_warning_only = true
to_receive = { allowed = { mode = "all" } }
"#
    .to_string()
}

#[test]
fn max_prefixes_stops_a_full_table_before_the_kernel_and_restarts() {
    require_tool("python3");
    let mut lab = Lab::new("maxpfx");
    let node = lab.ns("node");
    let leak = lab.ns("leak");
    let warn = lab.ns("warn");
    lab.link(&node, &["10.0.1.2/24"], &leak, &["10.0.1.1/24"]);
    lab.link(&node, &["10.0.3.2/24"], &warn, &["10.0.3.1/24"]);
    let uplink = Uplink::start(&mut lab, &node, "uplink", &limit_config());
    wait_for("uplink up", UP, || uplink.json(&["show", "bgp", "summary"]).map(|_| ()));

    // Sample the kernel while 100k prefixes pour in.
    let done = Arc::new(AtomicBool::new(false));
    let most = Arc::new(AtomicUsize::new(0));
    let sampler = {
        let (done, most, node) = (done.clone(), most.clone(), node.clone());
        std::thread::spawn(move || {
            while !done.load(Ordering::SeqCst) {
                most.fetch_max(kernel_routes(&node, "100.64."), Ordering::SeqCst);
                std::thread::sleep(Duration::from_millis(50));
            }
        })
    };
    let leaker =
        speaker(&leak, &["flood", "10.0.1.2", "65102", "10.0.1.1", "100000", "16", "100.64.0.0"]);
    // Still connected for a while after the leaker's 16 s, for the checks below.
    let warner =
        speaker(&warn, &["flood", "10.0.3.2", "65103", "10.0.3.1", "1500", "24", "100.96.0.0"]);
    let lines = leaker.join().unwrap();
    done.store(true, Ordering::SeqCst);
    sampler.join().unwrap();
    let logs = lab.dump_logs();
    let at = |l: &serde_json::Value| l["at"].as_f64().unwrap_or_default();
    // Cease, Maximum Number of Prefixes Reached (RFC 4486 §4).
    let cease = lines
        .iter()
        .find(|l| l["type"] == 3)
        .unwrap_or_else(|| panic!("no NOTIFICATION: {lines:?}\n{logs}"));
    assert_eq!(
        (cease["code"].as_u64(), cease["subcode"].as_u64()),
        (Some(6), Some(1)),
        "{lines:?}"
    );
    // The kernel never held more than the limit from that peer.
    let most = most.load(Ordering::SeqCst);
    // (The Cease follows the first 1000 so closely that the FIB writer may see them come and
    // go in one batch: the sampler's eyes are checked with the warning-only peer's 1500.)
    assert!(most <= 1000, "the kernel held {most} of the peer's routes");
    // Refused while held down, established again after the restart time.
    let again = lines
        .iter()
        .filter(|l| l["established"] == true)
        .nth(1)
        .unwrap_or_else(|| panic!("never re-established: {lines:?}\n{logs}"));
    let waited = at(again) - at(cease);
    assert!((3.5..10.0).contains(&waited), "re-established {waited} s after the Cease: {lines:?}");

    // Warning-only: the session stays with every prefix, and `show` says so.
    assert_eq!(uplink.peer_state("ipv4Unicast", "10.0.3.1").unwrap(), "Established");
    wait_for("the warning-only peer's 1500 routes in the kernel", UP, || {
        let n = kernel_routes(&node, "100.96.");
        (n == 1500).then_some(()).ok_or(format!("{n}"))
    });
    let n = neighbor(&uplink, "10.0.3.1").unwrap();
    let family = &n["addressFamilyInfo"]["ipv4Unicast"];
    assert_eq!(family["prefixAllowedMax"], 1000, "{n}");
    assert_eq!(family["prefixAllowedMaxWarning"], true, "{n}");
    assert_eq!(family["prefixAllowedMaxExceeded"], true, "{n}");
    let lines = warner.join().unwrap();
    assert!(!lines.iter().any(|l| l["type"] == 3), "{lines:?}");
    let log = std::fs::read_to_string(lab.path("uplink.log")).unwrap_or_default();
    assert!(log.contains("keeping the session (max_prefixes_warning_only)"), "{}", lab.dump_logs());
}

/// One uplink per network namespace, and only root decides which: an unprivileged process
/// (nobody) that binds the abstract socket `@uplink.lock` — the lock of earlier versions,
/// which anyone in the namespace could take — does not keep uplink from starting; a second
/// uplink in the namespace is still refused and told who holds the lock; one in another
/// namespace starts; and the lock goes with a `kill -9`.
#[test]
fn a_squatter_on_the_old_lock_name_does_not_stop_uplink_and_a_second_daemon_is_refused() {
    require_tool("setpriv");
    require_tool("ss");
    // By path: nobody cannot read root's PATH entries (a pyenv shim under /root, say).
    require_tool("/usr/bin/python3");
    let mut lab = Lab::new("lock");
    let node = lab.ns("node");
    let other = lab.ns("other");
    let squat = "import os, socket, time\n\
                 s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)\n\
                 s.bind('\\0uplink.lock')\n\
                 s.listen(1)\n\
                 print('bound @uplink.lock as uid', os.getuid(), flush=True)\n\
                 time.sleep(3600)\n";
    let mut squatter = node.command("setpriv");
    squatter.args(["--reuid=65534", "--regid=65534", "--clear-groups", "/usr/bin/python3"]);
    squatter.args(["-c", squat]);
    lab.spawn("squatter", squatter);
    wait_for("nobody to bind @uplink.lock", Duration::from_secs(10), || {
        let log = std::fs::read_to_string(lab.path("squatter.log")).unwrap_or_default();
        log.contains("bound @uplink.lock as uid 65534").then_some(()).ok_or(log)
    });
    let config = "[[bgp.routers]]\nasn = 65801\nid = \"10.0.1.2\"\n";
    let first = Uplink::start(&mut lab, &node, "first", config);
    wait_for("the first daemon up beside the squatter", UP, || {
        first.json(&["show", "bgp", "summary"]).map(|_| ())
    });
    let squatting = node.run(&["ss", "-xlp"]);
    assert!(squatting.contains("@uplink.lock"), "the squatter left: {squatting}");
    // Another namespace is another FIB: a daemon there starts.
    let elsewhere = Uplink::start(&mut lab, &other, "elsewhere", config);
    wait_for("the daemon in another namespace up", UP, || {
        elsewhere.json(&["show", "bgp", "summary"]).map(|_| ())
    });
    let dir = lab.path("second");
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("uplink.toml");
    std::fs::write(&path, config).unwrap();
    // `timeout`: a second daemon that did start would run for good.
    let (ok, out) = node.try_run(&[
        "timeout",
        "10",
        uplink_bin(),
        "run",
        "--config",
        path.to_str().unwrap(),
        "--socket",
        dir.join("uplink.sock").to_str().unwrap(),
        "--state-dir",
        dir.join("state").to_str().unwrap(),
    ]);
    assert!(!ok, "a second daemon started: {out}");
    assert!(out.contains("another uplink is running in this network namespace"), "{out}");
    // It names the holder and where to look.
    let pid = lab.pid_of(&first.label).unwrap();
    assert!(out.contains(&format!("uplink pid {pid} holds the lock /run/uplink/netns-")), "{out}");
    assert!(out.contains("`lslocks` or `fuser -v /run/uplink/netns-"), "{out}");
    // The first one is untouched, and its lock goes with it: a restart after kill -9 works.
    first.json(&["show", "bgp", "summary"]).unwrap();
    lab.kill9(&first.label);
    first.launch(&mut lab);
    wait_for("the first daemon back after kill -9", UP, || {
        first.json(&["show", "bgp", "summary"]).map(|_| ())
    });
}
