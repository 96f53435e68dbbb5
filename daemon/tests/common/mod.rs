//! Test harness for the interop tier: network namespaces joined by veth pairs, real FRR, BIRD,
//! GoBGP and ExaBGP processes, and `uplink` itself, all torn down when the `Lab` is dropped —
//! also when the test fails.
//!
//! A missing tool is a loud failure, never a skip: `make test` installs them.

#![allow(dead_code)] // each test binary uses a different part of the harness

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

pub mod control_plane;
pub mod peers;
pub mod speakers;
#[allow(unused_imports)] // only the Kubernetes tests use the control plane
pub use control_plane::*;
pub use peers::*;
#[allow(unused_imports)] // not every test binary uses the speaker matrix
pub use speakers::*;

static COUNTER: AtomicUsize = AtomicUsize::new(0);

/// uplink's route protocol (`proto uplink` where `/etc/iproute2/rt_protos.d/uplink.conf` is
/// installed; the number works everywhere): `ip route show proto 117`.
pub const UPLINK_PROTO: &str = "117";

/// Config text: the default network's layer-3 pod subnet `10.244.{slot}.0/24` (of
/// 10.244.0.0/16), announced into the default VRF by a RouteAdvertisement — what a drain
/// keeps announced.
pub fn pod_network(slot: &str) -> String {
    format!(
        r#"
[[networks]]
name = "default"
topology = "layer3"
subnet = "10.244.0.0/16"
host_subnet = "10.244.{slot}.0/24"

[[route_advertisements]]
name = "default"
advertisements = ["PodNetwork"]
network_selectors = [{{ network_selection_type = "DefaultNetwork" }}]
node_selector = {{}}
target_vrf = "default"
"#
    )
}

/// Fails the test with a clear message when a tool the test needs is not installed.
pub fn require_tool(path: &str) {
    assert!(
        Path::new(path).exists() || which(path),
        "{path} is not installed: run `make test` (it installs the Debian packages the tests need)"
    );
}

fn which(name: &str) -> bool {
    Command::new("sh")
        .arg("-c")
        .arg(format!("command -v {name}"))
        .stdout(Stdio::null())
        .status()
        .map(|s| s.success())
        .unwrap_or(false)
}

/// Runs a command, panicking with its output when it fails.
pub fn run(args: &[&str]) -> String {
    let out = Command::new(args[0])
        .args(&args[1..])
        .output()
        .unwrap_or_else(|e| panic!("cannot run {args:?}: {e}"));
    assert!(
        out.status.success(),
        "{args:?} failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Runs a command and returns whether it succeeded, with its combined output.
pub fn try_run(args: &[&str]) -> (bool, String) {
    match Command::new(args[0]).args(&args[1..]).output() {
        Ok(out) => (
            out.status.success(),
            format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ),
        ),
        Err(e) => (false, e.to_string()),
    }
}

/// Polls `f` until it returns `Ok`, or panics after `timeout` with the last error.
pub fn wait_for<T>(what: &str, timeout: Duration, mut f: impl FnMut() -> Result<T, String>) -> T {
    let start = Instant::now();
    let mut last = String::new();
    while start.elapsed() < timeout {
        match f() {
            Ok(v) => return v,
            Err(e) => last = e,
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    panic!("timed out after {timeout:?} waiting for {what}: {last}");
}

/// `ip route show ARGS` in `ns`, each `nhid N` followed by the nexthop lines of the group and
/// its members (`via GATEWAY dev IF`): uplink turns the kernel's nexthop compatibility mode
/// off, so its routes name only their group.
/// A group replaced between the two reads (a reload) is left out: callers poll.
pub fn route_with_nexthops(ns: &Ns, args: &str) -> String {
    let script = format!(
        "r=$(ip route show {args}); echo \"$r\"; \
         for id in $(echo \"$r\" | grep -o 'nhid [0-9]*' | cut -d' ' -f2); do \
           for m in $(ip nexthop show id $id 2>/dev/null | grep -o 'group [0-9/,]*' | cut -d' ' -f2 \
                      | tr '/' ' ' | sed 's/,[0-9]*//g') $id; do ip nexthop show id $m 2>/dev/null; done; \
         done; true"
    );
    ns.run(&["sh", "-c", &script])
}

/// A network namespace owned by a lab.
#[derive(Clone, Debug)]
pub struct Ns {
    pub name: String,
}

impl Ns {
    /// `ip netns exec NS args...`, panicking on failure.
    pub fn run(&self, args: &[&str]) -> String {
        let mut full = vec!["ip", "netns", "exec", &self.name];
        full.extend_from_slice(args);
        run(&full)
    }

    pub fn try_run(&self, args: &[&str]) -> (bool, String) {
        let mut full = vec!["ip", "netns", "exec", &self.name];
        full.extend_from_slice(args);
        try_run(&full)
    }

    pub fn command(&self, program: &str) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.name, program]);
        c
    }
}

