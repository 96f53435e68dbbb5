//! OPEN message body (RFC 4271 §4.2) with its capabilities (RFC 5492) and the extended
//! optional parameters length of RFC 9072.

use std::net::Ipv4Addr;

use super::attributes::Family;
use super::message::MessageError;
use super::notification::{code, open_subcode, Notification, UNSPECIFIC};

/// The only BGP version spoken (RFC 4271 §4.2).
pub const BGP_VERSION: u8 = 4;

/// AS_TRANS (RFC 6793 §9): the 2-octet "My Autonomous System" of a speaker whose ASN does
/// not fit in 16 bits.
pub const AS_TRANS: u16 = 23456;

/// Length of the fixed part of the OPEN body: version, My AS, Hold Time, BGP Identifier and
/// Opt Parm Len (RFC 4271 §4.2).
pub const OPEN_FIXED_LEN: usize = 10;

/// Optional parameter type of Capabilities (RFC 5492 §4).
pub const PARAM_CAPABILITIES: u8 = 2;

/// RFC 9072 §2: a Non-Ext OP Type of 255 marks the extended encoding.
const PARAM_EXTENDED_LENGTH: u8 = 255;

/// Capability codes (IANA "Capability Codes").
pub mod capability_code {
    pub const MULTIPROTOCOL: u8 = 1;
    pub const ROUTE_REFRESH: u8 = 2;
    pub const GRACEFUL_RESTART: u8 = 64;
    pub const FOUR_OCTET_AS: u8 = 65;
    pub const ENHANCED_ROUTE_REFRESH: u8 = 70;
}

/// The Graceful Restart capability (RFC 4724 §3, RFC 8538 §2 for the N bit).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct GracefulRestart {
    /// The Restart State (R) bit: the sender has restarted.
    pub restart_state: bool,
    /// The Notification (N) bit of RFC 8538: graceful restart also covers NOTIFICATIONs.
    pub notification: bool,
    /// Restart Time in seconds; 12 bits on the wire (larger values are cut to 4095).
    pub restart_time: u16,
    /// Families with their Forwarding State (F) bit. Families this speaker does not know
    /// are dropped on decode.
    pub families: Vec<(Family, bool)>,
}

/// One capability of an OPEN (RFC 5492 §4).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Capability {
    /// Multiprotocol Extensions (RFC 4760 §8). An AFI/SAFI this speaker does not know is kept
    /// as `Unknown { code: 1, .. }`, not treated as an error.
    MultiProtocol(Family),
    /// Route Refresh (RFC 2918 §2).
    RouteRefresh,
    /// Enhanced Route Refresh (RFC 7313 §3).
    EnhancedRouteRefresh,
    /// Support for 4-octet AS numbers, with the sender's ASN (RFC 6793 §3).
    FourOctetAs(u32),
    GracefulRestart(GracefulRestart),
    /// Anything else, or a known capability whose value is malformed, kept as received.
    Unknown {
        code: u8,
        value: Vec<u8>,
    },
}

/// The Graceful Restart capability among `capabilities`, if there is one.
pub fn graceful_restart_of(capabilities: &[Capability]) -> Option<&GracefulRestart> {
    capabilities.iter().find_map(|c| match c {
        Capability::GracefulRestart(gr) => Some(gr),
        _ => None,
    })
}

/// An OPEN message body (RFC 4271 §4.2). Only optional parameters of type Capabilities are
/// understood, so those are all that is kept.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Open {
    pub version: u8,
    pub my_as: u16,
    pub hold_time: u16,
    pub bgp_id: Ipv4Addr,
    pub capabilities: Vec<Capability>,
}

/// The 2-octet "My Autonomous System" for `asn` (RFC 6793 §4.1: AS_TRANS when it does not
/// fit).
pub fn two_octet_as(asn: u32) -> u16 {
    u16::try_from(asn).unwrap_or(AS_TRANS)
}

fn open_error(subcode: u8, data: Vec<u8>, reason: impl Into<String>) -> MessageError {
    MessageError::new(Notification::new(code::OPEN_MESSAGE_ERROR, subcode, data), reason)
}

fn malformed(reason: impl Into<String>) -> MessageError {
    // RFC 4271 §6.2 names no subcode for a malformed parameter list; FRR sends Unspecific.
    open_error(UNSPECIFIC, Vec::new(), reason)
}

