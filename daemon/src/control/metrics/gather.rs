//! One scrape's numbers, read from the running daemon through its handles.
//!
//! Nothing here can hold up routing: per-neighbor message counters are atomics
//! (`bgp::stats`), the FIB writer's counts are atomics (`fib::stats`), the announcements are
//! the announcer's last published value, and the only questions asked of a task or thread are
//! the RIB's prefix counts (`RibHandle::summary`, O(neighbors), no table walk) and the BFD
//! thread's session list. Each question has a deadline: a RIB busy with a large UPDATE burst
//! makes the scrape leave out that VRF's prefix counts rather than wait.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use crate::announce::runtime::AnnouncerHandle;
use crate::announce::{Origin, Reason, State};
use crate::bfd::session::Counters;
use crate::bgp::instance::Instance;
use crate::bgp::stats::PeerSnapshot;
use crate::config::vrf_display_name;
use crate::config::Config;
use crate::fib::stats::{FibStats, RouteState};
use crate::fib::Fib;
use crate::l2::runtime::{L2Status, Layer2Handle};
use crate::netconf::{EnactmentStatus, EnactmentStore};
use crate::reload::ReloadStats;

/// How long a scrape waits for a RIB task's prefix counts.
const RIB_DEADLINE: Duration = Duration::from_secs(2);
/// How long a scrape waits for a BFD thread's session list.
const BFD_DEADLINE: Duration = Duration::from_secs(1);

/// The handles the endpoint reads. Cheap to clone.
#[derive(Clone)]
pub struct Sources {
    /// The running routing instances (a reload publishes a new list).
    pub instances: watch::Receiver<Arc<Vec<Arc<Instance>>>>,
    pub fib: Fib,
    pub announcer: AnnouncerHandle,
    pub reloads: Arc<ReloadStats>,
    /// The running config: its selected network policies and where their enactments are kept.
    pub running: watch::Receiver<Arc<Config>>,
    /// The Kubernetes source's record (`[kubernetes]`).
    pub kubernetes: Option<crate::kubernetes::Health>,
    pub layer2: Option<Layer2Handle>,
}

/// One BGP neighbor.
#[derive(Debug, Clone)]
pub struct BgpPeer {
    /// "default" for the default VRF, as FRR names it.
    pub vrf: String,
    pub address: IpAddr,
    /// The configured port: MetalLB's `peer` label is `address:port`.
    pub port: u16,
    pub stats: PeerSnapshot,
    /// Accepted and advertised prefix counts; `None` when the RIB did not answer in time.
    pub prefixes: Option<Prefixes>,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Prefixes {
    pub accepted: u64,
    pub sent: u64,
    /// What should be advertised once the pending changes are sent.
    pub pending: u64,
}

impl BgpPeer {
    pub fn up(&self) -> bool {
        self.stats.state == "Established"
    }
}

/// One BFD session.
#[derive(Debug, Clone)]
pub struct BfdPeer {
    pub vrf: String,
    pub address: IpAddr,
    pub up: bool,
    pub counters: Counters,
}

/// One router's Loc-RIB size.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LocRib {
    pub vrf: String,
    pub ipv4: u64,
    pub ipv6: u64,
}

/// FIB writer numbers.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FibNumbers {
    /// (vrf, state, routes), summed over the VRF's instances (its router and its leaks).
    pub routes: Vec<(String, RouteState, u64)>,
    pub kernel_requests: u64,
    pub kernel_errors: u64,
    pub resyncs: u64,
    pub retries: u64,
}

/// How many candidate prefixes share one (vrf, origin, state, reason).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct AnnouncementCount {
    pub vrf: String,
    pub origin: &'static str,
    pub state: &'static str,
    pub reason: &'static str,
    pub count: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReloadNumbers {
    pub succeeded: u64,
    pub failed: u64,
    pub last_ok: bool,
    pub last_success: u64,
}

/// One address pool's size and use, as MetalLB's allocator counts them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PoolUsage {
    pub pool: String,
    /// Addresses it can hand out (saturating at `u64::MAX`: an IPv6 /64 has more).
    pub total: u64,
    pub in_use: u64,
}

/// One service address this node announces (MetalLB's `metallb_speaker_announced`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AnnouncedService {
    /// `namespace/name`.
    pub service: String,
    pub ip: IpAddr,
    /// MetalLB's `protocol` label: `bgp`, or `layer2` for an address this node answers ARP
    /// and NDP for.
    pub protocol: &'static str,
}

