//! The announcements after a change to a few Services, made from the last ones rather than
//! computed again for every Service.
//!
//! With `[kubernetes]` every event is a reload, and most change one Service (a new one, its
//! endpoints, its status written back): computing the candidates and routes of the cluster's
//! ten thousand others again took 12 ms of every such event. Here only the changed Services'
//! candidates are computed (by [`ServiceContext::add`], the code the full computation runs),
//! and put in the last result's place of theirs: a Service's candidates sit together in the
//! result, in key order, so its place is found by a binary search.
//!
//! The result is the one [`compute_allocated`](super::compute::compute_allocated) gives, or
//! `None` where a change reaches beyond the Services' own candidates and routes; the caller
//! then computes in full. That is: any input other than the Services (pools, advertisements,
//! the node, networks, the routers, drain: the caller tells), an aggregate (its route merges
//! many Services'), a router that imports another VRF's routes, or a prefix that another
//! origin asks for too. Debug builds check every patched result against a full computation.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::allocate::Allocation;
use super::compute::{
    on_node, Aggregates, Announcements, Builder, Candidate, Origin, Route, RouteOrigin,
    RouterInput, RuntimeState, ServiceContext, State,
};
use super::readiness::HealthStates;
use crate::config::announce::{AnnounceConfig, Service};

/// Past this many Services changed, computing in full is as quick as finding their places.
const MOST_CHANGED: usize = 64;

/// A Service whose candidates are made again: its key (`namespace/name`) and what it is now
/// (`None`: gone).
#[derive(Debug)]
pub struct Changed {
    pub key: String,
    pub service: Option<Arc<Service>>,
}

/// The Services that differ between the lists of two configs: those between the longest
/// stretch equal at the start and the one at the end, in key order. A Service comes, changes
/// or goes at one place (the lists keep the merge's order, and an unchanged Service is the
/// same shared copy), so that stretch is the change. `None` past [`MOST_CHANGED`].
pub fn changed_services(before: &[Arc<Service>], now: &[Arc<Service>]) -> Option<Vec<Changed>> {
    let same = |a: &Arc<Service>, b: &Arc<Service>| Arc::ptr_eq(a, b) || a == b;
    let head = before.iter().zip(now).take_while(|(a, b)| same(a, b)).count();
    let (before, now) = (before.get(head..)?, now.get(head..)?);
    let tail = before.iter().rev().zip(now.iter().rev()).take_while(|(a, b)| same(a, b)).count();
    let before = before.get(..before.len() - tail)?;
    let now = now.get(..now.len() - tail)?;
    if before.len() + now.len() > MOST_CHANGED {
        return None;
    }
    // Gone unless it is in the new list too.
    let mut changed: BTreeMap<String, Option<Arc<Service>>> =
        before.iter().map(|service| (service.key.to_string(), None)).collect();
    changed.extend(now.iter().map(|service| (service.key.to_string(), Some(service.clone()))));
    Some(changed.into_iter().map(|(key, service)| Changed { key, service }).collect())
}

