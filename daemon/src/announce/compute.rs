//! (config, health states) → per router (VRF): the prefixes to originate, with their
//! communities, LOCAL_PREF and peers, plus a "why / why not" for every candidate prefix.
//!
//! Pure: the daemon calls [`compute`] whenever the config or a health verdict changes and hands
//! each router's set to its RIB task, which originates and withdraws the difference.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt;
use std::net::IpAddr;
use std::sync::Arc;

use ipnet::IpNet;
use serde::Serialize;
use smallvec::{smallvec, SmallVec};

use super::allocate::{allocate, AllocError, Allocated, Allocation, ServiceKey};
use super::readiness::{readiness, HealthStates, Readiness};
use crate::config::announce::{
    Advertisement, AdvertisementKind, AnnounceConfig, Labels, Network, NetworkSelector, Pool,
    RouteAdvertisement, Service, TargetVrf, Topology,
};
use crate::config::selector::any_matches;
use crate::config::{vrf_display_name, Community};

/// The node label that excludes a node from announcing LoadBalancer addresses (Kubernetes
/// well-known label, honoured by MetalLB's speaker).
pub const EXCLUDE_LABEL: &str = "node.kubernetes.io/exclude-from-external-load-balancers";

/// What compute needs to know about one configured BGP router.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RouterInput {
    pub vrf: String,
    pub neighbors: Vec<IpAddr>,
    /// VRFs this router imports routes from (`imports = [{ vrf = "…" }]`).
    pub imports: Vec<String>,
    /// The router's own `prefixes` (frr-k8s `prefixes`, FRR `network` statements).
    pub prefixes: Vec<IpNet>,
}

/// Which of a router's neighbors get a prefix.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PeerSet {
    All,
    Only(BTreeSet<IpAddr>),
    /// The peers whose own `to_advertise` allows the prefix, and no others: router `prefixes`
    /// and imported routes, which frr-k8s leaves to the neighbor's `toAdvertise`.
    ByPolicy,
}

impl PeerSet {
    fn union(&mut self, other: &PeerSet) {
        match (&mut *self, other) {
            (PeerSet::All, _) | (_, PeerSet::ByPolicy) => {}
            (_, PeerSet::All) => *self = PeerSet::All,
            (PeerSet::ByPolicy, other) => *self = other.clone(),
            (PeerSet::Only(a), PeerSet::Only(b)) => a.extend(b.iter().copied()),
        }
    }

    /// Whether announcements send the prefix to `address` whatever its policy says.
    pub fn contains(&self, address: &IpAddr) -> bool {
        match self {
            PeerSet::All => true,
            PeerSet::Only(set) => set.contains(address),
            PeerSet::ByPolicy => false,
        }
    }
}

impl fmt::Display for PeerSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PeerSet::All => f.write_str("all peers"),
            PeerSet::Only(set) => {
                let list: Vec<String> = set.iter().map(|a| a.to_string()).collect();
                f.write_str(&list.join(", "))
            }
            PeerSet::ByPolicy => f.write_str("peers whose to_advertise allows it"),
        }
    }
}

/// One prefix a router originates.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Route {
    pub communities: BTreeSet<Community>,
    /// Sent to iBGP peers only (RFC 4271 §5.1.5).
    pub local_pref: Option<u32>,
    pub peers: PeerSet,
    /// What asked for it, shown as e.g. `service ns/web (advertisement all)` or `PodNetwork of
    /// default (route advertisement default)`. Nearly always one: kept inline.
    pub origins: Origins,
}

/// A route's origins (see [`Route::origins`]).
pub type Origins = SmallVec<[RouteOrigin; 1]>;

/// What asked for a route: a candidate's origin, or a Service whose address an aggregate
/// covers. Kept as it is and written out only when shown, not formatted for every Service at
/// every change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RouteOrigin {
    Candidate(Origin),
    AggregateOf(ServiceKey),
}

impl fmt::Display for RouteOrigin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RouteOrigin::Candidate(origin) => origin.fmt(f),
            RouteOrigin::AggregateOf(service) => write!(f, "aggregate of service {service}"),
        }
    }
}

