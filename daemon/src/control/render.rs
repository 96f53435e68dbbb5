//! vtysh-like text, rendered from the same JSON that `--json` prints, so the two never
//! disagree.

use super::protocol::{Request, VrfSelector};
use serde_json::Value;
use std::fmt::Write as _;

/// The operator text of one answer (the client side's one place that knows every request).
pub fn text(request: &Request, value: &Value) -> String {
    let render: fn(&Value, &str) -> String = match request {
        Request::BgpSummary { .. } => summary,
        Request::BgpNeighbors { .. } => neighbors,
        Request::BgpRoutes { prefix: Some(_), .. } => single_route,
        Request::BgpRoutes { .. } => table,
        Request::BgpNeighborRoutes { .. } => neighbor_routes,
        Request::BfdPeers { .. } => return bfd_peers(value),
        Request::Announcements { .. } => return super::announcements::announcements_text(value),
        Request::RunningConfig => return super::announcements::running_config_text(value),
        Request::Kubernetes => return super::kubernetes::text(value),
        Request::L2 => return super::l2::text(value),
        Request::Fib { .. } => fib,
        Request::Drain { .. } | Request::Undrain => return drain(value),
        Request::Ready => return ready(value),
        Request::Reload => return reload(value),
        Request::ClearBgp { .. } => return clear(value),
    };
    let all = match request {
        Request::BgpSummary { vrf }
        | Request::BgpNeighbors { vrf, .. }
        | Request::BgpRoutes { vrf, .. }
        | Request::BgpNeighborRoutes { vrf, .. }
        | Request::BfdPeers { vrf }
        | Request::Fib { vrf } => *vrf == VrfSelector::All,
        Request::Announcements { .. }
        | Request::RunningConfig
        | Request::Kubernetes
        | Request::L2
        | Request::Drain { .. }
        | Request::Undrain
        | Request::Ready
        | Request::Reload
        | Request::ClearBgp { .. } => false,
    };
    if all {
        let mut out = String::new();
        for (vrf, v) in value.as_object().into_iter().flatten() {
            let _ = writeln!(out, "Instance {vrf}:");
            out.push_str(&render(v, vrf));
        }
        out
    } else {
        render(value, "")
    }
}

/// `uplink reload`: what was applied, router by router and neighbor by neighbor; or why the
/// config was rejected (the same file:line:column lines as `uplink check`).
/// The network policies a reload applied or tried, and those still not Available.
fn reload_policies(v: &Value, out: &mut String) {
    for p in v["network"].as_array().into_iter().flatten() {
        let changed = p["changed"] == Value::Bool(true);
        if changed || p["status"] != "Available" {
            let how = if changed { "" } else { " (unchanged)" };
            let _ = writeln!(
                out,
                "network policy {}: {}{how}: {}",
                s(&p["policy"]),
                s(&p["status"]),
                s(&p["message"])
            );
        }
    }
}

