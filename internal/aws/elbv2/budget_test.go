package elbv2

import (
	"context"
	"slices"
	"testing"
	"testing/synctest"
	"time"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func at(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }

// take without a queue, for the arithmetic alone.
func takeAt(b *budget, s float64) (bool, time.Duration) { return b.tryTakeLocked(at(s)) }

func near(d time.Duration, want float64) bool {
	diff := d - time.Duration(want*float64(time.Second))
	return diff >= 0 && diff < time.Millisecond
}

func TestBudgetBurstThenRate(t *testing.T) {
	b := newBudget(2, 5, t0)
	for i := range 5 {
		if ok, _ := takeAt(b, 0); !ok {
			t.Fatalf("take %d of the burst refused", i+1)
		}
	}
	ok, wait := takeAt(b, 0)
	if ok || !near(wait, 0.5) {
		t.Fatalf("after the burst: ok=%v wait=%v, want refused, wait 0.5s", ok, wait)
	}
	if ok, _ := takeAt(b, 0.5); !ok {
		t.Fatal("refused after one refill period")
	}
	if ok, _ := takeAt(b, 0.9); ok {
		t.Fatal("took a token that had not refilled")
	}
	// A long idle time refills only up to the burst.
	for i := range 5 {
		if ok, _ := takeAt(b, 100); !ok {
			t.Fatalf("take %d after idling refused", i+1)
		}
	}
	if ok, _ := takeAt(b, 100); ok {
		t.Fatal("idling saved more than the burst")
	}
}

func TestBudgetSlowsDownOnThrottling(t *testing.T) {
	b := newBudget(2, 5, t0)
	b.slowDownLocked(at(0))
	// The saved burst is forfeited and the rate halves: 1 token/s.
	ok, wait := takeAt(b, 0)
	if ok || !near(wait, 1) {
		t.Fatalf("after one throttle: ok=%v wait=%v, want refused, wait 1s", ok, wait)
	}
	// A second throttle inside the window halves again: 0.5 token/s.
	b.slowDownLocked(at(0.5))
	if ok, wait := takeAt(b, 0.5); ok || !near(wait, 2) {
		t.Fatalf("after two throttles: ok=%v wait=%v, want refused, wait 2s", ok, wait)
	}
	// Halving stops at minSlowFactor.
	for range 10 {
		b.slowDownLocked(at(0.5))
	}
	if b.factor != minSlowFactor {
		t.Fatalf("factor = %v, want %v", b.factor, minSlowFactor)
	}
	// Slow rate 0.25/s until 5.5 s (slowFor after the last throttle): 1.375
	// tokens by then, so one token at 4.5 s.
	if ok, wait := takeAt(b, 0.5); ok || !near(wait, 4) {
		t.Fatalf("at the floor: ok=%v wait=%v, want refused, wait 4s", ok, wait)
	}
	if ok, _ := takeAt(b, 4.5); !ok {
		t.Fatal("refused at 4.5s")
	}
	// 0.25 token at 5.5 s, then full rate 2/s: one token at 5.875 s.
	if ok, wait := takeAt(b, 5); ok || !near(wait, 0.875) {
		t.Fatalf("across the window's end: ok=%v wait=%v, want refused, wait 0.875s", ok, wait)
	}
	if ok, _ := takeAt(b, 5.875); !ok {
		t.Fatal("refused at 5.875s")
	}
	if b.factor != 1 {
		t.Fatalf("factor after the window = %v, want 1", b.factor)
	}
	// A throttle after the window starts again from half the rate.
	b.slowDownLocked(at(20))
	if b.factor != 0.5 {
		t.Fatalf("factor after a later throttle = %v, want 0.5", b.factor)
	}
}

// Groups get tokens in the order they queued, and one that gives up its
// place does not hold up the others.
func TestBudgetQueueIsFIFO(t *testing.T) {
	b := newBudget(50, 1, time.Now())
	b.slowDown() // empty the bucket so that every taker waits its turn
	names := []string{"a", "b", "c", "d"}
	tickets := make([]*ticket, len(names))
	for i := range names {
		tickets[i] = b.enqueue()
	}
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	served := make(chan string, len(names))
	for i, n := range names {
		ctx := context.Background()
		if n == "b" {
			ctx = cancelled
		}
		go func() {
			if b.wait(ctx, tickets[i]) != nil {
				n += " gave up"
			}
			served <- n
		}()
	}
	var got []string
	for range names {
		if n := <-served; n != "b gave up" {
			got = append(got, n)
		}
	}
	if want := []string{"a", "c", "d"}; !slices.Equal(got, want) {
		t.Fatalf("served %v, want %v", got, want)
	}
}

// TestTakeLowYieldsToPolls: a low-priority read (a node list) never takes
// a token while a poll waits in the queue, even one the bucket has for
// it, and takes one once the queue is empty.
func TestTakeLowYieldsToPolls(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newBudget(20, 1, time.Now()) // one token in the bucket
		poll := b.enqueue()               // a poll at the head, about to take it
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		if err := b.takeLow(ctx); err == nil {
			t.Fatal("the low read took a token while a poll waited")
		}
		if err := b.wait(context.Background(), poll); err != nil {
			t.Fatalf("the poll: %v", err)
		}
		if err := b.takeLow(context.Background()); err != nil {
			t.Fatalf("the low read, the queue empty: %v", err)
		}
	})
}
