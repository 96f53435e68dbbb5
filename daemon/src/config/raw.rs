//! The TOML file as written: every value keeps its span so validation can point at it.
//!
//! Integers are read as `i64` and strings as `String`; ranges, addresses, durations and
//! communities are checked afterwards in `validate`, so one file reports all of its problems
//! instead of stopping at the first one serde meets. Unknown fields are rejected here
//! (`deny_unknown_fields`), with the list of valid names in the message.

use std::fmt;

use serde::de::{self, Deserializer, Visitor};
use serde::Deserialize;
use toml::Spanned;

use super::announce::{
    RawAdvertisement, RawCommunityAlias, RawImport, RawL2Advertisement, RawNetwork, RawNode,
    RawPool, RawRouteAdvertisement, RawService,
};

use super::network_validate::{RawNetworkPolicy, RawNetworkSettings};

pub(crate) type S<T> = Spanned<T>;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, expecting = "a config file")]
pub(crate) struct RawFile {
    pub bgp: Option<RawBgp>,
    #[serde(default)]
    pub always_block: Vec<S<String>>,
    pub fib: Option<S<RawFib>>,
    pub metrics: Option<S<RawMetrics>>,
    pub kubernetes: Option<S<RawKubernetes>>,
    pub layer2: Option<S<RawLayer2>>,
    /// How long `uplink drain` announces GRACEFUL_SHUTDOWN before withdrawing the VIPs.
    pub drain_time: Option<S<RawDuration>>,
    /// Node-wide graceful restart timers (RFC 4724); neighbors opt in with
    /// `graceful_restart = true`.
    pub graceful_restart: Option<S<RawGracefulRestart>>,
    // Announcement sections (`config::announce`).
    pub node: Option<S<RawNode>>,
    #[serde(default)]
    pub pools: Vec<S<RawPool>>,
    #[serde(default)]
    pub services: Vec<S<RawService>>,
    #[serde(default)]
    pub advertisements: Vec<S<RawAdvertisement>>,
    #[serde(default)]
    pub l2_advertisements: Vec<S<RawL2Advertisement>>,
    #[serde(default)]
    pub communities: Vec<S<RawCommunityAlias>>,
    #[serde(default)]
    pub networks: Vec<S<RawNetwork>>,
    #[serde(default)]
    pub route_advertisements: Vec<S<RawRouteAdvertisement>>,
    // The node's own network (`config::network`).
    pub network: Option<S<RawNetworkSettings>>,
    #[serde(default)]
    pub network_policies: Vec<S<RawNetworkPolicy>>,
}

/// Node-wide FIB settings (per-router ones are `install`, `table`, `metric`).
#[derive(Debug, Deserialize)]
#[serde(
    deny_unknown_fields,
    expecting = "a [graceful_restart] table (restart_time, stale_path_time, select_defer_time)"
)]
pub(crate) struct RawGracefulRestart {
    pub restart_time: Option<S<RawDuration>>,
    pub stale_path_time: Option<S<RawDuration>>,
    pub select_defer_time: Option<S<RawDuration>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, expecting = "a [fib] table")]
pub(crate) struct RawFib {
    /// `false`: never use kernel nexthop objects, install ECMP routes with RTA_MULTIPATH
    /// (FRR: `no zebra nexthop kernel enable`).
    pub nexthop_objects: Option<bool>,
    /// `true` keeps the kernel's nexthop compatibility mode (`net.ipv4.nexthop_compat_mode`),
    /// which uplink otherwise turns off: see `FibConfig::nexthop_compat_mode`.
    pub nexthop_compat_mode: Option<bool>,
}

/// `[metrics]`: the Prometheus endpoint (off unless `listen` is set).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, expecting = "a [metrics] table")]
pub(crate) struct RawMetrics {
    /// `"127.0.0.1:9181"`: where `GET /metrics` is served.
    pub listen: Option<S<String>>,
    /// `["metallb", "uplink"]`: the families exported, by namespace (all when left out).
    pub namespaces: Option<S<Vec<String>>>,
}

