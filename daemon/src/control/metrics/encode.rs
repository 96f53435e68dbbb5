//! A [`Snapshot`] in the Prometheus text format (0.0.4), written by `prometheus-client`: the
//! snapshot is turned into families of samples, and a `Collector` hands them to the crate's
//! encoder, which writes the HELP and TYPE lines, escapes label values and adds counters'
//! `_total`.

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;

use super::families::{self, BfdValue, BgpValue, Family, Kind};
use super::gather::{BfdPeer, BgpPeer, Snapshot};
use crate::netconf::EnactmentStatus;

/// The `Content-Type` of [`encode`]'s output.
pub const CONTENT_TYPE: &str = prometheus_client::encoding::prometheus_text::CONTENT_TYPE;

type Labels = Vec<(&'static str, String)>;

/// One family and its samples.
#[derive(Debug)]
struct Samples {
    family: Family,
    samples: Vec<(Labels, u64)>,
}

/// The families of one scrape, sorted by name (as Go's registry sorts them).
#[derive(Debug, Default)]
struct Families(Vec<Samples>);

impl Families {
    fn add(&mut self, family: Family, labels: Labels, value: u64) {
        debug_assert_eq!(
            labels.iter().map(|(k, _)| *k).collect::<Vec<_>>(),
            family.labels,
            "{family}"
        );
        match self.0.iter_mut().find(|s| s.family.name == family.name) {
            Some(samples) => samples.samples.push((labels, value)),
            None => self.0.push(Samples { family, samples: vec![(labels, value)] }),
        }
    }

    fn sorted(mut self) -> Self {
        self.0.sort_by_key(|s| s.family.name);
        for family in &mut self.0 {
            family.samples.sort();
        }
        self
    }
}

impl Collector for Families {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        for Samples { family, samples } in &self.0 {
            // The encoder appends `_total` to a counter's name; give it the stem.
            let (name, kind) = match family.kind {
                Kind::Counter => {
                    (family.name.strip_suffix("_total").unwrap_or(family.name), MetricType::Counter)
                }
                Kind::Gauge => (family.name, MetricType::Gauge),
                // Typed `counter` after encoding (`encode`).
                Kind::UpstreamCounter => (family.name, MetricType::Unknown),
            };
            let mut metric = encoder.encode_descriptor(name, family.help, None, kind)?;
            for (labels, value) in samples {
                let sample = metric.encode_family(labels)?;
                match family.kind {
                    Kind::Counter => ConstCounter::new(*value).encode(sample)?,
                    // Written as a gauge's sample is: name, labels, value (no `_total`).
                    Kind::Gauge | Kind::UpstreamCounter => {
                        ConstGauge::new(*value).encode(sample)?
                    }
                }
            }
        }
        Ok(())
    }
}

/// The text a scrape returns.
pub fn encode(snapshot: &Snapshot) -> Result<String, std::fmt::Error> {
    let families = families(snapshot).sorted();
    let upstream_counters: Vec<&'static str> = families
        .0
        .iter()
        .filter(|s| s.family.kind == Kind::UpstreamCounter)
        .map(|s| s.family.name)
        .collect();
    let mut registry = Registry::default();
    registry.register_collector(Box::new(families));
    let mut out = String::new();
    prometheus_client::encoding::prometheus_text::encode(&mut out, &registry)?;
    // Upstream's counters without `_total`: the encoder would add the suffix to a counter, so
    // they were written untyped; the text format (0.0.4) lets a counter have any name. One
    // pass over the lines (a scrape of many Services is megabytes).
    let mut typed = String::with_capacity(out.len());
    for line in out.split_inclusive('\n') {
        let upstream_counter = line
            .strip_prefix("# TYPE ")
            .and_then(|rest| rest.strip_suffix(" untyped\n"))
            .is_some_and(|name| upstream_counters.contains(&name));
        match line.strip_suffix("untyped\n") {
            Some(head) if upstream_counter => {
                typed.push_str(head);
                typed.push_str("counter\n");
            }
            _ => typed.push_str(line),
        }
    }
    Ok(typed)
}

fn peer_vrf(peer: String, vrf: &str) -> Labels {
    vec![("peer", peer), ("vrf", vrf.to_string())]
}

