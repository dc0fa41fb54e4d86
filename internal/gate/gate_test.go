package gate

import (
	"errors"
	"strings"
	"testing"
	"time"

	"draingate.dev/draingate/api"
)

// The fake clock: plain time values around t0, when the pod got its
// deletionTimestamp.
var (
	t0       = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	deadline = t0.Add(10 * time.Minute)
	tails    = DefaultTails()
	errThrot = errors.New("Throttling: Rate exceeded")
)

func pod() Pod {
	return Pod{Namespace: "shop", Name: "web-0", UID: "uid-1", Terminating: true, TerminatingSince: t0, Deadline: deadline}
}

// tg is a synced ALB target group route whose target was registered.
func tg(state, reason string, outSince time.Time) RouteObservation {
	return RouteObservation{
		Kind: KindTargetGroup, Name: "arn:aws:elasticloadbalancing:eu-west-1:1:targetgroup/web/1",
		Synced: true, LoadBalancer: LoadBalancerApplication, State: state, Reason: reason,
		WasRegistered: true, OutSince: outSince,
	}
}

// slice is a synced EndpointSlice route listing the pod's endpoint.
func slice(name string, ready, serving, terminating bool, outSince time.Time) RouteObservation {
	return RouteObservation{
		Kind: KindEndpointSlice, Name: "shop/" + name, Synced: true,
		Present: true, Ready: ready, Serving: serving, Terminating: terminating, OutSince: outSince,
	}
}

func gone(name string, outSince time.Time) RouteObservation {
	o := slice(name, false, false, false, outSince)
	o.Present = false
	return o
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

// TestTargetStates has one case per DescribeTargetHealth state (docs/facts.md,
// "Target states"), judged well after the ALB tail would have passed.
func TestTargetStates(t *testing.T) {
	out := t0.Add(time.Second)
	now := out.Add(5 * time.Minute) // past the ALB tail, before the deadline
	cases := []struct {
		name          string
		state, reason string
		registered    bool
		phase         Phase
		wantState     string
		released      bool
		reason2       api.Reason
		detail        string
	}{
		{"initial", TargetInitial, "Elb.RegistrationInProgress", true, PhaseIn, TargetInitial, false, "", "may send"},
		{"initial health checking", TargetInitial, "Elb.InitialHealthChecking", true, PhaseIn, TargetInitial, false, "", "InitialHealthChecking"},
		{"healthy", TargetHealthy, "", true, PhaseIn, TargetHealthy, false, "", "may send"},
		{"unhealthy", TargetUnhealthy, "Target.FailedHealthChecks", true, PhaseIn, TargetUnhealthy, false, "", "may send"},
		{"unhealthy.draining", TargetUnhealthyDraining, "", true, PhaseIn, TargetUnhealthyDraining, false, "", "NLB may still send"},
		{"unavailable", TargetUnavailable, "Elb.InternalError", true, PhaseIn, TargetUnavailable, false, "", "health checks are disabled"},
		{"unknown state", "sleeping", "", true, PhaseIn, "sleeping", false, "", "unknown to draingate"},
		{"healthy never expected is still a route", TargetHealthy, "", false, PhaseIn, TargetHealthy, false, "", "may send"},
		{"draining", TargetDraining, "Target.DeregistrationInProgress", true, PhaseClosed, StateClosed, true, api.ReasonDrained, "DeregistrationInProgress"},
		{"draining proves registration", TargetDraining, "Target.DeregistrationInProgress", false, PhaseClosed, StateClosed, true, api.ReasonDrained, "draining"},
		{"unused NotRegistered", TargetUnused, "Target.NotRegistered", true, PhaseClosed, StateClosed, true, api.ReasonDrained, "NotRegistered"},
		{"unused NotInUse", TargetUnused, "Target.NotInUse", true, PhaseClosed, StateClosed, true, api.ReasonDrained, "NotInUse"},
		{"unused InvalidState", TargetUnused, "Target.InvalidState", true, PhaseClosed, StateClosed, true, api.ReasonDrained, "InvalidState"},
		{"unused IpUnusable", TargetUnused, "Target.IpUnusable", true, PhaseClosed, StateClosed, true, api.ReasonDrained, "IpUnusable"},
		{"absent after registered", "", "", true, PhaseClosed, StateClosed, true, api.ReasonDrained, "absent from the full listing"},
		{"NotRegistered from the start", TargetUnused, "Target.NotRegistered", false, PhaseIgnored, StateIgnored, true, api.ReasonNoRoutes, "never registered"},
		{"absent from the start", "", "", false, PhaseIgnored, StateIgnored, true, api.ReasonNoRoutes, "never registered"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			o := tg(c.state, c.reason, out)
			o.WasRegistered = c.registered
			a := Assess(now, o, tails)
			if a.Phase != c.phase {
				t.Errorf("phase %q, want %q (%s)", a.Phase, c.phase, a.Route.Detail)
			}
			if a.Phase.Open() != (c.phase != PhaseClosed && c.phase != PhaseIgnored) {
				t.Errorf("Open() = %v", a.Phase.Open())
			}
			if !strings.Contains(a.Route.Detail, c.detail) {
				t.Errorf("detail %q lacks %q", a.Route.Detail, c.detail)
			}
			v := Decide(now, pod(), []RouteObservation{o}, tails)
			check(t, v, c.released, c.reason2, c.wantState)
			if c.phase == PhaseIgnored {
				if v.Routes[0].TailEnds != nil {
					t.Errorf("ignored route has a tail end")
				}
				if !strings.Contains(v.Message, "never registered") {
					t.Errorf("message %q does not say never registered", v.Message)
				}
			}
			if c.phase == PhaseIn && v.Routes[0].TailEnds != nil {
				t.Errorf("route still in has a tail end %v", v.Routes[0].TailEnds)
			}
		})
	}
}

