//! Whether a service is ready to be announced from this node, as MetalLB's speaker decides it.
//!
//! - `traffic_policy = "cluster"`: ready on every node while at least one endpoint anywhere is
//!   healthy (kube-proxy forwards to it from any node).
//! - `traffic_policy = "local"`: ready only on nodes with a healthy endpoint of their own
//!   (traffic is not forwarded between nodes, so announcing elsewhere would blackhole it).
//! - A service with no endpoints listed is ready (plain anycast), unless it says
//!   `announce_without_endpoints = false` (a Kubernetes Service: no ready endpoint in its
//!   EndpointSlices means no announcement, as MetalLB).
//!
//! An endpoint of a service without a `health` check counts as healthy (listed = ready, as an
//! EndpointSlice's `ready` condition). With a check, an endpoint is healthy only once its check
//! has risen; until the first verdict it is not.

use std::collections::BTreeMap;
use std::net::IpAddr;

use serde::Serialize;

use crate::config::announce::{Service, TrafficPolicy};

/// Health verdicts by (service key, endpoint address). Missing means "not known yet".
pub type HealthStates = BTreeMap<(String, IpAddr), bool>;

#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Readiness {
    Ready,
    /// `cluster`: no endpoint anywhere is healthy.
    NoHealthyEndpoint,
    /// `local`: this node has no endpoint of the service.
    NoLocalEndpoint,
    /// `local`: this node has endpoints but none is healthy.
    NoHealthyLocalEndpoint,
}

impl Readiness {
    pub fn is_ready(&self) -> bool {
        *self == Self::Ready
    }
}

/// Whether one endpoint of `service` is healthy.
pub fn endpoint_healthy(service: &Service, address: IpAddr, health: &HealthStates) -> bool {
    service.health.is_none()
        || health.get(&(service.key.to_string(), address)).copied().unwrap_or(false)
}

/// The endpoints this node must probe for `service`: all of them for `cluster` (any healthy one
/// makes the service ready here), only its own for `local`.
pub fn endpoints_to_probe(service: &Service, node: &str) -> Vec<IpAddr> {
    if service.health.is_none() {
        return Vec::new();
    }
    service
        .endpoints
        .iter()
        .filter(|e| service.traffic_policy == TrafficPolicy::Cluster || *e.node == *node)
        .map(|e| e.address)
        .collect()
}

pub fn readiness(service: &Service, node: &str, health: &HealthStates) -> Readiness {
    if service.endpoints.is_empty() && service.announce_without_endpoints {
        return Readiness::Ready;
    }
    match service.traffic_policy {
        TrafficPolicy::Cluster => {
            if service.endpoints.iter().any(|e| endpoint_healthy(service, e.address, health)) {
                Readiness::Ready
            } else {
                Readiness::NoHealthyEndpoint
            }
        }
        TrafficPolicy::Local => {
            let mut local = service
                .endpoints
                .iter()
                .filter(|e| !e.node.is_empty() && *e.node == *node)
                .peekable();
            if local.peek().is_none() {
                return Readiness::NoLocalEndpoint;
            }
            if local.any(|e| endpoint_healthy(service, e.address, health)) {
                Readiness::Ready
            } else {
                Readiness::NoHealthyLocalEndpoint
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::allocate::tests_support::{service, tcp_check};
    use super::*;
    use crate::config::announce::Endpoint;

    fn ip(text: &str) -> IpAddr {
        text.parse().unwrap()
    }

    fn checked(policy: TrafficPolicy) -> Service {
        let mut s = service("ns", "web");
        s.traffic_policy = policy;
        s.health = Some(Box::new(tcp_check(80)));
        s.endpoints = std::sync::Arc::new([
            Endpoint { address: ip("10.128.1.5"), node: "wk1".into() },
            Endpoint { address: ip("10.128.2.5"), node: "wk2".into() },
        ]);
        s
    }

    fn states(pairs: &[(&str, bool)]) -> HealthStates {
        pairs.iter().map(|(a, h)| (("ns/web".to_string(), ip(a)), *h)).collect()
    }

    #[test]
    fn a_kubernetes_service_without_endpoints_is_not_ready() {
        let mut s = service("ns", "web");
        s.announce_without_endpoints = false;
        assert_eq!(readiness(&s, "wk1", &HealthStates::new()), Readiness::NoHealthyEndpoint);
        s.traffic_policy = TrafficPolicy::Local;
        assert_eq!(readiness(&s, "wk1", &HealthStates::new()), Readiness::NoLocalEndpoint);
    }

    #[test]
    fn no_endpoints_is_always_ready() {
        let s = service("ns", "anycast");
        assert_eq!(readiness(&s, "wk1", &HealthStates::new()), Readiness::Ready);
        let mut local = s.clone();
        local.traffic_policy = TrafficPolicy::Local;
        assert_eq!(readiness(&local, "wk9", &HealthStates::new()), Readiness::Ready);
    }

    #[test]
    fn cluster_needs_one_healthy_endpoint_anywhere() {
        let s = checked(TrafficPolicy::Cluster);
        // Unknown counts as not healthy.
        assert_eq!(readiness(&s, "wk3", &HealthStates::new()), Readiness::NoHealthyEndpoint);
        let remote_up = states(&[("10.128.1.5", false), ("10.128.2.5", true)]);
        assert_eq!(readiness(&s, "wk1", &remote_up), Readiness::Ready);
        assert_eq!(readiness(&s, "wk3", &remote_up), Readiness::Ready);
        let all_down = states(&[("10.128.1.5", false), ("10.128.2.5", false)]);
        assert_eq!(readiness(&s, "wk1", &all_down), Readiness::NoHealthyEndpoint);
        assert_eq!(endpoints_to_probe(&s, "wk3").len(), 2);
    }

    #[test]
    fn local_needs_a_healthy_endpoint_on_this_node() {
        let s = checked(TrafficPolicy::Local);
        let remote_up = states(&[("10.128.1.5", false), ("10.128.2.5", true)]);
        assert_eq!(readiness(&s, "wk2", &remote_up), Readiness::Ready);
        assert_eq!(readiness(&s, "wk1", &remote_up), Readiness::NoHealthyLocalEndpoint);
        assert_eq!(readiness(&s, "wk3", &remote_up), Readiness::NoLocalEndpoint);
        assert_eq!(endpoints_to_probe(&s, "wk1"), vec![ip("10.128.1.5")]);
    }

    #[test]
    fn endpoints_without_a_check_are_healthy() {
        let mut s = checked(TrafficPolicy::Local);
        s.health = None;
        assert_eq!(readiness(&s, "wk1", &HealthStates::new()), Readiness::Ready);
        assert_eq!(readiness(&s, "wk3", &HealthStates::new()), Readiness::NoLocalEndpoint);
        assert!(endpoints_to_probe(&s, "wk1").is_empty());
    }
}
