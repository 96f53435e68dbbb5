//! Path attribute types (RFC 4271 §5, RFC 4760, RFC 6793, RFC 1997, RFC 8092).
//!
//! These are the decoded, owned form that the RIB interns: one `Arc<PathAttributes>` per
//! distinct set. Everything here is `Eq + Hash` so that interning is a hash-set lookup.

use std::net::{Ipv4Addr, Ipv6Addr};

/// Address family identifier (RFC 4760 §3, IANA "Address Family Numbers").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Afi {
    Ipv4 = 1,
    Ipv6 = 2,
}

/// Subsequent address family identifier (RFC 4760 §6). Only unicast is spoken.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Safi {
    Unicast = 1,
}

/// An AFI/SAFI pair, as negotiated by the Multiprotocol capability.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Family {
    pub afi: Afi,
    pub safi: Safi,
}

impl Family {
    pub const IPV4_UNICAST: Family = Family { afi: Afi::Ipv4, safi: Safi::Unicast };
    pub const IPV6_UNICAST: Family = Family { afi: Afi::Ipv6, safi: Safi::Unicast };

    /// The family of a wire AFI/SAFI pair (RFC 4760 §3), or `None` for one this speaker does
    /// not know.
    pub fn from_wire(afi: u16, safi: u8) -> Option<Family> {
        let afi = match afi {
            1 => Afi::Ipv4,
            2 => Afi::Ipv6,
            _ => return None,
        };
        let safi = match safi {
            1 => Safi::Unicast,
            _ => return None,
        };
        Some(Family { afi, safi })
    }
}

/// ORIGIN (RFC 4271 §5.1.1). The order is the preference order of §9.1.2.2 c).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub enum Origin {
    #[default]
    Igp = 0,
    Egp = 1,
    Incomplete = 2,
}

/// AS_PATH segment types (RFC 4271 §4.3, RFC 5065 §3 for the confederation kinds).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SegmentKind {
    Set = 1,
    Sequence = 2,
    ConfedSequence = 3,
    ConfedSet = 4,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct AsSegment {
    pub kind: SegmentKind,
    /// Always 4-octet ASNs: a 2-octet peer's path is widened, and merged with AS4_PATH, at
    /// decode time (RFC 6793 §4.2.3).
    pub asns: Vec<u32>,
}

/// AS_PATH with 4-octet ASNs, in one allocation (a full table has a few hundred thousand
/// distinct paths, each interned once): every segment is a header word, `kind << 16 | number
/// of ASNs`, followed by its ASNs. An empty path allocates nothing.
#[derive(Clone, PartialEq, Eq, Hash, Default)]
pub struct AsPath {
    words: Box<[u32]>,
}

/// One segment of an [`AsPath`], borrowed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Segment<'a> {
    pub kind: SegmentKind,
    pub asns: &'a [u32],
}

impl Segment<'_> {
    pub fn to_owned(self) -> AsSegment {
        AsSegment { kind: self.kind, asns: self.asns.to_vec() }
    }
}

impl SegmentKind {
    fn from_header(word: u32) -> SegmentKind {
        match word >> 16 {
            1 => SegmentKind::Set,
            3 => SegmentKind::ConfedSequence,
            4 => SegmentKind::ConfedSet,
            _ => SegmentKind::Sequence,
        }
    }
}

/// The segments of an [`AsPath`].
pub struct Segments<'a> {
    rest: &'a [u32],
}

impl<'a> Iterator for Segments<'a> {
    type Item = Segment<'a>;

    fn next(&mut self) -> Option<Segment<'a>> {
        let (header, rest) = self.rest.split_first()?;
        let len = (*header & 0xffff) as usize;
        let (asns, rest) = rest.split_at_checked(len).unwrap_or((rest, &[]));
        self.rest = rest;
        Some(Segment { kind: SegmentKind::from_header(*header), asns })
    }
}

impl std::fmt::Debug for AsPath {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.segments()).finish()
    }
}

/// AGGREGATOR (RFC 4271 §5.1.7), merged with AS4_AGGREGATOR (RFC 6793 §4.2.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Aggregator {
    pub asn: u32,
    pub address: Ipv4Addr,
}

/// A large community (RFC 8092 §3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LargeCommunity {
    pub global_admin: u32,
    pub local_data1: u32,
    pub local_data2: u32,
}

