//! rtnetlink messages, built and parsed by hand: route (rtmsg), nexthop object (nhmsg), link
//! (ifinfomsg) and address (ifaddrmsg) messages, and the ACK/error replies. Plain functions on
//! byte buffers, no I/O. Layouts from `linux/netlink.h`, `linux/rtnetlink.h`, `linux/nexthop.h`,
//! `linux/if_link.h` (see rtnetlink(7), netlink(7)).
//!
//! Why not `netlink-packet-route`: its messages own their attributes (a `RouteMessage` holds a
//! `Vec<RouteAttribute>`, each built and then serialised), while the writer appends thousands
//! of requests straight into one reused buffer per `sendmsg` and the monitor parses a million
//! notifications without allocating per message; a million-route install is bounded by the
//! kernel plus this path (docs/BENCHMARKS.md). The layouts used here are a dozen fixed structs
//! and attribute types, unit-tested and fuzzed (`daemon/fuzz`, target `kernel_messages`).

use ipnet::IpNet;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

pub const NLMSG_HDRLEN: usize = 16;
pub const NLMSG_ERROR: u16 = 2;
pub const NLMSG_DONE: u16 = 3;

pub const NLM_F_REQUEST: u16 = 0x1;
pub const NLM_F_ACK: u16 = 0x4;
pub const NLM_F_DUMP: u16 = 0x300;
pub const NLM_F_REPLACE: u16 = 0x100;
pub const NLM_F_CREATE: u16 = 0x400;
/// On an NLMSG_ERROR reply: extended-ACK TLVs follow.
const NLM_F_ACK_TLVS: u16 = 0x200;
/// On an NLMSG_ERROR reply: the request's payload was not echoed (NETLINK_CAP_ACK).
const NLM_F_CAPPED: u16 = 0x100;
const NLMSGERR_ATTR_MSG: u16 = 1;

pub const RTM_NEWLINK: u16 = 16;
pub const RTM_DELLINK: u16 = 17;
pub const RTM_GETLINK: u16 = 18;
pub const RTM_NEWADDR: u16 = 20;
pub const RTM_DELADDR: u16 = 21;
pub const RTM_NEWROUTE: u16 = 24;
pub const RTM_DELROUTE: u16 = 25;
pub const RTM_GETROUTE: u16 = 26;
pub const RTM_NEWNEXTHOP: u16 = 104;
pub const RTM_DELNEXTHOP: u16 = 105;
pub const RTM_GETNEXTHOP: u16 = 106;

/// Multicast groups (`enum rtnetlink_groups`).
pub const RTNLGRP_LINK: u32 = 1;
pub const RTNLGRP_IPV4_IFADDR: u32 = 5;
pub const RTNLGRP_IPV4_ROUTE: u32 = 7;
pub const RTNLGRP_IPV6_IFADDR: u32 = 9;
pub const RTNLGRP_IPV6_ROUTE: u32 = 11;
pub const RTNLGRP_NEXTHOP: u32 = 32;

pub const AF_UNSPEC: u8 = 0;
pub const AF_INET: u8 = 2;
pub const AF_INET6: u8 = 10;

/// `rtm_protocol` / `nh_protocol` of the routes and nexthops uplink owns: `proto uplink` once
/// `rt_protos.d/uplink.conf` is installed in `/etc/iproute2/rt_protos.d/` (`proto 117`
/// without it). uplink's own number, so that its routes are never taken for another
/// daemon's nor theirs for its own: a start, a resync or a shutdown touches only routes and
/// nexthops with it. 117 is free: the kernel reserves 0-4 and names 8-18, 42 (babel), 99
/// (openr) and 186-192 (`linux/rtnetlink.h`); FRR's zebra uses 186-198 (196 is its static
/// routes), BIRD 12, Calico 80. (Earlier versions wrote 186, zebra's BGP number.)
pub const RTPROT_UPLINK: u8 = 117;
/// zebra's own nexthop objects (FRR): see `Planner::zebra_seen`.
pub const RTPROT_ZEBRA: u8 = 11;
/// zebra's number for BGP routes (FRR, and the number earlier uplinks wrote): another
/// daemon's BGP routes, which never resolve BGP next hops.
pub const RTPROT_BGP: u8 = 186;
pub const RT_TABLE_MAIN: u32 = 254;
const RT_TABLE_COMPAT: u8 = 252;
const RT_SCOPE_UNIVERSE: u8 = 0;
pub const RTN_UNICAST: u8 = 1;

