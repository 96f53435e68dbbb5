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
    use crate::bgp::wire::attributes::{AsPath, LargeCommunity, Origin, RareAttributes};
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
            communities: vec![0xfde9_0001, 0xfde9_0002].into(),
            rare: RareAttributes {
                large_communities: vec![LargeCommunity {
                    global_admin: 65001,
                    local_data1: 7,
                    local_data2: 8,
                }]
                .into(),
                ..Default::default()
            }
            .into(),
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
        let grown = (0..spare / 4).map(|i| u32::try_from(i).unwrap());
        attrs.communities = attrs.communities.iter().copied().chain(grown).collect();
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

/// Cross-check against an independent decoder: every UPDATE the packer writes, and the hex
/// vectors of the decoder tests, are parsed by `netgauze-bgp-pkt` and compared.
#[cfg(test)]
mod netgauze_oracle {
    use std::net::Ipv4Addr;

    use netgauze_bgp_pkt::path_attribute::{
        self as ng, MpReach, MpUnreach, PathAttributeValue as V,
    };
    use netgauze_bgp_pkt::update::BgpUpdateMessage;
    use netgauze_bgp_pkt::wire::deserializer::BgpParsingContext;
    use netgauze_bgp_pkt::BgpMessage;
    use netgauze_parse_utils::reader::SliceReader;
    use netgauze_parse_utils::traits::ParseFromWithOneInput;

    use super::tests::{nh4, nh6, sample_attrs, v4_slash24s, v6_mixed};
    use super::*;
    use crate::bgp::wire::attr_codec::AS_TRANS;
    use crate::bgp::wire::attributes::{
        flags, type_code, Aggregator, AsPath, AsSegment, LargeCommunity, Origin, RareAttributes,
        RawAttribute, SegmentKind,
    };
    use crate::bgp::wire::update::tests::{hex, IPV4_VECTOR, IPV6_VECTOR, MP_UNREACH_VECTOR};
    use crate::bgp::wire::update::{decode_update, UpdateContext};

    /// What netgauze saw in UPDATEs, in this crate's types.
    #[derive(Debug, Default, PartialEq)]
    struct Seen {
        announced: Vec<IpNet>,
        withdrawn: Vec<IpNet>,
        mp_announced: Vec<IpNet>,
        mp_next_hop: Option<NextHop>,
        attrs: PathAttributes,
        as4_path: Option<AsPath>,
        as4_aggregator: Option<Aggregator>,
        /// netgauze's AFI/SAFI name, through Debug (its type lives in a crate not depended on).
        end_of_rib: Option<String>,
    }

    fn parse(msg: &[u8], asn4: bool) -> BgpUpdateMessage {
        let mut ctx = BgpParsingContext::asn2_default();
        ctx.set_asn4(asn4);
        let mut reader = SliceReader::new(msg);
        match BgpMessage::parse(&mut reader, &mut ctx) {
            Ok(BgpMessage::Update(u)) => u,
            other => panic!("netgauze: {other:?}"),
        }
    }

    fn segment_kind(t: ng::AsPathSegmentType) -> SegmentKind {
        match t {
            ng::AsPathSegmentType::AsSet => SegmentKind::Set,
            ng::AsPathSegmentType::AsSequence => SegmentKind::Sequence,
        }
    }

    fn as4_segments(segs: &[ng::As4PathSegment]) -> AsPath {
        AsPath::from_segments(segs.iter().map(|s| AsSegment {
            kind: segment_kind(s.segment_type()),
            asns: s.as_numbers().to_vec(),
        }))
    }

