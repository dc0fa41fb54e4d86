package report

import (
	"fmt"
	"maps"
	"math"
	"regexp"
	"slices"
	"strings"
	"time"
)

// Strategy is one strategy's measurements.
type Strategy struct {
	Name             string
	Requests, Failed int
	// NoTarget is the part of Failed that load balancer nodes answered
	// themselves, with no target in their rotation (a node that learnt
	// the old targets' removal before the new ones'): no pod saw those
	// requests, whatever the strategy did.
	NoTarget int
	// InClusterRequests and InClusterFailed are the in-cluster client's
	// (--incluster-rps): requests through the Service's ClusterIP, not
	// counted in Requests and Failed.
	InClusterRequests, InClusterFailed int
	// Terminations are per pod: deletion seen → container exit.
	Terminations []time.Duration
	// Slacks are per pod: SIGTERM time − the time the data plane stopped
	// sending it new requests. Negative means SIGTERM came while the pod was
	// still in rotation, which is when requests fail.
	Slacks []time.Duration
	// Restarts are per restarted container (the restart workload): first
	// failed liveness probe → the lab saw the container restarted.
	Restarts []time.Duration
	// ELBv2Calls counts calls per action, whatever their result, from every
	// caller (the load balancer controller's and draingate's).
	ELBv2Calls map[string]int
	// GateELBv2Calls counts draingate's own calls per action (told apart by
	// their access key); empty for strategies without draingate.
	GateELBv2Calls map[string]int
	// Releases counts stopped pods by how their preStop agent let them go
	// ("drained", "deadline", "max-wait", "fallback", ...); empty without an
	// agent.
	Releases map[string]int
	// Chaos says what each injected fault did, when (seconds since the
	// run began); empty without one.
	Chaos []string `json:",omitempty"`
	// Pods are the pods that stopped (deleted, or restarted), one each.
	Pods     []Pod
	Timeline Timeline
	// Rollouts are the figures of each rollout, from its start to the
	// next one's (the last to the end of the load): FillRollouts.
	Rollouts []Rollout `json:",omitempty"`
}

// Rollout is one rollout's figures: the load's rate then (requests/s at
// full scale), the requests sent in its window and how many failed (by
// the second: a request is counted in the second it was sent), and the
// pods deleted in it: their termination p50, how their agents released
// them, what closed their target group routes, and how many routes took a
// learned tail.
type Rollout struct {
	Index, RPS int
	Start, End time.Time
	// PropagationMax is the rollout's propagation maximum, scaled, when
	// it has its own (--rollout-propagation-max).
	PropagationMax    time.Duration `json:",omitempty"`
	Requests, Failed  int
	TermP50           time.Duration
	Pods              int
	Releases          map[string]int `json:",omitempty"`
	ByTail, ByTraffic int
	// Learned counts the pods whose release said a tail was lengthened
	// (or shortened) by what was learnt; LearnedTail is the longest such
	// tail their releases named.
	Learned     int
	LearnedTail time.Duration `json:",omitempty"`
	// LagSized counts the pods admitted with a max-wait sized by the lag
	// learnt, MaxWait the longest of their max-waits.
	LagSized int
	MaxWait  time.Duration `json:",omitempty"`
	// AtItsPods counts the requests load balancer nodes sent this
	// rollout's stopped pods at or after their SIGTERM (they fail): what
	// its own pods lost, where Failed counts the requests sent in its
	// window, a previous rollout's late drains included.
	AtItsPods int
}

