package main

import (
	"draingate.dev/draingate/internal/cli"
	"draingate.dev/draingate/internal/prestop"
)

func main() {
	// The kubelet signals the container's first process, not its hooks; a
	// signal here comes from a person, and ends the wait cleanly.
	cli.Run(prestop.Main)
}
