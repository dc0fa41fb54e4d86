package main

import (
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"draingate.dev/draingate/proving/lab"
)

func TestParseBadInput(t *testing.T) {
	cases := []struct {
		args []string
		want string
	}{
		{[]string{}, `want the "run", "matrix" or "scale" command`},
		{[]string{"walk"}, `want the "run", "matrix" or "scale" command`},
		{[]string{"run", "--bogus"}, "flag provided but not defined: -bogus"},
		{[]string{"run", "--reconcile-lag", "soon"}, `invalid value "soon" for flag -reconcile-lag`},
		{[]string{"run", "--strategies", "none,nap:5s"}, `unknown strategy "nap:5s"`},
		{[]string{"run", "--strategies", "sleep:five"}, `strategy "sleep:five": want sleep:DURATION`},
		{[]string{"run", "--strategies", "none,none"}, `strategy "none" given twice`},
		{[]string{"run", "--strategies", "gate"}, `unknown strategy "gate": want none, sleep:DURATION, draingate or draingate-tail`},
		{[]string{"run", "--strategies", "draingate,none,draingate"}, `strategy "draingate" given twice`},
		{[]string{"run", "--scenario", "gcp"}, `unknown scenario "gcp": want one of alb, alb-instance, alb-slow, bluegreen, generic-lb, ingress, lag-past-deadline, local-policy, nlb, restart, sidecar, slow-aws`},
		{[]string{"run", "--rps", "0"}, "--rps must be at least 1"},
		{[]string{"run", "--rate-mid-drain"}, "--rate-mid-drain changes the rate between rollouts: give --rollout-rps too"},
		{[]string{"run", "--time-scale", "-1"}, "--time-scale must be positive"},
		{[]string{"run", "--propagation-min", "30s", "--propagation-max", "1s"}, "propagation-max 1s is below propagation-min 30s"},
		{[]string{"run", "--json", "/no/such/dir/x.json"}, "folder /no/such/dir does not exist"},
		{[]string{"run", "extra"}, `unexpected argument "extra"`},
		{[]string{"run", "--draingate-set", "replicaCount"}, `key "replicaCount" has no value`},
		{[]string{"run", "--chaos", "meteor"}, `--chaos "meteor": want one of kill-one, kill-all, apiserver-restart, throttle`},
		{[]string{"run", "--chaos", "kill-all", "--chaos-for", "0s"}, "--chaos-for must be positive for kill-all"},
		{[]string{"run", "--chaos", "throttle", "--storm-capacity", "0.5"}, "--storm-capacity must be at least 1"},
		{[]string{"run", "--chaos", "kill-one", "--chaos-at", "-1s"}, "--chaos-at must not be negative"},
		{[]string{"run", "--load", "bursty"}, `--load "bursty": want one of constant, poisson, onoff, shift, shortconn`},
		{[]string{"run", "--lb-node-weights", "90,10"}, "--lb-node-weights has 2 weights for 3 load balancer nodes"},
		{[]string{"run", "--lb-node-delays", "0,0,soon"}, `invalid value "0,0,soon" for flag -lb-node-delays`},
		{[]string{"matrix", "--scenarios", "alb", "--lb-node-delays", "0,15s"}, "scenario alb: --lb-node-delays has 2 delays for 3 load balancer nodes"},
		{[]string{"scale", "--pods", "1000,x"}, `--pods: "x" is not a positive count`},
		{[]string{"scale", "--waiters", "0"}, `--waiters: "0" is not a positive count`},
		{[]string{"scale", "--server-env", "GOGC"}, `want K=V, got "GOGC"`},
	}
	for _, c := range cases {
		var err error
		switch {
		case len(c.args) > 0 && c.args[0] == "scale":
			_, err = parseScale(c.args[1:], noEnv, io.Discard)
		case len(c.args) > 0 && c.args[0] == "matrix":
			_, err = parseMatrix(append(c.args[1:], "--out", t.TempDir()), noEnv, io.Discard)
		default:
			_, err = parse(c.args, noEnv, io.Discard)
		}
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: err = %v, want %q", c.args, err, c.want)
			continue
		}
		if strings.Contains(err.Error(), "\n") {
			t.Errorf("%v: error is not one line: %q", c.args, err)
		}
	}
}

