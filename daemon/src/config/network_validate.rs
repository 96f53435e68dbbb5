//! `[network]` and `[[network_policies]]` as written → validated fragments → the node's
//! `NetworkConfig`: selection by node labels, collisions between policies, and the VRFs that
//! `[[networks]]` need.
//!
//! `desired_state` is nmstate's own (kebab-case: `prefix-length`, `base-iface`; every
//! interface type and key nmstate has), so a desired state copied from an NNCP or an
//! `nmstatectl` file works as it is; nmstate's types check it (`desired_state.rs`).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use ipnet::IpNet;
use serde::Deserialize;

use super::desired_state;
use super::duration::{bare_number_hint, parse_duration};
use super::error::{ConfigError, Loc};
use super::network::{
    vrf_table_id, DesiredState, NetworkBackend, NetworkConfig, NetworkPolicy, ProbeSettings,
};
use super::raw::{RawDuration, S};
use super::source::SourceText;

// ---------------------------------------------------------------------------------------------
// As written

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, expecting = "a [network] table")]
pub(crate) struct RawNetworkSettings {
    pub backend: Option<S<String>>,
    pub state_dir: Option<S<String>>,
    pub rollback_timeout: Option<S<RawDuration>>,
    pub node_addresses: Option<S<Vec<S<String>>>>,
    pub probes: Option<S<RawProbes>>,
    /// Node name → key → value.
    #[serde(default)]
    pub node_values: BTreeMap<String, S<BTreeMap<String, S<String>>>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, expecting = "a [network.probes] table")]
pub(crate) struct RawProbes {
    pub timeout: Option<S<RawDuration>>,
    pub pre_timeout: Option<S<RawDuration>>,
    pub interval: Option<S<RawDuration>>,
    pub dns_name: Option<S<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, expecting = "a [[network_policies]] table")]
pub(crate) struct RawNetworkPolicy {
    pub name: S<String>,
    #[serde(default)]
    pub node_selector: BTreeMap<String, S<String>>,
    pub max_unavailable: Option<S<toml::Value>>,
    /// nmstate's desired state, any of its keys: nmstate's own types check it
    /// (`config::desired_state`).
    pub desired_state: S<toml::Value>,
    /// kubernetes-nmstate's captures: name → nmstate capture expression, read against the
    /// node's current state to fill `{{ capture.NAME.… }}` in the desired state.
    #[serde(default)]
    pub capture: BTreeMap<String, S<String>>,
}

// ---------------------------------------------------------------------------------------------
// Validated, per file

/// One file's network sections.
#[derive(Debug, Clone, Default)]
pub(crate) struct NetworkFragment {
    pub settings: Vec<Setting>,
    /// Node name → (key → value), with where the row is written.
    pub node_values: Vec<(String, BTreeMap<String, String>, Loc)>,
    pub policies: Vec<PolicyFragment>,
}

/// One `[network]` setting a file writes, so that two files can be checked for conflicts.
#[derive(Debug, Clone)]
pub(crate) struct Setting {
    pub field: &'static str,
    pub value: SettingValue,
    pub loc: Loc,
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) enum SettingValue {
    Backend(NetworkBackend),
    StateDir(PathBuf),
    RollbackTimeout(Duration),
    NodeAddresses(Vec<IpNet>),
    ProbeTimeout(Duration),
    PreProbeTimeout(Duration),
    ProbeInterval(Duration),
    DnsName(String),
}

#[derive(Debug, Clone)]
pub(crate) struct PolicyFragment {
    pub policy: NetworkPolicy,
    pub loc: Loc,
    /// Where errors about the policy as a whole point: its name and its desired state, in the
    /// file's own spelling (a manifest rewrites them).
    pub name_field: String,
    pub desired_field: String,
    /// Each interface the policy names, with where.
    pub interfaces: Vec<(String, Loc)>,
}

