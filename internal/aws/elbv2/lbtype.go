package elbv2

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/elasticloadbalancingv2"
	"github.com/aws/aws-sdk-go-v2/service/elasticloadbalancingv2/types"
)

// DescribeTargetGroupsAction is the action name passed to Config.Metrics.
const DescribeTargetGroupsAction = "DescribeTargetGroups"

// Load balancer types as ELBv2 names them (DescribeLoadBalancers Type).
const (
	TypeApplication = string(types.LoadBalancerTypeEnumApplication)
	TypeNetwork     = string(types.LoadBalancerTypeEnumNetwork)
	TypeGateway     = string(types.LoadBalancerTypeEnumGateway)
)

// groupInfo is what DescribeTargetGroups says of a group that matters
// here: its load balancer's type, the load balancers in front of it (whose
// nodes send its traffic), its VPC (theirs too) and whether its targets
// are IPv6 addresses (the nodes then send from their IPv6 addresses, else
// from their IPv4 ones), read once (a target group's load balancer never
// changes); and its health checks, which may change (ModifyTargetGroup),
// so that LearnType reads them again once older than infoRefresh.
type groupInfo struct {
	lbType string
	lbARNs []string
	vpcID  string
	ipv6   bool
	health HealthCheck
	at     time.Time // when read
}

// HealthCheck is a target group's health-check schedule, as
// DescribeTargetGroups gives it: how often each load balancer node checks
// a target, and after how many failures in a row the target is unhealthy.
type HealthCheck struct {
	Enabled            bool
	Interval           time.Duration
	UnhealthyThreshold int
}

// Unhealthy is how long a target that starts failing its checks may stay
// in service by them: Interval × UnhealthyThreshold (zero when checks are
// off).
func (h HealthCheck) Unhealthy() time.Duration {
	if !h.Enabled {
		return 0
	}
	return h.Interval * time.Duration(h.UnhealthyThreshold)
}

// infoRefresh is how old what DescribeTargetGroups said of a group may get
// before LearnType reads it again (for its health checks: the rest never
// changes).
const infoRefresh = 10 * time.Minute

// readType makes sure g's observations carry its load balancer's type:
// from memory, or with one DescribeTargetGroups call from the budget,
// after a good listing, and again after a backoff when it fails. g's
// goroutine calls it.
func (p *Poller) readType(ctx context.Context, g *group, now time.Time) {
	p.mu.Lock()
	info, ok := p.infos[g.arn]
	p.mu.Unlock()
	if !ok {
		if now.Before(g.typeRetry) || p.budget.take(ctx) != nil {
			return
		}
		var err error
		info, err = p.describeGroup(ctx, g.arn)
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			g.typeFailures++
			g.typeRetry = now.Add(p.backoff.Next(g.typeFailures))
			g.setType("", err)
			return
		}
		p.mu.Lock()
		p.infos[g.arn] = info
		p.mu.Unlock()
	}
	g.setType(info.lbType, nil)
}

// typeRetryAfter is how long LearnType waits after a failed read before
// trying again for the same ARN.
const typeRetryAfter = time.Minute

// TypeOf returns the type of the load balancer in front of arn, if the
// poller has read it.
func (p *Poller) TypeOf(arn string) (string, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	info, ok := p.infos[arn]
	return info.lbType, ok
}

// LoadBalancersOf returns the load balancers in front of arn, sorted, if
// the poller has read them.
func (p *Poller) LoadBalancersOf(arn string) []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Sorted(slices.Values(p.infos[arn].lbARNs))
}

// GroupOf returns the type of the load balancer in front of arn and the
// group's health checks, if the poller has read them; it asks LearnType to
// read them when they are unknown or older than infoRefresh (the answer is
// then the last read, if any).
func (p *Poller) GroupOf(arn string) (lbType string, health HealthCheck, ok bool) {
	p.mu.Lock()
	info, ok := p.infos[arn]
	p.mu.Unlock()
	if !ok || time.Since(info.at) >= infoRefresh {
		p.LearnType(arn)
	}
	return info.lbType, info.health, ok
}

