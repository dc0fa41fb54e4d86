// Command draingate-release builds what a release ships: `draingate-release
// images` writes the draingate and draingate-prestop images (linux/amd64
// and linux/arm64, OCI layouts with CycloneDX SBOMs) under out/images and
// pushes them on request. make images runs it. See release.
package main

import (
	"draingate.dev/draingate/internal/cli"
	"draingate.dev/draingate/release"
)

func main() {
	cli.Run(release.Main)
}
