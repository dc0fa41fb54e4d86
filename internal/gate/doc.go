// Package gate decides, for one terminating pod, whether its preStop hook may
// return. Step is a pure function of the time, the pod, what the gate
// remembered at the previous step (Memory) and one Observation per route
// that may still carry traffic to the pod; it returns the verdict and the
// memory to keep. It does no I/O: the route sources (internal/route/...)
// make the observations, and the drain tracker (internal/drain) stores the
// memory and calls Step again whenever something changes or a tail may
// have ended (NextChange).
//
// A route is closed when its owner has taken the pod out (Observation.Out)
// and the route's propagation tail (Observation.Tail) has passed since the
// gate first saw it out (RouteMemory.OutSince). The pod is released when
// every route is closed, when there is no route at all, or when the pod's
// deadline comes; the verdict says which, and lists every route with its
// state, so that every decision explains itself. The gate knows no
// route kind: each source says what its owner's word means.
//
// The pod's own traffic, as its agent last reported it (Pod.Traffic), can
// end a tail early or keep a route open past it: the gate reads it once
// per step (evidence.Read) and has every route that weighs traffic judged
// on it (evidence.Judge); internal/evidence holds the statistics and the
// closing rules, the gate what follows from them.
//
// What it must never do: release a pod early because something failed. A
// route whose source has not synced yet is open; a route
// whose last read failed keeps its last observed state and never closes
// while the error stands, not even when its tail has passed: it closes after
// a successful read confirms the pod is still out. A remembered route that
// no source reports is open. Errors lengthen the wait, up to the deadline,
// and nothing else.
//
// The package imports only the standard library, the wire types in api and
// internal/evidence.
package gate
