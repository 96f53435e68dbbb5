//! FRR's `neighborCapabilities` of `show bgp neighbors json`, from both OPENs' capabilities:
//! each capability FRR knows, `advertised`, `received` or `advertisedAndReceived`, under FRR
//! 8.4's keys and with its quirks (`gracefulRestartCapability` when only one side sent it,
//! `longLivedGracefulRestartByPeer` listing the extended next hop families), so a script that
//! reads FRR's answer reads ours.

use crate::bgp::fsm::CapabilityExchange;
use crate::bgp::wire::open::{capability_code, Capability};
use serde_json::{json, Map, Value};

/// Capability codes uplink does not implement but reports when a peer sends them (IANA
/// "Capability Codes"; FRR's `bgp_open.h`).
mod code {
    pub const EXTENDED_NEXT_HOP: u8 = 5;
    pub const EXTENDED_MESSAGE: u8 = 6;
    pub const ROLE: u8 = 9;
    pub const DYNAMIC: u8 = 67;
    pub const ADD_PATH: u8 = 69;
    pub const LONG_LIVED_GRACEFUL_RESTART: u8 = 71;
    pub const HOSTNAME: u8 = 73;
    /// The pre-standard ROUTE-REFRESH code Cisco and FRR still send beside 2.
    pub const ROUTE_REFRESH_OLD: u8 = 128;
}

/// FRR's name of an AFI/SAFI pair in JSON (`get_afi_safi_str(afi, safi, true)`); `None` for
/// those FRR does not name.
fn family_key(afi: u16, safi: u8) -> Option<&'static str> {
    Some(match (afi, safi) {
        (1, 1) => "ipv4Unicast",
        (1, 2) => "ipv4Multicast",
        (1, 4) => "ipv4LabeledUnicast",
        (1, 128) => "ipv4Vpn",
        (1, 133) => "ipv4Flowspec",
        (2, 1) => "ipv6Unicast",
        (2, 2) => "ipv6Multicast",
        (2, 4) => "ipv6LabeledUnicast",
        (2, 128) => "ipv6Vpn",
        (2, 133) => "ipv6Flowspec",
        (25, 70) => "l2VpnEvpn",
        _ => return None,
    })
}

/// One side's capabilities, reduced to what FRR's report looks at.
#[derive(Default)]
struct Side {
    codes: Vec<u8>,
    /// Multiprotocol families (AFI, SAFI), known or not.
    families: Vec<(u16, u8)>,
    /// ADD-PATH (RFC 7911 §4): per family, the Send/Receive field.
    add_path: Vec<(u16, u8, u8)>,
    /// Extended next hop (RFC 8950 §3): the NLRI families carried with an IPv6 next hop.
    extended_next_hop: Vec<(u16, u8)>,
    hostname: Option<(String, String)>,
    graceful_restart: Option<GracefulRestartSeen>,
}

struct GracefulRestartSeen {
    restart_time: u16,
    /// Families with their Forwarding State bit.
    families: Vec<(u16, u8, bool)>,
}

impl Side {
    fn of(capabilities: &[Capability]) -> Side {
        let mut side = Side::default();
        for c in capabilities {
            match c {
                Capability::MultiProtocol(f) => {
                    side.codes.push(capability_code::MULTIPROTOCOL);
                    side.families.push((f.afi as u16, f.safi as u8));
                }
                Capability::RouteRefresh => side.codes.push(capability_code::ROUTE_REFRESH),
                Capability::EnhancedRouteRefresh => {
                    side.codes.push(capability_code::ENHANCED_ROUTE_REFRESH)
                }
                Capability::FourOctetAs(_) => side.codes.push(capability_code::FOUR_OCTET_AS),
                Capability::GracefulRestart(gr) => {
                    side.codes.push(capability_code::GRACEFUL_RESTART);
                    side.graceful_restart = Some(GracefulRestartSeen {
                        restart_time: gr.restart_time,
                        families: gr
                            .families
                            .iter()
                            .map(|(f, forwarding)| (f.afi as u16, f.safi as u8, *forwarding))
                            .collect(),
                    });
                }
                Capability::Unknown { code, value } => {
                    side.codes.push(*code);
                    side.read_unknown(*code, value);
                }
            }
        }
        side
    }

