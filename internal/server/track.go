package server

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"draingate.dev/draingate/api"
	"draingate.dev/draingate/internal/aws/elbv2"
	"draingate.dev/draingate/internal/gate"
	"draingate.dev/draingate/internal/waitapi"
)

// Event reasons on the pod.
const (
	EventWaitStarted = "DrainWaitStarted"
	EventReleased    = "DrainReleased"
	EventDeadline    = "DrainDeadline"
)

// Verdict implements waitapi.Gate: it reads the pod from the cache, marks it
// waiting (its target groups get polled), observes its routes and asks
// gate.Decide.
func (s *Server) Verdict(ctx context.Context, req api.DrainRequest) (api.Verdict, error) {
	if err := s.cachesReady(); err != nil {
		return api.Verdict{}, err
	}
	pod, err := s.pod(ctx, req.Namespace, req.Pod)
	if err != nil {
		return api.Verdict{}, err
	}
	if req.UID != "" && !strings.EqualFold(req.UID, string(pod.UID)) {
		return api.Verdict{}, waitapi.ErrUIDMismatch
	}
	now := s.o.Now()
	if pod.DeletionTimestamp == nil {
		return gate.Decide(now, gate.Pod{Namespace: pod.Namespace, Name: pod.Name, UID: string(pod.UID)}, nil, s.o.Tails), nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return api.Verdict{}, errors.New("the server is shutting down")
	}
	st := s.stateLocked(pod, now)
	st.asked = now
	v, obs, err := s.decideLocked(ctx, pod, st, now)
	if err != nil {
		return api.Verdict{}, err
	}
	if !st.startNoted {
		st.startNoted = true
		s.recorder.Eventf(pod, corev1.EventTypeNormal, EventWaitStarted, "preStop wait started: %s", v.Message)
		s.log.Info("wait started", "pod", st.key, "uid", st.uid, "routes", len(obs), "verdict", v.Message)
	}
	if v.Released && !st.releaseNoted {
		st.releaseNoted = true
		kind, reason := corev1.EventTypeNormal, EventReleased
		if v.Reason == api.ReasonDeadline {
			kind, reason = corev1.EventTypeWarning, EventDeadline
		}
		s.recorder.Eventf(pod, kind, reason, "released after %s (%s): %s", time.Duration(v.Waited).Round(100*time.Millisecond), v.Reason, v.Message)
		s.log.Info("released", "pod", st.key, "uid", st.uid, "reason", v.Reason, "waited", time.Duration(v.Waited).String(), "verdict", v.Message)
	}
	return v, nil
}

// Changed implements waitapi.Gate.
func (s *Server) Changed(req api.DrainRequest) (<-chan struct{}, func()) {
	key := req.Namespace + "/" + req.Pod
	ch := make(chan struct{}, 1)
	s.mu.Lock()
	if s.subs[key] == nil {
		s.subs[key] = map[chan struct{}]struct{}{}
	}
	s.subs[key][ch] = struct{}{}
	s.mu.Unlock()
	return ch, func() {
		s.mu.Lock()
		delete(s.subs[key], ch)
		if len(s.subs[key]) == 0 {
			delete(s.subs, key)
		}
		s.mu.Unlock()
	}
}

func (s *Server) pod(ctx context.Context, ns, name string) (*corev1.Pod, error) {
	pod := &corev1.Pod{}
	if err := s.cache.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, pod); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, waitapi.ErrUnknownPod
		}
		return nil, fmt.Errorf("read pod from cache: %w", err)
	}
	return pod, nil
}

// stateLocked returns the pod's state, making it on first sight. A state
// held for another pod of the same name (an older UID) is dropped.
func (s *Server) stateLocked(pod *corev1.Pod, now time.Time) *podState {
	key := pod.Namespace + "/" + pod.Name
	st := s.pods[key]
	if st != nil && st.uid != string(pod.UID) {
		s.dropLocked(key)
		st = nil
	}
	if st == nil {
		st = &podState{key: key, uid: string(pod.UID), terminatingSince: now,
			services: map[string]*routeMem{}, groups: map[string]*groupMem{}}
		s.pods[key] = st
	}
	return st
}

// dropLocked forgets a pod: its timers and target-group waiters end.
func (s *Server) dropLocked(key string) {
	st := s.pods[key]
	if st == nil {
		return
	}
	delete(s.pods, key)
	if st.timer != nil {
		st.timer.Stop()
	}
	for _, g := range st.groups {
		if g.waiter != nil {
			w := g.waiter
			g.waiter = nil
			go w.Close() // Close waits for the group's goroutine: not under s.mu.
		}
	}
}

