// Package route is what a source of routes implements: it observes the
// routes of one terminating pod and hands the gate one gate.Observation per
// route. Each kind of route is a folder below this one (endpointslice,
// targetgroup); adding a kind is adding a folder and listing its Source in
// server.New, with no edit to the gate.
package route

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"draingate.dev/draingate/internal/gate"
)

// Source observes the routes of one kind for terminating pods. The cache
// calls Transform for every object it stores; the server calls Start once,
// then Ready, Observe and Forget, those three under its own lock.
type Source interface {
	// Kind names the source's routes (api.Route.Kind).
	Kind() string
	// Transform slims an object of one of the source's own types before it
	// enters the shared cache; ok is false for any other object.
	Transform(obj any) (out any, ok bool)
	// Start registers the source's informers and indexes on c and starts
	// its background work, until ctx ends. It calls changed whenever the
	// routes of pods may have changed: namespace "" means every pod, name
	// "" every pod of the namespace. changed must not be called with any
	// lock held that Observe takes.
	Start(ctx context.Context, c cache.Cache, changed func(namespace, name string)) error
	// Ready says why the source cannot observe yet (nil once it can).
	Ready() error
	// Observe returns one observation for every route of the pod, at least
	// one for each name in known (the routes this source reported for this
	// pod before: a route stays a route after its owner drops the pod).
	// waiting says the pod's agent is asking: a source may do costly work
	// (AWS polls) only then. An error means no observation at all: the
	// gate answers no verdict rather than one that forgets a route.
	Observe(ctx context.Context, pod *corev1.Pod, known []string, waiting bool) ([]gate.Observation, error)
	// Forget tells the source that nobody waits for the pod any more (its
	// agent stopped asking, or the pod is gone): it may stop work done for
	// it. A later Observe with waiting starts it again.
	Forget(pod PodKey)
}

// PodKey names one pod incarnation.
type PodKey struct {
	Namespace, Name, UID string
}

// KeyOf returns the pod's key.
func KeyOf(pod *corev1.Pod) PodKey {
	return PodKey{Namespace: pod.Namespace, Name: pod.Name, UID: string(pod.UID)}
}

// String is "namespace/name".
func (k PodKey) String() string { return k.Namespace + "/" + k.Name }

// IPs returns the pod's addresses.
func IPs(pod *corev1.Pod) []string {
	var ips []string
	for _, ip := range pod.Status.PodIPs {
		ips = append(ips, ip.IP)
	}
	if len(ips) == 0 && pod.Status.PodIP != "" {
		ips = append(ips, pod.Status.PodIP)
	}
	return ips
}

// NamespaceHandler is an informer handler that tells changed the namespace
// of every object added, updated or deleted.
func NamespaceHandler(changed func(namespace, name string)) toolscache.ResourceEventHandler {
	ns := func(o any) {
		if t, ok := o.(toolscache.DeletedFinalStateUnknown); ok {
			o = t.Obj
		}
		if c, ok := o.(client.Object); ok {
			changed(c.GetNamespace(), "")
		}
	}
	return toolscache.ResourceEventHandlerFuncs{
		AddFunc:    ns,
		UpdateFunc: func(_, o any) { ns(o) },
		DeleteFunc: ns,
	}
}
