//! NOTIFICATION message body (RFC 4271 §4.5), its error codes and subcodes (RFC 4271 §6,
//! RFC 4486, RFC 6608, RFC 7313, RFC 9384) and the shutdown communication carried in
//! Cease/Administrative Shutdown and Cease/Administrative Reset (RFC 8203, RFC 9003).

use std::fmt;

/// Error codes (RFC 4271 §4.5, RFC 6608 §3 for FSM Error, RFC 7313 §5 for ROUTE-REFRESH,
/// RFC 9687 §4 for Send Hold Timer Expired).
pub mod code {
    pub const MESSAGE_HEADER_ERROR: u8 = 1;
    pub const OPEN_MESSAGE_ERROR: u8 = 2;
    pub const UPDATE_MESSAGE_ERROR: u8 = 3;
    pub const HOLD_TIMER_EXPIRED: u8 = 4;
    pub const FSM_ERROR: u8 = 5;
    pub const CEASE: u8 = 6;
    pub const ROUTE_REFRESH_MESSAGE_ERROR: u8 = 7;
    pub const SEND_HOLD_TIMER_EXPIRED: u8 = 8;
}

/// Subcode 0 of every code: "Unspecific" (RFC 4271 §4.5 leaves it unassigned; IANA names it).
pub const UNSPECIFIC: u8 = 0;

/// Message Header Error subcodes (RFC 4271 §6.1).
pub mod header_subcode {
    pub const CONNECTION_NOT_SYNCHRONIZED: u8 = 1;
    pub const BAD_MESSAGE_LENGTH: u8 = 2;
    pub const BAD_MESSAGE_TYPE: u8 = 3;
}

/// OPEN Message Error subcodes (RFC 4271 §6.2, RFC 5492 §5, RFC 9234 §4.2).
pub mod open_subcode {
    pub const UNSUPPORTED_VERSION_NUMBER: u8 = 1;
    pub const BAD_PEER_AS: u8 = 2;
    pub const BAD_BGP_IDENTIFIER: u8 = 3;
    pub const UNSUPPORTED_OPTIONAL_PARAMETER: u8 = 4;
    /// Deprecated by RFC 4271 §6.2; kept for display.
    pub const AUTHENTICATION_FAILURE: u8 = 5;
    pub const UNACCEPTABLE_HOLD_TIME: u8 = 6;
    pub const UNSUPPORTED_CAPABILITY: u8 = 7;
    pub const ROLE_MISMATCH: u8 = 11;
}

/// UPDATE Message Error subcodes (RFC 4271 §6.3).
pub mod update_subcode {
    pub const MALFORMED_ATTRIBUTE_LIST: u8 = 1;
    pub const UNRECOGNIZED_WELL_KNOWN_ATTRIBUTE: u8 = 2;
    pub const MISSING_WELL_KNOWN_ATTRIBUTE: u8 = 3;
    pub const ATTRIBUTE_FLAGS_ERROR: u8 = 4;
    pub const ATTRIBUTE_LENGTH_ERROR: u8 = 5;
    pub const INVALID_ORIGIN_ATTRIBUTE: u8 = 6;
    /// Deprecated by RFC 4271 §6.3; kept for display.
    pub const AS_ROUTING_LOOP: u8 = 7;
    pub const INVALID_NEXT_HOP_ATTRIBUTE: u8 = 8;
    pub const OPTIONAL_ATTRIBUTE_ERROR: u8 = 9;
    pub const INVALID_NETWORK_FIELD: u8 = 10;
    pub const MALFORMED_AS_PATH: u8 = 11;
}

/// Finite State Machine Error subcodes (RFC 6608 §3).
pub mod fsm_subcode {
    pub const UNEXPECTED_MESSAGE_IN_OPEN_SENT: u8 = 1;
    pub const UNEXPECTED_MESSAGE_IN_OPEN_CONFIRM: u8 = 2;
    pub const UNEXPECTED_MESSAGE_IN_ESTABLISHED: u8 = 3;
}

