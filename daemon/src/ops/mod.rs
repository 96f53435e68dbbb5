//! Operating-system integration: logging, systemd notification, the drain state.

pub mod drain;
pub mod logging;
pub mod systemd;
