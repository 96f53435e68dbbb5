//! NDP (RFC 4861) for layer 2 mode: the Neighbor Advertisement that answers a Neighbor
//! Solicitation for an address this node answers for, and the unsolicited one sent when it
//! takes an address over. Frames are read and written with `etherparse` (which computes the
//! ICMPv6 checksum); the rules are RFC 4861's, cited where applied.

use std::net::Ipv6Addr;

use etherparse::icmpv6::NeighborSolicitationPayloadSlice;
use etherparse::icmpv6::{NdpOptionSlice, NeighborAdvertisementHeader};
use etherparse::{Icmpv6Type, NetSlice, PacketBuilder, SlicedPacket, TransportSlice};

use super::Dropped;

/// The all-nodes multicast address and its Ethernet address (RFC 2464 §7: 33:33 and the
/// address's last four octets).
const ALL_NODES: Ipv6Addr = Ipv6Addr::new(0xff02, 0, 0, 0, 0, 0, 0, 1);
const ALL_NODES_MAC: [u8; 6] = [0x33, 0x33, 0, 0, 0, 1];
/// RFC 4861 §7.1.1: a Neighbor Discovery message with another hop limit did not come from
/// the link, and is dropped.
const HOP_LIMIT: u8 = 255;
/// The Target Link-Layer Address option with an Ethernet address (RFC 4861 §4.6.1): type 2,
/// length 1 (eight octets).
const TARGET_LINK_LAYER_ADDRESS: u8 = 2;

/// The advertisement that answers `frame` when it is a valid Neighbor Solicitation for an
/// address `answers_for` accepts: from `mac`, saying the address is at `mac`.
pub fn reply(
    frame: &[u8],
    mac: [u8; 6],
    answers_for: impl Fn(Ipv6Addr) -> bool,
) -> Result<Vec<u8>, Dropped> {
    let packet = SlicedPacket::from_ethernet(frame).map_err(|_| Dropped::Malformed)?;
    let Some(etherparse::LinkSlice::Ethernet2(ethernet)) = &packet.link else {
        return Err(Dropped::Malformed);
    };
    let destination = ethernet.destination();
    // Solicitations go to the target's solicited-node group (a 33:33 address) or, to check an
    // entry, to the station itself.
    if !destination.starts_with(&[0x33, 0x33]) && destination != mac {
        return Err(Dropped::NotForUs);
    }
    if ethernet.source() == mac {
        return Err(Dropped::OurOwn);
    }
    let (Some(NetSlice::Ipv6(ip)), Some(TransportSlice::Icmpv6(icmp))) =
        (&packet.net, &packet.transport)
    else {
        return Err(Dropped::OtherProtocol);
    };
    let header = ip.header();
    let (source, destination_ip) = (header.source_addr(), header.destination_addr());
    if icmp.icmp_type() != Icmpv6Type::NeighborSolicitation {
        return Err(Dropped::NotRequest);
    }
    // RFC 4861 §7.1.1: hop limit 255, code 0, a valid checksum, a target that is not
    // multicast.
    if header.hop_limit() != HOP_LIMIT
        || icmp.code_u8() != 0
        || !icmp.is_checksum_valid(source.octets(), destination_ip.octets())
    {
        return Err(Dropped::Malformed);
    }
    let solicitation = NeighborSolicitationPayloadSlice::from_slice(icmp.payload())
        .map_err(|_| Dropped::Malformed)?;
    let target = solicitation.target_address();
    if target.is_multicast() {
        return Err(Dropped::Malformed);
    }
    let mut requester_mac = None;
    for option in solicitation.options_iterator() {
        if let NdpOptionSlice::SourceLinkLayerAddress(address) =
            option.map_err(|_| Dropped::Malformed)?
        {
            requester_mac = <[u8; 6]>::try_from(address.link_layer_address()).ok();
        }
    }
    // §7.1.1: from the unspecified address (duplicate address detection) there is no
    // source link-layer address option.
    if source.is_unspecified() && requester_mac.is_some() {
        return Err(Dropped::Malformed);
    }
    if !answers_for(target) {
        return Err(Dropped::NotAnswered);
    }
    // §7.2.4: to the soliciting node, Solicited set; to a node checking for a duplicate, to
    // all nodes, Solicited clear. Override set: the address is ours, not a router's cache
    // entry.
    let (to, to_mac, solicited) = if source.is_unspecified() {
        (ALL_NODES, ALL_NODES_MAC, false)
    } else {
        (source, requester_mac.unwrap_or(ethernet.source()), true)
    };
    Ok(advertisement(target, mac, to, to_mac, solicited))
}

/// The unsolicited Neighbor Advertisement of `address` at `mac` to all nodes (RFC 4861
/// §7.2.6), Override set so that the neighbours' entries move to this node on takeover.
pub fn announcement(address: Ipv6Addr, mac: [u8; 6]) -> Vec<u8> {
    advertisement(address, mac, ALL_NODES, ALL_NODES_MAC, false)
}