/// As the text it is shown as (`uplink show announcements --json`).
impl Serialize for RouteOrigin {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl Route {
    /// The same prefix asked for again: every community, the higher LOCAL_PREF, the peers of
    /// both, and each origin once.
    fn merge(&mut self, other: Route) {
        self.communities.extend(other.communities);
        self.local_pref = self.local_pref.max(other.local_pref);
        self.peers.union(&other.peers);
        for origin in other.origins {
            if !self.origins.contains(&origin) {
                self.origins.push(origin);
            }
        }
    }
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct RouterAnnouncements {
    pub vrf: String,
    /// False for a VRF that only a route advertisement implies (no router configured there).
    pub configured: bool,
    pub originate: BTreeMap<IpNet, Route>,
    /// VRFs this router imports from: configured `imports` plus those `target_vrf = "default"`
    /// implies.
    pub imports: BTreeSet<String>,
    /// Routes originated in another VRF that this router imports, with that VRF. They reach
    /// the peers whose `to_advertise` allows them (as in frr-k8s); routes learned in that VRF
    /// are leaked by the FIB writer, with their next hop kept in the VRF they came from.
    pub imported: BTreeMap<IpNet, String>,
    /// The node is draining: every origination carries GRACEFUL_SHUTDOWN (RFC 8326).
    pub graceful_shutdown: bool,
}

/// What asked for a candidate prefix. Kept with every candidate and route (a Service's in
/// each): the names of the rare kinds take their length, not a `String`'s room to grow.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Origin {
    /// The router's `prefixes`.
    Router,
    Service {
        /// The Service's key (`namespace/name`), shared by its candidates.
        service: ServiceKey,
        /// Shared by the candidates of every Service it advertises.
        advertisement: Option<Arc<str>>,
    },
    Aggregate {
        advertisement: Box<str>,
    },
    PodNetwork {
        network: Box<str>,
        route_advertisement: Box<str>,
    },
    EgressIp {
        network: Box<str>,
        route_advertisement: Box<str>,
    },
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Origin::Router => f.write_str("router prefixes"),
            Origin::Service { service, advertisement: Some(adv) } => {
                write!(f, "service {service} (advertisement {adv})")
            }
            Origin::Service { service, advertisement: None } => write!(f, "service {service}"),
            Origin::Aggregate { advertisement } => {
                write!(f, "aggregate (advertisement {advertisement})")
            }
            Origin::PodNetwork { network, route_advertisement } => {
                write!(f, "PodNetwork of {network} (route advertisement {route_advertisement})")
            }
            Origin::EgressIp { network, route_advertisement } => {
                write!(f, "EgressIP of {network} (route advertisement {route_advertisement})")
            }
        }
    }
}

/// Why a candidate is not announced.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
#[serde(tag = "reason", rename_all = "snake_case")]
pub enum Reason {
    /// Boxed: the allocation's error is twice the size of every other reason, and a reason is
    /// kept with every candidate withdrawn (and every Service's state in the Events).
    NoAddress {
        error: Box<AllocError>,
    },
    NotReady {
        readiness: Readiness,
    },
    NoAdvertisement {
        pool: String,
    },
    NodeNotSelected {
        by: String,
    },
    NodeExcluded,
    NodeNetworkUnavailable,
    AggregatedInto {
        aggregate: IpNet,
    },
    Drained,
    NoRouter {
        vrf: String,
    },
    NoHostSubnet,
    UnknownPeers {
        peers: Vec<String>,
    },
    NoMatchingRouter {
        vrf: String,
    },
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Reason::NoAddress { error } => write!(f, "no address: {error}"),
            Reason::NotReady { readiness } => f.write_str(match readiness {
                Readiness::Ready => "ready",
                Readiness::NoHealthyEndpoint => "no healthy endpoint",
                Readiness::NoLocalEndpoint => "no local endpoint (traffic_policy local)",
                Readiness::NoHealthyLocalEndpoint => {
                    "no healthy local endpoint (traffic_policy local)"
                }
            }),
            Reason::NoAdvertisement { pool } => write!(f, "no advertisement selects pool {pool}"),
            Reason::NodeNotSelected { by } => write!(f, "node not selected by {by}"),
            Reason::NodeExcluded => write!(f, "node is labelled {EXCLUDE_LABEL}"),
            Reason::NodeNetworkUnavailable => {
                f.write_str("the node's NetworkUnavailable condition is True")
            }
            Reason::AggregatedInto { aggregate } => write!(f, "aggregated into {aggregate}"),
            Reason::Drained => f.write_str("drained"),
            Reason::NoRouter { vrf } => write!(f, "no router in VRF {}", vrf_display_name(vrf)),
            Reason::NoHostSubnet => f.write_str("layer3 network without a host_subnet"),
            Reason::UnknownPeers { peers } => write!(f, "unknown peers {}", peers.join(", ")),
            Reason::NoMatchingRouter { vrf } => write!(
                f,
                "no FRRConfiguration selected by frr_configuration_selector has a router in VRF {}",
                vrf_display_name(vrf)
            ),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum State {
    Announced { peers: PeerSet },
    Withdrawn { reason: Reason },
}

/// One prefix this node could originate, and whether and why it does.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Candidate {
    /// `None` when there is no prefix at all (e.g. a service without an address).
    pub prefix: Option<IpNet>,
    /// The VRF of the router it is (or would be) originated from.
    pub vrf: Option<String>,
    pub origin: Origin,
    pub state: State,
}

