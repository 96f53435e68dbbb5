//! BFD in network namespaces: uplink's BFD against FRR bfdd and BIRD 2, coupled to BGP.
//! Silencing the peer's BFD (nftables drop of its UDP 3784 output) must take BFD Down within
//! the detection time and BGP with it (Cease subcode 10, "BFD Down", RFC 9384), hold BGP down
//! while BFD is Down, and bring both back when the packets flow again.
//!
//! Hostile and misconfigured neighbours: authenticated sessions (RFC 5880 §6.7) against BIRD 2
//! come up with the right key and never with a wrong one; a stranger on the segment can
//! neither take an Up session down with a forged Down nor disturb it with a flood, also when
//! the session is authenticated and the flood carries forged authentication sections
//! (`tests/tools/bfd_spoof.py` writes the forged packets).

mod common;
use common::*;
use serde_json::Value;
use std::time::{Duration, Instant};

/// BFD timers are tens of milliseconds and one test floods the CPU on purpose: the tests of
/// this file run one at a time, so that none measures the load of another.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

const UP: Duration = Duration::from_secs(45);

fn uplink_config(peer: &str, peer_asn: u32, tx_ms: u32) -> String {
    format!(
        r#"[[bgp.bfd_profiles]]
name = "fast"
transmit_interval = "{tx_ms}ms"
receive_interval = "{tx_ms}ms"
detect_multiplier = 3

[[bgp.routers]]
asn = 65001
id = "10.0.1.2"
prefixes = ["192.0.2.10/32"]

[[bgp.routers.neighbors]]
address = "{peer}"
asn = {peer_asn}
connect_time = "1s"
bfd_profile = "fast"
to_advertise = {{ allowed = {{ mode = "all" }} }}
"#
    )
}

/// FRR bfdd's status of its session with the node (10.0.1.2), or "absent".
fn frr_bfd_status(frr: &Frr) -> String {
    let v = frr.json("show bfd peers json");
    v.as_array()
        .into_iter()
        .flatten()
        .find(|p| p["peer"] == "10.0.1.2")
        .map(|p| p["status"].as_str().unwrap_or("").to_string())
        .unwrap_or_else(|| "absent".into())
}

/// uplink's `show bfd peers --json` entry for `peer`.
fn bfd_peer(uplink: &Uplink, peer: &str) -> Result<Value, String> {
    let v = uplink.json(&["show", "bfd", "peers"])?;
    v.as_array()
        .into_iter()
        .flatten()
        .find(|p| p["peer"] == peer)
        .cloned()
        .ok_or_else(|| format!("no BFD peer {peer} in {v}"))
}

fn bgp_state(uplink: &Uplink, peer: &str) -> String {
    uplink.peer_state("ipv4Unicast", peer).unwrap_or_else(|e| e)
}

fn wait_both_up(lab: &Lab, uplink: &Uplink, peer: &str, peer_bfd_up: impl Fn() -> bool) {
    wait_for("BFD Up on both sides and BGP Established", UP, || {
        let ours = bfd_peer(uplink, peer)?;
        let bgp = bgp_state(uplink, peer);
        let theirs = peer_bfd_up();
        if ours["status"] == "up" && bgp == "Established" && theirs {
            Ok(())
        } else {
            Err(format!("uplink BFD {ours}, BGP {bgp}, peer BFD up={theirs}\n{}", lab.dump_logs()))
        }
    });
}

/// Drops every BFD packet the peer namespace sends (single hop, RFC 5881 port 3784).
/// Drops every BFD packet arriving in `ns` (uplink's namespace): to uplink the peer has gone
/// silent. Dropping on the peer's output instead makes its sendmsg fail with EPERM, which
/// BIRD treats as a socket error it does not recover from.
fn silence(ns: &Ns) {
    ns.run(&["nft", "add", "table", "inet", "bfdtest"]);
    ns.run(&["nft", "add chain inet bfdtest in { type filter hook input priority 0 ; }"]);
    ns.run(&["nft", "add", "rule", "inet", "bfdtest", "in", "udp", "dport", "3784", "drop"]);
}

fn unsilence(ns: &Ns) {
    ns.run(&["nft", "delete", "table", "inet", "bfdtest"]);
}

/// Silences the peer and returns how long uplink took to report BFD Down and BGP not
/// Established (polled through the CLI, so this over-estimates by the polling cost).
fn silence_and_wait_down(lab: &Lab, uplink: &Uplink, node_ns: &Ns, peer: &str) -> Duration {
    let start = Instant::now();
    silence(node_ns);
    wait_for("BFD and BGP Down after the peer went silent", Duration::from_secs(10), || {
        let ours = bfd_peer(uplink, peer)?;
        let bgp = bgp_state(uplink, peer);
        if ours["status"] != "up" && bgp != "Established" {
            Ok(start.elapsed())
        } else {
            Err(format!("uplink BFD {ours}, BGP {bgp}\n{}", lab.dump_logs()))
        }
    })
}

