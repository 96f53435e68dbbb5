//! The daemon side of the control socket. The socket is created mode 0600 (root-only): it
//! exposes the whole routing state.

use super::protocol::{Request, Response};
use std::future::Future;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::sync::Arc;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::UnixListener;

/// Binds `path` (replacing a stale socket file) and serves requests with `handler` until the
/// task is dropped.
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
    Ok(tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else { continue };
            let handler = handler.clone();
            tokio::spawn(async move {
                let (read, mut write) = stream.into_split();
                let mut lines = BufReader::new(read).lines();
                while let Ok(Some(line)) = lines.next_line().await {
                    let response = match serde_json::from_str::<Request>(&line) {
                        Ok(request) => match handler(request).await {
                            Ok(v) => Response::Ok(v),
                            Err(e) => Response::Error(e),
                        },
                        Err(e) => Response::Error(format!("bad request: {e}")),
                    };
                    let mut text = serde_json::to_string(&response).unwrap_or_default();
                    text.push('\n');
                    if write.write_all(text.as_bytes()).await.is_err() {
                        break;
                    }
                }
            });
        }
    }))
}
