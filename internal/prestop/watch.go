package prestop

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"runtime/debug"
	"strings"
	"sync"
	"time"

	"draingate.dev/draingate/api"
	"draingate.dev/draingate/internal/traffic"
)

// The watch command is the pod's traffic watcher, a native sidecar the
// webhook injects beside the installer: it watches the pod's inbound TCP
// traffic from the pod's start, so that the preStop agent's first ask
// already carries minutes of each source's arrivals instead of the
// seconds since the hook began. A load balancer node that stops sending
// within seconds of the hook can only be told apart from one pausing by a
// watch several times its quiet bound (docs/evidence.md, the span rule);
// only a watch that began before the drain is that long.
const (
	// DefaultHistory is the watch's window: the history a drain gets is
	// between half of it and all of it (see history).
	DefaultHistory = 4 * time.Minute
	// minHistory bounds --history from below: half of it must still be
	// a watch several times a tail long.
	minHistory = 20 * time.Second
	// askWatcherTimeout bounds one ask of the watcher: it answers from
	// memory, in microseconds, so a slow answer means it is gone (and the
	// ask's time comes out of the agent's deadline).
	askWatcherTimeout = 200 * time.Millisecond
	// thawAfter is how long a frozen history waits for another ask before
	// it turns again: a drain's agent asks at least every poll-wait (20 s),
	// and anything else that asked once (a hook run by a restart, not a
	// drain; a person's curl) must not freeze it for the pod's life.
	thawAfter = time.Minute
	// maxWatchedSockets is the most sockets a look feeds the watches: past
	// it the look counts as failed (the agents then watch on their own),
	// so that the watcher's memory stays within its limit whatever the
	// pod holds open.
	maxWatchedSockets = 16384
)

// history is a watch from the pod's start kept to a window: two watchers
// run side by side, the younger started half a window after the older,
// and every half window the older is dropped and a new younger one
// started. The older one, whose history is between half a window and a
// window long, is what a drain gets; the first ask freezes it (no more
// turns), so that the drain's evidence keeps growing from there. A window,
// not the whole life of the pod: a source's shape over the last minutes is
// what tells about its next seconds, and a long-lived pod's hours hold
// lulls, busy hours and more sources than a summary carries. Both watchers
// take the same snapshot each look (one read of the kernel).
type history struct {
	read   func() (traffic.Snapshot, error)
	window time.Duration

	// snap and snapErr are the look's read, for both watchers' Sample;
	// only the sampling goroutine touches them.
	snap    traffic.Snapshot
	snapErr error

	mu      sync.Mutex
	older   *traffic.Watcher
	younger *traffic.Watcher // nil until half a window passed, and once frozen
	turned  time.Time        // when the younger one started (the older one before that)
	frozen  bool
	asked   time.Time // the latest ask, while frozen
}

func newHistory(read func() (traffic.Snapshot, error), window time.Duration) *history {
	h := &history{read: read, window: window}
	h.older = h.watcher()
	return h
}

// History is the watcher's history for a simulation of many drains
// (proving/tailsim): the looks, turns and summaries a pod's watcher
// serves, on snapshots the caller makes.
type History struct{ h *history }

// NewHistory is a History of window (a pod's is DefaultHistory) reading
// its snapshots from read.
func NewHistory(read func() (traffic.Snapshot, error), window time.Duration) *History {
	return &History{newHistory(read, window)}
}

// Sample is one look at now.
func (h *History) Sample(now time.Time) error { return h.h.sample(now) }

// Summary is what a drain's agent asking at now is given; the first ask
// freezes the history, as a pod's first drain ask does.
func (h *History) Summary(now time.Time) *api.Traffic { return h.h.summary(now) }

// watcher is a new Watcher sampling the look's shared read.
func (h *history) watcher() *traffic.Watcher {
	return traffic.NewWatcher(func() (traffic.Snapshot, error) { return h.snap, h.snapErr })
}

