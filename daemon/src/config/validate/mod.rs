//! One file's raw TOML → a validated fragment, with every problem in the file reported.
//!
//! A fragment holds model values with defaults applied, plus the source positions that the merge
//! step needs to report conflicts and dangling references. Values that fail validation are left
//! out (a field falls back to its default, a neighbor without a usable address is dropped), so
//! the rest of the file is still checked.

mod bfd;
mod neighbor;
pub(crate) use neighbor::TimerDefaults;
#[cfg(test)]
mod tests;

use std::collections::BTreeSet;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use ipnet::IpNet;

use super::announce::{AnnounceFragment, Placed, RawAnnounce, RouterLabels, Service};
use super::check::Checker;
use super::community::Community;
use super::duration::format_duration;
use super::error::{ConfigError, Loc};
use super::model::{
    AddressFamily, AdvertisePolicy, AllowMode, BfdProfile, GracefulRestartMode, KubernetesConfig,
    MaxPrefixes, Neighbor, Password, PrefixMatch, ReceivePolicy, RemoteAsn, SkippedDocument,
};
use super::model::{
    Layer2Config, MetricNamespaces, DEFAULT_KUBERNETES_NAMESPACE, DEFAULT_LAYER2_DETECTION,
    DEFAULT_WATCH_TIMEOUT,
};
use super::raw::{
    BoolOrInt, RawAdvertise, RawBfdProfile, RawBgp, RawDuration, RawFile, RawLayer2, RawNeighbor,
    RawPrefixMatch, RawReceive, RawRouter, S,
};
use super::source::SourceText;

pub(crate) const DEFAULT_PORT: u16 = 179;
/// The smallest hold time a peer may propose. FRR has no minimum by default; three seconds
/// adds only one refusal to RFC 4271's (which already refuses 1 and 2): a peer proposing no
/// hold time at all, which would turn off both our HoldTimer and our SendHoldTimer.
pub(crate) const DEFAULT_MINIMUM_HOLD_TIME: Duration = Duration::from_secs(3);
/// FRR's default warning threshold of `maximum-prefix`, in percent.
pub(crate) const DEFAULT_MAX_PREFIXES_THRESHOLD: u8 = 75;
pub(crate) const DEFAULT_MAXIMUM_PATHS: u16 = 64;
pub(crate) const DEFAULT_MULTIPATH_RELAX: bool = true;
pub(crate) const DEFAULT_INSTALL: bool = true;
/// FRR's default metric for BGP routes in the kernel.
pub(crate) const DEFAULT_METRIC: u32 = 20;
pub(crate) const DEFAULT_BFD_INTERVAL: Duration = Duration::from_millis(300);
pub(crate) const DEFAULT_BFD_ECHO_INTERVAL: Duration = Duration::from_millis(50);
pub(crate) const DEFAULT_BFD_DETECT_MULTIPLIER: u8 = 3;
pub(crate) const DEFAULT_BFD_MINIMUM_TTL: u8 = 254;
/// FRR's graceful restart defaults (`bgp graceful-restart restart-time|stalepath-time|
/// select-defer-time`).
pub(crate) const DEFAULT_RESTART_TIME: Duration = Duration::from_secs(120);
pub(crate) const DEFAULT_STALE_PATH_TIME: Duration = Duration::from_secs(360);
pub(crate) const DEFAULT_SELECT_DEFER_TIME: Duration = Duration::from_secs(360);
/// Long enough for a GRACEFUL_SHUTDOWN to cross the fabric and traffic to move (RFC 8326).
pub(crate) const DEFAULT_DRAIN_TIME: Duration = Duration::from_secs(15);
/// Linux `TCP_MD5SIG_MAXKEYLEN`; RFC 2385 itself sets no limit but the kernel does.
pub(crate) const TCP_MD5_MAX_KEY_LEN: usize = 80;