/// Cease subcodes (RFC 4486 §4, RFC 8538 §3 for Hard Reset, RFC 9384 §3 for BFD Down).
pub mod cease_subcode {
    pub const MAX_PREFIXES_REACHED: u8 = 1;
    pub const ADMINISTRATIVE_SHUTDOWN: u8 = 2;
    pub const PEER_DECONFIGURED: u8 = 3;
    pub const ADMINISTRATIVE_RESET: u8 = 4;
    pub const CONNECTION_REJECTED: u8 = 5;
    pub const OTHER_CONFIGURATION_CHANGE: u8 = 6;
    pub const CONNECTION_COLLISION_RESOLUTION: u8 = 7;
    pub const OUT_OF_RESOURCES: u8 = 8;
    pub const HARD_RESET: u8 = 9;
    pub const BFD_DOWN: u8 = 10;
}

/// ROUTE-REFRESH Message Error subcodes (RFC 7313 §5).
pub mod route_refresh_subcode {
    pub const INVALID_MESSAGE_LENGTH: u8 = 1;
}

/// RFC 9003 §2: the shutdown communication is at most 255 octets of UTF-8.
pub const MAX_SHUTDOWN_COMMUNICATION_LEN: usize = 255;

/// A NOTIFICATION message body: error code, subcode and data (RFC 4271 §4.5).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Notification {
    pub code: u8,
    pub subcode: u8,
    pub data: Vec<u8>,
}

impl Notification {
    pub fn new(code: u8, subcode: u8, data: Vec<u8>) -> Self {
        Self { code, subcode, data }
    }

    /// A Cease NOTIFICATION without data (RFC 4486).
    pub fn cease(subcode: u8) -> Self {
        Self::new(code::CEASE, subcode, Vec::new())
    }

    /// A Cease NOTIFICATION that carries `message` as its shutdown communication when the
    /// subcode allows one (RFC 9003 §2: Administrative Shutdown and Administrative Reset).
    /// A longer message is cut at a character boundary to fit 255 octets.
    pub fn cease_with_communication(subcode: u8, message: &str) -> Self {
        let allows = matches!(
            subcode,
            cease_subcode::ADMINISTRATIVE_SHUTDOWN | cease_subcode::ADMINISTRATIVE_RESET
        );
        if !allows || message.is_empty() {
            return Self::cease(subcode);
        }
        let mut end = message.len().min(MAX_SHUTDOWN_COMMUNICATION_LEN);
        while !message.is_char_boundary(end) {
            end = end.saturating_sub(1);
        }
        let text = message.get(..end).unwrap_or_default().as_bytes();
        let mut data = Vec::with_capacity(text.len().saturating_add(1));
        // `end` is at most 255, so the length octet is exact.
        data.push(u8::try_from(text.len()).unwrap_or(u8::MAX));
        data.extend_from_slice(text);
        Self::new(code::CEASE, subcode, data)
    }

    /// The shutdown communication, if this is Cease/Administrative Shutdown or Reset and the
    /// data holds a well-formed one (RFC 9003 §2: a length octet, then that many octets of
    /// UTF-8). A zero length means no message. Malformed data yields `None` (RFC 9003 §4 says
    /// to treat it as if absent).
    pub fn shutdown_communication(&self) -> Option<String> {
        if self.code != code::CEASE
            || !matches!(
                self.subcode,
                cease_subcode::ADMINISTRATIVE_SHUTDOWN | cease_subcode::ADMINISTRATIVE_RESET
            )
        {
            return None;
        }
        let (&len, rest) = self.data.split_first()?;
        if len == 0 {
            return None;
        }
        let text = rest.get(..usize::from(len))?;
        std::str::from_utf8(text).ok().map(str::to_owned)
    }

    /// Decodes a NOTIFICATION body (the octets after the header). The caller has checked the
    /// minimum length of RFC 4271 §6.1; a shorter body yields `None`.
    pub fn decode(body: &[u8]) -> Option<Self> {
        let (&code, rest) = body.split_first()?;
        let (&subcode, data) = rest.split_first()?;
        Some(Self::new(code, subcode, data.to_vec()))
    }

