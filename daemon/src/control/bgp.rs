//! `show bgp summary|neighbors|routes`: answered from the running instances in FRR's JSON
//! shapes and key names (`show bgp summary json`, `show bgp neighbors json`,
//! `show bgp ipv4 unicast [PREFIX] json`), so scripts written against vtysh keep working.

use super::protocol::{ClearHow, FamilyArg, VrfSelector};
use crate::bgp::instance::{Instance, NeighborHandle};
use crate::bgp::view::{Lookup, PathSource, PathView, RibSummary, RouteView};
use crate::bgp::wire::attributes::{Afi, Family, NextHop, Origin, SegmentKind};
use crate::config::{vrf_display_name, AddressFamily, GracefulRestartMode};
use ipnet::IpNet;
use serde_json::{json, Map, Value};
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

/// `show bgp summary`.
pub async fn summary_json(instances: &[Arc<Instance>], vrf: &VrfSelector) -> Result<Value, String> {
    per_vrf(instances, vrf, |i| Box::pin(summary(i))).await
}

/// `show bgp neighbors [ADDR]`.
pub async fn neighbors_json(
    instances: &[Arc<Instance>],
    vrf: &VrfSelector,
    address: Option<&str>,
) -> Result<Value, String> {
    let address = match address {
        Some(a) => Some(parse_neighbor_address(a)?),
        None => None,
    };
    per_vrf(instances, vrf, move |i| Box::pin(neighbors(i, address))).await
}

/// `show bgp [ipv4|ipv6] unicast [PREFIX|ADDRESS]`.
pub async fn routes_json(
    instances: &[Arc<Instance>],
    vrf: &VrfSelector,
    family: Option<FamilyArg>,
    prefix: Option<&str>,
) -> Result<Value, String> {
    let lookup = match prefix {
        Some(p) => Some(parse_lookup(p)?),
        None => None,
    };
    per_vrf(instances, vrf, move |i| Box::pin(routes(i, family, lookup))).await
}

/// `show bgp [ipv4|ipv6] neighbors ADDR advertised-routes|received-routes`, in FRR's shape.
/// Advertised: the prefixes in the neighbor's Adj-RIB-Out, shown with the best path's
/// attributes as FRR shows them. Received: the paths uplink holds from the neighbor, which are
/// those its import policy accepted (uplink keeps no copy of what it refused, like FRR without
/// `soft-reconfiguration inbound`).
pub async fn neighbor_routes_json(
    instances: &[Arc<Instance>],
    vrf: &VrfSelector,
    address: &str,
    family: FamilyArg,
    received: bool,
) -> Result<Value, String> {
    let address = parse_neighbor_address(address)?;
    let family = match family {
        FamilyArg::Ipv4 => Family::IPV4_UNICAST,
        FamilyArg::Ipv6 => Family::IPV6_UNICAST,
    };
    per_vrf(instances, vrf, move |i| Box::pin(neighbor_routes(i, address, family, received))).await
}

async fn neighbor_routes(
    i: &Instance,
    address: IpAddr,
    family: Family,
    received: bool,
) -> Result<Value, String> {
    if !i.neighbors().iter().any(|n| n.config.address == address) {
        return Ok(json!({ "warning": "No such neighbor or address family" }));
    }
    let table = i.rib.routes(family).await?;
    let mut routes = Map::new();
    if received {
        for r in &table {
            let from_peer = |p: &&PathView| matches!(&p.source, PathSource::Peer { address: a, .. } if *a == address);
            if let Some(p) = r.paths.iter().find(from_peer) {
                routes.insert(r.prefix.to_string(), adj_route_json(r.prefix, p));
            }
        }
    } else {
        let sent = i.rib.advertised(address, family).await?.unwrap_or_default();
        for prefix in sent {
            let best = table
                .binary_search_by_key(&prefix, |r| r.prefix)
                .ok()
                .and_then(|at| table.get(at))
                .and_then(|r| r.paths.iter().find(|p| p.best));
            if let Some(p) = best {
                routes.insert(prefix.to_string(), adj_route_json(prefix, p));
            }
        }
    }
    let rib = i.rib.summary().await?;
    let version = rib.table_version.of(family.afi);
    let total = routes.len();
    Ok(json!({
        "bgpTableVersion": version,
        "bgpLocalRouterId": i.router_id.to_string(),
        "defaultLocPrf": 100,
        "localAS": i.asn,
        "bgpStatusCodes": {
            "suppressed": "s", "damped": "d", "history": "h", "valid": "*", "best": ">",
            "multipath": "=", "internal": "i", "ribFailure": "r", "stale": "S", "removed": "R",
        },
        "bgpOriginCodes": { "igp": "i", "egp": "e", "incomplete": "?" },
        (if received { "receivedRoutes" } else { "advertisedRoutes" }): routes,
        "totalPrefixCounter": total,
        "filteredPrefixCounter": 0,
    }))
}

