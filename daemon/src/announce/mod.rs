//! What this node announces: MetalLB-style LoadBalancer addresses and OVN-Kubernetes-style pod
//! networks and EgressIPs, turned into the set of prefixes each BGP router (VRF) originates.
//!
//! - [`model`]: the config sections (`[node]`, `[[pools]]`, `[[services]]`,
//!   `[[advertisements]]`, `[[communities]]`, `[[networks]]`, `[[route_advertisements]]`).
//! - [`selector`]: Kubernetes label selectors.
//! - [`allocate`]: deterministic VIP allocation — a pure function of the config, so all nodes
//!   agree without talking to each other. The algorithm is documented there and in
//!   `docs/announcements.md`.
//! - [`readiness`]: MetalLB's `cluster` / `local` readiness rules over health verdicts.
//! - [`compute`]: (config, health states) → per router: prefixes with communities, LOCAL_PREF
//!   and peers, plus a reason for every candidate that is not announced.
//! - [`health`]: the health checks (tokio tasks) that produce the verdicts.

pub mod allocate;
pub mod compute;
pub mod health;
pub mod readiness;
pub mod runtime;

#[cfg(test)]
mod tests;

pub use crate::config::announce::AnnounceConfig;
pub use allocate::{allocate, AllocError, Allocation, Collision};
pub use compute::{
    compute, Announcements, Candidate, Origin, PeerSet, Reason, Route, RouterAnnouncements,
    RouterInput, RuntimeState, State,
};
pub use readiness::HealthStates;

/// What [`compute`] needs to know of the configured BGP routers.
pub fn router_inputs(config: &crate::config::Config) -> Vec<RouterInput> {
    config
        .bgp
        .routers
        .iter()
        .map(|r| RouterInput {
            vrf: r.vrf.clone(),
            neighbors: r.neighbors.iter().map(|n| n.address).collect(),
            imports: r.imports.clone(),
            prefixes: r.prefixes.clone(),
        })
        .collect()
}

/// [`compute`] for a whole loaded config.
pub fn compute_config(config: &crate::config::Config, runtime: RuntimeState<'_>) -> Announcements {
    compute(&config.announce, &router_inputs(config), runtime)
}
