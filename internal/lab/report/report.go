package report

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// Strategy is one strategy's measurements.
type Strategy struct {
	Name             string
	Requests, Failed int
	// Terminations are per pod: deletion seen → container exit.
	Terminations []time.Duration
	// Slacks are per pod: SIGTERM time − the time the data plane stopped
	// sending it new requests. Negative means SIGTERM came while the pod was
	// still in rotation, which is when requests fail.
	Slacks []time.Duration
	// ELBv2Calls counts calls per action, whatever their result.
	ELBv2Calls map[string]int
	// Releases counts deleted pods by how their preStop agent let them go
	// ("drained", "deadline", "max-wait", "fallback", ...); empty without an
	// agent.
	Releases map[string]int
	Timeline Timeline
}

// Report is one lab run: a scenario played once per strategy.
type Report struct {
	Scenario                string
	TimeScale               float64
	Replicas, Rollouts, RPS int
	Strategies              []Strategy
	// Notes are printed below the table and kept in JSON, e.g.
	// "time-scale 0.5: every scenario duration halved".
	Notes []string
}

// FailureRate is Failed/Requests as a fraction, 0 when there were no
// requests.
func (s Strategy) FailureRate() float64 {
	if s.Requests == 0 {
		return 0
	}
	return float64(s.Failed) / float64(s.Requests)
}

// TerminationP50 is the median termination time; false when no pod was
// measured.
func (s Strategy) TerminationP50() (time.Duration, bool) { return pct(s.Terminations, 50) }

// TerminationP99 is the 99th percentile termination time; false when no pod
// was measured.
func (s Strategy) TerminationP99() (time.Duration, bool) { return pct(s.Terminations, 99) }

// SlackP50 is the median slack; false when no pod was measured.
func (s Strategy) SlackP50() (time.Duration, bool) { return pct(s.Slacks, 50) }

// SlackMin is the worst (smallest) slack; false when no pod was measured.
func (s Strategy) SlackMin() (time.Duration, bool) { return pct(s.Slacks, 0) }

func pct(ds []time.Duration, p float64) (time.Duration, bool) {
	if len(ds) == 0 {
		return 0, false
	}
	return Percentile(ds, p), true
}

// Percentile returns the p-th percentile (p in percent) of ds by the
// nearest-rank method: on a sorted copy, the value at rank ⌈p/100·n⌉,
// counted from 1 and clamped to [1, n]. It always returns a measured value,
// never an interpolation, so p0 is the minimum and p100 the maximum; with
// few samples a high percentile is simply the maximum, which is the honest
// answer for a benchmark with a handful of pods. It returns 0 for an empty
// ds (callers that must tell "no sample" apart check the length) and panics
// on a NaN p. ds is not modified.
func Percentile(ds []time.Duration, p float64) time.Duration {
	if math.IsNaN(p) {
		panic("report: Percentile of NaN")
	}
	n := len(ds)
	if n == 0 {
		return 0
	}
	sorted := slices.Clone(ds)
	slices.Sort(sorted)
	// p*n before dividing keeps integral ranks exact (0.99*100 is not 99).
	rank := math.Ceil(p * float64(n) / 100)
	switch {
	case rank < 1:
		rank = 1
	case rank > float64(n):
		rank = float64(n)
	}
	return sorted[int(rank)-1]
}

