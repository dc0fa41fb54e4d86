// Package version is draingate's version, stamped into the binaries once,
// at build time:
//
//	go build -ldflags "-X draingate.dev/draingate/internal/version.Version=v0.1.0" ./cmd/...
//
// make build stamps the output of git describe. Stdlib only: the preStop
// agent uses it too.
package version

import (
	"fmt"
	"runtime"
	"runtime/debug"
)

// Version is draingate's version: "dev" unless the build set it.
var Version = "dev"

// String is the version for a version command: "v0.1.0 (go1.26.8,
// linux/amd64)". A "dev" build adds the VCS revision the Go toolchain
// recorded, if any: "dev+1a2b3c4d5e6f.dirty (go1.26.8, linux/amd64)".
func String() string {
	info, _ := debug.ReadBuildInfo()
	return format(Version, info, runtime.Version(), runtime.GOOS+"/"+runtime.GOARCH)
}

func format(v string, info *debug.BuildInfo, goVersion, platform string) string {
	if v == "dev" && info != nil {
		var rev, modified string
		for _, s := range info.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.modified":
				modified = s.Value
			}
		}
		if rev != "" {
			v += "+" + rev[:min(len(rev), 12)]
			if modified == "true" {
				v += ".dirty"
			}
		}
	}
	return fmt.Sprintf("%s (%s, %s)", v, goVersion, platform)
}