/// One route of FRR's `advertised-routes` / `received-routes`.
fn adj_route_json(prefix: IpNet, p: &PathView) -> Value {
    let local = matches!(p.source, PathSource::Local);
    let mut route = Map::new();
    route.insert("addrPrefix".into(), json!(prefix.network().to_string()));
    route.insert("prefixLen".into(), json!(prefix.prefix_len()));
    route.insert("network".into(), json!(prefix.to_string()));
    match (prefix, p.attrs.next_hop) {
        (IpNet::V4(_), NextHop::V4(a)) => route.insert("nextHop".into(), json!(a.to_string())),
        (IpNet::V4(_), _) => route.insert("nextHop".into(), json!("0.0.0.0")),
        (IpNet::V6(_), NextHop::V6 { global, .. }) => {
            route.insert("nextHopGlobal".into(), json!(global.to_string()))
        }
        (IpNet::V6(_), _) => route.insert("nextHopGlobal".into(), json!("::")),
    };
    if let Some(med) = p.attrs.med {
        route.insert("metric".into(), json!(med));
    }
    if !local {
        if let Some(pref) = p.attrs.local_pref {
            route.insert("locPrf".into(), json!(pref));
        }
    }
    route.insert("weight".into(), json!(if local { 32768 } else { 0 }));
    route.insert("path".into(), json!(p.attrs.as_path.to_string()));
    let origin = match p.attrs.origin {
        Origin::Igp => "i",
        Origin::Egp => "e",
        Origin::Incomplete => "?",
    };
    route.insert("bgpOriginCode".into(), json!(origin));
    let mut symbols = Map::new();
    symbols.insert("*".into(), json!(true));
    if p.best {
        symbols.insert(">".into(), json!(true));
    } else if p.multipath {
        symbols.insert("=".into(), json!(true));
    }
    route.insert("appliedStatusSymbols".into(), Value::Object(symbols));
    Value::Object(route)
}

/// `clear bgp ADDR|* [soft [in|out]]`: what each neighbor's session did, or why not. An
/// address that no selected instance has is an error.
pub async fn clear_json(
    instances: &[Arc<Instance>],
    vrf: &VrfSelector,
    address: Option<&str>,
    how: ClearHow,
) -> Result<Value, String> {
    let address = address.map(parse_neighbor_address).transpose()?;
    let mut cleared = Vec::new();
    for instance in instances.iter().filter(|i| vrf.matches(&i.vrf)) {
        let name = vrf_display_name(&instance.vrf);
        for (neighbor, outcome) in instance.clear(address, how).await {
            cleared.push(match outcome {
                Ok(done) => json!({ "vrf": name, "neighbor": neighbor, "done": done }),
                Err(error) => json!({ "vrf": name, "neighbor": neighbor, "error": error }),
            });
        }
    }
    if cleared.is_empty() {
        return Err(match address {
            Some(a) => format!("no neighbor {a} in the selected VRF (--vrf NAME|all)"),
            None => "no neighbors in the selected VRF (--vrf NAME|all)".to_string(),
        });
    }
    Ok(json!({ "clear": cleared }))
}

type BoxFuture<'a> =
    std::pin::Pin<Box<dyn std::future::Future<Output = Result<Value, String>> + Send + 'a>>;

/// One instance's object for a named VRF; `{"vrf": {...}}` for `all`, like FRR's `vrf all`.
async fn per_vrf<'a>(
    instances: &'a [Arc<Instance>],
    selector: &VrfSelector,
    f: impl Fn(&'a Instance) -> BoxFuture<'a>,
) -> Result<Value, String> {
    let chosen: Vec<&Instance> =
        instances.iter().filter(|i| selector.matches(&i.vrf)).map(|i| &**i).collect();
    match selector {
        VrfSelector::All => {
            let mut out = Map::new();
            for i in chosen {
                out.insert(vrf_display_name(&i.vrf).to_string(), f(i).await?);
            }
            Ok(Value::Object(out))
        }
        _ => match chosen.first() {
            Some(i) => f(i).await,
            None => Err(match selector {
                VrfSelector::Named(name) => format!("no BGP instance in VRF {name}"),
                _ => "no BGP instance in the default VRF".into(),
            }),
        },
    }
}

