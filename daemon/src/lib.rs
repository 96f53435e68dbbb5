//! uplink: one process that connects a bare-metal node to its data-centre fabric.
// The no-panic rule: production code never unwraps, panics or indexes past a bound on data
// from the network or files (tests may; see clippy.toml).
#![deny(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing)]

pub mod announce;
pub mod bfd;
pub mod bgp;
pub mod config;
pub mod control;
pub mod daemon;
pub mod fib;
// Always: its health record and snapshot are read either way; its client needs the feature.
pub mod kubernetes;
pub mod l2;
pub mod logthrottle;
pub mod netconf;
pub mod ops;
pub mod reload;
pub mod state_file;
