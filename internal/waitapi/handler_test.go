package waitapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"draingate.dev/draingate/api"
	dgtestutil "draingate.dev/draingate/proving/testutil"
)

const testUID = "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0"

// fakeGate is an in-memory Gate: verdicts by "ns/name", a change signal per
// subscription (sent, or closed when closeOnChange), and an optional error.
type fakeGate struct {
	mu            sync.Mutex
	pods          map[string]api.Verdict
	err           error
	closeOnChange bool
	subs          map[int]chan struct{}
	next          int
}

func newFakeGate() *fakeGate {
	return &fakeGate{pods: map[string]api.Verdict{}, subs: map[int]chan struct{}{}}
}

func (g *fakeGate) set(v api.Verdict) {
	g.mu.Lock()
	g.pods[v.Namespace+"/"+v.Pod] = v
	for id, ch := range g.subs {
		if g.closeOnChange {
			close(ch)
			delete(g.subs, id)
		} else {
			select {
			case ch <- struct{}{}:
			default:
			}
		}
	}
	g.mu.Unlock()
}

func (g *fakeGate) Verdict(ctx context.Context, req api.DrainRequest) (api.Verdict, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.err != nil {
		return api.Verdict{}, g.err
	}
	v, ok := g.pods[req.Namespace+"/"+req.Pod]
	if !ok {
		return api.Verdict{}, fmt.Errorf("pod %s/%s: %w", req.Namespace, req.Pod, ErrUnknownPod)
	}
	return v, nil
}

func (g *fakeGate) Changed(req api.DrainRequest) (<-chan struct{}, func()) {
	g.mu.Lock()
	defer g.mu.Unlock()
	id := g.next
	g.next++
	ch := make(chan struct{}, 1)
	g.subs[id] = ch
	return ch, func() {
		g.mu.Lock()
		delete(g.subs, id)
		g.mu.Unlock()
	}
}

func (g *fakeGate) subscriptions() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.subs)
}

func waiting(ns, pod string) api.Verdict {
	return api.Verdict{Namespace: ns, Pod: pod, UID: testUID, Reason: api.ReasonNotTerminating, Waited: api.Duration(time.Second),
		Routes: []api.Route{{Kind: "targetgroup", Name: "tg-web", State: "draining"}}}
}

func drained(ns, pod string) api.Verdict {
	return api.Verdict{Namespace: ns, Pod: pod, UID: testUID, Released: true, Reason: api.ReasonDrained, Waited: api.Duration(12 * time.Second)}
}

type fixture struct {
	gate *fakeGate
	reg  *prometheus.Registry
	m    *Metrics
	srv  *memServer
}

func newFixture(t *testing.T, cfg Config) *fixture {
	t.Helper()
	f := &fixture{gate: newFakeGate(), reg: prometheus.NewRegistry()}
	f.m = NewMetrics(f.reg)
	cfg.Metrics = f.m
	f.srv = newMemServer(t, NewHandler(f.gate, cfg))
	return f
}

// memServer serves a handler in memory, with no socket, so that tests can
// run in a synctest bubble: time there is fake, a long-poll's wait costs
// nothing, and synctest.Wait tells when every goroutine, the handler's
// included, is blocked. Requests reach it through client.
type memServer struct {
	URL string
}

var (
	memMu      sync.Mutex
	memServers = map[string]http.Handler{}
	memNext    int
)

func newMemServer(t *testing.T, h http.Handler) *memServer {
	t.Helper()
	memMu.Lock()
	memNext++
	host := fmt.Sprintf("gate-%d.test", memNext)
	memServers[host] = h
	memMu.Unlock()
	t.Cleanup(func() {
		memMu.Lock()
		delete(memServers, host)
		memMu.Unlock()
	})
	return &memServer{URL: "http://" + host}
}

// client sends requests to the memServers.
var client = &http.Client{Transport: memTransport{}}

// memTransport runs the handler of the request's host on a server-side
// copy of the request, as http.Server would. Like a client, it gives up
// when the request's context ends; the handler then sees its context
// canceled, as it would when a client hangs up.
type memTransport struct{}

