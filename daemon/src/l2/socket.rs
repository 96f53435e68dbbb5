//! A packet socket (`AF_PACKET`, packet(7)) on one interface, for one EtherType: layer 2
//! mode's frames in and out. socket2 makes and reads the socket; the link-layer address it is
//! bound to (`sockaddr_ll`) has no constructor there, so it is filled in below, and tokio's
//! registration of a descriptor is unsafe by its signature: the two `unsafe` blocks here.

use std::io::{self, Read};

use socket2::{Domain, Protocol, SockAddr, SockFilter, Socket, Type};
use tokio::io::unix::AsyncFd;

/// EtherType of ARP.
pub const ETH_P_ARP: u16 = 0x0806;
/// EtherType of IPv6 (Neighbor Discovery rides in it).
pub const ETH_P_IPV6: u16 = 0x86dd;

pub struct PacketSocket {
    socket: AsyncFd<Socket>,
}

impl PacketSocket {
    /// A socket that receives the frames of `ethertype` on the interface `ifindex` and sends
    /// frames out of it.
    pub fn open(ifindex: u32, ethertype: u16) -> io::Result<Self> {
        let protocol = Protocol::from(i32::from(ethertype.to_be()));
        let socket = Socket::new(Domain::PACKET, Type::RAW, Some(protocol))?;
        socket.set_nonblocking(true)?;
        socket.bind(&link_address(ifindex, ethertype)?)?;
        // SAFETY: the socket owns its descriptor until it is dropped, which the `AsyncFd`
        // that takes it does first, and its `as_raw_fd` always returns that descriptor.
        let socket = unsafe { AsyncFd::register(socket)? };
        Ok(Self { socket })
    }

    /// Room for this many bytes of frames waiting to be read: a burst (a flood of requests
    /// for other addresses) is queued rather than dropped with the answers in it.
    pub fn set_receive_buffer(&self, bytes: usize) -> io::Result<()> {
        self.socket.get_ref().set_recv_buffer_size(bytes)
    }

    /// Lets only Neighbor Solicitations through (an IPv6 socket otherwise gets every IPv6
    /// frame of the interface): the kernel drops the rest before they wake the responder, so
    /// a busy link does not delay the answers.
    pub fn only_neighbor_solicitations(&self) -> io::Result<()> {
        self.socket.get_ref().attach_filter(&neighbor_solicitation_filter())
    }

    /// Lets only ARP requests through (operation 1) for a target within `targets` (inclusive
    /// ranges of IPv4 addresses as numbers; all requests when `None`): replies, forged or not,
    /// and a flood of requests for other addresses never reach the responder. Attached again
    /// whenever the addresses change.
    pub fn only_arp_requests(&self, targets: Option<&[(u32, u32)]>) -> io::Result<()> {
        self.socket.get_ref().attach_filter(&arp_request_filter(targets))
    }

    /// Has the interface pass every multicast frame up (`PACKET_MR_ALLMULTI`, packet(7)): a
    /// Neighbor Solicitation goes to the target's solicited-node group, which a NIC filters
    /// out unless some socket joined it; socket2 offers no packet membership.
    pub fn receive_all_multicast(&self, ifindex: u32) -> io::Result<()> {
        let request = libc::packet_mreq {
            mr_ifindex: i32::try_from(ifindex).map_err(|_| {
                io::Error::new(io::ErrorKind::InvalidInput, "interface index too large")
            })?,
            mr_type: libc::PACKET_MR_ALLMULTI as u16,
            mr_alen: 0,
            mr_address: [0; 8],
        };
        // SAFETY: the descriptor is the socket's own, open while `self` lives; the option's
        // value is a `packet_mreq` on the stack, passed with its exact size.
        let result = unsafe {
            libc::setsockopt(
                std::os::fd::AsRawFd::as_raw_fd(self.socket.get_ref()),
                libc::SOL_PACKET,
                libc::PACKET_ADD_MEMBERSHIP,
                std::ptr::addr_of!(request).cast(),
                std::mem::size_of::<libc::packet_mreq>() as libc::socklen_t,
            )
        };
        if result == 0 {
            Ok(())
        } else {
            Err(io::Error::last_os_error())
        }
    }

