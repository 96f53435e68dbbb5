//! The announcement part of the configuration as plain values: the node, MetalLB-style pools,
//! services and advertisements, OVN-Kubernetes-style networks and route advertisements.
//!
//! Field names are the snake_case of the upstream Kubernetes fields (`IPAddressPool`,
//! `BGPAdvertisement`, `Community`, `RouteAdvertisements`, `ClusterUserDefinedNetwork`), so a
//! manifest maps onto these types field by field.

use std::collections::BTreeMap;
use std::fmt;
use std::net::IpAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use ipnet::IpNet;
use serde::Serialize;

use crate::config::duration;
use crate::config::selector::LabelSelector;
use crate::config::Community;

pub type Labels = BTreeMap<String, String>;

/// The files (or `kubernetes:` objects) an item was defined in, nearly always one: the
/// source's own shared copy of its path, inline (a Service is kept per object of a cluster,
/// where a list and a path of its own were a tenth of a kilobyte).
pub type Sources = smallvec::SmallVec<[Arc<Path>; 1]>;

/// Everything that decides what this node announces, besides the BGP routers themselves.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct AnnounceConfig {
    pub node: Node,
    pub pools: Vec<Pool>,
    /// Shared with the manifest cache's translations (`config/manifest/cache.rs`): a reload at
    /// a cluster's size merges thousands of Services, each one copy whatever the configs and
    /// translations that hold it.
    pub services: Vec<Arc<Service>>,
    pub advertisements: Vec<Advertisement>,
    /// Layer 2 advertisements (MetalLB `L2Advertisement`): a pool may have these and BGP
    /// advertisements at once.
    pub l2_advertisements: Vec<L2Advertisement>,
    pub communities: Vec<CommunityAlias>,
    pub networks: Vec<Network>,
    pub route_advertisements: Vec<RouteAdvertisement>,
    /// Named BGP peers (MetalLB `BGPPeer` objects), so `peers = ["name"]` can refer to them.
    pub peer_names: Vec<PeerName>,
    /// Label sets of the `FRRConfiguration` objects that define routers, for
    /// `frr_configuration_selector`.
    pub router_labels: Vec<RouterLabels>,
}

impl AnnounceConfig {
    /// True when nothing here asks for any announcement.
    pub fn is_empty(&self) -> bool {
        self.services.is_empty() && self.networks.is_empty() && self.route_advertisements.is_empty()
    }

    /// The pool named `name`.
    pub fn pool(&self, name: &str) -> Option<&Pool> {
        self.pools.iter().find(|pool| pool.name == name)
    }
}

/// The node uplink runs on: what `node_selector`s match.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Node {
    /// `None` until a file sets it; selectors on `kubernetes.io/hostname` see this name.
    pub name: Option<String>,
    pub labels: Labels,
    /// Its `Node` object has the `NetworkUnavailable` condition (the network plugin has not
    /// set up its routes): as MetalLB's speaker, it announces nothing, in either mode.
    pub network_unavailable: bool,
}

impl Node {
    /// The labels selectors see: the configured ones plus `kubernetes.io/hostname`, as the
    /// kubelet sets it.
    pub fn effective_labels(&self) -> Labels {
        let mut labels = self.labels.clone();
        if let Some(name) = &self.name {
            labels.entry("kubernetes.io/hostname".to_string()).or_insert_with(|| name.clone());
        }
        labels
    }
}

/// An inclusive address range; a CIDR is stored as its first and last address.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct AddressRange {
    pub first: IpAddr,
    pub last: IpAddr,
    /// Set when written as a CIDR (kept for display and aggregation checks).
    pub cidr: Option<IpNet>,
}

impl fmt::Display for AddressRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.cidr {
            Some(net) => write!(f, "{net}"),
            None => write!(f, "{}-{}", self.first, self.last),
        }
    }
}

