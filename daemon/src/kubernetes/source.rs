//! Starting the source: the client, the watchers, the status writer, the events and the
//! snapshot.

use std::path::Path;
use std::sync::{Arc, Mutex};

use kube::Client;
use tokio::sync::watch as channel;
use tracing::info;

use super::events::{self, Events};
use super::health::SourceHealth;
use super::sessions::SessionReports;
use super::{enactment_writer, node_state, session_state, snapshot, status, watch, Health};
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
    sessions: SessionReports,
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
    events::spawn(events.clone(), announcer, running.clone());
    session_state::spawn(client.clone(), &settings.namespace, node, sessions, health.clone());
    node_state::spawn(client.clone(), node, running.clone(), health.clone());
    enactment_writer::spawn(client.clone(), node, running.clone(), objects.clone(), health.clone());
    status::spawn(client, running, services, health.clone(), events);
    snapshot::spawn(objects.clone(), state_dir);
    info!(namespace = %settings.namespace, "watching the Kubernetes API");
    Ok(Source { objects, health })
}

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
    let client =
        Client::try_from(config).map_err(|e| format!("[kubernetes] cannot make a client: {e}"))?;
    Ok((client, server))
}
