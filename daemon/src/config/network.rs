//! The node's own network as configured: `[network]` settings and the network policies
//! (`[[network_policies]]` in TOML, nmstate's `NodeNetworkConfigurationPolicy` in `conf.d/*.yaml`)
//! that select this node. Validation is in `network_validate`; applying them is `crate::netconf`.
//!
//! A policy's `desired_state` is nmstate's schema (kebab-case keys, as `nmstatectl` and
//! kubernetes-nmstate take it), restricted to what uplink supports: interfaces of type
//! ethernet, vlan, vrf, bond, linux-bridge and dummy; routes; route rules; the DNS resolver.
//! String values may hold per-node values (`${node.name}`, `${node.host(SUBNET)}`,
//! `${values.KEY}`, see `node_values`), resolved on the node just before applying.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use ipnet::IpNet;
use serde::{Deserialize, Serialize};

use super::duration;

/// Where uplink keeps enactments unless `[network] state_dir` says otherwise.
pub const DEFAULT_STATE_DIR: &str = "/var/lib/uplink";
/// NetworkManager's checkpoint timeout: if uplink dies between apply and commit, NetworkManager
/// rolls the change back by itself after this long (kubernetes-nmstate and nmstatectl: 60 s).
pub const DEFAULT_ROLLBACK_TIMEOUT: Duration = Duration::from_secs(60);
/// How long a probe may take after a change before the change is rolled back.
/// kubernetes-nmstate waits 120 s per probe; a node that cannot reach its gateway for 20 s is
/// cut off for practical purposes, and the checkpoint must outlive all probes.
pub const DEFAULT_PROBE_TIMEOUT: Duration = Duration::from_secs(20);
/// How long a probe may take before the change, to decide whether it is required afterwards.
pub const DEFAULT_PRE_PROBE_TIMEOUT: Duration = Duration::from_secs(5);
/// Pause between two attempts of one probe.
pub const DEFAULT_PROBE_INTERVAL: Duration = Duration::from_secs(1);
/// First kernel table id handed to VRFs that uplink creates for `[[networks]]`.
pub const VRF_TABLE_BASE: u32 = 1000;
/// Number of table ids in that range (1000..=9999).
pub const VRF_TABLE_SPAN: u32 = 9000;

/// `[network]` plus the policies selecting this node.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct NetworkConfig {
    pub backend: NetworkBackend,
    /// Enactments are kept here (`enactments.json`).
    pub state_dir: PathBuf,
    #[serde(serialize_with = "duration::serialize")]
    pub rollback_timeout: Duration,
    pub probes: ProbeSettings,
    /// This node's primary addresses for `${node.host(…)}`; empty: detected on the node (its
    /// address on the interface of the main table's default route from its network
    /// configuration, `netconf::identity`).
    pub node_addresses: Vec<IpNet>,
    /// This node's row of `[network.node_values.<node name>]`, for `${values.KEY}`.
    pub node_values: BTreeMap<String, String>,
    /// In the order they are applied: the VRFs uplink creates for `[[networks]]`, then the
    /// policies whose `node_selector` matches this node, sorted by name.
    pub policies: Vec<NetworkPolicy>,
}

impl Default for NetworkConfig {
    fn default() -> Self {
        Self {
            backend: NetworkBackend::NetworkManager,
            state_dir: PathBuf::from(DEFAULT_STATE_DIR),
            rollback_timeout: DEFAULT_ROLLBACK_TIMEOUT,
            probes: ProbeSettings::default(),
            node_addresses: Vec::new(),
            node_values: BTreeMap::new(),
            policies: Vec::new(),
        }
    }
}

/// How policies reach the kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum NetworkBackend {
    /// NetworkManager over D-Bus, with a checkpoint per apply (the default).
    #[serde(rename = "networkmanager")]
    NetworkManager,
    /// nmstate's kernel mode (netlink only): no checkpoint, nothing persisted across reboots.
    Kernel,
}

impl NetworkBackend {
    pub fn name(self) -> &'static str {
        match self {
            Self::NetworkManager => "networkmanager",
            Self::Kernel => "kernel",
        }
    }
}

/// Probe timeouts.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ProbeSettings {
    /// How long each probe may keep failing after a change before it is rolled back.
    #[serde(serialize_with = "duration::serialize")]
    pub timeout: Duration,
    /// How long each probe may take before the change (a probe failing then is not required).
    #[serde(serialize_with = "duration::serialize")]
    pub pre_timeout: Duration,
    #[serde(serialize_with = "duration::serialize")]
    pub interval: Duration,
    /// The name the DNS probe resolves (kubernetes-nmstate: `root-servers.net`, type NS).
    pub dns_name: String,
}

