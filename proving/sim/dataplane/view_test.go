package dataplane

import (
	"context"
	"errors"
	"math"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

var (
	targetA = Target{ID: "10.0.0.1", Port: 8080}
	targetB = Target{ID: "10.0.0.2", Port: 8080}
	targetC = Target{ID: "10.0.0.10", Port: 8080}
)

// Inside a synctest bubble the clock only moves when every goroutine waits,
// so a timer fires at exactly its scheduled instant and the view's times can
// be compared for equality.

func TestViewChangesExactlyAfterPropagationDelay(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const delay = 100 * time.Millisecond
		p := New(Config{Propagation: Fixed(delay)})
		defer p.Close()

		healthyAt := time.Now()
		p.Apply(Event{Target: targetA, To: StateHealthy, At: healthyAt})
		time.Sleep(delay - time.Millisecond)
		if r := p.Rotation(); len(r) != 0 {
			t.Fatalf("rotation %v before the delay passed; want empty", r)
		}
		time.Sleep(time.Millisecond)
		synctest.Wait()
		started, ok := p.StartedAt(targetA)
		if !ok || !started.Equal(healthyAt.Add(delay)) {
			t.Fatalf("StartedAt = %v, %v; want %v", started, ok, healthyAt.Add(delay))
		}

		time.Sleep(time.Second)
		drainingAt := time.Now()
		p.Apply(Event{Target: targetA, To: "draining", At: drainingAt})
		time.Sleep(delay - time.Millisecond)
		if r := p.Rotation(); len(r) != 1 {
			t.Fatalf("rotation %v before the draining delay passed; want [%v]", r, targetA)
		}
		if _, ok := p.StoppedAt(targetA); ok {
			t.Fatal("StoppedAt set before the draining delay passed")
		}
		time.Sleep(time.Millisecond)
		synctest.Wait()
		stopped, ok := p.StoppedAt(targetA)
		if !ok || !stopped.Equal(drainingAt.Add(delay)) {
			t.Fatalf("StoppedAt = %v, %v; want %v", stopped, ok, drainingAt.Add(delay))
		}
		if r := p.Rotation(); len(r) != 0 {
			t.Fatalf("rotation %v after draining; want empty", r)
		}

		tl := p.Timeline()
		if len(tl) != 2 {
			t.Fatalf("timeline has %d samples, want 2: %+v", len(tl), tl)
		}
		for i, want := range []struct {
			state string
			in    bool
			at    time.Time
		}{{StateHealthy, true, healthyAt}, {"draining", false, drainingAt}} {
			s := tl[i]
			if s.Target != targetA || s.State != want.state || s.InRotation != want.in {
				t.Errorf("sample %d = %+v; want %s in-rotation=%v", i, s, want.state, want.in)
			}
			if !s.EventAt.Equal(want.at) || !s.ScheduledAt.Equal(want.at.Add(delay)) || !s.AppliedAt.Equal(s.ScheduledAt) {
				t.Errorf("sample %d times: event %v scheduled %v applied %v; want event %v, both others %v",
					i, s.EventAt, s.ScheduledAt, s.AppliedAt, want.at, want.at.Add(delay))
			}
		}
	})
}

func TestDelayCountsFromEventTime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const delay = 100 * time.Millisecond
		p := New(Config{Propagation: Fixed(delay)})
		defer p.Close()

		// The emulator saw the change 60 ms before the lab passed it on.
		at := time.Now()
		time.Sleep(60 * time.Millisecond)
		p.Apply(Event{Target: targetA, To: StateHealthy, At: at})
		time.Sleep(delay)
		started, ok := p.StartedAt(targetA)
		if !ok || !started.Equal(at.Add(delay)) {
			t.Fatalf("StartedAt = %v, %v; want %v", started, ok, at.Add(delay))
		}

		// Zero At counts from Apply.
		applied := time.Now()
		p.Apply(Event{Target: targetA, To: "draining"})
		time.Sleep(2 * delay)
		stopped, ok := p.StoppedAt(targetA)
		if !ok || !stopped.Equal(applied.Add(delay)) {
			t.Fatalf("StoppedAt = %v, %v; want %v", stopped, ok, applied.Add(delay))
		}
	})
}

