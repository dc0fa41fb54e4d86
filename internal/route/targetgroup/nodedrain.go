package targetgroup

import (
	"context"
	"fmt"
	"slices"
	"time"
)

// NodeDrain implements route.LoadBalancers: for a Service that `instance`
// target groups route to (TargetGroupBindings of targetType instance
// naming it), the longest time one of their load balancers may still send
// through a node after the node's last ready endpoint went. Under an
// external traffic policy of Local the node's health check port then
// fails, the group's checks mark the node unhealthy after HealthCheck
// Interval × UnhealthyThreshold, and the load balancer stops sending new
// traffic a tail of its type later (as after a deregistration; see
// docs/facts.md, "AWS, Local policy, instance targets").
//
// complete is false when a group's settings are not read yet (the poller
// is asked to read them; meanwhile the group counts for the tail of a load
// balancer of unknown type, the NLB's, so that not knowing never makes the
// drain shorter than reading would), when its health checks are off (the
// node is never drained by them), when the bindings cannot be listed, or
// when no instance binding names the Service: the caller then keeps its
// own default as a floor.
func (s *Source) NodeDrain(ctx context.Context, namespace, name string) (d time.Duration, why string, complete bool) {
	if !s.on.Load() || !s.synced.Load() || s.cfg.Poller == nil {
		return 0, "", false
	}
	bs, err := s.instanceBindings(ctx, namespace, name)
	if err != nil || len(bs) == 0 {
		return 0, "", false
	}
	complete = true
	for _, b := range bs {
		lbType, hc, ok := s.cfg.Poller.GroupOf(b.ARN)
		if !ok {
			complete = false
			if t, tailName := s.tail(""); t > d {
				d, why = t, fmt.Sprintf("target group %s not read yet: the %s tail, %s", b.ARN, tailName, t)
			}
			continue
		}
		if !hc.Enabled || hc.Interval <= 0 || hc.UnhealthyThreshold <= 0 {
			complete = false
			continue
		}
		tail, tailName := s.tail(lbType)
		if t := hc.Unhealthy() + tail; t > d {
			d = t
			why = fmt.Sprintf("target group %s's health checks, %s × %d, then the %s tail, %s", b.ARN, hc.Interval, hc.UnhealthyThreshold, tailName, tail)
		}
	}
	return d, why, complete
}

// InstanceGroups implements route.LoadBalancers: the ARNs of the instance
// TargetGroupBindings naming the Service namespace/name, sorted; none while
// the bindings are not read (or on an error, which the caller only words
// differently).
func (s *Source) InstanceGroups(ctx context.Context, namespace, name string) []string {
	if !s.on.Load() || !s.synced.Load() {
		return nil
	}
	bs, err := s.instanceBindings(ctx, namespace, name)
	if err != nil {
		return nil
	}
	arns := make([]string, 0, len(bs))
	for _, b := range bs {
		arns = append(arns, b.ARN)
	}
	slices.Sort(arns)
	return slices.Compact(arns)
}

// instanceBindings are the instance TargetGroupBindings of namespace that
// name the Service name.
func (s *Source) instanceBindings(ctx context.Context, namespace, name string) ([]Binding, error) {
	return s.bindings(ctx, namespace, func(b Binding) bool { return b.TargetType == "instance" && b.Service == name })
}
