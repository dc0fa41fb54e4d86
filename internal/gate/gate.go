package gate

import (
	"fmt"
	"strings"
	"time"

	"draingate.dev/draingate/api"
)

// Kind is the kind of a route. Its value is what api.Route.Kind carries.
type Kind string

const (
	// KindEndpointSlice is an EndpointSlice that lists the pod; its consumers
	// are kube-proxy on every node, ingress controllers and meshes. It also
	// covers `instance` target groups, which reach the pod through kube-proxy.
	KindEndpointSlice Kind = "endpointslice"
	// KindTargetGroup is an `ip` target group that holds (or was expected to
	// hold) the pod's IP, found through a TargetGroupBinding; its consumer is
	// an AWS load balancer.
	KindTargetGroup Kind = "targetgroup"
)

// Load balancer types, as ELBv2 names them (DescribeLoadBalancers Type).
const (
	LoadBalancerApplication = "application"
	LoadBalancerNetwork     = "network"
)

// Tails are the propagation tails per route kind: how long the route's
// consumers may still send new traffic after its owner took the pod out.
// A zero tail closes a route as soon as its owner takes the pod out; a
// negative one counts as zero.
type Tails struct {
	// EndpointSlice is for kube-proxy, ingress controllers and meshes to
	// notice an endpoint change (about a second for kube-proxy, seconds for
	// the others).
	EndpointSlice time.Duration
	// ALB is for an Application Load Balancer to stop sending new requests
	// after its target shows `draining`: requests were seen ~17 s later.
	ALB time.Duration
	// NLB is for a Network Load Balancer (or one of unknown type) to stop
	// opening new connections after deregistration: 2–5 minutes were seen.
	NLB time.Duration
}

// DefaultTails returns the tails draingate uses unless configured otherwise:
// EndpointSlice 5s, ALB 20s, NLB 180s (see docs/facts.md#load-balancer-tails).
func DefaultTails() Tails {
	return Tails{EndpointSlice: 5 * time.Second, ALB: 20 * time.Second, NLB: 180 * time.Second}
}

// Pod is what the gate knows about the pod it decides for.
type Pod struct {
	Namespace, Name, UID string
	// Terminating is true once the pod has a deletionTimestamp.
	Terminating bool
	// TerminatingSince is when the server first saw the deletionTimestamp;
	// the verdict's Waited counts from it.
	TerminatingSince time.Time
	// Deadline is when the pod is released whatever its routes say: the
	// hook's start plus max-wait, capped so that the grace period still
	// covers the rest of the shutdown. Zero means no deadline.
	Deadline time.Time
}

// RouteObservation is the latest observation of one route, as the informer
// (EndpointSlice) or the target-health poller (target group) delivered it,
// plus the one thing the caller must remember between observations:
// OutSince.
type RouteObservation struct {
	Kind Kind
	// Name names the route's owner, such as "default/web-x7k2p" for an
	// EndpointSlice or a target group's ARN.
	Name string

	// Synced is true once the source has delivered at least one complete
	// observation (the informer cache synced; the poller's first full
	// listing came). Until then the route is open: the gate cannot know.
	Synced bool
	// Err is the last error reading the source, nil after a good read. The
	// other fields stay those of the last good read. A route never closes
	// while Err is set (see Decide).
	Err error

	// EndpointSlice fields. The caller maps the Kubernetes API's nil
	// conditions: nil ready means ready, nil serving means the same as
	// ready, nil terminating means false.

	// Present is true when the slice lists an endpoint with the pod's IP.
	Present bool
	// Ready, Serving and Terminating are that endpoint's conditions.
	Ready, Serving, Terminating bool
	// ServingFallback is true when kube-proxy still sends to serving
	// terminating endpoints of this slice's Service because no ready
	// endpoint remains (the terminating-endpoints fallback, KEP-1669). The
	// caller computes it from the Service's slices; while it holds, a
	// serving terminating endpoint is not out.
	ServingFallback bool

	// Target group fields.

	// LoadBalancer is the type of the load balancer in front of the target
	// group: "application" or "network". Anything else (unknown, gateway)
	// takes the NLB tail, the longer one: waiting too long costs time,
	// waiting too short costs requests.
	LoadBalancer string
	// State is the target's TargetHealth.State as DescribeTargetHealth
	// reported it, or "" when the target is absent from a full listing.
	State string
	// Reason is the target's TargetHealth.Reason, e.g.
	// "Target.DeregistrationInProgress"; for the detail sentence only.
	Reason string
	// WasRegistered is true when the pod's target was seen registered, or
	// was expected because the pod's IP was an endpoint of the
	// TargetGroupBinding's Service before termination. A target that is
	// `unused` or absent and was never registered nor expected is not a
	// route: the load balancer never sent to it.
	WasRegistered bool

	// OutSince is when the owner was first observed to have taken the pod
	// out (the endpoint gone or not ready; the target draining, unused or
	// absent). The caller records it on the first such observation, keeps it
	// while the owner keeps the pod out (read errors included), and clears
	// it if the owner takes the pod back in. The tail counts from it. If the
	// observation says out and OutSince is zero, the route stays open.
	OutSince time.Time
}

