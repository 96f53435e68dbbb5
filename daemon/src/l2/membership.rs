//! Who of the nodes is alive on the layer 2 segment: the nodes' uplinks run SWIM (with
//! suspicion and infection-style dissemination, as MetalLB's memberlist does) through the
//! `foca` crate, over UDP, each datagram in the shared-key envelope (`envelope.rs`) and every
//! source held to a rate before its tag is checked. The answering node of each address is
//! chosen among the alive ones (`announce::l2`), so every node that sees the same members
//! chooses the same one.
//!
//! A member's identity is its node name and membership address; `bump` renews it when the
//! node comes back after the others declared it down (foca then takes it as a new member
//! rather than the dead one).

use std::collections::{BTreeSet, HashMap};
use std::net::{IpAddr, SocketAddr};
use std::num::{NonZeroU32, NonZeroUsize};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use foca::{AccumulatingRuntime, Foca, Identity, OwnedNotification, PostcardCodec, Timer};
use rand::rngs::SmallRng;
use rand::SeedableRng;
use serde::{Deserialize, Serialize};
use tokio::net::UdpSocket;
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;
use tracing::{debug, info, warn};

use super::envelope::{self, Key, MAX_DATAGRAM};
use crate::announce::l2::Members;

/// The shortest detection time accepted: below it a busy node's late answer to a probe would
/// move its addresses away.
pub const MIN_DETECTION: Duration = Duration::from_millis(500);

/// How often the seeds that are not members yet are asked to let this node in.
const JOIN_EVERY: Duration = Duration::from_secs(2);

/// How many detection times a start waits for the seeds that do not answer: a seed that is
/// down is then taken as down (and this node may be the only one left).
const JOIN_WAIT: u32 = 3;

/// Datagrams a source may send per second (and at once): a member sends a few per probe
/// period; anything beyond is a flood, dropped before its tag is computed.
const SOURCE_RATE: f64 = 200.0;
/// Sources followed at once; a flood from spoofed sources evicts the quiet ones first.
const MAX_SOURCES: usize = 4096;

/// The most layer 2 advertisements a member names as selecting it: its identity travels in
/// most messages, which stay within one datagram.
pub const MAX_SELECTED_BY: usize = 16;

/// A member: the node's name, where its membership listens, and the layer 2 advertisements
/// whose node selectors select it (each node knows its own labels; the others learn only
/// this). A change of those renews the identity, which the members learn as news.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Member {
    pub node: String,
    pub address: SocketAddr,
    pub selected_by: BTreeSet<String>,
    /// Renewed when the node rejoins after being declared down, or its selection changes.
    bump: u16,
}

impl Member {
    pub fn new(node: &str, address: SocketAddr, selected_by: BTreeSet<String>) -> Self {
        Member { node: node.to_string(), address, selected_by: bounded(selected_by), bump: 0 }
    }

    /// A seed known only by its address, asked to let this node in: its reply names it.
    fn seed(address: SocketAddr) -> Self {
        Member { node: String::new(), address, selected_by: BTreeSet::new(), bump: 0 }
    }
}

fn bounded(mut selected_by: BTreeSet<String>) -> BTreeSet<String> {
    if selected_by.len() > MAX_SELECTED_BY {
        warn!(
            "layer 2: {} advertisements select this node; the membership carries the first {MAX_SELECTED_BY}",
            selected_by.len()
        );
        while selected_by.len() > MAX_SELECTED_BY {
            selected_by.pop_last();
        }
    }
    selected_by
}

impl Identity for Member {
    type Addr = SocketAddr;

    fn renew(&self) -> Option<Self> {
        Some(Member { bump: self.bump.wrapping_add(1), ..self.clone() })
    }

    fn addr(&self) -> SocketAddr {
        self.address
    }

    /// Two identities at one address: the named one wins over a seed's placeholder, then the
    /// later renewal (compared as a sequence number, so it survives the wrap).
    fn win_addr_conflict(&self, adversary: &Self) -> bool {
        match (self.node.is_empty(), adversary.node.is_empty()) {
            (false, true) => true,
            (true, false) => false,
            _ => (self.bump.wrapping_sub(adversary.bump) as i16) > 0,
        }
    }
}

