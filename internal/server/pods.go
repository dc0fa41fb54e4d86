package server

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"

	"draingate.dev/draingate/api"
	"draingate.dev/draingate/internal/evidence"
	"draingate.dev/draingate/internal/gate"
	"draingate.dev/draingate/internal/ledger"
	"draingate.dev/draingate/internal/route"
	"draingate.dev/draingate/internal/waitapi"
)

// This file follows one terminating pod through the server, in order: the
// pod informer sees it terminating (podChanged) and the server starts its
// state and decides (stateLocked, decideLocked: every route source
// observes, gate.Step judges, a timer waits for the next change by the
// clock); route changes decide again (routesChanged, refreshLocked); its
// agent asks (authorize, Verdict: the ask's traffic summary, stamped, a
// decision, the Events) and long-polls (Changed, signal); the janitor stops work for
// a pod nobody asks about (sweep); the pod goes (podDeleted, dropLocked).

// pods is the server's per-pod state: for every terminating pod, the gate's
// memory and whether its agent is asking. It observes a pod's routes
// through every source, lets gate.Step decide, stores what Step returns,
// and wakes the pod's long-polls. It needs no cluster: the pod reader, the
// sources and the events are given.
type pods struct {
	now     func() time.Time
	sources []route.Source
	// inCluster says whether an address is a pod of the cluster's (from
	// the cache): its traffic is an in-cluster client's.
	inCluster func(netip.Addr) bool
	// get reads a pod from the cache (an apierrors NotFound when absent).
	// The pod may be shared with the cache: read it, never change it.
	get func(ctx context.Context, namespace, name string) (*corev1.Pod, error)
	// live, when set, reads a pod from the API server itself (a
	// consistent read): it confirms that a pod the cache sees as not
	// terminating really is not, before the agent is let go.
	live func(ctx context.Context, namespace, name string) (*corev1.Pod, error)
	// tokens, when set, reviews the tokens agents show (hostNetwork pods'
	// agents: see authorize).
	tokens *tokens
	// reserve is taken off the pod's deletionTimestamp for its deadline.
	reserve time.Duration
	// linger is how long a pod counts as waiting after its agent last
	// asked: sources may keep costly work (AWS polls) going for it that long.
	linger time.Duration
	events *events
	// tracked, when set, is told how many pods are tracked.
	tracked func(n int)
	// ready says why the gate cannot answer yet (nil once it can).
	ready func() error
	// shared, when set, is where every replica keeps what the gate
	// remembers of each pod whose agent waits (internal/ledger): each
	// decision starts from the union of every replica's observations.
	shared sharedMemory
	// ignoreTraffic drops the agents' traffic evidence; epsilon is the
	// false-quiet chance the gate accepts with it.
	ignoreTraffic bool
	epsilon       float64
	// learn, when set, is told what a route the evidence closed taught
	// (learnedLocked): once per route of a pod.
	learn func(k gate.RouteKey, outSince time.Time, stops []evidence.Stop)
	// lag, when set, learns how long after each pod's deletion its owners
	// took it out (lag.go); after holds, by UID, the gone pods whose
	// routes are watched until then, afterN how many.
	lag    *lagLearning
	after  map[string]*podState
	afterN atomic.Int32

	synced atomic.Bool // the pod cache and the sources synced

	// mu guards the terminating pods' states; it is held while a pod's
	// routes are observed and the gate steps. Events that concern no
	// tracked pod never take it: a cluster's stream of pod updates and
	// slice changes goes by while a decision is made.
	mu     sync.Mutex
	closed bool
	pods   map[string]*podState // "namespace/name" → a terminating pod

	// byNS counts the tracked pods per namespace (written under mu too).
	nsMu sync.Mutex
	byNS map[string]int

	subsMu sync.Mutex
	subs   map[string]map[chan struct{}]struct{}

	liveMu    sync.Mutex
	liveReads map[types.UID]time.Time // a pod's last live read (mayReadLive)
}

