//! `uplink show l2 [--json]`: layer 2 mode as this node sees it — the membership (who is
//! alive, with the layer 2 advertisements that select each; its datagrams and what it
//! refused), every Service's addresses with the node that answers for them and why this node
//! does or does not, and the responder's counts.

use std::fmt::Write as _;

use serde_json::Value;

use crate::l2::runtime::Layer2Handle;

pub fn show(layer2: &Layer2Handle) -> Result<Value, String> {
    let mut value = serde_json::to_value(layer2.status()).map_err(|e| e.to_string())?;
    let counts = serde_json::to_value(layer2.counts()).map_err(|e| e.to_string())?;
    if let Some(map) = value.as_object_mut() {
        map.insert("counts".into(), counts);
    }
    Ok(value)
}

/// The answer as text.
pub fn text(v: &Value) -> String {
    let mut out = String::new();
    let s = |v: &Value| v.as_str().unwrap_or("").to_string();
    if let Some(why) = v["not_answering"].as_str() {
        let _ = writeln!(out, "NOT ANSWERING for any address: {why}");
    }
    let membership = &v["membership"];
    if membership.is_object() {
        let alive = membership["alive"].as_object();
        let _ = writeln!(
            out,
            "Membership on {} (detection {}): {} alive, {} down",
            s(&membership["address"]),
            s(&membership["detection"]),
            alive.map_or(0, |a| a.len()),
            membership["down"].as_array().map_or(0, |d| d.len())
        );
        let _ = writeln!(
            out,
            "  members from {}, key from {}",
            s(&membership["members_from"]),
            s(&membership["key_from"])
        );
        for (node, selected_by) in alive.into_iter().flatten() {
            let names: Vec<String> = selected_by.as_array().into_iter().flatten().map(s).collect();
            let _ = writeln!(out, "  {node:<24} alive, selected by {}", list(&names));
        }
        for node in membership["down"].as_array().into_iter().flatten() {
            let _ = writeln!(out, "  {:<24} down", s(node));
        }
        let _ = writeln!(
            out,
            "  datagrams: {} received, {} sent; refused: {} over rate, {} malformed, {} wrong key, {} by the protocol",
            membership["received"], membership["sent"], membership["refused_rate"],
            membership["refused_malformed"], membership["refused_wrong_key"],
            membership["refused_protocol"]
        );
    }
    let counts = v.pointer("/counts/addresses");
    let _ = writeln!(
        out,
        "{:<40} {:<30} {:<16} {:>8} {:>8} {:>8}  Why",
        "Service", "Addresses", "Answered by", "Requests", "Replies", "Gratuit."
    );
    for service in v["services"].as_array().into_iter().flatten() {
        let addresses: Vec<String> =
            service["addresses"].as_array().into_iter().flatten().map(s).collect();
        let sum = |field: &str| -> u64 {
            let count = |a: &String| counts?.get(a)?.get(field)?.as_u64();
            addresses.iter().map(|a| count(a).unwrap_or(0)).sum()
        };
        let answering = service["answering"].as_str().unwrap_or("-");
        let why = why(&service["state"]);
        let _ = writeln!(
            out,
            "{:<40} {:<30} {:<16} {:>8} {:>8} {:>8}  {why}",
            s(&service["service"]),
            addresses.join(","),
            answering,
            sum("requests_received"),
            sum("responses_sent"),
            sum("gratuitous_sent"),
        );
    }
    let dropped = v.pointer("/counts/dropped").and_then(Value::as_object);
    if let Some(dropped) = dropped.filter(|d| !d.is_empty()) {
        let parts: Vec<String> = dropped.iter().map(|(why, n)| format!("{why} {n}")).collect();
        let _ = writeln!(out, "Frames dropped: {}", parts.join(", "));
    }
    out
}

fn list(names: &[String]) -> String {
    if names.is_empty() {
        "nothing (not a candidate)".to_string()
    } else {
        names.join(", ")
    }
}

/// A state (`announce::l2::L2State`) in words.
fn why(state: &Value) -> String {
    match state["state"].as_str().unwrap_or("") {
        "answering" => "this node answers".to_string(),
        "ranked_below" => {
            format!("{} ranks first", state["node"].as_str().unwrap_or("another node"))
        }
        "not_selected" => "no L2Advertisement of the pool selects this node".to_string(),
        "no_local_endpoint" => "externalTrafficPolicy Local: no ready endpoint here".to_string(),
        "no_ready_endpoint" => "no ready endpoint".to_string(),
        "no_candidate" => "no alive node may answer".to_string(),
        other => other.to_string(),
    }
}
