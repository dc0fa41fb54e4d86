package gate

import (
	"errors"
	"maps"
	"reflect"
	"strings"
	"testing"
	"time"

	"draingate.dev/draingate/api"
)

// The fake clock: plain time values around t0, when the pod got its
// deletionTimestamp. The kinds' own states are tested beside each source
// (internal/route/...); here observations are generic.
var (
	t0       = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	deadline = t0.Add(10 * time.Minute)
	errThrot = errors.New("Throttling: Rate exceeded")
)

func pod() Pod {
	return Pod{Namespace: "shop", Name: "web-0", UID: "uid-1", Terminating: true, Deadline: deadline}
}

// in and out are synced observations of route name whose owner keeps the
// pod in, or took it out, with the given tail.
func in(name string) Observation {
	return Observation{Kind: "k", Name: name, Synced: true, State: "serving", What: "the owner serves it", Tail: 20 * time.Second, TailName: "test"}
}

func out(name string, tail time.Duration) Observation {
	o := in(name)
	o.State, o.Out, o.What, o.Tail = "gone", true, "the owner dropped it", tail
	return o
}

func withErr(o Observation) Observation { o.Err = errThrot; return o }

// memory is a pod first seen terminating at t0 whose routes went out at
// the given times (zero: in).
func memory(outSince map[string]time.Time) Memory {
	m := Memory{TerminatingSince: t0, Routes: map[RouteKey]RouteMemory{}}
	for name, at := range outSince {
		m.Routes[RouteKey{"k", name}] = RouteMemory{OutSince: at}
	}
	return m
}

// check asserts the verdict's release, reason and the states of its routes.
func check(t *testing.T, v api.Verdict, released bool, reason api.Reason, states ...string) {
	t.Helper()
	if v.Released != released || v.Reason != reason {
		t.Errorf("released=%v reason=%q, want released=%v reason=%q (message %q)", v.Released, v.Reason, released, reason, v.Message)
	}
	if len(v.Routes) != len(states) {
		t.Fatalf("%d routes %v, want states %v", len(v.Routes), v.Routes, states)
	}
	for i, s := range states {
		if v.Routes[i].State != s {
			t.Errorf("route %d: state %q, want %q (detail %q)", i, v.Routes[i].State, s, v.Routes[i].Detail)
		}
		if v.Routes[i].Detail == "" {
			t.Errorf("route %d: no detail", i)
		}
	}
}

func states(v api.Verdict) []string {
	s := make([]string, len(v.Routes))
	for i, r := range v.Routes {
		s[i] = r.State
	}
	return s
}

// TestStepRemembersOutSince follows one route through a pod's life: the
// memory Step returns is what the next step gets.
func TestStepRemembersOutSince(t *testing.T) {
	tail := 20 * time.Second
	var m Memory
	step := func(now time.Time, o Observation) api.Verdict {
		var v api.Verdict
		v, m = Step(now, pod(), m, []Observation{o})
		return v
	}
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	outSince := func() time.Time { return m.Routes[RouteKey{"k", "a"}].OutSince }

	check(t, step(at(0), in("a")), false, "", "serving")
	if !m.TerminatingSince.Equal(t0) || !outSince().IsZero() {
		t.Fatalf("first step: memory %+v", m)
	}
	check(t, step(at(2*time.Second), out("a", tail)), false, "", "gone")
	if !outSince().Equal(at(2 * time.Second)) {
		t.Fatalf("out: OutSince %v", outSince())
	}
	// Kept while out, while the source errs and while it cannot say.
	step(at(5*time.Second), out("a", tail))
	step(at(6*time.Second), withErr(out("a", tail)))
	notSynced := out("a", tail)
	notSynced.Synced = false
	check(t, step(at(7*time.Second), notSynced), false, "", StateNotSynced)
	if !outSince().Equal(at(2 * time.Second)) {
		t.Fatalf("OutSince moved to %v", outSince())
	}
	// Back in clears it; out again starts the tail again.
	step(at(8*time.Second), in("a"))
	if !outSince().IsZero() {
		t.Fatalf("back in: OutSince %v", outSince())
	}
	step(at(9*time.Second), out("a", tail))
	check(t, step(at(9*time.Second+tail-time.Nanosecond), out("a", tail)), false, "", "gone")
	v := step(at(9*time.Second+tail), out("a", tail))
	check(t, v, true, api.ReasonDrained, StateClosed)
	if time.Duration(v.Waited) != 9*time.Second+tail || !m.TerminatingSince.Equal(t0) {
		t.Errorf("waited %v since %v", v.Waited, m.TerminatingSince)
	}
}

