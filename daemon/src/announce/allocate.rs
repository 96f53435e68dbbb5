//! Deterministic VIP allocation: a pure function of the config, so every node computes the same
//! addresses for a service without talking to the others.
//!
//! # Algorithm
//!
//! A service asks for one address (`ip_family_policy = "single-stack"`, the default) or one of
//! each family (`"require-dual-stack"`, `"prefer-dual-stack"`), as Kubernetes'
//! `spec.ipFamilyPolicy`. Within a pool, every family has its own slots, so the IPv4 and the
//! IPv6 addresses of a pool never compete.
//!
//! 1. **Manual addresses first.** Services are taken in `namespace/name` order. A service with
//!    manual addresses (`load_balancer_ip`, or `load_balancer_ips` with at most one per family)
//!    gets them all if one pool holds them all — its `address_pool` when named, else the first
//!    such pool by name — and no earlier service holds any of them; otherwise it gets none.
//!    Manual addresses are taken before any automatic one, so they always win.
//! 2. **Held addresses next.** A service without manual addresses that holds addresses already
//!    (`held_ips`: a Kubernetes Service's `status.loadBalancer.ingress`) keeps them, in
//!    `namespace/name` order, when one of its candidate pools (step 4) hands out every one of
//!    them, they are one per family it wants from that pool (step 3; `prefer-dual-stack` keeps
//!    one family when it holds only one), and none is taken by a manual address or an earlier
//!    service. MetalLB keeps a Service's address the same way
//!    ("the assigned LB IP is the end state of convergence"): without it, a new Service whose
//!    home slot is another's would move that one. Every node reads the same statuses, so
//!    they still compute the same answer; a node that has not seen the latest status yet
//!    computes what the writer computed before it wrote.
//! 3. **Families a pool gives a service.** The *pool's families* are the families of its
//!    ranges, in the order of their first range. The service's family order is its
//!    `ip_families` (primary first) if set, else the pool's families. Then:
//!    `single-stack` wants its first family, and the pool fits only if it has that family
//!    (unset `ip_families`: the family of the pool's first range, so every pool fits);
//!    `require-dual-stack` wants both families, and only pools with both fit (MetalLB);
//!    `prefer-dual-stack` wants whichever of the two families the pool has, so every pool fits.
//!    A pool without any address fits (and is full).
//! 4. **Candidate pools.** A service without manual addresses and with `address_pool` may use
//!    only that pool (naming a pool is an explicit request, so `auto_assign = false` pools serve
//!    it). Otherwise its candidates are the `auto_assign` pools whose `service_allocation` lets
//!    it in (namespace listed or matched by a namespace selector; service matched by a service
//!    selector): first the pools with a `service_allocation`, by ascending `priority` (unset
//!    last), then the pools without, each group by name — MetalLB's order. Pools that do not fit
//!    (step 3) are dropped; if none is left, the service gets no address, and the reason names
//!    the families it needs.
//! 5. **Slots.** A pool's addresses of one family, in the order written, form that family's
//!    slots `0..size`. A service's *home slot* for a family is `fnv1a64("namespace/name") mod
//!    size` (FNV-1a, 64 bit: fixed constants, so the result never changes with the Rust version,
//!    unlike `DefaultHasher`). The same hash serves both families.
//! 6. **Placement, round by round.** Round *r* places every still unplaced service in its *r*-th
//!    candidate pool, IPv4 first, then IPv6, each family among the services that want it there.
//!    Within a family, first every service whose home slot no other service of the round
//!    shares, and that is free, gets it; then the others, in `namespace/name` order, probe
//!    linearly from their home slot (wrapping) to the first free slot. With `avoid_buggy_ips`,
//!    IPv4 addresses ending in `.0` or `.255` are never handed out. Then per service: all wanted
//!    families placed, it is done; `prefer-dual-stack` with one family full keeps the other;
//!    `require-dual-stack` with one family full gives back the address it got. A service with
//!    no address goes on to its next candidate pool; after the last it is *exhausted*.
//!
//! Adding or removing one service therefore moves no other service unless one of its home slots
//! is the same as another service's (or a probe landed on it): every service that was at its
//! home slot stays there. Such services are reported as [`Collision`]s, one per family, and
//! `uplink check` prints them. A service that holds its addresses (step 2) is not moved even
//! then: the newcomer probes past it.
//!
//! # One more Service
//!
//! Every Kubernetes event is a new config, and a new Service is the common one. When the new
//! Service surely gets its manual addresses, or lands at home in its first candidate pool,
//! and moves no other, [`allocate_one_more`] gives [`allocate`]'s answer as the last
//! allocation plus that Service, without placing the others again. That holds when each
//! address it gets is held by no Service, every pool that has the address hands it out and is
//! not counted full without it, and the last allocation gave nothing back (a
//! `require-dual-stack` Service whose second family was full).
//!
//! Then the run with it is the run without it plus its placement. Addresses are only ever
//! taken (nothing given back), so an address free at the end was free throughout. Any Service
//! that reached it in the run without — at home, probing, in any pool that has it — would have
//! taken it (every such pool hands it out), so none did, and no other Service has that home
//! slot (it would hold the address, or have found the pool full). A probing Service finds a
//! pool full when the addresses held within it reach its capacity; were the newcomer's to tip
//! it, the pool would end full without it too. (A manual address that the pool never hands out
//! counts as held, which is how a pool can end full with a free address.) Anything else is
//! allocated in full. A test compares the two on thousands of random configs.
//!
//! # Holding what it was given
//!
//! A Service's status written back is a change of its own: the Service now holds (step 2)
//! the addresses it was given. A status change alone waits for the next event
//! (kubernetes/watch.rs), so every new Service's change carries the status of the one before
//! it, and placing every Service again for it took most of that event's allocation.
//! [`allocate_one_more`] takes such Services from the last allocation too, when each was given
//! all the families it wants in its first candidate pool, each at home, and every pool that
//! has one of its addresses hands it out and holds no more addresses than its capacity.
//!
//! Then the run where it holds them is the run where it did not, with its entry marked
//! `held`. Step 2 gives them to it: nothing took them before (a manual address or an earlier
//! holder that had one would have kept it from this Service in the last run too). Every
//! other Service meets them taken earlier than it did, and that changes nothing: one that
//! reached one of them while it was free would have taken it (every pool that has it hands
//! it out), and its home slot was nobody else's in its group (at home, so counted once), so
//! nobody's home phase changes. A prober that found room in a pool that has one of them
//! counts it held now, but its own address was not held yet either, so the count stays
//! below a capacity the final count does not pass. Anything else is allocated in full; the
//! random test covers this too.

use std::borrow::Borrow;
use std::collections::{BTreeMap, HashMap};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::Arc;

use serde::Serialize;

use crate::config::announce::{AddressRange, IpFamily, IpFamilyPolicy, Labels, Pool, Service};
use crate::config::selector::any_matches;

/// Upper bound on linear probing within one pool, so a huge, nearly full pool cannot stall.
const MAX_PROBES: u128 = 1 << 24;

/// FNV-1a, 64 bit (offset basis and prime from the FNV reference).
pub fn fnv1a64(bytes: &[u8]) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in bytes {
        hash ^= u64::from(*byte);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    hash
}

/// How a service got an address.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum How {
    /// `load_balancer_ip` / `load_balancer_ips`.
    Manual,
    /// Its home slot.
    Home,
    /// Its home slot was taken; it probed to the next free one.
    Probed,
    /// It held the address already (its status) and keeps it.
    Held,
}

/// One address of a service.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Address {
    pub address: IpAddr,
    pub how: How,
}

/// A service's addresses: all from one pool, at most one per family, primary family first.
/// Shared, not owned: the next allocation starts from a copy of the last one
/// ([`allocate_one_more`]), which is then a few counter increments per Service.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Assigned {
    pub pool: Arc<str>,
    pub addresses: Arc<[Address]>,
}

impl Assigned {
    /// The addresses alone, primary first.
    pub fn ips(&self) -> impl Iterator<Item = IpAddr> + '_ {
        self.addresses.iter().map(|a| a.address)
    }
}

/// Why a service has no address.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum AllocError {
    /// `address_pool` names a pool that does not exist.
    UnknownPool(String),
    /// A manual address is in no pool (or not in the named one).
    NotInPool { address: IpAddr, pool: Option<String> },
    /// The manual addresses are each in some pool, but no one pool holds them all.
    NotInOnePool { addresses: Vec<IpAddr> },
    /// A manual address is held by another service.
    AddressInUse { address: IpAddr, by: String },
    /// No pool may serve this service (auto-assign off, or `service_allocation` excludes it).
    NoPool,
    /// Pools may serve the service, but none has the families it needs.
    NoFamily { needs: Vec<IpFamily>, policy: IpFamilyPolicy, pools: Vec<String> },
    /// Every candidate pool is full.
    PoolExhausted { pools: Vec<String> },
}

impl std::fmt::Display for AllocError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::UnknownPool(pool) => write!(f, "address_pool \"{pool}\" does not exist"),
            Self::NotInPool { address, pool: Some(pool) } => {
                write!(f, "load balancer IP {address} is not in pool \"{pool}\"")
            }
            Self::NotInPool { address, pool: None } => {
                write!(f, "load balancer IP {address} is in no pool")
            }
            Self::NotInOnePool { addresses } => {
                let list: Vec<String> = addresses.iter().map(|a| a.to_string()).collect();
                write!(f, "load balancer IPs {} are not in one pool", list.join(" and "))
            }
            Self::AddressInUse { address, by } => write!(f, "{address} is already used by {by}"),
            Self::NoPool => f.write_str("no pool may serve this service"),
            Self::NoFamily { needs, policy, pools } => {
                let needs: Vec<String> = needs.iter().map(|n| n.to_string()).collect();
                let why = match policy {
                    IpFamilyPolicy::RequireDualStack => format!("ip_family_policy {policy}"),
                    _ => "ip_families".to_string(),
                };
                write!(
                    f,
                    "no candidate pool has {} addresses ({why}; candidates: {})",
                    needs.join(" and "),
                    pools.join(", ")
                )
            }
            Self::PoolExhausted { pools } => write!(f, "pool exhausted ({})", pools.join(", ")),
        }
    }
}

/// A service that did not get its home slot (in one family).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Collision {
    pub service: ServiceKey,
    pub pool: Arc<str>,
    pub home: IpAddr,
    /// Who holds the home slot (a service key), or why it is unusable.
    pub holder: Arc<str>,
    pub got: IpAddr,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Allocation {
    /// By service key (`namespace/name`). Hashed: every Service is put in and looked up
    /// several times at every change (a B-tree's string comparisons were most of that); shown
    /// in key order.
    #[serde(serialize_with = "in_order")]
    pub services: ByKey<Allocated>,
    pub collisions: Vec<Collision>,
    /// A `require-dual-stack` Service gave an address back (step 6): the one case where an
    /// address is taken and freed again, which [`allocate_one_more`] cannot see past.
    #[serde(skip)]
    gave_back: bool,
}

/// A Service's key (`namespace/name`): the Service's own, shared by its entries.
pub use crate::config::announce::ServiceKey;

/// A Service's addresses, or why it has none. The error is boxed: it is twice the size of
/// the addresses, and rare, where an entry is kept per Service (and copied with the
/// allocation at each new Service).
pub type Allocated = Result<Assigned, Box<AllocError>>;

/// A map by Service key.
pub type ByKey<V> = HashMap<ServiceKey, V, foldhash::fast::RandomState>;