/// Validates one file's `[network]` and `[[network_policies]]`.
pub(crate) fn validate(
    source: &SourceText<'_>,
    settings: Option<S<RawNetworkSettings>>,
    policies: Vec<S<RawNetworkPolicy>>,
    errors: &mut Vec<ConfigError>,
) -> NetworkFragment {
    let mut check = Check { source, errors };
    let mut fragment = NetworkFragment::default();
    if let Some(settings) = settings {
        check.settings(settings.into_inner(), &mut fragment);
    }
    for (index, raw) in policies.into_iter().enumerate() {
        let field = format!("network_policies[{index}]");
        if let Some(policy) = check.policy(raw.into_inner(), &field) {
            if let Some(first) =
                fragment.policies.iter().find(|p| p.policy.name == policy.policy.name)
            {
                let message = format!(
                    "policy \"{}\" is defined twice in this file (first at {})",
                    policy.policy.name, first.loc
                );
                check.errors.push(policy.loc.error(policy.name_field.clone(), message));
                continue;
            }
            fragment.policies.push(policy);
        }
    }
    fragment
}

struct Check<'s, 'e> {
    source: &'s SourceText<'s>,
    errors: &'e mut Vec<ConfigError>,
}

impl Check<'_, '_> {
    fn fail<T>(&mut self, value: &S<T>, field: &str, message: impl Into<String>) {
        self.errors.push(self.source.error_at(&value.span(), field, message));
    }

    fn loc<T>(&self, value: &S<T>) -> Loc {
        self.source.loc(value.span().start)
    }