// TestErrorNeverReleasesEarly: with Err set (Throttling, an API error, a
// watch error) no route closes, at any time before the deadline.
func TestErrorNeverReleasesEarly(t *testing.T) {
	at := t0.Add(time.Second)
	notSynced := func(o Observation) Observation { o.Synced = false; return o }
	cases := map[string]struct {
		obs []Observation
		mem map[string]time.Time
	}{
		"still in":                    {[]Observation{withErr(in("a"))}, nil},
		"out, tail passes":            {[]Observation{withErr(out("a", 20*time.Second))}, map[string]time.Time{"a": at}},
		"out, first seen now":         {[]Observation{withErr(out("a", 0))}, nil},
		"one of two routes errs":      {[]Observation{out("a", 0), withErr(out("b", 0))}, map[string]time.Time{"a": at, "b": at}},
		"error before the first sync": {[]Observation{notSynced(withErr(out("a", 0)))}, map[string]time.Time{"a": at}},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			m := memory(c.mem)
			for now := t0; now.Before(deadline); now = now.Add(7 * time.Second) {
				if v, _ := Step(now, pod(), m, c.obs); v.Released {
					t.Fatalf("released at %v: %s", now.Sub(t0), v.Message)
				}
			}
			v, _ := Step(deadline.Add(-time.Nanosecond), pod(), m, c.obs)
			check(t, v, false, "", states(v)...)
			// Errors lengthen waits up to the deadline, no further.
			v, _ = Step(deadline, pod(), m, c.obs)
			if !v.Released || v.Reason != api.ReasonDeadline {
				t.Errorf("at the deadline: released=%v reason=%q", v.Released, v.Reason)
			}
		})
	}

	// Past the tail with an error: open, the owner's state and the tail end
	// shown, the error named; one good read closes it at once.
	o := withErr(out("a", 20*time.Second))
	now := at.Add(time.Hour)
	a := Assess(now, o, RouteMemory{OutSince: at}, nil)
	if a.Phase != PhaseOut || a.Route.State != "gone" || a.Route.TailEnds == nil ||
		!a.Route.TailEnds.Equal(at.Add(20*time.Second)) || !strings.Contains(a.Route.Detail, "Throttling") ||
		!strings.Contains(a.Route.Detail, "successful read") {
		t.Errorf("errored after tail: %+v", a)
	}
	o.Err = nil
	if a := Assess(now, o, RouteMemory{OutSince: at}, nil); a.Phase != PhaseClosed {
		t.Errorf("good read after tail: %+v", a)
	}
}

func TestNotSyncedNeverReleases(t *testing.T) {
	long := t0.Add(-time.Hour)
	for _, o := range []Observation{out("a", 0), func() Observation { o := out("a", 0); o.NotRoute = true; return o }()} {
		o.Synced = false
		for _, now := range []time.Time{t0, t0.Add(5 * time.Minute), deadline.Add(-time.Nanosecond)} {
			v, _ := Step(now, pod(), memory(map[string]time.Time{"a": long}), []Observation{o})
			check(t, v, false, "", StateNotSynced)
			if v.Routes[0].TailEnds != nil {
				t.Errorf("not synced route has a tail end")
			}
		}
	}
}

func TestTailBoundary(t *testing.T) {
	at := t0.Add(1500 * time.Millisecond)
	for _, tail := range []time.Duration{5 * time.Second, 20 * time.Second, 180 * time.Second} {
		end := at.Add(tail)
		m := memory(map[string]time.Time{"a": at})
		v, _ := Step(end.Add(-time.Nanosecond), pod(), m, []Observation{out("a", tail)})
		check(t, v, false, "", "gone")
		if te := v.Routes[0].TailEnds; te == nil || !te.Equal(end) || !v.Routes[0].Since.Equal(at) {
			t.Errorf("tail %v: since %v tail ends %v, want %v %v", tail, v.Routes[0].Since, te, at, end)
		}
		v, _ = Step(end, pod(), m, []Observation{out("a", tail)})
		check(t, v, true, api.ReasonDrained, StateClosed)
		if te := v.Routes[0].TailEnds; te == nil || !te.Equal(end) || !v.Routes[0].Since.Equal(at) {
			t.Errorf("tail %v closed: since %v tail ends %v, want %v %v", tail, v.Routes[0].Since, te, at, end)
		}
		if !strings.Contains(v.Routes[0].Detail, "test tail") {
			t.Errorf("detail does not name the tail: %q", v.Routes[0].Detail)
		}
	}
	// A zero or negative tail closes a route as soon as it is out.
	for _, tail := range []time.Duration{0, -time.Second} {
		v, _ := Step(at, pod(), Memory{}, []Observation{out("a", tail)})
		check(t, v, true, api.ReasonDrained, StateClosed)
	}
}

