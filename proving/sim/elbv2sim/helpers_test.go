package elbv2sim

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws/retry"
	elbv2 "github.com/aws/aws-sdk-go-v2/service/elasticloadbalancingv2"
	"github.com/aws/smithy-go"

	"draingate.dev/draingate/proving/testutil"
)

// waitLimit bounds every poll; generous because the machine may be busy.
// Tests assert states and orders, never how long something took.
const waitLimit = 15 * time.Second

func start(t *testing.T, cfg Config) (*Server, string) {
	t.Helper()
	s := New(cfg)
	url, err := s.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s, url
}

// noBackoff keeps the SDK's default attempt count but drops the backoff, so
// retries of Throttling do not slow the tests down.
func noBackoff(o *elbv2.Options) {
	o.Retryer = retry.NewStandard(func(o *retry.StandardOptions) {
		o.Backoff = retry.BackoffDelayerFunc(func(int, error) (time.Duration, error) { return 0, nil })
	})
}

func oneAttempt(o *elbv2.Options) { o.RetryMaxAttempts = 1 }

// backend is a health-check target on loopback whose answer the test sets.
type backend struct {
	srv   *httptest.Server
	code  atomic.Int32
	delay atomic.Int64 // nanoseconds to wait before answering
	hits  atomic.Int32
}

func newBackend(t *testing.T) *backend {
	t.Helper()
	b := &backend{}
	b.code.Store(http.StatusOK)
	b.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b.hits.Add(1)
		if d := time.Duration(b.delay.Load()); d > 0 {
			select {
			case <-time.After(d):
			case <-r.Context().Done():
				return
			}
		}
		w.WriteHeader(int(b.code.Load()))
	}))
	t.Cleanup(b.srv.Close)
	return b
}

func (b *backend) target() Target {
	host, port, _ := net.SplitHostPort(b.srv.Listener.Addr().String())
	p, _ := strconv.Atoi(port)
	return Target{ID: host, Port: int32(p)}
}

// deadPort returns a loopback port with nothing listening on it.
func deadPort(t *testing.T) int32 {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	return int32(p)
}

func waitState(t *testing.T, s *Server, arn string, tgt Target, want State) {
	t.Helper()
	ctx, cancel := context.WithTimeout(bg, waitLimit)
	defer cancel()
	testutil.Eventually(t, ctx, string(want)+" of "+tgt.ID, func() (bool, error) { return s.Targets(arn)[tgt] == want, nil })
}

// step is the part of an Event the tests compare.
type step struct {
	From, To State
	Reason   string
}

// expectSteps reads events for tgt (skipping other targets) and checks that
// the next ones are exactly want, in order.
func expectSteps(t *testing.T, ch <-chan Event, tgt Target, want ...step) []Event {
	t.Helper()
	var got []Event
	timeout := time.NewTimer(waitLimit)
	defer timeout.Stop()
	for len(got) < len(want) {
		select {
		case ev, ok := <-ch:
			if !ok {
				t.Fatalf("event channel closed after %v", got)
			}
			if ev.Target != tgt {
				continue
			}
			i := len(got)
			got = append(got, ev)
			if s := (step{ev.From, ev.To, ev.Reason}); s != want[i] {
				t.Fatalf("event %d = %+v, want %+v (events so far %+v)", i, s, want[i], got)
			}
		case <-timeout.C:
			t.Fatalf("timed out after events %+v, want %+v", got, want)
		}
	}
	return got
}

func apiCode(err error) string {
	var ae smithy.APIError
	if errors.As(err, &ae) {
		return ae.ErrorCode()
	}
	return ""
}

var bg = context.Background()
