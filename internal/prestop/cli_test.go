package prestop

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"draingate.dev/draingate/api"
	"draingate.dev/draingate/internal/cli"
	"draingate.dev/draingate/internal/version"
)

func env(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

func TestParseWaitDefaultsAndEnv(t *testing.T) {
	cfg, opts, problems := parseWait(nil, env(nil))
	want := Config{Server: DefaultServer, MaxWait: 90 * time.Second, Fallback: 30 * time.Second, PollWait: 20 * time.Second}
	if !reflect.DeepEqual(cfg, want) || !reflect.DeepEqual(opts, waitOptions{traffic: true}) || problems != nil {
		t.Errorf("defaults: %+v %+v %v", cfg, opts, problems)
	}

	e := env(map[string]string{
		"DRAINGATE_SERVER": "http://gate:9090", "DRAINGATE_MAX_WAIT": "2m", "DRAINGATE_FALLBACK": "10s",
		"DRAINGATE_POLL_WAIT": "5s", "DRAINGATE_THEN_SLEEP": "3s", "DRAINGATE_LOG": "/proc/1/fd/1",
		"DRAINGATE_POD_NAME": "web-0", "DRAINGATE_POD_NAMESPACE": "shop", "DRAINGATE_POD_UID": testUID,
		"DRAINGATE_TRAFFIC_EVIDENCE": "false",
	})
	cfg, opts, problems = parseWait(nil, e)
	want = Config{Server: "http://gate:9090", Namespace: "shop", Pod: "web-0", UID: testUID,
		MaxWait: 2 * time.Minute, Fallback: 10 * time.Second, PollWait: 5 * time.Second, Then: Hook{Sleep: 3 * time.Second}}
	if !reflect.DeepEqual(cfg, want) || !reflect.DeepEqual(opts, waitOptions{logPath: "/proc/1/fd/1"}) || problems != nil {
		t.Errorf("env: %+v %+v %v", cfg, opts, problems)
	}

	// Flags win over env; a hook on the command line replaces the env's.
	// A boolean flag may stand bare.
	cfg, opts, problems = parseWait([]string{"--server", "http://other", "-max-wait=45s", "--traffic-evidence", "--", "/app/stop", "--now"}, e)
	if cfg.Server != "http://other" || cfg.MaxWait != 45*time.Second || cfg.Fallback != 10*time.Second ||
		!reflect.DeepEqual(cfg.Then, Hook{Exec: []string{"/app/stop", "--now"}}) || !opts.traffic || problems != nil {
		t.Errorf("flags over env: %+v %+v %v", cfg, opts, problems)
	}
	if _, opts, _ = parseWait([]string{"--traffic-evidence=false"}, env(nil)); opts.traffic {
		t.Error("--traffic-evidence=false left the evidence on")
	}
	cfg, _, _ = parseWait([]string{"--then-http-get", "http://127.0.0.1:8080/stop"}, e)
	if !reflect.DeepEqual(cfg.Then, Hook{HTTPGet: "http://127.0.0.1:8080/stop"}) {
		t.Errorf("http-get flag over env sleep: %+v", cfg.Then)
	}

	// A bad --traffic-evidence turns the evidence off with a warning, but
	// is no reason to skip the wait.
	for _, c := range []struct {
		args []string
		env  map[string]string
		want string
	}{
		{[]string{"--traffic-evidence=maybe"}, nil, `--traffic-evidence "maybe" is not true or false`},
		{nil, map[string]string{"DRAINGATE_TRAFFIC_EVIDENCE": "on"}, `$DRAINGATE_TRAFFIC_EVIDENCE "on" is not true or false`},
	} {
		_, opts, problems := parseWait(c.args, env(c.env))
		if opts.traffic || len(opts.warnings) != 1 || !strings.Contains(opts.warnings[0], c.want) || problems != nil {
			t.Errorf("%q %v: %+v, problems %v; want evidence off, warning %q", c.args, c.env, opts, problems, c.want)
		}
	}

	// A bad value is blamed on where it came from.
	_, _, problems = parseWait([]string{"--fallback", "later"}, env(map[string]string{"DRAINGATE_MAX_WAIT": "soon", "DRAINGATE_FALLBACK": "1s"}))
	all := strings.Join(problems, "\n")
	for _, p := range []string{`$DRAINGATE_MAX_WAIT "soon" is not a duration`, `--fallback "later" is not a duration`} {
		if !strings.Contains(all, p) {
			t.Errorf("problems lack %q:\n%s", p, all)
		}
	}
}

func TestParseWaitBadFlagsKeepTheHook(t *testing.T) {
	cases := []struct {
		args     []string
		hook     Hook
		problems []string
	}{
		{[]string{"--max-wait", "soon", "--bogus", "--then-sleep", "2s"}, Hook{Sleep: 2 * time.Second},
			[]string{"flag provided but not defined: -bogus", `--max-wait "soon" is not a duration`}},
		{[]string{"---x", "--fallback=-1s", "--", "/app/stop"}, Hook{Exec: []string{"/app/stop"}},
			[]string{"bad flag syntax: ---x", "--fallback -1s must not be negative"}},
		{[]string{"stray", "--poll-wait", "0s", "--then-http-get", "http://localhost/stop"}, Hook{HTTPGet: "http://localhost/stop"},
			[]string{`unexpected argument "stray"`, "--poll-wait 0s must be more than 0"}},
		{[]string{"--then-sleep", "1s", "--", "/app/stop"}, Hook{Exec: []string{"/app/stop"}},
			[]string{"more than one original hook given (exec, sleep): running exec /app/stop"}},
		{[]string{"--then-http-get", "https://localhost/stop", "--then-sleep", "1s"}, Hook{Sleep: time.Second},
			[]string{"https is not supported", "running sleep 1s"}},
		{[]string{"--then-sleep", "forever"}, Hook{}, []string{`--then-sleep "forever" is not a duration`}},
		{[]string{"--max-wait"}, Hook{}, []string{"flag needs an argument: -max-wait"}},
	}
	for _, c := range cases {
		cfg, _, problems := parseWait(c.args, env(nil))
		if !reflect.DeepEqual(cfg.Then, c.hook) {
			t.Errorf("%q: hook %+v, want %+v", c.args, cfg.Then, c.hook)
		}
		all := strings.Join(problems, "\n")
		for _, p := range c.problems {
			if !strings.Contains(all, p) {
				t.Errorf("%q: problems lack %q:\n%s", c.args, p, all)
			}
		}
	}
}

func TestMainWait(t *testing.T) {
	g := newGate(t, func(int, api.DrainRequest) reply { return released(api.ReasonDrained) })
	h := newHookRecorder(t)
	logFile := filepath.Join(t.TempDir(), "log")
	var stdout, stderr bytes.Buffer
	e := env(map[string]string{
		"DRAINGATE_SERVER": g.URL, "DRAINGATE_POD_NAME": "web-0", "DRAINGATE_POD_NAMESPACE": "shop",
		"DRAINGATE_POD_UID": testUID, "DRAINGATE_LOG": logFile,
	})
	code := Main(context.Background(), []string{"wait", "--then-http-get", h.URL + "/stop"}, e, &stdout, &stderr)
	if code != 0 || stderr.Len() != 0 {
		t.Fatalf("exit %d, stderr %q", code, stderr.String())
	}
	h.only(t)
	mustContain(t, stdout.String(), "released after", "original hook done")
	// The evidence is on by default; where the kernel refuses sock_diag the
	// agent says so and asks without it.
	switch asks := g.recorded(); {
	case strings.Contains(stdout.String(), "traffic evidence on: watching inbound TCP to "):
		if len(asks) != 1 || asks[0].req.Traffic == nil {
			t.Errorf("evidence on, but the ask carried none: %+v", asks)
		}
	case strings.Contains(stdout.String(), "traffic evidence off: "):
		if len(asks) != 1 || asks[0].req.Traffic != nil {
			t.Errorf("evidence off, but the ask carried some: %+v", asks)
		}
	default:
		t.Errorf("the log does not say whether traffic evidence is on:\n%s", stdout.String())
	}
	if b, _ := os.ReadFile(logFile); string(b) != stdout.String() {
		t.Errorf("--log file differs from stdout:\n%s", b)
	}

	// Bad flags: no asking, the hook still runs, exit 0.
	h2 := newHookRecorder(t)
	stdout.Reset()
	before := len(g.recorded())
	code = Main(context.Background(), []string{"wait", "--max-wait", "90", "--then-http-get", h2.URL}, e, &stdout, &stderr)
	if code != 0 || len(g.recorded()) != before {
		t.Fatalf("bad flags: exit %d, asked %d times", code, len(g.recorded())-before)
	}
	h2.only(t)
	mustContain(t, stdout.String(), `bad flag: --max-wait "90" is not a duration`, "not waiting", "original hook done")

	// No pod identity: no asking either, exit 0.
	stdout.Reset()
	if code := Main(context.Background(), []string{"wait"}, env(map[string]string{"DRAINGATE_SERVER": g.URL}), &stdout, &stderr); code != 0 {
		t.Errorf("no identity: exit %d", code)
	}
	mustContain(t, stdout.String(), "not waiting: namespace", "no original hook; done")
}

func TestMainOtherCommands(t *testing.T) {
	var stdout, stderr bytes.Buffer
	ctx := context.Background()
	if code := Main(ctx, nil, env(nil), &stdout, &stderr); code != 2 || !strings.Contains(stderr.String(), "usage:") {
		t.Errorf("no command: exit %d, %q", code, stderr.String())
	}
	stderr.Reset()
	if code := Main(ctx, []string{"frobnicate"}, env(nil), &stdout, &stderr); code != 2 || !strings.Contains(stderr.String(), `unknown command "frobnicate"`) {
		t.Errorf("unknown command: exit %d, %q", code, stderr.String())
	}
	if code := Main(ctx, []string{"help"}, env(nil), &stdout, &stderr); code != 0 || !strings.Contains(stdout.String(), "DRAINGATE_MAX_WAIT, default 90s") {
		t.Errorf("help: exit %d, %q", code, stdout.String())
	}
	stdout.Reset()
	stderr.Reset()
	if code := Main(ctx, []string{"version"}, env(nil), &stdout, &stderr); code != 0 ||
		stdout.String() != "draingate-prestop "+version.String()+"\n" || stderr.Len() != 0 {
		t.Errorf("version: exit %d, stdout %q, stderr %q", code, stdout.String(), stderr.String())
	}
	if code := Main(ctx, []string{"version", "extra"}, env(nil), &stdout, &stderr); code != 2 {
		t.Errorf("version extra: exit %d, want 2", code)
	}
	for _, args := range [][]string{{"install"}, {"install", "a", "b"}, {"install", filepath.Join(t.TempDir(), "missing")}} {
		stderr.Reset()
		if code := Main(ctx, args, env(nil), &stdout, &stderr); code != 1 || !strings.HasPrefix(stderr.String(), "draingate-prestop: install") {
			t.Errorf("%q: exit %d, stderr %q; want 1 with the reason", args, code, stderr.String())
		}
	}
}

// The variables the webhook sets (api's contract) are the fallbacks of the
// wait command's flags: a renamed flag would leave the injected agent
// without its pod, its server or its watcher.
func TestContractEnvNamesAFlag(t *testing.T) {
	flags := map[string]bool{}
	for _, f := range waitFlags {
		flags[cli.Name(f.name)] = true
	}
	for _, env := range []string{api.EnvServer, api.EnvWatchSocket, api.EnvPodName, api.EnvPodNamespace, api.EnvPodUID} {
		if !flags[env] {
			t.Errorf("%s is the fallback of no flag of the wait command", env)
		}
	}
}
