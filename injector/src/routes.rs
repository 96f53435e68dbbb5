//! The routes to inject, pre-encoded: `count` consecutive prefixes of one length, with one
//! attribute set or spread over `attr_sets` distinct ones like a full table's, packed into as
//! few UPDATEs as fit (the daemon's own packer), concatenated into one buffer so the sender
//! only copies octets.
//!
//! The full-table-like mix: the prefixes are split into `attr_sets` runs of consecutive
//! prefixes (a real table's neighbouring prefixes often share a path), each with its own set:
//! an AS_PATH of 1 to 10 ASNs starting with the injector's, 0 to 6 communities, a MED on about
//! a third. The sets come from a fixed-seed generator, so every run and every daemon gets the
//! same table.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use ipnet::{IpNet, Ipv4Net, Ipv6Net};
use uplink::bgp::wire::attr_codec::EncodeContext;
use uplink::bgp::wire::attributes::{AsPath, Family, NextHop, Origin, PathAttributes};
use uplink::bgp::wire::packer::pack_announcements;

/// What to generate.
#[derive(Debug, Clone)]
pub struct RouteSet {
    /// The first prefix; the following ones step by one block of its length.
    pub first: IpNet,
    pub count: u32,
    /// The NEXT_HOP (IPv4) or the MP_REACH global next hop (IPv6).
    pub next_hop: IpAddr,
    /// The injector's ASN: the whole AS_PATH with one set, its first ASN with many.
    pub asn: u32,
    /// Distinct attribute sets (1: every route has the same).
    pub attr_sets: u32,
}

#[derive(Debug)]
pub enum RouteError {
    Overflow(u32, u8, IpNet),
    NextHopFamily(IpAddr, IpNet),
    Pack(String),
}

impl std::fmt::Display for RouteError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RouteError::Overflow(n, len, first) => write!(
                f,
                "{n} prefixes of length {len} from {first} run past the end of the address space"
            ),
            RouteError::NextHopFamily(nh, first) => {
                write!(f, "the next hop {nh} is not of the family of {first}")
            }
            RouteError::Pack(e) => write!(f, "packing failed: {e}"),
        }
    }
}

impl std::error::Error for RouteError {}

/// The `count` prefixes: `first`, then each following block of the same length.
pub fn prefixes(first: IpNet, count: u32) -> Result<Vec<IpNet>, RouteError> {
    let len = first.prefix_len();
    let overflow = || RouteError::Overflow(count, len, first);
    match first {
        IpNet::V4(net) => {
            let step = 1u64.checked_shl(32 - u32::from(len)).ok_or_else(overflow)?;
            let base = u64::from(u32::from(net.network()));
            let last = base
                .checked_add(
                    step.checked_mul(u64::from(count.saturating_sub(1))).ok_or_else(overflow)?,
                )
                .ok_or_else(overflow)?;
            u32::try_from(last).map_err(|_| overflow())?;
            (0..u64::from(count))
                .map(|i| {
                    let addr = u32::try_from(base + i * step).map_err(|_| overflow())?;
                    Ipv4Net::new(Ipv4Addr::from(addr), len).map(IpNet::V4).map_err(|_| overflow())
                })
                .collect()
        }
        IpNet::V6(net) => {
            let step = 1u128.checked_shl(128 - u32::from(len)).ok_or_else(overflow)?;
            let base = u128::from(net.network());
            base.checked_add(
                step.checked_mul(u128::from(count.saturating_sub(1))).ok_or_else(overflow)?,
            )
            .ok_or_else(overflow)?;
            (0..u128::from(count))
                .map(|i| {
                    Ipv6Net::new(Ipv6Addr::from(base + i * step), len)
                        .map(IpNet::V6)
                        .map_err(|_| overflow())
                })
                .collect()
        }
    }
}

/// A small fixed-seed generator (splitmix64): the mix must be the same in every run, and the
/// injector needs no more than this.
struct Mix(u64);

impl Mix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `low..=high`.
    fn range(&mut self, low: u32, high: u32) -> u32 {
        low + (self.next() % u64::from(high - low + 1)) as u32
    }
}

