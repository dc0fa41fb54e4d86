package server

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"maps"
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"

	"draingate.dev/draingate/api"
	"draingate.dev/draingate/internal/evidence"
	"draingate.dev/draingate/internal/gate"
	"draingate.dev/draingate/internal/route"
	"draingate.dev/draingate/internal/waitapi"
)

// The per-pod state machine, without a cluster: a map stands for the pod
// cache and a scripted source for the routes. Time is synctest's.

// scripted is a route source whose routes the test sets: the same for
// every pod. A known route it no longer lists is reported gone.
type scripted struct {
	mu      sync.Mutex
	routes  map[string]bool // name → out
	err     error
	waiting []bool
	known   [][]string
	forgot  []route.PodKey
	ports   []uint16 // the routes' ports (traffic evidence applies)
	obsErr  error    // each observation's error (a read that failed)
	// block, when set, holds every Observe until it is closed.
	block chan struct{}
}

func (s *scripted) Kind() string                            { return "test" }
func (s *scripted) Transform(o any) (any, bool)             { return o, false }
func (s *scripted) Ready() error                            { return nil }
func (s *scripted) Start(context.Context, route.Host) error { return nil }
func (s *scripted) Close()                                  {}
func (s *scripted) AdmissionWait(context.Context, *corev1.Pod) (time.Duration, string, error) {
	return 0, "", nil
}

func (s *scripted) Observe(_ context.Context, _ *corev1.Pod, knownRoutes []gate.Known, waiting bool) ([]gate.Observation, error) {
	var known []string
	for _, k := range knownRoutes {
		known = append(known, k.Name)
	}
	if s.block != nil {
		<-s.block
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.waiting, s.known = append(s.waiting, waiting), append(s.known, known)
	if s.err != nil {
		return nil, s.err
	}
	names := maps.Clone(s.routes)
	for _, k := range known {
		if _, ok := names[k]; !ok {
			names[k] = true
		}
	}
	var out []gate.Observation
	for _, n := range slices.Sorted(maps.Keys(names)) {
		o := gate.Observation{Kind: "test", Name: n, Synced: true, State: "in", What: "listed", Tail: 10 * time.Second, TailName: "test", WeighTraffic: len(s.ports) > 0, Ports: s.ports,
			Senders: evidence.Senders{SeenAreAll: true}}
		if names[n] {
			o.State, o.Out, o.What = "out", true, "dropped"
		}
		o.Err = s.obsErr
		out = append(out, o)
	}
	return out, nil
}

func (s *scripted) Forget(k route.PodKey) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.forgot = append(s.forgot, k)
}

// Drop forgets as Forget does, and the pod's routes too (none kept here).
func (s *scripted) Drop(k route.PodKey) { s.Forget(k) }

func (s *scripted) set(routes map[string]bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.routes = routes
}

func (s *scripted) lastWaiting() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.waiting[len(s.waiting)-1]
}

// rig is a pods with its fake cache, source and recorder.
type rig struct {
	*pods
	src    *scripted
	rec    *record.FakeRecorder
	mu     sync.Mutex
	cached map[string]*corev1.Pod
}

func newRig() *rig {
	r := &rig{pods: newPods(), src: &scripted{routes: map[string]bool{"a": false}}, rec: record.NewFakeRecorder(100), cached: map[string]*corev1.Pod{}}
	r.now, r.sources, r.reserve, r.linger = time.Now, []route.Source{r.src}, 5*time.Second, time.Minute
	r.get = func(_ context.Context, ns, name string) (*corev1.Pod, error) {
		r.mu.Lock()
		defer r.mu.Unlock()
		if p := r.cached[ns+"/"+name]; p != nil {
			return p.DeepCopy(), nil
		}
		return nil, apierrors.NewNotFound(corev1.Resource("pods"), name)
	}
	r.events = &events{rec: r.rec, log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	r.ready = func() error { return nil }
	r.synced.Store(true)
	return r
}

// put stores the pod in the fake cache and delivers the informer event.
func (r *rig) put(uid string, terminating bool) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web", UID: types.UID(uid)}}
	if terminating {
		p.DeletionTimestamp = &metav1.Time{Time: time.Now().Add(10 * time.Minute)}
	}
	r.mu.Lock()
	r.cached["shop/web"] = p
	r.mu.Unlock()
	r.podChanged(p.DeepCopy())
	return p
}

