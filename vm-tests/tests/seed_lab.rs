//! The seed deck's lab as VMs: one boot, scenarios in sequence on the same topology, each one
//! timed. Run with `make vm-test` (needs root, QEMU, and the image from `make image`).

use serde_json::Value;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};
use uplink_vm_tests::topology::{
    gateways, parse_json, tolerated_resets, worker_setup_script, Image, Topology, Worker,
    BFD_INTERVAL_MS, BFD_MULTIPLIER, BOOT_TIMEOUT, CLIENT_NS, DECK_NNCP_FILE, GR_WORKER, L2_OWNER,
    L2_VIP, TOR_ADDR, TRUNK_NIC, VIP, VRF_LEARNED,
};

type Outcome = Result<String, String>;

/// `ip route show ARGS` on a node running uplink, each `nhid N` followed by the nexthop lines
/// of the group and its members: uplink turns the kernel's nexthop compatibility mode off, so
/// its routes name only their group (`[fib] nexthop_compat_mode`).
/// A group replaced between the two reads (a reload) is left out: callers poll.
fn uplink_route(vm: &uplink_vm_tests::vm::Vm, args: &str) -> Result<String, String> {
    vm.sh(&format!(
        "r=$(ip route show {args}); echo \"$r\"; \
         for id in $(echo \"$r\" | grep -o 'nhid [0-9]*' | cut -d' ' -f2); do \
           for m in $(ip nexthop show id $id 2>/dev/null | grep -o 'group [0-9/,]*' | cut -d' ' -f2 \
                      | tr '/' ' ' | sed 's/,[0-9]*//g') $id; do ip nexthop show id $m 2>/dev/null; done; \
         done; true"
    ))
}

fn tor_route(topo: &Topology, prefix: &str) -> Result<Vec<String>, String> {
    Ok(gateways(&topo.tor.sh(&format!("ip route show {prefix}"))?))
}

fn config_drive_applied(topo: &Topology) -> Outcome {
    let mut notes = Vec::new();
    let checks = [
        ("hostname", "r2"),
        ("sysctl -n net.ipv4.fib_multipath_hash_policy", "1"),
        ("sysctl -n net.ipv4.ip_forward", "1"),
    ];
    for (cmd, want) in checks {
        let got = topo.tor.sh(cmd)?;
        if got.trim() != want {
            return Err(format!("r2: `{cmd}` is {:?}, want {want:?}", got.trim()));
        }
    }
    for w in &topo.workers {
        // uplink is `activating` until its routers run: it applies the node's network
        // policies first, which takes tens of seconds under TCG.
        let got = topo.wait(Duration::from_secs(180), || {
            let got = w.vm.sh("hostname; systemctl is-active uplink; uplink --version || true")?;
            let mut lines = got.lines();
            if lines.next() != Some(w.name.as_str()) || lines.next() != Some("active") {
                return Err(format!(
                    "{}: want hostname {} and uplink active, got:\n{got}{}",
                    w.name,
                    w.name,
                    w.vm.sh("journalctl -u uplink -u uplink-config --no-pager -n 40")
                        .unwrap_or_default()
                ));
            }
            Ok(got)
        })?;
        notes.push(format!("{}: {}", w.name, got.lines().nth(2).unwrap_or("").trim()));
    }
    Ok(notes.join("; "))
}

fn sessions_established(topo: &Topology) -> Outcome {
    topo.wait(Duration::from_secs(180), || {
        let v = parse_json(&topo.vtysh("show bgp summary json")?, "r2 show bgp summary json")?;
        for w in &topo.workers {
            let state = &v["ipv4Unicast"]["peers"][&w.addr]["state"];
            if state != "Established" {
                return Err(format!("r2: peer {} ({}) is {state}", w.addr, w.name));
            }
            let s = w.vm.sh("uplink show bgp summary --json")?;
            let u = parse_json(&s, "uplink show bgp summary --json")?;
            let state = &u["ipv4Unicast"]["peers"][TOR_ADDR]["state"];
            if state != "Established" {
                return Err(format!("{}: peer r2 is {state}", w.name));
            }
        }
        // BFD up on both ends.
        let b = parse_json(&topo.vtysh("show bfd peers json")?, "r2 show bfd peers json")?;
        for w in &topo.workers {
            let up = b.as_array().is_some_and(|a| {
                a.iter().any(|p| p["peer"] == w.addr.as_str() && p["status"] == "up")
            });
            if !up {
                return Err(format!("r2: BFD with {} not up: {b}", w.name));
            }
            let u = parse_json(&w.vm.sh("uplink show bfd peers --json")?, "uplink show bfd peers")?;
            let up = u.as_array().is_some_and(|a| a.iter().any(|p| p["status"] == "up"));
            if !up {
                return Err(format!("{}: BFD not up: {u}", w.name));
            }
        }
        Ok(format!("{} workers Established with BFD up on both ends", topo.workers.len()))
    })
}

fn pod_subnets(topo: &Topology) -> Outcome {
    topo.wait(Duration::from_secs(60), || {
        for w in &topo.workers {
            let gw = tor_route(topo, &w.pod_subnet)?;
            if gw != vec![w.addr.clone()] {
                return Err(format!("r2: {} via {gw:?}, want [{}]", w.pod_subnet, w.addr));
            }
        }
        Ok(topo
            .workers
            .iter()
            .map(|w| format!("{} via {}", w.pod_subnet, w.addr))
            .collect::<Vec<_>>()
            .join(", "))
    })
}

fn all_addrs(workers: &[Worker]) -> Vec<String> {
    let mut v: Vec<String> = workers.iter().map(|w| w.addr.clone()).collect();
    v.sort();
    v
}

fn vip_ecmp(topo: &Topology) -> Outcome {
    let want = all_addrs(&topo.workers);
    topo.wait(Duration::from_secs(60), || {
        let gw = tor_route(topo, VIP)?;
        if gw != want {
            return Err(format!("r2: {VIP} via {gw:?}, want {want:?}"));
        }
        Ok(format!("{VIP} via {}", gw.join(" and ")))
    })
}

/// `n` HTTP requests from the client namespace to the VIP; the answer of each (or FAIL).
fn client_requests(topo: &Topology, n: u32) -> Result<Vec<String>, String> {
    // Each request's bound scales with the machine (2 s on the reference one); the loop's
    // SSH command outlives all of them.
    let max_time = topo.scaled(Duration::from_secs(2)).as_secs_f64().ceil();
    let bound = Duration::from_secs_f64(f64::from(n) * max_time + 30.0);
    let out = topo.tor.sh_for(
        &format!(
            "for i in $(seq 1 {n}); do ip netns exec {CLIENT_NS} curl -s --max-time {max_time} http://{VIP}/ || echo FAIL; done"
        ),
        bound,
    )?;
    Ok(out.lines().map(|l| l.trim().to_string()).collect())
}

fn tally(answers: &[String]) -> BTreeMap<String, usize> {
    let mut m = BTreeMap::new();
    for a in answers {
        *m.entry(a.clone()).or_insert(0) += 1;
    }
    m
}

fn http_both_workers(topo: &Topology) -> Outcome {
    let answers = client_requests(topo, 24)?;
    let t = tally(&answers);
    let missing: Vec<&str> =
        topo.workers.iter().map(|w| w.name.as_str()).filter(|n| !t.contains_key(*n)).collect();
    if !missing.is_empty() || t.contains_key("FAIL") || t.len() != topo.workers.len() {
        return Err(format!(
            "answers from the client {CLIENT_NS}: {t:?} (want every worker and no failure){}",
            topo.tor
                .sh(&format!("ip route show {VIP}; ip netns exec {CLIENT_NS} ip route"))
                .unwrap_or_default()
        ));
    }
    Ok(format!("24 requests: {t:?}"))
}

fn worker_fib(topo: &Topology) -> Outcome {
    // The unit's sandbox (ProtectKernelTunables) leaves uplink's one tunable writable: without
    // it every group change notifies each route, not the failover the benchmarks measure.
    for w in &topo.workers {
        let mode = w.vm.sh("sysctl -n net.ipv4.nexthop_compat_mode")?;
        let refused = w.vm.sh(
            "journalctl -b -u uplink -o cat | grep 'cannot turn net.ipv4.nexthop_compat_mode off' || true",
        )?;
        if mode.trim() != "0" || !refused.trim().is_empty() {
            return Err(format!(
                "{}: net.ipv4.nexthop_compat_mode is {:?}, want 0; uplink's log: {refused}",
                w.name,
                mode.trim()
            ));
        }
    }
    topo.wait(Duration::from_secs(60), || {
        for w in &topo.workers {
            // uplink installs with `proto uplink` (the image ships its name in
            // /etc/iproute2/rt_protos.d); the static default route is not that.
            let r = uplink_route(&w.vm, "172.18.10.0/24 proto uplink")?;
            if gateways(&r) != vec![TOR_ADDR.to_string()] {
                return Err(format!(
                    "{}: 172.18.10.0/24 proto uplink is {r:?}, want via {TOR_ADDR}",
                    w.name
                ));
            }
        }
        Ok(format!(
            "172.18.10.0/24 via {TOR_ADDR} proto uplink on every worker; \
             net.ipv4.nexthop_compat_mode 0 on each"
        ))
    })
}

