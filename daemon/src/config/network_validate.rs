//! `[network]` and `[[network_policies]]` as written → validated fragments → the node's
//! `NetworkConfig`: selection by node labels, collisions between policies, and the VRFs that
//! `[[networks]]` need.
//!
//! Keys inside `desired_state` are nmstate's own (kebab-case: `prefix-length`, `base-iface`),
//! so a desired state copied from an NNCP or an `nmstatectl` file works as it is. Anything
//! outside the supported subset is rejected by name with the valid names listed.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Duration;

use ipnet::IpNet;
use serde::Deserialize;

use super::duration::{bare_number_hint, parse_duration};
use super::error::{ConfigError, Loc};
use super::network::{
    vrf_table_id, Bond, Bridge, BridgePort, DesiredState, DnsConfig, DnsResolver, Interface,
    InterfaceState, InterfaceType, IpAddress, IpConfig, NetworkBackend, NetworkConfig,
    NetworkPolicy, ProbeSettings, Route, RouteRule, RouteRuleSection, RouteSection, Vlan, Vrf,
};
use super::node_values;
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
    pub desired_state: S<RawDesiredState>,
}

#[derive(Debug, Deserialize)]
#[serde(
    deny_unknown_fields,
    rename_all = "kebab-case",
    expecting = "a desired state { interfaces, routes, route-rules, dns-resolver }"
)]
pub(crate) struct RawDesiredState {
    #[serde(default)]
    pub interfaces: Vec<S<RawInterface>>,
    pub routes: Option<S<RawRoutes>>,
    pub route_rules: Option<S<RawRouteRules>>,
    pub dns_resolver: Option<S<RawDns>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case", expecting = "an interface table")]
pub(crate) struct RawInterface {
    pub name: S<String>,
    #[serde(rename = "type")]
    pub kind: Option<S<String>>,
    pub state: Option<S<String>>,
    pub mtu: Option<S<i64>>,
    pub description: Option<S<String>>,
    pub mac_address: Option<S<String>>,
    pub controller: Option<S<String>>,
    pub ipv4: Option<S<RawIp>>,
    pub ipv6: Option<S<RawIp>>,
    pub vlan: Option<S<RawVlan>>,
    pub vrf: Option<S<RawVrf>>,
    pub link_aggregation: Option<S<RawBond>>,
    pub bridge: Option<S<RawBridge>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case", expecting = "an ipv4/ipv6 table")]
pub(crate) struct RawIp {
    pub enabled: Option<S<bool>>,
    pub dhcp: Option<S<bool>>,
    pub autoconf: Option<S<bool>>,
    #[serde(default)]
    pub address: Vec<S<RawAddress>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case", expecting = "{ ip, prefix-length }")]
pub(crate) struct RawAddress {
    pub ip: S<String>,
    pub prefix_length: S<i64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case", expecting = "{ base-iface, id }")]
pub(crate) struct RawVlan {
    pub base_iface: S<String>,
    pub id: S<i64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case", expecting = "{ port, route-table-id }")]
pub(crate) struct RawVrf {
    #[serde(default)]
    pub port: Vec<S<String>>,
    pub route_table_id: S<i64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case", expecting = "{ mode, port, options }")]
pub(crate) struct RawBond {
    pub mode: S<String>,
    #[serde(default)]
    pub port: Vec<S<String>>,
    pub options: Option<S<toml::Value>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case", expecting = "{ port, options }")]
pub(crate) struct RawBridge {
    pub port: Option<Vec<S<RawBridgePort>>>,
    pub options: Option<S<toml::Value>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, expecting = "{ name }")]
pub(crate) struct RawBridgePort {
    pub name: S<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, expecting = "{ config = [...] }")]
pub(crate) struct RawRoutes {
    #[serde(default)]
    pub config: Vec<S<RawRoute>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case", expecting = "a route table")]
pub(crate) struct RawRoute {
    pub destination: S<String>,
    pub next_hop_address: Option<S<String>>,
    pub next_hop_interface: Option<S<String>>,
    pub metric: Option<S<i64>>,
    pub table_id: Option<S<i64>>,
    pub state: Option<S<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, expecting = "{ config = [...] }")]
pub(crate) struct RawRouteRules {
    #[serde(default)]
    pub config: Vec<S<RawRouteRule>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case", expecting = "a route rule table")]
pub(crate) struct RawRouteRule {
    pub ip_from: Option<S<String>>,
    pub ip_to: Option<S<String>>,
    pub priority: Option<S<i64>>,
    pub route_table: Option<S<i64>>,
    pub iif: Option<S<String>>,
    pub state: Option<S<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, expecting = "{ config = { server, search } }")]
pub(crate) struct RawDns {
    pub config: S<RawDnsConfig>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, expecting = "{ server, search }")]
pub(crate) struct RawDnsConfig {
    #[serde(default)]
    pub server: Vec<S<String>>,
    #[serde(default)]
    pub search: Vec<S<String>>,
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
        let before = self.errors.len();
        let mut interfaces = Vec::new();
        let desired_state = self.desired_state(
            raw.desired_state.into_inner(),
            &format!("{field}.desired_state"),
            &mut interfaces,
        );
        if self.errors.len() != before {
            return None;
        }
        Some(PolicyFragment {
            policy: NetworkPolicy {
                name,
                node_selector,
                max_unavailable,
                desired_state,
                generated: false,
                sources: vec![self.source.path.clone()],
            },
            loc,
            name_field: format!("{field}.name"),
            desired_field: format!("{field}.desired_state"),
            interfaces,
        })
    }

