// Package gate decides, for one terminating pod, whether its preStop hook may
// return: the verdict is a pure function of what the gate server observed
// (the pod, and one RouteObservation per route that may still carry traffic
// to it) and of the current time. It does no I/O and keeps no state; the
// informers and the target-health poller gather the observations, record
// when each route's owner first took the pod out (RouteObservation.OutSince),
// and call Decide again whenever something changes or a tail may have ended.
//
// A route is closed when its owner has taken the pod out (the endpoint is
// gone or not ready; the target is draining, unused or absent after having
// been registered or expected) and the route kind's propagation tail has
// passed since then. The pod is released when every route is closed, when
// there is no route at all, or when the pod's deadline comes; the verdict
// says which, and lists every route with its state, so that it explains
// itself (design rule 5).
//
// What it must never do: release a pod early because something failed
// (design rule 1). A route whose source has not synced yet is open; a route
// whose last read failed keeps its last observed state and never closes
// while the error stands, not even when its tail has passed: it closes after
// a successful read confirms the pod is still out. Errors lengthen the wait,
// up to the deadline, and nothing else. Anything the function does not
// recognise (an unknown route kind, an unknown target state) keeps the route
// open.
//
// The package imports only the standard library and the wire types in api.
package gate
