package gate

import (
	"math/rand/v2"
	"testing"
	"time"

	"draingate.dev/draingate/api"
	"draingate.dev/draingate/internal/evidence"
	et "draingate.dev/draingate/internal/evidence/evidencetest"
)

// How the gate uses the evidence (internal/evidence judges it; its own
// tests measure the judgement).

// report is what the agent reports of the streams at `at`, received then.
func report(at time.Time, ss ...et.Stream) *Traffic {
	return &Traffic{Summary: et.Summary(at, nil, ss...), At: at}
}

// tgOut is a target group route whose owner took the pod out, on port 8080,
// the sources seen taken for all its senders.
func tgOut(tail time.Duration) Observation {
	return Observation{Kind: "targetgroup", Name: "tg", Synced: true, Out: true, State: "draining",
		What: "the target is draining", Tail: tail, TailName: "ALB", WeighTraffic: true, Ports: []uint16{8080}, EarlyClose: true,
		Senders: evidence.Senders{SeenAreAll: true}}
}

// steady is a load balancer node's round robin to the pod (7/s) until stop,
// as this agent, watching from 20 s before t0 (long enough for the span
// rule at the default ε), reports it: sampled every 100 ms, its looks and
// gaps counted.
func steady(rng *rand.Rand, stop time.Time) et.Stream {
	return steadyFrom(rng, t0.Add(-20*time.Second), stop)
}

// steadyFrom is steady as an agent watching from watch reports it.
func steadyFrom(rng *rand.Rand, watch, stop time.Time) et.Stream {
	s := et.Regular(rng, "10.0.0.1", 7, 0.3, t0.Add(-time.Minute), stop)
	return et.Models[len(et.Models)-1].Sample(et.From(s, watch), watch)
}

// TestEvidenceNeverClosesARouteStillIn: a quiet pod whose owner still
// routes to it is not released.
func TestEvidenceNeverClosesARouteStillIn(t *testing.T) {
	rng := rand.New(rand.NewPCG(13, 14))
	s := et.Poisson(rng, "10.0.0.1", 5, t0, t0.Add(2*time.Second))
	o := tgOut(20 * time.Second)
	o.Out, o.State = false, "healthy"
	now := t0.Add(time.Minute)
	if a := Assess(now, o, RouteMemory{}, et.At(now, 0, nil, s)); a.Phase != PhaseIn {
		t.Errorf("phase %s, want in: %s", a.Phase, a.Route.Detail)
	}
}

// TestStaleEvidenceWaitsForTheAgent: quiet is known only up to the
// evidence's time; the route stays open, with QuietBy in the past, until a
// fresh report; NextChange wakes the server at QuietBy.
func TestStaleEvidenceWaitsForTheAgent(t *testing.T) {
	const tail = 20 * time.Second
	rng := rand.New(rand.NewPCG(15, 16))
	// Watched long enough against its bound (the span rule) to close.
	outSince := t0.Add(10 * time.Second)
	s := steady(rng, outSince)
	reported := et.Last(s).Add(100 * time.Millisecond)
	p := Pod{Name: "p", Terminating: true, Traffic: report(reported, s)}
	mem := Memory{TerminatingSince: t0, Routes: map[RouteKey]RouteMemory{{"targetgroup", "tg"}: {OutSince: outSince}}}
	v, _ := Step(reported, p, mem, []Observation{tgOut(tail)})
	if v.Released || v.Routes[0].QuietBy == nil {
		t.Fatalf("released %v, quiet by %v: %s", v.Released, v.Routes[0].QuietBy, v.Message)
	}
	quietBy := *v.Routes[0].QuietBy
	want := quietBy
	if a := v.Routes[0].AskBy; a != nil && a.Before(want) {
		want = *a
	}
	if next := NextChange(reported, p, v); !next.Equal(want) {
		t.Errorf("NextChange = %v, want the earlier of QuietBy %v and AskBy %v", next, quietBy, v.Routes[0].AskBy)
	}
	v, _ = Step(quietBy.Add(time.Second), p, mem, []Observation{tgOut(tail)})
	if v.Released {
		t.Fatalf("released on stale evidence: %s", v.Message)
	}
	p.Traffic = report(quietBy.Add(time.Second), s)
	v, _ = Step(quietBy.Add(time.Second), p, mem, []Observation{tgOut(tail)})
	if !v.Released || v.Routes[0].ClosedBy != api.ClosedByTraffic {
		t.Errorf("fresh quiet evidence: released %v, closed by %q: %s", v.Released, v.Routes[0].ClosedBy, v.Message)
	}
}

