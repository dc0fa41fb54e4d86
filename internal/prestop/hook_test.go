package prestop

import (
	"context"
	"errors"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"draingate.dev/draingate/api"
	"draingate.dev/draingate/proving/testutil"
)

// readMarker returns when the helper process ran and with which arguments.
func readMarker(t *testing.T, path string) (time.Time, string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("the exec hook left no marker: %v", err)
	}
	ns, args, _ := strings.Cut(string(b), " ")
	n, err := strconv.ParseInt(ns, 10, 64)
	if err != nil {
		t.Fatalf("marker %q", b)
	}
	return time.Unix(0, n), args
}

// Not in a synctest bubble: the hook process notes the real time, which is
// compared with the gate's.
func TestExecHook(t *testing.T) {
	marker := filepath.Join(t.TempDir(), "marker")
	t.Setenv(hookMarkerEnv, marker)
	g := newGate(t, func(n int, _ api.DrainRequest) reply {
		if n == 0 {
			return waiting(false)
		}
		return released(api.ReasonDrained)
	})
	var log testutil.SyncBuffer
	cfg := config(g.URL, &log)
	cfg.Then = Hook{Exec: []string{os.Args[0], "graceful", "with space"}}
	res := Run(context.Background(), cfg)
	if res.Outcome != Released || !res.HookRan || res.HookErr != nil {
		t.Fatalf("got %+v", res)
	}
	at, args := readMarker(t, marker)
	if args != "graceful|with space" {
		t.Errorf("hook argv %q", args)
	}
	asks := g.recorded()
	if at.Before(asks[len(asks)-1].at) {
		t.Error("exec hook ran before the release")
	}
	mustContain(t, log.String(), "running original hook: exec ", "original hook done after")
}

func TestExecHookFailureIsReportedNotFatal(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		marker := filepath.Join(t.TempDir(), "marker")
		t.Setenv(hookMarkerEnv, marker)
		t.Setenv(hookExitEnv, "3")
		var log testutil.SyncBuffer
		cfg := config(closedPort(t), &log)
		cfg.Fallback = 0
		cfg.Then = Hook{Exec: []string{os.Args[0]}}
		res := Run(context.Background(), cfg)
		var exit *exec.ExitError
		if !res.HookRan || !errors.As(res.HookErr, &exit) || exit.ExitCode() != 3 {
			t.Fatalf("got %+v, want the hook's exit status 3 reported", res)
		}
		readMarker(t, marker)
		mustContain(t, log.String(), "original hook failed after", "exit status 3")

		cfg.Then = Hook{Exec: []string{filepath.Join(t.TempDir(), "no-such-hook")}}
		if res := Run(context.Background(), cfg); !res.HookRan || res.HookErr == nil {
			t.Errorf("a missing hook binary: %+v", res)
		}
	})
}

func TestHTTPGetHookAnyStatusIsDone(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var got *http.Request
		url := serveMem(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			got = r
			http.Error(w, "shutting down badly", 500)
		}))
		var log testutil.SyncBuffer
		cfg := config(closedPort(t), &log)
		cfg.Fallback = 0
		cfg.Then = Hook{HTTPGet: url + "/pre-stop?x=1"}
		res := Run(context.Background(), cfg)
		if !res.HookRan || res.HookErr != nil {
			t.Fatalf("got %+v", res)
		}
		if got == nil || got.Method != "GET" || got.URL.RequestURI() != "/pre-stop?x=1" {
			t.Fatalf("hook request %+v", got)
		}
		mustContain(t, log.String(), "original hook done after", "(answered 500)")
	})
}

func TestSleepHook(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := newGate(t, func(int, api.DrainRequest) reply { return released(api.ReasonDrained) })
		cfg := config(g.URL, nil)
		cfg.Then = Hook{Sleep: 300 * time.Millisecond}
		before := time.Now()
		res := Run(context.Background(), cfg)
		if !res.HookRan || res.HookErr != nil {
			t.Fatalf("got %+v", res)
		}
		if took := time.Since(before); took != res.Waited+cfg.Then.Sleep {
			t.Errorf("Run took %s, want the wait (%s) plus the sleep", took, res.Waited)
		}
	})
}

func TestHookValidate(t *testing.T) {
	for _, h := range []Hook{
		{Exec: []string{"x"}, Sleep: time.Second},
		{HTTPGet: "https://x/"},
		{HTTPGet: "localhost:8080/x"},
		{Sleep: -time.Second},
	} {
		if h.Validate() == nil {
			t.Errorf("%+v accepted", h)
		}
	}
	for _, h := range []Hook{{}, {Exec: []string{"x"}}, {HTTPGet: "http://127.0.0.1:8080/x"}, {Sleep: time.Second}} {
		if err := h.Validate(); err != nil {
			t.Errorf("%+v: %v", h, err)
		}
	}
}
