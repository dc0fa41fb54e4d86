// Package external is the route kind of load balancers draingate cannot
// query: a Service of type LoadBalancer on another cloud (GKE, Azure) or on
// premises (MetalLB, F5), or on AWS without TargetGroupBindings. Such a
// load balancer learns that a pod left from its endpoint (its controller
// watches EndpointSlices, or health-checks the pod or its node) and stops
// sending on its own clock, which no API tells. So its route goes out with
// the pod's endpoint and closes a tail later (--tail-external, or the
// Service's TailAnnotation). The pod's traffic may lengthen that wait,
// never shorten it: who sends cannot be listed.
//
// The kind is on by default only where no other kind claims Services (the
// target-group kind off: --target-groups=false, which the chart's
// targetGroups=false sets; on GKE or Azure with the chart's defaults it is
// off until then); --external-routes=true turns it on beside target groups
// for the LoadBalancer Services no `ip` TargetGroupBinding names.
package external

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"

	"draingate.dev/draingate/internal/evidence"
	"draingate.dev/draingate/internal/gate"
	"draingate.dev/draingate/internal/route"
)

// Kind names the routes (api.Route.Kind).
const Kind = "external"

// DefaultTail is --tail-external's default: Google's own example for a
// pod behind a GKE load balancer waits 40 s in preStop (its health checks
// 5 s × 2); Azure's probes take a backend out after 2 × 5 s. See
// docs/facts.md, "Other load balancers and in-cluster proxies".
const DefaultTail = 40 * time.Second

// TailAnnotation on a Service sets its load balancer's tail (a Go
// duration).
const TailAnnotation = "draingate.dev/external-tail"

// leftMemory is the least time endpoints that left are remembered for the
// kind: longer than any tail an annotation is likely to set.
const leftMemory = 10 * time.Minute

// covered is the tail the default max-wait is sized for: a longer
// external tail asks admission for the rest (AdmissionWait).
const covered = route.Covered

// States of an external route.
const (
	StateReady       = "ready"
	StateTerminating = "terminating"
	StateNotReady    = "not-ready"
	StateGone        = "gone"
)

// Source observes external routes. Make it with New.
type Source struct {
	tail   time.Duration
	forced bool // --external-routes=true: on beside a kind that claims Services

	services *route.Services
	claimer  route.LoadBalancers // nil: no kind claims Services
	active   atomic.Bool

	// tails is the tail each route (namespace/service) was last read
	// with: a Service gone from the cache keeps its annotated tail.
	mu    sync.Mutex
	tails map[string]time.Duration
}

// New returns a source whose routes take tail (negative counts as zero);
// forced keeps it on beside a kind that claims Services.
func New(tail time.Duration, forced bool) *Source {
	return &Source{tail: max(tail, 0), forced: forced, tails: map[string]time.Duration{}}
}

// Kind implements route.Source.
func (s *Source) Kind() string { return Kind }

// Start implements route.Source: the kind caches nothing of its own; it
// reads the Services (with their draingate.dev annotations), and whether
// another kind claims Services.
func (s *Source) Start(_ context.Context, h route.Host) error {
	s.services, s.claimer = h.Services, h.LoadBalancers
	// A pod taken off a LoadBalancer Service (a blue/green switch) and
	// deleted soon after is still that load balancer's for its tail.
	s.services.KeepLeft(max(2*s.tail, leftMemory))
	s.active.Store(s.forced || s.claimer == nil)
	return nil
}

// Active says whether the kind finds new routes: routes it reported before
// (in another replica, say) are observed either way.
func (s *Source) Active() bool { return s.active.Load() }

// Ready implements route.Source: the Services say their own.
func (s *Source) Ready() error {
	if s.services == nil {
		return errors.New("external routes have not started")
	}
	return s.services.Ready()
}

// Routed says whether svc is a route of this kind: a Service of type
// LoadBalancer that no other kind claims.
func Routed(svc *corev1.Service, claimed bool) bool {
	return svc != nil && svc.Spec.Type == corev1.ServiceTypeLoadBalancer && !claimed
}

// claimed says whether another kind claims the Service. An error counts as
// not claimed: the route is then waited for, which can only lengthen.
func (s *Source) claimed(ctx context.Context, namespace, name string) bool {
	if s.claimer == nil {
		return false
	}
	c, err := s.claimer.ClaimsService(ctx, namespace, name)
	return err == nil && c
}

