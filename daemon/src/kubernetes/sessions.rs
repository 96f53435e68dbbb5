//! Each BGP session's state as frr-k8s's `BGPSessionState` reports it. The daemon gathers them
//! from the routing instances (which this layer cannot see) and hands them over on a watch
//! channel; `session_state` writes them to the API.

use std::net::IpAddr;

use tokio::sync::watch;

/// One session.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct SessionReport {
    /// `""` for the default VRF, as frr-k8s labels it.
    pub vrf: String,
    pub peer: IpAddr,
    /// FRR's state names: `Idle`, `Connect`, `Active`, `OpenSent`, `OpenConfirm`, `Established`.
    pub bgp: String,
    /// `Up`, `Down`, or `N/A` without BFD (frr-k8s's values).
    pub bfd: String,
}

/// Every session, whenever one changes.
pub type SessionReports = watch::Receiver<Vec<SessionReport>>;
