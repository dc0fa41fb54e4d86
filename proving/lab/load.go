package lab

import (
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	vegeta "github.com/tsenart/vegeta/v12/lib"
)

// load drives requests (open model: the rate does not slow down when
// answers do) through the data plane, from Load.Clients independent clients
// (each its own connections and arrival draws), spread over the load
// balancer's nodes (one URL each) as clients resolving its DNS name would
// spread: round robin for the constant load, else a random node per
// request, by the nodes' weights.
type load struct {
	done chan struct{}
	// stopping ends the attacks through their pacers: an attack then ends
	// as if its duration had passed, every request in flight completing.
	// Attacker.Stop would instead abort the dials in flight, failing
	// requests the data plane never saw (the lab's consistency check).
	stopping atomic.Bool
	// factor scales every client's rate (float64 bits; see scale).
	factor atomic.Uint64

	mu      sync.Mutex
	metrics vegeta.Metrics
	onRes   func(at time.Time, failed bool)
	// requests and failures are stop's counts, once stopped.
	requests, failures int
}

// traffic is a running load: requests sent through the load balancer.
type traffic interface {
	// stop ends the load, waits for every answer and returns the
	// requests sent and how many failed by the lab's rule.
	stop() (requests, failures int)
	// routed is what the data plane should have counted, once stopped.
	routed() (requests, failures int)
	// statuses says what the requests got, for the consistency check.
	statuses() string
	// scale multiplies the load's rate by f from now on (1: as started).
	scale(f float64)
}

// startTraffic starts spec's load (see startLoad and startStreams).
func startTraffic(spec Load, urls, sources []string, rps int, per time.Duration, seed uint64, onResult func(at time.Time, failed bool)) traffic {
	if spec.Shape == Stream {
		return startStreams(spec, urls, sources, rps, per, seed, onResult)
	}
	return startLoad(spec, urls, sources, rps, per, seed, onResult)
}

// failed is the lab's one definition of a failed request: a transport error
// (no status) or a 5xx.
func failed(code uint16) bool { return code == 0 || code >= 500 }

// startLoad sends spec's load at rps requests per per (the whole load's
// mean, split evenly over its clients) to urls, one per load balancer node;
// every answer goes to onResult. Client c connects from sources[c] when
// there is one.
func startLoad(spec Load, urls, sources []string, rps int, per time.Duration, seed uint64, onResult func(at time.Time, failed bool)) *load {
	l := &load{done: make(chan struct{}), onRes: onResult}
	l.factor.Store(math.Float64bits(1))
	rate := float64(rps) * float64(time.Second) / float64(per) / float64(spec.Clients)
	var wg sync.WaitGroup
	for c := range spec.Clients {
		// Few workers per client when there are many: each sends little.
		workers := uint64(max(2, 16/spec.Clients))
		opts := []func(*vegeta.Attacker){vegeta.KeepAlive(spec.Shape != ShortConn), vegeta.Timeout(30 * time.Second),
			vegeta.Workers(workers), vegeta.MaxWorkers(max(64, 512/uint64(spec.Clients)))}
		if c < len(sources) {
			opts = append(opts, vegeta.LocalAddr(net.IPAddr{IP: net.ParseIP(sources[c])}))
		}
		atk := vegeta.NewAttacker(opts...)
		cseed := seed*7919 + uint64(c)
		arr := newArrivals(spec, rate, cseed)
		arr.onRate = float64(spec.OnRate) * float64(time.Second) / float64(per) / float64(spec.Clients)
		arr.factor, arr.base, arr.baseOn = &l.factor, arr.rate, arr.onRate
		pacer := &schedule{a: arr}
		results := atk.Attack(spec.targeter(urls, cseed), stoppable{pacer, &l.stopping}, 0, fmt.Sprintf("client-%d", c))
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := range results {
				l.mu.Lock()
				l.metrics.Add(r)
				l.mu.Unlock()
				l.onRes(r.Timestamp, failed(r.Code))
			}
		}()
	}
	go func() {
		wg.Wait()
		close(l.done)
	}()
	return l
}

