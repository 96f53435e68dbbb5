//! Next-hop resolution against the kernel's own routes: a BGP next hop is installable when it is
//! directly connected (an interface route covers it) or reachable through another kernel route
//! (multihop peers), on an interface that is up. BGP routes never resolve BGP next hops, and, as
//! in FRR (`ip nht resolve-via-default` off), neither does the default route.

use super::msg::{Hop, KernelRoute, RTN_UNICAST, RTPROT_BGP, RTPROT_UPLINK};
use super::route::NextHop;
use ipnet::IpNet;
use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;

type Hops = Vec<(Option<IpAddr>, u32)>;

#[derive(Debug, Default)]
pub struct Resolver {
    /// Per table: prefix -> metric -> hops, non-BGP unicast routes only.
    tables: HashMap<u32, HashMap<IpNet, BTreeMap<u32, Hops>>>,
    /// Interfaces and whether they are up (administratively and with carrier).
    links: HashMap<u32, bool>,
}

impl Resolver {
    /// Whether a kernel route is one resolution looks at.
    pub fn relevant(route: &KernelRoute) -> bool {
        !matches!(route.protocol, RTPROT_UPLINK | RTPROT_BGP)
            && route.route_type == RTN_UNICAST
            && !route.hops.is_empty()
    }

    /// Records a route; returns whether anything changed.
    pub fn add_route(&mut self, route: &KernelRoute) -> bool {
        if !Self::relevant(route) {
            return false;
        }
        let by_metric =
            self.tables.entry(route.table).or_default().entry(route.prefix).or_default();
        by_metric.insert(route.metric, route.hops.clone()) != Some(route.hops.clone())
    }

    pub fn remove_route(&mut self, route: &KernelRoute) -> bool {
        let Some(table) = self.tables.get_mut(&route.table) else { return false };
        let Some(by_metric) = table.get_mut(&route.prefix) else { return false };
        let removed = by_metric.remove(&route.metric).is_some();
        if by_metric.is_empty() {
            table.remove(&route.prefix);
        }
        removed
    }

    pub fn set_link(&mut self, index: u32, up: bool) -> bool {
        self.links.insert(index, up) != Some(up)
    }

    /// A deleted interface takes its routes with it (the kernel does not announce those).
    pub fn remove_link(&mut self, index: u32) {
        self.links.remove(&index);
        for table in self.tables.values_mut() {
            table.retain(|_, by_metric| {
                by_metric.retain(|_, hops| {
                    hops.retain(|(_, i)| *i != index);
                    !hops.is_empty()
                });
                !by_metric.is_empty()
            });
        }
    }

    pub fn clear(&mut self) {
        self.tables.clear();
        self.links.clear();
    }

    fn up(&self, index: u32) -> bool {
        self.links.get(&index).copied().unwrap_or(false)
    }

    /// The kernel hops that reach `address` in `table`, longest match first; empty when it is
    /// unreachable.
    fn reach(&self, table: u32, address: IpAddr) -> Vec<Hop> {
        let Some(routes) = self.tables.get(&table) else { return Vec::new() };
        let max = if address.is_ipv4() { 32 } else { 128 };
        for len in (1..=max).rev() {
            let Ok(prefix) = IpNet::new(address, len).map(|p| p.trunc()) else { continue };
            let Some(hops) = routes.get(&prefix).and_then(|m| m.values().next()) else { continue };
            let usable: Vec<Hop> = hops
                .iter()
                .filter(|(_, ifindex)| self.up(*ifindex))
                .map(|(gateway, ifindex)| Hop {
                    // Connected: the next hop itself; otherwise the resolving route's gateway.
                    gateway: gateway.unwrap_or(address),
                    ifindex: *ifindex,
                })
                .collect();
            if !usable.is_empty() {
                return usable;
            }
        }
        Vec::new()
    }

