//! BGP-4 (RFC 4271): codec, sans-IO state machine, RIB, and the tokio drivers around them.

pub mod fsm;
pub mod wire;
