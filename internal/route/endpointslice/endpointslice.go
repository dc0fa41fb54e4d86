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
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

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

const (
	serviceNameLabel = discoveryv1.LabelServiceName
	// addressIndex indexes EndpointSlices by their endpoints' addresses.
	addressIndex = "draingate.addresses"
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
const LocalTailAnnotation = annotationPrefix + "local-policy-tail"

// annotationPrefix starts every annotation of draingate's that a Service
// may carry: the cache keeps those.
const annotationPrefix = "draingate.dev/"

// Source observes EndpointSlice routes. Make it with New.
type Source struct {
	tail time.Duration
	// localTail is DefaultLocalTail's setting (--tail-local-policy).
	localTail time.Duration
	cache     cache.Cache
	// drainer reads the drain of the load balancers in front of a Local
	// policy's Service, where a kind can (set by Start; nil: none can).
	drainer route.NodeDrainer
	// instances lists the instance target groups in front of a
	// Service's node ports, where a kind can (set by Start).
	instances route.InstanceTargeter
	synced    atomic.Bool
	now       func() time.Time

	// left remembers, a tail long, the routes endpoints left: a pod taken
	// off a Service (a selector flip) and deleted within the tail finds no
	// slice listing it, yet kube-proxy and the rest may still send to it.
	// Keyed by the endpoint's pod UID, or namespace/address without one.
	mu   sync.Mutex
	left map[string]map[string]time.Time
	// keep is how long left entries are kept: the tail, or longer when
	// another kind asked (KeepLeft).
	keep time.Duration
}

// New returns a source whose routes take the given tail, and localTail
// where a load balancer drains the pod's node (LocalTail); a negative one
// counts as zero (the route closes as soon as it is out).
func New(tail, localTail time.Duration) *Source {
	return &Source{tail: max(tail, 0), localTail: max(localTail, 0), now: time.Now, left: map[string]map[string]time.Time{}, keep: max(tail, 0)}
}

// Kind implements route.Source.
func (s *Source) Kind() string { return Kind }

// Transform implements route.Source: a slice keeps its identity, the
// Service label, and its endpoints' addresses, conditions, node and pod; a
// Service its identity, type, traffic policies, selector (which pods
// being created it will list: admission sizing, Selects) and draingate.dev
// annotations.
func (s *Source) Transform(obj any) (any, bool) {
	if svc, ok := obj.(*corev1.Service); ok {
		out := &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: svc.Name, Namespace: svc.Namespace, UID: svc.UID, ResourceVersion: svc.ResourceVersion},
			Spec: corev1.ServiceSpec{Type: svc.Spec.Type, ExternalTrafficPolicy: svc.Spec.ExternalTrafficPolicy,
				InternalTrafficPolicy: svc.Spec.InternalTrafficPolicy, Selector: svc.Spec.Selector},
		}
		// draingate's own annotations, which other kinds read too
		// (external: draingate.dev/external-tail).
		for k, v := range svc.Annotations {
			if strings.HasPrefix(k, annotationPrefix) {
				if out.Annotations == nil {
					out.Annotations = map[string]string{}
				}
				out.Annotations[k] = v
			}
		}
		return out, true
	}
	sl, ok := obj.(*discoveryv1.EndpointSlice)
	if !ok {
		return obj, false
	}
	out := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{
			Name: sl.Name, Namespace: sl.Namespace, UID: sl.UID, ResourceVersion: sl.ResourceVersion,
			DeletionTimestamp: sl.DeletionTimestamp,
		},
		AddressType: sl.AddressType,
		Endpoints:   make([]discoveryv1.Endpoint, len(sl.Endpoints)),
	}
	if svc, ok := sl.Labels[serviceNameLabel]; ok {
		out.Labels = map[string]string{serviceNameLabel: svc}
	}
	for i, e := range sl.Endpoints {
		out.Endpoints[i] = discoveryv1.Endpoint{Addresses: e.Addresses, Conditions: e.Conditions, NodeName: e.NodeName, Zone: e.Zone}
		if r := e.TargetRef; r != nil {
			out.Endpoints[i].TargetRef = &corev1.ObjectReference{Kind: r.Kind, Namespace: r.Namespace, Name: r.Name, UID: r.UID}
		}
	}
	return out, true
}

