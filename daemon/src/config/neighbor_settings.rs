//! The one list of a neighbor's session settings: how each is written in a file and what a
//! change of it does to a running session. Merging files (`merge`: two files must agree on
//! each) and reloading (`bgp::reconfigure`: reset the session or change it live) both read
//! this list, so a new setting is decided once, here.
//!
//! A BGP session cannot change what its OPEN carried (AS numbers, hold time, families,
//! graceful restart; RFC 4271 §4.2, RFC 4760 §8, RFC 4724 §3), what its TCP connection is
//! (addresses, port, TCP-MD5 key, RFC 2385; TTL and GTSM, RFC 5082) or how it is opened
//! (passive, connect retry): those reset it. The prefix limit and the BFD profile apply to
//! the running session. The filters (`to_advertise`, `to_receive`) are not settings: files
//! union them and a reload applies them live (`bgp::reconfigure::neighbor_change`).

use super::duration::format_duration;
use super::model::{GracefulRestartMode, Neighbor, Password, RemoteAsn};

/// What changing a setting does to an established session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnChange {
    /// In the OPEN or the TCP connection: the session is reset.
    Reset,
    /// The prefix limit, applied by the RIB to the running session.
    LiveMaxPrefixes,
    /// The BFD session follows (new timers by a Poll Sequence, or a new BFD session).
    LiveBfd,
}

/// A setting's value as a file writes it; a key only as whether one is set.
#[derive(Debug, Clone, PartialEq)]
enum Value<'a> {
    /// `None`: left out.
    Shown(Option<String>),
    Key(Option<&'a Password>),
}

/// One setting of one neighbor.
#[derive(Debug, Clone)]
struct Setting<'a> {
    /// The field as a TOML file names it.
    field: &'static str,
    on_change: OnChange,
    value: Value<'a>,
    /// A file writes the value as a TOML string.
    quoted: bool,
    /// What leaving it out means, for a change ("none" unless said).
    unset: &'static str,
}

impl<'a> Setting<'a> {
    fn new(field: &'static str, on_change: OnChange, value: Option<String>) -> Self {
        Self { field, on_change, value: Value::Shown(value), quoted: false, unset: "none" }
    }

    fn quoted(mut self) -> Self {
        self.quoted = true;
        self
    }

    fn unset_means(mut self, unset: &'static str) -> Self {
        self.unset = unset;
        self
    }
}

/// Every session setting of `n`, in the order they are reported.
fn settings(n: &Neighbor) -> Vec<Setting<'_>> {
    use OnChange::{LiveBfd, LiveMaxPrefixes, Reset};
    // Every field is named, so a new one cannot be added without deciding here whether it is
    // a setting and what its change does.
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
        // Filters: unioned by `merge`, applied live by `bgp::reconfigure`.
        to_advertise: _,
        to_receive: _,
        // Which files define a neighbor is no setting at all.
        sources: _,
    } = n;
    let duration = |d: &std::time::Duration| Some(format_duration(*d));
    let limit =
        |part: &dyn Fn(&super::MaxPrefixes) -> Option<String>| max_prefixes.and_then(|m| part(&m));
    // `asn` and `dynamic_asn` are one setting written two ways.
    let asn = match remote_asn {
        RemoteAsn::Fixed(asn) => Setting::new("asn", Reset, Some(asn.to_string())),
        other => Setting::new("dynamic_asn", Reset, Some(other.to_string())).quoted(),
    };
    vec![
        asn,
        Setting::new("port", Reset, Some(port.to_string())),
        Setting::new("source_address", Reset, source_address.map(|a| a.to_string())).quoted(),
        Setting::new("hold_time", Reset, duration(hold_time)).quoted(),
        Setting::new("keepalive_time", Reset, duration(keepalive_time)).quoted(),
        Setting::new("connect_time", Reset, duration(connect_time)).quoted(),
        // RFC 9687: the SendHoldTimer is set when the OPENs are exchanged.
        Setting::new("send_hold_time", Reset, send_hold_time.as_ref().and_then(duration))
            .quoted()
            .unset_means("twice the hold time"),
        Setting::new("minimum_hold_time", Reset, duration(minimum_hold_time)).quoted(),
        Setting::new("ebgp_multihop", Reset, ebgp_multihop.map(|v| v.to_string())),
        Setting::new("ttl_security", Reset, ttl_security.map(|v| v.to_string())),
        Setting::new("passive", Reset, Some(passive.to_string())),
        // RFC 4724 §3: a capability in the OPEN.
        Setting::new(
            "graceful_restart",
            Reset,
            match graceful_restart {
                GracefulRestartMode::Enabled => Some("true".into()),
                GracefulRestartMode::Disabled => Some("false".into()),
                GracefulRestartMode::Helper => None,
            },
        )
        .unset_means("helper only"),
        Setting::new(
            "families",
            Reset,
            Some(format!(
                "[{}]",
                families.iter().map(|f| format!("\"{}\"", f.name())).collect::<Vec<_>>().join(", ")
            )),
        ),
        Setting {
            field: "password",
            on_change: Reset,
            value: Value::Key(password.as_ref()),
            quoted: false,
            unset: "none",
        },
        Setting::new("bfd_profile", LiveBfd, bfd_profile.clone()).quoted(),
        Setting::new("max_prefixes", LiveMaxPrefixes, limit(&|m| Some(m.limit.to_string()))),
        Setting::new(
            "max_prefixes_threshold",
            LiveMaxPrefixes,
            limit(&|m| Some(m.threshold.to_string())),
        ),
        Setting::new(
            "max_prefixes_warning_only",
            LiveMaxPrefixes,
            limit(&|m| Some(m.warning_only.to_string())),
        ),
        Setting::new(
            "max_prefixes_restart_time",
            LiveMaxPrefixes,
            limit(&|m| m.restart_time.map(format_duration)),
        )
        .quoted(),
    ]
}

