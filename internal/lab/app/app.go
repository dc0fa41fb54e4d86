package app

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"
)

// Config sets up a Server.
type Config struct {
	// Latency is added to every GET / before it answers (not to /healthz).
	Latency time.Duration
	// Hostname is what GET / answers with; empty means os.Hostname, which
	// in a pod is the pod's name.
	Hostname string
	// ShutdownTimeout bounds how long SIGTERM waits for in-flight requests
	// (default 30 s, the default termination grace period).
	ShutdownTimeout time.Duration
	// Log gets the "listening", "sigterm" and "exit" lines; nil means stdout.
	Log io.Writer
}

// Server is the well-behaved app.
type Server struct {
	cfg Config
	// wait sleeps for the configured latency; tests replace it to hold a
	// request in flight for as long as they need.
	wait func(ctx context.Context, d time.Duration) error
}

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
	return &Server{cfg: cfg, wait: sleep}
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
// latency, and GET /healthz with 200 at once.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "ok\n")
	})
	mux.HandleFunc("GET /", func(w http.ResponseWriter, r *http.Request) {
		if s.cfg.Latency > 0 {
			if err := s.wait(r.Context(), s.cfg.Latency); err != nil {
				return // the client left; nobody reads an answer
			}
		}
		fmt.Fprintf(w, "ok %s\n", s.cfg.Hostname)
	})
	return mux
}

// Serve answers on ln until ctx ends, which stands for SIGTERM. Then it logs
// "sigterm <unix-ns>", stops accepting, closes idle keep-alive connections,
// lets in-flight requests finish (up to ShutdownTimeout), logs
// "exit <unix-ns>" and returns nil, or an error if requests had to be cut off.
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
	s.logf("sigterm %d", time.Now().UnixNano())

	sctx, cancel := context.WithTimeout(context.Background(), s.cfg.ShutdownTimeout)
	defer cancel()
	err := srv.Shutdown(sctx)
	if err != nil {
		srv.Close()
		err = fmt.Errorf("shutdown: requests still in flight after %v: %w", s.cfg.ShutdownTimeout, err)
	}
	<-served // http.ErrServerClosed, as expected
	s.logf("exit %d", time.Now().UnixNano())
	return err
}

func (s *Server) logf(format string, args ...any) {
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
