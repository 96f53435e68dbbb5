use std::net::Ipv6Addr;

use super::super::{load_str, ConfigError};
use super::*;

/// A router (lines 1-2) with one neighbor (lines 4-6); extra neighbor lines start at line 7.
const BASE: &str = "[[bgp.routers]]\nasn = 65801\n\n[[bgp.routers.neighbors]]\naddress = \"172.18.20.1\"\nasn = 65102\n";
const N0: &str = "bgp.routers[0].neighbors[0]";

fn errors(text: &str) -> Vec<ConfigError> {
    load_str("t.toml", text).expect_err("config should be rejected").0
}

/// The only error for `text`, as (line, column, field, message).
fn only_error(text: &str) -> (usize, usize, String, String) {
    let errors = errors(text);
    assert_eq!(errors.len(), 1, "expected one error, got: {errors:#?}");
    let e = errors.into_iter().next().unwrap();
    assert_eq!(e.file, PathBuf::from("t.toml"));
    (e.line, e.column, e.field, e.message)
}

/// `BASE` plus extra neighbor lines; the first extra line is line 7.
fn neighbor_with(extra: &str) -> String {
    format!("{BASE}{extra}\n")
}

fn assert_error(text: &str, line: usize, column: usize, field: &str, message_part: &str) {
    let (l, c, f, m) = only_error(text);
    assert_eq!((l, c, f.as_str()), (line, column, field), "message: {m}");
    assert!(m.contains(message_part), "{m:?} should contain {message_part:?}");
}

fn neighbor(text: &str) -> Neighbor {
    let config = load_str("t.toml", text).unwrap();
    config.bgp.routers[0].neighbors[0].clone()
}

#[test]
fn defaults_are_applied() {
    let config = load_str("t.toml", BASE).unwrap();
    let router = &config.bgp.routers[0];
    assert_eq!((router.asn, router.id, router.vrf.as_str()), (65801, None, ""));
    assert_eq!((router.maximum_paths, router.multipath_relax), (64, true));
    assert!(router.prefixes.is_empty());
    assert_eq!(router.sources, vec![PathBuf::from("t.toml")]);
    let n = &router.neighbors[0];
    assert_eq!(n.address, IpAddr::from([172, 18, 20, 1]));
    assert_eq!(n.remote_asn, RemoteAsn::Fixed(65102));
    assert_eq!(n.port, 179);
    assert_eq!(n.hold_time, Duration::from_secs(90));
    assert_eq!(n.keepalive_time, Duration::from_secs(30));
    assert_eq!(n.connect_time, Duration::from_secs(5));
    assert_eq!((n.ebgp_multihop, n.ttl_security, n.passive), (None, None, false));
    assert_eq!((n.password.as_ref(), n.bfd_profile.as_ref(), n.max_prefixes), (None, None, None));
    assert_eq!(n.families, vec![AddressFamily::Ipv4Unicast]);
    assert_eq!(n.to_advertise, AdvertisePolicy::default());
    assert_eq!(n.to_advertise.mode, AllowMode::Filtered);
    assert_eq!(n.to_receive, ReceivePolicy::default());
    assert!(config.always_block.is_empty());
}

#[test]
fn bfd_profile_defaults() {
    let config = load_str("t.toml", "[[bgp.bfd_profiles]]\nname = \"p\"\n").unwrap();
    let expected = BfdProfile {
        name: "p".into(),
        receive_interval: Duration::from_millis(300),
        transmit_interval: Duration::from_millis(300),
        detect_multiplier: 3,
        echo_interval: Duration::from_millis(50),
        echo_mode: false,
        passive_mode: false,
        minimum_ttl: 254,
        authentication: None,
    };
    assert_eq!(config.bgp.bfd_profiles, vec![expected]);
}

#[test]
fn ipv6_neighbor_defaults_to_ipv6_unicast() {
    let text = "[[bgp.routers]]\nasn = 65801\n[[bgp.routers.neighbors]]\naddress = \"2001:db8::1\"\ndynamic_asn = \"external\"\n";
    let n = neighbor(text);
    assert_eq!(n.address, IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 1)));
    assert_eq!(n.remote_asn, RemoteAsn::External);
    assert_eq!(n.families, vec![AddressFamily::Ipv6Unicast]);
}