/// r3's role: one BGP session per worker in each of VRFs cudn3 and cudn4 over VLANs 2001/2002;
/// the layer3 CUDN's per-node /24s and the layer2 CUDN's /16 (ECMP) in the ToR's VRF tables.
fn vrf_lite(topo: &Topology) -> Outcome {
    topo.wait(Duration::from_secs(120), || {
        for (vrf, net) in [("cudn3", 23), ("cudn4", 24)] {
            let v = parse_json(
                &topo.vtysh(&format!("show bgp vrf {vrf} summary json"))?,
                "show bgp vrf summary json",
            )?;
            for (i, w) in topo.workers.iter().enumerate() {
                let peer = format!("172.19.{net}.{}", i + 2);
                let state = &v["ipv4Unicast"]["peers"][&peer]["state"];
                if state != "Established" {
                    return Err(format!("r2 VRF {vrf}: peer {peer} ({}) is {state}", w.name));
                }
            }
        }
        let mut notes = Vec::new();
        for (i, w) in topo.workers.iter().enumerate() {
            let want = format!("172.19.23.{}", i + 2);
            let prefix = format!("172.23.{}.0/24", i + 1);
            let gw = gateways(&topo.tor.sh(&format!("ip route show vrf cudn3 {prefix}"))?);
            if gw != vec![want.clone()] {
                return Err(format!(
                    "r2 VRF cudn3: {prefix} via {gw:?}, want [{want}] ({})",
                    w.name
                ));
            }
            notes.push(format!("cudn3 {prefix} via {want}"));
        }
        let want: Vec<String> =
            (0..topo.workers.len()).map(|i| format!("172.19.24.{}", i + 2)).collect();
        let gw = gateways(&topo.tor.sh("ip route show vrf cudn4 172.24.0.0/16")?);
        if gw != want {
            return Err(format!("r2 VRF cudn4: 172.24.0.0/16 via {gw:?}, want {want:?}"));
        }
        notes.push(format!("cudn4 172.24.0.0/16 via {}", gw.join(" and ")));
        // The other way: what r3's cudn3 router announces is in each worker's cudn3 table
        // (the VRF device's table, uplink's stable id), installed by uplink, not in main.
        for w in &topo.workers {
            let r = uplink_route(&w.vm, &format!("vrf cudn3 {VRF_LEARNED} proto uplink"))?;
            if gateways(&r) != vec!["172.19.23.1".to_string()] || !r.contains("vlan2001") {
                return Err(format!(
                    "{}: {VRF_LEARNED} in VRF cudn3 is {r:?}, want via 172.19.23.1 dev vlan2001",
                    w.name
                ));
            }
        }
        notes.push(format!("{VRF_LEARNED} in each worker's cudn3 table via 172.19.23.1"));
        Ok(notes.join(", "))
    })
}

/// Route leaking between VRFs (frr-k8s `imports`, FRR `import vrf`): each worker's cudn4
/// router imports the default VRF and the default router imports cudn3. A leaked route keeps
/// its next hop in the VRF it came from; the imported originations reach r3's cudn4 router.
fn vrf_leaking(topo: &Topology) -> Outcome {
    let first = topo.wait(Duration::from_secs(120), || {
        let mut notes = Vec::new();
        for w in &topo.workers {
            // Learned in the default VRF from r2, installed in cudn4's table through
            // the default VRF's interface, at the cudn4 router's metric + 1.
            let r = uplink_route(&w.vm, "vrf cudn4 172.18.10.0/24 proto uplink")?;
            if gateways(&r) != vec![TOR_ADDR.to_string()] || r.contains("vlan") {
                return Err(format!(
                    "{}: 172.18.10.0/24 in VRF cudn4 is {r:?}, want via {TOR_ADDR} on the default VRF's NIC",
                    w.name
                ));
            }
            // Learned in cudn3 from r3, installed in main through vlan2001 (VRF cudn3).
            let r = uplink_route(&w.vm, &format!("{VRF_LEARNED} proto uplink"))?;
            if gateways(&r) != vec!["172.19.23.1".to_string()] || !r.contains("vlan2001") {
                return Err(format!(
                    "{}: {VRF_LEARNED} in main is {r:?}, want via 172.19.23.1 dev vlan2001",
                    w.name
                ));
            }
            let shown = w.vm.sh("uplink show fib --vrf cudn4 --json")?;
            let v = parse_json(&shown, "show fib --vrf cudn4 --json")?;
            let entry = &v["172.18.10.0/24"][0];
            if entry["leakedFrom"] != "default" || entry["installed"] != true {
                return Err(format!("{}: show fib --vrf cudn4: {entry}", w.name));
            }
        }
        notes.push(format!(
            "172.18.10.0/24 in each worker's cudn4 table via {TOR_ADDR} (default VRF), {VRF_LEARNED} in main via vlan2001"
        ));
        // What cudn4 imports from the default router (each worker's pod subnet) reaches r3's
        // cudn4 router. (The VIP is there too, but as a service: an advertisement without
        // `peers` goes to every router's peers, as MetalLB's does.)
        for (i, w) in topo.workers.iter().enumerate() {
            let pods = w.pod_subnet.clone();
            let gw = gateways(&topo.tor.sh(&format!("ip route show vrf cudn4 {pods}"))?);
            if gw != vec![format!("172.19.24.{}", i + 2)] {
                return Err(format!("r2 VRF cudn4: {pods} via {gw:?} ({})", w.name));
            }
        }
        notes.push("r2 VRF cudn4: each worker's pod subnet via its cudn4 session".to_string());
        Ok(notes.join(", "))
    })?;
    let reload = leak_reload(topo)?;
    Ok(format!("{first}; {reload}"))
}

/// r2's count of sessions established with wk1's cudn4 router.
fn cudn4_sessions(topo: &Topology) -> Result<u64, String> {
    let v = parse_json(
        &topo.vtysh("show bgp vrf cudn4 neighbors 172.19.24.2 json")?,
        "show bgp vrf cudn4 neighbors json",
    )?;
    Ok(v["172.19.24.2"]["connectionsEstablished"].as_u64().unwrap_or(0))
}

/// `systemctl reload` with wk1's cudn4 `imports` removed, then restored: the leak leaves and
/// comes back (filled from what the default VRF has installed), wk1's pod subnet leaves r2's
/// cudn4 table and comes back, and the cudn4 session is never reset.
fn leak_reload(topo: &Topology) -> Outcome {
    let Some(wk1) = topo.workers.first() else { return Err("no worker".into()) };
    let pods = wk1.pod_subnet.clone();
    let fragment = "/etc/uplink/conf.d/vrf-lite.toml";
    let sessions = cudn4_sessions(topo)?;
    let without = r#"imports = [{ vrf = "default" }]"#;
    wk1.vm.sh(&format!(
        "cp {fragment} /root/vrf-lite.toml && grep -vF '{without}' /root/vrf-lite.toml > {fragment} \
         && ! cmp -s {fragment} /root/vrf-lite.toml && systemctl reload uplink"
    ))?;
    topo.wait(Duration::from_secs(60), || {
        let leaked = uplink_route(&wk1.vm, "vrf cudn4 172.18.10.0/24 proto uplink")?;
        let gw = gateways(&topo.tor.sh(&format!("ip route show vrf cudn4 {pods}"))?);
        if leaked.trim().is_empty() && gw.is_empty() {
            Ok(())
        } else {
            Err(format!("wk1 cudn4 still has {leaked:?}; r2 VRF cudn4 {pods} via {gw:?}"))
        }
    })?;
    wk1.vm.sh(&format!("cp /root/vrf-lite.toml {fragment} && systemctl reload uplink"))?;
    topo.wait(Duration::from_secs(60), || {
        let leaked = uplink_route(&wk1.vm, "vrf cudn4 172.18.10.0/24 proto uplink")?;
        let gw = gateways(&topo.tor.sh(&format!("ip route show vrf cudn4 {pods}"))?);
        if gateways(&leaked) == vec![TOR_ADDR.to_string()] && gw == vec!["172.19.24.2".to_string()]
        {
            Ok(())
        } else {
            Err(format!("wk1 cudn4 has {leaked:?}; r2 VRF cudn4 {pods} via {gw:?}"))
        }
    })?;
    let after = cudn4_sessions(topo)?;
    if after != sessions {
        return Err(format!("the cudn4 session was reset by the reload ({sessions} -> {after})"));
    }
    Ok(format!(
        "reload without wk1's cudn4 imports: the leak and {pods} left, then came back; no session reset"
    ))
}

