//! Import and export policy: which routes a peer may send us, which of ours it may receive, and
//! how their attributes change on the way out.
//!
//! The filters follow frr-k8s `FRRConfiguration` semantics (`toReceive`, `toAdvertise`,
//! `withLocalPref`, `withCommunity`) rendered the way frr-k8s renders them into FRR prefix-lists
//! and route-maps; the protocol rules around them (loop detection, split horizon, well-known
//! communities, attribute rewrite) are RFC 4271, RFC 1997 and RFC 4456.

use std::collections::BTreeSet;
use std::fmt;
use std::net::{IpAddr, Ipv4Addr};

use ipnet::IpNet;

use crate::bgp::rib::PeerInfo;
use crate::bgp::wire::attributes::{
    flags, well_known, LargeCommunity, NextHop, PathAttributes, RawAttribute,
};

/// LOCAL_PREF assumed when a path has none (RFC 4271 §5.1.5 leaves the value to the operator;
/// 100 is the value every common implementation uses).
pub const DEFAULT_LOCAL_PREF: u32 = 100;

/// One line of an FRR-style prefix-list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PrefixListEntry {
    pub prefix: IpNet,
    pub ge: Option<u8>,
    pub le: Option<u8>,
}

impl PrefixListEntry {
    /// An entry that matches exactly `prefix`.
    pub fn exact(prefix: IpNet) -> Self {
        Self { prefix, ge: None, le: None }
    }

    /// FRR prefix-list semantics: without `ge`/`le` the route must equal `prefix`; with either,
    /// the route must lie inside `prefix` and its length must be within
    /// `[ge or len(prefix), le or max length]`.
    pub fn matches(&self, route: &IpNet) -> bool {
        if !self.prefix.contains(route) {
            return false;
        }
        let len = route.prefix_len();
        if self.ge.is_none() && self.le.is_none() {
            return len == self.prefix.prefix_len();
        }
        let low = self.ge.unwrap_or(self.prefix.prefix_len());
        let high = self.le.unwrap_or(route.max_prefix_len());
        low <= len && len <= high
    }
}

/// Which announcements a peer may send us (frr-k8s `toReceive.allowed`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReceiveFilter {
    All,
    /// Only routes matching one of the entries. An empty list accepts nothing.
    Filtered(Vec<PrefixListEntry>),
}

impl Default for ReceiveFilter {
    /// frr-k8s and MetalLB deny everything a peer sends unless told otherwise.
    fn default() -> Self {
        ReceiveFilter::Filtered(Vec::new())
    }
}

/// Per-peer import policy.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ImportPolicy {
    pub to_receive: ReceiveFilter,
}

/// Which prefixes a peer is sent (frr-k8s `toAdvertise.allowed`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum AdvertiseFilter {
    /// Every locally originated prefix. frr-k8s renders `mode: all` as a prefix-list of the
    /// router's own `prefixes`, so a node never becomes transit for routes it learned.
    All,
    /// Exactly these prefixes (local or learned). An empty list advertises nothing. A set: each
    /// route exported looks itself up in it, and a cluster announces thousands.
    Filtered(BTreeSet<IpNet>),
    /// Nothing (the frr-k8s default when `toAdvertise` is absent).
    #[default]
    None,
}

/// A community to attach on export: standard (RFC 1997) or large (RFC 8092).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Community {
    Standard(u32),
    Large(LargeCommunity),
}

/// frr-k8s `withLocalPref`: LOCAL_PREF for these exact prefixes (iBGP peers only).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LocalPrefRule {
    pub local_pref: u32,
    pub prefixes: BTreeSet<IpNet>,
}

/// frr-k8s `withCommunity`: a community added to these exact prefixes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommunityRule {
    pub community: Community,
    pub prefixes: BTreeSet<IpNet>,
}

/// Per-peer export policy.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ExportPolicy {
    pub to_advertise: AdvertiseFilter,
    pub with_local_pref: Vec<LocalPrefRule>,
    pub with_community: Vec<CommunityRule>,
}