enum Owned {
    Child(String, Child),
    PidFile(String, PathBuf),
}

/// One test's world: namespaces, processes and a scratch directory.
pub struct Lab {
    pub id: String,
    pub dir: tempfile::TempDir,
    namespaces: Vec<String>,
    processes: Vec<Owned>,
    logs: Vec<(String, PathBuf)>,
    links: usize,
}

impl Lab {
    pub fn new(test: &str) -> Lab {
        assert!(
            unsafe_free_is_root(),
            "interop tests need root (network namespaces); run them through `make test`"
        );
        require_tool("ip");
        let n = COUNTER.fetch_add(1, Ordering::SeqCst);
        // Short ids: interface names are limited to 15 characters.
        let id = format!("{}{}", std::process::id() % 10000, n);
        let dir = tempfile::Builder::new().prefix(&format!("uplink-{test}-")).tempdir().unwrap();
        Lab { id, dir, namespaces: vec![], processes: vec![], logs: vec![], links: 0 }
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// A new namespace with loopback up and forwarding on.
    pub fn ns(&mut self, role: &str) -> Ns {
        let name = format!("ul{}-{role}", self.id);
        run(&["ip", "netns", "add", &name]);
        self.namespaces.push(name.clone());
        let ns = Ns { name };
        ns.run(&["ip", "link", "set", "lo", "up"]);
        ns.run(&["sysctl", "-qw", "net.ipv4.ip_forward=1"]);
        ns.run(&["sysctl", "-qw", "net.ipv6.conf.all.forwarding=1"]);
        // No DAD delay: IPv6 addresses are usable at once.
        ns.run(&["sysctl", "-qw", "net.ipv6.conf.all.accept_dad=0"]);
        ns.run(&["sysctl", "-qw", "net.ipv6.conf.default.accept_dad=0"]);
        ns
    }

    /// Joins two namespaces with a veth pair and gives each end its addresses (CIDR notation).
    /// Returns the interface names (a side, b side).
    pub fn link(&mut self, a: &Ns, a_addrs: &[&str], b: &Ns, b_addrs: &[&str]) -> (String, String) {
        self.links += 1;
        let an = format!("v{}a{}", self.id, self.links);
        let bn = format!("v{}b{}", self.id, self.links);
        run(&[
            "ip", "link", "add", &an, "netns", &a.name, "type", "veth", "peer", "name", &bn,
            "netns", &b.name,
        ]);
        for (ns, ifname, addrs) in [(a, &an, a_addrs), (b, &bn, b_addrs)] {
            for addr in addrs {
                ns.run(&["ip", "addr", "add", addr, "dev", ifname, "nodad"]);
            }
            ns.run(&["ip", "link", "set", ifname, "up"]);
        }
        (an, bn)
    }

    /// Starts a long-lived foreground process that the lab kills on drop. Its output goes to a
    /// log file shown when the test fails.
    pub fn spawn(&mut self, label: &str, mut cmd: Command) -> u32 {
        let log = self.path(&format!("{label}.log"));
        let file = std::fs::File::create(&log).unwrap();
        cmd.stdout(file.try_clone().unwrap()).stderr(file).stdin(Stdio::null());
        let child = cmd.spawn().unwrap_or_else(|e| panic!("cannot start {label}: {e}"));
        let pid = child.id();
        self.processes.push(Owned::Child(label.to_string(), child));
        self.logs.push((label.to_string(), log));
        pid
    }

    /// Registers a daemon that forked itself and wrote `pidfile`.
    pub fn adopt_pidfile(&mut self, label: &str, pidfile: PathBuf) {
        self.processes.push(Owned::PidFile(label.to_string(), pidfile));
    }

    pub fn add_log(&mut self, label: &str, path: PathBuf) {
        self.logs.push((label.to_string(), path));
    }

    /// Stops the process started under `label` (SIGTERM, then SIGKILL).
    pub fn stop(&mut self, label: &str) {
        let mut keep = vec![];
        for p in self.processes.drain(..) {
            match &p {
                Owned::Child(l, _) | Owned::PidFile(l, _) if l == label => kill(p),
                _ => keep.push(p),
            }
        }
        self.processes = keep;
    }

    /// Sends SIGKILL to the process started under `label`.
    pub fn kill9(&mut self, label: &str) {
        let mut keep = vec![];
        for p in self.processes.drain(..) {
            match p {
                Owned::Child(l, mut c) if l == label => {
                    let _ = c.kill();
                    let _ = c.wait();
                }
                other => keep.push(other),
            }
        }
        self.processes = keep;
    }

    /// The pid of the process started under `label` (`ip netns exec` execs the program).
    pub fn pid_of(&self, label: &str) -> Option<u32> {
        self.processes.iter().rev().find_map(|p| match p {
            Owned::Child(l, c) if l == label => Some(c.id()),
            _ => None,
        })
    }

    /// Sends SIGKILL to the daemons registered by pid file under `label` (FRR's), at once:
    /// a crash, not a shutdown.
    pub fn kill9_pidfiles(&mut self, label: &str) {
        let mut keep = vec![];
        for p in self.processes.drain(..) {
            match p {
                Owned::PidFile(l, path) if l == label => {
                    if let Ok(pid) = std::fs::read_to_string(&path) {
                        let pid = pid.trim().to_string();
                        let _ = Command::new("kill").args(["-KILL", &pid]).status();
                        let deadline = Instant::now() + Duration::from_secs(3);
                        while Instant::now() < deadline
                            && Path::new(&format!("/proc/{pid}")).exists()
                        {
                            std::thread::sleep(Duration::from_millis(20));
                        }
                    }
                    let _ = std::fs::remove_file(&path);
                }
                other => keep.push(other),
            }
        }
        self.processes = keep;
    }

    /// The logs of every process, for failure reports.
    pub fn dump_logs(&self) -> String {
        let mut s = String::new();
        for (label, path) in &self.logs {
            let text = std::fs::read_to_string(path).unwrap_or_default();
            let tail: Vec<&str> = text.lines().rev().take(60).collect();
            let _ = writeln!(s, "----- {label} ({}) -----", path.display());
            for line in tail.iter().rev() {
                let _ = writeln!(s, "{line}");
            }
        }
        s
    }
}

fn unsafe_free_is_root() -> bool {
    // `id -u` avoids an unsafe libc call in test code.
    try_run(&["id", "-u"]).1.trim() == "0"
}

fn pid_of(p: &Owned) -> Option<String> {
    match p {
        Owned::Child(_, c) => Some(c.id().to_string()),
        Owned::PidFile(_, path) => {
            std::fs::read_to_string(path).ok().map(|pid| pid.trim().to_string())
        }
    }
}

/// Sends SIGTERM to a process of the lab.
fn terminate(p: &Owned) {
    if let Some(pid) = pid_of(p) {
        let _ = Command::new("kill").args(["-TERM", &pid]).stderr(Stdio::null()).status();
    }
}

/// Waits until `deadline` for a terminated process to exit, then sends SIGKILL.
fn reap(p: Owned, deadline: Instant) {
    match p {
        Owned::Child(_, mut c) => {
            while Instant::now() < deadline {
                if let Ok(Some(_)) = c.try_wait() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            let _ = c.kill();
            let _ = c.wait();
        }
        Owned::PidFile(..) => {
            let Some(pid) = pid_of(&p) else { return };
            while Instant::now() < deadline && Path::new(&format!("/proc/{pid}")).exists() {
                std::thread::sleep(Duration::from_millis(50));
            }
            let _ = Command::new("kill").args(["-KILL", &pid]).stderr(Stdio::null()).status();
        }
    }
}

fn kill(p: Owned) {
    terminate(&p);
    reap(p, Instant::now() + Duration::from_secs(3));
}

impl Drop for Lab {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("===== lab {} logs =====\n{}", self.id, self.dump_logs());
            // The dump shows only each log's end: keep the whole of them for a closer look.
            self.dir.disable_cleanup(true);
            eprintln!("===== lab {} kept in {} =====", self.id, self.dir.path().display());
        }
        // Every process gets its SIGTERM at once, then has until one deadline to exit: FRR's
        // daemons take about two seconds each, which one after the other made up half of
        // a test's time.
        let processes: Vec<Owned> = self.processes.drain(..).rev().collect();
        for p in &processes {
            terminate(p);
        }
        let deadline = Instant::now() + Duration::from_secs(3);
        for p in processes {
            reap(p, deadline);
        }
        for ns in self.namespaces.drain(..).rev() {
            // Kill anything left in the namespace, then delete it.
            let _ = Command::new("ip").args(["netns", "pids", &ns]).output().map(|o| {
                for pid in String::from_utf8_lossy(&o.stdout).split_whitespace() {
                    let _ =
                        Command::new("kill").args(["-KILL", pid]).stderr(Stdio::null()).status();
                }
            });
            let _ = Command::new("ip").args(["netns", "del", &ns]).status();
            let _ = std::fs::remove_dir_all(format!("/var/run/frr/{ns}"));
        }
    }
}
