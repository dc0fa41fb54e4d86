// Command draingate-lab reproduces the pod-termination race behind a load
// balancer on the project's real one-node cluster and measures it per
// strategy (see proving/lab). `make demo` runs it with the defaults.
//
//	draingate-lab run [--scenario NAME] [--strategies none,sleep:5s,sleep:30s,draingate]
//	                  [--rollouts N] [--rps N] [--replicas N] [--json FILE] [--png FILE]
//	                  [--time-scale F] [--draingate-set k=v] [scenario knobs...]
//	draingate-lab matrix [--scenarios a,b,...] [--strategies ...] [--time-scale F] [--out DIR]
//	draingate-lab scale [--pods 1000,5000,10000] [--waiters 100,1000] [--out DIR]
//
// matrix plays every scenario named (all by default) with its own knobs
// and writes the scoreboard: DIR/scoreboard.md and .json, and per scenario
// its report as JSON and PNG.
//
// scale measures the gate server's cost (memory, CPU, answer and release
// latency, AWS calls) at each count of pods and waiting agents given (see
// proving/scale) and writes DIR/scale.md, scale.json and memory.png.
package main

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"helm.sh/helm/v4/pkg/strvals"
	"k8s.io/klog/v2"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"draingate.dev/draingate/internal/cli"
	"draingate.dev/draingate/proving/lab"
	"draingate.dev/draingate/proving/testenv"
)

func main() { cli.Run(command) }

// command is the lab's command line; every failure exits 2 with one line.
func command(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	if err := run(ctx, args, getenv, stdout, stderr); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		fmt.Fprintln(stderr, "draingate-lab:", err)
		return 2
	}
	return 0
}

type config struct {
	scenario   lab.Scenario
	strategies []lab.Strategy
	opts       lab.Options
	jsonPath   string
	pngPath    string
}

// parse reads the command line, each flag with its DRAINGATE_<FLAG>
// fallback; every mistake is one clear error.
func parse(args []string, getenv func(string) string, stderr io.Writer) (*config, error) {
	if len(args) == 0 || args[0] != "run" {
		fmt.Fprintln(stderr, "usage: draingate-lab run|matrix|scale [flags]  (draingate-lab run -h lists them)")
		return nil, errors.New(`want the "run", "matrix" or "scale" command`)
	}
	args = args[1:]
	// The scenario sets the knobs' defaults, so find it before the rest.
	name := cmp.Or(getenv(cli.Name("scenario")), "alb")
	for i, a := range args {
		if v, ok := strings.CutPrefix(a, "--scenario="); ok {
			name = v
		} else if v, ok := strings.CutPrefix(a, "-scenario="); ok {
			name = v
		} else if (a == "--scenario" || a == "-scenario") && i+1 < len(args) {
			name = args[i+1]
		}
	}
	sc, ok := lab.Scenarios[name]
	if !ok {
		return nil, fmt.Errorf("unknown scenario %q: want one of %s", name, strings.Join(lab.ScenarioNames(), ", "))
	}
	c := &config{scenario: sc}
	fs := flag.NewFlagSet("draingate-lab run", flag.ContinueOnError)
	var errBuf bytes.Buffer
	fs.SetOutput(&errBuf)
	fs.String("scenario", name, "named set of knobs: "+strings.Join(lab.ScenarioNames(), ", "))
	strategies := fs.String("strategies", "none,sleep:5s,sleep:30s,draingate", "comma-separated: none (no preStop hook), sleep:DURATION (native preStop sleep), draingate (a gate server, and the draingate-prestop agent as preStop hook waiting for it), draingate-tail (the same with traffic evidence off: tails alone)")
	fs.StringVar(&c.jsonPath, "json", "", "write the report as JSON to this file")
	fs.StringVar(&c.pngPath, "png", "", "write a timeline per strategy as PNG to this file")
	seed := commonFlags(fs, &c.opts)
	c.scenario.RegisterFlags(fs)
	if err := parseFlags(fs, &errBuf, args, getenv, stderr, &c.opts); err != nil {
		return nil, err
	}
	if err := c.scenario.Validate(); err != nil {
		return nil, err
	}
	if err := c.opts.Load.Validate(c.scenario); err != nil {
		return nil, err
	}
	sts, err := lab.ParseStrategies(*strategies)
	if err != nil {
		return nil, err
	}
	for _, p := range []string{c.jsonPath, c.pngPath} {
		if p != "" {
			if st, err := os.Stat(filepath.Dir(p)); err != nil || !st.IsDir() {
				return nil, fmt.Errorf("cannot write %s: folder %s does not exist", p, filepath.Dir(p))
			}
		}
	}
	c.opts.Scenario = c.scenario.Scaled(c.opts.TimeScale)
	c.opts.Strategies = lab.ScaleStrategies(sts, c.opts.TimeScale)
	c.opts.Seed = *seed
	if c.opts.Seed == 0 {
		c.opts.Seed = uint64(time.Now().UnixNano())
	}
	return c, nil
}

