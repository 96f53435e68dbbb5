//! The validated, merged configuration: plain values, defaults applied, no source spans.
//!
//! Field names follow the snake_case of frr-k8s `FRRConfiguration.spec.bgp`. Lists are kept in
//! a deterministic order (first-seen order across files for neighbors and routers, sorted for
//! prefix sets) so that two loads of the same files compare equal and diffs stay small.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use ipnet::IpNet;
use serde::Serialize;

use super::announce::AnnounceConfig;
use super::community::Community;
use super::duration;

/// The whole node configuration.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Config {
    pub bgp: BgpConfig,
    /// Prefixes never accepted from any peer, whatever a neighbor's `to_receive` says.
    pub always_block: Vec<IpNet>,
    pub fib: FibConfig,
    pub metrics: MetricsConfig,
    /// `[kubernetes]`: the API server as a source of objects; `None` reads files only.
    pub kubernetes: Option<KubernetesConfig>,
    /// `[layer2]`: the membership layer 2 mode answers by; `None`: this node answers for no
    /// layer 2 address (it could not know whether another does).
    pub layer2: Option<Layer2Config>,
    /// How long `uplink drain` (and a shutdown) announces GRACEFUL_SHUTDOWN (RFC 8326) before
    /// it withdraws the service addresses.
    #[serde(serialize_with = "duration::serialize")]
    pub drain_time: Duration,
    pub graceful_restart: GracefulRestartConfig,
    /// The files this config was loaded from, in merge order (not the Kubernetes objects).
    pub files: Vec<PathBuf>,
    /// What the node announces besides router `prefixes` (`crate::announce`). Shared: the
    /// announcer keeps the config it computes from, and a reload hands it over uncopied
    /// (tens of thousands of Services from the API).
    pub announce: Arc<AnnounceConfig>,
    /// The node's own network: `[network]` and the policies selecting this node.
    pub network: super::network::NetworkConfig,
    /// Manifest documents of kinds uplink does not act on (an application's `Deployment` in
    /// the file that holds its pool), left out; `uplink check` and the log name each.
    pub skipped: Vec<SkippedDocument>,
}

/// A manifest document left out because uplink does not act on its kind.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SkippedDocument {
    pub file: PathBuf,
    pub line: usize,
    /// Its place in the file (`documents[N]`).
    pub index: usize,
    pub api_version: String,
    pub kind: String,
    pub name: String,
}

impl fmt::Display for SkippedDocument {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = if self.name.is_empty() { String::new() } else { format!(" \"{}\"", self.name) };
        write!(
            f,
            "{}:{}: documents[{}]: {}{name} ({}) skipped: uplink does not act on this kind",
            self.file.display(),
            self.line,
            self.index,
            self.kind,
            self.api_version
        )
    }
}

/// Node-wide FIB settings.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FibConfig {
    /// Install ECMP through kernel nexthop objects and groups (default); `false` installs
    /// routes with their hops inline (RTA_MULTIPATH), as on kernels without nexthop objects.
    pub nexthop_objects: bool,
    /// Keep the kernel's nexthop compatibility mode on. Off by default: uplink turns it off
    /// (`net.ipv4.nexthop_compat_mode = 0`), so replacing a group (a lost next hop) is one
    /// kernel event, not one notification per route using it; `ip route` then shows routes
    /// as `nhid N` and their hops are in `ip nexthop` (and `uplink show fib`). `true` leaves
    /// the kernel as it is, for software that reads next hops from routes.
    pub nexthop_compat_mode: bool,
}

/// A neighbor's part in graceful restart (RFC 4724), as FRR has it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum GracefulRestartMode {
    /// `graceful_restart = false`: no Graceful Restart capability, no End-of-RIB expected.
    Disabled,
    /// Left out (FRR's default): we keep a restarting peer's routes (RFC 4724 §4.2) and say
    /// so with a capability that lists no families (§3), which also makes FRR send
    /// End-of-RIB; our own restart does not preserve the peer's copy of our routes.
    #[default]
    Helper,
    /// `graceful_restart = true` (frr-k8s `enableGracefulRestart`): both roles; the peer keeps
    /// our routes while we restart, and the kernel keeps ours.
    Enabled,
}

impl std::fmt::Display for GracefulRestartMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            GracefulRestartMode::Disabled => "disabled",
            GracefulRestartMode::Helper => "helper only",
            GracefulRestartMode::Enabled => "enabled",
        })
    }
}

impl GracefulRestartMode {
    pub fn helps(self) -> bool {
        self != GracefulRestartMode::Disabled
    }

    pub fn restarts(self) -> bool {
        self == GracefulRestartMode::Enabled
    }
}

