//! Announced routes (`crate::announce`) as the RIB task applies them: which prefixes the router
//! originates on top of its configured `prefixes`, and how each peer's export policy is widened
//! so that a prefix reaches exactly the peers it is meant for, with its communities and
//! LOCAL_PREF.
//!
//! This is how frr-k8s renders MetalLB and OVN-Kubernetes announcements: the prefix is added
//! to the neighbor's allowed `toAdvertise` prefixes, and `withCommunity` / `withLocalPref`
//! entries carry the attributes. A neighbor whose configured `to_advertise` is `mode = "all"`
//! already sends every local prefix (frr-k8s: the more permissive filter wins).

use std::collections::BTreeSet;
use std::net::IpAddr;

use super::configure;
use super::policy::{AdvertiseFilter, CommunityRule, ExportPolicy, LocalPrefRule};
pub use crate::announce::{AnnouncedRoute, AnnouncedSet};

/// `base` (the neighbor's configured policy) widened by what is announced to `peer`.
pub fn effective_export(
    base: &ExportPolicy,
    announced: &AnnouncedSet,
    peer: IpAddr,
) -> ExportPolicy {
    let mut out = base.clone();
    for (prefix, route) in announced {
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
        // A configured `with_local_pref` for the prefix wins over the announcement's, except
        // during a graceful shutdown (RFC 8326 §4: LOCAL_PREF 0 for every route).
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
                    None => out
                        .with_local_pref
                        .push(LocalPrefRule { local_pref, prefixes: BTreeSet::from([*prefix]) }),
                }
            }
        }
    }
    out
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
        for route in announced.values_mut() {
            route.graceful_shutdown = true;
            route.local_pref = Some(0);
        }
        let draining = effective_export(&base, &announced, ip("10.0.0.1"));
        assert_eq!(
            draining.with_local_pref,
            vec![LocalPrefRule {
                local_pref: 0,
                prefixes: BTreeSet::from([net("10.128.7.0/24"), net("192.0.2.1/32")])
            }]
        );
    }
}
