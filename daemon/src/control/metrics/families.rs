//! Every metric family the endpoint exports: name, HELP text, type and labels.
//!
//! The `frrk8s_*` and `metallb_*` families repeat upstream's names, HELP texts and labels
//! exactly, so dashboards and alerts written for frr-k8s and MetalLB work unchanged:
//!
//! - frr-k8s (`github.com/metallb/frr-k8s`): `cmd/metrics/collector/metrics.go` (namespace
//!   `frrk8s`, the shared names and HELP texts), `cmd/metrics/collector/bgp.go` (the BGP
//!   counters, labels `peer` and `vrf`, `peer` being the neighbor address) and
//!   `cmd/metrics/collector/bfd.go` (the BFD families, same labels).
//! - MetalLB (`github.com/metallb/metallb`): `internal/bgp/metrics/metrics.go` (namespace
//!   `metallb`), `frr-tools/metrics/collector/bgp.go` and `bfd.go` (the exporter of MetalLB's
//!   FRR mode: the same families as frr-k8s without `received_prefixes_total`, and a BGP
//!   `peer` label of `address:port`; the BFD `peer` is the bare address).
//!
//! Upstream's Go collectors declare some counters whose names do not end in `_total`
//! (`frrk8s_bgp_opens_sent`, ...), which the Prometheus text format (0.0.4) allows.
//! `prometheus-client` writes every counter with a `_total` suffix (the OpenMetrics rule), so
//! those are encoded as untyped samples under upstream's exact names and their `TYPE` line is
//! set to `counter` afterwards (`encode::encode`): the scrape reads as upstream's does.

use std::fmt;

/// A family's type as the text format declares it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Gauge,
    /// A counter; its name ends in `_total`, which the encoder adds back.
    Counter,
    /// A counter whose upstream name does not end in `_total` (see the module doc).
    UpstreamCounter,
}

/// One metric family.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Family {
    /// The sample name as scraped.
    pub name: &'static str,
    pub help: &'static str,
    pub kind: Kind,
    pub labels: &'static [&'static str],
}

impl fmt::Display for Family {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name)
    }
}

const PEER_VRF: &[&str] = &["peer", "vrf"];

const fn peer_family(name: &'static str, help: &'static str, kind: Kind) -> Family {
    Family { name, help, kind, labels: PEER_VRF }
}

/// What one BGP family reads from a neighbor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BgpValue {
    SessionUp,
    AnnouncedPrefixes,
    ReceivedPrefixes,
    OpensSent,
    OpensReceived,
    NotificationsSent,
    UpdatesSent,
    UpdatesReceived,
    KeepalivesSent,
    KeepalivesReceived,
    RouteRefreshSent,
    TotalSent,
    TotalReceived,
}

/// An upstream BGP family under its frr-k8s name and, where MetalLB exports it too, its
/// MetalLB name.
pub struct BgpFamily {
    pub frrk8s: Family,
    pub metallb: Option<Family>,
    pub value: BgpValue,
}

const fn bgp(
    frrk8s: &'static str,
    metallb: Option<&'static str>,
    help: &'static str,
    kind: Kind,
    value: BgpValue,
) -> BgpFamily {
    let metallb = match metallb {
        Some(name) => Some(peer_family(name, help, kind)),
        None => None,
    };
    BgpFamily { frrk8s: peer_family(frrk8s, help, kind), metallb, value }
}

