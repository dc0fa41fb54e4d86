package elbv2

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/service/elasticloadbalancingv2"
	"github.com/aws/smithy-go"

	"draingate.dev/draingate/internal/backoff"
)

// API is the two ELBv2 calls the poller makes, both from its one budget:
// DescribeTargetHealth once per group per poll, and DescribeTargetGroups
// once per group for its load balancer's type.
// *elasticloadbalancingv2.Client implements it.
type API interface {
	DescribeTargetHealth(ctx context.Context, in *elasticloadbalancingv2.DescribeTargetHealthInput, optFns ...func(*elasticloadbalancingv2.Options)) (*elasticloadbalancingv2.DescribeTargetHealthOutput, error)
	DescribeTargetGroups(ctx context.Context, in *elasticloadbalancingv2.DescribeTargetGroupsInput, optFns ...func(*elasticloadbalancingv2.Options)) (*elasticloadbalancingv2.DescribeTargetGroupsOutput, error)
}

// Config sizes a Poller. Zero fields take the defaults given beside them.
type Config struct {
	// Rate and Burst size the token bucket shared by every target group's
	// polls, retries included: Rate calls per second (default 2), Burst
	// calls at once (default 5). Keep them well below the account's Describe
	// limit (10/s, 40 burst), which the load balancer controller shares.
	Rate  float64
	Burst int

	// Interval is the least time between two polls of one target group
	// (default 2 s), however many waiters it has and however idle the budget.
	Interval time.Duration

	// BackoffMin and BackoffMax bound the wait before a group is polled
	// again after a failed call (defaults 1 s and 20 s). The wait doubles
	// with each consecutive failure, is jittered to between half and all of
	// that, and is never shorter than Interval.
	BackoffMin, BackoffMax time.Duration

	// Timeout bounds one call (default 10 s).
	Timeout time.Duration

	// Now stamps observations (default time.Now). The budget, intervals and
	// backoff always use the real clock.
	Now func() time.Time

	// Metrics, if set, is called once per call made, with action
	// "DescribeTargetHealth" or "DescribeTargetGroups" and result "ok", "throttled" or "error"; meant
	// for Prometheus counters. It must not block. A call cut short because
	// its group's last waiter left is counted by Stats but not reported.
	Metrics func(action, result string)
}

func (c Config) withDefaults() Config {
	if c.Rate <= 0 {
		c.Rate = 2
	}
	if c.Burst <= 0 {
		c.Burst = 5
	}
	if c.Interval <= 0 {
		c.Interval = 2 * time.Second
	}
	if c.BackoffMin <= 0 {
		c.BackoffMin = time.Second
	}
	if c.BackoffMax <= 0 {
		c.BackoffMax = 20 * time.Second
	}
	c.BackoffMax = max(c.BackoffMax, c.BackoffMin)
	if c.Timeout <= 0 {
		c.Timeout = 10 * time.Second
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return c
}

// Target is a registered target as the load balancer names it: an IP
// address (or instance id) and a port.
type Target struct {
	ID   string
	Port int32
}

// Health is a target's state and reason code exactly as DescribeTargetHealth
// reported them (e.g. "draining", "Target.DeregistrationInProgress"); empty
// when AWS sent none.
type Health struct {
	State, Reason string
}

// Observation is what the poller knows about one target group.
type Observation struct {
	ARN string

	// At is when the listing in Targets was received.
	At time.Time

	// Targets is the last full listing: every target the group reported.
	// A target that is not in the listing was not reported, nothing more is
	// inferred. Observations share the map: it must not be modified.
	Targets map[Target]Health

	// Err is the error of the latest call if it failed (Throttling
	// included); nil after a good listing. Targets and At stay those of the
	// last good listing, so a failure never changes what was observed.
	Err error

	// LoadBalancerType is the type of the group's load balancer
	// ("application", "network", "gateway"), read once; "" until known,
	// and TypeErr then says why when a read failed.
	LoadBalancerType string
	TypeErr          error
}

// ErrClosed is the Err a waiter reports once its Poller is closed.
var ErrClosed = errors.New("elbv2 poller closed")

// DescribeTargetHealthAction is the action name passed to Config.Metrics.
const DescribeTargetHealthAction = "DescribeTargetHealth"

// Poller reads target health for the target groups that have waiters, with
// one DescribeTargetHealth per group per poll, under one rate budget. Create
// it with New; its methods are safe for concurrent use.
type Poller struct {
	api     API
	cfg     Config
	budget  *budget
	backoff backoff.Policy

	calls, throttled atomic.Int64

	mu      sync.Mutex
	closed  bool
	groups  map[string]*group // ARN → group with waiters
	retired map[string]*group // ARN → last group that lost its waiters
	lbTypes map[string]string // ARN → load balancer type, once read
	wg      sync.WaitGroup
}

// New returns a Poller that makes no calls until something is watched.
func New(api API, cfg Config) *Poller {
	cfg = cfg.withDefaults()
	return &Poller{
		api:     api,
		cfg:     cfg,
		budget:  newBudget(cfg.Rate, cfg.Burst, time.Now()),
		backoff: backoff.Policy{Min: cfg.BackoffMin, Max: cfg.BackoffMax},
		groups:  map[string]*group{},
		retired: map[string]*group{},
		lbTypes: map[string]string{},
	}
}

// group is one polled target group; its goroutine runs while it has waiters.
type group struct {
	arn    string
	cancel context.CancelFunc
	done   chan struct{} // closed when the goroutine has ended

	// next is the earliest time the group may be polled again; owned by the
	// goroutine, read by others only after done is closed.
	next time.Time
	// typeRetry and typeFailures pace reads of the load balancer's type
	// after failures; owned by the goroutine.
	typeRetry    time.Time
	typeFailures int

	mu      sync.Mutex
	obs     Observation
	good    bool // obs holds a listing
	waiters map[*Waiter]struct{}
}

// Waiter is one interested party's view of a target group's health.
type Waiter struct {
	p       *Poller
	g       *group
	changed chan struct{}
}

// Watch returns a waiter on the target group arn, starting the group's
// polling if it has no other waiter. The first poll goes out as soon as the
// budget allows, unless the group was polled less than an Interval ago (or
// is backing off) under an earlier set of waiters. Close the waiter when done.
func (p *Poller) Watch(arn string) *Waiter {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		g := &group{arn: arn, obs: Observation{ARN: arn, Err: ErrClosed}}
		w := &Waiter{p: p, g: g, changed: make(chan struct{})}
		close(w.changed)
		return w
	}
	g := p.groups[arn]
	if g == nil {
		ctx, cancel := context.WithCancel(context.Background())
		g = &group{arn: arn, cancel: cancel, done: make(chan struct{}),
			obs: Observation{ARN: arn}, waiters: map[*Waiter]struct{}{}}
		prev := p.retired[arn]
		delete(p.retired, arn)
		p.groups[arn] = g
		p.wg.Add(1)
		go p.run(ctx, g, prev)
	}
	// Capacity 1: a signal is kept until read, and further ones coalesce
	// into it, so the poller never blocks on a slow waiter.
	w := &Waiter{p: p, g: g, changed: make(chan struct{}, 1)}
	g.mu.Lock()
	g.waiters[w] = struct{}{}
	g.mu.Unlock()
	return w
}

