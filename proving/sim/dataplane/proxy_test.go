package dataplane

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// targetOf returns the Target for an httptest server on 127.0.0.1.
func targetOf(t *testing.T, rawURL string) Target {
	t.Helper()
	u, err := url.Parse(rawURL)
	if err != nil {
		t.Fatal(err)
	}
	port, err := strconv.Atoi(u.Port())
	if err != nil {
		t.Fatal(err)
	}
	return Target{ID: u.Hostname(), Port: int32(port)}
}

// healthy applies "healthy" for every target and waits until the view has them.
func healthy(t *testing.T, p *Proxy, targets ...Target) {
	t.Helper()
	for _, tg := range targets {
		p.Apply(Event{Target: tg, To: StateHealthy})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := p.WaitInRotation(ctx, len(targets)); err != nil {
		t.Fatal(err)
	}
}

func get(t *testing.T, c *http.Client, url string) (int, string) {
	t.Helper()
	res, err := c.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatalf("GET %s: reading body: %v", url, err)
	}
	return res.StatusCode, string(b)
}

func TestRoundRobinOverRotation(t *testing.T) {
	names := map[Target]string{}
	var targets []Target
	for _, name := range []string{"a", "b", "c"} {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			io.WriteString(w, name)
		}))
		t.Cleanup(srv.Close)
		tg := targetOf(t, srv.URL)
		names[tg] = name
		targets = append(targets, tg)
	}
	p := New(Config{})
	t.Cleanup(p.Close)
	front := httptest.NewServer(p)
	t.Cleanup(front.Close)
	healthy(t, p, targets...)

	rotation := p.Rotation()
	for i := range 9 {
		code, body := get(t, front.Client(), front.URL)
		if want := names[rotation[i%3]]; code != http.StatusOK || body != want {
			t.Fatalf("request %d: %d %q; want 200 %q (round robin over %v)", i, code, body, want, rotation)
		}
	}
	for tg, ts := range p.Stats().ByTarget {
		if ts.Requests != 3 {
			t.Errorf("%s (%s) got %d requests; want 3", tg, names[tg], ts.Requests)
		}
	}

	// Take one out: it gets nothing more, and nothing was routed to it after
	// the view dropped it.
	out := rotation[1]
	p.Apply(Event{Target: out, To: "draining"})
	for {
		if _, ok := p.StoppedAt(out); ok {
			break
		}
		time.Sleep(time.Millisecond)
	}
	for i := range 4 {
		if _, body := get(t, front.Client(), front.URL); body == names[out] {
			t.Fatalf("request %d after draining went to %s", i, body)
		}
	}
	stopped, _ := p.StoppedAt(out)
	st := p.Stats()
	if ts := st.ByTarget[out]; ts.Requests != 3 || ts.Last.After(stopped) {
		t.Errorf("drained target: %d requests, last at %v; want 3, none after StoppedAt %v", ts.Requests, ts.Last, stopped)
	}
	if st.Total != 13 || st.Failed != 0 || st.ByStatus[http.StatusOK] != 13 {
		t.Errorf("stats = %+v; want 13 requests, all 200", st)
	}
}

func TestNoTargetInRotationAnswers503(t *testing.T) {
	var hits atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hits.Add(1) }))
	t.Cleanup(srv.Close)
	p := New(Config{})
	t.Cleanup(p.Close)

	rec := httptest.NewRecorder()
	p.ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
	if rec.Code != http.StatusServiceUnavailable {
		t.Fatalf("with no targets: %d; want 503", rec.Code)
	}

	// No fail-open: a registered but unhealthy target gets no traffic.
	tg := targetOf(t, srv.URL)
	p.Apply(Event{Target: tg, To: "unhealthy"})
	for len(p.Timeline()) == 0 {
		time.Sleep(time.Millisecond)
	}
	rec = httptest.NewRecorder()
	p.ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
	if rec.Code != http.StatusServiceUnavailable || hits.Load() != 0 {
		t.Fatalf("with only an unhealthy target: %d, %d backend hits; want 503, 0", rec.Code, hits.Load())
	}

	st := p.Stats()
	if st.Total != 2 || st.Failed != 2 || st.NoTarget != 2 || st.ByStatus[http.StatusServiceUnavailable] != 2 || len(st.ByTarget) != 0 {
		t.Errorf("stats = %+v; want 2 requests, 2 failed 503s with no target, none routed", st)
	}

	// A target's own 503 is a failure, not one of the proxy's "no target".
	busy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	t.Cleanup(busy.Close)
	healthy(t, p, targetOf(t, busy.URL))
	rec = httptest.NewRecorder()
	p.ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
	st = p.Stats()
	if rec.Code != http.StatusServiceUnavailable || st.Failed != 3 || st.NoTarget != 2 || len(st.ByTarget) != 1 {
		t.Errorf("after the target's own 503: %d, stats %+v; want 3 failed, still 2 with no target", rec.Code, st)
	}
}