func (r *rig) remove(deliver bool) {
	r.mu.Lock()
	p := r.cached["shop/web"]
	delete(r.cached, "shop/web")
	r.mu.Unlock()
	if deliver {
		r.podDeleted(p)
	}
}

func (r *rig) ask(t *testing.T, uid string) api.Verdict {
	t.Helper()
	v, err := r.Verdict(context.Background(), api.DrainRequest{Namespace: "shop", Pod: "web", UID: uid})
	if err != nil {
		t.Fatalf("Verdict: %v", err)
	}
	return v
}

func (r *rig) state() *podState {
	r.pods.mu.Lock()
	defer r.pods.mu.Unlock()
	return r.pods.pods["shop/web"]
}

func (r *rig) eventReasons() []string {
	var out []string
	for {
		select {
		case e := <-r.rec.Events:
			out = append(out, strings.Fields(e)[1])
		default:
			return out
		}
	}
}

// A new terminating pod: tracked from its first event, so the tail starts
// when the source first says out, not when the agent first asks; released
// after the tail by the pod's own timer, which wakes its long-polls; the
// Events are written once each.
func TestPodsNewPod(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig()
		r.put("u1", false)
		if r.state() != nil {
			t.Fatal("a pod that is not terminating is tracked")
		}
		if v := r.ask(t, "u1"); v.Reason != api.ReasonNotTerminating {
			t.Fatalf("before deletion: %+v", v)
		}
		deleted := time.Now()
		r.put("u1", true)
		time.Sleep(3 * time.Second)
		r.src.set(map[string]bool{"a": true}) // the owner drops the pod...
		r.routesChanged("shop", "")           // ...and the source says so
		out := time.Now()
		time.Sleep(4 * time.Second)

		v := r.ask(t, "u1")
		if v.Released || time.Duration(v.Waited) != time.Since(deleted) || !v.Routes[0].Since.Equal(out) {
			t.Fatalf("first ask: %+v; want held, waited since the deletion event, out since the source said so", v)
		}
		if !r.src.lastWaiting() {
			t.Errorf("the source was not told the pod waits")
		}
		ch, stop := r.Changed(api.DrainRequest{Namespace: "shop", Pod: "web"})
		defer stop()
		time.Sleep(out.Add(10*time.Second).Sub(time.Now()) - time.Millisecond)
		synctest.Wait()
		select {
		case <-ch:
			t.Fatal("woken before the tail ended")
		default:
		}
		time.Sleep(time.Second)
		<-ch // the timer re-decided and woke the long-poll
		v = r.ask(t, "u1")
		r.ask(t, "u1")
		if !v.Released || v.Reason != api.ReasonDrained {
			t.Fatalf("after the tail: %+v", v)
		}
		if got := r.eventReasons(); !slices.Equal(got, []string{EventWaitStarted, EventReleased}) {
			t.Errorf("events %v, want one wait-started and one released", got)
		}
	})
}

// A pod re-created under the same name: the old incarnation's state is
// dropped (its source work forgotten) and the new one starts afresh; an
// agent of the old one is told its UID is gone.
func TestPodsUIDChange(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig()
		r.put("u1", true)
		r.src.set(map[string]bool{"a": true, "b": true})
		r.ask(t, "u1")
		first := r.state()
		time.Sleep(time.Minute)

		r.src.set(map[string]bool{"c": false})
		r.put("u2", true)
		st := r.state()
		if st == first || st.key.UID != "u2" || !st.mem.TerminatingSince.Equal(time.Now()) {
			t.Fatalf("state after the UID change: %+v", st)
		}
		if got := st.mem.Known("test"); !slices.Equal(got, []gate.Known{{Name: "c", WasRoute: true}}) {
			t.Errorf("the new pod inherited routes: %v", got)
		}
		if !slices.Contains(r.src.forgot, first.key) {
			t.Errorf("the old pod was not forgotten: %v", r.src.forgot)
		}
		if _, err := r.Verdict(context.Background(), api.DrainRequest{Namespace: "shop", Pod: "web", UID: "u1"}); !errors.Is(err, waitapi.ErrUIDMismatch) {
			t.Errorf("old agent: %v, want ErrUIDMismatch", err)
		}
	})
}

