package elbv2sim

import (
	"strings"
	"sync"
	"time"
)

// BucketConfig sizes one token bucket. The zero value stands for the AWS
// default of the bucket it configures (see [Config]). A Capacity below 1 never
// admits a call; math.Inf(1) as Capacity and RefillPerSecond disables the
// bucket.
type BucketConfig struct {
	Capacity        float64
	RefillPerSecond float64
}

// AWS's published ELB API limits per account and region
// (elb-api-throttling.html): non-mutating Describe*, Register/Deregister,
// and every ELB action together.
var (
	defaultDescribe     = BucketConfig{Capacity: 40, RefillPerSecond: 10}
	defaultRegistration = BucketConfig{Capacity: 20, RefillPerSecond: 4}
	defaultAccount      = BucketConfig{Capacity: 40, RefillPerSecond: 10}
)

type bucket struct {
	cfg    BucketConfig
	tokens float64
	last   time.Time
}

func newBucket(cfg, def BucketConfig, now time.Time) *bucket {
	if cfg == (BucketConfig{}) {
		cfg = def
	}
	// A new bucket starts full, as an account that has been idle would.
	return &bucket{cfg: cfg, tokens: cfg.Capacity, last: now}
}

func (b *bucket) refill(now time.Time) {
	if el := now.Sub(b.last).Seconds(); el > 0 {
		b.tokens = min(b.cfg.Capacity, b.tokens+el*b.cfg.RefillPerSecond)
	}
	b.last = now
}

// actionClass says which buckets an action draws from.
type actionClass int

const (
	classOther        actionClass = iota // account bucket only
	classDescribe                        // Describe + account
	classRegistration                    // Registration + account
)

func classOf(action string) actionClass {
	switch {
	case strings.HasPrefix(action, "Describe"):
		return classDescribe
	case action == "RegisterTargets" || action == "DeregisterTargets":
		return classRegistration
	default:
		return classOther
	}
}

// limiter holds the three buckets. Refill uses the real clock (not
// Config.Now): rate limits are about real request spacing.
type limiter struct {
	mu                              sync.Mutex
	describe, registration, account *bucket
	ec2                             *bucket // DescribeNetworkInterfaces: EC2's own
}

func (l *limiter) setEC2(b BucketConfig, now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.ec2 = newBucket(b, defaultEC2, now)
}

// allowEC2 takes a token from the EC2 action's bucket, which ELB's limits
// do not touch.
func (l *limiter) allowEC2(now time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.ec2.refill(now)
	if l.ec2.tokens < 1 {
		return false
	}
	l.ec2.tokens--
	return true
}

func (l *limiter) set(describe, registration, account BucketConfig, now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.describe = newBucket(describe, defaultDescribe, now)
	l.registration = newBucket(registration, defaultRegistration, now)
	l.account = newBucket(account, defaultAccount, now)
}

// allow takes one token from every bucket the class draws from, or none at
// all: a throttled call must not use up a token of another bucket, since AWS
// rejected it before doing anything.
func (l *limiter) allow(c actionClass, now time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	bs := []*bucket{l.account}
	switch c {
	case classDescribe:
		bs = append(bs, l.describe)
	case classRegistration:
		bs = append(bs, l.registration)
	}
	for _, b := range bs {
		b.refill(now)
		if b.tokens < 1 {
			return false
		}
	}
	for _, b := range bs {
		b.tokens--
	}
	return true
}
