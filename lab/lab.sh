#!/bin/bash
# The uplink lab: one FRR "tor" (AS 65102, 172.18.20.1 on the node network, as r2 in the seed
# deck) and two uplink "nodes" (AS 65801, .100 and .101) on a bridge, both announcing the
# LoadBalancer VIP 192.168.100.10/32 and their own pod subnet. The tor installs the VIP with
# two ECMP next hops.
# Beside them a Kubernetes control plane (etcd and kube-apiserver from k8s/testenv, at .2) that
# both nodes watch ([kubernetes]): a Service of type LoadBalancer applied with kubectl gets an
# address from the MetalLB IPAddressPool there and reaches the tor with two next hops as well.
#   lab.sh up PATH-TO-UPLINK     start (replacing a previous lab)
#   lab.sh down                  remove everything
set -euo pipefail
LAB=${LAB_DIR:-/tmp/uplink-lab}
VIP=192.168.100.10/32
REPO=$(realpath "$(dirname "$0")/..")
TESTENV=$REPO/k8s/testenv/bin
API=172.18.20.2

down() {
  for pidfile in "$LAB"/*.pid; do
    [ -f "$pidfile" ] && kill "$(cat "$pidfile")" 2>/dev/null || true
  done
  for ns in lab-tor lab-node1 lab-node2 lab-api; do
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
  for tool in etcd kube-apiserver kubectl; do
    [ -x "$TESTENV/$tool" ] || { echo "lab: $TESTENV/$tool is not built (make testenv)" >&2; exit 1; }
  done
  for ns in lab-tor lab-node1 lab-node2 lab-api; do
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
  ip link add tor-api netns lab-tor type veth peer name eth0 netns lab-api
  ip -n lab-tor link set tor-api master net20 up
  ip -n lab-api addr add "$API/24" dev eth0
  ip -n lab-api link set eth0 up
  control_plane

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
    kubeconfig "https://$API:6443" "token: $(kctl create token uplink -n uplink-system --duration=24h)" \
      > "$dir/kubeconfig"
    cat > "$dir/uplink.toml" <<TOML
# uplink on node$n: announce the VIP and this node's pod subnet to the tor, and the Services of
# type LoadBalancer of the lab's cluster (docs/kubernetes.md).
[node]
name = "node$n"

[kubernetes]
kubeconfig = "kubeconfig"

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
        --config "$dir/uplink.toml" --socket "$dir/uplink.sock" --state-dir "$dir/state" \
        >"$dir/uplink.log" 2>&1 &
     echo $! > "$LAB/node$n.pid")
  done

  echo "waiting for the tor to install the VIP with two next hops..."
  wait_hops "$VIP"
  echo "applying a Service of type LoadBalancer to the cluster (kubectl apply -f $LAB/demo.yaml)..."
  demo_service
  kctl apply -f "$LAB/demo.yaml" >/dev/null
  local address=""
  for _ in $(seq 1 60); do
    address=$(kctl get service demo -o 'jsonpath={.status.loadBalancer.ingress[0].ip}' 2>/dev/null || true)
    [ -n "$address" ] && break
    sleep 1
  done
  [ -n "$address" ] || { echo "lab: the Service got no status.loadBalancer.ingress" >&2; exit 1; }
  wait_hops "$address/32"
  echo
  echo "=== tor: show bgp summary ==="
  ip netns exec lab-tor vtysh -N lab-tor -c "show bgp summary" 2>/dev/null
  echo "=== tor: kernel routes for the VIP and the Service default/demo ($address) ==="
  ip -n lab-tor route show "$VIP"
  ip -n lab-tor route show "$address/32"
  echo "=== kubectl get service demo ==="
  kctl get service demo
  echo "=== node1: uplink show bgp summary ==="
  "$LAB/uplink" show bgp summary --socket "$LAB/node1/uplink.sock" || true
  cat <<HELP

Poke at it:
  ip netns exec lab-tor vtysh -N lab-tor        # the tor's FRR shell
  $LAB/uplink show bgp routes --socket $LAB/node1/uplink.sock
  $LAB/uplink show kubernetes --socket $LAB/node1/uplink.sock
  # the lab's cluster, as its admin (edit demo.yaml: another Service, ETP Local, ...):
  $LAB/kubectl get services,bgpsessionstates,events -A
  $LAB/kubectl apply -f $LAB/demo.yaml
  kill \$(cat $LAB/node2.pid)                   # and watch the tor drop a next hop
  logs: $LAB/node1/uplink.log, $LAB/frr.log, $LAB/kube-apiserver.log
Remove it with: make lab-down
HELP
  for prefix in "$VIP" "$address/32"; do
    if [ "$(ip -n lab-tor route show "$prefix" | grep -c nexthop)" -lt 2 ]; then
      echo "lab: the tor does not have two next hops for $prefix" >&2
      exit 1
    fi
  done
}

# Waits up to a minute for the tor to route $1 over two next hops.
wait_hops() {
  for _ in $(seq 1 60); do
    if [ "$(ip -n lab-tor route show "$1" | grep -c nexthop)" -ge 2 ]; then return; fi
    sleep 1
  done
}

# kubectl as the cluster's admin.
kctl() {
  "$LAB/kubectl" "$@"
}

# A kubeconfig for server $1 trusting the lab's CA, with the user lines $2.
kubeconfig() {
  cat <<KUBECONFIG
apiVersion: v1
kind: Config
clusters:
- name: lab
  cluster: {server: "$1", certificate-authority: $LAB/pki/ca.crt}
users:
- name: user
  user:
    $2
contexts:
- name: lab
  context: {cluster: lab, user: user}
current-context: lab
KUBECONFIG
}

# etcd and kube-apiserver in lab-api, with a CA, a serving certificate, an admin client
# certificate and a ServiceAccount signing key made here; RBAC, uplink's ServiceAccount and
# role (deploy/kubernetes), the CRDs, two Node objects and MetalLB's pool and advertisement.
control_plane() {
  local pki=$LAB/pki
  mkdir -p "$pki"
  (
    cd "$pki"
    openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.crt -days 30 \
      -subj /CN=uplink-lab-ca 2>/dev/null
    printf 'subjectAltName=IP:%s,IP:127.0.0.1,DNS:localhost\n' "$API" > serving.ext
    openssl req -newkey rsa:2048 -nodes -keyout apiserver.key -out apiserver.csr \
      -subj /CN=kube-apiserver 2>/dev/null
    openssl x509 -req -in apiserver.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 30 \
      -extfile serving.ext -out apiserver.crt 2>/dev/null
    openssl req -newkey rsa:2048 -nodes -keyout admin.key -out admin.csr \
      -subj "/O=system:masters/CN=admin" 2>/dev/null
    openssl x509 -req -in admin.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 30 \
      -out admin.crt 2>/dev/null
    openssl genrsa -out sa.key 2048 2>/dev/null
    openssl rsa -in sa.key -pubout -out sa.pub 2>/dev/null
  )
  kubeconfig "https://127.0.0.1:6443" \
    "client-certificate: $pki/admin.crt
    client-key: $pki/admin.key" > "$LAB/admin.kubeconfig"
  cat > "$LAB/kubectl" <<KUBECTL
#!/bin/sh
exec ip netns exec lab-api $TESTENV/kubectl --kubeconfig $LAB/admin.kubeconfig "\$@"
KUBECTL
  chmod +x "$LAB/kubectl"
  (setsid ip netns exec lab-api "$TESTENV/etcd" --data-dir "$LAB/etcd" \
      --listen-client-urls http://127.0.0.1:2379 --advertise-client-urls http://127.0.0.1:2379 \
      --listen-peer-urls http://127.0.0.1:2380 --log-level warn >"$LAB/etcd.log" 2>&1 &
   echo $! > "$LAB/etcd.pid")
  (setsid ip netns exec lab-api "$TESTENV/kube-apiserver" \
      --etcd-servers=http://127.0.0.1:2379 --bind-address=0.0.0.0 --secure-port=6443 \
      --advertise-address="$API" --tls-cert-file="$pki/apiserver.crt" \
      --tls-private-key-file="$pki/apiserver.key" --client-ca-file="$pki/ca.crt" \
      --service-account-issuer=https://kubernetes.default.svc.cluster.local \
      --service-account-key-file="$pki/sa.pub" --service-account-signing-key-file="$pki/sa.key" \
      --service-cluster-ip-range=10.96.0.0/16 --authorization-mode=Node,RBAC \
      --cert-dir="$pki/certs" >"$LAB/kube-apiserver.log" 2>&1 &
   echo $! > "$LAB/kube-apiserver.pid")
  echo "waiting for the lab's kube-apiserver..."
  for _ in $(seq 1 180); do
    kctl get --raw /readyz >/dev/null 2>&1 && break
    sleep 1
  done
  kctl get --raw /readyz >/dev/null || { echo "lab: kube-apiserver is not ready ($LAB/kube-apiserver.log)" >&2; exit 1; }
  kctl create namespace metallb-system >/dev/null
  kctl apply -f "$REPO/deploy/kubernetes/rbac.yaml" >/dev/null
  kctl apply -f "$REPO/deploy/kubernetes/crds" >/dev/null
  kctl wait --for condition=Established --timeout=120s crd --all >/dev/null
  kctl apply -f - >/dev/null <<OBJECTS
apiVersion: v1
kind: Node
metadata: {name: node1}
---
apiVersion: v1
kind: Node
metadata: {name: node2}
---
apiVersion: metallb.io/v1beta1
kind: IPAddressPool
metadata: {name: lab, namespace: metallb-system}
spec:
  addresses: [192.168.200.0/28]
---
apiVersion: metallb.io/v1beta1
kind: BGPAdvertisement
metadata: {name: lab, namespace: metallb-system}
spec:
  ipAddressPools: [lab]
OBJECTS
}

# The demo Service and its endpoint (on node1; with externalTrafficPolicy Cluster every node
# announces it). No kubelet runs here, so the EndpointSlice is written as a controller would.
demo_service() {
  cat > "$LAB/demo.yaml" <<DEMO
apiVersion: v1
kind: Service
metadata: {name: demo, namespace: default}
spec:
  type: LoadBalancer
  externalTrafficPolicy: Cluster
  selector: {app: demo}
  ports: [{port: 80, targetPort: 8080}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: demo-1
  namespace: default
  labels: {kubernetes.io/service-name: demo}
addressType: IPv4
endpoints:
- addresses: [10.128.1.5]
  conditions: {ready: true}
  nodeName: node1
ports: [{port: 8080, protocol: TCP}]
DEMO
}

case "${1:-}" in
  up) up "${2:?usage: lab.sh up PATH-TO-UPLINK}" ;;
  down) down ;;
  *) echo "usage: lab.sh up PATH-TO-UPLINK | down" >&2; exit 2 ;;
esac
