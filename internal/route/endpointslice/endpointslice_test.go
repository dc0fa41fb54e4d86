package endpointslice

import (
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
)

func TestJudge(t *testing.T) {
	ready := Endpoint{Ready: true, Serving: true}
	servingTerm := Endpoint{Serving: true, Terminating: true}
	term := Endpoint{Terminating: true}
	for _, c := range []struct {
		name              string
		e                 Endpoint
		present, fallback bool
		state             string
		out               bool
	}{
		{"ready", ready, true, false, StateReady, false},
		{"terminating", servingTerm, true, false, StateTerminating, true},
		{"terminating, not serving", term, true, false, StateTerminating, true},
		{"not ready", Endpoint{}, true, false, StateNotReady, true},
		{"gone", Endpoint{}, false, false, StateGone, true},
		{"serving terminating fallback", servingTerm, true, true, StateTerminatingServing, false},
		{"fallback needs serving", term, true, true, StateTerminating, true},
	} {
		o := Judge(c.e, c.present, c.fallback)
		if o.State != c.state || o.Out != c.out || o.Kind != Kind || !o.Synced || o.NotRoute || o.What == "" || o.TailName != "EndpointSlice" {
			t.Errorf("%s: %+v, want state %q out %v", c.name, o, c.state, c.out)
		}
	}
}

func TestEndpointOfAndRank(t *testing.T) {
	ready := endpointOf(discoveryv1.Endpoint{})
	servingTerm := endpointOf(discoveryv1.Endpoint{Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(false), Serving: ptr.To(true), Terminating: ptr.To(true)}})
	gone := endpointOf(discoveryv1.Endpoint{Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(false), Serving: ptr.To(false), Terminating: ptr.To(true)}})
	if !ready.Ready || !ready.Serving || ready.Terminating {
		t.Errorf("nil conditions: %+v, want ready and serving", ready)
	}
	if !(ready.rank() > servingTerm.rank() && servingTerm.rank() > gone.rank()) {
		t.Errorf("ranks ready %d, serving-terminating %d, terminating %d: want decreasing", ready.rank(), servingTerm.rank(), gone.rank())
	}
}

func TestIsPod(t *testing.T) {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web", UID: "u1"}}
	for _, c := range []struct {
		name string
		e    discoveryv1.Endpoint
		want bool
	}{
		{"same uid", discoveryv1.Endpoint{Addresses: []string{"10.0.0.1"}, TargetRef: &corev1.ObjectReference{Kind: "Pod", Name: "web", UID: "u1"}}, true},
		{"ip reused by a newer pod", discoveryv1.Endpoint{Addresses: []string{"10.0.0.1"}, TargetRef: &corev1.ObjectReference{Kind: "Pod", Name: "web-2", UID: "u2"}}, false},
		{"no target ref", discoveryv1.Endpoint{Addresses: []string{"10.0.0.1"}}, true},
		{"other address", discoveryv1.Endpoint{Addresses: []string{"10.0.0.2"}, TargetRef: &corev1.ObjectReference{Kind: "Pod", Name: "web", UID: "u1"}}, false},
	} {
		if got := isPod(c.e, "10.0.0.1", pod); got != c.want {
			t.Errorf("%s: isPod = %v, want %v", c.name, got, c.want)
		}
	}
}

