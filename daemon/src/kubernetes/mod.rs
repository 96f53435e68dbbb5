//! The Kubernetes source (`[kubernetes]`, the `kubernetes` build feature): the objects a MetalLB
//! speaker, frr-k8s and the nmstate handler read, watched on the API server and handed to the
//! reloader as config sources, so that an object read from the API means exactly what the same
//! manifest in `conf.d/` means (one parser, one merge). See docs/kubernetes.md.
//!
//! - `watch`: one watcher per kind (kube's `watcher`, which lists, watches, and lists again
//!   after a `410 Gone` or a lost connection); each kind's objects are replaced as a whole when
//!   a list completes, so a relist that finds what was there changes nothing.
//! - The objects, reduced to what the config reads (no status, no server-set metadata, so our
//!   own status writes and the apiserver's bookkeeping cause no reload), are published on a
//!   watch channel; the reloader reloads when they change, and keeps the last published set in
//!   the state directory for a start while the API server is away (`snapshot`).
//! - `probe`: while a watch fails, asks the API server's `/readyz` every second and lists every
//!   failing kind the moment it answers again.
//! - `status`: writes `status.loadBalancer.ingress` of the Services uplink allocates.
//! - `events`: Events on those Services, as MetalLB writes them (allocated, announced from
//!   which node, or why not).
//! - `sessions` and `session_state`: each BGP session as frr-k8s's `BGPSessionState`;
//!   `node_state`: the node's running config and last results as its `FRRNodeState`.
//! - `l2_status`: MetalLB's `ServiceL2Status` of each Service this node answers for in layer
//!   2 mode, and its `nodeAssigned` event; `l2_membership`: the Nodes and the memberlist
//!   Secret, for a `[layer2]` that leaves its members or key to the API.
//! - `enactment_writer`: each API policy's enactment on this node as kubernetes-nmstate's
//!   `NodeNetworkConfigurationEnactment`, and the policies' conditions
//!   (`nmstate_conditions`, pure).
//! - `write_outcomes`: what those writers do when a write fails, the same for each.
//! - `health`: what `uplink show kubernetes` and the metrics say about all of this.
//!
//! Only the parts that talk to the API server need the `kubernetes` build feature (kube's
//! client); the snapshot, the health record and the conditions are plain data, built either
//! way.

#[cfg(feature = "kubernetes")]
mod enactment_writer;
#[cfg(feature = "kubernetes")]
mod events;
pub mod health;
#[cfg(feature = "kubernetes")]
mod l2_membership;
#[cfg(feature = "kubernetes")]
mod l2_status;
mod nmstate_conditions;
#[cfg(feature = "kubernetes")]
mod node_state;
#[cfg(feature = "kubernetes")]
mod probe;
#[cfg(feature = "kubernetes")]
mod session_state;
pub mod sessions;
mod snapshot;
#[cfg(feature = "kubernetes")]
mod source;
#[cfg(feature = "kubernetes")]
mod status;
#[cfg(feature = "kubernetes")]
mod watch;
#[cfg(feature = "kubernetes")]
mod write_outcomes;

pub use health::{Health, SourceHealth};
pub use snapshot::Snapshot;

#[cfg(feature = "kubernetes")]
pub use source::{start, Source};

/// What the source exchanges with the daemon's other parts: what they report, for upstream's
/// status objects, and what layer 2 mode's membership reads from the API.
pub struct Links {
    /// Each BGP session's state, for `BGPSessionState`.
    pub sessions: sessions::SessionReports,
    /// Layer 2 mode's status, for `ServiceL2Status` and the `nodeAssigned` events.
    pub layer2: tokio::sync::watch::Receiver<std::sync::Arc<crate::l2::runtime::L2Status>>,
    /// The Nodes and the memberlist Secret, for a `[layer2]` that leaves them to the API.
    pub layer2_membership: tokio::sync::watch::Sender<std::sync::Arc<crate::l2::runtime::FromApi>>,
}
