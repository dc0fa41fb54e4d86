package prestop

import (
	"context"
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"

	"draingate.dev/draingate/api"
	"draingate.dev/draingate/internal/traffic"
	"draingate.dev/draingate/proving/testutil"
)

// busy is a scripted read in which 10.0.0.1 opens a new connection to
// port 8080 at every look.
type busy struct{ scripted }

func (b *busy) read() (traffic.Snapshot, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.reads++
	if b.err != nil {
		return traffic.Snapshot{}, b.err
	}
	c := traffic.Conn{Cookie: uint64(b.reads), State: traffic.Established, Local: netip.MustParseAddrPort("10.244.0.7:8080"),
		Remote: netip.MustParseAddrPort("10.0.0.1:5000")}
	return traffic.Snapshot{Listening: []uint16{8080}, Conns: []traffic.Conn{c}}, nil
}

// The history a drain gets is the older of two watchers, between half a
// window and a window long, and from the drain's first ask on it keeps
// growing.
func TestHistoryKeepsAWindowAndFreezesAtTheDrain(t *testing.T) {
	const window, look = 20 * time.Second, 100 * time.Millisecond
	b := &busy{}
	h := newHistory(b.read, window)
	t0 := time.Now()
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	run := func(from, to time.Duration) {
		for d := from; d < to; d += look {
			if err := h.sample(at(d)); err != nil {
				t.Fatal(err)
			}
		}
	}
	run(0, 35*time.Second)
	if got := b.count(); got != 350 {
		t.Fatalf("%d reads for 350 looks, want one per look whichever watchers run", got)
	}
	// Turns at 10 s (a younger one starts, its baseline the next look),
	// 20 s (it becomes the older, another starts) and 30 s: the older one's
	// baseline was at 20.1 s, and each look since found an arrival.
	s := h.summary(at(35*time.Second - look))
	if s == nil || s.Watched < window/2 || s.Watched > window {
		t.Fatalf("history at 35 s: %+v, want a watch of 10-20 s", s)
	}
	if s.Watched != 15*time.Second-2*look || len(s.Sources) != 1 || s.Sources[0].Arrivals != 148 {
		t.Errorf("history at 35 s: watched %s, sources %+v; want the watcher started at 20 s", s.Watched, s.Sources)
	}
	// Frozen: no more turns, however long the drain.
	run(35*time.Second, 60*time.Second)
	s = h.summary(at(60*time.Second - look))
	if s == nil || s.Watched != 40*time.Second-2*look || s.Sources[0].Arrivals != 398 {
		t.Errorf("history at 60 s, frozen at 35 s: %+v, want the same watcher, 40 s long", s)
	}
}

// A run of failed reads ends a watch; the history then starts again, while
// no drain froze it.
func TestHistoryStartsAgainAfterFailedReads(t *testing.T) {
	b := &busy{}
	h := newHistory(b.read, time.Minute)
	t0 := time.Now()
	for i := range 100 {
		h.sample(t0.Add(time.Duration(i) * 100 * time.Millisecond))
	}
	b.set(func(s *scripted) { s.err = errors.New("sock_diag refused") })
	for i := 100; i < 130; i++ {
		h.sample(t0.Add(time.Duration(i) * 100 * time.Millisecond))
	}
	b.set(func(s *scripted) { s.err = nil })
	for i := 130; i < 140; i++ {
		h.sample(t0.Add(time.Duration(i) * 100 * time.Millisecond))
	}
	s := h.summary(t0.Add(139 * 100 * time.Millisecond))
	if s == nil || s.Watched >= 10*time.Second {
		t.Errorf("history after 30 failed reads: %+v, want a new watch since the reads came back", s)
	}
}

