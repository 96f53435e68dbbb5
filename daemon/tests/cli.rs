//! The command line: `uplink check` names file, line, column and field; `uplink run` refuses a
//! bad config before touching anything; `show` without a daemon says how to fix it.

use std::process::Command;

fn uplink(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_uplink")).args(args).output().unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

const GOOD: &str = r#"[[bgp.routers]]
asn = 65801
id = "172.18.20.113"
prefixes = ["10.128.7.0/24"]

[[bgp.routers.neighbors]]
address = "172.18.20.1"
asn = 65102
"#;

#[test]
fn check_accepts_the_example_and_a_fragment() {
    let dir = tempfile::tempdir().unwrap();
    let main = dir.path().join("uplink.toml");
    std::fs::write(&main, GOOD).unwrap();
    std::fs::create_dir(dir.path().join("conf.d")).unwrap();
    std::fs::write(
        dir.path().join("conf.d/10-second-tor.toml"),
        "[[bgp.routers]]\nasn = 65801\n[[bgp.routers.neighbors]]\naddress = \"172.18.20.2\"\nasn = 65103\n",
    )
    .unwrap();
    let (ok, stdout, stderr) = uplink(&["check", "--config", main.to_str().unwrap()]);
    assert!(ok, "{stderr}");
    assert!(stdout.contains("OK (2 file(s), 1 router(s), 2 neighbor(s))"), "{stdout}");

    // An application's Deployment beside its pool: one line, and the rest applies.
    std::fs::write(
        dir.path().join("conf.d/20-app.yaml"),
        "apiVersion: metallb.io/v1beta1\nkind: IPAddressPool\nmetadata: {name: vips}\nspec:\n  addresses: [10.9.0.0/24]\n---\napiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web}\nspec: {replicas: 2}\n",
    )
    .unwrap();
    let (ok, stdout, stderr) = uplink(&["check", "--config", main.to_str().unwrap()]);
    assert!(ok, "{stderr}");
    assert!(stdout.contains("OK (3 file(s), 1 router(s), 2 neighbor(s))"), "{stdout}");
    let note = format!(
        "note: {}:7: documents[1]: Deployment \"web\" (apps/v1) skipped: uplink does not act on this kind\n",
        dir.path().join("conf.d/20-app.yaml").display()
    );
    assert!(stdout.contains(&note), "{stdout}");

    let example = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/examples/uplink.toml");
    let (ok, _, stderr) = uplink(&["check", "--config", example]);
    assert!(ok, "the documented example must pass `uplink check`: {stderr}");
}

#[test]
fn check_names_file_line_column_and_field() {
    let dir = tempfile::tempdir().unwrap();
    let main = dir.path().join("uplink.toml");
    std::fs::write(&main, GOOD.replace("asn = 65102", "asn = 65102\nhold_time = \"9O s\""))
        .unwrap();
    let (ok, _, stderr) = uplink(&["check", "--config", main.to_str().unwrap()]);
    assert!(!ok);
    let expected = format!("{}:9:13: bgp.routers[0].neighbors[0].hold_time:", main.display());
    assert!(stderr.contains(&expected), "want {expected:?} in:\n{stderr}");
}

#[test]
fn conflicting_fragments_name_both_files() {
    let dir = tempfile::tempdir().unwrap();
    let main = dir.path().join("uplink.toml");
    std::fs::write(&main, GOOD).unwrap();
    std::fs::create_dir(dir.path().join("conf.d")).unwrap();
    std::fs::write(dir.path().join("conf.d/other.toml"), "[[bgp.routers]]\nasn = 65999\n").unwrap();
    let (ok, _, stderr) = uplink(&["check", "--config", main.to_str().unwrap()]);
    assert!(!ok);
    assert!(stderr.contains("uplink.toml") && stderr.contains("other.toml"), "{stderr}");
}

#[test]
fn run_refuses_a_bad_config_and_says_why() {
    let dir = tempfile::tempdir().unwrap();
    let main = dir.path().join("uplink.toml");
    std::fs::write(&main, GOOD.replace("asn = 65102", "asn = 0")).unwrap();
    let socket = dir.path().join("s.sock");
    let (ok, _, stderr) =
        uplink(&["run", "--config", main.to_str().unwrap(), "--socket", socket.to_str().unwrap()]);
    assert!(!ok);
    assert!(stderr.contains("config rejected, not starting") && stderr.contains("asn"), "{stderr}");
    assert!(!socket.exists(), "nothing may start with a bad config");
}

#[test]
fn show_without_a_daemon_explains() {
    let (ok, _, stderr) =
        uplink(&["show", "bgp", "summary", "--socket", "/nonexistent/uplink.sock"]);
    assert!(!ok);
    assert!(stderr.contains("is `uplink run` running?"), "{stderr}");
}
