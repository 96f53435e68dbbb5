//! What a reload may change on a running router or neighbor without resetting its sessions.
//!
//! A BGP session cannot change what its OPEN carried (AS numbers, router id, hold time,
//! families, graceful restart; RFC 4271 §4.2, RFC 4760 §8, RFC 4724 §3), what its TCP connection is (addresses, port, TCP-MD5
//! key, RFC 2385; TTL and GTSM, RFC 5082) or how it is opened (passive, connect retry):
//! changing one of those resets the session, with the setting and both values named. Filters
//! and attributes are policy, applied to a running session: export changes become UPDATEs,
//! import changes withdraw what is refused now and ask the peer to send its routes again with
//! ROUTE-REFRESH (RFC 2918) when more is accepted. Which files define a neighbor is no setting
//! at all, so moving one between files, or stating it again identically, changes nothing.

use crate::config::duration::format_duration;
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

/// Compares a running neighbor's settings with the reloaded ones (same address).
pub fn neighbor_change(old: &Neighbor, new: &Neighbor) -> NeighborChange {
    // Every field is named, so a new setting cannot be added without deciding here whether
    // it resets the session.
    let Neighbor {
        address: _,
        remote_asn,
        port,
        source_address,
        password,
        hold_time,
        keepalive_time,
        send_hold_time,
        minimum_hold_time,
        connect_time,
        ebgp_multihop,
        ttl_security,
        passive,
        bfd_profile,
        max_prefixes,
        graceful_restart,
        families,
        to_advertise,
        to_receive,
        sources: _,
    } = new;
    let mut reset = Vec::new();
    let mut differs = |name: &str, was: String, now: String| {
        if was != now {
            reset.push(format!("{name} {was} → {now}"));
        }
    };
    let optional = |v: Option<String>| v.unwrap_or_else(|| "none".into());
    differs("asn", old.remote_asn.to_string(), remote_asn.to_string());
    differs("port", old.port.to_string(), port.to_string());
    differs(
        "source_address",
        optional(old.source_address.map(|a| a.to_string())),
        optional(source_address.map(|a| a.to_string())),
    );
    differs("hold_time", format_duration(old.hold_time), format_duration(*hold_time));
    differs(
        "keepalive_time",
        format_duration(old.keepalive_time),
        format_duration(*keepalive_time),
    );
    differs("connect_time", format_duration(old.connect_time), format_duration(*connect_time));
    // The SendHoldTimer and the minimum hold time are set when the OPENs are exchanged.
    let send_hold = |v: Option<std::time::Duration>| match v {
        None => "twice the hold time".to_string(),
        Some(d) => format_duration(d),
    };
    differs("send_hold_time", send_hold(old.send_hold_time), send_hold(*send_hold_time));
    differs(
        "minimum_hold_time",
        format_duration(old.minimum_hold_time),
        format_duration(*minimum_hold_time),
    );
    differs(
        "ebgp_multihop",
        optional(old.ebgp_multihop.map(|v| v.to_string())),
        optional(ebgp_multihop.map(|v| v.to_string())),
    );
    differs(
        "ttl_security",
        optional(old.ttl_security.map(|v| v.to_string())),
        optional(ttl_security.map(|v| v.to_string())),
    );
    differs("passive", old.passive.to_string(), passive.to_string());
    // RFC 4724 §3: a capability in the OPEN.
    differs("graceful_restart", old.graceful_restart.to_string(), graceful_restart.to_string());
    let names = |list: &[crate::config::AddressFamily]| {
        list.iter().map(|f| f.name()).collect::<Vec<_>>().join(",")
    };
    differs("families", names(&old.families), names(families));
    if old.password != *password {
        // The key itself is never printed.
        reset.push(
            match (&old.password, password) {
                (None, Some(_)) => "password added",
                (Some(_), None) => "password removed",
                _ => "password changed",
            }
            .to_string(),
        );
    }
    NeighborChange {
        reset,
        import: old.to_receive != *to_receive,
        import_widened: receive_widened(&old.to_receive, to_receive),
        export: old.to_advertise != *to_advertise,
        export_parts: [
            (old.to_advertise.mode != to_advertise.mode
                || old.to_advertise.prefixes != to_advertise.prefixes)
                .then_some("allowed prefixes"),
            (old.to_advertise.with_community != to_advertise.with_community)
                .then_some("with_community"),
            (old.to_advertise.with_local_pref != to_advertise.with_local_pref)
                .then_some("with_local_pref"),
        ]
        .into_iter()
        .flatten()
        .collect(),
        max_prefixes: old.max_prefixes != *max_prefixes,
        bfd_profile: old.bfd_profile != *bfd_profile,
    }
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
