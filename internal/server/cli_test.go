package server

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"draingate.dev/draingate/internal/cli"
	"draingate.dev/draingate/internal/version"
	"draingate.dev/draingate/internal/webhook"
)

func TestServeFlagsFromEnv(t *testing.T) {
	var f serveFlags
	fs := newServeFlagSet(&f, Kinds(), &bytes.Buffer{})
	if err := fs.Parse([]string{"--tail-alb=7s"}); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"DRAINGATE_TAIL_ALB": "9s", "DRAINGATE_AWS_RATE": "0.5", "DRAINGATE_TARGET_GROUPS": "false"}
	if err := cli.Apply(fs, func(k string) string { return env[k] }); err != nil {
		t.Fatal(err)
	}
	value := func(name string) string { return fs.Lookup(name).Value.String() }
	if got := value("tail-alb"); got != (7 * time.Second).String() {
		t.Errorf("tail-alb = %s: the command line must win over DRAINGATE_TAIL_ALB", got)
	}
	if rate, tg := value("aws-rate"), value("target-groups"); rate != "0.5" || tg != "false" {
		t.Errorf("rate %v, target-groups %v: want 0.5 and false from the environment", rate, tg)
	}
	if got := value("tail-nlb"); got != (300*time.Second).String() || f.listen != ":8080" {
		t.Errorf("defaults lost: tail-nlb %s, listen %q", got, f.listen)
	}
}

func TestServeBadInput(t *testing.T) {
	for _, c := range []struct {
		args []string
		env  map[string]string
		want string
	}{
		{[]string{"--aws-rate=0"}, nil, "--aws-rate must be in (0, 100]"},
		{[]string{"--aws-burst=0"}, nil, "--aws-burst must be at least 1"},
		{[]string{"--tail-alb=-1s"}, nil, "--tail-alb must not be negative"},
		{[]string{"--poll-interval=0s"}, nil, "--poll-interval must be positive"},
		{[]string{"--shutdown-reserve=0s"}, nil, "--shutdown-reserve must be positive"},
		{[]string{"--wait-api-sources=everyone"}, nil, "--wait-api-sources must be pod or any"},
		{[]string{"--profiling", "--metrics-listen="}, nil, "--profiling serves on --metrics-listen, which is empty"},
		{[]string{"--inject-installer-limits=memroy=16Mi"}, nil, `"memroy" is not a container resource`},
		{[]string{"--webhook-listen=127.0.0.1:0", "--agent-image=img", "--webhook-namespace=ns", "--inject-installer-requests=cpu"}, nil, "--inject-installer-requests: \"cpu\" is not name=quantity"},
		{[]string{"--webhook-listen=127.0.0.1:0", "--agent-image=img", "--webhook-namespace=ns", "--inject-installer-requests=cpu=1", "--inject-installer-limits=cpu=100m"}, nil, "--inject-installer-requests cpu=1 is above --inject-installer-limits cpu=100m"},
		{[]string{"--tail-endpointslice=0s", "--tail-alb=0s", "--tail-nlb=0s", "--tail-local-policy=0s", "--tail-external=0s"}, nil, "are all zero"},
		{[]string{"--external-routes=maybe"}, nil, `--external-routes "maybe": want auto, true or false`},
		{[]string{"--log-format=xml"}, nil, "--log-format must be text or json"},
		{[]string{"--log-level=verbose"}, nil, "--log-level must be debug, info, warn or error"},
		{[]string{"--kube-api-qps=0"}, nil, "--kube-api-qps must be positive"},
		{[]string{"--kube-api-burst=0"}, nil, "--kube-api-burst must be at least 1"},
		{[]string{"extra"}, nil, `unexpected argument "extra"`},
		{[]string{"--bogus"}, nil, "flag provided but not defined: -bogus"},
		{nil, map[string]string{"DRAINGATE_MAX_WAIT": "soon"}, `DRAINGATE_MAX_WAIT="soon"`},
		{[]string{"--target-groups=false", "--kubeconfig=/nonexistent/kubeconfig"}, nil, "kubeconfig /nonexistent/kubeconfig"},
		{[]string{"--target-groups=false"}, nil, "give --kubeconfig or set KUBECONFIG"},
	} {
		var out, errb bytes.Buffer
		code := Main(context.Background(), append([]string{"serve"}, c.args...), func(k string) string { return c.env[k] }, &out, &errb)
		if code == 0 || !strings.Contains(errb.String(), c.want) {
			t.Errorf("serve %q env %v: exit %d, stderr %q; want a failure saying %q", c.args, c.env, code, errb.String(), c.want)
		}
	}
}

