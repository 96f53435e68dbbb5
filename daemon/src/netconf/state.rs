//! Reading nmstate's current state (its JSON, as `nmstatectl show` prints it): the default
//! gateways, the name servers, which VRF an interface belongs to. Pure functions, so probe
//! selection is tested on JSON without a network. (The node's primary addresses are chosen
//! from the kernel's routes instead: `identity`.)

use std::net::IpAddr;

use serde_json::Value;

/// The kernel's main routing table, where kubernetes-nmstate looks for the default gateway.
pub const MAIN_TABLE: u64 = 254;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Family {
    V4,
    V6,
}

impl Family {
    /// nmstate's key for the family's interface settings.
    pub fn key(self) -> &'static str {
        match self {
            Self::V4 => "ipv4",
            Self::V6 => "ipv6",
        }
    }

    fn default_destination(self) -> &'static str {
        match self {
            Self::V4 => "0.0.0.0/0",
            Self::V6 => "::/0",
        }
    }
}

/// A default route's next hop.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Gateway {
    pub address: IpAddr,
    pub interface: String,
}

/// The main table's default route for `family` in `routes.running`, as kubernetes-nmstate
/// picks it (the first one).
pub fn default_gateway(current: &Value, family: Family) -> Option<Gateway> {
    let routes = current.pointer("/routes/running")?.as_array()?;
    routes.iter().find_map(|route| {
        let destination = route.get("destination")?.as_str()?;
        let table = route.get("table-id").and_then(Value::as_u64).unwrap_or(MAIN_TABLE);
        if destination != family.default_destination() || table != MAIN_TABLE {
            return None;
        }
        Some(Gateway {
            address: route.get("next-hop-address")?.as_str()?.parse().ok()?,
            interface: route.get("next-hop-interface")?.as_str()?.to_string(),
        })
    })
}

/// The interface of the default VRF (a port of no VRF) with an address whose subnet holds
/// `address`: a single-hop BGP session's link. The longest prefix wins, as in the kernel's
/// connected routes.
pub fn connected_interface(current: &Value, address: IpAddr) -> Option<String> {
    let mut best: Option<(u8, String)> = None;
    for interface in interfaces(current) {
        let Some(name) = interface.get("name").and_then(Value::as_str) else { continue };
        if vrf_of(current, name).is_some() {
            continue;
        }
        let key = if address.is_ipv4() { "ipv4" } else { "ipv6" };
        let addresses = interface.pointer(&format!("/{key}/address")).and_then(Value::as_array);
        for entry in addresses.into_iter().flatten() {
            let (Some(ip), Some(length)) = (
                entry.get("ip").and_then(Value::as_str),
                entry.get("prefix-length").and_then(Value::as_u64),
            ) else {
                continue;
            };
            let Ok(net) = format!("{ip}/{length}").parse::<ipnet::IpNet>() else { continue };
            let better = best.as_ref().is_none_or(|(len, _)| net.prefix_len() > *len);
            if net.contains(&address) && better {
                best = Some((net.prefix_len(), name.to_string()));
            }
        }
    }
    best.map(|(_, name)| name)
}

/// `dns-resolver.running.server`.
pub fn name_servers(current: &Value) -> Vec<IpAddr> {
    let servers = current.pointer("/dns-resolver/running/server").and_then(Value::as_array);
    servers
        .into_iter()
        .flatten()
        .filter_map(|s| s.as_str()?.split('%').next()?.parse().ok())
        .collect()
}

/// The names of the VRF interfaces in a state.
pub fn vrf_names(state: &Value) -> Vec<String> {
    interfaces(state)
        .filter(|i| i.get("type").and_then(Value::as_str) == Some("vrf"))
        .filter_map(|i| Some(i.get("name")?.as_str()?.to_string()))
        .collect()
}

/// The VRF an interface is a port of in `state`, if any.
pub fn vrf_of(state: &Value, interface: &str) -> Option<String> {
    interfaces(state)
        .filter(|i| i.get("type").and_then(Value::as_str) == Some("vrf"))
        .find(|vrf| {
            let ports = vrf.pointer("/vrf/port").and_then(Value::as_array);
            ports.into_iter().flatten().any(|p| p.as_str() == Some(interface))
        })
        .and_then(|vrf| Some(vrf.get("name")?.as_str()?.to_string()))
}

/// nmstate's diff lists every desired route as changed (it is what nmstate would write to the
/// profiles), even when the kernel already has it. This keeps a diff's `routes` only when a
/// desired route is missing from `routes.running` (or an absent one is still there), and drops
/// what is left empty; `Null` means no change.
///
/// An interface's `dhcp: false` or `autoconf: false` that the current state does not report is
/// no change either: nmstate's kernel mode runs no DHCP client and reports neither, so its
/// diff listed them after every apply, and every reload applied the policy again (with its
/// probes).
pub fn effective_change(mut diff: Value, desired: &Value, current: &Value) -> Value {
    if let Value::Object(map) = &mut diff {
        if routes_in_place(desired, current) {
            map.remove("routes");
        }
        if let Some(Value::Array(changed)) = map.get_mut("interfaces") {
            changed.retain_mut(|interface| !unreported_switches_alone(interface, current));
        }
        map.retain(|_, v| !matches!(v, Value::Null) && v.as_array().is_none_or(|a| !a.is_empty()));
        if map.is_empty() {
            return Value::Null;
        }
    }
    diff
}