// The janitor: a pod gone from the cache without a delete event is
// dropped; a pod whose agent stopped asking is forgotten by the sources
// after the linger, and observed as not waiting from then on; a routes
// the source no longer lists stays a route (reported through known).
func TestPodsJanitor(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig()
		r.put("u1", true)
		r.ask(t, "u1")
		r.sweep(time.Now().Add(30 * time.Second))
		if len(r.src.forgot) != 0 {
			t.Fatalf("forgotten within the linger: %v", r.src.forgot)
		}
		r.sweep(time.Now().Add(time.Minute))
		if len(r.src.forgot) != 1 || !r.state().asked.IsZero() {
			t.Fatalf("after the linger: forgot %v, asked %v", r.src.forgot, r.state().asked)
		}
		r.src.set(map[string]bool{})
		r.routesChanged("", "")
		if r.src.lastWaiting() {
			t.Errorf("observed as waiting after the linger")
		}
		if got := r.src.known[len(r.src.known)-1]; !slices.Equal(got, []string{"a"}) {
			t.Errorf("known %v: the dropped route was not reported", got)
		}

		r.remove(false)
		r.sweep(time.Now())
		if r.state() != nil {
			t.Fatal("a pod gone from the cache is still tracked")
		}
		r.put("u2", true)
		r.remove(true)
		if r.state() != nil {
			t.Fatal("a deleted pod is still tracked")
		}
	})
}

// A restarted server (a new pods) sees the terminating pod afresh: its
// tail starts from its own first observation, so it never releases earlier
// than the first would have.
func TestPodsRestart(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		first := newRig()
		first.src.set(map[string]bool{"a": true})
		first.put("u1", true)
		firstEnd := *first.ask(t, "u1").Routes[0].TailEnds
		first.close()
		time.Sleep(4 * time.Second)

		second := newRig()
		second.src.set(map[string]bool{"a": true})
		second.put("u1", true)
		v := second.ask(t, "u1")
		if v.Released || !v.Routes[0].TailEnds.After(firstEnd) || !v.Routes[0].Since.Equal(time.Now()) {
			t.Fatalf("restarted: %+v; want the tail from its own first observation, after %v", v, firstEnd)
		}
		if _, err := first.Verdict(context.Background(), api.DrainRequest{Namespace: "shop", Pod: "web"}); err == nil {
			t.Errorf("a closed server answered")
		}
	})
}

// A failed observation answers no verdict and keeps the memory.
func TestPodsObserveError(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig()
		r.src.set(map[string]bool{"a": true})
		r.put("u1", true)
		before := r.state().mem
		r.src.err = errors.New("cache unavailable")
		time.Sleep(time.Hour)
		if _, err := r.Verdict(context.Background(), api.DrainRequest{Namespace: "shop", Pod: "web"}); err == nil {
			t.Fatal("a verdict despite the failed observation")
		}
		if !reflect.DeepEqual(r.state().mem.Routes, before.Routes) {
			t.Errorf("memory changed: %v → %v", before.Routes, r.state().mem.Routes)
		}
	})
}

