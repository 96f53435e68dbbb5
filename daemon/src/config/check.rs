//! The scalar checks every section of a config file uses: numbers in range, addresses,
//! prefixes, names, durations. One implementation, so one value is judged — and explained —
//! the same way wherever it is written.
//!
//! A check that fails records a [`ConfigError`] at the value's position and returns `None`;
//! the caller leaves the value out and goes on, so every problem in a file is reported at once.

use std::net::{IpAddr, SocketAddr};
use std::ops::RangeInclusive;
use std::path::Path;
use std::str::FromStr;
use std::time::Duration;

use ipnet::IpNet;

use super::duration::{bare_number_hint, format_duration, parse_duration};
use super::error::{ConfigError, Loc};
use super::model::MetricNamespaces;
use super::raw::{RawDuration, S};
use super::source::SourceText;

/// RFC 6793 §9: AS_TRANS is reserved for 2-octet AS speakers and never configured.
const AS_TRANS: i64 = 23456;

/// Checks values of one file and collects what is wrong with them.
pub(crate) struct Checker<'s, 'e> {
    pub source: &'s SourceText<'s>,
    pub errors: &'e mut Vec<ConfigError>,
}

impl<'s, 'e> Checker<'s, 'e> {
    pub fn new(source: &'s SourceText<'s>, errors: &'e mut Vec<ConfigError>) -> Self {
        Self { source, errors }
    }

    /// Records an error at `value`.
    pub fn fail<T>(&mut self, value: &S<T>, field: &str, message: impl Into<String>) {
        self.errors.push(self.source.error_at(&value.span(), field, message));
    }

    pub fn loc<T>(&self, value: &S<T>) -> Loc {
        self.source.loc(value.span().start)
    }

    /// The directory of the file being checked: relative paths in it start there.
    pub fn file_dir(&self) -> &Path {
        self.source.path.parent().unwrap_or(Path::new("."))
    }

    /// A name: not empty once surrounding spaces are removed.
    pub fn name(&mut self, value: &S<String>, field: &str) -> Option<String> {
        let name = value.get_ref().trim();
        if name.is_empty() {
            self.fail(value, field, "must not be empty");
            return None;
        }
        Some(name.to_string())
    }

    /// An integer in `range`; `what` names the unit ("TCP port", "AS number").
    pub fn int_in<T: TryFrom<i64>>(
        &mut self,
        value: &S<i64>,
        field: &str,
        range: RangeInclusive<i64>,
        what: &str,
    ) -> Option<T> {
        let number = *value.get_ref();
        self.int_as(
            value,
            number,
            field,
            range.clone(),
            &format!("{what} in {}..={}", range.start(), range.end()),
        )
    }

    /// Checks `number` (written at `value`, maybe as part of another type) is in `range`;
    /// `valid` describes what would be valid.
    pub fn int_as<T: TryFrom<i64>, V>(
        &mut self,
        value: &S<V>,
        number: i64,
        field: &str,
        range: RangeInclusive<i64>,
        valid: &str,
    ) -> Option<T> {
        if !range.contains(&number) {
            self.fail(value, field, format!("{number} is out of range; expected {valid}"));
            return None;
        }
        T::try_from(number).ok()
    }

    /// RFC 6793: four-octet AS numbers; 0 is reserved (RFC 7607) and AS_TRANS is not
    /// configurable.
    pub fn asn(&mut self, value: &S<i64>, field: &str) -> Option<u32> {
        let asn = *value.get_ref();
        if asn == AS_TRANS {
            self.fail(value, field, "23456 is AS_TRANS, reserved for 2-octet AS speakers (RFC 6793 §9); use your real AS number, 1..=4294967295");
            return None;
        }
        if asn == 0 {
            self.fail(
                value,
                field,
                "AS 0 is reserved (RFC 7607); valid AS numbers are 1..=4294967295",
            );
            return None;
        }
        self.int_in::<u32>(value, field, 1..=i64::from(u32::MAX), "AS number")
    }

    /// An IPv4 or IPv6 address.
    pub fn ip(&mut self, value: &S<String>, field: &str) -> Option<IpAddr> {
        let text = value.get_ref().trim();
        match IpAddr::from_str(text) {
            Ok(address) => Some(address),
            Err(_) => {
                self.fail(
                    value,
                    field,
                    format!(
                        "\"{text}\" is not an IP address; write e.g. \"192.0.2.1\" or \"2001:db8::1\""
                    ),
                );
                None
            }
        }
    }

