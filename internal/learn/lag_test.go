package learn

import (
	"errors"
	"net/netip"
	"testing"
	"testing/synctest"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"draingate.dev/draingate/internal/drain"
	"draingate.dev/draingate/internal/drain/draintest"
	"draingate.dev/draingate/internal/route"
)

// lagRig is a tracker (draintest) whose decisions Timings learns lags
// from; its "test" routes teach.
type lagRig struct {
	*draintest.Rig
	timings *Timings
}

func newLagRig(ceiling time.Duration, inCluster ...func(netip.Addr) bool) *lagRig {
	o := Options{Lags: true, Ceiling: ceiling}
	if len(inCluster) > 0 {
		o.InCluster = inCluster[0]
	}
	tm := New(o)
	r := &lagRig{Rig: draintest.NewRig(drain.Options{Consumers: []drain.Consumer{tm}}), timings: tm}
	tm.use([]route.Source{r.Src})
	return r
}

// lags are the lags learnt, and when each pod was deleted.
func (r *lagRig) lags() (lags []time.Duration, at []time.Time) {
	for _, x := range r.timings.book.Get(LagPrefix + "lb:a").Samples {
		lags, at = append(lags, x.D), append(at, x.At)
	}
	return lags, at
}

// sweep is the janitors' round: the tracker's and learning's.
func (r *lagRig) sweep(now time.Time) {
	r.Janitor(now)
	r.timings.sweep()
}

// routesChanged tells both what a source tells.
func (r *lagRig) routesChanged(namespace, name string) {
	r.RoutesChanged(namespace, name)
	r.timings.RoutesChanged(namespace, name)
}

// deleteNow puts the pod in the cache as deleted now with a 10-minute grace
// period, as the API server writes it, and delivers the event.
func (r *lagRig) deleteNow(uid string) {
	p := draintest.Pod(uid, true)
	p.DeletionGracePeriodSeconds = ptr.To[int64](600)
	r.Put(p)
}

func (r *lagRig) dropped() int { return len(r.Src.Forgot()) }

// A route its owner takes out while the agent waits teaches its lag from
// the pod's deletion (its deletionTimestamp less its grace period, not
// when the server first saw it), once, rounded up to the second.
func TestLagOfARouteOutWhileWaiting(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newLagRig(5 * time.Minute)
		deleted := time.Now()
		r.deleteNow("u1")
		time.Sleep(1500 * time.Millisecond)
		r.Ask(t, "u1")
		time.Sleep(1200 * time.Millisecond)
		r.Src.Set(map[string]bool{"a": true})
		r.routesChanged("shop", "web")
		r.Ask(t, "u1")
		if len(lagsOf(r)) != 1 || lagsOf(r)[0] != 3*time.Second || !atOf(r)[0].Equal(deleted) {
			t.Fatalf("lags %v at %v; want 3s (2.7s rounded up) once, at the deletion %v", lagsOf(r), atOf(r), deleted)
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
		r.Ask(t, "u1")
		time.Sleep(90 * time.Second)
		r.sweep(time.Now())
		if r.dropped() != 0 {
			t.Fatalf("the source forgot the pod (%v) while its route's lag is still to learn", r.Src.Forgot())
		}
		// The kubelet's last delete, with no grace period, once the
		// containers ended, and their addresses gone from the status:
		// neither moves the deletion nor the target's address.
		final := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web", UID: "u1",
			DeletionTimestamp: &metav1.Time{Time: time.Now()}, DeletionGracePeriodSeconds: ptr.To[int64](0)}}
		r.Put(final)
		r.Remove(true)
		if r.timings.Watching() != 1 {
			t.Fatalf("gone pod: watched %d; want it watched once the tracker let it go", r.timings.Watching())
		}
		time.Sleep(20 * time.Second)
		r.routesChanged("shop", "web")
		if len(lagsOf(r)) != 0 || r.dropped() != 0 {
			t.Fatalf("learnt %v, dropped %d while the route is in", lagsOf(r), r.dropped())
		}
		r.Src.Set(map[string]bool{"a": true})
		r.routesChanged("shop", "web")
		if len(lagsOf(r)) != 1 || lagsOf(r)[0] != 110*time.Second {
			t.Fatalf("lags %v; want 110s", lagsOf(r))
		}
		if r.timings.Watching() != 0 || r.dropped() != 1 {
			t.Errorf("after the route went out: watched %d, dropped %d; want 0 and 1", r.timings.Watching(), r.dropped())
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
		r.Ask(t, "u1")
		r.Remove(true)
		time.Sleep(119 * time.Second)
		r.sweep(time.Now())
		if len(lagsOf(r)) != 0 {
			t.Fatalf("learnt %v before the ceiling", lagsOf(r))
		}
		time.Sleep(time.Second)
		r.sweep(time.Now())
		if len(lagsOf(r)) != 1 || lagsOf(r)[0] != 2*time.Minute || r.timings.Watching() != 0 {
			t.Fatalf("at the ceiling: lags %v, watched %d; want 2m0s and the watch ended", lagsOf(r), r.timings.Watching())
		}

		// A group deleted in AWS: nothing more to learn of it.
		r3 := newLagRig(2 * time.Minute)
		r3.deleteNow("u3")
		r3.Ask(t, "u3")
		r3.Remove(true)
		r3.Src.ReadFailed(route.Gone(errors.New("TargetGroupNotFound")))
		r3.sweep(time.Now())
		if len(lagsOf(r3)) != 0 || r3.timings.Watching() != 0 {
			t.Errorf("group gone: lags %v, watched %d; want none, none", lagsOf(r3), r3.timings.Watching())
		}
		// A read that failed is tried again.
		r4 := newLagRig(2 * time.Minute)
		r4.deleteNow("u4")
		r4.Ask(t, "u4")
		r4.Remove(true)
		r4.Src.Set(map[string]bool{"a": true})
		r4.Src.ReadFailed(errors.New("Throttling"))
		r4.sweep(time.Now())
		if len(lagsOf(r4)) != 0 || r4.timings.Watching() != 1 {
			t.Errorf("read failed: lags %v, watched %d; want none yet, still watched", lagsOf(r4), r4.timings.Watching())
		}

		r2 := newLagRig(2*time.Minute, func(a netip.Addr) bool { return a == netip.MustParseAddr("10.0.0.5") })
		r2.deleteNow("u2")
		r2.Ask(t, "u2")
		r2.Remove(true)
		r2.sweep(time.Now())
		if len(lagsOf(r2)) != 0 || r2.timings.Watching() != 0 || r2.dropped() != 1 {
			t.Errorf("address reused: lags %v, watched %d, dropped %d; want none, none, 1", lagsOf(r2), r2.timings.Watching(), r2.dropped())
		}
	})
}

// A pod whose agent never asked this replica teaches nothing: another
// replica waits for it, or nobody does.
func TestLagOnlyOfPodsAsked(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newLagRig(5 * time.Minute)
		r.deleteNow("u1")
		r.Src.Set(map[string]bool{"a": true})
		r.routesChanged("shop", "web")
		r.Remove(true)
		if len(lagsOf(r)) != 0 || r.timings.Watching() != 0 {
			t.Errorf("lags %v, watched %d; want none", lagsOf(r), r.timings.Watching())
		}
	})
}

func lagsOf(r *lagRig) []time.Duration { l, _ := r.lags(); return l }

func atOf(r *lagRig) []time.Time { _, at := r.lags(); return at }