    fn settings(&mut self, raw: RawNetworkSettings, fragment: &mut NetworkFragment) {
        let mut push = |field: &'static str, value: SettingValue, loc: Loc| {
            fragment.settings.push(Setting { field, value, loc });
        };
        if let Some(backend) = &raw.backend {
            match backend.get_ref().as_str() {
                "networkmanager" => push(
                    "backend",
                    SettingValue::Backend(NetworkBackend::NetworkManager),
                    self.loc(backend),
                ),
                "kernel" => push(
                    "backend",
                    SettingValue::Backend(NetworkBackend::Kernel),
                    self.loc(backend),
                ),
                other => self.fail(
                    backend,
                    "network.backend",
                    format!("unknown backend \"{other}\"; valid: \"networkmanager\", \"kernel\""),
                ),
            }
        }
        if let Some(dir) = &raw.state_dir {
            if dir.get_ref().is_empty() || !dir.get_ref().starts_with('/') {
                self.fail(dir, "network.state_dir", "must be an absolute path");
            } else {
                push(
                    "state_dir",
                    SettingValue::StateDir(PathBuf::from(dir.get_ref())),
                    self.loc(dir),
                );
            }
        }
        if let Some(value) = &raw.rollback_timeout {
            if let Some(d) = self.duration(value, "network.rollback_timeout", 1) {
                push("rollback_timeout", SettingValue::RollbackTimeout(d), self.loc(value));
            }
        }
        if let Some(list) = &raw.node_addresses {
            let mut addresses = Vec::new();
            for (i, text) in list.get_ref().iter().enumerate() {
                match text.get_ref().parse::<IpNet>() {
                    Ok(net) => addresses.push(net),
                    Err(_) => self.fail(
                        text,
                        &format!("network.node_addresses[{i}]"),
                        format!("{:?} is not an address with its prefix length, such as \"172.18.20.113/24\"", text.get_ref()),
                    ),
                }
            }
            push("node_addresses", SettingValue::NodeAddresses(addresses), self.loc(list));
        }
        if let Some(probes) = &raw.probes {
            let probes = probes.get_ref();
            for (value, field, make) in [
                (
                    &probes.timeout,
                    "probes.timeout",
                    SettingValue::ProbeTimeout as fn(Duration) -> SettingValue,
                ),
                (&probes.pre_timeout, "probes.pre_timeout", SettingValue::PreProbeTimeout),
                (&probes.interval, "probes.interval", SettingValue::ProbeInterval),
            ] {
                if let Some(value) = value {
                    if let Some(d) = self.duration(value, &format!("network.{field}"), 0) {
                        push(field, make(d), self.loc(value));
                    }
                }
            }
            if let Some(name) = &probes.dns_name {
                push(
                    "probes.dns_name",
                    SettingValue::DnsName(name.get_ref().clone()),
                    self.loc(name),
                );
            }
        }
        for (node, row) in raw.node_values {
            let values =
                row.get_ref().iter().map(|(k, v)| (k.clone(), v.get_ref().clone())).collect();
            fragment.node_values.push((node, values, self.loc(&row)));
        }
    }

    /// A duration of at least `min_secs` seconds (0: at least 1 ms).
    fn duration(&mut self, value: &S<RawDuration>, field: &str, min_secs: u64) -> Option<Duration> {
        let duration = match value.get_ref() {
            RawDuration::Number(n) => {
                self.fail(value, field, bare_number_hint(n));
                return None;
            }
            RawDuration::Text(text) => match parse_duration(text) {
                Ok(d) => d,
                Err(e) => {
                    self.fail(value, field, e.to_string());
                    return None;
                }
            },
        };
        let min = Duration::from_secs(min_secs).max(Duration::from_millis(1));
        if duration < min {
            self.fail(
                value,
                field,
                format!("must be at least {}", super::duration::format_duration(min)),
            );
            return None;
        }
        Some(duration)
    }

    fn policy(&mut self, raw: RawNetworkPolicy, field: &str) -> Option<PolicyFragment> {
        let loc = self.loc(&raw.name);
        let name = raw.name.get_ref().clone();
        if name.is_empty() {
            self.fail(&raw.name, &format!("{field}.name"), "must not be empty");
            return None;
        }
        let node_selector =
            raw.node_selector.iter().map(|(k, v)| (k.clone(), v.get_ref().clone())).collect();
        let max_unavailable = raw.max_unavailable.as_ref().and_then(|v| match v.get_ref() {
            toml::Value::Integer(n) if *n >= 1 => Some(n.to_string()),
            toml::Value::String(s) if percent_or_count(s) => Some(s.clone()),
            _ => {
                self.fail(
                    v,
                    &format!("{field}.max_unavailable"),
                    "must be a count (1 or more) or a percentage such as \"50%\"",
                );
                None
            }
        });
        let capture: BTreeMap<String, String> =
            raw.capture.iter().map(|(k, v)| (k.clone(), v.get_ref().clone())).collect();
        if let Err(message) = desired_state::check_captures(&capture) {
            let first = raw.capture.values().next().map_or_else(|| raw.name.span(), S::span);
            let field = format!("{field}.capture");
            self.errors.push(self.source.error_at(&first, field, message));
            return None;
        }
        let capture_names: Vec<String> = capture.keys().cloned().collect();
        let desired_field = format!("{field}.desired_state");
        let desired =
            desired_state::with_defaults(desired_state::toml_to_json(raw.desired_state.get_ref()));
        let (names, problems) = desired_state::check(&desired, &capture_names);
        if !problems.is_empty() {
            let fields: Vec<String> = problems
                .iter()
                .map(|problem| match problem.field.as_str() {
                    "" => desired_field.clone(),
                    below => format!("{desired_field}.{below}"),
                })
                .collect();
            // Where each culprit is written (a table's first key may be lines below the
            // desired state's start).
            let spans = self.source.spans_of(&fields);
            for ((problem, field), span) in problems.into_iter().zip(fields).zip(spans) {
                let span = span.unwrap_or_else(|| raw.desired_state.span());
                self.errors.push(self.source.error_at(&span, field, problem.message));
            }
            return None;
        }
        let name_fields: Vec<String> = names
            .iter()
            .map(|(index, _)| format!("{desired_field}.interfaces[{index}].name"))
            .collect();
        let spans = self.source.spans_of(&name_fields);
        let interfaces = names
            .into_iter()
            .zip(spans)
            .map(|((_, name), span)| {
                let span = span.unwrap_or_else(|| raw.desired_state.span());
                (name, self.source.loc(span.start))
            })
            .collect();
        let desired_state = DesiredState(desired);
        Some(PolicyFragment {
            policy: NetworkPolicy {
                name,
                node_selector,
                max_unavailable,
                desired_state,
                capture,
                generated: false,
                sources: vec![self.source.path.to_path_buf()],
            },
            loc,
            name_field: format!("{field}.name"),
            desired_field,
            interfaces,
        })
    }
}

