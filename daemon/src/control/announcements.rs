//! `show announcements` and `show running-config`: answered from the announcer and the loaded
//! config rather than from the routing instances.

use std::fmt::Write as _;

use serde_json::{json, Map, Value};

use super::protocol::VrfSelector;
use crate::announce::compute::{Announcements, Candidate, PeerSet, State};
use crate::announce::runtime::AnnouncerHandle;
use crate::bgp::configure::advertise_filter;
use crate::config::{vrf_display_name, Config, Neighbor};
use ipnet::IpNet;

/// `show running-config`: the merged config; the announcement part is the announcer's, which
/// a reload may have changed since the daemon started.
pub fn running_config_json(config: &Config, announcer: &AnnouncerHandle) -> Result<Value, String> {
    let mut value = serde_json::to_value(config).map_err(|e| e.to_string())?;
    let announce = serde_json::to_value(&*announcer.config()).map_err(|e| e.to_string())?;
    if let Some(map) = value.as_object_mut() {
        map.insert("announce".into(), announce);
    }
    Ok(value)
}

/// The neighbors a prefix goes to: "all peers" and "by policy" spelt out for the router in
/// `vrf`.
fn peer_list(
    config: Option<&Config>,
    vrf: Option<&str>,
    prefix: Option<IpNet>,
    peers: &PeerSet,
) -> String {
    let router = config.and_then(|c| c.bgp.routers.iter().find(|r| Some(r.vrf.as_str()) == vrf));
    let names = |pick: &dyn Fn(&Neighbor) -> bool| -> Option<String> {
        let list: Vec<String> =
            router?.neighbors.iter().filter(|n| pick(n)).map(|n| n.address.to_string()).collect();
        Some(if list.is_empty() {
            "no peer (no to_advertise allows it)".into()
        } else {
            list.join(", ")
        })
    };
    let listed = match peers {
        PeerSet::All => names(&|_| true),
        PeerSet::ByPolicy => {
            names(&|n| prefix.is_some_and(|p| advertise_filter(&n.to_advertise).allows_local(&p)))
        }
        PeerSet::Only(_) => None,
    };
    listed.unwrap_or_else(|| peers.to_string())
}

fn candidate_json(c: &Candidate, config: Option<&Config>) -> Value {
    let (state, detail) = match &c.state {
        State::Announced { peers } => {
            ("announced", json!(peer_list(config, c.vrf.as_deref(), c.prefix, peers)))
        }
        State::Withdrawn { reason } => ("withdrawn", json!(reason.to_string())),
    };
    json!({
        "prefix": c.prefix.map(|p| p.to_string()),
        "vrf": c.vrf.as_deref().map(vrf_display_name),
        "origin": c.origin.to_string(),
        "state": state,
        "detail": detail,
    })
}

/// `{"vrfs": {NAME: {"originate": {...}, "imports": [...], "imported": {...}}}, "candidates":
/// [...], "collisions": [...]}`; candidates without a VRF (no address at all) are always shown.
pub fn announcements_json(
    a: &Announcements,
    selector: &VrfSelector,
    config: Option<&Config>,
) -> Value {
    let mut vrfs = Map::new();
    for router in a.routers.iter().filter(|r| selector.matches(&r.vrf)) {
        let mut originate = Map::new();
        for (prefix, route) in &router.originate {
            let communities: Vec<String> =
                route.communities.iter().map(|c| c.to_string()).collect();
            originate.insert(
                prefix.to_string(),
                json!({
                    "communities": communities,
                    "localPref": route.local_pref,
                    "peers": peer_list(config, Some(&router.vrf), Some(*prefix), &route.peers),
                    "origins": route.origins,
                }),
            );
        }
        let imported: Map<String, Value> = router
            .imported
            .iter()
            .map(|(p, from)| {
                let peers = peer_list(config, Some(&router.vrf), Some(*p), &PeerSet::ByPolicy);
                (p.to_string(), json!({ "from": vrf_display_name(from), "peers": peers }))
            })
            .collect();
        let imports: Vec<&str> = router.imports.iter().map(|v| vrf_display_name(v)).collect();
        vrfs.insert(
            vrf_display_name(&router.vrf).to_string(),
            json!({ "configured": router.configured, "originate": originate, "imports": imports, "imported": imported }),
        );
    }
    let candidates: Vec<Value> = a
        .candidates
        .iter()
        .filter(|c| c.vrf.as_deref().is_none_or(|v| selector.matches(v)))
        .map(|c| candidate_json(c, config))
        .collect();
    json!({
        "vrfs": vrfs,
        "candidates": candidates,
        "collisions": serde_json::to_value(&a.allocation.collisions).unwrap_or(Value::Null),
    })
}

