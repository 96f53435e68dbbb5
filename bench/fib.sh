#!/usr/bin/env bash
# FIB benchmark: install and then remove N /24 routes (single next hop and 4-way ECMP) with
#   - uplink's FIB writer (daemon/examples/fib_bench.rs, release build),
#   - `ip -batch` (one netlink request per route, the reference),
#   - BIRD 2's kernel protocol exporting a static table of the same routes,
# each in a fresh network namespace, and prints routes per second plus ratios.
# Usage: bench/fib.sh [COUNTS...]   (default: 100000 500000 1000000). Needs root, bird2, iproute2.
set -euo pipefail
cd "$(dirname "$0")/.."
COUNTS=("${@:-100000 500000 1000000}")
read -r -a COUNTS <<<"${COUNTS[*]}"
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$PWD/target}
cargo build --release -q -p uplink --example fib_bench
BENCH=$CARGO_TARGET_DIR/release/examples/fib_bench
WORK=$(mktemp -d /tmp/uplink-fib-bench.XXXXXX)
NS=ulfibbench$$
BIRD_PID=""

cleanup() {
  [[ -n $BIRD_PID ]] && kill "$BIRD_PID" 2>/dev/null || true
  ip netns del "$NS" 2>/dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT

# A namespace with four connected next hops 10.99.0.2-5 on a veth whose peer is in the same
# namespace (the far end never answers; routes only need the next hops to be on-link).
fresh_ns() {
  ip netns del "$NS" 2>/dev/null || true
  ip netns add "$NS"
  ip -n "$NS" link set lo up
  ip -n "$NS" link add bench0 type veth peer name bench1
  ip -n "$NS" addr add 10.99.0.1/24 dev bench0
  ip -n "$NS" link set bench0 up
  ip -n "$NS" link set bench1 up
}

count_routes() { # proto
  # Multipath routes print one line per next hop after their first line.
  ip -n "$NS" -4 route show proto "$1" | awk '/^[0-9]/ { n++ } END { print n + 0 }'
}

prefix() { # index -> a.b.c.0/24, as fib_bench numbers them
  local i=$1
  echo "$((16 + i / 65536)).$(((i / 256) % 256)).$((i % 256)).0/24"
}

gen_routes() { # count ecmp verb -> ip -batch lines
  local n=$1 ecmp=$2 verb=$3
  awk -v n="$n" -v ecmp="$ecmp" -v verb="$verb" 'BEGIN {
    via = "via 10.99.0.2"
    if (ecmp > 1) { via = ""; for (k = 0; k < ecmp; k++) via = via " nexthop via 10.99.0." (2 + k) }
    for (i = 0; i < n; i++) {
      p = (16 + int(i / 65536)) "." (int(i / 256) % 256) "." (i % 256) ".0/24"
      if (verb == "add") print "route add " p " proto bgp metric 20 " via
      else print "route del " p " proto bgp metric 20"
    }
  }'
}

gen_bird() { # count ecmp -> bird.conf
  local n=$1 ecmp=$2
  echo "router id 10.99.0.1;"
  echo "protocol device {}"
  echo "protocol kernel k4 { ipv4 { export all; }; merge paths on; disabled; }"
  echo "protocol static bulk { ipv4;"
  awk -v n="$n" -v ecmp="$ecmp" 'BEGIN {
    via = ""
    for (k = 0; k < ecmp; k++) via = via " via 10.99.0." (2 + k)
    for (i = 0; i < n; i++) {
      p = (16 + int(i / 65536)) "." (int(i / 256) % 256) "." (i % 256) ".0/24"
      print "  route " p via ";"
    }
  }'
  echo "}"
}

now() { date +%s.%N; }
rate() { awk -v n="$1" -v s="$2" 'BEGIN { if (s > 0) printf "%d", n / s; else print "inf" }'; }

wait_count() { # proto target
  while [[ $(count_routes "$1") -ne $2 ]]; do sleep 0.05; done
}

declare -A R
for n in "${COUNTS[@]}"; do
  for ecmp in 1 4; do
    key="$n/$ecmp"
    # uplink
    fresh_ns
    read -r ins rem < <(ip netns exec "$NS" "$BENCH" "$n" "$ecmp" 10.99.0.2)
    R[$key/uplink]="$(rate "$n" "$ins") $(rate "$n" "$rem")"
    # ip -batch
    fresh_ns
    gen_routes "$n" "$ecmp" add >"$WORK/add"
    gen_routes "$n" "$ecmp" del >"$WORK/del"
    t0=$(now); ip -n "$NS" -batch "$WORK/add"; t1=$(now)
    [[ $(count_routes bgp) -eq $n ]] || echo "ip -batch: route count mismatch" >&2
    t2=$(now); ip -n "$NS" -batch "$WORK/del"; t3=$(now)
    R[$key/ip]="$(rate "$n" "$(echo "$t1 - $t0" | bc)") $(rate "$n" "$(echo "$t3 - $t2" | bc)")"
    # BIRD 2: static table loaded first, then the kernel protocol is enabled (install) and
    # disabled (remove; BIRD withdraws its routes when the protocol stops).
    fresh_ns
    gen_bird "$n" "$ecmp" >"$WORK/bird.conf"
    ip netns exec "$NS" bird -c "$WORK/bird.conf" -s "$WORK/bird.ctl" -P "$WORK/bird.pid"
    BIRD_PID=$(cat "$WORK/bird.pid")
    until birdc -s "$WORK/bird.ctl" show route count 2>/dev/null | grep -q "^$n of $n routes"; do sleep 0.2; done
    t0=$(now); birdc -s "$WORK/bird.ctl" enable k4 >/dev/null; wait_count bird "$n"; t1=$(now)
    t2=$(now); birdc -s "$WORK/bird.ctl" disable k4 >/dev/null; wait_count bird 0; t3=$(now)
    kill "$BIRD_PID"; BIRD_PID=""
    R[$key/bird]="$(rate "$n" "$(echo "$t1 - $t0" | bc)") $(rate "$n" "$(echo "$t3 - $t2" | bc)")"
    echo "$key: uplink ${R[$key/uplink]}  ip-batch ${R[$key/ip]}  bird ${R[$key/bird]} (install remove, routes/s)" >&2
  done
done

echo "| routes | next hops | uplink install | uplink remove | ip -batch install | ip -batch remove | BIRD 2 install | BIRD 2 remove | uplink / ip -batch (install) | uplink / BIRD (install) |"
echo "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
for n in "${COUNTS[@]}"; do
  for ecmp in 1 4; do
    key="$n/$ecmp"
    read -r ui ur <<<"${R[$key/uplink]}"
    read -r ii ir <<<"${R[$key/ip]}"
    read -r bi br <<<"${R[$key/bird]}"
    echo "| $n | $ecmp | $ui | $ur | $ii | $ir | $bi | $br | $(awk -v a="$ui" -v b="$ii" 'BEGIN{printf "%.1f×", a/b}') | $(awk -v a="$ui" -v b="$bi" 'BEGIN{printf "%.1f×", a/b}') |"
  done
done
