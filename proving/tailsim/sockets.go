package tailsim

import (
	"math/rand/v2"
	"net/netip"
	"slices"
	"time"

	"draingate.dev/draingate/internal/traffic"
)

// sockets plays one pod's kernel for the agent's socket summary: the
// connections the load balancer's nodes hold or open to the pod, as a
// netlink dump and the TCP PassiveOpens counter show them at a look. The
// agent's own code (internal/prestop's history, internal/traffic's
// Watcher) reads them, so what the gate gets has been through its looks,
// windows, TIME_WAIT and tcp_info as a pod's would.
type sockets struct {
	rng  *rand.Rand
	pod  netip.AddrPort
	keep int
	// events are the nodes' requests and health checks in time order;
	// next is the first not yet played.
	events []event
	next   int

	live   []*conn
	byNode map[netip.Addr][]*conn // each node's keep-alive connections (nil: none open)
	cookie uint64
	opens  uint64
}

// event is one request (or health check) a node sends the pod at at.
type event struct {
	at    time.Time
	from  netip.Addr
	check bool
}

// conn is one socket of the pod's, from its accept until it is gone.
type conn struct {
	cookie   uint64
	remote   netip.AddrPort
	bytes    uint64
	segs     uint32
	last     time.Time
	closedAt time.Time // the pod closed it after an answer: TIME_WAIT from then (zero: open)
	goneAt   time.Time // no longer in a dump (zero: open)
}

const (
	// requestBytes is a request's size; checkBytes a health check's.
	requestBytes, checkBytes = 320, 110
	// closeEvery: the pod's server closes a keep-alive connection after
	// an answer about once in this many requests (its idle and request
	// limits, an error), and the node opens another.
	closeEvery = 100
	// timeWait is how long the pod's side of a connection it closed
	// stays in the dump (Linux's TCP_TIMEWAIT_LEN).
	timeWait = 60 * time.Second
	// answerTime is how long after a request its answer went and the
	// pod closed the connection (when it does); checkTime how long after a
	// health check the node's close took the pod's socket away.
	answerTime, checkTime = 2 * time.Millisecond, 3 * time.Millisecond
)

// newSockets is the pod's kernel with the nodes' streams and health checks
// as events: keep keep-alive connections per node, or with keep 0 a new
// connection per request that the pod closes after its answer (an NLB's
// clients sending "Connection: close").
func newSockets(rng *rand.Rand, keep int, streams []nodeStream, checks []event) *sockets {
	k := &sockets{rng: rng, pod: netip.MustParseAddrPort("10.1.0.10:8080"), keep: keep, byNode: map[netip.Addr][]*conn{}}
	for _, st := range streams {
		a := netip.MustParseAddr(st.addr)
		for _, t := range st.times {
			k.events = append(k.events, event{at: t, from: a})
		}
	}
	k.events = append(k.events, checks...)
	slices.SortFunc(k.events, func(a, b event) int { return a.at.Compare(b.at) })
	return k
}

// nodeStream is one node's requests to the pod, as sent.
type nodeStream struct {
	addr  string
	times []time.Time
}

// accept is a new connection from a at t.
func (k *sockets) accept(a netip.Addr, t time.Time) *conn {
	k.cookie++
	k.opens++
	c := &conn{cookie: k.cookie, remote: netip.AddrPortFrom(a, uint16(1024+k.rng.IntN(60000))), last: t}
	k.live = append(k.live, c)
	return c
}

// play applies the events up to now.
func (k *sockets) play(now time.Time) {
	for ; k.next < len(k.events) && !k.events[k.next].at.After(now); k.next++ {
		e := k.events[k.next]
		switch {
		case e.check:
			// A health check: its own connection, closed by the node
			// once answered.
			c := k.accept(e.from, e.at)
			c.bytes, c.segs, c.goneAt = checkBytes, 1, e.at.Add(checkTime)
		case k.keep == 0:
			c := k.accept(e.from, e.at)
			c.bytes, c.segs = requestBytes, 1
			c.closedAt = e.at.Add(answerTime)
			c.goneAt = c.closedAt.Add(timeWait)
		default:
			held := k.byNode[e.from]
			if held == nil {
				held = make([]*conn, k.keep)
				k.byNode[e.from] = held
			}
			i := k.rng.IntN(k.keep)
			if held[i] == nil {
				held[i] = k.accept(e.from, e.at)
			}
			c := held[i]
			c.bytes += requestBytes
			c.segs++
			c.last = e.at
			if k.rng.IntN(closeEvery) == 0 {
				c.closedAt = e.at.Add(answerTime)
				c.goneAt = c.closedAt.Add(timeWait)
				held[i] = nil
			}
		}
	}
}

// read is the dump and counter at now.
func (k *sockets) read(now time.Time) traffic.Snapshot {
	k.play(now)
	snap := traffic.Snapshot{Listening: []uint16{k.pod.Port()}, PassiveOpens: k.opens}
	live := k.live[:0]
	for _, c := range k.live {
		if !c.goneAt.IsZero() && !now.Before(c.goneAt) {
			continue
		}
		live = append(live, c)
		tc := traffic.Conn{Cookie: c.cookie, State: traffic.Established, Local: k.pod, Remote: c.remote}
		if !c.closedAt.IsZero() && !now.Before(c.closedAt) {
			// TIME_WAIT keeps no tcp_info.
			tc.State = traffic.TimeWait
		} else {
			tc.Info = traffic.Info{
				BytesReceived: c.bytes, HasBytesReceived: true,
				DataSegsIn: c.segs, HasDataSegsIn: true,
				SegsIn: 2*c.segs + 1, HasSegsIn: true,
				LastDataRecv: now.Sub(c.last), HasLastDataRecv: true,
			}
		}
		snap.Conns = append(snap.Conns, tc)
	}
	clear(k.live[len(live):])
	k.live = live
	return snap
}