/// The whole result.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Announcements {
    /// Sorted by VRF; the default VRF (`""`) first.
    pub routers: Vec<RouterAnnouncements>,
    pub candidates: Vec<Candidate>,
    /// Shared: computed once per config, kept through health and drain changes.
    pub allocation: Arc<Allocation>,
    /// `uplink drain` is under way or done: layer 2 mode moves this node's addresses to
    /// others at once (ARP has no GRACEFUL_SHUTDOWN to let traffic move first).
    pub draining: bool,
    /// The config it was computed from: what reads the announcements (the Kubernetes status
    /// and Events) reads the same config with them, never a newer or older one.
    #[serde(skip)]
    pub config: Arc<AnnounceConfig>,
}

impl Announcements {
    pub fn router(&self, vrf: &str) -> Option<&RouterAnnouncements> {
        self.routers.iter().find(|r| r.vrf == vrf)
    }
}

/// Runtime inputs besides the config.
/// RFC 8326 §3: the GRACEFUL_SHUTDOWN well-known community, 65535:0.
pub const GRACEFUL_SHUTDOWN: Community = Community::Standard(0xFFFF_0000);

#[derive(Debug, Clone, Copy, Default)]
pub struct RuntimeState<'a> {
    pub health: Option<&'a HealthStates>,
    /// `uplink drain`: service addresses are withdrawn (pod networks stay, so running pods stay
    /// reachable until they are evicted).
    pub drained: bool,
    /// Draining or drained: everything the node originates carries GRACEFUL_SHUTDOWN and
    /// LOCAL_PREF 0 (RFC 8326 §4), so the fabric prefers other paths before anything is
    /// withdrawn.
    pub graceful_shutdown: bool,
}

pub(super) struct Builder<'a> {
    pub(super) routers: BTreeMap<String, RouterAnnouncements>,
    /// Each VRF's originations in the order they were asked for, put into its router's
    /// `originate` by [`Builder::finish`]: sorted once and built in one pass, where ten
    /// thousand inserts into the map compared addresses byte by byte (a quarter of the
    /// computation). A list, not a map: there are one or two VRFs.
    originations: Vec<(String, Vec<(IpNet, Route)>)>,
    inputs: &'a [RouterInput],
    pub(super) candidates: Vec<Candidate>,
}

impl<'a> Builder<'a> {
    /// Every configured router, with what it imports and nothing originated yet.
    pub(super) fn for_routers(routers: &'a [RouterInput]) -> Self {
        Builder {
            routers: routers
                .iter()
                .map(|r| {
                    let router = RouterAnnouncements {
                        vrf: r.vrf.clone(),
                        configured: true,
                        imports: r.imports.iter().cloned().collect(),
                        ..Default::default()
                    };
                    (r.vrf.clone(), router)
                })
                .collect(),
            originations: Vec::new(),
            inputs: routers,
            candidates: Vec::new(),
        }
    }

    fn withdraw(
        &mut self,
        prefix: Option<IpNet>,
        vrf: Option<&str>,
        origin: Origin,
        reason: Reason,
    ) {
        self.candidates.push(Candidate {
            prefix,
            vrf: vrf.map(str::to_string),
            origin,
            state: State::Withdrawn { reason },
        });
    }

