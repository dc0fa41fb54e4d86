package prestop

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"draingate.dev/draingate/api"
)

func TestInstall(t *testing.T) {
	src := filepath.Join(t.TempDir(), "agent")
	content := bytes.Repeat([]byte("\x7fELF agent "), 1000)
	if err := os.WriteFile(src, content, 0o600); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	// An older copy is replaced, not appended to.
	if err := os.WriteFile(filepath.Join(dir, api.AgentFile), []byte("old and longer than nothing"), 0o644); err != nil {
		t.Fatal(err)
	}
	dst, err := Install(src, dir)
	if err != nil {
		t.Fatal(err)
	}
	if dst != filepath.Join(dir, api.AgentFile) {
		t.Errorf("installed to %s", dst)
	}
	got, err := os.ReadFile(dst)
	if err != nil || !bytes.Equal(got, content) {
		t.Errorf("copy differs (%d bytes, %v)", len(got), err)
	}
	fi, _ := os.Stat(dst)
	if fi.Mode().Perm() != 0o755 {
		t.Errorf("mode %v, want 0755", fi.Mode().Perm())
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Errorf("left behind: %v", entries)
	}

	if _, err := Install(src, filepath.Join(dir, "missing")); err == nil {
		t.Error("installing into a missing directory succeeded")
	}
	if _, err := Install(src, dst); err == nil {
		t.Error("installing into a file succeeded")
	}
	if _, err := Install(filepath.Join(dir, "no-agent"), dir); err == nil {
		t.Error("installing a missing source succeeded")
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Errorf("failed installs left files: %v", entries)
	}
}
