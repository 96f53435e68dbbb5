//! `status.loadBalancer.ingress` of the Services uplink allocates. Allocation is a pure
//! function of the config, so every node computes the same addresses and writes the same
//! status with server-side apply under one field manager: no leader, and two nodes writing at
//! once agree instead of fighting (the second apply changes nothing).

use std::net::IpAddr;
use std::sync::{Arc, PoisonError, Weak};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Service;
use kube::api::{Api, Patch, PatchParams};
use kube::Client;
use serde_json::json;
use tokio::sync::watch as channel;
use tracing::{info, warn};

use super::events::Events;
use super::health::{self, Health};
use super::watch::{SeenServices, Services};
use super::write_outcomes::explain;
use crate::announce::{Allocation, Announcements};
use crate::logthrottle::{held_back_note, LogThrottle, LOG_PERIOD};

/// The field manager of every status uplink writes.
pub const FIELD_MANAGER: &str = "uplink";

/// How long the status writer and the events wait after the announcements changed before
/// they compare every Service with what they last wrote: the BGP routers send the UPDATEs of
/// the same change meanwhile, on cores these comparisons (milliseconds at a cluster's size)
/// would take from them, and the changes of a burst are compared once.
const AFTER_ROUTERS: Duration = Duration::from_millis(50);

/// Waits for the announcements to change, then [`AFTER_ROUTERS`]; false when the announcer
/// has stopped.
pub(super) async fn next_change<T>(announcements: &mut channel::Receiver<T>) -> bool {
    if announcements.changed().await.is_err() {
        return false;
    }
    tokio::time::sleep(AFTER_ROUTERS).await;
    true
}

/// How long a failed write waits before it is tried again (a config change tries at once).
const RETRY_FIRST: Duration = Duration::from_secs(2);
/// The longest wait between two tries: a write RBAC forbids is tried again this often, not
/// in a storm.
const RETRY_MAX: Duration = Duration::from_secs(60);

/// Writes the allocated addresses of the API's Services after every new allocation (the
/// announcer's, made once per config), where the API's status differs; what failed is tried
/// again with a growing wait.
pub(super) fn spawn(
    client: Client,
    mut announcements: channel::Receiver<Arc<Announcements>>,
    services: Services,
    health: Health,
    events: Arc<Events>,
) {
    tokio::spawn(async move {
        let mut failures = LogThrottle::new(LOG_PERIOD);
        let mut retry = RETRY_FIRST;
        // The allocation last written in full (health and drain changes keep it), by
        // identity: a weak reference keeps its address from being reused, not its entries.
        let mut written: Option<Weak<Allocation>> = None;
        loop {
            let latest = announcements.borrow_and_update().clone();
            if written
                .as_ref()
                .is_some_and(|w| std::ptr::eq(w.as_ptr(), Arc::as_ptr(&latest.allocation)))
            {
                if !next_change(&mut announcements).await {
                    return;
                }
                continue;
            }
            let mut failed = false;
            let differing = {
                let seen = services.lock().unwrap_or_else(PoisonError::into_inner);
                differing(&latest, &seen)
            };
            // Let go before the writes: held through thousands of requests, a cluster's first
            // load kept an old copy of every Service's announcements and config alive.
            let allocation = Arc::downgrade(&latest.allocation);
            drop(latest);
            for (key, addresses) in differing {
                match write(&client, &key, &addresses).await {
                    Ok(()) => {
                        info!(service = %key, ?addresses, "status.loadBalancer.ingress written");
                        if let Some(seen) = services
                            .lock()
                            .unwrap_or_else(PoisonError::into_inner)
                            .get_mut(key.as_str())
                        {
                            seen.ingress = addresses.as_slice().into();
                        }
                        health::update(&health, |h| h.status_writes.succeeded += 1);
                        events.allocated(&key, &addresses).await;
                    }
                    Err(e) => {
                        failed = true;
                        let why = explain(&e);
                        if let Some(held_back) = failures.event(Instant::now()) {
                            warn!(service = %key, "cannot write the Service's status.loadBalancer.ingress, trying again in {} s: {why}{}", retry.as_secs(), held_back_note(held_back));
                        }
                        health::update(&health, |h| {
                            h.status_writes.failed += 1;
                            h.status_writes.last_error = Some(format!("{key}: {why}"));
                        });
                    }
                }
            }
            if !failed {
                retry = RETRY_FIRST;
                written = Some(allocation);
                if !next_change(&mut announcements).await {
                    return;
                }
                continue;
            }
            tokio::select! {
                changed = next_change(&mut announcements) => if !changed { return },
                () = tokio::time::sleep(retry) => {}
            }
            retry = retry.saturating_mul(2).min(RETRY_MAX);
        }
    });
}

/// The Services read from the API whose status (as last read or written) differs from the
/// addresses they get, by `namespace/name`, with those addresses. Thousands of Services are
/// compared at every new allocation, by their own keys, and only the few that differ are
/// kept.
fn differing(announcements: &Announcements, seen: &SeenServices) -> Vec<(String, Vec<IpAddr>)> {
    let mut out = Vec::new();
    for service in announcements.config.services.iter().filter(|s| s.read_from_api()) {
        let key = &*service.key;
        let current = seen.get(key).map(|seen| &*seen.ingress).unwrap_or_default();
        // Compared in place: a list of addresses made for each Service was most of the time.
        let addresses = announcements.allocation.addresses(key);
        if !addresses.eq(current.iter().copied()) {
            out.push((key.to_string(), announcements.allocation.addresses_of(key)));
        }
    }
    out
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