    /// A socket that only sends out of the interface `ifindex` (bound to no EtherType, it
    /// receives nothing).
    pub fn sender(ifindex: u32) -> io::Result<Self> {
        Self::open(ifindex, 0)
    }

    /// The next frame, into `buffer`: its length.
    pub async fn receive(&self, buffer: &mut [u8]) -> io::Result<usize> {
        loop {
            let mut ready = self.socket.readable().await?;
            match ready.try_io(|socket| socket.get_ref().read(buffer)) {
                Ok(result) => return result,
                Err(_would_block) => continue,
            }
        }
    }

    /// Sends `frame` out of the interface (the socket is bound to it: no address needed).
    pub fn send(&self, frame: &[u8]) -> io::Result<usize> {
        self.socket.get_ref().send(frame)
    }
}

// Classic BPF (bpf(4), filter.txt): load a byte or half-word at an absolute offset from the
// frame's start, jump if equal, return.
const LD_B_ABS: u16 = 0x30;
const LD_H_ABS: u16 = 0x28;
const JEQ_K: u16 = 0x15;
const RET_K: u16 = 0x06;

/// IPv6 (EtherType at octet 12) whose next header (octet 14 + 6) is ICMPv6 (58) and whose
/// ICMPv6 type (octet 14 + 40) is Neighbor Solicitation (135). A solicitation carries no
/// extension header (RFC 4861 §7.1.1 drops it otherwise, as `ndp` does).
fn neighbor_solicitation_filter() -> Vec<SockFilter> {
    vec![
        SockFilter::new(LD_H_ABS, 0, 0, 12),
        SockFilter::new(JEQ_K, 0, 5, u32::from(ETH_P_IPV6)),
        SockFilter::new(LD_B_ABS, 0, 0, 20),
        SockFilter::new(JEQ_K, 0, 3, 58),
        SockFilter::new(LD_B_ABS, 0, 0, 54),
        SockFilter::new(JEQ_K, 0, 1, 135),
        SockFilter::new(RET_K, 0, 0, u32::MAX),
        SockFilter::new(RET_K, 0, 0, 0),
    ]
}

/// The most target ranges one ARP filter checks: two instructions each, and a conditional
/// jump reaches at most 255 instructions ahead. More ranges are merged across their smallest
/// gaps ([`target_ranges`]).
pub const MAX_TARGET_RANGES: usize = 100;

const LD_W_ABS: u16 = 0x20;
const JGE_K: u16 = 0x35;
const JGT_K: u16 = 0x25;

/// ARP (EtherType at octet 12) whose operation (octets 14 + 6, 7) is a request (1) and, with
/// `targets`, whose target address (octets 14 + 24 to 27) is within one of them.
fn arp_request_filter(targets: Option<&[(u32, u32)]>) -> Vec<SockFilter> {
    let ranges = targets.map(|t| t.get(..MAX_TARGET_RANGES).unwrap_or(t)).unwrap_or_default();
    // From each instruction before "drop" and "accept" (the last two), how far to each.
    let mut program = vec![
        SockFilter::new(LD_H_ABS, 0, 0, 12),
        SockFilter::new(JEQ_K, 0, 0, u32::from(ETH_P_ARP)),
        SockFilter::new(LD_H_ABS, 0, 0, 20),
        SockFilter::new(JEQ_K, 0, 0, 1),
    ];
    if targets.is_some() {
        program.push(SockFilter::new(LD_W_ABS, 0, 0, 38));
        for (low, high) in ranges {
            // Below the range: on to the next one; above it: the same; within: accept.
            program.push(SockFilter::new(JGE_K, 0, 1, *low));
            program.push(SockFilter::new(JGT_K, 0, 0, *high));
        }
    }
    let drop_at = program.len();
    let accept_at = drop_at + 1;
    let jump = |from: usize, to: usize| u8::try_from(to - from - 1).unwrap_or(u8::MAX);
    // Fill in the jumps now that the ends are known.
    if let Some(check) = program.get_mut(1) {
        *check = SockFilter::new(JEQ_K, 0, jump(1, drop_at), u32::from(ETH_P_ARP));
    }
    let after_operation = if targets.is_some() { 0 } else { jump(3, accept_at) };
    if let Some(check) = program.get_mut(3) {
        *check = SockFilter::new(JEQ_K, after_operation, jump(3, drop_at), 1);
    }
    for (index, (_, high)) in ranges.iter().enumerate() {
        let at = 6 + 2 * index;
        if let Some(check) = program.get_mut(at) {
            *check = SockFilter::new(JGT_K, 0, jump(at, accept_at), *high);
        }
    }
    program.push(SockFilter::new(RET_K, 0, 0, 0));
    program.push(SockFilter::new(RET_K, 0, 0, u32::MAX));
    program
}