func TestEndpointSliceStates(t *testing.T) {
	out := t0.Add(300 * time.Millisecond)
	now := out.Add(tails.EndpointSlice)
	fallback := slice("a", false, true, true, out)
	fallback.ServingFallback = true
	notServingFallback := slice("a", false, false, true, out)
	notServingFallback.ServingFallback = true
	cases := []struct {
		name  string
		o     RouteObservation
		phase Phase
		state string
	}{
		{"ready", slice("a", true, true, false, time.Time{}), PhaseIn, StateReady},
		{"terminating", slice("a", false, true, true, out), PhaseClosed, StateClosed},
		{"not ready", slice("a", false, false, false, out), PhaseClosed, StateClosed},
		{"gone", gone("a", out), PhaseClosed, StateClosed},
		{"serving terminating fallback", fallback, PhaseIn, StateTerminatingServing},
		{"fallback needs serving", notServingFallback, PhaseClosed, StateClosed},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			a := Assess(now, c.o, tails)
			if a.Phase != c.phase || a.Route.State != c.state {
				t.Errorf("phase %q state %q, want %q %q (%s)", a.Phase, a.Route.State, c.phase, c.state, a.Route.Detail)
			}
			if a.Route.Kind != "endpointslice" || a.Route.Name != "shop/a" {
				t.Errorf("route %v", a.Route)
			}
		})
	}
	// While the tail runs the route shows the owner's state.
	for _, c := range []struct {
		o     RouteObservation
		state string
	}{
		{slice("a", false, true, true, out), StateTerminating},
		{slice("a", false, false, false, out), StateNotReady},
		{gone("a", out), StateGone},
	} {
		a := Assess(out.Add(time.Second), c.o, tails)
		if a.Phase != PhaseOut || a.Route.State != c.state {
			t.Errorf("%s during tail: phase %q state %q", c.state, a.Phase, a.Route.State)
		}
	}
}

