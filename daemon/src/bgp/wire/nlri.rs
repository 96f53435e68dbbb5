//! Prefix encoding shared by the NLRI and Withdrawn Routes fields (RFC 4271 §4.3) and by
//! MP_REACH_NLRI / MP_UNREACH_NLRI for unicast families (RFC 4760 §5): a length octet in bits
//! followed by the fewest octets that hold that many bits.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use ipnet::{IpNet, Ipv4Net, Ipv6Net};

use super::attributes::Afi;

/// Why a run of prefixes could not be parsed. Either one means the NLRI cannot be located
/// reliably, which RFC 7606 §5.3 answers with a session reset.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NlriError {
    /// The length octet exceeds 32 (IPv4) or 128 (IPv6).
    PrefixTooLong { prefix_len: u8 },
    /// The field ends in the middle of a prefix.
    Truncated,
}

impl std::fmt::Display for NlriError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::PrefixTooLong { prefix_len } => write!(f, "prefix length {prefix_len} too long"),
            Self::Truncated => f.write_str("field ends inside a prefix"),
        }
    }
}

/// The most bits a prefix of the family may have.
fn max_prefix_len(afi: Afi) -> u8 {
    match afi {
        Afi::Ipv4 => 32,
        Afi::Ipv6 => 128,
    }
}

/// Appends every prefix in `buf` to `out`. No allocation beyond `out`'s growth: each prefix is
/// assembled in a stack buffer. Host bits past the prefix length are cleared, since RFC 4271
/// §4.3 says trailing bits are irrelevant and two encodings of one route must compare equal.
pub fn decode_prefixes(mut buf: &[u8], afi: Afi, out: &mut Vec<IpNet>) -> Result<(), NlriError> {
    let max = max_prefix_len(afi);
    while let Some((&prefix_len, rest)) = buf.split_first() {
        if prefix_len > max {
            return Err(NlriError::PrefixTooLong { prefix_len });
        }
        let octets = usize::from(prefix_len).div_ceil(8);
        let (bytes, rest) = rest.split_at_checked(octets).ok_or(NlriError::Truncated)?;
        buf = rest;
        let net = match afi {
            Afi::Ipv4 => {
                let mut addr = [0u8; 4];
                copy_prefix(&mut addr, bytes);
                Ipv4Net::new(Ipv4Addr::from(addr), prefix_len)
                    .map(|n| IpNet::V4(n.trunc()))
                    .map_err(|_| NlriError::PrefixTooLong { prefix_len })?
            }
            Afi::Ipv6 => {
                let mut addr = [0u8; 16];
                copy_prefix(&mut addr, bytes);
                Ipv6Net::new(Ipv6Addr::from(addr), prefix_len)
                    .map(|n| IpNet::V6(n.trunc()))
                    .map_err(|_| NlriError::PrefixTooLong { prefix_len })?
            }
        };
        out.push(net);
    }
    Ok(())
}

fn copy_prefix(addr: &mut [u8], bytes: &[u8]) {
    for (dst, src) in addr.iter_mut().zip(bytes) {
        *dst = *src;
    }
}

/// Octets `net` takes on the wire: the length octet plus the significant address octets.
pub fn prefix_wire_len(net: &IpNet) -> usize {
    1 + usize::from(net.prefix_len()).div_ceil(8)
}

/// Appends the wire form of `net`.
pub fn encode_prefix(net: &IpNet, out: &mut Vec<u8>) {
    let len = net.prefix_len();
    let octets = usize::from(len).div_ceil(8);
    out.push(len);
    match net.addr() {
        IpAddr::V4(a) => out.extend(a.octets().iter().take(octets)),
        IpAddr::V6(a) => out.extend(a.octets().iter().take(octets)),
    }
}

/// The family a prefix belongs to.
pub fn afi_of(net: &IpNet) -> Afi {
    match net {
        IpNet::V4(_) => Afi::Ipv4,
        IpNet::V6(_) => Afi::Ipv6,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn net(s: &str) -> IpNet {
        s.parse().unwrap()
    }

    #[test]
    fn decodes_ipv4_prefixes_of_every_octet_count() {
        let buf = [0, 8, 10, 17, 192, 168, 128, 32, 1, 2, 3, 4];
        let mut out = Vec::new();
        decode_prefixes(&buf, Afi::Ipv4, &mut out).unwrap();
        assert_eq!(
            out,
            vec![net("0.0.0.0/0"), net("10.0.0.0/8"), net("192.168.128.0/17"), net("1.2.3.4/32")]
        );
    }

    #[test]
    fn clears_host_bits() {
        let mut out = Vec::new();
        decode_prefixes(&[9, 10, 0xff], Afi::Ipv4, &mut out).unwrap();
        assert_eq!(out, vec![net("10.128.0.0/9")]);
    }

    #[test]
    fn rejects_overlong_and_truncated() {
        let mut out = Vec::new();
        assert_eq!(
            decode_prefixes(&[33, 1, 2, 3, 4, 5], Afi::Ipv4, &mut out),
            Err(NlriError::PrefixTooLong { prefix_len: 33 })
        );
        assert_eq!(
            decode_prefixes(&[129], Afi::Ipv6, &mut out),
            Err(NlriError::PrefixTooLong { prefix_len: 129 })
        );
        assert_eq!(decode_prefixes(&[24, 10, 0], Afi::Ipv4, &mut out), Err(NlriError::Truncated));
    }

    #[test]
    fn encode_decode_round_trip() {
        let nets = [net("2001:db8::/32"), net("2001:db8:1:2::/64"), net("::/0"), net("::1/128")];
        let mut buf = Vec::new();
        for n in &nets {
            encode_prefix(n, &mut buf);
        }
        assert_eq!(buf.len(), nets.iter().map(prefix_wire_len).sum::<usize>());
        let mut out = Vec::new();
        decode_prefixes(&buf, Afi::Ipv6, &mut out).unwrap();
        assert_eq!(out, nets);
    }
}