    fn desired_state(
        &mut self,
        raw: RawDesiredState,
        field: &str,
        names: &mut Vec<(String, Loc)>,
    ) -> DesiredState {
        let mut state = DesiredState::default();
        for (index, raw) in raw.interfaces.iter().enumerate() {
            let field = format!("{field}.interfaces[{index}]");
            let name = raw.get_ref().name.get_ref();
            if let Some((_, first)) = names.iter().find(|(n, _)| n == name) {
                let message =
                    format!("interface {name} is listed twice in this policy (first at {first})");
                self.fail(&raw.get_ref().name, &format!("{field}.name"), message);
                continue;
            }
            names.push((name.clone(), self.loc(&raw.get_ref().name)));
            if let Some(interface) = self.interface(raw.get_ref(), &field) {
                state.interfaces.push(interface);
            }
        }
        if let Some(routes) = raw.routes {
            let mut section = RouteSection::default();
            for (index, route) in routes.get_ref().config.iter().enumerate() {
                let field = format!("{field}.routes.config[{index}]");
                if let Some(route) = self.route(route.get_ref(), &field) {
                    section.config.push(route);
                }
            }
            state.routes = Some(section);
        }
        if let Some(rules) = raw.route_rules {
            let mut section = RouteRuleSection::default();
            for (index, rule) in rules.get_ref().config.iter().enumerate() {
                let field = format!("{field}.route-rules.config[{index}]");
                let rule = rule.get_ref();
                let ip_from =
                    rule.ip_from.as_ref().and_then(|v| self.prefix(v, &format!("{field}.ip-from")));
                let ip_to =
                    rule.ip_to.as_ref().and_then(|v| self.prefix(v, &format!("{field}.ip-to")));
                section.config.push(RouteRule {
                    ip_from,
                    ip_to,
                    priority: rule.priority.as_ref().and_then(|v| {
                        self.int(v, &format!("{field}.priority"), 0, u32::MAX.into())
                    }),
                    route_table: rule.route_table.as_ref().and_then(|v| {
                        self.int(v, &format!("{field}.route-table"), 1, u32::MAX.into())
                    }),
                    iif: rule.iif.as_ref().map(|v| v.get_ref().clone()),
                    state: rule
                        .state
                        .as_ref()
                        .and_then(|v| self.absent(v, &format!("{field}.state"))),
                });
            }
            state.route_rules = Some(section);
        }
        if let Some(dns) = raw.dns_resolver {
            let config = dns.get_ref().config.get_ref();
            let mut out = DnsConfig::default();
            for (i, server) in config.server.iter().enumerate() {
                match server.get_ref().parse::<IpAddr>() {
                    Ok(address) => out.server.push(address),
                    Err(_) => self.fail(
                        server,
                        &format!("{field}.dns-resolver.config.server[{i}]"),
                        format!("{:?} is not an IP address", server.get_ref()),
                    ),
                }
            }
            out.search = config.search.iter().map(|s| s.get_ref().clone()).collect();
            state.dns_resolver = Some(DnsResolver { config: out });
        }
        state
    }

