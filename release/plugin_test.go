package release

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
)

// The plugin's release binaries: this machine's one runs and says its
// version, SHA256SUMS lists each binary's sum, a second build gives the
// same bytes, and every platform has a distinct file name (.exe on
// Windows).
func TestPluginBuild(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the plugin")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	root, err := moduleRoot()
	if err != nil {
		t.Fatal(err)
	}
	here := runtime.GOOS + "/" + runtime.GOARCH
	build := func(dir string) []byte {
		o := Options{Root: root, Out: dir, Version: "v9.9.9-test", Created: time.Unix(0, 0)}
		paths, err := BuildPlugin(ctx, o, []string{here})
		if err != nil {
			t.Fatal(err)
		}
		if len(paths) != 1 || filepath.Base(paths[0]) != PluginFile(here) {
			t.Fatalf("built %q, want %s", paths, PluginFile(here))
		}
		b, err := os.ReadFile(paths[0])
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	dir := t.TempDir()
	first := build(dir)
	out, err := exec.CommandContext(ctx, filepath.Join(dir, PluginFile(here)), "version").CombinedOutput()
	if err != nil || !strings.HasPrefix(string(out), "kubectl-draingate v9.9.9-test ") {
		t.Errorf("kubectl-draingate version: %q, %v; want its name and the version stamped", out, err)
	}
	sums, err := os.ReadFile(filepath.Join(dir, PluginSums))
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(first)
	if want := hex.EncodeToString(sum[:]) + "  " + PluginFile(here) + "\n"; string(sums) != want {
		t.Errorf("%s: %q, want %q (sha256sum -c's form)", PluginSums, sums, want)
	}
	if second := build(t.TempDir()); string(second) != string(first) {
		t.Errorf("two builds of the plugin differ: not reproducible")
	}
	names := map[string]bool{}
	for _, p := range PluginPlatforms {
		names[PluginFile(p)] = true
		if strings.HasPrefix(p, "windows/") != strings.HasSuffix(PluginFile(p), ".exe") {
			t.Errorf("%s: file %s", p, PluginFile(p))
		}
	}
	if len(names) != len(PluginPlatforms) {
		t.Errorf("plugin file names %v collide", names)
	}
}
