package drain

import (
	"cmp"
	"maps"
	"slices"
	"strings"
	"time"

	"draingate.dev/draingate/internal/gate"
)

// Record is the drain's own record, as the replicas share it (the shared
// memory stores it as it is: internal/ledger): what every replica knows
// of one terminating pod's routes, the union of their observations, in
// which the first observation of each route going out wins. Its JSON is
// what the Leases hold: keep it readable by the previous version.
type Record struct {
	// Pod is "namespace/name", for people reading the Lease.
	Pod string `json:"pod,omitempty"`
	// Since is when a replica first saw the pod terminating.
	Since time.Time `json:"since,omitzero"`
	// Routes are every route a replica remembered for the pod, sorted by
	// kind and name.
	Routes []Route `json:"routes,omitempty"`
}

// Route is one route of the pod as the replicas saw it.
type Route struct {
	Kind string `json:"kind"`
	Name string `json:"name"`
	// Outs are when replicas saw the owner take the pod out, after In
	// (earliest first): the earliest is when the route went out (a route
	// out, back in and out again counts from its last going out). At most
	// maxOuts are kept, the latest ones: dropping an early one can only
	// make the tail start later. Empty: not out (or not since In).
	Outs []time.Time `json:"outs,omitempty"`
	// In is when a replica last saw the owner take the pod back in after
	// it had been out.
	In time.Time `json:"in,omitzero"`
	// WasRoute: the pod was seen in this route (gate.RouteMemory).
	WasRoute bool `json:"route,omitempty"`
	// Ports are the route's ports as a replica last observed them.
	Ports []uint16 `json:"ports,omitempty"`
	// LastArrival is the latest arrival traffic evidence weighed for the
	// route, kept only once it is past the route's tail (only then does
	// it hold the route longer).
	LastArrival time.Time `json:"last,omitzero"`
}

// maxOuts bounds Route.Outs.
const maxOuts = 8

// Out is when the route went out, as far as the replicas saw (zero: not
// out).
func (r Route) Out() time.Time {
	if len(r.Outs) == 0 {
		return time.Time{}
	}
	return r.Outs[0]
}

// Union is what a and b say together: the earliest Since; per route the
// latest In, the outs after it, the latest arrival, whether any saw the
// pod in it, and ports if either has them (a's first). Union is
// commutative, associative and idempotent but for which ports it keeps,
// so replicas writing in any order agree on when each route went out.
func (a Record) Union(b Record) Record {
	out := Record{Pod: cmp.Or(a.Pod, b.Pod), Since: earliest(a.Since, b.Since)}
	byKey := map[gate.RouteKey]Route{}
	for _, r := range slices.Concat(a.Routes, b.Routes) {
		k := gate.RouteKey{Kind: r.Kind, Name: r.Name}
		m, ok := byKey[k]
		if !ok {
			m = Route{Kind: r.Kind, Name: r.Name}
		}
		m.In = latest(m.In, r.In)
		m.Outs = append(m.Outs, r.Outs...)
		m.WasRoute = m.WasRoute || r.WasRoute
		if len(m.Ports) == 0 {
			m.Ports = r.Ports
		}
		m.LastArrival = latest(m.LastArrival, r.LastArrival)
		byKey[k] = m
	}
	for _, k := range slices.SortedFunc(maps.Keys(byKey), compareKeys) {
		r := byKey[k]
		r.Outs = outsAfter(r.Outs, r.In)
		out.Routes = append(out.Routes, r)
	}
	return out
}

// outsAfter is outs after in (all when in is zero), sorted, without
// repeats, the latest maxOuts of them.
func outsAfter(outs []time.Time, in time.Time) []time.Time {
	var kept []time.Time
	for _, o := range outs {
		if !o.IsZero() && (in.IsZero() || o.After(in)) {
			kept = append(kept, o)
		}
	}
	slices.SortFunc(kept, func(a, b time.Time) int { return a.Compare(b) })
	kept = slices.CompactFunc(kept, func(a, b time.Time) bool { return a.Equal(b) })
	if len(kept) > maxOuts {
		kept = kept[len(kept)-maxOuts:]
	}
	return kept
}