/// FRR's key of a unicast family (`ipv4Unicast`).
fn family_key(f: AddressFamily) -> &'static str {
    afi_key(family_afi(f))
}

fn afi_key(afi: Afi) -> &'static str {
    match afi {
        Afi::Ipv4 => "ipv4Unicast",
        Afi::Ipv6 => "ipv6Unicast",
    }
}

/// FRR's peer uptime text: `hh:mm:ss` under a day, then `XdYYhZZm`, then `XXwYdZZh`.
pub fn frr_uptime(d: Duration) -> String {
    let s = d.as_secs();
    let (w, d_, h, m, sec) =
        (s / 604_800, (s / 86_400) % 7, (s / 3600) % 24, (s / 60) % 60, s % 60);
    if s < 86_400 {
        format!("{:02}:{:02}:{:02}", s / 3600, m, sec)
    } else if s < 604_800 {
        format!("{}d{:02}h{:02}m", s / 86_400, h, m)
    } else {
        format!("{w:02}w{d_}d{h:02}h")
    }
}

fn established(n: &NeighborHandle) -> (bool, Option<Duration>, crate::bgp::stats::PeerSnapshot) {
    let snap = n.stats.snapshot();
    (snap.state == "Established", snap.uptime, snap)
}

async fn summary(i: &Instance) -> Result<Value, String> {
    let rib = i.rib.summary().await?;
    let relax = if i.router_config().multipath_relax { "true" } else { "false" };
    let mut out = Map::new();
    for family in [AddressFamily::Ipv4Unicast, AddressFamily::Ipv6Unicast] {
        let mut peers = Map::new();
        let mut failed = 0;
        for n in i.neighbors().iter().filter(|n| n.config.families.contains(&family)) {
            let peer = peer_summary(i, n, &rib, family);
            if peer.get("state").and_then(Value::as_str) != Some("Established") {
                failed += 1;
            }
            peers.insert(n.config.address.to_string(), peer);
        }
        if peers.is_empty() {
            continue;
        }
        let count = peers.len();
        let entries = match family {
            AddressFamily::Ipv4Unicast => rib.destinations_v4,
            AddressFamily::Ipv6Unicast => rib.destinations_v6,
        };
        let version = rib.table_version.of(family_afi(family));
        out.insert(
            family_key(family).into(),
            json!({
                "routerId": i.router_id.to_string(),
                "as": i.asn,
                "vrfId": 0,
                "vrfName": vrf_display_name(&i.vrf),
                "tableVersion": version,
                "ribCount": entries,
                "peerCount": count,
                "peers": peers,
                "failedPeers": failed,
                "displayedPeers": count,
                "totalPeers": count,
                "dynamicPeers": 0,
                "bestPath": { "multiPathRelax": relax },
            }),
        );
    }
    Ok(Value::Object(out))
}

/// The peer's host name from its FQDN capability, which FRR shows beside the address.
fn peer_hostname(snap: &crate::bgp::stats::PeerSnapshot) -> Option<String> {
    let negotiated = snap.negotiated.as_ref()?;
    super::bgp_capabilities::peer_hostname(&negotiated.capabilities)
}

/// FRR's `peerState`: why a session that is not up is not trying (RFC 4486 §4 max-prefix:
/// `PfxCt`), else `OK`.
fn peer_state(n: &NeighborHandle, snap: &crate::bgp::stats::PeerSnapshot) -> &'static str {
    if snap.held_down.is_some() {
        "PfxCt"
    } else if n.config.passive {
        "Passive"
    } else {
        "OK"
    }
}

fn epoch_secs(t: Option<std::time::SystemTime>) -> Option<u64> {
    t.and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok()).map(|d| d.as_secs())
}

