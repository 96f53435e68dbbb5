//! Arbitrary bytes as a BGP byte stream: framed by `frame_len`, each complete frame decoded by
//! `decode_message`, UPDATE bodies handed on to `decode_update` under the session context the
//! first byte selects. Besides "never panics":
//! - a frame that `frame_len` accepted never fails `decode_message` with a header error
//!   (both check the same header, RFC 4271 §6.1);
//! - an OPEN, NOTIFICATION or ROUTE-REFRESH that decodes survives encode + decode unchanged.

#![no_main]

use libfuzzer_sys::fuzz_target;
use uplink::bgp::wire::attributes::Family;
use uplink::bgp::wire::header::{HEADER_LEN, MAX_MESSAGE_LEN};
use uplink::bgp::wire::message::{
    decode_message, encode_notification, encode_open, encode_route_refresh, frame_len, Message,
};
use uplink::bgp::wire::notification::code;
use uplink::bgp::wire::update::{decode_update, UpdateContext};

/// Frames `encoded` (one message the encoder wrote) and decodes it again.
fn reread(encoded: &[u8]) -> Message<'_> {
    assert!(encoded.len() <= MAX_MESSAGE_LEN, "encoder wrote {} octets", encoded.len());
    assert_eq!(frame_len(encoded), Ok(Some(encoded.len())), "encoder output does not frame");
    decode_message(encoded).expect("an encoded message must decode")
}

fuzz_target!(|data: &[u8]| {
    let Some((&selector, mut stream)) = data.split_first() else { return };
    let families = if selector & 4 != 0 {
        vec![Family::IPV4_UNICAST]
    } else {
        vec![Family::IPV4_UNICAST, Family::IPV6_UNICAST]
    };
    let ctx = UpdateContext { four_octet_as: selector & 1 != 0, ebgp: selector & 2 != 0, families };

    // Like the session reader: take frames off the front until one is incomplete or bad.
    while let Ok(Some(len)) = frame_len(stream) {
        assert!((HEADER_LEN..=MAX_MESSAGE_LEN).contains(&len), "frame_len returned {len}");
        let (frame, rest) = stream.split_at_checked(len).expect("frame_len beyond the buffer");
        stream = rest;
        let message = match decode_message(frame) {
            Ok(message) => message,
            Err(e) => {
                assert_ne!(
                    e.notification.code,
                    code::MESSAGE_HEADER_ERROR,
                    "frame_len accepted a header that decode_message rejects: {e}"
                );
                // The session would send the NOTIFICATION and close.
                let _ = e.to_string();
                return;
            }
        };
        match message {
            Message::Open(open) => {
                let _ = (open.peer_asn(), open.families(), open.graceful_restart());
                let mut out = Vec::new();
                encode_open(&open, &mut out);
                assert_eq!(reread(&out), Message::Open(open));
            }
            Message::Update(body) => {
                if let Err(e) = decode_update(body, &ctx) {
                    let _ = format!("{e:?}");
                }
            }
            Message::Notification(n) => {
                let _ = (n.to_string(), n.shutdown_communication());
                let mut out = Vec::new();
                encode_notification(&n, &mut out);
                assert_eq!(reread(&out), Message::Notification(n));
            }
            Message::RouteRefresh(refresh) => {
                let mut out = Vec::new();
                encode_route_refresh(&refresh, &mut out);
                assert_eq!(reread(&out), Message::RouteRefresh(refresh));
            }
            Message::Keepalive => {}
        }
    }
});
