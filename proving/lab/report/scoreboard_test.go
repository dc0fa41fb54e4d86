package report

import (
	"bytes"
	"encoding/json"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"
)

func board() Scoreboard {
	alb := Report{Scenario: "alb", Strategies: []Strategy{
		{Name: "none", Requests: 4787, Failed: 314, Terminations: secs(1.04, 1.26, 0.97), Slacks: secs(-12.35, -3.1, 0.4),
			Pods: []Pod{{Name: "a", Nodes: map[string]PodNode{"lb-1": {AfterSIGTERM: 200}, "lb-2": {AfterSIGTERM: 114}}}}},
		{Name: "draingate", Requests: 4800, Failed: 3, NoTarget: 3, Terminations: secs(6), Restarts: secs(14, 12, 30),
			Releases: map[string]int{"drained": 3}, GateELBv2Calls: map[string]int{"DescribeTargetHealth": 40},
			Pods: []Pod{{Name: "b", Closes: Closes{Traffic: 1, Early: 1, Bound: 7 * time.Second}}, {Name: "c", Closes: Closes{Traffic: 1, Tail: 1, Bound: 8 * time.Second}}}},
	}, Notes: []string{"time-scale 0.5"}}
	alb.Load = "onoff (on 1s, pareto pauses of mean 2s), 50 clients"
	idle := Report{Scenario: "idle|odd", Strategies: []Strategy{{Name: "sleep:30s"}}}
	return Scoreboard{TimeScale: 0.5, Runs: []Report{alb, idle}, Notes: []string{"nlb: did not complete: boom"}}
}

func TestScoreboardMarkdown(t *testing.T) {
	var b bytes.Buffer
	if err := board().WriteMarkdown(&b); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	t.Log("\n" + out)
	var rows []string
	for line := range strings.Lines(out) {
		if strings.HasPrefix(line, "| ") {
			rows = append(rows, strings.TrimSuffix(line, "\n"))
		}
	}
	want := []string{
		"| scenario | load | strategy | requests | failed | term p50 / p99 s | restart p50 s | slack p50 / min s | after SIGTERM | released by | routes closed by | draingate ELBv2 calls |",
		"| alb | onoff (on 1s, pareto pauses of mean 2s), 50 clients | none | 4787 | 314 (6.56%) | 1.0 / 1.3 | - | -3.1 / -12.3 | 314 | - | - | - |",
		"| alb | onoff (on 1s, pareto pauses of mean 2s), 50 clients | draingate | 4800 | 3 (0.06%; 3 no target) | 6.0 / 6.0 | 14.0 | - / - | 0 | drained=3 | traffic=2 (early 1) tail=1 (bound p50 7.0 s) | DescribeTargetHealth=40 |",
		`| idle\|odd | constant | sleep:30s | 0 | 0 | - / - | - | - / - | - | - | - | - |`,
	}
	if !slices.Equal(rows, want) {
		t.Errorf("rows:\n%s\nwant:\n%s", strings.Join(rows, "\n"), strings.Join(want, "\n"))
	}
	if !strings.Contains(out, "|---|---|---|--:|") || !strings.Contains(out, "time scale 0.5") {
		t.Error("no alignment row or time scale")
	}
	for _, n := range []string{"- nlb: did not complete: boom\n", "- alb: time-scale 0.5\n"} {
		if !strings.Contains(out, n) {
			t.Errorf("notes lack %q", n)
		}
	}
	// A tiny failure rate still shows.
	tiny := Scoreboard{Runs: []Report{{Scenario: "s", Strategies: []Strategy{{Name: "x", Requests: 1000000, Failed: 1}}}}}
	b.Reset()
	if err := tiny.WriteMarkdown(&b); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "| 1 (<0.01%) |") {
		t.Errorf("tiny failure rate hidden:\n%s", b.String())
	}
}

func TestScoreboardJSON(t *testing.T) {
	var b bytes.Buffer
	if err := board().WriteJSON(&b); err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(b.Bytes(), &doc); err != nil {
		t.Fatalf("%v\n%s", err, b.String())
	}
	if got := slices.Sorted(maps.Keys(doc)); !slices.Equal(got, []string{"notes", "runs", "time_scale"}) {
		t.Errorf("keys = %q", got)
	}
	runs, _ := doc["runs"].([]any)
	if doc["time_scale"] != 0.5 || len(runs) != 2 {
		t.Fatalf("time_scale %v, runs %v", doc["time_scale"], doc["runs"])
	}
	// Each run is exactly what Report.WriteJSON writes.
	var one bytes.Buffer
	if err := board().Runs[0].WriteJSON(&one); err != nil {
		t.Fatal(err)
	}
	var alone any
	if err := json.Unmarshal(one.Bytes(), &alone); err != nil {
		t.Fatal(err)
	}
	a, _ := json.Marshal(alone)
	r, _ := json.Marshal(runs[0])
	if !bytes.Equal(a, r) {
		t.Errorf("run differs from Report.WriteJSON:\n%s\n%s", r, a)
	}

	b.Reset()
	if err := (Scoreboard{}).WriteJSON(&b); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), `"runs": []`) || !strings.Contains(b.String(), `"notes": []`) {
		t.Errorf("empty scoreboard:\n%s", b.String())
	}
	b.Reset()
	if err := (Scoreboard{}).WriteMarkdown(&b); err != nil || !strings.Contains(b.String(), "| scenario |") {
		t.Errorf("empty scoreboard markdown (%v):\n%s", err, b.String())
	}
}
