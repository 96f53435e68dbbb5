//! Finding the API server back: while a watch is failing, its `/readyz` is asked every second,
//! and the moment it answers again every failing kind lists at once. The kinds' own back-off
//! (up to `RETRY_MAX`) then only paces a kind that fails while the server is up; without the
//! probe, a server back after a long outage was seen only at each kind's next retry, seconds
//! later. One small request per node is also lighter on a recovering server than fifteen kinds
//! retrying their lists.

use std::time::Duration;

use kube::Client;
use tokio::sync::Notify;
use tracing::info;

use super::health::{self, Health};

/// How often `/readyz` is asked while the server does not answer it (with up to a quarter of
/// jitter, so a fleet does not ask all at once).
const PROBE_EVERY: Duration = Duration::from_secs(1);
/// How long one probe waits for its answer: a server that is away may not refuse the
/// connection but leave it unanswered.
const PROBE_TIMEOUT: Duration = Duration::from_secs(2);

/// Waits for a watch to fail (`failed`), then probes the server until it is ready, and wakes
/// the failing kinds (`returned`) if it was not ready at first: a watch that fails while the
/// server answers (a `410 Gone`, a kind's own error) keeps its back-off.
pub(super) async fn run(client: Client, failed: &Notify, returned: &Notify, health: &Health) {
    loop {
        failed.notified().await;
        let mut away = false;
        while let Err(why) = ready(&client).await {
            if !away {
                info!("the API server is not ready ({why}); asking its /readyz every second");
                away = true;
            }
            health::update(health, |h| {
                h.server_not_ready_since.get_or_insert_with(health::unix_now);
                h.server_not_ready = Some(why);
            });
            tokio::time::sleep(PROBE_EVERY.mul_f64(rand::random_range(0.75..1.0))).await;
        }
        if away {
            info!("the API server is ready again; every failing kind lists now");
            health::update(health, |h| {
                h.server_not_ready_since = None;
                h.server_not_ready = None;
            });
            returned.notify_waiters();
        }
    }
}

/// Whether the server is ready: `/readyz` answers 200, or refuses uplink the path (401, 403,
/// which a cluster that took `/readyz` from `system:public-info-viewer` answers — the server is
/// up and serving either way).
async fn ready(client: &Client) -> Result<(), String> {
    let request = http::Request::get("/readyz").body(Vec::new()).map_err(|e| e.to_string())?;
    match tokio::time::timeout(PROBE_TIMEOUT, client.request_text(request)).await {
        Err(_) => Err(format!("no answer in {} s", PROBE_TIMEOUT.as_secs())),
        Ok(Ok(_)) => Ok(()),
        Ok(Err(kube::Error::Api(status))) if matches!(status.code, 401 | 403) => Ok(()),
        Ok(Err(error)) => Err(error.to_string()),
    }
}
