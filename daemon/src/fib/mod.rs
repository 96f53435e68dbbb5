//! The FIB writer: the only code in uplink that programs kernel routes (DESIGN.md).
//!
//! Each routing instance's RIB task sends the [`FibChange`]s of its Loc-RIB through a bounded
//! channel ([`FibSender`]); the writer thread batches them into netlink messages (many per
//! `sendmsg`, ACKs matched by sequence number), installs ECMP through kernel nexthop objects and
//! groups (one group per distinct next-hop set, replaced in place), resolves next hops against
//! the kernel's own routes, and reconciles with the kernel: at startup it removes `proto bgp`
//! routes and nexthops uplink does not want, and it restores routes deleted behind its back.
//! A monitor thread feeds it link, address, route and nexthop notifications, minus our echoes.
//!
//! Modules: `msg` (message layouts), `kernel` (sockets), `groups` (nexthop/group refcounts),
//! `resolve` (next-hop reachability), `writer` (the state machine and its thread).

pub mod groups;
pub mod kernel;
pub mod msg;
pub mod resolve;
mod writer;

use crate::bgp::rib::FibChange;
use crate::config::Router;
use ipnet::IpNet;
use serde::Serialize;
use std::net::IpAddr;
use std::sync::Arc;
use tokio::sync::{mpsc, oneshot};
use tracing::{error, warn};
use writer::{Command, Writer};

/// Depth of the writer's channel, in batches: the RIB tasks wait when the kernel is behind.
const CHANNEL_DEPTH: usize = 64;

/// What the writer needs to know of one routing instance (`[[bgp.routers]]`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FibInstanceConfig {
    /// "" for the default VRF.
    pub vrf: String,
    pub install: bool,
    /// Overrides the table: main for the default VRF, else the VRF device's table.
    pub table: Option<u32>,
    pub metric: u32,
}

impl FibInstanceConfig {
    pub fn of(router: &Router) -> Self {
        Self {
            vrf: router.vrf.clone(),
            install: router.install,
            table: router.table,
            metric: router.metric,
        }
    }
}

/// The running writer.
#[derive(Clone)]
pub struct Fib {
    tx: mpsc::Sender<Command>,
    instances: Arc<Vec<FibInstanceConfig>>,
}

/// One instance's channel to the writer.
#[derive(Clone)]
pub struct FibSender {
    tx: mpsc::Sender<Command>,
    instance: usize,
}

impl FibSender {
    /// Hands a batch of changes to the writer; waits only when its channel is full.
    pub async fn send(&self, changes: Vec<FibChange>) {
        if changes.is_empty() {
            return;
        }
        let _ = self.tx.send(Command::Changes { instance: self.instance, changes }).await;
    }
}

/// Starts the writer and monitor threads. The writer first reconciles with the kernel (removing
/// every stale `proto bgp` route in uplink's tables), then applies changes as they come.
/// `nexthop_objects = false` installs ECMP routes with RTA_MULTIPATH (the writer also falls
/// back to that by itself when the kernel has no nexthop objects).
pub fn start(instances: Vec<FibInstanceConfig>, nexthop_objects: bool) -> Result<Fib, String> {
    let kernel = kernel::Kernel::open()
        .map_err(|e| format!("cannot open a netlink socket for the FIB: {e}"))?;
    let mut monitor = kernel::Monitor::open()
        .map_err(|e| format!("cannot subscribe to kernel route notifications: {e}"))?;
    let own_pid = kernel.pid();
    let (tx, rx) = mpsc::channel(CHANNEL_DEPTH);
    let events = tx.clone();
    std::thread::Builder::new()
        .name("uplink-fib-monitor".into())
        .spawn(move || loop {
            let command = match monitor.next_datagram() {
                Ok(datagram) => {
                    let events = writer::events(datagram, own_pid);
                    if events.is_empty() {
                        continue;
                    }
                    Command::Kernel(events)
                }
                Err(e) if kernel::is_overflow(&e) => Command::Overflow,
                Err(e) => {
                    warn!("reading kernel notifications failed: {e}");
                    std::thread::sleep(std::time::Duration::from_millis(100));
                    continue;
                }
            };
            if events.blocking_send(command).is_err() {
                return;
            }
        })
        .map_err(|e| format!("cannot start the FIB monitor thread: {e}"))?;
    let writer = Writer::new(kernel, instances.clone(), nexthop_objects);
    std::thread::Builder::new()
        .name("uplink-fib".into())
        .spawn(move || {
            writer.run(rx);
            error!("the FIB writer stopped");
        })
        .map_err(|e| format!("cannot start the FIB writer thread: {e}"))?;
    Ok(Fib { tx, instances: Arc::new(instances) })
}

impl Fib {
    /// The channel for the instance of `vrf`; `None` when it does not install routes.
    pub fn sender(&self, vrf: &str) -> Option<FibSender> {
        let instance = self.instances.iter().position(|i| i.vrf == vrf && i.install)?;
        Some(FibSender { tx: self.tx.clone(), instance })
    }

    /// Returns once every change sent before this call has been written to the kernel.
    pub async fn flush(&self) -> Result<(), String> {
        let (reply, rx) = oneshot::channel();
        self.tx.send(Command::Flush(reply)).await.map_err(|_| "the FIB writer has stopped")?;
        rx.await.map_err(|_| "the FIB writer has stopped".to_string())
    }

    /// Every instance's routes and their state.
    pub async fn show(&self) -> Result<Vec<FibInstanceView>, String> {
        let (reply, rx) = oneshot::channel();
        self.tx.send(Command::Show(reply)).await.map_err(|_| "the FIB writer has stopped")?;
        rx.await.map_err(|_| "the FIB writer has stopped".to_string())
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FibInstanceView {
    pub vrf: String,
    pub install: bool,
    pub table: Option<u32>,
    pub metric: u32,
    /// False when the kernel refused nexthop objects and routes carry their hops inline.
    pub nexthop_objects: bool,
    pub routes: Vec<FibRouteView>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FibRouteView {
    pub prefix: IpNet,
    /// The BGP next hops of the best path and its multipaths.
    pub next_hops: Vec<String>,
    /// The resolved kernel next hops.
    pub via: Vec<FibHopView>,
    pub nexthop_group: Option<u32>,
    /// "installed", "pending" or "failed".
    pub state: &'static str,
    /// The kernel's error when failed.
    pub error: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FibHopView {
    pub gateway: IpAddr,
    pub interface: String,
    pub nexthop_id: Option<u32>,
}
