//! Behaviour of the whole RIB: import, decision, ECMP, export and Adj-RIB-Out together.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::Arc;

use ipnet::{IpNet, Ipv4Net};

use super::*;
use crate::bgp::policy::{
    AdvertiseFilter, Community, CommunityRule, ExportPolicy, ImportPolicy, ImportReject,
    LocalPrefRule, PrefixListEntry, ReceiveFilter,
};
use crate::bgp::wire::attributes::{
    well_known, AsPath, LargeCommunity, NextHop, PathAttributes, RareAttributes,
};

const LOCAL_ASN: u32 = 64512;
const ROUTER_ID: Ipv4Addr = Ipv4Addr::new(10, 255, 0, 1);
const V4: Family = Family::IPV4_UNICAST;

fn net(s: &str) -> IpNet {
    s.parse().unwrap()
}

fn rib() -> Rib {
    Rib::new(RibConfig::new(ROUTER_ID))
}

fn peer(n: u8, remote_asn: u32) -> PeerInfo {
    PeerInfo {
        address: IpAddr::V4(Ipv4Addr::new(192, 0, 2, n)),
        remote_asn,
        local_asn: LOCAL_ASN,
        remote_id: Ipv4Addr::new(10, 0, 0, n),
        ebgp: remote_asn != LOCAL_ASN,
        local_address: IpAddr::V4(Ipv4Addr::new(192, 0, 2, 100)),
        local_link_local: None,
        families: vec![Family::IPV4_UNICAST, Family::IPV6_UNICAST],
        import: ImportPolicy { to_receive: ReceiveFilter::All },
        export: ExportPolicy { to_advertise: AdvertiseFilter::All, ..Default::default() },
    }
}

/// A peer that is sent `prefixes` whatever their source.
fn peer_exporting(n: u8, remote_asn: u32, prefixes: &[&str]) -> PeerInfo {
    let mut info = peer(n, remote_asn);
    info.export.to_advertise = AdvertiseFilter::Filtered(prefixes.iter().map(|p| net(p)).collect());
    info
}

fn learned(path: &[u32], n: u8) -> PathAttributes {
    PathAttributes {
        as_path: AsPath::sequence(path.to_vec()),
        next_hop: NextHop::V4(Ipv4Addr::new(192, 0, 2, n)),
        ..Default::default()
    }
}

fn announce(rib: &mut Rib, id: PeerId, prefixes: &[&str], attrs: &PathAttributes) -> UpdateOutcome {
    let nets: Vec<IpNet> = prefixes.iter().map(|p| net(p)).collect();
    rib.apply_update(id, &nets, attrs, &[]).unwrap()
}

fn withdraw(rib: &mut Rib, id: PeerId, prefixes: &[&str]) -> UpdateOutcome {
    let nets: Vec<IpNet> = prefixes.iter().map(|p| net(p)).collect();
    rib.apply_update(id, &[], PathAttributes::default(), &nets).unwrap()
}

fn nh(n: u8) -> NextHop {
    NextHop::V4(Ipv4Addr::new(192, 0, 2, n))
}

/// The same next hop as the FIB is told it.
fn hop(n: u8) -> crate::fib::NextHop {
    crate::fib::NextHop::V4(Ipv4Addr::new(192, 0, 2, n))
}

/// A prefix and the next hops the FIB is now told to install for it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct RouteChange {
    prefix: IpNet,
    next_hops: Vec<crate::fib::NextHop>,
}

/// What the RIB recorded for the FIB since the last call (next-hop events left out).
fn fib(rib: &mut Rib) -> Vec<RouteChange> {
    rib.take_fib()
        .iter()
        .flat_map(|b| {
            b.changes()
                .map(|(prefix, _, new)| RouteChange { prefix, next_hops: new.to_vec() })
                .collect::<Vec<_>>()
        })
        .collect()
}

/// The single announcement group of a drained batch, for tests that send one attribute set.
fn single_group(batch: &OutboundBatch) -> (&PathAttributes, Vec<IpNet>) {
    assert_eq!(batch.announce.len(), 1, "{batch:?}");
    (&batch.announce[0].0, batch.announce[0].1.clone())
}

#[test]
fn accepted_route_becomes_best_and_reaches_the_fib() {
    let mut rib = rib();
    let a = rib.peer_up(peer(1, 65001));
    let out = announce(&mut rib, a, &["10.1.0.0/24"], &learned(&[65001], 1));
    assert!(out.rejected.is_empty());
    assert_eq!(out.accepted_count, 1);
    assert_eq!(
        fib(&mut rib),
        vec![RouteChange { prefix: net("10.1.0.0/24"), next_hops: vec![hop(1)] }]
    );
    let paths = rib.route(&net("10.1.0.0/24")).unwrap();
    assert_eq!(paths.len(), 1);
    assert!(paths[0].is_best());
    assert_eq!(paths[0].source(), Source::Peer(a));
    // Re-announcing the same route changes nothing and does not count twice.
    let out = announce(&mut rib, a, &["10.1.0.0/24"], &learned(&[65001], 1));
    assert!(fib(&mut rib).is_empty());
    assert_eq!(out.accepted_count, 1);
    let out = withdraw(&mut rib, a, &["10.1.0.0/24"]);
    assert_eq!(fib(&mut rib), vec![RouteChange { prefix: net("10.1.0.0/24"), next_hops: vec![] }]);
    assert_eq!(out.accepted_count, 0);
    assert!(rib.route(&net("10.1.0.0/24")).is_none());
}

