//! The BFD Control packet (RFC 5880 §4.1): a fixed 24-octet header, optionally followed by an
//! authentication section (§4.2). The keyed MD5 and SHA1 sections (§4.3, §4.4), in their plain
//! and meticulous forms, are decoded into [`AuthSection`]; checking them is the session's job
//! (`bfd::auth`), since it needs the key and the sequence numbers. Simple Password (§4.2.2)
//! sends the key in clear and is refused here, as is any type RFC 5880 does not define.

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

/// The authentication types uplink runs (RFC 5880 §4.1, Auth Type 2-5).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AuthType {
    KeyedMd5,
    MeticulousKeyedMd5,
    KeyedSha1,
    MeticulousKeyedSha1,
}

/// RFC 5880 §4.1: Auth Type 1 is Simple Password.
const AUTH_SIMPLE_PASSWORD: u8 = 1;
/// The longest digest (SHA1, 20 octets; MD5 uses the first 16).
pub const MAX_DIGEST_LEN: usize = 20;
/// Type, Auth Len, Key ID, Reserved and Sequence Number before the digest (RFC 5880 §4.3).
const AUTH_FIXED_LEN: usize = 8;
/// The longest packet uplink sends or checks: the header and a keyed SHA1 section.
pub const MAX_PACKET_LEN: usize = HEADER_LEN + AUTH_FIXED_LEN + MAX_DIGEST_LEN;

impl AuthType {
    pub fn from_code(code: u8) -> Option<AuthType> {
        match code {
            2 => Some(AuthType::KeyedMd5),
            3 => Some(AuthType::MeticulousKeyedMd5),
            4 => Some(AuthType::KeyedSha1),
            5 => Some(AuthType::MeticulousKeyedSha1),
            _ => None,
        }
    }

    pub fn code(self) -> u8 {
        match self {
            AuthType::KeyedMd5 => 2,
            AuthType::MeticulousKeyedMd5 => 3,
            AuthType::KeyedSha1 => 4,
            AuthType::MeticulousKeyedSha1 => 5,
        }
    }

    /// Octets in the Auth Key/Digest field: 16 for MD5 (§4.3), 20 for SHA1 (§4.4).
    pub fn digest_len(self) -> usize {
        match self {
            AuthType::KeyedMd5 | AuthType::MeticulousKeyedMd5 => 16,
            AuthType::KeyedSha1 | AuthType::MeticulousKeyedSha1 => 20,
        }
    }

    /// The Auth Len this type requires: "the Auth Len field MUST be 24" for MD5 (§4.3) and
    /// 28 for SHA1 (§4.4).
    pub fn section_len(self) -> usize {
        AUTH_FIXED_LEN + self.digest_len()
    }

    /// The meticulous forms demand a new Sequence Number in every packet (§6.7.3, §6.7.4).
    pub fn meticulous(self) -> bool {
        matches!(self, AuthType::MeticulousKeyedMd5 | AuthType::MeticulousKeyedSha1)
    }

    /// The name used in the config and in `show bfd peers`.
    pub fn name(self) -> &'static str {
        match self {
            AuthType::KeyedMd5 => "keyed-md5",
            AuthType::MeticulousKeyedMd5 => "meticulous-keyed-md5",
            AuthType::KeyedSha1 => "keyed-sha1",
            AuthType::MeticulousKeyedSha1 => "meticulous-keyed-sha1",
        }
    }
}

impl fmt::Display for AuthType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A keyed MD5 or SHA1 authentication section (RFC 5880 §4.3, §4.4), as received or as
/// signed for sending. Auth Len follows from the type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AuthSection {
    pub auth_type: AuthType,
    pub key_id: u8,
    /// "This byte MUST be set to zero on transmit, and ignored on receipt" — but it is part of
    /// what the digest covers, so a received value is kept.
    pub reserved: u8,
    pub sequence: u32,
    /// The Auth Key/Digest field; only the first `auth_type.digest_len()` octets are used.
    pub digest: [u8; MAX_DIGEST_LEN],
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
    #[error("authentication type {} is not supported", auth_type_words(*.0))]
    AuthenticationUnsupported(u8),
}

