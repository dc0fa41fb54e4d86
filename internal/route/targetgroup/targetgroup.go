// Package targetgroup is the route through an AWS target group in `ip`
// mode, found through the AWS Load Balancer Controller's
// TargetGroupBinding: one route per binding whose Service lists the pod
// (or listed it before termination), named by the group's ARN. Its
// consumer is the load balancer.
//
// The route is out when the pod's target is `draining`, `unused` or absent
// from a full listing. Target health comes from the shared poller
// (internal/aws/elbv2), which polls a group only while a pod with a route
// through it waits, and reads the group's load balancer type once; until
// that is known the route takes the NLB tail, the longer one. The route's
// senders, which traffic evidence needs to close it before its tail, are
// its load balancers' nodes as the poller lists them; when it cannot (no
// permission, a stale list, an NLB that passes its clients' addresses on)
// nobody is known and the evidence may only lengthen the wait.
package targetgroup

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/elasticloadbalancingv2/types"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"draingate.dev/draingate/internal/aws/elbv2"
	"draingate.dev/draingate/internal/evidence"
	"draingate.dev/draingate/internal/gate"
	"draingate.dev/draingate/internal/route"
)

// Kind is the routes' kind, as api.Route.Kind carries it.
const Kind = "targetgroup"

// StateAbsent is the state of a target missing from a full listing.
const StateAbsent = "absent"

// BindingGVK is the AWS Load Balancer Controller's TargetGroupBinding.
var BindingGVK = schema.GroupVersionKind{Group: "elbv2.k8s.aws", Version: "v1beta1", Kind: "TargetGroupBinding"}

// The tails' defaults: how long a load balancer may still send new
// traffic after its target went out (see docs/facts.md, "Load balancer
// tails").
const (
	// DefaultALBTail: requests were seen ~17 s after a target showed
	// `draining`.
	DefaultALBTail = 20 * time.Second
	// DefaultNLBTail, also for a load balancer of unknown type: 180–300 s
	// per AWS Support.
	DefaultNLBTail = 300 * time.Second
)

// Options are what a Source needs.
type Options struct {
	// Poller reads target health and load balancer types.
	Poller *elbv2.Poller
	// Kube finds the TargetGroupBinding CRD (discovery).
	Kube kubernetes.Interface
	// ALBTail and NLBTail are the tails per load balancer type (NLB also
	// for one of unknown type); negative counts as zero.
	ALBTail, NLBTail time.Duration
	// CRDInterval is how often to look for the CRD while it is absent
	// (default 10 s).
	CRDInterval time.Duration
	// Log receives what an operator should know (slog.Default when nil).
	Log *slog.Logger
	// Learned is route.Env's: the propagation learnt per load balancer
	// (LearnKey), which sets the tails; nil: nothing learnt.
	Learned route.LearnedTails
	// EarlyClose is route.Env's: the evidence may close a route before its
	// tail (gate.Observation.EarlyClose).
	EarlyClose bool
}

// Source observes target-group routes. Make it with New.
type Source struct {
	cfg      Options
	cache    cache.Cache
	services *route.Services // which Services list a pod (set by Start)

	known  atomic.Bool // discovery said whether the CRD exists
	on     atomic.Bool // the CRD was found
	synced atomic.Bool // ... and its informer synced

	mu      sync.Mutex
	waiters map[route.PodKey]map[string]*elbv2.Waiter // pod → ARN → its waiter
	changed func(namespace, name string)
	// types are the load balancer types the poller reported, by ARN, kept
	// for AdmissionWait (a new pod's groups are not polled yet).
	types map[string]string
	// routes are the groups seen as each pod's route, here or (known's
	// WasRoute) by another replica or before a restart: one stays a route
	// once its listing drops the target (its deregistration delay ended)
	// and no Service lists the pod. Kept until the pod is gone (Drop).
	routes map[route.PodKey]map[string]bool
}

