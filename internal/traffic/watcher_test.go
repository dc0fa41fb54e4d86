package traffic

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"net/url"
	"reflect"
	"sync"
	"testing"
	"time"

	"draingate.dev/draingate/api"
)

// The watcher's tests script its reads: each sample gets the snapshot the
// test set, so the counting is a pure function of the inputs and the times
// are exact.

var testStart = time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)

const tick = 100 * time.Millisecond

// at is the time of the k-th sample, k ticks after the baseline.
func at(k int) time.Time { return testStart.Add(time.Duration(k) * tick) }

const podIP = "10.244.0.7"

type script struct {
	snap  Snapshot
	err   error
	reads int
}

func (s *script) read() (Snapshot, error) {
	s.reads++
	return s.snap, s.err
}

// newScripted returns a watcher reading sc, listening on ports.
func newScripted(ports ...uint16) (*Watcher, *script) {
	sc := &script{snap: Snapshot{Listening: ports}}
	return NewWatcher(sc.read), sc
}

func (s *script) conns(cs ...Conn) *script {
	s.snap.Conns = cs
	return s
}

func sample(t *testing.T, w *Watcher, k int) {
	t.Helper()
	if err := w.Sample(at(k)); err != nil {
		t.Fatalf("sample %d: %v", k, err)
	}
}

// info is what a current kernel's tcp_info says.
func info(bytes uint64, lastRecv time.Duration) Info {
	segs := uint32(bytes/100 + 1)
	return Info{BytesReceived: bytes, HasBytesReceived: true, DataSegsIn: segs, HasDataSegsIn: true,
		SegsIn: segs + 3, HasSegsIn: true, LastDataRecv: lastRecv, HasLastDataRecv: true}
}

// inbound is an established connection from remote to the pod's port.
func inbound(cookie uint64, remote string, port uint16, bytes uint64, lastRecv time.Duration) Conn {
	return Conn{Cookie: cookie, State: Established, Local: netip.AddrPortFrom(netip.MustParseAddr(podIP), port),
		Remote: ap(remote), Info: info(bytes, lastRecv)}
}

func (c Conn) in(s State) Conn { c.State = s; return c }

func src(addr string, port uint16, arrivals int, first time.Duration, last ...time.Duration) api.SourceTraffic {
	return api.SourceTraffic{Addr: netip.MustParseAddr(addr), Port: port, Arrivals: arrivals, First: first, Last: last}
}

// withGap sets a source's longest pause.
func withGap(s api.SourceTraffic, gap time.Duration) api.SourceTraffic {
	s.MaxGap = gap
	return s
}

// withLooks sets a source's look counts.
func withLooks(s api.SourceTraffic, all, recent api.Looks) api.SourceTraffic {
	s.Looks, s.RecentLooks = all, recent
	return s
}

// withOpen sets a source's established connections at the latest look.
func withOpen(s api.SourceTraffic, open int) api.SourceTraffic {
	s.Open = open
	return s
}

// withGaps sets a source's gap bins.
func withGaps(s api.SourceTraffic, set map[int]api.GapBin) api.SourceTraffic {
	s.Gaps = gapBins(set)
	return s
}

// check compares a summary with want, and checks it survives the wire.
func check(t *testing.T, got *api.Traffic, want api.Traffic) {
	t.Helper()
	if got == nil {
		t.Fatal("no summary")
	}
	if !reflect.DeepEqual(*got, want) {
		t.Errorf("summary:\n got %+v\nwant %+v", *got, want)
	}
	roundTrip(t, got)
}

// roundTrip checks s passes the server's parsers, alone and in a drain
// request.
func roundTrip(t *testing.T, s *api.Traffic) {
	t.Helper()
	roundTripTraffic(t, s)
	roundTripRequest(t, s)
}

// roundTripTraffic checks s passes ParseTraffic once encoded.
func roundTripTraffic(t *testing.T, s *api.Traffic) {
	t.Helper()
	enc := api.EncodeTraffic(s)
	p, err := api.ParseTraffic(enc)
	if err != nil {
		t.Fatalf("summary %+v encodes as %q, which ParseTraffic refuses: %v", *s, enc, err)
	}
	if len(p.Sources) != len(s.Sources) || p.Unknown.Arrivals != s.Unknown.Arrivals {
		t.Fatalf("summary %+v came back as %+v", *s, *p)
	}
}

// roundTripRequest sends s as a drain request's traffic, with its
// optional parameters (traffic-conns among them), through the server's
// parser.
func roundTripRequest(t *testing.T, s *api.Traffic) {
	t.Helper()
	enc := api.DrainRequest{Namespace: "n", Pod: "p", Traffic: s}.URL("http://g")
	u, err := url.Parse(enc)
	if err != nil {
		t.Fatalf("summary %+v encodes as %q, which is no URL: %v", *s, enc, err)
	}
	r, err := api.ParseDrainRequest("GET", u)
	if err != nil {
		t.Fatalf("summary %+v encodes as %q, which ParseDrainRequest refuses: %v", *s, enc, err)
	}
	p := r.Traffic
	if len(p.Sources) != len(s.Sources) || p.Unknown.Arrivals != s.Unknown.Arrivals ||
		len(p.NewConns) != len(s.NewConns) || p.ConnsCounted != s.ConnsCounted {
		t.Fatalf("summary %+v came back as %+v", *s, *p)
	}
}