/// What the membership is started with.
#[derive(Debug, Clone)]
pub struct Settings {
    pub node: String,
    /// Where this node's membership listens, as the others reach it.
    pub address: SocketAddr,
    /// Members to join by: the others' membership addresses.
    pub seeds: Vec<SocketAddr>,
    /// The time from a node's death to the others seeing it down.
    pub detection: Duration,
    /// The layer 2 advertisements that select this node.
    pub selected_by: BTreeSet<String>,
}

impl Settings {
    /// SWIM's timings for the detection time: a member is probed about every third of it,
    /// its answer awaited a ninth, and a suspect is declared down after another third —
    /// memberlist's LAN profile, scaled from its 1 s probe interval to the detection asked.
    fn swim(&self) -> foca::Config {
        let size = NonZeroU32::new(u32::try_from(self.seeds.len() + 1).unwrap_or(u32::MAX))
            .unwrap_or(NonZeroU32::MIN);
        let mut config = foca::Config::new_lan(size);
        let detection = self.detection.max(MIN_DETECTION);
        config.probe_period = detection / 3;
        config.probe_rtt = detection / 9;
        config.suspect_to_down_after = detection / 3;
        // Room for the envelope around every message.
        config.max_packet_size =
            NonZeroUsize::new(MAX_DATAGRAM - envelope::OVERHEAD).unwrap_or(NonZeroUsize::MIN);
        // A member declared down by mistake (a long pause) learns it and comes back renewed.
        config.notify_down_members = true;
        config.periodic_announce_to_down_members =
            Some(foca::PeriodicParams { frequency: JOIN_EVERY, num_members: NonZeroUsize::MIN });
        config
    }
}

/// The membership's datagrams, counted (read by `show l2` and the metrics).
#[derive(Debug, Default)]
pub struct Counters {
    pub received: AtomicU64,
    pub sent: AtomicU64,
    /// Over its source's rate.
    pub refused_rate: AtomicU64,
    /// Too long or too short, or of another version.
    pub refused_malformed: AtomicU64,
    /// Its tag does not verify: another key, or forged.
    pub refused_wrong_key: AtomicU64,
    /// Authenticated, refused by the protocol (a message foca cannot read).
    pub refused_protocol: AtomicU64,
}

fn count(counter: &AtomicU64) {
    counter.fetch_add(1, Ordering::Relaxed);
}

/// The membership as this node sees it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct View {
    /// The nodes alive (or suspected, not yet down), this one included, by name, with the
    /// layer 2 advertisements that select each.
    pub alive: Members,
    /// The nodes seen down since they were last alive.
    pub down: BTreeSet<String>,
    /// The start is over: every seed answered, or the wait for them ([`JOIN_WAIT`] detection
    /// times) ran out. Until then this node answers for nothing: alone in its own view, it
    /// would take every address from the nodes that answer for them.
    pub joined: bool,
}

/// The running membership: its view, and leaving the others on a graceful stop.
pub struct Membership {
    view: watch::Receiver<Arc<View>>,
    counters: Arc<Counters>,
    selection: watch::Sender<BTreeSet<String>>,
    seeds: watch::Sender<Vec<SocketAddr>>,
    leave: Option<tokio::sync::oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<()>,
}

impl Membership {
    /// Binds the membership's socket and starts it; an error when the address cannot be
    /// bound (in use, or not this node's).
    pub async fn start(settings: Settings, key: Key) -> std::io::Result<Membership> {
        let socket = UdpSocket::bind(settings.address).await?;
        let mut view = View::default();
        view.alive.insert(settings.node.clone(), bounded(settings.selected_by.clone()));
        let (publish, watched) = watch::channel(Arc::new(view));
        let (leave, left) = tokio::sync::oneshot::channel();
        let (selection, selections) = watch::channel(settings.selected_by.clone());
        let (seeds, seed_changes) = watch::channel(settings.seeds.clone());
        let counters = Arc::new(Counters::default());
        let events = Events { left, selections, seeds: seed_changes };
        let task = tokio::spawn(run(settings, key, socket, publish, counters.clone(), events));
        Ok(Membership { view: watched, counters, selection, seeds, leave: Some(leave), task })
    }

