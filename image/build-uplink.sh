#!/bin/bash
# Builds the static uplink binary reproducibly and prints its path. Same recipe as `make static`,
# plus path remapping so neither the checkout, the target dir nor the cargo/rustup homes end up
# in the binary (panic locations, debug info).
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
target=x86_64-unknown-linux-gnu
target_dir=${CARGO_TARGET_DIR:-$repo/target}
cargo_home=${CARGO_HOME:-$HOME/.cargo}
rustup_home=${RUSTUP_HOME:-$HOME/.rustup}
export SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(git -C "$repo" log -1 --format=%ct -- image daemon Cargo.toml Cargo.lock)}
export RUSTFLAGS="-C target-feature=+crt-static --remap-path-prefix=$repo=/build/uplink \
--remap-path-prefix=$target_dir=/build/target --remap-path-prefix=$cargo_home=/cargo \
--remap-path-prefix=$rustup_home=/rustup"
export CARGO_TARGET_DIR=$target_dir
# Serialise with other cargo builds on a shared machine when asked to.
lock=()
[ -n "${UPLINK_BUILD_LOCK:-}" ] && lock=(flock "$UPLINK_BUILD_LOCK")
(cd "$repo" && "${lock[@]}" cargo build --locked --release --target "$target" -p uplink --bin uplink --features "netconf kubernetes" >&2)
echo "$target_dir/$target/release/uplink"