func TestWatcherCountsArrivals(t *testing.T) {
	w, sc := newScripted(8080, 9090)
	if w.Summary(at(0)) != nil {
		t.Error("a summary before any sample")
	}
	sc.snap.PassiveOpens = 10
	a := inbound(1, "10.0.0.1:5000", 8080, 100, time.Second)
	sc.conns(a)
	sample(t, w, 0)
	check(t, w.Summary(at(0)), api.Traffic{})

	// A new connection with data arrived when its data did; one without
	// data yet at the sample's time.
	b := inbound(2, "10.0.0.2:6000", 8080, 50, 30*time.Millisecond)
	c := inbound(3, "10.0.0.3:7000", 9090, 0, 80*time.Millisecond)
	sc.snap.PassiveOpens = 12
	sc.conns(a, b, c)
	sample(t, w, 1)

	// A known connection's growth is one arrival, however many requests
	// it was; data that seems older than the previous sample (a jiffy's
	// rounding) is put just after it.
	a.Info = info(300, 10*time.Millisecond)
	c.Info = info(10, 500*time.Millisecond)
	sc.conns(a, b, c)
	sample(t, w, 2)

	// The new connections are also the looks that saw them (c's growth
	// is not one); a's growth is an arrival only. All three are open.
	// Ages count from the latest look (at(2)), not from the summary's
	// time: what nobody watched is not silence.
	check(t, w.Summary(at(3)), api.Traffic{
		Watched: 300 * time.Millisecond,
		Every:   tick,
		Sources: []api.SourceTraffic{
			withOpen(withGaps(withLooks(withGap(src("10.0.0.3", 9090, 2, 100*time.Millisecond, 100*time.Millisecond-time.Nanosecond, 100*time.Millisecond), time.Nanosecond), api.Looks{N: 1}, api.Looks{N: 1}), oneLookApart), 1),
			withOpen(src("10.0.0.1", 8080, 1, 10*time.Millisecond, 10*time.Millisecond), 1),
			withOpen(src("10.0.0.2", 8080, 1, 130*time.Millisecond, 130*time.Millisecond), 1),
		},
		NewConns: []api.SourceTraffic{
			src("10.0.0.3", 9090, 1, 100*time.Millisecond, 100*time.Millisecond),
			src("10.0.0.2", 8080, 1, 130*time.Millisecond, 130*time.Millisecond),
		},
		ConnsCounted: true,
	})
	if got := w.Listening(); !reflect.DeepEqual(got, []uint16{8080, 9090}) {
		t.Errorf("Listening() = %v", got)
	}
	if err := w.PassiveOpensErr(); err != nil {
		t.Errorf("PassiveOpensErr() = %v", err)
	}
}

func TestWatcherIgnoresInPodAndOutbound(t *testing.T) {
	w, sc := newScripted(8080)
	sample(t, w, 0)
	pod := func(port uint16) netip.AddrPort { return netip.AddrPortFrom(netip.MustParseAddr(podIP), port) }
	sc.snap.PassiveOpens = 4
	sc.conns(
		// A sidecar proxy to its app over loopback: both ends.
		Conn{Cookie: 1, State: Established, Local: ap("127.0.0.1:8080"), Remote: ap("127.0.0.1:40000"), Info: info(10, 0)},
		Conn{Cookie: 2, State: Established, Local: ap("127.0.0.1:40000"), Remote: ap("127.0.0.1:8080"), Info: info(10, 0)},
		Conn{Cookie: 3, State: Established, Local: ap("[::1]:8080"), Remote: ap("[::1]:40001"), Info: info(10, 0)},
		// The pod calling itself on its own address.
		Conn{Cookie: 4, State: Established, Local: pod(8080), Remote: pod(41000), Info: info(10, 0)},
		Conn{Cookie: 5, State: Established, Local: pod(41000), Remote: pod(8080), Info: info(10, 0)},
		// The app calling out, and the agent calling the gate.
		Conn{Cookie: 6, State: Established, Local: pod(43000), Remote: ap("10.96.0.1:443"), Info: info(10, 0)},
		Conn{Cookie: 7, State: Established, Local: pod(43001), Remote: ap("10.96.0.10:8080"), Info: info(10, 0)},
		// A route's connection on a dual-stack listener.
		Conn{Cookie: 8, State: Established, Local: pod(8080), Remote: netip.AddrPortFrom(netip.MustParseAddr("::ffff:10.0.0.9"), 5000), Info: info(0, 0)},
		// Not connected: a socket the kernel disconnected.
		Conn{Cookie: 9, State: Close, Local: pod(8080), Remote: ap("0.0.0.0:0")},
	)
	sample(t, w, 1)
	check(t, w.Summary(at(1)), api.Traffic{
		Watched:      tick,
		Every:        tick,
		Sources:      []api.SourceTraffic{withOpen(src("10.0.0.9", 8080, 1, 0, 0), 1)},
		NewConns:     []api.SourceTraffic{src("10.0.0.9", 8080, 1, 0, 0)},
		ConnsCounted: true,
	})
}