// Start implements route.Source: it indexes slices by address and tells
// h.Changed the namespace of every slice or Service that changes.
func (s *Source) Start(ctx context.Context, h route.Host) error {
	c, changed := h.Cache, h.Changed
	s.cache = c
	if d, ok := route.Peer[route.NodeDrainer](h.Sources); ok {
		s.drainer = d
	}
	if t, ok := route.Peer[route.InstanceTargeter](h.Sources); ok {
		s.instances = t
	}
	if err := c.IndexField(ctx, &discoveryv1.EndpointSlice{}, addressIndex, addresses); err != nil {
		return fmt.Errorf("index EndpointSlices: %w", err)
	}
	inf, err := c.GetInformer(ctx, &discoveryv1.EndpointSlice{}, cache.BlockUntilSynced(false))
	if err != nil {
		return fmt.Errorf("EndpointSlice informer: %w", err)
	}
	if _, err := inf.AddEventHandler(route.NamespaceHandler(changed)); err != nil {
		return err
	}
	if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		UpdateFunc: func(o, n any) { s.noteLeft(o, n) },
		DeleteFunc: func(o any) { s.noteLeft(o, nil) },
	}); err != nil {
		return err
	}
	// Services, for their traffic policies: with Local, kube-proxy falls
	// back per node.
	svcs, err := c.GetInformer(ctx, &corev1.Service{}, cache.BlockUntilSynced(false))
	if err != nil {
		return fmt.Errorf("Service informer: %w", err)
	}
	if _, err := svcs.AddEventHandler(route.NamespaceHandler(changed)); err != nil {
		return err
	}
	go func() {
		if toolscache.WaitForCacheSync(ctx.Done(), inf.HasSynced, svcs.HasSynced) {
			s.synced.Store(true)
			changed("", "")
		}
	}()
	return nil
}

// Ready implements route.Source.
func (s *Source) Ready() error {
	if !s.synced.Load() {
		return errors.New("the EndpointSlice cache has not synced yet")
	}
	return nil
}

// Forget implements route.Source: the source keeps nothing per pod (what
// endpoints left fades by itself).
func (s *Source) Forget(route.PodKey) {}

// Drop implements route.Source, as Forget.
func (s *Source) Drop(route.PodKey) {}

// AdmissionWait implements route.Source: the EndpointSlice tail is within
// every pod's max-wait; a load balancer's drain of the pod's node (the
// Services that select the pod with an external traffic policy of Local,
// NodeDrain) may need longer than the default max-wait covers
// (route.Covered), and asks for the rest. A cache error answers the
// default drain's extra and says why.
func (s *Source) AdmissionWait(ctx context.Context, pod *corev1.Pod) (time.Duration, string, error) {
	if s.cache == nil {
		return 0, "", nil
	}
	var list corev1.ServiceList
	if err := s.cache.List(ctx, &list, client.InNamespace(pod.Namespace), client.UnsafeDisableDeepCopy); err != nil {
		return max(s.localTail-route.Covered, 0), fmt.Sprintf("the Local-policy node drain (%s)", s.localTail), fmt.Errorf("list Services from the cache: %w", err)
	}
	var longest time.Duration
	var why string
	for i := range list.Items {
		svc := &list.Items[i]
		sel := svc.Spec.Selector
		if len(sel) == 0 || !externalLocal(svc) || !labels.SelectorFromSet(sel).Matches(labels.Set(pod.Labels)) {
			continue
		}
		if d, w := NodeDrain(svc, s.localTail, s.lbDrain(ctx, svc)); d > longest {
			longest, why = d, fmt.Sprintf("the Local-policy node drain (%s%s) of Service %s/%s", d, w, svc.Namespace, svc.Name)
		}
	}
	return max(longest-route.Covered, 0), why, nil
}

// Close implements route.Source: the informers stop with the server's
// context, and nothing else runs.
func (s *Source) Close() {}

// noteLeft records the endpoints listed in slice o and not in n (nil: the
// slice is gone) as having left o's route now.
func (s *Source) noteLeft(o, n any) {
	if t, ok := o.(toolscache.DeletedFinalStateUnknown); ok {
		o = t.Obj
	}
	old, ok := o.(*discoveryv1.EndpointSlice)
	if !ok {
		return
	}
	still := map[string]bool{}
	if cur, ok := n.(*discoveryv1.EndpointSlice); ok {
		for _, e := range cur.Endpoints {
			for _, k := range leftKeys(cur.Namespace, e) {
				still[k] = true
			}
		}
	}
	now := s.now()
	name := routeName(old)
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, e := range old.Endpoints {
		for _, k := range leftKeys(old.Namespace, e) {
			if !still[k] {
				if s.left[k] == nil {
					s.left[k] = map[string]time.Time{}
				}
				s.left[k][name] = now
			}
		}
	}
	for k, routes := range s.left {
		for r, at := range routes {
			if now.Sub(at) >= s.keep {
				delete(routes, r)
			}
		}
		if len(routes) == 0 {
			delete(s.left, k)
		}
	}
}

