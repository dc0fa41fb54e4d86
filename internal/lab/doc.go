// Package lab reproduces the pod-termination race behind a load balancer on
// the project's real one-node cluster and measures it, once per strategy:
// a Deployment behind a Service and a TargetGroupBinding, the simulated load
// balancer controller registering its pods in the ELBv2 emulator, the
// data-plane proxy learning each change after a propagation delay, constant
// load through that proxy, and pod-template rollouts. It reports failed
// requests, termination times and the slack between SIGTERM and the moment
// the data plane stopped sending a pod new requests.
//
// It is the project's benchmark: every figure comes from a run, and a
// strategy that cannot fail (a sleep longer than lag plus propagation) shows
// zero failures, proving the lab adds none of its own. Lab-only: production
// packages never import it.
package lab
