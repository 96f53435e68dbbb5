//! RFC 2545 §3: the link-local address that goes beside our global IPv6 next hop. "The
//! link-local address shall be included in the Next Hop field if and only if the BGP speaker
//! shares a common subnet with the entity identified by the global IPv6 address carried in the
//! Network Address of Next Hop field and the peer the route is being advertised to."
//!
//! Read from `/proc/net/if_inet6` (the addresses of the reading thread's network namespace,
//! with interface index, prefix length, scope and flags): no netlink round trip or `unsafe`
//! `getifaddrs` for one lookup per session.

use std::net::Ipv6Addr;

/// One line of `/proc/net/if_inet6`.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Inet6Address {
    address: Ipv6Addr,
    ifindex: u32,
    prefix_len: u8,
    scope: u8,
    flags: u8,
}

/// `IFA_F_TENTATIVE` and `IFA_F_DADFAILED` (linux/if_addr.h): not usable as a next hop yet,
/// or never.
const UNUSABLE: u8 = 0x40 | 0x08;
/// `RT_SCOPE_LINK` as `if_inet6` prints it (the IPv6 scope bits, `IPV6_ADDR_LINKLOCAL`).
const SCOPE_LINK: u8 = 0x20;

/// Our link-local address on the link where `local` (our session address) and `peer` share a
/// subnet; `None` when they do not (a multihop peer), or when the link has no usable one.
pub fn shared_link_local(local: Ipv6Addr, peer: Ipv6Addr) -> Option<Ipv6Addr> {
    let table = std::fs::read_to_string("/proc/net/if_inet6").ok()?;
    pick(&parse(&table), local, peer)
}

fn pick(addresses: &[Inet6Address], local: Ipv6Addr, peer: Ipv6Addr) -> Option<Ipv6Addr> {
    if local.is_unicast_link_local() {
        // The session itself runs over link-local addresses: there is no global to pair with.
        return None;
    }
    let ours = addresses.iter().find(|a| a.address == local)?;
    let subnet = ipnet::Ipv6Net::new(local, ours.prefix_len).ok()?.trunc();
    if !subnet.contains(&peer) {
        return None;
    }
    addresses
        .iter()
        .find(|a| {
            a.ifindex == ours.ifindex
                && a.scope == SCOPE_LINK
                && a.address.is_unicast_link_local()
                && a.flags & UNUSABLE == 0
        })
        .map(|a| a.address)
}

fn parse(table: &str) -> Vec<Inet6Address> {
    table.lines().filter_map(parse_line).collect()
}

/// `fe8000000000000000fc00fffe000001 04 40 20 80     eth0`: address, index, prefix length,
/// scope and flags in hex, then the name.
fn parse_line(line: &str) -> Option<Inet6Address> {
    let mut fields = line.split_whitespace();
    let hex = fields.next()?;
    if hex.len() != 32 {
        return None;
    }
    let address = Ipv6Addr::from(u128::from_str_radix(hex, 16).ok()?);
    let ifindex = u32::from_str_radix(fields.next()?, 16).ok()?;
    let prefix_len = u8::from_str_radix(fields.next()?, 16).ok()?;
    let scope = u8::from_str_radix(fields.next()?, 16).ok()?;
    let flags = u8::from_str_radix(fields.next()?, 16).ok()?;
    Some(Inet6Address { address, ifindex, prefix_len, scope, flags })
}

#[cfg(test)]
mod tests {
    use super::*;

    const TABLE: &str = "\
00000000000000000000000000000001 01 80 10 80       lo
fe8000000000000000fc00fffe000001 04 40 20 80     eth0
fd000000000000000000000000000002 04 40 00 82     eth0
fe800000000000000000000000000009 05 40 20 c0     eth1
fd000000000000010000000000000002 05 40 00 80     eth1
garbage line
";

    fn ip(text: &str) -> Ipv6Addr {
        text.parse().unwrap()
    }

    #[test]
    fn link_local_of_the_shared_link_only() {
        let table = parse(TABLE);
        assert_eq!(table.len(), 5);
        // fd00::2/64 on eth0 shares fd00::/64 with the peer: eth0's link-local goes along.
        assert_eq!(pick(&table, ip("fd00::2"), ip("fd00::1")), Some(ip("fe80::fc:ff:fe00:1")));
        // A peer outside the subnet (multihop): global only.
        assert_eq!(pick(&table, ip("fd00::2"), ip("2001:db8::1")), None);
        // eth1's link-local is still tentative (flags 0x40): none yet.
        assert_eq!(pick(&table, ip("fd00:0:0:1::2"), ip("fd00:0:0:1::1")), None);
        // Not one of our addresses, or a link-local session: none.
        assert_eq!(pick(&table, ip("fd00::9"), ip("fd00::1")), None);
        assert_eq!(pick(&table, ip("fe80::fc:ff:fe00:1"), ip("fe80::1")), None);
    }
}
