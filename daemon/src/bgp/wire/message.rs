//! Message framing on the byte stream and the non-UPDATE messages (RFC 4271 §4, §6.1;
//! RFC 2918 §3 for ROUTE-REFRESH). UPDATE bodies are handed out undecoded.

use std::fmt;

use super::header::{
    begin_message, finish_message, MessageType, HEADER_LEN, MARKER, MAX_MESSAGE_LEN,
};
use super::notification::{code, header_subcode, Notification};
use super::open::Open;

/// Smallest OPEN: header plus the 10-octet fixed part (RFC 4271 §4.2).
pub const MIN_OPEN_LEN: usize = 29;
/// Smallest UPDATE: header plus two 2-octet length fields (RFC 4271 §4.3).
pub const MIN_UPDATE_LEN: usize = 23;
/// Smallest NOTIFICATION: header plus code and subcode (RFC 4271 §4.5).
pub const MIN_NOTIFICATION_LEN: usize = 21;
/// A KEEPALIVE is the header alone (RFC 4271 §4.4).
pub const KEEPALIVE_LEN: usize = HEADER_LEN;
/// A ROUTE-REFRESH is the header plus AFI, subtype and SAFI (RFC 2918 §3).
pub const ROUTE_REFRESH_LEN: usize = 23;

/// A decode error together with the NOTIFICATION that RFC 4271 §6 says to send for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MessageError {
    pub notification: Notification,
    pub reason: String,
}

impl MessageError {
    pub fn new(notification: Notification, reason: impl Into<String>) -> Self {
        Self { notification, reason: reason.into() }
    }

    fn header(subcode: u8, data: Vec<u8>, reason: impl Into<String>) -> Self {
        Self::new(Notification::new(code::MESSAGE_HEADER_ERROR, subcode, data), reason)
    }

    /// RFC 4271 §6.1: Bad Message Length, data = the erroneous Length field.
    fn bad_length(len: u16, reason: impl Into<String>) -> Self {
        Self::header(header_subcode::BAD_MESSAGE_LENGTH, len.to_be_bytes().to_vec(), reason)
    }
}

impl fmt::Display for MessageError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.reason, self.notification)
    }
}

impl std::error::Error for MessageError {}

/// A ROUTE-REFRESH message body (RFC 2918 §3; the subtype is RFC 7313 §3's, 0 = normal).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RouteRefresh {
    pub afi: u16,
    pub subtype: u8,
    pub safi: u8,
}

/// One decoded BGP message. UPDATE bodies are borrowed from the frame and decoded by the
/// UPDATE codec.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Message<'a> {
    Open(Open),
    /// The UPDATE body: the octets after the header.
    Update(&'a [u8]),
    Notification(Notification),
    Keepalive,
    RouteRefresh(RouteRefresh),
}

impl Message<'_> {
    pub fn kind(&self) -> MessageType {
        match self {
            Message::Open(_) => MessageType::Open,
            Message::Update(_) => MessageType::Update,
            Message::Notification(_) => MessageType::Notification,
            Message::Keepalive => MessageType::Keepalive,
            Message::RouteRefresh(_) => MessageType::RouteRefresh,
        }
    }
}

