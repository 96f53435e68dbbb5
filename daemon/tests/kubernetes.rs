//! The Kubernetes source against a real control plane: etcd and kube-apiserver built from their
//! Go modules at the releases `k8s/testenv/go.mod` pins (`make testenv`), with generated
//! certificates, a ServiceAccount token and RBAC (deploy/kubernetes/rbac.yaml), in a namespace
//! of their own that the node reaches over a link, as a node reaches its cluster's API. FRR is
//! the node's ToR.

mod common;
use common::*;
use std::path::{Path, PathBuf};
use std::time::Duration;

const UP: Duration = Duration::from_secs(60);

/// The control plane's address on its link to the node.
const API_ADDRESS: &str = "10.99.0.1";

fn testenv_bin(name: &str) -> PathBuf {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../k8s/testenv/bin").join(name);
    assert!(
        path.exists(),
        "{} is missing: run `make testenv` (make test does) to build the test control plane",
        path.display()
    );
    path
}

/// etcd and kube-apiserver in `ns`, and kubectl as a cluster admin.
struct ControlPlane {
    ns: Ns,
    admin_kubeconfig: PathBuf,
    /// The cluster CA's certificate file, for kubeconfigs.
    ca_file: PathBuf,
    /// kube-apiserver's arguments, to start it again.
    apiserver_args: Vec<String>,
}

impl ControlPlane {
    /// The control plane, its apiserver reachable at `API_ADDRESS` and at `more_addresses`
    /// (its serving certificate names them all).
    fn start(lab: &mut Lab, ns: &Ns, more_addresses: &[&str]) -> ControlPlane {
        let dir = lab.path("control-plane");
        std::fs::create_dir_all(&dir).unwrap();
        let file = |name: &str| dir.join(name).to_str().unwrap().to_string();
        let write = |name: &str, text: &str| std::fs::write(dir.join(name), text).unwrap();

        // A cluster CA; the apiserver's serving certificate; an admin client certificate
        // (system:masters); the ServiceAccount token signing key.
        let ca_key = rcgen::KeyPair::generate().unwrap();
        let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        ca_params.distinguished_name.push(rcgen::DnType::CommonName, "uplink-test-ca");
        let ca = ca_params.self_signed(&ca_key).unwrap();
        let signed = |sans: Vec<String>, cn: &str, org: Option<&str>| {
            let key = rcgen::KeyPair::generate().unwrap();
            let mut params = rcgen::CertificateParams::new(sans).unwrap();
            params.distinguished_name.push(rcgen::DnType::CommonName, cn);
            if let Some(org) = org {
                params.distinguished_name.push(rcgen::DnType::OrganizationName, org);
            }
            let cert = params.signed_by(&key, &ca, &ca_key).unwrap();
            (cert.pem(), key.serialize_pem())
        };
        let mut sans: Vec<String> =
            vec![API_ADDRESS.into(), "127.0.0.1".into(), "localhost".into(), "kubernetes".into()];
        sans.extend(more_addresses.iter().map(|a| a.to_string()));
        let (serving, serving_key) = signed(sans, "kube-apiserver", None);
        let (admin, admin_key) = signed(vec![], "admin", Some("system:masters"));
        let sa_key = rcgen::KeyPair::generate().unwrap();
        write("ca.crt", &ca.pem());
        write("apiserver.crt", &serving);
        write("apiserver.key", &serving_key);
        write("sa.key", &sa_key.serialize_pem());
        write("sa.pub", &sa_key.public_key_pem());
        write(
            "admin.kubeconfig",
            &kubeconfig(
                &dir.join("ca.crt"),
                "https://127.0.0.1:6443",
                &format!(
                    "client-certificate: {}\n    client-key: {}",
                    file("admin.crt"),
                    file("admin.key")
                ),
            ),
        );
        write("admin.crt", &admin);
        write("admin.key", &admin_key);

        let mut etcd = ns.command(testenv_bin("etcd").to_str().unwrap());
        etcd.args([
            "--data-dir",
            &file("etcd"),
            "--listen-client-urls",
            "http://127.0.0.1:2379",
            "--advertise-client-urls",
            "http://127.0.0.1:2379",
            "--listen-peer-urls",
            "http://127.0.0.1:2380",
            "--log-level",
            "warn",
        ]);
        lab.spawn("etcd", etcd);
        let apiserver_args: Vec<String> = [
            "--etcd-servers=http://127.0.0.1:2379".to_string(),
            "--bind-address=0.0.0.0".into(),
            "--secure-port=6443".into(),
            format!("--advertise-address={API_ADDRESS}"),
            format!("--tls-cert-file={}", file("apiserver.crt")),
            format!("--tls-private-key-file={}", file("apiserver.key")),
            format!("--client-ca-file={}", file("ca.crt")),
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local".into(),
            format!("--service-account-key-file={}", file("sa.pub")),
            format!("--service-account-signing-key-file={}", file("sa.key")),
            "--service-cluster-ip-range=10.96.0.0/16".into(),
            "--authorization-mode=Node,RBAC".into(),
            format!("--cert-dir={}", file("certs")),
        ]
        .into();
        let plane = ControlPlane {
            ns: ns.clone(),
            admin_kubeconfig: dir.join("admin.kubeconfig"),
            ca_file: dir.join("ca.crt"),
            apiserver_args,
        };
        plane.start_apiserver(lab);
        plane
    }

