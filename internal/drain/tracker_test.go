package drain_test

import (
	"context"
	"errors"
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"draingate.dev/draingate/api"
	"draingate.dev/draingate/internal/drain"
	"draingate.dev/draingate/internal/drain/draintest"
	"draingate.dev/draingate/internal/gate"
	"draingate.dev/draingate/internal/route"
	"draingate.dev/draingate/internal/waitapi"
)

// The tracker without a cluster (draintest): a map stands for the pod
// cache and a scripted source for the routes. Time is synctest's.

// tracked is what the tracker keeps of the rig's pod.
type tracked struct {
	uid   string
	mem   gate.Memory
	asked time.Time
}

// state is the rig's pod as the tracker keeps it; nil when untracked.
func state(r *draintest.Rig) *tracked {
	uid, mem, asked, ok := r.Tracked("shop/web")
	if !ok {
		return nil
	}
	return &tracked{uid: uid, mem: mem, asked: asked}
}

// A new terminating pod: tracked from its first event, so the tail starts
// when the source first says out, not when the agent first asks; released
// after the tail by the pod's own timer, which wakes its long-polls.
func TestNewPod(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := draintest.NewRig(drain.Options{})
		r.Put(draintest.Pod("u1", false))
		if state(r) != nil {
			t.Fatal("a pod that is not terminating is tracked")
		}
		if v := r.Ask(t, "u1"); v.Reason != api.ReasonNotTerminating {
			t.Fatalf("before deletion: %+v", v)
		}
		deleted := time.Now()
		r.Put(draintest.Pod("u1", true))
		time.Sleep(3 * time.Second)
		r.Src.Set(map[string]bool{"a": true}) // the owner drops the pod...
		r.RoutesChanged("shop", "")           // ...and the source says so
		out := time.Now()
		time.Sleep(4 * time.Second)

		v := r.Ask(t, "u1")
		if v.Released || time.Duration(v.Waited) != time.Since(deleted) || !v.Routes[0].Since.Equal(out) {
			t.Fatalf("first ask: %+v; want held, waited since the deletion event, out since the source said so", v)
		}
		if !r.Src.LastWaiting() {
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
		v = r.Ask(t, "u1")
		r.Ask(t, "u1")
		if !v.Released || v.Reason != api.ReasonDrained {
			t.Fatalf("after the tail: %+v", v)
		}
	})
}

// A pod re-created under the same name: the old incarnation's state is
// dropped (its source work forgotten) and the new one starts afresh; an
// agent of the old one is told its UID is gone.
func TestUIDChange(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := draintest.NewRig(drain.Options{})
		r.Put(draintest.Pod("u1", true))
		r.Src.Set(map[string]bool{"a": true, "b": true})
		r.Ask(t, "u1")
		first := state(r)
		time.Sleep(time.Minute)

		r.Src.Set(map[string]bool{"c": false})
		r.Put(draintest.Pod("u2", true))
		st := state(r)
		if st.uid != "u2" || !st.mem.TerminatingSince.Equal(time.Now()) {
			t.Fatalf("state after the UID change: %+v", st)
		}
		if got := st.mem.Known("test"); len(got) != 1 || got[0].Name != "c" || !got[0].WasRoute {
			t.Errorf("the new pod inherited routes: %v", got)
		}
		if !slices.Contains(r.Src.Forgot(), route.PodKey{Namespace: "shop", Name: "web", UID: first.uid}) {
			t.Errorf("the old pod was not forgotten: %v", r.Src.Forgot())
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
func TestJanitor(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := draintest.NewRig(drain.Options{})
		r.Put(draintest.Pod("u1", true))
		r.Ask(t, "u1")
		r.Janitor(time.Now().Add(30 * time.Second))
		if len(r.Src.Forgot()) != 0 {
			t.Fatalf("forgotten within the linger: %v", r.Src.Forgot())
		}
		r.Janitor(time.Now().Add(time.Minute))
		if len(r.Src.Forgot()) != 1 || !state(r).asked.IsZero() {
			t.Fatalf("after the linger: forgot %v, asked %v", r.Src.Forgot(), state(r).asked)
		}
		r.Src.Set(map[string]bool{})
		r.RoutesChanged("", "")
		if r.Src.LastWaiting() {
			t.Errorf("observed as waiting after the linger")
		}
		if got := r.Src.LastKnown(); !slices.Equal(got, []string{"a"}) {
			t.Errorf("known %v: the dropped route was not reported", got)
		}

		r.Remove(false)
		r.Janitor(time.Now())
		if state(r) != nil {
			t.Fatal("a pod gone from the cache is still tracked")
		}
		r.Put(draintest.Pod("u2", true))
		r.Remove(true)
		if state(r) != nil {
			t.Fatal("a deleted pod is still tracked")
		}
	})
}

// A restarted server (a new pods) sees the terminating pod afresh: its
// tail starts from its own first observation, so it never releases earlier
// than the first would have.
func TestRestart(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		first := draintest.NewRig(drain.Options{})
		first.Src.Set(map[string]bool{"a": true})
		first.Put(draintest.Pod("u1", true))
		firstEnd := *first.Ask(t, "u1").Routes[0].TailEnds
		first.Close()
		time.Sleep(4 * time.Second)

		second := draintest.NewRig(drain.Options{})
		second.Src.Set(map[string]bool{"a": true})
		second.Put(draintest.Pod("u1", true))
		v := second.Ask(t, "u1")
		if v.Released || !v.Routes[0].TailEnds.After(firstEnd) || !v.Routes[0].Since.Equal(time.Now()) {
			t.Fatalf("restarted: %+v; want the tail from its own first observation, after %v", v, firstEnd)
		}
		if _, err := first.Verdict(context.Background(), api.DrainRequest{Namespace: "shop", Pod: "web"}); err == nil {
			t.Errorf("a closed server answered")
		}
	})
}

