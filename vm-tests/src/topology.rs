//! The seed deck's lab (002_5e65234161f22d71.txt), scaled to two cores:
//!
//! ```text
//!   testvm0 (netns on the ToR) 172.18.10.90/24
//!        |  172.18.10.1
//!   ToR "r2" (Debian + FRR 8.4), AS 65102, 172.18.20.1 ------- trunk: VLAN 2001 (VRF cudn3,
//!        |  net20 172.18.20.0/24 (a bridge)                  172.19.23.1), VLAN 2002 (VRF
//!   +----+-----+                                             cudn4, 172.19.24.1): r3's role
//!  wk1 .2     wk2 .3   (node image, uplink AS 65801; VIP 192.168.100.10 on both; pod
//!                       subnets 10.244.1.0/24, 10.244.2.0/24; layer 2 VIP 172.18.20.101
//!                       on net20, answered by one of them)
//! ```
//!
//! Every VM also has a management NIC on QEMU user networking; SSH is forwarded to a port on
//! the test namespace's loopback.

use crate::cmd::{must, require_tools, wait_until};
use crate::drive;
use crate::net::Netns;
use crate::vm::{DataNic, Vm, VmSpec};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

pub const TOR_ADDR: &str = "172.18.20.1";
pub const TOR_ASN: u32 = 65102;
pub const WORKER_ASN: u32 = 65801;
/// A prefix the ToR's cudn3 router announces to the workers: uplink installs it into the
/// worker's cudn3 VRF table (issue #3: routes into a VRF's table).
pub const VRF_LEARNED: &str = "172.30.3.0/24";

/// r3's AS: the ToR's routers in VRFs cudn3/cudn4.
pub const VRF_TOR_ASN: u32 = 65103;
pub const VIP: &str = "192.168.100.10";
/// A layer 2 mode VIP (MetalLB's `L2Advertisement`) on net20, the ToR's own segment: one
/// worker answers ARP for it. MetalLB's order (SHA-256 of `"<node>#<address>"`) puts wk2
/// first for this address, so powering wk2 off moves it to wk1.
pub const L2_VIP: &str = "172.18.20.101";
pub const L2_OWNER: &str = "wk2";
/// The workers' membership key (`[layer2] secret_file`): a lab's, not a secret.
pub const MEMBERLIST_KEY: &str = "the seed lab's layer 2 membership key\n";
pub const CLIENT_NS: &str = "testvm0";
pub const CLIENT_ADDR: &str = "172.18.10.90";
/// BFD on both sides. TCG on two shared cores is slow, so not the 10 ms a real node uses: at
/// 100 ms x 3 a session with a live worker went down ("control detection time expired") about
/// once a run while the ToR was busy with the HTTP scenario; 200 ms x 3 (600 ms) held on two
/// cores. With the three VMs on one core (`taskset -c 0 make vm-test`), a worker busy with
/// NetworkManager's rollback or an Ansible task still missed 600 ms of the ToR's packets now
/// and then: 200 ms x 5 (1 s) is the detection time here.
pub const BFD_INTERVAL_MS: u32 = 200;
pub const BFD_MULTIPLIER: u32 = 5;
/// The worker that restarts gracefully (RFC 4724, `graceful_restart = true`): the ToR keeps
/// its routes through a restart and trusts graceful restart over its shared-fate BFD
/// (`bfd check-control-plane-failure`, docs/operations.md). The other worker keeps plain BFD,
/// so a power-off of it fails over within BFD's detection time.
pub const GR_WORKER: &str = "wk1";
pub const MEM_MIB: u32 = 1024;
pub const BOOT_TIMEOUT: Duration = Duration::from_secs(600);

/// The image's boot artifacts (`make image`).
pub struct Image {
    pub node_kernel: PathBuf,
    pub node_initrd: PathBuf,
    pub tor_kernel: PathBuf,
    pub tor_initrd: PathBuf,
}

impl Image {
    /// `$UPLINK_IMAGE_OUT`, else `image/out` of this workspace (found at run time: a test
    /// binary reused from a shared target dir may have been compiled in another checkout).
    /// Missing files fail the test: `make vm-test` builds them first.
    pub fn locate() -> Image {
        let out = std::env::var_os("UPLINK_IMAGE_OUT").map(PathBuf::from).unwrap_or_else(|| {
            let manifest = std::env::var_os("CARGO_MANIFEST_DIR")
                .map(PathBuf::from)
                .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")));
            manifest.join("..").join("image").join("out")
        });
        let img = Image {
            node_kernel: out.join("node/vmlinuz"),
            node_initrd: out.join("node/initrd.img"),
            tor_kernel: out.join("tor/vmlinuz"),
            tor_initrd: out.join("tor/initrd.img"),
        };
        for p in [&img.node_kernel, &img.node_initrd, &img.tor_kernel, &img.tor_initrd] {
            assert!(
                p.is_file(),
                "{} is missing: run `make vm-test` (it runs `make image`), or set UPLINK_IMAGE_OUT",
                p.display()
            );
        }
        img
    }
}

pub struct Worker {
    pub vm: Vm,
    pub name: String,
    pub addr: String,
    pub pod_subnet: String,
}

/// A temporary directory removed on drop (keys, config drives, sockets).
struct RunDir(PathBuf);