fn peer_summary(
    i: &Instance,
    n: &NeighborHandle,
    rib: &RibSummary,
    family: AddressFamily,
) -> Value {
    let (up, uptime, snap) = established(n);
    let counts = rib.peers.get(&n.config.address).copied().unwrap_or_default();
    let afi = family_afi(family);
    let uptime_str = match (up, uptime) {
        (true, Some(d)) => frr_uptime(d),
        (false, Some(d)) if snap.established_count > 0 => frr_uptime(d),
        _ => "never".into(),
    };
    let state = match snap.held_down {
        Some(_) if !up => "Idle (PfxCt)".to_string(),
        _ => snap.state.clone(),
    };
    let mut peer = Map::new();
    if let Some(host) = peer_hostname(&snap) {
        peer.insert("hostname".into(), json!(host));
    }
    let more = json!({
        "remoteAs": snap.remote_asn.unwrap_or_else(|| configured_asn(i, n)),
        "localAs": i.asn,
        "version": 4,
        "msgRcvd": snap.msgs_rcvd,
        "msgSent": snap.msgs_sent,
        "tableVersion": counts.synced_version.of(afi),
        "outq": snap.outq,
        "inq": 0,
        "peerUptime": uptime_str,
        "peerUptimeMsec": uptime.filter(|_| up || snap.established_count > 0).map_or(0, |d| d.as_secs() * 1000),
        "peerUptimeEstablishedEpoch": epoch_secs(snap.established_at),
        "pfxRcd": counts.accepted.of(afi),
        "pfxSnt": counts.sent.of(afi),
        // Not in FRR: epoch milliseconds when the RIB last applied an UPDATE from this peer.
        "lastUpdateAppliedEpochMs": counts.last_update_applied
            .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
            .map(|d| d.as_millis() as u64),
        "state": state,
        "peerState": peer_state(n, &snap),
        "connectionsEstablished": snap.established_count,
        "connectionsDropped": snap.dropped_count,
        "idType": if n.config.address.is_ipv4() { "ipv4" } else { "ipv6" },
        "lastResetDueTo": snap.last_error,
    });
    if let Value::Object(more) = without_nulls(more) {
        peer.extend(more);
    }
    Value::Object(peer)
}

/// An object without its null members: FRR leaves out what does not apply rather than
/// writing null.
fn without_nulls(v: Value) -> Value {
    match v {
        Value::Object(map) => {
            Value::Object(map.into_iter().filter(|(_, v)| !v.is_null()).collect())
        }
        other => other,
    }
}

fn family_afi(f: AddressFamily) -> Afi {
    match f {
        AddressFamily::Ipv4Unicast => Afi::Ipv4,
        AddressFamily::Ipv6Unicast => Afi::Ipv6,
    }
}

fn configured_asn(i: &Instance, n: &NeighborHandle) -> u32 {
    match n.config.remote_asn {
        crate::config::RemoteAsn::Fixed(asn) => asn,
        crate::config::RemoteAsn::Internal => i.asn,
        crate::config::RemoteAsn::External => 0,
    }
}

