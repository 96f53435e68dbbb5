//! FRR's JSON, key by key: one ToR (FRR 8.4) and one node, the node first FRR 8.4 and then
//! uplink with the same sessions (IPv4 with BFD and TCP-MD5, IPv6) and the same prefixes.
//! What `vtysh -c` prints on the FRR node and what `uplink vtysh -c` prints on the uplink node
//! for the same command must have FRR's keys (less a listed few that are FRR's internals) and,
//! where the session is the same, the same values. uplink's session with the ToR comes from
//! conf.d manifests: an FRRConfiguration whose neighbor's `passwordSecret` names a `Secret`.

mod common;
use common::*;
use serde_json::Value;
use std::collections::BTreeSet;
use std::time::Duration;

const UP: Duration = Duration::from_secs(60);
const PASSWORD: &str = "tor-md5-key";

const TOR: &str = "
frr defaults datacenter
hostname tor
ip route 192.0.2.0/24 blackhole
ipv6 route 2001:db8:2::/64 blackhole
bfd
 profile tor
  receive-interval 300
  transmit-interval 300
router bgp 64512
 bgp router-id 10.0.1.1
 no bgp ebgp-requires-policy
 no bgp default ipv4-unicast
 neighbor 10.0.1.2 remote-as 64513
 neighbor 10.0.1.2 password tor-md5-key
 neighbor 10.0.1.2 bfd
 neighbor 10.0.1.2 timers connect 1
 neighbor fd00:1::2 remote-as 64513
 neighbor fd00:1::2 timers connect 1
 address-family ipv4 unicast
  redistribute static
  neighbor 10.0.1.2 activate
 exit-address-family
 address-family ipv6 unicast
  redistribute static
  neighbor fd00:1::2 activate
 exit-address-family
";

/// The node as FRR: what uplink's manifests below say, in frr.conf. uplink does not send a
/// peer back the routes it learned from it; FRR does unless filtered, hence the route maps.
const NODE_FRR: &str = "
frr defaults datacenter
hostname node
ip route 10.99.0.0/24 blackhole
ip route 10.99.1.0/24 blackhole
ipv6 route 2001:db8:99::/64 blackhole
router bgp 64513
 bgp router-id 10.0.1.2
 no bgp ebgp-requires-policy
 no bgp default ipv4-unicast
 bgp bestpath as-path multipath-relax
 neighbor 10.0.1.1 remote-as 64512
 neighbor 10.0.1.1 password tor-md5-key
 neighbor 10.0.1.1 bfd
 neighbor 10.0.1.1 timers connect 1
 neighbor fd00:1::1 remote-as 64512
 neighbor fd00:1::1 timers connect 1
 address-family ipv4 unicast
  network 10.99.0.0/24
  network 10.99.1.0/24
  neighbor 10.0.1.1 activate
  neighbor 10.0.1.1 route-map OWN4 out
 exit-address-family
 address-family ipv6 unicast
  network 2001:db8:99::/64
  neighbor fd00:1::1 activate
  neighbor fd00:1::1 route-map OWN6 out
 exit-address-family
ip prefix-list OWN4 seq 5 permit 10.99.0.0/16 le 24
ipv6 prefix-list OWN6 seq 5 permit 2001:db8:99::/64
route-map OWN4 permit 10
 match ip address prefix-list OWN4
route-map OWN6 permit 10
 match ipv6 address prefix-list OWN6
";

const NODE_UPLINK: &str = "[node]\nname = \"node\"\n";

