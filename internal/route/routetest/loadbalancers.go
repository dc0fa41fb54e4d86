package routetest

import (
	"context"
	"time"
)

// LoadBalancers stands for the kind that reads the load balancers in front
// of Services (route.LoadBalancers), for tests of the kinds that ask it.
// Its answers are by Service name ("namespace/name").
type LoadBalancers struct {
	// Claimed are the Services it routes itself; ClaimErr, when set, is
	// its answer for any Service (its cache cannot tell yet).
	Claimed  map[string]bool
	ClaimErr error
	// Drains are how long its load balancers take to drain a node, and
	// Complete whether every one of them was read.
	Drains   map[string]time.Duration
	Complete bool
	// Instance are the instance target groups in front of each Service.
	Instance map[string][]string
}

// ClaimsService implements route.LoadBalancers.
func (l *LoadBalancers) ClaimsService(_ context.Context, namespace, name string) (bool, error) {
	return l.Claimed[namespace+"/"+name], l.ClaimErr
}

// NodeDrain implements route.LoadBalancers.
func (l *LoadBalancers) NodeDrain(_ context.Context, namespace, name string) (time.Duration, string, bool) {
	d, ok := l.Drains[namespace+"/"+name]
	if !ok {
		return 0, "", false
	}
	return d, "the test's load balancers, " + d.String(), l.Complete
}

// InstanceGroups implements route.LoadBalancers.
func (l *LoadBalancers) InstanceGroups(_ context.Context, namespace, name string) []string {
	return l.Instance[namespace+"/"+name]
}
