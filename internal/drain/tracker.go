package drain

import (
	"cmp"
	"context"
	"errors"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"

	"draingate.dev/draingate/api"
	"draingate.dev/draingate/internal/gate"
	"draingate.dev/draingate/internal/route"
)

// Options are what a Tracker needs. It needs no cluster: the pod reader,
// the sources and the consumers are given.
type Options struct {
	// Sources are every kind of route's, in the order they observe.
	Sources []route.Source
	// Get reads a pod from the cache (an apierrors NotFound when absent).
	// The pod may be shared with the cache: read it, never change it.
	Get func(ctx context.Context, namespace, name string) (*corev1.Pod, error)
	// Live, when set, reads a pod from the API server itself (a
	// consistent read): it confirms that a pod the cache sees as not
	// terminating really is not, before its agent is let go.
	Live func(ctx context.Context, namespace, name string) (*corev1.Pod, error)
	// InCluster says whether an address is a pod of the cluster's: its
	// traffic is an in-cluster client's, never a route's.
	InCluster func(netip.Addr) bool
	// Memory, when set, is the replicas' shared memory: each decision of
	// a shared pod starts from the union of every replica's observations,
	// and what it adds is written there.
	Memory Store
	// Consumers are told each decision, after the shared memory.
	Consumers []Consumer
	// Reserve is taken off the pod's deletionTimestamp for its deadline
	// (default 5 s).
	Reserve time.Duration
	// Linger is how long a pod counts as waiting after its agent last
	// asked (default 60 s): sources may keep costly work (AWS polls) going
	// for it that long.
	Linger time.Duration
	// IgnoreTraffic drops the agents' traffic evidence; Epsilon is the
	// false-quiet chance the gate accepts with it.
	IgnoreTraffic bool
	Epsilon       float64
	// Tracked, when set, is told how many pods are tracked.
	Tracked func(n int)
	// Now is the clock (time.Now when nil).
	Now func() time.Time
}

