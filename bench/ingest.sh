#!/bin/bash
# BGP ingest benchmark: uplink, BIRD 2 and FRR bgpd each receive the same pre-encoded UPDATE
# stream from uplink-inject over a veth pair between two fresh network namespaces. For each
# daemon it reports the time from the injector's first UPDATE octet until the daemon reports all
# N routes, and the resident memory per route ((VmRSS after - VmRSS before) / N).
# With INSTALL=1 the kernel is in the path: uplink installs (install = true), BIRD runs a kernel
# protocol, FRR runs zebra beside bgpd; the time ends when the kernel's FIB holds all N routes,
# and memory is read 5 s later (FRR: bgpd + zebra).
#
#   bench/ingest.sh                  run everything (needs root; `make bench` builds first)
# Environment knobs:
#   UPLINK, INJECT      binaries (default: $CARGO_TARGET_DIR or target, /release/)
#   UPLINK_ARENAS       uplink's MALLOC_ARENA_MAX (default: its systemd unit's, 1)
#   UPLINK_MMAP_THRESHOLD  uplink's MALLOC_MMAP_THRESHOLD_ (default: its unit's, 131072;
#                       empty: glibc's dynamic threshold)
#   DAEMONS             subset of "uplink bird frr" (default all three)
#   CASES               subset of "v4 v6 v4mix" (default all three; v4mix is the v4 case with
#                       ATTR_SETS distinct attribute sets, spread like a full table's)
#   ATTR_SETS           attribute sets of the v4mix case (default 300000)
#   INSTALL             1: the daemons install into the kernel (default 0: Loc-RIB only)
#   V4_COUNT, V6_COUNT  prefixes per case (default 1000000 /24s and 200000 /48s)
#   RUNS                runs per daemon and case; the table shows the median (default 3)
#   TIMEOUT             seconds one ingest may take before it counts as failed (default 300)
#   POLL                seconds between count polls (default 0.05)
set -euo pipefail

TARGET_DIR=${CARGO_TARGET_DIR:-target}
UPLINK=$(realpath "${UPLINK:-$TARGET_DIR/release/uplink}")
# uplink runs with its systemd unit's malloc settings (UPLINK_MALLOC_ENV).
# shellcheck source=bench/uplink-malloc.sh
. "$(dirname "${BASH_SOURCE[0]}")/uplink-malloc.sh"
INJECT=$(realpath "${INJECT:-$TARGET_DIR/release/uplink-inject}")
DAEMONS=${DAEMONS:-"uplink bird frr"}
CASES=${CASES:-"v4 v6 v4mix"}
ATTR_SETS=${ATTR_SETS:-300000}
INSTALL=${INSTALL:-0}
SETTLE=${SETTLE:-$([ "$INSTALL" = 1 ] && echo 5 || echo 1)}
V4_COUNT=${V4_COUNT:-1000000}
V6_COUNT=${V6_COUNT:-200000}
RUNS=${RUNS:-3}
TIMEOUT=${TIMEOUT:-300}
POLL=${POLL:-0.05}

ID=ulb$(($$ % 10000))
NS_D=${ID}-d # the daemon under test
NS_I=${ID}-i # the injector
WORK=$(mktemp -d /tmp/uplink-bench.XXXXXX)
chmod 755 "$WORK"
RESULTS=$WORK/results
: >"$RESULTS"
D_ADDR4=10.99.0.1 I_ADDR4=10.99.0.2 D_ADDR6=fd99::1 I_ADDR6=fd99::2
D_AS=65001 I_AS=65002
DPID="" IPID="" ZPID=""

die() { echo "ingest: $*" >&2; exit 1; }
[ "$(id -u)" -eq 0 ] || die "needs root (network namespaces)"
for f in "$UPLINK" "$INJECT"; do [ -x "$f" ] || die "$f is not built (make bench builds it)"; done
for t in bird birdc vtysh /usr/lib/frr/bgpd jq ip; do
  command -v "$t" >/dev/null || die "$t is missing (scripts/apt-install frr bird2 jq iproute2)"
done

now_ns() { local t=$EPOCHREALTIME; echo "${t/./}000"; }

rss_kb() { awk '/^VmRSS:/ {print $2}' "/proc/$1/status"; }

# The daemon's resident memory: bgpd and zebra together for FRR.
daemon_rss_kb() {
  local total=0 pid
  for pid in $DPID $ZPID; do total=$((total + $(rss_kb "$pid"))); done
  echo "$total"
}