/// Well-known communities (RFC 1997, RFC 3765, RFC 8326).
pub mod well_known {
    pub const GRACEFUL_SHUTDOWN: u32 = 0xFFFF_0000;
    pub const BLACKHOLE: u32 = 0xFFFF_029A;
    pub const NO_EXPORT: u32 = 0xFFFF_FF01;
    pub const NO_ADVERTISE: u32 = 0xFFFF_FF02;
    pub const NO_EXPORT_SUBCONFED: u32 = 0xFFFF_FF03;
    pub const NO_PEER: u32 = 0xFFFF_FF04;
}

/// The next hop of a path: the NEXT_HOP attribute for IPv4 NLRI, the MP_REACH_NLRI next hop
/// for IPv6 (RFC 4760 §3, RFC 2545 §3: a global address and optionally a link-local one).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum NextHop {
    /// Locally originated routes before export fills in the session's address.
    #[default]
    Unspecified,
    V4(Ipv4Addr),
    V6 {
        global: Ipv6Addr,
        link_local: Option<Ipv6Addr>,
    },
}

/// An attribute this speaker does not interpret, kept as received. Optional transitive ones are
/// passed on with the Partial bit set (RFC 4271 §5); optional non-transitive ones are dropped.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct RawAttribute {
    pub flags: u8,
    pub type_code: u8,
    pub value: Vec<u8>,
}

/// Attribute flag bits (RFC 4271 §4.3).
pub mod flags {
    pub const OPTIONAL: u8 = 0x80;
    pub const TRANSITIVE: u8 = 0x40;
    pub const PARTIAL: u8 = 0x20;
    pub const EXTENDED_LENGTH: u8 = 0x10;
}

/// Attribute type codes (IANA "BGP Path Attributes").
pub mod type_code {
    pub const ORIGIN: u8 = 1;
    pub const AS_PATH: u8 = 2;
    pub const NEXT_HOP: u8 = 3;
    pub const MULTI_EXIT_DISC: u8 = 4;
    pub const LOCAL_PREF: u8 = 5;
    pub const ATOMIC_AGGREGATE: u8 = 6;
    pub const AGGREGATOR: u8 = 7;
    pub const COMMUNITIES: u8 = 8;
    pub const ORIGINATOR_ID: u8 = 9;
    pub const CLUSTER_LIST: u8 = 10;
    pub const MP_REACH_NLRI: u8 = 14;
    pub const MP_UNREACH_NLRI: u8 = 15;
    pub const AS4_PATH: u8 = 17;
    pub const AS4_AGGREGATOR: u8 = 18;
    pub const LARGE_COMMUNITIES: u8 = 32;
}

/// The attributes of one path, without the NLRI. The next hop is part of the set because
/// every route from one peer usually shares it, so interning stays effective.
///
/// A full table has a few hundred thousand distinct sets, so the size of one counts: the
/// attributes nearly every route carries are fields here, the ones few routes carry live out of
/// line in [`RareAttributes`] (one pointer while absent). With its `Arc` counts a set is one
/// 112-octet allocation (a 128-octet glibc chunk) plus its AS_PATH and community lists
/// (docs/BENCHMARKS.md).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct PathAttributes {
    pub origin: Origin,
    pub as_path: AsPath,
    pub next_hop: NextHop,
    pub med: Option<u32>,
    pub local_pref: Option<u32>,
    /// A boxed slice, not a `Vec`: a set is built once and interned, and a slice is 8 octets
    /// smaller and never has spare capacity.
    pub communities: Box<[u32]>,
    /// ATOMIC_AGGREGATE, AGGREGATOR, large communities, the route reflection attributes and
    /// unrecognised ones: read them through the accessors below, change them with
    /// [`rare_mut`](Self::rare_mut).
    pub rare: RareBox,
}

/// The attributes that few routes carry.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct RareAttributes {
    pub atomic_aggregate: bool,
    pub aggregator: Option<Aggregator>,
    pub large_communities: Box<[LargeCommunity]>,
    /// RFC 4456 §8, kept for loop detection and display; never sent to eBGP peers.
    pub originator_id: Option<Ipv4Addr>,
    pub cluster_list: Box<[Ipv4Addr]>,
    /// Unrecognised optional transitive attributes, in the order received.
    pub unknown: Box<[RawAttribute]>,
}

impl RareAttributes {
    fn is_empty(&self) -> bool {
        *self == Self::default()
    }
}

/// [`RareAttributes`] out of line: nothing while all of them are absent. Absent and present
/// but empty compare and hash the same, so a set that had one of them removed interns with
/// the sets that never had it.
#[derive(Debug, Clone, Default)]
pub struct RareBox(Option<Box<RareAttributes>>);