#[test]
fn router_asn_rules() {
    assert_error(
        "[[bgp.routers]]\nasn = 0\n",
        2,
        7,
        "bgp.routers[0].asn",
        "valid AS numbers are 1..=4294967295",
    );
    assert_error("[[bgp.routers]]\nasn = 23456\n", 2, 7, "bgp.routers[0].asn", "AS_TRANS");
    assert_error(
        "[[bgp.routers]]\nasn = 4294967296\n",
        2,
        7,
        "bgp.routers[0].asn",
        "expected AS number in 1..=4294967295",
    );
    assert_eq!(
        load_str("t", "[[bgp.routers]]\nasn = 4294967295\n").unwrap().bgp.routers[0].asn,
        u32::MAX
    );
}

#[test]
fn router_id_and_vrf_rules() {
    assert_error(
        "[[bgp.routers]]\nasn = 1\nid = \"fe80::1\"\n",
        3,
        6,
        "bgp.routers[0].id",
        "is not an IPv4 address",
    );
    assert_error(
        "[[bgp.routers]]\nasn = 1\nid = \"0.0.0.0\"\n",
        3,
        6,
        "bgp.routers[0].id",
        "RFC 6286",
    );
    assert_error(
        "[[bgp.routers]]\nasn = 1\nvrf = \"a/b\"\n",
        3,
        7,
        "bgp.routers[0].vrf",
        "at most 15 bytes",
    );
    assert_error(
        "[[bgp.routers]]\nasn = 1\nvrf = \"sixteen-chars-xx\"\n",
        3,
        7,
        "bgp.routers[0].vrf",
        "not a valid VRF",
    );
}

#[test]
fn prefixes_with_host_bits_show_the_corrected_prefix() {
    let text = "[[bgp.routers]]\nasn = 1\nprefixes = [\"10.128.7.0/24\", \"10.128.7.1/24\"]\n";
    assert_error(
        text,
        3,
        30,
        "bgp.routers[0].prefixes[1]",
        "10.128.7.1/24 has host bits set; did you mean 10.128.7.0/24?",
    );
    let text = "[[bgp.routers]]\nasn = 1\nprefixes = [\"2001:db8::1/64\"]\n";
    assert_error(text, 3, 13, "bgp.routers[0].prefixes[0]", "did you mean 2001:db8::/64?");
    let text = "[[bgp.routers]]\nasn = 1\nprefixes = [\"10.0.0.1\"]\n";
    assert_error(text, 3, 13, "bgp.routers[0].prefixes[0]", "write \"10.0.0.1/32\"");
    assert_error(
        "always_block = [\"10.0.0.0/33\"]\n",
        1,
        17,
        "always_block[0]",
        "is not a CIDR prefix",
    );
}

#[test]
fn fib_settings_defaults_ranges_and_reserved_tables() {
    let config = load_str("t", "[[bgp.routers]]\nasn = 1\n").unwrap();
    let router = &config.bgp.routers[0];
    assert_eq!((router.install, router.table, router.metric), (true, None, 20));
    let config =
        load_str("t", "[[bgp.routers]]\nasn = 1\ninstall = false\ntable = 100\nmetric = 0\n")
            .unwrap();
    let router = &config.bgp.routers[0];
    assert_eq!((router.install, router.table, router.metric), (false, Some(100), 0));
    for reserved in ["0", "253", "255"] {
        assert_error(
            &format!("[[bgp.routers]]\nasn = 1\ntable = {reserved}\n"),
            3,
            9,
            "bgp.routers[0].table",
            "reserved by the kernel",
        );
    }
    assert_error(
        "[[bgp.routers]]\nasn = 1\ntable = 4294967296\n",
        3,
        9,
        "bgp.routers[0].table",
        "1..=4294967295",
    );
    assert_error(
        "[[bgp.routers]]\nasn = 1\nmetric = -1\n",
        3,
        10,
        "bgp.routers[0].metric",
        "0..=4294967295",
    );
    assert_error(
        "[[bgp.routers]]\nasn = 1\ninstall = 1\n",
        3,
        11,
        "bgp.routers[0].install",
        "boolean",
    );
}

#[test]
fn metrics_listen_is_an_address_and_a_fixed_port() {
    let config = load_str("t", "[metrics]\nlisten = \"[::1]:9181\"\n").unwrap();
    assert_eq!(config.metrics.listen, Some("[::1]:9181".parse().unwrap()));
    assert_eq!(load_str("t", "[metrics]\n").unwrap().metrics.listen, None);
    assert_error(
        "[metrics]\nlisten = \"127.0.0.1\"\n",
        2,
        10,
        "metrics.listen",
        "has no port; write e.g. \"127.0.0.1:9181\"",
    );
    assert_error(
        "[metrics]\nlisten = \"localhost:9181\"\n",
        2,
        10,
        "metrics.listen",
        "is not an address and port",
    );
    assert_error("[metrics]\nlisten = \"0.0.0.0:0\"\n", 2, 10, "metrics.listen", "port 0");
    assert_error("[metrics]\nlisten = 9181\n", 2, 10, "metrics.listen", "string");
    assert_error("[metrics]\nport = 9181\n", 2, 1, "metrics.port", "listen");
}

