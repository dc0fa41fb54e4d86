package server

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"draingate.dev/draingate/api"
	"draingate.dev/draingate/internal/route"
	"draingate.dev/draingate/internal/webhook"
)

// The transforms keep what the server reads and drop the rest before an
// object enters the cache: a pod's spec and most of its status, and
// whatever each route source leaves out of its own objects. On a big
// cluster the pod cache is most of the server's memory.

// transform returns the cache's one transform: it picks by the object's
// type (pods, namespaces, Services and slices, then each source's own) and
// leaves any other object as it is. One transform for every type, because
// a ByObject entry for a CRD's type would make the cache look up its REST
// mapping, and fail, while the CRD is not installed.
func transform(services *route.Services, sources []route.Source) func(any) (any, error) {
	return func(obj any) (any, error) {
		switch o := obj.(type) {
		case *corev1.Pod:
			out := &corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{
					Name: o.Name, Namespace: o.Namespace, UID: o.UID, ResourceVersion: o.ResourceVersion,
					DeletionTimestamp: o.DeletionTimestamp, DeletionGracePeriodSeconds: o.DeletionGracePeriodSeconds,
				},
				// HostIP(s): the node's addresses, whose traffic (probes)
				// is never a load balancer's (traffic evidence).
				Status: corev1.PodStatus{Phase: o.Status.Phase, PodIP: o.Status.PodIP, PodIPs: o.Status.PodIPs,
					HostIP: o.Status.HostIP, HostIPs: o.Status.HostIPs},
				// NodeName: kube-proxy's fallback is per node for a
				// Service with a Local traffic policy. HostNetwork: such
				// a pod's address is its node's, which proves nothing to
				// the wait API (see internal/agentauth).
				Spec: corev1.PodSpec{NodeName: o.Spec.NodeName, HostNetwork: o.Spec.HostNetwork},
			}
			// The injector's mark: the pod has the agent, and its memory
			// is shared among replicas from its first observation.
			if v := o.Annotations[api.AnnotationInjected]; v != "" {
				out.Annotations = map[string]string{api.AnnotationInjected: v}
			}
			return out, nil
		}
		if out, ok := webhook.Transform(obj); ok {
			return out, nil
		}
		if out, ok := services.Transform(obj); ok {
			return out, nil
		}
		for _, src := range sources {
			if t, ok := src.(route.Transformer); ok {
				if out, ok := t.Transform(obj); ok {
					return out, nil
				}
			}
		}
		return obj, nil
	}
}
