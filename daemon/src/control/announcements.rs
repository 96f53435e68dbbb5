//! `show announcements` and `show running-config`: answered from the announcer and the loaded
//! config rather than from the routing instances.

use std::fmt::Write as _;

use serde_json::{json, Map, Value};

use super::protocol::{Request, VrfSelector};
use crate::announce::compute::{Announcements, Candidate, State};
use crate::announce::runtime::AnnouncerHandle;
use crate::config::Config;

/// Whether this module answers `request`.
pub fn handles(request: &Request) -> bool {
    matches!(request, Request::Announcements { .. } | Request::RunningConfig)
}

pub fn handle(
    announcer: &AnnouncerHandle,
    config: &Config,
    request: &Request,
) -> Result<Value, String> {
    match request {
        Request::Announcements { vrf } => Ok(announcements_json(&announcer.current(), vrf)),
        Request::RunningConfig => {
            // The announcement part may have been reloaded (SIGHUP) since the daemon started.
            let mut value = serde_json::to_value(config).map_err(|e| e.to_string())?;
            value["announce"] =
                serde_json::to_value(&*announcer.config()).map_err(|e| e.to_string())?;
            Ok(value)
        }
        _ => Err("not an announcement request".into()),
    }
}

fn vrf_key(vrf: &str) -> &str {
    if vrf.is_empty() {
        "default"
    } else {
        vrf
    }
}

fn candidate_json(c: &Candidate) -> Value {
    let (state, detail) = match &c.state {
        State::Announced { peers } => ("announced", json!(peers.to_string())),
        State::Withdrawn { reason } => ("withdrawn", json!(reason.to_string())),
    };
    json!({
        "prefix": c.prefix.map(|p| p.to_string()),
        "vrf": c.vrf.as_deref().map(vrf_key),
        "origin": c.origin.to_string(),
        "state": state,
        "detail": detail,
    })
}

/// `{"vrfs": {NAME: {"originate": {...}, "imports": [...], "imported": {...}}}, "candidates":
/// [...], "collisions": [...]}`; candidates without a VRF (no address at all) are always shown.
pub fn announcements_json(a: &Announcements, selector: &VrfSelector) -> Value {
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
                    "peers": route.peers.to_string(),
                    "origins": route.origins,
                }),
            );
        }
        let imported: Map<String, Value> =
            router.imported.iter().map(|(p, from)| (p.to_string(), json!(vrf_key(from)))).collect();
        let imports: Vec<&str> = router.imports.iter().map(|v| vrf_key(v)).collect();
        vrfs.insert(
            vrf_key(&router.vrf).to_string(),
            json!({ "configured": router.configured, "originate": originate, "imports": imports, "imported": imported }),
        );
    }
    let candidates: Vec<Value> = a
        .candidates
        .iter()
        .filter(|c| c.vrf.as_deref().is_none_or(|v| selector.matches(v)))
        .map(candidate_json)
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

/// Operator text for the two requests.
pub fn text(request: &Request, value: &Value) -> String {
    match request {
        Request::RunningConfig => serde_norway::to_string(value).unwrap_or_default(),
        _ => announcements_text(value),
    }
}

fn announcements_text(value: &Value) -> String {
    let mut out = String::new();
    for (vrf, router) in value["vrfs"].as_object().into_iter().flatten() {
        let _ = writeln!(out, "VRF {vrf}:");
        let imports: Vec<String> =
            router["imports"].as_array().into_iter().flatten().map(s).collect();
        if !imports.is_empty() {
            let _ = writeln!(out, "  imports from VRF {}", imports.join(", "));
        }
        let _ = writeln!(out, "  {:<22} {:<28} {:<12} Attributes", "Originated", "Peers", "LocPrf");
        for (prefix, route) in router["originate"].as_object().into_iter().flatten() {
            let communities: Vec<String> =
                route["communities"].as_array().into_iter().flatten().map(s).collect();
            let _ = writeln!(
                out,
                "  {:<22} {:<28} {:<12} {}",
                prefix,
                s(&route["peers"]),
                s(&route["localPref"]),
                communities.join(" ")
            );
        }
        for (prefix, from) in router["imported"].as_object().into_iter().flatten() {
            let _ = writeln!(out, "  {:<22} imported from VRF {}", prefix, s(from));
        }
        out.push('\n');
    }
    let _ = writeln!(
        out,
        "{:<22} {:<9} {:<10} {:<44} Origin",
        "Prefix", "VRF", "State", "Peers / reason"
    );
    for c in value["candidates"].as_array().into_iter().flatten() {
        let _ = writeln!(
            out,
            "{:<22} {:<9} {:<10} {:<44} {}",
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
