//! `uplink show network [policies|enactments|state]`, `uplink apply network` and the network
//! part of `uplink check`. These read the config, the enactments file and nmstate directly
//! instead of asking the daemon, so they also work on a node whose daemon is stopped — the
//! moment an operator most needs them.

use std::fmt::Write as _;
use std::future::Future;

use serde_json::{json, Value};

use crate::config::network::NetworkConfig;
use crate::config::Config;
use crate::netconf::backend::Backend;
use crate::netconf::enactment::rfc3339;
use crate::netconf::{
    apply_policies, plan, ApplyOptions, Enactment, EnactmentStatus, EnactmentStore,
};

/// Runs `future` on a runtime of its own (nmstate is async; the CLI is not).
pub fn block_on<F: Future>(future: F) -> Result<F::Output, String> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start a runtime: {e}"))?;
    Ok(runtime.block_on(future))
}

/// The selected policies as JSON.
pub fn policies(network: &NetworkConfig) -> Value {
    Value::Array(
        network
            .policies
            .iter()
            .map(|p| {
                json!({
                    "name": p.name,
                    "nodeSelector": p.node_selector,
                    "maxUnavailable": p.max_unavailable,
                    "generated": p.generated,
                    "interfaces": p.desired_state.interface_names(),
                    "desiredState": p.desired_state.to_json(),
                    "sources": p.sources,
                })
            })
            .collect(),
    )
}

pub fn render_policies(value: &Value) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "{:<24} {:<28} Source", "Policy", "Interfaces");
    for policy in value.as_array().into_iter().flatten() {
        let interfaces: Vec<&str> = policy["interfaces"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        let source = if policy["generated"] == true {
            "uplink, for [[networks]]".to_string()
        } else {
            policy["sources"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .collect::<Vec<_>>()
                .join(", ")
        };
        let _ = writeln!(
            out,
            "{:<24} {:<28} {}",
            policy["name"].as_str().unwrap_or(""),
            interfaces.join(","),
            source
        );
    }
    out
}

/// The enactments file as JSON (each with its time also in RFC 3339).
pub fn enactments(network: &NetworkConfig) -> Result<Value, String> {
    let store = EnactmentStore::open(&network.state_dir)?;
    Ok(Value::Array(store.enactments.values().map(enactment_json).collect()))
}

pub fn enactment_json(e: &Enactment) -> Value {
    let mut value = serde_json::to_value(e).unwrap_or(Value::Null);
    if let Value::Object(map) = &mut value {
        map.insert("since".into(), Value::String(rfc3339(e.time)));
    }
    value
}

pub fn render_enactments(value: &Value) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "{:<24} {:<12} {:<21} Message", "Policy", "Status", "Since");
    for e in value.as_array().into_iter().flatten() {
        let _ = writeln!(
            out,
            "{:<24} {:<12} {:<21} {}",
            e["policy"].as_str().unwrap_or(""),
            e["status"].as_str().unwrap_or(""),
            e["since"].as_str().unwrap_or(""),
            e["message"].as_str().unwrap_or("")
        );
    }
    out
}

/// nmstate's view of the node (like kubernetes-nmstate's NodeNetworkState).
pub fn state(network: &NetworkConfig) -> Result<Value, String> {
    let backend = Backend { kind: network.backend };
    Ok(block_on(backend.current())??.json)
}

/// YAML, as `nmstatectl show` prints it.
pub fn render_state(value: &Value) -> String {
    serde_norway::to_string(value).unwrap_or_default()
}

/// `uplink apply network`: applies now; the text report and whether every policy is Available.
pub fn apply(config: &Config, retry: bool) -> Result<(String, bool), String> {
    let enactments = block_on(apply_policies(config, ApplyOptions { retry }))?.enactments;
    let ok = enactments.iter().all(|e| e.status == EnactmentStatus::Available);
    let value = Value::Array(enactments.iter().map(enactment_json).collect());
    Ok((render_enactments(&value), ok))
}

/// For `uplink check`: per policy, what applying it would change on this node.
pub fn check_report(config: &Config) -> String {
    let mut out = String::new();
    if config.network.policies.is_empty() {
        return out;
    }
    let planned = match block_on(plan(config)) {
        Ok(Ok(planned)) => planned,
        Ok(Err(error)) | Err(error) => {
            let _ = writeln!(
                out,
                "network: {} polic(ies); cannot compare with this node: {error}",
                config.network.policies.len()
            );
            return out;
        }
    };
    for (name, change) in planned {
        match change {
            Ok(Value::Null) => {
                let _ = writeln!(out, "network policy {name}: no change on this node");
            }
            Ok(diff) => {
                let _ = writeln!(out, "network policy {name}: would change:");
                for line in render_state(&diff).lines() {
                    let _ = writeln!(out, "    {line}");
                }
            }
            Err(error) => {
                let _ = writeln!(out, "network policy {name}: cannot be applied here: {error}");
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn enactments_render_one_line_each_with_rfc3339_times() {
        let mut e = Enactment::new("vrf-lite", json!({"interfaces": []}), 0);
        e.transition(
            EnactmentStatus::Failing,
            "probe dns failed after the change: timeout; rolled back",
            1_796_042_211,
        );
        let value = Value::Array(vec![enactment_json(&e)]);
        assert_eq!(value[0]["since"], "2026-11-30T12:36:51Z");
        assert_eq!(value[0]["status"], "Failing");
        let text = render_enactments(&value);
        let lines: Vec<&str> = text.lines().collect();
        assert!(lines[0].starts_with("Policy") && lines[0].contains("Status"), "{text}");
        assert!(
            lines[1].starts_with("vrf-lite ")
                && lines[1].contains(" Failing ")
                && lines[1].contains("2026-11-30T12:36:51Z")
                && lines[1].ends_with("rolled back"),
            "{text}"
        );
    }

    #[test]
    fn policies_list_their_interfaces_and_sources() {
        let config = crate::config::load_str(
            "net.toml",
            "[[network_policies]]\nname = \"br\"\n[[network_policies.desired_state.interfaces]]\nname = \"br0\"\ntype = \"linux-bridge\"\n",
        )
        .unwrap();
        let value = policies(&config.network);
        assert_eq!(value[0]["interfaces"], json!(["br0"]));
        assert_eq!(value[0]["desiredState"]["interfaces"][0]["type"], "linux-bridge");
        let text = render_policies(&value);
        assert!(
            text.lines().nth(1).is_some_and(|l| l.starts_with("br ")
                && l.contains("br0")
                && l.ends_with("net.toml")),
            "{text}"
        );
    }
}
