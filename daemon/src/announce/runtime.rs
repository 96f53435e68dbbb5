//! The announcer task: keeps the config, the health verdicts and the drain flag, recomputes the
//! announcements when any of them changes (from the last result when a few Services alone
//! did: [`super::patch`]), and publishes each VRF's set on a `watch` channel
//! that the router of that VRF subscribes to ([`AnnouncerHandle::subscribe`]). The router
//! applies only the difference, so no BGP session is reset; a router started later (a reload)
//! gets the current set the moment it subscribes.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex, PoisonError};

use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tracing::info;

use super::allocate::{allocate, allocate_one_more, asks_the_same, Allocation};
use super::compute::{compute_allocated, Announcements, RouterInput, RuntimeState};
use super::health::{self, Verdict};
use super::patch::{changed_services, patched, Changed};
use super::readiness::{endpoints_to_probe, HealthStates};
use super::set::{announced_set, AnnouncedSet};
use crate::config::announce::{AnnounceConfig, HealthCheck};

/// Depth of the verdict channel; verdicts are rare (only changes are sent).
const CHANNEL_DEPTH: usize = 64;

/// Where the node is in a drain: serving; draining (everything it originates carries
/// GRACEFUL_SHUTDOWN and LOCAL_PREF 0, RFC 8326, so the fabric moves traffic away first);
/// drained (service addresses withdrawn, the rest still with GRACEFUL_SHUTDOWN).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum DrainPhase {
    #[default]
    Serving,
    Draining,
    Drained,
}

impl DrainPhase {
    fn runtime<'a>(self, health: Option<&'a HealthStates>) -> RuntimeState<'a> {
        RuntimeState {
            health,
            drained: self == DrainPhase::Drained,
            graceful_shutdown: self != DrainPhase::Serving,
        }
    }
}

enum Event {
    Verdict(Verdict),
    Drain(DrainPhase),
    Config(Arc<AnnounceConfig>, Vec<RouterInput>),
}

/// One endpoint's health check while it runs: a reload that leaves the service's endpoint and
/// its check as they were keeps the task and its verdict, so the address is not withdrawn
/// until a new check has risen again (every Kubernetes event is a reload).
struct RunningCheck {
    check: HealthCheck,
    run: u64,
    task: JoinHandle<()>,
}

impl Drop for RunningCheck {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// One `watch` channel per VRF that a router subscribed to. Shared by the handle (which
/// creates a channel on the first subscription) and the task (which publishes into each).
type Feeds = Arc<Mutex<BTreeMap<String, watch::Sender<Arc<AnnouncedSet>>>>>;

/// A handle to the running announcer.
#[derive(Clone)]
pub struct AnnouncerHandle {
    tx: mpsc::Sender<Event>,
    latest: watch::Receiver<Arc<Announcements>>,
    feeds: Feeds,
}

impl AnnouncerHandle {
    /// The announced set of `vrf`'s router ("" for the default VRF): its current value, and
    /// every change after it.
    pub fn subscribe(&self, vrf: &str) -> watch::Receiver<Arc<AnnouncedSet>> {
        // Held only to look up or insert one entry: a poisoned lock left no half-made entry.
        let mut feeds = self.feeds.lock().unwrap_or_else(PoisonError::into_inner);
        match feeds.get(vrf) {
            Some(feed) => feed.subscribe(),
            None => {
                let current = Arc::new(announced_set(&self.latest.borrow(), vrf));
                let (tx, rx) = watch::channel(current);
                feeds.insert(vrf.to_string(), tx);
                rx
            }
        }
    }

    /// The announcement config in force (changes on reload).
    pub fn config(&self) -> Arc<AnnounceConfig> {
        self.latest.borrow().config.clone()
    }

    /// The last computed announcements.
    pub fn current(&self) -> Arc<Announcements> {
        self.latest.borrow().clone()
    }

    /// The announcements: the current ones, and every change after them.
    pub fn changes(&self) -> watch::Receiver<Arc<Announcements>> {
        self.latest.clone()
    }

    /// `uplink drain`: withdraw service addresses (or announce them again).
    pub async fn set_drain(&self, phase: DrainPhase) {
        let _ = self.tx.send(Event::Drain(phase)).await;
    }

