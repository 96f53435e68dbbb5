//! The BFD Control packet (RFC 5880 §4.1): a fixed 24-octet header, optionally followed by an
//! authentication section. uplink does not authenticate, so a packet that carries one is
//! parsed far enough to say which kind it is and then refused (RFC 5880 §6.8.6: with the A bit
//! set and no authentication in use, the packet MUST be discarded).

use std::fmt;
use thiserror::Error;

/// Length of a Control packet without authentication (RFC 5880 §4.1).
pub const HEADER_LEN: usize = 24;
/// RFC 5880 §4.1: "Vers: The version number of the protocol. This document defines protocol
/// version 1."
pub const VERSION: u8 = 1;

/// Session states as carried in the Sta field (RFC 5880 §4.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
pub enum State {
    AdminDown,
    Down,
    Init,
    Up,
}

impl State {
    fn from_bits(bits: u8) -> State {
        match bits & 0b11 {
            0 => State::AdminDown,
            1 => State::Down,
            2 => State::Init,
            _ => State::Up,
        }
    }

    fn bits(self) -> u8 {
        match self {
            State::AdminDown => 0,
            State::Down => 1,
            State::Init => 2,
            State::Up => 3,
        }
    }

    /// The lower-case word FRR prints (`show bfd peers`: "up", "down", "init", "shutdown").
    pub fn frr_name(self) -> &'static str {
        match self {
            State::AdminDown => "shutdown",
            State::Down => "down",
            State::Init => "init",
            State::Up => "up",
        }
    }
}

impl fmt::Display for State {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            State::AdminDown => "AdminDown",
            State::Down => "Down",
            State::Init => "Init",
            State::Up => "Up",
        })
    }
}

/// Diagnostic codes (RFC 5880 §4.1, Diag). Values 9-31 are reserved and kept as received.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Diagnostic {
    None,
    ControlDetectionTimeExpired,
    EchoFunctionFailed,
    NeighborSignaledSessionDown,
    ForwardingPlaneReset,
    PathDown,
    ConcatenatedPathDown,
    AdministrativelyDown,
    ReverseConcatenatedPathDown,
    Reserved(u8),
}

impl Diagnostic {
    fn from_bits(bits: u8) -> Diagnostic {
        match bits & 0x1f {
            0 => Diagnostic::None,
            1 => Diagnostic::ControlDetectionTimeExpired,
            2 => Diagnostic::EchoFunctionFailed,
            3 => Diagnostic::NeighborSignaledSessionDown,
            4 => Diagnostic::ForwardingPlaneReset,
            5 => Diagnostic::PathDown,
            6 => Diagnostic::ConcatenatedPathDown,
            7 => Diagnostic::AdministrativelyDown,
            8 => Diagnostic::ReverseConcatenatedPathDown,
            other => Diagnostic::Reserved(other),
        }
    }

    pub fn code(self) -> u8 {
        match self {
            Diagnostic::None => 0,
            Diagnostic::ControlDetectionTimeExpired => 1,
            Diagnostic::EchoFunctionFailed => 2,
            Diagnostic::NeighborSignaledSessionDown => 3,
            Diagnostic::ForwardingPlaneReset => 4,
            Diagnostic::PathDown => 5,
            Diagnostic::ConcatenatedPathDown => 6,
            Diagnostic::AdministrativelyDown => 7,
            Diagnostic::ReverseConcatenatedPathDown => 8,
            Diagnostic::Reserved(code) => code & 0x1f,
        }
    }

    /// The words FRR prints for a diagnostic (`bfd_diag2str` in bfdd).
    pub fn frr_name(self) -> &'static str {
        match self {
            Diagnostic::None => "ok",
            Diagnostic::ControlDetectionTimeExpired => "control detection time expired",
            Diagnostic::EchoFunctionFailed => "echo function failed",
            Diagnostic::NeighborSignaledSessionDown => "neighbor signaled session down",
            Diagnostic::ForwardingPlaneReset => "forwarding plane reset",
            Diagnostic::PathDown => "path down",
            Diagnostic::ConcatenatedPathDown => "concatenated path down",
            Diagnostic::AdministrativelyDown => "administratively down",
            Diagnostic::ReverseConcatenatedPathDown => "reverse concatenated path down",
            Diagnostic::Reserved(_) => "unknown",
        }
    }
}

