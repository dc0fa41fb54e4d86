package report

import (
	"bytes"
	"encoding/json"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

func secs(vs ...float64) []time.Duration {
	var ds []time.Duration
	for _, v := range vs {
		ds = append(ds, time.Duration(v*float64(time.Second)))
	}
	return ds
}

func TestPercentileNearestRank(t *testing.T) {
	oneToTen := secs(7, 3, 10, 1, 5, 9, 2, 8, 4, 6) // unsorted on purpose
	hundred := make([]time.Duration, 100)
	for i := range hundred {
		hundred[i] = time.Duration(100-i) * time.Millisecond
	}
	cases := []struct {
		name string
		ds   []time.Duration
		p    float64
		want time.Duration
	}{
		{"p50 of 1..10", oneToTen, 50, 5 * time.Second},
		{"p25 rounds rank up", oneToTen, 25, 3 * time.Second},
		{"p90", oneToTen, 90, 9 * time.Second},
		{"p99 of 10 is the max", oneToTen, 99, 10 * time.Second},
		{"p0 is the min", oneToTen, 0, time.Second},
		{"p100 is the max", oneToTen, 100, 10 * time.Second},
		{"p above 100 clamps", oneToTen, 250, 10 * time.Second},
		{"p below 0 clamps", oneToTen, -5, time.Second},
		{"p99 of 100 is rank 99, not 100", hundred, 99, 99 * time.Millisecond},
		{"p1 of 100", hundred, 1, time.Millisecond},
		{"single sample", secs(4.2), 50, 4200 * time.Millisecond},
		{"negative values", secs(-3, 1, -1), 50, -time.Second},
		{"empty", nil, 50, 0},
	}
	for _, c := range cases {
		if got := Percentile(c.ds, c.p); got != c.want {
			t.Errorf("%s: Percentile(_, %v) = %v, want %v", c.name, c.p, got, c.want)
		}
	}
	if oneToTen[0] != 7*time.Second {
		t.Errorf("Percentile sorted its input in place: %v", oneToTen)
	}
}

func TestPercentileNaNPanics(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Error("Percentile(_, NaN) did not panic")
		}
	}()
	var zero float64
	Percentile(secs(1), zero/zero)
}

func TestFailureRate(t *testing.T) {
	for _, c := range []struct {
		req, failed int
		want        float64
	}{{0, 0, 0}, {200, 0, 0}, {200, 3, 0.015}, {4, 4, 1}} {
		s := Strategy{Requests: c.req, Failed: c.failed}
		if got := s.FailureRate(); got != c.want {
			t.Errorf("FailureRate(%d of %d) = %v, want %v", c.failed, c.req, got, c.want)
		}
	}
}

func TestSummaryFigures(t *testing.T) {
	s := Strategy{Terminations: secs(2, 1, 30), Slacks: secs(-4, 2, 6, 1)}
	check := func(name string, d time.Duration, ok bool, want time.Duration) {
		t.Helper()
		if !ok || d != want {
			t.Errorf("%s = %v, %v; want %v, true", name, d, ok, want)
		}
	}
	d, ok := s.TerminationP50()
	check("TerminationP50", d, ok, 2*time.Second)
	d, ok = s.TerminationP99()
	check("TerminationP99", d, ok, 30*time.Second)
	d, ok = s.SlackP50()
	check("SlackP50", d, ok, time.Second)
	d, ok = s.SlackMin()
	check("SlackMin", d, ok, -4*time.Second)

	var empty Strategy
	for name, f := range map[string]func() (time.Duration, bool){
		"TerminationP50": empty.TerminationP50, "TerminationP99": empty.TerminationP99,
		"SlackP50": empty.SlackP50, "SlackMin": empty.SlackMin,
	} {
		if d, ok := f(); ok || d != 0 {
			t.Errorf("%s with no sample = %v, %v; want 0, false", name, d, ok)
		}
	}
}