# Routes in the daemon namespace's kernel FIB: the IPv4 trie's prefix count, or IPv6's route
# entry count (hex in rt6_stats), both cheap to read at a million routes.
kernel_routes() {
  local fam=$1
  if [ "$fam" = v6 ]; then
    printf '%d\n' "0x$(ip netns exec "$NS_D" cat /proc/net/rt6_stats | awk '{print $3}')"
  else
    ip netns exec "$NS_D" cat /proc/net/fib_triestat | awk '/Prefixes:/ {print $2; exit}'
  fi
}

# Kills what one case started and removes its namespaces; safe to call twice.
teardown() {
  local pid
  for pid in $IPID $DPID $ZPID; do kill "$pid" 2>/dev/null || true; done
  for _ in $(seq 20); do
    pid=""
    for p in $IPID $DPID $ZPID; do kill -0 "$p" 2>/dev/null && pid=$p; done
    [ -z "$pid" ] && break
    sleep 0.1
  done
  for ns in $NS_D $NS_I; do
    ip netns pids "$ns" 2>/dev/null | xargs -r kill -9 2>/dev/null || true
    ip netns del "$ns" 2>/dev/null || true
  done
  rm -rf "/var/run/frr/$NS_D"
  DPID="" IPID="" ZPID=""
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
  ip -n "$NS_D" addr add "$D_ADDR4/24" dev "${ID}a"
  ip -n "$NS_I" addr add "$I_ADDR4/24" dev "${ID}b"
  ip -n "$NS_D" addr add "$D_ADDR6/64" dev "${ID}a" nodad
  ip -n "$NS_I" addr add "$I_ADDR6/64" dev "${ID}b" nodad
  ip -n "$NS_D" link set "${ID}a" up
  ip -n "$NS_I" link set "${ID}b" up
}

# The last prefix the injector sends: 16.0.0.0/24 or 2a00::/48 plus N-1 blocks.
last_prefix() {
  local fam=$1 n=$(($2 - 1))
  if [ "$fam" = v4 ]; then
    echo "$((16 + (n >> 16))).$(((n >> 8) & 255)).$((n & 255)).0/24"
  else
    printf '2a00:%x:%x::/48\n' $((n >> 16)) $((n & 65535))
  fi
}

# --- one launcher and one probe per daemon -------------------------------------------------

start_uplink() {
  local fam=$1 peer=$2 dir=$WORK/uplink
  mkdir -p "$dir/conf.d"
  cat >"$dir/uplink.toml" <<TOML
[[bgp.routers]]
asn = $D_AS
id = "$D_ADDR4"
# INSTALL=0: Loc-RIB ingest only, like BIRD and FRR then (no kernel protocol, bgpd -Z).
install = $([ "$INSTALL" = 1 ] && echo true || echo false)

[[bgp.routers.neighbors]]
address = "$peer"
asn = $I_AS
passive = true
hold_time = "180s"
to_receive = { allowed = { mode = "all" } }
TOML
  (cd "$dir" && exec ip netns exec "$NS_D" env "${UPLINK_MALLOC_ENV[@]}" "$UPLINK" run --config "$dir/uplink.toml" \
    --socket "$dir/uplink.sock" >"$dir/uplink.log" 2>&1) &
  DPID=$!
  disown "$DPID"
}

# Prints "STATE COUNT" for the injector's session.
probe_uplink() {
  local fam=$1 peer=$2 key=ipv4Unicast
  [ "$fam" = v6 ] && key=ipv6Unicast
  "$UPLINK" show bgp summary --json --socket "$WORK/uplink/uplink.sock" 2>/dev/null |
    jq -r --arg k "$key" --arg p "$peer" '.[$k].peers[$p] | "\(.state) \(.pfxRcd)"' 2>/dev/null ||
    echo "down 0"
}

start_bird() {
  local fam=$1 peer=$2 dir=$WORK/bird channel=ipv4 local=$D_ADDR4
  [ "$fam" = v6 ] && channel=ipv6 local=$D_ADDR6
  mkdir -p "$dir"
  cat >"$dir/bird.conf" <<BIRD
log "$dir/bird.log" { info, warning, error, fatal };
# Route timestamps to the millisecond: the last prefix's import time ends the measurement.
timeformat route iso long ms;
router id $D_ADDR4;
protocol device { }
protocol bgp inj {
  local $local as $D_AS;
  neighbor $peer as $I_AS;
  passive on;
  hold time 180;
  $channel { import all; export none; };
}
$([ "$INSTALL" = 1 ] && echo "protocol kernel { $channel { export all; }; }")
BIRD
  ip netns exec "$NS_D" bird -c "$dir/bird.conf" -s "$dir/bird.ctl" -P "$dir/bird.pid"
  for _ in $(seq 50); do [ -s "$dir/bird.pid" ] && break; sleep 0.1; done
  DPID=$(cat "$dir/bird.pid")
}