/// Authentication types (RFC 5880 §4.1, Auth Type), named only to say what was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AuthType {
    SimplePassword,
    KeyedMd5,
    MeticulousKeyedMd5,
    KeyedSha1,
    MeticulousKeyedSha1,
    Reserved(u8),
}

impl AuthType {
    fn from_code(code: u8) -> AuthType {
        match code {
            1 => AuthType::SimplePassword,
            2 => AuthType::KeyedMd5,
            3 => AuthType::MeticulousKeyedMd5,
            4 => AuthType::KeyedSha1,
            5 => AuthType::MeticulousKeyedSha1,
            other => AuthType::Reserved(other),
        }
    }
}

/// Why a received packet was discarded. Each variant is one rule of RFC 5880 §6.8.6.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum DecodeError {
    #[error("packet of {0} octets is shorter than the 24-octet BFD Control header")]
    Truncated(usize),
    #[error("BFD version {0} (only version 1 exists)")]
    Version(u8),
    #[error("Length field {length} is below the minimum of {minimum}")]
    LengthTooSmall { length: u8, minimum: usize },
    #[error("Length field {length} exceeds the {received} octets received")]
    LengthExceedsPayload { length: u8, received: usize },
    #[error("Detect Mult is zero")]
    ZeroDetectMult,
    #[error("Multipoint (M) bit is set")]
    Multipoint,
    #[error("My Discriminator is zero")]
    ZeroMyDiscriminator,
    #[error("Your Discriminator is zero in state {0}")]
    ZeroYourDiscriminator(State),
    #[error("authentication section length {auth_len} does not fit a {length}-octet packet")]
    AuthLength { auth_len: u8, length: u8 },
    #[error("authentication ({0:?}) is not supported")]
    AuthenticationUnsupported(AuthType),
}

/// One BFD Control packet. Intervals are in microseconds, as on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ControlPacket {
    pub diagnostic: Diagnostic,
    pub state: State,
    pub poll: bool,
    pub final_bit: bool,
    pub control_plane_independent: bool,
    pub demand: bool,
    pub detect_mult: u8,
    pub my_discriminator: u32,
    pub your_discriminator: u32,
    pub desired_min_tx_us: u32,
    pub required_min_rx_us: u32,
    pub required_min_echo_rx_us: u32,
}

const FLAG_POLL: u8 = 0x20;
const FLAG_FINAL: u8 = 0x10;
const FLAG_CPI: u8 = 0x08;
const FLAG_AUTH: u8 = 0x04;
const FLAG_DEMAND: u8 = 0x02;
const FLAG_MULTIPOINT: u8 = 0x01;

fn be_u32(bytes: &[u8], at: usize) -> u32 {
    let mut word = [0u8; 4];
    if let Some(src) = bytes.get(at..at.saturating_add(4)) {
        word.copy_from_slice(src);
    }
    u32::from_be_bytes(word)
}