/// A hand-made BFD Control packet (RFC 5880 §4.1) in state Down, sent from the peer
/// namespace with the given TTL.
fn send_crafted_down(ns: &Ns, from: &str, to: &str, my: u64, your: u64, ttl: u8) {
    let script = format!(
        "import socket,struct\n\
         s=socket.socket(socket.AF_INET,socket.SOCK_DGRAM)\n\
         s.setsockopt(socket.IPPROTO_IP,socket.IP_TTL,{ttl})\n\
         s.bind(('{from}',49999))\n\
         s.sendto(struct.pack('!BBBBIIIII',0x20,0x40,3,24,{my},{your},1000000,50000,0),('{to}',3784))\n"
    );
    ns.run(&["python3", "-c", &script]);
}

#[test]
fn frr_bfdd_up_detect_hold_restore_timer_change_and_ttl() {
    let _serial = one_at_a_time();
    require_tool("nft");
    require_tool("python3");
    let mut lab = Lab::new("bfdfrr");
    let node = lab.ns("node");
    let peer_ns = lab.ns("peer");
    lab.link(&node, &["10.0.1.2/24"], &peer_ns, &["10.0.1.1/24"]);
    // FRR's bfdd runs a configured peer that is not coupled to FRR's own BGP, so the only
    // thing that takes BGP down is uplink's Cease/BFD Down.
    let frr = Frr::start_with_bfd(
        &mut lab,
        &peer_ns,
        r#"frr defaults datacenter
bfd
 peer 10.0.1.2
  transmit-interval 50
  receive-interval 50
  detect-multiplier 3
 !
!
router bgp 65102
 bgp router-id 10.0.1.1
 no bgp ebgp-requires-policy
 neighbor 10.0.1.2 remote-as 65001
 neighbor 10.0.1.2 timers connect 1
!
"#,
    );
    let uplink = Uplink::start(&mut lab, &node, "uplink", &uplink_config("10.0.1.1", 65102, 50));
    wait_both_up(&lab, &uplink, "10.0.1.1", || frr_bfd_status(&frr) == "up");

    // Negotiated: both sides 50 ms × 3.
    wait_for("negotiated 50 ms timers", Duration::from_secs(10), || {
        let p = bfd_peer(&uplink, "10.0.1.1")?;
        (p["negotiated-transmit-interval"] == 50 && p["detection-time"] == 150)
            .then_some(())
            .ok_or(format!("{p}"))
    });
    let p = bfd_peer(&uplink, "10.0.1.1").unwrap();
    assert_eq!(p["local"], "10.0.1.2", "{p}");
    assert_eq!(p["remote-detect-multiplier"], 3, "{p}");
    assert_ne!(p["remote-id"], 0, "{p}");
    let text = uplink.cli(&["show", "bfd", "peers"]).unwrap();
    assert!(text.contains("peer 10.0.1.1 local-address 10.0.1.2 vrf default"), "{text}");
    assert!(text.contains("Status: up"), "{text}");

    // A timer change on FRR's side is negotiated by a Poll Sequence, without a flap.
    let downs_before = p["session-down"].as_u64().unwrap();
    let (ok, out) = peer_ns.try_run(&[
        "vtysh",
        "-N",
        &peer_ns.name,
        "-c",
        "configure terminal",
        "-c",
        "bfd",
        "-c",
        "peer 10.0.1.2",
        "-c",
        "transmit-interval 100",
    ]);
    assert!(ok, "vtysh: {out}");
    wait_for("uplink sees FRR's 100 ms transmit interval", Duration::from_secs(10), || {
        let p = bfd_peer(&uplink, "10.0.1.1")?;
        (p["remote-transmit-interval"] == 100 && p["detection-time"] == 300)
            .then_some(())
            .ok_or(format!("{p}"))
    });
    let p = bfd_peer(&uplink, "10.0.1.1").unwrap();
    assert_eq!(p["status"], "up");
    assert_eq!(p["session-down"].as_u64().unwrap(), downs_before, "the timer change flapped: {p}");
    assert_eq!(bgp_state(&uplink, "10.0.1.1"), "Established");

    // RFC 5881 §5: a packet with TTL < 255 is dropped. This one claims to be FRR saying
    // Down: with TTL 254 nothing happens; with TTL 255 (the control) the session goes Down.
    let ours = p["id"].as_u64().unwrap();
    let theirs = p["remote-id"].as_u64().unwrap();
    send_crafted_down(&peer_ns, "10.0.1.1", "10.0.1.2", theirs, ours, 254);
    std::thread::sleep(Duration::from_millis(500));
    let p = bfd_peer(&uplink, "10.0.1.1").unwrap();
    assert_eq!(p["status"], "up", "a TTL 254 packet was accepted: {p}");
    assert_eq!(p["session-down"].as_u64().unwrap(), downs_before, "{p}");
    send_crafted_down(&peer_ns, "10.0.1.1", "10.0.1.2", theirs, ours, 255);
    wait_for("the TTL 255 control packet takes the session down", Duration::from_secs(5), || {
        let p = bfd_peer(&uplink, "10.0.1.1")?;
        (p["session-down"].as_u64() > Some(downs_before)).then_some(()).ok_or(format!("{p}"))
    });
    wait_both_up(&lab, &uplink, "10.0.1.1", || frr_bfd_status(&frr) == "up");

    // Silence FRR's BFD: Down within the detection time (300 ms now) and BGP with it.
    let took = silence_and_wait_down(&lab, &uplink, &node, "10.0.1.1");
    assert!(took < Duration::from_millis(300 + 700), "detection took {took:?}");
    let p = bfd_peer(&uplink, "10.0.1.1").unwrap();
    assert_eq!(p["diagnostic"], "control detection time expired", "{p}");
    let neighbor = uplink.json(&["show", "bgp", "neighbors", "10.0.1.1"]).unwrap();
    let reset = neighbor.to_string();
    assert!(
        reset.contains("BFD Down"),
        "uplink's reset reason should name Cease/BFD Down: {reset}"
    );
    // FRR received the NOTIFICATION Cease subcode 10.
    wait_for("FRR logs the Cease/BFD Down NOTIFICATION", Duration::from_secs(10), || {
        let log =
            std::fs::read_to_string(lab.path(&format!("{}.log", frr.label))).unwrap_or_default();
        log.contains("Cease/BFD Down").then_some(()).ok_or(format!("FRR log:\n{log}"))
    });
    // BGP stays down while BFD is Down, even though TCP still works.
    std::thread::sleep(Duration::from_secs(4));
    assert_ne!(bgp_state(&uplink, "10.0.1.1"), "Established", "BGP came back while BFD is Down");
    assert_ne!(frr.peer_state("ipv4Unicast", "10.0.1.2"), "Established");

    // Packets flow again: BFD Up, then BGP.
    unsilence(&node);
    wait_both_up(&lab, &uplink, "10.0.1.1", || frr_bfd_status(&frr) == "up");
    wait_for("FRR learns 192.0.2.10/32 again", UP, || {
        (!frr.route_nexthops("192.0.2.10/32").is_empty()).then_some(()).ok_or("absent".into())
    });
}