probe_bird() {
  birdc -s "$WORK/bird/bird.ctl" show protocols all inj 2>/dev/null | awk '
    /BGP state:/ {state=$3}
    /Routes:/ {routes=$2}
    END {print (state ? state : "down"), (routes ? routes : 0)}'
}

start_frr() {
  local fam=$1 peer=$2 dir=$WORK/frr af="ipv4 unicast"
  [ "$fam" = v6 ] && af="ipv6 unicast"
  mkdir -p "$dir" "/var/run/frr/$NS_D"
  chown frr:frr "/var/run/frr/$NS_D" "$dir"
  cat >"$dir/frr.conf" <<FRR
frr defaults traditional
hostname bench
log file $dir/frr.log
route-map NONE deny 10
router bgp $D_AS
 bgp router-id $D_ADDR4
 no bgp ebgp-requires-policy
 no bgp default ipv4-unicast
 neighbor $peer remote-as $I_AS
 neighbor $peer passive
 neighbor $peer timers 60 180
 address-family $af
  neighbor $peer activate
  neighbor $peer route-map NONE out
 exit-address-family
FRR
  chmod 644 "$dir/frr.conf"
  local no_zebra=-Z
  if [ "$INSTALL" = 1 ]; then
    no_zebra=""
    ip netns exec "$NS_D" /usr/lib/frr/zebra -d -N "$NS_D" -f "$dir/frr.conf" -i "$dir/zebra.pid"
    for _ in $(seq 50); do [ -s "$dir/zebra.pid" ] && break; sleep 0.1; done
    ZPID=$(cat "$dir/zebra.pid")
  fi
  ip netns exec "$NS_D" /usr/lib/frr/bgpd -d $no_zebra -N "$NS_D" -f "$dir/frr.conf" -i "$dir/bgpd.pid"
  for _ in $(seq 50); do [ -s "$dir/bgpd.pid" ] && break; sleep 0.1; done
  DPID=$(cat "$dir/bgpd.pid")
}

probe_frr() {
  local fam=$1 peer=$2 key=ipv4Unicast
  [ "$fam" = v6 ] && key=ipv6Unicast
  ip netns exec "$NS_D" vtysh -N "$NS_D" -c "show bgp summary json" 2>/dev/null |
    jq -r --arg k "$key" --arg p "$peer" '.[$k].peers[$p] | "\(.state) \(.pfxRcd)"' 2>/dev/null ||
    echo "down 0"
}

# The moment the last route entered Loc-RIB, in epoch nanoseconds, from the daemon itself
# (so the poll interval does not bound the resolution); empty when the daemon cannot say.
done_uplink() {
  local fam=$1 peer=$2 ms
  ms=$("$UPLINK" show bgp summary --json --socket "$WORK/uplink/uplink.sock" 2>/dev/null |
    jq -r --arg k "$([ "$fam" = v6 ] && echo ipv6Unicast || echo ipv4Unicast)" --arg p "$peer" \
      '.[$k].peers[$p].lastUpdateAppliedEpochMs // empty')
  [ -n "$ms" ] && echo "${ms}000000"
}

# BIRD stamps each route with its import time (`timeformat route iso long ms` above).
done_bird() {
  local fam=$1 count=$2 stamp
  stamp=$(birdc -s "$WORK/bird/bird.ctl" show route "$(last_prefix "$fam" "$count")" 2>/dev/null |
    grep -oE '[0-9]{4}-[0-9]{2}-[0-9]{2} [0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{3}' | head -1)
  [ -n "$stamp" ] && date -d "$stamp" +%s%N
}

# FRR counts pfxRcd when a path enters the Adj-RIB-In; best-path selection runs later off a
# work queue (FIFO). The route is in Loc-RIB once the last prefix has a best path.
frr_has_best() {
  local fam=$1 prefix=$2 afi=ipv4
  [ "$fam" = v6 ] && afi=ipv6
  ip netns exec "$NS_D" vtysh -N "$NS_D" -c "show bgp $afi unicast $prefix json" 2>/dev/null |
    jq -e '[.paths[]? | select(.bestpath.overall == true)] | length > 0' >/dev/null 2>&1
}

