package sidecar

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"draingate.dev/draingate/proving/testutil"
)

// backend is the app behind the proxy, on loopback.
func backend(t *testing.T, h http.Handler) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return ln.Addr().String()
}

type running struct {
	addr     string
	ln       *testutil.ClosedListener
	log      *testutil.SyncBuffer
	sigterm  context.CancelFunc
	finished chan struct{}
	err      error // Serve's answer, once finished is closed
}

// start runs a Proxy to `to` on 127.0.0.1; sigterm plays the kubelet's
// signal.
func start(t *testing.T, to string, drain time.Duration) *running {
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
	p := &Proxy{To: to, Drain: drain, Log: r.log}
	ctx, cancel := context.WithCancel(context.Background())
	r.sigterm = cancel
	go func() {
		defer close(r.finished)
		r.err = p.Serve(ctx, r.ln)
	}()
	t.Cleanup(func() {
		cancel()
		<-r.finished
	})
	return r
}

// exited waits for Serve to return and checks its log: proxy-sigterm, then
// proxy-exit, times in that order; it returns the whole log.
func (r *running) exited(t *testing.T) string {
	t.Helper()
	<-r.finished
	if r.err != nil {
		t.Fatalf("Serve: %v", r.err)
	}
	log := r.log.String()
	at := map[string]int64{}
	for line := range strings.Lines(log) {
		f := strings.Fields(line)
		if len(f) == 2 && (f[0] == "proxy-sigterm" || f[0] == "proxy-exit") {
			ns, err := strconv.ParseInt(f[1], 10, 64)
			if err != nil {
				t.Fatalf("log line %q: %v", line, err)
			}
			at[f[0]] = ns
		}
	}
	if at["proxy-sigterm"] == 0 || at["proxy-exit"] < at["proxy-sigterm"] {
		t.Fatalf("log = %q; want a proxy-sigterm line then a proxy-exit line", log)
	}
	return log
}

func get(t *testing.T, c *http.Client, url string) (int, string) {
	t.Helper()
	res, err := c.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return res.StatusCode, string(b)
}

func TestProxyForwards(t *testing.T) {
	app := backend(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "ok from the app "+r.URL.Path)
	}))
	r := start(t, app, time.Hour)
	c := &http.Client{Transport: &http.Transport{}}
	defer c.CloseIdleConnections()
	for range 3 { // one keep-alive connection, several requests
		if code, body := get(t, c, "http://"+r.addr+"/x"); code != http.StatusOK || body != "ok from the app /x" {
			t.Fatalf("GET through the proxy: %d %q", code, body)
		}
	}
	if !strings.HasPrefix(r.log.String(), "proxy-listening "+r.addr+" ") {
		t.Errorf("log = %q; want it to start with the listening line", r.log.String())
	}
}

func TestProxyPassesHalfClose(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		b, _ := io.ReadAll(c) // to the client's end of stream
		io.WriteString(c, "read "+strconv.Itoa(len(b)))
	}()
	r := start(t, ln.Addr().String(), time.Hour)
	c, err := net.Dial("tcp", r.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	io.WriteString(c, "hello")
	c.(*net.TCPConn).CloseWrite()
	b, err := io.ReadAll(c)
	if err != nil || string(b) != "read 5" {
		t.Fatalf("answer after half-close: %q, %v; want \"read 5\"", b, err)
	}
}

func TestProxyClosesClientWhenAppIsDown(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	down := ln.Addr().String()
	ln.Close()
	r := start(t, down, time.Hour)
	c, err := net.Dial("tcp", r.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if b, _ := io.ReadAll(c); len(b) != 0 {
		t.Fatalf("read %q from a proxy with no app", b)
	}
}

func TestInFlightRequestFinishesAndNewDialRefusedAfterSigterm(t *testing.T) {
	inHandler, release := make(chan struct{}), make(chan struct{})
	app := backend(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(inHandler)
		<-release
		io.WriteString(w, "done")
	}))
	r := start(t, app, time.Hour) // only the connection's end may end the drain
	type result struct {
		code int
		body string
		err  error
	}
	got := make(chan result, 1)
	go func() {
		// One connection, closed after its response.
		c := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
		res, err := c.Get("http://" + r.addr + "/")
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
	<-r.ln.Closed()
	c, err := net.Dial("tcp", r.addr)
	if err == nil {
		c.Close()
		t.Fatal("a new connection was accepted after SIGTERM")
	}
	if !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("dial after SIGTERM: %v; want connection refused", err)
	}
	select {
	case <-r.finished:
		t.Fatalf("Serve returned (%v) with a request in flight", r.err)
	default:
	}

	close(release)
	res := <-got
	if res.err != nil || res.code != http.StatusOK || res.body != "done" {
		t.Fatalf("in-flight request: %d %q, %v; want 200 \"done\"", res.code, res.body, res.err)
	}
	if log := r.exited(t); strings.Contains(log, "proxy-cut") {
		t.Errorf("log = %q: a connection that ended by itself was cut", log)
	}
}

func TestConnectionsCutAtDrainBound(t *testing.T) {
	app := backend(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "ok")
	}))
	r := start(t, app, time.Millisecond)
	// A keep-alive connection, established and idle.
	c, err := net.Dial("tcp", r.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	br := bufio.NewReader(c)
	io.WriteString(c, "GET / HTTP/1.1\r\nHost: app\r\n\r\n")
	res, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, res.Body)
	res.Body.Close()

	r.sigterm()
	log := r.exited(t)
	if !strings.Contains(log, "proxy-cut 1 ") {
		t.Errorf("log = %q; want the idle connection cut at the bound", log)
	}
	if b, _ := io.ReadAll(br); len(b) != 0 {
		t.Errorf("read %q from a cut connection", b)
	}
}

func TestMainRejectsBadArguments(t *testing.T) {
	for _, args := range [][]string{{"extra"}, {"-drain=0s"}, {"-addr=:8080"}} {
		if err := Main(args, io.Discard); err == nil {
			t.Errorf("Main(%q) = nil, want an error", args)
		}
	}
	if err := Main([]string{"-h"}, io.Discard); !errors.Is(err, flag.ErrHelp) {
		t.Errorf("Main(-h) = %v, want flag.ErrHelp", err)
	}
}
