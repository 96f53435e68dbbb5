//! What an operator watches, against real tools in network namespaces:
//!
//! - a real Prometheus server (Debian's `prometheus`) scrapes uplink's `[metrics]` endpoint
//!   next to two FRR peers (BGP and BFD), and its query API answers frr-k8s's and MetalLB's
//!   queries (`frrk8s_bgp_session_up == 1` for each peer, ...) and uplink's own (FIB routes,
//!   reload results);
//! - a hundred clients that hold connections to the endpoint without sending a request (or
//!   only part of one) and renew them as they are closed do not keep a scraper out;
//! - a real systemd-journald (in a private mount namespace, so the host's journal is not
//!   touched) receives uplink's logs, and `journalctl PEER=... / PREFIX=... / VRF=...` selects a
//!   neighbor's, a prefix's and a VRF's events.

mod common;
use common::*;
use serde_json::Value;
use std::collections::BTreeMap;
use std::process::Command;
use std::time::Duration;

const PROMETHEUS: &str = "127.0.0.1:9090";
/// The shipped alert rules, in both forms.
const RULES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../deploy/prometheus/uplink-rules.yaml");
const PROMETHEUS_RULE: &str =
    concat!(env!("CARGO_MANIFEST_DIR"), "/../deploy/kubernetes/prometheusrule.yaml");
const METRICS: &str = "127.0.0.1:9181";

/// An FRR peer of the node (AS 65001) at `address`, announcing `networks`, with a BFD peer
/// for the node when `bfd`.
fn frr_conf(address: &str, node: &str, asn: u32, networks: &[&str], bfd: bool) -> String {
    let bfd_block = if bfd {
        format!("bfd\n peer {node}\n  transmit-interval 100\n  receive-interval 100\n !\n!\n")
    } else {
        String::new()
    };
    let networks: String = networks.iter().map(|n| format!("  network {n}\n")).collect();
    format!(
        "frr defaults datacenter\n{bfd_block}router bgp {asn}\n bgp router-id {address}\n \
         no bgp ebgp-requires-policy\n no bgp network import-check\n \
         neighbor {node} remote-as 65001\n neighbor {node} timers connect 1\n \
         address-family ipv4 unicast\n{networks} exit-address-family\n!\n"
    )
}

fn neighbor(address: &str, asn: u32, extra: &str) -> String {
    format!(
        "\n[[bgp.routers.neighbors]]\naddress = \"{address}\"\nasn = {asn}\nconnect_time = \"1s\"\n\
         to_advertise = {{ allowed = {{ mode = \"all\" }} }}\n{extra}\n"
    )
}

/// `promtool query instant` against the Prometheus in `ns`: the result vector.
fn query(ns: &Ns, expr: &str) -> Result<Vec<Value>, String> {
    let url = format!("http://{PROMETHEUS}");
    let (ok, out) = ns.try_run(&["promtool", "query", "instant", "-o", "json", &url, expr]);
    if !ok {
        return Err(format!("promtool: {out}"));
    }
    match serde_json::from_str::<Value>(&out) {
        Ok(Value::Array(samples)) => Ok(samples),
        other => Err(format!("unexpected answer to {expr}: {other:?} from {out}")),
    }
}

/// Label `label` → sample value, for every series `expr` returns.
fn by_label(ns: &Ns, expr: &str, label: &str) -> Result<BTreeMap<String, String>, String> {
    Ok(query(ns, expr)?
        .iter()
        .map(|s| {
            let key = s["metric"][label].as_str().unwrap_or_default().to_string();
            (key, s["value"][1].as_str().unwrap_or_default().to_string())
        })
        .collect())
}

/// Waits until `expr` returns exactly `want` (label value → sample value).
fn wait_query(lab: &Lab, ns: &Ns, expr: &str, label: &str, want: &[(&str, &str)]) {
    let want: BTreeMap<String, String> =
        want.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
    wait_for(&format!("Prometheus: {expr}"), Duration::from_secs(30), || {
        let got = by_label(ns, expr, label)?;
        if got == want {
            Ok(())
        } else {
            Err(format!("{got:?}, want {want:?}\n{}", lab.dump_logs()))
        }
    });
}

