//! The node's identity for per-node values: its name and primary addresses. Addresses come from
//! `[network] node_addresses` or, when that is not set, from the kernel: per family, the
//! node's address on the interface of the main table's default route that the node's network
//! configuration installed.
//!
//! Not from nmstate's `routes.running`: its routes carry no protocol and come in nispor's order
//! of protocols, not by metric, and a routing daemon's default route (uplink's own over a /31
//! to a ToR, or babeld's, which nmstate reports) comes and goes with its sessions. The address
//! would then differ between boot and a later reload. So the choice is made here, a pure
//! function over the kernel's routes ([`primary_addresses`]), and read by
//! `links::read_primary_inputs`.

use std::net::IpAddr;

use ipnet::IpNet;
use tracing::warn;

use crate::config::network::NetworkConfig;
use crate::config::node_values::NodeIdentity;

use super::links;
use super::state::Family;

/// The route protocols (`rtm_protocol`, linux/rtnetlink.h) of network configuration, whose
/// default routes say where the node is: the kernel's (2), `ip route` and net-tools (boot, 3),
/// NetworkManager and systemd-networkd (static, 4), router advertisements (ra, 9), DHCP
/// clients (dhcp, 16). Every other protocol is a routing daemon's (uplink's 117, zebra 11,
/// bird 12, babel 42, keepalived 18, bgp 186, ospf 188, FRR's others …) or unknown.
pub const CONFIGURATION_PROTOCOLS: [u8; 5] = [2, 3, 4, 9, 16];

/// A default route of the main table, as the kernel holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DefaultRoute {
    pub family: Family,
    /// `rtm_protocol`: who installed it.
    pub protocol: u8,
    /// `RTA_PRIORITY` (0 when absent).
    pub metric: u32,
    /// One for a plain route, one per path of a multipath one.
    pub hops: Vec<Hop>,
}

/// A default route's next hop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hop {
    /// None for a route through a device only (`default dev ppp0`).
    pub gateway: Option<IpAddr>,
    /// Interface index.
    pub interface: u32,
}

/// An address on an interface, with its prefix length.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InterfaceAddress {
    pub interface: u32,
    pub address: IpNet,
}

/// The identity to resolve `config`'s policies with; the kernel is read only when
/// `[network] node_addresses` is not set.
pub fn node_identity(node_name: Option<&str>, config: &NetworkConfig) -> NodeIdentity {
    let addresses = if config.node_addresses.is_empty() {
        detect_primary()
    } else {
        config.node_addresses.clone()
    };
    NodeIdentity {
        name: node_name.map(str::to_string),
        addresses,
        values: config.node_values.clone(),
    }
}

/// The node's primary addresses as the kernel has them now; none when it cannot be read
/// (`${node.host(…)}` then says that the node has no primary address).
pub fn detect_primary() -> Vec<IpNet> {
    match links::read_primary_inputs() {
        Ok((routes, addresses)) => primary_addresses(&routes, &addresses),
        Err(error) => {
            warn!(%error, "network: cannot read the node's default routes and addresses");
            Vec::new()
        }
    }
}

/// Per family (IPv4, then IPv6), the node's primary address: of the main table's default
/// routes installed by network configuration ([`CONFIGURATION_PROTOCOLS`]), the next hop with
/// the lowest metric, then the lowest gateway and interface index (never the kernel's order,
/// which changes when a route is added again); on its interface, the address in the gateway's
/// subnet, else the interface's first one. IPv6 link-local addresses are never chosen. A hop
/// whose interface has no address gives way to the next one.
pub fn primary_addresses(routes: &[DefaultRoute], addresses: &[InterfaceAddress]) -> Vec<IpNet> {
    [Family::V4, Family::V6]
        .into_iter()
        .filter_map(|family| primary_of(family, routes, addresses))
        .collect()
}

fn primary_of(
    family: Family,
    routes: &[DefaultRoute],
    addresses: &[InterfaceAddress],
) -> Option<IpNet> {
    let mut hops: Vec<(u32, Option<IpAddr>, u32)> = routes
        .iter()
        .filter(|r| r.family == family && CONFIGURATION_PROTOCOLS.contains(&r.protocol))
        .flat_map(|r| r.hops.iter().map(move |h| (r.metric, h.gateway, h.interface)))
        .collect();
    hops.sort();
    hops.into_iter().find_map(|(_, gateway, interface)| {
        let mut usable = addresses.iter().filter(|a| {
            a.interface == interface && family_of(a.address.addr()) == family && !link_local(a)
        });
        let in_gateway_subnet =
            usable.clone().find(|a| gateway.is_some_and(|g| a.address.contains(&g)));
        in_gateway_subnet.or_else(|| usable.next()).map(|a| a.address)
    })
}

fn family_of(address: IpAddr) -> Family {
    match address {
        IpAddr::V4(_) => Family::V4,
        IpAddr::V6(_) => Family::V6,
    }
}

