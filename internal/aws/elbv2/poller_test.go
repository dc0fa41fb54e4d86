package elbv2

import (
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/aws/smithy-go"

	"draingate.dev/draingate/internal/backoff"
	"draingate.dev/draingate/proving/sim/elbv2sim"
)

// Many waiters on one group cost one call per poll: the emulator sees
// exactly as many calls as there were polls, every waiter sees the same
// listings, and the group is polled at most once per Interval.
func TestManyWaitersShareEachPoll(t *testing.T) {
	b := newBench(t)
	arn := b.group(t, "shared", time.Minute)
	tgt := healthyTarget(t)
	if err := b.sim.RegisterTargets(arn, tgt); err != nil {
		t.Fatal(err)
	}
	var res results
	cfg := Config{Rate: 50, Burst: 5, Interval: 50 * time.Millisecond, Metrics: res.hook}
	start := time.Now()
	p := New(b.client, cfg)
	defer p.Close()

	const waiters = 100
	ws := make([]*Waiter, waiters)
	seen := make([]time.Time, waiters) // At of the latest listing each waiter read
	var wg sync.WaitGroup
	for i := range ws {
		ws[i] = p.Watch(arn)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range ws[i].Changed() {
				if obs, ok := ws[i].Latest(); ok {
					if _, listed := obs.Targets[Target{ID: tgt.ID, Port: tgt.Port}]; !listed {
						t.Errorf("waiter %d: listing %v lacks the registered target", i, obs.Targets)
					}
					seen[i] = obs.At
				}
			}
		}()
	}
	waitFor(t, "10 polls", func() bool { return res.get("ok") >= 10 })
	for _, w := range ws {
		w.Close()
	}
	elapsed := time.Since(start)
	wg.Wait() // Close closed every Changed channel

	polls := res.get("ok")
	calls, throttled := p.Stats()
	simOK, _, simAll := b.describeCalls()
	// calls also counts the one DescribeTargetGroups that reads the type.
	if simAll != polls || simOK != polls || calls != polls+1 || throttled != 0 {
		t.Errorf("emulator saw %d calls (%d OK), poller made %d (%d throttled), for %d polls; want one call per poll and one type read",
			simAll, simOK, calls, throttled, polls)
	}
	if maxPolls := 1 + int(elapsed/cfg.Interval); polls > maxPolls {
		t.Errorf("%d polls in %v, Interval %v allows %d", polls, elapsed, cfg.Interval, maxPolls)
	}
	last, _ := ws[0].Latest()
	for i, at := range seen {
		if !at.Equal(last.At) {
			t.Errorf("waiter %d last read the listing of %v, the last listing is of %v", i, at, last.At)
		}
	}
	t.Logf("%d waiters, %d polls, %d calls in %v", waiters, polls, simAll, elapsed)
}

// Groups share the budget: the total stays within it and, with every group
// always due, each group gets its turn.
func TestGroupsShareBudgetFairly(t *testing.T) {
	b := newBench(t)
	arns := []string{b.group(t, "one", time.Minute), b.group(t, "two", time.Minute), b.group(t, "three", time.Minute)}
	api := &countingAPI{api: b.client}
	// An Interval far below the budget's spacing keeps every group due, so
	// the budget alone decides who goes next.
	cfg := Config{Rate: 10, Burst: 2, Interval: time.Millisecond}
	start := time.Now()
	p := New(api, cfg)
	defer p.Close()
	for _, arn := range arns {
		defer p.Watch(arn).Close()
	}
	waitFor(t, "30 calls", func() bool { _, n := api.perGroup(); return n >= 30 })
	per, total := api.perGroup()
	elapsed := time.Since(start)

	withinBudget(t, total, cfg, elapsed)
	lo, hi := total, 0
	for _, arn := range arns {
		lo, hi = min(lo, per[arn]), max(hi, per[arn])
	}
	// Strict round robin gives counts within one of each other; one more
	// allows for a goroutine that took its token but had not yet called.
	if hi-lo > 2 {
		t.Errorf("calls per group %v: unfair (min %d, max %d)", per, lo, hi)
	}
	t.Logf("calls per group after %v: %v", elapsed, per)
}