fn bgp_value(peer: &BgpPeer, value: BgpValue) -> Option<u64> {
    let s = &peer.stats;
    Some(match value {
        BgpValue::SessionUp => u64::from(peer.up()),
        // FRR's sentPrefixCounter and acceptedPrefixCounter, summed over the families.
        BgpValue::AnnouncedPrefixes => peer.prefixes?.sent,
        BgpValue::ReceivedPrefixes => peer.prefixes?.accepted,
        BgpValue::OpensSent => s.opens_sent,
        BgpValue::OpensReceived => s.opens_rcvd,
        BgpValue::NotificationsSent => s.notifications_sent,
        BgpValue::UpdatesSent => s.updates_sent,
        BgpValue::UpdatesReceived => s.updates_rcvd,
        BgpValue::KeepalivesSent => s.keepalives_sent,
        BgpValue::KeepalivesReceived => s.keepalives_rcvd,
        BgpValue::RouteRefreshSent => s.refreshes_sent,
        BgpValue::TotalSent => s.msgs_sent,
        BgpValue::TotalReceived => s.msgs_rcvd,
    })
}

fn bfd_value(peer: &BfdPeer, value: BfdValue) -> u64 {
    let c = &peer.counters;
    match value {
        BfdValue::SessionUp => u64::from(peer.up),
        BfdValue::ControlPacketInput => c.control_input,
        BfdValue::ControlPacketOutput => c.control_output,
        // uplink runs no BFD Echo function (RFC 5880 §6.4): none are sent or received.
        BfdValue::EchoPacketInput | BfdValue::EchoPacketOutput => 0,
        BfdValue::SessionUpEvents => c.session_up,
        BfdValue::SessionDownEvents => c.session_down,
        BfdValue::ZebraNotifications => c.session_up.saturating_add(c.session_down),
    }
}

