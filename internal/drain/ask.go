package drain

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"

	"draingate.dev/draingate/api"
	"draingate.dev/draingate/internal/gate"
	"draingate.dev/draingate/internal/route"
	"draingate.dev/draingate/internal/waitapi"
)

// Verdict implements waitapi.Gate: it reads the pod from the cache, marks
// it waiting (its sources may then do costly work for it, such as polling
// its target groups) and decides (decideLocked), the decision answering
// its agent.
func (t *Tracker) Verdict(ctx context.Context, req api.DrainRequest) (api.Verdict, error) {
	if err := t.Ready(); err != nil {
		return api.Verdict{}, err
	}
	pod, err := t.o.Get(ctx, req.Namespace, req.Pod)
	if apierrors.IsNotFound(err) {
		return api.Verdict{}, waitapi.ErrUnknownPod
	}
	if err != nil {
		return api.Verdict{}, fmt.Errorf("read pod from cache: %w", err)
	}
	if req.UID != "" && !strings.EqualFold(req.UID, string(pod.UID)) {
		return api.Verdict{}, waitapi.ErrUIDMismatch
	}
	now := t.o.Now()
	if pod.DeletionTimestamp == nil {
		v, _ := gate.Step(now, t.gatePod(pod), gate.Memory{}, nil)
		t.confirmNotTerminating(ctx, pod, &v)
		return v, nil
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return api.Verdict{}, errors.New("the server is shutting down")
	}
	st := t.stateLocked(pod, now)
	st.asked, st.shared, st.everAsked = now, true, true
	// Each ask replaces the evidence, once: the wait API calls Verdict
	// again during a long-poll with the same request, whose summary must
	// keep the time it arrived (re-reading its ages against a later clock
	// would make old silence look new). An ask without a summary drops
	// the last one: the tails alone decide then, never stale evidence.
	if req.Traffic != st.summary || st.summary == nil {
		st.summary, st.traffic = req.Traffic, nil
		if req.Traffic != nil && !t.o.IgnoreTraffic {
			st.traffic = &gate.Traffic{Summary: req.Traffic, At: now, Node: route.NodeAddrs(pod), InCluster: t.o.InCluster, Epsilon: t.o.Epsilon}
		}
	}
	return t.decideLocked(ctx, pod, st, now, true)
}

// liveReadTimeout bounds confirmNotTerminating's read; liveReadEvery is
// the least time between two live reads of one pod, so that a pod asking
// about itself in a loop cannot turn its asks into API server load.
const (
	liveReadTimeout = 5 * time.Second
	liveReadEvery   = time.Second
)

// mayReadLive says whether the pod may be read live now, and if so notes
// the read. Reads older than liveReadEvery are forgotten as it goes.
func (t *Tracker) mayReadLive(uid types.UID) bool {
	now := t.o.Now()
	t.liveMu.Lock()
	defer t.liveMu.Unlock()
	if last, ok := t.liveReads[uid]; ok && now.Sub(last) < liveReadEvery {
		return false
	}
	if t.liveReads == nil || len(t.liveReads) > 1024 {
		for u, at := range t.liveReads {
			if now.Sub(at) >= liveReadEvery {
				delete(t.liveReads, u)
			}
		}
		if t.liveReads == nil {
			t.liveReads = map[types.UID]time.Time{}
		}
	}
	t.liveReads[uid] = now
	return true
}

// confirmNotTerminating releases the agent of a pod that is not being
// deleted: its preStop hook runs because its container stops for another
// reason (a failed liveness probe, an eviction, a node's graceful
// shutdown), and holding it would only delay the restart or eat the time
// the kubelet gives the app. The cache may be behind a deletion the
// kubelet already acts on, so the release needs the API server's own word
// (a consistent read); a read that fails or shows a deletion (or another
// incarnation) leaves v as it is, and the agent asks again.
func (t *Tracker) confirmNotTerminating(ctx context.Context, cached *corev1.Pod, v *api.Verdict) {
	if t.o.Live == nil || v.Released || v.Reason != api.ReasonNotTerminating {
		return
	}
	if !t.mayReadLive(cached.UID) {
		v.Message += fmt.Sprintf("; the API server was asked about it less than %s ago: asking again", liveReadEvery)
		return
	}
	rctx, cancel := context.WithTimeout(ctx, liveReadTimeout)
	defer cancel()
	pod, err := t.o.Live(rctx, cached.Namespace, cached.Name)
	switch {
	case err != nil:
		v.Message += fmt.Sprintf("; the API server could not confirm it (%s): asking again", api.OneLine(err.Error()))
	case pod.UID != cached.UID || pod.DeletionTimestamp != nil:
		v.Message += "; the API server already says otherwise: waiting for the cache"
	default:
		v.Released = true
		v.Message = "the pod is not being deleted (the API server confirms it): its container stops for another reason " +
			"(a failed liveness probe, an eviction, a node shutdown), with no deletion for the load balancers to follow: released at once"
	}
}

// Changed implements waitapi.Gate.
func (t *Tracker) Changed(req api.DrainRequest) (<-chan struct{}, func()) {
	key := req.Namespace + "/" + req.Pod
	ch := make(chan struct{}, 1)
	t.subsMu.Lock()
	if t.subs[key] == nil {
		t.subs[key] = map[chan struct{}]struct{}{}
	}
	t.subs[key][ch] = struct{}{}
	t.subsMu.Unlock()
	return ch, func() {
		t.subsMu.Lock()
		delete(t.subs[key], ch)
		if len(t.subs[key]) == 0 {
			delete(t.subs, key)
		}
		t.subsMu.Unlock()
	}
}

// subscribed says whether a long-poll waits on the pod.
func (t *Tracker) subscribed(key string) bool {
	t.subsMu.Lock()
	defer t.subsMu.Unlock()
	return len(t.subs[key]) > 0
}

// signal wakes the long-polls waiting on the pod.
func (t *Tracker) signal(key string) {
	t.subsMu.Lock()
	defer t.subsMu.Unlock()
	for ch := range t.subs[key] {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}
