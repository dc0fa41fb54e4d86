package learn

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"draingate.dev/draingate/internal/lease"
)

// What the cluster's drains taught is kept in Leases of draingate's
// namespace: one per key (a load balancer), labelled apart from the pods'
// records (internal/ledger), the key and its summary in annotations. Every
// replica merges every Lease into its book, and writes the union of a
// Lease's summary and its own, so that a restart or a second replica
// starts from all of it.
const (
	labelKey          = "draingate.dev/ledger"
	learnedPrefix     = "draingate-learned-"
	learnedLabelValue = "learned"
	keyAnnotation     = "draingate.dev/learned-key"
	learnedAnnotation = "draingate.dev/propagation"
)

// Leases keeps a Book in Leases of one namespace. Make it with NewLeases.
type Leases struct {
	cs   kubernetes.Interface
	ns   string
	book *Book
	log  *slog.Logger
	now  func() time.Time
	soon chan struct{} // Soon's: sync before the next interval
}

// NewLeases returns a store for book in namespace.
func NewLeases(cs kubernetes.Interface, namespace string, book *Book, log *slog.Logger) *Leases {
	return &Leases{cs: cs, ns: namespace, book: book, log: log, now: time.Now, soon: make(chan struct{}, 1)}
}

// Soon has Run sync now rather than at its next interval: what was
// learnt should reach the other replicas at once (a node seen sending
// later than any before raises every replica's tail).
func (l *Leases) Soon() {
	select {
	case l.soon <- struct{}{}:
	default:
	}
}

// Run syncs every interval until ctx ends, then once more (what was learnt
// last is written before the replica goes).
func (l *Leases) Run(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			fctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			l.logErr(l.Sync(fctx))
			return
		case <-t.C:
			l.logErr(l.Sync(ctx))
		case <-l.soon:
			l.logErr(l.Sync(ctx))
		}
	}
}

func (l *Leases) logErr(err error) {
	if err != nil {
		l.log.Warn("learned propagation: not synced with its Leases (tails are lengthened by what this replica knows)", "namespace", l.ns, "err", err)
	}
}

// Sync merges every Lease into the book, then writes each key the book
// added samples to since the last sync. A key whose write fails is written
// at the next sync.
func (l *Leases) Sync(ctx context.Context) error {
	list, err := l.cs.CoordinationV1().Leases(l.ns).List(ctx, metav1.ListOptions{LabelSelector: labelKey + "=" + learnedLabelValue})
	if err != nil {
		return fmt.Errorf("list the learned Leases: %w", err)
	}
	stored := map[string]*coordinationv1.Lease{}
	var errs []error
	for i := range list.Items {
		le := &list.Items[i]
		key := le.Annotations[keyAnnotation]
		s, err := Decode(le.Annotations[learnedAnnotation])
		if err != nil || key == "" {
			errs = append(errs, fmt.Errorf("Lease %s: %v (rewritten at its key's next sample)", le.Name, err))
			continue
		}
		l.book.Merge(key, s)
		stored[key] = le
	}
	for _, key := range l.book.Dirty() {
		if err := l.write(ctx, key, stored[key]); err != nil {
			l.book.Touch(key)
			errs = append(errs, fmt.Errorf("write %s: %w", key, err))
		}
	}
	return errors.Join(errs...)
}

// LeaseName is the Lease that keeps key.
func LeaseName(key string) string {
	h := fnv.New64a()
	h.Write([]byte(key))
	return fmt.Sprintf("%s%016x", learnedPrefix, h.Sum64())
}

// write stores the union of the Lease's summary of key and the book's,
// re-reading on a conflict.
func (l *Leases) write(ctx context.Context, key string, cur *coordinationv1.Lease) error {
	name := LeaseName(key)
	written, err := lease.Write(ctx, l.cs.CoordinationV1().Leases(l.ns), name, cur, func(cur *coordinationv1.Lease) (*coordinationv1.Lease, error) {
		mine := l.book.Get(key)
		if cur == nil {
			return &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: l.ns,
				Labels:      map[string]string{labelKey: learnedLabelValue, "app.kubernetes.io/managed-by": "draingate"},
				Annotations: map[string]string{keyAnnotation: key, learnedAnnotation: mine.Encode()}}}, nil
		}
		union, _ := Decode(cur.Annotations[learnedAnnotation]) // unreadable: replaced
		union.Merge(mine, l.now())
		le := cur.DeepCopy()
		if le.Annotations == nil {
			le.Annotations = map[string]string{}
		}
		le.Annotations[keyAnnotation], le.Annotations[learnedAnnotation] = key, union.Encode()
		return le, nil
	}, nil)
	if err == nil && written != nil {
		// What other replicas wrote comes back with the union.
		if s, derr := Decode(written.Annotations[learnedAnnotation]); derr == nil {
			l.book.Merge(key, s)
		}
	}
	return err
}
