//! Health checks: one tokio task per (service, endpoint) this node must watch, each probing on
//! its `interval` and reporting a verdict only when it changes.
//!
//! The rise/fall logic ([`Tracker`]) is sans-IO. The probes:
//! - `tcp`: a TCP connection to `address:port` completes within `timeout`;
//! - `http`: `GET path HTTP/1.0` answers with a status line carrying `expected_status`;
//! - `https`: the same GET over TLS (rustls). Like the kubelet's HTTPS probes, the server's
//!   certificate chain and name are not verified — endpoints serve self-signed or cluster-CA
//!   certificates the node cannot know — but the handshake signature is (see [`AnyServerCert`]);
//! - `exec`: the command exits 0 within `timeout` (`{address}` in its arguments is replaced by
//!   the endpoint's address); it is killed when the timeout passes.

use std::net::{IpAddr, SocketAddr};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use std::sync::{Arc, OnceLock};

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, SignatureScheme};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tracing::info;

use crate::config::announce::{HealthCheck, ProbeKind};

/// Consecutive-result counting: `rise` successes make an endpoint healthy, `fall` failures make
/// it unhealthy. Until the first verdict it is unknown (readiness treats that as unhealthy).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tracker {
    rise: u32,
    fall: u32,
    healthy: Option<bool>,
    successes: u32,
    failures: u32,
}

impl Tracker {
    pub fn new(rise: u32, fall: u32) -> Self {
        Self { rise: rise.max(1), fall: fall.max(1), healthy: None, successes: 0, failures: 0 }
    }

    pub fn healthy(&self) -> Option<bool> {
        self.healthy
    }

    /// Records one probe result; returns the new verdict when it changes.
    pub fn record(&mut self, ok: bool) -> Option<bool> {
        if ok {
            self.successes = self.successes.saturating_add(1);
            self.failures = 0;
        } else {
            self.failures = self.failures.saturating_add(1);
            self.successes = 0;
        }
        let verdict = if self.successes >= self.rise {
            Some(true)
        } else if self.failures >= self.fall {
            Some(false)
        } else {
            None
        };
        match verdict {
            Some(v) if self.healthy != Some(v) => {
                self.healthy = Some(v);
                Some(v)
            }
            _ => None,
        }
    }
}

/// A changed verdict for one endpoint of one service.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    pub service: String,
    pub address: IpAddr,
    pub healthy: bool,
    /// The run of the check that reached it ([`spawn`]'s `run`): a verdict still queued from a
    /// check that a reload stopped or changed is told from the current run's.
    pub run: u64,
}

/// Runs one probe.
pub async fn probe(check: &HealthCheck, address: IpAddr) -> bool {
    match &check.probe {
        ProbeKind::Tcp { port } => {
            tcp_connect(SocketAddr::new(address, *port), check.timeout).await.is_some()
        }
        ProbeKind::Http { port, path, expected_status, tls } => {
            let attempt = http_status(SocketAddr::new(address, *port), path, *tls);
            matches!(tokio::time::timeout(check.timeout, attempt).await, Ok(Some(s)) if s == *expected_status)
        }
        ProbeKind::Exec { command } => {
            let command: Vec<String> =
                command.iter().map(|a| a.replace("{address}", &address.to_string())).collect();
            let timeout = check.timeout;
            tokio::task::spawn_blocking(move || exec(&command, timeout)).await.unwrap_or(false)
        }
    }
}

async fn tcp_connect(to: SocketAddr, timeout: Duration) -> Option<TcpStream> {
    tokio::time::timeout(timeout, TcpStream::connect(to)).await.ok()?.ok()
}

/// The status code of `GET path` (over TLS when `tls`), or `None` when the connection or
/// handshake fails or there is no well-formed status line.
async fn http_status(to: SocketAddr, path: &str, tls: bool) -> Option<u16> {
    let stream = TcpStream::connect(to).await.ok()?;
    if !tls {
        return get_status(stream, to, path).await;
    }
    let connector = tokio_rustls::TlsConnector::from(tls_config()?);
    let stream = connector.connect(ServerName::IpAddress(to.ip().into()), stream).await.ok()?;
    get_status(stream, to, path).await
}

