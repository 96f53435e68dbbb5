//! The operator interface: a root-only Unix socket that answers `show` requests with JSON in
//! FRR's key names ([`dispatch`] routes each request to the module that answers it), and the
//! renderers that turn that JSON into vtysh-like text ([`render`], on the client side); and
//! the Prometheus endpoint ([`metrics`]), another read-only view of the same state.

pub mod announcements;
pub mod bfd;
pub mod bgp;
pub mod bgp_capabilities;
pub mod client;
pub mod dispatch;
pub mod fib;
pub mod kubernetes;
pub mod l2;
pub mod metrics;
pub mod network;
pub mod protocol;
pub mod render;
pub mod server;
pub mod vtysh;
pub mod waiting;

/// Default socket path (`--socket` overrides it on every subcommand).
pub const DEFAULT_SOCKET: &str = "/run/uplink/uplink.sock";