/// Attribute set `index` of the full-table-like mix, on top of `base`: an AS_PATH of 1-10
/// ASNs (the first the injector's), 0-6 communities (sorted), a MED on about a third.
fn mixed(base: &PathAttributes, asn: u32, index: u32) -> PathAttributes {
    let mut mix = Mix(u64::from(index).wrapping_mul(0x2545_F491_4F6C_DD1D));
    let len = mix.range(1, 10);
    // Public ASNs below the private range, so no path loops through the daemon's AS.
    let mut path = vec![asn];
    path.extend((2..len).map(|_| mix.range(1, 64_000)));
    let mut communities: Vec<u32> =
        (0..mix.range(0, 6)).map(|_| (mix.range(1, 64_000) << 16) | mix.range(0, 65_535)).collect();
    // Every index gives a set of its own: a longer path ends in an origin AS of its own (a
    // 4-octet public one), a path of the neighbour alone carries a community of its own.
    if len > 1 {
        path.push(131_072u32.saturating_add(index));
    } else {
        communities.truncate(5);
        communities.push(((1 + (index >> 16)) << 16) | (index & 0xffff));
    }
    communities.sort_unstable();
    communities.dedup();
    let med = (mix.range(0, 2) == 0).then(|| mix.range(0, 1000));
    PathAttributes {
        as_path: AsPath::sequence(path),
        communities: communities.into(),
        med,
        ..base.clone()
    }
}

/// The attribute set every injected route carries: ORIGIN IGP, AS_PATH of the injector's
/// ASN, and the next hop.
fn attributes(set: &RouteSet) -> Result<(PathAttributes, Family), RouteError> {
    let (next_hop, family) = match (set.first, set.next_hop) {
        (IpNet::V4(_), IpAddr::V4(nh)) => (NextHop::V4(nh), Family::IPV4_UNICAST),
        (IpNet::V6(_), IpAddr::V6(nh)) => {
            (NextHop::V6 { global: nh, link_local: None }, Family::IPV6_UNICAST)
        }
        (first, nh) => return Err(RouteError::NextHopFamily(nh, first)),
    };
    let attrs = PathAttributes {
        origin: Origin::Igp,
        as_path: AsPath::sequence(vec![set.asn]),
        next_hop,
        ..PathAttributes::default()
    };
    Ok((attrs, family))
}

