package gate

import (
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"time"

	"draingate.dev/draingate/api"
	"draingate.dev/draingate/internal/evidence"
)

// Pod is what the gate knows about the pod it decides for.
type Pod struct {
	Namespace, Name, UID string
	// Terminating is true once the pod has a deletionTimestamp.
	Terminating bool
	// Deadline is when the pod is released whatever its routes say: its
	// deletionTimestamp less the app's shutdown reserve. Zero means no
	// deadline.
	Deadline time.Time
	// Traffic is what the pod's agent last reported of its inbound
	// traffic; nil when it sent none.
	Traffic *Traffic
}

// Traffic is an agent's traffic summary as the server received it. Step
// reads it as evidence (evidence.Read) once per decision, and the routes
// that weigh traffic are judged on it (evidence.Judge).
type Traffic struct {
	// Summary is the agent's own, its times ages at At, when the server
	// received it: silence is known only up to then.
	Summary *api.Traffic
	At      time.Time
	// Node are the pod's node's addresses: traffic from them (probes) is
	// never a route's.
	Node []netip.Addr
	// InCluster says whether an address is another pod of the cluster
	// (nil: none is known): in-cluster clients, never a route's traffic.
	InCluster func(netip.Addr) bool
	// Epsilon is the chance of a false quiet accepted per route and source
	// (evidence.DefaultEpsilon when zero).
	Epsilon float64
}

// evidence is the traffic read as evidence (nil without a summary).
func (t *Traffic) evidence() *evidence.Evidence {
	if t == nil || t.Summary == nil {
		return nil
	}
	return evidence.Read(t.Summary, t.At, t.Node, t.InCluster, t.Epsilon)
}

// RouteKey names one route: its source's kind and the owner's name.
type RouteKey struct{ Kind, Name string }

// RouteMemory is what the gate keeps about one route between steps.
type RouteMemory struct {
	// OutSince is when the owner was first seen to have taken the pod out;
	// zero while it routes to the pod. The tail counts from it.
	OutSince time.Time
	// Ports are the route's ports as last observed: a target group lists
	// the pod's target only until its deregistration delay ends, and the
	// traffic evidence still applies after that.
	Ports []uint16
	// WasRoute says an observation found the pod in this route (synced,
	// not NotRoute) at least once: a source may need it once its owner no
	// longer lists the pod (Known.WasRoute).
	WasRoute bool
	// LastArrival is the latest arrival the traffic evidence weighed for
	// this route: without evidence the route stays open a tail after it,
	// so that evidence that held it open past its tail, then went missing,
	// never lets it close at once.
	LastArrival time.Time
	// Samples are what the latest traffic evidence judged of each
	// source's stop once the route was out (evidence.Closing.Samples):
	// what the route teaches of its load
	// balancer's propagation (internal/learn). Unlisted are the sources
	// the evidence found sending that the route's senders' list lacks.
	// Kept by this replica only.
	Samples  []evidence.Sample
	Unlisted []netip.Addr
}

// Memory is everything the gate keeps about one terminating pod between
// steps. The caller stores what Step returns and hands it back next time;
// a zero Memory is a pod seen for the first time.
type Memory struct {
	// TerminatingSince is when the pod was first seen terminating; the
	// verdict's Waited counts from it.
	TerminatingSince time.Time
	// Routes holds every route the pod had while the gate watched it: a
	// route stays a route after its owner drops the pod (that is how it
	// closes).
	Routes map[RouteKey]RouteMemory
}

// Known is one remembered route of a pod, as its source is told of it.
type Known struct {
	Name string
	// WasRoute: the pod was seen in this route (see RouteMemory.WasRoute).
	WasRoute bool
	// Unlisted are the sources the last evidence found sending that the
	// route's senders' list lacks (RouteMemory.Unlisted): the source may
	// want its list read again.
	Unlisted []netip.Addr
}

