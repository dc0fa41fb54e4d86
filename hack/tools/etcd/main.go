// Command etcd is etcd's own server main, built from the pinned module.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	// etcdmain.Main expects the program name in args[0].
	etcdmain.Main(os.Args)
}
