//! Per-node values in network policies: one policy for a whole fleet.
//!
//! kubernetes-nmstate has no per-node values, so fleets write one NNCP per node with a
//! hostname `nodeSelector` just to vary an address (seed deck, slide 64). uplink resolves these
//! in any string of a policy's `desired_state`, on the node, just before applying:
//!
//! - `${node.name}` — the node's name (`[node] name`).
//! - `${node.host(SUBNET)}` — the address in `SUBNET` with the host part of the node's primary
//!   address of the same family: with 172.18.20.113/24, `${node.host(172.19.23.0/24)}` is
//!   172.19.23.113 (the deck's numbering). The primary address is `[network] node_addresses`
//!   or, when that is not set, detected from the kernel (`netconf::identity`): the node's
//!   address on the interface of the main table's default route that its network configuration
//!   installed, never a routing daemon's. A result that is the subnet's network or broadcast
//!   address is an error.
//! - `${values.KEY}` — this node's entry in the per-node table `[network.node_values.<node>]`.
//!
//! `${` always starts a per-node value. nmstate's own `{{ capture.… }}` templates are left as
//! they are here: nmstate fills them from the policy's `capture` against the node's current
//! state, after the per-node values (`netconf::apply`).

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use ipnet::IpNet;

/// What the node knows about itself.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct NodeIdentity {
    pub name: Option<String>,
    /// Primary addresses with their prefix lengths (at most one per family is used: the first).
    pub addresses: Vec<IpNet>,
    /// This node's row of the per-node table.
    pub values: BTreeMap<String, String>,
}

/// One `${…}` reference.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reference {
    NodeName,
    NodeHost(IpNet),
    Value(String),
}

/// A string split into literal text and references.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Piece {
    Text(String),
    Ref(Reference),
}

/// Whether `text` uses a per-node value or an nmstate capture template.
pub fn has_reference(text: &str) -> bool {
    text.contains("${") || text.contains("{{")
}

/// Splits `text` into pieces; an error says what is wrong with the first bad reference.
pub fn parse(text: &str) -> Result<Vec<Piece>, String> {
    let mut pieces = Vec::new();
    let mut rest = text;
    while let Some(start) = rest.find("${") {
        let (before, after) = rest.split_at(start);
        if !before.is_empty() {
            pieces.push(Piece::Text(before.to_string()));
        }
        let body_and_rest = after.get(2..).unwrap_or("");
        let Some(end) = body_and_rest.find('}') else {
            return Err(format!("unterminated per-node value in {text:?}: missing `}}`"));
        };
        let (body, tail) = body_and_rest.split_at(end);
        pieces.push(Piece::Ref(parse_reference(body.trim())?));
        rest = tail.get(1..).unwrap_or("");
    }
    if !rest.is_empty() {
        pieces.push(Piece::Text(rest.to_string()));
    }
    Ok(pieces)
}

fn parse_reference(body: &str) -> Result<Reference, String> {
    if body == "node.name" {
        return Ok(Reference::NodeName);
    }
    if let Some(arg) = body.strip_prefix("node.host(").and_then(|a| a.strip_suffix(')')) {
        let subnet: IpNet = arg.trim().parse().map_err(|_| {
            format!("${{node.host({arg})}}: {arg:?} is not a subnet such as 172.19.23.0/24")
        })?;
        if subnet.trunc() != subnet {
            return Err(format!(
                "${{node.host({arg})}}: the subnet has host bits set; write {}",
                subnet.trunc()
            ));
        }
        return Ok(Reference::NodeHost(subnet));
    }
    if let Some(key) = body.strip_prefix("values.") {
        if !key.is_empty() && key.chars().all(|c| c.is_ascii_alphanumeric() || "_-".contains(c)) {
            return Ok(Reference::Value(key.to_string()));
        }
    }
    Err(format!(
        "unknown per-node value ${{{body}}}; valid: ${{node.name}}, ${{node.host(SUBNET)}}, \
         ${{values.KEY}}"
    ))
}

/// Resolves every reference in `text` for `node`.
pub fn resolve_str(text: &str, node: &NodeIdentity) -> Result<String, String> {
    let mut out = String::with_capacity(text.len());
    for piece in parse(text)? {
        match piece {
            Piece::Text(t) => out.push_str(&t),
            Piece::Ref(Reference::NodeName) => match &node.name {
                Some(name) => out.push_str(name),
                None => return Err("${node.name} needs [node] name".into()),
            },
            Piece::Ref(Reference::NodeHost(subnet)) => {
                out.push_str(&host_in_subnet(subnet, &node.addresses)?.to_string())
            }
            Piece::Ref(Reference::Value(key)) => match node.values.get(&key) {
                Some(value) => out.push_str(value),
                None => {
                    let node = node.name.as_deref().unwrap_or("this node");
                    return Err(format!(
                        "${{values.{key}}}: [network.node_values.{node}] has no `{key}`"
                    ));
                }
            },
        }
    }
    Ok(out)
}