impl ControlPacket {
    /// Decodes and validates a received packet (RFC 5880 §6.8.6, the checks before a session
    /// is selected).
    pub fn decode(bytes: &[u8]) -> Result<ControlPacket, DecodeError> {
        let header = bytes.get(..HEADER_LEN).ok_or(DecodeError::Truncated(bytes.len()))?;
        let (first, flags, detect_mult, length) = match *header {
            [a, b, c, d, ..] => (a, b, c, d),
            _ => return Err(DecodeError::Truncated(bytes.len())),
        };
        // RFC 5880 §6.8.6: "If the version number is not correct (1), the packet MUST be
        // discarded."
        let version = first >> 5;
        if version != VERSION {
            return Err(DecodeError::Version(version));
        }
        let authenticated = flags & FLAG_AUTH != 0;
        // "If the Length field is less than the minimum correct value (24 if the A bit is
        // clear, or 26 if the A bit is set), the packet MUST be discarded."
        let minimum = if authenticated { HEADER_LEN + 2 } else { HEADER_LEN };
        if usize::from(length) < minimum {
            return Err(DecodeError::LengthTooSmall { length, minimum });
        }
        // "If the Length field is greater than the payload of the encapsulating protocol, the
        // packet MUST be discarded."
        if usize::from(length) > bytes.len() {
            return Err(DecodeError::LengthExceedsPayload { length, received: bytes.len() });
        }
        // "If the Detect Mult field is zero, the packet MUST be discarded."
        if detect_mult == 0 {
            return Err(DecodeError::ZeroDetectMult);
        }
        // "If the Multipoint (M) bit is nonzero, the packet MUST be discarded."
        if flags & FLAG_MULTIPOINT != 0 {
            return Err(DecodeError::Multipoint);
        }
        let state = State::from_bits(flags >> 6);
        let my_discriminator = be_u32(header, 4);
        let your_discriminator = be_u32(header, 8);
        // "If the My Discriminator field is zero, the packet MUST be discarded."
        if my_discriminator == 0 {
            return Err(DecodeError::ZeroMyDiscriminator);
        }
        // "If the Your Discriminator field is zero and the State field is not Down or
        // AdminDown, the packet MUST be discarded."
        if your_discriminator == 0 && !matches!(state, State::Down | State::AdminDown) {
            return Err(DecodeError::ZeroYourDiscriminator(state));
        }
        if authenticated {
            // RFC 5880 §4.2: Auth Type, Auth Len (which includes those two octets), data.
            let auth = bytes.get(HEADER_LEN..usize::from(length)).unwrap_or_default();
            let (auth_type, auth_len) = match *auth {
                [t, l, ..] => (t, l),
                _ => return Err(DecodeError::LengthTooSmall { length, minimum }),
            };
            if usize::from(auth_len) < 2 || usize::from(auth_len) > auth.len() {
                return Err(DecodeError::AuthLength { auth_len, length });
            }
            // "If the A bit is set and no authentication is in use (bfd.AuthType is zero),
            // the packet MUST be discarded."
            return Err(DecodeError::AuthenticationUnsupported(AuthType::from_code(auth_type)));
        }
        Ok(ControlPacket {
            diagnostic: Diagnostic::from_bits(first),
            state,
            poll: flags & FLAG_POLL != 0,
            final_bit: flags & FLAG_FINAL != 0,
            control_plane_independent: flags & FLAG_CPI != 0,
            demand: flags & FLAG_DEMAND != 0,
            detect_mult,
            my_discriminator,
            your_discriminator,
            desired_min_tx_us: be_u32(header, 12),
            required_min_rx_us: be_u32(header, 16),
            required_min_echo_rx_us: be_u32(header, 20),
        })
    }

