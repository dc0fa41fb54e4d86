package server

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	dto "github.com/prometheus/client_model/go"

	"draingate.dev/draingate/api"
	"draingate.dev/draingate/internal/learn"
)

// TestLagLearntPastTheDeadline: a controller that takes the pod out of its
// target group only after the pod's agent gave up. The pod, deleted with a
// grace period of 8 s, is released at its deadline while its target is
// healthy; its agent stops asking and the kubelet removes it. The server
// keeps watching the group for the gone pod, learns the lag when the
// target is deregistered (at least the time from the deletion to the
// deregistration: it never learns a shorter one), and the next pod the
// group's Service selects needs that lag plus the group's tail (fails
// without the watch: nothing is learnt once the pod is gone).
func TestLagLearntPastTheDeadline(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	f := newFixture(t, ctx)
	r := f.serveWith(ctx, Options{LearnLag: true})
	deleted := time.Now().Truncate(time.Second) // the API server keeps seconds
	if err := f.c.Client.CoreV1().Pods(f.ns).Delete(ctx, "web", metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](8)}); err != nil {
		t.Fatal(err)
	}
	var v api.Verdict
	for !v.Released {
		v = f.ask(ctx, r, 10*time.Second)
	}
	if v.Reason != api.ReasonDeadline {
		t.Fatalf("released %q (%s), want at the deadline while the target is healthy", v.Reason, v.Message)
	}
	waitFor(t, ctx, "the pod gone", func() bool {
		_, err := f.c.Client.CoreV1().Pods(f.ns).Get(ctx, "web", metav1.GetOptions{})
		return apierrors.IsNotFound(err)
	})
	// The gone pod is watched (its target still healthy), not dropped.
	waitFor(t, ctx, "the gone pod watched for its lag", func() bool {
		return r.srv.timings.Watching() == 1
	})
	lagKeys := func() []string {
		var out []string
		for _, k := range r.srv.timings.Book().Keys() {
			if strings.HasPrefix(k, learn.LagPrefix) {
				out = append(out, k)
			}
		}
		return out
	}
	if k := lagKeys(); len(k) != 0 {
		t.Fatalf("lags %v learnt while the target is healthy", k)
	}
	deregistered := time.Now()
	if err := f.emu.DeregisterTargets(f.arn, f.target); err != nil {
		t.Fatal(err)
	}
	var learnt learn.Estimate
	waitFor(t, ctx, "the lag learnt", func() bool {
		k := lagKeys()
		if len(k) == 0 {
			return false
		}
		learnt = r.srv.timings.Book().Estimate(k[0])
		return true
	})
	if learnt.N != 1 || learnt.Bound < deregistered.Sub(deleted) {
		t.Errorf("learnt %+v; want one lag of at least %s (deletion to deregistration)", learnt, deregistered.Sub(deleted))
	}
	newPod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, GenerateName: "web-", Labels: map[string]string{"app": "web"}}}
	need, why := r.srv.timings.AdmissionNeed(ctx, newPod)
	if need != learnt.Bound+testALBTail || !strings.Contains(why, f.arn) || !strings.Contains(why, "the longest of 1 lags learnt") {
		t.Errorf("a new pod needs %s (%s); want the lag %s plus the ALB tail %s, naming the group", need, why, learnt.Bound, testALBTail)
	}
	if n := gauge(t, r.reg, "draingate_learned_lag_samples"); n != 1 {
		t.Errorf("draingate_learned_lag_samples = %v, want 1", n)
	}
	watched := r.srv.timings.Watching()
	if watched != 0 {
		t.Errorf("%d gone pods still watched once their lag was learnt", watched)
	}
}

// gauge is the value of the first series of a gauge (0 when absent).
func gauge(t *testing.T, reg interface {
	Gather() ([]*dto.MetricFamily, error)
}, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.Metric) > 0 {
			return mf.Metric[0].GetGauge().GetValue()
		}
	}
	return 0
}
