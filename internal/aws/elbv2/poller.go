package elbv2

import (
	"context"
	"errors"
	"log/slog"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/elasticloadbalancingv2"

	"draingate.dev/draingate/internal/backoff"
)

// API is the ELBv2 calls the poller makes, all from its one budget:
// DescribeTargetHealth once per group per poll, DescribeTargetGroups once
// per group for its load balancer's type, and, for a group behind an NLB
// when Config.EC2 is set, DescribeTargetGroupAttributes every
// NodesRefresh for whether it keeps its clients' addresses and sends
// across zones, and DescribeLoadBalancerAttributes per NLB with its node
// list. *elasticloadbalancingv2.Client implements it.
type API interface {
	DescribeTargetHealth(ctx context.Context, in *elasticloadbalancingv2.DescribeTargetHealthInput, optFns ...func(*elasticloadbalancingv2.Options)) (*elasticloadbalancingv2.DescribeTargetHealthOutput, error)
	DescribeTargetGroups(ctx context.Context, in *elasticloadbalancingv2.DescribeTargetGroupsInput, optFns ...func(*elasticloadbalancingv2.Options)) (*elasticloadbalancingv2.DescribeTargetGroupsOutput, error)
	DescribeTargetGroupAttributes(ctx context.Context, in *elasticloadbalancingv2.DescribeTargetGroupAttributesInput, optFns ...func(*elasticloadbalancingv2.Options)) (*elasticloadbalancingv2.DescribeTargetGroupAttributesOutput, error)
	DescribeLoadBalancerAttributes(ctx context.Context, in *elasticloadbalancingv2.DescribeLoadBalancerAttributesInput, optFns ...func(*elasticloadbalancingv2.Options)) (*elasticloadbalancingv2.DescribeLoadBalancerAttributesOutput, error)
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

	// EC2, if set, lists the nodes of each watched group's load balancer
	// (Observation.Senders), with one DescribeNetworkInterfaces per load
	// balancer per NodesRefresh from the same budget; nil: the senders are
	// never known.
	EC2 EC2API

	// NodesRefresh is how often a load balancer's node list is read again
	// while a group behind it is watched (default 60 s). A list not read
	// for 3 × NodesRefresh is stale: the senders are then not known.
	NodesRefresh time.Duration

	// DeniedPause is how long no node list (or, per group, no NLB's
	// client IP preservation) is asked for after AWS denied the permission
	// (default 10 min).
	DeniedPause time.Duration

	// Log receives what an operator should act on: a denied
	// ec2:DescribeNetworkInterfaces or DescribeTargetGroupAttributes, each
	// said once (default slog.Default()).
	Log *slog.Logger

	// Metrics, if set, is called once per call made, with action
	// "DescribeTargetHealth", "DescribeTargetGroups",
	// "DescribeTargetGroupAttributes" or "DescribeNetworkInterfaces" (EC2)
	// and result "ok", "throttled", "denied" (a missing permission) or
	// "error"; meant for Prometheus counters. It must not block. A call
	// cut short because its group's last waiter left is counted by Stats
	// but not reported.
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
	if c.NodesRefresh <= 0 {
		c.NodesRefresh = time.Minute
	}
	if c.DeniedPause <= 0 {
		c.DeniedPause = 10 * time.Minute
	}
	if c.Log == nil {
		c.Log = slog.Default()
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

	// Senders are the addresses of the nodes of the group's load
	// balancers in the family of its targets (IPv4 or IPv6), sorted, when
	// SendersKnown: every load balancer of the group has a fresh list
	// (read less than 3 × Config.NodesRefresh ago) and does not pass its
	// clients' own addresses on. Otherwise
	// SendersWhy says why they are not known, as a phrase ("the load
	// balancer's nodes are not known: ..."), and SendersErr is the failed
	// read behind it, if any (ErrNodesDenied for a missing permission).
	// Observations share the slice: it must not be modified.
	Senders      []netip.Addr
	SendersKnown bool
	SendersWhy   string
	SendersErr   error
	// SenderZones is each sender's Availability Zone, as its network
	// interface says. CrossZoneOff says that the group's nodes send only
	// to targets of their own zone: an NLB group whose cross-zone load
	// balancing is known to be off (its own attribute, or its load
	// balancers'); never for an ALB, whose nodes are taken to send to
	// every zone. Observations share the map: it must not be modified.
	SenderZones  map[netip.Addr]string
	CrossZoneOff bool
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
	groups  map[string]*group    // ARN → group with waiters
	retired map[string]*group    // ARN → last group that lost its waiters
	infos   map[string]groupInfo // ARN → what DescribeTargetGroups said, once read
	// clientIP is, per group behind an NLB, why its nodes are not its
	// senders ("" when they are: client IP preservation is off), once
	// read; clientIPErr the last failed read.
	clientIP    map[string]string
	clientIPErr map[string]error
	// tgCrossZone is, per group behind an NLB, its
	// load_balancing.cross_zone.enabled as read with clientIP ("true",
	// "false", "use_load_balancer_configuration"; "" when absent).
	tgCrossZone map[string]string
	// clientIPAt is when each group's attributes were last read: they are
	// read again every NodesRefresh, and count as unknown once older than
	// staleAfter × NodesRefresh (either setting may change).
	clientIPAt map[string]time.Time
	// lbs are the load balancers' node lists, by load balancer ARN;
	// deniedUntil is when a denied DescribeNetworkInterfaces may be asked
	// again, deniedErr the denial (nil once a read succeeds), deniedSaid
	// whether the log said so.
	lbs         map[string]*nodeList
	deniedUntil time.Time
	deniedErr   error
	deniedSaid  bool
	// attrDeniedSaid: the log said that DescribeTargetGroupAttributes is
	// denied.
	attrDeniedSaid bool
	// learning is LearnType's state per ARN: zero while a read is in
	// flight, else when a failed read may be tried again.
	learning map[string]time.Time
	toLearn  []string // LearnType's queue, the head in flight
	// ctx ends LearnType's reads on Close.
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// New returns a Poller that makes no calls until something is watched.
func New(api API, cfg Config) *Poller {
	cfg = cfg.withDefaults()
	ctx, cancel := context.WithCancel(context.Background())
	return &Poller{
		ctx: ctx, cancel: cancel,
		learning:    map[string]time.Time{},
		api:         api,
		cfg:         cfg,
		budget:      newBudget(cfg.Rate, cfg.Burst, time.Now()),
		backoff:     backoff.Policy{Min: cfg.BackoffMin, Max: cfg.BackoffMax},
		groups:      map[string]*group{},
		retired:     map[string]*group{},
		infos:       map[string]groupInfo{},
		clientIP:    map[string]string{},
		clientIPErr: map[string]error{},
		tgCrossZone: map[string]string{},
		clientIPAt:  map[string]time.Time{},
		lbs:         map[string]*nodeList{},
	}
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
// Whether its senders are known is judged now, so a node list turns stale
// here without a new poll.
func (w *Waiter) Latest() (obs Observation, ok bool) {
	w.p.mu.Lock()
	sd := w.p.sendersLocked(w.g.arn, time.Now())
	w.p.mu.Unlock()
	w.g.mu.Lock()
	obs, ok = w.g.obs, w.g.good
	w.g.mu.Unlock()
	if ok {
		obs.Senders, obs.SendersKnown, obs.SendersWhy, obs.SendersErr = sd.addrs, sd.why == "", sd.why, sd.err
		obs.SenderZones, obs.CrossZoneOff = sd.zones, sd.crossZoneOff
	}
	return obs, ok
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
	p.cancel()
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

// Stats returns how many AWS calls the poller has made (every attempt of
// every action, EC2's included, whatever its result: every one came out of
// the budget) and how many of them were throttled.
func (p *Poller) Stats() (calls, throttled int) {
	return int(p.calls.Load()), int(p.throttled.Load())
}
