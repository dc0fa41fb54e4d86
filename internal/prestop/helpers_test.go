package prestop

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"draingate.dev/draingate/api"
)

const testUID = "3f1c2a9e-7b1d-4c8e-9a6f-0d2b4e6f8a10"

// reply is what the fake gate does with one ask.
type reply struct {
	status  int // 0 means 200
	verdict *api.Verdict
	body    string
	// hold keeps the request for its wait before answering, as a gate does
	// while nothing changes.
	hold bool
	// hangUp closes the connection without answering.
	hangUp bool
}

type gateAsk struct {
	at   time.Time
	req  api.DrainRequest
	auth string // the Authorization header
}

// gate is a fake gate server on the in-memory network speaking the wire
// format; script decides each answer from the ask's number (0-based) and
// request.
type gate struct {
	URL    string
	script func(n int, req api.DrainRequest) reply

	mu   sync.Mutex
	asks []gateAsk
}

func newGate(t *testing.T, script func(n int, req api.DrainRequest) reply) *gate {
	t.Helper()
	g := &gate{script: script}
	g.URL = serveMem(t, http.HandlerFunc(g.serve))
	return g
}

func (g *gate) serve(w http.ResponseWriter, r *http.Request) {
	req, err := api.ParseDrainRequest(r.Method, r.URL)
	if err != nil {
		var re *api.RequestError
		errors.As(err, &re)
		http.Error(w, re.Message, re.Status)
		return
	}
	g.mu.Lock()
	n := len(g.asks)
	g.asks = append(g.asks, gateAsk{time.Now(), req, r.Header.Get("Authorization")})
	g.mu.Unlock()
	rep := g.script(n, req)
	if rep.hold {
		select {
		case <-time.After(req.Wait):
		case <-r.Context().Done():
			return
		}
	}
	if rep.hangUp {
		conn, _, err := w.(http.Hijacker).Hijack()
		if err == nil {
			conn.Close()
		}
		return
	}
	if rep.status == 0 {
		rep.status = http.StatusOK
	}
	if rep.verdict != nil {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(rep.status)
		json.NewEncoder(w).Encode(rep.verdict)
		return
	}
	w.WriteHeader(rep.status)
	io.WriteString(w, rep.body)
}

func (g *gate) recorded() []gateAsk {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]gateAsk(nil), g.asks...)
}

func released(reason api.Reason) reply {
	return reply{verdict: &api.Verdict{
		Pod: "web-0", Namespace: "shop", UID: testUID, Released: true, Reason: reason,
		Routes: []api.Route{{Kind: "endpointslice", Name: "web-x7k2p", State: "closed"}},
	}}
}

func waiting(hold bool) reply {
	return reply{hold: hold, verdict: &api.Verdict{
		Pod: "web-0", Namespace: "shop", UID: testUID,
		Routes: []api.Route{
			{Kind: "endpointslice", Name: "web-x7k2p", State: "closed", Detail: "closed long ago"},
			{Kind: "targetgroup", Name: "tg-other", State: "ignored", Detail: "never registered"},
			{Kind: "targetgroup", Name: "tg-web", State: "draining", Detail: "the target is draining; a source sent after the tail's end"},
		},
	}}
}

// hookRecorder is an http-get hook target that notes when it was hit.
type hookRecorder struct {
	URL  string
	mu   sync.Mutex
	hits []time.Time
}

func newHookRecorder(t *testing.T) *hookRecorder {
	t.Helper()
	h := &hookRecorder{}
	h.URL = serveMem(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.mu.Lock()
		h.hits = append(h.hits, time.Now())
		h.mu.Unlock()
	}))
	return h
}

func (h *hookRecorder) hook() Hook { return Hook{HTTPGet: h.URL + "/shutdown"} }

func (h *hookRecorder) count() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.hits)
}

// only returns the one hit, failing the test if there was not exactly one.
func (h *hookRecorder) only(t *testing.T) time.Time {
	t.Helper()
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.hits) != 1 {
		t.Fatalf("hook ran %d times, want once", len(h.hits))
	}
	return h.hits[0]
}

func config(server string, log io.Writer) Config {
	return Config{
		Server: server, Namespace: "shop", Pod: "web-0", UID: testUID,
		MaxWait: 5 * time.Second, Fallback: time.Second, PollWait: 200 * time.Millisecond,
		Out: log,
	}
}

// closedPort is an address nothing listens on: connection refused.
func closedPort(t *testing.T) string {
	t.Helper()
	return "http://" + testNet.unused()
}

// memNet is the in-memory network the agent dials in these tests (see
// TestMain): a listener per host:port, connections made with net.Pipe.
// Unlike loopback TCP, a goroutine blocked on such a connection is durably
// blocked, so tests can run the agent and its peers in a synctest bubble,
// where time is fake: waits cost nothing and their length is exact.
type memNet struct {
	mu        sync.Mutex
	listeners map[string]*memListener
	n         int
}

var testNet = &memNet{listeners: map[string]*memListener{}}

// unused returns a new address that nothing listens on.
func (m *memNet) unused() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.n++
	return fmt.Sprintf("host-%d.test:8080", m.n)
}

// listen opens a listener on a new address; inside a bubble, call it there.
func (m *memNet) listen() *memListener {
	l := &memListener{net: m, addr: m.unused(), conns: make(chan net.Conn), done: make(chan struct{})}
	m.mu.Lock()
	m.listeners[l.addr] = l
	m.mu.Unlock()
	return l
}

func (m *memNet) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	m.mu.Lock()
	l := m.listeners[addr]
	m.mu.Unlock()
	refused := &net.OpError{Op: "dial", Net: network, Addr: memAddr(addr), Err: syscall.ECONNREFUSED}
	if l == nil {
		return nil, refused
	}
	client, server := net.Pipe()
	select {
	case l.conns <- server:
		return client, nil
	case <-l.done:
		client.Close()
		server.Close()
		return nil, refused
	case <-ctx.Done():
		client.Close()
		server.Close()
		return nil, ctx.Err()
	}
}

type memListener struct {
	net   *memNet
	addr  string
	conns chan net.Conn
	done  chan struct{}
	once  sync.Once
}

func (l *memListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *memListener) Close() error {
	l.once.Do(func() {
		l.net.mu.Lock()
		delete(l.net.listeners, l.addr)
		l.net.mu.Unlock()
		close(l.done)
	})
	return nil
}

func (l *memListener) Addr() net.Addr { return memAddr(l.addr) }

type memAddr string

func (memAddr) Network() string  { return "mem" }
func (a memAddr) String() string { return string(a) }

// serveMem serves h on a new address of the in-memory network until the
// test ends, and returns its URL.
func serveMem(t *testing.T, h http.Handler) string {
	t.Helper()
	l := testNet.listen()
	srv := &http.Server{Handler: h}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	return "http://" + l.addr
}

func mustContain(t *testing.T, log string, wants ...string) {
	t.Helper()
	for _, w := range wants {
		if !strings.Contains(log, w) {
			t.Errorf("log lacks %q:\n%s", w, log)
		}
	}
}
