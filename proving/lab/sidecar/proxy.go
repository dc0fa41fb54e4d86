package sidecar

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"
)

// DefaultDrain is how long a Proxy lets established connections run after
// SIGTERM when Proxy.Drain is not set: Istio's default
// terminationDrainDuration.
const DefaultDrain = 5 * time.Second

// Proxy is the sidecar: a plain TCP proxy that forwards every connection it
// accepts on Listen to To, byte for byte, in both directions. It knows
// nothing of HTTP, so a client's keep-alive connection stays one connection
// to the app.
//
// On SIGTERM (the end of Serve's context) it behaves as a mesh proxy that
// is not told to drain: it closes its listener at once, so new connections
// are refused, and lets the established ones run until both ends have
// closed them, for at most Drain; then it closes whatever is left and
// returns.
type Proxy struct {
	// Listen is the address Run listens on (":8080"); Serve takes a
	// listener instead.
	Listen string
	// To is the app's address, dialled once per accepted connection
	// ("127.0.0.1:18080").
	To string
	// Drain bounds how long established connections may still run after
	// SIGTERM; zero means DefaultDrain.
	Drain time.Duration
	// Log gets the "proxy-listening", "proxy-sigterm", "proxy-cut" and
	// "proxy-exit" lines; nil means stdout.
	Log io.Writer
}

// dialTimeout bounds dialling To. The app is on the same pod's loopback: a
// dial that takes long is a dial that failed.
const dialTimeout = 5 * time.Second

// Run listens on p.Listen and serves until ctx ends (see Serve).
func (p *Proxy) Run(ctx context.Context) error {
	ln, err := net.Listen("tcp", p.Listen)
	if err != nil {
		return fmt.Errorf("listen %s: %w", p.Listen, err)
	}
	return p.Serve(ctx, ln)
}

// Serve forwards the connections ln accepts until ctx ends, which stands
// for SIGTERM, and takes ownership of ln. Then it closes ln, logs
// "proxy-sigterm <unix-ns>" (the moment it saw the signal), waits for the
// established connections to end, at most Drain, closes those still open
// (logging "proxy-cut <count> <unix-ns>" when there are any), logs
// "proxy-exit <unix-ns>" and returns nil. Cutting connections at the bound
// is the expected end of a TCP proxy's drain, not an error: it cannot tell
// an idle keep-alive connection from a busy one.
//
// It returns an error only when ln fails before ctx ends.
func (p *Proxy) Serve(ctx context.Context, ln net.Listener) error {
	drain := p.Drain
	if drain <= 0 {
		drain = DefaultDrain
	}
	s := &session{to: p.To, conns: map[*pipe]struct{}{}}
	accepted := make(chan error, 1)
	go func() { accepted <- s.accept(ln) }()
	p.logf("proxy-listening %s %d", ln.Addr(), time.Now().UnixNano())

	var acceptErr error
	select {
	case acceptErr = <-accepted:
		// The listener failed on its own: stop as on SIGTERM, then say so.
		ln.Close()
	case <-ctx.Done():
		at := time.Now()
		ln.Close() // at once: from here on, a dial is refused
		<-accepted // no connection is added after this
		p.logf("proxy-sigterm %d", at.UnixNano())
	}

	done := make(chan struct{})
	go func() {
		s.wg.Wait()
		close(done)
	}()
	timer := time.NewTimer(drain)
	defer timer.Stop()
	select {
	case <-done:
	case <-timer.C:
		if n := s.closeAll(); n > 0 {
			p.logf("proxy-cut %d %d", n, time.Now().UnixNano())
		}
		<-done
	}
	p.logf("proxy-exit %d", time.Now().UnixNano())
	if acceptErr != nil {
		return fmt.Errorf("accept on %s: %w", ln.Addr(), acceptErr)
	}
	return nil
}

func (p *Proxy) logf(format string, args ...any) {
	w := p.Log
	if w == nil {
		w = os.Stdout
	}
	fmt.Fprintf(w, format+"\n", args...)
}

// session is one Serve's connections.
type session struct {
	to string
	wg sync.WaitGroup

	mu    sync.Mutex
	conns map[*pipe]struct{}
}

// pipe is one accepted connection and its upstream, once dialled.
type pipe struct {
	client, app net.Conn
}

// accept runs until ln is closed (nil) or fails for good (the error).
// Transient errors (too many open files, say) are retried after a pause,
// as net/http does.
func (s *session) accept(ln net.Listener) error {
	var pause time.Duration
	for {
		c, err := ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && (ne.Timeout() || errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) || errors.Is(err, syscall.ECONNABORTED)) {
				pause = min(max(2*pause, 5*time.Millisecond), time.Second)
				time.Sleep(pause)
				continue
			}
			return err
		}
		pause = 0
		p := &pipe{client: c}
		s.mu.Lock()
		s.conns[p] = struct{}{}
		s.mu.Unlock()
		s.wg.Add(1)
		go s.forward(p)
	}
}

// forward dials the app for p and copies both ways until both directions
// are done; a half-close on either side is passed on to the other.
func (s *session) forward(p *pipe) {
	defer s.wg.Done()
	defer func() {
		s.mu.Lock()
		delete(s.conns, p)
		s.mu.Unlock()
		p.client.Close()
		if p.app != nil {
			p.app.Close()
		}
	}()
	app, err := net.DialTimeout("tcp", s.to, dialTimeout)
	if err != nil {
		return // the client sees its connection closed, as from a proxy with no upstream
	}
	s.mu.Lock()
	_, open := s.conns[p]
	if open {
		p.app = app
	}
	s.mu.Unlock()
	if !open { // cut while dialling
		app.Close()
		return
	}
	copied := make(chan struct{})
	go func() {
		defer close(copied)
		io.Copy(app, p.client)
		closeWrite(app)
	}()
	io.Copy(p.client, app)
	closeWrite(p.client)
	<-copied
}

// closeAll closes every connection still open and returns how many.
func (s *session) closeAll() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := len(s.conns)
	for p := range s.conns {
		p.client.Close()
		if p.app != nil {
			p.app.Close()
		}
		delete(s.conns, p)
	}
	return n
}

// closeWrite passes an end of stream on: the peer reads EOF while it may
// still write the other way.
func closeWrite(c net.Conn) {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		cw.CloseWrite()
		return
	}
	c.Close()
}

// Main is the sidecar's command line, `draingate-demoapp proxy [flags]`:
//
//	-listen :8080           where the pod's traffic arrives
//	-to 127.0.0.1:18080     the app
//	-drain 5s               how long established connections may run after SIGTERM
//
// It forwards until SIGTERM (or an interrupt, for local runs), writing its
// log lines to stdout.
func Main(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("draingate-demoapp proxy", flag.ContinueOnError)
	p := &Proxy{Log: stdout}
	fs.StringVar(&p.Listen, "listen", ":8080", "listen address")
	fs.StringVar(&p.To, "to", "127.0.0.1:18080", "the app's address")
	fs.DurationVar(&p.Drain, "drain", DefaultDrain, "how long established connections may run after SIGTERM")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if p.Drain <= 0 {
		return fmt.Errorf("-drain %v: want a positive duration", p.Drain)
	}
	// Before listening, so a SIGTERM that finds the port open is never the
	// default one that kills the process at once.
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	return p.Run(ctx)
}
