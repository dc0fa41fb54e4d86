package cli

import (
	"flag"
	"io"
	"strings"
	"testing"
	"time"
)

func TestName(t *testing.T) {
	for flag, want := range map[string]string{
		"server":             "DRAINGATE_SERVER",
		"max-wait":           "DRAINGATE_MAX_WAIT",
		"tail-endpointslice": "DRAINGATE_TAIL_ENDPOINTSLICE",
		"then-http-get":      "DRAINGATE_THEN_HTTP_GET",
	} {
		if got := Name(flag); got != want {
			t.Errorf("Name(%q) = %q, want %q", flag, got, want)
		}
	}
}

func env(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

func TestApply(t *testing.T) {
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	wait := fs.Duration("max-wait", time.Minute, "")
	listen := fs.String("listen", ":8080", "")
	rate := fs.Float64("aws-rate", 2, "")
	groups := fs.Bool("target-groups", true, "")
	server := fs.String("server", "default", "")
	if err := fs.Parse([]string{"--max-wait=7s", "--server="}); err != nil {
		t.Fatal(err)
	}
	err := Apply(fs, env(map[string]string{
		"DRAINGATE_MAX_WAIT": "9s", "DRAINGATE_SERVER": "http://gate",
		"DRAINGATE_AWS_RATE": "0.5", "DRAINGATE_TARGET_GROUPS": "false", "DRAINGATE_LISTEN": "",
	}))
	if err != nil {
		t.Fatal(err)
	}
	if *wait != 7*time.Second || *server != "" {
		t.Errorf("max-wait %s, server %q: the command line must win over the variable, even an empty flag", *wait, *server)
	}
	if *rate != 0.5 || *groups {
		t.Errorf("aws-rate %v, target-groups %v: want 0.5 and false from the environment", *rate, *groups)
	}
	if *listen != ":8080" {
		t.Errorf("listen %q: an empty variable must leave the default", *listen)
	}
	var fromEnv []string
	fs.Visit(func(f *flag.Flag) { fromEnv = append(fromEnv, f.Name) })
	if got := strings.Join(fromEnv, ","); got != "aws-rate,max-wait,server,target-groups" {
		t.Errorf("flags set after Apply: %s", got)
	}
}

func TestApplyErrors(t *testing.T) {
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	fs.Duration("max-wait", time.Minute, "")
	fs.Int("aws-burst", 5, "")
	fs.String("listen", "", "")
	err := Apply(fs, env(map[string]string{"DRAINGATE_MAX_WAIT": "soon", "DRAINGATE_AWS_BURST": "many", "DRAINGATE_LISTEN": ":9"}))
	if err == nil {
		t.Fatal("bad values accepted")
	}
	for _, want := range []string{`DRAINGATE_MAX_WAIT="soon": `, `DRAINGATE_AWS_BURST="many": `} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
	if got := fs.Lookup("listen").Value.String(); got != ":9" {
		t.Errorf("listen = %q: a bad variable must not stop the others", got)
	}
}
