//! The writer's requests to a RIB task to send part of its routes again.
//!
//! The writer keeps no copy of the routes: the RIB holds the desired state. When the writer
//! must write routes it was not just told about — a nexthop group whose next hops became
//! reachable again, a VRF table that appeared, a route someone deleted behind uplink's back, a
//! new VRF leak, a resync after lost notifications — it asks the RIB that feeds the instance to
//! replay them. The RIB answers on its ordinary channel, so an answer arrives after every
//! change the RIB had sent before it read the request, and before every later one.
//!
//! The request slot never blocks the writer: requests pile up (merged) behind a mutex, and a
//! `Notify` wakes the RIB task.

use super::route::NextHop;
use ipnet::IpNet;
use std::sync::{Mutex, PoisonError};
use tokio::sync::Notify;

/// Which routes to replay.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReplayScope {
    /// Every route with a next hop.
    All,
    /// The routes whose next-hop set is one of these.
    Sets(Vec<Box<[NextHop]>>),
    /// These prefixes (those the RIB has a route for).
    Prefixes(Vec<IpNet>),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplayRequest {
    /// Echoed in the answer ([`super::FibSender::send_replay`]).
    pub token: u64,
    pub scope: ReplayScope,
}

impl ReplayScope {
    /// Whether a route with `hops` for `prefix` is asked for.
    pub fn wants(&self, prefix: &IpNet, hops: &[NextHop]) -> bool {
        match self {
            ReplayScope::All => true,
            ReplayScope::Sets(sets) => sets.iter().any(|s| **s == *hops),
            ReplayScope::Prefixes(prefixes) => prefixes.contains(prefix),
        }
    }
}

/// Shared by the writer (which posts) and the RIB task of one instance (which takes).
#[derive(Debug, Default)]
pub(crate) struct ReplaySlot {
    requests: Mutex<Vec<ReplayRequest>>,
    wake: Notify,
}

impl ReplaySlot {
    pub(crate) fn post(&self, request: ReplayRequest) {
        self.requests.lock().unwrap_or_else(PoisonError::into_inner).push(request);
        self.wake.notify_one();
    }

    pub(crate) async fn wanted(&self) {
        self.wake.notified().await;
    }

    pub(crate) fn take(&self) -> Vec<ReplayRequest> {
        std::mem::take(&mut *self.requests.lock().unwrap_or_else(PoisonError::into_inner))
    }
}
