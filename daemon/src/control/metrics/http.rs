//! The HTTP side of the endpoint: `GET /metrics` and nothing else, one request per connection.
//!
//! Written here rather than with hyper: a scraper sends one GET and reads one response, which
//! takes a request line, a bounded header read and a status line; hyper and its companion
//! crates would be the largest dependency of the daemon for that (the health checks speak
//! their HTTP GET the same way, `announce::health`).
//!
//! A connection goes through two stages, each with its own bound, so that clients which
//! connect and say nothing cannot keep a scraper out:
//!
//! 1. **Request head**: the accept loop reads what a new connection has sent already; a
//!    scraper's whole head is usually there and goes straight to the answer. The others
//!    wait for the rest, up to [`MAX_PENDING_HEADS`] at once, each for [`HEAD_DEADLINE`] and
//!    at most 8 KiB. When a new one finds them all taken, the oldest connection still
//!    sending its head is closed to make room: holding a slot takes sending whole requests,
//!    and a scraper, which sends its head at once, is never the oldest for long. A
//!    connection whose whole head has been read is never closed this way ([`PendingHeads`]),
//!    nor one whose whole head has arrived by the time it learns it is evicted (on a busy
//!    machine its task may run after the head came).
//! 2. **Answer**: up to [`MAX_ANSWERING`] requests (more get 503 at once). Gathering, the
//!    expensive part, runs [`MAX_GATHERS`] at a time; a request waits for its turn (up to
//!    [`GATHER_WAIT`]) instead of being dropped, and the turn ends before the answer is
//!    written, so a client that reads slowly holds up nobody else's gather.
//!
//! Memory is bounded by these counts: at most 9 KiB per connection reading its head, one
//! answer per connection answering.

use std::collections::BTreeMap;
use std::io::{self, Read as _};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{oneshot, Semaphore};
use tracing::{debug, warn};

use super::encode::{encode, CONTENT_TYPE};
use super::gather::{gather, Sources};

/// The only path served (Prometheus's default `metrics_path`).
pub const PATH: &str = "/metrics";
/// A request head longer than this is refused (a scraper's is a few hundred bytes).
const MAX_HEAD: usize = 8 * 1024;
/// Connections still sending their request head; a new one closes the oldest of them. The
/// room a scraper has: a flood that reconnects as fast as it is closed (a few thousand a
/// second from one client) makes a connection the oldest after this many more, and a scraper
/// that a busy machine runs late must send its head before that (64 gave it 20 ms; at most
/// 2.3 MB of heads at once).
const MAX_PENDING_HEADS: usize = 256;
/// A scraper sends its whole head at once; a client slower than this is closed.
const HEAD_DEADLINE: Duration = Duration::from_secs(3);
/// Requests being answered (waiting for a gather, gathering or written to); more get 503.
const MAX_ANSWERING: usize = 64;
/// Gathers at once: each asks every RIB task and BFD thread.
const MAX_GATHERS: usize = 4;
/// How long a request waits for its turn to gather before it is answered 503 (Prometheus's
/// default scrape timeout is 10 s).
const GATHER_WAIT: Duration = Duration::from_secs(10);
/// Gathering and encoding; each question inside has a shorter deadline of its own.
const GATHER_DEADLINE: Duration = Duration::from_secs(10);
/// Writing an answer: a client that stops reading is dropped after this.
const WRITE_DEADLINE: Duration = Duration::from_secs(10);

/// What a request asks for.
#[derive(Debug, PartialEq, Eq)]
enum Route {
    /// `GET /metrics`, or `HEAD` (the same headers, no body).
    Metrics {
        body: bool,
    },
    NotFound,
    MethodNotAllowed,
    BadRequest,
}

