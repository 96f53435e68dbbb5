//! The conditions kubernetes-nmstate writes, made from uplink's enactments: an enactment's five
//! (`Failing`, `Available`, `Progressing`, `Pending`, `Aborted`) as the handler's setters make
//! them (kubernetes-nmstate `pkg/enactmentstatus/conditions`), and a policy's four
//! (`Degraded`, `Available`, `Progressing`, `Ignored`) counted from every node's enactments as
//! `pkg/policyconditions` counts them. Plain data: `enactment_writer` sends them.
// Used by the writer, which needs the `kubernetes` feature.
#![cfg_attr(not(feature = "kubernetes"), allow(dead_code))]

use serde_json::{json, Value};

use crate::netconf::EnactmentStatus;

/// One condition, without its times: what decides whether a write is needed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Condition {
    /// The condition's `type`.
    pub kind: &'static str,
    /// `True`, `False` or `Unknown`.
    pub status: &'static str,
    pub reason: &'static str,
    pub message: String,
}

fn condition(
    kind: &'static str,
    status: &'static str,
    reason: &'static str,
    message: &str,
) -> Condition {
    Condition { kind, status, reason, message: message.to_string() }
}

impl Condition {
    /// As kubernetes-nmstate's `Condition` JSON, with `lastTransitionTime` at `transition` and
    /// `lastHeartbeatTime` at `heartbeat` (RFC 3339); empty reason and message are left out.
    pub fn to_json(&self, transition: &str, heartbeat: &str) -> Value {
        let mut object = json!({
            "type": self.kind,
            "status": self.status,
            "lastTransitionTime": transition,
            "lastHeartbeatTime": heartbeat,
        });
        if let Some(map) = object.as_object_mut() {
            if !self.reason.is_empty() {
                map.insert("reason".into(), Value::from(self.reason));
            }
            if !self.message.is_empty() {
                map.insert("message".into(), Value::from(self.message.as_str()));
            }
        }
        object
    }

    /// Whether `object` (a condition as the API holds it) says the same, times aside.
    pub fn same_as(&self, object: &Value) -> bool {
        let text = |key: &str| object.get(key).and_then(Value::as_str).unwrap_or_default();
        text("type") == self.kind
            && text("status") == self.status
            && text("reason") == self.reason
            && text("message") == self.message
    }
}

// The enactment's reasons (kubernetes-nmstate api/shared, NodeNetworkConfigurationEnactment).
const SUCCESSFULLY_CONFIGURED: &str = "SuccessfullyConfigured";
const FAILED_TO_CONFIGURE: &str = "FailedToConfigure";
const CONFIGURATION_PROGRESSING: &str = "ConfigurationProgressing";
const CONFIGURATION_ABORTED: &str = "ConfigurationAborted";
/// uplink's own: upstream's Pending means "waiting for its turn under maxUnavailable"
/// (`MaxUnavailableLimitReached`), which a node never waits for here; uplink's Pending is a
/// policy undone because the reload that applied it was refused (docs/kubernetes.md).
const RELOAD_REFUSED: &str = "ReloadRefused";
// The policy's own.
const NO_MATCHING_NODE: &str = "NoMatchingNode";

/// The five conditions of an enactment in `status`, as the handler's setter for that status
/// sets them; `message` goes on the condition that is True.
pub fn enactment_conditions(status: EnactmentStatus, message: &str) -> Vec<Condition> {
    use EnactmentStatus::*;
    let (reason, failing, available, progressing, pending, aborted) = match status {
        // SetSuccess.
        Available => (SUCCESSFULLY_CONFIGURED, "False", "True", "False", "False", "False"),
        // SetFailed (reason FailedToConfigure).
        Failing => (FAILED_TO_CONFIGURE, "True", "False", "False", "False", "False"),
        // SetProgressing: whether it fails or not is not known yet.
        Progressing => (CONFIGURATION_PROGRESSING, "Unknown", "Unknown", "True", "False", "False"),
        Pending => (RELOAD_REFUSED, "False", "False", "False", "True", "False"),
        // SetAborted (reason ConfigurationAborted).
        Aborted => (CONFIGURATION_ABORTED, "False", "False", "False", "False", "True"),
    };
    let one = |kind: &'static str, state: &'static str| {
        let text = if state == "True" { message } else { "" };
        condition(kind, state, reason, text)
    };
    let mut aborted_condition = one("Aborted", aborted);
    if status == Failing {
        // Upstream's SetFailed gives the Aborted condition SuccessfullyConfigured.
        aborted_condition.reason = SUCCESSFULLY_CONFIGURED;
    }
    vec![
        one("Failing", failing),
        one("Available", available),
        one("Progressing", progressing),
        one("Pending", pending),
        aborted_condition,
    ]
}

