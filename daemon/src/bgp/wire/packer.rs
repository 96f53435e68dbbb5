//! UPDATE packing: one attribute set and many prefixes of one family become as few complete
//! UPDATE messages as fit in 4096 octets each (RFC 4271 §4.1, §4.3). IPv4 prefixes travel in
//! the NLRI and Withdrawn Routes fields, IPv6 ones in MP_REACH_NLRI / MP_UNREACH_NLRI
//! (RFC 4760 §3-4). Linear in the number of prefixes: the attributes are encoded once and
//! each prefix's size is known before it is written.

use ipnet::IpNet;

use super::attr_codec::{
    encode_attributes, encode_mp_reach, encode_mp_unreach, mp_next_hop_len, EncodeContext,
};
use super::attributes::{Afi, Family, NextHop, PathAttributes};
use super::header::{begin_message, finish_message, MessageType, HEADER_LEN, MAX_MESSAGE_LEN};
use super::nlri::{afi_of, encode_prefix, prefix_wire_len};

/// Octets before the path attributes: header, Withdrawn Routes Length, Total Path Attribute
/// Length.
const FIXED_LEN: usize = HEADER_LEN + 2 + 2;
/// An attribute header with the Extended Length bit: the packer budgets for the larger form.
const ATTR_HEADER_MAX: usize = 4;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PackError {
    #[error("prefix {0} is not of the family being packed")]
    WrongFamily(IpNet),
    #[error("next hop {0:?} cannot be sent with {1:?} routes")]
    NextHopFamily(NextHop, Family),
    #[error("the path attributes take {0} octets, leaving no room for a prefix in one UPDATE")]
    AttributesTooLarge(usize),
}

/// Largest wire size of one prefix of the family.
fn max_prefix_wire_len(afi: Afi) -> usize {
    match afi {
        Afi::Ipv4 => 5,
        Afi::Ipv6 => 17,
    }
}

fn check_family(family: Family, prefixes: &[IpNet]) -> Result<(), PackError> {
    match prefixes.iter().find(|p| afi_of(p) != family.afi) {
        Some(p) => Err(PackError::WrongFamily(*p)),
        None => Ok(()),
    }
}

/// Splits `prefixes` into runs whose wire size fits `budget` and hands each to `emit`.
/// The caller guarantees `budget` holds the largest prefix, so every run is non-empty.
fn for_each_run(prefixes: &[IpNet], budget: usize, mut emit: impl FnMut(&[IpNet])) {
    let mut rest = prefixes;
    while !rest.is_empty() {
        let mut used = 0usize;
        let count = rest
            .iter()
            .take_while(|p| {
                used += prefix_wire_len(p);
                used <= budget
            })
            .count()
            .max(1);
        let Some((run, after)) = rest.split_at_checked(count) else { break };
        emit(run);
        rest = after;
    }
}

fn write_u16_at(msg: &mut [u8], at: usize, value: usize) {
    if let Some(field) = msg.get_mut(at..at + 2) {
        field.copy_from_slice(&u16::try_from(value).unwrap_or(u16::MAX).to_be_bytes());
    }
}

/// Appends to `out` the UPDATEs that announce `prefixes` (all of `family`) with `attrs`.
/// The next hop is `attrs.next_hop`: V4 for IPv4, V6 for IPv6.
pub fn pack_announcements(
    attrs: &PathAttributes,
    family: Family,
    prefixes: &[IpNet],
    ctx: &EncodeContext,
    out: &mut Vec<Vec<u8>>,
) -> Result<(), PackError> {
    check_family(family, prefixes)?;
    match (family.afi, attrs.next_hop) {
        (Afi::Ipv4, NextHop::V4(_)) => pack_ipv4(attrs, prefixes, ctx, out),
        (Afi::Ipv6, NextHop::V6 { .. }) => pack_mp(attrs, family, prefixes, ctx, out),
        (_, nh) => Err(PackError::NextHopFamily(nh, family)),
    }
}