async fn neighbors(i: &Instance, only: Option<IpAddr>) -> Result<Value, String> {
    let rib = i.rib.summary().await?;
    let bfd = match i.bfd() {
        Some(bfd) => bfd.peers().await.unwrap_or_default(),
        None => Vec::new(),
    };
    let mut out = Map::new();
    for n in i.neighbors().iter().filter(|n| only.is_none_or(|a| a == n.config.address)) {
        let (up, uptime, snap) = established(n);
        let counts = rib.peers.get(&n.config.address).copied().unwrap_or_default();
        let mut afi = Map::new();
        for f in &n.config.families {
            let mut family = json!({
                "packetQueueLength": snap.outq,
                "acceptedPrefixCounter": counts.accepted.of(family_afi(*f)),
                "sentPrefixCounter": counts.sent.of(family_afi(*f)),
            });
            // FRR's keys of `maximum-prefix N [threshold] [warning-only|restart M]`; the
            // limit counts the session's prefixes over all its families.
            if let (Some(m), Some(obj)) = (n.config.max_prefixes, family.as_object_mut()) {
                obj.insert("prefixAllowedMax".into(), json!(m.limit));
                obj.insert("prefixAllowedWarningThresh".into(), json!(m.threshold));
                if m.warning_only {
                    obj.insert("prefixAllowedMaxWarning".into(), json!(true));
                    // Not in FRR: past the limit, kept by warning-only.
                    obj.insert("prefixAllowedMaxExceeded".into(), json!(counts.over_limit));
                }
                if let Some(restart) = m.restart_time {
                    obj.insert(
                        "prefixAllowedRestartIntervalMsecs".into(),
                        json!(restart.as_millis() as u64),
                    );
                }
            }
            afi.insert(family_key(*f).into(), family);
        }
        // Down after Cease/Maximum Number of Prefixes Reached: until when (FRR's
        // `restartInTimerMsec`), or for good until a reload or restart.
        let held_down = snap.held_down.map(|until| {
            let left = until.map(|t| t.saturating_duration_since(std::time::Instant::now()));
            json!({
                "maxPrefixHeldDown": true,
                "restartInTimerMsec": left.map(|d| d.as_millis() as u64),
            })
        });
        let neg = snap.negotiated.clone();
        // FRR reports capabilities of an established session only.
        let capabilities = neg
            .as_ref()
            .filter(|_| up)
            .map(|v| super::bgp_capabilities::neighbor_capabilities(&v.capabilities));
        let hostname = peer_hostname(&snap).filter(|_| up);
        let bfd_info = bfd.iter().find(|p| p.spec.peer == n.config.address).map(peer_bfd_info);
        let neighbor = json!({
            "remoteAs": snap.remote_asn.unwrap_or_else(|| configured_asn(i, n)),
            "localAs": i.asn,
            "nbrExternalLink": snap.remote_asn.map(|a| a != i.asn).unwrap_or(true),
            "bgpVersion": 4,
            "remoteRouterId": snap.remote_id.map(|r| r.to_string()).unwrap_or_else(|| "0.0.0.0".into()),
            "localRouterId": i.router_id.to_string(),
            "bgpState": snap.state,
            "bgpTimerUpMsec": if up { uptime.map(|d| d.as_millis() as u64).unwrap_or(0) } else { 0 },
            "bgpTimerUpString": if up { uptime.map(frr_uptime) } else { None },
            "bgpTimerUpEstablishedEpoch": if up { epoch_secs(snap.established_at) } else { None },
            "hostname": hostname,
            "bgpTimerHoldTimeMsecs": neg.as_ref().map(|v| v.hold_time * 1000).unwrap_or(n.config.hold_time.as_millis() as u64),
            "bgpTimerKeepAliveIntervalMsecs": neg.as_ref().map(|v| v.keepalive * 1000).unwrap_or(n.config.keepalive_time.as_millis() as u64),
            "bgpTimerConfiguredHoldTimeMsecs": n.config.hold_time.as_millis() as u64,
            "bgpTimerConfiguredKeepAliveIntervalMsecs": n.config.keepalive_time.as_millis() as u64,
            "neighborCapabilities": capabilities,
            "messageStats": {
                "depthInq": 0, "depthOutq": snap.outq,
                "capabilitySent": 0, "capabilityRecv": 0,
                "opensSent": snap.opens_sent, "opensRecv": snap.opens_rcvd,
                "notificationsSent": snap.notifications_sent, "notificationsRecv": snap.notifications_rcvd,
                "updatesSent": snap.updates_sent, "updatesRecv": snap.updates_rcvd,
                "keepalivesSent": snap.keepalives_sent, "keepalivesRecv": snap.keepalives_rcvd,
                "routeRefreshSent": snap.refreshes_sent, "routeRefreshRecv": snap.refreshes_rcvd,
                "totalSent": snap.msgs_sent, "totalRecv": snap.msgs_rcvd,
            },
            "addressFamilyInfo": afi,
            "connectionsEstablished": snap.established_count,
            "connectionsDropped": snap.dropped_count,
            // FRR's words before a session ever went down.
            "lastResetDueTo": snap.last_error.as_deref().unwrap_or("Waiting for peer OPEN"),
            "hostLocal": snap.local_address.map(|a| a.to_string()),
            "hostForeign": n.config.address.to_string(),
            "portForeign": n.config.port,
            "passive": n.config.passive,
            "bfdProfile": n.config.bfd_profile,
            "md5Password": n.config.password.is_some(),
            "authenticationEnabled": n.config.password.is_some().then_some(1),
            "gracefulRestartInfo": graceful_restart_json(i, n, &snap),
            "maxPrefixState": held_down,
            "sendHoldTimeMsecs": send_hold_time_ms(n, neg.as_ref().map(|v| v.hold_time)),
            "peerBfdInfo": bfd_info,
        });
        out.insert(n.config.address.to_string(), without_nulls(neighbor));
    }
    if let (Some(a), true) = (only, out.is_empty()) {
        return Err(format!("no such neighbor {a} in VRF {}", vrf_display_name(&i.vrf)));
    }
    Ok(Value::Object(out))
}