#[test]
fn prometheus_scrapes_frrk8s_metallb_and_uplink_families() {
    require_tool("prometheus");
    require_tool("promtool");
    let mut lab = Lab::new("metrics");
    let node = lab.ns("node");
    let peer1 = lab.ns("peer1");
    let peer2 = lab.ns("peer2");
    lab.link(&node, &["10.0.1.2/24"], &peer1, &["10.0.1.1/24"]);
    lab.link(&node, &["10.0.2.2/24"], &peer2, &["10.0.2.1/24"]);
    // Prometheus scrapes every second, in the node's namespace; it starts first, as its
    // storage takes a few seconds to open.
    // The shipped alert rules, as an operator loads them.
    let (ok, out) = node.try_run(&["promtool", "check", "rules", RULES]);
    assert!(ok, "promtool refuses the shipped rules: {out}");
    let prom_conf = lab.path("prometheus.yml");
    std::fs::write(
        &prom_conf,
        format!(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nrule_files:\n  \
             - '{RULES}'\nscrape_configs:\n  \
             - job_name: uplink\n    static_configs:\n      - targets: ['{METRICS}']\n"
        ),
    )
    .unwrap();
    let mut prometheus = node.command("prometheus");
    prometheus.args([
        &format!("--config.file={}", prom_conf.display()),
        &format!("--storage.tsdb.path={}", lab.path("prometheus-data").display()),
        &format!("--web.listen-address={PROMETHEUS}"),
        "--log.level=warn",
    ]);
    lab.spawn("prometheus", prometheus);
    let conf1 =
        frr_conf("10.0.1.1", "10.0.1.2", 65101, &["198.51.100.0/24", "203.0.113.0/24"], true);
    Frr::start_with_bfd(&mut lab, &peer1, &conf1);
    let conf2 = frr_conf(
        "10.0.2.1",
        "10.0.2.2",
        65102,
        &["198.51.100.0/24", "203.0.113.64/26", "203.0.113.128/26"],
        true,
    );
    Frr::start_with_bfd(&mut lab, &peer2, &conf2);

    let receive_all = "bfd_profile = \"fast\"\nto_receive = { allowed = { mode = \"all\" } }";
    // A service with an address but no advertisement: a withdrawn candidate, for the
    // dashboard's panel of withdrawn prefixes.
    let config = format!(
        "[metrics]\nlisten = \"{METRICS}\"\n\n[[pools]]\nname = \"vips\"\n\
         addresses = [\"192.0.2.32/28\"]\n\n[[services]]\nname = \"web\"\n\
         address_pool = \"vips\"\n\n[[bgp.bfd_profiles]]\nname = \"fast\"\n\
         transmit_interval = \"100ms\"\nreceive_interval = \"100ms\"\n\n\
         [[bgp.routers]]\nasn = 65001\nid = \"10.0.1.2\"\nprefixes = [\"192.0.2.10/32\"]\n{}{}",
        neighbor("10.0.1.1", 65101, receive_all),
        neighbor("10.0.2.1", 65102, receive_all),
    );
    let uplink = Uplink::start(&mut lab, &node, "uplink", &config);

    // The scrape itself works: Prometheus parsed the text (a parse error makes `up` 0).
    wait_query(&lab, &node, "up{job=\"uplink\"}", "job", &[("uplink", "1")]);
    // frr-k8s's dashboards: every session up, its prefixes, BFD.
    let both = [("10.0.1.1", "1"), ("10.0.2.1", "1")];
    wait_query(&lab, &node, "frrk8s_bgp_session_up{vrf=\"default\"} == 1", "peer", &both);
    wait_query(&lab, &node, "frrk8s_bfd_session_up{vrf=\"default\"} == 1", "peer", &both);
    let received = [("10.0.1.1", "2"), ("10.0.2.1", "3")];
    wait_query(&lab, &node, "frrk8s_bgp_received_prefixes_total", "peer", &received);
    wait_query(&lab, &node, "frrk8s_bgp_announced_prefixes_total", "peer", &both);
    // MetalLB's FRR-mode names, with its address:port peer label.
    let metallb = [("10.0.1.1:179", "1"), ("10.0.2.1:179", "1")];
    wait_query(&lab, &node, "metallb_bgp_session_up == 1", "peer", &metallb);
    wait_query(&lab, &node, "metallb_bgp_announced_prefixes_total", "peer", &metallb);
    // MetalLB's native-mode count of what should be advertised: the one prefix, sent.
    wait_query(&lab, &node, "metallb_bgp_pending_prefixes_total", "peer", &metallb);
    wait_query(&lab, &node, "metallb_bfd_session_up == 1", "peer", &both);
    for counter in ["frrk8s_bgp_updates_total", "frrk8s_bfd_control_packet_input"] {
        let expr = format!("{counter} > 0");
        let got = by_label(&node, &expr, "peer").unwrap();
        assert_eq!(got.len(), 2, "{expr}: {got:?}");
    }
    // The FIB writer: four distinct prefixes installed (one of them ECMP over both peers).
    wait_query(&lab, &node, "uplink_fib_routes{state=\"installed\"}", "vrf", &[("default", "4")]);
    let requests = by_label(&node, "uplink_fib_kernel_requests_total > 0", "job").unwrap();
    assert_eq!(requests.len(), 1, "{requests:?}");
    let errors = by_label(&node, "uplink_fib_kernel_errors_total", "job").unwrap();
    assert_eq!(errors.get("uplink").map(String::as_str), Some("0"), "{errors:?}");
    // The router's own prefix is announced.
    let announced = "uplink_announcements{state=\"announced\",origin=\"router\"}";
    wait_query(&lab, &node, announced, "vrf", &[("default", "1")]);
    let withdrawn = "uplink_announcements{state=\"withdrawn\",origin=\"service\"}";
    wait_query(&lab, &node, withdrawn, "reason", &[("no_advertisement", "1")]);

    // Every query of the shipped Grafana dashboard runs on this Prometheus and finds data.
    let dashboard = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/grafana/uplink.json");
    let dashboard: Value =
        serde_json::from_str(&std::fs::read_to_string(dashboard).unwrap()).unwrap();
    let mut exprs = Vec::new();
    collect_exprs(&dashboard, &mut exprs);
    assert!(exprs.len() > 20, "{exprs:?}");
    for expr in exprs {
        // Grafana's variables, as the dashboard's "All" and its defaults fill them in.
        let expr = expr
            .replace("$instance", ".*")
            .replace("$vrf", ".*")
            .replace("$__rate_interval", "15s")
            .replace("$__range", "1m");
        wait_for(&format!("dashboard query {expr}"), Duration::from_secs(20), || {
            let samples = query(&node, &expr)?;
            (!samples.is_empty()).then_some(()).ok_or_else(|| "no data".to_string())
        });
    }

    // A rejected reload is counted and flagged; the endpoint and the sessions stay.
    let good = std::fs::read_to_string(&uplink.config).unwrap();
    std::fs::write(&uplink.config, good.replace("asn = 65001", "asn = 0")).unwrap();
    let hup = format!("run --config {}", uplink.config.display());
    run(&["pkill", "-HUP", "-f", &hup]);
    let failure = "uplink_config_reloads_total{result=\"failure\"}";
    wait_query(&lab, &node, failure, "result", &[("failure", "1")]);
    wait_query(&lab, &node, "uplink_config_last_reload_successful", "job", &[("uplink", "0")]);
    std::fs::write(&uplink.config, &good).unwrap();
    run(&["pkill", "-HUP", "-f", &hup]);
    let success = "uplink_config_reloads_total{result=\"success\"}";
    wait_query(&lab, &node, success, "result", &[("success", "1")]);
    wait_query(&lab, &node, "uplink_config_last_reload_successful", "job", &[("uplink", "1")]);
    wait_query(&lab, &node, "frrk8s_bgp_session_up == 1", "peer", &both);

    // MetalLB's pool families, for its pool alerts: the pool's 16 addresses, one in use.
    wait_query(&lab, &node, "metallb_allocator_addresses_total", "pool", &[("vips", "16")]);
    wait_query(&lab, &node, "metallb_allocator_addresses_in_use_total", "pool", &[("vips", "1")]);
    // No shipped alert fires while all is well.
    let firing = by_label(&node, "ALERTS{alertstate=\"firing\"}", "alertname").unwrap();
    assert!(firing.is_empty(), "{firing:?}");

    // The FRR peer stops: the shipped session-down alert fires for it (after its minute).
    lab.stop(&format!("frr-{}", peer1.name));
    let alert = "ALERTS{alertname=\"MetalLBBGPSessionDown\",alertstate=\"firing\"}";
    wait_for(&format!("Prometheus: {alert}"), Duration::from_secs(150), || {
        let got = by_label(&node, alert, "peer")?;
        let want: BTreeMap<String, String> = [("10.0.1.1:179".into(), "1".into())].into();
        if got == want {
            Ok(())
        } else {
            Err(format!("{got:?}"))
        }
    });
}

