//! nmstate's `NodeNetworkConfigurationPolicy` (`nmstate.io/v1`) as users apply it to
//! kubernetes-nmstate: `spec.nodeSelector` and `spec.desiredState` become a
//! `[[network_policies]]` entry, validated by the same code as TOML (desired-state keys are
//! nmstate's own in both). `spec.maxUnavailable` is accepted and kept for display: it paces a
//! rollout across a fleet, which is the rollout tool's job, not a node's (docs/network.md).
//! `spec.capture` is read as kubernetes-nmstate reads it: nmstate fills the desired state's
//! `{{ capture.… }}` templates from it against the node's current state, on the node.

use serde_norway::{Mapping, Value};

use super::super::validate::Fragment;
use super::{list, Document};

impl Document<'_> {
    pub(super) fn nncp(&mut self, mut spec: Mapping, name: String) -> Option<Fragment> {
        let mut policy = Mapping::new();
        policy.insert(Value::from("name"), Value::from(name));
        for (from, to) in [
            ("nodeSelector", "node_selector"),
            ("desiredState", "desired_state"),
            ("maxUnavailable", "max_unavailable"),
            ("capture", "capture"),
        ] {
            if let Some(value) = spec.remove(from) {
                policy.insert(Value::from(to), value);
            }
        }
        if let Some((key, _)) = spec.iter().next() {
            let key = key.as_str().unwrap_or("?").to_string();
            self.fail(
                &format!("spec.{key}"),
                format!(
                    "unknown or unsupported field `{key}`; expected nodeSelector, desiredState, \
                     maxUnavailable, capture"
                ),
            );
            return None;
        }
        if !policy.contains_key("desired_state") {
            self.fail("spec.desiredState", "missing; a policy needs a desired state");
            return None;
        }
        let mut fragment = self.emit(
            "network_policies",
            list(Value::Mapping(policy)),
            "network_policies[0]",
            "spec",
            None,
        )?;
        // Conflicts found later, across files, point at this document the way its other
        // errors do: its first line, the manifest's field names.
        for policy in &mut fragment.network.policies {
            policy.loc.column = 1;
            policy.name_field = format!("documents[{}].metadata.name", self.index);
            policy.desired_field = format!("documents[{}].spec.desiredState", self.index);
            for (_, loc) in &mut policy.interfaces {
                loc.column = 1;
                loc.line = self.line;
            }
            policy.loc.line = self.line;
        }
        Some(fragment)
    }
}