/// Link-local addresses identify nothing.
fn link_local(address: &InterfaceAddress) -> bool {
    match address.address.addr() {
        IpAddr::V6(v6) => v6.is_unicast_link_local(),
        IpAddr::V4(_) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const STATIC: u8 = 4;
    const DHCP: u8 = 16;
    const UPLINK: u8 = 117;
    const BGP: u8 = 186;
    const ZEBRA: u8 = 11;
    const BIRD: u8 = 12;

    fn route(protocol: u8, metric: u32, hops: &[(&str, u32)]) -> DefaultRoute {
        let hops = hops
            .iter()
            .map(|(gateway, interface)| Hop {
                gateway: (!gateway.is_empty()).then(|| gateway.parse().unwrap()),
                interface: *interface,
            })
            .collect::<Vec<_>>();
        let v6 = hops.iter().any(|h| h.gateway.is_some_and(|g| g.is_ipv6()));
        DefaultRoute { family: if v6 { Family::V6 } else { Family::V4 }, protocol, metric, hops }
    }

    fn address(interface: u32, address: &str) -> InterfaceAddress {
        InterfaceAddress { interface, address: address.parse().unwrap() }
    }

    fn net(text: &str) -> IpNet {
        text.parse().unwrap()
    }

    /// br-ex (2) carries the node's network; enp5s0 (5) and enp6s0 (6) are /31 links to two
    /// ToRs, over which uplink learns a default route by BGP.
    fn node_addresses() -> Vec<InterfaceAddress> {
        vec![
            address(2, "fe80::1/64"),
            address(2, "172.18.20.113/24"),
            address(2, "fd00:18::71/64"),
            address(5, "10.0.5.1/31"),
            address(6, "10.0.6.1/31"),
        ]
    }

    #[test]
    fn a_routing_daemons_default_route_is_never_the_primary() {
        let configured = route(STATIC, 425, &[("172.18.20.1", 2)]);
        // uplink's ECMP default over the /31s has the better metric, and comes first.
        let learned = route(UPLINK, 20, &[("10.0.5.0", 5), ("10.0.6.0", 6)]);
        let routes = vec![learned.clone(), configured.clone()];
        assert_eq!(primary_addresses(&routes, &node_addresses()), vec![net("172.18.20.113/24")]);
        // The same with only the configured route (at boot, before BGP): the answer is stable.
        assert_eq!(
            primary_addresses(std::slice::from_ref(&configured), &node_addresses()),
            vec![net("172.18.20.113/24")]
        );
        for daemon in [BGP, ZEBRA, BIRD, 42, 18, 188, 196] {
            let other = DefaultRoute { protocol: daemon, ..learned.clone() };
            let routes = vec![other, configured.clone()];
            assert_eq!(
                primary_addresses(&routes, &node_addresses()),
                vec![net("172.18.20.113/24")],
                "protocol {daemon}"
            );
        }
        // Only a routing daemon's default route: no primary address.
        assert_eq!(primary_addresses(&[learned], &node_addresses()), vec![]);
    }

    #[test]
    fn the_lowest_metric_wins_not_the_kernels_order() {
        let addresses = node_addresses();
        let dhcp = route(DHCP, 100, &[("10.0.5.0", 5)]);
        let configured = route(STATIC, 425, &[("172.18.20.1", 2)]);
        let expected = vec![net("10.0.5.1/31")];
        assert_eq!(primary_addresses(&[configured.clone(), dhcp.clone()], &addresses), expected);
        assert_eq!(primary_addresses(&[dhcp, configured], &addresses), expected);
        // Equal metrics (static ECMP over both links): the lower gateway, in any order.
        let ecmp = route(STATIC, 100, &[("10.0.6.0", 6), ("10.0.5.0", 5)]);
        assert_eq!(primary_addresses(&[ecmp], &addresses), expected);
        let split =
            [route(STATIC, 100, &[("10.0.6.0", 6)]), route(STATIC, 100, &[("10.0.5.0", 5)])];
        assert_eq!(primary_addresses(&split, &addresses), expected);
    }

    #[test]
    fn the_address_in_the_gateways_subnet_is_the_primary() {
        // A VIP /32 and a second subnet on the same interface, listed first.
        let addresses = vec![
            address(2, "192.0.2.10/32"),
            address(2, "10.44.0.7/16"),
            address(2, "172.18.20.113/24"),
        ];
        let routes = [route(STATIC, 0, &[("172.18.20.1", 2)])];
        assert_eq!(primary_addresses(&routes, &addresses), vec![net("172.18.20.113/24")]);
        // No gateway (a device route) or none in a subnet of the interface: its first address.
        let device = [route(STATIC, 0, &[("", 2)])];
        assert_eq!(primary_addresses(&device, &addresses), vec![net("192.0.2.10/32")]);
        let onlink = [route(STATIC, 0, &[("198.51.100.1", 2)])];
        assert_eq!(primary_addresses(&onlink, &addresses), vec![net("192.0.2.10/32")]);
    }

    #[test]
    fn each_family_has_its_own_primary_and_link_local_is_skipped() {
        let routes = [route(9, 1024, &[("fe80::1", 2)]), route(STATIC, 425, &[("172.18.20.1", 2)])];
        assert_eq!(
            primary_addresses(&routes, &node_addresses()),
            vec![net("172.18.20.113/24"), net("fd00:18::71/64")]
        );
        // An interface with nothing but a link-local address gives way to the next hop.
        let addresses = vec![address(7, "fe80::7/64"), address(2, "fd00:18::71/64")];
        let routes = [route(9, 100, &[("fe80::1", 7)]), route(9, 200, &[("fe80::2", 2)])];
        assert_eq!(primary_addresses(&routes, &addresses), vec![net("fd00:18::71/64")]);
    }

    #[test]
    fn configured_addresses_are_used_as_they_are() {
        let configured = NetworkConfig {
            node_addresses: vec!["10.0.0.5/24".parse().unwrap()],
            ..Default::default()
        };
        let identity = node_identity(Some("wk3"), &configured);
        assert_eq!(identity.addresses, vec![net("10.0.0.5/24")]);
        assert_eq!(identity.name.as_deref(), Some("wk3"));
    }
}
