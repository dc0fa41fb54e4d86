package elbv2

import (
	"context"
	"testing"

	"draingate.dev/draingate/internal/sim/elbv2sim"
)

func TestLoadBalancerType(t *testing.T) {
	b := newBench(t)
	var calls []string
	p := New(b.client, Config{Rate: 100, Burst: 10, Metrics: func(action, result string) { calls = append(calls, action+" "+result) }})
	defer p.Close()
	ctx := context.Background()
	for _, c := range []struct {
		lb   elbv2sim.LoadBalancerType
		want string
	}{{elbv2sim.Application, TypeApplication}, {elbv2sim.Network, TypeNetwork}} {
		arn, err := b.sim.CreateTargetGroup(elbv2sim.TargetGroupSpec{Name: "tg-" + c.want, LoadBalancerType: c.lb, Port: 80})
		if err != nil {
			t.Fatal(err)
		}
		for range 2 {
			got, err := p.LoadBalancerType(ctx, arn)
			if err != nil || got != c.want {
				t.Fatalf("LoadBalancerType(%s) = %q, %v; want %q", c.lb, got, err, c.want)
			}
		}
	}
	// Two groups, each asked twice: the second answer comes from memory.
	if len(calls) != 2 || calls[0] != "DescribeTargetGroups ok" {
		t.Errorf("calls = %q, want two DescribeTargetGroups ok", calls)
	}
	if _, err := p.LoadBalancerType(ctx, "arn:aws:elasticloadbalancing:us-east-1:123456789012:targetgroup/nope/0123456789abcdef"); err == nil {
		t.Errorf("an unknown group has a type")
	}
	if n, _ := p.Stats(); n != 3 {
		t.Errorf("Stats calls = %d, want 3", n)
	}
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
