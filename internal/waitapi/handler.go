package waitapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"draingate.dev/draingate/api"
)

// Gate is what the handler needs from the gate: the current verdict for a
// pod, and a signal when it may have changed.
type Gate interface {
	// Verdict returns the current verdict for the pod. It returns an error
	// wrapping ErrUnknownPod when the gate does not know the pod, and one
	// wrapping ErrUIDMismatch when req.UID is set and the pod of that name
	// has another UID; any other error is the gate's own trouble (answered
	// 503, asked again by the agent). It must honour ctx and must not block
	// for long: the handler calls it again after every Changed signal.
	Verdict(ctx context.Context, req api.DrainRequest) (api.Verdict, error)
	// Changed subscribes to the pod's changes. The channel is signalled
	// whenever the pod's verdict may have changed, by a send (the handler
	// reads the verdict again and keeps receiving) or by a close (the
	// handler reads the verdict again, calls stop, and subscribes anew); a
	// spurious signal costs one Verdict call. Sends should not block the
	// gate: a channel with a buffer of one and a non-blocking send is the
	// usual shape, since one pending signal says all there is to say. A nil
	// channel means no signals: the handler then answers when the wait
	// passes. The handler calls stop exactly once per subscription, when
	// the long-poll ends; after stop the gate must not send on the channel
	// any more, and it may close it or leave it to the garbage collector.
	Changed(req api.DrainRequest) (ch <-chan struct{}, stop func())
}

// ErrUnknownPod is the gate's answer for a pod it does not know (yet): 404,
// and the agent asks again a few times.
var ErrUnknownPod = errors.New("unknown pod")

// ErrUIDMismatch is the gate's answer for a pod that exists under another
// UID than the one asked for: also a 404 (see the package documentation for
// why not a 409). The handler also treats a verdict whose UID differs from a
// non-empty requested UID as this error.
var ErrUIDMismatch = errors.New("pod has another uid")

// ErrForbidden is Config.Authorize's answer for a request the server will
// not answer for that pod: 404, as for an unknown pod (the error's text is
// logged); the agent asks a few times more, as for an unknown pod, then
// waits out its fallback.
var ErrForbidden = errors.New("forbidden")

// Defaults for Config's zero values.
const (
	DefaultMaxWait             = 30 * time.Second
	DefaultMaxWaiting          = 10000
	DefaultMaxWaitingPerSource = 16
)

// Config configures NewHandler. The zero value is usable, except that
// /readyz then answers 503 (see Ready).
type Config struct {
	// MaxWait caps a request's wait; zero or negative means DefaultMaxWait.
	// Keep it under the agent's answer slack plus its own poll wait, and
	// under the server's WriteTimeout.
	MaxWait time.Duration
	// MaxWaiting caps the long-polls held at once; past it, requests are
	// answered at once with the current verdict (the agent paces its
	// asks). Zero or negative means DefaultMaxWaiting.
	MaxWaiting int
	// Metrics, when set, records the wait API's metrics (see NewMetrics).
	Metrics *Metrics
	// Ready tells /readyz whether the server can answer (informer caches
	// synced, and so on): nil error means ready. A nil Ready means never
	// ready: a server wired without a readiness check should fail loudly,
	// not take traffic before its caches hold the pods.
	Ready func() error
	// Shutdown, when closed, makes long-polls in progress answer the
	// current verdict at once, so that http.Server.Shutdown need not wait
	// out MaxWait. Optional.
	Shutdown <-chan struct{}
	// Authorize, when set, is asked before anything about the pod is read
	// or waited for: the request and who sent it. An error wrapping
	// ErrForbidden or ErrUnknownPod is answered 404, with the same body
	// either way (a caller that may not ask about a pod does not learn
	// whether it exists); any other error 503. Why a request was refused
	// goes to Log.
	Authorize func(ctx context.Context, req api.DrainRequest, caller Caller) error
	// Log, when set, is told why requests were refused by Authorize, at
	// most one line every refusedLogEvery.
	Log *slog.Logger
	// MaxWaitingPerSource caps the long-polls held at once for one source
	// address, so that one client cannot take the global cap from the
	// others; past it, its requests are answered at once. Zero or negative
	// means DefaultMaxWaitingPerSource.
	MaxWaitingPerSource int
}

