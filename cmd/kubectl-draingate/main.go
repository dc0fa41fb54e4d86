// kubectl-draingate is a kubectl plugin: kubectl draingate status and
// explain say why pods are still terminating, from the gate server's
// Events. Install it on the PATH as kubectl-draingate.
package main

import (
	"draingate.dev/draingate/internal/cli"
	"draingate.dev/draingate/internal/status"
)

func main() { cli.Run(status.Main) }