func (s *Server) podChanged(o any) {
	pod, ok := o.(*corev1.Pod)
	if !ok || !s.synced.Load() && pod.DeletionTimestamp == nil {
		return
	}
	key := pod.Namespace + "/" + pod.Name
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	if pod.DeletionTimestamp != nil {
		st := s.stateLocked(pod, s.o.Now())
		s.refreshLocked(pod, st)
	}
	s.signalLocked(key)
	s.metrics.setTrackedLocked(len(s.pods))
}

func (s *Server) podDeleted(o any) {
	if t, ok := o.(toolscache.DeletedFinalStateUnknown); ok {
		o = t.Obj
	}
	pod, ok := o.(*corev1.Pod)
	if !ok {
		return
	}
	key := pod.Namespace + "/" + pod.Name
	s.mu.Lock()
	defer s.mu.Unlock()
	if st := s.pods[key]; st != nil && st.uid == string(pod.UID) {
		s.dropLocked(key)
	}
	s.signalLocked(key)
	s.metrics.setTrackedLocked(len(s.pods))
}

// namespaceChanged re-observes the terminating pods of ns ("" for all)
// after a slice or binding there changed.
func (s *Server) namespaceChanged(ns string) {
	if !s.synced.Load() {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for key, st := range s.pods {
		if ns == "" || strings.HasPrefix(key, ns+"/") {
			s.refreshKeyLocked(st)
		}
	}
}

// refreshKeyLocked re-observes a tracked pod and wakes its long-polls.
func (s *Server) refreshKeyLocked(st *podState) {
	if s.closed {
		return
	}
	ns, name, _ := strings.Cut(st.key, "/")
	pod := &corev1.Pod{}
	if err := s.cache.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, pod, client.UnsafeDisableDeepCopy); err != nil || string(pod.UID) != st.uid {
		s.signalLocked(st.key)
		return
	}
	s.refreshLocked(pod, st)
	s.signalLocked(st.key)
}

// refreshLocked observes the pod's routes, so that OutSince is recorded as
// soon as an owner takes the pod out, whether or not its agent asks yet.
func (s *Server) refreshLocked(pod *corev1.Pod, st *podState) {
	if !s.synced.Load() {
		return
	}
	// An error here keeps the route memory as it was; the next event or
	// the agent's next ask tries again.
	s.decideLocked(context.Background(), pod, st, s.o.Now())
}

