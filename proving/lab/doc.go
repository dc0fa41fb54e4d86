// Package lab reproduces the pod-termination race behind a load balancer on
// the project's real one-node cluster and measures it, once per strategy:
// a Deployment behind a Service and a TargetGroupBinding, the simulated load
// balancer controller registering its pods in the ELBv2 emulator, a load
// balancer of several nodes (proving/sim/dataplane), each learning each
// change after its own propagation delay and connecting to pods from its
// own address on the cluster's bridge, constant load spread over the nodes,
// and a workload that stops pods: rolling updates, a blue/green switch, or
// a container restart through a failing liveness probe (Scenario.Workload);
// the sidecar scenario adds a lab webhook after draingate's that gives each
// pod a proxy sidecar (proving/lab/sidecar). It reports failed requests,
// termination and restart times, the slack between SIGTERM and the moment
// the last node stopped sending a pod new requests, how each pod's agent
// released it, the requests that reached each pod after its SIGTERM per
// load balancer node (counted by the app per source address), and
// draingate's own ELBv2 calls apart from the controller's.
//
// Strategies: "none" (no preStop hook), "sleep:DURATION" (the native preStop
// sleep action) and "draingate": draingate installed as an operator would,
// with its Helm chart (release/chart) at the chart's defaults, in a
// run-unique namespace of its own. The lab sets only what it must (its
// images, the ELBv2 emulator's endpoint on the bridge address Env.HostIP,
// region and keys) and, on a scaled run, every duration of the chart's
// defaults times the scale, like every other duration; nothing comes from
// the scenario. Options.DraingateSet adds explicit experiments, and the
// report lists every value the lab set. The app's namespace is labelled
// draingate.dev/inject=enabled and its pods are plain: the webhook injects
// the agent (AgentImage) with the chart's max-wait. The lab checks that every pod was
// injected, so a webhook that failed open cannot pass for the gate. The
// release, cluster-scoped objects included, is uninstalled when the strategy
// ends, also on an error or Ctrl-C.
//
// It is the project's benchmark: every figure comes from a run, and a
// strategy that cannot fail (a sleep longer than lag plus propagation) shows
// zero failures, proving the lab adds none of its own. Lab-only: production
// packages never import it.
package lab