/// Checks the header fields (RFC 4271 §6.1) and returns the message length and type.
/// `head` holds at least the first 19 octets.
fn check_header(head: &[u8]) -> Result<(usize, MessageType), MessageError> {
    check_marker(head)?;
    let len_field = match (head.get(16), head.get(17)) {
        (Some(&hi), Some(&lo)) => u16::from_be_bytes([hi, lo]),
        _ => return Err(MessageError::bad_length(0, "header is truncated")),
    };
    let len = usize::from(len_field);
    // RFC 4271 §6.1: "if the Length field of the message header is less than 19 or greater
    // than 4096 ... the Error Subcode MUST be set to Bad Message Length".
    if !(HEADER_LEN..=MAX_MESSAGE_LEN).contains(&len) {
        return Err(MessageError::bad_length(len_field, format!("message length {len}")));
    }
    let type_code = head.get(18).copied().unwrap_or_default();
    // RFC 4271 §6.1: an unrecognised Type is Bad Message Type, data = the Type field.
    let kind = MessageType::from_code(type_code).ok_or_else(|| {
        MessageError::header(
            header_subcode::BAD_MESSAGE_TYPE,
            vec![type_code],
            format!("unknown message type {type_code}"),
        )
    })?;
    // RFC 4271 §6.1: the Length is too small or too large for the type.
    let fits = match kind {
        MessageType::Open => len >= MIN_OPEN_LEN,
        MessageType::Update => len >= MIN_UPDATE_LEN,
        MessageType::Notification => len >= MIN_NOTIFICATION_LEN,
        MessageType::Keepalive => len == KEEPALIVE_LEN,
        MessageType::RouteRefresh => len == ROUTE_REFRESH_LEN,
    };
    if !fits {
        return Err(MessageError::bad_length(
            len_field,
            format!("message length {len} is invalid for {kind:?}"),
        ));
    }
    Ok((len, kind))
}

/// RFC 4271 §6.1: a marker that is not all ones is Connection Not Synchronized. Checks as
/// many marker octets as `buf` holds so a bad stream is detected early.
fn check_marker(buf: &[u8]) -> Result<(), MessageError> {
    if buf.iter().zip(MARKER.iter()).any(|(got, want)| got != want) {
        return Err(MessageError::header(
            header_subcode::CONNECTION_NOT_SYNCHRONIZED,
            Vec::new(),
            "message marker is not all ones",
        ));
    }
    Ok(())
}

/// The length of the first message in `buf` when it holds all of it, `None` when more
/// octets are needed, or the header error to send (RFC 4271 §6.1).
pub fn frame_len(buf: &[u8]) -> Result<Option<usize>, MessageError> {
    check_marker(buf)?;
    if buf.len() < HEADER_LEN {
        return Ok(None);
    }
    let (len, _) = check_header(buf)?;
    Ok((buf.len() >= len).then_some(len))
}

/// Decodes one complete message, `frame` being exactly the octets that [`frame_len`]
/// measured (header included).
pub fn decode_message(frame: &[u8]) -> Result<Message<'_>, MessageError> {
    if frame.len() < HEADER_LEN {
        check_marker(frame)?;
        let len = u16::try_from(frame.len()).unwrap_or_default();
        return Err(MessageError::bad_length(len, format!("frame of {} octets", frame.len())));
    }
    let (len, kind) = check_header(frame)?;
    if len != frame.len() {
        let field = u16::try_from(len).unwrap_or_default();
        return Err(MessageError::bad_length(
            field,
            format!("length field {len} but the frame holds {} octets", frame.len()),
        ));
    }
    let body = frame.get(HEADER_LEN..).unwrap_or_default();
    Ok(match kind {
        MessageType::Open => Message::Open(Open::decode(body)?),
        MessageType::Update => Message::Update(body),
        MessageType::Notification => {
            Message::Notification(Notification::decode(body).ok_or_else(|| {
                MessageError::bad_length(
                    u16::try_from(len).unwrap_or_default(),
                    "NOTIFICATION body is truncated",
                )
            })?)
        }
        MessageType::Keepalive => Message::Keepalive,
        MessageType::RouteRefresh => match *body {
            [a0, a1, subtype, safi] => Message::RouteRefresh(RouteRefresh {
                afi: u16::from_be_bytes([a0, a1]),
                subtype,
                safi,
            }),
            _ => {
                return Err(MessageError::bad_length(
                    u16::try_from(len).unwrap_or_default(),
                    "ROUTE-REFRESH body is not 4 octets",
                ))
            }
        },
    })
}

/// Appends one OPEN message to `out`.
pub fn encode_open(open: &Open, out: &mut Vec<u8>) {
    let start = begin_message(out, MessageType::Open);
    open.encode_body(out);
    finish_message(out, start);
}

/// Appends one KEEPALIVE message to `out` (RFC 4271 §4.4).
pub fn encode_keepalive(out: &mut Vec<u8>) {
    let start = begin_message(out, MessageType::Keepalive);
    finish_message(out, start);
}

