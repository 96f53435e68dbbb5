//! What the FIB writer is asked to install, in its own terms: next hops to reach a prefix
//! through, whichever protocol learned them (the changes themselves travel in `batch.rs`).

use std::fmt;
use std::net::{Ipv4Addr, Ipv6Addr};

/// A next hop as a routing protocol gives it, before the writer resolves it against the
/// kernel's routes to a gateway and an interface.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum NextHop {
    V4(Ipv4Addr),
    /// RFC 2545 §3: a global address, and the link-local address of the same router when it is
    /// on a shared link (then the kernel route goes via the link-local, on the global's link).
    V6 {
        global: Ipv6Addr,
        link_local: Option<Ipv6Addr>,
    },
}

impl fmt::Display for NextHop {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NextHop::V4(a) => write!(f, "{a}"),
            NextHop::V6 { global, link_local: Some(ll) } => write!(f, "{global} ({ll})"),
            NextHop::V6 { global, link_local: None } => write!(f, "{global}"),
        }
    }
}

/// Shown as text (`10.0.0.1`, `2001:db8::1 (fe80::1)`).
impl serde::Serialize for NextHop {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}
