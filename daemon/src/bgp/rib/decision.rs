//! The BGP decision process (RFC 4271 §9.1.2) for one destination, as elimination steps over
//! the candidate paths so that every losing path carries the step it lost at, and multipath
//! (ECMP) selection among the paths that tie with the best up to the eBGP/iBGP step.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr};

use crate::bgp::policy::effective_local_pref;
use crate::bgp::rib::PeerId;
use crate::bgp::wire::attributes::PathAttributes;

/// Why a path is not the best one: the step of the decision process at which it was eliminated.
/// The text is FRR's (`bgp_path_selection_reason2str`), so `show` output reads the same.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Rejected {
    /// A locally originated path exists (FRR gives local routes weight 32768).
    NotLocal,
    LowerLocalPref,
    LongerAsPath,
    WorseOrigin,
    /// Higher MED than a path from the same neighbouring AS.
    HigherMed,
    /// iBGP-learned while an eBGP-learned path exists.
    InternalPeer,
    HigherRouterId,
    HigherPeerAddress,
}

impl fmt::Display for Rejected {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Rejected::NotLocal => "Weight",
            Rejected::LowerLocalPref => "Local Pref",
            Rejected::LongerAsPath => "AS Path",
            Rejected::WorseOrigin => "ORIGIN",
            Rejected::HigherMed => "MED",
            Rejected::InternalPeer => "Peer Type",
            Rejected::HigherRouterId => "Router ID",
            Rejected::HigherPeerAddress => "Neighbor IP",
        })
    }
}

/// One path as the decision process sees it, with what it needs to know about the peer.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Candidate<'a> {
    pub attrs: &'a PathAttributes,
    pub local: bool,
    pub ebgp: bool,
    /// The peer's BGP identifier, or ORIGINATOR_ID when present (RFC 4456 §9).
    pub router_id: Ipv4Addr,
    pub address: IpAddr,
    pub peer: PeerId,
}

impl Candidate<'_> {
    fn local_pref(&self) -> u32 {
        effective_local_pref(self.attrs, self.ebgp && !self.local)
    }

    /// Tie-break order of the last steps; the best comes first, which also orders multipaths.
    fn tie_break_key(&self) -> (Ipv4Addr, IpAddr, PeerId) {
        (self.router_id, self.address, self.peer)
    }
}

/// The outcome for one candidate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Verdict {
    pub best: bool,
    /// In the ECMP set (the best path included) when the set has more than one path.
    pub multipath: bool,
    pub reason: Option<Rejected>,
}

#[derive(Debug, Clone, Copy)]
pub(crate) struct MultipathConfig {
    /// Largest ECMP set, best path included; 0 is treated as 1.
    pub maximum_paths: u16,
    /// Allow paths through different neighbouring ASes into the set (FRR
    /// `bgp bestpath as-path multipath-relax`).
    pub relax: bool,
}

