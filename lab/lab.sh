#!/bin/bash
# The uplink lab: one FRR "tor" (AS 65102, 172.18.20.1 on the node network, as r2 in the seed
# deck) and two uplink "nodes" (AS 65801, .100 and .101) on a bridge, both announcing the
# LoadBalancer VIP 192.168.100.10/32 and their own pod subnet. The tor installs the VIP with
# two ECMP next hops.
#   lab.sh up PATH-TO-UPLINK     start (replacing a previous lab)
#   lab.sh down                  remove everything
set -euo pipefail
LAB=${LAB_DIR:-/tmp/uplink-lab}
VIP=192.168.100.10/32

down() {
  for pidfile in "$LAB"/*.pid; do
    [ -f "$pidfile" ] && kill "$(cat "$pidfile")" 2>/dev/null || true
  done
  for ns in lab-tor lab-node1 lab-node2; do
    ip netns pids "$ns" 2>/dev/null | xargs -r kill -9 2>/dev/null || true
    ip netns del "$ns" 2>/dev/null || true
  done
  rm -rf /var/run/frr/lab-tor "$LAB"
}

up() {
  local bin=$1
  [ -x "$bin" ] || { echo "lab: $bin is not built (run make lab)" >&2; exit 1; }
  down
  mkdir -p "$LAB" && chmod 777 "$LAB"
  cp "$bin" "$LAB/uplink"
  for ns in lab-tor lab-node1 lab-node2; do
    ip netns add "$ns"
    ip -n "$ns" link set lo up
  done
  ip netns exec lab-tor sysctl -qw net.ipv4.ip_forward=1
  ip -n lab-tor link add net20 type bridge
  ip -n lab-tor addr add 172.18.20.1/24 dev net20
  ip -n lab-tor link set net20 up
  local i=0
  for n in 1 2; do
    ip link add "tor-n$n" netns lab-tor type veth peer name eth0 netns "lab-node$n"
    ip -n lab-tor link set "tor-n$n" master net20 up
    ip -n "lab-node$n" addr add "172.18.20.$((99 + n))/24" dev eth0
    ip -n "lab-node$n" link set eth0 up
  done

  mkdir -p /var/run/frr/lab-tor && chown frr:frr /var/run/frr/lab-tor
  cat > "$LAB/frr.conf" <<FRR
frr defaults datacenter
hostname tor
log file $LAB/frr.log
router bgp 65102
 bgp router-id 172.18.20.1
 no bgp ebgp-requires-policy
 bgp bestpath as-path multipath-relax
 neighbor nodes peer-group
 neighbor nodes remote-as 65801
 neighbor 172.18.20.100 peer-group nodes
 neighbor 172.18.20.101 peer-group nodes
 address-family ipv4 unicast
  network 172.18.20.0/24
  redistribute connected
  maximum-paths 8
 exit-address-family
FRR
  touch "$LAB/frr.log" && chown frr "$LAB/frr.log" && chmod 644 "$LAB/frr.conf"
  for d in zebra bgpd; do
    ip netns exec lab-tor "/usr/lib/frr/$d" -d -N lab-tor -f "$LAB/frr.conf" -i "$LAB/$d.pid"
  done

  for n in 1 2; do
    local dir="$LAB/node$n"
    mkdir -p "$dir/conf.d"
    cat > "$dir/uplink.toml" <<TOML
# uplink on node$n: announce the VIP and this node's pod subnet to the tor.
[[bgp.routers]]
asn = 65801
id = "172.18.20.$((99 + n))"
prefixes = ["$VIP", "10.128.$n.0/24"]

[[bgp.routers.neighbors]]
address = "172.18.20.1"
asn = 65102
hold_time = "9s"
keepalive_time = "3s"
to_advertise = { allowed = { mode = "all" } }
to_receive = { allowed = { mode = "filtered", prefixes = [{ prefix = "0.0.0.0/0", le = 32 }] } }
TOML
    (cd "$dir" && setsid ip netns exec "lab-node$n" "$LAB/uplink" run \
        --config "$dir/uplink.toml" --socket "$dir/uplink.sock" >"$dir/uplink.log" 2>&1 &
     echo $! > "$LAB/node$n.pid")
  done

  echo "waiting for the tor to install the VIP with two next hops..."
  for _ in $(seq 1 60); do
    if [ "$(ip -n lab-tor route show "$VIP" | grep -c nexthop)" -ge 2 ]; then break; fi
    sleep 1
  done
  echo
  echo "=== tor: show bgp summary ==="
  ip netns exec lab-tor vtysh -N lab-tor -c "show bgp summary" 2>/dev/null
  echo "=== tor: kernel route for the VIP ==="
  ip -n lab-tor route show "$VIP"
  echo "=== node1: uplink show bgp summary ==="
  "$LAB/uplink" show bgp summary --socket "$LAB/node1/uplink.sock" || true
  cat <<HELP

Poke at it:
  ip netns exec lab-tor vtysh -N lab-tor            # the tor's FRR shell
  $LAB/uplink show bgp routes --socket $LAB/node1/uplink.sock
  $LAB/uplink show bgp neighbors --socket $LAB/node2/uplink.sock
  kill \$(cat $LAB/node2.pid)                       # and watch the tor drop a next hop
  logs: $LAB/node1/uplink.log, $LAB/frr.log
Remove it with: make lab-down
HELP
  if [ "$(ip -n lab-tor route show "$VIP" | grep -c nexthop)" -lt 2 ]; then
    echo "lab: the tor does not have two next hops for $VIP" >&2
    exit 1
  fi
}

case "${1:-}" in
  up) up "${2:?usage: lab.sh up PATH-TO-UPLINK}" ;;
  down) down ;;
  *) echo "usage: lab.sh up PATH-TO-UPLINK | down" >&2; exit 2 ;;
esac