/// IPv4 unicast: attributes with NEXT_HOP, then the NLRI field (RFC 4271 §4.3).
fn pack_ipv4(
    attrs: &PathAttributes,
    prefixes: &[IpNet],
    ctx: &EncodeContext,
    out: &mut Vec<Vec<u8>>,
) -> Result<(), PackError> {
    let mut attr_block = Vec::new();
    encode_attributes(attrs, ctx, true, &mut attr_block);
    let budget = MAX_MESSAGE_LEN.saturating_sub(FIXED_LEN + attr_block.len());
    if budget < max_prefix_wire_len(Afi::Ipv4) {
        return Err(PackError::AttributesTooLarge(attr_block.len()));
    }
    for_each_run(prefixes, budget, |run| {
        let mut msg = Vec::with_capacity(MAX_MESSAGE_LEN);
        let start = begin_message(&mut msg, MessageType::Update);
        msg.extend_from_slice(&[0, 0]);
        msg.extend_from_slice(&u16::try_from(attr_block.len()).unwrap_or(u16::MAX).to_be_bytes());
        msg.extend_from_slice(&attr_block);
        run.iter().for_each(|p| encode_prefix(p, &mut msg));
        finish_message(&mut msg, start);
        out.push(msg);
    });
    Ok(())
}

/// Other families: MP_REACH_NLRI first (RFC 7606 §5.1 asks senders to put it there), then the
/// other attributes; no NEXT_HOP attribute (RFC 4760 §3).
fn pack_mp(
    attrs: &PathAttributes,
    family: Family,
    prefixes: &[IpNet],
    ctx: &EncodeContext,
    out: &mut Vec<Vec<u8>>,
) -> Result<(), PackError> {
    let nh_len =
        mp_next_hop_len(&attrs.next_hop).ok_or(PackError::NextHopFamily(attrs.next_hop, family))?;
    let mut attr_block = Vec::new();
    encode_attributes(attrs, ctx, false, &mut attr_block);
    // AFI, SAFI, next hop length, next hop, Reserved.
    let mp_fixed = ATTR_HEADER_MAX + 3 + 1 + nh_len + 1;
    let budget = MAX_MESSAGE_LEN.saturating_sub(FIXED_LEN + mp_fixed + attr_block.len());
    if budget < max_prefix_wire_len(family.afi) {
        return Err(PackError::AttributesTooLarge(attr_block.len()));
    }
    for_each_run(prefixes, budget, |run| {
        let mut msg = Vec::with_capacity(MAX_MESSAGE_LEN);
        let start = begin_message(&mut msg, MessageType::Update);
        msg.extend_from_slice(&[0, 0, 0, 0]);
        encode_mp_reach(family, &attrs.next_hop, run, &mut msg);
        msg.extend_from_slice(&attr_block);
        let attr_len = msg.len() - start - FIXED_LEN;
        write_u16_at(&mut msg, start + HEADER_LEN + 2, attr_len);
        finish_message(&mut msg, start);
        out.push(msg);
    });
    Ok(())
}