    /// A CIDR prefix without host bits.
    pub fn prefix(&mut self, value: &S<String>, field: &str) -> Option<IpNet> {
        let text = value.get_ref().trim();
        match prefix(text) {
            Ok(prefix) => Some(prefix),
            Err(message) => {
                self.fail(value, field, message);
                None
            }
        }
    }

    /// `[metrics] namespaces`: a non-empty list of `uplink`, `frrk8s`, `metallb`.
    pub fn metric_namespaces(
        &mut self,
        value: &S<Vec<String>>,
        field: &str,
    ) -> Option<MetricNamespaces> {
        let mut chosen = MetricNamespaces { uplink: false, frrk8s: false, metallb: false };
        if value.get_ref().is_empty() {
            self.fail(
                value,
                field,
                "names no namespace: a scrape would be empty; leave it out to export all",
            );
            return None;
        }
        for name in value.get_ref() {
            match name.as_str() {
                "uplink" => chosen.uplink = true,
                "frrk8s" => chosen.frrk8s = true,
                "metallb" => chosen.metallb = true,
                other => {
                    let known = MetricNamespaces::NAMES.join("\", \"");
                    self.fail(
                        value,
                        field,
                        format!("\"{other}\" is not a namespace; write \"{known}\""),
                    );
                    return None;
                }
            }
        }
        Some(chosen)
    }

    /// A TCP address to listen on: an IP address and a port other than 0 (a scraper must know
    /// where to connect, so the kernel may not pick the port).
    pub fn listen_address(&mut self, value: &S<String>, field: &str) -> Option<SocketAddr> {
        let text = value.get_ref().trim();
        let Ok(address) = SocketAddr::from_str(text) else {
            let hint = if IpAddr::from_str(text).is_ok() {
                format!(
                    "\"{text}\" has no port; write e.g. \"{}\"",
                    SocketAddr::new(IpAddr::from_str(text).ok()?, 9181)
                )
            } else {
                format!("\"{text}\" is not an address and port; write e.g. \"127.0.0.1:9181\" or \"[::1]:9181\"")
            };
            self.fail(value, field, hint);
            return None;
        };
        if address.port() == 0 {
            self.fail(value, field, format!("port 0 lets the kernel pick a port nobody knows; write a fixed one such as \"{}\"", SocketAddr::new(address.ip(), 9181)));
            return None;
        }
        Some(address)
    }

    /// A VRF device name ("" is the default VRF and is the caller's to accept).
    pub fn vrf_name(&mut self, value: &S<String>, field: &str) -> Option<String> {
        let name = value.get_ref();
        if !name.is_empty() && !is_device_name(name) {
            self.fail(value, field, format!("\"{name}\" is not a valid VRF device name; use at most 15 bytes without '/', ':' or spaces (\"\" is the default VRF)"));
            return None;
        }
        Some(name.clone())
    }

    /// A duration written as text ("90s", "300ms"), zero included.
    pub fn duration(&mut self, value: &S<RawDuration>, field: &str) -> Option<Duration> {
        match value.get_ref() {
            RawDuration::Number(number) => {
                self.fail(value, field, bare_number_hint(number));
                None
            }
            RawDuration::Text(text) => match parse_duration(text) {
                Ok(duration) => Some(duration),
                Err(error) => {
                    self.fail(value, field, error.to_string());
                    None
                }
            },
        }
    }

    /// A duration longer than zero (intervals and timeouts).
    pub fn positive_duration(&mut self, value: &S<RawDuration>, field: &str) -> Option<Duration> {
        let duration = self.duration(value, field)?;
        if duration.is_zero() {
            self.fail(value, field, "must be longer than zero");
            return None;
        }
        Some(duration)
    }

    /// BGP timers are carried in whole seconds (RFC 4271 §4.2).
    pub fn whole_seconds(&mut self, value: &S<RawDuration>, field: &str) -> Option<Duration> {
        let duration = self.duration(value, field)?;
        if duration.subsec_nanos() != 0 {
            let up = Duration::from_secs(duration.as_secs().saturating_add(1));
            self.fail(
                value,
                field,
                format!(
                    "BGP timers are whole seconds; write \"{}\" or \"{}\"",
                    format_duration(Duration::from_secs(duration.as_secs())),
                    format_duration(up)
                ),
            );
            return None;
        }
        Some(duration)
    }

