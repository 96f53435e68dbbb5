//! UPDATE message body decoding (RFC 4271 §4.3) with the error handling of RFC 7606.
//!
//! The framing layer hands over the body: the octets after the 19-octet header. The result
//! says what to announce, what to withdraw, and which RFC 7606 approach applied; only errors
//! that RFC 7606 still answers with a session reset come back as [`UpdateError`].

use ipnet::IpNet;

use super::attr_codec::decode_attributes;
use super::attributes::{type_code, Afi, Family, NextHop, PathAttributes};
use super::nlri::decode_prefixes;
use super::rfc7606::{AttrProblem, UpdateError, UpdateErrorSubcode};

/// What the decoder needs to know about the session the UPDATE arrived on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UpdateContext {
    /// Both sides advertised the 4-octet AS capability (RFC 6793 §3): ASNs in AS_PATH and
    /// AGGREGATOR are 4 octets wide, and AS4_PATH / AS4_AGGREGATOR are ignored.
    pub four_octet_as: bool,
    /// The peer is external: LOCAL_PREF is discarded (RFC 7606 §7.5) and confederation
    /// segments in AS_PATH are treated as withdrawn.
    pub ebgp: bool,
    /// AFI/SAFIs negotiated with the Multiprotocol capability. MP_REACH_NLRI and
    /// MP_UNREACH_NLRI of another family are ignored (RFC 4760 §6). The IPv4 NLRI and Withdrawn
    /// Routes fields are always accepted (RFC 4271).
    pub families: Vec<Family>,
}

/// One decoded UPDATE.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DecodedUpdate {
    /// IPv4 Withdrawn Routes and MP_UNREACH_NLRI prefixes.
    pub withdrawn: Vec<IpNet>,
    /// IPv4 NLRI; their next hop is `attributes.next_hop`.
    pub announced: Vec<IpNet>,
    /// MP_REACH_NLRI prefixes; their next hop is `mp_next_hop`.
    pub mp_announced: Vec<IpNet>,
    /// `None` when there is nothing to announce, including when `treat_as_withdraw` is set.
    pub attributes: Option<PathAttributes>,
    pub mp_next_hop: Option<NextHop>,
    /// When set, `announced` and `mp_announced` must be handled as withdrawn (RFC 7606 §2).
    pub treat_as_withdraw: Option<AttrProblem>,
    /// Attributes dropped under "attribute discard" (or ignored), for the log.
    pub discarded: Vec<AttrProblem>,
    /// RFC 4724 §2: an UPDATE with nothing in it is IPv4 unicast End-of-RIB; one whose only
    /// content is an empty MP_UNREACH_NLRI is End-of-RIB for that family.
    pub end_of_rib: Option<Family>,
}

/// Decodes an UPDATE body. See the module comment for the contract.
pub fn decode_update(body: &[u8], ctx: &UpdateContext) -> Result<DecodedUpdate, UpdateError> {
    // RFC 4271 §6.3 (kept by RFC 7606 §3 j): when the Withdrawn Routes Length or the Total
    // Path Attribute Length overruns the message the NLRI cannot be located: session reset
    // with "Malformed Attribute List".
    let malformed =
        |why: &str| UpdateError::new(UpdateErrorSubcode::MalformedAttributeList, &[], why);
    let (&withdrawn_len, rest) = body
        .split_first_chunk::<2>()
        .ok_or_else(|| malformed("body shorter than the Withdrawn Routes Length"))?;
    let (withdrawn_field, rest) = rest
        .split_at_checked(usize::from(u16::from_be_bytes(withdrawn_len)))
        .ok_or_else(|| malformed("Withdrawn Routes Length overruns the message"))?;
    let (&attr_len, rest) = rest
        .split_first_chunk::<2>()
        .ok_or_else(|| malformed("body ends before the Total Path Attribute Length"))?;
    let (attr_block, nlri_field) = rest
        .split_at_checked(usize::from(u16::from_be_bytes(attr_len)))
        .ok_or_else(|| malformed("Total Path Attribute Length overruns the message"))?;

    let mut out = DecodedUpdate::default();
    // RFC 7606 §3 i and §5.3: Withdrawn Routes and NLRI that cannot be parsed leave nothing
    // but a session reset ("Invalid Network Field", RFC 4271 §6.3).
    decode_prefixes(withdrawn_field, Afi::Ipv4, &mut out.withdrawn).map_err(|e| {
        UpdateError::new(
            UpdateErrorSubcode::InvalidNetworkField,
            &[],
            format!("Withdrawn Routes: {e}"),
        )
    })?;
    decode_prefixes(nlri_field, Afi::Ipv4, &mut out.announced).map_err(|e| {
        UpdateError::new(UpdateErrorSubcode::InvalidNetworkField, &[], format!("NLRI: {e}"))
    })?;

    if withdrawn_field.is_empty() && attr_block.is_empty() && nlri_field.is_empty() {
        out.end_of_rib = Some(Family::IPV4_UNICAST);
        return Ok(out);
    }

    let mut decoded =
        decode_attributes(attr_block, ctx, &mut out.mp_announced, &mut out.withdrawn)?;
    let has_ipv4_nlri = !out.announced.is_empty();
    let announcing = has_ipv4_nlri || !out.mp_announced.is_empty();

    if let Some((rule, detail)) = decoded.next_hop_problem.take() {
        // RFC 4760 §3: without IPv4 NLRI the NEXT_HOP is to be ignored, so its errors only
        // cost the attribute.
        if has_ipv4_nlri {
            decoded.problems.withdraw(type_code::NEXT_HOP, rule, detail);
        } else {
            decoded.problems.discard(type_code::NEXT_HOP, rule, detail);
        }
    } else if has_ipv4_nlri && !decoded.present.contains(type_code::NEXT_HOP) {
        decoded.problems.withdraw(
            type_code::NEXT_HOP,
            "RFC 7606 §3 d: mandatory NEXT_HOP missing with IPv4 NLRI",
            String::new(),
        );
    }
    if announcing {
        // RFC 7606 §3 d, RFC 4760 §7: ORIGIN and AS_PATH must come with any NLRI. (LOCAL_PREF
        // on iBGP is not enforced, as FRR and BIRD do not either.)
        for (code, rule) in [
            (type_code::ORIGIN, "RFC 7606 §3 d: mandatory ORIGIN missing"),
            (type_code::AS_PATH, "RFC 7606 §3 d: mandatory AS_PATH missing"),
        ] {
            if !decoded.present.contains(code) {
                decoded.problems.withdraw(code, rule, String::new());
            }
        }
    }

    out.discarded = decoded.problems.discarded;
    match decoded.problems.treat_as_withdraw {
        // RFC 7606 §5.2: with no NLRI to withdraw, treat-as-withdraw comes down to dropping
        // the attribute; it is reported as a discard so callers need not special-case it.
        Some(problem) if !announcing => out.discarded.push(problem),
        other => out.treat_as_withdraw = other,
    }
    out.mp_next_hop = decoded.mp_reach.map(|(_, nh)| nh);
    if announcing && out.treat_as_withdraw.is_none() {
        out.attributes = Some(decoded.attrs);
    }
    if let (Some(family), None, false, true) =
        (decoded.mp_unreach, decoded.mp_reach, announcing, out.withdrawn.is_empty())
    {
        out.end_of_rib = Some(family);
    }
    Ok(out)
}