// New returns a source; Start starts it.
func New(o Options) *Source {
	if o.CRDInterval <= 0 {
		o.CRDInterval = 10 * time.Second
	}
	if o.Log == nil {
		o.Log = slog.Default()
	}
	o.ALBTail, o.NLBTail = max(o.ALBTail, 0), max(o.NLBTail, 0)
	return &Source{cfg: o, waiters: map[route.PodKey]map[string]*elbv2.Waiter{}, routes: map[route.PodKey]map[string]bool{}}
}

// Kind implements route.Source.
func (s *Source) Kind() string { return Kind }

// Start implements route.Source: it looks for the CRD in the background
// until it appears, then starts the bindings' informer.
func (s *Source) Start(ctx context.Context, h route.Host) error {
	s.mu.Lock()
	s.cache, s.changed, s.services = h.Cache, h.Changed, h.Services
	s.mu.Unlock()
	go s.watchCRD(ctx)
	return nil
}

// Ready implements route.Source.
func (s *Source) Ready() error {
	switch {
	case !s.known.Load():
		return errors.New("whether the TargetGroupBinding CRD is installed is not known yet")
	case s.on.Load() && !s.synced.Load():
		return errors.New("the TargetGroupBinding cache has not synced yet")
	}
	return nil
}

// Observe implements route.Source: one observation per `ip` binding in the
// pod's namespace and per ARN in known. A binding without targetType (the
// controller's webhook normally fills it in) counts as `ip`: waiting for a
// group that never held the pod costs time, missing one that does costs
// requests. While waiting, each group is polled.
//
// A group is the pod's route when its binding's Service lists the pod as
// ready or serving (the controller registers such endpoints), when
// its listing holds the pod's target (in any state: a pod that left its
// Service shortly before its deletion, as in a blue/green switch, is still
// draining there while its load balancer sends to it, and a restarted
// server finds it so), or when it was already the pod's route here. Any
// other group of the namespace is reported NotRoute once its listing shows
// no target of the pod; until then it is a route not synced yet, which
// holds the pod for one poll.
func (s *Source) Observe(ctx context.Context, pod *corev1.Pod, known []gate.Known, waiting bool) ([]gate.Observation, error) {
	arns := map[string]bool{}
	key := route.KeyOf(pod)
	for _, k := range known {
		arns[k.Name] = true
		if k.WasRoute {
			s.noteRoute(key, k.Name)
		}
		if len(k.Unlisted) > 0 && s.cfg.EarlyClose && s.cfg.Poller != nil {
			s.cfg.Poller.ReadNodesSoon(k.Name)
		}
	}
	served, zone, err := s.bound(ctx, pod, arns)
	if err != nil {
		return nil, err
	}
	if len(arns) == 0 {
		return nil, nil
	}
	ips := route.IPs(pod)
	out := make([]gate.Observation, 0, len(arns))
	for _, arn := range slices.Sorted(maps.Keys(arns)) {
		w := s.waiter(key, arn, waiting)
		var (
			obs elbv2.Observation
			ok  bool
		)
		if w != nil {
			obs, ok = w.Latest()
		}
		if served[arn] {
			s.noteRoute(key, arn)
		}
		var o gate.Observation
		switch {
		case ok:
			state, reason := TargetOf(obs.Targets, ips)
			registered := served[arn] || state != "" || s.wasRoute(key, arn)
			if registered {
				s.noteRoute(key, arn)
			}
			o = s.Judge(state, reason, obs.LoadBalancerType, registered)
			o.Tail, o.TailName = s.learnedTail(arn, key, o.Tail, o.TailName)
			if s.cfg.Learned != nil {
				o.LateChance = s.cfg.Learned.LateChance(s.LearnKey(arn), key, o.Tail)
			}
			o.Ports = TargetPorts(obs.Targets, ips)
			o.WeighTraffic, o.EarlyClose = true, s.cfg.EarlyClose
			o.Senders = Senders(obs, zone)
		case groupGone(obs.Err) && !s.wasRoute(key, arn):
			// A binding whose group was deleted in AWS: no route of a pod
			// it never served (it would otherwise hold every pod of the
			// namespace until its deadline).
			o = gate.Observation{Kind: Kind, Synced: true, NotRoute: true, State: StateAbsent,
				What: "the target group does not exist any more (TargetGroupNotFound), and the pod was never its route"}
			obs.Err = nil
		default:
			o = gate.Observation{Kind: Kind}
		}
		o.Name, o.Err = arn, obs.Err
		if groupGone(obs.Err) {
			o.Err = route.Gone(obs.Err)
		}
		if ok && obs.TypeErr != nil {
			o.TailName += fmt.Sprintf(" (the load balancer's type is not known: %v)", obs.TypeErr)
		}
		if ok && s.cfg.EarlyClose && errors.Is(obs.SendersErr, elbv2.ErrNodesDenied) {
			o.TailName += " (no early close: the server's role lacks ec2:DescribeNetworkInterfaces)"
		}
		if ok && obs.LoadBalancerType != "" {
			s.noteType(arn, obs.LoadBalancerType)
		}
		out = append(out, o)
	}
	return out, nil
}