func TestWatcherUnknownArrivals(t *testing.T) {
	w, sc := newScripted(8080)
	sc.snap.PassiveOpens = 100
	sample(t, w, 0)

	// Five passive opens: one seen open, one seen as the client end of an
	// in-pod connection whose server end is gone; three never seen.
	sc.snap.PassiveOpens = 105
	sc.conns(
		inbound(1, "10.0.0.1:5000", 8080, 0, 0),
		Conn{Cookie: 2, State: TimeWait, Local: ap("127.0.0.1:50000"), Remote: ap("127.0.0.1:8080")},
	)
	sample(t, w, 1)
	check(t, w.Summary(at(1)), api.Traffic{
		Watched:      tick,
		Every:        tick,
		Sources:      []api.SourceTraffic{withOpen(src("10.0.0.1", 8080, 1, 0, 0), 1)},
		Unknown:      api.SourceTraffic{Arrivals: 3, First: 0, Last: []time.Duration{0, 0, 0}},
		NewConns:     []api.SourceTraffic{src("10.0.0.1", 8080, 1, 0, 0)},
		ConnsCounted: true,
	})
	sample(t, w, 2) // nothing new

	// Without the counter nothing is counted, and the watcher says why;
	// the sample after it is a new baseline for the counter.
	sc.snap.PassiveOpens, sc.snap.PassiveOpensErr = 0, errors.New("no /proc")
	sample(t, w, 3)
	if w.PassiveOpensErr() == nil {
		t.Error("PassiveOpensErr() = nil after a sample without the counter")
	}
	sc.snap.PassiveOpens, sc.snap.PassiveOpensErr = 200, nil
	sample(t, w, 4)
	sc.snap.PassiveOpens = 201
	sample(t, w, 5)
	if w.PassiveOpensErr() != nil {
		t.Errorf("PassiveOpensErr() = %v once the counter is back", w.PassiveOpensErr())
	}
	check(t, w.Summary(at(5)), api.Traffic{
		Watched:      5 * tick,
		Every:        tick,
		Sources:      []api.SourceTraffic{withOpen(src("10.0.0.1", 8080, 1, 4*tick, 4*tick), 1)},
		Unknown:      api.SourceTraffic{Arrivals: 4, First: 4 * tick, Last: []time.Duration{0, 4 * tick, 4 * tick, 4 * tick}, MaxGap: 4 * tick},
		NewConns:     []api.SourceTraffic{src("10.0.0.1", 8080, 1, 4*tick, 4*tick)},
		ConnsCounted: true,
	})

	// A counter that went backwards (it cannot) counts nothing.
	sc.snap.PassiveOpens = 150
	sample(t, w, 6)
	if s := w.Summary(at(6)); s.Unknown.Arrivals != 4 {
		t.Errorf("unknown arrivals %d after the counter went back, want still 4", s.Unknown.Arrivals)
	}
}

func TestWatcherPeerFIN(t *testing.T) {
	w, sc := newScripted(8080)
	a := inbound(1, "10.0.0.1:5000", 8080, 5, time.Second)
	d := inbound(4, "10.0.0.4:5000", 8080, 5, time.Second)
	sc.conns(a, d)
	sample(t, w, 0)

	// The peer's FIN grows bytes_received by one: no data. A new
	// connection whose peer already closed without sending data is still
	// a new connection.
	a = a.in(CloseWait)
	a.Info = info(6, time.Second+tick)
	d = d.in(CloseWait)
	d.Info = info(9, 40*time.Millisecond) // three bytes and the FIN
	b := inbound(2, "10.0.0.2:5000", 8080, 1, 50*time.Millisecond).in(CloseWait)
	c := inbound(3, "10.0.0.3:5000", 8080, 11, 50*time.Millisecond).in(CloseWait)
	sc.conns(a, b, c, d)
	sample(t, w, 1)

	// LAST_ACK after CLOSE_WAIT: the FIN was counted already.
	a = a.in(LastAck)
	a.Info = info(7, 20*time.Millisecond)
	sc.conns(a, b, c, d)
	sample(t, w, 2)

	// b and c are new connections; none is open both ways any more.
	check(t, w.Summary(at(2)), api.Traffic{
		Watched: 2 * tick,
		Every:   tick,
		Sources: []api.SourceTraffic{
			src("10.0.0.1", 8080, 1, 20*time.Millisecond, 20*time.Millisecond),
			src("10.0.0.2", 8080, 1, tick, tick),
			src("10.0.0.4", 8080, 1, tick+40*time.Millisecond, tick+40*time.Millisecond),
			src("10.0.0.3", 8080, 1, tick+50*time.Millisecond, tick+50*time.Millisecond),
		},
		NewConns: []api.SourceTraffic{
			src("10.0.0.2", 8080, 1, tick, tick),
			src("10.0.0.3", 8080, 1, tick+50*time.Millisecond, tick+50*time.Millisecond),
		},
		ConnsCounted: true,
	})
}

func TestWatcherTimeWait(t *testing.T) {
	w, sc := newScripted(8080)
	sc.snap.PassiveOpens = 1
	a := inbound(1, "10.0.0.1:5000", 8080, 10, 30*time.Second)
	sc.conns(a)
	sample(t, w, 0)

	// The pod closed a known connection idle for 30s: TIME_WAIT has no
	// tcp_info, and an idle timeout's close is no arrival. A connection
	// that opened and was closed by the pod between two samples is seen
	// in TIME_WAIT: one arrival at the sample's time, and the passive open
	// is accounted for.
	tw := func(c Conn) Conn { c.State, c.Info = TimeWait, Info{}; return c }
	e := inbound(2, "10.0.0.5:7000", 8080, 0, 0)
	sc.snap.PassiveOpens = 2
	sc.conns(tw(a), tw(e))
	sample(t, w, 1)
	sample(t, w, 2)
	check(t, w.Summary(at(2)), api.Traffic{
		Watched:      2 * tick,
		Every:        tick,
		Sources:      []api.SourceTraffic{src("10.0.0.5", 8080, 1, tick, tick)},
		NewConns:     []api.SourceTraffic{src("10.0.0.5", 8080, 1, tick, tick)},
		ConnsCounted: true,
	})
}

// TestWatcherClosedAfterUse: a keep-alive connection in use that the pod
// closes between two samples (a server's limit of requests per connection)
// counts its last request at the sample's time: TIME_WAIT keeps no
// tcp_info to show it, and missing it would double its source's gap.
func TestWatcherClosedAfterUse(t *testing.T) {
	w, sc := newScripted(8080)
	a := inbound(1, "10.0.0.1:5000", 8080, 300, 0)
	sc.conns(a)
	sample(t, w, 0)
	a.Info = info(600, 0)
	sc.conns(a)
	sample(t, w, 1)
	tw := a
	tw.State, tw.Info = TimeWait, Info{}
	sc.conns(tw)
	sample(t, w, 2)
	sample(t, w, 3)
	check(t, w.Summary(at(3)), api.Traffic{
		Watched: 3 * tick,
		Every:   tick,
		Sources: []api.SourceTraffic{withGaps(withLooks(withGap(src("10.0.0.1", 8080, 2, 2*tick, tick, 2*tick), tick),
			api.Looks{N: 1}, api.Looks{N: 1}), map[int]api.GapBin{0: {N: 1, Sum: 1}})},
		ConnsCounted: true,
	})
}

