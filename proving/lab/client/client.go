// Package client is the lab's in-cluster client: a process in a pod that
// calls a URL (the app's Service, through kube-proxy) at a rate, with
// keep-alive connections as in-cluster services keep them, and counts what
// it got. The lab reads the counts from GET /counts on its listen address.
//
//	draingate-demoapp client -url http://10.96.0.10/ -rate 5 [-listen :9090]
//
// Arrivals are Poisson (exponential gaps) and the model is open: a slow
// answer does not delay the next request. A request failed when it got no
// answer or a 5xx, the lab's rule for every request.
package client

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"
)

// Counts is what GET /counts answers.
type Counts struct {
	Requests int64 `json:"requests"`
	Failed   int64 `json:"failed"`
	// Errors keeps the first few distinct failures, for the lab's note.
	Errors []string `json:"errors"`
}

// Client calls one URL at a rate.
type Client struct {
	url  string
	rate float64
	http *http.Client

	mu     sync.Mutex
	counts Counts
}

// New returns a client of url at rate requests per second.
func New(url string, rate float64) *Client {
	return &Client{url: url, rate: rate, http: &http.Client{
		Timeout: 30 * time.Second,
		// Proxy stays nil: an HTTP_PROXY in the pod must not take the
		// requests off the cluster network.
		Transport: &http.Transport{MaxIdleConnsPerHost: 64, IdleConnTimeout: 90 * time.Second},
	}}
}

// Run sends requests until ctx ends, then waits for those in flight.
func (c *Client) Run(ctx context.Context) {
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 1))
	var wg sync.WaitGroup
	defer wg.Wait()
	sem := make(chan struct{}, 256) // bounds requests in flight
	next := time.Now()
	for {
		next = next.Add(time.Duration(rng.ExpFloat64() / c.rate * float64(time.Second)))
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Until(next)):
		}
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			return
		}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			c.one()
		}()
	}
}

func (c *Client) one() {
	var failure string
	resp, err := c.http.Get(c.url)
	if err != nil {
		failure = err.Error()
	} else {
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode >= 500 {
			failure = resp.Status
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.counts.Requests++
	if failure != "" {
		c.counts.Failed++
		if len(c.counts.Errors) < 5 {
			c.counts.Errors = append(c.counts.Errors, failure)
		}
	}
}

// Counts returns the counts so far.
func (c *Client) Counts() Counts {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := c.counts
	out.Errors = append([]string{}, c.counts.Errors...)
	return out
}

// ServeHTTP answers GET /counts.
func (c *Client) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/counts" {
		http.NotFound(w, r)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(c.Counts())
}

// Main runs the client from its command line until SIGTERM.
func Main(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("draingate-demoapp client", flag.ContinueOnError)
	url := fs.String("url", "", "the URL to call")
	rate := fs.Float64("rate", 1, "requests per second (Poisson arrivals)")
	listen := fs.String("listen", ":9090", "where GET /counts answers")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *url == "" || *rate <= 0 {
		return errors.New("want -url and a positive -rate")
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return fmt.Errorf("listen %s: %w", *listen, err)
	}
	c := New(*url, *rate)
	srv := &http.Server{Handler: c, ReadHeaderTimeout: 5 * time.Second}
	go srv.Serve(ln)
	fmt.Fprintf(stdout, "client: calling %s at %g/s; counts on %s/counts\n", *url, *rate, ln.Addr())
	c.Run(ctx)
	srv.Close()
	n := c.Counts()
	fmt.Fprintf(stdout, "client: %d requests, %d failed\n", n.Requests, n.Failed)
	return nil
}