// TestErrorNeverReleasesEarly: with Err set (Throttling, an API error, a
// watch error) no route closes, at any time before the deadline.
func TestErrorNeverReleasesEarly(t *testing.T) {
	out := t0.Add(time.Second)
	withErr := func(o RouteObservation) RouteObservation { o.Err = errThrot; return o }
	cases := map[string][]RouteObservation{
		"target still healthy":          {withErr(tg(TargetHealthy, "", time.Time{}))},
		"target draining, tail passes":  {withErr(tg(TargetDraining, "Target.DeregistrationInProgress", out))},
		"target absent, tail passes":    {withErr(tg("", "", out))},
		"target out, OutSince unknown":  {withErr(tg(TargetDraining, "", time.Time{}))},
		"endpoint gone, tail passes":    {withErr(gone("a", out))},
		"endpoint terminating":          {withErr(slice("a", false, true, true, out))},
		"one of two routes errs":        {gone("a", out), withErr(tg(TargetDraining, "", out))},
		"error before the first sync":   {func() RouteObservation { o := withErr(tg(TargetDraining, "", out)); o.Synced = false; return o }()},
		"unknown kind with error":       {{Kind: "gatewayapi", Name: "x", Synced: true, Err: errThrot}},
		"never-synced slice with error": {func() RouteObservation { o := withErr(gone("a", out)); o.Synced = false; return o }()},
	}
	for name, routes := range cases {
		t.Run(name, func(t *testing.T) {
			for now := t0; now.Before(deadline); now = now.Add(7 * time.Second) {
				if v := Decide(now, pod(), routes, tails); v.Released {
					t.Fatalf("released at %v: %s", now.Sub(t0), v.Message)
				}
			}
			v := Decide(deadline.Add(-time.Nanosecond), pod(), routes, tails)
			check(t, v, false, "", states(v)...)
			// Errors lengthen waits up to the deadline, no further.
			v = Decide(deadline, pod(), routes, tails)
			if !v.Released || v.Reason != api.ReasonDeadline {
				t.Errorf("at the deadline: released=%v reason=%q", v.Released, v.Reason)
			}
		})
	}

	// Past the tail with an error: open, the owner's state and the tail end
	// shown, the error named; one good read closes it at once.
	o := withErr(tg(TargetDraining, "Target.DeregistrationInProgress", out))
	now := out.Add(time.Hour)
	a := Assess(now, o, tails)
	if a.Phase != PhaseOut || a.Route.State != TargetDraining || a.Route.TailEnds == nil ||
		!a.Route.TailEnds.Equal(out.Add(tails.ALB)) || !strings.Contains(a.Route.Detail, "Throttling") ||
		!strings.Contains(a.Route.Detail, "successful read") {
		t.Errorf("errored after tail: %+v", a)
	}
	o.Err = nil
	if a := Assess(now, o, tails); a.Phase != PhaseClosed {
		t.Errorf("good read after tail: %+v", a)
	}
}

func states(v api.Verdict) []string {
	s := make([]string, len(v.Routes))
	for i, r := range v.Routes {
		s[i] = r.State
	}
	return s
}

func TestNotSyncedNeverReleases(t *testing.T) {
	long := t0.Add(-time.Hour)
	for _, o := range []RouteObservation{tg(TargetDraining, "", long), tg("", "", long), gone("a", long)} {
		o.Synced = false
		o.WasRegistered = false // would be ignored if synced
		for _, now := range []time.Time{t0, t0.Add(5 * time.Minute), deadline.Add(-time.Nanosecond)} {
			v := Decide(now, pod(), []RouteObservation{o}, tails)
			check(t, v, false, "", StateNotSynced)
			if v.Routes[0].TailEnds != nil {
				t.Errorf("not synced route has a tail end")
			}
		}
	}
}

func TestTailBoundary(t *testing.T) {
	out := t0.Add(1500 * time.Millisecond)
	nlb := tg(TargetDraining, "", out)
	nlb.LoadBalancer = LoadBalancerNetwork
	for _, c := range []struct {
		name string
		o    RouteObservation
		tail time.Duration
	}{
		{"endpointslice", gone("a", out), tails.EndpointSlice},
		{"alb", tg(TargetDraining, "", out), tails.ALB},
		{"nlb", nlb, tails.NLB},
	} {
		t.Run(c.name, func(t *testing.T) {
			end := out.Add(c.tail)
			v := Decide(end.Add(-time.Nanosecond), pod(), []RouteObservation{c.o}, tails)
			check(t, v, false, "", v.Routes[0].State)
			if v.Routes[0].State == StateClosed {
				t.Errorf("closed 1ns before the tail end")
			}
			if te := v.Routes[0].TailEnds; te == nil || !te.Equal(end) || !v.Routes[0].Since.Equal(out) {
				t.Errorf("since %v tail ends %v, want %v %v", v.Routes[0].Since, te, out, end)
			}
			v = Decide(end, pod(), []RouteObservation{c.o}, tails)
			check(t, v, true, api.ReasonDrained, StateClosed)
			if te := v.Routes[0].TailEnds; te == nil || !te.Equal(end) || !v.Routes[0].Since.Equal(out) {
				t.Errorf("closed: since %v tail ends %v, want %v %v", v.Routes[0].Since, te, out, end)
			}
		})
	}
}