/// The shipped rules file and the PrometheusRule hold the same groups.
#[test]
fn the_prometheus_rule_holds_the_rules_files_groups() {
    let read = |path: &str| -> serde_json::Value {
        let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{path}: {e}"));
        serde_norway::from_str(&text).unwrap_or_else(|e| panic!("{path}: {e}"))
    };
    let file = read(RULES);
    let rule = read(PROMETHEUS_RULE);
    assert_eq!(rule["kind"], "PrometheusRule");
    assert_eq!(rule["spec"]["groups"], file["groups"]);
    assert!(file["groups"][0]["rules"].as_array().is_some_and(|r| r.len() >= 5), "{file}");
}

/// `tools/idle_http.py`: idle HTTP clients and a one-shot scraper.
fn idle_http() -> &'static str {
    concat!(env!("CARGO_MANIFEST_DIR"), "/tests/tools/idle_http.py")
}

/// One `GET /metrics` from `ns`, given `timeout` seconds: the status line, or why none.
fn scrape(ns: &Ns, timeout: f64) -> Result<(String, f64), String> {
    scrape_at(ns, METRICS, timeout)
}

/// One `GET /metrics` of `address` (host:port) from `ns`.
fn scrape_at(ns: &Ns, address: &str, timeout: f64) -> Result<(String, f64), String> {
    let (host, port) = address.split_once(':').unwrap();
    let (ok, out) =
        ns.try_run(&["python3", idle_http(), "scrape", host, port, &timeout.to_string()]);
    if !ok {
        return Err(format!("idle_http.py scrape: {out}"));
    }
    let answer: Value = serde_json::from_str(out.trim()).map_err(|e| format!("{e}: {out}"))?;
    let seconds = answer["seconds"].as_f64().unwrap_or(f64::NAN);
    match answer["status"].as_str() {
        Some(status) => Ok((status.to_string(), seconds)),
        None => Err(format!("{} after {seconds} s (port {})", answer["error"], answer["port"])),
    }
}