// recordOf is what a step of the gate, from prev (the memory it was given)
// to next (the memory it returned) at now, adds to the record: the pod's
// Since, its routes with when they went out, and when one the gate had as
// out came back in. A route's latest arrival is kept only once it is past
// the route's tail (tails gives each route's tail), where it lengthens a
// wait without evidence.
func recordOf(pod string, prev, next gate.Memory, now time.Time, tails map[gate.RouteKey]time.Duration) Record {
	r := Record{Pod: pod, Since: next.TerminatingSince}
	for _, k := range slices.SortedFunc(maps.Keys(next.Routes), compareKeys) {
		m := next.Routes[k]
		route := Route{Kind: k.Kind, Name: k.Name, WasRoute: m.WasRoute, Ports: m.Ports}
		if !m.OutSince.IsZero() {
			route.Outs = []time.Time{m.OutSince}
		}
		if p, ok := prev.Routes[k]; ok && !p.OutSince.IsZero() && m.OutSince.IsZero() {
			route.In = now
		}
		if t, ok := tails[k]; ok && !m.OutSince.IsZero() && m.LastArrival.After(m.OutSince.Add(t)) {
			route.LastArrival = m.LastArrival
		}
		r.Routes = append(r.Routes, route)
	}
	return r
}

// Merge is mem with what the record adds, before the gate's next step:
// the earliest Since; every route the record has; per route whether the
// pod was in it, its ports if mem has none, the latest arrival; and when
// it went out: the record's if earlier, none if the record saw it back in
// since mem's.
func (r Record) Merge(mem gate.Memory) gate.Memory {
	out := gate.Memory{TerminatingSince: earliest(mem.TerminatingSince, r.Since), Routes: maps.Clone(mem.Routes)}
	if out.Routes == nil {
		out.Routes = map[gate.RouteKey]gate.RouteMemory{}
	}
	for _, rr := range r.Routes {
		k := gate.RouteKey{Kind: rr.Kind, Name: rr.Name}
		m := out.Routes[k]
		m.WasRoute = m.WasRoute || rr.WasRoute
		if len(m.Ports) == 0 {
			m.Ports = rr.Ports
		}
		m.LastArrival = latest(m.LastArrival, rr.LastArrival)
		m.OutSince = earliest(outAfter(m.OutSince, rr.In), outAfter(rr.Out(), rr.In))
		out.Routes[k] = m
	}
	return out
}

// Covers says whether r already holds everything o says (Union(r, o) is
// r): nothing to write.
func (r Record) Covers(o Record) bool {
	return equal(r.Union(o), r.Union(Record{}))
}

// PodName is the pod the record is of, "namespace/name".
func (r Record) PodName() string { return r.Pod }

func equal(a, b Record) bool {
	if a.Pod != b.Pod || !a.Since.Equal(b.Since) || len(a.Routes) != len(b.Routes) {
		return false
	}
	for i, x := range a.Routes {
		y := b.Routes[i]
		if x.Kind != y.Kind || x.Name != y.Name || !slices.EqualFunc(x.Outs, y.Outs, time.Time.Equal) || !x.In.Equal(y.In) ||
			x.WasRoute != y.WasRoute || !slices.Equal(x.Ports, y.Ports) || !x.LastArrival.Equal(y.LastArrival) {
			return false
		}
	}
	return true
}

// outAfter is out if it is after in (or in is zero), else zero: an out
// seen before the route came back in no longer counts.
func outAfter(out, in time.Time) time.Time {
	if in.IsZero() || out.After(in) {
		return out
	}
	return time.Time{}
}

// earliest is the earlier of two times, zero counting as none.
func earliest(a, b time.Time) time.Time {
	switch {
	case a.IsZero():
		return b
	case b.IsZero() || a.Before(b):
		return a
	}
	return b
}

func latest(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

func compareKeys(a, b gate.RouteKey) int {
	if c := strings.Compare(a.Kind, b.Kind); c != 0 {
		return c
	}
	return strings.Compare(a.Name, b.Name)
}
