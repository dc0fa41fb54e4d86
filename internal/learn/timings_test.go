package learn

import (
	"net/netip"
	"testing"
	"time"

	"draingate.dev/draingate/internal/drain"
	"draingate.dev/draingate/internal/evidence"
	"draingate.dev/draingate/internal/gate"
	"draingate.dev/draingate/internal/route"
	"draingate.dev/draingate/internal/route/targetgroup"
)

// What a closed route taught reaches the book once per route of a pod,
// under its kind's key, as each stop's delay after the route went out; a
// route still open, or closed with no trusted source, teaches nothing.
func TestClosedRoutesTeachOnce(t *testing.T) {
	out := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	tm := New(Options{Tails: true})
	tm.use([]route.Source{targetgroup.New(targetgroup.Options{})})
	tg := gate.RouteKey{Kind: "targetgroup", Name: "arn:tg"}
	es := gate.RouteKey{Kind: "endpointslice", Name: "ns/web"}
	stops := []evidence.Stop{{Addr: netip.MustParseAddr("10.0.0.1"), At: out.Add(4 * time.Second)}, {Addr: netip.MustParseAddr("10.0.0.2"), At: out.Add(9 * time.Second)}}
	mem := gate.Memory{Routes: map[gate.RouteKey]gate.RouteMemory{
		tg: {OutSince: out, Stops: stops},
		es: {OutSince: out},
	}}
	d := &drain.Decision{Key: route.PodKey{Namespace: "ns", Name: "web", UID: "u1"}, Next: mem}
	tm.Decided(d)
	tm.Decided(d)
	// The target group kind keys a group by its load balancer, by the
	// group itself while that is not read.
	if e := tm.book.Estimate("tg:arn:tg"); e.N != 2 || e.Bound != 9*time.Second {
		t.Errorf("book: %v %+v, want the two stops (4s, 9s) once, under the group's key", tm.book.Keys(), e)
	}
	if keys := tm.book.Keys(); len(keys) != 1 {
		t.Errorf("keys %v, want the target group's alone", keys)
	}
}