impl ExportPolicy {
    /// The prefixes whose export may differ between `self` and `new`, or `None` when any
    /// prefix's may (the filter's mode changed, or the order in which communities are added).
    /// A policy change re-exports only these: with announcements every Service added to a
    /// cluster widens the policy by one prefix, and the table holds thousands.
    pub fn changed_prefixes(&self, new: &ExportPolicy) -> Option<BTreeSet<IpNet>> {
        let mut changed = BTreeSet::new();
        match (&self.to_advertise, &new.to_advertise) {
            (AdvertiseFilter::Filtered(old), AdvertiseFilter::Filtered(new)) => {
                changed.extend(old.symmetric_difference(new));
            }
            (AdvertiseFilter::None, AdvertiseFilter::Filtered(list))
            | (AdvertiseFilter::Filtered(list), AdvertiseFilter::None) => changed.extend(list),
            (old, new) if old == new => {}
            _ => return None,
        }
        if self.with_local_pref != new.with_local_pref {
            // The first rule that holds a prefix sets its LOCAL_PREF: every prefix of either.
            for rule in self.with_local_pref.iter().chain(&new.with_local_pref) {
                changed.extend(&rule.prefixes);
            }
        }
        if self.with_community != new.with_community {
            let order = |p: &ExportPolicy| -> Vec<Community> {
                p.with_community.iter().map(|rule| rule.community).collect()
            };
            if order(self) != order(new) {
                return None;
            }
            for (old, new) in self.with_community.iter().zip(&new.with_community) {
                changed.extend(old.prefixes.symmetric_difference(&new.prefixes));
            }
        }
        Some(changed)
    }
}

/// Why an announcement was not accepted into the RIB.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ImportReject {
    /// Equal to or inside a prefix of the node-wide `always_block` list.
    AlwaysBlocked,
    /// Not permitted by the peer's `to_receive` filter.
    NotAllowed,
    /// The address family was not negotiated with this peer.
    FamilyNotNegotiated,
    /// Our own AS appears in the AS_PATH.
    AsPathLoop,
    /// The leftmost AS of an eBGP route is not the peer's.
    FirstAsMismatch,
    /// An iBGP route carries our own router id as ORIGINATOR_ID.
    OriginatorIsUs,
}

impl fmt::Display for ImportReject {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ImportReject::AlwaysBlocked => "blocked by always-block list",
            ImportReject::NotAllowed => "denied by import filter",
            ImportReject::FamilyNotNegotiated => "address family not negotiated",
            ImportReject::AsPathLoop => "as-path contains our own AS",
            ImportReject::FirstAsMismatch => "first AS in path is not the peer's AS",
            ImportReject::OriginatorIsUs => "originator-id is our router-id",
        })
    }
}

/// Checks that depend only on the attributes, done once per UPDATE.
pub fn check_import_attributes(
    attrs: &PathAttributes,
    peer: &PeerInfo,
    router_id: Ipv4Addr,
) -> Result<(), ImportReject> {
    // RFC 4271 §9.1.2: a route whose AS_PATH contains our own AS is excluded (loop).
    if attrs.as_path.contains(peer.local_asn) {
        return Err(ImportReject::AsPathLoop);
    }
    // RFC 4271 §6.3: the leftmost AS of a route from an external peer must be the peer's AS
    // (FRR "enforce-first-as"). An empty path from an eBGP peer fails this check too.
    if peer.ebgp && attrs.as_path.neighbor_asn() != Some(peer.remote_asn) {
        return Err(ImportReject::FirstAsMismatch);
    }
    // RFC 4456 §8: a route carrying our router id as ORIGINATOR_ID came back to us.
    if !peer.ebgp && attrs.originator_id() == Some(router_id) {
        return Err(ImportReject::OriginatorIsUs);
    }
    Ok(())
}

/// Checks that depend on the prefix: the node-wide block list, then the peer's filter.
pub fn check_import_prefix(
    prefix: &IpNet,
    always_block: &[IpNet],
    policy: &ImportPolicy,
) -> Result<(), ImportReject> {
    if always_block.iter().any(|blocked| blocked.contains(prefix)) {
        return Err(ImportReject::AlwaysBlocked);
    }
    match &policy.to_receive {
        ReceiveFilter::All => Ok(()),
        ReceiveFilter::Filtered(entries) if entries.iter().any(|e| e.matches(prefix)) => Ok(()),
        ReceiveFilter::Filtered(_) => Err(ImportReject::NotAllowed),
    }
}

