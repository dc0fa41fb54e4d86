package report

import (
	"bytes"
	"encoding/json"
	"fmt"
	"image/png"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

var nan = math.NaN()

// podAt builds a pod whose times are seconds after base; NaN is not seen.
// The three-element arrays are for lb-1, lb-2 and lb-3.
func podAt(base time.Time, name string, draining, sigterm, released float64, release string,
	routeOut, last [3]float64, after [3]int,
) Pod {
	at := func(v float64) time.Time {
		if math.IsNaN(v) {
			return time.Time{}
		}
		return base.Add(time.Duration(math.Round(v*1000)) * time.Millisecond)
	}
	p := Pod{
		Name: name, IP: "10.244.0." + fmt.Sprint(len(name)),
		Draining: at(draining), SIGTERM: at(sigterm), Release: release, ReleasedAt: at(released),
		Nodes: map[string]PodNode{},
	}
	if !math.IsNaN(sigterm) {
		p.Deleted, p.Exit = at(draining-0.1), at(sigterm+0.8)
	}
	for i := range 3 {
		p.Nodes[fmt.Sprintf("lb-%d", i+1)] = PodNode{LastRequest: at(last[i]), RouteOut: at(routeOut[i]), AfterSIGTERM: after[i]}
	}
	return p
}

// podsSample is three strategies of six pods on three nodes, roughly as
// the lab sees them: without a preStop the nodes route pods out after
// SIGTERM; with a sleep long after; draingate releases once every node is
// done, except one pod that ran into its deadline with lb-3 late.
func podsSample() Report {
	t0 := time.Date(2026, 7, 1, 12, 0, 0, 0, time.UTC)
	var none, sleep, gate Strategy
	none = Strategy{Name: "none", Requests: 8000, Failed: 314, Terminations: secs(1, 1.1, 0.9, 1, 1.2, 1)}
	sleep = Strategy{Name: "sleep:30s", Requests: 8000, Terminations: secs(31, 31, 31.2, 31, 31.1, 31)}
	gate = Strategy{
		Name: "draingate", Requests: 8000, Failed: 2, Terminations: secs(6, 6.2, 5.9, 6, 30, 6.1),
		Restarts:       secs(14, 12, 30),
		ELBv2Calls:     map[string]int{"DeregisterTargets": 6, "DescribeTargetHealth": 90, "RegisterTargets": 6},
		GateELBv2Calls: map[string]int{"DescribeTargetHealth": 72},
		Releases:       map[string]int{"drained": 5, "deadline": 1},
	}
	for i := range 6 {
		d := 20 + 8*float64(i)
		name := fmt.Sprintf("demo-7c9f8d5b6-%c%c%c%c%c", 'a'+i, 'k', 'x', 'q', 'a'+i)
		none.Pods = append(none.Pods, podAt(t0, name, d, d+0.1, nan, "",
			[3]float64{d + 0.6, d + 2, d + 3.5}, [3]float64{d + 0.5, d + 1.9, d + 3.4}, [3]int{5, 20, 35}))
		sleep.Pods = append(sleep.Pods, podAt(t0.Add(time.Hour), name, d, d+30, nan, "",
			[3]float64{d + 0.6, d + 2, d + 3.5}, [3]float64{d + 0.5, d + 1.9, d + 3.4}, [3]int{}))
		if i == 4 {
			gate.Pods = append(gate.Pods, podAt(t0.Add(2*time.Hour), name, d, d+25.1, d+25, "deadline",
				[3]float64{d + 0.6, d + 2, d + 26.1}, [3]float64{d + 0.5, d + 1.9, d + 26}, [3]int{0, 0, 2}))
			continue
		}
		gate.Pods = append(gate.Pods, podAt(t0.Add(2*time.Hour), name, d, d+5.1, d+5, "drained",
			[3]float64{d + 0.6, d + 2, d + 3.5}, [3]float64{d + 0.5, d + 1.9, d + 3.4}, [3]int{}))
	}
	none.Timeline = timeline(t0, 80, []int{20, 28, 36, 44, 52, 60}, 10)
	sleep.Timeline = timeline(t0.Add(time.Hour), 100, []int{50, 58, 66, 74, 82, 90}, 0)
	gate.Timeline = timeline(t0.Add(2*time.Hour), 80, []int{25, 33, 41, 49, 77, 65}, 0)
	return Report{Scenario: "alb", TimeScale: 1, Replicas: 3, Rollouts: 2, RPS: 100,
		Strategies: []Strategy{none, sleep, gate}}
}

func TestWriteTablePods(t *testing.T) {
	var b bytes.Buffer
	if err := podsSample().WriteTable(&b); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	t.Log("\n" + out)
	rows := map[string][]string{}
	for line := range strings.Lines(out) {
		if f := strings.Fields(line); len(f) > 0 && rows[f[0]] == nil {
			rows[f[0]] = f
		}
	}
	// restart p50, then after SIGTERM (3 nodes × 6 pods), released by, draingate ELBv2.
	if got, want := rows["none"][6:], []string{"-", "-", "-", "360", "-", "-"}; !slices.Equal(got, want) {
		t.Errorf("none row ends %q, want %q", got, want)
	}
	if got, want := rows["draingate"][6:], []string{"14.0", "-", "-", "2", "deadline=1", "drained=5", "DescribeTargetHealth=72"}; !slices.Equal(got, want) {
		t.Errorf("draingate row ends %q, want %q", got, want)
	}
	if got, want := rows["sleep:30s"][9], "0"; got != want {
		t.Errorf("sleep after SIGTERM = %q, want %q", got, want)
	}
	for _, want := range []string{
		"DeregisterTargets=6 DescribeTargetHealth=90 RegisterTargets=6\n", // every caller
		"  draingate demo-7c9f8d5b6-ekxqe (10.244.0.20): released by deadline at -0.1s; draining -25.1s; " +
			"after SIGTERM 2 (lb-1=0 lb-2=0 lb-3=2); last request lb-1=-24.6s lb-2=-23.2s lb-3=+0.9s; " +
			"route out lb-1=-24.5s lb-2=-23.1s lb-3=+1.0s\n",
		"  none demo-7c9f8d5b6-akxqa (10.244.0.20): draining -0.1s; after SIGTERM 60 (lb-1=5 lb-2=20 lb-3=35); ",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q", want)
		}
	}
	// Six pods of none, one of draingate; the sleep's and the drained
	// ones have nothing to look at.
	if n := strings.Count(out, "  none demo-"); n != 6 {
		t.Errorf("%d lines for none's pods, want 6", n)
	}
	if strings.Contains(out, "  sleep:30s demo-") || strings.Count(out, "  draingate demo-") != 1 {
		t.Error("pods with nothing wrong are listed")
	}
	// Without any pod to look at, no header either.
	b.Reset()
	if err := sample().WriteTable(&b); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(b.String(), "pods with") {
		t.Errorf("pod header without pods:\n%s", b.String())
	}
}

