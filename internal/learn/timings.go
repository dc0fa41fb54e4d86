package learn

import (
	"cmp"
	"context"
	"hash/fnv"
	"log/slog"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"draingate.dev/draingate/internal/drain"
	"draingate.dev/draingate/internal/gate"
	"draingate.dev/draingate/internal/route"
)

// Options configure Timings. Zero values take the defaults beside them.
type Options struct {
	// Tails learns each load balancer's propagation from every drain's
	// traffic evidence, and lengthens the tails by it (Tail); Shorten also
	// lets a sure bound shorten them.
	Tails, Shorten bool
	// Lags learns how long after each pod's deletion its routes went out,
	// per load balancer, which sizes new pods' max-wait (AdmissionNeed).
	// Ceiling is how long after a deletion a gone pod's routes are
	// watched for it (default 10m).
	Lags    bool
	Ceiling time.Duration
	// Kube and Namespace are where the book is shared among replicas
	// (Leases); none without a namespace.
	Kube      kubernetes.Interface
	Namespace string
	// InCluster says whether an address is a pod's of the cluster (from
	// the cache): a gone pod whose address another pod holds teaches no
	// lag.
	InCluster func(netip.Addr) bool
	// Log receives what an operator should know (slog.Default when nil).
	Log *slog.Logger
	// Now is the clock (time.Now when nil).
	Now func() time.Time
}

// Timings is learning: it takes each drain's decision (a drain.Consumer)
// and records what it teaches in its Book, shares the book through Leases,
// gives the kinds their learnt tails (route.LearnedTails) and the webhook
// a new pod's need (AdmissionNeed), and watches the routes of pods
// released at their deadline until they went out. Make it with New.
type Timings struct {
	o     Options
	book  *Book
	store *Leases // nil without a namespace

	// learners are the kinds whose routes teach, by kind (Start).
	learners map[string]route.Learner
	sources  []route.Source

	mu     sync.Mutex
	closed bool
	pods   map[route.PodKey]*podTimes
	// gone are the pods the tracker is done with whose lags are still
	// to learn: their routes are watched (watchLocked); goneN counts them.
	gone  map[route.PodKey]*podTimes
	goneN atomic.Int32
}

// podTimes is what learning keeps of one pod.
type podTimes struct {
	key route.PodKey
	// pod is the pod as last observed (with the addresses last seen): a
	// gone pod's routes are observed with it.
	pod *corev1.Pod
	// deleted is when it was deleted (the earliest deletedAt seen).
	deleted time.Time
	// everAsked: its agent asked this replica.
	everAsked bool
	// routes are the gate's memory of its routes at the last decision.
	routes map[gate.RouteKey]gate.RouteMemory
	// released: its propagations were recorded (at its first release);
	// lagged are the routes whose lag was.
	released bool
	lagged   map[gate.RouteKey]bool
}

// New returns Timings with an empty book.
func New(o Options) *Timings {
	if o.Ceiling <= 0 {
		o.Ceiling = 10 * time.Minute
	}
	if o.Log == nil {
		o.Log = slog.Default()
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	t := &Timings{o: o, book: NewBook(), learners: map[string]route.Learner{},
		pods: map[route.PodKey]*podTimes{}, gone: map[route.PodKey]*podTimes{}}
	if o.Kube != nil && o.Namespace != "" {
		t.store = NewLeases(o.Kube, o.Namespace, t.book, o.Log)
	}
	return t
}

// Book is what was learnt.
func (t *Timings) Book() *Book { return t.book }

// syncEvery is how often a replica merges the learned Leases and writes
// what it learnt; sweepEvery how often gone pods' routes are observed
// again without a change.
const (
	syncEvery  = 10 * time.Second
	sweepEvery = 5 * time.Second
)

// Start takes the route sources (the kinds whose routes teach are those
// that implement route.Learner), syncs the book with its Leases once
// before the server serves (a restart starts from what was learnt), then
// keeps syncing and watching gone pods in the background until ctx ends.
func (t *Timings) Start(ctx context.Context, sources []route.Source) {
	t.use(sources)
	if t.store != nil {
		sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		if err := t.store.Sync(sctx); err != nil {
			t.o.Log.Warn("learned propagation: could not read or write its Leases at start; tails are lengthened by what this replica learns", "err", err)
		}
		cancel()
		go t.store.Run(ctx, syncEvery)
	}
	if t.o.Lags {
		go wait.UntilWithContext(ctx, func(context.Context) { t.sweep() }, sweepEvery)
	}
	go func() {
		<-ctx.Done()
		t.close()
	}()
}

// use takes the route sources: the kinds whose routes teach are those
// that implement route.Learner.
func (t *Timings) use(sources []route.Source) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.sources = sources
	for _, src := range sources {
		if l, ok := src.(route.Learner); ok {
			t.learners[src.Kind()] = l
		}
	}
}

// Watching is how many gone pods' routes are watched for their lag.
func (t *Timings) Watching() int { return int(t.goneN.Load()) }

// key is the key a route teaches under ("" when its kind teaches none).
func (t *Timings) key(k gate.RouteKey) string {
	if l := t.learners[k.Kind]; l != nil {
		return l.LearnKey(k.Name)
	}
	return ""
}

// Tail implements route.LearnedTails: the tail key's drains in the pod's
// namespace taught (Estimate.Tail). A pod of one drain in probeEvery keeps
// the configured tail when that is longer (so that nodes stopping later
// than the learnt tail are still seen), and so does a pod not created yet
// (pod.UID empty: the webhook sizing its max-wait, which must cover it).
func (t *Timings) Tail(key string, pod route.PodKey, configured time.Duration) (time.Duration, string) {
	tail, why := t.book.Estimate(propagationKey(key, pod.Namespace)).Tail(configured, t.o.Shorten)
	if tail < configured && (pod.UID == "" || probe(pod.UID)) {
		return configured, ""
	}
	return tail, why
}

