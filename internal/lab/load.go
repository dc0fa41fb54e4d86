package lab

import (
	"fmt"
	"sync"
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

	mu      sync.Mutex
	metrics vegeta.Metrics
	onRes   func(at time.Time, failed bool)
}

// failed is the lab's one definition of a failed request: a transport error
// (no status) or a 5xx.
func failed(code uint16) bool { return code == 0 || code >= 500 }

func startLoad(urls []string, rps int, onResult func(at time.Time, failed bool)) *load {
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
	results := l.attacker.Attack(tr, vegeta.Rate{Freq: rps, Per: time.Second}, 0, "lab")
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

// stop ends the attack, waits for every answer and returns vegeta's own
// counts: requests, and requests that did not succeed by the lab's rule.
func (l *load) stop() (requests, failures int) {
	l.attacker.Stop()
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

func parseCode(s string) (uint16, error) {
	var c uint16
	_, err := fmt.Sscanf(s, "%d", &c)
	return c, err
}