#[test]
fn bird_bfd_up_detect_and_restore() {
    let _serial = one_at_a_time();
    require_tool("nft");
    let mut lab = Lab::new("bfdbird");
    let node = lab.ns("node");
    let peer_ns = lab.ns("peer");
    lab.link(&node, &["10.0.1.2/24"], &peer_ns, &["10.0.1.1/24"]);
    let bird = Bird::start(
        &mut lab,
        &peer_ns,
        r#"router id 10.0.1.1;
protocol device {}
protocol bfd {
  interface "*" { min rx interval 50 ms; min tx interval 50 ms; multiplier 3; };
}
protocol bgp uplink {
  local 10.0.1.1 as 65102;
  neighbor 10.0.1.2 as 65001;
  bfd on;
  connect retry time 1;
  # BIRD waits 60-300 s after a session error by default; our Cease/BFD Down is one.
  error wait time 1, 5;
  ipv4 { import all; export none; };
}
"#,
    );
    let bird_bfd_up = |bird: &Bird| bird.birdc("show bfd sessions").contains("Up");
    let uplink = Uplink::start(&mut lab, &node, "uplink", &uplink_config("10.0.1.1", 65102, 50));
    wait_both_up(&lab, &uplink, "10.0.1.1", || bird_bfd_up(&bird) && bird.established("uplink"));
    wait_for("negotiated 50 ms timers with BIRD", Duration::from_secs(10), || {
        let p = bfd_peer(&uplink, "10.0.1.1")?;
        (p["negotiated-transmit-interval"] == 50 && p["detection-time"] == 150)
            .then_some(())
            .ok_or(format!("{p}"))
    });

    let took = silence_and_wait_down(&lab, &uplink, &node, "10.0.1.1");
    assert!(took < Duration::from_millis(150 + 700), "detection took {took:?}");
    std::thread::sleep(Duration::from_secs(3));
    assert_ne!(bgp_state(&uplink, "10.0.1.1"), "Established", "BGP came back while BFD is Down");

    unsilence(&node);
    wait_both_up(&lab, &uplink, "10.0.1.1", || bird_bfd_up(&bird) && bird.established("uplink"));
}

/// A reload that gives a neighbor a `bfd_profile` on a router that had no BFD session starts
/// the router's BFD thread then and there: no daemon restart.
#[test]
fn bfd_starts_for_a_neighbor_a_reload_gives_a_profile() {
    let _serial = one_at_a_time();
    let mut lab = Lab::new("bfdreload");
    let node = lab.ns("node");
    let peer_ns = lab.ns("peer");
    lab.link(&node, &["10.0.1.2/24"], &peer_ns, &["10.0.1.1/24"]);
    let frr = Frr::start_with_bfd(
        &mut lab,
        &peer_ns,
        "frr defaults datacenter\nbfd\n peer 10.0.1.2\n  transmit-interval 100\n  receive-interval 100\n !\n!\n\
         router bgp 65102\n bgp router-id 10.0.1.1\n no bgp ebgp-requires-policy\n \
         neighbor 10.0.1.2 remote-as 65001\n neighbor 10.0.1.2 timers connect 1\n!\n",
    );
    let with_bfd = uplink_config("10.0.1.1", 65102, 100);
    let without = with_bfd.replace("bfd_profile = \"fast\"\n", "");
    assert_ne!(with_bfd, without);
    let uplink = Uplink::start(&mut lab, &node, "uplink", &without);
    wait_for("BGP Established without BFD", UP, || match bgp_state(&uplink, "10.0.1.1") {
        s if s == "Established" => Ok(()),
        s => Err(s),
    });
    assert!(bfd_peer(&uplink, "10.0.1.1").is_err(), "no BFD session before the reload");
    std::fs::write(&uplink.config, &with_bfd).unwrap();
    run(&["pkill", "-HUP", "-f", &format!("run --config {}", uplink.config.display())]);
    wait_both_up(&lab, &uplink, "10.0.1.1", || frr_bfd_status(&frr) == "up");
}