impl Drop for RunDir {
    fn drop(&mut self) {
        if let Err(e) = std::fs::remove_dir_all(&self.0) {
            eprintln!("teardown: rm -r {}: {e}", self.0.display());
        }
    }
}

/// The topology's boot and setup time (QEMU start to every VM configured) on the machine the
/// scenarios' bounds were measured on (vm-tests/README.md: boot ~115 s, config drive ~30 s).
pub const REFERENCE_BOOT: Duration = Duration::from_secs(150);
/// Past this, a machine is too slow for the VM tier to mean anything: bounds stop growing.
pub const MAX_SLOWNESS: f64 = 4.0;

/// The booted lab. Fields drop in order: VMs first, then the namespace, then the files.
pub struct Topology {
    pub tor: Vm,
    pub workers: Vec<Worker>,
    pub boot_time: Duration,
    pub log_dir: PathBuf,
    pub netns: Netns,
    _run: RunDir,
}

fn mac(vm: u8, nic: u8) -> String {
    format!("52:54:00:10:{vm:02x}:{nic:02x}")
}

fn nm_ethernet(id: &str, mac: &str, ipv4: &str) -> String {
    format!(
        "[connection]\nid={id}\ntype=ethernet\nautoconnect=true\n\n[ethernet]\nmac-address={mac}\n\n\
         [ipv4]\n{ipv4}\n\n[ipv6]\nmethod=disabled\n"
    )
}

/// DHCP on QEMU's user network, never the default route: data traffic uses the fabric.
fn nm_mgmt(mac: &str) -> String {
    nm_ethernet("mgmt", mac, "method=auto\nnever-default=true\nignore-auto-dns=true")
}

fn tor_frr_conf(workers: &[(String, String)]) -> String {
    let mut neighbors = String::new();
    let mut vrf3 = String::new();
    let mut vrf4 = String::new();
    for (i, (name, addr)) in workers.iter().enumerate() {
        neighbors.push_str(&format!(" neighbor {addr} peer-group workers\n"));
        if name == GR_WORKER {
            // RFC 5882 §4.3: a BFD Down with the C bit clear during graceful restart is not a
            // reason to flush (FRR ignores it when the peer is in NSF mode).
            neighbors.push_str(&format!(" neighbor {addr} bfd check-control-plane-failure\n"));
        }
        // r3's role (VRF-lite): the workers' addresses on VLANs 2001/2002.
        // The VRF sessions keep the usual timers (30 s keepalive, 90 s hold: uplink's, MetalLB's
        // and frr-k8s's defaults), not the 3/9 s of the default VRF's: the network-policy
        // scenario cuts a VRF uplink, and under TCG NetworkManager takes about 20 s to apply a
        // VLAN change and roll it back (natively well under the 9 s).
        for (net, vrf) in [(23, &mut vrf3), (24, &mut vrf4)] {
            let peer = format!("172.19.{net}.{}", i + 2);
            vrf.push_str(&format!(
                " neighbor {peer} remote-as {WORKER_ASN}\n neighbor {peer} timers 30 90\n"
            ));
        }
    }
    format!(
        "frr version 8.4\n\
         hostname r2\n\
         log syslog informational\n\
         service integrated-vtysh-config\n\
         !\n\
         bfd\n profile tor\n  detect-multiplier {BFD_MULTIPLIER}\n  receive-interval {BFD_INTERVAL_MS}\n  \
         transmit-interval {BFD_INTERVAL_MS}\n exit\n !\nexit\n\
         !\n\
         router bgp {TOR_ASN}\n bgp router-id 172.18.0.2\n no bgp ebgp-requires-policy\n \
         no bgp network import-check\n neighbor workers peer-group\n neighbor workers remote-as {WORKER_ASN}\n \
         neighbor workers bfd profile tor\n neighbor workers timers 3 9\n neighbor workers timers connect 5\n{neighbors} !\n \
         address-family ipv4 unicast\n  network 172.18.10.0/24\n  maximum-paths 16\n exit-address-family\nexit\n\
         !\n\
         router bgp {VRF_TOR_ASN} vrf cudn3\n bgp router-id 172.18.0.3\n no bgp ebgp-requires-policy\n \
         no bgp network import-check\n{vrf3} !\n \
         address-family ipv4 unicast\n  network {VRF_LEARNED}\n  maximum-paths 16\n exit-address-family\nexit\n\
         !\n\
         router bgp {VRF_TOR_ASN} vrf cudn4\n bgp router-id 172.18.0.3\n no bgp ebgp-requires-policy\n{vrf4} !\n \
         address-family ipv4 unicast\n  maximum-paths 16\n exit-address-family\nexit\n!\n"
    )
}

/// FRR's daemons file for the ToR: Debian's defaults for the daemons we run, the datacenter
/// profile, and a long watchfrr restart timeout. Under TCG on a loaded box watchfrr's first
/// "restart all" takes more than its default 20 s; watchfrr then kills it half-way and bgpd
/// comes up without its config ("BGP instance not found").
const TOR_FRR_DAEMONS: &str = "bgpd=yes\nbfdd=yes\nvtysh_enable=yes\n\
zebra_options=\"  -A 127.0.0.1 -s 90000000\"\n\
bgpd_options=\"   -A 127.0.0.1\"\n\
staticd_options=\"-A 127.0.0.1\"\n\
bfdd_options=\"   -A 127.0.0.1\"\n\
frr_profile=\"datacenter\"\n\
watchfrr_options=\"-T 300\"\n";

