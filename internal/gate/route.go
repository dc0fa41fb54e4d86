package gate

import (
	"fmt"
	"net/netip"
	"time"

	"draingate.dev/draingate/api"
	"draingate.dev/draingate/internal/evidence"
)

// Observation is one route of one pod as its source sees it now: the
// owner's word (in or out) and how long consumers may still send after the
// owner took the pod out. Each route source (internal/route/...) makes
// them; Step judges them and remembers, between steps, when each owner
// first took the pod out.
type Observation struct {
	// Kind is the source's kind, as api.Route.Kind carries it.
	Kind string
	// Name names the route's owner within its kind, such as "default/web"
	// for a Service's EndpointSlices or a target group's ARN.
	Name string

	// Synced is true once the source has delivered at least one complete
	// observation of this route (the informer cache synced; the poller's
	// first full listing came). Until then the route is open: nobody knows.
	Synced bool
	// Err is the last error reading the source, nil after a good read; the
	// other fields then stay those of the last good read. A route never
	// closes while Err is set.
	Err error

	// State is the owner's own word for the pod, such as "ready" or
	// "draining", as the verdict shows it.
	State string
	// Out is true when the owner has taken the pod out.
	Out bool
	// NotRoute is true when the pod was never in this route (a target group
	// that never held the pod): the gate lists it and ignores it.
	NotRoute bool
	// What is one sentence saying what the owner says, for the verdict.
	What string

	// Tail is how long the route's consumers may still send new traffic
	// after the owner took the pod out (negative counts as zero); TailName
	// names it in sentences ("EndpointSlice", "ALB").
	Tail     time.Duration
	TailName string

	// WeighTraffic says the pod's traffic evidence (Pod.Traffic) applies:
	// remote sources on Ports shorten or lengthen the tail (a target
	// group's route; see internal/evidence). Ports are the pod's own ports the route's traffic
	// arrives on (a target group's target ports); empty, every port counts
	// (a target no longer listed, seen by no earlier observation), which
	// can only lengthen a wait. Without WeighTraffic the tail alone decides.
	WeighTraffic bool
	Ports        []uint16
	// NewConns says only new connections are the route's traffic (an NLB
	// routes flows: bytes on a flow it opened before are no new routing;
	// evidence.Route.NewConns).
	NewConns bool
	// Senders is who may send the route's traffic, as far as its source
	// knows (evidence.Senders): without a list, the evidence may lengthen
	// the route's wait, never shorten it.
	Senders evidence.Senders
	// EarlyClose lets the evidence close the route before its tail's end
	// (evidence.Route.EarlyClose, an opt-in); unset, it only lengthens.
	EarlyClose bool
	// LateChance is the measured chance that a sender is still sending at
	// the tail's end (evidence.Route.LateChance; 0: not known).
	LateChance float64
}

// Phase is where a route stands for the gate.
type Phase string

const (
	// PhaseUnknown: the gate cannot tell (the source has not synced, or the
	// route was not observed this time). Open.
	PhaseUnknown Phase = "unknown"
	// PhaseIn: the owner still routes to the pod. Open.
	PhaseIn Phase = "in"
	// PhaseOut: the owner took the pod out, but the tail has not passed, or
	// the last read failed so the gate cannot confirm the pod is still out.
	// Open.
	PhaseOut Phase = "out"
	// PhaseClosed: out, the tail passed, and the last read succeeded.
	PhaseClosed Phase = "closed"
	// PhaseIgnored: not a route at all (Observation.NotRoute).
	PhaseIgnored Phase = "ignored"
)

// Open reports whether a route in this phase still holds the pod.
func (p Phase) Open() bool { return p != PhaseClosed && p != PhaseIgnored }

// Route states the gate itself gives; the others are the owners' words.
const (
	StateNotSynced   = "not-synced"   // the source has not synced yet
	StateNotObserved = "not-observed" // remembered, but missing from this step's observations
	StateClosed      = "closed"       // out and the tail passed
	StateIgnored     = "ignored"      // never in the route
)

