package server

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"draingate.dev/draingate/api"
	"draingate.dev/draingate/internal/gate"
	"draingate.dev/draingate/internal/inject"
	"draingate.dev/draingate/internal/route"
	"draingate.dev/draingate/internal/waitapi"
)

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
	st.asked = now
	// Each ask replaces the evidence, once: the wait API calls Verdict
	// again during a long-poll with the same request, whose summary must
	// keep the time it arrived (re-reading its ages against a later clock
	// would make old silence look new). An ask without a summary drops
	// the last one: the tails alone decide then, never stale evidence.
	if req.Traffic != st.summary || st.summary == nil {
		st.summary, st.evidence = req.Traffic, nil
		if req.Traffic != nil && !p.ignoreTraffic {
			st.evidence = classify(req.Traffic, now, pod, p.epsilon)
		}
	}
	v, err := p.decideLocked(ctx, pod, st, now)
	if err != nil {
		return api.Verdict{}, err
	}
	p.events.noteLocked(pod, st, v)
	return v, nil
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
		b, err := p.tokens.podOf(ctx, c.Token)
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
			waitapi.ErrForbidden, inject.TokenAudience)
	}
	return fmt.Errorf("%w: the wait API answers a pod's own agent only, from one of the pod's addresses (%s); "+
		"if a proxy or mesh sidecar in front of the server hides the agents' addresses, run it with --wait-api-sources=any",
		waitapi.ErrForbidden, strings.Join(ips, ", "))
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

// classify turns the agent's summary, received at now, into the gate's
// evidence: ages become times on the server's clock (the agent's clock
// never counts), and each source is the node's (the pod's host addresses
// and the gateways the agent reported: probes, SNAT, hostNetwork clients)
// or remote (load balancer nodes, clients, other pods).
func classify(t *api.Traffic, now time.Time, pod *corev1.Pod, epsilon float64) *gate.Evidence {
	node := map[netip.Addr]bool{}
	for _, g := range t.Gateways {
		node[g] = true
	}
	for _, h := range pod.Status.HostIPs {
		if a, err := netip.ParseAddr(h.IP); err == nil {
			node[a.Unmap()] = true
		}
	}
	if a, err := netip.ParseAddr(pod.Status.HostIP); err == nil {
		node[a.Unmap()] = true
	}
	ev := &gate.Evidence{At: now, Epsilon: epsilon, Unknown: arrivalsAt(t.Unknown, now),
		// A summary at its bound merged the agent's other sources into
		// Unknown.
		UnknownHoldsSources: len(t.Sources) >= api.MaxTrafficSources}
	for _, s := range t.Sources {
		c := gate.ClassRemote
		if node[s.Addr] {
			c = gate.ClassNode
		}
		a := arrivalsAt(s, now)
		// Only the sources count per look; Unknown counts every
		// connection it could not see.
		a.Every = t.Every
		if t.Every > 0 {
			a.Looks = gate.Looks{N: s.Looks.N, Pauses: s.Looks.Pauses}
			a.RecentLooks = gate.Looks{N: s.RecentLooks.N, Pauses: s.RecentLooks.Pauses}
		}
		ev.Sources = append(ev.Sources, gate.Source{Addr: s.Addr, Port: s.Port, Class: c, Arrivals: a})
	}
	return ev
}

func arrivalsAt(s api.SourceTraffic, now time.Time) gate.Arrivals {
	if s.Arrivals == 0 {
		return gate.Arrivals{}
	}
	a := gate.Arrivals{N: s.Arrivals, First: now.Add(-s.First), MaxGap: s.MaxGap}
	for _, age := range s.Last {
		a.Last = append(a.Last, now.Add(-age))
	}
	return a
}