type handler struct {
	gate       Gate
	maxWait    time.Duration
	maxWaiting int64
	waiting    atomic.Int64
	metrics    *Metrics
	ready      func() error
	shutdown   <-chan struct{}
	authorize  func(ctx context.Context, req api.DrainRequest, caller Caller) error
	log        *slog.Logger

	refusedMu    sync.Mutex
	refusedAt    time.Time // when a refusal was last logged
	refusedQuiet int       // refusals not logged since

	perSource int
	mu        sync.Mutex
	bySource  map[netip.Addr]int // long-polls held per source address
}

// NewHandler returns the wait API's handler: the drain endpoint, /healthz
// (liveness: always 200 while the process serves) and /readyz (200 when
// cfg.Ready says so, else 503). Every other path is a 404 with a JSON body.
// It does not serve /metrics: mount promhttp next to it.
func NewHandler(g Gate, cfg Config) http.Handler {
	if g == nil {
		panic("waitapi: NewHandler needs a Gate")
	}
	h := &handler{
		gate:       g,
		maxWait:    cfg.MaxWait,
		maxWaiting: int64(cfg.MaxWaiting),
		metrics:    cfg.Metrics,
		ready:      cfg.Ready,
		shutdown:   cfg.Shutdown,
		authorize:  cfg.Authorize,
		log:        cfg.Log,
		perSource:  cfg.MaxWaitingPerSource,
		bySource:   map[netip.Addr]int{},
	}
	if h.perSource <= 0 {
		h.perSource = DefaultMaxWaitingPerSource
	}
	if h.maxWait <= 0 {
		h.maxWait = DefaultMaxWait
	}
	if h.maxWaiting <= 0 {
		h.maxWaiting = DefaultMaxWaiting
	}
	return h
}

const (
	drainPrefix = "/v1/namespaces/"
	drainSuffix = "/drain"
)

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	path := ""
	if r.URL != nil {
		path = r.URL.Path
	}
	switch {
	case path == "/healthz":
		h.probe(w, r, nil)
	case path == "/readyz":
		ready := h.ready
		if ready == nil {
			ready = func() error { return errors.New("no readiness check is configured") }
		}
		h.probe(w, r, ready)
	case strings.HasPrefix(path, drainPrefix) && strings.HasSuffix(path, drainSuffix) && len(path) > len(drainPrefix):
		// Anything shaped like a drain path goes to the parser, so a bad
		// name or segment count is a 400 naming the mistake, not a 404.
		h.drain(w, r)
	default:
		h.fail(w, http.StatusNotFound, fmt.Sprintf("path %s is not served here: the wait API is GET %s{namespace}/pods/{name}%s", api.Quote(path, maxQuoted), drainPrefix, drainSuffix), nil, true)
	}
}

// probe answers /healthz (check nil) and /readyz. Probes are not counted in
// the metrics: kubelets would drown the wait API's own numbers.
func (h *handler) probe(w http.ResponseWriter, r *http.Request, check func() error) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		h.fail(w, http.StatusMethodNotAllowed, fmt.Sprintf("method %s is not allowed: probes answer GET and HEAD only", api.Quote(r.Method, maxQuoted)), nil, false)
		return
	}
	if check != nil {
		if err := check(); err != nil {
			h.fail(w, http.StatusServiceUnavailable, "not ready: "+api.OneLine(err.Error()), nil, false)
			return
		}
	}
	h.write(w, http.StatusOK, map[string]string{"status": "ok"}, false)
}