    /// The 24 octets of this packet (never authenticated, never multipoint).
    pub fn encode(&self) -> [u8; HEADER_LEN] {
        let mut out = [0u8; HEADER_LEN];
        let mut flags = self.state.bits() << 6;
        for (set, bit) in [
            (self.poll, FLAG_POLL),
            (self.final_bit, FLAG_FINAL),
            (self.control_plane_independent, FLAG_CPI),
            (self.demand, FLAG_DEMAND),
        ] {
            if set {
                flags |= bit;
            }
        }
        let words = [
            self.my_discriminator,
            self.your_discriminator,
            self.desired_min_tx_us,
            self.required_min_rx_us,
            self.required_min_echo_rx_us,
        ];
        let [first, second, third, fourth, rest @ ..] = &mut out;
        *first = (VERSION << 5) | self.diagnostic.code();
        *second = flags;
        *third = self.detect_mult;
        *fourth = HEADER_LEN as u8;
        for (chunk, word) in rest.chunks_exact_mut(4).zip(words) {
            chunk.copy_from_slice(&word.to_be_bytes());
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> ControlPacket {
        ControlPacket {
            diagnostic: Diagnostic::ControlDetectionTimeExpired,
            state: State::Up,
            poll: true,
            final_bit: false,
            control_plane_independent: false,
            demand: false,
            detect_mult: 3,
            my_discriminator: 0x0102_0304,
            your_discriminator: 0x0a0b_0c0d,
            desired_min_tx_us: 300_000,
            required_min_rx_us: 50_000,
            required_min_echo_rx_us: 0,
        }
    }

    /// The same packet written out by hand from the RFC 5880 §4.1 layout.
    const SAMPLE_HEX: &str = "21e00318010203040a0b0c0d000493e00000c35000000000";

    fn hex(s: &str) -> Vec<u8> {
        (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap()).collect()
    }

    #[test]
    fn encodes_the_rfc_layout() {
        assert_eq!(sample().encode().to_vec(), hex(SAMPLE_HEX));
    }

    #[test]
    fn decodes_the_rfc_layout_and_round_trips() {
        assert_eq!(ControlPacket::decode(&hex(SAMPLE_HEX)), Ok(sample()));
        let mut p = sample();
        p.poll = false;
        p.final_bit = true;
        p.control_plane_independent = true;
        p.demand = true;
        p.state = State::Init;
        p.diagnostic = Diagnostic::Reserved(17);
        assert_eq!(ControlPacket::decode(&p.encode()), Ok(p));
    }

    #[test]
    fn trailing_bytes_beyond_length_are_ignored() {
        let mut bytes = hex(SAMPLE_HEX);
        bytes.extend_from_slice(&[0xff; 8]);
        assert_eq!(ControlPacket::decode(&bytes), Ok(sample()));
    }

    fn with(f: impl FnOnce(&mut Vec<u8>)) -> Result<ControlPacket, DecodeError> {
        let mut bytes = hex(SAMPLE_HEX);
        f(&mut bytes);
        ControlPacket::decode(&bytes)
    }

    #[test]
    fn every_validity_rule_rejects_with_its_own_error() {
        assert_eq!(with(|b| b.truncate(23)), Err(DecodeError::Truncated(23)));
        assert_eq!(with(|b| b[0] = 0x41), Err(DecodeError::Version(2)));
        assert_eq!(
            with(|b| b[3] = 20),
            Err(DecodeError::LengthTooSmall { length: 20, minimum: 24 })
        );
        assert_eq!(
            with(|b| b[3] = 28),
            Err(DecodeError::LengthExceedsPayload { length: 28, received: 24 })
        );
        assert_eq!(with(|b| b[2] = 0), Err(DecodeError::ZeroDetectMult));
        assert_eq!(with(|b| b[1] |= 0x01), Err(DecodeError::Multipoint));
        assert_eq!(with(|b| b[4..8].fill(0)), Err(DecodeError::ZeroMyDiscriminator));
        assert_eq!(with(|b| b[8..12].fill(0)), Err(DecodeError::ZeroYourDiscriminator(State::Up)));
        // Your Discriminator zero is fine while the sender is Down.
        let down = with(|b| {
            b[8..12].fill(0);
            b[1] = (b[1] & 0x3f) | 0x40;
        });
        assert_eq!(down.map(|p| p.state), Ok(State::Down));
    }

    #[test]
    fn authentication_is_parsed_and_refused() {
        // Keyed SHA1 (type 4), Auth Len 28: 24 + 28 = 52 octets.
        let auth = with(|b| {
            b[1] |= FLAG_AUTH;
            b[3] = 52;
            b.extend_from_slice(&[4, 28]);
            b.extend_from_slice(&[0; 26]);
        });
        assert_eq!(auth, Err(DecodeError::AuthenticationUnsupported(AuthType::KeyedSha1)));
        // A bit set but only 24 octets: below the 26-octet minimum.
        assert_eq!(
            with(|b| b[1] |= FLAG_AUTH),
            Err(DecodeError::LengthTooSmall { length: 24, minimum: 26 })
        );
        // Auth Len longer than the section that Length leaves for it.
        let overlong = with(|b| {
            b[1] |= FLAG_AUTH;
            b[3] = 28;
            b.extend_from_slice(&[1, 9, 0, 0]);
        });
        assert_eq!(overlong, Err(DecodeError::AuthLength { auth_len: 9, length: 28 }));
    }

    #[test]
    fn arbitrary_bytes_never_panic() {
        // A cheap sweep next to the fuzz target: every length, a few fill patterns.
        for len in 0..64 {
            for fill in [0x00u8, 0x20, 0x24, 0xff] {
                let _ = ControlPacket::decode(&vec![fill; len]);
            }
        }
    }
}
