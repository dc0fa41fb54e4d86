// Package prestop is the preStop agent's logic: ask the gate server whether
// this pod is out of every route, long-polling until it says released or the
// agent's own deadline comes; fall back to a bounded wait when no gate server
// can be asked; then run the container's original preStop hook.
//
// What it must never do:
//   - block termination past its deadline: every request, backoff and
//     fallback wait is bounded by max-wait from the start (the original
//     hook's own time comes on top; the injecting webhook sizes the grace
//     period to fit max-wait plus the hook);
//   - release early because something failed: once a gate server has
//     answered, errors only lengthen the wait, up to the deadline; only
//     "no gate server answered at all" (or one that refuses the request)
//     ends a wait on the fallback timer;
//   - fail the hook: Run always returns and the command always exits 0,
//     whatever the server, the flags or the original hook did, because a
//     failed preStop hook only costs an Event while a stuck one costs the
//     whole grace period.
//
// Traffic evidence (--traffic-evidence, on by default): from the agent's
// start until Run returns, a traffic.Watcher samples the pod's own TCP
// sockets every 100 ms (the hook runs in the pod's network namespace), and
// every ask carries its summary of the inbound traffic so far (which remote
// addresses still send to which of the pod's ports, and how recently) for
// the server to weigh against each route's tail; internal/traffic's doc has
// the counting rules. The evidence can only inform the server, never end a
// wait on the agent's side. When the kernel refuses the first reading the
// agent says so in one line and asks without evidence; a reading that
// fails later ends the sampling the same way, and from then on the asks go
// without evidence rather than with a quiet nobody watched. A bad value of
// the flag only turns the evidence off.
//
// It uses the standard library, draingate's api package and the stdlib-only
// internal/cli, internal/version, internal/backoff and internal/traffic
// only (not even net/http: see httpget.go), so the agent stays a small
// static binary that needs nothing from the app's image.
package prestop
