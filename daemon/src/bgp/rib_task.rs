//! The task that owns one instance's [`Rib`] (DESIGN.md: one RIB task per routing instance, no
//! shared mutable routing state). Sessions talk to it through a bounded channel; it never
//! waits on a session — it only wakes them (`Notify`) when their Adj-RIB-Out has output, and
//! they pull it when their socket has room.

use super::announced::{effective_export, gone_and_new, AnnouncedSet};
use super::max_prefix::{PrefixGuard, PrefixLimit, Verdict};
use super::policy::{ExportPolicy, ImportPolicy};
use super::rib::{OutboundBatch, PeerId, PeerInfo, Rib, RibConfig, Source};
use super::view::{Lookup, PathSource, PathView, PeerCounts, RibSummary, RouteView};
use super::wire::attributes::{Family, PathAttributes};
use super::wire::update::DecodedUpdate;
use crate::fib::{self, FibSender, RouteBatchBuilder};
use ipnet::IpNet;
use std::collections::{BTreeSet, HashMap};
use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;
use std::sync::{Mutex, PoisonError};
use tokio::sync::{mpsc, oneshot, watch, Notify};
use tracing::{debug, info, warn};

/// Routes built per RIB command for `show bgp routes` (about a millisecond of the task's time).
const ROUTES_PER_TURN: usize = 1024;

/// Depth of the command channel: enough for a burst of UPDATE batches from every session.
const CHANNEL_DEPTH: usize = 256;

pub struct RibSetup {
    pub vrf: String,
    pub local_asn: u32,
    pub router_id: Ipv4Addr,
    pub maximum_paths: u16,
    pub multipath_relax: bool,
    /// What the router originates (`crate::announce`, router `prefixes` included): the
    /// current set is applied before any session comes up, so the first UPDATE a peer gets
    /// already carries it, and every later set replaces it without a session reset.
    pub announced: watch::Receiver<Arc<AnnouncedSet>>,
    pub always_block: Vec<IpNet>,
    /// Where Loc-RIB changes go to be installed in the kernel (this VRF's table, and the
    /// tables of the VRFs that import it); `None` when neither installs anything.
    pub fib: Option<FibSender>,
}

enum RibCommand {
    PeerUp {
        // Boxed: the largest variant by far, and a session comes up rarely.
        info: Box<PeerInfo>,
        link: PeerSide,
        /// The id of the same peer while it was restarting (RFC 4724): resumed in place.
        resume: Option<PeerId>,
        reply: oneshot::Sender<PeerId>,
    },
    PeerDown(PeerId),
    /// RFC 4724 §4.2: keep the peer's routes of these families as stale.
    PeerRestarting(PeerId, Vec<Family>),
    /// Remove the peer's routes of this family still stale.
    PurgeStale(PeerId, Family),
    Updates(PeerId, Vec<DecodedUpdate>),
    TakePending(PeerId, oneshot::Sender<Vec<OutboundBatch>>),
    RouteRefresh(PeerId, Family),
    /// A reload changed the peer's policies: applied live, answered once done.
    SetPeerPolicy(PeerId, Box<PeerPolicy>, oneshot::Sender<()>),
    /// A reload changed the instance's settings (`always_block`, multipath): answered once
    /// applied, so a ROUTE-REFRESH sent after it meets the new settings.
    SetConfig(Box<RibConfig>, oneshot::Sender<()>),
    Summary(oneshot::Sender<RibSummary>),
    /// `show bgp routes`, in two steps so that a large table never holds up UPDATEs: the
    /// family's prefixes (unsorted), then their routes a slice at a time.
    Prefixes(Family, oneshot::Sender<Vec<IpNet>>),
    RoutesOf(Vec<IpNet>, oneshot::Sender<Vec<RouteView>>),
    Lookup(Lookup, oneshot::Sender<Option<RouteView>>),
    /// Every route with something to install, and its next hops (`show fib`).
    FibRoutes(oneshot::Sender<Vec<(IpNet, Vec<fib::NextHop>)>>),
    /// What one peer was sent of a family (`advertised-routes`).
    Advertised(IpAddr, Family, oneshot::Sender<Option<Vec<IpNet>>>),
}

/// The settings of a session that a reload changes without resetting it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerPolicy {
    pub import: ImportPolicy,
    /// As configured; the RIB widens it with the announced set.
    pub export: ExportPolicy,
    pub max_prefixes: Option<PrefixLimit>,
}

