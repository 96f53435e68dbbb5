//! Arbitrary bytes as a received BFD Control packet. Besides "never panics": whatever the
//! decoder accepts re-encodes to the same first 24 octets (flags other than A and M kept,
//! Length normalised to 24) and decodes to the same packet; and feeding it to a session never
//! panics either.

#![no_main]

use libfuzzer_sys::fuzz_target;
use std::time::{Duration, Instant};
use uplink::bfd::packet::ControlPacket;
use uplink::bfd::session::{Event, Session, SessionConfig};

fuzz_target!(|data: &[u8]| {
    let Ok(packet) = ControlPacket::decode(data) else { return };
    let encoded = packet.encode();
    assert_eq!(ControlPacket::decode(&encoded), Ok(packet));
    assert_eq!(encoded[..3], data[..3]);
    assert_eq!(encoded[4..], data[4..24]);

    let config = SessionConfig {
        desired_min_tx: Duration::from_millis(10),
        required_min_rx: Duration::from_millis(10),
        detect_mult: 3,
        passive: false,
    };
    let now = Instant::now();
    let mut session = Session::new(config, packet.your_discriminator.max(1), 1, now);
    session.handle(Event::Received(packet), now);
    if let Some(next) = session.next_deadline() {
        session.handle(Event::Tick, next);
    }
});
