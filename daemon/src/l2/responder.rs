//! The answers: on each interface an address is answered on, ARP requests (IPv4) and
//! Neighbor Solicitations (IPv6) for it get this node's Ethernet address; when this node
//! takes an address over, it says so at once and again every 1.1 s for 5 s (gratuitous ARP,
//! unsolicited Neighbor Advertisements), as MetalLB's announcer does, so that the neighbours
//! whose entries still point at the node that died move (a lost frame is made up for by the
//! next). Every other frame is dropped and counted by why (`super::Dropped`).
//!
//! The kernel does not answer for these addresses by itself: they are on no interface unless
//! the config puts them there (docs/layer2.md says which sysctls keep it so).

use std::cell::Cell;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io;
use std::net::IpAddr;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use serde::Serialize;
use tokio::sync::{watch, Notify};
use tokio::task::JoinHandle;
use tracing::{debug, info, warn};

use super::links::{answering_links, Link};
use super::socket::{target_ranges, PacketSocket, ETH_P_ARP, ETH_P_IPV6};
use super::{arp, ndp, Dropped};
use crate::announce::l2::Interfaces;
use crate::logthrottle::{held_back_note, LogThrottle, LOG_PERIOD};

/// How often the interfaces are read again: one that comes back up (its worker ended when it
/// went down) answers again within this time. A few small sysfs reads per interface.
const RESCAN: Duration = Duration::from_secs(1);
/// The announcements on takeover: this many, this far apart (MetalLB: at once, then every
/// 1.1 s until 5 s have passed).
const ANNOUNCEMENTS: usize = 5;
const ANNOUNCE_EVERY: Duration = Duration::from_millis(1100);
/// Each answering socket's receive buffer: at a flood's rate (200,000 requests a second for
/// other addresses in the benchmark) a few milliseconds of frames.
const RECEIVE_BUFFER: usize = 4 << 20;

/// What this node answers for: each address with the interfaces it is answered on.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AnswerSet(pub BTreeMap<IpAddr, Arc<Interfaces>>);

impl AnswerSet {
    pub fn answers(&self, address: IpAddr, interface: &str) -> bool {
        self.0.get(&address).is_some_and(|interfaces| on(interfaces, interface))
    }

    fn any_on(&self, interface: &str) -> bool {
        self.0.values().any(|interfaces| on(interfaces, interface))
    }

    /// Each address with the index of each of `links` it is answered on.
    fn pairs(&self, links: &[Arc<Link>]) -> BTreeSet<(IpAddr, u32)> {
        let mut out = BTreeSet::new();
        for (address, interfaces) in &self.0 {
            for link in links.iter().filter(|l| on(interfaces, &l.name)) {
                out.insert((*address, link.index));
            }
        }
        out
    }
}

fn on(interfaces: &Interfaces, interface: &str) -> bool {
    match interfaces {
        Interfaces::All => true,
        Interfaces::Only(names) => names.contains(interface),
    }
}

/// One address's counts, under MetalLB's metric names.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct AddressCounts {
    pub requests_received: u64,
    pub responses_sent: u64,
    pub gratuitous_sent: u64,
}

/// The responder's counts: per address answered, and the frames dropped by why.
#[derive(Debug, Default)]
pub struct Counters {
    addresses: Mutex<BTreeMap<IpAddr, AddressCounts>>,
    dropped: Mutex<BTreeMap<&'static str, u64>>,
}

impl Counters {
    pub fn addresses(&self) -> BTreeMap<IpAddr, AddressCounts> {
        self.addresses.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }

    pub fn dropped(&self) -> BTreeMap<&'static str, u64> {
        self.dropped.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }

    fn count(&self, address: IpAddr, change: impl FnOnce(&mut AddressCounts)) {
        change(
            self.addresses
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .entry(address)
                .or_default(),
        );
    }

    fn drop_frame(&self, why: Dropped) {
        *self
            .dropped
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(why.name())
            .or_default() += 1;
    }
}

/// The running responder.
pub struct Responder {
    answers: watch::Sender<Arc<AnswerSet>>,
    counters: Arc<Counters>,
    task: JoinHandle<()>,
}