func TestNLBvsALBTails(t *testing.T) {
	out := t0.Add(2 * time.Second)
	obs := func(lb string) RouteObservation { o := tg(TargetDraining, "", out); o.LoadBalancer = lb; return o }
	routes := []RouteObservation{obs("application"), obs("network"), obs(""), obs("gateway")}
	v := Decide(out.Add(20*time.Second), pod(), routes, tails)
	check(t, v, false, "", StateClosed, TargetDraining, TargetDraining, TargetDraining)
	for i, want := range []time.Duration{20 * time.Second, 180 * time.Second, 180 * time.Second, 180 * time.Second} {
		if te := v.Routes[i].TailEnds; te == nil || te.Sub(out) != want {
			t.Errorf("route %d: tail ends %v, want out+%v", i, te, want)
		}
	}
	if !strings.Contains(v.Routes[3].Detail, `"gateway", unknown`) {
		t.Errorf("unknown type not explained: %q", v.Routes[3].Detail)
	}
	v = Decide(out.Add(180*time.Second), pod(), routes, tails)
	check(t, v, true, api.ReasonDrained, StateClosed, StateClosed, StateClosed, StateClosed)

	// Configured tails are used as given; negative counts as zero.
	custom := Tails{EndpointSlice: -time.Second, ALB: time.Second, NLB: 2 * time.Second}
	v = Decide(out, pod(), []RouteObservation{gone("a", out)}, custom)
	check(t, v, true, api.ReasonDrained, StateClosed)
	v = Decide(out.Add(time.Second), pod(), routes, custom)
	check(t, v, false, "", StateClosed, TargetDraining, TargetDraining, TargetDraining)
}

func TestDeadline(t *testing.T) {
	out := t0.Add(time.Second)
	nlb := tg(TargetDraining, "", out)
	nlb.LoadBalancer = LoadBalancerNetwork
	routes := []RouteObservation{gone("a", out), tg(TargetHealthy, "", time.Time{}), nlb}
	p := pod()
	p.Deadline = out.Add(time.Minute)

	v := Decide(p.Deadline.Add(-time.Nanosecond), p, routes, tails)
	check(t, v, false, "", StateClosed, TargetHealthy, TargetDraining)
	if !strings.Contains(v.Message, "waiting for 2 routes of 3") {
		t.Errorf("message %q", v.Message)
	}
	v = Decide(p.Deadline, p, routes, tails)
	check(t, v, true, api.ReasonDeadline, StateClosed, TargetHealthy, TargetDraining)
	if !strings.Contains(v.Message, "2 routes of 3 still open") || !strings.Contains(v.Message, "targetgroup/"+routes[1].Name+" healthy") ||
		strings.Contains(v.Message, "endpointslice/") {
		t.Errorf("deadline message does not list exactly the open routes: %q", v.Message)
	}

	// No deadline: never released while a route is open.
	p.Deadline = time.Time{}
	v = Decide(t0.Add(24*time.Hour), p, routes, tails)
	check(t, v, false, "", StateClosed, TargetHealthy, StateClosed)

	// Drained wins over deadline when both hold.
	p.Deadline = out
	v = Decide(out.Add(time.Hour), p, routes[:1], tails)
	check(t, v, true, api.ReasonDrained, StateClosed)
}

// TestMixedRoutes: two EndpointSlices and one target group; released only
// once all three are closed, whatever order they close in.
func TestMixedRoutes(t *testing.T) {
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	steps := []struct {
		now      time.Time
		routes   []RouteObservation
		released bool
		states   []string
	}{
		{at(0), []RouteObservation{slice("a", true, true, false, time.Time{}), slice("b", true, true, false, time.Time{}), tg(TargetHealthy, "", time.Time{})},
			false, []string{StateReady, StateReady, TargetHealthy}},
		{at(time.Second), []RouteObservation{slice("a", false, true, true, at(300*time.Millisecond)), gone("b", at(time.Second)), tg(TargetHealthy, "", time.Time{})},
			false, []string{StateTerminating, StateGone, TargetHealthy}},
		{at(7 * time.Second), []RouteObservation{slice("a", false, true, true, at(300*time.Millisecond)), gone("b", at(time.Second)), tg(TargetDraining, "", at(4*time.Second))},
			false, []string{StateClosed, StateClosed, TargetDraining}},
		{at(24 * time.Second), []RouteObservation{slice("a", false, true, true, at(300*time.Millisecond)), gone("b", at(time.Second)), tg(TargetDraining, "", at(4*time.Second))},
			true, []string{StateClosed, StateClosed, StateClosed}},
		// The target group closes first, a slice last.
		{at(24 * time.Second), []RouteObservation{slice("a", false, true, true, at(20*time.Second)), gone("b", at(time.Second)), tg("", "", at(time.Second))},
			false, []string{StateTerminating, StateClosed, StateClosed}},
		{at(25 * time.Second), []RouteObservation{slice("a", false, true, true, at(20*time.Second)), gone("b", at(time.Second)), tg("", "", at(time.Second))},
			true, []string{StateClosed, StateClosed, StateClosed}},
	}
	for i, s := range steps {
		v := Decide(s.now, pod(), s.routes, tails)
		reason := api.Reason("")
		if s.released {
			reason = api.ReasonDrained
		}
		t.Logf("step %d: %s", i, v.Message)
		check(t, v, s.released, reason, s.states...)
		if s.released && v.Message != "released: all 3 routes closed" {
			t.Errorf("step %d: message %q", i, v.Message)
		}
	}
}