impl Serialize for AddressRange {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

/// MetalLB `IPAddressPool`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Pool {
    pub name: String,
    pub labels: Labels,
    pub addresses: Vec<AddressRange>,
    /// `false`: only services that ask for this pool or for an address in it get one.
    pub auto_assign: bool,
    /// Never hand out IPv4 addresses ending in `.0` or `.255` (old equipment drops them).
    pub avoid_buggy_ips: bool,
    pub service_allocation: Option<ServiceAllocation>,
    pub sources: Sources,
}

/// MetalLB `IPAddressPool.spec.serviceAllocation`.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct ServiceAllocation {
    /// Lower values are tried first (MetalLB); pools without a priority come last.
    pub priority: Option<i32>,
    pub namespaces: Vec<String>,
    pub namespace_selectors: Vec<LabelSelector>,
    pub service_selectors: Vec<LabelSelector>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum TrafficPolicy {
    /// Announce from every selected node while any endpoint anywhere is healthy.
    #[default]
    Cluster,
    /// Announce only from nodes that have a healthy endpoint of their own.
    Local,
}

/// A LoadBalancer Service. `Eq`, so that comparing two configs' `Arc<Service>`s compares the
/// pointers first (the standard library's shortcut for `Eq` types): thousands of them are
/// shared from one config to the next.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Service {
    /// `namespace/name`, made once when the Service is first read (an object read again
    /// keeps it, `config/manifest/cache.rs`): the allocation, the announcements' origins and
    /// the Events key the Service by this one copy, where each made its own (one more at
    /// every full allocation). Shown as the Service's `name`. The namespace holds no `/`
    /// (`config/announce/validate.rs`), so the name is what follows the first one and the
    /// namespace what comes before it: shown as both.
    #[serde(flatten, serialize_with = "name_and_namespace")]
    pub key: ServiceKey,
    pub labels: Labels,
    /// Labels of the service's namespace, for `namespace_selectors`: one copy per namespace,
    /// shared by its Services (`config/shared.rs`).
    pub namespace_labels: Arc<Labels>,
    /// The `metallb.io/address-pool` annotation.
    pub address_pool: Option<Box<str>>,
    /// Manual addresses, at most one per family: `spec.loadBalancerIP` (one) or the
    /// `metallb.io/loadBalancerIPs` annotation (one per family). Empty: allocated from a pool.
    pub load_balancer_ips: Addresses,
    /// The addresses it holds: a Kubernetes Service's `status.loadBalancer.ingress`. The
    /// allocation keeps them while they stay valid, as MetalLB does, so that creating another
    /// Service never moves this one's address (`announce::allocate`, step 2).
    pub held_ips: Addresses,
    /// `spec.ipFamilyPolicy`.
    pub ip_family_policy: IpFamilyPolicy,
    /// `spec.ipFamilies`, primary first. Empty: the family of the first range of the pool the
    /// address comes from (of the manual address, when there is one).
    pub ip_families: IpFamilies,
    pub traffic_policy: TrafficPolicy,
    /// Shared with the EndpointSlices' index for a Service read from Kubernetes (see
    /// `config/manifest/service.rs`): at a cluster's size, a copy per Service is a fifth of
    /// a kilobyte each.
    pub endpoints: Endpoints,
    /// With no endpoints listed: announce (plain anycast, the TOML default) or withdraw (a
    /// Kubernetes Service, whose EndpointSlices list every ready endpoint: none means none).
    pub announce_without_endpoints: bool,
    /// Boxed: rare (a file's TCP check), and 72 bytes inline in each of a cluster's Services.
    pub health: Option<Box<HealthCheck>>,
    pub sources: Sources,
}

/// A Service's addresses (manual or held): none, or one per family. Inline up to one, in
/// each of a cluster's thousands of Services, rather than in an allocation of its own.
pub type Addresses = smallvec::SmallVec<[IpAddr; 1]>;

/// A Service's `spec.ipFamilies`: inline, at most two (each once), in 8 bytes where a
/// `SmallVec` took 24.
pub type IpFamilies = arrayvec::ArrayVec<IpFamily, 2>;

/// A Service's key, `namespace/name`: made once per Service and shared by what keys it.
pub type ServiceKey = Arc<str>;