func TestWatcherOlderKernels(t *testing.T) {
	w, sc := newScripted(8080)
	// No bytes_received (before 4.1): data_segs_in, else segs_in, else
	// last_data_recv moving forward.
	dataSegs := Info{DataSegsIn: 3, HasDataSegsIn: true, SegsIn: 9, HasSegsIn: true, LastDataRecv: time.Second, HasLastDataRecv: true}
	segs := Info{SegsIn: 9, HasSegsIn: true, LastDataRecv: time.Second, HasLastDataRecv: true}
	lastOnly := Info{LastDataRecv: time.Second, HasLastDataRecv: true}
	conn := func(cookie uint64, remote string, in Info) Conn {
		c := inbound(cookie, remote, 8080, 0, 0)
		c.Info = in
		return c
	}
	sc.conns(conn(1, "10.0.0.1:1", dataSegs), conn(2, "10.0.0.2:1", segs), conn(3, "10.0.0.3:1", lastOnly))
	sample(t, w, 0)

	// Nothing grew; last_data_recv aged with the clock (plus a jiffy of
	// jitter); a new connection whose counters cannot tell data from the
	// handshake arrives at the sample's time.
	age := func(in Info, d time.Duration) Info { in.LastDataRecv = d; return in }
	sc.conns(conn(1, "10.0.0.1:1", age(dataSegs, time.Second+tick)), conn(2, "10.0.0.2:1", age(segs, time.Second+tick)),
		conn(3, "10.0.0.3:1", age(lastOnly, time.Second+tick-10*time.Millisecond)),
		conn(4, "10.0.0.4:1", age(segs, 60*time.Millisecond)))
	sample(t, w, 1)
	if s := w.Summary(at(1)); len(s.Sources) != 1 || s.Sources[0].Addr != netip.MustParseAddr("10.0.0.4") || s.Sources[0].First != 0 {
		t.Fatalf("after ageing: %+v", s)
	}

	dataSegs.DataSegsIn++
	segs.SegsIn++
	sc.conns(conn(1, "10.0.0.1:1", age(dataSegs, 10*time.Millisecond)), conn(2, "10.0.0.2:1", age(segs, 20*time.Millisecond)),
		conn(3, "10.0.0.3:1", age(lastOnly, 30*time.Millisecond)))
	sample(t, w, 2)
	check(t, w.Summary(at(2)), api.Traffic{
		Watched: 2 * tick,
		Every:   tick,
		Sources: []api.SourceTraffic{
			withOpen(src("10.0.0.1", 8080, 1, 10*time.Millisecond, 10*time.Millisecond), 1),
			withOpen(src("10.0.0.2", 8080, 1, 20*time.Millisecond, 20*time.Millisecond), 1),
			withOpen(src("10.0.0.3", 8080, 1, 30*time.Millisecond, 30*time.Millisecond), 1),
			src("10.0.0.4", 8080, 1, tick, tick),
		},
		NewConns:     []api.SourceTraffic{src("10.0.0.4", 8080, 1, tick, tick)},
		ConnsCounted: true,
	})
}

func TestWatcherForgetsConnectionsKeepsPorts(t *testing.T) {
	w, sc := newScripted(8080)
	sample(t, w, 0)
	a := inbound(1, "10.0.0.1:5000", 8080, 10, 0)
	sc.conns(a)
	sample(t, w, 1)

	// The app closed its listener (as many do on SIGTERM) and keeps
	// serving its connections: they are still a route's.
	sc.snap.Listening = nil
	a.Info = info(20, 0)
	sc.conns(a, inbound(2, "10.0.0.2:5000", 8080, 10, 0))
	sample(t, w, 2)
	if got := w.Listening(); len(got) != 0 {
		t.Errorf("Listening() = %v, want none", got)
	}

	sc.conns()
	sample(t, w, 3)
	if len(w.conns) != 0 {
		t.Errorf("%d connections remembered after all closed", len(w.conns))
	}
	check(t, w.Summary(at(3)), api.Traffic{
		Watched: 3 * tick,
		Every:   tick,
		Sources: []api.SourceTraffic{
			withGaps(withLooks(withGap(src("10.0.0.1", 8080, 2, 2*tick, tick, 2*tick), tick), api.Looks{N: 1}, api.Looks{N: 1}), oneLookApart),
			src("10.0.0.2", 8080, 1, tick, tick),
		},
		NewConns: []api.SourceTraffic{
			src("10.0.0.1", 8080, 1, 2*tick, 2*tick),
			src("10.0.0.2", 8080, 1, tick, tick),
		},
		ConnsCounted: true,
	})
}

