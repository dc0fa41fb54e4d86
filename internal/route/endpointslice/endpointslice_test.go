package endpointslice

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"draingate.dev/draingate/internal/route"
	"draingate.dev/draingate/internal/route/routetest"
)

func TestJudge(t *testing.T) {
	ready := route.Endpoint{Ready: true, Serving: true}
	servingTerm := route.Endpoint{Serving: true, Terminating: true}
	term := route.Endpoint{Terminating: true}
	for _, c := range []struct {
		name              string
		e                 route.Endpoint
		present, fallback bool
		state             string
		out               bool
	}{
		{"ready", ready, true, false, StateReady, false},
		{"terminating", servingTerm, true, false, StateTerminating, true},
		{"terminating, not serving", term, true, false, StateTerminating, true},
		{"not ready", route.Endpoint{}, true, false, StateNotReady, true},
		{"gone", route.Endpoint{}, false, false, StateGone, true},
		{"serving terminating fallback", servingTerm, true, true, StateTerminatingServing, false},
		{"fallback needs serving", term, true, true, StateTerminating, true},
	} {
		o := Judge(c.e, c.present, c.fallback)
		if o.State != c.state || o.Out != c.out || o.Kind != Kind || !o.Synced || o.NotRoute || o.What == "" || o.TailName != "EndpointSlice" {
			t.Errorf("%s: %+v, want state %q out %v", c.name, o, c.state, c.out)
		}
	}
}

// kube-proxy falls back to serving terminating endpoints when no ready one
// is left in the cluster, or, for a Local traffic policy, on the node.
func TestFallback(t *testing.T) {
	for _, c := range []struct {
		cluster, node, local, want bool
	}{
		{true, true, false, false},
		{true, false, false, false}, // Cluster policy: another node's ready endpoint takes the traffic
		{false, false, false, true},
		{true, false, true, true}, // Local: the only ready endpoints are elsewhere; this node's kube-proxy still sends here
		{true, true, true, false},
		{false, false, true, true},
	} {
		if got := Fallback(c.cluster, c.node, c.local); got != c.want {
			t.Errorf("Fallback(ready in cluster %t, on node %t, local %t) = %t, want %t", c.cluster, c.node, c.local, got, c.want)
		}
	}
}