// The backend answers the first request on its first connection, then reads
// the second one and hangs up without a byte of answer: the failure that
// http.Transport would hide by resending an idempotent request on a fresh
// connection. Any later connection would be answered 200, so a silent retry
// shows up as a third request, a second connection and a 200.
func TestFailedRequestIsNotRetried(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var conns, requests atomic.Int32
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			n := conns.Add(1)
			wg.Go(func() {
				defer c.Close()
				br := bufio.NewReader(c)
				for i := 0; ; i++ {
					req, err := http.ReadRequest(br)
					if err != nil {
						return
					}
					io.Copy(io.Discard, req.Body)
					requests.Add(1)
					if n == 1 && i == 1 {
						return
					}
					io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
				}
			})
		}
	})

	p := New(Config{})
	t.Cleanup(p.Close)
	healthy(t, p, targetOf(t, "http://"+ln.Addr().String()))

	for i, want := range []int{http.StatusOK, http.StatusBadGateway} {
		rec := httptest.NewRecorder()
		p.ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
		if rec.Code != want {
			t.Fatalf("request %d: %d; want %d", i, rec.Code, want)
		}
	}
	if c, r := conns.Load(), requests.Load(); c != 1 || r != 2 {
		t.Errorf("backend saw %d connections, %d requests; want 1 and 2 (no retry)", c, r)
	}
	st := p.Stats()
	if st.Total != 2 || st.Failed != 1 || st.ByStatus[http.StatusOK] != 1 || st.ByStatus[http.StatusBadGateway] != 1 {
		t.Errorf("stats = %+v; want one 200 and one failed 502", st)
	}
}

func TestKeepsBackendConnectionsAlive(t *testing.T) {
	var newConns atomic.Int32
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "ok")
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			newConns.Add(1)
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	p := New(Config{})
	t.Cleanup(p.Close)
	front := httptest.NewServer(p)
	t.Cleanup(front.Close)
	healthy(t, p, targetOf(t, srv.URL))

	for i := range 20 {
		// A new client connection each time: the proxy's backend
		// connection must outlive the client's, as an ALB's does.
		req, _ := http.NewRequest("GET", front.URL, nil)
		req.Close = true
		res, err := front.Client().Do(req)
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
		if res.StatusCode != http.StatusOK {
			t.Fatalf("request %d: %d", i, res.StatusCode)
		}
	}
	if n := newConns.Load(); n != 1 {
		t.Errorf("20 sequential requests opened %d backend connections; want 1", n)
	}
}

func TestForwardsBodyHostAndClientAddress(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		fmt.Fprintf(w, "%s %s host=%s xff=%s", r.Method, b, r.Host, r.Header.Get("X-Forwarded-For"))
	}))
	t.Cleanup(srv.Close)
	p := New(Config{})
	t.Cleanup(p.Close)
	front := httptest.NewServer(p)
	t.Cleanup(front.Close)
	healthy(t, p, targetOf(t, srv.URL))

	req, _ := http.NewRequest("POST", front.URL, strings.NewReader("hello"))
	req.Host = "shop.example"
	res, err := front.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	if want := "POST hello host=shop.example xff=127.0.0.1"; string(b) != want {
		t.Errorf("backend saw %q; want %q", b, want)
	}
}

func TestTargetDownAnswers502(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens: connection refused

	p := New(Config{})
	t.Cleanup(p.Close)
	tg := targetOf(t, "http://"+addr)
	healthy(t, p, tg)
	rec := httptest.NewRecorder()
	p.ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
	if rec.Code != http.StatusBadGateway {
		t.Fatalf("refused target: %d; want 502", rec.Code)
	}
	if st := p.Stats(); st.Failed != 1 || st.ByTarget[tg].Failed != 1 {
		t.Errorf("stats = %+v; want the 502 counted as failed, against %v", st, tg)
	}
}

func TestSlowTargetAnswers504(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { <-release }))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(release) }) // runs first: lets srv.Close finish

	p := New(Config{ResponseTimeout: 50 * time.Millisecond})
	t.Cleanup(p.Close)
	healthy(t, p, targetOf(t, srv.URL))
	rec := httptest.NewRecorder()
	p.ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
	if rec.Code != http.StatusGatewayTimeout {
		t.Fatalf("slow target: %d; want 504", rec.Code)
	}
	if st := p.Stats(); st.Failed != 1 || st.ByStatus[http.StatusGatewayTimeout] != 1 {
		t.Errorf("stats = %+v; want one failed 504", st)
	}
}

func TestTargetBreakingMidBodyCountsAsAborted(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "100")
		io.WriteString(w, "partial")
		w.(http.Flusher).Flush()
		panic(http.ErrAbortHandler) // net/http resets the connection
	}))
	t.Cleanup(srv.Close)
	p := New(Config{})
	t.Cleanup(p.Close)
	front := httptest.NewServer(p)
	t.Cleanup(front.Close)
	healthy(t, p, targetOf(t, srv.URL))

	res, err := front.Client().Get(front.URL)
	if err == nil {
		_, err = io.ReadAll(res.Body)
		res.Body.Close()
	}
	if err == nil {
		t.Fatal("client read a whole response from a target that broke mid-body")
	}
	st := p.Stats()
	if st.Aborted != 1 || st.Failed != 1 {
		t.Errorf("stats = %+v; want one aborted, failed request", st)
	}
}

