package dataplane

import (
	"context"
	"errors"
	"io"
	"log"
	"maps"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httputil"
	"net/netip"
	"net/url"
	"sync"
	"syscall"
	"time"
)

// Config sets up a Proxy. The zero value is usable: it applies events at once
// and uses ALB-like timeouts.
type Config struct {
	// Name names the node in reports, e.g. "lb-1"; see Proxy.Name.
	Name string
	// Propagation draws each event's delay; nil applies events at once.
	Propagation Propagation
	// SourceIP, when valid, is the local address the proxy connects to
	// targets from, so a target sees it as the request's source and can
	// tell this node from the others of a Balancer. It must be an address
	// of this host. The zero value lets the operating system choose.
	SourceIP netip.Addr
	// ConnectTimeout bounds dialing a target (default 10 s, an ALB's); a
	// timeout answers 504.
	ConnectTimeout time.Duration
	// ResponseTimeout bounds the wait for a target's response headers
	// (default 60 s, an ALB's idle timeout); a timeout answers 504.
	ResponseTimeout time.Duration
	// IdleConnTimeout closes keep-alive connections to targets left idle
	// this long (default 60 s).
	IdleConnTimeout time.Duration
	// Flows makes the node pass connections through, as an NLB does,
	// instead of routing each request, as an ALB does: a client connection
	// (a flow) goes to the target in rotation when it opens and stays there,
	// over one connection to that target, until either end closes it, even
	// after the node took the target out of rotation. Serve the node with
	// Server, which gives each client connection its flow.
	Flows bool
	// PreserveClientIP, with Flows, has a flow's connection to its target
	// come from the client's address instead of SourceIP, as an NLB target
	// group with client IP preservation does: clients must then connect
	// from addresses the host can also dial targets from.
	PreserveClientIP bool
	// ErrorLog gets the forwarding errors net/http/httputil reports; nil
	// discards them, the counts in Stats being what a lab run reads.
	ErrorLog *log.Logger
	// Routing is how the node picks a target for a request (or a flow):
	// RoundRobin (the zero value), LeastOutstanding (an ALB's
	// least_outstanding_requests: the target with the fewest requests in
	// flight from this node, round robin among ties; requests only) or
	// Random (seeded with Seed).
	Routing Routing
	Seed    uint64
}

// Routing is a node's way of picking targets (Config.Routing).
type Routing string

// The routings.
const (
	RoundRobin       Routing = ""
	LeastOutstanding Routing = "lor"
	Random           Routing = "random"
)

// StatusClientClosed is recorded, like an ALB's 460, when the client went
// away before the target answered. It is not a failure of the data plane.
const StatusClientClosed = 460

// Stats counts what clients got from the proxy.
type Stats struct {
	Total int64
	// Failed counts answers of 500 and above, whether from the proxy (no
	// target, target error) or from the target, plus Aborted.
	Failed int64
	// Aborted counts responses cut off after their status line because the
	// target broke the connection mid-body.
	Aborted int64
	// NoTarget counts the 503s the proxy answered itself because its
	// rotation was empty: a node that learnt the old targets' removal
	// before the new ones' arrival. No pod saw those requests.
	NoTarget int64
	ByStatus map[int]int64
	// Causes counts the errors the proxy answered for a target (its 502s
	// and 504s) by what the transport saw: "connection refused",
	// "connection reset", "closed before answering", "timeout" or the
	// error's own text.
	Causes map[string]int64
	// ByTarget holds only requests that were routed to a target.
	ByTarget map[Target]TargetStats
}

// TargetStats counts the requests routed to one target.
type TargetStats struct {
	Requests, Failed int64
	// First and Last are when the proxy picked this target for its first and
	// latest request (in Flows mode: sent it a request on one of its flows);
	// Last is never after StoppedAt for a target that left rotation and did
	// not come back, unless in Flows mode, where established flows go on.
	First, Last time.Time
}

// Proxy is the simulated data plane; it is an http.Handler. Create it with
// New, feed it with Apply, and Close it when done.
type Proxy struct {
	cfg       Config
	transport *http.Transport
	forward   *httputil.ReverseProxy

	mu       sync.Mutex
	closed   bool
	targets  map[Target]*targetView
	rotation []Target // sorted; replaced, never modified, on change
	next     uint64   // round-robin cursor
	// outstanding counts each target's requests in flight
	// (LeastOutstanding); rng draws Random's picks.
	outstanding map[Target]int
	rng         *rand.Rand
	timeline    []Sample
	changed     chan struct{} // closed and replaced when rotation changes

	flowsMu sync.Mutex
	flows   map[net.Conn]*flow // Flows mode: the client connections open
	spliced map[net.Conn]*flow // Flows mode: the upgraded ones, hijacked

	statsMu sync.Mutex
	stats   Stats
	picks   map[Target][]time.Time // when each request to a target was picked
}