#[test]
fn import_default_deny_and_filter() {
    let mut rib = rib();
    let mut info = peer(1, 65001);
    info.import = ImportPolicy::default();
    let a = rib.peer_up(info);
    let out = announce(&mut rib, a, &["10.1.0.0/24"], &learned(&[65001], 1));
    assert_eq!(out.rejected, vec![(net("10.1.0.0/24"), ImportReject::NotAllowed)]);
    assert_eq!(rib.prefix_count(V4), 0);

    let mut info = peer(2, 65002);
    info.import.to_receive = ReceiveFilter::Filtered(vec![PrefixListEntry {
        prefix: net("10.0.0.0/8"),
        ge: Some(24),
        le: Some(24),
    }]);
    let b = rib.peer_up(info);
    let out = announce(
        &mut rib,
        b,
        &["10.2.0.0/24", "10.2.0.0/16", "10.2.0.0/25"],
        &learned(&[65002], 2),
    );
    assert_eq!(
        out.rejected,
        vec![
            (net("10.2.0.0/16"), ImportReject::NotAllowed),
            (net("10.2.0.0/25"), ImportReject::NotAllowed)
        ]
    );
    assert_eq!(out.accepted_count, 1);
}

#[test]
fn always_block_wins_over_receive_all() {
    let mut config = RibConfig::new(ROUTER_ID);
    config.always_block = vec![net("10.96.0.0/12")];
    let mut rib = Rib::new(config);
    let a = rib.peer_up(peer(1, 65001));
    let out = announce(
        &mut rib,
        a,
        &["10.96.0.0/12", "10.100.1.0/24", "10.0.0.0/8"],
        &learned(&[65001], 1),
    );
    assert_eq!(
        out.rejected,
        vec![
            (net("10.96.0.0/12"), ImportReject::AlwaysBlocked),
            (net("10.100.1.0/24"), ImportReject::AlwaysBlocked)
        ]
    );
    assert!(rib.route(&net("10.0.0.0/8")).is_some());
}

#[test]
fn loop_first_as_and_originator_checks_reject() {
    let mut rib = rib();
    let a = rib.peer_up(peer(1, 65001));
    let out = announce(&mut rib, a, &["10.1.0.0/24"], &learned(&[65001, LOCAL_ASN, 65100], 1));
    assert_eq!(out.rejected, vec![(net("10.1.0.0/24"), ImportReject::AsPathLoop)]);
    let out = announce(&mut rib, a, &["10.1.0.0/24"], &learned(&[65099, 65100], 1));
    assert_eq!(out.rejected, vec![(net("10.1.0.0/24"), ImportReject::FirstAsMismatch)]);
    let out = announce(&mut rib, a, &["10.1.0.0/24"], &learned(&[], 1));
    assert_eq!(out.rejected, vec![(net("10.1.0.0/24"), ImportReject::FirstAsMismatch)]);

    let i = rib.peer_up(peer(2, LOCAL_ASN));
    let mut looped = learned(&[65100], 2);
    looped.rare_mut().originator_id = Some(ROUTER_ID);
    let out = announce(&mut rib, i, &["10.2.0.0/24"], &looped);
    assert_eq!(out.rejected, vec![(net("10.2.0.0/24"), ImportReject::OriginatorIsUs)]);
    // iBGP paths need not start with the peer's AS.
    let out = announce(&mut rib, i, &["10.2.0.0/24"], &learned(&[65100], 2));
    assert!(out.rejected.is_empty());
    assert_eq!(rib.prefix_count(V4), 1);
}

#[test]
fn rejected_announcement_withdraws_the_previous_path() {
    let mut rib = rib();
    let a = rib.peer_up(peer(1, 65001));
    announce(&mut rib, a, &["10.1.0.0/24"], &learned(&[65001], 1));
    assert_eq!(rib.accepted_count(a), 1);
    fib(&mut rib);
    let out = announce(&mut rib, a, &["10.1.0.0/24"], &learned(&[65001, LOCAL_ASN], 1));
    assert_eq!(out.rejected.len(), 1);
    assert_eq!(out.accepted_count, 0);
    assert!(rib.route(&net("10.1.0.0/24")).is_none());
    assert_eq!(fib(&mut rib), vec![RouteChange { prefix: net("10.1.0.0/24"), next_hops: vec![] }]);
}

#[test]
fn family_not_negotiated_is_rejected() {
    let mut rib = rib();
    let mut info = peer(1, 65001);
    info.families = vec![Family::IPV4_UNICAST];
    let a = rib.peer_up(info);
    let out = announce(&mut rib, a, &["2001:db8::/48"], &learned(&[65001], 1));
    assert_eq!(out.rejected, vec![(net("2001:db8::/48"), ImportReject::FamilyNotNegotiated)]);
}

#[test]
fn losing_paths_carry_a_reason() {
    let mut rib = rib();
    let a = rib.peer_up(peer(1, 65001));
    let b = rib.peer_up(peer(2, 65002));
    announce(&mut rib, a, &["10.1.0.0/24"], &learned(&[65001, 65100], 1));
    announce(&mut rib, b, &["10.1.0.0/24"], &learned(&[65002], 2));
    let paths = rib.route(&net("10.1.0.0/24")).unwrap();
    let from_a = paths.iter().find(|p| p.source() == Source::Peer(a)).unwrap();
    let from_b = paths.iter().find(|p| p.source() == Source::Peer(b)).unwrap();
    assert!(from_b.is_best());
    assert_eq!(from_a.reason(), Some(Rejected::LongerAsPath));
    assert_eq!(from_a.reason().unwrap().to_string(), "AS Path");
}

#[test]
fn ecmp_across_peers_of_the_same_neighbor_as() {
    let mut rib = rib();
    let a = rib.peer_up(peer(1, 65001));
    let b = rib.peer_up(peer(2, 65001));
    announce(&mut rib, a, &["10.1.0.0/24"], &learned(&[65001, 65100], 1));
    fib(&mut rib);
    announce(&mut rib, b, &["10.1.0.0/24"], &learned(&[65001, 65100], 2));
    assert_eq!(
        fib(&mut rib),
        vec![RouteChange { prefix: net("10.1.0.0/24"), next_hops: vec![hop(1), hop(2)] }]
    );
    let paths = rib.route(&net("10.1.0.0/24")).unwrap();
    assert!(paths.iter().all(Path::is_multipath));
    assert_eq!(paths.iter().filter(|p| p.is_best()).count(), 1);
    // Losing one path shrinks the set back to a single next hop.
    withdraw(&mut rib, a, &["10.1.0.0/24"]);
    assert_eq!(
        fib(&mut rib),
        vec![RouteChange { prefix: net("10.1.0.0/24"), next_hops: vec![hop(2)] }]
    );
}

