//! uplink: one process that connects a bare-metal node to its data-centre fabric.

pub mod announce;
pub mod bfd;
pub mod bgp;
pub mod config;
pub mod control;
pub mod daemon;
pub mod fib;
pub mod netconf;
pub mod ops;
pub mod reload;