/// The last JSON line of the idle clients' log that has `key`.
fn last_report(lab: &Lab, key: &str) -> Option<Value> {
    let log = std::fs::read_to_string(lab.path("idle-clients.log")).ok()?;
    log.lines()
        .rev()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .find(|v| v.get(key).is_some())
}

#[test]
fn idle_connections_do_not_keep_a_scraper_out() {
    require_tool("python3");
    let mut lab = Lab::new("idle");
    let node = lab.ns("node");
    let config = format!(
        "[metrics]\nlisten = \"{METRICS}\"\n\n[[bgp.routers]]\nasn = 65001\nid = \"192.0.2.1\"\n"
    );
    let _uplink = Uplink::start(&mut lab, &node, "uplink", &config);
    wait_for("the metrics endpoint", Duration::from_secs(30), || match scrape(&node, 2.0)? {
        (status, _) if status.ends_with(" 200 OK") => Ok(()),
        (status, _) => Err(status),
    });

    // 300 connections that send nothing and 20 that send a request head without its end (more
    // than the 256 uplink keeps waiting for their head, so it closes the oldest for each new),
    // each opened again as soon as uplink closes it.
    let (host, port) = METRICS.split_once(':').unwrap();
    let mut holder = node.command("python3");
    holder.args([idle_http(), "hold", host, port, "300", "20"]);
    lab.spawn("idle-clients", holder);
    wait_for("the idle clients' first round", Duration::from_secs(20), || {
        last_report(&lab, "opened").map(|_| ()).ok_or_else(|| "not yet".to_string())
    });

    // A scraper gets its answer promptly, again and again, for longer than the idle
    // connections are kept (so they are renewed meanwhile).
    let start = std::time::Instant::now();
    let (mut scrapes, mut slowest) = (0, 0.0f64);
    while start.elapsed() < Duration::from_secs(12) {
        match scrape(&node, 2.0) {
            Ok((status, seconds)) => {
                assert!(status.ends_with(" 200 OK"), "scrape {scrapes}: {status}");
                assert!(seconds < 2.0, "scrape {scrapes} took {seconds} s");
                slowest = slowest.max(seconds);
            }
            Err(e) => panic!(
                "scrape {scrapes} with idle clients holding connections: {e}; idle clients: {:?}\n{}",
                last_report(&lab, "open"),
                lab.dump_logs()
            ),
        }
        scrapes += 1;
        std::thread::sleep(Duration::from_millis(300));
    }
    let report = last_report(&lab, "renewed").expect("the idle clients report every second");
    assert!(report["renewed"].as_u64().unwrap_or(0) > 0, "nothing was renewed: {report}");
    eprintln!("{scrapes} scrapes, the slowest {slowest} s; idle clients: {report}");
}

