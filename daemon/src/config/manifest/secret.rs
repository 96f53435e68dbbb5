//! Kubernetes `Secret` (`v1`) as MetalLB and frr-k8s read it for `passwordSecret`: a Secret of
//! type `kubernetes.io/basic-auth` whose `password` key holds the TCP-MD5 key. From a manifest
//! in `conf.d` or (with `[kubernetes]`) from the API, in the MetalLB / frr-k8s namespace.
//!
//! A `passwordSecret` names the Secret by `name` (and optionally `namespace`); the neighbor then
//! gets the key as if it had said `password`. Nothing here ever puts a key's bytes into a
//! message: errors name the Secret and the field only.

use std::collections::BTreeMap;

use base64::Engine;
use serde_norway::{Mapping, Value};

use super::{Context, Document};

/// The type upstream requires of a password Secret (`corev1.SecretTypeBasicAuth`).
const BASIC_AUTH: &str = "kubernetes.io/basic-auth";

/// Top-level fields of a `Secret` beyond apiVersion, kind and metadata.
const SECRET_FIELDS: [&str; 4] = ["type", "data", "stringData", "immutable"];

/// The Secrets of the config, by name.
#[derive(Debug, Default)]
pub(crate) struct SecretIndex(BTreeMap<String, Vec<SecretEntry>>);

#[derive(Debug, Clone)]
pub(crate) struct SecretEntry {
    namespace: Option<String>,
    kind: Option<String>,
    /// The `password` key, decoded; `None` when the Secret has none.
    password: Option<String>,
}

/// Why a Secret could not be read; the message never holds its data.
type Refusal = (String, String);

impl SecretIndex {
    /// Collects the Secrets read from the documents (see [`super::Facts`]); malformed ones
    /// were left out there and are reported where their document is translated.
    pub fn of<'a>(secrets: impl Iterator<Item = (&'a String, &'a SecretEntry)>) -> Self {
        let mut index = Self::default();
        for (name, entry) in secrets {
            index.0.entry(name.clone()).or_default().push(entry.clone());
        }
        index
    }

    /// The TCP-MD5 key a `passwordSecret` reference names, with upstream's rules: the Secret
    /// exists (in the reference's namespace when it gives one), is of type
    /// `kubernetes.io/basic-auth` and has a `password` key.
    pub fn password(&self, name: &str, namespace: Option<&str>) -> Result<String, String> {
        let found: Vec<&SecretEntry> = self
            .0
            .get(name)
            .into_iter()
            .flatten()
            .filter(|entry| match (namespace, entry.namespace.as_deref()) {
                (Some(wanted), Some(has)) => wanted == has,
                _ => true,
            })
            .collect();
        let entry = match found.as_slice() {
            [] => {
                let place = namespace.map(|ns| format!(" in namespace {ns}")).unwrap_or_default();
                return Err(format!(
                    "Secret \"{name}\"{place} not found; add it (type {BASIC_AUTH}, key \
                     password) to conf.d or to the cluster"
                ));
            }
            [entry] => *entry,
            _ => {
                return Err(format!(
                    "more than one Secret \"{name}\" in the config; name the namespace in \
                     passwordSecret.namespace"
                ))
            }
        };
        if entry.kind.as_deref() != Some(BASIC_AUTH) {
            return Err(format!(
                "Secret \"{name}\" is of type {}, expected {BASIC_AUTH} (as MetalLB and frr-k8s \
                 require)",
                entry.kind.as_deref().unwrap_or("Opaque (the default)")
            ));
        }
        entry
            .password
            .clone()
            .ok_or_else(|| format!("Secret \"{name}\" has no `password` key in data or stringData"))
    }
}

/// A Secret document's name and what the index keeps of it. `stringData` wins over `data` for
/// the same key, as the API server merges them.
pub(super) fn read_secret(top: &Mapping) -> Result<(String, SecretEntry), Refusal> {
    let metadata = top.get("metadata");
    let name = metadata
        .and_then(|m| m.get("name"))
        .and_then(Value::as_str)
        .filter(|n| !n.is_empty())
        .ok_or_else(|| ("metadata.name".to_string(), "missing".to_string()))?;
    let namespace = metadata.and_then(|m| m.get("namespace")).and_then(Value::as_str);
    let kind = match top.get("type") {
        None | Some(Value::Null) => None,
        Some(Value::String(kind)) => Some(kind.clone()),
        Some(_) => return Err(("type".into(), "must be a string".into())),
    };
    let mut password = None;
    if let Some(data) = map_field(top, "data")? {
        for (key, value) in data {
            let key = key.as_str().unwrap_or_default();
            let field = format!("data[{key}]");
            let Some(encoded) = value.as_str() else {
                return Err((field, "must be a base64 string".into()));
            };
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(encoded.trim())
                .map_err(|_| (field.clone(), "is not valid base64".to_string()))?;
            if key == "password" {
                let text = String::from_utf8(bytes)
                    .map_err(|_| (field, "the password is not UTF-8 text".to_string()))?;
                password = Some(text);
            }
        }
    }
    if let Some(data) = map_field(top, "stringData")? {
        for (key, value) in data {
            let key = key.as_str().unwrap_or_default();
            let Some(text) = value.as_str() else {
                return Err((format!("stringData[{key}]"), "must be a string".into()));
            };
            if key == "password" {
                password = Some(text.to_string());
            }
        }
    }
    let entry = SecretEntry { namespace: namespace.map(str::to_string), kind, password };
    Ok((name.to_string(), entry))
}