// sample is a two-strategy report; "none" has every figure, "sleep:30s" has
// no slack sample (so its slack figures must read as missing, not 0).
func sample() Report {
	t0 := time.Date(2026, 7, 1, 12, 0, 0, 0, time.UTC)
	none := Strategy{
		Name: "none", Requests: 6000, Failed: 42,
		Terminations: secs(1.04, 1.26, 0.97),
		Slacks:       secs(-12.35, -3.1, 0.4),
		ELBv2Calls:   map[string]int{"RegisterTargets": 6, "DescribeTargetHealth": 12, "DeregisterTargets": 6},
		Timeline:     timeline(t0, 60, []int{20, 35, 50}, 3),
	}
	sleep := Strategy{
		Name: "sleep:30s", Requests: 6000, Failed: 0,
		Terminations: secs(31.2, 31.44, 31.06),
		ELBv2Calls:   map[string]int{"DescribeTargetHealth": 14, "RegisterTargets": 6, "DeregisterTargets": 6},
		Releases:     map[string]int{"drained": 2, "max-wait": 1},
		Timeline:     timeline(t0.Add(time.Hour), 90, []int{20, 45, 70}, 0),
	}
	return Report{
		Scenario: "alb", TimeScale: 0.5, Replicas: 3, Rollouts: 1, RPS: 100, Load: "poisson, 50 clients",
		Strategies: []Strategy{none, sleep},
		Notes:      []string{"time-scale 0.5: every scenario duration halved"},
	}
}

// timeline fakes a run of n seconds at 100 requests/s with pods replaced one
// by one at the given seconds; failPerSIGTERM requests fail each second for
// 4 s after each SIGTERM.
func timeline(start time.Time, n int, sigterms []int, failPerSIGTERM int) Timeline {
	tl := Timeline{Start: start, End: start.Add(time.Duration(n) * time.Second)}
	tl.Rotation = append(tl.Rotation, Step{At: start, N: 3})
	for _, s := range sigterms {
		at := start.Add(time.Duration(s) * time.Second)
		tl.Rotation = append(tl.Rotation, Step{At: at.Add(-time.Second), N: 4}, Step{At: at.Add(3 * time.Second), N: 3})
		tl.SIGTERMs = append(tl.SIGTERMs, at)
	}
	for sec := range n {
		failing := 0
		for _, s := range sigterms {
			if sec >= s && sec < s+4 {
				failing = failPerSIGTERM
			}
		}
		for i := range 100 {
			tl.AddRequest(start.Add(time.Duration(sec)*time.Second+time.Duration(i)*10*time.Millisecond), i < failing)
		}
	}
	return tl
}

func TestWriteTable(t *testing.T) {
	var b bytes.Buffer
	if err := sample().WriteTable(&b); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	t.Log("\n" + out)
	for _, want := range []string{
		"scenario alb  replicas 3  rollouts 1  rps 100  load poisson, 50 clients  time scale 0.5",
		"failure %",
		"note: time-scale 0.5: every scenario duration halved",
		"DeregisterTargets=6 DescribeTargetHealth=12 RegisterTargets=6",
		"DeregisterTargets=6 DescribeTargetHealth=14 RegisterTargets=6",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q", want)
		}
	}
	rows := map[string][]string{}
	for line := range strings.Lines(out) {
		f := strings.Fields(line)
		if len(f) > 0 && (f[0] == "none" || f[0] == "sleep:30s") && rows[f[0]] == nil {
			rows[f[0]] = f // the table's row, not the ELBv2 line below
		}
	}
	// strategy requests failed failure% term-p50 term-p99 ...
	// ... restart-p50 slack-p50 slack-min after-SIGTERM released-by draingate-ELBv2
	wantNone := []string{"none", "6000", "42", "0.70", "1.0", "1.3", "-", "-3.1", "-12.3", "-", "-", "-"}
	wantSleep := []string{"sleep:30s", "6000", "0", "0.00", "31.2", "31.4", "-", "-", "-", "-", "drained=2", "max-wait=1", "-"}
	if got := rows["none"]; len(got) < len(wantNone) || !slices.Equal(got[:len(wantNone)], wantNone) {
		t.Errorf("none row = %q, want prefix %q", got, wantNone)
	}
	if got := rows["sleep:30s"]; len(got) < len(wantSleep) || !slices.Equal(got[:len(wantSleep)], wantSleep) {
		t.Errorf("sleep row = %q, want prefix %q", got, wantSleep)
	}
}