// maxAttempts is how many calls a group can make within elapsed when every
// call fails: each wait is at least half the backoff step and at least the
// Interval.
func maxAttempts(cfg Config, elapsed time.Duration) int {
	n, sum := 1, time.Duration(0)
	for {
		sum += max(cfg.Interval, backoff.Policy{Min: cfg.BackoffMin, Max: cfg.BackoffMax}.Delay(n, 0))
		if sum > elapsed {
			return n
		}
		n++
	}
}

// Throttling from the emulator: the poller backs off instead of spending
// its budget, the SDK makes no hidden retries, the bucket slows down, a
// failed call invents nothing, and an observation comes once the account's
// bucket lets a call through.
func TestThrottlingBacksOff(t *testing.T) {
	b := newBench(t)
	arn := b.group(t, "busy", time.Minute)
	tgt := healthyTarget(t)
	if err := b.sim.RegisterTargets(arn, tgt); err != nil {
		t.Fatal(err)
	}
	// Phase 1: a Describe bucket that admits nothing.
	never := elbv2sim.BucketConfig{Capacity: 0.5}
	b.sim.SetThrottle(never, elbv2sim.BucketConfig{}, elbv2sim.BucketConfig{})

	var res results
	cfg := Config{Rate: 20, Burst: 5, Interval: 10 * time.Millisecond,
		BackoffMin: 100 * time.Millisecond, BackoffMax: 400 * time.Millisecond, Metrics: res.hook}
	start := time.Now()
	p := New(b.client, cfg)
	defer p.Close()
	w := p.Watch(arn)
	defer w.Close()

	waitFor(t, "6 throttled calls", func() bool { _, th := p.Stats(); return th >= 6 })
	calls, throttled := p.Stats()
	elapsed := time.Since(start)
	if allowed := maxAttempts(cfg.withDefaults(), elapsed); calls > allowed {
		t.Errorf("%d calls while throttled for %v; backing off allows at most %d", calls, elapsed, allowed)
	}
	obs, ok := w.Latest()
	if ok || obs.Targets != nil || !isThrottle(obs.Err) {
		t.Errorf("while throttled: Latest = %+v, %v; want no listing and a Throttling error", obs, ok)
	}
	p.budget.mu.Lock()
	slowed := p.budget.factor < 1 && p.budget.slowUntil.After(time.Now())
	p.budget.mu.Unlock()
	if !slowed {
		t.Error("the shared budget did not slow down after Throttling")
	}
	t.Logf("phase 1: %d calls, %d throttled in %v", calls, throttled, elapsed)

	// Phase 2: a tiny bucket, as an account shared with a busy controller.
	b.sim.SetThrottle(elbv2sim.BucketConfig{Capacity: 1, RefillPerSecond: 1}, elbv2sim.BucketConfig{}, elbv2sim.BucketConfig{})
	waitFor(t, "a listing", func() bool { _, ok := w.Latest(); return ok })
	obs, _ = w.Latest()
	if h, listed := obs.Targets[Target{ID: tgt.ID, Port: tgt.Port}]; !listed || h.State == "" || obs.Err != nil {
		t.Errorf("after throttling: Latest = %+v; want the registered target with a state and no error", obs)
	}
	w.Close()
	elapsed = time.Since(start)

	calls, throttled = p.Stats()
	_, simThrottled, simAll := b.describeCalls()
	if simAll != calls || simThrottled != throttled || res.get("throttled") != throttled {
		t.Errorf("emulator saw %d calls (%d throttled), poller counted %d (%d throttled), metrics %d throttled; want equal: every attempt is the poller's",
			simAll, simThrottled, calls, throttled, res.get("throttled"))
	}
	withinBudget(t, calls, cfg, elapsed)
	t.Logf("total: %d calls, %d throttled in %v", calls, throttled, elapsed)
}