/// The worker's uplink config: one router (AS 65801) peering with the ToR, BFD, the VIP as a
/// LoadBalancer service, and its pod subnet as the default network's host_subnet.
pub fn worker_uplink_toml(name: &str, addr: &str, pod_subnet: &str) -> String {
    // The layer 2 membership: the other workers of the lab.
    let others: Vec<String> = (2..=3)
        .map(|host| format!("\"172.18.20.{host}\""))
        .filter(|other| *other != format!("\"{addr}\""))
        .collect();
    let others = others.join(", ");
    // The other worker keeps the default (helper only: the ToR's routes are kept while the
    // ToR restarts, and the ToR sends End-of-RIB).
    let graceful_restart = if name == GR_WORKER { "graceful_restart = true\n" } else { "" };
    // The graceful-restart worker sends a KEEPALIVE every second: when it hangs, the ToR's 9 s
    // hold timer then runs from at most a second before the hang, and the watchdog scenario's
    // 4 s kill ends the connection (which graceful restart covers) well before the hold timer
    // expires (which it does not: uplink does not advertise RFC 8538's N bit). At 3 s, a
    // watchdog kill under TCG came a second or two from it.
    let keepalive = if name == GR_WORKER { "1s" } else { "3s" };
    format!(
        r#"# Worker {name} of the VM tests (vm-tests/src/topology.rs).
[node]
name = "{name}"
labels = {{ "node-role.kubernetes.io/worker" = "" }}

# Network policies (conf.d/*.yaml) are applied before the routers start. Short probes: a
# change that cuts a VRF-lite uplink must be rolled back well inside the BGP hold time of the
# sessions it cuts (no BFD on the VRF sessions); pre_timeout keeps the boot short (probes that
# fail before a change are not required after it).
[network]
probes = {{ timeout = "2s", pre_timeout = "1s", interval = "200ms" }}

[[bgp.bfd_profiles]]
name = "tor"
receive_interval = "{BFD_INTERVAL_MS}ms"
transmit_interval = "{BFD_INTERVAL_MS}ms"
detect_multiplier = {BFD_MULTIPLIER}

[[bgp.routers]]
asn = {WORKER_ASN}
id = "{addr}"
maximum_paths = 16

[[bgp.routers.neighbors]]
address = "{TOR_ADDR}"
asn = {TOR_ASN}
hold_time = "9s"
keepalive_time = "{keepalive}"
connect_time = "5s"
bfd_profile = "tor"
{graceful_restart}
# The client's subnet, which the ToR originates.
[bgp.routers.neighbors.to_receive.allowed]
mode = "filtered"
prefixes = [{{ prefix = "172.18.10.0/24" }}]

[[pools]]
name = "vips"
addresses = ["{VIP}/32"]

[[services]]
name = "web"
namespace = "default"
address_pool = "vips"
load_balancer_ip = "{VIP}"
traffic_policy = "cluster"

[[advertisements]]
name = "vips"
ip_address_pools = ["vips"]

# Layer 2 mode (MetalLB's L2Advertisement): one worker answers ARP for the address on net20,
# the others take over when it dies (their membership, default detection time: 1 s).
[layer2]
address = "{addr}"
members = [{others}]
secret_file = "keys/memberlist.key"

[[pools]]
name = "lan"
addresses = ["{L2_VIP}/32"]

[[services]]
name = "lan-web"
namespace = "default"
address_pool = "lan"
load_balancer_ip = "{L2_VIP}"
traffic_policy = "cluster"

[[l2_advertisements]]
name = "lan"
ip_address_pools = ["lan"]

[[networks]]
name = "default"
topology = "layer3"
subnet = "10.244.0.0/16"
host_subnet = "{pod_subnet}"

[[route_advertisements]]
name = "default"
advertisements = ["PodNetwork"]
network_selectors = [{{ network_selection_type = "DefaultNetwork" }}]
"#
    )
}

/// `text` as JSON; the error names `what` and shows the text.
pub fn parse_json(text: &str, what: &str) -> Result<serde_json::Value, String> {
    serde_json::from_str(text).map_err(|e| format!("{what}: not JSON ({e}):\n{text}"))
}

/// How many of a client's requests to the VIP may end in a connection reset. A request in
/// flight when r2's ECMP set for the VIP changes (a worker drained, gone, or back) is hashed
/// to the other worker, which answers with a reset: that is r2's FIB rehashing (FRR has no
/// resilient hashing), not a lost route. A reset is rare (a request is in flight a few
/// percent of the time), so more than this means something else.
pub const CLIENT_RESETS_ALLOWED: usize = 2;

/// Whether curl's error text says the connection was reset in mid-request (curl 55, a send
/// error, or 56, a receive error): a timeout or a refusal is not one.
pub fn is_client_reset(curl_error: &str) -> bool {
    (curl_error.contains("curl: (56)") || curl_error.contains("curl: (55)"))
        && curl_error.contains("reset by peer")
}

