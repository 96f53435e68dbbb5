//! QEMU VM test harness for uplink (issue #6): boots a ToR VM (Debian + FRR 8.4) and worker VMs
//! (the node image running uplink) under TCG, wires them with Linux bridges in a network
//! namespace of the test's own, manages them over SSH, and tears everything down on drop.
//!
//! The scenarios are in `tests/`. Run them with `make vm-test`.

pub mod ansible;
pub mod cmd;
pub mod drive;
pub mod net;
pub mod topology;
pub mod vm;
