//! Config drives: a small FAT image labelled `UPLINK` with the layout the image's
//! `uplink-config.service` reads (see image/README and /work/vm-interface.md): hostname,
//! uplink/, network/*.nmconnection, ssh/authorized_keys, frr/, sysctl.conf.

use crate::cmd::must;
use std::path::Path;

/// Writes `files` (relative path -> contents) under `dir` and packs `dir` into `out`.
pub fn build(dir: &Path, out: &Path, files: &[(String, String)]) {
    for (rel, body) in files {
        let p = dir.join(rel);
        if let Some(parent) = p.parent() {
            std::fs::create_dir_all(parent)
                .unwrap_or_else(|e| panic!("mkdir {}: {e}", parent.display()));
        }
        std::fs::write(&p, body).unwrap_or_else(|e| panic!("write {}: {e}", p.display()));
    }
    let out_s = out.to_string_lossy();
    let _ = std::fs::remove_file(out);
    // 8 MiB FAT; mtools copies without a root mount.
    must("mkfs.fat", &["-C", "-n", "UPLINK", &out_s, "8192"]);
    let entries = std::fs::read_dir(dir).unwrap_or_else(|e| panic!("read {}: {e}", dir.display()));
    let mut args: Vec<String> = vec!["-s".into(), "-i".into(), out_s.to_string()];
    for e in entries.flatten() {
        args.push(e.path().to_string_lossy().into_owned());
    }
    args.push("::/".into());
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    must("mcopy", &refs);
}
