package dataplane

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"
)

// A flow is one client connection to a node in Config.Flows mode, as an NLB
// sees it: pinned to one target, over one connection to it, from the moment
// its first request came until either end closes. The node keeps passing a
// flow's requests to its target after the target left the rotation, as an
// NLB keeps passing established flows to a draining target; only new flows
// follow the rotation.
type flow struct {
	client net.Conn
	from   netip.Addr // the client's address: the source a target sees when Config.PreserveClientIP

	mu       sync.Mutex // one request at a time, as HTTP/1.1 sends them
	target   Target
	connMu   sync.Mutex    // guards conn's setting against end
	ended    bool          // the client's connection closed
	conn     net.Conn      // to the target; nil before the first request
	br       *bufio.Reader // reads conn
	watching chan error    // the idle watch's end: nil data, or why conn ended
	// cut is set when the target ended the flow (its close, a broken
	// connection): a request then fails, even if the client's connection
	// was closed by the node in the meantime.
	cut atomic.Bool
}

type flowKey struct{}

// Server returns an http.Server that serves the node: set its Addr or call
// its Serve. In Config.Flows mode it gives each client connection its flow,
// and passes the client's close on to the flow's target, as a pass-through
// load balancer passes a FIN.
func (p *Proxy) Server() *http.Server {
	return &http.Server{
		Handler:           p,
		ReadHeaderTimeout: 10 * time.Second,
		ConnContext:       p.connContext,
		ConnState:         p.connState,
	}
}

func (p *Proxy) connContext(ctx context.Context, c net.Conn) context.Context {
	if !p.cfg.Flows {
		return ctx
	}
	f := &flow{client: c}
	if ap, err := netip.ParseAddrPort(c.RemoteAddr().String()); err == nil {
		f.from = ap.Addr().Unmap()
	}
	p.flowsMu.Lock()
	p.flows[c] = f
	p.flowsMu.Unlock()
	return context.WithValue(ctx, flowKey{}, f)
}

func (p *Proxy) connState(c net.Conn, s http.ConnState) {
	if !p.cfg.Flows || (s != http.StateClosed && s != http.StateHijacked) {
		return
	}
	p.flowsMu.Lock()
	f := p.flows[c]
	delete(p.flows, c)
	p.flowsMu.Unlock()
	if f != nil && s == http.StateClosed {
		f.end()
	}
}

// end closes the flow's connection to its target, if it has one.
func (f *flow) end() {
	f.connMu.Lock()
	defer f.connMu.Unlock()
	f.ended = true
	if f.conn != nil {
		f.conn.Close()
	}
}

