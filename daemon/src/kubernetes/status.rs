//! `status.loadBalancer.ingress` of the Services uplink allocates. Allocation is a pure
//! function of the config, so every node computes the same addresses and writes the same
//! status with server-side apply under one field manager: no leader, and two nodes writing at
//! once agree instead of fighting (the second apply changes nothing).

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Service as ServiceObject;
use kube::api::{Api, Patch, PatchParams};
use kube::Client;
use serde_json::json;
use tokio::sync::watch as channel;
use tracing::{info, warn};

use super::events::Events;
use super::health::{self, Health};
use super::write_outcomes::explain;
use crate::announce::allocate::ServiceKey;
use crate::announce::{Allocation, Announcements};
use crate::config::announce::Addresses;
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

/// What this node wrote of a Service's status that the config has not read back yet: the
/// API's object comes back through the watch a moment later (a status alone up to a second
/// later, `watch::STATUS_ALONE`), and until then the Service as the config read it still
/// differs from its addresses. The Service may be read again meanwhile for another reason
/// (its endpoints), so the entry holds while the status read is the one it replaced.
struct Written {
    /// The status the config had read when this was written.
    replaced: Addresses,
    addresses: Vec<IpAddr>,
    at: Instant,
}

/// The statuses written and not read back yet, by Service: only those in flight.
type WrittenBack = HashMap<ServiceKey, Written, foldhash::fast::RandomState>;

/// How long a write is taken as not read back yet at most: a status reset to what it was
/// before the write came back (by someone else) is written again after this, at the next
/// allocation.
const READ_BACK_WITHIN: Duration = Duration::from_secs(10);

/// A Service whose status to write: its key, its addresses, the status the config read.
type ToWrite = (ServiceKey, Vec<IpAddr>, Addresses);