// Observe implements route.Source: one route per LoadBalancer Service whose
// slices list the pod and no other kind claims, and one per route in known.
func (s *Source) Observe(ctx context.Context, pod *corev1.Pod, known []gate.Known, _ bool) ([]gate.Observation, error) {
	if s.services == nil {
		return nil, errors.New("external routes have not started")
	}
	eps, err := s.services.ServiceEndpoints(ctx, pod)
	if err != nil {
		return nil, err
	}
	names := map[string]bool{}
	for _, k := range known {
		names[k.Name] = true
	}
	if s.active.Load() {
		for name := range eps {
			if Routed(s.services.Service(ctx, pod.Namespace, name), s.claimed(ctx, pod.Namespace, name)) {
				names[pod.Namespace+"/"+name] = true
			}
		}
		now := time.Now()
		for routeName, at := range s.services.Left(pod) {
			_, name, _ := strings.Cut(routeName, "/")
			svc := s.services.Service(ctx, pod.Namespace, name)
			if _, listed := eps[name]; listed || !Routed(svc, s.claimed(ctx, pod.Namespace, name)) {
				continue
			}
			if tail := s.rememberTail(routeName, svc); now.Sub(at) < tail {
				names[routeName] = true
			}
		}
	}
	out := make([]gate.Observation, 0, len(names))
	for _, name := range slices.Sorted(maps.Keys(names)) {
		_, svcName, _ := strings.Cut(name, "/")
		e, present := eps[svcName]
		svc := s.services.Service(ctx, pod.Namespace, svcName)
		o := Judge(e, present, svc, s.tail)
		o.Name = name
		if t := s.rememberTail(name, svc); t > o.Tail {
			o.Tail, o.TailName = t, "external load balancer (the Service's "+TailAnnotation+" as last read)"
		}
		out = append(out, o)
	}
	return out, nil
}

// rememberTail is the route's tail: the Service's (svc), remembered, or,
// with the Service gone from the cache, the one last read, never less than
// the default.
func (s *Source) rememberTail(name string, svc *corev1.Service) time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	if svc != nil {
		t, _ := Tail(svc, s.tail)
		s.tails[name] = t
		return t
	}
	return max(s.tails[name], s.tail)
}

// Judge reads the pod's endpoint in the Service svc (nil when not in the
// cache): out once gone, terminating or not ready, a tail of def or the
// Service's TailAnnotation. The traffic may lengthen it, never shorten it.
// Name is left to the caller.
func Judge(e route.Endpoint, present bool, svc *corev1.Service, def time.Duration) gate.Observation {
	o := gate.Observation{Kind: Kind, Synced: true, WeighTraffic: true,
		Senders: evidence.Senders{Why: "a load balancer draingate cannot query: its nodes cannot be listed"}}
	switch {
	case !present:
		o.State, o.Out, o.What = StateGone, true, "the Service's slices no longer list the pod's endpoint"
	case e.Terminating:
		o.State, o.Out, o.What = StateTerminating, true, "the Service's slices list the pod's endpoint as terminating: its load balancer takes it out on its own clock"
	case !e.Ready:
		o.State, o.Out, o.What = StateNotReady, true, "the Service's slices list the pod's endpoint as not ready: its load balancer takes it out on its own clock"
	default:
		o.State, o.What = StateReady, "the Service's slices list the pod's endpoint as ready"
	}
	var why string
	o.Tail, why = Tail(svc, def)
	o.TailName = "external load balancer" + why
	return o
}

// Tail is the tail of svc's load balancer: the Service's TailAnnotation,
// else def. An annotation that is not a duration takes def, and the phrase
// why says so for the route's detail.
func Tail(svc *corev1.Service, def time.Duration) (d time.Duration, why string) {
	return route.AnnotatedTail(svc, TailAnnotation, def)
}

// AdmissionWait implements route.Source: the longest tail beyond what the
// default max-wait covers (an ALB's 20 s) of the LoadBalancer Services
// that select the pod and no other kind claims. A cache error answers the
// default tail's extra and says why.
func (s *Source) AdmissionWait(ctx context.Context, pod *corev1.Pod) (time.Duration, string, error) {
	if !s.active.Load() || s.services == nil {
		return 0, "", nil
	}
	list, err := s.services.List(ctx, pod.Namespace)
	if err != nil {
		return max(s.tail-covered, 0), fmt.Sprintf("the external tail (%s)", s.tail), err
	}
	var longest time.Duration
	var why string
	for i := range list {
		svc := &list[i]
		if !route.SelectsLabels(svc, pod.Labels) || !Routed(svc, s.claimed(ctx, svc.Namespace, svc.Name)) {
			continue
		}
		if t, w := Tail(svc, s.tail); t > longest {
			longest, why = t, fmt.Sprintf("the external load balancer tail (%s%s) of Service %s/%s", t, w, svc.Namespace, svc.Name)
		}
	}
	if longest <= covered {
		return 0, why, nil
	}
	return longest - covered, why, nil
}