# --- one measurement ---------------------------------------------------------------------

# run_one DAEMON FAMILY COUNT RUN: appends "daemon fam run seconds bytes_per_route rss0 rss1".
run_one() {
  local daemon=$1 case=$2 count=$3 run=$4 peer next_hop target fam sets=1
  fam=${case%mix}
  [ "$case" = v4mix ] && sets=$ATTR_SETS
  if [ "$fam" = v4 ]; then peer=$I_ADDR4 next_hop=$I_ADDR4 target=$D_ADDR4
  else peer=$I_ADDR6 next_hop=$I_ADDR6 target=$D_ADDR6; fi
  setup_ns
  rm -rf "${WORK:?}/$daemon" "$WORK/go" "$WORK/inject.out"
  "start_$daemon" "$fam" "$peer"

  # The injector encodes everything, connects, and waits for the go file.
  ip netns exec "$NS_I" "$INJECT" --target "$target" --next-hop "$next_hop" --count "$count" \
    --asn "$I_AS" --router-id "$I_ADDR4" --attr-sets "$sets" --go-file "$WORK/go" \
    >"$WORK/inject.out" 2>&1 &
  IPID=$!
  disown "$IPID"

  local state routes deadline=$((SECONDS + 90))
  while :; do
    read -r state routes < <("probe_$daemon" "$fam" "$peer")
    [ "$state" = Established ] && [ "$routes" = 0 ] && break
    if [ $SECONDS -ge $deadline ] || ! kill -0 "$IPID" 2>/dev/null; then
      echo "ingest: $daemon/$fam: no session (state $state):" >&2
      cat "$WORK/inject.out" >&2
      return 1
    fi
    sleep 0.2
  done
  sleep 1 # let the daemon settle after the session came up
  local rss0 fib0
  rss0=$(daemon_rss_kb)
  fib0=$(kernel_routes "$fam")

  touch "$WORK/go"
  local done_ns="" t_rcd=""
  deadline=$((SECONDS + TIMEOUT))
  local last_address
  last_address=$(last_prefix "$fam" "$count" | sed 's|/.*||; s|\.0$|.1|; s|::$|::1|')
  while [ "$INSTALL" = 1 ]; do
    # The kernel in the path: done when its FIB has every route. Counting walks the whole
    # trie (tens of ms at 1M routes, and it competes with the daemon for the CPU), so the
    # count waits until a single lookup finds the last prefix sent.
    if ip -n "$NS_D" route get fibmatch "$last_address" >/dev/null 2>&1 &&
      [ "$(kernel_routes "$fam")" -ge $((fib0 + count)) ]; then
      t_rcd=$(now_ns)
      break
    fi
    if [ $SECONDS -ge $deadline ] || ! kill -0 "$DPID" 2>/dev/null; then
      echo "ingest: $daemon/$case: $(($(kernel_routes "$fam") - fib0)) of $count routes in the kernel after ${TIMEOUT}s" >&2
      return 1
    fi
    sleep "$POLL"
  done
  while [ "$INSTALL" != 1 ]; do
    read -r state routes < <("probe_$daemon" "$fam" "$peer")
    if [ "${routes:-0}" -ge "$count" ] 2>/dev/null; then
      t_rcd=$(now_ns)
      break
    fi
    if [ $SECONDS -ge $deadline ] || ! kill -0 "$DPID" 2>/dev/null; then
      echo "ingest: $daemon/$fam: only $routes of $count routes after ${TIMEOUT}s (state $state)" >&2
      tail -5 "$WORK/inject.out" >&2
      return 1
    fi
    sleep "$POLL"
  done
  done_ns=$t_rcd
  if [ "$INSTALL" != 1 ]; then
    case $daemon in
      uplink) done_ns=$(done_uplink "$fam" "$peer") ;;
      bird) done_ns=$(done_bird "$fam" "$count") ;;
    esac
  fi
  [ -n "$done_ns" ] || { echo "ingest: $daemon did not say when its last route arrived" >&2; return 1; }
  if [ "$daemon" = frr ] && [ "$INSTALL" != 1 ]; then
    local last
    last=$(last_prefix "$fam" "$count")
    until frr_has_best "$fam" "$last"; do
      [ $SECONDS -ge $deadline ] && { echo "ingest: frr: $last never became best" >&2; return 1; }
      sleep "$POLL"
    done
    done_ns=$(now_ns)
  fi
  sleep "$SETTLE" # memory a moment after the last route, not mid-allocation
  local rss1 first_ns last_ns peak
  rss1=$(daemon_rss_kb)
  peak=$(awk '/^VmHWM:/ {print $2}' "/proc/$DPID/status")
  first_ns=$(sed -n 's/^first_write_ns=//p' "$WORK/inject.out")
  last_ns=$(sed -n 's/^last_write_ns=\([0-9]*\).*/\1/p' "$WORK/inject.out")
  [ -n "$first_ns" ] || { echo "ingest: the injector printed no first write" >&2; return 1; }
  local secs bpr write_s rcd_s
  secs=$(awk -v a="$first_ns" -v b="$done_ns" 'BEGIN {printf "%.3f", (b - a) / 1e9}')
  rcd_s=$(awk -v a="$first_ns" -v b="$t_rcd" 'BEGIN {printf "%.3f", (b - a) / 1e9}')
  write_s=$(awk -v a="$first_ns" -v b="${last_ns:-$first_ns}" 'BEGIN {printf "%.3f", (b - a) / 1e9}')
  bpr=$(awk -v a="$rss0" -v b="$rss1" -v n="$count" 'BEGIN {printf "%.0f", (b - a) * 1024 / n}')
  local where="to Loc-RIB"
  [ "$INSTALL" = 1 ] && where="to the kernel FIB"
  printf '%-6s %-5s run %s: %8s s %s (count seen at %s s, injector done writing at %s s), RSS %s -> %s KiB (peak %s), %s B/route\n' \
    "$daemon" "$case" "$run" "$secs" "$where" "$rcd_s" "$write_s" "$rss0" "$rss1" "$peak" "$bpr"
  echo "$daemon $case $run $secs $bpr $rss0 $rss1" >>"$RESULTS"
  teardown
}

