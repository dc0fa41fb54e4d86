package app

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"draingate.dev/draingate/proving/testutil"
)

type running struct {
	addr     string
	ln       *testutil.ClosedListener
	log      *testutil.SyncBuffer
	sigterm  context.CancelFunc
	finished chan struct{}
	err      error // Serve's answer, once finished is closed
}

// start runs s.Serve on 127.0.0.1; sigterm plays the kubelet's signal.
func start(t *testing.T, s *Server) *running {
	t.Helper()
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &running{
		addr:     inner.Addr().String(),
		ln:       testutil.NewClosedListener(inner),
		log:      &testutil.SyncBuffer{},
		finished: make(chan struct{}),
	}
	s.cfg.Log = r.log
	ctx, cancel := context.WithCancel(context.Background())
	r.sigterm = cancel
	go func() {
		defer close(r.finished)
		r.err = s.Serve(ctx, r.ln)
	}()
	t.Cleanup(func() {
		cancel()
		<-r.finished
	})
	return r
}

// exited waits for Serve to return and checks its log: one sigterm line,
// then one exit line, with times in that order.
func (r *running) exited(t *testing.T) {
	t.Helper()
	<-r.finished
	if r.err != nil {
		t.Fatalf("Serve: %v", r.err)
	}
	var sigterm, exit int64
	for line := range strings.Lines(r.log.String()) {
		f := strings.Fields(line)
		if len(f) == 2 && (f[0] == "sigterm" || f[0] == "exit") {
			ns, err := strconv.ParseInt(f[1], 10, 64)
			if err != nil {
				t.Fatalf("log line %q: %v", line, err)
			}
			if f[0] == "sigterm" {
				sigterm = ns
			} else {
				exit = ns
			}
		}
	}
	if sigterm == 0 || exit == 0 || exit < sigterm {
		t.Fatalf("log = %q; want a sigterm line then an exit line", r.log.String())
	}
}

func TestHandler(t *testing.T) {
	s := New(Config{Hostname: "pod-a", Latency: time.Hour})
	var waited time.Duration
	s.wait = func(_ context.Context, d time.Duration) error { waited = d; return nil }

	rec := httptest.NewRecorder()
	s.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
	if rec.Code != http.StatusOK || rec.Body.String() != "ok pod-a\n" || waited != time.Hour {
		t.Errorf("GET /: %d %q after %v; want 200 \"ok pod-a\\n\" after the 1h latency", rec.Code, rec.Body, waited)
	}

	waited = 0
	rec = httptest.NewRecorder()
	s.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/healthz", nil))
	if rec.Code != http.StatusOK || waited != 0 {
		t.Errorf("GET /healthz: %d after %v; want 200 with no latency", rec.Code, waited)
	}
}

func TestInFlightRequestFinishesAfterSigterm(t *testing.T) {
	s := New(Config{Hostname: "pod-a", Latency: time.Second})
	inHandler, release := make(chan struct{}), make(chan struct{})
	s.wait = func(context.Context, time.Duration) error {
		close(inHandler)
		<-release
		return nil
	}
	r := start(t, s)

	type result struct {
		code int
		body string
		err  error
	}
	got := make(chan result, 1)
	go func() {
		res, err := http.Get("http://" + r.addr + "/")
		if err != nil {
			got <- result{err: err}
			return
		}
		defer res.Body.Close()
		b, err := io.ReadAll(res.Body)
		got <- result{res.StatusCode, string(b), err}
	}()

	<-inHandler
	r.sigterm()
	<-r.ln.Closed() // Shutdown has begun and stopped accepting
	select {
	case <-r.finished:
		t.Fatalf("Serve returned (%v) with a request still in flight", r.err)
	default:
	}
	close(release)

	res := <-got
	if res.err != nil || res.code != http.StatusOK || res.body != "ok pod-a\n" {
		t.Fatalf("in-flight request got %d %q, %v; want 200 \"ok pod-a\\n\"", res.code, res.body, res.err)
	}
	r.exited(t)
}