fn percent_or_count(text: &str) -> bool {
    let digits = text.strip_suffix('%').unwrap_or(text);
    !digits.is_empty() && digits.chars().all(|c| c.is_ascii_digit())
}

// ---------------------------------------------------------------------------------------------
// Merged

/// A `[[networks]]` entry that lives in a VRF of its own, for the VRF uplink creates.
#[derive(Debug, Clone)]
pub(crate) struct NetworkVrf {
    pub vrf: String,
    /// The table a router of that VRF names, if any.
    pub table: Option<u32>,
    pub source: PathBuf,
}

/// Merges the files' network sections into the node's `NetworkConfig`: settings (a file that
/// leaves one out takes the other's; two different values conflict), the node's row of
/// `node_values`, the policies whose `node_selector` matches `node_labels` (a name defined in
/// two files, or one interface in two selected policies, is an error naming both places), and a
/// VRF policy for each network VRF that no policy creates.
pub(crate) fn merge(
    fragments: Vec<NetworkFragment>,
    node_name: Option<&str>,
    node_labels: &BTreeMap<String, String>,
    network_vrfs: &[NetworkVrf],
    errors: &mut Vec<ConfigError>,
) -> NetworkConfig {
    let mut config = NetworkConfig::default();
    let mut seen: Vec<Setting> = Vec::new();
    let mut policies: Vec<PolicyFragment> = Vec::new();
    let mut values_loc: Option<Loc> = None;
    for fragment in fragments {
        for setting in fragment.settings {
            match seen.iter().find(|s| s.field == setting.field) {
                Some(first) if first.value != setting.value => errors.push(setting.loc.error(
                    format!("network.{}", setting.field),
                    format!("differs from the value at {}; a node has one [network] setting — make them equal or set it in one file", first.loc),
                )),
                Some(_) => {}
                None => {
                    apply_setting(&mut config, &setting.value);
                    seen.push(setting);
                }
            }
        }
        for (node, values, loc) in fragment.node_values {
            if Some(node.as_str()) != node_name {
                continue;
            }
            for (key, value) in values {
                match config.node_values.get(&key) {
                    Some(first) if *first != value => errors.push(loc.error(
                        format!("network.node_values.{node}.{key}"),
                        format!(
                            "is {value:?} here but {first:?} at {}",
                            values_loc.as_ref().map_or(String::new(), ToString::to_string)
                        ),
                    )),
                    _ => {
                        config.node_values.insert(key, value);
                    }
                }
            }
            values_loc.get_or_insert(loc);
        }
        for policy in fragment.policies {
            if let Some(first) = policies.iter().find(|p| p.policy.name == policy.policy.name) {
                errors.push(policy.loc.error(
                    policy.name_field.clone(),
                    format!(
                        "policy \"{}\" is also defined at {}; policy names are unique",
                        policy.policy.name, first.loc
                    ),
                ));
                continue;
            }
            policies.push(policy);
        }
    }
    let selected: Vec<PolicyFragment> = policies
        .into_iter()
        .filter(|p| p.policy.node_selector.iter().all(|(k, v)| node_labels.get(k) == Some(v)))
        .collect();
    let mut claimed: Vec<(String, &PolicyFragment, Loc)> = Vec::new();
    for policy in &selected {
        for (interface, loc) in &policy.interfaces {
            if let Some((_, first, first_loc)) = claimed.iter().find(|(n, _, _)| n == interface) {
                errors.push(loc.error(
                    policy.desired_field.clone(),
                    format!(
                        "policies \"{}\" ({}) and \"{}\" ({}) both configure interface {interface}; one interface belongs to one policy",
                        first.policy.name, first_loc, policy.policy.name, loc
                    ),
                ));
            } else {
                claimed.push((interface.clone(), policy, loc.clone()));
            }
        }
    }
    let mut out: Vec<NetworkPolicy> = selected.iter().map(|p| p.policy.clone()).collect();
    out.sort_by(|a, b| a.name.cmp(&b.name));
    let mut vrfs: Vec<NetworkPolicy> = Vec::new();
    // VRFs for networks: created by uplink unless a policy already names the device.
    let mut tables: Vec<(u32, &str)> = Vec::new();
    for network in network_vrfs {
        if claimed.iter().any(|(n, _, _)| *n == network.vrf)
            || out.iter().any(|p| p.name == vrf_policy_name(&network.vrf))
        {
            continue;
        }
        let table = network.table.unwrap_or_else(|| vrf_table_id(&network.vrf));
        if let Some((_, other)) = tables.iter().find(|(t, _)| *t == table) {
            errors.push(Loc::file(&network.source).error(
                "networks",
                format!("the VRFs {other} and {} would both get kernel table {table}; give one of their routers an explicit `table`", network.vrf),
            ));
            continue;
        }
        tables.push((table, &network.vrf));
        vrfs.push(NetworkPolicy {
            name: vrf_policy_name(&network.vrf),
            node_selector: BTreeMap::new(),
            max_unavailable: None,
            desired_state: DesiredState::vrf(&network.vrf, table),
            capture: BTreeMap::new(),
            generated: true,
            sources: vec![network.source.clone()],
        });
    }
    // The VRFs first: policies put VLANs into them with `controller` (on a cluster node,
    // OVN-Kubernetes creates them before any NNCP needs them).
    vrfs.append(&mut out);
    config.policies = vrfs;
    config
}