// WriteTable writes a header line, an aligned table with one row per
// strategy, a short legend and the notes. Durations are in seconds with one
// decimal, as measured (not rescaled by the time scale); "-" marks a figure
// with no sample.
func (r Report) WriteTable(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "scenario %s  replicas %d  rollouts %d  rps %d  time scale %g\n\n",
		r.Scenario, r.Replicas, r.Rollouts, r.RPS, r.TimeScale)
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "strategy\trequests\tfailed\tfailure %\tterm p50 s\tterm p99 s\tslack p50 s\tslack min s\treleased by\tELBv2 calls")
	for _, s := range r.Strategies {
		tp50, ok50 := s.TerminationP50()
		tp99, ok99 := s.TerminationP99()
		sp50, okS := s.SlackP50()
		smin, okM := s.SlackMin()
		fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n",
			s.Name, s.Requests, s.Failed, percent(s.Failed, s.Requests),
			seconds(tp50, ok50), seconds(tp99, ok99), seconds(sp50, okS), seconds(smin, okM),
			counts(s.Releases), counts(s.ELBv2Calls))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	b.WriteString("\ntermination: pod deletion seen -> container exit. " +
		"slack: SIGTERM - data plane stopped sending the pod new requests (negative: SIGTERM while still in rotation). " +
		"released by: how each pod's preStop agent let it go (the gate's reason; max-wait: the agent's own deadline; fallback: no gate server answered).\n")
	for _, n := range r.Notes {
		fmt.Fprintf(&b, "note: %s\n", n)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// percent formats failed/requests in percent with two decimals, but never
// prints a nonzero rate as 0.00: a handful of failures is the finding.
func percent(failed, requests int) string {
	if requests == 0 {
		return "-"
	}
	v := 100 * float64(failed) / float64(requests)
	if failed > 0 && v < 0.005 {
		return "<0.01"
	}
	return fmt.Sprintf("%.2f", v)
}

func seconds(d time.Duration, ok bool) string {
	if !ok {
		return "-"
	}
	return fmt.Sprintf("%.1f", d.Seconds())
}

// counts lists key=count sorted by key, full names (ELBv2 actions share
// prefixes such as "Describe").
func counts(m map[string]int) string {
	if len(m) == 0 {
		return "-"
	}
	var parts []string
	for _, a := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, fmt.Sprintf("%s=%d", a, m[a]))
	}
	return strings.Join(parts, " ")
}

type jsonReport struct {
	Scenario   string         `json:"scenario"`
	TimeScale  float64        `json:"time_scale"`
	Replicas   int            `json:"replicas"`
	Rollouts   int            `json:"rollouts"`
	RPS        int            `json:"rps"`
	Strategies []jsonStrategy `json:"strategies"`
	Notes      []string       `json:"notes"`
}

// jsonStrategy's pointers are nil, hence null, when there is no sample, so
// that a missing figure is never read as 0 s.
type jsonStrategy struct {
	Name           string         `json:"name"`
	Requests       int            `json:"requests"`
	Failed         int            `json:"failed"`
	FailureRate    float64        `json:"failure_rate"`
	TerminationP50 *float64       `json:"termination_p50_s"`
	TerminationP99 *float64       `json:"termination_p99_s"`
	SlackP50       *float64       `json:"slack_p50_s"`
	SlackMin       *float64       `json:"slack_min_s"`
	ELBv2Calls     map[string]int `json:"elbv2_calls"`
	Releases       map[string]int `json:"releases"`
}

// WriteJSON writes the report as one indented JSON object:
//
//	{"scenario", "time_scale", "replicas", "rollouts", "rps",
//	 "strategies": [{"name", "requests", "failed", "failure_rate",
//	   "termination_p50_s", "termination_p99_s", "slack_p50_s",
//	   "slack_min_s", "elbv2_calls": {action: calls},
//	   "releases": {reason: pods}}],
//	 "notes": [...]}
//
// failure_rate is a fraction (0..1, 0 with no requests). Durations are
// seconds as floats, as measured (not rescaled by time_scale), and null when
// there is no sample. elbv2_calls, releases and notes are never null,
// possibly empty.
func (r Report) WriteJSON(w io.Writer) error {
	out := jsonReport{
		Scenario: r.Scenario, TimeScale: r.TimeScale,
		Replicas: r.Replicas, Rollouts: r.Rollouts, RPS: r.RPS,
		Strategies: []jsonStrategy{},
		Notes:      append([]string{}, r.Notes...),
	}
	for _, s := range r.Strategies {
		js := jsonStrategy{
			Name: s.Name, Requests: s.Requests, Failed: s.Failed,
			FailureRate: s.FailureRate(),
			ELBv2Calls:  map[string]int{},
			Releases:    map[string]int{},
		}
		maps.Copy(js.ELBv2Calls, s.ELBv2Calls)
		maps.Copy(js.Releases, s.Releases)
		js.TerminationP50 = secondsPtr(s.TerminationP50())
		js.TerminationP99 = secondsPtr(s.TerminationP99())
		js.SlackP50 = secondsPtr(s.SlackP50())
		js.SlackMin = secondsPtr(s.SlackMin())
		out.Strategies = append(out.Strategies, js)
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(out)
}

func secondsPtr(d time.Duration, ok bool) *float64 {
	if !ok {
		return nil
	}
	v := d.Seconds()
	return &v
}
