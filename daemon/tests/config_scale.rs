//! How the config path scales with the objects a cluster holds: times `load_with_api` over
//! `SCALE_SERVICES` Services (2,000) with their EndpointSlices, `SCALE_ROUNDS` times (3) with one
//! kept cache — the first load translates everything, the next ones what a reload after no
//! change redoes — and prints the process's RSS. Run by hand: `cargo test --release -p uplink
//! --test config_scale -- --ignored --nocapture`.

use std::path::PathBuf;
use std::time::Instant;

use uplink::config::{load_with_api, ApiObjects, ManifestCache};

fn service(name: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Service\nmetadata:\n  name: {name}\n  namespace: shop\nspec:\n  type: LoadBalancer\n  selector:\n    app: {name}\n  ports:\n  - port: 80\n    targetPort: 8080\n"
    )
}

fn slice(service: &str, index: usize) -> String {
    let endpoints: String = (0..5)
        .map(|k| {
            let n = index * 5 + k;
            format!(
                "- addresses:\n  - 10.{}.{}.{}\n  conditions:\n    ready: true\n  nodeName: n{:03}\n",
                128 + n / 65536,
                n / 256 % 256,
                n % 256,
                n % 500
            )
        })
        .collect();
    format!(
        "apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata:\n  name: {service}-1\n  namespace: shop\n  labels:\n    kubernetes.io/service-name: {service}\naddressType: IPv4\nendpoints:\n{endpoints}ports:\n- port: 8080\n  protocol: TCP\n"
    )
}

fn rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

#[test]
#[ignore]
fn load_with_api_at_a_clusters_size() {
    let services: usize =
        std::env::var("SCALE_SERVICES").ok().and_then(|s| s.parse().ok()).unwrap_or(2000);
    let dir = tempfile::tempdir().unwrap();
    let main = dir.path().join("uplink.toml");
    std::fs::write(
        &main,
        "[node]\nname = \"n001\"\n[kubernetes]\nnamespace = \"metallb-system\"\n[[bgp.routers]]\nasn = 65801\n[[bgp.routers.neighbors]]\naddress = \"172.18.20.1\"\nasn = 65102\n",
    )
    .unwrap();
    let mut objects = vec![
        (
            PathBuf::from("kubernetes:IPAddressPool/metallb-system/vips"),
            "apiVersion: metallb.io/v1beta1\nkind: IPAddressPool\nmetadata:\n  name: vips\n  namespace: metallb-system\nspec:\n  addresses:\n  - 10.200.0.0/16\n".into(),
        ),
        (
            PathBuf::from("kubernetes:BGPAdvertisement/metallb-system/all"),
            "apiVersion: metallb.io/v1beta1\nkind: BGPAdvertisement\nmetadata:\n  name: all\n  namespace: metallb-system\nspec:\n  ipAddressPools:\n  - vips\n".into(),
        ),
    ];
    for i in 0..services {
        let name = format!("s{i:05}");
        objects.push((
            PathBuf::from(format!("kubernetes:Service/shop/{name}")),
            service(&name).into(),
        ));
        objects.push((
            PathBuf::from(format!("kubernetes:EndpointSlice/shop/{name}-1")),
            slice(&name, i).into(),
        ));
    }
    objects.sort();
    let objects = objects.into_iter().map(|(path, text)| (path.into(), text)).collect();
    let api = ApiObjects::new(objects);
    let text: usize = api.iter().map(|(_, t)| t.len()).sum();
    println!("{services} Services: the objects' text {} KiB; RSS {} KiB", text / 1024, rss_kib());
    let mut cache = ManifestCache::default();
    let rounds: usize =
        std::env::var("SCALE_ROUNDS").ok().and_then(|s| s.parse().ok()).unwrap_or(3);
    for round in 0..rounds {
        let started = Instant::now();
        let (config, refused) = load_with_api(&main, &api, &mut cache);
        let config = config.unwrap_or_else(|e| panic!("{e}"));
        assert!(refused.is_empty(), "{refused:?}");
        println!(
            "round {round}: {services} Services: load_with_api {:.1} ms ({} VIPs)",
            started.elapsed().as_secs_f64() * 1000.0,
            config.announce.services.len()
        );
        println!("  RSS {} KiB with the config and the cache", rss_kib());
        drop(config);
    }
}