fn reload(v: &Value) -> String {
    let mut out = String::new();
    if v["applied"] != Value::Bool(true) {
        let _ = writeln!(out, "reload of {} rejected; nothing changed:", s(&v["config"]));
        for e in v["config_errors"].as_array().into_iter().flatten() {
            let mut line = s(&e["file"]);
            if e["line"].as_u64().unwrap_or(0) > 0 {
                let _ = write!(line, ":{}:{}", e["line"], e["column"]);
            }
            if !s(&e["field"]).is_empty() {
                let _ = write!(line, ": {}", s(&e["field"]));
            }
            let _ = writeln!(out, "{line}: {}", s(&e["message"]));
        }
        if !v["error"].is_null() {
            let _ = writeln!(out, "{}", s(&v["error"]));
        }
        reload_policies(v, &mut out);
        return out;
    }
    let _ = writeln!(out, "reloaded {} in {} ms", s(&v["config"]), v["duration_ms"]);
    for e in v["refused_objects"].as_array().into_iter().flatten() {
        let _ =
            writeln!(out, "left out {}: {}: {}", s(&e["file"]), s(&e["field"]), s(&e["message"]));
    }
    for note in v["node"].as_array().into_iter().flatten() {
        let _ = writeln!(out, "node: {}", s(note));
    }
    reload_policies(v, &mut out);
    for r in v["routers"].as_array().into_iter().flatten() {
        let _ = write!(out, "router {} (vrf {}): {}", r["asn"], s(&r["vrf"]), s(&r["action"]));
        match r["reason"].as_str() {
            Some(reason) => {
                let _ = writeln!(out, ": {reason}");
            }
            None => out.push('\n'),
        }
        for setting in r["settings"].as_array().into_iter().flatten() {
            let _ = writeln!(out, "  {}", s(setting));
        }
        let list = |key: &str| r[key].as_array().into_iter().flatten();
        for address in list("added") {
            let _ = writeln!(out, "  neighbor {}: added", s(address));
        }
        for address in list("removed") {
            let _ = writeln!(out, "  neighbor {}: removed", s(address));
        }
        for reset in list("reset") {
            let _ = writeln!(
                out,
                "  neighbor {}: reset: {}",
                s(&reset["address"]),
                s(&reset["reason"])
            );
        }
        for update in list("updated") {
            let applied: Vec<String> =
                update["applied"].as_array().into_iter().flatten().map(s).collect();
            let _ = writeln!(
                out,
                "  neighbor {}: updated live: {}",
                s(&update["address"]),
                applied.join("; ")
            );
        }
        for note in list("deferred") {
            let _ = writeln!(out, "  not done: {}", s(note));
        }
        if r["unchanged"].as_u64().unwrap_or(0) > 0 {
            let _ = writeln!(out, "  {} neighbor(s) unchanged", r["unchanged"]);
        }
    }
    out
}

