// Package agentauth says who may ask the wait API about a pod: only the
// pod's own agent. Anybody else would learn the pod's routes and target
// groups, and hold long-polls and AWS polling for a pod it does not own.
// The agent asks from inside the pod's network namespace, so a request
// from one of the pod's addresses is its agent's; a hostNetwork pod's
// address is its node's, shared with the node's other hostNetwork pods and
// processes, so its agent shows a ServiceAccount token bound to the pod
// instead (see tokens).
//
// It never lets a request through because something failed: a read or a
// review that fails is an error the wait API answers 503 (ask again).
package agentauth

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"draingate.dev/draingate/api"
	"draingate.dev/draingate/internal/route"
	"draingate.dev/draingate/internal/waitapi"
)

// Authorizer is the wait API's Authorize. Make it with New.
type Authorizer struct {
	// ready says why the server cannot answer yet (nil once it can).
	ready func() error
	// get reads a pod from the cache (an apierrors NotFound when absent).
	get    func(ctx context.Context, namespace, name string) (*corev1.Pod, error)
	tokens *tokens
}

// Review sends one TokenReview for a token and an audience.
type Review func(ctx context.Context, token, audience string) (authenticationv1.TokenReviewStatus, error)

// New returns an Authorizer that reads pods with get and, when review is
// set, accepts a token bound to the pod (audience api.TokenAudience).
func New(ready func() error, get func(ctx context.Context, namespace, name string) (*corev1.Pod, error), review Review, now func() time.Time) *Authorizer {
	a := &Authorizer{ready: ready, get: get}
	if review != nil {
		a.tokens = &tokens{audience: api.TokenAudience, now: now, review: review}
	}
	return a
}

// Authorize implements waitapi.Config.Authorize: a request from one of the
// pod's addresses, or one showing a ServiceAccount token bound to the pod.
func (a *Authorizer) Authorize(ctx context.Context, req api.DrainRequest, c waitapi.Caller) error {
	if err := a.ready(); err != nil {
		return err
	}
	pod, err := a.get(ctx, req.Namespace, req.Pod)
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
		for _, addr := range route.Addrs(pod) {
			if addr == c.Addr {
				return nil
			}
		}
	}
	if c.Token != "" && a.tokens != nil {
		b, err := a.tokens.podOf(ctx, c.Token, c.Addr)
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
