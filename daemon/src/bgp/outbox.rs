//! The queue between a session and the task that writes its TCP connection. The session never
//! waits on it: the FSM's own messages (OPEN, KEEPALIVE, NOTIFICATION: a handful, bounded by
//! the SendHoldTimer) always go in; UPDATEs go in only while the queue holds less than
//! [`UPDATE_ROOM`] bytes, and the rest waits, coalescing, in the Adj-RIB-Out. The writer
//! records when its writes last made progress, which is what the SendHoldTimer (RFC 9687)
//! watches.
//!
//! A `tokio::sync::mpsc` channel was passed over: its bound counts messages, not bytes, and
//! a full one makes the sender wait (or drop) even a NOTIFICATION.

use std::collections::VecDeque;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Instant;
use tokio::io::AsyncWriteExt;
use tokio::sync::Notify;

/// UPDATEs are queued only while less than this is waiting to be written.
pub const UPDATE_ROOM: usize = 256 * 1024;

#[derive(Default)]
struct State {
    queue: VecDeque<Vec<u8>>,
    bytes: usize,
    /// No more messages: the writer writes what is queued, then shuts the connection down.
    closed: bool,
    /// When a write last made progress (or the queue was last found empty).
    progress: Option<Instant>,
}

#[derive(Default)]
pub struct Outbox {
    state: Mutex<State>,
    /// Wakes the writer: a message was queued, or the outbox was closed.
    queued: Notify,
    /// Wakes the session: room for UPDATEs again.
    room: Notify,
}

/// How many BGP messages `bytes` holds, by walking their headers' Length fields.
fn count_messages(bytes: &[u8]) -> usize {
    let mut count = 0;
    let mut at = 0;
    while let Some(&[high, low]) = bytes.get(at + 16..at + 18) {
        let length = usize::from(u16::from_be_bytes([high, low]));
        if length == 0 {
            break;
        }
        count += 1;
        at += length;
    }
    count
}

impl Outbox {
    fn state(&self) -> MutexGuard<'_, State> {
        // Pushes and pops only: a panic elsewhere cannot leave it half-changed.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Queues a message whatever the queue holds (the FSM's own messages).
    pub fn push(&self, message: Vec<u8>) {
        let mut state = self.state();
        if state.closed {
            return;
        }
        if state.bytes == 0 {
            // Data waits from now on: the SendHoldTimer counts from the last progress, not
            // from an idle stretch before it.
            state.progress = Some(Instant::now());
        }
        state.bytes = state.bytes.saturating_add(message.len());
        state.queue.push_back(message);
        drop(state);
        self.queued.notify_one();
    }

    /// Whether UPDATEs may be queued now.
    pub fn has_room(&self) -> bool {
        self.state().bytes < UPDATE_ROOM
    }

    /// Resolves once UPDATEs may be queued.
    pub async fn room(&self) {
        loop {
            let notified = self.room.notified();
            if self.has_room() {
                return;
            }
            notified.await;
        }
    }

    /// When the writes last made progress; `now` while nothing is waiting to be written (a
    /// message the writer has taken counts as waiting until it is written whole).
    pub fn progress(&self, now: Instant) -> Instant {
        let state = self.state();
        if state.bytes == 0 {
            now
        } else {
            state.progress.unwrap_or(now)
        }
    }

    /// Bytes waiting to be written.
    pub fn queued_bytes(&self) -> usize {
        self.state().bytes
    }

    /// BGP messages waiting to be written (FRR's `outq`): a queued write may hold several
    /// UPDATEs back to back, each with its header's length (RFC 4271 §4.1).
    pub fn queued_messages(&self) -> usize {
        let state = self.state();
        state.queue.iter().map(|write| count_messages(write)).sum()
    }

    /// No more messages; the writer finishes what is queued and shuts the connection down.
    pub fn close(&self) {
        self.state().closed = true;
        self.queued.notify_one();
    }

    fn next(&self) -> Option<Option<Vec<u8>>> {
        let mut state = self.state();
        match state.queue.pop_front() {
            Some(message) => Some(Some(message)),
            None if state.closed => Some(None),
            None => None,
        }
    }

    fn written(&self, bytes: usize, done_message: bool) {
        let mut state = self.state();
        state.progress = Some(Instant::now());
        if done_message {
            let before = state.bytes;
            state.bytes = state.bytes.saturating_sub(bytes);
            if before >= UPDATE_ROOM && state.bytes < UPDATE_ROOM {
                self.room.notify_one();
            }
        }
    }

    /// The writer task: writes each message as it comes, recording every partial write as
    /// progress, until the outbox is closed and empty or the connection fails.
    pub async fn write_to(&self, mut socket: impl tokio::io::AsyncWrite + Unpin) {
        loop {
            let notified = self.queued.notified();
            let message = match self.next() {
                Some(Some(message)) => message,
                Some(None) => break,
                None => {
                    notified.await;
                    continue;
                }
            };
            let mut rest: &[u8] = &message;
            while !rest.is_empty() {
                match socket.write(rest).await {
                    Ok(0) | Err(_) => return,
                    Ok(n) => {
                        rest = rest.get(n..).unwrap_or_default();
                        self.written(n, false);
                    }
                }
            }
            self.written(message.len(), true);
        }
        let _ = socket.shutdown().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::time::Duration;

    #[tokio::test]
    async fn a_reader_that_stops_fills_the_room_but_never_blocks_the_sender() {
        // A pipe with a small buffer stands in for a peer whose TCP window is zero.
        let (ours, mut theirs) = tokio::io::duplex(1024);
        let outbox = Arc::new(Outbox::default());
        let writer = tokio::spawn({
            let outbox = outbox.clone();
            async move { outbox.write_to(ours).await }
        });
        let start = Instant::now();
        while outbox.has_room() {
            outbox.push(vec![0; 4096]);
        }
        // The FSM's messages still go in at once.
        outbox.push(vec![1; 19]);
        assert!(start.elapsed() < Duration::from_secs(1));
        tokio::time::sleep(Duration::from_millis(50)).await;
        let later = Instant::now();
        // Nothing written lately: progress stays in the past.
        assert!(outbox.progress(later) < later);
        // The peer reads again: room comes back, and the writer finishes.
        let reader = tokio::spawn(async move {
            let mut sink = Vec::new();
            let _ = tokio::io::AsyncReadExt::read_to_end(&mut theirs, &mut sink).await;
            sink.len()
        });
        tokio::time::timeout(Duration::from_secs(5), outbox.room()).await.unwrap();
        outbox.close();
        writer.await.unwrap();
        let total = reader.await.unwrap();
        assert!(total > UPDATE_ROOM, "{total}");
        assert_eq!(outbox.queued_bytes(), 0);
    }
}
