//! What `show bgp summary` adds about the node's network: routers that have not started
//! because their VRF device is missing, and neighbors whose source address is not on the node
//! yet (docs/network.md, "Order"). FRR has no such state; the keys are new ones beside FRR's.

use serde_json::{json, Map, Value};

use super::protocol::VrfSelector;
use crate::bgp::instance::Instance;
use crate::config::vrf_display_name;
use crate::netconf::enactment::rfc3339;
use crate::netconf::gate::{GateView, WaitingRouter};
use crate::netconf::links::NodeView;
use crate::netconf::readiness::neighbor_waits_for;
use std::sync::Arc;

/// Adds the waiting routers and neighbors to a `show bgp summary` answer.
pub fn summary(
    answer: Result<Value, String>,
    instances: &[Arc<Instance>],
    network: &GateView,
    selector: &VrfSelector,
) -> Result<Value, String> {
    let waiting = network.waiting.borrow().clone();
    let node = network.node.borrow().clone();
    match selector {
        VrfSelector::All => {
            let mut value = answer?;
            if let Value::Object(map) = &mut value {
                for instance in instances {
                    if let Some(v) = map.get_mut(vrf_display_name(&instance.vrf)) {
                        annotate(v, instance, &node);
                    }
                }
                for (vrf, router) in waiting.iter() {
                    map.insert(vrf_display_name(vrf).to_string(), waiting_json(vrf, router));
                }
            }
            Ok(value)
        }
        VrfSelector::Default | VrfSelector::Named(_) => {
            let vrf = match selector {
                VrfSelector::Named(name) => name.as_str(),
                _ => "",
            };
            if let Some(router) = waiting.get(vrf) {
                return Ok(waiting_json(vrf, router));
            }
            let mut value = answer?;
            if let Some(instance) = instances.iter().find(|i| i.vrf == vrf) {
                annotate(&mut value, instance, &node);
            }
            Ok(value)
        }
    }
}

/// A router that waits, in place of its summary.
pub fn waiting_json(vrf: &str, router: &WaitingRouter) -> Value {
    json!({
        "vrfName": vrf_display_name(vrf),
        "as": router.asn,
        "routerState": "waiting",
        "waitingFor": router.waiting_for,
        "waitingSince": rfc3339(router.since),
    })
}

/// `waitingFor` on each peer whose source address is missing.
fn annotate(summary: &mut Value, instance: &Instance, node: &NodeView) {
    let neighbors = instance.neighbors();
    let Value::Object(families) = summary else { return };
    for family in families.values_mut() {
        let Some(Value::Object(peers)) = family.get_mut("peers") else { continue };
        for (address, peer) in peers.iter_mut() {
            let Some(n) = neighbors.iter().find(|n| n.config.address.to_string() == *address)
            else {
                continue;
            };
            if let (Some(why), Value::Object(fields)) =
                (neighbor_waits_for(&n.config, node), &mut *peer)
            {
                fields.insert("waitingFor".into(), Value::String(why));
            }
        }
    }
}

/// The text of a waiting router for `show bgp summary`.
pub fn render_waiting(value: &Value) -> Option<String> {
    let what = value.get("waitingFor")?.as_str()?;
    value.get("routerState")?;
    Some(format!(
        "BGP router AS {} in VRF {} not started: waiting for {what} (since {})\n",
        value.get("as").map(Value::to_string).unwrap_or_default(),
        value.get("vrfName").and_then(Value::as_str).unwrap_or_default(),
        value.get("waitingSince").and_then(Value::as_str).unwrap_or_default(),
    ))
}

/// The notes under a summary's neighbor table: one per waiting peer.
pub fn render_waiting_peers(peers: &Map<String, Value>) -> String {
    peers
        .iter()
        .filter_map(|(address, p)| {
            let why = p.get("waitingFor")?.as_str()?;
            Some(format!("Neighbor {address} waits for {why}\n"))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_waiting_router_renders_as_one_line() {
        let router = WaitingRouter { asn: 65801, waiting_for: "VRF device blue".into(), since: 0 };
        let value = waiting_json("blue", &router);
        assert_eq!(value["routerState"], "waiting");
        assert_eq!(
            render_waiting(&value).unwrap(),
            "BGP router AS 65801 in VRF blue not started: waiting for VRF device blue (since 1970-01-01T00:00:00Z)\n"
        );
        let peers = json!({"10.0.0.1": {"state": "Active", "waitingFor": "source address 10.0.0.9"},
                           "10.0.0.2": {"state": "Established"}});
        assert_eq!(
            render_waiting_peers(peers.as_object().unwrap()),
            "Neighbor 10.0.0.1 waits for source address 10.0.0.9\n"
        );
    }
}
