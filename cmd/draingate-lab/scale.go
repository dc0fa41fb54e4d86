package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"draingate.dev/draingate/proving/scale"
	"draingate.dev/draingate/proving/testenv"
)

// scaleConfig is the scale benchmark's command line: every count of pods
// with every count of waiters.
type scaleConfig struct {
	pods, waiters []int
	cell          scale.Config // Pods and Waiters set per cell
	out           string
}

func parseScale(args []string, getenv func(string) string, stderr io.Writer) (*scaleConfig, error) {
	c := &scaleConfig{}
	fs := flag.NewFlagSet("draingate-lab scale", flag.ContinueOnError)
	var errBuf bytes.Buffer
	fs.SetOutput(&errBuf)
	pods := fs.String("pods", "1000,5000,10000", "comma-separated pod counts, one cell each (with every waiter count)")
	waiters := fs.String("waiters", "100,1000", "comma-separated counts of terminating pods whose agents long-poll the wait API")
	fs.IntVar(&c.cell.Services, "services", 200, "Services the pods are spread over, with hand-written EndpointSlices")
	fs.IntVar(&c.cell.PerNamespace, "services-per-namespace", 10, "Services per namespace")
	fs.IntVar(&c.cell.TargetGroupEvery, "target-group-every", 5, "every n-th Service has a target group in the ELBv2 emulator, bound by a TargetGroupBinding")
	fs.DurationVar(&c.cell.Steady, "steady", 20*time.Second, "how long each cell measures while every agent waits")
	fs.DurationVar(&c.cell.ReleaseTimeout, "release-timeout", 5*time.Minute, "longest wait for the releases after the route change")
	fs.Uint64Var(&c.cell.Seed, "seed", 1, "picks the waiting pods")
	fs.Func("server-env", "K=V added to the server's environment, e.g. GOGC=50 or GOMEMLIMIT=100MiB (repeatable), for sizing experiments; the table says so", func(v string) error {
		if k, _, ok := strings.Cut(v, "="); !ok || k == "" {
			return fmt.Errorf("want K=V, got %q", v)
		}
		c.cell.ServerEnv = append(c.cell.ServerEnv, v)
		return nil
	})
	fs.StringVar(&c.out, "out", "out/scale", "folder for scale.md, scale.json, memory.png and the servers' logs (created if missing)")
	if err := parseFlagSet(fs, &errBuf, args, getenv, stderr); err != nil {
		return nil, err
	}
	var err error
	if c.pods, err = counts("--pods", *pods); err != nil {
		return nil, err
	}
	if c.waiters, err = counts("--waiters", *waiters); err != nil {
		return nil, err
	}
	if c.cell.Steady <= 0 || c.cell.ReleaseTimeout <= 0 {
		return nil, errors.New("--steady and --release-timeout must be positive")
	}
	if c.cell.Services < 1 || c.cell.PerNamespace < 1 || c.cell.TargetGroupEvery < 1 {
		return nil, errors.New("--services, --services-per-namespace and --target-group-every must be at least 1")
	}
	if err := os.MkdirAll(c.out, 0o755); err != nil {
		return nil, fmt.Errorf("--out: %w", err)
	}
	return c, nil
}

func counts(flagName, s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("%s: %q is not a positive count", flagName, f)
		}
		out = append(out, n)
	}
	return out, nil
}

// runScale plays every cell on one cluster, rewriting the table, JSON and
// PNG after each so an interrupted run keeps what it measured. A cell with
// more waiters than pods is skipped.
func runScale(ctx context.Context, c *scaleConfig, stdout, stderr io.Writer) error {
	return onCluster(ctx, stderr, func(cl *testenv.Cluster) error {
		fmt.Fprintln(stderr, "scale: building draingate")
		bin, err := cl.GoBinary(ctx, "./cmd/draingate")
		if err != nil {
			return err
		}
		env := scale.Env{Config: cl.Config, Kubeconfig: cl.Kubeconfig, Server: bin, Dir: c.out, Progress: stderr}
		var results []scale.Result
		for _, p := range c.pods {
			for _, w := range c.waiters {
				if w > p {
					fmt.Fprintf(stderr, "scale: %d waiters > %d pods: skipped\n", w, p)
					continue
				}
				cell := c.cell
				cell.Pods, cell.Waiters = p, w
				res, err := scale.Run(ctx, env, cell)
				if err != nil {
					return fmt.Errorf("%d pods, %d waiters: %w", p, w, err)
				}
				results = append(results, res)
				if err := writeScale(c.out, results); err != nil {
					return err
				}
			}
		}
		return scale.WriteTable(stdout, results)
	})
}

func writeScale(dir string, rs []scale.Result) error {
	if err := writeFile(filepath.Join(dir, "scale.md"), func(w io.Writer) error { return scale.WriteTable(w, rs) }); err != nil {
		return err
	}
	if err := writeFile(filepath.Join(dir, "scale.json"), func(w io.Writer) error { return scale.WriteJSON(w, rs) }); err != nil {
		return err
	}
	return scale.WritePNG(filepath.Join(dir, "memory.png"), rs)
}