/// BIRD's BFD config with `auth` (e.g. `authentication keyed sha1; password "x" { id 1; };`)
/// and a BGP session to the node at `node`.
fn bird_bfd_conf(id: &str, asn: u32, node: &str, tx_ms: u32, auth: &str) -> String {
    format!(
        r#"router id {id};
protocol device {{}}
protocol bfd {{
  interface "*" {{
    min rx interval {tx_ms} ms; min tx interval {tx_ms} ms; idle tx interval 100 ms; multiplier 3;
    {auth}
  }};
}}
protocol bgp uplink {{
  local {id} as {asn};
  neighbor {node} as 65001;
  bfd on;
  connect retry time 1;
  error wait time 1, 5;
  ipv4 {{ import all; export none; }};
}}
"#
    )
}

fn bird_bfd_up(bird: &Bird) -> bool {
    bird.birdc("show bfd sessions").lines().any(|l| l.contains(" Up "))
}

/// Lines of uplink's log that contain `needle`.
fn log_lines(lab: &Lab, needle: &str) -> Vec<String> {
    let log = std::fs::read_to_string(lab.path("uplink.log")).unwrap_or_default();
    log.lines().filter(|l| l.contains(needle)).map(str::to_string).collect()
}

/// RFC 5880 §6.7 against BIRD 2: keyed SHA1 and meticulous keyed MD5 sessions come up (and
/// stay up across BIRD's and our sequence numbers), a wrong key never does, and the refused
/// packets are counted and logged a few times, not once each. The right key given by a
/// reload brings that session up without resetting its BGP session.
#[test]
fn bird_authenticated_sessions_come_up_and_a_wrong_key_does_not_until_reloaded() {
    let _serial = one_at_a_time();
    require_tool("bird");
    require_tool("chrt");
    let mut lab = Lab::new("bfdauth");
    let node = lab.ns("node");
    // (peer address, BIRD's BFD auth, uplink's authentication, expected to come up)
    let cases = [
        (
            "10.0.1.1",
            r#"authentication keyed sha1; password "sha1-secret" { id 1; };"#,
            r#"{ type = "keyed-sha1", key_id = 1, password = "sha1-secret" }"#,
            "keyed-sha1",
        ),
        (
            "10.0.2.1",
            r#"authentication meticulous keyed md5; password "md5-secret" { id 7; };"#,
            r#"{ type = "meticulous-keyed-md5", key_id = 7, password_file = "md5.key" }"#,
            "meticulous-keyed-md5",
        ),
        (
            "10.0.3.1",
            r#"authentication meticulous keyed sha1; password "their-key" { id 1; };"#,
            r#"{ type = "meticulous-keyed-sha1", key_id = 1, password = "our-key" }"#,
            "meticulous-keyed-sha1",
        ),
    ];
    let mut config = String::new();
    let mut birds = Vec::new();
    for (index, (peer, bird_auth, our_auth, _)) in cases.iter().enumerate() {
        let n = index + 1;
        let peer_ns = lab.ns(&format!("peer{n}"));
        let node_addr = format!("10.0.{n}.2/24");
        lab.link(&node, &[&node_addr], &peer_ns, &[&format!("{peer}/24")]);
        let asn = 65100 + n as u32;
        let bird = Bird::start(
            &mut lab,
            &peer_ns,
            &bird_bfd_conf(peer, asn, &format!("10.0.{n}.2"), 50, bird_auth),
        );
        // The good sessions must never flap for seconds of 150 ms detection: the peers run
        // as a router's BFD does, ahead of the machine's other work.
        keep_bird_on_time(&lab, &bird);
        birds.push(bird);
        config.push_str(&format!(
            "[[bgp.bfd_profiles]]\nname = \"p{n}\"\ntransmit_interval = \"50ms\"\n\
             receive_interval = \"50ms\"\nauthentication = {our_auth}\n\n"
        ));
    }
    config.push_str("[[bgp.routers]]\nasn = 65001\nid = \"10.0.1.2\"\n");
    for (index, (peer, ..)) in cases.iter().enumerate() {
        let n = index + 1;
        config.push_str(&format!(
            "\n[[bgp.routers.neighbors]]\naddress = \"{peer}\"\nasn = {}\nconnect_time = \"1s\"\n\
             bfd_profile = \"p{n}\"\n",
            65100 + n
        ));
    }
    // The MD5 key comes from a file next to the config, as an operator would keep it.
    std::fs::create_dir_all(lab.path("uplink")).unwrap();
    std::fs::write(lab.path("uplink/md5.key"), "md5-secret\n").unwrap();
    let uplink = Uplink::start(&mut lab, &node, "uplink", &config);

    for (index, (peer, _, _, kind)) in cases.iter().enumerate().take(2) {
        let bird = &birds[index];
        wait_both_up(&lab, &uplink, peer, || bird_bfd_up(bird) && bird.established("uplink"));
        let p = bfd_peer(&uplink, peer).unwrap();
        assert_eq!(p["authentication-type"], *kind, "{p}");
        assert_eq!(p["control-packet-discarded"], 0, "{p}");
        assert!(bird.birdc("show bfd sessions").contains("Up"));
    }
    assert_eq!(bfd_peer(&uplink, "10.0.2.1").unwrap()["authentication-key-id"], 7);
    let text = uplink.cli(&["show", "bfd", "peers"]).unwrap();
    assert!(text.contains("Authentication: keyed-sha1, key ID 1"), "{text}");

    // The wrong key: BGP is up (BFD starts after it), BFD never is.
    let wrong = "10.0.3.1";
    wait_for("BGP Established with the wrong-key peer", UP, || match bgp_state(&uplink, wrong) {
        s if s == "Established" => Ok(()),
        s => Err(s),
    });
    wait_for("uplink discards the wrong-key packets", Duration::from_secs(10), || {
        let p = bfd_peer(&uplink, wrong)?;
        (p["control-packet-discarded"].as_u64() > Some(10)).then_some(()).ok_or(format!("{p}"))
    });
    let p = bfd_peer(&uplink, wrong).unwrap();
    assert_ne!(p["status"], "up", "{p}");
    assert_eq!(p["session-up"], 0, "{p}");
    assert!(!bird_bfd_up(&birds[2]), "{}", birds[2].birdc("show bfd sessions"));
    // Summarised: dozens of packets refused, one or two lines.
    let lines = log_lines(&lab, "wrong digest");
    assert!(!lines.is_empty() && lines.len() <= 2, "{lines:#?}");
    assert!(lines[0].contains(wrong), "{lines:#?}");
    // The good sessions are still Up and never flapped, with the sequence numbers moving.
    std::thread::sleep(Duration::from_secs(2));
    for (peer, ..) in cases.iter().take(2) {
        let p = bfd_peer(&uplink, peer).unwrap();
        assert_eq!(
            (p["status"].as_str(), p["session-down"].as_u64()),
            (Some("up"), Some(0)),
            "{p}"
        );
        assert_eq!(p["control-packet-discarded"], 0, "{p}");
    }

    // The operator fixes the key and reloads: the BFD session starts again with the new key
    // and comes up; the BGP session is not reset for it.
    let connections = |uplink: &Uplink| {
        let v = uplink.json(&["show", "bgp", "neighbors", wrong]).unwrap();
        v[wrong]["connectionsEstablished"].as_u64().unwrap_or_else(|| panic!("{v}"))
    };
    let before = connections(&uplink);
    let fixed = config.replace("password = \"our-key\"", "password = \"their-key\"");
    assert_ne!(fixed, config);
    std::fs::write(&uplink.config, fixed).unwrap();
    for pid in run(&["ip", "netns", "pids", &node.name]).split_whitespace() {
        run(&["kill", "-HUP", pid]);
    }
    wait_both_up(&lab, &uplink, wrong, || bird_bfd_up(&birds[2]) && birds[2].established("uplink"));
    assert_eq!(bfd_peer(&uplink, wrong).unwrap()["control-packet-discarded"], 0);
    assert_eq!(connections(&uplink), before, "the BGP session was reset for a BFD key change");
    let restarted = "neighbor 10.0.3.1 updated: bfd_profile \"p3\": BFD session started again";
    assert!(!log_lines(&lab, restarted).is_empty(), "{}", lab.dump_logs());
}