/// The key of the Service `name` in `namespace`.
pub fn service_key(namespace: &str, name: &str) -> ServiceKey {
    let mut key = String::with_capacity(namespace.len() + 1 + name.len());
    key.push_str(namespace);
    key.push('/');
    key.push_str(name);
    key.into()
}

/// A Service's key as its `name` and `namespace`.
fn name_and_namespace<S: serde::Serializer>(
    key: &ServiceKey,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    use serde::ser::SerializeMap;
    let (namespace, name) = parts_of(key);
    let mut map = serializer.serialize_map(Some(2))?;
    map.serialize_entry("name", name)?;
    map.serialize_entry("namespace", namespace)?;
    map.end()
}

/// The namespace and the name in a Service's key: what comes before and after the first `/`.
fn parts_of(key: &str) -> (&str, &str) {
    key.split_once('/').unwrap_or(("", key))
}

impl Service {
    /// `metadata.name`.
    pub fn name(&self) -> &str {
        parts_of(&self.key).1
    }

    /// `metadata.namespace`: part of its key, where a field of its own was 16 bytes more in
    /// each of a cluster's Services.
    pub fn namespace(&self) -> &str {
        parts_of(&self.key).0
    }

    /// Whether the Kubernetes API is among its sources (its status and Events are uplink's to
    /// write there).
    pub fn read_from_api(&self) -> bool {
        self.sources.iter().any(|source| crate::config::is_api_source(source))
    }
}

/// An address family of a service (`spec.ipFamilies`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum IpFamily {
    Ipv4,
    Ipv6,
}

impl IpFamily {
    pub fn of(address: IpAddr) -> Self {
        match address {
            IpAddr::V4(_) => Self::Ipv4,
            IpAddr::V6(_) => Self::Ipv6,
        }
    }

    /// The other family.
    pub fn other(self) -> Self {
        match self {
            Self::Ipv4 => Self::Ipv6,
            Self::Ipv6 => Self::Ipv4,
        }
    }
}

impl fmt::Display for IpFamily {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Ipv4 => "IPv4",
            Self::Ipv6 => "IPv6",
        })
    }
}

/// `spec.ipFamilyPolicy`: how many families a service wants.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum IpFamilyPolicy {
    /// One address.
    #[default]
    SingleStack,
    /// One address of each family when the pool has both, else one.
    PreferDualStack,
    /// One address of each family; pools lacking a family do not serve the service.
    RequireDualStack,
}

impl fmt::Display for IpFamilyPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::SingleStack => "single-stack",
            Self::PreferDualStack => "prefer-dual-stack",
            Self::RequireDualStack => "require-dual-stack",
        })
    }
}

/// A Service's endpoints, in the order they were listed.
pub type Endpoints = Arc<[Endpoint]>;

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub struct Endpoint {
    pub address: IpAddr,
    /// The node the endpoint runs on; empty when not known (an EndpointSlice endpoint without
    /// `nodeName`), which counts for `cluster` and never as this node's for `local`. One copy
    /// per node name, shared by its endpoints (`config/shared.rs`).
    pub node: crate::config::shared::NodeName,
}

/// How an endpoint is probed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "type", rename_all = "lowercase")]
pub enum ProbeKind {
    /// A TCP connection to the endpoint's port succeeds.
    Tcp { port: u16 },
    /// An HTTP GET answers with `expected_status`. `tls` marks `https` (see `health.rs`).
    Http { port: u16, path: String, expected_status: u16, tls: bool },
    /// A command exits 0; `{address}` in its arguments is replaced by the endpoint's address.
    Exec { command: Vec<String> },
}

/// A service's health check, run against each endpoint this node needs to know about.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct HealthCheck {
    #[serde(flatten)]
    pub probe: ProbeKind,
    #[serde(serialize_with = "duration::serialize")]
    pub interval: Duration,
    #[serde(serialize_with = "duration::serialize")]
    pub timeout: Duration,
    /// Consecutive successes before an endpoint counts as healthy.
    pub rise: u32,
    /// Consecutive failures before an endpoint counts as unhealthy.
    pub fall: u32,
}

