package elbv2

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/elasticloadbalancingv2"
	elbtypes "github.com/aws/aws-sdk-go-v2/service/elasticloadbalancingv2/types"

	"draingate.dev/draingate/proving/sim/elbv2sim"
)

// The type of a group's load balancer comes with its observations, read
// once per group from the budget, whatever the waiters come and go.
func TestLoadBalancerType(t *testing.T) {
	b := newBench(t)
	var res results
	p := New(b.client, Config{Rate: 100, Burst: 10, Interval: 10 * time.Millisecond, Metrics: res.hook})
	defer p.Close()
	for _, c := range []struct {
		lb   elbv2sim.LoadBalancerType
		want string
	}{{elbv2sim.Application, TypeApplication}, {elbv2sim.Network, TypeNetwork}} {
		arn, err := b.sim.CreateTargetGroup(elbv2sim.TargetGroupSpec{Name: "tg-" + c.want, LoadBalancerType: c.lb, Port: 80})
		if err != nil {
			t.Fatal(err)
		}
		for range 2 { // a second incarnation of the group reads it from memory
			w := p.Watch(arn)
			waitFor(t, "the type of "+arn, func() bool { o, ok := w.Latest(); return ok && o.LoadBalancerType != "" })
			if o, _ := w.Latest(); o.LoadBalancerType != c.want || o.TypeErr != nil {
				t.Errorf("%s: type %q (%v), want %q", c.lb, o.LoadBalancerType, o.TypeErr, c.want)
			}
			w.Close()
		}
	}
	res.mu.Lock()
	defer res.mu.Unlock()
	if n := res.n[DescribeTargetGroupsAction+" ok"]; n != 2 {
		t.Errorf("%d DescribeTargetGroups calls, want one per group: %v", n, res.n)
	}
}

// GroupOf reads a group's health checks (for an instance group under a
// Local policy, how long its load balancer takes to drain a node) with its
// type, through the SDK from the emulator: unknown at first, asked for,
// then known, from one DescribeTargetGroups call.
func TestGroupHealthChecks(t *testing.T) {
	b := newBench(t)
	var res results
	p := New(b.client, Config{Rate: 100, Burst: 10, Interval: 10 * time.Millisecond, Metrics: res.hook})
	defer p.Close()
	arn, err := b.sim.CreateTargetGroup(elbv2sim.TargetGroupSpec{Name: "nodes", LoadBalancerType: elbv2sim.Network, Port: 30080,
		TargetType: "instance", HealthCheckInterval: 10 * time.Second, UnhealthyThreshold: 3})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, ok := p.GroupOf(arn); ok {
		t.Fatal("a group never read is known")
	}
	var (
		lbType string
		hc     HealthCheck
		ok     bool
	)
	waitFor(t, "the group read", func() bool { lbType, hc, ok = p.GroupOf(arn); return ok })
	want := HealthCheck{Enabled: true, Interval: 10 * time.Second, UnhealthyThreshold: 3}
	if lbType != TypeNetwork || hc != want || hc.Unhealthy() != 30*time.Second {
		t.Errorf("type %q, health checks %+v (unhealthy after %s); want %q, %+v, 30s", lbType, hc, hc.Unhealthy(), TypeNetwork, want)
	}
	for range 3 {
		p.GroupOf(arn) // fresh: no new read
	}
	res.mu.Lock()
	defer res.mu.Unlock()
	if n := res.n[DescribeTargetGroupsAction+" ok"]; n != 1 {
		t.Errorf("%d DescribeTargetGroups calls, want 1: %v", n, res.n)
	}
}