    /// A reloaded config and its routers: recompute; start the health checks it adds or
    /// changes, stop those it drops, keep the others running.
    pub async fn replace_config(&self, config: Arc<AnnounceConfig>, routers: Vec<RouterInput>) {
        let _ = self.tx.send(Event::Config(config, routers)).await;
    }
}

struct Announcer {
    config: Arc<AnnounceConfig>,
    /// The config's allocation (a pure function of its pools and Services), made again only
    /// when a config changes what it reads ([`asks_the_same`]), and from the last one when
    /// the change is one more Service that moves no other, or Services holding what they
    /// were given ([`allocate_one_more`]).
    allocation: Arc<Allocation>,
    routers: Vec<RouterInput>,
    feeds: Feeds,
    health: HealthStates,
    drain: DrainPhase,
    /// By (service key, endpoint address).
    checks: BTreeMap<(String, IpAddr), RunningCheck>,
    /// The number of check runs started so far: the next run's id.
    runs: u64,
    verdicts: mpsc::Sender<Verdict>,
    latest: watch::Sender<Arc<Announcements>>,
}

/// What changed since the last result was computed.
enum Since {
    /// Anything: compute in full.
    Anything,
    /// These Services, and nothing else ([`patched`]).
    Services(Vec<Changed>),
}

impl Announcer {
    /// Makes the running health checks the config's: a check whose endpoint and settings are
    /// unchanged keeps running and keeps its verdict.
    fn sync_checks(&mut self) {
        let node = self.config.node.name.clone().unwrap_or_default();
        let mut wanted: BTreeMap<(String, IpAddr), &HealthCheck> = BTreeMap::new();
        for service in &self.config.services {
            let Some(check) = &service.health else { continue };
            for address in endpoints_to_probe(service, &node) {
                wanted.insert((service.key.to_string(), address), check);
            }
        }
        let health = &mut self.health;
        self.checks.retain(|key, running| {
            let keep = wanted.get(key).is_some_and(|check| **check == running.check);
            if !keep {
                health.remove(key);
            }
            keep
        });
        for (key, check) in wanted {
            if self.checks.contains_key(&key) {
                continue;
            }
            let run = self.runs;
            self.runs += 1;
            let task =
                health::spawn(key.0.clone(), key.1, check.clone(), run, self.verdicts.clone());
            self.checks.insert(key, RunningCheck { check: check.clone(), run, task });
        }
    }

    /// Records a verdict of a check that still runs as it did when it reached it: what
    /// changed, the verdict's Service.
    fn record(&mut self, verdict: Verdict) -> Since {
        let key = (verdict.service, verdict.address);
        if self.checks.get(&key).is_some_and(|running| running.run == verdict.run) {
            self.health.insert(key.clone(), verdict.healthy);
        }
        let service = self.config.services.iter().find(|service| *service.key == *key.0);
        Since::Services(vec![Changed { key: key.0, service: service.cloned() }])
    }

    fn publish(&mut self, since: Since) {
        let runtime = self.drain.runtime(Some(&self.health));
        let full =
            || compute_allocated(&self.config, self.allocation.clone(), &self.routers, runtime);
        let mut result = match since {
            Since::Anything => full(),
            Since::Services(changed) => {
                let last = self.latest.borrow().clone();
                let allocation = self.allocation.clone();
                match patched(&last, &self.config, allocation, &self.routers, runtime, &changed) {
                    Some(result) => {
                        debug_assert_eq!(result, full(), "patched for {changed:?}");
                        result
                    }
                    None => full(),
                }
            }
        };
        result.config = self.config.clone();
        let result = Arc::new(result);
        // `latest` first: a subscription made meanwhile starts from this result or gets it below.
        let last = self.latest.send_replace(result.clone());
        let feeds = self.feeds.lock().unwrap_or_else(PoisonError::into_inner);
        let mut last_sets = Vec::with_capacity(feeds.len());
        for (vrf, feed) in feeds.iter() {
            let set = announced_set(&result, vrf);
            // Unchanged sets are not sent: the router would re-derive every export policy.
            feed.send_if_modified(|current| {
                let changed = **current != set;
                if changed {
                    last_sets.push(std::mem::replace(current, Arc::new(set)));
                }
                changed
            });
        }
        drop(feeds);
        // The last result and sets are freed after the routers were woken, not before: at a
        // cluster's size that is thousands of candidates and routes (a twentieth of an
        // event's work), and the router can send the UPDATE on the other core meanwhile.
        drop((last, last_sets));
    }

