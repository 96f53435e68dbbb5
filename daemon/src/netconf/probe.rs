//! Which probes guard a change, chosen as kubernetes-nmstate chooses them
//! (`pkg/probe/probes.go`): the default gateway answers (per family, when the main table has a
//! default route), DNS resolves (when name servers are configured), plus uplink's own: every
//! BGP neighbor of a VRF the policy touches answers from its source address. Candidates are
//! run once before the change; only those that pass then are required after it, so a probe
//! that was already failing never blocks (or rolls back) a change.

use std::collections::BTreeSet;
use std::fmt;
use std::net::IpAddr;

use serde_json::Value;

use crate::config::Router;

use super::state::{connected_interface, default_gateway, name_servers, vrf_names, vrf_of, Family};

/// One check of the node's connectivity.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum Probe {
    /// ICMP echo to the main table's default gateway, looked up again each time it runs.
    DefaultGateway(Family),
    /// A name resolves through one of the configured name servers.
    Dns,
    /// ICMP echo to a BGP neighbor from its source address, bound to its VRF's device; in the
    /// default VRF a single-hop neighbor's echo is bound to the interface whose subnet holds
    /// it (looked up each time), so it cannot pass through another link (the other ToR) while
    /// the session's own is dead. When the change left no such subnet (the link down, its
    /// address gone), the echo is bound to `link_before`, the interface from before the
    /// change. A neighbor on no connected subnet before or after is reached by the routing
    /// table (an iBGP peer's loopback).
    BgpNeighbor {
        vrf: String,
        address: IpAddr,
        source: Option<IpAddr>,
        single_hop: bool,
        link_before: Option<String>,
    },
}

impl fmt::Display for Probe {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::DefaultGateway(Family::V4) => f.write_str("default-gateway-ipv4"),
            Self::DefaultGateway(Family::V6) => f.write_str("default-gateway-ipv6"),
            Self::Dns => f.write_str("dns"),
            Self::BgpNeighbor { vrf, address, .. } => {
                write!(f, "bgp-neighbor {address} (vrf {})", crate::config::vrf_display_name(vrf))
            }
        }
    }
}

/// The VRFs a desired state touches (`""` is the default VRF): VRF interfaces it names, the
/// VRFs its interfaces are (or become) ports of, and the default VRF for any other interface
/// and for routes, route rules and DNS.
pub fn affected_vrfs(desired: &Value, current: &Value) -> BTreeSet<String> {
    let mut vrfs = BTreeSet::new();
    let known_vrfs: BTreeSet<String> =
        vrf_names(desired).into_iter().chain(vrf_names(current)).collect();
    let interfaces = desired.get("interfaces").and_then(Value::as_array);
    for interface in interfaces.into_iter().flatten() {
        let Some(name) = interface.get("name").and_then(Value::as_str) else { continue };
        if interface.get("type").and_then(Value::as_str) == Some("vrf") {
            vrfs.insert(name.to_string());
            continue;
        }
        let controller = interface.get("controller").and_then(Value::as_str);
        match controller {
            // `controller: ""` detaches the interface: it lands in the default VRF.
            Some("") => {
                vrfs.insert(String::new());
            }
            Some(c) if known_vrfs.contains(c) => {
                vrfs.insert(c.to_string());
            }
            // A bond or bridge port: the port lives where its controller does.
            Some(c) => {
                vrfs.insert(vrf_of(current, c).unwrap_or_default());
            }
            // No `controller`: nmstate leaves the interface where it is.
            None => {
                vrfs.insert(vrf_of(current, name).unwrap_or_default());
            }
        }
        // Moving an interface out of a VRF affects the VRF it leaves too.
        if let Some(was) = vrf_of(current, name) {
            vrfs.insert(was);
        }
    }
    if ["routes", "route-rules", "dns-resolver"].iter().any(|k| desired.get(k).is_some()) {
        vrfs.insert(String::new());
    }
    vrfs
}

