//! Human-readable durations in config files: `"90s"`, `"300ms"`, `"1m"`, `"1m30s"`, `"2h"`.
//!
//! A duration is one or more `<digits><unit>` groups with units `h`, `m`, `s` and `ms`, largest
//! unit first, each unit at most once. Bare numbers are rejected because they are ambiguous
//! (seconds for BGP timers, milliseconds for BFD intervals); the error says what to write instead.

use std::fmt;
use std::time::Duration;

/// Why a duration string was rejected. The `Display` text says what would be valid.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DurationError {
    /// The string is empty or only whitespace.
    Empty,
    /// Digits with no unit after them, e.g. `"90"`.
    MissingUnit { number: String },
    /// A unit we do not know, e.g. `"5d"`.
    UnknownUnit { unit: String },
    /// A character that is neither a digit nor a unit letter, e.g. `"1.5s"` or `"-3s"`.
    UnexpectedChar { found: char },
    /// Units out of order or repeated, e.g. `"30s1m"` or `"1s1s"`.
    UnitOrder { unit: String },
    /// The value does not fit in a `Duration`.
    Overflow,
}

const EXAMPLES: &str = r#"e.g. "90s", "300ms", "1m30s""#;

impl fmt::Display for DurationError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Empty => write!(
                f,
                "empty duration; write a number followed by a unit (h, m, s, ms), {EXAMPLES}"
            ),
            Self::MissingUnit { number } => {
                write!(f, r#""{number}" has no unit; write "{number}s" or "{number}ms""#)
            }
            Self::UnknownUnit { unit } => {
                write!(f, r#"unknown unit "{unit}"; valid units are h, m, s and ms, {EXAMPLES}"#)
            }
            Self::UnexpectedChar { found: '.' } => {
                write!(
                    f,
                    r#"fractions are not allowed; use a smaller unit, e.g. "1500ms" instead of "1.5s""#
                )
            }
            Self::UnexpectedChar { found } => write!(
                f,
                r#"unexpected character '{found}'; write digits followed by a unit (h, m, s, ms), {EXAMPLES}"#
            ),
            Self::UnitOrder { unit } => write!(
                f,
                r#"unit "{unit}" is repeated or out of order; write units from largest to smallest, each once, e.g. "1m30s""#
            ),
            Self::Overflow => write!(f, "duration is too large"),
        }
    }
}

impl std::error::Error for DurationError {}

/// Units, largest first; the index doubles as the ordering rank.
const UNITS: [(&str, Duration); 4] = [
    ("h", Duration::from_secs(3600)),
    ("m", Duration::from_secs(60)),
    ("s", Duration::from_secs(1)),
    ("ms", Duration::from_millis(1)),
];

/// Parses `"1m30s"`-style text into a `Duration`.
pub fn parse_duration(text: &str) -> Result<Duration, DurationError> {
    if text.trim().is_empty() {
        return Err(DurationError::Empty);
    }
    let mut rest = text;
    let mut total = Duration::ZERO;
    // Rank of the previous unit; the next one must be strictly smaller (larger index).
    let mut previous_rank: Option<usize> = None;
    while !rest.is_empty() {
        let digits_end = rest.find(|c: char| !c.is_ascii_digit()).unwrap_or(rest.len());
        let (digits, after_digits) =
            rest.split_at_checked(digits_end).ok_or(DurationError::Overflow)?;
        if digits.is_empty() {
            let found = after_digits.chars().next().unwrap_or(' ');
            return Err(DurationError::UnexpectedChar { found });
        }
        let unit_end =
            after_digits.find(|c: char| !c.is_ascii_alphabetic()).unwrap_or(after_digits.len());
        let (unit, after_unit) =
            after_digits.split_at_checked(unit_end).ok_or(DurationError::Overflow)?;
        if unit.is_empty() {
            if let Some(found) = after_unit.chars().next() {
                return Err(DurationError::UnexpectedChar { found });
            }
            return Err(DurationError::MissingUnit { number: digits.to_string() });
        }
        let (rank, scale) = UNITS
            .iter()
            .enumerate()
            .find(|(_, (name, _))| *name == unit)
            .map(|(rank, (_, scale))| (rank, *scale))
            .ok_or_else(|| DurationError::UnknownUnit { unit: unit.to_string() })?;
        if previous_rank.is_some_and(|previous| rank <= previous) {
            return Err(DurationError::UnitOrder { unit: unit.to_string() });
        }
        previous_rank = Some(rank);
        let count: u32 = digits.parse().map_err(|_| DurationError::Overflow)?;
        let part = scale.checked_mul(count).ok_or(DurationError::Overflow)?;
        total = total.checked_add(part).ok_or(DurationError::Overflow)?;
        rest = after_unit;
    }
    Ok(total)
}