// Decide returns the verdict for pod at now, given one observation per route
// that may carry traffic to it.
//
//   - A pod that is not terminating is not released (ReasonNotTerminating):
//     the agent should not be asking yet, and the server decides what to do.
//   - If no observation is a route (none given, or every target group never
//     held the pod), the pod is released at once (ReasonNoRoutes).
//   - If every route is closed, it is released (ReasonDrained).
//   - Else, if the deadline is set and now is at or after it, it is
//     released (ReasonDeadline), and the message names the routes still open.
//   - Else it is not released, and Reason is empty.
//
// Every observation, route or not, appears in Verdict.Routes in the order
// given, with the state Assess gives it. Waited is now − TerminatingSince
// (zero when unknown or negative).
func Decide(now time.Time, pod Pod, routes []RouteObservation, tails Tails) api.Verdict {
	v := api.Verdict{Pod: pod.Name, Namespace: pod.Namespace, UID: pod.UID}
	if pod.Terminating && !pod.TerminatingSince.IsZero() && now.After(pod.TerminatingSince) {
		v.Waited = api.Duration(now.Sub(pod.TerminatingSince))
	}

	var open, ignored []api.Route
	counted := 0
	for _, o := range routes {
		a := Assess(now, o, tails)
		v.Routes = append(v.Routes, a.Route)
		switch a.Phase {
		case PhaseIgnored:
			ignored = append(ignored, a.Route)
		case PhaseClosed:
			counted++
		default:
			counted++
			open = append(open, a.Route)
		}
	}

	switch {
	case !pod.Terminating:
		v.Reason = api.ReasonNotTerminating
		v.Message = "the pod is not terminating as far as the server sees: nothing to wait for yet"
	case counted == 0:
		v.Released, v.Reason = true, api.ReasonNoRoutes
		v.Message = "released: no EndpointSlice lists the pod and no target group holds it"
		if len(ignored) > 0 {
			v.Message += fmt.Sprintf(" (%s never registered it)", countNoun(len(ignored), "target group"))
		}
	case len(open) == 0:
		v.Released, v.Reason = true, api.ReasonDrained
		v.Message = "released: its only route is closed"
		if counted > 1 {
			v.Message = fmt.Sprintf("released: all %d routes closed", counted)
		}
	case !pod.Deadline.IsZero() && !now.Before(pod.Deadline):
		v.Released, v.Reason = true, api.ReasonDeadline
		v.Message = fmt.Sprintf("released at the deadline %s with %s of %d still open: %s",
			stamp(pod.Deadline), countNoun(len(open), "route"), counted, list(open))
	default:
		v.Message = fmt.Sprintf("waiting for %s of %d: %s", countNoun(len(open), "route"), counted, list(open))
	}
	return v
}

func list(rs []api.Route) string {
	s := make([]string, len(rs))
	for i, r := range rs {
		s[i] = r.String()
	}
	return strings.Join(s, ", ")
}

func countNoun(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

// stamp formats a time for detail sentences: UTC, to the millisecond.
func stamp(t time.Time) string {
	return t.UTC().Format("15:04:05.000Z07:00")
}