// TestPodsEvidenceIsTheAsksOwn: an ask's traffic summary is read once, at
// its arrival: judging the same ask again later (a long-poll) does not
// move its arrivals; a later ask's summary closes the route on quiet; an
// ask without one drops the evidence, and the route is held a tail after
// the last arrival the evidence saw.
func TestPodsEvidenceIsTheAsksOwn(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig()
		r.src.set(map[string]bool{"a": true})
		r.src.ports = []uint16{8080}
		r.put("u1", true)
		src := netip.MustParseAddr("10.0.0.1")
		// What this agent reports of a steady 4/s, watched 20 s up to
		// sinceLast ago (long enough for the span rule at the default ε):
		// one arrival every 2 or 3 looks of 100 ms.
		summary := func(sinceLast time.Duration) *api.Traffic {
			st := api.SourceTraffic{Addr: src, Port: 8080, Arrivals: 81, First: 20*time.Second + sinceLast, MaxGap: 300 * time.Millisecond,
				Looks: api.Looks{N: 200, Pauses: 80}, RecentLooks: api.Looks{N: 38, Pauses: 15}, Gaps: make([]api.GapBin, api.GapBins)}
			st.Gaps[1] = api.GapBin{N: 80, Sum: 200}
			for i := range 16 {
				st.Last = append(st.Last, sinceLast+time.Duration(i)*250*time.Millisecond)
			}
			return &api.Traffic{Watched: 21*time.Second + sinceLast, Every: 100 * time.Millisecond, Sources: []api.SourceTraffic{st}}
		}
		ask := func(tr *api.Traffic) api.Verdict {
			t.Helper()
			v, err := r.Verdict(context.Background(), api.DrainRequest{Namespace: "shop", Pod: "web", UID: "u1", Traffic: tr})
			if err != nil {
				t.Fatal(err)
			}
			return v
		}
		first, t1 := summary(0), time.Now()
		v := ask(first)
		if v.Released || v.Routes[0].QuietBy == nil {
			t.Fatalf("first ask: released %v, quiet by %v: %s", v.Released, v.Routes[0].QuietBy, v.Message)
		}
		quietBy := *v.Routes[0].QuietBy
		time.Sleep(time.Until(quietBy) + time.Second)
		v = ask(first) // the same ask, judged again during its long-poll
		if v.Released || !v.Routes[0].QuietBy.Equal(quietBy) {
			t.Fatalf("the same ask later: released %v, quiet by %v (was %v): %s", v.Released, v.Routes[0].QuietBy, quietBy, v.Message)
		}
		v = ask(summary(time.Since(t1))) // the agent's next ask: nothing new arrived
		if !v.Released || v.Routes[0].ClosedBy != api.ClosedByTraffic {
			t.Fatalf("a fresh quiet summary: released %v, closed by %q: %s", v.Released, v.Routes[0].ClosedBy, v.Message)
		}

		// Another pod incarnation: evidence of recent traffic past the
		// tail, then asks with none: the route is held a tail after the
		// last arrival seen, not closed at once on the tail that passed.
		r.put("u2", true)
		time.Sleep(11 * time.Second)
		seen := time.Now()
		v, err := r.Verdict(context.Background(), api.DrainRequest{Namespace: "shop", Pod: "web", UID: "u2", Traffic: summary(0)})
		if err != nil || v.Released {
			t.Fatalf("busy evidence after the tail: released %v (%v): %s", v.Released, err, v.Message)
		}
		v, err = r.Verdict(context.Background(), api.DrainRequest{Namespace: "shop", Pod: "web", UID: "u2"})
		if held := seen.Add(10 * time.Second); err != nil || v.Released || v.Routes[0].QuietBy == nil || !v.Routes[0].QuietBy.Equal(held) {
			t.Fatalf("an ask without evidence: released %v (%v), quiet by %v, want held until %v: %s", v.Released, err, v.Routes[0].QuietBy, held, v.Message)
		}
		time.Sleep(10 * time.Second)
		v, err = r.Verdict(context.Background(), api.DrainRequest{Namespace: "shop", Pod: "web", UID: "u2"})
		if err != nil || !v.Released || v.Routes[0].ClosedBy != api.ClosedByTraffic {
			t.Fatalf("a tail after the last arrival, still no evidence: released %v (%v), closed by %q: %s", v.Released, err, v.Routes[0].ClosedBy, v.Message)
		}
	})
}