median() { sort -g | awk '{v[NR] = $1} END {if (NR == 0) print "-"; else if (NR % 2) print v[(NR + 1) / 2]; else printf "%.3f\n", (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }

field_median() { awk -v d="$1" -v f="$2" -v c="$3" '$1 == d && $2 == f {print $c}' "$RESULTS" | median; }

echo "ingest benchmark: $(nproc) cores, kernel $(uname -r), runs=$RUNS, install=$INSTALL, v4mix sets=$ATTR_SETS"
echo "  uplink $UPLINK"
echo "  $(bird --version 2>&1 | head -1), FRR $(/usr/lib/frr/bgpd --version | head -1 | awk '{print $3}')"
failed=0
for fam in $CASES; do
  count=$V4_COUNT
  [ "$fam" = v6 ] && count=$V6_COUNT
  for run in $(seq "$RUNS"); do
    for daemon in $DAEMONS; do
      run_one "$daemon" "$fam" "$count" "$run" || { failed=1; teardown; }
    done
  done
done

echo
printf '%-5s %-8s %10s %8s %10s %10s %12s %10s %10s\n' case daemon routes "time s" "B/route" "RSS MiB" \
  "uplink/it:t" "uplink/it:mem" "uplink/it:rss"
for fam in $CASES; do
  count=$V4_COUNT
  [ "$fam" = v6 ] && count=$V6_COUNT
  ut=$(field_median uplink "$fam" 4)
  um=$(field_median uplink "$fam" 5)
  ur=$(field_median uplink "$fam" 7)
  for daemon in $DAEMONS; do
    t=$(field_median "$daemon" "$fam" 4)
    m=$(field_median "$daemon" "$fam" 5)
    r=$(field_median "$daemon" "$fam" 7)
    rt=$(awk -v u="$ut" -v o="$t" 'BEGIN {if (o + 0 > 0 && u != "-") printf "%.2f", u / o; else print "-"}')
    rm=$(awk -v u="$um" -v o="$m" 'BEGIN {if (o + 0 > 0 && u != "-") printf "%.2f", u / o; else print "-"}')
    rr=$(awk -v u="$ur" -v o="$r" 'BEGIN {if (o + 0 > 0 && u != "-") printf "%.2f", u / o; else print "-"}')
    rmib=$(awk -v k="$r" 'BEGIN {if (k != "-") printf "%.1f", k / 1024; else print "-"}')
    printf '%-5s %-8s %10s %8s %10s %10s %12s %10s %10s\n' "$fam" "$daemon" "$count" "$t" "$m" "$rmib" "$rt" "$rm" "$rr"
  done
done
echo "(medians of $RUNS runs; RSS = the daemon's total resident memory after the last route;"
echo " uplink/it = uplink's value divided by the row's: below 1 means uplink is faster or smaller)"
exit $failed
