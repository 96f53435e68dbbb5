//! Enactments: what happened to each policy on this node, like kubernetes-nmstate's
//! NodeNetworkConfigurationEnactment, and the rule for what a (re)start does with them.
//!
//! Status (kubernetes-nmstate's condition names):
//! - `Pending`: selected, not applied yet (or could not be tried: NetworkManager unreachable).
//! - `Progressing`: applied without commit, probes running. Found at start, it means uplink
//!   stopped in the middle: NetworkManager's checkpoint rolled the change back by itself.
//! - `Available`: applied, probes passed, committed.
//! - `Failing`: nmstate refused or failed to apply it, or a probe failed afterwards; rolled back.
//! - `Aborted`: interrupted (uplink stopped while it was Progressing).
//!
//! A Failing or Aborted policy is not applied again until its desired state (as resolved for
//! this node) changes, so a restart never re-runs a change that cut the node off; `uplink apply
//! network --retry` re-runs it on purpose.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum EnactmentStatus {
    Pending,
    Progressing,
    Available,
    Failing,
    Aborted,
}

impl EnactmentStatus {
    pub const ALL: [EnactmentStatus; 5] =
        [Self::Pending, Self::Progressing, Self::Available, Self::Failing, Self::Aborted];

    pub fn name(self) -> &'static str {
        match self {
            Self::Pending => "Pending",
            Self::Progressing => "Progressing",
            Self::Available => "Available",
            Self::Failing => "Failing",
            Self::Aborted => "Aborted",
        }
    }
}

/// A probe that ran after the change, and how it ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProbeOutcome {
    pub probe: String,
    /// `None`: passed.
    pub error: Option<String>,
}

/// One policy's enactment on this node.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Enactment {
    pub policy: String,
    pub status: EnactmentStatus,
    /// Why: nmstate's error, the failing probe, or what was done.
    pub message: String,
    /// The desired state as resolved for this node: what was (or would be) applied.
    pub desired_state: serde_json::Value,
    /// When the status last changed (seconds since the Unix epoch).
    pub time: u64,
    /// The probes required after the change (those that passed before it).
    #[serde(default)]
    pub probes: Vec<ProbeOutcome>,
    /// While Progressing: what undoes the apply, so a daemon that dies before it commits can
    /// undo exactly its own change at its next start (`netconf::apply`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub in_flight: Option<InFlight>,
}

/// What undoes an apply in progress.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct InFlight {
    /// NetworkManager's checkpoints before the apply (others' or stale ones: never ours);
    /// `None` when they could not be listed, and then no checkpoint is taken for ours.
    #[serde(default)]
    pub before: Option<Vec<String>>,
    /// The apply's own checkpoint, when it is known.
    #[serde(default)]
    pub path: Option<String>,
    /// The state from before the apply (nmstate's revert): kernel mode's only way back, and
    /// NetworkManager's where its checkpoint falls short.
    #[serde(default)]
    pub revert: Option<serde_json::Value>,
}

impl InFlight {
    /// Of the checkpoints open now, the one an interrupted apply left: its own if recorded and
    /// still open; else the only one that appeared since the apply began (with several, none:
    /// another tool's could be among them).
    pub fn left_open(&self, open_now: &[String]) -> Option<String> {
        if let Some(path) = &self.path {
            return open_now.contains(path).then(|| path.clone());
        }
        let before = self.before.as_ref()?;
        let mut new = open_now.iter().filter(|p| !before.contains(p));
        match (new.next(), new.next()) {
            (Some(only), None) => Some(only.clone()),
            _ => None,
        }
    }
}

impl Enactment {
    pub fn new(policy: &str, desired_state: serde_json::Value, now: u64) -> Self {
        Self {
            policy: policy.to_string(),
            status: EnactmentStatus::Pending,
            message: String::new(),
            desired_state,
            time: now,
            probes: Vec::new(),
            in_flight: None,
        }
    }

    /// Moves to `status` with `message` at `now`. Only Progressing keeps a checkpoint.
    pub fn transition(&mut self, status: EnactmentStatus, message: impl Into<String>, now: u64) {
        if status != EnactmentStatus::Progressing {
            self.in_flight = None;
        }
        self.status = status;
        self.message = message.into();
        self.time = now;
    }
}

/// What to do with a selected policy, given its enactment from before.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Never applied, changed since, or Pending: apply it.
    Apply,
    /// Available with this desired state: apply only if the node drifted from it.
    ApplyIfDrifted,
    /// Failing or Aborted with this very desired state: leave it, say why.
    Skip(String),
}

/// The restart rule: a policy that failed is not re-run until it changes (or `retry`).
pub fn decide(previous: Option<&Enactment>, desired: &serde_json::Value, retry: bool) -> Decision {
    let Some(previous) = previous else { return Decision::Apply };
    if previous.desired_state != *desired {
        return Decision::Apply;
    }
    match previous.status {
        EnactmentStatus::Pending => Decision::Apply,
        EnactmentStatus::Available => Decision::ApplyIfDrifted,
        EnactmentStatus::Failing | EnactmentStatus::Aborted | EnactmentStatus::Progressing
            if retry =>
        {
            Decision::Apply
        }
        EnactmentStatus::Failing | EnactmentStatus::Aborted | EnactmentStatus::Progressing => {
            Decision::Skip(format!(
                "not re-applied: it was {} ({}) and has not changed since; change the policy \
                 or run `uplink apply network --retry`",
                previous.status.name(),
                previous.message
            ))
        }
    }
}

