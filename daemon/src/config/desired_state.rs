//! A network policy's desired state, read by nmstate's own types.
//!
//! The desired state is nmstate's JSON as written (kebab-case keys, every interface type and
//! setting nmstate knows): uplink keeps it as it is and hands it to nmstate to apply. It is
//! checked here, at load, by deserializing it into the `nmstate` crate's `NetworkState` (each
//! interface on its own first, so a mistake names its interface), with nmstate's message. What
//! uplink adds are its own rules across the state: per-node values (`${…}`, `node_values`)
//! that parse, interface names the kernel takes, one entry per interface, VRF tables that are
//! not the kernel's own.
//!
//! Per-node values are resolved on the node just before applying, then nmstate fills its
//! `{{ capture.NAME.… }}` templates from the policy's captures against the node's current state
//! (`netconf::apply`); for the check, per-node values are replaced by stand-ins
//! (`${node.host(NET)}` by an address in NET) and a template must name one of the policy's
//! captures. A mistake that only a node's own `${values.KEY}` or a capture's result can make is
//! found by nmstate when that node resolves it (the enactment says so).

use serde_json::{Map, Value};

use super::node_values::{self, Piece, Reference};

/// A problem in a desired state: where (below the desired state, e.g. `interfaces[0].ipv4`)
/// and what.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Problem {
    pub field: String,
    pub message: String,
}

impl Problem {
    fn new(field: impl Into<String>, message: impl Into<String>) -> Self {
        Self { field: field.into(), message: message.into() }
    }
}

/// The kernel's own routing tables (default, main, local): a VRF must not take one.
const KERNEL_TABLES: std::ops::RangeInclusive<u64> = 253..=255;

/// The longest interface name the kernel takes (`IFNAMSIZ` less its NUL).
const MAX_INTERFACE_NAME: usize = 15;

/// TOML (a `[[network_policies]]` desired state, or a manifest's after its translation) as
/// nmstate's JSON. TOML has no null; its date-times become strings.
pub(crate) fn toml_to_json(value: &toml::Value) -> Value {
    match value {
        toml::Value::String(s) => Value::String(s.clone()),
        toml::Value::Integer(i) => Value::from(*i),
        toml::Value::Float(f) => Value::from(*f),
        toml::Value::Boolean(b) => Value::Bool(*b),
        toml::Value::Datetime(d) => Value::String(d.to_string()),
        toml::Value::Array(items) => Value::Array(items.iter().map(toml_to_json).collect()),
        toml::Value::Table(table) => {
            Value::Object(table.iter().map(|(k, v)| (k.clone(), toml_to_json(v))).collect())
        }
    }
}

/// A policy's captures: names nmstate's templates can use, each an expression nmstate reads
/// (in a build with nmstate's policy support, the `netconf` feature, nmstate parses each).
pub(crate) fn check_captures(
    captures: &std::collections::BTreeMap<String, String>,
) -> Result<(), String> {
    for name in captures.keys() {
        if name.is_empty() || name.contains(['.', '{', '}', ' ']) {
            return Err(format!(
                "capture name {name:?}: a template reads it as {{{{ capture.NAME.… }}}}, so it \
                 has no dots, braces or spaces"
            ));
        }
    }
    #[cfg(feature = "netconf")]
    {
        let rules = serde_json::to_value(captures).unwrap_or(Value::Null);
        if let Err(error) = serde_json::from_value::<nmstate::NetworkCaptureRules>(rules) {
            return Err(format!("nmstate: {}", nmstate_message(&error)));
        }
    }
    Ok(())
}

/// uplink's defaults where nmstate would take the node's current value, as uplink has always
/// read a desired state: an interface without `state` is `up`, and an `ipv4`/`ipv6` section
/// without `enabled` that has addresses, DHCP or autoconf is enabled (nmstate would keep a new
/// interface's IP disabled and drop the addresses). A section with none of them and no
/// `enabled` (`ipv4: {forwarding: true}`) changes only what it names, as in nmstate.
pub(crate) fn with_defaults(mut state: Value) -> Value {
    let interfaces = state.get_mut("interfaces").and_then(Value::as_array_mut);
    for interface in interfaces.into_iter().flatten() {
        let Some(interface) = interface.as_object_mut() else { continue };
        interface.entry("state").or_insert_with(|| Value::from("up"));
        for family in ["ipv4", "ipv6"] {
            let Some(ip) = interface.get_mut(family).and_then(Value::as_object_mut) else {
                continue;
            };
            let has_addresses =
                ip.get("address").and_then(Value::as_array).is_some_and(|a| !a.is_empty());
            let automatic = ["dhcp", "autoconf"]
                .iter()
                .any(|key| ip.get(*key).and_then(Value::as_bool) == Some(true));
            if has_addresses || automatic {
                ip.entry("enabled").or_insert(Value::Bool(true));
            }
        }
    }
    state
}

