//! TCP for BGP (RFC 4271 §8: port 179): outgoing connections from a chosen source address,
//! the listening socket, and the socket options no crate offers — TCP-MD5 (RFC 2385), GTSM
//! (RFC 5082) and the outgoing TTL for eBGP multihop.

use std::io;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::{AsRawFd, RawFd};
use tokio::net::{TcpListener, TcpSocket, TcpStream};

/// Linux `TCP_MD5SIG_MAXKEYLEN` (include/uapi/linux/tcp.h).
pub const MD5_MAX_KEY_LEN: usize = 80;

/// How long one outgoing connection attempt may take.
pub const CONNECT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// How a session's TCP connection is set up.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TransportOptions {
    pub source: Option<IpAddr>,
    /// TTL / hop limit of outgoing packets: 1 for directly connected eBGP, 255 for multihop
    /// or GTSM (RFC 5082 §3: the sender always uses 255).
    pub ttl: u8,
    /// GTSM: the lowest TTL accepted from the peer (255 - hops + 1), or none.
    pub min_ttl: Option<u8>,
    pub md5_key: Option<Vec<u8>>,
    /// The VRF device to bind to (SO_BINDTODEVICE), for instances outside the default VRF.
    pub device: Option<String>,
}

/// Opens an outgoing connection to `remote` with `opts` applied before the SYN.
pub async fn connect(remote: SocketAddr, opts: &TransportOptions) -> io::Result<TcpStream> {
    let socket = if remote.is_ipv4() { TcpSocket::new_v4()? } else { TcpSocket::new_v6()? };
    if let Some(device) = &opts.device {
        socket.bind_device(Some(device.as_bytes()))?;
    }
    if let Some(source) = opts.source {
        socket.bind(SocketAddr::new(source, 0))?;
    }
    let fd = socket.as_raw_fd();
    apply_ttl(fd, remote.ip(), opts.ttl, opts.min_ttl)?;
    if let Some(key) = &opts.md5_key {
        set_md5_key(fd, remote.ip(), key)?;
    }
    socket.set_nodelay(true)?;
    // Without a bound the kernel retries the SYN for minutes; connect-retry is ours to pace.
    match tokio::time::timeout(CONNECT_TIMEOUT, socket.connect(remote)).await {
        Ok(result) => result,
        Err(_) => Err(io::Error::new(io::ErrorKind::TimedOut, "connection timed out")),
    }
}

/// The passive side: one dual-stack listener per routing instance, bound to the VRF device
/// when the instance is not the default VRF (`vrf` empty).
pub fn listen(port: u16, vrf: &str) -> io::Result<TcpListener> {
    let socket = TcpSocket::new_v6()?;
    socket.set_reuseaddr(true)?;
    if !vrf.is_empty() {
        socket.bind_device(Some(vrf.as_bytes()))?;
    }
    // IPV6_V6ONLY defaults to 0 on Linux, so IPv4 peers arrive as v4-mapped addresses.
    socket.bind(SocketAddr::new(IpAddr::V6(std::net::Ipv6Addr::UNSPECIFIED), port))?;
    // Keep each connection's SYN so GTSM can check the TTL it arrived with (see syn_ttl).
    setsockopt_int(socket.as_raw_fd(), libc::IPPROTO_TCP, libc::TCP_SAVE_SYN, 1)?;
    socket.listen(128)
}

/// The TTL (IPv4) or hop limit (IPv6) of the SYN that opened an accepted connection.
///
/// RFC 5082 §3 wants every packet of a GTSM session checked, but IP_MINTTL can only be set on
/// the accepted socket, after the peer's first segments may already be queued. Checking the
/// SYN (kept by TCP_SAVE_SYN on the listener) closes that gap. Returns `None` when the kernel
/// kept no SYN (it hands it out once).
pub fn syn_ttl(fd: RawFd) -> Option<u8> {
    let mut header = [0u8; 256];
    let mut len = header.len() as libc::socklen_t;
    // SAFETY: the kernel writes at most `len` bytes into `header`, which is that large.
    let rc = unsafe {
        libc::getsockopt(
            fd,
            libc::IPPROTO_TCP,
            libc::TCP_SAVED_SYN,
            header.as_mut_ptr().cast(),
            &mut len,
        )
    };
    if rc != 0 {
        return None;
    }
    let saved = header.get(..len as usize)?;
    match saved.first()? >> 4 {
        4 => saved.get(8).copied(), // IPv4 header: TTL at octet 8 (RFC 791 §3.1)
        6 => saved.get(7).copied(), // IPv6 header: Hop Limit at octet 7 (RFC 8200 §3)
        _ => None,
    }
}

