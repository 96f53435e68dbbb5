//! The daemon side of the control socket. The socket is created mode 0600 (root-only): it
//! exposes the whole routing state.

use super::protocol::{parse_request, Request, Response};
use crate::logthrottle::{held_back_note, LogThrottle, LOG_PERIOD};
use std::future::Future;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::Semaphore;
use tracing::warn;

/// The largest request line: a request is a command and a few arguments.
pub const MAX_REQUEST: u64 = 64 * 1024;
/// How long a client may take to send its request line.
const READ_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a client may take to read the answer (a large `show` is a few MiB).
const WRITE_TIMEOUT: Duration = Duration::from_secs(30);
/// Connections served at once; more wait in the listen backlog.
const MAX_CONNECTIONS: usize = 64;
/// After an accept error (EMFILE, ENFILE, ENOMEM: the same error at once again), wait this
/// long instead of spinning.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);

/// Binds `path` (replacing a stale socket file) and serves requests with `handler` until the
/// task is dropped. Requests are capped at [`MAX_REQUEST`] bytes and must arrive within
/// [`READ_TIMEOUT`]; answers that the client does not read within [`WRITE_TIMEOUT`] are
/// dropped with the connection.
pub fn serve<H, F>(path: &Path, handler: H) -> std::io::Result<tokio::task::JoinHandle<()>>
where
    H: Fn(Request) -> F + Send + Sync + 'static,
    F: Future<Output = Result<serde_json::Value, String>> + Send + 'static,
{
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    if path.exists() {
        std::fs::remove_file(path)?;
    }
    let listener = UnixListener::bind(path)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))?;
    let handler = Arc::new(handler);
    let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    Ok(tokio::spawn(async move {
        let mut accept_errors = LogThrottle::new(LOG_PERIOD);
        loop {
            let Ok(slot) = slots.clone().acquire_owned().await else { return };
            let stream = match listener.accept().await {
                Ok((stream, _)) => stream,
                Err(e) => {
                    if let Some(held) = accept_errors.event(Instant::now()) {
                        warn!("control socket: accept failed: {e}{}", held_back_note(held));
                    }
                    tokio::time::sleep(ACCEPT_BACKOFF).await;
                    continue;
                }
            };
            let handler = handler.clone();
            tokio::spawn(async move {
                serve_connection(stream, handler.as_ref()).await;
                drop(slot);
            });
        }
    }))
}

/// What one read of a request line gave.
enum Incoming {
    Line(Vec<u8>),
    TooLarge,
    /// End of stream, an error or a client too slow to send its request.
    Done,
}

async fn read_request(reader: &mut BufReader<tokio::net::unix::OwnedReadHalf>) -> Incoming {
    let mut line = Vec::new();
    let mut limited = (&mut *reader).take(MAX_REQUEST + 1);
    let read = limited.read_until(b'\n', &mut line);
    match tokio::time::timeout(READ_TIMEOUT, read).await {
        Ok(Ok(0)) | Ok(Err(_)) | Err(_) => Incoming::Done,
        Ok(Ok(_)) if line.len() as u64 > MAX_REQUEST => Incoming::TooLarge,
        Ok(Ok(_)) => Incoming::Line(line),
    }
}

async fn serve_connection<H, F>(stream: UnixStream, handler: &H)
where
    H: Fn(Request) -> F,
    F: Future<Output = Result<serde_json::Value, String>>,
{
    let (read, mut write) = stream.into_split();
    let mut reader = BufReader::new(read);
    loop {
        let (response, last) = match read_request(&mut reader).await {
            Incoming::Done => return,
            Incoming::TooLarge => {
                (Response::Error(format!("request larger than {} KiB", MAX_REQUEST / 1024)), true)
            }
            Incoming::Line(line) => match parse_request(&line) {
                Ok(request) => match handler(request).await {
                    Ok(v) => (Response::Ok(v), false),
                    Err(e) => (Response::Error(e), false),
                },
                Err(e) => (Response::Error(e), false),
            },
        };
        let mut text = serde_json::to_string(&response).unwrap_or_default();
        text.push('\n');
        let written = tokio::time::timeout(WRITE_TIMEOUT, write.write_all(text.as_bytes())).await;
        if last || !matches!(written, Ok(Ok(()))) {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn oversized_requests_are_refused_and_the_server_keeps_serving() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.sock");
        let _server =
            serve(&path, |_request: Request| async { Ok::<_, String>(serde_json::json!("pong")) })
                .unwrap();
        // Megabytes without a newline: refused after 64 KiB, not buffered.
        let mut big = UnixStream::connect(&path).await.unwrap();
        let junk = vec![b'x'; 1 << 20];
        let _ = big.write_all(&junk).await;
        // One line: the server closes with the rest unread, so a later read may fail.
        let mut answer = String::new();
        let _ = BufReader::new(&mut big).read_line(&mut answer).await;
        assert!(answer.contains("request larger than 64 KiB"), "{answer}");
        // A client that never sends anything does not hold the others up.
        let _idle = UnixStream::connect(&path).await.unwrap();
        let mut ok = UnixStream::connect(&path).await.unwrap();
        ok.write_all(b"not json\n").await.unwrap();
        let mut line = String::new();
        BufReader::new(&mut ok).read_line(&mut line).await.unwrap();
        assert!(line.contains("bad request"), "{line}");
    }
}