#[cfg(test)]
pub(crate) mod tests {
    use std::net::{Ipv4Addr, Ipv6Addr};

    use super::*;
    use crate::bgp::wire::attr_codec::MAX_AS_PATH_ASNS;
    use crate::bgp::wire::attributes::{
        well_known, Aggregator, AsPath, LargeCommunity, Origin, RareAttributes, RawAttribute,
    };
    use crate::bgp::wire::header::HEADER_LEN;
    use crate::bgp::wire::packer::end_of_rib;

    pub(crate) fn hex(s: &str) -> Vec<u8> {
        let digits: Vec<u8> = s.bytes().filter(u8::is_ascii_hexdigit).collect();
        digits
            .chunks(2)
            .map(|p| u8::from_str_radix(std::str::from_utf8(p).unwrap(), 16).unwrap())
            .collect()
    }

    fn net(s: &str) -> IpNet {
        s.parse().unwrap()
    }

    fn ctx() -> UpdateContext {
        UpdateContext {
            four_octet_as: true,
            ebgp: true,
            families: vec![Family::IPV4_UNICAST, Family::IPV6_UNICAST],
        }
    }

    fn ibgp() -> UpdateContext {
        UpdateContext { ebgp: false, ..ctx() }
    }

    /// An UPDATE body from its three fields.
    fn body(withdrawn: &[u8], attrs: &[u8], nlri: &[u8]) -> Vec<u8> {
        let mut b = (withdrawn.len() as u16).to_be_bytes().to_vec();
        b.extend_from_slice(withdrawn);
        b.extend_from_slice(&(attrs.len() as u16).to_be_bytes());
        b.extend_from_slice(attrs);
        b.extend_from_slice(nlri);
        b
    }

    const ORIGIN_IGP: &str = "40 01 01 00";
    const AS_PATH_65001: &str = "40 02 06 02 01 0000fde9";
    const NEXT_HOP_10_0_0_1: &str = "40 03 04 0a000001";
    /// 192.0.2.0/24.
    const NLRI_192_0_2: &str = "18 c00002";

    fn attrs(parts: &[&str]) -> Vec<u8> {
        hex(&parts.concat())
    }

    fn decode_ok(b: &[u8], c: &UpdateContext) -> DecodedUpdate {
        decode_update(b, c).unwrap_or_else(|e| panic!("{e}"))
    }

    /// IPv4 UPDATE as FRR sends it: AS_PATH with the Extended Length bit, MED, two
    /// communities, one large community, two prefixes.
    pub(crate) const IPV4_VECTOR: &str = "0000 003e
        40010100
        5002000e 0203 0000fde9 0000fdea fa56ea00
        4003040a000001
        80040400000064
        c00808 fde90064 ffffff01
        c0200c 0000fde9 00000001 00000002
        18c00002 100a01";

