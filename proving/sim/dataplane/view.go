package dataplane

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"sync"
	"time"
)

// Target is one registered target of an `ip` target group.
type Target struct {
	ID   string // an IP address
	Port int32
}

// String returns the target's dialable address, host:port.
func (t Target) String() string { return net.JoinHostPort(t.ID, strconv.Itoa(int(t.Port))) }

// Event is one target state change seen in the ELB control plane.
type Event struct {
	Target Target
	// To is the ELB target state: "initial", "healthy", "unhealthy",
	// "draining", "unused" (or any other; only StateHealthy routes).
	To string
	// At is when the control plane changed. The propagation delay counts from
	// here; zero means from the call to Apply.
	At time.Time
}

// StateHealthy is the only state in which the data plane routes to a target.
const StateHealthy = "healthy"

// Propagation says how long after a control-plane event the data plane acts
// on it. It is called once per event, in Apply order, and must not call the
// Proxy. A negative answer counts as zero.
type Propagation func(Event) time.Duration

// Fixed is a Propagation that always answers d.
func Fixed(d time.Duration) Propagation {
	return func(Event) time.Duration { return d }
}

// Uniform is a Propagation drawing uniformly from [lo, hi] with its own
// seeded generator, so a lab run can be repeated draw for draw. It is safe for
// concurrent use.
func Uniform(lo, hi time.Duration, seed uint64) Propagation {
	var mu sync.Mutex
	rng := rand.New(rand.NewPCG(seed, seed))
	return func(Event) time.Duration {
		if hi <= lo {
			return lo
		}
		mu.Lock()
		defer mu.Unlock()
		return lo + time.Duration(rng.Int64N(int64(hi-lo)+1))
	}
}

// z99 is the standard normal distribution's 99th percentile.
const z99 = 2.3263478740

// LogNormal is a heavy-tailed Propagation: most events propagate in about
// median, a few take far longer, as load balancer nodes do when some of them
// lag. The log of a draw is normally distributed with mean ln(median) and
// standard deviation (ln(p99) - ln(median)) / 2.3263478740, so half the draws
// are below median and 99 % below p99. Like Uniform it draws from its own
// seeded generator, so a lab run can be repeated draw for draw, and it is
// safe for concurrent use. A median of zero or less always answers 0, a p99
// not above the median always answers median; a draw too large for a
// time.Duration answers the largest one.
func LogNormal(median, p99 time.Duration, seed uint64) Propagation {
	var mu sync.Mutex
	rng := rand.New(rand.NewPCG(seed, seed))
	mean := math.Log(float64(median))
	sigma := (math.Log(float64(p99)) - mean) / z99
	return func(Event) time.Duration {
		switch {
		case median <= 0:
			return 0
		case p99 <= median:
			return median
		}
		mu.Lock()
		z := rng.NormFloat64()
		mu.Unlock()
		d := math.Exp(mean + sigma*z)
		if d >= math.MaxInt64 {
			return math.MaxInt64
		}
		return time.Duration(d)
	}
}

// Sample is one change the proxy applied to its view, for plotting.
type Sample struct {
	Target     Target
	State      string // the ELB state the view now holds for Target
	InRotation bool   // whether Target gets new requests from AppliedAt on
	// EventAt is the control-plane time of the event (Event.At, or the Apply
	// call when that was zero).
	EventAt time.Time
	// ScheduledAt is EventAt plus the drawn delay, moved later when needed
	// so that it is not before an earlier event of the same target.
	ScheduledAt time.Time
	// AppliedAt is when the view changed: ScheduledAt plus timer lateness.
	AppliedAt time.Time
}

// ErrClosed is returned by WaitInRotation once the Proxy is closed.
var ErrClosed = errors.New("data plane closed")

// targetView is what the proxy believes about one target, plus the events
// still on their way to that belief.
type targetView struct {
	state            string
	inRotation       bool
	started, stopped time.Time
	// pending holds events not yet applied, in Apply order, with
	// non-decreasing scheduled times; timer is armed for pending[0] only, so
	// one target's events can never be applied out of order.
	pending []pendingEvent
	timer   *time.Timer
}

type pendingEvent struct {
	ev        Event
	eventAt   time.Time
	scheduled time.Time
}

// Apply hands the proxy one control-plane event. Its view changes once the
// event's propagation delay has passed, and never before an earlier event of
// the same target has been applied. Events after Close are dropped.
func (p *Proxy) Apply(ev Event) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return
	}
	now := time.Now()
	eventAt := ev.At
	if eventAt.IsZero() {
		eventAt = now
	}
	var delay time.Duration
	if p.cfg.Propagation != nil {
		delay = max(p.cfg.Propagation(ev), 0)
	}
	scheduled := eventAt.Add(delay)
	tv := p.view(ev.Target)
	if n := len(tv.pending); n > 0 && scheduled.Before(tv.pending[n-1].scheduled) {
		scheduled = tv.pending[n-1].scheduled
	}
	tv.pending = append(tv.pending, pendingEvent{ev: ev, eventAt: eventAt, scheduled: scheduled})
	if len(tv.pending) == 1 {
		p.arm(ev.Target, tv, now)
	}
}

