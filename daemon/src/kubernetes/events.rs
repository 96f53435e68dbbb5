//! Events on the Services uplink reads from the API, under MetalLB's reasons and wording, so
//! `kubectl describe service` tells what happened as it does with MetalLB:
//! - `IPAllocated` "Assigned IP [...]" from the node whose status write put the addresses in;
//! - `nodeAssigned` "announcing from node "wk1" with protocol "bgp"" from each node that starts
//!   announcing the Service (and with protocol "layer2" from the node that starts answering
//!   for it in layer 2 mode: `l2_status`);
//! - `AllocationFailed` (Warning) "Failed to allocate IP for "ns/name": ..." when no address
//!   can be had;
//! - `notAnnounced` "not announcing from node "wk1": ..." with the reason, when this node stops
//!   announcing it or never did (uplink's own: MetalLB's speaker says nothing then).
//!
//! Each node reports for itself (the event's reporting instance is the node); an event is sent
//! when the Service's state on this node changes, not at every recomputation, and each one
//! stands alone (a new state is a new event with its own message).

use std::collections::{HashMap, HashSet};
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Instant;

use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::Client;
use tokio::sync::Mutex;
use tracing::warn;

use super::status::next_change;
use super::watch::Services;
use crate::announce::allocate::ServiceKey;
use crate::announce::compute::{in_bgp, Announcements, Origin, Reason, State};
use crate::announce::l2::in_layer2;
use crate::announce::runtime::AnnouncerHandle;
use crate::config::digest::digest;
use crate::logthrottle::{held_back_note, LogThrottle, LOG_PERIOD};

/// The reporting controller of every event (`reportingController` must be a qualified name).
const CONTROLLER: &str = "uplink.io/speaker";

/// Sends this node's events.
pub(super) struct Events {
    client: Client,
    reporter: Reporter,
    services: Services,
    node: String,
    failures: Mutex<LogThrottle>,
}

/// One Service's state on this node, as an event says it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Told {
    warning: bool,
    reason: &'static str,
    note: String,
}

impl Events {
    pub fn new(client: Client, node: &str, services: Services) -> Arc<Self> {
        let reporter =
            Reporter { controller: CONTROLLER.to_string(), instance: Some(node.to_string()) };
        Arc::new(Self {
            client,
            reporter,
            services,
            node: node.to_string(),
            failures: Mutex::new(LogThrottle::new(LOG_PERIOD)),
        })
    }

    /// `IPAllocated`, after this node wrote the Service's addresses.
    pub async fn allocated(&self, key: &str, addresses: &[IpAddr]) {
        let listed: Vec<String> = addresses.iter().map(IpAddr::to_string).collect();
        let told =
            Told { warning: false, reason: "IPAllocated", note: format!("Assigned IP {listed:?}") };
        self.send(key, &told).await;
    }

    /// `nodeAssigned`, when this node starts announcing the Service by `protocol` (`layer2`:
    /// the layer 2 mode's events; the BGP ones follow the announcements, below).
    pub async fn node_assigned(&self, key: &str, protocol: &str) {
        self.send(key, &node_assigned(&self.node, protocol)).await;
    }

    async fn send(&self, key: &str, told: &Told) {
        let (namespace, name) = key.split_once('/').unwrap_or(("default", key));
        let uid = self.services.uid(key);
        let regarding = ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("Service".into()),
            namespace: Some(namespace.to_string()),
            name: Some(name.to_string()),
            uid,
            ..ObjectReference::default()
        };
        let event = Event {
            type_: if told.warning { EventType::Warning } else { EventType::Normal },
            reason: told.reason.to_string(),
            note: Some(told.note.clone()),
            action: "Announce".to_string(),
            secondary: None,
        };
        // A recorder of its own for each: kube's keeps the first note of a reason and counts
        // the next ones into its series, and a new state must say its own why. Events are
        // sent on state changes only, so there is no flood to fold.
        let recorder = Recorder::new(self.client.clone(), self.reporter.clone());
        if let Err(e) = recorder.publish(&event, &regarding).await {
            if let Some(held_back) = self.failures.lock().await.event(Instant::now()) {
                warn!(service = %key, "cannot send the Service's event {}: {e}{}", told.reason, held_back_note(held_back));
            }
        }
    }
}