    /// IPv6 UPDATE: MP_REACH_NLRI with a global and a link-local next hop and two prefixes.
    pub(crate) const IPV6_VECTOR: &str = "0000 004d
        900e0035 0002 01 20 20010db8000000000000000000000001 fe800000000000000000000000000001
            00 40 20010db800010000 30 20010db80002
        40010100
        40020602010000fde9
        80040400000000";

    pub(crate) const MP_UNREACH_VECTOR: &str = "0000 000f 800f0c 0002 01 40 20010db800010000";

    #[test]
    fn ipv4_vector_with_communities_and_large_communities() {
        let d = decode_ok(&hex(IPV4_VECTOR), &ctx());
        assert_eq!(d.announced, vec![net("192.0.2.0/24"), net("10.1.0.0/16")]);
        assert!(d.withdrawn.is_empty() && d.mp_announced.is_empty());
        assert_eq!(d.treat_as_withdraw, None);
        assert!(d.discarded.is_empty());
        assert_eq!(d.end_of_rib, None);
        let a = d.attributes.unwrap();
        assert_eq!(a.origin, Origin::Igp);
        assert_eq!(a.as_path, AsPath::sequence(vec![65001, 65002, 4_200_000_000]));
        assert_eq!(a.next_hop, NextHop::V4(Ipv4Addr::new(10, 0, 0, 1)));
        assert_eq!(a.med, Some(100));
        assert_eq!(*a.communities, [0xfde9_0064, well_known::NO_EXPORT]);
        assert_eq!(
            *a.large_communities(),
            [LargeCommunity { global_admin: 65001, local_data1: 1, local_data2: 2 }]
        );
    }

    #[test]
    fn ipv6_vector_with_global_and_link_local_next_hop() {
        let d = decode_ok(&hex(IPV6_VECTOR), &ctx());
        assert_eq!(d.mp_announced, vec![net("2001:db8:1::/64"), net("2001:db8:2::/48")]);
        assert!(d.announced.is_empty());
        assert_eq!(
            d.mp_next_hop,
            Some(NextHop::V6 {
                global: "2001:db8::1".parse().unwrap(),
                link_local: Some("fe80::1".parse().unwrap()),
            })
        );
        let a = d.attributes.unwrap();
        assert_eq!(a.next_hop, NextHop::Unspecified);
        assert_eq!(a.med, Some(0));
        assert_eq!(a.as_path, AsPath::sequence(vec![65001]));
    }

    #[test]
    fn mp_unreach_vector() {
        let d = decode_ok(&hex(MP_UNREACH_VECTOR), &ctx());
        assert_eq!(d.withdrawn, vec![net("2001:db8:1::/64")]);
        assert_eq!(d.attributes, None);
        assert_eq!(d.end_of_rib, None);
        assert_eq!(d.treat_as_withdraw, None);
    }

    #[test]
    fn end_of_rib_markers() {
        let d = decode_ok(&hex("0000 0000"), &ctx());
        assert_eq!(d.end_of_rib, Some(Family::IPV4_UNICAST));
        let d = decode_ok(&hex("0000 0006 800f03 0002 01"), &ctx());
        assert_eq!(d.end_of_rib, Some(Family::IPV6_UNICAST));
        assert!(d.withdrawn.is_empty() && d.attributes.is_none());
        for family in [Family::IPV4_UNICAST, Family::IPV6_UNICAST] {
            let msg = end_of_rib(family);
            let d = decode_ok(&msg[HEADER_LEN..], &ctx());
            assert_eq!(d.end_of_rib, Some(family));
        }
        // A withdrawal is not End-of-RIB.
        let d = decode_ok(&hex(MP_UNREACH_VECTOR), &ctx());
        assert_eq!(d.end_of_rib, None);
    }

    #[test]
    fn missing_mandatory_attributes_treat_as_withdraw() {
        let nlri = hex(NLRI_192_0_2);
        for (parts, missing) in [
            (&[AS_PATH_65001, NEXT_HOP_10_0_0_1][..], type_code::ORIGIN),
            (&[ORIGIN_IGP, NEXT_HOP_10_0_0_1][..], type_code::AS_PATH),
            (&[ORIGIN_IGP, AS_PATH_65001][..], type_code::NEXT_HOP),
        ] {
            let d = decode_ok(&body(&[], &attrs(parts), &nlri), &ctx());
            let p = d.treat_as_withdraw.unwrap();
            assert_eq!(p.type_code, missing);
            assert!(p.rule.contains("§3 d"), "{}", p.rule);
            assert_eq!(d.announced, vec![net("192.0.2.0/24")]);
            assert_eq!(d.attributes, None);
        }
        // MP_REACH_NLRI needs no NEXT_HOP, but still ORIGIN and AS_PATH (RFC 4760 §7).
        let mp = "800e1c 0002 01 10 20010db8000000000000000000000001 00 30 20010db80001";
        let d = decode_ok(&body(&[], &attrs(&[mp, ORIGIN_IGP, AS_PATH_65001]), &[]), &ctx());
        assert_eq!(d.treat_as_withdraw, None);
        assert_eq!(d.mp_announced, vec![net("2001:db8:1::/48")]);
        let d = decode_ok(&body(&[], &attrs(&[mp, ORIGIN_IGP]), &[]), &ctx());
        assert_eq!(d.treat_as_withdraw.unwrap().type_code, type_code::AS_PATH);
        // Withdrawals alone need no attributes at all.
        let d = decode_ok(&body(&nlri, &[], &[]), &ctx());
        assert_eq!(d.withdrawn, vec![net("192.0.2.0/24")]);
        assert_eq!(d.treat_as_withdraw, None);
    }

