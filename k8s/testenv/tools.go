//go:build tools

// Package testenv pins the test control plane: kube-apiserver and kubectl from k8s.io/kubernetes,
// etcd from go.etcd.io/etcd/server/v3. build.sh builds them; the tests start them.
package testenv

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kubectl"
)