/// Watches the ToR for the dead worker's next hop to leave the VIP route: timestamps the last
/// BFD packet from the worker (tcpdump) and the first route event after which the next hop is
/// gone (`ip monitor`, event-driven so the watcher costs no CPU while it waits).
const WATCHER: &str = r#"
import json, subprocess, sys, threading, time
vip, dead = sys.argv[1], sys.argv[2]
state = {"last_bfd": None}
def sniff():
    p = subprocess.Popen(["tcpdump", "-i", "any", "-n", "-tt", "-l", "-q",
                          "udp dst port 3784 and src host " + dead],
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    for line in p.stdout:
        try:
            state["last_bfd"] = float(line.split()[0])
        except (ValueError, IndexError):
            pass
threading.Thread(target=sniff, daemon=True).start()
mon = subprocess.Popen(["ip", "monitor", "route", "nexthop"], stdout=subprocess.PIPE, text=True)
t = time.time()
while state["last_bfd"] is None and time.time() - t < 30:
    time.sleep(0.05)
print("ready" if state["last_bfd"] else "no BFD packets from " + dead, flush=True)
def gone():
    out = subprocess.run(["ip", "route", "show", vip], capture_output=True, text=True).stdout
    return ("via " + dead + " ") not in out, out
while True:
    line = mon.stdout.readline()
    if not line:
        break
    now = time.time()
    g, out = gone()
    if g:
        print(json.dumps({"route_gone": now, "last_bfd": state["last_bfd"], "route": out}), flush=True)
        break
"#;

/// Runs on the ToR, a client on the layer 2 VIP's own segment: requests the VIP every 50 ms
/// (a new connection each, 300 ms to answer) and notes each answer's worker with the ToR's
/// clock, until /tmp/l2.stop appears; then prints the first and last answer of each worker,
/// the longest time without an answer and the failures.
const L2_CLIENT: &str = r#"
import http.client, json, os, sys, time
vip = sys.argv[1]
answers, failures = [], 0
print("ready", flush=True)
while not os.path.exists("/tmp/l2.stop"):
    at = time.time()
    try:
        c = http.client.HTTPConnection(vip, 80, timeout=0.3)
        c.request("GET", "/")
        body = c.getresponse().read().decode().strip()
        c.close()
        answers.append((at, body))
    except Exception:
        failures += 1
    time.sleep(max(0.0, 0.05 - (time.time() - at)))
first, last = {}, {}
for at, who in answers:
    first.setdefault(who, at)
    last[who] = at
gap = max((b[0] - a[0] for a, b in zip(answers, answers[1:])), default=None)
print(json.dumps({"first": first, "last": last, "longest_gap": gap, "failures": failures,
                  "answers": len(answers)}), flush=True)
"#;

/// Which worker the ToR's request to the layer 2 VIP reaches.
fn l2_answer(topo: &Topology) -> Result<String, String> {
    Ok(topo
        .tor
        .sh(&format!("curl -s --max-time 2 http://{L2_VIP}/ || echo FAIL"))?
        .trim()
        .to_string())
}

/// The node each worker's `uplink show l2` says answers for the layer 2 VIP's Service.
fn l2_answering(w: &Worker) -> Result<String, String> {
    let v = parse_json(&w.vm.sh("uplink show l2 --json")?, "uplink show l2 --json")?;
    let services = v["services"].as_array().cloned().unwrap_or_default();
    let service = services.iter().find(|s| s["service"] == "default/lan-web");
    match service.and_then(|s| s["answering"].as_str()) {
        Some(node) if v["not_answering"].is_null() => Ok(node.to_string()),
        _ => Err(format!("{}: nobody answers for default/lan-web: {v}", w.name)),
    }
}

/// The last `count` lines of `w`'s serial console from uplink (or systemd about it) that
/// contain one of `patterns`: the console outlives a powered-off or hung worker's SSH.
fn uplink_console(w: &Worker, patterns: &[&str], count: usize) -> String {
    let console = w.vm.console_text();
    let lines: Vec<&str> = console
        .lines()
        .filter(|l| l.contains("uplink"))
        .filter(|l| patterns.iter().any(|p| l.contains(p)))
        .collect();
    let tail = lines.get(lines.len().saturating_sub(count)..).unwrap_or(&[]);
    format!("\n--- {}'s console: uplink ---\n{}", w.name, tail.join("\n"))
}

/// What each worker's uplink said last about the layer 2 addresses it took or gave up, and
/// about its membership: the first thing to read when a client reached the wrong node.
fn l2_report(topo: &Topology) -> String {
    let patterns =
        ["layer 2: answering for", "layer 2: no longer", "layer 2: now answering", "membership: "];
    topo.workers.iter().map(|w| uplink_console(w, &patterns, 8)).collect()
}

/// Layer 2 mode (issue #25): the workers agree that wk2 answers for the layer 2 VIP, the ToR
/// (on the same segment) reaches wk2's web server there and its neighbour entry for the VIP
/// is wk2's MAC on net20: the kernels answer no ARP for it (the image's sysctls), uplink does.
fn layer2_vip(topo: &Topology) -> Outcome {
    topo.wait(Duration::from_secs(60), || {
        for w in &topo.workers {
            let said = l2_answering(w)?;
            if said != L2_OWNER {
                return Err(format!("{} says {said} answers for {L2_VIP}", w.name));
            }
        }
        Ok(())
    })?;
    let answers: Vec<String> = (0..5).map(|_| l2_answer(topo)).collect::<Result<_, _>>()?;
    if answers.iter().any(|a| a != L2_OWNER) {
        return Err(format!("the ToR's requests to {L2_VIP}: {answers:?}, want only {L2_OWNER}"));
    }
    let owner = worker_named(topo, L2_OWNER)?;
    let mac = owner.vm.sh(&format!(
        "for d in /sys/class/net/*; do \
           ip -4 -o addr show dev ${{d##*/}} | grep -q ' {}/' && cat $d/address; done; true",
        owner.addr
    ))?;
    let mac = mac.trim().to_lowercase();
    let neighbour = topo.tor.sh(&format!("ip neigh show {L2_VIP}"))?.to_lowercase();
    if mac.is_empty() || !neighbour.contains(&mac) {
        return Err(format!(
            "r2's neighbour entry for {L2_VIP}: {neighbour:?}, want {L2_OWNER}'s {mac}"
        ));
    }
    Ok(format!("{L2_OWNER} answers ARP for {L2_VIP} ({mac}); 5 of 5 requests from r2 reached it"))
}

/// The ToR's count of dropped sessions with `addr`; Err unless the session is Established.
fn survivor_drops(topo: &Topology, addr: &str) -> Result<u64, String> {
    let v = parse_json(&topo.vtysh("show bgp summary json")?, "show bgp summary json")?;
    let p = &v["ipv4Unicast"]["peers"][addr];
    match (p["state"].as_str(), p["connectionsDropped"].as_u64()) {
        (Some("Established"), Some(n)) => Ok(n),
        _ => Err(format!("r2: peer {addr} is not Established: {p}")),
    }
}

/// Why sessions with a worker went down: the ToR's and the worker's view.
fn flap_report(topo: &Topology, i: usize) -> String {
    let Some(w) = topo.workers.get(i) else { return String::new() };
    // The ToR's log first: it says why a session ended (hold timer, BFD, a closed connection),
    // and a CI log keeps only the first lines of a reason.
    let f = topo
        .tor
        .sh(&format!("journalctl --no-pager -t bgpd -t bfdd | grep -F '{}' | tail -n 15", w.addr))
        .unwrap_or_else(|e| e);
    let mut out = format!("\n--- r2 bgpd/bfdd log for {} ---\n{f}", w.addr);
    for cmd in [format!("show bgp neighbors {} json", w.addr), format!("show bfd peer {}", w.addr)]
    {
        let o = topo.vtysh(&cmd).unwrap_or_else(|e| e);
        let o = if cmd.ends_with("json") {
            parse_json(&o, "neighbors")
                .map(|v| {
                    let n = &v[&w.addr];
                    format!(
                        "lastResetDueTo {} lastErrorCodeSubcode {} connectionsDropped {}",
                        n["lastResetDueTo"], n["lastErrorCodeSubcode"], n["connectionsDropped"]
                    )
                })
                .unwrap_or(o)
        } else {
            o
        };
        out.push_str(&format!("\n--- r2# {cmd} ---\n{o}"));
    }
    let j = w
        .vm
        .sh("journalctl -u uplink --no-pager | grep -iE 'bfd|down|closed|notification|hold' | tail -n 20")
        .unwrap_or_else(|e| e);
    out.push_str(&format!("\n--- {} uplink journal ---\n{j}", w.name));
    out
}

fn bfd_failover(topo: &mut Topology) -> Outcome {
    let (dead_i, keep_i) = (1, 0);
    let (dead_addr, dead_name) = {
        let d = topo.workers.get(dead_i).ok_or("no second worker")?;
        (d.addr.clone(), d.name.clone())
    };
    let keep_name = topo.workers.get(keep_i).ok_or("no first worker")?.name.clone();
    vip_ecmp(topo)?;
    let keep_addr = topo.workers.get(keep_i).map(|k| k.addr.clone()).unwrap_or_default();
    let drops_before = survivor_drops(topo, &keep_addr)?;
    if drops_before > 0 {
        // Not this scenario's failure, but worth seeing: a flap under TCG load before it.
        println!(
            "  NOTE: r2's session with {keep_name} dropped {drops_before} time(s) before the failover:{}",
            flap_report(topo, keep_i)
        );
    }
    tor_script_start(topo, "watch", WATCHER, &format!("{VIP} {dead_addr}"), 300, 40)?;
    // The layer 2 VIP is the dying worker's: a client on its segment requests it throughout.
    if dead_name != L2_OWNER {
        return Err(format!("{dead_name} is powered off but {L2_OWNER} answers for {L2_VIP}"));
    }
    // Both workers agree that the owner answers before it dies: the scenarios before (the
    // Ansible rollout restarts uplink on each) may leave a membership still settling.
    topo.wait(Duration::from_secs(60), || {
        for w in &topo.workers {
            let said = l2_answering(w)?;
            if said != L2_OWNER {
                return Err(format!(
                    "before the power-off {} says {said} answers for {L2_VIP}",
                    w.name
                ));
            }
        }
        Ok(())
    })
    .map_err(|e| format!("{e}{}", l2_report(topo)))?;
    let owner_before = l2_answer(topo)?;
    if owner_before != L2_OWNER {
        return Err(format!(
            "before the power-off r2 reached {owner_before} at {L2_VIP}{}",
            l2_report(topo)
        ));
    }
    tor_script_start(topo, "l2", L2_CLIENT, L2_VIP, 300, 40)?;

    let killed = topo.workers.get_mut(dead_i).ok_or("no second worker")?.vm.power_off()?;
    // Host-side view: poll the ToR over SSH (an upper bound: includes the SSH round trip).
    let host_ms = topo.wait_every(Duration::from_secs(30), Duration::from_millis(20), || {
        let gw = tor_route(topo, VIP)?;
        if gw.contains(&dead_addr) {
            Err(format!("{VIP} still via {gw:?}"))
        } else {
            Ok(killed.elapsed().as_millis())
        }
    })?;
    let w = tor_script_result(topo, "watch")?;
    let tor_ms = match (w["route_gone"].as_f64(), w["last_bfd"].as_f64()) {
        (Some(g), Some(b)) => (g - b) * 1000.0,
        _ => return Err(format!("watcher result incomplete: {w}")),
    };
    let survivors = gateways(w["route"].as_str().unwrap_or(""));
    if survivors != vec![keep_addr.clone()] {
        return Err(format!("after the power-off {VIP} is via {survivors:?}, want [{keep_addr}]"));
    }
    let neighbor = topo.vtysh(&format!("show bgp neighbors {dead_addr} json"))?;
    let reset = parse_json(&neighbor, "show bgp neighbors json")
        .map(|v| v[&dead_addr]["lastResetDueTo"].to_string())
        .unwrap_or_default();

    // Detection is BFD's (interval x multiplier), not the BGP hold time (9 s): allow for TCG.
    let detect_ms = f64::from(BFD_INTERVAL_MS * BFD_MULTIPLIER);
    if tor_ms > detect_ms + 2000.0 {
        return Err(format!(
            "next hop left {tor_ms:.0} ms after the last BFD packet; BFD detection is {detect_ms} ms"
        ));
    }
    // The survivor was not disturbed: its session stayed up through the failover.
    let drops_after = survivor_drops(topo, &keep_addr)?;
    if drops_after != drops_before {
        return Err(format!(
            "survivor {keep_name}'s session dropped during the failover ({drops_before} -> \
             {drops_after} drops){}",
            flap_report(topo, keep_i)
        ));
    }
    let answers = client_requests(topo, 10)?;
    let t = tally(&answers);
    if t.len() != 1 || !t.contains_key(&keep_name) {
        return Err(format!(
            "after {dead_name} powered off the client got {t:?}, want only {keep_name}"
        ));
    }
    // Layer 2: the survivor answers for the VIP; the client on the segment saw no answer for
    // at most the membership's detection time (1 s) plus the gratuitous ARP's way, under 2 s
    // (scaled for this machine).
    topo.wait(Duration::from_secs(30), || {
        let by = l2_answer(topo)?;
        (by == keep_name).then_some(()).ok_or(format!("r2 reaches {by} at {L2_VIP}"))
    })?;
    topo.tor.sh("touch /tmp/l2.stop")?;
    let l2 = tor_script_result(topo, "l2")?;
    let (Some(last_dead), Some(first_keep)) =
        (l2["last"][&dead_name].as_f64(), l2["first"][&keep_name].as_f64())
    else {
        return Err(format!("the layer 2 client's answers: {l2}{}", l2_report(topo)));
    };
    let l2_outage = first_keep - last_dead;
    let l2_bound = topo.scaled(Duration::from_secs(2)).as_secs_f64();
    if l2_outage > l2_bound {
        return Err(format!(
            "layer 2: no answer at {L2_VIP} for {l2_outage:.2} s after {dead_name}'s last \
             (bound {l2_bound:.2} s): {l2}{}",
            l2_report(topo)
        ));
    }
    let l2_survivor = l2_answering(worker_named(topo, &keep_name)?)?;
    if l2_survivor != keep_name {
        return Err(format!("{keep_name} says {l2_survivor} answers for {L2_VIP}"));
    }
    println!(
        "  BFD failover: next hop gone {tor_ms:.0} ms after {dead_name}'s last BFD packet (ToR clock); \
         {host_ms} ms after power-off as seen over SSH; r2 lastResetDueTo {reset}"
    );
    println!(
        "  layer 2 failover: {L2_VIP} answered by {keep_name} {l2_outage:.2} s after {dead_name}'s \
         last answer (ToR clock; requests every 50 ms: {l2})"
    );
    Ok(format!(
        "{dead_name} off: next hop left after {tor_ms:.0} ms (ToR, from last BFD packet), {host_ms} ms (host, from power-off); \
         client: {t:?}; layer 2 VIP on {keep_name} after {l2_outage:.2} s"
    ))
}

// ---- Day-2 operations (issue #13): graceful restart, the watchdog, a reboot ----

/// Runs on the ToR while a worker restarts or reboots: every 50 ms it notes whether the VIP
/// route has the worker as a next hop and whether the ToR's BGP session with it is
/// Established (its TCP connection), and a client in the client namespace requests the VIP in
/// a loop. It writes each change of either, and every failed request, with the ToR's clock;
/// it stops when /tmp/observe.stop appears and then prints a summary.
const OBSERVER: &str = r#"
import json, os, subprocess, sys, threading, time
vip, worker, client_ns = sys.argv[1], sys.argv[2], sys.argv[3]
events, failures, requests = [], [], [0]
def client():
    while not os.path.exists("/tmp/observe.stop"):
        r = subprocess.run(["ip", "netns", "exec", client_ns, "curl", "-sS", "--max-time", "2",
                            "http://" + vip + "/"], capture_output=True, text=True)
        requests[0] += 1
        if r.returncode != 0 or not r.stdout.strip():
            failures.append({"at": time.time(), "rc": r.returncode, "error": r.stderr.strip()})
        time.sleep(0.1)
threading.Thread(target=client, daemon=True).start()
def sample():
    route = subprocess.run(["ip", "route", "show", vip], capture_output=True, text=True).stdout
    tcp = subprocess.run(["ss", "-Htn", "state", "established", "dst", worker,
                          "( sport = :179 or dport = :179 )"], capture_output=True, text=True).stdout
    return ("via " + worker + " ") in route, bool(tcp.strip())
last = None
print("ready", flush=True)
while not os.path.exists("/tmp/observe.stop"):
    now = sample()
    if now != last:
        events.append({"at": time.time(), "next_hop": now[0], "session": now[1]})
        last = now
    time.sleep(0.05)
time.sleep(0.3)
print(json.dumps({"events": events, "failures": failures, "requests": requests[0]}), flush=True)
"#;

/// A Python script run in the background on the ToR as /tmp/`name`.py with `args`, stopped
/// after `lifetime_s`, its output in /tmp/`name`.out; /tmp/`name`.stop, if the script
/// watches for it, is removed first. Returns once the script printed "ready".
fn tor_script_start(
    topo: &Topology,
    name: &str,
    script: &str,
    args: &str,
    lifetime_s: u32,
    ready_within_s: u64,
) -> Result<(), String> {
    topo.tor.sh(&format!(
        "rm -f /tmp/{name}.stop /tmp/{name}.out\ncat > /tmp/{name}.py <<'EOF'\n{script}\nEOF\n\
         setsid -f timeout {lifetime_s} python3 /tmp/{name}.py {args} </dev/null >/tmp/{name}.out 2>&1"
    ))?;
    topo.wait(Duration::from_secs(ready_within_s), || {
        let o = topo.tor.sh(&format!("cat /tmp/{name}.out"))?;
        o.contains("ready").then_some(()).ok_or(format!("{name} not ready: {o}"))
    })
}

/// The result a [`tor_script_start`] script printed: its first line that is a JSON object.
fn tor_script_result(topo: &Topology, name: &str) -> Result<Value, String> {
    let line = topo.wait(Duration::from_secs(20), || {
        let o = topo.tor.sh(&format!("cat /tmp/{name}.out"))?;
        o.lines()
            .find(|l| l.starts_with('{'))
            .map(str::to_owned)
            .ok_or(format!("{name}: no result: {o}"))
    })?;
    parse_json(&line, name)
}

/// Starts [`OBSERVER`] on the ToR for `worker_addr`.
fn observe_start(topo: &Topology, worker_addr: &str) -> Result<(), String> {
    tor_script_start(
        topo,
        "observe",
        OBSERVER,
        &format!("{VIP} {worker_addr} {CLIENT_NS}"),
        900,
        30,
    )
}

/// Stops the observer and returns its summary.
fn observe_stop(topo: &Topology) -> Result<Value, String> {
    topo.tor.sh("touch /tmp/observe.stop")?;
    tor_script_result(topo, "observe")
}

/// The observer's summary on two short lines, times in seconds from its first sample: each
/// change of the VIP's next hop and of the session, then the client's failures (the first
/// five). The whole JSON follows in a report, but a CI log folds and cuts long lines.
fn observed_timeline(summary: &Value) -> String {
    let start = summary["events"][0]["at"].as_f64().unwrap_or_default();
    let flag = |v: &Value, yes: &str, no: &str| -> String {
        if v.as_bool().unwrap_or_default() {
            yes.into()
        } else {
            no.into()
        }
    };
    let events: Vec<String> = summary["events"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default()
        .iter()
        .map(|e| {
            format!(
                "+{:.1} s {}/{}",
                e["at"].as_f64().unwrap_or_default() - start,
                flag(&e["next_hop"], "next hop", "NO NEXT HOP"),
                flag(&e["session"], "session", "no session")
            )
        })
        .collect();
    let failures = summary["failures"].as_array().map(Vec::as_slice).unwrap_or_default();
    let first: Vec<String> = failures
        .iter()
        .take(5)
        .map(|f| {
            format!(
                "+{:.1} s rc {} {}",
                f["at"].as_f64().unwrap_or_default() - start,
                f["rc"],
                f["error"].as_str().unwrap_or_default()
            )
        })
        .collect();
    format!(
        "observed: {}\n{} of {} client requests failed: {}",
        events.join(", "),
        failures.len(),
        summary["requests"],
        first.join("; ")
    )
}

/// The first time in `summary` at which `field` became `value`.
fn first_event(summary: &Value, field: &str, value: bool) -> Option<f64> {
    summary["events"]
        .as_array()?
        .iter()
        .find(|e| e[field] == Value::Bool(value))
        .and_then(|e| e["at"].as_f64())
}

fn worker_named<'a>(topo: &'a Topology, name: &str) -> Result<&'a Worker, String> {
    topo.workers.iter().find(|w| w.name == name).ok_or(format!("no worker {name}"))
}

