//! The envelope of a membership message between the nodes' uplinks: the message, then an
//! HMAC-SHA256 (RFC 2104) of a version byte and the message under the key the nodes share
//! (MetalLB's memberlist secret). A datagram that is too long, of another version or whose
//! tag does not verify is refused before the membership protocol reads a byte of it.

use ring::hmac;

/// The envelope's version: the first byte, covered by the tag.
const VERSION: u8 = 1;
/// Bytes of the tag (HMAC-SHA256, untruncated).
const TAG: usize = 32;
/// Bytes the envelope adds to a message.
pub const OVERHEAD: usize = 1 + TAG;

/// The longest datagram accepted or sent: one unfragmented Ethernet frame's UDP payload, as
/// the membership's messages are sized for.
pub const MAX_DATAGRAM: usize = 1400;

/// Why a datagram was refused: each is counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    TooLong,
    TooShort,
    OtherVersion,
    /// The tag does not verify: another key, or a forged or damaged message.
    WrongTag,
}

/// The shared key.
pub struct Key(hmac::Key);

impl Key {
    pub fn new(secret: &[u8]) -> Self {
        Key(hmac::Key::new(hmac::HMAC_SHA256, secret))
    }

    /// The datagram carrying `message`, or `None` if it would be longer than
    /// [`MAX_DATAGRAM`].
    pub fn seal(&self, message: &[u8]) -> Option<Vec<u8>> {
        let length = message.len() + OVERHEAD;
        if length > MAX_DATAGRAM {
            return None;
        }
        let mut datagram = Vec::with_capacity(length);
        datagram.push(VERSION);
        datagram.extend_from_slice(message);
        let tag = hmac::sign(&self.0, &datagram);
        datagram.extend_from_slice(tag.as_ref());
        Some(datagram)
    }

    /// The message a datagram carries, once its tag verifies (in constant time).
    pub fn open<'a>(&self, datagram: &'a [u8]) -> Result<&'a [u8], Refused> {
        if datagram.len() > MAX_DATAGRAM {
            return Err(Refused::TooLong);
        }
        let split =
            datagram.len().checked_sub(TAG).filter(|&at| at >= 1).ok_or(Refused::TooShort)?;
        let (signed, tag) = datagram.split_at(split);
        if signed.first() != Some(&VERSION) {
            return Err(Refused::OtherVersion);
        }
        hmac::verify(&self.0, signed, tag).map_err(|_| Refused::WrongTag)?;
        Ok(signed.get(1..).unwrap_or_default())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sealed_message_opens_with_the_same_key_only() {
        let key = Key::new(b"the fleet's memberlist secret");
        let datagram = key.seal(b"ping wk2").unwrap();
        assert_eq!(key.open(&datagram), Ok(&b"ping wk2"[..]));
        assert_eq!(Key::new(b"another secret").open(&datagram), Err(Refused::WrongTag));
        // Every single bit flipped is refused.
        for at in 0..datagram.len() {
            let mut damaged = datagram.clone();
            if let Some(byte) = damaged.get_mut(at) {
                *byte ^= 1;
            }
            assert!(key.open(&damaged).is_err(), "byte {at} flipped opened");
        }
    }

    #[test]
    fn sizes_and_versions_are_bounded() {
        let key = Key::new(b"k");
        assert_eq!(key.open(&[]), Err(Refused::TooShort));
        assert_eq!(key.open(&[0u8; TAG]), Err(Refused::TooShort));
        assert_eq!(key.open(&vec![VERSION; MAX_DATAGRAM + 1]), Err(Refused::TooLong));
        let mut other = key.seal(b"x").unwrap();
        if let Some(first) = other.first_mut() {
            *first = 2;
        }
        assert_eq!(key.open(&other), Err(Refused::OtherVersion));
        assert!(key.seal(&vec![0; MAX_DATAGRAM]).is_none());
        assert_eq!(key.open(&key.seal(b"").unwrap()), Ok(&b""[..]));
    }
}
