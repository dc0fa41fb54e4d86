package prestop

import (
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
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
	at  time.Time
	req api.DrainRequest
}

// gate is a fake gate server on loopback speaking the wire format; script
// decides each answer from the ask's number (0-based) and request.
type gate struct {
	*httptest.Server
	script func(n int, req api.DrainRequest) reply

	mu   sync.Mutex
	asks []gateAsk
}

func newGate(t *testing.T, script func(n int, req api.DrainRequest) reply) *gate {
	t.Helper()
	g := &gate{script: script}
	g.Server = httptest.NewServer(http.HandlerFunc(g.serve))
	t.Cleanup(g.Close)
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
	g.asks = append(g.asks, gateAsk{time.Now(), req})
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
		Routes: []api.Route{{Kind: "targetgroup", Name: "tg-web", State: "draining"}},
	}}
}

// hookRecorder is an http-get hook target that notes when it was hit.
type hookRecorder struct {
	*httptest.Server
	mu   sync.Mutex
	hits []time.Time
}

func newHookRecorder(t *testing.T) *hookRecorder {
	t.Helper()
	h := &hookRecorder{}
	h.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.mu.Lock()
		h.hits = append(h.hits, time.Now())
		h.mu.Unlock()
	}))
	t.Cleanup(h.Close)
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

// closedPort is a loopback address nothing listens on: connection refused.
func closedPort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return "http://" + addr
}

func mustContain(t *testing.T, log string, wants ...string) {
	t.Helper()
	for _, w := range wants {
		if !strings.Contains(log, w) {
			t.Errorf("log lacks %q:\n%s", w, log)
		}
	}
}