/// The announcements of `config` (allocated as `allocation`) from `last`, which were computed
/// with the same routers and drain phase from a config that differs in the `changed` Services
/// alone (in key order, each once). See the module doc.
pub fn patched(
    last: &Announcements,
    config: &AnnounceConfig,
    allocation: Arc<Allocation>,
    routers: &[RouterInput],
    runtime: RuntimeState<'_>,
    changed: &[Changed],
) -> Option<Announcements> {
    if runtime.graceful_shutdown || last.draining || !same_but_services(&last.config, config) {
        return None;
    }
    // An import copies another VRF's originations into a router's.
    if last.routers.iter().any(|r| r.imports.iter().any(|from| *from != r.vrf)) {
        return None;
    }
    if !changed.windows(2).all(|pair| matches!(pair, [a, b] if a.key < b.key)) {
        return None;
    }
    // The changed Services' candidates, each one's after the last one's.
    let mut builder = Builder::for_routers(routers);
    let node_labels = config.node.effective_labels();
    let advertisements = on_node(config, routers, &node_labels);
    let no_health = HealthStates::new();
    let health = runtime.health.unwrap_or(&no_health);
    let mut context =
        ServiceContext::new(config, &advertisements, node_labels, health, runtime.drained);
    let mut aggregates = Aggregates::new();
    let mut made = Vec::with_capacity(changed.len());
    for change in changed {
        let begin = builder.candidates.len();
        let allocated =
            change.service.as_deref().zip(allocation.services.get_key_value(change.key.as_str()));
        if let Some((service, (key, entry))) = allocated {
            context.add(key, service, entry, &mut builder, &mut aggregates);
        }
        made.push(begin..builder.candidates.len());
    }
    if !aggregates.is_empty() {
        return None;
    }
    builder.finish();

    // The last candidates with each changed Service's put in its place.
    let old = &last.candidates;
    let start = old.iter().take_while(|c| matches!(c.origin, Origin::Router)).count();
    let services = old.get(start..)?.iter().take_while(|c| service_of(c).is_some()).count();
    let end = start + services;
    let region = old.get(start..end)?;
    // A Service aggregated before (its candidate withdrawn into an aggregate) left the
    // aggregate's candidate after the Services'.
    if old.get(end..)?.iter().any(|c| matches!(c.origin, Origin::Aggregate { .. })) {
        return None;
    }
    let mut candidates = Vec::with_capacity(old.len() + builder.candidates.len());
    candidates.extend_from_slice(old.get(..start)?);
    let mut at = start;
    let mut removed: Vec<(&str, &Candidate)> = Vec::new();
    for (change, new) in changed.iter().zip(made) {
        let key = change.key.as_str();
        let from = start + region.partition_point(|c| service_of(c).is_some_and(|k| k < key));
        let to = start + region.partition_point(|c| service_of(c).is_some_and(|k| k <= key));
        candidates.extend_from_slice(old.get(at..from)?);
        removed.extend(old.get(from..to)?.iter().map(|c| (key, c)));
        candidates.extend_from_slice(builder.candidates.get(new)?);
        at = to;
    }
    candidates.extend_from_slice(old.get(at..)?);

    // Their routes: the old ones out, the new ones in, each prefix asked for by one Service.
    let mut routers_out = last.routers.clone();
    for (key, candidate) in removed {
        let (Some(prefix), Some(vrf), State::Announced { .. }) =
            (candidate.prefix, &candidate.vrf, &candidate.state)
        else {
            continue;
        };
        let router = routers_out.iter_mut().find(|r| r.vrf == *vrf)?;
        // Gone already when two of the Service's candidates asked for the same prefix.
        let Some(route) = router.originate.get(&prefix) else { continue };
        if !asked_by_alone(route, key) {
            return None;
        }
        router.originate.remove(&prefix);
    }
    for new in builder.routers.values().filter(|r| !r.originate.is_empty()) {
        let router = routers_out.iter_mut().find(|r| r.vrf == new.vrf)?;
        for (prefix, route) in &new.originate {
            if router.originate.insert(*prefix, route.clone()).is_some() {
                return None;
            }
        }
    }
    candidates.shrink_to_fit();
    Some(Announcements {
        routers: routers_out,
        candidates,
        allocation,
        draining: false,
        config: Arc::default(),
    })
}

/// The key of the Service a candidate is of.
fn service_of(candidate: &Candidate) -> Option<&str> {
    match &candidate.origin {
        Origin::Service { service, .. } => Some(service),
        _ => None,
    }
}

/// Whether every origin of `route` is the Service `key`.
fn asked_by_alone(route: &Route, key: &str) -> bool {
    route.origins.iter().all(|origin| match origin {
        RouteOrigin::Candidate(Origin::Service { service, .. }) => **service == *key,
        _ => false,
    })
}

