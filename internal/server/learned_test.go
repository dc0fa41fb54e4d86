package server

import (
	"net/netip"
	"testing"
	"time"

	"draingate.dev/draingate/internal/evidence"
	"draingate.dev/draingate/internal/gate"
	"draingate.dev/draingate/internal/learn"
	"draingate.dev/draingate/internal/route"
	"draingate.dev/draingate/internal/route/targetgroup"
)

// What a closed route taught reaches the book once per route of a pod,
// under its kind's key, as each stop's delay after the route went out; a
// route still open, or closed with no trusted source, teaches nothing.
func TestClosedRoutesTeachOnce(t *testing.T) {
	out := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	s := &Server{book: learn.NewBook(), sources: []route.Source{targetgroup.New(targetgroup.Options{})}}
	p := newPods()
	var got []time.Duration
	p.learn = func(k gate.RouteKey, outSince time.Time, stops []evidence.Stop) {
		for _, st := range stops {
			got = append(got, st.At.Sub(outSince))
		}
		s.learnStops(k, outSince, stops)
	}
	tg := gate.RouteKey{Kind: "targetgroup", Name: "arn:tg"}
	es := gate.RouteKey{Kind: "endpointslice", Name: "ns/web"}
	stops := []evidence.Stop{{Addr: netip.MustParseAddr("10.0.0.1"), At: out.Add(4 * time.Second)}, {Addr: netip.MustParseAddr("10.0.0.2"), At: out.Add(9 * time.Second)}}
	st := &podState{}
	mem := gate.Memory{Routes: map[gate.RouteKey]gate.RouteMemory{
		tg: {OutSince: out, Stops: stops},
		es: {OutSince: out},
	}}
	p.learnedLocked(st, mem)
	p.learnedLocked(st, mem)
	if len(got) != 2 || got[0] != 4*time.Second || got[1] != 9*time.Second {
		t.Errorf("learnt %v, want 4s and 9s once", got)
	}
	// The target group kind keys a group by its load balancer, by the
	// group itself while that is not read.
	if l := s.book.Learned("tg:arn:tg"); l.N != 2 || l.Bound != 9*time.Second {
		t.Errorf("book: %v %+v, want the two stops under the group's key", s.book.Keys(), l)
	}
}
