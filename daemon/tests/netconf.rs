//! Host tier for the node's own network (issue #12): a real NetworkManager on a private D-Bus
//! in a network namespace, driven by `uplink apply network` through the nmstate crate.
//!
//! The node namespace reaches a "gateway" namespace over a veth pair. NetworkManager without
//! udev leaves veths unmanaged but creates bridges, so the node's uplink is a bridge made by a
//! policy, and the veth is put into it from outside (as a NIC would be, by the kernel).
//!
//! Built only with the `netconf` feature (`make test` runs it that way).

mod common;

use std::collections::BTreeSet;
use std::path::Path;
use std::time::Duration;

use common::*;
use serde_json::Value;

const BUS_CONF: &str = r#"<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <type>system</type>
  <listen>unix:path=SOCKET</listen>
  <auth>EXTERNAL</auth>
  <includedir>/usr/share/dbus-1/system.d</includedir>
  <policy context="default">
    <allow user="*"/>
    <allow own="*"/>
    <allow send_type="method_call"/>
    <allow send_type="signal"/>
    <allow send_type="method_return"/>
    <allow send_type="error"/>
    <allow receive_type="method_call"/>
    <allow receive_type="signal"/>
    <allow receive_type="method_return"/>
    <allow receive_type="error"/>
  </policy>
</busconfig>
"#;

/// A node namespace with its own D-Bus and NetworkManager, and a gateway namespace.
struct NmNode {
    lab: Lab,
    node: Ns,
    bus: String,
    veth: String,
}

impl NmNode {
    fn start() -> NmNode {
        require_tool("/usr/sbin/NetworkManager");
        require_tool("dbus-daemon");
        require_tool("nmcli");
        let mut lab = Lab::new("netconf");
        let node = lab.ns("node");
        let gateway = lab.ns("gw");
        let (veth, _) = lab.link(&node, &[], &gateway, &["10.77.0.1/24"]);
        let socket = lab.path("bus.sock");
        let bus_conf = lab.path("bus.conf");
        std::fs::write(&bus_conf, BUS_CONF.replace("SOCKET", &socket.display().to_string()))
            .unwrap();
        let connections = lab.path("connections");
        std::fs::create_dir(&connections).unwrap();
        let nm_conf = lab.path("nm.conf");
        std::fs::write(
            &nm_conf,
            format!(
                "[main]\nplugins=keyfile\nno-auto-default=*\n[keyfile]\npath={}\n[logging]\nlevel=INFO\n",
                connections.display()
            ),
        )
        .unwrap();
        let mut dbus = node.command("dbus-daemon");
        dbus.arg(format!("--config-file={}", bus_conf.display())).arg("--nofork");
        lab.spawn("dbus", dbus);
        let bus = format!("unix:path={}", socket.display());
        wait_for("the D-Bus socket", Duration::from_secs(10), || {
            if socket.exists() {
                Ok(())
            } else {
                Err("no socket yet".into())
            }
        });
        // NetworkManager's run and state directories are host paths: private tmpfs copies
        // (`ip netns exec` gives the process a mount namespace of its own) keep parallel tests
        // and the host's own NetworkManager apart.
        let mut nm = node.command("sh");
        nm.args([
            "-c",
            &format!(
                "mount -t tmpfs none /run/NetworkManager && mount -t tmpfs none /var/lib/NetworkManager \
                 && DBUS_SYSTEM_BUS_ADDRESS={bus} exec /usr/sbin/NetworkManager --no-daemon --debug \
                 --config={} --state-file={}",
                nm_conf.display(),
                lab.path("nm.state").display()
            ),
        ]);
        std::fs::create_dir_all("/run/NetworkManager").unwrap();
        std::fs::create_dir_all("/var/lib/NetworkManager").unwrap();
        lab.spawn("NetworkManager", nm);
        let me = NmNode { lab, node, bus, veth };
        wait_for("NetworkManager on the private bus", Duration::from_secs(20), || {
            let (ok, out) = me.nmcli(&["-t", "-f", "RUNNING", "general"]);
            if ok && out.contains("running") {
                Ok(())
            } else {
                Err(out)
            }
        });
        me
    }

    fn nmcli(&self, args: &[&str]) -> (bool, String) {
        let env = self.bus_env();
        let mut full = vec!["env", &env, "nmcli"];
        full.extend_from_slice(args);
        self.node.try_run(&full)
    }

    fn bus_env(&self) -> String {
        format!("DBUS_SYSTEM_BUS_ADDRESS={}", self.bus)
    }

    /// Runs `uplink ARGS --config CONFIG` in the node namespace on the private bus.
    fn uplink(&self, args: &[&str], config: &Path) -> (bool, String) {
        let env = self.bus_env();
        let config = config.display().to_string();
        let mut full = vec!["env", &env, env!("CARGO_BIN_EXE_uplink")];
        full.extend_from_slice(args);
        full.extend_from_slice(&["--config", &config]);
        self.node.try_run(&full)
    }

    fn uplink_json(&self, args: &[&str], config: &Path) -> Value {
        let (ok, out) = self.uplink(args, config);
        assert!(ok, "uplink {args:?} failed: {out}\n{}", self.lab.dump_logs());
        serde_json::from_str(&out).unwrap_or_else(|e| panic!("not JSON ({e}): {out}"))
    }

    /// The global addresses the kernel has on `device` (`ip -j addr`).
    fn kernel_addresses(&self, device: &str) -> BTreeSet<String> {
        let (ok, out) = self.node.try_run(&["ip", "-j", "addr", "show", "dev", device]);
        if !ok {
            return BTreeSet::new(); // No such device (yet).
        }
        let value: Value = serde_json::from_str(&out).unwrap();
        value[0]["addr_info"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|a| a["scope"] == "global")
            .map(|a| format!("{}/{}", a["local"].as_str().unwrap(), a["prefixlen"]))
            .collect()
    }

