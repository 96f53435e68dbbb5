#!/bin/bash
# Builds the image twice into two directories and compares SHA256SUMS; prints the differences
# (down to the files inside an initramfs) and fails when there are any.
#   VERIFY_DIR=/var/tmp/uplink-image-verify     where the two builds go
#   VERIFY_FRESH_BASE=1   the second build debootstraps afresh instead of using the cached base
#                         tree (slow: proves the debootstrap stage too)
#   VERIFY_FRESH_UPLINK=1 the second build compiles uplink in a fresh target dir (slow: proves
#                         the binary is reproducible from another path)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
dir=${VERIFY_DIR:-/var/tmp/uplink-image-verify}
rm -rf "$dir"; mkdir -p "$dir"

t0=$(date +%s)
IMAGE_OUT=$dir/a "$here/build.sh"
t1=$(date +%s)
env2=(IMAGE_OUT="$dir/b")
[ "${VERIFY_FRESH_BASE:-0}" = 1 ] && env2+=(IMAGE_NO_BASE_CACHE=1)
[ "${VERIFY_FRESH_UPLINK:-0}" = 1 ] && env2+=(CARGO_TARGET_DIR="$dir/target")
env "${env2[@]}" "$here/build.sh"
t2=$(date +%s)
echo "image-verify: build A $((t1 - t0)) s, build B $((t2 - t1)) s"

if cmp -s "$dir/a/SHA256SUMS" "$dir/b/SHA256SUMS"; then
  echo "image-verify: OK, identical:"
  cat "$dir/a/SHA256SUMS"
  exit 0
fi
echo "image-verify: outputs differ:" >&2
diff "$dir/a/SHA256SUMS" "$dir/b/SHA256SUMS" >&2 || true
# Narrow an initramfs difference down to the member files.
for f in node/initrd.img tor/initrd.img node/initrd-disk.img; do
  if [ ! -f "$dir/a/$f" ] || cmp -s "$dir/a/$f" "$dir/b/$f"; then continue; fi
  for side in a b; do
    mkdir -p "$dir/x/$side/$f"
    zstd -dc "$dir/$side/$f" | (cd "$dir/x/$side/$f" && cpio -idm --quiet 2>/dev/null) || true
  done
  echo "--- files differing inside $f:" >&2
  diff -rq "$dir/x/a/$f" "$dir/x/b/$f" >&2 || true
done
exit 1