func TestTransformKeepsWhatTheGateReads(t *testing.T) {
	sl := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: "a-x", Namespace: "ns", Labels: map[string]string{serviceNameLabel: "a", "other": "y"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints: []discoveryv1.Endpoint{{Addresses: []string{"10.0.0.1"}, Conditions: discoveryv1.EndpointConditions{Terminating: ptr.To(true)},
			TargetRef: &corev1.ObjectReference{Kind: "Pod", Name: "web", UID: "u1", ResourceVersion: "9"}, NodeName: ptr.To("n")}},
		Ports: []discoveryv1.EndpointPort{{Port: ptr.To[int32](80)}},
	}
	o, ok := New(0, 0).Transform(sl)
	s := o.(*discoveryv1.EndpointSlice)
	if !ok || s.Labels[serviceNameLabel] != "a" || len(s.Labels) != 1 || s.Ports != nil || ptr.Deref(s.Endpoints[0].NodeName, "") != "n" {
		t.Errorf("slice transform: %+v", s)
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web", UID: "u1"}}
	if !isPod(s.Endpoints[0], "10.0.0.1", pod) || !endpointOf(s.Endpoints[0]).Terminating || routeName(s) != "ns/a" {
		t.Errorf("slice transform lost the endpoint's pod, conditions or Service: %+v", s)
	}
	if _, ok := New(0, 0).Transform(pod); ok {
		t.Errorf("the slice source claimed a pod")
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

func TestTransformKeepsServicePolicies(t *testing.T) {
	itp := corev1.ServiceInternalTrafficPolicyLocal
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "a", Namespace: "ns", Annotations: map[string]string{"x": "y"}},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeNodePort, ExternalTrafficPolicy: corev1.ServiceExternalTrafficPolicyLocal,
			InternalTrafficPolicy: &itp, Ports: []corev1.ServicePort{{Port: 80}}}}
	o, ok := New(0, 0).Transform(svc)
	s := o.(*corev1.Service)
	if !ok || s.Name != "a" || s.Namespace != "ns" || s.Annotations != nil || s.Spec.Ports != nil ||
		s.Spec.Type != corev1.ServiceTypeNodePort || s.Spec.ExternalTrafficPolicy != corev1.ServiceExternalTrafficPolicyLocal || *s.Spec.InternalTrafficPolicy != itp {
		t.Errorf("service transform: %+v", s)
	}
	// The Local-policy tail's annotation is kept, and only it.
	svc.Annotations[LocalTailAnnotation] = "15s"
	o, _ = New(0, 0).Transform(svc)
	if a := o.(*corev1.Service).Annotations; len(a) != 1 || a[LocalTailAnnotation] != "15s" {
		t.Errorf("service transform kept annotations %v, want only %s", a, LocalTailAnnotation)
	}
}

// An endpoint that leaves a slice (its pod taken off the Service) is
// remembered a tail long, by its pod's UID, else by its address; one that
// only moves between slices of the Service is not gone, and a deleted slice
// counts as every endpoint leaving.
func TestLeftRecently(t *testing.T) {
	now := time.Unix(1000, 0)
	s := New(5*time.Second, 0)
	s.now = func() time.Time { return now }
	ep := func(ip, uid string) discoveryv1.Endpoint {
		e := discoveryv1.Endpoint{Addresses: []string{ip}}
		if uid != "" {
			e.TargetRef = &corev1.ObjectReference{Kind: "Pod", UID: types.UID(uid)}
		}
		return e
	}
	slice := func(svc string, eps ...discoveryv1.Endpoint) *discoveryv1.EndpointSlice {
		return &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: svc + "-x",
			Labels: map[string]string{discoveryv1.LabelServiceName: svc}}, Endpoints: eps}
	}
	pod := func(ip, uid string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web", UID: types.UID(uid)},
			Status: corev1.PodStatus{PodIP: ip, PodIPs: []corev1.PodIP{{IP: ip}}}}
	}
	s.noteLeft(slice("blue", ep("10.0.0.1", "u1"), ep("10.0.0.2", "")), slice("blue", ep("10.0.0.2", "")))
	s.noteLeft(slice("green", ep("10.0.0.2", "")), nil)
	if got := s.leftRecently(pod("10.0.0.1", "u1")); !slices.Equal(got, []string{"shop/blue"}) {
		t.Errorf("the pod taken off blue: %q", got)
	}
	if got := s.leftRecently(pod("10.0.0.1", "u9")); len(got) != 0 {
		t.Errorf("a newer pod with the address: %q; want nothing (remembered by the old pod's UID)", got)
	}
	if got := s.leftRecently(pod("10.0.0.2", "u2")); !slices.Equal(got, []string{"shop/green"}) {
		t.Errorf("the endpoint without a pod, its slice deleted: %q; want green only (it stayed in blue)", got)
	}
	now = now.Add(5 * time.Second)
	if got := s.leftRecently(pod("10.0.0.1", "u1")); len(got) != 0 {
		t.Errorf("a tail later: %q; want forgotten", got)
	}
	s.noteLeft(slice("blue"), slice("blue"))
	if len(s.left) != 0 {
		t.Errorf("memory after the tail: %v; want pruned", s.left)
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
		o := Judge(Endpoint{Service: "web", Terminating: true, Serving: true}, true, false)
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
