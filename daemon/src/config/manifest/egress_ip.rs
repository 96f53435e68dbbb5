//! OVN-Kubernetes `EgressIP` (`k8s.ovn.org/v1`): the addresses OVN-Kubernetes assigned to this
//! node, as its `status.items` names them (`{node, egressIP}`), become `egress_ips` of the
//! network of the pods they serve — what a `RouteAdvertisements` with `advertisements:
//! [EgressIP]` announces from the node that holds each address. As OVN-Kubernetes's
//! RouteAdvertisements controller decides it: the network of each namespace its
//! `namespaceSelector` selects (its primary `ClusterUserDefinedNetwork`, or the default
//! network). A config without Namespaces (files that do not list them) puts them in the
//! default network. Unlike the other kinds, the status is what counts: the assignment is
//! OVN-Kubernetes's, and it moves when a node fails.

use serde_norway::{Mapping, Value};

use super::super::validate::Fragment;
use super::{selector_of, Context, Document};
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
        let node = context.node_name()?;
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
        let namespaces = context.namespaces();
        let networks = if namespaces.is_empty() {
            [DEFAULT_NETWORK.to_string()].into()
        } else {
            let selector = spec.get("namespaceSelector").filter(|s| !s.is_null())?;
            match selector_of(selector) {
                Ok(selector) => namespaces.networks_of(&selector),
                Err(message) => {
                    self.fail("spec.namespaceSelector", message);
                    return None;
                }
            }
        };
        let entries = networks
            .into_iter()
            .map(|name| {
                let mut entry = Mapping::new();
                if name == DEFAULT_NETWORK {
                    // OVN-Kubernetes's default network is always layer 3; its subnets come
                    // from the TOML `[[networks]]` entry of the same name. A user-defined
                    // network's come from its ClusterUserDefinedNetwork.
                    entry.insert(Value::from("topology"), Value::from("layer3"));
                }
                entry.insert(Value::from("name"), Value::from(name));
                entry.insert(Value::from("egress_ips"), Value::Sequence(held.clone()));
                Value::Mapping(entry)
            })
            .collect::<Vec<Value>>();
        if entries.is_empty() {
            // No namespace it serves: OVN-Kubernetes advertises it on no network.
            return None;
        }
        self.emit_with("networks", Value::Sequence(entries), |field| {
            let rest = field.strip_prefix("networks[").and_then(|r| r.split_once("].egress_ips"));
            match rest {
                Some((_, rest)) => format!("status.items{rest}"),
                None => "status".to_string(),
            }
        })
    }
}