// Latest returns the group's current observation. ok is false until the
// first good listing; the observation then carries only ARN and Err.
func (w *Waiter) Latest() (obs Observation, ok bool) {
	w.g.mu.Lock()
	defer w.g.mu.Unlock()
	return w.g.obs, w.g.good
}

// Changed receives a value after each new observation (a good listing or a
// failed call); signals that arrive while one is pending merge into it, so
// read Latest after each receive. It is closed when the waiter stops
// getting observations: on Close of the waiter or of the Poller.
func (w *Waiter) Changed() <-chan struct{} { return w.changed }

// Close ends the waiter. When it was the group's last waiter, the group's
// polling stops: Close cancels any call in flight and returns after the
// group's goroutine has ended, so no call for the group starts afterwards.
// Close may be called more than once.
func (w *Waiter) Close() {
	p, g := w.p, w.g
	p.mu.Lock()
	g.mu.Lock()
	_, mine := g.waiters[w]
	if mine {
		delete(g.waiters, w)
		close(w.changed)
	}
	last := mine && len(g.waiters) == 0
	g.mu.Unlock()
	if last {
		delete(p.groups, g.arn)
		p.retireLocked(g)
		g.cancel()
	}
	p.mu.Unlock()
	if last {
		<-g.done
	}
}

// retireLocked remembers g so that a new group for the same ARN keeps its
// schedule, and forgets retired groups whose schedule no longer matters.
func (p *Poller) retireLocked(g *group) {
	if p.closed {
		return
	}
	now := time.Now()
	for arn, r := range p.retired {
		select {
		case <-r.done:
			if !r.next.After(now) {
				delete(p.retired, arn)
			}
		default:
		}
	}
	p.retired[g.arn] = g
}

// Close stops every group's polling, closes every waiter's Changed channel
// and waits for the goroutines to end. Waiters then report ErrClosed.
func (p *Poller) Close() {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.closed = true
	groups := p.groups
	p.groups = map[string]*group{}
	clear(p.retired)
	p.mu.Unlock()

	for _, g := range groups {
		g.cancel()
	}
	p.wg.Wait()
	for _, g := range groups {
		g.mu.Lock()
		g.obs.Err = ErrClosed
		for w := range g.waiters {
			delete(g.waiters, w)
			close(w.changed)
		}
		g.mu.Unlock()
	}
}