// A group whose type cannot be read still gets its listings, and says why
// its type is unknown.
func TestLoadBalancerTypeUnknown(t *testing.T) {
	b := newBench(t)
	var res results
	p := New(onlyHealth{b.client}, Config{Rate: 100, Burst: 10, Interval: 10 * time.Millisecond, BackoffMin: 10 * time.Millisecond, Metrics: res.hook})
	defer p.Close()
	arn := b.group(t, "typeless", time.Minute)
	w := p.Watch(arn)
	defer w.Close()
	waitFor(t, "a type error", func() bool { o, ok := w.Latest(); return ok && o.TypeErr != nil })
	if o, _ := w.Latest(); o.LoadBalancerType != "" || o.Err != nil {
		t.Errorf("type %q, listing error %v; want no type and a good listing", o.LoadBalancerType, o.Err)
	}
}

// onlyHealth answers DescribeTargetGroups with an error.
type onlyHealth struct{ API }

func (onlyHealth) DescribeTargetGroups(context.Context, *elasticloadbalancingv2.DescribeTargetGroupsInput, ...func(*elasticloadbalancingv2.Options)) (*elasticloadbalancingv2.DescribeTargetGroupsOutput, error) {
	return nil, errors.New("AccessDenied: not allowed to describe target groups")
}

func TestTypeOf(t *testing.T) {
	for _, c := range []struct {
		arns     []string
		protocol string
		want     string
	}{
		{[]string{"arn:aws:elasticloadbalancing:eu-west-1:1:loadbalancer/net/a/1"}, "HTTP", TypeNetwork},
		{[]string{"arn:aws:elasticloadbalancing:eu-west-1:1:loadbalancer/app/a/1"}, "", TypeApplication},
		{nil, "HTTPS", TypeApplication},
		{nil, "TCP_UDP", TypeNetwork},
		{nil, "GENEVE", TypeGateway},
		{nil, "", ""},
	} {
		if got := typeOf(c.arns, c.protocol); got != c.want {
			t.Errorf("typeOf(%q, %q) = %q, want %q", c.arns, c.protocol, got, c.want)
		}
	}
}

// LearnType reads a group's type in the background, with one call for any
// number of askers, without polling the group; a failure is not retried
// at once.
func TestLearnType(t *testing.T) {
	b := newBench(t)
	var res results
	p := New(b.client, Config{Rate: 100, Burst: 10, Interval: 10 * time.Millisecond, Metrics: res.hook})
	defer p.Close()
	arn, err := b.sim.CreateTargetGroup(elbv2sim.TargetGroupSpec{Name: "tg-learn", LoadBalancerType: elbv2sim.Network, Port: 80})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := p.TypeOf(arn); ok {
		t.Fatal("a type known before any read")
	}
	for range 5 {
		p.LearnType(arn)
	}
	waitFor(t, "the learnt type", func() bool { _, ok := p.TypeOf(arn); return ok })
	if typ, _ := p.TypeOf(arn); typ != TypeNetwork {
		t.Errorf("type %q, want %q", typ, TypeNetwork)
	}
	p.LearnType(arn) // known: no call
	w := p.Watch(arn)
	waitFor(t, "a listing", func() bool { o, ok := w.Latest(); return ok && o.LoadBalancerType == TypeNetwork })
	w.Close()
	// Many new groups at once: queued, each read once.
	more := albGroups(t, b, "tg-learn", 4)
	for _, a := range more {
		p.LearnType(a)
		p.LearnType(a)
	}
	for _, a := range more {
		waitFor(t, "the type of "+a, func() bool { typ, ok := p.TypeOf(a); return ok && typ == TypeApplication })
	}
	res.mu.Lock()
	if n := res.n[DescribeTargetGroupsAction+" ok"]; n != 1+len(more) {
		t.Errorf("%d DescribeTargetGroups calls, want one per group (%d): %v", n, 1+len(more), res.n)
	}
	res.mu.Unlock()

	var failing results
	q := New(onlyHealth{b.client}, Config{Rate: 100, Burst: 10, Interval: 10 * time.Millisecond, Metrics: failing.hook})
	defer q.Close()
	q.LearnType(arn)
	waitFor(t, "the failed read", func() bool {
		q.mu.Lock()
		defer q.mu.Unlock()
		return !q.learning[arn].IsZero()
	})
	q.LearnType(arn) // failed less than a minute ago: not again
	if _, ok := q.TypeOf(arn); ok {
		t.Error("a type learnt from a failed read")
	}
	q.Close()
	if calls, _ := q.Stats(); calls != 1 {
		t.Errorf("%d calls after a failure and a second ask, want 1", calls)
	}
}

