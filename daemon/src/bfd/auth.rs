//! BFD authentication (RFC 5880 §6.7): keyed MD5 and keyed SHA1, in their plain and
//! meticulous forms. Sans-IO like the session that owns it: time is passed in.
//!
//! The digest is computed over the whole packet with the key, zero-padded, in the Auth
//! Key/Digest field (§6.7.3, §6.7.4). Sequence numbers stop replays: the meticulous forms
//! demand a higher number in every packet, the plain forms accept a repeat within the window.

use super::packet::{AuthSection, AuthType, ControlPacket, MAX_DIGEST_LEN};
use md5::Md5;
use sha1::{Digest, Sha1};
use std::fmt;
use std::time::{Duration, Instant};
use thiserror::Error;

/// The key of one session. `Debug` never prints it.
#[derive(Clone, PartialEq, Eq)]
pub struct Key {
    bytes: [u8; MAX_DIGEST_LEN],
    len: usize,
}

impl Key {
    /// `None` when the key is empty or longer than the type's digest field: RFC 5880 §4.3 and
    /// §4.4 pad the key to 16 (MD5) or 20 (SHA1) octets, so a longer one cannot be used.
    pub fn new(auth_type: AuthType, key: &[u8]) -> Option<Key> {
        if key.is_empty() || key.len() > auth_type.digest_len() {
            return None;
        }
        let mut bytes = [0u8; MAX_DIGEST_LEN];
        for (slot, byte) in bytes.iter_mut().zip(key) {
            *slot = *byte;
        }
        Some(Key { bytes, len: key.len() })
    }
}

impl fmt::Debug for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Key(<{} octets, redacted>)", self.len)
    }
}

/// What a session authenticates with (one BFD profile's `authentication`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Authentication {
    pub auth_type: AuthType,
    pub key_id: u8,
    pub key: Key,
}

/// Why an authenticated session discarded a packet (RFC 5880 §6.7, §6.8.6).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum AuthFailure {
    #[error("the packet is not authenticated but the session uses {0} (RFC 5880 §6.8.6)")]
    Missing(AuthType),
    #[error("the packet is authenticated ({0}) but the session uses no authentication (RFC 5880 §6.8.6)")]
    Unexpected(AuthType),
    #[error("authentication type {received}, the session uses {expected}")]
    TypeMismatch { received: AuthType, expected: AuthType },
    #[error("key ID {received}, the session uses key ID {expected}")]
    KeyIdMismatch { received: u8, expected: u8 },
    #[error("sequence number {received} is outside {first}..={last} (a replay or a peer that restarted)")]
    Sequence { received: u32, first: u32, last: u32 },
    #[error("wrong digest (a different key)")]
    Digest,
}

impl Authentication {
    /// A profile's `authentication`; `None` if its key does not fit the type (validation
    /// rejects such a config first).
    pub fn from_config(config: &crate::config::BfdAuthentication) -> Option<Authentication> {
        use crate::config::BfdAuthType;
        let auth_type = match config.auth_type {
            BfdAuthType::KeyedMd5 => AuthType::KeyedMd5,
            BfdAuthType::MeticulousKeyedMd5 => AuthType::MeticulousKeyedMd5,
            BfdAuthType::KeyedSha1 => AuthType::KeyedSha1,
            BfdAuthType::MeticulousKeyedSha1 => AuthType::MeticulousKeyedSha1,
        };
        let key = Key::new(auth_type, config.password.expose().as_bytes())?;
        Some(Authentication { auth_type, key_id: config.key_id, key })
    }

    /// Writes the authentication section of `packet` with sequence number `sequence`
    /// (RFC 5880 §6.7.3 / §6.7.4, transmission).
    pub fn sign(&self, packet: &mut ControlPacket, sequence: u32) {
        // "The Auth Key/Digest field MUST be set to the value of the authentication key,
        // padded with zeros ... the entire BFD Control packet ... is then hashed ... and the
        // result placed in the Auth Key/Digest field."
        packet.auth = Some(AuthSection {
            auth_type: self.auth_type,
            key_id: self.key_id,
            reserved: 0,
            sequence,
            digest: self.key.bytes,
        });
        let digest = self.digest_of(packet);
        if let Some(section) = packet.auth.as_mut() {
            section.digest = digest;
        }
    }

    /// Whether the digest of a received packet is right (RFC 5880 §6.7.3 / §6.7.4, reception:
    /// "replace the contents of the Auth Key/Digest field with the authentication key ...
    /// If the calculated digest is equal to the received value ... the packet MUST be
    /// accepted").
    fn digest_matches(&self, packet: &ControlPacket) -> bool {
        let Some(received) = packet.auth else { return false };
        let mut keyed = *packet;
        keyed.auth = Some(AuthSection { digest: self.key.bytes, ..received });
        let expected = self.digest_of(&keyed);
        let len = self.auth_type.digest_len();
        // Compared without an early exit, so the time taken does not say where they differ.
        expected
            .iter()
            .zip(received.digest.iter())
            .take(len)
            .fold(0u8, |diff, (a, b)| diff | (a ^ b))
            == 0
    }

