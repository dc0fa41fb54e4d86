package prestop

import (
	"context"
	"errors"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"draingate.dev/draingate/api"
	"draingate.dev/draingate/internal/traffic"
	"draingate.dev/draingate/proving/testutil"
)

// Every ask carries the evidence as it is at that ask.
func TestRunSendsTrafficWithEveryAsk(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const polls = 3
		g := newGate(t, func(n int, _ api.DrainRequest) reply {
			if n == polls {
				return released(api.ReasonDrained)
			}
			return waiting(true)
		})
		var log testutil.SyncBuffer
		cfg := config(g.URL, &log)
		start := time.Now()
		calls := 0
		cfg.Traffic = func() *api.Traffic {
			calls++
			if calls == 2 {
				return nil // no evidence this time: the ask goes without
			}
			return &api.Traffic{
				Watched: time.Since(start),
				Sources: []api.SourceTraffic{{Addr: netip.MustParseAddr("10.0.0.1"), Port: 8080, Arrivals: calls, Last: []time.Duration{0}}},
			}
		}
		res := Run(context.Background(), cfg)
		if res.Outcome != Released || res.Asks != polls+1 || calls != polls+1 {
			t.Fatalf("got %+v after %d calls for evidence, want released at ask %d, one call per ask", res, calls, polls+1)
		}
		for i, a := range g.recorded() {
			tr := a.req.Traffic
			switch {
			case i == 1 && tr != nil:
				t.Errorf("ask 1 sent %+v, want no traffic", tr)
			case i != 1 && (tr == nil || len(tr.Sources) != 1 || tr.Sources[0].Arrivals != i+1 || tr.Watched != a.at.Sub(start).Truncate(time.Millisecond)):
				t.Errorf("ask %d at +%s sent %+v, want the evidence of that moment", i, a.at.Sub(start), tr)
			}
		}
	})
}

// scripted is a read whose snapshot or failure the test sets.
type scripted struct {
	mu    sync.Mutex
	snap  traffic.Snapshot
	err   error
	reads int
}

func (s *scripted) read() (traffic.Snapshot, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reads++
	return s.snap, s.err
}

func (s *scripted) set(f func(*scripted)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f(s)
}

func (s *scripted) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.reads
}

func TestStartTraffic(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var log testutil.SyncBuffer
		sc := &scripted{snap: traffic.Snapshot{Listening: []uint16{8080, 9090}, PassiveOpens: 7}}
		summary, stop := startTraffic(sc.read, trafficInterval, logger{&log})
		if summary == nil {
			t.Fatalf("no evidence after a good baseline:\n%s", log.String())
		}
		if s := summary(); s == nil || s.Watched != 0 || len(s.Sources) != 0 {
			t.Errorf("evidence at the baseline: %+v", s)
		}
		mustContain(t, log.String(), "traffic evidence on: watching inbound TCP to 2 listening ports (8080, 9090), sampling every 100ms")

		conn := traffic.Conn{Cookie: 1, State: traffic.Established, Local: netip.MustParseAddrPort("10.244.0.7:8080"),
			Remote: netip.MustParseAddrPort("10.0.0.1:5000")}
		sc.set(func(s *scripted) { s.snap.Conns = []traffic.Conn{conn}; s.snap.PassiveOpens = 8 })
		time.Sleep(250 * time.Millisecond)
		s := summary()
		if s == nil || s.Watched != 250*time.Millisecond || len(s.Sources) != 1 || s.Sources[0].Arrivals != 1 || s.Sources[0].First != 100*time.Millisecond {
			t.Errorf("evidence after a connection at +100ms: %+v", s)
		}

		// The counter becomes unreadable: one line, whatever the samples
		// after it.
		sc.set(func(s *scripted) { s.snap.PassiveOpensErr = errors.New("open /proc/net/snmp: no such file") })
		time.Sleep(time.Second)
		if n := strings.Count(log.String(), "passive-open counter is unreadable (open /proc/net/snmp: no such file)"); n != 1 {
			t.Errorf("%d lines about the counter, want 1:\n%s", n, log.String())
		}

		// Failed reads: one line for the first, no evidence once no good
		// sample is recent, and after 20 in a row the watch ends: one
		// more line, no more reads.
		sc.set(func(s *scripted) { s.err = errors.New("sock_diag sent nothing for 500ms") })
		time.Sleep(1500 * time.Millisecond)
		if s := summary(); s != nil {
			t.Errorf("evidence after failed reads: %+v", s)
		}
		if n := strings.Count(log.String(), "traffic evidence: a sample failed (sock_diag sent nothing for 500ms)"); n != 1 {
			t.Errorf("%d lines about a failed sample, want 1:\n%s", n, log.String())
		}
		time.Sleep(time.Second)
		reads := sc.count()
		time.Sleep(time.Second)
		if n := sc.count(); n != reads {
			t.Errorf("%d reads after the watch ended", n-reads)
		}
		if n := strings.Count(log.String(), "traffic evidence off: sock_diag sent nothing for 500ms; the server relies on route tails alone"); n != 1 {
			t.Errorf("%d lines about the failure, want 1:\n%s", n, log.String())
		}
		stop()
	})
}

func TestStartTrafficStops(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var log testutil.SyncBuffer
		sc := &scripted{snap: traffic.Snapshot{Listening: []uint16{8080}, PassiveOpensErr: errors.New("no /proc")}}
		_, stop := startTraffic(sc.read, trafficInterval, logger{&log})
		time.Sleep(time.Second)
		stop() // returns once the goroutine has ended; synctest fails the test if it leaked
		reads := sc.count()
		time.Sleep(time.Second)
		if n := sc.count(); n != reads || reads < 10 {
			t.Errorf("%d reads while sampling, %d after stop", reads, n-reads)
		}
		mustContain(t, log.String(), "watching inbound TCP to 1 listening port (8080)", "passive-open counter is unreadable (no /proc)")
	})
}

func TestStartTrafficBaselineFails(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var log testutil.SyncBuffer
		sc := &scripted{err: errors.New("opening a sock_diag netlink socket: permission denied")}
		summary, stop := startTraffic(sc.read, trafficInterval, logger{&log})
		stop()
		time.Sleep(time.Second)
		if summary != nil || sc.count() != 1 {
			t.Errorf("summary %v, %d reads; want no evidence after one read", summary != nil, sc.count())
		}
		if got, want := log.String(), "draingate-prestop: traffic evidence off: opening a sock_diag netlink socket: permission denied; the server relies on route tails alone\n"; got != want {
			t.Errorf("log %q, want %q", got, want)
		}
	})
}

func TestPortList(t *testing.T) {
	for _, c := range []struct {
		ports []uint16
		want  string
	}{
		{nil, "0 listening ports yet"},
		{[]uint16{80}, "1 listening port (80)"},
		{[]uint16{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, "10 listening ports (1, 2, 3, 4, 5, 6, 7, 8, …)"},
	} {
		if got := portList(c.ports); got != c.want {
			t.Errorf("%v: %q, want %q", c.ports, got, c.want)
		}
	}
}
