//! Announced routes (`crate::announce`) as the RIB task applies them: which prefixes the router
//! originates on top of its configured `prefixes`, and how each peer's export policy is widened
//! so that a prefix reaches exactly the peers it is meant for, with its communities and
//! LOCAL_PREF.
//!
//! This is how frr-k8s renders MetalLB and OVN-Kubernetes announcements: the prefix is added
//! to the neighbor's allowed `toAdvertise` prefixes, and `withCommunity` / `withLocalPref`
//! entries carry the attributes. A neighbor whose configured `to_advertise` is `mode = "all"`
//! already sends every local prefix (frr-k8s: the more permissive filter wins).

use std::cmp::Ordering;
use std::collections::BTreeSet;
use std::net::IpAddr;

use ipnet::IpNet;

use super::configure;
use super::policy::{self, AdvertiseFilter, CommunityRule, ExportPolicy, LocalPrefRule};
pub use crate::announce::{AnnouncedRoute, AnnouncedSet};

/// The prefixes of `before` that `after` no longer has, and those it adds: one walk of both
/// sets in their order (a lookup of each of a cluster's thousands of prefixes in the other set
/// was most of applying an announcement to the RIB).
pub fn gone_and_new(before: &AnnouncedSet, after: &AnnouncedSet) -> (Vec<IpNet>, Vec<IpNet>) {
    let (mut gone, mut new) = (Vec::new(), Vec::new());
    let mut before = before.keys().peekable();
    let mut after = after.keys().peekable();
    loop {
        match (before.peek(), after.peek()) {
            (Some(b), Some(a)) => match b.cmp(a) {
                Ordering::Less => gone.extend(before.next().copied()),
                Ordering::Greater => new.extend(after.next().copied()),
                Ordering::Equal => {
                    before.next();
                    after.next();
                }
            },
            (Some(_), None) => gone.extend(before.next().copied()),
            (None, Some(_)) => new.extend(after.next().copied()),
            (None, None) => return (gone, new),
        }
    }
}

/// `base` (the neighbor's configured policy) widened by what is announced to `peer`.
pub fn effective_export(
    base: &ExportPolicy,
    announced: &AnnouncedSet,
    peer: IpAddr,
) -> ExportPolicy {
    let mut out = base.clone();
    // What the announcements add, gathered in the set's order and added to the policy's sets
    // at once: inserted one by one, each of a cluster's thousands of prefixes was a descent of
    // a tree, for every peer, at every change.
    let mut advertised: Vec<IpNet> = Vec::new();
    let mut with_community: Vec<(policy::Community, Vec<IpNet>)> = Vec::new();
    let mut with_local_pref: Vec<(u32, Vec<IpNet>)> = Vec::new();
    for (prefix, route) in announced.iter() {
        if route.peers.as_ref().is_some_and(|set| !set.contains(&peer)) {
            continue;
        }
        advertised.push(*prefix);
        for configured in &route.communities {
            let community = configure::community(*configured);
            match with_community.iter_mut().find(|(c, _)| *c == community) {
                Some((_, prefixes)) => prefixes.push(*prefix),
                None => with_community.push((community, vec![*prefix])),
            }
        }
        // A configured `with_local_pref` for the prefix wins over the announcement's, except
        // during a graceful shutdown (RFC 8326 §4: LOCAL_PREF 0 for every route). Each prefix
        // comes once, so only the configured rules can name it.
        if route.graceful_shutdown {
            for rule in &mut out.with_local_pref {
                rule.prefixes.remove(prefix);
            }
            out.with_local_pref.retain(|r| !r.prefixes.is_empty());
        }
        if let Some(local_pref) = route.local_pref {
            if !out.with_local_pref.iter().any(|r| r.prefixes.contains(prefix)) {
                match with_local_pref.iter_mut().find(|(l, _)| *l == local_pref) {
                    Some((_, prefixes)) => prefixes.push(*prefix),
                    None => with_local_pref.push((local_pref, vec![*prefix])),
                }
            }
        }
    }
    match &mut out.to_advertise {
        AdvertiseFilter::All => {}
        AdvertiseFilter::Filtered(list) => add_in_order(list, advertised),
        none @ AdvertiseFilter::None => {
            if !advertised.is_empty() {
                *none = AdvertiseFilter::Filtered(advertised.into_iter().collect());
            }
        }
    }
    for (community, prefixes) in with_community {
        match out.with_community.iter_mut().find(|r| r.community == community) {
            Some(rule) => add_in_order(&mut rule.prefixes, prefixes),
            None => out
                .with_community
                .push(CommunityRule { community, prefixes: prefixes.into_iter().collect() }),
        }
    }
    for (local_pref, prefixes) in with_local_pref {
        match out.with_local_pref.iter_mut().find(|r| r.local_pref == local_pref) {
            Some(rule) => add_in_order(&mut rule.prefixes, prefixes),
            None => out
                .with_local_pref
                .push(LocalPrefRule { local_pref, prefixes: prefixes.into_iter().collect() }),
        }
    }
    out
}

