//! The HTTP side of the endpoint: `GET /metrics` and nothing else, one request per connection.
//!
//! Written here rather than with hyper: a scraper sends one GET and reads one response, which
//! takes a request line, a bounded header read and a status line; hyper and its companion
//! crates would be the largest dependency of the daemon for that (the health checks speak
//! their HTTP GET the same way, `announce::health`). Every step has a bound: 8 KiB of request
//! head, a deadline for the whole exchange, and a few connections at a time.

use std::io;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tracing::{debug, warn};

use super::encode::{encode, CONTENT_TYPE};
use super::gather::{gather, Sources};

/// The only path served (Prometheus's default `metrics_path`).
pub const PATH: &str = "/metrics";
/// A request head longer than this is refused (a scraper's is a few hundred bytes).
const MAX_HEAD: usize = 8 * 1024;
/// Connections served at once; more are closed at once (a scraper retries next interval).
const MAX_CONNECTIONS: usize = 4;
/// Read, gather, write: a client that stalls is dropped after this.
const EXCHANGE_DEADLINE: Duration = Duration::from_secs(10);

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

/// Reads up to the blank line that ends the request head.
async fn read_head(stream: &mut TcpStream) -> io::Result<Vec<u8>> {
    let mut head = Vec::with_capacity(512);
    let mut buf = [0u8; 1024];
    loop {
        let n = stream.read(&mut buf).await?;
        if n == 0 {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        head.extend_from_slice(buf.get(..n).unwrap_or_default());
        if head.windows(4).any(|w| w == b"\r\n\r\n") || head.windows(2).any(|w| w == b"\n\n") {
            return Ok(head);
        }
        if head.len() > MAX_HEAD {
            return Err(io::Error::new(io::ErrorKind::InvalidData, "request head too long"));
        }
    }
}

async fn exchange(mut stream: TcpStream, sources: &Sources) -> io::Result<()> {
    let reply = match read_head(&mut stream).await {
        Err(e) if e.kind() == io::ErrorKind::InvalidData => {
            text_response("431 Request Header Fields Too Large", "request head too long\n", "")
        }
        Err(e) => return Err(e),
        Ok(head) => match route(&head) {
            Route::Metrics { body } => match encode(&gather(sources).await) {
                Ok(text) => response("200 OK", CONTENT_TYPE, &text, body, ""),
                Err(_) => text_response("500 Internal Server Error", "cannot encode\n", ""),
            },
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
    stream.write_all(&reply).await?;
    stream.shutdown().await
}

/// Serves scrapes on `listener` until the task is aborted.
pub async fn serve(listener: TcpListener, sources: Sources) {
    let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    loop {
        let (stream, from) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(e) => {
                warn!("metrics: accept failed: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let Ok(permit) = Arc::clone(&slots).try_acquire_owned() else {
            debug!(%from, "metrics: too many connections at once; closing this one");
            continue;
        };
        let sources = sources.clone();
        tokio::spawn(async move {
            let _permit = permit;
            match tokio::time::timeout(EXCHANGE_DEADLINE, exchange(stream, &sources)).await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => debug!(%from, "metrics: {e}"),
                Err(_) => debug!(%from, "metrics: the client took too long; closed"),
            }
        });
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
}