    #[test]
    fn mp_reach_with_bad_lengths_resets_the_session() {
        let base = [ORIGIN_IGP, AS_PATH_65001];
        for (mp, what, reason) in [
            // Next hop length 0x30 runs past the attribute.
            (
                "800e11 0002 01 30 20010db8000000000000000000",
                "next hop length lying",
                "next hop overruns",
            ),
            // 8-octet IPv6 next hop: neither 16 nor 32.
            (
                "800e0e 0002 01 08 20010db800000000 00 00",
                "next hop length wrong for IPv6",
                "does not fit",
            ),
            // 5-octet IPv4 next hop.
            (
                "800e0b 0001 01 05 0a00000101 00 00",
                "next hop length wrong for IPv4",
                "does not fit",
            ),
            // NLRI: /64 with only 3 octets.
            (
                "800e19 0002 01 10 20010db8000000000000000000000001 00 40 200100",
                "NLRI overrun",
                "ends inside a prefix",
            ),
            // Prefix length 129.
            (
                "800e16 0002 01 10 20010db8000000000000000000000001 00 81",
                "prefix too long",
                "prefix length 129",
            ),
            // No Reserved octet.
            (
                "800e14 0002 01 10 20010db8000000000000000000000001",
                "reserved missing",
                "Reserved octet missing",
            ),
            // Shorter than AFI/SAFI/NH length.
            ("800e02 0002", "too short", "shorter than AFI"),
            // Attribute length runs past the attribute block.
            (
                "800e40 0002 01 10 20010db8000000000000000000000001 00",
                "attribute overrun",
                "overruns the path attribute block",
            ),
        ] {
            let mut parts = vec![mp];
            parts.extend_from_slice(&base);
            let err = decode_update(&body(&[], &attrs(&parts), &[]), &ctx()).unwrap_err();
            assert_eq!(err.subcode, UpdateErrorSubcode::OptionalAttributeError, "{what}: {err}");
            assert!(err.reason.contains(reason), "{what}: {err}");
        }
        // MP_UNREACH_NLRI likewise.
        for mp in ["800f02 0002", "800f05 0002 01 40 20"] {
            let err = decode_update(&body(&[], &hex(mp), &[]), &ctx()).unwrap_err();
            assert_eq!(err.subcode, UpdateErrorSubcode::OptionalAttributeError, "{mp}");
        }
        // The NOTIFICATION data carries the offending attribute (RFC 4271 §6.3).
        let mp = hex("800e02 0002");
        let err = decode_update(&body(&[], &mp, &[]), &ctx()).unwrap_err();
        assert_eq!(err.data, mp);
    }

    #[test]
    fn mp_reach_ipv4_unicast_and_bad_next_hop_semantics() {
        let mp = "800e0d 0001 01 04 0a000002 00 18 c63364";
        let d = decode_ok(&body(&[], &attrs(&[mp, ORIGIN_IGP, AS_PATH_65001]), &[]), &ctx());
        assert_eq!(d.mp_announced, vec![net("198.51.100.0/24")]);
        assert_eq!(d.mp_next_hop, Some(NextHop::V4(Ipv4Addr::new(10, 0, 0, 2))));
        assert!(d.attributes.is_some());
        // A multicast IPv6 next hop: routes withdrawn, session kept.
        let mp = "800e1c 0002 01 10 ff020000000000000000000000000001 00 30 20010db80001";
        let d = decode_ok(&body(&[], &attrs(&[mp, ORIGIN_IGP, AS_PATH_65001]), &[]), &ctx());
        assert_eq!(d.treat_as_withdraw.unwrap().type_code, type_code::MP_REACH_NLRI);
        assert_eq!(d.mp_announced, vec![net("2001:db8:1::/48")]);
    }

    #[test]
    fn mp_reach_for_family_not_negotiated_is_ignored() {
        let only_v4 = UpdateContext { families: vec![Family::IPV4_UNICAST], ..ctx() };
        let d = decode_ok(&hex(IPV6_VECTOR), &only_v4);
        assert!(d.mp_announced.is_empty());
        assert_eq!(d.attributes, None);
        assert_eq!(d.mp_next_hop, None);
        assert_eq!(d.discarded.len(), 1);
        assert_eq!(d.discarded[0].type_code, type_code::MP_REACH_NLRI);
        // Unknown AFI/SAFI (here L2VPN EVPN) is skipped by its length, not a reset.
        let mp = "800e0a 0019 46 04 0a000001 00 00";
        let d = decode_ok(&body(&[], &attrs(&[mp, ORIGIN_IGP, AS_PATH_65001]), &[]), &ctx());
        assert!(d.mp_announced.is_empty());
        assert_eq!(d.discarded[0].type_code, type_code::MP_REACH_NLRI);
    }