// A pod that is not terminating (its container restarts after a failed
// liveness probe) is released at once when the API server confirms it; a
// cache that is behind a deletion the API server already has, a read that
// fails or another incarnation under the name keep it asking.
func TestPodsNotTerminatingConfirmed(t *testing.T) {
	r := newRig()
	// Each ask comes liveReadEvery after the last, so each may read.
	clock := time.Now()
	r.now = func() time.Time {
		clock = clock.Add(liveReadEvery)
		return clock
	}
	r.put("u1", false)
	live := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web", UID: "u1"}}
	var liveErr error
	reads := 0
	r.live = func(_ context.Context, ns, name string) (*corev1.Pod, error) {
		reads++
		if ns != "shop" || name != "web" {
			t.Errorf("live read of %s/%s", ns, name)
		}
		return live.DeepCopy(), liveErr
	}
	v := r.ask(t, "u1")
	if !v.Released || v.Reason != api.ReasonNotTerminating || !strings.Contains(v.Message, "API server confirms") || reads != 1 {
		t.Fatalf("confirmed not terminating: %+v after %d reads; want released, not-terminating", v, reads)
	}
	if r.state() != nil {
		t.Error("a pod that is not terminating is tracked")
	}

	live.DeletionTimestamp = &metav1.Time{Time: time.Now()}
	if v := r.ask(t, "u1"); v.Released || !strings.Contains(v.Message, "waiting for the cache") {
		t.Errorf("the API server has the deletion, the cache not yet: %+v; want held", v)
	}
	live.DeletionTimestamp, live.UID = nil, "u2"
	if v := r.ask(t, "u1"); v.Released {
		t.Errorf("another incarnation in the API server: %+v; want held", v)
	}
	live.UID, liveErr = "u1", errors.New("etcd is slow")
	if v := r.ask(t, "u1"); v.Released || !strings.Contains(v.Message, "etcd is slow") {
		t.Errorf("failed read: %+v; want held, saying why", v)
	}
	// A pod asking about itself in a loop: one live read per
	// liveReadEvery, the other asks held.
	liveErr, reads = nil, 0
	frozen := clock.Add(liveReadEvery)
	tick := r.now
	r.now = func() time.Time { return frozen }
	first, second := r.ask(t, "u1"), r.ask(t, "u1")
	if reads != 1 || !first.Released || second.Released || !strings.Contains(second.Message, "asking again") {
		t.Errorf("two asks at once: %d live reads, then %+v; want one read, the second held", reads, second)
	}
	r.now = tick
	// A terminating pod is never read live: the gate decides.
	liveErr, reads = nil, 0
	r.put("u1", true)
	if v := r.ask(t, "u1"); v.Reason == api.ReasonNotTerminating || reads != 0 {
		t.Errorf("terminating: %+v after %d live reads; want the gate's verdict, no read", v, reads)
	}
}

// The wait API answers about a pod only requests from its own addresses.
func TestPodsAuthorize(t *testing.T) {
	r := newRig()
	p := r.put("u1", true)
	p.Status.PodIPs = []corev1.PodIP{{IP: "10.0.0.7"}, {IP: "fd00::7"}}
	r.mu.Lock()
	r.cached["shop/web"] = p
	r.mu.Unlock()
	req := api.DrainRequest{Namespace: "shop", Pod: "web"}
	for _, from := range []string{"10.0.0.7", "fd00::7"} {
		if err := r.authorize(context.Background(), req, waitapi.Caller{Addr: netip.MustParseAddr(from)}); err != nil {
			t.Errorf("from the pod's %s: %v", from, err)
		}
	}
	err := r.authorize(context.Background(), req, waitapi.Caller{Addr: netip.MustParseAddr("10.0.0.8")})
	if !errors.Is(err, waitapi.ErrForbidden) || !strings.Contains(err.Error(), "10.0.0.7, fd00::7") {
		t.Errorf("from another address: %v; want forbidden, naming the pod's addresses", err)
	}
	p.Status.PodIPs = nil
	if err := r.authorize(context.Background(), req, waitapi.Caller{Addr: netip.MustParseAddr("10.0.0.7")}); err == nil || errors.Is(err, waitapi.ErrForbidden) {
		t.Errorf("a pod with no address cached yet: %v; want an error to ask again, not forbidden", err)
	}
	if err := r.authorize(context.Background(), api.DrainRequest{Namespace: "shop", Pod: "gone"}, waitapi.Caller{Addr: netip.MustParseAddr("10.0.0.7")}); !errors.Is(err, waitapi.ErrUnknownPod) {
		t.Errorf("unknown pod: %v", err)
	}
}

