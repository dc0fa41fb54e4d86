package server

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"draingate.dev/draingate/internal/aws/elbv2"
	"draingate.dev/draingate/internal/sim/lbc"
)

func TestTransformsKeepWhatTheGateReads(t *testing.T) {
	now := metav1.Now()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "ns", UID: "u1", DeletionTimestamp: &now,
			Labels: map[string]string{"app": "web"}, Annotations: map[string]string{"big": "x"},
			ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubelet"}}},
		Spec:   corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "app"}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.0.0.1", PodIPs: []corev1.PodIP{{IP: "10.0.0.1"}}, Conditions: []corev1.PodCondition{{Type: corev1.PodReady}}},
	}
	o, _ := transformPod(pod)
	p := o.(*corev1.Pod)
	if p.Name != "web" || p.UID != "u1" || p.DeletionTimestamp == nil || podIPs(p)[0] != "10.0.0.1" {
		t.Errorf("pod transform lost identity, deletion or IP: %+v", p)
	}
	if len(p.Spec.Containers) != 0 || p.Labels != nil || p.Annotations != nil || p.ManagedFields != nil || p.Status.Conditions != nil {
		t.Errorf("pod transform kept fields the gate never reads: %+v", p)
	}

	sl := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: "a-x", Namespace: "ns", Labels: map[string]string{serviceNameLabel: "a", "other": "y"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints: []discoveryv1.Endpoint{{Addresses: []string{"10.0.0.1"}, Conditions: discoveryv1.EndpointConditions{Terminating: ptr.To(true)},
			TargetRef: &corev1.ObjectReference{Kind: "Pod", Name: "web", UID: "u1", ResourceVersion: "9"}, NodeName: ptr.To("n")}},
		Ports: []discoveryv1.EndpointPort{{Port: ptr.To[int32](80)}},
	}
	o, _ = transformSlice(sl)
	s := o.(*discoveryv1.EndpointSlice)
	if s.Labels[serviceNameLabel] != "a" || len(s.Labels) != 1 || s.Ports != nil || s.Endpoints[0].NodeName != nil {
		t.Errorf("slice transform: %+v", s)
	}
	if !endpointIsPod(s.Endpoints[0], "10.0.0.1", p) || !viewOf(s.Endpoints[0]).terminating {
		t.Errorf("slice transform lost the endpoint's pod or conditions: %+v", s.Endpoints[0])
	}

	b := lbc.Binding{Namespace: "ns", Name: "web", TargetGroupARN: "arn:tg", TargetType: "ip", ServiceName: "a", ServicePort: intstr.FromInt32(80)}.Object()
	b.Object["status"] = map[string]any{"observedGeneration": int64(3)}
	o, _ = transformBinding(b)
	u := o.(*unstructured.Unstructured)
	if got := bindingFrom(u); got != (binding{Namespace: "ns", Name: "web", ARN: "arn:tg", TargetType: "ip", Service: "a"}) {
		t.Errorf("binding after transform: %+v", got)
	}
	if _, ok := u.Object["status"]; ok {
		t.Errorf("binding transform kept the status")
	}
}

func TestEndpointIsPod(t *testing.T) {
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
		if got := endpointIsPod(c.e, "10.0.0.1", pod); got != c.want {
			t.Errorf("%s: endpointIsPod = %v, want %v", c.name, got, c.want)
		}
	}
}

func TestTargetOfPrefersTheMostInState(t *testing.T) {
	targets := map[elbv2.Target]elbv2.Health{
		{ID: "10.0.0.1", Port: 80}:   {State: "draining", Reason: "Target.DeregistrationInProgress"},
		{ID: "10.0.0.1", Port: 9090}: {State: "healthy"},
		{ID: "10.0.0.2", Port: 80}:   {State: "healthy"},
	}
	if s, _ := targetOf(targets, []string{"10.0.0.1"}); s != "healthy" {
		t.Errorf("state %q: a pod with one target still healthy is still in", s)
	}
	delete(targets, elbv2.Target{ID: "10.0.0.1", Port: 9090})
	if s, r := targetOf(targets, []string{"10.0.0.1"}); s != "draining" || r != "Target.DeregistrationInProgress" {
		t.Errorf("state %q reason %q, want draining", s, r)
	}
	if s, _ := targetOf(targets, []string{"10.0.0.9"}); s != "" {
		t.Errorf("absent target has state %q", s)
	}
}

func TestServingFallbackRank(t *testing.T) {
	ready := viewOf(discoveryv1.Endpoint{})
	servingTerm := viewOf(discoveryv1.Endpoint{Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(false), Serving: ptr.To(true), Terminating: ptr.To(true)}})
	gone := viewOf(discoveryv1.Endpoint{Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(false), Serving: ptr.To(false), Terminating: ptr.To(true)}})
	if !ready.ready || !ready.serving || ready.terminating {
		t.Errorf("nil conditions: %+v, want ready and serving", ready)
	}
	if !(ready.rank() > servingTerm.rank() && servingTerm.rank() > gone.rank()) {
		t.Errorf("ranks ready %d, serving-terminating %d, terminating %d: want decreasing", ready.rank(), servingTerm.rank(), gone.rank())
	}
}
