package external

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"draingate.dev/draingate/internal/route"
	"draingate.dev/draingate/internal/route/routetest"
)

func lbService(annotations map[string]string) *corev1.Service {
	return &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "web", Annotations: annotations},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer}}
}

func TestRouted(t *testing.T) {
	cluster := &corev1.Service{Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP}}
	for _, tc := range []struct {
		svc     *corev1.Service
		claimed bool
		want    bool
	}{
		{lbService(nil), false, true},
		{lbService(nil), true, false}, // a TargetGroupBinding's
		{cluster, false, false},
		{nil, false, false}, // not in the cache
	} {
		if got := Routed(tc.svc, tc.claimed); got != tc.want {
			t.Errorf("Routed(%v, claimed %v) = %v; want %v", tc.svc, tc.claimed, got, tc.want)
		}
	}
}

// The route goes out with its endpoint, takes the Service's tail when it
// sets one, and lets the traffic lengthen, never shorten, its wait.
func TestJudge(t *testing.T) {
	for _, tc := range []struct {
		e       route.Endpoint
		present bool
		state   string
		out     bool
	}{
		{route.Endpoint{Ready: true, Serving: true}, true, StateReady, false},
		{route.Endpoint{Serving: true, Terminating: true}, true, StateTerminating, true},
		{route.Endpoint{}, true, StateNotReady, true},
		{route.Endpoint{}, false, StateGone, true},
	} {
		o := Judge(tc.e, tc.present, lbService(nil), DefaultTail)
		if o.State != tc.state || o.Out != tc.out || o.Tail != DefaultTail || o.Kind != Kind || !o.Synced {
			t.Errorf("Judge(%+v, present %v) = %+v; want %s, out %v, the default tail", tc.e, tc.present, o, tc.state, tc.out)
		}
		if !o.WeighTraffic || o.Senders.Known || o.Senders.SeenAreAll || o.Senders.Why == "" {
			t.Errorf("Judge: senders %+v, weigh %v; want the traffic weighed with no senders known (only lengthens), and why", o.Senders, o.WeighTraffic)
		}
	}
	o := Judge(route.Endpoint{Terminating: true}, true, lbService(map[string]string{TailAnnotation: "90s"}), DefaultTail)
	if o.Tail != 90*time.Second || !strings.Contains(o.TailName, TailAnnotation) {
		t.Errorf("annotated tail: %s (%s); want 90s, named", o.Tail, o.TailName)
	}
	o = Judge(route.Endpoint{Terminating: true}, true, lbService(map[string]string{TailAnnotation: "soon"}), DefaultTail)
	if o.Tail != DefaultTail || !strings.Contains(o.TailName, "not a duration") {
		t.Errorf("bad annotation: %s (%s); want the default, said", o.Tail, o.TailName)
	}
}

func TestValidate(t *testing.T) {
	k := NewKind()
	if err := k.Validate(); err != nil {
		t.Fatalf("defaults: %v", err)
	}
	k.mode = "sometimes"
	if err := k.Validate(); err == nil || !strings.Contains(err.Error(), "--external-routes") {
		t.Errorf("mode sometimes: %v; want an error naming the flag", err)
	}
	k = NewKind()
	k.mode = ModeOff
	if src, err := k.Open(t.Context(), route.Env{}); src != nil || err != nil {
		t.Errorf("Open with the kind off: %v, %v; want nil", src, err)
	}
}

// A Service another kind claims (a TargetGroupBinding's) is not an
// external route; one it cannot tell about yet is, which can only
// lengthen a wait.
func TestClaimedServices(t *testing.T) {
	lbs := &routetest.LoadBalancers{Claimed: map[string]bool{"shop/web": true}}
	s := New(DefaultTail, false)
	s.claimer = lbs
	if !s.claimed(context.Background(), "shop", "web") || s.claimed(context.Background(), "shop", "api") {
		t.Errorf("claimed web %v, api %v; want web only", s.claimed(context.Background(), "shop", "web"), s.claimed(context.Background(), "shop", "api"))
	}
	lbs.ClaimErr = errors.New("the TargetGroupBinding cache has not synced yet")
	if s.claimed(context.Background(), "shop", "web") {
		t.Error("a claim the kind cannot tell yet counts as claimed: the route would be missed")
	}
	s.claimer = nil
	if s.claimed(context.Background(), "shop", "web") {
		t.Error("claimed with no kind that claims Services")
	}
}
