#!/bin/bash
# The Ansible content's checks (`make ansible-check`): the TOML filter's unit tests,
# ansible-lint with the production profile, --syntax-check of both playbooks, and the role's
# staging + `uplink check` tasks run on the controller against the seed-lab inventory: the
# example configs must pass, and a broken one must fail with uplink's file:line:column.
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

echo "== TOML filter unit tests"
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
