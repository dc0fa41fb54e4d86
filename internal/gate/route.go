package gate

import (
	"fmt"
	"time"

	"draingate.dev/draingate/api"
)

// Phase is where a route stands for the gate.
type Phase string

const (
	// PhaseUnknown: the gate cannot tell (the source has not synced, or the
	// route's kind is unknown). Open.
	PhaseUnknown Phase = "unknown"
	// PhaseIn: the owner still routes to the pod. Open.
	PhaseIn Phase = "in"
	// PhaseOut: the owner took the pod out, but the tail has not passed, or
	// the last read failed so the gate cannot confirm the pod is still out.
	// Open.
	PhaseOut Phase = "out"
	// PhaseClosed: out, the tail passed, and the last read succeeded.
	PhaseClosed Phase = "closed"
	// PhaseIgnored: not a route at all: a target group whose target is
	// unused or absent and was never registered nor expected.
	PhaseIgnored Phase = "ignored"
)

// Open reports whether a route in this phase still holds the pod.
func (p Phase) Open() bool { return p != PhaseClosed && p != PhaseIgnored }

// Route states that are not an owner's own words (those are, for target
// groups, the TargetHealth.State verbatim, such as "draining").
const (
	StateNotSynced = "not-synced" // the source has not synced yet
	StateUnknown   = "unknown"    // the route's kind is unknown
	StateClosed    = "closed"     // out and the tail passed
	StateIgnored   = "ignored"    // never registered: not a route

	// EndpointSlice endpoint states.
	StateReady              = "ready"               // listed, ready
	StateNotReady           = "not-ready"           // listed, not ready, not terminating
	StateTerminating        = "terminating"         // listed, terminating
	StateTerminatingServing = "terminating-serving" // listed, terminating, still used as kube-proxy's fallback
	StateGone               = "gone"                // not listed

	// StateAbsent: the target is absent from a full listing.
	StateAbsent = "absent"
)

// ELBv2 TargetHealth states (DescribeTargetHealth).
const (
	TargetInitial           = "initial"
	TargetHealthy           = "healthy"
	TargetUnhealthy         = "unhealthy"
	TargetUnhealthyDraining = "unhealthy.draining"
	TargetUnused            = "unused"
	TargetDraining          = "draining"
	TargetUnavailable       = "unavailable"
)

// Assessment is one observation judged at one time.
type Assessment struct {
	Phase Phase
	// Route is the observation as the verdict reports it: State is the
	// owner's state while the route is open, StateClosed once it is closed;
	// Since is OutSince and TailEnds is OutSince plus the tail once the
	// owner has taken the pod out (so a closed route shows when it went out
	// and when it closed); Detail is one sentence saying why.
	Route api.Route
}

// Assess judges one route observation at now. Decide uses it for every
// route; the server may use it for metrics and Events.
//
// Error policy (design rule 1): with Err set, the route keeps the phase its
// last good read gives it, except that it never becomes closed. In
// particular, a route whose owner took the pod out before the error keeps
// waiting after its tail has passed, until a successful read confirms the
// pod is still out. The tail itself keeps counting from OutSince (the owner
// did take the pod out; the error only stops the gate from re-reading), so
// that one good read after the tail closes the route at once. Closing on a
// stale observation would be cheaper during long throttling, but it would
// release on the strength of a read the gate could not repeat: errors may
// lengthen a wait up to the deadline and never shorten one.
func Assess(now time.Time, o RouteObservation, tails Tails) Assessment {
	r := api.Route{Kind: string(o.Kind), Name: o.Name}
	if !o.Synced {
		r.State = StateNotSynced
		r.Detail = "the source has not delivered a complete observation yet, so the route counts as open" + errSuffix(o.Err)
		return Assessment{Phase: PhaseUnknown, Route: r}
	}

	var (
		state, what string
		out         bool
		tail        time.Duration
		tailName    string
	)
	switch o.Kind {
	case KindEndpointSlice:
		state, out, what = endpointState(o)
		tail, tailName = tails.EndpointSlice, "EndpointSlice"
	case KindTargetGroup:
		state, out, what = targetState(o)
		tail, tailName = targetTail(o.LoadBalancer, tails)
		// `draining` proves the target was registered; `unused` and absent
		// prove nothing, so they need WasRegistered to count as a route.
		if out && !o.WasRegistered && (state == TargetUnused || state == StateAbsent) {
			r.State = StateIgnored
			r.Detail = "never registered: " + what +
				", and the pod was never seen registered nor expected in it, so it is not a route" + errSuffix(o.Err)
			return Assessment{Phase: PhaseIgnored, Route: r}
		}
	default:
		r.State = StateUnknown
		r.Detail = fmt.Sprintf("unknown route kind %q: kept open", o.Kind) + errSuffix(o.Err)
		return Assessment{Phase: PhaseUnknown, Route: r}
	}

	r.State = state
	if !out {
		r.Detail = what + errSuffix(o.Err)
		return Assessment{Phase: PhaseIn, Route: r}
	}
	if o.OutSince.IsZero() {
		r.Detail = what + "; when it went out is not recorded yet, so its tail has not started" + errSuffix(o.Err)
		return Assessment{Phase: PhaseOut, Route: r}
	}
	tail = max(tail, 0)
	end := o.OutSince.Add(tail)
	r.Since, r.TailEnds = o.OutSince, &end
	switch {
	case now.Before(end):
		r.Detail = fmt.Sprintf("%s since %s; the %s tail (%s) ends at %s", what, stamp(o.OutSince), tailName, tail, stamp(end)) +
			errSuffix(o.Err)
		return Assessment{Phase: PhaseOut, Route: r}
	case o.Err != nil:
		r.Detail = fmt.Sprintf("%s since %s and the %s tail (%s) ended at %s, but the last read failed (%v): "+
			"open until a successful read confirms the pod is still out", what, stamp(o.OutSince), tailName, tail, stamp(end), o.Err)
		return Assessment{Phase: PhaseOut, Route: r}
	}
	r.State = StateClosed
	r.Detail = fmt.Sprintf("%s since %s, and the %s tail (%s) ended at %s", what, stamp(o.OutSince), tailName, tail, stamp(end))
	return Assessment{Phase: PhaseClosed, Route: r}
}

