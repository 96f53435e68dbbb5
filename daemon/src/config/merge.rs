//! Merging validated file fragments into one `Config` by frr-k8s's rule: files only extend each
//! other; a contradiction rejects the whole configuration. See the `config` module doc for the
//! exact rule.

use std::collections::{BTreeMap, BTreeSet};
use std::net::{Ipv4Addr, SocketAddr};
use std::path::PathBuf;

use ipnet::IpNet;

use super::community::Community;
use super::duration::format_duration;
use super::error::{ConfigError, Loc};
use super::load::is_api_source;
use super::model::{
    AdvertisePolicy, AllowMode, BfdProfile, BgpConfig, CommunityPrefixes, Config, FibConfig,
    GracefulRestartConfig, KubernetesConfig, Layer2Config, LocalPrefPrefixes, MaxPrefixes,
    MetricNamespaces, MetricsConfig, Neighbor, ReceivePolicy, Router,
};
use super::neighbor_settings;
use super::validate::{
    vrf_display, Advertised, AdvertisedPrefix, BfdProfileFragment, Fragment, NeighborFragment,
    RouterFragment, DEFAULT_DRAIN_TIME, DEFAULT_MAX_PREFIXES_THRESHOLD, DEFAULT_RESTART_TIME,
    DEFAULT_SELECT_DEFER_TIME, DEFAULT_STALE_PATH_TIME,
};
use std::time::Duration;

/// Merges fragments in order. Conflicts go to `errors`. Cross-reference checks (advertised
/// prefixes against router prefixes, BFD profile names) run only when `check_references` is
/// set, so that a value already rejected by validation does not also show up as dangling.
pub(crate) fn merge(
    fragments: Vec<Fragment>,
    check_references: bool,
    errors: &mut Vec<ConfigError>,
) -> Config {
    // The files alone: not the objects from the Kubernetes API (thousands of them).
    let mut files: Vec<PathBuf> =
        fragments.iter().filter(|f| !is_api_source(&f.file)).map(|f| f.file.clone()).collect();
    // A manifest file has a fragment per document.
    files.dedup();
    let mut skipped = Vec::new();
    let mut routers: Vec<MergedRouter> = Vec::new();
    let mut profiles: Vec<BfdProfileFragment> = Vec::new();
    let mut always_block = BTreeSet::new();
    let mut nexthop_objects: Option<(bool, Loc)> = None;
    let mut nexthop_compat_mode: Option<(bool, Loc)> = None;
    let mut metrics_listen: Option<(SocketAddr, Loc)> = None;
    let mut metrics_namespaces: Option<(MetricNamespaces, Loc)> = None;
    let mut kubernetes: Option<(KubernetesConfig, Loc)> = None;
    let mut layer2: Option<(Layer2Config, Loc)> = None;
    let mut default_max_prefixes: Option<(u32, Loc)> = None;
    let mut drain_time: Option<(Duration, Loc)> = None;
    let mut restart_time: Option<(Duration, Loc)> = None;
    let mut stale_path_time: Option<(Duration, Loc)> = None;
    let mut select_defer_time: Option<(Duration, Loc)> = None;
    let mut announce = Vec::with_capacity(fragments.len());
    for mut fragment in fragments {
        announce.push((fragment.file.clone(), std::mem::take(&mut fragment.announce)));
        skipped.append(&mut fragment.skipped);
        always_block.extend(fragment.always_block);
        node_setting(&mut nexthop_objects, fragment.nexthop_objects, "fib.nexthop_objects", errors);
        node_setting(
            &mut nexthop_compat_mode,
            fragment.nexthop_compat_mode,
            "fib.nexthop_compat_mode",
            errors,
        );
        node_setting(&mut drain_time, fragment.drain_time, "drain_time", errors);
        node_setting(
            &mut restart_time,
            fragment.restart_time,
            "graceful_restart.restart_time",
            errors,
        );
        node_setting(
            &mut stale_path_time,
            fragment.stale_path_time,
            "graceful_restart.stale_path_time",
            errors,
        );
        node_setting(
            &mut select_defer_time,
            fragment.select_defer_time,
            "graceful_restart.select_defer_time",
            errors,
        );
        node_setting(&mut metrics_listen, fragment.metrics_listen, "metrics.listen", errors);
        node_setting(
            &mut metrics_namespaces,
            fragment.metrics_namespaces,
            "metrics.namespaces",
            errors,
        );
        node_setting(&mut kubernetes, fragment.kubernetes, "kubernetes", errors);
        node_setting(&mut layer2, fragment.layer2, "layer2", errors);
        node_setting(
            &mut default_max_prefixes,
            fragment.default_max_prefixes,
            "bgp.default_max_prefixes",
            errors,
        );
        for profile in fragment.bfd_profiles {
            merge_bfd_profile(&mut profiles, profile, errors);
        }
        for router in fragment.routers {
            match routers.iter_mut().find(|r| r.vrf == router.vrf) {
                Some(existing) => existing.extend(router, &fragment.file, errors),
                None => routers.push(MergedRouter::new(router, &fragment.file)),
            }
        }
    }
    if let (Some((settings, loc)), None) = (&layer2, &kubernetes) {
        if settings.secret.is_empty() {
            errors.push(loc.error(
                "layer2.secret_file",
                "required: the nodes' membership messages are authenticated with a key they \
                 share (MetalLB's memberlist secret); add secret_file = \"...\" (with \
                 [kubernetes], the key of the Secret memberlist is used instead)",
            ));
        }
    }
    let profile_names: Vec<&str> = profiles.iter().map(|p| p.profile.name.as_str()).collect();
    let default_max_prefixes = default_max_prefixes.map(|(limit, _)| limit);
    let mut routers: Vec<Router> =
        routers.into_iter().map(|r| r.finish(&profile_names, check_references, errors)).collect();
    // After the neighbors are merged, so a file that leaves `max_prefixes` out and one that
    // sets it are not a conflict; as FRR's `maximum-prefix N`, with its default threshold.
    if let Some(limit) = default_max_prefixes {
        let neighbors = routers.iter_mut().flat_map(|r| r.neighbors.iter_mut());
        for neighbor in neighbors.filter(|n| n.max_prefixes.is_none()) {
            neighbor.max_prefixes = Some(MaxPrefixes {
                limit,
                threshold: DEFAULT_MAX_PREFIXES_THRESHOLD,
                warning_only: false,
                restart_time: None,
            });
        }
    }
    Config {
        bgp: BgpConfig {
            routers,
            bfd_profiles: profiles.into_iter().map(|p| p.profile).collect(),
            default_max_prefixes,
        },
        always_block: always_block.into_iter().collect(),
        fib: FibConfig {
            nexthop_objects: nexthop_objects.is_none_or(|(on, _)| on),
            nexthop_compat_mode: nexthop_compat_mode.is_some_and(|(on, _)| on),
        },
        metrics: MetricsConfig {
            listen: metrics_listen.map(|(address, _)| address),
            namespaces: metrics_namespaces.map(|(n, _)| n).unwrap_or_default(),
        },
        kubernetes: kubernetes.map(|(settings, _)| settings),
        layer2: layer2.map(|(settings, _)| settings),
        drain_time: drain_time.map_or(DEFAULT_DRAIN_TIME, |(d, _)| d),
        graceful_restart: GracefulRestartConfig {
            restart_time: restart_time.map_or(DEFAULT_RESTART_TIME, |(d, _)| d),
            stale_path_time: stale_path_time.map_or(DEFAULT_STALE_PATH_TIME, |(d, _)| d),
            select_defer_time: select_defer_time.map_or(DEFAULT_SELECT_DEFER_TIME, |(d, _)| d),
        },
        files,
        announce: std::sync::Arc::new(super::announce::merge(announce, errors)),
        // Filled in by `load`, which knows the node's labels.
        network: Default::default(),
        skipped,
    }
}

