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