func TestWriteTableChaos(t *testing.T) {
	r := sample()
	r.Strategies[1].Chaos = []string{"rollout 1: at 12.0s: API server stopped"}
	var b bytes.Buffer
	if err := r.WriteTable(&b); err != nil {
		t.Fatal(err)
	}
	if want := "\nchaos (sleep:30s):\n  rollout 1: at 12.0s: API server stopped\n"; !strings.Contains(b.String(), want) {
		t.Errorf("table lacks %q:\n%s", want, b.String())
	}
	if strings.Count(b.String(), "chaos (") != 1 {
		t.Errorf("a chaos block for a strategy without faults:\n%s", b.String())
	}
	b.Reset()
	if err := r.WriteJSON(&b); err != nil {
		t.Fatal(err)
	}
	if want := `"chaos": [`; !strings.Contains(b.String(), want) || strings.Count(b.String(), want) != 1 {
		t.Errorf("JSON has %d %q, want 1", strings.Count(b.String(), want), want)
	}
	b.Reset()
	if err := (Scoreboard{Runs: []Report{r}}).WriteMarkdown(&b); err != nil {
		t.Fatal(err)
	}
	if want := "- alb: sleep:30s: chaos rollout 1: at 12.0s: API server stopped"; !strings.Contains(b.String(), want) {
		t.Errorf("scoreboard lacks %q:\n%s", want, b.String())
	}
}

func TestPercentNeverHidesFailures(t *testing.T) {
	for _, c := range []struct {
		failed, req int
		want        string
	}{{0, 0, "-"}, {0, 10, "0.00"}, {1, 1000000, "<0.01"}, {1, 200, "0.50"}, {3, 3, "100.00"}} {
		if got := percent(c.failed, c.req); got != c.want {
			t.Errorf("percent(%d, %d) = %q, want %q", c.failed, c.req, got, c.want)
		}
	}
}

func TestWriteJSON(t *testing.T) {
	var b bytes.Buffer
	if err := sample().WriteJSON(&b); err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(b.Bytes(), &doc); err != nil {
		t.Fatalf("%v\n%s", err, b.String())
	}
	top := []string{"load", "notes", "replicas", "rollouts", "rps", "scenario", "strategies", "time_scale"}
	if got := slices.Sorted(maps.Keys(doc)); !slices.Equal(got, top) {
		t.Errorf("top-level keys = %q, want %q", got, top)
	}
	if doc["scenario"] != "alb" || doc["time_scale"] != 0.5 || doc["replicas"] != 3.0 || doc["rollouts"] != 1.0 || doc["rps"] != 100.0 || doc["load"] != "poisson, 50 clients" {
		t.Errorf("top-level values wrong: %v", doc)
	}
	strategies, _ := doc["strategies"].([]any)
	if len(strategies) != 2 {
		t.Fatalf("strategies = %v", doc["strategies"])
	}
	keys := []string{"after_sigterm", "elbv2_calls", "failed", "failure_rate", "gate_elbv2_calls", "name",
		"no_target", "pods", "releases", "requests", "restart_p50_s", "slack_min_s", "slack_p50_s",
		"termination_p50_s", "termination_p99_s"}
	for _, e := range strategies {
		s := e.(map[string]any)
		if got := slices.Sorted(maps.Keys(s)); !slices.Equal(got, keys) {
			t.Errorf("strategy %v keys = %q, want exactly %q", s["name"], got, keys)
		}
	}

	none, sleep := strategies[0].(map[string]any), strategies[1].(map[string]any)
	for k, want := range map[string]any{
		"name": "none", "requests": 6000.0, "failed": 42.0, "failure_rate": 0.007,
		"termination_p50_s": 1.04, "termination_p99_s": 1.26, "slack_p50_s": -3.1, "slack_min_s": -12.35,
	} {
		if none[k] != want {
			t.Errorf("none %s = %v, want %v", k, none[k], want)
		}
	}
	calls := map[string]any{"DeregisterTargets": 6.0, "DescribeTargetHealth": 12.0, "RegisterTargets": 6.0}
	if got, _ := none["elbv2_calls"].(map[string]any); !maps.Equal(got, calls) {
		t.Errorf("none elbv2_calls = %v, want %v", none["elbv2_calls"], calls)
	}
	// Missing samples are null, present in the object, never 0.
	for _, k := range []string{"slack_p50_s", "slack_min_s"} {
		if v, present := sleep[k]; !present || v != nil {
			t.Errorf("sleep %s = %v (present %v), want null", k, v, present)
		}
	}
	if sleep["failure_rate"] != 0.0 {
		t.Errorf("sleep failure_rate = %v", sleep["failure_rate"])
	}
}

