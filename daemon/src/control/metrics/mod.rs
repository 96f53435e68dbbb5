//! The Prometheus endpoint (`[metrics] listen`): `GET /metrics` in the text format, with
//! frr-k8s's and MetalLB's family names and labels (so their dashboards work unchanged) and
//! uplink's own `uplink_*` families. docs/metrics.md lists every family.
//!
//! - [`families`]: names, HELP texts, types and labels, with the upstream source of each;
//! - [`gather`]: one scrape's numbers, read through the daemon's handles without holding up
//!   routing;
//! - [`encode`]: the numbers in the text format, through `prometheus-client`;
//! - [`http`]: the listener; reading request heads and gathering are bounded apart, so that
//!   clients which connect and send nothing cannot keep a scraper out.
//!
//! The endpoint follows the running config: a reload that changes or removes `listen` moves
//! or stops it. A port that cannot be bound is logged and leaves the daemon running (routing
//! matters more than its metrics); the next reload tries again.

pub mod encode;
pub mod families;
pub mod gather;
pub mod http;

use std::net::SocketAddr;

use tokio::net::TcpListener;
use tracing::{error, info};

pub use gather::Sources;

/// Serves the endpoint wherever the running config says, for as long as the daemon runs.
pub fn spawn(sources: Sources) {
    tokio::spawn(follow_config(sources));
}

async fn follow_config(sources: Sources) {
    let mut running = sources.running.clone();
    let mut serving: Option<(SocketAddr, tokio::task::JoinHandle<()>)> = None;
    loop {
        let wanted = running.borrow_and_update().metrics.listen;
        if serving.as_ref().map(|(address, _)| *address) != wanted {
            if let Some((address, task)) = serving.take() {
                task.abort();
                info!("metrics: no longer served on {address}");
            }
            if let Some(address) = wanted {
                match TcpListener::bind(address).await {
                    Ok(listener) => {
                        info!("metrics: serving http://{address}{}", http::PATH);
                        let task = tokio::spawn(http::serve(listener, sources.clone()));
                        serving = Some((address, task));
                    }
                    Err(e) => error!("metrics: cannot listen on {address}: {e}; not serving metrics until a reload"),
                }
            }
        }
        if running.changed().await.is_err() {
            // No more reloads: keep serving where we are.
            return std::future::pending().await;
        }
    }
}
