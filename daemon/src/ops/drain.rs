//! `uplink drain` / `undrain`, and the drain before a shutdown or reboot.
//!
//! A drain is two steps (RFC 8326): everything the node originates is re-announced with
//! GRACEFUL_SHUTDOWN (65535:0) and LOCAL_PREF 0, so the fabric moves traffic to other paths
//! while this node still serves; after `drain_time` the service addresses are withdrawn. An
//! operator's drain is recorded in the state directory, so a daemon restart (an upgrade in a
//! maintenance window) comes back drained; a drain for a shutdown is not recorded, so the node
//! serves again after its reboot.
//!
//! What the daemon's stop does next depends on which drain it was: after an operator's drain
//! (an upgrade, a restart in a maintenance window) it stops for a graceful restart like any
//! other stop, so the peers keep the prefixes the drain kept (pod subnets, EgressIPs) and the
//! kernel keeps the learned routes; after a drain for a shutdown the node is going away, and
//! every session ends with a Cease.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;
use tokio::sync::{mpsc, oneshot, watch};
use tokio::time::Instant;
use tracing::info;

use crate::announce::runtime::{AnnouncerHandle, DrainPhase};

/// How a drain request ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Outcome {
    /// Service addresses are withdrawn.
    Drained,
    /// GRACEFUL_SHUTDOWN is announced; the withdrawal follows after `drain_time`.
    Draining,
    /// An `undrain` came first.
    Cancelled,
    /// Serving again (the answer to `undrain`).
    Serving,
}

enum Request {
    Drain { record: bool, wait: bool, reply: oneshot::Sender<Result<Outcome, String>> },
    Undrain { reply: oneshot::Sender<Result<Outcome, String>> },
    DrainTime(Duration),
}

/// A handle to the drain task.
#[derive(Clone)]
pub struct DrainHandle {
    tx: mpsc::Sender<Request>,
    phase: watch::Receiver<DrainPhase>,
    /// A drain for a shutdown was asked for (and not undone by `undrain`).
    for_shutdown: Arc<AtomicBool>,
}

const GONE: &str = "the drain task has stopped";

impl DrainHandle {
    /// Starts draining. `reason`: an operator's drain is kept across a daemon restart, a drain
    /// for a shutdown is not (and ends the sessions when the daemon stops). `wait`: answer once
    /// the service addresses are withdrawn, else once GRACEFUL_SHUTDOWN is out.
    pub async fn drain(&self, reason: DrainReason, wait: bool) -> Result<Outcome, String> {
        let (reply, rx) = oneshot::channel();
        let record = reason == DrainReason::Operator;
        if reason == DrainReason::Shutdown {
            self.for_shutdown.store(true, Ordering::Relaxed);
        }
        self.tx.send(Request::Drain { record, wait, reply }).await.map_err(|_| GONE)?;
        rx.await.map_err(|_| GONE.to_string())?
    }

    /// Announces everything again, without GRACEFUL_SHUTDOWN; forgets a recorded drain.
    pub async fn undrain(&self) -> Result<Outcome, String> {
        self.for_shutdown.store(false, Ordering::Relaxed);
        let (reply, rx) = oneshot::channel();
        self.tx.send(Request::Undrain { reply }).await.map_err(|_| GONE)?;
        rx.await.map_err(|_| GONE.to_string())?
    }

    /// Where the node is now.
    pub fn phase(&self) -> DrainPhase {
        *self.phase.borrow()
    }

    /// Whether the node drains because it is going away (a shutdown or reboot): its stop then
    /// gives up graceful restart. An operator's drain does not.
    pub fn for_shutdown(&self) -> bool {
        self.for_shutdown.load(Ordering::Relaxed)
    }

    /// A reloaded `drain_time`, for the next drain.
    pub async fn set_drain_time(&self, drain_time: Duration) {
        let _ = self.tx.send(Request::DrainTime(drain_time)).await;
    }
}

/// Why the node drains.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DrainReason {
    /// `uplink drain`: maintenance, an upgrade. Recorded, so a daemon restart comes back
    /// drained; the restart itself is graceful (RFC 4724).
    Operator,
    /// A shutdown or reboot (logind's PrepareForShutdown, `uplink drain --shutdown`): not
    /// recorded; the daemon's stop ends every session with a Cease.
    Shutdown,
}

/// Where an operator's drain is recorded.
pub fn marker(state_dir: &Path) -> PathBuf {
    state_dir.join("drained")
}

