// Package lbc simulates the aws-load-balancer-controller in `ip` mode for the
// lab: it watches TargetGroupBindings and the EndpointSlices of their
// Services, registers ready endpoints in the target group and deregisters the
// rest (terminating endpoints drop out), in chunks of 200 under a client-side
// throttle of 4 calls/s burst 20, through the real AWS SDK client against the
// ELBv2 emulator. Knobs reproduce a slow controller: a reconcile lag (fixed
// plus random) and, on the emulator side, throttled and retried calls.
//
// It also sets the pod readiness gate the real controller injects
// (target-health.elbv2.k8s.aws/<binding>), so rollouts wait for new targets
// to be healthy. Lab-only: production packages never import it.
package lbc