/// RFC 9687 SendHoldTime in effect (the negotiated hold time once known); `None` when off.
fn send_hold_time_ms(n: &NeighborHandle, negotiated_hold_secs: Option<u64>) -> Option<u64> {
    let hold_ms = negotiated_hold_secs.map_or(n.config.hold_time.as_millis() as u64, |h| h * 1000);
    match n.config.send_hold_time {
        None => (hold_ms != 0).then_some(hold_ms * 2),
        Some(d) if d.is_zero() => None,
        Some(d) => Some(d.as_millis() as u64),
    }
}

/// `uplink wait-ready`: every configured session, with whether it is Established and has sent
/// and received End-of-RIB (RFC 4724 §2) — the node then has the fabric's routes and the fabric
/// has the node's.
pub fn ready_json(instances: &[Arc<Instance>]) -> Value {
    let mut sessions = Vec::new();
    for i in instances {
        for n in i.neighbors() {
            let snap = n.stats.snapshot();
            // RFC 4724 §2: End-of-RIB belongs to graceful restart. A peer that did not
            // advertise the capability, or to which we did not (`graceful_restart = false`),
            // may never send one (FRR does not): then Established with our table sent is
            // ready.
            let peer_sends_eor = n.config.graceful_restart.helps()
                && snap
                    .negotiated
                    .as_ref()
                    .is_some_and(|v| v.capabilities.remote_graceful_restart().is_some());
            let why = if snap.state != "Established" {
                Some(format!("session {}", snap.state))
            } else if !snap.end_of_rib_sent {
                Some("our initial table and End-of-RIB not sent yet".to_string())
            } else if peer_sends_eor && !snap.end_of_rib_received {
                Some("no End-of-RIB from the peer yet".to_string())
            } else {
                None
            };
            sessions.push(json!({
                "vrf": vrf_display_name(&i.vrf),
                "neighbor": n.config.address.to_string(),
                "state": snap.state,
                "endOfRibSent": snap.end_of_rib_sent,
                "endOfRibRecv": snap.end_of_rib_received,
                "endOfRibExpected": peer_sends_eor,
                "ready": why.is_none(),
                "why": why,
            }));
        }
    }
    let ready = sessions.iter().all(|s| s["ready"] == true);
    json!({ "ready": ready, "sessions": sessions })
}

/// FRR's `gracefulRestartInfo` of `show bgp neighbors json` (RFC 4724): the modes of both
/// sides, the peer's R bit, End-of-RIB sent and received per family, the restart timers.
fn graceful_restart_json(
    i: &Instance,
    n: &NeighborHandle,
    snap: &crate::bgp::stats::PeerSnapshot,
) -> Value {
    let remote_gr = snap.negotiated.as_ref().and_then(|v| v.capabilities.remote_graceful_restart());
    let remote_time = remote_gr.map(|gr| gr.restart_time);
    // FRR: a peer that preserves forwarding for some family restarts; one that lists none
    // only helps.
    let remote_mode = match remote_gr {
        None => "NotApplicable",
        Some(gr) if gr.families.is_empty() => "Helper",
        Some(_) => "Restart",
    };
    let mut sent = Map::new();
    let mut received = Map::new();
    let mut per_family = Map::new();
    for family in &snap.families {
        let key = afi_key(family.afi);
        let got = snap.end_of_rib_received_families.contains(family);
        sent.insert(key.into(), json!(snap.end_of_rib_sent));
        received.insert(key.into(), json!(got));
        let forwarding = remote_gr
            .and_then(|gr| gr.families.iter().find(|(f, _)| f == family))
            .is_some_and(|(_, preserved)| *preserved);
        per_family.insert(
            key.into(),
            json!({
                "fBit": forwarding,
                "endOfRibStatus": {
                    "endOfRibSend": snap.end_of_rib_sent,
                    "endOfRibSentAfterUpdate": snap.end_of_rib_sent,
                    "endOfRibRecv": got,
                },
            }),
        );
    }
    let mut info = json!({
        "localGrMode": match n.config.graceful_restart {
            GracefulRestartMode::Enabled => "Restart",
            GracefulRestartMode::Helper => "Helper",
            GracefulRestartMode::Disabled => "Disable",
        },
        "remoteGrMode": remote_mode,
        "rBit": remote_gr.is_some_and(|gr| gr.restart_state),
        "nBit": remote_gr.is_some_and(|gr| gr.notification),
        "localRestarted": i.restarted(),
        "endOfRibSend": sent,
        "endOfRibRecv": received,
        "timers": {
            "configuredRestartTimer": i.restart_time().as_secs(),
            "receivedRestartTimer": remote_time,
        },
    });
    if let Some(map) = info.as_object_mut() {
        map.extend(per_family);
    }
    info
}