    /// Appends the body (code, subcode, data) to `out`.
    pub fn encode_body(&self, out: &mut Vec<u8>) {
        out.push(self.code);
        out.push(self.subcode);
        out.extend_from_slice(&self.data);
    }

    /// FRR's name for the error code.
    pub fn code_name(&self) -> &'static str {
        code_name(self.code)
    }

    /// FRR's name for the subcode, or `None` for codes that have no subcodes.
    pub fn subcode_name(&self) -> Option<&'static str> {
        subcode_name(self.code, self.subcode)
    }
}

/// FRR's text for an error code (`bgp_notify_code_str`). FRR calls FSM Error "Neighbor Events
/// Error"; we keep its wording so operators see the same text.
pub fn code_name(code: u8) -> &'static str {
    match code {
        code::MESSAGE_HEADER_ERROR => "Message Header Error",
        code::OPEN_MESSAGE_ERROR => "OPEN Message Error",
        code::UPDATE_MESSAGE_ERROR => "UPDATE Message Error",
        code::HOLD_TIMER_EXPIRED => "Hold Timer Expired",
        code::FSM_ERROR => "Neighbor Events Error",
        code::CEASE => "Cease",
        code::ROUTE_REFRESH_MESSAGE_ERROR => "ROUTE-REFRESH Message Error",
        code::SEND_HOLD_TIMER_EXPIRED => "Send Hold Timer Expired",
        _ => "Unknown Error",
    }
}