// leftKeys are the keys an endpoint is remembered by: its pod's UID when
// it names one, else its addresses.
func leftKeys(ns string, e discoveryv1.Endpoint) []string {
	if r := e.TargetRef; r != nil && r.Kind == "Pod" && r.UID != "" {
		return []string{"uid:" + string(r.UID)}
	}
	var out []string
	for _, a := range e.Addresses {
		out = append(out, ns+"/"+a)
	}
	return out
}

// podLeftKeys are the keys (leftKeys) the pod's endpoints are remembered by.
func podLeftKeys(pod *corev1.Pod) []string {
	keys := []string{"uid:" + string(pod.UID)}
	for _, ip := range route.IPs(pod) {
		keys = append(keys, pod.Namespace+"/"+ip)
	}
	return keys
}

// leftRecently is the routes the pod's endpoint left less than a tail ago.
func (s *Source) leftRecently(pod *corev1.Pod) []string {
	keys := podLeftKeys(pod)
	now := s.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for _, k := range keys {
		for r, at := range s.left[k] {
			if now.Sub(at) < s.tail {
				out = append(out, r)
			}
		}
	}
	return out
}

// KeepLeft implements route.LeftLister: what endpoints left is kept at
// least d.
func (s *Source) KeepLeft(d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.keep = max(s.keep, d)
}

// LeftSince implements route.LeftLister: when the pod's endpoint left
// each Service (by name) it left within what is kept.
func (s *Source) LeftSince(pod *corev1.Pod) map[string]time.Time {
	keys := podLeftKeys(pod)
	now := s.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]time.Time{}
	for _, k := range keys {
		for r, at := range s.left[k] {
			_, svc, ok := strings.Cut(r, "/")
			if ok && now.Sub(at) < s.keep && at.After(out[svc]) {
				out[svc] = at
			}
		}
	}
	return out
}

// Endpoint is the pod's endpoint in one route's slices.
type Endpoint struct {
	// Service is the Service's name ("" for a slice that names none).
	Service                     string
	Ready, Serving, Terminating bool
	// Zone is the endpoint's zone, "" when the slice gives none.
	Zone string
}

// ServiceEndpoints implements route.ServiceLister: the pod's endpoint in
// each Service whose slices list it.
func (s *Source) ServiceEndpoints(ctx context.Context, pod *corev1.Pod) (map[string]route.Endpoint, error) {
	byRoute, err := s.endpoints(ctx, pod)
	if err != nil {
		return nil, err
	}
	out := make(map[string]route.Endpoint, len(byRoute))
	for _, e := range byRoute {
		if e.Service != "" {
			out[e.Service] = route.Endpoint{Ready: e.Ready, Serving: e.Serving, Terminating: e.Terminating, Zone: e.Zone}
		}
	}
	return out, nil
}

// Selects implements route.ServiceLister, from the cache.
func (s *Source) Selects(ctx context.Context, namespace, name string, podLabels map[string]string) (selects, found bool, err error) {
	if s.cache == nil {
		return false, false, errors.New("the EndpointSlice source has not started")
	}
	var svc corev1.Service
	err = s.cache.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, &svc, client.UnsafeDisableDeepCopy)
	switch {
	case apierrors.IsNotFound(err):
		return false, false, nil
	case err != nil:
		return false, false, fmt.Errorf("read Service %s/%s from the cache: %w", namespace, name, err)
	}
	sel := svc.Spec.Selector
	return len(sel) > 0 && labels.SelectorFromSet(sel).Matches(labels.Set(podLabels)), true, nil
}

// endpoints returns the pod's endpoints by route name
// ("namespace/service"): the most "in" one where several slices of one
// Service list the pod (dual stack).
func (s *Source) endpoints(ctx context.Context, pod *corev1.Pod) (map[string]Endpoint, error) {
	if s.cache == nil {
		return nil, errors.New("the EndpointSlice source has not started")
	}
	current := map[string]Endpoint{}
	for _, ip := range route.IPs(pod) {
		var list discoveryv1.EndpointSliceList
		if err := s.cache.List(ctx, &list, client.InNamespace(pod.Namespace), client.MatchingFields{addressIndex: ip}, client.UnsafeDisableDeepCopy); err != nil {
			return nil, fmt.Errorf("list EndpointSlices from the cache: %w", err)
		}
		for i := range list.Items {
			sl := &list.Items[i]
			for _, e := range sl.Endpoints {
				if !isPod(e, ip, pod) {
					continue
				}
				name := routeName(sl)
				v := endpointOf(e)
				v.Service = sl.Labels[serviceNameLabel]
				if old, ok := current[name]; !ok || v.rank() > old.rank() {
					current[name] = v
				}
			}
		}
	}
	return current, nil
}

