//! Path attribute decoding with the RFC 7606 outcome of every error, and attribute encoding
//! (RFC 4271 §4.3, §5; RFC 4760 §3-4; RFC 6793; RFC 1997; RFC 8092).

use std::net::{Ipv4Addr, Ipv6Addr};

use ipnet::IpNet;

use super::attributes::{
    flags, type_code, Afi, Aggregator, AsPath, AsSegment, Family, NextHop, Origin, PathAttributes,
    RawAttribute, SegmentKind,
};
use super::nlri::{decode_prefixes, encode_prefix};
use super::rfc7606::{Problems, UpdateError, UpdateErrorSubcode};
use super::update::UpdateContext;

/// The 2-octet stand-in for a 4-octet ASN (RFC 6793 §9).
pub const AS_TRANS: u32 = 23456;

/// The most ASNs accepted in an AS_PATH. Longer paths are treated as withdrawn: no real path
/// comes near it, and very long paths have crashed or stalled other speakers (CVE-2009-1572,
/// CVE-2011-3486 and kin), which a route we pass on must not do either.
pub const MAX_AS_PATH_ASNS: usize = 2048;

/// The Optional and Transitive bits a known attribute must carry (RFC 4271 §5 and the RFC that
/// defines each attribute). `None` for type codes this speaker does not interpret.
fn expected_flags(code: u8) -> Option<u8> {
    const WELL_KNOWN: u8 = flags::TRANSITIVE;
    const OPT_TRANS: u8 = flags::OPTIONAL | flags::TRANSITIVE;
    const OPT_NON_TRANS: u8 = flags::OPTIONAL;
    Some(match code {
        type_code::ORIGIN
        | type_code::AS_PATH
        | type_code::NEXT_HOP
        | type_code::LOCAL_PREF
        | type_code::ATOMIC_AGGREGATE => WELL_KNOWN,
        type_code::MULTI_EXIT_DISC
        | type_code::ORIGINATOR_ID
        | type_code::CLUSTER_LIST
        | type_code::MP_REACH_NLRI
        | type_code::MP_UNREACH_NLRI => OPT_NON_TRANS,
        type_code::AGGREGATOR
        | type_code::COMMUNITIES
        | type_code::AS4_PATH
        | type_code::AS4_AGGREGATOR
        | type_code::LARGE_COMMUNITIES => OPT_TRANS,
        _ => return None,
    })
}

/// A set of attribute type codes, for duplicate detection without allocating.
#[derive(Debug, Default, Clone, Copy)]
pub struct TypeSet([u64; 4]);

impl TypeSet {
    /// Adds `code`; returns whether it was already present.
    fn insert(&mut self, code: u8) -> bool {
        let (word, bit) = (usize::from(code / 64), 1u64 << (code % 64));
        match self.0.get_mut(word) {
            Some(w) => {
                let had = *w & bit != 0;
                *w |= bit;
                had
            }
            None => false,
        }
    }

    pub fn contains(&self, code: u8) -> bool {
        let (word, bit) = (usize::from(code / 64), 1u64 << (code % 64));
        self.0.get(word).is_some_and(|w| w & bit != 0)
    }
}