// drain answers one drain request.
func (h *handler) drain(w http.ResponseWriter, r *http.Request) {
	req, err := api.ParseDrainRequest(r.Method, r.URL)
	if err != nil {
		status := http.StatusBadRequest
		if re, ok := errors.AsType[*api.RequestError](err); ok && (re.Status == http.StatusBadRequest || re.Status == http.StatusMethodNotAllowed) {
			status = re.Status
		}
		if status == http.StatusMethodNotAllowed {
			w.Header().Set("Allow", http.MethodGet)
		}
		h.fail(w, status, err.Error(), nil, true)
		return
	}
	ctx := r.Context()
	remote := remoteAddr(r)
	var v api.Verdict
	if h.authorize != nil {
		err = h.authorize(ctx, req, Caller{Addr: remote, Token: bearer(r)})
	}
	if err == nil {
		v, err = h.gate.Verdict(ctx, req)
	}
	if err == nil && !v.Released && req.Wait > 0 && !uidMismatch(req, v) {
		v, err = h.poll(ctx, req, v, min(req.Wait, h.maxWait), remote)
	}
	if ctx.Err() != nil {
		// The client went away (or the server cut the request): nobody
		// reads an answer.
		h.metrics.outcome(OutcomeCanceled)
		h.metrics.request(codeCanceled)
		return
	}
	if err == nil && uidMismatch(req, v) {
		err = ErrUIDMismatch
	}
	switch {
	case err == nil:
	case errors.Is(err, ErrForbidden):
		h.metrics.outcome(OutcomeForbidden)
		h.logRefused(req, remote, err)
		msg := unknownMessage(req)
		h.fail(w, http.StatusNotFound, msg, notFound(req, msg), true)
		return
	case errors.Is(err, ErrUIDMismatch):
		h.metrics.outcome(OutcomeUIDMismatch)
		msg := fmt.Sprintf("pod %s/%s has another uid than %s: the pod asked about is gone, or this server has not seen it yet", req.Namespace, req.Pod, req.UID)
		h.fail(w, http.StatusNotFound, msg, notFound(req, msg), true)
		return
	case errors.Is(err, ErrUnknownPod):
		h.metrics.outcome(OutcomeUnknownPod)
		msg := unknownMessage(req)
		h.fail(w, http.StatusNotFound, msg, notFound(req, msg), true)
		return
	default:
		h.metrics.outcome(OutcomeError)
		w.Header().Set("Retry-After", "1")
		h.fail(w, http.StatusServiceUnavailable, fmt.Sprintf("the gate server cannot answer for pod %s/%s now: %s; ask again", req.Namespace, req.Pod, api.Truncate(api.OneLine(err.Error()), 300)), nil, true)
		return
	}
	if v.Namespace == "" && v.Pod == "" {
		v.Namespace, v.Pod = req.Namespace, req.Pod
	}
	if v.UID == "" {
		v.UID = req.UID
	}
	if v.Released {
		h.metrics.outcome(reasonOutcome(v.Reason))
		h.metrics.released(time.Duration(v.Waited).Seconds())
	} else {
		h.metrics.outcome(OutcomeUnreleased)
	}
	h.write(w, http.StatusOK, v, true)
}

// poll holds the request until the pod is released, wait passes, the
// request's context ends, or the server shuts down; then it returns the
// current verdict. last is the verdict read before the poll began.
func (h *handler) poll(ctx context.Context, req api.DrainRequest, last api.Verdict, wait time.Duration, remote netip.Addr) (api.Verdict, error) {
	if !h.holdFor(remote) {
		return last, nil
	}
	defer h.release(remote)
	if h.waiting.Add(1) > h.maxWaiting {
		h.waiting.Add(-1)
		return last, nil
	}
	defer h.waiting.Add(-1)
	h.metrics.pollsInFlight(1)
	defer h.metrics.pollsInFlight(-1)

	timer := time.NewTimer(wait)
	defer timer.Stop()
	ch, stop := h.subscribe(req)
	defer func() { stop() }()
	for {
		// Read after subscribing, so a change between the first read and
		// the subscription is not lost.
		v, err := h.gate.Verdict(ctx, req)
		if err != nil || v.Released || uidMismatch(req, v) || wantsEvidence(v, time.Now()) {
			return v, err
		}
		select {
		case _, ok := <-ch:
			if !ok {
				stop()
				ch, stop = h.subscribe(req)
			}
		case <-timer.C:
			return h.gate.Verdict(ctx, req)
		case <-h.shutdown:
			return h.gate.Verdict(ctx, req)
		case <-ctx.Done():
			return v, ctx.Err()
		}
	}
}

// holdFor takes one of remote's long-poll places, false when it holds
// them all.
func (h *handler) holdFor(remote netip.Addr) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.bySource[remote] >= h.perSource {
		return false
	}
	h.bySource[remote]++
	return true
}

func (h *handler) release(remote netip.Addr) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.bySource[remote]--; h.bySource[remote] <= 0 {
		delete(h.bySource, remote)
	}
}

// Caller is who sent a request: its source address and the bearer token
// it showed, if any (an agent in a hostNetwork pod shows its pod's
// projected ServiceAccount token).
type Caller struct {
	Addr  netip.Addr
	Token string
}

// bearer is the request's "Authorization: Bearer" token, or "".
func bearer(r *http.Request) string {
	scheme, tok, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return ""
	}
	return strings.TrimSpace(tok)
}

// remoteAddr is the request's source address (the zero Addr when the
// server did not record one, as in tests that build requests by hand).
func remoteAddr(r *http.Request) netip.Addr {
	ap, err := netip.ParseAddrPort(r.RemoteAddr)
	if err != nil {
		return netip.Addr{}
	}
	return ap.Addr().Unmap()
}

