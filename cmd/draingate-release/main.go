// Command draingate-release builds what a release ships: `draingate-release
// images` writes the draingate and draingate-prestop images (linux/amd64
// and linux/arm64, OCI layouts with CycloneDX SBOMs) under out/images and
// pushes them on request. make images runs it. See build/release.
package main

import (
	"draingate.dev/draingate/build/release"
	"draingate.dev/draingate/internal/cli"
)

func main() {
	cli.Run(release.Main)
}