/// Every UPDATE for `set`, back to back in one buffer, and how many UPDATEs that is.
/// Encoded for a session with the 4-octet AS capability on both sides (RFC 6793 §3).
pub fn encode(set: &RouteSet) -> Result<(Vec<u8>, usize), RouteError> {
    let prefixes = prefixes(set.first, set.count)?;
    let (attrs, family) = attributes(set)?;
    let ctx = EncodeContext { four_octet_as: true };
    let mut messages = Vec::new();
    let sets = set.attr_sets.clamp(1, set.count.max(1)) as usize;
    let pack = |attrs: &PathAttributes, run: &[IpNet], out: &mut Vec<Vec<u8>>| {
        pack_announcements(attrs, family, run, &ctx, out)
            .map_err(|e| RouteError::Pack(e.to_string()))
    };
    if sets == 1 {
        pack(&attrs, &prefixes, &mut messages)?;
    } else {
        // Run `i` is prefixes[i * n / sets .. (i + 1) * n / sets].
        let n = prefixes.len();
        for i in 0..sets {
            let run = prefixes.get(i * n / sets..(i + 1) * n / sets).unwrap_or(&[]);
            let index = u32::try_from(i).unwrap_or(u32::MAX);
            pack(&mixed(&attrs, set.asn, index), run, &mut messages)?;
        }
    }
    let total = messages.iter().map(Vec::len).sum();
    let mut buf = Vec::with_capacity(total);
    for m in &messages {
        buf.extend_from_slice(m);
    }
    Ok((buf, messages.len()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use uplink::bgp::wire::message::{decode_message, frame_len, Message};

    fn net(s: &str) -> IpNet {
        s.parse().unwrap()
    }

    #[test]
    fn ipv4_prefixes_step_by_their_length() {
        let p = prefixes(net("16.0.0.0/24"), 3).unwrap();
        assert_eq!(p, vec![net("16.0.0.0/24"), net("16.0.1.0/24"), net("16.0.2.0/24")]);
        let million = prefixes(net("16.0.0.0/24"), 1_000_000).unwrap();
        assert_eq!(million.last(), Some(&net("31.66.63.0/24")));
    }

    #[test]
    fn ipv6_prefixes_step_by_their_length() {
        let p = prefixes(net("2a00::/48"), 2).unwrap();
        assert_eq!(p, vec![net("2a00::/48"), net("2a00:0:1::/48")]);
    }

    #[test]
    fn running_off_the_address_space_is_an_error() {
        assert!(prefixes(net("255.255.255.0/24"), 2).is_err());
        assert!(prefixes(net("255.255.255.0/24"), 1).is_ok());
    }

    fn count_nlri(buf: &[u8]) -> (usize, usize) {
        let (mut rest, mut updates, mut octets) = (buf, 0, 0);
        while !rest.is_empty() {
            let len = frame_len(rest).unwrap().unwrap();
            let (frame, after) = rest.split_at(len);
            assert!(matches!(decode_message(frame).unwrap(), Message::Update(_)));
            updates += 1;
            octets += len;
            rest = after;
        }
        (updates, octets)
    }

    #[test]
    fn ipv4_buffer_is_whole_updates_packed_full() {
        let set = RouteSet {
            first: net("16.0.0.0/24"),
            count: 10_000,
            next_hop: "10.99.0.2".parse().unwrap(),
            asn: 65002,
            attr_sets: 1,
        };
        let (buf, n) = encode(&set).unwrap();
        let (updates, octets) = count_nlri(&buf);
        assert_eq!((updates, octets), (n, buf.len()));
        // Each /24 takes 4 octets; a 4096-octet UPDATE holds about a thousand of them.
        assert!(n <= 11, "{n} UPDATEs for 10000 /24s");
    }

    #[test]
    fn ipv6_buffer_uses_mp_reach() {
        let set = RouteSet {
            first: net("2a00::/48"),
            count: 1000,
            next_hop: "fd99::2".parse().unwrap(),
            asn: 65002,
            attr_sets: 1,
        };
        let (buf, n) = encode(&set).unwrap();
        assert_eq!(count_nlri(&buf).0, n);
        // A /48 takes 7 octets: about 580 per UPDATE.
        assert!(n <= 2, "{n} UPDATEs for 1000 /48s");
    }

    #[test]
    fn the_full_table_mix_has_the_asked_spread() {
        let base = PathAttributes::default();
        let sets: Vec<PathAttributes> = (0..3000).map(|i| mixed(&base, 65002, i)).collect();
        assert!(sets.iter().all(|a| a.as_path.selection_length() >= 1
            && a.as_path.selection_length() <= 10
            && a.as_path.neighbor_asn() == Some(65002)));
        assert!(sets.iter().all(|a| a.communities.len() <= 6));
        let with_med = sets.iter().filter(|a| a.med.is_some()).count();
        assert!((800..1200).contains(&with_med), "{with_med} of 3000 with a MED");
        let distinct: std::collections::HashSet<_> = sets.iter().collect();
        assert_eq!(distinct.len(), 3000);
        // The same index gives the same set in every run.
        assert_eq!(mixed(&base, 65002, 7), mixed(&base, 65002, 7));
        let set = RouteSet {
            first: net("16.0.0.0/24"),
            count: 10_000,
            next_hop: "10.99.0.2".parse().unwrap(),
            asn: 65002,
            attr_sets: 3000,
        };
        let (buf, n) = encode(&set).unwrap();
        assert_eq!(count_nlri(&buf).0, n);
        assert_eq!(n, 3000, "one UPDATE per set: its run fits");
    }

    #[test]
    fn mixed_families_are_refused() {
        let set = RouteSet {
            first: net("2a00::/48"),
            count: 1,
            next_hop: "10.0.0.1".parse().unwrap(),
            asn: 1,
            attr_sets: 1,
        };
        assert!(matches!(encode(&set), Err(RouteError::NextHopFamily(..))));
    }
}
