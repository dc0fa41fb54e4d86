package dataplane

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// flowTarget is a target that answers with its own name and the address the
// request came from, and counts its connections open.
type flowTarget struct {
	*httptest.Server
	name string
	mu   sync.Mutex
	open map[net.Conn]bool
}

func newFlowTarget(t *testing.T, name string) *flowTarget {
	ft := &flowTarget{name: name, open: map[net.Conn]bool{}}
	ft.Server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, ft.name+" "+r.RemoteAddr)
	}))
	ft.Config.ConnState = func(c net.Conn, s http.ConnState) {
		ft.mu.Lock()
		defer ft.mu.Unlock()
		switch s {
		case http.StateNew:
			ft.open[c] = true
		case http.StateClosed, http.StateHijacked:
			delete(ft.open, c)
		}
	}
	ft.Start()
	t.Cleanup(ft.Close)
	return ft
}

func (ft *flowTarget) conns() int {
	ft.mu.Lock()
	defer ft.mu.Unlock()
	return len(ft.open)
}

// flowNode serves a Flows-mode node on loopback and returns its address.
func flowNode(t *testing.T, cfg Config) (*Proxy, string) {
	cfg.Flows = true
	p := New(cfg)
	t.Cleanup(p.Close)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := p.Server()
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return p, ln.Addr().String()
}

// rawClient is one client connection, from a chosen local address.
type rawClient struct {
	c  net.Conn
	br *bufio.Reader
}

func dialFrom(t *testing.T, from, addr string) *rawClient {
	t.Helper()
	d := net.Dialer{Timeout: 5 * time.Second}
	if from != "" {
		d.LocalAddr = &net.TCPAddr{IP: net.ParseIP(from)}
	}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &rawClient{c, bufio.NewReader(c)}
}

// get sends one request on the connection and returns the answer's body,
// or the error that ended the connection.
func (rc *rawClient) get() (string, error) {
	rc.c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(rc.c, "GET / HTTP/1.1\r\nHost: lb\r\n\r\n"); err != nil {
		return "", err
	}
	res, err := http.ReadResponse(rc.br, nil)
	if err != nil {
		return "", err
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	return string(b), err
}

func (rc *rawClient) mustGet(t *testing.T) string {
	t.Helper()
	b, err := rc.get()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// In Flows mode a client connection stays with the target it was given,
// even once the node took that target out of rotation; only a new
// connection follows the rotation. The default mode routes each request.
func TestFlowStaysWithItsTargetAfterItLeavesRotation(t *testing.T) {
	a, b := newFlowTarget(t, "a"), newFlowTarget(t, "b")
	p, addr := flowNode(t, Config{})
	healthy(t, p, targetOf(t, a.URL))

	old := dialFrom(t, "", addr)
	if got := old.mustGet(t); !strings.HasPrefix(got, "a ") {
		t.Fatalf("first request went to %q; want a", got)
	}
	healthy(t, p, targetOf(t, a.URL), targetOf(t, b.URL))
	p.Apply(Event{Target: targetOf(t, a.URL), To: "draining"})
	waitRotation(t, p, 1)

	for i := range 5 {
		if got := old.mustGet(t); !strings.HasPrefix(got, "a ") {
			t.Fatalf("request %d on the old flow went to %q; want a, the flow's target, though out of rotation", i, got)
		}
	}
	if got := dialFrom(t, "", addr).mustGet(t); !strings.HasPrefix(got, "b ") {
		t.Fatalf("a new flow went to %q; want b, the only target in rotation", got)
	}
	if n := a.conns(); n != 1 {
		t.Errorf("target a has %d connections open; want 1, the old flow's", n)
	}
	st := p.Stats()
	if st.Failed != 0 || st.Total != 7 || st.ByTarget[targetOf(t, a.URL)].Requests != 6 {
		t.Errorf("stats %+v; want 7 requests, 6 to a, none failed", st)
	}
}

func waitRotation(t *testing.T, p *Proxy, n int) {
	t.Helper()
	for end := time.Now().Add(10 * time.Second); len(p.Rotation()) != n; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("rotation %v; want %d targets", p.Rotation(), n)
		}
	}
}

