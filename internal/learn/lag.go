package learn

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	"draingate.dev/draingate/internal/gate"
	"draingate.dev/draingate/internal/route"
)

// How long after a pod's deletion its owners take it out. A pod's
// max-wait is fixed when it is created; a controller that deregisters
// later than that (throttled, lagging) makes every agent give up before
// its routes even went out. Learning sees both ends: the pod's deletion
// (its deletionTimestamp less its grace period) and the first observation
// of each route out. It records that lag per load balancer, for every pod
// whose agent asked, including pods released at their deadline, whose
// routes it keeps watching after the tracker is done with them
// (watchLocked); the webhook sizes the next pods' max-wait by it
// (AdmissionNeed).

// deletedAt is when the pod was deleted: its deletionTimestamp less its
// grace period; zero when not deleted. A later delete with a shorter grace
// period (the kubelet's last, with none) moves both: the earliest seen is
// the deletion.
func deletedAt(pod *corev1.Pod) time.Time {
	if pod == nil || pod.DeletionTimestamp == nil {
		return time.Time{}
	}
	return pod.DeletionTimestamp.Add(-time.Duration(ptr.Deref(pod.DeletionGracePeriodSeconds, 0)) * time.Second)
}

// lagSample is a lag as it is recorded: rounded up to the second (two
// replicas that saw the same route go out a poll apart then mostly record
// the same sample, which the book keeps once), never negative (a route
// out before the deletion: a failing readiness probe).
func lagSample(d time.Duration) time.Duration {
	if d <= 0 {
		return 0
	}
	return (d + time.Second - 1).Truncate(time.Second)
}

// lagsLocked records the lag of each teaching route of the pod seen out
// for the first time.
func (t *Timings) lagsLocked(p *podTimes) {
	if !p.everAsked || p.deleted.IsZero() {
		return
	}
	for k, m := range p.routes {
		if m.WasRoute && !m.OutSince.IsZero() && !p.lagged[k] && t.learners[k.Kind] != nil {
			t.recordLagLocked(p, k, m.OutSince.Sub(p.deleted))
		}
	}
}

func (t *Timings) recordLagLocked(p *podTimes, k gate.RouteKey, d time.Duration) {
	p.lagged[k] = true
	if key := t.key(k); key != "" {
		lag := lagSample(d)
		t.book.AddSample(LagPrefix+key, Sample{At: p.deleted, D: lag, Seen: lag, Drain: DrainID(p.key.UID)})
	}
}

// pendingLocked lists the pod's teaching routes whose lag is still to
// learn: routes it was in that were not seen out yet, of a deleted pod
// whose agent asked.
func (t *Timings) pendingLocked(p *podTimes) []gate.RouteKey {
	if !t.o.Lags || !p.everAsked || p.deleted.IsZero() {
		return nil
	}
	var out []gate.RouteKey
	for k, m := range p.routes {
		if m.WasRoute && m.OutSince.IsZero() && !p.lagged[k] && t.learners[k.Kind] != nil {
			out = append(out, k)
		}
	}
	return out
}

// RoutesChanged re-observes the gone pods whose routes may have changed:
// every one for namespace "", every one of the namespace for name "". The
// route sources call it.
func (t *Timings) RoutesChanged(namespace, name string) {
	if t.goneN.Load() == 0 {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.o.Now()
	for _, p := range t.gone {
		if (namespace == "" || p.key.Namespace == namespace) && (name == "" || p.key.Name == name) {
			t.watchLocked(p, now)
		}
	}
}

// sweep re-observes every gone pod: a ceiling passes without a change.
func (t *Timings) sweep() {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.o.Now()
	for _, p := range t.gone {
		t.watchLocked(p, now)
	}
}

// watchLocked re-observes a gone pod's routes whose lag is still to learn:
// each seen out is recorded; at the ceiling the rest are recorded at it
// (they were at least that late). The watch ends when none is left, or
// when another pod holds the gone pod's address (its target is that pod's
// now: no lag to learn); the teaching sources then drop the pod.
func (t *Timings) watchLocked(p *podTimes, now time.Time) {
	pending := t.pendingLocked(p)
	if len(pending) > 0 && !t.reused(p.pod) {
		for _, src := range t.sources {
			var known []gate.Known
			for _, k := range pending {
				if k.Kind == src.Kind() {
					known = append(known, gate.Known{Name: k.Name, WasRoute: true})
				}
			}
			if len(known) == 0 {
				continue
			}
			obs, err := src.Observe(context.Background(), p.pod, known, true)
			if err != nil {
				continue // the next change or sweep tries again
			}
			for _, o := range obs {
				k := gate.RouteKey{Kind: o.Kind, Name: o.Name}
				switch {
				case !slices.Contains(pending, k):
				case errors.Is(o.Err, route.ErrGone) || o.Synced && o.NotRoute:
					p.lagged[k] = true // nothing to learn
				case o.Synced && o.Out && o.Err == nil:
					t.recordLagLocked(p, k, now.Sub(p.deleted))
				}
			}
		}
		if now.Sub(p.deleted) >= t.o.Ceiling {
			for _, k := range t.pendingLocked(p) {
				t.recordLagLocked(p, k, t.o.Ceiling)
			}
		}
		if len(t.pendingLocked(p)) > 0 {
			return
		}
	}
	delete(t.gone, p.key)
	t.goneN.Store(int32(len(t.gone)))
	t.forgetLocked(p, true)
}

// forgetLocked has the teaching sources forget the gone pod, or drop it.
func (t *Timings) forgetLocked(p *podTimes, drop bool) {
	for _, src := range t.sources {
		f, ok := src.(route.Forgetter)
		if !ok || t.learners[src.Kind()] == nil {
			continue
		}
		if drop {
			f.Drop(p.key)
		} else {
			f.Forget(p.key)
		}
	}
}

// reused says whether a pod in the cache holds one of the gone pod's
// addresses.
func (t *Timings) reused(pod *corev1.Pod) bool {
	if t.o.InCluster == nil || pod == nil {
		return false
	}
	return slices.ContainsFunc(route.Addrs(pod), t.o.InCluster)
}

// AdmissionNeed is the longest wait a pod being created needs by what the
// lags taught, and why (inject.Handler.Need): for each route of a teaching
// kind the pod will have, how long after a pod's deletion its owner was
// seen taking pods out (Estimate.Generous) plus the route's tail. Zero
// when nothing was learnt, or when the kinds cannot tell the pod's routes
// (AdmissionWait says so).
func (t *Timings) AdmissionNeed(ctx context.Context, pod *corev1.Pod) (need time.Duration, why string) {
	if !t.o.Lags {
		return 0, ""
	}
	for _, src := range t.sources {
		l := t.learners[src.Kind()]
		if l == nil {
			continue
		}
		for _, r := range l.AdmissionRoutes(ctx, pod) {
			key := l.LearnKey(r.Name)
			if key == "" {
				continue
			}
			e := t.book.Estimate(LagPrefix + key)
			if e.N == 0 {
				continue
			}
			lag, phrase := e.Generous("lags")
			if n := lag + r.Tail; n > need {
				need = n
				why = fmt.Sprintf("%s took pods out up to %s after their deletion (%s), plus its %s tail (%s)",
					r.What, lag.Round(100*time.Millisecond), phrase, r.TailName, r.Tail)
			}
		}
	}
	return need, why
}
