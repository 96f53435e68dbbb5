//! Starting the source: the client, the watchers, the status writer, the events and the
//! snapshot.

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use kube::client::retry::RetryPolicy;
use kube::client::ConfigExt;
use kube::Client;
use tokio::sync::watch as channel;
use tower::retry::RetryLayer;
use tower::{BoxError, ServiceBuilder};
use tracing::info;

use super::events::{self, Events};
use super::health::SourceHealth;
use super::{
    enactment_writer, l2_membership, l2_status, node_state, session_state, snapshot, status, watch,
    Health, Links,
};
use crate::announce::runtime::AnnouncerHandle;
use crate::config::{ApiObjects, Config, KubernetesConfig};

/// A running source: what it publishes.
pub struct Source {
    /// Every complete set of objects, after the first full list of every kind.
    pub objects: channel::Receiver<Arc<ApiObjects>>,
    /// What it knows about itself.
    pub health: Health,
}

/// Connects to the API server named by `settings` and starts watching, from `kept` (the last
/// run's set). Returns at once: the first set read is published when every kind has been
/// listed.
pub async fn start(
    settings: &KubernetesConfig,
    node: &str,
    state_dir: &Path,
    running: channel::Receiver<Arc<Config>>,
    announcer: AnnouncerHandle,
    links: Links,
    kept: ApiObjects,
) -> Result<Source, String> {
    let (client, server) = client(settings).await?;
    let health: Health = Arc::new(Mutex::new(SourceHealth::new(
        server,
        settings.namespace.clone(),
        node.to_string(),
    )));
    // Starts from the kept set: a reload before the first list keeps those objects.
    let (publish, objects) = channel::channel(Arc::new(kept));
    let services = watch::spawn(client.clone(), settings, node, publish, health.clone());
    let events = Events::new(client.clone(), node, services.clone());
    let announcements = announcer.changes();
    events::spawn(events.clone(), announcer);
    session_state::spawn(client.clone(), &settings.namespace, node, links.sessions, health.clone());
    l2_status::spawn(
        client.clone(),
        &settings.namespace,
        node,
        links.layer2,
        services.clone(),
        events.clone(),
        health.clone(),
    );
    l2_membership::spawn(
        client.clone(),
        &settings.namespace,
        running.clone(),
        links.layer2_membership,
    );
    node_state::spawn(client.clone(), node, running.clone(), health.clone());
    enactment_writer::spawn(client.clone(), node, running.clone(), objects.clone(), health.clone());
    status::spawn(client, announcements, health.clone(), events);
    snapshot::spawn(objects.clone(), state_dir);
    info!(namespace = %settings.namespace, "watching the Kubernetes API");
    Ok(Source { objects, health })
}

/// TCP keepalive on every connection to the API server, as client-go's dialer has it: a watch
/// waiting for events on a connection whose far end is gone without a FIN or RST (a silent
/// partition) fails after [`KEEPALIVE_IDLE`] + [`KEEPALIVE_INTERVAL`] × [`KEEPALIVE_PROBES`]
/// (25 s), so the source says it is stale and lists again when the path returns, instead of
/// waiting out the watch's own timeout (`[kubernetes] watch_timeout`, 290 s).
const KEEPALIVE_IDLE: Duration = Duration::from_secs(10);
const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(5);
const KEEPALIVE_PROBES: u32 = 3;

/// The client, and the API server's URL for `show kubernetes`.
async fn client(settings: &KubernetesConfig) -> Result<(Client, String), String> {
    let config = match &settings.kubeconfig {
        Some(path) => {
            let kubeconfig = kube::config::Kubeconfig::read_from(path)
                .map_err(|e| format!("[kubernetes] kubeconfig {}: {e}", path.display()))?;
            kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
                .await
                .map_err(|e| format!("[kubernetes] kubeconfig {}: {e}", path.display()))?
        }
        None => kube::Config::incluster().map_err(|e| {
            format!("[kubernetes] without kubeconfig needs the in-cluster environment: {e}")
        })?,
    };
    let server = config.cluster_url.to_string();
    // As kube's own builder without its proxy features: refused, not ignored.
    if let Some(proxy) = &config.proxy_url {
        return Err(format!(
            "[kubernetes] the kubeconfig names a proxy ({proxy}); uplink connects to the API \
             server directly"
        ));
    }
    let client =
        with_keepalive(&config).map_err(|e| format!("[kubernetes] cannot make a client: {e}"))?;
    Ok((client, server))
}

/// A request answered 429, 503 or 504 is sent again at most this many times, after a
/// back-off from [`RETRY_FIRST`] doubling up to [`RETRY_LONGEST`] (or the server's
/// `Retry-After`, RFC 9110 section 10.2.3, when that is longer), then fails to its caller.
/// kube's own policy tries 15 times with a back-off up to 1,000 s: a list answered 503 while
/// the server started could sleep seconds inside the client after the server was ready, where
/// the watches' probe (`probe.rs`) cannot wake it. The callers have their own back-off.
const RETRIES: u32 = 5;
const RETRY_FIRST: Duration = Duration::from_millis(50);
const RETRY_LONGEST: Duration = Duration::from_secs(1);

/// kube's client stack, as its builder makes it (the server's URL, a bounded retry of
/// 429/503/504 answers, the credentials, which it renews, rustls over HTTP/1), on a connector
/// with keepalive.
fn with_keepalive(config: &kube::Config) -> Result<Client, kube::Error> {
    let mut connector = HttpConnector::new();
    connector.enforce_http(false);
    connector.set_connect_timeout(config.connect_timeout);
    connector.set_keepalive(Some(KEEPALIVE_IDLE));
    connector.set_keepalive_interval(Some(KEEPALIVE_INTERVAL));
    connector.set_keepalive_retries(Some(KEEPALIVE_PROBES));
    // A request sent on a pooled connection that died meanwhile fails as soon (data not
    // acknowledged), rather than waiting for an answer that cannot come.
    connector.set_tcp_user_timeout(Some(
        KEEPALIVE_IDLE.saturating_add(KEEPALIVE_INTERVAL.saturating_mul(KEEPALIVE_PROBES)),
    ));
    let https = config.rustls_https_connector_with_connector(connector)?;
    let http: hyper_util::client::legacy::Client<_, kube::client::Body> =
        hyper_util::client::legacy::Client::builder(TokioExecutor::new()).build(https);
    let retry = RetryPolicy::new(RETRY_FIRST, RETRY_LONGEST, RETRIES, true)
        .map_err(|e| kube::Error::Service(Box::new(e)))?;
    let service = ServiceBuilder::new()
        .layer(config.base_uri_layer())
        .option_layer(config.default_retry.then(|| RetryLayer::new(retry)))
        .option_layer(config.auth_layer()?)
        .layer(config.extra_headers_layer()?)
        .map_err(BoxError::from)
        .service(http);
    Ok(Client::new(service, config.default_namespace.clone()))
}