// A failed observation answers no verdict and keeps the memory.
func TestObserveError(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := draintest.NewRig(drain.Options{})
		r.Src.Set(map[string]bool{"a": true})
		r.Put(draintest.Pod("u1", true))
		before := state(r).mem
		r.Src.Fail(errors.New("cache unavailable"))
		time.Sleep(time.Hour)
		if _, err := r.Verdict(context.Background(), api.DrainRequest{Namespace: "shop", Pod: "web"}); err == nil {
			t.Fatal("a verdict despite the failed observation")
		}
		if !reflect.DeepEqual(state(r).mem.Routes, before.Routes) {
			t.Errorf("memory changed: %v → %v", before.Routes, state(r).mem.Routes)
		}
	})
}

// TestEvidenceIsTheAsksOwn: an ask's traffic summary is read once, at
// its arrival: judging the same ask again later (a long-poll) does not
// move its arrivals; a later ask's summary closes the route on quiet; an
// ask without one drops the evidence, and the route is held a tail after
// the last arrival the evidence saw.
func TestEvidenceIsTheAsksOwn(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := draintest.NewRig(drain.Options{})
		r.Src.Set(map[string]bool{"a": true})
		r.Src.WeighOn(8080)
		r.Put(draintest.Pod("u1", true))
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
		r.Put(draintest.Pod("u2", true))
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
func TestNotTerminatingConfirmed(t *testing.T) {
	// Each ask comes LiveReadEvery after the last, so each may read.
	clock := time.Now()
	tick := func() time.Time {
		clock = clock.Add(drain.LiveReadEvery)
		return clock
	}
	now := tick
	live := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web", UID: "u1"}}
	var liveErr error
	reads := 0
	r := draintest.NewRig(drain.Options{Now: func() time.Time { return now() },
		Live: func(_ context.Context, ns, name string) (*corev1.Pod, error) {
			reads++
			if ns != "shop" || name != "web" {
				t.Errorf("live read of %s/%s", ns, name)
			}
			return live.DeepCopy(), liveErr
		}})
	r.Put(draintest.Pod("u1", false))
	v := r.Ask(t, "u1")
	if !v.Released || v.Reason != api.ReasonNotTerminating || !strings.Contains(v.Message, "API server confirms") || reads != 1 {
		t.Fatalf("confirmed not terminating: %+v after %d reads; want released, not-terminating", v, reads)
	}
	if state(r) != nil {
		t.Error("a pod that is not terminating is tracked")
	}

	live.DeletionTimestamp = &metav1.Time{Time: time.Now()}
	if v := r.Ask(t, "u1"); v.Released || !strings.Contains(v.Message, "waiting for the cache") {
		t.Errorf("the API server has the deletion, the cache not yet: %+v; want held", v)
	}
	live.DeletionTimestamp, live.UID = nil, "u2"
	if v := r.Ask(t, "u1"); v.Released {
		t.Errorf("another incarnation in the API server: %+v; want held", v)
	}
	live.UID, liveErr = "u1", errors.New("etcd is slow")
	if v := r.Ask(t, "u1"); v.Released || !strings.Contains(v.Message, "etcd is slow") {
		t.Errorf("failed read: %+v; want held, saying why", v)
	}
	// A pod asking about itself in a loop: one live read per
	// LiveReadEvery, the other asks held.
	liveErr, reads = nil, 0
	frozen := clock.Add(drain.LiveReadEvery)
	now = func() time.Time { return frozen }
	first, second := r.Ask(t, "u1"), r.Ask(t, "u1")
	if reads != 1 || !first.Released || second.Released || !strings.Contains(second.Message, "asking again") {
		t.Errorf("two asks at once: %d live reads, then %+v; want one read, the second held", reads, second)
	}
	now = tick
	// A terminating pod is never read live: the gate decides.
	liveErr, reads = nil, 0
	r.Put(draintest.Pod("u1", true))
	if v := r.Ask(t, "u1"); v.Reason == api.ReasonNotTerminating || reads != 0 {
		t.Errorf("terminating: %+v after %d live reads; want the gate's verdict, no read", v, reads)
	}
}

// A decision in progress (here a source's observation that does not
// return) holds no event that concerns no terminating pod: other pods'
// updates and deletions, route changes in other namespaces and new
// long-polls go through.
func TestEventsPassADecision(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := draintest.NewRig(drain.Options{})
		block := r.Src.Block()
		go r.Put(draintest.Pod("u1", true)) // terminating: decides, and blocks in Observe
		synctest.Wait()
		other := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "api", UID: "u2"}}
		elsewhere := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "billing", Name: "db", UID: "u3"}}
		var done []string
		var mu sync.Mutex
		for name, f := range map[string]func(){
			"another pod's update":            func() { r.PodChanged(other) },
			"another namespace's pod deleted": func() { r.PodDeleted(elsewhere) },
			"another namespace's routes":      func() { r.RoutesChanged("billing", "") },
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
		close(block)
		synctest.Wait()
		if st := state(r); st == nil || st.mem.Known("test") == nil {
			t.Errorf("the blocked decision did not complete: %+v", st)
		}
	})
}