/// A node-wide setting: a file that leaves it out takes the other file's value; two different
/// values conflict (a node has one of each).
fn node_setting<T: PartialEq + Written>(
    slot: &mut Option<(T, Loc)>,
    incoming: Option<(T, Loc)>,
    field: &str,
    errors: &mut Vec<ConfigError>,
) {
    match (&*slot, incoming) {
        (_, None) => {}
        (None, Some(set)) => *slot = Some(set),
        (Some((first, _)), Some((value, _))) if *first == value => {}
        (Some((first, first_loc)), Some((value, loc))) => errors.push(loc.error(
            field,
            format!(
                "is {} here but {} at {first_loc}; a node has one such setting — make them \
                 equal or set it in one file",
                value.written(),
                first.written()
            ),
        )),
    }
}

/// A value as a config file writes it.
trait Written {
    fn written(&self) -> String;
}

impl Written for MetricNamespaces {
    fn written(&self) -> String {
        format!("{:?}", self.names())
    }
}

impl Written for bool {
    fn written(&self) -> String {
        self.to_string()
    }
}

impl Written for u32 {
    fn written(&self) -> String {
        self.to_string()
    }
}

impl Written for Duration {
    fn written(&self) -> String {
        format!("\"{}\"", format_duration(*self))
    }
}

impl Written for KubernetesConfig {
    fn written(&self) -> String {
        let kubeconfig = self
            .kubeconfig
            .as_ref()
            .map_or(String::new(), |path| format!("kubeconfig = \"{}\", ", path.display()));
        let class = self
            .load_balancer_class
            .as_ref()
            .map_or(String::new(), |class| format!(", load_balancer_class = \"{class}\""));
        let watch = if self.watch_timeout == super::model::DEFAULT_WATCH_TIMEOUT {
            String::new()
        } else {
            format!(", watch_timeout = {}", self.watch_timeout.written())
        };
        format!("{{ {kubeconfig}namespace = \"{}\"{class}{watch} }}", self.namespace)
    }
}

impl Written for Layer2Config {
    fn written(&self) -> String {
        let members: Vec<String> = self.members.iter().map(|m| format!("\"{m}\"")).collect();
        format!(
            "{{ address = \"{}\", members = [{}], detection = {} }}",
            self.address,
            members.join(", "),
            self.detection.written()
        )
    }
}

impl Written for SocketAddr {
    fn written(&self) -> String {
        format!("\"{self}\"")
    }
}

/// frr-k8s: "the same name with different settings" is a conflict; identical copies are fine.
fn merge_bfd_profile(
    profiles: &mut Vec<BfdProfileFragment>,
    profile: BfdProfileFragment,
    errors: &mut Vec<ConfigError>,
) {
    match profiles.iter().find(|p| p.profile.name == profile.profile.name) {
        None => profiles.push(profile),
        Some(first) if first.profile == profile.profile => {}
        Some(first) => {
            let differing = bfd_differences(&first.profile, &profile.profile).join(", ");
            errors.push(profile.loc.error(
                format!("{}.name", profile.field),
                format!(
                    "BFD profile \"{}\" is also defined at {} ({}) with different settings ({differing}); \
                     profiles with one name must be identical — make them equal or rename one",
                    profile.profile.name, first.loc, first.field
                ),
            ));
        }
    }
}