    /// The members to join by changed (a Node added to or removed from the cluster): the new
    /// ones are asked to let this node in; nobody is left.
    pub fn set_seeds(&self, seeds: Vec<SocketAddr>) {
        self.seeds.send_if_modified(|current| {
            let changed = *current != seeds;
            *current = seeds;
            changed
        });
    }

    /// The layer 2 advertisements that select this node changed (a reload, a label): the
    /// others learn it with this node's renewed identity.
    pub fn set_selected_by(&self, selected_by: BTreeSet<String>) {
        self.selection.send_if_modified(|current| {
            let changed = *current != selected_by;
            *current = selected_by;
            changed
        });
    }

    pub fn view(&self) -> watch::Receiver<Arc<View>> {
        self.view.clone()
    }

    pub fn counters(&self) -> &Arc<Counters> {
        &self.counters
    }

    /// Tells the others this node leaves (they move its addresses at once, without waiting
    /// for the detection time), then stops.
    pub async fn leave(mut self) {
        if let Some(leave) = self.leave.take() {
            let _ = leave.send(());
        }
        let _ = (&mut self.task).await;
    }
}

impl Drop for Membership {
    /// Dropped without [`Membership::leave`]: silent, as a node that dies.
    fn drop(&mut self) {
        self.task.abort();
    }
}

type Swim = Foca<Member, PostcardCodec, SmallRng, foca::NoCustomBroadcast>;

/// One datagram's worth of state the loop keeps between events.
struct Node {
    swim: Swim,
    runtime: AccumulatingRuntime<Member>,
    socket: UdpSocket,
    key: Key,
    timers: mpsc::UnboundedSender<Timer<Member>>,
    view: View,
    publish: watch::Sender<Arc<View>>,
    counters: Arc<Counters>,
    sources: SourceLimits,
    /// Leaving on a graceful stop: foca then turns this node defunct itself.
    leaving: bool,
}

/// What the membership's owner tells it.
struct Events {
    left: tokio::sync::oneshot::Receiver<()>,
    selections: watch::Receiver<BTreeSet<String>>,
    seeds: watch::Receiver<Vec<SocketAddr>>,
}

async fn run(
    settings: Settings,
    key: Key,
    socket: UdpSocket,
    publish: watch::Sender<Arc<View>>,
    counters: Arc<Counters>,
    mut events: Events,
) {
    let identity = Member::new(&settings.node, settings.address, settings.selected_by.clone());
    let swim =
        Foca::new(identity, settings.swim(), SmallRng::from_rng(&mut rand::rng()), PostcardCodec);
    let (timers, mut due) = mpsc::unbounded_channel();
    let view = publish.borrow().as_ref().clone();
    let mut node = Node {
        swim,
        runtime: AccumulatingRuntime::new(),
        socket,
        key,
        timers,
        view,
        publish,
        counters,
        sources: SourceLimits::default(),
        leaving: false,
    };
    let mut buffer = vec![0u8; MAX_DATAGRAM + 1];
    let mut join = tokio::time::interval(JOIN_EVERY);
    let join_wait = tokio::time::sleep(settings.detection.max(MIN_DETECTION) * JOIN_WAIT);
    tokio::pin!(join_wait);
    let mut seeds = settings.seeds.clone();
    node.joined_when_seeds_answer(&seeds);
    loop {
        tokio::select! {
            _ = join.tick() => {
                node.join(&seeds).await;
                node.joined_when_seeds_answer(&seeds);
            }
            Ok(()) = events.seeds.changed() => {
                seeds = events.seeds.borrow_and_update().clone();
                node.join(&seeds).await;
            }
            () = &mut join_wait, if !node.view.joined => {
                let missing = node.missing_seeds(&seeds);
                warn!(?missing, "membership: seeds not answering; taking them as down");
                node.set_joined();
            }
            received = node.socket.recv_from(&mut buffer) => match received {
                Ok((length, from)) => {
                    let datagram = buffer.get(..length).unwrap_or_default();
                    node.receive(datagram, from).await;
                    if !node.view.joined {
                        node.joined_when_seeds_answer(&seeds);
                    }
                }
                Err(e) => debug!("membership: receive: {e}"),
            },
            Some(timer) = due.recv() => {
                if let Err(e) = node.swim.handle_timer(timer, &mut node.runtime) {
                    debug!("membership: timer: {e}");
                }
                node.drain().await;
            }
            Ok(()) = events.selections.changed() => {
                let selected_by = bounded(events.selections.borrow_and_update().clone());
                node.change_selection(selected_by).await;
            }
            _ = &mut events.left => {
                node.leaving = true;
                if let Err(e) = node.swim.leave_cluster(&mut node.runtime) {
                    debug!("membership: leaving: {e}");
                }
                node.drain().await;
                info!("membership: left the others");
                return;
            }
        }
    }
}