/// The `[[networks]]` that live in a VRF of their own with a BGP router there (VRF-lite): the
/// VRF device is uplink's to create (OVN-Kubernetes creates it on a cluster node; uplink's
/// nodes have no OVN-Kubernetes to do it).
pub(crate) fn network_vrfs(config: &super::Config) -> Vec<NetworkVrf> {
    let mut out: Vec<NetworkVrf> = Vec::new();
    for network in &config.announce.networks {
        if network.vrf.is_empty() || out.iter().any(|n| n.vrf == network.vrf) {
            continue;
        }
        let Some(router) = config.bgp.routers.iter().find(|r| r.vrf == network.vrf) else {
            continue;
        };
        out.push(NetworkVrf {
            vrf: network.vrf.clone(),
            table: router.table,
            source: network.sources.first().map(|s| s.to_path_buf()).unwrap_or_default(),
        });
    }
    out
}

/// The name of the policy uplink makes for a network's VRF.
pub fn vrf_policy_name(vrf: &str) -> String {
    format!("uplink-vrf-{vrf}")
}

fn apply_setting(config: &mut NetworkConfig, value: &SettingValue) {
    let probes: &mut ProbeSettings = &mut config.probes;
    match value {
        SettingValue::Backend(b) => config.backend = *b,
        SettingValue::StateDir(d) => config.state_dir = d.clone(),
        SettingValue::RollbackTimeout(d) => config.rollback_timeout = *d,
        SettingValue::NodeAddresses(a) => config.node_addresses = a.clone(),
        SettingValue::ProbeTimeout(d) => probes.timeout = *d,
        SettingValue::PreProbeTimeout(d) => probes.pre_timeout = *d,
        SettingValue::ProbeInterval(d) => probes.interval = *d,
        SettingValue::DnsName(n) => probes.dns_name = n.clone(),
    }
}

#[cfg(test)]
mod tests {
    use std::path::{Path, PathBuf};

    use serde_json::json;

    use super::super::load::load_sources;
    use super::super::network::NetworkBackend;
    use super::super::{Config, ConfigErrors};

    fn load(files: &[(&str, &str)]) -> Result<Config, ConfigErrors> {
        let sources: Vec<(PathBuf, String)> =
            files.iter().map(|(name, text)| (PathBuf::from(name), text.to_string())).collect();
        load_sources(&sources)
    }