func TestDeadline(t *testing.T) {
	at := t0.Add(time.Second)
	obs := []Observation{out("a", 5*time.Second), in("b"), out("c", 180*time.Second)}
	m := memory(map[string]time.Time{"a": at, "c": at})
	p := pod()
	p.Deadline = at.Add(time.Minute)

	v, _ := Step(p.Deadline.Add(-time.Nanosecond), p, m, obs)
	check(t, v, false, "", StateClosed, "serving", "gone")
	if !strings.Contains(v.Message, "waiting for 2 routes of 3") {
		t.Errorf("message %q", v.Message)
	}
	v, _ = Step(p.Deadline, p, m, obs)
	check(t, v, true, api.ReasonDeadline, StateClosed, "serving", "gone")
	if !strings.Contains(v.Message, "2 routes of 3 still open") || !strings.Contains(v.Message, "k/b serving") ||
		strings.Contains(v.Message, "k/a") {
		t.Errorf("deadline message does not list exactly the open routes: %q", v.Message)
	}

	// No deadline: never released while a route is open.
	p.Deadline = time.Time{}
	v, _ = Step(t0.Add(24*time.Hour), p, m, obs)
	check(t, v, false, "", StateClosed, "serving", StateClosed)

	// Drained wins over deadline when both hold.
	p.Deadline = at
	v, _ = Step(at.Add(time.Hour), p, memory(map[string]time.Time{"a": at}), obs[:1])
	check(t, v, true, api.ReasonDrained, StateClosed)
}

// TestMixedRoutes: three routes with their own tails; released only once
// all three are closed, whatever order they close in, the memory carried
// from step to step.
func TestMixedRoutes(t *testing.T) {
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	steps := []struct {
		now      time.Time
		obs      []Observation
		released bool
		states   []string
	}{
		{at(0), []Observation{in("a"), in("b"), in("tg")}, false, []string{"serving", "serving", "serving"}},
		{at(time.Second), []Observation{out("a", 5*time.Second), out("b", 5*time.Second), in("tg")}, false, []string{"gone", "gone", "serving"}},
		{at(4 * time.Second), []Observation{out("a", 5*time.Second), out("b", 5*time.Second), out("tg", 20*time.Second)}, false, []string{"gone", "gone", "gone"}},
		{at(7 * time.Second), []Observation{out("a", 5*time.Second), out("b", 5*time.Second), out("tg", 20*time.Second)}, false, []string{StateClosed, StateClosed, "gone"}},
		// b comes back in (a new endpoint with the same address), the
		// target group closes first, then b.
		{at(10 * time.Second), []Observation{out("a", 5*time.Second), in("b"), out("tg", 20*time.Second)}, false, []string{StateClosed, "serving", "gone"}},
		{at(20 * time.Second), []Observation{out("a", 5*time.Second), out("b", 5*time.Second), out("tg", 20*time.Second)}, false, []string{StateClosed, "gone", "gone"}},
		{at(24 * time.Second), []Observation{out("a", 5*time.Second), out("b", 5*time.Second), out("tg", 20*time.Second)}, false, []string{StateClosed, "gone", StateClosed}},
		{at(25 * time.Second), []Observation{out("a", 5*time.Second), out("b", 5*time.Second), out("tg", 20*time.Second)}, true, []string{StateClosed, StateClosed, StateClosed}},
	}
	var m Memory
	for i, s := range steps {
		var v api.Verdict
		v, m = Step(s.now, pod(), m, s.obs)
		reason := api.Reason("")
		if s.released {
			reason = api.ReasonDrained
		}
		t.Logf("step %d: %s", i, v.Message)
		check(t, v, s.released, reason, s.states...)
		if s.released && !strings.HasPrefix(v.Message, "released: all 3 routes closed (") {
			t.Errorf("step %d: message %q", i, v.Message)
		}
	}
}

func TestNotTerminating(t *testing.T) {
	p := pod()
	p.Terminating = false
	p.Deadline = t0 // even past a deadline: the server decides
	prev := memory(map[string]time.Time{"a": t0})
	v, next := Step(t0.Add(time.Hour), p, prev, []Observation{out("a", 0)})
	check(t, v, false, api.ReasonNotTerminating)
	if v.Waited != 0 || v.Pod != "web-0" || v.Namespace != "shop" || v.UID != "uid-1" {
		t.Errorf("verdict %+v", v)
	}
	if !next.TerminatingSince.Equal(t0) || !reflect.DeepEqual(next.Routes, prev.Routes) {
		t.Errorf("memory changed: %+v", next)
	}
}

