//! `uplink vtysh -c "COMMAND"`: the vtysh command lines that scripts and frr-k8s's status
//! reader send to FRR, read into the control requests that answer them, and the answers cut
//! to the shape FRR 8.4 gives for that form (`show bgp ipv4 unicast summary json` is one
//! family's object; `show bgp summary json` has a key per family). Keywords may be shortened
//! while they stay unambiguous, as in vtysh (`sh ip bgp sum`).

use super::protocol::{FamilyArg, Request, VrfSelector};
use serde_json::{Map, Value};

/// A command line, read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VtyshCommand {
    pub request: Request,
    /// The line ended in `json`.
    pub json: bool,
    /// How the daemon's answer is cut to FRR's shape for this form.
    pub view: View,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum View {
    /// The answer as it is.
    Whole,
    /// `show bgp [vrf X] ipv4|ipv6 unicast summary`: the one family's object.
    SummaryOf(FamilyArg),
    /// `show ip bgp summary`, `show bgp vrf all ipv6 summary`: only that family's key (in
    /// each VRF's object when `all_vrfs`).
    SummaryKeep { family: FamilyArg, all_vrfs: bool },
    /// `show bfd peers counters`: each peer's counters only.
    BfdCounters,
    /// `show ip route` / `show ipv6 route`: the routes of one family (in each VRF's object
    /// when `all_vrfs`).
    RoutesOf { family: FamilyArg, all_vrfs: bool },
}

/// Reads one of vtysh's `show` commands; the error says what was expected where.
pub fn parse(line: &str) -> Result<VtyshCommand, String> {
    let mut words: Vec<&str> = line.split_whitespace().collect();
    let json = words.last().is_some_and(|w| keyword(w, &["json"]) == Some("json"));
    if json {
        words.pop();
    }
    let mut words = Words { words, at: 0 };
    words.expect(&["show"])?;
    let (request, view) = match words.expect(&["bgp", "ip", "ipv6", "bfd"])? {
        "bgp" => bgp(&mut words, None)?,
        "ip" => match words.expect(&["bgp", "route"])? {
            "bgp" => bgp(&mut words, Some(FamilyArg::Ipv4))?,
            _ => route(&mut words, FamilyArg::Ipv4)?,
        },
        "ipv6" => {
            words.expect(&["route"])?;
            route(&mut words, FamilyArg::Ipv6)?
        }
        _ => bfd(&mut words)?,
    };
    words.end()?;
    Ok(VtyshCommand { request, json, view })
}

/// The words of a command line, read left to right.
struct Words<'a> {
    words: Vec<&'a str>,
    at: usize,
}