/// Checks `state`, whose templates may use `captures` (the policy's capture names); returns the
/// interfaces it configures, each name once with the index of its first entry, and every
/// problem found.
pub(crate) fn check(state: &Value, captures: &[String]) -> (Vec<(usize, String)>, Vec<Problem>) {
    let mut problems = Vec::new();
    let Some(top) = state.as_object() else {
        return (Vec::new(), vec![Problem::new("", "must be a table of nmstate's desired state")]);
    };
    references(state, "", captures, &mut problems);
    let mut names: Vec<(usize, String)> = Vec::new();
    // nmstate keys an interface by name and type (an OVS bridge and its internal interface may
    // share a name).
    let mut seen: Vec<(&str, Option<&str>)> = Vec::new();
    let interfaces = top.get("interfaces").and_then(Value::as_array);
    for (index, interface) in interfaces.into_iter().flatten().enumerate() {
        let field = format!("interfaces[{index}]");
        let Some(name) = interface.get("name").and_then(Value::as_str) else {
            problems
                .push(Problem::new(format!("{field}.name"), "missing; every interface has a name"));
            continue;
        };
        let kind = interface.get("type").and_then(Value::as_str);
        let same = |(n, k): &&(&str, Option<&str>)| {
            *n == name && (k.is_none() || kind.is_none() || *k == kind)
        };
        if seen.iter().any(|entry| same(&entry)) {
            problems.push(Problem::new(
                format!("{field}.name"),
                format!("interface {name} is listed twice in this policy"),
            ));
            continue;
        }
        seen.push((name, kind));
        if !names.iter().any(|(_, n)| n == name) {
            names.push((index, name.to_string()));
        }
        if name.is_empty() || (!node_values::has_reference(name) && name.len() > MAX_INTERFACE_NAME)
        {
            problems.push(Problem::new(
                format!("{field}.name"),
                "an interface name has 1 to 15 characters (the kernel's IFNAMSIZ)",
            ));
        }
        let table = interface.pointer("/vrf/route-table-id").and_then(Value::as_u64);
        if table.is_some_and(|t| KERNEL_TABLES.contains(&t)) {
            problems.push(Problem::new(
                format!("{field}.vrf.route-table-id"),
                "253-255 are the kernel's default, main and local tables",
            ));
        }
    }
    if problems.is_empty() {
        problems.extend(by_nmstate(state));
    }
    (names, problems)
}

/// Every string's per-node values parse, and its templates name the policy's captures.
fn references(value: &Value, field: &str, captures: &[String], problems: &mut Vec<Problem>) {
    match value {
        Value::String(text) if node_values::has_reference(text) => {
            if let Err(message) = node_values::parse(text) {
                problems.push(Problem::new(field, message));
            }
            if let Err(message) = templates(text, captures) {
                problems.push(Problem::new(field, message));
            }
        }
        Value::Array(items) => {
            for (index, item) in items.iter().enumerate() {
                references(item, &format!("{field}[{index}]"), captures, problems);
            }
        }
        Value::Object(map) => {
            for (key, item) in map {
                let field = if field.is_empty() { key.clone() } else { format!("{field}.{key}") };
                references(item, &field, captures, problems);
            }
        }
        _ => {}
    }
}

/// nmstate's templates in `text` (`{{ capture.NAME.path }}`) each name one of `captures`.
fn templates(text: &str, captures: &[String]) -> Result<(), String> {
    let mut rest = text;
    while let Some(start) = rest.find("{{") {
        let after = rest.get(start.saturating_add(2)..).unwrap_or("");
        let Some(end) = after.find("}}") else {
            return Err(format!("unterminated nmstate template in {text:?}: missing `}}}}`"));
        };
        let body = after.get(..end).unwrap_or("").trim();
        let name = body.strip_prefix("capture.").and_then(|path| path.split('.').next());
        match name {
            Some(name) if captures.iter().any(|c| c == name) => {}
            Some(name) if captures.is_empty() => {
                return Err(format!(
                    "{{{{ {body} }}}} fills from a capture named {name}, and this policy has \
                     no `capture`"
                ))
            }
            Some(name) => {
                return Err(format!(
                    "{{{{ {body} }}}} names no capture of this policy ({name}); its captures: {}",
                    captures.join(", ")
                ))
            }
            None => {
                return Err(format!(
                    "{{{{ {body} }}}}: nmstate's templates read captures, as \
                     {{{{ capture.NAME.interfaces.0.name }}}}"
                ))
            }
        }
        rest = after.get(end.saturating_add(2)..).unwrap_or("");
    }
    Ok(())
}

