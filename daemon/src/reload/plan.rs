//! What a change of config does to the routers, decided before anything is touched: a pure
//! function of the running config, the new one and which VRFs have a running router or lack
//! their device. The reloader prepares and applies what it says; the start is the same plan
//! from a config with no routers. Tested without namespaces or sockets, on configs as text
//! (holo's conformance tests are the model).

use std::collections::BTreeSet;

use crate::bgp::reconfigure::{neighbor_steps, router_change, NeighborStep};
use crate::config::{Config, Router};

/// What the node looks like to the plan.
#[derive(Debug, Clone, Default)]
pub struct NodeView {
    /// VRFs whose router runs now.
    pub running: BTreeSet<String>,
    /// VRFs whose device is missing (a router there cannot start yet).
    pub missing_devices: BTreeSet<String>,
}

/// One router's part of a change, by VRF ("" for the default VRF).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RouterStep {
    /// Running, gone from the new config: its sessions end with Cease/Peer De-configured.
    Remove { vrf: String },
    /// Running, with a setting only a new instance can take (AS, router id, FIB instance):
    /// its sessions end with Cease/Other Configuration Change and it starts again.
    Restart { vrf: String, reasons: Vec<String> },
    /// Running, changed in place: these router settings applied live, and its neighbors
    /// removed, reset, updated or added one by one.
    Keep { vrf: String, live: Vec<String>, neighbors: Vec<NeighborStep> },
    /// Not running, its VRF device is there: it starts.
    Start { vrf: String },
    /// Not running, its VRF device is missing: it waits and starts when it appears.
    Wait { vrf: String },
}

impl RouterStep {
    pub fn vrf(&self) -> &str {
        match self {
            Self::Remove { vrf }
            | Self::Restart { vrf, .. }
            | Self::Keep { vrf, .. }
            | Self::Start { vrf }
            | Self::Wait { vrf } => vrf,
        }
    }
}

/// The routers' steps from `old` (the running config) to `new`: first every running router
/// (in the old config's order), then the new ones and those that waited (in the new config's
/// order).
pub fn routers(old: &Config, new: &Config, node: &NodeView) -> Vec<RouterStep> {
    let running = |r: &&Router| node.running.contains(&r.vrf);
    let mut steps = Vec::new();
    for before in old.bgp.routers.iter().filter(running) {
        let vrf = before.vrf.clone();
        let Some(after) = new.bgp.routers.iter().find(|r| r.vrf == before.vrf) else {
            steps.push(RouterStep::Remove { vrf });
            continue;
        };
        let change = router_change(before, after);
        if change.restart.is_empty() {
            let neighbors = neighbor_steps(before, after);
            steps.push(RouterStep::Keep { vrf, live: change.live, neighbors });
        } else {
            steps.push(RouterStep::Restart { vrf, reasons: change.restart });
        }
    }
    for router in new.bgp.routers.iter().filter(|r| !node.running.contains(&r.vrf)) {
        let vrf = router.vrf.clone();
        if node.missing_devices.contains(&router.vrf) {
            steps.push(RouterStep::Wait { vrf });
        } else {
            steps.push(RouterStep::Start { vrf });
        }
    }
    steps
}

