//! The BGP codec. Ours, not a crate's: the hot path decodes a million prefixes without an
//! allocation per prefix and every decode error maps to an RFC 7606 outcome (DESIGN.md says
//! why `netgauze-bgp-pkt` and `zettabgp` do not fit; netgauze serves as a test oracle).

pub mod attr_codec;
pub mod attributes;
pub mod header;
pub mod message;
pub mod nlri;
pub mod notification;
pub mod open;
pub mod packer;
pub mod rfc7606;
pub mod update;