/// Everything one scrape exports.
#[derive(Debug, Clone)]
pub struct Snapshot {
    /// `[node] name` (MetalLB's `node` label).
    pub node: String,
    pub pools: Vec<PoolUsage>,
    pub announced: Vec<AnnouncedService>,
    pub bgp: Vec<BgpPeer>,
    pub loc_rib: Vec<LocRib>,
    pub bfd: Vec<BfdPeer>,
    pub fib: FibNumbers,
    pub announcements: Vec<AnnouncementCount>,
    pub reloads: ReloadNumbers,
    pub network_policies: Vec<PolicyEnactment>,
    /// `None` without `[kubernetes]`.
    pub kubernetes: Option<KubernetesNumbers>,
    pub layer2: Layer2Numbers,
    /// The families exported (`[metrics] namespaces`).
    pub namespaces: crate::config::MetricNamespaces,
}

/// Layer 2 mode's counts.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Layer2Numbers {
    /// Per address answered for: requests received, responses sent, gratuitous sent.
    pub addresses: Vec<(IpAddr, crate::l2::responder::AddressCounts)>,
    pub dropped: Vec<(&'static str, u64)>,
    /// `None` without a membership.
    pub members_alive: Option<u64>,
    pub membership_refused: Vec<(&'static str, u64)>,
}

/// The Kubernetes source, as MetalLB's speaker exports its client's state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KubernetesNumbers {
    /// A config with the API's objects has been applied.
    pub loaded: bool,
    /// The config in force may differ from the cluster (a watch failing, an object refused).
    pub stale: bool,
    /// Per kind: objects held, and whether its watch is current.
    pub kinds: Vec<(String, u64, bool)>,
    pub refused: u64,
}

/// One selected network policy's enactment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PolicyEnactment {
    pub policy: String,
    pub status: EnactmentStatus,
    /// Unix seconds of the last status change; 0 when it never ran here.
    pub since: u64,
}

/// Reads every source once.
pub async fn gather(sources: &Sources) -> Snapshot {
    let instances = sources.instances.borrow().clone();
    let (pools, mut announced) = allocation_numbers(&sources.announcer);
    // Read once: the Services' states are shared, not copied.
    let layer2_status = sources.layer2.as_ref().map(Layer2Handle::current);
    if let Some(status) = &layer2_status {
        announced.extend(layer2_announced(status));
    }
    let node = sources.running.borrow().announce.node.name.clone().unwrap_or_default();
    let mut snapshot = Snapshot {
        node,
        pools,
        announced,
        bgp: Vec::new(),
        loc_rib: Vec::new(),
        bfd: Vec::new(),
        fib: fib_numbers(&sources.fib),
        announcements: announcement_counts(&sources.announcer),
        reloads: reload_numbers(&sources.reloads),
        network_policies: policy_enactments(&sources.running.borrow()),
        kubernetes: sources.kubernetes.as_ref().map(kubernetes_numbers),
        layer2: match (&sources.layer2, &layer2_status) {
            (Some(layer2), Some(status)) => layer2_numbers(layer2, status),
            _ => Layer2Numbers::default(),
        },
        namespaces: sources.running.borrow().metrics.namespaces,
    };
    for instance in instances.iter() {
        gather_instance(instance, &mut snapshot).await;
    }
    snapshot
}

async fn gather_instance(instance: &Instance, out: &mut Snapshot) {
    let vrf = vrf_display_name(&instance.vrf).to_string();
    let summary = match tokio::time::timeout(RIB_DEADLINE, instance.rib.summary()).await {
        Ok(Ok(summary)) => Some(summary),
        Ok(Err(e)) => {
            tracing::debug!(vrf = %vrf, "metrics: no prefix counts: {e}");
            None
        }
        Err(_) => {
            tracing::debug!(vrf = %vrf, "metrics: the RIB did not answer in time; prefix counts left out");
            None
        }
    };
    if let Some(summary) = &summary {
        out.loc_rib.push(LocRib {
            vrf: vrf.clone(),
            ipv4: summary.destinations_v4,
            ipv6: summary.destinations_v6,
        });
    }
    for neighbor in instance.neighbors() {
        let address = neighbor.config.address;
        // A neighbor without a session in the RIB has nothing accepted or advertised.
        let prefixes = summary.as_ref().map(|s| {
            s.peers
                .get(&address)
                .map(|c| Prefixes {
                    accepted: c.accepted.total() as u64,
                    sent: c.sent.total() as u64,
                    pending: c.desired,
                })
                .unwrap_or_default()
        });
        out.bgp.push(BgpPeer {
            vrf: vrf.clone(),
            address,
            port: neighbor.config.port,
            stats: neighbor.stats.snapshot(),
            prefixes,
        });
    }
    let Some(bfd) = instance.bfd() else { return };
    match tokio::time::timeout(BFD_DEADLINE, bfd.peers()).await {
        Ok(Ok(peers)) => out.bfd.extend(peers.into_iter().map(|p| BfdPeer {
            vrf: vrf.clone(),
            address: p.spec.peer,
            up: p.state == crate::bfd::packet::State::Up,
            counters: p.counters,
        })),
        Ok(Err(e)) => tracing::debug!(vrf = %vrf, "metrics: no BFD sessions: {e}"),
        Err(_) => tracing::debug!(vrf = %vrf, "metrics: the BFD thread did not answer in time"),
    }
}

