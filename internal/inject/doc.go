// Package inject adds draingate's preStop agent to pods at admission, so that
// their containers wait for the gate before SIGTERM without the user writing
// a hook.
//
// The entry points:
//   - Wanted says whether a pod is to be injected (the draingate.dev/inject
//     label on the pod or its namespace, never draingate's own namespace);
//   - Mutate is the mutation as a pure function: the agent's volume (an
//     emptyDir filled by an init container, or an image volume), a preStop
//     hook in each gated container that waits and then runs the container's
//     original hook, and a grace period raised to fit. A pod is injected as a
//     whole or returned unchanged with warnings that say why;
//   - Patch turns Mutate's result into a JSON patch that touches only what
//     changed;
//   - NewHandler serves them as a mutating admission webhook on pod CREATE.
//     It admits every pod: one it cannot inject passes unchanged, with an
//     admission warning.
//
// Settings carries what the server configures (agent image, gate server URL,
// the agent's default waits); pod annotations override the waits per pod.
//
// docs/injection.md is the full contract: what an injected pod gets, which
// containers are gated, how each kind of original hook is carried over,
// hostNetwork and other special pods, and the admission rules.
package inject