#[test]
fn metrics_namespaces_choose_the_families_exported() {
    let all = load_str("t", "[metrics]\n").unwrap().metrics.namespaces;
    assert_eq!(all.names(), ["uplink", "frrk8s", "metallb"]);
    let config = load_str("t", "[metrics]\nnamespaces = [\"metallb\", \"uplink\"]\n").unwrap();
    let chosen = config.metrics.namespaces;
    assert_eq!(chosen.names(), ["uplink", "metallb"]);
    assert!(chosen.exports("metallb_bgp_session_up") && !chosen.exports("frrk8s_bgp_session_up"));
    assert_error(
        "[metrics]\nnamespaces = [\"frr\"]\n",
        2,
        14,
        "metrics.namespaces",
        "\"frr\" is not a namespace; write \"uplink\", \"frrk8s\", \"metallb\"",
    );
    assert_error("[metrics]\nnamespaces = []\n", 2, 14, "metrics.namespaces", "names no namespace");
}

#[test]
fn maximum_paths_range() {
    assert_error(
        "[[bgp.routers]]\nasn = 1\nmaximum_paths = 0\n",
        3,
        17,
        "bgp.routers[0].maximum_paths",
        "1..=256",
    );
    assert_error(
        "[[bgp.routers]]\nasn = 1\nmaximum_paths = 257\n",
        3,
        17,
        "bgp.routers[0].maximum_paths",
        "1..=256",
    );
    let config =
        load_str("t", "[[bgp.routers]]\nasn = 1\nmaximum_paths = 256\nmultipath_relax = false\n")
            .unwrap();
    assert_eq!(
        (config.bgp.routers[0].maximum_paths, config.bgp.routers[0].multipath_relax),
        (256, false)
    );
}

#[test]
fn one_router_per_vrf_in_a_file() {
    let text = "[[bgp.routers]]\nasn = 1\n[[bgp.routers]]\nasn = 2\nvrf = \"\"\n";
    assert_error(text, 4, 7, "bgp.routers[1].vrf", "already defined at line 2 (bgp.routers[0])");
    let text = "[[bgp.routers]]\nasn = 1\n[[bgp.routers]]\nasn = 1\nvrf = \"red\"\n";
    assert_eq!(load_str("t", text).unwrap().bgp.routers.len(), 2);
}

#[test]
fn neighbor_needs_exactly_one_of_asn_and_dynamic_asn() {
    let text = "[[bgp.routers]]\nasn = 1\n\n[[bgp.routers.neighbors]]\naddress = \"10.0.0.1\"\n";
    assert_error(text, 4, 1, N0, "set asn = <number> or dynamic_asn = \"internal\" | \"external\"");
    assert_error(
        &neighbor_with("dynamic_asn = \"internal\""),
        7,
        15,
        &format!("{N0}.dynamic_asn"),
        "not both",
    );
    let text = "[[bgp.routers]]\nasn = 1\n\n[[bgp.routers.neighbors]]\naddress = \"10.0.0.1\"\ndynamic_asn = \"ibgp\"\n";
    assert_error(text, 6, 15, &format!("{N0}.dynamic_asn"), "write \"internal\"");
    assert_error(&BASE.replace("65102", "23456"), 6, 7, &format!("{N0}.asn"), "AS_TRANS");
}

#[test]
fn neighbor_address_rules() {
    assert_error(
        &BASE.replace("172.18.20.1", "172.18.20"),
        5,
        11,
        &format!("{N0}.address"),
        "is not an IP address",
    );
    assert_error(
        &BASE.replace("172.18.20.1", "224.0.0.5"),
        5,
        11,
        &format!("{N0}.address"),
        "cannot be a BGP peer",
    );
    assert_error(
        &BASE.replace("172.18.20.1\"", "172.18.20.1\"\naddress = \"x\""),
        6,
        1,
        "bgp.routers[0].neighbors[0]",
        "duplicate key",
    );
    let text = format!("{BASE}[[bgp.routers.neighbors]]\naddress = \"172.18.20.1\"\nasn = 65102\n");
    assert_error(
        &text,
        8,
        11,
        "bgp.routers[0].neighbors[1].address",
        "neighbor 172.18.20.1 is already defined at line 5",
    );
}

