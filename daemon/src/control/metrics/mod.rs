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
//! The endpoint serves the socket the reloader publishes: a reload binds a new `listen`
//! address in its prepare step and is refused when it cannot (`reload::metrics`); a port
//! taken at the start is logged and leaves the daemon running without metrics (routing
//! matters more than its metrics), and the next reload tries again.

pub mod encode;
pub mod families;
pub mod gather;
pub mod http;

use std::net::SocketAddr;

use tokio::net::TcpListener;
use tokio::sync::watch;
use tracing::{error, info};

use crate::reload::metrics::Published;
pub use gather::Sources;

/// Serves the endpoint on whatever socket `sockets` holds, for as long as the daemon runs.
pub fn spawn(sources: Sources, sockets: watch::Receiver<Published>) {
    tokio::spawn(follow_socket(sources, sockets));
}

async fn follow_socket(sources: Sources, mut sockets: watch::Receiver<Published>) {
    let mut serving: Option<(SocketAddr, tokio::task::JoinHandle<()>)> = None;
    loop {
        let wanted = sockets.borrow_and_update().clone();
        if let Some((address, task)) = serving.take() {
            task.abort();
            info!("metrics: no longer served on {address}");
        }
        if let Some(socket) = wanted {
            let address = socket.address;
            // A second descriptor of the published socket: the reloader's copy stays open
            // until it publishes another, so the port is never free in between.
            match socket.listener.try_clone().and_then(TcpListener::from_std) {
                Ok(listener) => {
                    info!("metrics: serving http://{address}{}", http::PATH);
                    let task = tokio::spawn(http::serve(listener, sources.clone()));
                    serving = Some((address, task));
                }
                Err(e) => error!("metrics: cannot serve on {address}: {e}"),
            }
        }
        if sockets.changed().await.is_err() {
            // No more reloads: keep serving where we are.
            return std::future::pending().await;
        }
    }
}
