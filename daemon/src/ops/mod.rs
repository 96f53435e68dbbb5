//! Operating-system integration: logging, systemd notification, the drain state, the
//! single-instance lock.

pub mod drain;
pub mod inhibit;
pub mod instance_lock;
pub mod logging;
pub mod systemd;
