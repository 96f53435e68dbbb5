//! `show fib`: the routes the FIB writer programs into the kernel, in the keys of FRR's
//! `show ip route json`. The writer keeps no copy of the routes: each instance's routes come
//! from its RIB (for a leak, the source VRF's), joined with the writer's groups and refusals.

use super::protocol::VrfSelector;
use crate::config::vrf_display_name;
use crate::reload::InstanceList;
use serde_json::{json, Map, Value};
use std::collections::BTreeMap;

/// `show fib`: per prefix, FRR's `show ip route json` keys (`prefix`, `protocol`, `installed`,
/// `table`, `metric`, `nexthopGroupId`, `nexthops[].ip/interfaceName/active`) plus `state`
/// (installed, pending, failed), `error` (the kernel's, or the other daemon's route that
/// keeps it out), `attempts` and `retryInSeconds` (until the next try) of a failed route, and
/// the BGP next hops.
pub async fn show(
    fib: &crate::fib::Fib,
    instances: &InstanceList,
    selector: &VrfSelector,
) -> Result<Value, String> {
    let states = fib.show().await?;
    // prefix -> route entries (FRR's `show ip route json` shape: one entry per source, so a
    // VRF's own route and one leaked into it from another VRF sit side by side).
    let mut by_vrf: BTreeMap<&str, Map<String, Value>> = BTreeMap::new();
    for v in states.iter().filter(|v| selector.matches(&v.vrf)) {
        let routes = by_vrf.entry(vrf_display_name(&v.vrf)).or_default();
        if !v.install {
            continue;
        }
        let source = v.leaked_from.as_deref().unwrap_or(&v.vrf);
        let Some(instance) = instances.iter().find(|i| i.vrf == source) else { continue };
        let mut wanted = instance.rib.fib_routes().await?;
        wanted.sort_unstable_by_key(|(prefix, _)| *prefix);
        for (prefix, hops) in wanted {
            let route = v.route(prefix, &hops);
            let r = &route;
            let nexthops: Vec<Value> = r
                .via
                .iter()
                .map(|h| {
                    json!({
                        "ip": h.gateway.to_string(),
                        "afi": if h.gateway.is_ipv4() { "ipv4" } else { "ipv6" },
                        "interfaceName": h.interface,
                        "vrf": vrf_display_name(v.leaked_from.as_deref().unwrap_or(&v.vrf)),
                        "nexthopId": h.nexthop_id,
                        "active": r.state == "installed",
                    })
                })
                .collect();
            let entry = json!({
                "prefix": r.prefix.to_string(),
                "protocol": "bgp",
                // What `ip route show proto …` matches (rt_protos.d/uplink.conf names it).
                "kernelProtocol": "uplink",
                "kernelProtocolNumber": crate::fib::msg::RTPROT_UPLINK,
                "vrfName": vrf_display_name(&v.vrf),
                "leakedFrom": v.leaked_from.as_deref().map(vrf_display_name),
                "installed": r.state == "installed",
                "state": r.state,
                "error": r.error,
                "attempts": r.attempts,
                "retryInSeconds": r.retry_in.map(|d| d.as_secs_f64()),
                "table": v.table,
                "metric": v.metric,
                "nexthopGroupId": r.nexthop_group,
                "bgpNexthops": r.next_hops,
                "nexthops": nexthops,
            });
            match routes.entry(r.prefix.to_string()).or_insert_with(|| json!([])) {
                Value::Array(list) => list.push(entry),
                other => *other = json!([entry]),
            }
        }
    }
    match selector {
        VrfSelector::All => Ok(Value::Object(
            by_vrf
                .into_iter()
                .map(|(vrf, routes)| (vrf.to_string(), Value::Object(routes)))
                .collect(),
        )),
        _ => match by_vrf.into_values().next() {
            Some(routes) => Ok(Value::Object(routes)),
            None => Err(match selector {
                VrfSelector::Named(name) => format!("no routing instance in VRF {name}"),
                _ => "no routing instance in the default VRF".into(),
            }),
        },
    }
}
