//! The Kubernetes source against a real control plane: etcd and kube-apiserver built from their
//! Go modules at the releases `k8s/testenv/go.mod` pins (`make testenv`), with generated
//! certificates, a ServiceAccount token and RBAC (deploy/kubernetes/rbac.yaml), in a namespace
//! of their own that the node reaches over a link, as a node reaches its cluster's API. FRR is
//! the node's ToR.

mod common;
use common::*;
use std::time::{Duration, Instant};

const UP: Duration = Duration::from_secs(60);

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
/// FRR once an endpoint is ready, and keeps it when a Service of the same home slot comes; a
/// Node label change moves the node out of an advertisement's `node_selectors` and back;
/// `externalTrafficPolicy: Local` with the only ready endpoint on another node withdraws it
/// from this node; deleting the Service withdraws it. Then the node's network policies from
/// the API and their kubernetes-nmstate objects ([`network_policies_from_the_api`]).
#[test]
fn a_service_from_the_api_gets_its_address_and_reaches_the_tor() {
    let mut lab = Lab::new("k8s");
    let control = lab.ns("api");
    let node = lab.ns("node");
    let tor_ns = lab.ns("tor");
    lab.link(&control, &[&format!("{API_ADDRESS}/24")], &node, &["10.99.0.2/24"]);
    let (to_tor, _) = lab.link(&node, &["10.99.1.2/24"], &tor_ns, &["10.99.1.1/24"]);
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
    // Policies go through nmstate's kernel mode here (the host test tier has no
    // NetworkManager in this namespace; daemon/tests/netconf.rs drives a real one).
    let state_dir = lab.path("wk1/state");
    let config = format!(
        "{}\n[network]\nbackend = \"kernel\"\nstate_dir = \"{}\"\nprobes = {{ timeout = \"3s\", pre_timeout = \"2s\", interval = \"500ms\" }}\n",
        node_config(),
        state_dir.display()
    );
    let uplink = Uplink::start(&mut lab, &node, "wk1", &config);
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
    // The events name the Service by its uid, as `kubectl describe` finds them.
    let uid =
        plane.kubectl(&["get", "service", "web", "-n", "shop", "-o", "jsonpath={.metadata.uid}"]);
    let named = plane.kubectl(&[
        "get",
        "events",
        "-n",
        "shop",
        "--field-selector",
        "involvedObject.name=web,reason=IPAllocated",
        "-o",
        "jsonpath={.items[*].involvedObject.uid}",
    ]);
    assert!(!uid.is_empty() && named.split(' ').all(|u| u == uid), "{named} for uid {uid}");

    // A Service keeps its address when another that sorts before it and hashes to the same
    // slot comes: its status is what the allocation keeps, as MetalLB keeps it (without, the
    // newcomer would take the slot and move web).
    let home =
        |name: &str| uplink::announce::allocate::fnv1a64(format!("shop/{name}").as_bytes()) % 16;
    let rival = (0..1000)
        .map(|i| format!("a{i}"))
        .find(|name| home(name) == home("web"))
        .expect("a name of web's home slot among a0..a999");
    plane
        .apply(&lab, &format!("{}---\n{}", service(&rival, "Cluster"), slice(&rival, "wk1", true)));
    let theirs =
        wait_for("the rival's status.loadBalancer.ingress", UP, || match ingress(&plane, &rival) {
            a if a.is_empty() => Err("none yet".to_string()),
            a => Ok(a),
        });
    assert_ne!(theirs, address, "{rival} and web");
    assert_eq!(ingress(&plane, "web"), address, "web kept its address when {rival} came");
    tor_hops(&tor, &format!("{theirs}/32"), &["10.99.1.2"], "the tor learns the rival's address");
    tor_hops(&tor, &prefix, &["10.99.1.2"], "web's address stays on the tor");
    plane.kubectl(&["delete", "service", &rival, "-n", "shop"]);
    tor_hops(&tor, &format!("{theirs}/32"), &[], "the tor loses the deleted rival's address");

    // The Node's label moves the node out of the advertisement's nodeSelectors, and back.
    plane.kubectl(&["label", "node", "wk1", "rack=r2", "--overwrite"]);
    tor_hops(&tor, &prefix, &[], "the tor loses the address when the node leaves rack r1");
    plane.kubectl(&["label", "node", "wk1", "rack=r1", "--overwrite"]);
    tor_hops(&tor, &prefix, &["10.99.1.2"], "the tor learns it again in rack r1");

    // The Node's NetworkUnavailable condition (its network plugin's routes not set up)
    // withdraws the address, as MetalLB's speaker does; cleared, the address comes back.
    let network = |status: &str| {
        format!(
            r#"{{"status":{{"conditions":[{{"type":"NetworkUnavailable","status":"{status}","reason":"Test","message":"set by the test","lastTransitionTime":"2026-12-06T09:00:00Z","lastHeartbeatTime":"2026-12-06T09:00:00Z"}}]}}}}"#
        )
    };
    let patch_status = ["patch", "node", "wk1", "--subresource=status", "--type=merge", "-p"];
    plane.kubectl(&[&patch_status[..], &[network("True").as_str()]].concat());
    tor_hops(
        &tor,
        &prefix,
        &[],
        "the tor loses the address while the node's network is unavailable",
    );
    plane.kubectl(&[&patch_status[..], &[network("False").as_str()]].concat());
    tor_hops(
        &tor,
        &prefix,
        &["10.99.1.2"],
        "the tor learns it again once the network is available",
    );

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
    // Deleted by hand, the object is made again at the next change of the session (its write
    // finds it gone: this node's objects are listed again).
    plane.kubectl(&[
        "delete",
        "bgpsessionstates",
        "-n",
        "metallb-system",
        "-l",
        "frrk8s.metallb.io/node=wk1",
    ]);
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

    network_policies_from_the_api(&lab, &plane, &uplink, &to_tor);
}

