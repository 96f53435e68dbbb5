//! The node's identity for per-node values: its name and primary addresses. Addresses come from
//! `[network] node_addresses` or, when that is not set, from nmstate's current state: the
//! addresses on the interface that carries the main table's default route, per family.

use ipnet::IpNet;

use crate::config::network::NetworkConfig;
use crate::config::node_values::NodeIdentity;

use super::state::{default_gateway, Family};

/// The identity to resolve `config`'s policies with, given nmstate's current state.
pub fn node_identity(
    node_name: Option<&str>,
    config: &NetworkConfig,
    current: &serde_json::Value,
) -> NodeIdentity {
    let addresses = if config.node_addresses.is_empty() {
        detect_primary(current)
    } else {
        config.node_addresses.clone()
    };
    NodeIdentity {
        name: node_name.map(str::to_string),
        addresses,
        values: config.node_values.clone(),
    }
}

/// The first address of the default route's interface, for IPv4 and for IPv6.
pub fn detect_primary(current: &serde_json::Value) -> Vec<IpNet> {
    let mut out = Vec::new();
    for family in [Family::V4, Family::V6] {
        let Some(gateway) = default_gateway(current, family) else { continue };
        let key = family.key();
        let interfaces = current.get("interfaces").and_then(|v| v.as_array());
        let Some(interface) = interfaces
            .into_iter()
            .flatten()
            .find(|i| i.get("name").and_then(|n| n.as_str()) == Some(gateway.interface.as_str()))
        else {
            continue;
        };
        let addresses = interface.pointer(&format!("/{key}/address")).and_then(|a| a.as_array());
        let found = addresses.into_iter().flatten().find_map(|a| {
            let ip = a.get("ip")?.as_str()?;
            let length = a.get("prefix-length")?.as_u64()?;
            let net: IpNet = format!("{ip}/{length}").parse().ok()?;
            // Link-local addresses identify nothing.
            match net {
                IpNet::V6(v6) if v6.addr().segments()[0] & 0xffc0 == 0xfe80 => None,
                _ => Some(net),
            }
        });
        out.extend(found);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_primary_address_is_on_the_default_routes_interface() {
        let current = json!({
            "interfaces": [
                {"name": "enp3s0", "ipv4": {"address": []}},
                {"name": "br-ex", "ipv4": {"address": [{"ip": "172.18.20.113", "prefix-length": 24}]},
                 "ipv6": {"address": [{"ip": "fe80::1", "prefix-length": 64}]}}
            ],
            "routes": {"running": [
                {"destination": "0.0.0.0/0", "next-hop-address": "172.18.20.1",
                 "next-hop-interface": "br-ex", "table-id": 254}
            ]}
        });
        assert_eq!(detect_primary(&current), vec!["172.18.20.113/24".parse::<IpNet>().unwrap()]);
        let configured = NetworkConfig {
            node_addresses: vec!["10.0.0.5/24".parse().unwrap()],
            ..Default::default()
        };
        let identity = node_identity(Some("wk3"), &configured, &current);
        assert_eq!(identity.addresses, vec!["10.0.0.5/24".parse::<IpNet>().unwrap()]);
        assert_eq!(identity.name.as_deref(), Some("wk3"));
    }
}
