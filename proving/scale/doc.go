// Package scale measures what the gate server costs at the size of a real
// cluster, on the project's real API server: the server's memory and CPU,
// how fast the wait API answers while a thousand agents hold long-polls,
// how long a release takes to be answered once the last route closed, and
// how many DescribeTargetHealth calls per second it makes.
//
// One run (Run) is one cell of the table: a fresh set of namespaces with
// Pods pods bound to a Node that has no kubelet (created by the run, its
// pods tolerate the Node's NoExecute taints), hundreds of selectorless
// Services whose EndpointSlices the run writes itself, and target groups
// in the ELBv2 emulator bound by TargetGroupBindings to every few of them.
// The Services carry kube-proxy's service-proxy-name label so that the
// host's kube-proxy leaves them alone. Waiters of the pods are deleted and
// stay terminating (no kubelet finishes them, and a finalizer of the run
// holds them anyway); one simulated agent per waiting pod long-polls the
// wait API as draingate-prestop does, from its own loopback address (the
// wait API caps long-polls per source). The pods' addresses cannot be
// loopback ones (EndpointSlices refuse those), so the server runs with
// --wait-api-sources=any; everything else is the server's defaults except
// the tails, which are zero for EndpointSlices and ALBs so that a release
// follows the route change by the server's own latency alone.
//
// The server runs as its own process (the draingate binary), so its
// memory and CPU come from /proc. Everything the run creates (the Node,
// the namespaces and their pods, the emulator, the server process) is
// removed when it ends, also on failure.
package scale