func TestNewConnectionsRefusedAfterSigterm(t *testing.T) {
	s := New(Config{Hostname: "pod-a", Latency: time.Second})
	inHandler, release := make(chan struct{}), make(chan struct{})
	s.wait = func(context.Context, time.Duration) error {
		close(inHandler)
		<-release
		return nil
	}
	r := start(t, s)
	go func() {
		if res, err := http.Get("http://" + r.addr + "/"); err == nil {
			res.Body.Close()
		}
	}()
	<-inHandler // keeps the server shutting down, not yet gone

	r.sigterm()
	<-r.ln.Closed()
	c, err := net.Dial("tcp", r.addr)
	if err == nil {
		c.Close()
		t.Fatal("a new connection was accepted after SIGTERM")
	}
	if !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("dial after SIGTERM: %v; want connection refused", err)
	}
	close(release)
	r.exited(t)
}

func TestIdleKeepAliveConnectionClosedOnSigterm(t *testing.T) {
	r := start(t, New(Config{Hostname: "pod-a"}))
	c, err := net.Dial("tcp", r.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	br := bufio.NewReader(c)
	io.WriteString(c, "GET / HTTP/1.1\r\nHost: pod-a\r\n\r\n")
	res, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusOK || res.Close {
		t.Fatalf("first response: %d, close=%v; want 200 on a kept-alive connection", res.StatusCode, res.Close)
	}

	r.sigterm()
	// The deadline only keeps a broken server from hanging the test.
	c.SetReadDeadline(time.Now().Add(30 * time.Second))
	if n, err := br.Read(make([]byte, 1)); err != io.EOF {
		t.Fatalf("idle connection after SIGTERM: read %d bytes, %v; want the server to close it (EOF)", n, err)
	}
	r.exited(t)
}

// clientFrom returns an HTTP client whose connections come from src, an
// address of this host (Linux's loopback holds all of 127.0.0.0/8).
func clientFrom(t *testing.T, src string) *http.Client {
	t.Helper()
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}}
	tr := &http.Transport{DialContext: d.DialContext}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr}
}

func getOK(t *testing.T, c *http.Client, url string) {
	t.Helper()
	res, err := c.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	io.Copy(io.Discard, res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d; want 200", url, res.StatusCode)
	}
}

// net/http drops a request it reads once Shutdown has begun, so a request
// counts as after SIGTERM only when it reached the handler between the end
// of Serve's context and the shutdown: sigtermHook sends one there.
func TestSourcesLoggedBeforeExit(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("needs Linux's loopback, which holds all of 127.0.0.0/8")
	}
	s := New(Config{Hostname: "pod-a"})
	r := start(t, s)
	url := "http://" + r.addr + "/"
	from2, from3 := clientFrom(t, "127.0.0.2"), clientFrom(t, "127.0.0.3")
	getOK(t, from2, url)
	getOK(t, from2, url)
	getOK(t, from2, url)
	getOK(t, from3, url)
	getOK(t, from3, url+"healthz") // not counted: only GET / is

	hookErr := make(chan error, 1)
	s.sigtermHook = func() {
		// On the kept-alive connection from 127.0.0.3.
		res, err := from3.Get(url)
		if err == nil {
			io.Copy(io.Discard, res.Body)
			res.Body.Close()
			if res.StatusCode != http.StatusOK {
				err = fmt.Errorf("status %d", res.StatusCode)
			}
		}
		hookErr <- err
	}
	r.sigterm()
	if err := <-hookErr; err != nil {
		t.Fatalf("GET / after SIGTERM, before the shutdown: %v", err)
	}
	r.exited(t)

	var tail []string
	seenSigterm := false
	for line := range strings.Lines(r.log.String()) {
		f := strings.Fields(line)
		if len(f) > 0 && f[0] == "sigterm" {
			seenSigterm = true
		} else if seenSigterm {
			tail = append(tail, strings.TrimSpace(line))
		}
	}
	if len(tail) > 0 {
		tail[len(tail)-1] = strings.Fields(tail[len(tail)-1])[0] // "exit <ns>": exited checked its time
	}
	want := []string{"source 127.0.0.2 3 0", "source 127.0.0.3 2 1", "exit"}
	if !slices.Equal(tail, want) {
		t.Errorf("lines after sigterm = %q; want %q", tail, want)
	}
}

