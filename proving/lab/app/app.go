package app

import (
	"cmp"
	"context"
	"flag"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/signal"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Config sets up a Server.
type Config struct {
	// Latency is added to every GET / before it answers (not to the probes).
	Latency time.Duration
	// Hostname is what GET / answers with; empty means os.Hostname, which
	// in a pod is the pod's name.
	Hostname string
	// ShutdownTimeout bounds how long SIGTERM waits for in-flight requests
	// (default 30 s, the default termination grace period).
	ShutdownTimeout time.Duration
	// Log gets the "listening", "sigterm", "liveness-failed", "source" and
	// "exit" lines; nil means stdout.
	Log io.Writer
}

// Server is the well-behaved app.
type Server struct {
	cfg Config
	// wait sleeps for the configured latency; tests replace it to hold a
	// request in flight for as long as they need.
	wait func(ctx context.Context, d time.Duration) error
	// sigtermHook, when set, runs in Serve between the sigterm line and the
	// shutdown: tests send requests in that window with it.
	sigtermHook func()

	logMu sync.Mutex // one log line at a time

	// stopping is set once Serve's ctx ended: SIGTERM.
	stopping atomic.Bool
	// livenessFailing is set by POST /fail-liveness; livenessLogged once
	// a failing /livez wrote its line.
	livenessFailing, livenessLogged atomic.Bool

	sourcesMu sync.Mutex
	sources   map[string]sourceCount // GET / requests by source IP

	// streamsMu orders a stream's start against SIGTERM; streams counts
	// those open; streamsEnd is closed at SIGTERM.
	streamsMu  sync.Mutex
	streams    sync.WaitGroup
	streamsEnd chan struct{}
}

// sourceCount counts the GET / requests from one source address.
type sourceCount struct{ total, afterSIGTERM int64 }

// New returns a Server for cfg.
func New(cfg Config) *Server {
	if cfg.Hostname == "" {
		cfg.Hostname, _ = os.Hostname()
	}
	if cfg.ShutdownTimeout <= 0 {
		cfg.ShutdownTimeout = 30 * time.Second
	}
	if cfg.Log == nil {
		cfg.Log = os.Stdout
	}
	return &Server{cfg: cfg, wait: sleep, sources: map[string]sourceCount{}, streamsEnd: make(chan struct{})}
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Handler answers GET / with 200 "ok <hostname>" after the configured
// latency, counting it against its source address (see Serve). It answers
// GET /healthz, the readiness probe, with 200 at once. GET /livez, the
// liveness probe, answers 200 until a POST /fail-liveness arrives and 500
// from then on; the first failing /livez logs "liveness-failed <unix-ns>".
// GET /stream opens a stream of messages (StreamProtocol).
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "ok\n")
	})
	mux.HandleFunc("GET /livez", func(w http.ResponseWriter, r *http.Request) {
		if !s.livenessFailing.Load() {
			io.WriteString(w, "ok\n")
			return
		}
		if s.livenessLogged.CompareAndSwap(false, true) {
			s.logf("liveness-failed %d", time.Now().UnixNano())
		}
		http.Error(w, "liveness failing", http.StatusInternalServerError)
	})
	mux.HandleFunc("POST /fail-liveness", func(w http.ResponseWriter, r *http.Request) {
		s.livenessFailing.Store(true)
		io.WriteString(w, "liveness failing from now on\n")
	})
	mux.HandleFunc("GET /stream", s.stream)
	mux.HandleFunc("GET /", func(w http.ResponseWriter, r *http.Request) {
		s.count(r.RemoteAddr)
		if s.cfg.Latency > 0 {
			if err := s.wait(r.Context(), s.cfg.Latency); err != nil {
				return // the client left; nobody reads an answer
			}
		}
		fmt.Fprintf(w, "ok %s\n", s.cfg.Hostname)
	})
	return mux
}

