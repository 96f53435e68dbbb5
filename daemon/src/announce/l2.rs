//! Layer 2 mode (MetalLB's `L2Advertisement`): which node answers ARP (IPv4) and NDP (IPv6)
//! for a Service's addresses. A pure function of what every node knows alike — the
//! advertisements, the nodes' labels, the Service's ready endpoints and who is alive — so every
//! node computes the same answer and no leader is elected.

use std::net::IpAddr;

use ring::digest::{digest, SHA256};

/// The node that answers for a Service whose first address is `first`, among the `eligible`
/// ones: MetalLB's choice (its speaker's `ShouldAnnounce`), each node ranked by the SHA-256 of
/// `"<node>#<first address>"`, the lowest first. The same node as MetalLB's speakers would
/// choose, so a fleet moving from MetalLB to uplink does not move its VIPs, and the Services'
/// addresses spread over the nodes rather than all landing on one.
pub fn answering_node<'a>(
    eligible: impl IntoIterator<Item = &'a str>,
    first: IpAddr,
) -> Option<&'a str> {
    let address = first.to_string();
    eligible.into_iter().min_by_key(|node| rank(node, &address))
}

/// A node's place for an address: the digest's bytes, compared as MetalLB compares them.
fn rank(node: &str, address: &str) -> [u8; 32] {
    let mut text = String::with_capacity(node.len() + 1 + address.len());
    text.push_str(node);
    text.push('#');
    text.push_str(address);
    let mut out = [0u8; 32];
    out.copy_from_slice(digest(&SHA256, text.as_bytes()).as_ref());
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The order of `sha256("<node>#<address>")` (worked out with Python's hashlib): each
    /// address has its own order, so the addresses spread over the nodes.
    #[test]
    fn the_lowest_digest_of_node_and_address_answers() {
        let nodes = ["wk1", "wk2", "wk3"];
        let first = |address: &str| answering_node(nodes, address.parse().unwrap());
        assert_eq!(first("192.0.2.1"), Some("wk3"));
        assert_eq!(first("192.0.2.2"), Some("wk1"));
        assert_eq!(first("2001:db8::1"), Some("wk3"));
        // wk3 gone: the next in 192.0.2.1's order; the order of the list does not matter.
        assert_eq!(answering_node(["wk2", "wk1"], "192.0.2.1".parse().unwrap()), Some("wk1"));
        assert_eq!(answering_node([], "192.0.2.1".parse().unwrap()), None);
    }
}