/// Node, peer and a stranger on one Ethernet segment (a bridge in a fourth namespace).
/// Returns (lab, node, peer, stranger).
fn shared_segment(test: &str) -> (Lab, Ns, Ns, Ns) {
    let mut lab = Lab::new(test);
    let node = lab.ns("node");
    let peer = lab.ns("peer");
    let stranger = lab.ns("evil");
    let sw = lab.ns("sw");
    sw.run(&["ip", "link", "add", "br0", "type", "bridge"]);
    sw.run(&["ip", "link", "set", "br0", "up"]);
    let mut ifaces = Vec::new();
    for (ns, addr) in [(&node, "10.0.1.2/24"), (&peer, "10.0.1.1/24"), (&stranger, "10.0.1.66/24")]
    {
        let (iface, port) = lab.link(ns, &[addr], &sw, &[]);
        sw.run(&["ip", "link", "set", &port, "master", "br0"]);
        ifaces.push(iface);
    }
    // The stranger knows the node's MAC address (as anyone on the segment can learn it), so
    // its forged packets need no ARP exchange first.
    let link: Value =
        serde_json::from_str(&node.run(&["ip", "-j", "link", "show", &ifaces[0]])).unwrap();
    let mac = link[0]["address"].as_str().unwrap().to_string();
    let lladdr = ["ip", "neigh", "replace", "10.0.1.2", "lladdr", &mac];
    stranger.run(&[&lladdr[..], &["dev", &ifaces[2], "nud", "permanent"]].concat());
    (lab, node, peer, stranger)
}

/// Sends BFD packets with a forged source from `ns`, at low priority and as fast as it can;
/// returns how many went out.
fn spoof(ns: &Ns, src: &str, kind: &str, count: u32, seconds: f32) -> u64 {
    spoof_with(ns, &["nice", "-n", "19"], src, kind, count, seconds, &[])["sent"].as_u64().unwrap()
}

