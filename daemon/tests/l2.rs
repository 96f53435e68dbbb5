//! Layer 2 mode (MetalLB's `L2Advertisement`) between real uplink daemons: three nodes and a
//! client on one bridge, each node with a small HTTP server on the addresses (on its
//! loopback, the kernel told not to answer ARP for them), the client asking with `arping`,
//! `ndisc6` and `curl`. The nodes agree on who answers through their membership (SWIM over
//! UDP, a shared key) and move an address when its node's links are cut.

mod common;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use common::*;

const VIP: &str = "10.0.0.100";
const VIP6: &str = "fd00::100";
/// ETP Local, its endpoint first on wk2.
const LOCAL_VIP: &str = "10.0.0.101";
const NODES: [(&str, &str, &str); 3] = [
    ("wk1", "10.0.0.11", "fd00::11"),
    ("wk2", "10.0.0.12", "fd00::12"),
    ("wk3", "10.0.0.13", "fd00::13"),
];

/// The failover target: from the links cut to the client served by another node.
const FAILOVER: Duration = Duration::from_secs(2);

fn config(node: &str, address: &str, local_endpoint_on: &str) -> String {
    let others: Vec<String> = NODES
        .iter()
        .filter(|(name, _, _)| *name != node)
        .map(|(_, address, _)| format!("\"{address}\""))
        .collect();
    format!(
        r#"
[node]
name = "{node}"

[metrics]
listen = "127.0.0.1:9181"

[layer2]
address = "{address}"
members = [{others}]
secret_file = "memberlist.key"

[[pools]]
name = "lan"
addresses = ["10.0.0.100/31", "fd00::100/127"]

[[services]]
name = "web"
namespace = "shop"
load_balancer_ips = ["{VIP}", "{VIP6}"]
ip_family_policy = "RequireDualStack"

[[services]]
name = "local"
namespace = "shop"
load_balancer_ip = "{LOCAL_VIP}"
traffic_policy = "local"
announce_without_endpoints = false
endpoints = [{{ address = "10.244.9.5", node = "{local_endpoint_on}" }}]

[[l2_advertisements]]
name = "lan"
ip_address_pools = ["lan"]
"#,
        others = others.join(", ")
    )
}

struct Node {
    name: &'static str,
    ns: Ns,
    uplink: Uplink,
    /// Its interface on the bridge, and that interface's Ethernet address.
    interface: String,
    mac: String,
}

/// The Ethernet addresses that answer `arping` for `address` (each reply's sender).
fn arp_macs(client: &Ns, interface: &str, address: &str) -> BTreeSet<String> {
    let (_, out) = client.try_run(&["arping", "-I", interface, "-c", "3", "-w", "3", address]);
    out.lines()
        .filter(|l| l.contains("reply from"))
        .filter_map(|l| Some(l.split('[').nth(1)?.split(']').next()?.to_lowercase()))
        .collect()
}

/// The Ethernet addresses in the Neighbor Advertisements that answer `ndisc6` for `address`.
fn nd_macs(client: &Ns, interface: &str, address: &str) -> BTreeSet<String> {
    let (_, out) =
        client.try_run(&["ndisc6", "-m", "-n", "-r", "3", "-w", "1000", address, interface]);
    out.lines()
        .filter(|l| l.contains("Target link-layer address"))
        .filter_map(|l| l.split_once(':').map(|(_, mac)| mac.trim().to_lowercase()))
        .collect()
}

/// The node whose HTTP server answered a request to `address`, if one did within `timeout`.
fn served_by(client: &Ns, address: &str, timeout: &str) -> Option<String> {
    let url = if address.contains(':') {
        format!("http://[{address}]:8080/node")
    } else {
        format!("http://{address}:8080/node")
    };
    let (ok, out) = client.try_run(&["curl", "-s", "--max-time", timeout, &url]);
    ok.then(|| out.trim().to_string()).filter(|s| !s.is_empty())
}

/// A sample of `node`'s metrics scrape, by its name and labels as written.
fn metric(node: &Node, sample: &str) -> Option<u64> {
    let text = node.ns.run(&["curl", "-s", "http://127.0.0.1:9181/metrics"]);
    text.lines().find_map(|l| l.strip_prefix(sample)?.trim().parse().ok())
}