/// A map's entries in key order: how the allocation is shown (JSON, `uplink check`).
fn sorted<V>(map: &ByKey<V>) -> Vec<(&ServiceKey, &V)> {
    let mut sorted: Vec<_> = map.iter().collect();
    sorted.sort_unstable_by(|a, b| a.0.cmp(b.0));
    sorted
}

fn in_order<V: Serialize, S: serde::Serializer>(
    map: &ByKey<V>,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    serializer.collect_map(sorted(map))
}

impl Allocation {
    /// The services' results in key order.
    pub fn results_in_key_order(&self) -> Vec<(&ServiceKey, &Allocated)> {
        sorted(&self.services)
    }

    /// The service's primary address.
    pub fn address_of(&self, key: &str) -> Option<IpAddr> {
        self.addresses_of(key).first().copied()
    }

    /// All of the service's addresses, primary first.
    pub fn addresses_of(&self, key: &str) -> Vec<IpAddr> {
        self.addresses(key).collect()
    }

    /// [`Allocation::addresses_of`] without making a list.
    pub fn addresses(&self, key: &str) -> impl Iterator<Item = IpAddr> + '_ {
        let assigned = self.services.get(key).and_then(|r| r.as_ref().ok());
        assigned.into_iter().flat_map(Assigned::ips)
    }
}

/// One range as numbers of one family.
#[derive(Debug, Clone, Copy)]
struct Span {
    v4: bool,
    lo: u128,
    hi: u128,
}

impl Span {
    fn of(range: &AddressRange) -> Option<Self> {
        let (v4, lo, hi) = match (range.first, range.last) {
            (IpAddr::V4(a), IpAddr::V4(b)) => {
                (true, u128::from(u32::from(a)), u128::from(u32::from(b)))
            }
            (IpAddr::V6(a), IpAddr::V6(b)) => (false, u128::from(a), u128::from(b)),
            _ => return None,
        };
        (lo <= hi).then_some(Self { v4, lo, hi })
    }

    fn family(&self) -> IpFamily {
        if self.v4 {
            IpFamily::Ipv4
        } else {
            IpFamily::Ipv6
        }
    }

    fn len(&self) -> u128 {
        self.hi.saturating_sub(self.lo).saturating_add(1)
    }

    fn address(&self, offset: u128) -> Option<IpAddr> {
        let n = self.lo.checked_add(offset).filter(|n| *n <= self.hi)?;
        Some(if self.v4 {
            IpAddr::V4(Ipv4Addr::from(u32::try_from(n).ok()?))
        } else {
            IpAddr::V6(Ipv6Addr::from(n))
        })
    }

    fn contains(&self, address: IpAddr) -> bool {
        match address {
            IpAddr::V4(a) if self.v4 => (self.lo..=self.hi).contains(&u128::from(u32::from(a))),
            IpAddr::V6(a) if !self.v4 => (self.lo..=self.hi).contains(&u128::from(a)),
            _ => false,
        }
    }

    /// How many addresses in the span end in `.0` or `.255` (IPv4 only).
    fn buggy_count(&self) -> u128 {
        if !self.v4 {
            return 0;
        }
        // Count of x in [0, n] with x % 256 == r.
        let upto = |n: Option<u128>, r: u128| match n {
            Some(n) => n.checked_sub(r).map_or(0, |d| (d / 256).saturating_add(1)),
            None => 0,
        };
        let below = self.lo.checked_sub(1);
        [0u128, 255].iter().map(|r| upto(Some(self.hi), *r).saturating_sub(upto(below, *r))).sum()
    }
}

/// True for IPv4 addresses ending in `.0` or `.255`.
pub fn is_buggy(address: IpAddr) -> bool {
    matches!(address, IpAddr::V4(a) if matches!(a.octets()[3], 0 | 255))
}

/// The families a pool has addresses of, in the order of their first range.
pub fn pool_families(pool: &Pool) -> Vec<IpFamily> {
    let mut out = Vec::new();
    for span in pool.addresses.iter().filter_map(Span::of) {
        if !out.contains(&span.family()) {
            out.push(span.family());
        }
    }
    out
}

/// The families `pool` gives `service`, primary first (step 3 of the module doc). Empty: the
/// pool does not fit the service.
fn wanted(pool_has: &[IpFamily], service: &Service) -> Vec<IpFamily> {
    let mut order: Vec<IpFamily> = if service.ip_families.is_empty() {
        pool_has.to_vec()
    } else {
        service.ip_families.to_vec()
    };
    match service.ip_family_policy {
        IpFamilyPolicy::SingleStack => {
            order.first().filter(|f| pool_has.contains(f)).map(|f| vec![*f]).unwrap_or_default()
        }
        IpFamilyPolicy::RequireDualStack | IpFamilyPolicy::PreferDualStack => {
            if let Some(first) = order.first().copied() {
                if !order.contains(&first.other()) {
                    order.push(first.other());
                }
            }
            let dual = service.ip_family_policy == IpFamilyPolicy::RequireDualStack;
            if dual && !order.iter().all(|f| pool_has.contains(f)) {
                return Vec::new();
            }
            order.retain(|f| pool_has.contains(f));
            order
        }
    }
}

/// How many addresses `pool` can hand out (both families; `.0`/`.255` left out with
/// `avoid_buggy_ips`), saturating: MetalLB's `metallb_allocator_addresses_total`.
pub fn pool_capacity(pool: &Pool) -> u128 {
    [IpFamily::Ipv4, IpFamily::Ipv6]
        .into_iter()
        .fold(0u128, |sum, family| sum.saturating_add(Slots::new(pool, family).capacity))
}

/// A pool's slot space in one family.
struct Slots<'a> {
    pool: &'a Pool,
    spans: Vec<Span>,
    size: u128,
    capacity: u128,
}

impl<'a> Slots<'a> {
    fn new(pool: &'a Pool, family: IpFamily) -> Self {
        let spans: Vec<Span> =
            pool.addresses.iter().filter_map(Span::of).filter(|s| s.family() == family).collect();
        let size = spans.iter().fold(0u128, |acc, s| acc.saturating_add(s.len()));
        let buggy = if pool.avoid_buggy_ips {
            spans.iter().fold(0u128, |acc, s| acc.saturating_add(s.buggy_count()))
        } else {
            0
        };
        Self { pool, spans, size, capacity: size.saturating_sub(buggy) }
    }

    fn address(&self, slot: u128) -> Option<IpAddr> {
        let mut rest = slot;
        for span in &self.spans {
            if rest < span.len() {
                return span.address(rest);
            }
            rest = rest.saturating_sub(span.len());
        }
        None
    }

    fn contains(&self, address: IpAddr) -> bool {
        self.spans.iter().any(|s| s.contains(address))
    }

    fn usable(&self, address: IpAddr) -> bool {
        !(self.pool.avoid_buggy_ips && is_buggy(address))
    }

    fn home(&self, key: &str) -> Option<u128> {
        (self.size > 0).then(|| u128::from(fnv1a64(key.as_bytes())) % self.size)
    }
}

/// A pool with its slots per family and the families it has.
struct PoolSlots<'a> {
    pool: &'a Pool,
    /// The pool's name as every [`Assigned`] of it holds it.
    name: Arc<str>,
    families: Vec<IpFamily>,
    v4: Slots<'a>,
    v6: Slots<'a>,
}

impl<'a> PoolSlots<'a> {
    fn new(pool: &'a Pool) -> Self {
        Self {
            pool,
            name: pool.name.as_str().into(),
            families: pool_families(pool),
            v4: Slots::new(pool, IpFamily::Ipv4),
            v6: Slots::new(pool, IpFamily::Ipv6),
        }
    }

    fn family(&self, family: IpFamily) -> &Slots<'a> {
        match family {
            IpFamily::Ipv4 => &self.v4,
            IpFamily::Ipv6 => &self.v6,
        }
    }

    fn contains(&self, address: IpAddr) -> bool {
        self.family(IpFamily::of(address)).contains(address)
    }

    /// Step 3: whether the pool may serve `service` at all.
    fn fits(&self, service: &Service) -> bool {
        self.families.is_empty() || !wanted(&self.families, service).is_empty()
    }
}

/// Whether `pool`'s `service_allocation` admits `service` (no `service_allocation`: everyone).
pub fn pool_admits(pool: &Pool, service: &Service) -> bool {
    let Some(alloc) = &pool.service_allocation else { return true };
    let mut namespace_labels = Labels::clone(&service.namespace_labels);
    namespace_labels
        .entry("kubernetes.io/metadata.name".to_string())
        .or_insert_with(|| service.namespace().to_string());
    let namespace_ok = (alloc.namespaces.is_empty() && alloc.namespace_selectors.is_empty())
        || alloc.namespaces.iter().any(|namespace| **namespace == *service.namespace())
        || alloc.namespace_selectors.iter().any(|s| s.matches(&namespace_labels));
    namespace_ok && any_matches(&alloc.service_selectors, &service.labels)
}

