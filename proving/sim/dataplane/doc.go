// Package dataplane plays the data plane of an AWS load balancer in the lab: a
// reverse proxy that routes each new request to a target it believes is
// healthy, where that belief lags the control plane by a propagation delay.
//
// This lag is the race draingate exists for: DescribeTargetHealth already says
// `draining` while the load balancer still sends new requests to the target
// (seconds for an ALB, minutes for an NLB). The proxy learns about targets only
// from [Event]s, the state changes an ELBv2 emulator reports, and acts on each
// one after a delay drawn from [Config.Propagation]. It records when its own
// view took each target in and out of rotation ([Proxy.StartedAt],
// [Proxy.StoppedAt], [Proxy.Timeline]) and what every request got
// ([Proxy.Stats]), so a lab run can tell which failures the race caused.
//
// A real load balancer is several nodes, each learning a target change at its
// own time and connecting to targets from its own address. A [Balancer] plays
// that with one Proxy per node ([Config.Name], [Config.SourceIP]), each with
// its own delays (for instance [LogNormal] draws, seeded apart): a target is
// out of its rotation only once the slowest node took it out
// ([Balancer.StoppedAt]).
//
// Like an ALB it keeps keep-alive connections to targets, and like an ALB it
// never retries a request on another connection or target: a request that
// fails at the target fails at the client (502, or 504 on a timeout). It never
// "fails open": with no healthy target it answers 503 rather than spraying
// requests over unhealthy ones as AWS does, so a lab run counts that case as a
// failure instead of hiding it.
//
// Lab-only code: production packages never import it.
package dataplane