func TestNotableAndPodLine(t *testing.T) {
	t0 := time.Date(2026, 7, 1, 12, 0, 0, 0, time.UTC)
	ok := podAt(t0, "ok", 0, 5, 4.9, "drained", [3]float64{1, 2, 3}, [3]float64{1, 2, 3}, [3]int{})
	unknownRouteOut := podAt(t0, "unknown", 0, 5, 4.9, "drained", [3]float64{1, nan, 3}, [3]float64{1, 2, 3}, [3]int{})
	lastAfter := podAt(t0, "late", 0, 5, 4.9, "drained", [3]float64{1, 2, 3}, [3]float64{1, 2, 5}, [3]int{})
	lateRouteOut := podAt(t0, "lateout", 0, 5, 4.9, "drained", [3]float64{1, 2, 6}, [3]float64{1, 2, 3}, [3]int{})
	noSIGTERM := podAt(t0, "nosig", 0, nan, 4.9, "fallback", [3]float64{1, 2, 3}, [3]float64{1, 2, 3}, [3]int{})
	for _, c := range []struct {
		p    Pod
		want bool
	}{{ok, false}, {unknownRouteOut, false}, {lastAfter, true}, {lateRouteOut, true}, {noSIGTERM, true}, {Pod{}, false}} {
		if got := notable(c.p); got != c.want {
			t.Errorf("notable(%s) = %v, want %v", c.p.Name, got, c.want)
		}
	}
	if got := lateRouteOut.InRotationAtSIGTERM(); !slices.Equal(got, []string{"lb-3"}) {
		t.Errorf("InRotationAtSIGTERM = %q, want [lb-3]", got)
	}
	if got, want := podLine(noSIGTERM), "nosig (10.244.0.5): SIGTERM not seen; released by fallback"; got != want {
		t.Errorf("podLine = %q, want %q", got, want)
	}
	bare := Pod{Name: "bare", SIGTERM: t0, Release: "max-wait"}
	if got, want := podLine(bare), "bare: released by max-wait at ?; draining ?; no load balancer node seen"; got != want {
		t.Errorf("podLine = %q, want %q", got, want)
	}
	if got := podLine(unknownRouteOut); !strings.Contains(got, "route out lb-1=-4.0s lb-2=? lb-3=-2.0s") {
		t.Errorf("podLine = %q, want lb-2's route out as ?", got)
	}
}