/// `[kubernetes]`: read Services, EndpointSlices, the node's labels and the MetalLB / frr-k8s
/// objects from the API server (with the `kubernetes` build feature).
#[derive(Debug, Deserialize)]
#[serde(
    deny_unknown_fields,
    expecting = "a [kubernetes] table (kubeconfig, namespace, load_balancer_class, watch_timeout)"
)]
pub(crate) struct RawKubernetes {
    /// A kubeconfig file; left out: the in-cluster service account.
    pub kubeconfig: Option<S<String>>,
    /// Where the MetalLB and frr-k8s objects live.
    pub namespace: Option<S<String>>,
    /// The `loadBalancerClass` of the Services uplink answers for (MetalLB's `--lb-class`).
    pub load_balancer_class: Option<S<String>>,
    /// How long one watch request lasts before it is renewed.
    pub watch_timeout: Option<S<RawDuration>>,
}

/// `[layer2]`: the membership among the nodes' uplinks that layer 2 mode chooses the
/// answering node among (`l2::membership`).
#[derive(Debug, Deserialize)]
#[serde(
    deny_unknown_fields,
    expecting = "a [layer2] table (address, members, secret_file, detection)"
)]
pub(crate) struct RawLayer2 {
    /// This node's membership address, `"ip"` or `"ip:port"` (port 7946, memberlist's).
    pub address: S<String>,
    /// The other nodes' membership addresses, to join by.
    #[serde(default)]
    pub members: Vec<S<String>>,
    /// The key every member shares (MetalLB's memberlist secret).
    pub secret_file: Option<S<String>>,
    /// From a node's death to the others seeing it down.
    pub detection: Option<S<RawDuration>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, expecting = "a [bgp] table")]
pub(crate) struct RawBgp {
    #[serde(default)]
    pub routers: Vec<S<RawRouter>>,
    #[serde(default)]
    pub bfd_profiles: Vec<S<RawBfdProfile>>,
    /// The `max_prefixes` of every neighbor that sets none (a node's guard against a peer
    /// that leaks a full table into its kernel).
    pub default_max_prefixes: Option<S<i64>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, expecting = "a [[bgp.routers]] table")]
pub(crate) struct RawRouter {
    pub asn: S<i64>,
    /// Like an FRRConfiguration's metadata.labels: what a RouteAdvertisements'
    /// `frr_configuration_selector` matches to pick this table's neighbors.
    #[serde(default)]
    pub labels: std::collections::BTreeMap<String, String>,
    pub id: Option<S<String>>,
    pub vrf: Option<S<String>>,
    #[serde(default)]
    pub prefixes: Vec<S<String>>,
    pub maximum_paths: Option<S<i64>>,
    pub multipath_relax: Option<S<bool>>,
    pub install: Option<S<bool>>,
    pub table: Option<S<i64>>,
    pub metric: Option<S<i64>>,
    #[serde(default)]
    pub neighbors: Vec<S<RawNeighbor>>,
    /// Route leaking: VRFs whose routes this router imports.
    #[serde(default)]
    pub imports: Vec<S<RawImport>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, expecting = "a [[bgp.routers.neighbors]] table")]
pub(crate) struct RawNeighbor {
    pub address: S<String>,
    pub asn: Option<S<i64>>,
    pub dynamic_asn: Option<S<String>>,
    pub port: Option<S<i64>>,
    pub source_address: Option<S<String>>,
    pub password: Option<S<String>>,
    pub password_file: Option<S<String>>,
    pub hold_time: Option<S<RawDuration>>,
    pub keepalive_time: Option<S<RawDuration>>,
    pub connect_time: Option<S<RawDuration>>,
    pub ebgp_multihop: Option<S<BoolOrInt>>,
    pub ttl_security: Option<S<BoolOrInt>>,
    pub passive: Option<S<bool>>,
    pub bfd_profile: Option<S<String>>,
    pub max_prefixes: Option<S<i64>>,
    pub max_prefixes_threshold: Option<S<i64>>,
    pub max_prefixes_warning_only: Option<S<bool>>,
    pub max_prefixes_restart_time: Option<S<RawDuration>>,
    pub send_hold_time: Option<S<RawDuration>>,
    pub minimum_hold_time: Option<S<RawDuration>>,
    pub graceful_restart: Option<S<bool>>,
    pub families: Option<S<Vec<S<String>>>>,
    pub to_advertise: Option<RawAdvertise>,
    pub to_receive: Option<RawReceive>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, expecting = "a to_advertise table")]