// endpointState reads an EndpointSlice observation. Out: the endpoint is
// gone, terminating (the EndpointSlice controller's way to take a
// terminating pod out), or not ready; except that a serving terminating
// endpoint stays in while kube-proxy uses it as a fallback.
func endpointState(o RouteObservation) (state string, out bool, what string) {
	switch {
	case !o.Present:
		return StateGone, true, "the slice no longer lists the pod's endpoint"
	case o.Terminating && o.Serving && o.ServingFallback:
		return StateTerminatingServing, false, "the slice lists the pod's endpoint as terminating but serving, " +
			"and kube-proxy still sends to it because no ready endpoint remains"
	case o.Terminating:
		return StateTerminating, true, "the slice lists the pod's endpoint as terminating"
	case !o.Ready:
		return StateNotReady, true, "the slice lists the pod's endpoint as not ready"
	}
	return StateReady, false, "the slice lists the pod's endpoint as ready"
}

// targetState reads a target group observation. Out: `draining` (the
// deregistration call happened), `unused` (whatever the reason: the load
// balancer does not send to it), or absent from a full listing (the
// deregistration delay passed). Not out: `initial`, `healthy`, `unhealthy`
// (a load balancer whose targets are all unhealthy fails open and sends to
// all of them), `unhealthy.draining` (an NLB target failing health checks
// while still registered: it may still get connections, and a fail-open NLB
// sends it new ones), `unavailable` (health checks disabled: the load
// balancer sends to it), and any state this code does not know.
// Assess decides whether an unused or absent target was ever a route
// (WasRegistered).
func targetState(o RouteObservation) (state string, out bool, what string) {
	reason := ""
	if o.Reason != "" {
		reason = " (" + o.Reason + ")"
	}
	switch o.State {
	case "":
		return StateAbsent, true, "the target is absent from the full listing"
	case TargetDraining, TargetUnused:
		return o.State, true, "the target is " + o.State + reason
	case TargetInitial, TargetHealthy, TargetUnhealthy:
		return o.State, false, "the target is " + o.State + reason + ": the load balancer may send to it"
	case TargetUnhealthyDraining:
		return o.State, false, "the target is unhealthy.draining" + reason +
			": still registered, and an NLB may still send to it"
	case TargetUnavailable:
		return o.State, false, "the target is unavailable" + reason +
			": health checks are disabled and the load balancer sends to it"
	}
	return o.State, false, fmt.Sprintf("the target is in state %q%s, unknown to draingate: kept open", o.State, reason)
}

// targetTail picks the tail for a target group's load balancer type. An
// unknown type takes the NLB tail, the longer of the two by default.
func targetTail(lb string, tails Tails) (time.Duration, string) {
	switch lb {
	case LoadBalancerApplication:
		return tails.ALB, "ALB"
	case LoadBalancerNetwork:
		return tails.NLB, "NLB"
	}
	return tails.NLB, fmt.Sprintf("NLB (for load balancer type %q, unknown)", lb)
}

func errSuffix(err error) string {
	if err == nil {
		return ""
	}
	return fmt.Sprintf("; the last read failed (%v), so this is the last good observation", err)
}