/// Sends an event whenever a Service read from the API changes state on this node.
pub(super) fn spawn(events: Arc<Events>, announcer: AnnouncerHandle) {
    let mut changes = announcer.changes();
    tokio::spawn(async move {
        // Each Service's state when its last event was decided (empty at the start: every
        // Service's state is new).
        let mut before: Map<ServiceKey, Decided> = Map::default();
        loop {
            // The announcements are let go before the events are sent: held through thousands
            // of requests, a cluster's first load kept an old copy of every Service's
            // announcements and config alive beside the new ones.
            let to_send = {
                let announcements = changes.borrow_and_update().clone();
                changed(&mut before, &announcements, &events.node)
            };
            for (key, event) in to_send {
                events.send(&key, &event).await;
            }
            if !next_change(&mut changes).await {
                return;
            }
        }
    });
}

/// What a Service's last event was decided from and what it said, as digests: kept for each
/// of a cluster's thousands of Services, where a copy of the state was four times the size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Decided {
    state: u64,
    told: u64,
}

/// The API Services whose event differs from the one their state in `before` gave, with the
/// new one, by key; `before` becomes the states of `now`. Only the Services whose state
/// changed are put in words: at a cluster's size every change of one Service recomputes
/// every other's.
fn changed(
    before: &mut Map<ServiceKey, Decided>,
    now: &Announcements,
    node: &str,
) -> Vec<(String, Told)> {
    decide(before, &states(now), node)
}

/// [`changed`] from each Service's state.
fn decide(
    before: &mut Map<ServiceKey, Decided>,
    now: &Map<&ServiceKey, &State>,
    node: &str,
) -> Vec<(String, Told)> {
    let mut out = Vec::new();
    for (key, state) in now {
        let state_digest = digest(state);
        let was = match before.get_key_value(&**key) {
            Some((kept, was)) if was.state == state_digest => {
                let (was, same_key) = (*was, Arc::ptr_eq(kept, key));
                if !same_key {
                    remember(before, key, was);
                }
                continue;
            }
            other => other.map(|(_, was)| *was),
        };
        let event = told(key, state, node);
        let told_digest = digest(&event);
        if was.is_none_or(|was| was.told != told_digest) {
            out.push((key.to_string(), event));
        }
        remember(before, key, Decided { state: state_digest, told: told_digest });
    }
    before.retain(|key, _| now.contains_key(key));
    out.sort_unstable_by(|a, b| a.0.cmp(&b.0));
    out
}

/// Keeps `decided` under `key`, the Service's own (config/announce/model.rs). `insert` keeps
/// the key already there: a Service translated again comes with a new copy of its key, and
/// the old one would stay beside it, a second copy of every key after a cluster's first load.
fn remember(before: &mut Map<ServiceKey, Decided>, key: &ServiceKey, decided: Decided) {
    if before.get_key_value(&**key).is_some_and(|(kept, _)| !Arc::ptr_eq(kept, key)) {
        before.remove(&**key);
    }
    before.insert(key.clone(), decided);
}

type Map<K, V> = HashMap<K, V, foldhash::fast::RandomState>;

/// Each API Service's state on this node, by `namespace/name`: announced if any of its
/// prefixes is, else the state of its last candidate.
fn states(announcements: &Announcements) -> Map<&ServiceKey, &State> {
    // The Services not read from the API, which are few in a cluster (a set of the API's
    // thousands was a tenth of the daemon's work at every change).
    let not_from_api: HashSet<&str, foldhash::fast::RandomState> = announcements
        .config
        .services
        .iter()
        .filter(|service| !service.read_from_api())
        .map(|service| &*service.key)
        .collect();
    // Asked once per pool, not once per Service: a Service is in layer 2 mode alone when its
    // pool is.
    let config = &announcements.config;
    let layer2_only_pools: Vec<&str> = config
        .pools
        .iter()
        .filter(|pool| in_layer2(config, pool) && !in_bgp(config, pool))
        .map(|pool| pool.name.as_str())
        .collect();
    let layer2_only: HashSet<&str, foldhash::fast::RandomState> = announcements
        .allocation
        .services
        .iter()
        .filter(|_| !layer2_only_pools.is_empty())
        .filter_map(|(key, entry)| Some((key, entry.as_ref().ok()?)))
        .filter(|(_, assigned)| layer2_only_pools.contains(&&*assigned.pool))
        .map(|(key, _)| &**key)
        .collect();
    let mut out: Map<&ServiceKey, &State> =
        Map::with_capacity_and_hasher(announcements.candidates.len(), Default::default());
    for candidate in &announcements.candidates {
        let Origin::Service { service, .. } = &candidate.origin else { continue };
        // Every candidate's Service is one of the config's: not among those from elsewhere,
        // it is from the API.
        if not_from_api.contains(&**service) {
            continue;
        }
        // A pool in layer 2 mode alone: its Services' events are layer 2 mode's
        // (`l2_status`); BGP has nothing to tell of them.
        if layer2_only.contains(&**service) {
            continue;
        }
        match out.get(service) {
            // One family announced is the Service announced.
            Some(State::Announced { .. }) => {}
            _ => {
                out.insert(service, &candidate.state);
            }
        }
    }
    out
}

