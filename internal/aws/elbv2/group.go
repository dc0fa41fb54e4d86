package elbv2

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/service/elasticloadbalancingv2"
	"github.com/aws/smithy-go"
)

// One target group's goroutine: it polls the group while it has waiters,
// reads its load balancer's type once, keeps its load balancers' node
// lists fresh (nodes.go), and publishes each observation to the waiters.

// group is one polled target group; its goroutine runs while it has waiters.
type group struct {
	arn    string
	cancel context.CancelFunc
	done   chan struct{} // closed when the goroutine has ended

	// next is the earliest time the group may be polled again; owned by the
	// goroutine, read by others only after done is closed.
	next time.Time
	// typeRetry and typeFailures pace reads of the load balancer's type
	// after failures, attrRetry and attrFailures those of its client IP
	// preservation; owned by the goroutine.
	typeRetry    time.Time
	typeFailures int
	attrRetry    time.Time
	attrFailures int

	mu      sync.Mutex
	obs     Observation
	good    bool // obs holds a listing
	waiters map[*Waiter]struct{}
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
			p.readSenders(ctx, g, started)
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
	case isDenied(err):
		result = "denied"
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

func (g *group) signal() {
	g.mu.Lock()
	defer g.mu.Unlock()
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