fn bfd_differences(a: &BfdProfile, b: &BfdProfile) -> Vec<String> {
    let mut out = Vec::new();
    let mut compare = |name: &str, x: String, y: String| {
        if x != y {
            out.push(format!("{name} {y} vs {x}"));
        }
    };
    compare(
        "receive_interval",
        format_duration(a.receive_interval),
        format_duration(b.receive_interval),
    );
    compare(
        "transmit_interval",
        format_duration(a.transmit_interval),
        format_duration(b.transmit_interval),
    );
    compare("detect_multiplier", a.detect_multiplier.to_string(), b.detect_multiplier.to_string());
    compare("echo_interval", format_duration(a.echo_interval), format_duration(b.echo_interval));
    compare("echo_mode", a.echo_mode.to_string(), b.echo_mode.to_string());
    compare("passive_mode", a.passive_mode.to_string(), b.passive_mode.to_string());
    compare("minimum_ttl", a.minimum_ttl.to_string(), b.minimum_ttl.to_string());
    if a.authentication != b.authentication {
        out.push(super::bfd_auth::difference(b.authentication.as_ref(), a.authentication.as_ref()));
    }
    out
}

/// A router being merged: the first definition plus everything later files add.
struct MergedRouter {
    vrf: String,
    asn: u32,
    asn_loc: Loc,
    field: String,
    id: Option<(Ipv4Addr, Loc)>,
    maximum_paths: Option<(u16, Loc)>,
    multipath_relax: Option<(bool, Loc)>,
    install: Option<(bool, Loc)>,
    table: Option<(u32, Loc)>,
    metric: Option<(u32, Loc)>,
    prefixes: BTreeSet<IpNet>,
    /// Where each contributing file's router table starts, for "not one of the router's prefixes".
    prefix_locs: Vec<(Loc, String)>,
    neighbors: Vec<NeighborFragment>,
    imports: BTreeSet<String>,
    sources: Vec<PathBuf>,
}

impl MergedRouter {
    fn new(router: RouterFragment, file: &std::path::Path) -> Self {
        Self {
            vrf: router.vrf,
            asn: router.asn,
            asn_loc: router.asn_loc,
            prefix_locs: vec![(router.prefixes_loc, router.field.clone())],
            field: router.field,
            id: router.id,
            maximum_paths: router.maximum_paths,
            multipath_relax: router.multipath_relax,
            install: router.install,
            table: router.table,
            metric: router.metric,
            prefixes: router.prefixes.into_iter().collect(),
            neighbors: router.neighbors,
            imports: router.imports.into_iter().collect(),
            sources: vec![file.to_path_buf()],
        }
    }

    fn extend(
        &mut self,
        router: RouterFragment,
        file: &std::path::Path,
        errors: &mut Vec<ConfigError>,
    ) {
        let vrf = vrf_display(&self.vrf);
        // frr-k8s: "different ASNs for the same router (VRF)" is a conflict.
        if router.asn != self.asn {
            errors.push(router.asn_loc.error(
                format!("{}.asn", router.field),
                format!(
                    "the router for VRF {vrf} has asn = {} here but asn = {} at {} ({}); one VRF has one local AS — \
                     make them equal",
                    router.asn, self.asn, self.asn_loc, self.field
                ),
            ));
            return;
        }
        let field = router.field.clone();
        adopt_or_conflict(&mut self.id, router.id, &format!("{field}.id"), &vrf, errors);
        adopt_or_conflict(
            &mut self.maximum_paths,
            router.maximum_paths,
            &format!("{field}.maximum_paths"),
            &vrf,
            errors,
        );
        adopt_or_conflict(
            &mut self.multipath_relax,
            router.multipath_relax,
            &format!("{field}.multipath_relax"),
            &vrf,
            errors,
        );
        adopt_or_conflict(
            &mut self.install,
            router.install,
            &format!("{field}.install"),
            &vrf,
            errors,
        );
        adopt_or_conflict(&mut self.table, router.table, &format!("{field}.table"), &vrf, errors);
        adopt_or_conflict(
            &mut self.metric,
            router.metric,
            &format!("{field}.metric"),
            &vrf,
            errors,
        );
        self.prefixes.extend(router.prefixes);
        self.imports.extend(router.imports);
        self.prefix_locs.push((router.prefixes_loc, router.field));
        for neighbor in router.neighbors {
            match self
                .neighbors
                .iter_mut()
                .find(|n| n.neighbor.address == neighbor.neighbor.address)
            {
                Some(existing) => merge_neighbor(existing, neighbor, file, errors),
                None => self.neighbors.push(neighbor),
            }
        }
        if !self.sources.iter().any(|s| s == file) {
            self.sources.push(file.to_path_buf());
        }
    }