/// The ToR's count of established sessions with `addr` so far.
fn tor_connections(topo: &Topology, addr: &str) -> Result<u64, String> {
    let v = parse_json(&topo.vtysh(&format!("show bgp neighbors {addr} json"))?, "neighbors")?;
    v[addr]["connectionsEstablished"].as_u64().ok_or(format!("r2: no {addr} in {v}"))
}

/// RFC 4724 under systemd: the graceful-restart worker is restarted twice — by `systemctl
/// restart` and by the watchdog after it hung (SIGSTOP) — and the ToR never loses it as the
/// VIP's next hop, while a client requesting the VIP sees no failure. The ToR's BFD session
/// with it goes down each time; the ToR trusts graceful restart over it
/// (`bfd check-control-plane-failure`).
fn graceful_restart_and_watchdog(topo: &Topology) -> Outcome {
    let wk = worker_named(topo, GR_WORKER)?;
    vip_ecmp(topo)?;
    let connections = tor_connections(topo, &wk.addr)?;
    observe_start(topo, &wk.addr)?;
    // This scenario's watchdog is short: the ToR's hold time is 9 s, and a hung uplink must be
    // killed before it expires (a hold timer expiry ends graceful restart without RFC 8538's
    // N bit): the watchdog fires 2-4 s into the hang, and the worker's last KEEPALIVE came at
    // most 1 s before it (topology.rs). With the usual hold times (90-180 s) the unit's 30 s is
    // short enough.
    let dropin = "/run/systemd/system/uplink.service.d/watchdog.conf";
    // wait-ready's own bound scales with the machine, and the SSH command outlives it.
    let ready = topo.scaled(Duration::from_secs(120)).as_secs();
    let ssh_bound = Duration::from_secs(2 * ready + 60);
    wk.vm.sh_for(
        &format!(
            "mkdir -p {d} && printf '[Service]\\nWatchdogSec=4s\\n' > {dropin} && systemctl daemon-reload \
             && systemctl restart uplink && uplink wait-ready --timeout {ready}s",
            d = dropin.trim_end_matches("/watchdog.conf")
        ),
        ssh_bound,
    )?;
    let restarts = || -> Result<u64, String> {
        let n = wk.vm.sh("systemctl show -p NRestarts --value uplink")?;
        n.trim().parse().map_err(|e| format!("NRestarts {n:?}: {e}"))
    };
    let before = restarts()?;
    let pid = wk.vm.sh("systemctl show -p MainPID --value uplink")?;
    let stopped = Instant::now();
    wk.vm.sh(&format!("kill -STOP {}", pid.trim()))?;
    topo.wait(Duration::from_secs(60), || {
        let n = restarts()?;
        (n > before).then_some(()).ok_or(format!("NRestarts still {n}"))
    })?;
    let restarted_after = stopped.elapsed();
    let watchdog =
        wk.vm.sh("journalctl -u uplink --no-pager | grep -c 'Watchdog timeout' || true")?;
    wk.vm.sh_for(
        &format!(
            "uplink wait-ready --timeout {ready}s && rm -f {dropin} && systemctl daemon-reload \
             && systemctl restart uplink && uplink wait-ready --timeout {ready}s"
        ),
        ssh_bound,
    )?;
    vip_ecmp(topo)?;
    let seen = observe_stop(topo)?;
    let failures = seen["failures"].as_array().map_or(0, Vec::len);
    if first_event(&seen, "next_hop", false).is_some() || failures > 0 {
        let sessions_and_restarts = [
            "session established",
            "session down",
            "refused connection",
            "graceful restart",
            "Watchdog",
            "Started uplink",
            "Stopping uplink",
        ];
        return Err(format!(
            "the ToR lost {} as the VIP's next hop or the client saw failures (SIGSTOP → restart {:.1} s)\n{}{}{}\n--- the observer ---\n{seen}",
            wk.name,
            restarted_after.as_secs_f64(),
            observed_timeline(&seen),
            uplink_console(wk, &sessions_and_restarts, 8),
            flap_report(topo, 0)
        ));
    }
    if watchdog.trim() == "0" {
        return Err(format!(
            "{}: no 'Watchdog timeout' in the journal: systemd did not restart it",
            wk.name
        ));
    }
    let sessions = tor_connections(topo, &wk.addr)? - connections;
    if sessions < 3 {
        return Err(format!(
            "r2 saw {sessions} new sessions with {}, want 3 (two restarts and the watchdog's)",
            wk.name
        ));
    }
    Ok(format!(
        "{}: systemctl restart, SIGSTOP → watchdog restart after {:.1} s, restart: {sessions} new sessions \
         on r2, the VIP's next hop never left, {} client requests, no failure",
        wk.name,
        restarted_after.as_secs_f64(),
        seen["requests"]
    ))
}

