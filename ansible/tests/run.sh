#!/bin/bash
# The Ansible content's checks (`make ansible-check`): the role's filters' unit tests,
# ansible-lint with the production profile, --syntax-check of both playbooks, the role's
# staging + `uplink check` tasks run on the controller against the seed-lab inventory (the
# example configs must pass, and a broken one must fail with uplink's file:line:column), and
# the whole role on a stand-in node (tests/stand-in.yml): install, key files, logind's delay,
# --check --diff without keys in the output, rolls, the way back to the previous binary, a
# node an operator drained, a reload that fails.
# Usage: tests/run.sh UPLINK_BINARY
set -euo pipefail
uplink=${1:?usage: $0 UPLINK_BINARY}
uplink=$(realpath "$uplink")
here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here"
out=$(mktemp -d /tmp/uplink-ansible-check.XXXXXX)
trap 'rm -rf "$out"' EXIT
# Debian's interpreter, the one ansible-core runs on (tomllib: Python 3.11+).
py=/usr/bin/python3
export ANSIBLE_CONFIG=$here/ansible.cfg PYTHONDONTWRITEBYTECODE=1

echo "== the role's filters: unit tests"
$py tests/test_uplink_toml.py

echo "== ansible-lint (production profile)"
ansible-lint --offline --profile production

echo "== ansible-playbook --syntax-check"
ansible-playbook --syntax-check site.yml rolling-upgrade.yml

echo "== seed-lab configs rendered by the role and checked by uplink"
ansible-playbook tests/render-check.yml -e uplink_binary_src="$uplink" -e uplink_test_out="$out/ok"
for host in wk1 wk2; do
  "$uplink" check --config "$out/ok/$host/config/uplink.toml"
done

echo "== the sections the inventory leaves empty (network policies, manifests as text and documents)"
ansible-playbook tests/render-check.yml -e uplink_binary_src="$uplink" -e uplink_test_out="$out/more" \
  -e @tests/more-config.yml
for host in wk1 wk2; do
  "$uplink" check --config "$out/more/$host/config/uplink.toml"
  test -s "$out/more/$host/config/conf.d/nncp.yaml" && test -s "$out/more/$host/config/conf.d/metallb.yaml"
done

echo "== a config uplink rejects fails the host with uplink's own message"
set +e
log=$(ansible-playbook tests/render-check.yml --limit wk1 -e uplink_binary_src="$uplink" \
  -e uplink_test_out="$out/bad" -e '{"uplink_extra_config": {"always_block": ["not-a-prefix"]}}' 2>&1)
rc=$?
set -e
if [ "$rc" -eq 0 ]; then
  echo "FAIL: the play succeeded with always_block = [\"not-a-prefix\"]:"; echo "$log"; exit 1
fi
if ! grep -Eq "config/uplink\.toml:[0-9]+:[0-9]+: always_block\[0\]: \"not-a-prefix\" is not a CIDR prefix" <<<"$log"; then
  echo "FAIL: no file:line:column message from uplink check in the play's output:"; echo "$log"; exit 1
fi
echo "ok: rejected with $(grep -Eo 'config/uplink\.toml:[0-9]+:[0-9]+: always_block[^"]*"[^"]*"' <<<"$log" | head -1)"

echo "== the whole role on a stand-in node"
node=$out/node
mkdir -p "$node/bin" "$node/usr/bin" "$node/etc/systemd/system" "$node/etc/iproute2/rt_protos.d" \
  "$node/etc/sysctl.d"
cp tests/stand-in/systemctl tests/stand-in/sysctl "$node/bin/"
# stand_in VERSION BEHAVIOUR: a stand-in uplink binary (tests/stand-in/uplink) as $out/uplink-VERSION.
stand_in() {
  sed -e "s/@VERSION@/$1/" -e "s/@BEHAVIOUR@/$2/" tests/stand-in/uplink >"$out/uplink-$1"
  chmod 0755 "$out/uplink-$1"
}
for v in v1:good v2:good v3:crash v4:not-ready v5:flapping v6:good v7:good; do
  stand_in "${v%%:*}" "${v#*:}"