func (memTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	memMu.Lock()
	h := memServers[req.URL.Host]
	memMu.Unlock()
	if h == nil {
		return nil, fmt.Errorf("no memServer at %s", req.URL.Host)
	}
	sreq := httptest.NewRequestWithContext(req.Context(), req.Method, req.URL.String(), req.Body)
	sreq.Header = req.Header.Clone()
	sreq.Header.Del(remoteHeader)
	if from := req.Header.Get(remoteHeader); from != "" {
		sreq.RemoteAddr = from // where the request comes from, as the server sees it
	}
	rec := httptest.NewRecorder()
	done := make(chan struct{})
	go func() {
		defer close(done)
		h.ServeHTTP(rec, sreq)
	}()
	select {
	case <-done:
		resp := rec.Result()
		resp.Request = req
		return resp, nil
	case <-req.Context().Done():
		return nil, req.Context().Err()
	}
}

type answer struct {
	status int
	header http.Header
	body   []byte
}

func (a answer) verdict(t *testing.T) api.Verdict {
	t.Helper()
	var v api.Verdict
	if err := json.Unmarshal(a.body, &v); err != nil {
		t.Fatalf("body %q is not a verdict: %v", a.body, err)
	}
	return v
}

func (a answer) errorMessage(t *testing.T) string {
	t.Helper()
	var e struct {
		Error string `json:"error"`
	}
	if err := json.Unmarshal(a.body, &e); err != nil || e.Error == "" {
		t.Fatalf("body %q has no error message (%v)", a.body, err)
	}
	return e.Error
}

func do(t *testing.T, ctx context.Context, method, url string) answer {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("%s %s: Content-Type %q", method, url, ct)
	}
	return answer{resp.StatusCode, resp.Header, b}
}

// remoteHeader tells memTransport the request's source address.
const remoteHeader = "X-Test-Remote-Addr"

// getFrom is get from the address remote ("10.0.0.7:40000").
func getFrom(t *testing.T, url, remote string, header ...string) answer {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set(remoteHeader, remote)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return answer{resp.StatusCode, resp.Header, b}
}

func get(t *testing.T, url string) answer {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	return do(t, ctx, http.MethodGet, url)
}

func drainURL(base, ns, pod, query string) string {
	u := api.DrainRequest{Namespace: ns, Pod: pod}.URL(base)
	if query != "" {
		u += "?" + query
	}
	return u
}

func TestReleasedAtOnce(t *testing.T) {
	synctest.Test(t, testReleasedAtOnce)
}

func testReleasedAtOnce(t *testing.T) {
	f := newFixture(t, Config{MaxWait: time.Hour})
	f.gate.set(drained("shop", "web-0"))
	start := time.Now()
	a := get(t, drainURL(f.srv.URL, "shop", "web-0", "uid="+testUID+"&wait=1h"))
	if a.status != 200 {
		t.Fatalf("status %d: %s", a.status, a.body)
	}
	if took := time.Since(start); took != 0 {
		t.Errorf("a released pod took %s to answer, want no wait at all", took)
	}
	v := a.verdict(t)
	if !v.Released || v.Reason != api.ReasonDrained || v.Pod != "web-0" || v.Namespace != "shop" || time.Duration(v.Waited) != 12*time.Second {
		t.Errorf("verdict %+v", v)
	}
	if got := testutil.ToFloat64(f.m.Waits.WithLabelValues("drained")); got != 1 {
		t.Errorf("waits_total{outcome=drained} = %v", got)
	}
	if got := testutil.ToFloat64(f.m.Requests.WithLabelValues("200")); got != 1 {
		t.Errorf("wait_requests_total{code=200} = %v", got)
	}
	if n := testutil.CollectAndCount(f.m.WaitSeconds); n != 1 {
		t.Errorf("wait_seconds: %d series", n)
	}
	if f.gate.subscriptions() != 0 {
		t.Errorf("a released pod left a subscription")
	}
}

func TestNoWaitAnswersAtOnce(t *testing.T) {
	f := newFixture(t, Config{MaxWait: time.Hour})
	f.gate.set(waiting("shop", "web-0"))
	for _, q := range []string{"", "wait=0s", "uid=" + testUID} {
		a := get(t, drainURL(f.srv.URL, "shop", "web-0", q))
		if a.status != 200 {
			t.Fatalf("%q: status %d: %s", q, a.status, a.body)
		}
		if v := a.verdict(t); v.Released || len(v.Routes) != 1 || v.Routes[0].State != "draining" {
			t.Errorf("%q: verdict %+v", q, v)
		}
	}
	if got := testutil.ToFloat64(f.m.Waits.WithLabelValues(OutcomeUnreleased)); got != 3 {
		t.Errorf("waits_total{outcome=unreleased} = %v", got)
	}
}