    /// Originates `prefix` from the router in `vrf` (which must be configured, or implied).
    fn announce(&mut self, prefix: IpNet, vrf: &str, origin: Origin, route: Route) {
        // Called once per Service and target: the VRF's name is copied only for its first
        // origination (a VRF no router is configured in gets its router in `finish`).
        // Most are the default VRF's: its empty name needs no call to compare the bytes.
        let same = |v: &str| v.len() == vrf.len() && (vrf.is_empty() || v == vrf);
        let peers = route.peers.clone();
        match self.originations.iter_mut().find(|(v, _)| same(v)) {
            Some((_, originations)) => originations.push((prefix, route)),
            None => self.originations.push((vrf.to_string(), vec![(prefix, route)])),
        }
        self.candidates.push(Candidate {
            prefix: Some(prefix),
            vrf: Some(vrf.to_string()),
            origin,
            state: State::Announced { peers },
        });
    }

    /// Puts each router's originations into its `originate`: one route per prefix, the
    /// routes asked for the same prefix merged in the order they were asked.
    pub(super) fn finish(&mut self) {
        for (vrf, mut originations) in std::mem::take(&mut self.originations) {
            let router = self.routers.entry(vrf).or_insert_with_key(|vrf| RouterAnnouncements {
                vrf: vrf.clone(),
                ..Default::default()
            });
            // Stable (the merge keeps the order asked), by numbers rather than bytes, and in
            // the map's order (IPv4 first, then by address and length): the map's own sort
            // then finds them in order.
            originations.sort_by_key(|(prefix, _)| match prefix {
                IpNet::V4(net) => (false, u128::from(net.addr().to_bits()), net.prefix_len()),
                IpNet::V6(net) => (true, net.addr().to_bits(), net.prefix_len()),
            });
            let mut merged: Vec<(IpNet, Route)> = Vec::with_capacity(originations.len());
            for (prefix, route) in originations {
                match merged.last_mut() {
                    Some((last, existing)) if *last == prefix => existing.merge(route),
                    _ => merged.push((prefix, route)),
                }
            }
            // Collected, not extended: sorted input is built in one pass, where extending
            // inserts one by one.
            router.originate = merged.into_iter().collect();
        }
    }

    fn has_router(&self, vrf: &str) -> bool {
        self.inputs.iter().any(|r| r.vrf == vrf)
    }
}

/// Which VRFs each router (configured, or implied by a route advertisement) imports from: the
/// part of [`compute`] that the FIB's leaks need, without the services (no allocation).
pub fn imports(
    config: &AnnounceConfig,
    routers: &[RouterInput],
) -> BTreeMap<String, BTreeSet<String>> {
    let mut builder = Builder::for_routers(routers);
    networks(config, &mut builder);
    builder.routers.into_iter().map(|(vrf, r)| (vrf, r.imports)).collect()
}

/// Computes every router's announcements. See the module doc.
pub fn compute(
    config: &AnnounceConfig,
    routers: &[RouterInput],
    runtime: RuntimeState<'_>,
) -> Announcements {
    let allocation = Arc::new(allocate(&config.pools, &config.services));
    compute_allocated(config, allocation, routers, runtime)
}

/// [`compute`] with the config's allocation already made (the announcer makes it once per
/// config, not at every health verdict). The result's `config` is left empty: the announcer
/// puts in the shared config it computed from.
pub fn compute_allocated(
    config: &AnnounceConfig,
    allocation: Arc<Allocation>,
    routers: &[RouterInput],
    runtime: RuntimeState<'_>,
) -> Announcements {
    let empty = HealthStates::new();
    let health = runtime.health.unwrap_or(&empty);
    let mut builder = Builder::for_routers(routers);
    // A candidate per Service and router prefix, nearly always: made at that size rather
    // than doubled to it.
    let prefixes: usize = routers.iter().map(|r| r.prefixes.len()).sum();
    builder.candidates.reserve(config.services.len() + prefixes);
    for router in routers {
        for prefix in &router.prefixes {
            let route = Route {
                communities: BTreeSet::new(),
                local_pref: None,
                peers: PeerSet::ByPolicy,
                origins: smallvec![RouteOrigin::Candidate(Origin::Router)],
            };
            builder.announce(*prefix, &router.vrf, Origin::Router, route);
        }
    }
    services(config, &allocation, health, runtime.drained, &mut builder);
    networks(config, &mut builder);
    builder.finish();

    // Imported routes: what the source VRF's router originates.
    let originated: BTreeMap<String, Vec<IpNet>> = builder
        .routers
        .iter()
        .map(|(vrf, r)| (vrf.clone(), r.originate.keys().copied().collect()))
        .collect();
    for router in builder.routers.values_mut() {
        for from in &router.imports {
            if from == &router.vrf {
                continue;
            }
            for prefix in originated.get(from).into_iter().flatten() {
                router.imported.entry(*prefix).or_insert_with(|| from.clone());
            }
        }
    }
    if runtime.graceful_shutdown {
        for router in builder.routers.values_mut() {
            router.graceful_shutdown = true;
            for route in router.originate.values_mut() {
                route.communities.insert(GRACEFUL_SHUTDOWN);
                route.local_pref = Some(0);
            }
        }
    }
    Announcements {
        routers: builder.routers.into_values().collect(),
        // Kept until the next change: without the room a few more candidates needed.
        candidates: {
            let mut candidates = builder.candidates;
            candidates.shrink_to_fit();
            candidates
        },
        allocation,
        draining: runtime.graceful_shutdown,
        config: Arc::default(),
    }
}

