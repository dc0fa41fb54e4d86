// Package ledger is the replicas' shared memory: for each terminating pod
// whose agent waits, a record in a Lease of draingate's own namespace,
// shared by every replica of the gate server and by the next one after a
// restart. What the record says is the drain's own business
// (drain.Record); the ledger only stores it, and needs of it that it
// merges (Record).
//
// What a replica notes is written in the background, coalesced per pod,
// and only when the Lease does not hold it already (Covers). Records only
// ever gain: a write is the Union of the Lease's record and the replica's,
// so writes in any order by any replica agree (a conflict re-reads and
// merges). When the pod is gone its Lease is deleted.
//
// Failing writes or reads never shorten a wait: a replica that cannot read
// the Lease decides from its own memory, which starts no earlier than the
// record would; one that cannot write leaves the others to their own,
// later, observations.
package ledger

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"

	"draingate.dev/draingate/internal/lease"
)

// The Leases: named after the pod's UID, labelled so that the informer
// sees only them, the record in one annotation.
const (
	namePrefix       = "draingate-pod-"
	labelKey         = "draingate.dev/ledger"
	labelValue       = "pod"
	recordAnnotation = "draingate.dev/record"
)

// Record is what a ledger stores per pod: a value that merges.
type Record[R any] interface {
	// Union is what both records say together: commutative,
	// associative and idempotent, so that writes in any order agree.
	Union(o R) R
	// Covers says whether the record already holds everything o says.
	Covers(o R) bool
	// PodName is the pod's "namespace/name", for people reading the
	// Lease and for the janitor.
	PodName() string
}

// Ledger keeps the pods' records. Make it with New; Start starts it.
type Ledger[R Record[R]] struct {
	cs     kubernetes.Interface
	ns     string
	log    *slog.Logger
	writes *prometheus.CounterVec
	inf    toolscache.SharedIndexInformer
	queue  workqueue.TypedRateLimitingInterface[types.UID]

	mu sync.Mutex
	// records are the Leases' records as the informer last saw them,
	// decoded once per change.
	records map[types.UID]R
	// pending is what this replica has to write per pod: additions to its
	// record, or its deletion.
	pending map[types.UID]pending[R]
	synced  bool
}

type pending[R any] struct {
	rec  R
	drop bool
}

// New returns a ledger keeping its Leases in namespace, its write counts
// registered on reg.
func New[R Record[R]](cs kubernetes.Interface, namespace string, reg prometheus.Registerer, log *slog.Logger) (*Ledger[R], error) {
	l := &Ledger[R]{cs: cs, ns: namespace, log: log, pending: map[types.UID]pending[R]{}, records: map[types.UID]R{},
		writes: newWrites(),
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.NewTypedItemExponentialFailureRateLimiter[types.UID](200*time.Millisecond, 30*time.Second),
			workqueue.TypedRateLimitingQueueConfig[types.UID]{Name: "ledger"}),
	}
	if err := reg.Register(l.writes); err != nil {
		return nil, err
	}
	factory := informers.NewSharedInformerFactoryWithOptions(cs, 0, informers.WithNamespace(namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = labelKey + "=" + labelValue }))
	l.inf = factory.Coordination().V1().Leases().Informer()
	if err := l.inf.SetTransform(slim); err != nil {
		return nil, err
	}
	return l, nil
}

// newWrites is draingate_ledger_writes_total.
func newWrites() *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "draingate_ledger_writes_total",
		Help: "Writes of the Leases that share each waiting pod's route memory among replicas, by operation (create, update, delete) and result (ok, conflict, error). Errors only make waits longer: each replica then decides from its own observations.",
	}, []string{"op", "result"})
}

// Describe sends the descriptions of the metrics New registers.
func Describe(ch chan<- *prometheus.Desc) { newWrites().Describe(ch) }

// Namespace is where the Leases are.
func (l *Ledger[R]) Namespace() string { return l.ns }

// slim keeps a Lease's identity, labels and the record.
func slim(obj any) (any, error) {
	le, ok := obj.(*coordinationv1.Lease)
	if !ok {
		return obj, nil
	}
	return &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: le.Name, Namespace: le.Namespace, UID: le.UID,
		ResourceVersion: le.ResourceVersion, Labels: le.Labels,
		Annotations: map[string]string{recordAnnotation: le.Annotations[recordAnnotation]}}}, nil
}

// Start watches the Leases and writes the records until ctx ends. changed
// is told of a pod ("namespace", "name") whose record changed.
func (l *Ledger[R]) Start(ctx context.Context, changed func(namespace, name string)) error {
	seen := func(obj any) {
		le, ok := obj.(*coordinationv1.Lease)
		if !ok {
			return
		}
		uid, isPod := strings.CutPrefix(le.Name, namePrefix)
		if !isPod {
			return
		}
		r := decode[R](le)
		l.mu.Lock()
		l.records[types.UID(uid)] = r
		l.mu.Unlock()
		if ns, name, ok := strings.Cut(r.PodName(), "/"); ok {
			changed(ns, name)
		}
	}
	gone := func(obj any) {
		if key, err := toolscache.DeletionHandlingMetaNamespaceKeyFunc(obj); err == nil {
			_, name, _ := strings.Cut(key, "/")
			l.mu.Lock()
			delete(l.records, types.UID(strings.TrimPrefix(name, namePrefix)))
			l.mu.Unlock()
		}
	}
	if _, err := l.inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc: seen, UpdateFunc: func(_, n any) { seen(n) }, DeleteFunc: gone,
	}); err != nil {
		return err
	}
	go l.inf.Run(ctx.Done())
	go func() {
		if toolscache.WaitForCacheSync(ctx.Done(), l.inf.HasSynced) {
			l.mu.Lock()
			l.synced = true
			l.mu.Unlock()
			l.log.Info("caches synced: route memory Leases; replicas share when each route went out", "namespace", l.ns)
		}
	}()
	go func() {
		<-ctx.Done()
		l.queue.ShutDown()
	}()
	go func() {
		for l.next(ctx) {
		}
	}()
	return nil
}

