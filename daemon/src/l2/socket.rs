//! A packet socket (`AF_PACKET`, packet(7)) on one interface, for one EtherType: layer 2
//! mode's frames in and out. socket2 makes and reads the socket; the link-layer address it is
//! bound to (`sockaddr_ll`) has no constructor there, so it is filled in below, and tokio's
//! registration of a descriptor is unsafe by its signature: the two `unsafe` blocks here.

use std::io::{self, Read};

use socket2::{Domain, Protocol, SockAddr, Socket, Type};
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
}