fn services(
    config: &AnnounceConfig,
    allocation: &Allocation,
    health: &HealthStates,
    drained: bool,
    builder: &mut Builder<'_>,
) {
    let mut aggregates: Aggregates = BTreeMap::new();
    let node_labels = config.node.effective_labels();
    let advertisements = on_node(config, builder.inputs, &node_labels);
    let mut context = ServiceContext::new(config, &advertisements, node_labels, health, drained);
    // Every Service at every change: a copy is made only where the result keeps one.
    for (key, service, entry) in allocated_in_key_order(&config.services, allocation) {
        context.add(key, service, entry, builder, &mut aggregates);
    }
    for ((prefix, vrf), (route, advertisement)) in aggregates {
        let origin = Origin::Aggregate { advertisement: advertisement.into() };
        builder.announce(prefix, &vrf, origin, route);
    }
}

/// The aggregates the Services' addresses fall in, by (prefix, VRF): each one's route and the
/// advertisement that asked for it.
pub(super) type Aggregates = BTreeMap<(IpNet, String), (Route, String)>;

/// What every Service's candidates are made from besides the Service: worked out once per
/// computation.
pub(super) struct ServiceContext<'a, 'b> {
    config: &'a AnnounceConfig,
    node_labels: Labels,
    node_name: String,
    health: &'b HealthStates,
    drained: bool,
    by_pool: PoolAdvertisements<'a, 'b>,
}