/// Adds `prefixes`, in order, to `set`: made into a tree in one pass and merged with it.
fn add_in_order(set: &mut BTreeSet<IpNet>, prefixes: Vec<IpNet>) {
    let mut more: BTreeSet<IpNet> = prefixes.into_iter().collect();
    set.append(&mut more);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config;
    use ipnet::IpNet;

    fn net(text: &str) -> IpNet {
        text.parse().unwrap()
    }

    fn ip(text: &str) -> IpAddr {
        text.parse().unwrap()
    }

    #[test]
    fn announced_prefixes_widen_only_the_selected_peers() {
        let mut announced = AnnouncedSet::new();
        announced.insert(
            net("192.0.2.1/32"),
            AnnouncedRoute {
                communities: vec![
                    config::Community::Standard(100),
                    config::Community::Large(1, 2, 3),
                ],
                local_pref: Some(200),
                peers: Some([ip("10.0.0.1")].into()),
                graceful_shutdown: false,
            },
        );
        announced.insert(
            net("10.128.7.0/24"),
            AnnouncedRoute {
                communities: vec![],
                local_pref: None,
                peers: None,
                graceful_shutdown: false,
            },
        );
        let base = ExportPolicy::default();
        let one = effective_export(&base, &announced, ip("10.0.0.1"));
        assert_eq!(
            one.to_advertise,
            AdvertiseFilter::Filtered(BTreeSet::from([net("10.128.7.0/24"), net("192.0.2.1/32")]))
        );
        assert_eq!(one.with_community.len(), 2);
        assert_eq!(
            one.with_local_pref,
            vec![LocalPrefRule {
                local_pref: 200,
                prefixes: BTreeSet::from([net("192.0.2.1/32")])
            }]
        );
        let other = effective_export(&base, &announced, ip("10.0.0.2"));
        assert_eq!(
            other.to_advertise,
            AdvertiseFilter::Filtered(BTreeSet::from([net("10.128.7.0/24")]))
        );
        assert!(other.with_community.is_empty() && other.with_local_pref.is_empty());
        // mode = "all" stays all; a configured local_pref wins.
        let base = ExportPolicy {
            to_advertise: AdvertiseFilter::All,
            with_local_pref: vec![LocalPrefRule {
                local_pref: 50,
                prefixes: BTreeSet::from([net("192.0.2.1/32")]),
            }],
            with_community: vec![],
        };
        let all = effective_export(&base, &announced, ip("10.0.0.1"));
        assert_eq!(all.to_advertise, AdvertiseFilter::All);
        assert_eq!(all.with_local_pref, base.with_local_pref);
        // Draining (RFC 8326 §4): LOCAL_PREF 0 wins over the configured one.
        let mut drained = AnnouncedSet::new();
        for (prefix, route) in announced.iter() {
            let route =
                AnnouncedRoute { graceful_shutdown: true, local_pref: Some(0), ..route.clone() };
            drained.insert(*prefix, route);
        }
        let announced = drained;
        let draining = effective_export(&base, &announced, ip("10.0.0.1"));
        assert_eq!(
            draining.with_local_pref,
            vec![LocalPrefRule {
                local_pref: 0,
                prefixes: BTreeSet::from([net("10.128.7.0/24"), net("192.0.2.1/32")])
            }]
        );
    }

    /// The policy as it was made before the prefixes were gathered: one insert per prefix.
    fn one_by_one(base: &ExportPolicy, announced: &AnnouncedSet, peer: IpAddr) -> ExportPolicy {
        let mut out = base.clone();
        for (prefix, route) in announced.iter() {
            if route.peers.as_ref().is_some_and(|set| !set.contains(&peer)) {
                continue;
            }
            match &mut out.to_advertise {
                AdvertiseFilter::All => {}
                AdvertiseFilter::Filtered(list) => {
                    list.insert(*prefix);
                }
                none @ AdvertiseFilter::None => {
                    *none = AdvertiseFilter::Filtered(BTreeSet::from([*prefix]))
                }
            }
            for configured in &route.communities {
                let community = configure::community(*configured);
                match out.with_community.iter_mut().find(|r| r.community == community) {
                    Some(rule) => {
                        rule.prefixes.insert(*prefix);
                    }
                    None => out
                        .with_community
                        .push(CommunityRule { community, prefixes: BTreeSet::from([*prefix]) }),
                }
            }
            if route.graceful_shutdown {
                for rule in &mut out.with_local_pref {
                    rule.prefixes.remove(prefix);
                }
                out.with_local_pref.retain(|r| !r.prefixes.is_empty());
            }
            if let Some(local_pref) = route.local_pref {
                if !out.with_local_pref.iter().any(|r| r.prefixes.contains(prefix)) {
                    match out.with_local_pref.iter_mut().find(|r| r.local_pref == local_pref) {
                        Some(rule) => {
                            rule.prefixes.insert(*prefix);
                        }
                        None => out.with_local_pref.push(LocalPrefRule {
                            local_pref,
                            prefixes: BTreeSet::from([*prefix]),
                        }),
                    }
                }
            }
        }
        out
    }

    /// Random sets and configured policies: the gathered policy is the one-by-one policy, and
    /// the walk finds what a lookup of each prefix in the other set finds.
    #[test]
    fn gathered_policy_and_walked_difference_match_the_one_by_one_forms() {
        let mut state: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = |below: u64| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state % below
        };
        let peers = [ip("10.0.0.1"), ip("10.0.0.2")];
        for _ in 0..300 {
            let mut sets = Vec::new();
            for _ in 0..2 {
                let mut set = AnnouncedSet::new();
                for _ in 0..next(40) {
                    let prefix = IpNet::new(IpAddr::from([10, 200, 0, next(64) as u8]), 32);
                    let route = AnnouncedRoute {
                        communities: (0..next(3))
                            .map(|_| config::Community::Standard(next(3) as u32))
                            .collect(),
                        local_pref: [None, Some(0), Some(100), Some(200)][next(4) as usize],
                        peers: match next(3) {
                            0 => None,
                            1 => Some(BTreeSet::new()),
                            _ => Some([peers[next(2) as usize]].into()),
                        },
                        graceful_shutdown: next(5) == 0,
                    };
                    set.insert(prefix.expect("a /32"), route);
                }
                sets.push(set);
            }
            let configured = |n: u64| BTreeSet::from([net(&format!("10.200.0.{n}/32"))]);
            let base = ExportPolicy {
                to_advertise: match next(3) {
                    0 => AdvertiseFilter::None,
                    1 => AdvertiseFilter::All,
                    _ => AdvertiseFilter::Filtered(configured(next(64))),
                },
                with_local_pref: (0..next(2))
                    .map(|_| LocalPrefRule { local_pref: 100, prefixes: configured(next(64)) })
                    .collect(),
                with_community: (0..next(2))
                    .map(|_| CommunityRule {
                        community: configure::community(config::Community::Standard(1)),
                        prefixes: configured(next(64)),
                    })
                    .collect(),
            };
            let (before, after) = (&sets[0], &sets[1]);
            for peer in peers {
                assert_eq!(
                    effective_export(&base, after, peer),
                    one_by_one(&base, after, peer),
                    "{after:?} to {peer} over {base:?}"
                );
            }
            let gone: Vec<IpNet> =
                before.keys().filter(|p| after.get(p).is_none()).copied().collect();
            let new: Vec<IpNet> =
                after.keys().filter(|p| before.get(p).is_none()).copied().collect();
            assert_eq!(gone_and_new(before, after), (gone, new));
        }
    }
}