func TestNoRoutes(t *testing.T) {
	v, _ := Step(t0, pod(), Memory{}, nil)
	check(t, v, true, api.ReasonNoRoutes)
	if !strings.Contains(v.Message, "no route holds the pod") {
		t.Errorf("message %q", v.Message)
	}
	never := out("x", time.Hour)
	never.NotRoute, never.What = true, "never registered"
	never2 := never
	never2.Name = "y"
	v, m := Step(t0, pod(), Memory{}, []Observation{never, never2})
	check(t, v, true, api.ReasonNoRoutes, StateIgnored, StateIgnored)
	if !strings.Contains(v.Message, "2 routes never held it") || v.Routes[0].TailEnds != nil {
		t.Errorf("message %q, route %+v", v.Message, v.Routes[0])
	}
	if !m.Routes[RouteKey{"k", "x"}].OutSince.IsZero() {
		t.Errorf("an ignored route got an OutSince")
	}
	// An ignored route next to a real one does not hold the pod.
	v, _ = Step(t0.Add(10*time.Second), pod(), memory(map[string]time.Time{"a": t0}), []Observation{out("a", time.Second), never})
	check(t, v, true, api.ReasonDrained, StateClosed, StateIgnored)
	if v.Message != "released: its only route is closed (k/a by its test tail (1s))" {
		t.Errorf("message %q", v.Message)
	}
}

// TestRememberedRouteStaysOpen: a route the memory holds but no source
// reported keeps the pod, and stays remembered.
func TestRememberedRouteStaysOpen(t *testing.T) {
	m := memory(map[string]time.Time{"a": t0, "b": t0})
	v, next := Step(t0.Add(time.Minute), pod(), m, []Observation{out("a", 0)})
	check(t, v, false, "", StateClosed, StateNotObserved)
	if len(next.Routes) != 2 || !next.Routes[RouteKey{"k", "b"}].OutSince.Equal(t0) {
		t.Errorf("memory %+v", next)
	}
	if got := next.Known("k"); len(got) != 2 || got[0].Name != "a" || got[1].Name != "b" {
		t.Errorf("Known = %v", got)
	}
	if got := next.Known("other"); got != nil {
		t.Errorf("Known(other) = %v", got)
	}
}

func TestAssessOutSinceNotRecorded(t *testing.T) {
	a := Assess(deadline, out("a", time.Second), RouteMemory{}, nil)
	if a.Phase != PhaseOut || a.Route.TailEnds != nil || !strings.Contains(a.Route.Detail, "not recorded") {
		t.Errorf("%+v", a)
	}
}

func TestWaited(t *testing.T) {
	if v, _ := Step(t0.Add(12500*time.Millisecond), pod(), memory(nil), nil); time.Duration(v.Waited) != 12500*time.Millisecond {
		t.Errorf("waited %v", v.Waited)
	}
	if v, _ := Step(t0.Add(-time.Second), pod(), memory(nil), nil); v.Waited != 0 {
		t.Errorf("clock behind: waited %v", v.Waited)
	}
	if v, m := Step(t0, pod(), Memory{}, nil); v.Waited != 0 || !m.TerminatingSince.Equal(t0) {
		t.Errorf("first sight: waited %v since %v", v.Waited, m.TerminatingSince)
	}
}

func TestStepIsPure(t *testing.T) {
	obs := []Observation{out("a", 5*time.Second), out("b", 20*time.Second)}
	before := append([]Observation(nil), obs...)
	prev := memory(map[string]time.Time{"a": t0})
	prevRoutes := maps.Clone(prev.Routes)
	a, ma := Step(t0.Add(10*time.Second), pod(), prev, obs)
	b, mb := Step(t0.Add(10*time.Second), pod(), prev, obs)
	if a.Message != b.Message || len(a.Routes) != len(b.Routes) || !reflect.DeepEqual(ma.Routes, mb.Routes) {
		t.Errorf("two calls differ: %q vs %q", a.Message, b.Message)
	}
	for i := range obs {
		if !reflect.DeepEqual(obs[i], before[i]) {
			t.Errorf("input %d modified", i)
		}
	}
	if !reflect.DeepEqual(prev.Routes, prevRoutes) {
		t.Errorf("previous memory modified: %v", prev.Routes)
	}
}

func TestNextChange(t *testing.T) {
	at := t0.Add(time.Second)
	m := memory(map[string]time.Time{"a": at, "b": at})
	p := pod()
	v, _ := Step(at.Add(time.Second), p, m, []Observation{out("a", 5*time.Second), out("b", 20*time.Second)})
	if got := NextChange(at.Add(time.Second), p, v); !got.Equal(at.Add(5 * time.Second)) {
		t.Errorf("next = %v, want the first tail end", got)
	}
	v, _ = Step(at.Add(6*time.Second), p, m, []Observation{out("a", 5*time.Second), in("b")})
	if got := NextChange(at.Add(6*time.Second), p, v); !got.Equal(p.Deadline) {
		t.Errorf("next = %v, want the deadline", got)
	}
	v, _ = Step(at.Add(time.Hour), p, m, []Observation{out("a", 5*time.Second)})
	if got := NextChange(at.Add(time.Hour), p, v); !got.IsZero() {
		t.Errorf("released: next = %v, want none", got)
	}
}