/// The addresses as at most [`MAX_TARGET_RANGES`] inclusive ranges covering all of them: runs
/// of consecutive addresses, then the closest ranges joined (a few addresses between them let
/// through, where the responder drops them).
pub fn target_ranges(addresses: impl IntoIterator<Item = std::net::Ipv4Addr>) -> Vec<(u32, u32)> {
    let mut numbers: Vec<u32> = addresses.into_iter().map(u32::from).collect();
    numbers.sort_unstable();
    numbers.dedup();
    let mut ranges: Vec<(u32, u32)> = Vec::new();
    for n in numbers {
        match ranges.last_mut() {
            Some((_, high)) if high.checked_add(1) == Some(n) => *high = n,
            _ => ranges.push((n, n)),
        }
    }
    while ranges.len() > MAX_TARGET_RANGES {
        // Join the two neighbours with the smallest gap.
        let closest = ranges
            .windows(2)
            .enumerate()
            .min_by_key(|(_, pair)| match pair {
                [(_, high), (low, _)] => low.saturating_sub(*high),
                _ => u32::MAX,
            })
            .map(|(index, _)| index);
        let Some(index) = closest else { break };
        if let (Some(&(low, _)), Some(&(_, high))) = (ranges.get(index), ranges.get(index + 1)) {
            ranges.splice(index..index + 2, [(low, high)]);
        }
    }
    ranges
}