// Assessment is one observation judged at one time.
type Assessment struct {
	Phase Phase
	// Route is the observation as the verdict reports it: State is the
	// owner's state while the route is open, StateClosed once it is closed;
	// Since is outSince and TailEnds is outSince plus the tail once the
	// owner has taken the pod out (so a closed route shows when it went out
	// and when it closed); Detail is one sentence saying why.
	Route api.Route
	// Why is a closed route's reason as a short phrase for the release
	// message: "its tail (20s)", or "quiet 7.5s after 412 arrivals from 3
	// sources, 10.4s before its tail's end".
	Why string
	// lastArrival is the latest arrival the evidence weighed for the
	// route (zero without evidence), for RouteMemory.LastArrival.
	lastArrival time.Time
	// samples and unlisted are the evidence's (evidence.Closing).
	samples  []evidence.Sample
	unlisted []netip.Addr
}

// Assess judges one observation at now, given what the gate remembers of
// the route (m.OutSince: when its owner was first seen to take the pod
// out, zero if not yet) and the pod's traffic evidence (nil: none).
//
// Evidence policy: it never closes a route whose owner still routes to the
// pod. Once the owner took the pod out, a route that weighs traffic closes
// when the evidence says (evidence.Judge: every source quiet; before the
// tail's end only if every source sent enough to fit a rate, passed the
// shape check and the route's senders allow it, past it for as long as a
// source keeps sending). Without evidence it closes at its
// tail's end, or a tail after the latest arrival any earlier evidence
// weighed for it (m.LastArrival) if that is later: evidence that held a
// route open and then went missing (an ask without a summary, an agent
// that cannot see) never lets it close at once.
//
// Error policy (missing data may lengthen a wait, never shorten one):
// with Err set, the route keeps the phase its last good read gives it,
// except that it never becomes closed. A route
// whose owner took the pod out before the error keeps waiting after its
// tail has passed, until a successful read confirms the pod is still out.
// The tail itself keeps counting from outSince (the owner did take the pod
// out; the error only stops the gate from re-reading), so that one good read
// after the tail closes the route at once. Closing on a stale observation
// would release on the strength of a read the gate could not repeat: errors
// may lengthen a wait up to the deadline and never shorten one.
func Assess(now time.Time, o Observation, m RouteMemory, ev *evidence.Evidence) Assessment {
	outSince := m.OutSince
	r := api.Route{Kind: o.Kind, Name: o.Name}
	switch {
	case !o.Synced:
		r.State = StateNotSynced
		r.Detail = "the source has not delivered a complete observation yet, so the route counts as open" + api.LastReadFailed(o.Err)
		return Assessment{Phase: PhaseUnknown, Route: r}
	case o.NotRoute:
		r.State = StateIgnored
		r.Detail = o.What + api.LastReadFailed(o.Err)
		return Assessment{Phase: PhaseIgnored, Route: r}
	}
	r.State = o.State
	if !o.Out {
		r.Detail = o.What + api.LastReadFailed(o.Err)
		return Assessment{Phase: PhaseIn, Route: r}
	}
	if outSince.IsZero() {
		r.Detail = o.What + "; when it went out is not recorded yet, so its tail has not started" + api.LastReadFailed(o.Err)
		return Assessment{Phase: PhaseOut, Route: r}
	}
	tail := max(o.Tail, 0)
	end := outSince.Add(tail)
	r.Since, r.TailEnds = outSince, &end
	if o.WeighTraffic {
		c, ok := ev.Judge(now, evidence.Route{OutSince: outSince, Tail: tail, TailName: o.TailName, Ports: o.Ports, NewConns: o.NewConns,
			Senders: o.Senders, EarlyClose: o.EarlyClose, LateChance: o.LateChance, What: o.What, Err: o.Err})
		if ok {
			r.Detail, r.QuietBy, r.AskBy = c.Detail, c.QuietBy, c.AskBy
			a := Assessment{Phase: PhaseOut, Route: r, lastArrival: c.LastArrival, samples: c.Samples, unlisted: c.Unlisted}
			if c.Closed {
				a.Phase, a.Why = PhaseClosed, c.Why
				a.Route.State, a.Route.ClosedBy = StateClosed, c.ClosedBy
			}
			return a
		}
		if held := m.LastArrival.Add(tail); held.After(end) {
			return assessHeld(now, o, r, m.LastArrival, held)
		}
	}
	switch {
	case now.Before(end):
		r.Detail = fmt.Sprintf("%s since %s; the %s tail (%s) ends at %s", o.What, api.Stamp(outSince), o.TailName, tail.Round(time.Millisecond), api.Stamp(end)) +
			api.LastReadFailed(o.Err)
		return Assessment{Phase: PhaseOut, Route: r}
	case o.Err != nil:
		r.Detail = fmt.Sprintf("%s since %s and the %s tail (%s) ended at %s, but the last read failed (%v): "+
			"open until a successful read confirms the pod is still out", o.What, api.Stamp(outSince), o.TailName, tail.Round(time.Millisecond), api.Stamp(end), o.Err)
		return Assessment{Phase: PhaseOut, Route: r}
	}
	r.State, r.ClosedBy = StateClosed, api.ClosedByTail
	r.Detail = fmt.Sprintf("%s since %s, and the %s tail (%s) ended at %s", o.What, api.Stamp(outSince), o.TailName, tail.Round(time.Millisecond), api.Stamp(end))
	return Assessment{Phase: PhaseClosed, Route: r, Why: fmt.Sprintf("its %s tail (%s)", o.TailName, tail.Round(time.Millisecond))}
}