    fn finish(
        self,
        profile_names: &[&str],
        check_references: bool,
        errors: &mut Vec<ConfigError>,
    ) -> Router {
        let mut neighbors = Vec::with_capacity(self.neighbors.len());
        for fragment in self.neighbors {
            if check_references {
                check_bfd_reference(&fragment, profile_names, errors);
            }
            neighbors.push(finish_neighbor(
                fragment,
                &self.prefixes,
                &self.prefix_locs,
                check_references,
                errors,
            ));
        }
        Router {
            asn: self.asn,
            id: self.id.map(|(id, _)| id),
            vrf: self.vrf,
            prefixes: self.prefixes.into_iter().collect(),
            maximum_paths: self
                .maximum_paths
                .map_or(super::validate::DEFAULT_MAXIMUM_PATHS, |(v, _)| v),
            multipath_relax: self
                .multipath_relax
                .map_or(super::validate::DEFAULT_MULTIPATH_RELAX, |(v, _)| v),
            install: self.install.map_or(super::validate::DEFAULT_INSTALL, |(v, _)| v),
            table: self.table.map(|(v, _)| v),
            metric: self.metric.map_or(super::validate::DEFAULT_METRIC, |(v, _)| v),
            neighbors,
            imports: self.imports.into_iter().collect(),
            sources: self.sources,
        }
    }
}

/// Router-level settings follow frr-k8s's router-id rule: a file that leaves a setting out
/// takes the other file's value; two different explicit values conflict.
fn adopt_or_conflict<T: PartialEq + std::fmt::Display>(
    current: &mut Option<(T, Loc)>,
    incoming: Option<(T, Loc)>,
    field: &str,
    vrf: &str,
    errors: &mut Vec<ConfigError>,
) {
    let Some((value, loc)) = incoming else { return };
    match current {
        None => *current = Some((value, loc)),
        Some((existing, existing_loc)) if *existing != value => {
            let name = field.rsplit('.').next().unwrap_or(field);
            errors.push(loc.error(
                field,
                format!(
                    "the router for VRF {vrf} has {name} = {value} here but {name} = {existing} at {existing_loc}; \
                     make them equal or leave it out of one file"
                ),
            ));
        }
        Some(_) => {}
    }
}

/// The same neighbor in two files: session settings must agree (after defaults, as frr-k8s
/// compares them), filters are unioned.
fn merge_neighbor(
    existing: &mut NeighborFragment,
    incoming: NeighborFragment,
    file: &std::path::Path,
    errors: &mut Vec<ConfigError>,
) {
    let mut differences = neighbor_settings::differences(&existing.neighbor, &incoming.neighbor);
    // A keepalive derived from two different hold times is not a second conflict.
    if !existing.written("keepalive_time") && !incoming.written("keepalive_time") {
        differences.retain(|d| d.field() != "keepalive_time");
    }
    if !differences.is_empty() {
        for difference in differences {
            let name = difference.field();
            let (here, there) = difference.as_written();
            let loc = incoming.loc_of(name);
            let there_loc = existing.loc_of(name);
            // Only defaults differ: a manifest's neighbor gets upstream's timers, a TOML one
            // uplink's (`TimerDefaults`).
            let defaults_differ =
                is_timer(name) && !existing.written(name) && !incoming.written(name);
            let hint = if defaults_differ {
                " (neither file sets it: a Kubernetes manifest's neighbor gets MetalLB's and \
                 frr-k8s's defaults, hold 3m/keepalive 1m/connect 2m, a TOML neighbor uplink's, \
                 1m30s/30s/5s; set it in both)"
            } else {
                ""
            };
            errors.push(loc.error(
                format!("{}.{name}", incoming.field),
                format!(
                    "neighbor {} has {here} here but {there} at {there_loc} ({}){hint}; a file may add neighbors, \
                     prefixes and filters but not change a neighbor's session settings — make them equal",
                    incoming.neighbor.address, existing.field
                ),
            ));
        }
        return;
    }
    let (current, added) = (&mut existing.neighbor, incoming.neighbor);
    // frr-k8s: "prefer the filter that allows more routes".
    if added.to_advertise.mode == AllowMode::All {
        current.to_advertise.mode = AllowMode::All;
    }
    current.to_receive = union_receive(&current.to_receive, &added.to_receive);
    existing.advertised.extend(incoming.advertised);
    for (name, loc) in incoming.field_locs {
        if !existing.field_locs.iter().any(|(n, _)| *n == name) {
            existing.field_locs.push((name, loc));
        }
    }
    if !current.sources.iter().any(|s| s == file) {
        current.sources.push(file.to_path_buf());
    }
}

fn is_timer(name: &str) -> bool {
    matches!(name, "hold_time" | "keepalive_time" | "connect_time")
}

fn union_receive(a: &ReceivePolicy, b: &ReceivePolicy) -> ReceivePolicy {
    if a.mode == AllowMode::All || b.mode == AllowMode::All {
        return ReceivePolicy { mode: AllowMode::All, prefixes: Vec::new() };
    }
    let prefixes: BTreeSet<_> = a.prefixes.iter().chain(&b.prefixes).copied().collect();
    ReceivePolicy { mode: AllowMode::Filtered, prefixes: prefixes.into_iter().collect() }
}

fn check_bfd_reference(
    fragment: &NeighborFragment,
    profile_names: &[&str],
    errors: &mut Vec<ConfigError>,
) {
    let Some(name) = &fragment.neighbor.bfd_profile else { return };
    if !profile_names.contains(&name.as_str()) {
        let valid = if profile_names.is_empty() {
            "no [[bgp.bfd_profiles]] are defined".to_string()
        } else {
            format!(
                "defined profiles: {}",
                profile_names.iter().map(|n| format!("\"{n}\"")).collect::<Vec<_>>().join(", ")
            )
        };
        errors.push(fragment.loc_of("bfd_profile").error(
            format!("{}.bfd_profile", fragment.field),
            format!("no BFD profile named \"{name}\"; {valid}"),
        ));
    }
}

