//! Which BGP routers can start once the policies are applied, on the kernel's view of the node
//! ([`NodeView`]). Pure, so the rules are tested without a network.
//!
//! - A router in a VRF waits for its VRF device: its listener binds to the device
//!   (`SO_BINDTODEVICE`), and the FIB writes into the device's table.
//! - A neighbor whose `source_address` is not on the node yet waits for it; the router starts
//!   anyway. The session cannot connect before the address exists, and it retries every
//!   `connect_time`; holding the whole router would let one missing address (a policy that
//!   failed on one NIC) keep the node's other sessions down.

use crate::config::{vrf_display_name, Neighbor, Router};

use super::links::NodeView;

/// Why a router cannot start yet; `None`: it can.
pub fn router_waits_for(router: &Router, view: &NodeView) -> Option<String> {
    if !router.vrf.is_empty() && !view.has_vrf(&router.vrf) {
        return Some(format!("VRF device {}", router.vrf));
    }
    None
}

/// Why a neighbor's session cannot connect yet; `None`: it can.
pub fn neighbor_waits_for(neighbor: &Neighbor, view: &NodeView) -> Option<String> {
    let source = neighbor.source_address?;
    (!view.has_address(&source)).then(|| format!("source address {source}"))
}

/// The neighbors of `router` that wait, with what for (for the log).
pub fn waiting_neighbors(router: &Router, view: &NodeView) -> Vec<String> {
    router
        .neighbors
        .iter()
        .filter_map(|n| {
            neighbor_waits_for(n, view).map(|why| {
                format!(
                    "neighbor {} (vrf {}) waits for {why}",
                    n.address,
                    vrf_display_name(&router.vrf)
                )
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

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
    fn a_router_waits_for_its_vrf_device_and_a_neighbor_for_its_source_address() {
        let routers = routers();
        let before = NodeView::default();
        assert_eq!(router_waits_for(&routers[0], &before), None);
        assert_eq!(router_waits_for(&routers[1], &before).unwrap(), "VRF device cudn3");
        let vrf_only = NodeView { vrfs: [("cudn3".into(), 2441)].into(), ..Default::default() };
        assert_eq!(router_waits_for(&routers[1], &vrf_only), None);
        assert_eq!(
            neighbor_waits_for(&routers[1].neighbors[0], &vrf_only).unwrap(),
            "source address 172.19.23.113"
        );
        assert_eq!(
            waiting_neighbors(&routers[1], &vrf_only),
            vec!["neighbor 172.19.23.1 (vrf cudn3) waits for source address 172.19.23.113"]
        );
        let ready =
            NodeView { addresses: ["172.19.23.113".parse().unwrap()].into(), ..vrf_only.clone() };
        assert_eq!(neighbor_waits_for(&routers[1].neighbors[0], &ready), None);
        // A neighbor without a source address never waits.
        assert_eq!(neighbor_waits_for(&routers[0].neighbors[0], &before), None);
    }
}
