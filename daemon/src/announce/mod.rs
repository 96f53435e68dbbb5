//! What this node announces: MetalLB-style LoadBalancer addresses and OVN-Kubernetes-style pod
//! networks and EgressIPs, turned into the set of prefixes each BGP router (VRF) originates.
//!
//! The config sections it works from (`[node]`, `[[pools]]`, `[[services]]`,
//! `[[advertisements]]`, `[[communities]]`, `[[networks]]`, `[[route_advertisements]]`) are
//! parsed and validated in [`crate::config::announce`]; this layer depends on `config` only.
//!
//! - [`allocate`]: deterministic VIP allocation — a pure function of the config, so all nodes
//!   agree without talking to each other. The algorithm is documented there and in
//!   `docs/announcements.md`.
//! - [`readiness`]: MetalLB's `cluster` / `local` readiness rules over health verdicts.
//! - [`compute`]: (config, health states) → per router: prefixes with communities, LOCAL_PREF
//!   and peers, plus a reason for every candidate that is not announced.
//! - [`health`]: the health checks (tokio tasks) that produce the verdicts.
//! - [`l2`]: layer 2 mode's choice of the node that answers ARP and NDP for an address.
//! - [`set`]: one router's announced prefixes, as its RIB task applies them.
//! - [`patch`]: the announcements after a change to a few Services, from the last ones.
//! - [`runtime`]: the announcer task, publishing each VRF's set to the router subscribed to it.

pub mod allocate;
pub mod compute;
pub mod health;
pub mod l2;
pub mod patch;
pub mod readiness;
pub mod runtime;
pub mod set;

#[cfg(test)]
mod tests;

pub use crate::config::announce::AnnounceConfig;
pub use allocate::{allocate, AllocError, Allocation, Collision};
pub use compute::{
    compute, Announcements, Candidate, Origin, PeerSet, Reason, Route, RouteOrigin,
    RouterAnnouncements, RouterInput, RuntimeState, State,
};
pub use readiness::HealthStates;
pub use set::{announced_set, AnnouncedRoute, AnnouncedSet};

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

/// [`compute`] for a whole loaded config (the tests'; the daemon's announcer computes from
/// the shared announcement config).
#[cfg(test)]
pub fn compute_config(config: &crate::config::Config, runtime: RuntimeState<'_>) -> Announcements {
    compute(&config.announce, &router_inputs(config), runtime)
}
