//! One uplink per network namespace. Two daemons writing the same kernel FIB would remove each
//! other's routes at every start and resync, and fight over port 179 and the BFD ports.
//!
//! The lock is an abstract Unix socket, `@uplink.lock`: the kernel scopes abstract names to
//! the network namespace, which is exactly the FIB's scope (daemons in other namespaces, as
//! in the tests, do not see each other), and releases it when the process exits however it
//! exits, so a `kill -9` leaves no stale lock behind, unlike a lock file (and `flock` on a
//! file in /run would lock the whole host, every namespace at once).

use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixListener};

/// The abstract socket's name (`ss -xlp | grep uplink.lock` shows who holds it).
pub const LOCK_NAME: &str = "uplink.lock";

/// Held for the daemon's lifetime: dropping it releases the lock.
#[derive(Debug)]
pub struct InstanceLock {
    _socket: UnixListener,
}

/// Takes the lock of this network namespace, or says who has it.
pub fn acquire() -> Result<InstanceLock, String> {
    let address = SocketAddr::from_abstract_name(LOCK_NAME)
        .map_err(|e| format!("cannot name the single-instance lock: {e}"))?;
    match UnixListener::bind_addr(&address) {
        Ok(socket) => Ok(InstanceLock { _socket: socket }),
        Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => Err(format!(
            "another uplink is running in this network namespace (it holds the abstract socket \
             @{LOCK_NAME}; `ss -xlp | grep {LOCK_NAME}` names its pid): two daemons would delete \
             each other's kernel routes, so this one does not start"
        )),
        Err(e) => Err(format!("cannot take the single-instance lock @{LOCK_NAME}: {e}")),
    }
}