/// The metrics socket is bound in a reload's prepare step: moving `[metrics] listen` to a
/// port another process holds refuses the reload and the endpoint stays; a free port moves it.
#[test]
fn a_reload_moves_the_metrics_endpoint_or_is_refused_when_the_port_is_taken() {
    require_tool("python3");
    let mut lab = Lab::new("metrics-move");
    let node = lab.ns("node");
    let (taken, free) = ("127.0.0.1:9182", "127.0.0.1:9183");
    let config = |listen: &str| {
        format!("[metrics]\nlisten = \"{listen}\"\n\n[[bgp.routers]]\nasn = 65001\nid = \"192.0.2.1\"\n")
    };
    let uplink = Uplink::start(&mut lab, &node, "uplink", &config(METRICS));
    let serving = |address: &str| match scrape_at(&node, address, 2.0)? {
        (status, _) if status.ends_with(" 200 OK") => Ok(()),
        (status, _) => Err(status),
    };
    wait_for("the metrics endpoint", Duration::from_secs(30), || serving(METRICS));

    let mut squatter = node.command("python3");
    squatter.args([
        "-c",
        "import socket, time\ns = socket.socket()\ns.bind(('127.0.0.1', 9182))\ns.listen()\ntime.sleep(600)",
    ]);
    lab.spawn("squatter", squatter);
    wait_for("the squatter on port 9182", Duration::from_secs(10), || {
        let listening = node.run(&["ss", "-Hltn", "sport", "= :9182"]);
        (!listening.trim().is_empty()).then_some(()).ok_or_else(|| "not yet".to_string())
    });
    std::fs::write(&uplink.config, config(taken)).unwrap();
    let refused = uplink.cli(&["reload"]).expect_err("a reload onto a taken port was accepted");
    assert!(
        refused.contains(&format!("[metrics] listen = \"{taken}\""))
            && refused.contains("stays on"),
        "{refused}"
    );
    serving(METRICS).unwrap_or_else(|e| panic!("the endpoint left {METRICS}: {e}"));

    std::fs::write(&uplink.config, config(free)).unwrap();
    let moved =
        uplink.cli(&["reload"]).unwrap_or_else(|e| panic!("a reload onto a free port: {e}"));
    assert!(moved.contains(&format!("node: metrics.listen \"{METRICS}\" → \"{free}\"")), "{moved}");
    serving(free).unwrap_or_else(|e| panic!("not served on {free} after the reload: {e}"));
    assert!(serving(METRICS).is_err(), "still served on {METRICS} after moving to {free}");
}

