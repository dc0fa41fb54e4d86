package server

import (
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// TargetGroupBinding is the AWS Load Balancer Controller's resource.
var (
	TargetGroupBindingGVK     = schema.GroupVersionKind{Group: "elbv2.k8s.aws", Version: "v1beta1", Kind: "TargetGroupBinding"}
	targetGroupBindingListGVK = schema.GroupVersionKind{Group: "elbv2.k8s.aws", Version: "v1beta1", Kind: "TargetGroupBindingList"}
)

const (
	// serviceNameLabel names an EndpointSlice's Service.
	serviceNameLabel = discoveryv1.LabelServiceName
	// addressIndex indexes EndpointSlices by their endpoints' addresses.
	addressIndex = "draingate.addresses"
)

// The transforms keep what the server reads and drop the rest before an
// object enters the cache: a pod's spec and most of its status, slices'
// ports and hints, TargetGroupBindings' status and networking. On a big
// cluster the pod cache is most of the server's memory.

// transform is the cache's one transform: it picks by the object's type and
// leaves any other object as it is.
func transform(obj any) (any, error) {
	switch o := obj.(type) {
	case *corev1.Pod:
		return transformPod(o)
	case *discoveryv1.EndpointSlice:
		return transformSlice(o)
	case *unstructured.Unstructured:
		if o.GroupVersionKind().GroupKind() == TargetGroupBindingGVK.GroupKind() {
			return transformBinding(o)
		}
	case *metav1.PartialObjectMetadata:
		return transformNamespace(o)
	}
	return obj, nil
}

func transformPod(obj any) (any, error) {
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return obj, nil
	}
	return &corev1.Pod{
		ObjectMeta: slimMeta(p.ObjectMeta, nil),
		Status:     corev1.PodStatus{Phase: p.Status.Phase, PodIP: p.Status.PodIP, PodIPs: p.Status.PodIPs},
	}, nil
}

func transformSlice(obj any) (any, error) {
	s, ok := obj.(*discoveryv1.EndpointSlice)
	if !ok {
		return obj, nil
	}
	out := &discoveryv1.EndpointSlice{
		ObjectMeta:  slimMeta(s.ObjectMeta, []string{serviceNameLabel}),
		AddressType: s.AddressType,
		Endpoints:   make([]discoveryv1.Endpoint, len(s.Endpoints)),
	}
	for i, e := range s.Endpoints {
		out.Endpoints[i] = discoveryv1.Endpoint{Addresses: e.Addresses, Conditions: e.Conditions}
		if r := e.TargetRef; r != nil {
			out.Endpoints[i].TargetRef = &corev1.ObjectReference{Kind: r.Kind, Namespace: r.Namespace, Name: r.Name, UID: r.UID}
		}
	}
	return out, nil
}

func transformBinding(obj any) (any, error) {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return obj, nil
	}
	out := &unstructured.Unstructured{Object: map[string]any{}}
	out.SetGroupVersionKind(u.GroupVersionKind())
	out.SetName(u.GetName())
	out.SetNamespace(u.GetNamespace())
	out.SetUID(u.GetUID())
	out.SetResourceVersion(u.GetResourceVersion())
	spec := map[string]any{}
	for _, k := range []string{"targetGroupARN", "targetType", "serviceRef"} {
		if v, ok, _ := unstructured.NestedFieldNoCopy(u.Object, "spec", k); ok {
			spec[k] = v
		}
	}
	out.Object["spec"] = spec
	return out, nil
}

// slimMeta keeps identity, deletion and the given labels.
func slimMeta(m metav1.ObjectMeta, labels []string) metav1.ObjectMeta {
	out := metav1.ObjectMeta{
		Name: m.Name, Namespace: m.Namespace, UID: m.UID, ResourceVersion: m.ResourceVersion,
		DeletionTimestamp: m.DeletionTimestamp, DeletionGracePeriodSeconds: m.DeletionGracePeriodSeconds,
	}
	for _, l := range labels {
		if v, ok := m.Labels[l]; ok {
			if out.Labels == nil {
				out.Labels = map[string]string{}
			}
			out.Labels[l] = v
		}
	}
	return out
}

// sliceAddresses is the address index's extractor.
func sliceAddresses(o client.Object) []string {
	s, ok := o.(*discoveryv1.EndpointSlice)
	if !ok {
		return nil
	}
	var out []string
	for _, e := range s.Endpoints {
		out = append(out, e.Addresses...)
	}
	return out
}

// binding is the part of a TargetGroupBinding the gate reads.
type binding struct {
	Namespace, Name string
	ARN             string
	TargetType      string
	Service         string
}

func bindingFrom(u *unstructured.Unstructured) binding {
	b := binding{Namespace: u.GetNamespace(), Name: u.GetName()}
	b.ARN, _, _ = unstructured.NestedString(u.Object, "spec", "targetGroupARN")
	b.TargetType, _, _ = unstructured.NestedString(u.Object, "spec", "targetType")
	b.Service, _, _ = unstructured.NestedString(u.Object, "spec", "serviceRef", "name")
	return b
}
