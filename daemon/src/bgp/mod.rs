//! BGP-4 (RFC 4271): codec, sans-IO state machine, RIB, and the tokio drivers around them.

pub mod announced;
pub mod configure;
pub mod display;
pub mod fsm;
pub mod graceful_restart;
pub mod instance;
pub mod link_local;
pub mod max_prefix;
pub mod outbox;
pub mod policy;
pub mod reconfigure;
pub mod rib;
pub mod rib_task;
pub mod session;
pub mod stats;
pub mod transport;
pub mod view;
pub mod wire;