fn s(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

fn summary(v: &Value, _vrf: &str) -> String {
    if let Some(waiting) = super::waiting::render_waiting(v) {
        return waiting;
    }
    let mut out = String::new();
    for (key, title) in [("ipv4Unicast", "IPv4 Unicast"), ("ipv6Unicast", "IPv6 Unicast")] {
        let Some(f) = v.get(key) else { continue };
        let _ = writeln!(out, "{title} Summary (VRF {}):", s(&f["vrfName"]));
        let _ = writeln!(
            out,
            "BGP router identifier {}, local AS number {} vrf-id 0",
            s(&f["routerId"]),
            s(&f["as"])
        );
        let _ = writeln!(out, "BGP table version {}", s(&f["tableVersion"]));
        let _ = writeln!(out, "RIB entries {}", s(&f["ribCount"]));
        let _ = writeln!(out, "Peers {}\n", s(&f["peerCount"]));
        let _ = writeln!(
            out,
            "Neighbor        V         AS   MsgRcvd   MsgSent   TblVer  InQ OutQ  Up/Down State/PfxRcd   PfxSnt Desc"
        );
        for (addr, p) in f["peers"].as_object().into_iter().flatten() {
            let state =
                if s(&p["state"]) == "Established" { s(&p["pfxRcd"]) } else { s(&p["state"]) };
            let mut name = addr.clone();
            if name.len() > 15 {
                let _ = writeln!(out, "{name}");
                name = String::new();
            }
            let _ = writeln!(
                out,
                "{:<15} 4 {:>10} {:>9} {:>9} {:>8} {:>4} {:>4} {:>8} {:>12} {:>8} N/A",
                name,
                s(&p["remoteAs"]),
                s(&p["msgRcvd"]),
                s(&p["msgSent"]),
                s(&p["tableVersion"]),
                s(&p["inq"]),
                s(&p["outq"]),
                s(&p["peerUptime"]),
                state,
                s(&p["pfxSnt"]),
            );
        }
        let _ = writeln!(out, "\nTotal number of neighbors {}", s(&f["totalPeers"]));
        if let Some(peers) = f["peers"].as_object() {
            out.push_str(&super::waiting::render_waiting_peers(peers));
        }
        out.push('\n');
    }
    if out.is_empty() {
        out.push_str("No BGP neighbors found\n");
    }
    out
}

fn neighbors(v: &Value, _vrf: &str) -> String {
    let mut out = String::new();
    for (addr, n) in v.as_object().into_iter().flatten() {
        let kind =
            if n["nbrExternalLink"].as_bool().unwrap_or(true) { "external" } else { "internal" };
        let _ = writeln!(
            out,
            "BGP neighbor is {addr}, remote AS {}, local AS {}, {kind} link",
            s(&n["remoteAs"]),
            s(&n["localAs"])
        );
        let _ = writeln!(
            out,
            "  BGP version 4, remote router ID {}, local router ID {}",
            s(&n["remoteRouterId"]),
            s(&n["localRouterId"])
        );
        let up = match n["bgpTimerUpString"].as_str() {
            Some(t) => format!(", up for {t}"),
            None => String::new(),
        };
        let _ = writeln!(out, "  BGP state = {}{up}", s(&n["bgpState"]));
        let _ = writeln!(
            out,
            "  Hold time is {} seconds, keepalive interval is {} seconds",
            n["bgpTimerHoldTimeMsecs"].as_u64().unwrap_or(0) / 1000,
            n["bgpTimerKeepAliveIntervalMsecs"].as_u64().unwrap_or(0) / 1000
        );
        let _ = writeln!(
            out,
            "  Configured hold time is {} seconds, keepalive interval is {} seconds",
            n["bgpTimerConfiguredHoldTimeMsecs"].as_u64().unwrap_or(0) / 1000,
            n["bgpTimerConfiguredKeepAliveIntervalMsecs"].as_u64().unwrap_or(0) / 1000
        );
        if let Some(caps) = n["neighborCapabilities"].as_object() {
            let _ = writeln!(out, "  Neighbor capabilities:");
            for (k, c) in caps {
                match c.as_object() {
                    // Per family (`multiprotocolExtensions`, `addPath`, ...): one line each.
                    Some(families) if !families.is_empty() => {
                        let _ = writeln!(out, "    {k}:");
                        for (family, how) in families {
                            let words: Vec<&str> = match how {
                                Value::Object(flags) => flags.keys().map(String::as_str).collect(),
                                other => other.as_str().into_iter().collect(),
                            };
                            let _ = writeln!(out, "      {family}: {}", words.join(", "));
                        }
                    }
                    Some(_) => {}
                    None => {
                        let _ = writeln!(out, "    {k}: {}", s(c));
                    }
                }
            }
        }
        let m = &n["messageStats"];
        let _ = writeln!(out, "  Message statistics:\n                         Sent       Rcvd");
        for (label, sent, rcvd) in [
            ("Opens", "opensSent", "opensRecv"),
            ("Notifications", "notificationsSent", "notificationsRecv"),
            ("Updates", "updatesSent", "updatesRecv"),
            ("Keepalives", "keepalivesSent", "keepalivesRecv"),
            ("Total", "totalSent", "totalRecv"),
        ] {
            let _ = writeln!(out, "    {label:<18} {:>10} {:>10}", s(&m[sent]), s(&m[rcvd]));
        }
        for (fam, c) in n["addressFamilyInfo"].as_object().into_iter().flatten() {
            let _ = writeln!(
                out,
                "  For address family: {fam}\n    {} accepted prefixes, {} announced prefixes",
                s(&c["acceptedPrefixCounter"]),
                s(&c["sentPrefixCounter"])
            );
        }
        let _ = writeln!(
            out,
            "  Connections established {}; dropped {}",
            s(&n["connectionsEstablished"]),
            s(&n["connectionsDropped"])
        );
        if let Some(reason) = n["lastResetDueTo"].as_str() {
            let _ = writeln!(out, "  Last reset: {reason}");
        }
        if let Some(local) = n["hostLocal"].as_str() {
            let _ = writeln!(out, "Local host: {local}");
        }
        let _ = writeln!(
            out,
            "Foreign host: {}, Foreign port: {}\n",
            s(&n["hostForeign"]),
            s(&n["portForeign"])
        );
    }
    out
}

/// `advertised-routes` / `received-routes`, as FRR prints them.
fn neighbor_routes(v: &Value, _vrf: &str) -> String {
    if let Some(warning) = v["warning"].as_str() {
        return format!("% {warning}\n");
    }
    let mut out = table_header(&s(&v["bgpTableVersion"]), &v["bgpLocalRouterId"], v);
    let routes = v.get("advertisedRoutes").or_else(|| v.get("receivedRoutes"));
    for (prefix, r) in routes.and_then(Value::as_object).into_iter().flatten() {
        let best = r.pointer("/appliedStatusSymbols/>").and_then(Value::as_bool);
        let status = if best == Some(true) { "*>" } else { "* " };
        let hop = r.get("nextHop").or_else(|| r.get("nextHopGlobal")).map(s).unwrap_or_default();
        let metric = r.get("metric").map(s).unwrap_or_default();
        let pref = r.get("locPrf").map(s).unwrap_or_default();
        let path = s(&r["path"]);
        let path = if path.is_empty() { String::new() } else { format!("{path} ") };
        let _ = writeln!(
            out,
            "{status} {prefix:<16} {hop:<19} {metric:>6} {pref:>6} {:>6} {path}{}",
            s(&r["weight"]),
            s(&r["bgpOriginCode"])
        );
    }
    let _ = writeln!(out, "\nTotal number of prefixes {}", s(&v["totalPrefixCounter"]));
    out
}

/// What FRR prints above a list of routes: the table's version, router id, default LOCAL_PREF
/// and AS (`defaultLocPrf`, `localAS` of `v`), the codes and the column titles.
fn table_header(version: &str, router_id: &Value, v: &Value) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "BGP table version is {version}, local router ID is {}, vrf id 0",
        s(router_id)
    );
    let _ = writeln!(
        out,
        "Default local pref {}, local AS {}",
        s(&v["defaultLocPrf"]),
        s(&v["localAS"])
    );
    out.push_str(LEGEND);
    let _ = writeln!(out, "\n   Network          Next Hop            Metric LocPrf Weight Path");
    out
}