/// The candidate probes for a change touching `affected` VRFs, given the state before it.
pub fn candidates(current: &Value, routers: &[Router], affected: &BTreeSet<String>) -> Vec<Probe> {
    let mut probes = Vec::new();
    for family in [Family::V4, Family::V6] {
        if default_gateway(current, family).is_some() {
            probes.push(Probe::DefaultGateway(family));
        }
    }
    if !name_servers(current).is_empty() {
        probes.push(Probe::Dns);
    }
    for router in routers.iter().filter(|r| affected.contains(&r.vrf)) {
        for neighbor in &router.neighbors {
            // RFC 4271 §5.1.3 / RFC 5082: without multihop the peer is on a connected link.
            let single_hop = neighbor.ebgp_multihop.is_none();
            let link_before = (single_hop && router.vrf.is_empty())
                .then(|| connected_interface(current, neighbor.address))
                .flatten();
            probes.push(Probe::BgpNeighbor {
                vrf: router.vrf.clone(),
                address: neighbor.address,
                source: neighbor.source_address,
                single_hop,
                link_before,
            });
        }
    }
    probes
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn router(vrf: &str, neighbors: &[&str]) -> Router {
        let config = crate::config::load_str(
            "t.toml",
            &format!(
                "[[bgp.routers]]\nasn = 65801\nvrf = \"{vrf}\"\n{}",
                neighbors
                    .iter()
                    .map(|n| format!("[[bgp.routers.neighbors]]\naddress = \"{n}\"\nasn = 65103\n"))
                    .collect::<String>()
            ),
        )
        .unwrap();
        config.bgp.routers.into_iter().next().unwrap()
    }

    fn current() -> Value {
        json!({
            "routes": {"running": [{"destination": "0.0.0.0/0", "next-hop-address": "172.18.20.1",
                                    "next-hop-interface": "br-ex", "table-id": 254}]},
            "interfaces": [
                {"name": "cudn3", "type": "vrf", "vrf": {"port": ["vlan2001"], "route-table-id": 1001}},
                {"name": "br-ex", "type": "linux-bridge"}
            ]
        })
    }

    #[test]
    fn a_vlan_in_a_vrf_affects_that_vrf_only() {
        let desired = json!({"interfaces": [
            {"name": "vlan2002", "type": "vlan", "controller": "cudn4"},
            {"name": "cudn4", "type": "vrf", "vrf": {"route-table-id": 1002}}
        ]});
        assert_eq!(affected_vrfs(&desired, &current()), BTreeSet::from(["cudn4".to_string()]));
        // Changing vlan2001 in place touches cudn3; detaching it touches the default VRF too.
        let in_place = json!({"interfaces": [{"name": "vlan2001", "type": "vlan", "mtu": 9000}]});
        assert_eq!(affected_vrfs(&in_place, &current()), BTreeSet::from(["cudn3".to_string()]));
        let moved = json!({"interfaces": [{"name": "vlan2001", "type": "vlan", "controller": ""}]});
        assert_eq!(
            affected_vrfs(&moved, &current()),
            BTreeSet::from(["".to_string(), "cudn3".to_string()])
        );
        let routes = json!({"routes": {"config": []}});
        assert_eq!(affected_vrfs(&routes, &current()), BTreeSet::from(["".to_string()]));
    }

    #[test]
    fn candidates_follow_kubernetes_nmstate_plus_the_affected_vrfs_neighbors() {
        let routers = vec![router("", &["172.18.20.1"]), router("cudn3", &["172.19.23.1"])];
        let affected = BTreeSet::from(["cudn3".to_string()]);
        let probes = candidates(&current(), &routers, &affected);
        let names: Vec<String> = probes.iter().map(ToString::to_string).collect();
        // A gateway for IPv4 only, no name servers: no IPv6 or DNS probe.
        assert_eq!(names, vec!["default-gateway-ipv4", "bgp-neighbor 172.19.23.1 (vrf cudn3)"]);
        let with_dns = json!({"dns-resolver": {"running": {"server": ["10.0.0.53"]}}});
        let probes = candidates(&with_dns, &routers, &BTreeSet::from([String::new()]));
        let names: Vec<String> = probes.iter().map(ToString::to_string).collect();
        assert_eq!(names, vec!["dns", "bgp-neighbor 172.18.20.1 (vrf default)"]);
    }

    #[test]
    fn a_single_hop_neighbor_keeps_the_link_it_had_before_the_change() {
        let routers = vec![router("", &["172.18.20.1", "10.255.0.1"])];
        let mut before = current();
        before["interfaces"][1]["ipv4"] =
            json!({"address": [{"ip": "172.18.20.113", "prefix-length": 24}]});
        let probes = candidates(&before, &routers, &BTreeSet::from([String::new()]));
        let links: Vec<Option<&str>> = probes
            .iter()
            .filter_map(|p| match p {
                Probe::BgpNeighbor { link_before, .. } => Some(link_before.as_deref()),
                _ => None,
            })
            .collect();
        // The second neighbor is on no connected subnet: the routing table reaches it.
        assert_eq!(links, vec![Some("br-ex"), None]);
    }
}