/// Appends one NOTIFICATION message to `out`. Data that would push the message past 4096
/// octets is cut (RFC 4271 §4.1 maximum).
pub fn encode_notification(notification: &Notification, out: &mut Vec<u8>) {
    let start = begin_message(out, MessageType::Notification);
    out.push(notification.code);
    out.push(notification.subcode);
    let room = MAX_MESSAGE_LEN.saturating_sub(MIN_NOTIFICATION_LEN);
    let data = notification.data.get(..room).unwrap_or(&notification.data);
    out.extend_from_slice(data);
    finish_message(out, start);
}

/// Appends one ROUTE-REFRESH message to `out` (RFC 2918 §3).
pub fn encode_route_refresh(refresh: &RouteRefresh, out: &mut Vec<u8>) {
    let start = begin_message(out, MessageType::RouteRefresh);
    out.extend_from_slice(&refresh.afi.to_be_bytes());
    out.push(refresh.subtype);
    out.push(refresh.safi);
    finish_message(out, start);
}

#[cfg(test)]
mod tests {
    use std::net::Ipv4Addr;

    use netgauze_bgp_pkt::capabilities::BgpCapability;
    use netgauze_bgp_pkt::wire::deserializer::BgpParsingContext;
    use netgauze_bgp_pkt::BgpMessage;
    use netgauze_parse_utils::reader::SliceReader;
    use netgauze_parse_utils::traits::ParseFromWithOneInput;

    use super::*;
    use crate::bgp::wire::attributes::Family;
    use crate::bgp::wire::notification::{cease_subcode, open_subcode};
    use crate::bgp::wire::open::{Capability, GracefulRestart, AS_TRANS};

    fn hex(s: &str) -> Vec<u8> {
        let s: String = s.chars().filter(|c| !c.is_whitespace()).collect();
        (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap()).collect()
    }

    /// OPEN sent by FRR 8.4 bgpd (AS 4200000001, router-id 10.0.0.1, timers 3 9, graceful
    /// restart, IPv4 and IPv6 unicast), captured from the wire. FRR puts each capability in
    /// its own optional parameter.
    const FRR_OPEN: &str = "ffffffffffffffffffffffffffffffff007a01045ba000090a0000015d\
        0206010400010001 0206010400020001 02028000 02020200 02024600 0206 4104fa56ea01\
        0202 0600 020a 4508 00010101 00020101 0207 4905 0363617000\
        020c 400a c078 00010100 00020100 0210 470e 00010180000000 00020180000000";
    /// ROUTE-REFRESH for IPv6 unicast sent by FRR on `clear bgp ipv6 unicast … soft in`.
    const FRR_ROUTE_REFRESH: &str = "ffffffffffffffffffffffffffffffff00170500020001";
    /// NOTIFICATION sent by FRR on `neighbor … shutdown message maintenance window`.
    const FRR_SHUTDOWN: &str =
        "ffffffffffffffffffffffffffffffff0028030602126d61696e74656e616e63652077696e646f77";
    const KEEPALIVE: &str = "ffffffffffffffffffffffffffffffff001304";

    fn oracle(frame: &[u8]) -> BgpMessage {
        let mut reader = SliceReader::new(frame);
        let mut ctx = BgpParsingContext::default();
        let msg = BgpMessage::parse(&mut reader, &mut ctx).unwrap();
        assert!(reader.is_empty(), "oracle left octets unread");
        msg
    }