/// Builds the neighbor's advertise policy from every file's `to_advertise` entries and checks
/// them against the merged router's prefixes.
fn finish_neighbor(
    fragment: NeighborFragment,
    router_prefixes: &BTreeSet<IpNet>,
    router_locs: &[(Loc, String)],
    check_references: bool,
    errors: &mut Vec<ConfigError>,
) -> Neighbor {
    let NeighborFragment { neighbor: mut result, advertised, .. } = fragment;
    let mode = result.to_advertise.mode;
    let mut allowed: BTreeSet<IpNet> = BTreeSet::new();
    let mut local_prefs: BTreeMap<IpNet, (u32, &AdvertisedPrefix)> = BTreeMap::new();
    let mut communities: BTreeMap<Community, BTreeSet<IpNet>> = BTreeMap::new();
    for entry in &advertised {
        // frr-k8s: every prefix a neighbor advertises must be one the router originates.
        if !router_prefixes.contains(&entry.prefix) {
            if check_references {
                let defined_at = router_locs
                    .iter()
                    .map(|(loc, field)| format!("{field}.prefixes at {loc}"))
                    .collect::<Vec<_>>()
                    .join(", ");
                errors.push(entry.loc.error(
                    entry.field.clone(),
                    format!(
                        "{} is not one of the router's prefixes ({defined_at}); add it to the router's prefixes or remove it here",
                        entry.prefix
                    ),
                ));
            }
            continue;
        }
        match entry.how {
            Advertised::Allowed => {
                allowed.insert(entry.prefix);
            }
            Advertised::WithLocalPref(local_pref) => match local_prefs.get(&entry.prefix) {
                Some((existing, first)) if *existing != local_pref => errors.push(entry.loc.error(
                    entry.field.clone(),
                    format!(
                        "{} already has local_pref {existing} at {} ({}); a prefix gets one LOCAL_PREF per neighbor",
                        entry.prefix, first.loc, first.field
                    ),
                )),
                Some(_) => {}
                None => {
                    local_prefs.insert(entry.prefix, (local_pref, entry));
                }
            },
            Advertised::WithCommunity(community) => {
                communities.entry(community).or_default().insert(entry.prefix);
            }
        }
    }
    // frr-k8s: local_pref and communities attach to prefixes this neighbor is sent.
    if check_references && mode == AllowMode::Filtered {
        for entry in advertised
            .iter()
            .filter(|e| e.how != Advertised::Allowed && router_prefixes.contains(&e.prefix))
        {
            if !allowed.contains(&entry.prefix) {
                errors.push(entry.loc.error(
                    entry.field.clone(),
                    format!(
                        "{} is not advertised to neighbor {}; add it to to_advertise.allowed.prefixes or set to_advertise.allowed.mode = \"all\"",
                        entry.prefix, result.address
                    ),
                ));
            }
        }
    }
    let mut by_value: BTreeMap<u32, Vec<IpNet>> = BTreeMap::new();
    for (prefix, (local_pref, _)) in local_prefs {
        by_value.entry(local_pref).or_default().push(prefix);
    }
    result.to_advertise = AdvertisePolicy {
        mode,
        prefixes: if mode == AllowMode::All { Vec::new() } else { allowed.into_iter().collect() },
        with_local_pref: by_value
            .into_iter()
            .map(|(local_pref, prefixes)| LocalPrefPrefixes { local_pref, prefixes })
            .collect(),
        with_community: communities
            .into_iter()
            .map(|(community, prefixes)| CommunityPrefixes {
                community,
                prefixes: prefixes.into_iter().collect(),
            })
            .collect(),
    };
    result
}

#[cfg(test)]
mod tests {
    use std::path::Path;
    use std::time::Duration;

    use super::super::{load_sources, ConfigError, PrefixMatch};
    use super::*;

    const A: &str = r#"[[bgp.bfd_profiles]]
name = "tor"
[[bgp.routers]]
asn = 65801
prefixes = ["10.128.7.0/24"]
[[bgp.routers.neighbors]]
address = "172.18.20.1"
asn = 65102
hold_time = "30s"
to_advertise.allowed.prefixes = ["10.128.7.0/24"]
to_receive.allowed.prefixes = [{ prefix = "0.0.0.0/0" }]
"#;

    const B: &str = r#"always_block = ["127.0.0.0/8"]
[[bgp.routers]]
asn = 65801
id = "172.18.20.113"
prefixes = ["172.18.20.201/32", "10.128.7.0/24"]
[[bgp.routers.neighbors]]
address = "172.18.20.1"
asn = 65102
port = 179
hold_time = "30s"
to_advertise.allowed.prefixes = ["172.18.20.201/32"]
to_receive.allowed.prefixes = [{ prefix = "10.0.0.0/8", le = 24 }, { prefix = "0.0.0.0/0" }]
[[bgp.routers.neighbors]]
address = "172.18.20.2"
asn = 65103
bfd_profile = "tor"
"#;

    fn load_two(a: &str, b: &str) -> Result<Config, Vec<ConfigError>> {
        load_sources(&[("a.toml".into(), a.to_string()), ("b.toml".into(), b.to_string())])
            .map_err(|e| e.0)
    }