func testLongPollReleased(t *testing.T, closeOnChange bool) {
	f := newFixture(t, Config{MaxWait: time.Minute})
	f.gate.closeOnChange = closeOnChange
	f.gate.set(waiting("shop", "web-0"))
	done := make(chan answer, 1)
	go func() { done <- get(t, drainURL(f.srv.URL, "shop", "web-0", "uid="+testUID+"&wait=50s")) }()
	synctest.Wait()
	if got := testutil.ToFloat64(f.m.PollsInFlight); got != 1 {
		t.Errorf("wait_polls_in_flight = %v during the poll", got)
	}
	// A change that does not release the pod keeps the poll going.
	still := waiting("shop", "web-0")
	still.Routes[0].State = "closed"
	f.gate.set(still)
	synctest.Wait()
	select {
	case a := <-done:
		t.Fatalf("answered before release: %d %s", a.status, a.body)
	default:
	}
	if n := f.gate.subscriptions(); n != 1 {
		t.Errorf("%d subscriptions during the poll, want 1", n)
	}
	start := time.Now()
	f.gate.set(drained("shop", "web-0"))
	a := <-done
	if a.status != 200 || !a.verdict(t).Released {
		t.Fatalf("status %d: %s", a.status, a.body)
	}
	if took := time.Since(start); took != 0 {
		t.Errorf("answered %s after the release, want at once", took)
	}
	if got := testutil.ToFloat64(f.m.PollsInFlight); got != 0 {
		t.Errorf("wait_polls_in_flight = %v after the poll", got)
	}
	if n := f.gate.subscriptions(); n != 0 {
		t.Errorf("%d subscriptions left after the poll", n)
	}
}

func TestLongPollReleasedBySend(t *testing.T) {
	synctest.Test(t, func(t *testing.T) { testLongPollReleased(t, false) })
}

func TestLongPollReleasedByClose(t *testing.T) {
	synctest.Test(t, func(t *testing.T) { testLongPollReleased(t, true) })
}

func TestLongPollCappedWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const maxWait = 200 * time.Millisecond
		f := newFixture(t, Config{MaxWait: maxWait})
		f.gate.set(waiting("shop", "web-0"))
		start := time.Now()
		a := get(t, drainURL(f.srv.URL, "shop", "web-0", "wait=2000000h")) // ~228 years, capped
		if a.status != 200 {
			t.Fatalf("status %d: %s", a.status, a.body)
		}
		if took := time.Since(start); took != maxWait {
			t.Errorf("answered after %s, want MaxWait %s", took, maxWait)
		}
		if v := a.verdict(t); v.Released || v.Reason != api.ReasonNotTerminating {
			t.Errorf("verdict %+v", v)
		}
		if got := testutil.ToFloat64(f.m.Waits.WithLabelValues(OutcomeUnreleased)); got != 1 {
			t.Errorf("waits_total{outcome=unreleased} = %v", got)
		}
		if got := testutil.ToFloat64(f.m.PollsInFlight); got != 0 {
			t.Errorf("wait_polls_in_flight = %v", got)
		}
	})
}

// TestPollEndsForFreshEvidence: a long-poll ends, unreleased, when an open
// route's QuietBy passes (the server's timer signals then), so the agent
// brings fresh traffic evidence; a closed route's QuietBy does not end it.
func TestPollEndsForFreshEvidence(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, Config{MaxWait: time.Hour})
		start := time.Now()
		quietBy := start.Add(3 * time.Second)
		v := waiting("shop", "web-0")
		v.Routes = append(v.Routes, api.Route{Kind: "targetgroup", Name: "tg-closed", State: "closed", ClosedBy: api.ClosedByTraffic, QuietBy: &start})
		v.Routes[0].QuietBy = &quietBy
		f.gate.set(v)
		done := make(chan answer, 1)
		go func() { done <- get(t, drainURL(f.srv.URL, "shop", "web-0", "wait=50s")) }()
		time.Sleep(3 * time.Second)
		f.gate.set(v) // the server's timer at QuietBy
		a := <-done
		if took := time.Since(start); took != 3*time.Second {
			t.Errorf("answered after %s, want at QuietBy (3s)", took)
		}
		if got := a.verdict(t); got.Released || got.Routes[0].QuietBy == nil {
			t.Errorf("verdict %+v, want unreleased with QuietBy", got)
		}
	})
}

