//! Adj-RIB-Out of one peer and one family: what the peer was sent, and the changes not yet
//! drained, coalesced per prefix and grouped by attribute set so one UPDATE carries many NLRI.

use std::collections::HashMap;
use std::sync::Arc;

use ipnet::IpNet;

use crate::bgp::rib::loc_rib::{Prefix, PrefixMap};
use crate::bgp::wire::attributes::{Family, PathAttributes};

/// Changes to send to one peer for one family.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutboundBatch {
    pub family: Family,
    /// Prefixes to announce, grouped by their (interned) attribute set; each group fits the
    /// same UPDATE attributes. Groups are ordered by their first prefix, prefixes sorted.
    pub announce: Vec<(Arc<PathAttributes>, Vec<IpNet>)>,
    /// Prefixes to withdraw, sorted.
    pub withdraw: Vec<IpNet>,
}

#[derive(Debug)]
pub(crate) struct AdjRibOut<P: Prefix> {
    /// What the peer has been sent (drained), per prefix.
    sent: PrefixMap<P, Arc<PathAttributes>>,
    /// The desired state where it differs from `sent`: `Some` = announce, `None` = withdraw.
    pending: PrefixMap<P, Option<Arc<PathAttributes>>>,
}

impl<P: Prefix> Default for AdjRibOut<P> {
    fn default() -> Self {
        Self { sent: PrefixMap::default(), pending: PrefixMap::default() }
    }
}

impl<P: Prefix> AdjRibOut<P> {
    /// Records that the peer should now have `desired` for `prefix` (`None`: not at all).
    /// Repeated changes before a drain collapse to the difference from what was sent.
    pub(crate) fn set(&mut self, prefix: P, desired: Option<Arc<PathAttributes>>) {
        // The common case while learning a table from a peer that gets nothing back: skip
        // hashing the prefix twice for two empty maps.
        if desired.is_none() && self.sent.is_empty() && self.pending.is_empty() {
            return;
        }
        let unchanged = match (self.sent.get(&prefix), &desired) {
            (None, None) => true,
            (Some(sent), Some(new)) => Arc::ptr_eq(sent, new),
            _ => false,
        };
        if unchanged {
            self.pending.remove(&prefix);
        } else {
            self.pending.insert(prefix, desired);
        }
    }

    pub(crate) fn has_pending(&self) -> bool {
        !self.pending.is_empty()
    }

    /// Number of prefixes the peer has been sent and not withdrawn.
    /// Prefixes the peer should have once what is pending is sent (MetalLB's
    /// `pending_prefixes_total`).
    pub(crate) fn desired_count(&self) -> usize {
        let mut count = self.sent.len();
        for (prefix, desired) in self.pending.iter() {
            match (self.sent.contains_key(prefix), desired.is_some()) {
                (false, true) => count += 1,
                (true, false) => count = count.saturating_sub(1),
                _ => {}
            }
        }
        count
    }

    pub(crate) fn sent_count(&self) -> usize {
        self.sent.len()
    }

    /// Drains the pending changes, marking them as sent.
    pub(crate) fn take(&mut self) -> Option<OutboundBatch> {
        if self.pending.is_empty() {
            return None;
        }
        let mut groups: HashMap<*const PathAttributes, (Arc<PathAttributes>, Vec<P>)> =
            HashMap::new();
        let mut withdraw = Vec::new();
        for (prefix, desired) in self.pending.drain() {
            match desired {
                Some(attrs) => {
                    self.sent.insert(prefix, Arc::clone(&attrs));
                    groups
                        .entry(Arc::as_ptr(&attrs))
                        .or_insert_with(|| (attrs, Vec::new()))
                        .1
                        .push(prefix);
                }
                None => {
                    self.sent.remove(&prefix);
                    withdraw.push(prefix);
                }
            }
        }
        let mut announce: Vec<(Arc<PathAttributes>, Vec<P>)> = groups.into_values().collect();
        for (_, prefixes) in &mut announce {
            prefixes.sort_unstable();
        }
        announce.sort_by_key(|(_, prefixes)| prefixes.first().copied());
        withdraw.sort_unstable();
        Some(OutboundBatch {
            family: P::FAMILY,
            announce: announce
                .into_iter()
                .map(|(attrs, prefixes)| (attrs, prefixes.into_iter().map(Into::into).collect()))
                .collect(),
            withdraw: withdraw.into_iter().map(Into::into).collect(),
        })
    }