/// Keeps the alive candidates whose `key` is the best (largest with `max`), eliminating the
/// others with `reason`.
fn eliminate_by<K: Ord>(
    cands: &[Candidate<'_>],
    verdicts: &mut [Verdict],
    alive: &mut [bool],
    reason: Rejected,
    key: impl Fn(&Candidate<'_>) -> K,
) {
    let best = cands.iter().zip(alive.iter()).filter(|(_, &a)| a).map(|(c, _)| key(c)).max();
    let Some(best) = best else { return };
    for ((c, a), v) in cands.iter().zip(alive.iter_mut()).zip(verdicts.iter_mut()) {
        if *a && key(c) != best {
            *a = false;
            v.reason = Some(reason);
        }
    }
}

/// Runs the decision process over `cands`; the result has one verdict per candidate, in order.
pub(crate) fn select(cands: &[Candidate<'_>], multipath: MultipathConfig) -> Vec<Verdict> {
    let mut verdicts = vec![Verdict::default(); cands.len()];
    let mut alive = vec![true; cands.len()];
    // Locally originated paths first (FRR weight 32768 for `network` routes).
    eliminate_by(cands, &mut verdicts, &mut alive, Rejected::NotLocal, |c| c.local);
    // RFC 4271 §9.1.2.2 / §9.1.1: highest degree of preference (LOCAL_PREF).
    eliminate_by(cands, &mut verdicts, &mut alive, Rejected::LowerLocalPref, |c| c.local_pref());
    // RFC 4271 §9.1.2.2 a): shortest AS_PATH.
    eliminate_by(cands, &mut verdicts, &mut alive, Rejected::LongerAsPath, |c| {
        std::cmp::Reverse(c.attrs.as_path.selection_length())
    });
    // RFC 4271 §9.1.2.2 b): lowest ORIGIN.
    eliminate_by(cands, &mut verdicts, &mut alive, Rejected::WorseOrigin, |c| {
        std::cmp::Reverse(c.attrs.origin)
    });
    // RFC 4271 §9.1.2.2 c): MED is compared only among routes from the same neighbouring AS;
    // a missing MED counts as 0. Minimums are taken before anything is removed.
    let neighbor = |c: &Candidate<'_>| c.attrs.as_path.neighbor_asn();
    let med = |c: &Candidate<'_>| c.attrs.med.unwrap_or(0);
    let beaten: Vec<bool> = cands
        .iter()
        .enumerate()
        .map(|(i, c)| {
            alive.get(i).copied().unwrap_or(false)
                && cands
                    .iter()
                    .zip(alive.iter())
                    .any(|(other, &a)| a && neighbor(other) == neighbor(c) && med(other) < med(c))
        })
        .collect();
    for ((a, v), lost) in alive.iter_mut().zip(verdicts.iter_mut()).zip(beaten) {
        if lost {
            *a = false;
            v.reason = Some(Rejected::HigherMed);
        }
    }
    // RFC 4271 §9.1.2.2 d): eBGP-learned over iBGP-learned. (e) interior cost is equal here: we
    // run no IGP and all next hops are directly connected.)
    eliminate_by(cands, &mut verdicts, &mut alive, Rejected::InternalPeer, |c| c.ebgp);
    let equal_cost: Vec<usize> =
        alive.iter().enumerate().filter(|(_, &a)| a).map(|(i, _)| i).collect();
    // RFC 4271 §9.1.2.2 f): lowest BGP identifier (ORIGINATOR_ID if present, RFC 4456 §9).
    eliminate_by(cands, &mut verdicts, &mut alive, Rejected::HigherRouterId, |c| {
        std::cmp::Reverse(c.router_id)
    });
    // RFC 4271 §9.1.2.2 g): lowest peer address; then the peer id, so the result is total.
    eliminate_by(cands, &mut verdicts, &mut alive, Rejected::HigherPeerAddress, |c| {
        std::cmp::Reverse((c.address, c.peer))
    });
    let Some(best) = alive.iter().position(|&a| a) else { return verdicts };
    if let Some(v) = verdicts.get_mut(best) {
        v.best = true;
    }

    // Multipath: the paths that tied with the best through the eBGP/iBGP step, and unless
    // relaxed, through the same neighbouring AS; chosen in tie-break order. Local paths never
    // share (there is at most one).
    let Some(best_cand) = cands.get(best) else { return verdicts };
    if best_cand.local {
        return verdicts;
    }
    let mut set: Vec<usize> = equal_cost
        .into_iter()
        .filter(|&i| {
            cands.get(i).is_some_and(|c| multipath.relax || neighbor(c) == neighbor(best_cand))
        })
        .collect();
    set.sort_by_key(|&i| cands.get(i).map(Candidate::tie_break_key));
    set.truncate(usize::from(multipath.maximum_paths.max(1)));
    if set.len() > 1 {
        for i in set {
            if let Some(v) = verdicts.get_mut(i) {
                v.multipath = true;
            }
        }
    }
    verdicts
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bgp::wire::attributes::{AsPath, Origin};

    const MP: MultipathConfig = MultipathConfig { maximum_paths: 64, relax: false };

    fn attrs(path: &[u32]) -> PathAttributes {
        PathAttributes { as_path: AsPath::sequence(path.to_vec()), ..Default::default() }
    }

    fn cand(attrs: &PathAttributes, n: u8) -> Candidate<'_> {
        Candidate {
            attrs,
            local: false,
            ebgp: true,
            router_id: Ipv4Addr::new(10, 0, 0, n),
            address: IpAddr::V4(Ipv4Addr::new(192, 0, 2, n)),
            peer: PeerId(u32::from(n)),
        }
    }

    /// The second candidate differs from the first only by what `tweak` changes, and loses.
    fn loses_with(
        tweak_attrs: impl Fn(&mut PathAttributes),
        tweak: impl Fn(&mut Candidate<'_>),
    ) -> Vec<Verdict> {
        let a = attrs(&[65001, 65100]);
        let mut b = a.clone();
        tweak_attrs(&mut b);
        // Give the loser the better router id and address so only the tweak can decide.
        let winner = cand(&a, 2);
        let mut loser = cand(&b, 1);
        tweak(&mut loser);
        select(&[winner, loser], MultipathConfig { maximum_paths: 1, relax: false })
    }

    fn assert_lost(verdicts: &[Verdict], reason: Rejected) {
        assert!(verdicts[0].best, "{verdicts:?}");
        assert!(!verdicts[1].best);
        assert_eq!(verdicts[1].reason, Some(reason));
        assert_eq!(verdicts[0].reason, None);
    }

    #[test]
    fn local_wins_over_everything() {
        let learned = attrs(&[]);
        let local = PathAttributes { local_pref: Some(10), ..attrs(&[]) };
        let mut l = cand(&local, 9);
        l.local = true;
        let mut p = cand(&learned, 1);
        p.ebgp = false;
        let learned_high = PathAttributes { local_pref: Some(1000), ..attrs(&[]) };
        p.attrs = &learned_high;
        let v = select(&[p, l], MP);
        assert!(v[1].best);
        assert_eq!(v[0].reason, Some(Rejected::NotLocal));
        assert!(!v[0].multipath && !v[1].multipath);
    }

    #[test]
    fn higher_local_pref_wins_for_ibgp() {
        let v = loses_with(|b| b.local_pref = Some(50), |c| c.ebgp = false);
        // The loser is iBGP with LOCAL_PREF 50 < the eBGP path's default 100.
        assert_lost(&v, Rejected::LowerLocalPref);
    }

    #[test]
    fn local_pref_from_ebgp_is_ignored() {
        // RFC 4271 §5.1.5: an eBGP peer's LOCAL_PREF does not count; the tie goes on to the
        // router id, where the first candidate (10.0.0.1) wins.
        let a = PathAttributes { local_pref: Some(500), ..attrs(&[65001]) };
        let b = attrs(&[65001]);
        let v =
            select(&[cand(&a, 2), cand(&b, 1)], MultipathConfig { maximum_paths: 1, relax: false });
        assert!(v[1].best);
        assert_eq!(v[0].reason, Some(Rejected::HigherRouterId));
    }

    #[test]
    fn shorter_as_path_wins() {
        let v = loses_with(|b| b.as_path = AsPath::sequence(vec![65001, 65002, 65100]), |_| {});
        assert_lost(&v, Rejected::LongerAsPath);
    }

    #[test]
    fn lower_origin_wins() {
        let v = loses_with(|b| b.origin = Origin::Incomplete, |_| {});
        assert_lost(&v, Rejected::WorseOrigin);
    }

    #[test]
    fn lower_med_wins_within_same_neighbor_as() {
        let v = loses_with(|b| b.med = Some(10), |_| {});
        // The winner has no MED, which counts as 0.
        assert_lost(&v, Rejected::HigherMed);
    }

    #[test]
    fn med_not_compared_across_neighbor_ases() {
        let a = PathAttributes { med: Some(0), ..attrs(&[65001, 65100]) };
        let b = PathAttributes { med: Some(500), ..attrs(&[65002, 65100]) };
        // b has the lower router id; with MED ignored across ASes it wins there.
        let v = select(&[cand(&a, 2), cand(&b, 1)], MP);
        assert!(v[1].best);
        assert_eq!(v[0].reason, Some(Rejected::HigherRouterId));
    }

    #[test]
    fn ebgp_wins_over_ibgp() {
        let v = loses_with(|_| {}, |c| c.ebgp = false);
        assert_lost(&v, Rejected::InternalPeer);
    }

    #[test]
    fn lower_router_id_then_originator_id_wins() {
        let a = attrs(&[65001]);
        let v =
            select(&[cand(&a, 2), cand(&a, 1)], MultipathConfig { maximum_paths: 1, relax: false });
        assert!(v[1].best);
        assert_eq!(v[0].reason, Some(Rejected::HigherRouterId));
        // With ORIGINATOR_ID the candidate's router_id is the originator's (the RIB fills it).
        let mut c2 = cand(&a, 2);
        c2.router_id = Ipv4Addr::new(1, 1, 1, 1);
        let v = select(&[c2, cand(&a, 1)], MP);
        assert!(v[0].best);
    }

    #[test]
    fn lower_peer_address_wins() {
        let a = attrs(&[65001]);
        let mut x = cand(&a, 2);
        let mut y = cand(&a, 1);
        x.router_id = Ipv4Addr::new(10, 0, 0, 1);
        y.router_id = Ipv4Addr::new(10, 0, 0, 1);
        let v = select(&[x, y], MultipathConfig { maximum_paths: 1, relax: false });
        assert!(v[1].best);
        assert_eq!(v[0].reason, Some(Rejected::HigherPeerAddress));
    }

    #[test]
    fn ecmp_set_respects_maximum_paths_and_is_deterministic() {
        let a = attrs(&[65001, 65100]);
        let cands: Vec<Candidate<'_>> = [4, 2, 3, 1].iter().map(|&n| cand(&a, n)).collect();
        let v = select(&cands, MP);
        assert!(v[3].best);
        assert!(v.iter().all(|v| v.multipath));
        let v = select(&cands, MultipathConfig { maximum_paths: 2, relax: false });
        let mp: Vec<bool> = v.iter().map(|v| v.multipath).collect();
        // Router ids 1 and 2 (indices 3 and 1) are chosen.
        assert_eq!(mp, vec![false, true, false, true]);
        let v = select(&cands, MultipathConfig { maximum_paths: 1, relax: false });
        assert!(v.iter().all(|v| !v.multipath));
    }

    #[test]
    fn ecmp_excludes_paths_that_lost_before_peer_type() {
        let a = attrs(&[65001, 65100]);
        let longer = attrs(&[65001, 65002, 65100]);
        let mut ibgp = cand(&a, 3);
        ibgp.ebgp = false;
        let v = select(&[cand(&a, 1), cand(&longer, 2), ibgp, cand(&a, 4)], MP);
        let mp: Vec<bool> = v.iter().map(|v| v.multipath).collect();
        assert_eq!(mp, vec![true, false, false, true]);
        assert_eq!(v[3].reason, Some(Rejected::HigherRouterId));
    }

    #[test]
    fn multipath_relax_allows_different_neighbor_as() {
        let a = attrs(&[65001, 65100]);
        let b = attrs(&[65002, 65100]);
        let cands = [cand(&a, 1), cand(&b, 2)];
        let strict = select(&cands, MP);
        assert!(strict[0].best && !strict[0].multipath && !strict[1].multipath);
        let relaxed = select(&cands, MultipathConfig { maximum_paths: 64, relax: true });
        assert!(relaxed[0].best && relaxed[0].multipath && relaxed[1].multipath);
    }
}
