//! What the kernel has now that decides whether a BGP router can start: the VRF devices (with
//! their tables) and the addresses on the node. Read with two netlink dumps, and kept current
//! by a thread that listens to the kernel's link and address notifications
//! (`RTNLGRP_LINK`, `RTNLGRP_IPV4_IFADDR`, `RTNLGRP_IPV6_IFADDR`) and reads the view again
//! after each one: a router waiting for its VRF starts when the kernel says the VRF is there,
//! not at the next tick of a timer.
//!
//! The kernel's view, not nmstate's: it is what the listener's `SO_BINDTODEVICE` and a
//! session's bind need, it is cheap to read (no D-Bus round trip), and it works on nodes built
//! without the `netconf` feature. Messages are built and parsed with `netlink-packet-route`.
//!
//! Also read here, once per use: the main table's default routes and the addresses from
//! which `identity` chooses the node's primary addresses ([`read_primary_inputs`]).

use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::net::IpAddr;
use std::sync::Arc;

use ipnet::IpNet;

use netlink_packet_core::{
    NetlinkHeader, NetlinkMessage, NetlinkPayload, NLM_F_DUMP, NLM_F_REQUEST,
};
use netlink_packet_route::address::{AddressAttribute, AddressMessage};
use netlink_packet_route::link::{
    InfoData, InfoKind, InfoVrf, LinkAttribute, LinkInfo, LinkMessage,
};
use netlink_packet_route::route::{
    RouteAddress, RouteAttribute, RouteHeader, RouteMessage, RouteProtocol, RouteType, RouteVia,
};
use netlink_packet_route::{AddressFamily, RouteNetlinkMessage};
use netlink_sys::{protocols::NETLINK_ROUTE, Socket, SocketAddr};
use tokio::sync::watch;
use tracing::warn;

use super::identity::{DefaultRoute, Hop, InterfaceAddress, CONFIGURATION_PROTOCOLS};
use super::state::Family;

/// rtnetlink multicast groups (linux/rtnetlink.h, `enum rtnetlink_groups`).
const RTNLGRP_LINK: u32 = 1;
const RTNLGRP_IPV4_IFADDR: u32 = 5;
const RTNLGRP_IPV6_IFADDR: u32 = 9;

/// The VRF devices and addresses on the node.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NodeView {
    /// VRF device name → its routing table.
    pub vrfs: BTreeMap<String, u32>,
    /// Every address on every interface (tentative IPv6 ones included: a session can bind
    /// them once DAD is over, and it retries).
    pub addresses: BTreeSet<IpAddr>,
}

impl NodeView {
    /// Reads the view from the kernel now (two dumps on a socket of its own).
    pub fn read() -> Result<NodeView, String> {
        let socket = Dumper::open().map_err(|e| format!("netlink: {e}"))?;
        let mut view = NodeView::default();
        for message in socket.dump(RouteNetlinkMessage::GetLink(LinkMessage::default()), 1)? {
            if let RouteNetlinkMessage::NewLink(link) = message {
                if let Some((name, table)) = vrf_of(&link) {
                    view.vrfs.insert(name, table);
                }
            }
        }
        for message in socket.dump(RouteNetlinkMessage::GetAddress(AddressMessage::default()), 2)? {
            if let RouteNetlinkMessage::NewAddress(address) = message {
                view.addresses.extend(address_of(&address));
            }
        }
        Ok(view)
    }

    pub fn has_vrf(&self, name: &str) -> bool {
        self.vrfs.contains_key(name)
    }

    pub fn has_address(&self, address: &IpAddr) -> bool {
        self.addresses.contains(address)
    }
}

/// A VRF device's name and table.
fn vrf_of(link: &LinkMessage) -> Option<(String, u32)> {
    let mut name = None;
    let mut is_vrf = false;
    let mut table = None;
    for attribute in &link.attributes {
        match attribute {
            LinkAttribute::IfName(n) => name = Some(n.clone()),
            LinkAttribute::LinkInfo(infos) => {
                for info in infos {
                    match info {
                        LinkInfo::Kind(InfoKind::Vrf) => is_vrf = true,
                        LinkInfo::Data(InfoData::Vrf(data)) => {
                            table = data.iter().find_map(|d| match d {
                                InfoVrf::TableId(t) => Some(*t),
                                _ => None,
                            });
                        }
                        _ => {}
                    }
                }
            }
            _ => {}
        }
    }
    is_vrf.then_some(())?;
    Some((name?, table.unwrap_or_default()))
}

