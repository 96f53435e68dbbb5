//! Layer 2 mode at run time: the membership started from `[layer2]` (and started again when
//! the section changes), the election made again at every change of the announcements (a
//! Service, an endpoint, a reload, a drain) or of the alive members, the responder told what
//! this node answers for, and what `uplink show l2` and the metrics read.
//!
//! Without `[layer2]` this node answers for no layer 2 address: alone it could not know
//! whether another node answers too (the status says so).

use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;
use tokio::sync::{mpsc, oneshot, watch};
use tracing::{error, info, warn};

use super::envelope::Key;
use super::membership::{self, Membership};
use super::responder::{AddressCounts, AnswerSet, Responder};
use crate::announce::allocate::ServiceKey;
use crate::announce::compute::Announcements;
use crate::announce::l2::{elect, selected_by, L2Service, L2State, Members};
use crate::announce::runtime::AnnouncerHandle;
use crate::config::{Config, Layer2Config};

/// What `uplink show l2` shows.
#[derive(Debug, Clone, Default, Serialize)]
pub struct L2Status {
    /// Why this node answers for nothing, when it does not even take part.
    pub not_answering: Option<String>,
    pub membership: Option<MembershipStatus>,
    /// Every Service in layer 2 mode, with the node that answers and why this one does or not.
    pub services: Vec<L2Service>,
    /// Whether the answers are decided: the running config elected, and the membership (if
    /// any) joined. Until then what this node answers for says nothing yet, and the API's
    /// `ServiceL2Status` objects are left as they are.
    #[serde(skip)]
    pub settled: bool,
}

impl L2Status {
    /// The Services this node answers for now: none while it is held back.
    pub fn answered(&self) -> impl Iterator<Item = &L2Service> {
        let held = self.not_answering.is_some();
        self.services.iter().filter(move |s| !held && s.state == L2State::Answering)
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct MembershipStatus {
    pub address: SocketAddr,
    /// Where the members to join by come from: `[layer2] members`, or the API's Nodes.
    pub members_from: &'static str,
    /// Where the key comes from: `[layer2] secret_file`, or MetalLB's memberlist Secret.
    pub key_from: &'static str,
    #[serde(serialize_with = "crate::config::duration::serialize")]
    pub detection: Duration,
    /// The alive members with the layer 2 advertisements that select each.
    pub alive: Members,
    pub down: BTreeSet<String>,
    pub received: u64,
    pub sent: u64,
    pub refused_rate: u64,
    pub refused_malformed: u64,
    pub refused_wrong_key: u64,
    pub refused_protocol: u64,
}

/// What the Kubernetes source reads for the membership of a `[layer2]` that names no members
/// or no key: the Nodes' addresses (MetalLB's speakers join the others the same way, by the
/// speaker pods the API lists) and the key of MetalLB's `memberlist` Secret.
#[derive(Clone, PartialEq, Eq)]
pub struct FromApi {
    /// Each Node's name and its `InternalIP` addresses.
    pub nodes: BTreeMap<String, Vec<IpAddr>>,
    /// The Nodes have been listed: until then a node would think itself alone and take every
    /// address.
    pub nodes_listed: bool,
    /// The Secret's key, or why there is none.
    pub key: Result<Vec<u8>, String>,
}

impl Default for FromApi {
    fn default() -> Self {
        FromApi {
            nodes: BTreeMap::new(),
            nodes_listed: false,
            key: Err("the memberlist Secret is not read yet".into()),
        }
    }
}

impl std::fmt::Debug for FromApi {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let key = self.key.as_ref().map(|_| "(hidden)");
        f.debug_struct("FromApi")
            .field("nodes", &self.nodes)
            .field("nodes_listed", &self.nodes_listed)
            .field("key", &key)
            .finish()
    }
}

impl FromApi {
    /// The other Nodes' membership addresses: each one's first `InternalIP` of the family of
    /// this node's, on its port.
    fn members(&self, node: &str, own: SocketAddr) -> Vec<SocketAddr> {
        let others = self.nodes.iter().filter(|(name, _)| *name != node);
        others
            .filter_map(|(_, addresses)| {
                let same_family = addresses.iter().find(|a| a.is_ipv4() == own.is_ipv4());
                same_family.map(|ip| SocketAddr::new(*ip, own.port()))
            })
            .collect()
    }
}

/// `settings` with what it leaves to the API filled in from `from_api`: the members when it
/// names none, the key when it has no `secret_file`. An error says what is missing.
fn resolve(
    mut settings: Layer2Config,
    node: &str,
    from_api: Option<&FromApi>,
) -> Result<Layer2Config, String> {
    if settings.secret.is_empty() {
        match from_api.map(|api| &api.key) {
            Some(Ok(key)) => settings.secret = key.clone(),
            Some(Err(why)) => return Err(format!("no membership key: {why}")),
            None => return Err("no membership key: [layer2] has no secret_file".into()),
        }
    }
    if settings.members.is_empty() {
        if let Some(api) = from_api {
            if !api.nodes_listed {
                return Err("waiting for the API's Nodes, the members to join by".into());
            }
            settings.members = api.members(node, settings.address);
        }
    }
    Ok(settings)
}

/// The counts `show l2` and the metrics read, besides the status.
#[derive(Debug, Clone, Default, Serialize)]
pub struct L2Counts {
    pub addresses: BTreeMap<IpAddr, AddressCounts>,
    pub dropped: BTreeMap<&'static str, u64>,
}

/// A handle on the running layer 2 mode.
#[derive(Clone)]
pub struct Layer2Handle {
    status: watch::Receiver<Arc<L2Status>>,
    stop: mpsc::Sender<oneshot::Sender<()>>,
    responder: Arc<Responder>,
    membership: watch::Receiver<Option<Arc<membership::Counters>>>,
}

impl Layer2Handle {
    /// The status, its membership counters read now.
    pub fn status(&self) -> L2Status {
        let mut status = L2Status::clone(&self.status.borrow());
        if let Some(shown) = &mut status.membership {
            self.read_counters(shown);
        }
        status
    }

