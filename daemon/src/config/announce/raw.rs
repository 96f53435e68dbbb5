//! The announcement sections as written: serde types with source spans, no checks.

use std::collections::BTreeMap;

use serde::Deserialize;

use crate::config::raw::{RawDuration, S};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, expecting = "a [node] table (name, labels)")]
pub(crate) struct RawNode {
    pub name: Option<S<String>>,
    #[serde(default)]
    pub labels: BTreeMap<String, S<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, expecting = "a label selector { match_labels, match_expressions }")]
pub(crate) struct RawSelector {
    #[serde(default)]
    pub match_labels: BTreeMap<String, S<String>>,
    #[serde(default)]
    pub match_expressions: Vec<S<RawRequirement>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, expecting = "a table { key, operator, values }")]
pub(crate) struct RawRequirement {
    pub key: S<String>,
    pub operator: S<String>,
    #[serde(default)]
    pub values: Vec<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, expecting = "a [[pools]] table")]
pub(crate) struct RawPool {
    pub name: S<String>,
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    #[serde(default)]
    pub addresses: Vec<S<String>>,
    pub auto_assign: Option<bool>,
    pub avoid_buggy_ips: Option<bool>,
    pub service_allocation: Option<S<RawServiceAllocation>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, expecting = "a service_allocation table")]
pub(crate) struct RawServiceAllocation {
    pub priority: Option<S<i64>>,
    #[serde(default)]
    pub namespaces: Vec<String>,
    #[serde(default)]
    pub namespace_selectors: Vec<S<RawSelector>>,
    #[serde(default)]
    pub service_selectors: Vec<S<RawSelector>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, expecting = "a [[services]] table")]
pub(crate) struct RawService {
    pub name: S<String>,
    pub namespace: Option<S<String>>,
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    #[serde(default)]
    pub namespace_labels: BTreeMap<String, String>,
    pub address_pool: Option<S<String>>,
    pub load_balancer_ip: Option<S<String>>,
    pub load_balancer_ips: Option<S<Vec<S<String>>>>,
    #[serde(default)]
    pub held_ips: Vec<S<String>>,
    pub ip_family_policy: Option<S<String>>,
    pub ip_families: Option<S<Vec<S<String>>>>,
    pub traffic_policy: Option<S<String>>,
    #[serde(default)]
    pub endpoints: Vec<S<RawEndpoint>>,
    pub announce_without_endpoints: Option<S<bool>>,
    pub health: Option<S<RawHealth>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, expecting = "a table { address, node }")]
pub(crate) struct RawEndpoint {
    pub address: S<String>,
    pub node: Option<S<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(
    deny_unknown_fields,
    expecting = "a health table (type, port, path, expected_status, command, interval, timeout, rise, fall)"
)]
pub(crate) struct RawHealth {
    #[serde(rename = "type")]
    pub kind: S<String>,
    pub port: Option<S<i64>>,
    pub path: Option<S<String>>,
    pub expected_status: Option<S<i64>>,
    pub command: Option<S<Vec<String>>>,
    pub interval: Option<S<RawDuration>>,
    pub timeout: Option<S<RawDuration>>,
    pub rise: Option<S<i64>>,
    pub fall: Option<S<i64>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, expecting = "an [[advertisements]] table")]
pub(crate) struct RawAdvertisement {
    pub name: S<String>,
    #[serde(default)]
    pub ip_address_pools: Vec<String>,
    #[serde(default)]
    pub ip_address_pool_selectors: Vec<S<RawSelector>>,
    pub aggregation_length: Option<S<i64>>,
    pub aggregation_length_v6: Option<S<i64>>,
    #[serde(default)]
    pub communities: Vec<S<String>>,
    pub local_pref: Option<S<i64>>,
    #[serde(default)]
    pub peers: Vec<String>,
    #[serde(default)]
    pub node_selectors: Vec<S<RawSelector>>,
}

/// MetalLB's `L2Advertisement` (metallb.io/v1beta1): the pools whose addresses one node
/// answers ARP and NDP for, on which nodes and interfaces.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, expecting = "an [[l2_advertisements]] table")]
pub(crate) struct RawL2Advertisement {
    pub name: S<String>,
    #[serde(default)]
    pub ip_address_pools: Vec<String>,
    #[serde(default)]
    pub ip_address_pool_selectors: Vec<S<RawSelector>>,
    #[serde(default)]
    pub node_selectors: Vec<S<RawSelector>>,
    #[serde(default)]
    pub interfaces: Vec<S<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, expecting = "a [[communities]] table { name, value }")]
pub(crate) struct RawCommunityAlias {
    pub name: S<String>,
    pub value: S<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, expecting = "a [[networks]] table")]
pub(crate) struct RawNetwork {
    pub name: S<String>,
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    pub topology: Option<S<String>>,
    pub subnet: Option<S<StringOrList>>,
    pub host_subnet: Option<S<StringOrList>>,
    pub vrf: Option<S<String>>,
    #[serde(default)]
    pub egress_ips: Vec<S<String>>,
}

/// `"10.0.0.0/16"` or `["10.0.0.0/16", "fd00::/48"]` (dual stack).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct StringOrList(pub Vec<String>);

impl<'de> Deserialize<'de> for StringOrList {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Visit;
        impl<'de> serde::de::Visitor<'de> for Visit {
            type Value = StringOrList;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a CIDR string or a list of CIDR strings")
            }
            fn visit_str<E: serde::de::Error>(self, value: &str) -> Result<StringOrList, E> {
                Ok(StringOrList(vec![value.to_string()]))
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> Result<StringOrList, A::Error> {
                let mut out = Vec::new();
                while let Some(item) = seq.next_element::<String>()? {
                    out.push(item);
                }
                Ok(StringOrList(out))
            }
        }
        deserializer.deserialize_any(Visit)
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, expecting = "a [[route_advertisements]] table")]
pub(crate) struct RawRouteAdvertisement {
    pub name: S<String>,
    #[serde(default)]
    pub advertisements: Vec<S<String>>,
    #[serde(default)]
    pub network_selectors: Vec<S<RawNetworkSelector>>,
    pub node_selector: Option<S<RawSelector>>,
    pub target_vrf: Option<S<String>>,
    pub frr_configuration_selector: Option<S<RawSelector>>,
}

#[derive(Debug, Deserialize)]
#[serde(
    deny_unknown_fields,
    expecting = "a network selector { network_selection_type, cluster_user_defined_network_selector }"
)]
pub(crate) struct RawNetworkSelector {
    pub network_selection_type: S<String>,
    pub cluster_user_defined_network_selector: Option<S<RawCudnSelector>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, expecting = "a table { network_selector }")]
pub(crate) struct RawCudnSelector {
    pub network_selector: S<RawSelector>,
}

/// A router's `imports = [{ vrf = "…" }]` entry.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, expecting = "a table { vrf }")]
pub(crate) struct RawImport {
    pub vrf: S<String>,
}

/// The announcement sections of one file, as `RawFile` holds them.
#[derive(Debug, Default)]
pub(crate) struct RawAnnounce {
    pub node: Option<S<RawNode>>,
    pub pools: Vec<S<RawPool>>,
    pub services: Vec<S<RawService>>,
    pub advertisements: Vec<S<RawAdvertisement>>,
    pub l2_advertisements: Vec<S<RawL2Advertisement>>,
    pub communities: Vec<S<RawCommunityAlias>>,
    pub networks: Vec<S<RawNetwork>>,
    pub route_advertisements: Vec<S<RawRouteAdvertisement>>,
}
