//! `uplink show kubernetes [--json]`: the Kubernetes source as it stands — the API server, each
//! kind's watch (listing, watching, failing since when and why, not served, forbidden), the
//! last complete set, the objects the config refused and why, the status writes.

use std::fmt::Write as _;

use serde_json::Value;

use crate::kubernetes::health::{self, Health};

/// The answer: the record with `stale` (MetalLB's `config_stale_bool`) beside it.
pub fn show(health: Option<&Health>) -> Result<Value, String> {
    let Some(health) = health else {
        return Err("no [kubernetes] section in the config: uplink reads files only".into());
    };
    let record = health::read(health);
    let stale = record.stale();
    let mut value = serde_json::to_value(record).map_err(|e| e.to_string())?;
    if let Some(map) = value.as_object_mut() {
        map.insert("stale".into(), Value::Bool(stale));
    }
    Ok(value)
}

/// The answer as text.
pub fn text(v: &Value) -> String {
    let mut out = String::new();
    let s = |v: &Value| v.as_str().unwrap_or("").to_string();
    let ago = |v: &Value| match v.as_u64() {
        Some(at) => format!("{} s ago", health::unix_now().saturating_sub(at)),
        None => "never".to_string(),
    };
    let _ = writeln!(
        out,
        "API server {}, node {}, namespace {}",
        s(&v["server"]),
        s(&v["node"]),
        s(&v["namespace"])
    );
    if let Some(since) = v["server_not_ready_since"].as_u64() {
        let _ = writeln!(
            out,
            "API server NOT READY for {} s ({}); every failing watch lists as soon as it answers",
            health::unix_now().saturating_sub(since),
            s(&v["server_not_ready"])
        );
    }
    let state = if v["stale"] == Value::Bool(true) {
        "STALE: the config in force may differ from the cluster (see below)"
    } else {
        "current"
    };
    let _ = writeln!(
        out,
        "Last complete set: {} ({} objects); {state}",
        ago(&v["last_sync"]),
        v["objects"].as_u64().unwrap_or(0)
    );
    let _ = writeln!(
        out,
        "\n{:<32} {:<22} {:>7}  {:<12} {:>5}  Error",
        "Kind", "State", "Objects", "Listed", "Lists"
    );
    for kind in v["kinds"].as_array().into_iter().flatten() {
        let mut state = s(&kind["state"]);
        if let Some(since) = kind["failing_since"].as_u64() {
            state = format!("{state} {} s", health::unix_now().saturating_sub(since));
        }
        let error = match (kind["error"].as_str(), kind["last_failure"].as_str()) {
            (Some(now), _) => now.to_string(),
            (None, Some(last)) => format!("(last failure: {last})"),
            (None, None) => String::new(),
        };
        let _ = writeln!(
            out,
            "{:<32} {:<22} {:>7}  {:<12} {:>5}  {error}",
            s(&kind["kind"]),
            state,
            kind["objects"].as_u64().unwrap_or(0),
            ago(&kind["last_list"]),
            kind["lists"].as_u64().unwrap_or(0),
        );
    }
    let refused = v["refused"].as_array().map(Vec::as_slice).unwrap_or_default();
    if !refused.is_empty() {
        let _ = writeln!(out, "\nRefused objects (left out; everything else applies):");
        for r in refused {
            let _ = writeln!(out, "  {} {}: {}", s(&r["object"]), s(&r["field"]), s(&r["message"]));
        }
    }
    let _ = writeln!(out);
    for (key, what) in [
        ("status_writes", "status.loadBalancer.ingress writes"),
        ("session_writes", "BGPSessionState writes"),
        ("node_state_writes", "FRRNodeState writes"),
        ("layer2_status_writes", "ServiceL2Status writes"),
        ("enactment_writes", "NodeNetworkConfigurationEnactment writes"),
    ] {
        let writes = &v[key];
        let _ = writeln!(
            out,
            "{what}: {} succeeded, {} failed{}",
            writes["succeeded"].as_u64().unwrap_or(0),
            writes["failed"].as_u64().unwrap_or(0),
            writes["last_error"].as_str().map(|e| format!("; last error: {e}")).unwrap_or_default()
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kubernetes::health::{SourceHealth, WatchState};
    use std::sync::{Arc, Mutex};

    #[test]
    fn a_failing_watch_and_a_refused_object_make_it_stale_and_show() {
        let mut record = SourceHealth::new(
            "https://10.0.0.1:6443/".into(),
            "metallb-system".into(),
            "wk1".into(),
        );
        record.register("Service", "v1");
        record.register("IPAddressPool", "metallb.io/v1beta1");
        for kind in &mut record.kinds {
            kind.state = WatchState::Watching;
        }
        let health: Health = Arc::new(Mutex::new(record));
        assert_eq!(show(Some(&health)).unwrap()["stale"], false);
        health::update(&health, |h| {
            let kind = h.kind_mut("Service").unwrap();
            kind.state = WatchState::Failing;
            kind.failing_since = Some(health::unix_now());
            kind.error = Some("connection refused".into());
            h.server_not_ready_since = Some(health::unix_now());
            h.server_not_ready = Some("connection refused".into());
        });
        let value = show(Some(&health)).unwrap();
        assert_eq!(value["stale"], true);
        let shown = text(&value);
        assert!(shown.contains("STALE"), "{shown}");
        assert!(
            shown.contains("Service")
                && shown.contains("failing 0 s")
                && shown.contains("connection refused"),
            "{shown}"
        );
        assert!(shown.contains("API server NOT READY for 0 s (connection refused)"), "{shown}");
        assert!(show(None).unwrap_err().contains("no [kubernetes]"));
    }
}