/// The Prometheus endpoint (`[metrics]`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct MetricsConfig {
    /// Where `GET /metrics` is served; `None` (the default) serves nothing.
    pub listen: Option<SocketAddr>,
    /// Which families a scrape holds, by the prefix of their names.
    pub namespaces: MetricNamespaces,
}

/// The metric namespaces a scrape exports (`[metrics] namespaces`): uplink's own families,
/// frr-k8s's (`frrk8s_*`) and MetalLB's (`metallb_*`). All three unless the config names
/// some: a cluster that scrapes only MetalLB's dashboards keeps one copy of each number.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct MetricNamespaces {
    pub uplink: bool,
    pub frrk8s: bool,
    pub metallb: bool,
}

impl Default for MetricNamespaces {
    fn default() -> Self {
        Self { uplink: true, frrk8s: true, metallb: true }
    }
}

impl MetricNamespaces {
    /// The names a config may write.
    pub const NAMES: [&'static str; 3] = ["uplink", "frrk8s", "metallb"];

    /// Whether the family `name` is exported.
    pub fn exports(&self, name: &str) -> bool {
        match name.split('_').next() {
            Some("frrk8s") => self.frrk8s,
            Some("metallb") => self.metallb,
            _ => self.uplink,
        }
    }

    /// The names, as the config writes them.
    pub fn names(&self) -> Vec<&'static str> {
        let on = [self.uplink, self.frrk8s, self.metallb];
        Self::NAMES.iter().zip(on).filter(|(_, on)| *on).map(|(n, _)| *n).collect()
    }
}

/// Where the Kubernetes objects come from (`[kubernetes]`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct KubernetesConfig {
    /// A kubeconfig file; `None`: the in-cluster service account (`KUBERNETES_SERVICE_HOST`
    /// and the mounted token), as a pod reads it.
    pub kubeconfig: Option<PathBuf>,
    /// The namespace of the MetalLB and frr-k8s objects (MetalLB's `metallb-system`).
    pub namespace: String,
    /// The `spec.loadBalancerClass` of the Services uplink answers for, as MetalLB's
    /// `--lb-class`; `None`: those without a class.
    pub load_balancer_class: Option<String>,
    /// How long one watch request lasts before it is renewed from where it was (the
    /// `timeoutSeconds` of each watch).
    #[serde(serialize_with = "duration::serialize")]
    pub watch_timeout: Duration,
}

/// The membership among the nodes' uplinks (`[layer2]`, `l2::membership`).
#[derive(Clone, PartialEq, Eq, Serialize)]
pub struct Layer2Config {
    /// Where this node's membership listens, as the others reach it.
    pub address: SocketAddr,
    /// The others' membership addresses, to join by.
    pub members: Vec<SocketAddr>,
    /// The key every member shares; never shown.
    #[serde(skip)]
    pub secret: Vec<u8>,
    /// From a node's death to the others seeing it down.
    #[serde(serialize_with = "duration::serialize")]
    pub detection: Duration,
}

impl fmt::Debug for Layer2Config {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Layer2Config")
            .field("address", &self.address)
            .field("members", &self.members)
            .field("secret", &"(hidden)")
            .field("detection", &self.detection)
            .finish()
    }
}

/// MetalLB's memberlist port, so the firewalls that let MetalLB's speakers talk let these.
pub const DEFAULT_LAYER2_PORT: u16 = 7946;

/// The detection time when `[layer2] detection` is left out: a failover (detection, then the
/// announcements) under two seconds.
pub const DEFAULT_LAYER2_DETECTION: Duration = Duration::from_secs(1);

/// MetalLB's namespace, where its objects live unless `[kubernetes] namespace` says otherwise.
pub const DEFAULT_KUBERNETES_NAMESPACE: &str = "metallb-system";

/// kube's default watch timeout (client-go renews its watches every 5 to 10 minutes).
pub const DEFAULT_WATCH_TIMEOUT: Duration = Duration::from_secs(290);

/// Node-wide graceful restart timers (RFC 4724); FRR's names and defaults.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GracefulRestartConfig {
    /// The Restart Time we advertise: how long peers keep our routes while we restart.
    #[serde(serialize_with = "duration::serialize")]
    pub restart_time: Duration,
    /// How long a restarted peer's stale routes are kept once its session is back, waiting for
    /// its End-of-RIB (FRR `stalepath-time`).
    #[serde(serialize_with = "duration::serialize")]
    pub stale_path_time: Duration,
    /// After our own restart, how long we wait for the End-of-RIB of our graceful-restart
    /// peers before the routes of the previous run that did not come back leave the kernel
    /// (FRR `select-defer-time`).
    #[serde(serialize_with = "duration::serialize")]
    pub select_defer_time: Duration,
}

