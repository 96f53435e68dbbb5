//! Kubernetes `Namespace` (`v1`): its labels, which an `IPAddressPool`'s
//! `serviceAllocation.namespaceSelectors` match for the Services in it, as MetalLB's controller
//! reads them. From a manifest in `conf.d` or (with `[kubernetes]`) from the API, where the
//! apiserver also sets `kubernetes.io/metadata.name`. A Namespace's spec (finalizers) is the
//! apiserver's business and accepted as it is.

use std::collections::BTreeMap;

use serde_norway::Value;

use super::string_map;
use crate::config::announce::Labels;

/// The labels of every Namespace of the config, by name.
#[derive(Debug, Default)]
pub(crate) struct NamespaceIndex(BTreeMap<String, Labels>);

impl NamespaceIndex {
    /// Collects the Namespaces among `values` (manifest documents); a malformed one is
    /// reported where its document is translated.
    pub fn of<'a>(values: impl Iterator<Item = &'a Value>) -> Self {
        let mut index = Self::default();
        for value in values {
            if value.get("kind").and_then(Value::as_str) != Some("Namespace") {
                continue;
            }
            let metadata = value.get("metadata");
            let name = metadata.and_then(|m| m.get("name")).and_then(Value::as_str);
            let labels =
                metadata.and_then(|m| m.get("labels")).map_or(Some(Labels::new()), string_map);
            if let (Some(name), Some(labels)) = (name, labels) {
                index.0.insert(name.to_string(), labels);
            }
        }
        index
    }

    /// The labels of `namespace`; none when the config has no such Namespace.
    pub fn labels(&self, namespace: &str) -> Option<&Labels> {
        self.0.get(namespace)
    }
}