impl<'a, 'b> ServiceContext<'a, 'b> {
    /// `advertisements` as [`on_node`] makes them from `node_labels`, the node's effective
    /// labels.
    pub(super) fn new(
        config: &'a AnnounceConfig,
        advertisements: &'b [AdvertisementOnNode<'a>],
        node_labels: Labels,
        health: &'b HealthStates,
        drained: bool,
    ) -> Self {
        ServiceContext {
            config,
            node_labels,
            node_name: config.node.name.clone().unwrap_or_default(),
            health,
            drained,
            by_pool: PoolAdvertisements::new(config, advertisements),
        }
    }

    /// Adds the candidates of one Service (`key`, allocated `entry`) to `builder`, and what
    /// it asks of an aggregate to `aggregates`.
    pub(super) fn add(
        &mut self,
        key: &ServiceKey,
        service: &Service,
        entry: &Allocated,
        builder: &mut Builder<'_>,
        aggregates: &mut Aggregates,
    ) {
        let (config, node_labels, health, drained) =
            (self.config, &self.node_labels, self.health, self.drained);
        let node_name = self.node_name.as_str();
        let by_pool = &mut self.by_pool;
        let plain = || Origin::Service { service: key.clone(), advertisement: None };
        let assigned = match entry {
            Ok(assigned) => assigned,
            Err(error) => {
                builder.withdraw(None, None, plain(), Reason::NoAddress { error: error.clone() });
                return;
            }
        };
        // Readiness, drain and exclusion concern the service as a whole: every address of a
        // dual-stack service is withdrawn together, each on its own candidate line.
        let hosts = assigned.ips().map(|a| (a, IpNet::from(a)));
        let ready = readiness(service, node_name, health);
        let verdict = if !ready.is_ready() {
            Some(Reason::NotReady { readiness: ready })
        } else if drained {
            Some(Reason::Drained)
        } else if node_labels.contains_key(EXCLUDE_LABEL) {
            Some(Reason::NodeExcluded)
        } else if config.node.network_unavailable {
            Some(Reason::NodeNetworkUnavailable)
        } else {
            None
        };
        if let Some(reason) = verdict {
            for (_, host) in hosts {
                builder.withdraw(Some(host), None, plain(), reason.clone());
            }
            return;
        }
        let Some((pool, advertisements)) = by_pool.of(&assigned.pool) else { return };
        if advertisements.is_empty() {
            for (_, host) in hosts {
                builder.withdraw(
                    Some(host),
                    None,
                    plain(),
                    Reason::NoAdvertisement { pool: pool.name.clone() },
                );
            }
            return;
        }
        for (address, host) in hosts {
            for on_node in advertisements.iter().copied() {
                let adv = on_node.advertisement;
                let origin = Origin::Service {
                    service: key.clone(),
                    advertisement: Some(on_node.name.clone()),
                };
                if !on_node.selected {
                    builder.withdraw(
                        Some(host),
                        None,
                        origin,
                        Reason::NodeNotSelected { by: format!("advertisement {}", adv.name) },
                    );
                    continue;
                }
                // Each family has its own aggregation length.
                let length = match address {
                    IpAddr::V4(_) => adv.aggregation_length,
                    IpAddr::V6(_) => adv.aggregation_length_v6,
                };
                let prefix = IpNet::new(address, length).map(|n| n.trunc()).unwrap_or(host);
                let targets = match &on_node.targets {
                    Ok(targets) => targets,
                    Err(reason) => {
                        builder.withdraw(Some(host), None, origin, reason.clone());
                        continue;
                    }
                };
                let route = Route {
                    communities: on_node.communities.clone(),
                    local_pref: adv.local_pref,
                    peers: PeerSet::All,
                    origins: smallvec![RouteOrigin::Candidate(origin.clone())],
                };
                let each = targets.iter().zip(copies((origin, route), targets.len()));
                for ((vrf, peers), (origin, route)) in each {
                    let route = Route { peers: peers.clone(), ..route };
                    if prefix == host {
                        builder.announce(prefix, vrf, origin, route);
                    } else {
                        builder.withdraw(
                            Some(host),
                            Some(vrf),
                            origin,
                            Reason::AggregatedInto { aggregate: prefix },
                        );
                        let agg_route = Route {
                            origins: smallvec![RouteOrigin::AggregateOf(key.clone())],
                            ..route
                        };
                        match aggregates.get_mut(&(prefix, vrf.clone())) {
                            Some((existing, _)) => {
                                existing.communities.extend(agg_route.communities.iter().copied());
                                existing.local_pref = existing.local_pref.max(agg_route.local_pref);
                                existing.peers.union(&agg_route.peers);
                                existing.origins.extend(agg_route.origins);
                            }
                            None => {
                                aggregates
                                    .insert((prefix, vrf.clone()), (agg_route, adv.name.clone()));
                            }
                        }
                    }
                }
            }
        }
    }
}

/// The Services the allocation has an entry for, in key order, each with the allocation's key
/// and entry: the key is the allocation's own (shared), not made again for every Service at
/// every change.
fn allocated_in_key_order<'a>(
    services: &'a [Arc<Service>],
    allocation: &'a Allocation,
) -> Vec<(&'a ServiceKey, &'a Service, &'a Allocated)> {
    let mut order: Vec<_> = services
        .iter()
        .filter_map(|service| {
            let (key, entry) = allocation.services.get_key_value(&*service.key)?;
            Some((key, &**service, entry))
        })
        .collect();
    order.sort_by(|a, b| a.0.cmp(b.0));
    order
}

/// `value` `count` times: copies first, then itself, so that the usual single use copies
/// nothing.
fn copies<T: Clone>(value: T, count: usize) -> impl Iterator<Item = T> {
    let mut value = Some(value);
    (1..=count).filter_map(move |n| if n == count { value.take() } else { value.clone() })
}

/// What an advertisement means on this node: worked out once per computation, not once per
/// Service it applies to (thousands of Services share a few advertisements).
pub(super) struct AdvertisementOnNode<'a> {
    advertisement: &'a Advertisement,
    /// Its name, shared by the origins of the Services it advertises.
    name: Arc<str>,
    /// Its `node_selectors` select this node.
    selected: bool,
    targets: Result<Vec<(String, PeerSet)>, Reason>,
    communities: BTreeSet<Community>,
}

pub(super) fn on_node<'a>(
    config: &'a AnnounceConfig,
    routers: &[RouterInput],
    node_labels: &Labels,
) -> Vec<AdvertisementOnNode<'a>> {
    config
        .advertisements
        .iter()
        .map(|advertisement| AdvertisementOnNode {
            advertisement,
            name: Arc::from(advertisement.name.as_str()),
            selected: any_matches(&advertisement.node_selectors, node_labels),
            targets: peer_targets(config, routers, &advertisement.peers),
            communities: advertisement.communities.iter().copied().collect(),
        })
        .collect()
}

