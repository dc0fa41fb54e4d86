package agentauth

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"time"

	"golang.org/x/time/rate"
	authenticationv1 "k8s.io/api/authentication/v1"
)

// A hostNetwork pod's address is its node's, shared with the node's other
// hostNetwork pods and its processes, so the address a request comes from
// does not tell its agent from them. Its agent shows instead a
// ServiceAccount token the kubelet projected for that pod (audience
// TokenAudience, mounted by the injector): the API server's TokenReview
// says which pod the token is bound to, and a token outlives nothing: it
// stops authenticating once its pod is gone.

// boundPod is the pod a token is bound to, as the TokenReview tells.
type boundPod struct{ namespace, name, uid string }

func (b boundPod) String() string { return b.namespace + "/" + b.name + " (uid " + b.uid + ")" }

// Keys of the TokenReview's user extra that name the pod a projected token
// is bound to.
const (
	extraPodName = "authentication.kubernetes.io/pod-name"
	extraPodUID  = "authentication.kubernetes.io/pod-uid"
)

// errTokenRefused wraps what makes a token no proof of a pod: it did not
// authenticate, has another audience or is bound to no pod.
var errTokenRefused = errors.New("token refused")

// tokens reviews agents' tokens, with a cache: an agent asks every few
// seconds with the same token, and the API server need hear of it about
// once a minute. Refusals are cached too (shorter), so that a client
// repeating a bad token costs the API server little.
type tokens struct {
	audience string
	// review sends one TokenReview for the token and audience.
	review func(ctx context.Context, token, audience string) (authenticationv1.TokenReviewStatus, error)
	now    func() time.Time

	mu    sync.Mutex
	cache map[[sha256.Size]byte]tokenAnswer
	// bySource limits the reviews one address may cause (tokens not in
	// the cache): made-up tokens would otherwise cost a TokenReview each,
	// and a flood of them would take the API server budget from every
	// agent.
	bySource map[netip.Addr]*rate.Limiter
}

type tokenAnswer struct {
	pod   boundPod
	err   error
	until time.Time
}

// How long a review's answer is kept, and how many answers at most; how
// many reviews one address may cause per second, and at once (a node's
// hostNetwork agents share its address, and each needs about one review a
// minute).
const (
	tokenOK           = time.Minute
	tokenRefused      = 10 * time.Second
	tokenCache        = 4096
	reviewsPerSource  = 2
	reviewsBurst      = 20
	tokenSourcesLimit = 4096
)

// errTooManyReviews is a source over its review budget: ask again later.
var errTooManyReviews = errors.New("too many token reviews asked from this address: ask again later")

// podOf says which pod token is bound to. An error wrapping
// errTokenRefused says why the token proves nothing; any other error is the
// API server's (ask again).
func (t *tokens) podOf(ctx context.Context, token string, source netip.Addr) (boundPod, error) {
	key := sha256.Sum256([]byte(token))
	now := t.now()
	t.mu.Lock()
	a, ok := t.cache[key]
	allowed := ok && now.Before(a.until) || t.allowLocked(source, now)
	t.mu.Unlock()
	if ok && now.Before(a.until) {
		return a.pod, a.err
	}
	if !allowed {
		return boundPod{}, errTooManyReviews
	}
	st, err := t.review(ctx, token, t.audience)
	if err != nil {
		return boundPod{}, fmt.Errorf("reviewing the agent's token with the API server: %w", err)
	}
	a = tokenAnswer{until: now.Add(tokenOK)}
	a.pod, a.err = podOfStatus(st, t.audience)
	if a.err != nil {
		a.until = now.Add(tokenRefused)
	}
	t.mu.Lock()
	if t.cache == nil {
		t.cache = map[[sha256.Size]byte]tokenAnswer{}
	}
	if len(t.cache) >= tokenCache {
		for k, old := range t.cache {
			if !now.Before(old.until) {
				delete(t.cache, k)
			}
		}
		if len(t.cache) >= tokenCache {
			clear(t.cache)
		}
	}
	t.cache[key] = a
	t.mu.Unlock()
	return a.pod, a.err
}

// allowLocked takes one review from the source's budget, if it has one.
func (t *tokens) allowLocked(source netip.Addr, now time.Time) bool {
	if t.bySource == nil || len(t.bySource) >= tokenSourcesLimit {
		t.bySource = map[netip.Addr]*rate.Limiter{}
	}
	l := t.bySource[source]
	if l == nil {
		l = rate.NewLimiter(reviewsPerSource, reviewsBurst)
		t.bySource[source] = l
	}
	return l.AllowN(now, 1)
}

// podOfStatus reads the pod a reviewed token is bound to.
func podOfStatus(st authenticationv1.TokenReviewStatus, audience string) (boundPod, error) {
	if !st.Authenticated {
		why := "it does not authenticate"
		if st.Error != "" {
			why += " (" + st.Error + ")"
		}
		return boundPod{}, fmt.Errorf("%w: %s", errTokenRefused, why)
	}
	found := false
	for _, a := range st.Audiences {
		found = found || a == audience
	}
	if !found {
		return boundPod{}, fmt.Errorf("%w: its audiences %q do not include %q", errTokenRefused, st.Audiences, audience)
	}
	// system:serviceaccount:<namespace>:<name>
	rest, ok := strings.CutPrefix(st.User.Username, "system:serviceaccount:")
	ns, _, ok2 := strings.Cut(rest, ":")
	name, uid := st.User.Extra[extraPodName], st.User.Extra[extraPodUID]
	if !ok || !ok2 || len(name) != 1 || len(uid) != 1 {
		return boundPod{}, fmt.Errorf("%w: it is %s's, bound to no pod (want a token the kubelet projected for the pod)", errTokenRefused, st.User.Username)
	}
	return boundPod{namespace: ns, name: name[0], uid: uid[0]}, nil
}
