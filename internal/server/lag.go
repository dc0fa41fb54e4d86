package server

import (
	"context"
	"errors"
	"net/netip"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"draingate.dev/draingate/internal/gate"
	"draingate.dev/draingate/internal/route"
)

// How long after a pod's deletion its owners take it out (issue: learned
// timings, part 2). A pod's max-wait is fixed when it is created; a
// controller that deregisters later than that (throttled, lagging) makes
// every agent give up before its routes even went out. The server sees
// both ends: the pod's deletion (its deletionTimestamp less its grace
// period) and the first observation of each route out. It records that
// lag per load balancer, for every pod whose agent asked, including pods
// released at their deadline, whose routes it keeps watching after the
// pod is gone (watchLocked); the injection webhook sizes the next pods'
// max-wait by it (route.LagLearner.AdmissionNeed, inject.Handler.Need).

// lagLearning is what pods needs to learn lags.
type lagLearning struct {
	// learns says whether a kind's routes teach lags.
	learns func(kind string) bool
	// record is told each lag, once per route of a pod.
	record func(k gate.RouteKey, deleted time.Time, lag time.Duration)
	// ceiling is how long after a pod's deletion its routes are watched;
	// a route still in then is recorded at the ceiling (it was at least
	// that late).
	ceiling time.Duration
}

// deletedAt is when the pod was deleted: its deletionTimestamp less its
// grace period; zero when not deleted. A later delete with a shorter grace
// period (the kubelet's last, with none) moves both: the earliest seen is
// the deletion (podState.deleted).
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

// slimPod keeps of a pod what its routes are observed by once it is gone:
// its identity, labels, deletion, node and addresses. A pod that lost its
// addresses (the kubelet clears them once its containers ended) keeps
// prev's: its targets are still those addresses'.
func slimPod(pod, prev *corev1.Pod) *corev1.Pod {
	out := &corev1.Pod{TypeMeta: pod.TypeMeta}
	out.ObjectMeta = metav1.ObjectMeta{Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID, Labels: pod.Labels,
		DeletionTimestamp: pod.DeletionTimestamp, DeletionGracePeriodSeconds: pod.DeletionGracePeriodSeconds}
	out.Spec.NodeName, out.Spec.HostNetwork = pod.Spec.NodeName, pod.Spec.HostNetwork
	out.Status.PodIP, out.Status.PodIPs, out.Status.HostIP = pod.Status.PodIP, pod.Status.PodIPs, pod.Status.HostIP
	if len(route.IPs(pod)) == 0 && prev != nil {
		out.Status.PodIP, out.Status.PodIPs = prev.Status.PodIP, prev.Status.PodIPs
	}
	return out
}

// withAddresses is the pod to observe: itself, or, when it lost its
// addresses, a copy with the ones last seen (a target group still holds
// them: the load balancer may send there, and the route is not out).
func withAddresses(pod *corev1.Pod, st *podState) *corev1.Pod {
	if len(route.IPs(pod)) > 0 || st.pod == nil || len(route.IPs(st.pod)) == 0 {
		return pod
	}
	cp := *pod
	cp.Status.PodIP, cp.Status.PodIPs = st.pod.Status.PodIP, st.pod.Status.PodIPs
	return &cp
}

// lagLocked records the lag of each learning route of the pod that mem
// finds out for the first time.
func (p *pods) lagLocked(st *podState, mem gate.Memory) {
	if p.lag == nil || !st.everAsked || st.deleted.IsZero() {
		return
	}
	del := st.deleted
	for k, m := range mem.Routes {
		if m.WasRoute && !m.OutSince.IsZero() && !st.lagged[k] && p.lag.learns(k.Kind) {
			p.lagRecordLocked(st, k, del, m.OutSince.Sub(del))
		}
	}
}

func (p *pods) lagRecordLocked(st *podState, k gate.RouteKey, del time.Time, d time.Duration) {
	if st.lagged == nil {
		st.lagged = map[gate.RouteKey]bool{}
	}
	st.lagged[k] = true
	p.lag.record(k, del, lagSample(d))
}

