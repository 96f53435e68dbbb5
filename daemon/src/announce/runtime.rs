//! The announcer task: keeps the config, the health verdicts and the drain flag, recomputes the
//! announcements when any of them changes, and hands each router's set to its RIB task. Only
//! the difference is applied there, so no BGP session is reset.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tracing::{info, warn};

use super::compute::{compute, Announcements, PeerSet, RouterInput, RuntimeState};
use super::health::{self, Verdict};
use super::readiness::{endpoints_to_probe, HealthStates};
use crate::bgp::announced::{AnnouncedRoute, AnnouncedSet};
use crate::bgp::rib_task::RibHandle;
use crate::config::announce::AnnounceConfig;

/// Depth of the verdict channel; verdicts are rare (only changes are sent).
const CHANNEL_DEPTH: usize = 64;

enum Event {
    Verdict(Verdict),
    Drain(bool),
    Config(Box<AnnounceConfig>, Vec<RouterInput>, BTreeMap<String, RibHandle>),
}

/// A handle to the running announcer.
#[derive(Clone)]
pub struct AnnouncerHandle {
    tx: mpsc::Sender<Event>,
    latest: watch::Receiver<Arc<Announcements>>,
    config: watch::Receiver<Arc<AnnounceConfig>>,
}

impl AnnouncerHandle {
    /// The announcement config in force (changes on reload).
    pub fn config(&self) -> Arc<AnnounceConfig> {
        self.config.borrow().clone()
    }

    /// The last computed announcements.
    pub fn current(&self) -> Arc<Announcements> {
        self.latest.borrow().clone()
    }

    /// `uplink drain`: withdraw service addresses (or announce them again).
    pub async fn drain(&self, drained: bool) {
        let _ = self.tx.send(Event::Drain(drained)).await;
    }

    /// A reloaded config and the RIB tasks of its routers: recompute and restart the health
    /// checks it names.
    pub async fn replace_config(
        &self,
        config: AnnounceConfig,
        routers: Vec<RouterInput>,
        ribs: BTreeMap<String, RibHandle>,
    ) {
        let _ = self.tx.send(Event::Config(Box::new(config), routers, ribs)).await;
    }
}

/// Converts one router's originations into what its RIB task applies: its own prefixes, then
/// the ones it imports from another VRF (frr-k8s `imports`), which only reach the peers whose
/// `to_advertise` allows them, without the source's communities (frr-k8s sets those per
/// neighbor, so a leaked route does not carry them).
pub fn announced_set(announcements: &Announcements, vrf: &str) -> AnnouncedSet {
    let Some(router) = announcements.router(vrf) else { return AnnouncedSet::new() };
    let mut set: AnnouncedSet = router
        .originate
        .iter()
        .map(|(prefix, route)| {
            let peers = match &route.peers {
                PeerSet::All => None,
                PeerSet::Only(set) => Some(set.clone()),
                PeerSet::ByPolicy => Some(BTreeSet::new()),
            };
            let communities = route.communities.iter().copied().collect();
            (*prefix, AnnouncedRoute { communities, local_pref: route.local_pref, peers })
        })
        .collect();
    for prefix in router.imported.keys() {
        set.entry(*prefix).or_insert_with(|| AnnouncedRoute {
            communities: Vec::new(),
            local_pref: None,
            peers: Some(BTreeSet::new()),
        });
    }
    set
}

struct Announcer {
    config: AnnounceConfig,
    routers: Vec<RouterInput>,
    ribs: BTreeMap<String, RibHandle>,
    health: HealthStates,
    drained: bool,
    checks: Vec<JoinHandle<()>>,
    verdicts: mpsc::Sender<Event>,
    latest: watch::Sender<Arc<Announcements>>,
    config_out: watch::Sender<Arc<AnnounceConfig>>,
}

impl Announcer {
    fn start_checks(&mut self) {
        for task in self.checks.drain(..) {
            task.abort();
        }
        self.health.clear();
        let node = self.config.node.name.clone().unwrap_or_default();
        let (tx, mut rx) = mpsc::channel::<Verdict>(CHANNEL_DEPTH);
        for service in &self.config.services {
            let Some(check) = &service.health else { continue };
            for address in endpoints_to_probe(service, &node) {
                self.checks.push(health::spawn(service.key(), address, check.clone(), tx.clone()));
            }
        }
        // Forward verdicts into the announcer's own queue.
        let events = self.verdicts.clone();
        self.checks.push(tokio::spawn(async move {
            while let Some(verdict) = rx.recv().await {
                if events.send(Event::Verdict(verdict)).await.is_err() {
                    return;
                }
            }
        }));
    }

    async fn publish(&mut self) {
        let runtime = RuntimeState { health: Some(&self.health), drained: self.drained };
        let result = compute(&self.config, &self.routers, runtime);
        for (vrf, rib) in &self.ribs {
            if let Err(e) = rib.set_announced(announced_set(&result, vrf)).await {
                warn!(vrf = %vrf, "cannot hand announcements to the RIB: {e}");
            }
        }
        let _ = self.latest.send(Arc::new(result));
    }

    async fn run(mut self, mut rx: mpsc::Receiver<Event>) {
        self.start_checks();
        self.publish().await;
        while let Some(event) = rx.recv().await {
            match event {
                Event::Verdict(v) => {
                    self.health.insert((v.service, v.address), v.healthy);
                }
                Event::Drain(drained) => {
                    info!(drained, "drain state changed");
                    self.drained = drained;
                }
                Event::Config(config, routers, ribs) => {
                    self.config = *config;
                    self.routers = routers;
                    self.ribs = ribs;
                    let _ = self.config_out.send(Arc::new(self.config.clone()));
                    self.start_checks();
                }
            }
            self.publish().await;
        }
    }
}

/// Starts the announcer for `config`, feeding the RIB tasks in `ribs` (by VRF); `drained`
/// starts it drained (the node was drained before the daemon restarted).
pub fn spawn(
    config: AnnounceConfig,
    routers: Vec<RouterInput>,
    ribs: BTreeMap<String, RibHandle>,
    drained: bool,
) -> AnnouncerHandle {
    let (tx, rx) = mpsc::channel(CHANNEL_DEPTH);
    let initial = compute(&config, &routers, RuntimeState { health: None, drained });
    let (latest_tx, latest_rx) = watch::channel(Arc::new(initial));
    let (config_tx, config_rx) = watch::channel(Arc::new(config.clone()));
    let announcer = Announcer {
        config,
        routers,
        ribs,
        health: HealthStates::new(),
        drained,
        checks: Vec::new(),
        verdicts: tx.clone(),
        latest: latest_tx,
        config_out: config_tx,
    };
    tokio::spawn(announcer.run(rx));
    AnnouncerHandle { tx, latest: latest_rx, config: config_rx }
}