// Stats returns how many ELBv2 calls the poller has made (every attempt of
// either action, whatever its result) and how many of them were throttled.
func (p *Poller) Stats() (calls, throttled int) {
	return int(p.calls.Load()), int(p.throttled.Load())
}

// run polls g until its context ends. prev is the group's previous
// incarnation, if any, whose schedule it continues.
func (p *Poller) run(ctx context.Context, g *group, prev *group) {
	defer p.wg.Done()
	defer close(g.done)

	g.next = time.Now()
	if prev != nil {
		// prev's goroutine was cancelled before prev was retired; it ends
		// promptly.
		<-prev.done
		g.next = later(g.next, prev.next)
	}
	failures := 0
	for {
		if !sleepUntil(ctx, g.next) {
			return
		}
		if p.budget.take(ctx) != nil {
			return
		}
		started := time.Now()
		g.next = started.Add(p.cfg.Interval)
		targets, err := p.describe(ctx, g.arn)
		if ctx.Err() != nil {
			return // the last waiter left: nobody to tell
		}
		if err == nil {
			failures = 0
			g.publish(Observation{ARN: g.arn, At: p.cfg.Now(), Targets: targets}, true)
			p.readType(ctx, g, started)
			continue
		}
		failures++
		wait := p.backoff.Next(failures)
		g.next = later(g.next, started.Add(wait))
		g.publishErr(err)
	}
}

// describe makes one call, counts it and sorts its result.
func (p *Poller) describe(outer context.Context, arn string) (map[Target]Health, error) {
	ctx, cancel := context.WithTimeout(outer, p.cfg.Timeout)
	defer cancel()
	p.calls.Add(1)
	out, err := p.api.DescribeTargetHealth(ctx,
		&elasticloadbalancingv2.DescribeTargetHealthInput{TargetGroupArn: aws.String(arn)},
		singleAttempt)
	if err != nil && outer.Err() != nil {
		// The last waiter left mid-call: not a failure worth a metric.
		return nil, err
	}
	p.outcome(DescribeTargetHealthAction, err)
	if err != nil {
		return nil, fmt.Errorf("describe target health %s: %w", arn, err)
	}
	targets := make(map[Target]Health, len(out.TargetHealthDescriptions))
	for _, d := range out.TargetHealthDescriptions {
		if d.Target == nil {
			continue
		}
		var h Health
		if d.TargetHealth != nil {
			h = Health{State: string(d.TargetHealth.State), Reason: string(d.TargetHealth.Reason)}
		}
		targets[Target{ID: aws.ToString(d.Target.Id), Port: aws.ToInt32(d.Target.Port)}] = h
	}
	return targets, nil
}

// outcome accounts for one finished call: a throttled one slows the shared
// budget down, and the Metrics hook hears "ok", "throttled" or "error".
func (p *Poller) outcome(action string, err error) {
	result := "ok"
	switch {
	case err == nil:
	case isThrottle(err):
		result = "throttled"
		p.throttled.Add(1)
		p.budget.slowDown()
	default:
		result = "error"
	}
	if p.cfg.Metrics != nil {
		p.cfg.Metrics(action, result)
	}
}

// singleAttempt turns off the SDK's own retries for one call, whatever the
// client was built with: every attempt must come out of the budget, so the
// poller retries by itself.
func singleAttempt(o *elasticloadbalancingv2.Options) { o.Retryer = aws.NopRetryer{} }

// isThrottle reports whether err is an AWS throttling error (Throttling,
// ThrottlingException, RequestLimitExceeded, ...), by the same list of codes
// the SDK's retryer uses.
func isThrottle(err error) bool {
	var ae smithy.APIError
	if !errors.As(err, &ae) {
		return false
	}
	_, ok := retry.DefaultThrottleErrorCodes[ae.ErrorCode()]
	return ok
}

func (g *group) publish(obs Observation, good bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	obs.LoadBalancerType, obs.TypeErr = g.obs.LoadBalancerType, g.obs.TypeErr
	g.obs, g.good = obs, good
	g.signalLocked()
}

// setType records the load balancer's type, or why it is not known, and
// tells the waiters when that changes.
func (g *group) setType(t string, err error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.obs.LoadBalancerType == t && (g.obs.TypeErr == nil) == (err == nil) {
		return
	}
	g.obs.LoadBalancerType, g.obs.TypeErr = t, err
	g.signalLocked()
}

func (g *group) publishErr(err error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.obs.Err = err
	g.signalLocked()
}

func (g *group) signalLocked() {
	for w := range g.waiters {
		select {
		case w.changed <- struct{}{}:
		default: // a signal is already pending
		}
	}
}

// sleepUntil waits until t; false if ctx ended first.
func sleepUntil(ctx context.Context, t time.Time) bool {
	d := time.Until(t)
	if d <= 0 {
		return ctx.Err() == nil
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
		return true
	case <-ctx.Done():
		return false
	}
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