/// What the attribute block yielded, before the checks that need the NLRI fields.
#[derive(Debug, Default)]
pub struct DecodedAttributes {
    pub attrs: PathAttributes,
    /// Attributes present and accepted (malformed or discarded ones are absent), for the
    /// mandatory-attribute check of RFC 7606 §3 d.
    pub present: TypeSet,
    pub problems: Problems,
    /// A NEXT_HOP problem matters only when there is IPv4 NLRI (RFC 4760 §3: a NEXT_HOP in an
    /// UPDATE without it SHOULD be ignored), so the caller decides its outcome.
    pub next_hop_problem: Option<(&'static str, String)>,
    /// The family of an accepted MP_REACH_NLRI, its next hop, and MP_UNREACH_NLRI's family.
    pub mp_reach: Option<(Family, NextHop)>,
    pub mp_unreach: Option<Family>,
    /// RFC 6793 attributes of a 2-octet session, merged once the whole block is read (they
    /// may come before AS_PATH and AGGREGATOR).
    as4_path: Option<AsPath>,
    as4_aggregator: Option<Aggregator>,
}

/// Decodes the path attribute block. MP_REACH_NLRI prefixes go to `mp_announced`,
/// MP_UNREACH_NLRI prefixes to `withdrawn`. Returns an error only where RFC 7606 keeps the
/// session reset: the MP attributes cannot be parsed, or appear twice.
pub fn decode_attributes(
    block: &[u8],
    ctx: &UpdateContext,
    mp_announced: &mut Vec<IpNet>,
    withdrawn: &mut Vec<IpNet>,
) -> Result<DecodedAttributes, UpdateError> {
    let mut out = DecodedAttributes::default();
    let mut seen = TypeSet::default();
    let mut rest = block;

    while !rest.is_empty() {
        let Some(&[attr_flags, code]) = rest.get(..2) else {
            truncated_block(&mut out.problems, 0, rest.len());
            break;
        };
        let header_len = if attr_flags & flags::EXTENDED_LENGTH != 0 { 4 } else { 3 };
        let value_len = match rest.get(2..header_len) {
            Some(&[len]) => usize::from(len),
            Some(&[hi, lo]) => usize::from(u16::from_be_bytes([hi, lo])),
            _ => {
                truncated_block(&mut out.problems, code, rest.len());
                break;
            }
        };
        let Some(whole) = rest.get(..header_len.saturating_add(value_len)) else {
            // RFC 7606 §4: the last attribute overruns the Total Path Attribute Length. The
            // NLRI field is still found from that total, so treat-as-withdraw; but an MP
            // attribute cut short means its NLRI cannot be parsed (§3 j), so session reset.
            if code == type_code::MP_REACH_NLRI || code == type_code::MP_UNREACH_NLRI {
                return Err(UpdateError::new(
                    UpdateErrorSubcode::OptionalAttributeError,
                    rest,
                    "RFC 7606 §3 j: MP attribute overruns the path attribute block",
                ));
            }
            out.problems.withdraw(
                code,
                "RFC 7606 §4: attribute length overruns the path attribute block",
                format!(
                    "length {value_len}, {} octets left",
                    rest.len() - header_len.min(rest.len())
                ),
            );
            break;
        };
        rest = rest.get(whole.len()..).unwrap_or_default();

        // RFC 7606 §3 g: MP_REACH_NLRI or MP_UNREACH_NLRI twice is a Malformed Attribute
        // List; any other attribute repeated keeps its first occurrence only.
        if seen.insert(code) {
            if code == type_code::MP_REACH_NLRI || code == type_code::MP_UNREACH_NLRI {
                return Err(UpdateError::new(
                    UpdateErrorSubcode::MalformedAttributeList,
                    &[],
                    "RFC 7606 §3 g: MP_REACH_NLRI or MP_UNREACH_NLRI appears twice",
                ));
            }
            out.problems.discard(
                code,
                "RFC 7606 §3 g: attribute appears more than once",
                String::new(),
            );
            continue;
        }

        // RFC 7606 §7.5: LOCAL_PREF from an external peer is discarded, whatever its form.
        if code == type_code::LOCAL_PREF && ctx.ebgp {
            out.problems.discard(
                code,
                "RFC 7606 §7.5: LOCAL_PREF received from an eBGP peer",
                String::new(),
            );
            continue;
        }

        let flags_ok = match expected_flags(code) {
            Some(expected) => attr_flags & (flags::OPTIONAL | flags::TRANSITIVE) == expected,
            None => true,
        };
        if !flags_ok {
            // RFC 7606 §3 c: Optional or Transitive bit in conflict with the attribute's
            // definition: treat-as-withdraw. The MP attributes are still parsed below, since
            // their NLRI must be withdrawn (or are withdrawals).
            out.problems.withdraw(
                code,
                "RFC 7606 §3 c: attribute flags conflict with the attribute's definition",
                format!("flags {attr_flags:#04x}"),
            );
            if code != type_code::MP_REACH_NLRI && code != type_code::MP_UNREACH_NLRI {
                continue;
            }
        }

        if decode_value(whole, header_len, ctx, &mut out, mp_announced, withdrawn)? {
            out.present.insert(code);
        }
    }

    if !ctx.four_octet_as {
        let (as4_path, as4_aggregator) = (out.as4_path.take(), out.as4_aggregator.take());
        merge_as4(&mut out, as4_path, as4_aggregator);
    }
    Ok(out)
}

/// Decodes one attribute's value into `out`. Returns whether it was accepted; a rejected one
/// has its outcome recorded in `out.problems` (or is quietly ignored, as RFC 4271 §5 says for
/// unrecognized optional non-transitive attributes).
fn decode_value(
    whole: &[u8],
    header_len: usize,
    ctx: &UpdateContext,
    out: &mut DecodedAttributes,
    mp_announced: &mut Vec<IpNet>,
    withdrawn: &mut Vec<IpNet>,
) -> Result<bool, UpdateError> {
    let (&[attr_flags, code], value) =
        (whole.first_chunk::<2>().unwrap_or(&[0, 0]), whole.get(header_len..).unwrap_or_default());
    match code {
        type_code::ORIGIN => match value {
            [0] => out.attrs.origin = Origin::Igp,
            [1] => out.attrs.origin = Origin::Egp,
            [2] => out.attrs.origin = Origin::Incomplete,
            _ => {
                out.problems.withdraw(
                    code,
                    "RFC 7606 §7.1: ORIGIN length is not 1 or value is undefined",
                    format!("{value:02x?}"),
                );
                return Ok(false);
            }
        },
        type_code::AS_PATH => {
            let asn_len = if ctx.four_octet_as { 4 } else { 2 };
            match decode_as_path(value, asn_len) {
                Ok(path) if ctx.ebgp && has_confed_segment(&path) => {
                    // RFC 5065 §5.3: confederation segments never leave the
                    // confederation, and this speaker is in none.
                    out.problems.withdraw(
                        code,
                        "RFC 7606 §7.2: AS_PATH from an eBGP peer has a confederation segment",
                        path.to_string(),
                    );
                    return Ok(false);
                }
                Ok(path) if path.contains(0) => {
                    // RFC 7607 §2: AS 0 in AS_PATH makes the UPDATE malformed (RFC 7606 §7.2).
                    out.problems.withdraw(
                        code,
                        "RFC 7607 §2: AS_PATH contains AS 0",
                        path.to_string(),
                    );
                    return Ok(false);
                }
                Ok(path) => out.attrs.as_path = path,
                Err(AsPathError::TooLong) => {
                    out.problems.withdraw(
                        code,
                        "AS_PATH has more than 2048 ASNs (CVE guard, RFC 7606 §7.2 treat-as-withdraw)",
                        format!("{} octets", value.len()),
                    );
                    return Ok(false);
                }
                Err(AsPathError::Malformed(why)) => {
                    out.problems.withdraw(
                        code,
                        "RFC 7606 §7.2: AS_PATH is malformed",
                        why.to_string(),
                    );
                    return Ok(false);
                }
            }
        }
        type_code::NEXT_HOP => match value {
            &[a, b, c, d] => {
                let addr = Ipv4Addr::new(a, b, c, d);
                if is_martian_v4(addr) {
                    // RFC 7606 §7.3 keeps RFC 4271 §6.3's semantic check: a next hop that
                    // is not a valid host address is treated as withdrawn.
                    out.next_hop_problem = Some((
                        "RFC 7606 §7.3 / RFC 4271 §6.3: NEXT_HOP is not a valid host address",
                        addr.to_string(),
                    ));
                    return Ok(false);
                }
                out.attrs.next_hop = NextHop::V4(addr);
            }
            _ => {
                out.next_hop_problem = Some((
                    "RFC 7606 §7.3: NEXT_HOP length is not 4",
                    format!("length {}", value.len()),
                ));
                return Ok(false);
            }
        },
        type_code::MULTI_EXIT_DISC => match read_u32(value) {
            Some(med) => out.attrs.med = Some(med),
            None => {
                out.problems.withdraw(
                    code,
                    "RFC 7606 §7.4: MULTI_EXIT_DISC length is not 4",
                    format!("length {}", value.len()),
                );
                return Ok(false);
            }
        },
        type_code::LOCAL_PREF => match read_u32(value) {
            Some(pref) => out.attrs.local_pref = Some(pref),
            None => {
                out.problems.withdraw(
                    code,
                    "RFC 7606 §7.5: LOCAL_PREF length is not 4",
                    format!("length {}", value.len()),
                );
                return Ok(false);
            }
        },
        type_code::ATOMIC_AGGREGATE => {
            if !value.is_empty() {
                out.problems.discard(
                    code,
                    "RFC 7606 §7.6: ATOMIC_AGGREGATE length is not 0",
                    format!("length {}", value.len()),
                );
                return Ok(false);
            }
            out.attrs.rare_mut().atomic_aggregate = true;
        }
        type_code::AGGREGATOR => {
            let asn_len = if ctx.four_octet_as { 4 } else { 2 };
            match decode_aggregator(value, asn_len) {
                Some(agg) if agg.asn == 0 => {
                    // RFC 7607 §2 with RFC 7606 §7.7: a malformed AGGREGATOR is discarded.
                    out.problems.discard(
                        code,
                        "RFC 7607 §2: AGGREGATOR carries AS 0",
                        agg.address.to_string(),
                    );
                    return Ok(false);
                }
                Some(agg) => out.attrs.rare_mut().aggregator = Some(agg),
                None => {
                    out.problems.discard(
                        code,
                        "RFC 7606 §7.7: AGGREGATOR length is not 6 (2-octet AS) or 8 (4-octet AS)",
                        format!("length {}", value.len()),
                    );
                    return Ok(false);
                }
            }
        }
        type_code::COMMUNITIES => {
            if value.is_empty() || value.len() % 4 != 0 {
                out.problems.withdraw(
                    code,
                    "RFC 7606 §7.8: COMMUNITIES length is not a non-zero multiple of 4",
                    format!("length {}", value.len()),
                );
                return Ok(false);
            }
            out.attrs.communities = value.chunks_exact(4).filter_map(read_u32).collect();
        }
        type_code::ORIGINATOR_ID => match value {
            &[a, b, c, d] => out.attrs.rare_mut().originator_id = Some(Ipv4Addr::new(a, b, c, d)),
            _ => {
                out.problems.withdraw(
                    code,
                    "RFC 7606 §7.9: ORIGINATOR_ID length is not 4",
                    format!("length {}", value.len()),
                );
                return Ok(false);
            }
        },
        type_code::CLUSTER_LIST => {
            if value.is_empty() || value.len() % 4 != 0 {
                out.problems.withdraw(
                    code,
                    "RFC 7606 §7.10: CLUSTER_LIST length is not a non-zero multiple of 4",
                    format!("length {}", value.len()),
                );
                return Ok(false);
            }
            out.attrs.rare_mut().cluster_list =
                value.chunks_exact(4).filter_map(read_u32).map(Ipv4Addr::from).collect();
        }
        type_code::LARGE_COMMUNITIES => {
            if value.is_empty() || value.len() % 12 != 0 {
                out.problems.withdraw(
                    code,
                    "RFC 8092 §6: LARGE_COMMUNITIES length is not a non-zero multiple of 12",
                    format!("length {}", value.len()),
                );
                return Ok(false);
            }
            out.attrs.rare_mut().large_communities = value
                .chunks_exact(12)
                .filter_map(|c| {
                    Some(super::attributes::LargeCommunity {
                        global_admin: read_u32(c.get(0..4)?)?,
                        local_data1: read_u32(c.get(4..8)?)?,
                        local_data2: read_u32(c.get(8..12)?)?,
                    })
                })
                .collect();
        }
        type_code::AS4_PATH => {
            if ctx.four_octet_as {
                out.problems.discard(
                    code,
                    "RFC 6793 §4.1: AS4_PATH received from a 4-octet-AS speaker is ignored",
                    String::new(),
                );
                return Ok(false);
            }
            match decode_as_path(value, 4) {
                Ok(path) if has_confed_segment(&path) => {
                    out.problems.discard(
                        code,
                        "RFC 6793 §6: AS4_PATH carries a confederation segment",
                        path.to_string(),
                    );
                    return Ok(false);
                }
                Ok(path) if path.contains(0) => {
                    // RFC 7607 §2 with RFC 6793 §6: a malformed AS4_PATH is discarded.
                    out.problems.discard(
                        code,
                        "RFC 7607 §2: AS4_PATH contains AS 0",
                        path.to_string(),
                    );
                    return Ok(false);
                }
                Ok(path) => out.as4_path = Some(path),
                Err(e) => {
                    out.problems.discard(code, "RFC 6793 §6: AS4_PATH is malformed", e.to_string());
                    return Ok(false);
                }
            }
        }
        type_code::AS4_AGGREGATOR => {
            if ctx.four_octet_as {
                out.problems.discard(
                    code,
                    "RFC 6793 §4.1: AS4_AGGREGATOR received from a 4-octet-AS speaker is ignored",
                    String::new(),
                );
                return Ok(false);
            }
            match decode_aggregator(value, 4) {
                Some(agg) if agg.asn == 0 => {
                    out.problems.discard(
                        code,
                        "RFC 7607 §2: AS4_AGGREGATOR carries AS 0",
                        agg.address.to_string(),
                    );
                    return Ok(false);
                }
                Some(agg) => out.as4_aggregator = Some(agg),
                None => {
                    out.problems.discard(
                        code,
                        "RFC 6793 §6: AS4_AGGREGATOR length is not 8",
                        format!("length {}", value.len()),
                    );
                    return Ok(false);
                }
            }
        }
        type_code::MP_REACH_NLRI => {
            match decode_mp_reach(value, whole, ctx, mp_announced, &mut out.problems)? {
                Some(reach) => out.mp_reach = Some(reach),
                None => return Ok(false),
            }
        }
        type_code::MP_UNREACH_NLRI => {
            match decode_mp_unreach(value, whole, ctx, withdrawn, &mut out.problems)? {
                Some(family) => out.mp_unreach = Some(family),
                None => return Ok(false),
            }
        }
        _ if attr_flags & flags::OPTIONAL == 0 => {
            // RFC 4271 §6.3 answers an unrecognized well-known attribute with a session
            // reset. RFC 7606 §2 prefers the weakest approach that keeps the RIB correct:
            // the attribute's length is reliable and the NLRI is found, so the routes are
            // treated as withdrawn instead (what a peer meant by it is unknowable).
            out.problems.withdraw(
                code,
                "RFC 4271 §6.3 / RFC 7606 §2: unrecognized attribute flagged well-known",
                format!("flags {attr_flags:#04x}, length {}", value.len()),
            );
            return Ok(false);
        }
        _ if attr_flags & flags::TRANSITIVE != 0 => {
            // RFC 4271 §5: unrecognized optional transitive attributes are passed on (with
            // the Partial bit set when sent; see `encode_attributes`).
            let raw = RawAttribute {
                flags: attr_flags & !flags::EXTENDED_LENGTH,
                type_code: code,
                value: value.to_vec(),
            };
            let rare = out.attrs.rare_mut();
            rare.unknown = rare.unknown.iter().cloned().chain([raw]).collect();
        }
        // RFC 4271 §5: unrecognized optional non-transitive attributes are quietly ignored.
        _ => return Ok(false),
    }
    Ok(true)
}

/// RFC 7606 §4: fewer octets remain than an attribute header needs.
fn truncated_block(problems: &mut Problems, code: u8, left: usize) {
    problems.withdraw(
        code,
        "RFC 7606 §4: path attribute block ends inside an attribute header",
        format!("{left} octets left"),
    );
}

/// RFC 6793 §4.2.3: rebuild the 4-octet path from AS_PATH and AS4_PATH, and AGGREGATOR from
/// AS4_AGGREGATOR, for a session with a 2-octet-AS speaker.
fn merge_as4(
    out: &mut DecodedAttributes,
    as4_path: Option<AsPath>,
    as4_aggregator: Option<Aggregator>,
) {
    if let Some(agg) = out.attrs.aggregator() {
        if agg.asn != AS_TRANS {
            // RFC 6793 §4.2.3: an AGGREGATOR with a real 2-octet ASN means a 2-octet speaker
            // aggregated after the AS4 attributes were attached: both are ignored.
            return;
        }
        if let Some(agg4) = as4_aggregator {
            out.attrs.rare_mut().aggregator = Some(agg4);
        }
    }
    let Some(as4) = as4_path else { return };
    if !out.present.contains(type_code::AS_PATH) {
        return;
    }
    let have = out.attrs.as_path.selection_length();
    let want = as4.selection_length();
    // RFC 6793 §4.2.3: AS4_PATH longer than AS_PATH is ignored.
    let Some(mut need) = have.checked_sub(want) else {
        out.problems.discard(
            type_code::AS4_PATH,
            "RFC 6793 §4.2.3: AS4_PATH is longer than AS_PATH",
            format!("{want} > {have}"),
        );
        return;
    };
    // Take the leading part of AS_PATH that AS4_PATH lacks (counting as route selection does:
    // a set counts one, confederation segments none), then append AS4_PATH.
    let mut merged = Vec::new();
    for seg in out.attrs.as_path.segments() {
        match seg.kind {
            SegmentKind::ConfedSequence | SegmentKind::ConfedSet => merged.push(seg.to_owned()),
            _ if need == 0 => break,
            SegmentKind::Set => {
                merged.push(seg.to_owned());
                need -= 1;
            }
            SegmentKind::Sequence => {
                let take = need.min(seg.asns.len());
                merged.push(AsSegment {
                    kind: SegmentKind::Sequence,
                    asns: seg.asns.iter().take(take).copied().collect(),
                });
                need -= take;
            }
        }
    }
    for seg in as4.to_segments() {
        // Join the taken part of a sequence with a leading AS4_PATH sequence, as one would
        // have been on the wire, while the one-octet segment count allows.
        match merged.last_mut() {
            Some(last)
                if last.kind == SegmentKind::Sequence
                    && seg.kind == SegmentKind::Sequence
                    && last.asns.len() + seg.asns.len() <= 255 =>
            {
                last.asns.extend(seg.asns);
            }
            _ => merged.push(seg),
        }
    }
    out.attrs.as_path = AsPath::from_segments(merged);
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum AsPathError {
    Malformed(&'static str),
    TooLong,
}

impl std::fmt::Display for AsPathError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Malformed(why) => f.write_str(why),
            Self::TooLong => write!(f, "more than {MAX_AS_PATH_ASNS} ASNs"),
        }
    }
}

