package lab

import (
	"context"
	"io"
	"net"
	"strconv"
	"testing"
	"time"

	"draingate.dev/draingate/proving/lab/app"
	"draingate.dev/draingate/proving/sim/dataplane"
)

// The stream load through either kind of load balancer node, with one of
// two apps taken out of rotation and then stopped: the streams on it end
// with the app's bye, their unanswered messages go again on new streams to
// the other app, and no message fails.
func TestStreamsMoveOnAtTheAppsBye(t *testing.T) {
	for _, flows := range []bool{false, true} {
		t.Run("flows="+strconv.FormatBool(flows), func(t *testing.T) {
			var targets []dataplane.Target
			var stopA context.CancelFunc
			for i := range 2 {
				ln, err := net.Listen("tcp", "127.0.0.1:0")
				if err != nil {
					t.Fatal(err)
				}
				ctx, cancel := context.WithCancel(context.Background())
				done := make(chan struct{})
				go func() {
					defer close(done)
					app.New(app.Config{Hostname: "app-" + strconv.Itoa(i), Log: io.Discard}).Serve(ctx, ln)
				}()
				t.Cleanup(func() { cancel(); <-done })
				if i == 0 {
					stopA = cancel
				}
				port := ln.Addr().(*net.TCPAddr).Port
				targets = append(targets, dataplane.Target{ID: "127.0.0.1", Port: int32(port)})
			}
			p := dataplane.New(dataplane.Config{Flows: flows})
			t.Cleanup(p.Close)
			for _, tg := range targets {
				p.Apply(dataplane.Event{Target: tg, To: dataplane.StateHealthy})
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := p.WaitInRotation(ctx, 2); err != nil {
				t.Fatal(err)
			}
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			srv := p.Server()
			go srv.Serve(ln)
			t.Cleanup(func() { srv.Close() })

			spec := DefaultLoad()
			spec.Shape, spec.StreamPeriod, spec.StreamLife = Stream, 50*time.Millisecond, 10*time.Second
			l := startStreams(spec, []string{"http://" + ln.Addr().String() + "/"}, nil, 100, time.Second, 1, func(time.Time, bool) {})
			time.Sleep(500 * time.Millisecond)
			p.Apply(dataplane.Event{Target: targets[0], To: "draining"})
			for p.InRotation(targets[0]) {
				time.Sleep(5 * time.Millisecond)
			}
			stopA()
			time.Sleep(500 * time.Millisecond)
			requests, failures := l.stop()
			t.Logf("%d messages, %d failed; %s", requests, failures, l.statuses())
			if requests < 20 || failures != 0 {
				t.Errorf("%d messages, %d failed; want many, none failed (%s)", requests, failures, l.statuses())
			}
			if l.byes == 0 {
				t.Errorf("no stream ended with the app's bye (%s); want the streams on the stopped app to", l.statuses())
			}
		})
	}
}
