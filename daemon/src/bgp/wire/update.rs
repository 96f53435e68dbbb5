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