// TestPollEndsForNewerEvidence: a long-poll ends, unreleased, when an open
// route's AskBy passes, before its QuietBy: the evidence the server holds
// is old, and newer evidence could close the route sooner.
func TestPollEndsForNewerEvidence(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, Config{MaxWait: time.Hour})
		start := time.Now()
		askBy, quietBy := start.Add(time.Second), start.Add(8*time.Second)
		v := waiting("shop", "web-0")
		v.Routes[0].QuietBy, v.Routes[0].AskBy = &quietBy, &askBy
		f.gate.set(v)
		done := make(chan answer, 1)
		go func() { done <- get(t, drainURL(f.srv.URL, "shop", "web-0", "wait=50s")) }()
		time.Sleep(time.Second)
		f.gate.set(v) // the server's timer at AskBy
		a := <-done
		if took := time.Since(start); took != time.Second {
			t.Errorf("answered after %s, want at AskBy (1s)", took)
		}
		if got := a.verdict(t); got.Released || got.Routes[0].AskBy == nil {
			t.Errorf("verdict %+v, want unreleased with AskBy", got)
		}
	})
}

func TestClientDisconnectEndsPoll(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, Config{MaxWait: time.Hour})
		f.gate.set(waiting("shop", "web-0"))
		ctx, cancel := context.WithCancel(context.Background())
		errc := make(chan error, 1)
		go func() {
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, drainURL(f.srv.URL, "shop", "web-0", "wait=1h"), nil)
			resp, err := client.Do(req)
			if err == nil {
				resp.Body.Close()
			}
			errc <- err
		}()
		synctest.Wait()
		if got := testutil.ToFloat64(f.m.PollsInFlight); got != 1 {
			t.Errorf("wait_polls_in_flight = %v during the poll", got)
		}
		cancel()
		if err := <-errc; err == nil {
			t.Fatal("the canceled request got an answer")
		}
		synctest.Wait() // the handler's goroutine is done
		if got, n := testutil.ToFloat64(f.m.PollsInFlight), f.gate.subscriptions(); got != 0 || n != 0 {
			t.Errorf("poll still running after the client left: wait_polls_in_flight = %v, subscriptions = %d", got, n)
		}
		if got := testutil.ToFloat64(f.m.Waits.WithLabelValues(OutcomeCanceled)); got != 1 {
			t.Errorf("waits_total{outcome=canceled} = %v", got)
		}
	})
}

func TestShutdownEndsPoll(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		shutdown := make(chan struct{})
		f := newFixture(t, Config{MaxWait: time.Hour, Shutdown: shutdown})
		f.gate.set(waiting("shop", "web-0"))
		done := make(chan answer, 1)
		go func() { done <- get(t, drainURL(f.srv.URL, "shop", "web-0", "wait=1h")) }()
		synctest.Wait()
		start := time.Now()
		close(shutdown)
		a := <-done
		if a.status != 200 || a.verdict(t).Released {
			t.Fatalf("status %d: %s", a.status, a.body)
		}
		if took := time.Since(start); took != 0 {
			t.Errorf("answered %s after the shutdown, want at once", took)
		}
	})
}

func TestMaxWaitingAnswersAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, Config{MaxWait: time.Hour, MaxWaiting: 1})
		f.gate.set(waiting("shop", "web-0"))
		f.gate.set(waiting("shop", "web-1"))
		done := make(chan answer, 1)
		go func() { done <- get(t, drainURL(f.srv.URL, "shop", "web-0", "wait=1h")) }()
		synctest.Wait()
		start := time.Now()
		a := get(t, drainURL(f.srv.URL, "shop", "web-1", "wait=1h"))
		if a.status != 200 || a.verdict(t).Released {
			t.Fatalf("over the cap: status %d: %s", a.status, a.body)
		}
		if took := time.Since(start); took != 0 {
			t.Errorf("over the cap: answered after %s, want at once", took)
		}
		f.gate.set(drained("shop", "web-0"))
		if a := <-done; a.status != 200 || !a.verdict(t).Released {
			t.Fatalf("status %d: %s", a.status, a.body)
		}
	})
}