// The agent sends the watcher's history while it answers; once it does
// not, the agent's own watch for the rest of the drain, never back.
func TestAgentSendsTheWatchersHistory(t *testing.T) {
	dir, err := os.MkdirTemp("", "dgw")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, api.WatchSocket)
	var wlog, alog testutil.SyncBuffer
	b := &busy{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- serveHistory(ctx, b.read, sock, time.Minute, 10*time.Millisecond, logger{&wlog}) }()
	t.Cleanup(func() { cancel(); <-done })
	for b.count() < 50 {
		time.Sleep(10 * time.Millisecond)
	}
	if fi, err := os.Stat(sock); err != nil || fi.Mode().Perm() != 0o666 {
		t.Fatalf("socket: %v, %v; want mode 0666 for the app's user", fi, err)
	}

	own := &api.Traffic{Watched: time.Second}
	gw := []netip.Addr{netip.MustParseAddr("10.244.0.1")}
	summary := withHistory(askWatcher(sock), func() *api.Traffic { return own }, gw, logger{&alog})
	got := summary()
	if got == nil || got == own || got.Watched < 400*time.Millisecond || len(got.Sources) != 1 ||
		got.Sources[0].Addr != netip.MustParseAddr("10.0.0.1") || got.Sources[0].Arrivals < 40 || len(got.Gateways) != 1 {
		t.Fatalf("first summary: %+v, want the watcher's history with the agent's gateways", got)
	}
	mustContain(t, alog.String(), "traffic evidence: the pod's watcher has watched for ")
	mustContain(t, wlog.String(), "a drain began: its agent gets this watch's history from here on")
	if again := summary(); again == nil || again == own || again.Sources[0].Arrivals < got.Sources[0].Arrivals {
		t.Errorf("second summary: %+v, want the same watch, grown", again)
	}

	cancel()
	if err := <-done; err != nil {
		t.Fatalf("watcher ended with %v", err)
	}
	done <- nil // for the cleanup
	if _, err := os.Stat(sock); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("socket left behind: %v", err)
	}
	if got := summary(); got != own {
		t.Errorf("summary with the watcher gone: %+v, want the agent's own", got)
	}
	mustContain(t, alog.String(), "the pod's watcher did not answer")
	mustContain(t, alog.String(), "sending this hook's own watch instead")

	// A watcher back is not asked again: the drain's evidence stays one watch.
	ctx2, cancel2 := context.WithCancel(context.Background())
	done2 := make(chan error, 1)
	go func() { done2 <- serveHistory(ctx2, b.read, sock, time.Minute, 10*time.Millisecond, logger{&wlog}) }()
	defer func() { cancel2(); <-done2 }()
	for {
		if _, err := os.Stat(sock); err == nil {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if got := summary(); got != own {
		t.Errorf("summary with a watcher back: %+v, want the agent's own still", got)
	}
}

// A frozen history nobody asks for a minute turns again (the ask was not a
// drain's, or the drain is over), and a pod with more sockets than the
// watcher watches is not watched.
func TestHistoryThawsAndBoundsItsSockets(t *testing.T) {
	const window, look = 20 * time.Second, 100 * time.Millisecond
	b := &busy{}
	h := newHistory(b.read, window)
	t0 := time.Now()
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	for d := time.Duration(0); d < 15*time.Second; d += look {
		h.sample(at(d))
	}
	if s := h.summary(at(15 * time.Second)); s == nil {
		t.Fatal("no history")
	}
	for d := 15 * time.Second; d < 15*time.Second+thawAfter+window; d += look {
		h.sample(at(d))
	}
	if s := h.summary(at(15*time.Second + thawAfter + window)); s == nil || s.Watched > window {
		t.Errorf("history a window after the freeze's last ask: %+v, want at most %s", s, window)
	}

	many := &scripted{snap: traffic.Snapshot{Listening: []uint16{8080}, Conns: make([]traffic.Conn, maxWatchedSockets+1)}}
	h = newHistory(many.read, window)
	for d := time.Duration(0); d < time.Second; d += look {
		if err := h.sample(at(d)); err == nil {
			t.Fatal("a look with more sockets than the watcher watches did not fail")
		}
	}
	if s := h.summary(at(time.Second)); s != nil {
		t.Errorf("history of a pod past the socket bound: %+v", s)
	}
}