/// kubernetes-nmstate's objects for an NNCP read from the API: the node's enactment as an NNCE
/// that says what `uplink show network enactments` says, and the policy's conditions counted
/// from it; a policy that fails on the node is rolled back, Failing, and refuses no reload; a
/// policy no node selects is Ignored; a deleted policy's NNCE goes.
fn network_policies_from_the_api(lab: &Lab, plane: &ControlPlane, uplink: &Uplink, to_tor: &str) {
    let policy = |name: &str, rack: &str, addresses: &[&str]| {
        let addresses: Vec<String> =
            addresses.iter().map(|a| format!("{{ip: {a}, prefix-length: 24}}")).collect();
        format!(
            "apiVersion: nmstate.io/v1\nkind: NodeNetworkConfigurationPolicy\nmetadata: {{name: {name}}}\nspec:\n  nodeSelector: {{rack: {rack}}}\n  desiredState:\n    interfaces:\n    - name: {to_tor}\n      type: ethernet\n      state: up\n      ipv4: {{enabled: true, dhcp: false, address: [{}]}}\n",
            addresses.join(", ")
        )
    };
    let true_condition = |kind: &str, name: &str| {
        plane.try_kubectl(&[
            "get",
            kind,
            name,
            "-o",
            "jsonpath={.status.conditions[?(@.status==\"True\")].type}/{.status.conditions[?(@.status==\"True\")].reason}: {.status.conditions[?(@.status==\"True\")].message}",
        ])
    };
    // A second address on the tor link: applied, its probes pass.
    plane.apply(lab, &policy("second-address", "r1", &["10.99.1.2", "10.99.1.3"]));
    let nnce = "wk1.second-address";
    wait_for("the enactment of second-address", UP, || match true_condition("nnce", nnce) {
        Ok(c) if c.starts_with("Available/SuccessfullyConfigured: ") => Ok(()),
        other => Err(format!("{other:?}; uplink log:\n{}", lab.dump_logs())),
    });
    let out = uplink.ns.run(&[
        uplink_bin(),
        "show",
        "network",
        "enactments",
        "--json",
        "--config",
        uplink.config.to_str().unwrap(),
    ]);
    let enactments: serde_json::Value = serde_json::from_str(&out).unwrap();
    let file = enactments
        .as_array()
        .and_then(|all| all.iter().find(|e| e["policy"] == "second-address"))
        .cloned()
        .unwrap_or_default();
    assert_eq!(file["status"], "Available", "{out}");
    let object: serde_json::Value =
        serde_json::from_str(&plane.kubectl(&["get", "nnce", nnce, "-o", "json"])).unwrap();
    let status = &object["status"];
    assert_eq!(
        status["desiredState"], file["desired_state"],
        "the NNCE's desired state is the enactment's"
    );
    let message = status["conditions"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["type"] == "Available"))
        .map(|c| c["message"].clone())
        .unwrap_or_default();
    assert_eq!(message, file["message"], "{object}");
    let labels = &object["metadata"]["labels"];
    assert_eq!(labels["nmstate.io/node"], "wk1", "{object}");
    assert_eq!(labels["nmstate.io/policy"], "second-address", "{object}");
    assert_eq!(object["metadata"]["ownerReferences"][0]["kind"], "Node", "{object}");
    assert!(status["policyGeneration"].as_i64().is_some(), "{object}");
    assert!(uplink.ns.run(&["ip", "-4", "addr", "show", to_tor]).contains("10.99.1.3/24"));
    wait_for("the policy's conditions", UP, || match true_condition("nncp", "second-address") {
        Ok(c) if c == "Available/SuccessfullyConfigured: 1/1 nodes successfully configured" => {
            Ok(())
        }
        other => Err(format!("{other:?}")),
    });

    // A change of the API's objects that leaves the network's config as it was (a new Service)
    // reloads without reading the node's network again for every policy (docs/network.md).
    let log = lab.path("wk1.log");
    let count =
        |what: &str| std::fs::read_to_string(&log).unwrap_or_default().matches(what).count();
    let looked = "network: applying the selected policies";
    let (reloads, looks) = (count("reload: applied"), count(looked));
    assert!(looks > 0, "the policy was applied by a reload that looked: {}", lab.dump_logs());
    plane.apply(lab, &service("untouched", "Cluster"));
    wait_for("the reload of a new Service", UP, || {
        let now = count("reload: applied");
        (now > reloads).then_some(()).ok_or(format!("{now} reloads applied"))
    });
    assert_eq!(count(looked), looks, "{}", lab.dump_logs());
    // An operator's reload looks, and finds the policy in place (nmstate's kernel mode reports
    // no `dhcp: false`, which read as drift): it is not applied again.
    let (applied, in_place) = ("network: applying policy", "network: policy already in place");
    let (applies, found) = (count(applied), count(in_place));
    uplink.cli(&["reload"]).unwrap_or_else(|e| panic!("uplink reload: {e}"));
    wait_for("the operator's reload looks at the policy", UP, || {
        let now = count(in_place);
        (now > found).then_some(()).ok_or(format!("{now} found in place; {}", lab.dump_logs()))
    });
    assert_eq!(count(applied), applies, "{}", lab.dump_logs());

    // A deleted policy's enactment goes (before the next policy: one interface may be in one
    // selected policy only).
    plane.kubectl(&["delete", "nncp", "second-address"]);
    wait_for("the deleted policy's enactment goes", UP, || {
        match plane.try_kubectl(&["get", "nnce", nnce]) {
            Err(e) if e.contains("NotFound") => Ok(()),
            other => Err(format!("{other:?}")),
        }
    });

    // Renumbering the link off the tor's subnet fails (nmstate's kernel mode does not verify
    // it, or the probe of the BGP neighbor fails after it): rolled back, Failing on the node
    // and Degraded on the policy, and no reload is refused for it.
    plane.apply(lab, &policy("renumbered", "r1", &["10.99.9.2"]));
    wait_for("the enactment of renumbered", UP, || {
        match true_condition("nnce", "wk1.renumbered") {
            Ok(c) if c.starts_with("Failing/FailedToConfigure: ") && c.contains("rolled back") => {
                Ok(())
            }
            other => Err(format!("{other:?}")),
        }
    });
    wait_for("the failed policy's conditions", UP, || match true_condition("nncp", "renumbered") {
        Ok(c) if c == "Degraded/FailedToConfigure: 1/1 nodes failed to configure" => Ok(()),
        other => Err(format!("{other:?}")),
    });
    let addresses = uplink.ns.run(&["ip", "-4", "addr", "show", to_tor]);
    assert!(
        addresses.contains("10.99.1.2/24") && !addresses.contains("10.99.9.2"),
        "not rolled back: {addresses}"
    );
    let health = uplink.json(&["show", "kubernetes"]).unwrap();
    assert!(
        health["last_reload"].is_null(),
        "a failing policy from the API refused the reload: {health}"
    );

    // A policy for another rack: no enactment, Ignored.
    plane.apply(lab, &policy("elsewhere", "r9", &["10.99.1.2"]));
    wait_for("the unselected policy's conditions", UP, || {
        match true_condition("nncp", "elsewhere") {
            Ok(c) if c == "Ignored/NoMatchingNode: Policy does not match any node" => Ok(()),
            other => Err(format!("{other:?}")),
        }
    });
    assert!(plane.try_kubectl(&["get", "nnce", "wk1.elsewhere"]).is_err());
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
///   retried without a storm, routing goes on, and the status is written once the role is back;
/// - a watch renewed from a revision etcd compacted: 410 Gone, listed again, no UPDATE, no
///   session reset.
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
            "[node]\nname = \"{name}\"\n\n[kubernetes]\nkubeconfig = \"kubeconfig\"\nwatch_timeout = \"3s\"\n\n{neighbors}"
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
    // Each node writes once what it has not read back: a write the config has read since is
    // not made again (no write succeeds while nothing changes).
    let writes = |node: &Uplink| {
        node.json(&["show", "kubernetes"]).unwrap()["status_writes"]["succeeded"].as_u64()
    };
    let written = (writes(&node1), writes(&node2));
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(version("web"), settled, "the Service keeps changing: two writers fight");
    assert_eq!((writes(&node1), writes(&node2)), written, "a node writes the status again");
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
    // Its watches fail, and the probe of `/readyz` finds the server away.
    wait_for("wk1 says the API is away", UP, || {
        let v = node1.json(&["show", "kubernetes"])?;
        (v["stale"] == true && v["server_not_ready_since"].is_u64())
            .then_some(())
            .ok_or_else(|| v.to_string())
    });
    std::thread::sleep(Duration::from_secs(30));
    tor_hops(&tor, &prefix, &["10.99.1.2", "10.99.3.2"], "the tor keeps both next hops");
    assert_eq!(
        (updates("10.99.1.2"), updates("10.99.3.2")),
        before,
        "UPDATEs while the API was away"
    );
    plane.start_apiserver(&mut lab);
    // The kinds' back-off has grown to 16-30 s by now: the probe, not their next retry, finds
    // the server back.
    let ready = Instant::now();
    for node in [&node1, &node2] {
        wait_for("the node lists again and is current", UP, || {
            let v = node.json(&["show", "kubernetes"])?;
            (v["stale"] == false && v["server_not_ready_since"].is_null())
                .then_some(())
                .ok_or_else(|| v.to_string())
        });
    }
    let current = ready.elapsed();
    assert!(
        current < Duration::from_secs(10),
        "the nodes were current {current:?} after the apiserver was ready: the probe did not wake the watches"
    );
    assert_eq!((updates("10.99.1.2"), updates("10.99.3.2")), before, "the relist sent UPDATEs");

    // wk1's connections to the API server carry TCP keepalive (as client-go's do): a watch on
    // a connection whose far end went silent fails in 25 s, whatever the watch's timeout.
    let api_sockets = wk1.run(&["ss", "-tnoH", "state", "established", "dst", API_ADDRESS]);
    assert!(
        !api_sockets.trim().is_empty()
            && api_sockets.lines().all(|socket| socket.contains("timer:(keepalive")),
        "wk1's connections to the API server without keepalive:\n{api_sockets}"
    );
    // wk1 cut off from the API while the Service is deleted: it says it is stale, and keeps
    // what it announced.
    wk1.run(&["ip", "link", "set", &wk1_api_link, "down"]);
    plane.kubectl(&["delete", "service", "web", "-n", "shop"]);
    tor_hops(&tor, &prefix, &["10.99.1.2"], "wk2 withdraws; wk1, cut off, keeps announcing");
    wait_for("wk1 says it cannot see the API (stale)", UP, || {
        let v = node1.json(&["show", "kubernetes"])?;
        (v["stale"] == true).then_some(()).ok_or_else(|| v.to_string())
    });
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

    // A watch renewed from a resource version etcd has compacted away: 410 Gone, listed again,
    // quietly. The apiserver returns without its watch cache (a watch then reads etcd, which
    // answers a compacted revision with 410) and compacting every 5 s; the nodes renew their
    // watches every 3 s (`watch_timeout`); writes move etcd's revision on.
    let before = (updates("10.99.1.2"), updates("10.99.3.2"));
    // FRR's counts of the session's establishments and drops: a reset moves them. (Its
    // `bgpTimerUpEstablishedEpoch` is wall clock less monotonic uptime, in whole seconds, and
    // moves by one between two reads of one session.)
    let up_since = |peer: &str| {
        let n = &tor.json(&format!("show bgp neighbors {peer} json"))[peer];
        (n["connectionsEstablished"].as_u64(), n["connectionsDropped"].as_u64())
    };
    let sessions = (up_since("10.99.1.2"), up_since("10.99.3.2"));
    assert!(sessions.0 .0.is_some() && sessions.1 .0.is_some(), "{sessions:?}");
    lab.stop("kube-apiserver");
    plane.start_apiserver_with(&mut lab, &["--watch-cache=false", "--etcd-compaction-interval=5s"]);
    let mut writes = 0;
    let expired = wait_for("a watch renewal answered 410 Gone", Duration::from_secs(120), || {
        writes += 1;
        let _ =
            plane.try_kubectl(&["create", "configmap", &format!("tick-{writes}"), "-n", "shop"]);
        let v = node1.json(&["show", "kubernetes"])?;
        v["kinds"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|k| k["last_failure"].as_str())
            .find(|failure| failure.contains("Expired"))
            .map(str::to_string)
            .ok_or_else(|| v.to_string())
    });
    for node in [&node1, &node2] {
        wait_for("the node lists again after the 410 and is current", UP, || {
            let v = node.json(&["show", "kubernetes"])?;
            (v["stale"] == false).then_some(()).ok_or_else(|| v.to_string())
        });
    }
    tor_hops(&tor, &api_prefix, &["10.99.1.2", "10.99.3.2"], "the tor keeps both next hops");
    assert_eq!(
        (updates("10.99.1.2"), updates("10.99.3.2")),
        before,
        "the 410's relist sent UPDATEs: {expired}"
    );
    assert_eq!((up_since("10.99.1.2"), up_since("10.99.3.2")), sessions, "a session was reset");
}

