package ledger

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"draingate.dev/draingate/internal/drain"
	"draingate.dev/draingate/proving/testenv"
	"draingate.dev/draingate/proving/testutil"
)

func TestMain(m *testing.M) { testenv.Main(m) }

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

func at(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }

const tg, arn = "targetgroup", "arn:a"

// equal says two records hold the same.
func equal(a, b drain.Record) bool { return a.Covers(b) && b.Covers(a) }

// TestTwoLedgersAgree: two replicas' ledgers on the real API server note
// different observations of one pod at once; both end with the union (the
// first out wins), one Lease holds it, and dropping the pod deletes it.
func TestTwoLedgersAgree(t *testing.T) {
	c := testenv.Get(t)
	ns := c.Namespace(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	var ls []*Ledger[drain.Record]
	changed := make(chan string, 100)
	for range 2 {
		l, err := New[drain.Record](c.Client, ns, prometheus.NewRegistry(), log)
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Start(ctx, func(ns, name string) { changed <- ns + "/" + name }); err != nil {
			t.Fatal(err)
		}
		ls = append(ls, l)
	}
	uid := types.UID("0f7e2c1a-9b3d-4e5f-8a6b-7c8d9e0f1a2b")
	for i, out := range []time.Time{at(12), at(10)} {
		ls[i].Note(uid, drain.Record{Pod: "shop/web", Since: at(i), Routes: []drain.Route{{Kind: tg, Name: arn, Outs: []time.Time{out}, WasRoute: i == 0}}})
	}
	want := drain.Record{Pod: "shop/web", Since: at(0), Routes: []drain.Route{{Kind: tg, Name: arn, Outs: []time.Time{at(10), at(12)}, WasRoute: true}}}
	testutil.Eventually(t, ctx, "both ledgers holding the union", func() (bool, error) {
		return equal(ls[0].Record(uid), want) && equal(ls[1].Record(uid), want), nil
	})
	le, err := c.Client.CoordinationV1().Leases(ns).Get(ctx, namePrefix+string(uid), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if r := decode[drain.Record](le); !equal(r, want) || !r.Routes[0].Out().Equal(at(10)) {
		t.Errorf("the Lease holds %+v, want %+v (out at the first observation)", r, want)
	}
	select {
	case p := <-changed:
		if p != "shop/web" {
			t.Errorf("told of %q, want shop/web", p)
		}
	default:
		t.Error("no ledger told of the record's change")
	}
	testutil.Eventually(t, ctx, "the record listed once the Leases synced", func() (bool, error) {
		return ls[1].Pods()[uid] == "shop/web", nil
	})
	ls[1].Drop(uid)
	testutil.Eventually(t, ctx, "the Lease deleted once the pod is gone", func() (bool, error) {
		l, err := c.Client.CoordinationV1().Leases(ns).List(ctx, metav1.ListOptions{})
		return err == nil && len(l.Items) == 0, err
	})
}