/// frr-k8s `cmd/metrics/collector/bgp.go`, MetalLB `frr-tools/metrics/collector/bgp.go`.
pub const BGP: [BgpFamily; 13] = [
    bgp(
        "frrk8s_bgp_session_up",
        Some("metallb_bgp_session_up"),
        "BGP session state (1 is up, 0 is down)",
        Kind::Gauge,
        BgpValue::SessionUp,
    ),
    bgp(
        "frrk8s_bgp_announced_prefixes_total",
        Some("metallb_bgp_announced_prefixes_total"),
        "Number of prefixes currently being advertised on the BGP session",
        Kind::Gauge,
        BgpValue::AnnouncedPrefixes,
    ),
    // frr-k8s only: MetalLB's FRR-mode collector has no received count.
    bgp(
        "frrk8s_bgp_received_prefixes_total",
        None,
        "Number of prefixes currently being received on the BGP session",
        Kind::Gauge,
        BgpValue::ReceivedPrefixes,
    ),
    bgp(
        "frrk8s_bgp_opens_sent",
        Some("metallb_bgp_opens_sent"),
        "Number of BGP open messages sent",
        Kind::UpstreamCounter,
        BgpValue::OpensSent,
    ),
    bgp(
        "frrk8s_bgp_opens_received",
        Some("metallb_bgp_opens_received"),
        "Number of BGP open messages received",
        Kind::UpstreamCounter,
        BgpValue::OpensReceived,
    ),
    bgp(
        "frrk8s_bgp_notifications_sent",
        Some("metallb_bgp_notifications_sent"),
        "Number of BGP notification messages sent",
        Kind::UpstreamCounter,
        BgpValue::NotificationsSent,
    ),
    bgp(
        "frrk8s_bgp_updates_total",
        Some("metallb_bgp_updates_total"),
        "Number of BGP UPDATE messages sent",
        Kind::Counter,
        BgpValue::UpdatesSent,
    ),
    bgp(
        "frrk8s_bgp_updates_total_received",
        Some("metallb_bgp_updates_total_received"),
        "Number of BGP UPDATE messages received",
        Kind::UpstreamCounter,
        BgpValue::UpdatesReceived,
    ),
    bgp(
        "frrk8s_bgp_keepalives_sent",
        Some("metallb_bgp_keepalives_sent"),
        "Number of BGP keepalive messages sent",
        Kind::UpstreamCounter,
        BgpValue::KeepalivesSent,
    ),
    bgp(
        "frrk8s_bgp_keepalives_received",
        Some("metallb_bgp_keepalives_received"),
        "Number of BGP keepalive messages received",
        Kind::UpstreamCounter,
        BgpValue::KeepalivesReceived,
    ),
    bgp(
        "frrk8s_bgp_route_refresh_sent",
        Some("metallb_bgp_route_refresh_sent"),
        "Number of BGP route refresh messages sent",
        Kind::UpstreamCounter,
        BgpValue::RouteRefreshSent,
    ),
    bgp(
        "frrk8s_bgp_total_sent",
        Some("metallb_bgp_total_sent"),
        "Number of total BGP messages sent",
        Kind::UpstreamCounter,
        BgpValue::TotalSent,
    ),
    bgp(
        "frrk8s_bgp_total_received",
        Some("metallb_bgp_total_received"),
        "Number of total BGP messages received",
        Kind::UpstreamCounter,
        BgpValue::TotalReceived,
    ),
];

/// What one BFD family reads from a BFD session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BfdValue {
    SessionUp,
    ControlPacketInput,
    ControlPacketOutput,
    EchoPacketInput,
    EchoPacketOutput,
    SessionUpEvents,
    SessionDownEvents,
    /// FRR's bfdd counts the state changes it reports to its clients through zebra; uplink's
    /// BFD reports each state change to its BGP session directly: the same number.
    ZebraNotifications,
}

/// An upstream BFD family under its frr-k8s and MetalLB names.
pub struct BfdFamily {
    pub frrk8s: Family,
    pub metallb: Family,
    pub value: BfdValue,
}

const fn bfd(
    frrk8s: &'static str,
    metallb: &'static str,
    help: &'static str,
    kind: Kind,
    value: BfdValue,
) -> BfdFamily {
    BfdFamily {
        frrk8s: peer_family(frrk8s, help, kind),
        metallb: peer_family(metallb, help, kind),
        value,
    }
}