    /// Starts kube-apiserver (again) and waits until it is ready.
    fn start_apiserver(&self, lab: &mut Lab) {
        let mut apiserver = self.ns.command(testenv_bin("kube-apiserver").to_str().unwrap());
        apiserver.args(&self.apiserver_args);
        lab.spawn("kube-apiserver", apiserver);
        // A slow machine takes a while to build the apiserver's caches: wait for it to say so.
        wait_for("the apiserver is ready", Duration::from_secs(180), || {
            self.try_kubectl(&["get", "--raw", "/readyz"]).map(|_| ())
        });
    }

    fn try_kubectl(&self, args: &[&str]) -> Result<String, String> {
        let mut full = vec![
            testenv_bin("kubectl").to_str().unwrap().to_string(),
            "--kubeconfig".into(),
            self.admin_kubeconfig.to_str().unwrap().to_string(),
        ];
        full.extend(args.iter().map(|a| a.to_string()));
        let full: Vec<&str> = full.iter().map(String::as_str).collect();
        match self.ns.try_run(&full) {
            (true, out) => Ok(out),
            (false, out) => Err(out),
        }
    }

    fn kubectl(&self, args: &[&str]) -> String {
        self.try_kubectl(args).unwrap_or_else(|e| panic!("kubectl {args:?}: {e}"))
    }

    /// `kubectl apply` of `yaml`.
    fn apply(&self, lab: &Lab, yaml: &str) {
        let path = lab.path("apply.yaml");
        std::fs::write(&path, yaml).unwrap();
        self.kubectl(&["apply", "-f", path.to_str().unwrap()]);
    }

    /// A kubeconfig for the `uplink` ServiceAccount (RBAC from deploy/kubernetes/rbac.yaml),
    /// with a token from the TokenRequest API, for the apiserver at `address`.
    fn uplink_kubeconfig(&self, address: &str) -> String {
        self.kubectl(&["apply", "-f", deploy("rbac.yaml").to_str().unwrap()]);
        let token =
            self.kubectl(&["create", "token", "uplink", "-n", "uplink-system", "--duration=2h"]);
        kubeconfig(
            &self.ca_file,
            &format!("https://{address}:6443"),
            &format!("token: {}", token.trim()),
        )
    }

    /// The CRDs uplink ships (deploy/kubernetes/crds), installed and established.
    fn install_crds(&self) {
        self.kubectl(&["apply", "-f", deploy("crds").to_str().unwrap()]);
        self.kubectl(&["wait", "--for", "condition=Established", "--timeout=120s", "crd", "--all"]);
    }
}

/// A file under deploy/kubernetes.
fn deploy(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/kubernetes").join(name)
}

/// A kubeconfig for `server`, trusting the CA in `ca_file`, as the `user` lines say.
fn kubeconfig(ca_file: &Path, server: &str, user: &str) -> String {
    format!(
        "apiVersion: v1
kind: Config
clusters:
- name: test
  cluster:
    server: {server}
    certificate-authority: {}\nusers:\n- name: user\n  user:\n    {user}\ncontexts:\n- name: test\n  context:\n    cluster: test\n    user: user\ncurrent-context: test\n",
        ca_file.display()
    )
}