// commonFlags binds the flags run and matrix share; the seed is returned.
func commonFlags(fs *flag.FlagSet, o *lab.Options) *uint64 {
	fs.IntVar(&o.Rollouts, "rollouts", 1, "rollouts (blue/green switches, restarts) per strategy")
	fs.IntVar(&o.RPS, "rps", 50, "requests per second through the data plane at full scale (like every duration, the rate follows --time-scale: 50 at 0.5 plays 100/s)")
	fs.Func("rollout-rps", "requests/s at full scale during each rollout, comma-separated, one per --rollouts (e.g. 50,3: a busy rollout, then a quiet one); the first replaces --rps", func(v string) error {
		o.RolloutRPS = nil
		for _, f := range strings.Split(v, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || n < 1 {
				return fmt.Errorf("%q: want whole requests/s of at least 1", f)
			}
			o.RolloutRPS = append(o.RolloutRPS, n)
		}
		return nil
	})
	fs.Func("rollout-propagation-max", "each rollout's propagation maximum at full scale, comma-separated, one per --rollouts (e.g. 5s,5s,5s,25s: a load balancer that becomes slower, as in an AWS incident); the nodes draw uniformly from --propagation-min up to it", func(v string) error {
		o.RolloutPropagationMax = nil
		for _, f := range strings.Split(v, ",") {
			d, err := time.ParseDuration(strings.TrimSpace(f))
			if err != nil || d < 0 {
				return fmt.Errorf("%q: want a duration such as 5s", f)
			}
			o.RolloutPropagationMax = append(o.RolloutPropagationMax, d)
		}
		return nil
	})
	fs.BoolVar(&o.RateMidDrain, "rate-mid-drain", false, "with --rollout-rps, change the rate as soon as the previous rollout's last pod is deleted, while it still drains (a load that falls mid-drain, which fools the evidence's early close past an 8-fold fall); default: once the previous rollout's pods drained")
	fs.IntVar(&o.Replicas, "replicas", 6, "Deployment replicas")
	o.Load = lab.DefaultLoad()
	o.Load.RegisterFlags(fs)
	fs.Float64Var(&o.TimeScale, "time-scale", 1, "multiply every scenario duration and sleep by this")
	fs.Func("draingate-set", "a value for the draingate chart, in Helm --set syntax (repeatable), on top of its defaults; echoed in the report", func(v string) error {
		if err := strvals.ParseInto(v, map[string]any{}); err != nil {
			return err
		}
		o.DraingateSet = append(o.DraingateSet, v)
		return nil
	})
	fs.Func("chaos", "a fault injected during every rollout: "+strings.Join(lab.ChaosKinds, ", ")+" (see --chaos-at, --chaos-for)", func(v string) error {
		o.Chaos.Kind = v
		return nil
	})
	fs.DurationVar(&o.Chaos.At, "chaos-at", 5*time.Second, "when the fault starts, after the rollout began")
	fs.DurationVar(&o.Chaos.For, "chaos-for", 30*time.Second, "how long kill-all keeps the gate servers away, apiserver-restart the API server down, throttle the storm")
	fs.Float64Var(&o.Chaos.Capacity, "storm-capacity", 2, "throttle: the Describe bucket's capacity during the storm (AWS: 40)")
	fs.Float64Var(&o.Chaos.Refill, "storm-refill", 0.5, "throttle: the Describe bucket's refill per second during the storm (AWS: 10)")
	return fs.Uint64("seed", 0, "random seed for lags and propagation delays (0: a new one per run, printed in the report)")
}

// parseFlags parses args into fs (whose output is errBuf), applies the
// DRAINGATE_<FLAG> fallbacks and checks the shared options o (already
// filled by parsing): one clear error for every mistake.
func parseFlags(fs *flag.FlagSet, errBuf *bytes.Buffer, args []string, getenv func(string) string, stderr io.Writer, o *lab.Options) error {
	if err := parseFlagSet(fs, errBuf, args, getenv, stderr); err != nil {
		return err
	}
	if len(o.RolloutRPS) > 0 {
		o.RPS = o.RolloutRPS[0]
	}
	if err := checkCommon(*o); err != nil {
		return err
	}
	if err := o.ValidateRolloutRPS(); err != nil {
		return err
	}
	o.Chaos = o.Chaos.Scaled(o.TimeScale)
	o.Load = o.Load.Scaled(o.TimeScale)
	return nil
}