// LearnType called from many goroutines while reads finish (the binding
// informer and the webhook do): every group's type is read, each once, and
// Close ends a read in flight.
func TestLearnTypeConcurrent(t *testing.T) {
	b := newBench(t)
	var res results
	p := New(b.client, Config{Rate: 1000, Burst: 100, Interval: 10 * time.Millisecond, Metrics: res.hook})
	arns := albGroups(t, b, "tg-many", 40)
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range arns {
				p.LearnType(arns[(i*(w+1))%len(arns)])
				if i%3 == w%3 {
					time.Sleep(time.Millisecond)
				}
			}
		}()
	}
	wg.Wait()
	for _, a := range arns {
		waitFor(t, "the type of "+a, func() bool { _, ok := p.TypeOf(a); return ok })
	}
	res.mu.Lock()
	if n := res.n[DescribeTargetGroupsAction+" ok"]; n != len(arns) {
		t.Errorf("%d DescribeTargetGroups calls, want one per group (%d)", n, len(arns))
	}
	res.mu.Unlock()

	// A read waiting on an empty budget when the poller closes.
	q := New(b.client, Config{Rate: 0.001, Burst: 1, Interval: 10 * time.Millisecond})
	q.LearnType(arns[0])
	q.LearnType(arns[1])
	q.Close() // returns only once the read waiting on the budget ended
	p.Close()
}

// albGroups creates n ALB target groups in the bench's emulator, named
// prefix-0, prefix-1, ...
func albGroups(t *testing.T, b *bench, prefix string, n int) []string {
	t.Helper()
	var arns []string
	for i := range n {
		a, err := b.sim.CreateTargetGroup(elbv2sim.TargetGroupSpec{Name: fmt.Sprintf("%s-%d", prefix, i), LoadBalancerType: elbv2sim.Application, Port: 80})
		if err != nil {
			t.Fatal(err)
		}
		arns = append(arns, a)
	}
	return arns
}

// instantTypes answers DescribeTargetGroups at once, without the network:
// only for stressing LearnType's queue, where the emulator's round trips
// would hide the interleavings.
type instantTypes struct{ API }

func (instantTypes) DescribeTargetGroups(_ context.Context, in *elasticloadbalancingv2.DescribeTargetGroupsInput, _ ...func(*elasticloadbalancingv2.Options)) (*elasticloadbalancingv2.DescribeTargetGroupsOutput, error) {
	return &elasticloadbalancingv2.DescribeTargetGroupsOutput{TargetGroups: []elbtypes.TargetGroup{{TargetGroupArn: &in.TargetGroupArns[0], Protocol: elbtypes.ProtocolEnumHttp}}}, nil
}

// TestLearnTypeQueueStress: askers racing the reader's end of queue start
// at most one reader, lose no group and never leave one "in flight".
func TestLearnTypeQueueStress(t *testing.T) {
	p := New(instantTypes{}, Config{Rate: 1e9, Burst: 1 << 30})
	defer p.Close()
	const askers, each = 4, 2000
	var wg sync.WaitGroup
	for g := range askers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				p.LearnType(fmt.Sprintf("arn-%d-%d", g, i))
				if i%3 == 0 {
					time.Sleep(time.Duration(i*7919%50) * time.Microsecond)
				}
			}
		}()
	}
	wg.Wait()
	waitFor(t, "every type", func() bool {
		p.mu.Lock()
		defer p.mu.Unlock()
		return len(p.infos) == askers*each
	})
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.learning) != 0 || len(p.toLearn) != 0 {
		t.Errorf("%d groups still marked as being read, %d queued", len(p.learning), len(p.toLearn))
	}
}