/// The enactment condition that is True in `status` (an NNCE's `status` as the API holds it).
pub fn true_condition(status: &Value) -> Option<&str> {
    status.get("conditions")?.as_array()?.iter().find_map(|c| {
        (c.get("status")?.as_str()? == "True").then(|| c.get("type")?.as_str()).flatten()
    })
}

/// A policy's enactments, counted as `policyconditions` counts them: every enactment is a
/// node the policy selects, and its condition counts only when it was written for the
/// policy's current generation (an older one is a node still to finish).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Counts {
    pub nodes: usize,
    pub available: usize,
    pub failing: usize,
    pub progressing: usize,
    pub pending: usize,
    pub aborted: usize,
}

impl Counts {
    /// From each enactment's policy generation and True condition.
    pub fn of<'a>(
        enactments: impl IntoIterator<Item = (Option<i64>, Option<&'a str>)>,
        generation: Option<i64>,
    ) -> Counts {
        let mut counts = Counts::default();
        for (written_for, condition) in enactments {
            counts.nodes += 1;
            if written_for != generation {
                continue;
            }
            match condition {
                Some("Available") => counts.available += 1,
                Some("Failing") => counts.failing += 1,
                Some("Progressing") => counts.progressing += 1,
                Some("Pending") => counts.pending += 1,
                Some("Aborted") => counts.aborted += 1,
                _ => {}
            }
        }
        counts
    }
}

/// The policy's four conditions, as `policyconditions.setPolicyStatus` chooses them.
pub fn policy_conditions(counts: &Counts) -> Vec<Condition> {
    let nodes = counts.nodes;
    let finished = counts.available + counts.failing + counts.aborted;
    // (Degraded, Available, Progressing, Ignored), each with its reason; the message goes on
    // the one that tells.
    let set =
        |states: [(&'static str, &'static str); 4], message: String, on: usize| -> Vec<Condition> {
            ["Degraded", "Available", "Progressing", "Ignored"]
                .into_iter()
                .zip(states)
                .enumerate()
                .map(|(i, (kind, (status, reason)))| {
                    condition(kind, status, reason, if i == on { message.as_str() } else { "" })
                })
                .collect()
        };
    let progressing = |message: String| {
        let p = CONFIGURATION_PROGRESSING;
        set([("Unknown", p), ("Unknown", p), ("True", p), ("False", p)], message, 2)
    };
    if nodes == 0 {
        let n = NO_MATCHING_NODE;
        let message = "Policy does not match any node".to_string();
        return set([("False", n), ("False", n), ("False", n), ("True", n)], message, 3);
    }
    if counts.failing + counts.aborted > 0 {
        let mut message = format!("{}/{nodes} nodes failed to configure", counts.failing);
        if counts.aborted > 0 {
            message.push_str(&format!(", {} nodes aborted configuration", counts.aborted));
        }
        let f = FAILED_TO_CONFIGURE;
        // Upstream's SetPolicyFailedToConfigure gives Progressing ConfigurationProgressing.
        let states =
            [("True", f), ("False", f), ("False", CONFIGURATION_PROGRESSING), ("False", f)];
        return set(states, message, 0);
    }
    if finished < nodes {
        return progressing(format!("Policy is progressing {finished}/{nodes} nodes finished"));
    }
    if counts.pending > 0 {
        return progressing(format!(
            "Policy is progressing {finished}/{nodes} nodes finished, {} pending",
            counts.pending
        ));
    }
    let s = SUCCESSFULLY_CONFIGURED;
    let message = format!("{}/{nodes} nodes successfully configured", counts.available);
    set([("False", s), ("True", s), ("False", s), ("False", s)], message, 1)
}

/// `wanted` as the policy's `status.conditions`, keeping the `lastTransitionTime` of each
/// condition whose status `current` (the conditions the API holds) already has; the others,
/// and every heartbeat, at `now`.
pub fn policy_conditions_json(wanted: &[Condition], current: &[Value], now: &str) -> Value {
    let conditions = wanted
        .iter()
        .map(|c| {
            let kept = current.iter().find_map(|old| {
                let same_type = old.get("type").and_then(Value::as_str) == Some(c.kind);
                let same_status = old.get("status").and_then(Value::as_str) == Some(c.status);
                (same_type && same_status)
                    .then(|| old.get("lastTransitionTime").and_then(Value::as_str))
                    .flatten()
            });
            c.to_json(kept.unwrap_or(now), now)
        })
        .collect();
    Value::Array(conditions)
}