#[test]
fn port_and_source_address() {
    assert_error(&neighbor_with("port = 0"), 7, 8, &format!("{N0}.port"), "TCP port in 1..=65535");
    assert_eq!(neighbor(&neighbor_with("port = 1179")).port, 1179);
    assert_error(
        &neighbor_with("source_address = \"2001:db8::2\""),
        7,
        18,
        &format!("{N0}.source_address"),
        "different families",
    );
    assert_eq!(
        neighbor(&neighbor_with("source_address = \"172.18.20.113\"")).source_address,
        Some(IpAddr::from([172, 18, 20, 113]))
    );
}

#[test]
fn password_rules() {
    let key80 = "k".repeat(80);
    assert_eq!(
        neighbor(&neighbor_with(&format!("password = \"{key80}\""))).password.unwrap().expose(),
        key80
    );
    let key81 = "k".repeat(81);
    assert_error(
        &neighbor_with(&format!("password = \"{key81}\"")),
        7,
        12,
        &format!("{N0}.password"),
        "81 bytes; Linux accepts at most 80",
    );
    assert_error(&neighbor_with("password = \"\""), 7, 12, &format!("{N0}.password"), "empty");
    assert_error(
        &neighbor_with("password = \"a\"\npassword_file = \"f\""),
        8,
        17,
        &format!("{N0}.password_file"),
        "not both",
    );
}

#[test]
fn password_file_is_read_relative_to_the_config_file() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("tor.key"), "s3cret\n").unwrap();
    let main = dir.path().join("uplink.toml");
    std::fs::write(&main, neighbor_with("password_file = \"tor.key\"")).unwrap();
    let config = super::super::load(&main).unwrap();
    assert_eq!(config.bgp.routers[0].neighbors[0].password.as_ref().unwrap().expose(), "s3cret");

    std::fs::write(&main, neighbor_with("password_file = \"missing.key\"")).unwrap();
    let errors = super::super::load(&main).unwrap_err().0;
    assert_eq!(errors.len(), 1);
    assert_eq!(
        (errors[0].line, errors[0].column, errors[0].field.as_str()),
        (7, 17, "bgp.routers[0].neighbors[0].password_file")
    );
    assert!(
        errors[0].message.contains("cannot read") && errors[0].message.contains("missing.key"),
        "{}",
        errors[0].message
    );
}

#[test]
fn hold_and_keepalive_rules() {
    let hold = format!("{N0}.hold_time");
    assert_error(
        &neighbor_with("hold_time = \"2s\""),
        7,
        13,
        &hold,
        "write \"0s\" (no keepalives) or \"3s\" to \"65535s\"",
    );
    assert_error(&neighbor_with("hold_time = \"65536s\""), 7, 13, &hold, "out of range");
    assert_error(
        &neighbor_with("hold_time = \"1500ms\""),
        7,
        13,
        &hold,
        "whole seconds; write \"1s\" or \"2s\"",
    );
    assert_error(
        &neighbor_with("hold_time = 90"),
        7,
        13,
        &hold,
        "write a duration string such as \"90s\"",
    );
    assert_error(&neighbor_with("hold_time = \"90\""), 7, 13, &hold, "write \"90s\"");
    let n = neighbor(&neighbor_with("hold_time = \"9s\""));
    assert_eq!((n.hold_time, n.keepalive_time), (Duration::from_secs(9), Duration::from_secs(3)));
    let n = neighbor(&neighbor_with("hold_time = \"0s\""));
    assert_eq!((n.hold_time, n.keepalive_time), (Duration::ZERO, Duration::ZERO));
    let n = neighbor(&neighbor_with("hold_time = \"0s\"\nkeepalive_time = \"10s\""));
    assert_eq!(n.keepalive_time, Duration::from_secs(10));

    let keepalive = format!("{N0}.keepalive_time");
    assert_error(
        &neighbor_with("hold_time = \"30s\"\nkeepalive_time = \"30s\""),
        8,
        18,
        &keepalive,
        "less than hold_time (\"30s\"); e.g. \"10s\"",
    );
    assert_error(&neighbor_with("keepalive_time = \"0s\""), 7, 18, &keepalive, "at least \"1s\"");
    assert_error(
        &neighbor_with("connect_time = \"0s\""),
        7,
        16,
        &format!("{N0}.connect_time"),
        "\"1s\" to \"65535s\"",
    );
    assert_eq!(
        neighbor(&neighbor_with("connect_time = \"2m\"")).connect_time,
        Duration::from_secs(120)
    );
}