/// Reads the request line of `head` (RFC 9112 §3: method SP target SP version).
fn route(head: &[u8]) -> Route {
    let line = head.split(|b| *b == b'\n').next().unwrap_or_default();
    let Ok(line) = std::str::from_utf8(line) else { return Route::BadRequest };
    let mut parts = line.trim_end_matches('\r').split(' ');
    let (Some(method), Some(target), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Route::BadRequest;
    };
    if !version.starts_with("HTTP/1.") {
        return Route::BadRequest;
    }
    let body = match method {
        "GET" => true,
        "HEAD" => false,
        _ => return Route::MethodNotAllowed,
    };
    // The query string (`?name[]=...`) is ignored: every family is always sent.
    let path = target.split('?').next().unwrap_or_default();
    if path == PATH {
        Route::Metrics { body }
    } else {
        Route::NotFound
    }
}

fn response(status: &str, content_type: &str, body: &str, send_body: bool, extra: &str) -> Vec<u8> {
    let mut out = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\n{extra}Connection: close\r\n\r\n",
        body.len()
    )
    .into_bytes();
    if send_body {
        out.extend_from_slice(body.as_bytes());
    }
    out
}

fn text_response(status: &str, body: &str, extra: &str) -> Vec<u8> {
    response(status, "text/plain; charset=utf-8", body, true, extra)
}

/// Whether `head` holds a whole request head (up to its blank line); an error once it is
/// longer than [`MAX_HEAD`] without one.
fn head_complete(head: &[u8]) -> io::Result<bool> {
    if head.windows(4).any(|w| w == b"\r\n\r\n") || head.windows(2).any(|w| w == b"\n\n") {
        return Ok(true);
    }
    if head.len() > MAX_HEAD {
        return Err(io::Error::new(io::ErrorKind::InvalidData, "request head too long"));
    }
    Ok(false)
}

