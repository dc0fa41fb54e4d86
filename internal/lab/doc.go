// Package lab reproduces the pod-termination race behind a load balancer on
// the project's real one-node cluster and measures it, once per strategy:
// a Deployment behind a Service and a TargetGroupBinding, the simulated load
// balancer controller registering its pods in the ELBv2 emulator, the
// data-plane proxy learning each change after a propagation delay, constant
// load through that proxy, and pod-template rollouts. It reports failed
// requests, termination times and the slack between SIGTERM and the moment
// the data plane stopped sending a pod new requests.
//
// Strategies: "none" (no preStop hook), "sleep:DURATION" (the native preStop
// sleep action) and "draingate": draingate installed as an operator would,
// with its Helm chart (internal/chart) at the chart's defaults, in a
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