// scale multiplies every client's rate by f from its next arrival on.
func (l *load) scale(f float64) { l.factor.Store(math.Float64bits(f)) }

// targeter picks each request's load balancer node: round robin by the
// nodes' weights (smooth: no node gets a run of requests) for the constant
// load, a random node by weight for the others.
func (spec Load) targeter(urls []string, seed uint64) vegeta.Targeter {
	var mu sync.Mutex
	rng := rand.New(rand.NewPCG(seed, seed+1))
	current := make([]float64, len(urls))
	pick := func() string {
		mu.Lock()
		defer mu.Unlock()
		weights, total := spec.weights(len(urls))
		best := 0
		if spec.Shape == Constant {
			for i, w := range weights {
				current[i] += w
				if current[i] > current[best] {
					best = i
				}
			}
			current[best] -= total
			return urls[best]
		}
		x := rng.Float64() * total
		for i, w := range weights {
			if x < w {
				return urls[i]
			}
			x -= w
			best = i
		}
		return urls[best]
	}
	return func(t *vegeta.Target) error {
		t.Method, t.URL = "GET", pick()
		return nil
	}
}

// weights are the n nodes' weights now, and their total: NodeWeights (1
// each when unset, and for a node beyond them: one that joined), 0 for a
// node not in the load balancer now (active).
func (spec Load) weights(n int) ([]float64, float64) {
	w := make([]float64, n)
	total := 0.0
	for i := range w {
		w[i] = 1
		if i < len(spec.NodeWeights) {
			w[i] = spec.NodeWeights[i]
		}
		if spec.active != nil && !spec.active(i) {
			w[i] = 0
		}
		total += w[i]
	}
	return w, total
}

// stoppable is a pacer that ends the attack once stopping is set.
type stoppable struct {
	vegeta.Pacer
	stopping *atomic.Bool
}

func (p stoppable) Pace(elapsed time.Duration, hits uint64) (time.Duration, bool) {
	if p.stopping.Load() {
		return 0, true
	}
	return p.Pacer.Pace(elapsed, hits)
}

// stop ends the attack, waits for every answer and returns vegeta's own
// counts: requests, and requests that did not succeed by the lab's rule.
func (l *load) stop() (requests, failures int) {
	l.stopping.Store(true)
	<-l.done
	l.mu.Lock()
	defer l.mu.Unlock()
	l.metrics.Close()
	ok := 0
	for code, n := range l.metrics.StatusCodes {
		if c, err := parseCode(code); err == nil && !failed(c) {
			ok += n
		}
	}
	l.requests, l.failures = int(l.metrics.Requests), int(l.metrics.Requests)-ok
	return l.requests, l.failures
}

// routed is stop's counts: every request went through the data plane.
func (l *load) routed() (requests, failures int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.requests, l.failures
}

// statuses is vegeta's count of answers by status code ("0" for a
// transport error), for the consistency check's note: "200=12 502=3 0=1".
func (l *load) statuses() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	codes := slices.Sorted(maps.Keys(l.metrics.StatusCodes))
	parts := make([]string, 0, len(codes))
	for _, c := range codes {
		parts = append(parts, fmt.Sprintf("%s=%d", c, l.metrics.StatusCodes[c]))
	}
	if errs := l.metrics.Errors; len(errs) > 0 {
		const show = 3
		more := ""
		if len(errs) > show {
			errs, more = errs[:show], fmt.Sprintf("; %d more", len(errs)-show)
		}
		parts = append(parts, "errors: "+strings.Join(errs, "; ")+more)
	}
	return strings.Join(parts, " ")
}

func parseCode(s string) (uint16, error) {
	var c uint16
	_, err := fmt.Sscanf(s, "%d", &c)
	return c, err
}
