// Package endpointslice is the route through a Service's EndpointSlices:
// one route per Service that lists the pod, whose consumers are kube-proxy
// on every node, ingress controllers and meshes. It also covers `instance`
// target groups, which reach the pod through kube-proxy.
//
// The route is out when the pod's endpoint is gone, terminating or not
// ready, except while kube-proxy still falls back to a serving terminating
// endpoint because the Service has no ready one left (KEP-1669; see
// docs/facts.md, "EndpointSlice conditions").
package endpointslice

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	"draingate.dev/draingate/internal/evidence"
	"draingate.dev/draingate/internal/gate"
	"draingate.dev/draingate/internal/route"
)

// Kind is the routes' kind, as api.Route.Kind carries it.
const Kind = "endpointslice"

// DefaultTail is how long kube-proxy, ingress controllers and meshes may
// still send after a slice took the pod out (about a second for
// kube-proxy, seconds for the others).
const DefaultTail = 5 * time.Second

// Endpoint states, as the verdict shows them.
const (
	StateReady              = "ready"               // listed, ready
	StateNotReady           = "not-ready"           // listed, not ready, not terminating
	StateTerminating        = "terminating"         // listed, terminating
	StateTerminatingServing = "terminating-serving" // listed, terminating, still kube-proxy's fallback
	StateGone               = "gone"                // not listed
)

// DefaultLocalTail is how long a load balancer may still send a node's
// traffic after the node's last ready endpoint of a Service with an
// external traffic policy of Local went: its health checks of the node
// take it out (the AWS Load Balancer Controller checks every 10 s and
// takes the node out after 2 failures), and then it stops opening new
// connections (users measured 30-40 s more on an NLB). See docs/facts.md,
// "Other load balancers and in-cluster proxies".
const DefaultLocalTail = 60 * time.Second

// LocalTailAnnotation on a Service sets its Local-policy tail (a Go
// duration), for a load balancer whose health checks are faster or slower
// than the default assumes.
const LocalTailAnnotation = route.AnnotationPrefix + "local-policy-tail"

// Source observes EndpointSlice routes. Make it with New.
type Source struct {
	tail time.Duration
	// localTail is DefaultLocalTail's setting (--tail-local-policy).
	localTail time.Duration
	// services are the Services and their slices (set by Start).
	services *route.Services
	// lbs reads the load balancers in front of a Service, where a kind can
	// (set by Start; nil: none can): how long they take to drain a node
	// under a Local policy, and which instance target groups send to its
	// node ports.
	lbs route.LoadBalancers
}

// New returns a source whose routes take the given tail, and localTail
// where a load balancer drains the pod's node (LocalTail); a negative one
// counts as zero (the route closes as soon as it is out).
func New(tail, localTail time.Duration) *Source {
	return &Source{tail: max(tail, 0), localTail: max(localTail, 0)}
}

// Kind implements route.Source.
func (s *Source) Kind() string { return Kind }

// Start implements route.Source: the endpoints that left a route are kept
// a tail long (route.Services.KeepLeft).
func (s *Source) Start(_ context.Context, h route.Host) error {
	s.services, s.lbs = h.Services, h.LoadBalancers
	s.services.KeepLeft(s.tail)
	return nil
}

// Ready implements route.Source.
func (s *Source) Ready() error {
	if s.services == nil {
		return errors.New("the EndpointSlice routes have not started")
	}
	return s.services.Ready()
}

// AdmissionWait implements route.Source: the EndpointSlice tail is within
// every pod's max-wait; a load balancer's drain of the pod's node (the
// Services that select the pod with an external traffic policy of Local,
// NodeDrain) may need longer than the default max-wait covers
// (route.Covered), and asks for the rest. A cache error answers the
// default drain's extra and says why.
func (s *Source) AdmissionWait(ctx context.Context, pod *corev1.Pod) (time.Duration, string, error) {
	if s.services == nil {
		return 0, "", nil
	}
	list, err := s.services.List(ctx, pod.Namespace)
	if err != nil {
		return max(s.localTail-route.Covered, 0), fmt.Sprintf("the Local-policy node drain (%s)", s.localTail), err
	}
	var longest time.Duration
	var why string
	for i := range list {
		svc := &list[i]
		if !externalLocal(svc) || !route.SelectsLabels(svc, pod.Labels) {
			continue
		}
		if d, w := NodeDrain(svc, s.localTail, s.lbDrain(ctx, svc)); d > longest {
			longest, why = d, fmt.Sprintf("the Local-policy node drain (%s%s) of Service %s/%s", d, w, svc.Namespace, svc.Name)
		}
	}
	return max(longest-route.Covered, 0), why, nil
}