/// Every `expr` of a Grafana dashboard.
fn collect_exprs(value: &Value, out: &mut Vec<String>) {
    match value {
        Value::Object(map) => {
            for (key, v) in map {
                match (key.as_str(), v) {
                    ("expr", Value::String(expr)) => out.push(expr.clone()),
                    _ => collect_exprs(v, out),
                }
            }
        }
        Value::Array(items) => items.iter().for_each(|v| collect_exprs(v, out)),
        _ => {}
    }
}

/// `journalctl -D DIR -o json MATCHES...`: one JSON object per entry.
fn journal(dir: &std::path::Path, matches: &[&str]) -> Result<Vec<Value>, String> {
    let mut args = vec!["journalctl", "-D", dir.to_str().unwrap(), "--no-pager", "-o", "json"];
    args.extend_from_slice(matches);
    let (ok, out) = try_run(&args);
    if !ok {
        return Err(format!("journalctl {matches:?}: {out}"));
    }
    Ok(out.lines().filter_map(|line| serde_json::from_str(line).ok()).collect())
}

/// Waits for an entry matching `matches` whose MESSAGE contains `text`; returns it.
fn wait_entry(lab: &Lab, dir: &std::path::Path, matches: &[&str], text: &str) -> Value {
    wait_for(&format!("a journal entry {matches:?} with {text:?}"), Duration::from_secs(20), || {
        let entries = journal(dir, matches)?;
        entries
            .iter()
            .find(|e| e["MESSAGE"].as_str().is_some_and(|m| m.contains(text)))
            .cloned()
            .ok_or_else(|| {
                let messages: Vec<&str> =
                    entries.iter().filter_map(|e| e["MESSAGE"].as_str()).collect();
                format!("{} entries: {messages:#?}\n{}", entries.len(), lab.dump_logs())
            })
    })
}