const RTA_DST: u16 = 1;
const RTA_OIF: u16 = 4;
const RTA_GATEWAY: u16 = 5;
const RTA_PRIORITY: u16 = 6;
const RTA_MULTIPATH: u16 = 9;
const RTA_TABLE: u16 = 15;
const RTA_NH_ID: u16 = 30;

const NHA_ID: u16 = 1;
const NHA_GROUP: u16 = 2;
const NHA_OIF: u16 = 5;
const NHA_GATEWAY: u16 = 6;

const IFLA_IFNAME: u16 = 3;
const IFLA_MASTER: u16 = 10;
const IFLA_LINKINFO: u16 = 18;
const IFLA_INFO_KIND: u16 = 1;
const IFLA_INFO_DATA: u16 = 2;
const IFLA_VRF_TABLE: u16 = 1;
const IFF_UP: u32 = 0x1;
const IFF_LOWER_UP: u32 = 0x1_0000;

const NLA_TYPE_MASK: u16 = 0x3fff;

fn align4(n: usize) -> usize {
    (n + 3) & !3
}

/// Appends one netlink message to `out`: the header is written by [`begin`], the length is
/// patched by [`finish`], so attributes can be appended in between without precomputing sizes.
pub struct MsgBuilder<'a> {
    out: &'a mut Vec<u8>,
    start: usize,
}

impl<'a> MsgBuilder<'a> {
    pub fn begin(out: &'a mut Vec<u8>, kind: u16, flags: u16, seq: u32) -> Self {
        let start = out.len();
        out.extend_from_slice(&0u32.to_ne_bytes());
        out.extend_from_slice(&kind.to_ne_bytes());
        out.extend_from_slice(&flags.to_ne_bytes());
        out.extend_from_slice(&seq.to_ne_bytes());
        out.extend_from_slice(&0u32.to_ne_bytes());
        Self { out, start }
    }

    fn bytes(&mut self, b: &[u8]) {
        self.out.extend_from_slice(b);
    }

    fn attr(&mut self, kind: u16, payload: &[u8]) {
        let len = 4 + payload.len();
        self.out.extend_from_slice(&(len as u16).to_ne_bytes());
        self.out.extend_from_slice(&kind.to_ne_bytes());
        self.out.extend_from_slice(payload);
        self.out.resize(self.out.len() + (align4(len) - len), 0);
    }

    fn attr_u32(&mut self, kind: u16, v: u32) {
        self.attr(kind, &v.to_ne_bytes());
    }

    pub fn finish(self) {
        let len = (self.out.len() - self.start) as u32;
        if let Some(slot) = self.out.get_mut(self.start..self.start + 4) {
            slot.copy_from_slice(&len.to_ne_bytes());
        }
    }
}

/// Asks for an ACK on the message that starts at `start`. Requests are sent without one: the
/// kernel answers a failed request anyway (netlink(7)), so only the last request of a batch
/// asks, and its ACK says that every request before it has been processed.
pub fn request_ack(buf: &mut [u8], start: usize) {
    if let Some(flags) = buf.get_mut(start + 6..start + 8) {
        if let Ok(bytes) = <[u8; 2]>::try_from(&*flags) {
            flags.copy_from_slice(&(u16::from_ne_bytes(bytes) | NLM_F_ACK).to_ne_bytes());
        }
    }
}

/// An address's octets without a heap allocation (this runs once per route written).
struct IpBytes {
    octets: [u8; 16],
    len: usize,
}

impl std::ops::Deref for IpBytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        self.octets.get(..self.len).unwrap_or(&[])
    }
}

fn ip_bytes(ip: &IpAddr) -> IpBytes {
    match ip {
        IpAddr::V4(a) => {
            let mut octets = [0; 16];
            if let Some(head) = octets.get_mut(..4) {
                head.copy_from_slice(&a.octets());
            }
            IpBytes { octets, len: 4 }
        }
        IpAddr::V6(a) => IpBytes { octets: a.octets(), len: 16 },
    }
}

fn family_of(net: &IpNet) -> u8 {
    match net {
        IpNet::V4(_) => AF_INET,
        IpNet::V6(_) => AF_INET6,
    }
}