    fn nncp_fixture() -> (PathBuf, String) {
        let path = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/manifests/nncp-vrf-lite.yaml");
        let text = std::fs::read_to_string(&path).unwrap();
        (path, text)
    }

    const NODE_WK3: &str = "[node]\nname = \"wk3\"\n";

    const POLICY: &str = r#"
[network]
backend = "kernel"
state_dir = "/tmp/uplink-state"
probes = { timeout = "5s" }

[[network_policies]]
name = "uplink"
node_selector = { "node-role.kubernetes.io/worker" = "" }
[[network_policies.desired_state.interfaces]]
name = "br-up"
type = "linux-bridge"
ipv4 = { address = [{ ip = "10.77.0.2", prefix-length = 24 }] }
[[network_policies.desired_state.routes.config]]
destination = "0.0.0.0/0"
next-hop-address = "10.77.0.1"
next-hop-interface = "br-up"
"#;

    #[test]
    fn a_toml_policy_selects_by_labels_and_keeps_nmstates_spelling() {
        let worker =
            "[node]\nname = \"wk1\"\nlabels = { \"node-role.kubernetes.io/worker\" = \"\" }\n";
        let config = load(&[("main.toml", worker), ("net.toml", POLICY)]).unwrap();
        let network = &config.network;
        assert_eq!(network.backend, NetworkBackend::Kernel);
        assert_eq!(network.state_dir, PathBuf::from("/tmp/uplink-state"));
        assert_eq!(network.probes.timeout, std::time::Duration::from_secs(5));
        assert_eq!(network.policies.len(), 1);
        assert_eq!(
            network.policies[0].desired_state.to_json(),
            json!({
                "interfaces": [{"name": "br-up", "type": "linux-bridge", "state": "up",
                    "ipv4": {"enabled": true, "address": [{"ip": "10.77.0.2", "prefix-length": 24}]}}],
                "routes": {"config": [{"destination": "0.0.0.0/0", "next-hop-address": "10.77.0.1",
                                       "next-hop-interface": "br-up"}]}
            })
        );
        // A node without the label is not selected.
        let other = load(&[("main.toml", NODE_WK3), ("net.toml", POLICY)]).unwrap();
        assert!(other.network.policies.is_empty());
    }

    #[test]
    fn the_decks_nncp_applies_unchanged_to_its_node_only() {
        let (path, text) = nncp_fixture();
        let path = path.to_str().unwrap();
        let config = load(&[("main.toml", NODE_WK3), (path, &text)]).unwrap();
        let names: Vec<&str> = config.network.policies.iter().map(|p| p.name.as_str()).collect();
        assert_eq!(names, vec!["enp3s0-wk3"]);
        let state = config.network.policies[0].desired_state.to_json();
        assert_eq!(state["interfaces"][1]["controller"], "cudn3");
        assert_eq!(state["interfaces"][1]["vlan"], json!({"base-iface": "enp3s0", "id": 2001}));
        assert_eq!(state["interfaces"][2]["ipv4"]["address"][0]["ip"], "172.19.24.113");
        assert_eq!(state["interfaces"][0]["ipv4"], json!({"enabled": false, "dhcp": false}));

        // A worker that is not wk3 gets the fleet-wide policy, with its per-node value.
        let wk1 =
            "[node]\nname = \"wk1\"\nlabels = { \"node-role.kubernetes.io/worker\" = \"\" }\n";
        let config = load(&[("main.toml", wk1), (path, &text)]).unwrap();
        let policy = &config.network.policies[0];
        assert_eq!(policy.name, "vrf-lite-workers");
        assert_eq!(policy.max_unavailable.as_deref(), Some("50%"));
        let ip = &policy.desired_state.to_json()["interfaces"][0]["ipv4"]["address"][0]["ip"];
        assert_eq!(ip, "${node.host(172.19.23.0/24)}");
    }