// assessHeld is Assess for an out route that weighs traffic, with no
// evidence now, whose earlier evidence saw an arrival at last: it is held
// until a tail after it (held), past its own tail's end (r.TailEnds).
func assessHeld(now time.Time, o Observation, r api.Route, last, held time.Time) Assessment {
	what := fmt.Sprintf("%s since %s; the %s tail (%s) ended at %s, but the pod's traffic evidence, missing now, last saw an arrival at %s",
		o.What, api.Stamp(r.Since), o.TailName, max(o.Tail, 0).Round(time.Millisecond), api.Stamp(*r.TailEnds), api.Stamp(last))
	switch {
	case now.Before(held):
		r.QuietBy = &held
		r.Detail = what + fmt.Sprintf(": open a tail after it, until %s", api.Stamp(held)) + api.LastReadFailed(o.Err)
		return Assessment{Phase: PhaseOut, Route: r}
	case o.Err != nil:
		r.Detail = what + fmt.Sprintf(", a tail before %s, but the last read failed (%v): open until a successful read confirms the pod is still out",
			api.Stamp(held), o.Err)
		return Assessment{Phase: PhaseOut, Route: r}
	}
	r.State, r.ClosedBy = StateClosed, api.ClosedByTraffic
	r.Detail = what + fmt.Sprintf(", and a tail after it ended at %s", api.Stamp(held))
	return Assessment{Phase: PhaseClosed, Route: r,
		Why: fmt.Sprintf("a tail after its last arrival seen (evidence missing), %s past its %s tail's end", held.Sub(*r.TailEnds).Round(100*time.Millisecond), o.TailName)}
}

// notObserved is the assessment of a remembered route that no source
// reported this time: open, since a route stays a route after its owner
// drops the pod, and the gate cannot say it closed.
func notObserved(key RouteKey, m RouteMemory) Assessment {
	r := api.Route{Kind: key.Kind, Name: key.Name, State: StateNotObserved,
		Detail: "the route was seen before but its source did not report it this time, so it counts as open"}
	if !m.OutSince.IsZero() {
		r.Since = m.OutSince
	}
	return Assessment{Phase: PhaseUnknown, Route: r}
}