// A target that closes a flow's connection (an app's shutdown closing its
// idle keep-alive connections) closes the client's, as a pass-through load
// balancer passes a FIN; a client that closes its connection closes the
// target's.
func TestFlowEndsWithEitherEnd(t *testing.T) {
	a := newFlowTarget(t, "a")
	p, addr := flowNode(t, Config{})
	healthy(t, p, targetOf(t, a.URL))

	rc := dialFrom(t, "", addr)
	rc.mustGet(t)
	a.CloseClientConnections()
	rc.c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if n, err := rc.br.ReadByte(); err != io.EOF {
		t.Fatalf("client connection after the target closed the flow: read %v, %v; want EOF", n, err)
	}

	rc = dialFrom(t, "", addr)
	rc.mustGet(t)
	if n := a.conns(); n != 1 {
		t.Fatalf("target has %d connections; want 1", n)
	}
	rc.c.Close()
	for end := time.Now().Add(10 * time.Second); a.conns() != 0; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("the client closed its flow, but the target still has %d connections open", a.conns())
		}
	}
	if st := p.Stats(); st.Failed != 0 {
		t.Errorf("stats %+v; want no failure", st)
	}
}

// A flow whose target is gone cuts the client's connection, with no HTTP
// answer (an NLB has none), and counts as failed.
func TestFlowToATargetGoneIsCut(t *testing.T) {
	a := newFlowTarget(t, "a")
	tg := targetOf(t, a.URL)
	a.Close()
	p, addr := flowNode(t, Config{})
	healthy(t, p, tg)
	if got, err := dialFrom(t, "", addr).get(); err == nil {
		t.Fatalf("a flow to a closed port got %q; want its connection cut", got)
	}
	st := p.Stats()
	if st.Failed != 1 || st.ByStatus[0] != 1 || st.ByTarget[tg].Failed != 1 {
		t.Errorf("stats %+v; want one failed request, status 0, on the target", st)
	}
}

// With PreserveClientIP a target sees each client's own address; without
// it, the node's.
func TestFlowPreservesClientIP(t *testing.T) {
	a := newFlowTarget(t, "a")
	for _, tc := range []struct {
		preserve bool
		want     string
	}{{true, "127.0.0.3"}, {false, "127.0.0.2"}} {
		p, addr := flowNode(t, Config{PreserveClientIP: tc.preserve, SourceIP: netip.MustParseAddr("127.0.0.2")})
		healthy(t, p, targetOf(t, a.URL))
		got := dialFrom(t, "127.0.0.3", addr).mustGet(t)
		host, _, _ := net.SplitHostPort(strings.Fields(got)[1])
		if host != tc.want {
			t.Errorf("PreserveClientIP %v: the target saw %s; want %s", tc.preserve, host, tc.want)
		}
	}
}

// An upgraded connection (a stream) is spliced through: bytes go both ways
// until either end closes.
func TestFlowSplicesAnUpgrade(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer c.Close()
		io.WriteString(c, "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n")
		for {
			line, err := brw.ReadString('\n')
			if err != nil {
				return
			}
			io.WriteString(c, strings.ToUpper(line))
		}
	}))
	t.Cleanup(srv.Close)
	p, addr := flowNode(t, Config{})
	healthy(t, p, targetOf(t, srv.URL))
	rc := dialFrom(t, "", addr)
	rc.c.SetDeadline(time.Now().Add(10 * time.Second))
	io.WriteString(rc.c, "GET / HTTP/1.1\r\nHost: lb\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n")
	res, err := http.ReadResponse(rc.br, nil)
	if err != nil || res.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("upgrade: %v, %v", res, err)
	}
	for _, msg := range []string{"one\n", "two\n"} {
		io.WriteString(rc.c, msg)
		got, err := rc.br.ReadString('\n')
		if err != nil || got != strings.ToUpper(msg) {
			t.Fatalf("echo of %q: %q, %v", msg, got, err)
		}
	}
	if st := p.Stats(); st.Total != 1 || st.ByStatus[http.StatusSwitchingProtocols] != 1 {
		t.Errorf("stats %+v; want the upgrade counted once", st)
	}
}

// A target that breaks a flow while a request is in flight on it fails
// that request (status 0), never files it as the client's leaving (460).
func TestFlowCutMidRequestFails(t *testing.T) {
	var n atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if n.Add(1) == 1 {
			io.WriteString(w, "ok")
			return
		}
		c, _, err := http.NewResponseController(w).Hijack()
		if err == nil {
			c.Close() // the app dies with the request in flight
		}
	}))
	t.Cleanup(srv.Close)
	p, addr := flowNode(t, Config{})
	healthy(t, p, targetOf(t, srv.URL))
	rc := dialFrom(t, "", addr)
	rc.mustGet(t)
	if got, err := rc.get(); err == nil {
		t.Fatalf("the request the target broke got %q; want the flow cut", got)
	}
	st := p.Stats()
	if st.Total != 2 || st.Failed != 1 || st.ByStatus[0] != 1 || st.ByStatus[StatusClientClosed] != 0 {
		t.Errorf("stats %+v; want 2 requests, the second failed with status 0", st)
	}
}