func TestBadRequests(t *testing.T) {
	f := newFixture(t, Config{})
	f.gate.set(waiting("shop", "web-0"))
	for _, c := range []struct{ path, want string }{
		{"/v1/namespaces/Shop/pods/web-0/drain", "namespace"},
		{"/v1/namespaces/shop/pods/web_0/drain", "pod name"},
		{"/v1/namespaces/shop/pods/-web/drain", "pod name"},
		{"/v1/namespaces/shop/pods/a%2Fb/drain", "not a drain path"},
		{"/v1/namespaces/shop/extra/pods/web-0/drain", "not a drain path"},
		{"/v1/namespaces/shop/pods/web-0/drain?uid=not-a-uid", "uid"},
		{"/v1/namespaces/shop/pods/web-0/drain?uid=a&uid=b", "uid"},
		{"/v1/namespaces/shop/pods/web-0/drain?wait=-1s", "negative"},
		{"/v1/namespaces/shop/pods/web-0/drain?wait=1e9h", "wait"},
		{"/v1/namespaces/shop/pods/web-0/drain?wait=abc", "wait"},
		{"/v1/namespaces/shop/pods/web-0/drain?wait=10000000h", "wait"},
		{"/v1/namespaces/shop/pods/web-0/drain?wait=%zz", "query"},
	} {
		a := get(t, f.srv.URL+c.path)
		if a.status != 400 {
			t.Errorf("%s: status %d, want 400: %s", c.path, a.status, a.body)
			continue
		}
		if msg := a.errorMessage(t); !strings.Contains(msg, c.want) {
			t.Errorf("%s: message %q does not mention %q", c.path, msg, c.want)
		}
	}
	if got := testutil.ToFloat64(f.m.Requests.WithLabelValues("400")); got != 12 {
		t.Errorf("wait_requests_total{code=400} = %v", got)
	}
}

func TestMethodNotAllowed(t *testing.T) {
	f := newFixture(t, Config{})
	f.gate.set(waiting("shop", "web-0"))
	ctx := context.Background()
	for _, m := range []string{http.MethodPost, http.MethodPut, http.MethodDelete, http.MethodHead} {
		a := do(t, ctx, m, drainURL(f.srv.URL, "shop", "web-0", ""))
		if a.status != 405 || a.header.Get("Allow") != "GET" {
			t.Errorf("%s: status %d, Allow %q", m, a.status, a.header.Get("Allow"))
		}
	}
	a := do(t, ctx, http.MethodPost, f.srv.URL+"/healthz")
	if a.status != 405 || a.header.Get("Allow") != "GET, HEAD" {
		t.Errorf("POST /healthz: status %d, Allow %q", a.status, a.header.Get("Allow"))
	}
	if a := do(t, ctx, http.MethodPost, f.srv.URL+"/v1/namespaces/shop/pods/web-0/drain"); a.errorMessage(t) == "" {
		t.Error("no message")
	}
}

func TestUnknownPod(t *testing.T) {
	f := newFixture(t, Config{})
	a := get(t, drainURL(f.srv.URL, "shop", "web-9", "uid="+testUID+"&wait=10s"))
	if a.status != 404 {
		t.Fatalf("status %d: %s", a.status, a.body)
	}
	if msg := a.errorMessage(t); !strings.Contains(msg, "shop/web-9") || !strings.Contains(msg, "not known") {
		t.Errorf("message %q", msg)
	}
	v := a.verdict(t)
	if v.Released || v.Reason != api.ReasonNotFound || v.Pod != "web-9" || v.UID != testUID || v.Message == "" {
		t.Errorf("verdict %+v", v)
	}
	if got := testutil.ToFloat64(f.m.Waits.WithLabelValues(OutcomeUnknownPod)); got != 1 {
		t.Errorf("waits_total{outcome=unknown-pod} = %v", got)
	}
	if got := testutil.ToFloat64(f.m.Requests.WithLabelValues("404")); got != 1 {
		t.Errorf("wait_requests_total{code=404} = %v", got)
	}
}