/// The config the daemon starts from: `config` without routers and network policies, so the
/// start is the plan from it to `config` (every router starts or waits; node-wide settings
/// are not reported as changed).
pub fn empty_like(config: &Config) -> Config {
    let mut empty = config.clone();
    empty.bgp.routers.clear();
    empty.network.policies.clear();
    empty
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::load_str;

    fn config(text: &str) -> Config {
        load_str("uplink.toml", text).unwrap_or_else(|e| panic!("{e}"))
    }

    fn router(vrf: &str, asn: u32, extra: &str) -> String {
        let vrf_line = if vrf.is_empty() { String::new() } else { format!("vrf = \"{vrf}\"\n") };
        format!(
            "[[bgp.routers]]\nasn = {asn}\nid = \"10.0.0.9\"\n{vrf_line}{extra}\n\
             [[bgp.routers.neighbors]]\naddress = \"10.0.{}.1\"\nasn = 65102\n",
            asn % 250
        )
    }

    fn view(running: &[&str], missing: &[&str]) -> NodeView {
        NodeView {
            running: running.iter().map(|v| v.to_string()).collect(),
            missing_devices: missing.iter().map(|v| v.to_string()).collect(),
        }
    }

    fn vrf(name: &str) -> String {
        name.to_string()
    }

    fn unchanged(address: &str) -> NeighborStep {
        NeighborStep::Update { address: ip(address), change: Default::default() }
    }

    fn ip(address: &str) -> std::net::IpAddr {
        address.parse().unwrap_or_else(|e| panic!("{address}: {e}"))
    }

    #[test]
    fn the_start_is_the_plan_from_the_empty_config() {
        let new = config(&format!("{}{}", router("", 65001, ""), router("cudn3", 65003, "")));
        let steps = routers(&empty_like(&new), &new, &view(&[], &["cudn3"]));
        assert_eq!(
            steps,
            vec![RouterStep::Start { vrf: vrf("") }, RouterStep::Wait { vrf: vrf("cudn3") }]
        );
        // Nothing to report about the node itself: only the routers and policies are new.
        let empty = empty_like(&new);
        assert!(empty.bgp.routers.is_empty() && empty.network.policies.is_empty());
        assert_eq!(empty.fib, new.fib);
        assert_eq!(empty.graceful_restart, new.graceful_restart);
    }

    #[test]
    fn running_routers_are_kept_restarted_or_removed() {
        let old = config(&format!(
            "{}{}{}",
            router("", 65001, ""),
            router("blue", 65002, ""),
            router("red", 65004, "")
        ));
        let new = config(&format!(
            "{}{}{}",
            router("", 65001, "maximum_paths = 8"),
            router("blue", 65012, ""),
            router("green", 65005, "")
        ));
        let steps = routers(&old, &new, &view(&["", "blue", "red"], &[]));
        assert_eq!(
            steps,
            vec![
                RouterStep::Keep {
                    vrf: vrf(""),
                    live: vec!["maximum_paths 64 → 8".into()],
                    neighbors: vec![unchanged("10.0.1.1")]
                },
                RouterStep::Restart {
                    vrf: vrf("blue"), reasons: vec!["asn 65002 → 65012".into()]
                },
                RouterStep::Remove { vrf: vrf("red") },
                RouterStep::Start { vrf: vrf("green") },
            ]
        );
    }

    #[test]
    fn a_router_that_waited_starts_when_its_device_appears() {
        let both = config(&format!("{}{}", router("", 65001, ""), router("cudn3", 65003, "")));
        // cudn3 waited: it is in the running config but has no instance.
        let waiting = routers(&both, &both, &view(&[""], &["cudn3"]));
        assert_eq!(
            waiting,
            vec![
                RouterStep::Keep {
                    vrf: vrf(""),
                    live: vec![],
                    neighbors: vec![unchanged("10.0.1.1")]
                },
                RouterStep::Wait { vrf: vrf("cudn3") }
            ]
        );
        let appeared = routers(&both, &both, &view(&[""], &[]));
        assert_eq!(appeared[1], RouterStep::Start { vrf: vrf("cudn3") });
        // Moved to another file: the same router, nothing to do.
        let mut moved = both.clone();
        moved.bgp.routers[0].sources = vec!["/etc/uplink/conf.d/other.toml".into()];
        assert_eq!(routers(&both, &moved, &view(&["", "cudn3"], &[]))[0], waiting[0]);
    }

    #[test]
    fn a_kept_router_names_each_neighbor_step() {
        let neighbor = |address: &str, extra: &str| {
            format!("[[bgp.routers.neighbors]]\naddress = \"{address}\"\nasn = 65102\n{extra}\n")
        };
        let head =
            "[[bgp.routers]]\nasn = 65001\nid = \"10.0.0.9\"\nprefixes = [\"10.9.0.0/24\"]\n";
        let old = config(&format!(
            "{head}{}{}{}{}",
            neighbor("10.0.1.1", ""),
            neighbor("10.0.2.1", ""),
            neighbor("10.0.3.1", ""),
            neighbor("10.0.4.1", ""),
        ));
        let new = config(&format!(
            "{head}{}{}{}{}",
            neighbor("10.0.5.1", ""),
            neighbor("10.0.3.1", "hold_time = \"30s\"\nkeepalive_time = \"10s\""),
            neighbor(
                "10.0.2.1",
                "to_advertise = { allowed = { mode = \"all\" } }\nmax_prefixes = 10"
            ),
            neighbor("10.0.1.1", ""),
        ));
        let steps = routers(&old, &new, &view(&[""], &[]));
        let [RouterStep::Keep { neighbors, .. }] = &steps[..] else {
            panic!("one kept router: {steps:?}")
        };
        let [first, second, third, fourth, fifth] = &neighbors[..] else {
            panic!("five neighbor steps: {neighbors:?}")
        };
        assert_eq!(*first, unchanged("10.0.1.1"));
        let NeighborStep::Update { address, change } = second else { panic!("{second:?}") };
        assert_eq!(*address, ip("10.0.2.1"));
        assert!(change.export && change.max_prefixes && change.reset.is_empty(), "{change:?}");
        assert_eq!(
            *third,
            NeighborStep::Reset {
                address: ip("10.0.3.1"),
                reasons: vec!["hold_time 1m30s → 30s".into(), "keepalive_time 30s → 10s".into()]
            }
        );
        assert_eq!(*fourth, NeighborStep::Remove(ip("10.0.4.1")));
        assert_eq!(*fifth, NeighborStep::Add(ip("10.0.5.1")));
    }
}