fn read_u16(buf: &[u8], at: usize) -> Option<u16> {
    let bytes = buf.get(at..at.checked_add(2)?)?;
    Some(u16::from_be_bytes([*bytes.first()?, *bytes.get(1)?]))
}

impl Open {
    /// An OPEN for a speaker with the 4-octet `asn`: version 4 and My AS set by RFC 6793 §4.1.
    /// The caller puts the capabilities in, including `FourOctetAs`.
    pub fn new(asn: u32, hold_time: u16, bgp_id: Ipv4Addr, capabilities: Vec<Capability>) -> Self {
        Self { version: BGP_VERSION, my_as: two_octet_as(asn), hold_time, bgp_id, capabilities }
    }

    /// The ASN from the 4-octet AS capability, if the sender advertised it (RFC 6793 §3).
    pub fn four_octet_asn(&self) -> Option<u32> {
        self.capabilities.iter().find_map(|c| match c {
            Capability::FourOctetAs(asn) => Some(*asn),
            _ => None,
        })
    }

    /// The sender's ASN: the 4-octet capability's when present, else My AS (RFC 6793 §4.1).
    pub fn peer_asn(&self) -> u32 {
        self.four_octet_asn().unwrap_or(u32::from(self.my_as))
    }

    /// The families the sender supports. Without any Multiprotocol capability a speaker
    /// supports IPv4 unicast only (RFC 4760 §1, RFC 4271).
    pub fn families(&self) -> Vec<Family> {
        let mut any_mp = false;
        let mut families = Vec::new();
        for cap in &self.capabilities {
            match cap {
                Capability::MultiProtocol(f) => {
                    any_mp = true;
                    if !families.contains(f) {
                        families.push(*f);
                    }
                }
                Capability::Unknown { code: capability_code::MULTIPROTOCOL, .. } => any_mp = true,
                _ => {}
            }
        }
        if !any_mp {
            families.push(Family::IPV4_UNICAST);
        }
        families
    }

    /// Whether the sender advertised Route Refresh (RFC 2918 §2).
    pub fn supports_route_refresh(&self) -> bool {
        self.capabilities.contains(&Capability::RouteRefresh)
    }

    /// Whether the sender advertised Enhanced Route Refresh (RFC 7313 §3).
    pub fn supports_enhanced_route_refresh(&self) -> bool {
        self.capabilities.contains(&Capability::EnhancedRouteRefresh)
    }

    /// The sender's Graceful Restart capability (RFC 4724 §3).
    pub fn graceful_restart(&self) -> Option<&GracefulRestart> {
        graceful_restart_of(&self.capabilities)
    }