/// frr-k8s `cmd/metrics/collector/bfd.go`, MetalLB `frr-tools/metrics/collector/bfd.go`.
pub const BFD: [BfdFamily; 8] = [
    bfd(
        "frrk8s_bfd_session_up",
        "metallb_bfd_session_up",
        "BFD session state (1 is up, 0 is down)",
        Kind::Gauge,
        BfdValue::SessionUp,
    ),
    bfd(
        "frrk8s_bfd_control_packet_input",
        "metallb_bfd_control_packet_input",
        "Number of received BFD control packets",
        Kind::UpstreamCounter,
        BfdValue::ControlPacketInput,
    ),
    bfd(
        "frrk8s_bfd_control_packet_output",
        "metallb_bfd_control_packet_output",
        "Number of sent BFD control packets",
        Kind::UpstreamCounter,
        BfdValue::ControlPacketOutput,
    ),
    bfd(
        "frrk8s_bfd_echo_packet_input",
        "metallb_bfd_echo_packet_input",
        "Number of received BFD echo packets",
        Kind::UpstreamCounter,
        BfdValue::EchoPacketInput,
    ),
    bfd(
        "frrk8s_bfd_echo_packet_output",
        "metallb_bfd_echo_packet_output",
        "Number of sent BFD echo packets",
        Kind::UpstreamCounter,
        BfdValue::EchoPacketOutput,
    ),
    bfd(
        "frrk8s_bfd_session_up_events",
        "metallb_bfd_session_up_events",
        "Number of BFD session up events",
        Kind::UpstreamCounter,
        BfdValue::SessionUpEvents,
    ),
    bfd(
        "frrk8s_bfd_session_down_events",
        "metallb_bfd_session_down_events",
        "Number of BFD session down events",
        Kind::UpstreamCounter,
        BfdValue::SessionDownEvents,
    ),
    bfd(
        "frrk8s_bfd_zebra_notifications",
        "metallb_bfd_zebra_notifications",
        "Number of BFD zebra notifications",
        Kind::UpstreamCounter,
        BfdValue::ZebraNotifications,
    ),
];

// uplink's own families.

pub const BUILD_INFO: Family = Family {
    name: "uplink_build_info",
    help: "Always 1; the version label says which uplink runs",
    kind: Kind::Gauge,
    labels: &["version"],
};

pub const BGP_ESTABLISHED: Family = peer_family(
    "uplink_bgp_established_total",
    "Number of times the BGP session reached Established",
    Kind::Counter,
);

pub const BGP_DROPPED: Family = peer_family(
    "uplink_bgp_dropped_total",
    "Number of times an Established BGP session went down",
    Kind::Counter,
);

pub const BGP_NOTIFICATIONS_RECEIVED: Family = peer_family(
    "uplink_bgp_notifications_received_total",
    "Number of BGP NOTIFICATION messages received",
    Kind::Counter,
);

pub const BGP_ROUTE_REFRESH_RECEIVED: Family = peer_family(
    "uplink_bgp_route_refresh_received_total",
    "Number of BGP ROUTE-REFRESH messages received",
    Kind::Counter,
);

pub const BGP_LOC_RIB_PREFIXES: Family = Family {
    name: "uplink_bgp_loc_rib_prefixes",
    help: "Number of destinations in the Loc-RIB of the router",
    kind: Kind::Gauge,
    labels: &["vrf", "family"],
};

pub const BFD_CONTROL_PACKET_DISCARDED: Family = peer_family(
    "uplink_bfd_control_packet_discarded_total",
    "Number of BFD control packets for the session that were discarded (authentication, \
     discriminator or TTL checks)",
    Kind::Counter,
);

pub const FIB_ROUTES: Family = Family {
    name: "uplink_fib_routes",
    help: "Number of routes the FIB writer holds for the VRF's table, by state (installed, \
           pending: waiting for a next hop or the kernel, failed: refused by the kernel)",
    kind: Kind::Gauge,
    labels: &["vrf", "state"],
};