// Observe implements route.Source: one route per Service whose slices list
// the pod, per route its endpoint left less than a tail ago, and per route
// in known (gone once no slice lists the pod).
func (s *Source) Observe(ctx context.Context, pod *corev1.Pod, known []gate.Known, _ bool) ([]gate.Observation, error) {
	current, err := s.endpoints(ctx, pod)
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
			cluster, onNode := s.readyEndpoints(ctx, pod.Namespace, e.Service, pod.Spec.NodeName)
			svc = s.service(ctx, pod.Namespace, e.Service)
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
func Judge(e Endpoint, present, fallback bool) gate.Observation {
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

// readyEndpoints reports whether any slice of the Service lists a ready,
// not terminating endpoint, and one on node. A read error counts as none:
// the fallback is assumed and the route stays open.
func (s *Source) readyEndpoints(ctx context.Context, ns, svc, node string) (cluster, onNode bool) {
	var list discoveryv1.EndpointSliceList
	if err := s.cache.List(ctx, &list, client.InNamespace(ns), client.MatchingLabels{serviceNameLabel: svc}, client.UnsafeDisableDeepCopy); err != nil {
		return false, false
	}
	for _, sl := range list.Items {
		for _, e := range sl.Endpoints {
			if v := endpointOf(e); v.Ready && !v.Terminating {
				cluster = true
				onNode = onNode || node != "" && e.NodeName != nil && *e.NodeName == node
			}
		}
	}
	return cluster, onNode
}

// service reads the Service from the cache; nil when it is not there.
func (s *Source) service(ctx context.Context, ns, name string) *corev1.Service {
	var svc corev1.Service
	if err := s.cache.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &svc, client.UnsafeDisableDeepCopy); err != nil {
		return nil
	}
	return &svc
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
// says (route.NodeDrainer): D and Why for those it read, Complete when it
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
	if s.drainer == nil || svc == nil || !externalLocal(svc) {
		return LBDrain{}
	}
	var lb LBDrain
	lb.D, lb.Why, lb.Complete = s.drainer.NodeDrain(ctx, svc.Namespace, svc.Name)
	return lb
}

// instanceNote is what a route out says more when instance target groups
// send to the node ports of the Service name (without its namespace) under
// its Cluster policy: this wait covers kube-proxy's rules, not the
// connections those load balancers hold to the pod, which only the app can
// end (docs/how-it-works.md).
func (s *Source) instanceNote(ctx context.Context, namespace, name string) string {
	if s.instances == nil {
		return ""
	}
	svc := s.service(ctx, namespace, name)
	if svc == nil || externalLocal(svc) || (svc.Spec.Type != corev1.ServiceTypeNodePort && svc.Spec.Type != corev1.ServiceTypeLoadBalancer) {
		return ""
	}
	arns := s.instances.InstanceGroups(ctx, namespace, name)
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

// rank orders a pod's endpoints when several slices of one Service list
// it: the most "in" one speaks for the route.
func (e Endpoint) rank() int {
	switch {
	case e.Ready && !e.Terminating:
		return 3
	case e.Serving:
		return 2
	case !e.Terminating:
		return 1
	}
	return 0
}

// endpointOf maps the API's nil conditions: nil ready means ready, nil
// serving means the same as ready, nil terminating means false.
func endpointOf(e discoveryv1.Endpoint) Endpoint {
	v := Endpoint{Ready: true}
	if e.Conditions.Ready != nil {
		v.Ready = *e.Conditions.Ready
	}
	v.Serving = v.Ready
	if e.Conditions.Serving != nil {
		v.Serving = *e.Conditions.Serving
	}
	if e.Conditions.Terminating != nil {
		v.Terminating = *e.Conditions.Terminating
	}
	if e.Zone != nil {
		v.Zone = *e.Zone
	}
	return v
}

// isPod reports whether e is the pod's endpoint: it has the pod's address,
// and its targetRef, when it names a pod, names this one (an IP reused by
// a newer pod is that pod's endpoint).
func isPod(e discoveryv1.Endpoint, ip string, pod *corev1.Pod) bool {
	has := false
	for _, a := range e.Addresses {
		if a == ip {
			has = true
		}
	}
	if !has {
		return false
	}
	if r := e.TargetRef; r != nil && r.Kind == "Pod" {
		if r.UID != "" {
			return r.UID == pod.UID
		}
		return r.Name == pod.Name
	}
	return true
}

// routeName names a route: its Service, or the slice itself when it names
// none.
func routeName(sl *discoveryv1.EndpointSlice) string {
	if svc := sl.Labels[serviceNameLabel]; svc != "" {
		return sl.Namespace + "/" + svc
	}
	return sl.Namespace + "/" + sl.Name
}

// addresses is the address index's extractor.
func addresses(o client.Object) []string {
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