    /// The status as last published, shared rather than copied (a scrape reads thousands
    /// of Services' states); its membership counters are those of then.
    pub fn current(&self) -> Arc<L2Status> {
        self.status.borrow().clone()
    }

    /// Fills in `shown`'s membership counters as they are now.
    pub fn read_counters(&self, shown: &mut MembershipStatus) {
        if let Some(counters) = &*self.membership.borrow() {
            let read = |counter: &std::sync::atomic::AtomicU64| counter.load(Ordering::Relaxed);
            shown.received = read(&counters.received);
            shown.sent = read(&counters.sent);
            shown.refused_rate = read(&counters.refused_rate);
            shown.refused_malformed = read(&counters.refused_malformed);
            shown.refused_wrong_key = read(&counters.refused_wrong_key);
            shown.refused_protocol = read(&counters.refused_protocol);
        }
    }

    /// The daemon stops: the membership says goodbye, so the others take this node's
    /// addresses at once rather than after the detection time; answers end.
    pub async fn leave(&self) {
        let (done, left) = oneshot::channel();
        if self.stop.send(done).await.is_ok() {
            let _ = left.await;
        }
    }

    pub fn counts(&self) -> L2Counts {
        let counters = self.responder.counters();
        L2Counts { addresses: counters.addresses(), dropped: counters.dropped() }
    }
}

/// The channel layer 2 mode publishes its status on: made before it starts, so that the
/// Kubernetes source, started earlier, can follow it.
pub fn status_channel() -> (watch::Sender<Arc<L2Status>>, watch::Receiver<Arc<L2Status>>) {
    watch::channel(Arc::new(L2Status::default()))
}

/// Starts layer 2 mode: it follows the running config (for `[layer2]`) and the
/// announcements (for the Services, the node's selection and the drain), and publishes its
/// status on `status_tx` (from [`status_channel`]).
pub fn spawn(
    running: watch::Receiver<Arc<Config>>,
    announcer: &AnnouncerHandle,
    status_tx: watch::Sender<Arc<L2Status>>,
    from_api: Option<watch::Receiver<Arc<FromApi>>>,
) -> Layer2Handle {
    let status = status_tx.subscribe();
    let (counters_tx, membership_counters) = watch::channel(None);
    let responder = Arc::new(Responder::start());
    let (stop, stops) = mpsc::channel(1);
    let task = Task {
        stops,
        running,
        announcements: announcer.changes(),
        responder: responder.clone(),
        status: status_tx,
        counters: counters_tx,
        from_api,
        membership: None,
        membership_error: None,
        failed: None,
        waiting_for_api: false,
    };
    tokio::spawn(task.run());
    Layer2Handle { status, stop, responder, membership: membership_counters }
}

/// The running membership and what it was started with.
struct Running {
    /// Resolved: the members and key the API gave filled in.
    settings: Layer2Config,
    /// The members or the key came from the API.
    members_from_api: bool,
    key_from_api: bool,
    node: String,
    membership: Membership,
    view: watch::Receiver<Arc<membership::View>>,
}

struct Task {
    stops: mpsc::Receiver<oneshot::Sender<()>>,
    running: watch::Receiver<Arc<Config>>,
    announcements: watch::Receiver<Arc<Announcements>>,
    responder: Arc<Responder>,
    status: watch::Sender<Arc<L2Status>>,
    counters: watch::Sender<Option<Arc<membership::Counters>>>,
    /// The Nodes and the memberlist Secret, with `[kubernetes]`.
    from_api: Option<watch::Receiver<Arc<FromApi>>>,
    membership: Option<Running>,
    /// Why the membership `[layer2]` asks for is not running (its address cannot be bound),
    /// and the settings that failed: tried again at the next reload, not at every change.
    membership_error: Option<String>,
    failed: Option<(Layer2Config, String)>,
    /// The membership waits for what `[layer2]` leaves to the API (the Nodes, the key): this
    /// node's answers are not decided yet.
    waiting_for_api: bool,
}

impl Task {
    async fn run(mut self) {
        let mut stopped = None;
        let mut reloaded = true;
        loop {
            let settings = self.running.borrow_and_update().layer2.clone();
            let announcements = self.announcements.borrow_and_update().clone();
            let from_api = self.from_api.as_mut().map(|api| api.borrow_and_update().clone());
            if reloaded {
                self.failed = None;
            }
            self.follow(settings, from_api.as_deref(), &announcements).await;
            self.elect(&announcements);
            let (membership, api) = (&mut self.membership, &mut self.from_api);
            let view_changed = async {
                match membership {
                    Some(running) => running.view.changed().await.is_ok(),
                    None => std::future::pending().await,
                }
            };
            let api_changed = async {
                match api {
                    Some(api) => api.changed().await.is_ok(),
                    None => std::future::pending().await,
                }
            };
            reloaded = false;
            tokio::select! {
                changed = self.running.changed() => {
                    if changed.is_err() { break }
                    reloaded = true;
                }
                changed = self.announcements.changed() => if changed.is_err() { break },
                _ = view_changed => {}
                // The API's Nodes or Secret changed; a source that ended leaves them as they were.
                true = api_changed => {}
                done = self.stops.recv() => {
                    stopped = done;
                    break;
                }
            }
        }
        // The daemon stops: no more answers, and the others take this node's addresses at
        // once.
        self.responder.set(AnswerSet::default());
        if let Some(running) = self.membership.take() {
            running.membership.leave().await;
        }
        if let Some(done) = stopped {
            let _ = done.send(());
        }
    }

