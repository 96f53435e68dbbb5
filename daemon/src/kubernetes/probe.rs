//! Finding the API server back: while a watch is failing, its `/readyz` is asked every second,
//! and every failing kind lists at once when the server answers again (its lists may be served
//! before it says it is ready) and again when it is ready. The kinds' own back-off (up to
//! `RETRY_MAX`) then only paces a kind that fails while the server is up; without the probe, a
//! server back after a long outage was seen only at each kind's next retry, seconds later. One
//! small request per node is also lighter on a recovering server than sixteen kinds retrying
//! their lists.

use std::sync::atomic::{AtomicU64, Ordering};
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

/// The API server's returns (the probe found it answering or ready, or a kind listed again
/// after failing): the kinds waiting out a back-off are woken, and the returns are counted, so
/// a kind whose list was under way at the moment (and then failed) still learns of it rather
/// than waiting out a back-off grown during the outage.
#[derive(Default)]
pub(super) struct Returns {
    wake: Notify,
    count: AtomicU64,
}

impl Returns {
    /// The server is back.
    pub fn announce(&self) {
        self.count.fetch_add(1, Ordering::SeqCst);
        self.wake.notify_waiters();
    }

    /// How many returns were announced so far: compared before and after a kind's attempt.
    pub fn count(&self) -> u64 {
        self.count.load(Ordering::SeqCst)
    }

    /// Wakes at the next return (to be enabled before the count is read, so that none falls
    /// between the two).
    pub fn next(&self) -> tokio::sync::futures::Notified<'_> {
        self.wake.notified()
    }
}

/// How the API server answered a probe, from worst to best.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Answer {
    /// No answer: the connection refused, reset or left unanswered.
    None,
    /// It answers HTTP, and `/readyz` says it is not ready (etcd away, caches not built): its
    /// lists may already be served.
    NotReady,
    Ready,
}

/// Waits for a watch to fail (`failed`), then probes the server until it is ready. Each time
/// its answer gets better than the one before (it answers at all, then it is ready), the
/// failing kinds are woken (`returned`) and list at once, their back-off begun again. A
/// watch that fails while the server is ready at the first probe (a `410 Gone`, a kind's own
/// error) keeps its back-off.
pub(super) async fn run(client: Client, failed: &Notify, returned: &Returns, health: &Health) {
    loop {
        failed.notified().await;
        let mut last: Option<Answer> = None;
        loop {
            let (answer, why) = probe(&client).await;
            if last.is_some_and(|last| answer > last) {
                info!(?answer, "the API server answers again; every failing kind lists now");
                returned.announce();
            }
            if answer == Answer::Ready {
                health::update(health, |h| {
                    h.server_not_ready_since = None;
                    h.server_not_ready = None;
                });
                break;
            }
            if last.is_none() {
                info!("the API server is not ready ({why}); asking its /readyz every second");
            }
            last = Some(answer);
            health::update(health, |h| {
                h.server_not_ready_since.get_or_insert_with(health::unix_now);
                h.server_not_ready = Some(why);
            });
            tokio::time::sleep(PROBE_EVERY.mul_f64(rand::random_range(0.75..1.0))).await;
        }
    }
}

/// Asks `/readyz`: ready when it answers 200, or refuses uplink the path (401, 403, which a
/// cluster that took `/readyz` from `system:public-info-viewer` answers — the server is up and
/// serving either way); with why not.
async fn probe(client: &Client) -> (Answer, String) {
    let request = match http::Request::get("/readyz").body(Vec::new()) {
        Ok(request) => request,
        // A constant path and no headers cannot fail to build; were it ever to, the probe
        // steps aside (as for a server that is ready) and the kinds keep their own back-off.
        Err(e) => return (Answer::Ready, format!("cannot build the /readyz request: {e}")),
    };
    match tokio::time::timeout(PROBE_TIMEOUT, client.request_text(request)).await {
        Err(_) => (Answer::None, format!("no answer in {} s", PROBE_TIMEOUT.as_secs())),
        Ok(Ok(_)) => (Answer::Ready, String::new()),
        Ok(Err(kube::Error::Api(status))) if matches!(status.code, 401 | 403) => {
            (Answer::Ready, String::new())
        }
        Ok(Err(kube::Error::Api(status))) => {
            (Answer::NotReady, format!("/readyz answered {}: {}", status.code, status.message))
        }
        Ok(Err(error)) => (Answer::None, error.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::Returns;

    /// A kind waiting is woken by a return; one whose list was under way misses the wake-up
    /// but finds the count moved.
    #[tokio::test]
    async fn a_return_wakes_the_waiting_and_is_counted_for_the_busy() {
        let returns = Returns::default();
        let before_its_list = returns.count();
        let waiting = returns.next();
        tokio::pin!(waiting);
        waiting.as_mut().enable();
        returns.announce();
        let woke = tokio::time::timeout(Duration::from_secs(1), waiting).await;
        assert!(woke.is_ok(), "the waiting kind was not woken");
        assert_ne!(returns.count(), before_its_list, "the busy kind cannot tell");
    }
}
