package server

import (
	"context"
	"errors"
	"fmt"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"draingate.dev/draingate/api"
	"draingate.dev/draingate/internal/gate"
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
		return v, nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return api.Verdict{}, errors.New("the server is shutting down")
	}
	st := p.stateLocked(pod, now)
	st.asked = now
	v, err := p.decideLocked(ctx, pod, st, now)
	if err != nil {
		return api.Verdict{}, err
	}
	p.events.noteLocked(pod, st, v)
	return v, nil
}

// Changed implements waitapi.Gate.
func (p *pods) Changed(req api.DrainRequest) (<-chan struct{}, func()) {
	key := req.Namespace + "/" + req.Pod
	ch := make(chan struct{}, 1)
	p.mu.Lock()
	if p.subs[key] == nil {
		p.subs[key] = map[chan struct{}]struct{}{}
	}
	p.subs[key][ch] = struct{}{}
	p.mu.Unlock()
	return ch, func() {
		p.mu.Lock()
		delete(p.subs[key], ch)
		if len(p.subs[key]) == 0 {
			delete(p.subs, key)
		}
		p.mu.Unlock()
	}
}