/// Each pool's advertisements on this node, found the first time a Service of the pool asks.
pub(super) struct PoolAdvertisements<'a, 'b> {
    config: &'a AnnounceConfig,
    advertisements: &'b [AdvertisementOnNode<'a>],
    by_pool: HashMap<&'a str, (&'a Pool, Vec<&'b AdvertisementOnNode<'a>>)>,
}

impl<'a, 'b> PoolAdvertisements<'a, 'b> {
    fn new(config: &'a AnnounceConfig, advertisements: &'b [AdvertisementOnNode<'a>]) -> Self {
        PoolAdvertisements { config, advertisements, by_pool: HashMap::new() }
    }

    /// The pool named `name` and the advertisements that apply to it; `None` for no such pool.
    fn of(&mut self, name: &str) -> Option<(&'a Pool, &[&'b AdvertisementOnNode<'a>])> {
        if !self.by_pool.contains_key(name) {
            let pool = self.config.pool(name)?;
            let applying = self
                .advertisements
                .iter()
                .filter(|on_node| applies(on_node.advertisement, pool))
                .collect();
            self.by_pool.insert(pool.name.as_str(), (pool, applying));
        }
        let (pool, applying) = self.by_pool.get(name)?;
        Some((*pool, applying.as_slice()))
    }
}

/// Whether a BGP advertisement applies to `pool`.
pub fn in_bgp(config: &AnnounceConfig, pool: &Pool) -> bool {
    config.advertisements.iter().any(|adv| applies(adv, pool))
}

/// Whether `advertisement` applies to `pool`.
fn applies(advertisement: &Advertisement, pool: &Pool) -> bool {
    let by_name = advertisement.ip_address_pools.contains(&pool.name);
    let by_label = advertisement.ip_address_pool_selectors.iter().any(|s| s.matches(&pool.labels));
    // MetalLB: an advertisement that names no pool at all applies to every pool.
    let all = advertisement.ip_address_pools.is_empty()
        && advertisement.ip_address_pool_selectors.is_empty();
    by_name || by_label || all
}

/// Routers (by VRF) and peers an advertisement's `peers` list means. Empty: every router with
/// neighbors, to all of them.
fn peer_targets(
    config: &AnnounceConfig,
    routers: &[RouterInput],
    peers: &[String],
) -> Result<Vec<(String, PeerSet)>, Reason> {
    if peers.is_empty() {
        let targets: Vec<(String, PeerSet)> = routers
            .iter()
            .filter(|r| !r.neighbors.is_empty())
            .map(|r| (r.vrf.clone(), PeerSet::All))
            .collect();
        return if targets.is_empty() {
            Err(Reason::NoRouter { vrf: String::new() })
        } else {
            Ok(targets)
        };
    }
    let mut by_vrf: BTreeMap<String, BTreeSet<IpAddr>> = BTreeMap::new();
    let mut unknown = Vec::new();
    for peer in peers {
        let mut found = false;
        if let Ok(address) = peer.parse::<IpAddr>() {
            for router in routers.iter().filter(|r| r.neighbors.contains(&address)) {
                by_vrf.entry(router.vrf.clone()).or_default().insert(address);
                found = true;
            }
        }
        for named in config.peer_names.iter().filter(|p| &p.name == peer) {
            if routers.iter().any(|r| r.vrf == named.vrf && r.neighbors.contains(&named.address)) {
                by_vrf.entry(named.vrf.clone()).or_default().insert(named.address);
                found = true;
            }
        }
        if !found {
            unknown.push(peer.clone());
        }
    }
    if by_vrf.is_empty() {
        return Err(Reason::UnknownPeers { peers: unknown });
    }
    Ok(by_vrf.into_iter().map(|(vrf, set)| (vrf, PeerSet::Only(set))).collect())
}

fn selected_networks<'a>(config: &'a AnnounceConfig, ra: &RouteAdvertisement) -> Vec<&'a Network> {
    let mut out: Vec<&Network> = Vec::new();
    for selector in &ra.network_selectors {
        for network in &config.networks {
            let hit = match selector {
                NetworkSelector::DefaultNetwork => network.is_default(),
                NetworkSelector::ClusterUserDefinedNetworks { network_selector } => {
                    !network.is_default() && network_selector.matches(&network.labels)
                }
            };
            if hit && !out.iter().any(|n| n.name == network.name) {
                out.push(network);
            }
        }
    }
    out
}