/// Runs `tests/tools/bfd_spoof.py` in `ns` after the `prefix` command words, with `extra`
/// options; returns its JSON report (`sent`, `seconds`, `rate`).
fn spoof_with(
    ns: &Ns,
    prefix: &[&str],
    src: &str,
    kind: &str,
    count: u32,
    seconds: f32,
    extra: &[&str],
) -> Value {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/tools/bfd_spoof.py");
    let (count, seconds) = (count.to_string(), seconds.to_string());
    let args = [prefix, &["python3", script, src, "10.0.1.2", kind, &count, &seconds], extra];
    let out = ns.run(&args.concat());
    serde_json::from_str(out.trim()).unwrap_or_else(|e| panic!("{e}: {out}"))
}

/// Gives BIRD's threads real-time priority (SCHED_FIFO 40), as uplink's BFD threads have:
/// a flood or a busy machine competes for the CPU with BIRD too, and only uplink's handling
/// is under test.
fn keep_bird_on_time(lab: &Lab, bird: &Bird) {
    // BIRD creates its pid file at once and writes the pid a moment later, after it forks.
    let pid_file = lab.path(&format!("{}.pid", bird.label));
    let pid = wait_for("BIRD to write its pid", Duration::from_secs(5), || {
        let pid = std::fs::read_to_string(&pid_file).map_err(|e| e.to_string())?;
        let pid = pid.trim().to_string();
        (!pid.is_empty()).then_some(pid).ok_or_else(|| "empty pid file".to_string())
    });
    run(&["chrt", "-a", "-f", "-p", "40", &pid]);
}

/// Five forged Downs and five forged AdminDowns (`kinds`, from `bfd_spoof.py`) with Your
/// Discriminator 0 from the peer's address: each is counted as discarded, the session stays
/// Up and never went down.
fn forged_downs_change_nothing(
    lab: &Lab,
    uplink: &Uplink,
    stranger: &Ns,
    kinds: [&str; 2],
    before: &Value,
) {
    let sent = spoof(stranger, "10.0.1.1", kinds[0], 5, 5.0)
        + spoof(stranger, "10.0.1.1", kinds[1], 5, 5.0);
    assert_eq!(sent, 10);
    let discarded_before = before["control-packet-discarded"].as_u64().unwrap();
    let p = wait_for("the forged packets to be discarded", Duration::from_secs(5), || {
        let p = bfd_peer(uplink, "10.0.1.1")?;
        let discarded = p["control-packet-discarded"].as_u64() == Some(discarded_before + 10);
        let went_down = p["session-down"] != before["session-down"];
        (discarded || went_down).then_some(p.clone()).ok_or(format!("{p}"))
    });
    assert_eq!(
        p["session-down"],
        before["session-down"],
        "a forged Down took the session down: {p}\n{}",
        lab.dump_logs()
    );
    assert_eq!(p["status"], "up", "{p}");
    assert_eq!(p["control-packet-discarded"].as_u64(), Some(discarded_before + 10), "{p}");
}