func TestUIDMismatch(t *testing.T) {
	f := newFixture(t, Config{MaxWait: time.Hour})
	f.gate.set(waiting("shop", "web-0")) // has testUID
	other := "aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee"
	// Even with a long wait: a pod under another UID is answered at once.
	a := get(t, drainURL(f.srv.URL, "shop", "web-0", "uid="+other+"&wait=1h"))
	if a.status != 404 {
		t.Fatalf("status %d: %s", a.status, a.body)
	}
	if msg := a.errorMessage(t); !strings.Contains(msg, "another uid") {
		t.Errorf("message %q", msg)
	}
	if v := a.verdict(t); v.Reason != api.ReasonNotFound || v.UID != other || v.Released {
		t.Errorf("verdict %+v", v)
	}
	// UIDs compare without regard to case.
	if a := get(t, drainURL(f.srv.URL, "shop", "web-0", "uid="+strings.ToUpper(testUID))); a.status != 200 {
		t.Errorf("upper-case uid: status %d", a.status)
	}
	// A gate may also say so itself.
	f.gate.err = fmt.Errorf("shop/web-0: %w", ErrUIDMismatch)
	if a := get(t, drainURL(f.srv.URL, "shop", "web-0", "uid="+other)); a.status != 404 {
		t.Errorf("gate's ErrUIDMismatch: status %d", a.status)
	}
	if got := testutil.ToFloat64(f.m.Waits.WithLabelValues(OutcomeUIDMismatch)); got != 2 {
		t.Errorf("waits_total{outcome=uid-mismatch} = %v", got)
	}
}

func TestGateError(t *testing.T) {
	f := newFixture(t, Config{})
	f.gate.err = errors.New("informer cache\nnot synced")
	a := get(t, drainURL(f.srv.URL, "shop", "web-0", "wait=5s"))
	if a.status != 503 || a.header.Get("Retry-After") == "" {
		t.Fatalf("status %d, Retry-After %q: %s", a.status, a.header.Get("Retry-After"), a.body)
	}
	if msg := a.errorMessage(t); !strings.Contains(msg, "informer cache; not synced") {
		t.Errorf("message %q", msg)
	}
	if got := testutil.ToFloat64(f.m.Waits.WithLabelValues(OutcomeError)); got != 1 {
		t.Errorf("waits_total{outcome=error} = %v", got)
	}
	if got := testutil.ToFloat64(f.m.Requests.WithLabelValues("503")); got != 1 {
		t.Errorf("wait_requests_total{code=503} = %v", got)
	}
}

func TestGateErrorDuringPoll(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, Config{MaxWait: time.Hour})
		f.gate.set(waiting("shop", "web-0"))
		done := make(chan answer, 1)
		go func() { done <- get(t, drainURL(f.srv.URL, "shop", "web-0", "wait=1h")) }()
		synctest.Wait()
		f.gate.mu.Lock()
		f.gate.err = errors.New("lost the watch")
		f.gate.mu.Unlock()
		f.gate.set(waiting("shop", "web-0")) // signal
		if a := <-done; a.status != 503 {
			t.Fatalf("status %d: %s", a.status, a.body)
		}
	})
}

func TestUnknownPaths(t *testing.T) {
	f := newFixture(t, Config{})
	for _, p := range []string{"/", "/v1", "/v1/namespaces/shop/pods/web-0", "/metrics", "/healthz/", "/v2/namespaces/shop/pods/web-0/drain"} {
		a := get(t, f.srv.URL+p)
		if a.status != 404 {
			t.Errorf("%s: status %d", p, a.status)
			continue
		}
		a.errorMessage(t)
	}
}

func TestProbes(t *testing.T) {
	var mu sync.Mutex
	readyErr := errors.New("caches not synced")
	f := newFixture(t, Config{Ready: func() error { mu.Lock(); defer mu.Unlock(); return readyErr }})
	if a := get(t, f.srv.URL+"/healthz"); a.status != 200 {
		t.Errorf("/healthz: %d", a.status)
	}
	if a := do(t, context.Background(), http.MethodHead, f.srv.URL+"/healthz"); a.status != 200 {
		t.Errorf("HEAD /healthz: %d", a.status)
	}
	a := get(t, f.srv.URL+"/readyz")
	if a.status != 503 || !strings.Contains(a.errorMessage(t), "caches not synced") {
		t.Errorf("/readyz before ready: %d %s", a.status, a.body)
	}
	mu.Lock()
	readyErr = nil
	mu.Unlock()
	if a := get(t, f.srv.URL+"/readyz"); a.status != 200 {
		t.Errorf("/readyz when ready: %d %s", a.status, a.body)
	}
	// Probes are not wait requests.
	if n := testutil.CollectAndCount(f.m.Requests); n != 0 {
		t.Errorf("probes counted: %d series", n)
	}

	g := newFixture(t, Config{})
	if a := get(t, g.srv.URL+"/readyz"); a.status != 503 {
		t.Errorf("/readyz without a Ready func: %d", a.status)
	}
}

