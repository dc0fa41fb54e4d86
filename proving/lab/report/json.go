package report

import (
	"encoding/json"
	"io"
	"maps"
	"time"
)

type jsonReport struct {
	Scenario   string         `json:"scenario"`
	TimeScale  float64        `json:"time_scale"`
	Replicas   int            `json:"replicas"`
	Rollouts   int            `json:"rollouts"`
	RPS        int            `json:"rps"`
	Load       string         `json:"load"`
	Strategies []jsonStrategy `json:"strategies"`
	Notes      []string       `json:"notes"`
}

// jsonStrategy's pointers are nil, hence null, when there is no sample, so
// that a missing figure is never read as 0 s.
type jsonStrategy struct {
	Name           string         `json:"name"`
	Requests       int            `json:"requests"`
	Failed         int            `json:"failed"`
	NoTarget       int            `json:"no_target"`
	FailureRate    float64        `json:"failure_rate"`
	TerminationP50 *float64       `json:"termination_p50_s"`
	TerminationP99 *float64       `json:"termination_p99_s"`
	RestartP50     *float64       `json:"restart_p50_s"`
	SlackP50       *float64       `json:"slack_p50_s"`
	SlackMin       *float64       `json:"slack_min_s"`
	AfterSIGTERM   *int           `json:"after_sigterm"`
	ELBv2Calls     map[string]int `json:"elbv2_calls"`
	GateELBv2Calls map[string]int `json:"gate_elbv2_calls"`
	Releases       map[string]int `json:"releases"`
	Evidence       string         `json:"evidence,omitempty"`
	// The in-cluster client's counts; absent without one.
	InClusterRequests int           `json:"incluster_requests,omitempty"`
	InClusterFailed   int           `json:"incluster_failed,omitempty"`
	Chaos             []string      `json:"chaos,omitempty"`
	Rollouts          []jsonRollout `json:"rollouts,omitempty"`
	Pods              []jsonPod     `json:"pods"`
}

// jsonRollout is one rollout's figures (Rollout).
type jsonRollout struct {
	Index       int            `json:"rollout"`
	RPS         int            `json:"rps"`
	Start       string         `json:"start"`
	Requests    int            `json:"requests"`
	Failed      int            `json:"failed"`
	Pods        int            `json:"stopped_pods"`
	TermP50     *float64       `json:"termination_p50_s"`
	Releases    map[string]int `json:"releases"`
	ByTail      int            `json:"routes_closed_by_tail"`
	ByTraffic   int            `json:"routes_closed_by_traffic"`
	Learned     int            `json:"pods_with_learned_tail"`
	LearnedTail *float64       `json:"longest_learned_tail_s,omitempty"`
	AtItsPods   int            `json:"after_sigterm_at_its_pods"`
	LagSized    int            `json:"pods_sized_by_learnt_lag"`
	MaxWait     *float64       `json:"longest_learnt_max_wait_s,omitempty"`
	PropMax     *float64       `json:"propagation_max_s,omitempty"`
}

// jsonPod's times are RFC 3339 strings, null when not seen.
type jsonPod struct {
	Name         string                 `json:"name"`
	IP           string                 `json:"ip"`
	Deleted      *string                `json:"deleted"`
	FailedProbe  *string                `json:"failed_probe"`
	Restarted    *string                `json:"restarted"`
	SIGTERM      *string                `json:"sigterm"`
	Exit         *string                `json:"exit"`
	Release      *string                `json:"release"`
	ReleasedAt   *string                `json:"released_at"`
	Draining     *string                `json:"draining"`
	AfterSIGTERM int                    `json:"after_sigterm"`
	Nodes        map[string]jsonPodNode `json:"nodes"`
	Sources      map[string]int         `json:"sources"`
	Closes       *jsonCloses            `json:"closes,omitempty"`
	AgentLines   []string               `json:"agent_lines,omitempty"`
	MaxWaitSized string                 `json:"max_wait_sized,omitempty"`
}

type jsonCloses struct {
	Tail    int     `json:"tail"`
	Traffic int     `json:"traffic"`
	BoundS  float64 `json:"quiet_bound_s"`
	Rates   string  `json:"rates,omitempty"`
	Unknown int     `json:"unknown_arrivals"`
}

type jsonPodNode struct {
	LastRequest  *string `json:"last_request"`
	RouteOut     *string `json:"route_out"`
	AfterSIGTERM int     `json:"after_sigterm"`
}

// WriteJSON writes the report as one indented JSON object:
//
//	{"scenario", "time_scale", "replicas", "rollouts", "rps",
//	 "strategies": [{"name", "requests", "failed", "no_target", "failure_rate",
//	   "termination_p50_s", "termination_p99_s", "restart_p50_s",
//	   "slack_p50_s", "slack_min_s", "after_sigterm",
//	   "elbv2_calls": {action: calls}, "gate_elbv2_calls": {action: calls},
//	   "releases": {reason: pods}, "chaos": [what each fault did],
//	   "rollouts": [{"rollout", "rps", "start", "requests", "failed",
//	     "stopped_pods", "termination_p50_s", "releases",
//	     "routes_closed_by_tail", "routes_closed_by_traffic",
//	     "pods_with_learned_tail", "longest_learned_tail_s",
//	     "after_sigterm_at_its_pods",
//	     "pods_sized_by_learnt_lag", "longest_learnt_max_wait_s"}] (with
//	     more than one rollout: Rollout),
//	   "pods": [{"name", "ip", "deleted", "failed_probe", "restarted",
//	     "sigterm", "exit", "release", "released_at", "draining",
//	     "after_sigterm", "max_wait_sized",
//	     "nodes": {node: {"last_request", "route_out", "after_sigterm"}},
//	     "sources": {address: requests}}]}],
//	 "notes": [...]}
//
// no_target is the part of failed that load balancer nodes answered with
// no target in their rotation. failure_rate is a fraction (0..1, 0 with no requests). Durations are
// seconds as floats, as measured (not rescaled by time_scale), and null when
// there is no sample. A strategy's after_sigterm is the total over its pods
// and nodes, null when it has no pods; a pod's is the total over its nodes.
// elbv2_calls counts every caller's calls, gate_elbv2_calls draingate's
// own. Pod times are RFC 3339 strings in UTC with nanoseconds, null when
// not seen; release is null without a preStop agent. Maps, pods and notes
// are never null, possibly empty.
func (r Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r.jsonReport())
}