// The last ready endpoint on its node under a Local policy: the route is
// out and weighs the pod's traffic, whose senders cannot be listed (the
// evidence only lengthens); behind a load balancer (an external Local
// policy) its floor is the load balancer's drain of the node: its own
// settings where another kind read them all (an instance target group's
// health checks), else the Service's annotation or the default, which
// what was read may only lengthen; never below the EndpointSlice tail.
// For an internal Local policy (in-cluster clients on the node) the
// EndpointSlice tail.
func TestNodeOnly(t *testing.T) {
	const tail, local = 5 * time.Second, 60 * time.Second
	svc := func(typ corev1.ServiceType, etp corev1.ServiceExternalTrafficPolicy, annotation string) *corev1.Service {
		s := &corev1.Service{Spec: corev1.ServiceSpec{Type: typ, ExternalTrafficPolicy: etp}}
		if annotation != "" {
			s.Annotations = map[string]string{LocalTailAnnotation: annotation}
		}
		return s
	}
	itp := corev1.ServiceInternalTrafficPolicyLocal
	internal := svc(corev1.ServiceTypeClusterIP, "", "")
	internal.Spec.InternalTrafficPolicy = &itp
	lbLocal := svc(corev1.ServiceTypeLoadBalancer, corev1.ServiceExternalTrafficPolicyLocal, "")
	short := LBDrain{D: 30 * time.Second, Why: "health checks 5s × 2, then the ALB tail, 20s", Complete: true}
	long := LBDrain{D: 320 * time.Second, Why: "health checks 10s × 2, then the NLB tail, 5m0s", Complete: true}
	for _, c := range []struct {
		name     string
		svc      *corev1.Service
		lb       LBDrain
		tail     time.Duration
		tailName string
	}{
		{"LoadBalancer, Local", lbLocal, LBDrain{}, local, "Local-policy node drain"},
		{"NodePort, Local", svc(corev1.ServiceTypeNodePort, corev1.ServiceExternalTrafficPolicyLocal, ""), LBDrain{}, local, "Local-policy node drain"},
		{"annotated 15s", svc(corev1.ServiceTypeLoadBalancer, corev1.ServiceExternalTrafficPolicyLocal, "15s"), LBDrain{}, 15 * time.Second, "local-policy-tail"},
		{"annotated below the slice tail", svc(corev1.ServiceTypeLoadBalancer, corev1.ServiceExternalTrafficPolicyLocal, "1s"), LBDrain{}, tail, "local-policy-tail"},
		{"annotation not a duration", svc(corev1.ServiceTypeLoadBalancer, corev1.ServiceExternalTrafficPolicyLocal, "soon"), LBDrain{}, local, "not a duration"},
		{"internal Local", internal, LBDrain{}, tail, "EndpointSlice"},
		// The load balancer's own settings, read, replace the default,
		// shorter or longer.
		{"group read, shorter than the default", lbLocal, short, short.D, "ALB tail"},
		{"group read, longer than the default", lbLocal, long, long.D, "NLB tail"},
		// A group not read yet (or one of several): the default stays a
		// floor, what was read may lengthen it.
		{"groups read in part, shorter", lbLocal, LBDrain{D: short.D, Why: short.Why}, local, "Local-policy node drain"},
		{"groups read in part, longer", lbLocal, LBDrain{D: long.D, Why: long.Why}, long.D, "NLB tail"},
		// An annotation is a floor the read settings only lengthen.
		{"annotated 45s, group read shorter", svc(corev1.ServiceTypeLoadBalancer, corev1.ServiceExternalTrafficPolicyLocal, "45s"), short, 45 * time.Second, "local-policy-tail"},
		{"annotated 45s, group read longer", svc(corev1.ServiceTypeLoadBalancer, corev1.ServiceExternalTrafficPolicyLocal, "45s"), long, long.D, "NLB tail"},
		{"annotation not a duration, group read", svc(corev1.ServiceTypeLoadBalancer, corev1.ServiceExternalTrafficPolicyLocal, "soon"), short, short.D, "ALB tail"},
		{"internal Local, group read", internal, long, tail, "EndpointSlice"},
	} {
		o := Judge(route.Endpoint{Service: "web", Terminating: true, Serving: true}, true, false)
		o.Name, o.Tail = "shop/web", tail
		o = NodeOnly(o, c.svc, tail, local, c.lb)
		if !o.Out || !o.WeighTraffic || o.State != StateTerminatingServing || o.Tail != c.tail || !strings.Contains(o.TailName, c.tailName) {
			t.Errorf("%s: out %t, weighs traffic %t, state %s, tail %s %q; want out, weighed, %s, tail %s naming %q",
				c.name, o.Out, o.WeighTraffic, o.State, o.Tail, o.TailName, StateTerminatingServing, c.tail, c.tailName)
		}
		if o.Senders.Known || o.Senders.SeenAreAll || o.Senders.Why == "" {
			t.Errorf("%s: senders %+v; want not listed, saying why (the evidence may only lengthen)", c.name, o.Senders)
		}
	}
}

// The drain of the load balancers in front of a Service under an external
// Local policy comes from the kind that reads them; a Service without one
// asks nothing.
func TestLBDrainAsksTheLoadBalancers(t *testing.T) {
	lbs := &routetest.LoadBalancers{Drains: map[string]time.Duration{"shop/web": 30 * time.Second}, Complete: true}
	s := New(DefaultTail, DefaultLocalTail)
	s.lbs = lbs
	local := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web"},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, ExternalTrafficPolicy: corev1.ServiceExternalTrafficPolicyLocal}}
	if lb := s.lbDrain(context.Background(), local); lb.D != 30*time.Second || !lb.Complete || !strings.Contains(lb.Why, "test") {
		t.Errorf("Local: %+v, want the load balancers' 30s, complete", lb)
	}
	cluster := local.DeepCopy()
	cluster.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyCluster
	if lb := s.lbDrain(context.Background(), cluster); lb != (LBDrain{}) {
		t.Errorf("Cluster policy: %+v, want nothing asked", lb)
	}
	s.lbs = nil
	if lb := s.lbDrain(context.Background(), local); lb != (LBDrain{}) {
		t.Errorf("no kind reads load balancers: %+v, want nothing", lb)
	}
}