/// How many of a client's failed requests (each given by curl's error text) were resets, when
/// every one was and there were no more than [`CLIENT_RESETS_ALLOWED`]; None otherwise.
pub fn tolerated_resets<'a>(failures: impl IntoIterator<Item = &'a str>) -> Option<usize> {
    let mut resets = 0;
    for error in failures {
        if !is_client_reset(error) {
            return None;
        }
        resets += 1;
    }
    (resets <= CLIENT_RESETS_ALLOWED).then_some(resets)
}

/// The distinct gateways of a route in `ip route show` text (single path or `nexthop via`
/// lines, and the nexthop objects a node's `nhid` names, which newer iproute2 also prints on
/// the route line), sorted.
pub fn gateways(route_text: &str) -> Vec<String> {
    let words: Vec<&str> = route_text.split_whitespace().collect();
    let mut out: Vec<String> = words
        .windows(2)
        .filter(|w| w.first() == Some(&"via"))
        .filter_map(|w| w.get(1).map(|s| s.to_string()))
        .collect();
    out.sort();
    out.dedup();
    out
}

/// The name the worker's trunk NIC gets (a systemd.link file on the config drive, matched by
/// MAC): the second NIC of the seed deck's NNCP.
pub const TRUNK_NIC: &str = "enp3s0";

/// r3's role on the worker side (deck slides 66-72): VLAN 2001 in VRF cudn3 and VLAN 2002 in
/// VRF cudn4 on the trunk NIC, built by uplink itself — no NetworkManager keyfiles on the
/// config drive. uplink makes the VRF devices for the `[[networks]]` (stable table ids), and
/// the VLANs come from a NodeNetworkConfigurationPolicy in conf.d: the deck's own manifest
/// (one per node, hostname selector, the node's addresses) on wk1, the fleet form (one policy
/// for every worker, `${node.host(...)}`) on wk2. A conf.d fragment holds one router per VRF
/// peering with the ToR's VRF routers (AS 65103). cudn3 is a layer3 CUDN (this node's /24),
/// cudn4 a layer2 one (the whole /16 from every node), both `target_vrf = "auto"`.
pub fn worker_vrf_lite(n: u8, trunk_mac: &str) -> Vec<(String, String)> {
    vec![
        (
            "network/10-trunk.link".to_string(),
            // The permanent address: VLANs on the NIC carry its MAC too, and must keep their
            // names.
            format!("[Match]\nPermanentMACAddress={trunk_mac}\n\n[Link]\nName={TRUNK_NIC}\n"),
        ),
        if n == 1 {
            (format!("uplink/conf.d/{DECK_NNCP_FILE}"), deck_nncp(n))
        } else {
            ("uplink/conf.d/nncp-vrf-lite-vlans.yaml".to_string(), fleet_nncp())
        },
        ("uplink/conf.d/vrf-lite.toml".to_string(), worker_vrf_lite_toml(n)),
    ]
}

/// The file wk1's NNCP is in (the cut scenario edits it).
pub const DECK_NNCP_FILE: &str = "nncp-enp3s0-wk1.yaml";

/// The seed deck's NNCP (slides 63/64) for worker `n`: the deck's manifest with this lab's
/// names and addresses (the deck's wk3 is 172.19.23.113; worker n is 172.19.23.(n+1)).
pub fn deck_nncp(n: u8) -> String {
    let host = n + 1;
    format!(
        r#"# The seed deck's NodeNetworkConfigurationPolicy (slides 63/64): VLANs 2001/2002 on the
# second NIC, each a port of its CUDN's VRF, one manifest per node selected by hostname.
apiVersion: nmstate.io/v1
kind: NodeNetworkConfigurationPolicy
metadata:
  name: {TRUNK_NIC}-wk{n}
spec:
  nodeSelector:
    kubernetes.io/hostname: wk{n}
  desiredState:
    interfaces:
    - name: {TRUNK_NIC}
      type: ethernet
      state: up
      ipv4:
        dhcp: false
        enabled: false
    - name: vlan2001
      type: vlan
      state: up
      controller: cudn3
      ipv4:
        address:
        - ip: 172.19.23.{host}
          prefix-length: 24
        dhcp: false
        enabled: true
      vlan:
        base-iface: {TRUNK_NIC}
        id: 2001
    - name: vlan2002
      type: vlan
      state: up
      controller: cudn4
      ipv4:
        address:
        - ip: 172.19.24.{host}
          prefix-length: 24
        dhcp: false
        enabled: true
      vlan:
        base-iface: {TRUNK_NIC}
        id: 2002
"#
    )
}

/// The same VLANs written once for the whole fleet (docs/network.md, per-node values): every
/// worker selects it, and each takes the host part of its own primary address (172.18.20.3 →
/// 172.19.23.3).
pub fn fleet_nncp() -> String {
    format!(
        r#"# One policy for every worker: the addresses' host part comes from each node's primary
# address (the address on the default route's interface).
apiVersion: nmstate.io/v1
kind: NodeNetworkConfigurationPolicy
metadata:
  name: vrf-lite-vlans
spec:
  nodeSelector:
    node-role.kubernetes.io/worker: ""
  maxUnavailable: 1
  desiredState:
    interfaces:
    - name: {TRUNK_NIC}
      type: ethernet
      state: up
      ipv4:
        dhcp: false
        enabled: false
    - name: vlan2001
      type: vlan
      state: up
      controller: cudn3
      ipv4:
        address:
        - ip: ${{node.host(172.19.23.0/24)}}
          prefix-length: 24
        dhcp: false
        enabled: true
      vlan:
        base-iface: {TRUNK_NIC}
        id: 2001
    - name: vlan2002
      type: vlan
      state: up
      controller: cudn4
      ipv4:
        address:
        - ip: ${{node.host(172.19.24.0/24)}}
          prefix-length: 24
        dhcp: false
        enabled: true
      vlan:
        base-iface: {TRUNK_NIC}
        id: 2002
"#
    )
}