/// Resolves every string in a JSON value in place; the error names the path (`interfaces[1].…`).
pub fn resolve_json(value: &mut serde_json::Value, node: &NodeIdentity) -> Result<(), String> {
    resolve_at(value, node, &mut String::new())
}

fn resolve_at(
    value: &mut serde_json::Value,
    node: &NodeIdentity,
    path: &mut String,
) -> Result<(), String> {
    match value {
        serde_json::Value::String(text) if has_reference(text) => {
            *text = resolve_str(text, node).map_err(|e| format!("{path}: {e}"))?;
        }
        serde_json::Value::Array(items) => {
            for (index, item) in items.iter_mut().enumerate() {
                let len = path.len();
                path.push_str(&format!("[{index}]"));
                resolve_at(item, node, path)?;
                path.truncate(len);
            }
        }
        serde_json::Value::Object(map) => {
            for (key, item) in map.iter_mut() {
                let len = path.len();
                if !path.is_empty() {
                    path.push('.');
                }
                path.push_str(key);
                resolve_at(item, node, path)?;
                path.truncate(len);
            }
        }
        _ => {}
    }
    Ok(())
}

/// `subnet`'s network address plus the host part of the node's primary address of the same
/// family (the bits below that address's own prefix length). The result must be a host of
/// `subnet`: not its network address (for IPv6, the Subnet-Router anycast address, RFC 4291
/// §2.6.1) nor an IPv4 subnet's broadcast address, except in a /31 or /127 (RFC 3021, RFC 6164)
/// and a /32 or /128, where every address is a host.
pub fn host_in_subnet(subnet: IpNet, addresses: &[IpNet]) -> Result<IpAddr, String> {
    let family = if subnet.addr().is_ipv4() { "IPv4" } else { "IPv6" };
    let Some(primary) = addresses.iter().find(|a| a.addr().is_ipv4() == subnet.addr().is_ipv4())
    else {
        return Err(format!(
            "${{node.host({subnet})}}: the node has no primary {family} address (set [network] \
             node_addresses, or give the node a default route from its network configuration)"
        ));
    };
    let host = to_bits(primary.addr()) & to_bits(primary.hostmask());
    let room = to_bits(subnet.hostmask());
    if host > room {
        return Err(format!(
            "${{node.host({subnet})}}: the host part of {primary} does not fit in {subnet}"
        ));
    }
    let bits = to_bits(subnet.network()) | host;
    let address = match subnet {
        IpNet::V4(_) => IpAddr::V4(Ipv4Addr::from(u32::try_from(bits).unwrap_or(0))),
        IpNet::V6(_) => IpAddr::V6(Ipv6Addr::from(bits)),
    };
    // In a /31 or /127 both addresses are hosts, in a /32 or /128 the only one.
    let point_to_point = subnet.prefix_len() + 1 >= subnet.max_prefix_len();
    if !point_to_point && host == 0 {
        return Err(format!(
            "${{node.host({subnet})}}: the host part of {primary} is 0, which gives {address}, \
             the network address of {subnet}, not a host (set [network] node_addresses)"
        ));
    }
    if !point_to_point && host == room && subnet.addr().is_ipv4() {
        return Err(format!(
            "${{node.host({subnet})}}: the host part of {primary} gives {address}, the broadcast \
             address of {subnet}, not a host"
        ));
    }
    Ok(address)
}