// bound adds to arns the groups of the `ip` bindings in the pod's
// namespace, once their cache synced, and returns those whose Service
// lists the pod ready or serving, and the pod's zone as its endpoints give
// it ("" when none does, or they disagree).
func (s *Source) bound(ctx context.Context, pod *corev1.Pod, arns map[string]bool) (served map[string]bool, zone string, err error) {
	served = map[string]bool{}
	if !s.synced.Load() {
		return served, "", nil
	}
	listed, err := s.services.ServiceEndpoints(ctx, pod)
	if err != nil {
		return nil, "", err
	}
	zone = podZone(listed)
	bindings, err := s.ipBindings(ctx, pod.Namespace)
	if err != nil {
		return nil, "", err
	}
	for _, b := range bindings {
		arns[b.ARN] = true
		// Listed ready or serving: the controller registers it, or did.
		// Listed neither (never ready) it never was, and a group that does
		// not list it either is no route.
		if e, ok := listed[b.Service]; ok && (e.Ready || e.Serving) {
			served[b.ARN] = true
		}
	}
	return served, zone, nil
}

// podZone is the zone the pod's endpoints agree on; "" when none gives one
// or two differ.
func podZone(listed map[string]route.Endpoint) string {
	zone := ""
	for _, e := range listed {
		switch {
		case e.Zone == "":
		case zone == "":
			zone = e.Zone
		case zone != e.Zone:
			return ""
		}
	}
	return zone
}

func (s *Source) noteType(arn, lbType string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.types == nil {
		s.types = map[string]string{}
	}
	s.types[arn] = lbType
}

// AdmissionWait implements route.Source: the longest tail the target
// groups of a pod being created may need beyond the ALB tail (an NLB's
// 300 s against 20 s), so that a pod behind an NLB gets a deadline past the
// NLB's stated worst case and the same headroom for the controller's lag
// as a pod behind an ALB. It looks, in the cache, at every `ip` binding in
// the pod's namespace whose Service selects the pod's labels. A group
// whose load balancer type the server has not learnt yet (it reads each
// group's type when its binding appears, and here if it has not yet) takes
// the NLB tail, the longer by default. why names the group that sets the
// longest tail. Zero without the CRD or a binding that selects the pod.
// When it cannot tell (the bindings' cache not synced, a bound Service
// not in the cache yet, a cache error) it answers the NLB tail's extra,
// and the error says why. The pod's routes may still change after its
// creation, and its deadline does not follow them.
func (s *Source) AdmissionWait(ctx context.Context, pod *corev1.Pod) (time.Duration, string, error) {
	var tail time.Duration
	var why string
	groups, err := s.planned(ctx, pod)
	for _, g := range groups {
		if g.tail > tail {
			tail, why = g.tail, fmt.Sprintf("the %s tail (%s) of target group %s, bound to Service %s", g.tailName, g.tail, g.ARN, g.Service)
		}
	}
	if err != nil {
		tail, why = s.cfg.NLBTail, fmt.Sprintf("the NLB tail (%s), the longest, since %v", s.cfg.NLBTail, err)
	}
	if tail <= s.cfg.ALBTail {
		return 0, why, err
	}
	return tail - s.cfg.ALBTail, why, err
}