func TestMetricNames(t *testing.T) {
	synctest.Test(t, testMetricNames)
}

func testMetricNames(t *testing.T) {
	f := newFixture(t, Config{MaxWait: 50 * time.Millisecond})
	f.gate.set(drained("shop", "web-0"))
	f.gate.set(waiting("shop", "web-1"))
	get(t, drainURL(f.srv.URL, "shop", "web-0", ""))
	get(t, drainURL(f.srv.URL, "shop", "web-1", "wait=1s"))
	get(t, drainURL(f.srv.URL, "shop", "web-2", ""))
	expected := `
# HELP draingate_waits_total Drain requests by outcome: the verdict's reason when released, else unreleased, canceled, unknown-pod, uid-mismatch or error.
# TYPE draingate_waits_total counter
draingate_waits_total{outcome="deadline"} 0
draingate_waits_total{outcome="drained"} 1
draingate_waits_total{outcome="no-routes"} 0
draingate_waits_total{outcome="unknown-pod"} 1
draingate_waits_total{outcome="unreleased"} 1
# HELP draingate_wait_polls_in_flight Wait API long-polls being held (requests, not pods: an agent between two polls is not counted).
# TYPE draingate_wait_polls_in_flight gauge
draingate_wait_polls_in_flight 0
`
	if err := testutil.GatherAndCompare(f.reg, strings.NewReader(expected), "draingate_waits_total", "draingate_wait_polls_in_flight"); err != nil {
		t.Error(err)
	}
	if got := testutil.ToFloat64(f.m.Requests.WithLabelValues("200")); got != 2 {
		t.Errorf("wait_requests_total{code=200} = %v", got)
	}
	if err := testutil.GatherAndCompare(f.reg, strings.NewReader(`
# HELP draingate_wait_seconds How long pods had waited (the verdict's waited) when the wait API released them.
# TYPE draingate_wait_seconds histogram
draingate_wait_seconds_bucket{le="0.5"} 0
draingate_wait_seconds_bucket{le="1"} 0
draingate_wait_seconds_bucket{le="2"} 0
draingate_wait_seconds_bucket{le="5"} 0
draingate_wait_seconds_bucket{le="10"} 0
draingate_wait_seconds_bucket{le="15"} 1
draingate_wait_seconds_bucket{le="20"} 1
draingate_wait_seconds_bucket{le="30"} 1
draingate_wait_seconds_bucket{le="45"} 1
draingate_wait_seconds_bucket{le="60"} 1
draingate_wait_seconds_bucket{le="90"} 1
draingate_wait_seconds_bucket{le="120"} 1
draingate_wait_seconds_bucket{le="180"} 1
draingate_wait_seconds_bucket{le="240"} 1
draingate_wait_seconds_bucket{le="300"} 1
draingate_wait_seconds_bucket{le="450"} 1
draingate_wait_seconds_bucket{le="600"} 1
draingate_wait_seconds_bucket{le="+Inf"} 1
draingate_wait_seconds_sum 12
draingate_wait_seconds_count 1
`), "draingate_wait_seconds"); err != nil {
		t.Error(err)
	}
}

func TestNilMetrics(t *testing.T) {
	g := newFakeGate()
	g.set(drained("shop", "web-0"))
	srv := newMemServer(t, NewHandler(g, Config{}))
	if a := get(t, drainURL(srv.URL, "shop", "web-0", "")); a.status != 200 {
		t.Fatalf("status %d", a.status)
	}
}