func TestWriteJSONEmpty(t *testing.T) {
	var b bytes.Buffer
	if err := (Report{Strategies: []Strategy{{Name: "none"}}}).WriteJSON(&b); err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Notes      []string
		Strategies []map[string]json.RawMessage
	}
	if err := json.Unmarshal(b.Bytes(), &doc); err != nil {
		t.Fatal(err)
	}
	s := doc.Strategies[0]
	for _, k := range []string{"termination_p50_s", "termination_p99_s", "restart_p50_s", "slack_p50_s", "slack_min_s", "after_sigterm"} {
		if string(s[k]) != "null" {
			t.Errorf("%s = %s, want null", k, s[k])
		}
	}
	if string(s["elbv2_calls"]) != "{}" || string(s["gate_elbv2_calls"]) != "{}" || string(s["failure_rate"]) != "0" {
		t.Errorf("elbv2_calls = %s, gate_elbv2_calls = %s, failure_rate = %s; want {}, {} and 0",
			s["elbv2_calls"], s["gate_elbv2_calls"], s["failure_rate"])
	}
	if string(s["pods"]) != "[]" {
		t.Errorf("pods = %s, want []", s["pods"])
	}
	if doc.Notes == nil || !strings.Contains(b.String(), `"notes": []`) {
		t.Errorf("notes should be [] not null:\n%s", b.String())
	}
}

func TestTimelineBuckets(t *testing.T) {
	t0 := time.Date(2026, 7, 1, 12, 0, 0, 0, time.UTC)
	tl := Timeline{Start: t0}
	add := func(d time.Duration, failed bool) { tl.AddRequest(t0.Add(d), failed) }
	add(0, false)
	add(999*time.Millisecond, true)
	add(time.Second, false)
	add(2500*time.Millisecond, true)
	add(2999999999, false)
	add(10*time.Second, false)
	add(-time.Nanosecond, true) // before Start: second -1, kept
	add(-time.Second, false)    // exactly -1 s: second -1 too
	add(-1001*time.Millisecond, false)

	want := []Bucket{
		{Second: -2, Sent: 1},
		{Second: -1, Sent: 2, Failed: 1},
		{Second: 0, Sent: 2, Failed: 1},
		{Second: 1, Sent: 1},
		{Second: 2, Sent: 2, Failed: 1},
		{Second: 10, Sent: 1},
	}
	if got := tl.Buckets(); !slices.Equal(got, want) {
		t.Errorf("Buckets() = %+v\nwant      %+v", got, want)
	}
	if got := (Timeline{}).Buckets(); len(got) != 0 {
		t.Errorf("zero Timeline has buckets %v", got)
	}
}