    #[test]
    fn next_hop_errors() {
        let nlri = hex(NLRI_192_0_2);
        for nh in
            ["40 03 03 0a0000", "40 03 05 0a00000100", "40 03 04 00000000", "40 03 04 e0000001"]
        {
            let d = decode_ok(&body(&[], &attrs(&[ORIGIN_IGP, AS_PATH_65001, nh]), &nlri), &ctx());
            let p = d.treat_as_withdraw.unwrap_or_else(|| panic!("{nh}"));
            assert_eq!(p.type_code, type_code::NEXT_HOP);
            assert!(p.rule.contains("§7.3"), "{}", p.rule);
            assert_eq!(d.attributes, None);
        }
        // Without IPv4 NLRI a broken NEXT_HOP is only discarded (RFC 4760 §3).
        let mp = "800e1c 0002 01 10 20010db8000000000000000000000001 00 30 20010db80001";
        let d = decode_ok(
            &body(&[], &attrs(&[mp, ORIGIN_IGP, AS_PATH_65001, "40 03 03 0a0000"]), &[]),
            &ctx(),
        );
        assert_eq!(d.treat_as_withdraw, None);
        assert_eq!(d.discarded[0].type_code, type_code::NEXT_HOP);
        assert!(d.attributes.is_some());
    }

    fn long_as_path(count: usize, asn_len: usize) -> Vec<u8> {
        let mut value = Vec::new();
        let mut left = count;
        while left > 0 {
            let n = left.min(255);
            value.extend_from_slice(&[2, n as u8]);
            for i in 0..n {
                let asn = 64512 + (i as u32 % 1000);
                value.extend_from_slice(&asn.to_be_bytes()[4 - asn_len..]);
            }
            left -= n;
        }
        let mut attr = vec![0x50, type_code::AS_PATH];
        attr.extend_from_slice(&(value.len() as u16).to_be_bytes());
        attr.extend_from_slice(&value);
        attr
    }

    #[test]
    fn as_path_longer_than_2048_asns_is_treated_as_withdraw() {
        let nlri = hex(NLRI_192_0_2);
        for (four, asn_len) in [(true, 4), (false, 2)] {
            let c = UpdateContext { four_octet_as: four, ..ctx() };
            let mut a = hex(ORIGIN_IGP);
            a.extend(long_as_path(MAX_AS_PATH_ASNS + 1, asn_len));
            a.extend(hex(NEXT_HOP_10_0_0_1));
            let d = decode_ok(&body(&[], &a, &nlri), &c);
            let p = d.treat_as_withdraw.unwrap();
            assert_eq!(p.type_code, type_code::AS_PATH);
            assert!(p.rule.contains("2048"), "{}", p.rule);
            assert_eq!(d.announced, vec![net("192.0.2.0/24")]);
            // Exactly the limit is accepted.
            let mut a = hex(ORIGIN_IGP);
            a.extend(long_as_path(MAX_AS_PATH_ASNS, asn_len));
            a.extend(hex(NEXT_HOP_10_0_0_1));
            let d = decode_ok(&body(&[], &a, &nlri), &c);
            assert_eq!(d.treat_as_withdraw, None);
            assert_eq!(d.attributes.unwrap().as_path.iter_asns().count(), MAX_AS_PATH_ASNS);
        }
    }

    #[test]
    fn as4_path_before_as_path_is_merged() {
        let two_octet = UpdateContext { four_octet_as: false, ..ctx() };
        // AS4_PATH (4200000000) first, then AS_PATH (65001 AS_TRANS).
        let a = attrs(&[
            "c0 11 06 02 01 fa56ea00",
            ORIGIN_IGP,
            "40 02 06 02 02 fde9 5ba0",
            NEXT_HOP_10_0_0_1,
        ]);
        let d = decode_ok(&body(&[], &a, &hex(NLRI_192_0_2)), &two_octet);
        assert_eq!(d.treat_as_withdraw, None);
        assert_eq!(d.attributes.unwrap().as_path, AsPath::sequence(vec![65001, 4_200_000_000]));
    }

    #[test]
    fn unknown_attribute_flagged_well_known_is_treat_as_withdraw() {
        let a = attrs(&[ORIGIN_IGP, AS_PATH_65001, NEXT_HOP_10_0_0_1, "40 63 02 0102"]);
        let d = decode_ok(&body(&[], &a, &hex(NLRI_192_0_2)), &ctx());
        assert_eq!(d.treat_as_withdraw.unwrap().type_code, 0x63);
        assert_eq!(d.announced, vec![net("192.0.2.0/24")]);
    }

    #[test]
    fn attribute_flag_conflicts_are_treat_as_withdraw() {
        for bad in ["c0 01 01 00", "40 08 04 fde90064", "40 04 04 00000001"] {
            let a = attrs(&[ORIGIN_IGP, AS_PATH_65001, NEXT_HOP_10_0_0_1, bad]);
            // A conflicting duplicate would only be discarded; put the bad one first.
            let mut first = hex(bad);
            first.extend(&a);
            let d = decode_ok(&body(&[], &first, &hex(NLRI_192_0_2)), &ctx());
            let p = d.treat_as_withdraw.unwrap_or_else(|| panic!("{bad}"));
            assert!(p.rule.contains("§3 c"), "{bad}: {}", p.rule);
        }
    }

