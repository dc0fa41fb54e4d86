// Package sidecar plays a service mesh in the lab's "sidecar" scenario, to
// show what a sidecar added after draingate does to it.
//
// Meshes inject their proxy with a mutating webhook of their own, which the
// API server may call after draingate's; the proxy then receives the pod's
// traffic and, like Envoy not told to drain, stops accepting new
// connections as soon as it gets SIGTERM. Unless draingate's webhook,
// called again because its reinvocationPolicy is IfNeeded, gates the new
// container too, the proxy has no preStop wait: while the agent holds the
// app until the load balancers have let the pod go, the proxy in front of
// it already refuses them. (draingate gates containers added later since
// this scenario showed it failing.)
//
// It has two halves:
//   - Proxy (and Main, run by the demo app's binary as
//     `draingate-demoapp proxy`): a plain TCP proxy that closes its listener
//     on SIGTERM and lets established connections run for a bounded drain;
//   - the webhook: Install serves NewHandler over HTTPS from the lab's
//     process, with a CA made in memory, and registers it under a name that
//     sorts after draingate's configuration; Mutate (and Patch) move the
//     app to another port and put the proxy on the port its Service
//     targets.
//
// Lab-only code: production packages never import it.
package sidecar