#[test]
fn multihop_and_gtsm() {
    assert_eq!(neighbor(&neighbor_with("ebgp_multihop = true")).ebgp_multihop, Some(255));
    assert_eq!(neighbor(&neighbor_with("ebgp_multihop = false")).ebgp_multihop, None);
    assert_eq!(neighbor(&neighbor_with("ebgp_multihop = 2")).ebgp_multihop, Some(2));
    assert_error(
        &neighbor_with("ebgp_multihop = 0"),
        7,
        17,
        &format!("{N0}.ebgp_multihop"),
        "a TTL from 1 to 255",
    );
    assert_error(
        &neighbor_with("ebgp_multihop = \"yes\""),
        7,
        17,
        &format!("{N0}.ebgp_multihop"),
        "expected true, false or an integer",
    );
    assert_eq!(neighbor(&neighbor_with("ttl_security = true")).ttl_security, Some(1));
    assert_eq!(
        neighbor(&neighbor_with("ttl_security = 3\nebgp_multihop = 3")).ttl_security,
        Some(3)
    );
    assert_error(
        &neighbor_with("ttl_security = 255"),
        7,
        16,
        &format!("{N0}.ttl_security"),
        "a hop count from 1 to 254",
    );
    assert_error(
        &neighbor_with("ebgp_multihop = true\nttl_security = true"),
        8,
        16,
        &format!("{N0}.ttl_security"),
        "ttl_security = 1 accepts only peers within 1 hop(s), but ebgp_multihop = 255",
    );
}

#[test]
fn other_neighbor_settings() {
    assert_error(
        &neighbor_with("max_prefixes = 0"),
        7,
        16,
        &format!("{N0}.max_prefixes"),
        "1..=4294967295",
    );
    let n = neighbor(&neighbor_with(
        "max_prefixes = 1000\npassive = true\nfamilies = [\"ipv6-unicast\", \"ipv4-unicast\"]",
    ));
    let limit = n.max_prefixes.map(|m| (m.limit, m.threshold, m.warning_only, m.restart_time));
    assert_eq!((limit, n.passive), (Some((1000, 75, false, None)), true));
    assert_eq!(n.families, vec![AddressFamily::Ipv4Unicast, AddressFamily::Ipv6Unicast]);
    assert_error(
        &neighbor_with("families = []"),
        7,
        12,
        &format!("{N0}.families"),
        "at least one of",
    );
    assert_error(
        &neighbor_with("families = [\"ipv4-unicast\", \"l2vpn-evpn\"]"),
        7,
        29,
        &format!("{N0}.families[1]"),
        "valid families are",
    );
    assert_error(
        &neighbor_with("bfd_profile = \"fast\""),
        7,
        15,
        &format!("{N0}.bfd_profile"),
        "no BFD profile named \"fast\"; no [[bgp.bfd_profiles]] are defined",
    );
}

#[test]
fn unknown_fields_list_the_valid_names() {
    let (line, column, field, message) = only_error(&neighbor_with("holdtime = \"90s\""));
    assert_eq!((line, column, field.as_str()), (7, 1, "bgp.routers[0].neighbors[0].holdtime"));
    assert!(
        message.contains("unknown field `holdtime`, expected one of `address`, `asn`"),
        "{message}"
    );
    assert!(message.contains("`hold_time`"), "{message}");
    let (line, column, field, message) = only_error("[bgp]\nrouter = []\n");
    assert_eq!((line, column, field.as_str()), (2, 1, "bgp.router"));
    assert!(
        message.contains("expected one of `routers`, `bfd_profiles`, `default_max_prefixes`"),
        "{message}"
    );
}