    /// MD5 or SHA1 of `packet` as encoded (its digest field holding the padded key).
    fn digest_of(&self, packet: &ControlPacket) -> [u8; MAX_DIGEST_LEN] {
        let bytes = packet.encode();
        let mut out = [0u8; MAX_DIGEST_LEN];
        match self.auth_type {
            AuthType::KeyedMd5 | AuthType::MeticulousKeyedMd5 => {
                for (slot, byte) in out.iter_mut().zip(Md5::digest(&*bytes)) {
                    *slot = byte;
                }
            }
            AuthType::KeyedSha1 | AuthType::MeticulousKeyedSha1 => {
                for (slot, byte) in out.iter_mut().zip(Sha1::digest(&*bytes)) {
                    *slot = byte;
                }
            }
        }
        out
    }
}

/// RFC 5880 §6.8.1's authentication variables of one session, with the key.
#[derive(Debug, Clone)]
pub struct AuthState {
    auth: Authentication,
    /// bfd.XmitAuthSeq: "MUST be initialized to a random 32-bit value".
    xmit_seq: u32,
    /// When bfd.XmitAuthSeq last moved (the plain forms move it at most once a second).
    xmit_seq_moved: Option<Instant>,
    /// bfd.RcvAuthSeq while bfd.AuthSeqKnown is 1.
    rcv_seq: Option<u32>,
    /// RFC 5880 §6.8.1: bfd.AuthSeqKnown "MUST be set to zero if no packets have been received
    /// on this session for at least twice the Detection Time", so a peer that restarted with a
    /// new sequence number is accepted again.
    rcv_seq_forgotten_at: Option<Instant>,
}

impl AuthState {
    pub fn new(auth: Authentication, initial_xmit_seq: u32) -> AuthState {
        AuthState {
            auth,
            xmit_seq: initial_xmit_seq,
            xmit_seq_moved: None,
            rcv_seq: None,
            rcv_seq_forgotten_at: None,
        }
    }

    pub fn authentication(&self) -> &Authentication {
        &self.auth
    }

    /// Signs a packet about to be sent.
    pub fn sign(&mut self, packet: &mut ControlPacket, now: Instant) {
        // RFC 5880 §6.7.3: for the meticulous forms "bfd.XmitAuthSeq MUST be incremented in a
        // circular fashion" for every packet; for the plain forms it "MAY be incremented" —
        // BIRD moves it once a second, which keeps it inside any peer's window however fast
        // the packets go.
        let moved = match self.xmit_seq_moved {
            None => false,
            Some(_) if self.auth.auth_type.meticulous() => true,
            Some(last) => now.saturating_duration_since(last) >= Duration::from_secs(1),
        };
        if moved {
            self.xmit_seq = self.xmit_seq.wrapping_add(1);
        }
        if moved || self.xmit_seq_moved.is_none() {
            self.xmit_seq_moved = Some(now);
        }
        self.auth.sign(packet, self.xmit_seq);
    }

