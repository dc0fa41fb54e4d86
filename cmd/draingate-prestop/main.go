package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"draingate.dev/draingate/internal/prestop"
)

func main() {
	// The kubelet signals the container's first process, not its hooks; a
	// signal here comes from a person, and ends the wait cleanly.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := prestop.Main(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