fn families(snapshot: &Snapshot) -> Families {
    let mut out = Families::default();
    out.add(families::BUILD_INFO, vec![("version", env!("CARGO_PKG_VERSION").into())], 1);
    // MetalLB's pending count has no `vrf` label: the same address in two VRFs is one sample,
    // their sum.
    let mut pending: std::collections::BTreeMap<String, u64> = std::collections::BTreeMap::new();
    for peer in &snapshot.bgp {
        // frr-k8s labels the neighbor by its address, MetalLB's FRR mode by address:port
        // (`fmt.Sprintf("%s:%d", ip, port)`: no brackets around an IPv6 address).
        let frrk8s = || peer_vrf(peer.address.to_string(), &peer.vrf);
        let metallb = || peer_vrf(format!("{}:{}", peer.address, peer.port), &peer.vrf);
        for family in &families::BGP {
            let Some(value) = bgp_value(peer, family.value) else { continue };
            out.add(family.frrk8s, frrk8s(), value);
            if let Some(metallb_family) = family.metallb {
                out.add(metallb_family, metallb(), value);
            }
        }
        if let Some(prefixes) = peer.prefixes {
            let count = pending.entry(format!("{}:{}", peer.address, peer.port)).or_default();
            *count = count.saturating_add(prefixes.pending);
        }
        let s = &peer.stats;
        out.add(families::BGP_ESTABLISHED, frrk8s(), s.established_count);
        out.add(families::BGP_DROPPED, frrk8s(), s.dropped_count);
        out.add(families::BGP_NOTIFICATIONS_RECEIVED, frrk8s(), s.notifications_rcvd);
        out.add(families::BGP_ROUTE_REFRESH_RECEIVED, frrk8s(), s.refreshes_rcvd);
    }
    for (peer, count) in pending {
        out.add(families::BGP_PENDING_PREFIXES, vec![("peer", peer)], count);
    }
    for rib in &snapshot.loc_rib {
        for (family, count) in [("ipv4-unicast", rib.ipv4), ("ipv6-unicast", rib.ipv6)] {
            let labels = vec![("vrf", rib.vrf.clone()), ("family", family.to_string())];
            out.add(families::BGP_LOC_RIB_PREFIXES, labels, count);
        }
    }
    for peer in &snapshot.bfd {
        let labels = || peer_vrf(peer.address.to_string(), &peer.vrf);
        for family in &families::BFD {
            let value = bfd_value(peer, family.value);
            out.add(family.frrk8s, labels(), value);
            out.add(family.metallb, labels(), value);
        }
        out.add(families::BFD_CONTROL_PACKET_DISCARDED, labels(), peer.counters.control_discarded);
    }
    for (vrf, state, count) in &snapshot.fib.routes {
        let labels = vec![("vrf", vrf.clone()), ("state", state.name().to_string())];
        out.add(families::FIB_ROUTES, labels, *count);
    }
    out.add(families::FIB_KERNEL_REQUESTS, vec![], snapshot.fib.kernel_requests);
    out.add(families::FIB_KERNEL_ERRORS, vec![], snapshot.fib.kernel_errors);
    out.add(families::FIB_RESYNCS, vec![], snapshot.fib.resyncs);
    out.add(families::FIB_RETRIES, vec![], snapshot.fib.retries);
    for pool in &snapshot.pools {
        out.add(families::ALLOCATOR_ADDRESSES_TOTAL, vec![("pool", pool.pool.clone())], pool.total);
        out.add(
            families::ALLOCATOR_ADDRESSES_IN_USE,
            vec![("pool", pool.pool.clone())],
            pool.in_use,
        );
    }
    for a in &snapshot.announced {
        let labels = vec![
            ("service", a.service.clone()),
            ("protocol", a.protocol.to_string()),
            ("node", snapshot.node.clone()),
            ("ip", a.ip.to_string()),
        ];
        out.add(families::SPEAKER_ANNOUNCED, labels, 1);
    }
    for a in &snapshot.announcements {
        let labels = vec![
            ("vrf", a.vrf.clone()),
            ("origin", a.origin.to_string()),
            ("state", a.state.to_string()),
            ("reason", a.reason.to_string()),
        ];
        out.add(families::ANNOUNCEMENTS, labels, a.count);
    }
    for (ip, counts) in &snapshot.layer2.addresses {
        let labels = || vec![("ip", ip.to_string())];
        out.add(families::LAYER2_REQUESTS, labels(), counts.requests_received);
        out.add(families::LAYER2_RESPONSES, labels(), counts.responses_sent);
        out.add(families::LAYER2_GRATUITOUS, labels(), counts.gratuitous_sent);
    }
    for (reason, count) in &snapshot.layer2.dropped {
        out.add(families::LAYER2_DROPPED, vec![("reason", reason.to_string())], *count);
    }
    if let Some(alive) = snapshot.layer2.members_alive {
        out.add(families::LAYER2_MEMBERS, vec![], alive);
    }
    for (reason, count) in &snapshot.layer2.membership_refused {
        out.add(families::LAYER2_MEMBERSHIP_REFUSED, vec![("reason", reason.to_string())], *count);
    }
    if let Some(k8s) = &snapshot.kubernetes {
        out.add(families::K8S_CONFIG_LOADED, vec![], u64::from(k8s.loaded));
        out.add(families::K8S_CONFIG_STALE, vec![], u64::from(k8s.stale));
        for (kind, objects, up) in &k8s.kinds {
            out.add(families::K8S_OBJECTS, vec![("kind", kind.clone())], *objects);
            out.add(families::K8S_WATCH_UP, vec![("kind", kind.clone())], u64::from(*up));
        }
        out.add(families::K8S_REFUSED, vec![], k8s.refused);
    }
    let reloads = &snapshot.reloads;
    out.add(families::RELOADS, vec![("result", "success".into())], reloads.succeeded);
    out.add(families::RELOADS, vec![("result", "failure".into())], reloads.failed);
    out.add(families::RELOAD_SUCCESSFUL, vec![], u64::from(reloads.last_ok));
    out.add(families::RELOAD_SUCCESS_TIMESTAMP, vec![], reloads.last_success);
    for status in EnactmentStatus::ALL {
        let count = snapshot.network_policies.iter().filter(|p| p.status == status).count();
        out.add(
            families::NETWORK_POLICIES,
            vec![("status", status.name().into())],
            u64::try_from(count).unwrap_or(u64::MAX),
        );
    }
    for p in &snapshot.network_policies {
        let policy = || ("policy", p.policy.clone());
        out.add(
            families::NETWORK_POLICY_STATUS,
            vec![policy(), ("status", p.status.name().into())],
            1,
        );
        out.add(families::NETWORK_POLICY_TRANSITION_TIMESTAMP, vec![policy()], p.since);
    }
    out.0.retain(|samples| snapshot.namespaces.exports(samples.family.name));
    out
}

