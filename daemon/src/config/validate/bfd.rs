//! One `[[bgp.bfd_profiles]]` table → a validated BFD profile.

use super::*;

impl Checker<'_, '_> {
    pub(super) fn bfd_profile(&mut self, raw: &RawBfdProfile, field: &str) -> Option<BfdProfile> {
        let name = raw.name.get_ref().clone();
        if name.is_empty() {
            self.fail(&raw.name, &format!("{field}.name"), "a BFD profile needs a non-empty name");
        }
        let interval = |check: &mut Self,
                        value: &Option<S<RawDuration>>,
                        key: &str,
                        default: Duration| match value {
            Some(value) => {
                check.millis_in(value, &format!("{field}.{key}"), 10..=60_000).unwrap_or(default)
            }
            None => default,
        };
        let receive_interval =
            interval(self, &raw.receive_interval, "receive_interval", DEFAULT_BFD_INTERVAL);
        let transmit_interval =
            interval(self, &raw.transmit_interval, "transmit_interval", DEFAULT_BFD_INTERVAL);
        let echo_interval =
            interval(self, &raw.echo_interval, "echo_interval", DEFAULT_BFD_ECHO_INTERVAL);
        // RFC 5880 §6.8.1: Detect Mult is a nonzero 8-bit value; FRR accepts 2..=255.
        let detect_multiplier =
            raw.detect_multiplier.as_ref().map_or(Some(DEFAULT_BFD_DETECT_MULTIPLIER), |value| {
                self.int_in::<u8>(value, &format!("{field}.detect_multiplier"), 2..=255, "packets")
            });
        let minimum_ttl = raw.minimum_ttl.as_ref().map_or(Some(DEFAULT_BFD_MINIMUM_TTL), |value| {
            self.int_in::<u8>(value, &format!("{field}.minimum_ttl"), 1..=254, "TTL")
        });
        // uplink runs asynchronous mode only (RFC 5880 §6.1); the Echo function (§6.4) is not
        // implemented, so a profile asking for it would silently not get it.
        if let Some(echo) = raw.echo_mode.as_ref().filter(|v| *v.get_ref()) {
            self.fail(
                echo,
                &format!("{field}.echo_mode"),
                "the BFD Echo function is not supported by uplink: remove echo_mode or set it to \
                 false (asynchronous mode still detects failures within transmit_interval × \
                 detect_multiplier)",
            );
        }
        let authentication = raw.authentication.as_ref().and_then(|auth| {
            let field = format!("{field}.authentication");
            crate::config::bfd_auth::validate(self.source, auth, &field, self.errors)
        });
        if name.is_empty() {
            return None;
        }
        Some(BfdProfile {
            name,
            receive_interval,
            transmit_interval,
            detect_multiplier: detect_multiplier.unwrap_or(DEFAULT_BFD_DETECT_MULTIPLIER),
            echo_interval,
            echo_mode: raw.echo_mode.as_ref().is_some_and(|v| *v.get_ref()),
            passive_mode: raw.passive_mode.as_ref().is_some_and(|v| *v.get_ref()),
            minimum_ttl: minimum_ttl.unwrap_or(DEFAULT_BFD_MINIMUM_TTL),
            authentication,
        })
    }
}