// FillRollouts fills each rollout's window and figures from the timeline
// and the pods; Rollouts must hold each one's Index, RPS and Start.
func (s *Strategy) FillRollouts() {
	buckets := s.Timeline.Buckets()
	for i := range s.Rollouts {
		ro := &s.Rollouts[i]
		ro.End = s.Timeline.End
		if i+1 < len(s.Rollouts) {
			ro.End = s.Rollouts[i+1].Start
		}
		from, to := int64(ro.Start.Sub(s.Timeline.Start)/time.Second), int64(ro.End.Sub(s.Timeline.Start)/time.Second)
		if i == 0 {
			from = -1 << 62 // the steady state before the first rollout counts with it
		}
		ro.Requests, ro.Failed = 0, 0
		for _, b := range buckets {
			if b.Second >= from && (b.Second < to || i == len(s.Rollouts)-1) {
				ro.Requests += b.Sent
				ro.Failed += b.Failed
			}
		}
		var terms []time.Duration
		for _, p := range s.Pods {
			if p.Deleted.IsZero() || p.Deleted.Before(ro.Start) || !p.Deleted.Before(ro.End) {
				continue
			}
			ro.Pods++
			if !p.Exit.IsZero() {
				terms = append(terms, p.Exit.Sub(p.Deleted))
			}
			if p.Release != "" {
				if ro.Releases == nil {
					ro.Releases = map[string]int{}
				}
				ro.Releases[p.Release]++
			}
			ro.ByTail += p.Closes.Tail
			ro.ByTraffic += p.Closes.Traffic
			ro.AtItsPods += p.AfterSIGTERM()
			if slices.ContainsFunc(p.AgentLines, func(l string) bool { return strings.Contains(l, "propagations learnt") }) {
				ro.Learned++
			}
			for _, l := range p.AgentLines {
				for _, m := range learnedTail.FindAllStringSubmatch(l, -1) {
					if d, err := time.ParseDuration(m[1]); err == nil {
						ro.LearnedTail = max(ro.LearnedTail, d)
					}
				}
			}
			if mw, why, ok := strings.Cut(p.MaxWaitSized, ": "); ok && strings.HasPrefix(why, "learnt") {
				ro.LagSized++
				if d, err := time.ParseDuration(mw); err == nil {
					ro.MaxWait = max(ro.MaxWait, d)
				}
			}
		}
		ro.TermP50, _ = pct(terms, 50)
	}
}

// learnedTail finds the tail a release line says was lengthened or
// shortened by what was learnt.
var learnedTail = regexp.MustCompile(`(?:lengthened|shortened) to ((?:[0-9.]+(?:ms|h|m|s))+)[ :,]`)

// RolloutLine says one rollout's figures in a sentence.
func (ro Rollout) RolloutLine() string {
	rel := make([]string, 0, len(ro.Releases))
	for _, k := range slices.Sorted(maps.Keys(ro.Releases)) {
		rel = append(rel, fmt.Sprintf("%s=%d", k, ro.Releases[k]))
	}
	prop := ""
	if ro.PropagationMax > 0 {
		prop = fmt.Sprintf(", propagation up to %s", ro.PropagationMax)
	}
	out := fmt.Sprintf("rollout %d (%d requests/s at full scale%s): %d failed of %d sent in its window; %d stopped pods, %d requests sent them after their SIGTERM, term p50 %.1fs",
		ro.Index, ro.RPS, prop, ro.Failed, ro.Requests, ro.Pods, ro.AtItsPods, ro.TermP50.Seconds())
	if len(rel) > 0 {
		out += "; released by " + strings.Join(rel, " ")
	}
	if ro.ByTail+ro.ByTraffic > 0 {
		out += fmt.Sprintf("; target group routes closed by traffic %d, by tail %d", ro.ByTraffic, ro.ByTail)
	}
	if ro.Learned > 0 {
		out += fmt.Sprintf("; %d of them released with a learned tail", ro.Learned)
		if ro.LearnedTail > 0 {
			out += fmt.Sprintf(" (up to %s)", ro.LearnedTail)
		}
	}
	if ro.LagSized > 0 {
		out += fmt.Sprintf("; %d admitted with a max-wait sized by the lag learnt (up to %s)", ro.LagSized, ro.MaxWait)
	}
	return out
}

// Pod is one stopped pod as the lab saw it. A zero time was not seen.
type Pod struct {
	Name, IP string
	// Deleted is when the lab saw the pod's deletion; zero for a pod that
	// was not deleted (a restarted container).
	Deleted time.Time
	// FailedProbe is the app's first failed liveness probe, Restarted when
	// the lab saw its container restarted (restart workload).
	FailedProbe, Restarted time.Time
	// SIGTERM and Exit are the app's own log lines.
	SIGTERM, Exit time.Time
	// Release is how the preStop agent let the pod go (as in
	// Strategy.Releases), ReleasedAt when the lab read that line; empty and
	// zero without an agent.
	Release    string
	ReleasedAt time.Time
	// Closes is what closed the pod's target group routes, as the gate's
	// release message said; AgentLines are the agent's own words on its
	// traffic evidence and its release, as it logged them.
	Closes     Closes
	AgentLines []string
	// Draining is when the control plane first put the pod's target to
	// draining (the controller's DeregisterTargets).
	Draining time.Time
	// Nodes are per load balancer node, by node name ("lb-1", ...).
	Nodes map[string]PodNode
	// Sources counts the requests the app received per source address, as
	// it logged them at exit (behind a sidecar, the sidecar's 127.0.0.1).
	Sources map[string]int
	// MaxWaitSized is the injection webhook's word on the pod's max-wait
	// when it is not the configured one ("2m20s: learnt: ..."); empty
	// otherwise.
	MaxWaitSized string `json:",omitempty"`
}