impl RareBox {
    pub fn get(&self) -> Option<&RareAttributes> {
        self.0.as_deref().filter(|rare| !rare.is_empty())
    }

    /// Frees the box if nothing is left in it (before a set is interned).
    pub fn shrink(&mut self) {
        if self.0.as_deref().is_some_and(RareAttributes::is_empty) {
            self.0 = None;
        }
    }
}

impl From<RareAttributes> for RareBox {
    fn from(rare: RareAttributes) -> Self {
        let mut boxed = Self(Some(Box::new(rare)));
        boxed.shrink();
        boxed
    }
}

impl PartialEq for RareBox {
    fn eq(&self, other: &Self) -> bool {
        self.get() == other.get()
    }
}

impl Eq for RareBox {}

impl std::hash::Hash for RareBox {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.get().hash(state)
    }
}

impl PathAttributes {
    pub fn atomic_aggregate(&self) -> bool {
        self.rare.get().is_some_and(|r| r.atomic_aggregate)
    }

    pub fn aggregator(&self) -> Option<Aggregator> {
        self.rare.get().and_then(|r| r.aggregator)
    }

    pub fn large_communities(&self) -> &[LargeCommunity] {
        self.rare.get().map_or(&[], |r| &r.large_communities)
    }

    pub fn originator_id(&self) -> Option<Ipv4Addr> {
        self.rare.get().and_then(|r| r.originator_id)
    }

    pub fn cluster_list(&self) -> &[Ipv4Addr] {
        self.rare.get().map_or(&[], |r| &r.cluster_list)
    }

    pub fn unknown(&self) -> &[RawAttribute] {
        self.rare.get().map_or(&[], |r| &r.unknown)
    }

    /// The rare attributes, to change; allocates them if absent ([`RareBox::shrink`] undoes
    /// that when nothing was set).
    pub fn rare_mut(&mut self) -> &mut RareAttributes {
        self.rare.0.get_or_insert_with(Box::default)
    }
}

impl AsPath {
    /// A path of one AS_SEQUENCE.
    pub fn sequence(asns: Vec<u32>) -> Self {
        if asns.is_empty() {
            return Self::default();
        }
        Self::from_segments([AsSegment { kind: SegmentKind::Sequence, asns }])
    }

    /// A path of these segments, in order. A segment longer than the 16-bit length field of
    /// the header is cut (the wire allows 255 ASNs a segment, far less).
    pub fn from_segments(segments: impl IntoIterator<Item = AsSegment>) -> Self {
        let mut words = Vec::new();
        for segment in segments {
            let len = segment.asns.len().min(0xffff);
            words.push(((segment.kind as u32) << 16) | len as u32);
            words.extend(segment.asns.iter().take(len));
        }
        Self { words: words.into() }
    }

    pub fn segments(&self) -> Segments<'_> {
        Segments { rest: &self.words }
    }

    /// The segments, owned (to build a new path from).
    pub fn to_segments(&self) -> Vec<AsSegment> {
        self.segments().map(Segment::to_owned).collect()
    }

    pub fn is_empty(&self) -> bool {
        self.words.is_empty()
    }

    /// Heap bytes of the path.
    pub fn heap_bytes(&self) -> usize {
        self.words.len() * 4
    }

    /// Path length for route selection (RFC 4271 §9.1.2.2 a): an AS_SET counts as one, and
    /// confederation segments do not count (RFC 5065 §5.3).
    pub fn selection_length(&self) -> usize {
        self.segments()
            .map(|s| match s.kind {
                SegmentKind::Sequence => s.asns.len(),
                SegmentKind::Set => 1,
                SegmentKind::ConfedSequence | SegmentKind::ConfedSet => 0,
            })
            .sum()
    }

    /// The neighbouring AS: the first ASN of a leading AS_SEQUENCE (RFC 4271 §9.1.2.2 c uses it
    /// to decide when MEDs are comparable).
    pub fn neighbor_asn(&self) -> Option<u32> {
        let first = self.segments().next()?;
        match first.kind {
            SegmentKind::Sequence => first.asns.first().copied(),
            _ => None,
        }
    }

    /// Whether `asn` appears anywhere in the path (loop detection, RFC 4271 §9.1.2).
    pub fn contains(&self, asn: u32) -> bool {
        self.segments().any(|s| s.asns.contains(&asn))
    }

    /// Prepends `asn` as an eBGP speaker does on export (RFC 4271 §5.1.2): into the leading
    /// AS_SEQUENCE if there is room (255 ASNs a segment), else as a new segment.
    pub fn prepend(&mut self, asn: u32) {
        let mut segments = self.to_segments();
        match segments.first_mut() {
            Some(first) if first.kind == SegmentKind::Sequence && first.asns.len() < 255 => {
                first.asns.insert(0, asn);
            }
            _ => segments.insert(0, AsSegment { kind: SegmentKind::Sequence, asns: vec![asn] }),
        }
        *self = Self::from_segments(segments);
    }

    /// All ASNs in order, for display.
    pub fn iter_asns(&self) -> impl Iterator<Item = u32> + '_ {
        self.segments().flat_map(|s| s.asns.iter().copied())
    }
}