// sharedMemory is the replicas' shared memory of each pod (ledger.Ledger).
type sharedMemory interface {
	Record(uid types.UID) ledger.Record
	Note(uid types.UID, r ledger.Record)
	Drop(uid types.UID)
	Pods() map[types.UID]string
}

// podState is what the server keeps about one terminating pod.
type podState struct {
	key   route.PodKey
	mem   gate.Memory
	asked time.Time // the agent's last ask; zero when not waiting
	// traffic is the traffic summary of the agent's latest ask as the gate
	// weighs it, stamped with the time it arrived; nil when it sent none
	// or evidence is off. summary is that ask's own summary, to stamp it
	// once however often the ask is judged.
	traffic *gate.Traffic
	summary *api.Traffic
	timer   *time.Timer
	// startNoted and releaseNoted: the pod's Events were written;
	// routesNoted, the route states the last of them told (routeSignature).
	startNoted, releaseNoted bool
	routesNoted              string
	// shared says the pod's memory is shared with the other replicas (see
	// pods.shared): it carries the agent, or its agent asked.
	shared bool
	// learnt are the routes whose stops were handed to pods.learn.
	learnt map[gate.RouteKey]bool
	// pod is the pod as last seen (slimPod), observed once it is gone;
	// deleted is when it was deleted (the earliest deletedAt seen);
	// everAsked says its agent asked this replica; lagged are the routes
	// whose lag was recorded (lag.go).
	pod       *corev1.Pod
	deleted   time.Time
	everAsked bool
	lagged    map[gate.RouteKey]bool
}

func newPods() *pods {
	return &pods{pods: map[string]*podState{}, after: map[string]*podState{}, byNS: map[string]int{}, subs: map[string]map[chan struct{}]struct{}{}}
}

// podChanged is the pod informer's add and update handler.
func (p *pods) podChanged(o any) {
	pod, ok := o.(*corev1.Pod)
	if !ok {
		return
	}
	key := pod.Namespace + "/" + pod.Name
	if pod.DeletionTimestamp == nil {
		// Nothing to decide: a long-poll about it (a restart's) re-reads.
		if p.synced.Load() {
			p.signal(key)
		}
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return
	}
	st := p.stateLocked(pod, p.now())
	if p.synced.Load() {
		p.decideLocked(context.Background(), pod, st, p.now())
	}
	p.signal(key)
}

// stateLocked returns the pod's state, making it on first sight. A state
// held for another pod of the same name (an older UID) is dropped first.
func (p *pods) stateLocked(pod *corev1.Pod, now time.Time) *podState {
	key := route.KeyOf(pod)
	st := p.pods[key.String()]
	if st != nil && st.key.UID != key.UID {
		p.dropLocked(st)
		st = nil
	}
	if st == nil {
		st = &podState{key: key, mem: gate.Memory{TerminatingSince: now}}
		p.pods[key.String()] = st
		p.countNS(key.Namespace, 1)
		p.count()
	}
	st.shared = st.shared || pod.Annotations[api.AnnotationInjected] != ""
	st.pod = slimPod(pod, st.pod)
	if d := deletedAt(pod); !d.IsZero() && (st.deleted.IsZero() || d.Before(st.deleted)) {
		st.deleted = d
	}
	return st
}

