package release

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// Plugin is the kubectl plugin, shipped as plain binaries (it runs on the
// operator's machine, not in the cluster).
var Plugin = Binary{Name: "kubectl-draingate", Package: "./cmd/kubectl-draingate", Description: "kubectl draingate: why terminating pods still wait"}

// PluginPlatforms are the os/arch pairs make plugin builds.
var PluginPlatforms = []string{"linux/amd64", "linux/arm64", "darwin/amd64", "darwin/arm64", "windows/amd64"}

// PluginSums is the file, beside the binaries, listing their SHA-256
// sums as sha256sum -c reads them.
const PluginSums = "SHA256SUMS"

// PluginFile is the binary's file name for one os/arch:
// kubectl-draingate-darwin-arm64, kubectl-draingate-windows-amd64.exe.
func PluginFile(platform string) string {
	name := Plugin.Name + "-" + strings.ReplaceAll(platform, "/", "-")
	if strings.HasPrefix(platform, "windows/") {
		name += ".exe"
	}
	return name
}

// BuildPlugin builds the plugin for each of platforms into o.Out,
// reproducibly, and writes PluginSums; it returns the binaries' paths.
func BuildPlugin(ctx context.Context, o Options, platforms []string) ([]string, error) {
	if err := os.MkdirAll(o.Out, 0o755); err != nil {
		return nil, err
	}
	var paths []string
	var sums strings.Builder
	for _, p := range platforms {
		goos, arch, ok := strings.Cut(p, "/")
		if !ok || goos == "" || arch == "" {
			return nil, fmt.Errorf("release: platform %q: want os/arch, such as darwin/arm64", p)
		}
		dst := filepath.Join(o.Out, PluginFile(p))
		if err := o.goBuildFor(ctx, Plugin.Package, goos, arch, dst+".tmp"); err != nil {
			os.Remove(dst + ".tmp")
			return nil, err
		}
		if err := os.Rename(dst+".tmp", dst); err != nil {
			return nil, err
		}
		b, err := os.ReadFile(dst)
		if err != nil {
			return nil, err
		}
		sum := sha256.Sum256(b)
		fmt.Fprintf(&sums, "%s  %s\n", hex.EncodeToString(sum[:]), filepath.Base(dst))
		paths = append(paths, dst)
	}
	return paths, writeFile(filepath.Join(o.Out, PluginSums), []byte(sums.String()))
}
