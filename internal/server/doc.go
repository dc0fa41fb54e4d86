// Package server is `draingate serve`: it watches the cluster and, through
// every kind of route, the ways traffic still reaches the pods whose
// preStop agent asks, and answers the wait API with the gate's verdict.
//
// One terminating pod, end to end, each room entered once:
//
//	the agent (internal/prestop) watches its pod's traffic (internal/traffic) and asks;
//	the wait API (internal/waitapi) holds the long-poll and asks the server's Gate;
//	the server (pods.go) reads the pod from its cache, stamps the ask's traffic summary,
//	  and has every kind of route observe the pod;
//	the kinds (internal/route/<kind>) observe its EndpointSlices and target groups,
//	  the latter through the AWS poller (internal/aws/elbv2, one DescribeTargetHealth per group);
//	the gate (gate.Step) decides, having the traffic read and judged (internal/evidence);
//	the server keeps the gate's memory, writes the pod's Events and answers.
//
// The kinds of route are listed in one file, kinds.go; nothing else here
// names one. Each brings its flags (cli.go registers them), its cache
// transform (cache.go asks each), its metrics, its share of a new pod's
// max-wait (webhook.go takes the longest) and its shutdown.
//
// Files by job: server.go (options, wiring, Run), kinds.go (the kinds of
// route), pods.go (per-pod state along one pod's path: memory, timers, the
// wait API's Gate, the janitor), events.go (Events and log lines),
// cache.go (what the cache keeps), webhook.go (the injection webhook),
// metrics.go, cli.go.
//
// What it keeps per terminating pod is gate.Memory (when it was first seen
// terminating; every route it had, whether the pod was seen in it, and
// when each owner took it out) and whether its agent asks. For a pod whose
// agent waits, the memory is shared with every other replica through a
// Lease in draingate's namespace (internal/ledger, Options.Namespace):
// each decision starts from the union of every replica's observations, so
// the first to see a route go out sets when its tail started, and a second
// replica or a restart continues it instead of starting its own. Without
// the Lease (no namespace, or no access) a replica decides from its own
// memory: terminating endpoints stay listed in their slices until the pod
// is gone, so a restarted replica finds the same routes, and every tail
// starts again from its own first observation. Missing shared memory can
// lengthen a wait, never shorten one.
//
// AWS calls: a target group is polled only while a pod that has a route
// through it is waiting (its agent asked in the last Options.Linger), one
// poll serving every such pod, under the poller's one rate budget.
//
// Services are not cached: an EndpointSlice names its Service in the
// kubernetes.io/service-name label, which is all the gate needs, and a
// TargetGroupBinding's serviceRef is matched against that label.
package server
