package drain

import (
	"math/rand/v2"
	"testing"
	"time"

	"draingate.dev/draingate/internal/gate"
)

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

func at(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }

var tg = gate.RouteKey{Kind: "targetgroup", Name: "arn:a"}

// TestUnionFirstOutWins: two replicas saw a route go out at different
// times; the record keeps the earlier, whichever wrote first, and a route
// seen back in since drops both.
func TestUnionFirstOutWins(t *testing.T) {
	a := Record{Pod: "shop/web", Since: at(2), Routes: []Route{{Kind: tg.Kind, Name: tg.Name, Outs: []time.Time{at(10)}, WasRoute: true}}}
	b := Record{Pod: "shop/web", Since: at(1), Routes: []Route{{Kind: tg.Kind, Name: tg.Name, Outs: []time.Time{at(12)}, Ports: []uint16{8080}}}}
	for _, u := range []Record{a.Union(b), b.Union(a)} {
		r := u.Routes[0]
		if !u.Since.Equal(at(1)) || !r.Out().Equal(at(10)) || !r.WasRoute || len(r.Ports) != 1 {
			t.Errorf("union %+v: want since 1 s, out at 10 s, seen in it, its ports", u)
		}
	}
	back := Record{Routes: []Route{{Kind: tg.Kind, Name: tg.Name, In: at(11)}}}
	if r := a.Union(b).Union(back).Routes[0]; !r.Out().Equal(at(12)) {
		t.Errorf("back in at 11 s: out %v, want 12 s (the only out after it)", r.Out())
	}
	if r := a.Union(back).Routes[0]; !r.Out().IsZero() {
		t.Errorf("back in at 11 s after out at 10 s: out %v, want none", r.Out())
	}
}

// TestUnionAgreesInAnyOrder: writes in any order, any grouping, any
// repetition, give the same record.
func TestUnionAgreesInAnyOrder(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	some := func() Record {
		r := Record{Pod: "shop/web", Since: at(rng.IntN(5))}
		for _, name := range []string{"a", "b"} {
			if rng.IntN(3) == 0 {
				continue
			}
			x := Route{Kind: "k", Name: name, WasRoute: rng.IntN(2) == 0}
			if rng.IntN(2) == 0 {
				x.Outs = []time.Time{at(rng.IntN(20))}
			}
			if rng.IntN(3) == 0 {
				x.In = at(rng.IntN(20))
			}
			if rng.IntN(3) == 0 {
				x.LastArrival = at(rng.IntN(40))
			}
			r.Routes = append(r.Routes, x)
		}
		return r
	}
	for range 2000 {
		x, y, z := some(), some(), some()
		if !equal(x.Union(y.Union(z)), x.Union(y).Union(z)) || !equal(x.Union(y), y.Union(x)) ||
			!equal(x.Union(x.Union(y)), x.Union(y)) {
			t.Fatalf("union of %+v, %+v, %+v depends on the order", x, y, z)
		}
		if u := x.Union(y); !u.Covers(x) || !u.Covers(y) {
			t.Fatalf("the union of %+v and %+v does not cover them", x, y)
		}
	}
}

// TestMergeStartsFromTheFirstObservation: a replica that saw the route go
// out later, or not yet, or was restarted (an empty memory), decides from
// the record's earlier observation, with the routes the record knows; a
// record that saw the route back in since drops the replica's own.
func TestMergeStartsFromTheFirstObservation(t *testing.T) {
	rec := Record{Since: at(1), Routes: []Route{{Kind: tg.Kind, Name: tg.Name, Outs: []time.Time{at(10)}, WasRoute: true, Ports: []uint16{8080}, LastArrival: at(40)}}}
	late := gate.Memory{TerminatingSince: at(3), Routes: map[gate.RouteKey]gate.RouteMemory{tg: {OutSince: at(14)}}}
	for name, mem := range map[string]gate.Memory{"later": late, "restarted": {}} {
		m := rec.Merge(mem)
		r := m.Routes[tg]
		if !m.TerminatingSince.Equal(at(1)) || !r.OutSince.Equal(at(10)) || !r.WasRoute || len(r.Ports) != 1 || !r.LastArrival.Equal(at(40)) {
			t.Errorf("%s: merged %+v, want since 1 s, out at 10 s, the route's ports and last arrival", name, m)
		}
	}
	back := Record{Routes: []Route{{Kind: tg.Kind, Name: tg.Name, In: at(20)}}}
	if r := back.Merge(late).Routes[tg]; !r.OutSince.IsZero() {
		t.Errorf("seen back in at 20 s after the replica's out at 14 s: out since %v, want none", r.OutSince)
	}
	if len(late.Routes) != 1 || !late.Routes[tg].OutSince.Equal(at(14)) {
		t.Errorf("Merge changed its argument: %+v", late)
	}
}

// TestOfRecordsWhatAStepAdds: a step records the pod's routes and when
// each went out; a route the gate had out and now sees in is recorded back
// in; a latest arrival only once it is past the route's tail.
func TestOfRecordsWhatAStepAdds(t *testing.T) {
	es := gate.RouteKey{Kind: "endpointslice", Name: "shop/web"}
	prev := gate.Memory{TerminatingSince: at(1), Routes: map[gate.RouteKey]gate.RouteMemory{
		tg: {OutSince: at(5), WasRoute: true}, es: {OutSince: at(2), WasRoute: true}}}
	next := gate.Memory{TerminatingSince: at(1), Routes: map[gate.RouteKey]gate.RouteMemory{
		tg: {WasRoute: true, LastArrival: at(30)}, es: {OutSince: at(2), WasRoute: true, LastArrival: at(30)}}}
	r := recordOf("shop/web", prev, next, at(40), map[gate.RouteKey]time.Duration{tg: 20 * time.Second, es: 20 * time.Second})
	byKey := map[gate.RouteKey]Route{}
	for _, x := range r.Routes {
		byKey[gate.RouteKey{Kind: x.Kind, Name: x.Name}] = x
	}
	if x := byKey[tg]; !x.In.Equal(at(40)) || !x.Out().IsZero() {
		t.Errorf("back in: %+v, want in at 40 s", x)
	}
	if x := byKey[es]; !x.Out().Equal(at(2)) || !x.In.IsZero() || !x.LastArrival.Equal(at(30)) {
		t.Errorf("still out, an arrival past its tail: %+v, want out at 2 s and the arrival kept", x)
	}
	next.Routes[es] = gate.RouteMemory{OutSince: at(2), WasRoute: true, LastArrival: at(15)}
	for _, x := range recordOf("shop/web", prev, next, at(40), map[gate.RouteKey]time.Duration{es: 20 * time.Second}).Routes {
		if x.Name == es.Name && !x.LastArrival.IsZero() {
			t.Errorf("an arrival within the tail recorded: %+v", x)
		}
	}
}