/// The node `uplink show l2` on `node` says answers for the Service `key`.
fn answering(node: &Node, key: &str) -> Result<String, String> {
    let status = node.uplink.json(&["show", "l2"])?;
    let service = status["services"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|s| s["service"] == key)
        .ok_or_else(|| format!("{key} not in {}'s show l2: {status}", node.name))?;
    service["answering"]
        .as_str()
        .map(str::to_string)
        .ok_or_else(|| format!("nobody answers for {key} on {}: {service}", node.name))
}

/// Every node in `nodes` agrees that `expected` answers for `key`.
fn all_agree(nodes: &[&Node], key: &str, expected: &str) -> Result<(), String> {
    for node in nodes {
        let said = answering(node, key)?;
        if said != expected {
            return Err(format!("{} says {said} answers for {key}, not {expected}", node.name));
        }
    }
    Ok(())
}

/// Requests `address` from the client every 50 ms while `during` runs and a second after,
/// each with a one-second timeout; what each got, in order: the node that served it, or
/// `FAILED` and why.
fn request_loop(client: &Ns, address: &str, during: impl FnOnce()) -> Vec<String> {
    let script = format!(
        "import os, sys, time, urllib.request\n\
         while not os.path.exists(sys.argv[1]):\n\
         \x20   try: print(urllib.request.urlopen('http://{address}:8080/node', timeout=1).read().decode().strip(), flush=True)\n\
         \x20   except Exception as e: print('FAILED', e, flush=True)\n\
         \x20   time.sleep(0.05)\n"
    );
    let scratch = tempfile::tempdir().unwrap();
    let flag = scratch.path().join("done");
    // The loop ends when the flag is written, also when `during` panics.
    struct EndLoop<'a>(&'a std::path::Path);
    impl Drop for EndLoop<'_> {
        fn drop(&mut self) {
            let _ = std::fs::write(self.0, "");
        }
    }
    std::thread::scope(|scope| {
        let looping =
            scope.spawn(|| client.run(&["python3", "-c", &script, flag.to_str().unwrap()]));
        let end = EndLoop(&flag);
        std::thread::sleep(Duration::from_millis(500));
        during();
        std::thread::sleep(Duration::from_secs(1));
        drop(end);
        looping.join().unwrap().lines().map(str::to_string).collect()
    })
}

/// `requests` (from [`request_loop`]) the first served by `from` and the last by `to`, and
/// none failed for want of a node that answers: no timeout, no refusal. One request may be
/// reset, and only by the move itself: a connection that `from` accepted just before `to`'s
/// gratuitous ARP moved the client sends its next segment to `to`, which knows no such
/// connection (RFC 9293 section 3.5.2). That is layer 2's nature, MetalLB's too; the request after
/// it must be served by `to`.
fn moved_without_a_failed_request(requests: &[String], from: &str, to: &str) {
    let failed: Vec<(usize, &String)> =
        requests.iter().enumerate().filter(|(_, r)| r.starts_with("FAILED")).collect();
    let reset_by_the_move = |(i, request): &(usize, &String)| {
        request.contains("Connection reset by peer")
            && requests.get(i + 1).map(String::as_str) == Some(to)
    };
    assert!(
        failed.len() <= 1 && failed.iter().all(reset_by_the_move),
        "{} of {} requests failed: {requests:?}",
        failed.len(),
        requests.len()
    );
    assert_eq!(requests.first().map(String::as_str), Some(from), "{requests:?}");
    assert_eq!(requests.last().map(String::as_str), Some(to), "{requests:?}");
}