/// RFC 7606 §7.2: a path is malformed if a segment type is unknown, a segment has length zero,
/// or a segment (or its header) runs past the end of the attribute.
fn decode_as_path(value: &[u8], asn_len: usize) -> Result<AsPath, AsPathError> {
    let mut segments = Vec::new();
    let mut total = 0usize;
    let mut rest = value;
    while let Some((&kind, after_kind)) = rest.split_first() {
        let (&count, after_count) = after_kind
            .split_first()
            .ok_or(AsPathError::Malformed("segment header is truncated"))?;
        let kind = match kind {
            1 => SegmentKind::Set,
            2 => SegmentKind::Sequence,
            3 => SegmentKind::ConfedSequence,
            4 => SegmentKind::ConfedSet,
            _ => return Err(AsPathError::Malformed("unknown segment type")),
        };
        if count == 0 {
            return Err(AsPathError::Malformed("segment of length zero"));
        }
        total = total.saturating_add(usize::from(count));
        if total > MAX_AS_PATH_ASNS {
            return Err(AsPathError::TooLong);
        }
        let (bytes, after) = after_count
            .split_at_checked(usize::from(count) * asn_len)
            .ok_or(AsPathError::Malformed("segment overruns the attribute"))?;
        let asns = if asn_len == 4 {
            bytes.chunks_exact(4).filter_map(read_u32).collect()
        } else {
            bytes
                .chunks_exact(2)
                .map(|c| c.iter().fold(0u32, |acc, b| acc << 8 | u32::from(*b)))
                .collect()
        };
        segments.push(AsSegment { kind, asns });
        rest = after;
    }
    Ok(AsPath::from_segments(segments))
}