    fn only_error(a: &str, b: &str) -> ConfigError {
        let errors = load_two(a, b).expect_err("should conflict");
        assert_eq!(errors.len(), 1, "{errors:#?}");
        errors.into_iter().next().unwrap()
    }

    fn assert_at(
        error: &ConfigError,
        file: &str,
        line: usize,
        column: usize,
        field: &str,
        parts: &[&str],
    ) {
        assert_eq!(
            (error.file.as_path(), error.line, error.column, error.field.as_str()),
            (Path::new(file), line, column, field),
            "{error}"
        );
        for part in parts {
            assert!(error.message.contains(part), "{:?} should contain {part:?}", error.message);
        }
    }

    fn net(text: &str) -> IpNet {
        text.parse().unwrap()
    }

    #[test]
    fn nexthop_objects_default_on_and_two_files_must_agree() {
        assert!(load_two(A, B).unwrap().fib.nexthop_objects);
        let off = "[fib]\nnexthop_objects = false\n";
        assert!(!load_two(A, off).unwrap().fib.nexthop_objects);
        assert!(!load_two(off, off).unwrap().fib.nexthop_objects);
        let error = only_error(off, "[fib]\nnexthop_objects = true\n");
        assert_at(
            &error,
            "b.toml",
            1,
            1,
            "fib.nexthop_objects",
            &["true here", "false at a.toml:1:1"],
        );
    }

    #[test]
    fn default_max_prefixes_fills_neighbors_without_their_own_and_two_files_must_agree() {
        let limits = |config: Config| -> Vec<Option<u32>> {
            config.bgp.routers[0]
                .neighbors
                .iter()
                .map(|n| n.max_prefixes.map(|m| m.limit))
                .collect()
        };
        assert_eq!(limits(load_two(A, B).unwrap()), vec![None, None]);
        let guard = "[bgp]\ndefault_max_prefixes = 1000\n";
        // B's second neighbor sets its own; a file that leaves it out is no conflict.
        let own = B.replace("bfd_profile = \"tor\"", "bfd_profile = \"tor\"\nmax_prefixes = 10");
        let config = load_two(&format!("{guard}{A}"), &own).unwrap();
        assert_eq!(config.bgp.default_max_prefixes, Some(1000));
        assert_eq!(limits(config.clone()), vec![Some(1000), Some(10)]);
        let neighbor = &config.bgp.routers[0].neighbors[0];
        let limit = neighbor.max_prefixes.unwrap();
        assert!(limit.threshold == 75 && !limit.warning_only && limit.restart_time.is_none());
        let error = only_error(guard, "[bgp]\ndefault_max_prefixes = 2000\n");
        assert_at(
            &error,
            "b.toml",
            2,
            24,
            "bgp.default_max_prefixes",
            &["2000 here", "1000 at a.toml:2:24"],
        );
        let errors = load_two(A, "[bgp]\ndefault_max_prefixes = 0\n").expect_err("zero");
        assert!(errors[0].message.contains("prefixes"), "{errors:?}");
    }

    #[test]
    fn metrics_listen_off_by_default_and_two_files_must_agree() {
        assert_eq!(load_two(A, B).unwrap().metrics.listen, None);
        let on = "[metrics]\nlisten = \"127.0.0.1:9181\"\n";
        let listen = Some("127.0.0.1:9181".parse().unwrap());
        assert_eq!(load_two(A, on).unwrap().metrics.listen, listen);
        assert_eq!(load_two(on, on).unwrap().metrics.listen, listen);
        let error = only_error(on, "\n[metrics]\nlisten = \"[::1]:9181\"\n");
        assert_at(
            &error,
            "b.toml",
            3,
            10,
            "metrics.listen",
            &["\"[::1]:9181\" here", "\"127.0.0.1:9181\" at a.toml:2:10"],
        );
    }

    #[test]
    fn fragments_only_add() {
        let config = load_two(A, B).unwrap();
        assert_eq!(config.files, vec![PathBuf::from("a.toml"), PathBuf::from("b.toml")]);
        assert_eq!(config.always_block, vec![net("127.0.0.0/8")]);
        let [router] = config.bgp.routers.as_slice() else { panic!("one router expected") };
        assert_eq!(router.asn, 65801);
        assert_eq!(
            router.id,
            Some(Ipv4Addr::new(172, 18, 20, 113)),
            "id adopted from the file that sets it"
        );
        assert_eq!(router.prefixes, vec![net("10.128.7.0/24"), net("172.18.20.201/32")]);
        assert_eq!(router.sources, vec![PathBuf::from("a.toml"), PathBuf::from("b.toml")]);
        let [first, second] = router.neighbors.as_slice() else { panic!("two neighbors expected") };
        assert_eq!(first.address.to_string(), "172.18.20.1");
        assert_eq!(first.hold_time, Duration::from_secs(30));
        assert_eq!(first.sources, vec![PathBuf::from("a.toml"), PathBuf::from("b.toml")]);
        assert_eq!(
            first.to_advertise.prefixes,
            vec![net("10.128.7.0/24"), net("172.18.20.201/32")]
        );
        assert_eq!(
            first.to_receive.prefixes,
            vec![
                PrefixMatch { prefix: net("0.0.0.0/0"), ge: None, le: None },
                PrefixMatch { prefix: net("10.0.0.0/8"), ge: None, le: Some(24) },
            ]
        );
        assert_eq!(second.address.to_string(), "172.18.20.2");
        assert_eq!(second.sources, vec![PathBuf::from("b.toml")]);
        // The profile is defined in a.toml and used from b.toml.
        assert_eq!(second.bfd_profile.as_deref(), Some("tor"));
        assert_eq!(config.bgp.bfd_profiles.len(), 1);
    }