#[test]
fn to_advertise_rules() {
    let router = "[[bgp.routers]]\nasn = 65801\nprefixes = [\"10.128.7.0/24\"]\n[[bgp.routers.neighbors]]\naddress = \"172.18.20.1\"\nasn = 65102\n";
    let with = |extra: &str| format!("{router}{extra}\n");
    let adv = format!("{N0}.to_advertise");
    assert_error(
        &with("to_advertise.allowed = { mode = \"all\", prefixes = [\"10.128.7.0/24\"] }"),
        7,
        51,
        &format!("{adv}.allowed.prefixes"),
        "remove this list or set mode = \"filtered\"",
    );
    assert_error(
        &with("to_advertise.allowed = { mode = \"some\" }"),
        7,
        33,
        &format!("{adv}.allowed.mode"),
        "write \"all\" or \"filtered\"",
    );
    assert_error(
        &with("to_advertise.allowed.prefixes = [\"10.128.8.0/24\"]"),
        7,
        34,
        &format!("{adv}.allowed.prefixes[0]"),
        "10.128.8.0/24 is not one of the router's prefixes (bgp.routers[0].prefixes at t.toml:1:1)",
    );
    assert_error(
        &with(
            "to_advertise.with_local_pref = [{ local_pref = 200, prefixes = [\"10.128.7.0/24\"] }]",
        ),
        7,
        65,
        &format!("{adv}.with_local_pref[0].prefixes[0]"),
        "is not advertised to neighbor 172.18.20.1; add it to to_advertise.allowed.prefixes",
    );
    assert_error(
        &with("to_advertise.with_community = [{ community = \"65536:1\", prefixes = [] }]"),
        7,
        46,
        &format!("{adv}.with_community[0].community"),
        "\"65536\" is not 0..=65535",
    );
    let n = neighbor(&with(
            "to_advertise.allowed.mode = \"all\"\nto_advertise.with_local_pref = [{ local_pref = 200, prefixes = [\"10.128.7.0/24\"] }]\nto_advertise.with_community = [{ community = \"no-export\", prefixes = [\"10.128.7.0/24\"] }]",
        ));
    let net: IpNet = "10.128.7.0/24".parse().unwrap();
    assert_eq!(n.to_advertise.mode, AllowMode::All);
    assert_eq!(
        n.to_advertise.with_local_pref,
        vec![super::super::LocalPrefPrefixes { local_pref: 200, prefixes: vec![net] }]
    );
    assert_eq!(
        n.to_advertise.with_community,
        vec![super::super::CommunityPrefixes {
            community: "no-export".parse().unwrap(),
            prefixes: vec![net]
        }]
    );
    assert_error(
            &with("to_advertise.allowed.prefixes = [\"10.128.7.0/24\"]\nto_advertise.with_local_pref = [{ local_pref = 1, prefixes = [\"10.128.7.0/24\"] }, { local_pref = 2, prefixes = [\"10.128.7.0/24\"] }]"),
            8,
            113,
            &format!("{adv}.with_local_pref[1].prefixes[0]"),
            "10.128.7.0/24 already has local_pref 1 at t.toml:8:63",
        );
}

#[test]
fn to_receive_rules() {
    let recv = format!("{N0}.to_receive.allowed");
    let with = |entry: &str| neighbor_with(&format!("to_receive.allowed.prefixes = [{entry}]"));
    let n = neighbor(&with("{ prefix = \"0.0.0.0/0\" }, { prefix = \"10.0.0.0/8\", ge = 16, le = 24 }, { prefix = \"10.0.0.0/8\", le = 8 }"));
    assert_eq!(n.to_receive.mode, AllowMode::Filtered);
    let pm = |p: &str, ge, le| PrefixMatch { prefix: p.parse().unwrap(), ge, le };
    assert_eq!(
        n.to_receive.prefixes,
        vec![
            pm("0.0.0.0/0", None, None),
            pm("10.0.0.0/8", None, Some(8)),
            pm("10.0.0.0/8", Some(16), Some(24))
        ]
    );
    assert_error(
        &with("{ prefix = \"10.0.0.0/8\", ge = 7 }"),
        7,
        62,
        &format!("{recv}.prefixes[0].ge"),
        "expected prefix length for 10.0.0.0/8 in 8..=32",
    );
    assert_error(
        &with("{ prefix = \"10.0.0.0/8\", ge = 24, le = 16 }"),
        7,
        71,
        &format!("{recv}.prefixes[0].le"),
        "in 24..=32",
    );
    assert_error(
        &with("{ prefix = \"2001:db8::/32\", le = 129 }"),
        7,
        65,
        &format!("{recv}.prefixes[0].le"),
        "in 32..=128",
    );
    assert_error(
        &with("{ prefix = \"10.0.0.1/8\" }"),
        7,
        43,
        &format!("{recv}.prefixes[0].prefix"),
        "did you mean 10.0.0.0/8?",
    );
    assert_error(
        &neighbor_with(
            "to_receive.allowed = { mode = \"all\", prefixes = [{ prefix = \"0.0.0.0/0\" }] }",
        ),
        7,
        49,
        &format!("{recv}.prefixes"),
        "already accepts every prefix",
    );
    assert_eq!(
        neighbor(&neighbor_with("to_receive.allowed.mode = \"all\"")).to_receive.mode,
        AllowMode::All
    );
}