// TestHeldEvidenceIsAskedAgain: the agent's first ask comes before its
// sources sent enough to fit, and the server holds that evidence through
// the long-poll: by it the route closes only at the tail's end. AskBy, an
// evidence.Refresh after the evidence arrived, is the verdict's next change,
// and the evidence the agent then brings (every source fitted and quiet)
// closes the route before the tail's end.
func TestHeldEvidenceIsAskedAgain(t *testing.T) {
	const tail = 20 * time.Second
	rng := rand.New(rand.NewPCG(17, 18))
	outSince := t0.Add(200 * time.Millisecond)
	// Watched from t0: at the first ask, a moment; at the last, long
	// enough against its bound for the span rule at the default ε.
	s := steadyFrom(rng, t0, outSince.Add(14*time.Second))
	first := t0.Add(300 * time.Millisecond)
	p := Pod{Name: "p", Terminating: true, Traffic: report(first, s)}
	mem := Memory{TerminatingSince: t0, Routes: map[RouteKey]RouteMemory{{"targetgroup", "tg"}: {OutSince: outSince}}}
	v, _ := Step(first, p, mem, []Observation{tgOut(tail)})
	r := v.Routes[0]
	if v.Released || r.QuietBy == nil || !r.QuietBy.Equal(outSince.Add(tail)) || r.AskBy == nil {
		t.Fatalf("on the first ask's evidence: released %v, quiet by %v (want the tail's end), ask by %v: %s", v.Released, r.QuietBy, r.AskBy, r.Detail)
	}
	if want := first.Add(evidence.Refresh); !r.AskBy.Equal(want) || !NextChange(first, p, v).Equal(want) {
		t.Errorf("AskBy %v, next change %v; want both %v", r.AskBy, NextChange(first, p, v), want)
	}
	// The server's timer then: the same evidence, AskBy passed (the wait
	// API answers the long-poll), the route still open.
	v, _ = Step(first.Add(evidence.Refresh), p, mem, []Observation{tgOut(tail)})
	if r := v.Routes[0]; v.Released || r.AskBy == nil || r.AskBy.After(first.Add(evidence.Refresh)) {
		t.Errorf("at AskBy on the same evidence: released %v, ask by %v: %s", v.Released, r.AskBy, v.Message)
	}
	later := outSince.Add(17 * time.Second)
	p.Traffic = report(later, s)
	v, _ = Step(later, p, mem, []Observation{tgOut(tail)})
	if !v.Released || v.Routes[0].ClosedBy != api.ClosedByTraffic || v.Routes[0].AskBy != nil {
		t.Errorf("newer evidence, every source fitted and quiet: released %v, closed by %q, ask by %v: %s", v.Released, v.Routes[0].ClosedBy, v.Routes[0].AskBy, v.Message)
	}
}

// TestEmptyEarlyEvidenceWaitsForAReport: the agent's first ask comes
// before it saw any traffic; at the tail's end the route waits for a
// report from then on (QuietBy, which wakes the agent) instead of closing
// on that empty first one, and a fresh report with traffic still arriving
// keeps it open.
func TestEmptyEarlyEvidenceWaitsForAReport(t *testing.T) {
	const tail = 5 * time.Second
	outSince := t0.Add(time.Second)
	end := outSince.Add(tail)
	empty := &evidence.Evidence{At: t0}
	a := Assess(end.Add(time.Second), tgOut(tail), RouteMemory{OutSince: outSince}, empty)
	if a.Phase != PhaseOut || a.Route.QuietBy == nil || !a.Route.QuietBy.Equal(end) {
		t.Fatalf("stale empty evidence after the tail: phase %s, quiet by %v: %s", a.Phase, a.Route.QuietBy, a.Route.Detail)
	}
	rng := rand.New(rand.NewPCG(17, 18))
	s := et.Poisson(rng, "10.0.0.1", 5, t0, end.Add(10*time.Second))
	if a := Assess(end.Add(time.Second), tgOut(tail), RouteMemory{OutSince: outSince}, et.At(end.Add(time.Second), 0, nil, s)); a.Phase == PhaseClosed {
		t.Errorf("closed while the source still sends past the tail: %s", a.Route.Detail)
	}
	if a := Assess(end.Add(time.Second), tgOut(tail), RouteMemory{OutSince: outSince}, &evidence.Evidence{At: end.Add(time.Second)}); a.Phase != PhaseClosed || a.Route.ClosedBy != api.ClosedByTail {
		t.Errorf("fresh empty evidence after the tail: phase %s by %q: %s", a.Phase, a.Route.ClosedBy, a.Route.Detail)
	}
}

// TestPortsOutliveTheListing: once a target group's listing drops the
// pod's target (its deregistration delay ended), the observation has no
// ports; the memory keeps them, and the evidence still weighs.
func TestPortsOutliveTheListing(t *testing.T) {
	const tail = 5 * time.Second
	rng := rand.New(rand.NewPCG(19, 20))
	outSince := t0.Add(time.Second)
	s := et.Poisson(rng, "10.0.0.1", 5, t0, outSince.Add(3*tail))
	now := outSince.Add(2 * tail)
	p := Pod{Name: "p", Terminating: true, Traffic: report(now, s)}
	_, mem := Step(outSince, p, Memory{}, []Observation{tgOut(tail)})
	absent := tgOut(tail)
	absent.Ports, absent.State = nil, "absent"
	v, _ := Step(now, p, mem, []Observation{absent})
	if v.Released || v.Routes[0].QuietBy == nil {
		t.Errorf("a source still sending past the tail, target no longer listed: released %v, quiet by %v: %s", v.Released, v.Routes[0].QuietBy, v.Message)
	}
}

