// Command etcd is upstream's etcd server, built from its module: the whole of its behaviour is
// etcdmain.Main, as in upstream's own main package.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
