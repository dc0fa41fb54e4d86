package elbv2

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/elasticloadbalancingv2"

	"draingate.dev/draingate/proving/sim/elbv2sim"
	"draingate.dev/draingate/proving/testutil"
)

// waitLimit bounds every wait for a condition; generous because the machine
// may be busy. Tests assert counts, orders and states, never durations.
const waitLimit = 30 * time.Second

// bench is the ELBv2 emulator on loopback with a real SDK client for it.
type bench struct {
	sim    *elbv2sim.Server
	client *elasticloadbalancingv2.Client
}

// newBench starts the emulator. The client keeps the SDK's default retryer
// (3 attempts): the poller must switch it off per call by itself.
func newBench(tb testing.TB) *bench {
	tb.Helper()
	sim := elbv2sim.New(elbv2sim.Config{})
	if _, err := sim.Listen("127.0.0.1:0"); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { sim.Close() })
	return &bench{sim: sim, client: sim.Client()}
}

// group creates a target group whose health checks and drains are fast.
func (b *bench) group(tb testing.TB, name string, drain time.Duration) string {
	tb.Helper()
	arn, err := b.sim.CreateTargetGroup(elbv2sim.TargetGroupSpec{
		Name: name, Port: 80,
		HealthCheckInterval: 20 * time.Millisecond,
		HealthCheckTimeout:  500 * time.Millisecond,
		DeregistrationDelay: drain,
	})
	if err != nil {
		tb.Fatal(err)
	}
	return arn
}

// describeCalls is what the emulator counted for DescribeTargetHealth:
// successful, throttled and all calls.
func (b *bench) describeCalls() (ok, throttled, all int) {
	for result, n := range b.sim.Calls()["DescribeTargetHealth"] {
		all += n
		switch result {
		case "OK":
			ok += n
		case "Throttling":
			throttled += n
		}
	}
	return ok, throttled, all
}

// healthyTarget is an HTTP server on loopback that passes health checks.
func healthyTarget(tb testing.TB) elbv2sim.Target {
	tb.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {}))
	tb.Cleanup(srv.Close)
	host, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	p, _ := strconv.Atoi(port)
	return elbv2sim.Target{ID: host, Port: int32(p)}
}

// waitFor is testutil.Eventually bounded by waitLimit.
func waitFor(tb testing.TB, what string, cond func() bool) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	testutil.Eventually(tb, ctx, what, func() (bool, error) { return cond(), nil })
}

// results counts Config.Metrics reports.
type results struct {
	mu sync.Mutex
	n  map[string]int
}

func (r *results) hook(action, result string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.n == nil {
		r.n = map[string]int{}
	}
	r.n[action+" "+result]++
}

func (r *results) get(result string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.n[DescribeTargetHealthAction+" "+result]
}

// withinBudget fails the test if calls exceed what Rate and Burst allow
// over elapsed (plus one for rounding at the edges).
func withinBudget(tb testing.TB, calls int, cfg Config, elapsed time.Duration) {
	tb.Helper()
	allowed := float64(cfg.Burst) + cfg.Rate*elapsed.Seconds() + 1
	if float64(calls) > allowed {
		tb.Errorf("%d calls in %v, budget allows %.1f (burst %d + %v/s)", calls, elapsed, allowed, cfg.Burst, cfg.Rate)
	}
}

// countingAPI passes calls to the real client and records which target
// group each was for, in order.
type countingAPI struct {
	api API
	mu  sync.Mutex
	seq []string
}

func (c *countingAPI) DescribeTargetHealth(ctx context.Context, in *elasticloadbalancingv2.DescribeTargetHealthInput, optFns ...func(*elasticloadbalancingv2.Options)) (*elasticloadbalancingv2.DescribeTargetHealthOutput, error) {
	c.mu.Lock()
	c.seq = append(c.seq, aws.ToString(in.TargetGroupArn))
	c.mu.Unlock()
	return c.api.DescribeTargetHealth(ctx, in, optFns...)
}

func (c *countingAPI) DescribeTargetGroups(ctx context.Context, in *elasticloadbalancingv2.DescribeTargetGroupsInput, optFns ...func(*elasticloadbalancingv2.Options)) (*elasticloadbalancingv2.DescribeTargetGroupsOutput, error) {
	return c.api.DescribeTargetGroups(ctx, in, optFns...)
}

func (c *countingAPI) DescribeTargetGroupAttributes(ctx context.Context, in *elasticloadbalancingv2.DescribeTargetGroupAttributesInput, optFns ...func(*elasticloadbalancingv2.Options)) (*elasticloadbalancingv2.DescribeTargetGroupAttributesOutput, error) {
	return c.api.DescribeTargetGroupAttributes(ctx, in, optFns...)
}

func (c *countingAPI) DescribeLoadBalancerAttributes(ctx context.Context, in *elasticloadbalancingv2.DescribeLoadBalancerAttributesInput, optFns ...func(*elasticloadbalancingv2.Options)) (*elasticloadbalancingv2.DescribeLoadBalancerAttributesOutput, error) {
	return c.api.DescribeLoadBalancerAttributes(ctx, in, optFns...)
}

func (c *countingAPI) perGroup() (map[string]int, int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	m := map[string]int{}
	for _, arn := range c.seq {
		m[arn]++
	}
	return m, len(c.seq)
}
