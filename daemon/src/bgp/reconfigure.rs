//! What a reload may change on a running router or neighbor without resetting its sessions.
//!
//! Which neighbor settings reset a session and which change live is the one list in
//! `config::neighbor_settings` (a reset names the setting and both values). A router's AS and
//! router id are in every OPEN: changing one starts the router again. Filters
//! and attributes are policy, applied to a running session: export changes become UPDATEs,
//! import changes withdraw what is refused now and ask the peer to send its routes again with
//! ROUTE-REFRESH (RFC 2918) when more is accepted. Which files define a neighbor is no setting
//! at all, so moving one between files, or stating it again identically, changes nothing.

use std::net::IpAddr;

use crate::config::neighbor_settings::{self, OnChange};
use crate::config::{AllowMode, Neighbor, ReceivePolicy, Router};
use ipnet::IpNet;

/// How a neighbor's settings changed between two configs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NeighborChange {
    /// Settings the session cannot change while up, each as "setting old → new". Not empty:
    /// the session is reset.
    pub reset: Vec<String>,
    /// `to_receive` changed.
    pub import: bool,
    /// ... and may now accept routes the old filter refused (ROUTE-REFRESH needed).
    pub import_widened: bool,
    /// `to_advertise` changed (prefixes, `with_local_pref`, `with_community`).
    pub export: bool,
    /// Which parts of `to_advertise` changed, by name.
    pub export_parts: Vec<&'static str>,
    pub max_prefixes: bool,
    /// `bfd_profile` names another profile (or none, or one now).
    pub bfd_profile: bool,
}

impl NeighborChange {
    /// Whether the running session keeps its configuration as it is.
    pub fn is_empty(&self) -> bool {
        *self == NeighborChange::default()
    }

    /// Whether the session's policies (what the RIB applies to it) changed.
    pub fn policy(&self) -> bool {
        self.import || self.export || self.max_prefixes
    }
}

/// Compares a running neighbor's settings with the reloaded ones (same address): which reset
/// the session and which change live is the one list in `config::neighbor_settings`.
pub fn neighbor_change(old: &Neighbor, new: &Neighbor) -> NeighborChange {
    let differences = neighbor_settings::differences(old, new);
    let any = |kind: OnChange| differences.iter().any(|d| d.on_change() == kind);
    let (before, after) = (&old.to_advertise, &new.to_advertise);
    NeighborChange {
        reset: differences
            .iter()
            .filter(|d| d.on_change() == OnChange::Reset)
            .map(|d| d.as_change())
            .collect(),
        import: old.to_receive != new.to_receive,
        import_widened: receive_widened(&old.to_receive, &new.to_receive),
        export: before != after,
        export_parts: [
            (before.mode != after.mode || before.prefixes != after.prefixes)
                .then_some("allowed prefixes"),
            (before.with_community != after.with_community).then_some("with_community"),
            (before.with_local_pref != after.with_local_pref).then_some("with_local_pref"),
        ]
        .into_iter()
        .flatten()
        .collect(),
        max_prefixes: any(OnChange::LiveMaxPrefixes),
        bfd_profile: any(OnChange::LiveBfd),
    }
}

/// What a reload does to one neighbor of a router that keeps running.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NeighborStep {
    /// Gone from the config: its session ends with Cease/Peer De-configured.
    Remove(IpAddr),
    /// A setting its session cannot change while up: Cease/Other Configuration Change, and
    /// it starts again. `reasons` name each setting and both values.
    Reset { address: IpAddr, reasons: Vec<String> },
    /// Policies, prefix limit or BFD profile changed on the running session (or nothing).
    Update { address: IpAddr, change: NeighborChange },
    /// New: its session starts.
    Add(IpAddr),
}

/// The neighbor steps from a running router's config to the reloaded one (same VRF): the
/// running neighbors first, in their order, then the new ones in theirs.
pub fn neighbor_steps(old: &Router, new: &Router) -> Vec<NeighborStep> {
    let mut steps = Vec::new();
    for before in &old.neighbors {
        let address = before.address;
        let Some(after) = new.neighbors.iter().find(|n| n.address == address) else {
            steps.push(NeighborStep::Remove(address));
            continue;
        };
        let change = neighbor_change(before, after);
        if change.reset.is_empty() {
            steps.push(NeighborStep::Update { address, change });
        } else {
            steps.push(NeighborStep::Reset { address, reasons: change.reset });
        }
    }
    for after in &new.neighbors {
        if !old.neighbors.iter().any(|n| n.address == after.address) {
            steps.push(NeighborStep::Add(after.address));
        }
    }
    steps
}

/// Whether `new` may accept a route `old` refused. A filtered list whose entries were all in
/// the old list accepts nothing new; anything else might.
pub fn receive_widened(old: &ReceivePolicy, new: &ReceivePolicy) -> bool {
    match (old.mode, new.mode) {
        (AllowMode::All, _) => false,
        (AllowMode::Filtered, AllowMode::All) => true,
        (AllowMode::Filtered, AllowMode::Filtered) => {
            !new.prefixes.iter().all(|entry| old.prefixes.contains(entry))
        }
    }
}

/// Whether a new `always_block` list may let through a route the old one blocked: some old
/// entry is gone.
pub fn always_block_widened(old: &[IpNet], new: &[IpNet]) -> bool {
    !old.iter().all(|blocked| new.contains(blocked))
}

/// How a router's own settings changed (its neighbors, prefixes and imports are compared
/// elsewhere).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RouterChange {
    /// Settings only a new instance can take (AS and router id are in every OPEN; the FIB
    /// instance's table and metric are where its routes are), as "setting old → new". Not
    /// empty: the router starts again.
    pub restart: Vec<String>,
    /// Settings the RIB applies live (the decision process), as "setting old → new".
    pub live: Vec<String>,
}

