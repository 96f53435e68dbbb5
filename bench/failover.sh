#!/bin/bash
# Failover benchmark: two upstreams (two uplink-inject processes on one link, 10.99.0.2 and
# 10.99.0.3, both AS 65002) send the same N IPv4 /24s; the daemon under test installs them with
# 2-way ECMP. Then upstream A's session is cut (its process is killed: the daemon reads EOF at
# once) and uplink-fibwatch, watching the daemon's kernel FIB from inside its namespace, times:
#   clean  - from the cut to the kernel change after which no route forwards via A,
#   last   - from the cut to the last kernel route/nexthop change,
#   events - kernel route and nexthop notifications after the cut.
# Daemons: uplink, BIRD 2 (bgp + kernel protocol with `merge paths`), FRR 8.4 (bgpd + zebra,
# `maximum-paths 2`), each as shipped (uplink turns net.ipv4.nexthop_compat_mode off itself).
#
#   bench/failover.sh [COUNTS...]     default: 100000 500000 1000000 (needs root)
# Environment: DAEMONS (default "uplink bird frr"), UPLINK, INJECT, FIBWATCH (binaries, default
# $CARGO_TARGET_DIR or target, /release/), TIMEOUT (seconds for the table to load, 600),
# UPLINK_ARENAS and UPLINK_MMAP_THRESHOLD (uplink's malloc settings, bench/uplink-malloc.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
read -r -a COUNTS <<<"${*:-100000 500000 1000000}"
TARGET_DIR=${CARGO_TARGET_DIR:-target}
UPLINK=$(realpath "${UPLINK:-$TARGET_DIR/release/uplink}")
# uplink runs with its systemd unit's malloc settings (UPLINK_MALLOC_ENV).
# shellcheck source=bench/uplink-malloc.sh
. "$(dirname "${BASH_SOURCE[0]}")/uplink-malloc.sh"
INJECT=$(realpath "${INJECT:-$TARGET_DIR/release/uplink-inject}")
FIBWATCH=$(realpath "${FIBWATCH:-$TARGET_DIR/release/uplink-fibwatch}")
DAEMONS=${DAEMONS:-"uplink bird frr"}
TIMEOUT=${TIMEOUT:-600}

ID=ulfo$(($$ % 10000))
NS_D=${ID}-d NS_I=${ID}-i
WORK=$(mktemp -d /tmp/uplink-failover.XXXXXX)
chmod 755 "$WORK"
D=10.99.0.1 A=10.99.0.2 B=10.99.0.3
PIDS=""

die() { echo "failover: $*" >&2; exit 1; }
[ "$(id -u)" -eq 0 ] || die "needs root (network namespaces)"
for f in "$UPLINK" "$INJECT" "$FIBWATCH"; do [ -x "$f" ] || die "$f is not built (make bench-failover builds it)"; done
for t in bird birdc vtysh /usr/lib/frr/bgpd /usr/lib/frr/zebra ip; do
  command -v "$t" >/dev/null || die "$t is missing (scripts/apt-install frr bird2 iproute2)"
done

now_ns() { local t=$EPOCHREALTIME; echo "${t/./}000"; }

teardown() {
  local pid
  for pid in $PIDS; do kill "$pid" 2>/dev/null || true; done
  sleep 0.5
  for ns in $NS_D $NS_I; do
    ip netns pids "$ns" 2>/dev/null | xargs -r kill -9 2>/dev/null || true
    ip netns del "$ns" 2>/dev/null || true
  done
  rm -rf "/var/run/frr/$NS_D"
  PIDS=""
}
trap 'teardown; rm -rf "$WORK"' EXIT
trap 'exit 130' INT TERM

setup_ns() {
  teardown
  ip netns add "$NS_D"
  ip netns add "$NS_I"
  ip -n "$NS_D" link set lo up
  ip -n "$NS_I" link set lo up
  ip link add "${ID}a" netns "$NS_D" type veth peer name "${ID}b" netns "$NS_I"
  ip -n "$NS_D" addr add "$D/24" dev "${ID}a"
  ip -n "$NS_I" addr add "$A/24" dev "${ID}b"
  ip -n "$NS_I" addr add "$B/24" dev "${ID}b"
  ip -n "$NS_D" link set "${ID}a" up
  ip -n "$NS_I" link set "${ID}b" up
}

