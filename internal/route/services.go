package route

import (
	"context"
	"errors"
	"fmt"
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
)

// Services is what every kind reads of Services and their EndpointSlices,
// from the server's cache: which Services list a pod, and how; which
// select a pod being created; which a pod's endpoint left, and when. The
// server makes one, starts it before the kinds, and hands it to each
// (Host.Services). Make it with NewServices.
type Services struct {
	cache  cache.Cache
	synced atomic.Bool
	now    func() time.Time

	// left remembers the routes endpoints left: a pod taken off a Service
	// (a selector flip) and deleted soon after finds no slice listing it,
	// yet the route's consumers may still send to it for their tail. Keyed
	// by the endpoint's pod UID, or namespace/address without one; each
	// route ("namespace/service") by when the endpoint left it.
	mu   sync.Mutex
	left map[string]map[string]time.Time
	// keep is how long left entries are kept: the longest any kind asked
	// (KeepLeft).
	keep time.Duration
}

// Endpoint is a pod's endpoint in one route's slices: the most "in" one
// where several slices list the pod (dual stack).
type Endpoint struct {
	// Service is the Service's name ("" for a slice that names none).
	Service                     string
	Ready, Serving, Terminating bool
	// Zone is the endpoint's zone (its node's topology.kubernetes.io/zone,
	// which the EndpointSlice controller copies); "" when not set.
	Zone string
}

const (
	serviceNameLabel = discoveryv1.LabelServiceName
	// addressIndex indexes EndpointSlices by their endpoints' addresses.
	addressIndex = "draingate.addresses"
	// AnnotationPrefix starts every annotation of draingate's that a
	// Service may carry: the cache keeps those.
	AnnotationPrefix = "draingate.dev/"
)

// NewServices returns the Services; Start starts them.
func NewServices() *Services {
	return &Services{now: time.Now, left: map[string]map[string]time.Time{}}
}

// Transform slims a Service or an EndpointSlice before it enters the
// cache; ok is false for any other object. A slice keeps its identity, the
// Service label, and its endpoints' addresses, conditions, node and pod; a
// Service its identity, type, traffic policies, selector (which pods being
// created it will list: admission sizing, Selects) and draingate.dev
// annotations (the kinds' tails).
func (s *Services) Transform(obj any) (any, bool) {
	if svc, ok := obj.(*corev1.Service); ok {
		out := &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: svc.Name, Namespace: svc.Namespace, UID: svc.UID, ResourceVersion: svc.ResourceVersion},
			Spec: corev1.ServiceSpec{Type: svc.Spec.Type, ExternalTrafficPolicy: svc.Spec.ExternalTrafficPolicy,
				InternalTrafficPolicy: svc.Spec.InternalTrafficPolicy, Selector: svc.Spec.Selector},
		}
		for k, v := range svc.Annotations {
			if strings.HasPrefix(k, AnnotationPrefix) {
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

// Start indexes slices by address, remembers the endpoints that leave
// them, and tells changed the namespace of every slice or Service that
// changes, and every pod ("", "") once both caches synced.
func (s *Services) Start(ctx context.Context, c cache.Cache, changed func(namespace, name string)) error {
	s.cache = c
	if err := c.IndexField(ctx, &discoveryv1.EndpointSlice{}, addressIndex, addresses); err != nil {
		return fmt.Errorf("index EndpointSlices: %w", err)
	}
	inf, err := c.GetInformer(ctx, &discoveryv1.EndpointSlice{}, cache.BlockUntilSynced(false))
	if err != nil {
		return fmt.Errorf("EndpointSlice informer: %w", err)
	}
	if _, err := inf.AddEventHandler(NamespaceHandler(changed)); err != nil {
		return err
	}
	if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		UpdateFunc: func(o, n any) { s.noteLeft(o, n) },
		DeleteFunc: func(o any) { s.noteLeft(o, nil) },
	}); err != nil {
		return err
	}
	// Services, for their traffic policies (with Local, kube-proxy falls
	// back per node), their selectors and annotations.
	svcs, err := c.GetInformer(ctx, &corev1.Service{}, cache.BlockUntilSynced(false))
	if err != nil {
		return fmt.Errorf("Service informer: %w", err)
	}
	if _, err := svcs.AddEventHandler(NamespaceHandler(changed)); err != nil {
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

// Ready says why the Services cannot be read yet (nil once they can).
func (s *Services) Ready() error {
	if !s.synced.Load() {
		return errors.New("the EndpointSlice cache has not synced yet")
	}
	return nil
}

// Endpoints returns the pod's endpoints by route name
// ("namespace/service", or "namespace/slice" for a slice that names no
// Service): the most "in" one where several slices of one Service list
// the pod (dual stack).
func (s *Services) Endpoints(ctx context.Context, pod *corev1.Pod) (map[string]Endpoint, error) {
	if s.cache == nil {
		return nil, errors.New("the Services have not started")
	}
	current := map[string]Endpoint{}
	for _, ip := range IPs(pod) {
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
				v := EndpointOf(e)
				v.Service = sl.Labels[serviceNameLabel]
				if old, ok := current[name]; !ok || v.rank() > old.rank() {
					current[name] = v
				}
			}
		}
	}
	return current, nil
}