// AdmissionRoutes implements route.Learner: the groups bound to a Service
// that selects the pod, each with its tail; nil when the cache cannot tell.
func (s *Source) AdmissionRoutes(ctx context.Context, pod *corev1.Pod) []route.Planned {
	groups, err := s.planned(ctx, pod)
	if err != nil {
		return nil
	}
	var out []route.Planned
	for _, g := range groups {
		out = append(out, route.Planned{Name: g.ARN, What: fmt.Sprintf("target group %s (Service %s)", g.ARN, g.Service), Tail: g.tail, TailName: g.tailName})
	}
	return out
}

// plannedGroup is a target group a pod being created will be a target of,
// with its tail.
type plannedGroup struct {
	Binding
	tail     time.Duration
	tailName string
}

// planned are the target groups bound to a Service that selects the pod,
// each with its tail as its load balancer's type and what was learnt make
// it; an error when the cache cannot tell.
func (s *Source) planned(ctx context.Context, pod *corev1.Pod) ([]plannedGroup, error) {
	switch {
	case !s.known.Load():
		return nil, errors.New("whether the TargetGroupBinding CRD is installed is not known yet")
	case !s.on.Load():
		return nil, nil
	case !s.synced.Load():
		return nil, errors.New("the TargetGroupBinding cache has not synced yet")
	case s.services == nil:
		return nil, errors.New("target-group routes have not started")
	}
	bindings, err := s.selecting(ctx, pod)
	if err != nil {
		return nil, err
	}
	var out []plannedGroup
	for _, b := range bindings {
		t, name := s.tail(s.typeOf(b.ARN))
		// The pod may not be created yet (the webhook sizes it): the
		// tail any pod of its namespace may take.
		t, name = s.learnedTail(b.ARN, route.PodKey{Namespace: pod.Namespace}, t, name)
		out = append(out, plannedGroup{Binding: b, tail: t, tailName: name})
	}
	return out, nil
}

// selecting are the namespace's `ip` bindings whose Service selects the
// pod's labels, from the cache; an error when the cache cannot tell.
func (s *Source) selecting(ctx context.Context, pod *corev1.Pod) ([]Binding, error) {
	bindings, err := s.ipBindings(ctx, pod.Namespace)
	if err != nil {
		return nil, err
	}
	var out []Binding
	for _, b := range bindings {
		if b.Service == "" {
			continue
		}
		selects, found, err := s.services.Selects(ctx, pod.Namespace, b.Service, pod.Labels)
		switch {
		case err != nil:
			return nil, err
		case !found:
			return nil, fmt.Errorf("Service %s/%s, bound to target group %s, is not in the cache (yet)", pod.Namespace, b.Service, b.ARN)
		case selects:
			out = append(out, b)
		}
	}
	return out, nil
}

// ipBindings are the namespace's TargetGroupBindings of `ip` targets that
// name a group, from the cache (one without a targetType counts as `ip`).
func (s *Source) ipBindings(ctx context.Context, namespace string) ([]Binding, error) {
	return s.bindings(ctx, namespace, func(b Binding) bool { return b.TargetType != "instance" })
}

