// Command draingate-demoapp is the lab's well-behaved app: an HTTP server that
// drains properly on SIGTERM and logs when it did (see internal/lab/app).
//
//	draingate-demoapp [-addr :8080] [-latency 0] [-shutdown-timeout 30s]
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"

	"draingate.dev/draingate/internal/lab/app"
)

func main() {
	err := app.Main(os.Args[1:], os.Stdout)
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
	default:
		fmt.Fprintln(os.Stderr, "draingate-demoapp:", err)
		os.Exit(1)
	}
}
