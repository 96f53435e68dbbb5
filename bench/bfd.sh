#!/bin/bash
# BFD detection-time benchmark: uplink and FRR bfdd side by side, in one run.
#
# Topology: one "tor" namespace running FRR (bgpd + bfdd) peers with two nodes, "nu" running
# uplink and "nf" running FRR (bgpd + bfdd, `neighbor X bfd profile`), both with the same BFD
# profile. A trial silences the tor's BFD (nftables drop of its UDP 3784 output, to both
# nodes at once) and measures, on each node, the time from that moment to BGP Down in the
# node's log (uplink: "session down"; FRR: "%ADJCHANGE ... Down"). Then the drop is removed
# and both sessions come back before the next trial.
#
# Afterwards: a hold of both nodes at 10 ms x 3 while every core is busy with other processes,
# counting BFD Down events (there should be none).
#
# Usage (root): bench/bfd.sh [UPLINK_BINARY]
# Env: TRIALS (per interval, default 30), INTERVALS (default "10 50 300"), HOLD_SECONDS (600).
set -euo pipefail
cd "$(dirname "$0")/.."
UPLINK=${1:-${UPLINK_BIN:-target/debug/uplink}}
TRIALS=${TRIALS:-30}
INTERVALS=${INTERVALS:-"10 50 300"}
HOLD_SECONDS=${HOLD_SECONDS:-600}
ID=bb$$
DIR=$(mktemp -d /tmp/bfdbench.XXXXXX)
chmod 777 "$DIR"
NS_T=${ID}t NS_U=${ID}u NS_F=${ID}f
BURNERS=()

