package app

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"draingate.dev/draingate/internal/testutil"
)

// closeNotifyListener tells the test when http.Server.Shutdown has closed it.
type closeNotifyListener struct {
	net.Listener
	once   sync.Once
	closed chan struct{}
}

func (l *closeNotifyListener) Close() error {
	err := l.Listener.Close()
	l.once.Do(func() { close(l.closed) })
	return err
}

type running struct {
	addr     string
	ln       *closeNotifyListener
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
		ln:       &closeNotifyListener{Listener: inner, closed: make(chan struct{})},
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
	<-r.ln.closed // Shutdown has begun and stopped accepting
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
	<-r.ln.closed
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
