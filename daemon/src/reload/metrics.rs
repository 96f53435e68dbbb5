//! The metrics endpoint's socket (`[metrics] listen`), bound in a reload's prepare step like
//! the routers' listeners: a reload that moves the endpoint to an address that cannot be
//! bound is refused and the endpoint stays where it is. The control layer serves whatever
//! socket the reloader publishes (`control::metrics`).
//!
//! An address the reload does not change is never a reason to refuse it: at the start (and
//! after a start whose port was taken) the endpoint is tried again, and when that fails the
//! daemon runs without metrics, logged, since routing matters more than its metrics.

use std::net::{SocketAddr, TcpListener};
use std::sync::Arc;

use tokio::sync::watch;
use tracing::error;

/// A bound metrics socket.
#[derive(Debug)]
pub struct MetricsSocket {
    pub address: SocketAddr,
    /// Non-blocking, for tokio.
    pub listener: TcpListener,
}

/// The socket the endpoint serves now (`None`: no endpoint).
pub type Published = Option<Arc<MetricsSocket>>;

/// What a prepared reload does to the endpoint.
#[derive(Debug)]
pub enum MetricsChange {
    Unchanged,
    /// Serve this socket instead (`None`: stop serving).
    Switch(Published),
}

/// Binds `wanted` when it differs from the address served now. `before` is the running
/// config's address: when the reload leaves it as it was, a failure is logged, not returned.
pub fn prepare(
    serving: &watch::Sender<Published>,
    before: Option<SocketAddr>,
    wanted: Option<SocketAddr>,
) -> Result<MetricsChange, String> {
    let now = serving.borrow().as_ref().map(|socket| socket.address);
    if now == wanted {
        return Ok(MetricsChange::Unchanged);
    }
    let Some(address) = wanted else { return Ok(MetricsChange::Switch(None)) };
    match bind(address) {
        Ok(listener) => {
            Ok(MetricsChange::Switch(Some(Arc::new(MetricsSocket { address, listener }))))
        }
        Err(e) if before == wanted => {
            error!("metrics: cannot listen on {address}: {e}; not serving metrics until a reload");
            Ok(MetricsChange::Unchanged)
        }
        Err(e) => Err(format!(
            "[metrics] listen = \"{address}\": cannot listen there ({e}); the metrics endpoint \
             stays {}",
            now.map_or_else(|| "off".to_string(), |a| format!("on {a}"))
        )),
    }
}

/// Publishes a prepared change (the apply step); says what moved, for the reload's answer.
pub fn apply(serving: &watch::Sender<Published>, change: MetricsChange) -> Option<String> {
    let MetricsChange::Switch(socket) = change else { return None };
    let at = |socket: &Published| {
        socket.as_ref().map_or_else(|| "off".to_string(), |s| format!("\"{}\"", s.address))
    };
    let now = at(&socket);
    let before = at(&serving.send_replace(socket));
    Some(format!("metrics.listen {before} → {now}"))
}

fn bind(address: SocketAddr) -> std::io::Result<TcpListener> {
    let listener = TcpListener::bind(address)?;
    listener.set_nonblocking(true)?;
    Ok(listener)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn address(listener: &TcpListener) -> SocketAddr {
        listener.local_addr().unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn a_taken_port_refuses_only_a_reload_that_moves_the_endpoint_there() {
        let squatter = TcpListener::bind("127.0.0.1:0").unwrap_or_else(|e| panic!("{e}"));
        let taken = address(&squatter);
        let (serving, _) = watch::channel::<Published>(None);

        // Unchanged by the reload (the start, or a start whose port was taken): logged only.
        assert!(matches!(
            prepare(&serving, Some(taken), Some(taken)),
            Ok(MetricsChange::Unchanged)
        ));
        // Moved there: refused, with the address and the error.
        let error = match prepare(&serving, None, Some(taken)) {
            Err(e) => e,
            Ok(change) => panic!("a taken port was accepted: {change:?}"),
        };
        assert!(error.contains(&taken.to_string()) && error.contains("stays off"), "{error}");

        // A free port is bound in prepare and served from apply; asking again changes nothing.
        let free = {
            let probe = TcpListener::bind("127.0.0.1:0").unwrap_or_else(|e| panic!("{e}"));
            address(&probe)
        };
        let change = prepare(&serving, None, Some(free)).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(apply(&serving, change), Some(format!("metrics.listen off → \"{free}\"")));
        assert_eq!(serving.borrow().as_ref().map(|s| s.address), Some(free));
        assert!(matches!(prepare(&serving, Some(free), Some(free)), Ok(MetricsChange::Unchanged)));
        // Turned off.
        let change = prepare(&serving, Some(free), None).unwrap_or_else(|e| panic!("{e}"));
        apply(&serving, change);
        assert!(serving.borrow().is_none());
    }
}
