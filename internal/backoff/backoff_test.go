package backoff

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"
)

func TestDelay(t *testing.T) {
	p := Policy{Min: time.Second, Max: 20 * time.Second}
	for _, c := range []struct {
		n    int
		r    float64
		want time.Duration
	}{
		{1, 0, 500 * time.Millisecond},
		{1, 0.5, 750 * time.Millisecond},
		{2, 0, time.Second},
		{3, 0.5, 3 * time.Second},
		{5, 0, 8 * time.Second},
		{6, 0, 10 * time.Second}, // 32 s capped at 20 s
		{100, 0, 10 * time.Second},
	} {
		got := p.Delay(c.n, c.r).Round(time.Microsecond)
		if got != c.want {
			t.Errorf("Delay(%d, %v) = %v, want %v", c.n, c.r, got, c.want)
		}
	}
	if got := (Policy{Min: 5 * time.Second, Max: time.Second}).Delay(3, 0); got != 2500*time.Millisecond {
		t.Errorf("Max below Min: Delay = %v, want Min/2", got)
	}
}

func TestRetry(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := Policy{Min: time.Second, Max: 4 * time.Second}
		var calls []time.Duration
		start := time.Now()
		ok := Retry(t.Context(), p, func() error {
			calls = append(calls, time.Since(start))
			if len(calls) < 4 {
				return errors.New("not yet")
			}
			return nil
		})
		if !ok || len(calls) != 4 {
			t.Fatalf("Retry = %v after %d calls, want true after 4", ok, len(calls))
		}
		// Each wait lies in [d/2, d] for d = 1 s, 2 s, 4 s.
		for i, d := range []time.Duration{time.Second, 2 * time.Second, 4 * time.Second} {
			gap := calls[i+1] - calls[i]
			if gap < d/2 || gap > d {
				t.Errorf("wait %d = %v, want in [%v, %v]", i+1, gap, d/2, d)
			}
		}
	})
}

func TestRetryStopsWithContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		n := 0
		done := make(chan bool)
		go func() {
			done <- Retry(ctx, Policy{Min: time.Hour, Max: time.Hour}, func() error { n++; return errors.New("no") })
		}()
		synctest.Wait()
		cancel()
		if <-done || n != 1 {
			t.Fatalf("Retry after cancel: ok or %d calls, want false after 1", n)
		}
	})
}