impl Default for ProbeSettings {
    fn default() -> Self {
        Self {
            timeout: DEFAULT_PROBE_TIMEOUT,
            pre_timeout: DEFAULT_PRE_PROBE_TIMEOUT,
            interval: DEFAULT_PROBE_INTERVAL,
            dns_name: "root-servers.net".into(),
        }
    }
}

/// One policy that selects this node.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct NetworkPolicy {
    pub name: String,
    /// The labels a node must carry (NNCP `spec.nodeSelector`); empty selects every node.
    pub node_selector: BTreeMap<String, String>,
    /// NNCP `spec.maxUnavailable`, kept for display: it limits how many nodes of a fleet apply
    /// a policy at once, which a rollout tool decides, not the node (docs/network.md).
    pub max_unavailable: Option<String>,
    /// nmstate's schema, per-node values still unresolved.
    pub desired_state: DesiredState,
    /// kubernetes-nmstate's captures (NNCP `spec.capture`): name → nmstate capture expression,
    /// read against the node's current state to fill `{{ capture.NAME.… }}` templates.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub capture: BTreeMap<String, String>,
    /// Created by uplink for a `[[networks]]` entry rather than written by a user.
    pub generated: bool,
    pub sources: Vec<PathBuf>,
}

impl NetworkPolicy {
    /// Whether the policy came from the Kubernetes API alone (an NNCP object, not a file).
    pub fn from_api(&self) -> bool {
        !self.sources.is_empty() && self.sources.iter().all(|s| super::load::is_api_source(s))
    }
}

/// nmstate's desired state as written: its own JSON, every key nmstate knows, checked by its
/// types at load (`config::desired_state`); per-node values still unresolved.
#[derive(Debug, Clone, PartialEq, Default, Serialize)]
#[serde(transparent)]
pub struct DesiredState(pub serde_json::Value);

impl DesiredState {
    /// The state as nmstate's JSON.
    pub fn to_json(&self) -> serde_json::Value {
        self.0.clone()
    }

    /// The names of the interfaces it configures.
    pub fn interface_names(&self) -> Vec<String> {
        let interfaces = self.0.get("interfaces").and_then(serde_json::Value::as_array);
        interfaces
            .into_iter()
            .flatten()
            .filter_map(|i| i.get("name").and_then(serde_json::Value::as_str))
            .map(str::to_string)
            .collect()
    }

    /// The VRF device uplink creates for a network: `name` with kernel table `table`. No
    /// `port` list: to nmstate an empty one means "no ports", and would take out of the VRF
    /// the VLANs that other policies put in it with `controller` (then their probes fail).
    pub fn vrf(name: &str, table: u32) -> Self {
        Self(serde_json::json!({"interfaces": [{
            "name": name, "type": "vrf", "state": "up",
            "vrf": {"route-table-id": table},
        }]}))
    }
}

/// A stable kernel table id for a VRF that uplink creates: FNV-1a of the name into
/// `VRF_TABLE_BASE..VRF_TABLE_BASE + VRF_TABLE_SPAN`, so every node gives one network the same
/// table without coordination, and adding a network never moves another's table. Two names
/// that land on one id are a config error that asks for an explicit `table`.
pub fn vrf_table_id(name: &str) -> u32 {
    // FNV-1a, 32 bit (http://www.isthe.com/chongo/tech/comp/fnv/).
    let mut hash: u32 = 0x811c_9dc5;
    for byte in name.bytes() {
        hash ^= u32::from(byte);
        hash = hash.wrapping_mul(0x0100_0193);
    }
    VRF_TABLE_BASE.saturating_add(hash % VRF_TABLE_SPAN)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vrf_table_ids_are_stable_and_in_range() {
        // Documented in docs/network.md: these must never change.
        assert_eq!(vrf_table_id("cudn3"), vrf_table_id("cudn3"));
        for name in ["cudn3", "cudn4", "blue", "a-very-long-vrf"] {
            let id = vrf_table_id(name);
            assert!((VRF_TABLE_BASE..VRF_TABLE_BASE + VRF_TABLE_SPAN).contains(&id), "{id}");
        }
        assert_ne!(vrf_table_id("cudn3"), vrf_table_id("cudn4"));
    }

    #[test]
    fn a_networks_vrf_is_nmstates_vrf() {
        assert_eq!(
            DesiredState::vrf("cudn3", 1234).to_json(),
            serde_json::json!({"interfaces": [{"name": "cudn3", "type": "vrf", "state": "up",
                "vrf": {"route-table-id": 1234}}]})
        );
        assert_eq!(DesiredState::vrf("cudn3", 1234).interface_names(), ["cudn3"]);
    }
}