/// One file's validated content.
#[derive(Debug, Clone)]
pub(crate) struct Fragment {
    pub file: PathBuf,
    /// Manifest documents of kinds uplink does not act on, left out.
    pub skipped: Vec<SkippedDocument>,
    pub routers: Vec<RouterFragment>,
    pub bfd_profiles: Vec<BfdProfileFragment>,
    pub always_block: Vec<IpNet>,
    /// `[fib] nexthop_objects`, where this file sets it.
    pub nexthop_objects: Option<(bool, Loc)>,
    /// `[fib] nexthop_compat_mode`, where this file sets it.
    pub nexthop_compat_mode: Option<(bool, Loc)>,
    /// `[metrics] listen`, where this file sets it.
    pub metrics_listen: Option<(SocketAddr, Loc)>,
    pub metrics_namespaces: Option<(MetricNamespaces, Loc)>,
    /// `[kubernetes]`, where this file has it.
    pub kubernetes: Option<(KubernetesConfig, Loc)>,
    /// `[layer2]`, where this file has it.
    pub layer2: Option<(Layer2Config, Loc)>,
    /// `[bgp] default_max_prefixes`, where this file sets it.
    pub default_max_prefixes: Option<(u32, Loc)>,
    /// `drain_time`, where this file sets it.
    pub drain_time: Option<(Duration, Loc)>,
    /// `[graceful_restart]` timers, each where this file sets it.
    pub restart_time: Option<(Duration, Loc)>,
    pub stale_path_time: Option<(Duration, Loc)>,
    pub select_defer_time: Option<(Duration, Loc)>,
    pub announce: AnnounceFragment,
    pub network: super::network_validate::NetworkFragment,
}

impl Fragment {
    /// A file's fragment with nothing in it yet.
    pub fn empty(file: PathBuf) -> Self {
        Self {
            file,
            skipped: Vec::new(),
            routers: Vec::new(),
            bfd_profiles: Vec::new(),
            always_block: Vec::new(),
            nexthop_objects: None,
            nexthop_compat_mode: None,
            metrics_listen: None,
            metrics_namespaces: None,
            kubernetes: None,
            layer2: None,
            default_max_prefixes: None,
            drain_time: None,
            restart_time: None,
            stale_path_time: None,
            select_defer_time: None,
            announce: AnnounceFragment::default(),
            network: Default::default(),
        }
    }

    /// Its Services, when it holds nothing else (a `Service` object's): a cluster's thousands
    /// of them are then kept and merged as one list instead of a fragment each
    /// (`manifest/cache.rs`). Every field is named, so a field added to fragments is counted.
    pub fn into_services_only(self: Box<Self>) -> Result<Vec<Placed<Arc<Service>>>, Box<Self>> {
        let Fragment {
            file: _,
            skipped,
            routers,
            bfd_profiles,
            always_block,
            nexthop_objects,
            nexthop_compat_mode,
            metrics_listen,
            metrics_namespaces,
            kubernetes,
            layer2,
            default_max_prefixes,
            drain_time,
            restart_time,
            stale_path_time,
            select_defer_time,
            announce,
            network,
        } = self.as_ref();
        let AnnounceFragment {
            node_name,
            node_labels,
            pools,
            services: _,
            advertisements,
            l2_advertisements,
            communities,
            networks,
            route_advertisements,
            peer_names,
            router_labels,
        } = announce;
        let super::network_validate::NetworkFragment { settings, node_values, policies } = network;
        let only_services = skipped.is_empty()
            && routers.is_empty()
            && bfd_profiles.is_empty()
            && always_block.is_empty()
            && nexthop_objects.is_none()
            && nexthop_compat_mode.is_none()
            && metrics_listen.is_none()
            && metrics_namespaces.is_none()
            && kubernetes.is_none()
            && layer2.is_none()
            && default_max_prefixes.is_none()
            && drain_time.is_none()
            && restart_time.is_none()
            && stale_path_time.is_none()
            && select_defer_time.is_none()
            && node_name.is_none()
            && node_labels.is_empty()
            && pools.is_empty()
            && advertisements.is_empty()
            && l2_advertisements.is_empty()
            && communities.is_empty()
            && networks.is_empty()
            && route_advertisements.is_empty()
            && peer_names.is_empty()
            && router_labels.is_empty()
            && settings.is_empty()
            && node_values.is_empty()
            && policies.is_empty();
        if only_services {
            Ok(self.announce.services)
        } else {
            Err(self)
        }
    }
}