#[test]
fn maximum_paths_caps_the_ecmp_set() {
    let mut config = RibConfig::new(ROUTER_ID);
    config.maximum_paths = 2;
    let mut rib = Rib::new(config);
    let mut last = Vec::new();
    for n in [3, 1, 2] {
        let id = rib.peer_up(peer(n, 65001));
        announce(&mut rib, id, &["10.1.0.0/24"], &learned(&[65001], n));
        last = fib(&mut rib);
    }
    // The two lowest router ids are chosen, whatever the arrival order.
    assert_eq!(
        last,
        vec![RouteChange { prefix: net("10.1.0.0/24"), next_hops: vec![hop(1), hop(2)] }]
    );
}

#[test]
fn multipath_relax_on_and_off() {
    for (relax, expected) in [(false, vec![nh(1)]), (true, vec![nh(1), nh(2)])] {
        let mut config = RibConfig::new(ROUTER_ID);
        config.multipath_relax = relax;
        let mut rib = Rib::new(config);
        let a = rib.peer_up(peer(1, 65001));
        let b = rib.peer_up(peer(2, 65002));
        announce(&mut rib, a, &["10.1.0.0/24"], &learned(&[65001, 65100], 1));
        announce(&mut rib, b, &["10.1.0.0/24"], &learned(&[65002, 65100], 2));
        let paths = rib.route(&net("10.1.0.0/24")).unwrap();
        let mut hops: Vec<NextHop> = paths
            .iter()
            .filter(|p| p.is_best() || p.is_multipath())
            .map(|p| p.attrs().next_hop)
            .collect();
        hops.sort_by_key(|h| format!("{h:?}"));
        assert_eq!(hops, expected, "relax={relax}");
    }
}

#[test]
fn set_config_reruns_decision_and_applies_always_block() {
    let mut rib = rib();
    let a = rib.peer_up(peer(1, 65001));
    let b = rib.peer_up(peer(2, 65001));
    announce(&mut rib, a, &["10.1.0.0/24", "10.2.0.0/24"], &learned(&[65001], 1));
    announce(&mut rib, b, &["10.1.0.0/24"], &learned(&[65001], 2));
    let mut config = RibConfig::new(ROUTER_ID);
    config.maximum_paths = 1;
    config.always_block = vec![net("10.2.0.0/16")];
    fib(&mut rib);
    rib.set_config(config);
    assert_eq!(
        fib(&mut rib),
        vec![
            RouteChange { prefix: net("10.2.0.0/24"), next_hops: vec![] },
            RouteChange { prefix: net("10.1.0.0/24"), next_hops: vec![hop(1)] },
        ]
    );
    assert_eq!(rib.accepted_count(a), 1);
    assert_eq!(rib.accepted_count(b), 1);
}

/// A narrower `to_receive` withdraws at once what the peer sent that it now refuses: from the
/// FIB, from the other peers, from the accepted count. A wider one changes nothing until the
/// peer sends its routes again (ROUTE-REFRESH), and then they are accepted.
#[test]
fn a_narrower_import_policy_withdraws_what_it_refuses_now() {
    let mut rib = rib();
    let a = rib.peer_up(peer(1, 65001));
    let c = rib.peer_up(peer_exporting(3, 65003, &["10.1.0.0/24", "10.2.0.0/24"]));
    announce(&mut rib, a, &["10.1.0.0/24", "10.2.0.0/24"], &learned(&[65001], 1));
    while rib.take_pending(c, V4).is_some() {}
    fib(&mut rib);
    let only_first = ImportPolicy {
        to_receive: ReceiveFilter::Filtered(vec![PrefixListEntry::exact(net("10.1.0.0/24"))]),
    };
    let changes = rib.set_import_policy(a, only_first.clone()).unwrap();
    assert_eq!(fib(&mut rib), vec![RouteChange { prefix: net("10.2.0.0/24"), next_hops: vec![] }]);
    assert!(changes.outbound.contains(&c), "{changes:?}");
    let batch = rib.take_pending(c, V4).unwrap();
    assert_eq!(batch.withdraw, vec![net("10.2.0.0/24")]);
    assert!(batch.announce.is_empty(), "{batch:?}");
    assert_eq!(rib.accepted_count(a), 1);
    assert!(rib.route(&net("10.2.0.0/24")).is_none());
    // The same policy again changes nothing.
    assert_eq!(rib.set_import_policy(a, only_first).unwrap(), Changes::default());

    // Wider again: nothing until the peer re-sends (the answer to a ROUTE-REFRESH).
    let all = ImportPolicy { to_receive: ReceiveFilter::All };
    assert_eq!(rib.set_import_policy(a, all).unwrap(), Changes::default());
    assert!(rib.route(&net("10.2.0.0/24")).is_none());
    let resent = announce(&mut rib, a, &["10.1.0.0/24", "10.2.0.0/24"], &learned(&[65001], 1));
    assert!(resent.rejected.is_empty());
    assert_eq!(
        fib(&mut rib),
        vec![RouteChange { prefix: net("10.2.0.0/24"), next_hops: vec![hop(1)] }]
    );
    assert_eq!(rib.accepted_count(a), 2);
}

