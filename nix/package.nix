# The `uplink` binary, built as one static executable from the Cargo workspace.
#
# With an ordinary (glibc) nixpkgs this mirrors `make static`: glibc linked statically through
# `-C target-feature=+crt-static` on x86_64-unknown-linux-gnu, the binary the benchmarks
# measure. Called from `pkgsStatic` (musl) it needs no flags: that stdenv is static already.
{
  lib,
  stdenv,
  rustPlatform,
  glibc,
}:

let
  fs = lib.fileset;
  root = ../.;
  # The file list lives in pure Nix so that scripts/nix-check can build exactly these files
  # with cargo where nixpkgs (and so lib.fileset) is not available.
  sourceRoots = import ./source-roots.nix;
  under = map (path: root + "/${path}");
  muslStatic = stdenv.hostPlatform.isMusl && stdenv.hostPlatform.isStatic;
in
rustPlatform.buildRustPackage {
  pname = "uplink";
  version = (lib.importTOML ../daemon/Cargo.toml).package.version;

  # Only what cargo reads: the workspace manifest and lock and every workspace member (cargo
  # needs each member's manifest and sources even for `-p uplink`), and the docs the unit
  # tests read; nix/source-roots.nix lists them.
  src = fs.toSource {
    inherit root;
    fileset = fs.difference (fs.unions (under sourceRoots.roots)) (
      fs.unions (map fs.maybeMissing (under sourceRoots.exclude))
    );
  };

  cargoLock.lockFile = ../Cargo.lock;

  # The node's network (nmstate: NetworkManager over D-Bus, kernel mode) and the Kubernetes
  # source (kube).
  buildFeatures = [
    "netconf"
    "kubernetes"
  ];

  cargoBuildFlags = [
    "-p"
    "uplink"
    "--bin"
    "uplink"
  ];

  # Unit tests only: the interop tests in daemon/tests need root, network namespaces and FRR,
  # BIRD and GoBGP, which the build sandbox does not have (they run in `make test`).
  cargoTestFlags = [
    "-p"
    "uplink"
    "--lib"
  ];

  # buildRustPackage always passes --target, so RUSTFLAGS reach only the target artifacts and
  # build scripts and proc-macros stay dynamic (they cannot be built with crt-static).
  env = lib.optionalAttrs (!muslStatic) {
    RUSTFLAGS = "-C target-feature=+crt-static";
  };
  buildInputs = lib.optionals (!muslStatic && stdenv.hostPlatform.isGnu) [ glibc.static ];

  # A static binary has no NEEDED entries (and no interpreter); fail the build if it has any.
  postInstall = ''
    if $READELF -d "$out/bin/uplink" | grep -q NEEDED || $READELF -l "$out/bin/uplink" | grep -q INTERP; then
      echo "uplink is not statically linked:" >&2
      $READELF -d "$out/bin/uplink" >&2
      exit 1
    fi
  '';

  meta = {
    description = "Connects a bare-metal node to its data-centre fabric: BGP, BFD, FIB, node network";
    license = lib.licenses.asl20;
    platforms = lib.platforms.linux;
    mainProgram = "uplink";
  };
}