/// Layer 2 mode from the API, on two nodes and a client on one bridge with the API server:
/// the nodes find each other by the Nodes' `InternalIP` addresses and share the key of
/// MetalLB's `memberlist` Secret (`[layer2]` names neither); the node that answers for a
/// Service writes MetalLB's `ServiceL2Status` (upstream's labels and status) and tells the
/// Service `nodeAssigned` with protocol "layer2"; when that node's
/// link is cut (no goodbye, no API either) the other node takes the address, writes its own
/// status and deletes the cut node's; back, the first node takes it again and exactly one
/// status remains, its own.
#[test]
fn layer2_mode_writes_servicel2status_from_the_answering_node() {
    require_tool("arping");
    let mut lab = Lab::new("k8s-l2");
    let lan = lab.ns("lan");
    lan.run(&["ip", "link", "add", "br0", "type", "bridge"]);
    lan.run(&["ip", "link", "set", "br0", "up"]);
    let on_bridge = |lab: &mut Lab, ns: &Ns, address: &str| {
        let (interface, port) = lab.link(ns, &[&format!("{address}/24")], &lan, &[]);
        lan.run(&["ip", "link", "set", &port, "master", "br0"]);
        interface
    };
    let control = lab.ns("api");
    on_bridge(&mut lab, &control, API_ADDRESS);
    let client = lab.ns("client");
    let client_if = on_bridge(&mut lab, &client, "10.99.0.2");
    let nodes = [("wk1", "10.99.0.11"), ("wk2", "10.99.0.12")];
    let mut interfaces = Vec::new();
    let mut namespaces = Vec::new();
    for (name, address) in nodes {
        let ns = lab.ns(name);
        interfaces.push(on_bridge(&mut lab, &ns, address));
        ns.run(&["sysctl", "-qw", "net.ipv4.conf.all.arp_ignore=1"]);
        namespaces.push(ns);
    }
    let plane = ControlPlane::start(&mut lab, &control, &[]);
    plane.kubectl(&["create", "namespace", "shop"]);
    plane.kubectl(&["create", "namespace", "metallb-system"]);
    plane.install_crds();
    plane.apply(
        &lab,
        "apiVersion: v1\nkind: Node\nmetadata: {name: wk1}\n---\napiVersion: v1\nkind: Node\nmetadata: {name: wk2}\n---\napiVersion: metallb.io/v1beta1\nkind: IPAddressPool\nmetadata: {name: lan, namespace: metallb-system}\nspec:\n  addresses: [10.99.0.100/30]\n---\napiVersion: metallb.io/v1beta1\nkind: L2Advertisement\nmetadata: {name: lan, namespace: metallb-system}\nspec:\n  ipAddressPools: [lan]\n",
    );
    // The members to join by: the Nodes' InternalIP addresses, as the kubelet reports them.
    for (name, address) in nodes {
        let status = format!(
            "{{\"status\":{{\"addresses\":[{{\"type\":\"InternalIP\",\"address\":\"{address}\"}}]}}}}"
        );
        plane.kubectl(&[
            "patch",
            "node",
            name,
            "--subresource=status",
            "--type=merge",
            "-p",
            &status,
        ]);
    }
    plane.kubectl(&[
        "create",
        "secret",
        "generic",
        "memberlist",
        "-n",
        "metallb-system",
        "--from-literal=secretkey=the fleet's layer 2 membership key",
    ]);
    let kubeconfig = plane.uplink_kubeconfig(API_ADDRESS);
    let mut uplinks = Vec::new();
    for ((name, address), ns) in nodes.iter().zip(&namespaces) {
        let dir = lab.path(name);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("kubeconfig"), &kubeconfig).unwrap();
        let config = format!(
            "[node]\nname = \"{name}\"\n\n[kubernetes]\nkubeconfig = \"kubeconfig\"\n\n[layer2]\naddress = \"{address}\"\ndetection = \"500ms\"\n"
        );
        uplinks.push(Uplink::start(&mut lab, ns, name, &config));
    }
    plane.apply(&lab, &format!("{}---\n{}", service("web", "Cluster"), slice("web", "wk1", true)));
    let address =
        wait_for("status.loadBalancer.ingress of shop/web", UP, || match ingress(&plane, "web") {
            a if a.is_empty() => Err("none yet".to_string()),
            a => Ok(a),
        });
    // Who answers, as both nodes say.
    let answering = |uplink: &Uplink| -> Result<String, String> {
        let status = uplink.json(&["show", "l2"])?;
        let services = status["services"].as_array().cloned().unwrap_or_default();
        let web = services.iter().find(|s| s["service"] == "shop/web");
        match web.and_then(|s| s["answering"].as_str()) {
            Some(node) if status["not_answering"].is_null() => Ok(node.to_string()),
            _ => Err(format!("{status}")),
        }
    };
    let owner = wait_for("both nodes agree on who answers", UP, || {
        let (a, b) = (answering(&uplinks[0])?, answering(&uplinks[1])?);
        (a == b).then_some(a.clone()).ok_or(format!("wk1 says {a}, wk2 says {b}"))
    });
    for uplink in &uplinks {
        let membership = &uplink.json(&["show", "l2"]).unwrap()["membership"];
        assert_eq!(membership["members_from"], "the API's Nodes", "{membership}");
        assert_eq!(membership["key_from"], "MetalLB's memberlist Secret", "{membership}");
        assert_eq!(membership["alive"].as_object().map(|a| a.len()), Some(2), "{membership}");
    }
    let index = nodes.iter().position(|(n, _)| *n == owner).unwrap();
    let other = nodes[1 - index].0;
    let mac = |i: usize| {
        namespaces[i].run(&["cat", &format!("/sys/class/net/{}/address", interfaces[i])])
    };
    let arp = || {
        let (_, out) =
            client.try_run(&["arping", "-I", &client_if, "-c", "2", "-w", "2", &address]);
        out.to_lowercase()
    };
    let owner_mac = mac(index).trim().to_string();
    wait_for("the client's ARP answered by the owner", UP, || {
        let said = arp();
        said.contains(&owner_mac).then_some(()).ok_or(said)
    });

    // kubectl sees MetalLB's object: exactly one, from the answering node.
    let statuses = || {
        plane.kubectl(&[
            "get",
            "servicel2statuses",
            "-n",
            "metallb-system",
            "-o",
            "jsonpath={range .items[*]}{.metadata.labels.metallb\\.io/node} {.metadata.labels.metallb\\.io/service-namespace}/{.metadata.labels.metallb\\.io/service-name}: {.status.node} {.status.serviceNamespace}/{.status.serviceName}{\"\\n\"}{end}",
        ])
    };
    let only = |node: &str| format!("{node} shop/web: {node} shop/web");
    wait_for("one ServiceL2Status, the owner's", UP, || {
        let s = statuses();
        (s.trim() == only(&owner)).then_some(()).ok_or(s)
    });
    let assigned = |node: &str| {
        format!("nodeAssigned: announcing from node \"{node}\" with protocol \"layer2\"")
    };
    wait_for("the Service's layer 2 event", UP, || {
        let events = events(&plane);
        events.contains(&assigned(&owner)).then_some(()).ok_or(events)
    });
    let bgp = events(&plane);
    assert!(
        !bgp.contains("notAnnounced"),
        "no BGP advertisement is not news in layer 2 mode: {bgp}"
    );

    // The owner's link cut: the other node answers, writes its status and deletes the cut
    // node's (which cannot reach the API to do it).
    namespaces[index].run(&["ip", "link", "set", &interfaces[index], "down"]);
    let other_mac = mac(1 - index).trim().to_string();
    wait_for("the client's ARP answered by the other node", UP, || {
        let said = arp();
        said.contains(&other_mac).then_some(()).ok_or(said)
    });
    wait_for("one ServiceL2Status, the new owner's", UP, || {
        let s = statuses();
        (s.trim() == only(other)).then_some(()).ok_or(s)
    });
    wait_for("the new owner's event", UP, || {
        let events = events(&plane);
        events.contains(&assigned(other)).then_some(()).ok_or(events)
    });

    // Back: the first node ranks first again, and the objects follow.
    namespaces[index].run(&["ip", "link", "set", &interfaces[index], "up"]);
    wait_for("one ServiceL2Status, the first owner's again", UP, || {
        let s = statuses();
        (s.trim() == only(&owner)).then_some(()).ok_or(s)
    });
    assert_eq!(answering(&uplinks[1 - index]).as_deref(), Ok(owner.as_str()));

    // The Service deleted: its status goes.
    plane.kubectl(&["delete", "service", "web", "-n", "shop"]);
    wait_for("no ServiceL2Status once the Service is gone", UP, || {
        let s = statuses();
        s.trim().is_empty().then_some(()).ok_or(s)
    });
    drop(uplinks);
}
