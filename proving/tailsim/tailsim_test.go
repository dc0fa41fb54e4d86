package tailsim

import (
	"flag"
	"fmt"
	"strings"
	"testing"
	"time"
)

var (
	seed   = flag.Uint64("tailsim.seed", 0, "the catalogue's seed (0: a new one, printed)")
	drains = flag.Int("tailsim.drains", 300, "drains per shape")
)

// shapes are the catalogue's rows, at full scale: an ALB's configured 20 s
// tail, six nodes, the lab's rates (1.4/s per node: 200 requests/s over 24
// pods; 0.35/s: the default 50/s).
func shapes() []Shape {
	alb := Shape{Nodes: 6, Rate: 1.4, Tail: 20 * time.Second, Propagation: Uniform(0, 5*time.Second)}
	with := func(name string, f func(*Shape)) Shape {
		s := alb
		s.Name = name
		f(&s)
		return s
	}
	return []Shape{
		with("uniform 0-5s, 1.4/s", func(*Shape) {}),
		with("uniform 0-5s, 0.35/s", func(s *Shape) { s.Rate = 0.35 }),
		with("uniform 0-5s, 1.4/s Poisson", func(s *Shape) { s.Poisson = true }),
		with("uniform 0-5s, 7/s", func(s *Shape) { s.Rate = 7 }),
		with("log-normal median 2s p99 8s", func(s *Shape) { s.Propagation = LogNormal(0, 2*time.Second, 8*time.Second) }),
		with("bimodal: 3 % of drains 10-30s", func(s *Shape) {
			s.Propagation = Bimodal(Uniform(0, 5*time.Second), Uniform(10*time.Second, 30*time.Second), 0.03)
		}),
		with("drifting: max 5s to 25s", func(s *Shape) { s.Propagation = Drifting(5*time.Second, 25*time.Second) }),
		with("rate falls 2-20x at the drain", func(s *Shape) { s.Fall = 20; s.Rate = 7 }),
		with("uniform 0-5s, 1.4/s, no watcher", func(s *Shape) { s.Watch = time.Second }),
		with("uniform 0-5s, 7/s, no watcher", func(s *Shape) { s.Watch = time.Second; s.Rate = 7 }),
	}
}

// TestCatalogue plays the catalogue at the defaults and prints its table:
// per shape the requests lost per 1,000 drains, the drains released at
// their deadline, the release's median after the deregistration and the
// tail a pod takes after them. Every row must lose nothing: the rows are
// what the measured tails and the hold at the tail's end are built for,
// and a seed that finds a loss is one to keep (-tailsim.seed).
func TestCatalogue(t *testing.T) {
	if testing.Short() {
		t.Skip("the catalogue plays hundreds of drains per shape")
	}
	s := *seed
	if s == 0 {
		s = uint64(time.Now().UnixNano())
	}
	var b strings.Builder
	fmt.Fprintf(&b, "catalogue: %d drains per shape, seed %d (-tailsim.seed)\n", *drains, s)
	fmt.Fprintf(&b, "| shape | lost per 1,000 drains | drains losing | at deadline | release p50 (later half) | tail after the drains |\n|---|---|---|---|---|---|\n")
	for _, sh := range shapes() {
		r := Run(sh, *drains, s)
		if r.Lost > 0 {
			t.Errorf("%s: %d requests lost in %d of %d drains (seed %d)", sh.Name, r.Lost, r.DrainsLosing, r.Drains, s)
		}
		fmt.Fprintf(&b, "| %s | %.1f | %d | %d | %.1fs | %s (%s) |\n", sh.Name, r.PerThousand(), r.DrainsLosing, r.AtDeadline,
			r.P50().Seconds(), r.Tail.Round(100*time.Millisecond), r.TailWhy)
	}
	t.Log("\n" + b.String())
}