    /// The values of the capabilities uplink only reports. A malformed value is reported as
    /// the capability without its details (the OPEN was accepted; this is only `show`).
    fn read_unknown(&mut self, code: u8, value: &[u8]) {
        match code {
            capability_code::MULTIPROTOCOL => {
                if let [a1, a2, _, safi] = value {
                    self.families.push((u16::from_be_bytes([*a1, *a2]), *safi));
                }
            }
            code::ADD_PATH => {
                for entry in value.chunks_exact(4) {
                    if let [a1, a2, safi, send_receive] = entry {
                        self.add_path.push((u16::from_be_bytes([*a1, *a2]), *safi, *send_receive));
                    }
                }
            }
            code::EXTENDED_NEXT_HOP => {
                for entry in value.chunks_exact(6) {
                    if let [a1, a2, s1, s2, n1, n2] = entry {
                        // Only an IPv6 next hop (AFI 2) for IPv4 NLRI is what FRR records.
                        let next_hop_afi = u16::from_be_bytes([*n1, *n2]);
                        let safi = u16::from_be_bytes([*s1, *s2]);
                        if next_hop_afi == 2 {
                            if let Ok(safi) = u8::try_from(safi) {
                                self.extended_next_hop.push((u16::from_be_bytes([*a1, *a2]), safi));
                            }
                        }
                    }
                }
            }
            code::HOSTNAME => {
                // A length-prefixed host name, then a length-prefixed domain name.
                let text = |bytes: Option<&[u8]>| {
                    bytes
                        .filter(|b| !b.is_empty())
                        .map(|b| String::from_utf8_lossy(b).into_owned())
                        .unwrap_or_else(|| "n/a".to_string())
                };
                let host_len = value.first().map_or(0, |l| usize::from(*l));
                let host = value.get(1..1 + host_len);
                let domain = value.get(1 + host_len).and_then(|l| {
                    let start = 2 + host_len;
                    value.get(start..start + usize::from(*l))
                });
                self.hostname = Some((text(host), text(domain)));
            }
            _ => {}
        }
    }

    fn has(&self, code: u8) -> bool {
        self.codes.contains(&code)
    }
}

/// The host name the peer sent in its FQDN capability (FRR shows it beside the address).
pub fn peer_hostname(caps: &CapabilityExchange) -> Option<String> {
    Side::of(&caps.received).hostname.map(|(host, _)| host).filter(|h| h != "n/a")
}

/// FRR's three words for a capability one or both sides sent; `None` when neither did.
fn exchange(advertised: bool, received: bool) -> Option<&'static str> {
    match (advertised, received) {
        (true, true) => Some("advertisedAndReceived"),
        (true, false) => Some("advertised"),
        (false, true) => Some("received"),
        (false, false) => None,
    }
}