func TestWatcherReadFailureEndsTheWatch(t *testing.T) {
	w, sc := newScripted(8080)
	sc.err = errors.New("sock_diag: permission denied")
	if err := w.Sample(at(0)); err == nil || w.Summary(at(0)) != nil {
		t.Fatalf("failed baseline: err %v, summary %+v", err, w.Summary(at(0)))
	}

	w, sc = newScripted(8080)
	sample(t, w, 0)
	sc.conns(inbound(1, "10.0.0.1:5000", 8080, 10, 0))
	sample(t, w, 1)
	if w.Summary(at(1)) == nil {
		t.Fatal("no summary after two samples")
	}
	// A failed read loses nothing: the next good one sees what grew in
	// between. While no good sample is recent, there is no summary.
	boom := errors.New("sock_diag sent nothing for 500ms")
	sc.err = boom
	if err := w.Sample(at(2)); err != boom || w.Ended() != nil {
		t.Fatalf("Sample = %v, Ended = %v; want %v and the watch going on", err, w.Ended(), boom)
	}
	if s := w.Summary(at(2)); s == nil {
		t.Error("no summary right after one failed read")
	}
	if s := w.Summary(at(1).Add(staleAfter + time.Millisecond)); s != nil {
		t.Errorf("summary with no good sample for over %s: %+v, want nil (no evidence rather than unobserved quiet)", staleAfter, s)
	}
	sc.err = nil
	sc.conns(inbound(1, "10.0.0.1:5000", 8080, 30, 0))
	sample(t, w, 3)
	if s := w.Summary(at(3)); s == nil || s.Sources[0].Arrivals != 2 {
		t.Errorf("after a failed read, the growth in between counts: %+v", s)
	}

	// maxFailures in a row end the watch: the same error, no more reads.
	sc.err = boom
	for k := range maxFailures {
		w.Sample(at(4 + k))
	}
	reads := sc.reads
	if err := w.Sample(at(30)); err != boom || sc.reads != reads || w.Summary(at(30)) != nil || w.Ended() != boom {
		t.Errorf("after %d failures: Sample = %v, %d more reads, summary %+v; want the same error, no read, nil", maxFailures, err, sc.reads-reads, w.Summary(at(30)))
	}
}

func TestWatcherBounds(t *testing.T) {
	w, sc := newScripted(8080)
	sc.snap.PassiveOpensErr = errors.New("not in this test")
	sample(t, w, 0)
	// Source i (10.0.1.i) opens one connection per sample from sample
	// i+1 on: 40-i arrivals by sample 40.
	const n = 40
	for k := 1; k <= n; k++ {
		var cs []Conn
		for i := range k {
			cs = append(cs, inbound(uint64(k*1000+i), fmt.Sprintf("10.0.1.%d:5000", i), 8080, 0, 0))
		}
		sc.conns(cs...)
		sample(t, w, k)
	}
	s := w.Summary(at(n))
	roundTrip(t, s)
	if len(s.Sources) != api.MaxTrafficSources {
		t.Fatalf("%d sources, want %d", len(s.Sources), api.MaxTrafficSources)
	}
	top := s.Sources[0]
	if top.Addr != netip.MustParseAddr("10.0.1.0") || top.Arrivals != n || top.First != time.Duration(n-1)*tick ||
		len(top.Last) != api.MaxTrafficAges || top.Last[0] != 0 || top.Last[api.MaxTrafficAges-1] != time.Duration(api.MaxTrafficAges-1)*tick {
		t.Errorf("busiest source %+v", top)
	}
	if last := s.Sources[api.MaxTrafficSources-1]; last.Addr != netip.MustParseAddr("10.0.1.31") || last.Arrivals != n-31 {
		t.Errorf("last source kept %+v, want 10.0.1.31", last)
	}
	// Sources 32..39 are left out; their 8+7+…+1 arrivals, the first at
	// sample 33, count as unknown.
	if u := s.Unknown; u.Arrivals != 36 || u.First != (n-33)*tick || len(u.Last) != api.MaxTrafficAges || u.Last[0] != 0 {
		t.Errorf("unknown %+v, want the left-out sources' 36 arrivals", u)
	}
	// Every arrival was a new connection: NewConns is the listed sources
	// again, in their order, and each has its latest one open.
	if len(s.NewConns) != len(s.Sources) {
		t.Fatalf("%d sources with new connections, want the %d listed", len(s.NewConns), len(s.Sources))
	}
	for i, nc := range s.NewConns {
		want := s.Sources[i]
		if want.Open != 1 {
			t.Errorf("source %s: %d open, want 1", want.Addr, want.Open)
		}
		want.Open = 0
		if !reflect.DeepEqual(nc, want) {
			t.Errorf("new connections %+v, want as the source's arrivals %+v", nc, want)
			break
		}
	}

	// Ties: the most recent last arrival first, then the lower address and
	// port.
	w, sc = newScripted(8080, 9090)
	sample(t, w, 0)
	sc.conns(inbound(1, "10.0.0.2:1", 8080, 0, 0), inbound(2, "10.0.0.1:1", 9090, 0, 0), inbound(3, "10.0.0.1:2", 8080, 0, 0))
	sample(t, w, 1)
	sc.conns(inbound(4, "10.0.0.3:1", 8080, 0, 0))
	sample(t, w, 2)
	var order []string
	for _, s := range w.Summary(at(2)).Sources {
		order = append(order, fmt.Sprintf("%s:%d", s.Addr, s.Port))
	}
	if want := []string{"10.0.0.3:8080", "10.0.0.1:8080", "10.0.0.1:9090", "10.0.0.2:8080"}; !reflect.DeepEqual(order, want) {
		t.Errorf("order %v, want %v", order, want)
	}
}

func TestWatcherKeyCap(t *testing.T) {
	w, sc := newScripted(8080)
	sample(t, w, 0)
	var cs []Conn
	for i := range maxKeys + 4 {
		cs = append(cs, inbound(uint64(i+1), fmt.Sprintf("10.%d.%d.1:5000", i/256, i%256), 8080, 0, 0))
	}
	sc.conns(cs...)
	sample(t, w, 1)
	if len(w.keys) != maxKeys || len(w.newConns) != maxKeys {
		t.Errorf("%d sources kept, %d with new connections, want the cap %d", len(w.keys), len(w.newConns), maxKeys)
	}
	s := w.Summary(at(1))
	roundTrip(t, s)
	if s.Unknown.Arrivals != maxKeys+4-api.MaxTrafficSources {
		t.Errorf("unknown %d, want every arrival not listed: %d", s.Unknown.Arrivals, maxKeys+4-api.MaxTrafficSources)
	}
}