// A failed call keeps the last good listing and its time, and says why.
func TestErrorKeepsLastListing(t *testing.T) {
	b := newBench(t)
	arn := b.group(t, "flaky", time.Minute)
	tgt := healthyTarget(t)
	if err := b.sim.RegisterTargets(arn, tgt); err != nil {
		t.Fatal(err)
	}
	p := New(b.client, Config{Rate: 20, Interval: 20 * time.Millisecond, BackoffMin: 50 * time.Millisecond})
	defer p.Close()
	w := p.Watch(arn)
	defer w.Close()
	waitFor(t, "a listing", func() bool { _, ok := w.Latest(); return ok })
	good, _ := w.Latest()

	b.sim.SetThrottle(elbv2sim.BucketConfig{Capacity: 0.5}, elbv2sim.BucketConfig{}, elbv2sim.BucketConfig{})
	waitFor(t, "an error", func() bool { obs, _ := w.Latest(); return obs.Err != nil })
	bad, ok := w.Latest()
	if !ok || !bad.At.Equal(good.At) || len(bad.Targets) != len(good.Targets) || bad.Targets[Target{ID: tgt.ID, Port: tgt.Port}] != good.Targets[Target{ID: tgt.ID, Port: tgt.Port}] {
		t.Errorf("after a failed call: %+v, %v; want the last listing %+v kept", bad, ok, good)
	}

	// An unknown group: no listing ever, the API's error reported as is.
	b.sim.SetThrottle(elbv2sim.BucketConfig{}, elbv2sim.BucketConfig{}, elbv2sim.BucketConfig{})
	u := p.Watch("arn:aws:elasticloadbalancing:us-east-1:123456789012:targetgroup/nope/0000000000000000")
	defer u.Close()
	<-u.Changed()
	obs, ok := u.Latest()
	var ae smithy.APIError
	if ok || obs.Targets != nil || !errors.As(obs.Err, &ae) || ae.ErrorCode() != "TargetGroupNotFound" {
		t.Errorf("unknown group: Latest = %+v, %v; want no listing and TargetGroupNotFound", obs, ok)
	}
}

// Nothing is polled without waiters: not before the first Watch, not after
// the last waiter leaves; a group keeps being polled while any waiter stays.
func TestNoCallsWithoutWaiters(t *testing.T) {
	b := newBench(t)
	arn := b.group(t, "quiet", time.Minute)
	var res results
	cfg := Config{Rate: 50, Interval: 20 * time.Millisecond, Metrics: res.hook}
	p := New(b.client, cfg)
	defer p.Close()

	time.Sleep(10 * cfg.Interval)
	if calls, _ := p.Stats(); calls != 0 {
		t.Fatalf("%d calls before anything was watched", calls)
	}
	if _, _, all := b.describeCalls(); all != 0 {
		t.Fatalf("emulator saw %d calls before anything was watched", all)
	}

	w1, w2 := p.Watch(arn), p.Watch(arn)
	waitFor(t, "2 polls", func() bool { return res.get("ok") >= 2 })
	w1.Close()
	n := res.get("ok")
	waitFor(t, "2 more polls with one waiter left", func() bool { return res.get("ok") >= n+2 })
	w2.Close()

	after, _ := p.Stats()
	time.Sleep(10 * cfg.Interval)
	if calls, _ := p.Stats(); calls != after {
		t.Errorf("calls went from %d to %d after the last waiter left", after, calls)
	}
	if _, _, all := b.describeCalls(); all > after {
		t.Errorf("emulator saw %d calls, the poller made %d before its last waiter left", all, after)
	}
}