/// Whether two configs are the same but for their Services. Every field is named, so a new
/// one is a compile error here until it is said whether the Services' candidates read it.
fn same_but_services(a: &AnnounceConfig, b: &AnnounceConfig) -> bool {
    let AnnounceConfig {
        node,
        pools,
        services: _,
        advertisements,
        l2_advertisements,
        communities,
        networks,
        route_advertisements,
        peer_names,
        router_labels,
    } = a;
    *node == b.node
        && *pools == b.pools
        && *advertisements == b.advertisements
        && *l2_advertisements == b.l2_advertisements
        && *communities == b.communities
        && *networks == b.networks
        && *route_advertisements == b.route_advertisements
        && *peer_names == b.peer_names
        && *router_labels == b.router_labels
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::announce::allocate::tests_support::{advertisement, pool, service, tcp_check, Dice};
    use crate::announce::allocate::{allocate, allocate_one_more, asks_the_same};
    use crate::announce::compute::compute_allocated;
    use crate::announce::readiness::HealthStates;
    use crate::config::announce::{Endpoint, TrafficPolicy};
    use crate::config::Community;

    fn runtime(health: &HealthStates) -> RuntimeState<'_> {
        RuntimeState { health: Some(health), ..Default::default() }
    }

    fn router(vrf: &str, neighbor: &str) -> RouterInput {
        RouterInput {
            vrf: vrf.into(),
            neighbors: vec![neighbor.parse().unwrap()],
            imports: vec![],
            prefixes: vec![],
        }
    }

    fn config(services: Vec<Arc<Service>>) -> AnnounceConfig {
        let mut tagged = advertisement("tagged");
        tagged.communities = vec![Community::Standard(0xfde8_0001)];
        tagged.ip_address_pools = vec!["small".into()];
        let node =
            crate::config::announce::Node { name: Some("node1".into()), ..Default::default() };
        AnnounceConfig {
            node,
            pools: vec![pool("vips", &["10.0.0.0/22"]), pool("small", &["10.9.0.0/30"])],
            services,
            advertisements: vec![advertisement("all"), tagged],
            ..Default::default()
        }
    }

    /// A Service as a cluster has them: from a pool or at a manual address (at times one
    /// another Service holds), endpoints here, elsewhere or none, health-checked at times.
    fn random_service(dice: &mut Dice, number: usize) -> Service {
        let namespace = *dice.pick(&["a", "b", "c"]);
        let mut made = service(namespace, &format!("svc-{number}"));
        made.announce_without_endpoints = false;
        if dice.chance(20) {
            made.load_balancer_ips =
                smallvec::smallvec![format!("10.0.1.{}", dice.below(8)).parse().unwrap()];
        } else if dice.chance(20) {
            made.address_pool = Some("small".into());
        }
        if dice.chance(30) {
            made.traffic_policy = TrafficPolicy::Local;
        }
        made.endpoints = (0..dice.below(3) as usize)
            .map(|i| Endpoint {
                address: format!("172.16.{}.{}", number / 64, number % 64 * 4 + i).parse().unwrap(),
                node: (*dice.pick(&["node1", "node2"])).into(),
            })
            .collect();
        if dice.chance(15) {
            made.health = Some(Box::new(tcp_check(80)));
        }
        made
    }

    /// Random steps, each what an event does: a Service comes, goes or changes, or a health
    /// verdict flips. Every patched result is the full computation's, and most steps patch.
    #[test]
    fn a_patched_result_is_the_full_computation() {
        let mut dice = Dice(0x9e37_79b9_7f4a_7c15);
        let routers = [router("", "10.255.0.1"), router("red", "10.255.1.1")];
        let mut services: Vec<Arc<Service>> =
            (0..60).map(|n| Arc::new(random_service(&mut dice, n))).collect();
        let mut health = HealthStates::new();
        let mut last_config = config(services.clone());
        let mut allocation = Arc::new(allocate(&last_config.pools, &last_config.services));
        let mut last =
            compute_allocated(&last_config, allocation.clone(), &routers, runtime(&health));
        last.config = Arc::new(last_config.clone());
        let (mut steps, mut patches) = (0, 0);
        for number in 60..460 {
            let changed = match dice.below(4) {
                0 => {
                    let at = dice.below(services.len() as u64 + 1) as usize;
                    services.insert(at, Arc::new(random_service(&mut dice, number)));
                    None
                }
                1 if services.len() > 1 => {
                    services.remove(dice.below(services.len() as u64) as usize);
                    None
                }
                2 => {
                    let at = dice.below(services.len() as u64) as usize;
                    let mut changed = (*services[at]).clone();
                    let other = random_service(&mut dice, number);
                    changed.endpoints = other.endpoints;
                    changed.traffic_policy = other.traffic_policy;
                    services[at] = Arc::new(changed);
                    None
                }
                _ => {
                    let at = dice.below(services.len() as u64) as usize;
                    let checked = &services[at];
                    for endpoint in checked.endpoints.iter() {
                        health.insert((checked.key.to_string(), endpoint.address), dice.chance(50));
                    }
                    Some(vec![Changed {
                        key: checked.key.to_string(),
                        service: Some(checked.clone()),
                    }])
                }
            };
            let now = config(services.clone());
            let changed = match changed {
                Some(changed) => Some(changed),
                None => changed_services(&last_config.services, &now.services),
            };
            let before = (last_config.pools.as_slice(), last_config.services.as_slice());
            let mut allocated_alone = true;
            if !asks_the_same(before, &now.pools, &now.services) {
                let one_more =
                    allocate_one_more((&allocation, before.0, before.1), &now.pools, &now.services);
                allocated_alone = one_more.is_some();
                allocation =
                    Arc::new(one_more.unwrap_or_else(|| allocate(&now.pools, &now.services)));
            }
            let mut full = compute_allocated(&now, allocation.clone(), &routers, runtime(&health));
            full.config = Arc::new(now.clone());
            steps += 1;
            if let (Some(changed), true) = (changed, allocated_alone) {
                let result =
                    patched(&last, &now, allocation.clone(), &routers, runtime(&health), &changed);
                if let Some(mut result) = result {
                    result.config = full.config.clone();
                    assert_eq!(result, full, "step {steps}: {changed:?}");
                    patches += 1;
                }
            }
            last = full;
            last_config = now;
        }
        assert!(patches * 2 > steps, "only {patches} of {steps} steps patched");
    }

    #[test]
    fn an_aggregate_a_shared_prefix_or_another_input_computes_in_full() {
        let routers = [router("", "10.255.0.1")];
        let mut web = service("a", "web");
        web.load_balancer_ips = smallvec::smallvec!["10.0.0.7".parse().unwrap()];
        let before = config(vec![Arc::new(web.clone())]);
        let allocation = Arc::new(allocate(&before.pools, &before.services));
        let runtime = RuntimeState::default();
        let mut last = compute_allocated(&before, allocation.clone(), &routers, runtime);
        last.config = Arc::new(before.clone());
        let changed = |service: &Service| {
            vec![Changed { key: service.key.to_string(), service: Some(Arc::new(service.clone())) }]
        };
        let patch = |now: &AnnounceConfig, changed: &[Changed]| {
            let allocation = Arc::new(allocate(&now.pools, &now.services));
            patched(&last, now, allocation, &routers, runtime, changed)
        };

        // The same Service again: patched.
        assert!(patch(&before, &changed(&web)).is_some());
        // Another Service at the same address: one route asked for by both.
        let mut twin = service("a", "twin");
        twin.load_balancer_ips = web.load_balancer_ips.clone();
        let mut shared = before.clone();
        shared.services.push(Arc::new(twin.clone()));
        assert!(patch(&shared, &changed(&twin)).is_none());
        // An advertisement changed (here: aggregating): beyond the Services.
        let mut aggregating = before.clone();
        aggregating.advertisements[0].aggregation_length = 24;
        assert!(patch(&aggregating, &changed(&web)).is_none());
        // A router's own prefix at the Service's address.
        let mut with_prefix = router("", "10.255.0.1");
        with_prefix.prefixes = vec!["10.0.0.7/32".parse().unwrap()];
        let allocation = Arc::new(allocate(&before.pools, &before.services));
        let mut merged =
            compute_allocated(&before, allocation.clone(), &[with_prefix.clone()], runtime);
        merged.config = Arc::new(before.clone());
        assert!(patched(&merged, &before, allocation, &[with_prefix], runtime, &changed(&web))
            .is_none());
    }
}