// Tracker decides for every terminating pod: it keeps each one's state,
// observes its routes, steps the gate and hands each decision to the
// consumers; it answers the wait API (Verdict, Changed) and wakes the
// pod's long-polls. Make it with New.
type Tracker struct {
	o         Options
	consumers []Consumer
	keepers   []Keeper

	synced atomic.Bool // the pod cache and the sources synced

	// mu guards the terminating pods' states; it is held while a pod's
	// routes are observed, the gate steps and the consumers are told.
	// Events that concern no tracked pod never take it: a cluster's stream
	// of pod updates and slice changes goes by while a decision is made.
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

// podState is what the tracker keeps about one terminating pod.
type podState struct {
	key   route.PodKey
	mem   gate.Memory
	asked time.Time // the agent's last ask; zero when not waiting
	// everAsked: its agent asked this replica at least once.
	everAsked bool
	// traffic is the traffic summary of the agent's latest ask as the gate
	// weighs it, stamped with the time it arrived; nil when it sent none
	// or evidence is off. summary is that ask's own summary, to stamp it
	// once however often the ask is judged.
	traffic *gate.Traffic
	summary *api.Traffic
	timer   *time.Timer
	// shared: the pod's memory is shared with the other replicas (it
	// carries the agent, or its agent asked).
	shared bool
	// ips are the pod's addresses as last seen: the kubelet clears them
	// from a pod whose containers ended, while its targets are still
	// those addresses' (see observed).
	ips []corev1.PodIP
}

// New returns a tracker; it decides once the caches synced (Synced).
func New(o Options) *Tracker {
	o.Reserve = cmp.Or(o.Reserve, 5*time.Second)
	o.Linger = cmp.Or(o.Linger, 60*time.Second)
	if o.Now == nil {
		o.Now = time.Now
	}
	t := &Tracker{o: o, pods: map[string]*podState{}, byNS: map[string]int{}, subs: map[string]map[chan struct{}]struct{}{}}
	if o.Memory != nil {
		t.consumers = append(t.consumers, sharedMemory{o.Memory})
	}
	t.consumers = append(t.consumers, o.Consumers...)
	for _, c := range o.Consumers {
		if k, ok := c.(Keeper); ok {
			t.keepers = append(t.keepers, k)
		}
	}
	return t
}

// Synced tells the tracker that the pod cache synced: it decides for
// every pod it tracks, and from then on at every change.
func (t *Tracker) Synced() {
	t.synced.Store(true)
	t.RoutesChanged("", "")
}

// Ready says why the tracker cannot answer yet (nil once it can): the pod
// cache has not synced, or a source cannot observe yet. It is the wait
// API's precondition and the server's /readyz. Not the webhook's
// certificate: a replica that cannot serve the webhook still answers
// agents, and an unready gate would send every agent to its fallback
// timer; certificate trouble shows in the log and in
// draingate_webhook_certificate_ready, and the webhook fails open.
func (t *Tracker) Ready() error {
	if !t.synced.Load() {
		return errors.New("the pod cache has not synced yet")
	}
	for _, src := range t.o.Sources {
		if err := src.Ready(); err != nil {
			return err
		}
	}
	return nil
}

// PodChanged is the pod informer's add and update handler.
func (t *Tracker) PodChanged(o any) {
	pod, ok := o.(*corev1.Pod)
	if !ok {
		return
	}
	key := pod.Namespace + "/" + pod.Name
	if pod.DeletionTimestamp == nil {
		// Nothing to decide: a long-poll about it (a restart's) re-reads.
		if t.synced.Load() {
			t.signal(key)
		}
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return
	}
	st := t.stateLocked(pod, t.o.Now())
	if t.synced.Load() {
		t.decideLocked(context.Background(), pod, st, t.o.Now(), false)
	}
	t.signal(key)
}

// PodDeleted is the pod informer's delete handler.
func (t *Tracker) PodDeleted(o any) {
	pod, ok := route.Tombstone(o).(*corev1.Pod)
	if !ok {
		return
	}
	key := pod.Namespace + "/" + pod.Name
	if pod.DeletionTimestamp != nil || t.tracks(pod.Namespace) {
		t.mu.Lock()
		if st := t.pods[key]; st != nil && st.key.UID == string(pod.UID) {
			t.dropLocked(st)
		}
		t.mu.Unlock()
	}
	t.signal(key)
}

// stateLocked returns the pod's state, making it on first sight. A state
// held for another pod of the same name (an older UID) is dropped first.
func (t *Tracker) stateLocked(pod *corev1.Pod, now time.Time) *podState {
	key := route.KeyOf(pod)
	st := t.pods[key.String()]
	if st != nil && st.key.UID != key.UID {
		t.dropLocked(st)
		st = nil
	}
	if st == nil {
		st = &podState{key: key, mem: gate.Memory{TerminatingSince: now}}
		t.pods[key.String()] = st
		t.countNS(key.Namespace, 1)
		t.count()
	}
	st.shared = st.shared || pod.Annotations[api.AnnotationInjected] != ""
	if len(pod.Status.PodIPs) > 0 || pod.Status.PodIP != "" {
		st.ips = addressesOf(pod)
	}
	return st
}

// Janitor sweeps the tracked pods: it forgets pods no longer in the cache
// (a delete event that raced a verdict re-making the state), tells the
// sources to stop working for pods whose agents stopped asking, and drops
// the shared records of pods that are gone. The server runs it every few
// seconds.
func (t *Tracker) Janitor(now time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for key, st := range t.pods {
		pod, err := t.o.Get(context.Background(), st.key.Namespace, st.key.Name)
		if apierrors.IsNotFound(err) || err == nil && string(pod.UID) != st.key.UID {
			t.dropLocked(st)
			continue
		}
		if t.subscribed(key) || st.asked.IsZero() || now.Sub(st.asked) < t.o.Linger {
			continue
		}
		st.asked = time.Time{}
		t.forget(st.key)
	}
	t.sweepSharedLocked()
}

// sweepSharedLocked drops the shared records of pods that are gone: a
// replica that saw the pod go deletes its record, this catches those
// missed (every replica down at the time, a failed delete).
func (t *Tracker) sweepSharedLocked() {
	if t.o.Memory == nil {
		return
	}
	for uid, name := range t.o.Memory.Pods() {
		ns, n, ok := strings.Cut(name, "/")
		if !ok {
			t.o.Memory.Drop(uid)
			continue
		}
		pod, err := t.o.Get(context.Background(), ns, n)
		if apierrors.IsNotFound(err) || err == nil && pod.UID != uid {
			t.o.Memory.Drop(uid)
		}
	}
}

// dropLocked forgets a pod that is gone: its timer stops, the sources
// drop it (those a keeper keeps excepted) and the consumers are told.
func (t *Tracker) dropLocked(st *podState) {
	if t.pods[st.key.String()] == st {
		delete(t.pods, st.key.String())
		t.countNS(st.key.Namespace, -1)
		t.count()
	}
	if st.timer != nil {
		st.timer.Stop()
	}
	for _, src := range t.o.Sources {
		if f, ok := src.(route.Forgetter); ok && (t.closed || !t.kept(st.key, src.Kind())) {
			f.Drop(st.key)
		}
	}
	for _, c := range t.consumers {
		c.Gone(st.key)
	}
}

// forget tells the sources that nobody waits for the pod any more, except
// those whose work a keeper keeps.
func (t *Tracker) forget(key route.PodKey) {
	for _, src := range t.o.Sources {
		if f, ok := src.(route.Forgetter); ok && !t.kept(key, src.Kind()) {
			f.Forget(key)
		}
	}
}

// kept says whether a keeper goes on with the source's work for the pod.
func (t *Tracker) kept(key route.PodKey, kind string) bool {
	for _, k := range t.keepers {
		if k.Keeps(key, kind) {
			return true
		}
	}
	return false
}

func (t *Tracker) countNS(ns string, d int) {
	t.nsMu.Lock()
	defer t.nsMu.Unlock()
	if t.byNS[ns] += d; t.byNS[ns] <= 0 {
		delete(t.byNS, ns)
	}
}

// tracks says whether any pod of namespace ("" for any) is tracked.
func (t *Tracker) tracks(namespace string) bool {
	t.nsMu.Lock()
	defer t.nsMu.Unlock()
	if namespace == "" {
		return len(t.byNS) > 0
	}
	return t.byNS[namespace] > 0
}

func (t *Tracker) count() {
	if t.o.Tracked != nil {
		t.o.Tracked(len(t.pods))
	}
}

// Close stops every timer and tells the sources to forget every pod.
func (t *Tracker) Close() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.closed = true
	for _, st := range t.pods {
		if st.timer != nil {
			st.timer.Stop()
		}
		for _, src := range t.o.Sources {
			if f, ok := src.(route.Forgetter); ok {
				f.Forget(st.key)
			}
		}
	}
}