fn map_field<'a>(top: &'a Mapping, key: &str) -> Result<Option<&'a Mapping>, Refusal> {
    match top.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Mapping(map)) => Ok(Some(map)),
        Some(_) => Err((key.to_string(), "must map keys to values".to_string())),
    }
}

impl Document<'_> {
    /// A Secret: checked here, used by the `passwordSecret`s that name it (see
    /// [`SecretIndex`]).
    pub(super) fn secret(&mut self, top: &Mapping) {
        let name = top.get("metadata").and_then(|m| m.get("name")).and_then(Value::as_str);
        self.name = name.unwrap_or_default().to_string();
        if let Some(key) = top
            .keys()
            .filter_map(Value::as_str)
            .find(|k| !SECRET_FIELDS.contains(k) && *k != "metadata")
        {
            self.fail(
                key,
                format!(
                    "unknown top-level field `{key}` of a Secret; expected type, data, stringData"
                ),
            );
            return;
        }
        if let Err((field, message)) = read_secret(top) {
            self.fail(&field, message);
        }
    }

    /// Replaces a neighbor's `passwordSecret` by the `password` it names. `field` is the
    /// neighbor's path in the manifest, for messages. An empty reference (`{}` or no name, as
    /// Go clients write the unset struct) means none.
    pub(super) fn resolve_password_secret(
        &mut self,
        neighbor: &mut Mapping,
        field: &str,
        context: &Context<'_>,
    ) -> Option<()> {
        let Some(reference) = neighbor.remove("passwordSecret") else { return Some(()) };
        let field = format!("{field}.passwordSecret");
        let (name, namespace) = match &reference {
            Value::Null => return Some(()),
            Value::Mapping(map) => {
                let text = |key: &str| map.get(key).and_then(Value::as_str).map(str::to_string);
                if let Some(other) =
                    map.keys().filter_map(Value::as_str).find(|k| *k != "name" && *k != "namespace")
                {
                    self.fail(
                        &format!("{field}.{other}"),
                        "unknown field; expected name, namespace",
                    );
                    return None;
                }
                (text("name").unwrap_or_default(), text("namespace").filter(|n| !n.is_empty()))
            }
            _ => {
                self.fail(&field, "must be a mapping with name (and namespace)");
                return None;
            }
        };
        if name.is_empty() {
            return Some(());
        }
        if neighbor.get("password").is_some_and(|p| p.as_str().is_some_and(|p| !p.is_empty())) {
            self.fail(&field, "set either password or passwordSecret, not both");
            return None;
        }
        match context.password(&name, namespace.as_deref()) {
            Ok(password) => {
                neighbor.insert(Value::from("password"), Value::from(password));
                Some(())
            }
            Err(message) => {
                self.fail(&format!("{field}.name"), message);
                None
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn index(yaml: &str) -> SecretIndex {
        let values: Vec<Value> = serde_norway::Deserializer::from_str(yaml)
            .map(|d| serde::Deserialize::deserialize(d).unwrap())
            .collect();
        let read: Vec<(String, SecretEntry)> = values
            .iter()
            .filter_map(|v| v.as_mapping())
            .filter_map(|top| read_secret(top).ok())
            .collect();
        SecretIndex::of(read.iter().map(|(name, entry)| (name, entry)))
    }

    const BASIC: &str = "apiVersion: v1\nkind: Secret\nmetadata: {name: tor, namespace: metallb-system}\ntype: kubernetes.io/basic-auth\n";

    #[test]
    fn data_is_base64_and_string_data_wins() {
        let secrets = index(&format!("{BASIC}data: {{password: czNjcmV0}}\n"));
        assert_eq!(secrets.password("tor", None).unwrap(), "s3cret");
        assert_eq!(secrets.password("tor", Some("metallb-system")).unwrap(), "s3cret");
        let both = index(&format!(
            "{BASIC}data: {{password: czNjcmV0}}\nstringData: {{password: other}}\n"
        ));
        assert_eq!(both.password("tor", None).unwrap(), "other");
    }

    #[test]
    fn upstream_rules_are_kept_and_messages_hold_no_key() {
        let secrets = index(&format!("{BASIC}data: {{username: YQ==}}\n"));
        let error = secrets.password("tor", None).unwrap_err();
        assert!(error.contains("no `password` key"), "{error}");
        let opaque = index("kind: Secret\nmetadata: {name: tor}\nstringData: {password: s3cret}\n");
        let error = opaque.password("tor", None).unwrap_err();
        assert!(error.contains("expected kubernetes.io/basic-auth") && !error.contains("s3cret"));
        let error = secrets.password("tor", Some("other")).unwrap_err();
        assert!(error.contains("not found"), "{error}");
        assert!(secrets.password("missing", None).unwrap_err().contains("\"missing\" not found"));
    }
}