#[test]
fn med_compared_only_within_the_same_neighbor_as() {
    let mut rib = rib();
    let a = rib.peer_up(peer(1, 65001));
    let b = rib.peer_up(peer(2, 65001));
    let c = rib.peer_up(peer(3, 65003));
    announce(
        &mut rib,
        a,
        &["10.1.0.0/24"],
        &PathAttributes { med: Some(50), ..learned(&[65001], 1) },
    );
    announce(
        &mut rib,
        b,
        &["10.1.0.0/24"],
        &PathAttributes { med: Some(10), ..learned(&[65001], 2) },
    );
    announce(
        &mut rib,
        c,
        &["10.1.0.0/24"],
        &PathAttributes { med: Some(99), ..learned(&[65003], 3) },
    );
    let paths = rib.route(&net("10.1.0.0/24")).unwrap();
    let reason = |id| paths.iter().find(|p| p.source() == Source::Peer(id)).unwrap().reason();
    assert_eq!(reason(a), Some(Rejected::HigherMed));
    // b (MED 10) and c (MED 99, other AS) are not compared on MED; b wins on router id.
    assert_eq!(reason(b), None);
    assert_eq!(reason(c), Some(Rejected::HigherRouterId));
}

#[test]
fn local_route_wins_and_is_advertised_with_ebgp_rewrite() {
    let mut rib = rib();
    let a = rib.peer_up(peer(1, 65001));
    announce(&mut rib, a, &["10.1.0.0/24"], &learned(&[65001], 1));
    let local = PathAttributes { med: Some(7), local_pref: Some(300), ..Default::default() };
    fib(&mut rib);
    let changes = rib.originate(net("10.1.0.0/24"), &local);
    // Our own route wins; there is nothing to install.
    assert_eq!(fib(&mut rib), vec![RouteChange { prefix: net("10.1.0.0/24"), next_hops: vec![] }]);
    let paths = rib.route(&net("10.1.0.0/24")).unwrap();
    let ours = paths.iter().find(|p| p.source() == Source::Local).unwrap();
    assert!(ours.is_best());
    assert!(ours.attrs().as_path.is_empty());
    let theirs = paths.iter().find(|p| p.source() == Source::Peer(a)).unwrap();
    assert_eq!(theirs.reason(), Some(Rejected::NotLocal));
    // Sent to the eBGP peer: our AS prepended, next hop self, our MED kept, no LOCAL_PREF.
    assert!(changes.outbound.contains(&a));
    let batch = rib.take_pending(a, V4).unwrap();
    let (attrs, prefixes) = single_group(&batch);
    assert_eq!(prefixes, vec![net("10.1.0.0/24")]);
    assert_eq!(attrs.as_path, AsPath::sequence(vec![LOCAL_ASN]));
    assert_eq!(attrs.next_hop, nh(100));
    assert_eq!(attrs.med, Some(7));
    assert_eq!(attrs.local_pref, None);
    assert_eq!(rib.pfx_sent(a).total(), 1);
}

#[test]
fn ebgp_export_of_learned_route_strips_med_local_pref_and_originator() {
    let mut rib = rib();
    let i = rib.peer_up(peer(1, LOCAL_ASN));
    let e = rib.peer_up(peer_exporting(2, 65002, &["10.1.0.0/24"]));
    let attrs = PathAttributes {
        med: Some(5),
        local_pref: Some(200),
        rare: RareAttributes {
            originator_id: Some(Ipv4Addr::new(10, 9, 9, 9)),
            cluster_list: vec![Ipv4Addr::new(10, 8, 8, 8)].into(),
            ..Default::default()
        }
        .into(),
        ..learned(&[65100], 1)
    };
    let out = announce(&mut rib, i, &["10.1.0.0/24"], &attrs);
    assert!(out.changes.outbound.contains(&e));
    let batch = rib.take_pending(e, V4).unwrap();
    let (sent, _) = single_group(&batch);
    assert_eq!(sent.as_path, AsPath::sequence(vec![LOCAL_ASN, 65100]));
    assert_eq!(sent.next_hop, nh(100));
    assert_eq!(sent.med, None);
    assert_eq!(sent.local_pref, None);
    assert_eq!(sent.originator_id(), None);
    assert!(sent.cluster_list().is_empty());
}

#[test]
fn ibgp_split_horizon_and_no_reflection_to_source() {
    let mut rib = rib();
    let prefixes = ["10.1.0.0/24"];
    let i1 = rib.peer_up(peer_exporting(1, LOCAL_ASN, &prefixes));
    let i2 = rib.peer_up(peer_exporting(2, LOCAL_ASN, &prefixes));
    let e = rib.peer_up(peer_exporting(3, 65003, &prefixes));
    let out = announce(&mut rib, i1, &prefixes, &learned(&[65100], 1));
    // RFC 4271 §9.2: not to the other iBGP peer, not back to the source; to the eBGP peer.
    assert_eq!(out.changes.outbound, BTreeSet::from([e]));
    assert!(rib.take_pending(i1, V4).is_none());
    assert!(rib.take_pending(i2, V4).is_none());
    assert!(rib.take_pending(e, V4).is_some());
}

