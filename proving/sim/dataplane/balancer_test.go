package dataplane

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"runtime"
	"testing"
	"testing/synctest"
	"time"
)

func TestBalancerNodesLearnAtTheirOwnTime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const fast, slow = 2 * time.Second, 7 * time.Second
		b := NewBalancer([]Config{
			{Name: "edge-a", Propagation: Fixed(fast)},
			{Propagation: Fixed(slow)},
		})
		defer b.Close()
		nodes := b.Nodes()
		if len(nodes) != 2 || nodes[0].Name() != "edge-a" || nodes[1].Name() != "lb-2" {
			t.Fatalf("nodes %v; want edge-a and lb-2 (the default name)", nodes)
		}

		// A zero At: the Balancer stamps it once, for every node.
		t0 := time.Now()
		b.Apply(Event{Target: targetA, To: StateHealthy})
		if err := b.WaitInRotation(context.Background(), 1); err != nil {
			t.Fatal(err)
		}
		if now := time.Now(); !now.Equal(t0.Add(slow)) {
			t.Errorf("WaitInRotation returned at %v; want %v, when the slow node had the target", now, t0.Add(slow))
		}
		for i, want := range []time.Duration{fast, slow} {
			if at, ok := nodes[i].StartedAt(targetA); !ok || !at.Equal(t0.Add(want)) {
				t.Errorf("node %s StartedAt = %v, %v; want %v", nodes[i].Name(), at, ok, t0.Add(want))
			}
		}

		time.Sleep(time.Minute)
		t1 := time.Now()
		b.Apply(Event{Target: targetA, To: "draining"})
		check := func(when string, fastOut, slowOut bool) {
			t.Helper()
			for i, out := range []bool{fastOut, slowOut} {
				if nodes[i].InRotation(targetA) == out {
					t.Errorf("%s: node %s in rotation %v; want %v", when, nodes[i].Name(), !out, !out)
				}
			}
			if got := b.InRotation(targetA); got != !slowOut {
				t.Errorf("%s: Balancer.InRotation = %v; want %v", when, got, !slowOut)
			}
			at, ok := b.StoppedAt(targetA)
			if !slowOut && ok {
				t.Errorf("%s: Balancer.StoppedAt = %v while a node still routes to the target", when, at)
			}
			if slowOut && (!ok || !at.Equal(t1.Add(slow))) {
				t.Errorf("%s: Balancer.StoppedAt = %v, %v; want %v, when the slow node stopped", when, at, ok, t1.Add(slow))
			}
		}
		time.Sleep(fast - time.Millisecond)
		check("just before the fast node's delay", false, false)
		time.Sleep(time.Millisecond)
		synctest.Wait()
		check("at the fast node's delay", true, false)
		if at, ok := nodes[0].StoppedAt(targetA); !ok || !at.Equal(t1.Add(fast)) {
			t.Errorf("fast node StoppedAt = %v, %v; want %v", at, ok, t1.Add(fast))
		}
		time.Sleep(slow - fast - time.Millisecond)
		check("just before the slow node's delay", true, false)
		time.Sleep(time.Millisecond)
		synctest.Wait()
		check("at the slow node's delay", true, true)
	})
}

func TestBalancerStoppedAt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// The second node learns "healthy" only after 10 s, by which time
		// the first one has already taken the target out again.
		slowHealthy := func(ev Event) time.Duration {
			if ev.To == StateHealthy {
				return 10 * time.Second
			}
			return 0
		}
		b := NewBalancer([]Config{{Propagation: Fixed(time.Second)}, {Propagation: slowHealthy}})
		defer b.Close()
		if at, ok := b.StoppedAt(targetA); ok {
			t.Fatalf("StoppedAt of a target no node knows = %v; want not ok", at)
		}

		t0 := time.Now()
		b.Apply(Event{Target: targetA, To: StateHealthy})
		time.Sleep(2 * time.Second)
		b.Apply(Event{Target: targetA, To: "draining"})
		time.Sleep(3 * time.Second)
		// A node that never routed to the target does not hold it up.
		if at, ok := b.StoppedAt(targetA); !ok || !at.Equal(t0.Add(3*time.Second)) {
			t.Fatalf("StoppedAt = %v, %v; want %v, when the only node that routed to it stopped", at, ok, t0.Add(3*time.Second))
		}

		// The target comes back on the first node: it is in rotation again.
		b.Apply(Event{Target: targetA, To: StateHealthy})
		time.Sleep(time.Second)
		synctest.Wait()
		if !b.InRotation(targetA) {
			t.Fatal("target not in rotation after coming back")
		}
		if at, ok := b.StoppedAt(targetA); ok {
			t.Errorf("StoppedAt = %v while the target is back in rotation; want not ok", at)
		}
	})
}

func TestBalancerWaitInRotationFailsOnClose(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := NewBalancer([]Config{{}, {Name: "b"}})
		b.Apply(Event{Target: targetA, To: StateHealthy})
		done := make(chan error)
		go func() { done <- b.WaitInRotation(context.Background(), 2) }()
		synctest.Wait()
		b.Close()
		if err := <-done; !errors.Is(err, ErrClosed) {
			t.Errorf("WaitInRotation across Close = %v; want ErrClosed", err)
		}
	})
}