#[derive(Debug, Clone)]
pub(crate) struct RouterFragment {
    /// `bgp.routers[i]` in this file.
    pub field: String,
    pub vrf: String,
    pub asn: u32,
    pub asn_loc: Loc,
    /// Router-level settings are `None` when the file leaves them out, so that a fragment that
    /// only adds neighbors does not conflict with the main file's choice.
    pub id: Option<(Ipv4Addr, Loc)>,
    pub maximum_paths: Option<(u16, Loc)>,
    pub multipath_relax: Option<(bool, Loc)>,
    pub install: Option<(bool, Loc)>,
    pub table: Option<(u32, Loc)>,
    pub metric: Option<(u32, Loc)>,
    pub prefixes: Vec<IpNet>,
    pub prefixes_loc: Loc,
    pub neighbors: Vec<NeighborFragment>,
    pub imports: Vec<String>,
}

#[derive(Debug, Clone)]
pub(crate) struct NeighborFragment {
    /// `bgp.routers[i].neighbors[j]` in this file.
    pub field: String,
    /// Where the neighbor's `address` is written.
    pub loc: Loc,
    /// Defaults applied; `to_advertise` carries only the mode, its prefixes are in `advertised`.
    pub neighbor: Neighbor,
    /// Positions of the session settings written in the file, by field name.
    pub field_locs: Vec<(&'static str, Loc)>,
    pub advertised: Vec<AdvertisedPrefix>,
}

impl NeighborFragment {
    pub fn written(&self, name: &str) -> bool {
        self.field_locs.iter().any(|(field, _)| *field == name)
    }

