// Command draingate is the gate server: `draingate serve` watches the
// cluster and AWS target health and answers the preStop agents' wait API;
// `draingate version` prints the version. See internal/server.
package main

import (
	"draingate.dev/draingate/internal/cli"
	"draingate.dev/draingate/internal/server"
)

func main() {
	cli.Run(server.Main)
}
