// Package server is `draingate serve`: it wires the parts and runs them.
// It holds the options and its own flags (each kind of route and the
// webhook register theirs), the informer cache and what it keeps of each
// object (cache.go), the HTTP listeners and the kinds of route it knows
// (kinds.go, the one place that names them). It decides nothing itself.
//
// One terminating pod's drain, each part entered once per ask:
//
//	the agent (internal/prestop) asks the wait API (internal/waitapi),
//	  which lets only the pod's own agent in (internal/agentauth)
//	  and holds the long-poll;
//	the tracker (internal/drain) loads the pod's memory (the shared
//	  record, internal/ledger), has every kind of route observe it
//	  (internal/route/<kind>; target groups through the AWS poller,
//	  internal/aws/elbv2), steps the gate (internal/gate, which reads the
//	  traffic through internal/evidence) and hands the decision once to
//	  each consumer: the shared memory, what the drains teach
//	  (internal/learn), the pod's Events (internal/events).
//
// The webhook (internal/webhook) injects the agent and sizes new pods by
// what the kinds and learning say. Files: server.go (options, wiring,
// Run), cli.go (flags), cache.go, kinds.go, metrics.go.
package server
