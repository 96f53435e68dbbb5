//! What the FIB writer is asked to install, in its own terms: a prefix and the next hops to
//! reach it through, whichever protocol learned them. The routing instance a change belongs to
//! is the channel it arrives on ([`super::FibSender`]).

use ipnet::IpNet;
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

/// A prefix whose forwarding changed: the next hops to install now, in a canonical order.
/// Empty means "nothing to install": the prefix is gone, or the node itself originates it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RouteChange {
    pub prefix: IpNet,
    pub next_hops: Vec<NextHop>,
}