// bindings are the namespace's TargetGroupBindings that name a group and
// that keep says to keep, from the cache.
func (s *Source) bindings(ctx context.Context, namespace string, keep func(Binding) bool) ([]Binding, error) {
	var list unstructured.UnstructuredList
	list.SetGroupVersionKind(BindingGVK.GroupVersion().WithKind(BindingGVK.Kind + "List"))
	if err := s.cache.List(ctx, &list, client.InNamespace(namespace), client.UnsafeDisableDeepCopy); err != nil {
		return nil, fmt.Errorf("list TargetGroupBindings from the cache: %w", err)
	}
	var out []Binding
	for i := range list.Items {
		if b := BindingFrom(&list.Items[i]); b.ARN != "" && keep(b) {
			out = append(out, b)
		}
	}
	return out, nil
}

// typeOf is the load balancer type of a group as far as the source knows
// it ("" when unknown: the poller is asked to learn it).
func (s *Source) typeOf(arn string) string {
	s.mu.Lock()
	lbType := s.types[arn]
	s.mu.Unlock()
	if lbType == "" && s.cfg.Poller != nil {
		if t, ok := s.cfg.Poller.TypeOf(arn); ok {
			return t
		}
		s.cfg.Poller.LearnType(arn)
	}
	return lbType
}

// waiter returns the pod's waiter on arn, starting it when the pod waits.
func (s *Source) waiter(key route.PodKey, arn string, waiting bool) *elbv2.Waiter {
	s.mu.Lock()
	defer s.mu.Unlock()
	if w := s.waiters[key][arn]; w != nil || !waiting || s.changed == nil {
		return w
	}
	if s.waiters[key] == nil {
		s.waiters[key] = map[string]*elbv2.Waiter{}
	}
	w := s.cfg.Poller.Watch(arn)
	s.waiters[key][arn] = w
	changed := s.changed
	go func() {
		// Each new listing, failed call or type answer: re-observe the pod.
		for range w.Changed() {
			changed(key.Namespace, key.Name)
		}
	}()
	return w
}

// wasRoute says whether arn was seen as the pod's route.
func (s *Source) wasRoute(key route.PodKey, arn string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.routes[key][arn]
}

// noteRoute remembers arn as the pod's route until Drop.
func (s *Source) noteRoute(key route.PodKey, arn string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.routes[key] == nil {
		s.routes[key] = map[string]bool{}
	}
	s.routes[key][arn] = true
}

// Forget implements route.Forgetter: the pod's groups stop being polled
// for it; which groups were its routes is kept.
func (s *Source) Forget(pod route.PodKey) {
	s.mu.Lock()
	ws := s.waiters[pod]
	delete(s.waiters, pod)
	s.mu.Unlock()
	for _, w := range ws {
		go w.Close() // Close waits for the group's goroutine: never under a caller's lock.
	}
}

// Drop implements route.Forgetter: Forget, and which groups were the
// pod's routes too.
func (s *Source) Drop(pod route.PodKey) {
	s.Forget(pod)
	s.mu.Lock()
	delete(s.routes, pod)
	s.mu.Unlock()
}

// Close implements route.Closer: it stops polling for every pod, then
// stops the poller.
func (s *Source) Close() {
	s.mu.Lock()
	all := s.waiters
	s.waiters = map[route.PodKey]map[string]*elbv2.Waiter{}
	s.mu.Unlock()
	for _, ws := range all {
		for _, w := range ws {
			w.Close()
		}
	}
	if s.cfg.Poller != nil {
		s.cfg.Poller.Close()
	}
}