    fn decode_one(frame: &[u8]) -> Message<'_> {
        assert_eq!(frame_len(frame), Ok(Some(frame.len())));
        decode_message(frame).unwrap()
    }

    /// Compares our OPEN with netgauze's decode of the same octets.
    fn check_open_against_oracle(ours: &Open, frame: &[u8]) {
        let BgpMessage::Open(theirs) = oracle(frame) else { panic!("not an OPEN") };
        assert_eq!(theirs.version(), ours.version);
        assert_eq!(theirs.my_as(), ours.my_as);
        assert_eq!(theirs.hold_time(), ours.hold_time);
        assert_eq!(theirs.bgp_id(), ours.bgp_id);
        assert_eq!(theirs.my_asn4(), ours.peer_asn());
        let caps = theirs.capabilities();
        assert_eq!(caps.len(), ours.capabilities.len());
        for (t, o) in caps.iter().zip(&ours.capabilities) {
            match (t, o) {
                (BgpCapability::MultiProtocolExtensions(mp), Capability::MultiProtocol(f)) => {
                    let expected = match *f {
                        Family::IPV4_UNICAST => "Ipv4Unicast",
                        Family::IPV6_UNICAST => "Ipv6Unicast",
                    };
                    assert_eq!(format!("{:?}", mp.address_type()), expected);
                }
                (BgpCapability::RouteRefresh, Capability::RouteRefresh) => {}
                (BgpCapability::EnhancedRouteRefresh, Capability::EnhancedRouteRefresh) => {}
                (BgpCapability::FourOctetAs(c), Capability::FourOctetAs(asn)) => {
                    assert_eq!(c.asn4(), *asn)
                }
                (BgpCapability::GracefulRestartCapability(c), Capability::GracefulRestart(gr)) => {
                    assert_eq!(c.restart(), gr.restart_state);
                    assert_eq!(c.graceful_notification(), gr.notification);
                    assert_eq!(c.time(), gr.restart_time);
                    assert_eq!(c.address_families().len(), gr.families.len());
                }
                (_, Capability::Unknown { .. }) => {}
                (t, o) => panic!("capability mismatch: {t:?} vs {o:?}"),
            }
        }
    }

    /// Compares our NOTIFICATION with netgauze's decode: same variant names and data.
    fn check_notification_against_oracle(ours: &Notification, frame: &[u8]) {
        let BgpMessage::Notification(theirs) = oracle(frame) else { panic!("not a NOTIFICATION") };
        let debug = format!("{theirs:?}");
        let expected_data = format!("{:?}", ours.data);
        assert!(debug.contains(&expected_data), "{debug} lacks data {expected_data}");
        let code_variant = match ours.code {
            1 => "MessageHeaderError",
            2 => "OpenMessageError",
            3 => "UpdateMessageError",
            4 => "HoldTimerExpiredError",
            5 => "FiniteStateMachineError",
            6 => "CeaseError",
            7 => "RouteRefreshError",
            _ => unreachable!(),
        };
        assert!(debug.starts_with(code_variant), "{debug} is not {code_variant}");
        // netgauze names subcodes in CamelCase; compare with ours without spaces and dashes.
        if let Some(sub) = ours.subcode_name().filter(|s| *s != "Unknown") {
            let squashed: String =
                sub.chars().filter(|c| c.is_ascii_alphanumeric()).collect::<String>();
            let squashed_debug: String =
                debug.chars().filter(|c| c.is_ascii_alphanumeric()).collect();
            assert!(
                squashed_debug.to_lowercase().contains(&squashed.to_lowercase()),
                "{debug} lacks subcode {sub}"
            );
        }
    }

    fn gr() -> GracefulRestart {
        GracefulRestart {
            restart_state: true,
            notification: true,
            restart_time: 120,
            families: vec![(Family::IPV4_UNICAST, false), (Family::IPV6_UNICAST, false)],
        }
    }

    #[test]
    fn frr_open_vector() {
        let frame = hex(FRR_OPEN);
        let Message::Open(open) = decode_one(&frame) else { panic!("not an OPEN") };
        assert_eq!(open.version, 4);
        assert_eq!(open.my_as, AS_TRANS);
        assert_eq!(open.hold_time, 9);
        assert_eq!(open.bgp_id, Ipv4Addr::new(10, 0, 0, 1));
        assert_eq!(open.four_octet_asn(), Some(4_200_000_001));
        assert_eq!(open.peer_asn(), 4_200_000_001);
        assert_eq!(open.families(), [Family::IPV4_UNICAST, Family::IPV6_UNICAST]);
        assert!(open.supports_route_refresh());
        assert!(open.supports_enhanced_route_refresh());
        assert_eq!(open.graceful_restart(), Some(&gr()));
        // Cisco route refresh (128), Extended Message (6), ADD-PATH (69), FQDN (73) and LLGR
        // (71) are kept as Unknown.
        let unknown: Vec<u8> = open
            .capabilities
            .iter()
            .filter_map(|c| match c {
                Capability::Unknown { code, .. } => Some(*code),
                _ => None,
            })
            .collect();
        assert_eq!(unknown, [128, 6, 69, 73, 71]);
        check_open_against_oracle(&open, &frame);

        // Our encoding puts every capability in one parameter; it decodes to the same OPEN
        // and netgauze agrees.
        let mut out = Vec::new();
        encode_open(&open, &mut out);
        assert_eq!(decode_one(&out), Message::Open(open.clone()));
        check_open_against_oracle(&open, &out);
    }

    #[test]
    fn frr_route_refresh_vector() {
        let frame = hex(FRR_ROUTE_REFRESH);
        let rr = RouteRefresh { afi: 2, subtype: 0, safi: 1 };
        assert_eq!(decode_one(&frame), Message::RouteRefresh(rr));
        let mut out = Vec::new();
        encode_route_refresh(&rr, &mut out);
        assert_eq!(out, frame);
        let BgpMessage::RouteRefresh(theirs) = oracle(&out) else { panic!() };
        assert_eq!(format!("{:?}", theirs.address_type()), "Ipv6Unicast");
    }

    #[test]
    fn frr_shutdown_notification_vector() {
        let frame = hex(FRR_SHUTDOWN);
        let Message::Notification(n) = decode_one(&frame) else { panic!() };
        assert_eq!((n.code, n.subcode), (6, cease_subcode::ADMINISTRATIVE_SHUTDOWN));
        assert_eq!(n.shutdown_communication().as_deref(), Some("maintenance window"));
        assert_eq!(n.to_string(), "Cease/Administrative Shutdown \"maintenance window\"");
        let mut out = Vec::new();
        encode_notification(
            &Notification::cease_with_communication(2, "maintenance window"),
            &mut out,
        );
        assert_eq!(out, frame);
        check_notification_against_oracle(&n, &out);
    }

    #[test]
    fn keepalive_vector() {
        let frame = hex(KEEPALIVE);
        assert_eq!(decode_one(&frame), Message::Keepalive);
        let mut out = Vec::new();
        encode_keepalive(&mut out);
        assert_eq!(out, frame);
        assert!(matches!(oracle(&out), BgpMessage::KeepAlive));
    }

    #[test]
    fn update_body_is_borrowed() {
        // An empty UPDATE (End-of-RIB for IPv4 unicast, RFC 4724 §2).
        let frame = hex("ffffffffffffffffffffffffffffffff001702 0000 0000");
        assert_eq!(decode_one(&frame), Message::Update(&[0, 0, 0, 0]));
    }

    #[test]
    fn encoded_opens_round_trip_and_match_oracle() {
        let id = Ipv4Addr::new(192, 0, 2, 1);
        let opens = [
            Open::new(65001, 90, id, vec![]),
            Open::new(
                4_200_000_001,
                0,
                id,
                vec![
                    Capability::MultiProtocol(Family::IPV4_UNICAST),
                    Capability::MultiProtocol(Family::IPV6_UNICAST),
                    Capability::RouteRefresh,
                    Capability::EnhancedRouteRefresh,
                    Capability::FourOctetAs(4_200_000_001),
                    Capability::GracefulRestart(gr()),
                    Capability::Unknown { code: 73, value: b"\x04node\x00".to_vec() },
                ],
            ),
            Open::new(
                65535,
                3,
                id,
                vec![Capability::GracefulRestart(GracefulRestart {
                    restart_state: false,
                    notification: false,
                    restart_time: 4095,
                    families: vec![(Family::IPV6_UNICAST, true)],
                })],
            ),
        ];
        for open in opens {
            let mut out = Vec::new();
            encode_open(&open, &mut out);
            assert_eq!(decode_one(&out), Message::Open(open.clone()));
            check_open_against_oracle(&open, &out);
        }
        assert_eq!(Open::new(4_200_000_001, 0, id, vec![]).my_as, AS_TRANS);
        assert_eq!(Open::new(65535, 0, id, vec![]).my_as, 65535);
    }

    #[test]
    fn encoded_notifications_match_oracle() {
        let cases = [
            Notification::new(1, 1, vec![]),
            Notification::new(1, 2, vec![0, 18]),
            Notification::new(1, 3, vec![9]),
            Notification::new(2, 1, vec![0, 4]),
            Notification::new(2, 2, vec![]),
            Notification::new(2, 3, vec![]),
            Notification::new(2, 6, vec![]),
            Notification::new(2, 7, vec![1, 4, 0, 1, 0, 1]),
            Notification::new(3, 1, vec![]),
            Notification::new(4, 0, vec![]),
            Notification::new(5, 1, vec![]),
            Notification::new(5, 3, vec![]),
            Notification::cease(cease_subcode::PEER_DECONFIGURED),
            Notification::cease_with_communication(4, "reset"),
            Notification::cease(cease_subcode::CONNECTION_COLLISION_RESOLUTION),
            Notification::cease(cease_subcode::OUT_OF_RESOURCES),
        ];
        for n in cases {
            let mut out = Vec::new();
            encode_notification(&n, &mut out);
            assert_eq!(decode_one(&out), Message::Notification(n.clone()));
            check_notification_against_oracle(&n, &out);
        }
    }

    #[test]
    fn encoders_append_to_a_shared_buffer() {
        let mut out = Vec::new();
        encode_keepalive(&mut out);
        encode_route_refresh(&RouteRefresh { afi: 1, subtype: 0, safi: 1 }, &mut out);
        encode_keepalive(&mut out);
        let first = frame_len(&out).unwrap().unwrap();
        assert_eq!(first, 19);
        let second = frame_len(&out[first..]).unwrap().unwrap();
        assert_eq!(second, 23);
        assert_eq!(decode_message(&out[first + second..]).unwrap(), Message::Keepalive);
    }

    #[test]
    fn frame_len_needs_more_octets() {
        let frame = hex(FRR_OPEN);
        for cut in 0..frame.len() {
            assert_eq!(frame_len(&frame[..cut]), Ok(None), "cut at {cut}");
        }
        let mut two = frame.clone();
        two.extend_from_slice(&hex(KEEPALIVE));
        assert_eq!(frame_len(&two), Ok(Some(frame.len())));
    }

    fn header_error(buf: &[u8]) -> (u8, u8, Vec<u8>) {
        let err = frame_len(buf).unwrap_err();
        assert_eq!(decode_message(buf).unwrap_err().notification, err.notification);
        (err.notification.code, err.notification.subcode, err.notification.data)
    }

    #[test]
    fn header_errors_carry_rfc4271_data() {
        // Bad marker, detected from the first octet on.
        assert_eq!(header_error(&[0xfe]), (1, 1, vec![]));
        let mut frame = hex(KEEPALIVE);
        frame[15] = 0;
        assert_eq!(header_error(&frame), (1, 1, vec![]));
        // Length below 19, above 4096.
        let mut frame = hex(KEEPALIVE);
        frame[17] = 18;
        assert_eq!(header_error(&frame), (1, 2, vec![0, 18]));
        frame[16..18].copy_from_slice(&4097u16.to_be_bytes());
        assert_eq!(header_error(&frame), (1, 2, vec![0x10, 0x01]));
        frame[16..18].copy_from_slice(&0u16.to_be_bytes());
        assert_eq!(header_error(&frame), (1, 2, vec![0, 0]));
        // Unknown type.
        let mut frame = hex(KEEPALIVE);
        frame[18] = 9;
        assert_eq!(header_error(&frame), (1, 3, vec![9]));
        frame[18] = 0;
        assert_eq!(header_error(&frame), (1, 3, vec![0]));
    }

    #[test]
    fn per_type_length_checks() {
        let with = |len: u16, kind: u8| {
            let mut m = MARKER.to_vec();
            m.extend_from_slice(&len.to_be_bytes());
            m.push(kind);
            m.resize(usize::from(len), 0);
            m
        };
        for (kind, bad) in [(1, 28), (2, 22), (3, 20), (4, 20), (5, 22), (5, 24)] {
            let frame = with(bad, kind);
            assert_eq!(header_error(&frame), (1, 2, bad.to_be_bytes().to_vec()), "type {kind}");
        }
        assert_eq!(
            decode_message(&with(21, 3)).unwrap(),
            Message::Notification(Notification::new(0, 0, vec![]))
        );
        assert_eq!(decode_message(&with(23, 2)).unwrap(), Message::Update(&[0, 0, 0, 0]));
    }

    #[test]
    fn decode_rejects_frame_length_mismatch() {
        let mut frame = hex(KEEPALIVE);
        frame.push(0);
        let err = decode_message(&frame).unwrap_err();
        assert_eq!((err.notification.code, err.notification.subcode), (1, 2));
        assert!(decode_message(&[]).is_err());
        assert!(decode_message(&MARKER).is_err());
    }

    fn open_frame(body: &[u8]) -> Vec<u8> {
        let mut out = MARKER.to_vec();
        out.extend_from_slice(&u16::try_from(19 + body.len()).unwrap().to_be_bytes());
        out.push(1);
        out.extend_from_slice(body);
        out
    }

    fn open_error(body: &[u8]) -> Notification {
        decode_message(&open_frame(body)).unwrap_err().notification
    }

    const FIXED: [u8; 9] = [4, 0xfd, 0xe9, 0, 90, 192, 0, 2, 1];

    fn body(opt: &[u8]) -> Vec<u8> {
        let mut b = FIXED.to_vec();
        b.push(u8::try_from(opt.len()).unwrap());
        b.extend_from_slice(opt);
        b
    }

    #[test]
    fn open_errors_map_to_subcodes() {
        // RFC 4271 §6.2: version, data = highest supported version.
        let mut b = body(&[]);
        b[0] = 3;
        assert_eq!(
            open_error(&b),
            Notification::new(2, open_subcode::UNSUPPORTED_VERSION_NUMBER, vec![0, 4])
        );
        // Optional parameter type 1 (authentication) is unsupported.
        let n = open_error(&body(&[1, 2, 0, 0]));
        assert_eq!((n.code, n.subcode), (2, open_subcode::UNSUPPORTED_OPTIONAL_PARAMETER));
        // Capability length running past its parameter.
        let n = open_error(&body(&[2, 4, 65, 4, 0, 0]));
        assert_eq!((n.code, n.subcode), (2, 0));
        // Capability header cut in half.
        let n = open_error(&body(&[2, 1, 65]));
        assert_eq!((n.code, n.subcode), (2, 0));
        // Parameter length running past Opt Parm Len.
        let n = open_error(&body(&[2, 9, 2, 0]));
        assert_eq!((n.code, n.subcode), (2, 0));
        // Opt Parm Len lying: larger and smaller than what follows.
        let mut b = body(&[2, 2, 2, 0]);
        b[9] = 10;
        assert_eq!(open_error(&b).code, 2);
        b[9] = 2;
        assert_eq!(open_error(&b).code, 2);
    }

    #[test]
    fn malformed_known_capabilities_become_unknown() {
        // MP with 3 octets, 4-octet AS with 2, route refresh with a value, GR of odd length,
        // MP for IPv4 multicast (SAFI 2) and for an unknown AFI.
        let caps = [
            &[1, 3, 0, 1, 0][..],
            &[65, 2, 0, 1],
            &[2, 1, 0],
            &[64, 3, 0, 0, 1],
            &[1, 4, 0, 1, 0, 2],
            &[1, 4, 0, 25, 0, 70],
        ];
        let mut opt = Vec::new();
        for c in caps {
            opt.extend_from_slice(&[2, u8::try_from(c.len()).unwrap()]);
            opt.extend_from_slice(c);
        }
        let Message::Open(open) = decode_message(&open_frame(&body(&opt))).unwrap() else {
            panic!()
        };
        for (cap, raw) in open.capabilities.iter().zip(caps) {
            assert_eq!(cap, &Capability::Unknown { code: raw[0], value: raw[2..].to_vec() });
        }
        assert_eq!(open.four_octet_asn(), None);
        // The sender spoke Multiprotocol, just not for a family we know.
        assert!(open.families().is_empty());
        // Without any MP capability IPv4 unicast is implied.
        let Message::Open(plain) = decode_message(&open_frame(&body(&[]))).unwrap() else {
            panic!()
        };
        assert_eq!(plain.families(), [Family::IPV4_UNICAST]);
    }

    #[test]
    fn rfc9072_extended_parameters_decode() {
        // Non-Ext OP Len 255, Non-Ext OP Type 255, Extended Opt. Parm. Length, then a
        // Capabilities parameter with a 2-octet length.
        let caps = [1, 4, 0, 2, 0, 1, 65, 4, 0, 0, 0xfd, 0xe9];
        let mut b = FIXED.to_vec();
        b.extend_from_slice(&[255, 255]);
        b.extend_from_slice(&(3 + caps.len() as u16).to_be_bytes());
        b.push(2);
        b.extend_from_slice(&(caps.len() as u16).to_be_bytes());
        b.extend_from_slice(&caps);
        let Message::Open(open) = decode_message(&open_frame(&b)).unwrap() else { panic!() };
        assert_eq!(
            open.capabilities,
            [Capability::MultiProtocol(Family::IPV6_UNICAST), Capability::FourOctetAs(65001)]
        );
        // The extended length lying is a clean error.
        let mut lying = b.clone();
        lying[12] = lying[12].wrapping_add(1);
        assert_eq!(open_error(&lying).code, 2);
        // Every truncation fails cleanly too.
        for cut in 0..b.len() {
            let _ = decode_message(&open_frame(&b[..cut]));
        }
    }

    #[test]
    fn large_capability_sets_use_rfc9072_encoding() {
        let caps: Vec<Capability> =
            (0..60).map(|i| Capability::Unknown { code: 200, value: vec![i; 3] }).collect();
        let open = Open::new(65001, 90, Ipv4Addr::new(192, 0, 2, 1), caps);
        let mut out = Vec::new();
        encode_open(&open, &mut out);
        assert_eq!(out[28], 255);
        assert_eq!(out[29], 255);
        assert_eq!(decode_one(&out), Message::Open(open));
    }

    #[test]
    fn every_truncation_of_an_open_is_an_error() {
        let frame = hex(FRR_OPEN);
        for cut in 0..frame.len() {
            let short = &frame[..cut];
            assert!(decode_message(short).is_err(), "whole-frame cut at {cut}");
            // The same octets with a header that claims exactly that length.
            if cut >= HEADER_LEN {
                let mut fixed = short.to_vec();
                fixed[16..18].copy_from_slice(&u16::try_from(cut).unwrap().to_be_bytes());
                assert!(decode_message(&fixed).is_err(), "relabelled cut at {cut}");
            }
        }
    }

    #[test]
    fn single_octet_corruption_never_panics() {
        for vector in [FRR_OPEN, FRR_ROUTE_REFRESH, FRR_SHUTDOWN, KEEPALIVE] {
            let frame = hex(vector);
            for at in 0..frame.len() {
                for value in [0u8, 1, 2, 3, 4, 0x7f, 0x80, 0xfe, 0xff] {
                    let mut bad = frame.clone();
                    bad[at] = value;
                    let _ = frame_len(&bad);
                    let _ = decode_message(&bad);
                }
            }
        }
    }

    #[test]
    fn message_error_display_names_the_notification() {
        let err = frame_len(&[0, 1]).unwrap_err();
        assert_eq!(
            err.to_string(),
            "message marker is not all ones (Message Header Error/Connection Not Synchronized)"
        );
    }
}