/// Whether `current` already says what `wanted` says (times aside).
pub fn unchanged(wanted: &[Condition], current: &[Value]) -> bool {
    wanted.len() == current.len() && wanted.iter().all(|c| current.iter().any(|old| c.same_as(old)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn true_of(conditions: &[Condition]) -> Vec<(&str, &str, &str)> {
        conditions
            .iter()
            .filter(|c| c.status == "True")
            .map(|c| (c.kind, c.reason, c.message.as_str()))
            .collect()
    }

    #[test]
    fn each_enactment_status_sets_upstreams_five_conditions() {
        let available = enactment_conditions(EnactmentStatus::Available, "applied");
        assert_eq!(true_of(&available), [("Available", "SuccessfullyConfigured", "applied")]);
        assert_eq!(available.len(), 5);
        let failing = enactment_conditions(EnactmentStatus::Failing, "probe dns failed");
        assert_eq!(true_of(&failing), [("Failing", "FailedToConfigure", "probe dns failed")]);
        let aborted = failing.iter().find(|c| c.kind == "Aborted");
        assert_eq!(aborted.map(|c| c.reason), Some("SuccessfullyConfigured"));
        let progressing = enactment_conditions(EnactmentStatus::Progressing, "probing");
        let unknown: Vec<&str> =
            progressing.iter().filter(|c| c.status == "Unknown").map(|c| c.kind).collect();
        assert_eq!(unknown, ["Failing", "Available"]);
        let aborted = enactment_conditions(EnactmentStatus::Aborted, "interrupted");
        assert_eq!(true_of(&aborted), [("Aborted", "ConfigurationAborted", "interrupted")]);
        let json = aborted[0].to_json("2026-12-03T10:00:00Z", "2026-12-03T10:00:01Z");
        assert_eq!(json["type"], "Failing");
        assert!(json.get("message").is_none(), "{json}");
        let status =
            json!({"conditions": aborted.iter().map(|c| c.to_json("t", "t")).collect::<Vec<_>>()});
        assert_eq!(true_condition(&status), Some("Aborted"));
    }

    #[test]
    fn policy_conditions_count_like_kubernetes_nmstate() {
        let current = Some(3);
        let none = policy_conditions(&Counts::of([], current));
        assert_eq!(
            true_of(&none),
            [("Ignored", "NoMatchingNode", "Policy does not match any node")]
        );
        let done =
            Counts::of([(current, Some("Available")), (current, Some("Available"))], current);
        assert_eq!(
            true_of(&policy_conditions(&done)),
            [("Available", "SuccessfullyConfigured", "2/2 nodes successfully configured")]
        );
        // A node still on the previous generation has not finished.
        let behind =
            Counts::of([(current, Some("Available")), (Some(2), Some("Available"))], current);
        assert_eq!(
            true_of(&policy_conditions(&behind)),
            [(
                "Progressing",
                "ConfigurationProgressing",
                "Policy is progressing 1/2 nodes finished"
            )]
        );
        let failed = Counts::of(
            [(current, Some("Available")), (current, Some("Failing")), (current, Some("Aborted"))],
            current,
        );
        let conditions = policy_conditions(&failed);
        assert_eq!(
            true_of(&conditions),
            [(
                "Degraded",
                "FailedToConfigure",
                "1/3 nodes failed to configure, 1 nodes aborted configuration"
            )]
        );
        let progressing = conditions.iter().find(|c| c.kind == "Progressing");
        assert_eq!(progressing.map(|c| c.reason), Some("ConfigurationProgressing"));
    }

    #[test]
    fn a_condition_keeps_its_transition_time_while_its_status_stays() {
        let wanted = policy_conditions(&Counts::of([(None, Some("Available"))], None));
        let first = policy_conditions_json(&wanted, &[], "2026-12-03T10:00:00Z");
        let current = first.as_array().cloned().unwrap_or_default();
        assert!(unchanged(&wanted, &current));
        let later = policy_conditions_json(&wanted, &current, "2026-12-03T11:00:00Z");
        assert_eq!(later[1]["lastTransitionTime"], "2026-12-03T10:00:00Z");
        assert_eq!(later[1]["lastHeartbeatTime"], "2026-12-03T11:00:00Z");
        let failed = policy_conditions(&Counts::of([(None, Some("Failing"))], None));
        assert!(!unchanged(&failed, &current));
        let moved = policy_conditions_json(&failed, &current, "2026-12-03T11:00:00Z");
        assert_eq!(moved[0]["lastTransitionTime"], "2026-12-03T11:00:00Z", "Degraded turned True");
    }
}