/// Appends to `out` the UPDATEs that withdraw `prefixes` (all of `family`).
pub fn pack_withdrawals(
    family: Family,
    prefixes: &[IpNet],
    out: &mut Vec<Vec<u8>>,
) -> Result<(), PackError> {
    check_family(family, prefixes)?;
    match family.afi {
        // RFC 4271 §4.3: the Withdrawn Routes field, no attributes.
        Afi::Ipv4 => for_each_run(prefixes, MAX_MESSAGE_LEN - FIXED_LEN, |run| {
            let mut msg = Vec::with_capacity(MAX_MESSAGE_LEN);
            let start = begin_message(&mut msg, MessageType::Update);
            msg.extend_from_slice(&[0, 0]);
            run.iter().for_each(|p| encode_prefix(p, &mut msg));
            let withdrawn_len = msg.len() - start - HEADER_LEN - 2;
            write_u16_at(&mut msg, start + HEADER_LEN, withdrawn_len);
            msg.extend_from_slice(&[0, 0]);
            finish_message(&mut msg, start);
            out.push(msg);
        }),
        // RFC 4760 §4: MP_UNREACH_NLRI alone.
        Afi::Ipv6 => {
            for_each_run(prefixes, MAX_MESSAGE_LEN - FIXED_LEN - ATTR_HEADER_MAX - 3, |run| {
                let mut msg = Vec::with_capacity(MAX_MESSAGE_LEN);
                let start = begin_message(&mut msg, MessageType::Update);
                msg.extend_from_slice(&[0, 0, 0, 0]);
                encode_mp_unreach(family, run, &mut msg);
                let attr_len = msg.len() - start - FIXED_LEN;
                write_u16_at(&mut msg, start + HEADER_LEN + 2, attr_len);
                finish_message(&mut msg, start);
                out.push(msg);
            })
        }
    }
    Ok(())
}

/// The End-of-RIB marker for `family` (RFC 4724 §2): an empty UPDATE for IPv4 unicast, an
/// UPDATE with only an empty MP_UNREACH_NLRI otherwise.
pub fn end_of_rib(family: Family) -> Vec<u8> {
    let mut msg = Vec::with_capacity(HEADER_LEN + 10);
    let start = begin_message(&mut msg, MessageType::Update);
    msg.extend_from_slice(&[0, 0, 0, 0]);
    if family != Family::IPV4_UNICAST {
        encode_mp_unreach(family, &[], &mut msg);
        let attr_len = msg.len() - start - FIXED_LEN;
        write_u16_at(&mut msg, start + HEADER_LEN + 2, attr_len);
    }
    finish_message(&mut msg, start);
    msg
}

#[cfg(test)]
mod tests {
    use std::net::{Ipv4Addr, Ipv6Addr};

    use ipnet::{Ipv4Net, Ipv6Net};

    use super::*;
    use crate::bgp::wire::attributes::{AsPath, LargeCommunity, Origin};
    use crate::bgp::wire::update::{decode_update, DecodedUpdate, UpdateContext};

    pub(crate) fn v4_slash24s(n: usize) -> Vec<IpNet> {
        (0..n)
            .map(|i| {
                let i = u32::try_from(i).unwrap();
                IpNet::V4(Ipv4Net::new(Ipv4Addr::from(0x0a00_0000 + (i << 8)), 24).unwrap())
            })
            .collect()
    }

    pub(crate) fn v6_mixed(n: usize) -> Vec<IpNet> {
        (0..n)
            .map(|i| {
                let i = u128::try_from(i).unwrap();
                let len = [48u8, 56, 64, 128][usize::try_from(i % 4).unwrap()];
                let addr = (0x2001_0db8u128 << 96) | (i << 64) | if len == 128 { 1 } else { 0 };
                IpNet::V6(Ipv6Net::new(Ipv6Addr::from(addr), len).unwrap().trunc())
            })
            .collect()
    }

    pub(crate) fn sample_attrs(next_hop: NextHop) -> PathAttributes {
        PathAttributes {
            origin: Origin::Igp,
            as_path: AsPath::sequence(vec![65001, 4_200_000_000]),
            next_hop,
            med: Some(10),
            communities: vec![0xfde9_0001, 0xfde9_0002],
            large_communities: vec![LargeCommunity {
                global_admin: 65001,
                local_data1: 7,
                local_data2: 8,
            }],
            ..Default::default()
        }
    }

    pub(crate) fn nh4() -> NextHop {
        NextHop::V4(Ipv4Addr::new(192, 0, 2, 1))
    }

    pub(crate) fn nh6() -> NextHop {
        NextHop::V6 {
            global: "2001:db8::1".parse().unwrap(),
            link_local: Some("fe80::1".parse().unwrap()),
        }
    }

