//! The DNS probe: one query over UDP to a name server (RFC 1035 §4.1), answered without error
//! and with at least one answer record. kubernetes-nmstate asks for the NS records of
//! `root-servers.net` (A records for any other name). A resolver crate would bring its own
//! runtime and configuration (resolv.conf) where the probe needs one question to a given server.

use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::time::{Duration, Instant};

const TYPE_A: u16 = 1;
const TYPE_NS: u16 = 2;
const CLASS_IN: u16 = 1;

/// The query packet for `name` (type NS for `root-servers.net`, A otherwise).
pub fn query(id: u16, name: &str) -> Result<Vec<u8>, String> {
    let qtype = if name.trim_end_matches('.') == "root-servers.net" { TYPE_NS } else { TYPE_A };
    let mut packet = Vec::with_capacity(32 + name.len());
    packet.extend_from_slice(&id.to_be_bytes());
    packet.extend_from_slice(&[0x01, 0x00]); // RD: recursion desired.
    packet.extend_from_slice(&[0, 1, 0, 0, 0, 0, 0, 0]); // QDCOUNT 1.
    for label in name.trim_end_matches('.').split('.') {
        let length = u8::try_from(label.len()).ok().filter(|l| (1..=63).contains(l));
        let Some(length) = length else { return Err(format!("{name:?} is not a DNS name")) };
        packet.push(length);
        packet.extend_from_slice(label.as_bytes());
    }
    packet.push(0);
    packet.extend_from_slice(&qtype.to_be_bytes());
    packet.extend_from_slice(&CLASS_IN.to_be_bytes());
    Ok(packet)
}

/// Whether `reply` answers query `id` with RCODE 0 and at least one answer.
pub fn answered(reply: &[u8], id: u16) -> Result<bool, String> {
    // RFC 1035 §4.1.1: ID (2), flags (2: QR … RCODE), QDCOUNT (2), ANCOUNT (2), …
    let [id_hi, id_lo, flags_hi, flags_lo, _, _, an_hi, an_lo, ..] = *reply else {
        return Err("short DNS reply".into());
    };
    if [id_hi, id_lo] != id.to_be_bytes() {
        return Ok(false); // Someone else's reply.
    }
    if flags_hi & 0x80 == 0 {
        return Err("not a DNS response".into());
    }
    let rcode = flags_lo & 0x0f;
    if rcode != 0 {
        return Err(format!("the server answered RCODE {rcode}"));
    }
    if u16::from_be_bytes([an_hi, an_lo]) == 0 {
        return Err("the server answered without records".into());
    }
    Ok(true)
}

/// Resolves `name` through `server`, blocking up to `wait`.
pub fn resolve(server: IpAddr, name: &str, wait: Duration) -> Result<(), String> {
    let bind: SocketAddr =
        if server.is_ipv4() { ([0, 0, 0, 0], 0).into() } else { ([0u16; 8], 0).into() };
    let socket = UdpSocket::bind(bind).map_err(|e| format!("cannot open a UDP socket: {e}"))?;
    let id: u16 = rand::random();
    socket
        .send_to(&query(id, name)?, SocketAddr::new(server, 53))
        .map_err(|e| format!("cannot send to {server}: {e}"))?;
    let deadline = Instant::now() + wait;
    let mut buffer = [0u8; 1500];
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(format!("no answer from {server} within {}ms", wait.as_millis()));
        }
        socket.set_read_timeout(Some(left)).map_err(|e| format!("socket timeout: {e}"))?;
        match socket.recv_from(&mut buffer) {
            Ok((length, from)) if from.ip() == server => {
                if answered(buffer.get(..length).unwrap_or(&[]), id)? {
                    return Ok(());
                }
            }
            Ok(_) => {}
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) => {}
            Err(e) => return Err(format!("no answer from {server}: {e}")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_query_is_rfc1035_wire_format() {
        let packet = query(0x1234, "root-servers.net").unwrap();
        let mut expected = vec![0x12, 0x34, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0];
        expected.extend_from_slice(b"\x0croot-servers\x03net\x00");
        expected.extend_from_slice(&[0, 2, 0, 1]);
        assert_eq!(packet, expected);
        assert_eq!(query(1, "example.org.").unwrap().get(25..27), Some(&[0u8, 1][..]));
        assert!(query(1, "bad..name").is_err());
    }

    #[test]
    fn replies_are_checked_for_id_rcode_and_answers() {
        let ok = [0x12, 0x34, 0x81, 0x80, 0, 1, 0, 13, 0, 0, 0, 0];
        assert_eq!(answered(&ok, 0x1234), Ok(true));
        assert_eq!(answered(&ok, 0x9999), Ok(false));
        let nxdomain = [0x12, 0x34, 0x81, 0x83, 0, 1, 0, 0, 0, 0, 0, 0];
        assert!(answered(&nxdomain, 0x1234).unwrap_err().contains("RCODE 3"));
        let empty = [0x12, 0x34, 0x81, 0x80, 0, 1, 0, 0, 0, 0, 0, 0];
        assert!(answered(&empty, 0x1234).is_err());
    }
}