/// `systemctl reboot` of the other worker: uplink drains under its logind delay inhibitor, so
/// the ToR moves the VIP to the remaining worker before the rebooting one ends its session,
/// and a client requesting the VIP until the worker is gone sees no failure. The worker comes
/// back (the same kernel, initramfs and config drive: a PXE node), gets the test's web server
/// again, and takes its share of the VIP's requests.
fn reboot_moves_the_vip_first(topo: &mut Topology) -> Outcome {
    let i = topo.workers.iter().position(|w| w.name != GR_WORKER).ok_or("no second worker")?;
    let (name, addr) = {
        let w = topo.workers.get(i).ok_or("no second worker")?;
        (w.name.clone(), w.addr.clone())
    };
    vip_ecmp(topo)?;
    observe_start(topo, &addr)?;
    let boots = |topo: &Topology| -> usize {
        topo.workers.get(i).map_or(0, |w| w.vm.console_text().matches("Linux version").count())
    };
    let booted = boots(topo);
    let t0 = Instant::now();
    topo.workers.get(i).ok_or("no worker")?.vm.sh("systemd-run --on-active=1 systemctl reboot")?;
    topo.wait(Duration::from_secs(300), || {
        (boots(topo) > booted).then_some(()).ok_or(format!("{name} has not booted again"))
    })?;
    let down = t0.elapsed();
    // The old node is gone: what the client saw until here is the reboot's doing. (The web
    // server is the test's, started over SSH; the new boot has none until it is set up.)
    let seen = observe_stop(topo)?;
    let w = topo.workers.get_mut(i).ok_or("no worker")?;
    w.vm.forget_master();
    w.vm.wait_ssh(BOOT_TIMEOUT)?;
    let w = topo.workers.get(i).ok_or("no worker")?;
    w.vm.sh(&worker_setup_script(&name))?;
    topo.wait(Duration::from_secs(240), || w.vm.sh("uplink wait-ready --timeout 10s"))?;
    vip_ecmp(topo)?;
    let back = t0.elapsed();
    http_both_workers(topo)?;

    let moved = first_event(&seen, "next_hop", false);
    let gone = first_event(&seen, "session", false);
    let (Some(moved), Some(gone)) = (moved, gone) else {
        return Err(format!("the observer saw no move or no session end: {seen}"));
    };
    if moved >= gone {
        return Err(format!(
            "the ToR moved the VIP {:.0} ms after {name}'s session ended: {seen}",
            (moved - gone) * 1000.0
        ));
    }
    // The VIP leaving the ECMP set may reset a request in flight (CLIENT_RESETS_ALLOWED).
    let failures = seen["failures"].as_array().cloned().unwrap_or_default();
    let errors = failures.iter().map(|f| f["error"].as_str().unwrap_or(""));
    let Some(resets) = tolerated_resets(errors) else {
        return Err(format!(
            "the client saw {} failed requests through the reboot: {seen}",
            failures.len()
        ));
    };
    let outcome = match resets {
        0 => "no failure".to_string(),
        n => format!("none lost, {n} reset by the ECMP change"),
    };
    Ok(format!(
        "{name}: the VIP moved {:.1} s before its session ended; {} client requests until it was \
         gone, {outcome}; booted again after {:.0} s, back in the VIP's ECMP after {:.0} s",
        gone - moved,
        seen["requests"],
        down.as_secs_f64(),
        back.as_secs_f64()
    ))
}