#[cfg(test)]
mod tests {
    use super::super::gather::{
        AnnouncedService, AnnouncementCount, FibNumbers, KubernetesNumbers, Layer2Numbers, LocRib,
        PolicyEnactment, PoolUsage, Prefixes, ReloadNumbers, Snapshot,
    };
    use super::*;
    use crate::bfd::session::Counters;
    use crate::bgp::stats::PeerSnapshot;
    use crate::config::MetricNamespaces;
    use crate::fib::stats::RouteState;

    /// Upstream's families, copied from its sources by hand (see `families`), so that a typo in
    /// the table cannot also be in the test: name, TYPE as upstream declares it.
    const FRRK8S: &[(&str, &str)] = &[
        ("frrk8s_bgp_session_up", "gauge"),
        ("frrk8s_bgp_announced_prefixes_total", "gauge"),
        ("frrk8s_bgp_received_prefixes_total", "gauge"),
        ("frrk8s_bgp_opens_sent", "counter"),
        ("frrk8s_bgp_opens_received", "counter"),
        ("frrk8s_bgp_notifications_sent", "counter"),
        ("frrk8s_bgp_updates_total", "counter"),
        ("frrk8s_bgp_updates_total_received", "counter"),
        ("frrk8s_bgp_keepalives_sent", "counter"),
        ("frrk8s_bgp_keepalives_received", "counter"),
        ("frrk8s_bgp_route_refresh_sent", "counter"),
        ("frrk8s_bgp_total_sent", "counter"),
        ("frrk8s_bgp_total_received", "counter"),
        ("frrk8s_bfd_session_up", "gauge"),
        ("frrk8s_bfd_control_packet_input", "counter"),
        ("frrk8s_bfd_control_packet_output", "counter"),
        ("frrk8s_bfd_echo_packet_input", "counter"),
        ("frrk8s_bfd_echo_packet_output", "counter"),
        ("frrk8s_bfd_session_up_events", "counter"),
        ("frrk8s_bfd_session_down_events", "counter"),
        ("frrk8s_bfd_zebra_notifications", "counter"),
    ];

    fn peer_stats(state: &str) -> PeerSnapshot {
        PeerSnapshot {
            state: state.into(),
            opens_sent: 1,
            opens_rcvd: 2,
            notifications_sent: 3,
            updates_sent: 4,
            updates_rcvd: 5,
            keepalives_sent: 6,
            keepalives_rcvd: 7,
            refreshes_sent: 8,
            msgs_sent: 9,
            msgs_rcvd: 10,
            established_count: 11,
            dropped_count: 12,
            notifications_rcvd: 13,
            refreshes_rcvd: 14,
            ..PeerSnapshot::default()
        }
    }