    fn interface(&mut self, raw: &RawInterface, field: &str) -> Option<Interface> {
        let name = raw.name.get_ref();
        self.template_ok(&raw.name, &format!("{field}.name"));
        if name.is_empty() || (!node_values::has_reference(name) && name.len() > 15) {
            self.fail(
                &raw.name,
                &format!("{field}.name"),
                "an interface name has 1 to 15 characters (the kernel's IFNAMSIZ)",
            );
            return None;
        }
        let state = match raw.state.as_ref().map(|s| (s, s.get_ref().as_str())) {
            None | Some((_, "up")) => InterfaceState::Up,
            Some((_, "down")) => InterfaceState::Down,
            Some((_, "absent")) => InterfaceState::Absent,
            Some((value, other)) => {
                self.fail(
                    value,
                    &format!("{field}.state"),
                    format!("unknown state \"{other}\"; valid: up, down, absent"),
                );
                return None;
            }
        };
        let kind = match &raw.kind {
            None if state == InterfaceState::Absent => None,
            None => {
                self.fail(
                    &raw.name,
                    &format!("{field}.type"),
                    "missing; valid: ethernet, vlan, vrf, bond, linux-bridge, dummy",
                );
                return None;
            }
            Some(value) => match InterfaceType::ALL.iter().find(|(n, _)| n == value.get_ref()) {
                Some((_, kind)) => Some(*kind),
                None => {
                    self.fail(value, &format!("{field}.type"), format!("type \"{}\" is not supported; valid: ethernet, vlan, vrf, bond, linux-bridge, dummy", value.get_ref()));
                    return None;
                }
            },
        };
        let mtu = raw.mtu.as_ref().and_then(|v| self.int(v, &format!("{field}.mtu"), 68, 65535));
        let controller = raw.controller.as_ref().map(|c| {
            self.template_ok(c, &format!("{field}.controller"));
            c.get_ref().clone()
        });
        let ipv4 = raw
            .ipv4
            .as_ref()
            .and_then(|ip| self.ip_config(ip.get_ref(), &format!("{field}.ipv4"), false));
        let ipv6 = raw
            .ipv6
            .as_ref()
            .and_then(|ip| self.ip_config(ip.get_ref(), &format!("{field}.ipv6"), true));
        // Each type's own section, and only on that type.
        let sections: [(&str, bool, Option<InterfaceType>); 4] = [
            ("vlan", raw.vlan.is_some(), Some(InterfaceType::Vlan)),
            ("vrf", raw.vrf.is_some(), Some(InterfaceType::Vrf)),
            ("link-aggregation", raw.link_aggregation.is_some(), Some(InterfaceType::Bond)),
            ("bridge", raw.bridge.is_some(), Some(InterfaceType::LinuxBridge)),
        ];
        for (section, present, owner) in sections {
            if present && kind.is_some() && kind != owner {
                self.fail(
                    &raw.name,
                    &format!("{field}.{section}"),
                    format!("`{section}` belongs to interfaces of another type"),
                );
            }
            if !present
                && kind == owner
                && kind.is_some()
                && state != InterfaceState::Absent
                && matches!(owner, Some(InterfaceType::Vlan | InterfaceType::Vrf))
            {
                self.fail(
                    &raw.name,
                    &format!("{field}.{section}"),
                    format!("missing; a {section} interface needs its `{section}` section"),
                );
            }
        }
        let vlan = raw.vlan.as_ref().and_then(|v| {
            let v = v.get_ref();
            let id = self.int(&v.id, &format!("{field}.vlan.id"), 1, 4094)?;
            Some(Vlan { base_iface: v.base_iface.get_ref().clone(), id: u16::try_from(id).ok()? })
        });
        let vrf = raw.vrf.as_ref().and_then(|v| {
            let v = v.get_ref();
            let table = self.int(
                &v.route_table_id,
                &format!("{field}.vrf.route-table-id"),
                1,
                u32::MAX.into(),
            )?;
            if matches!(table, 253..=255) {
                self.fail(
                    &v.route_table_id,
                    &format!("{field}.vrf.route-table-id"),
                    "253-255 are the kernel's default, main and local tables",
                );
                return None;
            }
            Some(Vrf {
                port: v.port.iter().map(|p| p.get_ref().clone()).collect(),
                route_table_id: table,
            })
        });
        let link_aggregation = raw.link_aggregation.as_ref().and_then(|b| {
            let b = b.get_ref();
            const MODES: [&str; 7] = [
                "balance-rr",
                "active-backup",
                "balance-xor",
                "broadcast",
                "802.3ad",
                "balance-tlb",
                "balance-alb",
            ];
            if !MODES.contains(&b.mode.get_ref().as_str()) {
                self.fail(
                    &b.mode,
                    &format!("{field}.link-aggregation.mode"),
                    format!(
                        "unknown bond mode \"{}\"; valid: {}",
                        b.mode.get_ref(),
                        MODES.join(", ")
                    ),
                );
                return None;
            }
            Some(Bond {
                mode: b.mode.get_ref().clone(),
                port: b.port.iter().map(|p| p.get_ref().clone()).collect(),
                options: b.options.as_ref().and_then(|o| serde_json::to_value(o.get_ref()).ok()),
            })
        });
        let bridge = raw.bridge.as_ref().map(|b| {
            let b = b.get_ref();
            Bridge {
                port: b.port.as_ref().map(|ports| {
                    ports
                        .iter()
                        .map(|p| BridgePort { name: p.get_ref().name.get_ref().clone() })
                        .collect()
                }),
                options: b.options.as_ref().and_then(|o| serde_json::to_value(o.get_ref()).ok()),
            }
        });
        Some(Interface {
            name: name.clone(),
            kind,
            state,
            mtu,
            description: raw.description.as_ref().map(|d| d.get_ref().clone()),
            mac_address: raw.mac_address.as_ref().map(|m| m.get_ref().clone()),
            controller,
            ipv4,
            ipv6,
            vlan,
            vrf,
            link_aggregation,
            bridge,
        })
    }

