package api

// The gate server's Events on a waiting pod, and the annotation each of
// them carries: what an operator reads to see why a pod is still
// terminating (kubectl describe pod, or kubectl draingate status).
const (
	// EventWaitStarted: the pod's agent asked for the first time.
	EventWaitStarted = "DrainWaitStarted"
	// EventRoutesChanged: a route of the waiting pod changed state (a
	// load balancer took it out, a tail started, a route closed).
	EventRoutesChanged = "DrainRoutesChanged"
	// EventReleased: every route closed; the pod's container may stop.
	EventReleased = "DrainReleased"
	// EventDeadline: the server's deadline for the pod came first.
	EventDeadline = "DrainDeadline"

	// VerdictAnnotation is on each of those Events: the Verdict the
	// server answered then, as JSON, with every route's state and detail.
	VerdictAnnotation = "draingate.dev/verdict"
)