/// One setting that differs between two neighbors with the same address.
#[derive(Debug, Clone)]
pub struct Difference<'a> {
    was: Setting<'a>,
    now: Setting<'a>,
}

impl Difference<'_> {
    /// The field, as the later neighbor's file names it.
    pub fn field(&self) -> &'static str {
        self.now.field
    }

    pub fn on_change(&self) -> OnChange {
        self.now.on_change
    }

    /// Each side as a file would write it (`hold_time = "30s"`, `no ebgp_multihop`), later
    /// first. A key is never printed.
    pub fn as_written(&self) -> (String, String) {
        match (&self.now.value, &self.was.value) {
            (Value::Key(now), Value::Key(was)) => {
                let (now, was) = match (now, was) {
                    (Some(_), Some(_)) => ("one TCP-MD5 key", "a different key"),
                    (Some(_), None) => ("a TCP-MD5 key", "no password"),
                    _ => ("no password", "a TCP-MD5 key"),
                };
                (now.to_string(), was.to_string())
            }
            _ => (written(&self.now), written(&self.was)),
        }
    }

    /// The change as a reload reports it: `hold_time 1m30s → 30s`, `password added`.
    pub fn as_change(&self) -> String {
        let value = |s: &Setting| match &s.value {
            Value::Shown(Some(v)) => v.clone(),
            _ => s.unset.to_string(),
        };
        match (&self.was.value, &self.now.value) {
            (Value::Key(None), Value::Key(Some(_))) => "password added".into(),
            (Value::Key(Some(_)), Value::Key(None)) => "password removed".into(),
            (Value::Key(_), Value::Key(_)) => "password changed".into(),
            _ => format!("{} {} → {}", self.now.field, value(&self.was), value(&self.now)),
        }
    }
}

fn written(setting: &Setting) -> String {
    match &setting.value {
        Value::Shown(Some(v)) if setting.quoted => format!("{} = \"{v}\"", setting.field),
        Value::Shown(Some(v)) => format!("{} = {v}", setting.field),
        Value::Shown(None) => format!("no {}", setting.field),
        Value::Key(Some(_)) => "a TCP-MD5 key".into(),
        Value::Key(None) => "no password".into(),
    }
}

/// The session settings of `later` that differ from `earlier`'s, in the list's order.
pub fn differences<'a>(earlier: &'a Neighbor, later: &'a Neighbor) -> Vec<Difference<'a>> {
    settings(earlier)
        .into_iter()
        .zip(settings(later))
        .filter(|(was, now)| was.value != now.value)
        .map(|(was, now)| Difference { was, now })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::load_str;

    fn neighbor(extra: &str) -> Neighbor {
        let asn = if extra.contains("dynamic_asn") { "" } else { "asn = 65002\n" };
        let text = format!(
            "[[bgp.bfd_profiles]]\nname = \"fast\"\n[[bgp.routers]]\nasn = 65001\n[[bgp.routers.neighbors]]\naddress = \"10.0.0.1\"\n{asn}{extra}\n"
        );
        let config = load_str("uplink.toml", &text).unwrap_or_else(|e| panic!("{e}"));
        config.bgp.routers[0].neighbors[0].clone()
    }

    #[test]
    fn each_difference_reads_as_written_and_as_a_change() {
        let base = neighbor("");
        assert!(differences(&base, &base).is_empty());
        let other = neighbor(
            "dynamic_asn = \"external\"\nsend_hold_time = \"10s\"\npassword = \"k\"\n\
             bfd_profile = \"fast\"\nmax_prefixes = 100",
        );
        let found: Vec<_> = differences(&base, &other)
            .iter()
            .map(|d| (d.field(), d.on_change(), d.as_written(), d.as_change()))
            .collect();
        let expect = |field, on_change, now: &str, was: &str, change: &str| {
            (field, on_change, (now.to_string(), was.to_string()), change.to_string())
        };
        use OnChange::*;
        assert_eq!(
            found,
            vec![
                expect(
                    "dynamic_asn",
                    Reset,
                    "dynamic_asn = \"external\"",
                    "asn = 65002",
                    "dynamic_asn 65002 → external"
                ),
                expect(
                    "send_hold_time",
                    Reset,
                    "send_hold_time = \"10s\"",
                    "no send_hold_time",
                    "send_hold_time twice the hold time → 10s"
                ),
                expect("password", Reset, "a TCP-MD5 key", "no password", "password added"),
                expect(
                    "bfd_profile",
                    LiveBfd,
                    "bfd_profile = \"fast\"",
                    "no bfd_profile",
                    "bfd_profile none → fast"
                ),
                expect(
                    "max_prefixes",
                    LiveMaxPrefixes,
                    "max_prefixes = 100",
                    "no max_prefixes",
                    "max_prefixes none → 100"
                ),
                expect(
                    "max_prefixes_threshold",
                    LiveMaxPrefixes,
                    "max_prefixes_threshold = 75",
                    "no max_prefixes_threshold",
                    "max_prefixes_threshold none → 75"
                ),
                expect(
                    "max_prefixes_warning_only",
                    LiveMaxPrefixes,
                    "max_prefixes_warning_only = false",
                    "no max_prefixes_warning_only",
                    "max_prefixes_warning_only none → false"
                ),
            ]
        );
        // Two different keys: neither is printed.
        let (a, b) = (neighbor("password = \"one\""), neighbor("password = \"two\""));
        let both = differences(&a, &b);
        assert_eq!(both.len(), 1);
        assert_eq!(both[0].as_change(), "password changed");
        assert_eq!(
            both[0].as_written(),
            ("one TCP-MD5 key".to_string(), "a different key".to_string())
        );
    }
}