/// FRR's `peerBfdInfo` of a neighbor with BFD (lib/bfd.c `bfd_sess_show`).
fn peer_bfd_info(p: &crate::bfd::runtime::PeerView) -> Value {
    use crate::bfd::packet::State;
    let secs = p.since_change.as_secs();
    json!({
        "type": if p.spec.hop == crate::bfd::runtime::Hop::Multi { "multi hop" } else { "single hop" },
        "detectMultiplier": p.spec.config.detect_mult,
        "rxMinInterval": p.spec.config.required_min_rx.as_millis() as u64,
        "txMinInterval": p.spec.config.desired_min_tx.as_millis() as u64,
        "status": match p.state {
            State::Up => "Up",
            State::Down | State::Init => "Down",
            State::AdminDown => "Admin Down",
        },
        "lastUpdate": format!("{}:{:02}:{:02}:{:02}", secs / 86_400, (secs / 3600) % 24, (secs / 60) % 60, secs % 60),
    })
}

/// The `ADDR` of `show bgp neighbors ADDR`.
pub fn parse_neighbor_address(text: &str) -> Result<IpAddr, String> {
    text.parse::<IpAddr>().map_err(|e| format!("{text}: {e}"))
}

/// The `PREFIX|ADDRESS` of `show bgp routes`: a prefix (host bits cleared, as FRR does) or an
/// address for a longest match.
pub fn parse_lookup(text: &str) -> Result<Lookup, String> {
    if let Ok(net) = text.parse::<IpNet>() {
        return Ok(Lookup::Prefix(net.trunc()));
    }
    text.parse::<IpAddr>()
        .map(Lookup::Address)
        .map_err(|_| format!("{text}: not a prefix (10.0.0.0/24, 2001:db8::/32) or an address"))
}

async fn routes(
    i: &Instance,
    family: Option<FamilyArg>,
    lookup: Option<Lookup>,
) -> Result<Value, String> {
    let family = match (family, lookup) {
        (Some(FamilyArg::Ipv6), _) => Family::IPV6_UNICAST,
        (Some(FamilyArg::Ipv4), _) => Family::IPV4_UNICAST,
        (None, Some(Lookup::Prefix(IpNet::V6(_)) | Lookup::Address(IpAddr::V6(_)))) => {
            Family::IPV6_UNICAST
        }
        (None, _) => Family::IPV4_UNICAST,
    };
    match lookup {
        Some(lookup) => {
            let route = i.rib.lookup(lookup).await?;
            match route {
                Some(r) => Ok(single_route_json(&r)),
                None => Err("Network not in table".into()),
            }
        }
        None => {
            let table = i.rib.routes(family).await?;
            let mut routes = Map::new();
            let mut total_paths = 0;
            for r in &table {
                total_paths += r.paths.len();
                routes.insert(
                    r.prefix.to_string(),
                    Value::Array(r.paths.iter().map(|p| table_path_json(r, p)).collect()),
                );
            }
            Ok(json!({
                "vrfId": 0,
                "vrfName": vrf_display_name(&i.vrf),
                "tableVersion": 0,
                "routerId": i.router_id.to_string(),
                "defaultLocPrf": 100,
                "localAS": i.asn,
                "afi": if family.afi == Afi::Ipv4 { "ipv4" } else { "ipv6" },
                "routes": routes,
                "totalRoutes": table.len(),
                "totalPaths": total_paths,
            }))
        }
    }
}

fn origin_name(o: Origin) -> &'static str {
    match o {
        Origin::Igp => "IGP",
        Origin::Egp => "EGP",
        Origin::Incomplete => "incomplete",
    }
}

