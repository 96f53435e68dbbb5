#!/bin/bash
# Builds the test control plane at the releases go.mod pins: kube-apiserver and kubectl from
# k8s.io/kubernetes, etcd from go.etcd.io/etcd/server/v3, into bin/ here (or $1). Go's module and
# build caches keep them: a second run takes seconds. Go builds these test tools only, never
# uplink.
#
# kubectl is built here rather than taken from Debian: Debian's kubernetes-client is 1.20, far
# outside kubectl's one-minor skew with this apiserver.
set -euo pipefail
cd "$(dirname "$0")"
out=$(realpath -m "${1:-bin}")
mkdir -p "$out"
# One build at a time: `make test` starts one early in the background, and the Kubernetes
# tier's own call waits here for it to end, then finds Go's caches warm.
exec 9>"$out/.build.lock"
flock 9
# The release the binaries report (/version, kubectl version): go build leaves v0.0.0-master.
version=$(go list -m -f '{{.Version}}' k8s.io/kubernetes)
minor=$(echo "$version" | cut -d. -f2)
ldflags=""
for package in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  ldflags+=" -X $package.gitVersion=$version -X $package.gitMajor=1 -X $package.gitMinor=$minor"
  ldflags+=" -X $package.gitTreeState=clean"
done
echo "building kube-apiserver, kubectl ($version) and etcd ($(go list -m -f '{{.Version}}' go.etcd.io/etcd/server/v3)) into $out"
go build -trimpath -ldflags "$ldflags" -o "$out/" \
  ./cmd/etcd k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kubectl
"$out/kube-apiserver" --version
