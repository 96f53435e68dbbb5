//! One uplink per network namespace. Two daemons writing the same kernel FIB would remove each
//! other's routes at every start and resync, and fight over port 179 and the BFD ports.
//!
//! The lock is `flock(LOCK_EX | LOCK_NB)` on a file in `/run/uplink` (root's, 0700: the units'
//! `RuntimeDirectory`, writable under `ProtectSystem=strict`), named after the network
//! namespace: the device and inode of `/proc/self/ns/net`. Daemons in other namespaces (one per
//! test lab) take other files and do not block each other; two in one namespace take the same
//! one. The kernel releases a flock when the process exits however it exits, so a `kill -9`
//! leaves no stale lock (the file stays, unlocked, for the next daemon). Only root can create or
//! open a file there, so no other user can take the lock first — as anyone could with the
//! abstract socket `@uplink.lock` used before, which kept uplink from starting while held.

use std::fs::{self, DirBuilder, File, OpenOptions, TryLockError};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// Where the lock files live: the units' `RuntimeDirectory` (also the control socket's).
pub const LOCK_DIR: &str = "/run/uplink";

/// The network namespace of this process.
const NETNS: &str = "/proc/self/ns/net";

const ROOT: u32 = 0;

/// Held for the daemon's lifetime: dropping it (or the process ending) releases the lock.
#[derive(Debug)]
pub struct InstanceLock {
    _file: File,
    pub path: PathBuf,
}

/// Takes the lock of this network namespace, or says who has it.
pub fn acquire() -> Result<InstanceLock, String> {
    acquire_in(Path::new(LOCK_DIR), ROOT)
}

/// [`acquire`] in `dir`, which must belong to `owner` (root, but for tests).
fn acquire_in(dir: &Path, owner: u32) -> Result<InstanceLock, String> {
    let netns = fs::metadata(NETNS)
        .map_err(|e| format!("cannot identify the network namespace ({NETNS}): {e}"))?;
    let path = dir.join(lock_file_name(netns.dev(), netns.ino()));
    prepare_dir(dir, owner)?;
    let file = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        // A link planted in place of the file is refused, not followed.
        .custom_flags(libc::O_NOFOLLOW)
        .open(&path)
        .map_err(|e| format!("cannot open the single-instance lock {}: {e}", path.display()))?;
    match file.try_lock() {
        Ok(()) => Ok(InstanceLock { _file: file, path }),
        Err(TryLockError::WouldBlock) => Err(held_message(&path, holder(&file))),
        Err(TryLockError::Error(e)) => {
            Err(format!("cannot take the single-instance lock {}: {e}", path.display()))
        }
    }
}

/// The lock file of the network namespace whose `/proc/self/ns/net` has this device and inode.
fn lock_file_name(dev: u64, ino: u64) -> String {
    format!("netns-{dev}-{ino}.lock")
}

fn held_message(path: &Path, pid: Option<u32>) -> String {
    let who = pid.map_or_else(|| "another uplink".to_string(), |pid| format!("uplink pid {pid}"));
    format!(
        "another uplink is running in this network namespace ({who} holds the lock {}; \
         `lslocks` or `fuser -v {}` names it): two daemons would delete each other's kernel \
         routes, so this one does not start",
        path.display(),
        path.display()
    )
}

/// Creates `dir` (0700) if it is missing, and refuses it unless `owner` owns it and nobody
/// else can write to it: anyone who can create or replace files there could take the lock
/// before uplink starts.
fn prepare_dir(dir: &Path, owner: u32) -> Result<(), String> {
    DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(|e| format!("cannot create the lock directory {}: {e}", dir.display()))?;
    // lstat: a symbolic link is not a directory and is refused.
    let meta = fs::symlink_metadata(dir)
        .map_err(|e| format!("cannot read the lock directory {}: {e}", dir.display()))?;
    check_dir(dir, meta.is_dir(), meta.uid(), meta.mode(), owner)
}

fn check_dir(dir: &Path, is_dir: bool, uid: u32, mode: u32, owner: u32) -> Result<(), String> {
    let dir = dir.display();
    let whose = if owner == ROOT { "root".to_string() } else { owner.to_string() };
    if !is_dir {
        return Err(format!("refusing the lock directory {dir}: it is not a directory"));
    }
    if uid != owner {
        return Err(format!(
            "refusing the lock directory {dir}: it belongs to uid {uid}, not {whose}, who could \
             take uplink's lock first (`chown {whose} {dir}`)"
        ));
    }
    if mode & 0o022 != 0 {
        return Err(format!(
            "refusing the lock directory {dir}: group or others may write to it (mode {:o}) and \
             could take uplink's lock first (`chmod go-w {dir}`)",
            mode & 0o7777
        ));
    }
    Ok(())
}