fn node_config() -> String {
    r#"
[node]
name = "wk1"

[kubernetes]
kubeconfig = "kubeconfig"

[[bgp.routers]]
asn = 65801
id = "10.99.1.2"
[[bgp.routers.neighbors]]
address = "10.99.1.1"
asn = 65102
connect_time = "1s"

"#
    .to_string()
}

/// MetalLB's objects, from the API: a pool, and an advertisement only from nodes in rack r1
/// (the Node object's labels decide).
const METALLB: &str = "apiVersion: metallb.io/v1beta1
kind: IPAddressPool
metadata: {name: vips, namespace: metallb-system}
spec:
  addresses: [192.0.2.0/28]
---
apiVersion: metallb.io/v1beta1
kind: BGPAdvertisement
metadata: {name: rack-r1, namespace: metallb-system}
spec:
  ipAddressPools: [vips]
  nodeSelectors:
  - matchLabels: {rack: r1}
";

fn service(name: &str, policy: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Service\nmetadata:\n  name: {name}\n  namespace: shop\nspec:\n  type: LoadBalancer\n  externalTrafficPolicy: {policy}\n  selector: {{app: {name}}}\n  ports: [{{port: 80, targetPort: 8080}}]\n"
    )
}

/// An EndpointSlice of `service` with one endpoint on `node`.
fn slice(service: &str, node: &str, ready: bool) -> String {
    format!(
        "apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata:\n  name: {service}-1\n  namespace: shop\n  labels: {{kubernetes.io/service-name: {service}}}\naddressType: IPv4\nendpoints:\n- addresses: [10.128.1.5]\n  conditions: {{ready: {ready}}}\n  nodeName: {node}\nports: [{{port: 8080, protocol: TCP}}]\n"
    )
}

/// Waits until the tor's next hops for `prefix` are `want` (none: withdrawn).
fn tor_hops(tor: &Frr, prefix: &str, want: &[&str], what: &str) {
    wait_for(what, UP, || match tor.route_nexthops(prefix) {
        hops if hops == want => Ok(()),
        hops => Err(format!("{hops:?}")),
    });
}

/// The events of namespace `shop`, one `reason: message` a line.
fn events(plane: &ControlPlane) -> String {
    plane.kubectl(&[
        "get",
        "events",
        "-n",
        "shop",
        "-o",
        "jsonpath={range .items[*]}{.reason}: {.message}{\"\\n\"}{end}",
    ])
}

fn ingress(plane: &ControlPlane, name: &str) -> String {
    plane
        .kubectl(&[
            "get",
            "service",
            name,
            "-n",
            "shop",
            "-o",
            "jsonpath={.status.loadBalancer.ingress[*].ip}",
        ])
        .trim()
        .to_string()
}