/// What the RIB task tells a session, without a channel that could be full: the session waits
/// on [`PeerSignal::woken`] and then looks at what is set.
#[derive(Default)]
pub struct PeerSignal {
    wake: Notify,
    /// The RIB asks the session to end with this Cease (RFC 4486 subcode, reason). Kept until
    /// the session takes it, so the request is never lost.
    cease: Mutex<Option<(u8, String)>>,
}

impl PeerSignal {
    /// Resolves when the RIB has queued output for the peer or asked for a Cease.
    pub async fn woken(&self) {
        self.wake.notified().await;
    }

    /// The Cease the RIB asked for, once.
    pub fn take_cease(&self) -> Option<(u8, String)> {
        self.cease.lock().unwrap_or_else(PoisonError::into_inner).take()
    }

    fn output_ready(&self) {
        self.wake.notify_one();
    }

    fn ask_cease(&self, subcode: u8, reason: String) {
        *self.cease.lock().unwrap_or_else(PoisonError::into_inner) = Some((subcode, reason));
        self.wake.notify_one();
    }
}

/// What the RIB task keeps of each session.
struct PeerSide {
    signal: Arc<PeerSignal>,
    /// `max_prefixes`: counted before an UPDATE reaches the Loc-RIB.
    max_prefixes: Option<PrefixGuard>,
    last_update_applied: Option<std::time::SystemTime>,
}

impl PeerSide {
    /// After the peer's count changed (`cut_off`: a new prefix found no room): the warning
    /// threshold, warning-only, or the Cease (RFC 4486 §4, Maximum Number of Prefixes
    /// Reached), asked for once through the signal's slot, which keeps it until the session
    /// takes it.
    fn observe_count(&mut self, count: u64, cut_off: bool) {
        let Some(guard) = &mut self.max_prefixes else { return };
        for verdict in guard.observe(count, cut_off) {
            match verdict {
                Verdict::ThresholdReached { count, threshold, limit } => info!(
                    "the peer has {count} prefixes accepted, at the warning threshold {threshold} \
                     of max_prefixes {limit}"
                ),
                Verdict::ExceededWarningOnly { count, limit } => warn!(
                    "the peer has {count} prefixes accepted, more than max_prefixes {limit}; \
                     keeping the session (max_prefixes_warning_only)"
                ),
                Verdict::Cease { limit } => self.signal.ask_cease(
                    super::wire::notification::cease_subcode::MAX_PREFIXES_REACHED,
                    format!(
                        "the peer sent more than max_prefixes {limit} prefixes (the first past \
                         the limit was refused before the RIB)"
                    ),
                ),
            }
        }
    }

    /// A reload's new limit: a lower one than the count asks for the Cease at once (as FRR
    /// does), unless warning-only.
    fn set_limit(&mut self, limit: Option<PrefixLimit>, count: u64) {
        if self.max_prefixes.as_ref().map(PrefixGuard::limit) == limit.as_ref() {
            return;
        }
        self.max_prefixes = limit.map(PrefixGuard::new);
        let over = limit.is_some_and(|l| !l.warning_only && count > u64::from(l.limit));
        self.observe_count(count, over);
    }
}

/// A cheap, cloneable handle to the RIB task.
#[derive(Clone)]
pub struct RibHandle {
    tx: mpsc::Sender<RibCommand>,
}

/// An established session's link to the RIB.
pub struct PeerLink {
    pub id: PeerId,
    tx: mpsc::Sender<RibCommand>,
}

const GONE: &str = "the routing instance has stopped";

impl RibHandle {
    /// A session came up: the RIB sends it its table (waking it through `signal`).
    pub async fn peer_up(
        &self,
        info: PeerInfo,
        signal: Arc<PeerSignal>,
        max_prefixes: Option<PrefixLimit>,
        resume: Option<PeerId>,
    ) -> Option<PeerLink> {
        let (reply, rx) = oneshot::channel();
        let max_prefixes = max_prefixes.map(PrefixGuard::new);
        let link = PeerSide { signal, max_prefixes, last_update_applied: None };
        self.tx
            .send(RibCommand::PeerUp { info: Box::new(info), link, resume, reply })
            .await
            .ok()?;
        let id = rx.await.ok()?;
        Some(PeerLink { id, tx: self.tx.clone() })
    }