func TestParseScenarioAndScale(t *testing.T) {
	c, err := parse([]string{"run", "--scenario=slow-aws", "--time-scale", "0.5", "--strategies", "none,sleep:5s,draingate", "--propagation-max", "10s"}, noEnv, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	sc := c.opts.Scenario
	if sc.Name != "slow-aws" || sc.ReconcileLag != 10*time.Second || sc.PropagationMax != 5*time.Second {
		t.Errorf("scenario after scale: %+v", sc)
	}
	if got := c.opts.Strategies[1].Sleep; got != 3*time.Second {
		t.Errorf("sleep:5s at scale 0.5 = %s, want 3s (whole seconds, rounded up)", got)
	}
	if len(c.opts.Strategies) != 3 {
		t.Fatalf("strategies: %+v, want 3", c.opts.Strategies)
	}
	for i, st := range c.opts.Strategies {
		if want := i == 2; st.Gate != want {
			t.Errorf("%s: Gate = %v, want %v", st.Name, st.Gate, want)
		}
	}
	if st := c.opts.Strategies[2]; st.Name != "draingate" || st.Sleep != 0 {
		t.Errorf("draingate after scale: %+v, want the name kept and no sleep", st)
	}
}

func TestParseChaosScales(t *testing.T) {
	c, err := parse([]string{"run", "--time-scale", "0.5", "--chaos", "throttle", "--chaos-at", "10s", "--chaos-for", "60s", "--storm-capacity", "3", "--storm-refill", "0.2"}, noEnv, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	want := lab.Chaos{Kind: lab.ChaosThrottle, At: 5 * time.Second, For: 30 * time.Second, Capacity: 3, Refill: 0.2}
	if c.opts.Chaos != want {
		t.Errorf("chaos %+v, want %+v (durations scaled, the bucket not)", c.opts.Chaos, want)
	}
	c, err = parse([]string{"run"}, noEnv, io.Discard)
	if err != nil || c.opts.Chaos.Kind != "" {
		t.Errorf("no --chaos: %+v, %v; want none", c.opts.Chaos, err)
	}
}

func TestParseMatrixRepeat(t *testing.T) {
	out := t.TempDir()
	if _, err := parseMatrix([]string{"--repeat", "0", "--out", out}, noEnv, io.Discard); err == nil || err.Error() != "--repeat must be at least 1" {
		t.Errorf("--repeat 0: err = %v", err)
	}
	m, err := parseMatrix([]string{"--repeat", "3", "--scenarios", "alb,nlb", "--out", out}, noEnv, io.Discard)
	if err != nil || m.repeat != 3 || len(m.scenarios) != 2 {
		t.Errorf("--repeat 3: %+v, %v", m, err)
	}
	if m, err := parseMatrix([]string{"--out", out}, noEnv, io.Discard); err != nil || m.repeat != 1 {
		t.Errorf("default repeat: %+v, %v", m, err)
	}
}

func noEnv(string) string { return "" }

// Every flag also reads DRAINGATE_<FLAG>, the scenario included (it sets
// the other flags' defaults); a flag on the command line wins.
func TestParseEnv(t *testing.T) {
	env := map[string]string{"DRAINGATE_SCENARIO": "nlb", "DRAINGATE_ROLLOUTS": "3", "DRAINGATE_RPS": "7"}
	c, err := parse([]string{"run", "--rps", "9"}, func(k string) string { return env[k] }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if c.opts.Scenario.Name != "nlb" || c.opts.Rollouts != 3 || c.opts.RPS != 9 {
		t.Errorf("scenario %q rollouts %d rps %d, want nlb, 3 from the environment and 9 from the flag", c.opts.Scenario.Name, c.opts.Rollouts, c.opts.RPS)
	}
	env["DRAINGATE_ROLLOUTS"] = "many"
	if _, err := parse([]string{"run"}, func(k string) string { return env[k] }, io.Discard); err == nil || !strings.Contains(err.Error(), "DRAINGATE_ROLLOUTS") {
		t.Errorf("bad variable: err = %v, want one naming DRAINGATE_ROLLOUTS", err)
	}
}

// TestParseLoadScales: the load's flags land in Options.Load, its
// durations scaled like every other; the rate stays per full-scale second.
func TestParseLoadScales(t *testing.T) {
	c, err := parse([]string{"run", "--time-scale", "0.5", "--load", "onoff", "--onoff-on", "2s", "--onoff-pause", "pareto",
		"--onoff-pause-mean", "4s", "--clients", "50", "--lb-node-weights", "90,8,2", "--lb-node-delays", "0,0,15s", "--incluster-rps", "5"}, noEnv, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	l := c.opts.Load
	if l.Shape != lab.OnOff || l.OnTime != time.Second || l.PauseDist != "pareto" || l.PauseMean != 2*time.Second ||
		l.Clients != 50 || !slices.Equal(l.NodeWeights, []float64{90, 8, 2}) ||
		!slices.Equal(l.NodeDelays, []time.Duration{0, 0, 7500 * time.Millisecond}) || l.InClusterRPS != 5 {
		t.Errorf("load %+v", l)
	}
	c, err = parse([]string{"run"}, noEnv, io.Discard)
	if err != nil || c.opts.Load.String() != "constant" {
		t.Errorf("default load %q (err %v), want constant", c.opts.Load, err)
	}
}
