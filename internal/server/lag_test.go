package server

import (
	"errors"
	"net/netip"
	"testing"
	"testing/synctest"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"draingate.dev/draingate/internal/gate"
	"draingate.dev/draingate/internal/route"
)

// lagRig is a rig that learns the lags of its "test" routes.
type lagRig struct {
	*rig
	lags []time.Duration
	at   []time.Time
}

func newLagRig(ceiling time.Duration) *lagRig {
	r := &lagRig{rig: newRig()}
	r.lag = &lagLearning{
		learns: func(kind string) bool { return kind == "test" },
		record: func(_ gate.RouteKey, deleted time.Time, lag time.Duration) {
			r.lags, r.at = append(r.lags, lag), append(r.at, deleted)
		},
		ceiling: ceiling,
	}
	return r
}

// deleteNow puts the pod in the cache as deleted now with a 10-minute grace
// period, as the API server writes it, and delivers the event.
func (r *lagRig) deleteNow(uid string) {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web", UID: types.UID(uid),
		DeletionTimestamp: &metav1.Time{Time: time.Now().Add(10 * time.Minute)}, DeletionGracePeriodSeconds: ptr.To[int64](600)}}
	p.Status.PodIP, p.Status.PodIPs = "10.0.0.5", []corev1.PodIP{{IP: "10.0.0.5"}}
	r.mu.Lock()
	r.cached["shop/web"] = p
	r.mu.Unlock()
	r.podChanged(p.DeepCopy())
}

func (r *lagRig) dropped() int {
	r.src.mu.Lock()
	defer r.src.mu.Unlock()
	return len(r.src.forgot)
}

// A route its owner takes out while the agent waits teaches its lag from
// the pod's deletion (its deletionTimestamp less its grace period, not
// when the server first saw it), once, rounded up to the second.
func TestLagOfARouteOutWhileWaiting(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newLagRig(5 * time.Minute)
		deleted := time.Now()
		r.deleteNow("u1")
		time.Sleep(1500 * time.Millisecond)
		r.ask(t, "u1")
		time.Sleep(1200 * time.Millisecond)
		r.src.set(map[string]bool{"a": true})
		r.routesChanged("shop", "web")
		r.ask(t, "u1")
		if len(r.lags) != 1 || r.lags[0] != 3*time.Second || !r.at[0].Equal(deleted) {
			t.Fatalf("lags %v at %v; want 3s (2.7s rounded up) once, at the deletion %v", r.lags, r.at, deleted)
		}
	})
}

// A pod released at its deadline, then gone, while its route is still in
// (a controller that lags past every max-wait): the server keeps its
// source's work for the pod past the agent's linger and the pod's
// deletion, and learns the lag, from the first deletion, when the route
// goes out; then the source drops it.
func TestLagWatchedPastTheDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newLagRig(5 * time.Minute)
		r.deleteNow("u1")
		r.ask(t, "u1")
		time.Sleep(90 * time.Second)
		r.sweep(time.Now())
		if r.dropped() != 0 {
			t.Fatalf("the source forgot the pod (%v) while its route's lag is still to learn", r.src.forgot)
		}
		// The kubelet's last delete, with no grace period, once the
		// containers ended, and their addresses gone from the status:
		// neither moves the deletion nor the target's address.
		final := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web", UID: "u1",
			DeletionTimestamp: &metav1.Time{Time: time.Now()}, DeletionGracePeriodSeconds: ptr.To[int64](0)}}
		r.mu.Lock()
		r.cached["shop/web"] = final
		r.mu.Unlock()
		r.podChanged(final.DeepCopy())
		r.remove(true)
		if r.state() != nil || len(r.after) != 1 {
			t.Fatalf("gone pod: tracked %v, watched %d; want watched only", r.state(), len(r.after))
		}
		time.Sleep(20 * time.Second)
		r.routesChanged("shop", "web")
		if len(r.lags) != 0 || r.dropped() != 0 {
			t.Fatalf("learnt %v, dropped %d while the route is in", r.lags, r.dropped())
		}
		r.src.set(map[string]bool{"a": true})
		r.routesChanged("shop", "web")
		if len(r.lags) != 1 || r.lags[0] != 110*time.Second {
			t.Fatalf("lags %v; want 110s", r.lags)
		}
		if len(r.after) != 0 || r.dropped() != 1 {
			t.Errorf("after the route went out: watched %d, dropped %d; want 0 and 1", len(r.after), r.dropped())
		}
	})
}

// A route still in at the ceiling is learnt at the ceiling (it was at
// least that late), and the watch ends; a route whose owner is gone, or
// whose address another pod holds now, teaches nothing; a read that
// failed is tried again.
func TestLagWatchEnds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newLagRig(2 * time.Minute)
		r.deleteNow("u1")
		r.ask(t, "u1")
		r.remove(true)
		time.Sleep(119 * time.Second)
		r.sweep(time.Now())
		if len(r.lags) != 0 {
			t.Fatalf("learnt %v before the ceiling", r.lags)
		}
		time.Sleep(time.Second)
		r.sweep(time.Now())
		if len(r.lags) != 1 || r.lags[0] != 2*time.Minute || len(r.after) != 0 {
			t.Fatalf("at the ceiling: lags %v, watched %d; want 2m0s and the watch ended", r.lags, len(r.after))
		}

		// A group deleted in AWS: nothing more to learn of it.
		r3 := newLagRig(2 * time.Minute)
		r3.deleteNow("u3")
		r3.ask(t, "u3")
		r3.remove(true)
		r3.src.mu.Lock()
		r3.src.obsErr = route.Gone(errors.New("TargetGroupNotFound"))
		r3.src.mu.Unlock()
		r3.sweep(time.Now())
		if len(r3.lags) != 0 || len(r3.after) != 0 {
			t.Errorf("group gone: lags %v, watched %d; want none, none", r3.lags, len(r3.after))
		}
		// A read that failed is tried again.
		r4 := newLagRig(2 * time.Minute)
		r4.deleteNow("u4")
		r4.ask(t, "u4")
		r4.remove(true)
		r4.src.set(map[string]bool{"a": true})
		r4.src.mu.Lock()
		r4.src.obsErr = errors.New("Throttling")
		r4.src.mu.Unlock()
		r4.sweep(time.Now())
		if len(r4.lags) != 0 || len(r4.after) != 1 {
			t.Errorf("read failed: lags %v, watched %d; want none yet, still watched", r4.lags, len(r4.after))
		}

		r2 := newLagRig(2 * time.Minute)
		r2.inCluster = func(a netip.Addr) bool { return a == netip.MustParseAddr("10.0.0.5") }
		r2.deleteNow("u2")
		r2.ask(t, "u2")
		r2.remove(true)
		r2.sweep(time.Now())
		if len(r2.lags) != 0 || len(r2.after) != 0 || r2.dropped() != 1 {
			t.Errorf("address reused: lags %v, watched %d, dropped %d; want none, none, 1", r2.lags, len(r2.after), r2.dropped())
		}
	})
}

// A pod whose agent never asked this replica teaches nothing: another
// replica waits for it, or nobody does.
func TestLagOnlyOfPodsAsked(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newLagRig(5 * time.Minute)
		r.deleteNow("u1")
		r.src.set(map[string]bool{"a": true})
		r.routesChanged("shop", "web")
		r.remove(true)
		if len(r.lags) != 0 || len(r.after) != 0 {
			t.Errorf("lags %v, watched %d; want none", r.lags, len(r.after))
		}
	})
}