pub const FIB_KERNEL_REQUESTS: Family = Family {
    name: "uplink_fib_kernel_requests_total",
    help: "Number of netlink requests sent to the kernel (routes, nexthop objects and groups, \
           deletions)",
    kind: Kind::Counter,
    labels: &[],
};

pub const FIB_KERNEL_ERRORS: Family = Family {
    name: "uplink_fib_kernel_errors_total",
    help: "Number of netlink requests the kernel refused",
    kind: Kind::Counter,
    labels: &[],
};

pub const FIB_RESYNCS: Family = Family {
    name: "uplink_fib_resyncs_total",
    help: "Number of times kernel notifications or answers were lost (or objects refused) and \
           the FIB was read back in full",
    kind: Kind::Counter,
    labels: &[],
};

pub const FIB_RETRIES: Family = Family {
    name: "uplink_fib_retries_total",
    help: "Number of failed kernel writes (routes, deletions, nexthop objects) tried again \
           after their backoff",
    kind: Kind::Counter,
    labels: &[],
};

pub const ANNOUNCEMENTS: Family = Family {
    name: "uplink_announcements",
    help: "Number of prefixes the node could originate, by origin and state (announced, or \
           withdrawn with the reason)",
    kind: Kind::Gauge,
    labels: &["vrf", "origin", "state", "reason"],
};

pub const RELOADS: Family = Family {
    name: "uplink_config_reloads_total",
    help: "Number of config reloads, by result (success: applied, failure: rejected)",
    kind: Kind::Counter,
    labels: &["result"],
};

pub const RELOAD_SUCCESSFUL: Family = Family {
    name: "uplink_config_last_reload_successful",
    help: "Whether the last config reload was applied (1) or rejected (0)",
    kind: Kind::Gauge,
    labels: &[],
};

pub const RELOAD_SUCCESS_TIMESTAMP: Family = Family {
    name: "uplink_config_last_reload_success_timestamp_seconds",
    help: "Unix time of the last config applied (at start or by a reload)",
    kind: Kind::Gauge,
    labels: &[],
};

// MetalLB's allocator and speaker, under their names, HELP texts and labels
// (`internal/allocator/stats.go`, `speaker/main.go`), so its alert rules
// (MetalLBAddressPoolExhausted, MetalLBAddressPoolUsage*) work unchanged.

/// MetalLB's native BGP mode (`internal/bgp/native/stats.go`): the prefixes that should be
/// advertised on the session, set when the wanted set changes, before they are sent; `peer`
/// is `address:port` and there is no `vrf` label.
pub const BGP_PENDING_PREFIXES: Family = Family {
    name: "metallb_bgp_pending_prefixes_total",
    help: "Number of prefixes that should be advertised on the BGP session",
    kind: Kind::Gauge,
    labels: &["peer"],
};

pub const ALLOCATOR_ADDRESSES_TOTAL: Family = Family {
    name: "metallb_allocator_addresses_total",
    help: "Number of usable IP addresses, per pool",
    kind: Kind::Gauge,
    labels: &["pool"],
};

pub const ALLOCATOR_ADDRESSES_IN_USE: Family = Family {
    name: "metallb_allocator_addresses_in_use_total",
    help: "Number of IP addresses in use, per pool",
    kind: Kind::Gauge,
    labels: &["pool"],
};

pub const SPEAKER_ANNOUNCED: Family = Family {
    name: "metallb_speaker_announced",
    help: "Services being announced from this node. This is desired state, it does not \
           guarantee that the routing protocols have converged.",
    kind: Kind::Gauge,
    labels: &["service", "protocol", "node", "ip"],
};

// Layer 2 mode: MetalLB's speaker's families (`internal/layer2/stats.go`), counters under
// upstream's names without `_total`, by the address answered for.