fn advertisement(
    target: Ipv6Addr,
    mac: [u8; 6],
    to: Ipv6Addr,
    to_mac: [u8; 6],
    solicited: bool,
) -> Vec<u8> {
    let header = NeighborAdvertisementHeader { router: false, solicited, r#override: true };
    let mut payload = Vec::with_capacity(24);
    payload.extend_from_slice(&target.octets());
    payload.extend_from_slice(&[TARGET_LINK_LAYER_ADDRESS, 1]);
    payload.extend_from_slice(&mac);
    let builder = PacketBuilder::ethernet2(mac, to_mac)
        // From the target, as Linux answers for an address of its own: tools that match the
        // answer to the question (ndisc6) take no other source (docs/layer2.md).
        .ipv6(target.octets(), to.octets(), HOP_LIMIT)
        .icmpv6(Icmpv6Type::NeighborAdvertisement(header));
    let mut frame = Vec::with_capacity(builder.size(payload.len()));
    // Writing to a vector fails only when the payload is too long for IPv6 (it is 24 bytes).
    let _ = builder.write(&mut frame, &payload);
    frame
}

#[cfg(test)]
mod tests {
    use super::*;

    const OURS: [u8; 6] = [0x02, 0, 0, 0, 0, 0x01];
    const CLIENT: [u8; 6] = [0x02, 0, 0, 0, 0, 0x99];
    const VIP: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 0x10);
    const CLIENT_IP: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 0x99);

    /// A solicitation for `target` from `source`, to its solicited-node group.
    fn solicitation(source: Ipv6Addr, target: Ipv6Addr, hop_limit: u8) -> Vec<u8> {
        let octets = target.octets();
        let group = Ipv6Addr::new(
            0xff02,
            0,
            0,
            0,
            0,
            1,
            0xff00 | u16::from(octets[13]),
            u16::from_be_bytes([octets[14], octets[15]]),
        );
        let group_mac = [0x33, 0x33, 0xff, octets[13], octets[14], octets[15]];
        let mut payload = Vec::new();
        payload.extend_from_slice(&target.octets());
        if !source.is_unspecified() {
            // Source Link-Layer Address option (type 1, eight octets).
            payload.extend_from_slice(&[1, 1]);
            payload.extend_from_slice(&CLIENT);
        }
        let builder = PacketBuilder::ethernet2(CLIENT, group_mac)
            .ipv6(source.octets(), group.octets(), hop_limit)
            .icmpv6(Icmpv6Type::NeighborSolicitation);
        let mut frame = Vec::new();
        builder.write(&mut frame, &payload).unwrap();
        frame
    }

    fn ours(address: Ipv6Addr) -> bool {
        address == VIP
    }

    /// The advertisement's addresses, flags and target link-layer address, its checksum
    /// checked.
    fn read(frame: &[u8]) -> ([u8; 6], Ipv6Addr, Ipv6Addr, NeighborAdvertisementHeader, Vec<u8>) {
        let packet = SlicedPacket::from_ethernet(frame).unwrap();
        let Some(etherparse::LinkSlice::Ethernet2(ethernet)) = &packet.link else { panic!() };
        let (Some(NetSlice::Ipv6(ip)), Some(TransportSlice::Icmpv6(icmp))) =
            (&packet.net, &packet.transport)
        else {
            panic!("not ICMPv6")
        };
        let (source, destination) = (ip.header().source_addr(), ip.header().destination_addr());
        assert!(icmp.is_checksum_valid(source.octets(), destination.octets()));
        assert_eq!(ip.header().hop_limit(), 255);
        let Icmpv6Type::NeighborAdvertisement(flags) = icmp.icmp_type() else { panic!() };
        (ethernet.destination(), source, destination, flags, icmp.payload().to_vec())
    }

    #[test]
    fn a_solicitation_for_an_answered_address_gets_a_solicited_advertisement() {
        let frame = reply(&solicitation(CLIENT_IP, VIP, 255), OURS, ours).unwrap();
        let (to_mac, source, destination, flags, payload) = read(&frame);
        assert_eq!((to_mac, source, destination), (CLIENT, VIP, CLIENT_IP));
        assert!(flags.solicited && flags.r#override && !flags.router);
        let mut expected = VIP.octets().to_vec();
        expected.extend_from_slice(&[2, 1]);
        expected.extend_from_slice(&OURS);
        assert_eq!(payload, expected);
        // Duplicate address detection (from ::): to all nodes, Solicited clear.
        let frame = reply(&solicitation(Ipv6Addr::UNSPECIFIED, VIP, 255), OURS, ours).unwrap();
        let (to_mac, _, destination, flags, _) = read(&frame);
        assert_eq!((to_mac, destination), (ALL_NODES_MAC, ALL_NODES));
        assert!(!flags.solicited && flags.r#override);
    }

    #[test]
    fn anything_else_is_dropped_with_its_reason() {
        let other = Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 0x11);
        let cases = [
            (solicitation(CLIENT_IP, other, 255), Dropped::NotAnswered),
            (solicitation(CLIENT_IP, VIP, 64), Dropped::Malformed),
            (announcement(VIP, CLIENT), Dropped::NotRequest),
            (announcement(VIP, OURS), Dropped::OurOwn),
        ];
        for (frame, why) in cases {
            assert_eq!(reply(&frame, OURS, ours), Err(why));
        }
        let whole = solicitation(CLIENT_IP, VIP, 255);
        for length in 0..whole.len() {
            let cut = whole.get(..length).unwrap_or_default();
            assert!(reply(cut, OURS, ours).is_err(), "{length} bytes answered");
        }
        let mut corrupted = whole.clone();
        if let Some(last) = corrupted.last_mut() {
            *last ^= 0xff;
        }
        assert_eq!(reply(&corrupted, OURS, ours), Err(Dropped::Malformed), "bad checksum");
    }

    #[test]
    fn the_announcement_goes_to_all_nodes_with_override() {
        let (to_mac, source, destination, flags, _) = read(&announcement(VIP, OURS));
        assert_eq!((to_mac, source, destination), (ALL_NODES_MAC, VIP, ALL_NODES));
        assert!(!flags.solicited && flags.r#override);
    }
}