func TestLaterEventNeverOvertakesEarlierForSameTarget(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// A's "healthy" takes long to propagate, its "draining" very little;
		// B's "healthy" is quick and must not wait for A.
		delays := map[Target]map[string]time.Duration{
			targetA: {StateHealthy: 300 * time.Millisecond, "draining": 10 * time.Millisecond},
			targetB: {StateHealthy: 20 * time.Millisecond},
		}
		p := New(Config{Propagation: func(ev Event) time.Duration { return delays[ev.Target][ev.To] }})
		defer p.Close()

		t0 := time.Now()
		p.Apply(Event{Target: targetA, To: StateHealthy, At: t0})
		p.Apply(Event{Target: targetB, To: StateHealthy, At: t0})
		time.Sleep(50 * time.Millisecond)
		p.Apply(Event{Target: targetA, To: "draining", At: time.Now()})

		time.Sleep(100 * time.Millisecond) // t0+150ms: A's draining is due on its own, healthy is not
		if r := p.Rotation(); len(r) != 1 || r[0] != targetB {
			t.Fatalf("rotation at t0+150ms = %v; want [%v]", r, targetB)
		}
		for _, s := range p.Timeline() {
			if s.Target == targetA {
				t.Fatalf("A changed before its earlier event was due: %+v", s)
			}
		}
		if started, _ := p.StartedAt(targetB); !started.Equal(t0.Add(20 * time.Millisecond)) {
			t.Errorf("B StartedAt = %v; want %v (not held back by A)", started, t0.Add(20*time.Millisecond))
		}

		time.Sleep(time.Second)
		var states []string
		for _, s := range p.Timeline() {
			if s.Target != targetA {
				continue
			}
			states = append(states, s.State)
			if want := t0.Add(300 * time.Millisecond); !s.AppliedAt.Equal(want) {
				t.Errorf("A %s applied at %v; want %v (held behind healthy)", s.State, s.AppliedAt, want)
			}
		}
		if len(states) != 2 || states[0] != StateHealthy || states[1] != "draining" {
			t.Fatalf("A's applied states = %v; want [healthy draining]", states)
		}
		if r := p.Rotation(); len(r) != 1 || r[0] != targetB {
			t.Fatalf("final rotation = %v; want [%v]", r, targetB)
		}
		started, _ := p.StartedAt(targetA)
		stopped, _ := p.StoppedAt(targetA)
		if stopped.Before(started) {
			t.Errorf("A stopped at %v before it started at %v", stopped, started)
		}
	})
}

func TestRotationIsSortedAndOnlyHealthy(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := New(Config{})
		defer p.Close()
		// 10.0.0.10 sorts after 10.0.0.2 as an address, before it as a string.
		for _, ev := range []Event{
			{Target: targetC, To: StateHealthy},
			{Target: targetB, To: StateHealthy},
			{Target: targetA, To: StateHealthy},
			{Target: Target{ID: "10.0.0.3", Port: 8080}, To: "initial"},
			{Target: Target{ID: "10.0.0.4", Port: 8080}, To: "unhealthy"},
			{Target: Target{ID: "10.0.0.5", Port: 8080}, To: "unused"},
		} {
			p.Apply(ev)
		}
		synctest.Wait()
		got := p.Rotation()
		want := []Target{targetA, targetB, targetC}
		if len(got) != len(want) {
			t.Fatalf("rotation = %v; want %v", got, want)
		}
		for i := range want {
			if got[i] != want[i] {
				t.Fatalf("rotation = %v; want %v", got, want)
			}
		}
	})
}

func TestWaitInRotation(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const delay = 100 * time.Millisecond
		p := New(Config{Propagation: Fixed(delay)})
		t0 := time.Now()
		p.Apply(Event{Target: targetA, To: StateHealthy, At: t0})
		p.Apply(Event{Target: targetB, To: StateHealthy, At: t0.Add(50 * time.Millisecond)})

		if err := p.WaitInRotation(context.Background(), 2); err != nil {
			t.Fatalf("WaitInRotation: %v", err)
		}
		if now := time.Now(); !now.Equal(t0.Add(150 * time.Millisecond)) {
			t.Errorf("WaitInRotation returned at %v; want %v, when the second target entered", now, t0.Add(150*time.Millisecond))
		}

		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		if err := p.WaitInRotation(ctx, 3); !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("WaitInRotation for a third target = %v; want deadline exceeded", err)
		}

		done := make(chan error)
		go func() { done <- p.WaitInRotation(context.Background(), 3) }()
		synctest.Wait()
		p.Close()
		if err := <-done; !errors.Is(err, ErrClosed) {
			t.Errorf("WaitInRotation across Close = %v; want ErrClosed", err)
		}
	})
}

func TestCloseStopsPendingChanges(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := New(Config{Propagation: Fixed(time.Minute)})
		p.Apply(Event{Target: targetA, To: StateHealthy})
		p.Close()
		p.Apply(Event{Target: targetB, To: StateHealthy})
		time.Sleep(time.Hour)
		if r, tl := p.Rotation(), p.Timeline(); len(r) != 0 || len(tl) != 0 {
			t.Fatalf("after Close: rotation %v, timeline %+v; want both empty", r, tl)
		}
	})
}