/// Drops from one interface of a diff the `dhcp` and `autoconf` switched off that `current`'s
/// interface of that name does not report; whether what is left is the interface as it runs:
/// its name, its type (which every entry of nmstate's diff names, as desired: `ethernet` for
/// what the kernel reports as a `veth`) and the state it has.
fn unreported_switches_alone(interface: &mut Value, current: &Value) -> bool {
    let Some(name) = interface.get("name").and_then(Value::as_str) else { return false };
    let Some(running) =
        interfaces(current).find(|i| i.get("name").and_then(Value::as_str) == Some(name))
    else {
        return false;
    };
    let Value::Object(fields) = interface else { return false };
    for family in ["ipv4", "ipv6"] {
        let Some(Value::Object(settings)) = fields.get_mut(family) else { continue };
        let reported = running.get(family);
        settings.retain(|key, value| {
            let switch = matches!(key.as_str(), "dhcp" | "autoconf");
            !(switch && *value == Value::Bool(false) && reported.and_then(|r| r.get(key)).is_none())
        });
        if settings.is_empty() {
            fields.remove(family);
        }
    }
    fields.iter().all(|(key, value)| match key.as_str() {
        "name" | "type" => true,
        "state" => running.get(key).is_none_or(|have| have == value),
        _ => false,
    })
}

/// Whether every desired route is running and no `state: absent` one is.
pub fn routes_in_place(desired: &Value, current: &Value) -> bool {
    let running: Vec<&Value> = current
        .pointer("/routes/running")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .collect();
    let wanted = desired.pointer("/routes/config").and_then(Value::as_array);
    wanted.into_iter().flatten().all(|route| {
        let present = running.iter().any(|r| route_matches(route, r));
        let absent = route.get("state").and_then(Value::as_str) == Some("absent");
        present != absent
    })
}

/// `want`'s fields (those it sets) equal `have`'s; the table defaults to main.
fn route_matches(want: &Value, have: &Value) -> bool {
    let field = |v: &Value, k: &str| {
        v.get(k).and_then(|x| x.as_str().map(str::to_string).or(x.as_u64().map(|n| n.to_string())))
    };
    let table = |v: &Value| v.get("table-id").and_then(Value::as_u64).unwrap_or(MAIN_TABLE);
    table(want) == table(have)
        && ["destination", "next-hop-address", "next-hop-interface", "metric"]
            .iter()
            .all(|k| field(want, k).is_none() || field(want, k) == field(have, k))
}