/// Where the path being exported came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExportSource {
    Local,
    Learned { from_same_peer: bool, ebgp: bool },
}

/// The LOCAL_PREF a path is ranked with: received LOCAL_PREF only counts from iBGP peers
/// (RFC 4271 §5.1.5: a speaker ignores LOCAL_PREF received from an external peer).
pub fn effective_local_pref(attrs: &PathAttributes, learned_from_ebgp: bool) -> u32 {
    if learned_from_ebgp {
        DEFAULT_LOCAL_PREF
    } else {
        attrs.local_pref.unwrap_or(DEFAULT_LOCAL_PREF)
    }
}

/// Our own address as next hop towards `peer`, in the form the prefix's family needs.
fn next_hop_self(prefix_is_v4: bool, peer: &PeerInfo) -> NextHop {
    match (prefix_is_v4, peer.local_address) {
        (true, IpAddr::V4(a)) => NextHop::V4(a),
        // RFC 8950: IPv4 NLRI with an IPv6 next hop.
        (true, IpAddr::V6(a)) => NextHop::V6 { global: a, link_local: peer.local_link_local },
        // RFC 2545 §3: global address plus, when we have one, the link-local address.
        (false, IpAddr::V6(a)) => NextHop::V6 { global: a, link_local: peer.local_link_local },
        // IPv6 over an IPv4 session: IPv4-mapped IPv6 address, as FRR sends.
        (false, IpAddr::V4(a)) => {
            NextHop::V6 { global: a.to_ipv6_mapped(), link_local: peer.local_link_local }
        }
    }
}

impl AdvertiseFilter {
    /// Whether a prefix this router originates passes the filter (`show announcements` says
    /// which peers get a prefix left to their `to_advertise`).
    pub fn allows_local(&self, prefix: &IpNet) -> bool {
        advertise_allowed(self, prefix, ExportSource::Local)
    }
}

fn advertise_allowed(filter: &AdvertiseFilter, prefix: &IpNet, source: ExportSource) -> bool {
    match filter {
        AdvertiseFilter::All => source == ExportSource::Local,
        AdvertiseFilter::Filtered(list) => list.contains(prefix),
        AdvertiseFilter::None => false,
    }
}