// ---- The node's own network (issue #12): built by uplink from network policies ----

/// The enactment of `policy` on a worker (`uplink show network enactments --json`).
fn enactment(w: &Worker, policy: &str) -> Result<Value, String> {
    let v =
        parse_json(&w.vm.sh("uplink show network enactments --json")?, "show network enactments")?;
    v.as_array()
        .and_then(|a| a.iter().find(|e| e["policy"] == policy).cloned())
        .ok_or(format!("{}: no enactment for {policy}: {v}", w.name))
}

/// Each worker built its VLANs and VRFs itself, before its routers: the VRF devices uplink
/// makes for the `[[networks]]` (with their documented table ids), and the VLANs of the seed
/// deck's NNCP on wk1 and of the fleet form on wk2 (addresses from each node's identity).
/// The config drive carries no VLAN or VRF keyfile (topology.rs, unit-tested).
fn node_network_from_policies(topo: &Topology) -> Outcome {
    // The daemon starts its routers after at most 90 s of policies; NetworkManager under TCG
    // may still be applying the last ones then (on one core: a policy had no enactment yet when
    // the others had settled). Wait until each policy of each worker has an enactment that has
    // settled.
    let expected = |i: usize| {
        let nncp = if i == 0 { format!("{TRUNK_NIC}-wk1") } else { "vrf-lite-vlans".into() };
        ["uplink-vrf-cudn3".to_string(), "uplink-vrf-cudn4".to_string(), nncp]
    };
    for (i, w) in topo.workers.iter().enumerate() {
        let want = expected(i);
        topo.wait(Duration::from_secs(240), || {
            let v = parse_json(
                &w.vm.sh("uplink show network enactments --json")?,
                "show network enactments",
            )?;
            let unsettled: Vec<String> = want
                .iter()
                .filter_map(|policy| {
                    let e =
                        v.as_array().into_iter().flatten().find(|e| e["policy"] == policy.as_str());
                    match e {
                        None => Some(format!("{policy}: no enactment yet")),
                        Some(e) if e["status"] == "Pending" || e["status"] == "Progressing" => {
                            Some(format!("{policy} {} ({})", e["status"], e["message"]))
                        }
                        Some(_) => None,
                    }
                })
                .collect();
            if unsettled.is_empty() {
                Ok(())
            } else {
                Err(format!("{}: policies not settled: {}", w.name, unsettled.join("; ")))
            }
        })?;
    }
    let mut notes = Vec::new();
    for (i, w) in topo.workers.iter().enumerate() {
        let policies = parse_json(
            &w.vm.sh("uplink show network policies --json")?,
            "show network policies --json",
        )?;
        let names: Vec<&str> =
            policies.as_array().into_iter().flatten().filter_map(|p| p["name"].as_str()).collect();
        let want = expected(i);
        if names != want {
            return Err(format!("{}: policies {names:?}, want {want:?}", w.name));
        }
        for name in &want {
            let e = enactment(w, name)?;
            if e["status"] != "Available" {
                return Err(format!("{}: policy {name} is not Available: {e}", w.name));
            }
        }
        // The VRF tables are the ones uplink documents for the generated policies.
        for vrf in ["cudn3", "cudn4"] {
            let policy = policies
                .as_array()
                .into_iter()
                .flatten()
                .find(|p| p["name"] == format!("uplink-vrf-{vrf}"))
                .ok_or("no VRF policy")?;
            let table = &policy["desiredState"]["interfaces"][0]["vrf"]["route-table-id"];
            let link =
                parse_json(&w.vm.sh(&format!("ip -d -j link show {vrf}"))?, "ip -d -j link")?;
            let kernel = &link[0]["linkinfo"]["info_data"]["table"];
            if table.as_u64().is_none() || table != kernel {
                return Err(format!(
                    "{}: VRF {vrf} has table {kernel}, the policy says {table}",
                    w.name
                ));
            }
            notes.push(format!("{} {vrf} table {table}", w.name));
        }
        // The VLANs: on the trunk NIC by the name the NNCP uses, in their VRFs, with this
        // node's addresses (wk2's resolved from ${node.host(...)}).
        let host = i + 2;
        for (vlan, vrf, net) in [(2001, "cudn3", 23), (2002, "cudn4", 24)] {
            let link = parse_json(
                &w.vm.sh(&format!("ip -d -j addr show vlan{vlan}"))?,
                "ip -d -j addr show",
            )?;
            let l = &link[0];
            let addr = format!("172.19.{net}.{host}");
            let has_addr = l["addr_info"]
                .as_array()
                .is_some_and(|a| a.iter().any(|x| x["local"] == addr.as_str()));
            if l["link"] != TRUNK_NIC
                || l["master"] != vrf
                || l["linkinfo"]["info_data"]["id"] != vlan
                || !has_addr
            {
                return Err(format!(
                    "{}: vlan{vlan} is not VLAN {vlan} on {TRUNK_NIC} in {vrf} with {addr}: {l}",
                    w.name
                ));
            }
        }
        if i == 1 {
            let e = enactment(w, "vrf-lite-vlans")?;
            let resolved = e["desired_state"].to_string();
            if !resolved.contains("172.19.23.3") || resolved.contains("node.host") {
                return Err(format!(
                    "{}: the fleet policy was not resolved for this node: {e}",
                    w.name
                ));
            }
            notes.push(format!("{}: fleet policy resolved to 172.19.23.3/172.19.24.3", w.name));
        }
        // Applied before the routers started (the daemon's log, in order) — or, on a machine
        // where NetworkManager outlasts the daemon's 90 s wait, the routers started after that
        // wait as documented, each once its VRF device was there.
        let log = w.vm.sh("journalctl -u uplink -b --no-pager -o cat")?;
        let applied = log.find("every selected policy is Available");
        let started = log.find("routing instance started");
        let outlasted = log.find("the policies take longer than");
        match (applied, started, outlasted) {
            (Some(a), Some(s), _) if a < s => {}
            (_, Some(s), Some(o)) if o < s => {
                notes.push(format!("{}: the policies outlasted the daemon's wait", w.name));
            }
            _ => {
                return Err(format!(
                    "{}: the policies were not applied before the routers started:\n{}",
                    w.name,
                    log.lines().take(40).collect::<Vec<_>>().join("\n")
                ))
            }
        }
    }
    Ok(format!("every policy Available, applied before the routers; {}", notes.join(", ")))
}

/// FRR's view of one session: state, connections established and dropped, and when it was
/// established (epoch seconds; FRR derives it from the uptime, so it may move by a second).
#[derive(Debug, Clone, PartialEq, Eq)]
struct TorSession {
    state: String,
    established: u64,
    dropped: u64,
    since: u64,
}

impl TorSession {
    /// The same session, not reset in between.
    fn same(&self, other: &TorSession) -> bool {
        (&self.state, self.established, self.dropped)
            == (&other.state, other.established, other.dropped)
            && self.since.abs_diff(other.since) <= 2
    }
}