const LEGEND: &str =
    "Status codes:  s suppressed, d damped, h history, * valid, > best, = multipath,
               i internal, r RIB-failure, S Stale, R Removed
Nexthop codes: @NNN nexthop's vrf id, < announce-nh-self
Origin codes:  i - IGP, e - EGP, ? - incomplete
";

fn origin_code(o: &str) -> &'static str {
    match o {
        "IGP" => "i",
        "EGP" => "e",
        _ => "?",
    }
}

fn table(v: &Value, _vrf: &str) -> String {
    let mut out = table_header("0", &v["routerId"], v);
    let mut routes = 0;
    let mut paths = 0;
    for (prefix, list) in v["routes"].as_object().into_iter().flatten() {
        routes += 1;
        for (i, p) in list.as_array().into_iter().flatten().enumerate() {
            paths += 1;
            let best = p["bestpath"].as_bool().unwrap_or(false);
            let multi = p["multipath"].as_bool().unwrap_or(false);
            let mark = if best {
                ">"
            } else if multi {
                "="
            } else {
                " "
            };
            let internal = if s(&p["pathFrom"]) == "internal" { "i" } else { " " };
            let network = if i == 0 { prefix.as_str() } else { "" };
            let nh = s(p.pointer("/nexthops/0/ip").unwrap_or(&Value::Null));
            let mut line = format!("*{mark}{internal}{network:<17}{nh:<20}");
            if network.len() > 16 || nh.len() > 19 {
                line = format!("*{mark}{internal}{network}\n                    {nh:<20}");
            }
            let path = s(&p["path"]);
            let _ = writeln!(
                out,
                "{line}{:>6} {:>6} {:>6} {}{}{}",
                s(&p["metric"]),
                s(&p["locPrf"]),
                s(&p["weight"]),
                path,
                if path.is_empty() { "" } else { " " },
                origin_code(&s(&p["origin"]))
            );
        }
    }
    let _ = writeln!(out, "\nDisplayed  {routes} routes and {paths} total paths");
    out
}