#[test]
fn bfd_profile_rules() {
    let with = |extra: &str| format!("[[bgp.bfd_profiles]]\nname = \"p\"\n{extra}\n");
    assert_error(
        &with("receive_interval = \"5ms\""),
        3,
        20,
        "bgp.bfd_profiles[0].receive_interval",
        "expected \"10ms\" to \"60000ms\"",
    );
    assert_error(
        &with("transmit_interval = \"61s\""),
        3,
        21,
        "bgp.bfd_profiles[0].transmit_interval",
        "out of range",
    );
    assert_error(
        &with("echo_interval = 50"),
        3,
        17,
        "bgp.bfd_profiles[0].echo_interval",
        "\"50ms\"",
    );
    assert_error(
        &with("detect_multiplier = 1"),
        3,
        21,
        "bgp.bfd_profiles[0].detect_multiplier",
        "2..=255",
    );
    assert_error(&with("minimum_ttl = 255"), 3, 15, "bgp.bfd_profiles[0].minimum_ttl", "1..=254");
    assert_error(
        &with("[[bgp.bfd_profiles]]\nname = \"p\""),
        4,
        8,
        "bgp.bfd_profiles[1].name",
        "already defined at line 2",
    );
    assert_error(
        "[[bgp.bfd_profiles]]\nname = \"\"\n",
        2,
        8,
        "bgp.bfd_profiles[0].name",
        "non-empty name",
    );
    assert_error(
        &with("echo_mode = true"),
        3,
        13,
        "bgp.bfd_profiles[0].echo_mode",
        "Echo function is not supported",
    );
    let config =
        load_str("t", &with("echo_mode = false\npassive_mode = true\nreceive_interval = \"1s\""))
            .unwrap();
    let profile = &config.bgp.bfd_profiles[0];
    assert_eq!(
        (profile.echo_mode, profile.passive_mode, profile.receive_interval),
        (false, true, Duration::from_secs(1))
    );
}

#[test]
fn every_error_in_a_file_is_reported() {
    let text = "always_block = [\"1.2.3.4/8\"]\n[[bgp.routers]]\nasn = 0\nprefixes = [\"10.0.0.1/24\"]\n[[bgp.routers.neighbors]]\naddress = \"10.0.0.2\"\nasn = 65102\nhold_time = \"1s\"\nport = 70000\n";
    let found: Vec<(usize, String)> = errors(text).into_iter().map(|e| (e.line, e.field)).collect();
    assert_eq!(
        found,
        vec![
            (1, "always_block[0]".to_string()),
            (3, "bgp.routers[0].asn".to_string()),
            (4, "bgp.routers[0].prefixes[0]".to_string()),
            (9, format!("{N0}.port")),
            (8, format!("{N0}.hold_time")),
        ]
    );
}

#[test]
fn syntax_errors_point_at_the_problem() {
    let (line, column, _, message) = only_error("[[bgp.routers]]\nasn = 65801\nvrf = \"red\n");
    // toml reports an unterminated string where it expected the closing quote.
    assert_eq!((line, column), (3, 11), "{message}");
    assert!(message.contains("invalid basic string, expected `\"`"), "{message}");
    let (line, column, field, message) = only_error("[[bgp.routers]]\nasn = 65801\nvrf \"red\"\n");
    assert_eq!((line, column, field.as_str()), (3, 5, "bgp.routers[0]"), "{message}");
}

#[test]
fn max_prefixes_options() {
    let n = neighbor(&neighbor_with(
        "max_prefixes = 1000\nmax_prefixes_threshold = 90\nmax_prefixes_restart_time = \"30s\"",
    ));
    let m = n.max_prefixes.unwrap();
    assert_eq!((m.limit, m.threshold, m.warning_only), (1000, 90, false));
    assert_eq!(m.restart_time, Some(Duration::from_secs(30)));
    let n = neighbor(&neighbor_with("max_prefixes = 10\nmax_prefixes_warning_only = true"));
    assert!(n.max_prefixes.unwrap().warning_only);
    assert_error(
        &neighbor_with("max_prefixes_threshold = 80"),
        7,
        26,
        &format!("{N0}.max_prefixes_threshold"),
        "needs max_prefixes",
    );
    assert_error(
        &neighbor_with(
            "max_prefixes = 10\nmax_prefixes_warning_only = true\nmax_prefixes_restart_time = \"1m\"",
        ),
        9,
        29,
        &format!("{N0}.max_prefixes_restart_time"),
        "cannot go with max_prefixes_warning_only",
    );
    assert_error(
        &neighbor_with("max_prefixes = 10\nmax_prefixes_threshold = 0"),
        8,
        26,
        &format!("{N0}.max_prefixes_threshold"),
        "1..=100",
    );
}

