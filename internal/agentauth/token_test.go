package agentauth

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
)

// TestTokenReviewsPerSource: made-up tokens from one address cost the API
// server at most that address's budget of TokenReviews, the rest answered
// "ask again later"; another address keeps its own budget, and a token
// already reviewed is answered from the cache whatever its address spent.
func TestTokenReviewsPerSource(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	reviews := 0
	tk := &tokens{audience: "draingate", now: func() time.Time { return now },
		review: func(_ context.Context, token, _ string) (authenticationv1.TokenReviewStatus, error) {
			reviews++
			if token == "good" {
				return authenticationv1.TokenReviewStatus{Authenticated: true, Audiences: []string{"draingate"},
					User: authenticationv1.UserInfo{Username: "system:serviceaccount:shop:default",
						Extra: map[string]authenticationv1.ExtraValue{extraPodName: {"web"}, extraPodUID: {"u1"}}}}, nil
			}
			return authenticationv1.TokenReviewStatus{}, nil
		}}
	agent, flood, other := netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("10.0.0.66"), netip.MustParseAddr("10.0.0.2")
	if _, err := tk.podOf(context.Background(), "good", agent); err != nil {
		t.Fatal(err)
	}
	refused, limited := 0, 0
	for i := range 200 {
		_, err := tk.podOf(context.Background(), fmt.Sprintf("made-up-%d", i), flood)
		switch {
		case errors.Is(err, errTooManyReviews):
			limited++
		case errors.Is(err, errTokenRefused):
			refused++
		default:
			t.Fatalf("made-up token %d: %v", i, err)
		}
	}
	if reviews != 1+reviewsBurst || refused != reviewsBurst || limited != 200-reviewsBurst {
		t.Errorf("200 made-up tokens from one address: %d reviews in all, %d refused, %d limited; want %d reviews (the good token's and the burst)",
			reviews, refused, limited, 1+reviewsBurst)
	}
	if _, err := tk.podOf(context.Background(), "made-up-other", other); !errors.Is(err, errTokenRefused) {
		t.Errorf("another address: %v, want its own review (refused)", err)
	}
	if b, err := tk.podOf(context.Background(), "good", flood); err != nil || b.name != "web" {
		t.Errorf("the good token from the flooding address: %v, %v; want the cached answer", b, err)
	}
}