#[test]
fn ibgp_export_keeps_learned_next_hop_and_sets_local_pref() {
    let mut rib = rib();
    let e = rib.peer_up(peer(1, 65001));
    let mut info = peer_exporting(2, LOCAL_ASN, &["10.1.0.0/24", "10.9.0.0/24"]);
    info.export.with_local_pref =
        vec![LocalPrefRule { local_pref: 250, prefixes: BTreeSet::from([net("10.9.0.0/24")]) }];
    let i = rib.peer_up(info);
    let received = PathAttributes { med: Some(5), local_pref: Some(999), ..learned(&[65001], 1) };
    announce(&mut rib, e, &["10.1.0.0/24"], &received);
    rib.originate(net("10.9.0.0/24"), &PathAttributes::default());
    let batch = rib.take_pending(i, V4).unwrap();
    assert_eq!(batch.announce.len(), 2);
    let (learned_out, learned_prefixes) = (&batch.announce[0].0, &batch.announce[0].1);
    assert_eq!(learned_prefixes, &vec![net("10.1.0.0/24")]);
    assert_eq!(learned_out.next_hop, nh(1));
    assert_eq!(learned_out.as_path, AsPath::sequence(vec![65001]));
    // The eBGP peer's LOCAL_PREF is ignored; ours (100) is sent. MED passes within the AS.
    assert_eq!(learned_out.local_pref, Some(100));
    assert_eq!(learned_out.med, Some(5));
    let (local_out, local_prefixes) = (&batch.announce[1].0, &batch.announce[1].1);
    assert_eq!(local_prefixes, &vec![net("10.9.0.0/24")]);
    assert_eq!(local_out.next_hop, nh(100));
    assert_eq!(local_out.local_pref, Some(250));
}

#[test]
fn with_local_pref_is_not_sent_to_ebgp() {
    let mut rib = rib();
    let mut info = peer(1, 65001);
    info.export.with_local_pref =
        vec![LocalPrefRule { local_pref: 250, prefixes: BTreeSet::from([net("10.9.0.0/24")]) }];
    let e = rib.peer_up(info);
    rib.originate(net("10.9.0.0/24"), &PathAttributes::default());
    let batch = rib.take_pending(e, V4).unwrap();
    assert_eq!(single_group(&batch).0.local_pref, None);
}

#[test]
fn well_known_communities_limit_export() {
    let mut rib = rib();
    let prefixes = ["10.1.0.0/24"];
    let src = rib.peer_up(peer(1, 65001));
    let other_e = rib.peer_up(peer_exporting(2, 65002, &prefixes));
    let i = rib.peer_up(peer_exporting(3, LOCAL_ASN, &prefixes));
    let no_export =
        PathAttributes { communities: vec![well_known::NO_EXPORT].into(), ..learned(&[65001], 1) };
    let out = announce(&mut rib, src, &prefixes, &no_export);
    assert_eq!(out.changes.outbound, BTreeSet::from([i]));
    assert!(rib.take_pending(i, V4).is_some());
    let no_advertise = PathAttributes {
        communities: vec![well_known::NO_ADVERTISE].into(),
        ..learned(&[65001], 1)
    };
    announce(&mut rib, src, &prefixes, &no_advertise);
    // The iBGP peer had the route: now it is withdrawn; the eBGP peer never had it.
    let batch = rib.take_pending(i, V4).unwrap();
    assert!(batch.announce.is_empty());
    assert_eq!(batch.withdraw, vec![net("10.1.0.0/24")]);
    assert!(rib.take_pending(other_e, V4).is_none());
}

#[test]
fn advertise_all_means_local_routes_only_and_filtered_is_exact() {
    let mut rib = rib();
    let all = rib.peer_up(peer(1, 65001));
    let filtered = rib.peer_up(peer_exporting(2, 65002, &["10.9.0.0/24"]));
    let src = rib.peer_up(peer(3, 65003));
    announce(&mut rib, src, &["10.1.0.0/24"], &learned(&[65003], 3));
    rib.originate(net("10.9.0.0/24"), &PathAttributes::default());
    rib.originate(net("10.9.0.0/25"), &PathAttributes::default());
    let sent_all = rib.take_pending(all, V4).unwrap();
    assert_eq!(single_group(&sent_all).1, vec![net("10.9.0.0/24"), net("10.9.0.0/25")]);
    let sent_filtered = rib.take_pending(filtered, V4).unwrap();
    assert_eq!(single_group(&sent_filtered).1, vec![net("10.9.0.0/24")]);
}

#[test]
fn with_community_adds_standard_and_large() {
    let mut rib = rib();
    let mut info = peer(1, 65001);
    let large = LargeCommunity { global_admin: 64512, local_data1: 1, local_data2: 2 };
    info.export.with_community = vec![
        CommunityRule {
            community: Community::Standard(0xFDE8_0001),
            prefixes: BTreeSet::from([net("10.9.0.0/24")]),
        },
        CommunityRule {
            community: Community::Large(large),
            prefixes: BTreeSet::from([net("10.9.0.0/24")]),
        },
        CommunityRule {
            community: Community::Standard(0xFDE8_0002),
            prefixes: BTreeSet::from([net("10.8.0.0/24")]),
        },
    ];
    let e = rib.peer_up(info);
    rib.originate(net("10.9.0.0/24"), &PathAttributes::default());
    rib.originate(net("10.8.0.0/24"), &PathAttributes::default());
    let batch = rib.take_pending(e, V4).unwrap();
    assert_eq!(batch.announce.len(), 2);
    let by_prefix = |p: &str| {
        batch.announce.iter().find(|(_, prefixes)| prefixes.contains(&net(p))).unwrap().0.clone()
    };
    let nine = by_prefix("10.9.0.0/24");
    assert_eq!(*nine.communities, [0xFDE8_0001]);
    assert_eq!(*nine.large_communities(), [large]);
    let eight = by_prefix("10.8.0.0/24");
    assert_eq!(*eight.communities, [0xFDE8_0002]);
    assert!(eight.large_communities().is_empty());
}

#[test]
fn ipv6_next_hop_self_carries_link_local() {
    let mut rib = rib();
    let mut info = peer(1, 65001);
    let global: Ipv6Addr = "2001:db8::100".parse().unwrap();
    let link_local: Ipv6Addr = "fe80::100".parse().unwrap();
    info.local_address = IpAddr::V6(global);
    info.local_link_local = Some(link_local);
    let e = rib.peer_up(info);
    rib.originate(net("2001:db8:9::/48"), &PathAttributes::default());
    let batch = rib.take_pending(e, Family::IPV6_UNICAST).unwrap();
    assert_eq!(batch.family, Family::IPV6_UNICAST);
    assert_eq!(
        single_group(&batch).0.next_hop,
        NextHop::V6 { global, link_local: Some(link_local) }
    );
}