// decideLocked observes the pod's routes through every source, steps the
// gate, stores its memory and sets the pod's timer for the next time the
// verdict can change by the clock alone. A failed observation changes
// nothing and is returned: a route the sources could not report may be
// missing, so no verdict rather than one that forgets it (rule 1).
func (p *pods) decideLocked(ctx context.Context, pod *corev1.Pod, st *podState, now time.Time) (api.Verdict, error) {
	mem := st.mem
	shared := p.shared != nil && st.shared
	if shared {
		mem = p.shared.Record(pod.UID).Merge(mem)
	}
	var obs []gate.Observation
	observed := withAddresses(pod, st)
	for _, src := range p.sources {
		if err := src.Ready(); err != nil {
			return api.Verdict{}, err
		}
		o, err := src.Observe(ctx, observed, mem.Known(src.Kind()), !st.asked.IsZero())
		if err != nil {
			return api.Verdict{}, err
		}
		obs = append(obs, o...)
	}
	gp := p.gatePod(pod)
	gp.Traffic = st.traffic
	v, next := gate.Step(now, gp, mem, obs)
	if shared {
		tails := map[gate.RouteKey]time.Duration{}
		for _, o := range obs {
			tails[gate.RouteKey{Kind: o.Kind, Name: o.Name}] = max(o.Tail, 0)
		}
		p.shared.Note(pod.UID, ledger.Of(st.key.String(), mem, next, now, tails))
	}
	st.mem = next
	p.learnedLocked(st, next)
	p.lagLocked(st, next)
	if st.timer != nil {
		st.timer.Stop()
		st.timer = nil
	}
	if next := gate.NextChange(now, gp, v); !next.IsZero() {
		st.timer = time.AfterFunc(next.Sub(now)+5*time.Millisecond, func() {
			p.mu.Lock()
			defer p.mu.Unlock()
			if p.pods[st.key.String()] == st {
				p.refreshLocked(st)
			}
		})
	}
	return v, nil
}

func (p *pods) gatePod(pod *corev1.Pod) gate.Pod {
	gp := gate.Pod{Namespace: pod.Namespace, Name: pod.Name, UID: string(pod.UID)}
	if pod.DeletionTimestamp != nil {
		gp.Terminating = true
		gp.Deadline = pod.DeletionTimestamp.Add(-p.reserve)
	}
	return gp
}

// refreshLocked re-observes a tracked pod, so that OutSince is recorded as
// soon as an owner takes the pod out whether or not its agent asks yet, and
// wakes its long-polls. An error keeps the memory as it was; the next
// change or the agent's next ask tries again.
func (p *pods) refreshLocked(st *podState) {
	defer p.signal(st.key.String())
	if p.closed || !p.synced.Load() {
		return
	}
	pod, err := p.get(context.Background(), st.key.Namespace, st.key.Name)
	if err != nil || string(pod.UID) != st.key.UID {
		return
	}
	p.decideLocked(context.Background(), pod, st, p.now())
}