    #[test]
    fn merging_is_idempotent() {
        let without_sources = |mut config: Config| {
            for router in &mut config.bgp.routers {
                router.sources.clear();
                router.neighbors.iter_mut().for_each(|n| n.sources.clear());
            }
            config.bgp
        };
        let once = without_sources(load_two(A, "").unwrap());
        let twice = without_sources(load_two(A, A).unwrap());
        assert_eq!(once, twice);
    }

    #[test]
    fn different_router_asn_conflicts_naming_both_files() {
        let error = only_error(A, &B.replacen("asn = 65801", "asn = 65802", 1));
        assert_at(
            &error,
            "b.toml",
            3,
            7,
            "bgp.routers[0].asn",
            &["asn = 65802 here but asn = 65801 at a.toml:4:7 (bgp.routers[0])"],
        );
    }

    #[test]
    fn router_settings_adopt_or_conflict() {
        let error = only_error(&A.replace("asn = 65801\n", "asn = 65801\nid = \"10.0.0.1\"\n"), B);
        assert_at(
            &error,
            "b.toml",
            4,
            6,
            "bgp.routers[0].id",
            &["id = 172.18.20.113 here but id = 10.0.0.1 at a.toml:5:6"],
        );
        let error = only_error(
            &A.replace("asn = 65801\n", "asn = 65801\nmaximum_paths = 8\n"),
            &B.replace("asn = 65801\n", "asn = 65801\nmaximum_paths = 16\n"),
        );
        assert_at(
            &error,
            "b.toml",
            4,
            17,
            "bgp.routers[0].maximum_paths",
            &["maximum_paths = 16 here but maximum_paths = 8 at a.toml:5:17"],
        );
        let config =
            load_two(&A.replace("asn = 65801\n", "asn = 65801\nmaximum_paths = 8\n"), B).unwrap();
        assert_eq!(config.bgp.routers[0].maximum_paths, 8);
    }

    #[test]
    fn fib_settings_adopt_or_conflict() {
        let error = only_error(
            &A.replace("asn = 65801\n", "asn = 65801\nmetric = 20\n"),
            &B.replace("asn = 65801\n", "asn = 65801\nmetric = 30\n"),
        );
        assert_at(
            &error,
            "b.toml",
            4,
            10,
            "bgp.routers[0].metric",
            &["metric = 30 here but metric = 20 at a.toml:5:10"],
        );
        let error = only_error(
            &A.replace("asn = 65801\n", "asn = 65801\ninstall = true\n"),
            &B.replace("asn = 65801\n", "asn = 65801\ninstall = false\n"),
        );
        assert_eq!(error.field, "bgp.routers[0].install");
        let config =
            load_two(A, &B.replace("asn = 65801\n", "asn = 65801\ntable = 100\ninstall = true\n"))
                .unwrap();
        let router = &config.bgp.routers[0];
        assert_eq!((router.install, router.table, router.metric), (true, Some(100), 20));
    }

    #[test]
    fn routers_in_other_vrfs_are_separate() {
        let config = load_two(
            A,
            &B.replace("asn = 65801\n", "asn = 65802\nvrf = \"red\"\n")
                .replace("bfd_profile = \"tor\"\n", ""),
        )
        .unwrap();
        let vrfs: Vec<(&str, u32)> =
            config.bgp.routers.iter().map(|r| (r.vrf.as_str(), r.asn)).collect();
        assert_eq!(vrfs, vec![("", 65801), ("red", 65802)]);
    }

    #[test]
    fn neighbor_session_settings_must_agree() {
        let error = only_error(A, &B.replacen("hold_time = \"30s\"", "hold_time = \"60s\"", 1));
        assert_at(
            &error,
            "b.toml",
            10,
            13,
            "bgp.routers[0].neighbors[0].hold_time",
            &["neighbor 172.18.20.1 has hold_time = \"1m\" here but hold_time = \"30s\" at a.toml:9:13"],
        );
        // Leaving a setting out means its default, as in frr-k8s: 90s differs from 30s. The
        // error then points at the neighbor's address.
        let error = only_error(A, &B.replacen("hold_time = \"30s\"\n", "", 1));
        assert_at(
            &error,
            "b.toml",
            7,
            11,
            "bgp.routers[0].neighbors[0].hold_time",
            &["hold_time = \"1m30s\" here"],
        );
        let error = only_error(A, &B.replacen("asn = 65102", "dynamic_asn = \"external\"", 1));
        assert_at(
            &error,
            "b.toml",
            8,
            15,
            "bgp.routers[0].neighbors[0].dynamic_asn",
            &["has dynamic_asn = \"external\" here but asn = 65102 at a.toml:8:7"],
        );
    }

    #[test]
    fn password_conflicts_never_show_the_key() {
        let error = only_error(
            &A.replace("hold_time", "password = \"first-key\"\nhold_time"),
            &B.replacen("hold_time", "password = \"second-key\"\nhold_time", 1),
        );
        assert_at(
            &error,
            "b.toml",
            10,
            12,
            "bgp.routers[0].neighbors[0].password",
            &["one TCP-MD5 key here but a different key at a.toml:9:12"],
        );
        assert!(!error.message.contains("first-key") && !error.message.contains("second-key"));
    }