fn has_confed_segment(path: &AsPath) -> bool {
    path.segments().any(|s| matches!(s.kind, SegmentKind::ConfedSequence | SegmentKind::ConfedSet))
}

fn decode_aggregator(value: &[u8], asn_len: usize) -> Option<Aggregator> {
    if value.len() != asn_len + 4 {
        return None;
    }
    let (asn, addr) = value.split_at_checked(asn_len)?;
    let asn = asn.iter().fold(0u32, |acc, b| acc << 8 | u32::from(*b));
    Some(Aggregator { asn, address: Ipv4Addr::from(read_u32(addr)?) })
}

fn read_u32(b: &[u8]) -> Option<u32> {
    Some(u32::from_be_bytes(b.try_into().ok()?))
}

/// Not a valid IPv4 host address: "this network", loopback, multicast, reserved, broadcast.
fn is_martian_v4(a: Ipv4Addr) -> bool {
    a.octets()[0] == 0 || a.is_loopback() || a.is_multicast() || a.octets()[0] >= 240
}

/// Checks that `family` can be accepted; if not, records why the attribute is ignored.
/// RFC 4760 §6 has a speaker use only families both sides advertised, and the attribute's
/// length is reliable, so one for another family is skipped rather than reset the session.
fn accept_family(
    afi: u16,
    safi: u8,
    ctx: &UpdateContext,
    code: u8,
    problems: &mut Problems,
) -> Option<Family> {
    match Family::from_wire(afi, safi) {
        Some(f) if ctx.families.contains(&f) => Some(f),
        _ => {
            problems.discard(
                code,
                "RFC 4760 §6: MP attribute for an AFI/SAFI that was not negotiated is ignored",
                format!("AFI {afi} SAFI {safi}"),
            );
            None
        }
    }
}

