//! Launchers for the real BGP speakers the interop tier talks to, and for uplink itself.

use super::{require_tool, run, try_run, Lab, Ns};
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::process::Command;

fn write_world_readable(path: &PathBuf, text: &str) {
    std::fs::write(path, text).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o644)).unwrap();
}

/// Makes the lab directory usable by daemons that drop privileges (FRR runs as `frr`).
fn open_lab_dir(lab: &Lab) {
    std::fs::set_permissions(lab.dir.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
}

/// FRR (zebra + bgpd, optionally bfdd) in one namespace, with its own `-N` pathspace.
pub struct Frr {
    pub ns: Ns,
    pub label: String,
}

impl Frr {
    /// Starts zebra and bgpd with `conf` (an frr.conf body). `log file` is added.
    pub fn start(lab: &mut Lab, ns: &Ns, conf: &str) -> Frr {
        Frr::start_daemons(lab, ns, conf, &["zebra", "bgpd"])
    }

    /// Starts zebra, bfdd and bgpd: for configs with `bfd` blocks or `neighbor X bfd`.
    pub fn start_with_bfd(lab: &mut Lab, ns: &Ns, conf: &str) -> Frr {
        require_tool("/usr/lib/frr/bfdd");
        Frr::start_daemons(lab, ns, conf, &["zebra", "bfdd", "bgpd"])
    }

    /// Starts zebra, staticd and bgpd beside another BGP speaker on one node (uplink owns
    /// port 179 there): bgpd listens on no port (`-p 0`), its sessions connect out.
    pub fn start_beside(lab: &mut Lab, ns: &Ns, conf: &str) -> Frr {
        require_tool("/usr/lib/frr/staticd");
        Frr::start_with(lab, ns, conf, &["zebra", "staticd", "bgpd"], &["-p", "0"])
    }

    /// Starts the named FRR daemons, in order, in one `-N` pathspace.
    pub fn start_daemons(lab: &mut Lab, ns: &Ns, conf: &str, daemons: &[&str]) -> Frr {
        Frr::start_with(lab, ns, conf, daemons, &[])
    }

    /// Like [`Frr::start_daemons`], with `bgpd_args` added to bgpd's command line.
    fn start_with(lab: &mut Lab, ns: &Ns, conf: &str, daemons: &[&str], bgpd_args: &[&str]) -> Frr {
        require_tool("/usr/lib/frr/bgpd");
        require_tool("vtysh");
        open_lab_dir(lab);
        let label = format!("frr-{}", ns.name);
        let rundir = format!("/var/run/frr/{}", ns.name);
        std::fs::create_dir_all(&rundir).unwrap();
        run(&["chown", "frr:frr", &rundir]);
        let log = lab.path(&format!("{label}.log"));
        write_world_readable(&log, "");
        run(&["chown", "frr:frr", log.to_str().unwrap()]);
        let conf_path = lab.path(&format!("{label}.conf"));
        write_world_readable(&conf_path, &format!("log file {}\n{conf}", log.display()));
        for daemon in daemons {
            let pid = lab.path(&format!("{label}-{daemon}.pid"));
            let program = format!("/usr/lib/frr/{daemon}");
            let mut args = vec![
                program.as_str(),
                "-d",
                "-N",
                &ns.name,
                "-f",
                conf_path.to_str().unwrap(),
                "-i",
                pid.to_str().unwrap(),
            ];
            if *daemon == "bgpd" {
                args.extend_from_slice(bgpd_args);
            }
            ns.run(&args);
            lab.adopt_pidfile(&label, pid);
        }
        lab.add_log(&label, log);
        Frr { ns: ns.clone(), label }
    }

    pub fn vtysh(&self, cmd: &str) -> String {
        let (_, out) = self.ns.try_run(&["vtysh", "-N", &self.ns.name, "-c", cmd]);
        out.lines().filter(|l| !l.contains("vtysh.conf")).collect::<Vec<_>>().join("\n")
    }

    pub fn json(&self, cmd: &str) -> serde_json::Value {
        serde_json::from_str(&self.vtysh(cmd)).unwrap_or(serde_json::Value::Null)
    }

    /// The state of one neighbor as `show bgp summary json` reports it ("Established", ...).
    pub fn peer_state(&self, family: &str, peer: &str) -> String {
        let v = self.json("show bgp summary json");
        v[family]["peers"][peer]["state"].as_str().unwrap_or("absent").to_string()
    }

    /// The best path's next hops for `prefix` in the BGP table (empty when absent).
    pub fn route_nexthops(&self, prefix: &str) -> Vec<String> {
        let afi = if prefix.contains(':') { "ipv6" } else { "ipv4" };
        let v = self.json(&format!("show bgp {afi} unicast {prefix} json"));
        let mut hops = vec![];
        for path in v["paths"].as_array().into_iter().flatten() {
            let multi = path["multipath"].as_bool().unwrap_or(false)
                || path["bestpath"]["overall"].as_bool().unwrap_or(false);
            if multi {
                for nh in path["nexthops"].as_array().into_iter().flatten() {
                    if let Some(ip) = nh["ip"].as_str() {
                        hops.push(ip.to_string());
                        break;
                    }
                }
            }
        }
        hops.sort();
        hops
    }

    /// The whole path JSON of `prefix` (FRR's `show bgp ... PREFIX json`).
    pub fn route(&self, prefix: &str) -> serde_json::Value {
        let afi = if prefix.contains(':') { "ipv6" } else { "ipv4" };
        self.json(&format!("show bgp {afi} unicast {prefix} json"))
    }
}

/// BIRD 2 in one namespace.
pub struct Bird {
    pub ns: Ns,
    pub socket: PathBuf,
    pub label: String,
}

impl Bird {
    pub fn start(lab: &mut Lab, ns: &Ns, conf: &str) -> Bird {
        require_tool("bird");
        require_tool("birdc");
        let label = format!("bird-{}", ns.name);
        let conf_path = lab.path(&format!("{label}.conf"));
        let log = lab.path(&format!("{label}.log"));
        write_world_readable(&conf_path, &format!("log \"{}\" all;\n{conf}", log.display()));
        let socket = lab.path(&format!("{label}.ctl"));
        let pid = lab.path(&format!("{label}.pid"));
        ns.run(&[
            "bird",
            "-c",
            conf_path.to_str().unwrap(),
            "-s",
            socket.to_str().unwrap(),
            "-P",
            pid.to_str().unwrap(),
        ]);
        lab.adopt_pidfile(&label, pid);
        lab.add_log(&label, log);
        Bird { ns: ns.clone(), socket, label }
    }

    pub fn birdc(&self, cmd: &str) -> String {
        try_run(&["birdc", "-s", self.socket.to_str().unwrap(), cmd]).1
    }

    /// Whether protocol `name` shows `Established`.
    pub fn established(&self, name: &str) -> bool {
        self.birdc(&format!("show protocols {name}")).contains("Established")
    }
}

/// GoBGP 3 in one namespace; its API listens on the namespace's own loopback.
pub struct Gobgp {
    pub ns: Ns,
    pub label: String,
}

impl Gobgp {
    pub fn start(lab: &mut Lab, ns: &Ns, conf_toml: &str) -> Gobgp {
        require_tool("gobgpd");
        require_tool("gobgp");
        let label = format!("gobgp-{}", ns.name);
        let conf_path = lab.path(&format!("{label}.toml"));
        write_world_readable(&conf_path, conf_toml);
        let mut cmd = ns.command("gobgpd");
        cmd.args([
            "-f",
            conf_path.to_str().unwrap(),
            "--api-hosts",
            "127.0.0.1:50051",
            "-l",
            "debug",
        ]);
        lab.spawn(&label, cmd);
        Gobgp { ns: ns.clone(), label }
    }

    pub fn gobgp(&self, args: &[&str]) -> String {
        let mut full = vec!["gobgp", "-u", "127.0.0.1", "-p", "50051"];
        full.extend_from_slice(args);
        self.ns.try_run(&full).1
    }

    pub fn neighbor_state(&self, addr: &str) -> String {
        let v: serde_json::Value =
            serde_json::from_str(&self.gobgp(&["neighbor", addr, "-j"])).unwrap_or_default();
        v["state"]["session_state"].as_i64().map(|s| s.to_string()).unwrap_or_default()
    }
}

/// One uplink daemon in a namespace, and its CLI.
pub struct Uplink {
    pub ns: Ns,
    pub label: String,
    pub config: PathBuf,
    pub socket: PathBuf,
}

/// The binary under test; `UPLINK_BIN` overrides it (several worktrees share one target
/// directory, so a copy taken right after the build is safe from the next build).
pub fn uplink_bin() -> &'static str {
    static BIN: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    BIN.get_or_init(|| {
        std::env::var("UPLINK_BIN").unwrap_or_else(|_| env!("CARGO_BIN_EXE_uplink").to_string())
    })
}