/// One next hop as the kernel needs it: a gateway on an interface.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Hop {
    pub gateway: IpAddr,
    pub ifindex: u32,
}

/// Where a route points.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RouteTarget<'a> {
    /// A nexthop object or group (`RTA_NH_ID`).
    Object(u32),
    /// Inline next hops (`RTA_GATEWAY`/`RTA_OIF`, or `RTA_MULTIPATH` for more than one), for
    /// kernels without nexthop objects.
    Inline(&'a [Hop]),
}

/// The key of a route in the kernel: table, destination and metric.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RouteKey {
    pub table: u32,
    pub prefix: IpNet,
    pub metric: u32,
}

fn rtmsg(m: &mut MsgBuilder<'_>, key: &RouteKey, rtype: u8) {
    let table = u8::try_from(key.table).unwrap_or(RT_TABLE_COMPAT);
    m.bytes(&[
        family_of(&key.prefix),
        key.prefix.prefix_len(),
        0,
        0,
        table,
        RTPROT_UPLINK,
        RT_SCOPE_UNIVERSE,
        rtype,
    ]);
    m.bytes(&0u32.to_ne_bytes());
    m.attr_u32(RTA_TABLE, key.table);
    m.attr(RTA_DST, &ip_bytes(&key.prefix.network()));
    m.attr_u32(RTA_PRIORITY, key.metric);
}

/// RTM_NEWROUTE with NLM_F_CREATE|NLM_F_REPLACE: idempotent add-or-replace of our route.
pub fn new_route(out: &mut Vec<u8>, seq: u32, key: &RouteKey, target: RouteTarget<'_>) {
    let flags = NLM_F_REQUEST | NLM_F_CREATE | NLM_F_REPLACE;
    let mut m = MsgBuilder::begin(out, RTM_NEWROUTE, flags, seq);
    rtmsg(&mut m, key, RTN_UNICAST);
    match target {
        RouteTarget::Object(id) => m.attr_u32(RTA_NH_ID, id),
        RouteTarget::Inline(hops) => match hops {
            [one] => {
                m.attr(RTA_GATEWAY, &ip_bytes(&one.gateway));
                m.attr_u32(RTA_OIF, one.ifindex);
            }
            many => {
                // rtnetlink(7): RTA_MULTIPATH is a list of struct rtnexthop, each followed by
                // its own attributes.
                let mut nested = Vec::new();
                for hop in many {
                    let gw = ip_bytes(&hop.gateway);
                    let gw_attr = align4(4 + gw.len());
                    let len = 8 + gw_attr;
                    nested.extend_from_slice(&(len as u16).to_ne_bytes());
                    nested.push(0); // rtnh_flags
                    nested.push(0); // rtnh_hops: weight 1
                    nested.extend_from_slice(&hop.ifindex.to_ne_bytes());
                    nested.extend_from_slice(&((4 + gw.len()) as u16).to_ne_bytes());
                    nested.extend_from_slice(&RTA_GATEWAY.to_ne_bytes());
                    nested.extend_from_slice(&gw);
                    nested.resize(nested.len() + (gw_attr - 4 - gw.len()), 0);
                }
                m.attr(RTA_MULTIPATH, &nested);
            }
        },
    }
    m.finish();
}

pub fn del_route(out: &mut Vec<u8>, seq: u32, key: &RouteKey) {
    let mut m = MsgBuilder::begin(out, RTM_DELROUTE, NLM_F_REQUEST, seq);
    rtmsg(&mut m, key, RTN_UNICAST);
    m.finish();
}

/// `struct nhmsg`; the kernel refuses a protocol on delete and get requests.
fn nhmsg(m: &mut MsgBuilder<'_>, family: u8, protocol: u8) {
    m.bytes(&[family, 0, protocol, 0]);
    m.bytes(&0u32.to_ne_bytes());
}

/// RTM_NEWNEXTHOP for one gateway on one interface, created or replaced in place.
pub fn new_nexthop(out: &mut Vec<u8>, seq: u32, id: u32, hop: &Hop) {
    let flags = NLM_F_REQUEST | NLM_F_CREATE | NLM_F_REPLACE;
    let mut m = MsgBuilder::begin(out, RTM_NEWNEXTHOP, flags, seq);
    let family = if hop.gateway.is_ipv4() { AF_INET } else { AF_INET6 };
    nhmsg(&mut m, family, RTPROT_UPLINK);
    m.attr_u32(NHA_ID, id);
    m.attr_u32(NHA_OIF, hop.ifindex);
    m.attr(NHA_GATEWAY, &ip_bytes(&hop.gateway));
    m.finish();
}