impl Node {
    /// The seeds (other than this node) that are not members.
    fn missing_seeds(&self, seeds: &[SocketAddr]) -> Vec<SocketAddr> {
        let own = self.swim.identity().address;
        let members: BTreeSet<SocketAddr> =
            self.swim.iter_members().map(|m| m.id().address).collect();
        seeds.iter().filter(|s| **s != own && !members.contains(s)).copied().collect()
    }

    fn joined_when_seeds_answer(&mut self, seeds: &[SocketAddr]) {
        if !self.view.joined && self.missing_seeds(seeds).is_empty() {
            self.set_joined();
        }
    }

    fn set_joined(&mut self) {
        info!(alive = self.view.alive.len(), "membership: joined");
        self.view.joined = true;
        self.publish.send_replace(Arc::new(self.view.clone()));
    }

    /// Asks each seed that is not a member yet to let this node in.
    async fn join(&mut self, seeds: &[SocketAddr]) {
        let missing = self.missing_seeds(seeds);
        self.announce_to(missing);
        self.drain().await;
    }

    /// Announces this node's identity to whoever listens at each address: its answer names
    /// it and lets this node in (or learns this node's renewed identity).
    fn announce_to(&mut self, addresses: Vec<SocketAddr>) {
        for address in addresses {
            if let Err(e) = self.swim.announce(Member::seed(address), &mut self.runtime) {
                debug!("membership: announcing to {address}: {e}");
            }
        }
    }

    /// This node's selection changed: its identity is renewed with it, which the members
    /// learn as a new identity at the same address.
    async fn change_selection(&mut self, selected_by: BTreeSet<String>) {
        let current = self.swim.identity().clone();
        if current.selected_by == selected_by {
            return;
        }
        let Some(mut renewed) = current.renew() else { return };
        renewed.selected_by = selected_by.clone();
        if let Err(e) = self.swim.change_identity(renewed, &mut self.runtime) {
            warn!("membership: cannot renew this node's identity: {e}");
        }
        // foca takes a message only when it is addressed to the receiver's identity as it is
        // now (an Announce: to its address). The others renew at the same moment when one
        // advertisement selects the fleet anew: each would drop the others' news, addressed
        // to their old identities, and wait disconnected until declared down. Announced to by
        // address, as a join is, each member answers this node's new identity.
        let others: Vec<SocketAddr> = self.swim.iter_members().map(|m| m.id().address).collect();
        self.announce_to(others);
        self.view.alive.insert(current.node, selected_by);
        self.publish.send_replace(Arc::new(self.view.clone()));
        self.drain().await;
    }

    async fn receive(&mut self, datagram: &[u8], from: SocketAddr) {
        if !self.sources.admit(from.ip(), Instant::now()) {
            return count(&self.counters.refused_rate);
        }
        let message = match self.key.open(datagram) {
            Ok(message) => message,
            Err(envelope::Refused::WrongTag) => return count(&self.counters.refused_wrong_key),
            Err(_) => return count(&self.counters.refused_malformed),
        };
        count(&self.counters.received);
        if let Err(e) = self.swim.handle_data(message, &mut self.runtime) {
            count(&self.counters.refused_protocol);
            debug!("membership: a message from {from} refused: {e}");
        }
        self.drain().await;
    }