start_uplink() {
  local dir=$WORK/uplink
  mkdir -p "$dir/conf.d"
  {
    printf '[[bgp.routers]]\nasn = 65001\nid = "%s"\n' "$D"
    for peer in $A $B; do
      printf '\n[[bgp.routers.neighbors]]\naddress = "%s"\nasn = 65002\npassive = true\n' "$peer"
      printf 'hold_time = "180s"\nto_receive = { allowed = { mode = "all" } }\n'
    done
  } >"$dir/uplink.toml"
  ip netns exec "$NS_D" env "${UPLINK_MALLOC_ENV[@]}" "$UPLINK" run --config "$dir/uplink.toml" --socket "$dir/uplink.sock" \
    >"$dir/uplink.log" 2>&1 &
  PIDS="$PIDS $!"
}

start_bird() {
  local dir=$WORK/bird
  mkdir -p "$dir"
  {
    echo "log \"$dir/bird.log\" { info, warning, error, fatal };"
    echo "router id $D;"
    echo "protocol device { }"
    echo "protocol kernel { ipv4 { export all; }; merge paths on; }"
    for peer in $A $B; do
      echo "protocol bgp inj_${peer//./_} { local $D as 65001; neighbor $peer as 65002;"
      echo "  passive on; hold time 180; ipv4 { import all; export none; }; }"
    done
  } >"$dir/bird.conf"
  ip netns exec "$NS_D" bird -c "$dir/bird.conf" -s "$dir/bird.ctl" -P "$dir/bird.pid"
  for _ in $(seq 50); do [ -s "$dir/bird.pid" ] && break; sleep 0.1; done
  PIDS="$PIDS $(cat "$dir/bird.pid")"
}

start_frr() {
  local dir=$WORK/frr
  mkdir -p "$dir" "/var/run/frr/$NS_D"
  chown frr:frr "/var/run/frr/$NS_D" "$dir"
  {
    echo "frr defaults traditional"
    echo "hostname failover"
    echo "log file $dir/frr.log"
    echo "route-map NONE deny 10"
    echo "router bgp 65001"
    echo " bgp router-id $D"
    echo " no bgp ebgp-requires-policy"
    echo " no bgp default ipv4-unicast"
    for peer in $A $B; do
      echo " neighbor $peer remote-as 65002"
      echo " neighbor $peer passive"
      echo " neighbor $peer timers 60 180"
    done
    echo " address-family ipv4 unicast"
    echo "  maximum-paths 2"
    for peer in $A $B; do
      echo "  neighbor $peer activate"
      echo "  neighbor $peer route-map NONE out"
    done
    echo " exit-address-family"
  } >"$dir/frr.conf"
  chmod 644 "$dir/frr.conf"
  ip netns exec "$NS_D" /usr/lib/frr/zebra -d -N "$NS_D" -f "$dir/frr.conf" -i "$dir/zebra.pid"
  ip netns exec "$NS_D" /usr/lib/frr/bgpd -d -N "$NS_D" -f "$dir/frr.conf" -i "$dir/bgpd.pid"
  for _ in $(seq 50); do [ -s "$dir/bgpd.pid" ] && [ -s "$dir/zebra.pid" ] && break; sleep 0.1; done
  PIDS="$PIDS $(cat "$dir/bgpd.pid") $(cat "$dir/zebra.pid")"
}

# check GATEWAY: "routes=N via_gateway=M" for the daemon's table, from a dump.
check() { ip netns exec "$NS_D" "$FIBWATCH" --gateway "$1" --check; }

