// Package app is the lab's "well-behaved app": a plain HTTP server that does
// everything right on SIGTERM (stop accepting, finish in-flight requests,
// close idle keep-alive connections, exit 0) and still drops requests when a
// load balancer keeps sending them after it stopped. That is the point: the
// failures the lab counts come from the routing race, not from a sloppy app.
//
// It answers GET / (the load), GET /healthz (the readiness probe, always
// 200) and GET /livez (the liveness probe: 200 until a POST /fail-liveness,
// 500 from then on, so a lab run can have the kubelet restart the
// container).
//
// It logs on stdout, so a lab run can line its shutdown up against the load
// balancer's timeline:
//
//	listening <addr> <unix-ns>
//	liveness-failed <unix-ns>    the first failing /livez, at most once
//	sigterm <unix-ns>
//	source <ip> <total> <after-sigterm>
//	exit <unix-ns>
//
// with one "source" line per address GET / requests came from, sorted by
// address, just before "exit": how many there were and how many of them
// reached the handler after SIGTERM. The lab's load balancer nodes each
// connect from their own address, so these lines say which node sent what.
// net/http answers no request it reads after the shutdown began, so the
// after-sigterm count only holds those that slipped in between the signal
// and the shutdown.
//
// It uses the standard library only, so cmd/draingate-demoapp builds as a
// static binary that runs in a scratch image.
//
// Lab-only code: production packages never import it.
package app