#[test]
fn journal_entries_carry_peer_vrf_and_prefix() {
    let journald = "/lib/systemd/systemd-journald";
    require_tool(journald);
    require_tool("journalctl");
    require_tool("unshare");
    let mut lab = Lab::new("journal");
    let node = lab.ns("node");
    let peer = lab.ns("peer");
    lab.link(&node, &["10.0.1.2/24"], &peer, &["10.0.1.1/24"]);
    let conf =
        frr_conf("10.0.1.1", "10.0.1.2", 65101, &["198.51.100.0/24", "203.0.113.0/24"], false);
    Frr::start(&mut lab, &peer, &conf);

    // Only 198.51.100.0/24 is accepted: the other announcement is refused by import policy.
    let receive = "to_receive = { allowed = { prefixes = [{ prefix = \"198.51.100.0/24\" }] } }";
    let config = format!(
        "[[bgp.routers]]\nasn = 65001\nid = \"10.0.1.2\"\nprefixes = [\"192.0.2.10/32\"]\n{}",
        neighbor("10.0.1.1", 65101, receive)
    );
    let dir = lab.path("uplink");
    std::fs::create_dir_all(&dir).unwrap();
    let uplink = Uplink {
        ns: node.clone(),
        label: "uplink".into(),
        config: dir.join("uplink.toml"),
        socket: dir.join("uplink.sock"),
    };
    std::fs::write(&uplink.config, config).unwrap();

    // journald and uplink share a private mount namespace in which /run/systemd/journal (the
    // sockets) is a fresh tmpfs and /run/log (the runtime journal) is the lab's directory;
    // the host's journal is never touched. JOURNAL_STREAM is what systemd sets for a service
    // logging to the journal: uplink then logs to the journald socket.
    let journal_root = lab.path("run-log");
    std::fs::create_dir_all(&journal_root).unwrap();
    let pidfile = lab.path("journald.pid");
    lab.adopt_pidfile("journald", pidfile.clone());
    let script = format!(
        "set -e\n\
         mkdir -p /run/systemd/journal\n\
         mount -t tmpfs tmpfs /run/systemd/journal\n\
         mount --bind {root} /run/log\n\
         if [ -d /var/log/journal ]; then mount -t tmpfs tmpfs /var/log/journal; fi\n\
         {journald} & echo $! > {pidfile}\n\
         for i in $(seq 100); do [ -S /run/systemd/journal/socket ] && break; sleep 0.05; done\n\
         export JOURNAL_STREAM=0:0 RUST_LOG=uplink=debug\n\
         exec ip netns exec {ns} {bin} run --config {config} --socket {socket}\n",
        root = journal_root.display(),
        pidfile = pidfile.display(),
        ns = node.name,
        bin = uplink_bin(),
        config = uplink.config.display(),
        socket = uplink.socket.display(),
    );
    let mut cmd = Command::new("unshare");
    cmd.args(["--mount", "--propagation", "private", "sh", "-c", &script]);
    lab.spawn("uplink", cmd);

    wait_for("the session with FRR", Duration::from_secs(30), || {
        match uplink.peer_state("ipv4Unicast", "10.0.1.1")?.as_str() {
            "Established" => Ok(()),
            other => Err(format!("{other}\n{}", lab.dump_logs())),
        }
    });
    wait_for("198.51.100.0/24 in the kernel", Duration::from_secs(20), || {
        let routes = node.run(&["ip", "route", "show", "198.51.100.0/24", "proto", UPLINK_PROTO]);
        (!routes.is_empty()).then_some(()).ok_or("not yet".to_string())
    });
    // Someone deletes the route: uplink puts it back and says so, naming the prefix.
    node.run(&["ip", "route", "del", "198.51.100.0/24"]);

    let journal_dir = journal_root.join("journal");
    let up = wait_entry(&lab, &journal_dir, &["PEER=10.0.1.1"], "session established");
    assert_eq!(up["VRF"], "default", "{up}");
    assert_eq!(up["SYSLOG_IDENTIFIER"], "uplink", "{up}");
    assert_eq!(up["SPAN_NAME"], "session", "{up}");
    let refused = wait_entry(
        &lab,
        &journal_dir,
        &["PEER=10.0.1.1", "PREFIX=203.0.113.0/24"],
        "refused by import policy",
    );
    assert_eq!(refused["VRF"], "default", "{refused}");
    let restored =
        wait_entry(&lab, &journal_dir, &["PREFIX=198.51.100.0/24", "VRF=default"], "restoring it");
    assert_eq!(restored["PRIORITY"], "5", "an info event is a notice: {restored}");
    let originated = wait_entry(&lab, &journal_dir, &["PREFIX=192.0.2.10/32"], "originated");
    assert_eq!(originated["VRF"], "default", "{originated}");
    // No field carries the crate's default F_ prefix.
    let entries = journal(&journal_dir, &["SYSLOG_IDENTIFIER=uplink"]).unwrap();
    let prefixed: Vec<&Value> = entries
        .iter()
        .filter(|e| e.as_object().is_some_and(|o| o.keys().any(|k| k.starts_with("F_"))))
        .collect();
    assert!(prefixed.is_empty(), "{prefixed:#?}");
}
