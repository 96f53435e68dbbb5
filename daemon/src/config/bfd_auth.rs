//! `authentication` of a `[[bgp.bfd_profiles]]` entry (RFC 5880 §6.7): the type, the key ID
//! and the key, given inline as `password` or read from `password_file` like a neighbor's
//! TCP-MD5 key.
//!
//! ```toml
//! [[bgp.bfd_profiles]]
//! name = "tor"
//! authentication = { type = "meticulous-keyed-sha1", key_id = 1, password_file = "bfd.key" }
//! ```

use std::path::Path;

use serde::{Deserialize, Serialize};

use super::error::ConfigError;
use super::model::Password;
use super::raw::S;
use super::source::SourceText;

/// The key ID used when the file leaves it out: BIRD numbers a profile's first password 1.
pub(crate) const DEFAULT_KEY_ID: u8 = 1;

/// RFC 5880 §4.1 Auth Types 2-5. Simple Password (1) is left out on purpose: it puts the key
/// on the wire in clear.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum BfdAuthType {
    KeyedMd5,
    MeticulousKeyedMd5,
    KeyedSha1,
    MeticulousKeyedSha1,
}

const TYPES: [(&str, BfdAuthType); 4] = [
    ("keyed-md5", BfdAuthType::KeyedMd5),
    ("meticulous-keyed-md5", BfdAuthType::MeticulousKeyedMd5),
    ("keyed-sha1", BfdAuthType::KeyedSha1),
    ("meticulous-keyed-sha1", BfdAuthType::MeticulousKeyedSha1),
];

impl BfdAuthType {
    /// The name written in the config.
    pub fn name(self) -> &'static str {
        TYPES.iter().find(|(_, t)| *t == self).map_or("", |(name, _)| name)
    }

    /// RFC 5880 §4.3 / §4.4: the key is padded to the digest's length (16 octets for MD5, 20
    /// for SHA1), so it can be no longer.
    pub fn max_key_len(self) -> usize {
        match self {
            BfdAuthType::KeyedMd5 | BfdAuthType::MeticulousKeyedMd5 => 16,
            BfdAuthType::KeyedSha1 | BfdAuthType::MeticulousKeyedSha1 => 20,
        }
    }
}

/// A BFD profile's authentication. The key is a [`Password`], never printed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct BfdAuthentication {
    #[serde(rename = "type")]
    pub auth_type: BfdAuthType,
    pub key_id: u8,
    pub password: Password,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, expecting = "a table { type, key_id, password or password_file }")]
pub(crate) struct RawBfdAuthentication {
    #[serde(rename = "type")]
    pub auth_type: S<String>,
    pub key_id: Option<S<i64>>,
    pub password: Option<S<String>>,
    pub password_file: Option<S<String>>,
}

