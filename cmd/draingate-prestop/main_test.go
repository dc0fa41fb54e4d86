package main

import (
	"bytes"
	"debug/elf"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"draingate.dev/draingate/api"
)

// maxSize is the agent's size budget: it is copied into every opted-in pod.
const maxSize = 4 << 20

// testVersion is stamped into the agent buildAgent builds, as make build
// stamps the real one.
const testVersion = "v0.0.0-test"

// buildAgent builds the agent as it ships: static, stripped, no paths.
func buildAgent(t *testing.T) string {
	t.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command on PATH")
	}
	bin := filepath.Join(t.TempDir(), "draingate-prestop")
	cmd := exec.Command(goBin, "build", "-trimpath", "-ldflags=-s -w -X draingate.dev/draingate/internal/version.Version="+testVersion, "-o", bin, ".")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

func TestAgentIsSmallStaticAndLean(t *testing.T) {
	bin := buildAgent(t)
	fi, err := os.Stat(bin)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("agent: %d bytes (budget %d)", fi.Size(), maxSize)
	if fi.Size() > maxSize {
		t.Errorf("agent is %d bytes, over the %d budget", fi.Size(), maxSize)
	}
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Error("agent has a PT_INTERP program header: it is dynamically linked and needs a libc in the app image")
		}
	}

	goBin, _ := exec.LookPath("go")
	cmd := exec.Command(goBin, "list", "-deps", "-f", "{{.ImportPath}} {{.Standard}}", ".")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	allowed := map[string]bool{
		"draingate.dev/draingate/api":                   true,
		"draingate.dev/draingate/internal/prestop":      true,
		"draingate.dev/draingate/internal/cli":          true,
		"draingate.dev/draingate/internal/version":      true,
		"draingate.dev/draingate/internal/backoff":      true,
		"draingate.dev/draingate/internal/traffic":      true,
		"draingate.dev/draingate/cmd/draingate-prestop": true,
	}
	for line := range strings.Lines(string(out)) {
		pkg, std, _ := strings.Cut(strings.TrimSpace(line), " ")
		switch {
		case std == "true":
			// net/http (through crypto/tls) alone would put the agent
			// over budget; nothing in it may pull that in again.
			if pkg == "net/http" || pkg == "crypto/tls" {
				t.Errorf("the agent links %s", pkg)
			}
		case allowed[pkg], strings.HasPrefix(pkg, "golang.org/x/sys/"):
		default:
			t.Errorf("the agent depends on %s: only the standard library, golang.org/x/sys and this module's api, internal/prestop and its stdlib-only helpers are allowed", pkg)
		}
	}
}

// The shipped binary end to end: install copies it, wait asks a gate on
// loopback and then runs the original exec hook (here: the agent installing
// itself again, so no shell is needed), and both exit as promised.
func TestAgentBinary(t *testing.T) {
	bin := buildAgent(t)
	dir := t.TempDir()
	run := func(env []string, args ...string) (int, string, string) {
		t.Helper()
		cmd := exec.Command(bin, args...)
		cmd.Env = append(os.Environ(), env...)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return code, stdout.String(), stderr.String()
	}

	code, stdout, stderr := run(nil, "version")
	if want := "draingate-prestop " + testVersion + " (go"; code != 0 || !strings.HasPrefix(stdout, want) {
		t.Errorf("version: exit %d, %q; want 0 and %q…", code, stdout, want)
	}

	code, stdout, stderr = run(nil, "install", dir)
	installed := filepath.Join(dir, "draingate-prestop")
	if code != 0 || !strings.Contains(stdout, "installed "+installed) {
		t.Fatalf("install: exit %d\n%s%s", code, stdout, stderr)
	}
	orig, _ := os.ReadFile(bin)
	got, _ := os.ReadFile(installed)
	fi, _ := os.Stat(installed)
	if !bytes.Equal(orig, got) || fi.Mode().Perm() != 0o755 {
		t.Errorf("installed copy: equal %v, mode %v", bytes.Equal(orig, got), fi.Mode().Perm())
	}
	if code, _, stderr := run(nil, "install", filepath.Join(dir, "missing")); code != 1 || stderr == "" {
		t.Errorf("install into a missing directory: exit %d, stderr %q; want 1 with the reason", code, stderr)
	}

	var (
		mu    sync.Mutex
		asked []string
	)
	asks := func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), asked...)
	}
	gate := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		req, err := api.ParseDrainRequest(r.Method, r.URL)
		if err != nil {
			http.Error(w, err.Error(), 400)
			return
		}
		mu.Lock()
		asked = append(asked, req.Namespace+"/"+req.Pod+"/"+req.UID)
		mu.Unlock()
		json.NewEncoder(w).Encode(api.Verdict{Pod: req.Pod, Namespace: req.Namespace, Released: true, Reason: api.ReasonNoRoutes})
	}))
	defer gate.Close()
	env := []string{
		"DRAINGATE_SERVER=" + gate.URL, "DRAINGATE_POD_NAME=web-0", "DRAINGATE_POD_NAMESPACE=shop",
		"DRAINGATE_POD_UID=3f1c2a9e-7b1d-4c8e-9a6f-0d2b4e6f8a10", "DRAINGATE_MAX_WAIT=10s",
	}
	hookDir := t.TempDir()
	code, stdout, stderr = run(env, "wait", "--", installed, "install", hookDir)
	if a := asks(); code != 0 || len(a) != 1 || a[0] != "shop/web-0/3f1c2a9e-7b1d-4c8e-9a6f-0d2b4e6f8a10" {
		t.Fatalf("wait: exit %d, asked %v\n%s%s", code, a, stdout, stderr)
	}
	if _, err := os.Stat(filepath.Join(hookDir, "draingate-prestop")); err != nil {
		t.Errorf("the original hook did not run: %v\n%s", err, stdout)
	}
	if !strings.Contains(stdout, "released after") || !strings.Contains(stdout, "no-routes") {
		t.Errorf("wait log:\n%s", stdout)
	}

	// Bad flags: exit 0 and the original hook still runs.
	hookDir = t.TempDir()
	code, stdout, _ = run(env, "wait", "--max-wait", "ninety", "--", installed, "install", hookDir)
	if _, err := os.Stat(filepath.Join(hookDir, "draingate-prestop")); code != 0 || err != nil || len(asks()) != 1 {
		t.Errorf("bad flags: exit %d, hook %v, asks %d\n%s", code, err, len(asks()), stdout)
	}
}
