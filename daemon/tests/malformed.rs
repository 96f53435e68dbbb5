//! RFC 7606 and known-CVE inputs sent by a raw BGP speaker (tests/tools/raw_bgp.py) while a
//! healthy FRR session runs beside it: uplink answers each as the RFC says, never panics, and
//! the other session never notices.

mod common;
use common::*;
use std::time::Duration;

const UP: Duration = Duration::from_secs(45);

fn header(kind: u8, body: &[u8]) -> Vec<u8> {
    let mut m = vec![0xff; 16];
    m.extend_from_slice(&((19 + body.len()) as u16).to_be_bytes());
    m.push(kind);
    m.extend_from_slice(body);
    m
}

fn attr(flags: u8, code: u8, value: &[u8]) -> Vec<u8> {
    let mut a = vec![flags, code];
    if value.len() > 255 {
        a[0] |= 0x10;
        a.extend_from_slice(&(value.len() as u16).to_be_bytes());
    } else {
        a.push(value.len() as u8);
    }
    a.extend_from_slice(value);
    a
}

fn update(withdrawn: &[u8], attrs: &[Vec<u8>], nlri: &[u8]) -> String {
    let attrs: Vec<u8> = attrs.concat();
    let mut body = (withdrawn.len() as u16).to_be_bytes().to_vec();
    body.extend_from_slice(withdrawn);
    body.extend_from_slice(&(attrs.len() as u16).to_be_bytes());
    body.extend_from_slice(&attrs);
    body.extend_from_slice(nlri);
    hex(&header(2, &body))
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn origin() -> Vec<u8> {
    attr(0x40, 1, &[0])
}
fn as_path(asns: &[u32]) -> Vec<u8> {
    let mut v = vec![];
    for chunk in asns.chunks(255) {
        v.push(2);
        v.push(chunk.len() as u8);
        for a in chunk {
            v.extend_from_slice(&a.to_be_bytes());
        }
    }
    attr(0x40, 2, &v)
}
fn next_hop(bytes: &[u8]) -> Vec<u8> {
    attr(0x40, 3, bytes)
}
fn nlri(third: u8) -> Vec<u8> {
    vec![24, 198, 51, third]
}
fn prefix(third: u8) -> String {
    format!("198.51.{third}.0/24")
}

struct Bench {
    lab: Lab,
    peer_ns: Ns,
    uplink: Uplink,
    frr: Frr,
}

fn bench() -> Bench {
    let mut lab = Lab::new("malformed");
    let node = lab.ns("node");
    let peer_ns = lab.ns("raw");
    let frr_ns = lab.ns("frr");
    lab.link(&node, &["10.0.1.2/24"], &peer_ns, &["10.0.1.1/24"]);
    lab.link(&node, &["10.0.2.2/24"], &frr_ns, &["10.0.2.1/24"]);
    let frr = Frr::start(
        &mut lab,
        &frr_ns,
        "frr defaults datacenter\nrouter bgp 65103\n bgp router-id 10.0.2.1\n no bgp ebgp-requires-policy\n \
         no bgp network import-check\n neighbor 10.0.2.2 remote-as 65801\n neighbor 10.0.2.2 timers connect 1\n \
         address-family ipv4 unicast\n  network 203.0.113.0/24\n exit-address-family\n",
    );
    let config = r#"
[[bgp.routers]]
asn = 65801
id = "10.0.1.2"

[[bgp.routers.neighbors]]
address = "10.0.1.1"
asn = 65102
passive = true
to_receive = { allowed = { mode = "all" } }

[[bgp.routers.neighbors]]
address = "10.0.2.1"
asn = 65103
connect_time = "1s"
to_receive = { allowed = { mode = "all" } }
"#;
    let uplink = Uplink::start(&mut lab, &node, "uplink", config);
    wait_for("FRR session up", UP, || {
        let s = uplink.peer_state("ipv4Unicast", "10.0.2.1")?;
        (s == "Established").then_some(()).ok_or(s)
    });
    wait_for("FRR's route", UP, || {
        let hops = uplink.route_nexthops("203.0.113.0/24")?;
        (!hops.is_empty()).then_some(()).ok_or_else(|| "not yet".to_string())
    });
    Bench { lab, peer_ns, uplink, frr }
}

/// Runs the raw speaker with `payloads`; `during` is called while its session is up.
fn exchange(b: &Bench, payloads: &[String], during: impl FnOnce()) -> Vec<serde_json::Value> {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/tools/raw_bgp.py");
    let ns = b.peer_ns.clone();
    let args: Vec<String> = payloads.to_vec();
    let handle = std::thread::spawn(move || {
        let mut cmd = vec!["python3", script, "10.0.1.2", "65102", "10.0.1.1", "4"];
        cmd.extend(args.iter().map(String::as_str));
        ns.run(&cmd)
    });
    std::thread::sleep(Duration::from_millis(2500));
    during();
    let out = handle.join().expect("raw speaker thread");
    let lines: Vec<serde_json::Value> =
        out.lines().filter_map(|l| serde_json::from_str(l).ok()).collect();
    assert!(
        lines.first().map(|l| l["established"] == true).unwrap_or(false),
        "raw speaker never established: {out}\n{}",
        b.lab.dump_logs()
    );
    lines
}

fn notification(lines: &[serde_json::Value]) -> Option<(u64, u64)> {
    lines
        .iter()
        .find(|l| l["type"] == 3)
        .map(|l| (l["code"].as_u64().unwrap(), l["subcode"].as_u64().unwrap()))
}

fn has(b: &Bench, p: &str) -> bool {
    b.uplink.route_nexthops(p).map(|h| !h.is_empty()).unwrap_or(false)
}

fn others_unharmed(b: &Bench) {
    assert_eq!(
        b.uplink.peer_state("ipv4Unicast", "10.0.2.1").unwrap(),
        "Established",
        "{}",
        b.lab.dump_logs()
    );
    assert!(has(b, "203.0.113.0/24"), "the FRR session's route must stay");
    assert_eq!(b.frr.peer_state("ipv4Unicast", "10.0.2.2"), "Established");
}

/// A well-formed UPDATE for 198.51.`third`.0/24 from the raw speaker.
fn good(third: u8) -> String {
    update(&[], &[origin(), as_path(&[65102]), next_hop(&[10, 0, 1, 1])], &nlri(third))
}

/// The raw speaker's session ended without a NOTIFICATION from uplink, the FRR session beside
/// it never noticed, and the daemon still answers.
fn no_reset_and_others_unharmed(b: &Bench, lines: &[serde_json::Value]) {
    assert_eq!(notification(lines), None, "{lines:?}");
    others_unharmed(b);
}

#[test]
fn well_formed_update_is_accepted() {
    let b = bench();
    let lines =
        exchange(&b, &[good(100)], || assert!(has(&b, &prefix(100)), "valid route missing"));
    no_reset_and_others_unharmed(&b, &lines);
}

/// RFC 7606 §3 (d): a missing mandatory NEXT_HOP is treat-as-withdraw, no reset.
#[test]
fn missing_next_hop_is_treat_as_withdraw() {
    let b = bench();
    let missing = update(&[], &[origin(), as_path(&[65102])], &nlri(101));
    let lines =
        exchange(&b, &[good(101), missing], || assert!(!has(&b, &prefix(101)), "withdrawn"));
    no_reset_and_others_unharmed(&b, &lines);
}

/// RFC 7606 §7.3: a NEXT_HOP shorter than 4 octets is treat-as-withdraw.
#[test]
fn short_next_hop_is_treat_as_withdraw() {
    let b = bench();
    let short = update(&[], &[origin(), as_path(&[65102]), next_hop(&[10, 0, 1])], &nlri(102));
    let lines = exchange(&b, &[good(102), short], || assert!(!has(&b, &prefix(102))));
    no_reset_and_others_unharmed(&b, &lines);
}

/// The longest AS_PATH a 4096-octet message can carry (1000 ASNs) is accepted and shown.
#[test]
fn longest_as_path_is_handled() {
    let b = bench();
    let long: Vec<u32> = (0..1000).map(|i| 65102 + (i % 5)).collect();
    let lines = exchange(
        &b,
        &[update(&[], &[origin(), as_path(&long), next_hop(&[10, 0, 1, 1])], &nlri(103))],
        || {
            assert!(has(&b, &prefix(103)));
            let text = b.uplink.cli(&["show", "bgp", "routes", &prefix(103)]).unwrap();
            assert!(text.contains("65102 65103"), "{text}");
        },
    );
    no_reset_and_others_unharmed(&b, &lines);
}

/// RFC 6793 §4.1: AS4_PATH on a 4-octet session (here even before AS_PATH) is ignored and the
/// route kept.
#[test]
fn as4_path_on_a_four_octet_session_is_ignored() {
    let b = bench();
    let as4 = attr(0xc0, 17, &[2, 1, 0, 0, 0xfe, 0x4e]);
    let lines = exchange(
        &b,
        &[update(&[], &[origin(), as4, as_path(&[65102]), next_hop(&[10, 0, 1, 1])], &nlri(104))],
        || assert!(has(&b, &prefix(104))),
    );
    no_reset_and_others_unharmed(&b, &lines);
}

/// An unknown attribute flagged well-known: treat-as-withdraw (RFC 7606 §3 g is about
/// optional ones; a well-known one we do not know is a malformed attribute), no reset.
#[test]
fn unknown_well_known_attribute_is_treat_as_withdraw() {
    let b = bench();
    let unknown = attr(0x40, 99, &[1, 2, 3]);
    let lines = exchange(
        &b,
        &[
            good(105),
            update(
                &[],
                &[origin(), as_path(&[65102]), next_hop(&[10, 0, 1, 1]), unknown],
                &nlri(105),
            ),
        ],
        || assert!(!has(&b, &prefix(105))),
    );
    no_reset_and_others_unharmed(&b, &lines);
}

/// RFC 7606 §7.11: MP_REACH_NLRI whose next-hop length runs past the attribute: the NLRI
/// cannot be located, so the session is reset with an UPDATE Message Error (IPv4 unicast, the
/// family this session negotiated: other families are ignored).
#[test]
fn mp_reach_overrun_resets_with_update_message_error() {
    let b = bench();
    let mp = attr(0x80, 14, &[0, 1, 1, 200, 10, 0]);
    let lines = exchange(&b, &[update(&[], &[origin(), as_path(&[65102]), mp], &[])], || {});
    assert_eq!(notification(&lines).map(|n| n.0), Some(3), "{lines:?}");
    others_unharmed(&b);
}

/// RFC 7606 §5.1 / RFC 4271 §6.3: Withdrawn Routes Length overrunning the message resets the
/// session with Malformed Attribute List.
#[test]
fn withdrawn_length_overrun_resets_with_malformed_attribute_list() {
    let b = bench();
    let mut body = vec![0x10, 0x00, 24, 198];
    body.extend_from_slice(&[0, 0]);
    let lines = exchange(&b, &[hex(&header(2, &body))], || {});
    assert_eq!(notification(&lines), Some((3, 1)), "{lines:?}");
    others_unharmed(&b);
}

/// RFC 4271 §6.2 (RFC 5492 leaves malformed capabilities to it): an OPEN whose capability
/// length runs past its optional parameter gets an OPEN Message Error.
#[test]
fn open_with_overrunning_capability_gets_open_message_error() {
    let b = bench();
    let mut open = vec![4, 0xfe, 0x4e, 0, 30, 10, 0, 1, 1];
    open.extend_from_slice(&[4, 2, 2, 1, 40]); // a capability claiming 40 octets in a 2-octet parameter
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/tools/raw_bgp.py");
    let out = b.peer_ns.run(&[
        "python3",
        script,
        "10.0.1.2",
        "65102",
        "10.0.1.1",
        "1",
        &format!("open:{}", hex(&header(1, &open))),
    ]);
    let lines: Vec<serde_json::Value> =
        out.lines().filter_map(|l| serde_json::from_str(l).ok()).collect();
    assert_eq!(notification(&lines).map(|n| n.0), Some(2), "{out}");
    others_unharmed(&b);
    // The FRR session beside it never flapped.
    let summary = b.uplink.json(&["show", "bgp", "summary"]).unwrap();
    assert_eq!(
        summary["ipv4Unicast"]["peers"]["10.0.2.1"]["connectionsEstablished"], 1,
        "{summary:#}"
    );
}
