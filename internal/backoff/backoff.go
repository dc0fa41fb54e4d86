// Package backoff is the one retry schedule of draingate: after the n-th
// failure in a row, wait Min·2^(n-1), capped at Max, with the upper half
// jittered. Keeping half of each wait fixed means a throttled caller never
// comes straight back; the jittered half spreads callers apart.
//
// Stdlib only: the preStop agent uses it too.
package backoff

import (
	"context"
	"math/rand/v2"
	"time"
)

// Policy bounds the waits between attempts.
type Policy struct {
	Min, Max time.Duration
}

// Delay is the wait after the n-th consecutive failure (n >= 1), with the
// jitter taken from r in [0, 1): between d/2 and d where d = Min·2^(n-1)
// capped at Max. Pure, for tests.
func (p Policy) Delay(n int, r float64) time.Duration {
	hi := max(p.Max, p.Min)
	d := p.Min
	for i := 1; i < n && d < hi; i++ {
		d *= 2
	}
	d = min(d, hi)
	return d/2 + time.Duration(r*float64(d/2))
}

// Next is Delay with a random jitter.
func (p Policy) Next(n int) time.Duration { return p.Delay(n, rand.Float64()) }

// Retry calls f until it returns nil or ctx ends, waiting p.Next(n) after
// the n-th failure. It reports whether f succeeded.
func Retry(ctx context.Context, p Policy, f func() error) bool {
	for n := 1; ; n++ {
		if f() == nil {
			return true
		}
		t := time.NewTimer(p.Next(n))
		select {
		case <-ctx.Done():
			t.Stop()
			return false
		case <-t.C:
		}
	}
}