    #[test]
    fn two_selected_policies_on_one_interface_name_both_places() {
        let (path, text) = nncp_fixture();
        let wk3_worker =
            "[node]\nname = \"wk3\"\nlabels = { \"node-role.kubernetes.io/worker\" = \"\" }\n";
        let errors =
            load(&[("main.toml", wk3_worker), (path.to_str().unwrap(), &text)]).unwrap_err();
        let error = &errors.0[0];
        assert_eq!(errors.0.len(), 1, "{errors}");
        assert!(
            error.message.contains("\"enp3s0-wk3\"")
                && error.message.contains("\"vrf-lite-workers\"")
                && error.message.contains("interface vlan2001"),
            "{error}"
        );
        // Each manifest document is pointed at by its first line, like every manifest error.
        assert_eq!(
            (error.file.as_path(), error.line, error.column, error.field.as_str()),
            (path.as_path(), 47, 1, "documents[1].spec.desiredState"),
            "{error}"
        );
        assert!(error.message.contains(&format!("{}:3:1)", path.display())), "{error}");

        let again = POLICY.replace("[network]\nbackend = \"kernel\"\nstate_dir = \"/tmp/uplink-state\"\nprobes = { timeout = \"5s\" }\n", "").replace("name = \"uplink\"", "name = \"uplink-2\"");
        let worker =
            "[node]\nname = \"wk1\"\nlabels = { \"node-role.kubernetes.io/worker\" = \"\" }\n";
        let errors =
            load(&[("node.toml", worker), ("a.toml", POLICY), ("b.toml", &again)]).unwrap_err();
        let text = errors.to_string();
        assert!(text.starts_with("b.toml:7:8: network_policies[0].desired_state: "), "{text}");
        assert!(text.contains("\"uplink\" (a.toml:11:8) and \"uplink-2\" (b.toml:7:8)"), "{text}");
    }

    /// nmstate's types read the desired state (every interface type it has: an OVS bridge is
    /// accepted here) and its message is placed where the culprit is written.
    #[test]
    fn field_errors_name_file_line_column_and_field() {
        let bad = r#"
[[network_policies]]
name = "bad"
[[network_policies.desired_state.interfaces]]
name = "vlan2001"
type = "vlan"
vlan = { base-iface = "enp3s0", id = 2001 }
ipv4 = { address = [{ ip = "172.19.23.113/24", prefix-length = 24 }] }
[[network_policies.desired_state.interfaces]]
name = "ovs0"
type = "ovs-bridge"
"#;
        let errors = load(&[("net.toml", bad)]).unwrap_err();
        let found: Vec<String> =
            errors.0.iter().map(|e| format!("{}:{}: {}", e.line, e.column, e.field)).collect();
        assert_eq!(
            found,
            vec!["8:21: network_policies[0].desired_state.interfaces[0].ipv4.address[0]"],
            "{errors}"
        );
        assert!(errors.0[0].message.contains("invalid IP address syntax"), "{errors}");
        let good = bad.replace("172.19.23.113/24", "172.19.23.113");
        load(&[("net.toml", &good)]).unwrap();

        let unknown = load(&[("x.toml", "[[network_policies]]\nname = \"x\"\ndesired_state = { interfaces = [{ name = \"a\", type = \"dummy\", lldpp = {} }] }\n")]).unwrap_err();
        assert_eq!(unknown.0.len(), 1, "{unknown}");
        assert_eq!(unknown.0[0].field, "network_policies[0].desired_state.interfaces[0].lldpp");
        assert!(unknown.0[0].message.contains("unknown field `lldpp`"), "{unknown}");
    }

