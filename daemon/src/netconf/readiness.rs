//! Which BGP routers can start once the policies are applied: a router in a VRF needs the VRF
//! device, and a neighbor with a `source_address` needs that address on the node. Pure, on
//! nmstate's state, so the daemon can start the ready routers, hold the others with a reason
//! (for `show bgp summary` and the log), and look again when the network changes.

use std::net::IpAddr;

use serde_json::Value;

use crate::config::{vrf_display_name, Router};

use super::state::vrf_names;

/// Why a router cannot start yet; `None`: it can.
pub fn router_waits_for(router: &Router, current: &Value) -> Option<String> {
    if !router.vrf.is_empty() && !vrf_names(current).contains(&router.vrf) {
        return Some(format!("waiting for VRF device {}", router.vrf));
    }
    let addresses = node_addresses(current);
    for neighbor in &router.neighbors {
        if let Some(source) = neighbor.source_address {
            if !addresses.contains(&source) {
                return Some(format!(
                    "waiting for source address {source} (neighbor {} in vrf {})",
                    neighbor.address,
                    vrf_display_name(&router.vrf)
                ));
            }
        }
    }
    None
}

/// Every address on the node's interfaces in nmstate's state.
fn node_addresses(current: &Value) -> Vec<IpAddr> {
    let interfaces = current.get("interfaces").and_then(Value::as_array);
    interfaces
        .into_iter()
        .flatten()
        .flat_map(|i| ["ipv4", "ipv6"].map(|f| i.pointer(&format!("/{f}/address")).cloned()))
        .flatten()
        .filter_map(|list| list.as_array().cloned())
        .flatten()
        .filter_map(|a| a.get("ip")?.as_str()?.parse().ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn routers() -> Vec<Router> {
        crate::config::load_str(
            "t.toml",
            r#"
[[bgp.routers]]
asn = 65801
[[bgp.routers.neighbors]]
address = "172.18.20.1"
asn = 65102
[[bgp.routers]]
asn = 65801
vrf = "cudn3"
[[bgp.routers.neighbors]]
address = "172.19.23.1"
asn = 65103
source_address = "172.19.23.113"
"#,
        )
        .unwrap()
        .bgp
        .routers
    }

    #[test]
    fn a_router_waits_for_its_vrf_device_and_source_address() {
        let routers = routers();
        let before = json!({"interfaces": [{"name": "enp2s0", "type": "ethernet"}]});
        assert_eq!(router_waits_for(&routers[0], &before), None);
        assert_eq!(router_waits_for(&routers[1], &before).unwrap(), "waiting for VRF device cudn3");
        let vrf_only = json!({"interfaces": [{"name": "cudn3", "type": "vrf"}]});
        assert_eq!(
            router_waits_for(&routers[1], &vrf_only).unwrap(),
            "waiting for source address 172.19.23.113 (neighbor 172.19.23.1 in vrf cudn3)"
        );
        let ready = json!({"interfaces": [
            {"name": "cudn3", "type": "vrf"},
            {"name": "vlan2001", "type": "vlan",
             "ipv4": {"address": [{"ip": "172.19.23.113", "prefix-length": 24}]}}
        ]});
        assert_eq!(router_waits_for(&routers[1], &ready), None);
    }
}