func TestWriteJSONPods(t *testing.T) {
	var b bytes.Buffer
	if err := podsSample().WriteJSON(&b); err != nil {
		t.Fatal(err)
	}
	type node struct {
		LastRequest  *string `json:"last_request"`
		RouteOut     *string `json:"route_out"`
		AfterSIGTERM int     `json:"after_sigterm"`
	}
	var doc struct {
		Strategies []struct {
			Name           string
			RestartP50     *float64       `json:"restart_p50_s"`
			AfterSIGTERM   *int           `json:"after_sigterm"`
			GateELBv2Calls map[string]int `json:"gate_elbv2_calls"`
			Pods           []map[string]json.RawMessage
		}
	}
	if err := json.Unmarshal(b.Bytes(), &doc); err != nil {
		t.Fatal(err)
	}
	none, gate := doc.Strategies[0], doc.Strategies[2]
	if none.RestartP50 != nil || gate.RestartP50 == nil || *gate.RestartP50 != 14 {
		t.Errorf("restart_p50_s: none %v, draingate %v; want null and 14", none.RestartP50, gate.RestartP50)
	}
	if none.AfterSIGTERM == nil || *none.AfterSIGTERM != 360 || gate.AfterSIGTERM == nil || *gate.AfterSIGTERM != 2 {
		t.Errorf("after_sigterm: none %v, draingate %v; want 360 and 2", none.AfterSIGTERM, gate.AfterSIGTERM)
	}
	if len(none.GateELBv2Calls) != 0 || gate.GateELBv2Calls["DescribeTargetHealth"] != 72 {
		t.Errorf("gate_elbv2_calls: none %v, draingate %v", none.GateELBv2Calls, gate.GateELBv2Calls)
	}
	if len(gate.Pods) != 6 {
		t.Fatalf("%d draingate pods, want 6", len(gate.Pods))
	}
	late := gate.Pods[4]
	want := map[string]string{
		"name": `"demo-7c9f8d5b6-ekxqe"`, "ip": `"10.244.0.20"`, "release": `"deadline"`,
		"draining": `"2026-07-01T14:00:52Z"`, "sigterm": `"2026-07-01T14:01:17.1Z"`,
		"released_at": `"2026-07-01T14:01:17Z"`, "deleted": `"2026-07-01T14:00:51.9Z"`,
		"failed_probe": "null", "restarted": "null", "after_sigterm": "2",
		"sources": "{}",
	}
	for k, v := range want {
		if got := string(late[k]); got != v {
			t.Errorf("pod %s = %s, want %s", k, got, v)
		}
	}
	var nodes map[string]node
	if err := json.Unmarshal(late["nodes"], &nodes); err != nil {
		t.Fatal(err)
	}
	if n := nodes["lb-3"]; len(nodes) != 3 || n.AfterSIGTERM != 2 || n.RouteOut == nil || *n.RouteOut != "2026-07-01T14:01:18.1Z" {
		t.Errorf("nodes = %+v", nodes)
	}
	if got := string(none.Pods[0]["release"]); got != "null" {
		t.Errorf("release without an agent = %s, want null", got)
	}
	// Zero node times are null; a pod without nodes has {}.
	var b2 bytes.Buffer
	r := Report{Strategies: []Strategy{{Name: "x", Pods: []Pod{{Name: "a", Nodes: map[string]PodNode{"lb-1": {}}}, {Name: "b"}}}}}
	if err := r.WriteJSON(&b2); err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{`"last_request": null`, `"route_out": null`, `"nodes": {}`, `"sigterm": null`, `"after_sigterm": 0`} {
		if !strings.Contains(b2.String(), s) {
			t.Errorf("JSON lacks %s:\n%s", s, b2.String())
		}
	}
}

