package server

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"

	"draingate.dev/draingate/api"
	"draingate.dev/draingate/internal/gate"
	"draingate.dev/draingate/internal/route"
)

// pods is the server's per-pod state: for every terminating pod, the gate's
// memory and whether its agent is asking. It observes a pod's routes
// through every source, lets gate.Step decide, stores what Step returns,
// and wakes the pod's long-polls. It needs no cluster: the pod reader, the
// sources and the events are given.
type pods struct {
	now     func() time.Time
	sources []route.Source
	// get reads a pod from the cache (an apierrors NotFound when absent).
	// The pod may be shared with the cache: read it, never change it.
	get func(ctx context.Context, namespace, name string) (*corev1.Pod, error)
	// live, when set, reads a pod from the API server itself (a
	// consistent read): it confirms that a pod the cache sees as not
	// terminating really is not, before the agent is let go.
	live func(ctx context.Context, namespace, name string) (*corev1.Pod, error)
	// tokens, when set, reviews the tokens agents show (hostNetwork pods'
	// agents: see authorize).
	tokens *tokens
	// reserve is taken off the pod's deletionTimestamp for its deadline.
	reserve time.Duration
	// linger is how long a pod counts as waiting after its agent last
	// asked: sources may keep costly work (AWS polls) going for it that long.
	linger time.Duration
	events *events
	// tracked, when set, is told how many pods are tracked.
	tracked func(n int)
	// ready says why the gate cannot answer yet (nil once it can).
	ready func() error
	// ignoreTraffic drops the agents' traffic evidence; epsilon is the
	// false-quiet chance the gate accepts with it.
	ignoreTraffic bool
	epsilon       float64

	synced atomic.Bool // the pod cache and the sources synced

	// mu guards the terminating pods' states; it is held while a pod's
	// routes are observed and the gate steps. Events that concern no
	// tracked pod never take it: a cluster's stream of pod updates and
	// slice changes goes by while a decision is made.
	mu     sync.Mutex
	closed bool
	pods   map[string]*podState // "namespace/name" → a terminating pod

	// byNS counts the tracked pods per namespace (written under mu too).
	nsMu sync.Mutex
	byNS map[string]int

	subsMu sync.Mutex
	subs   map[string]map[chan struct{}]struct{}

	liveMu    sync.Mutex
	liveReads map[types.UID]time.Time // a pod's last live read (mayReadLive)
}

// podState is what the server keeps about one terminating pod.
type podState struct {
	key   route.PodKey
	mem   gate.Memory
	asked time.Time // the agent's last ask; zero when not waiting
	// evidence is the traffic summary of the agent's latest ask, as the
	// gate weighs it; nil when it sent none. summary is that ask's own
	// summary, to classify it once however often the ask is judged.
	evidence *gate.Evidence
	summary  *api.Traffic
	timer    *time.Timer
	// startNoted and releaseNoted: the pod's Events were written.
	startNoted, releaseNoted bool
}

func newPods() *pods {
	return &pods{pods: map[string]*podState{}, byNS: map[string]int{}, subs: map[string]map[chan struct{}]struct{}{}}
}

// stateLocked returns the pod's state, making it on first sight. A state
// held for another pod of the same name (an older UID) is dropped first.
func (p *pods) stateLocked(pod *corev1.Pod, now time.Time) *podState {
	key := route.KeyOf(pod)
	st := p.pods[key.String()]
	if st != nil && st.key.UID != key.UID {
		p.dropLocked(st)
		st = nil
	}
	if st == nil {
		st = &podState{key: key, mem: gate.Memory{TerminatingSince: now}}
		p.pods[key.String()] = st
		p.countNS(key.Namespace, 1)
		p.count()
	}
	return st
}

// dropLocked forgets a pod: its timer stops and the sources forget it.
func (p *pods) dropLocked(st *podState) {
	if p.pods[st.key.String()] == st {
		delete(p.pods, st.key.String())
		p.countNS(st.key.Namespace, -1)
		p.count()
	}
	if st.timer != nil {
		st.timer.Stop()
	}
	p.forget(st)
}

func (p *pods) forget(st *podState) {
	for _, src := range p.sources {
		src.Forget(st.key)
	}
}

func (p *pods) countNS(ns string, d int) {
	p.nsMu.Lock()
	defer p.nsMu.Unlock()
	if p.byNS[ns] += d; p.byNS[ns] <= 0 {
		delete(p.byNS, ns)
	}
}

// tracks says whether any pod of namespace ("" for any) is tracked.
func (p *pods) tracks(namespace string) bool {
	p.nsMu.Lock()
	defer p.nsMu.Unlock()
	if namespace == "" {
		return len(p.byNS) > 0
	}
	return p.byNS[namespace] > 0
}

func (p *pods) count() {
	if p.tracked != nil {
		p.tracked(len(p.pods))
	}
}