/// FRR's `neighborCapabilities` object for an established session.
pub fn neighbor_capabilities(caps: &CapabilityExchange) -> Value {
    let ours = Side::of(&caps.sent);
    let theirs = Side::of(&caps.received);
    let mut out = Map::new();
    let simple = |out: &mut Map<String, Value>, key: &str, code: u8| {
        if let Some(word) = exchange(ours.has(code), theirs.has(code)) {
            out.insert(key.into(), json!(word));
        }
    };
    simple(&mut out, "4byteAs", capability_code::FOUR_OCTET_AS);
    simple(&mut out, "extendedMessage", code::EXTENDED_MESSAGE);
    if ours.has(code::ADD_PATH) || theirs.has(code::ADD_PATH) {
        out.insert("addPath".into(), add_path(&ours, &theirs));
    }
    simple(&mut out, "dynamic", code::DYNAMIC);
    simple(&mut out, "role", code::ROLE);
    simple(&mut out, "extendedNexthop", code::EXTENDED_NEXT_HOP);
    if theirs.has(code::EXTENDED_NEXT_HOP) {
        out.insert("extendedNexthopFamililesByPeer".into(), by_peer(&theirs, "recieved"));
    }
    simple(&mut out, "longLivedGracefulRestart", code::LONG_LIVED_GRACEFUL_RESTART);
    if theirs.has(code::LONG_LIVED_GRACEFUL_RESTART) {
        // FRR 8.4 lists the families of the extended next hop flags here.
        out.insert("longLivedGracefulRestartByPeer".into(), by_peer(&theirs, "received"));
    }
    let refresh_new = theirs.has(capability_code::ROUTE_REFRESH);
    let refresh_old = theirs.has(code::ROUTE_REFRESH_OLD);
    let refresh_ours = ours.has(capability_code::ROUTE_REFRESH);
    let refresh = match (refresh_ours, refresh_old, refresh_new) {
        (true, true, true) => Some("advertisedAndReceivedOldNew"),
        (true, true, false) => Some("advertisedAndReceivedOld"),
        (true, false, true) => Some("advertisedAndReceivedNew"),
        (true, false, false) => Some("advertised"),
        (false, false, false) => None,
        (false, _, _) => Some("received"),
    };
    if let Some(word) = refresh {
        out.insert("routeRefresh".into(), json!(word));
    }
    simple(&mut out, "enhancedRouteRefresh", capability_code::ENHANCED_ROUTE_REFRESH);
    out.insert("multiprotocolExtensions".into(), multiprotocol(&ours, &theirs));
    let mut hostname = Map::new();
    if let Some((host, domain)) = &theirs.hostname {
        hostname.insert("rcvHostName".into(), json!(host));
        hostname.insert("rcvDomainName".into(), json!(domain));
    }
    out.insert("hostName".into(), Value::Object(hostname));
    graceful_restart(&mut out, &ours, &theirs);
    Value::Object(out)
}

fn add_path(ours: &Side, theirs: &Side) -> Value {
    // RFC 7911 §4: Send/Receive 1 = receive, 2 = send, 3 = both.
    let mut out = Map::new();
    let mut keys: Vec<(u16, u8)> =
        ours.add_path.iter().chain(&theirs.add_path).map(|(a, s, _)| (*a, *s)).collect();
    keys.sort_unstable();
    keys.dedup();
    for (afi, safi) in keys {
        let Some(key) = family_key(afi, safi) else { continue };
        let flags = |side: &Side| {
            side.add_path
                .iter()
                .filter(|(a, s, _)| (*a, *s) == (afi, safi))
                .fold(0u8, |acc, (_, _, sr)| acc | sr)
        };
        let (ours, theirs) = (flags(ours), flags(theirs));
        let mut entry = Map::new();
        // FRR's words: `txAdvertisedAndReceived`, `rxReceived`, ...
        for (bit, prefix) in [(2u8, "tx"), (1u8, "rx")] {
            let word = match exchange(ours & bit != 0, theirs & bit != 0) {
                Some("advertisedAndReceived") => "AdvertisedAndReceived",
                Some("advertised") => "Advertised",
                Some(_) => "Received",
                None => continue,
            };
            entry.insert(format!("{prefix}{word}"), json!(true));
        }
        out.insert(key.into(), Value::Object(entry));
    }
    Value::Object(out)
}

fn by_peer(theirs: &Side, word: &str) -> Value {
    let mut out = Map::new();
    for (afi, safi) in &theirs.extended_next_hop {
        if let Some(key) = family_key(*afi, *safi) {
            out.insert(key.into(), json!(word));
        }
    }
    Value::Object(out)
}

fn multiprotocol(ours: &Side, theirs: &Side) -> Value {
    let mut keys: Vec<(u16, u8)> = ours.families.iter().chain(&theirs.families).copied().collect();
    keys.sort_unstable();
    keys.dedup();
    let mut out = Map::new();
    for (afi, safi) in keys {
        let Some(key) = family_key(afi, safi) else { continue };
        let word =
            exchange(ours.families.contains(&(afi, safi)), theirs.families.contains(&(afi, safi)));
        if let Some(word) = word {
            out.insert(key.into(), json!({ word: true }));
        }
    }
    Value::Object(out)
}