fn s(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => "-".into(),
        other => other.to_string(),
    }
}

/// `show running-config` as YAML-like text.
pub fn running_config_text(value: &Value) -> String {
    serde_norway::to_string(value).unwrap_or_default()
}

/// `show announcements` as operator text.
pub fn announcements_text(value: &Value) -> String {
    let mut out = String::new();
    // Wide enough for the longest prefix (a dual-stack service's IPv6 /128 can be long), so
    // the columns stay aligned.
    let originated = value["vrfs"]
        .as_object()
        .into_iter()
        .flat_map(|v| v.values())
        .flat_map(|r| r["originate"].as_object().into_iter().flat_map(|o| o.keys()))
        .map(String::len);
    let candidates =
        value["candidates"].as_array().into_iter().flatten().map(|c| s(&c["prefix"]).len());
    let w = originated.chain(candidates).max().unwrap_or(0).max(22);
    for (vrf, router) in value["vrfs"].as_object().into_iter().flatten() {
        let _ = writeln!(out, "VRF {vrf}:");
        let imports: Vec<String> =
            router["imports"].as_array().into_iter().flatten().map(s).collect();
        if !imports.is_empty() {
            let _ = writeln!(out, "  imports from VRF {}", imports.join(", "));
        }
        let _ = writeln!(out, "  {:<w$} {:<28} {:<12} Attributes", "Originated", "Peers", "LocPrf");
        for (prefix, route) in router["originate"].as_object().into_iter().flatten() {
            let communities: Vec<String> =
                route["communities"].as_array().into_iter().flatten().map(s).collect();
            let _ = writeln!(
                out,
                "  {:<w$} {:<28} {:<12} {}",
                prefix,
                s(&route["peers"]),
                s(&route["localPref"]),
                communities.join(" ")
            );
        }
        for (prefix, route) in router["imported"].as_object().into_iter().flatten() {
            let from = format!("imported from VRF {}", s(&route["from"]));
            let _ = writeln!(out, "  {:<w$} {:<28} {}", prefix, s(&route["peers"]), from);
        }
        out.push('\n');
    }
    let _ = writeln!(
        out,
        "{:<w$} {:<9} {:<10} {:<44} Origin",
        "Prefix", "VRF", "State", "Peers / reason"
    );
    for c in value["candidates"].as_array().into_iter().flatten() {
        let _ = writeln!(
            out,
            "{:<w$} {:<9} {:<10} {:<44} {}",
            s(&c["prefix"]),
            s(&c["vrf"]),
            s(&c["state"]),
            s(&c["detail"]),
            s(&c["origin"])
        );
    }
    for c in value["collisions"].as_array().into_iter().flatten() {
        let _ = writeln!(
            out,
            "collision: {} wanted {} in pool {} (held by {}), got {}",
            s(&c["service"]),
            s(&c["home"]),
            s(&c["pool"]),
            s(&c["holder"]),
            s(&c["got"])
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::announce::compute_config;
    use crate::config::load_str;

    #[test]
    fn announcements_render_with_reasons_and_peers() {
        let text = r#"
[node]
name = "wk1"
[[bgp.routers]]
asn = 65801
[[bgp.routers.neighbors]]
address = "172.18.20.1"
asn = 65102
[[pools]]
name = "vips"
addresses = ["192.0.2.0/28"]
[[advertisements]]
name = "all"
communities = ["65000:1"]
[[services]]
name = "up"
load_balancer_ip = "192.0.2.1"
[[services]]
name = "elsewhere"
load_balancer_ip = "192.0.2.2"
traffic_policy = "local"
endpoints = [{ address = "10.0.0.9", node = "wk9" }]
"#;
        let config = load_str("t.toml", text).unwrap();
        let result = compute_config(&config, Default::default());
        let json = announcements_json(&result, &VrfSelector::Default, Some(&config));
        let route = &json["vrfs"]["default"]["originate"]["192.0.2.1/32"];
        assert_eq!(route["peers"], "172.18.20.1");
        assert_eq!(route["communities"][0], "65000:1");
        let text = text_of(&json);
        assert!(text.contains("VRF default:"), "{text}");
        assert!(text.contains("192.0.2.2/32") && text.contains("no local endpoint"), "{text}");
        assert!(text.contains("announced") && text.contains("service default/up"), "{text}");
    }

    #[test]
    fn dual_stack_service_shows_a_line_per_address_aligned() {
        let text = r#"
[[bgp.routers]]
asn = 65801
[[bgp.routers.neighbors]]
address = "172.18.20.1"
asn = 65102
[[bgp.routers.neighbors]]
address = "fd00:18:20::1"
asn = 65102
[[pools]]
name = "vips"
addresses = ["192.0.2.0/28", "2001:db8:aaaa:bbbb:cccc:dddd:eeee:0/120"]
[[advertisements]]
name = "all"
[[services]]
name = "web"
ip_family_policy = "require-dual-stack"
load_balancer_ips = ["192.0.2.1", "2001:db8:aaaa:bbbb:cccc:dddd:eeee:1"]
"#;
        let config = load_str("t.toml", text).unwrap();
        let result = compute_config(&config, Default::default());
        let json = announcements_json(&result, &VrfSelector::Default, Some(&config));
        let originate = json["vrfs"]["default"]["originate"].as_object().unwrap();
        assert!(originate.contains_key("192.0.2.1/32"), "{json}");
        assert!(originate.contains_key("2001:db8:aaaa:bbbb:cccc:dddd:eeee:1/128"), "{json}");
        let text = text_of(&json);
        let lines: Vec<&str> =
            text.lines().filter(|l| l.contains("announced") || l.starts_with("Prefix")).collect();
        assert_eq!(lines.len(), 3, "{text}");
        // The VRF column starts at the same place on every line.
        let column: Vec<usize> =
            lines.iter().map(|l| l.find("default").or_else(|| l.find("VRF")).unwrap()).collect();
        assert!(column.iter().all(|c| *c == column[0]), "{text}");
    }

    #[test]
    fn router_prefixes_list_the_peers_whose_to_advertise_allows_them() {
        let text = r#"
[[bgp.routers]]
asn = 65801
prefixes = ["10.0.0.0/24", "10.0.1.0/24"]
[[bgp.routers.neighbors]]
address = "172.18.20.1"
asn = 65102
to_advertise = { allowed = { mode = "all" } }
[[bgp.routers.neighbors]]
address = "172.18.20.9"
asn = 65102
to_advertise = { allowed = { prefixes = ["10.0.1.0/24"] } }
"#;
        let config = load_str("t.toml", text).unwrap();
        let result = compute_config(&config, Default::default());
        let json = announcements_json(&result, &VrfSelector::Default, Some(&config));
        let peers = |p: &str| json["vrfs"]["default"]["originate"][p]["peers"].clone();
        assert_eq!(peers("10.0.0.0/24"), "172.18.20.1");
        assert_eq!(peers("10.0.1.0/24"), "172.18.20.1, 172.18.20.9");
    }

    fn text_of(value: &Value) -> String {
        announcements_text(value)
    }
}