// A hostNetwork pod's address is its node's: only a token bound to the pod
// lets its agent in. Token answers are cached, refusals too.
func TestPodsAuthorizeHostNetwork(t *testing.T) {
	r := newRig()
	p := r.put("u1", true)
	p.Spec.HostNetwork = true
	p.Status.PodIPs = []corev1.PodIP{{IP: "192.168.1.5"}}
	r.mu.Lock()
	r.cached["shop/web"] = p
	r.mu.Unlock()
	reviews := 0
	bound := func(ns, name, uid string) authenticationv1.TokenReviewStatus {
		return authenticationv1.TokenReviewStatus{Authenticated: true, Audiences: []string{"draingate"}, User: authenticationv1.UserInfo{
			Username: "system:serviceaccount:" + ns + ":default",
			Extra:    map[string]authenticationv1.ExtraValue{extraPodName: {name}, extraPodUID: {uid}}}}
	}
	now := time.Unix(1000, 0)
	r.tokens = &tokens{audience: "draingate", now: func() time.Time { return now },
		review: func(_ context.Context, token, audience string) (authenticationv1.TokenReviewStatus, error) {
			reviews++
			switch token {
			case "web":
				return bound("shop", "web", "u1"), nil
			case "other":
				return bound("shop", "other", "u9"), nil
			case "stale":
				return bound("shop", "web", "u0"), nil
			case "sa":
				st := bound("shop", "", "")
				st.User.Extra = nil
				return st, nil
			case "aud":
				st := bound("shop", "web", "u1")
				st.Audiences = []string{"https://kubernetes.default.svc"}
				return st, nil
			case "down":
				return authenticationv1.TokenReviewStatus{}, errors.New("connection refused")
			}
			return authenticationv1.TokenReviewStatus{Error: "invalid bearer token"}, nil
		}}
	req := api.DrainRequest{Namespace: "shop", Pod: "web"}
	node := netip.MustParseAddr("192.168.1.5")
	if err := r.authorize(context.Background(), req, waitapi.Caller{Addr: node}); !errors.Is(err, waitapi.ErrForbidden) || !strings.Contains(err.Error(), "token") {
		t.Errorf("from the node's address without a token: %v; want forbidden, asking for the token", err)
	}
	for _, tc := range []struct {
		token, want string
	}{
		{"web", ""},
		{"other", "bound to pod shop/other"},
		{"stale", "uid u0"},
		{"sa", "bound to no pod"},
		{"aud", "audiences"},
		{"forged", "does not authenticate (invalid bearer token)"},
	} {
		err := r.authorize(context.Background(), req, waitapi.Caller{Addr: node, Token: tc.token})
		if tc.want == "" && err != nil || tc.want != "" && (!errors.Is(err, waitapi.ErrForbidden) || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("token %q: %v; want %q", tc.token, err, tc.want)
		}
	}
	if err := r.authorize(context.Background(), req, waitapi.Caller{Addr: node, Token: "down"}); err == nil || errors.Is(err, waitapi.ErrForbidden) {
		t.Errorf("the API server unreachable: %v; want an error to ask again, not forbidden", err)
	}
	before := reviews
	for _, tok := range []string{"web", "forged"} {
		r.authorize(context.Background(), req, waitapi.Caller{Addr: node, Token: tok})
	}
	if reviews != before {
		t.Errorf("%d more reviews for tokens just reviewed; want the cached answers", reviews-before)
	}
	now = now.Add(tokenRefused + time.Second)
	r.authorize(context.Background(), req, waitapi.Caller{Addr: node, Token: "web"})
	r.authorize(context.Background(), req, waitapi.Caller{Addr: node, Token: "forged"})
	if reviews != before+1 {
		t.Errorf("after %s: %d more reviews; want the refusal reviewed again, the good token still cached", tokenRefused, reviews-before)
	}
	// A token also lets in an agent whose address the server cannot see
	// as the pod's (a non-hostNetwork pod behind a proxy).
	p.Spec.HostNetwork = false
	if err := r.authorize(context.Background(), req, waitapi.Caller{Addr: netip.MustParseAddr("10.9.9.9"), Token: "web"}); err != nil {
		t.Errorf("a pod's token from another address: %v", err)
	}
}