    /// The addresses NetworkManager reports on `device` (`nmcli dev show`).
    fn nmcli_addresses(&self, device: &str) -> BTreeSet<String> {
        let (ok, out) = self.nmcli(&["-t", "-f", "IP4.ADDRESS,IP6.ADDRESS", "dev", "show", device]);
        assert!(ok, "nmcli: {out}");
        out.lines()
            .filter_map(|l| l.split_once(':').map(|(_, a)| a.replace("\\:", ":")))
            .filter(|a| !a.starts_with("fe80:"))
            .collect()
    }
}

/// The global addresses of `device` in nmstate's state as `uplink show network state` prints it.
fn state_addresses(state: &Value, device: &str) -> BTreeSet<String> {
    let interface = state["interfaces"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["name"] == device)
        .unwrap_or_else(|| panic!("{device} not in uplink's state"));
    ["ipv4", "ipv6"]
        .iter()
        .flat_map(|family| interface[family]["address"].as_array().cloned().unwrap_or_default())
        .map(|a| format!("{}/{}", a["ip"].as_str().unwrap(), a["prefix-length"]))
        .filter(|a| !a.starts_with("fe80:"))
        .collect()
}

fn config(dir: &Path, state_dir: &Path, policies: &str) -> std::path::PathBuf {
    config_with(dir, state_dir, "networkmanager", policies)
}

fn config_with(dir: &Path, state_dir: &Path, backend: &str, policies: &str) -> std::path::PathBuf {
    let path = dir.join("uplink.toml");
    std::fs::write(
        &path,
        format!(
            r#"[node]
name = "wk1"

# A BGP neighbor on the gateway: policies touching the default VRF probe it (ICMP from the
# source address). uplink does not run BGP here; the probe only needs the config.
[[bgp.routers]]
asn = 65801
id = "10.77.0.2"
[[bgp.routers.neighbors]]
address = "10.77.0.1"
asn = 65102
source_address = "10.77.0.2"

[network]
backend = "{backend}"
state_dir = "{}"
rollback_timeout = "30s"
probes = {{ timeout = "3s", pre_timeout = "2s", interval = "500ms" }}

{policies}"#,
            state_dir.display()
        ),
    )
    .unwrap();
    path
}

const UPLINK_POLICY: &str = r#"
[[network_policies]]
name = "uplink0"
[[network_policies.desired_state.interfaces]]
name = "br-up"
type = "linux-bridge"
state = "up"
ipv4 = { enabled = true, dhcp = false, address = [{ ip = "10.77.0.2", prefix-length = 24 }] }
ipv6 = { enabled = false }
bridge = { options = { stp = { enabled = false } } }
[[network_policies.desired_state.routes.config]]
destination = "0.0.0.0/0"
next-hop-address = "10.77.0.1"
next-hop-interface = "br-up"
"#;

const BRIDGE_POLICY: &str = r#"
[[network_policies]]
name = "bridge"
[[network_policies.desired_state.interfaces]]
name = "br-test"
type = "linux-bridge"
state = "up"
ipv4 = { enabled = true, dhcp = false, address = [{ ip = "192.0.2.1", prefix-length = 24 }, { ip = "192.0.2.2", prefix-length = 24 }] }
ipv6 = { enabled = true, dhcp = false, autoconf = false, address = [{ ip = "2001:db8:1::1", prefix-length = 64 }] }
bridge = { options = { stp = { enabled = false } } }
[[network_policies.desired_state.routes.config]]
destination = "198.51.100.0/24"
next-hop-address = "192.0.2.254"
next-hop-interface = "br-test"
"#;

/// The uplink policy changed so that the default gateway is lost: a new address on another
/// subnet, the default route removed.
const CUT_UPLINK_POLICY: &str = r#"
[[network_policies]]
name = "uplink0"
[[network_policies.desired_state.interfaces]]
name = "br-up"
type = "linux-bridge"
state = "up"
ipv4 = { enabled = true, dhcp = false, address = [{ ip = "10.88.0.2", prefix-length = 24 }] }
ipv6 = { enabled = false }
[[network_policies.desired_state.routes.config]]
destination = "0.0.0.0/0"
state = "absent"
"#;

fn enactment<'a>(enactments: &'a Value, policy: &str) -> &'a Value {
    enactments
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["policy"] == policy)
        .unwrap_or_else(|| panic!("no enactment for {policy}: {enactments}"))
}