/// nmstate's own reading of the state, per-node values replaced by stand-ins: each interface
/// alone (so the message names it), then the whole. A problem in an interface whose per-node
/// values only the node knows is left to the node.
fn by_nmstate(state: &Value) -> Vec<Problem> {
    let mut problems = Vec::new();
    let interfaces = state.get("interfaces").and_then(Value::as_array);
    for (index, interface) in interfaces.into_iter().flatten().enumerate() {
        let (stood_in, exact) = stand_ins(interface);
        if let Err(error) = serde_json::from_value::<nmstate::Interface>(stood_in.clone()) {
            if exact {
                let path = culprit(&stood_in, &|candidate| {
                    serde_json::from_value::<nmstate::Interface>(candidate.clone()).is_ok()
                });
                problems.push(Problem::new(
                    format!("interfaces[{index}]{path}"),
                    nmstate_message(&error),
                ));
            }
        }
    }
    if !problems.is_empty() {
        return problems;
    }
    let (stood_in, exact) = stand_ins(state);
    if let Err(error) = nmstate::NetworkState::new_from_json(&stood_in.to_string()) {
        if exact {
            problems.push(Problem::new("", format!("{}: {}", error.kind(), error.msg())));
        }
    }
    problems
}

/// The path (`.ipv4.address[0]`) of the smallest part of `value` without which `accepted`
/// holds: serde names no field for nmstate's interfaces (they are read through a JSON value
/// first), so the field is found by leaving parts out. `name` and `type` stay (without them
/// nothing is accepted). Empty when no single part is to blame.
fn culprit(value: &Value, accepted: &dyn Fn(&Value) -> bool) -> String {
    let mut path = String::new();
    let mut pointer = String::new();
    loop {
        let Some(here) = value.pointer(&pointer) else { return path };
        let keys: Vec<(String, String)> = match here {
            Value::Object(map) => map
                .keys()
                .filter(|k| !(pointer.is_empty() && (*k == "name" || *k == "type")))
                .map(|k| (format!("/{}", k.replace('~', "~0").replace('/', "~1")), format!(".{k}")))
                .collect(),
            Value::Array(items) => {
                (0..items.len()).map(|i| (format!("/{i}"), format!("[{i}]"))).collect()
            }
            _ => return path,
        };
        let found = keys.into_iter().find(|(step, _)| {
            let mut without = value.clone();
            remove(&mut without, &format!("{pointer}{step}"));
            accepted(&without)
        });
        match found {
            Some((step, shown)) => {
                pointer.push_str(&step);
                path.push_str(&shown);
            }
            None => return path,
        }
    }
}

/// Removes what `pointer` names from `value`.
fn remove(value: &mut Value, pointer: &str) {
    let Some((parent, last)) = pointer.rsplit_once('/') else { return };
    let last = last.replace("~1", "/").replace("~0", "~");
    match value.pointer_mut(parent) {
        Some(Value::Object(map)) => {
            map.remove(&last);
        }
        Some(Value::Array(items)) => {
            if let Ok(index) = last.parse::<usize>() {
                if index < items.len() {
                    items.remove(index);
                }
            }
        }
        _ => {}
    }
}

/// serde's message from nmstate's types, without its position in the JSON text uplink made
/// (the field names where).
fn nmstate_message(error: &serde_json::Error) -> String {
    let text = error.to_string();
    match text.rsplit_once(" at line ") {
        Some((message, _)) => message.to_string(),
        None => text,
    }
}

/// `value` with every per-node value replaced by a stand-in, and whether the stand-ins are
/// exact for a check: `${node.host(NET)}` is an address of NET whatever the node, and
/// `${node.name}` a name, but `${values.KEY}` may be a number, an address or a name.
fn stand_ins(value: &Value) -> (Value, bool) {
    let mut exact = true;
    let replaced = replace(value, &mut exact);
    (replaced, exact)
}