done
# node_play NAME WANT_RC VERSION [ansible-playbook args]: the role on the stand-in node with
# binary VERSION; the output goes to $out/NAME.log, and what the stand-ins did to $node/log
# (read by `did`).
node_play() {
  local name=$1 want=$2 version=$3
  shift 3
  : >"$node/log"
  set +e
  ansible-playbook tests/stand-in.yml --limit wk1 -e @tests/stand-in-vars.yml -e @tests/keys.yml \
    -e uplink_test_root="$node" -e uplink_test_real="$uplink" -e uplink_binary_src="$out/uplink-$version" \
    "$@" >"$out/$name.log" 2>&1
  local rc=$?
  set -e
  if { [ "$want" = ok ] && [ $rc -ne 0 ]; } || { [ "$want" = fails ] && [ $rc -eq 0 ]; }; then
    echo "FAIL: $name: ansible-playbook exited $rc, want it to $want:"; cat "$out/$name.log"; exit 1
  fi
}
fail() { echo "FAIL: $1"; [ -n "${2:-}" ] && cat "$out/$2.log"; exit 1; }
# did NAME LINE...: the stand-ins' actions were exactly these lines.
did() {
  local name=$1
  shift
  local want
  want=$(printf '%s\n' "$@")
  [ "$(cat "$node/log")" = "$want" ] || fail "$name: the stand-ins did
$(cat "$node/log")
want
$want" "$name"
}
said() { grep -qF -- "$2" "$out/$1.log" || fail "$1: no \"$2\" in the output" "$1"; }
never_said() { ! grep -qF -- "$2" "$out/$1.log" || fail "$1: \"$2\" is in the output" "$1"; }
is_binary() { cmp -s "$node/usr/bin/$1" "$out/uplink-$2" || fail "$1 is not $2 after $3" "$3"; }
mode_is() { [ "$(stat -c %a "$1")" = "$2" ] || fail "$1 has mode $(stat -c %a "$1"), want $2"; }
keys="tcp-md5-key-one bfd-key-one tcp-md5-key-two bfd-key-two inline-key-three manifest-key-four memberlist-key-one-of-the-stand-in"
no_keys() { for k in $keys; do never_said "$1" "$k"; done; }
staging=$node/var/lib/uplink-ansible
dropin=$node/etc/systemd/logind.conf.d/90-uplink.conf

node_play install ok v1
did install "systemctl enable uplink.service" "systemctl start uplink.service" "start v1" \
  "systemctl kill --signal=HUP systemd-logind.service" \
  "sysctl -q -p /etc/sysctl.d/90-uplink-layer2.conf" "wait-ready v1 --timeout 300s"
is_binary uplink v1 install
mode_is "$node/etc/uplink/keys" 700
mode_is "$staging/config/keys" 700
for k in tor bfd; do
  mode_is "$node/etc/uplink/keys/$k.key" 600
  mode_is "$staging/config/keys/$k.key" 600
  [ "$(cat "$node/etc/uplink/keys/$k.key")" = "$([ $k = tor ] && echo tcp-md5 || echo bfd)-key-one" ] || fail "$k.key"
done
delay=$(sed -n 's/^InhibitDelayMaxSec=//p' "$dropin")
[ "$delay" -gt 5 ] || fail "InhibitDelayMaxSec=$delay is not above the seed lab's drain_time, 5s"
no_keys install
echo "ok: installed and started; key files 0600 in 0700 directories; logind's InhibitDelayMaxSec=$delay (drain_time 5 s), re-read by SIGHUP"

node_play again ok v1
grep -Eq "wk1 +: ok=[0-9]+ +changed=0 " "$out/again.log" || fail "a second run changed something" again
did again
echo "ok: a second run changes nothing"

# New key values, the TCP-MD5 key inline in uplink.toml, manifests with and without a key, and
# a longer drain_time: no key is printed, nor the diff or loop item of a file with one; the
# diffs of a file without (a manifest, logind's drop-in) are.
cat >"$out/check-vars.json" <<'VARS'
{
  "uplink_secret_files": {"tor.key": "tcp-md5-key-two", "bfd.key": "bfd-key-two",
                          "memberlist.key": "memberlist-key-one-of-the-stand-in"},
  "lab_test_inline_key": "inline-key-three",
  "uplink_drain_time": "20s",
  "uplink_manifests": {
    "peer": "apiVersion: metallb.io/v1beta2\nkind: BGPPeer\nmetadata: {name: tor-b}\nspec: {myASN: 65801, peerASN: 65102, peerAddress: 172.18.20.9, password: manifest-key-four}\n",
    "pool": [{"apiVersion": "metallb.io/v1beta1", "kind": "IPAddressPool", "metadata": {"name": "more"},
              "spec": {"addresses": ["192.168.102.0/28"]}}]
  }
}
VARS
node_play check ok v1 --check --diff -v -e @"$out/check-vars.json"
no_keys check
did check
never_said check 'drain_time = "20s"'
never_said check "172.18.20.9"
said check "+InhibitDelayMaxSec=50"
said check "+  - 192.168.102.0/28"
[ "$(cat "$node/etc/uplink/keys/tor.key")" = tcp-md5-key-one ] || fail "--check changed a key file"
[ ! -e "$node/etc/uplink/conf.d/pool.yaml" ] || fail "--check wrote a manifest"
echo "ok: --check --diff -v prints no key, and no diff of a file with one; the other files' diffs show"