    fn ctx() -> UpdateContext {
        UpdateContext {
            four_octet_as: true,
            ebgp: true,
            families: vec![Family::IPV4_UNICAST, Family::IPV6_UNICAST],
        }
    }

    /// Checks framing of every message and returns their decoded bodies.
    fn decode_all(msgs: &[Vec<u8>]) -> Vec<DecodedUpdate> {
        msgs.iter()
            .map(|m| {
                assert!(m.len() <= MAX_MESSAGE_LEN, "{} octets", m.len());
                assert_eq!(&m[..16], &[0xff; 16]);
                assert_eq!(usize::from(u16::from_be_bytes([m[16], m[17]])), m.len());
                assert_eq!(m[18], MessageType::Update as u8);
                decode_update(&m[HEADER_LEN..], &ctx()).unwrap()
            })
            .collect()
    }

    #[test]
    fn ten_thousand_ipv4_slash24s() {
        let prefixes = v4_slash24s(10_000);
        let attrs = sample_attrs(nh4());
        let mut msgs = Vec::new();
        pack_announcements(
            &attrs,
            Family::IPV4_UNICAST,
            &prefixes,
            &EncodeContext { four_octet_as: true },
            &mut msgs,
        )
        .unwrap();
        let decoded = decode_all(&msgs);
        let mut got = Vec::new();
        for d in &decoded {
            assert_eq!(d.treat_as_withdraw, None);
            assert_eq!(d.attributes.as_ref(), Some(&attrs));
            got.extend_from_slice(&d.announced);
        }
        assert_eq!(got, prefixes);
        // Every message but the last is full: the next /24 (4 octets) would not have fit.
        for m in &msgs[..msgs.len() - 1] {
            assert!(m.len() + 4 > MAX_MESSAGE_LEN, "{} octets", m.len());
        }
        assert!(msgs.len() <= 10_000 * 4 / (MAX_MESSAGE_LEN - 100) + 1);
    }

    #[test]
    fn ten_thousand_ipv6_prefixes() {
        let prefixes = v6_mixed(10_000);
        let attrs = sample_attrs(nh6());
        for four_octet_as in [true, false] {
            let mut msgs = Vec::new();
            pack_announcements(
                &attrs,
                Family::IPV6_UNICAST,
                &prefixes,
                &EncodeContext { four_octet_as },
                &mut msgs,
            )
            .unwrap();
            let dec = UpdateContext { four_octet_as, ..ctx() };
            let mut got = Vec::new();
            for m in &msgs {
                assert!(m.len() <= MAX_MESSAGE_LEN);
                let d = decode_update(&m[HEADER_LEN..], &dec).unwrap();
                assert_eq!(d.mp_next_hop, Some(nh6()));
                let mut a = d.attributes.unwrap();
                a.next_hop = nh6();
                assert_eq!(a, attrs);
                assert!(d.announced.is_empty());
                got.extend_from_slice(&d.mp_announced);
            }
            assert_eq!(got, prefixes);
        }
    }

    #[test]
    fn withdrawals_of_both_families() {
        for (family, prefixes) in
            [(Family::IPV4_UNICAST, v4_slash24s(10_000)), (Family::IPV6_UNICAST, v6_mixed(10_000))]
        {
            let mut msgs = Vec::new();
            pack_withdrawals(family, &prefixes, &mut msgs).unwrap();
            let mut got = Vec::new();
            for d in decode_all(&msgs) {
                assert!(d.attributes.is_none() && d.announced.is_empty() && d.end_of_rib.is_none());
                got.extend_from_slice(&d.withdrawn);
            }
            assert_eq!(got, prefixes);
        }
        let mut msgs = Vec::new();
        pack_withdrawals(Family::IPV4_UNICAST, &[], &mut msgs).unwrap();
        assert!(msgs.is_empty(), "no prefixes, no message (an empty one would be End-of-RIB)");
    }