    fn ip_config(&mut self, raw: &RawIp, field: &str, v6: bool) -> Option<IpConfig> {
        if !v6 {
            if let Some(autoconf) = &raw.autoconf {
                self.fail(autoconf, &format!("{field}.autoconf"), "autoconf (SLAAC) is IPv6 only");
            }
        }
        let mut address = Vec::new();
        for (i, entry) in raw.address.iter().enumerate() {
            let entry = entry.get_ref();
            let ip_field = format!("{field}.address[{i}].ip");
            let max = if v6 { 128 } else { 32 };
            let Some(length) = self.int(
                &entry.prefix_length,
                &format!("{field}.address[{i}].prefix-length"),
                0,
                max,
            ) else {
                continue;
            };
            let text = entry.ip.get_ref();
            if node_values::has_reference(text) {
                if !self.template_ok(&entry.ip, &ip_field) {
                    continue;
                }
            } else {
                match text.parse::<IpAddr>() {
                    Ok(a) if a.is_ipv6() == v6 => {}
                    Ok(_) => {
                        self.fail(
                            &entry.ip,
                            &ip_field,
                            format!(
                                "{text} is not an {} address",
                                if v6 { "IPv6" } else { "IPv4" }
                            ),
                        );
                        continue;
                    }
                    Err(_) => {
                        self.fail(&entry.ip, &ip_field, format!("{text:?} is not an IP address (write the prefix length in prefix-length)"));
                        continue;
                    }
                }
            }
            address.push(IpAddress { ip: text.clone(), prefix_length: u8::try_from(length).ok()? });
        }
        let dhcp = raw.dhcp.as_ref().map(|d| *d.get_ref());
        let autoconf = raw.autoconf.as_ref().map(|d| *d.get_ref());
        let enabled = raw
            .enabled
            .as_ref()
            .map_or(!address.is_empty() || dhcp == Some(true) || autoconf == Some(true), |e| {
                *e.get_ref()
            });
        Some(IpConfig { enabled, dhcp, autoconf: if v6 { autoconf } else { None }, address })
    }

    fn route(&mut self, raw: &RawRoute, field: &str) -> Option<Route> {
        let destination = self.prefix(&raw.destination, &format!("{field}.destination"))?;
        let next_hop_address = match &raw.next_hop_address {
            Some(value) if !node_values::has_reference(value.get_ref()) => {
                if value.get_ref().parse::<IpAddr>().is_err() {
                    self.fail(
                        value,
                        &format!("{field}.next-hop-address"),
                        format!("{:?} is not an IP address", value.get_ref()),
                    );
                    return None;
                }
                Some(value.get_ref().clone())
            }
            Some(value) => self
                .template_ok(value, &format!("{field}.next-hop-address"))
                .then(|| value.get_ref().clone()),
            None => None,
        };
        Some(Route {
            destination,
            next_hop_address,
            next_hop_interface: raw.next_hop_interface.as_ref().map(|v| v.get_ref().clone()),
            metric: raw
                .metric
                .as_ref()
                .and_then(|v| self.int(v, &format!("{field}.metric"), 0, u32::MAX.into())),
            table_id: raw
                .table_id
                .as_ref()
                .and_then(|v| self.int(v, &format!("{field}.table-id"), 1, u32::MAX.into())),
            state: raw.state.as_ref().and_then(|v| self.absent(v, &format!("{field}.state"))),
        })
    }

    fn absent(&mut self, value: &S<String>, field: &str) -> Option<String> {
        if value.get_ref() == "absent" {
            Some("absent".into())
        } else {
            self.fail(
                value,
                field,
                format!("unknown state \"{}\"; the only state here is \"absent\"", value.get_ref()),
            );
            None
        }
    }