#[test]
fn adj_rib_out_coalesces_before_drain() {
    let mut rib = rib();
    let e = rib.peer_up(peer(1, 65001));
    rib.originate(net("10.9.0.0/24"), &PathAttributes::default());
    rib.withdraw_local(net("10.9.0.0/24"));
    assert!(!rib.has_pending(e));
    assert!(rib.take_pending(e, V4).is_none());

    rib.originate(net("10.9.0.0/24"), &PathAttributes::default());
    assert!(rib.take_pending(e, V4).is_some());
    rib.originate(net("10.9.0.0/24"), &PathAttributes { med: Some(1), ..Default::default() });
    rib.withdraw_local(net("10.9.0.0/24"));
    let batch = rib.take_pending(e, V4).unwrap();
    assert!(batch.announce.is_empty());
    assert_eq!(batch.withdraw, vec![net("10.9.0.0/24")]);
    assert_eq!(rib.pfx_sent(e).total(), 0);
}

#[test]
fn peer_up_receives_the_whole_table_grouped() {
    let mut rib = rib();
    rib.originate(net("10.9.0.0/24"), &PathAttributes::default());
    rib.originate(net("10.9.1.0/24"), &PathAttributes::default());
    rib.originate(net("2001:db8:9::/48"), &PathAttributes::default());
    let e = rib.peer_up(peer(1, 65001));
    assert!(rib.has_pending(e));
    let batch = rib.take_pending(e, V4).unwrap();
    assert_eq!(single_group(&batch).1, vec![net("10.9.0.0/24"), net("10.9.1.0/24")]);
    assert!(rib.take_pending(e, V4).is_none());
    assert!(rib.take_pending(e, Family::IPV6_UNICAST).is_some());
    assert_eq!(rib.pfx_sent(e).total(), 3);
    assert_eq!(rib.advertised(e, V4), vec![net("10.9.0.0/24"), net("10.9.1.0/24")]);
}

/// Prefix-independent convergence: a session's loss is announced to the FIB as the loss of
/// the next hops only it used, before the withdrawals; its return before the first route.
#[test]
fn lost_and_returning_next_hops_reach_the_fib_before_the_routes() {
    let mut rib = rib();
    let a = rib.peer_up(peer(1, 65001));
    let b = rib.peer_up(peer(2, 65001));
    // c sends hop 2 as a third-party next hop: hop 2 is not lost when b goes.
    let c = rib.peer_up(peer(3, 65001));
    announce(&mut rib, a, &["10.1.0.0/24", "10.2.0.0/24"], &learned(&[65001], 1));
    announce(&mut rib, b, &["10.1.0.0/24", "10.2.0.0/24"], &learned(&[65001], 2));
    announce(&mut rib, c, &["10.3.0.0/24"], &learned(&[65001], 2));
    fib(&mut rib);

    rib.peer_down(a);
    let batches = rib.take_fib();
    assert_eq!(batches[0].hops_down(), &[hop(1)]);
    assert_eq!(batches[0].len(), 2, "the withdrawals follow the loss in the same batch");
    let changes: Vec<_> =
        batches[0].changes().map(|(p, o, n)| (p, o.to_vec(), n.to_vec())).collect();
    assert!(changes.contains(&(net("10.1.0.0/24"), vec![hop(1), hop(2)], vec![hop(2)])));

    rib.peer_down(b);
    let batches = rib.take_fib();
    assert!(batches.iter().all(|b| b.hops_down().is_empty()), "c still uses hop 2");

    let a = rib.peer_up(peer(1, 65001));
    announce(&mut rib, a, &["10.1.0.0/24"], &learned(&[65001], 1));
    let batches = rib.take_fib();
    assert_eq!(batches[0].hops_up(), &[hop(1)]);
    let changes: Vec<_> =
        batches[0].changes().map(|(p, o, n)| (p, o.to_vec(), n.to_vec())).collect();
    assert_eq!(changes, vec![(net("10.1.0.0/24"), vec![], vec![hop(1)])]);
    // Once back, not announced again.
    announce(&mut rib, a, &["10.2.0.0/24"], &learned(&[65001], 1));
    assert!(rib.take_fib().iter().all(|b| b.hops_up().is_empty()));
}

#[test]
fn peer_down_withdraws_and_readvertises_the_new_best() {
    let mut rib = rib();
    let prefixes = ["10.1.0.0/24"];
    let a = rib.peer_up(peer(1, 65001));
    let b = rib.peer_up(peer(2, 65002));
    let i = rib.peer_up(peer_exporting(3, LOCAL_ASN, &prefixes));
    announce(&mut rib, a, &prefixes, &learned(&[65001], 1));
    announce(&mut rib, b, &prefixes, &learned(&[65002, 65100], 2));
    assert_eq!(single_group(&rib.take_pending(i, V4).unwrap()).0.next_hop, nh(1));

    fib(&mut rib);
    let changes = rib.peer_down(a);
    assert_eq!(
        fib(&mut rib),
        vec![RouteChange { prefix: net("10.1.0.0/24"), next_hops: vec![hop(2)] }]
    );
    assert_eq!(changes.outbound, BTreeSet::from([i]));
    let batch = rib.take_pending(i, V4).unwrap();
    assert_eq!(single_group(&batch).0.next_hop, nh(2));
    assert!(rib.route(&net("10.1.0.0/24")).unwrap()[0].is_best());
    assert_eq!(rib.accepted_count(a), 0);
    assert!(rib.peer_info(a).is_none());

    rib.peer_down(b);
    assert_eq!(fib(&mut rib), vec![RouteChange { prefix: net("10.1.0.0/24"), next_hops: vec![] }]);
    let batch = rib.take_pending(i, V4).unwrap();
    assert_eq!(batch.withdraw, vec![net("10.1.0.0/24")]);
    assert_eq!(rib.prefix_count(V4), 0);
}