/// Applies TTL and GTSM options on an accepted (or about-to-connect) socket.
pub fn apply_ttl(fd: RawFd, peer: IpAddr, ttl: u8, min_ttl: Option<u8>) -> io::Result<()> {
    let ttl = i32::from(ttl.max(1));
    if is_v4(peer) {
        setsockopt_int(fd, libc::IPPROTO_IP, libc::IP_TTL, ttl)?;
        if let Some(min) = min_ttl {
            // RFC 5082 §3: discard packets whose TTL is below 255 - (hops - 1).
            setsockopt_int(fd, libc::IPPROTO_IP, libc::IP_MINTTL, i32::from(min))?;
        }
    } else {
        setsockopt_int(fd, libc::IPPROTO_IPV6, libc::IPV6_UNICAST_HOPS, ttl)?;
        if let Some(min) = min_ttl {
            setsockopt_int(fd, libc::IPPROTO_IPV6, libc::IPV6_MINHOPCOUNT, i32::from(min))?;
        }
    }
    Ok(())
}

/// IPv4 peers, also those seen as v4-mapped on the dual-stack listener, take the IPv4-level
/// options: Linux handles v4-mapped traffic in the IPv4 stack.
fn is_v4(peer: IpAddr) -> bool {
    match peer {
        IpAddr::V4(_) => true,
        IpAddr::V6(v6) => v6.to_ipv4_mapped().is_some(),
    }
}

fn socket_family(fd: RawFd) -> Option<i32> {
    let mut storage = std::mem::MaybeUninit::<libc::sockaddr_storage>::zeroed();
    let mut len = std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
    // SAFETY: getsockname writes at most `len` bytes into `storage`, which is that large.
    let rc = unsafe { libc::getsockname(fd, storage.as_mut_ptr().cast(), &mut len) };
    if rc != 0 {
        return None;
    }
    // SAFETY: zero-initialised and partially written by the kernel; ss_family is always set.
    Some(i32::from(unsafe { storage.assume_init() }.ss_family))
}

/// Kernel `struct tcp_md5sig` (include/uapi/linux/tcp.h); the libc crate does not define it.
#[repr(C)]
struct TcpMd5Sig {
    addr: libc::sockaddr_storage,
    flags: u8,
    prefixlen: u8,
    keylen: u16,
    ifindex: i32,
    key: [u8; MD5_MAX_KEY_LEN],
}

/// Installs (or, with an empty key, removes) the RFC 2385 key for `peer` on `fd`. On a
/// listening socket the key applies to connections accepted from that peer.
pub fn set_md5_key(fd: RawFd, peer: IpAddr, key: &[u8]) -> io::Result<()> {
    if key.len() > MD5_MAX_KEY_LEN {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "TCP-MD5 key longer than 80 bytes",
        ));
    }
    // SAFETY: sockaddr_storage is plain old data; all-zero is a valid value.
    let mut addr: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let listener_is_v6 = socket_family(fd) == Some(libc::AF_INET6);
    match peer {
        IpAddr::V4(v4) if !listener_is_v6 => {
            let sin = libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: 0,
                sin_addr: libc::in_addr { s_addr: u32::from_ne_bytes(v4.octets()) },
                sin_zero: [0; 8],
            };
            write_sockaddr(&mut addr, &sin);
        }
        other => {
            // On an IPv6 socket an IPv4 peer is keyed by its v4-mapped address.
            let v6 = match other {
                IpAddr::V4(v4) => v4.to_ipv6_mapped(),
                IpAddr::V6(v6) => v6,
            };
            let sin6 = libc::sockaddr_in6 {
                sin6_family: libc::AF_INET6 as libc::sa_family_t,
                sin6_port: 0,
                sin6_flowinfo: 0,
                sin6_addr: libc::in6_addr { s6_addr: v6.octets() },
                sin6_scope_id: 0,
            };
            write_sockaddr(&mut addr, &sin6);
        }
    }
    let mut sig = TcpMd5Sig {
        addr,
        flags: 0,
        prefixlen: 0,
        keylen: 0,
        ifindex: 0,
        key: [0; MD5_MAX_KEY_LEN],
    };
    sig.keylen = key.len() as u16; // ≤ 80, checked above
    if let Some(dst) = sig.key.get_mut(..key.len()) {
        dst.copy_from_slice(key);
    }
    // SAFETY: `sig` is a live, correctly laid out tcp_md5sig and the length passed is its size.
    let rc = unsafe {
        libc::setsockopt(
            fd,
            libc::IPPROTO_TCP,
            libc::TCP_MD5SIG,
            (&sig as *const TcpMd5Sig).cast(),
            std::mem::size_of::<TcpMd5Sig>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

fn write_sockaddr<T>(storage: &mut libc::sockaddr_storage, value: &T) {
    // SAFETY: T is sockaddr_in or sockaddr_in6, both smaller than sockaddr_storage, which is
    // designed to hold either.
    unsafe {
        std::ptr::write((storage as *mut libc::sockaddr_storage).cast::<T>(), std::ptr::read(value))
    };
}

fn setsockopt_int(fd: RawFd, level: i32, name: i32, value: i32) -> io::Result<()> {
    // SAFETY: passes a pointer to a live i32 and its exact size.
    let rc = unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            (&value as *const i32).cast(),
            std::mem::size_of::<i32>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}
