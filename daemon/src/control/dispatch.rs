//! The one place where the daemon answers control requests: each request goes to the part of
//! the daemon that knows the answer.

use std::sync::Arc;

use serde_json::Value;
use tokio::sync::watch;

use super::protocol::Request;
use crate::announce::runtime::AnnouncerHandle;
use crate::config::Config;
use crate::fib::Fib;
use crate::kubernetes::Health;
use crate::l2::runtime::Layer2Handle;
use crate::netconf::gate::GateView;
use crate::ops::drain::{DrainHandle, DrainReason};
use crate::reload::{InstanceList, ReloadHandle};

/// What a control request may read or act on. Cheap to clone: handles and `watch` receivers.
#[derive(Clone)]
pub struct Context {
    /// The running routing instances (a reload publishes a new list).
    pub instances: watch::Receiver<InstanceList>,
    /// The config in force (a reload publishes the new one).
    pub running: watch::Receiver<Arc<Config>>,
    pub announcer: AnnouncerHandle,
    pub fib: Fib,
    /// `uplink drain` / `undrain` (`crate::ops::drain`).
    pub drain: DrainHandle,
    /// Runs a reload and hands back its outcome.
    pub reload: ReloadHandle,
    /// Routers waiting for their VRF device, and the kernel's view of the node.
    pub network: GateView,
    /// The Kubernetes source's record (`[kubernetes]`).
    pub kubernetes: Option<Health>,
    /// Layer 2 mode (`show l2`).
    pub layer2: Layer2Handle,
}

/// Answers one request.
pub async fn answer(ctx: Context, request: Request) -> Result<Value, String> {
    // A snapshot only for the requests that read it: a reload waits for the instances it
    // stops to be let go.
    let instances = || ctx.instances.borrow().clone();
    match request {
        Request::BgpSummary { vrf } => {
            let answer = super::bgp::summary_json(&instances(), &vrf).await;
            super::waiting::summary(answer, &instances(), &ctx.network, &vrf)
        }
        Request::BgpNeighbors { vrf, address } => {
            super::bgp::neighbors_json(&instances(), &vrf, address.as_deref()).await
        }
        Request::BgpRoutes { vrf, family, prefix } => {
            super::bgp::routes_json(&instances(), &vrf, family, prefix.as_deref()).await
        }
        Request::BgpNeighborRoutes { vrf, address, family, received } => {
            super::bgp::neighbor_routes_json(&instances(), &vrf, &address, family, received).await
        }
        Request::BfdPeers { vrf } => super::bfd::peers(&instances(), &vrf).await,
        Request::Fib { vrf } => super::fib::show(&ctx.fib, &instances(), &vrf).await,
        Request::Announcements { vrf } => {
            let config = ctx.running.borrow().clone();
            Ok(super::announcements::announcements_json(
                &ctx.announcer.current(),
                &vrf,
                Some(&config),
            ))
        }
        Request::RunningConfig => {
            let config = ctx.running.borrow().clone();
            super::announcements::running_config_json(&config, &ctx.announcer)
        }
        Request::Kubernetes => super::kubernetes::show(ctx.kubernetes.as_ref()),
        Request::L2 => super::l2::show(&ctx.layer2),
        Request::Drain { wait, shutdown } => {
            let reason = if shutdown { DrainReason::Shutdown } else { DrainReason::Operator };
            let outcome = ctx.drain.drain(reason, wait).await?;
            Ok(serde_json::json!({ "drain": outcome }))
        }
        Request::Undrain => {
            let outcome = ctx.drain.undrain().await?;
            Ok(serde_json::json!({ "drain": outcome }))
        }
        Request::Ready => Ok(super::bgp::ready_json(&instances())),
        Request::Reload => {
            let outcome = ctx.reload.reload().await?;
            serde_json::to_value(outcome).map_err(|e| e.to_string())
        }
        Request::ClearBgp { vrf, address, how } => {
            super::bgp::clear_json(&instances(), &vrf, address.as_deref(), how).await
        }
    }
}