fn auth_type_words(code: u8) -> String {
    match (code, AuthType::from_code(code)) {
        (AUTH_SIMPLE_PASSWORD, _) => "1 (simple password, the key in clear)".to_string(),
        (_, Some(known)) => format!("{code} ({known})"),
        (_, None) => format!("{code} (reserved)"),
    }
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
    /// The A bit and what follows the header (RFC 5880 §4.2).
    pub auth: Option<AuthSection>,
}

/// An encoded packet: the header, and the authentication section when there is one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Encoded {
    bytes: [u8; MAX_PACKET_LEN],
    len: usize,
}

impl std::ops::Deref for Encoded {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        self.bytes.get(..self.len).unwrap_or_default()
    }
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
        let auth = if authenticated {
            let section = bytes.get(HEADER_LEN..usize::from(length)).unwrap_or_default();
            Some(decode_auth(section, length)?)
        } else {
            None
        };
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
            auth,
        })
    }

    /// The octets of this packet (never multipoint). With an authentication section the A bit
    /// is set and Length covers the section (RFC 5880 §4.1).
    pub fn encode(&self) -> Encoded {
        let mut out = [0u8; MAX_PACKET_LEN];
        let section_len = self.auth.map_or(0, |a| a.auth_type.section_len());
        let len = HEADER_LEN + section_len;
        let mut flags = self.state.bits() << 6;
        if self.auth.is_some() {
            flags |= FLAG_AUTH;
        }
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
        // At most 24 + 28 octets: always fits.
        *fourth = u8::try_from(len).unwrap_or(u8::MAX);
        for (chunk, word) in rest.chunks_exact_mut(4).zip(words) {
            chunk.copy_from_slice(&word.to_be_bytes());
        }
        if let (Some(auth), Some(section)) = (self.auth, out.get_mut(HEADER_LEN..len)) {
            // RFC 5880 §4.3 / §4.4: Auth Type, Auth Len, Auth Key ID, Reserved, Sequence
            // Number, Auth Key/Digest.
            let digest = auth.digest.get(..auth.auth_type.digest_len()).unwrap_or_default();
            let fixed = [auth.auth_type.code(), u8::try_from(section_len).unwrap_or(u8::MAX)];
            for (slot, byte) in section.iter_mut().zip(
                fixed
                    .into_iter()
                    .chain([auth.key_id, auth.reserved])
                    .chain(auth.sequence.to_be_bytes())
                    .chain(digest.iter().copied()),
            ) {
                *slot = byte;
            }
        }
        Encoded { bytes: out, len }
    }
}