/// MetalLB's `nodeAssigned` of `node` and `protocol`.
fn node_assigned(node: &str, protocol: &str) -> Told {
    Told {
        warning: false,
        reason: "nodeAssigned",
        note: format!("announcing from node {node:?} with protocol {protocol:?}"),
    }
}

/// The event that says `state` of the Service `key` on `node`.
fn told(key: &str, state: &State, node: &str) -> Told {
    match state {
        State::Announced { .. } => node_assigned(node, "bgp"),
        State::Withdrawn { reason: Reason::NoAddress { error } } => Told {
            warning: true,
            reason: "AllocationFailed",
            note: format!("Failed to allocate IP for {key:?}: {error}"),
        },
        State::Withdrawn { reason } => Told {
            warning: false,
            reason: "notAnnounced",
            note: format!("not announcing from node {node:?}: {reason}"),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::announce::compute::PeerSet;

    #[test]
    fn an_event_goes_out_when_what_it_says_changes() {
        let (web, api): (ServiceKey, ServiceKey) = ("shop/web".into(), "shop/api".into());
        let announced = State::Announced { peers: PeerSet::All };
        let to_some =
            State::Announced { peers: PeerSet::Only(["10.0.0.1".parse().unwrap()].into()) };
        let drained = State::Withdrawn { reason: Reason::Drained };
        let mut before = Map::default();
        let said = |before: &mut Map<ServiceKey, Decided>, now: &[(&ServiceKey, &State)]| {
            let now: Map<&ServiceKey, &State> = now.iter().copied().collect();
            let out = decide(before, &now, "wk1");
            out.into_iter().map(|(key, told)| format!("{key} {}", told.reason)).collect::<Vec<_>>()
        };
        assert_eq!(
            said(&mut before, &[(&web, &announced), (&api, &drained)]),
            ["shop/api notAnnounced", "shop/web nodeAssigned"]
        );
        // The same states: nothing; another state with the same words: nothing either.
        assert!(said(&mut before, &[(&web, &announced), (&api, &drained)]).is_empty());
        assert!(said(&mut before, &[(&web, &to_some), (&api, &drained)]).is_empty());
        assert_eq!(said(&mut before, &[(&web, &drained)]), ["shop/web notAnnounced"]);
        // A Service that went and came back is new.
        assert_eq!(before.len(), 1);
        assert_eq!(
            said(&mut before, &[(&web, &drained), (&api, &drained)]),
            ["shop/api notAnnounced"]
        );
    }

    /// A Service translated again has a new copy of its key: the states are kept under it,
    /// changed or not, so that the old copy is freed.
    #[test]
    fn the_states_are_kept_under_the_services_current_key() {
        let drained = State::Withdrawn { reason: Reason::Drained };
        let announced = State::Announced { peers: PeerSet::All };
        let mut before = Map::default();
        let key_in = |before: &Map<ServiceKey, Decided>| {
            before.get_key_value("shop/web").map(|(key, _)| key.clone()).unwrap()
        };
        let first: ServiceKey = "shop/web".into();
        decide(&mut before, &[(&first, &drained)].into_iter().collect(), "wk1");
        let unchanged: ServiceKey = "shop/web".into();
        assert!(
            decide(&mut before, &[(&unchanged, &drained)].into_iter().collect(), "wk1").is_empty()
        );
        assert!(Arc::ptr_eq(&key_in(&before), &unchanged));
        let changed: ServiceKey = "shop/web".into();
        assert_eq!(
            decide(&mut before, &[(&changed, &announced)].into_iter().collect(), "wk1").len(),
            1
        );
        assert!(Arc::ptr_eq(&key_in(&before), &changed));
        assert_eq!(Arc::strong_count(&first), 1);
        assert_eq!(Arc::strong_count(&unchanged), 1);
    }
}