    #[test]
    fn attribute_length_overrunning_the_block_is_treat_as_withdraw() {
        let nlri = hex(NLRI_192_0_2);
        // COMMUNITIES claims 8 octets, 4 are left in the block.
        let a = attrs(&[ORIGIN_IGP, AS_PATH_65001, NEXT_HOP_10_0_0_1, "c0 08 08 fde90064"]);
        let d = decode_ok(&body(&[], &a, &nlri), &ctx());
        let p = d.treat_as_withdraw.unwrap();
        assert!(p.rule.contains("§4"), "{}", p.rule);
        // The NLRI is still located from the Total Path Attribute Length.
        assert_eq!(d.announced, vec![net("192.0.2.0/24")]);
        // Two stray octets: too few for an attribute header.
        let a = attrs(&[ORIGIN_IGP, AS_PATH_65001, NEXT_HOP_10_0_0_1, "c0 08"]);
        let d = decode_ok(&body(&[], &a, &nlri), &ctx());
        assert!(d.treat_as_withdraw.unwrap().rule.contains("§4"));
        // Extended-length header cut after three octets.
        let a = attrs(&[ORIGIN_IGP, AS_PATH_65001, NEXT_HOP_10_0_0_1, "d0 08 00"]);
        let d = decode_ok(&body(&[], &a, &nlri), &ctx());
        assert!(d.treat_as_withdraw.is_some());
    }

    #[test]
    fn field_lengths_overrunning_the_message_reset_the_session() {
        for (b, what) in [
            ("00", "too short"),
            ("0005 0000", "withdrawn length overruns"),
            ("0000 0010 40010100", "attribute length overruns"),
            ("0001 18", "no attribute length"),
        ] {
            let err = decode_update(&hex(b), &ctx()).unwrap_err();
            assert_eq!(err.subcode, UpdateErrorSubcode::MalformedAttributeList, "{what}");
        }
        for (b, what) in
            [("0000 0000 21 0a000000 00", "NLRI /33"), ("0002 1801 0000", "withdrawn cut short")]
        {
            let err = decode_update(&hex(b), &ctx()).unwrap_err();
            assert_eq!(err.subcode, UpdateErrorSubcode::InvalidNetworkField, "{what}");
        }
    }

    #[test]
    fn duplicate_attributes() {
        let nlri = hex(NLRI_192_0_2);
        // ORIGIN twice: the second (INCOMPLETE) is discarded.
        let a = attrs(&[ORIGIN_IGP, AS_PATH_65001, NEXT_HOP_10_0_0_1, "40 01 01 02"]);
        let d = decode_ok(&body(&[], &a, &nlri), &ctx());
        assert_eq!(d.treat_as_withdraw, None);
        assert_eq!(d.attributes.unwrap().origin, Origin::Igp);
        assert_eq!(d.discarded.len(), 1);
        assert!(d.discarded[0].rule.contains("§3 g"));
        // MP_REACH_NLRI or MP_UNREACH_NLRI twice: Malformed Attribute List.
        for mp in ["800f03 0002 01", "800e15 0002 01 10 20010db8000000000000000000000001 00"] {
            let twice = format!("{mp}{mp}{ORIGIN_IGP}{AS_PATH_65001}");
            let err = decode_update(&body(&[], &hex(&twice), &[]), &ctx()).unwrap_err();
            assert_eq!(err.subcode, UpdateErrorSubcode::MalformedAttributeList);
        }
    }

    #[test]
    fn local_pref_from_ebgp_is_discarded() {
        let nlri = hex(NLRI_192_0_2);
        let a = attrs(&[ORIGIN_IGP, AS_PATH_65001, NEXT_HOP_10_0_0_1, "40 05 04 000000c8"]);
        let d = decode_ok(&body(&[], &a, &nlri), &ctx());
        assert_eq!(d.treat_as_withdraw, None);
        assert_eq!(d.discarded.len(), 1);
        assert!(d.discarded[0].rule.contains("§7.5"));
        assert_eq!(d.attributes.unwrap().local_pref, None);
        let d = decode_ok(&body(&[], &a, &nlri), &ibgp());
        assert!(d.discarded.is_empty());
        assert_eq!(d.attributes.unwrap().local_pref, Some(200));
        // Even malformed, from eBGP it is only discarded.
        let a = attrs(&[ORIGIN_IGP, AS_PATH_65001, NEXT_HOP_10_0_0_1, "40 05 01 00"]);
        let d = decode_ok(&body(&[], &a, &nlri), &ctx());
        assert_eq!(d.treat_as_withdraw, None);
        let d = decode_ok(&body(&[], &a, &nlri), &ibgp());
        assert!(d.treat_as_withdraw.unwrap().rule.contains("§7.5"));
    }