/// RTM_NEWNEXTHOP for a multipath group of equal weights. With NLM_F_REPLACE the kernel swaps
/// the members under every route that uses the group.
pub fn new_group(out: &mut Vec<u8>, seq: u32, id: u32, members: &[u32]) {
    let flags = NLM_F_REQUEST | NLM_F_CREATE | NLM_F_REPLACE;
    let mut m = MsgBuilder::begin(out, RTM_NEWNEXTHOP, flags, seq);
    nhmsg(&mut m, AF_UNSPEC, RTPROT_UPLINK);
    m.attr_u32(NHA_ID, id);
    let mut group = Vec::with_capacity(members.len() * 8);
    for member in members {
        // struct nexthop_grp { u32 id; u8 weight (minus one); u8 resvd1; u16 resvd2 }
        group.extend_from_slice(&member.to_ne_bytes());
        group.extend_from_slice(&[0, 0, 0, 0]);
    }
    m.attr(NHA_GROUP, &group);
    m.finish();
}

pub fn del_nexthop(out: &mut Vec<u8>, seq: u32, id: u32) {
    let mut m = MsgBuilder::begin(out, RTM_DELNEXTHOP, NLM_F_REQUEST, seq);
    nhmsg(&mut m, AF_UNSPEC, 0);
    m.attr_u32(NHA_ID, id);
    m.finish();
}

/// A dump request: links, routes of one family, or nexthop objects.
pub fn dump(out: &mut Vec<u8>, seq: u32, kind: u16, family: u8) {
    let mut m = MsgBuilder::begin(out, kind, NLM_F_REQUEST | NLM_F_DUMP, seq);
    match kind {
        RTM_GETLINK => {
            m.bytes(&[family, 0, 0, 0]);
            m.bytes(&[0; 12]);
        }
        RTM_GETNEXTHOP => nhmsg(&mut m, family, 0),
        _ => {
            m.bytes(&[family, 0, 0, 0, 0, 0, 0, 0]);
            m.bytes(&0u32.to_ne_bytes());
        }
    }
    m.finish();
}

/// One message split out of a datagram.
#[derive(Debug, Clone, Copy)]
pub struct Message<'a> {
    pub kind: u16,
    pub flags: u16,
    pub seq: u32,
    pub pid: u32,
    pub payload: &'a [u8],
}

/// Splits a datagram into messages; stops at the first malformed header.
pub fn messages(mut buf: &[u8]) -> impl Iterator<Item = Message<'_>> {
    std::iter::from_fn(move || {
        let header = buf.get(..NLMSG_HDRLEN)?;
        let len = u32_at(header, 0)? as usize;
        if len < NLMSG_HDRLEN {
            return None;
        }
        let msg = buf.get(..len)?;
        let message = Message {
            kind: u16_at(header, 4)?,
            flags: u16_at(header, 6)?,
            seq: u32_at(header, 8)?,
            pid: u32_at(header, 12)?,
            payload: msg.get(NLMSG_HDRLEN..)?,
        };
        buf = buf.get(align4(len)..).unwrap_or(&[]);
        Some(message)
    })
}

fn u16_at(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_ne_bytes(b.get(at..at + 2)?.try_into().ok()?))
}

fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_ne_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