/// MP_REACH_NLRI (RFC 4760 §3). Returns `None` when the attribute is ignored.
fn decode_mp_reach(
    value: &[u8],
    whole: &[u8],
    ctx: &UpdateContext,
    announced: &mut Vec<IpNet>,
    problems: &mut Problems,
) -> Result<Option<(Family, NextHop)>, UpdateError> {
    // RFC 7606 §7.11 / RFC 4760 §7: when the NLRI cannot be located reliably the session is
    // reset with "Optional Attribute Error" carrying the attribute.
    let reset = |why: &str| {
        UpdateError::new(
            UpdateErrorSubcode::OptionalAttributeError,
            whole,
            format!("MP_REACH_NLRI: {why}"),
        )
    };
    let Some(&[afi_hi, afi_lo, safi, nh_len]) = value.get(..4) else {
        return Err(reset("shorter than AFI, SAFI and next hop length (RFC 7606 §7.11)"));
    };
    let Some(family) = accept_family(
        u16::from_be_bytes([afi_hi, afi_lo]),
        safi,
        ctx,
        type_code::MP_REACH_NLRI,
        problems,
    ) else {
        return Ok(None);
    };
    let nh_end = 4 + usize::from(nh_len);
    let nh = value
        .get(4..nh_end)
        .ok_or_else(|| reset("next hop overruns the attribute (RFC 7606 §7.11)"))?;
    // RFC 4760 §3: one Reserved octet sits between the next hop and the NLRI.
    let nlri =
        value.get(nh_end + 1..).ok_or_else(|| reset("Reserved octet missing (RFC 7606 §7.11)"))?;
    let next_hop = match (family.afi, nh) {
        (Afi::Ipv4, &[a, b, c, d]) => NextHop::V4(Ipv4Addr::new(a, b, c, d)),
        // RFC 2545 §3: a global address, optionally followed by a link-local one.
        (Afi::Ipv6, _) if nh.len() == 16 || nh.len() == 32 => {
            let global = read_v6(nh.get(..16)).unwrap_or(Ipv6Addr::UNSPECIFIED);
            let link_local = read_v6(nh.get(16..32));
            NextHop::V6 { global, link_local }
        }
        _ => {
            return Err(reset(
                "next hop length does not fit the address family, so the NLRI cannot be located (RFC 7606 §7.11)",
            ))
        }
    };
    // RFC 7606 §5.3: NLRI that cannot be parsed leaves only the session reset.
    decode_prefixes(nlri, family.afi, announced)
        .map_err(|e| reset(&format!("NLRI: {e} (RFC 7606 §5.3)")))?;
    if !next_hop_usable(&next_hop) {
        problems.withdraw(
            type_code::MP_REACH_NLRI,
            "RFC 7606 §7.11 / RFC 2545 §3: MP_REACH_NLRI next hop is not a unicast host address",
            format!("{next_hop:?}"),
        );
    }
    Ok(Some((family, next_hop)))
}

fn read_v6(b: Option<&[u8]>) -> Option<Ipv6Addr> {
    let octets: [u8; 16] = b?.try_into().ok()?;
    Some(Ipv6Addr::from(octets))
}

/// Semantic next-hop check: the routes need an address packets can be sent to. An IPv6 global
/// of `::` is accepted beside a link-local one (unnumbered peers send that).
fn next_hop_usable(nh: &NextHop) -> bool {
    match nh {
        NextHop::V4(a) => !is_martian_v4(*a),
        NextHop::V6 { global, link_local } => {
            !(global.is_multicast()
                || global.is_loopback()
                || (global.is_unspecified() && link_local.is_none()))
        }
        NextHop::Unspecified => false,
    }
}