    #[test]
    fn the_more_permissive_filter_wins() {
        let config = load_two(A, &B.replace("to_receive.allowed.prefixes = [{ prefix = \"10.0.0.0/8\", le = 24 }, { prefix = \"0.0.0.0/0\" }]", "to_receive.allowed.mode = \"all\"")).unwrap();
        let neighbor = &config.bgp.routers[0].neighbors[0];
        assert_eq!(neighbor.to_receive, ReceivePolicy { mode: AllowMode::All, prefixes: vec![] });
        let config = load_two(
            A,
            &B.replace(
                "to_advertise.allowed.prefixes = [\"172.18.20.201/32\"]",
                "to_advertise.allowed.mode = \"all\"",
            ),
        )
        .unwrap();
        let neighbor = &config.bgp.routers[0].neighbors[0];
        assert_eq!(neighbor.to_advertise.mode, AllowMode::All);
        assert!(neighbor.to_advertise.prefixes.is_empty());
    }

    #[test]
    fn advertised_prefixes_are_checked_against_the_merged_router() {
        // b.toml advertises a prefix only a.toml originates: fine.
        let b = B
            .replace(
                "prefixes = [\"172.18.20.201/32\", \"10.128.7.0/24\"]",
                "prefixes = [\"172.18.20.201/32\"]",
            )
            .replace(
                "to_advertise.allowed.prefixes = [\"172.18.20.201/32\"]",
                "to_advertise.allowed.prefixes = [\"10.128.7.0/24\"]",
            );
        assert!(load_two(A, &b).is_ok());
        let b = B.replace(
            "to_advertise.allowed.prefixes = [\"172.18.20.201/32\"]",
            "to_advertise.allowed.prefixes = [\"192.0.2.0/24\"]",
        );
        let error = only_error(A, &b);
        assert_at(
            &error,
            "b.toml",
            11,
            34,
            "bgp.routers[0].neighbors[0].to_advertise.allowed.prefixes[0]",
            &["192.0.2.0/24 is not one of the router's prefixes (bgp.routers[0].prefixes at a.toml:3:1, bgp.routers[0].prefixes at b.toml:2:1)"],
        );
    }

    #[test]
    fn local_pref_conflicts_across_files() {
        let a = A.replace(
            "to_receive",
            "to_advertise.with_local_pref = [{ local_pref = 100, prefixes = [\"10.128.7.0/24\"] }]\nto_receive",
        );
        let b = B.replacen(
            "to_receive",
            "to_advertise.with_local_pref = [{ local_pref = 200, prefixes = [\"10.128.7.0/24\"] }]\nto_receive",
            1,
        );
        let error = only_error(&a, &b);
        assert_at(
            &error,
            "b.toml",
            12,
            65,
            "bgp.routers[0].neighbors[0].to_advertise.with_local_pref[0].prefixes[0]",
            &["10.128.7.0/24 already has local_pref 100 at a.toml:11:65"],
        );
        let config = load_two(&a, &a).unwrap();
        let lp = &config.bgp.routers[0].neighbors[0].to_advertise.with_local_pref;
        assert_eq!(
            lp,
            &vec![LocalPrefPrefixes { local_pref: 100, prefixes: vec![net("10.128.7.0/24")] }]
        );
    }

    #[test]
    fn bfd_profiles_with_one_name_must_be_identical() {
        let identical = load_two(
            A,
            &format!("{B}[[bgp.bfd_profiles]]\nname = \"tor\"\ndetect_multiplier = 3\n"),
        );
        assert_eq!(identical.map(|c| c.bgp.bfd_profiles.len()), Ok(1));
        let error = only_error(
            A,
            &format!("{B}[[bgp.bfd_profiles]]\nname = \"tor\"\ndetect_multiplier = 5\n"),
        );
        assert_at(
            &error,
            "b.toml",
            18,
            8,
            "bgp.bfd_profiles[0].name",
            &["also defined at a.toml:2:8 (bgp.bfd_profiles[0]) with different settings (detect_multiplier 5 vs 3)"],
        );
    }

    #[test]
    fn dangling_references_list_what_exists() {
        let error = only_error(A, &B.replace("bfd_profile = \"tor\"", "bfd_profile = \"fast\""));
        assert_at(
            &error,
            "b.toml",
            16,
            15,
            "bgp.routers[0].neighbors[1].bfd_profile",
            &["no BFD profile named \"fast\"; defined profiles: \"tor\""],
        );
    }

    #[test]
    fn reference_checks_wait_for_other_errors_to_be_fixed() {
        // The bad router prefix is reported once, not again as a dangling advertised prefix.
        let a = A.replacen("prefixes = [\"10.128.7.0/24\"]", "prefixes = [\"10.128.7.1/24\"]", 1);
        let errors = load_two(&a, "").unwrap_err();
        assert_eq!(errors.len(), 1, "{errors:#?}");
        assert_eq!(errors[0].field, "bgp.routers[0].prefixes[0]");
    }

    #[test]
    fn conflicts_and_validation_errors_from_all_files_are_reported_together() {
        let errors = load_two(
            &A.replace("hold_time = \"30s\"", "hold_time = \"1s\""),
            &B.replacen("asn = 65801", "asn = 1", 1),
        )
        .unwrap_err();
        let found: Vec<(String, usize)> =
            errors.iter().map(|e| (e.file.display().to_string(), e.line)).collect();
        assert_eq!(found, vec![("a.toml".to_string(), 9), ("b.toml".to_string(), 3)]);
    }
}
