package targetgroup

import (
	"strings"
	"testing"
	"time"

	"draingate.dev/draingate/internal/learn"
	"draingate.dev/draingate/internal/route"
)

// A group's tail follows what its load balancer's drains in the pod's
// namespace taught: longer once a node was seen sending later than the
// configured tail; a group whose load balancer is not read yet learns
// under its own ARN.
func TestLearnedTailLengthens(t *testing.T) {
	const arn = "arn:aws:elasticloadbalancing:eu-west-1:123456789012:targetgroup/web/73e2d6bc24d8a067"
	learned := learn.New(learn.Options{Tails: true})
	book := learned.Book()
	s := New(Options{ALBTail: 20 * time.Second, NLBTail: 300 * time.Second, Learned: learned})
	if k := s.LearnKey(arn); k != "tg:"+arn {
		t.Fatalf("key %q, want the group's own", k)
	}
	pod := route.PodKey{Namespace: "shop", Name: "web-1", UID: "u1"}
	if tail, name := s.learnedTail(arn, pod, 20*time.Second, "ALB"); tail != 20*time.Second || name != "ALB" {
		t.Errorf("nothing learnt: %s %q", tail, name)
	}
	now := time.Now()
	key := s.LearnKey(arn) + " ns:shop"
	book.AddSample(key, learn.Sample{At: now, D: 6 * time.Second, Seen: 4 * time.Second, Drain: 1, Src: 1})
	if tail, _ := s.learnedTail(arn, pod, 20*time.Second, "ALB"); tail != 20*time.Second {
		t.Errorf("one shorter propagation learnt: tail %s, want the configured 20s", tail)
	}
	book.AddSample(key, learn.Sample{At: now.Add(time.Second), D: 29 * time.Second, Seen: 27 * time.Second, Drain: 2, Src: 1})
	tail, name := s.learnedTail(arn, pod, 20*time.Second, "ALB")
	if tail != 27*time.Second || !strings.Contains(name, "lengthened to 27s: a node was seen sending that late (2 propagations learnt from 2 drains)") {
		t.Errorf("a node seen sending later: tail %s, %q", tail, name)
	}
	if tail, _ := s.learnedTail(arn, route.PodKey{Namespace: "other", UID: "u2"}, 20*time.Second, "ALB"); tail != 20*time.Second {
		t.Errorf("another namespace: tail %s, want the configured 20s", tail)
	}
}

// fixed is what was learnt, the same for every key.
type fixed struct {
	d   time.Duration
	why string
}

func (fixed) LateChance(string, route.PodKey, time.Duration) float64 { return 0 }

func (f fixed) Tail(_ string, _ route.PodKey, configured time.Duration) (time.Duration, string) {
	if f.d > configured {
		return f.d, f.why
	}
	return configured, ""
}

// A group's tail is what learning says for its load balancer's key, its
// name saying what lengthened it; with nothing learnt (no learning) the
// configured tail.
func TestLearnedTailNamesWhy(t *testing.T) {
	const arn = "arn:aws:elasticloadbalancing:eu-west-1:123456789012:targetgroup/web/73e2d6bc24d8a067"
	s := New(Options{ALBTail: 20 * time.Second, Learned: fixed{31 * time.Second, "lengthened to 31s"}})
	pod := route.PodKey{Namespace: "shop", Name: "web-1", UID: "u1"}
	if tail, name := s.learnedTail(arn, pod, 20*time.Second, "ALB"); tail != 31*time.Second || name != "ALB (20s, lengthened to 31s)" {
		t.Errorf("learnt 31s: %s %q", tail, name)
	}
	if tail, name := New(Options{}).learnedTail(arn, pod, 20*time.Second, "ALB"); tail != 20*time.Second || name != "ALB" {
		t.Errorf("no learning: %s %q", tail, name)
	}
}
