// Package app is the lab's "well-behaved app": a plain HTTP server that does
// everything right on SIGTERM (stop accepting, finish in-flight requests,
// close idle keep-alive connections, exit 0) and still drops requests when a
// load balancer keeps sending them after it stopped. That is the point: the
// failures the lab counts come from the routing race, not from a sloppy app.
//
// It logs "sigterm <unix-ns>" and "exit <unix-ns>" on stdout so a lab run can
// line its shutdown up against the load balancer's timeline. It uses the
// standard library only, so cmd/draingate-demoapp builds as a static binary
// that runs in a scratch image.
//
// Lab-only code: production packages never import it.
package app
