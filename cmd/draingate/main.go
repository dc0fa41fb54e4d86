// Command draingate is the gate server: `draingate serve` watches the
// cluster and AWS target health and answers the preStop agents' wait API;
// `draingate version` prints the version. See internal/server.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"draingate.dev/draingate/internal/server"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := server.Main(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