/// Decides whether the best path for `prefix` goes to `peer`, and with which attributes.
/// `None` means the peer must not have the prefix (a withdraw if it was sent before).
pub fn export_route(
    prefix: &IpNet,
    attrs: &PathAttributes,
    source: ExportSource,
    peer: &PeerInfo,
) -> Option<PathAttributes> {
    if !advertise_allowed(&peer.export.to_advertise, prefix, source) {
        return None;
    }
    let learned_from_ebgp = match source {
        // Never reflect a path back to the peer it came from.
        ExportSource::Learned { from_same_peer: true, .. } => return None,
        // RFC 4271 §9.2: routes learned from an internal peer are not sent to internal peers
        // (no route reflection here).
        ExportSource::Learned { ebgp: false, .. } if !peer.ebgp => return None,
        ExportSource::Learned { ebgp, .. } => Some(ebgp),
        ExportSource::Local => None,
    };
    // RFC 1997: NO_ADVERTISE goes to no peer; NO_EXPORT (and, with no confederations,
    // NO_EXPORT_SUBCONFED) goes to no external peer.
    if attrs.communities.contains(&well_known::NO_ADVERTISE) {
        return None;
    }
    if peer.ebgp
        && (attrs.communities.contains(&well_known::NO_EXPORT)
            || attrs.communities.contains(&well_known::NO_EXPORT_SUBCONFED))
    {
        return None;
    }

    let mut out = attrs.clone();
    let prefix_is_v4 = matches!(prefix, IpNet::V4(_));
    if peer.ebgp {
        // RFC 4271 §5.1.2: prepend our AS towards an external peer.
        out.as_path.prepend(peer.local_asn);
        // RFC 4271 §5.1.3: towards an external peer the next hop is our own address.
        out.next_hop = next_hop_self(prefix_is_v4, peer);
        // RFC 4271 §5.1.4: a MED received from another AS is not propagated to other ASes;
        // a MED we set ourselves is kept.
        if learned_from_ebgp.is_some() {
            out.med = None;
        }
        // RFC 4271 §5.1.5: LOCAL_PREF is never sent to an external peer.
        out.local_pref = None;
    } else {
        match learned_from_ebgp {
            // RFC 4271 §5.1.3: an externally learned next hop is passed on unchanged to internal
            // peers; its link-local part only makes sense on the link it was learned on
            // (RFC 2545 §3).
            Some(_) => {
                if let NextHop::V6 { link_local, .. } = &mut out.next_hop {
                    *link_local = None;
                }
            }
            None => out.next_hop = next_hop_self(prefix_is_v4, peer),
        }
        // RFC 4271 §5.1.5: LOCAL_PREF is always sent to internal peers.
        let configured = peer
            .export
            .with_local_pref
            .iter()
            .find(|rule| rule.prefixes.contains(prefix))
            .map(|rule| rule.local_pref);
        out.local_pref =
            Some(configured.unwrap_or_else(|| {
                effective_local_pref(attrs, learned_from_ebgp.unwrap_or(false))
            }));
    }
    // RFC 4456 §8: ORIGINATOR_ID and CLUSTER_LIST belong to reflection inside one AS; we do not
    // reflect, and they never leave the AS.
    if out.originator_id().is_some() || !out.cluster_list().is_empty() {
        let rare = out.rare_mut();
        rare.originator_id = None;
        rare.cluster_list = Box::default();
    }
    if learned_from_ebgp.is_some() && !out.unknown().is_empty() {
        // RFC 4271 §5: unrecognised optional transitive attributes are passed on with the
        // Partial bit set; non-transitive ones are not passed on.
        let rare = out.rare_mut();
        rare.unknown = rare
            .unknown
            .iter()
            .filter(|a| a.flags & flags::TRANSITIVE != 0)
            .map(|a| RawAttribute { flags: a.flags | flags::PARTIAL, ..a.clone() })
            .collect();
    }
    let added = |rule: &&CommunityRule| rule.prefixes.contains(prefix);
    for rule in peer.export.with_community.iter().filter(added) {
        match rule.community {
            Community::Standard(c) if !out.communities.contains(&c) => {
                out.communities = out.communities.iter().copied().chain([c]).collect();
            }
            Community::Large(c) if !out.large_communities().contains(&c) => {
                let rare = out.rare_mut();
                rare.large_communities =
                    rare.large_communities.iter().copied().chain([c]).collect();
            }
            _ => {}
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn net(s: &str) -> IpNet {
        s.parse().unwrap()
    }

    fn entry(prefix: &str, ge: Option<u8>, le: Option<u8>) -> PrefixListEntry {
        PrefixListEntry { prefix: net(prefix), ge, le }
    }

    #[test]
    fn prefix_list_exact_without_ge_le() {
        let e = entry("10.0.0.0/8", None, None);
        assert!(e.matches(&net("10.0.0.0/8")));
        assert!(!e.matches(&net("10.1.0.0/16")));
        assert!(!e.matches(&net("0.0.0.0/0")));
        assert!(!e.matches(&net("2001:db8::/32")));
    }

    #[test]
    fn prefix_list_ge_le_table() {
        // (entry, route, expected)
        let cases = [
            (entry("10.0.0.0/8", Some(16), Some(24)), "10.1.0.0/16", true),
            (entry("10.0.0.0/8", Some(16), Some(24)), "10.1.2.0/24", true),
            (entry("10.0.0.0/8", Some(16), Some(24)), "10.1.2.0/25", false),
            (entry("10.0.0.0/8", Some(16), Some(24)), "10.0.0.0/8", false),
            (entry("10.0.0.0/8", Some(16), Some(24)), "11.1.0.0/16", false),
            // le only: from the prefix's own length up to le.
            (entry("10.0.0.0/8", None, Some(16)), "10.0.0.0/8", true),
            (entry("10.0.0.0/8", None, Some(16)), "10.2.0.0/16", true),
            (entry("10.0.0.0/8", None, Some(16)), "10.2.3.0/24", false),
            // ge only: from ge up to the maximum length.
            (entry("10.0.0.0/8", Some(24), None), "10.2.3.4/32", true),
            (entry("10.0.0.0/8", Some(24), None), "10.2.0.0/16", false),
            // "permit any".
            (entry("0.0.0.0/0", None, Some(32)), "192.0.2.0/24", true),
            (entry("::/0", None, Some(128)), "2001:db8::/48", true),
            (entry("::/0", None, Some(128)), "192.0.2.0/24", false),
        ];
        for (e, route, expected) in cases {
            assert_eq!(e.matches(&net(route)), expected, "{e:?} vs {route}");
        }
    }

    #[test]
    fn import_prefix_default_deny_all_and_always_block() {
        let deny = ImportPolicy::default();
        assert_eq!(
            check_import_prefix(&net("10.0.0.0/24"), &[], &deny),
            Err(ImportReject::NotAllowed)
        );
        let all = ImportPolicy { to_receive: ReceiveFilter::All };
        assert_eq!(check_import_prefix(&net("10.0.0.0/24"), &[], &all), Ok(()));
        let block = [net("10.0.0.0/16")];
        assert_eq!(
            check_import_prefix(&net("10.0.0.0/16"), &block, &all),
            Err(ImportReject::AlwaysBlocked)
        );
        assert_eq!(
            check_import_prefix(&net("10.0.5.0/24"), &block, &all),
            Err(ImportReject::AlwaysBlocked)
        );
        // A covering prefix is not "inside" the blocked one.
        assert_eq!(check_import_prefix(&net("10.0.0.0/8"), &block, &all), Ok(()));
        let filtered = ImportPolicy {
            to_receive: ReceiveFilter::Filtered(vec![entry("10.0.0.0/24", None, None)]),
        };
        assert_eq!(check_import_prefix(&net("10.0.0.0/24"), &[], &filtered), Ok(()));
        assert_eq!(
            check_import_prefix(&net("10.0.1.0/24"), &[], &filtered),
            Err(ImportReject::NotAllowed)
        );
    }

    /// A policy that widens by one prefix changes that prefix only; a change of mode, or of
    /// the order communities are added in, changes every one.
    #[test]
    fn changed_prefixes_are_the_difference() {
        let set =
            |prefixes: &[&str]| -> BTreeSet<IpNet> { prefixes.iter().map(|p| net(p)).collect() };
        let filtered = |prefixes: &[&str]| ExportPolicy {
            to_advertise: AdvertiseFilter::Filtered(set(prefixes)),
            ..Default::default()
        };
        let (a, b, c) = ("10.0.0.0/24", "10.0.1.0/24", "10.0.2.0/24");
        assert_eq!(filtered(&[a]).changed_prefixes(&filtered(&[a, b])), Some(set(&[b])));
        assert_eq!(filtered(&[a, b]).changed_prefixes(&filtered(&[b, c])), Some(set(&[a, c])));
        assert_eq!(ExportPolicy::default().changed_prefixes(&filtered(&[a])), Some(set(&[a])));
        assert_eq!(filtered(&[a]).changed_prefixes(&filtered(&[a])), Some(set(&[])));
        let all = ExportPolicy { to_advertise: AdvertiseFilter::All, ..Default::default() };
        assert_eq!(all.changed_prefixes(&filtered(&[a])), None);
        let rule = |community: u32, prefixes: &[&str]| CommunityRule {
            community: Community::Standard(community),
            prefixes: set(prefixes),
        };
        let with =
            |rules: Vec<CommunityRule>| ExportPolicy { with_community: rules, ..filtered(&[a, b]) };
        assert_eq!(
            with(vec![rule(1, &[a])]).changed_prefixes(&with(vec![rule(1, &[a, b])])),
            Some(set(&[b]))
        );
        assert_eq!(
            with(vec![rule(1, &[a]), rule(2, &[b])])
                .changed_prefixes(&with(vec![rule(2, &[b]), rule(1, &[a])])),
            None
        );
        let local_pref = ExportPolicy {
            with_local_pref: vec![LocalPrefRule { local_pref: 50, prefixes: set(&[b]) }],
            ..filtered(&[a, b])
        };
        assert_eq!(filtered(&[a, b]).changed_prefixes(&local_pref), Some(set(&[b])));
    }
}