/// wk1's sessions (as `wk1_sessions` lists them) unchanged, except the one over the link the
/// cut darkens (cudn3, the second) when `cut_link_may_drop`.
fn sessions_kept(before: &[TorSession], now: &[TorSession], cut_link_may_drop: bool) -> bool {
    before.len() == now.len()
        && before
            .iter()
            .zip(now)
            .enumerate()
            .all(|(i, (b, n))| (cut_link_may_drop && i == 1) || b.same(n))
}

/// The hold time r2 and wk1 negotiated on the cudn3 session: how long its link may be dark.
fn cut_link_hold_time(topo: &Topology) -> Result<Duration, String> {
    let v = parse_json(
        &topo.vtysh("show bgp vrf cudn3 neighbors 172.19.23.2 json")?,
        "show bgp neighbors json",
    )?;
    v["172.19.23.2"]["bgpTimerHoldTimeMsecs"]
        .as_u64()
        .map(Duration::from_millis)
        .ok_or_else(|| format!("no hold time for 172.19.23.2 in VRF cudn3: {v}"))
}

fn tor_session(topo: &Topology, vrf: Option<&str>, peer: &str) -> Result<TorSession, String> {
    let cmd = match vrf {
        Some(vrf) => format!("show bgp vrf {vrf} neighbors {peer} json"),
        None => format!("show bgp neighbors {peer} json"),
    };
    let v = parse_json(&topo.vtysh(&cmd)?, "show bgp neighbors json")?;
    let n = &v[peer];
    Ok(TorSession {
        state: n["bgpState"].as_str().unwrap_or("?").to_string(),
        established: n["connectionsEstablished"].as_u64().unwrap_or(0),
        dropped: n["connectionsDropped"].as_u64().unwrap_or(0),
        since: n["bgpTimerUpEstablishedEpoch"].as_u64().unwrap_or(0),
    })
}

/// The ToR's sessions with wk1: default VRF (BFD), cudn3, cudn4.
fn wk1_sessions(topo: &Topology) -> Result<Vec<TorSession>, String> {
    let wk1 = topo.workers.first().ok_or("no worker")?;
    Ok(vec![
        tor_session(topo, None, &wk1.addr)?,
        tor_session(topo, Some("cudn3"), "172.19.23.2")?,
        tor_session(topo, Some("cudn4"), "172.19.24.2")?,
    ])
}

/// A reload (`systemctl reload uplink`) with wk1's NNCP changed so that VLAN 2001 gets the
/// wrong id (2011): the trunk's cudn3 uplink is cut. uplink applies it before the router
/// diff, the probe of the cudn3 neighbor fails, NetworkManager's checkpoint rolls it back,
/// the enactment says Failing — and the ToR's sessions with wk1 never drop (same connection,
/// same uptime), the cut link's included where the rollback comes within its hold time. Then
/// the good manifest again: Available.
fn network_cut_rolled_back(topo: &Topology) -> Outcome {
    let outcome = cut_and_roll_back(topo);
    if outcome.is_err() {
        // The scenarios after this one need wk1's good manifest back: without it they all
        // fail with the cudn3 uplink dark, hiding what went wrong here.
        if let Err(e) = restore_deck_nncp(topo) {
            return outcome.map_err(|first| format!("{first}\n(and restoring the manifest: {e})"));
        }
    }
    outcome
}

/// Puts wk1's saved NNCP back (if the scenario saved it) and waits until it is applied.
fn restore_deck_nncp(topo: &Topology) -> Result<(), String> {
    let wk1 = topo.workers.first().ok_or("no worker")?;
    let file = format!("/etc/uplink/conf.d/{DECK_NNCP_FILE}");
    wk1.vm.sh(&format!(
        "if [ -f /root/nncp.yaml ] && ! cmp -s /root/nncp.yaml {file}; then cp /root/nncp.yaml {file}; fi; \
         (nohup uplink reload --timeout 600s > /root/restore.log 2>&1 &)"
    ))?;
    let policy = format!("{TRUNK_NIC}-wk1");
    topo.wait(Duration::from_secs(180), || {
        let e = enactment(wk1, &policy)?;
        if e["status"] == "Available" {
            Ok(())
        } else {
            Err(format!("{policy} after restoring it: {e}"))
        }
    })
}

fn cut_and_roll_back(topo: &Topology) -> Outcome {
    let wk1 = topo.workers.first().ok_or("no worker")?;
    let before = wk1_sessions(topo)?;
    if before.iter().any(|s| s.state != "Established") {
        return Err(format!("r2's sessions with wk1 are not all Established: {before:?}"));
    }
    let file = format!("/etc/uplink/conf.d/{DECK_NNCP_FILE}");
    // The reload waits for the policy and then answers (refused: its policy failed), which
    // takes longer than an SSH command may: it runs in the background and leaves its answer.
    wk1.vm.sh(&format!(
        "cp {file} /root/nncp.yaml && sed -i 's/id: 2001/id: 2011/' {file} && ! cmp -s {file} /root/nncp.yaml \
         && rm -f /root/reload.json /root/reload.rc \
         && (nohup sh -c 'uplink reload --timeout 600s --json > /root/reload.json 2>&1; echo $? > /root/reload.rc' \
             > /dev/null 2>&1 &)"
    ))?;
    let t0 = Instant::now();
    let policy = format!("{TRUNK_NIC}-wk1");
    // The cudn3 link is dark from the bad VLAN until the rollback. Where NetworkManager takes
    // longer than the session's hold time to get there (one core under TCG: ~55 s), no BGP
    // speaker keeps that session (and TCP's retransmission backoff delays the first exchange
    // after the link returns): then it may drop and must come back. The sessions over the
    // links the policy does not cut must never change, and on a machine where the rollback
    // comes within the hold time, neither may the cut link's.
    let hold = cut_link_hold_time(topo)?;
    let cut_link_may_drop = || t0.elapsed() >= hold;
    // Watched on the ToR throughout: one changed session fails the scenario at once.
    let failing = loop {
        let now = wk1_sessions(topo)?;
        if !sessions_kept(&before, &now, cut_link_may_drop()) {
            return Err(format!(
                "r2's sessions with wk1 changed during the cut: {before:?} -> {now:?}{}",
                flap_report(topo, 0)
            ));
        }
        let e = enactment(wk1, &policy)?;
        if e["status"] == "Failing" {
            break e;
        }
        // NetworkManager under TCG: the apply, the probes and the rollback took 70-90 s.
        let bound = topo.scaled(Duration::from_secs(180));
        if t0.elapsed() > bound {
            return Err(format!("{policy} not Failing after {bound:?}: {e}"));
        }
        std::thread::sleep(Duration::from_millis(250));
    };
    let rolled_back_s = t0.elapsed().as_secs_f64();
    // The reload said so and failed (the Ansible batch stops on it); nothing else changed.
    let answer = topo.wait(Duration::from_secs(60), || {
        let rc = wk1.vm.sh("cat /root/reload.rc 2>/dev/null || true")?;
        if rc.trim().is_empty() {
            return Err("uplink reload has not answered yet".into());
        }
        Ok((rc.trim().to_string(), wk1.vm.sh("cat /root/reload.json")?))
    })?;
    let reload = parse_json(&answer.1, "uplink reload --json")?;
    let said = reload["network"].as_array().into_iter().flatten().any(|p| {
        p["policy"] == policy.as_str() && p["status"] == "Failing" && p["changed"] == true
    });
    if answer.0 != "1" || reload["applied"] != false || !said {
        return Err(format!(
            "uplink reload with a failing policy: exit {}, want 1 with applied false and the \
             policy Failing: {reload}",
            answer.0
        ));
    }
    let message = failing["message"].as_str().unwrap_or_default().to_string();
    if !message.contains("probe bgp-neighbor 172.19.23.1 (vrf cudn3) failed after the change")
        || !message.contains("rolled back")
    {
        return Err(format!("{policy}: {message}"));
    }
    // VLAN 2001 is back with its address.
    let link = parse_json(&wk1.vm.sh("ip -d -j addr show vlan2001")?, "ip -d -j addr")?;
    if link[0]["linkinfo"]["info_data"]["id"] != 2001
        || !link[0]["addr_info"].to_string().contains("172.19.23.2")
    {
        return Err(format!("vlan2001 not restored: {}", link[0]));
    }
    // Traffic flows again: the route r3 announces in cudn3 is back in wk1's cudn3 table (the
    // kernel dropped it with the old VLAN device; uplink's FIB writer puts it back).
    topo.wait(Duration::from_secs(30), || {
        // With the nexthop compatibility mode off the route names only its group: expanded.
        let r = uplink_route(&wk1.vm, &format!("vrf cudn3 {VRF_LEARNED} proto uplink"))?;
        if gateways(&r) == vec!["172.19.23.1".to_string()] && r.contains("vlan2001") {
            Ok(())
        } else {
            Err(format!("wk1: {VRF_LEARNED} in VRF cudn3 after the rollback is {r:?}"))
        }
    })?;
    // Past a hold time after the rollback: still the same sessions.
    std::thread::sleep(Duration::from_secs(10));
    let after = wk1_sessions(topo)?;
    if !sessions_kept(&before, &after, cut_link_may_drop()) {
        return Err(format!(
            "r2's sessions with wk1 changed: {before:?} -> {after:?}{}",
            flap_report(topo, 0)
        ));
    }
    let journal = wk1
        .vm
        .sh("journalctl -u uplink -b --no-pager -o cat | grep -E 'network: (applying policy|policy failed)' | tail -n 4")?;
    // The good manifest again (the reload applies it, probes included: in the background).
    restore_deck_nncp(topo)?;
    let restored = wk1_sessions(topo)?;
    if !sessions_kept(&before, &restored, cut_link_may_drop()) {
        return Err(format!(
            "r2's sessions with wk1 changed by the restore: {before:?} -> {restored:?}"
        ));
    }
    let cut_session = if restored.get(1).zip(before.get(1)).is_some_and(|(r, b)| r.same(b)) {
        "all 3 kept their connection and uptime".to_string()
    } else {
        // The cut link's session dropped: it must be back.
        topo.wait(Duration::from_secs(120), || {
            let now = wk1_sessions(topo)?;
            match now.get(1) {
                Some(s) if s.state == "Established" => Ok(()),
                other => Err(format!("the cudn3 session after the rollback: {other:?}")),
            }
        })?;
        format!(
            "the default VRF's and cudn4's kept their connection and uptime; the cut link's \
             (cudn3) dropped, its link dark longer than its {hold:?} hold time (Failing came \
             {rolled_back_s:.1} s after the reload), and is Established again"
        )
    };
    println!("  cut by reload: Failing {rolled_back_s:.1} s after `systemctl reload`; {message}\n{journal}");
    Ok(format!(
        "VLAN id 2001 -> 2011 by reload: Failing after {rolled_back_s:.1} s ({message}); r2's 3 sessions with wk1: \
         {cut_session}; restored: Available"
    ))
}