# run_one DAEMON COUNT: appends "daemon count clean_ms last_ms route_events nexthop_events".
run_one() {
  local daemon=$1 count=$2
  setup_ns
  rm -f "$WORK/go"
  "start_$daemon"
  local inj_a inj_b
  ip netns exec "$NS_I" "$INJECT" --target "$D" --source "$A" --next-hop "$A" --count "$count" \
    --asn 65002 --router-id "$A" --go-file "$WORK/go" >"$WORK/inject-a.out" 2>&1 &
  inj_a=$!
  ip netns exec "$NS_I" "$INJECT" --target "$D" --source "$B" --next-hop "$B" --count "$count" \
    --asn 65002 --router-id "$B" --go-file "$WORK/go" >"$WORK/inject-b.out" 2>&1 &
  inj_b=$!
  PIDS="$PIDS $inj_a $inj_b"
  local deadline=$((SECONDS + 90))
  until grep -q established "$WORK/inject-a.out" && grep -q established "$WORK/inject-b.out"; do
    [ $SECONDS -ge $deadline ] && { cat "$WORK"/inject-*.out >&2; die "$daemon: sessions did not come up"; }
    sleep 0.2
  done
  touch "$WORK/go"
  # Loaded when every route forwards via both upstreams.
  deadline=$((SECONDS + TIMEOUT))
  local a b
  while :; do
    a=$(check "$A") b=$(check "$B")
    [ "$a" = "routes=$count via_gateway=$count" ] && [ "$b" = "routes=$count via_gateway=$count" ] && break
    [ $SECONDS -ge $deadline ] && die "$daemon: never loaded $count ECMP routes ($a / $b)"
    sleep 1
  done
  sleep 2 # the daemon done with the load
  ip netns exec "$NS_D" "$FIBWATCH" --gateway "$A" --quiet-ms 3000 >"$WORK/watch.out" 2>&1 &
  local watch=$!
  PIDS="$PIDS $watch"
  until grep -q '^ready' "$WORK/watch.out"; do
    kill -0 "$watch" 2>/dev/null || { cat "$WORK/watch.out" >&2; die "$daemon: the watcher stopped"; }
    sleep 0.1
  done
  local cut
  cut=$(now_ns)
  kill -9 "$inj_a"
  wait "$watch" || true
  local line clean last routes nexthops left
  line=$(grep '^first_ns' "$WORK/watch.out") || die "$daemon: no result: $(cat "$WORK/watch.out")"
  clean=$(sed -n 's/.*clean_ns=\([0-9-]*\).*/\1/p' <<<"$line")
  last=$(sed -n 's/.*last_ns=\([0-9-]*\).*/\1/p' <<<"$line")
  routes=$(sed -n 's/.*route_events=\([0-9]*\).*/\1/p' <<<"$line")
  nexthops=$(sed -n 's/.*nexthop_events=\([0-9]*\).*/\1/p' <<<"$line")
  left=$(sed -n 's/.*via_gateway_left=\([0-9]*\).*/\1/p' <<<"$line")
  ms() { [ "$1" = - ] && echo - || awk -v a="$cut" -v b="$1" 'BEGIN {printf "%.1f", (b - a) / 1e6}'; }
  printf '%-6s %8s routes: clean %8s ms, last change %8s ms, %7s route + %4s nexthop events, %s routes left via A\n' \
    "$daemon" "$count" "$(ms "$clean")" "$(ms "$last")" "$routes" "$nexthops" "$left" >&2
  echo "$daemon $count $(ms "$clean") $(ms "$last") $routes $nexthops $left" >>"$WORK/results"
  teardown
}

echo "failover benchmark: $(nproc) cores, kernel $(uname -r)" >&2
echo "  uplink $UPLINK; $(bird --version 2>&1 | head -1); FRR $(/usr/lib/frr/bgpd --version | head -1 | awk '{print $3}')" >&2
: >"$WORK/results"
for n in "${COUNTS[@]}"; do
  for daemon in $DAEMONS; do
    run_one "$daemon" "$n"
  done
done
echo "| routes | daemon | no route via the lost hop after | last kernel change after | route events | nexthop events |"
echo "|---:|---|---:|---:|---:|---:|"
while read -r daemon n clean last routes nexthops _; do
  echo "| $n | $daemon | $clean ms | $last ms | $routes | $nexthops |"
done <"$WORK/results"