    #[test]
    fn end_of_rib_wire_form() {
        let mut v4 = vec![0xff; 16];
        v4.extend_from_slice(&[0, 23, 2, 0, 0, 0, 0]);
        assert_eq!(end_of_rib(Family::IPV4_UNICAST), v4);
        let mut v6 = vec![0xff; 16];
        v6.extend_from_slice(&[0, 29, 2, 0, 0, 0, 6, 0x80, 15, 3, 0, 2, 1]);
        assert_eq!(end_of_rib(Family::IPV6_UNICAST), v6);
    }

    #[test]
    fn rejects_what_cannot_be_sent() {
        let ctx = EncodeContext { four_octet_as: true };
        let mut out = Vec::new();
        let v6 = v6_mixed(1);
        assert_eq!(
            pack_announcements(&sample_attrs(nh4()), Family::IPV4_UNICAST, &v6, &ctx, &mut out),
            Err(PackError::WrongFamily(v6[0]))
        );
        assert_eq!(
            pack_withdrawals(Family::IPV4_UNICAST, &v6, &mut out),
            Err(PackError::WrongFamily(v6[0]))
        );
        assert!(matches!(
            pack_announcements(
                &sample_attrs(nh6()),
                Family::IPV4_UNICAST,
                &v4_slash24s(1),
                &ctx,
                &mut out
            ),
            Err(PackError::NextHopFamily(..))
        ));
        assert!(matches!(
            pack_announcements(
                &sample_attrs(NextHop::Unspecified),
                Family::IPV6_UNICAST,
                &v6,
                &ctx,
                &mut out
            ),
            Err(PackError::NextHopFamily(..))
        ));
        let mut huge = sample_attrs(nh4());
        huge.communities = (0..1100).collect();
        assert!(matches!(
            pack_announcements(&huge, Family::IPV4_UNICAST, &v4_slash24s(1), &ctx, &mut out),
            Err(PackError::AttributesTooLarge(_))
        ));
        assert!(out.is_empty());
    }

    #[test]
    fn attributes_near_the_limit_still_carry_one_prefix() {
        // Attributes leaving room for exactly one /32: each message carries one prefix.
        let mut attrs = sample_attrs(nh4());
        let mut block = Vec::new();
        encode_attributes(&attrs, &EncodeContext { four_octet_as: true }, true, &mut block);
        // The grown COMMUNITIES attribute gains an Extended Length octet.
        let spare = MAX_MESSAGE_LEN - FIXED_LEN - block.len() - 1 - 5;
        attrs.communities.extend((0..spare / 4).map(|i| u32::try_from(i).unwrap()));
        let prefixes: Vec<IpNet> =
            (0..3u32).map(|i| IpNet::V4(Ipv4Net::new(Ipv4Addr::from(i), 32).unwrap())).collect();
        let mut msgs = Vec::new();
        pack_announcements(
            &attrs,
            Family::IPV4_UNICAST,
            &prefixes,
            &EncodeContext { four_octet_as: true },
            &mut msgs,
        )
        .unwrap();
        assert!(msgs.iter().all(|m| m.len() <= MAX_MESSAGE_LEN));
        assert_eq!(msgs.len(), 3);
        let got: Vec<IpNet> = decode_all(&msgs).into_iter().flat_map(|d| d.announced).collect();
        assert_eq!(got, prefixes);
    }

    /// Linear packing: 100,000 prefixes go through in one pass (run in release for a feel of
    /// the speed; no timing assertion).
    #[test]
    fn packs_a_hundred_thousand_prefixes() {
        let prefixes = v4_slash24s(100_000);
        let mut msgs = Vec::new();
        pack_announcements(
            &sample_attrs(nh4()),
            Family::IPV4_UNICAST,
            &prefixes,
            &EncodeContext { four_octet_as: true },
            &mut msgs,
        )
        .unwrap();
        let total: usize = decode_all(&msgs).iter().map(|d| d.announced.len()).sum();
        assert_eq!(total, 100_000);
    }
}