    /// Sends what the protocol asked, schedules its timers and applies its news.
    async fn drain(&mut self) {
        let mut changed = false;
        while let Some((to, message)) = self.runtime.to_send() {
            let Some(datagram) = self.key.seal(&message) else { continue };
            match self.socket.send_to(&datagram, to.address).await {
                Ok(_) => count(&self.counters.sent),
                Err(e) => debug!("membership: to {}: {e}", to.address),
            }
        }
        while let Some((after, timer)) = self.runtime.to_schedule() {
            let timers = self.timers.clone();
            tokio::spawn(async move {
                tokio::time::sleep(after).await;
                let _ = timers.send(timer);
            });
        }
        while let Some(notification) = self.runtime.to_notify() {
            match notification {
                OwnedNotification::MemberUp(member) if !member.node.is_empty() => {
                    info!(node = %member.node, address = %member.address, "membership: up");
                    self.view.down.remove(&member.node);
                    changed |= self.view.alive.insert(member.node, member.selected_by).is_none();
                }
                OwnedNotification::MemberDown(member) if !member.node.is_empty() => {
                    warn!(node = %member.node, address = %member.address, "membership: down");
                    changed |= self.view.alive.remove(&member.node).is_some();
                    self.view.down.insert(member.node);
                }
                OwnedNotification::Rename(old, new) => {
                    changed |= self.view.alive.remove(&old.node).is_some();
                    if !new.node.is_empty() {
                        info!(node = %new.node, selected_by = ?new.selected_by, "membership: renewed");
                        self.view.alive.insert(new.node, new.selected_by);
                        changed = true;
                    }
                }
                OwnedNotification::Defunct if !self.leaving => {
                    warn!("membership: the others declared this node down; rejoining renewed");
                }
                _ => {}
            }
        }
        // This node stays alive in its own view whatever the others said.
        let own = self.swim.identity();
        if self.view.alive.get(&own.node) != Some(&own.selected_by) {
            self.view.alive.insert(own.node.clone(), own.selected_by.clone());
            changed = true;
        }
        if changed {
            self.publish.send_replace(Arc::new(self.view.clone()));
        }
    }
}

/// A token bucket per source address, checked before a datagram's tag is computed.
#[derive(Default)]
struct SourceLimits {
    buckets: HashMap<IpAddr, (f64, Instant)>,
}

