package agentauth

import (
	"context"
	"errors"
	"net/netip"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"draingate.dev/draingate/api"
	"draingate.dev/draingate/internal/waitapi"
)

// pod is shop/web, terminating.
func pod() *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web", UID: "u1", DeletionTimestamp: &metav1.Time{Time: time.Now()}}}
}

// get reads p (as the test changes it) for shop/web; any other pod is not
// found.
func get(p *corev1.Pod) func(context.Context, string, string) (*corev1.Pod, error) {
	return func(_ context.Context, ns, name string) (*corev1.Pod, error) {
		if ns+"/"+name != "shop/web" {
			return nil, apierrors.NewNotFound(corev1.Resource("pods"), name)
		}
		return p.DeepCopy(), nil
	}
}

// The wait API answers about a pod only requests from its own addresses.
func TestAuthorize(t *testing.T) {
	p := pod()
	p.Status.PodIPs = []corev1.PodIP{{IP: "10.0.0.7"}, {IP: "fd00::7"}}
	r := &Authorizer{ready: func() error { return nil }, get: get(p)}
	req := api.DrainRequest{Namespace: "shop", Pod: "web"}
	for _, from := range []string{"10.0.0.7", "fd00::7"} {
		if err := r.Authorize(context.Background(), req, waitapi.Caller{Addr: netip.MustParseAddr(from)}); err != nil {
			t.Errorf("from the pod's %s: %v", from, err)
		}
	}
	err := r.Authorize(context.Background(), req, waitapi.Caller{Addr: netip.MustParseAddr("10.0.0.8")})
	if !errors.Is(err, waitapi.ErrForbidden) || !strings.Contains(err.Error(), "10.0.0.7, fd00::7") {
		t.Errorf("from another address: %v; want forbidden, naming the pod's addresses", err)
	}
	p.Status.PodIPs, p.Status.PodIP = nil, ""
	if err := r.Authorize(context.Background(), req, waitapi.Caller{Addr: netip.MustParseAddr("10.0.0.7")}); err == nil || errors.Is(err, waitapi.ErrForbidden) {
		t.Errorf("a pod with no address cached yet: %v; want an error to ask again, not forbidden", err)
	}
	if err := r.Authorize(context.Background(), api.DrainRequest{Namespace: "shop", Pod: "gone"}, waitapi.Caller{Addr: netip.MustParseAddr("10.0.0.7")}); !errors.Is(err, waitapi.ErrUnknownPod) {
		t.Errorf("unknown pod: %v", err)
	}
}

// A hostNetwork pod's address is its node's: only a token bound to the pod
// lets its agent in. Token answers are cached, refusals too.
func TestAuthorizeHostNetwork(t *testing.T) {
	p := pod()
	p.Spec.HostNetwork = true
	p.Status.PodIPs = []corev1.PodIP{{IP: "192.168.1.5"}}
	r := &Authorizer{ready: func() error { return nil }, get: get(p)}
	reviews := 0
	bound := func(ns, name, uid string) authenticationv1.TokenReviewStatus {
		return authenticationv1.TokenReviewStatus{Authenticated: true, Audiences: []string{"draingate"}, User: authenticationv1.UserInfo{
			Username: "system:serviceaccount:" + ns + ":default",
			Extra:    map[string]authenticationv1.ExtraValue{extraPodName: {name}, extraPodUID: {uid}}}}
	}
	now := time.Unix(1000, 0)
	r.tokens = &tokens{audience: "draingate", now: func() time.Time { return now },
		review: func(_ context.Context, token, audience string) (authenticationv1.TokenReviewStatus, error) {
			reviews++
			switch token {
			case "web":
				return bound("shop", "web", "u1"), nil
			case "other":
				return bound("shop", "other", "u9"), nil
			case "stale":
				return bound("shop", "web", "u0"), nil
			case "sa":
				st := bound("shop", "", "")
				st.User.Extra = nil
				return st, nil
			case "aud":
				st := bound("shop", "web", "u1")
				st.Audiences = []string{"https://kubernetes.default.svc"}
				return st, nil
			case "down":
				return authenticationv1.TokenReviewStatus{}, errors.New("connection refused")
			}
			return authenticationv1.TokenReviewStatus{Error: "invalid bearer token"}, nil
		}}
	req := api.DrainRequest{Namespace: "shop", Pod: "web"}
	node := netip.MustParseAddr("192.168.1.5")
	if err := r.Authorize(context.Background(), req, waitapi.Caller{Addr: node}); !errors.Is(err, waitapi.ErrForbidden) || !strings.Contains(err.Error(), "token") {
		t.Errorf("from the node's address without a token: %v; want forbidden, asking for the token", err)
	}
	for _, tc := range []struct {
		token, want string
	}{
		{"web", ""},
		{"other", "bound to pod shop/other"},
		{"stale", "uid u0"},
		{"sa", "bound to no pod"},
		{"aud", "audiences"},
		{"forged", "does not authenticate (invalid bearer token)"},
	} {
		err := r.Authorize(context.Background(), req, waitapi.Caller{Addr: node, Token: tc.token})
		if tc.want == "" && err != nil || tc.want != "" && (!errors.Is(err, waitapi.ErrForbidden) || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("token %q: %v; want %q", tc.token, err, tc.want)
		}
	}
	if err := r.Authorize(context.Background(), req, waitapi.Caller{Addr: node, Token: "down"}); err == nil || errors.Is(err, waitapi.ErrForbidden) {
		t.Errorf("the API server unreachable: %v; want an error to ask again, not forbidden", err)
	}
	before := reviews
	for _, tok := range []string{"web", "forged"} {
		r.Authorize(context.Background(), req, waitapi.Caller{Addr: node, Token: tok})
	}
	if reviews != before {
		t.Errorf("%d more reviews for tokens just reviewed; want the cached answers", reviews-before)
	}
	now = now.Add(tokenRefused + time.Second)
	r.Authorize(context.Background(), req, waitapi.Caller{Addr: node, Token: "web"})
	r.Authorize(context.Background(), req, waitapi.Caller{Addr: node, Token: "forged"})
	if reviews != before+1 {
		t.Errorf("after %s: %d more reviews; want the refusal reviewed again, the good token still cached", tokenRefused, reviews-before)
	}
	// A token also lets in an agent whose address the server cannot see
	// as the pod's (a non-hostNetwork pod behind a proxy).
	p.Spec.HostNetwork = false
	if err := r.Authorize(context.Background(), req, waitapi.Caller{Addr: netip.MustParseAddr("10.9.9.9"), Token: "web"}); err != nil {
		t.Errorf("a pod's token from another address: %v", err)
	}
}