// leftRecently is the routes the pod's endpoint left less than a tail ago.
func (s *Source) leftRecently(pod *corev1.Pod) []string {
	var out []string
	now := time.Now()
	for r, at := range s.services.Left(pod) {
		if now.Sub(at) < s.tail {
			out = append(out, r)
		}
	}
	return out
}

// Observe implements route.Source: one route per Service whose slices list
// the pod, per route its endpoint left less than a tail ago, and per route
// in known (gone once no slice lists the pod).
func (s *Source) Observe(ctx context.Context, pod *corev1.Pod, known []gate.Known, _ bool) ([]gate.Observation, error) {
	if s.services == nil {
		return nil, errors.New("the EndpointSlice routes have not started")
	}
	current, err := s.services.Endpoints(ctx, pod)
	if err != nil {
		return nil, err
	}
	names := map[string]bool{}
	for _, k := range known {
		names[k.Name] = true
	}
	for _, n := range s.leftRecently(pod) {
		names[n] = true
	}
	for n := range current {
		names[n] = true
	}
	out := make([]gate.Observation, 0, len(names))
	for _, name := range slices.Sorted(maps.Keys(names)) {
		e, present := current[name]
		fallback, nodeOnly := false, false
		var svc *corev1.Service
		if present && e.Terminating && e.Serving && e.Service != "" {
			cluster, onNode := s.services.ReadyEndpoints(ctx, pod.Namespace, e.Service, pod.Spec.NodeName)
			svc = s.services.Service(ctx, pod.Namespace, e.Service)
			fallback = Fallback(cluster, onNode, LocalPolicy(svc))
			nodeOnly = fallback && cluster
		}
		o := Judge(e, present, fallback && !nodeOnly)
		o.Name, o.Tail = name, s.tail
		if nodeOnly {
			o = NodeOnly(o, svc, s.tail, s.localTail, s.lbDrain(ctx, svc))
		}
		if o.Out {
			o.What += s.instanceNote(ctx, pod.Namespace, strings.TrimPrefix(name, pod.Namespace+"/"))
		}
		out = append(out, o)
	}
	return out, nil
}

// Judge reads the pod's endpoint in one route: present says a slice lists
// it, fallback that kube-proxy still sends to serving terminating
// endpoints of the Service because no ready one remains. Out: gone,
// terminating (the EndpointSlice controller's way to take a terminating
// pod out) or not ready; except a serving terminating endpoint while the
// fallback holds. Name and Tail are left to the caller.
func Judge(e route.Endpoint, present, fallback bool) gate.Observation {
	o := gate.Observation{Kind: Kind, Synced: true, TailName: "EndpointSlice"}
	switch {
	case !present:
		o.State, o.Out, o.What = StateGone, true, "the slice no longer lists the pod's endpoint"
	case e.Terminating && e.Serving && fallback:
		o.State, o.What = StateTerminatingServing, "the slice lists the pod's endpoint as terminating but serving, "+
			"and kube-proxy still sends to it because no ready endpoint remains"
	case e.Terminating:
		o.State, o.Out, o.What = StateTerminating, true, "the slice lists the pod's endpoint as terminating"
	case !e.Ready:
		o.State, o.Out, o.What = StateNotReady, true, "the slice lists the pod's endpoint as not ready"
	default:
		o.State, o.What = StateReady, "the slice lists the pod's endpoint as ready"
	}
	return o
}

// Fallback reports whether kube-proxy still sends to a Service's serving
// terminating endpoints (KEP-1669): when no ready endpoint remains in the
// cluster, or, for a Service whose traffic policy is Local (kube-proxy on
// each node then uses that node's endpoints only), none on the node of the
// endpoint in question.
func Fallback(readyInCluster, readyOnNode, localPolicy bool) bool {
	return !readyInCluster || localPolicy && !readyOnNode
}

// LocalPolicy reports whether kube-proxy serves the Service per node: its
// internal traffic policy is Local, or it takes outside traffic (NodePort,
// LoadBalancer) with an external traffic policy of Local. A Service not in
// the cache (nil) counts as Cluster-wide.
func LocalPolicy(svc *corev1.Service) bool {
	if svc == nil {
		return false
	}
	if p := svc.Spec.InternalTrafficPolicy; p != nil && *p == corev1.ServiceInternalTrafficPolicyLocal {
		return true
	}
	return externalLocal(svc)
}

// externalLocal says the Service takes outside traffic (NodePort,
// LoadBalancer) with an external traffic policy of Local: a load balancer
// in front of it sends to nodes with a local endpoint, and drains a node by
// its health checks.
func externalLocal(svc *corev1.Service) bool {
	external := svc.Spec.Type == corev1.ServiceTypeLoadBalancer || svc.Spec.Type == corev1.ServiceTypeNodePort
	return external && svc.Spec.ExternalTrafficPolicy == corev1.ServiceExternalTrafficPolicyLocal
}