    async fn ask<T>(
        &self,
        make: impl FnOnce(oneshot::Sender<T>) -> RibCommand,
    ) -> Result<T, String> {
        let (reply, rx) = oneshot::channel();
        self.tx.send(make(reply)).await.map_err(|_| GONE.to_string())?;
        rx.await.map_err(|_| GONE.to_string())
    }

    /// A reload: new instance settings, applied before this returns.
    pub async fn set_config(&self, config: RibConfig) -> Result<(), String> {
        self.ask(|r| RibCommand::SetConfig(Box::new(config), r)).await
    }

    pub async fn summary(&self) -> Result<RibSummary, String> {
        self.ask(RibCommand::Summary).await
    }

    /// Every route of a family, sorted by prefix. Built [`ROUTES_PER_TURN`] routes per RIB
    /// command, so UPDATEs queued meanwhile are processed between the slices (a route that
    /// changes during the walk is shown as it is when its slice is built).
    pub async fn routes(&self, family: Family) -> Result<Vec<RouteView>, String> {
        let mut prefixes = self.ask(|r| RibCommand::Prefixes(family, r)).await?;
        prefixes.sort_unstable();
        let mut views = Vec::with_capacity(prefixes.len());
        for slice in prefixes.chunks(ROUTES_PER_TURN) {
            let slice = slice.to_vec();
            views.extend(self.ask(|r| RibCommand::RoutesOf(slice, r)).await?);
        }
        Ok(views)
    }

    pub async fn lookup(&self, lookup: Lookup) -> Result<Option<RouteView>, String> {
        self.ask(|r| RibCommand::Lookup(lookup, r)).await
    }

    /// The prefixes the peer at `address` was sent of `family`; `None` when it has no session.
    pub async fn advertised(
        &self,
        address: IpAddr,
        family: Family,
    ) -> Result<Option<Vec<IpNet>>, String> {
        self.ask(|r| RibCommand::Advertised(address, family, r)).await
    }

    /// The routes this RIB wants in the kernel, with their next hops (the FIB writer keeps no
    /// copy; `show fib` joins these with its groups).
    pub async fn fib_routes(&self) -> Result<Vec<(IpNet, Vec<fib::NextHop>)>, String> {
        self.ask(RibCommand::FibRoutes).await
    }
}

impl PeerLink {
    /// Hands decoded UPDATEs to the RIB. Waits when the RIB is busy: that backpressure stops
    /// the session reading its socket, which is what TCP flow control is for.
    pub async fn send_updates(&self, updates: Vec<DecodedUpdate>) {
        let _ = self.tx.send(RibCommand::Updates(self.id, updates)).await;
    }

    /// The peer sent ROUTE-REFRESH for `family`: queue its Adj-RIB-Out again.
    pub async fn route_refresh(&self, family: Family) {
        let _ = self.tx.send(RibCommand::RouteRefresh(self.id, family)).await;
    }

    /// A reload changed the session's policies: withdraw what the import policy refuses now,
    /// re-export under the new export policy, check the new prefix limit. Returns once done.
    pub async fn set_policy(&self, policy: PeerPolicy) {
        let (reply, rx) = oneshot::channel();
        if self.tx.send(RibCommand::SetPeerPolicy(self.id, Box::new(policy), reply)).await.is_ok() {
            let _ = rx.await;
        }
    }

    pub async fn peer_down(&self) {
        let _ = self.tx.send(RibCommand::PeerDown(self.id)).await;
    }

    /// The session ended but the peer is restarting: its routes of `families` stay, stale.
    pub async fn peer_restarting(&self, families: Vec<Family>) {
        let _ = self.tx.send(RibCommand::PeerRestarting(self.id, families)).await;
    }

    /// Removes the peer's `family` routes that are still stale.
    pub async fn purge_stale(&self, family: Family) {
        let _ = self.tx.send(RibCommand::PurgeStale(self.id, family)).await;
    }

    /// Everything pending in this peer's Adj-RIB-Out, per family.
    pub async fn take_pending(&self) -> Vec<OutboundBatch> {
        let (reply, rx) = oneshot::channel();
        if self.tx.send(RibCommand::TakePending(self.id, reply)).await.is_err() {
            return Vec::new();
        }
        rx.await.unwrap_or_default()
    }
}