fn fib_numbers(fib: &Fib) -> FibNumbers {
    let mut routes: Vec<(String, RouteState, u64)> = Vec::new();
    for instance in fib.route_counts() {
        let vrf = vrf_display_name(&instance.config.vrf);
        for (state, count) in instance.routes {
            match routes.iter_mut().find(|(v, s, _)| v == vrf && *s == state) {
                Some((_, _, total)) => *total = total.saturating_add(count),
                None => routes.push((vrf.to_string(), state, count)),
            }
        }
    }
    let stats = fib.stats();
    FibNumbers {
        routes,
        kernel_requests: FibStats::load(&stats.kernel_requests),
        kernel_errors: FibStats::load(&stats.kernel_errors),
        resyncs: FibStats::load(&stats.resyncs),
        retries: FibStats::load(&stats.retries),
    }
}

/// Each pool's size and the addresses the allocation took from it, and the service addresses
/// announced: from the announcer's last result (its allocation and the config it used).
fn allocation_numbers(announcer: &AnnouncerHandle) -> (Vec<PoolUsage>, Vec<AnnouncedService>) {
    let current = announcer.current();
    // One pass over the Services (tens of thousands from the API), not one per pool.
    let mut in_use: HashMap<&str, usize> = HashMap::new();
    for assigned in current.allocation.services.values().filter_map(|r| r.as_ref().ok()) {
        *in_use.entry(&*assigned.pool).or_default() += assigned.addresses.len();
    }
    let pools = current
        .config
        .pools
        .iter()
        .map(|pool| PoolUsage {
            pool: pool.name.clone(),
            total: u64::try_from(crate::announce::allocate::pool_capacity(pool))
                .unwrap_or(u64::MAX),
            in_use: u64::try_from(in_use.get(pool.name.as_str()).copied().unwrap_or(0))
                .unwrap_or(u64::MAX),
        })
        .collect();
    let mut announced: Vec<AnnouncedService> = current
        .candidates
        .iter()
        .filter(|c| matches!(c.state, State::Announced { .. }))
        .filter_map(|c| match (&c.origin, c.prefix) {
            (Origin::Service { service, .. }, Some(prefix)) => Some(AnnouncedService {
                service: service.to_string(),
                ip: prefix.addr(),
                protocol: "bgp",
            }),
            _ => None,
        })
        .collect();
    // One per address (a service announced in two VRFs is one service on the node).
    announced.sort_by(|a, b| (&a.service, a.ip).cmp(&(&b.service, b.ip)));
    announced.dedup();
    (pools, announced)
}

fn announcement_counts(announcer: &AnnouncerHandle) -> Vec<AnnouncementCount> {
    let current = announcer.current();
    let mut counts: Vec<AnnouncementCount> = Vec::new();
    for candidate in &current.candidates {
        let vrf = candidate.vrf.as_deref().map(vrf_display_name).unwrap_or_default();
        let (state, reason) = match &candidate.state {
            State::Announced { .. } => ("announced", ""),
            State::Withdrawn { reason } => ("withdrawn", reason_label(reason)),
        };
        let origin = origin_label(&candidate.origin);
        let same = |c: &&mut AnnouncementCount| {
            c.vrf == vrf && c.origin == origin && c.state == state && c.reason == reason
        };
        match counts.iter_mut().find(same) {
            Some(count) => count.count += 1,
            None => counts.push(AnnouncementCount {
                vrf: vrf.to_string(),
                origin,
                state,
                reason,
                count: 1,
            }),
        }
    }
    counts.sort();
    counts
}