func (r Report) jsonReport() jsonReport {
	out := jsonReport{
		Scenario: r.Scenario, TimeScale: r.TimeScale,
		Replicas: r.Replicas, Rollouts: r.Rollouts, RPS: r.RPS, Load: r.Load,
		Strategies: []jsonStrategy{},
		Notes:      append([]string{}, r.Notes...),
	}
	for _, s := range r.Strategies {
		js := jsonStrategy{
			Name: s.Name, Requests: s.Requests, Failed: s.Failed, NoTarget: s.NoTarget,
			FailureRate:       s.FailureRate(),
			ELBv2Calls:        copyCounts(s.ELBv2Calls),
			GateELBv2Calls:    copyCounts(s.GateELBv2Calls),
			Releases:          copyCounts(s.Releases),
			Evidence:          s.EvidenceSummary(),
			InClusterRequests: s.InClusterRequests, InClusterFailed: s.InClusterFailed,
			Chaos: append([]string(nil), s.Chaos...),
			Pods:  []jsonPod{},
		}
		js.TerminationP50 = secondsPtr(s.TerminationP50())
		js.TerminationP99 = secondsPtr(s.TerminationP99())
		js.RestartP50 = secondsPtr(s.RestartP50())
		js.SlackP50 = secondsPtr(s.SlackP50())
		js.SlackMin = secondsPtr(s.SlackMin())
		if n, ok := s.AfterSIGTERM(); ok {
			js.AfterSIGTERM = &n
		}
		for _, p := range s.Pods {
			js.Pods = append(js.Pods, podJSON(p))
		}
		for _, ro := range s.Rollouts {
			if len(s.Rollouts) < 2 {
				break
			}
			jr := jsonRollout{Index: ro.Index, RPS: ro.RPS, Start: ro.Start.UTC().Format(time.RFC3339Nano), Requests: ro.Requests, Failed: ro.Failed,
				Pods: ro.Pods, Releases: copyCounts(ro.Releases), ByTail: ro.ByTail, ByTraffic: ro.ByTraffic, Learned: ro.Learned,
				AtItsPods: ro.AtItsPods, LagSized: ro.LagSized}
			if ro.LagSized > 0 {
				jr.MaxWait = secondsPtr(ro.MaxWait, true)
			}
			if ro.LearnedTail > 0 {
				jr.LearnedTail = secondsPtr(ro.LearnedTail, true)
			}
			if ro.Pods > 0 {
				jr.TermP50 = secondsPtr(ro.TermP50, true)
			}
			if ro.PropagationMax > 0 {
				jr.PropMax = secondsPtr(ro.PropagationMax, true)
			}
			js.Rollouts = append(js.Rollouts, jr)
		}
		out.Strategies = append(out.Strategies, js)
	}
	return out
}

func podJSON(p Pod) jsonPod {
	jp := jsonPod{
		Name: p.Name, IP: p.IP,
		Deleted: timePtr(p.Deleted), FailedProbe: timePtr(p.FailedProbe), Restarted: timePtr(p.Restarted),
		SIGTERM: timePtr(p.SIGTERM), Exit: timePtr(p.Exit),
		ReleasedAt: timePtr(p.ReleasedAt), Draining: timePtr(p.Draining),
		AfterSIGTERM: p.AfterSIGTERM(),
		Nodes:        map[string]jsonPodNode{},
		Sources:      copyCounts(p.Sources),
	}
	jp.AgentLines, jp.MaxWaitSized = p.AgentLines, p.MaxWaitSized
	if c := p.Closes; c.Tail+c.Traffic > 0 {
		jp.Closes = &jsonCloses{Tail: c.Tail, Traffic: c.Traffic, BoundS: c.Bound.Seconds(), Rates: c.Rates, Unknown: c.Unknown}
	}
	if p.Release != "" {
		jp.Release = &p.Release
	}
	for name, pn := range p.Nodes {
		jp.Nodes[name] = jsonPodNode{
			LastRequest: timePtr(pn.LastRequest), RouteOut: timePtr(pn.RouteOut),
			AfterSIGTERM: pn.AfterSIGTERM,
		}
	}
	return jp
}

func copyCounts(m map[string]int) map[string]int {
	out := map[string]int{}
	maps.Copy(out, m)
	return out
}

func secondsPtr(d time.Duration, ok bool) *float64 {
	if !ok {
		return nil
	}
	v := d.Seconds()
	return &v
}

func timePtr(t time.Time) *string {
	if t.IsZero() {
		return nil
	}
	s := t.UTC().Format(time.RFC3339Nano)
	return &s
}