/// Resolves when the FIB writer asks for a replay; never without a writer.
async fn replay_wanted(fib: Option<&FibSender>) {
    match fib {
        Some(fib) => fib.replay_wanted().await,
        None => std::future::pending().await,
    }
}

pub fn spawn(setup: RibSetup) -> RibHandle {
    let (tx, rx) = mpsc::channel(CHANNEL_DEPTH);
    let config = RibConfig {
        router_id: setup.router_id,
        maximum_paths: setup.maximum_paths,
        multipath_relax: setup.multipath_relax,
        always_block: setup.always_block,
    };
    let mut rib = Rib::new(config);
    // When no FIB writer listens, skip computing next-hop sets at all.
    rib.set_fib_tracking(setup.fib.is_some());
    // `vrf` becomes VRF= in the journal (`ops::logging`), "default" as FRR names it.
    let span = tracing::info_span!("rib", vrf = crate::config::vrf_display_name(&setup.vrf));
    let mut task = RibTask {
        rib,
        peers: HashMap::new(),
        announced: Arc::default(),
        base_export: HashMap::new(),
        fib: setup.fib,
    };
    let mut announced = setup.announced;
    let current = announced.borrow_and_update().clone();
    span.in_scope(|| task.set_announced(current));
    tokio::spawn(tracing::Instrument::instrument(task.run(rx, announced), span));
    RibHandle { tx }
}

struct RibTask {
    rib: Rib,
    peers: HashMap<PeerId, PeerSide>,
    /// The announcer's set, shared with it (thousands of Services: not copied).
    announced: Arc<AnnouncedSet>,
    /// Each peer's configured export policy, before announcements widen it.
    base_export: HashMap<PeerId, ExportPolicy>,
    fib: Option<FibSender>,
}

impl RibTask {
    async fn run(
        mut self,
        mut rx: mpsc::Receiver<RibCommand>,
        mut announced: watch::Receiver<Arc<AnnouncedSet>>,
    ) {
        // Until the announcer goes away (the daemon stops), a new set may come at any time.
        let mut following = true;
        let fib = self.fib.clone();
        loop {
            tokio::select! {
                cmd = rx.recv() => match cmd {
                    Some(RibCommand::PeerDown(id)) => {
                        // The FIB hears which next hops are lost before the per-prefix
                        // withdrawals are computed: its groups are right at once.
                        self.rib.declare_lost_hops(id);
                        self.send_fib().await;
                        self.handle(RibCommand::PeerDown(id));
                    }
                    Some(cmd) => self.handle(cmd),
                    None => break,
                },
                changed = announced.changed(), if following => match changed {
                    Ok(()) => {
                        let set = announced.borrow_and_update().clone();
                        self.set_announced(set);
                    }
                    Err(_) => following = false,
                },
                () = replay_wanted(fib.as_ref()) => self.replay().await,
            }
            self.send_fib().await;
        }
        // The RIB goes away (its router stopped): its routes leave the kernel with it.
        self.rib.withdraw_fib();
        self.send_fib().await;
    }

    /// Sends what changed for the FIB writer after a command. With `install = false` there
    /// is no writer, and the RIB records nothing (`Rib::set_fib_tracking`).
    async fn send_fib(&mut self) {
        let batches = self.rib.take_fib();
        if let Some(fib) = &self.fib {
            for batch in batches {
                fib.send(batch).await;
            }
        }
    }

    /// Answers the FIB writer's replay requests from the Loc-RIB as it is now.
    async fn replay(&mut self) {
        let Some(fib) = self.fib.clone() else { return };
        for request in fib.take_replays() {
            let mut out = RouteBatchBuilder::new();
            match &request.scope {
                fib::ReplayScope::Prefixes(prefixes) => {
                    for prefix in prefixes {
                        out.change(*prefix, &[], &self.rib.fib_route(prefix));
                    }
                }
                fib::ReplayScope::Sets(sets) => {
                    let sets: std::collections::HashSet<&[fib::NextHop]> =
                        sets.iter().map(|s| &**s).collect();
                    self.rib.fib_routes(|prefix, hops| {
                        if sets.contains(hops) {
                            out.change(prefix, &[], hops);
                        }
                    });
                }
                fib::ReplayScope::All => self.rib.fib_routes(|prefix, hops| {
                    out.change(prefix, &[], hops);
                }),
            }
            let batches = out.take();
            let last = batches.len().saturating_sub(1);
            if batches.is_empty() {
                fib.send_replay(request.token, fib::RouteBatch::default(), true).await;
            }
            for (i, batch) in batches.into_iter().enumerate() {
                fib.send_replay(request.token, batch, i == last).await;
            }
        }
    }

