// Package server is `draingate serve`: it watches the cluster and, through
// the route sources, the AWS target groups of the pods whose preStop agent
// asks, and answers the wait API with the gate's verdict.
//
// One terminating pod, end to end:
//
//	agent (internal/prestop) long-polls the wait API (internal/waitapi);
//	the server (pods.Verdict) reads the pod from its cache and asks every route source;
//	the route sources (internal/route/...) observe its EndpointSlices and target groups,
//	the AWS poller (internal/aws/elbv2) sharing one DescribeTargetHealth per group;
//	the gate (gate.Step) decides and returns its memory; the server keeps it, writes Events.
//
// Files by job: server.go (options, wiring, Run), pods.go (per-pod state:
// memory, timers, the janitor), waitgate.go (the wait API's Gate),
// events.go (Events and log lines), cache.go (what the cache keeps),
// webhook.go (the injection webhook), metrics.go, cli.go.
//
// What it keeps per terminating pod is gate.Memory (when it was first seen
// terminating; every route it had, and when each owner took it out) and
// whether its agent asks. None of it is persisted. A restarted server sees
// terminating pods afresh: terminating endpoints stay listed in their
// slices until the pod is gone, so it finds the same routes, and every
// tail starts again from its first observation. A restart can lengthen a
// wait, never shorten one.
//
// AWS calls: a target group is polled only while a pod that has a route
// through it is waiting (its agent asked in the last Options.Linger), one
// poll serving every such pod, under the poller's one rate budget.
//
// Services are not cached: an EndpointSlice names its Service in the
// kubernetes.io/service-name label, which is all the gate needs, and a
// TargetGroupBinding's serviceRef is matched against that label.
package server