/// The variables uplink's systemd unit sets on its `Environment=` lines (the malloc settings,
/// docs/BENCHMARKS.md "Allocator").
pub fn unit_environment() -> Vec<(String, String)> {
    let unit = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../image/overlay/node/usr/lib/systemd/system/uplink.service");
    let unit = std::fs::read_to_string(&unit).unwrap();
    let environment: Vec<(String, String)> = unit
        .lines()
        .filter_map(|line| line.strip_prefix("Environment="))
        .flat_map(str::split_whitespace)
        .filter_map(|pair| pair.split_once('='))
        .map(|(key, value)| (key.to_string(), value.to_string()))
        .collect();
    assert!(
        environment.iter().any(|(key, _)| key == "MALLOC_ARENA_MAX"),
        "uplink.service sets no MALLOC_ARENA_MAX any more: {environment:?}"
    );
    environment
}

impl Uplink {
    /// Writes `config` to `<label>/uplink.toml` and starts `uplink run` in `ns`.
    pub fn start(lab: &mut Lab, ns: &Ns, label: &str, config: &str) -> Uplink {
        let u = Uplink::prepare(lab, ns, label, config);
        u.launch(lab);
        u
    }

    /// As [`Uplink::start`], with the environment of uplink's systemd unit (its malloc
    /// settings) and its log level, so that a benchmark's daemon holds the memory a node's
    /// does.
    pub fn start_as_the_unit_does(lab: &mut Lab, ns: &Ns, label: &str, config: &str) -> Uplink {
        let u = Uplink::prepare(lab, ns, label, config);
        let mut cmd = u.run_command();
        cmd.envs(unit_environment()).env("RUST_LOG", "uplink=info");
        lab.spawn(&u.label, cmd);
        u
    }