/// At start: an enactment left Progressing means uplink stopped between apply and commit;
/// `how` says what became of its change.
pub fn interrupted(enactment: &mut Enactment, now: u64, how: &str) {
    if enactment.status == EnactmentStatus::Progressing {
        enactment.transition(
            EnactmentStatus::Aborted,
            format!("interrupted: uplink stopped while applying it; {how}"),
            now,
        );
    }
}

/// `time` as RFC 3339 UTC (`2026-12-01T12:36:51Z`).
pub fn rfc3339(secs: u64) -> String {
    let days = i64::try_from(secs / 86_400).unwrap_or(0);
    let rem = secs % 86_400;
    // Civil date from days since 1970-01-01 (H. Hinnant, "chrono-Compatible Low-Level Date
    // Algorithms", civil_from_days).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn enactment(status: EnactmentStatus, desired: serde_json::Value) -> Enactment {
        let mut e = Enactment::new("vlans", desired, 1);
        e.transition(status, "probe default-gateway-ipv4 failed", 2);
        e
    }

    #[test]
    fn restart_rule() {
        let a = json!({"interfaces": [{"name": "vlan2001"}]});
        let b = json!({"interfaces": [{"name": "vlan2002"}]});
        assert_eq!(decide(None, &a, false), Decision::Apply);
        assert_eq!(
            decide(Some(&enactment(EnactmentStatus::Pending, a.clone())), &a, false),
            Decision::Apply
        );
        assert_eq!(
            decide(Some(&enactment(EnactmentStatus::Available, a.clone())), &a, false),
            Decision::ApplyIfDrifted
        );
        for status in [EnactmentStatus::Failing, EnactmentStatus::Aborted] {
            let previous = enactment(status, a.clone());
            let Decision::Skip(why) = decide(Some(&previous), &a, false) else {
                panic!("a {status:?} policy must not be re-run unchanged")
            };
            assert!(why.contains("probe default-gateway-ipv4 failed"), "{why}");
            // A changed policy, or --retry, runs again.
            assert_eq!(decide(Some(&previous), &b, false), Decision::Apply);
            assert_eq!(decide(Some(&previous), &a, true), Decision::Apply);
        }
    }

    #[test]
    fn progressing_at_start_becomes_aborted_and_is_not_rerun() {
        let a = json!({"interfaces": []});
        let mut e = enactment(EnactmentStatus::Progressing, a.clone());
        e.in_flight = Some(InFlight { path: Some("/cp/2".into()), ..Default::default() });
        interrupted(&mut e, 10, "rolled back now");
        assert_eq!((e.status, e.time), (EnactmentStatus::Aborted, 10));
        assert!(e.message.ends_with("rolled back now"), "{}", e.message);
        assert_eq!(e.in_flight, None);
        assert!(matches!(decide(Some(&e), &a, false), Decision::Skip(_)));
        let mut done = enactment(EnactmentStatus::Available, a);
        interrupted(&mut done, 10, "");
        assert_eq!((done.status, done.time), (EnactmentStatus::Available, 2));
    }

    /// The checkpoint an interrupted apply left open is its own: recorded, or the one that
    /// appeared since the apply began; never one of several new ones, nor one from before.
    #[test]
    fn only_our_own_checkpoint_is_rolled_back() {
        let open = |list: &[&str]| list.iter().map(|p| p.to_string()).collect::<Vec<_>>();
        let before = open(&["/cp/1"]);
        let known =
            InFlight { before: Some(before.clone()), path: Some("/cp/2".into()), revert: None };
        assert_eq!(known.left_open(&open(&["/cp/1", "/cp/2"])), Some("/cp/2".into()));
        assert_eq!(known.left_open(&open(&["/cp/1", "/cp/3"])), None, "ours already gone");
        let unlisted = InFlight { before: None, path: None, revert: None };
        assert_eq!(unlisted.left_open(&open(&["/cp/4"])), None, "maybe another tool's");
        let unknown = InFlight { before: Some(before), path: None, revert: None };
        assert_eq!(unknown.left_open(&open(&["/cp/1", "/cp/4"])), Some("/cp/4".into()));
        assert_eq!(unknown.left_open(&open(&["/cp/1"])), None);
        assert_eq!(unknown.left_open(&open(&["/cp/1", "/cp/4", "/cp/5"])), None, "ambiguous");
    }

    #[test]
    fn enactments_round_trip_through_json() {
        let mut e = enactment(EnactmentStatus::Failing, json!({"interfaces": []}));
        e.probes.push(ProbeOutcome { probe: "dns".into(), error: Some("timeout".into()) });
        let text = serde_json::to_string(&e).unwrap();
        assert!(text.contains(r#""status":"Failing""#), "{text}");
        assert_eq!(serde_json::from_str::<Enactment>(&text).unwrap(), e);
    }

    #[test]
    fn times_print_as_rfc3339() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(951_825_600), "2000-02-29T12:00:00Z");
        assert_eq!(rfc3339(1_796_042_211), "2026-11-30T12:36:51Z");
    }
}