/// The client configuration of every `https` check, built once.
fn tls_config() -> Option<Arc<rustls::ClientConfig>> {
    static CONFIG: OnceLock<Option<Arc<rustls::ClientConfig>>> = OnceLock::new();
    CONFIG
        .get_or_init(|| {
            let provider = Arc::new(rustls::crypto::ring::default_provider());
            let verifier = Arc::new(AnyServerCert(Arc::clone(&provider)));
            rustls::ClientConfig::builder_with_provider(provider)
                .with_safe_default_protocol_versions()
                .ok()
                .map(|builder| {
                    Arc::new(
                        builder
                            .dangerous()
                            .with_custom_certificate_verifier(verifier)
                            .with_no_client_auth(),
                    )
                })
        })
        .clone()
}

/// Accepts any server certificate (the kubelet's HTTPS probe semantics: a health check asks
/// "does the service answer", not "is this the server I trust"), while still checking that
/// the server holds the key of the certificate it sent (the handshake signatures).
#[derive(Debug)]
struct AnyServerCert(Arc<rustls::crypto::CryptoProvider>);

impl ServerCertVerifier for AnyServerCert {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

async fn get_status(
    mut stream: impl AsyncRead + AsyncWrite + Unpin,
    to: SocketAddr,
    path: &str,
) -> Option<u16> {
    let host = match to {
        SocketAddr::V4(a) => a.ip().to_string(),
        SocketAddr::V6(a) => format!("[{}]", a.ip()),
    };
    let request =
        format!("GET {path} HTTP/1.0\r\nHost: {host}\r\nUser-Agent: uplink-health\r\n\r\n");
    stream.write_all(request.as_bytes()).await.ok()?;
    let mut reader = StatusLineReader::default();
    let mut chunk = [0u8; StatusLineReader::LIMIT];
    loop {
        let room = chunk.get_mut(..reader.room())?;
        let n = stream.read(room).await.ok()?;
        if n == 0 || reader.push(chunk.get(..n)?) {
            break;
        }
    }
    reader.status()
}

/// The start of an HTTP response, read until its status line is complete. Sans-IO, so the
/// fuzz target feeds it the bytes a server sends in any chunking.
#[derive(Debug, Default)]
pub struct StatusLineReader {
    buffer: Vec<u8>,
}

impl StatusLineReader {
    /// The most bytes read: a status line is short, and a server that sends more without a
    /// newline is not answering HTTP.
    pub const LIMIT: usize = 256;

    /// How many more bytes to read at most.
    pub fn room(&self) -> usize {
        Self::LIMIT.saturating_sub(self.buffer.len())
    }

    /// Adds bytes that arrived (beyond [`Self::room`] they are ignored); true when no more are
    /// needed: the line is complete or the limit reached.
    pub fn push(&mut self, bytes: &[u8]) -> bool {
        let take = bytes.len().min(self.room());
        self.buffer.extend_from_slice(bytes.get(..take).unwrap_or_default());
        self.buffer.contains(&b'\n') || self.room() == 0
    }

    /// The status code, if what was read starts with a well-formed status line.
    pub fn status(&self) -> Option<u16> {
        parse_status_line(&self.buffer)
    }
}

/// `HTTP/1.1 200 OK` → 200: the status-code of a status line (RFC 9112 §4, `HTTP-version SP
/// status-code SP [reason-phrase]`), three digits. Only the first line counts, as bytes: what
/// follows it (headers, a body cut at [`StatusLineReader::LIMIT`]) and the reason phrase
/// (which may be obs-text) need not be UTF-8.
pub fn parse_status_line(bytes: &[u8]) -> Option<u16> {
    let line = bytes.split(|&b| b == b'\n').next()?;
    let mut words = line.split(u8::is_ascii_whitespace).filter(|word| !word.is_empty());
    if !words.next()?.starts_with(b"HTTP/") {
        return None;
    }
    let code = words.next()?;
    if code.len() != 3 || !code.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(code).ok()?.parse().ok()
}

fn exec(command: &[String], timeout: Duration) -> bool {
    let Some((program, args)) = command.split_first() else { return false };
    let Ok(mut child) = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
    else {
        return false;
    };
    let started = Instant::now();
    loop {
        match child.try_wait() {
            Ok(Some(status)) => return status.success(),
            Ok(None) if started.elapsed() < timeout => {
                std::thread::sleep(Duration::from_millis(20))
            }
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                return false;
            }
        }
    }
}

