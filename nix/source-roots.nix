# The files of the repo that nix/package.nix builds from, as paths relative to the repo root.
# Pure Nix (no nixpkgs), so that scripts/nix-check can evaluate it where nixpkgs cannot be
# fetched, copy exactly these files and build them with cargo offline.
#
# `roots`: everything cargo reads for the workspace (the root manifest and lock, and every
# member of `[workspace] members` in Cargo.toml with its manifest and sources), plus the files
# outside daemon/ that the daemon's unit tests read at run time (the build runs
# `cargo test -p uplink --lib`).
# `exclude`: taken back out of `roots`; a missing one is fine.
{
  roots = [
    "Cargo.toml"
    "Cargo.lock"
    # The workspace members (Cargo.toml `members`).
    "daemon"
    "injector"
    "vm-tests"
    # Read by the daemon's unit tests through CARGO_MANIFEST_DIR/../docs.
    "docs/announcements.md"
    "docs/examples/uplink.toml"
    "docs/grafana/uplink.json"
  ];

  exclude = [
    # cargo-fuzz's crate: its own workspace, not built by the package; fuzzing leaves its
    # target/, corpus/ and artifacts/ here.
    "daemon/fuzz"
  ];
}