/// The `sockaddr_ll` of the interface and EtherType (packet(7)).
fn link_address(ifindex: u32, ethertype: u16) -> io::Result<SockAddr> {
    let ifindex = i32::try_from(ifindex)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "interface index too large"))?;
    // SAFETY: `try_init` hands a zeroed `sockaddr_storage` (larger than `sockaddr_ll`, which
    // `view_as` asserts) and its length; the fields written are `sockaddr_ll`'s and the length
    // set is its size.
    let ((), address) = unsafe {
        SockAddr::try_init(|storage, length| {
            let link = (*storage).view_as::<libc::sockaddr_ll>();
            link.sll_family = libc::AF_PACKET as libc::sa_family_t;
            link.sll_protocol = ethertype.to_be();
            link.sll_ifindex = ifindex;
            *length = std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t;
            Ok(())
        })?
    };
    Ok(address)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::l2::arp;
    use std::net::Ipv4Addr;

    /// On the loopback interface (index 1 in every network namespace) a frame sent by one
    /// socket is received by another of its EtherType. Needs CAP_NET_RAW: the tests run as
    /// root, as the daemon does.
    #[tokio::test]
    async fn a_frame_sent_on_an_interface_is_received_there() {
        let sender = PacketSocket::open(1, ETH_P_ARP).expect("a packet socket (CAP_NET_RAW)");
        let receiver = PacketSocket::open(1, ETH_P_ARP).expect("a packet socket (CAP_NET_RAW)");
        let frame = arp::announcement(Ipv4Addr::new(192, 0, 2, 10), [0x02, 0, 0, 0, 0, 1]);
        assert_eq!(sender.send(&frame).unwrap(), frame.len());
        let mut buffer = [0u8; 1514];
        let length =
            tokio::time::timeout(std::time::Duration::from_secs(2), receiver.receive(&mut buffer))
                .await
                .expect("the frame within 2 s")
                .unwrap();
        assert_eq!(buffer.get(..length), Some(frame.as_slice()));
    }

    /// With the filter, a reply (a forged one, say) never reaches the socket; the request
    /// sent after it is the first frame received.
    #[tokio::test]
    async fn the_arp_filter_lets_requests_through_and_nothing_else() {
        let sender = PacketSocket::open(1, ETH_P_ARP).expect("a packet socket (CAP_NET_RAW)");
        let receiver = PacketSocket::open(1, ETH_P_ARP).expect("a packet socket (CAP_NET_RAW)");
        receiver.only_arp_requests(None).unwrap();
        let mac = [0x02, 0, 0, 0, 0, 1];
        let request = arp::announcement(Ipv4Addr::new(192, 0, 2, 10), mac);
        let mut reply = request.clone();
        // Operation 2 (reply), octets 20-21.
        reply[21] = 2;
        sender.send(&reply).unwrap();
        sender.send(&request).unwrap();
        let mut buffer = [0u8; 1514];
        let length =
            tokio::time::timeout(std::time::Duration::from_secs(2), receiver.receive(&mut buffer))
                .await
                .expect("the request within 2 s")
                .unwrap();
        assert_eq!(buffer.get(..length), Some(request.as_slice()));
    }

    /// With target ranges, a request for an address outside them never reaches the socket.
    #[tokio::test]
    async fn the_arp_filter_lets_through_only_the_requests_for_the_answered_ranges() {
        let sender = PacketSocket::open(1, ETH_P_ARP).expect("a packet socket (CAP_NET_RAW)");
        let receiver = PacketSocket::open(1, ETH_P_ARP).expect("a packet socket (CAP_NET_RAW)");
        let answered = [
            Ipv4Addr::new(192, 0, 2, 10),
            Ipv4Addr::new(192, 0, 2, 11),
            Ipv4Addr::new(198, 51, 100, 7),
        ];
        let ranges = target_ranges(answered);
        assert_eq!(ranges.len(), 2);
        receiver.only_arp_requests(Some(&ranges)).unwrap();
        let mac = [0x02, 0, 0, 0, 0, 1];
        for other in
            [Ipv4Addr::new(192, 0, 2, 9), Ipv4Addr::new(192, 0, 2, 12), Ipv4Addr::new(10, 0, 0, 1)]
        {
            sender.send(&arp::announcement(other, mac)).unwrap();
        }
        for wanted in [answered[1], answered[2]] {
            let request = arp::announcement(wanted, mac);
            sender.send(&request).unwrap();
            let mut buffer = [0u8; 1514];
            let length = tokio::time::timeout(
                std::time::Duration::from_secs(2),
                receiver.receive(&mut buffer),
            )
            .await
            .expect("the request within 2 s")
            .unwrap();
            assert_eq!(buffer.get(..length), Some(request.as_slice()), "for {wanted}");
        }
    }

    #[test]
    fn target_ranges_join_runs_and_then_the_closest_neighbours() {
        let ips = |list: &[u32]| list.iter().map(|n| Ipv4Addr::from(*n)).collect::<Vec<_>>();
        assert_eq!(target_ranges(ips(&[5, 3, 4, 9, 10, 20])), [(3, 5), (9, 10), (20, 20)]);
        // Every other address of 1,000: joined across the smallest gaps down to the limit.
        let many: Vec<u32> = (0..1000).map(|n| n * 2).collect();
        let ranges = target_ranges(ips(&many));
        assert_eq!(ranges.len(), MAX_TARGET_RANGES);
        assert!(many.iter().all(|n| ranges.iter().any(|(low, high)| low <= n && n <= high)));
        assert!(target_ranges(ips(&[])).is_empty());
    }
}