/// Formats a duration the way it would be written in a config file (`"1m30s"`, `"300ms"`,
/// `"0s"`), so that `parse_duration(&format_duration(d)) == Ok(d)` for millisecond-precision
/// durations. Sub-millisecond remainders are dropped.
pub fn format_duration(duration: Duration) -> String {
    let mut millis = duration.as_millis();
    if millis == 0 {
        return "0s".to_string();
    }
    let mut out = String::new();
    for (name, scale) in UNITS {
        let unit_millis = scale.as_millis();
        let count = millis.checked_div(unit_millis).unwrap_or(0);
        if count > 0 {
            out.push_str(&format!("{count}{name}"));
            millis = millis.checked_rem(unit_millis).unwrap_or(0);
        }
    }
    out
}

/// Parses a duration as Kubernetes manifests write it (`metav1.Duration`, Go's
/// `time.ParseDuration`): a sequence of decimal numbers, each with an optional fraction and a
/// unit (`ns`, `us`/`µs`, `ms`, `s`, `m`, `h`), in any order, e.g. `"1.5s"`, `"1m30s"`,
/// `"300ms"`; `"0"` alone. A negative duration means nothing here and is refused. Used where a
/// manifest's duration becomes a config duration (millisecond precision, `format_duration`).
pub fn parse_go_duration(text: &str) -> Result<Duration, String> {
    const EXAMPLE: &str = r#"write e.g. "90s", "1m30s" or "1.5s" (Go's time.ParseDuration)"#;
    let body = text.strip_prefix('+').unwrap_or(text);
    if body.starts_with('-') {
        return Err(format!("\"{text}\": a negative duration is not allowed"));
    }
    if body == "0" {
        return Ok(Duration::ZERO);
    }
    if body.is_empty() {
        return Err(format!("empty duration; {EXAMPLE}"));
    }
    let mut rest = body;
    let mut nanos: u128 = 0;
    while !rest.is_empty() {
        let number_len = rest.find(|c: char| !c.is_ascii_digit() && c != '.').unwrap_or(rest.len());
        let (number, tail) = rest.split_at(number_len);
        let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
        if whole.is_empty() && fraction.is_empty() || fraction.contains('.') {
            return Err(format!("\"{text}\" is not a duration; {EXAMPLE}"));
        }
        let unit_len = tail.find(|c: char| c.is_ascii_digit() || c == '.').unwrap_or(tail.len());
        let (unit, next) = tail.split_at(unit_len);
        let scale: u128 = match unit {
            "ns" => 1,
            "us" | "µs" | "μs" => 1_000,
            "ms" => 1_000_000,
            "s" => 1_000_000_000,
            "m" => 60_000_000_000,
            "h" => 3_600_000_000_000,
            "" => return Err(format!("\"{text}\": \"{number}\" has no unit; {EXAMPLE}")),
            other => {
                return Err(format!(
                    "\"{text}\": unknown unit \"{other}\" (ns, us, ms, s, m, h); {EXAMPLE}"
                ))
            }
        };
        let too_large = || format!("\"{text}\" is too large");
        let whole: u128 =
            if whole.is_empty() { 0 } else { whole.parse().map_err(|_| too_large())? };
        // Digits past the nanosecond add nothing (Go drops them too).
        let fraction = fraction.get(..fraction.len().min(18)).unwrap_or("");
        let fraction_nanos = if fraction.is_empty() {
            0
        } else {
            let digits: u128 = fraction.parse().map_err(|_| too_large())?;
            let divisor = 10u128.checked_pow(u32::try_from(fraction.len()).unwrap_or(u32::MAX));
            digits.checked_mul(scale).and_then(|v| v.checked_div(divisor?)).ok_or_else(too_large)?
        };
        nanos = whole
            .checked_mul(scale)
            .and_then(|v| v.checked_add(fraction_nanos))
            .and_then(|v| v.checked_add(nanos))
            .ok_or_else(too_large)?;
        rest = next;
    }
    let secs =
        u64::try_from(nanos / 1_000_000_000).map_err(|_| format!("\"{text}\" is too large"))?;
    let subsec = u32::try_from(nanos % 1_000_000_000).unwrap_or(0);
    Ok(Duration::new(secs, subsec))
}

