package learn

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

var t0 = time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)

func summaryOf(ds ...time.Duration) Summary {
	var s Summary
	for i, d := range ds {
		s.Add(t0.Add(time.Duration(i)*time.Second), d)
	}
	return s
}

// Upper covers the true quantile as often as it promises: over many
// summaries of exponential durations, the bound of the 0.95-quantile at
// 95 % is at or above the true one in at least 95 % of them (within the
// simulation's own error), and not always (it is a bound, not the maximum).
func TestUpperCoversTheQuantile(t *testing.T) {
	const q, alpha, trials, n = 0.95, 0.05, 2000, 200
	mean := 4 * time.Second
	truth := time.Duration(-math.Log(1-q) * float64(mean))
	rng := rand.New(rand.NewPCG(1, 2))
	covered := 0
	for range trials {
		var s Summary
		for i := range n {
			s.Add(t0.Add(time.Duration(i)*time.Second), time.Duration(rng.ExpFloat64()*float64(mean)))
		}
		d, ok := s.Upper(q, alpha)
		if !ok {
			t.Fatalf("%d samples: no bound of the %g-quantile", n, q)
		}
		if d >= truth {
			covered++
		}
	}
	rate := float64(covered) / trials
	// The binomial's own spread over 2,000 trials is about 0.5 %.
	if rate < 1-alpha-0.015 || rate == 1 {
		t.Errorf("the bound covered the true quantile in %.1f %% of %d summaries; want at least %.0f %% (and not always)", 100*rate, trials, 100*(1-alpha))
	}
}

// Few samples give no bound: nothing sure below the longest one; the
// longest one is still known (it may lengthen a wait).
func TestUpperNeedsEnoughSamples(t *testing.T) {
	s := summaryOf(time.Second, 2*time.Second, 3*time.Second)
	if d, ok := s.Upper(0.99, 0.05); ok {
		t.Errorf("3 samples: bound %s of the 0.99-quantile; want none", d)
	}
	if m, ok := s.Max(); !ok || m != 3*time.Second {
		t.Errorf("Max = %s, %v; want 3s", m, ok)
	}
	// 299 samples is the least for the 0.99-quantile at 95 %: the bound is
	// then the largest.
	var big Summary
	for i := range 299 {
		big.Add(t0.Add(time.Duration(i)*time.Second), time.Duration(i)*time.Millisecond)
	}
	if d, ok := big.Upper(0.99, 0.05); !ok || d != 298*time.Millisecond {
		t.Errorf("299 samples: %s, %v; want the largest, 298ms", d, ok)
	}
}

// The summary stays bounded: old samples go after MaxAge, the oldest
// beyond MaxSamples.
func TestPrune(t *testing.T) {
	var s Summary
	s.Add(t0, time.Second)
	s.Add(t0.Add(MaxAge+time.Minute), 2*time.Second)
	if len(s.Samples) != 1 || s.Samples[0].D != 2*time.Second {
		t.Errorf("after MaxAge: %v; want only the new sample", s.Samples)
	}
	for i := range MaxSamples + 10 {
		s.Add(t0.Add(MaxAge+time.Duration(i+2)*time.Minute), time.Duration(i)*time.Millisecond)
	}
	if len(s.Samples) != MaxSamples || s.Samples[0].D != 10*time.Millisecond {
		t.Errorf("%d samples, the oldest %s; want %d, the oldest 10 dropped", len(s.Samples), s.Samples[0].D, MaxSamples)
	}
}

// Encode and Decode round-trip (to the second and the millisecond), and
// Merge joins two replicas' summaries without counting a sample twice.
func TestEncodeAndMerge(t *testing.T) {
	a := summaryOf(1500*time.Millisecond, 20*time.Second, 0)
	got, err := Decode(a.Encode())
	if err != nil || len(got.Samples) != 3 {
		t.Fatalf("Decode(Encode) = %v, %v", got, err)
	}
	for i, x := range got.Samples {
		if !x.At.Equal(a.Samples[i].At) || x.D != a.Samples[i].D {
			t.Errorf("sample %d: %v; want %v", i, x, a.Samples[i])
		}
	}
	b := summaryOf(1500*time.Millisecond, 20*time.Second, 0, 7*time.Second) // a's three and one more
	merged := got
	merged.Merge(b, t0.Add(time.Minute))
	if len(merged.Samples) != 4 {
		t.Errorf("merged %d samples; want 4 (3 shared, 1 new)", len(merged.Samples))
	}
	if _, err := Decode("AgAB"); err == nil {
		t.Error("a newer format decoded; want an error")
	}
	if s, err := Decode(""); err != nil || len(s.Samples) != 0 {
		t.Errorf(`Decode("") = %v, %v; want empty`, s, err)
	}
}

// A learned tail never shortens the configured one by default: with few
// samples the longest stands for the quantile and only lengthens; with
// enough, the sure bound shortens it only when the user opted in.
func TestLearnedTail(t *testing.T) {
	const tail = 20 * time.Second
	b := NewBook()
	b.now = func() time.Time { return t0.Add(time.Hour) }
	if got, why := b.Estimate("lb").Tail(tail, true); got != tail || why != "" {
		t.Errorf("nothing learnt: %s (%q), want the configured %s", got, why, tail)
	}
	for i, d := range []time.Duration{3 * time.Second, 27 * time.Second, 5 * time.Second} {
		b.Add("lb", t0.Add(time.Duration(i)*time.Second), d)
	}
	l := b.Estimate("lb")
	if l.Sure || l.N != 3 || l.Bound != 27*time.Second {
		t.Fatalf("3 samples: %+v, want the longest (27s), not sure", l)
	}
	// Generous (a max-wait): the longest plus its spread above the median
	// while few; a tail takes the longest alone.
	if g, why := l.Generous("lags"); g != 49*time.Second || !strings.Contains(why, "plus its 22s above their median") {
		t.Errorf("generous with 3, 5, 27s: %s (%q), want 27s + 22s", g, why)
	}
	if got, why := l.Tail(tail, false); got != 27*time.Second || why == "" {
		t.Errorf("a longer propagation learnt: tail %s (%q), want 27s and why", got, why)
	}
	short := NewBook()
	short.now = b.now
	for i := range 10 {
		short.Add("lb", t0.Add(time.Duration(i)*time.Second), 2*time.Second)
	}
	if got, _ := short.Estimate("lb").Tail(tail, true); got != tail {
		t.Errorf("10 short samples, opted in: tail %s, want the configured %s (too few to be sure)", got, tail)
	}
	for i := range 400 {
		short.Add("lb", t0.Add(time.Duration(10+i)*time.Second), time.Duration(1+i%3)*time.Second)
	}
	sure := short.Estimate("lb")
	if !sure.Sure || sure.Bound > 3*time.Second {
		t.Fatalf("410 samples of 1-3s: %+v, want a sure bound of at most 3s", sure)
	}
	if got, _ := sure.Tail(tail, false); got != tail {
		t.Errorf("sure and short, not opted in: tail %s, want the configured %s", got, tail)
	}
	if got, why := sure.Tail(tail, true); got != sure.Bound || why == "" {
		t.Errorf("sure and short, opted in: tail %s (%q), want the bound %s", got, why, sure.Bound)
	}
	if d := short.Dirty(); len(d) != 1 || d[0] != "lb" || len(short.Dirty()) != 0 {
		t.Errorf("dirty keys: %v then cleared", d)
	}
}