    /// Adds what netgauze decoded from one UPDATE to `seen`.
    fn absorb(seen: &mut Seen, u: &BgpUpdateMessage) {
        seen.announced.extend(u.nlri().iter().map(|n| IpNet::V4(n.network().address())));
        seen.withdrawn.extend(u.withdraw_routes().iter().map(|n| IpNet::V4(n.network().address())));
        seen.end_of_rib = u.end_of_rib().map(|t| format!("{t:?}"));
        // Every message of a batch carries the whole set: keep the last one's.
        seen.attrs = PathAttributes::default();
        let a = &mut seen.attrs;
        for attr in u.path_attributes() {
            match attr.value() {
                V::Origin(o) => {
                    a.origin = match o {
                        ng::Origin::IGP => Origin::Igp,
                        ng::Origin::EGP => Origin::Egp,
                        ng::Origin::Incomplete => Origin::Incomplete,
                    }
                }
                V::AsPath(ng::AsPath::As4PathSegments(segs)) => a.as_path = as4_segments(segs),
                V::AsPath(ng::AsPath::As2PathSegments(segs)) => {
                    a.as_path = AsPath::from_segments(segs.iter().map(|s| AsSegment {
                        kind: segment_kind(s.segment_type()),
                        asns: s.as_numbers().iter().map(|&n| u32::from(n)).collect(),
                    }))
                }
                V::As4Path(p) => seen.as4_path = Some(as4_segments(p.segments())),
                V::NextHop(n) => a.next_hop = NextHop::V4(n.next_hop()),
                V::MultiExitDiscriminator(m) => a.med = Some(m.metric()),
                V::LocalPreference(l) => a.local_pref = Some(l.metric()),
                V::AtomicAggregate(_) => a.rare_mut().atomic_aggregate = true,
                V::Aggregator(ng::Aggregator::As2Aggregator(g)) => {
                    a.rare_mut().aggregator =
                        Some(Aggregator { asn: u32::from(*g.asn()), address: g.origin() })
                }
                V::Aggregator(ng::Aggregator::As4Aggregator(g)) => {
                    a.rare_mut().aggregator =
                        Some(Aggregator { asn: *g.asn(), address: g.origin() })
                }
                V::Communities(c) => {
                    a.communities = c.communities().iter().map(|c| c.value()).collect()
                }
                V::LargeCommunities(c) => {
                    a.rare_mut().large_communities = c
                        .communities()
                        .iter()
                        .map(|c| LargeCommunity {
                            global_admin: c.global_admin(),
                            local_data1: c.local_data1(),
                            local_data2: c.local_data2(),
                        })
                        .collect()
                }
                V::Originator(o) => a.rare_mut().originator_id = Some(o.id()),
                V::ClusterList(c) => {
                    a.rare_mut().cluster_list = c.cluster_list().iter().map(|c| c.id()).collect()
                }
                V::MpReach(MpReach::Ipv6Unicast { next_hop_global, next_hop_local, nlri }) => {
                    seen.mp_next_hop =
                        Some(NextHop::V6 { global: *next_hop_global, link_local: *next_hop_local });
                    seen.mp_announced.extend(nlri.iter().map(|n| IpNet::V6(n.network().address())));
                }
                V::MpUnreach(MpUnreach::Ipv6Unicast { nlri }) => {
                    seen.withdrawn.extend(nlri.iter().map(|n| IpNet::V6(n.network().address())));
                }
                V::UnknownAttribute(raw) if raw.code() == type_code::AS4_AGGREGATOR => {
                    let v = raw.value();
                    seen.as4_aggregator = Some(Aggregator {
                        asn: u32::from_be_bytes(v[..4].try_into().unwrap()),
                        address: Ipv4Addr::from(u32::from_be_bytes(v[4..8].try_into().unwrap())),
                    });
                }
                V::UnknownAttribute(raw) => {
                    let mut f = 0;
                    for (set, bit) in [
                        (attr.optional(), flags::OPTIONAL),
                        (attr.transitive(), flags::TRANSITIVE),
                        (attr.partial(), flags::PARTIAL),
                    ] {
                        if set {
                            f |= bit;
                        }
                    }
                    let raw = RawAttribute {
                        flags: f,
                        type_code: raw.code(),
                        value: raw.value().to_vec(),
                    };
                    let rare = a.rare_mut();
                    rare.unknown = rare.unknown.iter().cloned().chain([raw]).collect();
                }
                other => panic!("unexpected attribute {other:?}"),
            }
        }
    }

    fn seen_in(msgs: &[Vec<u8>], asn4: bool) -> Seen {
        let mut seen = Seen::default();
        for m in msgs {
            absorb(&mut seen, &parse(m, asn4));
        }
        seen
    }

    fn attribute_sets() -> Vec<PathAttributes> {
        let big = 4_200_000_000u32;
        let base = sample_attrs(nh4());
        vec![
            base.clone(),
            PathAttributes {
                origin: Origin::Incomplete,
                as_path: AsPath::from_segments([
                    AsSegment { kind: SegmentKind::Sequence, asns: vec![65001, big, 65002] },
                    AsSegment { kind: SegmentKind::Set, asns: vec![big + 1, 64512] },
                ]),
                local_pref: Some(150),
                rare: RareAttributes {
                    atomic_aggregate: true,
                    aggregator: Some(Aggregator {
                        asn: big + 9,
                        address: Ipv4Addr::new(10, 1, 1, 1),
                    }),
                    originator_id: Some(Ipv4Addr::new(10, 255, 0, 1)),
                    cluster_list: vec![Ipv4Addr::new(10, 255, 0, 2)].into(),
                    unknown: vec![RawAttribute {
                        flags: 0xe0,
                        type_code: 99,
                        value: vec![1, 2, 3],
                    }]
                    .into(),
                    large_communities: base.large_communities().into(),
                }
                .into(),
                communities: (0..200).collect(),
                ..base.clone()
            },
            PathAttributes {
                as_path: AsPath::default(),
                med: None,
                communities: vec![].into(),
                rare: RareAttributes {
                    aggregator: Some(Aggregator {
                        asn: 64999,
                        address: Ipv4Addr::new(10, 1, 1, 2),
                    }),
                    ..Default::default()
                }
                .into(),
                ..base
            },
        ]
    }

