// Command etcd is etcd's own server, built from the pinned go.etcd.io/etcd/server/v3 module so the
// test control plane needs no binary from outside the Go module proxy.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