    async fn run(mut self, mut rx: mpsc::Receiver<Event>) {
        self.sync_checks();
        self.publish(Since::Anything);
        while let Some(event) = rx.recv().await {
            let since = match event {
                Event::Verdict(v) => self.record(v),
                Event::Drain(phase) => {
                    info!(?phase, "drain state changed");
                    self.drain = phase;
                    Since::Anything
                }
                Event::Config(config, routers) => {
                    // Nothing the announcements read changed (a ClusterIP Service's
                    // endpoints, a node-network policy, a neighbor's timers: every
                    // Kubernetes event is a reload): the last result stands, and nothing
                    // downstream is woken to walk it again.
                    if routers == self.routers && config == self.config {
                        continue;
                    }
                    let (pools, services) = (&config.pools, &config.services);
                    let before = (self.config.pools.as_slice(), self.config.services.as_slice());
                    // A few Services changed, and the allocation moved none of the others:
                    // their candidates stand.
                    let mut since = match changed_services(before.1, services) {
                        Some(changed) if routers == self.routers => Since::Services(changed),
                        _ => Since::Anything,
                    };
                    if !asks_the_same(before, pools, services) {
                        let last = (&*self.allocation, before.0, before.1);
                        let allocation = allocate_one_more(last, pools, services);
                        if allocation.is_none() {
                            since = Since::Anything;
                        }
                        let allocation = allocation.unwrap_or_else(|| allocate(pools, services));
                        self.allocation = Arc::new(allocation);
                    }
                    self.config = config;
                    self.routers = routers;
                    self.sync_checks();
                    since
                }
            };
            self.publish(since);
        }
    }
}

/// Starts the announcer for `config` and its `routers`, in `drain` (drained when the node was
/// drained before the daemon restarted). Routers subscribe to their VRF's set.
pub fn spawn(
    config: Arc<AnnounceConfig>,
    routers: Vec<RouterInput>,
    drain: DrainPhase,
) -> AnnouncerHandle {
    let (tx, rx) = mpsc::channel(CHANNEL_DEPTH);
    let allocation = Arc::new(allocate(&config.pools, &config.services));
    let mut initial = compute_allocated(&config, allocation.clone(), &routers, drain.runtime(None));
    initial.config = config.clone();
    let (latest_tx, latest_rx) = watch::channel(Arc::new(initial));
    // The checks' verdicts, forwarded into the announcer's own queue.
    let (verdicts, mut verdicts_rx) = mpsc::channel::<Verdict>(CHANNEL_DEPTH);
    let events = tx.clone();
    tokio::spawn(async move {
        while let Some(verdict) = verdicts_rx.recv().await {
            if events.send(Event::Verdict(verdict)).await.is_err() {
                return;
            }
        }
    });
    let feeds = Feeds::default();
    let announcer = Announcer {
        config,
        allocation,
        routers,
        feeds: feeds.clone(),
        health: HealthStates::new(),
        drain,
        checks: BTreeMap::new(),
        runs: 0,
        verdicts,
        latest: latest_tx,
    };
    tokio::spawn(announcer.run(rx));
    AnnouncerHandle { tx, latest: latest_rx, feeds }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::announce::allocate::tests_support::{advertisement, pool, service};

    fn config_with(vip: &str) -> AnnounceConfig {
        let mut web = service("ns", "web");
        web.load_balancer_ips = smallvec::smallvec![vip.parse().unwrap()];
        AnnounceConfig {
            pools: vec![pool("vips", &["10.0.0.0/24"])],
            services: vec![Arc::new(web)],
            advertisements: vec![advertisement("all")],
            ..Default::default()
        }
    }

    async fn next_result(changes: &mut watch::Receiver<Arc<Announcements>>) {
        let waited = tokio::time::timeout(Duration::from_secs(5), changes.changed()).await;
        assert!(matches!(waited, Ok(Ok(()))), "no result published");
    }

    #[tokio::test]
    async fn a_config_equal_to_the_last_publishes_nothing_and_a_changed_one_does() {
        let routers = vec![RouterInput {
            vrf: String::new(),
            neighbors: vec!["10.0.0.1".parse().unwrap()],
            imports: vec![],
            prefixes: vec![],
        }];
        let first = Arc::new(config_with("10.0.0.7"));
        let handle = spawn(first.clone(), routers.clone(), DrainPhase::Serving);
        let mut changes = handle.changes();
        next_result(&mut changes).await;

        // The same content in new allocations (an object translated again into an equal
        // Service), then a drain event, which always publishes: the result is still the
        // first config's, so the equal one published nothing.
        let equal = Arc::new(config_with("10.0.0.7"));
        assert!(!Arc::ptr_eq(&equal.services[0], &first.services[0]));
        handle.replace_config(equal, routers.clone()).await;
        handle.set_drain(DrainPhase::Serving).await;
        next_result(&mut changes).await;
        assert!(Arc::ptr_eq(&handle.current().config, &first), "the equal config was published");

        let moved = Arc::new(config_with("10.0.0.8"));
        handle.replace_config(moved.clone(), routers).await;
        next_result(&mut changes).await;
        let current = handle.current();
        assert!(Arc::ptr_eq(&current.config, &moved));
        let originated: Vec<String> =
            current.routers[0].originate.keys().map(ToString::to_string).collect();
        assert_eq!(originated, ["10.0.0.8/32"]);
    }
}