// decideLocked observes the pod's routes through every source, steps the
// gate, stores its memory and sets the pod's timer for the next time the
// verdict can change by the clock alone. A failed observation changes
// nothing and is returned: a route the sources could not report may be
// missing, so no verdict rather than one that forgets it (rule 1).
func (p *pods) decideLocked(ctx context.Context, pod *corev1.Pod, st *podState, now time.Time) (api.Verdict, error) {
	var obs []gate.Observation
	for _, src := range p.sources {
		if err := src.Ready(); err != nil {
			return api.Verdict{}, err
		}
		o, err := src.Observe(ctx, pod, st.mem.Known(src.Kind()), !st.asked.IsZero())
		if err != nil {
			return api.Verdict{}, err
		}
		obs = append(obs, o...)
	}
	gp := p.gatePod(pod)
	gp.Evidence = st.evidence
	v, mem := gate.Step(now, gp, st.mem, obs)
	st.mem = mem
	if st.timer != nil {
		st.timer.Stop()
		st.timer = nil
	}
	if next := gate.NextChange(now, gp, v); !next.IsZero() {
		st.timer = time.AfterFunc(next.Sub(now)+5*time.Millisecond, func() {
			p.mu.Lock()
			defer p.mu.Unlock()
			if p.pods[st.key.String()] == st {
				p.refreshLocked(st)
			}
		})
	}
	return v, nil
}

func (p *pods) gatePod(pod *corev1.Pod) gate.Pod {
	gp := gate.Pod{Namespace: pod.Namespace, Name: pod.Name, UID: string(pod.UID)}
	if pod.DeletionTimestamp != nil {
		gp.Terminating = true
		gp.Deadline = pod.DeletionTimestamp.Add(-p.reserve)
	}
	return gp
}

// refreshLocked re-observes a tracked pod, so that OutSince is recorded as
// soon as an owner takes the pod out whether or not its agent asks yet, and
// wakes its long-polls. An error keeps the memory as it was; the next
// change or the agent's next ask tries again.
func (p *pods) refreshLocked(st *podState) {
	defer p.signal(st.key.String())
	if p.closed || !p.synced.Load() {
		return
	}
	pod, err := p.get(context.Background(), st.key.Namespace, st.key.Name)
	if err != nil || string(pod.UID) != st.key.UID {
		return
	}
	p.decideLocked(context.Background(), pod, st, p.now())
}

// podChanged is the pod informer's add and update handler.
func (p *pods) podChanged(o any) {
	pod, ok := o.(*corev1.Pod)
	if !ok {
		return
	}
	key := pod.Namespace + "/" + pod.Name
	if pod.DeletionTimestamp == nil {
		// Nothing to decide: a long-poll about it (a restart's) re-reads.
		if p.synced.Load() {
			p.signal(key)
		}
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return
	}
	st := p.stateLocked(pod, p.now())
	if p.synced.Load() {
		p.decideLocked(context.Background(), pod, st, p.now())
	}
	p.signal(key)
}

// podDeleted is the pod informer's delete handler.
func (p *pods) podDeleted(o any) {
	if t, ok := o.(toolscache.DeletedFinalStateUnknown); ok {
		o = t.Obj
	}
	pod, ok := o.(*corev1.Pod)
	if !ok {
		return
	}
	key := pod.Namespace + "/" + pod.Name
	if pod.DeletionTimestamp != nil || p.tracks(pod.Namespace) {
		p.mu.Lock()
		if st := p.pods[key]; st != nil && st.key.UID == string(pod.UID) {
			p.dropLocked(st)
		}
		p.mu.Unlock()
	}
	p.signal(key)
}

// routesChanged re-observes the tracked pods whose routes may have changed:
// every pod for namespace "", every pod of the namespace for name "". The
// sources call it.
func (p *pods) routesChanged(namespace, name string) {
	if !p.synced.Load() || !p.tracks(namespace) {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, st := range p.pods {
		if (namespace == "" || st.key.Namespace == namespace) && (name == "" || st.key.Name == name) {
			p.refreshLocked(st)
		}
	}
}

// sweep is the janitor's round: it forgets pods no longer in the cache
// (a delete event that raced a verdict re-making the state), and tells the
// sources to stop working for pods whose agents stopped asking.
func (p *pods) sweep(now time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for key, st := range p.pods {
		pod, err := p.get(context.Background(), st.key.Namespace, st.key.Name)
		if apierrors.IsNotFound(err) || err == nil && string(pod.UID) != st.key.UID {
			p.dropLocked(st)
			continue
		}
		if p.subscribed(key) || st.asked.IsZero() || now.Sub(st.asked) < p.linger {
			continue
		}
		st.asked = time.Time{}
		p.forget(st)
	}
}

// close stops every timer and tells the sources to forget every pod.
func (p *pods) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	for _, st := range p.pods {
		if st.timer != nil {
			st.timer.Stop()
		}
		p.forget(st)
	}
}

// subscribed says whether a long-poll waits on the pod.
func (p *pods) subscribed(key string) bool {
	p.subsMu.Lock()
	defer p.subsMu.Unlock()
	return len(p.subs[key]) > 0
}

// signal wakes the long-polls waiting on the pod.
func (p *pods) signal(key string) {
	p.subsMu.Lock()
	defer p.subsMu.Unlock()
	for ch := range p.subs[key] {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}
