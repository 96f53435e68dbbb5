//! BFD (RFC 5880) for BGP neighbors: the Control packet codec, the sans-IO session, and the
//! runtime thread that owns the UDP sockets (RFC 5881 single hop, RFC 5883 multihop).

pub mod auth;
pub mod packet;
mod realtime;
pub mod runtime;
pub mod session;