#[test]
fn equal_attributes_share_one_arc_and_sweep_frees() {
    let mut rib = rib();
    let a = rib.peer_up(peer(1, 65001));
    let attrs = learned(&[65001], 1);
    announce(&mut rib, a, &["10.1.0.0/24"], &attrs);
    announce(&mut rib, a, &["10.2.0.0/24"], &attrs);
    let first = Arc::clone(rib.route(&net("10.1.0.0/24")).unwrap()[0].attrs());
    let second = Arc::clone(rib.route(&net("10.2.0.0/24")).unwrap()[0].attrs());
    assert!(Arc::ptr_eq(&first, &second));
    assert_eq!(rib.attribute_sets(), 1);
    drop((first, second));
    rib.peer_down(a);
    assert_eq!(rib.sweep_attributes(), 1);
    assert_eq!(rib.attribute_sets(), 0);
}

#[test]
fn unknown_peer_is_an_error() {
    let mut rib = rib();
    let err = rib.apply_update(PeerId(42), &[], PathAttributes::default(), &[]);
    assert_eq!(err, Err(RibError::UnknownPeer(PeerId(42))));
}

/// Announces `count` distinct IPv4 /24s from one eBGP peer in UPDATEs of 1000 NLRI each.
fn load_routes(rib: &mut Rib, peer_id: PeerId, count: u32) {
    let attrs = learned(&[65001, 65100], 1);
    let mut batch = Vec::with_capacity(1000);
    for i in 0..count {
        let addr = Ipv4Addr::from(0x0100_0000u32.wrapping_add(i << 8));
        batch.push(IpNet::V4(Ipv4Net::new(addr, 24).unwrap()));
        if batch.len() == 1000 || i + 1 == count {
            let out = rib.apply_update(peer_id, &batch, &attrs, &[]).unwrap();
            assert!(out.rejected.is_empty());
            batch.clear();
        }
    }
}

#[test]
fn ten_thousand_routes_share_one_attribute_set() {
    let mut rib = rib();
    let a = rib.peer_up(peer(1, 65001));
    load_routes(&mut rib, a, 10_000);
    assert_eq!(rib.prefix_count(V4), 10_000);
    assert_eq!(rib.accepted_count(a), 10_000);
    assert_eq!(rib.attribute_sets(), 1);
}

fn rss_bytes() -> Option<usize> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: usize = statm.split_whitespace().nth(1)?.parse().ok()?;
    Some(pages * 4096)
}

/// Run with `cargo test --release -p uplink --lib million -- --ignored --nocapture
/// --test-threads=1` to see the timing and memory per route.
#[test]
#[ignore = "slow in debug builds; run in release for the timing"]
fn one_million_routes_from_one_peer() {
    let mut rib = rib();
    let a = rib.peer_up(peer(1, 65001));
    let rss_before = rss_bytes();
    let start = std::time::Instant::now();
    load_routes(&mut rib, a, 1_000_000);
    let elapsed = start.elapsed();
    let rss_after = rss_bytes();
    assert_eq!(rib.prefix_count(V4), 1_000_000);
    assert_eq!(rib.accepted_count(a), 1_000_000);
    let table = rib.approx_table_bytes();
    println!("1M routes inserted in {elapsed:?}");
    println!("Loc-RIB table estimate: {} bytes/route", table / 1_000_000);
    if let (Some(before), Some(after)) = (rss_before, rss_after) {
        println!("RSS growth: {} bytes/route", after.saturating_sub(before) / 1_000_000);
    }
    assert!(table / 1_000_000 <= 140);
    fib(&mut rib);
    let start = std::time::Instant::now();
    rib.peer_down(a);
    println!("peer down (1M withdrawals) in {:?}", start.elapsed());
    assert_eq!(fib(&mut rib).len(), 1_000_000);
    assert_eq!(rib.prefix_count(V4), 0);
}

/// The IPv6 half of the ingest benchmark on the RIB alone: 200,000 /48s in UPDATEs of 576 NLRI
/// (what fits one 4096-octet MP_REACH), FIB tracking off as with `install = false`. Run as the
/// one above.
#[test]
#[ignore = "slow in debug builds; run in release for the timing"]
fn two_hundred_thousand_ipv6_routes_from_one_peer() {
    let mut rib = rib();
    rib.set_fib_tracking(false);
    let a = rib.peer_up(peer(1, 65001));
    let attrs = PathAttributes {
        as_path: AsPath::sequence(vec![65001]),
        next_hop: NextHop::V6 { global: "2001:db8::1".parse().unwrap(), link_local: None },
        ..Default::default()
    };
    let start = std::time::Instant::now();
    let mut batch = Vec::with_capacity(576);
    for i in 0..200_000u128 {
        let addr = Ipv6Addr::from((0x2a00u128 << 112).wrapping_add(i << 80));
        batch.push(IpNet::V6(ipnet::Ipv6Net::new(addr, 48).unwrap()));
        if batch.len() == 576 || i + 1 == 200_000 {
            rib.apply_update(a, &batch, &attrs, &[]).unwrap();
            batch.clear();
        }
    }
    println!("200k IPv6 routes inserted in {:?}", start.elapsed());
    assert_eq!(rib.prefix_count(Family::IPV6_UNICAST), 200_000);
}