func (s *Server) signalLocked(key string) {
	for ch := range s.subs[key] {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

// decideLocked observes and decides, and sets the pod's timer for the next
// time the verdict can change by the clock alone (a tail's end, the
// deadline).
func (s *Server) decideLocked(ctx context.Context, pod *corev1.Pod, st *podState, now time.Time) (api.Verdict, []gate.RouteObservation, error) {
	obs, err := s.observeLocked(ctx, pod, st, now)
	if err != nil {
		// A route the cache could not be asked about may be missing from
		// obs: no verdict rather than one that forgets it (rule 1).
		return api.Verdict{}, nil, err
	}
	gp := gate.Pod{Namespace: pod.Namespace, Name: pod.Name, UID: string(pod.UID),
		Terminating: true, TerminatingSince: st.terminatingSince}
	if pod.DeletionTimestamp != nil {
		gp.Deadline = pod.DeletionTimestamp.Add(-s.o.ShutdownReserve)
	}
	v := gate.Decide(now, gp, obs, s.o.Tails)

	next := time.Time{}
	consider := func(t time.Time) {
		if t.After(now) && (next.IsZero() || t.Before(next)) {
			next = t
		}
	}
	if !v.Released {
		consider(gp.Deadline)
		for _, r := range v.Routes {
			if r.TailEnds != nil {
				consider(*r.TailEnds)
			}
		}
	}
	if st.timer != nil {
		st.timer.Stop()
		st.timer = nil
	}
	if !next.IsZero() {
		key := st.key
		st.timer = time.AfterFunc(next.Sub(now)+5*time.Millisecond, func() {
			s.mu.Lock()
			defer s.mu.Unlock()
			if cur := s.pods[key]; cur == st {
				s.refreshKeyLocked(st)
			}
		})
	}
	return v, obs, nil
}

// observeLocked gathers one observation per route of the pod and records
// when each owner first took it out. A failed cache read is an error, and
// changes no memory.
func (s *Server) observeLocked(ctx context.Context, pod *corev1.Pod, st *podState, now time.Time) ([]gate.RouteObservation, error) {
	ips := podIPs(pod)
	var out []gate.RouteObservation

	// EndpointSlices, one route per Service.
	current := map[string]endpointView{}
	for _, ip := range ips {
		var list discoveryv1.EndpointSliceList
		if err := s.cache.List(ctx, &list, client.InNamespace(pod.Namespace), client.MatchingFields{addressIndex: ip}, client.UnsafeDisableDeepCopy); err != nil {
			return nil, fmt.Errorf("list EndpointSlices from the cache: %w", err)
		}
		for i := range list.Items {
			sl := &list.Items[i]
			for _, e := range sl.Endpoints {
				if !endpointIsPod(e, ip, pod) {
					continue
				}
				name := routeName(sl)
				v := viewOf(e)
				if old, ok := current[name]; !ok || v.rank() > old.rank() {
					v.service = sl.Labels[serviceNameLabel]
					current[name] = v
				}
			}
		}
	}
	for name := range current {
		if st.services[name] == nil {
			st.services[name] = &routeMem{}
		}
	}
	names := sortedKeys(st.services)
	for _, name := range names {
		o := gate.RouteObservation{Kind: gate.KindEndpointSlice, Name: name, Synced: true}
		if v, ok := current[name]; ok {
			o.Present, o.Ready, o.Serving, o.Terminating = true, v.ready, v.serving, v.terminating
			if v.terminating && v.serving && v.service != "" {
				o.ServingFallback = !s.serviceHasReadyEndpoint(ctx, pod.Namespace, v.service)
			}
		}
		out = append(out, s.remember(now, o, st.services[name]))
	}

	// Target groups of `ip` TargetGroupBindings whose Service lists the pod.
	// A binding without targetType (the controller's webhook normally fills
	// it in) counts as `ip`: waiting for a group that never held the pod
	// costs time, missing one that does costs requests.
	if s.bindingsSync.Load() {
		var list unstructured.UnstructuredList
		list.SetGroupVersionKind(targetGroupBindingListGVK)
		if err := s.cache.List(ctx, &list, client.InNamespace(pod.Namespace), client.UnsafeDisableDeepCopy); err != nil {
			return nil, fmt.Errorf("list TargetGroupBindings from the cache: %w", err)
		}
		for i := range list.Items {
			b := bindingFrom(&list.Items[i])
			if b.TargetType == "instance" || b.ARN == "" {
				continue
			}
			if _, listed := current[pod.Namespace+"/"+b.Service]; listed && st.groups[b.ARN] == nil {
				st.groups[b.ARN] = &groupMem{}
			}
		}
	}
	for _, arn := range sortedKeys(st.groups) {
		g := st.groups[arn]
		if !st.asked.IsZero() && g.waiter == nil && s.poller != nil {
			g.waiter = s.poller.Watch(arn)
			go s.follow(st, g.waiter)
			s.lookupTypeLocked(arn)
		}
		o := gate.RouteObservation{Kind: gate.KindTargetGroup, Name: arn, LoadBalancer: s.lbTypes[arn], WasRegistered: true}
		if g.waiter != nil {
			if obs, ok := g.waiter.Latest(); ok {
				o.Synced, o.Err = true, obs.Err
				o.State, o.Reason = targetOf(obs.Targets, ips)
			} else {
				o.Err = obs.Err
			}
		}
		out = append(out, s.remember(now, o, &g.routeMem))
	}
	return out, nil
}

// remember records when the owner first took the pod out, or forgets it if
// the owner took the pod back in, and returns o with OutSince set.
func (s *Server) remember(now time.Time, o gate.RouteObservation, m *routeMem) gate.RouteObservation {
	switch gate.Assess(now, o, s.o.Tails).Phase {
	case gate.PhaseOut:
		if m.outSince.IsZero() {
			m.outSince = now
		}
	case gate.PhaseIn:
		m.outSince = time.Time{}
	}
	o.OutSince = m.outSince
	return o
}

// follow re-observes the pod after each new target-health observation.
func (s *Server) follow(st *podState, w *elbv2.Waiter) {
	for range w.Changed() {
		s.mu.Lock()
		if s.pods[st.key] == st {
			s.refreshKeyLocked(st)
		}
		s.mu.Unlock()
	}
}

// lookupTypeLocked reads the type of arn's load balancer in the background,
// once; until it is known, the group takes the NLB tail.
func (s *Server) lookupTypeLocked(arn string) {
	if _, ok := s.lbTypes[arn]; ok {
		return
	}
	if _, ok := s.lookups[arn]; ok || s.runCtx == nil {
		return
	}
	s.lookups[arn] = struct{}{}
	ctx := s.runCtx
	go backoffLoop(ctx, func() error {
		if !s.groupInUse(arn) {
			s.mu.Lock()
			delete(s.lookups, arn)
			s.mu.Unlock()
			return nil // nobody waits on it any more; the next waiter asks again
		}
		t, err := s.poller.LoadBalancerType(ctx, arn)
		if err != nil {
			s.log.Warn("cannot read the load balancer type of a target group; it takes the NLB tail until known", "arn", arn, "err", err)
			return err
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		s.lbTypes[arn] = t
		delete(s.lookups, arn)
		for _, st := range s.pods {
			if st.groups[arn] != nil {
				s.refreshKeyLocked(st)
			}
		}
		return nil
	})
}

// groupInUse reports whether a waiting pod has a route through arn.
func (s *Server) groupInUse(arn string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, st := range s.pods {
		if g := st.groups[arn]; g != nil && g.waiter != nil {
			return true
		}
	}
	return false
}

// podCachedLocked reports whether the pod of st is still in the cache
// under the same UID.
func (s *Server) podCachedLocked(st *podState) bool {
	ns, name, _ := strings.Cut(st.key, "/")
	pod := &corev1.Pod{}
	err := s.cache.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, pod, client.UnsafeDisableDeepCopy)
	if apierrors.IsNotFound(err) {
		return false
	}
	return err != nil || string(pod.UID) == st.uid // on a read error, keep it
}

// serviceHasReadyEndpoint reports whether any slice of the Service lists a
// ready, not terminating endpoint; if none does, kube-proxy falls back to
// serving terminating ones.
func (s *Server) serviceHasReadyEndpoint(ctx context.Context, ns, svc string) bool {
	var list discoveryv1.EndpointSliceList
	if err := s.cache.List(ctx, &list, client.InNamespace(ns), client.MatchingLabels{serviceNameLabel: svc}, client.UnsafeDisableDeepCopy); err != nil {
		return false // fallback assumed: the route stays open
	}
	for _, sl := range list.Items {
		for _, e := range sl.Endpoints {
			v := viewOf(e)
			if v.ready && !v.terminating {
				return true
			}
		}
	}
	return false
}

type endpointView struct {
	ready, serving, terminating bool
	service                     string
}

// rank orders a pod's endpoints when several slices of one Service list it
// (dual stack): the most "in" one speaks for the route.
func (v endpointView) rank() int {
	switch {
	case v.ready && !v.terminating:
		return 3
	case v.serving:
		return 2
	case !v.terminating:
		return 1
	}
	return 0
}

// viewOf maps the API's nil conditions: nil ready means ready, nil serving
// means the same as ready, nil terminating means false.
func viewOf(e discoveryv1.Endpoint) endpointView {
	v := endpointView{ready: true}
	if e.Conditions.Ready != nil {
		v.ready = *e.Conditions.Ready
	}
	v.serving = v.ready
	if e.Conditions.Serving != nil {
		v.serving = *e.Conditions.Serving
	}
	if e.Conditions.Terminating != nil {
		v.terminating = *e.Conditions.Terminating
	}
	return v
}

// endpointIsPod reports whether e is the pod's endpoint: it has the pod's
// address, and its targetRef, when it names a pod, names this one (an IP
// reused by a newer pod is that pod's endpoint).
func endpointIsPod(e discoveryv1.Endpoint, ip string, pod *corev1.Pod) bool {
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

// routeName names an EndpointSlice route: its Service, or the slice itself
// when it names none.
func routeName(sl *discoveryv1.EndpointSlice) string {
	if svc := sl.Labels[serviceNameLabel]; svc != "" {
		return sl.Namespace + "/" + svc
	}
	return sl.Namespace + "/" + sl.Name
}

// targetOf picks the pod's target in a listing: any target with one of the
// pod's IPs (whatever the port), the most "in" state if there are several;
// "" when none is listed.
func targetOf(targets map[elbv2.Target]elbv2.Health, ips []string) (state, reason string) {
	best := -1
	for t, h := range targets {
		for _, ip := range ips {
			if t.ID != ip {
				continue
			}
			r := 2
			switch h.State {
			case gate.TargetDraining:
				r = 1
			case gate.TargetUnused:
				r = 0
			}
			if r > best {
				best, state, reason = r, h.State, h.Reason
			}
		}
	}
	return state, reason
}

func podIPs(pod *corev1.Pod) []string {
	var ips []string
	for _, ip := range pod.Status.PodIPs {
		ips = append(ips, ip.IP)
	}
	if len(ips) == 0 && pod.Status.PodIP != "" {
		ips = append(ips, pod.Status.PodIP)
	}
	return ips
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