#[test]
fn policies_apply_through_networkmanager_and_a_failed_probe_rolls_back() {
    let nm = NmNode::start();
    let state_dir = nm.lab.path("state");

    // 1. The node's uplink: a bridge with the gateway's subnet and a default route. No default
    //    gateway exists before, so no probe guards it.
    let cfg = config(nm.lab.dir.path(), &state_dir, UPLINK_POLICY);
    let (ok, out) = nm.uplink(&["apply", "network"], &cfg);
    assert!(ok, "uplink0 not applied: {out}\n{}", nm.lab.dump_logs());
    nm.node.run(&["ip", "link", "set", &nm.veth, "master", "br-up"]);
    wait_for("br-up up with the veth as its port", Duration::from_secs(10), || {
        let out = nm.node.run(&["ip", "-j", "link", "show", "dev", "br-up"]);
        if out.contains("\"operstate\":\"UP\"") {
            Ok(())
        } else {
            Err(out)
        }
    });

    // 2. A bridge with addresses and a route, guarded by the gateway probe: Available.
    let cfg = config(nm.lab.dir.path(), &state_dir, &format!("{UPLINK_POLICY}{BRIDGE_POLICY}"));
    // `uplink check` first says what applying would change here, from nmstate's diff.
    let (ok, out) = nm.uplink(&["check"], &cfg);
    assert!(ok, "{out}");
    assert!(out.contains("network policy uplink0: no change on this node"), "{out}");
    let (_, change) = out.split_once("network policy bridge: would change:").expect(&out);
    assert!(change.contains("br-test") && change.contains("192.0.2.1"), "{out}");
    let (ok, out) = nm.uplink(&["show", "network", "policies"], &cfg);
    assert!(ok && out.contains("bridge") && out.contains("br-test"), "{out}");
    let (ok, out) = nm.uplink(&["apply", "network"], &cfg);
    assert!(ok, "bridge not applied: {out}\n{}", nm.lab.dump_logs());
    let enactments = nm.uplink_json(&["show", "network", "enactments", "--json"], &cfg);
    let bridge = enactment(&enactments, "bridge");
    assert_eq!(bridge["status"], "Available", "{bridge}");
    assert_eq!(bridge["probes"][0]["probe"], "default-gateway-ipv4", "{bridge}");
    assert_eq!(bridge["probes"][0]["error"], Value::Null, "{bridge}");
    assert_eq!(bridge["probes"][1]["probe"], "bgp-neighbor 10.77.0.1 (vrf default)", "{bridge}");
    assert_eq!(bridge["probes"][1]["error"], Value::Null, "{bridge}");
    assert_eq!(enactment(&enactments, "uplink0")["status"], "Available");

    // uplink's view (nmstate) matches the kernel's and NetworkManager's.
    let expected: BTreeSet<String> = ["192.0.2.1/24", "192.0.2.2/24", "2001:db8:1::1/64"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    let state = nm.uplink_json(&["show", "network", "state", "--json"], &cfg);
    assert_eq!(state_addresses(&state, "br-test"), expected);
    assert_eq!(nm.kernel_addresses("br-test"), expected);
    assert_eq!(nm.nmcli_addresses("br-test"), expected);
    let route = nm.node.run(&["ip", "-j", "route", "show", "198.51.100.0/24"]);
    assert!(route.contains("\"gateway\":\"192.0.2.254\"") && route.contains("br-test"), "{route}");
    let running = state["routes"]["running"].as_array().unwrap();
    assert!(
        running.iter().any(
            |r| r["destination"] == "198.51.100.0/24" && r["next-hop-address"] == "192.0.2.254"
        ),
        "route missing from uplink's state: {running:?}"
    );

    // 3. A change that cuts the default gateway: the probe fails, NetworkManager rolls back,
    //    the enactment says which probe, and the address is back.
    let cfg = config(nm.lab.dir.path(), &state_dir, &format!("{CUT_UPLINK_POLICY}{BRIDGE_POLICY}"));
    let (ok, out) = nm.uplink(&["apply", "network"], &cfg);
    assert!(!ok, "a policy whose probe fails must fail the apply: {out}");
    let enactments = nm.uplink_json(&["show", "network", "enactments", "--json"], &cfg);
    let cut = enactment(&enactments, "uplink0");
    assert_eq!(cut["status"], "Failing", "{cut}");
    let message = cut["message"].as_str().unwrap();
    assert!(
        message.contains("probe default-gateway-ipv4 failed") && message.contains("rolled back"),
        "{message}"
    );
    assert_eq!(enactment(&enactments, "bridge")["status"], "Available");
    let back: BTreeSet<String> = ["10.77.0.2/24".to_string()].into();
    wait_for("the uplink address back after the rollback", Duration::from_secs(10), || {
        let now = nm.kernel_addresses("br-up");
        if now == back {
            Ok(())
        } else {
            Err(format!("{now:?}"))
        }
    });
    let default = nm.node.run(&["ip", "-j", "route", "show", "default"]);
    assert!(default.contains("10.77.0.1"), "default route not restored: {default}");

    // 4. Run again unchanged: the failed policy is not re-run (the address stays).
    let (ok, _) = nm.uplink(&["apply", "network"], &cfg);
    assert!(!ok);
    let again = nm.uplink_json(&["show", "network", "enactments", "--json"], &cfg);
    assert_eq!(enactment(&again, "uplink0")["time"], cut["time"], "a failed policy was re-run");
    assert_eq!(nm.kernel_addresses("br-up"), back);

    // 5. The enactments file is corrupt (a bad write, a downgrade): it is kept aside, not
    //    replaced by an empty record, and no policy runs — least of all the one that cut the
    //    gateway, which an empty record would have run again.
    let file = state_dir.join("enactments.json");
    std::fs::write(&file, "{ \"uplink0\": { \"status\": ").unwrap();
    let (ok, out) = nm.uplink(&["apply", "network"], &cfg);
    assert!(!ok, "no policy is applied with an unreadable record: {out}");
    assert!(out.contains("unreadable"), "the error is not said: {out}");
    let aside: Vec<_> = std::fs::read_dir(&state_dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.to_string_lossy().contains("enactments.json.unreadable-"))
        .collect();
    assert_eq!(aside.len(), 1, "the corrupt file is not kept aside: {aside:?}");
    assert_eq!(std::fs::read_to_string(&aside[0]).unwrap(), "{ \"uplink0\": { \"status\": ");
    let held = nm.uplink_json(&["show", "network", "enactments", "--json"], &cfg);
    for policy in ["uplink0", "bridge"] {
        let e = enactment(&held, policy);
        assert_eq!(e["status"], "Aborted", "{e}");
        assert!(e["message"].as_str().unwrap().contains("unreadable"), "{e}");
    }
    assert_eq!(nm.kernel_addresses("br-up"), back, "the policy that cut the gateway ran again");
    // And not on the next run either: it waits for `--retry` or a change.
    let (ok, _) = nm.uplink(&["apply", "network"], &cfg);
    assert!(!ok);
    let again = nm.uplink_json(&["show", "network", "enactments", "--json"], &cfg);
    assert_eq!(enactment(&again, "uplink0")["time"], enactment(&held, "uplink0")["time"]);
    assert_eq!(nm.kernel_addresses("br-up"), back);
}

/// kubernetes-nmstate's captures, filled by nmstate from this node's NetworkManager: a route
/// copies the default gateway's next hop (the kubernetes-nmstate examples' pattern), written as
/// the NNCP users apply. An OVS bridge is nmstate's schema too (the check accepts it), and
/// where the node has no Open vSwitch (nor NetworkManager's OVS plugin), applying it fails with
/// nmstate's reason and what was applied before stays.
#[test]
fn a_capture_is_filled_from_the_nodes_state_and_ovs_without_open_vswitch_fails_clearly() {
    let nm = NmNode::start();
    let state_dir = nm.lab.path("state");
    let cfg = config(nm.lab.dir.path(), &state_dir, UPLINK_POLICY);
    let (ok, out) = nm.uplink(&["apply", "network"], &cfg);
    assert!(ok, "uplink0 not applied: {out}\n{}", nm.lab.dump_logs());
    nm.node.run(&["ip", "link", "set", &nm.veth, "master", "br-up"]);

    let conf_d = nm.lab.dir.path().join("conf.d");
    std::fs::create_dir_all(&conf_d).unwrap();
    std::fs::write(
        conf_d.join("copy-gateway.yaml"),
        r#"apiVersion: nmstate.io/v1
kind: NodeNetworkConfigurationPolicy
metadata:
  name: copy-gateway
spec:
  capture:
    defaultGw: routes.running.destination=="0.0.0.0/0"
  desiredState:
    routes:
      config:
      - destination: 198.51.100.0/24
        next-hop-address: "{{ capture.defaultGw.routes.running.0.next-hop-address }}"
        next-hop-interface: "{{ capture.defaultGw.routes.running.0.next-hop-interface }}"
"#,
    )
    .unwrap();
    let (ok, out) = nm.uplink(&["apply", "network"], &cfg);
    assert!(ok, "copy-gateway not applied: {out}\n{}", nm.lab.dump_logs());
    let enactments = nm.uplink_json(&["show", "network", "enactments", "--json"], &cfg);
    let copied = enactment(&enactments, "copy-gateway");
    assert_eq!(copied["status"], "Available", "{copied}");
    let route = nm.node.run(&["ip", "-j", "route", "show", "198.51.100.0/24"]);
    assert!(route.contains("\"gateway\":\"10.77.0.1\"") && route.contains("br-up"), "{route}");

    std::fs::write(
        conf_d.join("ovs.yaml"),
        r#"apiVersion: nmstate.io/v1
kind: NodeNetworkConfigurationPolicy
metadata:
  name: ovs-br0
spec:
  desiredState:
    interfaces:
    - name: ovs-br0
      type: ovs-bridge
      state: up
      bridge:
        options:
          stp: false
        port:
        - name: ovs0
    - name: ovs0
      type: ovs-interface
      state: up
      ipv4:
        enabled: false
"#,
    )
    .unwrap();
    let (ok, out) = nm.uplink(&["check"], &cfg);
    assert!(ok, "nmstate's schema has OVS bridges: {out}");
    let (ok, out) = nm.uplink(&["apply", "network"], &cfg);
    assert!(!ok, "an OVS bridge without NetworkManager's OVS plugin must fail: {out}");
    let enactments = nm.uplink_json(&["show", "network", "enactments", "--json"], &cfg);
    // The capture's policy was not applied again: what it fills is what it filled.
    let copied_again = enactment(&enactments, "copy-gateway");
    assert_eq!(copied_again["time"], copied["time"], "{copied_again}");
    assert_eq!(copied_again["status"], "Available", "{copied_again}");
    let ovs = enactment(&enactments, "ovs-br0");
    assert_eq!(ovs["status"], "Failing", "{ovs}");
    let message = ovs["message"].as_str().unwrap();
    // nmstate looks for Open vSwitch before it asks NetworkManager.
    assert!(
        message.contains("PluginFailure") && message.contains("not able to connect OVS daemon"),
        "{ovs}"
    );
    // What was applied before stays.
    let route = nm.node.run(&["ip", "-j", "route", "show", "198.51.100.0/24"]);
    assert!(route.contains("10.77.0.1"), "{route}");
}

/// Kernel mode (no NetworkManager): the same flow without a checkpoint. uplink keeps the state
/// that undoes the policy and applies it when a probe fails.
#[test]
fn kernel_mode_reapplies_the_previous_state_on_a_failed_probe() {
    let mut lab = Lab::new("netconf-kernel");
    let node = lab.ns("knode");
    let gateway = lab.ns("kgw");
    let (veth, _) = lab.link(&node, &[], &gateway, &["10.77.0.1/24"]);
    let state_dir = lab.path("state");
    let uplink = |config: &Path| -> (bool, String) {
        let config = config.display().to_string();
        node.try_run(&[env!("CARGO_BIN_EXE_uplink"), "apply", "network", "--config", &config])
    };
    let show = |config: &Path| -> Value {
        let config = config.display().to_string();
        let out = node.run(&[
            env!("CARGO_BIN_EXE_uplink"),
            "show",
            "network",
            "enactments",
            "--json",
            "--config",
            &config,
        ]);
        serde_json::from_str(&out).unwrap()
    };
    let addresses = |device: &str| -> BTreeSet<String> {
        let (ok, out) = node.try_run(&["ip", "-j", "addr", "show", "dev", device]);
        if !ok {
            return BTreeSet::new();
        }
        let value: Value = serde_json::from_str(&out).unwrap();
        value[0]["addr_info"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|a| a["scope"] == "global")
            .map(|a| format!("{}/{}", a["local"].as_str().unwrap(), a["prefixlen"]))
            .collect()
    };

    // nmstate's kernel mode cannot switch IPv6 off on an interface (a sysctl, not netlink):
    // the kernel-mode policies leave `ipv6` out.
    let kernel = |policy: &str| policy.replace("ipv6 = { enabled = false }\n", "");
    let bridge = BRIDGE_POLICY.replace(
        "ipv6 = { enabled = true, dhcp = false, autoconf = false, address = [{ ip = \"2001:db8:1::1\", prefix-length = 64 }] }\n",
        "",
    );
    let cfg = config_with(lab.dir.path(), &state_dir, "kernel", &kernel(UPLINK_POLICY));
    let (ok, out) = uplink(&cfg);
    assert!(ok, "{out}\n{}", lab.dump_logs());
    node.run(&["ip", "link", "set", &veth, "master", "br-up"]);
    wait_for("br-up up with the veth as its port", Duration::from_secs(10), || {
        let out = node.run(&["ip", "-j", "link", "show", "dev", "br-up"]);
        if out.contains("\"operstate\":\"UP\"") {
            Ok(())
        } else {
            Err(out)
        }
    });
    let cfg = config_with(
        lab.dir.path(),
        &state_dir,
        "kernel",
        &format!("{}{bridge}", kernel(UPLINK_POLICY)),
    );
    let (ok, out) = uplink(&cfg);
    assert!(ok, "{out}");
    let enactments = show(&cfg);
    assert_eq!(enactment(&enactments, "bridge")["status"], "Available", "{enactments}");
    assert_eq!(enactment(&enactments, "bridge")["probes"][0]["probe"], "default-gateway-ipv4");
    assert!(addresses("br-test").contains("192.0.2.1/24"));

    let cfg = config_with(
        lab.dir.path(),
        &state_dir,
        "kernel",
        &format!("{}{bridge}", kernel(CUT_UPLINK_POLICY)),
    );
    let (ok, out) = uplink(&cfg);
    assert!(!ok, "{out}");
    let cut = show(&cfg);
    let cut = enactment(&cut, "uplink0");
    assert_eq!(cut["status"], "Failing", "{cut}");
    let message = cut["message"].as_str().unwrap();
    assert!(
        message.contains("probe default-gateway-ipv4 failed") && message.ends_with("rolled back"),
        "{message}"
    );
    assert_eq!(addresses("br-up"), ["10.77.0.2/24".to_string()].into());
    let default = node.run(&["ip", "-j", "route", "show", "default"]);
    assert!(default.contains("10.77.0.1"), "default route not restored: {default}");
}

/// The daemon (`uplink run`) keeps the order of docs/network.md: the policies first, then the
/// BGP routers. A neighbor whose source address is not on the node waits (`show bgp summary`
/// says so) and connects once the address appears. A policy applied by reload (SIGHUP) that
/// cuts the uplink is rolled back before the BGP hold time runs out: the session with FRR
/// never drops.
/// A single-hop BGP neighbor's probe is bound to the neighbor's link: a change that moves the
/// link off the neighbor's subnet fails the probe and is undone, although the neighbor still
/// answers through a second path (the other ToR), which an unbound echo would take.
#[test]
fn the_neighbor_probe_does_not_pass_through_another_link() {
    let mut lab = Lab::new("netconf-link");
    let node = lab.ns("lnode");
    let tor = lab.ns("ltor");
    let other_tor = lab.ns("lalt");
    let (to_tor, _) = lab.link(&node, &["10.66.1.2/24"], &tor, &["10.66.1.1/24"]);
    lab.link(&node, &["10.66.2.2/24"], &other_tor, &["10.66.2.1/24"]);
    lab.link(&other_tor, &["10.66.3.1/24"], &tor, &["10.66.3.2/24"]);
    other_tor.run(&["sysctl", "-qw", "net.ipv4.ip_forward=1"]);
    other_tor.run(&["ip", "route", "add", "10.66.1.1/32", "via", "10.66.3.2"]);
    tor.run(&["ip", "route", "add", "10.66.2.0/24", "via", "10.66.3.1"]);
    node.run(&["ip", "route", "add", "default", "via", "10.66.2.1"]);
    let ping = |bound: Option<&str>| {
        let mut args = vec!["ping", "-c", "1", "-W", "1"];
        if let Some(device) = bound {
            args.extend(["-I", device]);
        }
        args.push("10.66.1.1");
        node.try_run(&args).0
    };
    // The second path is real: with the link down, an unbound echo still gets its answer.
    node.run(&["ip", "link", "set", &to_tor, "down"]);
    wait_for("the neighbor through the other ToR", Duration::from_secs(10), || {
        match (ping(None), ping(Some(&to_tor))) {
            (true, false) => Ok(()),
            other => Err(format!("(unbound, bound) answered: {other:?}")),
        }
    });
    node.run(&["ip", "link", "set", &to_tor, "up"]);
    wait_for("the neighbor on its own link", Duration::from_secs(10), || {
        ping(Some(&to_tor)).then_some(()).ok_or_else(|| "no answer".to_string())
    });

    let state_dir = lab.path("state");
    let config = lab.path("uplink.toml");
    std::fs::write(
        &config,
        format!(
            r#"[node]
name = "wk1"

[[bgp.routers]]
asn = 65801
id = "10.66.1.2"
[[bgp.routers.neighbors]]
address = "10.66.1.1"
asn = 65102

[network]
backend = "kernel"
state_dir = "{}"
probes = {{ timeout = "3s", pre_timeout = "2s", interval = "500ms" }}

[[network_policies]]
name = "tor-link-renumbered"
[[network_policies.desired_state.interfaces]]
name = "{to_tor}"
type = "ethernet"
state = "up"
ipv4 = {{ enabled = true, dhcp = false, address = [{{ ip = "10.66.9.2", prefix-length = 24 }}] }}
"#,
            state_dir.display()
        ),
    )
    .unwrap();
    let config = config.display().to_string();
    let (ok, out) =
        node.try_run(&[env!("CARGO_BIN_EXE_uplink"), "apply", "network", "--config", &config]);
    assert!(
        !ok && out.contains("tor-link-renumbered"),
        "moving the link off the neighbor's subnet passed its probe: {out}\n{}",
        node.run(&["ip", "link", "show", &to_tor])
    );
    let out = node.run(&[
        env!("CARGO_BIN_EXE_uplink"),
        "show",
        "network",
        "enactments",
        "--json",
        "--config",
        &config,
    ]);
    let enactments: Value = serde_json::from_str(&out).unwrap();
    let cut = enactment(&enactments, "tor-link-renumbered");
    let message = cut["message"].as_str().unwrap_or_default();
    assert_eq!(cut["status"], "Failing", "{cut}");
    assert!(
        message.contains("bgp-neighbor 10.66.1.1 (vrf default)")
            && message.contains(&format!("(via {to_tor})")),
        "{cut}"
    );
    assert!(ping(Some(&to_tor)), "the link was not brought back: {cut}");
}

#[test]
fn the_daemon_applies_policies_before_its_routers_and_a_cut_by_reload_is_rolled_back() {
    let mut nm = NmNode::start();
    let state_dir = nm.lab.path("state");
    let gateway = Ns { name: format!("ul{}-gw", nm.lab.id) };
    // The session runs from 10.77.0.9, an address the node does not have at start; the
    // gateway reaches it through the node's uplink address.
    gateway.run(&["ip", "route", "add", "10.77.0.9/32", "via", "10.77.0.2"]);
    let frr = Frr::start(
        &mut nm.lab,
        &gateway,
        "router bgp 65102\n bgp router-id 10.77.0.1\n no bgp ebgp-requires-policy\n \
         neighbor 10.77.0.9 remote-as 65801\n neighbor 10.77.0.9 timers 10 30\n \
         neighbor 10.77.0.9 timers connect 2\n",
    );
    let cfg = daemon_config(nm.lab.dir.path(), &state_dir, UPLINK_POLICY);
    let socket = nm.lab.path("uplink.sock");
    let mut run = nm.node.command(env!("CARGO_BIN_EXE_uplink"));
    run.args(["run", "--config", cfg.to_str().unwrap(), "--socket", socket.to_str().unwrap()])
        .env("DBUS_SYSTEM_BUS_ADDRESS", &nm.bus)
        .env("RUST_LOG", "uplink=info");
    let pid = nm.lab.spawn("uplink", run);
    let show = |args: &[&str]| -> (bool, String) {
        let mut full = vec![env!("CARGO_BIN_EXE_uplink")];
        full.extend_from_slice(args);
        full.extend_from_slice(&["--socket", socket.to_str().unwrap()]);
        try_run(&full)
    };
    let summary = || -> Value {
        let (ok, out) = show(&["show", "bgp", "summary", "--json"]);
        assert!(ok, "{out}");
        serde_json::from_str(&out).unwrap()
    };

    // 1. The policy made br-up before the router started; the neighbor waits for 10.77.0.9.
    let peer = wait_for("the router running", Duration::from_secs(30), || {
        let (ok, out) = show(&["show", "bgp", "summary", "--json"]);
        if !ok {
            return Err(out);
        }
        let v: Value = serde_json::from_str(&out).map_err(|e| e.to_string())?;
        Ok(v["ipv4Unicast"]["peers"]["10.77.0.1"].clone())
    });
    assert_eq!(peer["waitingFor"], "source address 10.77.0.9", "{peer}");
    let (_, text) = show(&["show", "bgp", "summary"]);
    assert!(text.contains("Neighbor 10.77.0.1 waits for source address 10.77.0.9"), "{text}");
    let log = std::fs::read_to_string(nm.lab.path("uplink.log")).unwrap();
    let applied = log.find("every selected policy is Available").unwrap_or_else(|| panic!("{log}"));
    let started = log.find("routing instance started").unwrap_or_else(|| panic!("{log}"));
    assert!(applied < started, "the router started before the policies were applied:\n{log}");
    assert!(log.contains("waits for source address 10.77.0.9"), "{log}");
    assert_eq!(nm.kernel_addresses("br-up"), ["10.77.0.2/24".to_string()].into());
    nm.node.run(&["ip", "link", "set", &nm.veth, "master", "br-up"]);

    // 2. The address appears: the session comes up by itself.
    nm.node.run(&["ip", "addr", "add", "10.77.0.9/32", "dev", "lo"]);
    wait_for("the session from 10.77.0.9 Established", Duration::from_secs(30), || {
        let state = frr.peer_state("ipv4Unicast", "10.77.0.9");
        if state == "Established" {
            Ok(())
        } else {
            Err(format!("{state}\n{}", nm.lab.dump_logs()))
        }
    });
    assert_eq!(summary()["ipv4Unicast"]["peers"]["10.77.0.1"]["waitingFor"], Value::Null);
    let established = |frr: &Frr| -> (String, u64) {
        let v = frr.json("show bgp neighbors 10.77.0.9 json");
        let n = &v["10.77.0.9"];
        (
            n["bgpState"].as_str().unwrap_or("").to_string(),
            n["connectionsEstablished"].as_u64().unwrap_or(0),
        )
    };
    let before = established(&frr);
    assert_eq!(before.0, "Established");

    // 3. A reload with a policy that cuts the uplink: applied before the router diff, its
    //    probes fail, it is rolled back, and FRR's session never drops.
    daemon_config(nm.lab.dir.path(), &state_dir, CUT_UPLINK_POLICY);
    let t0 = std::time::Instant::now();
    run_cmd(&["kill", "-HUP", &pid.to_string()]);
    let status_cfg = cfg.clone();
    let cut = wait_for("the cut policy Failing", Duration::from_secs(60), || {
        assert_eq!(established(&frr), before, "the session dropped during the cut");
        let (ok, out) = nm.uplink(&["show", "network", "enactments", "--json"], &status_cfg);
        if !ok {
            return Err(out);
        }
        let v: Value = serde_json::from_str(&out).map_err(|e| e.to_string())?;
        let e = enactment(&v, "uplink0").clone();
        if e["status"] == "Failing" {
            Ok(e)
        } else {
            Err(e.to_string())
        }
    });
    let message = cut["message"].as_str().unwrap();
    assert!(
        message.contains("failed after the change") && message.contains("rolled back"),
        "{message}"
    );
    println!("cut policy rolled back {:.1} s after SIGHUP: {message}", t0.elapsed().as_secs_f64());
    // Past a keepalive or two of FRR's, the session is still the same one.
    std::thread::sleep(Duration::from_secs(12));
    assert_eq!(established(&frr), before, "the session dropped after the rollback");
    assert_eq!(nm.kernel_addresses("br-up"), ["10.77.0.2/24".to_string()].into());
}

/// The daemon's config for the reload test: one router whose session runs from 10.77.0.9.
fn daemon_config(dir: &Path, state_dir: &Path, policies: &str) -> std::path::PathBuf {
    let path = dir.join("uplink.toml");
    std::fs::write(
        &path,
        format!(
            r#"[node]
name = "wk1"
[[bgp.routers]]
asn = 65801
id = "10.77.0.9"
[[bgp.routers.neighbors]]
address = "10.77.0.1"
asn = 65102
source_address = "10.77.0.9"
connect_time = "1s"
keepalive_time = "10s"
hold_time = "30s"

[network]
state_dir = "{}"
rollback_timeout = "30s"
probes = {{ timeout = "3s", pre_timeout = "2s", interval = "500ms" }}
{policies}"#,
            state_dir.display()
        ),
    )
    .unwrap();
    path
}

fn run_cmd(args: &[&str]) {
    let (ok, out) = try_run(args);
    assert!(ok, "{args:?}: {out}");
}

/// A reload that adds a policy and a router that cannot start (port 179 is taken) is refused
/// whole: `applied: false`, the policy never ran (its bridge does not appear) and the
/// enactments are the same bytes as before. Once the port is free, the same reload applies
/// both, and its answer names the policy it applied.
#[test]
fn a_refused_reload_changes_nothing_network_included() {
    let mut nm = NmNode::start();
    let state_dir = nm.lab.path("state");
    let cfg = nm.lab.path("uplink.toml");
    let write_config = |policies: &str, router: &str| {
        std::fs::write(
            &cfg,
            format!(
                "[node]\nname = \"wk1\"\n{router}\n[network]\nstate_dir = \"{}\"\n\
                 rollback_timeout = \"30s\"\n\
                 probes = {{ timeout = \"3s\", pre_timeout = \"2s\", interval = \"500ms\" }}\n\
                 {policies}",
                state_dir.display()
            ),
        )
        .unwrap();
    };
    write_config(UPLINK_POLICY, "");
    let socket = nm.lab.path("uplink.sock");
    let mut run = nm.node.command(env!("CARGO_BIN_EXE_uplink"));
    run.args(["run", "--config", cfg.to_str().unwrap(), "--socket", socket.to_str().unwrap()])
        .args(["--state-dir", nm.lab.path("daemon-state").to_str().unwrap()])
        .env("DBUS_SYSTEM_BUS_ADDRESS", &nm.bus)
        .env("RUST_LOG", "uplink=info");
    nm.lab.spawn("uplink", run);
    let reload = || -> (bool, Value) {
        let (ok, out) = try_run(&[
            env!("CARGO_BIN_EXE_uplink"),
            "reload",
            "--json",
            "--socket",
            socket.to_str().unwrap(),
        ]);
        let value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
        (ok, value)
    };
    let file = state_dir.join("enactments.json");
    wait_for("uplink0 Available at start", Duration::from_secs(60), || {
        let text = std::fs::read_to_string(&file).map_err(|e| e.to_string())?;
        text.contains("\"Available\"").then_some(()).ok_or(text)
    });
    nm.node.run(&["ip", "link", "set", &nm.veth, "master", "br-up"]);
    let before = std::fs::read(&file).unwrap();

    // Something else holds port 179 in the node's namespace.
    let mut squatter = nm.node.command("python3");
    squatter.args([
        "-c",
        "import socket, time\ns = socket.socket(socket.AF_INET6)\n\
         s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)\ns.bind(('::', 179))\n\
         s.listen()\ntime.sleep(600)",
    ]);
    nm.lab.spawn("squatter", squatter);
    wait_for("the squatter on port 179", Duration::from_secs(10), || {
        let out = nm.node.run(&["ss", "-ltnH", "sport = :179"]);
        (!out.trim().is_empty()).then_some(()).ok_or(out)
    });
    let router = "[[bgp.routers]]\nasn = 65801\nid = \"10.77.0.2\"\n\
                  [[bgp.routers.neighbors]]\naddress = \"10.77.0.1\"\nasn = 65102\n";
    write_config(&format!("{UPLINK_POLICY}{BRIDGE_POLICY}"), router);
    let (ok, refused) = reload();
    assert!(!ok, "a reload whose router cannot start must fail: {refused:#}");
    assert_eq!(refused["applied"], false, "{refused:#}");
    let error = refused["error"].as_str().unwrap_or_default();
    assert!(error.contains("179"), "the error does not name the port: {refused:#}");
    let (exists, _) = nm.node.try_run(&["ip", "link", "show", "br-test"]);
    assert!(!exists, "the refused reload's policy made br-test:\n{}", nm.lab.dump_logs());
    assert_eq!(std::fs::read(&file).unwrap(), before, "the enactments changed");

    // The port is free: the same reload applies whole.
    nm.lab.stop("squatter");
    let (ok, applied) = reload();
    assert!(ok, "{applied:#}\n{}", nm.lab.dump_logs());
    let bridge = applied["network"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["policy"] == "bridge")
        .unwrap_or_else(|| panic!("the answer does not name the policy: {applied:#}"))
        .clone();
    assert_eq!(
        (bridge["status"].as_str(), bridge["changed"].as_bool()),
        (Some("Available"), Some(true))
    );
    assert_eq!(applied["routers"][0]["action"], "added", "{applied:#}");
    assert!(nm.kernel_addresses("br-test").contains("192.0.2.1/24"));
}

/// A second bridge, applied after `uplink0` (policies go in name order).
const LATER_POLICY: &str = r#"
[[network_policies]]
name = "zz-later"
[[network_policies.desired_state.interfaces]]
name = "br-later"
type = "linux-bridge"
state = "up"
ipv4 = { enabled = true, dhcp = false, address = [{ ip = "192.0.2.77", prefix-length = 24 }] }
ipv6 = { enabled = false }
bridge = { options = { stp = { enabled = false } } }
"#;

/// `kill -9` in the middle of an apply (NetworkManager's checkpoint open, its probes running),
/// then a restart at once: the interrupted policy is Aborted and its uncommitted change rolled
/// back by its own checkpoint right away (not when the checkpoint times out), and the next
/// policy applies (its checkpoint is not refused as overlapping the dead one's).
#[test]
fn a_restart_after_kill_9_mid_apply_rolls_back_and_goes_on() {
    let mut nm = NmNode::start();
    let state_dir = nm.lab.path("state");
    let cfg = config(nm.lab.dir.path(), &state_dir, UPLINK_POLICY);
    let (ok, out) = nm.uplink(&["apply", "network"], &cfg);
    assert!(ok, "uplink0 not applied: {out}\n{}", nm.lab.dump_logs());
    nm.node.run(&["ip", "link", "set", &nm.veth, "master", "br-up"]);
    let up: BTreeSet<String> = ["10.77.0.2/24".to_string()].into();
    wait_for("the gateway reachable through br-up", Duration::from_secs(20), || {
        let (ok, out) = nm.node.try_run(&["ping", "-c1", "-W1", "10.77.0.1"]);
        ok.then_some(()).ok_or(out)
    });

    // The cut: its gateway probe fails after the change and takes `probes.timeout` (3 s)
    // to say so. uplink is killed while it waits.
    let cfg = config(nm.lab.dir.path(), &state_dir, &format!("{CUT_UPLINK_POLICY}{LATER_POLICY}"));
    let mut apply = nm.node.command(env!("CARGO_BIN_EXE_uplink"));
    apply
        .args(["apply", "network", "--config", cfg.to_str().unwrap()])
        .env("DBUS_SYSTEM_BUS_ADDRESS", &nm.bus);
    nm.lab.spawn("apply", apply);
    let file = state_dir.join("enactments.json");
    wait_for("uplink0 applied and probing", Duration::from_secs(30), || {
        let v: Value = serde_json::from_str(&std::fs::read_to_string(&file).unwrap_or_default())
            .map_err(|e| e.to_string())?;
        let e = &v["uplink0"];
        let probing = e["status"] == "Progressing" && e["in_flight"]["path"].is_string();
        probing.then_some(()).ok_or(e.to_string())
    });
    assert_eq!(nm.kernel_addresses("br-up"), ["10.88.0.2/24".to_string()].into(), "not cut yet");
    nm.lab.kill9("apply");

    let t0 = std::time::Instant::now();
    let (ok, out) = nm.uplink(&["apply", "network"], &cfg);
    let enactments = nm.uplink_json(&["show", "network", "enactments", "--json"], &cfg);
    let cut = enactment(&enactments, "uplink0");
    assert_eq!(cut["status"], "Aborted", "{cut}\n{out}");
    let message = cut["message"].as_str().unwrap();
    assert!(message.contains("interrupted") && message.contains("rolled back"), "{cut}");
    assert!(!message.contains("FAILED"), "{cut}");
    wait_for("br-up's address from before the dead apply", Duration::from_secs(10), || {
        let now = nm.kernel_addresses("br-up");
        (now == up).then_some(()).ok_or(format!("{now:?}"))
    });
    let took = t0.elapsed();
    let later = enactment(&enactments, "zz-later");
    assert_eq!(later["status"], "Available", "the next policy did not apply: {later}\n{out}");
    assert!(nm.kernel_addresses("br-later").contains("192.0.2.77/24"));
    // Aborted is not Available: the run says so.
    assert!(!ok, "{out}");
    // Well inside the 30 s rollback timeout: the checkpoint did not time out by itself.
    assert!(took < Duration::from_secs(25), "took {took:?}: {out}");
}