fn i32_at(b: &[u8], at: usize) -> Option<i32> {
    Some(i32::from_ne_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

/// Iterates `(type, payload)` over a run of attributes.
fn attrs(mut buf: &[u8]) -> impl Iterator<Item = (u16, &[u8])> {
    std::iter::from_fn(move || {
        let len = u16_at(buf, 0)? as usize;
        let kind = u16_at(buf, 2)? & NLA_TYPE_MASK;
        if len < 4 {
            return None;
        }
        let payload = buf.get(4..len)?;
        buf = buf.get(align4(len)..).unwrap_or(&[]);
        Some((kind, payload))
    })
}

fn ip_from(payload: &[u8]) -> Option<IpAddr> {
    match payload.len() {
        4 => Some(IpAddr::V4(Ipv4Addr::from(<[u8; 4]>::try_from(payload).ok()?))),
        16 => Some(IpAddr::V6(Ipv6Addr::from(<[u8; 16]>::try_from(payload).ok()?))),
        _ => None,
    }
}

fn u32_from(payload: &[u8]) -> Option<u32> {
    u32_at(payload, 0)
}

/// The outcome of an NLMSG_ERROR reply: the request's sequence number, and its errno (0 = ACK)
/// with the kernel's extended-ACK message if any.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ack {
    pub seq: u32,
    pub errno: i32,
    pub message: Option<String>,
}

pub fn parse_ack(msg: &Message<'_>) -> Option<Ack> {
    if msg.kind != NLMSG_ERROR {
        return None;
    }
    let error = i32_at(msg.payload, 0)?;
    let original = msg.payload.get(4..4 + NLMSG_HDRLEN)?;
    let original_len = u32_at(original, 0)? as usize;
    let seq = u32_at(original, 8)?;
    let mut message = None;
    if msg.flags & NLM_F_ACK_TLVS != 0 {
        let tlv_start =
            if msg.flags & NLM_F_CAPPED != 0 { 4 + NLMSG_HDRLEN } else { 4 + align4(original_len) };
        for (kind, payload) in attrs(msg.payload.get(tlv_start..).unwrap_or(&[])) {
            if kind == NLMSGERR_ATTR_MSG {
                let text = payload.split(|b| *b == 0).next().unwrap_or(&[]);
                message = Some(String::from_utf8_lossy(text).into_owned());
            }
        }
    }
    Some(Ack { seq, errno: error.checked_neg().unwrap_or(i32::MAX), message })
}

/// A kernel route, as much of it as resolution and reconciliation need.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KernelRoute {
    pub table: u32,
    pub prefix: IpNet,
    pub protocol: u8,
    pub route_type: u8,
    pub metric: u32,
    pub nh_id: Option<u32>,
    /// Gateway (if any) and interface of each next hop; empty for routes through an object.
    pub hops: Vec<(Option<IpAddr>, u32)>,
}

pub fn parse_route(payload: &[u8]) -> Option<KernelRoute> {
    let header = payload.get(..12)?;
    let family = *header.first()?;
    let dst_len = *header.get(1)?;
    let mut table = u32::from(*header.get(4)?);
    let protocol = *header.get(5)?;
    let route_type = *header.get(7)?;
    let mut dst = None;
    let mut gateway = None;
    let mut oif = None;
    let mut metric = 0;
    let mut nh_id = None;
    let mut hops = Vec::new();
    for (kind, value) in attrs(payload.get(12..)?) {
        match kind {
            RTA_DST => dst = ip_from(value),
            RTA_GATEWAY => gateway = ip_from(value),
            RTA_OIF => oif = u32_from(value),
            RTA_PRIORITY => metric = u32_from(value).unwrap_or(0),
            RTA_TABLE => table = u32_from(value).unwrap_or(table),
            RTA_NH_ID => nh_id = u32_from(value),
            RTA_MULTIPATH => {
                let mut rest = value;
                while let Some(len) = u16_at(rest, 0).map(usize::from) {
                    let Some(one) = rest.get(..len).filter(|_| len >= 8) else { break };
                    let ifindex = u32_at(one, 4).unwrap_or(0);
                    let gw = attrs(one.get(8..).unwrap_or(&[]))
                        .find(|(k, _)| *k == RTA_GATEWAY)
                        .and_then(|(_, v)| ip_from(v));
                    hops.push((gw, ifindex));
                    rest = rest.get(align4(len)..).unwrap_or(&[]);
                }
            }
            _ => {}
        }
    }
    if let Some(ifindex) = oif {
        hops.push((gateway, ifindex));
    }
    let address = dst.unwrap_or(match family {
        AF_INET6 => IpAddr::V6(Ipv6Addr::UNSPECIFIED),
        _ => IpAddr::V4(Ipv4Addr::UNSPECIFIED),
    });
    if (family == AF_INET) != address.is_ipv4() {
        return None;
    }
    let prefix = IpNet::new(address, dst_len).ok()?;
    Some(KernelRoute { table, prefix, protocol, route_type, metric, nh_id, hops })
}