/// MP_UNREACH_NLRI (RFC 4760 §4). Returns `None` when the attribute is ignored.
fn decode_mp_unreach(
    value: &[u8],
    whole: &[u8],
    ctx: &UpdateContext,
    withdrawn: &mut Vec<IpNet>,
    problems: &mut Problems,
) -> Result<Option<Family>, UpdateError> {
    let reset = |why: &str| {
        UpdateError::new(
            UpdateErrorSubcode::OptionalAttributeError,
            whole,
            format!("MP_UNREACH_NLRI: {why}"),
        )
    };
    let Some((&[afi_hi, afi_lo, safi], nlri)) = value.split_first_chunk::<3>() else {
        return Err(reset("shorter than AFI and SAFI (RFC 7606 §7.11)"));
    };
    let Some(family) = accept_family(
        u16::from_be_bytes([afi_hi, afi_lo]),
        safi,
        ctx,
        type_code::MP_UNREACH_NLRI,
        problems,
    ) else {
        return Ok(None);
    };
    decode_prefixes(nlri, family.afi, withdrawn)
        .map_err(|e| reset(&format!("withdrawn routes: {e} (RFC 7606 §5.3)")))?;
    Ok(Some(family))
}

// ---------------------------------------------------------------------------------------------
// Encoding

/// What the encoder needs to know about the receiving session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EncodeContext {
    /// Both sides advertised the 4-octet AS capability (RFC 6793 §3).
    pub four_octet_as: bool,
}

/// Appends one attribute: flags, type, length (extended when the value exceeds 255 octets,
/// RFC 4271 §4.3), then the value written by `write`.
fn put_attr(out: &mut Vec<u8>, attr_flags: u8, code: u8, write: impl FnOnce(&mut Vec<u8>)) {
    let start = out.len();
    out.extend_from_slice(&[attr_flags | flags::EXTENDED_LENGTH, code, 0, 0]);
    write(out);
    let len = out.len() - start - 4;
    if let Ok(short) = u8::try_from(len) {
        out.remove(start + 2);
        if let Some(f) = out.get_mut(start) {
            *f &= !flags::EXTENDED_LENGTH;
        }
        if let Some(l) = out.get_mut(start + 2) {
            *l = short;
        }
    } else if let Some(l) = out.get_mut(start + 2..start + 4) {
        // Values are bounded by the 4096-octet message; saturate rather than wrap.
        l.copy_from_slice(&u16::try_from(len).unwrap_or(u16::MAX).to_be_bytes());
    }
}

/// Writes the segments of `path`, splitting runs longer than 255 (the one-octet count).
/// With `two_octet`, ASNs above 65535 become AS_TRANS (RFC 6793 §4.2.2).
fn put_as_path(out: &mut Vec<u8>, path: &AsPath, two_octet: bool, skip_confed: bool) {
    for seg in path.segments() {
        if skip_confed && matches!(seg.kind, SegmentKind::ConfedSequence | SegmentKind::ConfedSet) {
            continue;
        }
        for chunk in seg.asns.chunks(255) {
            out.push(seg.kind as u8);
            out.push(u8::try_from(chunk.len()).unwrap_or(u8::MAX));
            for &asn in chunk {
                if two_octet {
                    let asn = u16::try_from(asn).unwrap_or(AS_TRANS as u16);
                    out.extend_from_slice(&asn.to_be_bytes());
                } else {
                    out.extend_from_slice(&asn.to_be_bytes());
                }
            }
        }
    }
}

/// Encodes every attribute of `attrs` except the MP ones, in type-code order. The NEXT_HOP
/// attribute is written only with `ipv4_next_hop` and a V4 next hop (IPv6 routes carry their
/// next hop in MP_REACH_NLRI, RFC 4760 §3). What to send to whom (LOCAL_PREF only to iBGP,
/// ORIGINATOR_ID only inside the cluster) is the export policy's business, not the encoder's.
pub fn encode_attributes(
    attrs: &PathAttributes,
    ctx: &EncodeContext,
    ipv4_next_hop: bool,
    out: &mut Vec<u8>,
) {
    const WELL_KNOWN: u8 = flags::TRANSITIVE;
    const OPT_TRANS: u8 = flags::OPTIONAL | flags::TRANSITIVE;
    const OPT_NON_TRANS: u8 = flags::OPTIONAL;
    let two_octet = !ctx.four_octet_as;

    put_attr(out, WELL_KNOWN, type_code::ORIGIN, |o| o.push(attrs.origin as u8));
    put_attr(out, WELL_KNOWN, type_code::AS_PATH, |o| {
        put_as_path(o, &attrs.as_path, two_octet, false)
    });
    if let (true, NextHop::V4(nh)) = (ipv4_next_hop, attrs.next_hop) {
        put_attr(out, WELL_KNOWN, type_code::NEXT_HOP, |o| o.extend_from_slice(&nh.octets()));
    }
    if let Some(med) = attrs.med {
        put_attr(out, OPT_NON_TRANS, type_code::MULTI_EXIT_DISC, |o| {
            o.extend_from_slice(&med.to_be_bytes())
        });
    }
    if let Some(pref) = attrs.local_pref {
        put_attr(out, WELL_KNOWN, type_code::LOCAL_PREF, |o| {
            o.extend_from_slice(&pref.to_be_bytes())
        });
    }
    if attrs.atomic_aggregate() {
        put_attr(out, WELL_KNOWN, type_code::ATOMIC_AGGREGATE, |_| {});
    }
    let wide_aggregator = attrs.aggregator().filter(|a| two_octet && a.asn > u32::from(u16::MAX));
    if let Some(agg) = attrs.aggregator() {
        put_attr(out, OPT_TRANS, type_code::AGGREGATOR, |o| {
            if two_octet {
                let asn = u16::try_from(agg.asn).unwrap_or(AS_TRANS as u16);
                o.extend_from_slice(&asn.to_be_bytes());
            } else {
                o.extend_from_slice(&agg.asn.to_be_bytes());
            }
            o.extend_from_slice(&agg.address.octets());
        });
    }
    if !attrs.communities.is_empty() {
        put_attr(out, OPT_TRANS, type_code::COMMUNITIES, |o| {
            attrs.communities.iter().for_each(|c| o.extend_from_slice(&c.to_be_bytes()))
        });
    }
    if let Some(id) = attrs.originator_id() {
        put_attr(out, OPT_NON_TRANS, type_code::ORIGINATOR_ID, |o| {
            o.extend_from_slice(&id.octets())
        });
    }
    if !attrs.cluster_list().is_empty() {
        put_attr(out, OPT_NON_TRANS, type_code::CLUSTER_LIST, |o| {
            attrs.cluster_list().iter().for_each(|c| o.extend_from_slice(&c.octets()))
        });
    }
    // RFC 6793 §4.2.2: a 2-octet peer gets AS4_PATH when the path holds ASNs that do not fit
    // in 2 octets, without confederation segments, and AS4_AGGREGATOR likewise.
    let needs_as4_path = two_octet
        && attrs.as_path.segments().any(|s| {
            !matches!(s.kind, SegmentKind::ConfedSequence | SegmentKind::ConfedSet)
                && s.asns.iter().any(|&a| a > u32::from(u16::MAX))
        });
    if needs_as4_path {
        put_attr(out, OPT_TRANS, type_code::AS4_PATH, |o| {
            put_as_path(o, &attrs.as_path, false, true)
        });
    }
    if let Some(agg) = wide_aggregator {
        put_attr(out, OPT_TRANS, type_code::AS4_AGGREGATOR, |o| {
            o.extend_from_slice(&agg.asn.to_be_bytes());
            o.extend_from_slice(&agg.address.octets());
        });
    }
    if !attrs.large_communities().is_empty() {
        put_attr(out, OPT_TRANS, type_code::LARGE_COMMUNITIES, |o| {
            for c in attrs.large_communities() {
                o.extend_from_slice(&c.global_admin.to_be_bytes());
                o.extend_from_slice(&c.local_data1.to_be_bytes());
                o.extend_from_slice(&c.local_data2.to_be_bytes());
            }
        });
    }
    for raw in attrs.unknown() {
        // Only unrecognized optional transitive attributes travel on (RFC 4271 §5), and a raw
        // copy of a type this encoder writes itself would be a duplicate.
        let transitive_optional = raw.flags & (flags::OPTIONAL | flags::TRANSITIVE) == OPT_TRANS;
        if !transitive_optional || expected_flags(raw.type_code).is_some() {
            continue;
        }
        // RFC 4271 §5: the Partial bit is set on an unrecognized transitive attribute passed on.
        let f = (raw.flags | flags::PARTIAL) & !flags::EXTENDED_LENGTH;
        put_attr(out, f, raw.type_code, |o| o.extend_from_slice(&raw.value));
    }
}