    /// Decodes an OPEN body (the octets after the 19-octet header).
    ///
    /// Checks the version (RFC 4271 §6.2: Unsupported Version Number, data = the highest
    /// supported version as 2 octets) and the optional parameter structure. Peer AS, BGP
    /// Identifier and Hold Time depend on configuration and are checked by the FSM.
    pub fn decode(body: &[u8]) -> Result<Self, MessageError> {
        let Some((fixed, rest)) = body.split_at_checked(OPEN_FIXED_LEN) else {
            return Err(malformed(format!("OPEN body of {} octets is too short", body.len())));
        };
        let version = fixed.first().copied().unwrap_or_default();
        if version != BGP_VERSION {
            return Err(open_error(
                open_subcode::UNSUPPORTED_VERSION_NUMBER,
                u16::from(BGP_VERSION).to_be_bytes().to_vec(),
                format!("unsupported BGP version {version}"),
            ));
        }
        let my_as = read_u16(fixed, 1).unwrap_or_default();
        let hold_time = read_u16(fixed, 3).unwrap_or_default();
        let id = fixed.get(5..9).and_then(|b| <[u8; 4]>::try_from(b).ok()).unwrap_or_default();
        let opt_len = fixed.get(9).copied().unwrap_or_default();

        // RFC 9072 §2: Non-Ext OP Len 255 followed by Non-Ext OP Type 255 announces a 2-octet
        // Extended Opt. Parm. Length, and 2-octet parameter lengths.
        let extended = opt_len == 255 && rest.first() == Some(&PARAM_EXTENDED_LENGTH);
        let (params, len_octets) = if extended {
            let ext_len = read_u16(rest, 1)
                .ok_or_else(|| malformed("extended optional parameters length is truncated"))?;
            let params = rest.get(3..).unwrap_or_default();
            if usize::from(ext_len) != params.len() {
                return Err(malformed(format!(
                    "extended optional parameters length {ext_len} does not match the {} octets left",
                    params.len()
                )));
            }
            (params, 2)
        } else {
            // RFC 4271 §4.2: Opt Parm Len is the total length of the parameters, which are
            // the rest of the message.
            if rest.len() != usize::from(opt_len) {
                return Err(malformed(format!(
                    "optional parameters length {opt_len} does not match the {} octets left",
                    rest.len()
                )));
            }
            (rest, 1)
        };

        let mut capabilities = Vec::new();
        let mut cursor = params;
        while let Some((&param_type, after_type)) = cursor.split_first() {
            let (param_len, after_len) = if len_octets == 2 {
                let len = read_u16(after_type, 0)
                    .ok_or_else(|| malformed("optional parameter header is truncated"))?;
                (usize::from(len), after_type.get(2..).unwrap_or_default())
            } else {
                let (&len, after) = after_type
                    .split_first()
                    .ok_or_else(|| malformed("optional parameter header is truncated"))?;
                (usize::from(len), after)
            };
            let (value, next) = after_len.split_at_checked(param_len).ok_or_else(|| {
                malformed(format!("optional parameter length {param_len} runs past the message"))
            })?;
            if param_type != PARAM_CAPABILITIES {
                // RFC 4271 §6.2: an optional parameter that is not recognised.
                return Err(open_error(
                    open_subcode::UNSUPPORTED_OPTIONAL_PARAMETER,
                    Vec::new(),
                    format!("unsupported optional parameter type {param_type}"),
                ));
            }
            decode_capabilities(value, &mut capabilities)?;
            cursor = next;
        }

        Ok(Self { version, my_as, hold_time, bgp_id: Ipv4Addr::from(id), capabilities })
    }

    /// Appends the OPEN body to `out`. Capabilities go into one Capabilities parameter; when
    /// that does not fit the 1-octet lengths, the RFC 9072 extended encoding is used.
    /// A capability whose value exceeds 255 octets cannot be encoded and is skipped.
    pub fn encode_body(&self, out: &mut Vec<u8>) {
        out.push(self.version);
        out.extend_from_slice(&self.my_as.to_be_bytes());
        out.extend_from_slice(&self.hold_time.to_be_bytes());
        out.extend_from_slice(&self.bgp_id.octets());

        let mut caps = Vec::new();
        encode_capabilities(&self.capabilities, &mut caps);
        // RFC 4271 §4.2: Opt Parm Len, then the parameter's type and 1-octet length.
        let short = caps.len().checked_add(2).and_then(|total| u8::try_from(total).ok());
        match (caps.is_empty(), short, u8::try_from(caps.len())) {
            (true, _, _) => out.push(0),
            (false, Some(total), Ok(len)) => {
                out.extend_from_slice(&[total, PARAM_CAPABILITIES, len]);
                out.extend_from_slice(&caps);
            }
            _ => encode_extended(&caps, out),
        }
    }
}

/// RFC 9072 §2 encoding: 255, 255, 2-octet length, then one parameter with a 2-octet length.
fn encode_extended(caps: &[u8], out: &mut Vec<u8>) {
    let param_len = u16::try_from(caps.len()).unwrap_or(u16::MAX);
    let total = param_len.saturating_add(3);
    out.extend_from_slice(&[255, PARAM_EXTENDED_LENGTH]);
    out.extend_from_slice(&total.to_be_bytes());
    out.push(PARAM_CAPABILITIES);
    out.extend_from_slice(&param_len.to_be_bytes());
    out.extend_from_slice(caps.get(..usize::from(param_len)).unwrap_or(caps));
}

/// Decodes the capability TLVs of one Capabilities parameter (RFC 5492 §4).
fn decode_capabilities(mut buf: &[u8], out: &mut Vec<Capability>) -> Result<(), MessageError> {
    while let Some((&code, after_code)) = buf.split_first() {
        let (&len, after_len) =
            after_code.split_first().ok_or_else(|| malformed("capability header is truncated"))?;
        let (value, next) = after_len.split_at_checked(usize::from(len)).ok_or_else(|| {
            malformed(format!("capability {code} length {len} runs past its parameter"))
        })?;
        out.push(decode_capability(code, value));
        buf = next;
    }
    Ok(())
}