impl std::fmt::Display for AsPath {
    /// FRR's notation: sequences space-separated, sets in braces, confederations in parentheses.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut first = true;
        for seg in self.segments() {
            if !first {
                f.write_str(" ")?;
            }
            first = false;
            let list = seg.asns.iter().map(u32::to_string).collect::<Vec<_>>();
            match seg.kind {
                SegmentKind::Sequence => write!(f, "{}", list.join(" "))?,
                SegmentKind::Set => write!(f, "{{{}}}", list.join(","))?,
                SegmentKind::ConfedSequence => write!(f, "({})", list.join(" "))?,
                SegmentKind::ConfedSet => write!(f, "[{}]", list.join(","))?,
            }
        }
        Ok(())
    }
}

/// The RIB takes an UPDATE's attributes by value or by reference
/// (`crate::bgp::rib::Rib::apply_update`): by value, a new set is interned without a copy.
impl From<PathAttributes> for std::borrow::Cow<'_, PathAttributes> {
    fn from(attrs: PathAttributes) -> Self {
        std::borrow::Cow::Owned(attrs)
    }
}

impl<'a> From<&'a PathAttributes> for std::borrow::Cow<'a, PathAttributes> {
    fn from(attrs: &'a PathAttributes) -> Self {
        std::borrow::Cow::Borrowed(attrs)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_as_path_keeps_its_segments_in_one_allocation() {
        let segments = vec![
            AsSegment { kind: SegmentKind::Sequence, asns: vec![65001, 65002] },
            AsSegment { kind: SegmentKind::Set, asns: vec![7, 8, 9] },
            AsSegment { kind: SegmentKind::ConfedSequence, asns: vec![64512] },
        ];
        let path = AsPath::from_segments(segments.clone());
        assert_eq!(path.to_segments(), segments);
        assert_eq!(path.heap_bytes(), 4 * (3 + 6));
        assert_eq!(path.selection_length(), 3);
        assert_eq!(path.neighbor_asn(), Some(65001));
        assert!(path.contains(8) && !path.contains(65003));
        assert_eq!(path.to_string(), "65001 65002 {7,8,9} (64512)");
        let mut prepended = path.clone();
        prepended.prepend(65000);
        assert_eq!(prepended.to_string(), "65000 65001 65002 {7,8,9} (64512)");
        assert!(AsPath::default().is_empty());
        assert_eq!(AsPath::sequence(vec![]), AsPath::default());
        assert_eq!(
            format!("{:?}", AsPath::sequence(vec![1])),
            "[Segment { kind: Sequence, asns: [1] }]"
        );
    }

    /// What an interned attribute set costs before its lists (docs/BENCHMARKS.md): with the
    /// two `Arc` counts at most 112 octets, one 128-octet glibc chunk.
    #[test]
    fn an_attribute_set_stays_small() {
        let size = std::mem::size_of::<PathAttributes>();
        assert!(size + 16 <= 112, "{size}");
    }

    #[test]
    fn rare_attributes_absent_or_emptied_are_the_same_set() {
        use std::hash::BuildHasher;
        let plain = PathAttributes { med: Some(5), ..Default::default() };
        let mut emptied = plain.clone();
        emptied.rare_mut().aggregator =
            Some(Aggregator { asn: 1, address: Ipv4Addr::new(192, 0, 2, 1) });
        assert_ne!(plain, emptied);
        assert_eq!(emptied.aggregator().map(|a| a.asn), Some(1));
        emptied.rare_mut().aggregator = None;
        assert_eq!(plain, emptied);
        let hasher = std::hash::RandomState::new();
        assert_eq!(hasher.hash_one(&plain), hasher.hash_one(&emptied));
        emptied.rare.shrink();
        assert!(emptied.rare.0.is_none());
        let from_empty: RareBox = RareAttributes::default().into();
        assert!(from_empty.0.is_none());
    }
}
