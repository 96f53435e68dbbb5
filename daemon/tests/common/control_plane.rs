//! The test control plane: etcd and kube-apiserver built from their Go modules at the releases
//! `k8s/testenv/go.mod` pins (`make testenv`), with generated certificates, a ServiceAccount
//! token and RBAC (deploy/kubernetes/rbac.yaml), in a network namespace of their own; kubectl
//! as a cluster admin. Used by `tests/kubernetes.rs` and the `make bench-k8s` benchmark.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Stdio};
use std::time::Duration;

use super::{wait_for, Lab, Ns};

/// The control plane's address on its link to the node.
pub const API_ADDRESS: &str = "10.99.0.1";

pub fn testenv_bin(name: &str) -> PathBuf {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../k8s/testenv/bin").join(name);
    assert!(
        path.exists(),
        "{} is missing: run `make testenv` (make test does) to build the test control plane",
        path.display()
    );
    path
}

/// etcd and kube-apiserver in `ns`, and kubectl as a cluster admin.
pub struct ControlPlane {
    pub ns: Ns,
    /// Where its certificates, kubeconfigs and etcd data are.
    pub dir: PathBuf,
    pub admin_kubeconfig: PathBuf,
    /// The cluster CA's certificate file, for kubeconfigs.
    pub ca_file: PathBuf,
    /// kube-apiserver's arguments, to start it again.
    pub apiserver_args: Vec<String>,
}

impl ControlPlane {
    /// The control plane, its apiserver reachable at `API_ADDRESS` and at `more_addresses`
    /// (its serving certificate names them all).
    pub fn start(lab: &mut Lab, ns: &Ns, more_addresses: &[&str]) -> ControlPlane {
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
            dir: dir.clone(),
            admin_kubeconfig: dir.join("admin.kubeconfig"),
            ca_file: dir.join("ca.crt"),
            apiserver_args,
        };
        plane.start_apiserver(lab);
        plane
    }

    /// Starts kube-apiserver (again) and waits until it is ready.
    pub fn start_apiserver(&self, lab: &mut Lab) {
        self.start_apiserver_with(lab, &[]);
    }

    /// [`Self::start_apiserver`] with `extra` arguments.
    pub fn start_apiserver_with(&self, lab: &mut Lab, extra: &[&str]) {
        let mut apiserver = self.ns.command(testenv_bin("kube-apiserver").to_str().unwrap());
        apiserver.args(&self.apiserver_args).args(extra);
        lab.spawn("kube-apiserver", apiserver);
        // A slow machine takes a while to build the apiserver's caches: wait for it to say so.
        wait_for("the apiserver is ready", Duration::from_secs(180), || {
            self.try_kubectl(&["get", "--raw", "/readyz"]).map(|_| ())
        });
    }

    pub fn try_kubectl(&self, args: &[&str]) -> Result<String, String> {
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

    pub fn kubectl(&self, args: &[&str]) -> String {
        self.try_kubectl(args).unwrap_or_else(|e| panic!("kubectl {args:?}: {e}"))
    }

    /// `kubectl apply` of `yaml`.
    pub fn apply(&self, lab: &Lab, yaml: &str) {
        let path = lab.path("apply.yaml");
        std::fs::write(&path, yaml).unwrap();
        self.kubectl(&["apply", "-f", path.to_str().unwrap()]);
    }

    /// A kubeconfig for the `uplink` ServiceAccount (RBAC from deploy/kubernetes/rbac.yaml),
    /// with a token from the TokenRequest API, for the apiserver at `address`.
    pub fn uplink_kubeconfig(&self, address: &str) -> String {
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
    pub fn install_crds(&self) {
        self.kubectl(&["apply", "-f", deploy("crds").to_str().unwrap()]);
        self.kubectl(&["wait", "--for", "condition=Established", "--timeout=120s", "crd", "--all"]);
    }
}

/// A file under deploy/kubernetes.
pub fn deploy(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/kubernetes").join(name)
}

/// A kubeconfig for `server`, trusting the CA in `ca_file`, as the `user` lines say.
pub fn kubeconfig(ca_file: &Path, server: &str, user: &str) -> String {
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

impl ControlPlane {
    /// A cluster admin's client on one kept TLS connection (`tests/tools/api_client.py`):
    /// a request's time is the apiserver's, not `curl`'s start and handshake.
    pub fn kept_client(&self) -> KeptClient {
        let file = |name: &str| self.dir.join(name).to_str().unwrap_or_default().to_string();
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/tools/api_client.py");
        let mut child = self
            .ns
            .command("python3")
            .args([script, "https://127.0.0.1:6443"])
            .args([file("ca.crt"), file("admin.crt"), file("admin.key")])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {script}: {e}"));
        let input = child.stdin.take().expect("piped stdin");
        let output = BufReader::new(child.stdout.take().expect("piped stdout"));
        KeptClient { child, input, output }
    }
}

/// A request's times on a [`KeptClient`]: wall clock, seconds since the epoch.
pub struct Timed {
    /// Right before its first byte was written.
    pub sent: f64,
    /// Right after the answer's last byte was read.
    pub answered: f64,
    /// Whether the connection had to be made again for it (its handshake is then in neither
    /// time, but the connection is new).
    pub reconnected: bool,
}

pub struct KeptClient {
    child: Child,
    input: ChildStdin,
    output: BufReader<ChildStdout>,
}

impl KeptClient {
    /// Sends one request and waits for its answer: `Err` with the answer for a status of 300
    /// or more, or with what went wrong.
    pub fn request(
        &mut self,
        method: &str,
        path: &str,
        content_type: &str,
        body: &str,
    ) -> Result<Timed, String> {
        let line = serde_json::json!({
            "method": method, "path": path, "content_type": content_type, "body": body,
        });
        writeln!(self.input, "{line}").map_err(|e| format!("api_client.py: {e}"))?;
        self.input.flush().map_err(|e| format!("api_client.py: {e}"))?;
        let mut answer = String::new();
        match self.output.read_line(&mut answer) {
            Ok(0) => return Err("api_client.py ended (its error is on the test's stderr)".into()),
            Ok(_) => {}
            Err(e) => return Err(format!("api_client.py: {e}")),
        }
        let v: serde_json::Value =
            serde_json::from_str(&answer).map_err(|e| format!("api_client.py: {e}: {answer}"))?;
        let status = v["status"].as_u64().unwrap_or(0);
        if !(200..300).contains(&status) {
            return Err(format!("{method} {path}: {status}: {}", v["body"]));
        }
        let time = |key: &str| v[key].as_f64().ok_or(format!("api_client.py: no {key}: {v}"));
        Ok(Timed {
            sent: time("sent")?,
            answered: time("answered")?,
            reconnected: v["reconnected"] == true,
        })
    }
}

impl Drop for KeptClient {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