func decodePNG(t *testing.T, path string) (w, h int) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatalf("%s: not a PNG: %v", path, err)
	}
	return img.Bounds().Dx(), img.Bounds().Dy()
}

func TestWritePNGPods(t *testing.T) {
	dir := t.TempDir()
	r := podsSample()
	path := filepath.Join(dir, "pods.png")
	if err := r.WritePNG(path); err != nil {
		t.Fatal(err)
	}
	w, h := decodePNG(t, path)
	for i := range r.Strategies {
		r.Strategies[i].Pods = nil
	}
	if err := r.WritePNG(filepath.Join(dir, "nopods.png")); err != nil {
		t.Fatal(err)
	}
	w0, h0 := decodePNG(t, filepath.Join(dir, "nopods.png"))
	// 18 rows of 3 nodes must get real room: at least 20 px each.
	if w != w0 || w < 600 || h < h0+18*20 || h > 4000 {
		t.Errorf("with pods %dx%d, without %dx%d", w, h, w0, h0)
	}
	if out := os.Getenv("REPORT_PODS_PNG_OUT"); out != "" { // to look at it
		data, _ := os.ReadFile(path)
		os.WriteFile(out, data, 0o644)
	}
}

func TestWritePNGPodsEdgeCases(t *testing.T) {
	dir := t.TempDir()
	t0 := time.Date(2026, 7, 1, 12, 0, 0, 0, time.UTC)
	tl := Timeline{Start: t0, End: t0.Add(20 * time.Second)}
	odd := Strategy{Name: "odd", Timeline: tl, Pods: []Pod{
		{}, // nothing seen, no name
		{Name: "no-nodes", SIGTERM: t0.Add(3 * time.Second), Release: "drained"}, // ReleasedAt unseen
		{Name: "one-node", Nodes: map[string]PodNode{"lb-2": {LastRequest: t0.Add(30 * time.Second)}}},
		{Name: "zero-node", Nodes: map[string]PodNode{"lb-1": {}}},
	}}
	// A pod's mark past End widens the shared axis.
	if lo, hi := xRange([]Strategy{odd}); lo != 0 || hi != 30 {
		t.Errorf("xRange = %v, %v; want 0, 30", lo, hi)
	}
	noStart := Strategy{Name: "no-start", Pods: podsSample().Strategies[2].Pods}
	for name, r := range map[string]Report{
		"odd":      {Strategies: []Strategy{odd}},
		"no-start": {Strategies: []Strategy{noStart}},
		"mixed":    {Strategies: []Strategy{{Name: "empty"}, odd, {Name: "empty too"}}},
		"long":     {Strategies: []Strategy{{Name: "long", Timeline: tl, Pods: []Pod{{Name: strings.Repeat("x", 300)}}}}},
	} {
		path := filepath.Join(dir, name+".png")
		if err := r.WritePNG(path); err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if w, h := decodePNG(t, path); w < 600 || h < 200 {
			t.Errorf("%s: %dx%d", name, w, h)
		}
	}
	if got := shortName(strings.Repeat("x", 300) + "-abcde"); len([]rune(got)) != 28 || !strings.HasSuffix(got, "-abcde") {
		t.Errorf("shortName = %q", got)
	}
}

func TestPodLegendWraps(t *testing.T) {
	var nodes []string
	for i := range 12 {
		nodes = append(nodes, fmt.Sprintf("lb-%d", i+1))
	}
	width := pngWidth - 2*pngMargin
	l := newPodLegend(nodes, width)
	if l.line[len(l.line)-1] == 0 {
		t.Error("12 nodes fit on one line")
	}
	for i, it := range l.items {
		if l.x[i]+l.sty.Width(it.text) > width {
			t.Errorf("item %q overflows: at %v of %v", it.text, l.x[i], width)
		}
	}
	if got := (podLegend{}).height(); got != 0 {
		t.Errorf("empty legend height %v", got)
	}
}
