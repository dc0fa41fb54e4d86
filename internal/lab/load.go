package lab

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	vegeta "github.com/tsenart/vegeta/v12/lib"
)

// load drives constant-rate requests (open model: the rate does not slow
// down when answers do) through the data plane with keep-alive connections,
// spread round robin over the load balancer's nodes (one URL each), as many
// clients resolving its DNS name would spread.
type load struct {
	attacker *vegeta.Attacker
	done     chan struct{}
	// stopping ends the attack through its pacer: the attack then ends as
	// if its duration had passed, every request in flight completing.
	// Attacker.Stop would instead abort the dials in flight, failing
	// requests the data plane never saw (the lab's consistency check).
	stopping atomic.Bool

	mu      sync.Mutex
	metrics vegeta.Metrics
	onRes   func(at time.Time, failed bool)
}

// failed is the lab's one definition of a failed request: a transport error
// (no status) or a 5xx.
func failed(code uint16) bool { return code == 0 || code >= 500 }

func startLoad(urls []string, rps int, per time.Duration, onResult func(at time.Time, failed bool)) *load {
	l := &load{
		attacker: vegeta.NewAttacker(vegeta.KeepAlive(true), vegeta.Timeout(30*time.Second), vegeta.Workers(16), vegeta.MaxWorkers(512)),
		done:     make(chan struct{}),
		onRes:    onResult,
	}
	targets := make([]vegeta.Target, len(urls))
	for i, u := range urls {
		targets[i] = vegeta.Target{Method: "GET", URL: u}
	}
	tr := vegeta.NewStaticTargeter(targets...)
	results := l.attacker.Attack(tr, stoppable{vegeta.Rate{Freq: rps, Per: per}, &l.stopping}, 0, "lab")
	go func() {
		defer close(l.done)
		for r := range results {
			l.mu.Lock()
			l.metrics.Add(r)
			l.mu.Unlock()
			l.onRes(r.Timestamp, failed(r.Code))
		}
	}()
	return l
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
	return int(l.metrics.Requests), int(l.metrics.Requests) - ok
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