    /// Where a session setting is written, or the neighbor's address if it is left out.
    pub fn loc_of(&self, name: &str) -> &Loc {
        // `asn` and `dynamic_asn` are one setting written two ways.
        let same = |field: &str| field == name || (is_asn(field) && is_asn(name));
        self.field_locs.iter().find(|(field, _)| same(field)).map_or(&self.loc, |(_, loc)| loc)
    }
}

fn is_asn(field: &str) -> bool {
    field == "asn" || field == "dynamic_asn"
}

/// One prefix named under `to_advertise`, kept with its position for the cross-checks against
/// the merged router's prefixes.
#[derive(Debug, Clone)]
pub(crate) struct AdvertisedPrefix {
    pub prefix: IpNet,
    pub how: Advertised,
    pub loc: Loc,
    pub field: String,
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Advertised {
    Allowed,
    WithLocalPref(u32),
    WithCommunity(Community),
}

#[derive(Debug, Clone)]
pub(crate) struct BfdProfileFragment {
    pub profile: BfdProfile,
    pub loc: Loc,
    pub field: String,
}

/// Validates one file. Errors go to `errors`; the fragment holds what was valid. `timers` are
/// the session timers a neighbor that leaves them out gets: uplink's in TOML files, upstream's
/// in Kubernetes manifests.
pub(crate) fn validate_file(
    source: &SourceText<'_>,
    raw: RawFile,
    timers: TimerDefaults,
    errors: &mut Vec<ConfigError>,
) -> Fragment {
    let mut check = Checker::new(source, errors);
    let mut fragment = Fragment::empty(source.path.to_path_buf());
    let announce = RawAnnounce {
        node: raw.node,
        pools: raw.pools,
        services: raw.services,
        advertisements: raw.advertisements,
        l2_advertisements: raw.l2_advertisements,
        communities: raw.communities,
        networks: raw.networks,
        route_advertisements: raw.route_advertisements,
    };
    fragment.announce = super::announce::validate(source, announce, &mut *check.errors);
    fragment.network = super::network_validate::validate(
        source,
        raw.network,
        raw.network_policies,
        &mut *check.errors,
    );
    if let Some(value) = &raw.drain_time {
        fragment.drain_time =
            check.millis_in(value, "drain_time", 0..=3_600_000).map(|d| (d, check.loc(value)));
    }
    if let Some(gr) = &raw.graceful_restart {
        let gr = gr.get_ref();
        // RFC 4724 §3: the Restart Time is a 12-bit number of seconds.
        if let Some(value) = &gr.restart_time {
            fragment.restart_time = check
                .whole_seconds_in(value, "graceful_restart.restart_time", 1..=4095)
                .map(|d| (d, check.loc(value)));
        }
        if let Some(value) = &gr.stale_path_time {
            fragment.stale_path_time = check
                .whole_seconds_in(value, "graceful_restart.stale_path_time", 1..=4095)
                .map(|d| (d, check.loc(value)));
        }
        if let Some(value) = &gr.select_defer_time {
            fragment.select_defer_time = check
                .whole_seconds_in(value, "graceful_restart.select_defer_time", 0..=3600)
                .map(|d| (d, check.loc(value)));
        }
    }
    if let Some(fib) = raw.fib {
        let loc = source.loc(fib.span().start);
        let fib = fib.into_inner();
        fragment.nexthop_objects = fib.nexthop_objects.map(|on| (on, loc.clone()));
        fragment.nexthop_compat_mode = fib.nexthop_compat_mode.map(|on| (on, loc));
    }
    if let Some(metrics) = raw.metrics.map(S::into_inner) {
        if let Some(listen) = metrics.listen {
            let loc = check.loc(&listen);
            fragment.metrics_listen =
                check.listen_address(&listen, "metrics.listen").map(|address| (address, loc));
        }
        if let Some(names) = metrics.namespaces {
            let loc = check.loc(&names);
            fragment.metrics_namespaces =
                check.metric_namespaces(&names, "metrics.namespaces").map(|n| (n, loc));
        }
    }
    if let Some(kubernetes) = raw.kubernetes {
        let loc = source.loc(kubernetes.span().start);
        let kubernetes = kubernetes.into_inner();
        let namespace = match &kubernetes.namespace {
            Some(namespace) => check.name(namespace, "kubernetes.namespace"),
            None => Some(DEFAULT_KUBERNETES_NAMESPACE.to_string()),
        };
        // Relative to the file's directory, as password_file.
        let kubeconfig = kubernetes.kubeconfig.map(|path| check.file_dir().join(path.get_ref()));
        let load_balancer_class = kubernetes.load_balancer_class.map(|class| class.into_inner());
        let watch_timeout = match &kubernetes.watch_timeout {
            Some(value) => check.whole_seconds_in(value, "kubernetes.watch_timeout", 1..=3600),
            None => Some(DEFAULT_WATCH_TIMEOUT),
        };
        fragment.kubernetes = namespace.zip(watch_timeout).map(|(namespace, watch_timeout)| {
            let settings =
                KubernetesConfig { kubeconfig, namespace, load_balancer_class, watch_timeout };
            (settings, loc)
        });
    }
    if let Some(layer2) = raw.layer2 {
        fragment.layer2 = check.layer2(layer2);
    }
    for (index, text) in raw.always_block.iter().enumerate() {
        if let Some(prefix) = check.prefix(text, &format!("always_block[{index}]")) {
            fragment.always_block.push(prefix);
        }
    }
    if let Some(bgp) = raw.bgp {
        check.bgp(bgp, &mut fragment, timers);
    }
    fragment
}

/// The shortest shared key accepted for the membership: HMAC-SHA256 wants as much entropy as
/// its output (RFC 2104 §3); MetalLB's memberlist secret is 128 random bytes in base64.
const MIN_LAYER2_KEY: usize = 16;

impl Checker<'_, '_> {
    fn layer2(&mut self, table: S<RawLayer2>) -> Option<(Layer2Config, Loc)> {
        let loc = self.loc(&table);
        let raw = table.into_inner();
        let address = self.membership_address(&raw.address, "layer2.address");
        let mut members = Vec::new();
        for (index, member) in raw.members.iter().enumerate() {
            members.push(self.membership_address(member, &format!("layer2.members[{index}]")));
        }
        let secret = match &raw.secret_file {
            Some(file) => {
                let path = self.file_dir().join(file.get_ref());
                match self.source.read_secret_file(&path) {
                    Ok(text) if text.trim().len() >= MIN_LAYER2_KEY => {
                        Some(text.trim().as_bytes().to_vec())
                    }
                    Ok(text) => {
                        self.fail(file, "layer2.secret_file", format!("the key is {} bytes; use at least {MIN_LAYER2_KEY} random ones (e.g. `openssl rand -base64 128`, as MetalLB's memberlist secret)", text.trim().len()));
                        None
                    }
                    Err(error) => {
                        self.fail(file, "layer2.secret_file", format!("{error}; point it at a readable file holding the key the nodes share"));
                        None
                    }
                }
            }
            // From MetalLB's memberlist Secret; without [kubernetes] an error (config/merge.rs,
            // where the two sections meet).
            None => Some(Vec::new()),
        };
        let detection = match &raw.detection {
            Some(value) => self.millis_in(value, "layer2.detection", 500..=60_000),
            None => Some(DEFAULT_LAYER2_DETECTION),
        };
        let members: Option<Vec<SocketAddr>> = members.into_iter().collect();
        let (address, members, secret, detection) = (address?, members?, secret?, detection?);
        Some((Layer2Config { address, members, secret, detection }, loc))
    }