/// Octets of the MP_REACH_NLRI next hop for `next_hop`, if it can go there.
pub fn mp_next_hop_len(next_hop: &NextHop) -> Option<usize> {
    match next_hop {
        NextHop::V4(_) => Some(4),
        NextHop::V6 { link_local: None, .. } => Some(16),
        NextHop::V6 { link_local: Some(_), .. } => Some(32),
        NextHop::Unspecified => None,
    }
}

/// Appends MP_REACH_NLRI for `family` (RFC 4760 §3). The caller has checked the prefixes are
/// of the family and the next hop fits (see [`mp_next_hop_len`]).
pub fn encode_mp_reach(family: Family, next_hop: &NextHop, nlri: &[IpNet], out: &mut Vec<u8>) {
    put_attr(out, flags::OPTIONAL, type_code::MP_REACH_NLRI, |o| {
        o.extend_from_slice(&(family.afi as u16).to_be_bytes());
        o.push(family.safi as u8);
        match next_hop {
            NextHop::V4(a) => {
                o.push(4);
                o.extend_from_slice(&a.octets());
            }
            NextHop::V6 { global, link_local } => {
                o.push(if link_local.is_some() { 32 } else { 16 });
                o.extend_from_slice(&global.octets());
                if let Some(ll) = link_local {
                    o.extend_from_slice(&ll.octets());
                }
            }
            NextHop::Unspecified => o.push(0),
        }
        o.push(0); // Reserved
        nlri.iter().for_each(|n| encode_prefix(n, o));
    });
}

