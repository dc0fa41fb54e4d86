package targetgroup

import (
	"strings"
	"testing"
	"time"

	"draingate.dev/draingate/internal/learn"
)

// A group's tail follows what its load balancer's drains taught: longer
// when a node was seen sending later than the configured tail, never
// shorter unless opted in; a group whose load balancer is not read yet
// learns under its own ARN.
func TestLearnedTailLengthensOnly(t *testing.T) {
	const arn = "arn:aws:elasticloadbalancing:eu-west-1:123456789012:targetgroup/web/73e2d6bc24d8a067"
	learned := learn.New(learn.Options{Tails: true})
	book := learned.Book()
	s := New(Options{ALBTail: 20 * time.Second, NLBTail: 300 * time.Second, Learned: learned})
	if k := s.LearnKey(arn); k != "tg:"+arn {
		t.Fatalf("key %q, want the group's own", k)
	}
	if tail, name := s.learnedTail(arn, 20*time.Second, "ALB"); tail != 20*time.Second || name != "ALB" {
		t.Errorf("nothing learnt: %s %q", tail, name)
	}
	now := time.Now()
	book.Add(s.LearnKey(arn), now, 4*time.Second)
	if tail, _ := s.learnedTail(arn, 20*time.Second, "ALB"); tail != 20*time.Second {
		t.Errorf("a shorter propagation learnt: tail %s, want the configured 20s", tail)
	}
	book.Add(s.LearnKey(arn), now.Add(time.Second), 27*time.Second)
	tail, name := s.learnedTail(arn, 20*time.Second, "ALB")
	if tail != 27*time.Second || !strings.Contains(name, "lengthened to 27s by the longest of 2 propagations learnt") {
		t.Errorf("a longer propagation learnt: tail %s, %q", tail, name)
	}
}

// fixed is what was learnt, the same for every key.
type fixed struct {
	d   time.Duration
	why string
}

func (f fixed) Tail(_ string, configured time.Duration) (time.Duration, string) {
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
	if tail, name := s.learnedTail(arn, 20*time.Second, "ALB"); tail != 31*time.Second || name != "ALB (20s, lengthened to 31s)" {
		t.Errorf("learnt 31s: %s %q", tail, name)
	}
	if tail, name := New(Options{}).learnedTail(arn, 20*time.Second, "ALB"); tail != 20*time.Second || name != "ALB" {
		t.Errorf("no learning: %s %q", tail, name)
	}
}