/// Writes the allocated addresses of the API's Services after every new allocation (the
/// announcer's, made once per config), where the status the config read differs; what failed
/// is tried again with a growing wait.
pub(super) fn spawn(
    client: Client,
    mut announcements: channel::Receiver<Arc<Announcements>>,
    health: Health,
    events: Arc<Events>,
) {
    tokio::spawn(async move {
        let mut failures = LogThrottle::new(LOG_PERIOD);
        let mut retry = RETRY_FIRST;
        // The allocation last written in full (health and drain changes keep it), by
        // identity: a weak reference keeps its address from being reused, not its entries.
        let mut written: Option<Weak<Allocation>> = None;
        let mut written_back = WrittenBack::default();
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
            let differing = differing(&latest, &mut written_back, Instant::now());
            // Let go before the writes: held through thousands of requests, a cluster's first
            // load kept an old copy of every Service's announcements and config alive.
            let allocation = Arc::downgrade(&latest.allocation);
            drop(latest);
            for (key, addresses, replaced) in differing {
                match write(&client, &key, &addresses).await {
                    Ok(()) => {
                        info!(service = %key, ?addresses, "status.loadBalancer.ingress written");
                        health::update(&health, |h| h.status_writes.succeeded += 1);
                        events.allocated(&key, &addresses).await;
                        let at = Instant::now();
                        written_back.insert(key, Written { replaced, addresses, at });
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

/// The Services read from the API whose status, as the config read it, differs from the
/// addresses they get, but for those whose addresses this node wrote since the config read
/// that status (`written_back`, which keeps only those). Thousands of Services are compared
/// at every new allocation, by their own keys, and only the few that differ are kept.
fn differing(
    announcements: &Announcements,
    written_back: &mut WrittenBack,
    now: Instant,
) -> Vec<ToWrite> {
    let allocation = &announcements.allocation;
    let mut out = Vec::new();
    let mut still_unread = WrittenBack::default();
    for service in announcements.config.services.iter().filter(|s| s.read_from_api()) {
        let key = &service.key;
        // Compared in place: a list of addresses made for each Service was most of the time.
        if allocation.addresses(key).eq(service.held_ips.iter().copied()) {
            continue;
        }
        if let Some(written) = written_back.remove(key) {
            let unread = written.replaced == service.held_ips
                && now.saturating_duration_since(written.at) < READ_BACK_WITHIN;
            if unread && allocation.addresses(key).eq(written.addresses.iter().copied()) {
                still_unread.insert(key.clone(), written);
                continue;
            }
        }
        out.push((key.clone(), allocation.addresses_of(key), service.held_ips.clone()));
    }
    *written_back = still_unread;
    out
}

async fn write(client: &Client, key: &str, addresses: &[IpAddr]) -> Result<(), kube::Error> {
    let (namespace, name) = key.split_once('/').unwrap_or(("default", key));
    let api: Api<ServiceObject> = Api::namespaced(client.clone(), namespace);
    let ingress: Vec<_> = addresses.iter().map(|ip| json!({ "ip": ip.to_string() })).collect();
    let status = json!({
        "apiVersion": "v1",
        "kind": "Service",
        "status": { "loadBalancer": { "ingress": ingress } },
    });
    let params = PatchParams::apply(FIELD_MANAGER).force();
    api.patch_status(name, &params, &Patch::Apply(&status)).await.map(|_| ())
}

#[cfg(test)]
mod tests {
    use std::net::IpAddr;
    use std::path::Path;
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    use super::{differing, Written, WrittenBack, READ_BACK_WITHIN};
    use crate::announce::allocate::tests_support::{pool, service};
    use crate::announce::{allocate, Announcements};
    use crate::config::announce::{AnnounceConfig, Service};

    /// The API's Service `shop/web` with the status `held`.
    fn web(held: &[IpAddr]) -> Arc<Service> {
        let mut web = service("shop", "web");
        web.held_ips = held.iter().copied().collect();
        web.sources = smallvec::smallvec![Arc::from(Path::new("kubernetes:Service/shop/web"))];
        Arc::new(web)
    }

    fn announcements(web: Arc<Service>) -> Announcements {
        let config = AnnounceConfig {
            pools: vec![pool("vips", &["192.0.2.0/28"])],
            services: vec![web],
            ..Default::default()
        };
        let allocation = Arc::new(allocate(&config.pools, &config.services));
        Announcements { allocation, config: Arc::new(config), ..Default::default() }
    }

    /// A status is written where the config's differs, once until the config reads it back,
    /// even when the Service is read again meanwhile for another reason; again when it is
    /// not read back in time, or when it is reset after it was.
    #[test]
    fn a_status_is_written_once_until_it_is_read_back() {
        let start = Instant::now();
        let mut written_back = WrittenBack::default();
        let unread = announcements(web(&[]));
        let first = differing(&unread, &mut written_back, start);
        let [(key, addresses, replaced)] = first.as_slice() else { panic!("{first:?}") };
        assert_eq!((&**key, replaced.as_slice()), ("shop/web", &[][..]));
        let address = *addresses.first().expect("an address");
        let write =
            || Written { replaced: replaced.clone(), addresses: addresses.clone(), at: start };
        written_back.insert(key.clone(), write());

        assert!(differing(&unread, &mut written_back, start).is_empty(), "written already");
        let read_again = announcements(web(&[]));
        assert!(differing(&read_again, &mut written_back, start).is_empty(), "read again");
        let late = start + READ_BACK_WITHIN + Duration::from_secs(1);
        let mut not_back_in_time = WrittenBack::default();
        not_back_in_time.insert(key.clone(), write());
        assert_eq!(differing(&read_again, &mut not_back_in_time, late).len(), 1, "too late");

        let read_back = announcements(web(&[address]));
        assert!(differing(&read_back, &mut written_back, start).is_empty(), "read back");
        assert!(written_back.is_empty(), "forgotten once read back");
        let reset = announcements(web(&[]));
        assert_eq!(differing(&reset, &mut written_back, start).len(), 1, "reset after");
    }
}