/// FRR's text for a subcode; `None` when the code has no subcodes (Hold Timer Expired and
/// unknown codes).
pub fn subcode_name(code: u8, subcode: u8) -> Option<&'static str> {
    if code == code::HOLD_TIMER_EXPIRED
        || code == code::SEND_HOLD_TIMER_EXPIRED
        || code_name(code) == "Unknown Error"
    {
        return None;
    }
    if subcode == UNSPECIFIC {
        return Some("Unspecific");
    }
    let name = match (code, subcode) {
        (code::MESSAGE_HEADER_ERROR, header_subcode::CONNECTION_NOT_SYNCHRONIZED) => {
            "Connection Not Synchronized"
        }
        (code::MESSAGE_HEADER_ERROR, header_subcode::BAD_MESSAGE_LENGTH) => "Bad Message Length",
        (code::MESSAGE_HEADER_ERROR, header_subcode::BAD_MESSAGE_TYPE) => "Bad Message Type",
        (code::OPEN_MESSAGE_ERROR, open_subcode::UNSUPPORTED_VERSION_NUMBER) => {
            "Unsupported Version Number"
        }
        (code::OPEN_MESSAGE_ERROR, open_subcode::BAD_PEER_AS) => "Bad Peer AS",
        (code::OPEN_MESSAGE_ERROR, open_subcode::BAD_BGP_IDENTIFIER) => "Bad BGP Identifier",
        (code::OPEN_MESSAGE_ERROR, open_subcode::UNSUPPORTED_OPTIONAL_PARAMETER) => {
            "Unsupported Optional Parameter"
        }
        (code::OPEN_MESSAGE_ERROR, open_subcode::AUTHENTICATION_FAILURE) => {
            "Authentication Failure"
        }
        (code::OPEN_MESSAGE_ERROR, open_subcode::UNACCEPTABLE_HOLD_TIME) => {
            "Unacceptable Hold Time"
        }
        (code::OPEN_MESSAGE_ERROR, open_subcode::UNSUPPORTED_CAPABILITY) => {
            "Unsupported Capability"
        }
        (code::OPEN_MESSAGE_ERROR, open_subcode::ROLE_MISMATCH) => "Role Mismatch",
        (code::UPDATE_MESSAGE_ERROR, update_subcode::MALFORMED_ATTRIBUTE_LIST) => {
            "Malformed Attribute List"
        }
        (code::UPDATE_MESSAGE_ERROR, update_subcode::UNRECOGNIZED_WELL_KNOWN_ATTRIBUTE) => {
            "Unrecognized Well-known Attribute"
        }
        (code::UPDATE_MESSAGE_ERROR, update_subcode::MISSING_WELL_KNOWN_ATTRIBUTE) => {
            "Missing Well-known Attribute"
        }
        (code::UPDATE_MESSAGE_ERROR, update_subcode::ATTRIBUTE_FLAGS_ERROR) => {
            "Attribute Flags Error"
        }
        (code::UPDATE_MESSAGE_ERROR, update_subcode::ATTRIBUTE_LENGTH_ERROR) => {
            "Attribute Length Error"
        }
        (code::UPDATE_MESSAGE_ERROR, update_subcode::INVALID_ORIGIN_ATTRIBUTE) => {
            "Invalid ORIGIN Attribute"
        }
        (code::UPDATE_MESSAGE_ERROR, update_subcode::AS_ROUTING_LOOP) => "AS Routing Loop",
        (code::UPDATE_MESSAGE_ERROR, update_subcode::INVALID_NEXT_HOP_ATTRIBUTE) => {
            "Invalid NEXT_HOP Attribute"
        }
        (code::UPDATE_MESSAGE_ERROR, update_subcode::OPTIONAL_ATTRIBUTE_ERROR) => {
            "Optional Attribute Error"
        }
        (code::UPDATE_MESSAGE_ERROR, update_subcode::INVALID_NETWORK_FIELD) => {
            "Invalid Network Field"
        }
        (code::UPDATE_MESSAGE_ERROR, update_subcode::MALFORMED_AS_PATH) => "Malformed AS_PATH",
        (code::FSM_ERROR, fsm_subcode::UNEXPECTED_MESSAGE_IN_OPEN_SENT) => {
            "Receive Unexpected Message in OpenSent State"
        }
        (code::FSM_ERROR, fsm_subcode::UNEXPECTED_MESSAGE_IN_OPEN_CONFIRM) => {
            "Receive Unexpected Message in OpenConfirm State"
        }
        (code::FSM_ERROR, fsm_subcode::UNEXPECTED_MESSAGE_IN_ESTABLISHED) => {
            "Receive Unexpected Message in Established State"
        }
        (code::CEASE, cease_subcode::MAX_PREFIXES_REACHED) => "Maximum Number of Prefixes Reached",
        (code::CEASE, cease_subcode::ADMINISTRATIVE_SHUTDOWN) => "Administrative Shutdown",
        (code::CEASE, cease_subcode::PEER_DECONFIGURED) => "Peer De-configured",
        (code::CEASE, cease_subcode::ADMINISTRATIVE_RESET) => "Administrative Reset",
        (code::CEASE, cease_subcode::CONNECTION_REJECTED) => "Connection Rejected",
        (code::CEASE, cease_subcode::OTHER_CONFIGURATION_CHANGE) => "Other Configuration Change",
        (code::CEASE, cease_subcode::CONNECTION_COLLISION_RESOLUTION) => {
            "Connection Collision Resolution"
        }
        (code::CEASE, cease_subcode::OUT_OF_RESOURCES) => "Out of Resources",
        (code::CEASE, cease_subcode::HARD_RESET) => "Hard Reset",
        (code::CEASE, cease_subcode::BFD_DOWN) => "BFD Down",
        (code::ROUTE_REFRESH_MESSAGE_ERROR, route_refresh_subcode::INVALID_MESSAGE_LENGTH) => {
            "Invalid Message Length"
        }
        _ => "Unknown",
    };
    Some(name)
}