// parseFlagSet parses args into fs (whose output is errBuf) and applies
// the DRAINGATE_<FLAG> fallbacks; a mistake is one line.
func parseFlagSet(fs *flag.FlagSet, errBuf *bytes.Buffer, args []string, getenv func(string) string, stderr io.Writer) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(stderr, errBuf.String(), cli.Help, "\n")
			return err
		}
		return errors.New(strings.TrimSpace(strings.SplitN(errBuf.String(), "\n", 2)[0]))
	}
	if err := cli.Apply(fs, getenv); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	return nil
}

func checkCommon(o lab.Options) error {
	switch {
	case o.Rollouts < 1:
		return errors.New("--rollouts must be at least 1")
	case o.RPS < 1:
		return errors.New("--rps must be at least 1")
	case o.Replicas < 1:
		return errors.New("--replicas must be at least 1")
	case o.TimeScale <= 0:
		return errors.New("--time-scale must be positive")
	}
	return o.Chaos.Validate()
}

func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) (err error) {
	if len(args) > 0 && args[0] == "scale" {
		sc, err := parseScale(args[1:], getenv, stderr)
		if err != nil {
			return err
		}
		return runScale(ctx, sc, stdout, stderr)
	}
	if len(args) > 0 && args[0] == "matrix" {
		m, err := parseMatrix(args[1:], getenv, stderr)
		if err != nil {
			return err
		}
		return runMatrix(ctx, m, stdout, stderr)
	}
	c, err := parse(args, getenv, stderr)
	if err != nil {
		return err
	}
	return withCluster(ctx, c.opts.Strategies, stderr, func(env lab.Env) error {
		c.opts.Progress = stderr
		rep, err := lab.Run(ctx, env, c.opts)
		if err != nil {
			return err
		}
		if err := rep.WriteTable(stdout); err != nil {
			return err
		}
		if c.jsonPath != "" {
			if err := writeFile(c.jsonPath, rep.WriteJSON); err != nil {
				return err
			}
		}
		if c.pngPath != "" {
			if err := rep.WritePNG(c.pngPath); err != nil {
				return err
			}
		}
		return nil
	})
}

// withCluster starts (or joins) the project's cluster, loads the images the
// strategies need, runs f, and stops the cluster it started.
func withCluster(ctx context.Context, strategies []lab.Strategy, stderr io.Writer, f func(lab.Env) error) error {
	return onCluster(ctx, stderr, func(cl *testenv.Cluster) error {
		return loadAndRun(ctx, cl, strategies, stderr, f)
	})
}

// onCluster starts (or joins) the project's cluster, runs f on it, and
// stops the cluster it started.
func onCluster(ctx context.Context, stderr io.Writer, f func(*testenv.Cluster) error) (err error) {
	// Helm's status watcher uses controller-runtime's client, and client-go
	// logs through klog: both print to stderr as text, like the progress
	// lines. Unset, controller-runtime drops its logs and complains with a
	// stack trace.
	libLog := slog.New(slog.NewTextHandler(stderr, nil))
	ctrllog.SetLogger(logr.FromSlogHandler(libLog.Handler()))
	klog.SetSlogLogger(libLog)
	cl, err := testenv.Start(ctx, testenv.Options{Progress: stderr})
	if err != nil {
		return err
	}
	defer func() {
		if serr := cl.Stop(context.Background()); serr != nil && err == nil {
			err = serr
		}
	}()
	return f(cl)
}

func loadAndRun(ctx context.Context, cl *testenv.Cluster, strategies []lab.Strategy, stderr io.Writer, f func(lab.Env) error) error {
	fmt.Fprintln(stderr, "lab: building the demo app image")
	if err := cl.LoadGoImage(ctx, lab.DemoImage, "./cmd/draingate-demoapp"); err != nil {
		return err
	}
	if lab.UsesGate(strategies) {
		fmt.Fprintln(stderr, "lab: building the gate server and agent images")
		if err := cl.LoadGoImage(ctx, lab.ServerImage, "./cmd/draingate"); err != nil {
			return err
		}
		if err := cl.LoadGoImage(ctx, lab.AgentImage, "./cmd/draingate-prestop"); err != nil {
			return err
		}
	}
	return f(lab.Env{Config: cl.Config, Client: cl.Client, Kubeconfig: cl.Kubeconfig, HostIP: testenv.HostIP, LBSources: testenv.LBNodeIPs(),
		ClientSources:    testenv.LBClientIPs(),
		HAProxy:          lab.FindHAProxy(),
		RestartAPIServer: cl.RestartAPIServer,
		AddNode:          cl.AddNode})
}

// writeFile writes through a temporary file so a failure leaves no half file.
func writeFile(path string, write func(io.Writer) error) error {
	tmp := path + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return err
	}
	if err := write(f); err != nil {
		f.Close()
		os.Remove(tmp)
		return err
	}
	if err := f.Close(); err != nil {
		os.Remove(tmp)
		return err
	}
	return os.Rename(tmp, path)
}