func TestBalancerStatsSumNodes(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "ok")
	}))
	t.Cleanup(srv.Close)
	tg := targetOf(t, srv.URL)
	b := NewBalancer([]Config{{}, {}, {}})
	t.Cleanup(b.Close)
	nodes := b.Nodes()
	// The third node never learns of the target: it answers 503.
	for _, p := range nodes[:2] {
		healthy(t, p, tg)
	}
	for _, i := range []int{0, 1, 1, 0, 2, 1} {
		rec := httptest.NewRecorder()
		nodes[i].ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
	}

	st := b.Stats()
	if st.Total != 6 || st.Failed != 1 || st.NoTarget != 1 || st.ByStatus[http.StatusOK] != 5 || st.ByStatus[http.StatusServiceUnavailable] != 1 {
		t.Errorf("stats = %+v; want 6 requests: 5 200s and one failed 503", st)
	}
	first, last := nodes[0].Stats().ByTarget[tg], nodes[1].Stats().ByTarget[tg]
	if ts := st.ByTarget[tg]; ts.Requests != 5 || ts.Failed != 0 || !ts.First.Equal(first.First) || !ts.Last.Equal(last.Last) {
		t.Errorf("target stats = %+v; want 5 requests, first %v (node 1's first), last %v (node 2's last)", ts, first.First, last.Last)
	}
}

func TestMergeStats(t *testing.T) {
	t0 := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	a := Stats{Total: 3, Failed: 1, Aborted: 1, NoTarget: 1, ByStatus: map[int]int64{200: 2, 502: 1}, ByTarget: map[Target]TargetStats{
		targetA: {Requests: 2, Failed: 1, First: at(5), Last: at(9)},
		targetB: {Requests: 1, First: at(1), Last: at(1)},
	}}
	b := Stats{Total: 4, Failed: 2, NoTarget: 2, ByStatus: map[int]int64{200: 2, 503: 2}, ByTarget: map[Target]TargetStats{
		targetA: {Requests: 2, First: at(3), Last: at(7)},
	}}
	got := mergeStats(a, b)
	if got.Total != 7 || got.Failed != 3 || got.Aborted != 1 || got.NoTarget != 3 {
		t.Errorf("totals = %d/%d/%d/%d; want 7 total, 3 failed, 1 aborted, 3 with no target", got.Total, got.Failed, got.Aborted, got.NoTarget)
	}
	if len(got.ByStatus) != 3 || got.ByStatus[200] != 4 || got.ByStatus[502] != 1 || got.ByStatus[503] != 2 {
		t.Errorf("ByStatus = %v; want 200:4 502:1 503:2", got.ByStatus)
	}
	want := map[Target]TargetStats{
		targetA: {Requests: 4, Failed: 1, First: at(3), Last: at(9)},
		targetB: {Requests: 1, First: at(1), Last: at(1)},
	}
	if len(got.ByTarget) != len(want) {
		t.Fatalf("ByTarget = %+v; want %+v", got.ByTarget, want)
	}
	for tg, w := range want {
		if g := got.ByTarget[tg]; g.Requests != w.Requests || g.Failed != w.Failed || !g.First.Equal(w.First) || !g.Last.Equal(w.Last) {
			t.Errorf("ByTarget[%v] = %+v; want %+v", tg, g, w)
		}
	}
	// The inputs are left alone.
	if a.ByTarget[targetA].Requests != 2 || a.ByStatus[200] != 2 {
		t.Errorf("mergeStats changed its input: %+v", a)
	}
}

// Linux routes all of 127.0.0.0/8 to the loopback device, so any address
// in it can be a node's source address without configuring anything.
func TestNodesConnectFromTheirSourceIP(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("needs Linux's loopback, which holds all of 127.0.0.0/8")
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host, _, err := net.SplitHostPort(r.RemoteAddr)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		io.WriteString(w, host)
	}))
	t.Cleanup(srv.Close)
	tg := targetOf(t, srv.URL)
	b := NewBalancer([]Config{
		{SourceIP: netip.MustParseAddr("127.0.0.2")},
		{SourceIP: netip.MustParseAddr("127.0.0.3")},
		{}, // the operating system's choice: the target's own address
	})
	t.Cleanup(b.Close)
	b.Apply(Event{Target: tg, To: StateHealthy})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := b.WaitInRotation(ctx, 1); err != nil {
		t.Fatal(err)
	}
	for i, want := range []string{"127.0.0.2", "127.0.0.3", "127.0.0.1"} {
		p := b.Nodes()[i]
		for range 2 { // a new connection, then a kept-alive one
			rec := httptest.NewRecorder()
			p.ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
			if rec.Code != http.StatusOK || rec.Body.String() != want {
				t.Errorf("node %s: target saw the request from %q (%d); want %s", p.Name(), rec.Body, rec.Code, want)
			}
		}
	}
}
