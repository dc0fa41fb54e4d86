package api

import (
	"fmt"
	"time"
)

// Verdict is the wait API's answer about one pod.
type Verdict struct {
	Pod       string `json:"pod"`
	Namespace string `json:"namespace"`
	UID       string `json:"uid,omitempty"`
	// Released tells the agent to stop asking: every route is closed, or
	// the server's deadline for the pod came. Reason says which.
	Released bool   `json:"released"`
	Reason   Reason `json:"reason,omitempty"`
	// Waited is how long the server has been waiting for this pod (since
	// its deletion began, as far as the server saw it).
	Waited Duration `json:"waited"`
	// Routes are the ways traffic could still reach the pod, each with the
	// state the server last saw; they make the verdict explainable.
	Routes  []Route `json:"routes,omitempty"`
	Message string  `json:"message,omitempty"`
}

// Route is one way traffic can reach the pod: an EndpointSlice that lists it,
// or a load balancer target group that holds it.
type Route struct {
	Kind  string `json:"kind"`  // such as "endpointslice" or "targetgroup"
	Name  string `json:"name"`  // the route owner's name, such as the slice's or the target group's
	State string `json:"state"` // such as "ready", "terminating", "draining", "closed"
	// Since is when the route entered State.
	Since time.Time `json:"since,omitzero"`
	// TailEnds is when the route's propagation tail passes (its owner has
	// taken the pod out, and consumers have had time to notice); nil while
	// the owner still routes to the pod.
	TailEnds *time.Time `json:"tail_ends,omitempty"`
	// QuietBy is set when the pod's own traffic evidence weighs on the
	// route: it closes then if nothing arrives on it before. The server
	// answers a long-poll at that time, so the agent's next ask brings the
	// fresh evidence that closes the route.
	QuietBy *time.Time `json:"quiet_by,omitempty"`
	// AskBy is set, before QuietBy, while the route waits on evidence the
	// agent sent a while ago: newer evidence could close it sooner (a
	// source fitted since, or gone quiet since). The server answers a
	// long-poll at that time, so that the agent's next ask brings it.
	AskBy *time.Time `json:"ask_by,omitempty"`
	// ClosedBy says what closed a closed route: ClosedByTail or
	// ClosedByTraffic (the evidence ended the wait before the tail's end,
	// or kept it open past it).
	ClosedBy string `json:"closed_by,omitempty"`
	Detail   string `json:"detail,omitempty"`
}

// Route.ClosedBy values.
const (
	ClosedByTail    = "tail"
	ClosedByTraffic = "traffic"
)

// String is the route as a log line fragment: "kind/name state".
func (r Route) String() string {
	return fmt.Sprintf("%s/%s %s", r.Kind, r.Name, r.State)
}

// Reason says why a verdict is what it is.
type Reason string

const (
	// ReasonDrained: every route is closed, tails included.
	ReasonDrained Reason = "drained"
	// ReasonDeadline: the server's deadline for the pod came before every
	// route closed; the verdict's routes say which were still open.
	ReasonDeadline Reason = "deadline"
	// ReasonNotFound: the server does not know the pod, or it has another
	// UID (sent with a 404).
	ReasonNotFound Reason = "not-found"
	// ReasonNotTerminating: the pod is not being deleted, as far as the
	// server sees: its container stops for another reason (a failed
	// liveness probe), or the server's view is behind.
	ReasonNotTerminating Reason = "not-terminating"
	// ReasonNoRoutes: nothing routes traffic to the pod, so there is
	// nothing to wait for.
	ReasonNoRoutes Reason = "no-routes"
)

// Duration is a time.Duration that travels as a Go duration string such as
// "12.5s", readable by people and by time.ParseDuration alike.
type Duration time.Duration

func (d Duration) String() string { return time.Duration(d).String() }

// MarshalText makes JSON carry d as a string.
func (d Duration) MarshalText() ([]byte, error) { return []byte(d.String()), nil }

// UnmarshalText reads a Go duration string.
func (d *Duration) UnmarshalText(b []byte) error {
	v, err := time.ParseDuration(string(b))
	if err != nil {
		return fmt.Errorf("duration %s is not a Go duration such as 12.5s", Quote(string(b), maxQuoted))
	}
	*d = Duration(v)
	return nil
}