#[test]
fn send_hold_and_minimum_hold_time() {
    let n = neighbor(&neighbor_with(""));
    assert_eq!((n.send_hold_time, n.minimum_hold_time), (None, Duration::from_secs(3)));
    let n = neighbor(&neighbor_with("send_hold_time = \"0s\"\nminimum_hold_time = \"0s\""));
    assert_eq!((n.send_hold_time, n.minimum_hold_time), (Some(Duration::ZERO), Duration::ZERO));
    let n = neighbor(&neighbor_with("send_hold_time = \"45s\""));
    assert_eq!(n.send_hold_time, Some(Duration::from_secs(45)));
}

#[test]
fn layer2_membership_needs_an_address_the_others_reach_and_a_shared_key() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("memberlist.key"), "0123456789abcdef0123\n").unwrap();
    std::fs::write(dir.path().join("short.key"), "s3cret\n").unwrap();
    let main = dir.path().join("uplink.toml");
    let load = |text: &str| {
        std::fs::write(&main, text).unwrap();
        super::super::load(&main)
    };
    let config = load(
        "[layer2]\naddress = \"10.0.0.11\"\nmembers = [\"10.0.0.12\", \"[2001:db8::13]:8000\"]\nsecret_file = \"memberlist.key\"\ndetection = \"500ms\"\n",
    )
    .unwrap();
    let layer2 = config.layer2.unwrap();
    assert_eq!(layer2.address, "10.0.0.11:7946".parse().unwrap());
    assert_eq!(
        layer2.members,
        ["10.0.0.12:7946".parse().unwrap(), "[2001:db8::13]:8000".parse().unwrap()]
    );
    assert_eq!(layer2.secret, b"0123456789abcdef0123");
    assert_eq!(layer2.detection, Duration::from_millis(500));
    assert!(!format!("{layer2:?}").contains("0123456789"), "the key is never shown");
    let defaults =
        load("[layer2]\naddress = \"10.0.0.11:7946\"\nsecret_file = \"memberlist.key\"\n").unwrap();
    assert_eq!(defaults.layer2.unwrap().detection, DEFAULT_LAYER2_DETECTION);
    assert!(load("").unwrap().layer2.is_none());
    // With [kubernetes], members and key may be left to the API's Nodes and memberlist Secret.
    let from_api = load("[kubernetes]\n\n[layer2]\naddress = \"10.0.0.11\"\n").unwrap();
    let layer2 = from_api.layer2.unwrap();
    assert!(layer2.secret.is_empty() && layer2.members.is_empty(), "{layer2:?}");

    let only = |text: &str| {
        let errors = load(text).unwrap_err().0;
        assert_eq!(errors.len(), 1, "{errors:#?}");
        let e = errors.into_iter().next().unwrap();
        (e.line, e.field, e.message)
    };
    let (line, field, message) = only("[layer2]\naddress = \"10.0.0.11\"\n");
    assert_eq!((line, field.as_str()), (1, "layer2.secret_file"));
    assert!(message.contains("required"), "{message}");
    let (line, field, message) =
        only("[layer2]\naddress = \"10.0.0.11\"\nsecret_file = \"short.key\"\n");
    assert_eq!((line, field.as_str()), (3, "layer2.secret_file"));
    assert!(message.contains("the key is 6 bytes; use at least 16"), "{message}");
    let (line, field, message) = only(
        "[layer2]\naddress = \"10.0.0.11\"\nmembers = [\"node-2\"]\nsecret_file = \"memberlist.key\"\n",
    );
    assert_eq!((line, field.as_str()), (3, "layer2.members[0]"));
    assert!(message.contains("\"node-2\" is not"), "{message}");
    for unknown in ["0.0.0.0:7946", "::", "10.0.0.11:0"] {
        let text = format!("[layer2]\naddress = \"{unknown}\"\nsecret_file = \"memberlist.key\"\n");
        assert_eq!(only(&text).1, "layer2.address", "{unknown}");
    }
    let (line, field, message) = only(
        "[layer2]\naddress = \"10.0.0.11\"\nsecret_file = \"memberlist.key\"\ndetection = \"100ms\"\n",
    );
    assert_eq!((line, field.as_str()), (4, "layer2.detection"));
    assert!(message.contains("expected \"500ms\""), "{message}");
}