// Closes counts a pod's target group routes by what closed them, from the
// gate's release message: their tail, or the pod's traffic evidence (then
// with the longest quiet bound and the fitted sources' rates, "2.1-3.4/s").
type Closes struct {
	Tail, Traffic int
	// Early is the part of Traffic that closed before the tail's end (the
	// rest held past it, a source having sent late).
	Early int
	Bound time.Duration
	Rates string
	// Sources is the most sources a traffic close weighed; NodeArrivals the
	// node's own arrivals (probes) the gate saw and did not count; Unknown
	// the arrivals of unknown source (connections too short for the agent
	// to see) it did not count as a source.
	Sources, NodeArrivals, Unknown int
}

// EvidenceSummary is a strategy's route closes: "traffic 5, tail 1; quiet
// bound p50 7.1s (max 9.0s); rates 2.1-3.4/s, ...", or "" when no pod's
// release message named a target group route.
func (s Strategy) EvidenceSummary() string {
	tail, traffic, bounds, rates := s.closes()
	if tail+traffic == 0 {
		return ""
	}
	out := fmt.Sprintf("target group routes closed by traffic %d (%d before the tail's end), by tail %d", traffic, s.early(), tail)
	if p50, ok := pct(bounds, 50); ok {
		hi, _ := pct(bounds, 100)
		out += fmt.Sprintf("; quiet bound p50 %.1fs (max %.1fs); fitted rates per source %s", p50.Seconds(), hi.Seconds(), strings.Join(rates, ", "))
	}
	return out
}

// closes totals the pods' target group route closes by tail and by traffic,
// with the quiet bounds of the pods a traffic close released and their
// fitted rates (each distinct text once).
func (s Strategy) closes() (tail, traffic int, bounds []time.Duration, rates []string) {
	for _, p := range s.Pods {
		tail += p.Closes.Tail
		traffic += p.Closes.Traffic
		if p.Closes.Traffic > 0 && p.Closes.Bound > 0 {
			bounds = append(bounds, p.Closes.Bound)
			if !slices.Contains(rates, p.Closes.Rates) {
				rates = append(rates, p.Closes.Rates)
			}
		}
	}
	return tail, traffic, bounds, rates
}

// early counts the traffic closes before the tail's end.
func (s Strategy) early() (n int) {
	for _, p := range s.Pods {
		n += p.Closes.Early
	}
	return n
}

// PodNode is what one load balancer node did with one pod.
type PodNode struct {
	// LastRequest is when the node last picked the pod for a new request;
	// RouteOut when the node's view last took the pod out of rotation.
	LastRequest, RouteOut time.Time
	// AfterSIGTERM counts the requests this node sent the pod at or after
	// its SIGTERM, as the node recorded them: they fail unless the app
	// still accepts.
	AfterSIGTERM int
}

// Report is one lab run: a scenario played once per strategy.
type Report struct {
	Scenario                string
	TimeScale               float64
	Replicas, Rollouts, RPS int
	// Load says the load's shape, clients and spread, e.g. "constant" or
	// "onoff (on 1s, pareto pauses of mean 2s), 50 clients".
	Load       string
	Strategies []Strategy
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

// RestartP50 is the median restart time; false when no container was
// restarted.
func (s Strategy) RestartP50() (time.Duration, bool) { return pct(s.Restarts, 50) }

// AfterSIGTERM is the total of PodNode.AfterSIGTERM over every pod and
// node: requests that reached a pod at or after its SIGTERM. false when the
// strategy has no Pods (nothing was measured, which is not 0).
func (s Strategy) AfterSIGTERM() (int, bool) {
	if len(s.Pods) == 0 {
		return 0, false
	}
	n := 0
	for _, p := range s.Pods {
		n += p.AfterSIGTERM()
	}
	return n, true
}

// AfterSIGTERM is the total of the pod's PodNode.AfterSIGTERM over its
// nodes.
func (p Pod) AfterSIGTERM() int {
	n := 0
	for _, pn := range p.Nodes {
		n += pn.AfterSIGTERM
	}
	return n
}

// InRotationAtSIGTERM lists, sorted, the nodes that took the pod out of
// rotation only after its SIGTERM (a negative slack on that node). Nodes
// whose route-out was not seen are not listed: they are unknown, not late.
// Empty when SIGTERM was not seen.
func (p Pod) InRotationAtSIGTERM() []string {
	var out []string
	if p.SIGTERM.IsZero() {
		return nil
	}
	for _, name := range slices.Sorted(maps.Keys(p.Nodes)) {
		if ro := p.Nodes[name].RouteOut; !ro.IsZero() && ro.After(p.SIGTERM) {
			out = append(out, name)
		}
	}
	return out
}

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