    #[test]
    fn per_attribute_outcomes() {
        let nlri = hex(NLRI_192_0_2);
        // (attribute, withdraw?) with the well-formed base attributes.
        for (attr, withdraw) in [
            ("40 01 01 03", true),                            // ORIGIN value 3
            ("40 01 02 0000", true),                          // ORIGIN length 2
            ("80 04 03 000001", true),                        // MED length 3
            ("c0 08 06 fde90064 0000", true),                 // COMMUNITIES length 6
            ("c0 08 00", true),                               // COMMUNITIES empty
            ("c0 20 0d 00000001 00000002 00000003 04", true), // LARGE_COMMUNITIES 13
            ("80 09 03 010203", true),                        // ORIGINATOR_ID length 3
            ("80 0a 05 0102030405", true),                    // CLUSTER_LIST length 5
            ("40 06 01 00", false),                           // ATOMIC_AGGREGATE length 1
            ("c0 07 05 fde90a0000", false),                   // AGGREGATOR length 5
            ("c0 12 07 fa56ea000a0000", false),               // AS4_AGGREGATOR (ignored on 4-octet)
            ("c0 11 06 02 01 fa56ea00", false),               // AS4_PATH on a 4-octet session
            ("80 63 01 00", false),                           // unknown optional non-transitive
        ] {
            let mut a = attrs(&[ORIGIN_IGP, AS_PATH_65001, NEXT_HOP_10_0_0_1]);
            // The tested attribute first so it is not a discarded duplicate.
            let mut b = hex(attr);
            b.append(&mut a);
            let d = decode_ok(&body(&[], &b, &nlri), &ibgp());
            assert_eq!(
                d.treat_as_withdraw.is_some(),
                withdraw,
                "{attr}: {:?}",
                d.treat_as_withdraw
            );
            if !withdraw {
                assert!(d.attributes.is_some(), "{attr}");
            }
        }
        // Malformed AS4_PATH on a 2-octet session: discarded, AS_PATH kept.
        let two = UpdateContext { four_octet_as: false, ..ctx() };
        let a = attrs(&["c0 11 03 02 01 fa", ORIGIN_IGP, "40 02 04 02 01 fde9", NEXT_HOP_10_0_0_1]);
        let d = decode_ok(&body(&[], &a, &nlri), &two);
        assert_eq!(d.treat_as_withdraw, None);
        assert_eq!(d.discarded[0].type_code, type_code::AS4_PATH);
        assert_eq!(d.attributes.unwrap().as_path, AsPath::sequence(vec![65001]));
    }

    #[test]
    fn treat_as_withdraw_without_nlri_becomes_a_discard() {
        // RFC 7606 §5.2: a bad ORIGIN in an UPDATE that only withdraws.
        let d = decode_ok(&body(&hex(NLRI_192_0_2), &hex("40 01 01 07"), &[]), &ctx());
        assert_eq!(d.treat_as_withdraw, None);
        assert_eq!(d.discarded[0].type_code, type_code::ORIGIN);
        assert_eq!(d.withdrawn, vec![net("192.0.2.0/24")]);
    }

    fn all_contexts() -> Vec<UpdateContext> {
        let mut v = Vec::new();
        for four in [true, false] {
            for ebgp in [true, false] {
                for families in
                    [vec![Family::IPV4_UNICAST], vec![Family::IPV4_UNICAST, Family::IPV6_UNICAST]]
                {
                    v.push(UpdateContext { four_octet_as: four, ebgp, families });
                }
            }
        }
        v
    }

    #[test]
    fn every_truncation_and_byte_flip_returns_without_panicking() {
        let mut vectors: Vec<Vec<u8>> =
            [IPV4_VECTOR, IPV6_VECTOR, MP_UNREACH_VECTOR].iter().map(|v| hex(v)).collect();
        let mut a = hex(ORIGIN_IGP);
        a.extend(long_as_path(300, 4));
        a.extend(hex(
            "c0 11 0a 02 02 fa56ea00 fa56ea01 c0 12 08 fa56ea00 0a000001 c0 07 06 5ba0 0a000001",
        ));
        a.extend(hex(NEXT_HOP_10_0_0_1));
        vectors.push(body(&hex("18 0a0000"), &a, &hex(NLRI_192_0_2)));
        for v in &vectors {
            for c in all_contexts() {
                for len in 0..=v.len() {
                    let _ = decode_update(&v[..len], &c);
                }
                for i in 0..v.len().min(120) {
                    for bit in 0..8 {
                        let mut m = v.clone();
                        m[i] ^= 1 << bit;
                        let _ = decode_update(&m, &c);
                    }
                }
            }
        }
    }