// LearnType reads the type of the load balancer in front of arn (and the
// group's health checks) in the background, with one DescribeTargetGroups
// call from the budget, unless they were read less than infoRefresh ago, a
// read is queued or in flight, or one failed less than a minute ago (what
// was read before stays known meanwhile). It never blocks: a caller that
// sizes something from the type (the injection webhook, for a pod whose
// group nobody polled yet) uses its default now and the type from then on.
// One read at a time, in the order asked, so that many new groups (a server
// starting in a large cluster) never hold more than one place in the
// budget's queue ahead of the polls. Close ends the reads.
func (p *Poller) LearnType(arn string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if info, ok := p.infos[arn]; (ok && time.Since(info.at) < infoRefresh) || p.closed {
		return
	}
	if retry, ok := p.learning[arn]; ok && (retry.IsZero() || time.Now().Before(retry)) {
		return
	}
	p.learning[arn] = time.Time{}
	p.toLearn = append(p.toLearn, arn)
	if len(p.toLearn) == 1 {
		p.wg.Add(1)
		go p.learn()
	}
}

// learn reads the queued types one at a time until the queue is empty. The
// queue's head stays in it while read, and the decision to stop is taken
// under the same lock as the head's removal, so that LearnType starts a
// new reader exactly when none is left.
func (p *Poller) learn() {
	defer p.wg.Done()
	p.mu.Lock()
	defer p.mu.Unlock()
	for len(p.toLearn) > 0 && p.ctx.Err() == nil {
		arn := p.toLearn[0]
		p.mu.Unlock()
		var info groupInfo
		err := p.budget.take(p.ctx)
		if err == nil {
			info, err = p.describeGroup(p.ctx, arn)
		}
		p.mu.Lock()
		p.toLearn = p.toLearn[1:]
		if err != nil {
			p.learning[arn] = time.Now().Add(typeRetryAfter)
		} else {
			delete(p.learning, arn)
			p.infos[arn] = info
		}
	}
	p.toLearn = nil
}

// describeGroup reads the type of the load balancer in front of arn, the
// load balancers, the VPC and the group's health checks.
func (p *Poller) describeGroup(ctx context.Context, arn string) (groupInfo, error) {
	cctx, cancel := context.WithTimeout(ctx, p.cfg.Timeout)
	defer cancel()
	p.calls.Add(1)
	out, err := p.api.DescribeTargetGroups(cctx, &elasticloadbalancingv2.DescribeTargetGroupsInput{TargetGroupArns: []string{arn}},
		singleAttempt)
	if err != nil && ctx.Err() != nil {
		return groupInfo{}, err
	}
	p.outcome(DescribeTargetGroupsAction, err)
	if err != nil {
		return groupInfo{}, fmt.Errorf("describe target group %s: %w", arn, err)
	}
	if len(out.TargetGroups) != 1 {
		return groupInfo{}, fmt.Errorf("describe target group %s: %d groups in the answer, want 1", arn, len(out.TargetGroups))
	}
	tg := out.TargetGroups[0]
	t := typeOf(tg.LoadBalancerArns, string(tg.Protocol))
	if t == "" {
		return groupInfo{}, fmt.Errorf("target group %s has no load balancer whose type draingate can tell (protocol %q)", arn, tg.Protocol)
	}
	return groupInfo{lbType: t, lbARNs: tg.LoadBalancerArns, vpcID: aws.ToString(tg.VpcId),
		ipv6: tg.IpAddressType == types.TargetGroupIpAddressTypeEnumIpv6, at: time.Now(),
		health: HealthCheck{Enabled: aws.ToBool(tg.HealthCheckEnabled),
			Interval:           time.Duration(aws.ToInt32(tg.HealthCheckIntervalSeconds)) * time.Second,
			UnhealthyThreshold: int(aws.ToInt32(tg.UnhealthyThresholdCount))}}, nil
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