impl fmt::Display for Notification {
    /// "Code/Subcode" as FRR prints it, e.g. "Cease/Administrative Shutdown", followed by the
    /// shutdown communication in quotes when there is one.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.code_name())?;
        if let Some(sub) = self.subcode_name() {
            write!(f, "/{sub}")?;
        }
        if let Some(text) = self.shutdown_communication() {
            write!(f, " \"{}\"", text.escape_debug())?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_matches_frr_wording() {
        let cases = [
            (Notification::cease(2), "Cease/Administrative Shutdown"),
            (Notification::new(2, 2, vec![]), "OPEN Message Error/Bad Peer AS"),
            (Notification::new(4, 0, vec![]), "Hold Timer Expired"),
            (Notification::new(1, 2, vec![0, 5]), "Message Header Error/Bad Message Length"),
            (Notification::new(3, 0, vec![]), "UPDATE Message Error/Unspecific"),
            (
                Notification::new(5, 2, vec![]),
                "Neighbor Events Error/Receive Unexpected Message in OpenConfirm State",
            ),
            (Notification::cease(7), "Cease/Connection Collision Resolution"),
            (Notification::cease(10), "Cease/BFD Down"),
            (Notification::cease(1), "Cease/Maximum Number of Prefixes Reached"),
            (Notification::cease(8), "Cease/Out of Resources"),
            (Notification::new(2, 7, vec![]), "OPEN Message Error/Unsupported Capability"),
            (Notification::new(2, 99, vec![]), "OPEN Message Error/Unknown"),
            (Notification::new(99, 1, vec![]), "Unknown Error"),
            (Notification::new(7, 1, vec![]), "ROUTE-REFRESH Message Error/Invalid Message Length"),
        ];
        for (n, text) in cases {
            assert_eq!(n.to_string(), text);
        }
    }

    #[test]
    fn shutdown_communication_round_trip() {
        let n = Notification::cease_with_communication(2, "maintenance window");
        assert_eq!(n.data[0], 18);
        assert_eq!(&n.data[1..], b"maintenance window");
        assert_eq!(n.shutdown_communication().as_deref(), Some("maintenance window"));
        assert_eq!(n.to_string(), "Cease/Administrative Shutdown \"maintenance window\"");

        let reset = Notification::cease_with_communication(4, "über");
        assert_eq!(reset.shutdown_communication().as_deref(), Some("über"));

        // Other subcodes carry no communication.
        let n = Notification::cease_with_communication(3, "gone");
        assert!(n.data.is_empty());
        assert_eq!(n.shutdown_communication(), None);
    }

    #[test]
    fn shutdown_communication_truncates_on_char_boundary() {
        let long = "é".repeat(200); // 400 octets
        let n = Notification::cease_with_communication(2, &long);
        assert_eq!(usize::from(n.data[0]), n.data.len() - 1);
        assert!(n.data.len() - 1 <= MAX_SHUTDOWN_COMMUNICATION_LEN);
        assert_eq!(n.shutdown_communication().unwrap(), "é".repeat(127));
    }

    #[test]
    fn malformed_shutdown_communication_is_ignored() {
        // Length runs past the data.
        assert_eq!(Notification::new(6, 2, vec![10, b'a']).shutdown_communication(), None);
        // Invalid UTF-8.
        assert_eq!(Notification::new(6, 2, vec![2, 0xff, 0xfe]).shutdown_communication(), None);
        // Empty data, zero length.
        assert_eq!(Notification::new(6, 2, vec![]).shutdown_communication(), None);
        assert_eq!(Notification::new(6, 4, vec![0]).shutdown_communication(), None);
        // Trailing octets after the communication are allowed.
        assert_eq!(
            Notification::new(6, 4, vec![2, b'o', b'k', 9]).shutdown_communication().as_deref(),
            Some("ok")
        );
    }

    #[test]
    fn decode_and_encode_body() {
        let n = Notification::decode(&[6, 2, 3, b'b', b'y', b'e']).unwrap();
        assert_eq!(n, Notification::new(6, 2, vec![3, b'b', b'y', b'e']));
        let mut out = Vec::new();
        n.encode_body(&mut out);
        assert_eq!(out, [6, 2, 3, b'b', b'y', b'e']);
        assert_eq!(Notification::decode(&[6]), None);
        assert_eq!(Notification::decode(&[]), None);
    }
}
