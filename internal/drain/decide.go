package drain

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"

	"draingate.dev/draingate/api"
	"draingate.dev/draingate/internal/gate"
)

// decideLocked is one pod's drain, in order: its memory (the replica's
// own, merged with the shared record), every source's observation of its
// routes, one gate.Step, the decision handed once to each consumer, and a
// timer for the next time the verdict can change by the clock alone.
// asked says the decision answers the pod's agent. A failed observation
// changes nothing and is returned: a route the sources could not report
// may be missing, so no verdict rather than one that forgets it.
func (t *Tracker) decideLocked(ctx context.Context, pod *corev1.Pod, st *podState, now time.Time, asked bool) (api.Verdict, error) {
	mem := st.mem
	shared := t.o.Memory != nil && st.shared
	if shared {
		mem = t.o.Memory.Record(pod.UID).Merge(mem)
	}
	observed := st.observed(pod)
	var obs []gate.Observation
	for _, src := range t.o.Sources {
		if err := src.Ready(); err != nil {
			return api.Verdict{}, err
		}
		o, err := src.Observe(ctx, observed, mem.Known(src.Kind()), !st.asked.IsZero())
		if err != nil {
			return api.Verdict{}, err
		}
		obs = append(obs, o...)
	}
	gp := t.gatePod(pod)
	gp.Traffic = st.traffic
	v, next := gate.Step(now, gp, mem, obs)
	st.mem = next
	d := &Decision{Key: st.key, Pod: observed, At: now, Verdict: v, Prev: mem, Next: next, Observations: obs,
		Asked: asked, EverAsked: st.everAsked, Shared: shared}
	for _, c := range t.consumers {
		c.Decided(d)
	}
	t.setTimerLocked(st, gate.NextChange(now, gp, v), now)
	return v, nil
}

// setTimerLocked has the pod decided again at next (none when zero).
func (t *Tracker) setTimerLocked(st *podState, next, now time.Time) {
	if st.timer != nil {
		st.timer.Stop()
		st.timer = nil
	}
	if next.IsZero() {
		return
	}
	st.timer = time.AfterFunc(next.Sub(now)+5*time.Millisecond, func() {
		t.mu.Lock()
		defer t.mu.Unlock()
		if t.pods[st.key.String()] == st {
			t.refreshLocked(st)
		}
	})
}

func (t *Tracker) gatePod(pod *corev1.Pod) gate.Pod {
	gp := gate.Pod{Namespace: pod.Namespace, Name: pod.Name, UID: string(pod.UID)}
	if pod.DeletionTimestamp != nil {
		gp.Terminating = true
		gp.Deadline = pod.DeletionTimestamp.Add(-t.o.Reserve)
	}
	return gp
}

// refreshLocked re-observes a tracked pod, so that OutSince is recorded as
// soon as an owner takes the pod out whether or not its agent asks yet, and
// wakes its long-polls. An error keeps the memory as it was; the next
// change or the agent's next ask tries again.
func (t *Tracker) refreshLocked(st *podState) {
	defer t.signal(st.key.String())
	if t.closed || !t.synced.Load() {
		return
	}
	pod, err := t.o.Get(context.Background(), st.key.Namespace, st.key.Name)
	if err != nil || string(pod.UID) != st.key.UID {
		return
	}
	t.decideLocked(context.Background(), pod, st, t.o.Now(), false)
}

// RoutesChanged re-observes the tracked pods whose routes may have
// changed: every pod for namespace "", every pod of the namespace for
// name "". The route sources and the shared memory call it.
func (t *Tracker) RoutesChanged(namespace, name string) {
	if !t.synced.Load() || !t.tracks(namespace) {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, st := range t.pods {
		if (namespace == "" || st.key.Namespace == namespace) && (name == "" || st.key.Name == name) {
			t.refreshLocked(st)
		}
	}
}

// observed is the pod to observe: itself, or, when it lost its
// addresses, a copy with the ones last seen (a target group still holds
// them: the load balancer may send there, and the route is not out).
func (st *podState) observed(pod *corev1.Pod) *corev1.Pod {
	if len(st.ips) == 0 || len(addressesOf(pod)) > 0 {
		return pod
	}
	cp := *pod
	cp.Status.PodIPs = st.ips
	cp.Status.PodIP = st.ips[0].IP
	return &cp
}

// addressesOf is the pod's addresses as PodIPs (its PodIP alone where the
// list is empty).
func addressesOf(pod *corev1.Pod) []corev1.PodIP {
	if len(pod.Status.PodIPs) > 0 {
		return pod.Status.PodIPs
	}
	if pod.Status.PodIP != "" {
		return []corev1.PodIP{{IP: pod.Status.PodIP}}
	}
	return nil
}