func TestTimelineZeroStartAdoptsFirstRequest(t *testing.T) {
	t0 := time.Date(2026, 7, 1, 12, 0, 0, 0, time.UTC)
	var tl Timeline
	tl.AddRequest(t0, false)
	tl.AddRequest(t0.Add(3*time.Second), false)
	if !tl.Start.Equal(t0) {
		t.Errorf("Start = %v, want %v", tl.Start, t0)
	}
	if got := tl.Buckets(); len(got) != 2 || got[1].Second != 3 {
		t.Errorf("Buckets() = %+v", got)
	}
}

func TestTimelineConcurrentAdds(t *testing.T) {
	t0 := time.Date(2026, 7, 1, 12, 0, 0, 0, time.UTC)
	tl := Timeline{Start: t0}
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 1000 {
				tl.AddRequest(t0.Add(time.Duration(i)*time.Millisecond), g == 0)
			}
		})
	}
	wg.Wait()
	b := tl.Buckets()
	if len(b) != 1 || b[0].Sent != 8000 || b[0].Failed != 1000 {
		t.Errorf("Buckets() = %+v, want one second with 8000 sent, 1000 failed", b)
	}
}

func TestEvidenceSummary(t *testing.T) {
	s := Strategy{Name: "draingate", Pods: []Pod{
		{Closes: Closes{Traffic: 1, Early: 1, Bound: 7 * time.Second, Rates: "2.8/s"}},
		{Closes: Closes{Traffic: 1, Bound: 9 * time.Second, Rates: "2.1-3.4/s"}},
		{Closes: Closes{Tail: 1}},
		{Closes: Closes{Traffic: 1}}, // held past the tail, no bound
		{},
	}}
	want := "target group routes closed by traffic 3 (1 before the tail's end), by tail 1; quiet bound p50 7.0s (max 9.0s); fitted rates per source 2.8/s, 2.1-3.4/s"
	if got := s.EvidenceSummary(); got != want {
		t.Errorf("EvidenceSummary = %q, want %q", got, want)
	}
	var b strings.Builder
	if err := (Report{Scenario: "alb", Strategies: []Strategy{{Name: "none"}, s}}).WriteTable(&b); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "traffic evidence (from the gate's release messages):\n  draingate: "+want+"\n") {
		t.Errorf("table lacks the evidence line:\n%s", b.String())
	}
	if (Strategy{Pods: []Pod{{}}}).EvidenceSummary() != "" {
		t.Error("a strategy without target group closes has a summary")
	}
}

