//! ARP (RFC 826) for layer 2 mode: the reply to a request for an address this node answers
//! for, and the announcement sent when it takes an address over. Frames are read and written
//! with `etherparse`; what is ours is the rules below.

use std::net::Ipv4Addr;

use etherparse::Ethernet2Slice;

use super::Dropped;
use etherparse::{ArpEthIpv4Packet, ArpOperation, ArpPacketSlice, EtherType, Ethernet2Header};

pub const BROADCAST: [u8; 6] = [0xff; 6];

/// The reply to `frame` when it is an ARP request for an address `answers_for` accepts:
/// from `mac`, to the requester, saying the address is at `mac`.
pub fn reply(
    frame: &[u8],
    mac: [u8; 6],
    answers_for: impl Fn(Ipv4Addr) -> bool,
) -> Result<Vec<u8>, Dropped> {
    let ethernet = Ethernet2Slice::from_slice_without_fcs(frame).map_err(|_| Dropped::Malformed)?;
    if ethernet.ether_type() != EtherType::ARP {
        return Err(Dropped::OtherProtocol);
    }
    let destination = ethernet.destination();
    if destination != BROADCAST && destination != mac {
        return Err(Dropped::NotForUs);
    }
    let request = ArpPacketSlice::from_slice(ethernet.payload_slice())
        .map_err(|_| Dropped::Malformed)?
        .to_packet()
        .try_eth_ipv4()
        .map_err(|_| Dropped::Malformed)?;
    if request.operation != ArpOperation::REQUEST {
        return Err(Dropped::NotRequest);
    }
    if request.sender_mac == mac || ethernet.source() == mac {
        return Err(Dropped::OurOwn);
    }
    let target = request.target_ipv4_addr();
    if !answers_for(target) {
        return Err(Dropped::NotAnswered);
    }
    let answer = ArpEthIpv4Packet {
        operation: ArpOperation::REPLY,
        sender_mac: mac,
        sender_ipv4: request.target_ipv4,
        target_mac: request.sender_mac,
        target_ipv4: request.sender_ipv4,
    };
    Ok(frame_of(request.sender_mac, mac, &answer))
}

/// The ARP Announcement of `address` at `mac` (RFC 5227 §3: a broadcast request whose sender
/// and target are the address), which moves the neighbours' entries to this node when it
/// takes the address over.
pub fn announcement(address: Ipv4Addr, mac: [u8; 6]) -> Vec<u8> {
    let packet = ArpEthIpv4Packet {
        operation: ArpOperation::REQUEST,
        sender_mac: mac,
        sender_ipv4: address.octets(),
        target_mac: [0; 6],
        target_ipv4: address.octets(),
    };
    frame_of(BROADCAST, mac, &packet)
}

fn frame_of(destination: [u8; 6], source: [u8; 6], packet: &ArpEthIpv4Packet) -> Vec<u8> {
    let header = Ethernet2Header { source, destination, ether_type: EtherType::ARP };
    let mut frame = Vec::with_capacity(Ethernet2Header::LEN + ArpEthIpv4Packet::LEN);
    frame.extend_from_slice(&header.to_bytes());
    frame.extend_from_slice(&packet.to_bytes());
    frame
}

#[cfg(test)]
mod tests {
    use super::*;

    const OURS: [u8; 6] = [0x02, 0, 0, 0, 0, 0x01];
    const CLIENT: [u8; 6] = [0x02, 0, 0, 0, 0, 0x99];
    const VIP: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 10);
    const CLIENT_IP: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 99);

    fn request(destination: [u8; 6], operation: ArpOperation, target: Ipv4Addr) -> Vec<u8> {
        let packet = ArpEthIpv4Packet {
            operation,
            sender_mac: CLIENT,
            sender_ipv4: CLIENT_IP.octets(),
            target_mac: [0; 6],
            target_ipv4: target.octets(),
        };
        frame_of(destination, CLIENT, &packet)
    }

    fn ours(address: Ipv4Addr) -> bool {
        address == VIP
    }

    #[test]
    fn a_request_for_an_answered_address_gets_a_reply_to_the_requester() {
        let frame = reply(&request(BROADCAST, ArpOperation::REQUEST, VIP), OURS, ours).unwrap();
        let ethernet = Ethernet2Slice::from_slice_without_fcs(&frame).unwrap();
        assert_eq!((ethernet.destination(), ethernet.source()), (CLIENT, OURS));
        let answer = ArpPacketSlice::from_slice(ethernet.payload_slice())
            .unwrap()
            .to_packet()
            .try_eth_ipv4()
            .unwrap();
        assert_eq!(answer.operation, ArpOperation::REPLY);
        assert_eq!((answer.sender_mac, answer.sender_ipv4_addr()), (OURS, VIP));
        assert_eq!((answer.target_mac, answer.target_ipv4_addr()), (CLIENT, CLIENT_IP));
        // Unicast to us (a neighbour checking its entry) is answered too.
        assert!(reply(&request(OURS, ArpOperation::REQUEST, VIP), OURS, ours).is_ok());
    }

    #[test]
    fn anything_else_is_dropped_with_its_reason() {
        let other = Ipv4Addr::new(192, 0, 2, 11);
        let cases = [
            (request(BROADCAST, ArpOperation::REQUEST, other), Dropped::NotAnswered),
            (request(BROADCAST, ArpOperation::REPLY, VIP), Dropped::NotRequest),
            (request(CLIENT, ArpOperation::REQUEST, VIP), Dropped::NotForUs),
            (announcement(VIP, OURS), Dropped::OurOwn),
        ];
        for (frame, why) in cases {
            assert_eq!(reply(&frame, OURS, ours), Err(why));
        }
        let whole = request(BROADCAST, ArpOperation::REQUEST, VIP);
        for length in 0..whole.len() {
            let cut = whole.get(..length).unwrap_or_default();
            assert!(reply(cut, OURS, ours).is_err(), "{length} bytes answered");
        }
        let mut not_arp = whole.clone();
        not_arp[12..14].copy_from_slice(&[0x86, 0xdd]);
        assert_eq!(reply(&not_arp, OURS, ours), Err(Dropped::OtherProtocol));
    }

    #[test]
    fn the_announcement_is_a_broadcast_request_for_the_address_itself() {
        let frame = announcement(VIP, OURS);
        let ethernet = Ethernet2Slice::from_slice_without_fcs(&frame).unwrap();
        assert_eq!((ethernet.destination(), ethernet.source()), (BROADCAST, OURS));
        let packet = ArpPacketSlice::from_slice(ethernet.payload_slice())
            .unwrap()
            .to_packet()
            .try_eth_ipv4()
            .unwrap();
        assert_eq!(packet.operation, ArpOperation::REQUEST);
        assert_eq!(packet.sender_ipv4_addr(), VIP);
        assert_eq!(packet.target_ipv4_addr(), VIP);
    }
}