/// A nexthop object or group in the kernel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KernelNexthop {
    pub id: u32,
    pub protocol: u8,
    /// A group (it has `NHA_GROUP`), not a single next hop.
    pub group: bool,
    /// A single next hop's gateway and interface.
    pub gateway: Option<IpAddr>,
    pub ifindex: Option<u32>,
    /// A group's member ids.
    pub members: Vec<u32>,
}

pub fn parse_nexthop(payload: &[u8]) -> Option<KernelNexthop> {
    let protocol = *payload.get(2)?;
    let mut nh = KernelNexthop {
        id: 0,
        protocol,
        group: false,
        gateway: None,
        ifindex: None,
        members: Vec::new(),
    };
    let mut id = None;
    for (kind, value) in attrs(payload.get(8..)?) {
        match kind {
            NHA_ID => id = u32_from(value),
            NHA_GATEWAY => nh.gateway = ip_from(value),
            NHA_OIF => nh.ifindex = u32_from(value),
            NHA_GROUP => {
                nh.group = true;
                // struct nexthop_grp: u32 id, u8 weight, u8 resvd1, u16 resvd2.
                nh.members = value.chunks_exact(8).filter_map(|m| u32_at(m, 0)).collect();
            }
            _ => {}
        }
    }
    nh.id = id?;
    Some(nh)
}

/// A network interface: whether it can forward, and the table if it is a VRF device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KernelLink {
    pub index: u32,
    pub name: String,
    pub up: bool,
    pub vrf_table: Option<u32>,
    pub master: Option<u32>,
}