    fn handle(&mut self, cmd: RibCommand) {
        match cmd {
            RibCommand::PeerUp { mut info, link, resume, reply } => {
                let base = info.export.clone();
                info.export = effective_export(&base, &self.announced, info.address);
                let id = match resume.filter(|id| self.rib.is_restarting(*id)) {
                    Some(id) => match self.rib.peer_resumed(id, (*info).clone()) {
                        Ok(()) => id,
                        Err(_) => self.rib.peer_up(*info),
                    },
                    None => self.rib.peer_up(*info),
                };
                self.base_export.insert(id, base);
                // The initial advertisement is queued by peer_up: wake the session for it.
                link.signal.output_ready();
                self.peers.insert(id, link);
                let _ = reply.send(id);
            }
            RibCommand::PeerDown(id) => {
                self.peers.remove(&id);
                self.base_export.remove(&id);
                let changes = self.rib.peer_down(id);
                self.wake(&changes.outbound);
            }
            RibCommand::PeerRestarting(id, families) => {
                // The session is gone: nothing to wake until it is back.
                self.peers.remove(&id);
                self.base_export.remove(&id);
                let changes = self.rib.peer_restarting(id, &families);
                self.wake(&changes.outbound);
            }
            RibCommand::PurgeStale(id, family) => {
                let changes = self.rib.purge_stale(id, family);
                self.wake(&changes.outbound);
            }
            RibCommand::Updates(id, updates) => self.apply_updates(id, updates),
            RibCommand::TakePending(id, reply) => {
                let batches = [Family::IPV4_UNICAST, Family::IPV6_UNICAST]
                    .into_iter()
                    .filter_map(|f| self.rib.take_pending(id, f))
                    .collect();
                let _ = reply.send(batches);
            }
            RibCommand::RouteRefresh(id, family) => {
                if self.rib.route_refresh(id, family) {
                    if let Some(side) = self.peers.get(&id) {
                        side.signal.output_ready();
                    }
                }
            }
            RibCommand::SetPeerPolicy(id, policy, reply) => {
                self.set_peer_policy(id, *policy);
                let _ = reply.send(());
            }
            RibCommand::SetConfig(config, reply) => {
                let changes = self.rib.set_config(*config);
                self.wake(&changes.outbound);
                let _ = reply.send(());
            }
            RibCommand::Summary(reply) => {
                let _ = reply.send(self.summary());
            }
            RibCommand::Prefixes(family, reply) => {
                let _ = reply.send(self.rib.prefixes(family));
            }
            RibCommand::RoutesOf(prefixes, reply) => {
                let views = prefixes
                    .into_iter()
                    .filter_map(|p| self.rib.route(&p).map(|paths| self.view(p, paths)))
                    .collect();
                let _ = reply.send(views);
            }
            RibCommand::Lookup(lookup, reply) => {
                let _ = reply.send(self.lookup(lookup));
            }
            RibCommand::FibRoutes(reply) => {
                let mut routes = Vec::new();
                self.rib.fib_routes(|prefix, hops| routes.push((prefix, hops.to_vec())));
                let _ = reply.send(routes);
            }
            RibCommand::Advertised(address, family, reply) => {
                let _ = reply.send(self.rib.advertised_to(address, family));
            }
        }
    }

