//! BFD in network namespaces: uplink's BFD against FRR bfdd and BIRD 2, coupled to BGP.
//! Silencing the peer's BFD (nftables drop of its UDP 3784 output) must take BFD Down within
//! the detection time and BGP with it (Cease subcode 10, "BFD Down", RFC 9384), hold BGP down
//! while BFD is Down, and bring both back when the packets flow again.

mod common;
use common::*;
use serde_json::Value;
use std::time::{Duration, Instant};

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
