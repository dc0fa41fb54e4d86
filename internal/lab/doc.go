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
// sleep action) and "draingate": a gate server (ServerImage, cmd/draingate)
// in a run-unique namespace of its own, with a ServiceAccount and a
// ClusterRole to read the cluster, reaching the ELBv2 emulator on the
// bridge address (Env.HostIP), with its tails (EndpointSlice 5 s, ALB 20 s,
// NLB 180 s) and poll interval (2 s, at least 200 ms) scaled by the time
// scale; and in every app pod the agent (AgentImage, cmd/draingate-prestop),
// copied by an init container into an emptyDir, as the preStop hook that
// holds SIGTERM until the gate releases the pod. Its max-wait covers the
// scenario's worst case with a margin, and the grace period grows by it.
// Everything a strategy creates, cluster-scoped objects included, is
// deleted when it ends, also on an error or Ctrl-C.
//
// It is the project's benchmark: every figure comes from a run, and a
// strategy that cannot fail (a sleep longer than lag plus propagation) shows
// zero failures, proving the lab adds none of its own. Lab-only: production
// packages never import it.
package lab
