// Package evidence turns what a terminating pod's agent saw of its inbound
// traffic into a judgement the gate can act on: whether the sources that
// still send to the pod through a route have gone quiet, and from when a
// false quiet is as unlikely as the operator asked (ε).
//
// Two functions carry it. Read classifies the agent's summary (api.Traffic)
// on the server's clock: each source is the node's own (probes, SNAT) or
// remote (load balancer nodes, clients); arrivals the agent could not
// attribute are unknown. Judge weighs the evidence for one route whose
// owner took the pod out: it fits each source's arrivals (FitArrivals: a
// Poisson model of single or sampled arrivals, and a two-state Markov model
// of the agent's looks, which weighs how regular a source is), turns each
// fit into a quiet bound, and applies the closing rules: before the
// route's tail only when every source was fitted and passed the shape
// check (shape: bursts, heavy-tailed pauses, a falling rate, a watch too
// short, an older agent take the early close away), the route's senders
// are known and each was seen (Senders), and the unknown arrivals do not
// outnumber the attributed ones; past it while any source still sends;
// and never on evidence older than the close. docs/evidence.md has the
// rules and what the catalogue (catalogue_test.go) measured of them.
//
// What the agent sees is internal/traffic's; what the gate does with a
// judgement (phases, deadlines, errors) is internal/gate's. The package is
// pure: the standard library and the wire types in api.
package evidence