/// A full-table-like mix, like the ingest benchmark's `v4mix` case: `sets` attribute sets, each
/// with an AS_PATH of 1-10 ASNs, 0-6 communities and a MED on a third, over runs of
/// consecutive /24s (a few sets come out equal).
fn load_mixed_routes(rib: &mut Rib, peer_id: PeerId, count: u32, sets: u32) {
    let mut state = 0x2545_f491_4f6c_dd1du64;
    let mut next = move |n: u32| {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        (state % u64::from(n)) as u32
    };
    let mut batch = Vec::new();
    for set in 0..sets {
        let mut path = vec![65001];
        path.extend((0..next(10)).map(|_| 1 + next(64_000)));
        let mut communities: Vec<u32> =
            (0..next(7)).map(|_| ((1 + next(64_000)) << 16) | next(65_536)).collect();
        communities.sort_unstable();
        communities.dedup();
        let attrs = PathAttributes {
            as_path: AsPath::sequence(path),
            next_hop: nh(1),
            med: (next(3) == 0).then(|| next(1000)),
            communities: communities.into(),
            ..Default::default()
        };
        let (from, to) = (set * (count / sets), (set + 1) * (count / sets));
        batch.clear();
        for i in from..to {
            let addr = Ipv4Addr::from(0x0100_0000u32.wrapping_add(i << 8));
            batch.push(IpNet::V4(Ipv4Net::new(addr, 24).unwrap()));
        }
        rib.apply_update(peer_id, &batch, &attrs, &[]).unwrap();
    }
}

/// What an attribute set costs: run with `cargo test --release -p uplink --lib mix -- --ignored
/// --nocapture --test-threads=1`.
#[test]
#[ignore = "slow in debug builds; run in release for the memory figures"]
fn full_table_mix_memory() {
    let mut rib = rib();
    rib.set_fib_tracking(false);
    let a = rib.peer_up(peer(1, 65001));
    let before = rss_bytes().unwrap_or(0);
    load_mixed_routes(&mut rib, a, 900_000, 300_000);
    let after = rss_bytes().unwrap_or(0);
    let routes = rib.prefix_count(V4);
    let sets = rib.attribute_sets();
    let table = rib.approx_table_bytes();
    println!("{routes} routes, {sets} attribute sets");
    println!("size_of::<PathAttributes>() = {}", std::mem::size_of::<PathAttributes>());
    println!("RSS growth: {} B/route", (after - before) / routes);
    println!("Loc-RIB table estimate: {} B/route", table / routes);
    println!(
        "so an attribute set costs about {} B",
        (after - before).saturating_sub(table) / sets.max(1)
    );
    assert_eq!(routes, 900_000);
}

/// What `id` has been sent, kept up to date from its pending batches.
fn drain_into(rib: &mut Rib, id: PeerId, sent: &mut BTreeMap<IpNet, Arc<PathAttributes>>) {
    while let Some(batch) = rib.take_pending(id, V4) {
        for (attrs, prefixes) in batch.announce {
            for prefix in prefixes {
                sent.insert(prefix, attrs.clone());
            }
        }
        for prefix in batch.withdraw {
            sent.remove(&prefix);
        }
    }
}

/// A policy change re-exports only the prefixes it changes (`ExportPolicy::changed_prefixes`);
/// after each, the peer has been sent exactly what a peer that comes up with the new policy
/// is sent, attributes included.
#[test]
fn an_export_policy_change_leaves_the_peer_with_what_a_fresh_peer_is_sent() {
    let (a, b, c, d) = ("10.9.0.0/24", "10.8.0.0/24", "10.7.0.0/24", "10.1.0.0/24");
    let set = |prefixes: &[&str]| -> BTreeSet<IpNet> { prefixes.iter().map(|p| net(p)).collect() };
    let filtered = |prefixes: &[&str]| ExportPolicy {
        to_advertise: AdvertiseFilter::Filtered(set(prefixes)),
        ..Default::default()
    };
    let community = |value: u32, prefixes: &[&str]| CommunityRule {
        community: Community::Standard(value),
        prefixes: set(prefixes),
    };
    let local_pref =
        |local_pref: u32, prefixes: &[&str]| LocalPrefRule { local_pref, prefixes: set(prefixes) };
    let policies = vec![
        filtered(&[a]),
        filtered(&[a, b]),
        ExportPolicy { with_community: vec![community(1, &[b])], ..filtered(&[a, b, d]) },
        ExportPolicy {
            with_community: vec![community(1, &[b]), community(2, &[d])],
            ..filtered(&[b, d])
        },
        // The communities' order changes: every prefix again.
        ExportPolicy {
            with_community: vec![community(2, &[d, b]), community(1, &[b])],
            ..filtered(&[b, d])
        },
        ExportPolicy {
            with_community: vec![community(2, &[d, b]), community(1, &[b])],
            with_local_pref: vec![local_pref(250, &[b])],
            ..filtered(&[b, d])
        },
        ExportPolicy::default(),
        ExportPolicy { to_advertise: AdvertiseFilter::All, ..Default::default() },
        ExportPolicy { with_local_pref: vec![local_pref(50, &[c])], ..filtered(&[c]) },
        filtered(&[]),
    ];
    let mut rib = rib();
    let e = rib.peer_up(peer(1, 65001));
    announce(&mut rib, e, &[d], &learned(&[65001], 1));
    for prefix in [a, b, c] {
        rib.originate(net(prefix), &PathAttributes::default());
    }
    let watched = rib.peer_up(peer_exporting(2, LOCAL_ASN, &[]));
    let mut sent = BTreeMap::new();
    drain_into(&mut rib, watched, &mut sent);
    for (step, policy) in policies.into_iter().enumerate() {
        rib.set_export_policy(watched, policy.clone()).unwrap();
        drain_into(&mut rib, watched, &mut sent);
        let mut info = peer(3, LOCAL_ASN);
        info.export = policy;
        let fresh = rib.peer_up(info);
        let mut fresh_sent = BTreeMap::new();
        drain_into(&mut rib, fresh, &mut fresh_sent);
        // The two peers differ in address only: the same next hop (ours), the same attributes.
        assert_eq!(sent, fresh_sent, "step {step}");
        rib.peer_down(fresh);
    }
}