fn to_bits(address: IpAddr) -> u128 {
    match address {
        IpAddr::V4(a) => u128::from(u32::from(a)),
        IpAddr::V6(a) => u128::from(a),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node() -> NodeIdentity {
        NodeIdentity {
            name: Some("wk3".into()),
            addresses: vec!["172.18.20.113/24".parse().unwrap(), "fd00:18::71/64".parse().unwrap()],
            values: BTreeMap::from([("cudn3_ip".to_string(), "172.19.23.77".to_string())]),
        }
    }

    #[test]
    fn the_decks_numbering_comes_from_the_host_part() {
        assert_eq!(resolve_str("${node.host(172.19.23.0/24)}", &node()).unwrap(), "172.19.23.113");
        assert_eq!(
            resolve_str("${ node.host(172.19.24.0/24) }", &node()).unwrap(),
            "172.19.24.113"
        );
        assert_eq!(resolve_str("${node.host(fd00:23::/64)}", &node()).unwrap(), "fd00:23::71");
        // A wider subnet keeps the host part; a narrower one that cannot hold it is an error.
        assert_eq!(resolve_str("${node.host(10.9.0.0/16)}", &node()).unwrap(), "10.9.0.113");
        let error = resolve_str("${node.host(10.9.0.0/26)}", &node()).unwrap_err();
        assert!(error.contains("does not fit in 10.9.0.0/26"), "{error}");
    }

    #[test]
    fn the_network_and_broadcast_addresses_are_refused() {
        let with = |primary: &str| NodeIdentity {
            addresses: vec![primary.parse().unwrap()],
            ..NodeIdentity::default()
        };
        let error =
            resolve_str("${node.host(172.19.23.0/24)}", &with("10.0.0.255/16")).unwrap_err();
        assert_eq!(
            error,
            "${node.host(172.19.23.0/24)}: the host part of 10.0.0.255/16 gives 172.19.23.255, \
             the broadcast address of 172.19.23.0/24, not a host"
        );
        // The lower address of a /31 link has host part 0.
        let error = resolve_str("${node.host(172.19.23.0/24)}", &with("10.0.5.0/31")).unwrap_err();
        assert_eq!(
            error,
            "${node.host(172.19.23.0/24)}: the host part of 10.0.5.0/31 is 0, which gives \
             172.19.23.0, the network address of 172.19.23.0/24, not a host (set [network] \
             node_addresses)"
        );
        // A /32 primary has no host part at all.
        let error = resolve_str("${node.host(172.19.23.0/24)}", &with("10.0.0.9/32")).unwrap_err();
        assert!(error.contains("host part of 10.0.0.9/32 is 0"), "{error}");
        // The same host parts are hosts of a wider subnet.
        assert_eq!(
            resolve_str("${node.host(172.19.0.0/16)}", &with("10.0.0.255/16")).unwrap(),
            "172.19.0.255"
        );
        assert_eq!(
            resolve_str("${node.host(172.19.0.0/16)}", &with("10.0.1.0/16")).unwrap(),
            "172.19.1.0"
        );
        // In a /31 (RFC 3021) both addresses are hosts.
        assert_eq!(
            resolve_str("${node.host(10.9.0.4/31)}", &with("10.0.0.0/31")).unwrap(),
            "10.9.0.4"
        );
        assert_eq!(
            resolve_str("${node.host(10.9.0.4/31)}", &with("10.0.0.1/31")).unwrap(),
            "10.9.0.5"
        );
        // IPv6 has no broadcast; its all-zero host is the Subnet-Router anycast address.
        assert_eq!(
            resolve_str("${node.host(fd00:23::/120)}", &with("fd00:18::ff/120")).unwrap(),
            "fd00:23::ff"
        );
        let error = resolve_str("${node.host(fd00:23::/64)}", &with("fd00:18::/64")).unwrap_err();
        assert!(error.contains("the network address of fd00:23::/64"), "{error}");
        assert_eq!(
            resolve_str("${node.host(fd00:23::/127)}", &with("fd00:18::/127")).unwrap(),
            "fd00:23::"
        );
    }

    #[test]
    fn names_and_table_values_resolve_and_text_around_them_stays() {
        assert_eq!(resolve_str("vlan-${node.name}", &node()).unwrap(), "vlan-wk3");
        assert_eq!(resolve_str("${values.cudn3_ip}", &node()).unwrap(), "172.19.23.77");
        assert_eq!(resolve_str("no values here", &node()).unwrap(), "no values here");
        let error = resolve_str("${values.missing}", &node()).unwrap_err();
        assert_eq!(error, "${values.missing}: [network.node_values.wk3] has no `missing`");
        let nameless = NodeIdentity::default();
        assert!(resolve_str("${node.name}", &nameless).unwrap_err().contains("[node] name"));
        let error = resolve_str("${node.host(172.19.23.0/24)}", &nameless).unwrap_err();
        assert!(error.contains("no primary IPv4 address"), "{error}");
    }

    #[test]
    fn bad_references_say_what_is_valid() {
        assert!(parse("${node.ip}").unwrap_err().contains("valid: ${node.name}"));
        assert!(parse("${node.name").unwrap_err().contains("unterminated"));
        assert!(parse("${node.host(172.19.23.1/24)}")
            .unwrap_err()
            .contains("write 172.19.23.0/24"));
        assert!(parse("${node.host(nope)}").unwrap_err().contains("not a subnet"));
        // nmstate's capture templates are text here (nmstate fills them).
        let template = "{{ capture.gw.routes.running.0.next-hop-address }}";
        assert_eq!(parse(template).unwrap(), [Piece::Text(template.into())]);
    }

    #[test]
    fn json_strings_resolve_in_place_and_errors_name_the_path() {
        let mut state = serde_json::json!({"interfaces": [{"name": "vlan2001",
            "ipv4": {"address": [{"ip": "${node.host(172.19.23.0/24)}", "prefix-length": 24}]}}]});
        resolve_json(&mut state, &node()).unwrap();
        assert_eq!(state["interfaces"][0]["ipv4"]["address"][0]["ip"], "172.19.23.113");
        let mut bad = serde_json::json!({"interfaces": [{"name": "${values.nope}"}]});
        let error = resolve_json(&mut bad, &node()).unwrap_err();
        assert!(error.starts_with("interfaces[0].name: ${values.nope}"), "{error}");
    }
}