/// The address of an `RTM_NEWADDR`: `IFA_LOCAL` when present (on a point-to-point link
/// `IFA_ADDRESS` is the peer's), else `IFA_ADDRESS`.
fn address_of(message: &AddressMessage) -> Option<IpAddr> {
    let local = message.attributes.iter().find_map(|a| match a {
        AddressAttribute::Local(ip) => Some(*ip),
        _ => None,
    });
    local.or_else(|| {
        message.attributes.iter().find_map(|a| match a {
            AddressAttribute::Address(ip) => Some(*ip),
            _ => None,
        })
    })
}

/// What `identity::primary_addresses` chooses from: the main table's default routes installed
/// by network configuration, and every address with its interface and prefix length. One
/// route dump per family and protocol, with the kernel's strict checking on so that the
/// kernel filters by table and protocol itself: a main table holding a million BGP routes is
/// not sent.
pub fn read_primary_inputs() -> Result<(Vec<DefaultRoute>, Vec<InterfaceAddress>), String> {
    let dumper = Dumper::open().map_err(|e| format!("netlink: {e}"))?;
    // Refused before Linux 4.20: the kernel then sends every route, and the checks below
    // keep the right ones.
    let _ = dumper.socket.set_netlink_get_strict_chk(true);
    let mut routes = Vec::new();
    let mut sequence = 0;
    for family in [AddressFamily::Inet, AddressFamily::Inet6] {
        for protocol in CONFIGURATION_PROTOCOLS {
            let mut request = RouteMessage::default();
            request.header.address_family = family;
            request.header.table = RouteHeader::RT_TABLE_MAIN;
            request.header.protocol = RouteProtocol::from(protocol);
            sequence += 1;
            for message in dumper.dump(RouteNetlinkMessage::GetRoute(request), sequence)? {
                if let RouteNetlinkMessage::NewRoute(route) = message {
                    let wanted = u8::from(route.header.protocol) == protocol;
                    routes.extend(default_route_of(&route).filter(|_| wanted));
                }
            }
        }
    }
    let mut addresses = Vec::new();
    sequence += 1;
    let request = RouteNetlinkMessage::GetAddress(AddressMessage::default());
    for message in dumper.dump(request, sequence)? {
        if let RouteNetlinkMessage::NewAddress(message) = message {
            let Some(ip) = address_of(&message) else { continue };
            if let Ok(address) = IpNet::new(ip, message.header.prefix_len) {
                addresses.push(InterfaceAddress { interface: message.header.index, address });
            }
        }
    }
    Ok((routes, addresses))
}

/// The main table's default unicast route in an `RTM_NEWROUTE`, if it is one. A route through
/// a nexthop object (`RTA_NH_ID`) names no gateway nor interface of its own: left out.
fn default_route_of(message: &RouteMessage) -> Option<DefaultRoute> {
    let header = &message.header;
    let family = match header.address_family {
        AddressFamily::Inet => Family::V4,
        AddressFamily::Inet6 => Family::V6,
        _ => return None,
    };
    let table = message.attributes.iter().find_map(|a| match a {
        RouteAttribute::Table(table) => Some(*table),
        _ => None,
    });
    let main = u32::from(RouteHeader::RT_TABLE_MAIN);
    if header.destination_prefix_length != 0
        || header.kind != RouteType::Unicast
        || table.unwrap_or(u32::from(header.table)) != main
    {
        return None;
    }
    let metric = message.attributes.iter().find_map(|a| match a {
        RouteAttribute::Priority(metric) => Some(*metric),
        _ => None,
    });
    let mut hops: Vec<Hop> = message
        .attributes
        .iter()
        .filter_map(|a| match a {
            RouteAttribute::MultiPath(paths) => Some(paths),
            _ => None,
        })
        .flatten()
        .map(|path| Hop { gateway: gateway_of(&path.attributes), interface: path.interface_index })
        .collect();
    if hops.is_empty() {
        let interface = message.attributes.iter().find_map(|a| match a {
            RouteAttribute::Oif(index) => Some(*index),
            _ => None,
        })?;
        hops.push(Hop { gateway: gateway_of(&message.attributes), interface });
    }
    Some(DefaultRoute {
        family,
        protocol: u8::from(header.protocol),
        metric: metric.unwrap_or(0),
        hops,
    })
}