    fn apply_updates(&mut self, id: PeerId, updates: Vec<DecodedUpdate>) {
        // After its Cease the peer's UPDATEs still queued are ignored: the session is ending
        // and its routes go with it.
        let guarded = match self.peers.get(&id) {
            None => false,
            Some(side) => match &side.max_prefixes {
                Some(guard) if guard.tripped() => return,
                Some(_) => true,
                None => false,
            },
        };
        let mut outbound = std::collections::BTreeSet::new();
        let mut cut_off = false;
        for u in updates {
            let mut withdrawn = u.withdrawn;
            let (mut announced, mut mp_announced) = if u.treat_as_withdraw.is_some() {
                // RFC 7606 §2: treat-as-withdraw.
                withdrawn.extend(u.announced);
                withdrawn.extend(u.mp_announced);
                (Vec::new(), Vec::new())
            } else {
                (u.announced, u.mp_announced)
            };
            let attrs = u.attributes.unwrap_or_default();
            if guarded {
                // Max-prefix: only what fits the limit reaches the Loc-RIB. (The import checks
                // that `fit` repeats do not look at the next hop: one attribute set serves both.)
                let mut room = self.room(id);
                cut_off = self.rib.fit_to_room(id, &mut announced, &attrs, &mut room);
                if cut_off {
                    mp_announced.clear();
                } else {
                    cut_off = self.rib.fit_to_room(id, &mut mp_announced, &attrs, &mut room);
                }
            }
            // The decoded set is handed over, not copied, unless MP_REACH_NLRI needs it too.
            let mp_attrs = (!mp_announced.is_empty()).then(|| PathAttributes {
                next_hop: u.mp_next_hop.unwrap_or_default(),
                ..attrs.clone()
            });
            match self.rib.apply_update(id, &announced, attrs, &withdrawn) {
                Ok(outcome) => {
                    outbound.extend(outcome.changes.outbound);
                    self.log_refused(id, &outcome.rejected);
                }
                Err(e) => {
                    warn!(peer = self.peer_address(id).map(tracing::field::display), "{e}");
                    return;
                }
            }
            if let Some(mp_attrs) = mp_attrs {
                if let Ok(outcome) = self.rib.apply_update(id, &mp_announced, mp_attrs, &[]) {
                    self.log_refused(id, &outcome.rejected);
                    outbound.extend(outcome.changes.outbound);
                }
            }
            if cut_off {
                // The rest of the batch is past the limit.
                break;
            }
        }
        self.wake(&outbound);
        let count = self.rib.accepted_count(id) as u64;
        let Some(side) = self.peers.get_mut(&id) else { return };
        side.last_update_applied = Some(std::time::SystemTime::now());
        side.observe_count(count, cut_off);
    }

    /// A reload's new policies for one established session, applied without a reset: what the
    /// import policy refuses now is withdrawn (what it newly allows comes with the peer's
    /// answer to ROUTE-REFRESH), the export policy is re-applied to the whole table (new
    /// UPDATEs for what changed), and the prefix limit is checked against the new value.
    fn set_peer_policy(&mut self, id: PeerId, policy: PeerPolicy) {
        let Some(address) = self.rib.peer_info(id).map(|info| info.address) else { return };
        let mut outbound = BTreeSet::new();
        let import_changed = self.rib.peer_info(id).is_some_and(|i| i.import != policy.import);
        if import_changed {
            match self.rib.set_import_policy(id, policy.import) {
                Ok(changes) => {
                    outbound.extend(changes.outbound);
                }
                Err(e) => warn!("import policy for peer {address}: {e}"),
            }
        }
        let export = effective_export(&policy.export, &self.announced, address);
        self.base_export.insert(id, policy.export);
        if self.rib.peer_info(id).is_some_and(|info| info.export != export) {
            match self.rib.set_export_policy(id, export) {
                Ok(changes) => outbound.extend(changes.outbound),
                Err(e) => warn!("export policy for peer {address}: {e}"),
            }
        }
        self.wake(&outbound);
        let accepted = self.rib.accepted_count(id) as u64;
        if let Some(side) = self.peers.get_mut(&id) {
            side.set_limit(policy.max_prefixes, accepted);
        }
    }

    fn peer_address(&self, id: PeerId) -> Option<IpAddr> {
        self.rib.peer_info(id).map(|info| info.address)
    }

    /// The first announcement import policy refused, with the peer and the prefix as fields
    /// (`PEER=`, `PREFIX=` in the journal).
    fn log_refused(&self, id: PeerId, rejected: &[(IpNet, impl std::fmt::Display)]) {
        if let Some((prefix, why)) = rejected.first() {
            debug!(
                peer = self.peer_address(id).map(tracing::field::display), prefix = %prefix,
                "{} announcement(s) refused by import policy, first: {prefix} ({why})",
                rejected.len()
            );
        }
    }

    /// How many new prefixes the peer may still add (max-prefix); unbounded without a limit.
    fn room(&self, id: PeerId) -> u64 {
        let count = self.rib.accepted_count(id) as u64;
        self.peers
            .get(&id)
            .and_then(|side| side.max_prefixes.as_ref())
            .and_then(|guard| guard.room(count))
            .unwrap_or(u64::MAX)
    }