fn node_manifests() -> String {
    let encoded = run(&["sh", "-c", &format!("printf %s '{PASSWORD}' | base64")]);
    format!(
        "apiVersion: v1
kind: Secret
metadata: {{name: tor-password, namespace: frr-k8s-system}}
type: kubernetes.io/basic-auth
data: {{password: {}}}
---
apiVersion: frrk8s.metallb.io/v1beta1
kind: FRRConfiguration
metadata: {{name: node, namespace: frr-k8s-system}}
spec:
  bgp:
    bfdProfiles:
    - {{name: tor, receiveInterval: 300, transmitInterval: 300, detectMultiplier: 3}}
    routers:
    - asn: 64513
      id: 10.0.1.2
      prefixes: [10.99.0.0/24, 10.99.1.0/24, 2001:db8:99::/64]
      neighbors:
      - address: 10.0.1.1
        asn: 64512
        passwordSecret: {{name: tor-password, namespace: frr-k8s-system}}
        bfdProfile: tor
        holdTime: 9s
        keepaliveTime: 3s
        connectTime: 1s
        toAdvertise: {{allowed: {{mode: all}}}}
        toReceive: {{allowed: {{mode: all}}}}
      - address: fd00:1::1
        asn: 64512
        holdTime: 9s
        keepaliveTime: 3s
        connectTime: 1s
        toAdvertise: {{allowed: {{mode: all}}}}
        toReceive: {{allowed: {{mode: all}}}}
",
        encoded.trim()
    )
}

/// The commands compared, as scripts and frr-k8s's status reader send them.
const COMMANDS: &[&str] = &[
    "show bgp summary json",
    "show bgp vrf default ipv4 unicast summary json",
    "show bgp vrf default neighbors json",
    "show bfd vrf default peers json",
    "show bfd vrf default peers counters json",
    "show bgp ipv4 unicast neighbors 10.0.1.1 advertised-routes json",
    "show bgp ipv6 unicast neighbors fd00:1::1 advertised-routes json",
];

/// FRR keys uplink does not give: FRR's memory and thread internals, update groups, the
/// host name capability uplink does not send, FRR-only knobs (conditional advertisement,
/// roles, connect retry, RTT estimate, echo mode).
const NOT_GIVEN: &[&str] = &[
    "ribMemory",
    "peerMemory",
    "hostname",
    "localRole",
    "remoteRole",
    "bgpTimerLastRead",
    "bgpTimerLastWrite",
    "bgpInUpdateElapsedTimeMsecs",
    "extendedOptionalParametersLength",
    "bgpTimerConfiguredConditionalAdvertisementsSec",
    "minBtwnAdvertisementRunsTimerMsecs",
    "updateGroupId",
    "subGroupId",
    "commAttriSentToNbr",
    "lastResetTimerMsecs",
    "lastResetCode",
    "externalBgpNbrMaxHopsAway",
    "portLocal",
    "nexthop",
    "nexthopGlobal",
    "nexthopLocal",
    "bgpConnection",
    "connectRetryTimer",
    "estimatedRttInMsecs",
    "readThread",
    "writeThread",
    "advHostName",
    "advDomainName",
    "stalePathTimer",
    "timers.stalePathTimer",
    "interface",
    "rtt-min",
    "rtt-avg",
    "rtt-max",
    "remote-echo-receive-interval",
    "echo-receive-interval",
    "echo-transmit-interval",
    "zebra-notifications",
    // uplink does not advertise ADD-PATH, so the peer's is `rxReceived` (checked below).
    "rxAdvertisedAndReceived",
    // The route maps the FRR node needs to send what uplink sends.
    "outboundPathPolicyConfig",
    "routeMapForOutgoingAdvertisements",
    // FRR's `network` routes carry MED 0; uplink's own routes carry none.
    "metric",
    "ipv4Unicast.timers",
    "ipv6Unicast.timers",
];

/// Values that are the same session's on both nodes: state, counts, negotiated settings.
const SAME_VALUE: &[&str] = &[
    "remoteAs",
    "localAs",
    "routerId",
    "as",
    "vrfName",
    "peerCount",
    "failedPeers",
    "displayedPeers",
    "totalPeers",
    "dynamicPeers",
    "multiPathRelax",
    "state",
    "peerState",
    "pfxRcd",
    "pfxSnt",
    "idType",
    "nbrExternalLink",
    "bgpVersion",
    "remoteRouterId",
    "localRouterId",
    "bgpState",
    "bgpTimerHoldTimeMsecs",
    "bgpTimerKeepAliveIntervalMsecs",
    "4byteAs",
    "routeRefresh",
    "acceptedPrefixCounter",
    "sentPrefixCounter",
    "hostLocal",
    "hostForeign",
    "rBit",
    "receivedRestartTimer",
    "remoteGrMode",
    "endOfRibSend",
    "endOfRibRecv",
    "status",
    "detectMultiplier",
    "rxMinInterval",
    "txMinInterval",
    "multihop",
    "peer",
    "local",
    "vrf",
    "receive-interval",
    "transmit-interval",
    "detect-multiplier",
    "remote-receive-interval",
    "remote-transmit-interval",
    "remote-detect-multiplier",
    "diagnostic",
    "remote-diagnostic",
    "passive-mode",
    "addrPrefix",
    "prefixLen",
    "network",
    "nextHop",
    "nextHopGlobal",
    "weight",
    "path",
    "bgpOriginCode",
    "totalPrefixCounter",
    "filteredPrefixCounter",
    "defaultLocPrf",
    "localAS",
    "bgpLocalRouterId",
];