/// The phase the daemon starts in: drained when an operator's drain was recorded.
pub fn initial_phase(marker: &Path) -> DrainPhase {
    if marker.exists() {
        DrainPhase::Drained
    } else {
        DrainPhase::Serving
    }
}

/// Starts the drain task. `phase` is the announcer's phase at start.
pub fn spawn(
    announcer: AnnouncerHandle,
    marker: PathBuf,
    drain_time: Duration,
    phase: DrainPhase,
) -> DrainHandle {
    let (tx, rx) = mpsc::channel(16);
    let (phase_tx, phase_rx) = watch::channel(phase);
    let task = Drainer {
        announcer,
        marker,
        drain_time,
        phase,
        published: phase_tx,
        withdraw_at: None,
        waiting: Vec::new(),
    };
    tokio::spawn(task.run(rx));
    DrainHandle { tx, phase: phase_rx, for_shutdown: Arc::new(AtomicBool::new(false)) }
}

struct Drainer {
    announcer: AnnouncerHandle,
    marker: PathBuf,
    drain_time: Duration,
    phase: DrainPhase,
    published: watch::Sender<DrainPhase>,
    /// While draining: when the service addresses go.
    withdraw_at: Option<Instant>,
    /// Requests answered when the withdrawal is done (or cancelled).
    waiting: Vec<oneshot::Sender<Result<Outcome, String>>>,
}

impl Drainer {
    async fn run(mut self, mut rx: mpsc::Receiver<Request>) {
        loop {
            let timer = self.withdraw_at;
            tokio::select! {
                request = rx.recv() => match request {
                    Some(request) => self.handle(request).await,
                    None => return,
                },
                _ = sleep_until(timer) => self.withdraw().await,
            }
        }
    }

    async fn handle(&mut self, request: Request) {
        match request {
            Request::DrainTime(drain_time) => self.drain_time = drain_time,
            Request::Drain { record, wait, reply } => {
                if record {
                    if let Err(e) =
                        crate::state_file::write(&self.marker, b"drained by `uplink drain`\n")
                    {
                        let _ = reply.send(Err(format!(
                            "cannot record the drain in {}: {e}",
                            self.marker.display()
                        )));
                        return;
                    }
                }
                match self.phase {
                    DrainPhase::Drained => {
                        let _ = reply.send(Ok(Outcome::Drained));
                    }
                    DrainPhase::Draining => self.answer(reply, wait),
                    DrainPhase::Serving => {
                        info!(
                            drain_time = ?self.drain_time,
                            "draining: announcing GRACEFUL_SHUTDOWN (RFC 8326), service \
                             addresses withdrawn after drain_time"
                        );
                        self.phase = DrainPhase::Draining;
                        self.announcer.set_drain(self.phase).await;
                        self.published.send_replace(self.phase);
                        self.withdraw_at = Some(Instant::now() + self.drain_time);
                        self.answer(reply, wait);
                    }
                }
            }
            Request::Undrain { reply } => {
                let recorded = crate::state_file::remove(&self.marker);
                if let Err(e) = recorded {
                    let _ = reply.send(Err(format!(
                        "cannot remove the drain record {}: {e}",
                        self.marker.display()
                    )));
                    return;
                }
                if self.phase != DrainPhase::Serving {
                    info!("undrained: announcing everything again");
                }
                self.phase = DrainPhase::Serving;
                self.withdraw_at = None;
                self.announcer.set_drain(self.phase).await;
                self.published.send_replace(self.phase);
                for waiting in self.waiting.drain(..) {
                    let _ = waiting.send(Ok(Outcome::Cancelled));
                }
                let _ = reply.send(Ok(Outcome::Serving));
            }
        }
    }

    fn answer(&mut self, reply: oneshot::Sender<Result<Outcome, String>>, wait: bool) {
        if wait {
            self.waiting.push(reply);
        } else {
            let _ = reply.send(Ok(Outcome::Draining));
        }
    }

    async fn withdraw(&mut self) {
        self.withdraw_at = None;
        if self.phase != DrainPhase::Draining {
            return;
        }
        info!("drained: service addresses withdrawn");
        self.phase = DrainPhase::Drained;
        self.announcer.set_drain(self.phase).await;
        self.published.send_replace(self.phase);
        for waiting in self.waiting.drain(..) {
            let _ = waiting.send(Ok(Outcome::Drained));
        }
    }
}

async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}