// Authorize sees the request, its source and its bearer token before the
// gate is asked: ErrForbidden is a 403 naming the source, and the gate is
// never read.
func TestAuthorize(t *testing.T) {
	var seen []netip.Addr
	var log dgtestutil.SyncBuffer
	f := newFixture(t, Config{Authorize: func(_ context.Context, req api.DrainRequest, c Caller) error {
		seen = append(seen, c.Addr)
		if c.Addr != netip.MustParseAddr("10.0.0.7") && c.Token != "pod-token" {
			return fmt.Errorf("%w: the request comes from %s, not from one of the pod's addresses 10.0.0.7", ErrForbidden, c.Addr)
		}
		return nil
	}, Log: slog.New(slog.NewTextHandler(&log, nil))})
	f.gate.set(drained("shop", "web-0"))
	// A caller that may not ask about a pod gets the answer about a pod
	// that does not exist: it learns neither that the pod exists nor its
	// addresses. Why goes to the log.
	a := getFrom(t, drainURL(f.srv.URL, "shop", "web-0", ""), "10.0.0.8:5555")
	unknown := getFrom(t, drainURL(f.srv.URL, "shop", "nobody", ""), "10.0.0.7:5555")
	if a.status != http.StatusNotFound || unknown.status != http.StatusNotFound ||
		strings.ReplaceAll(string(a.body), "web-0", "nobody") != string(unknown.body) || strings.Contains(string(a.body), "10.0.0.7") {
		t.Errorf("from another address: %d %s; about a pod that does not exist: %d %s; want the same answer", a.status, a.body, unknown.status, unknown.body)
	}
	if !strings.Contains(log.String(), "10.0.0.8") || !strings.Contains(log.String(), "not from one of the pod's addresses") {
		t.Errorf("log %q: want why the request was refused", log.String())
	}
	seen = seen[:1]
	if a := getFrom(t, drainURL(f.srv.URL, "shop", "web-0", ""), "[::ffff:10.0.0.7]:5555"); a.status != 200 || !a.verdict(t).Released {
		t.Errorf("from the pod: %d %s", a.status, a.body)
	}
	if len(seen) != 2 || seen[1] != netip.MustParseAddr("10.0.0.7") {
		t.Errorf("sources seen %v, want the two, IPv4-mapped unmapped", seen)
	}
	for _, tc := range []struct {
		header string
		status int
	}{{"Bearer pod-token", 200}, {"bearer  pod-token ", 200}, {"Basic pod-token", 404}, {"pod-token", 404}} {
		if a := getFrom(t, drainURL(f.srv.URL, "shop", "web-0", ""), "10.0.0.8:5555", "Authorization", tc.header); a.status != tc.status {
			t.Errorf("Authorization %q: %d %s, want %d", tc.header, a.status, a.body, tc.status)
		}
	}
	if n := testutil.ToFloat64(f.m.Waits.WithLabelValues(OutcomeForbidden)); n != 3 {
		t.Errorf("forbidden outcomes %v, want 3", n)
	}
}

// One source holding its share of long-polls gets the rest answered at
// once; another source's long-poll is held, and answered at its release.
func TestMaxWaitingPerSource(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, Config{MaxWait: time.Hour, MaxWaitingPerSource: 2})
		f.gate.set(waiting("shop", "web-0"))
		f.gate.set(waiting("shop", "web-1"))
		held := make(chan answer, 2)
		for range 2 {
			go func() { held <- getFrom(t, drainURL(f.srv.URL, "shop", "web-0", "wait=1h"), "10.0.0.66:1") }()
		}
		synctest.Wait()
		start := time.Now()
		if a := getFrom(t, drainURL(f.srv.URL, "shop", "web-0", "wait=1h"), "10.0.0.66:2"); a.status != 200 || time.Since(start) != 0 {
			t.Fatalf("the flooding source's third long-poll: %d after %s, want answered at once", a.status, time.Since(start))
		}
		other := make(chan answer, 1)
		go func() { other <- getFrom(t, drainURL(f.srv.URL, "shop", "web-1", "wait=1h"), "10.0.0.7:1") }()
		synctest.Wait()
		select {
		case a := <-other:
			t.Fatalf("another source's long-poll answered before its release: %s", a.body)
		default:
		}
		f.gate.set(drained("shop", "web-1"))
		if a := <-other; a.status != 200 || !a.verdict(t).Released {
			t.Fatalf("another source: %d %s", a.status, a.body)
		}
		f.gate.set(drained("shop", "web-0"))
		for range 2 {
			<-held
		}
	})
}

// The releases' series exist at 0 before the first release, so that an
// alert on increase() sees a replica's first deadline release.
func TestReleaseSeriesStartAtZero(t *testing.T) {
	reg := prometheus.NewRegistry()
	NewMetrics(reg)
	want := `
# HELP draingate_waits_total Drain requests by outcome: the verdict's reason when released, else unreleased, canceled, unknown-pod, uid-mismatch or error.
# TYPE draingate_waits_total counter
draingate_waits_total{outcome="deadline"} 0
draingate_waits_total{outcome="drained"} 0
draingate_waits_total{outcome="no-routes"} 0
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "draingate_waits_total"); err != nil {
		t.Error(err)
	}
}