pub(crate) struct RawAdvertise {
    pub allowed: Option<RawAllowedOut>,
    #[serde(default)]
    pub with_local_pref: Vec<S<RawLocalPref>>,
    #[serde(default)]
    pub with_community: Vec<S<RawCommunityPrefixes>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, expecting = "an allowed table (mode, prefixes)")]
pub(crate) struct RawAllowedOut {
    pub mode: Option<S<String>>,
    pub prefixes: Option<S<Vec<S<String>>>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, expecting = "a table { local_pref, prefixes }")]
pub(crate) struct RawLocalPref {
    pub local_pref: S<i64>,
    #[serde(default)]
    pub prefixes: Vec<S<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, expecting = "a table { community, prefixes }")]
pub(crate) struct RawCommunityPrefixes {
    pub community: S<String>,
    #[serde(default)]
    pub prefixes: Vec<S<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, expecting = "a to_receive table")]
pub(crate) struct RawReceive {
    pub allowed: Option<RawAllowedIn>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, expecting = "an allowed table (mode, prefixes)")]
pub(crate) struct RawAllowedIn {
    pub mode: Option<S<String>>,
    pub prefixes: Option<S<Vec<S<RawPrefixMatch>>>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, expecting = "a table { prefix, ge, le }")]
pub(crate) struct RawPrefixMatch {
    pub prefix: S<String>,
    pub ge: Option<S<i64>>,
    pub le: Option<S<i64>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, expecting = "a [[bgp.bfd_profiles]] table")]
pub(crate) struct RawBfdProfile {
    pub name: S<String>,
    pub receive_interval: Option<S<RawDuration>>,
    pub transmit_interval: Option<S<RawDuration>>,
    pub detect_multiplier: Option<S<i64>>,
    pub echo_interval: Option<S<RawDuration>>,
    pub echo_mode: Option<S<bool>>,
    pub passive_mode: Option<S<bool>>,
    pub minimum_ttl: Option<S<i64>>,
    pub authentication: Option<S<super::bfd_auth::RawBfdAuthentication>>,
}

/// A duration as written: text to parse, or a bare number that gets a "write "90s"" hint.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum RawDuration {
    Text(String),
    Number(String),
}

impl<'de> Deserialize<'de> for RawDuration {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct DurationVisitor;
        impl Visitor<'_> for DurationVisitor {
            type Value = RawDuration;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(r#"a duration string such as "90s", "300ms" or "1m30s""#)
            }
            fn visit_str<E: de::Error>(self, value: &str) -> Result<RawDuration, E> {
                Ok(RawDuration::Text(value.to_string()))
            }
            fn visit_i64<E: de::Error>(self, value: i64) -> Result<RawDuration, E> {
                Ok(RawDuration::Number(value.to_string()))
            }
            fn visit_u64<E: de::Error>(self, value: u64) -> Result<RawDuration, E> {
                Ok(RawDuration::Number(value.to_string()))
            }
            fn visit_f64<E: de::Error>(self, value: f64) -> Result<RawDuration, E> {
                Ok(RawDuration::Number(value.to_string()))
            }
        }
        deserializer.deserialize_any(DurationVisitor)
    }
}

/// `true`/`false` or an integer, for `ebgp_multihop` and `ttl_security`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum BoolOrInt {
    Bool(bool),
    Int(i64),
}

impl<'de> Deserialize<'de> for BoolOrInt {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct BoolOrIntVisitor;
        impl Visitor<'_> for BoolOrIntVisitor {
            type Value = BoolOrInt;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("true, false or an integer")
            }
            fn visit_bool<E: de::Error>(self, value: bool) -> Result<BoolOrInt, E> {
                Ok(BoolOrInt::Bool(value))
            }
            fn visit_i64<E: de::Error>(self, value: i64) -> Result<BoolOrInt, E> {
                Ok(BoolOrInt::Int(value))
            }
            fn visit_u64<E: de::Error>(self, value: u64) -> Result<BoolOrInt, E> {
                Ok(BoolOrInt::Int(i64::try_from(value).unwrap_or(i64::MAX)))
            }
        }
        deserializer.deserialize_any(BoolOrIntVisitor)
    }
}
