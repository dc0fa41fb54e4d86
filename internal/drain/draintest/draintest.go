// Package draintest runs a drain.Tracker without a cluster, for tests: a
// map stands for the pod cache and a scripted source for the routes.
package draintest

import (
	"context"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"draingate.dev/draingate/api"
	"draingate.dev/draingate/internal/drain"
	"draingate.dev/draingate/internal/evidence"
	"draingate.dev/draingate/internal/gate"
	"draingate.dev/draingate/internal/route"
)

// Kind is the scripted source's kind.
const Kind = "test"

// Tail is the scripted routes' tail.
const Tail = 10 * time.Second

// Source is a route source whose routes a test sets: the same for every
// pod. A known route it no longer lists is reported out. It teaches
// (route.Learner) under "lb:" and the route's name.
type Source struct {
	mu      sync.Mutex
	routes  map[string]bool // name → out
	err     error
	obsErr  error
	ports   []uint16
	waiting []bool
	known   [][]string
	forgot  []route.PodKey
	block   chan struct{}
}

// NewSource returns a source with the routes given (name → out).
func NewSource(routes map[string]bool) *Source { return &Source{routes: routes} }

func (s *Source) Kind() string                            { return Kind }
func (s *Source) Ready() error                            { return nil }
func (s *Source) Start(context.Context, route.Host) error { return nil }
func (s *Source) AdmissionWait(context.Context, *corev1.Pod) (time.Duration, string, error) {
	return 0, "", nil
}

// LearnKey implements route.Learner.
func (s *Source) LearnKey(name string) string { return "lb:" + name }

// AdmissionRoutes implements route.Learner: every route the source lists,
// for a pod being created.
func (s *Source) AdmissionRoutes(context.Context, *corev1.Pod) []route.Planned {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []route.Planned
	for _, n := range slices.Sorted(maps.Keys(s.routes)) {
		out = append(out, route.Planned{Name: n, What: "route " + n, Tail: Tail, TailName: Kind})
	}
	return out
}

// Observe implements route.Source.
func (s *Source) Observe(_ context.Context, _ *corev1.Pod, knownRoutes []gate.Known, waiting bool) ([]gate.Observation, error) {
	var known []string
	for _, k := range knownRoutes {
		known = append(known, k.Name)
	}
	s.mu.Lock()
	block := s.block
	s.mu.Unlock()
	if block != nil {
		<-block
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.waiting, s.known = append(s.waiting, waiting), append(s.known, known)
	if s.err != nil {
		return nil, s.err
	}
	names := maps.Clone(s.routes)
	for _, k := range known {
		if _, ok := names[k]; !ok {
			names[k] = true
		}
	}
	var out []gate.Observation
	for _, n := range slices.Sorted(maps.Keys(names)) {
		o := gate.Observation{Kind: Kind, Name: n, Synced: true, State: "in", What: "listed", Tail: Tail, TailName: Kind,
			WeighTraffic: len(s.ports) > 0, Ports: s.ports, Senders: evidence.Senders{SeenAreAll: true},
			// The early close on (an opt-in of the server), so that a
			// test sees the evidence decide before the tail.
			EarlyClose: true}
		if names[n] {
			o.State, o.Out, o.What = "out", true, "dropped"
		}
		o.Err = s.obsErr
		out = append(out, o)
	}
	return out, nil
}

// Forget implements route.Forgetter.
func (s *Source) Forget(k route.PodKey) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.forgot = append(s.forgot, k)
}

// Drop implements route.Forgetter: as Forget (nothing else is kept).
func (s *Source) Drop(k route.PodKey) { s.Forget(k) }

// Set sets the routes (name → out).
func (s *Source) Set(routes map[string]bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.routes = routes
}

// Fail makes every observation fail with err (nil: succeed again).
func (s *Source) Fail(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.err = err
}

// ReadFailed gives every route the error err (a read that failed; nil:
// none).
func (s *Source) ReadFailed(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.obsErr = err
}

// WeighOn has the routes weigh traffic on ports.
func (s *Source) WeighOn(ports ...uint16) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ports = ports
}

// Block holds every Observe until the channel returned is closed.
func (s *Source) Block() chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.block = make(chan struct{})
	return s.block
}

// LastWaiting says whether the last observation was told the pod waits.
func (s *Source) LastWaiting() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.waiting[len(s.waiting)-1]
}

// Observed counts the observations made.
func (s *Source) Observed() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.waiting)
}

// LastKnown is the known routes the last observation was given.
func (s *Source) LastKnown() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.known[len(s.known)-1]
}

// Forgot lists the pods forgotten or dropped, in order.
func (s *Source) Forgot() []route.PodKey {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.forgot)
}

// Rig is a Tracker with a map for its pod cache and a scripted Source;
// its pod is "shop/web".
type Rig struct {
	*drain.Tracker
	Src *Source

	mu     sync.Mutex
	cached map[string]*corev1.Pod
}

// NewRig returns a synced tracker over one scripted route "a", in, whose
// options o may set (its Get is the rig's, its Sources the rig's Src when
// o has none); the consumers are o's.
func NewRig(o drain.Options) *Rig {
	r := &Rig{Src: NewSource(map[string]bool{"a": false}), cached: map[string]*corev1.Pod{}}
	if o.Sources == nil {
		o.Sources = []route.Source{r.Src}
	}
	o.Get = r.get
	if o.Linger == 0 {
		o.Linger = time.Minute
	}
	r.Tracker = drain.New(o)
	r.Tracker.Synced()
	return r
}

func (r *Rig) get(_ context.Context, ns, name string) (*corev1.Pod, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if p := r.cached[ns+"/"+name]; p != nil {
		return p.DeepCopy(), nil
	}
	return nil, apierrors.NewNotFound(corev1.Resource("pods"), name)
}

// Pod is the pod of UID uid, terminating (deleted now, with ten minutes
// to go) or not, with the address 10.0.0.5.
func Pod(uid string, terminating bool) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web", UID: types.UID(uid)}}
	p.Status.PodIP, p.Status.PodIPs = "10.0.0.5", []corev1.PodIP{{IP: "10.0.0.5"}}
	if terminating {
		p.DeletionTimestamp = &metav1.Time{Time: time.Now().Add(10 * time.Minute)}
	}
	return p
}

// Put stores the pod in the cache and delivers the informer's event.
func (r *Rig) Put(p *corev1.Pod) *corev1.Pod {
	r.mu.Lock()
	r.cached[p.Namespace+"/"+p.Name] = p
	r.mu.Unlock()
	r.PodChanged(p.DeepCopy())
	return p
}

// Remove takes the pod out of the cache, delivering the delete event when
// deliver is set.
func (r *Rig) Remove(deliver bool) {
	r.mu.Lock()
	p := r.cached["shop/web"]
	delete(r.cached, "shop/web")
	r.mu.Unlock()
	if deliver {
		r.PodDeleted(p)
	}
}

// Ask is the pod's agent asking, without a traffic summary.
func (r *Rig) Ask(t testing.TB, uid string) api.Verdict {
	t.Helper()
	v, err := r.Verdict(context.Background(), api.DrainRequest{Namespace: "shop", Pod: "web", UID: uid})
	if err != nil {
		t.Fatalf("Verdict: %v", err)
	}
	return v
}