/// Starts the probe task for one endpoint, as check run `run`. It reports each verdict change
/// on `verdicts` and stops when the receiver is gone or the handle is aborted.
pub fn spawn(
    service: String,
    address: IpAddr,
    check: HealthCheck,
    run: u64,
    verdicts: mpsc::Sender<Verdict>,
) -> JoinHandle<()> {
    tokio::spawn(async move {
        let mut tracker = Tracker::new(check.rise, check.fall);
        let mut ticker = tokio::time::interval(check.interval);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            ticker.tick().await;
            let ok = probe(&check, address).await;
            if let Some(healthy) = tracker.record(ok) {
                info!(%service, %address, healthy, "health check verdict changed");
                let verdict = Verdict { service: service.clone(), address, healthy, run };
                if verdicts.send(verdict).await.is_err() {
                    return;
                }
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rise_and_fall_need_consecutive_results() {
        let mut t = Tracker::new(2, 3);
        assert_eq!(t.healthy(), None);
        assert_eq!(t.record(true), None);
        assert_eq!(t.record(true), Some(true));
        assert_eq!(t.record(true), None, "no change, no report");
        assert_eq!(t.record(false), None);
        assert_eq!(t.record(false), None);
        assert_eq!(t.record(true), None, "a success resets the failure count");
        assert_eq!((t.record(false), t.record(false)), (None, None));
        assert_eq!(t.record(false), Some(false));
        assert_eq!(t.record(true), None);
        assert_eq!(t.record(true), Some(true));
        // From unknown, failures give an explicit verdict too.
        let mut t = Tracker::new(1, 1);
        assert_eq!(t.record(false), Some(false));
    }

    #[test]
    fn status_lines() {
        assert_eq!(parse_status_line(b"HTTP/1.1 204 No Content\r\n"), Some(204));
        assert_eq!(parse_status_line(b"HTTP/1.0 200\r\n"), Some(200));
        assert_eq!(parse_status_line(b"SSH-2.0-OpenSSH\r\n"), None);
        assert_eq!(parse_status_line(b""), None);
    }

    /// Found by the health_http fuzz target: the status depended on how the answer arrived.
    /// Read in one piece, bytes after the status line that are not UTF-8 (here the start of a
    /// character cut at the read limit) failed the check; read up to the newline, it passed.
    #[test]
    fn the_status_line_alone_decides_however_the_answer_arrives() {
        let answer = b"HTTP/1.0 204 No Content\r\nServer: t\xc3\xa9st\r\n\r\n\xe5";
        let mut whole = StatusLineReader::default();
        assert!(whole.push(answer));
        assert_eq!(whole.status(), Some(204));
        let mut bytewise = StatusLineReader::default();
        let done = answer.iter().position(|b| bytewise.push(std::slice::from_ref(b)));
        assert_eq!(done, Some(24), "reading stops at the end of the status line");
        assert_eq!(bytewise.status(), Some(204));
        // A reason phrase in Latin-1 (obs-text, RFC 9110 §5.5) is fine too.
        assert_eq!(parse_status_line(b"HTTP/1.1 200 Gr\xfc\xdfe\r\n"), Some(200));
    }

    /// The status-code is three digits (RFC 9112 §4); `u16::from_str` alone took more.
    #[test]
    fn status_codes_are_three_digits() {
        for line in ["HTTP/1.1 +200 OK", "HTTP/1.1 0200 OK", "HTTP/1.1 20 OK", "HTTP/1.1 65535"] {
            assert_eq!(parse_status_line(line.as_bytes()), None, "{line}");
        }
        assert_eq!(parse_status_line(b"HTTP/1.1 503\r\n"), Some(503));
        assert_eq!(parse_status_line(b"HTTP/1.1  200  OK"), Some(200), "extra spaces are fine");
    }

    #[test]
    fn an_answer_without_a_newline_is_read_up_to_the_limit() {
        let mut reader = StatusLineReader::default();
        assert!(!reader.push(b"HTTP/1.1 200 "));
        assert!(reader.push(&[b'x'; 300]));
        assert_eq!(reader.room(), 0);
        assert_eq!(reader.status(), Some(200));
    }

    fn check(probe: ProbeKind) -> HealthCheck {
        HealthCheck {
            probe,
            interval: Duration::from_millis(50),
            timeout: Duration::from_millis(500),
            rise: 1,
            fall: 1,
        }
    }

    #[tokio::test]
    async fn tcp_and_http_probes_against_a_local_listener() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let server = tokio::spawn(async move {
            loop {
                let (mut stream, _) = listener.accept().await.unwrap();
                let mut buffer = [0u8; 512];
                let _ = stream.read(&mut buffer).await;
                let _ = stream.write_all(b"HTTP/1.0 204 No Content\r\n\r\n").await;
            }
        });
        let local = IpAddr::from([127, 0, 0, 1]);
        assert!(probe(&check(ProbeKind::Tcp { port }), local).await);
        let http = |expected_status| ProbeKind::Http {
            port,
            path: "/".into(),
            expected_status,
            tls: false,
        };
        assert!(probe(&check(http(204)), local).await);
        assert!(!probe(&check(http(200)), local).await);
        server.abort();
        // Nothing listens on a port we just closed.
        let closed =
            std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        assert!(!probe(&check(ProbeKind::Tcp { port: closed }), local).await);
    }

    /// A TLS server with a self-signed certificate (what pods serve) answering `status`.
    async fn tls_server(status: &'static str) -> (u16, tokio::task::JoinHandle<()>) {
        use rustls::pki_types::{PrivateKeyDer, PrivatePkcs8KeyDer};
        let generated = rcgen::generate_simple_self_signed(vec!["pod.local".into()]).unwrap();
        let key =
            PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(generated.key_pair.serialize_der()));
        let config = rustls::ServerConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(vec![generated.cert.der().clone()], key)
        .unwrap();
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let server = tokio::spawn(async move {
            loop {
                let (tcp, _) = listener.accept().await.unwrap();
                let Ok(mut stream) = acceptor.accept(tcp).await else { continue };
                let mut buffer = [0u8; 512];
                let n = stream.read(&mut buffer).await.unwrap_or(0);
                assert!(buffer[..n].starts_with(b"GET /healthz HTTP/1.0\r\n"));
                let _ = stream.write_all(status.as_bytes()).await;
                let _ = stream.shutdown().await;
            }
        });
        (port, server)
    }

    #[tokio::test]
    async fn https_probe_speaks_tls_to_a_self_signed_server() {
        let local = IpAddr::from([127, 0, 0, 1]);
        let https = |port, expected_status| ProbeKind::Http {
            port,
            path: "/healthz".into(),
            expected_status,
            tls: true,
        };
        let (port, server) = tls_server("HTTP/1.1 200 OK\r\n\r\n").await;
        assert!(probe(&check(https(port, 200)), local).await);
        assert!(!probe(&check(https(port, 204)), local).await, "the status is checked");
        server.abort();

        // A plain HTTP server on the port: no TLS handshake, so the check fails even though
        // the status line would match.
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let plain_port = listener.local_addr().unwrap().port();
        let plain = tokio::spawn(async move {
            loop {
                let (mut stream, _) = listener.accept().await.unwrap();
                let mut buffer = [0u8; 512];
                let _ = stream.read(&mut buffer).await;
                let _ = stream.write_all(b"HTTP/1.0 200 OK\r\n\r\n").await;
            }
        });
        assert!(!probe(&check(https(plain_port, 200)), local).await);
        plain.abort();
    }

    #[tokio::test]
    async fn exec_probe_uses_exit_status_and_timeout() {
        let local = IpAddr::from([127, 0, 0, 1]);
        assert!(probe(&check(ProbeKind::Exec { command: vec!["true".into()] }), local).await);
        assert!(!probe(&check(ProbeKind::Exec { command: vec!["false".into()] }), local).await);
        let echo =
            vec!["sh".into(), "-c".into(), "test \"$0\" = 127.0.0.1".into(), "{address}".into()];
        assert!(probe(&check(ProbeKind::Exec { command: echo }), local).await);
        let slow = vec!["sleep".into(), "5".into()];
        let started = Instant::now();
        assert!(!probe(&check(ProbeKind::Exec { command: slow }), local).await);
        assert!(started.elapsed() < Duration::from_secs(3));
    }
}