pub fn worker_vrf_lite_toml(n: u8) -> String {
    let host = n + 1;
    let mut s = format!(
        r#"# VRF-lite towards r3's role (vm-tests/src/topology.rs).
[[networks]]
name = "cudn3"
labels = {{ export = "true" }}
topology = "layer3"
subnet = "172.23.0.0/16"
host_subnet = "172.23.{n}.0/24"

[[networks]]
name = "cudn4"
labels = {{ export = "true" }}
topology = "layer2"
subnet = "172.24.0.0/16"

[[route_advertisements]]
name = "vrf-lite"
advertisements = ["PodNetwork"]
network_selectors = [{{ network_selection_type = "ClusterUserDefinedNetworks", cluster_user_defined_network_selector = {{ network_selector = {{ match_labels = {{ export = "true" }} }} }} }}]
target_vrf = "auto"
"#
    );
    // Route leaking (frr-k8s `imports`): cudn4 imports the default VRF, so its router sends
    // the default router's VIP and pod subnet to r3's cudn4 router, and the routes the worker
    // learns in the default VRF are installed in its cudn4 table, out of the default VRF's
    // interface. The default router imports cudn3 the same way.
    s.push_str(&format!(
        r#"
[[bgp.routers]]
asn = {WORKER_ASN}
imports = [{{ vrf = "cudn3" }}]
"#
    ));
    for (vrf, net) in [("cudn3", 23), ("cudn4", 24)] {
        let (imports, advertise) = if vrf == "cudn4" {
            (
                "imports = [{ vrf = \"default\" }]\n",
                "to_advertise = { allowed = { mode = \"all\" } }\n",
            )
        } else {
            ("", "")
        };
        s.push_str(&format!(
            r#"
[[bgp.routers]]
asn = {WORKER_ASN}
id = "172.19.{net}.{host}"
vrf = "{vrf}"
{imports}
[[bgp.routers.neighbors]]
address = "172.19.{net}.1"
asn = {VRF_TOR_ASN}
connect_time = "5s"
# The default timers (30 s / 90 s), as on the ToR's VRF routers (tor_frr_conf).
to_receive = {{ allowed = {{ mode = "all" }} }}
{advertise}"#
        ));
    }
    s
}

/// The ToR's runtime setup that the config drive does not carry: the client namespace
/// (testvm0's role) and the VLAN/VRF side of r3's role.
fn tor_setup_script() -> String {
    let trunk = mac(0, 2);
    format!(
        r#"set -eu
ip netns add {CLIENT_NS}
ip link add c-{CLIENT_NS} type veth peer name eth0 netns {CLIENT_NS}
ip addr add 172.18.10.1/24 dev c-{CLIENT_NS}
ip link set c-{CLIENT_NS} up
ip -n {CLIENT_NS} link set lo up
ip -n {CLIENT_NS} addr add {CLIENT_ADDR}/24 dev eth0
ip -n {CLIENT_NS} link set eth0 up
ip -n {CLIENT_NS} route add default via 172.18.10.1
trunk=$(ip -o link | awk -F': ' '/{trunk}/ {{print $2}}')
test -n "$trunk"
ip link set "$trunk" up
ip link add cudn3 type vrf table 1003
ip link add cudn4 type vrf table 1004
ip link set cudn3 up
ip link set cudn4 up
ip link add link "$trunk" name vlan2001 type vlan id 2001
ip link add link "$trunk" name vlan2002 type vlan id 2002
ip link set vlan2001 master cudn3
ip link set vlan2002 master cudn4
ip addr add 172.19.23.1/24 dev vlan2001
ip addr add 172.19.24.1/24 dev vlan2002
ip link set vlan2001 up
ip link set vlan2002 up
"#
    )
}

/// What each worker runs for the HTTP scenarios: the VIP and the layer 2 VIP on lo (the
/// image's sysctls keep the kernel from answering ARP for the latter) and a web server bound
/// to each that answers with the worker's name. Run over SSH after boot (again after a reboot).
pub fn worker_setup_script(name: &str) -> String {
    format!(
        r#"set -eu
ip addr add {VIP}/32 dev lo
ip addr add {L2_VIP}/32 dev lo
mkdir -p /srv/www
echo {name} > /srv/www/index.html
systemd-run --unit=vip-http python3 -m http.server --bind {VIP} --directory /srv/www 80
systemd-run --unit=l2-vip-http python3 -m http.server --bind {L2_VIP} --directory /srv/www 80
"#
    )
}