fn nexthops_json(p: &PathView) -> Value {
    match p.attrs.next_hop {
        NextHop::V4(a) => json!([{ "ip": a.to_string(), "afi": "ipv4", "used": true }]),
        NextHop::V6 { global, link_local } => {
            let mut v = vec![
                json!({ "ip": global.to_string(), "afi": "ipv6", "scope": "global", "used": true }),
            ];
            if let Some(ll) = link_local {
                v.push(json!({ "ip": ll.to_string(), "afi": "ipv6", "scope": "link-local" }));
            }
            Value::Array(v)
        }
        NextHop::Unspecified => {
            json!([{ "ip": if matches!(p.source, PathSource::Local) { "0.0.0.0" } else { "::" }, "afi": "ipv4", "used": true }])
        }
    }
}

fn community_strings(p: &PathView) -> (Option<String>, Option<String>) {
    let c = (!p.attrs.communities.is_empty()).then(|| {
        p.attrs
            .communities
            .iter()
            .map(|c| crate::bgp::display::community(*c))
            .collect::<Vec<_>>()
            .join(" ")
    });
    let l = (!p.attrs.large_communities().is_empty()).then(|| {
        p.attrs
            .large_communities()
            .iter()
            .map(|c| format!("{}:{}:{}", c.global_admin, c.local_data1, c.local_data2))
            .collect::<Vec<_>>()
            .join(" ")
    });
    (c, l)
}

fn table_path_json(r: &RouteView, p: &PathView) -> Value {
    let (peer_id, path_from, weight) = match &p.source {
        PathSource::Local => ("(unspec)".to_string(), "external", 32768),
        PathSource::Peer { address, ebgp, .. } => {
            (address.to_string(), if *ebgp { "external" } else { "internal" }, 0)
        }
    };
    let (community, large) = community_strings(p);
    json!({
        "valid": true,
        "bestpath": p.best,
        "multipath": p.multipath || p.best,
        "stale": p.stale,
        "selectionReason": p.reason,
        "pathFrom": path_from,
        "prefix": r.prefix.network().to_string(),
        "prefixLen": r.prefix.prefix_len(),
        "network": r.prefix.to_string(),
        "metric": p.attrs.med,
        "locPrf": p.attrs.local_pref,
        "weight": weight,
        "peerId": peer_id,
        "path": p.attrs.as_path.to_string(),
        "origin": origin_name(p.attrs.origin),
        "community": community,
        "largeCommunity": large,
        "nexthops": nexthops_json(p),
    })
}

fn single_route_json(r: &RouteView) -> Value {
    let paths: Vec<Value> = r
        .paths
        .iter()
        .map(|p| {
            let (peer, router_id, kind) = match &p.source {
                PathSource::Local => ("0.0.0.0".to_string(), String::new(), "local"),
                PathSource::Peer { address, router_id, ebgp } => {
                    (address.to_string(), router_id.to_string(), if *ebgp { "external" } else { "internal" })
                }
            };
            let segments: Vec<Value> = p
                .attrs
                .as_path
                .segments()
                .map(|s| {
                    json!({
                        "type": match s.kind {
                            SegmentKind::Sequence => "as-sequence",
                            SegmentKind::Set => "as-set",
                            SegmentKind::ConfedSequence => "as-confed-sequence",
                            SegmentKind::ConfedSet => "as-confed-set",
                        },
                        "list": s.asns,
                    })
                })
                .collect();
            let (community, large) = community_strings(p);
            json!({
                "aspath": {
                    "string": if p.attrs.as_path.is_empty() { "Local".to_string() } else { p.attrs.as_path.to_string() },
                    "segments": segments,
                    "length": p.attrs.as_path.selection_length(),
                },
                "origin": origin_name(p.attrs.origin),
                "metric": p.attrs.med,
                "locPrf": p.attrs.local_pref,
                "weight": if matches!(p.source, PathSource::Local) { 32768 } else { 0 },
                "valid": true,
                "multipath": p.multipath || p.best,
                "stale": p.stale,
                "bestpath": { "overall": p.best, "selectionReason": p.reason },
                "community": community.map(|s| json!({ "string": s })),
                "largeCommunity": large.map(|s| json!({ "string": s })),
                "atomicAggregate": p.attrs.atomic_aggregate(),
                "nexthops": nexthops_json(p),
                "peer": { "peerId": peer, "routerId": router_id, "type": kind },
            })
        })
        .collect();
    json!({ "prefix": r.prefix.to_string(), "paths": paths })
}
