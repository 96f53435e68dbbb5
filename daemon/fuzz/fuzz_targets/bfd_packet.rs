//! Arbitrary bytes as a received BFD Control packet. Besides "never panics": whatever the
//! decoder accepts re-encodes to the same header octets (flags other than M kept, Length
//! normalised to 24 without authentication) and, with an authentication section, to exactly
//! the Length octets received, which is what the digest covers; it decodes to the same packet;
//! and feeding it to a plain and to an authenticated session never panics either.

#![no_main]

use libfuzzer_sys::fuzz_target;
use std::time::{Duration, Instant};
use uplink::bfd::auth::{Authentication, Key};
use uplink::bfd::packet::{AuthType, ControlPacket};
use uplink::bfd::session::{Event, Session, SessionConfig};

fuzz_target!(|data: &[u8]| {
    let Ok(packet) = ControlPacket::decode(data) else { return };
    let encoded = packet.encode();
    assert_eq!(ControlPacket::decode(&encoded), Ok(packet));
    assert_eq!(encoded[..3], data[..3]);
    assert_eq!(encoded[4..24], data[4..24]);
    if packet.auth.is_some() {
        assert_eq!(&encoded[..], &data[..usize::from(data[3])]);
    }

    let config = SessionConfig {
        desired_min_tx: Duration::from_millis(10),
        required_min_rx: Duration::from_millis(10),
        detect_mult: 3,
        passive: false,
    };
    let now = Instant::now();
    let discriminator = packet.your_discriminator.max(1);
    let auth_type = packet.auth.map_or(AuthType::KeyedSha1, |a| a.auth_type);
    let Some(key) = Key::new(auth_type, b"fuzz") else { return };
    let key_id = packet.auth.map_or(0, |a| a.key_id);
    for auth in [None, Some(Authentication { auth_type, key_id, key })] {
        let mut session = Session::new(config, discriminator, 1, now);
        if let Some(auth) = auth {
            session = session.authenticated(auth, 1);
        }
        session.handle(Event::Received(packet), now);
        if let Some(next) = session.next_deadline() {
            session.handle(Event::Tick, next);
        }
    }
});