    #[test]
    fn round_trips_through_the_packer() {
        use crate::bgp::wire::attr_codec::EncodeContext;
        use crate::bgp::wire::packer::pack_announcements;

        let big = 4_200_000_000u32;
        let mut sets = vec![PathAttributes {
            origin: Origin::Igp,
            as_path: AsPath::sequence(vec![65001]),
            next_hop: NextHop::V4(Ipv4Addr::new(10, 0, 0, 1)),
            ..Default::default()
        }];
        sets.push(PathAttributes {
            origin: Origin::Incomplete,
            as_path: AsPath::sequence(vec![65001, big, 65002, big + 1]),
            med: Some(7),
            local_pref: Some(300),
            communities: vec![well_known::NO_EXPORT, 0xfde9_0001].into(),
            rare: RareAttributes {
                atomic_aggregate: true,
                aggregator: Some(Aggregator { asn: big + 2, address: Ipv4Addr::new(192, 0, 2, 9) }),
                large_communities: vec![LargeCommunity {
                    global_admin: big,
                    local_data1: 1,
                    local_data2: 2,
                }]
                .into(),
                ..Default::default()
            }
            .into(),
            ..sets[0].clone()
        });
        sets.push(PathAttributes {
            origin: Origin::Egp,
            as_path: AsPath::from_segments([
                crate::bgp::wire::attributes::AsSegment {
                    kind: crate::bgp::wire::attributes::SegmentKind::Sequence,
                    asns: vec![65001, big],
                },
                crate::bgp::wire::attributes::AsSegment {
                    kind: crate::bgp::wire::attributes::SegmentKind::Set,
                    asns: vec![big + 5, 64512],
                },
            ]),
            rare: RareAttributes {
                originator_id: Some(Ipv4Addr::new(10, 255, 0, 1)),
                cluster_list: vec![Ipv4Addr::new(10, 255, 0, 2), Ipv4Addr::new(10, 255, 0, 3)]
                    .into(),
                unknown: vec![RawAttribute { flags: 0xe0, type_code: 99, value: vec![9; 300] }]
                    .into(),
                ..Default::default()
            }
            .into(),
            communities: (0..100).collect(),
            ..sets[0].clone()
        });
        sets.push(PathAttributes {
            as_path: AsPath::default(),
            local_pref: Some(100),
            rare: RareAttributes {
                aggregator: Some(Aggregator { asn: 64513, address: Ipv4Addr::new(10, 9, 9, 9) }),
                ..Default::default()
            }
            .into(),
            ..sets[0].clone()
        });
        let v4 = [net("192.0.2.0/24"), net("10.0.0.0/8"), net("0.0.0.0/0")];
        let v6 = [net("2001:db8::/32"), net("2001:db8:1:2::/64")];
        let nh6 = [
            NextHop::V6 { global: "2001:db8::1".parse().unwrap(), link_local: None },
            NextHop::V6 {
                global: "2001:db8::1".parse().unwrap(),
                link_local: Some(Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, 0, 1)),
            },
        ];
        let mut checked = 0;
        for four_octet_as in [true, false] {
            let enc = EncodeContext { four_octet_as };
            let dec = UpdateContext { four_octet_as, ..ibgp() };
            for attrs in &sets {
                let mut msgs = Vec::new();
                pack_announcements(attrs, Family::IPV4_UNICAST, &v4, &enc, &mut msgs).unwrap();
                assert_eq!(msgs.len(), 1);
                let d = decode_ok(&msgs[0][HEADER_LEN..], &dec);
                assert_eq!(d.treat_as_withdraw, None, "{attrs:?}");
                assert_eq!(d.announced, v4);
                assert_eq!(d.attributes.as_ref(), Some(attrs), "4-octet {four_octet_as}");
                for nh in nh6 {
                    let attrs = PathAttributes { next_hop: nh, ..attrs.clone() };
                    let mut msgs = Vec::new();
                    pack_announcements(&attrs, Family::IPV6_UNICAST, &v6, &enc, &mut msgs).unwrap();
                    let d = decode_ok(&msgs[0][HEADER_LEN..], &dec);
                    assert_eq!(d.mp_announced, v6);
                    assert_eq!(d.mp_next_hop, Some(nh));
                    let mut got = d.attributes.unwrap();
                    got.next_hop = d.mp_next_hop.unwrap();
                    assert_eq!(got, attrs, "4-octet {four_octet_as}");
                    checked += 1;
                }
            }
        }
        assert_eq!(checked, 16);
    }

    #[test]
    fn long_segments_are_split_and_read_back() {
        use crate::bgp::wire::attr_codec::EncodeContext;
        use crate::bgp::wire::packer::pack_announcements;
        let asns: Vec<u32> = (0..600).map(|i| 4_200_000_000 + i).collect();
        let attrs = PathAttributes {
            as_path: AsPath::sequence(asns.clone()),
            next_hop: NextHop::V4(Ipv4Addr::new(10, 0, 0, 1)),
            ..Default::default()
        };
        for four_octet_as in [true, false] {
            let mut msgs = Vec::new();
            pack_announcements(
                &attrs,
                Family::IPV4_UNICAST,
                &[net("10.0.0.0/8")],
                &EncodeContext { four_octet_as },
                &mut msgs,
            )
            .unwrap();
            let d = decode_ok(&msgs[0][HEADER_LEN..], &UpdateContext { four_octet_as, ..ctx() });
            let path = d.attributes.unwrap().as_path;
            assert_eq!(path.segments().count(), 3);
            assert_eq!(path.iter_asns().collect::<Vec<_>>(), asns);
        }
    }
}
