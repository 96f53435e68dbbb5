//! The operator interface: a root-only Unix socket that answers `show` requests with JSON in
//! FRR's key names, and the renderers that turn that JSON into vtysh-like text.

pub mod announcements;
pub mod client;
pub mod handler;
pub mod network;
pub mod protocol;
pub mod render;
pub mod server;

/// Default socket path (`--socket` overrides it on every subcommand).
pub const DEFAULT_SOCKET: &str = "/run/uplink/uplink.sock";