/// The pools a service without a manual address may draw from, in the order they are tried.
fn candidates(pools: &[PoolSlots<'_>], service: &Service) -> Result<Vec<usize>, AllocError> {
    let list: Vec<usize> = if let Some(name) = &service.address_pool {
        let index = pools
            .iter()
            .position(|p| *p.pool.name == **name)
            .ok_or_else(|| AllocError::UnknownPool(name.to_string()))?;
        vec![index]
    } else {
        let mut list: Vec<usize> = (0..pools.len())
            .filter(|i| {
                pools.get(*i).is_some_and(|p| p.pool.auto_assign && pool_admits(p.pool, service))
            })
            .collect();
        list.sort_by_key(|i| {
            let pool = pools.get(*i).map(|p| p.pool);
            let alloc = pool.and_then(|p| p.service_allocation.as_ref());
            (
                alloc.is_none(),
                alloc.and_then(|a| a.priority).unwrap_or(i32::MAX),
                pool.map(|p| p.name.clone()).unwrap_or_default(),
            )
        });
        list
    };
    if list.is_empty() {
        return Err(AllocError::NoPool);
    }
    let fitting: Vec<usize> =
        list.iter().copied().filter(|i| pools.get(*i).is_some_and(|p| p.fits(service))).collect();
    if fitting.is_empty() {
        let needs = match service.ip_family_policy {
            IpFamilyPolicy::RequireDualStack => vec![IpFamily::Ipv4, IpFamily::Ipv6],
            _ => service.ip_families.first().copied().into_iter().collect(),
        };
        let pools = list.iter().filter_map(|i| pools.get(*i)).map(|p| p.pool.name.clone());
        return Err(AllocError::NoFamily {
            needs,
            policy: service.ip_family_policy,
            pools: pools.collect(),
        });
    }
    Ok(fitting)
}

/// Step 1: the pool that holds all of a service's manual addresses.
fn manual_pool(pools: &[PoolSlots<'_>], service: &Service) -> Result<Arc<str>, AllocError> {
    let addresses = &service.load_balancer_ips;
    if let Some(name) = &service.address_pool {
        let pool = pools
            .iter()
            .find(|p| *p.pool.name == **name)
            .ok_or_else(|| AllocError::UnknownPool(name.to_string()))?;
        return match addresses.iter().find(|a| !pool.contains(**a)) {
            Some(address) => {
                Err(AllocError::NotInPool { address: *address, pool: Some(name.to_string()) })
            }
            None => Ok(pool.name.clone()),
        };
    }
    if let Some(address) = addresses.iter().find(|a| !pools.iter().any(|p| p.contains(**a))) {
        return Err(AllocError::NotInPool { address: *address, pool: None });
    }
    let mut holders: Vec<&Arc<str>> = pools
        .iter()
        .filter(|p| addresses.iter().all(|a| p.contains(*a)))
        .map(|p| &p.name)
        .collect();
    holders.sort_unstable();
    holders
        .first()
        .map(|name| Arc::clone(name))
        .ok_or_else(|| AllocError::NotInOnePool { addresses: addresses.to_vec() })
}

/// Step 2: the addresses `service` holds (its status), when they are still its: one of its
/// candidate pools hands out every one of them, they are one per family the Service wants
/// from that pool (`prefer-dual-stack`: one or both), and none is taken (by a manual
/// address, or by a Service earlier in key order that holds it too). Anything else places
/// the Service as one without (step 6).
fn kept<'k>(
    pools: &[PoolSlots<'_>],
    candidates: &[usize],
    (key, service): (&'k ServiceKey, &Service),
    taken: &mut Taken<'k>,
) -> Option<Assigned> {
    let held = &service.held_ips;
    if held.is_empty() || held.iter().any(|a| taken.contains_key(a)) {
        return None;
    }
    let hands_out = |pool: &PoolSlots<'_>, address: IpAddr| {
        let slots = pool.family(IpFamily::of(address));
        slots.contains(address) && slots.usable(address)
    };
    let pool = candidates
        .iter()
        .filter_map(|i| pools.get(*i))
        .find(|pool| held.iter().all(|a| hands_out(pool, *a)))?;
    let wanted = wanted(&pool.families, service);
    let addresses: Vec<Address> = wanted
        .iter()
        .filter_map(|family| held.iter().find(|a| IpFamily::of(**a) == *family))
        .map(|a| Address { address: *a, how: How::Held })
        .collect();
    // Every held address is one of a wanted family; all of them, but with
    // `prefer-dual-stack` the one family it got when the other was full (MetalLB does not
    // move a Service to give it the second).
    let complete = addresses.len() == wanted.len()
        || (service.ip_family_policy == IpFamilyPolicy::PreferDualStack && !addresses.is_empty());
    if !complete || addresses.len() != held.len() {
        return None;
    }
    for address in addresses.iter() {
        taken.insert(address.address, key);
    }
    Some(Assigned { pool: pool.name.clone(), addresses: addresses.into() })
}

/// The services with their keys, in key order. The key is the Service's own, not made at
/// every comparison: with thousands of Services a key per comparison was a third of the work.
fn in_key_order<S: Borrow<Service>>(services: &[S]) -> Vec<(ServiceKey, &Service)> {
    let mut order: Vec<(ServiceKey, &Service)> = services
        .iter()
        .map(|s| {
            let service: &Service = s.borrow();
            (service.key.clone(), service)
        })
        .collect();
    order.sort_by(|a, b| a.0.cmp(&b.0));
    order
}

/// Allocates addresses to every service. Pure and deterministic: see the module doc.
pub fn allocate<S: Borrow<Service>>(pools: &[Pool], services: &[S]) -> Allocation {
    let mut out = Allocation::default();
    out.services.reserve(services.len());
    // The slots and the results use the keys too.
    let order = in_key_order(services);
    let slots: Vec<PoolSlots<'_>> = pools.iter().map(PoolSlots::new).collect();
    let mut taken: Taken<'_> = Taken::default();

    // 1. Manual addresses.
    for (key, service) in order.iter().filter(|(_, s)| !s.load_balancer_ips.is_empty()) {
        let result = manual_pool(&slots, service).and_then(|pool| {
            if let Some((address, by)) =
                service.load_balancer_ips.iter().find_map(|a| taken.get(a).map(|by| (*a, by)))
            {
                return Err(AllocError::AddressInUse { address, by: by.to_string() });
            }
            for address in &service.load_balancer_ips {
                taken.insert(*address, key);
            }
            let addresses =
                service.load_balancer_ips.iter().map(|a| Address { address: *a, how: How::Manual });
            Ok(Assigned { pool, addresses: addresses.collect() })
        });
        out.services.insert(key.clone(), result.map_err(Box::new));
    }

    // 2. Held addresses, kept while still valid; 3.-6. automatic addresses, round by round.
    let mut pending: Vec<(&ServiceKey, &Service, Vec<usize>)> = Vec::new();
    for (key, service) in order.iter().filter(|(_, s)| s.load_balancer_ips.is_empty()) {
        match candidates(&slots, service) {
            Ok(list) => match kept(&slots, &list, (key, service), &mut taken) {
                Some(assigned) => {
                    out.services.insert(key.clone(), Ok(assigned));
                }
                None => pending.push((key, service, list)),
            },
            Err(error) => {
                out.services.insert(key.clone(), Err(Box::new(error)));
            }
        }
    }
    let mut round = 0usize;
    while !pending.is_empty() {
        let mut groups: BTreeMap<usize, Vec<(&ServiceKey, &Service)>> = BTreeMap::new();
        let mut next = Vec::new();
        for (key, service, list) in pending {
            match list.get(round) {
                Some(pool) => {
                    groups.entry(*pool).or_default().push((key, service));
                    next.push((key, service, list));
                }
                None => {
                    let pools = list
                        .iter()
                        .filter_map(|i| slots.get(*i))
                        .map(|p| p.pool.name.clone())
                        .collect();
                    let error = AllocError::PoolExhausted { pools };
                    out.services.insert(key.clone(), Err(Box::new(error)));
                }
            }
        }
        for (pool, services) in groups {
            let Some(pool) = slots.get(pool) else { continue };
            place_in_pool(pool, &services, &mut taken, &mut out);
        }
        pending = next.into_iter().filter(|(key, _, _)| !out.services.contains_key(*key)).collect();
        round = round.saturating_add(1);
    }
    out.collisions.sort_by(|a, b| a.service.cmp(&b.service).then(a.home.cmp(&b.home)));
    out
}

/// Whether [`allocate`] gives for `pools` and `services` what it gave for `before`: the same
/// pools, and the same Services asking the same. An endpoint's change is a new config (every
/// Kubernetes event is a reload) whose allocation is the last one's: at 10,000 Services this
/// check is a pointer comparison per Service where the allocation took 15 ms.
pub fn asks_the_same(
    before: (&[Pool], &[Arc<Service>]),
    pools: &[Pool],
    services: &[Arc<Service>],
) -> bool {
    let (pools_before, services_before) = before;
    pools == pools_before
        && services.len() == services_before.len()
        && services
            .iter()
            .zip(services_before)
            .all(|(now, then)| Arc::ptr_eq(now, then) || service_asks_the_same(now, then))
}

/// Whether two versions of a Service ask the allocation the same: every field but those it
/// never reads.
fn service_asks_the_same(now: &Service, then: &Service) -> bool {
    now.held_ips == then.held_ips && asks_the_same_but_held(now, then)
}

/// [`service_asks_the_same`] but for the addresses it holds (its status). Taken apart in
/// full, so that a field added to `Service` must be put on one side or the other here.
fn asks_the_same_but_held(now: &Service, then: &Service) -> bool {
    let Service {
        key,
        labels,
        namespace_labels,
        address_pool,
        load_balancer_ips,
        held_ips: _,
        ip_family_policy,
        ip_families,
        traffic_policy: _,
        endpoints: _,
        announce_without_endpoints: _,
        health: _,
        sources: _,
    } = now;
    *key == then.key
        && *labels == then.labels
        && *namespace_labels == then.namespace_labels
        && *address_pool == then.address_pool
        && *load_balancer_ips == then.load_balancer_ips
        && *ip_family_policy == then.ip_family_policy
        && *ip_families == then.ip_families
}

/// [`allocate`] for `pools` and `services` when they are `before`'s pools and Services, some
/// of them now holding (their status written back) just what the last allocation gave them,
/// plus at most one Service that gets its manual addresses or lands at home in its first
/// candidate pool, and moves no other (module doc, "One more Service"): the last
/// allocation with those changes, without placing the others again. `None` when that does
/// not surely hold; the caller then allocates in full.
pub fn allocate_one_more(
    before: (&Allocation, &[Pool], &[Arc<Service>]),
    pools: &[Pool],
    services: &[Arc<Service>],
) -> Option<Allocation> {
    let (allocation, pools_before, services_before) = before;
    if allocation.gave_back || pools != pools_before {
        return None;
    }
    let difference = difference(services_before, services, allocation)?;
    if difference.holding.len() > MOST_HOLDING {
        return None;
    }
    let slots: Vec<PoolSlots<'_>> = pools.iter().map(PoolSlots::new).collect();
    let mut out = allocation.clone();
    for service in difference.holding {
        hold_as_given(&slots, service, &mut out)?;
    }
    let Some(added) = difference.added else { return Some(out) };
    let key: ServiceKey = added.key.clone();
    // One that holds addresses already (a status) is placed in full: rare for a new Service.
    if out.services.contains_key(&key) || !added.held_ips.is_empty() {
        return None;
    }
    let result = if added.load_balancer_ips.is_empty() {
        match candidates(&slots, added) {
            // A Service no pool serves takes nothing from anyone.
            Err(error) => Err(error),
            Ok(list) => {
                let pool = slots.get(*list.first()?)?;
                let addresses = at_home_alone((pool, &slots), (&key, added), &out)?;
                Ok(Assigned { pool: pool.name.clone(), addresses: addresses.into() })
            }
        }
    } else {
        manual_alone(&slots, added, &out)?
    };
    out.services.insert(key, result.map_err(Box::new));
    Some(out)
}

/// The most Services holding what they were given that [`allocate_one_more`] takes from the
/// last allocation: each is checked with a walk over every address held, so past this many
/// (the statuses of a burst of new Services) the full allocation is quicker.
const MOST_HOLDING: usize = 64;

/// How a list of Services differs from the last one, when [`allocate_one_more`] can follow.
struct Difference<'s> {
    /// The one Service put in.
    added: Option<&'s Service>,
    /// Services whose only change is that they hold just the addresses the last allocation
    /// gave them.
    holding: Vec<&'s Service>,
}

/// The [`Difference`] of `now` from `before` (allocated as `allocation`): at most one Service
/// put in, the others asking the same or holding what they were given; `None` otherwise.
fn difference<'s>(
    before: &[Arc<Service>],
    now: &'s [Arc<Service>],
    allocation: &Allocation,
) -> Option<Difference<'s>> {
    let may_add = match now.len().checked_sub(before.len())? {
        0 => false,
        1 => true,
        _ => return None,
    };
    let mut out = Difference { added: None, holding: Vec::new() };
    let mut before = before.iter().peekable();
    for service in now {
        match before.peek() {
            Some(then) if Arc::ptr_eq(service, then) || service_asks_the_same(service, then) => {}
            Some(then)
                if asks_the_same_but_held(service, then)
                    && holds_what_it_was_given(service, allocation) =>
            {
                out.holding.push(service);
            }
            _ if may_add && out.added.is_none() => {
                out.added = Some(service);
                continue;
            }
            _ => return None,
        }
        before.next();
    }
    before.next().is_none().then_some(out)
}

/// Whether `service` holds just the addresses `allocation` gave it, in any order.
fn holds_what_it_was_given(service: &Service, allocation: &Allocation) -> bool {
    let given = allocation.addresses_of(&service.key);
    !given.is_empty()
        && given.len() == service.held_ips.len()
        && given.iter().all(|address| service.held_ips.contains(address))
}