/// Compares a running router's settings with the reloaded ones (same VRF).
pub fn router_change(old: &Router, new: &Router) -> RouterChange {
    let Router {
        asn,
        id,
        vrf: _,
        prefixes: _,
        maximum_paths,
        multipath_relax,
        install,
        table,
        metric,
        neighbors: _,
        imports: _,
        sources: _,
    } = new;
    let mut change = RouterChange::default();
    let describe = |name: &str, was: String, now: String| {
        (was != now).then(|| format!("{name} {was} → {now}"))
    };
    let optional = |v: Option<String>| v.unwrap_or_else(|| "none".into());
    change.restart.extend(
        [
            describe("asn", old.asn.to_string(), asn.to_string()),
            describe(
                "id",
                optional(old.id.map(|i| i.to_string())),
                optional(id.map(|i| i.to_string())),
            ),
            describe("install", old.install.to_string(), install.to_string()),
            describe(
                "table",
                optional(old.table.map(|t| t.to_string())),
                optional(table.map(|t| t.to_string())),
            ),
            describe("metric", old.metric.to_string(), metric.to_string()),
        ]
        .into_iter()
        .flatten(),
    );
    change.live.extend(
        [
            describe("maximum_paths", old.maximum_paths.to_string(), maximum_paths.to_string()),
            describe(
                "multipath_relax",
                old.multipath_relax.to_string(),
                multipath_relax.to_string(),
            ),
        ]
        .into_iter()
        .flatten(),
    );
    change
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{load_str, PrefixMatch};
    use std::path::PathBuf;
    use std::time::Duration;

    fn neighbor(extra: &str) -> Neighbor {
        let text = format!(
            "[[bgp.routers]]\nasn = 65001\nprefixes = [\"10.9.0.0/24\"]\n[[bgp.routers.neighbors]]\naddress = \"10.0.0.1\"\nasn = 65002\n{extra}\n"
        );
        let config = load_str("uplink.toml", &text).unwrap_or_else(|e| panic!("{e}"));
        config.bgp.routers[0].neighbors[0].clone()
    }

    fn net(text: &str) -> IpNet {
        text.parse().unwrap()
    }

    #[test]
    fn policies_change_live_and_session_settings_reset() {
        let base = neighbor("");
        assert!(neighbor_change(&base, &base).is_empty());

        // Defined in another file: no change at all.
        let mut moved = base.clone();
        moved.sources = vec![PathBuf::from("/etc/uplink/conf.d/other.toml")];
        assert!(neighbor_change(&base, &moved).is_empty());

        let filters = neighbor(
            "to_receive = { allowed = { prefixes = [{ prefix = \"10.1.0.0/16\", le = 24 }] } }\nto_advertise = { allowed = { prefixes = [\"10.9.0.0/24\"] }, with_community = [{ community = \"65000:1\", prefixes = [\"10.9.0.0/24\"] }] }\nmax_prefixes = 100",
        );
        let change = neighbor_change(&base, &filters);
        assert!(change.reset.is_empty(), "{change:?}");
        assert!(change.import && change.import_widened && change.export && change.max_prefixes);
        assert_eq!(change.export_parts, vec!["allowed prefixes", "with_community"]);
        assert!(change.policy());

        let timers = neighbor("hold_time = \"30s\"\npassword = \"k\"");
        let change = neighbor_change(&base, &timers);
        assert_eq!(
            change.reset,
            vec!["hold_time 1m30s → 30s", "keepalive_time 30s → 10s", "password added"]
        );
        assert!(!change.policy());
        let mut asn = base.clone();
        asn.remote_asn = crate::config::RemoteAsn::Fixed(65003);
        asn.hold_time = Duration::from_secs(90);
        assert_eq!(neighbor_change(&base, &asn).reset, vec!["asn 65002 → 65003"]);
    }

    #[test]
    fn only_a_wider_receive_filter_needs_the_peer_to_resend() {
        let entry = |p: &str| PrefixMatch { prefix: net(p), ge: None, le: Some(24) };
        let filtered = |list: &[&str]| ReceivePolicy {
            mode: AllowMode::Filtered,
            prefixes: list.iter().map(|p| entry(p)).collect(),
        };
        let all = ReceivePolicy { mode: AllowMode::All, prefixes: vec![] };
        let two = filtered(&["10.1.0.0/16", "10.2.0.0/16"]);
        let one = filtered(&["10.1.0.0/16"]);
        assert!(!receive_widened(&two, &one), "narrower");
        assert!(receive_widened(&one, &two), "an entry added");
        assert!(receive_widened(&one, &all));
        assert!(!receive_widened(&all, &one));
        assert!(receive_widened(&one, &filtered(&["10.3.0.0/16"])), "replaced");
        assert!(always_block_widened(&[net("10.0.0.0/8")], &[net("10.0.0.0/16")]));
        assert!(!always_block_widened(&[net("10.0.0.0/8")], &[net("10.0.0.0/8"), net("::/0")]));
    }

    #[test]
    fn router_settings_split_into_restart_and_live() {
        let text = "[[bgp.routers]]\nasn = 65001\nid = \"10.0.0.9\"\n";
        let old = load_str("uplink.toml", text).unwrap().bgp.routers[0].clone();
        let mut new = old.clone();
        new.maximum_paths = 8;
        new.sources = vec![PathBuf::from("x.toml")];
        let change = router_change(&old, &new);
        assert!(change.restart.is_empty());
        assert_eq!(change.live, vec!["maximum_paths 64 → 8"]);
        new.metric = 30;
        assert_eq!(router_change(&old, &new).restart, vec!["metric 20 → 30"]);
    }
}