/// `RTA_GATEWAY`, or `RTA_VIA` (an IPv4 route through an IPv6 next hop).
fn gateway_of(attributes: &[RouteAttribute]) -> Option<IpAddr> {
    attributes.iter().find_map(|a| match a {
        RouteAttribute::Gateway(RouteAddress::Inet(v4)) => Some(IpAddr::V4(*v4)),
        RouteAttribute::Gateway(RouteAddress::Inet6(v6)) => Some(IpAddr::V6(*v6)),
        RouteAttribute::Via(RouteVia::Inet(v4)) => Some(IpAddr::V4(*v4)),
        RouteAttribute::Via(RouteVia::Inet6(v6)) => Some(IpAddr::V6(*v6)),
        _ => None,
    })
}

/// A netlink socket for one dump at a time.
struct Dumper {
    socket: Socket,
}

impl Dumper {
    fn open() -> io::Result<Dumper> {
        let mut socket = Socket::new(NETLINK_ROUTE)?;
        socket.bind_auto()?;
        socket.connect(&SocketAddr::new(0, 0))?;
        Ok(Dumper { socket })
    }

    /// Sends a dump request and collects the messages of the reply.
    fn dump(
        &self,
        request: RouteNetlinkMessage,
        sequence: u32,
    ) -> Result<Vec<RouteNetlinkMessage>, String> {
        let mut packet = NetlinkMessage::new(NetlinkHeader::default(), request.into());
        packet.header.flags = NLM_F_DUMP | NLM_F_REQUEST;
        packet.header.sequence_number = sequence;
        packet.finalize();
        let mut buffer = vec![0; packet.buffer_len()];
        packet.serialize(&mut buffer);
        self.socket.send(&buffer, 0).map_err(|e| format!("netlink dump request: {e}"))?;
        let mut out = Vec::new();
        loop {
            let (datagram, _) =
                self.socket.recv_from_full().map_err(|e| format!("netlink dump: {e}"))?;
            let mut rest: &[u8] = &datagram;
            while !rest.is_empty() {
                let message = NetlinkMessage::<RouteNetlinkMessage>::deserialize(rest)
                    .map_err(|e| format!("netlink dump: {e}"))?;
                let length = usize::try_from(message.header.length).unwrap_or(usize::MAX);
                if message.header.sequence_number == sequence {
                    match message.payload {
                        NetlinkPayload::Done(_) => return Ok(out),
                        NetlinkPayload::Error(e) => {
                            return Err(format!("netlink dump: {}", e.to_io()));
                        }
                        NetlinkPayload::InnerMessage(inner) => out.push(inner),
                        _ => {}
                    }
                }
                if length == 0 {
                    break;
                }
                rest = rest.get(length..).unwrap_or_default();
            }
        }
    }
}

/// Starts the thread that keeps a [`NodeView`] current; the receiver holds the latest one.
/// A view that cannot be read keeps the previous one (and says so in the log).
pub fn watch_node() -> Result<watch::Receiver<Arc<NodeView>>, String> {
    let mut socket = Socket::new(NETLINK_ROUTE).map_err(|e| format!("netlink: {e}"))?;
    socket.bind_auto().map_err(|e| format!("netlink: {e}"))?;
    for group in [RTNLGRP_LINK, RTNLGRP_IPV4_IFADDR, RTNLGRP_IPV6_IFADDR] {
        socket
            .add_membership(group)
            .map_err(|e| format!("cannot subscribe to link and address notifications: {e}"))?;
    }
    // Read after subscribing, so no change falls between the two.
    let first = NodeView::read()?;
    let (tx, rx) = watch::channel(Arc::new(first));
    std::thread::Builder::new()
        .name("uplink-links".into())
        .spawn(move || {
            let mut buffer = Vec::with_capacity(64 * 1024);
            loop {
                buffer.clear();
                match socket.recv(&mut buffer, 0) {
                    // Any notification (or lost ones: ENOBUFS) means: read the view again.
                    Ok(_) => {}
                    Err(e) if e.raw_os_error() == Some(libc::ENOBUFS) => {}
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    Err(e) => {
                        warn!("reading link notifications failed: {e}");
                        std::thread::sleep(std::time::Duration::from_millis(500));
                    }
                }
                match NodeView::read() {
                    Ok(view) => {
                        tx.send_if_modified(|current| {
                            let changed = **current != view;
                            if changed {
                                *current = Arc::new(view);
                            }
                            changed
                        });
                    }
                    Err(e) => warn!("cannot read the node's links and addresses: {e}"),
                }
                if tx.is_closed() {
                    return;
                }
            }
        })
        .map_err(|e| format!("cannot start the link watch thread: {e}"))?;
    Ok(rx)
}