// New returns a Proxy with no targets.
func New(cfg Config) *Proxy {
	if cfg.ConnectTimeout <= 0 {
		cfg.ConnectTimeout = 10 * time.Second
	}
	if cfg.ResponseTimeout <= 0 {
		cfg.ResponseTimeout = 60 * time.Second
	}
	if cfg.IdleConnTimeout <= 0 {
		cfg.IdleConnTimeout = 60 * time.Second
	}
	if cfg.ErrorLog == nil {
		cfg.ErrorLog = log.New(io.Discard, "", 0)
	}
	dialer := &net.Dialer{
		Timeout:   cfg.ConnectTimeout,
		KeepAlive: 30 * time.Second,
	}
	if cfg.SourceIP.IsValid() {
		dialer.LocalAddr = net.TCPAddrFromAddrPort(netip.AddrPortFrom(cfg.SourceIP, 0))
	}
	p := &Proxy{
		cfg: cfg,
		transport: &http.Transport{
			// Proxy stays nil: an HTTP_PROXY in the environment must not
			// take the lab's traffic off 127.0.0.1 and the pod network.
			DialContext:           dialer.DialContext,
			MaxIdleConnsPerHost:   1024, // a load test keeps many per target, as an ALB does
			IdleConnTimeout:       cfg.IdleConnTimeout,
			ResponseHeaderTimeout: cfg.ResponseTimeout,
			DisableCompression:    true, // pass bodies through as the target sent them
		},
		targets:     map[Target]*targetView{},
		outstanding: map[Target]int{},
		rng:         rand.New(rand.NewPCG(cfg.Seed, cfg.Seed^0x9e3779b97f4a7c15)),
		changed:     make(chan struct{}),
		stats:       Stats{ByStatus: map[int]int64{}, Causes: map[string]int64{}, ByTarget: map[Target]TargetStats{}},
		picks:       map[Target][]time.Time{},
		flows:       map[net.Conn]*flow{},
		spliced:     map[net.Conn]*flow{},
	}
	p.forward = &httputil.ReverseProxy{
		Rewrite:      rewrite,
		Transport:    p.transport,
		ErrorHandler: p.answerError,
		ErrorLog:     cfg.ErrorLog,
	}
	return p
}

// Name returns the node's name, Config.Name.
func (p *Proxy) Name() string { return p.cfg.Name }

type targetKey struct{}

func rewrite(pr *httputil.ProxyRequest) {
	t := pr.In.Context().Value(targetKey{}).(Target)
	pr.SetURL(&url.URL{Scheme: "http", Host: t.String()})
	pr.Out.Host = pr.In.Host // an ALB passes the client's Host through
	pr.SetXForwarded()

	// http.Transport silently resends a replayable request (GET, HEAD, or
	// any request whose body it can rewind) when a reused keep-alive
	// connection fails before the first response byte, and ReverseProxy
	// makes body-less requests replayable on purpose. An ALB does not retry,
	// and a retry would hide exactly the failures the lab counts. A body
	// without GetBody is never replayable: see net/http's isReplayable and
	// persistConn.shouldRetryRequest.
	body := pr.Out.Body
	if body == nil {
		body = http.NoBody
	}
	pr.Out.Body = oneShotBody{body}
	pr.Out.GetBody = nil
}

// oneShotBody hides the concrete body type (http.NoBody in particular) from
// the Transport, which then cannot rewind it and so never retries.
type oneShotBody struct{ io.ReadCloser }

func (p *Proxy) answerError(w http.ResponseWriter, r *http.Request, err error) {
	code := http.StatusBadGateway
	var ne net.Error
	switch {
	case r.Context().Err() != nil:
		code = StatusClientClosed
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		code = http.StatusGatewayTimeout
	}
	if code != StatusClientClosed {
		p.statsMu.Lock()
		p.stats.Causes[Cause(err)]++
		p.statsMu.Unlock()
	}
	http.Error(w, http.StatusText(code), code)
}

// Cause names what a transport error was, in the words of an ELB access
// log's reasons: the target refused the connection, reset it, closed it
// before answering (a keep-alive connection it closed as the request
// went out), or did not answer in time.
func Cause(err error) string {
	var ne net.Error
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		return "connection refused"
	case errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE):
		return "connection reset"
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return "closed before answering"
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		return "timeout"
	case errors.Is(err, syscall.EHOSTUNREACH), errors.Is(err, syscall.ENETUNREACH):
		return "host unreachable"
	}
	return err.Error()
}