/// `allocation` (the full allocation of the last Services) with `service` now holding just the
/// addresses it was given, when that surely changes nothing but its own entry (module doc,
/// "Holding what it was given"); `None` otherwise.
fn hold_as_given(
    pools: &[PoolSlots<'_>],
    service: &Service,
    allocation: &mut Allocation,
) -> Option<()> {
    // Step 1 places a Service with manual addresses, which never reads what it holds.
    if !service.load_balancer_ips.is_empty() {
        return Some(());
    }
    let key: ServiceKey = service.key.clone();
    let given = allocation.services.get(&key)?.as_ref().ok()?;
    let list = candidates(pools, service).ok()?;
    let first = pools.get(*list.first()?)?;
    let at_home = given.addresses.iter().all(|a| a.how == How::Home);
    if *given.pool != *first.pool.name
        || !at_home
        || given.addresses.len() != wanted(&first.families, service).len()
    {
        return None;
    }
    let fits = |address: IpAddr| {
        pools_with(pools, address, allocation)
            .is_some_and(|(_, within)| within.iter().all(|(slots, used)| *used <= slots.capacity))
    };
    if !given.ips().all(fits) {
        return None;
    }
    // Its first candidate pool hands out all it holds, so step 2 keeps them from that pool.
    let kept = kept(pools, &list, (&key, service), &mut Taken::default())?;
    // At home, it had no collisions to drop.
    allocation.services.insert(key, Ok(kept));
    Some(())
}

/// The addresses `service` (of `key`) gets at home in `pool`, one per family it wants there,
/// when each is surely its alone (module doc, "One more Service"); `None` otherwise.
fn at_home_alone(
    (pool, pools): (&PoolSlots<'_>, &[PoolSlots<'_>]),
    (key, service): (&str, &Service),
    before: &Allocation,
) -> Option<Vec<Address>> {
    let wanted = wanted(&pool.families, service);
    if wanted.is_empty() {
        return None;
    }
    let mut addresses = Vec::with_capacity(wanted.len());
    for family in wanted {
        let slots = pool.family(family);
        let address = slots.home(key).and_then(|home| slots.address(home))?;
        if !free_everywhere(pools, address, before) {
            return None;
        }
        addresses.push(Address { address, how: How::Home });
    }
    Some(addresses)
}