func (h *handler) subscribe(req api.DrainRequest) (<-chan struct{}, func()) {
	ch, stop := h.gate.Changed(req)
	if stop == nil {
		stop = func() {}
	}
	return ch, stop
}

// wantsEvidence reports whether an open route would close now on fresh
// traffic evidence (its QuietBy passed), or could close sooner on newer
// evidence than the server holds (its AskBy passed): the answer goes back
// at once, so that the agent's next ask brings that evidence, instead of
// the route waiting out the long-poll on a summary the server received
// before.
func wantsEvidence(v api.Verdict, now time.Time) bool {
	for _, r := range v.Routes {
		if r.ClosedBy != "" {
			continue
		}
		if r.QuietBy != nil && !r.QuietBy.After(now) || r.AskBy != nil && !r.AskBy.After(now) {
			return true
		}
	}
	return false
}

func uidMismatch(req api.DrainRequest, v api.Verdict) bool {
	return req.UID != "" && v.UID != "" && !strings.EqualFold(req.UID, v.UID)
}

// unknownMessage is the answer about a pod the server does not know, or
// that the caller may not ask about: the same for both.
func unknownMessage(req api.DrainRequest) string {
	return fmt.Sprintf("pod %s/%s is not known to the gate server (its cache may be behind: ask again), "+
		"or the wait API does not answer this caller about it (only the pod's own agent, from the pod's addresses or with its token)", req.Namespace, req.Pod)
}

// refusedLogEvery is the least time between two log lines about refused
// requests: a flood of them costs one line now and then.
const refusedLogEvery = 10 * time.Second

// logRefused logs why a request was refused, unless it logged one less
// than refusedLogEvery ago; it counts the ones it did not log.
func (h *handler) logRefused(req api.DrainRequest, remote netip.Addr, err error) {
	if h.log == nil {
		return
	}
	h.refusedMu.Lock()
	now := time.Now()
	if now.Sub(h.refusedAt) < refusedLogEvery {
		h.refusedQuiet++
		h.refusedMu.Unlock()
		return
	}
	quiet := h.refusedQuiet
	h.refusedAt, h.refusedQuiet = now, 0
	h.refusedMu.Unlock()
	h.log.Info("wait API request refused (answered as for an unknown pod)", "pod", req.Namespace+"/"+req.Pod, "from", remote.String(),
		"why", api.Truncate(api.OneLine(err.Error()), 300), "refused_since_last_line", quiet)
}

// notFound is the verdict sent with a 404 for a pod: not released, reason
// not-found, so an agent reading the body learns the same as from the
// status.
func notFound(req api.DrainRequest, msg string) *api.Verdict {
	return &api.Verdict{Pod: req.Pod, Namespace: req.Namespace, UID: req.UID, Reason: api.ReasonNotFound, Message: msg}
}

// reasonOutcome keeps the outcome label's values to a known set whatever
// the gate puts in Reason.
func reasonOutcome(r api.Reason) string {
	switch r {
	case api.ReasonDrained, api.ReasonDeadline, api.ReasonNotFound, api.ReasonNotTerminating, api.ReasonNoRoutes:
		return string(r)
	case "":
		return outcomeReleased
	}
	return outcomeOther
}

// errorBody is every non-200 answer: {"error": "..."}, with a pod's verdict
// fields alongside for a 404 about a pod.
type errorBody struct {
	Error string `json:"error"`
	*api.Verdict
}

func (h *handler) fail(w http.ResponseWriter, status int, msg string, v *api.Verdict, count bool) {
	h.write(w, status, errorBody{Error: msg, Verdict: v}, count)
}

// write answers with body as JSON. A body that cannot be encoded (a
// verdict with a time outside years 0–9999) is the server's fault: 503.
func (h *handler) write(w http.ResponseWriter, status int, body any, count bool) {
	b, err := json.Marshal(body)
	if err != nil {
		status = http.StatusServiceUnavailable
		b = []byte(`{"error":"the gate server could not encode its answer: ask again"}`)
	}
	b = append(b, '\n')
	hd := w.Header()
	hd.Set("Content-Type", "application/json")
	hd.Set("Content-Length", strconv.Itoa(len(b)))
	hd.Set("Cache-Control", "no-store")
	hd.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	w.Write(b)
	if count {
		h.metrics.request(strconv.Itoa(status))
	}
}

// maxQuoted bounds a caller's input quoted in a message, so a huge path
// cannot flood a log line or a response body.
const maxQuoted = 80
