//! Read-only copies of RIB state that the RIB task hands to the control socket. They hold
//! `Arc`s to interned attributes, so a copy is cheap and never blocks the RIB for long.

use super::rib::{FamilyCounts, PerFamily};
use super::wire::attributes::PathAttributes;
use ipnet::IpNet;
use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;

/// Where a path came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PathSource {
    /// Originated by this node (`prefixes` of the router).
    Local,
    Peer {
        address: IpAddr,
        router_id: Ipv4Addr,
        ebgp: bool,
    },
}

#[derive(Debug, Clone)]
pub struct PathView {
    pub source: PathSource,
    pub attrs: Arc<PathAttributes>,
    pub best: bool,
    pub multipath: bool,
    /// Kept from a restarting peer, not re-advertised yet (RFC 4724).
    pub stale: bool,
    /// Why the path lost to the best one (RFC 4271 §9.1.2.2 step), when it did.
    pub reason: Option<String>,
}

#[derive(Debug, Clone)]
pub struct RouteView {
    pub prefix: IpNet,
    pub paths: Vec<PathView>,
}

/// Per-peer prefix counts, keyed by the peer's address.
#[derive(Debug, Clone, Copy, Default)]
pub struct PeerCounts {
    /// Accepted after import policy, per family (FRR's pfxRcd).
    pub accepted: FamilyCounts,
    /// In the peer's Adj-RIB-Out, per family (FRR's pfxSnt).
    pub sent: FamilyCounts,
    /// What the Adj-RIB-Out will hold once pending changes are sent, over all families.
    pub desired: u64,
    /// When the RIB last finished applying UPDATEs from this peer (the ingest benchmark
    /// reads it to time the last route into Loc-RIB to the millisecond).
    pub last_update_applied: Option<std::time::SystemTime>,
    /// More prefixes accepted than `max_prefixes` (with `max_prefixes_warning_only`).
    pub over_limit: bool,
    /// The table versions its Adj-RIB-Out was last brought up to.
    pub synced_version: PerFamily<u64>,
}

#[derive(Debug, Clone, Default)]
pub struct RibSummary {
    pub destinations_v4: u64,
    pub destinations_v6: u64,
    /// FRR's `tableVersion`: best-path changes so far.
    pub table_version: PerFamily<u64>,
    pub peers: HashMap<IpAddr, PeerCounts>,
}

/// What `show bgp routes PREFIX` looks up: an exact prefix, or an address (longest match).
#[derive(Debug, Clone, Copy)]
pub enum Lookup {
    Prefix(IpNet),
    Address(IpAddr),
}