/// The authentication section after the header (`section` is what Length leaves for it).
fn decode_auth(section: &[u8], length: u8) -> Result<AuthSection, DecodeError> {
    let (code, auth_len) = match *section {
        [t, l, ..] => (t, l),
        _ => return Err(DecodeError::LengthTooSmall { length, minimum: HEADER_LEN + 2 }),
    };
    if usize::from(auth_len) < 2 || usize::from(auth_len) > section.len() {
        return Err(DecodeError::AuthLength { auth_len, length });
    }
    let auth_type =
        AuthType::from_code(code).ok_or(DecodeError::AuthenticationUnsupported(code))?;
    // RFC 5880 §6.7.3 / §6.7.4: "If the Auth Len field is not equal to 24 [28 for SHA1], the
    // packet MUST be discarded." The digest covers Length octets, so a packet whose Length
    // leaves octets after the section is refused as well: nothing sends one.
    if usize::from(auth_len) != auth_type.section_len() || section.len() != auth_type.section_len()
    {
        return Err(DecodeError::AuthLength { auth_len, length });
    }
    let (key_id, reserved) = match *section {
        [_, _, k, r, ..] => (k, r),
        _ => return Err(DecodeError::AuthLength { auth_len, length }),
    };
    let mut digest = [0u8; MAX_DIGEST_LEN];
    let received = section.get(AUTH_FIXED_LEN..).unwrap_or_default();
    for (slot, byte) in digest.iter_mut().zip(received) {
        *slot = *byte;
    }
    Ok(AuthSection { auth_type, key_id, reserved, sequence: be_u32(section, 4), digest })
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
            auth: None,
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

    /// `SAMPLE_HEX` with a meticulous keyed SHA1 section (RFC 5880 §4.4): A bit, Length 52,
    /// Auth Type 5, Auth Len 28, Key ID 7, Reserved 0, Sequence Number 0x01020304, and a digest
    /// field of 0x11 × 20.
    const SHA1_SECTION_HEX: &str = "21e40334010203040a0b0c0d000493e00000c35000000000\
                                    051c07000102030411111111111111111111111111111111\
                                    11111111";

    #[test]
    fn a_keyed_sha1_section_decodes_and_round_trips() {
        let bytes = hex(SHA1_SECTION_HEX);
        let packet = ControlPacket::decode(&bytes).unwrap();
        let section = AuthSection {
            auth_type: AuthType::MeticulousKeyedSha1,
            key_id: 7,
            reserved: 0,
            sequence: 0x0102_0304,
            digest: [0x11; 20],
        };
        assert_eq!(packet, ControlPacket { auth: Some(section), ..sample() });
        assert_eq!(packet.encode().to_vec(), bytes);
        // A nonzero Reserved octet is kept: the digest covers it.
        let mut odd = bytes.clone();
        odd[27] = 0x5a;
        assert_eq!(ControlPacket::decode(&odd).unwrap().encode().to_vec(), odd);
    }

    #[test]
    fn a_keyed_md5_section_uses_16_digest_octets() {
        let packet = ControlPacket {
            auth: Some(AuthSection {
                auth_type: AuthType::KeyedMd5,
                key_id: 1,
                reserved: 0,
                sequence: 9,
                digest: [0xab; 20],
            }),
            ..sample()
        };
        let bytes = packet.encode();
        // RFC 5880 §4.3: 24 + 24 octets, Auth Len 24.
        assert_eq!((bytes.len(), bytes[3], bytes[24], bytes[25]), (48, 48, 2, 24));
        let decoded = ControlPacket::decode(&bytes).unwrap();
        let digest = decoded.auth.unwrap().digest;
        assert_eq!((&digest[..16], &digest[16..]), (&[0xab; 16][..], &[0u8; 4][..]));
    }

    #[test]
    fn authentication_sections_that_break_a_rule_are_refused() {
        let auth = |section: &[u8]| {
            with(|b| {
                b[1] |= FLAG_AUTH;
                b[3] = u8::try_from(24 + section.len()).unwrap();
                b.extend_from_slice(section);
            })
        };
        // Simple Password (type 1) would put the key on the wire: refused, as are reserved types.
        let simple = auth(&[1, 7, 1, b'k', b'e', b'y', b'!']);
        assert_eq!(simple, Err(DecodeError::AuthenticationUnsupported(1)));
        assert!(simple.unwrap_err().to_string().contains("simple password"));
        assert_eq!(auth(&[9, 2]), Err(DecodeError::AuthenticationUnsupported(9)));
        // RFC 5880 §6.7.3: keyed MD5 with an Auth Len other than 24 is discarded.
        let mut md5 = vec![2, 28, 1, 0, 0, 0, 0, 1];
        md5.extend_from_slice(&[0; 20]);
        assert_eq!(auth(&md5), Err(DecodeError::AuthLength { auth_len: 28, length: 52 }));
        // Length covering octets after a well-formed section.
        let mut padded = vec![4, 28, 1, 0, 0, 0, 0, 1];
        padded.extend_from_slice(&[0; 24]);
        assert_eq!(auth(&padded), Err(DecodeError::AuthLength { auth_len: 28, length: 56 }));
        // A bit set but only 24 octets: below the 26-octet minimum.
        assert_eq!(
            with(|b| b[1] |= FLAG_AUTH),
            Err(DecodeError::LengthTooSmall { length: 24, minimum: 26 })
        );
        // Auth Len longer than the section that Length leaves for it.
        assert_eq!(auth(&[1, 9, 0, 0]), Err(DecodeError::AuthLength { auth_len: 9, length: 28 }));
        assert_eq!(auth(&[4, 1]), Err(DecodeError::AuthLength { auth_len: 1, length: 26 }));
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
