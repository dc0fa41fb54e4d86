// Package waitapi is the wait API's HTTP handler for draingate serve: the
// endpoint the preStop agent (draingate-prestop) asks, again and again,
// whether its pod may stop yet.
//
//	GET /v1/namespaces/{namespace}/pods/{name}/drain?uid=UID&wait=20s
//
// The request is read only through api.ParseDrainRequest, so the server, the
// agent and the fuzz tests share one grammar. The handler answers at once
// when the pod is released or wait is zero; otherwise it holds the request
// (a long-poll) until the Gate releases the pod, the wait passes (capped by
// Config.MaxWait), or the client goes away, and then answers the current
// api.Verdict with 200.
//
// Statuses, and who is to blame for each:
//
//   - 200: a verdict, released or not; the agent asks again while it is not.
//   - 400: a malformed request (path segments, names, uid, wait), with the
//     parser's one-sentence message as {"error": "..."}.
//   - 405: a method other than GET (GET or HEAD for /healthz and /readyz),
//     with an Allow header.
//   - 404: a path this handler does not serve; or a pod the gate does not
//     know (ErrUnknownPod: its cache may be behind, so the agent retries a
//     few times); or a pod that exists under another UID (ErrUIDMismatch).
//     Both pod cases carry a verdict with reason "not-found" and a message.
//   - 503: the gate failed for a reason of its own (any other error), or
//     /readyz while not ready. The agent retries a 503 until its deadline:
//     errors lengthen waits, they never release a pod early.
//
// A caller's mistake is never a 5xx: every 5xx this handler sends is the
// server's own trouble, so a 5xx alert means something to fix on the server.
//
// Why a UID mismatch is a 404 and not a 409: the server cannot tell which
// side is stale. Either the pod the agent asks for is gone and its name has
// been taken by a new pod (the agent should stop waiting), or the server's
// cache has not yet seen the new pod the agent belongs to (the agent should
// ask again in a moment). A 404 serves both: the agent retries a few times,
// which fixes a lagging cache, and then stops asking, which ends the wait for
// a pod that is gone. A 409 would make the agent stop at the first answer,
// turning a cache a second behind into a pod stopped on the fallback timer.
// This is also what api.ReasonNotFound documents.
//
// Bounds: the handler starts no goroutines of its own; a long-poll lives in
// the request's goroutine, ends at the capped wait or when the request's
// context ends (client gone, server shutting down), and at most
// Config.MaxWaiting long-polls are held at once (past that, requests are
// answered at once and the agent paces its asks). The handler never logs or
// echoes request bodies; error messages quote the caller's input only as
// api.ParseDrainRequest does, cut short.
package waitapi
