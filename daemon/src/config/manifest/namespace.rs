//! Kubernetes `Namespace` (`v1`): its labels, which an `IPAddressPool`'s
//! `serviceAllocation.namespaceSelectors` match for the Services in it, as MetalLB's controller
//! reads them. From a manifest in `conf.d` or (with `[kubernetes]`) from the API, where the
//! apiserver also sets `kubernetes.io/metadata.name`. A Namespace's spec (finalizers) is the
//! apiserver's business and accepted as it is.
//!
//! The index also knows which primary user-defined network each Namespace is in (a
//! `ClusterUserDefinedNetwork` with role `Primary` whose `namespaceSelector` selects it), for
//! the EgressIPs that serve its pods, as OVN-Kubernetes's RouteAdvertisements controller
//! decides it (`GetActiveNetworkForNamespace`).

use std::collections::{BTreeMap, BTreeSet};

use serde_norway::Value;

use super::{selector_of, string_map, Facts};
use crate::config::announce::{Labels, DEFAULT_NETWORK};
use crate::config::selector::LabelSelector;

/// The labels of every Namespace of the config, by name, and the primary networks.
#[derive(Debug, Default, Hash)]
pub(crate) struct NamespaceIndex {
    labels: BTreeMap<String, Labels>,
    /// Each `ClusterUserDefinedNetwork` with role `Primary`, by name, with the namespaces it
    /// selects (a malformed selector is reported where its document is translated).
    primary_networks: BTreeMap<String, LabelSelector>,
}

impl NamespaceIndex {
    /// Collects the Namespaces and primary networks read from the documents (see
    /// [`super::Facts`]); a malformed one is reported where its document is translated.
    pub fn of<'a>(facts: impl Iterator<Item = &'a Facts>) -> Self {
        let mut index = Self::default();
        for fact in facts {
            match fact {
                Facts::Namespace { name, labels } => {
                    index.labels.insert(name.clone(), labels.clone());
                }
                Facts::PrimaryNetwork { name, selector } => {
                    index.primary_networks.insert(name.clone(), (**selector).clone());
                }
                _ => {}
            }
        }
        index
    }

    /// The labels of `namespace`; none when the config has no such Namespace.
    pub fn labels(&self, namespace: &str) -> Option<&Labels> {
        self.labels.get(namespace)
    }

    /// Whether the config has no Namespace at all (files that do not list them).
    pub fn is_empty(&self) -> bool {
        self.labels.is_empty()
    }

    /// The networks of the namespaces `selector` selects: each namespace's primary
    /// user-defined network (the first by name whose selector selects it), or the default
    /// network.
    pub fn networks_of(&self, selector: &LabelSelector) -> BTreeSet<String> {
        self.labels
            .values()
            .filter(|labels| selector.matches(labels))
            .map(|labels| {
                self.primary_networks
                    .iter()
                    .find(|(_, selects)| selects.matches(labels))
                    .map_or_else(|| DEFAULT_NETWORK.to_string(), |(name, _)| name.clone())
            })
            .collect()
    }
}

/// What the index keeps of a `Namespace` or `ClusterUserDefinedNetwork` document.
pub(super) fn facts_of(kind: &str, value: &Value) -> Option<Facts> {
    let metadata = value.get("metadata");
    let name = metadata.and_then(|m| m.get("name")).and_then(Value::as_str)?.to_string();
    match kind {
        "Namespace" => {
            let labels =
                metadata.and_then(|m| m.get("labels")).map_or(Some(Labels::new()), string_map)?;
            Some(Facts::Namespace { name, labels })
        }
        "ClusterUserDefinedNetwork" => {
            let spec = value.get("spec");
            let network = spec.and_then(|s| s.get("network"));
            let role = ["layer3", "layer2"]
                .iter()
                .find_map(|topology| network?.get(*topology)?.get("role")?.as_str());
            let selector =
                spec.and_then(|s| s.get("namespaceSelector")).and_then(|s| selector_of(s).ok())?;
            (role == Some("Primary"))
                .then(|| Facts::PrimaryNetwork { name, selector: Box::new(selector) })
        }
        _ => None,
    }
}
