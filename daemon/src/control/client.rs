//! The CLI side of the control socket.

use super::protocol::{Request, Response};
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;

/// Sends one request and waits for its answer (at most 30 s).
pub fn call(socket: &Path, request: &Request) -> Result<serde_json::Value, String> {
    call_waiting(socket, request, Duration::from_secs(30))
}

/// Sends one request and waits up to `timeout` for its answer (a drain that waits for the
/// withdrawal takes `drain_time`).
pub fn call_waiting(
    socket: &Path,
    request: &Request,
    timeout: Duration,
) -> Result<serde_json::Value, String> {
    let mut stream = UnixStream::connect(socket).map_err(|e| {
        format!(
            "cannot reach uplink at {}: {e} (is `uplink run` running? --socket sets the path)",
            socket.display()
        )
    })?;
    let _ = stream.set_read_timeout(Some(timeout.max(Duration::from_millis(1))));
    let mut line = serde_json::to_string(request).map_err(|e| e.to_string())?;
    line.push('\n');
    stream.write_all(line.as_bytes()).map_err(|e| format!("{}: {e}", socket.display()))?;
    let mut answer = String::new();
    BufReader::new(stream).read_line(&mut answer).map_err(|e| match e.kind() {
        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut => format!(
            "no answer from uplink within {timeout:?} (it may still be working on the request)"
        ),
        _ => format!("{}: {e}", socket.display()),
    })?;
    match serde_json::from_str::<Response>(&answer) {
        Ok(Response::Ok(v)) => Ok(v),
        Ok(Response::Error(e)) => Err(e),
        Err(e) => Err(format!("unreadable answer from uplink: {e}")),
    }
}