func TestSourcesSortedByAddress(t *testing.T) {
	log := &testutil.SyncBuffer{}
	s := New(Config{Hostname: "pod-a", Log: log})
	for _, remote := range []string{"10.0.0.10:1", "10.0.0.9:2", "10.0.0.10:3", "[fd00::1]:4", "10.0.0.9:5", "10.0.0.10:6"} {
		req := httptest.NewRequest("GET", "/", nil)
		req.RemoteAddr = remote
		s.Handler().ServeHTTP(httptest.NewRecorder(), req)
	}
	s.logSources()
	want := "source 10.0.0.9 2 0\nsource 10.0.0.10 3 0\nsource fd00::1 1 0\n"
	if got := log.String(); got != want {
		t.Errorf("source lines = %q; want %q (numeric address order)", got, want)
	}
}

func TestLivenessFailsOnRequest(t *testing.T) {
	log := &testutil.SyncBuffer{}
	s := New(Config{Hostname: "pod-a", Latency: time.Hour, Log: log})
	waited := false
	s.wait = func(context.Context, time.Duration) error { waited = true; return nil }
	h := s.Handler()
	do := func(method, path string) int {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(method, path, nil))
		return rec.Code
	}

	if code := do("GET", "/livez"); code != http.StatusOK {
		t.Fatalf("GET /livez before failing: %d; want 200", code)
	}
	if code := do("POST", "/fail-liveness"); code != http.StatusOK {
		t.Fatalf("POST /fail-liveness: %d; want 200", code)
	}
	if log.String() != "" {
		t.Fatalf("log = %q after POST /fail-liveness; want nothing until a probe fails", log.String())
	}
	before := time.Now().UnixNano()
	for i := range 3 {
		if code := do("GET", "/livez"); code != http.StatusInternalServerError {
			t.Fatalf("GET /livez %d after failing: %d; want 500", i, code)
		}
	}
	after := time.Now().UnixNano()
	lines := strings.Split(strings.TrimSpace(log.String()), "\n")
	if len(lines) != 1 {
		t.Fatalf("log = %q; want exactly one liveness-failed line for three failing probes", log.String())
	}
	f := strings.Fields(lines[0])
	if len(f) != 2 || f[0] != "liveness-failed" {
		t.Fatalf("log line %q; want \"liveness-failed <unix-ns>\"", lines[0])
	}
	if ns, err := strconv.ParseInt(f[1], 10, 64); err != nil || ns < before || ns > after {
		t.Errorf("liveness-failed at %s; want the first failing probe's time, between %d and %d", f[1], before, after)
	}

	// Readiness and the app itself are untouched, and no probe is counted
	// as a request or waits for the latency.
	if waited {
		t.Error("a probe waited for the GET / latency")
	}
	if code := do("GET", "/healthz"); code != http.StatusOK {
		t.Errorf("GET /healthz with liveness failing: %d; want 200", code)
	}
	if code := do("GET", "/"); code != http.StatusOK || !waited {
		t.Errorf("GET / with liveness failing: %d (waited %v); want 200 after the latency", code, waited)
	}
	if c := s.sources["192.0.2.1"]; len(s.sources) != 1 || c.total != 1 {
		t.Errorf("sources = %v; want only the one GET / from httptest's 192.0.2.1", s.sources)
	}
	if code := do("POST", "/livez"); code != http.StatusMethodNotAllowed {
		t.Errorf("POST /livez: %d; want 405", code)
	}
}
