package elbv2

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/aws/aws-sdk-go-v2/service/elasticloadbalancingv2"
)

// DescribeTargetGroupsAPI is the call LoadBalancerType makes;
// *elasticloadbalancingv2.Client implements it.
type DescribeTargetGroupsAPI interface {
	DescribeTargetGroups(ctx context.Context, in *elasticloadbalancingv2.DescribeTargetGroupsInput, optFns ...func(*elasticloadbalancingv2.Options)) (*elasticloadbalancingv2.DescribeTargetGroupsOutput, error)
}

// DescribeTargetGroupsAction is the action name passed to Config.Metrics.
const DescribeTargetGroupsAction = "DescribeTargetGroups"

// Load balancer types as DescribeLoadBalancers names them.
const (
	TypeApplication = "application"
	TypeNetwork     = "network"
	TypeGateway     = "gateway"
)

// LoadBalancerType reads the type of the load balancer in front of the
// target group arn ("application", "network" or "gateway") with one
// DescribeTargetGroups call, taken from the same budget as the polls. The
// answer is remembered for the Poller's life (a target group's protocol and
// load balancer never change); a failure is not, so the caller may ask
// again later. It fails when the API the Poller was made with has no
// DescribeTargetGroups, or when the group has no load balancer yet.
func (p *Poller) LoadBalancerType(ctx context.Context, arn string) (string, error) {
	p.mu.Lock()
	t, ok := p.lbTypes[arn]
	p.mu.Unlock()
	if ok {
		return t, nil
	}
	api, ok := p.api.(DescribeTargetGroupsAPI)
	if !ok {
		return "", errors.New("the ELBv2 client cannot describe target groups")
	}
	if err := p.budget.take(ctx); err != nil {
		return "", err
	}
	cctx, cancel := context.WithTimeout(ctx, p.cfg.Timeout)
	defer cancel()
	p.calls.Add(1)
	out, err := api.DescribeTargetGroups(cctx, &elasticloadbalancingv2.DescribeTargetGroupsInput{TargetGroupArns: []string{arn}},
		singleAttempt)
	p.outcome(DescribeTargetGroupsAction, err)
	if err != nil {
		return "", fmt.Errorf("describe target group %s: %w", arn, err)
	}
	if len(out.TargetGroups) != 1 {
		return "", fmt.Errorf("describe target group %s: %d groups in the answer, want 1", arn, len(out.TargetGroups))
	}
	tg := out.TargetGroups[0]
	t = typeOf(tg.LoadBalancerArns, string(tg.Protocol))
	if t == "" {
		return "", fmt.Errorf("target group %s has no load balancer whose type draingate can tell (protocol %q)", arn, tg.Protocol)
	}
	p.mu.Lock()
	if p.lbTypes == nil {
		p.lbTypes = map[string]string{}
	}
	p.lbTypes[arn] = t
	p.mu.Unlock()
	return t, nil
}

// typeOf reads a load balancer type from its ARN
// (arn:...:loadbalancer/app/NAME/ID, /net/, /gwy/), or failing that from the
// target group's protocol.
func typeOf(lbARNs []string, protocol string) string {
	for _, a := range lbARNs {
		switch {
		case strings.Contains(a, ":loadbalancer/app/"):
			return TypeApplication
		case strings.Contains(a, ":loadbalancer/net/"):
			return TypeNetwork
		case strings.Contains(a, ":loadbalancer/gwy/"):
			return TypeGateway
		}
	}
	switch protocol {
	case "HTTP", "HTTPS":
		return TypeApplication
	case "TCP", "TLS", "UDP", "TCP_UDP", "QUIC", "TCP_QUIC":
		return TypeNetwork
	case "GENEVE":
		return TypeGateway
	}
	return ""
}