impl Topology {
    /// Boots the ToR and two workers in parallel and configures them; returns once all three
    /// answer SSH and are set up.
    pub fn boot(image: &Image, log_dir: &Path) -> Topology {
        require_tools(&["qemu-system-x86_64", "ssh", "ssh-keygen", "mkfs.fat", "mcopy", "ip"]);
        std::fs::create_dir_all(log_dir)
            .unwrap_or_else(|e| panic!("mkdir {}: {e}", log_dir.display()));
        let run = RunDir(std::env::temp_dir().join(format!("uplink-vmt-{}", std::process::id())));
        let _ = std::fs::remove_dir_all(&run.0);
        std::fs::create_dir_all(&run.0)
            .unwrap_or_else(|e| panic!("mkdir {}: {e}", run.0.display()));
        let key = run.0.join("id_ed25519");
        must(
            "ssh-keygen",
            &[
                "-q",
                "-t",
                "ed25519",
                "-N",
                "",
                "-C",
                "uplink-vm-tests",
                "-f",
                &key.to_string_lossy(),
            ],
        );
        let pubkey = std::fs::read_to_string(run.0.join("id_ed25519.pub"))
            .unwrap_or_else(|e| panic!("read the public key: {e}"));

        let netns = Netns::create();
        netns.bridge("net20");
        netns.bridge("trunk");

        let workers: Vec<(String, String)> =
            (1..=2).map(|i| (format!("wk{i}"), format!("172.18.20.{}", i + 1))).collect();
        let t0 = Instant::now();

        // The ToR: FRR config, sysctls, node-network address.
        let tor_files = vec![
            ("hostname".to_string(), "r2\n".to_string()),
            ("ssh/authorized_keys".into(), pubkey.clone()),
            ("network/mgmt.nmconnection".into(), nm_mgmt(&mac(0, 0))),
            (
                "network/net20.nmconnection".into(),
                nm_ethernet("net20", &mac(0, 1), &format!("method=manual\naddress1={TOR_ADDR}/24")),
            ),
            ("frr/frr.conf".into(), tor_frr_conf(&workers)),
            ("frr/daemons".into(), TOR_FRR_DAEMONS.into()),
            (
                "sysctl.conf".into(),
                "net.ipv4.ip_forward = 1\n\
                 # L4 hashing, so the client's connections spread over the ECMP next hops.\n\
                 net.ipv4.fib_multipath_hash_policy = 1\n"
                    .into(),
            ),
        ];
        let tor_drive = run.0.join("r2.img");
        drive::build(&run.0.join("r2.d"), &tor_drive, &tor_files);
        netns.tap("r2-net20", "net20");
        netns.tap("r2-trunk", "trunk");
        let tor_spec = VmSpec {
            name: "r2".into(),
            kernel: image.tor_kernel.clone(),
            initrd: image.tor_initrd.clone(),
            append: "console=ttyS0,115200".into(),
            config_drive: tor_drive,
            mem_mib: MEM_MIB,
            // Two vCPUs: the ToR runs the client's curl loop, FRR and tcpdump at once; with one,
            // a busy vCPU delayed bfdd enough to declare a live worker's BFD session down.
            cpus: 2,
            ssh_port: 2200,
            mgmt_mac: mac(0, 0),
            data: vec![
                DataNic { mac: mac(0, 1), tap: "r2-net20".into() },
                DataNic { mac: mac(0, 2), tap: "r2-trunk".into() },
            ],
        };

        let mut specs = Vec::new();
        for (i, (name, addr)) in workers.iter().enumerate() {
            let n = u8::try_from(i + 1).unwrap_or(u8::MAX);
            let pod = format!("10.244.{}.0/24", i + 1);
            let mut files = vec![
                ("hostname".to_string(), format!("{name}\n")),
                ("ssh/authorized_keys".into(), pubkey.clone()),
                ("network/mgmt.nmconnection".into(), nm_mgmt(&mac(n, 0))),
                (
                    "network/net20.nmconnection".into(),
                    nm_ethernet(
                        "net20",
                        &mac(n, 1),
                        &format!("method=manual\naddress1={addr}/24,{TOR_ADDR}"),
                    ),
                ),
                ("uplink/uplink.toml".into(), worker_uplink_toml(name, addr, &pod)),
                ("uplink/keys/memberlist.key".into(), MEMBERLIST_KEY.into()),
            ];
            files.extend(worker_vrf_lite(n, &mac(n, 2)));
            let img = run.0.join(format!("{name}.img"));
            drive::build(&run.0.join(format!("{name}.d")), &img, &files);
            netns.tap(&format!("{name}-net20"), "net20");
            netns.tap(&format!("{name}-trunk"), "trunk");
            specs.push((
                VmSpec {
                    name: name.clone(),
                    kernel: image.node_kernel.clone(),
                    initrd: image.node_initrd.clone(),
                    append: "console=ttyS0,115200".into(),
                    config_drive: img,
                    mem_mib: MEM_MIB,
                    cpus: 1,
                    ssh_port: 2200 + u16::from(n),
                    mgmt_mac: mac(n, 0),
                    data: vec![
                        DataNic { mac: mac(n, 1), tap: format!("{name}-net20") },
                        DataNic { mac: mac(n, 2), tap: format!("{name}-trunk") },
                    ],
                },
                addr.clone(),
                pod,
            ));
        }

        // All QEMUs start from this thread (PR_SET_PDEATHSIG is per thread); the waits run in
        // parallel.
        let mut tor = Vm::start(&tor_spec, &netns, &run.0, log_dir, &key);
        let mut wk: Vec<Worker> = specs
            .iter()
            .map(|(spec, addr, pod)| Worker {
                vm: Vm::start(spec, &netns, &run.0, log_dir, &key),
                name: spec.name.clone(),
                addr: addr.clone(),
                pod_subnet: pod.clone(),
            })
            .collect();
        let results: Vec<Result<Duration, String>> = std::thread::scope(|s| {
            let mut handles = vec![s.spawn(|| tor.wait_ssh(BOOT_TIMEOUT))];
            for w in wk.iter_mut() {
                handles.push(s.spawn(move || w.vm.wait_ssh(BOOT_TIMEOUT)));
            }
            handles
                .into_iter()
                .map(|h| h.join().unwrap_or_else(|_| Err("boot waiter panicked".into())))
                .collect()
        });
        let names: Vec<String> =
            std::iter::once("r2".to_string()).chain(wk.iter().map(|w| w.name.clone())).collect();
        let mut topo = Topology {
            tor,
            workers: wk,
            boot_time: Duration::ZERO,
            log_dir: log_dir.to_owned(),
            netns,
            _run: run,
        };
        let mut errors = Vec::new();
        for (name, r) in names.iter().zip(&results) {
            match r {
                Ok(d) => println!("  {name}: SSH up {:.1} s after QEMU start", d.as_secs_f64()),
                Err(e) => errors.push(e.clone()),
            }
        }
        assert!(errors.is_empty(), "boot failed:\n{}", errors.join("\n"));

        if let Err(e) = topo.tor.sh(&tor_setup_script()) {
            panic!("ToR setup: {e}");
        }
        if let Err(e) = topo.frr_ready() {
            panic!("ToR FRR: {e}");
        }
        for w in &topo.workers {
            if let Err(e) = w.vm.sh(&worker_setup_script(&w.name)) {
                panic!("worker setup: {e}");
            }
        }
        topo.boot_time = t0.elapsed();
        topo
    }