// routesChanged re-observes the tracked pods whose routes may have changed:
// every pod for namespace "", every pod of the namespace for name "", and
// the gone pods watched for their lag likewise. The sources call it.
func (p *pods) routesChanged(namespace, name string) {
	if !p.synced.Load() || !p.tracks(namespace) && p.afterN.Load() == 0 {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	match := func(st *podState) bool {
		return (namespace == "" || st.key.Namespace == namespace) && (name == "" || st.key.Name == name)
	}
	for _, st := range p.pods {
		if match(st) {
			p.refreshLocked(st)
		}
	}
	if p.closed {
		return
	}
	for _, st := range p.after {
		if match(st) {
			p.watchLocked(st, p.now())
		}
	}
}

// authorize lets the wait API answer about a pod only its own agent: a
// request from one of the pod's addresses (the agent asks from inside the
// pod's network namespace), or one showing a ServiceAccount token bound to
// the pod (see tokens). Anybody else would learn the pod's routes and
// target groups, and hold long-polls and AWS polling for a pod it does not
// own. A hostNetwork pod's address is its node's, which the node's other
// hostNetwork pods and processes share: only the token counts for it.
func (p *pods) authorize(ctx context.Context, req api.DrainRequest, c waitapi.Caller) error {
	if err := p.ready(); err != nil {
		return err
	}
	pod, err := p.get(ctx, req.Namespace, req.Pod)
	if apierrors.IsNotFound(err) {
		return waitapi.ErrUnknownPod
	}
	if err != nil {
		return fmt.Errorf("read pod from cache: %w", err)
	}
	ips := route.IPs(pod)
	if !pod.Spec.HostNetwork {
		if len(ips) == 0 {
			// Its address has not reached the cache yet: ask again (503).
			return errors.New("the pod has no address in the server's cache yet")
		}
		for _, ip := range ips {
			if a, err := netip.ParseAddr(ip); err == nil && a.Unmap() == c.Addr {
				return nil
			}
		}
	}
	if c.Token != "" && p.tokens != nil {
		b, err := p.tokens.podOf(ctx, c.Token, c.Addr)
		switch {
		case errors.Is(err, errTokenRefused):
			return fmt.Errorf("%w: %w", waitapi.ErrForbidden, err)
		case err != nil:
			return err
		case b.namespace != pod.Namespace || b.name != pod.Name || b.uid != string(pod.UID):
			return fmt.Errorf("%w: the token shown is bound to pod %s, not to %s/%s (uid %s)", waitapi.ErrForbidden, b, pod.Namespace, pod.Name, pod.UID)
		}
		return nil
	}
	if pod.Spec.HostNetwork {
		return fmt.Errorf("%w: a hostNetwork pod shares its node's address, so the wait API answers its agent only with a ServiceAccount token "+
			"bound to the pod (audience %s), which the injector mounts (--token-file); a pod injected before this version has none: re-create it",
			waitapi.ErrForbidden, api.TokenAudience)
	}
	return fmt.Errorf("%w: the wait API answers a pod's own agent only, from one of the pod's addresses (%s); "+
		"if a proxy or mesh sidecar in front of the server hides the agents' addresses, run it with --wait-api-sources=any",
		waitapi.ErrForbidden, strings.Join(ips, ", "))
}

// Verdict implements waitapi.Gate: it reads the pod from the cache, marks
// it waiting (its sources may then do costly work for it, such as polling
// its target groups), observes its routes and steps the gate.
func (p *pods) Verdict(ctx context.Context, req api.DrainRequest) (api.Verdict, error) {
	if err := p.ready(); err != nil {
		return api.Verdict{}, err
	}
	pod, err := p.get(ctx, req.Namespace, req.Pod)
	if apierrors.IsNotFound(err) {
		return api.Verdict{}, waitapi.ErrUnknownPod
	}
	if err != nil {
		return api.Verdict{}, fmt.Errorf("read pod from cache: %w", err)
	}
	if req.UID != "" && !strings.EqualFold(req.UID, string(pod.UID)) {
		return api.Verdict{}, waitapi.ErrUIDMismatch
	}
	now := p.now()
	if pod.DeletionTimestamp == nil {
		v, _ := gate.Step(now, p.gatePod(pod), gate.Memory{}, nil)
		p.confirmNotTerminating(ctx, pod, &v)
		return v, nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return api.Verdict{}, errors.New("the server is shutting down")
	}
	st := p.stateLocked(pod, now)
	st.asked, st.shared, st.everAsked = now, true, true
	// Each ask replaces the evidence, once: the wait API calls Verdict
	// again during a long-poll with the same request, whose summary must
	// keep the time it arrived (re-reading its ages against a later clock
	// would make old silence look new). An ask without a summary drops
	// the last one: the tails alone decide then, never stale evidence.
	if req.Traffic != st.summary || st.summary == nil {
		st.summary, st.traffic = req.Traffic, nil
		if req.Traffic != nil && !p.ignoreTraffic {
			st.traffic = &gate.Traffic{Summary: req.Traffic, At: now, Node: nodeAddrs(pod), InCluster: p.inCluster, Epsilon: p.epsilon}
		}
	}
	v, err := p.decideLocked(ctx, pod, st, now)
	if err != nil {
		return api.Verdict{}, err
	}
	p.events.noteLocked(pod, st, v)
	return v, nil
}

// nodeAddrs are the addresses of the pod's node, whose traffic (probes)
// is never a route's.
func nodeAddrs(pod *corev1.Pod) []netip.Addr {
	var node []netip.Addr
	for _, h := range pod.Status.HostIPs {
		if a, err := netip.ParseAddr(h.IP); err == nil {
			node = append(node, a)
		}
	}
	if a, err := netip.ParseAddr(pod.Status.HostIP); err == nil {
		node = append(node, a)
	}
	return node
}

// liveReadTimeout bounds confirmNotTerminating's read; liveReadEvery is
// the least time between two live reads of one pod, so that a pod asking
// about itself in a loop cannot turn its asks into API server load.
const (
	liveReadTimeout = 5 * time.Second
	liveReadEvery   = time.Second
)

// mayReadLive says whether the pod may be read live now, and if so notes
// the read. Reads older than liveReadEvery are forgotten as it goes.
func (p *pods) mayReadLive(uid types.UID) bool {
	now := p.now()
	p.liveMu.Lock()
	defer p.liveMu.Unlock()
	if last, ok := p.liveReads[uid]; ok && now.Sub(last) < liveReadEvery {
		return false
	}
	if p.liveReads == nil || len(p.liveReads) > 1024 {
		for u, at := range p.liveReads {
			if now.Sub(at) >= liveReadEvery {
				delete(p.liveReads, u)
			}
		}
		if p.liveReads == nil {
			p.liveReads = map[types.UID]time.Time{}
		}
	}
	p.liveReads[uid] = now
	return true
}

// confirmNotTerminating releases the agent of a pod that is not being
// deleted: its preStop hook runs because its container stops for another
// reason (a failed liveness probe, an eviction, a node's graceful
// shutdown), and holding it would only delay the restart or eat the time
// the kubelet gives the app. The cache may be behind a deletion the
// kubelet already acts on, so the release needs the API server's own word
// (a consistent read); a read that fails or shows a deletion (or another
// incarnation) leaves v as it is, and the agent asks again.
func (p *pods) confirmNotTerminating(ctx context.Context, cached *corev1.Pod, v *api.Verdict) {
	if p.live == nil || v.Released || v.Reason != api.ReasonNotTerminating {
		return
	}
	if !p.mayReadLive(cached.UID) {
		v.Message += fmt.Sprintf("; the API server was asked about it less than %s ago: asking again", liveReadEvery)
		return
	}
	rctx, cancel := context.WithTimeout(ctx, liveReadTimeout)
	defer cancel()
	pod, err := p.live(rctx, cached.Namespace, cached.Name)
	switch {
	case err != nil:
		v.Message += fmt.Sprintf("; the API server could not confirm it (%s): asking again", api.OneLine(err.Error()))
	case pod.UID != cached.UID || pod.DeletionTimestamp != nil:
		v.Message += "; the API server already says otherwise: waiting for the cache"
	default:
		v.Released = true
		v.Message = "the pod is not being deleted (the API server confirms it): its container stops for another reason " +
			"(a failed liveness probe, an eviction, a node shutdown), with no deletion for the load balancers to follow: released at once"
	}
}

// Changed implements waitapi.Gate.
func (p *pods) Changed(req api.DrainRequest) (<-chan struct{}, func()) {
	key := req.Namespace + "/" + req.Pod
	ch := make(chan struct{}, 1)
	p.subsMu.Lock()
	if p.subs[key] == nil {
		p.subs[key] = map[chan struct{}]struct{}{}
	}
	p.subs[key][ch] = struct{}{}
	p.subsMu.Unlock()
	return ch, func() {
		p.subsMu.Lock()
		delete(p.subs[key], ch)
		if len(p.subs[key]) == 0 {
			delete(p.subs, key)
		}
		p.subsMu.Unlock()
	}
}

// subscribed says whether a long-poll waits on the pod.
func (p *pods) subscribed(key string) bool {
	p.subsMu.Lock()
	defer p.subsMu.Unlock()
	return len(p.subs[key]) > 0
}

// signal wakes the long-polls waiting on the pod.
func (p *pods) signal(key string) {
	p.subsMu.Lock()
	defer p.subsMu.Unlock()
	for ch := range p.subs[key] {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

// sweep is the janitor's round: it forgets pods no longer in the cache
// (a delete event that raced a verdict re-making the state), tells the
// sources to stop working for pods whose agents stopped asking, and drops
// the shared records of pods that are gone.
func (p *pods) sweep(now time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for key, st := range p.pods {
		pod, err := p.get(context.Background(), st.key.Namespace, st.key.Name)
		if apierrors.IsNotFound(err) || err == nil && string(pod.UID) != st.key.UID {
			p.dropLocked(st)
			continue
		}
		if p.subscribed(key) || st.asked.IsZero() || now.Sub(st.asked) < p.linger {
			continue
		}
		st.asked = time.Time{}
		p.forget(st)
	}
	for _, st := range p.after {
		p.watchLocked(st, now)
	}
	p.sweepSharedLocked()
}

// sweepSharedLocked drops the shared records of pods that are gone: a
// replica that saw the pod go deletes its record, this catches those
// missed (every replica down at the time, a failed delete).
func (p *pods) sweepSharedLocked() {
	if p.shared == nil {
		return
	}
	for uid, name := range p.shared.Pods() {
		ns, n, ok := strings.Cut(name, "/")
		if !ok {
			p.shared.Drop(uid)
			continue
		}
		pod, err := p.get(context.Background(), ns, n)
		if apierrors.IsNotFound(err) || err == nil && pod.UID != uid {
			p.shared.Drop(uid)
		}
	}
}

// podDeleted is the pod informer's delete handler.
func (p *pods) podDeleted(o any) {
	if t, ok := o.(toolscache.DeletedFinalStateUnknown); ok {
		o = t.Obj
	}
	pod, ok := o.(*corev1.Pod)
	if !ok {
		return
	}
	key := pod.Namespace + "/" + pod.Name
	if pod.DeletionTimestamp != nil || p.tracks(pod.Namespace) {
		p.mu.Lock()
		if st := p.pods[key]; st != nil && st.key.UID == string(pod.UID) {
			p.dropLocked(st)
		}
		p.mu.Unlock()
	}
	p.signal(key)
}

// dropLocked forgets a pod that is gone: its timer stops and the sources
// drop it, except those whose routes of the pod are watched on for their
// lag (lag.go): the pod moves to after.
func (p *pods) dropLocked(st *podState) {
	if p.pods[st.key.String()] == st {
		delete(p.pods, st.key.String())
		p.countNS(st.key.Namespace, -1)
		p.count()
	}
	if st.timer != nil {
		st.timer.Stop()
	}
	watch := !p.closed && len(p.lagPending(st)) > 0
	for _, src := range p.sources {
		if !watch || !p.lag.learns(src.Kind()) {
			src.Drop(st.key)
		}
	}
	if p.shared != nil {
		p.shared.Drop(types.UID(st.key.UID))
	}
	if watch {
		p.after[st.key.UID] = st
		p.afterN.Store(int32(len(p.after)))
	}
}

// forget tells the sources that nobody waits for the pod any more, except
// those whose routes of the pod are still watched for their lag.
func (p *pods) forget(st *podState) {
	for _, src := range p.sources {
		if !p.keepForLag(st, src) {
			src.Forget(st.key)
		}
	}
}

func (p *pods) countNS(ns string, d int) {
	p.nsMu.Lock()
	defer p.nsMu.Unlock()
	if p.byNS[ns] += d; p.byNS[ns] <= 0 {
		delete(p.byNS, ns)
	}
}

// tracks says whether any pod of namespace ("" for any) is tracked.
func (p *pods) tracks(namespace string) bool {
	p.nsMu.Lock()
	defer p.nsMu.Unlock()
	if namespace == "" {
		return len(p.byNS) > 0
	}
	return p.byNS[namespace] > 0
}

func (p *pods) count() {
	if p.tracked != nil {
		p.tracked(len(p.pods))
	}
}

// close stops every timer and tells the sources to forget every pod.
func (p *pods) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	for _, st := range p.pods {
		if st.timer != nil {
			st.timer.Stop()
		}
		for _, src := range p.sources {
			src.Forget(st.key)
		}
	}
	for _, st := range p.after {
		for _, src := range p.sources {
			src.Forget(st.key)
		}
	}
	clear(p.after)
	p.afterN.Store(0)
}