fn interfaces(state: &Value) -> impl Iterator<Item = &Value> {
    state.get("interfaces").and_then(Value::as_array).into_iter().flatten()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A single-hop neighbor's link: the default-VRF interface whose subnet holds it (the
    /// longest prefix), never a VRF's port, none when no subnet holds it.
    #[test]
    fn a_neighbors_link_is_the_interface_with_its_subnet() {
        let current = json!({"interfaces": [
            {"name": "ens4", "ipv4": {"address": [{"ip": "172.18.20.2", "prefix-length": 24}]}},
            {"name": "ens5", "ipv4": {"address": [{"ip": "172.18.0.2", "prefix-length": 16}]},
             "ipv6": {"address": [{"ip": "fd00:20::2", "prefix-length": 64}]}},
            {"name": "vlan2001", "ipv4": {"address": [{"ip": "172.19.23.2", "prefix-length": 24}]}},
            {"name": "cudn3", "type": "vrf", "vrf": {"port": ["vlan2001"]}}
        ]});
        let at = |a: &str| connected_interface(&current, a.parse().unwrap());
        assert_eq!(at("172.18.20.1").as_deref(), Some("ens4"));
        assert_eq!(at("172.18.30.1").as_deref(), Some("ens5"));
        assert_eq!(at("fd00:20::1").as_deref(), Some("ens5"));
        assert_eq!(at("172.19.23.1"), None, "a VRF's port is not the default VRF's link");
        assert_eq!(at("10.0.0.1"), None);
    }

    #[test]
    fn the_default_gateway_comes_from_the_main_table_only() {
        let current = json!({"routes": {"running": [
            {"destination": "0.0.0.0/0", "next-hop-address": "172.19.23.1",
             "next-hop-interface": "vlan2001", "table-id": 1001},
            {"destination": "0.0.0.0/0", "next-hop-address": "172.18.20.1",
             "next-hop-interface": "br-ex", "table-id": 254},
            {"destination": "::/0", "next-hop-address": "fe80::1",
             "next-hop-interface": "br-ex", "table-id": 254}
        ]}});
        assert_eq!(
            default_gateway(&current, Family::V4),
            Some(Gateway { address: "172.18.20.1".parse().unwrap(), interface: "br-ex".into() })
        );
        assert_eq!(default_gateway(&current, Family::V6).unwrap().address.to_string(), "fe80::1");
        assert_eq!(default_gateway(&json!({}), Family::V4), None);
    }

    #[test]
    fn a_diff_of_routes_the_kernel_already_has_is_no_change() {
        let current = json!({"routes": {"running": [
            {"destination": "0.0.0.0/0", "next-hop-address": "10.77.0.1",
             "next-hop-interface": "br-up", "table-id": 254, "metric": 425}
        ]}});
        let desired = json!({"routes": {"config": [
            {"destination": "0.0.0.0/0", "next-hop-address": "10.77.0.1", "next-hop-interface": "br-up"}
        ]}});
        let diff = json!({"routes": desired["routes"].clone(), "interfaces": []});
        assert_eq!(effective_change(diff.clone(), &desired, &current), Value::Null);
        let elsewhere = json!({"routes": {"running": []}});
        assert_eq!(
            effective_change(diff.clone(), &desired, &elsewhere),
            json!({"routes": desired["routes"]})
        );
        let absent =
            json!({"routes": {"config": [{"destination": "0.0.0.0/0", "state": "absent"}]}});
        assert!(!routes_in_place(&absent, &current));
        assert!(routes_in_place(&absent, &elsewhere));
        let changed = json!({"interfaces": [{"name": "br-up", "mtu": 9000}]});
        assert_eq!(effective_change(changed.clone(), &desired, &current), changed);
    }

    /// nmstate's kernel mode reports no `dhcp` or `autoconf`: a desired `false` it then lists
    /// in every diff is no change; a `true`, another setting, or another state is one.
    #[test]
    fn switches_off_that_the_kernel_does_not_report_are_no_change() {
        // A veth, as the kernel reports the lab's links; desired as `ethernet`.
        let current = json!({"interfaces": [{"name": "eth1", "type": "veth", "state": "up",
            "ipv4": {"enabled": true, "address": [{"ip": "10.99.1.2", "prefix-length": 24}]},
            "ipv6": {"enabled": true}}]});
        let desired = json!({});
        let off = json!({"interfaces": [{"name": "eth1", "type": "ethernet", "state": "up",
            "ipv4": {"dhcp": false}, "ipv6": {"dhcp": false, "autoconf": false}}]});
        assert_eq!(effective_change(off, &desired, &current), Value::Null);
        let on = json!({"interfaces": [{"name": "eth1", "type": "ethernet", "state": "up",
            "ipv4": {"dhcp": true}}]});
        assert_eq!(effective_change(on.clone(), &desired, &current), on);
        let and_more = json!({"interfaces": [{"name": "eth1", "type": "ethernet", "state": "up",
            "ipv4": {"dhcp": false, "address": [{"ip": "10.99.1.3", "prefix-length": 24}]}}]});
        let left = json!({"interfaces": [{"name": "eth1", "type": "ethernet", "state": "up",
            "ipv4": {"address": [{"ip": "10.99.1.3", "prefix-length": 24}]}}]});
        assert_eq!(effective_change(and_more, &desired, &current), left);
        let down = json!({"interfaces": [{"name": "eth1", "type": "ethernet", "state": "down",
            "ipv4": {"dhcp": false}}]});
        let down_left =
            json!({"interfaces": [{"name": "eth1", "type": "ethernet", "state": "down"}]});
        assert_eq!(effective_change(down, &desired, &current), down_left);
        // Reported (NetworkManager's mode): a difference there is one.
        let reported = json!({"interfaces": [{"name": "eth1", "type": "ethernet", "state": "up",
            "ipv4": {"enabled": true, "dhcp": true}}]});
        let off_again = json!({"interfaces": [{"name": "eth1", "type": "ethernet", "state": "up",
            "ipv4": {"dhcp": false}}]});
        assert_eq!(effective_change(off_again.clone(), &desired, &reported), off_again);
        // An interface that is not there is a change whatever it says.
        let missing = json!({"interfaces": [{"name": "eth9", "type": "ethernet", "state": "up",
            "ipv4": {"dhcp": false}}]});
        assert_eq!(effective_change(missing.clone(), &desired, &current), missing);
    }

    #[test]
    fn name_servers_and_vrf_membership() {
        let current = json!({
            "dns-resolver": {"running": {"server": ["10.0.0.53", "fe80::53%eth0"]}},
            "interfaces": [
                {"name": "cudn3", "type": "vrf", "vrf": {"port": ["vlan2001"], "route-table-id": 1001}},
                {"name": "vlan2001", "type": "vlan"}
            ]
        });
        let servers: Vec<String> = name_servers(&current).iter().map(|s| s.to_string()).collect();
        assert_eq!(servers, vec!["10.0.0.53", "fe80::53"]);
        assert_eq!(vrf_names(&current), vec!["cudn3"]);
        assert_eq!(vrf_of(&current, "vlan2001").as_deref(), Some("cudn3"));
        assert_eq!(vrf_of(&current, "eth0"), None);
    }
}