func (p *Proxy) view(t Target) *targetView {
	tv, ok := p.targets[t]
	if !ok {
		tv = &targetView{}
		p.targets[t] = tv
	}
	return tv
}

func (p *Proxy) arm(t Target, tv *targetView, now time.Time) {
	tv.timer = time.AfterFunc(tv.pending[0].scheduled.Sub(now), func() { p.due(t) })
}

// due applies every pending event of t whose time has come, oldest first.
func (p *Proxy) due(t Target) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return
	}
	tv := p.targets[t]
	tv.timer = nil
	now := time.Now()
	for len(tv.pending) > 0 && !tv.pending[0].scheduled.After(now) {
		p.applyLocked(t, tv, tv.pending[0], now)
		tv.pending = tv.pending[1:]
	}
	if len(tv.pending) == 0 {
		tv.pending = nil
		return
	}
	// Only when the wall clock stepped back since Apply: wait again.
	p.arm(t, tv, now)
}

func (p *Proxy) applyLocked(t Target, tv *targetView, pe pendingEvent, now time.Time) {
	was := tv.inRotation
	tv.state = pe.ev.To
	tv.inRotation = pe.ev.To == StateHealthy
	p.timeline = append(p.timeline, Sample{
		Target:      t,
		State:       tv.state,
		InRotation:  tv.inRotation,
		EventAt:     pe.eventAt,
		ScheduledAt: pe.scheduled,
		AppliedAt:   now,
	})
	if was == tv.inRotation {
		return
	}
	if tv.inRotation {
		tv.started = now
	} else {
		tv.stopped = now
	}
	rotation := make([]Target, 0, len(p.rotation)+1)
	for t, v := range p.targets {
		if v.inRotation {
			rotation = append(rotation, t)
		}
	}
	slices.SortFunc(rotation, compareTargets)
	p.rotation = rotation
	close(p.changed)
	p.changed = make(chan struct{})
}

// compareTargets orders targets by address (numerically when both are IPs),
// then port, so the round robin is the same from run to run.
func compareTargets(a, b Target) int {
	aa, errA := netip.ParseAddr(a.ID)
	ba, errB := netip.ParseAddr(b.ID)
	if errA == nil && errB == nil {
		if c := aa.Compare(ba); c != 0 {
			return c
		}
	} else if c := cmp.Compare(a.ID, b.ID); c != 0 {
		return c
	}
	return cmp.Compare(a.Port, b.Port)
}

// Rotation returns the targets that get new requests, in round-robin order.
func (p *Proxy) Rotation() []Target {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.rotation)
}

// StartedAt returns when the proxy's view last put t into rotation; ok is
// false if it never did.
func (p *Proxy) StartedAt(t Target) (at time.Time, ok bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if tv, found := p.targets[t]; found && !tv.started.IsZero() {
		return tv.started, true
	}
	return time.Time{}, false
}

// StoppedAt returns when the proxy's view last took t out of rotation; ok is
// false if it never did. No request picked t after this time unless t came
// back (see StartedAt).
func (p *Proxy) StoppedAt(t Target) (at time.Time, ok bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if tv, found := p.targets[t]; found && !tv.stopped.IsZero() {
		return tv.stopped, true
	}
	return time.Time{}, false
}

// InRotation reports whether t gets new requests from the proxy now.
func (p *Proxy) InRotation(t Target) bool {
	in, _, _ := p.routing(t)
	return in
}

// routing reports, under one lock, whether t is in rotation now, whether the
// view ever put it in, and when it last took it out.
func (p *Proxy) routing(t Target) (in, ever bool, stopped time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	tv, found := p.targets[t]
	if !found {
		return false, false, time.Time{}
	}
	return tv.inRotation, !tv.started.IsZero(), tv.stopped
}

// Timeline returns every change applied to the view so far, in order.
func (p *Proxy) Timeline() []Sample {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.timeline)
}

// WaitInRotation returns once at least n targets are in rotation in the
// proxy's view, or with an error when ctx ends or the proxy is closed.
func (p *Proxy) WaitInRotation(ctx context.Context, n int) error {
	for {
		p.mu.Lock()
		have, closed, changed := len(p.rotation), p.closed, p.changed
		p.mu.Unlock()
		if have >= n {
			return nil
		}
		if closed {
			return fmt.Errorf("wait for %d targets in rotation (%d now): %w", n, have, ErrClosed)
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return fmt.Errorf("wait for %d targets in rotation (%d now): %w", n, have, context.Cause(ctx))
		}
	}
}

// Close stops every pending view change and drops idle target connections.
// The view stays as it was; requests after Close are answered 503.
func (p *Proxy) Close() {
	p.mu.Lock()
	if !p.closed {
		p.closed = true
		for _, tv := range p.targets {
			if tv.timer != nil {
				tv.timer.Stop()
				tv.timer = nil
			}
			tv.pending = nil
		}
		close(p.changed)
	}
	p.mu.Unlock()
	p.transport.CloseIdleConnections()
	p.closeFlows()
}