    /// The kernel hops for a BGP next hop in `table`.
    pub fn resolve(&self, table: u32, next_hop: &NextHop) -> Vec<Hop> {
        match next_hop {
            NextHop::V4(a) => self.reach(table, IpAddr::V4(*a)),
            // A link-local address is on every link (each has fe80::/64): a route to it says
            // nothing about which one. The RIB anchors link-local hops to their session's
            // address (`forwarding_next_hop`); one it could not anchor stays unresolved.
            NextHop::V6 { global, .. } if global.is_unicast_link_local() => Vec::new(),
            NextHop::V6 { global, link_local } => {
                let via_global = self.reach(table, IpAddr::V6(*global));
                match link_local {
                    // RFC 2545 §3: with a link-local next hop, forward to it on the interface
                    // the global next hop (the session's link) is on.
                    Some(ll) => via_global
                        .into_iter()
                        .filter(|h| h.gateway == IpAddr::V6(*global))
                        .map(|h| Hop { gateway: IpAddr::V6(*ll), ifindex: h.ifindex })
                        .collect(),
                    None => via_global,
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    fn route(prefix: &str, hops: Hops, protocol: u8) -> KernelRoute {
        KernelRoute {
            table: 254,
            prefix: prefix.parse().unwrap(),
            protocol,
            route_type: RTN_UNICAST,
            metric: 0,
            nh_id: None,
            hops,
        }
    }

    fn v4(s: &str) -> NextHop {
        NextHop::V4(s.parse().unwrap())
    }

    fn resolver() -> Resolver {
        let mut r = Resolver::default();
        r.set_link(2, true);
        r.set_link(3, true);
        r.add_route(&route("10.0.1.0/24", vec![(None, 2)], 2));
        r.add_route(&route("10.9.0.0/16", vec![(Some("10.0.1.1".parse().unwrap()), 2)], 4));
        r.add_route(&route("0.0.0.0/0", vec![(Some("10.0.1.1".parse().unwrap()), 2)], 4));
        r
    }

    #[test]
    fn connected_next_hops_resolve_to_themselves() {
        let r = resolver();
        let hop = Hop { gateway: Ipv4Addr::new(10, 0, 1, 2).into(), ifindex: 2 };
        assert_eq!(r.resolve(254, &v4("10.0.1.2")), vec![hop]);
        assert!(r.resolve(100, &v4("10.0.1.2")).is_empty(), "other tables know nothing");
    }

    #[test]
    fn multihop_next_hops_resolve_through_a_kernel_route_but_not_the_default() {
        let r = resolver();
        let hop = Hop { gateway: Ipv4Addr::new(10, 0, 1, 1).into(), ifindex: 2 };
        assert_eq!(r.resolve(254, &v4("10.9.3.3")), vec![hop]);
        assert!(r.resolve(254, &v4("192.0.2.1")).is_empty());
    }

    #[test]
    fn down_links_and_removed_routes_make_next_hops_unreachable() {
        let mut r = resolver();
        assert!(r.set_link(2, false));
        assert!(r.resolve(254, &v4("10.0.1.2")).is_empty());
        assert!(r.set_link(2, true));
        assert!(r.remove_route(&route("10.0.1.0/24", vec![(None, 2)], 2)));
        assert!(r.resolve(254, &v4("10.0.1.2")).is_empty());
        r.add_route(&route("10.0.1.0/24", vec![(None, 2)], 2));
        r.remove_link(2);
        assert!(r.resolve(254, &v4("10.0.1.2")).is_empty());
    }

    #[test]
    fn bgp_routes_are_not_used_for_resolution() {
        let mut r = resolver();
        assert!(!r.add_route(&route("172.16.0.0/24", vec![(None, 3)], RTPROT_BGP)));
        assert!(r.resolve(254, &v4("172.16.0.9")).is_empty());
    }

    #[test]
    fn a_bare_link_local_next_hop_is_not_resolved_through_fe80_routes() {
        let mut r = resolver();
        r.add_route(&route("fe80::/64", vec![(None, 2)], 2));
        r.add_route(&route("fe80::/64", vec![(None, 3)], 2));
        let hop = NextHop::V6 { global: "fe80::2".parse().unwrap(), link_local: None };
        assert!(r.resolve(254, &hop).is_empty());
    }

    #[test]
    fn ipv6_link_local_next_hop_uses_the_interface_of_the_global_one() {
        let mut r = Resolver::default();
        r.set_link(3, true);
        r.add_route(&route("2001:db8:1::/64", vec![(None, 3)], 2));
        let nh = NextHop::V6 {
            global: "2001:db8:1::2".parse().unwrap(),
            link_local: Some("fe80::2".parse().unwrap()),
        };
        assert_eq!(
            r.resolve(254, &nh),
            vec![Hop { gateway: "fe80::2".parse().unwrap(), ifindex: 3 }]
        );
    }
}