impl Default for GracefulRestartConfig {
    fn default() -> Self {
        Self {
            restart_time: super::validate::DEFAULT_RESTART_TIME,
            stale_path_time: super::validate::DEFAULT_STALE_PATH_TIME,
            select_defer_time: super::validate::DEFAULT_SELECT_DEFER_TIME,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BgpConfig {
    /// One router per VRF; the default VRF is `vrf == ""`.
    pub routers: Vec<Router>,
    pub bfd_profiles: Vec<BfdProfile>,
    /// `[bgp] default_max_prefixes`: already applied to every neighbor that sets no
    /// `max_prefixes`; kept for `show running-config`.
    pub default_max_prefixes: Option<u32>,
}

/// How operators and FRR name a VRF: "default" for the default VRF (`""` in the config).
pub fn vrf_display_name(vrf: &str) -> &str {
    if vrf.is_empty() {
        "default"
    } else {
        vrf
    }
}

/// A BGP instance in one VRF.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Router {
    pub asn: u32,
    /// BGP Identifier; `None` lets the daemon pick one from the node's addresses.
    pub id: Option<Ipv4Addr>,
    /// VRF name; `""` is the default VRF.
    pub vrf: String,
    /// Prefixes this router originates.
    pub prefixes: Vec<IpNet>,
    /// Maximum number of ECMP paths installed per prefix.
    pub maximum_paths: u16,
    /// Whether paths from neighbours in different ASes may form one ECMP set.
    pub multipath_relax: bool,
    /// Whether the best paths are installed into the kernel FIB.
    pub install: bool,
    /// Kernel routing table for the routes; `None`: main for the default VRF, else the VRF
    /// device's table.
    pub table: Option<u32>,
    /// Kernel route metric (priority) of installed routes.
    pub metric: u32,
    pub neighbors: Vec<Neighbor>,
    /// VRFs whose routes this router imports (route leaking, frr-k8s `imports`).
    pub imports: Vec<String>,
    /// Files that define or extend this router, in merge order.
    pub sources: Vec<PathBuf>,
}

/// The peer's AS: a fixed number, or whatever it announces, constrained to iBGP or eBGP.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RemoteAsn {
    Fixed(u32),
    /// Accept the peer's AS if it equals ours.
    Internal,
    /// Accept the peer's AS if it differs from ours.
    External,
}

impl fmt::Display for RemoteAsn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Fixed(asn) => write!(f, "{asn}"),
            Self::Internal => f.write_str("internal"),
            Self::External => f.write_str("external"),
        }
    }
}

/// A number for `Fixed`, the strings `"internal"` / `"external"` otherwise.
impl Serialize for RemoteAsn {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            Self::Fixed(asn) => serializer.serialize_u32(*asn),
            Self::Internal | Self::External => serializer.collect_str(self),
        }
    }
}

/// A TCP-MD5 key. `Debug` and `Serialize` redact it so it never reaches logs or `show` output.
#[derive(Clone, PartialEq, Eq)]
pub struct Password(String);

impl Password {
    pub(crate) fn new(key: String) -> Self {
        Self(key)
    }

    /// The key itself, for the socket option only.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Password {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Password(<redacted>)")
    }
}

impl Serialize for Password {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str("<redacted>")
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum AddressFamily {
    Ipv4Unicast,
    Ipv6Unicast,
}

impl AddressFamily {
    pub fn of(address: IpAddr) -> Self {
        match address {
            IpAddr::V4(_) => Self::Ipv4Unicast,
            IpAddr::V6(_) => Self::Ipv6Unicast,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Self::Ipv4Unicast => "ipv4-unicast",
            Self::Ipv6Unicast => "ipv6-unicast",
        }
    }
}

/// FRR's `neighbor X maximum-prefix N [threshold] [warning-only|restart M]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct MaxPrefixes {
    /// More accepted prefixes than this end the session (Cease, RFC 4486 subcode 1).
    pub limit: u32,
    /// Percentage of `limit` at which a warning is logged once.
    pub threshold: u8,
    /// Only log when the limit is passed; keep the session and the routes.
    pub warning_only: bool,
    /// Start the session again this long after the Cease; `None`: only a reload or restart
    /// brings it back.
    #[serde(serialize_with = "duration::serialize_option")]
    pub restart_time: Option<Duration>,
}