/// Adds what has arrived on `stream` to `head` without waiting; whether the head is whole.
/// It reads the socket directly: tokio learns that a new socket is readable only on the
/// reactor's next turn.
fn read_arrived(stream: &TcpStream, head: &mut Vec<u8>) -> io::Result<bool> {
    let socket = socket2::SockRef::from(stream);
    let mut buf = [0u8; 1024];
    loop {
        if head_complete(head)? {
            return Ok(true);
        }
        match (&*socket).read(&mut buf) {
            Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
            Ok(n) => head.extend_from_slice(buf.get(..n).unwrap_or_default()),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
}

/// Adds to `head` up to the blank line that ends the request head.
async fn read_head(stream: &mut TcpStream, head: &mut Vec<u8>) -> io::Result<()> {
    let mut buf = [0u8; 1024];
    while !head_complete(head)? {
        let n = stream.read(&mut buf).await?;
        if n == 0 {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        head.extend_from_slice(buf.get(..n).unwrap_or_default());
    }
    Ok(())
}

/// The connections still sending their request head, each seen without a whole head when
/// it was accepted: a connection's slot is taken then and given back when its head is whole
/// or it ends. Making room evicts the oldest, by dropping its sender; the connection closes
/// itself only if its head is still incomplete when it sees that, so a whole head that has
/// been read is always answered.
#[derive(Default)]
struct PendingHeads {
    inner: Mutex<Pending>,
}

#[derive(Default)]
struct Pending {
    next: u64,
    /// Accept order → the connection's eviction signal (dropped to evict).
    waiting: BTreeMap<u64, oneshot::Sender<()>>,
}

/// A connection's place among those sending their head; dropping it gives the place back.
struct HeadSlot {
    heads: Arc<PendingHeads>,
    id: u64,
}

impl PendingHeads {
    /// Takes a slot for a new connection, evicting the oldest to stay within `max`. The
    /// receiver resolves when this connection is evicted in turn.
    fn admit(self: &Arc<Self>, max: usize) -> (HeadSlot, oneshot::Receiver<()>) {
        let (evict, evicted) = oneshot::channel();
        let mut pending = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        while pending.waiting.len() >= max && pending.waiting.pop_first().is_some() {}
        let id = pending.next;
        pending.next += 1;
        pending.waiting.insert(id, evict);
        (HeadSlot { heads: Arc::clone(self), id }, evicted)
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner).waiting.len()
    }
}

impl Drop for HeadSlot {
    fn drop(&mut self) {
        // Already gone when this connection was evicted: nothing to give back then.
        let mut pending = self.heads.inner.lock().unwrap_or_else(PoisonError::into_inner);
        pending.waiting.remove(&self.id);
    }
}

/// The limits shared by every connection of one listener.
struct Limits {
    heads: Arc<PendingHeads>,
    answering: Arc<Semaphore>,
    gathers: Semaphore,
}

/// How a request head ended.
#[derive(Debug)]
enum Head {
    Complete(Vec<u8>),
    TooLong,
}

/// What the accept loop found on a new connection.
enum Arrived {
    /// A whole head (or too long a one): straight to stage 2.
    Head(Head),
    /// Part of a head, or nothing yet: stage 1 reads the rest, holding `slot`.
    Part { head: Vec<u8>, slot: HeadSlot, evicted: oneshot::Receiver<()> },
}

/// Stage 1: the rest of the request head, within [`HEAD_DEADLINE`], unless a newer
/// connection evicts this one first. `None`: the connection is to be closed unanswered.
async fn receive_head(
    stream: &mut TcpStream,
    mut head: Vec<u8>,
    slot: HeadSlot,
    evicted: oneshot::Receiver<()>,
    from: std::net::SocketAddr,
) -> Option<Head> {
    let read = tokio::select! {
        // The head first: a head that is whole wins over an eviction seen in the same poll.
        biased;
        read = tokio::time::timeout(HEAD_DEADLINE, read_head(stream, &mut head)) => read,
        _ = evicted => {
            // The head may have come while this task waited to run: answered then.
            match read_arrived(stream, &mut head) {
                Ok(true) => return Some(Head::Complete(head)),
                Err(e) if e.kind() == io::ErrorKind::InvalidData => return Some(Head::TooLong),
                _ => {}
            }
            debug!(%from, "metrics: {MAX_PENDING_HEADS} connections without a whole request; closed the oldest");
            return None;
        }
    };
    // From here on this connection is no longer among those that can be evicted.
    drop(slot);
    match read {
        Ok(Ok(())) => Some(Head::Complete(head)),
        Ok(Err(e)) if e.kind() == io::ErrorKind::InvalidData => Some(Head::TooLong),
        Ok(Err(e)) => {
            debug!(%from, "metrics: {e}");
            None
        }
        Err(_) => {
            debug!(%from, "metrics: no whole request head within {HEAD_DEADLINE:?}; closed");
            None
        }
    }
}

/// Stage 2 for `GET`/`HEAD /metrics`: waits for a turn to gather, gathers, encodes.
async fn metrics_reply(limits: &Limits, sources: &Sources, body: bool) -> Vec<u8> {
    let busy =
        || text_response("503 Service Unavailable", "busy; try again\n", "Retry-After: 1\r\n");
    let Ok(Ok(turn)) = tokio::time::timeout(GATHER_WAIT, limits.gathers.acquire()).await else {
        return busy();
    };
    let text =
        tokio::time::timeout(GATHER_DEADLINE, async { encode(&gather(sources).await) }).await;
    // The turn ends before the (possibly slow) write.
    drop(turn);
    match text {
        Ok(Ok(text)) => response("200 OK", CONTENT_TYPE, &text, body, ""),
        Ok(Err(_)) => text_response("500 Internal Server Error", "cannot encode\n", ""),
        Err(_) => busy(),
    }
}

async fn connection(
    mut stream: TcpStream,
    from: std::net::SocketAddr,
    arrived: Arrived,
    limits: Arc<Limits>,
    sources: Sources,
) {
    let head = match arrived {
        Arrived::Head(head) => head,
        Arrived::Part { head, slot, evicted } => {
            match receive_head(&mut stream, head, slot, evicted, from).await {
                Some(head) => head,
                None => return,
            }
        }
    };
    // Taken before anything is computed for the request, so answers in progress are bounded.
    let Ok(_answering) = Arc::clone(&limits.answering).try_acquire_owned() else {
        debug!(%from, "metrics: {MAX_ANSWERING} requests in progress; answered 503");
        let busy =
            text_response("503 Service Unavailable", "busy; try again\n", "Retry-After: 1\r\n");
        write_reply(&mut stream, &busy, from).await;
        return;
    };
    let reply = match head {
        Head::TooLong => {
            text_response("431 Request Header Fields Too Large", "request head too long\n", "")
        }
        Head::Complete(head) => match route(&head) {
            Route::Metrics { body } => metrics_reply(&limits, &sources, body).await,
            Route::NotFound => {
                text_response("404 Not Found", &format!("metrics are at {PATH}\n"), "")
            }
            Route::MethodNotAllowed => text_response(
                "405 Method Not Allowed",
                "only GET and HEAD\n",
                "Allow: GET, HEAD\r\n",
            ),
            Route::BadRequest => text_response("400 Bad Request", "bad request line\n", ""),
        },
    };
    write_reply(&mut stream, &reply, from).await;
}

async fn write_reply(stream: &mut TcpStream, reply: &[u8], from: std::net::SocketAddr) {
    let write = async {
        stream.write_all(reply).await?;
        stream.shutdown().await
    };
    match tokio::time::timeout(WRITE_DEADLINE, write).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => debug!(%from, "metrics: {e}"),
        Err(_) => {
            debug!(%from, "metrics: the client did not read the answer within {WRITE_DEADLINE:?}; closed")
        }
    }
}

/// Serves scrapes on `listener` until the task is aborted.
pub async fn serve(listener: TcpListener, sources: Sources) {
    let limits = Arc::new(Limits {
        heads: Arc::default(),
        answering: Arc::new(Semaphore::new(MAX_ANSWERING)),
        gathers: Semaphore::new(MAX_GATHERS),
    });
    loop {
        let (stream, from) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(e) => {
                warn!("metrics: accept failed: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        // A look at what has arrived: a scraper's head is usually here by now, and then the
        // connection never joins those that can be evicted.
        let mut head = Vec::with_capacity(512);
        let arrived = match read_arrived(&stream, &mut head) {
            Ok(true) => Arrived::Head(Head::Complete(head)),
            Err(e) if e.kind() == io::ErrorKind::InvalidData => Arrived::Head(Head::TooLong),
            Err(e) => {
                debug!(%from, "metrics: {e}");
                continue;
            }
            Ok(false) => {
                let (slot, evicted) = limits.heads.admit(MAX_PENDING_HEADS);
                Arrived::Part { head, slot, evicted }
            }
        };
        tokio::spawn(connection(stream, from, arrived, Arc::clone(&limits), sources.clone()));
        // The connections' tasks and the reactor run before the next accept: a burst of new
        // connections cannot evict one whose head has arrived but not yet been read.
        tokio::task::yield_now().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_get_and_head_of_the_metrics_path_are_served() {
        let route_of = |line: &str| route(format!("{line}\r\nHost: x\r\n\r\n").as_bytes());
        assert_eq!(route_of("GET /metrics HTTP/1.1"), Route::Metrics { body: true });
        assert_eq!(route_of("GET /metrics?name[]=up HTTP/1.0"), Route::Metrics { body: true });
        assert_eq!(route_of("HEAD /metrics HTTP/1.1"), Route::Metrics { body: false });
        assert_eq!(route_of("GET / HTTP/1.1"), Route::NotFound);
        assert_eq!(route_of("GET /metricsx HTTP/1.1"), Route::NotFound);
        assert_eq!(route_of("POST /metrics HTTP/1.1"), Route::MethodNotAllowed);
        assert_eq!(route_of("GET /metrics"), Route::BadRequest);
        assert_eq!(route_of("GET /metrics HTTP/2.0"), Route::BadRequest);
        assert_eq!(route_of("GET  /metrics HTTP/1.1"), Route::BadRequest);
        assert_eq!(route(b"\xff\xfe"), Route::BadRequest);
    }

    #[test]
    fn responses_carry_their_length_and_close() {
        let r = String::from_utf8(response("200 OK", "text/plain", "abc", true, "")).unwrap();
        assert_eq!(
            r,
            "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 3\r\nConnection: close\r\n\r\nabc"
        );
        let head = String::from_utf8(response("200 OK", "text/plain", "abc", false, "")).unwrap();
        assert!(head.ends_with("Content-Length: 3\r\nConnection: close\r\n\r\n"), "{head}");
    }

    #[test]
    fn a_new_connection_evicts_the_oldest_without_a_whole_head() {
        let heads = Arc::new(PendingHeads::default());
        let (first, mut first_evicted) = heads.admit(2);
        let (second, _) = heads.admit(2);
        assert_eq!(first_evicted.try_recv(), Err(oneshot::error::TryRecvError::Empty));
        // The second's head is complete: it gives its place back and is out of reach.
        drop(second);
        let (_third, mut third_evicted) = heads.admit(2);
        assert_eq!(heads.len(), 2);
        assert_eq!(
            first_evicted.try_recv(),
            Err(oneshot::error::TryRecvError::Empty),
            "room was left by the second"
        );
        let (_fourth, _) = heads.admit(2);
        assert_eq!(first_evicted.try_recv(), Err(oneshot::error::TryRecvError::Closed));
        assert_eq!(third_evicted.try_recv(), Err(oneshot::error::TryRecvError::Empty));
        assert_eq!(heads.len(), 2);
        // An evicted connection that ends later takes no one else's place with it.
        drop(first);
        assert_eq!(heads.len(), 2);
    }

    /// A connection to a real loopback listener: (server side, client side).
    async fn pair() -> (TcpStream, TcpStream) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let client = TcpStream::connect(listener.local_addr().unwrap()).await.unwrap();
        let (server, _) = listener.accept().await.unwrap();
        (server, client)
    }

    #[tokio::test]
    async fn what_has_arrived_is_read_without_waiting() {
        let (server, mut client) = pair().await;
        let mut head = Vec::new();
        assert!(!read_arrived(&server, &mut head).unwrap(), "nothing sent yet");
        client.write_all(b"GET /metrics HTTP/1.1\r\n").await.unwrap();
        server.readable().await.unwrap();
        assert!(!read_arrived(&server, &mut head).unwrap());
        client.write_all(b"Host: x\r\n\r\n").await.unwrap();
        server.readable().await.unwrap();
        assert!(read_arrived(&server, &mut head).unwrap());
        assert_eq!(route(&head), Route::Metrics { body: true });
        let mut long = vec![b'x'; MAX_HEAD + 1];
        assert_eq!(
            read_arrived(&server, &mut long).unwrap_err().kind(),
            io::ErrorKind::InvalidData
        );
        drop(client);
        assert_eq!(
            read_arrived(&server, &mut Vec::new()).unwrap_err().kind(),
            io::ErrorKind::UnexpectedEof
        );
    }

    #[tokio::test]
    async fn a_whole_head_is_answered_even_when_evicted_before_it_was_read() {
        let heads = Arc::new(PendingHeads::default());
        let (mut server, mut client) = pair().await;
        let from = client.local_addr().unwrap();
        let (slot, evicted) = heads.admit(1);
        client.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n").await.unwrap();
        server.readable().await.unwrap();
        // A newer connection takes its place before its task has read the head.
        let (_newer, _) = heads.admit(1);
        let head = receive_head(&mut server, Vec::new(), slot, evicted, from).await;
        assert!(
            matches!(head, Some(Head::Complete(ref h)) if route(h) == Route::Metrics { body: true })
        );
        assert_eq!(heads.len(), 1);
    }

    #[tokio::test]
    async fn a_partial_head_is_closed_when_evicted() {
        let heads = Arc::new(PendingHeads::default());
        let (mut server, mut client) = pair().await;
        let from = client.local_addr().unwrap();
        let (slot, evicted) = heads.admit(1);
        client.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n").await.unwrap();
        let heads2 = Arc::clone(&heads);
        let newer = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(50)).await;
            heads2.admit(1)
        });
        let head = receive_head(&mut server, Vec::new(), slot, evicted, from).await;
        assert!(head.is_none(), "{head:?}");
        let (_newer, _) = newer.await.unwrap();
        assert_eq!(heads.len(), 1);
    }
}
