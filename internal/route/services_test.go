package route

import (
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
)

// left lists the routes the pod left within what is kept, sorted.
func left(s *Services, pod *corev1.Pod) []string {
	var out []string
	for r := range s.Left(pod) {
		out = append(out, r)
	}
	slices.Sort(out)
	return out
}

func TestEndpointOfAndRank(t *testing.T) {
	ready := EndpointOf(discoveryv1.Endpoint{})
	servingTerm := EndpointOf(discoveryv1.Endpoint{Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(false), Serving: ptr.To(true), Terminating: ptr.To(true)}})
	gone := EndpointOf(discoveryv1.Endpoint{Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(false), Serving: ptr.To(false), Terminating: ptr.To(true)}})
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
		ObjectMeta:  metav1.ObjectMeta{Name: "a-x", Namespace: "ns", Labels: map[string]string{discoveryv1.LabelServiceName: "a", "other": "y"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints: []discoveryv1.Endpoint{{Addresses: []string{"10.0.0.1"}, Conditions: discoveryv1.EndpointConditions{Terminating: ptr.To(true)},
			TargetRef: &corev1.ObjectReference{Kind: "Pod", Name: "web", UID: "u1", ResourceVersion: "9"}, NodeName: ptr.To("n")}},
		Ports: []discoveryv1.EndpointPort{{Port: ptr.To[int32](80)}},
	}
	o, ok := NewServices().Transform(sl)
	s := o.(*discoveryv1.EndpointSlice)
	if !ok || s.Labels[discoveryv1.LabelServiceName] != "a" || len(s.Labels) != 1 || s.Ports != nil || ptr.Deref(s.Endpoints[0].NodeName, "") != "n" {
		t.Errorf("slice transform: %+v", s)
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web", UID: "u1"}}
	if !isPod(s.Endpoints[0], "10.0.0.1", pod) || !EndpointOf(s.Endpoints[0]).Terminating || routeName(s) != "ns/a" {
		t.Errorf("slice transform lost the endpoint's pod, conditions or Service: %+v", s)
	}
	if _, ok := NewServices().Transform(pod); ok {
		t.Errorf("the Services claimed a pod")
	}
}

func TestTransformKeepsServicePolicies(t *testing.T) {
	itp := corev1.ServiceInternalTrafficPolicyLocal
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "a", Namespace: "ns", Annotations: map[string]string{"x": "y"}},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeNodePort, ExternalTrafficPolicy: corev1.ServiceExternalTrafficPolicyLocal,
			InternalTrafficPolicy: &itp, Ports: []corev1.ServicePort{{Port: 80}}}}
	o, ok := NewServices().Transform(svc)
	s := o.(*corev1.Service)
	if !ok || s.Name != "a" || s.Namespace != "ns" || s.Annotations != nil || s.Spec.Ports != nil ||
		s.Spec.Type != corev1.ServiceTypeNodePort || s.Spec.ExternalTrafficPolicy != corev1.ServiceExternalTrafficPolicyLocal || *s.Spec.InternalTrafficPolicy != itp {
		t.Errorf("service transform: %+v", s)
	}
	// The Local-policy tail's annotation is kept, and only it.
	svc.Annotations["draingate.dev/local-policy-tail"] = "15s"
	o, _ = NewServices().Transform(svc)
	if a := o.(*corev1.Service).Annotations; len(a) != 1 || a["draingate.dev/local-policy-tail"] != "15s" {
		t.Errorf("service transform kept annotations %v, want only %s", a, "draingate.dev/local-policy-tail")
	}
}

// An endpoint that leaves a slice (its pod taken off the Service) is
// remembered a tail long, by its pod's UID, else by its address; one that
// only moves between slices of the Service is not gone, and a deleted slice
// counts as every endpoint leaving.
func TestLeftRecently(t *testing.T) {
	now := time.Unix(1000, 0)
	s := NewServices()
	s.KeepLeft(5 * time.Second)
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
	if got := left(s, pod("10.0.0.1", "u1")); !slices.Equal(got, []string{"shop/blue"}) {
		t.Errorf("the pod taken off blue: %q", got)
	}
	if got := left(s, pod("10.0.0.1", "u9")); len(got) != 0 {
		t.Errorf("a newer pod with the address: %q; want nothing (remembered by the old pod's UID)", got)
	}
	if got := left(s, pod("10.0.0.2", "u2")); !slices.Equal(got, []string{"shop/green"}) {
		t.Errorf("the endpoint without a pod, its slice deleted: %q; want green only (it stayed in blue)", got)
	}
	now = now.Add(5 * time.Second)
	if got := left(s, pod("10.0.0.1", "u1")); len(got) != 0 {
		t.Errorf("a tail later: %q; want forgotten", got)
	}
	s.noteLeft(slice("blue"), slice("blue"))
	if len(s.left) != 0 {
		t.Errorf("memory after the tail: %v; want pruned", s.left)
	}
}
