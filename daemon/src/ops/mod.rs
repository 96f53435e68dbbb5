//! Operating-system integration: logging, systemd notification.

pub mod logging;
pub mod realtime;
pub mod systemd;
