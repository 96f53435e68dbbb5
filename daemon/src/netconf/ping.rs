//! ICMP echo (RFC 792, RFC 4443 §4.1) through a raw socket, optionally bound to a device (the
//! gateway's interface, or a VRF's device) and a source address. uplink runs as root, so a raw
//! socket needs no setuid `ping` binary; the `ping` crates on crates.io wrap the same socket
//! calls with their own runtime, so the few lines here are simpler than either.

use std::io::ErrorKind;
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::time::{Duration, Instant};

use socket2::{Domain, Protocol, SockAddr, Socket, Type};

const ECHO_REQUEST_V4: u8 = 8;
const ECHO_REPLY_V4: u8 = 0;
const ECHO_REQUEST_V6: u8 = 128;
const ECHO_REPLY_V6: u8 = 129;

/// Sends one echo request to `target` and waits up to `wait` for its reply. Blocking: call it
/// from a blocking thread.
pub fn echo(
    target: IpAddr,
    device: Option<&str>,
    source: Option<IpAddr>,
    sequence: u16,
    wait: Duration,
) -> Result<(), String> {
    let (domain, protocol, request, reply) = match target {
        IpAddr::V4(_) => (Domain::IPV4, Protocol::ICMPV4, ECHO_REQUEST_V4, ECHO_REPLY_V4),
        IpAddr::V6(_) => (Domain::IPV6, Protocol::ICMPV6, ECHO_REQUEST_V6, ECHO_REPLY_V6),
    };
    let socket = Socket::new(domain, Type::RAW, Some(protocol))
        .map_err(|e| format!("cannot open an ICMP socket: {e}"))?;
    if let Some(device) = device {
        socket
            .bind_device(Some(device.as_bytes()))
            .map_err(|e| format!("cannot bind to device {device}: {e}"))?;
    }
    if let Some(source) = source {
        socket
            .bind(&SockAddr::from(SocketAddr::new(source, 0)))
            .map_err(|e| format!("cannot send from {source}: {e}"))?;
    }
    let identifier = (std::process::id() as u16) ^ 0x5550;
    let mut packet = [0u8; 16];
    packet[0] = request;
    packet[4..6].copy_from_slice(&identifier.to_be_bytes());
    packet[6..8].copy_from_slice(&sequence.to_be_bytes());
    packet[8..16].copy_from_slice(b"uplink\0\0");
    if target.is_ipv4() {
        // The kernel fills in the ICMPv6 checksum (RFC 3542 §3.1), not the ICMPv4 one.
        let sum = checksum(&packet);
        packet[2..4].copy_from_slice(&sum.to_be_bytes());
    }
    // std's datagram calls (sendto/recvfrom on initialised buffers) work on any datagram
    // socket, raw ones included.
    let socket = UdpSocket::from(socket);
    socket
        .send_to(&packet, SocketAddr::new(target, 0))
        .map_err(|e| format!("cannot send an echo request to {target}: {e}"))?;
    let deadline = Instant::now() + wait;
    let mut buffer = [0u8; 1500];
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(format!("no echo reply from {target} within {}ms", wait.as_millis()));
        }
        socket.set_read_timeout(Some(left)).map_err(|e| format!("socket timeout: {e}"))?;
        let (length, from) = match socket.recv_from(&mut buffer) {
            Ok(received) => received,
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => continue,
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(e) => return Err(format!("no echo reply from {target}: {e}")),
        };
        let data = buffer.get(..length).unwrap_or(&[]);
        if from.ip() != target {
            continue;
        }
        // A raw IPv4 socket hands over the IP header too; an IPv6 one does not.
        let icmp = match target {
            IpAddr::V4(_) => {
                let header = usize::from(data.first().copied().unwrap_or(0) & 0x0f) * 4;
                data.get(header..).unwrap_or(&[])
            }
            IpAddr::V6(_) => data,
        };
        let matches = icmp.first() == Some(&reply)
            && icmp.get(4..6) == Some(&identifier.to_be_bytes()[..])
            && icmp.get(6..8) == Some(&sequence.to_be_bytes()[..]);
        if matches {
            return Ok(());
        }
    }
}

/// The Internet checksum (RFC 1071).
fn checksum(data: &[u8]) -> u16 {
    let mut sum: u32 = 0;
    for chunk in data.chunks(2) {
        let word = match chunk {
            [a, b] => u16::from_be_bytes([*a, *b]),
            [a] => u16::from_be_bytes([*a, 0]),
            _ => 0,
        };
        sum = sum.wrapping_add(u32::from(word));
    }
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc1071_checksum() {
        // RFC 1071 §3's example words 0001 f203 f4f5 f6f7 sum to ddf2 (checksum 220d).
        assert_eq!(checksum(&[0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7]), 0x220d);
        // A packet with its checksum filled in sums to zero.
        let mut packet = [8u8, 0, 0, 0, 0x12, 0x34, 0, 1];
        let sum = checksum(&packet);
        packet[2..4].copy_from_slice(&sum.to_be_bytes());
        assert_eq!(checksum(&packet), 0);
    }
}