cleanup() {
  for p in "${BURNERS[@]}"; do kill "$p" 2>/dev/null || true; done
  for f in "$DIR"/*.pid; do [ -f "$f" ] && kill "$(cat "$f")" 2>/dev/null || true; done
  sleep 0.3
  for ns in $NS_T $NS_U $NS_F; do ip netns del "$ns" 2>/dev/null || true; done
  rm -rf "/var/run/frr/$NS_T" "/var/run/frr/$NS_F"
}
trap cleanup EXIT

for ns in $NS_T $NS_U $NS_F; do ip netns add "$ns"; ip -n "$ns" link set lo up; done
ip link add ${ID}a netns $NS_T type veth peer name ${ID}b netns $NS_U
ip link add ${ID}c netns $NS_T type veth peer name ${ID}d netns $NS_F
ip -n $NS_T addr add 10.9.1.1/24 dev ${ID}a; ip -n $NS_U addr add 10.9.1.2/24 dev ${ID}b
ip -n $NS_T addr add 10.9.2.1/24 dev ${ID}c; ip -n $NS_F addr add 10.9.2.2/24 dev ${ID}d
for l in "$NS_T ${ID}a" "$NS_U ${ID}b" "$NS_T ${ID}c" "$NS_F ${ID}d"; do set -- $l; ip -n "$1" link set "$2" up; done

frr_start() { # ns conf
  local ns=$1 conf=$2
  mkdir -p "/var/run/frr/$ns"; chown frr:frr "/var/run/frr/$ns"
  : > "$DIR/frr-$ns.log"; chown frr:frr "$DIR/frr-$ns.log"; chmod 644 "$conf"
  for d in zebra bfdd bgpd; do
    ip netns exec "$ns" env TZ=UTC /usr/lib/frr/$d -d -N "$ns" -f "$conf" -i "$DIR/$ns-$d.pid"
  done
}
frr_stop() { for d in bgpd bfdd zebra; do [ -f "$DIR/$1-$d.pid" ] && kill "$(cat "$DIR/$1-$d.pid")" 2>/dev/null; rm -f "$DIR/$1-$d.pid"; done; sleep 0.5; }
vty() { ip netns exec "$1" vtysh -N "$1" "${@:2}" 2>/dev/null | grep -v vtysh.conf; }

configure() { # interval_ms
  local ms=$1
  frr_stop $NS_T; frr_stop $NS_F
  [ -f "$DIR/uplink.pid" ] && kill "$(cat "$DIR/uplink.pid")" 2>/dev/null && sleep 0.5
  cat > "$DIR/tor.conf" <<CONF
log file $DIR/frr-$NS_T.log
log timestamp precision 6
frr defaults datacenter
bfd
 profile b
  transmit-interval $ms
  receive-interval $ms
  detect-multiplier 3
 !
!
router bgp 65000
 bgp router-id 10.9.0.1
 no bgp ebgp-requires-policy
 neighbor 10.9.1.2 remote-as 65001
 neighbor 10.9.1.2 timers connect 1
 neighbor 10.9.1.2 bfd profile b
 neighbor 10.9.2.2 remote-as 65002
 neighbor 10.9.2.2 timers connect 1
 neighbor 10.9.2.2 bfd profile b
!
CONF
  sed -e "s#frr-$NS_T#frr-$NS_F#" -e 's/65000/65002/; s/10.9.0.1/10.9.2.2/' \
      -e '/neighbor 10.9.1.2/d' -e '/neighbor 10.9.2.2/d' "$DIR/tor.conf" > "$DIR/nf.conf"
  cat >> "$DIR/nf.conf" <<CONF
router bgp 65002
 neighbor 10.9.2.1 remote-as 65000
 neighbor 10.9.2.1 timers connect 1
 neighbor 10.9.2.1 bfd profile b
!
CONF
  frr_start $NS_T "$DIR/tor.conf"
  # The tor is the shared peer of both nodes: give its bfdd the real-time priority uplink's
  # BFD thread takes for itself, so a starved tor cannot be mistaken for a slow node.
  chrt -f -p 40 "$(cat "$DIR/$NS_T-bfdd.pid")" >/dev/null || echo "bfd bench: chrt failed" >&2
  frr_start $NS_F "$DIR/nf.conf"
  cat > "$DIR/uplink.toml" <<CONF
[[bgp.bfd_profiles]]
name = "b"
transmit_interval = "${ms}ms"
receive_interval = "${ms}ms"
detect_multiplier = 3

[[bgp.routers]]
asn = 65001
id = "10.9.1.2"
prefixes = ["192.0.2.1/32"]

[[bgp.routers.neighbors]]
address = "10.9.1.1"
asn = 65000
connect_time = "1s"
bfd_profile = "b"
CONF
  : > "$DIR/uplink.log"
  ip netns exec $NS_U env RUST_LOG=uplink=info setsid "$UPLINK" run --config "$DIR/uplink.toml" \
    --socket "$DIR/uplink.sock" >> "$DIR/uplink.log" 2>&1 &
  echo $! > "$DIR/uplink.pid"
}

both_up() {
  "$UPLINK" show bgp summary --json --socket "$DIR/uplink.sock" 2>/dev/null | grep -q '"state": "Established"' || return 1
  vty $NS_F -c 'show bgp summary json' | grep -q '"state":"Established"' || return 1
  "$UPLINK" show bfd peers --json --socket "$DIR/uplink.sock" 2>/dev/null | grep -q '"status": "up"' || return 1
  vty $NS_F -c 'show bfd peers json' | grep -q '"status":"up"'
}
wait_up() { for _ in $(seq 600); do both_up && return 0; sleep 0.1; done; echo "sessions did not come up" >&2; tail -20 "$DIR/uplink.log" >&2; return 1; }

now_us() { date +%s%6N; }
# Epoch microseconds of the first log line after line $2 of file $1 matching $3.
uplink_time() { tail -n +"$2" "$1" | grep -m1 -- "$3" | sed 's/\x1b\[[0-9;]*m//g' | awk '{print $1}' | xargs -I{} date -d {} +%s%6N; }
frr_time() { tail -n +"$2" "$1" | grep -m1 -- "$3" | awk '{print $1" "$2}' | tr / - | xargs -I{} date -u -d {} +%s%6N; }

silence() { ip netns exec $NS_T nft -f - <<NFT
table inet bfdbench {
  chain out {
    type filter hook output priority 0;
    udp dport 3784 drop
  }
}
NFT
}
unsilence() { ip netns exec $NS_T nft delete table inet bfdbench; }

pct() { sort -n | awk -v p="$1" '{a[NR]=$1} END {if (NR==0) {print "n/a"; exit} i=int((NR*p+99)/100); if (i<1) i=1; printf "%.1f", a[i]/1000}'; }

echo "# BFD detection time: uplink ($UPLINK) vs FRR bfdd $(dpkg-query -W -f '${Version}' frr), $TRIALS trials per interval"
printf "| interval x mult | uplink p50 | uplink p99 | uplink max | FRR p50 | FRR p99 | FRR max | target p99 |\n|---|---|---|---|---|---|---|---|\n"
for ms in $INTERVALS; do
  configure "$ms"
  wait_up
  : > "$DIR/u.$ms"; : > "$DIR/f.$ms"
  for t in $(seq "$TRIALS"); do
    wait_up
    sleep 0.$((RANDOM % 9 + 1))
    ul=$(($(wc -l < "$DIR/uplink.log") + 1)); fl=$(($(wc -l < "$DIR/frr-$NS_F.log") + 1))
    t0=$(now_us); silence; t1=$(now_us)
    for _ in $(seq 100); do
      grep -q "session down" <(tail -n +"$ul" "$DIR/uplink.log") && grep -q "ADJCHANGE.*Down" <(tail -n +"$fl" "$DIR/frr-$NS_F.log") && break
      sleep 0.1
    done
    # The packets stop somewhere between t0 and t1 (a few ms for nft): count from t1, so the
    # numbers are, if anything, short by that much for both implementations alike.
    tu=$(uplink_time "$DIR/uplink.log" "$ul" "session down" || true)
    tf=$(frr_time "$DIR/frr-$NS_F.log" "$fl" "ADJCHANGE.*Down" || true)
    [ -n "$tu" ] && echo $((tu - t1)) >> "$DIR/u.$ms"
    [ -n "$tf" ] && echo $((tf - t1)) >> "$DIR/f.$ms"
    unsilence
  done
  target=$(awk -v m="$ms" 'BEGIN{print 3*m+5}')
  printf "| %s ms x 3 | %s | %s | %s | %s | %s | %s | %s |\n" "$ms" \
    "$(pct 50 < "$DIR/u.$ms")" "$(pct 99 < "$DIR/u.$ms")" "$(pct 100 < "$DIR/u.$ms")" \
    "$(pct 50 < "$DIR/f.$ms")" "$(pct 99 < "$DIR/f.$ms")" "$(pct 100 < "$DIR/f.$ms")" "$target"
  echo "  (ms; uplink n=$(wc -l < "$DIR/u.$ms"), FRR n=$(wc -l < "$DIR/f.$ms"); nft apply took $(( (t1 - t0) / 1000 )) ms in the last trial)"
done

if [ "$HOLD_SECONDS" -gt 0 ]; then
  configure 10
  wait_up
  ul=$(($(wc -l < "$DIR/uplink.log") + 1)); fl=$(($(wc -l < "$DIR/frr-$NS_F.log") + 1))
  cores=$(nproc)
  for _ in $(seq $((cores * 2))); do (while :; do :; done) & BURNERS+=($!); done
  echo; echo "# Hold: 10 ms x 3 for ${HOLD_SECONDS}s with $((cores * 2)) busy loops on $cores cores"
  sleep "$HOLD_SECONDS"
  for p in "${BURNERS[@]}"; do kill "$p" 2>/dev/null || true; done; BURNERS=()
  ud=$(tail -n +"$ul" "$DIR/uplink.log" | grep -c -- "BFD Up -> Down" || true)
  fd=$(tail -n +"$fl" "$DIR/frr-$NS_F.log" | grep -c "ADJCHANGE.*Down" || true)
  td=$(grep -c "ADJCHANGE.*Down" "$DIR/frr-$NS_T.log" || true)
  echo "false Downs: uplink $ud, FRR node $fd (the tor logged $td BGP Down events over the whole run)"
fi