fn replace(value: &Value, exact: &mut bool) -> Value {
    match value {
        // What a capture gives is known on the node only.
        Value::String(text) if text.contains("{{") => {
            *exact = false;
            value.clone()
        }
        Value::String(text) if node_values::has_reference(text) => {
            let Ok(pieces) = node_values::parse(text) else { return value.clone() };
            let mut out = String::new();
            for piece in pieces {
                match piece {
                    Piece::Text(text) => out.push_str(&text),
                    Piece::Ref(Reference::NodeName) => out.push_str("node"),
                    Piece::Ref(Reference::NodeHost(net)) => {
                        let host = net.hosts().next().unwrap_or_else(|| net.addr());
                        out.push_str(&host.to_string());
                    }
                    Piece::Ref(Reference::Value(_)) => {
                        *exact = false;
                        out.push('1');
                    }
                }
            }
            Value::String(out)
        }
        Value::Array(items) => Value::Array(items.iter().map(|v| replace(v, exact)).collect()),
        Value::Object(map) => Value::Object(
            map.iter().map(|(k, v)| (k.clone(), replace(v, exact))).collect::<Map<_, _>>(),
        ),
        other => other.clone(),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn problems(state: Value) -> Vec<Problem> {
        check(&state, &[]).1
    }

    /// What kubernetes-nmstate's examples use (written here, not copied), all nmstate's own
    /// keys: accepted as they are.
    #[test]
    fn nmstates_whole_schema_is_accepted() {
        let states = [
            json!({"interfaces": [{"name": "bond0", "type": "bond", "state": "up",
                "copy-mac-from": "eth1",
                "ipv4": {"enabled": true, "dhcp": true, "auto-dns": false},
                "link-aggregation": {"mode": "active-backup", "port": ["eth1", "eth2"],
                    "options": {"miimon": "140"}}}]}),
            json!({"interfaces": [{"name": "br1", "type": "linux-bridge", "state": "up",
                "bridge": {"options": {"stp": {"enabled": false}}, "port": [{"name": "eth1",
                    "vlan": {"mode": "trunk", "trunk-tags": [{"id-range": {"min": 2, "max": 4095}}]}}]}}]}),
            json!({"interfaces": [{"name": "eth1", "type": "ethernet", "state": "up",
                "ipv4": {"enabled": true, "forwarding": true, "address": [{"ip": "10.244.0.1", "prefix-length": 24}]},
                "lldp": {"enabled": true}}]}),
            json!({"interfaces": [{"name": "br-ex", "type": "ovs-bridge", "state": "up",
                "bridge": {"options": {"stp": true}, "port": [{"name": "eth1"}, {"name": "ovs0"}]}},
                {"name": "ovs0", "type": "ovs-interface", "state": "up", "ipv4": {"enabled": true, "dhcp": true}}]}),
            json!({"dns-resolver": {"config": {"search": ["example.com"], "server": ["8.8.8.8"]}},
                "routes": {"config": [{"destination": "0.0.0.0/0", "next-hop-address": "192.0.2.1",
                    "next-hop-interface": "eth1", "table-id": 254}]},
                "route-rules": {"config": [{"ip-from": "10.0.0.0/8", "route-table": 100, "priority": 1000}]}}),
        ];
        for state in states {
            assert_eq!(problems(state.clone()), [], "{state}");
        }
    }

    #[test]
    fn nmstate_names_what_it_refuses_and_the_interface() {
        let typo = problems(json!({"interfaces": [{"name": "eth0", "type": "ethernet"},
            {"name": "eth1", "type": "ethernet", "ipv4": {"adress": []}}]}));
        assert_eq!(typo.len(), 1, "{typo:?}");
        assert_eq!(typo[0].field, "interfaces[1].ipv4.adress");
        assert!(typo[0].message.contains("unknown field `adress`"), "{}", typo[0].message);

        let vlan = problems(json!({"interfaces": [{"name": "v1", "type": "vlan",
            "vlan": {"base-iface": "eth0", "id": "x"}}]}));
        assert_eq!(vlan.len(), 1, "{vlan:?}");
        // `id` is required: the section is as close as leaving parts out gets.
        assert_eq!(vlan[0].field, "interfaces[0].vlan");
        let mtu =
            problems(json!({"interfaces": [{"name": "eth0", "type": "ethernet", "mtuu": 9000}]}));
        assert_eq!(mtu.len(), 1, "{mtu:?}");
        assert_eq!(mtu[0].field, "interfaces[0].mtuu");
        assert!(mtu[0].message.contains("unknown field `mtuu`"), "{}", mtu[0].message);

        let top = problems(json!({"interfaces": [], "routess": {}}));
        assert_eq!(top.len(), 1, "{top:?}");
        assert_eq!(top[0].field, "");
        assert!(top[0].message.contains("routess"), "{}", top[0].message);
    }

    #[test]
    fn uplinks_own_rules_across_the_state() {
        let state = json!({"interfaces": [
            {"name": "a-name-longer-than-15", "type": "dummy"},
            {"name": "vrf9", "type": "vrf", "vrf": {"route-table-id": 254, "port": []}},
            {"name": "vrf9", "type": "vrf", "vrf": {"route-table-id": 1001, "port": []}},
            {"name": "eth1", "type": "ethernet", "description": "${node.nam}"},
        ]});
        let (names, found) = check(&state, &[]);
        let names: Vec<(usize, &str)> = names.iter().map(|(i, n)| (*i, n.as_str())).collect();
        assert_eq!(names, [(0, "a-name-longer-than-15"), (1, "vrf9"), (3, "eth1")]);
        let fields: Vec<&str> = found.iter().map(|p| p.field.as_str()).collect();
        assert_eq!(
            fields,
            [
                "interfaces[3].description",
                "interfaces[0].name",
                "interfaces[1].vrf.route-table-id",
                "interfaces[2].name",
            ],
            "{found:?}"
        );
    }

    #[test]
    fn an_ovs_bridge_and_its_interface_may_share_a_name() {
        let state = json!({"interfaces": [
            {"name": "br-ex", "type": "ovs-bridge", "bridge": {"port": [{"name": "br-ex"}]}},
            {"name": "br-ex", "type": "ovs-interface"},
        ]});
        let (names, found) = check(&state, &[]);
        assert_eq!((names, found), (vec![(0, "br-ex".to_string())], vec![]));
    }

    /// Per-node values stand in for what they will be: an address where nmstate wants one.
    /// A node's own `${values.KEY}` is left to that node's nmstate.
    #[test]
    fn per_node_values_are_checked_with_stand_ins() {
        let host = json!({"interfaces": [{"name": "vlan2001", "type": "vlan",
            "vlan": {"base-iface": "eth0", "id": 2001},
            "ipv4": {"enabled": true, "address": [{"ip": "${node.host(172.19.23.0/24)}", "prefix-length": 24}]}}]});
        assert_eq!(problems(host), []);
        let value = json!({"interfaces": [{"name": "vlan2001", "type": "vlan",
            "vlan": {"base-iface": "eth0", "id": "${values.vlan}"}}]});
        assert_eq!(problems(value), []);
        let wrong = json!({"interfaces": [{"name": "eth1", "type": "ethernet",
            "ipv4": {"enabled": true, "address": [{"ip": "${node.host(172.19.23.0/24)}", "prefix-length": "x"}]}}]});
        assert_eq!(problems(wrong).len(), 1);
    }

    /// kubernetes-nmstate's captures: a template names one of the policy's captures; what it
    /// will be is the node's to know.
    #[test]
    fn templates_name_the_policys_captures() {
        let state = json!({"interfaces": [{"name": "br1", "type": "linux-bridge",
            "ipv4": "{{ capture.eth1.interfaces.0.ipv4 }}",
            "bridge": {"port": [{"name": "{{ capture.eth1.interfaces.0.name }}"}]}}]});
        let captures = ["eth1".to_string()];
        assert_eq!(check(&state, &captures).1, []);
        let found = check(&state, &[]).1;
        assert_eq!(found.len(), 2, "{found:?}");
        assert!(found[0].message.contains("this policy has no `capture`"), "{found:?}");
        let found = check(&state, &["eth2".to_string()]).1;
        assert!(found[0].message.contains("its captures: eth2"), "{found:?}");
        let odd = json!({"interfaces": [{"name": "{{ interfaces.0.name }}", "type": "dummy"}]});
        assert!(check(&odd, &captures).1[0].message.contains("read captures"));
    }

    #[test]
    fn defaults_enable_an_ip_section_with_addresses_and_leave_a_partial_one() {
        let state = with_defaults(json!({"interfaces": [
            {"name": "br0", "type": "linux-bridge", "ipv4": {"address": [{"ip": "192.0.2.1", "prefix-length": 24}]}},
            {"name": "eth1", "type": "ethernet", "state": "down", "ipv6": {"autoconf": true}},
            {"name": "eth2", "type": "ethernet", "ipv4": {"forwarding": true}},
        ]}));
        assert_eq!(state["interfaces"][0]["state"], "up");
        assert_eq!(state["interfaces"][0]["ipv4"]["enabled"], true);
        assert_eq!(state["interfaces"][1]["state"], "down");
        assert_eq!(state["interfaces"][1]["ipv6"]["enabled"], true);
        assert_eq!(state["interfaces"][2]["ipv4"], json!({"forwarding": true}));
    }
}