    fn snapshot() -> Snapshot {
        Snapshot {
            node: "wk1".into(),
            namespaces: MetricNamespaces::default(),
            pools: vec![PoolUsage { pool: "vips".into(), total: 254, in_use: 3 }],
            announced: vec![AnnouncedService {
                service: "shop/web".into(),
                ip: "192.0.2.7".parse().unwrap(),
                protocol: "bgp",
            }],
            bgp: vec![
                BgpPeer {
                    vrf: "default".into(),
                    address: "172.18.20.1".parse().unwrap(),
                    port: 179,
                    stats: peer_stats("Established"),
                    prefixes: Some(Prefixes { accepted: 21, sent: 22, pending: 23 }),
                },
                BgpPeer {
                    vrf: "red".into(),
                    address: "fd00::1".parse().unwrap(),
                    port: 1179,
                    stats: peer_stats("Active"),
                    prefixes: None,
                },
            ],
            loc_rib: vec![LocRib { vrf: "default".into(), ipv4: 30, ipv6: 31 }],
            bfd: vec![BfdPeer {
                vrf: "default".into(),
                address: "172.18.20.1".parse().unwrap(),
                up: true,
                counters: Counters {
                    control_input: 40,
                    control_output: 41,
                    session_up: 2,
                    session_down: 1,
                    control_discarded: 42,
                },
            }],
            fib: FibNumbers {
                routes: vec![
                    ("default".into(), RouteState::Installed, 50),
                    ("default".into(), RouteState::Pending, 0),
                    ("default".into(), RouteState::Failed, 1),
                ],
                kernel_requests: 51,
                kernel_errors: 1,
                resyncs: 2,
                retries: 3,
            },
            announcements: vec![AnnouncementCount {
                vrf: "default".into(),
                origin: "service",
                state: "withdrawn",
                reason: "drained",
                count: 3,
            }],
            reloads: ReloadNumbers { succeeded: 4, failed: 1, last_ok: false, last_success: 1700 },
            network_policies: vec![
                PolicyEnactment {
                    policy: "uplink-vrf-cudn3".into(),
                    status: EnactmentStatus::Available,
                    since: 1800,
                },
                PolicyEnactment {
                    policy: "enp3s0-wk1".into(),
                    status: EnactmentStatus::Failing,
                    since: 1900,
                },
            ],
            kubernetes: Some(KubernetesNumbers {
                loaded: true,
                stale: true,
                kinds: vec![("Service".into(), 3, true), ("BGPPeer".into(), 0, false)],
                refused: 1,
            }),
            layer2: Layer2Numbers {
                addresses: vec![(
                    "192.0.2.9".parse().unwrap(),
                    crate::l2::responder::AddressCounts {
                        requests_received: 7,
                        responses_sent: 6,
                        gratuitous_sent: 5,
                    },
                )],
                dropped: vec![("not_answered", 4)],
                members_alive: Some(3),
                membership_refused: vec![("wrong_key", 2)],
            },
        }
    }

    /// Each family's TYPE line, by name as written.
    fn types(text: &str) -> Vec<(String, String)> {
        text.lines()
            .filter_map(|l| l.strip_prefix("# TYPE "))
            .map(|l| {
                let (name, kind) = l.split_once(' ').unwrap();
                (name.to_string(), kind.to_string())
            })
            .collect()
    }