// Record is what is known of the pod: its Lease's record with what this
// replica has yet to write.
func (l *Ledger[R]) Record(uid types.UID) R {
	stored, _ := l.stored(uid)
	l.mu.Lock()
	defer l.mu.Unlock()
	if p, ok := l.pending[uid]; ok && !p.drop {
		return stored.Union(p.rec)
	}
	return stored
}

// Note adds r to the pod's record: written in the background, unless the
// Lease holds it already.
func (l *Ledger[R]) Note(uid types.UID, r R) {
	if stored, _ := l.stored(uid); stored.Covers(r) {
		l.mu.Lock()
		_, busy := l.pending[uid]
		l.mu.Unlock()
		if !busy {
			return
		}
	}
	l.mu.Lock()
	p := l.pending[uid]
	p.rec, p.drop = p.rec.Union(r), false
	l.pending[uid] = p
	l.mu.Unlock()
	l.queue.Add(uid)
}

// Drop deletes the pod's record, if it has one: the pod is gone.
func (l *Ledger[R]) Drop(uid types.UID) {
	_, stored := l.stored(uid)
	l.mu.Lock()
	_, busy := l.pending[uid]
	if stored || busy {
		l.pending[uid] = pending[R]{drop: true}
	}
	l.mu.Unlock()
	if stored || busy {
		l.queue.Add(uid)
	}
}

// Pods lists the pod ("namespace/name") of every stored record by its UID,
// for the janitor to drop those whose pod is gone.
func (l *Ledger[R]) Pods() map[types.UID]string {
	out := map[types.UID]string{}
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.synced {
		return out
	}
	for uid, r := range l.records {
		out[uid] = r.PodName()
	}
	return out
}

// stored is the record in the pod's Lease as the informer last saw it, and
// whether there is one.
func (l *Ledger[R]) stored(uid types.UID) (R, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	r, ok := l.records[uid]
	return r, ok
}

// next writes one pod's pending record; false once the queue shuts down.
func (l *Ledger[R]) next(ctx context.Context) bool {
	uid, quit := l.queue.Get()
	if quit {
		return false
	}
	defer l.queue.Done(uid)
	l.mu.Lock()
	p, ok := l.pending[uid]
	l.mu.Unlock()
	if !ok {
		return true
	}
	written, err := l.write(ctx, uid, p)
	if err != nil {
		if ctx.Err() == nil {
			l.log.Warn("writing a pod's route memory failed; retrying (until then other replicas decide from their own observations)",
				"pod", p.rec.PodName(), "uid", uid, "err", err)
			l.queue.AddRateLimited(uid)
		}
		return true
	}
	l.queue.Forget(uid)
	l.mu.Lock()
	defer l.mu.Unlock()
	// What was noted while writing may be new.
	if now, ok := l.pending[uid]; ok && (now.drop == p.drop && (p.drop || written.Covers(now.rec))) {
		delete(l.pending, uid)
	} else if ok {
		l.queue.Add(uid)
	}
	return true
}

// write stores p for the pod: the union of its Lease's record and p.rec,
// or the Lease's deletion. It re-reads and retries on a conflict.
func (l *Ledger[R]) write(ctx context.Context, uid types.UID, p pending[R]) (R, error) {
	var zero R
	name := namePrefix + string(uid)
	leases := l.cs.CoordinationV1().Leases(l.ns)
	if p.drop {
		err := leases.Delete(ctx, name, metav1.DeleteOptions{})
		if apierrors.IsNotFound(err) {
			err = nil
		}
		l.count("delete", err)
		return zero, err
	}
	var cur *coordinationv1.Lease
	if obj, ok, _ := l.inf.GetStore().GetByKey(l.ns + "/" + name); ok {
		cur = obj.(*coordinationv1.Lease)
	}
	written, err := lease.Write(ctx, leases, name, cur, func(cur *coordinationv1.Lease) (*coordinationv1.Lease, error) {
		if cur == nil {
			le := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: l.ns,
				Labels: map[string]string{labelKey: labelValue, "app.kubernetes.io/managed-by": "draingate"}}}
			return le, encode(le, zero.Union(p.rec))
		}
		stored := decode[R](cur)
		if stored.Covers(p.rec) {
			return nil, nil
		}
		le := cur.DeepCopy()
		return le, encode(le, stored.Union(p.rec))
	}, l.count)
	if err != nil || written == nil {
		return zero, err
	}
	return decode[R](written), nil
}

func (l *Ledger[R]) count(op string, err error) {
	result := "ok"
	switch {
	case apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err):
		result = "conflict"
	case err != nil:
		result = "error"
	}
	l.writes.WithLabelValues(op, result).Inc()
}

// decode reads a Lease's record; an unreadable one counts as empty (its
// next write replaces it).
func decode[R any](le *coordinationv1.Lease) R {
	var r R
	if err := json.Unmarshal([]byte(le.Annotations[recordAnnotation]), &r); err != nil {
		var zero R
		return zero
	}
	return r
}

func encode[R any](le *coordinationv1.Lease, r R) error {
	b, err := json.Marshal(r)
	if err != nil {
		return fmt.Errorf("encode the route memory: %w", err)
	}
	if le.Annotations == nil {
		le.Annotations = map[string]string{}
	}
	le.Annotations[recordAnnotation] = string(b)
	return nil
}