/// Step 1 for `service` alone: its manual addresses when they are surely its (held by no
/// Service, no pool that has one full without it), or the error that takes nothing from
/// anyone; `None` otherwise.
fn manual_alone(
    pools: &[PoolSlots<'_>],
    service: &Service,
    before: &Allocation,
) -> Option<Result<Assigned, AllocError>> {
    let pool = match manual_pool(pools, service) {
        Ok(pool) => pool,
        Err(error) => return Some(Err(error)),
    };
    if !service.load_balancer_ips.iter().all(|a| free_everywhere(pools, *a, before)) {
        return None;
    }
    let addresses =
        service.load_balancer_ips.iter().map(|a| Address { address: *a, how: How::Manual });
    Some(Ok(Assigned { pool, addresses: addresses.collect() }))
}

/// Whether `address` is held by no Service of `before`, and every pool that has it hands it
/// out (else a Service may have reached it without taking it, and its collision names the
/// address's holder) and is not counted full without it (every address held within it
/// counts, a manual one never handed out too).
fn free_everywhere(pools: &[PoolSlots<'_>], address: IpAddr, before: &Allocation) -> bool {
    pools_with(pools, address, before).is_some_and(|(held, within)| {
        !held && within.iter().all(|(slots, used)| *used < slots.capacity)
    })
}

/// For the pools (of `address`'s family) that have `address`, when each hands it out: how
/// many addresses `allocation` holds within each, and whether it holds `address`. One walk
/// over the held addresses for all.
fn pools_with<'p, 'a>(
    pools: &'p [PoolSlots<'a>],
    address: IpAddr,
    allocation: &Allocation,
) -> Option<(bool, Vec<(&'p Slots<'a>, u128)>)> {
    let family = IpFamily::of(address);
    let mut within: Vec<(&Slots<'_>, u128)> = pools
        .iter()
        .map(|p| p.family(family))
        .filter(|s| s.contains(address))
        .map(|slots| (slots, 0))
        .collect();
    if !within.iter().all(|(slots, _)| slots.usable(address)) {
        return None;
    }
    let mut held = false;
    let ips = allocation.services.values().filter_map(|r| r.as_ref().ok()).flat_map(Assigned::ips);
    for ip in ips {
        held |= ip == address;
        for (slots, used) in within.iter_mut() {
            if slots.contains(ip) {
                *used = used.saturating_add(1);
            }
        }
    }
    Some((held, within))
}

/// The addresses handed out so far, with the key of the Service holding each.
type Taken<'k> = HashMap<IpAddr, &'k ServiceKey, foldhash::fast::RandomState>;

/// Places `services` (in key order) in one pool, family by family; a service that gets none
/// of its families here stays unplaced (the caller tries its next candidate).
fn place_in_pool<'k>(
    pool: &PoolSlots<'_>,
    services: &[(&'k ServiceKey, &Service)],
    taken: &mut Taken<'k>,
    out: &mut Allocation,
) {
    let wants: Vec<(&ServiceKey, Vec<IpFamily>, IpFamilyPolicy)> = services
        .iter()
        .map(|(key, s)| (*key, wanted(&pool.families, s), s.ip_family_policy))
        .collect();
    // What each key got, IPv4 then IPv6.
    let mut got: HashMap<&str, (Option<Address>, Option<Address>), foldhash::fast::RandomState> =
        HashMap::default();
    for family in [IpFamily::Ipv4, IpFamily::Ipv6] {
        let keys: Vec<&ServiceKey> =
            wants.iter().filter(|(_, w, _)| w.contains(&family)).map(|(k, _, _)| *k).collect();
        for (key, address) in place(pool, family, &keys, taken, &mut out.collisions) {
            let slot = got.entry(key).or_default();
            match family {
                IpFamily::Ipv4 => slot.0 = Some(address),
                IpFamily::Ipv6 => slot.1 = Some(address),
            }
        }
    }
    for (key, wanted, policy) in wants {
        let found = got.get(&**key);
        let addresses: Vec<Address> = wanted
            .iter()
            .filter_map(|family| match family {
                IpFamily::Ipv4 => found.and_then(|slot| slot.0),
                IpFamily::Ipv6 => found.and_then(|slot| slot.1),
            })
            .collect();
        let complete = addresses.len() == wanted.len();
        if addresses.is_empty() {
            continue;
        }
        if !complete && policy == IpFamilyPolicy::RequireDualStack {
            // One family is full here: give the other back and try the next pool for both.
            out.gave_back = true;
            for a in &addresses {
                taken.remove(&a.address);
                out.collisions.retain(|c| !(c.service == *key && c.got == a.address));
            }
            continue;
        }
        let assigned = Assigned { pool: pool.name.clone(), addresses: addresses.into() };
        out.services.insert(key.clone(), Ok(assigned));
    }
}

/// Places `keys` (in key order) in one family of a pool: uncontested home slots first, then
/// probing. Returns what each placed key got.
fn place<'k>(
    pool: &PoolSlots<'_>,
    family: IpFamily,
    keys: &[&'k ServiceKey],
    taken: &mut Taken<'k>,
    collisions: &mut Vec<Collision>,
) -> Vec<(&'k str, Address)> {
    let slots = pool.family(family);
    let mut placed = Vec::new();
    let mut used = taken.keys().filter(|a| slots.contains(**a)).count() as u128;
    let homes: Vec<(&ServiceKey, Option<u128>)> =
        keys.iter().map(|k| (*k, slots.home(k))).collect();
    let mut home_count: HashMap<u128, usize, foldhash::fast::RandomState> = HashMap::default();
    for home in homes.iter().filter_map(|(_, h)| *h) {
        let count = home_count.entry(home).or_default();
        *count = count.saturating_add(1);
    }
    let mut probing = Vec::new();
    for (key, home) in homes {
        let address = home.and_then(|h| slots.address(h));
        match (home, address) {
            (Some(h), Some(address))
                if home_count.get(&h) == Some(&1)
                    && !taken.contains_key(&address)
                    && slots.usable(address) =>
            {
                taken.insert(address, key);
                used = used.saturating_add(1);
                placed.push((&**key, Address { address, how: How::Home }));
            }
            _ => probing.push((key, home)),
        }
    }
    for (key, home) in probing {
        let Some(home) = home else { continue };
        if used >= slots.capacity {
            continue; // Full: the caller tries the next candidate pool.
        }
        let home_address = slots.address(home);
        let limit = slots.size.min(MAX_PROBES);
        let mut step: u128 = 0;
        while step < limit {
            let slot = home.checked_add(step).map_or(0, |s| s % slots.size);
            step = step.saturating_add(1);
            let Some(address) = slots.address(slot) else { continue };
            if taken.contains_key(&address) || !slots.usable(address) {
                continue;
            }
            let holder = match home_address {
                Some(h) if h == address => None,
                Some(h) => Some(taken.get(&h).map(|by| Arc::clone(by)).unwrap_or_else(|| {
                    if slots.usable(h) {
                        "another service of the same home slot".into()
                    } else {
                        format!("{h} is never handed out (avoid_buggy_ips)").into()
                    }
                })),
                None => None,
            };
            let how = match (holder, home_address) {
                (Some(holder), Some(home)) => {
                    collisions.push(Collision {
                        service: key.clone(),
                        pool: pool.name.clone(),
                        home,
                        holder,
                        got: address,
                    });
                    How::Probed
                }
                _ => How::Home,
            };
            taken.insert(address, key);
            used = used.saturating_add(1);
            placed.push((&**key, Address { address, how }));
            break;
        }
    }
    placed
}

/// Builders shared by the unit tests of the `announce` modules.
#[cfg(test)]
pub(crate) mod tests_support {
    use std::time::Duration;

    use crate::config::announce::{
        AddressRange, Advertisement, HealthCheck, Pool, ProbeKind, Service, TrafficPolicy,
    };

    /// A small deterministic generator (xorshift64*): the random configs of the tests are the
    /// same in every run, so a failure names its case.
    pub(crate) struct Dice(pub u64);

    impl Dice {
        pub(crate) fn next(&mut self) -> u64 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
        }
        pub(crate) fn below(&mut self, n: u64) -> u64 {
            self.next() % n
        }
        pub(crate) fn chance(&mut self, percent: u64) -> bool {
            self.below(100) < percent
        }
        pub(crate) fn pick<'a, T>(&mut self, from: &'a [T]) -> &'a T {
            &from[self.below(from.len() as u64) as usize]
        }
    }

    /// A TCP health check on `port`, rising and falling at the first probe, every second.
    pub(crate) fn tcp_check(port: u16) -> HealthCheck {
        HealthCheck {
            probe: ProbeKind::Tcp { port },
            interval: Duration::from_secs(1),
            timeout: Duration::from_secs(1),
            rise: 1,
            fall: 1,
        }
    }

    pub(crate) fn range(text: &str) -> AddressRange {
        match text.split_once('-') {
            Some((a, b)) => {
                AddressRange { first: a.parse().unwrap(), last: b.parse().unwrap(), cidr: None }
            }
            None => {
                let net: ipnet::IpNet = text.parse().unwrap();
                AddressRange { first: net.network(), last: net.broadcast(), cidr: Some(net) }
            }
        }
    }

    pub(crate) fn pool(name: &str, ranges: &[&str]) -> Pool {
        Pool {
            name: name.into(),
            labels: Default::default(),
            addresses: ranges.iter().map(|r| range(r)).collect(),
            auto_assign: true,
            avoid_buggy_ips: false,
            service_allocation: None,
            sources: Default::default(),
        }
    }

    /// A `BGPAdvertisement` of every pool to every peer from every node.
    pub(crate) fn advertisement(name: &str) -> Advertisement {
        Advertisement {
            name: name.into(),
            ip_address_pools: vec![],
            ip_address_pool_selectors: vec![],
            aggregation_length: 32,
            aggregation_length_v6: 128,
            communities: vec![],
            local_pref: None,
            peers: vec![],
            node_selectors: vec![],
            sources: Default::default(),
        }
    }

    pub(crate) fn service(namespace: &str, name: &str) -> Service {
        Service {
            key: crate::config::announce::service_key(namespace, name),
            labels: Default::default(),
            namespace_labels: Default::default(),
            address_pool: None,
            load_balancer_ips: smallvec::smallvec![],
            held_ips: smallvec::smallvec![],
            ip_family_policy: Default::default(),
            ip_families: Default::default(),
            traffic_policy: TrafficPolicy::Cluster,
            endpoints: std::sync::Arc::new([]),
            announce_without_endpoints: true,
            health: None,
            sources: Default::default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::tests_support::{pool, service, Dice};
    use super::*;
    use crate::config::announce::{service_key, ServiceAllocation};
    use crate::config::selector::LabelSelector;

    fn ip(text: &str) -> IpAddr {
        text.parse().unwrap()
    }

    #[test]
    fn fnv1a64_reference_vectors() {
        // From the FNV reference test suite.
        assert_eq!(fnv1a64(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a64(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a64(b"foobar"), 0x8594_4171_f739_67e8);
    }

    #[test]
    fn allocation_is_deterministic_and_order_independent() {
        let pools = vec![pool("p", &["10.0.0.0/24"])];
        let services: Vec<Service> = (0..40).map(|i| service("ns", &format!("svc{i}"))).collect();
        let first = allocate(&pools, &services);
        let mut reversed = services.clone();
        reversed.reverse();
        assert_eq!(allocate(&pools, &reversed), first);
        let addresses: std::collections::BTreeSet<IpAddr> =
            first.services.values().map(|r| r.as_ref().unwrap().addresses[0].address).collect();
        assert_eq!(addresses.len(), 40, "every service gets its own address");
        // The home slot is the documented hash.
        let a = first.services.get("ns/svc0").unwrap().as_ref().unwrap().addresses[0];
        if a.how == How::Home {
            let slot = fnv1a64(b"ns/svc0") % 256;
            assert_eq!(a.address, IpAddr::V4(Ipv4Addr::new(10, 0, 0, slot as u8)));
        }
    }

    /// Two names of `ns` with the same home slot in a pool of `size` IPv4 slots, the first
    /// sorting before the second.
    fn same_home(size: u64) -> (String, String) {
        let home = |name: &str| fnv1a64(format!("ns/{name}").as_bytes()) % size;
        let names: Vec<String> = (0..200).map(|i| format!("s{i:03}")).collect();
        for (i, later) in names.iter().enumerate() {
            if let Some(earlier) = names[..i].iter().find(|n| home(n) == home(later)) {
                return (earlier.clone(), later.clone());
            }
        }
        panic!("no two of 200 names share a home slot among {size}");
    }

    fn held(mut s: Service, addresses: &[&str]) -> Service {
        s.held_ips = addresses.iter().map(|a| ip(a)).collect();
        s
    }

    #[test]
    fn a_held_address_stays_when_a_service_of_the_same_home_slot_comes() {
        let pools = vec![pool("p", &["10.0.0.0/26"])];
        let (newcomer, holder) = same_home(64);
        let first = allocate(&pools, &[service("ns", &holder)]);
        let got = first.addresses_of(&format!("ns/{holder}"));
        assert_eq!(
            first.services[&*format!("ns/{holder}")].as_ref().unwrap().addresses[0].how,
            How::Home
        );
        // Without its status the holder moves: the newcomer sorts first and takes the slot.
        let moved = allocate(&pools, &[service("ns", &holder), service("ns", &newcomer)]);
        assert_ne!(moved.addresses_of(&format!("ns/{holder}")), got, "the case needs a move");
        // With it (what the API's status says once written), the newcomer probes past it.
        let kept = allocate(
            &pools,
            &[held(service("ns", &holder), &[&got[0].to_string()]), service("ns", &newcomer)],
        );
        assert_eq!(kept.addresses_of(&format!("ns/{holder}")), got);
        let holder_result = kept.services[&*format!("ns/{holder}")].as_ref().unwrap();
        assert_eq!(holder_result.addresses[0].how, How::Held);
        let theirs = kept.services[&*format!("ns/{newcomer}")].as_ref().unwrap();
        assert_eq!(theirs.addresses[0].how, How::Probed);
        assert_ne!(theirs.addresses[0].address, got[0]);
        assert!(kept.collisions.iter().any(|c| &*c.service == format!("ns/{newcomer}").as_str()
            && &*c.holder == format!("ns/{holder}").as_str()));
        // And the one whose home it is keeps its own once it holds it: nothing moves back.
        let both = allocate(
            &pools,
            &[
                held(service("ns", &holder), &[&got[0].to_string()]),
                held(service("ns", &newcomer), &[&theirs.addresses[0].address.to_string()]),
            ],
        );
        assert_eq!(both.addresses_of(&format!("ns/{holder}")), got);
        assert_eq!(both.addresses_of(&format!("ns/{newcomer}")), vec![theirs.addresses[0].address]);
    }

    #[test]
    fn a_held_address_that_is_no_longer_valid_is_placed_again() {
        let pools = vec![pool("p", &["10.0.0.0/24"]), pool("q", &["10.9.0.0/24"])];
        let home = allocate(&pools[..1], &[service("ns", "a")]);
        let home = home.addresses_of("ns/a");
        let placed = |s: Service, others: &[Service]| {
            let mut all = others.to_vec();
            all.push(s);
            let out = allocate(&pools, &all);
            let result = out.services.get("ns/a").unwrap().as_ref().unwrap().clone();
            (result.ips().collect::<Vec<_>>(), result.addresses[0].how)
        };
        // Kept: in its candidate pool, free.
        assert_eq!(
            placed(held(service("ns", "a"), &["10.0.0.77"]), &[]),
            (vec![ip("10.0.0.77")], How::Held)
        );
        // In no pool (the pool changed): placed again, at home.
        assert_eq!(placed(held(service("ns", "a"), &["10.5.0.1"]), &[]), (home.clone(), How::Home));
        // In a pool it may not use: its address_pool names the other.
        let mut named = held(service("ns", "a"), &["10.9.0.5"]);
        named.address_pool = Some("p".into());
        assert_eq!(placed(named, &[]).0, home);
        // Taken by a manual address.
        let mut manual = service("ns", "m");
        manual.load_balancer_ips = smallvec::smallvec![ip("10.0.0.77")];
        assert_eq!(placed(held(service("ns", "a"), &["10.0.0.77"]), &[manual]).0, home);
        // Held by a Service earlier in key order too: the earlier keeps it.
        let earlier = held(service("ns", "0-earlier"), &["10.0.0.77"]);
        assert_eq!(placed(held(service("ns", "a"), &["10.0.0.77"]), &[earlier]).0, home);
        // Two addresses where the Service wants one family: placed again.
        let v6 = vec![pool("p", &["10.0.0.0/24", "2001:db8::/120"])];
        let out = allocate(&v6, &[held(service("ns", "a"), &["10.0.0.77", "2001:db8::7"])]);
        assert_eq!(out.services["ns/a"].as_ref().unwrap().addresses[0].how, How::Home);
    }

    #[test]
    fn a_changed_status_asks_again_and_a_new_service_with_one_is_placed_in_full() {
        let pools = vec![pool("p", &["10.0.0.0/24"])];
        let before: Vec<Arc<Service>> = vec![Arc::new(service("ns", "a"))];
        let now: Vec<Arc<Service>> = vec![Arc::new(held(service("ns", "a"), &["10.0.0.9"]))];
        assert!(!asks_the_same((&pools, &before), &pools, &now));
        let allocation = allocate(&pools, &before);
        let mut more = before.clone();
        more.push(Arc::new(held(service("ns", "b"), &["10.0.0.10"])));
        assert_eq!(allocate_one_more((&allocation, &pools, &before), &pools, &more), None);
        more.pop();
        more.push(Arc::new(service("ns", "b")));
        assert!(allocate_one_more((&allocation, &pools, &before), &pools, &more).is_some());
    }

    #[test]
    fn adding_a_service_moves_only_colliding_ones() {
        let pools = vec![pool("p", &["10.0.0.0/22"])];
        let services: Vec<Service> = (0..30).map(|i| service("ns", &format!("s{i}"))).collect();
        let before = allocate(&pools, &services);
        let mut more = services.clone();
        more.push(service("ns", "newcomer"));
        let after = allocate(&pools, &more);
        let slots = Slots::new(&pools[0], IpFamily::Ipv4);
        let newcomer_home = slots.address(slots.home("ns/newcomer").unwrap()).unwrap();
        for (key, result) in &before.services {
            let old: Vec<IpAddr> = result.as_ref().unwrap().ips().collect();
            let new: Vec<IpAddr> =
                after.services.get(key).unwrap().as_ref().unwrap().ips().collect();
            if old != new {
                assert_eq!(old, vec![newcomer_home], "{key} moved without a collision");
            }
        }
        assert!(after.services.get("ns/newcomer").unwrap().is_ok());
    }

    #[test]
    fn collisions_are_reported_and_resolved_by_probing() {
        // A pool of 2 slots and 2 services: whatever the hashes, both get one address, and if
        // they share a home one of them is reported.
        let pools = vec![pool("tiny", &["192.0.2.10-192.0.2.11"])];
        let services = vec![service("a", "x"), service("b", "y")];
        let out = allocate(&pools, &services);
        let got: Vec<IpAddr> =
            out.services.values().map(|r| r.as_ref().unwrap().addresses[0].address).collect();
        assert_ne!(got[0], got[1]);
        let same_home = fnv1a64(b"a/x") % 2 == fnv1a64(b"b/y") % 2;
        assert_eq!(out.collisions.len(), usize::from(same_home));
        // Five services whose keys hash anywhere in a 1-slot pool: one gets it, four collide
        // and find the pool exhausted.
        let pools = vec![pool("one", &["192.0.2.1/32"])];
        let services: Vec<Service> = (0..5).map(|i| service("ns", &format!("s{i}"))).collect();
        let out = allocate(&pools, &services);
        assert_eq!(out.services.values().filter(|r| r.is_ok()).count(), 1);
        let exhausted = out
            .services
            .values()
            .filter(|r| matches!(r.as_ref().map_err(|e| &**e), Err(AllocError::PoolExhausted { pools }) if pools == &vec!["one".to_string()]))
            .count();
        assert_eq!(exhausted, 4);
    }

    #[test]
    fn manual_addresses_win_and_conflicts_are_named() {
        let pools = vec![pool("p", &["10.0.0.0/30"]), {
            let mut p = pool("manual", &["10.9.0.0/24"]);
            p.auto_assign = false;
            p
        }];
        let mut a = service("ns", "a");
        a.load_balancer_ips = smallvec::smallvec![ip("10.9.0.7")];
        let mut b = service("ns", "b");
        b.load_balancer_ips = smallvec::smallvec![ip("10.9.0.7")];
        let mut c = service("ns", "c");
        c.load_balancer_ips = smallvec::smallvec![ip("192.168.1.1")];
        let mut d = service("ns", "d");
        d.load_balancer_ips = smallvec::smallvec![ip("10.0.0.1")];
        d.address_pool = Some("manual".into());
        let out = allocate(&pools, &[a, b, c, d]);
        assert_eq!(
            out.services["ns/a"],
            Ok(Assigned {
                pool: "manual".into(),
                addresses: vec![Address { address: ip("10.9.0.7"), how: How::Manual }].into()
            })
        );
        assert_eq!(
            out.services["ns/b"],
            Err(Box::new(AllocError::AddressInUse { address: ip("10.9.0.7"), by: "ns/a".into() }))
        );
        assert_eq!(
            out.services["ns/c"],
            Err(Box::new(AllocError::NotInPool { address: ip("192.168.1.1"), pool: None }))
        );
        assert_eq!(
            out.services["ns/d"],
            Err(Box::new(AllocError::NotInPool {
                address: ip("10.0.0.1"),
                pool: Some("manual".into())
            }))
        );
    }

    #[test]
    fn manual_address_is_never_given_to_an_automatic_service() {
        // One-slot pool: the manual holder keeps it, the automatic one is exhausted.
        let pools = vec![pool("p", &["10.0.0.5/32"])];
        let mut manual = service("z", "manual");
        manual.load_balancer_ips = smallvec::smallvec![ip("10.0.0.5")];
        let out = allocate(&pools, &[service("a", "auto"), manual]);
        assert_eq!(out.address_of("z/manual"), Some(ip("10.0.0.5")));
        assert!(matches!(
            out.services["a/auto"].as_ref().map_err(|e| &**e),
            Err(AllocError::PoolExhausted { .. })
        ));
    }

    #[test]
    fn auto_assign_false_serves_only_explicit_requests() {
        let mut reserved = pool("reserved", &["10.1.0.0/24"]);
        reserved.auto_assign = false;
        let pools = vec![reserved];
        let mut asks = service("ns", "asks");
        asks.address_pool = Some("reserved".into());
        let out = allocate(&pools, &[service("ns", "plain"), asks]);
        assert_eq!(out.services["ns/plain"], Err(Box::new(AllocError::NoPool)));
        assert_eq!(&*out.services["ns/asks"].as_ref().unwrap().pool, "reserved");
        let mut unknown = service("ns", "typo");
        unknown.address_pool = Some("nope".into());
        assert_eq!(
            allocate(&pools, &[unknown]).services["ns/typo"],
            Err(Box::new(AllocError::UnknownPool("nope".into())))
        );
    }

    #[test]
    fn pools_are_tried_by_priority_then_spill_over() {
        let with_priority = |name: &str, ranges: &[&str], priority: Option<i32>| {
            let mut p = pool(name, ranges);
            p.service_allocation = Some(ServiceAllocation { priority, ..Default::default() });
            p
        };
        let pools = vec![
            pool("plain", &["10.3.0.0/24"]),
            with_priority("low", &["10.2.0.0/24"], Some(50)),
            with_priority("high", &["10.1.0.1/32"], Some(10)),
        ];
        let out = allocate(&pools, &[service("ns", "a"), service("ns", "b"), service("ns", "c")]);
        let by_pool =
            |p: &str| out.services.values().filter(|r| &*r.as_ref().unwrap().pool == p).count();
        // The one-address high-priority pool takes one service, the next priority the rest;
        // the pool without service_allocation is last.
        assert_eq!((by_pool("high"), by_pool("low"), by_pool("plain")), (1, 2, 0));
    }

    #[test]
    fn service_allocation_filters_namespaces_and_services() {
        let mut p = pool("team", &["10.5.0.0/24"]);
        p.service_allocation = Some(ServiceAllocation {
            priority: None,
            namespaces: vec!["allowed".into()],
            namespace_selectors: vec![LabelSelector {
                match_labels: [("tier".to_string(), "gold".to_string())].into(),
                match_expressions: vec![],
            }],
            service_selectors: vec![],
        });
        let mut by_label = service("other", "labelled");
        Arc::make_mut(&mut by_label.namespace_labels).insert("tier".into(), "gold".into());
        let out = allocate(
            &[p.clone()],
            &[service("allowed", "a"), service("other", "b"), by_label.clone()],
        );
        assert!(out.services["allowed/a"].is_ok());
        assert_eq!(out.services["other/b"], Err(Box::new(AllocError::NoPool)));
        assert!(out.services["other/labelled"].is_ok());
        p.service_allocation = Some(ServiceAllocation {
            service_selectors: vec![LabelSelector {
                match_labels: [("app".to_string(), "web".to_string())].into(),
                match_expressions: vec![],
            }],
            ..Default::default()
        });
        let mut web = service("x", "web");
        web.labels.insert("app".into(), "web".into());
        let out = allocate(&[p], &[web, service("x", "db")]);
        assert!(out.services["x/web"].is_ok());
        assert_eq!(out.services["x/db"], Err(Box::new(AllocError::NoPool)));
    }

    #[test]
    fn ipv6_pools_and_ranges() {
        let pools = vec![pool("v6", &["2001:db8::/120", "2001:db8:1::10-2001:db8:1::1f"])];
        let services: Vec<Service> = (0..20).map(|i| service("ns", &format!("s{i}"))).collect();
        let out = allocate(&pools, &services);
        for result in out.services.values() {
            let address = result.as_ref().unwrap().addresses[0].address;
            assert!(pools[0].addresses.iter().any(|r| Span::of(r).unwrap().contains(address)));
            assert!(address.is_ipv6());
        }
        // A /64 has more slots than u64 — the hash still lands inside it.
        let big = vec![pool("big", &["2001:db8:2::/64"])];
        let out = allocate(&big, &[service("ns", "x")]);
        let address = out.address_of("ns/x").unwrap();
        assert!("2001:db8:2::/64".parse::<ipnet::IpNet>().unwrap().contains(&address));
    }

    #[test]
    fn a_pools_capacity_counts_both_families_and_leaves_out_buggy_ips() {
        let mut p = pool("p", &["192.0.2.0/24", "2001:db8::/126"]);
        assert_eq!(pool_capacity(&p), 256 + 4);
        p.avoid_buggy_ips = true;
        assert_eq!(pool_capacity(&p), 254 + 4);
    }

    #[test]
    fn avoid_buggy_ips_skips_dot_zero_and_dot_255() {
        let mut p = pool("p", &["10.0.0.255-10.0.1.0"]);
        p.avoid_buggy_ips = true;
        let span = Span::of(&p.addresses[0]).unwrap();
        assert_eq!(span.buggy_count(), 2);
        assert_eq!(Slots::new(&p, IpFamily::Ipv4).capacity, 0);
        let out = allocate(&[p], &[service("ns", "a")]);
        assert!(matches!(
            out.services["ns/a"].as_ref().map_err(|e| &**e),
            Err(AllocError::PoolExhausted { .. })
        ));

        let mut p = pool("p", &["10.0.0.0/24"]);
        p.avoid_buggy_ips = true;
        assert_eq!(Slots::new(&p, IpFamily::Ipv4).capacity, 254);
        let services: Vec<Service> = (0..254).map(|i| service("ns", &format!("s{i}"))).collect();
        let out = allocate(&[p], &services);
        for result in out.services.values() {
            assert!(!is_buggy(result.as_ref().unwrap().addresses[0].address));
        }
    }

    #[test]
    fn exhaustion_of_every_candidate() {
        let pools = vec![pool("a", &["10.0.0.1/32"]), pool("b", &["10.0.0.2/32"])];
        let out = allocate(&pools, &[service("ns", "1"), service("ns", "2"), service("ns", "3")]);
        assert_eq!(out.services.values().filter(|r| r.is_ok()).count(), 2);
        assert!(out.services.values().any(|r| r
            == &Err(Box::new(AllocError::PoolExhausted { pools: vec!["a".into(), "b".into()] }))));
    }

    fn dual(namespace: &str, name: &str, policy: IpFamilyPolicy) -> Service {
        let mut s = service(namespace, name);
        s.ip_family_policy = policy;
        s
    }

    fn families_of(assigned: &Assigned) -> Vec<IpFamily> {
        assigned.addresses.iter().map(|a| IpFamily::of(a.address)).collect()
    }

    #[test]
    fn dual_stack_gets_one_address_per_family_from_per_family_slots() {
        let pools = vec![pool("mixed", &["10.0.0.0/24", "2001:db8::/120"])];
        let services: Vec<Service> = (0..30)
            .map(|i| dual("ns", &format!("d{i}"), IpFamilyPolicy::RequireDualStack))
            .collect();
        let out = allocate(&pools, &services);
        let mut reversed = services.clone();
        reversed.reverse();
        assert_eq!(allocate(&pools, &reversed), out, "a pure function of the config");
        let mut seen = std::collections::BTreeSet::new();
        for (key, result) in &out.services {
            let assigned = result.as_ref().unwrap();
            // Unset ip_families: the pool's family order, IPv4 (its first range) first.
            assert_eq!(families_of(assigned), vec![IpFamily::Ipv4, IpFamily::Ipv6], "{key}");
            for a in assigned.addresses.iter() {
                assert!(seen.insert(a.address), "{} handed out twice", a.address);
                // The home slot is the same hash, modulo the family's own slot count.
                if a.how == How::Home {
                    let slot = fnv1a64(key.as_bytes()) % 256;
                    let want = match a.address {
                        IpAddr::V4(_) => IpAddr::V4(Ipv4Addr::new(10, 0, 0, slot as u8)),
                        IpAddr::V6(_) => {
                            let base: Ipv6Addr = "2001:db8::".parse().unwrap();
                            IpAddr::V6(Ipv6Addr::from(u128::from(base) + u128::from(slot)))
                        }
                    };
                    assert_eq!(a.address, want, "{key}");
                }
            }
        }
        assert_eq!(seen.len(), 60);
        // Per family: a dual-stack service's IPv6 collisions are its own, reported per family.
        for c in &out.collisions {
            assert_eq!(IpFamily::of(c.home), IpFamily::of(c.got));
        }
    }

    #[test]
    fn single_stack_takes_one_family_of_a_mixed_pool() {
        let pools = vec![
            pool("v6-first", &["2001:db8::/120", "10.0.0.0/24"]),
            pool("v4-first", &["10.1.0.0/24", "2001:db8:1::/120"]),
        ];
        let mut implicit6 = service("ns", "implicit6");
        implicit6.address_pool = Some("v6-first".into());
        let mut implicit4 = service("ns", "implicit4");
        implicit4.address_pool = Some("v4-first".into());
        let mut explicit = service("ns", "explicit");
        explicit.address_pool = Some("v4-first".into());
        explicit.ip_families = [IpFamily::Ipv6].into_iter().collect();
        let out = allocate(&pools, &[implicit6, implicit4, explicit]);
        let family = |key: &str| families_of(out.services[key].as_ref().unwrap());
        assert_eq!(family("ns/implicit6"), vec![IpFamily::Ipv6], "first range's family");
        assert_eq!(family("ns/implicit4"), vec![IpFamily::Ipv4], "first range's family");
        assert_eq!(family("ns/explicit"), vec![IpFamily::Ipv6], "ip_families decides");
    }

    #[test]
    fn require_dual_stack_skips_single_family_pools_and_prefer_falls_back() {
        let with_priority = |name: &str, ranges: &[&str], priority: i32| {
            let mut p = pool(name, ranges);
            p.service_allocation =
                Some(ServiceAllocation { priority: Some(priority), ..Default::default() });
            p
        };
        // The IPv4-only pool is tried first.
        let pools = vec![
            with_priority("v4only", &["10.0.0.0/24"], 1),
            with_priority("both", &["10.9.0.0/24", "2001:db8:9::/120"], 2),
        ];
        let require = dual("ns", "require", IpFamilyPolicy::RequireDualStack);
        let prefer = dual("ns", "prefer", IpFamilyPolicy::PreferDualStack);
        let out = allocate(&pools, &[require.clone(), prefer.clone()]);
        let got = out.services["ns/require"].as_ref().unwrap();
        assert_eq!((&*got.pool, got.addresses.len()), ("both", 2), "v4only is no candidate");
        let got = out.services["ns/prefer"].as_ref().unwrap();
        assert_eq!(&*got.pool, "v4only", "prefer takes the first pool, single stack");
        assert_eq!(families_of(got), vec![IpFamily::Ipv4]);

        // No pool with both families: require gets a reason that says so; prefer gets IPv4.
        let pools = vec![pool("v4only", &["10.0.0.0/24"])];
        let out = allocate(&pools, &[require, prefer]);
        let error = *out.services["ns/require"].clone().unwrap_err();
        assert_eq!(
            error,
            AllocError::NoFamily {
                needs: vec![IpFamily::Ipv4, IpFamily::Ipv6],
                policy: IpFamilyPolicy::RequireDualStack,
                pools: vec!["v4only".into()],
            }
        );
        assert_eq!(
            error.to_string(),
            "no candidate pool has IPv4 and IPv6 addresses (ip_family_policy require-dual-stack; candidates: v4only)"
        );
        assert_eq!(families_of(out.services["ns/prefer"].as_ref().unwrap()), vec![IpFamily::Ipv4]);

        // Single stack asking for a family no pool has.
        let mut v6 = service("ns", "v6");
        v6.ip_families = [IpFamily::Ipv6].into_iter().collect();
        let out = allocate(&pools, &[v6]);
        assert!(
            matches!(out.services["ns/v6"].as_ref().map_err(|e| &**e), Err(AllocError::NoFamily { needs, .. }) if needs == &vec![IpFamily::Ipv6])
        );
    }

    #[test]
    fn ip_families_order_puts_the_primary_first() {
        let pools = vec![pool("mixed", &["10.0.0.0/24", "2001:db8::/120"])];
        let mut s = dual("ns", "v6-primary", IpFamilyPolicy::PreferDualStack);
        s.ip_families = [IpFamily::Ipv6, IpFamily::Ipv4].into();
        let out = allocate(&pools, &[s]);
        let got = out.services["ns/v6-primary"].as_ref().unwrap();
        assert_eq!(families_of(got), vec![IpFamily::Ipv6, IpFamily::Ipv4]);
        assert!(out.address_of("ns/v6-primary").unwrap().is_ipv6());
        assert_eq!(out.addresses_of("ns/v6-primary").len(), 2);
    }

    #[test]
    fn a_full_family_sends_require_on_and_prefer_keeps_the_other() {
        // One IPv6 address for two dual-stack services of each policy.
        let pools = vec![
            pool("small", &["10.0.0.0/24", "2001:db8::1/128"]),
            pool("spare", &["10.1.0.0/24", "2001:db8:1::/120"]),
        ];
        let a = dual("ns", "a", IpFamilyPolicy::RequireDualStack);
        let b = dual("ns", "b", IpFamilyPolicy::RequireDualStack);
        let out = allocate(&pools, &[a, b]);
        let pools_used: Vec<&str> =
            out.services.values().map(|r| &*r.as_ref().unwrap().pool).collect();
        assert_eq!(pools_used.iter().filter(|p| **p == "small").count(), 1);
        assert_eq!(pools_used.iter().filter(|p| **p == "spare").count(), 1);
        for result in out.services.values() {
            assert_eq!(result.as_ref().unwrap().addresses.len(), 2);
        }
        // The address given back in "small" is not reported as held.
        let moved =
            out.services.iter().find(|(_, r)| &*r.as_ref().unwrap().pool == "spare").unwrap();
        assert!(
            out.collisions.iter().all(|c| &c.service != moved.0 || &*c.pool != "small"),
            "{:?}",
            out.collisions
        );

        let pools = vec![pool("small", &["10.0.0.0/24", "2001:db8::1/128"])];
        let out = allocate(
            &pools,
            &[
                dual("ns", "a", IpFamilyPolicy::PreferDualStack),
                dual("ns", "b", IpFamilyPolicy::PreferDualStack),
            ],
        );
        let mut counts: Vec<usize> =
            out.services.values().map(|r| r.as_ref().unwrap().addresses.len()).collect();
        counts.sort_unstable();
        assert_eq!(counts, vec![1, 2], "one gets both, the other keeps its IPv4 address");
    }

    #[test]
    fn manual_dual_stack_pair() {
        let pools = vec![
            pool("mixed", &["10.0.0.0/24", "2001:db8::/120"]),
            pool("v6", &["2001:db8:6::/120"]),
        ];
        let mut pair = dual("ns", "pair", IpFamilyPolicy::RequireDualStack);
        pair.load_balancer_ips = smallvec::smallvec![ip("10.0.0.7"), ip("2001:db8::7")];
        let mut thief = dual("ns", "thief", IpFamilyPolicy::RequireDualStack);
        thief.load_balancer_ips = smallvec::smallvec![ip("10.0.0.8"), ip("2001:db8::7")];
        let mut split = dual("ns", "split", IpFamilyPolicy::RequireDualStack);
        split.load_balancer_ips = smallvec::smallvec![ip("10.0.0.9"), ip("2001:db8:6::9")];
        let mut stray = dual("ns", "stray", IpFamilyPolicy::PreferDualStack);
        stray.load_balancer_ips = smallvec::smallvec![ip("10.0.0.10"), ip("2001:db8:ffff::1")];
        let out = allocate(&pools, &[pair, thief, split, stray, service("ns", "auto")]);
        assert_eq!(
            out.services["ns/pair"],
            Ok(Assigned {
                pool: "mixed".into(),
                addresses: vec![
                    Address { address: ip("10.0.0.7"), how: How::Manual },
                    Address { address: ip("2001:db8::7"), how: How::Manual },
                ]
                .into()
            })
        );
        assert_eq!(
            out.services["ns/thief"],
            Err(Box::new(AllocError::AddressInUse {
                address: ip("2001:db8::7"),
                by: "ns/pair".into()
            }))
        );
        assert_eq!(
            out.services["ns/split"],
            Err(Box::new(AllocError::NotInOnePool {
                addresses: vec![ip("10.0.0.9"), ip("2001:db8:6::9")]
            }))
        );
        assert_eq!(
            out.services["ns/stray"],
            Err(Box::new(AllocError::NotInPool { address: ip("2001:db8:ffff::1"), pool: None }))
        );
        // A service that lost its manual request holds nothing: 10.0.0.8 stays free for others.
        assert_ne!(out.address_of("ns/auto"), Some(ip("10.0.0.7")));
    }

    #[test]
    fn adding_a_dual_stack_service_moves_only_colliding_ones() {
        let pools = vec![pool("mixed", &["10.0.0.0/22", "2001:db8::/118"])];
        let mut services: Vec<Service> = (0..30)
            .map(|i| {
                let policy = match i % 3 {
                    0 => IpFamilyPolicy::SingleStack,
                    1 => IpFamilyPolicy::PreferDualStack,
                    _ => IpFamilyPolicy::RequireDualStack,
                };
                dual("ns", &format!("s{i}"), policy)
            })
            .collect();
        let before = allocate(&pools, &services);
        services.push(dual("ns", "newcomer", IpFamilyPolicy::RequireDualStack));
        let after = allocate(&pools, &services);
        let newcomer = after.addresses_of("ns/newcomer");
        assert_eq!(newcomer.len(), 2);
        let homes: Vec<IpAddr> = [IpFamily::Ipv4, IpFamily::Ipv6]
            .iter()
            .map(|f| {
                let slots = Slots::new(&pools[0], *f);
                slots.address(slots.home("ns/newcomer").unwrap()).unwrap()
            })
            .collect();
        for (key, result) in &before.services {
            let old: Vec<IpAddr> = result.as_ref().unwrap().ips().collect();
            let new = after.addresses_of(key);
            assert_eq!(old.len(), new.len(), "{key}");
            for (o, n) in old.iter().zip(&new) {
                if o != n {
                    assert!(homes.contains(o), "{key} moved from {o} without a collision");
                }
            }
        }
    }

    /// A new config whose Services changed only in what the allocation never reads keeps the
    /// last allocation; any change it reads makes a new one.
    #[test]
    fn the_allocation_is_kept_only_while_nothing_it_reads_changed() {
        use crate::config::announce::{Endpoint, TrafficPolicy};
        let pools = vec![pool("vips", &["10.0.0.0/28"])];
        let services: Vec<Arc<Service>> =
            ["a", "b", "c"].iter().map(|n| Arc::new(service("shop", n))).collect();
        let before = (pools.as_slice(), services.as_slice());
        let with = |change: &dyn Fn(&mut Service)| {
            let mut changed = services.clone();
            let mut second = changed[1].as_ref().clone();
            change(&mut second);
            changed[1] = Arc::new(second);
            changed
        };
        let endpoint = Endpoint { address: ip("10.128.0.9"), node: "wk1".into() };
        let kept = [
            with(&|_| {}),
            with(&|s| s.endpoints = Arc::new([endpoint.clone()])),
            with(&|s| s.traffic_policy = TrafficPolicy::Local),
            with(&|s| {
                s.sources = [std::path::Path::new("kubernetes:Service/shop/b").into()].into()
            }),
        ];
        for now in &kept {
            assert!(asks_the_same(before, &pools, now));
            assert_eq!(allocate(&pools, now), allocate(&pools, &services));
        }
        let mut added = services.clone();
        added.push(Arc::new(service("shop", "d")));
        let mut other_pool = pools.clone();
        other_pool[0].addresses = vec![tests_support::range("10.0.1.0/28")];
        let made_again = [
            (pools.clone(), with(&|s| s.address_pool = Some("other".into()))),
            (pools.clone(), with(&|s| s.load_balancer_ips = smallvec::smallvec![ip("10.0.0.3")])),
            (pools.clone(), with(&|s| s.ip_family_policy = IpFamilyPolicy::RequireDualStack)),
            (pools.clone(), with(&|s| s.ip_families = [IpFamily::Ipv6].into_iter().collect())),
            (pools.clone(), with(&|s| s.key = service_key(s.namespace(), "z"))),
            (
                pools.clone(),
                with(&|s| {
                    s.key = service_key("other", s.name());
                }),
            ),
            (
                pools.clone(),
                with(&|s| {
                    s.labels.insert("team".into(), "shop".into());
                }),
            ),
            (
                pools.clone(),
                with(&|s| {
                    Arc::make_mut(&mut s.namespace_labels).insert("team".into(), "shop".into());
                }),
            ),
            (pools.clone(), added),
            (other_pool, services.clone()),
        ];
        for (pools, now) in &made_again {
            assert!(!asks_the_same(before, pools, now));
        }
    }

    /// Pools of a few addresses that overlap each other (and the `.255` edge), with both
    /// families, auto-assign off, namespaces and priorities here and there.
    fn random_pools(dice: &mut Dice) -> Vec<Pool> {
        let count = 1 + dice.below(3);
        (0..count)
            .map(|i| {
                let mut ranges = Vec::new();
                for _ in 0..1 + dice.below(2) {
                    let first = 240 + dice.below(16);
                    let last = (first + dice.below(12)).min(255);
                    ranges.push(format!("10.0.0.{first}-10.0.0.{last}"));
                }
                if dice.chance(50) {
                    let first = dice.below(8);
                    ranges
                        .push(format!("2001:db8::{first:x}-2001:db8::{:x}", first + dice.below(8)));
                }
                let refs: Vec<&str> = ranges.iter().map(String::as_str).collect();
                let mut p = pool(&format!("p{i}"), &refs);
                p.auto_assign = dice.chance(85);
                p.avoid_buggy_ips = dice.chance(30);
                if dice.chance(30) {
                    p.service_allocation = Some(ServiceAllocation {
                        priority: dice.chance(50).then(|| dice.below(3) as i32),
                        namespaces: if dice.chance(50) { vec!["a".into()] } else { vec![] },
                        namespace_selectors: vec![],
                        service_selectors: vec![],
                    });
                }
                p
            })
            .collect()
    }

    fn random_service(dice: &mut Dice, name: &str, pools: &[Pool]) -> Service {
        let namespace: &&str = dice.pick(&["a", "b", "c"]);
        let mut s = service(namespace, name);
        if dice.chance(15) {
            s.address_pool = Some(if dice.chance(90) {
                dice.pick(pools).name.as_str().into()
            } else {
                "nowhere".into()
            });
        }
        if dice.chance(10) {
            s.load_balancer_ips =
                smallvec::smallvec![ip(&format!("10.0.0.{}", 240 + dice.below(16)))];
        }
        s.ip_family_policy = *dice.pick(&[
            IpFamilyPolicy::SingleStack,
            IpFamilyPolicy::SingleStack,
            IpFamilyPolicy::PreferDualStack,
            IpFamilyPolicy::RequireDualStack,
        ]);
        s.ip_families = dice
            .pick(&[vec![], vec![], vec![IpFamily::Ipv6], vec![IpFamily::Ipv6, IpFamily::Ipv4]])
            .iter()
            .copied()
            .collect();
        s
    }

    /// Random pools, up to a dozen random Services, and their allocation.
    fn random_allocated(dice: &mut Dice) -> (Vec<Pool>, Vec<Arc<Service>>, Allocation) {
        let pools = random_pools(dice);
        let count = dice.below(12);
        let services: Vec<Arc<Service>> =
            (0..count).map(|i| Arc::new(random_service(dice, &format!("s{i}"), &pools))).collect();
        let before = allocate(&pools, &services);
        (pools, services, before)
    }

    /// The allocation made from the last one for one more Service is the full allocation,
    /// in every random config where it is made, and it is made often enough to mean it.
    /// A Service that holds what an allocation gave it keeps it, and no address is given
    /// twice, whichever Services hold already (a write-back under way); once every Service
    /// holds, no address moves. (While only some hold, one not yet written can move once in
    /// a collision chain: one contested with a holder may now take its home slot first, before
    /// a prober from elsewhere. The nodes then write what they computed and agree.)
    #[test]
    fn holding_what_it_got_keeps_it_and_once_all_hold_nothing_moves() {
        let mut dice = Dice(0x2545_f491_4f6c_dd1d);
        let mut held_some = 0;
        for case in 0..4000 {
            let pools = random_pools(&mut dice);
            let count = dice.below(12);
            let services: Vec<Service> =
                (0..count).map(|i| random_service(&mut dice, &format!("s{i}"), &pools)).collect();
            let before = allocate(&pools, &services);
            let holding: Vec<Service> = services
                .iter()
                .map(|s| {
                    let mut s = s.clone();
                    if s.load_balancer_ips.is_empty() {
                        s.held_ips = before.addresses_of(&s.key).into();
                    }
                    s
                })
                .collect();
            held_some += usize::from(holding.iter().any(|s| !s.held_ips.is_empty()));
            // Some hold (a write-back under way): each of them keeps what it holds, and no
            // address is anyone else's.
            let some: Vec<Service> = services
                .iter()
                .zip(&holding)
                .map(|(s, h)| if dice.below(2) == 0 { h.clone() } else { s.clone() })
                .collect();
            let partly = allocate(&pools, &some);
            for service in some.iter().filter(|s| !s.held_ips.is_empty()) {
                assert_eq!(
                    partly.addresses_of(&service.key),
                    service.held_ips.to_vec(),
                    "case {case}"
                );
            }
            let given: Vec<IpAddr> = partly
                .services
                .values()
                .filter_map(|r| r.as_ref().ok())
                .flat_map(Assigned::ips)
                .collect();
            let distinct: std::collections::BTreeSet<&IpAddr> = given.iter().collect();
            assert_eq!(distinct.len(), given.len(), "case {case}: an address given twice");
            let after = allocate(&pools, &holding);
            for service in &services {
                let key = &service.key;
                if before.addresses_of(key).is_empty() {
                    continue; // In a full pool one without may get one now: moves nobody.
                }
                assert_eq!(
                    after.addresses_of(key),
                    before.addresses_of(key),
                    "case {case}, {key}: {pools:#?}\n{holding:#?}\n{before:#?}\n{after:#?}"
                );
            }
        }
        assert!(held_some > 2000, "{held_some}");
    }

    /// Services that now hold what the last allocation gave them (their statuses written
    /// back), with or without one more Service: the allocation made from the last one is the
    /// full allocation wherever it is made, and it is made often enough to mean it.
    #[test]
    fn holding_what_it_was_given_from_the_last_allocation_is_the_full_allocation() {
        let mut dice = Dice(0x6a09_e667_f3bc_c908);
        let (mut made, mut made_holding, mut declined) = (0, 0, 0);
        // Enough cases to meet the rarer ways a holder moves others (a pool full sooner,
        // a group it was in before its own).
        for case in 0..30_000 {
            let (pools, services, before) = random_allocated(&mut dice);
            let count = services.len() as u64;
            let mut holding = 0;
            let mut now: Vec<Arc<Service>> = services
                .iter()
                .map(|s| {
                    let given = before.addresses_of(&s.key);
                    if given.is_empty() || dice.chance(40) {
                        return s.clone();
                    }
                    let mut s = (**s).clone();
                    s.held_ips = given.into();
                    if dice.chance(20) {
                        s.held_ips.reverse();
                    }
                    holding += usize::from(s.load_balancer_ips.is_empty());
                    Arc::new(s)
                })
                .collect();
            if dice.chance(50) {
                let at = dice.below(count + 1) as usize;
                now.insert(at, Arc::new(random_service(&mut dice, "new", &pools)));
            }
            let last = (&before, pools.as_slice(), services.as_slice());
            match allocate_one_more(last, &pools, &now) {
                Some(quick) => {
                    made += 1;
                    made_holding += usize::from(holding > 0);
                    let full = allocate(&pools, &now);
                    assert_eq!(quick, full, "case {case}: {pools:#?}\n{now:#?}\n{before:#?}");
                }
                None => declined += 1,
            }
        }
        assert!(
            made > 8000 && made_holding > 4000 && declined > 4000,
            "made {made} ({made_holding} holding), declined {declined}"
        );
        // Holding anything else is not taken from the last allocation.
        let pools = vec![pool("p", &["10.0.0.0/24"])];
        let services: Vec<Arc<Service>> =
            ["x", "y"].iter().map(|n| Arc::new(service("a", n))).collect();
        let before = allocate(&pools, &services);
        let last = (&before, pools.as_slice(), services.as_slice());
        let mut other = (*services[0]).clone();
        other.held_ips = before.addresses_of("a/y").into();
        let now = vec![Arc::new(other), services[1].clone()];
        assert!(allocate_one_more(last, &pools, &now).is_none());
        // Nor many holding at once (each at home in a wide pool): allocated in full.
        let pools = vec![pool("p", &["10.0.0.0/16"])];
        let services: Vec<Arc<Service>> =
            (0..=MOST_HOLDING).map(|i| Arc::new(service("a", &format!("s{i}")))).collect();
        let before = allocate(&pools, &services);
        let last = (&before, pools.as_slice(), services.as_slice());
        let holding: Vec<Arc<Service>> = services
            .iter()
            .map(|s| {
                let mut s = (**s).clone();
                s.held_ips = before.addresses_of(&s.key).into();
                Arc::new(s)
            })
            .collect();
        assert!(allocate_one_more(last, &pools, &holding).is_none());
        // One of them (at home) holding is taken from the last allocation.
        let at_home = |s: &Arc<Service>| {
            let given = before.services.get(&*s.key).and_then(|r| r.as_ref().ok());
            given.is_some_and(|a| a.addresses.iter().all(|a| a.how == How::Home))
        };
        let one = services.iter().position(at_home).unwrap();
        let mut now = services.clone();
        now[one] = holding[one].clone();
        assert!(allocate_one_more(last, &pools, &now).is_some());
    }

    #[test]
    fn one_more_service_from_the_last_allocation_is_the_full_allocation() {
        let mut dice = Dice(0x9e37_79b9_7f4a_7c15);
        let (mut made, mut declined) = (0, 0);
        for case in 0..4000 {
            let (pools, services, before) = random_allocated(&mut dice);
            let count = services.len() as u64;
            let mut more = services.clone();
            let at = dice.below(count + 1) as usize;
            more.insert(at, Arc::new(random_service(&mut dice, "new", &pools)));
            let last = (&before, pools.as_slice(), services.as_slice());
            match allocate_one_more(last, &pools, &more) {
                Some(quick) => {
                    made += 1;
                    let full = allocate(&pools, &more);
                    assert_eq!(quick, full, "case {case}: {pools:#?}\n{more:#?}");
                }
                None => declined += 1,
            }
        }
        assert!(made > 800 && declined > 800, "made {made}, declined {declined}");
        // Not for a change that is not one more Service.
        let pools = vec![pool("p", &["10.0.0.0/24"])];
        let services: Vec<Arc<Service>> =
            ["x", "y"].iter().map(|n| Arc::new(service("a", n))).collect();
        let before = allocate(&pools, &services);
        let last = (&before, pools.as_slice(), services.as_slice());
        let fewer = &services[..1];
        assert!(allocate_one_more(last, &pools, fewer).is_none());
        let other = vec![services[0].clone(), Arc::new(service("a", "z"))];
        assert!(allocate_one_more(last, &pools, &other).is_none());

        // A full pool with the home address free: .253 and .254 handed out, .255 held by a
        // manual address and counted. Without the newcomer, the Service whose home is .255
        // probes to .253; with it, the newcomer takes .254 at home first and the other finds
        // the pool full.
        let mut tight = pool("tight", &["10.0.0.253-10.0.0.255"]);
        tight.avoid_buggy_ips = true;
        let pools = vec![tight];
        let named = |slot: u64| {
            let name = (0..)
                .map(|i| format!("s{i}"))
                .find(|n| fnv1a64(format!("a/{n}").as_bytes()) % 3 == slot);
            service("a", &name.unwrap())
        };
        let mut manual = service("a", "manual");
        manual.load_balancer_ips = smallvec::smallvec![ip("10.0.0.255")];
        let services = vec![Arc::new(manual), Arc::new(named(2))];
        let before = allocate(&pools, &services);
        let mut more = services.clone();
        more.push(Arc::new(named(1)));
        let full = allocate(&pools, &more);
        assert_eq!(full.services.values().filter(|r| r.is_err()).count(), 1, "{full:#?}");
        let last = (&before, pools.as_slice(), services.as_slice());
        assert_eq!(allocate_one_more(last, &pools, &more), None);
    }
}
