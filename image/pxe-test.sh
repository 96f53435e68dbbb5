#!/bin/bash
# PXE boot test of the node image: QEMU (TCG) boots from its iPXE ROM, gets the boot script
# from QEMU's built-in TFTP/BOOTP server, loads vmlinuz + initrd.img over the network, the
# node fetches its config from uplink.config=URL (a tar.gz served by a host-side HTTP server at
# 10.0.2.2), reaches multi-user.target and uplink reports READY (systemd prints "Started
# uplink.service" for a Type=notify unit only after READY=1). All read from the serial console.
#
#   image/pxe-test.sh            kernel + initramfs over TFTP
#   PXE_PROTO=http image/pxe-test.sh   ... over HTTP (boot script chained from TFTP)
#   PXE_TIMEOUT=600              seconds until failure (default 420)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(dirname "$here")
out=${IMAGE_OUT:-$here/out}
proto=${PXE_PROTO:-tftp}
timeout=${PXE_TIMEOUT:-420}

"$repo/scripts/apt-install" qemu-system-x86 ipxe-qemu python3
"$here/build.sh"

work=$(mktemp -d "${TMPDIR:-/tmp}/uplink-pxe.XXXXXX")
qemu_pid='' http_pid=''
cleanup() {
  # `wait` returns the killed process's status (143): not the test's result.
  if [ -n "$qemu_pid" ]; then kill "$qemu_pid" 2>/dev/null || true; wait "$qemu_pid" 2>/dev/null || true; fi
  if [ -n "$http_pid" ]; then kill "$http_pid" 2>/dev/null || true; wait "$http_pid" 2>/dev/null || true; fi
  rm -rf "$work"
  return 0
}
trap cleanup EXIT

# The node's config, as uplink.config serves it: a router with no neighbours.
mkdir -p "$work/cfg/uplink" "$work/www" "$work/tftp"
echo pxe-node >"$work/cfg/hostname"
cat >"$work/cfg/uplink/uplink.toml" <<'EOF'
[[bgp.routers]]
asn = 65801
id = "192.0.2.10"
EOF
# setup.sh (the hook run after network-online) reports memory: the root lives in RAM.
cat >"$work/cfg/setup.sh" <<'EOF'
#!/bin/sh
echo "pxe-setup: $(grep -E 'MemTotal|MemAvailable' /proc/meminfo | tr -s ' ' | tr '\n' ' ')"
EOF
"$here/mkconfigdrive" --tar "$work/cfg" "$work/www/node.tar.gz"
for f in vmlinuz initrd.img boot.ipxe; do
  ln -s "$out/node/$f" "$work/tftp/$f"
  ln -s "$out/node/$f" "$work/www/$f"
done

# Host-side HTTP server; the guest reaches the host's loopback as 10.0.2.2.
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
python3 -m http.server "$port" --bind 127.0.0.1 --directory "$work/www" >"$work/http.log" 2>&1 &
http_pid=$!

case "$proto" in
  tftp) chain=boot.ipxe ;;
  http) chain=http://10.0.2.2:$port/boot.ipxe ;;
  *) echo "PXE_PROTO must be tftp or http" >&2; exit 2 ;;
esac
cat >"$work/tftp/pxe.ipxe" <<EOF
#!ipxe
set uplink-args uplink.config=http://10.0.2.2:$port/node.tar.gz
chain $chain
EOF

console=$work/console.log
: >"$console"
start=$(date +%s.%N)
qemu-system-x86_64 -accel tcg -m 1024 -smp 1 -display none -monitor none \
  -serial "file:$console" -boot n \
  -netdev "user,id=n0,tftp=$work/tftp,bootfile=pxe.ipxe" \
  -device virtio-net-pci,netdev=n0 &
qemu_pid=$!

elapsed() { python3 -c "import sys; print(f'{float(sys.argv[1]) - float(sys.argv[2]):.1f}')" "$(date +%s.%N)" "$start"; }
declare -A seen=()
marks=(
  "kernel:Linux version"
  "config:uplink-config: applied from http://10.0.2.2:$port/node.tar.gz"
  "multi-user:Reached target multi-user.target"
  "uplink-ready:Started uplink.service"
  "setup:pxe-setup: "
)
fail() {
  echo "FAIL: $*" >&2
  echo "---- console tail ----" >&2
  tail -n 60 "$console" | tr -d '\r' >&2
  exit 1
}
while [ "${#seen[@]}" -lt "${#marks[@]}" ]; do
  kill -0 "$qemu_pid" 2>/dev/null || fail "qemu exited"
  for m in "${marks[@]}"; do
    name=${m%%:*} pattern=${m#*:}
    if [ -z "${seen[$name]:-}" ] && grep -qF "$pattern" "$console"; then
      seen[$name]=$(elapsed)
      echo "pxe-test: $name after ${seen[$name]} s"
    fi
  done
  grep -qE "uplink.service: Failed|Failed to start uplink.service|uplink-config: failed" "$console" &&
    fail "a unit failed"
  if [ "$(printf '%.0f' "$(elapsed)")" -ge "$timeout" ]; then
    fail "timeout after $timeout s (seen: ${!seen[*]})"
  fi
  sleep 1
done
grep -a -m1 "pxe-setup: Mem" "$console" | sed 's/.*pxe-setup: /pxe-test: node memory: /' | tr -d '\r'
echo "pxe-test: OK ($proto, $(stat -Lc %s "$out/node/initrd.img") byte initramfs): kernel at ${seen[kernel]} s, READY at ${seen[uplink-ready]} s"