/// MetalLB `BGPAdvertisement`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Advertisement {
    pub name: String,
    pub ip_address_pools: Vec<String>,
    pub ip_address_pool_selectors: Vec<LabelSelector>,
    /// Defaults to 32.
    pub aggregation_length: u8,
    /// Defaults to 128.
    pub aggregation_length_v6: u8,
    /// Resolved communities (aliases already replaced by their values).
    pub communities: Vec<Community>,
    pub local_pref: Option<u32>,
    /// Peer names or addresses; empty means every peer.
    pub peers: Vec<String>,
    pub node_selectors: Vec<LabelSelector>,
    pub sources: Sources,
}

/// MetalLB `L2Advertisement`: one node answers ARP (IPv4) and NDP (IPv6) for each address of
/// the pools it selects.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct L2Advertisement {
    pub name: String,
    /// Pools by name; with `ip_address_pool_selectors`, empty both means every pool (as
    /// MetalLB).
    pub ip_address_pools: Vec<String>,
    pub ip_address_pool_selectors: Vec<LabelSelector>,
    /// The nodes that may answer; empty means every node.
    pub node_selectors: Vec<LabelSelector>,
    /// The interfaces answered on; empty means every interface that does ARP or NDP.
    pub interfaces: Vec<String>,
    pub sources: Sources,
}

/// MetalLB `Community`: a name for a community value.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CommunityAlias {
    pub name: String,
    pub value: Community,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Topology {
    /// Each node owns a slice of the subnet (`host_subnet`) and announces that slice.
    Layer3,
    /// One segment across the cluster: every node announces the whole subnet.
    Layer2,
}

/// A pod network: the cluster default (`name = "default"`) or a ClusterUserDefinedNetwork.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Network {
    pub name: String,
    pub labels: Labels,
    pub topology: Topology,
    pub subnets: Vec<IpNet>,
    /// This node's slices of the subnets (layer3 only).
    pub host_subnets: Vec<IpNet>,
    /// The VRF the network lives in: `""` for the default network, its name otherwise.
    pub vrf: String,
    /// EgressIPs currently assigned to this node.
    pub egress_ips: Vec<IpAddr>,
    pub sources: Sources,
}

impl Network {
    pub fn is_default(&self) -> bool {
        self.name == DEFAULT_NETWORK
    }
}

/// The name of the cluster's default pod network.
pub const DEFAULT_NETWORK: &str = "default";

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub enum AdvertisementKind {
    PodNetwork,
    #[serde(rename = "EgressIP")]
    EgressIp,
}

impl fmt::Display for AdvertisementKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::PodNetwork => "PodNetwork",
            Self::EgressIp => "EgressIP",
        })
    }
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "network_selection_type")]
pub enum NetworkSelector {
    DefaultNetwork,
    ClusterUserDefinedNetworks { network_selector: LabelSelector },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum TargetVrf {
    /// Announce from the default-VRF router; leak between it and the network's VRF both ways.
    #[default]
    Default,
    /// Announce from the router in the network's own VRF (VRF-lite).
    Auto,
}

/// OVN-Kubernetes `RouteAdvertisements`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RouteAdvertisement {
    pub name: String,
    pub advertisements: Vec<AdvertisementKind>,
    pub network_selectors: Vec<NetworkSelector>,
    pub node_selector: LabelSelector,
    pub target_vrf: TargetVrf,
    /// Which FRRConfigurations' routers (and their neighbors) carry the routes.
    pub frr_configuration_selector: LabelSelector,
    pub sources: Sources,
}

/// A named peer (MetalLB `BGPPeer`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PeerName {
    pub name: String,
    pub vrf: String,
    pub address: IpAddr,
}

/// The labels of one `FRRConfiguration` and the routers/neighbors it defines.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RouterLabels {
    pub config_name: String,
    pub labels: Labels,
    pub vrf: String,
    pub neighbors: Vec<IpAddr>,
}
