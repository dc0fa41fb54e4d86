// Package drain decides for every terminating pod, in one place: the
// tracker keeps each pod's state and, at each step (an ask of its agent,
// a change of its routes, a tail's end by the clock), runs the pod's drain
// as one pipeline:
//
//  1. load the pod's memory: the replica's own, merged with the record
//     the replicas share (Store; internal/ledger keeps it in a Lease);
//  2. observe its routes through every kind (route.Source);
//  3. step the gate (gate.Step, a pure function of what was observed and
//     the clock);
//  4. hand the Decision, once, to each Consumer: the shared memory first
//     (what the step added to the record), then what the server wired
//     (learning, internal/learn; the pod's Events, internal/events).
//
// No consumer calls back into the tracker: what follows from a decision
// consumes it. The tracker answers the wait API (Verdict, Changed) and
// sets a timer for the next time the verdict can change by the clock.
//
// What it must never do: release a pod early because something failed. A
// failed observation answers no verdict and keeps the memory; a shared
// record that cannot be read leaves the replica its own, later,
// observations; a restart starts every tail again from its own first
// observation (or the shared record's, earlier). Missing data may lengthen
// a wait, never shorten one.
package drain
