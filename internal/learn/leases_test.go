package learn

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"draingate.dev/draingate/proving/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// TestLearnedOutlivesARestart: two replicas' books on the real API server
// each learn their own drains of one load balancer and sync; both end with
// the union, one Lease holds it, and a replica that starts afresh (a
// restart) reads all of it at its first sync. What one replica wrote is
// never lost to the other's later write.
func TestLearnedOutlivesARestart(t *testing.T) {
	c := testenv.Get(t)
	ns := c.Namespace(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	const key = "lb:arn:aws:elasticloadbalancing:eu-west-1:123456789012:loadbalancer/app/web/50dc6c495c0c9188"
	now := time.Now().Truncate(time.Second)
	var books []*Book
	var stores []*Leases
	for range 2 {
		b := NewBook()
		books, stores = append(books, b), append(stores, NewLeases(c.Client, ns, b, log))
	}
	books[0].Add(key, now.Add(-3*time.Second), 12*time.Second)
	books[0].Add(key, now.Add(-2*time.Second), 27*time.Second)
	books[1].Add(key, now.Add(-time.Second), 19*time.Second)
	// The second writes over the first's Lease: a write is a union.
	for _, s := range []*Leases{stores[0], stores[1], stores[0]} {
		if err := s.Sync(ctx); err != nil {
			t.Fatal(err)
		}
	}
	for i, b := range books {
		if l := b.Estimate(key); l.N != 3 || l.Bound != 27*time.Second {
			t.Errorf("replica %d: %+v, want 3 samples, the longest 27s", i, l)
		}
	}
	list, err := c.Client.CoordinationV1().Leases(ns).List(ctx, metav1.ListOptions{LabelSelector: labelKey + "=" + learnedLabelValue})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != 1 || list.Items[0].Name != LeaseName(key) || list.Items[0].Annotations[keyAnnotation] != key {
		t.Fatalf("Leases %+v, want one named %s for the key", list.Items, LeaseName(key))
	}
	restarted := NewBook()
	if err := NewLeases(c.Client, ns, restarted, log).Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if l := restarted.Estimate(key); l.N != 3 || l.Bound != 27*time.Second {
		t.Errorf("after a restart: %+v, want the 3 samples, the longest 27s", l)
	}
	if d := restarted.Dirty(); len(d) != 0 {
		t.Errorf("a restart that learnt nothing has keys to write: %v", d)
	}
}