/// A Service created by kubectl gets its address in `status.loadBalancer.ingress` and reaches
/// FRR once an endpoint is ready; a Node label change moves the node out of an advertisement's
/// `node_selectors` and back; `externalTrafficPolicy: Local` with the only ready endpoint on
/// another node withdraws it from this node; deleting the Service withdraws it.
#[test]
fn a_service_from_the_api_gets_its_address_and_reaches_the_tor() {
    let mut lab = Lab::new("k8s");
    let control = lab.ns("api");
    let node = lab.ns("node");
    let tor_ns = lab.ns("tor");
    lab.link(&control, &[&format!("{API_ADDRESS}/24")], &node, &["10.99.0.2/24"]);
    lab.link(&node, &["10.99.1.2/24"], &tor_ns, &["10.99.1.1/24"]);
    let tor = Frr::start(
        &mut lab,
        &tor_ns,
        &frr_conf(&SpeakerSpec {
            asn: 65102,
            router_id: "10.99.1.1".into(),
            neighbors: vec![NeighborSpec {
                address: "10.99.1.2".into(),
                asn: 65801,
                ..Default::default()
            }],
            announce: vec![],
        }),
    );
    let plane = ControlPlane::start(&mut lab, &control, &[]);
    plane.kubectl(&["create", "namespace", "shop"]);
    plane.kubectl(&["create", "namespace", "metallb-system"]);
    plane.apply(&lab, "apiVersion: v1\nkind: Node\nmetadata:\n  name: wk1\n  labels: {rack: r1}\n");
    plane.install_crds();
    plane.apply(&lab, METALLB);
    // The apiserver validates against the shipped schema, as a cluster with MetalLB would.
    let bad = lab.path("bad-pool.yaml");
    std::fs::write(&bad, "apiVersion: metallb.io/v1beta1\nkind: IPAddressPool\nmetadata: {name: bad, namespace: metallb-system}\nspec: {autoAssign: false}\n").unwrap();
    let refused = plane.try_kubectl(&["apply", "-f", bad.to_str().unwrap()]);
    assert!(
        refused.as_ref().is_err_and(|e| e.contains("spec.addresses: Required value")),
        "a pool without addresses: {refused:?}"
    );

    let dir = lab.path("wk1");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("kubeconfig"), plane.uplink_kubeconfig(API_ADDRESS)).unwrap();
    let uplink = Uplink::start(&mut lab, &node, "wk1", &node_config());
    wait_for("the session with the tor", UP, || match tor.peer_state("ipv4Unicast", "10.99.1.2") {
        s if s == "Established" => Ok(()),
        s => Err(s),
    });

    plane.apply(&lab, &format!("{}---\n{}", service("web", "Cluster"), slice("web", "wk1", true)));
    let address =
        wait_for("status.loadBalancer.ingress of shop/web", UP, || match ingress(&plane, "web") {
            a if a.is_empty() => Err(format!("none yet; uplink log:\n{}", lab.dump_logs())),
            a => Ok(a),
        });
    assert!(address.starts_with("192.0.2."), "{address}");
    let prefix = format!("{address}/32");
    tor_hops(&tor, &prefix, &["10.99.1.2"], "the tor learns the Service's address");
    // `kubectl describe service` tells it as with MetalLB.
    let allocated = format!("IPAllocated: Assigned IP [\"{address}\"]");
    let announcing = "nodeAssigned: announcing from node \"wk1\" with protocol \"bgp\"";
    wait_for("the Service's events", UP, || {
        let events = events(&plane);
        (events.contains(&allocated) && events.contains(announcing)).then_some(()).ok_or(events)
    });

    // The Node's label moves the node out of the advertisement's nodeSelectors, and back.
    plane.kubectl(&["label", "node", "wk1", "rack=r2", "--overwrite"]);
    tor_hops(&tor, &prefix, &[], "the tor loses the address when the node leaves rack r1");
    plane.kubectl(&["label", "node", "wk1", "rack=r1", "--overwrite"]);
    tor_hops(&tor, &prefix, &["10.99.1.2"], "the tor learns it again in rack r1");

    // ETP Local with its only ready endpoint on wk2: not announced from wk1.
    plane.apply(&lab, &format!("{}---\n{}", service("web", "Local"), slice("web", "wk2", true)));
    tor_hops(&tor, &prefix, &[], "the tor loses the Local Service's address");
    assert_eq!(ingress(&plane, "web"), address, "the address stays allocated");
    wait_for("an event says why wk1 does not announce it", UP, || {
        let events = events(&plane);
        events
            .contains("notAnnounced: not announcing from node \"wk1\": no local endpoint")
            .then_some(())
            .ok_or(events)
    });
    // Ready on wk1 again, then deleted: announced, then withdrawn.
    plane.apply(&lab, &slice("web", "wk1", true));
    tor_hops(&tor, &prefix, &["10.99.1.2"], "the tor learns it again");
    plane.kubectl(&["delete", "service", "web", "-n", "shop"]);
    tor_hops(&tor, &prefix, &[], "the tor loses the deleted Service's address");
    let shown = uplink.cli(&["show", "running-config"]).unwrap_or_default();
    assert!(!shown.contains("kubernetes:Service/shop/web"), "{shown}");

    // frr-k8s's FRRNodeState: the running config and the last results.
    wait_for("FRRNodeState of wk1", UP, || {
        let state = plane
            .try_kubectl(&["get", "frrnodestate", "wk1", "-o", "jsonpath={.status.lastConversionResult} {.status.lastReloadResult} {.status.runningConfig}"])?;
        (state.starts_with("success success ") && state.contains("10.99.1.1"))
            .then_some(())
            .ok_or(state)
    });
    // frr-k8s's BGPSessionState follows the session: Established, then not once FRR is gone.
    let session = || {
        plane.kubectl(&[
            "get",
            "bgpsessionstates",
            "-n",
            "metallb-system",
            "-l",
            "frrk8s.metallb.io/node=wk1",
            "-o",
            "jsonpath={range .items[*]}{.metadata.name} {.status.node}/{.status.peer}/{.status.vrf}: {.status.bgpStatus} {.status.bfdStatus}{\"\\n\"}{end}",
        ])
    };
    let up = "wk1-default-10.99.1.1 wk1/10.99.1.1/: Established N/A";
    wait_for("BGPSessionState says Established", UP, || {
        let s = session();
        (s.trim() == up).then_some(()).ok_or(s)
    });
    lab.kill9_pidfiles(&tor.label);
    wait_for("BGPSessionState follows FRR going down", UP, || {
        let s = session();
        let state = s
            .split(": ")
            .nth(1)
            .unwrap_or_default()
            .split(' ')
            .next()
            .unwrap_or_default()
            .to_string();
        (!state.is_empty() && state != "Established").then_some(()).ok_or(s)
    });
}

