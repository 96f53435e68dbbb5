//! BGP communities as written in config files.
//!
//! - standard (RFC 1997): `"65000:100"`, each half 0..=65535;
//! - large (RFC 8092): `"large:1:2:3"`, each part 0..=4294967295;
//! - well-known names, case-insensitive: `no-export`, `no-advertise`, `no-export-subconfed`
//!   (RFC 1997), `no-peer` (RFC 3765), `blackhole` (RFC 7999), `graceful-shutdown` (RFC 8326).

use std::fmt;
use std::str::FromStr;

/// One community value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Community {
    /// RFC 1997 community: high 16 bits are the AS, low 16 bits the value.
    Standard(u32),
    /// RFC 8092 large community: global administrator, local data 1, local data 2.
    Large(u32, u32, u32),
}

/// Well-known communities and their names.
const WELL_KNOWN: [(&str, u32); 6] = [
    // RFC 8326 §5: GRACEFUL_SHUTDOWN.
    ("graceful-shutdown", 0xFFFF_0000),
    // RFC 7999 §5: BLACKHOLE.
    ("blackhole", 0xFFFF_029A),
    // RFC 1997: NO_EXPORT, NO_ADVERTISE, NO_EXPORT_SUBCONFED.
    ("no-export", 0xFFFF_FF01),
    ("no-advertise", 0xFFFF_FF02),
    ("no-export-subconfed", 0xFFFF_FF03),
    // RFC 3765 §3: NOPEER.
    ("no-peer", 0xFFFF_FF04),
];

/// Why a community string was rejected. The `Display` text says what would be valid.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommunityError {
    text: String,
    reason: String,
}

impl fmt::Display for CommunityError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            r#"invalid community "{}": {}; valid forms are "65000:100" (each half 0..=65535), "large:1:2:3" (each part 0..=4294967295) or one of {}"#,
            self.text,
            self.reason,
            WELL_KNOWN.iter().map(|(name, _)| *name).collect::<Vec<_>>().join(", ")
        )
    }
}

impl std::error::Error for CommunityError {}

impl FromStr for Community {
    type Err = CommunityError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let fail =
            |reason: &str| CommunityError { text: text.to_string(), reason: reason.to_string() };
        let lower = text.to_ascii_lowercase();
        if let Some((_, value)) = WELL_KNOWN.iter().find(|(name, _)| *name == lower) {
            return Ok(Self::Standard(*value));
        }
        if let Some(rest) = lower.strip_prefix("large:") {
            let parts: Vec<&str> = rest.split(':').collect();
            let [global, data1, data2] = parts.as_slice() else {
                return Err(fail("a large community has exactly three parts after \"large:\""));
            };
            let part = |s: &str| {
                s.parse::<u32>().map_err(|_| fail(&format!("\"{s}\" is not 0..=4294967295")))
            };
            return Ok(Self::Large(part(global)?, part(data1)?, part(data2)?));
        }
        let parts: Vec<&str> = text.split(':').collect();
        match parts.as_slice() {
            [high, low] => {
                let half = |s: &str| {
                    s.parse::<u16>().map_err(|_| fail(&format!("\"{s}\" is not 0..=65535")))
                };
                let value = (u32::from(half(high)?) << 16) | u32::from(half(low)?);
                Ok(Self::Standard(value))
            }
            [_, _, _] => {
                Err(fail(&format!("three numbers make a large community; write \"large:{text}\"")))
            }
            _ => Err(fail("not a known form")),
        }
    }
}

impl fmt::Display for Community {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Standard(value) => match WELL_KNOWN.iter().find(|(_, known)| known == value) {
                Some((name, _)) => f.write_str(name),
                None => write!(f, "{}:{}", value >> 16, value & 0xFFFF),
            },
            Self::Large(global, data1, data2) => write!(f, "large:{global}:{data1}:{data2}"),
        }
    }
}

/// Serialised as the config-file text, so `show running-config --json` reads like the input.
impl serde::Serialize for Community {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_valid_communities() {
        let table: &[(&str, Community)] = &[
            ("65000:100", Community::Standard((65000 << 16) | 100)),
            ("0:0", Community::Standard(0)),
            ("65535:65535", Community::Standard(u32::MAX)),
            ("large:1:2:3", Community::Large(1, 2, 3)),
            ("LARGE:4294967295:0:7", Community::Large(u32::MAX, 0, 7)),
            ("no-export", Community::Standard(0xFFFF_FF01)),
            ("No-Advertise", Community::Standard(0xFFFF_FF02)),
            ("no-export-subconfed", Community::Standard(0xFFFF_FF03)),
            ("NO-PEER", Community::Standard(0xFFFF_FF04)),
            ("blackhole", Community::Standard(0xFFFF_029A)),
            ("graceful-shutdown", Community::Standard(0xFFFF_0000)),
        ];
        for (text, expected) in table {
            assert_eq!(text.parse::<Community>(), Ok(*expected), "{text}");
        }
    }

    #[test]
    fn rejects_invalid_communities_with_reason() {
        let table: &[(&str, &str)] = &[
            ("65536:1", r#""65536" is not 0..=65535"#),
            ("1:-1", r#""-1" is not 0..=65535"#),
            ("65000", "not a known form"),
            ("", "not a known form"),
            ("1:2:3", r#"write "large:1:2:3""#),
            ("large:1:2", "exactly three parts"),
            ("large:1:2:4294967296", r#""4294967296" is not 0..=4294967295"#),
            ("no-exports", "not a known form"),
        ];
        for (text, reason) in table {
            let message = text.parse::<Community>().unwrap_err().to_string();
            assert!(message.contains(reason), "{text:?}: {message}");
            assert!(message.contains(r#"valid forms are "65000:100""#), "{message}");
            assert!(message.contains("graceful-shutdown"), "{message}");
        }
    }

    #[test]
    fn displays_as_config_text() {
        for text in ["65000:100", "large:1:2:3", "no-export", "blackhole", "graceful-shutdown"] {
            assert_eq!(text.parse::<Community>().unwrap().to_string(), text);
        }
        assert_eq!(serde_json::to_string(&Community::Large(1, 2, 3)).unwrap(), r#""large:1:2:3""#);
    }
}
