package elbv2

import (
	"context"
	"sync"
	"time"
)

// How the budget reacts to Throttling. A Throttling answer means the
// account's shared Describe bucket is empty, whoever emptied it; the load
// balancer controller needs it to make progress on the very deregistrations
// we wait for. So the budget forfeits any saved-up burst at once and refills
// at half its rate for slowFor; each further Throttling inside that window
// halves the rate again (down to minSlowFactor) and extends the window. When
// the window passes without Throttling, the full rate returns in one step:
// the per-group backoff already keeps the throttled group quiet, the global
// slowdown only has to cover the account's own recovery (its 40-call bucket
// refills in 4 s at 10/s).
const (
	slowFor       = 5 * time.Second
	minSlowFactor = 1.0 / 8
)

// budget is the token bucket shared by every group's poller. Groups that are
// due queue for tokens in FIFO order, and each group holds at most one place
// in the queue, so under contention every due group gets a call before any
// group gets a second: round robin among the groups due for a poll.
//
// It runs on the real monotonic clock (time.Now), not Config.Now: the budget
// is about real spacing of requests.
type budget struct {
	mu        sync.Mutex
	rate      float64 // tokens per second at full speed
	burst     float64
	tokens    float64
	last      time.Time // tokens were last brought up to date at last
	factor    float64   // rate multiplier while now < slowUntil
	slowUntil time.Time
	queue     []*ticket
}

// ticket is one group's place in the queue; ready is closed when it reaches
// the head.
type ticket struct{ ready chan struct{} }

// takeLow waits for a token as take does, but only while no caller of take
// waits: the reads that tell who sends a group's traffic (node lists, a
// group's attributes) serve early closes only, and must never hold back a
// poll, which releases pods. It returns ctx's error if ctx ends first.
func (b *budget) takeLow(ctx context.Context) error {
	for {
		b.mu.Lock()
		idle := len(b.queue) == 0
		var wait time.Duration
		if idle {
			var ok bool
			if ok, wait = b.tryTakeLocked(time.Now()); ok {
				b.mu.Unlock()
				return nil
			}
		}
		b.mu.Unlock()
		// Look again after a token's refill time (at most a second):
		// a poll that queues meanwhile goes first.
		wait = min(max(wait, lowRecheck), time.Second)
		timer := time.NewTimer(wait)
		select {
		case <-timer.C:
		case <-ctx.Done():
			timer.Stop()
			return ctx.Err()
		}
	}
}

// lowRecheck is how often takeLow looks for an idle queue.
const lowRecheck = 20 * time.Millisecond

// epsilon absorbs float rounding when a timer fires exactly at the moment
// the bucket reaches one token.
const epsilon = 1e-9

func newBudget(rate float64, burst int, now time.Time) *budget {
	// Starting full lets the first polls of a fresh gate go out at once; the
	// bound calls <= burst + rate×elapsed holds from the start.
	return &budget{rate: rate, burst: float64(burst), tokens: float64(burst), last: now, factor: 1}
}

// refillLocked brings tokens up to date at now.
func (b *budget) refillLocked(now time.Time) {
	if !now.After(b.last) {
		return
	}
	from := b.last
	if from.Before(b.slowUntil) {
		end := now
		if b.slowUntil.Before(end) {
			end = b.slowUntil
		}
		b.tokens += end.Sub(from).Seconds() * b.rate * b.factor
		from = end
	}
	b.tokens += now.Sub(from).Seconds() * b.rate
	b.tokens = min(b.tokens, b.burst)
	b.last = now
	if !now.Before(b.slowUntil) {
		b.factor = 1
	}
}

// delayLocked is how long after now the bucket holds one token, assuming no
// one else takes any; tokens must be up to date at now.
func (b *budget) delayLocked(now time.Time) time.Duration {
	need := 1 - b.tokens
	if need <= epsilon {
		return 0
	}
	var secs float64
	if now.Before(b.slowUntil) {
		slow := b.rate * b.factor
		window := b.slowUntil.Sub(now).Seconds()
		if need <= window*slow {
			return seconds(need / slow)
		}
		need -= window * slow
		secs = window
	}
	return seconds(secs + need/b.rate)
}

func seconds(s float64) time.Duration {
	// Round up so a timer never fires before the token is there.
	return time.Duration(s*float64(time.Second)) + time.Microsecond
}

// tryTakeLocked takes a token if one is there at now; otherwise it says how
// long to wait.
func (b *budget) tryTakeLocked(now time.Time) (bool, time.Duration) {
	b.refillLocked(now)
	if b.tokens >= 1-epsilon {
		b.tokens--
		return true, 0
	}
	return false, b.delayLocked(now)
}

// slowDownLocked applies the reaction to Throttling described at slowFor.
func (b *budget) slowDownLocked(now time.Time) {
	b.refillLocked(now)
	b.tokens = min(b.tokens, 0)
	b.factor = max(b.factor/2, minSlowFactor)
	b.slowUntil = now.Add(slowFor)
}

func (b *budget) slowDown() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.slowDownLocked(time.Now())
}

// take waits for this caller's turn and a token. It returns ctx's error,
// having given up its place, if ctx ends first.
func (b *budget) take(ctx context.Context) error { return b.wait(ctx, b.enqueue()) }

// enqueue puts a new ticket at the end of the queue.
func (b *budget) enqueue() *ticket {
	t := &ticket{ready: make(chan struct{})}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.queue = append(b.queue, t)
	if len(b.queue) == 1 {
		close(t.ready)
	}
	return t
}

// wait waits for t to reach the head of the queue and for a token.
func (b *budget) wait(ctx context.Context, t *ticket) error {
	if ctx.Err() != nil {
		b.leave(t)
		return ctx.Err()
	}
	select {
	case <-t.ready:
	case <-ctx.Done():
		b.leave(t)
		return ctx.Err()
	}
	for {
		b.mu.Lock()
		ok, wait := b.tryTakeLocked(time.Now())
		if ok {
			b.popLocked()
			b.mu.Unlock()
			return nil
		}
		b.mu.Unlock()
		timer := time.NewTimer(wait)
		select {
		case <-timer.C:
		case <-ctx.Done():
			timer.Stop()
			b.leave(t)
			return ctx.Err()
		}
	}
}

// popLocked removes the head and hands the turn to the next in line.
func (b *budget) popLocked() {
	b.queue[0] = nil
	b.queue = b.queue[1:]
	if len(b.queue) > 0 {
		close(b.queue[0].ready)
	}
}

// leave removes t from the queue wherever it is.
func (b *budget) leave(t *ticket) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for i, q := range b.queue {
		if q != t {
			continue
		}
		if i == 0 {
			b.popLocked()
			return
		}
		b.queue = append(b.queue[:i], b.queue[i+1:]...)
		return
	}
}
