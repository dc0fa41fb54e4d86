package elbv2

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/elasticloadbalancingv2"

	"draingate.dev/draingate/internal/sim/elbv2sim"
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
