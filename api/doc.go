// Package api holds the wire types of draingate's wait API, shared by the
// gate server and the preStop agent:
//
//	GET /v1/namespaces/{namespace}/pods/{name}/drain?uid=UID&wait=20s
//
// The server answers at once when the pod is released, else holds the
// request for up to wait (it caps the value) and answers the current
// Verdict; the agent asks again until it is released or its own deadline
// comes. 400 means a malformed request, 405 a method other than GET, 404 a
// pod the server does not know (its cache may be behind: the agent retries a
// few times); a caller's mistake is never a 5xx.
//
// ParseDrainRequest lives here, not in the server, so the server, the agent
// and the fuzz test agree on one grammar; OneLine, so that both put a
// multi-line error on one line the same way; Quote and Truncate, so that
// every message cuts a caller's value short the same way.
//
// The package must stay standard-library only and must never import the
// server: the agent links it, Go compiles whole packages, and the agent has
// to stay a small static binary.
package api
