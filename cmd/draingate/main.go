// Command draingate is the gate server: `draingate serve` watches the
// cluster and AWS target health and answers the preStop agents' wait API;
// `draingate version` prints the version. See internal/server.
package main

import (
	// The release image has no CA bundle (no base image): these roots
	// verify the AWS endpoints when the system has none.
	_ "golang.org/x/crypto/x509roots/fallback"

	"draingate.dev/draingate/internal/cli"
	"draingate.dev/draingate/internal/server"
)

func main() {
	cli.Run(server.Main)
}
