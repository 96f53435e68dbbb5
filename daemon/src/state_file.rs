//! Files in the state directory (`/var/lib/uplink`): what must outlive the daemon and survive a
//! power loss. A file is written whole to a temporary name and renamed over the old one, so a
//! crash leaves either the old or the new file, never half of one; the file and then its
//! directory are synced, because a rename or a removal is only on disk once the directory is
//! (ext4 and xfs make no promise before that). Only root reads them: the kept Kubernetes
//! objects hold the TCP-MD5 keys of `passwordSecret`s.

use std::io::Write as _;
use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;

/// Replaces `path` with `contents`, durably and atomically, readable by its owner only.
pub fn write(path: &Path, contents: &[u8]) -> std::io::Result<()> {
    let mut temporary = path.as_os_str().to_os_string();
    temporary.push(".new");
    let temporary = Path::new(&temporary);
    let mut file = std::fs::File::create(temporary)?;
    // Also when a crash left the temporary file behind with other permissions.
    file.set_permissions(std::fs::Permissions::from_mode(0o600))?;
    file.write_all(contents)?;
    file.sync_all()?;
    std::fs::rename(temporary, path)?;
    sync_dir(path)
}

/// Removes `path` durably; a file that is not there is no error.
pub fn remove(path: &Path) -> std::io::Result<()> {
    match std::fs::remove_file(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
        Ok(()) => sync_dir(path),
    }
}

/// Syncs the directory that holds `path`.
pub fn sync_dir(path: &Path) -> std::io::Result<()> {
    let dir = match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    };
    std::fs::File::open(dir)?.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_is_replaced_whole_and_removed() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("drained");
        write(&path, b"one\n").unwrap();
        write(&path, b"two\n").unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"two\n");
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600, "{mode:o}");
        assert!(!dir.path().join("drained.new").exists());
        remove(&path).unwrap();
        assert!(!path.exists());
        remove(&path).unwrap();
    }
}