/// The pid holding the flock on `file`, from `/proc/locks` (a best effort, for the message).
fn holder(file: &File) -> Option<u32> {
    let meta = file.metadata().ok()?;
    let locks = fs::read_to_string("/proc/locks").ok()?;
    flock_holder(&locks, libc::major(meta.dev()), libc::minor(meta.dev()), meta.ino())
}

/// Finds the pid of the FLOCK on the inode in `/proc/locks`' text: lines such as
/// `1: FLOCK  ADVISORY  WRITE 4242 fe:00:5431309 0 EOF` (device numbers in hex); lines with
/// `->` are waiters, not holders.
fn flock_holder(locks: &str, major: u32, minor: u32, ino: u64) -> Option<u32> {
    locks.lines().find_map(|line| {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let [_, "FLOCK", _, _, pid, file, ..] = fields.as_slice() else { return None };
        let mut parts = file.split(':');
        let (Some(maj), Some(min), Some(inode), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return None;
        };
        let same = u32::from_str_radix(maj, 16).ok() == Some(major)
            && u32::from_str_radix(min, 16).ok() == Some(minor)
            && inode.parse::<u64>().ok() == Some(ino);
        if same {
            pid.parse().ok()
        } else {
            None
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_lock_in_one_namespace_is_refused_and_names_the_holder() {
        let dir = tempfile::tempdir().unwrap();
        let locks = dir.path().join("locks");
        let owner = fs::metadata(dir.path()).unwrap().uid();
        let first = acquire_in(&locks, owner).unwrap();
        // Created root-only, named after this namespace.
        let mode = fs::metadata(&locks).unwrap().mode();
        assert_eq!(mode & 0o777, 0o700);
        let netns = fs::metadata(NETNS).unwrap();
        assert_eq!(first.path, locks.join(lock_file_name(netns.dev(), netns.ino())));
        // flock locks belong to the open file, so a second open in this process conflicts too.
        let refused = acquire_in(&locks, owner).unwrap_err();
        assert!(
            refused.contains("another uplink is running in this network namespace"),
            "{refused}"
        );
        let pid = std::process::id();
        assert!(refused.contains(&format!("uplink pid {pid} holds the lock")), "{refused}");
        assert!(refused.contains(&format!("fuser -v {}", first.path.display())), "{refused}");
        drop(first);
        acquire_in(&locks, owner).unwrap();
    }

    #[test]
    fn a_directory_others_could_write_to_or_own_is_refused() {
        let run = Path::new("/run/uplink");
        assert_eq!(check_dir(run, true, 0, 0o40700, ROOT), Ok(()));
        assert_eq!(check_dir(run, true, 0, 0o40755, ROOT), Ok(()));
        let group_writable = check_dir(run, true, 0, 0o40770, ROOT).unwrap_err();
        assert!(group_writable.contains("(mode 770)"), "{group_writable}");
        assert!(group_writable.contains("`chmod go-w /run/uplink`"), "{group_writable}");
        let sticky = check_dir(run, true, 0, 0o41777, ROOT).unwrap_err();
        assert!(sticky.contains("(mode 1777)"), "{sticky}");
        let theirs = check_dir(run, true, 65534, 0o40700, ROOT).unwrap_err();
        assert!(theirs.contains("belongs to uid 65534, not root"), "{theirs}");
        assert!(theirs.contains("`chown root /run/uplink`"), "{theirs}");
        let link = check_dir(run, false, 0, 0o120777, ROOT).unwrap_err();
        assert!(link.contains("not a directory"), "{link}");

        let dir = tempfile::tempdir().unwrap();
        let owner = fs::metadata(dir.path()).unwrap().uid();
        let open = dir.path().join("open");
        DirBuilder::new().mode(0o777).create(&open).unwrap();
        fs::set_permissions(&open, std::os::unix::fs::PermissionsExt::from_mode(0o777)).unwrap();
        let refused = acquire_in(&open, owner).unwrap_err();
        assert!(refused.contains("refusing the lock directory"), "{refused}");
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(dir.path(), &link).unwrap();
        assert!(acquire_in(&link, owner).unwrap_err().contains("not a directory"));
    }

    #[test]
    fn the_holder_is_read_from_proc_locks() {
        let locks = "1: FLOCK  ADVISORY  WRITE 16876 fe:00:5431309 0 EOF\n\
                     1: -> FLOCK  ADVISORY  WRITE 999 fe:00:77 0 EOF\n\
                     2: POSIX  ADVISORY  WRITE 11680 fe:00:77 0 EOF\n\
                     3: FLOCK  ADVISORY  WRITE 4242 fe:00:77 0 EOF\n";
        assert_eq!(flock_holder(locks, 0xfe, 0, 77), Some(4242));
        assert_eq!(flock_holder(locks, 0xfe, 0, 5431309), Some(16876));
        assert_eq!(flock_holder(locks, 0xfe, 1, 77), None);
        assert_eq!(flock_holder("", 0, 0, 1), None);
    }
}
