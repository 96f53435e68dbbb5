//! `uplink wait-ready`: returns once every configured session is Established with End-of-RIB
//! both ways — here against an FRR that starts late — and fails naming the session that never
//! comes up; without graceful restart (no End-of-RIB from FRR) Established is enough.

mod common;
use common::*;
use std::process::Command;
use std::time::{Duration, Instant};

fn wait_ready(uplink: &Uplink, timeout: &str) -> (bool, String, Duration) {
    let started = Instant::now();
    let out = Command::new(uplink_bin())
        .args(["wait-ready", "--timeout", timeout, "--socket"])
        .arg(&uplink.socket)
        .output()
        .unwrap();
    let text =
        format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    (out.status.success(), text, started.elapsed())
}

#[test]
fn waits_for_a_late_peer_and_names_one_that_never_comes() {
    let mut lab = Lab::new("ready");
    let node = lab.ns("node");
    let tor = lab.ns("tor");
    lab.link(&node, &["10.0.1.2/24"], &tor, &["10.0.1.1/24"]);
    let config = r#"
[[bgp.routers]]
asn = 65801
id = "10.0.1.2"
install = false
prefixes = ["192.0.2.10/32"]

[[bgp.routers.neighbors]]
address = "10.0.1.1"
asn = 65102
connect_time = "1s"
to_advertise = { allowed = { mode = "all" } }
to_receive = { allowed = { mode = "all" } }
"#;
    let uplink = Uplink::start(&mut lab, &node, "uplink", config);

    // The peer comes up 3 s after wait-ready starts waiting.
    let starter = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_secs(3));
        let frr = Frr::start_daemons(
            &mut lab,
            &tor,
            "router bgp 65102\n bgp router-id 10.0.1.1\n no bgp ebgp-requires-policy\n \
             no bgp network import-check\n neighbor 10.0.1.2 remote-as 65801\n \
             neighbor 10.0.1.2 timers connect 1\n address-family ipv4 unicast\n  \
             network 203.0.113.0/24\n exit-address-family\n",
            &["bgpd"],
        );
        (lab, frr)
    });
    let (ready, text, took) = wait_ready(&uplink, "60s");
    let (mut lab, frr) = starter.join().unwrap();
    assert!(ready, "wait-ready failed: {text}\n{}", lab.dump_logs());
    assert!(took >= Duration::from_secs(3), "ready before the peer existed ({took:?}): {text}");
    assert!(text.contains("ready: 1 session"), "{text}");
    // Ready means both tables are complete: FRR has our route, we have FRR's.
    assert!(frr.route("192.0.2.10/32")["paths"].as_array().is_some_and(|p| !p.is_empty()));
    let v = uplink.json(&["show", "bgp", "routes", "203.0.113.0/24"]).unwrap();
    assert!(v["paths"].as_array().is_some_and(|p| !p.is_empty()), "{v:#}");

    // A second neighbor that never answers: not ready, and named.
    let with_dead = format!(
        "{config}\n[[bgp.routers.neighbors]]\naddress = \"10.0.1.9\"\nasn = 65109\nconnect_time = \"1s\"\n"
    );
    std::fs::write(&uplink.config, with_dead).unwrap();
    lab.stop(&uplink.label);
    uplink.launch(&mut lab);
    let (ready, text, took) = wait_ready(&uplink, "4s");
    assert!(!ready, "ready with a dead neighbor: {text}");
    assert!(took >= Duration::from_secs(4) && took < Duration::from_secs(8), "{took:?}");
    assert!(text.contains("not ready: neighbor 10.0.1.9"), "{text}");
    assert!(!text.contains("neighbor 10.0.1.1 "), "the live session is ready: {text}");

    // Without graceful restart on our side FRR sends no End-of-RIB (RFC 4724 §2 ties it to the
    // capability): Established with our table sent is ready then.
    let without_gr = config
        .replace("connect_time = \"1s\"\n", "connect_time = \"1s\"\ngraceful_restart = false\n");
    assert_ne!(without_gr, config);
    std::fs::write(&uplink.config, without_gr).unwrap();
    lab.stop(&uplink.label);
    uplink.launch(&mut lab);
    let (ready, text, _) = wait_ready(&uplink, "30s");
    assert!(ready, "not ready without graceful restart: {text}\n{}", lab.dump_logs());
    let eor = |v: &serde_json::Value| v["10.0.1.1"]["gracefulRestartInfo"].to_string();
    let shown = uplink.json(&["show", "bgp", "neighbors", "10.0.1.1"]).unwrap();
    assert!(frr.route("192.0.2.10/32")["paths"].as_array().is_some_and(|p| !p.is_empty()));
    assert!(eor(&shown).contains("\"localGrMode\":\"Disable\""), "{}", eor(&shown));
}