    fn sample<'a>(text: &'a str, series: &str) -> Option<&'a str> {
        text.lines().find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
    }

    #[test]
    fn a_scrape_holds_the_namespaces_the_config_names() {
        let mut only_metallb = snapshot();
        only_metallb.namespaces = MetricNamespaces { uplink: false, frrk8s: false, metallb: true };
        let text = encode(&only_metallb).unwrap();
        let names: Vec<String> = types(&text).into_iter().map(|(name, _)| name).collect();
        assert!(names.iter().all(|n| n.starts_with("metallb_")), "{names:?}");
        assert!(names.iter().any(|n| n == "metallb_bgp_session_up"), "{names:?}");
        let all = encode(&snapshot()).unwrap();
        for prefix in ["uplink_", "frrk8s_", "metallb_"] {
            assert!(all.contains(&format!("# TYPE {prefix}")), "no {prefix} family:\n{all}");
        }
    }

    #[test]
    fn upstream_families_keep_their_names_help_and_labels() {
        let text = encode(&snapshot()).unwrap();
        let types = types(&text);
        for (name, upstream_type) in FRRK8S {
            // Every family is declared as upstream declares it, counters without `_total`
            // included (`encode`).
            let ours = *upstream_type;
            for name in [name.to_string(), name.replace("frrk8s_", "metallb_")] {
                if name == "metallb_bgp_received_prefixes_total" {
                    assert!(!text.contains(&name), "MetalLB has no {name}");
                    continue;
                }
                assert!(
                    types.contains(&(name.clone(), ours.to_string())),
                    "{name} {ours} missing:\n{text}"
                );
            }
        }
        // MetalLB's own families (its Kubernetes client, allocator and speaker), gauges as
        // MetalLB declares them.
        let metallb_own = [
            "metallb_k8s_client_config_loaded_bool",
            "metallb_k8s_client_config_stale_bool",
            "metallb_allocator_addresses_total",
            "metallb_allocator_addresses_in_use_total",
            "metallb_speaker_announced",
            "metallb_bgp_pending_prefixes_total",
        ];
        for name in metallb_own {
            assert!(types.contains(&(name.to_string(), "gauge".to_string())), "{name}:\n{text}");
        }
        // Its speaker's layer 2 counters, without `_total`, by the address answered for.
        let layer2 = [
            ("metallb_layer2_requests_received", 7),
            ("metallb_layer2_responses_sent", 6),
            ("metallb_layer2_gratuitous_sent", 5),
        ];
        for (name, value) in layer2 {
            assert!(types.contains(&(name.to_string(), "counter".to_string())), "{name}:\n{text}");
            assert!(
                text.contains(&format!("{name}{{ip=\"192.0.2.9\"}} {value}\n")),
                "{name}:\n{text}"
            );
        }
        assert!(text.contains(
            "# HELP metallb_layer2_requests_received Number of layer2 requests received for owned IPs\n"
        ));
        let metallb_own: Vec<&str> =
            metallb_own.into_iter().chain(layer2.iter().map(|(name, _)| *name)).collect();
        // Every other frrk8s_/metallb_ family is one of frr-k8s's.
        let others = types.iter().filter(|(n, _)| !n.starts_with("uplink_"));
        for (name, _) in others.filter(|(n, _)| !metallb_own.contains(&n.as_str())) {
            let frrk8s = name.replace("metallb_", "frrk8s_");
            assert!(FRRK8S.iter().any(|(n, _)| *n == frrk8s), "{name} is not upstream's");
        }
        assert!(
            text.contains("# HELP frrk8s_bgp_session_up BGP session state (1 is up, 0 is down)\n")
        );
        assert!(
            text.contains("# HELP frrk8s_bgp_updates_total Number of BGP UPDATE messages sent\n")
        );
        assert!(text.contains(
            "# HELP metallb_bfd_control_packet_input Number of received BFD control packets\n"
        ));
        // MetalLB's native mode labels the pending count by address:port alone.
        assert_eq!(
            sample(&text, r#"metallb_bgp_pending_prefixes_total{peer="172.18.20.1:179"}"#),
            Some("23"),
            "{text}"
        );
        // Labels: frr-k8s names the peer by address, MetalLB's BGP families by address:port.
        let v4 = r#"{peer="172.18.20.1",vrf="default"}"#;
        assert_eq!(sample(&text, &format!("frrk8s_bgp_session_up{v4}")), Some("1"));
        assert_eq!(
            sample(&text, r#"metallb_bgp_session_up{peer="172.18.20.1:179",vrf="default"}"#),
            Some("1")
        );
        assert_eq!(
            sample(&text, r#"metallb_bgp_session_up{peer="fd00::1:1179",vrf="red"}"#),
            Some("0")
        );
        assert_eq!(sample(&text, r#"frrk8s_bgp_session_up{peer="fd00::1",vrf="red"}"#), Some("0"));
        assert_eq!(sample(&text, &format!("frrk8s_bgp_announced_prefixes_total{v4}")), Some("22"));
        assert_eq!(sample(&text, &format!("frrk8s_bgp_received_prefixes_total{v4}")), Some("21"));
        assert_eq!(sample(&text, &format!("frrk8s_bgp_updates_total{v4}")), Some("4"));
        assert_eq!(sample(&text, &format!("frrk8s_bgp_updates_total_received{v4}")), Some("5"));
        assert_eq!(sample(&text, &format!("frrk8s_bgp_opens_sent{v4}")), Some("1"));
        assert_eq!(sample(&text, &format!("frrk8s_bgp_route_refresh_sent{v4}")), Some("8"));
        assert_eq!(sample(&text, &format!("frrk8s_bgp_total_received{v4}")), Some("10"));
        // No prefix counts when the RIB did not answer: left out, not zero.
        assert!(!text.contains(r#"frrk8s_bgp_received_prefixes_total{peer="fd00::1""#));
        // BFD: the bare address for both.
        assert_eq!(sample(&text, &format!("metallb_bfd_session_up{v4}")), Some("1"));
        assert_eq!(sample(&text, &format!("frrk8s_bfd_control_packet_output{v4}")), Some("41"));
        assert_eq!(sample(&text, &format!("frrk8s_bfd_zebra_notifications{v4}")), Some("3"));
        assert_eq!(sample(&text, &format!("frrk8s_bfd_echo_packet_input{v4}")), Some("0"));
    }

    #[test]
    fn uplink_families() {
        let text = encode(&snapshot()).unwrap();
        let types = types(&text);
        let expect = [
            ("uplink_build_info", "gauge"),
            ("uplink_bgp_established_total", "counter"),
            ("uplink_bgp_dropped_total", "counter"),
            ("uplink_bgp_notifications_received_total", "counter"),
            ("uplink_bgp_route_refresh_received_total", "counter"),
            ("uplink_bgp_loc_rib_prefixes", "gauge"),
            ("uplink_bfd_control_packet_discarded_total", "counter"),
            ("uplink_fib_routes", "gauge"),
            ("uplink_fib_kernel_requests_total", "counter"),
            ("uplink_fib_kernel_errors_total", "counter"),
            ("uplink_fib_resyncs_total", "counter"),
            ("uplink_fib_retries_total", "counter"),
            ("uplink_announcements", "gauge"),
            ("uplink_config_reloads_total", "counter"),
            ("uplink_config_last_reload_successful", "gauge"),
            ("uplink_config_last_reload_success_timestamp_seconds", "gauge"),
            ("uplink_network_policies", "gauge"),
            ("uplink_network_policy_status", "gauge"),
            ("uplink_network_policy_last_transition_timestamp_seconds", "gauge"),
            ("uplink_kubernetes_objects", "gauge"),
            ("uplink_kubernetes_watch_up", "gauge"),
            ("uplink_kubernetes_refused_objects", "gauge"),
            ("uplink_layer2_frames_dropped_total", "counter"),
            ("uplink_layer2_members_alive", "gauge"),
            ("uplink_layer2_membership_refused_total", "counter"),
        ];
        let ours: Vec<(String, String)> =
            types.iter().filter(|(n, _)| n.starts_with("uplink_")).cloned().collect();
        let mut expected: Vec<(String, String)> =
            expect.iter().map(|(n, t)| (n.to_string(), t.to_string())).collect();
        expected.sort();
        assert_eq!(ours, expected, "families are sorted by name:\n{text}");
        let v4 = r#"{peer="172.18.20.1",vrf="default"}"#;
        assert_eq!(sample(&text, &format!("uplink_bgp_established_total{v4}")), Some("11"));
        assert_eq!(sample(&text, &format!("uplink_bgp_dropped_total{v4}")), Some("12"));
        assert_eq!(
            sample(&text, r#"uplink_bgp_loc_rib_prefixes{vrf="default",family="ipv6-unicast"}"#),
            Some("31")
        );
        assert_eq!(
            sample(&text, r#"uplink_fib_routes{vrf="default",state="installed"}"#),
            Some("50")
        );
        assert_eq!(sample(&text, "uplink_fib_kernel_requests_total"), Some("51"));
        assert_eq!(
            sample(
                &text,
                r#"uplink_announcements{vrf="default",origin="service",state="withdrawn",reason="drained"}"#
            ),
            Some("3")
        );
        assert_eq!(sample(&text, r#"uplink_config_reloads_total{result="failure"}"#), Some("1"));
        // MetalLB's own names, for its alert rules.
        assert_eq!(sample(&text, "metallb_k8s_client_config_loaded_bool"), Some("1"));
        assert_eq!(sample(&text, "metallb_k8s_client_config_stale_bool"), Some("1"));
        assert_eq!(sample(&text, r#"metallb_allocator_addresses_total{pool="vips"}"#), Some("254"));
        assert_eq!(
            sample(&text, r#"metallb_allocator_addresses_in_use_total{pool="vips"}"#),
            Some("3")
        );
        assert_eq!(
            sample(
                &text,
                r#"metallb_speaker_announced{service="shop/web",protocol="bgp",node="wk1",ip="192.0.2.7"}"#
            ),
            Some("1")
        );
        for (name, kind) in [
            ("metallb_allocator_addresses_total", "gauge"),
            ("metallb_allocator_addresses_in_use_total", "gauge"),
            ("metallb_speaker_announced", "gauge"),
            // Upstream's counters without `_total` are typed as upstream types them.
            ("frrk8s_bgp_opens_sent", "counter"),
            ("metallb_bgp_opens_sent", "counter"),
        ] {
            assert!(
                types.contains(&(name.to_string(), kind.to_string())),
                "{name} {kind}:\n{text}"
            );
        }
        assert_eq!(sample(&text, r#"uplink_kubernetes_objects{kind="Service"}"#), Some("3"));
        assert_eq!(sample(&text, r#"uplink_kubernetes_watch_up{kind="BGPPeer"}"#), Some("0"));
        assert_eq!(sample(&text, "uplink_config_last_reload_successful"), Some("0"));
        assert_eq!(
            sample(&text, "uplink_config_last_reload_success_timestamp_seconds"),
            Some("1700")
        );
        assert_eq!(sample(&text, r#"uplink_network_policies{status="Available"}"#), Some("1"));
        assert_eq!(sample(&text, r#"uplink_network_policies{status="Pending"}"#), Some("0"));
        assert_eq!(
            sample(&text, r#"uplink_network_policy_status{policy="enp3s0-wk1",status="Failing"}"#),
            Some("1")
        );
        assert_eq!(
            sample(
                &text,
                r#"uplink_network_policy_last_transition_timestamp_seconds{policy="enp3s0-wk1"}"#
            ),
            Some("1900")
        );
        let version = format!(r#"uplink_build_info{{version="{}"}}"#, env!("CARGO_PKG_VERSION"));
        assert_eq!(sample(&text, &version), Some("1"));
    }

    /// Every metric name the shipped Grafana dashboard (docs/grafana/uplink.json) queries is
    /// one the endpoint exports (tests/observability.rs runs its queries on a real Prometheus).
    #[test]
    fn the_dashboard_queries_exported_families() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/grafana/uplink.json");
        let dashboard: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
        let text = encode(&snapshot()).unwrap();
        let exported: Vec<String> = types(&text).into_iter().map(|(name, _)| name).collect();
        let mut used = Vec::new();
        let mut exprs = Vec::new();
        collect_exprs(&dashboard, &mut exprs);
        assert!(exprs.len() > 20, "{exprs:?}");
        for expr in &exprs {
            for (at, _) in expr.match_indices(['f', 'm', 'u']) {
                let rest = &expr[at..];
                let boundary =
                    expr[..at].chars().last().is_none_or(|c| !c.is_alphanumeric() && c != '_');
                let prefixed =
                    ["frrk8s_", "metallb_", "uplink_"].iter().any(|p| rest.starts_with(p));
                if boundary && prefixed {
                    let name: String = rest
                        .chars()
                        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                        .collect();
                    used.push(name);
                }
            }
        }
        assert!(used.len() > 20, "{used:?}");
        for name in &used {
            assert!(exported.contains(name), "the dashboard queries {name}, which is not exported");
        }
    }

    fn collect_exprs(value: &serde_json::Value, out: &mut Vec<String>) {
        match value {
            serde_json::Value::Object(map) => {
                for (key, v) in map {
                    match (key.as_str(), v) {
                        ("expr", serde_json::Value::String(expr)) => out.push(expr.clone()),
                        _ => collect_exprs(v, out),
                    }
                }
            }
            serde_json::Value::Array(items) => items.iter().for_each(|v| collect_exprs(v, out)),
            _ => {}
        }
    }

    #[test]
    fn every_family_is_declared_once_with_its_labels() {
        let text = encode(&snapshot()).unwrap();
        let types = types(&text);
        let mut names: Vec<&String> = types.iter().map(|(n, _)| n).collect();
        let count = names.len();
        names.dedup();
        assert_eq!(names.len(), count, "a family declared twice");
        // Every sample line belongs to the family declared just above it.
        let mut current = String::new();
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix("# TYPE ") {
                current = rest.split(' ').next().unwrap().to_string();
            } else if !line.starts_with('#') {
                let name = line.split(['{', ' ']).next().unwrap();
                assert_eq!(name, current, "{line}");
            }
        }
    }
}
