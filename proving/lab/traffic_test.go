package lab

import (
	"math"
	"strings"
	"testing"
	"time"

	vegeta "github.com/tsenart/vegeta/v12/lib"
)

// draw returns n arrival times of one client of l at rate (per second).
func draw(l Load, rate float64, n int, seed uint64) []time.Duration {
	a := newArrivals(l, rate, seed)
	out := make([]time.Duration, n)
	for i := range out {
		out[i] = a.next()
	}
	return out
}

// countsPer counts arrivals per window of w.
func countsPer(ts []time.Duration, w time.Duration) []float64 {
	n := int(ts[len(ts)-1]/w) + 1
	c := make([]float64, n)
	for _, t := range ts {
		c[int(t/w)]++
	}
	return c[:n-1] // the last window is cut short
}

func meanVar(xs []float64) (m, v float64) {
	for _, x := range xs {
		m += x
	}
	m /= float64(len(xs))
	for _, x := range xs {
		v += (x - m) * (x - m)
	}
	return m, v / float64(len(xs)-1)
}

// TestLoadShapes: every shape keeps the mean rate; constant is evenly
// spaced, poisson's counts per second have variance near their mean, onoff
// bursts (variance well above the mean, more so with Pareto pauses), and
// shift's low periods carry its factor of the high ones.
func TestLoadShapes(t *testing.T) {
	const rate, n = 20.0, 60000
	base := DefaultLoad()
	for _, tc := range []struct {
		name       string
		l          func(Load) Load
		minD, maxD float64 // dispersion: variance/mean of counts per second
		meanTol    float64
	}{
		{"constant", func(l Load) Load { l.Shape = Constant; return l }, 0, 0.05, 0.01},
		{"poisson", func(l Load) Load { l.Shape = Poisson; return l }, 0.8, 1.2, 0.03},
		{"shortconn", func(l Load) Load { l.Shape = ShortConn; return l }, 0.8, 1.2, 0.03},
		{"onoff exp", func(l Load) Load { l.Shape = OnOff; return l }, 5, math.Inf(1), 0.1},
		{"onoff pareto", func(l Load) Load { l.Shape, l.PauseDist = OnOff, "pareto"; return l }, 5, math.Inf(1), 0.2},
		{"shift", func(l Load) Load { l.Shape = Shift; return l }, 3, math.Inf(1), 0.05},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ts := draw(tc.l(base), rate, n, 7)
			got := float64(n) / ts[n-1].Seconds()
			if math.Abs(got-rate)/rate > tc.meanTol {
				t.Errorf("mean rate %.2f/s, want %.0f/s within %.0f%%", got, rate, 100*tc.meanTol)
			}
			m, v := meanVar(countsPer(ts, time.Second))
			if d := v / m; d < tc.minD || d > tc.maxD {
				t.Errorf("dispersion of counts per second %.2f, want in [%g, %g]", d, tc.minD, tc.maxD)
			}
			for i := 1; i < n; i++ {
				if ts[i] < ts[i-1] {
					t.Fatalf("arrival %d at %s before arrival %d at %s", i, ts[i], i-1, ts[i-1])
				}
			}
		})
	}
	// Shift: the low periods carry ShiftFactor of the high ones.
	l := base
	l.Shape = Shift
	var hi, lo float64
	for _, at := range draw(l, rate, n, 9) {
		if int64(at/l.ShiftPeriod)%2 == 0 {
			hi++
		} else {
			lo++
		}
	}
	if r := lo / hi; math.Abs(r-l.ShiftFactor) > 0.02 {
		t.Errorf("shift: low/high = %.3f, want %.2f", r, l.ShiftFactor)
	}
	// An onoff burst rate, when given, is the rate within bursts.
	l = base
	l.Shape, l.OnTime, l.PauseMean = OnOff, time.Second, 10*time.Second
	a := newArrivals(l, 1, 3)
	a.onRate = 50
	within := 0
	prev := a.next()
	for range 10000 {
		next := a.next()
		if next-prev < 500*time.Millisecond {
			within++
		}
		prev = next
	}
	if within < 9000 {
		t.Errorf("onoff at 50/s in bursts: %d of 10000 gaps under 0.5 s, want most", within)
	}
}

// TestLoadTargeter: the nodes' weights are their shares: exactly, in
// order, for the constant load; on average for the others.
func TestLoadTargeter(t *testing.T) {
	urls := []string{"a", "b", "c"}
	for _, shape := range []string{Constant, Poisson} {
		l := DefaultLoad()
		l.Shape, l.NodeWeights = shape, []float64{90, 8, 2}
		tr := l.targeter(urls, 1)
		got := map[string]int{}
		const n = 10000
		for range n {
			var tg vegeta.Target
			if err := tr(&tg); err != nil {
				t.Fatal(err)
			}
			got[tg.URL]++
		}
		tol := 0
		if shape != Constant {
			tol = 150
		}
		for i, u := range urls {
			want := int(l.NodeWeights[i]) * n / 100
			if d := got[u] - want; d < -tol || d > tol {
				t.Errorf("%s: node %s got %d of %d requests, want %d (±%d)", shape, u, got[u], n, want, tol)
			}
		}
	}
	// Equal weights, constant: round robin.
	tr := DefaultLoad().targeter(urls, 1)
	var seq []string
	for range 6 {
		var tg vegeta.Target
		tr(&tg)
		seq = append(seq, tg.URL)
	}
	if s := strings.Join(seq, ""); s != "abcabc" {
		t.Errorf("constant, equal weights: %s, want round robin abcabc", s)
	}
}

// TestLoadValidate: each mistake is a clear error.
func TestLoadValidate(t *testing.T) {
	sc := Scenarios["alb"]
	for _, tc := range []struct {
		change func(*Load)
		want   string
	}{
		{func(l *Load) { l.Shape = "bursty" }, `--load "bursty": want one of constant, poisson, onoff, shift, shortconn`},
		{func(l *Load) { l.Shape, l.PauseDist = OnOff, "gamma" }, `--onoff-pause "gamma": want exp or pareto`},
		{func(l *Load) { l.Shape, l.ShiftFactor = Shift, 2 }, "--shift-factor in (0, 1]"},
		{func(l *Load) { l.Clients = 0 }, "--clients 0: want 1 to 1000"},
		{func(l *Load) { l.NodeWeights = []float64{1, 2} }, "--lb-node-weights has 2 weights for 3 load balancer nodes"},
		{func(l *Load) { l.NodeWeights = []float64{0, 0, 0} }, "must not all be 0"},
		{func(l *Load) { l.NodeDelays = []time.Duration{0} }, "--lb-node-delays has 1 delays for 3"},
		{func(l *Load) { l.InClusterRPS = -1 }, "--incluster-rps must not be negative"},
	} {
		l := DefaultLoad()
		tc.change(&l)
		err := l.Validate(sc)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Validate() = %v, want it to say %q", err, tc.want)
		}
	}
	if err := DefaultLoad().Validate(sc); err != nil {
		t.Errorf("the default load: %v", err)
	}
}