    /// What a 2-octet peer must receive: AS_TRANS in AS_PATH and AGGREGATOR, and the 4-octet
    /// values in AS4_PATH / AS4_AGGREGATOR when there are any (RFC 6793 §4.2.2).
    fn two_octet_view(
        attrs: &PathAttributes,
    ) -> (PathAttributes, Option<AsPath>, Option<Aggregator>) {
        let narrow = |asn: u32| if asn > 0xffff { AS_TRANS } else { asn };
        let mut a = attrs.clone();
        let mut segments = a.as_path.to_segments();
        for s in &mut segments {
            s.asns.iter_mut().for_each(|n| *n = narrow(*n));
        }
        a.as_path = AsPath::from_segments(segments);
        let as4_path = (a.as_path != attrs.as_path).then(|| attrs.as_path.clone());
        let as4_agg = attrs.aggregator().filter(|g| g.asn > 0xffff);
        a.rare_mut().aggregator =
            attrs.aggregator().map(|g| Aggregator { asn: narrow(g.asn), ..g });
        (a, as4_path, as4_agg)
    }

    #[test]
    fn packed_announcements_read_the_same_in_netgauze() {
        for attrs in attribute_sets() {
            for four_octet_as in [true, false] {
                let enc = EncodeContext { four_octet_as };
                let (mut expect, as4_path, as4_agg) = if four_octet_as {
                    (attrs.clone(), None, None)
                } else {
                    two_octet_view(&attrs)
                };
                // IPv4: NLRI field with NEXT_HOP.
                let v4 = v4_slash24s(3000);
                let mut msgs = Vec::new();
                pack_announcements(&attrs, Family::IPV4_UNICAST, &v4, &enc, &mut msgs).unwrap();
                assert!(msgs.len() > 1);
                let seen = seen_in(&msgs, four_octet_as);
                assert_eq!(seen.announced, v4);
                assert_eq!(seen.attrs, expect, "IPv4, 4-octet {four_octet_as}");
                assert_eq!(seen.as4_path, as4_path);
                assert_eq!(seen.as4_aggregator, as4_agg);
                // IPv6: MP_REACH_NLRI, no NEXT_HOP attribute.
                let v6 = v6_mixed(3000);
                let with_nh6 = PathAttributes { next_hop: nh6(), ..attrs.clone() };
                let mut msgs = Vec::new();
                pack_announcements(&with_nh6, Family::IPV6_UNICAST, &v6, &enc, &mut msgs).unwrap();
                assert!(msgs.len() > 1);
                let seen = seen_in(&msgs, four_octet_as);
                assert_eq!(seen.mp_announced, v6);
                assert_eq!(seen.mp_next_hop, Some(nh6()));
                expect.next_hop = NextHop::Unspecified;
                assert_eq!(seen.attrs, expect, "IPv6, 4-octet {four_octet_as}");
            }
        }
    }

    #[test]
    fn packed_withdrawals_and_end_of_rib_read_the_same_in_netgauze() {
        for (family, prefixes) in
            [(Family::IPV4_UNICAST, v4_slash24s(3000)), (Family::IPV6_UNICAST, v6_mixed(3000))]
        {
            let mut msgs = Vec::new();
            pack_withdrawals(family, &prefixes, &mut msgs).unwrap();
            let seen = seen_in(&msgs, true);
            assert_eq!(seen.withdrawn, prefixes);
            assert!(seen.announced.is_empty() && seen.mp_announced.is_empty());
        }
        assert_eq!(
            seen_in(&[end_of_rib(Family::IPV4_UNICAST)], true).end_of_rib.as_deref(),
            Some("Ipv4Unicast")
        );
        assert_eq!(
            seen_in(&[end_of_rib(Family::IPV6_UNICAST)], true).end_of_rib.as_deref(),
            Some("Ipv6Unicast")
        );
    }

    #[test]
    fn hex_vectors_read_the_same_in_both_decoders() {
        let ctx = UpdateContext {
            four_octet_as: true,
            ebgp: false,
            families: vec![Family::IPV4_UNICAST, Family::IPV6_UNICAST],
        };
        for vector in [IPV4_VECTOR, IPV6_VECTOR, MP_UNREACH_VECTOR] {
            let body = hex(vector);
            let mut msg = vec![0xff; 16];
            msg.extend_from_slice(&u16::try_from(body.len() + HEADER_LEN).unwrap().to_be_bytes());
            msg.push(MessageType::Update as u8);
            msg.extend_from_slice(&body);
            let theirs = seen_in(&[msg], true);
            let ours = decode_update(&body, &ctx).unwrap();
            assert_eq!(ours.announced, theirs.announced);
            assert_eq!(ours.mp_announced, theirs.mp_announced);
            assert_eq!(ours.withdrawn, theirs.withdrawn);
            assert_eq!(ours.mp_next_hop, theirs.mp_next_hop);
            if let Some(a) = ours.attributes {
                assert_eq!(a, theirs.attrs);
            }
        }
    }
}
