package lab

import (
	"math/rand/v2"
	"sync/atomic"
	"testing"

	vegeta "github.com/tsenart/vegeta/v12/lib"
)

// TestLoadStatuses: the consistency check's note lists the load
// generator's answers by status, transport errors as 0, and at most three
// of its distinct errors.
func TestLoadStatuses(t *testing.T) {
	l := &load{}
	for _, r := range []vegeta.Result{{Code: 200}, {Code: 502}, {Code: 200}, {Error: "e1"}, {Error: "e2"}, {Error: "e3"}, {Error: "e4"}} {
		l.metrics.Add(&r)
	}
	l.metrics.Close()
	if got, want := l.statuses(), "0=4 200=2 502=1 errors: e1; e2; e3; 1 more"; got != want {
		t.Errorf("statuses() = %q, want %q", got, want)
	}
}

// TestNodeJoins: a node not in the load balancer (Scenario.LBScaleOut's,
// before it joined) gets no request; once it joined, its share, for the
// constant load's smooth round robin and the others' random pick alike.
func TestNodeJoins(t *testing.T) {
	urls := []string{"a", "b", "c"}
	for _, shape := range []string{Constant, Poisson} {
		var joined atomic.Bool
		spec := DefaultLoad()
		spec.Shape = shape
		spec.active = func(i int) bool { return i != 2 || joined.Load() }
		tg := spec.targeter(urls, 5)
		count := func(n int) map[string]int {
			got := map[string]int{}
			for range n {
				var target vegeta.Target
				if err := tg(&target); err != nil {
					t.Fatal(err)
				}
				got[target.URL]++
			}
			return got
		}
		if got := count(300); got["c"] != 0 || got["a"] < 100 || got["b"] < 100 {
			t.Errorf("%s before the join: %v, want a and b only", shape, got)
		}
		joined.Store(true)
		if got := count(300); got["c"] < 60 {
			t.Errorf("%s after the join: %v, want c to get its share", shape, got)
		}
		pick := spec.nodePicker(urls, rand.New(rand.NewPCG(1, 2)))
		joined.Store(false)
		for range 100 {
			if u := pick(); u == "c" {
				t.Fatalf("%s streams: a stream went to the node not joined", shape)
			}
		}
	}
}
