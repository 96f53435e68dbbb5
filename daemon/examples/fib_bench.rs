//! Drives uplink's FIB writer alone, the way the RIB tasks do, and times it: install COUNT /24s
//! with ECMP next hops, wait until the kernel has them, then remove them. Run it inside a
//! network namespace whose next hops are connected (bench/fib.sh sets that up).
//!
//! usage: fib_bench COUNT ECMP GATEWAY_BASE   e.g. fib_bench 100000 4 10.99.0.2
//! prints: install_seconds remove_seconds

use std::net::Ipv4Addr;
use std::time::Instant;
use uplink::fib::{self, FibInstanceConfig};
use uplink::fib::{NextHop, RouteBatchBuilder};

/// Changes per message to the writer, like one RIB command's worth.
const CHUNK: usize = 10_000;

fn prefix(i: usize) -> ipnet::IpNet {
    // 16.0.0.0/24, 16.0.1.0/24, ...: up to 3.8 million distinct /24s.
    let n = 16u32 * (1 << 24) + (i as u32) * 256;
    ipnet::IpNet::V4(ipnet::Ipv4Net::new(Ipv4Addr::from(n), 24).unwrap())
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let count: usize = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(100_000);
    let ecmp: u32 = args.get(2).and_then(|a| a.parse().ok()).unwrap_or(1);
    let base: Ipv4Addr =
        args.get(3).and_then(|a| a.parse().ok()).unwrap_or(Ipv4Addr::new(10, 99, 0, 2));
    let hops: Vec<NextHop> =
        (0..ecmp).map(|k| NextHop::V4(Ipv4Addr::from(u32::from(base) + k))).collect();
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    runtime.block_on(async move {
        let fib = fib::start(
            vec![FibInstanceConfig {
                vrf: String::new(),
                install: true,
                table: None,
                metric: 20,
                leaked_from: None,
            }],
            &uplink::config::FibConfig { nexthop_objects: true, nexthop_compat_mode: false },
            false,
        )
        .unwrap();
        fib.flush().await.unwrap(); // the startup reconcile is not part of the measurement
        let sender = fib.sender("").unwrap();
        let mut timings = vec![];
        for install in [true, false] {
            let start = Instant::now();
            let mut i = 0;
            while i < count {
                let end = (i + CHUNK).min(count);
                let mut changes = RouteBatchBuilder::new();
                for n in i..end {
                    match install {
                        true => changes.change(prefix(n), &[], &hops),
                        false => changes.change(prefix(n), &hops, &[]),
                    }
                }
                for batch in changes.take() {
                    sender.send(batch).await;
                }
                i = end;
            }
            fib.flush().await.unwrap();
            timings.push(start.elapsed().as_secs_f64());
        }
        println!("{:.3} {:.3}", timings[0], timings[1]);
    });
}