    /// Starts, moves or stops the membership as `[layer2]`, the node's name and the API's
    /// Nodes and Secret (for what `[layer2]` leaves to them) say. New members alone are joined
    /// without starting again.
    async fn follow(
        &mut self,
        settings: Option<Layer2Config>,
        from_api: Option<&FromApi>,
        announcements: &Announcements,
    ) {
        let node = announcements.config.node.name.clone();
        self.waiting_for_api = false;
        let (members_from_api, key_from_api) = settings.as_ref().map_or((false, false), |s| {
            (s.members.is_empty() && from_api.is_some(), s.secret.is_empty())
        });
        let wanted = match settings.zip(node) {
            Some((settings, node)) => match resolve(settings, &node, from_api) {
                Ok(settings) => Some((settings, node)),
                // The API's Secret went away (or was never there): a running membership keeps
                // its key, so the nodes keep agreeing; none starts without one.
                Err(why) => {
                    if self.membership.is_none() {
                        self.waiting_for_api = true;
                        if self.membership_error.as_ref() != Some(&why) {
                            warn!("layer 2: the membership waits: {why}");
                        }
                        self.membership_error = Some(why);
                    }
                    return;
                }
            },
            None => None,
        };
        if let (Some(running), Some((settings, node))) = (&mut self.membership, &wanted) {
            let mut old = running.settings.clone();
            old.members.clone_from(&settings.members);
            if old == *settings
                && running.node == *node
                && running.settings.members != settings.members
            {
                info!(members = ?settings.members, "layer 2: the members to join by changed");
                running.membership.set_seeds(settings.members.clone());
                running.settings.members.clone_from(&settings.members);
            }
        }
        let same = match (&self.membership, &wanted) {
            (Some(running), Some((settings, node))) => {
                running.settings == *settings && running.node == *node
            }
            (None, None) => true,
            // Failed to start with these: not tried again before the next reload.
            (None, Some(wanted)) => self.failed.as_ref() == Some(wanted),
            _ => false,
        };
        if wanted.is_none() {
            self.membership_error = None;
        }
        if same {
            return;
        }
        self.membership_error = None;
        if let Some(running) = self.membership.take() {
            info!("layer 2: the membership's settings changed; leaving and joining again");
            running.membership.leave().await;
            self.counters.send_replace(None);
        }
        let Some((settings, node)) = wanted else { return };
        let start = membership::Settings {
            node: node.clone(),
            address: settings.address,
            seeds: settings.members.clone(),
            detection: settings.detection,
            selected_by: own_selection(announcements),
        };
        match Membership::start(start, Key::new(&settings.secret)).await {
            Ok(membership) => {
                info!(address = %settings.address, "layer 2: membership listening on {}", settings.address);
                self.counters.send_replace(Some(membership.counters().clone()));
                let view = membership.view();
                self.membership = Some(Running {
                    settings,
                    members_from_api,
                    key_from_api,
                    node,
                    membership,
                    view,
                });
            }
            Err(e) => {
                error!(
                    address = %settings.address,
                    "layer 2: cannot listen for the membership on {} ({e}); answering for no address",
                    settings.address
                );
                self.membership_error = Some(format!(
                    "the membership cannot listen on {} ({e}); fix [layer2] address and reload",
                    settings.address
                ));
                self.failed = Some((settings, node));
            }
        }
    }