#[test]
fn one_node_answers_for_each_address_and_another_takes_over_when_its_links_are_cut() {
    require_tool("arping");
    require_tool("ndisc6");
    require_tool("curl");
    let mut lab = Lab::new("l2");
    let lan = lab.ns("lan");
    lan.run(&["ip", "link", "add", "br0", "type", "bridge"]);
    lan.run(&["ip", "link", "set", "br0", "up"]);
    let client = lab.ns("client");
    let (client_if, client_port) = lab.link(&client, &["10.0.0.1/24", "fd00::1/64"], &lan, &[]);
    lan.run(&["ip", "link", "set", &client_port, "master", "br0"]);

    let mut nodes: Vec<Node> = Vec::new();
    for (name, address, address6) in NODES {
        let ns = lab.ns(name);
        let (interface, port) =
            lab.link(&ns, &[&format!("{address}/24"), &format!("{address6}/64")], &lan, &[]);
        lan.run(&["ip", "link", "set", &port, "master", "br0"]);
        // The addresses are the node's own (its HTTP server listens there), on its loopback;
        // the kernel answers ARP only for addresses of the interface asked on
        // (docs/layer2.md): uplink answers for them.
        ns.run(&["sysctl", "-qw", "net.ipv4.conf.all.arp_ignore=1"]);
        ns.run(&["sysctl", "-qw", "net.ipv4.conf.all.arp_announce=2"]);
        for vip in [format!("{VIP}/32"), format!("{LOCAL_VIP}/32"), format!("{VIP6}/128")] {
            ns.run(&["ip", "addr", "add", &vip, "dev", "lo"]);
        }
        let site = lab.path(&format!("{name}-site"));
        std::fs::create_dir_all(&site).unwrap();
        std::fs::write(site.join("node"), name).unwrap();
        let mut http = ns.command("python3");
        http.args([
            "-m",
            "http.server",
            "--bind",
            "::",
            "--directory",
            site.to_str().unwrap(),
            "8080",
        ]);
        lab.spawn(&format!("{name}-http"), http);
        let mac =
            ns.run(&["cat", &format!("/sys/class/net/{interface}/address")]).trim().to_string();
        let dir = lab.path(name);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("memberlist.key"), "a shared secret of the test fleet\n").unwrap();
        let uplink = Uplink::start(&mut lab, &ns, name, &config(name, address, "wk2"));
        nodes.push(Node { name, ns, uplink, interface, mac });
    }
    let all: Vec<&Node> = nodes.iter().collect();
    let node = |name: &str| nodes.iter().find(|n| n.name == name).unwrap();

    // They find each other and agree on who answers (MetalLB's order: sha256 of node and
    // address).
    let first =
        wait_for("the nodes agree on who answers for shop/web", Duration::from_secs(30), || {
            let said = answering(all[0], "shop/web")?;
            all_agree(&all, "shop/web", &said)?;
            for n in &all {
                let alive = n.uplink.json(&["show", "l2"])?["membership"]["alive"]
                    .as_object()
                    .map_or(0, |a| a.len());
                if alive != 3 {
                    return Err(format!("{} sees {alive} alive", n.name));
                }
            }
            Ok(said)
        });
    let owner = node(&first);
    eprintln!("{first} answers for {VIP} and {VIP6} ({})", owner.mac);
    // Exactly one MAC per address, the elected node's, over ARP and NDP; its server answers.
    wait_for("one ARP answer for the address, from its node", Duration::from_secs(10), || {
        let macs = arp_macs(&client, &client_if, VIP);
        (macs == BTreeSet::from([owner.mac.clone()])).then_some(()).ok_or(format!("{macs:?}"))
    });
    wait_for("one NDP answer for the IPv6 address, from its node", Duration::from_secs(10), || {
        let macs = nd_macs(&client, &client_if, VIP6);
        (macs == BTreeSet::from([owner.mac.clone()])).then_some(()).ok_or(format!("{macs:?}"))
    });
    // The advertisement comes from the target address, as Linux answers for an address of
    // its own; ndisc6 (like other tools that match the answer to the question) takes no other.
    let (_, advertisement) =
        client.try_run(&["ndisc6", "-n", "-r", "3", "-w", "1000", VIP6, &client_if]);
    assert!(advertisement.contains(&format!("from {VIP6}")), "{advertisement}");
    assert_eq!(served_by(&client, VIP, "2").as_deref(), Some(first.as_str()));
    assert_eq!(served_by(&client, VIP6, "2").as_deref(), Some(first.as_str()));
    // MetalLB's layer 2 counters, on the node that answers only.
    let requests = format!("metallb_layer2_requests_received{{ip=\"{VIP}\"}}");
    let responses = format!("metallb_layer2_responses_sent{{ip=\"{VIP}\"}}");
    assert!(metric(owner, &requests).is_some_and(|n| n >= 3), "{requests}");
    assert!(metric(owner, &responses).is_some_and(|n| n >= 3), "{responses}");
    let announced = format!(
        "metallb_speaker_announced{{service=\"shop/web\",protocol=\"layer2\",node=\"{first}\",ip=\"{VIP}\"}}"
    );
    assert_eq!(metric(owner, &announced), Some(1), "{announced}");
    for other in all.iter().filter(|n| n.name != first) {
        assert_eq!(
            metric(other, &requests),
            None,
            "{} counts requests it does not answer",
            other.name
        );
    }

    // ETP Local: only wk2, with the ready endpoint, answers; the endpoint moves to wk3 and
    // wk3 takes over.
    wait_for("wk2 answers for the Local Service", Duration::from_secs(10), || {
        all_agree(&all, "shop/local", "wk2")?;
        let macs = arp_macs(&client, &client_if, LOCAL_VIP);
        (macs == BTreeSet::from([node("wk2").mac.clone()])).then_some(()).ok_or(format!("{macs:?}"))
    });
    for (name, address, _) in NODES {
        std::fs::write(&node(name).uplink.config, config(name, address, "wk3")).unwrap();
        node(name).uplink.cli(&["reload"]).unwrap();
    }
    wait_for("wk3 answers for the Local Service", Duration::from_secs(10), || {
        all_agree(&all, "shop/local", "wk3")?;
        let macs = arp_macs(&client, &client_if, LOCAL_VIP);
        (macs == BTreeSet::from([node("wk3").mac.clone()])).then_some(()).ok_or(format!("{macs:?}"))
    });

    // Forged ARP replies and announcements for the address, from the client: nothing moves.
    let forged = format!(
        "import socket\ns = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)\ns.bind(('{client_if}', 0))\n\
         mac = bytes.fromhex('02deadbeef01'); vip = socket.inet_aton('{VIP}')\n\
         for op, to in ((2, bytes.fromhex('ffffffffffff')), (1, bytes.fromhex('ffffffffffff'))):\n\
         \x20   arp = bytes.fromhex('000108000604') + op.to_bytes(2, 'big') + mac + vip + to + vip\n\
         \x20   for _ in range(20): s.send(to + mac + bytes.fromhex('0806') + arp)\n"
    );
    client.run(&["python3", "-c", &forged]);
    std::thread::sleep(Duration::from_secs(1));
    all_agree(&all, "shop/web", &first).unwrap();

    // Membership datagrams under another key: refused and counted, nobody joins.
    let intruder =
        "import hmac, hashlib, socket\ns = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n\
         body = bytes([1]) + b'let me in' * 10\n\
         datagram = body + hmac.new(b'another key entirely', body, hashlib.sha256).digest()\n\
         for a in ('10.0.0.11', '10.0.0.12', '10.0.0.13'): s.sendto(datagram, (a, 7946))\n";
    client.run(&["python3", "-c", intruder]);
    wait_for("the wrong key refused by every node", Duration::from_secs(5), || {
        for n in &all {
            let refused = n.uplink.json(&["show", "l2"])?["membership"]["refused_wrong_key"]
                .as_u64()
                .unwrap_or(0);
            if refused == 0 {
                return Err(format!("{} refused nothing", n.name));
            }
        }
        Ok(())
    });
    assert_eq!(arp_macs(&client, &client_if, VIP), BTreeSet::from([owner.mac.clone()]));

    // The owner's links cut, no goodbye: a request loop sees service from another node
    // within the target, and the client's neighbour entry moved to that node.
    let survivors: Vec<&Node> = all.iter().copied().filter(|n| n.name != first).collect();
    owner.ns.run(&["ip", "link", "set", &owner.interface, "down"]);
    let cut = Instant::now();
    let (took, new_owner) = loop {
        if let Some(by) = served_by(&client, VIP, "0.2") {
            assert_ne!(by, first, "served by the node whose links are cut");
            break (cut.elapsed(), by);
        }
        assert!(cut.elapsed() < Duration::from_secs(20), "no service 20 s after the cut");
    };
    eprintln!("failover: served by {new_owner} {took:?} after {first}'s links were cut");
    assert!(took < FAILOVER, "failover took {took:?} (target {FAILOVER:?})");
    // The other survivor learns the death from the first one's gossip, or its own probe.
    wait_for("the survivors agree", Duration::from_secs(3), || {
        all_agree(&survivors, "shop/web", &new_owner)
    });
    let neighbour = client.run(&["ip", "neigh", "show", VIP, "dev", &client_if]);
    assert!(neighbour.contains(&node(&new_owner).mac), "{neighbour}");
    assert_eq!(arp_macs(&client, &client_if, VIP), BTreeSet::from([node(&new_owner).mac.clone()]));
    let gratuitous = format!("metallb_layer2_gratuitous_sent{{ip=\"{VIP}\"}}");
    assert!(metric(node(&new_owner), &gratuitous).is_some_and(|n| n >= 1), "{gratuitous}");

    // The node comes back: it rejoins, ranks first again, and exactly one node answers.
    owner.ns.run(&["ip", "link", "set", &owner.interface, "up"]);
    wait_for("the returning node answers again, alone", Duration::from_secs(30), || {
        all_agree(&all, "shop/web", &first)?;
        let macs = arp_macs(&client, &client_if, VIP);
        (macs == BTreeSet::from([owner.mac.clone()])).then_some(()).ok_or(format!("{macs:?}"))
    });
    // And it stays so (no flapping): every ARP probe over three seconds sees one MAC.
    for _ in 0..3 {
        assert_eq!(arp_macs(&client, &client_if, VIP), BTreeSet::from([owner.mac.clone()]));
    }
    assert_eq!(served_by(&client, VIP, "2").as_deref(), Some(first.as_str()));

    // A drain moves the address at once, with no request left unanswered (the drained
    // node still serves what reaches it until the new node's gratuitous ARP moves the
    // client); undrained, it takes the address back the same way.
    let requests = request_loop(&client, VIP, || {
        owner.uplink.cli(&["drain", "--no-wait"]).unwrap();
        wait_for("another node answers for the drained one", Duration::from_secs(5), || {
            let said = answering(survivors[0], "shop/web")?;
            (said != first).then_some(()).ok_or(format!("{said} still answers"))
        });
    });
    let taker = answering(survivors[0], "shop/web").unwrap();
    eprintln!("drain: {} requests, {first} to {taker}: {requests:?}", requests.len());
    moved_without_a_failed_request(&requests, &first, &taker);
    let requests = request_loop(&client, VIP, || {
        owner.uplink.cli(&["undrain"]).unwrap();
        wait_for("the undrained node answers again", Duration::from_secs(5), || {
            all_agree(&all, "shop/web", &first)
        });
    });
    moved_without_a_failed_request(&requests, &taker, &first);

    // A graceful stop says goodbye: the address moves with no request unanswered either; started
    // again, the node joins and takes it back.
    let requests = request_loop(&client, VIP, || {
        lab.stop(owner.name);
        wait_for("another node answers for the stopped one", Duration::from_secs(5), || {
            all_agree(&survivors, "shop/web", &taker)
        });
    });
    eprintln!("graceful stop: {} requests, {first} to {taker}", requests.len());
    moved_without_a_failed_request(&requests, &first, &taker);
    owner.uplink.launch(&mut lab);
    wait_for("the restarted node answers again, alone", Duration::from_secs(30), || {
        all_agree(&all, "shop/web", &first)?;
        let macs = arp_macs(&client, &client_if, VIP);
        (macs == BTreeSet::from([owner.mac.clone()])).then_some(()).ok_or(format!("{macs:?}"))
    });

    // Split brain: the owner loses the membership (its datagrams dropped both ways) while
    // its link and its ARP stay up. Seeing fewer than half of the members, it stops
    // answering; the two others take the address; the client sees one MAC, the new owner's.
    let block = "add table inet l2test\n\
        add chain inet l2test in { type filter hook input priority 0; }\n\
        add chain inet l2test out { type filter hook output priority 0; }\n\
        add rule inet l2test in udp dport 7946 drop\n\
        add rule inet l2test out udp dport 7946 drop\n";
    let rules = lab.path("block-membership.nft");
    std::fs::write(&rules, block).unwrap();
    owner.ns.run(&["nft", "-f", rules.to_str().unwrap()]);
    let split_taker = wait_for(
        "another node takes the address from the cut-off one",
        Duration::from_secs(15),
        || {
            let said = answering(survivors[0], "shop/web")?;
            if said == first {
                return Err(format!("{said} still answers"));
            }
            all_agree(&survivors, "shop/web", &said)?;
            let why = owner.uplink.json(&["show", "l2"])?["not_answering"]
                .as_str()
                .unwrap_or("")
                .to_string();
            if !why.contains("fewer than half") {
                return Err(format!("{first} does not hold back: {why:?}"));
            }
            let macs = arp_macs(&client, &client_if, VIP);
            (macs == BTreeSet::from([node(&said).mac.clone()]))
                .then_some(said)
                .ok_or(format!("{macs:?}"))
        },
    );
    for _ in 0..2 {
        assert_eq!(
            arp_macs(&client, &client_if, VIP),
            BTreeSet::from([node(&split_taker).mac.clone()])
        );
    }
    owner.ns.run(&["nft", "delete", "table", "inet", "l2test"]);
    wait_for(
        "the owner back in the membership answers again, alone",
        Duration::from_secs(30),
        || {
            all_agree(&all, "shop/web", &first)?;
            let macs = arp_macs(&client, &client_if, VIP);
            (macs == BTreeSet::from([owner.mac.clone()])).then_some(()).ok_or(format!("{macs:?}"))
        },
    );
}