// On the real clock only the lower bound is a pass condition: timers may
// fire late on a busy machine, never early.
func TestStoppedAtOnRealClock(t *testing.T) {
	const delay = 50 * time.Millisecond
	p := New(Config{Propagation: Fixed(delay)})
	defer p.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	healthyAt := time.Now()
	p.Apply(Event{Target: targetA, To: StateHealthy, At: healthyAt})
	if err := p.WaitInRotation(ctx, 1); err != nil {
		t.Fatal(err)
	}
	started, _ := p.StartedAt(targetA)
	if started.Before(healthyAt.Add(delay)) {
		t.Errorf("StartedAt %v is before event time + delay %v", started, healthyAt.Add(delay))
	}

	drainingAt := time.Now()
	p.Apply(Event{Target: targetA, To: "draining", At: drainingAt})
	var stopped time.Time
	for ok := false; !ok; stopped, ok = p.StoppedAt(targetA) {
		if ctx.Err() != nil {
			t.Fatal("target never left rotation")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if stopped.Before(drainingAt.Add(delay)) {
		t.Errorf("StoppedAt %v is before event time + delay %v", stopped, drainingAt.Add(delay))
	}
	for _, s := range p.Timeline() {
		if s.AppliedAt.Before(s.ScheduledAt) {
			t.Errorf("sample applied at %v before its scheduled %v", s.AppliedAt, s.ScheduledAt)
		}
	}
}

func TestUniformIsSeededAndInRange(t *testing.T) {
	const lo, hi = 2 * time.Second, 5 * time.Second
	a, b, c := Uniform(lo, hi, 7), Uniform(lo, hi, 7), Uniform(lo, hi, 8)
	same, differs := true, false
	for range 1000 {
		x, y, z := a(Event{}), b(Event{}), c(Event{})
		if x < lo || x > hi {
			t.Fatalf("draw %v outside [%v, %v]", x, lo, hi)
		}
		same = same && x == y
		differs = differs || x != z
	}
	if !same {
		t.Error("two Uniform with the same seed drew different delays")
	}
	if !differs {
		t.Error("two Uniform with different seeds drew the same 1000 delays")
	}
	if d := Uniform(hi, hi, 1)(Event{}); d != hi {
		t.Errorf("Uniform(hi, hi) drew %v; want %v", d, hi)
	}
}

func TestLogNormalHasTheAskedMedianAndP99(t *testing.T) {
	const median, p99, n = 2 * time.Second, 8 * time.Second, 20000
	draw := LogNormal(median, p99, 1)
	d := make([]time.Duration, n)
	for i := range d {
		d[i] = draw(Event{})
		if d[i] <= 0 {
			t.Fatalf("draw %d = %v; want positive", i, d[i])
		}
	}
	slices.Sort(d)
	within := func(name string, got, want time.Duration, tolerance float64) {
		t.Helper()
		if r := float64(got) / float64(want); math.Abs(r-1) > tolerance {
			t.Errorf("empirical %s of %d draws = %v; want %v within %.0f%%", name, n, got, want, 100*tolerance)
		}
	}
	// The sampling error of these quantiles is about 0.5% and 1.6%.
	within("median", d[n/2], median, 0.03)
	within("p99", d[n*99/100], p99, 0.06)
	if d[n-1] < 2*p99 {
		t.Errorf("largest of %d draws = %v; want a heavy tail beyond 2×p99 = %v", n, d[n-1], 2*p99)
	}
}

func TestLogNormalIsSeeded(t *testing.T) {
	a, b, c := LogNormal(time.Second, 5*time.Second, 7), LogNormal(time.Second, 5*time.Second, 7), LogNormal(time.Second, 5*time.Second, 8)
	same, differs := true, false
	for range 1000 {
		x, y, z := a(Event{}), b(Event{}), c(Event{})
		same = same && x == y
		differs = differs || x != z
	}
	if !same {
		t.Error("two LogNormal with the same seed drew different delays")
	}
	if !differs {
		t.Error("two LogNormal with different seeds drew the same 1000 delays")
	}
}

func TestLogNormalDegenerateParameters(t *testing.T) {
	for _, tc := range []struct {
		median, p99, want time.Duration
	}{
		{0, time.Second, 0},
		{-time.Second, time.Second, 0},
		{time.Second, time.Second, time.Second},
		{3 * time.Second, time.Second, 3 * time.Second},
	} {
		draw := LogNormal(tc.median, tc.p99, 1)
		for range 100 {
			if d := draw(Event{}); d != tc.want {
				t.Fatalf("LogNormal(%v, %v) drew %v; want always %v", tc.median, tc.p99, d, tc.want)
			}
		}
	}
}

func TestLogNormalConcurrentDraws(t *testing.T) {
	// Run with -race: the draws share one generator.
	draw := LogNormal(time.Second, 4*time.Second, 3)
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for range 1000 {
				if d := draw(Event{}); d <= 0 {
					t.Errorf("draw %v; want positive", d)
					return
				}
			}
		})
	}
	wg.Wait()
}
