//! Layer 2 mode (MetalLB's `L2Advertisement`, issue #25): one node answers ARP and NDP for
//! each address, chosen by `announce::l2`.
//!
//! - `arp`: the reply to a request and the announcement on takeover (frames in, frames out).

pub mod arp;