    /// Originates what is new, withdraws what is gone, then re-derives every peer's export
    /// policy so each prefix reaches its peers.
    fn set_announced(&mut self, announced: Arc<AnnouncedSet>) {
        if announced == self.announced {
            return;
        }
        let mut outbound = BTreeSet::new();
        let (gone, new) = gone_and_new(&self.announced, &announced);
        for prefix in gone {
            info!(prefix = %prefix, "no longer originated");
            let changes = self.rib.withdraw_local(prefix);
            // A learned path may now be best for a prefix we stopped originating.
            outbound.extend(changes.outbound);
        }
        for prefix in new {
            info!(prefix = %prefix, "originated");
            let changes = self.rib.originate(prefix, &PathAttributes::default());
            outbound.extend(changes.outbound);
        }
        self.announced = announced;
        let peers: Vec<(PeerId, IpAddr)> =
            self.rib.peers().map(|(id, info)| (id, info.address)).collect();
        for (id, address) in peers {
            let Some(base) = self.base_export.get(&id) else { continue };
            let export = effective_export(base, &self.announced, address);
            // Re-exporting walks the whole table: only for peers whose policy changed.
            if self.rib.peer_info(id).is_some_and(|info| info.export == export) {
                continue;
            }
            match self.rib.set_export_policy(id, export) {
                Ok(changes) => outbound.extend(changes.outbound),
                Err(e) => warn!(peer = %address, "announced routes for peer {address}: {e}"),
            }
        }
        self.wake(&outbound);
    }

    fn wake(&self, peers: &std::collections::BTreeSet<PeerId>) {
        for id in peers {
            if let Some(side) = self.peers.get(id) {
                side.signal.output_ready();
            }
        }
    }

    fn summary(&self) -> RibSummary {
        let mut out = RibSummary {
            destinations_v4: self.rib.prefix_count(Family::IPV4_UNICAST) as u64,
            destinations_v6: self.rib.prefix_count(Family::IPV6_UNICAST) as u64,
            table_version: self.rib.table_version(),
            peers: HashMap::new(),
        };
        for (id, info) in self.rib.peers() {
            out.peers.insert(
                info.address,
                PeerCounts {
                    accepted: self.rib.pfx_received(id),
                    sent: self.rib.pfx_sent(id),
                    desired: self.rib.pfx_desired(id) as u64,
                    last_update_applied: self.peers.get(&id).and_then(|s| s.last_update_applied),
                    over_limit: self
                        .peers
                        .get(&id)
                        .and_then(|s| s.max_prefixes.as_ref())
                        .is_some_and(|g| {
                            self.rib.accepted_count(id) as u64 > u64::from(g.limit().limit)
                        }),
                    synced_version: self.rib.synced_version(id),
                },
            );
        }
        out
    }

    fn view(&self, prefix: IpNet, paths: &[super::rib::Path]) -> RouteView {
        let paths = paths
            .iter()
            .map(|p| PathView {
                source: match p.source() {
                    Source::Local => PathSource::Local,
                    Source::Peer(id) => match self.rib.peer_info(id) {
                        Some(info) => PathSource::Peer {
                            address: info.address,
                            router_id: info.remote_id,
                            ebgp: info.ebgp,
                        },
                        None => PathSource::Peer {
                            address: IpAddr::V4(Ipv4Addr::UNSPECIFIED),
                            router_id: Ipv4Addr::UNSPECIFIED,
                            ebgp: true,
                        },
                    },
                },
                attrs: p.attrs().clone(),
                best: p.is_best(),
                multipath: p.is_multipath(),
                stale: p.is_stale(),
                reason: p.reason().map(|r| r.to_string()),
            })
            .collect();
        RouteView { prefix, paths }
    }

    fn lookup(&self, lookup: Lookup) -> Option<RouteView> {
        match lookup {
            Lookup::Prefix(prefix) => self.rib.route(&prefix).map(|paths| self.view(prefix, paths)),
            // Longest match: try every length from the host route down.
            Lookup::Address(addr) => {
                let max = if addr.is_ipv4() { 32 } else { 128 };
                (0..=max).rev().find_map(|len| {
                    let prefix = IpNet::new(addr, len).ok()?.trunc();
                    self.rib.route(&prefix).map(|paths| self.view(prefix, paths))
                })
            }
        }
    }
}