    /// Whole seconds within `range` (timers carried in seconds on the wire).
    pub fn whole_seconds_in(
        &mut self,
        value: &S<RawDuration>,
        field: &str,
        range: RangeInclusive<u64>,
    ) -> Option<Duration> {
        let duration = self.whole_seconds(value, field)?;
        if !range.contains(&duration.as_secs()) {
            self.fail(
                value,
                field,
                format!(
                    "\"{}\" is out of range; expected \"{}s\" to \"{}s\"",
                    format_duration(duration),
                    range.start(),
                    range.end()
                ),
            );
            return None;
        }
        Some(duration)
    }

    /// A duration within `range` milliseconds.
    pub fn millis_in(
        &mut self,
        value: &S<RawDuration>,
        field: &str,
        range: RangeInclusive<u128>,
    ) -> Option<Duration> {
        let duration = self.duration(value, field)?;
        if !range.contains(&duration.as_millis()) {
            self.fail(
                value,
                field,
                format!(
                    "\"{}\" is out of range; expected \"{}ms\" to \"{}ms\"",
                    format_duration(duration),
                    range.start(),
                    range.end()
                ),
            );
            return None;
        }
        Some(duration)
    }
}

/// Parses a CIDR prefix without host bits, or says what is wrong in words an operator acts on.
fn prefix(text: &str) -> Result<IpNet, String> {
    let Ok(prefix) = IpNet::from_str(text) else {
        return Err(if let Ok(address) = IpAddr::from_str(text) {
            let len = if address.is_ipv4() { 32 } else { 128 };
            format!("\"{text}\" has no prefix length; write \"{text}/{len}\" for a single address")
        } else {
            format!(
                "\"{text}\" is not a CIDR prefix; write e.g. \"10.0.0.0/24\" or \"2001:db8::/64\""
            )
        });
    };
    if prefix.trunc() != prefix {
        return Err(format!("{text} has host bits set; did you mean {}?", prefix.trunc()));
    }
    Ok(prefix)
}

/// Whether `name` is a valid Linux net device name: the kernel's dev_valid_name() allows at
/// most 15 bytes (IFNAMSIZ - 1) and no '/', ':' or whitespace.
pub(crate) fn is_device_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() < 16
        && name != "."
        && name != ".."
        && !name.chars().any(|c| c == '/' || c == ':' || c.is_whitespace())
}

/// The most a key file may hold: TCP-MD5 keys are at most 80 octets (RFC 2385 via Linux's
/// TCP_MD5SIG_MAXKEYLEN), BFD keys at most 20; a few KiB leaves room for comments-free files
/// with a trailing newline and refuses `/dev/zero` or a log file named by mistake.
pub const MAX_SECRET_FILE_BYTES: u64 = 4096;

/// Reads a `password_file`: a regular file (a FIFO would block the load, a device could be
/// endless) of at most [`MAX_SECRET_FILE_BYTES`]. The error says what is wrong with `path`.
pub fn read_secret_file(path: &Path) -> Result<String, String> {
    use std::io::Read;
    let file =
        std::fs::File::open(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let meta = file.metadata().map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    if !meta.is_file() {
        return Err(format!("{} is not a regular file", path.display()));
    }
    let mut text = String::new();
    file.take(MAX_SECRET_FILE_BYTES + 1)
        .read_to_string(&mut text)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    if text.len() as u64 > MAX_SECRET_FILE_BYTES {
        return Err(format!(
            "{} is larger than {MAX_SECRET_FILE_BYTES} bytes; a key file holds the key alone",
            path.display()
        ));
    }
    Ok(text)
}

#[cfg(test)]
mod secret_file_tests {
    use super::*;

    #[test]
    fn secret_files_are_small_regular_files() {
        let dir = tempfile::tempdir().unwrap();
        let key = dir.path().join("key");
        std::fs::write(&key, "s3cret\n").unwrap();
        assert_eq!(read_secret_file(&key).unwrap(), "s3cret\n");
        let big = dir.path().join("big");
        std::fs::write(&big, vec![b'a'; 5000]).unwrap();
        assert!(read_secret_file(&big).unwrap_err().contains("larger than 4096 bytes"));
        assert!(read_secret_file(dir.path()).unwrap_err().contains("not a regular file"));
        assert!(read_secret_file(Path::new("/dev/zero"))
            .unwrap_err()
            .contains("not a regular file"));
        assert!(read_secret_file(&dir.path().join("absent")).unwrap_err().contains("cannot read"));
    }
}