fn graceful_restart(out: &mut Map<String, Value>, ours: &Side, theirs: &Side) {
    let (advertised, received) =
        (ours.graceful_restart.is_some(), theirs.graceful_restart.is_some());
    match exchange(advertised, received) {
        Some(word @ "advertisedAndReceived") => {
            out.insert("gracefulRestart".into(), json!(word));
        }
        Some(word) => {
            out.insert("gracefulRestartCapability".into(), json!(word));
        }
        None => return,
    }
    let Some(gr) = &theirs.graceful_restart else { return };
    out.insert("gracefulRestartRemoteTimerMsecs".into(), json!(u64::from(gr.restart_time) * 1000));
    let mut families = Map::new();
    for (afi, safi, forwarding) in &gr.families {
        let Some(key) = family_key(*afi, *safi) else { continue };
        let entry = if *forwarding { json!({ "preserved": true }) } else { json!({}) };
        families.insert(key.into(), entry);
    }
    let by_peer = if families.is_empty() { json!("none") } else { Value::Object(families) };
    out.insert("addressFamiliesByPeer".into(), by_peer);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bgp::wire::attributes::Family;
    use crate::bgp::wire::open::GracefulRestart;

    /// What FRR 8.4 sends by default, as seen by uplink: FRR's own report of the same session
    /// with FRR on both ends differs only where uplink advertises less.
    #[test]
    fn an_frr_peers_open_is_reported_in_frrs_words() {
        let frr = vec![
            Capability::MultiProtocol(Family::IPV4_UNICAST),
            Capability::Unknown { code: 128, value: vec![] },
            Capability::RouteRefresh,
            Capability::EnhancedRouteRefresh,
            Capability::FourOctetAs(64512),
            Capability::Unknown { code: 69, value: vec![0, 1, 1, 1] },
            Capability::Unknown { code: 73, value: vec![2, b'v', b'm', 0] },
            Capability::GracefulRestart(GracefulRestart {
                restart_state: true,
                notification: true,
                restart_time: 120,
                families: vec![],
            }),
            Capability::Unknown { code: 71, value: vec![] },
            Capability::Unknown { code: 6, value: vec![] },
        ];
        let ours = vec![
            Capability::MultiProtocol(Family::IPV4_UNICAST),
            Capability::MultiProtocol(Family::IPV6_UNICAST),
            Capability::RouteRefresh,
            Capability::FourOctetAs(64513),
        ];
        let v = neighbor_capabilities(&CapabilityExchange { sent: ours, received: frr });
        assert_eq!(
            v,
            json!({
                "4byteAs": "advertisedAndReceived",
                "extendedMessage": "received",
                "addPath": { "ipv4Unicast": { "rxReceived": true } },
                "longLivedGracefulRestart": "received",
                "longLivedGracefulRestartByPeer": {},
                "routeRefresh": "advertisedAndReceivedOldNew",
                "enhancedRouteRefresh": "received",
                "multiprotocolExtensions": {
                    "ipv4Unicast": { "advertisedAndReceived": true },
                    "ipv6Unicast": { "advertised": true },
                },
                "hostName": { "rcvHostName": "vm", "rcvDomainName": "n/a" },
                "gracefulRestartCapability": "received",
                "gracefulRestartRemoteTimerMsecs": 120000,
                "addressFamiliesByPeer": "none",
            })
        );
    }

    #[test]
    fn malformed_values_of_reported_capabilities_are_left_out() {
        let theirs = vec![
            Capability::Unknown { code: 73, value: vec![40, b'x'] },
            Capability::Unknown { code: 69, value: vec![0, 1] },
            Capability::Unknown { code: 5, value: vec![0, 1, 0] },
        ];
        let v = neighbor_capabilities(&CapabilityExchange { sent: vec![], received: theirs });
        assert_eq!(v["hostName"], json!({ "rcvHostName": "n/a", "rcvDomainName": "n/a" }));
        assert_eq!(v["addPath"], json!({}));
        assert_eq!(v["extendedNexthop"], "received");
        assert_eq!(v["extendedNexthopFamililesByPeer"], json!({}));
    }
}
