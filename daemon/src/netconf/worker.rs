//! The daemon's network-policy thread (`uplink-netconf`): applies policies with nmstate on a
//! current-thread tokio runtime of its own.
//!
//! Why a thread: an apply takes seconds (probes before, NetworkManager's checkpoint, probes
//! after, maybe a rollback), and nmstate's futures are not `Send`, so they cannot run on the
//! daemon's multi-thread runtime. The daemon sends one [`Job`] at a time through a bounded
//! channel and waits for its enactments on a oneshot; sessions, BFD and the FIB never wait
//! on it.

use std::sync::Arc;

use tokio::sync::{mpsc, oneshot};
use tracing::error;

use crate::config::Config;

use super::apply::{apply_policies, undo_policies, ApplyOptions, PolicyRun};

/// Jobs queued at most: an apply and its undo; a further reload waits for room (reloads are
/// serialized by the reloader anyway).
pub const QUEUE: usize = 2;

/// The policies a run applied, with the states that undo them (`PolicyRun::applied`).
pub type Applied = Vec<(String, Option<serde_json::Value>)>;

/// One request to the thread.
enum Job {
    /// Apply the config's selected policies; the reply says what the run did.
    Apply { config: Arc<Config>, options: ApplyOptions, reply: oneshot::Sender<PolicyRun> },
    /// Undo what a run applied (its reload was refused); the reply lists what could not be.
    Undo {
        config: Arc<Config>,
        applied: Applied,
        reason: String,
        reply: oneshot::Sender<Vec<String>>,
    },
}

/// The sending side; cheap to clone.
#[derive(Clone)]
pub struct NetconfWorker {
    jobs: mpsc::Sender<Job>,
}

impl NetconfWorker {
    /// Starts the thread.
    pub fn spawn() -> Result<NetconfWorker, String> {
        let (jobs, mut inbox) = mpsc::channel::<Job>(QUEUE);
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| format!("cannot start the network policy runtime: {e}"))?;
        std::thread::Builder::new()
            .name("uplink-netconf".into())
            .spawn(move || {
                runtime.block_on(async move {
                    while let Some(job) = inbox.recv().await {
                        match job {
                            Job::Apply { config, options, reply } => {
                                let run = apply_policies(&config, options).await;
                                // The daemon may have stopped waiting (its bound passed):
                                // the enactments are on disk either way.
                                let _ = reply.send(run);
                            }
                            Job::Undo { config, applied, reason, reply } => {
                                let _ = reply.send(undo_policies(&config, &applied, &reason).await);
                            }
                        }
                    }
                });
                error!("the network policy thread stopped");
            })
            .map_err(|e| format!("cannot start the network policy thread: {e}"))?;
        Ok(NetconfWorker { jobs })
    }

    /// Queues an apply; the receiver yields what the run did when it is done.
    pub async fn apply(
        &self,
        config: Arc<Config>,
        options: ApplyOptions,
    ) -> Result<oneshot::Receiver<PolicyRun>, String> {
        let (reply, done) = oneshot::channel();
        self.jobs
            .send(Job::Apply { config, options, reply })
            .await
            .map_err(|_| "the network policy thread has stopped".to_string())?;
        Ok(done)
    }

    /// Undoes what a run applied; returns the policies that could not be undone.
    pub async fn undo(
        &self,
        config: Arc<Config>,
        applied: Applied,
        reason: String,
    ) -> Result<Vec<String>, String> {
        let (reply, done) = oneshot::channel();
        let gone = || "the network policy thread has stopped".to_string();
        self.jobs.send(Job::Undo { config, applied, reason, reply }).await.map_err(|_| gone())?;
        done.await.map_err(|_| gone())
    }
}