// Every summary of any sequence of samples passes the server's parser,
// however odd the snapshots and clocks.
func TestWatcherSummariesAlwaysParse(t *testing.T) {
	withNew := 0
	for seed := range uint64(100) {
		rng := rand.New(rand.NewPCG(seed, 1))
		addrs := []string{"10.0.0.1", "10.0.0.2", "127.0.0.1", "::1", "::ffff:10.0.0.3", "fd00::7", "0.0.0.0", podIP, "fe80::1%eth0"}
		ports := []uint16{0, 80, 8080, 9090, 40000}
		pick := func() netip.AddrPort {
			return netip.AddrPortFrom(netip.MustParseAddr(addrs[rng.IntN(len(addrs))]), ports[rng.IntN(len(ports))])
		}
		var po uint64
		read := func() (Snapshot, error) {
			if rng.IntN(200) == 0 {
				return Snapshot{}, errors.New("scripted failure")
			}
			var s Snapshot
			for range rng.IntN(3) {
				s.Listening = append(s.Listening, ports[rng.IntN(len(ports))])
			}
			for range rng.IntN(12) {
				c := Conn{Cookie: uint64(rng.IntN(20)), State: State(1 + rng.IntN(12)), Local: pick(), Remote: pick()}
				if rng.IntN(4) > 0 {
					c.Info = Info{
						BytesReceived: uint64(rng.IntN(50)), HasBytesReceived: rng.IntN(3) > 0,
						DataSegsIn: uint32(rng.IntN(5)), HasDataSegsIn: rng.IntN(2) > 0,
						SegsIn: uint32(rng.IntN(5)), HasSegsIn: rng.IntN(2) > 0,
						LastDataRecv: time.Duration(rng.Int64N(int64(20 * time.Second))), HasLastDataRecv: rng.IntN(4) > 0,
					}
				}
				s.Conns = append(s.Conns, c)
			}
			po += uint64(rng.IntN(4))
			if rng.IntN(10) == 0 {
				po -= uint64(rng.IntN(3))
			}
			s.PassiveOpens = po
			if rng.IntN(10) == 0 {
				s.PassiveOpensErr = errors.New("no counter")
			}
			return s, nil
		}
		w := NewWatcher(read)
		now := testStart
		var latest time.Time // the latest sample's time, as the watcher keeps it
		for range 300 {
			// Mostly forward, sometimes standing still or going back.
			now = now.Add(time.Duration(rng.Int64N(int64(300*time.Millisecond))) - 30*time.Millisecond)
			if w.Sample(now) != nil {
				w, latest = NewWatcher(read), time.Time{}
				continue
			}
			if now.After(latest) {
				latest = now
			}
			asked := now.Add(time.Duration(rng.Int64N(int64(time.Second))) - 100*time.Millisecond)
			if rng.IntN(50) == 0 {
				asked = now.Add(8 * 24 * time.Hour) // past the wire's week
			}
			if s := w.Summary(asked); s != nil {
				if asked.Before(latest) {
					// Asked before the latest sample (the agent
					// asks after it), Watched can be shorter than
					// Every, which only ParseDrainRequest refuses.
					roundTripTraffic(t, s)
				} else {
					roundTripRequest(t, s)
				}
				if len(s.Sources) > api.MaxTrafficSources {
					t.Fatalf("seed %d: %d sources", seed, len(s.Sources))
				}
				if len(s.NewConns) > 0 {
					withNew++
				}
			}
		}
	}
	if withNew == 0 {
		t.Error("no summary had new connections: the test misses traffic-conns")
	}
}