impl<'a> Words<'a> {
    fn peek(&self) -> Option<&'a str> {
        self.words.get(self.at).copied()
    }

    /// The next word as one of `choices` (or an unambiguous start of one).
    fn expect(&mut self, choices: &[&'static str]) -> Result<&'static str, String> {
        let word = self
            .peek()
            .ok_or_else(|| format!("incomplete command: expected {}", choices.join("|")))?;
        let chosen = keyword(word, choices).ok_or_else(|| {
            format!("unknown command at `{word}`: expected {}", choices.join("|"))
        })?;
        self.at += 1;
        Ok(chosen)
    }

    /// The next word if it is one of `choices`.
    fn accept(&mut self, choices: &[&'static str]) -> Option<&'static str> {
        let chosen = keyword(self.peek()?, choices)?;
        self.at += 1;
        Some(chosen)
    }

    /// The next word as a value (a name, an address).
    fn value(&mut self, what: &str) -> Result<&'a str, String> {
        let word = self.peek().ok_or_else(|| format!("incomplete command: expected {what}"))?;
        self.at += 1;
        Ok(word)
    }

    fn end(&self) -> Result<(), String> {
        match self.peek() {
            None => Ok(()),
            Some(word) => Err(format!("unknown command at `{word}`: nothing more expected")),
        }
    }

    /// `vrf NAME|all`, when present.
    fn vrf(&mut self) -> Result<Option<VrfSelector>, String> {
        if self.accept(&["vrf"]).is_none() {
            return Ok(None);
        }
        Ok(Some(VrfSelector::parse(Some(self.value("a VRF name or all")?))))
    }
}

/// The keyword among `choices` that `word` is, whole or as a start that only one has.
fn keyword(word: &str, choices: &[&'static str]) -> Option<&'static str> {
    if let Some(exact) = choices.iter().find(|c| **c == word) {
        return Some(exact);
    }
    let mut starting = choices.iter().filter(|c| c.starts_with(word));
    match (starting.next(), starting.next()) {
        (Some(only), None) if !word.is_empty() => Some(only),
        _ => None,
    }
}

/// After `show bgp` (or `show ip bgp`, which is IPv4 unicast):
/// `[vrf NAME|all] [ipv4|ipv6 [unicast]] summary | neighbors [ADDR [advertised-routes|
/// received-routes]] | [PREFIX|ADDRESS]`.
fn bgp(words: &mut Words, ip: Option<FamilyArg>) -> Result<(Request, View), String> {
    let vrf = words.vrf()?.unwrap_or_default();
    let named_family = match words.accept(&["ipv4", "ipv6"]) {
        Some("ipv4") => Some(FamilyArg::Ipv4),
        Some(_) => Some(FamilyArg::Ipv6),
        None => None,
    };
    if named_family.is_some() {
        words.accept(&["unicast"]);
    }
    let family = named_family.or(ip);
    match words.accept(&["summary", "neighbors"]) {
        Some("summary") => {
            // A family named after `bgp` gives that family's object, except over all VRFs;
            // `show ip bgp summary` keeps the IPv4 key.
            let all_vrfs = vrf == VrfSelector::All;
            let view = match (named_family, family) {
                (Some(f), _) if !all_vrfs => View::SummaryOf(f),
                (_, Some(family)) => View::SummaryKeep { family, all_vrfs },
                (_, None) => View::Whole,
            };
            Ok((Request::BgpSummary { vrf }, view))
        }
        Some(_) => {
            let Some(address) = words.peek().map(str::to_string) else {
                return Ok((Request::BgpNeighbors { vrf, address: None }, View::Whole));
            };
            words.at += 1;
            match words.accept(&["advertised-routes", "received-routes", "routes"]) {
                None => Ok((Request::BgpNeighbors { vrf, address: Some(address) }, View::Whole)),
                Some(which) => {
                    let family = family.unwrap_or(FamilyArg::Ipv4);
                    let received = which != "advertised-routes";
                    Ok((Request::BgpNeighborRoutes { vrf, address, family, received }, View::Whole))
                }
            }
        }
        None => {
            let prefix = words.peek().map(str::to_string);
            if let Some(word) = &prefix {
                let network = word.parse::<ipnet::IpNet>().is_ok();
                if !network && word.parse::<std::net::IpAddr>().is_err() {
                    return Err(format!(
                        "unknown command at `{word}`: expected summary|neighbors|PREFIX"
                    ));
                }
                words.at += 1;
            }
            // FRR: `show bgp` without a family is IPv6 unicast; `show ip bgp` IPv4.
            let family = Some(family.unwrap_or(FamilyArg::Ipv6));
            let family = if prefix.is_some() && named_family.is_none() && ip.is_none() {
                None
            } else {
                family
            };
            Ok((Request::BgpRoutes { vrf, family, prefix }, View::Whole))
        }
    }
}

/// After `show ip route` / `show ipv6 route`: `[vrf NAME|all]`.
fn route(words: &mut Words, family: FamilyArg) -> Result<(Request, View), String> {
    let vrf = words.vrf()?.unwrap_or_default();
    // uplink's routes are the BGP ones: `show ip route bgp` is the same list.
    words.accept(&["bgp"]);
    let all_vrfs = vrf == VrfSelector::All;
    Ok((Request::Fib { vrf }, View::RoutesOf { family, all_vrfs }))
}

/// After `show bfd`: `[vrf NAME] peers [counters]`.
fn bfd(words: &mut Words) -> Result<(Request, View), String> {
    let vrf = words.vrf()?.unwrap_or(VrfSelector::All);
    words.expect(&["peers"])?;
    let view = if words.accept(&["counters"]).is_some() { View::BfdCounters } else { View::Whole };
    Ok((Request::BfdPeers { vrf }, view))
}

/// The keys FRR's `show bfd peers counters json` gives for each peer.
const BFD_COUNTER_KEYS: &[&str] = &[
    "multihop",
    "peer",
    "local",
    "vrf",
    "interface",
    "control-packet-input",
    "control-packet-output",
    "echo-packet-input",
    "echo-packet-output",
    "session-up",
    "session-down",
    "zebra-notifications",
];

/// The daemon's answer cut to FRR's shape for `view`.
pub fn present(view: View, answer: Value) -> Value {
    match view {
        View::Whole => answer,
        View::SummaryOf(family) => {
            answer.get(family_key(family)).cloned().unwrap_or_else(|| Value::Object(Map::new()))
        }
        View::SummaryKeep { family, all_vrfs } => {
            let keep = |v: Value| keep_keys(v, |key| key == family_key(family));
            per_vrf(answer, all_vrfs, keep)
        }
        View::BfdCounters => match answer {
            Value::Array(peers) => Value::Array(
                peers
                    .into_iter()
                    .map(|peer| {
                        let mut counters = Map::new();
                        for key in BFD_COUNTER_KEYS {
                            let value = peer.get(*key).cloned().unwrap_or(Value::from(0));
                            counters.insert((*key).to_string(), value);
                        }
                        Value::Object(counters)
                    })
                    .collect(),
            ),
            other => other,
        },
        View::RoutesOf { family, all_vrfs } => {
            let v6 = family == FamilyArg::Ipv6;
            per_vrf(answer, all_vrfs, |v| keep_keys(v, |prefix| prefix.contains(':') == v6))
        }
    }
}

/// `f` applied to the answer, or to each VRF's object of an answer over all VRFs.
fn per_vrf(answer: Value, all_vrfs: bool, f: impl Fn(Value) -> Value) -> Value {
    match answer {
        Value::Object(vrfs) if all_vrfs => {
            Value::Object(vrfs.into_iter().map(|(vrf, v)| (vrf, f(v))).collect())
        }
        other => f(other),
    }
}

fn keep_keys(v: Value, keep: impl Fn(&str) -> bool) -> Value {
    match v {
        Value::Object(map) => Value::Object(map.into_iter().filter(|(k, _)| keep(k)).collect()),
        other => other,
    }
}

fn family_key(f: FamilyArg) -> &'static str {
    match f {
        FamilyArg::Ipv4 => "ipv4Unicast",
        FamilyArg::Ipv6 => "ipv6Unicast",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(line: &str) -> (Request, View) {
        let c = parse(line).unwrap_or_else(|e| panic!("{line}: {e}"));
        assert!(c.json, "{line}");
        (c.request, c.view)
    }

    #[test]
    fn the_forms_scripts_and_frr_k8s_send() {
        let named = |n: &str| VrfSelector::Named(n.into());
        assert_eq!(
            read("show bgp vrf red ipv4 unicast summary json"),
            (Request::BgpSummary { vrf: named("red") }, View::SummaryOf(FamilyArg::Ipv4))
        );
        assert_eq!(
            read("show bgp summary json"),
            (Request::BgpSummary { vrf: VrfSelector::Default }, View::Whole)
        );
        assert_eq!(
            read("sh ip bgp sum json"),
            (
                Request::BgpSummary { vrf: VrfSelector::Default },
                View::SummaryKeep { family: FamilyArg::Ipv4, all_vrfs: false }
            )
        );
        assert_eq!(
            read("show bgp vrf all ipv6 summary json"),
            (
                Request::BgpSummary { vrf: VrfSelector::All },
                View::SummaryKeep { family: FamilyArg::Ipv6, all_vrfs: true }
            )
        );
        assert_eq!(
            read("show bgp vrf default neighbors json"),
            (Request::BgpNeighbors { vrf: VrfSelector::Default, address: None }, View::Whole)
        );
        assert_eq!(
            read("show bgp neighbors 10.0.1.1 json"),
            (
                Request::BgpNeighbors {
                    vrf: VrfSelector::Default,
                    address: Some("10.0.1.1".into())
                },
                View::Whole
            )
        );
        assert_eq!(
            read("show bgp ipv6 unicast neighbors fd00::1 advertised-routes json"),
            (
                Request::BgpNeighborRoutes {
                    vrf: VrfSelector::Default,
                    address: "fd00::1".into(),
                    family: FamilyArg::Ipv6,
                    received: false
                },
                View::Whole
            )
        );
        assert_eq!(
            read("show ip bgp neighbors 10.0.1.1 received-routes json"),
            (
                Request::BgpNeighborRoutes {
                    vrf: VrfSelector::Default,
                    address: "10.0.1.1".into(),
                    family: FamilyArg::Ipv4,
                    received: true
                },
                View::Whole
            )
        );
        assert_eq!(
            read("show bfd vrf red peers json"),
            (Request::BfdPeers { vrf: named("red") }, View::Whole)
        );
        assert_eq!(
            read("show bfd peers counters json"),
            (Request::BfdPeers { vrf: VrfSelector::All }, View::BfdCounters)
        );
        assert_eq!(
            read("show ip route json"),
            (
                Request::Fib { vrf: VrfSelector::Default },
                View::RoutesOf { family: FamilyArg::Ipv4, all_vrfs: false }
            )
        );
        assert_eq!(
            read("show bgp vrf all json"),
            (
                Request::BgpRoutes {
                    vrf: VrfSelector::All,
                    family: Some(FamilyArg::Ipv6),
                    prefix: None
                },
                View::Whole
            )
        );
        assert_eq!(
            read("show ip bgp 10.1.0.0/24 json"),
            (
                Request::BgpRoutes {
                    vrf: VrfSelector::Default,
                    family: Some(FamilyArg::Ipv4),
                    prefix: Some("10.1.0.0/24".into())
                },
                View::Whole
            )
        );
    }

    #[test]
    fn what_is_not_understood_is_named() {
        assert_eq!(
            parse("show bgp sumary json").unwrap_err(),
            "unknown command at `sumary`: expected summary|neighbors|PREFIX"
        );
        assert_eq!(
            parse("show b").unwrap_err(),
            "unknown command at `b`: expected bgp|ip|ipv6|bfd"
        );
        assert_eq!(parse("show bfd").unwrap_err(), "incomplete command: expected peers");
        assert_eq!(
            parse("configure terminal").unwrap_err(),
            "unknown command at `configure`: expected show"
        );
        assert!(!parse("show bgp summary").unwrap().json);
    }

    #[test]
    fn answers_are_cut_to_frrs_shape() {
        let summary = serde_json::json!({ "ipv4Unicast": { "as": 1 }, "ipv6Unicast": { "as": 1 } });
        assert_eq!(
            present(View::SummaryOf(FamilyArg::Ipv6), summary.clone()),
            serde_json::json!({ "as": 1 })
        );
        assert_eq!(
            present(View::SummaryKeep { family: FamilyArg::Ipv4, all_vrfs: false }, summary),
            serde_json::json!({ "ipv4Unicast": { "as": 1 } })
        );
        let routes = serde_json::json!({ "red": { "10.0.0.0/24": [], "2001:db8::/64": [] } });
        assert_eq!(
            present(View::RoutesOf { family: FamilyArg::Ipv6, all_vrfs: true }, routes),
            serde_json::json!({ "red": { "2001:db8::/64": [] } })
        );
        let peers = serde_json::json!([{ "peer": "10.0.0.1", "status": "up", "session-up": 2 }]);
        let counters = present(View::BfdCounters, peers);
        assert_eq!(counters[0]["session-up"], 2);
        assert_eq!(counters[0]["echo-packet-input"], 0);
        assert!(counters[0].get("status").is_none());
    }
}