impl SourceLimits {
    fn admit(&mut self, source: IpAddr, now: Instant) -> bool {
        if self.buckets.len() >= MAX_SOURCES && !self.buckets.contains_key(&source) {
            // Full of sources: forget those quiet for a second (full again: refuse the new).
            self.buckets.retain(|_, (_, last)| now.duration_since(*last) < Duration::from_secs(1));
            if self.buckets.len() >= MAX_SOURCES {
                return false;
            }
        }
        let (tokens, last) = self.buckets.entry(source).or_insert((SOURCE_RATE, now));
        let refill = now.duration_since(*last).as_secs_f64() * SOURCE_RATE;
        *tokens = (*tokens + refill).min(SOURCE_RATE);
        *last = now;
        if *tokens >= 1.0 {
            *tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DETECTION: Duration = Duration::from_millis(500);

    fn address(port: u16) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], port))
    }

    /// Free ports for the members, found by binding port 0.
    fn free_ports(count: usize) -> Vec<u16> {
        let sockets: Vec<std::net::UdpSocket> =
            (0..count).map(|_| std::net::UdpSocket::bind("127.0.0.1:0").unwrap()).collect();
        sockets.iter().map(|s| s.local_addr().unwrap().port()).collect()
    }

    async fn start(node: &str, port: u16, seeds: &[u16], secret: &[u8]) -> Membership {
        let settings = Settings {
            node: node.to_string(),
            address: address(port),
            seeds: seeds.iter().map(|p| address(*p)).collect(),
            detection: DETECTION,
            selected_by: ["adv".to_string()].into(),
        };
        Membership::start(settings, Key::new(secret)).await.unwrap()
    }

    /// Waits until `member`'s alive set is `expected`; how long it took.
    async fn until_alive(member: &Membership, expected: &[&str], within: Duration) -> Duration {
        let started = Instant::now();
        let expected: BTreeSet<String> = expected.iter().map(|s| s.to_string()).collect();
        let mut view = member.view();
        loop {
            let alive: BTreeSet<String> = view.borrow_and_update().alive.keys().cloned().collect();
            if alive == expected {
                return started.elapsed();
            }
            let left = within.saturating_sub(started.elapsed());
            if tokio::time::timeout(left, view.changed()).await.is_err() {
                panic!(
                    "alive {:?}, not {expected:?}, after {within:?}",
                    view.borrow().alive.keys()
                );
            }
        }
    }

    /// The fleet's key in every test but where another is the point.
    const SECRET: &[u8] = b"the fleet's memberlist secret";

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn members_join_by_seeds_see_a_death_within_the_detection_time_and_refuse_other_keys() {
        let ports = free_ports(4);
        let [a, b, c, d] = [ports[0], ports[1], ports[2], ports[3]];
        let wk1 = start("wk1", a, &[b, c], SECRET).await;
        let wk2 = start("wk2", b, &[a], SECRET).await;
        let wk3 = start("wk3", c, &[a], SECRET).await;
        let all = ["wk1", "wk2", "wk3"];
        for member in [&wk1, &wk2, &wk3] {
            until_alive(member, &all, Duration::from_secs(10)).await;
        }

        // Another key: refused by every member it asks, and never a member.
        let intruder = start("intruder", d, &[a, b, c], b"another secret").await;
        let started = Instant::now();
        while wk1.counters().refused_wrong_key.load(Ordering::Relaxed) == 0 {
            assert!(started.elapsed() < Duration::from_secs(5), "no datagram refused");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert_eq!(wk1.view().borrow().alive.len(), 3);
        assert_eq!(intruder.view().borrow().alive.keys().collect::<Vec<_>>(), ["intruder"]);
        drop(intruder);

        // wk1's labels change: the others learn which advertisements select it now.
        wk1.set_selected_by(["other".to_string()].into());
        let started = Instant::now();
        let mut view = wk2.view();
        while view.borrow_and_update().alive.get("wk1") != Some(&["other".to_string()].into()) {
            let left = Duration::from_secs(5).saturating_sub(started.elapsed());
            tokio::time::timeout(left, view.changed()).await.expect("wk1's new selection").unwrap();
        }
        until_alive(&wk2, &all, Duration::from_secs(5)).await;

        // wk3 dies without a word: the others see it down within twice the detection time
        // (the probe that finds it comes up to a period late).
        drop(wk3);
        let took = until_alive(&wk1, &["wk1", "wk2"], DETECTION * 4).await;
        println!("wk3's death seen by wk1 after {took:?}");
        assert!(took <= DETECTION * 2, "wk3's death seen after {took:?}");
        until_alive(&wk2, &["wk1", "wk2"], DETECTION * 2).await;
        assert!(wk1.view().borrow().down.contains("wk3"));

        // wk3 comes back at the same address: a member again (renewed).
        let wk3 = start("wk3", c, &[a], SECRET).await;
        until_alive(&wk1, &all, Duration::from_secs(10)).await;
        until_alive(&wk3, &all, Duration::from_secs(10)).await;

        // wk2 leaves with a goodbye: seen at once, well before the detection time.
        wk2.leave().await;
        let took = until_alive(&wk1, &["wk1", "wk3"], DETECTION).await;
        println!("wk2's leave seen by wk1 after {took:?}");
    }

    /// Two members, wk1 and wk2, each seeing the other; their ports.
    async fn two_joined() -> (Membership, Membership, [u16; 2]) {
        let ports = free_ports(2);
        let [a, b] = [ports[0], ports[1]];
        let wk1 = start("wk1", a, &[b], SECRET).await;
        let wk2 = start("wk2", b, &[a], SECRET).await;
        for member in [&wk1, &wk2] {
            until_alive(member, &["wk1", "wk2"], Duration::from_secs(10)).await;
        }
        (wk1, wk2, [a, b])
    }

    /// Waits until `member` sees `other` alive with `selection`.
    async fn until_selected(member: &Membership, other: &str, selection: &BTreeSet<String>) {
        let started = Instant::now();
        let mut view = member.view();
        while view.borrow_and_update().alive.get(other) != Some(selection) {
            let left = (DETECTION * 4).saturating_sub(started.elapsed());
            let alive = view.borrow().alive.clone();
            tokio::time::timeout(left, view.changed())
                .await
                .unwrap_or_else(|_| panic!("{other}'s new selection not learnt: {alive:?}"))
                .unwrap();
        }
    }

    /// One advertisement's change selects the whole fleet anew at once: every member renews
    /// its identity at the same moment, and each still learns the others' new selections.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn members_renewing_at_once_learn_each_others_selection() {
        let (wk1, wk2, _) = two_joined().await;
        let selection: BTreeSet<String> = ["l2".to_string()].into();
        wk1.set_selected_by(selection.clone());
        wk2.set_selected_by(selection.clone());
        until_selected(&wk1, "wk2", &selection).await;
        until_selected(&wk2, "wk1", &selection).await;
    }

    /// A node whose identity was renewed (its selection changed twice) dies and its daemon
    /// starts again with a first identity: the others take it back, and it sees them, rather
    /// than each answering alone.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_restarted_member_is_taken_back_after_its_identity_was_renewed() {
        let (wk1, wk2, [a, b]) = two_joined().await;
        for selection in ["l2", "adv"] {
            let selection: BTreeSet<String> = [selection.to_string()].into();
            wk2.set_selected_by(selection.clone());
            until_selected(&wk1, "wk2", &selection).await;
        }
        drop(wk2);
        until_alive(&wk1, &["wk1"], DETECTION * 4).await;

        let wk2 = start("wk2", b, &[a], SECRET).await;
        let both = ["wk1", "wk2"];
        until_alive(&wk1, &both, Duration::from_secs(10)).await;
        until_alive(&wk2, &both, Duration::from_secs(10)).await;
    }

    #[test]
    fn a_flooding_source_is_held_to_its_rate_and_spoofed_sources_are_bounded() {
        let mut limits = SourceLimits::default();
        let now = Instant::now();
        let flood: IpAddr = "192.0.2.66".parse().unwrap();
        let admitted = (0..1000).filter(|_| limits.admit(flood, now)).count();
        assert_eq!(admitted, SOURCE_RATE as usize);
        // A tenth of a second later, a tenth of the rate again.
        let later = now + Duration::from_millis(100);
        let admitted = (0..1000).filter(|_| limits.admit(flood, later)).count();
        assert_eq!(admitted, (SOURCE_RATE / 10.0) as usize);
        // Another source is not held by the flood.
        assert!(limits.admit("192.0.2.7".parse().unwrap(), later));
        // Spoofed sources fill the table; a new one is refused until the others go quiet.
        for n in 0..MAX_SOURCES as u32 {
            limits.admit(IpAddr::from(std::net::Ipv4Addr::from(0x0a00_0000 + n)), later);
        }
        assert!(!limits.admit("198.51.100.1".parse().unwrap(), later));
        assert!(limits.admit("198.51.100.1".parse().unwrap(), later + Duration::from_secs(2)));
    }

    #[test]
    fn the_named_and_the_renewed_identity_win_an_address() {
        let seed = Member::seed(address(1));
        let named = Member::new("wk1", address(1), BTreeSet::new());
        assert!(named.win_addr_conflict(&seed) && !seed.win_addr_conflict(&named));
        let renewed = named.renew().unwrap();
        assert!(renewed.win_addr_conflict(&named) && !named.win_addr_conflict(&renewed));
        let wrapped = Member { bump: u16::MAX, ..named.clone() }.renew().unwrap();
        assert!(wrapped.win_addr_conflict(&Member { bump: u16::MAX, ..named }));
    }
}