/// RFC 5880 §6.8.6 demultiplexing: a stranger on the segment forging the peer's address
/// cannot take an unauthenticated Up session down with a Down or AdminDown (it cannot know
/// the session's discriminator), and a flood of BFD packets — from its own address and forged
/// as the peer's — leaves the session Up with the same detection time, with a few summary
/// lines in the log instead of one per packet.
#[test]
fn spoofed_down_and_flood_from_a_stranger_leave_the_session_up() {
    let _serial = one_at_a_time();
    require_tool("bird");
    require_tool("python3");
    require_tool("chrt");
    let (mut lab, node, peer_ns, stranger) = shared_segment("bfdspoof");
    let bird =
        Bird::start(&mut lab, &peer_ns, &bird_bfd_conf("10.0.1.1", 65102, "10.0.1.2", 100, ""));
    keep_bird_on_time(&lab, &bird);
    let uplink = Uplink::start(&mut lab, &node, "uplink", &uplink_config("10.0.1.1", 65102, 100));
    wait_both_up(&lab, &uplink, "10.0.1.1", || bird_bfd_up(&bird) && bird.established("uplink"));
    let before = wait_for("negotiated 100 ms timers", Duration::from_secs(10), || {
        let p = bfd_peer(&uplink, "10.0.1.1")?;
        (p["detection-time"] == 300).then_some(p.clone()).ok_or(format!("{p}"))
    });

    // Forged Down and AdminDown with Your Discriminator 0: they reach the session (counted as
    // discarded there) and change nothing.
    let discarded_before = before["control-packet-discarded"].as_u64().unwrap();
    forged_downs_change_nothing(&lab, &uplink, &stranger, ["down-zero", "admindown-zero"], &before);
    assert!(log_lines(&lab, "BFD Up -> Down").is_empty(), "{}", lab.dump_logs());

    // The flood: from the stranger's own address (the kernel drops it before any thread
    // wakes), and forged as the peer's with random and zero discriminators, all at once.
    let flood_start = std::time::Instant::now();
    let floods: Vec<_> = [("10.0.1.66", "mixed"), ("10.0.1.1", "mixed")]
        .into_iter()
        .map(|(src, kind)| {
            let ns = stranger.clone();
            std::thread::spawn(move || spoof(&ns, src, kind, 40_000, 3.0))
        })
        .collect();
    let mut samples = 0;
    while floods.iter().any(|f| !f.is_finished()) {
        let p = bfd_peer(&uplink, "10.0.1.1").unwrap();
        assert_eq!(p["status"], "up", "during the flood: {p}\n{}", lab.dump_logs());
        assert_eq!(p["detection-time"], before["detection-time"], "{p}");
        samples += 1;
        std::thread::sleep(Duration::from_millis(100));
    }
    let total: u64 = floods.into_iter().map(|f| f.join().unwrap()).sum();
    let took = flood_start.elapsed();
    eprintln!("flood: {total} packets in {took:?}, {samples} looks at the session, all Up");
    assert!(total > 10_000, "the flood was too small to mean anything: {total}");
    std::thread::sleep(Duration::from_millis(500));
    let after = bfd_peer(&uplink, "10.0.1.1").unwrap();
    for key in ["status", "session-down", "detection-time", "remote-id", "remote-detect-multiplier"]
    {
        assert_eq!(after[key], before[key], "{key} changed: {before} -> {after}");
    }
    assert!(bird_bfd_up(&bird), "{}", bird.birdc("show bfd sessions"));
    assert_eq!(bgp_state(&uplink, "10.0.1.1"), "Established");
    // A handful of summary lines, not one per packet.
    let noisy: Vec<String> = log_lines(&lab, "BFD packet")
        .into_iter()
        .filter(|l| l.contains("10.0.1.1") || l.contains("10.0.1.66"))
        .collect();
    assert!(noisy.len() <= 6, "{} lines about the flood:\n{}", noisy.len(), noisy.join("\n"));
    // Forged packets never took the peer's own packets' place in the receive queue.
    let crowded = log_lines(&lab, "receive queue full");
    assert!(crowded.is_empty(), "the flood filled the queue:\n{}", crowded.join("\n"));
    eprintln!("{}", noisy.join("\n"));
    // The forged flood did reach the session (a third of it says Down with discriminator 0),
    // which discarded it.
    let discarded = after["control-packet-discarded"].as_u64().unwrap() - discarded_before;
    assert!(discarded > 1000, "only {discarded} forged packets reached the session: {after}");
}

/// The forged flood's target rate, in packets a second, and the senders that share it (one
/// Python process does not reliably reach it on a busy two-core machine). The senders run at
/// SCHED_FIFO priority 10: paced, they take only what the rate costs, and the machine's other
/// work (builds, other tests) does not hold the flood below its rate; uplink's BFD threads and
/// BIRD (priority 40) still run first.
const FLOOD_RATE: u32 = 50_000;
const FLOOD_SENDERS: u32 = 2;
const FLOOD_SECONDS: u32 = 4;
/// The share of [`FLOOD_RATE`] the senders must reach for the test to mean anything.
const FLOOD_RATE_FRACTION: f64 = 0.8;

