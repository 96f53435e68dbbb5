//! The Ansible rollout (issue #14) on the booted lab: the repository's playbooks
//! (`ansible/site.yml`, `ansible/rolling-upgrade.yml`, the seed-lab inventory) run from the host
//! against the workers over SSH, inside the test's namespace where the SSH forwards are. One
//! scenario of the seed lab, in steps that build on each other:
//!
//! 1. first run: uplink wiped from the workers (binary, units, config), `site.yml` installs and
//!    starts it; every session with r2 (default VRF, cudn3, cudn4) comes up, BFD too;
//! 2. a config change (a community on the VIP's advertisement), run with `--diff`: the diff
//!    shows it, no task but the main config's and its reload handler changed, it goes through
//!    `uplink reload`, r2 sees the community, and no session on r2 was reset
//!    (`bgpTimerUpEstablishedEpoch`); that `--check` applies nothing and that a plain second
//!    run changes nothing are `make ansible-check`'s points, on a stand-in node;
//! 3. a config `uplink check` rejects on wk1 stops the play at wk1: wk1 keeps its files and its
//!    running config, wk2 (which would have got a valid change) is not touched;
//! 4. `rolling-upgrade.yml` with a new binary while r2 refuses new BGP connections from wk1:
//!    wk1 drains, restarts and is not ready again, so the role puts the previous binary back
//!    and starts it (not ready either while r2 refuses wk1), and the rollout stops there (wk1
//!    stays drained on its old binary, wk2 keeps its old binary and process);
//! 5. the same rollout once r2 lets wk1 in again: wk1 finishes its roll, then wk2 rolls (drain,
//!    restart, wait-ready, undrain), one worker at a time.
//!
//! A client on r2 requests the VIP in a loop through steps 4 and 5 and sees no failure (but
//! for a reset or two when r2's ECMP set changes, [`tolerated_resets`]).

use crate::cmd::{describe, run_timeout};
use crate::topology::{gateways, parse_json, tolerated_resets, Topology, CLIENT_NS, TOR_ADDR, VIP};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// One playbook run may take this long (a TCG worker runs each module's Python slowly).
const PLAYBOOK_TIMEOUT: Duration = Duration::from_secs(900);
/// What step 2 adds to the VIP's advertisement, and every later run keeps.
const COMMUNITY: &str = "64512:100";
/// Where the image installs uplink, and the role too.
const BINARY: &str = "/usr/bin/uplink";
const STAGING: &str = "/var/lib/uplink-ansible";

/// The repository's ansible/ directory, found like the image (at run time).
fn ansible_dir() -> PathBuf {
    let manifest = std::env::var_os("CARGO_MANIFEST_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")));
    manifest.join("..").join("ansible")
}

/// A scratch directory for the runs (inventory, extra vars, binaries, ANSIBLE_HOME), removed
/// on drop.
struct Runner {
    dir: PathBuf,
    ansible: PathBuf,
    netns: String,
    /// Each run's JSON is kept here (the harness's log directory) for reading afterwards.
    log_dir: PathBuf,
}

impl Drop for Runner {
    fn drop(&mut self) {
        if let Err(e) = std::fs::remove_dir_all(&self.dir) {
            eprintln!("teardown: rm -r {}: {e}", self.dir.display());
        }
    }
}

/// One finished `ansible-playbook` run, parsed from the vmtest_json stdout callback.
struct Play {
    what: String,
    rc: Option<i32>,
    json: Value,
    stdout: String,
    stderr: String,
    secs: f64,
}

/// One task's outcome on one host, in the order the play ran them.
#[derive(Debug, Clone)]
struct TaskResult {
    batch: usize,
    task: String,
    host: String,
    changed: bool,
    failed: bool,
    msg: String,
    start: String,
    end: String,
    result: Value,
}

impl Play {
    fn succeeded(&self) -> bool {
        self.rc == Some(0)
    }

    fn results(&self) -> Vec<TaskResult> {
        let mut out = Vec::new();
        let plays = self.json["plays"].as_array().cloned().unwrap_or_default();
        for (batch, play) in plays.iter().enumerate() {
            for task in play["tasks"].as_array().into_iter().flatten() {
                let name = task["task"]["name"].as_str().unwrap_or("").to_string();
                let hosts = task["hosts"].as_object().cloned().unwrap_or_default();
                for (host, r) in hosts {
                    out.push(TaskResult {
                        batch,
                        task: name.clone(),
                        host,
                        changed: r["changed"] == true,
                        failed: r["failed"] == true || r["unreachable"] == true,
                        msg: r["msg"].as_str().map(str::to_owned).unwrap_or_default(),
                        start: task["task"]["duration"]["start"].as_str().unwrap_or("").into(),
                        end: task["task"]["duration"]["end"].as_str().unwrap_or("").into(),
                        result: r.clone(),
                    });
                }
            }
        }
        out
    }

    /// The recap's counter `key` (ok, changed, failures, skipped, unreachable) for `host`;
    /// None when the host is not in the recap.
    fn stat(&self, host: &str, key: &str) -> Option<u64> {
        self.json["stats"][host][key].as_u64()
    }

    fn recap(&self) -> String {
        let mut s = String::new();
        if let Some(stats) = self.json["stats"].as_object() {
            for (host, st) in stats {
                s.push_str(&format!("\n  {host}: {st}"));
            }
        }
        s
    }