func TestMainCommands(t *testing.T) {
	var out, errb bytes.Buffer
	if code := Main(context.Background(), []string{"serve", "-h"}, func(string) string { return "" }, &out, &errb); code != 0 ||
		!strings.Contains(errb.String(), "-aws-rate") || !strings.Contains(errb.String(), "divided by the replicas") {
		t.Errorf("serve -h: exit %d, help %q: want 0 and the flags, with how the budget divides among replicas", code, errb.String())
	}
	errb.Reset()
	if code := Main(context.Background(), []string{"version"}, func(string) string { return "" }, &out, &errb); code != 0 ||
		out.String() != "draingate "+version.String()+"\n" || errb.Len() != 0 {
		t.Errorf("version: exit %d, stdout %q, stderr %q", code, out.String(), errb.String())
	}
	if code := Main(context.Background(), []string{"version", "extra"}, func(string) string { return "" }, &out, &errb); code != 2 {
		t.Errorf("version extra: exit %d, want 2", code)
	}
	errb.Reset()
	if code := Main(context.Background(), []string{"frobnicate"}, func(string) string { return "" }, &out, &errb); code != 2 || !strings.Contains(errb.String(), `unknown command "frobnicate"`) {
		t.Errorf("unknown command: exit %d, %q", code, errb.String())
	}
}

func TestGCTarget(t *testing.T) {
	if gc, apply := gcTarget(func(string) string { return "" }); gc != "50" || !apply {
		t.Errorf("GOGC unset: %q, apply %v; want the server's 50, applied", gc, apply)
	}
	if gc, apply := gcTarget(func(k string) string { return map[string]string{"GOGC": "off"}[k] }); gc != "off" || apply {
		t.Errorf("GOGC=off: %q, apply %v; want the environment's, left to the runtime", gc, apply)
	}
}

// --log-level takes slog's four level names, nothing else.
func TestLogLevel(t *testing.T) {
	for s, want := range map[string]slog.Level{"debug": slog.LevelDebug, "info": slog.LevelInfo, "warn": slog.LevelWarn, "error": slog.LevelError} {
		if l, err := logLevel(s); err != nil || l != want {
			t.Errorf("%s: %v, %v; want %v", s, l, err, want)
		}
	}
	for _, s := range []string{"verbose", "info+2", ""} {
		if _, err := logLevel(s); err == nil {
			t.Errorf("%q accepted", s)
		}
	}
}

// The webhook is told whether traffic evidence is weighed (it adds the
// watcher only then: internal/webhook's TestWatcherOnlyWithTrafficEvidence),
// and the wait API's address and the max-wait ceiling.
func TestWebhookTakesTheServersFlags(t *testing.T) {
	for _, c := range []struct {
		args []string
		want webhook.Server
	}{
		{nil, webhook.Server{Listen: ":8080", MaxWaitCeiling: 10 * time.Minute, TrafficEvidence: true}},
		{[]string{"--traffic-evidence=false", "--listen=:9000", "--max-wait-ceiling=20m"}, webhook.Server{Listen: ":9000", MaxWaitCeiling: 20 * time.Minute}},
	} {
		f, code := parseServe(c.args, func(string) string { return "" }, io.Discard)
		if f == nil {
			t.Fatalf("%q: exit %d", c.args, code)
		}
		if got := f.webhookServer(); got != c.want {
			t.Errorf("%q: %+v, want %+v", c.args, got, c.want)
		}
	}
}