// lagPending lists the pod's learning routes whose lag is still to learn:
// routes it was in that were not seen out yet, of a deleted pod whose
// agent asked.
func (p *pods) lagPending(st *podState) []gate.RouteKey {
	if p.lag == nil || !st.everAsked || st.deleted.IsZero() {
		return nil
	}
	var out []gate.RouteKey
	for k, m := range st.mem.Routes {
		if m.WasRoute && m.OutSince.IsZero() && !st.lagged[k] && p.lag.learns(k.Kind) {
			out = append(out, k)
		}
	}
	return out
}

// keepForLag says whether the source's routes teach lags, with lags being
// learnt and some still to learn for the pod: its work for the pod goes
// on.
func (p *pods) keepForLag(st *podState, src route.Source) bool {
	return p.lag != nil && p.lag.learns(src.Kind()) && len(p.lagPending(st)) > 0
}

// watchLocked re-observes a gone pod's routes whose lag is still to learn
// (see dropLocked): each seen out is recorded; at the ceiling the rest
// are recorded at it. The watch ends when none is left, or when another
// pod holds the gone pod's address (its target is that pod's now: no lag
// to learn); the learning sources then drop the pod.
func (p *pods) watchLocked(st *podState, now time.Time) {
	pending := p.lagPending(st)
	if len(pending) > 0 && !p.reused(st.pod) {
		del := st.deleted
		for _, src := range p.sources {
			var known []gate.Known
			for _, k := range pending {
				if k.Kind == src.Kind() {
					known = append(known, gate.Known{Name: k.Name, WasRoute: true})
				}
			}
			if len(known) == 0 {
				continue
			}
			obs, err := src.Observe(context.Background(), st.pod, known, true)
			if err != nil {
				continue // the next change or sweep tries again
			}
			for _, o := range obs {
				k := gate.RouteKey{Kind: o.Kind, Name: o.Name}
				switch {
				case !slices.Contains(pending, k):
				case errors.Is(o.Err, route.ErrGone) || o.Synced && o.NotRoute:
					if st.lagged == nil {
						st.lagged = map[gate.RouteKey]bool{}
					}
					st.lagged[k] = true // nothing to learn
				case o.Synced && o.Out && o.Err == nil:
					p.lagRecordLocked(st, k, del, now.Sub(del))
				}
			}
		}
		if now.Sub(del) >= p.lag.ceiling {
			for _, k := range p.lagPending(st) {
				p.lagRecordLocked(st, k, del, p.lag.ceiling)
			}
		}
		if len(p.lagPending(st)) > 0 {
			return
		}
	}
	delete(p.after, st.key.UID)
	p.afterN.Store(int32(len(p.after)))
	for _, src := range p.sources {
		if p.lag.learns(src.Kind()) {
			src.Drop(st.key)
		}
	}
}

// reused says whether a pod in the cache holds one of the gone pod's
// addresses.
func (p *pods) reused(pod *corev1.Pod) bool {
	if p.inCluster == nil {
		return false
	}
	for _, ip := range route.IPs(pod) {
		if a, err := netip.ParseAddr(ip); err == nil && p.inCluster(a) {
			return true
		}
	}
	return false
}

// learnLag records a lag under the key its kind gives the route.
func (s *Server) learnLag(k gate.RouteKey, deleted time.Time, lag time.Duration) {
	for _, src := range s.sources {
		if l, ok := src.(route.LagLearner); ok && src.Kind() == k.Kind {
			if key := l.LagKey(k.Name); key != "" {
				s.book.Add(key, deleted, lag)
			}
			return
		}
	}
}

// learnsLag says whether a kind's routes teach lags.
func (s *Server) learnsLag(kind string) bool {
	for _, src := range s.sources {
		if _, ok := src.(route.LagLearner); ok && src.Kind() == kind {
			return true
		}
	}
	return false
}

// admissionNeed is the longest wait a new pod's routes need by what the
// lags taught, and why (inject.Handler.Need).
func (s *Server) admissionNeed(ctx context.Context, pod *corev1.Pod) (time.Duration, string) {
	var longest time.Duration
	var why string
	for _, src := range s.sources {
		if l, ok := src.(route.LagLearner); ok {
			if need, w := l.AdmissionNeed(ctx, pod); need > longest {
				longest, why = need, w
			}
		}
	}
	return longest, why
}