/// One capability value. A known code with a malformed value is kept as `Unknown`: nothing
/// in RFC 5492 makes it fatal, and the FSM then simply does not see the capability.
fn decode_capability(code: u8, value: &[u8]) -> Capability {
    let unknown = || Capability::Unknown { code, value: value.to_vec() };
    match (code, value) {
        // RFC 4760 §8: AFI (2), Reserved (1), SAFI (1).
        (capability_code::MULTIPROTOCOL, &[a0, a1, _, safi]) => {
            Family::from_wire(u16::from_be_bytes([a0, a1]), safi)
                .map_or_else(unknown, Capability::MultiProtocol)
        }
        (capability_code::ROUTE_REFRESH, []) => Capability::RouteRefresh,
        (capability_code::ENHANCED_ROUTE_REFRESH, []) => Capability::EnhancedRouteRefresh,
        (capability_code::FOUR_OCTET_AS, &[a, b, c, d]) => {
            Capability::FourOctetAs(u32::from_be_bytes([a, b, c, d]))
        }
        (capability_code::GRACEFUL_RESTART, _) => {
            decode_graceful_restart(value).unwrap_or_else(unknown)
        }
        _ => unknown(),
    }
}

/// RFC 4724 §3: Restart Flags (4 bits), Restart Time (12 bits), then per family AFI (2),
/// SAFI (1), Flags for Address Family (1).
fn decode_graceful_restart(value: &[u8]) -> Option<Capability> {
    let (head, tuples) = value.split_at_checked(2)?;
    if tuples.len() % 4 != 0 {
        return None;
    }
    let word = read_u16(head, 0)?;
    let families = tuples
        .chunks_exact(4)
        .filter_map(|t| match *t {
            [a0, a1, safi, flags] => Family::from_wire(u16::from_be_bytes([a0, a1]), safi)
                .map(|f| (f, flags & 0x80 != 0)),
            _ => None,
        })
        .collect();
    Some(Capability::GracefulRestart(GracefulRestart {
        restart_state: word & 0x8000 != 0,
        notification: word & 0x4000 != 0,
        restart_time: word & 0x0fff,
        families,
    }))
}

/// Appends the capability TLVs (RFC 5492 §4), without an optional parameter header. Also
/// the Data of an Unsupported Capability NOTIFICATION (RFC 5492 §3).
pub fn encode_capabilities(capabilities: &[Capability], out: &mut Vec<u8>) {
    for cap in capabilities {
        encode_capability(cap, out);
    }
}

fn push_tlv(code: u8, value: &[u8], out: &mut Vec<u8>) {
    if let Ok(len) = u8::try_from(value.len()) {
        out.push(code);
        out.push(len);
        out.extend_from_slice(value);
    }
}

fn encode_capability(cap: &Capability, out: &mut Vec<u8>) {
    match cap {
        Capability::MultiProtocol(f) => {
            let afi = (f.afi as u16).to_be_bytes();
            push_tlv(capability_code::MULTIPROTOCOL, &[afi[0], afi[1], 0, f.safi as u8], out);
        }
        Capability::RouteRefresh => push_tlv(capability_code::ROUTE_REFRESH, &[], out),
        Capability::EnhancedRouteRefresh => {
            push_tlv(capability_code::ENHANCED_ROUTE_REFRESH, &[], out)
        }
        Capability::FourOctetAs(asn) => {
            push_tlv(capability_code::FOUR_OCTET_AS, &asn.to_be_bytes(), out)
        }
        Capability::GracefulRestart(gr) => {
            let mut word = gr.restart_time.min(0x0fff);
            if gr.restart_state {
                word |= 0x8000;
            }
            if gr.notification {
                word |= 0x4000;
            }
            let mut value = word.to_be_bytes().to_vec();
            for (f, forwarding) in &gr.families {
                value.extend_from_slice(&(f.afi as u16).to_be_bytes());
                value.push(f.safi as u8);
                value.push(if *forwarding { 0x80 } else { 0 });
            }
            push_tlv(capability_code::GRACEFUL_RESTART, &value, out);
        }
        Capability::Unknown { code, value } => push_tlv(*code, value, out),
    }
}