    /// Queues everything already sent to be sent again (RFC 2918 §4: a ROUTE-REFRESH asks for
    /// the whole Adj-RIB-Out of the family). Changes already pending win: they are newer.
    pub(crate) fn resend_all(&mut self) {
        for (prefix, attrs) in &self.sent {
            self.pending.entry(*prefix).or_insert_with(|| Some(Arc::clone(attrs)));
        }
    }

    pub(crate) fn sent_prefixes(&self) -> impl Iterator<Item = P> + '_ {
        self.sent.keys().copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ipnet::Ipv4Net;

    fn p(s: &str) -> Ipv4Net {
        s.parse().unwrap()
    }

    fn attrs(med: u32) -> Arc<PathAttributes> {
        Arc::new(PathAttributes { med: Some(med), ..Default::default() })
    }

    #[test]
    fn resend_all_repeats_what_was_sent_and_keeps_newer_changes() {
        let mut out = AdjRibOut::<Ipv4Net>::default();
        out.set(p("10.0.0.0/24"), Some(attrs(1)));
        out.set(p("10.0.1.0/24"), Some(attrs(1)));
        assert!(out.take().is_some());
        out.set(p("10.0.1.0/24"), None);
        out.resend_all();
        let batch = out.take().unwrap();
        assert_eq!(batch.announce.len(), 1);
        assert_eq!(batch.announce[0].1, vec![IpNet::V4(p("10.0.0.0/24"))]);
        assert_eq!(batch.withdraw, vec![IpNet::V4(p("10.0.1.0/24"))]);
    }

    #[test]
    fn announce_then_withdraw_before_drain_sends_nothing() {
        let mut out = AdjRibOut::<Ipv4Net>::default();
        out.set(p("10.0.0.0/24"), Some(attrs(1)));
        out.set(p("10.0.0.0/24"), None);
        assert!(!out.has_pending());
        assert_eq!(out.take(), None);
    }

    #[test]
    fn announce_then_withdraw_after_sent_sends_only_withdraw() {
        let mut out = AdjRibOut::<Ipv4Net>::default();
        let a = attrs(1);
        out.set(p("10.0.0.0/24"), Some(Arc::clone(&a)));
        assert!(out.take().is_some());
        assert_eq!(out.sent_count(), 1);
        out.set(p("10.0.0.0/24"), Some(attrs(2)));
        out.set(p("10.0.0.0/24"), None);
        let batch = out.take().unwrap();
        assert!(batch.announce.is_empty());
        assert_eq!(batch.withdraw, vec![IpNet::V4(p("10.0.0.0/24"))]);
        assert_eq!(out.sent_count(), 0);
        // Re-announcing what was sent is no change at all.
        out.set(p("10.0.0.0/24"), None);
        assert!(!out.has_pending());
    }

    #[test]
    fn reannouncing_the_sent_set_cancels_the_pending_change() {
        let mut out = AdjRibOut::<Ipv4Net>::default();
        let a = attrs(1);
        out.set(p("10.0.0.0/24"), Some(Arc::clone(&a)));
        out.take();
        out.set(p("10.0.0.0/24"), Some(attrs(2)));
        out.set(p("10.0.0.0/24"), Some(Arc::clone(&a)));
        assert_eq!(out.take(), None);
    }

    #[test]
    fn announcements_are_grouped_by_attribute_set() {
        let mut out = AdjRibOut::<Ipv4Net>::default();
        let a = attrs(1);
        let b = attrs(2);
        out.set(p("10.0.2.0/24"), Some(Arc::clone(&a)));
        out.set(p("10.0.1.0/24"), Some(Arc::clone(&b)));
        out.set(p("10.0.0.0/24"), Some(Arc::clone(&a)));
        let batch = out.take().unwrap();
        assert_eq!(batch.family, Family::IPV4_UNICAST);
        assert_eq!(batch.announce.len(), 2);
        assert!(Arc::ptr_eq(&batch.announce[0].0, &a));
        assert_eq!(
            batch.announce[0].1,
            vec![IpNet::V4(p("10.0.0.0/24")), IpNet::V4(p("10.0.2.0/24"))]
        );
        assert!(Arc::ptr_eq(&batch.announce[1].0, &b));
        assert_eq!(out.sent_count(), 3);
    }
}