/// Like `show ip route bgp`: one line per prefix, its next hops below, the group and state.
fn fib(v: &Value, _vrf: &str) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "Codes: * installed, p pending, f failed (kernel error follows)");
    let _ = writeln!(
        out,
        "In the kernel: ip route show proto uplink; ip nexthop show protocol uplink (number {})\n",
        crate::fib::msg::RTPROT_UPLINK
    );
    for (prefix, list) in v.as_object().into_iter().flatten() {
        for r in list.as_array().into_iter().flatten() {
            fib_entry(&mut out, prefix, r);
        }
    }
    out
}

/// One route of `show fib`; a route leaked from another VRF says so after each hop, as FRR's
/// `show ip route vrf` does.
fn fib_entry(out: &mut String, prefix: &str, r: &Value) {
    let code = match s(&r["state"]).as_str() {
        "installed" => "*",
        "failed" => "f",
        _ => "p",
    };
    let group = match r["nexthopGroupId"].as_u64() {
        Some(id) => format!(" nhg {id}"),
        None => String::new(),
    };
    let _ = writeln!(
        out,
        "B>{code} {prefix} [table {}, metric {}]{group} {}",
        s(&r["table"]),
        s(&r["metric"]),
        s(&r["state"])
    );
    let leaked = r["leakedFrom"].as_str();
    let hops = r["nexthops"].as_array().map(Vec::as_slice).unwrap_or_default();
    for h in hops {
        let vrf = leaked.map(|from| format!(" (vrf {from})")).unwrap_or_default();
        let _ = writeln!(out, "  {code} via {}, {}{vrf}", s(&h["ip"]), s(&h["interfaceName"]));
    }
    if hops.is_empty() {
        let bgp: Vec<String> = r["bgpNexthops"].as_array().into_iter().flatten().map(s).collect();
        let from = leaked.map(|f| format!(" (leaked from vrf {f})")).unwrap_or_default();
        let _ = writeln!(out, "    unresolved: {}{from}", bgp.join(", "));
    }
    if let Some(e) = r["error"].as_str() {
        let _ = writeln!(out, "    error: {e}");
        if let (Some(n), Some(next)) = (r["attempts"].as_u64(), r["retryInSeconds"].as_f64()) {
            let _ = writeln!(out, "    tried {n} time(s), next try in {next:.1} s");
        }
    }
}

fn single_route(v: &Value, _vrf: &str) -> String {
    let mut out = String::new();
    let list = v["paths"].as_array().cloned().unwrap_or_default();
    let _ = writeln!(out, "BGP routing table entry for {}", s(&v["prefix"]));
    let _ = writeln!(out, "Paths: ({} available)", list.len());
    for p in &list {
        let _ = writeln!(out, "  {}", s(at(p, "/aspath/string")));
        let nh = s(p.pointer("/nexthops/0/ip").unwrap_or(&Value::Null));
        let _ = writeln!(
            out,
            "    {nh} from {} ({})",
            s(at(p, "/peer/peerId")),
            s(at(p, "/peer/routerId"))
        );
        let mut flags = format!("      Origin {}", s(&p["origin"]));
        if let Some(m) = p["metric"].as_u64() {
            let _ = write!(flags, ", metric {m}");
        }
        if let Some(l) = p["locPrf"].as_u64() {
            let _ = write!(flags, ", localpref {l}");
        }
        let _ = write!(flags, ", weight {}, valid, {}", s(&p["weight"]), s(at(p, "/peer/type")));
        if p["multipath"].as_bool().unwrap_or(false) {
            flags.push_str(", multipath");
        }
        if at(p, "/bestpath/overall").as_bool().unwrap_or(false) {
            flags.push_str(", best");
        }
        let _ = writeln!(out, "{flags}");
        if let Some(reason) = at(p, "/bestpath/selectionReason").as_str() {
            let _ = writeln!(out, "      Not best: {reason}");
        }
        if let Some(c) = at(p, "/community/string").as_str() {
            let _ = writeln!(out, "      Community: {c}");
        }
        if let Some(c) = at(p, "/largeCommunity/string").as_str() {
            let _ = writeln!(out, "      Large Community: {c}");
        }
    }
    out
}