// An ask whose clock was read just before the latest sample (the sampler
// took the lock first) still sends a summary the server accepts: the
// watch covers every look, however early the ask's now.
func TestWatcherSummaryAskedBeforeTheLatestSample(t *testing.T) {
	w, sc := newScripted(8080)
	sample(t, w, 0)
	sc.conns(inbound(1, "10.0.0.1:5000", 8080, 100, 10*time.Millisecond))
	sample(t, w, 1)
	s := w.Summary(at(1).Add(-50 * time.Millisecond))
	if s == nil {
		t.Fatal("no summary")
	}
	if s.Every > s.Watched {
		t.Errorf("every %v longer than the watch %v", s.Every, s.Watched)
	}
	u, err := url.Parse(api.DrainRequest{Namespace: "ns", Pod: "p", Traffic: s}.URL("http://gate"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := api.ParseDrainRequest("GET", u); err != nil {
		t.Errorf("the server refuses the summary: %v", err)
	}
}

// One goroutine samples while others ask for summaries (run with -race).
func TestWatcherConcurrentSummaries(t *testing.T) {
	n := 0
	w := NewWatcher(func() (Snapshot, error) {
		n++
		return Snapshot{Listening: []uint16{8080}, Conns: []Conn{inbound(uint64(n), "10.0.0.1:5000", 8080, 1, 0)}, PassiveOpens: uint64(n)}, nil
	})
	var wg sync.WaitGroup
	done := make(chan struct{})
	for range 3 {
		wg.Go(func() {
			for {
				select {
				case <-done:
					return
				default:
				}
				if s := w.Summary(time.Now()); s != nil {
					api.EncodeTraffic(s)
				}
				w.Listening()
				w.PassiveOpensErr()
			}
		})
	}
	for range 200 {
		if err := w.Sample(time.Now()); err != nil {
			t.Fatal(err)
		}
	}
	close(done)
	wg.Wait()
	if s := w.Summary(time.Now()); s == nil || s.Sources[0].Arrivals != 199 {
		t.Errorf("summary %+v, want 199 arrivals", s)
	}
}

// TestWatcherLongestPause: a source's summary carries the longest pause
// between two of its arrivals, also once the pause has left its latest 16.
func TestWatcherLongestPause(t *testing.T) {
	w, sc := newScripted(8080)
	a := inbound(1, "10.0.0.1:5000", 8080, 0, 0)
	sc.conns(a)
	sample(t, w, 0)
	bytes := uint64(0)
	k := 1
	step := func(ticks int) {
		k += ticks
		bytes += 100
		a.Info = info(bytes, 0)
		sc.conns(a)
		sample(t, w, k)
	}
	step(1)
	step(40) // a 4 s pause
	for range 20 {
		step(1)
	}
	got := w.Summary(at(k))
	if len(got.Sources) != 1 || got.Sources[0].MaxGap != 40*tick || len(got.Sources[0].Last) != api.MaxTrafficAges {
		t.Errorf("summary %+v: want the 4s pause as MaxGap, and 16 latest ages", got.Sources)
	}
	roundTrip(t, got)
}

// TestWatcherOneArrivalPerSourceAndSample: a source's connections that
// received in one sample are one arrival, at the latest receipt; the
// summary says how often the watcher looked, so the server fits the share
// of looks with data rather than a count one busy source could inflate.
func TestWatcherOneArrivalPerSourceAndSample(t *testing.T) {
	w, sc := newScripted(8080)
	a := inbound(1, "10.0.0.1:5000", 8080, 10, 0)
	b := inbound(2, "10.0.0.1:5001", 8080, 10, 0)
	c := inbound(3, "10.0.0.2:5000", 8080, 10, 0)
	sc.conns(a, b, c)
	sample(t, w, 0)

	// Both of 10.0.0.1's connections received (30 and 60 ms ago), and a
	// third one opened: one arrival, 30 ms before the sample.
	a.Info = info(20, 60*time.Millisecond)
	b.Info = info(20, 30*time.Millisecond)
	sc.conns(a, b, c, inbound(4, "10.0.0.1:5002", 8080, 10, 80*time.Millisecond))
	sample(t, w, 1)
	// Then only c, twice in two samples.
	c.Info = info(20, 0)
	sc.conns(a, b, c)
	sample(t, w, 2)
	c.Info = info(30, 0)
	sc.conns(a, b, c)
	sample(t, w, 3)

	// The look that saw 10.0.0.1's third connection open is a new
	// connection's at the source's latest receipt, not the new one's own
	// (80 ms): a part of the source's arrivals. Two of its connections
	// are still open.
	check(t, w.Summary(at(3)), api.Traffic{
		Watched: 3 * tick,
		Every:   tick,
		Sources: []api.SourceTraffic{
			withOpen(withGaps(withLooks(withGap(src("10.0.0.2", 8080, 2, tick, 0, tick), tick), api.Looks{N: 1}, api.Looks{N: 1}), oneLookApart), 1),
			withOpen(src("10.0.0.1", 8080, 1, 2*tick+30*time.Millisecond, 2*tick+30*time.Millisecond), 2),
		},
		NewConns:     []api.SourceTraffic{src("10.0.0.1", 8080, 1, 2*tick+30*time.Millisecond, 2*tick+30*time.Millisecond)},
		ConnsCounted: true,
	})
	// A slow sampler's summary says its own pace.
	sample(t, w, 6)
	if s := w.Summary(at(6)); s == nil {
		t.Error("no summary")
	} else if s.Every != 6*tick/4 {
		t.Errorf("after looks at 0, 1, 2, 3 and 6 ticks: Every %v, want %v", s.Every, 6*tick/4)
	}
}

// TestWatcherCountsLooksAndPauses: a source found by looks 1, 2, 4, 5 and
// 8 has 7 looks after its first arrival's and 2 pauses; past
// api.MaxTrafficAges arrivals the recent counts cover the latest ones
// only.
func TestWatcherCountsLooksAndPauses(t *testing.T) {
	w, sc := newScripted(8080)
	a := inbound(1, "10.0.0.1:5000", 8080, 10, 0)
	sc.conns(a)
	sample(t, w, 0)
	bytes, next := uint64(10), 1
	// send samples every tick up to the last of looks, with data at those.
	send := func(looks ...int) {
		for _, i := range looks {
			for ; next < i; next++ {
				sc.conns(a)
				sample(t, w, next)
			}
			bytes += 10
			a.Info = info(bytes, 0)
			sc.conns(a)
			sample(t, w, i)
			next = i + 1
		}
	}
	send(1, 2, 4, 5, 8)
	if s := w.Summary(at(8)); s == nil || len(s.Sources) != 1 {
		t.Fatalf("summary %+v", s)
	} else if got := s.Sources[0]; got.Looks != (api.Looks{N: 7, Pauses: 2}) || got.RecentLooks != got.Looks {
		t.Errorf("looks 1, 2, 4, 5, 8: Looks %+v, RecentLooks %+v; want 7 looks, 2 pauses, both", got.Looks, got.RecentLooks)
	} else if want := gapBins(map[int]api.GapBin{0: {N: 2, Sum: 2}, 1: {N: 2, Sum: 5}}); !reflect.DeepEqual(got.Gaps, want) {
		// Gaps 1, 2, 1 and 3 looks: two of bin 0 (1), two of bin 1 (2-3).
		t.Errorf("looks 1, 2, 4, 5, 8: gaps %+v, want %+v", got.Gaps, want)
	}
	// Sixteen more in a row, one look apart: the latest sixteen arrivals
	// (looks 10 to 25) made no pause.
	var more []int
	for i := 10; i < 10+api.MaxTrafficAges; i++ {
		more = append(more, i)
	}
	send(more...)
	last := more[len(more)-1]
	if s := w.Summary(at(last)); s == nil {
		t.Fatal("no summary")
	} else if got := s.Sources[0]; got.Looks != (api.Looks{N: last - 1, Pauses: 3}) || got.RecentLooks != (api.Looks{N: api.MaxTrafficAges - 1}) {
		t.Errorf("then looks 10 to %d: Looks %+v, RecentLooks %+v; want %d looks, 3 pauses; %d recent looks, none paused", last, got.Looks, got.RecentLooks, last-1, api.MaxTrafficAges-1)
	} else if want := gapBins(map[int]api.GapBin{0: {N: 2 + api.MaxTrafficAges - 1, Sum: 2 + api.MaxTrafficAges - 1}, 1: {N: 3, Sum: 7}}); !reflect.DeepEqual(got.Gaps, want) {
		// Then a gap of 2 and fifteen of 1: every gap counts, not only
		// the recent ones.
		t.Errorf("then looks 10 to %d: gaps %+v, want %+v", last, got.Gaps, want)
	}
}

// oneLookApart is the gap bins of two arrivals in consecutive looks.
var oneLookApart = map[int]api.GapBin{0: {N: 1, Sum: 1}}

// gapBins is api.SourceTraffic.Gaps with the given bins set.
func gapBins(set map[int]api.GapBin) []api.GapBin {
	g := make([]api.GapBin, api.GapBins)
	for j, b := range set {
		g[j] = b
	}
	return g
}

// TestWatcherCountsNewConnections: per source, the looks that saw a new
// connection are a series of their own, summarised as the source's
// arrivals are. A load balancer node that keeps passing bytes on flows it
// opened before the watch (an NLB to a draining target) has arrivals at
// every look but new connections only where it opened one; a keep-alive
// client has none; the connections open both ways at the latest look are
// the source's Open.
func TestWatcherCountsNewConnections(t *testing.T) {
	w, sc := newScripted(8080)
	keep := inbound(1, "10.0.0.1:5000", 8080, 10, time.Second) // keep-alive only
	n0 := inbound(2, "10.0.0.2:5000", 8080, 10, time.Second)   // the node's flow from before
	sc.conns(keep, n0)
	sample(t, w, 0)

	var n1, n2, n3 Conn
	grow := func(c *Conn, lastRecv time.Duration) {
		*c = inbound(c.Cookie, c.Remote.String(), 8080, c.Info.BytesReceived+100, lastRecv)
	}
	for k := 1; k <= 7; k++ {
		grow(&keep, 0)
		conns := []Conn{keep}
		switch k {
		case 1:
			// A new connection with no data yet (at the sample's
			// time) beside bytes on the old flow: one arrival, and
			// the look saw a new connection.
			grow(&n0, 40*time.Millisecond)
			n1 = inbound(3, "10.0.0.2:5001", 8080, 0, 0)
		case 2, 6:
			grow(&n0, 0) // bytes on a known flow only
		case 3:
			grow(&n0, 0)
			grow(&n1, 0)
		case 4:
			// A connection opened and closed by the pod between two
			// samples, seen in TIME_WAIT, is new.
			grow(&n0, 10*time.Millisecond)
			n2 = Conn{Cookie: 4, State: TimeWait, Local: n0.Local, Remote: ap("10.0.0.2:5002")}
		case 7:
			// A new connection with data 20 ms ago; the flow's bytes
			// came earlier; n1's peer closed (its FIN is no data).
			grow(&n0, 50*time.Millisecond)
			n1 = n1.in(CloseWait)
			n1.Info = info(n1.Info.BytesReceived+1, time.Second)
			n3 = inbound(5, "10.0.0.2:5003", 8080, 200, 20*time.Millisecond)
		}
		conns = append(conns, n0, n1)
		if k >= 4 {
			conns = append(conns, n2) // TIME_WAIT lingers, never new again
		}
		if k >= 7 {
			conns = append(conns, n3)
		}
		sc.conns(conns...)
		sample(t, w, k)
	}

	ms := time.Millisecond
	check(t, w.Summary(at(8)), api.Traffic{
		Watched: 8 * tick,
		Every:   tick,
		Sources: []api.SourceTraffic{
			// Looks 1 to 7, none new: no entry in NewConns.
			withOpen(withGaps(withLooks(withGap(src("10.0.0.1", 8080, 7, 600*ms, 0, 100*ms, 200*ms, 300*ms, 400*ms, 500*ms, 600*ms),
				100*ms), api.Looks{N: 6}, api.Looks{N: 6}), map[int]api.GapBin{0: {N: 6, Sum: 6}}), 1),
			// Looks 1, 2, 3, 4, 6 and 7; n0 and n3 are open both
			// ways (n1 is in CLOSE_WAIT, n2 in TIME_WAIT).
			withOpen(withGaps(withLooks(withGap(src("10.0.0.2", 8080, 6, 600*ms, 20*ms, 100*ms, 300*ms, 400*ms, 500*ms, 600*ms),
				200*ms), api.Looks{N: 6, Pauses: 1}, api.Looks{N: 6, Pauses: 1}), map[int]api.GapBin{0: {N: 4, Sum: 4}, 1: {N: 1, Sum: 2}}), 2),
		},
		// Looks 1, 4 and 7 saw a new connection from the node, each at
		// the look's arrival: the latest receipt of any of its
		// connections.
		NewConns: []api.SourceTraffic{
			withGaps(withLooks(withGap(src("10.0.0.2", 8080, 3, 600*ms, 20*ms, 300*ms, 600*ms),
				300*ms), api.Looks{N: 6, Pauses: 2}, api.Looks{N: 6, Pauses: 2}), map[int]api.GapBin{1: {N: 2, Sum: 6}}),
		},
		ConnsCounted: true,
	})
}