node_play upgrade ok v2
did upgrade "drain v1" "systemctl restart uplink.service" "start v2" "wait-ready v2 --timeout 300s" "undrain v2"
is_binary uplink v2 upgrade
is_binary uplink.previous v1 upgrade
[ ! -e "$staging/drained-by-ansible" ] || fail "the drain mark is left after a roll" upgrade
echo "ok: drain -> restart -> wait-ready -> undrain; the old binary kept as uplink.previous"

node_play crash fails v3
# systemd's unit is failed, so the module starts it rather than restarting it.
did crash "drain v2" "systemctl restart uplink.service" "start v3" \
  "systemctl start uplink.service" "start v2" "wait-ready v2 --timeout 300s" "undrain v2"
is_binary uplink v2 crash
said crash "Job for uplink.service failed"
said crash "The previous binary is back"
[ ! -e "$staging/drained-by-ansible" ] || fail "the drain mark is left after going back" crash

node_play flapping fails v5
did flapping "drain v2" "systemctl restart uplink.service" "start v5" "wait-ready v5 --timeout 300s" \
  "systemctl restart uplink.service" "start v2" "wait-ready v2 --timeout 300s" "undrain v2"
is_binary uplink v2 flapping
said flapping "systemd restarted it 2 time(s)"
echo "ok: a binary that does not start or is restarted by systemd: the previous one is put back, ready and undrained, and the host fails"

# Not ready, and the previous binary is not either (the ToR refuses the node, as in the VM
# tier's rollout): the node stays drained on the previous binary, and the next run resumes.
touch "$node/unreachable"
node_play not-ready fails v4
rm "$node/unreachable"
did not-ready "drain v2" "systemctl restart uplink.service" "start v4" "wait-ready v4 --timeout 300s" \
  "systemctl restart uplink.service" "start v2" "wait-ready v2 --timeout 300s"
is_binary uplink v2 not-ready
said not-ready "not ready: neighbor 172.18.20.1"
said not-ready "not ready either"
[ -e "$staging/drained-by-ansible" ] || fail "no drain mark left for the next run" not-ready
node_play resume ok v6
did resume "drain v2" "systemctl restart uplink.service" "start v6" "wait-ready v6 --timeout 300s" "undrain v6"
is_binary uplink v6 resume
is_binary uplink.previous v2 resume
[ ! -e "$staging/drained-by-ansible" ] || fail "the drain mark is left after the resumed roll" resume
echo "ok: not ready on the previous binary either: left drained on it, and the next run finishes the roll"

# An operator's drain (the daemon's record in its state directory) outlives the roll.
UPLINK_FAKE_ROOT=$node "$node/usr/bin/uplink" drain >/dev/null
node_play drained ok v7
did drained "drain v6" "systemctl restart uplink.service" "start v7" "wait-ready v7 --timeout 300s"
is_binary uplink v7 drained
[ -e "$node/var/lib/uplink/drained" ] || fail "the operator's drain record is gone" drained
said drained "so the roll left it drained"
UPLINK_FAKE_ROOT=$node "$node/usr/bin/uplink" undrain >/dev/null
echo "ok: a node drained before the roll is rolled and left drained"

# `uplink reload` exits non-zero (a network policy ended Failing): the host fails. Its
# timeout is above the daemon's own 90 s wait for the policies.
touch "$node/reload-fails"
node_play reload-fails fails v7 -e '{"uplink_communities": [{"name": "lab", "value": "64512:7"}]}'
rm "$node/reload-fails"
did reload-fails "reload v7 --timeout 150s"
said reload-fails "uplink reload failed"
said reload-fails "network policy trunk-vlans: Failing"
echo "ok: a reload that fails (a policy Failing) fails the host"
