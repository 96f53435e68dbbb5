//! The Kubernetes source (`[kubernetes]`, the `kubernetes` build feature): the objects a MetalLB
//! speaker, frr-k8s and the nmstate handler read, watched on the API server and handed to the
//! reloader as config sources, so that an object read from the API means exactly what the same
//! manifest in `conf.d/` means (one parser, one merge). See docs/kubernetes.md.
//!
//! - `watch`: one watcher per kind (kube's `watcher`, which lists, watches, and lists again
//!   after a `410 Gone` or a lost connection); each kind's objects are replaced as a whole when
//!   a list completes, so a relist that finds what was there changes nothing.
//! - The objects, reduced to what the config reads (no status, no server-set metadata, so our
//!   own status writes and the apiserver's bookkeeping cause no reload), are published on a
//!   watch channel; the reloader reloads when they change, and keeps the last published set in
//!   the state directory for a start while the API server is away (`snapshot`).
//! - `status`: writes `status.loadBalancer.ingress` of the Services uplink allocates.

mod snapshot;
mod status;
mod watch;

use std::path::Path;
use std::sync::Arc;

use kube::Client;
use tokio::sync::watch as channel;
use tracing::info;

use crate::config::{ApiObjects, Config, KubernetesConfig};
pub use snapshot::Snapshot;

/// A running source: what it publishes.
pub struct Source {
    /// Every complete set of objects, after the first full list of every kind.
    pub objects: channel::Receiver<Arc<ApiObjects>>,
}

/// Connects to the API server named by `settings` and starts watching, from `kept` (the last
/// run's set). Returns at once: the first set read is published when every kind has been
/// listed.
pub async fn start(
    settings: &KubernetesConfig,
    node: &str,
    state_dir: &Path,
    running: channel::Receiver<Arc<Config>>,
    kept: ApiObjects,
) -> Result<Source, String> {
    let client = client(settings).await?;
    // Starts from the kept set: a reload before the first list keeps those objects.
    let (publish, objects) = channel::channel(Arc::new(kept));
    let services = watch::spawn(client.clone(), settings, node, publish);
    status::spawn(client, running, services);
    snapshot::spawn(objects.clone(), state_dir);
    info!(namespace = %settings.namespace, "watching the Kubernetes API");
    Ok(Source { objects })
}

async fn client(settings: &KubernetesConfig) -> Result<Client, String> {
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
    Client::try_from(config).map_err(|e| format!("[kubernetes] cannot make a client: {e}"))
}