    /// Waits until FRR runs on the ToR with frr.conf loaded. If watchfrr's slow start under TCG
    /// lost the config anyway, says so loudly and loads it again (the subject under test is
    /// uplink, not FRR's init script).
    fn frr_ready(&self) -> Result<(), String> {
        let want = format!("router bgp {TOR_ASN}");
        let loaded = || -> Result<(), String> {
            self.tor.sh("systemctl is-active frr")?;
            let cfg = self.vtysh("show running-config")?;
            if cfg.contains(&want) {
                Ok(())
            } else {
                Err(format!("frr.conf not loaded:\n{cfg}"))
            }
        };
        if wait_until(Duration::from_secs(120), Duration::from_secs(2), &loaded).is_ok() {
            return Ok(());
        }
        println!(
            "  NOTE: FRR on r2 came up without frr.conf (watchfrr restarted daemons during a slow \
             start); loading it with `vtysh -f`:\n{}",
            self.tor.sh("journalctl -u frr --no-pager | tail -n 25").unwrap_or_default()
        );
        self.tor.sh("vtysh -f /etc/frr/frr.conf")?;
        wait_until(Duration::from_secs(60), Duration::from_secs(2), &loaded)
    }

    /// vtysh on the ToR; the error carries the output.
    pub fn vtysh(&self, command: &str) -> Result<String, String> {
        self.tor.sh(&format!("vtysh -c '{command}'"))
    }

    /// How much slower this machine is than the one the scenarios' bounds were measured on
    /// (vm-tests/README.md): the topology's boot and setup time over [`REFERENCE_BOOT`], at
    /// least 1 and at most [`MAX_SLOWNESS`]. A shared machine two or three times slower is
    /// normal, and TCG makes everything in the VMs slower by the same factor.
    pub fn slowness(&self) -> f64 {
        (self.boot_time.as_secs_f64() / REFERENCE_BOOT.as_secs_f64()).clamp(1.0, MAX_SLOWNESS)
    }

    /// `bound` on this machine: a bound measured on the reference machine times
    /// [`Topology::slowness`].
    pub fn scaled(&self, bound: Duration) -> Duration {
        bound.mul_f64(self.slowness())
    }

    /// Waits for `f` on the topology, at most `timeout` scaled to this machine
    /// ([`Topology::scaled`]), and on timeout adds what a reader needs to see.
    pub fn wait<T>(
        &self,
        timeout: Duration,
        f: impl FnMut() -> Result<T, String>,
    ) -> Result<T, String> {
        self.wait_every(timeout, Duration::from_millis(500), f)
    }