// Known returns the remembered routes of one kind, sorted by name: a
// source must report each of them again.
func (m Memory) Known(kind string) []Known {
	var out []Known
	for k, r := range m.Routes {
		if k.Kind == kind {
			out = append(out, Known{Name: k.Name, WasRoute: r.WasRoute, Unlisted: r.Unlisted})
		}
	}
	slices.SortFunc(out, func(a, b Known) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// Step is one decision for pod at now: it judges every observation once,
// updates the memory and returns the verdict with the memory to keep.
//
//   - A pod that is not terminating is not released
//     (ReasonNotTerminating), and the memory is returned unchanged.
//   - Per route: OutSince is set on the first observation that says out,
//     kept while the owner keeps the pod out (read errors included, since
//     the fields are then those of the last good read) or cannot say
//     (not synced), and cleared when the owner takes the pod back in. A
//     remembered route missing from obs stays open.
//   - If no observation is a route (none given, or every one NotRoute), the
//     pod is released at once (ReasonNoRoutes).
//   - If every route is closed, it is released (ReasonDrained).
//   - Else, if the deadline is set and now is at or after it, it is
//     released (ReasonDeadline), and the message names the routes still open.
//   - Else it is not released, and Reason is empty.
//
// Every route, ignored ones included, appears in Verdict.Routes, sorted by
// kind and name. Waited is now − TerminatingSince.
func Step(now time.Time, pod Pod, prev Memory, obs []Observation) (api.Verdict, Memory) {
	v := api.Verdict{Pod: pod.Name, Namespace: pod.Namespace, UID: pod.UID}
	if !pod.Terminating {
		v.Reason = api.ReasonNotTerminating
		v.Message = "the pod is not terminating as far as the server sees: nothing to wait for yet"
		return v, prev
	}
	next := Memory{TerminatingSince: prev.TerminatingSince, Routes: make(map[RouteKey]RouteMemory, len(obs))}
	if next.TerminatingSince.IsZero() {
		next.TerminatingSince = now
	}
	if now.After(next.TerminatingSince) {
		v.Waited = api.Duration(now.Sub(next.TerminatingSince))
	}

	judged := judge(now, prev, next, obs, pod.Traffic.evidence())
	conclude(&v, now, pod, judged)
	return v, next
}

// judge assesses every observation once, recording in next what the gate
// keeps of each route (when its owner took the pod out, its ports), and
// every remembered route that no observation reported.
func judge(now time.Time, prev, next Memory, obs []Observation, ev *evidence.Evidence) map[RouteKey]Assessment {
	judged := map[RouteKey]Assessment{}
	for _, o := range obs {
		k := RouteKey{o.Kind, o.Name}
		m := prev.Routes[k]
		if o.Synced && !o.NotRoute {
			m.WasRoute = true
			switch {
			case !o.Out:
				m.OutSince = time.Time{}
			case m.OutSince.IsZero():
				m.OutSince = now
			}
		}
		if len(o.Ports) > 0 {
			m.Ports = o.Ports
		} else {
			o.Ports = m.Ports
		}
		a := Assess(now, o, m, ev)
		m.LastArrival = later(m.LastArrival, a.lastArrival)
		if a.samples != nil {
			m.Samples = a.samples
		}
		m.Unlisted = a.unlisted
		next.Routes[k] = m
		judged[k] = a
	}
	for k, m := range prev.Routes {
		if _, ok := judged[k]; !ok {
			next.Routes[k] = m
			judged[k] = notObserved(k, m)
		}
	}
	return judged
}

// conclude lists the judged routes in v and says whether, and why, the pod
// is released.
func conclude(v *api.Verdict, now time.Time, pod Pod, judged map[RouteKey]Assessment) {
	var open []api.Route
	counted, ignored := 0, 0
	for _, k := range slices.SortedFunc(maps.Keys(judged), compareKeys) {
		a := judged[k]
		v.Routes = append(v.Routes, a.Route)
		switch {
		case a.Phase == PhaseIgnored:
			ignored++
		case a.Phase.Open():
			counted++
			open = append(open, a.Route)
		default:
			counted++
		}
	}

	switch {
	case counted == 0:
		v.Released, v.Reason = true, api.ReasonNoRoutes
		v.Message = "released: no route holds the pod"
		if ignored > 0 {
			v.Message += fmt.Sprintf(" (%s never held it)", api.CountNoun(ignored, "route"))
		}
	case len(open) == 0:
		v.Released, v.Reason = true, api.ReasonDrained
		v.Message = "released: its only route is closed"
		if counted > 1 {
			v.Message = fmt.Sprintf("released: all %d routes closed", counted)
		}
		var why []string
		for _, k := range slices.SortedFunc(maps.Keys(judged), compareKeys) {
			if a := judged[k]; a.Phase == PhaseClosed {
				why = append(why, a.Route.Kind+"/"+a.Route.Name+" by "+a.Why)
			}
		}
		v.Message += " (" + strings.Join(why, "; ") + ")"
	case !pod.Deadline.IsZero() && !now.Before(pod.Deadline):
		v.Released, v.Reason = true, api.ReasonDeadline
		v.Message = fmt.Sprintf("released at the deadline %s with %s of %d still open: %s",
			api.Stamp(pod.Deadline), api.CountNoun(len(open), "route"), counted, list(open))
	default:
		v.Message = fmt.Sprintf("waiting for %s of %d: %s", api.CountNoun(len(open), "route"), counted, list(open))
	}
}

// NextChange is the next time after now at which the verdict for pod can
// change by the clock alone (a tail's end, the deadline), or zero when
// none can: the caller steps again then.
func NextChange(now time.Time, pod Pod, v api.Verdict) time.Time {
	var next time.Time
	consider := func(t time.Time) {
		if t.After(now) && (next.IsZero() || t.Before(next)) {
			next = t
		}
	}
	if v.Released || !pod.Terminating {
		return next
	}
	consider(pod.Deadline)
	for _, r := range v.Routes {
		if r.TailEnds != nil {
			consider(*r.TailEnds)
		}
		if r.QuietBy != nil {
			consider(*r.QuietBy)
		}
		if r.AskBy != nil {
			consider(*r.AskBy)
		}
	}
	return next
}

func compareKeys(a, b RouteKey) int {
	if c := strings.Compare(a.Kind, b.Kind); c != 0 {
		return c
	}
	return strings.Compare(a.Name, b.Name)
}

func list(rs []api.Route) string {
	s := make([]string, len(rs))
	for i, r := range rs {
		s[i] = r.String()
	}
	return strings.Join(s, ", ")
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
