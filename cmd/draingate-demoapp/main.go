// Command draingate-demoapp is the lab's well-behaved app: an HTTP server that
// drains properly on SIGTERM and logs when it did (see proving/lab/app).
//
//	draingate-demoapp [-addr :8080] [-latency 0] [-shutdown-timeout 30s]
//
// The same binary, hence the same image, is the lab's mesh-like sidecar when
// its first argument is "proxy" (see proving/lab/sidecar):
//
//	draingate-demoapp proxy [-listen :8080] [-to 127.0.0.1:18080] [-drain 5s]
//
// and the lab's in-cluster client when it is "client" (see
// proving/lab/client):
//
//	draingate-demoapp client -url URL -rate R [-listen :9090]
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"draingate.dev/draingate/proving/lab/app"
	"draingate.dev/draingate/proving/lab/client"
	"draingate.dev/draingate/proving/lab/sidecar"
)

func main() {
	err := run(os.Args[1:], os.Stdout)
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
	default:
		fmt.Fprintln(os.Stderr, "draingate-demoapp:", err)
		os.Exit(1)
	}
}

// run picks the app or, with the first argument "proxy" or "client", the
// sidecar or the in-cluster client.
func run(args []string, stdout io.Writer) error {
	if len(args) > 0 && args[0] == "proxy" {
		return sidecar.Main(args[1:], stdout)
	}
	if len(args) > 0 && args[0] == "client" {
		return client.Main(args[1:], stdout)
	}
	return app.Main(args, stdout)
}