// sample takes one look at now: one read, fed to each watcher; every half
// window (until frozen) the older watcher is dropped and a younger one
// started. A watch a run of failed reads ended starts again, unless a
// drain froze it (the drain's agent then watches on its own).
func (h *history) sample(now time.Time) error {
	h.snap, h.snapErr = h.read()
	if h.snapErr == nil && len(h.snap.Conns) > maxWatchedSockets {
		h.snap, h.snapErr = traffic.Snapshot{}, fmt.Errorf("the pod holds %d sockets, more than the watcher watches (%d)", len(h.snap.Conns), maxWatchedSockets)
	}
	h.mu.Lock()
	older, younger := h.older, h.younger
	h.mu.Unlock()
	err := older.Sample(now)
	if younger != nil {
		younger.Sample(now)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.frozen && now.Sub(h.asked) > thawAfter {
		// Nobody asked for a while: not a drain, or a drain over.
		h.frozen = false
	}
	if h.frozen {
		return err
	}
	if h.turned.IsZero() {
		h.turned = now
	}
	switch {
	case h.older.Ended() != nil:
		h.older, h.younger, h.turned = h.watcher(), nil, now
	case h.younger != nil && h.younger.Ended() != nil:
		// Its baseline read failed: start it again at once, so that
		// the next turn does not hand on a watch that ended.
		h.younger = h.watcher()
	case now.Sub(h.turned) >= h.window/2:
		if h.younger != nil {
			h.older = h.younger
		}
		h.younger, h.turned = h.watcher(), now
	}
	return err
}

// safeSample is sample, with a panic (a bug, a kernel answer nobody
// foresaw) turned into a failed look: a sidecar that exits makes the pod
// not ready until it is restarted.
func (h *history) safeSample(now time.Time) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("a look panicked: %v", r)
			h.mu.Lock()
			if !h.frozen {
				h.older, h.younger, h.turned = h.watcher(), nil, now
			}
			h.mu.Unlock()
		}
	}()
	return h.sample(now)
}

// summary is the older watcher's summary at now, and freezes the history:
// the first ask comes from a drain's agent, and the drain's evidence is
// one watch from then on. nil while the watch has nothing recent to say.
func (h *history) summary(now time.Time) *api.Traffic {
	h.mu.Lock()
	if !h.frozen {
		h.frozen, h.younger = true, nil
	}
	h.asked = now
	w := h.older
	h.mu.Unlock()
	return w.Summary(now)
}

// watchCommand runs "watch": the history served on --socket until SIGTERM.
// Only a bad command line makes it exit early: a sidecar that exits is
// restarted, and the pod is not ready meanwhile, so whatever fails later
// is logged and the watcher waits for its end (the agents then watch on
// their own).
func watchCommand(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("watch", flag.ContinueOnError)
	fs.SetOutput(stderr)
	socket := fs.String("socket", "", "the unix socket to serve the history on (required; its directory must exist)")
	window := fs.Duration("history", DefaultHistory, "the watch's window: a drain gets between half of it and all of it")
	memLimit := fs.Int64("memory-limit", 0, "a soft limit on the watcher's memory, in bytes (the Go runtime's; the webhook sets three quarters of the container's limit); 0: none")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *memLimit > 0 {
		debug.SetMemoryLimit(*memLimit)
	}
	switch {
	case *socket == "" || fs.NArg() > 0:
		fmt.Fprintln(stderr, "draingate-prestop: watch takes --socket PATH and no arguments")
		return 2
	case *window < minHistory:
		fmt.Fprintf(stderr, "draingate-prestop: watch: --history %s is below %s\n", *window, minHistory)
		return 2
	}
	log := logger{stdout}
	if err := serveHistory(ctx, traffic.NewReader().Read, *socket, *window, trafficInterval, log); err != nil {
		log.printf("watch: %s; the agents will watch on their own", api.OneLine(err.Error()))
		<-ctx.Done()
	}
	return 0
}

