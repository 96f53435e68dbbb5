//! The test's own network namespace: Linux bridges are the L2 segments, each VM NIC is a tap on
//! one. QEMU runs inside the namespace, so its user-network port forwards (SSH) listen on the
//! namespace's loopback and never collide with another run or with the host.

use crate::cmd::{best_effort, must};
use std::process::Command;

/// Names start with this and end with the creating process's pid, so a later run can remove
/// the namespaces of runs that were killed before their Drop ran.
pub const NETNS_PREFIX: &str = "uvt-";

pub struct Netns {
    pub name: String,
}

impl Netns {
    pub fn create() -> Netns {
        reap_stale();
        let name = format!("{NETNS_PREFIX}{}", std::process::id());
        // A leftover of this very pid (a rerun in the same process) would make `add` fail.
        if list().iter().any(|n| n == &name) {
            best_effort("ip", &["netns", "del", &name]);
        }
        must("ip", &["netns", "add", &name]);
        let ns = Netns { name };
        ns.ip(&["link", "set", "lo", "up"]);
        ns
    }

    /// `ip -n NS ARGS...`, which must succeed.
    pub fn ip(&self, args: &[&str]) -> String {
        let mut all = vec!["-n", self.name.as_str()];
        all.extend_from_slice(args);
        must("ip", &all)
    }

    /// A bridge with no STP: ports forward as soon as they are up, like an unmanaged switch.
    pub fn bridge(&self, name: &str) {
        self.ip(&["link", "add", name, "type", "bridge", "stp_state", "0"]);
        self.ip(&["link", "set", name, "up"]);
    }

    /// A persistent tap on `bridge`; QEMU attaches to it by name.
    pub fn tap(&self, name: &str, bridge: &str) {
        self.ip(&["tuntap", "add", "dev", name, "mode", "tap"]);
        self.ip(&["link", "set", name, "master", bridge]);
        self.ip(&["link", "set", name, "up"]);
    }

    /// A command that runs `program` inside the namespace.
    pub fn command(&self, program: &str) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.name, program]);
        c
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        // Deleting the namespace deletes its bridges and taps.
        best_effort("ip", &["netns", "del", &self.name]);
    }
}

fn list() -> Vec<String> {
    must("ip", &["netns", "list"])
        .lines()
        .filter_map(|l| l.split_whitespace().next().map(str::to_owned))
        .collect()
}

/// Removes namespaces left by runs whose process no longer exists.
fn reap_stale() {
    for name in list() {
        let Some(pid) = name.strip_prefix(NETNS_PREFIX) else { continue };
        if pid.parse::<u32>().is_ok() && !std::path::Path::new(&format!("/proc/{pid}")).exists() {
            eprintln!("removing stale namespace {name} of a dead run");
            best_effort("ip", &["netns", "del", &name]);
        }
    }
}