    /// Elects the answering node of every layer 2 Service and tells the responder what this
    /// node answers for.
    fn elect(&mut self, announcements: &Announcements) {
        let config = &announcements.config;
        let mut status = L2Status::default();
        let members = match &mut self.membership {
            Some(running) => {
                let selection = own_selection(announcements);
                running.membership.set_selected_by(selection.clone());
                let mut members = running.view.borrow_and_update().alive.clone();
                // This node as it is now, before the membership has renewed its identity.
                members.insert(running.node.clone(), selection);
                status.membership = Some(MembershipStatus {
                    address: running.settings.address,
                    members_from: if running.members_from_api {
                        "the API's Nodes"
                    } else {
                        "[layer2] members"
                    },
                    key_from: if running.key_from_api {
                        "MetalLB's memberlist Secret"
                    } else {
                        "[layer2] secret_file"
                    },
                    detection: running.settings.detection,
                    alive: members.clone(),
                    down: running.view.borrow().down.clone(),
                    received: 0,
                    sent: 0,
                    refused_rate: 0,
                    refused_malformed: 0,
                    refused_wrong_key: 0,
                    refused_protocol: 0,
                });
                Some(members)
            }
            None => None,
        };
        if !config.l2_advertisements.is_empty() {
            status.services =
                elect(config, &announcements.allocation, &members.clone().unwrap_or_default());
            if members.is_none() {
                let why = match &self.membership_error {
                    Some(error) => error.clone(),
                    None if config.node.name.is_none() => {
                        "the node has no name ([node] name)".to_string()
                    }
                    None => "no [layer2] membership: alone, this node could not know whether \
                             another answers"
                        .to_string(),
                };
                if self.status.borrow().not_answering.as_ref() != Some(&why) {
                    warn!("layer 2: answering for no address: {why}");
                }
                status.not_answering = Some(why);
            }
        }
        let held = match (&self.membership, &members) {
            (Some(running), Some(members)) => held_back(running, members.len()),
            _ => None,
        };
        status.settled = !self.waiting_for_api
            && self.membership.as_ref().is_none_or(|r| r.view.borrow().joined);
        if let Some(why) = held.as_ref().filter(|_| !config.l2_advertisements.is_empty()) {
            if self.status.borrow().not_answering.as_ref() != Some(why) {
                warn!("layer 2: answering for no address: {why}");
            }
            status.not_answering = Some(why.clone());
        }
        let mut answers = AnswerSet::default();
        if members.is_some() && held.is_none() {
            for service in status.services.iter().filter(|s| s.state == L2State::Answering) {
                for address in &service.addresses {
                    answers.0.insert(*address, service.interfaces.clone());
                }
            }
        }
        self.responder.set(answers);
        log_answer_changes(&self.status.borrow(), &status);
        self.status.send_replace(Arc::new(status));
    }
}

/// The most taken or given up Services logged one by one; beyond, a count (a start with
/// thousands of Services would flood the journal).
const ANSWER_CHANGES_LOGGED: usize = 8;

/// Says which Services this node took or gave up, and for the latter who answers now: what an
/// operator asks first when a client reached the wrong node.
fn log_answer_changes(before: &L2Status, now: &L2Status) {
    fn answered(status: &L2Status) -> BTreeMap<&ServiceKey, &[IpAddr]> {
        status.answered().map(|s| (&s.service, s.addresses.as_slice())).collect()
    }
    let (before, after) = (answered(before), answered(now));
    let taken: Vec<_> = after.iter().filter(|(k, _)| !before.contains_key(*k)).collect();
    let given_up: Vec<_> = before.iter().filter(|(k, _)| !after.contains_key(*k)).collect();
    if taken.len() + given_up.len() > ANSWER_CHANGES_LOGGED {
        info!(
            "layer 2: now answering for {} Service(s): {} taken, {} given up",
            after.len(),
            taken.len(),
            given_up.len()
        );
        return;
    }
    for (service, addresses) in taken {
        info!("layer 2: answering for {service} ({addresses:?})");
    }
    for (service, addresses) in given_up {
        let why = match &now.not_answering {
            Some(why) => why.clone(),
            None => now
                .services
                .iter()
                .find(|s| &s.service == *service)
                .map_or_else(|| "no longer in layer 2 mode".to_string(), |s| s.state.to_string()),
        };
        info!("layer 2: no longer answering for {service} ({addresses:?}): {why}");
    }
}

/// Why this node, a member, answers for nothing for now, if it does not:
///
/// - it is still joining (alone in its own view at the start, it would take every address
///   from the nodes that answer for them);
/// - it sees fewer than half of the members it is configured with (itself and
///   `[layer2] members`): cut off from the others, which elect among themselves, it must not
///   answer too, and when its links come back it must not take their addresses before it has
///   rejoined them. Half is enough, so that of two nodes the survivor answers (two halves
///   that cannot see each other both answer: no membership tells a dead peer from a cut one).
fn held_back(running: &Running, alive: usize) -> Option<String> {
    if !running.view.borrow().joined {
        return Some(
            "joining the membership: waiting for the members to answer before taking any address"
                .to_string(),
        );
    }
    let known = running
        .settings
        .members
        .iter()
        .filter(|m| **m != running.settings.address)
        .collect::<BTreeSet<_>>()
        .len()
        + 1;
    (alive * 2 < known).then(|| {
        format!(
            "sees {alive} of the {known} members alive, fewer than half: the others elect among \
             themselves (split brain avoided)"
        )
    })
}

/// The layer 2 advertisements that select this node; none while it drains (its addresses
/// move to the others at once).
fn own_selection(announcements: &Announcements) -> BTreeSet<String> {
    if announcements.draining {
        BTreeSet::new()
    } else {
        selected_by(&announcements.config)
    }
}
