//! Layer 2 mode (MetalLB's `L2Advertisement`, issue #25): one node answers ARP and NDP for
//! each address, chosen by `announce::l2`.
//!
//! - `arp`: the reply to a request and the announcement on takeover (frames in, frames out).
//! - `ndp`: the same for IPv6, Neighbor Solicitation in, Neighbor Advertisement out.
//! - `socket`: the packet socket (`AF_PACKET`) the frames come and go by.
//! - `links`: the interfaces that may answer.
//! - `responder`: the answers on each interface, and the announcements on takeover.
//! - `envelope`: the shared-key HMAC around every membership message.
//! - `membership`: who of the nodes is alive (SWIM, by `foca`), over UDP in that envelope.

pub mod arp;
pub mod envelope;
pub mod links;
pub mod membership;
pub mod ndp;
pub mod responder;
pub mod runtime;
pub mod socket;

/// Why a frame got no answer: each is counted, none is acted on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dropped {
    /// Not ARP, or not ICMPv6 (the socket's filter lets others through only by mistake).
    OtherProtocol,
    /// Too short or invalid (RFC 4861 §7.1.1 for a solicitation), or an ARP packet without
    /// Ethernet and IPv4 addresses.
    Malformed,
    /// An ARP reply or another operation, an ICMPv6 message other than a Neighbor
    /// Solicitation: a reply or an advertisement, forged or not, never changes what this node
    /// answers.
    NotRequest,
    /// Sent to another station's address.
    NotForUs,
    /// Our own (an announcement of ours looped back).
    OurOwn,
    /// For an address this node does not answer for.
    NotAnswered,
}

impl Dropped {
    /// The reason as the metrics and `show l2` name it.
    pub fn name(self) -> &'static str {
        match self {
            Dropped::OtherProtocol => "other_protocol",
            Dropped::Malformed => "malformed",
            Dropped::NotRequest => "not_request",
            Dropped::NotForUs => "not_for_us",
            Dropped::OurOwn => "our_own",
            Dropped::NotAnswered => "not_answered",
        }
    }
}
