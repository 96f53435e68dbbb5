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
}

impl ControlPlane {
    fn start(lab: &mut Lab, ns: &Ns) -> ControlPlane {
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
        let (serving, serving_key) = signed(
            vec![API_ADDRESS.into(), "127.0.0.1".into(), "localhost".into(), "kubernetes".into()],
            "kube-apiserver",
            None,
        );
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
        let mut apiserver = ns.command(testenv_bin("kube-apiserver").to_str().unwrap());
        apiserver.args([
            "--etcd-servers=http://127.0.0.1:2379",
            "--bind-address=0.0.0.0",
            "--secure-port=6443",
            &format!("--advertise-address={API_ADDRESS}"),
            &format!("--tls-cert-file={}", file("apiserver.crt")),
            &format!("--tls-private-key-file={}", file("apiserver.key")),
            &format!("--client-ca-file={}", file("ca.crt")),
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            &format!("--service-account-key-file={}", file("sa.pub")),
            &format!("--service-account-signing-key-file={}", file("sa.key")),
            "--service-cluster-ip-range=10.96.0.0/16",
            "--authorization-mode=Node,RBAC",
            &format!("--cert-dir={}", file("certs")),
        ]);
        lab.spawn("kube-apiserver", apiserver);
        let plane = ControlPlane {
            ns: ns.clone(),
            admin_kubeconfig: dir.join("admin.kubeconfig"),
            ca_file: dir.join("ca.crt"),
        };
        // A slow machine takes a while to build the apiserver's caches: wait for it to say so.
        wait_for("the apiserver is ready", Duration::from_secs(180), || {
            plane.try_kubectl(&["get", "--raw", "/readyz"]).map(|_| ())
        });
        plane
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
    /// with a token from the TokenRequest API.
    fn uplink_kubeconfig(&self) -> String {
        let rbac = Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/kubernetes/rbac.yaml");
        self.kubectl(&["apply", "-f", rbac.to_str().unwrap()]);
        let token =
            self.kubectl(&["create", "token", "uplink", "-n", "uplink-system", "--duration=2h"]);
        kubeconfig(
            &self.ca_file,
            &format!("https://{API_ADDRESS}:6443"),
            &format!("token: {}", token.trim()),
        )
    }
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
    let plane = ControlPlane::start(&mut lab, &control);
    plane.kubectl(&["create", "namespace", "shop"]);
    plane.kubectl(&["create", "namespace", "metallb-system"]);
    plane.apply(&lab, "apiVersion: v1\nkind: Node\nmetadata:\n  name: wk1\n  labels: {rack: r1}\n");
    let crds = Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/kubernetes/crds/metallb.yaml");
    plane.kubectl(&["apply", "-f", crds.to_str().unwrap()]);
    plane.kubectl(&[
        "wait",
        "--for",
        "condition=Established",
        "--timeout=120s",
        "crd/ipaddresspools.metallb.io",
        "crd/bgpadvertisements.metallb.io",
    ]);
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
    std::fs::write(dir.join("kubeconfig"), plane.uplink_kubeconfig()).unwrap();
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

    // The Node's label moves the node out of the advertisement's nodeSelectors, and back.
    plane.kubectl(&["label", "node", "wk1", "rack=r2", "--overwrite"]);
    tor_hops(&tor, &prefix, &[], "the tor loses the address when the node leaves rack r1");
    plane.kubectl(&["label", "node", "wk1", "rack=r1", "--overwrite"]);
    tor_hops(&tor, &prefix, &["10.99.1.2"], "the tor learns it again in rack r1");

    // ETP Local with its only ready endpoint on wk2: not announced from wk1.
    plane.apply(&lab, &format!("{}---\n{}", service("web", "Local"), slice("web", "wk2", true)));
    tor_hops(&tor, &prefix, &[], "the tor loses the Local Service's address");
    assert_eq!(ingress(&plane, "web"), address, "the address stays allocated");
    // Ready on wk1 again, then deleted: announced, then withdrawn.
    plane.apply(&lab, &slice("web", "wk1", true));
    tor_hops(&tor, &prefix, &["10.99.1.2"], "the tor learns it again");
    plane.kubectl(&["delete", "service", "web", "-n", "shop"]);
    tor_hops(&tor, &prefix, &[], "the tor loses the deleted Service's address");
    let shown = uplink.cli(&["show", "running-config"]).unwrap_or_default();
    assert!(!shown.contains("kubernetes:Service/shop/web"), "{shown}");
}