// A waiter that comes back soon after the last one left does not cost an
// extra poll: the group keeps its schedule.
func TestRewatchKeepsInterval(t *testing.T) {
	b := newBench(t)
	arn := b.group(t, "churn", time.Minute)
	// A budget too big to matter, so that only the Interval can hold polls back.
	cfg := Config{Rate: 1000, Burst: 1000, Interval: 300 * time.Millisecond}
	start := time.Now()
	p := New(b.client, cfg)
	defer p.Close()
	for time.Since(start) < time.Second {
		w := p.Watch(arn)
		time.Sleep(5 * time.Millisecond)
		w.Close()
	}
	elapsed := time.Since(start)
	calls, _ := p.Stats()
	if calls == 0 {
		t.Fatal("no poll at all")
	}
	// One listing per Interval, plus the one type read.
	if allowed := 2 + int(elapsed/cfg.Interval); calls > allowed {
		t.Errorf("%d calls in %v of watch/close churn; Interval %v allows %d", calls, elapsed, cfg.Interval, allowed)
	}
}

// A waiter sees its target go healthy, then draining, then absent from the
// listing, in that order, with the states and reasons AWS reports.
func TestWaiterSeesTargetDrain(t *testing.T) {
	b := newBench(t)
	arn := b.group(t, "drain", 2*time.Second)
	tgt := healthyTarget(t)
	key := Target{ID: tgt.ID, Port: tgt.Port}
	if err := b.sim.RegisterTargets(arn, tgt); err != nil {
		t.Fatal(err)
	}
	p := New(b.client, Config{Rate: 50, Interval: 30 * time.Millisecond})
	defer p.Close()
	w := p.Watch(arn)
	defer w.Close()

	var states []string // distinct consecutive states; "absent" when not listed
	var drainingReason string
	note := func(s string) {
		if len(states) == 0 || states[len(states)-1] != s {
			states = append(states, s)
		}
	}
	deregistered := false
	timeout := time.After(waitLimit)
	for len(states) == 0 || states[len(states)-1] != "absent" {
		select {
		case <-w.Changed():
		case <-timeout:
			t.Fatalf("timed out; states so far %v", states)
		}
		obs, ok := w.Latest()
		if !ok {
			continue
		}
		h, listed := obs.Targets[key]
		if !listed {
			note("absent")
			continue
		}
		note(h.State)
		if h.State == "draining" {
			drainingReason = h.Reason
		}
		if h.State == "healthy" && !deregistered {
			deregistered = true
			if err := b.sim.DeregisterTargets(arn, tgt); err != nil {
				t.Fatal(err)
			}
		}
	}
	if i := slices.Index(states, "healthy"); i < 0 || i > 1 || (i == 1 && states[0] != "initial") ||
		!slices.Equal(states[i:], []string{"healthy", "draining", "absent"}) {
		t.Errorf("states seen %v, want [initial] healthy draining absent", states)
	}
	if drainingReason != "Target.DeregistrationInProgress" {
		t.Errorf("draining reason %q, want Target.DeregistrationInProgress", drainingReason)
	}
}

// Closing the Poller ends every waiter and every call.
func TestPollerClose(t *testing.T) {
	b := newBench(t)
	arn := b.group(t, "closing", time.Minute)
	p := New(b.client, Config{Rate: 50, Interval: 20 * time.Millisecond})
	w := p.Watch(arn)
	waitFor(t, "a listing", func() bool { _, ok := w.Latest(); return ok })
	p.Close()
	for range w.Changed() { // drains a pending signal, then must end
	}
	if obs, _ := w.Latest(); !errors.Is(obs.Err, ErrClosed) {
		t.Errorf("after Close: Err = %v, want ErrClosed", obs.Err)
	}
	w.Close() // harmless after the Poller's Close

	late := p.Watch(arn)
	if _, open := <-late.Changed(); open {
		t.Error("Watch after Close: Changed is open")
	}
	if obs, ok := late.Latest(); ok || !errors.Is(obs.Err, ErrClosed) {
		t.Errorf("Watch after Close: Latest = %+v, %v; want ErrClosed", obs, ok)
	}
	late.Close()
	calls, _ := p.Stats()
	time.Sleep(100 * time.Millisecond)
	if again, _ := p.Stats(); again != calls {
		t.Errorf("calls went from %d to %d after Close", calls, again)
	}
}