// Judge reads the pod's target in a group: its state and reason as
// DescribeTargetHealth reported them ("" when absent from a full listing),
// the load balancer's type ("" when unknown) and whether the target was
// seen registered or expected. Name and Err are left to the caller.
//
// Out: `draining` (the deregistration call happened), `unused` (whatever
// the reason: the load balancer does not send to it), or absent. Not out:
// `initial`, `healthy`, `unhealthy` (a load balancer whose targets are all
// unhealthy fails open and sends to all of them), `unhealthy.draining` (an
// NLB target failing health checks while still registered: it may still
// get connections), `unavailable` (health checks disabled: the load
// balancer sends to it), and any state this code does not know. `draining`
// proves the target was registered; `unused` and absent prove nothing, so
// without wasRegistered they are no route at all.
func (s *Source) Judge(state, reason, lbType string, wasRegistered bool) gate.Observation {
	o := gate.Observation{Kind: Kind, Synced: true, State: state}
	o.Tail, o.TailName = s.tail(lbType)
	// An NLB routes flows: it keeps passing a draining target the flows
	// it opened before, so only a new connection shows a node still
	// routes to the pod. A load balancer of unknown type has all its
	// arrivals weighed, which can only lengthen the wait.
	o.NewConns = lbType == elbv2.TypeNetwork
	if reason != "" {
		reason = " (" + reason + ")"
	}
	switch types.TargetHealthStateEnum(state) {
	case "":
		o.State, o.Out, o.What = StateAbsent, true, "the target is absent from the full listing"
	case types.TargetHealthStateEnumDraining, types.TargetHealthStateEnumUnused:
		o.Out, o.What = true, "the target is "+state+reason
	case types.TargetHealthStateEnumInitial, types.TargetHealthStateEnumHealthy, types.TargetHealthStateEnumUnhealthy:
		o.What = "the target is " + state + reason + ": the load balancer may send to it"
	case types.TargetHealthStateEnumUnhealthyDraining:
		o.What = "the target is unhealthy.draining" + reason + ": still registered, and an NLB may still send to it"
	case types.TargetHealthStateEnumUnavailable:
		o.What = "the target is unavailable" + reason + ": health checks are disabled and the load balancer sends to it"
	default:
		o.What = fmt.Sprintf("the target is in state %q%s, unknown to draingate: kept open", state, reason)
	}
	if o.Out && !wasRegistered && o.State != string(types.TargetHealthStateEnumDraining) {
		o.NotRoute = true
		o.What = "never registered: " + o.What + ", and the pod was never seen registered nor expected in it, so it is not a route"
	}
	return o
}

// LearnKey implements route.Learner: what a group teaches is its load
// balancer's ("lb:" and its ARN, the first of several), or the group's own
// ("tg:" and its ARN) while its load balancer is not known.
func (s *Source) LearnKey(arn string) string {
	if s.cfg.Poller != nil {
		if lbs := s.cfg.Poller.LoadBalancersOf(arn); len(lbs) > 0 {
			return "lb:" + lbs[0]
		}
	}
	return "tg:" + arn
}

// learnedTail is a group's tail for pod given what its load balancer's
// drains taught (internal/learn); the name says when that changed it.
func (s *Source) learnedTail(arn string, pod route.PodKey, tail time.Duration, name string) (time.Duration, string) {
	if s.cfg.Learned == nil {
		return tail, name
	}
	t, why := s.cfg.Learned.Tail(s.LearnKey(arn), pod, tail)
	if why != "" {
		name += fmt.Sprintf(" (%s, %s)", tail, why)
	}
	return t, name
}

// tail picks the tail for a load balancer type: an unknown type takes the
// NLB tail, the longer one by default (waiting too long costs time,
// waiting too short costs requests).
func (s *Source) tail(lbType string) (time.Duration, string) {
	switch lbType {
	case elbv2.TypeApplication:
		return s.cfg.ALBTail, "ALB"
	case elbv2.TypeNetwork:
		return s.cfg.NLBTail, "NLB"
	case "":
		return s.cfg.NLBTail, "NLB (for a load balancer of unknown type)"
	}
	return s.cfg.NLBTail, fmt.Sprintf("NLB (for load balancer type %q)", lbType)
}