/// Checks `raw` (at `field`, e.g. `bgp.bfd_profiles[0].authentication`); every problem goes to
/// `errors`, and `None` comes back unless all is well.
pub(crate) fn validate(
    source: &SourceText<'_>,
    raw: &S<RawBfdAuthentication>,
    field: &str,
    errors: &mut Vec<ConfigError>,
) -> Option<BfdAuthentication> {
    let raw = raw.get_ref();
    let mut fail = |span: &std::ops::Range<usize>, name: &str, message: String| {
        errors.push(source.error_at(span, format!("{field}.{name}"), message));
    };
    let written = raw.auth_type.get_ref().as_str();
    let auth_type = TYPES.iter().find(|(name, _)| *name == written).map(|(_, t)| *t);
    if auth_type.is_none() {
        let valid = TYPES.iter().map(|(name, _)| format!("\"{name}\"")).collect::<Vec<_>>();
        let why = if written == "simple" || written == "simple-password" {
            "simple password authentication sends the key in clear and is not supported; "
        } else {
            ""
        };
        fail(
            &raw.auth_type.span(),
            "type",
            format!(
                "\"{written}\" is not a BFD authentication type; {why}valid types are {}",
                valid.join(", ")
            ),
        );
    }
    let key_id = match &raw.key_id {
        None => Some(DEFAULT_KEY_ID),
        Some(id) => {
            let value = *id.get_ref();
            let ok = u8::try_from(value).ok();
            if ok.is_none() {
                fail(
                    &id.span(),
                    "key_id",
                    format!("{value} is out of range: the Auth Key ID is one octet, 0..=255 (RFC 5880 §4.3)"),
                );
            }
            ok
        }
    };
    let key = match (&raw.password, &raw.password_file) {
        (Some(_), Some(file)) => {
            fail(
                &file.span(),
                "password_file",
                "set either password or password_file, not both".into(),
            );
            None
        }
        (Some(password), None) => Some((password.get_ref().clone(), password.span(), "password")),
        (None, Some(file)) => {
            let dir = source.path.parent().unwrap_or(Path::new("."));
            let path = dir.join(file.get_ref());
            match source.read_secret_file(&path) {
                Ok(text) => Some((one_line(&text).to_string(), file.span(), "password_file")),
                Err(error) => {
                    fail(
                        &file.span(),
                        "password_file",
                        format!("{error}; point it at a readable file holding the BFD key"),
                    );
                    None
                }
            }
        }
        (None, None) => {
            errors.push(source.error_at(
                &raw.auth_type.span(),
                field,
                "BFD authentication needs a key: add password = \"...\" or password_file = \"...\"",
            ));
            None
        }
    };
    let (key, span, key_field) = key?;
    let auth_type = auth_type?;
    let mut fail = |message: String| {
        errors.push(source.error_at(&span, format!("{field}.{key_field}"), message));
    };
    if key.is_empty() {
        fail("the BFD key is empty; remove `authentication` to run without it".into());
        return None;
    }
    if key.len() > auth_type.max_key_len() {
        fail(format!(
            "the BFD key is {} bytes; {} keys are at most {} bytes (RFC 5880 §4.{}: the key fills the {}-octet digest field)",
            key.len(),
            auth_type.name(),
            auth_type.max_key_len(),
            if auth_type.max_key_len() == 16 { 3 } else { 4 },
            auth_type.max_key_len(),
        ));
        return None;
    }
    Some(BfdAuthentication { auth_type, key_id: key_id?, password: Password::new(key) })
}

/// How two profiles' authentication differ, for a merge conflict: type and key ID, never the
/// key itself.
pub(crate) fn difference(
    this: Option<&BfdAuthentication>,
    that: Option<&BfdAuthentication>,
) -> String {
    let describe = |auth: Option<&BfdAuthentication>| match auth {
        None => "none".to_string(),
        Some(auth) => format!("{} key ID {}", auth.auth_type.name(), auth.key_id),
    };
    if describe(this) == describe(that) {
        "authentication with a different key".to_string()
    } else {
        format!("authentication {} vs {}", describe(this), describe(that))
    }
}