/// The TCP-MD5 key of the tor's session with wk1, in a Secret.
const TOR_KEY: &str = "s3cret-from-a-Secret";

/// Two nodes and a tor. wk1's session with the tor comes from a `BGPPeer` whose `passwordSecret`
/// names a `kubernetes.io/basic-auth` Secret (a TCP-MD5 session with FRR); both nodes write the
/// same `status.loadBalancer.ingress` without fighting. Then the API goes away and comes back
/// wrong in the ways a cluster does, and nothing is lost:
/// - the apiserver stopped for 30 s: no UPDATE reaches the tor, `show kubernetes` says stale,
///   and the relist when it returns is quiet;
/// - wk1 cut off from the API while a Service is deleted: wk1 keeps announcing it (the API's
///   absence withdraws nothing) and withdraws it once it sees the API again;
/// - `patch services/status` taken from uplink's role: the write is reported as forbidden and
///   retried without a storm, routing goes on, and the status is written once the role is back.
#[test]
fn the_api_away_or_wrong_loses_nothing() {
    let mut lab = Lab::new("k8s-away");
    let control = lab.ns("api");
    let wk1 = lab.ns("wk1");
    let wk2 = lab.ns("wk2");
    let tor_ns = lab.ns("tor");
    let (_, wk1_api_link) =
        lab.link(&control, &[&format!("{API_ADDRESS}/24")], &wk1, &["10.99.0.2/24"]);
    lab.link(&control, &["10.99.2.1/24"], &wk2, &["10.99.2.2/24"]);
    lab.link(&wk1, &["10.99.1.2/24"], &tor_ns, &["10.99.1.1/24"]);
    lab.link(&wk2, &["10.99.3.2/24"], &tor_ns, &["10.99.3.1/24"]);
    let tor = Frr::start(
        &mut lab,
        &tor_ns,
        &frr_conf(&SpeakerSpec {
            asn: 65102,
            router_id: "10.99.1.1".into(),
            neighbors: vec![
                NeighborSpec {
                    address: "10.99.1.2".into(),
                    asn: 65801,
                    password: Some(TOR_KEY.into()),
                    ..Default::default()
                },
                NeighborSpec { address: "10.99.3.2".into(), asn: 65801, ..Default::default() },
            ],
            announce: vec![],
        }),
    );
    let plane = ControlPlane::start(&mut lab, &control, &["10.99.2.1"]);
    plane.kubectl(&["create", "namespace", "shop"]);
    plane.kubectl(&["create", "namespace", "metallb-system"]);
    plane.install_crds();
    plane.apply(
        &lab,
        "apiVersion: v1\nkind: Node\nmetadata: {name: wk1}\n---\napiVersion: v1\nkind: Node\nmetadata: {name: wk2}\n",
    );
    let encoded = run(&["sh", "-c", &format!("printf %s '{TOR_KEY}' | base64")]);
    plane.apply(
        &lab,
        &format!(
            "apiVersion: metallb.io/v1beta1
kind: IPAddressPool
metadata: {{name: vips, namespace: metallb-system}}
spec:
  addresses: [192.0.2.0/28]
---
apiVersion: metallb.io/v1beta1
kind: BGPAdvertisement
metadata: {{name: everywhere, namespace: metallb-system}}
spec:
  ipAddressPools: [vips]
---
apiVersion: v1
kind: Secret
metadata: {{name: tor-key, namespace: metallb-system}}
type: kubernetes.io/basic-auth
data:
  password: {}
---
apiVersion: metallb.io/v1beta2
kind: BGPPeer
metadata: {{name: tor, namespace: metallb-system}}
spec:
  myASN: 65801
  peerASN: 65102
  peerAddress: 10.99.1.1
  disableMP: true
  passwordSecret: {{name: tor-key, namespace: metallb-system}}
  nodeSelectors:
  - matchLabels: {{kubernetes.io/hostname: wk1}}
",
            encoded.trim()
        ),
    );

    let start = |lab: &mut Lab, ns: &Ns, name: &str, address: &str, neighbors: &str| {
        let dir = lab.path(name);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("kubeconfig"), plane.uplink_kubeconfig(address)).unwrap();
        let config = format!(
            "[node]\nname = \"{name}\"\n\n[kubernetes]\nkubeconfig = \"kubeconfig\"\n\n{neighbors}"
        );
        Uplink::start(lab, ns, name, &config)
    };
    // wk1's only neighbor is the BGPPeer's; wk2's is in its file.
    let node1 = start(
        &mut lab,
        &wk1,
        "wk1",
        API_ADDRESS,
        "[[bgp.routers]]\nasn = 65801\nid = \"10.99.1.2\"\n",
    );
    let node2 = start(
        &mut lab,
        &wk2,
        "wk2",
        "10.99.2.1",
        "[[bgp.routers]]\nasn = 65801\nid = \"10.99.3.2\"\n[[bgp.routers.neighbors]]\naddress = \"10.99.3.1\"\nasn = 65102\nconnect_time = \"1s\"\n",
    );
    for peer in ["10.99.1.2", "10.99.3.2"] {
        wait_for(&format!("the tor's session with {peer}"), UP, || {
            match tor.peer_state("ipv4Unicast", peer) {
                s if s == "Established" => Ok(()),
                s => Err(format!("{s}; logs:\n{}", lab.dump_logs())),
            }
        });
    }
    // The key from the Secret is what FRR checks: the session stands on it. It never shows.
    let shown = node1.cli(&["show", "running-config"]).unwrap();
    assert!(!shown.contains(TOR_KEY), "{shown}");
    wait_for("the kept objects hold the Secret", UP, || {
        let kept = std::fs::read_to_string(lab.path("wk1/state/kubernetes-objects.json"))
            .unwrap_or_default();
        kept.contains("tor-key").then_some(()).ok_or(kept)
    });
    let mode = std::os::unix::fs::PermissionsExt::mode(
        &std::fs::metadata(lab.path("wk1/state/kubernetes-objects.json")).unwrap().permissions(),
    );
    assert_eq!(mode & 0o077, 0, "the kept objects are root's alone: {mode:o}");

    plane.apply(&lab, &format!("{}---\n{}", service("web", "Cluster"), slice("web", "wk1", true)));
    let address =
        wait_for("status.loadBalancer.ingress of shop/web", UP, || match ingress(&plane, "web") {
            a if a.is_empty() => Err("none yet".to_string()),
            a => Ok(a),
        });
    let prefix = format!("{address}/32");
    tor_hops(
        &tor,
        &prefix,
        &["10.99.1.2", "10.99.3.2"],
        "the tor learns the address from both nodes",
    );
    // Both nodes wrote the same status under one field manager: it settles, no conflict loop.
    let version = |name: &str| {
        plane.kubectl(&[
            "get",
            "service",
            name,
            "-n",
            "shop",
            "-o",
            "jsonpath={.metadata.resourceVersion}",
        ])
    };
    let settled = version("web");
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(version("web"), settled, "the Service keeps changing: two writers fight");
    let managers = plane.kubectl(&[
        "get",
        "service",
        "web",
        "-n",
        "shop",
        "-o",
        "jsonpath={range .metadata.managedFields[*]}{.manager}/{.subresource} {end}",
    ]);
    assert_eq!(managers.matches("uplink/status").count(), 1, "{managers}");

    // The apiserver away for 30 s: every node keeps what it announced, the tor hears nothing.
    let updates = |peer: &str| {
        tor.json(&format!("show bgp neighbors {peer} json"))[peer]["messageStats"]["updatesRecv"]
            .as_u64()
            .unwrap_or_default()
    };
    let before = (updates("10.99.1.2"), updates("10.99.3.2"));
    lab.stop("kube-apiserver");
    wait_for("wk1 says the API is away", UP, || {
        let v = node1.json(&["show", "kubernetes"])?;
        (v["stale"] == true).then_some(()).ok_or_else(|| v.to_string())
    });
    std::thread::sleep(Duration::from_secs(30));
    tor_hops(&tor, &prefix, &["10.99.1.2", "10.99.3.2"], "the tor keeps both next hops");
    assert_eq!(
        (updates("10.99.1.2"), updates("10.99.3.2")),
        before,
        "UPDATEs while the API was away"
    );
    plane.start_apiserver(&mut lab);
    for node in [&node1, &node2] {
        wait_for("the node lists again and is current", UP, || {
            let v = node.json(&["show", "kubernetes"])?;
            (v["stale"] == false).then_some(()).ok_or_else(|| v.to_string())
        });
    }
    assert_eq!((updates("10.99.1.2"), updates("10.99.3.2")), before, "the relist sent UPDATEs");

    // wk1 cut off from the API while the Service is deleted.
    wk1.run(&["ip", "link", "set", &wk1_api_link, "down"]);
    plane.kubectl(&["delete", "service", "web", "-n", "shop"]);
    tor_hops(&tor, &prefix, &["10.99.1.2"], "wk2 withdraws; wk1, cut off, keeps announcing");
    std::thread::sleep(Duration::from_secs(3));
    tor_hops(&tor, &prefix, &["10.99.1.2"], "wk1 still announces while it cannot see the API");
    wk1.run(&["ip", "link", "set", &wk1_api_link, "up"]);
    tor_hops(&tor, &prefix, &[], "wk1 withdraws once it sees the API again");

    // The status write forbidden: reported, retried calmly, routing unaffected.
    let rbac = std::fs::read_to_string(deploy("rbac.yaml")).unwrap();
    let rule = "- apiGroups: [\"\"]\n  resources: [services/status]\n  verbs: [patch]\n";
    assert!(rbac.contains(rule), "the status rule moved in rbac.yaml; update this test");
    plane.apply(&lab, &rbac.replace(rule, ""));
    plane.apply(&lab, &format!("{}---\n{}", service("api", "Cluster"), slice("api", "wk1", true)));
    let error = wait_for("wk1 reports the forbidden write", UP, || {
        let v = node1.json(&["show", "kubernetes"])?;
        match v["status_writes"]["last_error"].as_str() {
            Some(e) if e.contains("forbidden") => Ok(e.to_string()),
            _ => Err(v.to_string()),
        }
    });
    assert!(error.contains("services/status"), "{error}");
    // The address is uplink's pure allocation, announced whether or not the status is written.
    let api_prefix = wait_for("wk1 announces the new Service anyway", UP, || {
        let v = node1.json(&["show", "announcements"])?;
        v["candidates"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|c| {
                c["origin"].as_str().is_some_and(|o| o.contains("shop/api"))
                    && c["state"] == "announced"
            })
            .and_then(|c| c["prefix"].as_str().map(str::to_string))
            .ok_or_else(|| v.to_string())
    });
    tor_hops(&tor, &api_prefix, &["10.99.1.2", "10.99.3.2"], "the tor learns the new Service");
    std::thread::sleep(Duration::from_secs(5));
    let failed =
        node1.json(&["show", "kubernetes"]).unwrap()["status_writes"]["failed"].as_u64().unwrap();
    assert!(failed <= 6, "{failed} failed writes in a few seconds: a retry storm");
    plane.apply(&lab, &rbac);
    let address =
        wait_for("the status is written once the role is back", Duration::from_secs(120), || {
            match ingress(&plane, "api") {
                a if a.is_empty() => Err("none yet".to_string()),
                a => Ok(a),
            }
        });
    assert_eq!(format!("{address}/32"), api_prefix, "the status names the announced address");
}