pub fn parse_link(payload: &[u8]) -> Option<KernelLink> {
    let index = u32_at(payload, 4)?;
    let flags = u32_at(payload, 8)?;
    let mut link = KernelLink {
        index,
        name: String::new(),
        up: flags & IFF_UP != 0 && flags & IFF_LOWER_UP != 0,
        vrf_table: None,
        master: None,
    };
    for (kind, value) in attrs(payload.get(16..)?) {
        match kind {
            IFLA_IFNAME => {
                let text = value.split(|b| *b == 0).next().unwrap_or(&[]);
                link.name = String::from_utf8_lossy(text).into_owned();
            }
            IFLA_MASTER => link.master = u32_from(value),
            IFLA_LINKINFO => {
                let mut is_vrf = false;
                let mut table = None;
                for (k, v) in attrs(value) {
                    match k {
                        IFLA_INFO_KIND => is_vrf = v.split(|b| *b == 0).next() == Some(b"vrf"),
                        IFLA_INFO_DATA => {
                            table = attrs(v)
                                .find(|(k, _)| *k == IFLA_VRF_TABLE)
                                .and_then(|(_, v)| u32_from(v));
                        }
                        _ => {}
                    }
                }
                if is_vrf {
                    link.vrf_table = table;
                }
            }
            _ => {}
        }
    }
    Some(link)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn net(s: &str) -> IpNet {
        s.parse().unwrap()
    }

    #[test]
    fn route_to_a_group_round_trips_through_the_parser() {
        let mut buf = Vec::new();
        let key = RouteKey { table: 100, prefix: net("10.1.0.0/24"), metric: 20 };
        new_route(&mut buf, 7, &key, RouteTarget::Object(42));
        let msgs: Vec<_> = messages(&buf).collect();
        assert_eq!(msgs.len(), 1);
        assert_eq!((msgs[0].kind, msgs[0].seq), (RTM_NEWROUTE, 7));
        assert_eq!(msgs[0].flags, NLM_F_REQUEST | NLM_F_CREATE | NLM_F_REPLACE);
        let mut acked = buf.clone();
        request_ack(&mut acked, 0);
        let msg = messages(&acked).next().unwrap();
        assert_eq!(msg.flags, NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE | NLM_F_REPLACE);
        // 16 header + 12 rtmsg + 4 attributes of 8 bytes.
        assert_eq!(buf.len(), 16 + 12 + 8 * 4);
        let route = parse_route(msgs[0].payload).unwrap();
        assert_eq!(route.table, 100);
        assert_eq!(route.prefix, key.prefix);
        assert_eq!(route.protocol, RTPROT_UPLINK);
        assert_eq!(route.metric, 20);
        assert_eq!(route.nh_id, Some(42));
    }

    #[test]
    fn multipath_route_carries_every_hop() {
        let mut buf = Vec::new();
        let key = RouteKey { table: 254, prefix: net("2001:db8::/32"), metric: 20 };
        let hops = vec![
            Hop { gateway: "fe80::1".parse().unwrap(), ifindex: 3 },
            Hop { gateway: "fe80::2".parse().unwrap(), ifindex: 4 },
        ];
        new_route(&mut buf, 1, &key, RouteTarget::Inline(&hops));
        let msg = messages(&buf).next().unwrap();
        let route = parse_route(msg.payload).unwrap();
        assert_eq!(route.prefix, key.prefix);
        let parsed: Vec<_> = route.hops.iter().map(|(g, i)| (g.unwrap(), *i)).collect();
        assert_eq!(parsed, hops.iter().map(|h| (h.gateway, h.ifindex)).collect::<Vec<_>>());
    }

    #[test]
    fn several_messages_in_one_buffer_split_back() {
        let mut buf = Vec::new();
        let hop = Hop { gateway: "10.0.0.1".parse().unwrap(), ifindex: 2 };
        new_nexthop(&mut buf, 1, 500, &hop);
        new_group(&mut buf, 2, 501, &[500, 502]);
        del_route(&mut buf, 3, &RouteKey { table: 254, prefix: net("0.0.0.0/0"), metric: 20 });
        del_nexthop(&mut buf, 4, 501);
        let msgs: Vec<_> = messages(&buf).collect();
        // The kernel refuses a delete with a protocol in the header.
        let deleted = parse_nexthop(msgs[3].payload).unwrap();
        assert_eq!((deleted.id, deleted.protocol, deleted.group), (501, 0, false));
        assert_eq!(msgs.iter().map(|m| m.seq).collect::<Vec<_>>(), vec![1, 2, 3, 4]);
        let single = parse_nexthop(msgs[0].payload).unwrap();
        assert_eq!((single.id, single.protocol, single.group), (500, RTPROT_UPLINK, false));
        assert_eq!((single.gateway, single.ifindex), (Some(hop.gateway), Some(2)));
        let group = parse_nexthop(msgs[1].payload).unwrap();
        assert_eq!((group.id, group.group, group.members), (501, true, vec![500, 502]));
        // nexthop_grp entries: two members, 8 bytes each.
        let group = attrs(&msgs[1].payload[8..]).find(|(k, _)| *k == NHA_GROUP).unwrap().1;
        assert_eq!(group.len(), 16);
        assert_eq!(u32_at(group, 8), Some(502));
        assert_eq!(parse_route(msgs[2].payload).unwrap().prefix, net("0.0.0.0/0"));
    }

    #[test]
    fn error_reply_gives_seq_errno_and_extended_message() {
        // NLMSG_ERROR, capped, with an NLMSGERR_ATTR_MSG TLV.
        let mut buf = Vec::new();
        let mut m = MsgBuilder::begin(&mut buf, NLMSG_ERROR, NLM_F_CAPPED | NLM_F_ACK_TLVS, 9);
        m.bytes(&(-101i32).to_ne_bytes());
        m.bytes(&[36, 0, 0, 0, 24, 0, 5, 5, 77, 0, 0, 0, 0, 0, 0, 0]);
        m.attr(NLMSGERR_ATTR_MSG, b"Nexthop has invalid gateway\0");
        m.finish();
        let ack = parse_ack(&messages(&buf).next().unwrap()).unwrap();
        assert_eq!(ack.seq, 77);
        assert_eq!(ack.errno, 101);
        assert_eq!(ack.message.as_deref(), Some("Nexthop has invalid gateway"));
    }

    #[test]
    fn truncated_input_is_refused_not_panicked_on() {
        let mut buf = Vec::new();
        new_route(
            &mut buf,
            1,
            &RouteKey { table: 254, prefix: net("10.0.0.0/8"), metric: 1 },
            RouteTarget::Object(1),
        );
        for cut in 0..buf.len() {
            messages(&buf[..cut]).for_each(|m| {
                let _ = parse_route(m.payload);
            });
            let _ = parse_route(buf.get(16..cut).unwrap_or(&[]));
            let _ = parse_link(&buf[..cut]);
            let _ = parse_nexthop(&buf[..cut]);
        }
        // A header claiming more bytes than there are yields nothing.
        assert_eq!(messages(&buf[..20]).count(), 0);
    }
}