/// A key file's text without one trailing newline (as for `password_file` of neighbors).
fn one_line(text: &str) -> &str {
    text.strip_suffix('\n').map(|k| k.strip_suffix('\r').unwrap_or(k)).unwrap_or(text)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::load_str;

    fn profile(auth: &str) -> String {
        format!("[[bgp.bfd_profiles]]\nname = \"p\"\nauthentication = {auth}\n")
    }

    fn error(text: &str) -> ConfigError {
        let errors = load_str("t.toml", text).expect_err("should be rejected").0;
        assert_eq!(errors.len(), 1, "{errors:#?}");
        errors.into_iter().next().unwrap()
    }

    fn assert_error(auth: &str, column: usize, field: &str, part: &str) {
        let e = error(&profile(auth));
        assert_eq!(
            (e.line, e.column, e.field.as_str()),
            (3, column, format!("bgp.bfd_profiles[0].authentication{field}").as_str()),
            "{e}"
        );
        assert!(e.message.contains(part), "{:?} should contain {part:?}", e.message);
    }

    #[test]
    fn every_type_with_an_inline_key() {
        for (name, auth_type) in TYPES {
            let text =
                profile(&format!("{{ type = \"{name}\", key_id = 7, password = \"s3cret\" }}"));
            let config = load_str("t.toml", &text).unwrap();
            let auth = config.bgp.bfd_profiles[0].authentication.clone().unwrap();
            assert_eq!(
                (auth.auth_type, auth.key_id, auth.password.expose()),
                (auth_type, 7, "s3cret")
            );
            assert_eq!(auth_type.name(), name);
        }
        // key_id defaults to 1, as BIRD numbers its first password.
        let text = profile("{ type = \"keyed-md5\", password = \"k\" }");
        let config = load_str("t.toml", &text).unwrap();
        assert_eq!(config.bgp.bfd_profiles[0].authentication.as_ref().unwrap().key_id, 1);
        // The key never reaches `show running-config`.
        let json = serde_json::to_string(&config.bgp.bfd_profiles[0]).unwrap();
        assert!(
            json.contains(
                r#""authentication":{"type":"keyed-md5","key_id":1,"password":"<redacted>"}"#
            ),
            "{json}"
        );
    }

    #[test]
    fn password_file_is_read_relative_to_the_config_file() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("bfd.key"), "from-file\n").unwrap();
        let main = dir.path().join("uplink.toml");
        let text = profile("{ type = \"meticulous-keyed-sha1\", password_file = \"bfd.key\" }");
        std::fs::write(&main, &text).unwrap();
        let config = crate::config::load(&main).unwrap();
        let auth = config.bgp.bfd_profiles[0].authentication.clone().unwrap();
        assert_eq!(auth.password.expose(), "from-file");
        std::fs::write(&main, text.replace("bfd.key", "missing.key")).unwrap();
        let errors = crate::config::load(&main).unwrap_err().0;
        assert_eq!(errors.len(), 1, "{errors:#?}");
        assert_eq!(
            (errors[0].line, errors[0].column, errors[0].field.as_str()),
            (3, 68, "bgp.bfd_profiles[0].authentication.password_file")
        );
        assert!(errors[0].message.contains("cannot read"), "{}", errors[0]);
    }

    #[test]
    fn bad_values_name_their_field() {
        assert_error(
            "{ type = \"simple\", password = \"k\" }",
            27,
            ".type",
            "sends the key in clear",
        );
        assert_error("{ type = \"sha256\", password = \"k\" }", 27, ".type", "\"keyed-sha1\"");
        assert_error(
            "{ type = \"keyed-sha1\", key_id = 256, password = \"k\" }",
            50,
            ".key_id",
            "0..=255",
        );
        assert_error(
            "{ type = \"keyed-md5\", password = \"seventeen-bytes!!\" }",
            51,
            ".password",
            "keyed-md5 keys are at most 16 bytes",
        );
        assert_error(
            &format!("{{ type = \"keyed-sha1\", password = \"{}\" }}", "x".repeat(21)),
            52,
            ".password",
            "at most 20 bytes",
        );
        assert_error("{ type = \"keyed-sha1\", password = \"\" }", 52, ".password", "empty");
        assert_error("{ type = \"keyed-sha1\" }", 27, "", "needs a key");
        assert_error(
            "{ type = \"keyed-sha1\", password = \"a\", password_file = \"f\" }",
            73,
            ".password_file",
            "not both",
        );
        let e = error(&profile("{ type = \"keyed-sha1\", password = \"a\", key = 1 }"));
        assert_eq!(
            (e.line, e.field.as_str()),
            (3, "bgp.bfd_profiles[0].authentication.key"),
            "{e}"
        );
        assert!(e.message.contains("unknown field `key`"), "{e}");
    }

    #[test]
    fn profiles_that_differ_only_in_the_key_conflict_without_showing_it() {
        let dir = tempfile::tempdir().unwrap();
        let main = dir.path().join("uplink.toml");
        std::fs::write(&main, profile("{ type = \"keyed-sha1\", password = \"first-key\" }"))
            .unwrap();
        let fragments = dir.path().join("conf.d");
        std::fs::create_dir(&fragments).unwrap();
        std::fs::write(
            fragments.join("b.toml"),
            profile("{ type = \"keyed-sha1\", password = \"second-key\" }"),
        )
        .unwrap();
        let errors = crate::config::load(&main).unwrap_err().0;
        let text = errors.iter().map(ToString::to_string).collect::<Vec<_>>().join("\n");
        assert!(text.contains("authentication"), "{text}");
        assert!(!text.contains("first-key") && !text.contains("second-key"), "{text}");
    }
}
