//! The node's own network: the policies of `config::network` applied through nmstate
//! (NetworkManager over D-Bus, or the kernel), guarded by probes, with an enactment per policy.
//!
//! - `apply`: the flow (probes before, apply without commit, probes after, commit or roll back).
//! - `backend`: nmstate (behind the `netconf` cargo feature).
//! - `probe` (which probes, pure), `probe_run` (running them), `ping`, `dns`.
//! - `enactment` (status and the restart rule, pure), `store` (kept on disk).
//! - `state` (reading nmstate's JSON, pure), `identity` (the node's primary addresses: a pure
//!   choice among the kernel's default routes, which `links` reads).
//! - `readiness` (which BGP routers can start: VRF device and source addresses present, pure)
//!   on `links` (the kernel's VRF devices and addresses, kept current from its notifications).
//! - `worker` (the thread that applies policies for the daemon) and `gate` (the order at start
//!   and on reload: policies first, then the routers whose VRF exists).
//!
//! Layering: depends on `config` only.

pub mod apply;
pub mod backend;
pub mod dns;
pub mod enactment;
pub mod gate;
pub mod identity;
pub mod links;
pub mod ping;
pub mod probe;
pub mod probe_run;
pub mod readiness;
pub mod state;
pub mod store;
pub mod worker;

pub use apply::{apply_policies, plan, undo_policies, ApplyOptions, PolicyRun};
pub use enactment::{Enactment, EnactmentStatus};
pub use store::EnactmentStore;