// ServiceEndpoints returns the pod's endpoint in each Service of its
// namespace whose slices list it, by the Service's name.
func (s *Services) ServiceEndpoints(ctx context.Context, pod *corev1.Pod) (map[string]Endpoint, error) {
	byRoute, err := s.Endpoints(ctx, pod)
	if err != nil {
		return nil, err
	}
	out := make(map[string]Endpoint, len(byRoute))
	for _, e := range byRoute {
		if e.Service != "" {
			out[e.Service] = e
		}
	}
	return out, nil
}

// Service reads the Service from the cache; nil when it is not there.
func (s *Services) Service(ctx context.Context, namespace, name string) *corev1.Service {
	if s.cache == nil {
		return nil
	}
	var svc corev1.Service
	if err := s.cache.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, &svc, client.UnsafeDisableDeepCopy); err != nil {
		return nil
	}
	return &svc
}

// List lists the namespace's Services from the cache.
func (s *Services) List(ctx context.Context, namespace string) ([]corev1.Service, error) {
	if s.cache == nil {
		return nil, errors.New("the Services have not started")
	}
	var list corev1.ServiceList
	if err := s.cache.List(ctx, &list, client.InNamespace(namespace), client.UnsafeDisableDeepCopy); err != nil {
		return nil, fmt.Errorf("list Services from the cache: %w", err)
	}
	return list.Items, nil
}

// Selects says, from the cache, whether the Service namespace/name selects
// pods with these labels; found is false when the cache has no such
// Service (yet).
func (s *Services) Selects(ctx context.Context, namespace, name string, podLabels map[string]string) (selects, found bool, err error) {
	if s.cache == nil {
		return false, false, errors.New("the Services have not started")
	}
	var svc corev1.Service
	err = s.cache.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, &svc, client.UnsafeDisableDeepCopy)
	switch {
	case apierrors.IsNotFound(err):
		return false, false, nil
	case err != nil:
		return false, false, fmt.Errorf("read Service %s/%s from the cache: %w", namespace, name, err)
	}
	return SelectsLabels(&svc, podLabels), true, nil
}

// SelectsLabels says whether svc selects pods with these labels (a Service
// without a selector selects none).
func SelectsLabels(svc *corev1.Service, podLabels map[string]string) bool {
	sel := svc.Spec.Selector
	return len(sel) > 0 && labels.SelectorFromSet(sel).Matches(labels.Set(podLabels))
}

// ReadyEndpoints reports whether any slice of the Service lists a ready,
// not terminating endpoint, and one on node. A read error counts as none.
func (s *Services) ReadyEndpoints(ctx context.Context, namespace, service, node string) (cluster, onNode bool) {
	if s.cache == nil {
		return false, false
	}
	var list discoveryv1.EndpointSliceList
	if err := s.cache.List(ctx, &list, client.InNamespace(namespace), client.MatchingLabels{serviceNameLabel: service}, client.UnsafeDisableDeepCopy); err != nil {
		return false, false
	}
	for _, sl := range list.Items {
		for _, e := range sl.Endpoints {
			if v := EndpointOf(e); v.Ready && !v.Terminating {
				cluster = true
				onNode = onNode || node != "" && e.NodeName != nil && *e.NodeName == node
			}
		}
	}
	return cluster, onNode
}

// KeepLeft asks that what endpoints left be kept at least d.
func (s *Services) KeepLeft(d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.keep = max(s.keep, d)
}

// Left returns, by route name ("namespace/service"), when the pod's
// endpoint left each route it left within what is kept.
func (s *Services) Left(pod *corev1.Pod) map[string]time.Time {
	keys := []string{"uid:" + string(pod.UID)}
	for _, ip := range IPs(pod) {
		keys = append(keys, pod.Namespace+"/"+ip)
	}
	now := s.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]time.Time{}
	for _, k := range keys {
		for r, at := range s.left[k] {
			if now.Sub(at) < s.keep && at.After(out[r]) {
				out[r] = at
			}
		}
	}
	return out
}

// noteLeft records the endpoints listed in slice o and not in n (nil: the
// slice is gone) as having left o's route now.
func (s *Services) noteLeft(o, n any) {
	old, ok := Tombstone(o).(*discoveryv1.EndpointSlice)
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

// EndpointOf maps the API's nil conditions: nil ready means ready, nil
// serving means the same as ready, nil terminating means false.
func EndpointOf(e discoveryv1.Endpoint) Endpoint {
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