    /// What a reader needs when the play did not do what the step expected: failed tasks with
    /// their messages (and output, for commands), the recap, stderr, and the raw output when
    /// it was not JSON. The whole run is in the log directory (`Runner::play`).
    fn report(&self) -> String {
        let mut s = format!("--- {} (rc {:?}, {:.1} s) ---", self.what, self.rc, self.secs);
        for r in self.results().iter().filter(|r| r.failed) {
            s.push_str(&format!("\n  FAILED [{}] {}: {}", r.host, r.task, r.msg));
            let items = r.result["results"].as_array().cloned().unwrap_or_default();
            for part in std::iter::once(&r.result).chain(items.iter()) {
                for key in ["stderr", "stdout", "msg"] {
                    if let Some(text) = part[key].as_str().filter(|t| !t.is_empty() && *t != r.msg)
                    {
                        s.push_str(&format!("\n    {key}: {text}"));
                    }
                }
            }
        }
        s.push_str(&format!("\n  recap:{}", self.recap()));
        if self.json.is_null() {
            s.push_str(&format!("\n  stdout (not JSON):\n{}", self.stdout));
        }
        if !self.stderr.trim().is_empty() {
            s.push_str(&format!("\n  stderr:\n{}", self.stderr.trim()));
        }
        s
    }

    /// The tasks that reported a change, as "host: task" lines.
    fn changes(&self) -> Vec<String> {
        self.results()
            .iter()
            .filter(|r| r.changed)
            .map(|r| format!("{}: {}", r.host, r.task))
            .collect()
    }

    fn find(&self, host: &str, task_suffix: &str) -> Option<TaskResult> {
        self.results().into_iter().find(|r| r.host == host && r.task.ends_with(task_suffix))
    }
}