    /// A prefix (`10.0.0.0/8`) or a per-node value.
    fn prefix(&mut self, value: &S<String>, field: &str) -> Option<String> {
        let text = value.get_ref();
        if node_values::has_reference(text) {
            return self.template_ok(value, field).then(|| text.clone());
        }
        match text.parse::<IpNet>() {
            Ok(net) if net.trunc() == net => Some(text.clone()),
            Ok(net) => {
                self.fail(value, field, format!("{text} has host bits set; write {}", net.trunc()));
                None
            }
            Err(_) => {
                self.fail(value, field, format!("{text:?} is not a prefix such as 10.0.0.0/8"));
                None
            }
        }
    }

    fn int(&mut self, value: &S<i64>, field: &str, min: i64, max: i64) -> Option<u32> {
        let n = *value.get_ref();
        if n < min || n > max {
            self.fail(value, field, format!("{n} is out of range {min}..={max}"));
            return None;
        }
        u32::try_from(n).ok()
    }

    /// Per-node values in a string parse; false (with an error) when they do not.
    fn template_ok(&mut self, value: &S<String>, field: &str) -> bool {
        match node_values::parse(value.get_ref()) {
            Ok(_) => true,
            Err(message) => {
                self.fail(value, field, message);
                false
            }
        }
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
            desired_state: DesiredState {
                interfaces: vec![Interface {
                    name: network.vrf.clone(),
                    kind: Some(InterfaceType::Vrf),
                    state: InterfaceState::Up,
                    mtu: None,
                    description: None,
                    mac_address: None,
                    controller: None,
                    ipv4: None,
                    ipv6: None,
                    vlan: None,
                    vrf: Some(Vrf { port: Vec::new(), route_table_id: table }),
                    link_aggregation: None,
                    bridge: None,
                }],
                ..Default::default()
            },
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
            source: network.sources.first().cloned().unwrap_or_default(),
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

    #[test]
    fn field_errors_name_file_line_column_and_field() {
        let bad = r#"
[[network_policies]]
name = "bad"
[[network_policies.desired_state.interfaces]]
name = "vlan2001"
type = "vlan"
vlan = { base-iface = "enp3s0", id = 5000 }
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
            vec![
                "8:28: network_policies[0].desired_state.interfaces[0].ipv4.address[0].ip",
                "7:38: network_policies[0].desired_state.interfaces[0].vlan.id",
                "11:8: network_policies[0].desired_state.interfaces[1].type",
            ],
            "{errors}"
        );
        assert!(errors.0[2]
            .message
            .contains("valid: ethernet, vlan, vrf, bond, linux-bridge, dummy"));
        let unknown = load(&[("x.toml", "[[network_policies]]\nname = \"x\"\ndesired_state = { interfaces = [{ name = \"a\", type = \"dummy\", lldp = {} }] }\n")]).unwrap_err();
        assert!(unknown.0[0].message.contains("unknown field `lldp`"), "{unknown}");
    }

    #[test]
    fn manifest_errors_use_the_manifests_field_names() {
        let yaml = "apiVersion: nmstate.io/v1\nkind: NodeNetworkConfigurationPolicy\nmetadata:\n  name: p\nspec:\n  desiredState:\n    interfaces:\n    - name: br0\n      type: linux-bridge\n      mtu: 10\n";
        let errors = load(&[("p.yaml", yaml)]).unwrap_err();
        assert_eq!(
            errors.0[0].field, "documents[0].spec.desiredState.interfaces[0].mtu",
            "{errors}"
        );
        assert_eq!((errors.0[0].line, errors.0[0].column), (1, 1));
        let capture = "apiVersion: nmstate.io/v1\nkind: NodeNetworkConfigurationPolicy\nmetadata:\n  name: p\nspec:\n  capture:\n    gw: routes.running.destination==\"0.0.0.0/0\"\n  desiredState: {}\n";
        let errors = load(&[("p.yaml", capture)]).unwrap_err();
        assert_eq!(errors.0[0].field, "documents[0].spec.capture");
        assert!(errors.0[0].message.contains("captures are not supported"), "{errors}");
        let template = capture.replace("  capture:\n    gw: routes.running.destination==\"0.0.0.0/0\"\n", "").replace("desiredState: {}", "desiredState:\n    routes:\n      config:\n      - destination: 0.0.0.0/0\n        next-hop-address: \"{{ capture.gw.routes.running.0.next-hop-address }}\"");
        let errors = load(&[("p.yaml", &template)]).unwrap_err();
        assert!(errors.0[0].message.contains("nmstate templates"), "{errors}");
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