/// The `origin` label: what asked for the prefix.
pub fn origin_label(origin: &Origin) -> &'static str {
    match origin {
        Origin::Router => "router",
        Origin::Service { .. } => "service",
        Origin::Aggregate { .. } => "aggregate",
        Origin::PodNetwork { .. } => "pod_network",
        Origin::EgressIp { .. } => "egress_ip",
    }
}

/// The `reason` label of a withdrawn prefix.
pub fn reason_label(reason: &Reason) -> &'static str {
    match reason {
        Reason::NoAddress { .. } => "no_address",
        Reason::NotReady { .. } => "not_ready",
        Reason::NoAdvertisement { .. } => "no_advertisement",
        Reason::NodeNotSelected { .. } => "node_not_selected",
        Reason::NodeExcluded => "node_excluded",
        Reason::NodeNetworkUnavailable => "node_network_unavailable",
        Reason::AggregatedInto { .. } => "aggregated",
        Reason::Drained => "drained",
        Reason::NoRouter { .. } => "no_router",
        Reason::NoHostSubnet => "no_host_subnet",
        Reason::UnknownPeers { .. } => "unknown_peers",
        Reason::NoMatchingRouter { .. } => "no_matching_router",
    }
}

/// The addresses this node answers for in layer 2 mode, as MetalLB's speaker counts them.
fn layer2_announced(status: &L2Status) -> Vec<AnnouncedService> {
    let answered = status.answered();
    let addresses =
        answered.flat_map(|service| service.addresses.iter().map(move |ip| (service, ip)));
    addresses
        .map(|(service, ip)| AnnouncedService {
            service: service.service.to_string(),
            ip: *ip,
            protocol: "layer2",
        })
        .collect()
}

fn layer2_numbers(layer2: &Layer2Handle, status: &L2Status) -> Layer2Numbers {
    let counts = layer2.counts();
    let mut membership = status.membership.clone();
    if let Some(shown) = &mut membership {
        layer2.read_counters(shown);
    }
    Layer2Numbers {
        addresses: counts.addresses.into_iter().collect(),
        dropped: counts.dropped.into_iter().collect(),
        members_alive: membership
            .as_ref()
            .map(|m| u64::try_from(m.alive.len()).unwrap_or(u64::MAX)),
        membership_refused: membership
            .map(|m| {
                vec![
                    ("rate", m.refused_rate),
                    ("malformed", m.refused_malformed),
                    ("wrong_key", m.refused_wrong_key),
                    ("protocol", m.refused_protocol),
                ]
            })
            .unwrap_or_default(),
    }
}

fn kubernetes_numbers(health: &crate::kubernetes::Health) -> KubernetesNumbers {
    use crate::kubernetes::health::WatchState;
    let record = crate::kubernetes::health::read(health);
    let count = |n: usize| u64::try_from(n).unwrap_or(u64::MAX);
    KubernetesNumbers {
        loaded: record.applied,
        stale: record.stale(),
        kinds: record
            .kinds
            .iter()
            .map(|k| (k.kind.clone(), count(k.objects), k.state == WatchState::Watching))
            .collect(),
        refused: count(record.refused.len()),
    }
}

fn reload_numbers(stats: &ReloadStats) -> ReloadNumbers {
    ReloadNumbers {
        succeeded: stats.succeeded.load(Ordering::Relaxed),
        failed: stats.failed.load(Ordering::Relaxed),
        last_ok: stats.last_ok.load(Ordering::Relaxed),
        last_success: stats.last_success.load(Ordering::Relaxed),
    }
}

/// The selected policies' enactments, read from the store the policy thread writes (a small
/// file, rewritten whole after each transition). A policy without an enactment is Pending.
fn policy_enactments(config: &Config) -> Vec<PolicyEnactment> {
    let network = &config.network;
    if network.policies.is_empty() {
        return Vec::new();
    }
    let store = EnactmentStore::open(&network.state_dir)
        .unwrap_or_else(|_| EnactmentStore::empty(&network.state_dir));
    network
        .policies
        .iter()
        .map(|p| match store.enactments.get(&p.name) {
            Some(e) => PolicyEnactment { policy: p.name.clone(), status: e.status, since: e.time },
            None => PolicyEnactment {
                policy: p.name.clone(),
                status: EnactmentStatus::Pending,
                since: 0,
            },
        })
        .collect()
}