/// One BGP session.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Neighbor {
    pub address: IpAddr,
    pub remote_asn: RemoteAsn,
    pub port: u16,
    pub source_address: Option<IpAddr>,
    pub password: Option<Password>,
    #[serde(serialize_with = "duration::serialize")]
    pub hold_time: Duration,
    #[serde(serialize_with = "duration::serialize")]
    pub keepalive_time: Duration,
    /// RFC 9687 SendHoldTimer: `None` is twice the negotiated hold time (BIRD's default),
    /// zero turns it off.
    #[serde(serialize_with = "duration::serialize_option")]
    pub send_hold_time: Option<Duration>,
    /// The smallest hold time the peer may propose (FRR `bgp minimum-holdtime`); zero accepts
    /// any the RFC allows, no hold time included.
    #[serde(serialize_with = "duration::serialize")]
    pub minimum_hold_time: Duration,
    /// Initial ConnectRetry interval.
    #[serde(serialize_with = "duration::serialize")]
    pub connect_time: Duration,
    /// Outgoing TTL for a peer more than one hop away; `None` means directly connected.
    pub ebgp_multihop: Option<u8>,
    /// GTSM (RFC 5082): the number of hops the peer may be away; `None` disables GTSM.
    pub ttl_security: Option<u8>,
    /// Wait for the peer to connect; never open the TCP connection ourselves.
    pub passive: bool,
    pub bfd_profile: Option<String>,
    /// What to do when the peer sends too many prefixes (FRR `maximum-prefix`).
    pub max_prefixes: Option<MaxPrefixes>,
    /// RFC 4724 graceful restart with this neighbor.
    pub graceful_restart: GracefulRestartMode,
    pub families: Vec<AddressFamily>,
    pub to_advertise: AdvertisePolicy,
    pub to_receive: ReceivePolicy,
    /// Files that define or extend this neighbor, in merge order.
    pub sources: Vec<PathBuf>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum AllowMode {
    /// Everything (all of the router's prefixes out; every route in).
    All,
    /// Only the listed prefixes.
    #[default]
    Filtered,
}

/// What we send to a neighbor.
#[derive(Debug, Clone, PartialEq, Default, Serialize)]
pub struct AdvertisePolicy {
    pub mode: AllowMode,
    /// With `Filtered`: the router prefixes sent to this neighbor (sorted). Empty with `All`.
    pub prefixes: Vec<IpNet>,
    /// Sorted by `local_pref`; a prefix appears under at most one value.
    pub with_local_pref: Vec<LocalPrefPrefixes>,
    /// Sorted by community.
    pub with_community: Vec<CommunityPrefixes>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LocalPrefPrefixes {
    pub local_pref: u32,
    pub prefixes: Vec<IpNet>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CommunityPrefixes {
    pub community: Community,
    pub prefixes: Vec<IpNet>,
}

/// What we accept from a neighbor (before `always_block`, which wins).
#[derive(Debug, Clone, PartialEq, Default, Serialize)]
pub struct ReceivePolicy {
    pub mode: AllowMode,
    /// With `Filtered`: the accepted prefixes (sorted). Empty with `All`.
    pub prefixes: Vec<PrefixMatch>,
}

/// A prefix-list entry: `prefix` alone matches exactly; `ge`/`le` widen it to the more specifics
/// of `prefix` whose length is in `ge..=le`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub struct PrefixMatch {
    pub prefix: IpNet,
    pub ge: Option<u8>,
    pub le: Option<u8>,
}

/// BFD session parameters shared by neighbors that name this profile.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct BfdProfile {
    pub name: String,
    #[serde(serialize_with = "duration::serialize")]
    pub receive_interval: Duration,
    #[serde(serialize_with = "duration::serialize")]
    pub transmit_interval: Duration,
    pub detect_multiplier: u8,
    #[serde(serialize_with = "duration::serialize")]
    pub echo_interval: Duration,
    pub echo_mode: bool,
    pub passive_mode: bool,
    pub minimum_ttl: u8,
    /// RFC 5880 §6.7; `None` runs the sessions unauthenticated.
    pub authentication: Option<super::bfd_auth::BfdAuthentication>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn password_never_printed() {
        let password = Password::new("s3cret".into());
        assert_eq!(format!("{password:?}"), "Password(<redacted>)");
        assert_eq!(serde_json::to_string(&password).unwrap(), r#""<redacted>""#);
        assert_eq!(password.expose(), "s3cret");
    }

    #[test]
    fn remote_asn_serialises_as_number_or_keyword() {
        assert_eq!(serde_json::to_string(&RemoteAsn::Fixed(65102)).unwrap(), "65102");
        assert_eq!(serde_json::to_string(&RemoteAsn::External).unwrap(), r#""external""#);
        assert_eq!(
            serde_json::to_string(&AddressFamily::Ipv6Unicast).unwrap(),
            r#""ipv6-unicast""#
        );
    }
}