/// Appends MP_UNREACH_NLRI for `family` (RFC 4760 §4).
pub fn encode_mp_unreach(family: Family, withdrawn: &[IpNet], out: &mut Vec<u8>) {
    put_attr(out, flags::OPTIONAL, type_code::MP_UNREACH_NLRI, |o| {
        o.extend_from_slice(&(family.afi as u16).to_be_bytes());
        o.push(family.safi as u8);
        withdrawn.iter().for_each(|n| encode_prefix(n, o));
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bgp::wire::attributes::RareAttributes;

    fn ctx(four: bool) -> UpdateContext {
        UpdateContext {
            four_octet_as: four,
            ebgp: true,
            families: vec![Family::IPV4_UNICAST, Family::IPV6_UNICAST],
        }
    }

    fn decode(block: &[u8], c: &UpdateContext) -> DecodedAttributes {
        decode_attributes(block, c, &mut Vec::new(), &mut Vec::new()).unwrap()
    }

    #[test]
    fn extended_length_only_above_255() {
        let mut out = Vec::new();
        put_attr(&mut out, 0xc0, 99, |o| o.extend_from_slice(&[7; 255]));
        assert_eq!(&out[..3], &[0xc0, 99, 255]);
        assert_eq!(out.len(), 258);
        out.clear();
        put_attr(&mut out, 0xc0, 99, |o| o.extend_from_slice(&[7; 256]));
        assert_eq!(&out[..4], &[0xd0, 99, 1, 0]);
        assert_eq!(out.len(), 260);
    }

    #[test]
    fn two_octet_encoding_uses_as_trans_and_as4_path() {
        let attrs = PathAttributes {
            as_path: AsPath::sequence(vec![65001, 4_200_000_000]),
            rare: RareAttributes {
                aggregator: Some(Aggregator {
                    asn: 4_200_000_001,
                    address: Ipv4Addr::new(10, 0, 0, 1),
                }),
                ..Default::default()
            }
            .into(),
            ..Default::default()
        };
        let mut out = Vec::new();
        encode_attributes(&attrs, &EncodeContext { four_octet_as: false }, false, &mut out);
        // AS_PATH: one sequence of 2 two-octet ASNs, the second AS_TRANS.
        let as_path = [0x40, 2, 6, 2, 2, 0xfd, 0xe9, 0x5b, 0xa0];
        assert!(out.windows(as_path.len()).any(|w| w == as_path));
        let decoded = decode(&out, &ctx(false));
        assert!(decoded.present.contains(type_code::AS4_PATH));
        assert!(decoded.present.contains(type_code::AS4_AGGREGATOR));
        assert_eq!(decoded.attrs.as_path, attrs.as_path);
        assert_eq!(decoded.attrs.aggregator(), attrs.aggregator());
    }

    #[test]
    fn as4_merge_keeps_leading_as_path_part() {
        // AS_PATH (2-octet): 65001 65002 23456 23456; AS4_PATH: 4200000000 4200000001.
        let block = [
            0x40, 2, 10, 2, 4, 0xfd, 0xe9, 0xfd, 0xea, 0x5b, 0xa0, 0x5b, 0xa0, //
            0xc0, 17, 10, 2, 2, 0xfa, 0x56, 0xea, 0x00, 0xfa, 0x56, 0xea, 0x01,
        ];
        let d = decode(&block, &ctx(false));
        let asns: Vec<u32> = d.attrs.as_path.iter_asns().collect();
        assert_eq!(asns, vec![65001, 65002, 4_200_000_000, 4_200_000_001]);
    }

    #[test]
    fn as4_path_longer_than_as_path_is_ignored() {
        let block = [
            0x40, 2, 4, 2, 1, 0xfd, 0xe9, //
            0xc0, 17, 10, 2, 2, 0xfa, 0x56, 0xea, 0x00, 0xfa, 0x56, 0xea, 0x01,
        ];
        let d = decode(&block, &ctx(false));
        assert_eq!(d.attrs.as_path, AsPath::sequence(vec![65001]));
        assert!(d.problems.discarded.iter().any(|p| p.rule.contains("§4.2.3")));
        assert!(d.problems.treat_as_withdraw.is_none());
    }

    #[test]
    fn aggregator_with_real_asn_ignores_as4_attributes() {
        let block = [
            0x40, 2, 4, 2, 1, 0x5b, 0xa0, //
            0xc0, 7, 6, 0xfd, 0xe9, 10, 0, 0, 1, //
            0xc0, 17, 6, 2, 1, 0xfa, 0x56, 0xea, 0x00, //
            0xc0, 18, 8, 0xfa, 0x56, 0xea, 0x00, 10, 0, 0, 2,
        ];
        let d = decode(&block, &ctx(false));
        assert_eq!(d.attrs.as_path, AsPath::sequence(vec![AS_TRANS]));
        assert_eq!(
            d.attrs.aggregator(),
            Some(Aggregator { asn: 65001, address: Ipv4Addr::new(10, 0, 0, 1) })
        );
    }

    #[test]
    fn as4_path_from_four_octet_speaker_is_discarded() {
        let block = [0xc0, 17, 6, 2, 1, 0xfa, 0x56, 0xea, 0x00];
        let d = decode(&block, &ctx(true));
        assert!(!d.present.contains(type_code::AS4_PATH));
        assert_eq!(d.problems.discarded.len(), 1);
        assert_eq!(d.problems.discarded[0].type_code, type_code::AS4_PATH);
    }

    #[test]
    fn malformed_as_paths() {
        for (value, what) in [
            (&[2u8, 0][..], "zero-length segment"),
            (&[9, 1, 0, 0, 0, 1][..], "unknown segment type"),
            (&[2, 2, 0, 0, 0, 1][..], "segment overrun"),
            (&[2][..], "truncated header"),
        ] {
            let mut block = vec![0x40, 2, value.len() as u8];
            block.extend_from_slice(value);
            let d = decode(&block, &ctx(true));
            let p = d.problems.treat_as_withdraw.unwrap_or_else(|| panic!("{what}"));
            assert_eq!(p.type_code, type_code::AS_PATH, "{what}");
            assert!(!d.present.contains(type_code::AS_PATH), "{what}");
        }
    }

    #[test]
    fn as_zero_in_as_path_is_withdrawn_and_in_aggregator_discarded() {
        // RFC 7607 §2. AS_PATH: SEQUENCE of 65001, 0.
        let block = [0x40, 2, 10, 2, 2, 0, 0, 0xfd, 0xe9, 0, 0, 0, 0];
        let d = decode(&block, &ctx(true));
        let p = d.problems.treat_as_withdraw.unwrap_or_else(|| panic!("AS 0 accepted"));
        assert!(p.rule.contains("RFC 7607"), "{}", p.rule);
        // AGGREGATOR: AS 0, 192.0.2.1.
        let block = [0xc0, 7, 8, 0, 0, 0, 0, 192, 0, 2, 1];
        let d = decode(&block, &ctx(true));
        assert!(d.problems.treat_as_withdraw.is_none());
        assert_eq!(d.attrs.aggregator(), None);
        assert!(d.problems.discarded.iter().any(|p| p.rule.contains("RFC 7607")));
    }

    #[test]
    fn confed_segment_from_ebgp_is_withdrawn_but_ibgp_keeps_it() {
        let block = [0x40, 2, 6, 3, 1, 0, 0, 0xfd, 0xe9];
        let d = decode(&block, &ctx(true));
        assert!(d.problems.treat_as_withdraw.is_some());
        let ibgp = UpdateContext { ebgp: false, ..ctx(true) };
        let d = decode(&block, &ibgp);
        assert!(d.problems.treat_as_withdraw.is_none());
        assert_eq!(
            d.attrs.as_path.segments().next().map(|s| s.kind),
            Some(SegmentKind::ConfedSequence)
        );
    }

    #[test]
    fn unknown_transitive_kept_non_transitive_dropped() {
        let block = [0xc0, 99, 2, 1, 2, 0x80, 98, 1, 7];
        let d = decode(&block, &ctx(true));
        assert_eq!(
            *d.attrs.unknown(),
            [RawAttribute { flags: 0xc0, type_code: 99, value: vec![1, 2] }]
        );
        assert!(d.problems.discarded.is_empty() && d.problems.treat_as_withdraw.is_none());
        let mut out = Vec::new();
        encode_attributes(&d.attrs, &EncodeContext { four_octet_as: true }, false, &mut out);
        // Passed on with the Partial bit set.
        assert!(out.windows(5).any(|w| w == [0xe0, 99, 2, 1, 2]));
    }
}