/// A router whose VRF device does not exist waits, says so in `show bgp summary` (text and
/// JSON) and in the log, and starts by itself when the VRF appears.
fn router_waits_for_its_vrf(topo: &Topology) -> Outcome {
    let wk2 = topo.workers.get(1).ok_or("no second worker")?;
    wk2.vm.sh(&format!(
        "cat > /etc/uplink/conf.d/blue.toml <<'EOF'\n[[bgp.routers]]\nasn = 65801\nid = \"{}\"\nvrf = \"blue\"\n\
         [[bgp.routers.neighbors]]\naddress = \"172.31.99.1\"\nasn = 65103\nconnect_time = \"5s\"\nEOF\n\
         systemctl reload uplink",
        wk2.addr
    ))?;
    let waiting = topo.wait(Duration::from_secs(60), || {
        let v = parse_json(
            &wk2.vm.sh("uplink show bgp summary --vrf blue --json")?,
            "summary --vrf blue",
        )?;
        if v["routerState"] == "waiting" {
            Ok(v)
        } else {
            Err(format!("vrf blue: {v}"))
        }
    })?;
    if waiting["waitingFor"] != "VRF device blue" {
        return Err(format!("vrf blue waits for {}", waiting["waitingFor"]));
    }
    let text = wk2.vm.sh("uplink show bgp summary --vrf all")?;
    if !text.contains("in VRF blue not started: waiting for VRF device blue") {
        return Err(format!("show bgp summary --vrf all:\n{text}"));
    }
    let t0 = Instant::now();
    wk2.vm.sh("ip link add blue type vrf table 3999 && ip link set blue up")?;
    let started = topo.wait(Duration::from_secs(30), || {
        let v = parse_json(
            &wk2.vm.sh("uplink show bgp summary --vrf blue --json")?,
            "summary --vrf blue",
        )?;
        let state = v["ipv4Unicast"]["peers"]["172.31.99.1"]["state"].clone();
        if state.is_string() {
            Ok(state)
        } else {
            Err(format!("vrf blue: {v}"))
        }
    })?;
    let started_s = t0.elapsed().as_secs_f64();
    let log = wk2.vm.sh("journalctl -u uplink -b --no-pager -o cat | grep -F 'VRF device blue'")?;
    if !log.contains("waits for VRF device blue") || !log.contains("VRF device blue is there") {
        return Err(format!("the log does not tell the wait:\n{log}"));
    }
    wk2.vm.sh("rm /etc/uplink/conf.d/blue.toml && systemctl reload uplink")?;
    topo.wait(Duration::from_secs(30), || {
        let out = wk2.vm.sh("uplink show bgp summary --vrf all --json")?;
        if out.contains("\"blue\"") {
            Err("vrf blue still there".into())
        } else {
            Ok(())
        }
    })?;
    wk2.vm.sh("ip link del blue")?;
    Ok(format!(
        "router in VRF blue waited (\"VRF device blue\"), started {started_s:.1} s after `ip link add blue` (neighbor {started})"
    ))
}

#[test]
fn seed_lab() {
    let image = Image::locate();
    let log_dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("vm-logs");
    println!("booting r2 + wk1 + wk2 in parallel (consoles in {})", log_dir.display());
    let mut topo = Topology::boot(&image, &log_dir);
    println!(
        "topology booted and configured in {:.1} s: bounds scaled by {:.2} (reference {:?})",
        topo.boot_time.as_secs_f64(),
        topo.slowness(),
        uplink_vm_tests::topology::REFERENCE_BOOT
    );

    type Scenario = fn(&mut Topology) -> Outcome;
    const SESSIONS: &str = "sessions Established (BGP + BFD)";
    let scenarios: [(&str, Scenario); 16] = [
        ("config drive applied", |t| config_drive_applied(t)),
        (SESSIONS, |t| sessions_established(t)),
        ("node network from policies (NNCP, fleet form, VRFs)", |t| node_network_from_policies(t)),
        ("pod subnets on the ToR", |t| pod_subnets(t)),
        ("VIP with two ECMP next hops", |t| vip_ecmp(t)),
        ("client HTTP answered by both workers", |t| http_both_workers(t)),
        ("layer 2 VIP: one worker answers ARP", |t| layer2_vip(t)),
        ("worker FIB: client subnet from the ToR", |t| worker_fib(t)),
        ("VRF-lite over VLANs 2001/2002 (r3's role)", |t| vrf_lite(t)),
        ("route leaking between VRFs (imports)", |t| vrf_leaking(t)),
        ("a policy that cuts the uplink, by reload: rolled back", |t| network_cut_rolled_back(t)),
        ("a router waits for its VRF device", |t| router_waits_for_its_vrf(t)),
        ("graceful restart: systemctl restart and the watchdog", |t| {
            graceful_restart_and_watchdog(t)
        }),
        ("systemctl reboot: the VIP moves first", reboot_moves_the_vip_first),
        ("Ansible rollout (ansible/ playbooks over SSH)", |t| uplink_vm_tests::ansible::rollout(t)),
        ("power-off: BFD failover, the layer 2 VIP moves", bfd_failover),
    ];
    // Each failed scenario with the first lines of its reason.
    let mut failed: Vec<(&str, String)> = Vec::new();
    let mut summary = Vec::new();
    for (name, f) in scenarios {
        let t0 = Instant::now();
        // Everything after the sessions needs them: do not spend minutes of timeouts on it.
        let r = if failed.iter().any(|(n, _)| *n == SESSIONS) {
            Err(format!("not run: \"{SESSIONS}\" failed"))
        } else {
            f(&mut topo)
        };
        let secs = t0.elapsed().as_secs_f64();
        match &r {
            Ok(note) => println!("PASS {name} ({secs:.1} s): {note}"),
            Err(e) => {
                println!("FAIL {name} ({secs:.1} s):\n{e}");
                failed.push((name, first_lines(e, 12)));
            }
        }
        summary.push(format!(
            "{:>7.1} s  {} {name}",
            secs,
            if r.is_ok() { "ok  " } else { "FAIL" }
        ));
    }
    println!("boot {:.1} s; scenarios:\n{}", topo.boot_time.as_secs_f64(), summary.join("\n"));
    // The reasons again at the end: a CI log often keeps only its last lines.
    let names: Vec<&str> = failed.iter().map(|(n, _)| *n).collect();
    let reasons: Vec<String> = failed.iter().map(|(n, r)| format!("{n}: {r}")).collect();
    assert!(
        failed.is_empty(),
        "failed scenarios: {names:?} (consoles in {})\n{}",
        log_dir.display(),
        reasons.join("\n")
    );
}

/// The first `n` lines of a failure's text (each cut at 300 characters), saying how much of
/// it is only in the scenario's FAIL report above.
fn first_lines(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    let mut out: Vec<String> = lines
        .iter()
        .take(n)
        .map(|l| {
            if l.chars().count() > 300 {
                format!("{}...", l.chars().take(300).collect::<String>())
            } else {
                l.to_string()
            }
        })
        .collect();
    if lines.len() > n {
        out.push(format!("  [{} more lines in the FAIL report above]", lines.len() - n));
    }
    out.join("\n")
}