    /// Writes `config` to `<label>/uplink.toml`, beside an empty `conf.d`.
    fn prepare(lab: &Lab, ns: &Ns, label: &str, config: &str) -> Uplink {
        let dir = lab.path(label);
        std::fs::create_dir_all(dir.join("conf.d")).unwrap();
        let config_path = dir.join("uplink.toml");
        std::fs::write(&config_path, config).unwrap();
        let socket = dir.join("uplink.sock");
        Uplink { ns: ns.clone(), label: label.to_string(), config: config_path, socket }
    }

    /// (Re)starts the daemon with the current config file.
    pub fn launch(&self, lab: &mut Lab) {
        let mut cmd = self.run_command();
        cmd.env("RUST_LOG", "uplink=debug");
        lab.spawn(&self.label, cmd);
    }

    /// `uplink run` with this daemon's config, socket and state directory, in its namespace.
    fn run_command(&self) -> Command {
        let mut cmd = self.ns.command(uplink_bin());
        let state_dir = self.socket.with_file_name("state");
        cmd.args([
            "run",
            "--config",
            self.config.to_str().unwrap(),
            "--socket",
            self.socket.to_str().unwrap(),
            "--state-dir",
            state_dir.to_str().unwrap(),
        ]);
        cmd
    }

    /// Runs `uplink ARGS --socket S` and returns stdout, or the error output.
    pub fn cli(&self, args: &[&str]) -> Result<String, String> {
        let out = Command::new(uplink_bin())
            .args(args)
            .args(["--socket", self.socket.to_str().unwrap()])
            .output()
            .map_err(|e| e.to_string())?;
        if out.status.success() {
            Ok(String::from_utf8_lossy(&out.stdout).into_owned())
        } else {
            Err(format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ))
        }
    }

    pub fn json(&self, args: &[&str]) -> Result<serde_json::Value, String> {
        let mut full = args.to_vec();
        full.push("--json");
        let text = self.cli(&full)?;
        serde_json::from_str(&text)
            .map_err(|e| format!("bad JSON from uplink {args:?}: {e}: {text}"))
    }

    /// The session state of `peer` per `show bgp summary --json` in the default VRF.
    pub fn peer_state(&self, family: &str, peer: &str) -> Result<String, String> {
        let v = self.json(&["show", "bgp", "summary"])?;
        Ok(v[family]["peers"][peer]["state"].as_str().unwrap_or("absent").to_string())
    }

    /// Next hops of the best/multipath routes for `prefix` per `show bgp routes PREFIX --json`.
    pub fn route_nexthops(&self, prefix: &str) -> Result<Vec<String>, String> {
        let v = self.json(&["show", "bgp", "routes", prefix])?;
        let mut hops = vec![];
        for path in v["paths"].as_array().into_iter().flatten() {
            let selected = path["bestpath"]["overall"].as_bool().unwrap_or(false)
                || path["multipath"].as_bool().unwrap_or(false);
            if selected {
                if let Some(ip) = path["nexthops"][0]["ip"].as_str() {
                    hops.push(ip.to_string());
                }
            }
        }
        hops.sort();
        Ok(hops)
    }
}
