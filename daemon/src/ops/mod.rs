//! Operating-system integration: logging, systemd notification, the drain state.

pub mod drain;
pub mod inhibit;
pub mod logging;
pub mod systemd;