// serveHistory watches with read every interval and serves the history on
// the unix socket at path until ctx ends; the socket is removed on the way
// out. It returns early only when it cannot serve. Failed reads are
// logged (the first of a run) and looked past: the history starts again
// once reads succeed.
func serveHistory(ctx context.Context, read func() (traffic.Snapshot, error), path string, window, interval time.Duration, log logger) error {
	// A socket left by a previous run of this container (a restart)
	// would refuse the bind.
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	l, err := net.Listen("unix", path)
	if err != nil {
		return err
	}
	defer os.Remove(path)
	// The gated containers run as their own users: any of them may ask.
	if err := os.Chmod(path, 0o666); err != nil {
		l.Close()
		return err
	}
	h := newHistory(read, window)
	failing := false
	look := func(now time.Time) {
		err := h.safeSample(now)
		if err != nil && !failing {
			log.printf("a look at the pod's sockets failed (%s); looking on", api.OneLine(err.Error()))
		}
		failing = err != nil
	}
	look(time.Now())

	var frozenOnce sync.Once
	answer := func(c net.Conn) {
		defer c.Close()
		c.SetDeadline(time.Now().Add(time.Second))
		line, err := bufio.NewReader(io.LimitReader(c, 64)).ReadString('\n')
		var reply watchReply
		switch {
		case err != nil || strings.TrimSpace(line) != watchAsk:
			reply.Error = fmt.Sprintf("ask %q, not %q", strings.TrimSpace(line), watchAsk)
		default:
			t := h.summary(time.Now())
			frozenOnce.Do(func() {
				log.printf("a drain began: its agent gets this watch's history from here on (%s of it)", watchedFor(t))
			})
			if reply.Traffic = t; t == nil {
				reply.Error = "no recent look at the pod's sockets"
			}
		}
		json.NewEncoder(c).Encode(reply)
	}
	served := make(chan error, 1)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				served <- err
				return
			}
			go answer(c)
		}
	}()
	defer l.Close()
	log.printf("watching inbound TCP from the pod's start, sampling every %s, a window of %s, on %s", interval, window, path)

	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case err := <-served:
			return err
		case now := <-tick.C:
			look(now)
		}
	}
}

func watchedFor(t *api.Traffic) string {
	if t == nil {
		return "none recent"
	}
	return t.Watched.Round(100 * time.Millisecond).String()
}

// watchAsk is the one line an agent writes to the watcher's socket; the
// watcher answers one watchReply in JSON and closes. No HTTP: the agent
// stays small (net/http would double it).
const watchAsk = "traffic"

type watchReply struct {
	Traffic *api.Traffic `json:"traffic,omitempty"`
	Error   string       `json:"error,omitempty"`
}

// askWatcher returns a function that asks the pod's watcher at the unix
// socket path for its history, within askWatcherTimeout.
func askWatcher(path string) func() (*api.Traffic, error) {
	return func() (*api.Traffic, error) {
		c, err := net.DialTimeout("unix", path, askWatcherTimeout)
		if err != nil {
			return nil, err
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(askWatcherTimeout))
		if _, err := io.WriteString(c, watchAsk+"\n"); err != nil {
			return nil, err
		}
		var r watchReply
		if err := json.NewDecoder(io.LimitReader(c, 1<<20)).Decode(&r); err != nil {
			return nil, fmt.Errorf("reading its answer: %w", err)
		}
		switch {
		case r.Error != "":
			return nil, errors.New(api.OneLine(r.Error))
		case r.Traffic == nil:
			return nil, errors.New("an empty answer")
		}
		return r.Traffic, nil
	}
}

// withHistory is the agent's summary when the pod has a watcher: the
// watcher's history while it answers, with the gateways the agent found
// (gateways, nil when the agent's own watch is off), and from the first
// failed ask on, the agent's own watch (own, nil when it is off) for the
// rest of the drain. Never back: the two watches started at different
// times, and the drain's evidence is one of them throughout. Each switch
// costs one log line.
func withHistory(ask func() (*api.Traffic, error), own func() *api.Traffic, gateways []netip.Addr, log logger) func() *api.Traffic {
	var mu sync.Mutex
	asked, failed := false, false
	return func() *api.Traffic {
		mu.Lock()
		defer mu.Unlock()
		if !failed {
			t, err := ask()
			if err == nil {
				if !asked {
					asked = true
					log.printf("traffic evidence: the pod's watcher has watched for %s; sending its history", watchedFor(t))
				}
				t.Gateways = gateways
				return t
			}
			failed = true
			if own == nil {
				log.printf("traffic evidence: the pod's watcher did not answer (%s); no evidence sent, the server relies on route tails alone", api.OneLine(err.Error()))
			} else {
				log.printf("traffic evidence: the pod's watcher did not answer (%s); sending this hook's own watch instead", api.OneLine(err.Error()))
			}
		}
		if own == nil {
			return nil
		}
		return own()
	}
}