impl Runner {
    fn new(topo: &Topology) -> Result<Runner, String> {
        for tool in ["ansible-playbook", "objcopy", "scp"] {
            let found = std::env::var_os("PATH")
                .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(tool).is_file()));
            if !found {
                return Err(format!("{tool} is missing (`make vm-test` installs it)"));
            }
        }
        let dir = std::env::temp_dir().join(format!("uplink-vmt-ansible-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("home"))
            .map_err(|e| format!("mkdir {}: {e}", dir.display()))?;
        let runner = Runner {
            dir,
            ansible: ansible_dir(),
            netns: topo.netns.name.clone(),
            log_dir: topo.log_dir.clone(),
        };
        // The seed-lab inventory's hosts, pointed at the SSH forwards through the harness's
        // control masters (no new handshake per task).
        let mut hosts = serde_json::Map::new();
        for w in &topo.workers {
            let (port, key, control) = w.vm.ssh_endpoint();
            hosts.insert(
                w.name.clone(),
                json!({
                    "ansible_host": "127.0.0.1",
                    "ansible_port": port,
                    "ansible_user": "root",
                    "ansible_ssh_private_key_file": key,
                    "ansible_ssh_args": format!(
                        "-o ControlMaster=auto -o ControlPersist=yes -o ControlPath={} \
                         -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null \
                         -o LogLevel=ERROR -o IdentitiesOnly=yes",
                        control.display()
                    ),
                    "ansible_python_interpreter": "/usr/bin/python3",
                }),
            );
        }
        let inventory = json!({ "uplink_nodes": { "hosts": hosts } });
        runner.write("vm-hosts.json", &inventory.to_string())?;
        Ok(runner)
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    fn write(&self, name: &str, body: &str) -> Result<PathBuf, String> {
        let p = self.path(name);
        std::fs::write(&p, body).map_err(|e| format!("write {}: {e}", p.display()))?;
        Ok(p)
    }

    /// Runs a playbook of ansible/ with the seed-lab inventory plus the VM overrides, the JSON
    /// output callback, and `vars` as extra vars (a JSON file).
    fn play(
        &self,
        what: &str,
        playbook: &str,
        vars: &Value,
        args: &[&str],
    ) -> Result<Play, String> {
        let vars_file = self.write(&format!("vars-{}.json", slug(what)), &vars.to_string())?;
        let mut c = controller_command("ip");
        c.args(["netns", "exec", &self.netns, "ansible-playbook"])
            .args(["-i", "inventories/seed-lab", "-i"])
            .arg(self.path("vm-hosts.json"))
            .arg(playbook)
            .arg("-e")
            .arg(format!("@{}", vars_file.display()))
            .args(args)
            .current_dir(&self.ansible)
            .env("ANSIBLE_CONFIG", self.ansible.join("ansible.cfg"))
            // vm-tests/ansible-callback/vmtest_json.py: the run as one JSON document.
            .env("ANSIBLE_CALLBACK_PLUGINS", self.ansible.join("../vm-tests/ansible-callback"))
            .env("ANSIBLE_STDOUT_CALLBACK", "vmtest_json")
            .env("ANSIBLE_HOME", self.path("home"))
            .env("ANSIBLE_LOCAL_TEMP", self.path("home"))
            .env("ANSIBLE_NOCOLOR", "1")
            .env("ANSIBLE_RETRY_FILES_ENABLED", "0");
        let line = describe(&c);
        let t0 = Instant::now();
        let out = run_timeout(&mut c, None, PLAYBOOK_TIMEOUT);
        let secs = t0.elapsed().as_secs_f64();
        if out.timed_out {
            return Err(format!("`{line}` timed out after {PLAYBOOK_TIMEOUT:?}:\n{}", out.stderr));
        }
        let json = serde_json::from_str(&out.stdout).unwrap_or(Value::Null);
        let kept = self.log_dir.join(format!("ansible-{}.json", slug(what)));
        if let Err(e) = std::fs::write(&kept, &out.stdout) {
            eprintln!("cannot keep {}: {e}", kept.display());
        }
        let play = Play {
            what: what.to_string(),
            rc: out.status.and_then(|s| s.code()),
            json,
            stdout: out.stdout,
            stderr: out.stderr,
            secs,
        };
        println!("    {what}: rc {:?}, {secs:.1} s{}", play.rc, play.recap());
        Ok(play)
    }

    /// Copies a file from a worker to the host (scp through the worker's control master).
    fn fetch(&self, topo: &Topology, remote: &str, local: &Path) -> Result<(), String> {
        let w = topo.workers.first().ok_or("no worker")?;
        let (port, key, control) = w.vm.ssh_endpoint();
        let mut c = controller_command("ip");
        c.args(["netns", "exec", &self.netns, "scp", "-q", "-i"])
            .arg(key)
            .args(["-P", &port.to_string()])
            .args(["-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=no"])
            .args(["-o", "UserKnownHostsFile=/dev/null", "-o", "LogLevel=ERROR"])
            .arg("-o")
            .arg(format!("ControlPath={}", control.display()))
            .arg(format!("root@127.0.0.1:{remote}"))
            .arg(local);
        let out = run_timeout(&mut c, None, Duration::from_secs(300));
        if out.success() {
            Ok(())
        } else {
            Err(format!("`{}` failed: {}", describe(&c), out.stderr))
        }
    }
}

fn slug(s: &str) -> String {
    s.chars().map(|c| if c.is_ascii_alphanumeric() { c } else { '-' }).collect()
}

/// A command of the Ansible controller's side (ansible-playbook, scp, objcopy, sha256sum), at
/// the lowest CPU priority. In a fleet the controller is another machine; here it shares the
/// CPU with the three VMs, and on one core a burst of it (Python's start-up for each task, an
/// objcopy of the binary) kept them off the CPU for longer than BFD's 600 ms of then: r2 and wk1 saw
/// "Cease/BFD Down" right before the rollout's pre-flight check. Niced, it takes what the VMs
/// leave.
fn controller_command(program: &str) -> Command {
    let mut c = Command::new("nice");
    c.args(["-n", "19", program]);
    c
}

fn sha256(path: &Path) -> Result<String, String> {
    let out = run_timeout(controller_command("sha256sum").arg(path), None, Duration::from_secs(60));
    out.stdout
        .split_whitespace()
        .next()
        .map(str::to_owned)
        .filter(|_| out.success())
        .ok_or(format!("sha256sum {}: {}", path.display(), out.stderr))
}

/// One BGP session as r2 sees it.
#[derive(Debug, Clone, PartialEq)]
struct TorSession {
    state: String,
    /// When it last came up (FRR's `bgpTimerUpEstablishedEpoch`). FRR derives it from the
    /// uptime at each query, so it wobbles by a second; a reset moves it by more.
    up_since: Option<u64>,
    established: u64,
    dropped: u64,
}

/// Every BGP session on r2 with a worker, by (VRF, peer address): the default VRF's sessions
/// with 172.18.20.x and the VRF-lite ones in cudn3/cudn4.
fn tor_sessions(topo: &Topology) -> Result<BTreeMap<(String, String), TorSession>, String> {
    let v = parse_json(
        &topo.vtysh("show bgp vrf all neighbors json")?,
        "show bgp vrf all neighbors json",
    )?;
    let mut out = BTreeMap::new();
    for (vrf, peers) in v.as_object().into_iter().flatten() {
        for (peer, n) in peers.as_object().into_iter().flatten() {
            let Some(state) = n["bgpState"].as_str() else { continue };
            out.insert(
                (vrf.clone(), peer.clone()),
                TorSession {
                    state: state.to_string(),
                    up_since: n["bgpTimerUpEstablishedEpoch"].as_u64(),
                    established: n["connectionsEstablished"].as_u64().unwrap_or(0),
                    dropped: n["connectionsDropped"].as_u64().unwrap_or(0),
                },
            );
        }
    }
    Ok(out)
}

/// The sessions r2 must have with the workers: 2 workers x (default, cudn3, cudn4).
fn expected_sessions(topo: &Topology) -> Vec<(String, String)> {
    let mut v = Vec::new();
    for (i, w) in topo.workers.iter().enumerate() {
        v.push(("default".to_string(), w.addr.clone()));
        v.push(("cudn3".to_string(), format!("172.19.23.{}", i + 2)));
        v.push(("cudn4".to_string(), format!("172.19.24.{}", i + 2)));
    }
    v
}

/// Every expected session Established on r2; returns them.
fn all_established(topo: &Topology) -> Result<BTreeMap<(String, String), TorSession>, String> {
    let s = tor_sessions(topo)?;
    for key in expected_sessions(topo) {
        match s.get(&key) {
            Some(t) if t.state == "Established" => {}
            other => return Err(format!("r2: session {key:?} is {other:?}")),
        }
    }
    Ok(s)
}

/// No session on r2 was reset between two snapshots: still Established, no connection
/// established or dropped since, and up since the same second (give or take FRR's rounding).
fn no_reset(
    before: &BTreeMap<(String, String), TorSession>,
    after: &BTreeMap<(String, String), TorSession>,
    topo: &Topology,
) -> Result<(), String> {
    for key in expected_sessions(topo) {
        let (Some(b), Some(a)) = (before.get(&key), after.get(&key)) else {
            return Err(format!("r2: no session {key:?}"));
        };
        let (Some(b_up), Some(a_up)) = (b.up_since, a.up_since) else {
            return Err(format!("r2: no bgpTimerUpEstablishedEpoch for {key:?}"));
        };
        let same = a.state == "Established"
            && (a.established, a.dropped) == (b.established, b.dropped)
            && a_up.abs_diff(b_up) <= 2;
        if !same {
            return Err(format!("r2: session {key:?} was reset: {b:?} -> {a:?}"));
        }
    }
    Ok(())
}

/// Sessions, BFD and the VIP with both workers as next hops, as r2 sees them.
fn lab_converged(topo: &Topology) -> Result<String, String> {
    all_established(topo)?;
    let b = parse_json(&topo.vtysh("show bfd peers json")?, "show bfd peers json")?;
    for w in &topo.workers {
        let up = b
            .as_array()
            .is_some_and(|a| a.iter().any(|p| p["peer"] == w.addr.as_str() && p["status"] == "up"));
        if !up {
            return Err(format!("r2: BFD with {} not up", w.name));
        }
    }
    let mut want: Vec<String> = topo.workers.iter().map(|w| w.addr.clone()).collect();
    want.sort();
    let gw = gateways(&topo.tor.sh(&format!("ip route show {VIP}"))?);
    if gw != want {
        return Err(format!("r2: {VIP} via {gw:?}, want {want:?}"));
    }
    Ok(format!(
        "{} sessions Established, BFD up, {VIP} via {}",
        expected_sessions(topo).len(),
        gw.join(" and ")
    ))
}

/// The VIP's advertisement with [`COMMUNITY`]: the config change of step 2, kept afterwards.
fn community_vars() -> Value {
    json!({
        "uplink_advertisements": [
            { "name": "vips", "ip_address_pools": ["vips"], "communities": [COMMUNITY] }
        ]
    })
}

fn with(mut base: Value, more: Value) -> Value {
    if let (Some(b), Some(m)) = (base.as_object_mut(), more.as_object()) {
        for (k, v) in m {
            b.insert(k.clone(), v.clone());
        }
    }
    base
}

/// sha256 of files on a worker, one per line in the order given ("-" when missing).
fn worker_sums(topo: &Topology, i: usize, files: &[&str]) -> Result<Vec<String>, String> {
    let w = topo.workers.get(i).ok_or("no such worker")?;
    let script: String = files
        .iter()
        .map(|f| format!("sha256sum {f} 2>/dev/null | cut -d' ' -f1 | grep . || echo -\n"))
        .collect();
    Ok(w.vm.sh(&script)?.lines().map(str::to_owned).collect())
}

/// The steps, in order; the first failure ends the scenario (later steps build on it).
pub fn rollout(topo: &Topology) -> Result<String, String> {
    let runner = Runner::new(topo)?;
    let binary = runner.path("uplink");
    runner.fetch(topo, BINARY, &binary)?;
    type Step = fn(&Topology, &Runner, &Path) -> Result<String, String>;
    let steps: [(&str, Step); 5] = [
        ("first run installs uplink, sessions come up", first_run),
        ("config change by reload (--diff), no session reset on r2", config_reload),
        ("config rejected on wk1 stops the play there", rejected_config),
        ("upgrade stops at a worker that does not come back ready", not_ready_stops),
        ("rolling upgrade resumes, one worker at a time, no failed request", rolling_upgrade),
    ];
    let mut notes = Vec::new();
    for (name, step) in steps {
        let t0 = Instant::now();
        let r = step(topo, &runner, &binary);
        let secs = t0.elapsed().as_secs_f64();
        match r {
            Ok(note) => {
                println!("  PASS ansible: {name} ({secs:.1} s): {note}");
                notes.push(format!("{name} ({secs:.0} s)"));
            }
            Err(e) => return Err(format!("ansible: {name} ({secs:.1} s):\n{e}")),
        }
    }
    Ok(notes.join("; "))
}

/// Step 1: a worker without uplink (as if it had not booted the image): `site.yml` installs
/// the binary, the repository's units and the config, and starts it.
fn first_run(topo: &Topology, runner: &Runner, binary: &Path) -> Result<String, String> {
    for w in &topo.workers {
        w.vm.sh(&format!(
            "systemctl disable --now uplink.service\n\
             rm -f {BINARY} /usr/lib/systemd/system/uplink.service \
               /usr/lib/systemd/system/uplink-wait-ready.service /etc/systemd/system/uplink*.service\n\
             rm -rf /etc/uplink {STAGING} /var/lib/uplink\n\
             systemctl daemon-reload\n\
             ! systemctl cat uplink.service >/dev/null 2>&1"
        ))?;
    }
    // Both workers at once: this step is about installing, not batching.
    let vars = json!({ "uplink_binary_src": binary, "uplink_serial": 2 });
    let play = runner.play("site.yml (first run)", "site.yml", &vars, &[])?;
    if !play.succeeded() {
        return Err(play.report());
    }
    for w in &topo.workers {
        for task in ["Install the binary (uplink does not run yet)", "Enable and start uplink"] {
            if !play.find(&w.name, task).is_some_and(|r| r.changed) {
                return Err(format!(
                    "{}: task {task:?} did not change anything\n{}",
                    w.name,
                    play.report()
                ));
            }
        }
    }
    let want_sum = sha256(binary)?;
    let mut units = Vec::new();
    for name in ["uplink.service", "uplink-wait-ready.service"] {
        let path = runner.ansible.join("roles/uplink/files").join(name);
        let text = std::fs::read_to_string(&path)
            .map_err(|e| format!("the repository's {name} ({}): {e}", path.display()))?;
        units.push((name, text));
    }
    for (i, w) in topo.workers.iter().enumerate() {
        let sums = worker_sums(topo, i, &[BINARY])?;
        if sums.first() != Some(&want_sum) {
            return Err(format!("{}: {BINARY} is {sums:?}, want {want_sum}", w.name));
        }
        // uplink enabled and running; the readiness unit installed, not enabled (the role's
        // default: it would hold boot until the sessions are up).
        let state = w.vm.sh(
            "systemctl is-enabled uplink.service; systemctl is-enabled uplink-wait-ready.service || true; \
             systemctl is-active uplink.service",
        )?;
        if state.lines().collect::<Vec<_>>() != ["enabled", "disabled", "active"] {
            return Err(format!("{}: want enabled/disabled/active, got {state:?}", w.name));
        }
        for (name, text) in &units {
            if w.vm.sh(&format!("cat /etc/systemd/system/{name}"))? != *text {
                return Err(format!("{}: the installed {name} is not the repository's", w.name));
            }
        }
    }
    let converged = topo.wait(Duration::from_secs(120), || lab_converged(topo))?;
    Ok(format!("installed in {:.0} s; {converged}", play.secs))
}

/// Step 2: a community added to the config. The run with `--diff` shows the main config's
/// diff and changes only that file's tasks (staged for `uplink check`, then installed) and its
/// reload handler; the community reaches r2 through `uplink reload`; no session on r2 resets.
/// That a `--check` run applies nothing is `make ansible-check`'s point, on a stand-in node:
/// each playbook run costs more than a minute under TCG.
fn config_reload(topo: &Topology, runner: &Runner, binary: &Path) -> Result<String, String> {
    let before = all_established(topo)?;
    // Both workers at once: a reload is what is under test; steps 3 to 5 test the batches.
    let vars = with(json!({ "uplink_binary_src": binary, "uplink_serial": 2 }), community_vars());
    let play = runner.play("site.yml --diff (community added)", "site.yml", &vars, &["--diff"])?;
    if !play.succeeded() {
        return Err(play.report());
    }
    let config_handlers = ["Reload uplink", "Report what the reload applied"];
    let mut applied = Vec::new();
    for w in &topo.workers {
        let r = play.find(&w.name, "Install the main config").ok_or(format!(
            "{}: no result for the main config\n{}",
            w.name,
            play.report()
        ))?;
        let diff = r.result["diff"].to_string();
        if !r.changed || !diff.contains(COMMUNITY) {
            return Err(format!("{}: --diff shows no change with {COMMUNITY}: {diff}", w.name));
        }
        let others: Vec<String> = play
            .results()
            .into_iter()
            .filter(|o| o.host == w.name && o.changed)
            .filter(|o| {
                !o.task.ends_with("the main config")
                    && !config_handlers.iter().any(|h| o.task.ends_with(h))
            })
            .map(|o| o.task)
            .collect();
        if !others.is_empty() {
            return Err(format!(
                "{}: with only the config changed, the run also changed {others:?} (every change: {:?})\n{}",
                w.name,
                play.changes(),
                play.report()
            ));
        }
        let reload = play.find(&w.name, "Reload uplink");
        if !reload.as_ref().is_some_and(|r| r.changed && !r.failed) {
            return Err(format!(
                "{}: no successful `uplink reload`: {reload:?}\n{}",
                w.name,
                play.report()
            ));
        }
        let restarted = play.results().into_iter().any(|r| {
            r.host == w.name
                && r.changed
                && (r.task.contains("Restart") || r.task.contains("Drain"))
        });
        if restarted {
            return Err(format!(
                "{}: a config change restarted or drained uplink\n{}",
                w.name,
                play.report()
            ));
        }
        let said = play
            .find(&w.name, "Report what the reload applied")
            .map(|r| r.result["msg"].to_string())
            .unwrap_or_default();
        applied.push(format!("{}: {said}", w.name));
    }
    topo.wait(Duration::from_secs(60), || {
        let v = parse_json(
            &topo.vtysh(&format!("show bgp ipv4 unicast {VIP}/32 json"))?,
            "show bgp ipv4 unicast json",
        )?;
        let paths = v["paths"].as_array().cloned().unwrap_or_default();
        let with_community = paths
            .iter()
            .filter(|p| p["community"]["string"].as_str().is_some_and(|c| c.contains(COMMUNITY)))
            .count();
        if with_community == topo.workers.len() {
            Ok(())
        } else {
            Err(format!("r2: {with_community} of the VIP's paths carry {COMMUNITY}: {v}"))
        }
    })?;
    let after = all_established(topo)?;
    no_reset(&before, &after, topo)?;
    Ok(format!(
        "r2 has {COMMUNITY} on both VIP paths, {} sessions kept their uptime; reload said: {}",
        after.len(),
        applied.join("; ")
    ))
}

/// Step 3: `always_block = ["not-a-prefix"]` for wk1 (and a valid change for wk2): the play
/// stops at wk1 with uplink's file:line:column message; nothing changes anywhere.
fn rejected_config(topo: &Topology, runner: &Runner, binary: &Path) -> Result<String, String> {
    let files = ["/etc/uplink/uplink.toml", "/etc/uplink/conf.d/vrf-lite.toml"];
    let staged = format!("{STAGING}/config/uplink.toml");
    let mut all = files.to_vec();
    all.push(&staged);
    let sums_before: Vec<Vec<String>> =
        (0..topo.workers.len()).map(|i| worker_sums(topo, i, &all)).collect::<Result<_, _>>()?;
    let wk1 = topo.workers.first().ok_or("no wk1")?;
    let running_before = wk1.vm.sh("uplink show running-config --json")?;
    let sessions_before = all_established(topo)?;
    let vars = with(
        json!({
            "uplink_binary_src": binary,
            "uplink_extra_config": {
                "always_block": "{{ ['not-a-prefix'] if inventory_hostname == 'wk1' else ['169.254.0.0/16'] }}"
            }
        }),
        community_vars(),
    );
    let play = runner.play("site.yml (wk1's config rejected)", "site.yml", &vars, &[])?;
    if play.succeeded() {
        return Err(format!("the play succeeded with a broken config\n{}", play.report()));
    }
    let failed: Vec<TaskResult> = play.results().into_iter().filter(|r| r.failed).collect();
    let [f] = failed.as_slice() else {
        return Err(format!("want exactly one failed task, got {failed:?}\n{}", play.report()));
    };
    let pattern = "config/uplink.toml:";
    let located = f.msg.split(pattern).nth(1).is_some_and(|rest| {
        let mut parts = rest.splitn(3, ':');
        let line = parts.next().is_some_and(|l| l.parse::<u32>().is_ok());
        let col = parts.next().is_some_and(|c| c.parse::<u32>().is_ok());
        line && col && parts.next().is_some_and(|m| m.trim_start().starts_with("always_block[0]"))
    });
    if f.host != "wk1" || !f.task.contains("rejects the config") || !located {
        return Err(format!(
            "want wk1 to fail in the check with uplink's file:line:column for always_block[0], got [{}] {}: {}",
            f.host, f.task, f.msg
        ));
    }
    if play.results().iter().any(|r| r.host != "wk1") || play.stat("wk2", "ok").unwrap_or(0) != 0 {
        return Err(format!("wk2 was touched after wk1 failed\n{}", play.report()));
    }
    let sums_after: Vec<Vec<String>> =
        (0..topo.workers.len()).map(|i| worker_sums(topo, i, &all)).collect::<Result<_, _>>()?;
    // wk1's staged copy is the rejected one (left for the operator to read); its live files,
    // and everything on wk2, are as they were.
    for (i, w) in topo.workers.iter().enumerate() {
        let (b, a) = (&sums_before[i], &sums_after[i]);
        let kept = if i == 0 { files.len() } else { all.len() };
        if b.get(..kept) != a.get(..kept) {
            return Err(format!("{}: files changed: {b:?} -> {a:?}", w.name));
        }
    }
    if wk1.vm.sh("uplink show running-config --json")? != running_before {
        return Err("wk1's running config changed".into());
    }
    no_reset(&sessions_before, &all_established(topo)?, topo)?;
    let first_line = f.msg.lines().find(|l| l.contains(pattern)).unwrap_or("");
    Ok(format!(
        "stopped at wk1 with \"{}\"; wk2 untouched, no file or session changed",
        first_line.trim()
    ))
}

/// The "new" binary of steps 4 and 5: the installed one plus an ELF section, so its checksum
/// differs. Made once.
fn new_binary(runner: &Runner, binary: &Path) -> Result<PathBuf, String> {
    let new = runner.path("uplink-new");
    if new.exists() {
        return Ok(new);
    }
    let note = runner.write("upgrade-note", "uplink VM test: rolling upgrade\n")?;
    let mut c = controller_command("objcopy");
    c.arg("--add-section")
        .arg(format!(".uplink_vmtest={}", note.display()))
        .args(["--set-section-flags", ".uplink_vmtest=noload,readonly"])
        .arg(binary)
        .arg(&new);
    let out = run_timeout(&mut c, None, Duration::from_secs(60));
    if !out.success() {
        return Err(format!("`{}`: {}", describe(&c), out.stderr));
    }
    if sha256(&new)? == sha256(binary)? {
        return Err("the new binary has the old checksum".into());
    }
    Ok(new)
}

/// Starts the client on r2: one request to the VIP after the other, each line
/// "<r2 time> <answer>", or for a failed request "<r2 time> FAIL rc=<curl's exit code>
/// <curl's error> | route: <r2's route to the VIP right after>".
fn start_client(topo: &Topology) -> Result<(), String> {
    topo.tor.sh(&format!(
        "rm -f /tmp/vip-loop.out /tmp/vip-loop.stop\n\
         setsid -f sh -c 'while [ ! -e /tmp/vip-loop.stop ]; do \
           r=$(ip netns exec {CLIENT_NS} curl -sS --max-time 2 http://{VIP}/ 2>&1); rc=$?; \
           if [ $rc -ne 0 ] || [ -z \"$r\" ]; then \
             r=\"FAIL rc=$rc $(echo $r) | route: $(ip route show {VIP} | tr -s \"\\n \" \" \")\"; fi; \
           echo \"$(date +%s.%N) $r\"; sleep 0.1; done' </dev/null >/tmp/vip-loop.out 2>&1"
    ))?;
    Ok(())
}

/// Lets the client run on for a moment, stops it and checks that no request failed (but for
/// the resets [`tolerated_resets`] allows); returns the answers per worker.
fn stop_client(topo: &Topology) -> Result<String, String> {
    std::thread::sleep(Duration::from_secs(3));
    let answers = topo.tor.sh("touch /tmp/vip-loop.stop; sleep 3; cat /tmp/vip-loop.out")?;
    let lines: Vec<&str> = answers.lines().filter(|l| !l.trim().is_empty()).collect();
    let failures: Vec<&&str> = lines.iter().filter(|l| l.contains("FAIL")).collect();
    let mut tally: BTreeMap<String, usize> = BTreeMap::new();
    for l in &lines {
        *tally.entry(l.split_whitespace().nth(1).unwrap_or("").to_string()).or_insert(0) += 1;
    }
    let tolerated = tolerated_resets(failures.iter().map(|l| **l)).filter(|_| lines.len() >= 20);
    let Some(resets) = tolerated else {
        return Err(format!(
            "the client saw {} failed requests of {} (r2's time, curl's exit code and error, \
             r2's route to {VIP} just after): {failures:#?}\ntally {tally:?}\n{}",
            failures.len(),
            lines.len(),
            session_history(topo)
        ));
    };
    let outcome = if resets > 0 {
        format!("none lost, {resets} reset by an ECMP change {failures:?}")
    } else {
        "none failed".to_string()
    };
    Ok(format!("{} requests, {outcome} {tally:?}", lines.len()))
}

/// What the sessions did in the last minutes, for a client failure's report: r2's FRR log
/// lines about sessions and BFD, and each worker's uplink lines about them (Unix times, as the
/// client's lines have them), so a route that went missing can be put next to its cause.
fn session_history(topo: &Topology) -> String {
    let filter = "ADJCHANGE|NOTIFICATION|Hold|BFD|bfd|session|drain|Drain|withdraw";
    let mut out = String::from("--- r2: FRR, the last 15 minutes ---\n");
    let frr = format!(
        "journalctl --no-pager -o short-unix --since '-15 min' | grep -E '{filter}' | tail -60"
    );
    out.push_str(&topo.tor.sh(&frr).unwrap_or_else(|e| format!("(unavailable: {e})\n")));
    for w in &topo.workers {
        out.push_str(&format!("--- {}: uplink, the last 15 minutes ---\n", w.name));
        let uplink = format!(
            "journalctl --no-pager -o short-unix -u uplink --since '-15 min' | grep -E '{filter}' | tail -40"
        );
        out.push_str(&w.vm.sh(&uplink).unwrap_or_else(|e| format!("(unavailable: {e})\n")));
    }
    out
}

/// r2 refuses new BGP connections with wk1 (`on`) or accepts them again: wk1's sessions that
/// are up stay up, a restarted wk1 cannot come back.
fn block_wk1_bgp(topo: &Topology, addr: &str, on: bool) -> Result<(), String> {
    let script = if on {
        format!(
            "nft add table inet uplink_vmtest\n\
             nft add chain inet uplink_vmtest in '{{ type filter hook input priority 0; }}'\n\
             nft add chain inet uplink_vmtest out '{{ type filter hook output priority 0; }}'\n\
             nft add rule inet uplink_vmtest in ip saddr {addr} tcp dport 179 ct state new drop\n\
             nft add rule inet uplink_vmtest out ip daddr {addr} tcp dport 179 ct state new drop\n"
        )
    } else {
        "nft delete table inet uplink_vmtest".to_string()
    };
    topo.tor.sh(&script).map(|_| ())
}

/// Step 4: the new binary, but r2 will not take wk1's sessions back once wk1 restarts: wk1's
/// wait-ready names the session, the role puts the previous binary back and starts it, which
/// is not ready either (r2 still refuses wk1), and the rollout stops at wk1: wk1 stays drained
/// on its old binary, wk2 keeps its old binary and process; the client sees no failure (the
/// VIP is served by wk2).
fn not_ready_stops(topo: &Topology, runner: &Runner, binary: &Path) -> Result<String, String> {
    let new = new_binary(runner, binary)?;
    let (wk1, wk2) = match topo.workers.as_slice() {
        [a, b] => (a, b),
        _ => return Err("want two workers".into()),
    };
    let wk2_probe = "systemctl show -p MainPID --value uplink.service; sha256sum /usr/bin/uplink | cut -d' ' -f1";
    let wk2_before = wk2.vm.sh(wk2_probe)?;
    block_wk1_bgp(topo, &wk1.addr, true)?;
    start_client(topo)?;
    let vars = with(
        json!({ "uplink_binary_src": new, "uplink_wait_ready_timeout": "20s" }),
        community_vars(),
    );
    let played =
        runner.play("rolling-upgrade.yml (wk1 not ready)", "rolling-upgrade.yml", &vars, &[]);
    let client = stop_client(topo);
    block_wk1_bgp(topo, &wk1.addr, false)?;
    let play = played?;
    if play.succeeded() {
        return Err(format!(
            "the rollout went on past a worker that was not ready\n{}",
            play.report()
        ));
    }
    // wk1's wait-ready on the new binary, then (the previous binary back, and not ready
    // either) the task that stops the rollout.
    let failed: Vec<TaskResult> = play.results().into_iter().filter(|r| r.failed).collect();
    let [f, stop] = failed.as_slice() else {
        return Err(format!(
            "want two failed tasks (wait-ready, then the stop), got {failed:?}\n{}",
            play.report()
        ));
    };
    if stop.host != wk1.name
        || !stop.task.contains("Stop the rollout")
        || !stop.msg.contains("previous binary is back")
    {
        return Err(format!(
            "want wk1's rollout stopped with its previous binary back, got [{}] {}: {}\n{}",
            stop.host,
            stop.task,
            stop.msg,
            play.report()
        ));
    }
    let said = format!(
        "{} {}",
        f.result["stderr"].as_str().unwrap_or(""),
        f.result["stdout"].as_str().unwrap_or("")
    );
    if f.host != wk1.name || !f.task.contains("Wait until every session") {
        return Err(format!(
            "want wk1's wait-ready to fail, got [{}] {}\n{}",
            f.host,
            f.task,
            play.report()
        ));
    }
    if !said.contains(TOR_ADDR) {
        return Err(format!("wait-ready did not name the session with {TOR_ADDR}: {said}"));
    }
    // Batch 0 is the pre-flight check on every node; the rollout's batches did not reach wk2.
    if play.results().iter().any(|r| r.host == wk2.name && r.batch > 0) {
        return Err(format!("wk2 was touched after wk1 failed\n{}", play.report()));
    }
    let wk2_after = wk2.vm.sh(wk2_probe)?;
    if wk2_after != wk2_before {
        return Err(format!("wk2's uplink changed: {wk2_before:?} -> {wk2_after:?}"));
    }
    wk1.vm.sh(&format!("test -e {STAGING}/drained-by-ansible"))?;
    // wk1 runs the binary it ran before the rollout again.
    let old_sum = sha256(binary)?;
    let running = wk1.vm.sh(&format!(
        "sha256sum {BINARY} /proc/$(systemctl show -p MainPID --value uplink.service)/exe | cut -d' ' -f1"
    ))?;
    if running.lines().count() != 2 || running.lines().any(|l| l.trim() != old_sum) {
        return Err(format!(
            "wk1: {BINARY} and the running uplink are {running:?}, want the old {old_sum}"
        ));
    }
    let client = client?;
    Ok(format!(
        "stopped at wk1 ({}), back on its old binary, drained; wk2 kept its binary and process; \
         client: {client}",
        said.trim()
    ))
}

/// Step 5: the same rollout again: wk1 finishes its roll (the mark of step 4), then wk2 rolls;
/// one worker at a time, both end on the new binary, the client sees no failure.
fn rolling_upgrade(topo: &Topology, runner: &Runner, binary: &Path) -> Result<String, String> {
    let new = new_binary(runner, binary)?;
    let new_sum = sha256(&new)?;
    start_client(topo)?;
    let vars = with(json!({ "uplink_binary_src": new }), community_vars());
    let played = runner.play("rolling-upgrade.yml (new binary)", "rolling-upgrade.yml", &vars, &[]);
    let client = stop_client(topo);
    let play = played?;
    if !play.succeeded() {
        return Err(format!("{}\nclient: {client:?}", play.report()));
    }
    // One worker after the other: wk1's roll ended before wk2's drain began.
    let roll_tasks = ["Drain", "Restart uplink", "Undrain"];
    let mut spans = Vec::new();
    for w in &topo.workers {
        let mine: Vec<TaskResult> = play
            .results()
            .into_iter()
            .filter(|r| r.host == w.name && roll_tasks.iter().any(|t| r.task.contains(t)))
            .collect();
        if mine.len() != roll_tasks.len() || mine.iter().any(|r| !r.changed) {
            return Err(format!("{}: the roll's tasks were {mine:?}\n{}", w.name, play.report()));
        }
        let first = mine.first().map(|r| (r.batch, r.start.clone())).unwrap_or_default();
        let last = mine.last().map(|r| (r.batch, r.end.clone())).unwrap_or_default();
        spans.push((w.name.clone(), first, last));
    }
    if let [(a, _, (a_batch, a_end)), (b, (b_batch, b_start), _)] = spans.as_slice() {
        // RFC 3339 times from one clock compare as strings.
        if a_batch >= b_batch || a_end >= b_start {
            return Err(format!("{a} and {b} overlapped: {spans:?}"));
        }
    }
    for w in &topo.workers {
        let exe = w.vm.sh(&format!(
            "test ! -e {STAGING}/drained-by-ansible\n\
             sha256sum /proc/$(systemctl show -p MainPID --value uplink.service)/exe | cut -d' ' -f1"
        ))?;
        if exe.trim() != new_sum {
            return Err(format!(
                "{}: the running uplink is {}, want the new {new_sum}",
                w.name,
                exe.trim()
            ));
        }
    }
    let client = client?;
    let converged = topo.wait(Duration::from_secs(60), || lab_converged(topo))?;
    Ok(format!(
        "{:.0} s; wk1 finished its roll, then wk2 (drain, restart, wait-ready, undrain); both run the \
         new binary; client: {client}; {converged}",
        play.secs
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_callback_results_are_read_in_order() {
        let json = json!({
            "plays": [
                {"tasks": [{"task": {"name": "uplink : Drain", "duration": {"start": "a", "end": "b"}},
                            "hosts": {"wk1": {"changed": true}}}]},
                {"tasks": [{"task": {"name": "uplink : Drain", "duration": {"start": "c", "end": "d"}},
                            "hosts": {"wk2": {"changed": false, "failed": true, "msg": "no"}}}]}
            ],
            "stats": {"wk1": {"changed": 1}, "wk2": {"changed": 0}}
        });
        let play = Play {
            what: "t".into(),
            rc: Some(2),
            json,
            stdout: String::new(),
            stderr: String::new(),
            secs: 0.0,
        };
        let r = play.results();
        assert_eq!(r.len(), 2);
        assert_eq!((r[0].batch, r[0].host.as_str(), r[0].changed), (0, "wk1", true));
        assert_eq!((r[1].batch, r[1].failed, r[1].msg.as_str()), (1, true, "no"));
        assert_eq!(play.stat("wk1", "changed"), Some(1));
        assert_eq!(play.stat("wk3", "changed"), None);
        assert!(play.find("wk2", "Drain").is_some());
        assert_eq!(play.changes(), vec!["wk1: uplink : Drain".to_string()]);
    }

    #[test]
    fn tor_route_gateways() {
        let r = "192.168.100.10 nhid 30 proto bgp metric 20\n\tnexthop via 172.18.20.3 dev ens4 weight 1\n\tnexthop via 172.18.20.2 dev ens4 weight 1";
        assert_eq!(gateways(r), vec!["172.18.20.2", "172.18.20.3"]);
    }

    #[test]
    fn the_playbooks_exist() {
        for f in
            ["site.yml", "rolling-upgrade.yml", "ansible.cfg", "inventories/seed-lab/hosts.yml"]
        {
            assert!(ansible_dir().join(f).is_file(), "ansible/{f} is missing");
        }
    }
}