/// FRR's `show bfd peers` text.
fn bfd_peers(v: &Value) -> String {
    let mut out = String::from("BFD Peers:\n");
    for p in v.as_array().into_iter().flatten() {
        let hop = if p["multihop"].as_bool() == Some(true) { " multihop" } else { "" };
        let local = p.get("local").map(|l| format!(" local-address {}", s(l))).unwrap_or_default();
        let _ = writeln!(out, "\tpeer {}{hop}{local} vrf {}", s(&p["peer"]), s(&p["vrf"]));
        let _ = writeln!(out, "\t\tID: {}", s(&p["id"]));
        let _ = writeln!(out, "\t\tRemote ID: {}", s(&p["remote-id"]));
        let mode = if p["passive-mode"].as_bool() == Some(true) { "Passive" } else { "Active" };
        let _ = writeln!(out, "\t\t{mode} mode");
        if let Some(ttl) = p.get("minimum-ttl") {
            let _ = writeln!(out, "\t\tMinimum TTL: {}", s(ttl));
        }
        let _ = writeln!(out, "\t\tStatus: {}", s(&p["status"]));
        for (key, title) in [("uptime", "Uptime"), ("downtime", "Downtime")] {
            if let Some(secs) = p.get(key).and_then(Value::as_u64) {
                let _ = writeln!(out, "\t\t{title}: {}", frr_duration(secs));
            }
        }
        let _ = writeln!(out, "\t\tDiagnostics: {}", s(&p["diagnostic"]));
        let _ = writeln!(out, "\t\tRemote diagnostics: {}", s(&p["remote-diagnostic"]));
        let _ = writeln!(out, "\t\tPeer Type: configured (profile {})", s(&p["profile"]));
        if let Some(key_id) = p.get("authentication-key-id") {
            let kind = s(&p["authentication-type"]);
            let _ = writeln!(out, "\t\tAuthentication: {kind}, key ID {}", s(key_id));
        }
        for (title, prefix) in [("Local timers", ""), ("Remote timers", "remote-")] {
            let _ = writeln!(out, "\t\t{title}:");
            let _ = writeln!(
                out,
                "\t\t\tDetect-multiplier: {}",
                s(&p[format!("{prefix}detect-multiplier")])
            );
            let _ = writeln!(
                out,
                "\t\t\tReceive interval: {}ms",
                s(&p[format!("{prefix}receive-interval")])
            );
            let _ = writeln!(
                out,
                "\t\t\tTransmission interval: {}ms",
                s(&p[format!("{prefix}transmit-interval")])
            );
        }
        if let Some(tx) = p.get("negotiated-transmit-interval") {
            let _ = writeln!(out, "\t\tNegotiated transmission interval: {}ms", s(tx));
        }
        if let Some(detect) = p.get("detection-time") {
            let _ = writeln!(out, "\t\tDetection time: {}ms", s(detect));
        }
        let _ = writeln!(
            out,
            "\t\tCounters: control input {}, output {}, discarded {}, session up {}, down {}",
            s(&p["control-packet-input"]),
            s(&p["control-packet-output"]),
            s(&p["control-packet-discarded"]),
            s(&p["session-up"]),
            s(&p["session-down"])
        );
        out.push('\n');
    }
    out
}

/// FRR's `N hour(s), N minute(s), N second(s)`, leading zero units left out.
fn frr_duration(secs: u64) -> String {
    let (days, hours, minutes, seconds) =
        (secs / 86_400, secs / 3600 % 24, secs / 60 % 60, secs % 60);
    let mut parts = Vec::new();
    for (n, unit) in [(days, "day"), (hours, "hour"), (minutes, "minute")] {
        if n > 0 || !parts.is_empty() {
            parts.push(format!("{n} {unit}(s)"));
        }
    }
    parts.push(format!("{seconds} second(s)"));
    parts.join(", ")
}