    /// A membership address: `"ip"` (memberlist's port) or `"ip:port"`.
    fn membership_address(&mut self, value: &S<String>, field: &str) -> Option<SocketAddr> {
        let text = value.get_ref().trim();
        let address = text
            .parse::<IpAddr>()
            .map(|ip| SocketAddr::new(ip, super::model::DEFAULT_LAYER2_PORT))
            .or_else(|_| text.parse::<SocketAddr>());
        match address {
            Ok(address) if address.port() != 0 && !address.ip().is_unspecified() => Some(address),
            _ => {
                self.fail(value, field, format!("\"{text}\" is not this node's membership address; write an address the other nodes reach it at, e.g. \"10.0.0.11\" (port {}) or \"10.0.0.11:7946\"", super::model::DEFAULT_LAYER2_PORT));
                None
            }
        }
    }

    fn bgp(&mut self, bgp: RawBgp, fragment: &mut Fragment, timers: TimerDefaults) {
        if let Some(value) = &bgp.default_max_prefixes {
            let field = "bgp.default_max_prefixes";
            fragment.default_max_prefixes = self
                .int_in::<u32>(value, field, 1..=i64::from(u32::MAX), "prefixes")
                .map(|limit| (limit, self.loc(value)));
        }
        for (index, raw) in bgp.bfd_profiles.iter().enumerate() {
            let field = format!("bgp.bfd_profiles[{index}]");
            let Some(profile) = self.bfd_profile(raw.get_ref(), &field) else { continue };
            let loc = self.loc(&raw.get_ref().name);
            // frr-k8s rejects the same profile name twice in one configuration.
            if let Some(first) =
                fragment.bfd_profiles.iter().find(|p| p.profile.name == profile.name)
            {
                self.errors.push(loc.error(
                    format!("{field}.name"),
                    format!(
                        "BFD profile \"{}\" is already defined at line {} ({}); give each profile a distinct name",
                        profile.name, first.loc.line, first.field
                    ),
                ));
                continue;
            }
            fragment.bfd_profiles.push(BfdProfileFragment { profile, loc, field });
        }
        for (index, raw) in bgp.routers.into_iter().enumerate() {
            let field = format!("bgp.routers[{index}]");
            let header = self.loc(&raw);
            let raw = raw.into_inner();
            let labels = raw.labels.clone();
            let Some(router) = self.router(raw, &field, header, timers) else { continue };
            if !labels.is_empty() {
                fragment.announce.router_labels.push(RouterLabels {
                    config_name: format!("{}:{field}", self.source.path.display()),
                    labels,
                    vrf: router.vrf.clone(),
                    neighbors: router.neighbors.iter().map(|n| n.neighbor.address).collect(),
                });
            }
            if let Some(first) = fragment.routers.iter().find(|r| r.vrf == router.vrf) {
                let message = format!(
                    "a router for VRF {} is already defined at line {} ({}); there is one router per VRF, so put \
                     its neighbors and prefixes in one [[bgp.routers]] table",
                    vrf_display(&router.vrf),
                    first.asn_loc.line,
                    first.field
                );
                self.errors.push(router.asn_loc.error(format!("{field}.vrf"), message));
                continue;
            }
            fragment.routers.push(router);
        }
    }