impl Responder {
    pub fn start() -> Responder {
        let (answers, watched) = watch::channel(Arc::new(AnswerSet::default()));
        let counters = Arc::new(Counters::default());
        let task = tokio::spawn(supervise(watched, counters.clone()));
        Responder { answers, counters, task }
    }

    /// Answers for these addresses from now on (and for no other).
    pub fn set(&self, answers: AnswerSet) {
        self.answers.send_if_modified(|current| {
            let changed = **current != answers;
            if changed {
                *current = Arc::new(answers);
            }
            changed
        });
    }

    pub fn counters(&self) -> &Arc<Counters> {
        &self.counters
    }
}

impl Drop for Responder {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Keeps a worker on each interface something is answered on, and announces each address
/// on each interface it newly is answered on.
async fn supervise(mut answers: watch::Receiver<Arc<AnswerSet>>, counters: Arc<Counters>) {
    // By interface name, index and carrier changes: a link that went down and up since its
    // worker started gets a new one, and its addresses are announced again.
    let mut workers: HashMap<(String, u32, u64), Worker> = HashMap::new();
    let mut answered: BTreeSet<(IpAddr, u32)> = BTreeSet::new();
    // A worker that ends (its interface went down: its socket reports it) says so, and the
    // interfaces are read again at once.
    let ended = Arc::new(Notify::new());
    // A worker that cannot open its sockets is started again at every rescan: one line per
    // period says so.
    let failures = Arc::new(Mutex::new(LogThrottle::new(LOG_PERIOD)));
    loop {
        let current = answers.borrow_and_update().clone();
        // Nothing answered (no layer 2 advertisement, or not this node's): no interface read.
        let links: Vec<Arc<Link>> = if current.0.is_empty() {
            Vec::new()
        } else {
            let links = answering_links().into_iter().filter(|l| current.any_on(&l.name));
            links.map(Arc::new).collect()
        };
        // A worker whose interface went away has ended; it starts again once the interface
        // is back.
        let key = |l: &Link| (l.name.clone(), l.index, l.carrier_changes);
        workers.retain(|worked, worker| {
            !worker.0.is_finished() && links.iter().any(|l| key(l) == *worked)
        });
        for link in &links {
            workers.entry(key(link)).or_insert_with(|| {
                // Announced again on it, whatever was before: a link that was down for less
                // than a rescan may have seen its addresses taken by another node meanwhile.
                answered.retain(|(_, index)| *index != link.index);
                let serving = serve(
                    Link::clone(link),
                    answers.clone(),
                    counters.clone(),
                    ended.clone(),
                    failures.clone(),
                );
                Worker(tokio::spawn(serving))
            });
        }
        let now = current.pairs(&links);
        // The link shared by its addresses' entries (thousands for 4.4 s).
        let new: Vec<(IpAddr, Arc<Link>)> = now
            .difference(&answered)
            .filter_map(|(address, index)| {
                links.iter().find(|l| l.index == *index).map(|l| (*address, l.clone()))
            })
            .collect();
        if !new.is_empty() {
            tokio::spawn(announce(new, answers.clone(), counters.clone()));
        }
        answered = now;
        tokio::select! {
            changed = answers.changed() => if changed.is_err() { return },
            () = ended.notified() => {}
            () = tokio::time::sleep(RESCAN) => {}
        }
    }
}

/// A worker's task, ended with it.
struct Worker(JoinHandle<()>);

impl Drop for Worker {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Answers on one interface until it goes away.
async fn serve(
    link: Link,
    answers: watch::Receiver<Arc<AnswerSet>>,
    counters: Arc<Counters>,
    ended: Arc<Notify>,
    failures: Arc<Mutex<LogThrottle>>,
) {
    if let Err(e) = answer(&link, &answers, &counters).await {
        let due = failures.lock().unwrap_or_else(PoisonError::into_inner).event(Instant::now());
        if let Some(held_back) = due {
            warn!(
                interface = %link.name,
                "layer 2: not answering on {} ({e}) until it is back{}",
                link.name,
                held_back_note(held_back)
            );
        }
    }
    ended.notify_one();
}

async fn answer(
    link: &Link,
    answers: &watch::Receiver<Arc<AnswerSet>>,
    counters: &Counters,
) -> io::Result<()> {
    let requests = PacketSocket::open(link.index, ETH_P_ARP)?;
    let ranges = |answers: &AnswerSet| {
        target_ranges(answers.0.iter().filter(|(_, i)| on(i, &link.name)).filter_map(
            |(address, _)| match address {
                IpAddr::V4(v4) => Some(*v4),
                IpAddr::V6(_) => None,
            },
        ))
    };
    let mut answers = answers.clone();
    let mut filtered = ranges(&answers.borrow_and_update());
    requests.only_arp_requests(Some(&filtered))?;
    requests.set_receive_buffer(RECEIVE_BUFFER)?;
    let solicitations = PacketSocket::open(link.index, ETH_P_IPV6)?;
    solicitations.only_neighbor_solicitations()?;
    solicitations.set_receive_buffer(RECEIVE_BUFFER)?;
    solicitations.receive_all_multicast(link.index)?;
    info!(interface = %link.name, "layer 2: answering on {}", link.name);
    let mut arp_frame = vec![0u8; 2048];
    let mut nd_frame = vec![0u8; 2048];
    loop {
        // The address asked for, when this node answers for it (set by the reply's check).
        let asked = Cell::new(None);
        let (socket, reply) = tokio::select! {
            changed = answers.changed() => {
                if changed.is_err() {
                    return Ok(());
                }
                let now = ranges(&answers.borrow_and_update());
                if now != filtered {
                    requests.only_arp_requests(Some(&now))?;
                    filtered = now;
                }
                continue;
            }
            length = requests.receive(&mut arp_frame) => {
                let frame = arp_frame.get(..length?).unwrap_or_default();
                (&requests, arp::reply(frame, link.mac, |address| {
                    let address = IpAddr::V4(address);
                    let ours = answers.borrow().answers(address, &link.name);
                    asked.set(ours.then_some(address));
                    ours
                }))
            }
            length = solicitations.receive(&mut nd_frame) => {
                let frame = nd_frame.get(..length?).unwrap_or_default();
                (&solicitations, ndp::reply(frame, link.mac, |address| {
                    let address = IpAddr::V6(address);
                    let ours = answers.borrow().answers(address, &link.name);
                    asked.set(ours.then_some(address));
                    ours
                }))
            }
        };
        if let Some(address) = asked.get() {
            counters.count(address, |c| c.requests_received += 1);
        }
        match reply {
            Ok(frame) => match socket.send(&frame) {
                Ok(_) => {
                    if let Some(address) = asked.get() {
                        counters.count(address, |c| c.responses_sent += 1);
                    }
                }
                Err(e) => debug!(interface = %link.name, "layer 2: reply not sent: {e}"),
            },
            Err(why) => counters.drop_frame(why),
        }
    }
}

/// Announces each address on its interface at once and then every [`ANNOUNCE_EVERY`], as
/// long as this node still answers for it there.
async fn announce(
    new: Vec<(IpAddr, Arc<Link>)>,
    answers: watch::Receiver<Arc<AnswerSet>>,
    counters: Arc<Counters>,
) {
    let mut senders: HashMap<u32, PacketSocket> = HashMap::new();
    for (_, link) in &new {
        if senders.contains_key(&link.index) {
            continue;
        }
        match PacketSocket::sender(link.index) {
            Ok(socket) => {
                senders.insert(link.index, socket);
            }
            Err(e) => {
                warn!(interface = %link.name, "layer 2: cannot announce on {}: {e}", link.name)
            }
        }
    }
    for round in 0..ANNOUNCEMENTS {
        if round > 0 {
            tokio::time::sleep(ANNOUNCE_EVERY).await;
        }
        for (address, link) in &new {
            if !answers.borrow().answers(*address, &link.name) {
                continue;
            }
            let Some(socket) = senders.get(&link.index) else { continue };
            let frame = match address {
                IpAddr::V4(v4) => arp::announcement(*v4, link.mac),
                IpAddr::V6(v6) => ndp::announcement(*v6, link.mac),
            };
            match socket.send(&frame) {
                Ok(_) => counters.count(*address, |c| c.gratuitous_sent += 1),
                Err(e) => debug!(interface = %link.name, "layer 2: announcement not sent: {e}"),
            }
        }
    }
}
