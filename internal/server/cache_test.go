package server

import (
	"context"
	"log/slog"
	"maps"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"draingate.dev/draingate/api"
	"draingate.dev/draingate/internal/route"
)

// The server's one transform slims pods and namespaces itself and hands
// every other object to the source that owns its type (each source tests
// its own transform).
func TestTransformKeepsWhatTheGateReads(t *testing.T) {
	// Every kind's source, opened with no cluster (none starts).
	var sources []route.Source
	for _, k := range routeKinds(t, "--aws-region=us-east-1") {
		src, err := k.Open(context.Background(), route.Env{Registry: prometheus.NewRegistry(), Log: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		if c, ok := src.(route.Closer); ok {
			t.Cleanup(c.Close)
		}
		sources = append(sources, src)
	}
	tr := transform(route.NewServices(), sources)
	now := metav1.Now()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "ns", UID: "u1", DeletionTimestamp: &now,
			Labels: map[string]string{"app": "web"}, Annotations: map[string]string{"big": "x"},
			ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubelet"}}},
		Spec: corev1.PodSpec{NodeName: "node-1", HostNetwork: true, Containers: []corev1.Container{{Name: "app", Image: "app"}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.0.0.1", PodIPs: []corev1.PodIP{{IP: "10.0.0.1"}}, Conditions: []corev1.PodCondition{{Type: corev1.PodReady}},
			HostIP: "192.168.0.5", HostIPs: []corev1.HostIP{{IP: "192.168.0.5"}}},
	}
	injected := pod.DeepCopy()
	injected.Annotations[api.AnnotationInjected] = "v1"
	if o, _ := tr(injected); !maps.Equal(o.(*corev1.Pod).Annotations, map[string]string{api.AnnotationInjected: "v1"}) {
		t.Errorf("pod transform: annotations %v, want the injector's mark alone (the pod's memory is shared)", o.(*corev1.Pod).Annotations)
	}
	o, _ := tr(pod)
	p := o.(*corev1.Pod)
	if p.Name != "web" || p.UID != "u1" || p.DeletionTimestamp == nil || route.IPs(p)[0] != "10.0.0.1" {
		t.Errorf("pod transform lost identity, deletion or IP: %+v", p)
	}
	if p.Spec.NodeName != "node-1" {
		t.Errorf("pod transform lost the node, by which a Local Service's fallback is judged")
	}
	if !p.Spec.HostNetwork {
		t.Errorf("pod transform lost hostNetwork: the wait API would take the node's address for the pod's own")
	}
	if p.Status.HostIP != "192.168.0.5" || len(p.Status.HostIPs) != 1 {
		t.Errorf("pod transform lost the host addresses the traffic evidence classifies by: %+v", p.Status)
	}
	if len(p.Spec.Containers) != 0 || p.Labels != nil || p.Annotations != nil || p.ManagedFields != nil || p.Status.Conditions != nil {
		t.Errorf("pod transform kept fields the gate never reads: %+v", p)
	}

	ns := &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Name: "shop", Labels: map[string]string{"draingate.dev/inject": "enabled"},
		Annotations: map[string]string{"big": "x"}}}
	o, _ = tr(ns)
	if m := o.(*metav1.PartialObjectMetadata); m.Name != "shop" || m.Labels["draingate.dev/inject"] != "enabled" || m.Annotations != nil {
		t.Errorf("namespace transform: %+v", m)
	}

	sl := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Name: "a-x", Namespace: "ns", Labels: map[string]string{"other": "y"}}}
	if o, _ = tr(sl); o.(*discoveryv1.EndpointSlice).Labels != nil {
		t.Errorf("a slice did not go through the Services' transform: %+v", o)
	}
	local := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "a", Labels: map[string]string{"x": "y"}},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, ExternalTrafficPolicy: corev1.ServiceExternalTrafficPolicyLocal, Selector: map[string]string{"app": "web"}}}
	if s := must(tr(local)).(*corev1.Service); s.Labels != nil || s.Spec.Selector["app"] != "web" || s.Spec.ExternalTrafficPolicy != corev1.ServiceExternalTrafficPolicyLocal || s.Spec.Type != corev1.ServiceTypeLoadBalancer {
		t.Errorf("a Service did not go through the Services' transform, keeping its type, policy and selector (admission sizing): %+v", s)
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "a", Labels: map[string]string{"x": "y"}}}
	if o, _ = tr(cm); o != any(cm) {
		t.Errorf("an object nobody owns was changed")
	}
}

func must(o any, err error) any {
	if err != nil {
		panic(err)
	}
	return o
}