fn drain(value: &Value) -> String {
    match value["drain"].as_str().unwrap_or("") {
        "draining" => "draining: GRACEFUL_SHUTDOWN (RFC 8326) announced on everything this node \
                       originates; service addresses are withdrawn after drain_time \
                       (`uplink show announcements`; `uplink undrain` ends it)\n"
            .into(),
        "drained" => "drained: service addresses withdrawn from every peer, the rest announced \
                      with GRACEFUL_SHUTDOWN (`uplink undrain` ends it)\n"
            .into(),
        "cancelled" => "the drain was cancelled by `uplink undrain`\n".into(),
        _ => "undrained: everything is announced again, service addresses where they are ready\n"
            .into(),
    }
}

/// `uplink wait-ready`: one line per session that is not ready.
/// `clear bgp`: one line per neighbor.
fn clear(value: &Value) -> String {
    let mut out = String::new();
    for n in value["clear"].as_array().into_iter().flatten() {
        let (neighbor, vrf) =
            (n["neighbor"].as_str().unwrap_or("?"), n["vrf"].as_str().unwrap_or("?"));
        match (n["done"].as_str(), n["error"].as_str()) {
            (Some(done), _) => {
                let _ = writeln!(out, "neighbor {neighbor} (vrf {vrf}): {done}");
            }
            (None, error) => {
                let _ = writeln!(
                    out,
                    "neighbor {neighbor} (vrf {vrf}): not cleared: {}",
                    error.unwrap_or("?")
                );
            }
        }
    }
    out
}

fn ready(value: &Value) -> String {
    let mut out = String::new();
    for s in value["sessions"].as_array().into_iter().flatten().filter(|s| s["ready"] != true) {
        let _ = writeln!(
            out,
            "not ready: neighbor {} (VRF {}): {}",
            s["neighbor"].as_str().unwrap_or("?"),
            s["vrf"].as_str().unwrap_or("default"),
            s["why"].as_str().unwrap_or("?")
        );
    }
    if value["ready"] == true {
        let count = value["sessions"].as_array().map_or(0, Vec::len);
        let _ = writeln!(out, "ready: {count} session(s) Established with End-of-RIB both ways");
    }
    out
}

/// The value at a JSON pointer (`/paths/0/ip`), or null: rendering never fails on a missing key.
fn at<'a>(v: &'a Value, pointer: &str) -> &'a Value {
    v.pointer(pointer).unwrap_or(&Value::Null)
}

#[cfg(test)]
mod bfd_tests {
    use super::*;

    #[test]
    fn bfd_peers_text_follows_frr() {
        let v = serde_json::json!([{
            "multihop": false, "peer": "10.0.1.1", "local": "10.0.1.2", "vrf": "default",
            "id": 1, "remote-id": 2, "passive-mode": false, "status": "up", "uptime": 3723,
            "diagnostic": "ok", "remote-diagnostic": "ok", "profile": "tor",
            "detect-multiplier": 3, "receive-interval": 300, "transmit-interval": 300,
            "remote-detect-multiplier": 3, "remote-receive-interval": 300,
            "remote-transmit-interval": 300, "control-packet-input": 5,
            "control-packet-output": 6, "session-up": 1, "session-down": 0,
            "control-packet-discarded": 4, "authentication-type": "meticulous-keyed-sha1",
            "authentication-key-id": 1
        }]);
        let text = text(&Request::BfdPeers { vrf: VrfSelector::All }, &v);
        assert!(
            text.starts_with("BFD Peers:\n\tpeer 10.0.1.1 local-address 10.0.1.2 vrf default\n"),
            "{text}"
        );
        assert!(
            text.contains("\t\tStatus: up\n\t\tUptime: 1 hour(s), 2 minute(s), 3 second(s)\n"),
            "{text}"
        );
        assert!(text.contains("\t\tRemote timers:\n\t\t\tDetect-multiplier: 3\n"), "{text}");
        assert!(text.contains("\t\tAuthentication: meticulous-keyed-sha1, key ID 1\n"), "{text}");
        assert!(text.contains("output 6, discarded 4, session up 1"), "{text}");
    }
}