pub const LAYER2_REQUESTS: Family = Family {
    name: "metallb_layer2_requests_received",
    help: "Number of layer2 requests received for owned IPs",
    kind: Kind::UpstreamCounter,
    labels: &["ip"],
};

pub const LAYER2_RESPONSES: Family = Family {
    name: "metallb_layer2_responses_sent",
    help: "Number of layer2 responses sent for owned IPs in response to requests",
    kind: Kind::UpstreamCounter,
    labels: &["ip"],
};

pub const LAYER2_GRATUITOUS: Family = Family {
    name: "metallb_layer2_gratuitous_sent",
    help: "Number of gratuitous layer2 packets sent for owned IPs as a result of failovers",
    kind: Kind::UpstreamCounter,
    labels: &["ip"],
};

pub const LAYER2_DROPPED: Family = Family {
    name: "uplink_layer2_frames_dropped_total",
    help: "ARP and NDP frames that got no answer, by reason",
    kind: Kind::Counter,
    labels: &["reason"],
};

pub const LAYER2_MEMBERS: Family = Family {
    name: "uplink_layer2_members_alive",
    help: "Members of the layer 2 membership this node sees alive, itself included",
    kind: Kind::Gauge,
    labels: &[],
};

pub const LAYER2_MEMBERSHIP_REFUSED: Family = Family {
    name: "uplink_layer2_membership_refused_total",
    help: "Membership datagrams refused, by reason (rate, malformed, wrong_key, protocol)",
    kind: Kind::Counter,
    labels: &["reason"],
};

// The Kubernetes source, with `[kubernetes]`. The first two are MetalLB's speaker's, under
// their names and meaning, so its alert rules (MetalLBStaleConfig, MetalLBConfigNotLoaded)
// work unchanged.

pub const K8S_CONFIG_LOADED: Family = Family {
    name: "metallb_k8s_client_config_loaded_bool",
    help: "1 if the configuration with the Kubernetes API's objects was loaded at least once",
    kind: Kind::Gauge,
    labels: &[],
};

pub const K8S_CONFIG_STALE: Family = Family {
    name: "metallb_k8s_client_config_stale_bool",
    help: "1 if running on a stale configuration: a watch of the API is failing or relisting, \
           or an object was refused",
    kind: Kind::Gauge,
    labels: &[],
};

pub const K8S_OBJECTS: Family = Family {
    name: "uplink_kubernetes_objects",
    help: "Number of objects read from the Kubernetes API, by kind",
    kind: Kind::Gauge,
    labels: &["kind"],
};

pub const K8S_WATCH_UP: Family = Family {
    name: "uplink_kubernetes_watch_up",
    help: "1 if the kind is listed and watched, 0 if its watch is failing, relisting, not \
           served (no CRD) or forbidden",
    kind: Kind::Gauge,
    labels: &["kind"],
};

pub const K8S_REFUSED: Family = Family {
    name: "uplink_kubernetes_refused_objects",
    help: "Number of objects from the Kubernetes API the config refused at the last reload \
           (left out; `uplink show kubernetes` says why)",
    kind: Kind::Gauge,
    labels: &[],
};

pub const NETWORK_POLICIES: Family = Family {
    name: "uplink_network_policies",
    help: "Number of the node's selected network policies by enactment status (Pending, \
           Progressing, Available, Failing, Aborted), as NodeNetworkConfigurationEnactment has it",
    kind: Kind::Gauge,
    labels: &["status"],
};

pub const NETWORK_POLICY_STATUS: Family = Family {
    name: "uplink_network_policy_status",
    help: "1 for each selected network policy's current enactment status",
    kind: Kind::Gauge,
    labels: &["policy", "status"],
};

pub const NETWORK_POLICY_TRANSITION_TIMESTAMP: Family = Family {
    name: "uplink_network_policy_last_transition_timestamp_seconds",
    help: "Unix time of each selected network policy's last status change (0: never applied)",
    kind: Kind::Gauge,
    labels: &["policy"],
};