// NodeOnly is the route o of a pod whose endpoint is terminating but
// serving and the last ready one on its node under the Service's Local
// policy, the Service's other ready endpoints being on other nodes: that
// node's kube-proxy still sends it the node's traffic, while it comes. The
// route is out, and its pod's own traffic says when it stopped; the floor
// is a load balancer's drain of the node when outside traffic comes
// through it (externalLocal): what lb read of the load balancers' own
// settings (an AWS instance target group's health checks and its type's
// tail) where it read them all, else the longer of that and LocalTail; a
// valid annotation is kept as a floor. Else (an internal Local policy:
// in-cluster clients on the node) the EndpointSlice tail. Who sends
// through the node (a load balancer's nodes, clients with their addresses
// kept) cannot be listed: the evidence may lengthen the wait, never
// shorten it.
func NodeOnly(o gate.Observation, svc *corev1.Service, tail, localTail time.Duration, lb LBDrain) gate.Observation {
	o.State, o.Out, o.WeighTraffic = StateTerminatingServing, true, true
	o.What = "the slice lists the pod's endpoint as terminating but serving, the last ready one on its node under the " +
		"Service's Local traffic policy: kube-proxy there still sends it that node's traffic, until the traffic stops"
	o.Senders = evidence.Senders{Why: "who sends through the node under a Local traffic policy cannot be listed"}
	if svc != nil && externalLocal(svc) {
		d, why := NodeDrain(svc, localTail, lb)
		o.Tail, o.TailName = max(d, tail), "Local-policy node drain"+why
	}
	return o
}

// NodeDrain is how long a load balancer may still send through a node
// whose last ready endpoint of svc (an external Local policy) went, and a
// phrase saying where that comes from ("" for the default): lb, the load
// balancers' own settings, where another kind read them all; else the
// Service's LocalTailAnnotation or def, which lb may only lengthen. A valid
// annotation stays a floor.
func NodeDrain(svc *corev1.Service, def time.Duration, lb LBDrain) (time.Duration, string) {
	d, why := LocalTail(svc, def)
	if lb.D > d || (lb.Complete && lb.D > 0 && !annotated(svc)) {
		d, why = lb.D, " ("+lb.Why+")"
	}
	return d, why
}

// LBDrain is how long the load balancers in front of a Service take to
// drain a node under a Local policy, as a kind that reads their settings
// says (route.LoadBalancers): D and Why for those it read, Complete when it
// read all of them.
type LBDrain struct {
	D        time.Duration
	Why      string
	Complete bool
}

// lbDrain asks the kind that reads load balancers' settings, if any, how
// long those in front of svc take to drain a node (zero when svc takes no
// outside traffic under a Local policy).
func (s *Source) lbDrain(ctx context.Context, svc *corev1.Service) LBDrain {
	if s.lbs == nil || svc == nil || !externalLocal(svc) {
		return LBDrain{}
	}
	var lb LBDrain
	lb.D, lb.Why, lb.Complete = s.lbs.NodeDrain(ctx, svc.Namespace, svc.Name)
	return lb
}

// instanceNote is what a route out says more when instance target groups
// send to the node ports of the Service name (without its namespace) under
// its Cluster policy: this wait covers kube-proxy's rules, not the
// connections those load balancers hold to the pod, which only the app can
// end (docs/how-it-works.md).
func (s *Source) instanceNote(ctx context.Context, namespace, name string) string {
	if s.lbs == nil {
		return ""
	}
	svc := s.services.Service(ctx, namespace, name)
	if svc == nil || externalLocal(svc) || (svc.Spec.Type != corev1.ServiceTypeNodePort && svc.Spec.Type != corev1.ServiceTypeLoadBalancer) {
		return ""
	}
	arns := s.lbs.InstanceGroups(ctx, namespace, name)
	if len(arns) == 0 {
		return ""
	}
	return fmt.Sprintf("; instance target group %s sends to the node port, and the keep-alive connections kube-proxy "+
		"forwarded to the pod stay with it until the app closes them: at SIGTERM the app must finish the requests in "+
		"flight, answer with Connection: close, then close", strings.Join(arns, ", "))
}

// annotated says that svc sets its Local-policy tail with a valid
// LocalTailAnnotation.
func annotated(svc *corev1.Service) bool {
	v, ok := svc.Annotations[LocalTailAnnotation]
	if !ok {
		return false
	}
	d, err := time.ParseDuration(v)
	return err == nil && d >= 0
}

// LocalTail is how long a load balancer may still send the traffic of a
// node whose last ready endpoint of svc went: the Service's
// LocalTailAnnotation, else def. An annotation that is not a duration
// takes def, and the phrase why says so for the route's detail.
func LocalTail(svc *corev1.Service, def time.Duration) (d time.Duration, why string) {
	return route.AnnotatedTail(svc, LocalTailAnnotation, def)
}
