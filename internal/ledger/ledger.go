// Package ledger keeps, for each terminating pod whose agent waits, what
// the gate remembers of its routes (gate.Memory) in a Lease of draingate's
// own namespace, shared by every replica of the gate server and by the
// next one after a restart: the first replica to see a route go out sets
// when its tail started for all of them, and a second replica or a
// restart never adds a tail of its own.
//
// Each replica keeps its own memory and steps the gate with it, merged
// with the pod's Record (Record.Merge) before each step; what a step adds
// (Of) is written in the background, coalesced per pod, and only when the
// Lease does not hold it already (Record.Covers). Records only ever gain:
// a write is the Union of the Lease's record and the replica's, so writes
// in any order by any replica agree (a conflict re-reads and merges).
// When the pod is gone its Lease is deleted.
//
// Failing writes or reads never shorten a wait: a replica that cannot read
// the Lease decides from its own memory, which starts no earlier than the
// record would; one that cannot write leaves the others to their own,
// later, observations.
package ledger

import (
	"context"
	"encoding/json"
	"errors"
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
)

// The Leases: named after the pod's UID, labelled so that the informer
// sees only them, the record in one annotation.
const (
	namePrefix       = "draingate-pod-"
	labelKey         = "draingate.dev/ledger"
	labelValue       = "pod"
	recordAnnotation = "draingate.dev/record"
)

// Ledger keeps the pods' records. Make it with New; Start starts it.
type Ledger struct {
	cs     kubernetes.Interface
	ns     string
	log    *slog.Logger
	writes *prometheus.CounterVec
	inf    toolscache.SharedIndexInformer
	queue  workqueue.TypedRateLimitingInterface[types.UID]

	mu sync.Mutex
	// records are the Leases' records as the informer last saw them,
	// decoded once per change.
	records map[types.UID]Record
	// pending is what this replica has to write per pod: additions to its
	// record, or its deletion.
	pending map[types.UID]pending
	synced  bool
}

type pending struct {
	rec  Record
	drop bool
}

// New returns a ledger keeping its Leases in namespace, its write counts
// registered on reg.
func New(cs kubernetes.Interface, namespace string, reg prometheus.Registerer, log *slog.Logger) (*Ledger, error) {
	l := &Ledger{cs: cs, ns: namespace, log: log, pending: map[types.UID]pending{}, records: map[types.UID]Record{},
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
func (l *Ledger) Namespace() string { return l.ns }

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
func (l *Ledger) Start(ctx context.Context, changed func(namespace, name string)) error {
	seen := func(obj any) {
		le, ok := obj.(*coordinationv1.Lease)
		if !ok {
			return
		}
		uid, isPod := strings.CutPrefix(le.Name, namePrefix)
		if !isPod {
			return
		}
		r := decode(le)
		l.mu.Lock()
		l.records[types.UID(uid)] = r
		l.mu.Unlock()
		if ns, name, ok := strings.Cut(r.Pod, "/"); ok {
			changed(ns, name)
		}
	}
	gone := func(obj any) {
		if t, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
			obj = t.Obj
		}
		if le, ok := obj.(*coordinationv1.Lease); ok {
			l.mu.Lock()
			delete(l.records, types.UID(strings.TrimPrefix(le.Name, namePrefix)))
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
func (l *Ledger) Record(uid types.UID) Record {
	stored, _ := l.stored(uid)
	l.mu.Lock()
	defer l.mu.Unlock()
	if p, ok := l.pending[uid]; ok && !p.drop {
		return Union(stored, p.rec)
	}
	return stored
}

// Note adds r to the pod's record: written in the background, unless the
// Lease holds it already.
func (l *Ledger) Note(uid types.UID, r Record) {
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
	p.rec, p.drop = Union(p.rec, r), false
	l.pending[uid] = p
	l.mu.Unlock()
	l.queue.Add(uid)
}

// Drop deletes the pod's record, if it has one: the pod is gone.
func (l *Ledger) Drop(uid types.UID) {
	_, stored := l.stored(uid)
	l.mu.Lock()
	_, busy := l.pending[uid]
	if stored || busy {
		l.pending[uid] = pending{drop: true}
	}
	l.mu.Unlock()
	if stored || busy {
		l.queue.Add(uid)
	}
}

// Pods lists the pod ("namespace/name") of every stored record by its UID,
// for the janitor to drop those whose pod is gone.
func (l *Ledger) Pods() map[types.UID]string {
	out := map[types.UID]string{}
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.synced {
		return out
	}
	for uid, r := range l.records {
		out[uid] = r.Pod
	}
	return out
}

// stored is the record in the pod's Lease as the informer last saw it, and
// whether there is one.
func (l *Ledger) stored(uid types.UID) (Record, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	r, ok := l.records[uid]
	return r, ok
}

// next writes one pod's pending record; false once the queue shuts down.
func (l *Ledger) next(ctx context.Context) bool {
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
				"pod", p.rec.Pod, "uid", uid, "err", err)
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
func (l *Ledger) write(ctx context.Context, uid types.UID, p pending) (Record, error) {
	name := namePrefix + string(uid)
	leases := l.cs.CoordinationV1().Leases(l.ns)
	if p.drop {
		err := leases.Delete(ctx, name, metav1.DeleteOptions{})
		if apierrors.IsNotFound(err) {
			err = nil
		}
		l.count("delete", err)
		return Record{}, err
	}
	var cur *coordinationv1.Lease
	if obj, ok, _ := l.inf.GetStore().GetByKey(l.ns + "/" + name); ok {
		cur = obj.(*coordinationv1.Lease)
	}
	for range 5 {
		if cur == nil {
			rec := Union(Record{}, p.rec)
			le := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: l.ns,
				Labels: map[string]string{labelKey: labelValue, "app.kubernetes.io/managed-by": "draingate"}}}
			if err := encode(le, rec); err != nil {
				return Record{}, err
			}
			_, err := leases.Create(ctx, le, metav1.CreateOptions{})
			l.count("create", err)
			if !apierrors.IsAlreadyExists(err) {
				return rec, err
			}
		} else {
			stored := decode(cur)
			if stored.Covers(p.rec) {
				return stored, nil
			}
			rec := Union(stored, p.rec)
			le := cur.DeepCopy()
			if err := encode(le, rec); err != nil {
				return Record{}, err
			}
			_, err := leases.Update(ctx, le, metav1.UpdateOptions{})
			l.count("update", err)
			if !apierrors.IsConflict(err) && !apierrors.IsNotFound(err) {
				return rec, err
			}
		}
		// Another replica wrote (or deleted) first: merge with what is
		// there now.
		live, err := leases.Get(ctx, name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			cur = nil
		case err != nil:
			return Record{}, err
		default:
			cur = live
		}
	}
	return Record{}, errors.New("the Lease kept changing under five writes")
}

func (l *Ledger) count(op string, err error) {
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
func decode(le *coordinationv1.Lease) Record {
	var r Record
	if err := json.Unmarshal([]byte(le.Annotations[recordAnnotation]), &r); err != nil {
		return Record{}
	}
	return r
}

func encode(le *coordinationv1.Lease, r Record) error {
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