    /// [`Topology::wait`] with a chosen poll interval.
    pub fn wait_every<T>(
        &self,
        timeout: Duration,
        every: Duration,
        f: impl FnMut() -> Result<T, String>,
    ) -> Result<T, String> {
        let bound = self.scaled(timeout);
        wait_until(bound, every, f).map_err(|e| {
            let mut msg = format!(
                "{e}\n(waited {bound:?}: {timeout:?} scaled by this machine's slowness {:.2})",
                self.slowness()
            );
            for cmd in ["show bgp summary", "show bfd peers brief", "show ip route"] {
                match self.vtysh(cmd) {
                    Ok(o) => msg.push_str(&format!("\n--- r2# {cmd} ---\n{o}")),
                    Err(err) => msg.push_str(&format!("\n--- r2# {cmd} failed ---\n{err}")),
                }
            }
            for w in &self.workers {
                if let Ok(o) =
                    w.vm.sh("uplink show bgp summary; journalctl -u uplink -n 20 --no-pager")
                {
                    msg.push_str(&format!("\n--- {} ---\n{o}", w.name));
                }
            }
            msg
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_reset_in_mid_connection_is_a_reset() {
        let route = "| route: 192.168.100.10 nhid 30 proto bgp metric 20 nexthop via 172.18.20.2";
        let reset =
            format!("1.5 FAIL rc=56 curl: (56) Recv failure: Connection reset by peer {route}");
        let timeout =
            format!("1.5 FAIL rc=28 curl: (28) Connection timed out after 2001 ms {route}");
        let refused =
            format!("1.5 FAIL rc=7 curl: (7) Failed to connect: Connection refused {route}");
        assert!(is_client_reset(&reset));
        assert!(!is_client_reset(&timeout));
        assert!(!is_client_reset(&refused));
        assert!(!is_client_reset("1.5 wk1"));
        assert_eq!(tolerated_resets([]), Some(0));
        assert_eq!(tolerated_resets([reset.as_str(), reset.as_str()]), Some(2));
        assert_eq!(tolerated_resets([reset.as_str(), reset.as_str(), reset.as_str()]), None);
        assert_eq!(tolerated_resets([reset.as_str(), timeout.as_str()]), None);
    }

    /// What the workers get on their config drives is a valid uplink config (main file plus the
    /// conf.d fragment), so a schema change fails here in seconds, not in a VM boot.
    #[test]
    fn worker_configs_load() {
        for n in 1..=2u8 {
            let dir = tempfile::tempdir().expect("tempdir");
            let main = dir.path().join("uplink.toml");
            let addr = format!("172.18.20.{}", n + 1);
            std::fs::write(&main, worker_uplink_toml(&format!("wk{n}"), &addr, "10.244.1.0/24"))
                .expect("write");
            std::fs::create_dir_all(dir.path().join("keys")).expect("mkdir");
            std::fs::write(dir.path().join("keys/memberlist.key"), MEMBERLIST_KEY).expect("write");
            let files = worker_vrf_lite(n, &mac(n, 2));
            // The VLANs and VRFs are uplink's to build: no keyfile of theirs on the drive.
            assert!(
                files.iter().all(|(rel, _)| !rel.ends_with(".nmconnection")),
                "a keyfile on the drive: {:?}",
                files.iter().map(|f| &f.0).collect::<Vec<_>>()
            );
            for (rel, body) in files {
                if let Some(rest) = rel.strip_prefix("uplink/") {
                    let p = dir.path().join(rest);
                    std::fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
                    std::fs::write(p, body).expect("write");
                }
            }
            let config = match uplink::config::load(&main) {
                Ok(config) => config,
                Err(e) => panic!("worker {n} config does not load: {e}"),
            };
            let policies: Vec<&str> =
                config.network.policies.iter().map(|p| p.name.as_str()).collect();
            let nncp = if n == 1 { "enp3s0-wk1" } else { "vrf-lite-vlans" };
            assert_eq!(policies, ["uplink-vrf-cudn3", "uplink-vrf-cudn4", nncp], "worker {n}");
        }
    }

    /// The power-off scenario moves the layer 2 VIP only if the worker it powers off is the
    /// one that answers for it.
    #[test]
    fn the_layer2_vip_is_answered_by_its_owner() {
        let address = L2_VIP.parse().expect("an address");
        assert_eq!(uplink::announce::l2::answering_node(["wk1", "wk2"], address), Some(L2_OWNER));
    }

    #[test]
    fn tor_frr_conf_names_every_worker() {
        let w = vec![("wk1".to_string(), "172.18.20.2".to_string())];
        let conf = tor_frr_conf(&w);
        assert!(conf.contains("neighbor 172.18.20.2 peer-group workers"));
        assert!(conf.contains("neighbor 172.18.20.2 bfd check-control-plane-failure"));
        assert!(worker_uplink_toml("wk1", "172.18.20.2", "10.244.1.0/24")
            .contains("graceful_restart = true"));
        assert!(
            !worker_uplink_toml("wk2", "172.18.20.3", "10.244.2.0/24").contains("graceful_restart")
        );
        assert!(conf.contains("neighbor 172.19.23.2 remote-as 65801"));
        assert!(conf.contains(&format!("receive-interval {BFD_INTERVAL_MS}")));
    }

    /// The Ansible scenarios install the seed-lab inventory's config: its BFD must be the
    /// topology's, or the rollout runs with timers the tier was not made for.
    #[test]
    fn the_seed_lab_inventory_has_the_topologys_bfd() {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../ansible/inventories/seed-lab/group_vars/uplink_nodes.yml"
        );
        let inventory = std::fs::read_to_string(path).unwrap();
        assert!(inventory.contains(&format!("receive_interval: {BFD_INTERVAL_MS}ms")), "{path}");
        assert!(inventory.contains(&format!("transmit_interval: {BFD_INTERVAL_MS}ms")), "{path}");
        assert!(inventory.contains(&format!("detect_multiplier: {BFD_MULTIPLIER}")), "{path}");
    }
}
