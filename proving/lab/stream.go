package lab

import (
	"bufio"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"draingate.dev/draingate/proving/lab/app"
)

// streamLoad is the stream shape: long-lived streams (app.StreamProtocol,
// through the load balancer as a WebSocket goes), each sending a message
// every Load.StreamPeriod and living an exponential time of mean
// Load.StreamLife before its client closes it and opens another, which the
// load balancer routes anew. Enough streams to carry the run's rate.
//
// Each message is a request: it fails when its stream cannot be opened
// (the load balancer answers an error, or a flow is cut) or breaks before
// the answer. A stream the app ends with "bye" (its SIGTERM) is no failure:
// the message it did not answer goes again on a new stream.
type streamLoad struct {
	stopping atomic.Bool
	wg       sync.WaitGroup
	onRes    func(at time.Time, failed bool)

	mu                 sync.Mutex
	requests, failures int
	opens, failedOpens int
	byes               int
	codes              map[string]int // the opens' answers, "0" for a transport error
	errs               []string
}

func startStreams(spec Load, urls, sources []string, rps int, per time.Duration, seed uint64, onResult func(at time.Time, failed bool)) *streamLoad {
	s := &streamLoad{onRes: onResult, codes: map[string]int{}}
	rate := float64(rps) * float64(time.Second) / float64(per) // messages/s, played
	n := max(1, int(rate*spec.StreamPeriod.Seconds()+0.5))
	for i := range n {
		src := ""
		if c := i % spec.Clients; c < len(sources) {
			src = sources[c]
		}
		rng := rand.New(rand.NewPCG(seed*7919+uint64(i), seed^0x5bd1e995))
		pick := spec.nodePicker(urls, rng)
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			s.run(spec, src, pick, rng)
		}()
	}
	return s
}

// nodePicker picks a random node by the nodes' weights for each new stream.
func (spec Load) nodePicker(urls []string, rng *rand.Rand) func() string {
	return func() string {
		weights, total := spec.weights(len(urls))
		x := rng.Float64() * total
		last := urls[0]
		for i, u := range urls {
			if weights[i] <= 0 {
				continue
			}
			if x < weights[i] {
				return u
			}
			x -= weights[i]
			last = u
		}
		return last
	}
}

// run is one stream after another, until the load stops.
func (s *streamLoad) run(spec Load, src string, pick func() string, rng *rand.Rand) {
	// A random phase, so that the streams do not send together.
	time.Sleep(time.Duration(rng.Float64() * float64(spec.StreamPeriod)))
	pending := false // a message the last stream did not answer (bye)
	for !s.stopping.Load() {
		c, br, err := s.open(pick(), src)
		if err != nil {
			s.result(time.Now(), true)
			pending = false
			time.Sleep(spec.StreamPeriod)
			continue
		}
		end := time.Now().Add(time.Duration(rng.ExpFloat64() * float64(spec.StreamLife)))
		next := time.Now()
		if !pending {
			next = next.Add(spec.StreamPeriod)
		}
		pending = false
		for !s.stopping.Load() && time.Now().Before(end) {
			time.Sleep(time.Until(next))
			at := time.Now()
			next = at.Add(spec.StreamPeriod)
			c.SetDeadline(at.Add(30 * time.Second))
			if _, err := io.WriteString(c, "m\n"); err != nil {
				s.result(at, true)
				break
			}
			line, err := br.ReadString('\n')
			if line == "bye\n" {
				s.mu.Lock()
				s.byes++
				s.mu.Unlock()
				pending = true
				break
			}
			if err != nil || !strings.HasPrefix(line, "ok ") {
				s.note(fmt.Sprintf("stream message: %q, %v", line, err))
				s.result(at, true)
				break
			}
			s.result(at, false)
		}
		c.Close()
	}
}

// open opens one stream through the node at rawURL, from src if set.
func (s *streamLoad) open(rawURL, src string) (net.Conn, *bufio.Reader, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, nil, err
	}
	d := net.Dialer{Timeout: 10 * time.Second}
	if src != "" {
		d.LocalAddr = &net.TCPAddr{IP: net.ParseIP(src)}
	}
	code := "0"
	defer func() {
		s.mu.Lock()
		s.opens++
		s.codes[code]++
		if code != "101" {
			s.failedOpens++
		}
		s.mu.Unlock()
	}()
	c, err := d.Dial("tcp", u.Host)
	if err != nil {
		s.note("stream open: " + err.Error())
		return nil, nil, err
	}
	c.SetDeadline(time.Now().Add(30 * time.Second))
	br := bufio.NewReader(c)
	fmt.Fprintf(c, "GET /stream HTTP/1.1\r\nHost: %s\r\nConnection: Upgrade\r\nUpgrade: %s\r\n\r\n", u.Host, app.StreamProtocol)
	res, err := http.ReadResponse(br, nil)
	if err != nil {
		c.Close()
		s.note("stream open: " + err.Error())
		return nil, nil, err
	}
	code = fmt.Sprint(res.StatusCode)
	if res.StatusCode != http.StatusSwitchingProtocols {
		c.Close()
		return nil, nil, fmt.Errorf("stream open: %s", res.Status)
	}
	return c, br, nil
}

func (s *streamLoad) result(at time.Time, failed bool) {
	s.mu.Lock()
	s.requests++
	if failed {
		s.failures++
	}
	s.mu.Unlock()
	s.onRes(at, failed)
}

func (s *streamLoad) note(e string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.errs) < 100 {
		s.errs = append(s.errs, e)
	}
}

func (s *streamLoad) stop() (requests, failures int) {
	s.stopping.Store(true)
	s.wg.Wait()
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.requests, s.failures
}

// routed is what the data plane should have counted: the opens, not the
// messages, which pass through the streams unseen.
func (s *streamLoad) routed() (requests, failures int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.opens, s.failedOpens
}

func (s *streamLoad) statuses() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var parts []string
	for _, c := range slices.Sorted(maps.Keys(s.codes)) {
		parts = append(parts, fmt.Sprintf("opens %s=%d", c, s.codes[c]))
	}
	parts = append(parts, fmt.Sprintf("byes=%d", s.byes))
	if len(s.errs) > 0 {
		show := s.errs[:min(3, len(s.errs))]
		parts = append(parts, "errors: "+strings.Join(show, "; "))
	}
	return strings.Join(parts, " ")
}

// scale does nothing: streams keep their rate (--rollout-rps refuses the
// stream load).
func (s *streamLoad) scale(float64) {}