// TestUnknownPortsWeighEveryPort: a target group route first observed
// after its target left the listing has no ports; every remote source
// counts then (which can only lengthen a wait).
func TestUnknownPortsWeighEveryPort(t *testing.T) {
	const tail = 5 * time.Second
	rng := rand.New(rand.NewPCG(21, 22))
	outSince := t0.Add(time.Second)
	s := et.Poisson(rng, "10.0.0.1", 5, t0, outSince.Add(3*tail))
	s.Port = 9999
	now := outSince.Add(2 * tail)
	o := tgOut(tail)
	o.Ports = nil
	if a := Assess(now, o, RouteMemory{OutSince: outSince}, et.At(now, 0, nil, s)); a.Phase == PhaseClosed {
		t.Errorf("closed with a source still sending on an unknown port: %s", a.Route.Detail)
	}
	o.WeighTraffic = false
	if a := Assess(now, o, RouteMemory{OutSince: outSince}, et.At(now, 0, nil, s)); a.Phase != PhaseClosed {
		t.Errorf("a route that weighs no traffic did not close at its tail: %s", a.Route.Detail)
	}
}

// TestMissingEvidenceHoldsARoute: evidence held a route open past its
// tail (a source still sending); the agent's next report is missing (an
// ask without a summary: a CPU-starved agent, a watch that ended). The
// route does not close at once on the tail that has passed: it stays open
// a tail after the last arrival the evidence saw, then closes.
func TestMissingEvidenceHoldsARoute(t *testing.T) {
	const tail = 10 * time.Second
	rng := rand.New(rand.NewPCG(23, 24))
	outSince := t0.Add(time.Second)
	s := et.Poisson(rng, "10.0.0.1", 5, t0, outSince.Add(tail+5*time.Second))
	last := et.Last(s)
	now := outSince.Add(tail + 5*time.Second)
	p := Pod{Name: "p", Terminating: true, Traffic: report(now, s)}
	_, mem := Step(outSince, Pod{Name: "p", Terminating: true}, Memory{}, []Observation{tgOut(tail)})
	v, mem := Step(now, p, mem, []Observation{tgOut(tail)})
	if v.Released {
		t.Fatalf("released while a source still sends past the tail: %s", v.Message)
	}
	p.Traffic = nil
	v, mem = Step(now.Add(100*time.Millisecond), p, mem, []Observation{tgOut(tail)})
	r := v.Routes[0]
	if v.Released || r.QuietBy == nil || !r.QuietBy.Equal(last.Add(tail)) {
		t.Fatalf("evidence missing: released %v, quiet by %v (want a tail after the last arrival, %v): %s", v.Released, r.QuietBy, last.Add(tail), r.Detail)
	}
	if next := NextChange(now, p, v); !next.Equal(last.Add(tail)) {
		t.Errorf("next change %v, want %v", next, last.Add(tail))
	}
	v, _ = Step(last.Add(tail), p, mem, []Observation{tgOut(tail)})
	if !v.Released || v.Routes[0].ClosedBy != api.ClosedByTraffic {
		t.Errorf("a tail after the last arrival: released %v, closed by %q: %s", v.Released, v.Routes[0].ClosedBy, v.Message)
	}
}

// TestSamplesAreRemembered: each step that judges a route on evidence
// keeps what it judged of each source's stop in the route's memory, for
// the server to learn from: the closing step's too.
func TestSamplesAreRemembered(t *testing.T) {
	rng := rand.New(rand.NewPCG(21, 22))
	out := t0.Add(time.Second)
	s := steady(rng, out.Add(3*time.Second))
	pod := Pod{Name: "p", Namespace: "ns", UID: "u", Terminating: true}
	var mem Memory
	var v api.Verdict
	for now := out; now.Before(out.Add(time.Minute)) && !v.Released; now = now.Add(200 * time.Millisecond) {
		pod.Traffic = report(now, s)
		v, mem = Step(now, pod, mem, []Observation{tgOut(time.Minute)})
		m := mem.Routes[RouteKey{"targetgroup", "tg"}]
		if len(m.Samples) != 1 || m.Samples[0].Last.After(now) || !v.Released && !m.Samples[0].Sending {
			t.Fatalf("at %v: samples %+v, want the source's, sending by then", now, m.Samples)
		}
	}
	m := mem.Routes[RouteKey{"targetgroup", "tg"}]
	if !v.Released || v.Routes[0].ClosedBy != api.ClosedByTraffic {
		t.Fatalf("not closed by traffic: %s", v.Message)
	}
	if last := et.Last(s); !m.Samples[0].Last.Equal(last) || !m.Samples[0].Stop.After(last) || m.Samples[0].Sending {
		t.Errorf("at the close: %+v, want quiet, its stop after its last arrival %v", m.Samples[0], last)
	}
}