#[cfg(test)]
mod tests {
    use super::*;
    use netlink_packet_route::route::RouteNextHop;

    /// The loopback addresses are on every node, in every network namespace.
    #[test]
    fn the_view_holds_the_loopback_address() {
        let view = NodeView::read().unwrap();
        assert!(view.has_address(&"127.0.0.1".parse().unwrap()), "{view:?}");
    }

    #[test]
    fn the_primary_inputs_hold_the_loopback_address() {
        let (_, addresses) = read_primary_inputs().unwrap();
        let loopback = InterfaceAddress { interface: 1, address: "127.0.0.1/8".parse().unwrap() };
        assert!(addresses.contains(&loopback), "{addresses:?}");
    }

    fn default_route(protocol: u8, attributes: Vec<RouteAttribute>) -> RouteMessage {
        let mut message = RouteMessage::default();
        message.header.address_family = AddressFamily::Inet;
        message.header.table = RouteHeader::RT_TABLE_MAIN;
        message.header.kind = RouteType::Unicast;
        message.header.protocol = RouteProtocol::from(protocol);
        message.attributes = attributes;
        message
    }

    #[test]
    fn default_routes_are_read_with_their_protocol_metric_and_hops() {
        let gateway = |a: &str| RouteAttribute::Gateway(RouteAddress::Inet(a.parse().unwrap()));
        let plain = default_route(
            4,
            vec![RouteAttribute::Priority(425), gateway("172.18.20.1"), RouteAttribute::Oif(2)],
        );
        let hop = |g: &str, interface| Hop { gateway: Some(g.parse().unwrap()), interface };
        assert_eq!(
            default_route_of(&plain),
            Some(DefaultRoute {
                family: Family::V4,
                protocol: 4,
                metric: 425,
                hops: vec![hop("172.18.20.1", 2)]
            })
        );
        let mut paths = Vec::new();
        for (g, interface) in [("10.0.5.0", 5), ("10.0.6.0", 6)] {
            let mut path = RouteNextHop::default();
            path.interface_index = interface;
            path.attributes.push(gateway(g));
            paths.push(path);
        }
        let ecmp = default_route(117, vec![RouteAttribute::MultiPath(paths)]);
        let read = default_route_of(&ecmp).unwrap();
        assert_eq!((read.protocol, read.metric), (117, 0));
        assert_eq!(read.hops, vec![hop("10.0.5.0", 5), hop("10.0.6.0", 6)]);
        // Another table (in RTA_TABLE), another destination, a nexthop object: not wanted.
        let mut vrf = plain.clone();
        vrf.attributes.push(RouteAttribute::Table(1001));
        assert_eq!(default_route_of(&vrf), None);
        let mut narrower = plain.clone();
        narrower.header.destination_prefix_length = 24;
        assert_eq!(default_route_of(&narrower), None);
        let object = default_route(4, vec![RouteAttribute::NhId(7)]);
        assert_eq!(default_route_of(&object), None);
    }

    #[test]
    fn a_vrf_link_message_names_its_table() {
        let mut link = LinkMessage::default();
        link.attributes.push(LinkAttribute::IfName("cudn3".into()));
        link.attributes.push(LinkAttribute::LinkInfo(vec![
            LinkInfo::Kind(InfoKind::Vrf),
            LinkInfo::Data(InfoData::Vrf(vec![InfoVrf::TableId(2441)])),
        ]));
        assert_eq!(vrf_of(&link), Some(("cudn3".into(), 2441)));
        let mut bridge = LinkMessage::default();
        bridge.attributes.push(LinkAttribute::IfName("br0".into()));
        bridge.attributes.push(LinkAttribute::LinkInfo(vec![LinkInfo::Kind(InfoKind::Bridge)]));
        assert_eq!(vrf_of(&bridge), None);
    }
}