// SentSince counts, per target, the requests picked from a moment on: the
// lab's count of what a node sent a pod after its SIGTERM.
func TestSentSince(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	t.Cleanup(srv.Close)
	p := New(Config{})
	t.Cleanup(p.Close)
	tg := targetOf(t, srv.URL)
	healthy(t, p, tg)
	serve := func() {
		rec := httptest.NewRecorder()
		p.ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
		if rec.Code != http.StatusOK {
			t.Fatalf("status %d", rec.Code)
		}
	}
	serve()
	serve()
	mark := p.Stats().ByTarget[tg].Last.Add(time.Nanosecond)
	for range 3 {
		serve()
	}
	if got := p.SentSince(tg, mark); got != 3 {
		t.Errorf("SentSince(mark) = %d, want the 3 requests after it", got)
	}
	if got := p.SentSince(tg, time.Time{}); got != 5 {
		t.Errorf("SentSince(zero) = %d, want all 5", got)
	}
	if got := p.SentSince(Target{ID: "10.0.0.1", Port: 1}, time.Time{}); got != 0 {
		t.Errorf("SentSince(unknown target) = %d, want 0", got)
	}
}

// TestErrorCauses: a target that refuses connections, and one that closes
// the connection without answering, are told apart in Stats.Causes.
func TestErrorCauses(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	refused := targetOf(t, "http://"+ln.Addr().String())
	ln.Close() // nothing listens there now
	closer, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { closer.Close() })
	go func() {
		for {
			c, err := closer.Accept()
			if err != nil {
				return
			}
			// Read the request, then close without a byte of answer.
			bufio.NewReader(c).ReadString('\n')
			c.Close()
		}
	}()
	hangup := targetOf(t, "http://"+closer.Addr().String())
	p := New(Config{})
	t.Cleanup(p.Close)
	front := httptest.NewServer(p)
	t.Cleanup(front.Close)
	healthy(t, p, refused, hangup)
	for range 4 {
		if code, _ := get(t, front.Client(), front.URL); code != http.StatusBadGateway {
			t.Errorf("status %d, want 502", code)
		}
	}
	got := p.Stats().Causes
	if got["connection refused"] != 2 || got["closed before answering"] != 2 {
		t.Errorf("causes %v, want connection refused=2 and closed before answering=2", got)
	}
}

// TestRoutings: least outstanding requests sends a request past a target
// still busy with one to an idle one; random spreads requests over every
// target in rotation, repeatably from its seed.
func TestRoutings(t *testing.T) {
	release := make(chan struct{})
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		<-release
		io.WriteString(w, "slow")
	}))
	t.Cleanup(slow.Close)
	fast := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "fast") }))
	t.Cleanup(fast.Close)

	p := New(Config{Routing: LeastOutstanding})
	t.Cleanup(p.Close)
	front := httptest.NewServer(p)
	t.Cleanup(front.Close)
	t.Cleanup(func() { close(release) }) // first: the servers wait for the held request
	healthy(t, p, targetOf(t, slow.URL), targetOf(t, fast.URL))
	// Hold one request on the slow target, whichever the cursor gives
	// first: at most one request in a row goes to it.
	go front.Client().Get(front.URL)
	go front.Client().Get(front.URL)
	for p.Stats().ByTarget[targetOf(t, fast.URL)].Requests < 1 {
		time.Sleep(time.Millisecond)
	}
	for i := range 10 {
		if _, body := get(t, front.Client(), front.URL); body != "fast" {
			t.Fatalf("request %d went to %q while the slow target had one in flight", i, body)
		}
	}

	picks := func(seed uint64) []string {
		var ts []*httptest.Server
		for _, name := range []string{"a", "b", "c"} {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, name) }))
			t.Cleanup(srv.Close)
			ts = append(ts, srv)
		}
		p := New(Config{Routing: Random, Seed: seed})
		t.Cleanup(p.Close)
		front := httptest.NewServer(p)
		t.Cleanup(front.Close)
		var targets []Target
		for _, s := range ts {
			targets = append(targets, targetOf(t, s.URL))
		}
		healthy(t, p, targets...)
		var out []string
		for range 60 {
			_, body := get(t, front.Client(), front.URL)
			out = append(out, body)
		}
		return out
	}
	a := picks(7)
	for _, name := range []string{"a", "b", "c"} {
		if n := strings.Count(strings.Join(a, ""), name); n < 5 {
			t.Errorf("random: %s got %d of 60", name, n)
		}
	}
	if strings.Join(a, "") == strings.Repeat("abc", 20) {
		t.Errorf("random picked round robin: %v", a)
	}
}