// count records one GET / from remoteAddr (host:port).
func (s *Server) count(remoteAddr string) {
	src := remoteAddr
	if host, _, err := net.SplitHostPort(remoteAddr); err == nil {
		src = host
	}
	after := s.stopping.Load()
	s.sourcesMu.Lock()
	defer s.sourcesMu.Unlock()
	c := s.sources[src]
	c.total++
	if after {
		c.afterSIGTERM++
	}
	s.sources[src] = c
}

// Serve answers on ln until ctx ends, which stands for SIGTERM. Then it logs
// "sigterm <unix-ns>", stops accepting, ends its streams (each says bye),
// closes idle keep-alive connections,
// lets in-flight requests finish (up to ShutdownTimeout), logs one
// "source <ip> <total> <after-sigterm>" line per address GET / requests came
// from (sorted by address; after-sigterm counts those that reached the
// handler after ctx ended), logs "exit <unix-ns>" and returns nil, or an
// error if requests had to be cut off.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	srv := &http.Server{Handler: s.Handler(), ReadHeaderTimeout: 10 * time.Second}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	s.logf("listening %s %d", ln.Addr(), time.Now().UnixNano())

	select {
	case err := <-served:
		return fmt.Errorf("serve %s: %w", ln.Addr(), err)
	case <-ctx.Done():
	}
	s.streamsMu.Lock()
	s.stopping.Store(true)
	s.streamsMu.Unlock()
	s.logf("sigterm %d", time.Now().UnixNano())
	if s.sigtermHook != nil {
		s.sigtermHook()
	}

	sctx, cancel := context.WithTimeout(context.Background(), s.cfg.ShutdownTimeout)
	defer cancel()
	// Streams are hijacked connections, which Shutdown does not wait for:
	// each says bye between two messages, and is waited for here.
	close(s.streamsEnd)
	err := srv.Shutdown(sctx)
	if err != nil {
		srv.Close()
		err = fmt.Errorf("shutdown: requests still in flight after %v: %w", s.cfg.ShutdownTimeout, err)
	}
	streamsDone := make(chan struct{})
	go func() { s.streams.Wait(); close(streamsDone) }()
	select {
	case <-streamsDone:
	case <-sctx.Done():
		err = cmp.Or(err, fmt.Errorf("shutdown: streams still open after %v", s.cfg.ShutdownTimeout))
	}
	<-served // http.ErrServerClosed, as expected
	s.logSources()
	s.logf("exit %d", time.Now().UnixNano())
	return err
}

// logSources writes the "source" lines, sorted by address.
func (s *Server) logSources() {
	s.sourcesMu.Lock()
	counts := maps.Clone(s.sources)
	s.sourcesMu.Unlock()
	for _, src := range slices.SortedFunc(maps.Keys(counts), compareAddrs) {
		c := counts[src]
		s.logf("source %s %d %d", src, c.total, c.afterSIGTERM)
	}
}

// compareAddrs orders IP addresses numerically, anything else after them
// as text.
func compareAddrs(a, b string) int {
	aa, errA := netip.ParseAddr(a)
	ba, errB := netip.ParseAddr(b)
	switch {
	case errA == nil && errB == nil:
		return aa.Compare(ba)
	case errA == nil:
		return -1
	case errB == nil:
		return 1
	}
	return cmp.Compare(a, b)
}

func (s *Server) logf(format string, args ...any) {
	s.logMu.Lock()
	defer s.logMu.Unlock()
	fmt.Fprintf(s.cfg.Log, format+"\n", args...)
}

// Main is the demo app's command line: it parses args, listens, and serves
// until SIGTERM (or an interrupt, for local runs), writing its log lines to
// stdout.
func Main(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("draingate-demoapp", flag.ContinueOnError)
	addr := fs.String("addr", ":8080", "listen address")
	latency := fs.Duration("latency", 0, "added to every GET / before it answers")
	grace := fs.Duration("shutdown-timeout", 30*time.Second, "how long SIGTERM waits for in-flight requests")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	// Before listening, so a SIGTERM that finds the port open is never the
	// default one that kills the process without draining.
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return fmt.Errorf("listen %s: %w", *addr, err)
	}
	return New(Config{Latency: *latency, ShutdownTimeout: *grace, Log: stdout}).Serve(ctx, ln)
}