// ServeHTTP forwards r to the next target in rotation, round robin, or
// answers 503 when there is none; in Flows mode, to its flow's target.
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if p.cfg.Flows {
		p.serveFlow(w, r)
		return
	}
	t, pickedAt, ok := p.pick()
	if !ok {
		p.noTarget(w)
		return
	}
	sw := &statusWriter{ResponseWriter: w}
	defer func() {
		p.done(t)
		// ReverseProxy panics with http.ErrAbortHandler when the target
		// breaks mid-body: count it, then let net/http reset the client.
		if v := recover(); v != nil {
			p.record(&t, pickedAt, sw.final(), true)
			panic(v)
		}
		p.record(&t, pickedAt, sw.final(), false)
	}()
	p.forward.ServeHTTP(sw, r.WithContext(context.WithValue(r.Context(), targetKey{}, t)))
}

// noTarget answers 503 for an empty rotation and counts it.
func (p *Proxy) noTarget(w http.ResponseWriter) {
	http.Error(w, "no target in rotation", http.StatusServiceUnavailable)
	p.record(nil, time.Time{}, http.StatusServiceUnavailable, false)
}

func (p *Proxy) pick() (Target, time.Time, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed || len(p.rotation) == 0 {
		return Target{}, time.Time{}, false
	}
	var t Target
	switch p.cfg.Routing {
	case Random:
		t = p.rotation[p.rng.IntN(len(p.rotation))]
	case LeastOutstanding:
		// The fewest in flight, the first such from the cursor on.
		n := uint64(len(p.rotation))
		best := -1
		for i := range n {
			c := p.rotation[(p.next+i)%n]
			if o := p.outstanding[c]; best < 0 || o < best {
				t, best = c, o
			}
		}
		p.next++
	default:
		t = p.rotation[p.next%uint64(len(p.rotation))]
		p.next++
	}
	p.outstanding[t]++
	// Taken under the view's lock, so it orders against StoppedAt.
	return t, time.Now(), true
}

// done ends a request to t picked by pick (ServeHTTP's).
func (p *Proxy) done(t Target) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.outstanding[t]--; p.outstanding[t] <= 0 {
		delete(p.outstanding, t)
	}
}

func (p *Proxy) record(t *Target, pickedAt time.Time, code int, aborted bool) {
	failed := code == 0 || code >= 500 || aborted // 0: a flow cut (Config.Flows)
	p.statsMu.Lock()
	defer p.statsMu.Unlock()
	s := &p.stats
	s.Total++
	s.ByStatus[code]++
	if failed {
		s.Failed++
	}
	if aborted {
		s.Aborted++
	}
	if t == nil {
		s.NoTarget++
		return
	}
	p.picks[*t] = append(p.picks[*t], pickedAt)
	ts := s.ByTarget[*t]
	ts.Requests++
	if failed {
		ts.Failed++
	}
	if ts.First.IsZero() {
		ts.First = pickedAt
	}
	if pickedAt.After(ts.Last) {
		ts.Last = pickedAt
	}
	s.ByTarget[*t] = ts
}

// Record counts a request that a proxy outside this package routed on this
// node's behalf (the lab mirrors a real HAProxy this way): t is the target it
// picked at pickedAt, nil when it had none; code is the answer's status (0
// when there was none); aborted when the answer was cut off; cause, when
// not empty, is counted in Stats.Causes. Stats, SentSince and the
// per-target figures then count it as one of the node's.
func (p *Proxy) Record(t *Target, pickedAt time.Time, code int, aborted bool, cause string) {
	if cause != "" {
		p.statsMu.Lock()
		p.stats.Causes[cause]++
		p.statsMu.Unlock()
	}
	p.record(t, pickedAt, code, aborted)
}

// SentSince counts the requests the proxy picked t for at or after since,
// among those already over (a request is recorded when it ends).
func (p *Proxy) SentSince(t Target, since time.Time) int {
	p.statsMu.Lock()
	defer p.statsMu.Unlock()
	n := 0
	for _, at := range p.picks[t] {
		if !at.Before(since) {
			n++
		}
	}
	return n
}

// Stats returns a snapshot of the request counts.
func (p *Proxy) Stats() Stats {
	p.statsMu.Lock()
	defer p.statsMu.Unlock()
	s := p.stats
	s.ByStatus = maps.Clone(s.ByStatus)
	s.Causes = maps.Clone(s.Causes)
	s.ByTarget = maps.Clone(s.ByTarget)
	return s
}

// statusWriter remembers the final status sent to the client.
type statusWriter struct {
	http.ResponseWriter
	code int
}

func (w *statusWriter) WriteHeader(code int) {
	// 1xx answers are interim, except 101 which hands the connection over.
	if w.code == 0 && (code >= 200 || code == http.StatusSwitchingProtocols) {
		w.code = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.code == 0 {
		w.code = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach Flush and Hijack underneath.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func (w *statusWriter) final() int {
	if w.code == 0 {
		return http.StatusOK // what net/http sends for a handler that wrote nothing
	}
	return w.code
}
