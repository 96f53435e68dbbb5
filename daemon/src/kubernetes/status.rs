//! `status.loadBalancer.ingress` of the Services uplink allocates. Allocation is a pure
//! function of the config, so every node computes the same addresses and writes the same
//! status with server-side apply under one field manager: no leader, and two nodes writing at
//! once agree instead of fighting (the second apply changes nothing).

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::sync::{Arc, PoisonError};
use std::time::Instant;

use k8s_openapi::api::core::v1::Service;
use kube::api::{Api, Patch, PatchParams};
use kube::Client;
use serde_json::json;
use tokio::sync::watch as channel;
use tracing::{info, warn};

use super::watch::Ingresses;
use crate::announce::allocate::allocate;
use crate::config::{is_api_source, Config};
use crate::logthrottle::{held_back_note, LogThrottle, LOG_PERIOD};

/// The field manager of every status uplink writes.
pub const FIELD_MANAGER: &str = "uplink";

/// Writes the allocated addresses of the API's Services after every change of the running
/// config, where the API's status differs.
pub(super) fn spawn(
    client: Client,
    mut running: channel::Receiver<Arc<Config>>,
    ingresses: Ingresses,
) {
    tokio::spawn(async move {
        let mut failures = LogThrottle::new(LOG_PERIOD);
        loop {
            let config = running.borrow_and_update().clone();
            for (key, addresses) in wanted(&config) {
                let current = ingresses
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .get(&key)
                    .cloned()
                    .unwrap_or_default();
                if current == addresses {
                    continue;
                }
                match write(&client, &key, &addresses).await {
                    Ok(()) => {
                        info!(service = %key, ?addresses, "status.loadBalancer.ingress written");
                        ingresses
                            .lock()
                            .unwrap_or_else(PoisonError::into_inner)
                            .insert(key, addresses);
                    }
                    Err(e) => {
                        if let Some(held_back) = failures.event(Instant::now()) {
                            warn!(service = %key, "cannot write the Service's status: {e}{}", held_back_note(held_back));
                        }
                    }
                }
            }
            if running.changed().await.is_err() {
                return;
            }
        }
    });
}

/// The addresses each Service read from the API gets, by `namespace/name`.
fn wanted(config: &Config) -> BTreeMap<String, Vec<IpAddr>> {
    let announce = &config.announce;
    let allocation = allocate(&announce.pools, &announce.services);
    announce
        .services
        .iter()
        .filter(|service| service.sources.iter().any(|source| is_api_source(source)))
        .map(|service| (service.key(), allocation.addresses_of(&service.key())))
        .collect()
}

async fn write(client: &Client, key: &str, addresses: &[IpAddr]) -> Result<(), kube::Error> {
    let (namespace, name) = key.split_once('/').unwrap_or(("default", key));
    let api: Api<Service> = Api::namespaced(client.clone(), namespace);
    let ingress: Vec<_> = addresses.iter().map(|ip| json!({ "ip": ip.to_string() })).collect();
    let status = json!({
        "apiVersion": "v1",
        "kind": "Service",
        "status": { "loadBalancer": { "ingress": ingress } },
    });
    let params = PatchParams::apply(FIELD_MANAGER).force();
    api.patch_status(name, &params, &Patch::Apply(&status)).await.map(|_| ())
}