    #[test]
    fn manifest_errors_use_the_manifests_field_names() {
        let yaml = "apiVersion: nmstate.io/v1\nkind: NodeNetworkConfigurationPolicy\nmetadata:\n  name: p\nspec:\n  desiredState:\n    interfaces:\n    - name: br0\n      type: linux-bridge\n      mtuu: 1500\n";
        let errors = load(&[("p.yaml", yaml)]).unwrap_err();
        assert_eq!(
            errors.0[0].field, "documents[0].spec.desiredState.interfaces[0].mtuu",
            "{errors}"
        );
        assert_eq!((errors.0[0].line, errors.0[0].column), (1, 1));
        // kubernetes-nmstate's captures: read as its handler reads them, names kept as written.
        let capture = "apiVersion: nmstate.io/v1\nkind: NodeNetworkConfigurationPolicy\nmetadata:\n  name: p\nspec:\n  capture:\n    defaultGw: routes.running.destination==\"0.0.0.0/0\"\n  desiredState:\n    routes:\n      config:\n      - destination: 0.0.0.0/0\n        next-hop-address: \"{{ capture.defaultGw.routes.running.0.next-hop-address }}\"\n        next-hop-interface: \"{{ capture.defaultGw.routes.running.0.next-hop-interface }}\"\n        table-id: 100\n";
        let config = load(&[("p.yaml", capture)]).unwrap();
        let policy = &config.network.policies[0];
        assert_eq!(policy.capture.keys().collect::<Vec<_>>(), ["defaultGw"]);
        let template = capture.replace("    defaultGw:", "    gw:");
        let errors = load(&[("p.yaml", &template)]).unwrap_err();
        assert_eq!(
            errors.0[0].field,
            "documents[0].spec.desiredState.routes.config[0].next-hop-address"
        );
        assert!(errors.0[0].message.contains("its captures: gw"), "{errors}");
    }

    #[test]
    fn network_vrfs_get_a_policy_with_a_stable_table() {
        let text = r#"
[[bgp.routers]]
asn = 65801
vrf = "cudn3"
[[bgp.routers]]
asn = 65801
vrf = "cudn4"
table = 2443
[[networks]]
name = "cudn3"
topology = "layer3"
subnet = "172.23.0.0/16"
host_subnet = "172.23.2.0/24"
vrf = "cudn3"
[[networks]]
name = "cudn4"
topology = "layer2"
subnet = "172.24.0.0/16"
vrf = "cudn4"
[[network_policies]]
name = "a-vlan-in-cudn3"
[[network_policies.desired_state.interfaces]]
name = "vlan2001"
type = "vlan"
controller = "cudn3"
vlan = { base-iface = "enp3s0", id = 2001 }
"#;
        let config = load(&[("main.toml", text)]).unwrap();
        // The VRFs come first: the VLAN policy needs cudn3 to exist.
        let order: Vec<&str> = config.network.policies.iter().map(|p| p.name.as_str()).collect();
        assert_eq!(order, vec!["uplink-vrf-cudn3", "uplink-vrf-cudn4", "a-vlan-in-cudn3"]);
        let tables: Vec<(String, serde_json::Value)> = config
            .network
            .policies
            .iter()
            .filter(|p| p.generated)
            .map(|p| {
                (
                    p.name.clone(),
                    p.desired_state.to_json()["interfaces"][0]["vrf"]["route-table-id"].clone(),
                )
            })
            .collect();
        assert_eq!(
            tables,
            vec![
                (
                    "uplink-vrf-cudn3".to_string(),
                    json!(super::super::network::vrf_table_id("cudn3"))
                ),
                ("uplink-vrf-cudn4".to_string(), json!(2443)),
            ]
        );
    }

    #[test]
    fn node_values_pick_this_nodes_row() {
        let text = "[node]\nname = \"wk2\"\n[network.node_values.wk1]\nvlan_ip = \"10.0.0.1\"\n[network.node_values.wk2]\nvlan_ip = \"10.0.0.2\"\n";
        let config = load(&[("main.toml", text)]).unwrap();
        assert_eq!(config.network.node_values.get("vlan_ip").map(String::as_str), Some("10.0.0.2"));
        let conflict = load(&[
            ("main.toml", text),
            ("b.toml", "[network.node_values.wk2]\nvlan_ip = \"10.0.0.9\"\n"),
        ])
        .unwrap_err();
        assert!(conflict.0[0].field.ends_with("node_values.wk2.vlan_ip"), "{conflict}");
    }
}
