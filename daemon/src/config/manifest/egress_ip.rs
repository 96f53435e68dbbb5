//! OVN-Kubernetes `EgressIP` (`k8s.ovn.org/v1`): the addresses OVN-Kubernetes assigned to this
//! node, as its `status.items` names them (`{node, egressIP}`), become `egress_ips` of the
//! default network — what a `RouteAdvertisements` with `advertisements: [EgressIP]` announces
//! from the node that holds each address. Which pods use the address (`namespaceSelector`,
//! `podSelector`) decides nothing here. Unlike the other kinds, the status is what counts: the
//! assignment is OVN-Kubernetes's, and it moves when a node fails.

use serde_norway::{Mapping, Value};

use super::super::validate::Fragment;
use super::{list, Context, Document};
use crate::config::announce::DEFAULT_NETWORK;

/// `EgressIPSpec` fields (OVN-Kubernetes 1.3).
const SPEC_FIELDS: [&str; 3] = ["egressIPs", "namespaceSelector", "podSelector"];

impl Document<'_> {
    pub(super) fn egress_ip(
        &mut self,
        spec: &Mapping,
        status: Option<&Value>,
        context: &Context<'_>,
    ) -> Option<Fragment> {
        if let Some(key) = spec.keys().filter_map(Value::as_str).find(|k| !SPEC_FIELDS.contains(k))
        {
            self.fail(
                &format!("spec.{key}"),
                format!(
                    "unknown field `{key}`; expected egressIPs, namespaceSelector, podSelector"
                ),
            );
            return None;
        }
        let items = match status.and_then(|s| s.get("items")) {
            None | Some(Value::Null) => return None,
            Some(Value::Sequence(items)) => items,
            Some(_) => {
                self.fail("status.items", "must be a list of {node, egressIP}");
                return None;
            }
        };
        let node = context.node_name?;
        let mut held = Vec::new();
        for (i, item) in items.iter().enumerate() {
            let (Some(on), Some(address)) = (
                item.get("node").and_then(Value::as_str),
                item.get("egressIP").and_then(Value::as_str),
            ) else {
                self.fail(&format!("status.items[{i}]"), "needs node and egressIP");
                return None;
            };
            if on == node {
                held.push(Value::from(address));
            }
        }
        if held.is_empty() {
            return None;
        }
        let mut entry = Mapping::new();
        entry.insert(Value::from("name"), Value::from(DEFAULT_NETWORK));
        // OVN-Kubernetes's default network is always layer 3; its subnets come from the TOML
        // `[[networks]]` entry of the same name.
        entry.insert(Value::from("topology"), Value::from("layer3"));
        entry.insert(Value::from("egress_ips"), Value::Sequence(held));
        self.emit_with("networks", list(Value::Mapping(entry)), |field| {
            match field.strip_prefix("networks[0].egress_ips") {
                Some(rest) => format!("status.items{rest}"),
                None => "status".to_string(),
            }
        })
    }
}
