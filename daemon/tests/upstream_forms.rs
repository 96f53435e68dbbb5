//! The forms users apply upstream, each file dropped alone into `conf.d/`, through `uplink
//! check`: the fixtures in `fixtures/upstream-forms/` (written here, after the kinds and fields
//! of kubernetes-nmstate's examples and MetalLB's samples) are accepted; those in `refused/`
//! are what uplink refuses by design, each with its message.

use std::path::{Path, PathBuf};
use std::process::Command;

fn fixtures(dir: &str) -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures").join(dir);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no fixtures in {}", dir.display());
    files
}

/// `uplink check` of an empty main file and `file` alone in `conf.d/`: (success, stdout, stderr).
fn check_alone(file: &Path) -> (bool, String, String) {
    let dir = tempfile::tempdir().unwrap();
    let main = dir.path().join("uplink.toml");
    std::fs::write(&main, "").unwrap();
    std::fs::create_dir(dir.path().join("conf.d")).unwrap();
    std::fs::copy(file, dir.path().join("conf.d").join(file.file_name().unwrap())).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_uplink"))
        .args(["check", "--config", main.to_str().unwrap()])
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn the_upstream_forms_are_accepted_as_written() {
    for file in fixtures("upstream-forms") {
        let (ok, stdout, stderr) = check_alone(&file);
        assert!(ok, "{} refused:\n{stderr}", file.display());
        assert!(stdout.contains(": OK ("), "{}: {stdout}", file.display());
        if file.ends_with("metallb-pool-with-app.yaml") {
            assert!(
                stdout.contains("documents[3]: Deployment \"web\" (apps/v1) skipped"),
                "{stdout}"
            );
        }
    }
}

#[test]
fn what_uplink_refuses_by_design_says_why() {
    let expected =
        [("frr-raw.yaml", "documents[0].spec.raw", "unknown or unsupported field `raw`")];
    let files = fixtures("upstream-forms/refused");
    assert_eq!(files.len(), expected.len(), "a refused fixture without its expectation");
    for (file, (name, field, message)) in files.iter().zip(expected) {
        assert!(file.ends_with(name), "{}", file.display());
        let (ok, _, stderr) = check_alone(file);
        assert!(!ok, "{name} accepted");
        assert!(stderr.contains(&format!(": {field}: ")), "{name}: {stderr}");
        assert!(stderr.contains(message), "{name}: {stderr}");
    }
}
