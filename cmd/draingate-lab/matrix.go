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
	"strings"
	"time"

	"draingate.dev/draingate/proving/lab"
	"draingate.dev/draingate/proving/lab/report"
)

// matrixConfig is one scoreboard: every scenario named, each with its own
// knobs, played with the same strategies and options.
type matrixConfig struct {
	scenarios  []lab.Scenario // unscaled
	strategies []lab.Strategy // unscaled
	opts       lab.Options    // shared; Scenario and Strategies set per run
	out        string
	// repeat plays the whole list this many times, each round with its own
	// seed (the first round's plus the round's index).
	repeat int
}

func parseMatrix(args []string, getenv func(string) string, stderr io.Writer) (*matrixConfig, error) {
	m := &matrixConfig{}
	fs := flag.NewFlagSet("draingate-lab matrix", flag.ContinueOnError)
	var errBuf bytes.Buffer
	fs.SetOutput(&errBuf)
	scenarios := fs.String("scenarios", strings.Join(lab.ScenarioNames(), ","), "comma-separated scenario names, played in this order")
	strategies := fs.String("strategies", "none,sleep:30s,draingate", "comma-separated strategies, as for run")
	fs.StringVar(&m.out, "out", "lab-matrix", "folder for scoreboard.md, scoreboard.json and each scenario's JSON and PNG (created if missing)")
	fs.IntVar(&m.repeat, "repeat", 1, "play the scenario list this many times, each round with its own seed (rows and files named \"alb #2\", alb-2.json)")
	seed := commonFlags(fs, &m.opts)
	if err := parseFlags(fs, &errBuf, args, getenv, stderr, &m.opts); err != nil {
		return nil, err
	}
	if m.repeat < 1 {
		return nil, errors.New("--repeat must be at least 1")
	}
	seen := map[string]bool{}
	for _, name := range strings.Split(*scenarios, ",") {
		name = strings.TrimSpace(name)
		sc, ok := lab.Scenarios[name]
		if !ok {
			return nil, fmt.Errorf("unknown scenario %q: want some of %s", name, strings.Join(lab.ScenarioNames(), ", "))
		}
		if seen[name] {
			return nil, fmt.Errorf("scenario %q given twice", name)
		}
		seen[name] = true
		if err := m.opts.Load.Validate(sc); err != nil {
			return nil, fmt.Errorf("scenario %s: %w", name, err)
		}
		m.scenarios = append(m.scenarios, sc)
	}
	sts, err := lab.ParseStrategies(*strategies)
	if err != nil {
		return nil, err
	}
	m.strategies = sts
	if err := os.MkdirAll(m.out, 0o755); err != nil {
		return nil, fmt.Errorf("--out: %w", err)
	}
	m.opts.Seed = *seed
	if m.opts.Seed == 0 {
		m.opts.Seed = uint64(time.Now().UnixNano())
	}
	return m, nil
}

// runMatrix plays the scenarios in order on one cluster. After each it
// writes that scenario's report and rewrites the scoreboard, so an
// interrupted matrix keeps what it measured; a scenario that fails to run
// is a note on the scoreboard, and the next one runs.
func runMatrix(ctx context.Context, m *matrixConfig, stdout, stderr io.Writer) error {
	return withCluster(ctx, m.strategies, stderr, func(env lab.Env) error {
		board := report.Scoreboard{TimeScale: m.opts.TimeScale}
		start := time.Now()
		var plays []lab.Scenario
		for range m.repeat {
			plays = append(plays, m.scenarios...)
		}
		for i, sc := range plays {
			round := i/len(m.scenarios) + 1
			name := sc.Name
			if m.repeat > 1 {
				name = fmt.Sprintf("%s #%d", sc.Name, round)
			}
			fmt.Fprintf(stderr, "matrix: scenario %d/%d %s%s\n", i+1, len(plays), name, eta(start, plays, i, m.opts.TimeScale))
			o := m.opts
			o.Seed += uint64(round - 1)
			o.Scenario = sc.Scaled(o.TimeScale)
			o.Strategies = lab.ScaleStrategies(m.strategies, o.TimeScale)
			o.Progress = stderr
			rep, err := lab.Run(ctx, env, o)
			if ctx.Err() != nil {
				return ctx.Err()
			}
			rep.Scenario = name
			if err != nil {
				board.Notes = append(board.Notes, fmt.Sprintf("%s: did not complete: %v", name, err))
				fmt.Fprintf(stderr, "matrix: scenario %s did not complete: %v\n", name, err)
			}
			if len(rep.Strategies) > 0 {
				board.Runs = append(board.Runs, rep)
				file := sc.Name
				if m.repeat > 1 {
					file = fmt.Sprintf("%s-%d", sc.Name, round)
				}
				if err := writeScenario(m.out, file, rep); err != nil {
					return err
				}
			}
			if err := writeBoard(m.out, board); err != nil {
				return err
			}
		}
		fmt.Fprintf(stderr, "matrix: done in %s; scoreboard in %s\n", time.Since(start).Round(time.Second), filepath.Join(m.out, "scoreboard.md"))
		return board.WriteMarkdown(stdout)
	})
}

// eta estimates the time left: the time so far, spread over the scenarios
// done in proportion to their weight, times the weight of those left.
func eta(start time.Time, scs []lab.Scenario, done int, scale float64) string {
	if done == 0 {
		return ""
	}
	var doneW, leftW time.Duration
	for i, sc := range scs {
		if i < done {
			doneW += weight(sc.Scaled(scale))
		} else {
			leftW += weight(sc.Scaled(scale))
		}
	}
	so := time.Since(start)
	left := time.Duration(float64(so) * float64(leftW) / float64(doneW))
	return fmt.Sprintf(" (%s so far, about %s left)", so.Round(time.Second), left.Round(time.Minute))
}

// weight is a scenario's rough cost: setup, plus what it waits for.
func weight(sc lab.Scenario) time.Duration {
	return time.Minute + sc.MaxRouteDelay() + sc.ScaleDownDelay + 3*sc.LivenessPeriod
}

func writeScenario(dir, file string, rep report.Report) error {
	base := filepath.Join(dir, file)
	if err := writeFile(base+".json", rep.WriteJSON); err != nil {
		return err
	}
	return rep.WritePNG(base + ".png")
}

func writeBoard(dir string, b report.Scoreboard) error {
	if err := writeFile(filepath.Join(dir, "scoreboard.md"), b.WriteMarkdown); err != nil {
		return err
	}
	return writeFile(filepath.Join(dir, "scoreboard.json"), b.WriteJSON)
}