// TargetPorts are the ports of the pod's targets in a listing, sorted:
// where the group's traffic arrives, so the gate weighs the pod's traffic
// evidence on them (and not probes or scrapes on other ports). Empty when
// no target of the pod is listed: the tail alone decides then.
func TargetPorts(targets map[elbv2.Target]elbv2.Health, ips []string) []uint16 {
	var ports []uint16
	for t := range targets {
		if t.Port > 0 && t.Port <= 65535 && slices.ContainsFunc(ips, func(ip string) bool { return SameIP(t.ID, ip) }) {
			ports = append(ports, uint16(t.Port))
		}
	}
	slices.Sort(ports)
	return slices.Compact(ports)
}

// TargetOf picks the pod's target in a listing: any target with one of the
// pod's IPs (whatever the port), the most "in" state if there are several;
// "" when none is listed.
func TargetOf(targets map[elbv2.Target]elbv2.Health, ips []string) (state, reason string) {
	best := -1
	for t, h := range targets {
		for _, ip := range ips {
			if !SameIP(t.ID, ip) {
				continue
			}
			r := 2
			switch types.TargetHealthStateEnum(h.State) {
			case types.TargetHealthStateEnumDraining:
				r = 1
			case types.TargetHealthStateEnumUnused:
				r = 0
			}
			if r > best || r == best && h.State+h.Reason < state+reason {
				best, state, reason = r, h.State, h.Reason
			}
		}
	}
	return state, reason
}

// SameIP reports whether a target's Id and a pod IP name the same address:
// an IPv6 address has many spellings ("2001:db8::a" and
// "2001:0db8:0:0:0:0:0:000a"), and an IPv4 one may come IPv4-mapped
// ("::ffff:10.0.0.1"). Ids that are not addresses (instance ids) match
// only themselves.
func SameIP(id, ip string) bool {
	if id == ip {
		return true
	}
	a, errA := netip.ParseAddr(id)
	b, errB := netip.ParseAddr(ip)
	return errA == nil && errB == nil && a.Unmap().WithZone("") == b.Unmap().WithZone("")
}

// Senders is who sends a group's traffic to a pod in zone, for the
// evidence: the nodes of its load balancers when the poller holds a fresh
// list of each, else nobody known and why, so that the evidence may only
// lengthen the wait. When the group's nodes send only within their zone
// (obs.CrossZoneOff) and the pod's zone is known, the senders an early
// close must see are the nodes of that zone; the others may still send
// (the setting can change), and are weighed if they do. A zone with no
// node keeps every node a sender.
func Senders(obs elbv2.Observation, zone string) evidence.Senders {
	if !obs.SendersKnown {
		return evidence.Senders{Why: obs.SendersWhy}
	}
	if !obs.CrossZoneOff || zone == "" {
		return evidence.Senders{Known: true, Addrs: obs.Senders}
	}
	var in, out []netip.Addr
	for _, a := range obs.Senders {
		// A node whose zone is not known stays needed.
		if z := obs.SenderZones[a]; z == zone || z == "" {
			in = append(in, a)
		} else {
			out = append(out, a)
		}
	}
	if len(in) == 0 {
		return evidence.Senders{Known: true, Addrs: obs.Senders}
	}
	return evidence.Senders{Known: true, Addrs: in, Maybe: out}
}

// groupGone reports whether err says the target group does not exist.
func groupGone(err error) bool {
	var nf *types.TargetGroupNotFoundException
	return err != nil && errors.As(err, &nf)
}

// ClaimsService implements route.LoadBalancers: a Service that an `ip`
// TargetGroupBinding names is this kind's route (instance bindings are
// not: the kind does not follow node ports).
func (s *Source) ClaimsService(ctx context.Context, namespace, name string) (bool, error) {
	switch {
	case !s.known.Load():
		return false, errors.New("whether the TargetGroupBinding CRD is installed is not known yet")
	case !s.on.Load():
		return false, nil
	case !s.synced.Load():
		return false, errors.New("the TargetGroupBinding cache has not synced yet")
	}
	bindings, err := s.ipBindings(ctx, namespace)
	if err != nil {
		return false, err
	}
	for _, b := range bindings {
		if b.Service == name {
			return true, nil
		}
	}
	return false, nil
}