func TestNotTerminating(t *testing.T) {
	p := pod()
	p.Terminating, p.TerminatingSince = false, time.Time{}
	p.Deadline = t0 // even past a deadline: the server decides
	v := Decide(t0.Add(time.Hour), p, []RouteObservation{gone("a", t0)}, tails)
	check(t, v, false, api.ReasonNotTerminating, StateClosed)
	if v.Waited != 0 || v.Pod != "web-0" || v.Namespace != "shop" || v.UID != "uid-1" {
		t.Errorf("verdict %+v", v)
	}
	v = Decide(t0, p, nil, tails)
	check(t, v, false, api.ReasonNotTerminating)
}

func TestNoRoutes(t *testing.T) {
	v := Decide(t0, pod(), nil, tails)
	check(t, v, true, api.ReasonNoRoutes)
	if !strings.Contains(v.Message, "no EndpointSlice lists the pod and no target group holds it") {
		t.Errorf("message %q", v.Message)
	}
	never := tg(TargetUnused, "Target.NotRegistered", t0)
	never.WasRegistered = false
	v = Decide(t0, pod(), []RouteObservation{never, never}, tails)
	check(t, v, true, api.ReasonNoRoutes, StateIgnored, StateIgnored)
	if !strings.Contains(v.Message, "2 target groups never registered it") {
		t.Errorf("message %q", v.Message)
	}
	// An ignored target group next to a real route does not hold the pod.
	v = Decide(t0.Add(10*time.Second), pod(), []RouteObservation{never, gone("a", t0)}, tails)
	check(t, v, true, api.ReasonDrained, StateIgnored, StateClosed)
	if v.Message != "released: its only route is closed" {
		t.Errorf("message %q", v.Message)
	}
}

func TestOutSinceNotRecorded(t *testing.T) {
	v := Decide(deadline.Add(-time.Nanosecond), pod(), []RouteObservation{tg(TargetDraining, "", time.Time{}), gone("a", time.Time{})}, tails)
	check(t, v, false, "", TargetDraining, StateGone)
	for _, r := range v.Routes {
		if r.TailEnds != nil || !strings.Contains(r.Detail, "not recorded") {
			t.Errorf("route %+v", r)
		}
	}
}

func TestUnknownKindStaysOpen(t *testing.T) {
	v := Decide(deadline.Add(-time.Nanosecond), pod(), []RouteObservation{{Kind: "httproute", Name: "x", Synced: true, Present: false, OutSince: t0}}, tails)
	check(t, v, false, "", StateUnknown)
}

func TestWaited(t *testing.T) {
	p := pod()
	if v := Decide(t0.Add(12500*time.Millisecond), p, nil, tails); time.Duration(v.Waited) != 12500*time.Millisecond {
		t.Errorf("waited %v", v.Waited)
	}
	if v := Decide(t0.Add(-time.Second), p, nil, tails); v.Waited != 0 {
		t.Errorf("clock behind: waited %v", v.Waited)
	}
	p.TerminatingSince = time.Time{}
	if v := Decide(t0, p, nil, tails); v.Waited != 0 {
		t.Errorf("unknown start: waited %v", v.Waited)
	}
}

func TestDecideIsPure(t *testing.T) {
	routes := []RouteObservation{slice("a", false, true, true, t0), tg(TargetDraining, "", t0)}
	before := append([]RouteObservation(nil), routes...)
	a := Decide(t0.Add(10*time.Second), pod(), routes, tails)
	b := Decide(t0.Add(10*time.Second), pod(), routes, tails)
	if a.Message != b.Message || len(a.Routes) != len(b.Routes) {
		t.Errorf("two calls differ: %q vs %q", a.Message, b.Message)
	}
	for i := range routes {
		if routes[i] != before[i] {
			t.Errorf("input %d modified", i)
		}
	}
}
