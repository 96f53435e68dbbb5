//! The fixed 19-octet BGP message header (RFC 4271 §4.1).

/// Marker: 16 octets of all ones (RFC 4271 §4.1).
pub const MARKER: [u8; 16] = [0xff; 16];
/// Length of the fixed header: marker, 2-octet length, 1-octet type.
pub const HEADER_LEN: usize = 19;
/// Largest message without the Extended Message capability (RFC 4271 §4.1).
pub const MAX_MESSAGE_LEN: usize = 4096;

/// Message type codes (RFC 4271 §4.1, RFC 2918 §3 for ROUTE-REFRESH).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MessageType {
    Open = 1,
    Update = 2,
    Notification = 3,
    Keepalive = 4,
    RouteRefresh = 5,
}

impl MessageType {
    pub fn from_code(code: u8) -> Option<Self> {
        Some(match code {
            1 => Self::Open,
            2 => Self::Update,
            3 => Self::Notification,
            4 => Self::Keepalive,
            5 => Self::RouteRefresh,
            _ => return None,
        })
    }
}

/// Appends a header whose length field is filled in by [`finish_message`].
/// Returns the offset of the header so several messages can share one buffer.
pub fn begin_message(out: &mut Vec<u8>, kind: MessageType) -> usize {
    let start = out.len();
    out.extend_from_slice(&MARKER);
    out.extend_from_slice(&[0, 0, kind as u8]);
    start
}

/// Writes the total length of the message that starts at `start` into its header.
/// The caller guarantees the message fits in 16 bits (every encoder here keeps to 4096).
pub fn finish_message(out: &mut [u8], start: usize) {
    let len = out.len() - start;
    let len = u16::try_from(len).unwrap_or(u16::MAX).to_be_bytes();
    if let Some(field) = out.get_mut(start + 16..start + 18) {
        field.copy_from_slice(&len);
    }
}