// FillRollouts splits the requests and the stopped pods by rollout window:
// the first window also holds the steady state before it, the last runs to
// the end; a pod counts in the rollout in which it was deleted.
func TestFillRollouts(t *testing.T) {
	t0 := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	s := Strategy{Timeline: Timeline{Start: t0, End: t0.Add(40 * time.Second)}}
	for sec := range 40 {
		for i := range 10 {
			s.Timeline.AddRequest(t0.Add(time.Duration(sec)*time.Second+time.Duration(i)*time.Millisecond), sec == 25 && i < 2)
		}
	}
	pod := func(name string, deleted, exit time.Duration, release, line string, tail, traffic int) Pod {
		return Pod{Name: name, Deleted: t0.Add(deleted), Exit: t0.Add(exit), Release: release,
			Closes: Closes{Tail: tail, Traffic: traffic}, AgentLines: []string{line}}
	}
	s.Pods = []Pod{
		pod("a", 3*time.Second, 10*time.Second, "drained", "released: by traffic", 0, 1),
		pod("b", 5*time.Second, 14*time.Second, "drained", "released: by traffic", 0, 1),
		pod("c", 22*time.Second, 34*time.Second, "drained", "its ALB (8s, lengthened to 11.2s by the longest of 6 propagations learnt) tail (11.2s)", 1, 0),
	}
	s.Pods[2].Nodes = map[string]PodNode{"lb-1": {AfterSIGTERM: 2}, "lb-2": {AfterSIGTERM: 1}}
	s.Pods[1].MaxWaitSized = "1m6s: longer than the configured 36s by 30s, for the NLB tail"
	s.Pods[2].MaxWaitSized = "56s: learnt: target group arn took pods out up to 48s after their deletion"
	s.Rollouts = []Rollout{{Index: 1, RPS: 50, Start: t0.Add(2 * time.Second)}, {Index: 2, RPS: 3, Start: t0.Add(20 * time.Second)}}
	s.FillRollouts()
	one, two := s.Rollouts[0], s.Rollouts[1]
	if one.Requests != 200 || one.Failed != 0 || one.Pods != 2 || one.TermP50 < 7*time.Second || one.TermP50 > 9*time.Second || one.ByTraffic != 2 || one.Learned != 0 {
		t.Errorf("rollout 1: %+v", one)
	}
	if two.Requests != 200 || two.Failed != 2 || two.Pods != 1 || two.TermP50 != 12*time.Second || two.ByTail != 1 || two.Learned != 1 || two.Releases["drained"] != 1 {
		t.Errorf("rollout 2: %+v", two)
	}
	if one.LearnedTail != 0 || two.LearnedTail != 11200*time.Millisecond {
		t.Errorf("longest learned tail: %s, %s; want none, then 11.2s", one.LearnedTail, two.LearnedTail)
	}
	if one.AtItsPods != 0 || two.AtItsPods != 3 {
		t.Errorf("requests after SIGTERM at each rollout's pods: %d, %d; want 0, 3", one.AtItsPods, two.AtItsPods)
	}
	if one.LagSized != 0 || two.LagSized != 1 || two.MaxWait != 56*time.Second {
		t.Errorf("sized by the lag learnt: rollout 1 %d, rollout 2 %d up to %s; want 0, then 1 up to 56s", one.LagSized, two.LagSized, two.MaxWait)
	}
	if l := two.RolloutLine(); !strings.Contains(l, "2 failed of 200 sent in its window") || !strings.Contains(l, "3 requests sent them after their SIGTERM") || !strings.Contains(l, "1 of them released with a learned tail") ||
		!strings.Contains(l, "1 admitted with a max-wait sized by the lag learnt (up to 56s)") {
		t.Errorf("line: %s", l)
	}
}

// TestLearnedTailPhrases: the longest tail a rollout's releases named is
// read from each way the server words a learnt tail, a minute and more
// included.
func TestLearnedTailPhrases(t *testing.T) {
	for line, want := range map[string]time.Duration{
		"its ALB (20s, shortened to 4.6s by the 0.99-quantile's bound at 95 % of 412 propagations learnt) tail (4.6s)":        4600 * time.Millisecond,
		"its ALB (20s, shortened to 5.1s, the latest a node was seen sending (400 propagations learnt from 60 drains)) tail":  5100 * time.Millisecond,
		"its NLB (2m0s, lengthened to 2m12.5s: a node was seen sending that late (3 propagations learnt from 3 drains)) tail": 132500 * time.Millisecond,
	} {
		t0 := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
		s := Strategy{Timeline: Timeline{Start: t0, End: t0.Add(time.Minute)}, Rollouts: []Rollout{{Index: 1, Start: t0}}}
		s.Pods = []Pod{{Name: "a", Deleted: t0.Add(time.Second), Exit: t0.Add(9 * time.Second), Release: "drained", AgentLines: []string{line}}}
		s.FillRollouts()
		if ro := s.Rollouts[0]; ro.LearnedTail != want || ro.Learned != 1 {
			t.Errorf("%q: learned %d, longest %s; want 1, %s", line, ro.Learned, ro.LearnedTail, want)
		}
	}
}