// A decision in progress (here a source's observation that does not
// return) holds no event that concerns no terminating pod: other pods'
// updates and deletions, route changes in other namespaces and new
// long-polls go through.
func TestPodsEventsPassADecision(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig()
		r.src.block = make(chan struct{})
		go r.put("u1", true) // terminating: decides, and blocks in Observe
		synctest.Wait()
		other := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "api", UID: "u2"}}
		elsewhere := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "billing", Name: "db", UID: "u3"}}
		var done []string
		var mu sync.Mutex
		for name, f := range map[string]func(){
			"another pod's update":            func() { r.podChanged(other) },
			"another namespace's pod deleted": func() { r.podDeleted(elsewhere) },
			"another namespace's routes":      func() { r.routesChanged("billing", "") },
			"a long-poll subscribing":         func() { _, stop := r.Changed(api.DrainRequest{Namespace: "shop", Pod: "api"}); stop() },
		} {
			go func() {
				f()
				mu.Lock()
				done = append(done, name)
				mu.Unlock()
			}()
		}
		synctest.Wait()
		mu.Lock()
		if len(done) != 4 {
			t.Errorf("while a decision is made, only %q went through; want all four", done)
		}
		mu.Unlock()
		close(r.src.block)
		synctest.Wait()
		if st := r.state(); st == nil || st.mem.Known("test") == nil {
			t.Errorf("the blocked decision did not complete: %+v", st)
		}
	})
}

// A waiting pod's Events: one when its wait starts, one each time a route
// changes state (not on every ask), and the release; each carries the
// verdict its agent got.
func TestPodsEventOnRouteChange(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig()
		r.put("u1", true)
		r.ask(t, "u1")
		r.ask(t, "u1")
		if got := r.eventReasons(); !slices.Equal(got, []string{EventWaitStarted}) {
			t.Fatalf("events %v after two asks with the route in, want one wait-started", got)
		}
		r.src.set(map[string]bool{"a": true})
		r.routesChanged("shop", "")
		r.ask(t, "u1")
		time.Sleep(time.Second)
		r.ask(t, "u1")
		if got := r.eventReasons(); !slices.Equal(got, []string{EventRoutesChanged}) {
			t.Fatalf("events %v after the route went out and two asks, want one routes-changed", got)
		}
		time.Sleep(10 * time.Second)
		if v := r.ask(t, "u1"); !v.Released {
			t.Fatalf("after the tail: %+v", v)
		}
		if got := r.eventReasons(); !slices.Equal(got, []string{EventReleased}) {
			t.Fatalf("events %v at the release, want only released (it tells the closed routes)", got)
		}
	})
}

// Every Event on a waiting pod carries the verdict in full, as JSON that
// reads back the same.
func TestVerdictAnnotation(t *testing.T) {
	tail := time.Date(2026, 12, 5, 20, 0, 0, 0, time.UTC)
	v := api.Verdict{Pod: "web", Namespace: "shop", UID: "u1", Released: true, Reason: api.ReasonDrained, Waited: api.Duration(12 * time.Second),
		Routes: []api.Route{{Kind: "targetgroup", Name: "tg", State: "closed", TailEnds: &tail, ClosedBy: api.ClosedByTraffic, Detail: "quiet"}}, Message: "released"}
	var back api.Verdict
	if err := json.Unmarshal([]byte(verdictAnnotation(v)[api.VerdictAnnotation]), &back); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back, v) {
		t.Errorf("read back %+v, want %+v", back, v)
	}
}