// serveFlow passes r over its flow's connection to the flow's target,
// picking the target and dialing it for the flow's first request. Like a
// pass-through load balancer it has no HTTP answer of its own for a broken
// flow: the client's connection is cut (a reset, to the client), which the
// client counts as a transport error and the node as a failed request
// (status 0).
func (p *Proxy) serveFlow(w http.ResponseWriter, r *http.Request) {
	f, _ := r.Context().Value(flowKey{}).(*flow)
	oneShot := f == nil
	if oneShot {
		f = &flow{}
		if ap, err := netip.ParseAddrPort(r.RemoteAddr); err == nil {
			f.from = ap.Addr().Unmap()
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	now := time.Now()
	if f.conn != nil {
		// The idle watch ends with the response's first byte, or with the
		// target's close (then the flow is over, and so is this request),
		// or at the response timeout, set before the request goes.
		f.conn.SetReadDeadline(now.Add(p.cfg.ResponseTimeout))
		if err := f.send(r); err != nil {
			p.breakFlow(f, r, now, err)
		}
		p.relay(f, w, r, now)
		return
	}
	t, pickedAt, ok := p.pick()
	if !ok {
		p.noTarget(w)
		return
	}
	f.target = t
	p.done(t) // a flow is no request in flight (LeastOutstanding is for requests)
	dialer := &net.Dialer{Timeout: p.cfg.ConnectTimeout, KeepAlive: 30 * time.Second}
	if src := p.flowSource(f); src.IsValid() {
		dialer.LocalAddr = net.TCPAddrFromAddrPort(netip.AddrPortFrom(src, 0))
	}
	conn, err := dialer.DialContext(r.Context(), "tcp", t.String())
	if err != nil {
		p.breakFlow(f, r, pickedAt, err)
	}
	f.connMu.Lock()
	if f.ended {
		conn.Close()
	}
	f.conn, f.br = conn, bufio.NewReader(conn)
	f.connMu.Unlock()
	if oneShot {
		defer conn.Close()
	}
	if err := f.send(r); err != nil {
		p.breakFlow(f, r, pickedAt, err)
	}
	p.relay(f, w, r, pickedAt)
}

// flowSource is the address a flow's connection to its target comes from:
// the client's own when the node keeps client addresses, else the node's.
func (p *Proxy) flowSource(f *flow) netip.Addr {
	if p.cfg.PreserveClientIP && f.from.IsValid() {
		return f.from
	}
	return p.cfg.SourceIP
}

// send writes r to the flow's target, after the idle watch (if any) ended.
func (f *flow) send(r *http.Request) error {
	out := r.Clone(r.Context())
	out.RequestURI, out.Close = "", false
	out.Header.Del("Connection")
	if r.Header.Get("Upgrade") != "" {
		out.Header.Set("Connection", "Upgrade")
	}
	return out.Write(f.conn)
}

// relay reads the target's answer to r and passes it to the client, then
// watches the idle flow so that a target that closes it closes the client's
// connection too, as a pass-through load balancer passes the target's FIN.
func (p *Proxy) relay(f *flow, w http.ResponseWriter, r *http.Request, at time.Time) {
	if f.watching != nil {
		if err := <-f.watching; err != nil {
			p.breakFlow(f, r, at, err)
		}
		f.watching = nil
	}
	f.conn.SetReadDeadline(time.Now().Add(p.cfg.ResponseTimeout))
	res, err := http.ReadResponse(f.br, r)
	if err != nil {
		p.breakFlow(f, r, at, err)
	}
	f.conn.SetReadDeadline(time.Time{})
	if res.StatusCode == http.StatusSwitchingProtocols {
		p.splice(f, w, r, res, at)
		return
	}
	h := w.Header()
	for k, v := range res.Header {
		h[k] = v
	}
	if res.Close {
		h.Set("Connection", "close")
	}
	sw := &statusWriter{ResponseWriter: w}
	sw.WriteHeader(res.StatusCode)
	_, err = io.Copy(sw, res.Body)
	res.Body.Close()
	if err != nil {
		p.record(&f.target, at, sw.final(), true)
		f.conn.Close()
		panic(http.ErrAbortHandler)
	}
	p.record(&f.target, at, sw.final(), false)
	if res.Close {
		f.conn.Close()
		return
	}
	f.watching = make(chan error, 1)
	go f.watch(f.watching)
}

// watch waits on the idle flow's connection to its target until the
// response to the next request starts (nil) or the connection ends. A
// target that closed an idle flow closes the client's connection, as a
// pass-through load balancer passes the target's FIN; while a request is in
// flight the request's own path does it, counting the request as failed.
func (f *flow) watch(done chan<- error) {
	_, err := f.br.Peek(1)
	if err != nil {
		f.cut.Store(true)
		if f.client != nil && f.mu.TryLock() {
			f.client.Close()
			f.mu.Unlock()
		}
	}
	done <- err
}

// splice hands the client's connection over to the target's once the target
// switched protocols (a WebSocket, a stream), copying bytes both ways until
// either end closes; then the flow is over.
func (p *Proxy) splice(f *flow, w http.ResponseWriter, r *http.Request, res *http.Response, at time.Time) {
	client, buf, err := http.NewResponseController(w).Hijack()
	if err != nil {
		p.breakFlow(f, r, at, err)
	}
	res.Body = nil
	if err := res.Write(client); err != nil {
		p.record(&f.target, at, 0, false)
		client.Close()
		f.conn.Close()
		return
	}
	p.record(&f.target, at, http.StatusSwitchingProtocols, false)
	// Proxy.Close ends a spliced flow too.
	p.flowsMu.Lock()
	p.spliced[client] = f
	p.flowsMu.Unlock()
	defer func() {
		p.flowsMu.Lock()
		delete(p.spliced, client)
		p.flowsMu.Unlock()
	}()
	done := make(chan struct{}, 2)
	go func() {
		// Bytes the client sent past the upgrade wait in buf.
		io.Copy(f.conn, buf)
		if cw, ok := f.conn.(interface{ CloseWrite() error }); ok {
			cw.CloseWrite()
		}
		done <- struct{}{}
	}()
	go func() {
		io.Copy(client, f.br)
		client.Close()
		done <- struct{}{}
	}()
	<-done
	<-done
	f.conn.Close()
	client.Close()
}

// breakFlow ends a flow that failed: the request counts as failed (status
// 0, a transport error), and the client's connection is cut. It does not
// return.
func (p *Proxy) breakFlow(f *flow, r *http.Request, at time.Time, err error) {
	var t *Target
	if f.target != (Target{}) {
		t = &f.target
	}
	code := 0
	if r.Context().Err() != nil && !f.cut.Load() {
		code = StatusClientClosed // the client left first: not the flow's failure
	}
	p.record(t, at, code, false)
	if f.conn != nil {
		f.conn.Close()
	}
	p.cfg.ErrorLog.Printf("flow to %v: %v", f.target, err)
	if c := f.client; c != nil {
		c.Close()
	}
	panic(http.ErrAbortHandler)
}

// closeFlows ends every flow: the client's connection and the target's.
func (p *Proxy) closeFlows() {
	p.flowsMu.Lock()
	defer p.flowsMu.Unlock()
	for c, f := range p.flows {
		c.Close()
		f.end()
	}
	clear(p.flows)
	for c, f := range p.spliced {
		c.Close()
		f.end()
	}
}