    fn router(
        &mut self,
        raw: RawRouter,
        field: &str,
        header: Loc,
        timers: TimerDefaults,
    ) -> Option<RouterFragment> {
        let asn = self.asn(&raw.asn, &format!("{field}.asn"));
        let vrf = match &raw.vrf {
            Some(vrf) => self.vrf_name(vrf, &format!("{field}.vrf")).unwrap_or_default(),
            None => String::new(),
        };
        let id = raw.id.as_ref().and_then(|id| {
            let name = format!("{field}.id");
            let Ok(address) = Ipv4Addr::from_str(id.get_ref()) else {
                self.fail(id, &name, format!("\"{}\" is not an IPv4 address; the router ID is written like \"10.0.0.1\"", id.get_ref()));
                return None;
            };
            // RFC 6286 §2.1: the BGP Identifier is a non-zero 32-bit quantity.
            if address.is_unspecified() {
                self.fail(id, &name, "the router ID must be non-zero (RFC 6286 §2.1); use one of the node's IPv4 addresses");
                return None;
            }
            Some((address, self.loc(id)))
        });
        let maximum_paths = raw.maximum_paths.as_ref().and_then(|value| {
            let paths = self.int_in::<u16>(
                value,
                &format!("{field}.maximum_paths"),
                1..=256,
                "ECMP paths",
            )?;
            Some((paths, self.loc(value)))
        });
        let multipath_relax =
            raw.multipath_relax.as_ref().map(|value| (*value.get_ref(), self.loc(value)));
        let install = raw.install.as_ref().map(|value| (*value.get_ref(), self.loc(value)));
        let table = raw.table.as_ref().and_then(|value| {
            let name = format!("{field}.table");
            // rtnetlink.h: 0 is RT_TABLE_UNSPEC, 253 default, 255 local — not ours to fill.
            if matches!(*value.get_ref(), 0 | 253 | 255) {
                self.fail(value, &name, format!("table {} is reserved by the kernel (0 unspec, 253 default, 255 local); use 254 for main or a table of your own such as 100", value.get_ref()));
                return None;
            }
            let table = self.int_in::<u32>(value, &name, 1..=i64::from(u32::MAX), "routing table ids")?;
            Some((table, self.loc(value)))
        });
        let metric = raw.metric.as_ref().and_then(|value| {
            let metric = self.int_in::<u32>(
                value,
                &format!("{field}.metric"),
                0..=i64::from(u32::MAX),
                "route metrics",
            )?;
            Some((metric, self.loc(value)))
        });
        let mut prefixes = BTreeSet::new();
        for (index, text) in raw.prefixes.iter().enumerate() {
            if let Some(prefix) = self.prefix(text, &format!("{field}.prefixes[{index}]")) {
                prefixes.insert(prefix);
            }
        }
        let mut imports = Vec::new();
        for (index, import) in raw.imports.iter().enumerate() {
            let name = format!("{field}.imports[{index}].vrf");
            let vrf = import.get_ref().vrf.get_ref();
            // `""` or "default" name the default VRF, as in frr-k8s.
            if vrf.is_empty() || vrf == "default" {
                imports.push(String::new());
            } else if let Some(vrf) = self.vrf_name(&import.get_ref().vrf, &name) {
                imports.push(vrf);
            }
        }
        let mut neighbors: Vec<NeighborFragment> = Vec::new();
        for (index, neighbor) in raw.neighbors.iter().enumerate() {
            let neighbor_field = format!("{field}.neighbors[{index}]");
            let Some(neighbor) = self.neighbor(neighbor, &neighbor_field, timers) else { continue };
            if let Some(first) =
                neighbors.iter().find(|n| n.neighbor.address == neighbor.neighbor.address)
            {
                let message = format!(
                    "neighbor {} is already defined at line {} ({}); a router has one session per neighbor address",
                    neighbor.neighbor.address, first.loc.line, first.field
                );
                self.errors.push(neighbor.loc.error(format!("{neighbor_field}.address"), message));
                continue;
            }
            neighbors.push(neighbor);
        }
        Some(RouterFragment {
            field: field.to_string(),
            vrf,
            asn: asn?,
            asn_loc: self.loc(&raw.asn),
            id,
            maximum_paths,
            multipath_relax,
            install,
            table,
            metric,
            prefixes: prefixes.into_iter().collect(),
            prefixes_loc: header,
            neighbors,
            imports,
        })
    }
}

/// RFC 4271 §10 suggests a KeepaliveTime of one third of the Hold Time (whole seconds).
pub(crate) fn default_keepalive(hold_time: Duration) -> Duration {
    Duration::from_secs(hold_time.as_secs() / 3)
}

pub(crate) fn vrf_display(vrf: &str) -> String {
    if vrf.is_empty() {
        "\"\" (default)".to_string()
    } else {
        format!("\"{vrf}\"")
    }
}