/// Walks FRR's answer: every key must be in uplink's (unless listed in [`NOT_GIVEN`]), with a
/// value of the same JSON type, equal where [`SAME_VALUE`] lists the key.
fn compare(path: &str, frr: &Value, ours: &Value, problems: &mut Vec<String>) {
    match (frr, ours) {
        (Value::Object(f), Value::Object(o)) => {
            for (key, fv) in f {
                let here = format!("{path}.{key}");
                let listed = |entry: &&str| {
                    *entry == key || (entry.contains('.') && here.ends_with(&format!(".{entry}")))
                };
                if NOT_GIVEN.iter().any(listed) {
                    continue;
                }
                match o.get(key) {
                    None => problems.push(format!("{here}: missing (FRR: {fv})")),
                    Some(ov) => {
                        if SAME_VALUE.contains(&key.as_str()) && !fv.is_object() && fv != ov {
                            problems.push(format!("{here}: {ov} where FRR says {fv}"));
                        }
                        compare(&here, fv, ov, problems);
                    }
                }
            }
        }
        (Value::Array(f), Value::Array(o)) => {
            if f.len() != o.len() {
                problems.push(format!("{path}: {} entries where FRR has {}", o.len(), f.len()));
            }
            for (i, (fv, ov)) in f.iter().zip(o).enumerate() {
                compare(&format!("{path}[{i}]"), fv, ov, problems);
            }
        }
        (f, o) => {
            let kind = |v: &Value| match v {
                Value::Null => "null",
                Value::Bool(_) => "bool",
                Value::Number(_) => "number",
                Value::String(_) => "string",
                Value::Array(_) => "array",
                Value::Object(_) => "object",
            };
            if kind(f) != kind(o) {
                problems.push(format!(
                    "{path}: a {} ({o}) where FRR has a {} ({f})",
                    kind(o),
                    kind(f)
                ));
            }
        }
    }
}

fn answers(mut ask: impl FnMut(&str) -> String) -> Vec<Value> {
    COMMANDS
        .iter()
        .map(|c| {
            let text = ask(c);
            serde_json::from_str(&text).unwrap_or_else(|e| panic!("{c}: not JSON ({e}): {text}"))
        })
        .collect()
}

/// Both sessions up with every prefix exchanged, and BFD up, as the node reports it.
fn settled(summary: &Value, bfd: &Value) -> Result<(), String> {
    let v4 = &summary["ipv4Unicast"]["peers"]["10.0.1.1"];
    let v6 = &summary["ipv6Unicast"]["peers"]["fd00:1::1"];
    let ok = v4["state"] == "Established"
        && v6["state"] == "Established"
        && v4["pfxSnt"] == 2
        && v6["pfxSnt"] == 1
        && v4["pfxRcd"] == 1
        && v6["pfxRcd"] == 1
        && bfd[0]["status"] == "up";
    ok.then_some(()).ok_or(format!("{summary}\n{bfd}"))
}