// LateChance implements route.LearnedTails (Estimate.LateChance), for the
// pod's namespace's book.
func (t *Timings) LateChance(key string, pod route.PodKey, tail time.Duration) float64 {
	return t.book.Estimate(propagationKey(key, pod.Namespace)).LateChance(tail)
}

// propagationKey is the book's key of what key's drains in namespace
// taught: a pod controls what its agent reports, so one namespace's pods
// teach their own namespace's tails alone.
func propagationKey(key, namespace string) string { return key + " ns:" + namespace }

// probeEvery: one drain in this many keeps its configured tail when the
// learnt one is shorter (probe).
const probeEvery = 16

// probe says whether the pod with this UID is one that keeps its
// configured tail: a hash of the UID, the same on every replica.
func probe(uid string) bool {
	h := fnv.New32a()
	h.Write([]byte(uid))
	return (h.Sum32()>>16)%probeEvery == 0 // FNV's low bits mix least
}

// Decided implements drain.Consumer: what the step taught is recorded,
// once per route of a pod: the stops of a route the traffic evidence
// closed (Tails), the lag of a route seen out for the first time (Lags).
func (t *Timings) Decided(d *drain.Decision) {
	t.mu.Lock()
	defer t.mu.Unlock()
	p := t.pods[d.Key]
	if p == nil {
		p = &podTimes{key: d.Key, lagged: map[gate.RouteKey]bool{}}
		t.pods[d.Key] = p
	}
	p.pod, p.everAsked, p.routes = d.Pod, d.EverAsked, d.Next.Routes
	if del := deletedAt(d.Pod); !del.IsZero() && (p.deleted.IsZero() || del.Before(p.deleted)) {
		p.deleted = del
	}
	if t.o.Tails && d.Verdict.Released && !p.released {
		p.released = true
		t.propagationsLocked(p, d)
	}
	if t.o.Lags {
		t.lagsLocked(p)
	}
}

// maxSamplesPerRoute bounds what one drain's route teaches: its latest
// stops, the longest kept (a pod reports its own sources, up to
// api.MaxTrafficSources of them).
const maxSamplesPerRoute = 16

// propagationsLocked records what each out route of a released pod
// taught: per source its evidence weighed (evidence.Sample), how late
// after the route went out it stopped at the latest (Stop; a source still
// sending at the release, its release: a lower bound) and how late it
// was seen sending, under the route's key and the pod's namespace. What
// no honest agent reports is dropped: an arrival after the decision or
// after the pod's grace period ended.
func (t *Timings) propagationsLocked(p *podTimes, d *drain.Decision) {
	limit := d.At // the pod's grace period's end, if sooner
	if p.pod != nil && p.pod.DeletionTimestamp != nil && p.pod.DeletionTimestamp.Time.Before(limit) {
		limit = p.pod.DeletionTimestamp.Time
	}
	for k, m := range p.routes {
		if len(m.Samples) == 0 || m.OutSince.IsZero() {
			continue
		}
		key := t.key(k)
		if key == "" {
			continue
		}
		type taught struct {
			d, seen time.Duration
			src     uint16
		}
		var got []taught
		for _, s := range m.Samples {
			if s.Last.After(limit) || s.Stop.Before(m.OutSince) && !s.Sending {
				continue // forged, or quiet before the route went out
			}
			seen := max(s.Last.Sub(m.OutSince), 0)
			bound := max(s.Stop.Sub(m.OutSince), seen)
			if s.Sending {
				bound = max(d.At.Sub(m.OutSince), seen)
			}
			got = append(got, taught{bound, seen, SourceID(s.Addr.String())})
		}
		slices.SortFunc(got, func(a, b taught) int { return cmp.Compare(b.d, a.d) })
		pk := propagationKey(key, p.key.Namespace)
		before := t.book.Estimate(pk)
		drain := DrainID(p.key.UID)
		for _, g := range got[:min(len(got), maxSamplesPerRoute)] {
			t.book.AddSample(pk, Sample{At: d.At, D: g.d, Seen: g.seen, Drain: drain, Src: g.src})
			if g.seen > before.Seen && t.store != nil {
				// A node seen later than ever: the other replicas'
				// tails rise at their next read of the Leases, now.
				t.store.Soon()
			}
		}
	}
}

// Gone implements drain.Consumer: a pod whose lags are still to learn is
// watched on (see Keeps); any other is forgotten.
func (t *Timings) Gone(pod route.PodKey) {
	t.mu.Lock()
	defer t.mu.Unlock()
	p := t.pods[pod]
	delete(t.pods, pod)
	if p != nil && !t.closed && len(t.pendingLocked(p)) > 0 {
		t.gone[pod] = p
		t.goneN.Store(int32(len(t.gone)))
	}
}

// Keeps implements drain.Keeper: a kind whose routes teach keeps its work
// for a pod whose lags are still to learn.
func (t *Timings) Keeps(pod route.PodKey, kind string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	p := t.pods[pod]
	return p != nil && t.learners[kind] != nil && len(t.pendingLocked(p)) > 0
}

// close stops watching gone pods: their sources forget them.
func (t *Timings) close() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.closed = true
	for _, p := range t.gone {
		t.forgetLocked(p, false)
	}
	clear(t.gone)
	t.goneN.Store(0)
}
