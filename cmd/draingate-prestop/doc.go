// Command draingate-prestop is draingate's preStop agent, a small static
// binary (no libc, no shell) that an init container copies into the pod and
// the app container runs as its preStop exec hook:
//
//	draingate-prestop install DIR
//	draingate-prestop version
//	draingate-prestop wait [--server URL] [--max-wait 90s] [--fallback 30s]
//	    [--poll-wait 20s] [--traffic-evidence=true|false]
//	    [--then-http-get URL | --then-sleep D] [-- ARGV...]
//
// wait identifies the pod from DRAINGATE_POD_NAME, DRAINGATE_POD_NAMESPACE
// and DRAINGATE_POD_UID (downward API), asks the gate server until it
// releases the pod or max-wait passes, falls back to a bounded wait when no
// gate server answers, then runs the container's original hook. Unless
// --traffic-evidence=false, it watches the pod's inbound TCP traffic from
// its own sockets meanwhile and sends a summary with each ask. Every flag
// also reads DRAINGATE_<FLAG>. The logic lives in internal/prestop and
// internal/traffic.
//
// It must never block termination past its deadline and never fail the
// hook: wait exits 0 whatever happened. install exits 1 on failure, so the
// init container fails loudly instead of leaving a pod without its agent.
// It imports the standard library and this module's api, internal/prestop
// and the stdlib-only internal/cli, internal/version, internal/backoff and
// internal/traffic only (its size test also admits golang.org/x/sys), so it
// stays small.
package main