    /// Checks a received packet (RFC 5880 §6.7.3 / §6.7.4, reception). `detect_mult` sizes the
    /// sequence window ("3 * Detect Mult"); `forget_after` is twice the Detection Time that
    /// this packet sets. Nothing changes unless the packet is accepted.
    pub fn check(
        &mut self,
        packet: &ControlPacket,
        detect_mult: u8,
        forget_after: Duration,
        now: Instant,
    ) -> Result<(), AuthFailure> {
        let expected = self.auth.auth_type;
        let Some(section) = packet.auth else { return Err(AuthFailure::Missing(expected)) };
        // "If the Auth Type field does not match bfd.AuthType, the packet MUST be discarded."
        if section.auth_type != expected {
            return Err(AuthFailure::TypeMismatch { received: section.auth_type, expected });
        }
        // "If the Auth Key ID field does not match the ID of a configured authentication key,
        // the packet MUST be discarded."
        if section.key_id != self.auth.key_id {
            return Err(AuthFailure::KeyIdMismatch {
                received: section.key_id,
                expected: self.auth.key_id,
            });
        }
        // "If bfd.AuthSeqKnown is 1, examine the Sequence Number field. For Keyed MD5, if the
        // sequence number lies outside of the range of bfd.RcvAuthSeq to bfd.RcvAuthSeq+(3*Detect
        // Mult) inclusive (when treated as an unsigned 32-bit circular number space), the
        // received packet MUST be discarded. For Meticulous Keyed MD5, if the sequence number
        // lies outside of the range of bfd.RcvAuthSeq+1 to bfd.RcvAuthSeq+(3*Detect Mult)
        // inclusive ..., the received packet MUST be discarded."
        let known = self.rcv_seq.filter(|_| self.rcv_seq_forgotten_at.is_some_and(|t| now < t));
        if let Some(last_seen) = known {
            let first = if expected.meticulous() { last_seen.wrapping_add(1) } else { last_seen };
            let last = last_seen.wrapping_add(3 * u32::from(detect_mult));
            if section.sequence.wrapping_sub(first) > last.wrapping_sub(first) {
                return Err(AuthFailure::Sequence { received: section.sequence, first, last });
            }
        }
        if !self.auth.digest_matches(packet) {
            return Err(AuthFailure::Digest);
        }
        // "If the digests match, the packet MUST be accepted and bfd.RcvAuthSeq MUST be set to
        // the value of the received Sequence Number field." (bfd.AuthSeqKnown is set only now,
        // not before the digest is checked: a forged packet must not move the window.)
        self.rcv_seq = Some(section.sequence);
        self.rcv_seq_forgotten_at = now.checked_add(forget_after);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bfd::packet::{Diagnostic, State};

    fn hex(s: &str) -> Vec<u8> {
        let s: String = s.split_whitespace().collect();
        (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap()).collect()
    }

    fn auth(auth_type: AuthType, key: &str, key_id: u8) -> Authentication {
        Authentication { auth_type, key_id, key: Key::new(auth_type, key.as_bytes()).unwrap() }
    }

    /// The RFC 5880 §4.1 example packet of the packet tests: Up, Poll, Detect Mult 3.
    fn header() -> ControlPacket {
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

    // Vectors laid out by hand from RFC 5880 §4.3 / §4.4 (header, then Auth Type, Auth Len,
    // Key ID, Reserved, Sequence Number 0x00000102, digest), with the digest computed
    // independently of this code: Python's hashlib over the same octets with the key
    // "secret" zero-padded in the digest field.
    const MD5_SIGNED: &str = "21e40330010203040a0b0c0d000493e00000c35000000000
                              02180500 00000102 104d0587cc7b760441d4ea4c94f41282";
    const SHA1_SIGNED: &str = "21e40334010203040a0b0c0d000493e00000c35000000000
                               051c0500 00000102 bf8c17a66496151b1dd22a856afe0d1f5842e4a5";

    #[test]
    fn signing_matches_independently_computed_vectors() {
        for (auth_type, vector) in
            [(AuthType::KeyedMd5, MD5_SIGNED), (AuthType::MeticulousKeyedSha1, SHA1_SIGNED)]
        {
            let mut packet = header();
            auth(auth_type, "secret", 5).sign(&mut packet, 0x102);
            assert_eq!(packet.encode().to_vec(), hex(vector), "{auth_type}");
            let decoded = ControlPacket::decode(&hex(vector)).unwrap();
            assert_eq!(decoded, packet);
            assert!(auth(auth_type, "secret", 5).digest_matches(&decoded));
            assert!(!auth(auth_type, "secreT", 5).digest_matches(&decoded));
        }
    }

    #[test]
    fn any_changed_octet_breaks_the_digest() {
        let key = auth(AuthType::KeyedSha1, "k", 1);
        let mut packet = header();
        key.sign(&mut packet, 1);
        let bytes = packet.encode().to_vec();
        for at in 0..bytes.len() {
            let mut changed = bytes.clone();
            changed[at] ^= 0x01;
            if let Ok(p) = ControlPacket::decode(&changed) {
                assert!(!key.digest_matches(&p), "octet {at} is not covered");
            }
        }
    }

    #[test]
    fn keys_must_fit_the_digest_field() {
        assert!(Key::new(AuthType::KeyedMd5, &[b'a'; 16]).is_some());
        assert!(Key::new(AuthType::KeyedMd5, &[b'a'; 17]).is_none());
        assert!(Key::new(AuthType::KeyedSha1, &[b'a'; 20]).is_some());
        assert!(Key::new(AuthType::KeyedSha1, &[b'a'; 21]).is_none());
        assert!(Key::new(AuthType::KeyedSha1, b"").is_none());
        let key = Key::new(AuthType::KeyedSha1, b"hunter2").unwrap();
        assert!(!format!("{key:?}").contains("hunter2"));
    }

    /// A peer's packet with sequence number `seq`, signed with `key`.
    fn from_peer(key: &Authentication, seq: u32) -> ControlPacket {
        let mut p = header();
        key.sign(&mut p, seq);
        p
    }

    const FORGET: Duration = Duration::from_millis(300);

    #[test]
    fn meticulous_sequence_numbers_must_increase_within_the_window() {
        let key = auth(AuthType::MeticulousKeyedMd5, "pw", 2);
        let mut state = AuthState::new(key.clone(), 0);
        let t0 = Instant::now();
        // Unknown yet: any number is accepted, and becomes bfd.RcvAuthSeq.
        assert_eq!(state.check(&from_peer(&key, u32::MAX - 1), 3, FORGET, t0), Ok(()));
        // The same number again is a replay.
        assert_eq!(
            state.check(&from_peer(&key, u32::MAX - 1), 3, FORGET, t0),
            Err(AuthFailure::Sequence { received: u32::MAX - 1, first: u32::MAX, last: 7 })
        );
        // Up to 3 × Detect Mult ahead, across the wrap.
        assert_eq!(state.check(&from_peer(&key, 7), 3, FORGET, t0), Ok(()));
        assert!(state.check(&from_peer(&key, 17), 3, FORGET, t0).is_err());
        assert_eq!(state.check(&from_peer(&key, 16), 3, FORGET, t0), Ok(()));
        assert!(state.check(&from_peer(&key, 15), 3, FORGET, t0).is_err());
    }

    #[test]
    fn plain_keyed_accepts_a_repeat_but_not_an_older_number() {
        let key = auth(AuthType::KeyedSha1, "pw", 2);
        let mut state = AuthState::new(key.clone(), 0);
        let t0 = Instant::now();
        assert_eq!(state.check(&from_peer(&key, 100), 2, FORGET, t0), Ok(()));
        assert_eq!(state.check(&from_peer(&key, 100), 2, FORGET, t0), Ok(()));
        assert!(state.check(&from_peer(&key, 99), 2, FORGET, t0).is_err());
        assert_eq!(state.check(&from_peer(&key, 106), 2, FORGET, t0), Ok(()));
        assert!(state.check(&from_peer(&key, 113), 2, FORGET, t0).is_err());
    }

    #[test]
    fn a_forged_packet_does_not_move_the_window_and_silence_resets_it() {
        let key = auth(AuthType::MeticulousKeyedSha1, "right", 1);
        let forger = auth(AuthType::MeticulousKeyedSha1, "wrong", 1);
        let mut state = AuthState::new(key.clone(), 0);
        let t0 = Instant::now();
        assert_eq!(state.check(&from_peer(&forger, 50), 3, FORGET, t0), Err(AuthFailure::Digest));
        // Not known yet, so a low number is still fine.
        assert_eq!(state.check(&from_peer(&key, 10), 3, FORGET, t0), Ok(()));
        assert!(state.check(&from_peer(&key, 5), 3, FORGET, t0).is_err());
        // RFC 5880 §6.8.1: after twice the Detection Time without a packet the number is
        // forgotten, so a peer that restarted from another number is heard again.
        assert_eq!(state.check(&from_peer(&key, 5), 3, FORGET, t0 + FORGET), Ok(()));
    }

    #[test]
    fn type_and_key_id_must_match() {
        let key = auth(AuthType::KeyedMd5, "pw", 2);
        let mut state = AuthState::new(key, 0);
        let t0 = Instant::now();
        let other_type = auth(AuthType::MeticulousKeyedMd5, "pw", 2);
        assert_eq!(
            state.check(&from_peer(&other_type, 1), 3, FORGET, t0),
            Err(AuthFailure::TypeMismatch {
                received: AuthType::MeticulousKeyedMd5,
                expected: AuthType::KeyedMd5
            })
        );
        let other_id = auth(AuthType::KeyedMd5, "pw", 3);
        assert_eq!(
            state.check(&from_peer(&other_id, 1), 3, FORGET, t0),
            Err(AuthFailure::KeyIdMismatch { received: 3, expected: 2 })
        );
        assert_eq!(
            state.check(&header(), 3, FORGET, t0),
            Err(AuthFailure::Missing(AuthType::KeyedMd5))
        );
    }

    #[test]
    fn transmit_sequence_numbers() {
        let t0 = Instant::now();
        let seqs = |auth_type: AuthType, gaps_ms: &[u64]| {
            let mut state = AuthState::new(auth(auth_type, "pw", 1), u32::MAX);
            let mut now = t0;
            let mut out = Vec::new();
            for gap in gaps_ms {
                now += Duration::from_millis(*gap);
                let mut p = header();
                state.sign(&mut p, now);
                out.push(p.auth.unwrap().sequence);
            }
            out
        };
        // Meticulous: one more for every packet, wrapping.
        assert_eq!(seqs(AuthType::MeticulousKeyedSha1, &[0, 10, 10]), vec![u32::MAX, 0, 1]);
        // Plain: at most once a second.
        assert_eq!(
            seqs(AuthType::KeyedMd5, &[0, 300, 300, 400, 100]),
            vec![u32::MAX, u32::MAX, u32::MAX, 0, 0]
        );
    }
}
