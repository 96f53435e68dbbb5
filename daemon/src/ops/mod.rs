//! Operating-system integration: logging, systemd notification.

pub mod logging;
pub mod systemd;