/// RFC 5880 §6.8.6 demultiplexing holds for an authenticated session too (keyed SHA1, RFC
/// 5880 §6.7.4, against BIRD): while it is Up, a packet without its discriminator is
/// discarded whatever authentication section it carries, in the receive thread, before the
/// queue and before any digest is computed. Forged Downs and AdminDowns with made-up digests
/// change nothing, and a forged zero-discriminator flood at 50,000 packets a second leaves
/// the session Up throughout (looked at every 100 ms), with the same detection time, BIRD's
/// side Up, BGP Established and no packet of the peer's crowded out of the receive queue.
#[test]
fn forged_authenticated_flood_leaves_an_authenticated_session_up() {
    let _serial = one_at_a_time();
    require_tool("bird");
    require_tool("python3");
    require_tool("chrt");
    let (mut lab, node, peer_ns, stranger) = shared_segment("bfdauthflood");
    let bird_auth = r#"authentication keyed sha1; password "flood-key" { id 1; };"#;
    let bird = Bird::start(
        &mut lab,
        &peer_ns,
        &bird_bfd_conf("10.0.1.1", 65102, "10.0.1.2", 100, bird_auth),
    );
    keep_bird_on_time(&lab, &bird);
    let plain = uplink_config("10.0.1.1", 65102, 100);
    let config = plain.replace(
        "detect_multiplier = 3\n",
        "detect_multiplier = 3\n\
         authentication = { type = \"keyed-sha1\", key_id = 1, password = \"flood-key\" }\n",
    );
    assert_ne!(config, plain);
    let uplink = Uplink::start(&mut lab, &node, "uplink", &config);
    wait_both_up(&lab, &uplink, "10.0.1.1", || bird_bfd_up(&bird) && bird.established("uplink"));
    let before = wait_for("negotiated 100 ms timers", Duration::from_secs(10), || {
        let p = bfd_peer(&uplink, "10.0.1.1")?;
        (p["detection-time"] == 300).then_some(p.clone()).ok_or(format!("{p}"))
    });
    assert_eq!(before["authentication-type"], "keyed-sha1", "{before}");
    assert_eq!(before["control-packet-discarded"], 0, "{before}");

    // Forged Down and AdminDown with Your Discriminator 0 and a keyed SHA1 section with a
    // made-up digest: discarded in the session's name, nothing changes.
    let kinds = ["auth-down-zero", "auth-admindown-zero"];
    forged_downs_change_nothing(&lab, &uplink, &stranger, kinds, &before);
    // Dropped for naming no session, not for a wrong digest: no forged digest was computed.
    let unhashed = log_lines(&lab, "with Your Discriminator 0 while Up");
    assert!(!unhashed.is_empty(), "{}", lab.dump_logs());
    let hashed = log_lines(&lab, "authentication failed");
    assert!(hashed.is_empty(), "forged packets reached the digest check:\n{}", hashed.join("\n"));

    // The flood: forged as the peer's, zero discriminator, keyed SHA1 sections, paced at
    // FLOOD_RATE between the senders for FLOOD_SECONDS.
    let per_sender = FLOOD_RATE / FLOOD_SENDERS;
    let floods: Vec<_> = (0..FLOOD_SENDERS)
        .map(|_| {
            let ns = stranger.clone();
            std::thread::spawn(move || {
                let rate = per_sender.to_string();
                let count = per_sender * FLOOD_SECONDS;
                let extra = ["--rate", rate.as_str()];
                let prefix = ["chrt", "-f", "10"];
                spoof_with(
                    &ns,
                    &prefix,
                    "10.0.1.1",
                    "auth-zero",
                    count,
                    FLOOD_SECONDS as f32,
                    &extra,
                )
            })
        })
        .collect();
    // A look every 100 ms on a fixed clock (a slow look delays the next tick, not all later
    // ones); the longest gap between two is reported.
    let (flood_start, tick) = (Instant::now(), Duration::from_millis(100));
    let (mut samples, mut last, mut longest) = (0u32, Instant::now(), Duration::ZERO);
    while floods.iter().any(|f| !f.is_finished()) {
        let p = bfd_peer(&uplink, "10.0.1.1").unwrap();
        assert_eq!(p["status"], "up", "during the flood: {p}\n{}", lab.dump_logs());
        assert_eq!(p["detection-time"], before["detection-time"], "{p}");
        samples += 1;
        longest = longest.max(last.elapsed());
        last = Instant::now();
        let next = flood_start + tick * samples;
        std::thread::sleep(next.saturating_duration_since(Instant::now()));
    }
    let reports: Vec<Value> = floods.into_iter().map(|f| f.join().unwrap()).collect();
    let total: u64 = reports.iter().map(|r| r["sent"].as_u64().unwrap()).sum();
    let seconds = reports.iter().map(|r| r["seconds"].as_f64().unwrap()).fold(0.0, f64::max);
    let rate = total as f64 / seconds;
    eprintln!(
        "authenticated flood: {total} packets in {seconds:.2} s = {rate:.0}/s (target \
         {FLOOD_RATE}/s, senders {reports:?})"
    );
    assert!(
        rate >= FLOOD_RATE_FRACTION * f64::from(FLOOD_RATE),
        "the senders reached {rate:.0} packets/s, below {FLOOD_RATE_FRACTION} of {FLOOD_RATE}/s: \
         the test measured a smaller flood than it claims"
    );
    // A look is a CLI call answered by the daemon's ordinary (not real-time) threads: on an
    // overloaded machine they come 0.5 s apart rather than 0.1 s. A flap between two looks
    // would still show in `session-down`, compared below.
    eprintln!("{samples} looks at the session, at most {longest:?} apart");
    assert!(samples >= FLOOD_SECONDS * 2, "only {samples} looks in {seconds:.1} s");
    std::thread::sleep(Duration::from_millis(500));
    let after = bfd_peer(&uplink, "10.0.1.1").unwrap();
    for key in ["status", "session-down", "detection-time", "remote-id", "remote-detect-multiplier"]
    {
        assert_eq!(after[key], before[key], "{key} changed: {before} -> {after}");
    }
    assert!(bird_bfd_up(&bird), "{}", bird.birdc("show bfd sessions"));
    assert!(bird.established("uplink"), "{}", bird.birdc("show protocols"));
    assert_eq!(bgp_state(&uplink, "10.0.1.1"), "Established");
    let crowded = log_lines(&lab, "receive queue full");
    assert!(crowded.is_empty(), "the flood filled the queue:\n{}", crowded.join("\n"));
    let hashed = log_lines(&lab, "authentication failed");
    assert!(hashed.is_empty(), "forged packets reached the digest check:\n{}", hashed.join("\n"));
    // The receive thread discarded the flood in the session's name (the kernel may drop a
    // few when the socket's buffer is full), and said so in a few summary lines.
    let discarded = after["control-packet-discarded"].as_u64().unwrap() - 10;
    eprintln!("discarded in the session's name: {discarded} of {total}");
    assert!(discarded * 10 >= total * 9, "only {discarded} of {total} were counted: {after}");
    let noisy: Vec<String> =
        log_lines(&lab, "BFD packet").into_iter().filter(|l| l.contains("10.0.1.1")).collect();
    assert!(noisy.len() <= 6, "{} lines about the flood:\n{}", noisy.len(), noisy.join("\n"));
    eprintln!("{}", noisy.join("\n"));
}