/// The hint for a bare TOML number where a duration string was expected.
pub fn bare_number_hint(number: &str) -> String {
    format!(
        r#"a bare number is ambiguous here; write a duration string such as "{number}s" or "{number}ms""#
    )
}

/// `serialize_with` helper: durations appear in JSON the way they are written in the config.
pub fn serialize<S: serde::Serializer>(
    duration: &Duration,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    serializer.serialize_str(&format_duration(*duration))
}

/// An optional duration as text, or `null`.
pub fn serialize_option<S: serde::Serializer>(
    duration: &Option<Duration>,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    match duration {
        Some(d) => serializer.serialize_str(&format_duration(*d)),
        None => serializer.serialize_none(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_durations_as_kubernetes_writes_them() {
        let ms = Duration::from_millis;
        for (text, want) in [
            ("90s", ms(90_000)),
            ("1m30s", ms(90_000)),
            ("1.5s", ms(1_500)),
            ("300ms", ms(300)),
            ("1h2m3.5s", ms(3_723_500)),
            ("30s1m", ms(90_000)),
            (".5s", ms(500)),
            ("2.s", ms(2_000)),
            ("1500us", ms(1) + Duration::from_micros(500)),
            ("250µs", Duration::from_micros(250)),
            ("0", Duration::ZERO),
            ("+5s", ms(5_000)),
        ] {
            assert_eq!(parse_go_duration(text), Ok(want), "{text}");
        }
        for (text, says) in [
            ("", "empty"),
            ("-5s", "negative"),
            ("90", "has no unit"),
            ("5d", "unknown unit \"d\""),
            (".s", "not a duration"),
            ("1.2.3s", "not a duration"),
            ("99999999999999999999999999999999999999999h", "too large"),
        ] {
            let error = parse_go_duration(text).expect_err(text);
            assert!(error.contains(says), "{text}: {error}");
        }
    }

    #[test]
    fn parses_valid_durations() {
        let table: &[(&str, Duration)] = &[
            ("0s", Duration::ZERO),
            ("90s", Duration::from_secs(90)),
            ("300ms", Duration::from_millis(300)),
            ("1m", Duration::from_secs(60)),
            ("1m30s", Duration::from_secs(90)),
            ("2h", Duration::from_secs(7200)),
            ("1h2m3s4ms", Duration::from_millis(3_723_004)),
            ("65535s", Duration::from_secs(65535)),
            ("007s", Duration::from_secs(7)),
        ];
        for (text, expected) in table {
            assert_eq!(parse_duration(text), Ok(*expected), "{text}");
        }
    }

    #[test]
    fn rejects_invalid_durations_with_reason() {
        let table: &[(&str, DurationError)] = &[
            ("", DurationError::Empty),
            ("  ", DurationError::Empty),
            ("90", DurationError::MissingUnit { number: "90".into() }),
            ("1m30", DurationError::MissingUnit { number: "30".into() }),
            ("5d", DurationError::UnknownUnit { unit: "d".into() }),
            ("5sec", DurationError::UnknownUnit { unit: "sec".into() }),
            ("1.5s", DurationError::UnexpectedChar { found: '.' }),
            ("-3s", DurationError::UnexpectedChar { found: '-' }),
            ("s", DurationError::UnexpectedChar { found: 's' }),
            ("9 s", DurationError::UnexpectedChar { found: ' ' }),
            ("30s1m", DurationError::UnitOrder { unit: "m".into() }),
            ("1s1s", DurationError::UnitOrder { unit: "s".into() }),
            ("99999999999h", DurationError::Overflow),
        ];
        for (text, expected) in table {
            assert_eq!(parse_duration(text).as_ref(), Err(expected), "{text:?}");
        }
    }

    #[test]
    fn error_messages_say_what_is_valid() {
        assert_eq!(
            parse_duration("90").unwrap_err().to_string(),
            r#""90" has no unit; write "90s" or "90ms""#
        );
        assert!(parse_duration("1.5s").unwrap_err().to_string().contains(r#""1500ms""#));
        assert!(bare_number_hint("90").contains(r#"write a duration string such as "90s""#));
    }

    #[test]
    fn formats_round_trip() {
        let table: &[(Duration, &str)] = &[
            (Duration::ZERO, "0s"),
            (Duration::from_millis(300), "300ms"),
            (Duration::from_secs(90), "1m30s"),
            (Duration::from_secs(3600), "1h"),
            (Duration::from_millis(3_723_004), "1h2m3s4ms"),
        ];
        for (duration, text) in table {
            assert_eq!(format_duration(*duration), *text);
            assert_eq!(parse_duration(text), Ok(*duration));
        }
    }
}