fn networks(config: &AnnounceConfig, builder: &mut Builder<'_>) {
    let node_labels = config.node.effective_labels();
    for ra in &config.route_advertisements {
        for network in selected_networks(config, ra) {
            let target = match ra.target_vrf {
                TargetVrf::Default => String::new(),
                TargetVrf::Auto => network.vrf.clone(),
            };
            for kind in &ra.advertisements {
                let origin = match kind {
                    AdvertisementKind::PodNetwork => Origin::PodNetwork {
                        network: network.name.as_str().into(),
                        route_advertisement: ra.name.as_str().into(),
                    },
                    AdvertisementKind::EgressIp => Origin::EgressIp {
                        network: network.name.as_str().into(),
                        route_advertisement: ra.name.as_str().into(),
                    },
                };
                let prefixes: Vec<IpNet> = match kind {
                    AdvertisementKind::PodNetwork => match network.topology {
                        // Each node announces only its own slice (deck slide 19).
                        Topology::Layer3 => network.host_subnets.clone(),
                        // One segment: every node announces the whole subnet (slides 29-33).
                        Topology::Layer2 => network.subnets.clone(),
                    },
                    AdvertisementKind::EgressIp => {
                        network.egress_ips.iter().map(|a| IpNet::from(*a)).collect()
                    }
                };
                if prefixes.is_empty() {
                    if *kind == AdvertisementKind::PodNetwork {
                        builder.withdraw(None, Some(&target), origin, Reason::NoHostSubnet);
                    }
                    continue;
                }
                let verdict = if !ra.node_selector.matches(&node_labels) {
                    Err(Reason::NodeNotSelected { by: format!("route advertisement {}", ra.name) })
                } else if !builder.has_router(&target) {
                    Err(Reason::NoRouter { vrf: target.clone() })
                } else {
                    network_peers(config, builder.inputs, ra, &target)
                };
                for prefix in prefixes {
                    match &verdict {
                        Ok(peers) => {
                            let route = Route {
                                communities: BTreeSet::new(),
                                local_pref: None,
                                peers: peers.clone(),
                                origins: smallvec![RouteOrigin::Candidate(origin.clone())],
                            };
                            builder.announce(prefix, &target, origin.clone(), route);
                        }
                        Err(reason) => builder.withdraw(
                            Some(prefix),
                            Some(&target),
                            origin.clone(),
                            reason.clone(),
                        ),
                    }
                }
                // `target_vrf = "default"` for a network in its own VRF: leak both ways, as
                // OVN-Kubernetes renders `import vrf` in both routers (deck slide 34).
                if verdict.is_ok() && ra.target_vrf == TargetVrf::Default && !network.vrf.is_empty()
                {
                    builder
                        .routers
                        .entry(String::new())
                        .or_default()
                        .imports
                        .insert(network.vrf.clone());
                    let other = builder.routers.entry(network.vrf.clone()).or_insert_with(|| {
                        RouterAnnouncements { vrf: network.vrf.clone(), ..Default::default() }
                    });
                    other.imports.insert(String::new());
                }
            }
        }
    }
}

/// The peers of the router in `vrf` that a route advertisement's `frr_configuration_selector`
/// picks: all of them for an empty selector, else the neighbors that selected
/// `FRRConfiguration`s define in that VRF.
fn network_peers(
    config: &AnnounceConfig,
    routers: &[RouterInput],
    ra: &RouteAdvertisement,
    vrf: &str,
) -> Result<PeerSet, Reason> {
    if ra.frr_configuration_selector.is_empty() {
        return Ok(PeerSet::All);
    }
    let configured: BTreeSet<IpAddr> =
        routers.iter().filter(|r| r.vrf == vrf).flat_map(|r| r.neighbors.iter().copied()).collect();
    let set: BTreeSet<IpAddr> = config
        .router_labels
        .iter()
        .filter(|r| r.vrf == vrf && ra.frr_configuration_selector.matches(&r.labels))
        .flat_map(|r| r.neighbors.iter().copied())
        .filter(|a| configured.contains(a))
        .collect();
    if set.is_empty() {
        Err(Reason::NoMatchingRouter { vrf: vrf.to_string() })
    } else {
        Ok(PeerSet::Only(set))
    }
}