#[test]
fn uplink_answers_vtysh_as_frr_does() {
    require_tool("/usr/lib/frr/bfdd");
    require_tool("/usr/lib/frr/staticd");
    let mut lab = Lab::new("frr-json");
    let tor_ns = lab.ns("tor");
    let node = lab.ns("node");
    let (tor_if, node_if) = lab.link(
        &tor_ns,
        &["10.0.1.1/24", "fd00:1::1/64"],
        &node,
        &["10.0.1.2/24", "fd00:1::2/64"],
    );
    // Both ends have their IPv6 link-local address before a speaker starts: FRR resets an IPv6
    // session that came up before it had one (its next hop changes), which would count a drop
    // on one run and not on the next.
    for (ns, ifname) in [(&tor_ns, &tor_if), (&node, &node_if)] {
        wait_for(&format!("{ifname}'s link-local address"), UP, || {
            let (_, out) =
                ns.try_run(&["ip", "-6", "addr", "show", "dev", ifname, "scope", "link"]);
            let ready = out.contains("fe80::") && !out.contains("tentative");
            ready.then_some(()).ok_or(out)
        });
    }
    let tor = Frr::start_daemons(&mut lab, &tor_ns, TOR, &["zebra", "staticd", "bfdd", "bgpd"]);

    // The node as FRR.
    let frr = Frr::start_daemons(&mut lab, &node, NODE_FRR, &["zebra", "staticd", "bfdd", "bgpd"]);
    // FRR's answers are taken with its sessions and BFD up. FRR's own pair can lose its BFD
    // session under load (a 0.9 s detection time), also after it settled once: answers taken
    // then are taken again once it is back.
    let from_frr = wait_for("the FRR node's answers with its sessions and BFD up", UP, || {
        settled(&frr.json("show bgp summary json"), &frr.json("show bfd peers json"))?;
        // Keepalives and BFD settle; counts stop moving.
        std::thread::sleep(Duration::from_secs(2));
        let taken = answers(|c| frr.vtysh(c));
        let answer = |command: &str| {
            let index = COMMANDS.iter().position(|c| *c == command);
            index.and_then(|i| taken.get(i)).cloned().unwrap_or_default()
        };
        settled(&answer("show bgp summary json"), &answer("show bfd vrf default peers json"))?;
        Ok(taken)
    });
    lab.stop(&frr.label);
    // The ToR has seen the FRR node go, BGP and BFD, before uplink comes: a BFD Down of the
    // old session must not end uplink's new one (its counts would differ from FRR's).
    wait_for("the ToR to see the FRR node gone", UP, || {
        let summary = tor.json("show bgp summary json");
        let bfd = tor.json("show bfd peers json");
        let bgp_down = ["ipv4Unicast", "ipv6Unicast"].iter().all(|f| {
            summary[f]["peers"]
                .as_object()
                .into_iter()
                .flatten()
                .all(|(_, p)| p["state"] != "Established")
        });
        let bfd_down = bfd.as_array().into_iter().flatten().all(|p| p["status"] != "up");
        (bgp_down && bfd_down).then_some(()).ok_or(format!("{summary}\n{bfd}"))
    });

    // The node as uplink, its sessions from conf.d manifests.
    std::fs::create_dir_all(lab.path("uplink/conf.d")).unwrap();
    std::fs::write(lab.path("uplink/conf.d/node.yaml"), node_manifests()).unwrap();
    let uplink = Uplink::start(&mut lab, &node, "uplink", NODE_UPLINK);
    let vtysh = |c: &str| uplink.cli(&["vtysh", "-c", c]).unwrap_or_else(|e| panic!("{c}: {e}"));
    let try_json = |c: &str| -> Result<Value, String> {
        let text = uplink.cli(&["vtysh", "-c", c])?;
        serde_json::from_str(&text).map_err(|e| format!("{c}: {e}: {text}"))
    };
    wait_for("uplink's sessions and BFD", UP, || {
        settled(&try_json("show bgp summary json")?, &try_json("show bfd peers json")?)
    });
    std::thread::sleep(Duration::from_secs(2));
    let from_uplink = answers(vtysh);

    let mut problems = Vec::new();
    for ((command, frr), ours) in COMMANDS.iter().zip(&from_frr).zip(&from_uplink) {
        let mut here = Vec::new();
        compare("", frr, ours, &mut here);
        problems.extend(here.into_iter().map(|p| format!("{command}: {p}")));
    }
    assert!(
        problems.is_empty(),
        "uplink's answers differ from FRR 8.4's:\n{}\n\nFRR:\n{from_frr:#?}\n\nuplink:\n{from_uplink:#?}",
        problems.join("\n")
    );

    // The connection counts are history: FRR's start can end a first session (a collision both
    // sides connected into, a BFD Down right after Established), so they are compared as the
    // sessions up now, and uplink's, started once, must be exactly one established, none dropped.
    for (index, peers) in [(0, "/ipv4Unicast/peers"), (0, "/ipv6Unicast/peers"), (2, "")] {
        let (frr, ours) = (&from_frr[index], &from_uplink[index]);
        for (address, peer) in ours.pointer(peers).and_then(Value::as_object).into_iter().flatten()
        {
            let count = |v: &Value, key: &str| v[key].as_u64().unwrap_or(u64::MAX);
            assert_eq!(
                (count(peer, "connectionsEstablished"), count(peer, "connectionsDropped")),
                (1, 0),
                "{address}: {peer:#}"
            );
            let theirs = &frr.pointer(peers).unwrap()[address];
            let up_now =
                count(theirs, "connectionsEstablished") - count(theirs, "connectionsDropped");
            assert_eq!(up_now, 1, "FRR's {address}: {theirs:#}");
        }
    }
    // BFD's session counts are history too (FRR's pair can lose its session once under load, a
    // 0.9 s detection time): uplink's must be one up and none down; FRR's must be up now.
    let (frr_bfd, our_bfd) = (&from_frr[4], &from_uplink[4]);
    let bfd_entries = |v: &Value| v.as_array().map_or(0, Vec::len);
    assert_eq!(bfd_entries(our_bfd), 1, "{our_bfd:#}");
    assert_eq!(bfd_entries(frr_bfd), 1, "{frr_bfd:#}");
    let count = |v: &Value, key: &str| v[0][key].as_u64().unwrap_or(u64::MAX);
    assert_eq!(
        (count(our_bfd, "session-up"), count(our_bfd, "session-down")),
        (1, 0),
        "uplink's BFD: {our_bfd:#}"
    );
    assert_eq!(
        count(frr_bfd, "session-up").checked_sub(count(frr_bfd, "session-down")),
        Some(1),
        "FRR's BFD: {frr_bfd:#}"
    );

    let caps = &from_uplink[2]["10.0.1.1"]["neighborCapabilities"];
    assert_eq!(caps["addPath"]["ipv4Unicast"]["rxReceived"], true, "{caps:#}");

    // The session with the ToR is TCP-MD5: the key from the Secret is on uplink's socket
    // (the ToR would refuse the segments otherwise) and never printed.
    let neighbor: Value = serde_json::from_str(&vtysh("show bgp neighbors 10.0.1.1 json")).unwrap();
    assert_eq!(neighbor["10.0.1.1"]["bgpState"], "Established");
    // uplink's own log: the section of the lab's logs under its label (FRR's logs quote its
    // own config lines).
    let logs = lab.dump_logs();
    let uplink_log = logs
        .split("\n----- ")
        .filter(|section| section.starts_with("uplink "))
        .collect::<Vec<_>>()
        .join("\n");
    assert!(uplink_log.contains("session established"), "no uplink log in:\n{logs}");
    let everything = [
        vtysh("show bgp neighbors 10.0.1.1 json"),
        uplink.cli(&["show", "running-config"]).unwrap(),
        uplink.cli(&["show", "running-config", "--json"]).unwrap(),
        uplink_log,
    ];
    for text in everything {
        assert!(!text.contains(PASSWORD), "the TCP-MD5 key was printed:\n{text}");
    }

    // The text forms answer too, and what is not a command is named.
    let text = vtysh("show ip bgp summary");
    assert!(text.contains("10.0.1.1") && text.contains("IPv4 Unicast"), "{text}");
    let keys: BTreeSet<String> = serde_json::from_str::<Value>(&vtysh("show bgp vrf all json"))
        .unwrap()
        .as_object()
        .unwrap()
        .keys()
        .cloned()
        .collect();
    assert_eq!(keys, BTreeSet::from(["default".to_string()]));
    let wrong = uplink.cli(&["vtysh", "-c", "show bgp sumary json"]).unwrap_err();
    assert!(wrong.contains("unknown command at `sumary`"), "{wrong}");
}
