package traffic

import (
	"cmp"
	"net/netip"
	"slices"
	"sync"
	"time"

	"draingate.dev/draingate/api"
)

const (
	// maxKeys bounds how many sources (remote address, local port) a
	// Watcher keeps apart; a new source past it counts in Unknown (the
	// summary is then at its bound of sources, and the server weighs
	// Unknown as one more source on every route).
	maxKeys = 4096
	// maxArrivals is where a count stops growing: ParseTraffic takes no
	// more, and no watch of minutes comes near it.
	maxArrivals = 1 << 30
	// maxAge is the longest duration a summary carries (ParseTraffic's
	// bound): a watch longer than a week is summarised as a week.
	maxAge = 7 * 24 * time.Hour
	// lastRecvSlack is how far tcpi_last_data_recv must move forward to
	// count as new data when nothing else tells (kernels before 4.1): the
	// value is in jiffies (up to 10 ms each) and read a moment after the
	// sample's time, so smaller moves are noise.
	lastRecvSlack = 25 * time.Millisecond
	// maxFailures failed reads in a row end a watch; staleAfter is how old
	// the latest good sample may be for Summary to still answer.
	maxFailures = 20
	staleAfter  = time.Second
)

// Watcher turns successive snapshots into arrivals per source (see the
// package doc for the rules). One goroutine calls Sample; Summary may be
// called from any goroutine at any time.
type Watcher struct {
	read func() (Snapshot, error)

	mu       sync.Mutex
	err      error // the failed read that ended the watch
	failures int   // failed reads in a row
	started  bool
	looks    int       // successful samples, the baseline's included
	start    time.Time // the baseline sample's time
	last     time.Time // the latest successful sample's time
	ports    portSet   // every port seen listening
	listen   []uint16  // the ports listening at the latest sample
	conns    map[uint64]seen

	passive    uint64
	passiveOK  bool
	passiveErr error

	keys    map[source]*record
	unknown record
	// newConns is, per source of keys, the looks that saw a new inbound
	// connection from it (api.Traffic.NewConns): a part of its arrivals,
	// so bounded by keys.
	newConns map[source]*record
}

// source is whom an arrival is from: the remote address and the pod's own
// port it reached.
type source struct {
	addr netip.Addr
	port uint16
}

// seen is what a Watcher remembers of a connection between two samples.
type seen struct {
	inbound  bool
	src      source
	state    State
	info     Info
	lastRecv time.Time // the latest data receipt tcpi_last_data_recv implied
}

// record is one source's arrivals.
type record struct {
	arrivals int
	first    time.Time
	latest   []time.Time // ascending, the last api.MaxTrafficAges
	// maxGap is the longest pause between two consecutive arrivals seen
	// (api.SourceTraffic.MaxGap), which keeps a bursty source's pauses in
	// the server's quiet bound.
	maxGap time.Duration
	// For a source's own record (not Unknown): the looks that found its
	// arrivals, the first's and the latest api.MaxTrafficAges (ascending,
	// one per arrival in latest), and the runs of looks between them that
	// found nothing (api.SourceTraffic.Looks).
	firstLook int
	looks     []int
	pauses    int
	// gaps bins the gaps between consecutive looks that found its
	// arrivals, in looks (api.SourceTraffic.Gaps); gapped says one was.
	gaps   [api.GapBins]api.GapBin
	gapped bool
}

// NewWatcher returns a Watcher taking its snapshots from read (Read, or a
// test's script).
func NewWatcher(read func() (Snapshot, error)) *Watcher {
	return &Watcher{read: read, conns: map[uint64]seen{}, keys: map[source]*record{}, newConns: map[source]*record{}}
}

// Sample takes one snapshot and counts what arrived since the previous
// one; now should be the time just before the call. The first successful
// sample is the baseline.
//
// A failed read loses nothing by itself: the next good sample still sees
// every connection that is new or grew (cookies and byte counters persist)
// and the passive opens in between (the counter does). So a failed read
// ends the watch only when it is the baseline's, or the maxFailures-th in
// a row; Sample then returns that error from then on without reading
// (Ended reports it) and Summary returns nil. Until then Summary goes on,
// but only while the latest good sample is recent (staleAfter): quiet that
// nobody watched is never reported.
func (w *Watcher) Sample(now time.Time) error {
	w.mu.Lock()
	err := w.err
	w.mu.Unlock()
	if err != nil {
		return err
	}
	// The read runs unlocked so that a Summary never waits on the kernel;
	// there is only one sampling goroutine, so nothing else changes the
	// state meanwhile.
	snap, err := w.read()
	w.mu.Lock()
	defer w.mu.Unlock()
	if err != nil {
		w.failures++
		if !w.started || w.failures >= maxFailures {
			w.err = err
		}
		return err
	}
	w.failures = 0
	w.apply(snap, now)
	return nil
}

// Ended reports the error that ended the watch, or nil while it goes on.
func (w *Watcher) Ended() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.err
}

// Listening is the ports listening at the latest successful sample.
func (w *Watcher) Listening() []uint16 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.listen)
}

// PassiveOpensErr is why the latest successful sample could not read the
// PassiveOpens counter (no unknown arrivals are counted without it), or nil.
func (w *Watcher) PassiveOpensErr() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.passiveErr
}

// arrival is one arrival found by a sample; newConn says it was a
// connection not seen before (or, merged, that one of the source's was).
type arrival struct {
	src     source
	at      time.Time
	newConn bool
}

// apply folds one successful snapshot into the watch: the ports listening,
// the connections and what arrived on them, the passive opens nobody saw,
// then each source's arrivals. The caller holds w.mu.
func (w *Watcher) apply(snap Snapshot, now time.Time) {
	if w.started && now.Before(w.last) {
		// Time never runs backwards between two samples; if a caller's
		// clock did, its sample counts as taken with the previous one.
		now = w.last
	}
	for _, p := range snap.Listening {
		if p != 0 {
			w.ports.add(p)
		}
	}
	w.listen = slices.Clone(snap.Listening)

	found, passiveSeen := w.track(snap.Conns, now)
	unseen := w.unseenOpens(snap, passiveSeen)

	if !w.started {
		w.started, w.start = true, now
	}
	w.last = now
	w.looks++

	w.count(onePerSource(found), unseen, now)
}

// track replaces the connections remembered with conns, and returns
// the arrivals they show (on connections new since the previous sample or
// that grew) and how many passive opens the new ones account for. At the
// baseline sample nothing has arrived: the connections are remembered, not
// counted.
func (w *Watcher) track(conns []Conn, now time.Time) ([]arrival, uint64) {
	isSelf, ends := localEnds(conns)
	next := make(map[uint64]seen, len(conns))
	var found []arrival
	passiveSeen := uint64(0) // passive opens this sample accounts for
	for _, c := range conns {
		remote := c.Remote.Addr().WithZone("").Unmap()
		if !remote.IsValid() || remote.IsUnspecified() || c.Remote.Port() == 0 || c.Local.Port() == 0 {
			// Not connected to anybody (a socket the kernel has
			// disconnected): nothing can arrive on it.
			continue
		}
		s := seen{src: source{remote, c.Local.Port()}, state: c.State, info: c.Info}
		if c.Info.HasLastDataRecv {
			s.lastRecv = now.Add(-c.Info.LastDataRecv)
		}
		prev, known := w.conns[c.Cookie]
		switch {
		case known:
			s.inbound = prev.inbound
			if !c.Info.HasLastDataRecv {
				s.lastRecv = prev.lastRecv
			} else if prev.lastRecv.After(s.lastRecv) {
				// Estimates jitter by a jiffy; keep the latest so that
				// jitter never looks like new data.
				s.lastRecv = prev.lastRecv
			}
			if !hasCounter(c.Info) {
				// A TIME_WAIT socket keeps no tcp_info: keep the
				// counters it had, to compare with if it ever has some.
				s.info = prev.info
			}
			if s.inbound {
				if at, ok := w.grew(prev, c, now); ok {
					found = append(found, arrival{s.src, at, false})
				} else if closedAfterUse(prev, c, now) {
					found = append(found, arrival{s.src, now, false})
				}
			}
		default:
			server := w.ports.has(c.Local.Port())
			s.inbound = server && !isSelf(remote)
			if !w.started {
				break // the baseline: remembered, not counted
			}
			if server {
				passiveSeen++
			} else if isSelf(remote) && w.ports.has(c.Remote.Port()) &&
				!ends[[2]netip.AddrPort{c.Remote, c.Local}] {
				// The client end of an in-pod connection whose server
				// end is gone: its passive open happened, unseen.
				passiveSeen++
			}
			if s.inbound {
				// A cookie not seen before is a connection that
				// opened since the previous sample, whatever its
				// state (TIME_WAIT included): the kernel never
				// reuses one.
				found = append(found, arrival{s.src, w.arrivedNew(c, now), true})
			}
		}
		next[c.Cookie] = s
	}
	w.conns = next
	return found, passiveSeen
}

// localEnds tells the pod's own addresses, those its sockets are bound to
// (a peer at one of them, or at a loopback address, is the pod talking to
// itself), and lists every connection's (local, remote) ends, which lets a
// client end find its server end.
func localEnds(conns []Conn) (isSelf func(netip.Addr) bool, ends map[[2]netip.AddrPort]bool) {
	self := map[netip.Addr]bool{}
	ends = map[[2]netip.AddrPort]bool{}
	for _, c := range conns {
		if a := c.Local.Addr().WithZone("").Unmap(); a.IsValid() && !a.IsUnspecified() {
			self[a] = true
		}
		ends[[2]netip.AddrPort{c.Local, c.Remote}] = true
	}
	return func(a netip.Addr) bool { return a.IsLoopback() || self[a] }, ends
}

// unseenOpens is how many connections opened and vanished between the
// previous sample and snap, which show only in the PassiveOpens counter: its
// growth past the passiveSeen opens the new connections account for. It
// remembers the counter for the next sample.
func (w *Watcher) unseenOpens(snap Snapshot, passiveSeen uint64) uint64 {
	var unseen uint64
	ok := snap.PassiveOpensErr == nil
	if w.started && ok && w.passiveOK && snap.PassiveOpens > w.passive && snap.PassiveOpens-w.passive > passiveSeen {
		unseen = snap.PassiveOpens - w.passive - passiveSeen
	}
	w.passive, w.passiveOK, w.passiveErr = snap.PassiveOpens, ok, snap.PassiveOpensErr
	return unseen
}

// onePerSource keeps one arrival per source, the latest, in time order: the
// server fits the share of samples that found data (api.Traffic.Every),
// which several connections of one source (a load balancer node's) must not
// inflate. The arrival kept is a new connection's when any of the source's
// was: the look saw one, and its time is the source's latest receipt, so
// that the looks with new connections are a subset of the source's
// arrivals, at the same times. It reuses found's array.
func onePerSource(found []arrival) []arrival {
	slices.SortStableFunc(found, func(a, b arrival) int { return a.at.Compare(b.at) })
	latest := make(map[source]int, len(found))
	newConn := map[source]bool{}
	for i, a := range found {
		latest[a.src] = i
		if a.newConn {
			newConn[a.src] = true
		}
	}
	merged := found[:0]
	for i, a := range found {
		if latest[a.src] == i {
			a.newConn = newConn[a.src]
			merged = append(merged, a)
		}
	}
	return merged
}

// count adds a sample's arrivals to their sources' records (a new
// connection's to its source's newConns too), a source past maxKeys's to
// Unknown, and the unseen passive opens to Unknown at now.
func (w *Watcher) count(found []arrival, unseen uint64, now time.Time) {
	for _, a := range found {
		r := w.keys[a.src]
		if r == nil {
			if len(w.keys) >= maxKeys {
				w.unknown.add(a.at, 1)
				continue
			}
			r = &record{}
			w.keys[a.src] = r
		}
		r.add(a.at, 1)
		r.looked(w.looks - 1)
		if a.newConn {
			n := w.newConns[a.src]
			if n == nil {
				n = &record{}
				w.newConns[a.src] = n
			}
			n.add(a.at, 1)
			n.looked(w.looks - 1)
		}
	}
	if unseen > 0 {
		w.unknown.add(now, int(min(unseen, maxArrivals)))
	}
}

// hasCounter reports whether tcp_info told anything about received data.
func hasCounter(in Info) bool {
	return in.HasBytesReceived || in.HasDataSegsIn || in.HasSegsIn || in.HasLastDataRecv
}

// grew reports whether the known connection prev, now c, received data since
// the previous sample, and when.
func (w *Watcher) grew(prev seen, c Conn, now time.Time) (time.Time, bool) {
	in, was := c.Info, prev.info
	var more bool
	switch {
	case in.HasBytesReceived && was.HasBytesReceived:
		delta := in.BytesReceived - was.BytesReceived
		if in.BytesReceived < was.BytesReceived {
			delta = 0
		}
		if c.State.peerClosed() && !prev.state.peerClosed() && delta > 0 {
			delta-- // the FIN's sequence number, not data
		}
		more = delta > 0
	case in.HasDataSegsIn && was.HasDataSegsIn:
		more = in.DataSegsIn != was.DataSegsIn
	case in.HasSegsIn && was.HasSegsIn:
		more = in.SegsIn != was.SegsIn
	case in.HasLastDataRecv && !prev.lastRecv.IsZero():
		more = now.Add(-in.LastDataRecv).Sub(prev.lastRecv) > lastRecvSlack
	case hasCounter(in) && !hasCounter(was) && prev.state != TimeWait:
		// Counters appearing where there were none (a kernel changing
		// its mind) cannot be compared: count, as the safe side.
		return now, true
	}
	if !more {
		return time.Time{}, false
	}
	return w.when(in, now), true
}

// usedWithin is how recently a connection the pod closed must have
// received data for its close to count as an arrival (closedAfterUse).
const usedWithin = 5 * time.Second

// closedAfterUse reports whether the known connection prev, now c, was
// closed by the pod since the previous sample while in use: it entered
// TIME_WAIT (which keeps no tcp_info, so whether data came before the close
// is not known) having received data within usedWithin. A server closes a
// connection after answering on it (a request asking for the close, a
// limit of requests per connection, such as Apache's 100), and that
// request is then counted at the sample's time, the latest it can have
// arrived: missing it would make its source's pace look slower by a gap
// and its last request earlier than it was. A connection idle for longer
// before the close is taken for one closed by an idle timeout (seconds at
// least: Node's 5s, nginx's 75s): nothing arrived.
func closedAfterUse(prev seen, c Conn, now time.Time) bool {
	return c.State == TimeWait && prev.state != TimeWait && !hasCounter(c.Info) &&
		!prev.lastRecv.IsZero() && now.Sub(prev.lastRecv) <= usedWithin
}

// arrivedNew is when the new connection c arrived: its data's time when it
// has received some, else the sample's time.
func (w *Watcher) arrivedNew(c Conn, now time.Time) time.Time {
	in := c.Info
	var data bool
	switch {
	case in.HasBytesReceived:
		fin := uint64(0)
		if c.State.peerClosed() {
			fin = 1
		}
		data = in.BytesReceived > fin
	case in.HasDataSegsIn:
		data = in.DataSegsIn > 0
	}
	// Without either counter (segs_in counts the handshake too) nothing
	// tells data from none: the sample's time, the latest possible.
	if !data {
		return now
	}
	return w.when(in, now)
}

// when is the time of the data tcp_info reports, clamped into the interval
// since the previous sample: what arrived before it was counted then (a
// jiffy's rounding can put it a little earlier), nothing arrives after now.
func (w *Watcher) when(in Info, now time.Time) time.Time {
	if !in.HasLastDataRecv || !now.After(w.last) {
		return now
	}
	at := now.Add(-in.LastDataRecv)
	if !at.After(w.last) {
		return w.last.Add(time.Nanosecond)
	}
	if at.After(now) {
		return now
	}
	return at
}

// add counts n arrivals at t.
func (r *record) add(t time.Time, n int) {
	if r.arrivals == 0 || t.Before(r.first) {
		r.first = t
	}
	r.arrivals = min(r.arrivals+n, maxArrivals)
	for range min(n, api.MaxTrafficAges) {
		i, _ := slices.BinarySearchFunc(r.latest, t, func(e, t time.Time) int {
			// Equal times go after the ones already kept.
			if e.After(t) {
				return 1
			}
			return -1
		})
		r.latest = slices.Insert(r.latest, i, t)
		// The pauses on either side of the new arrival: splitting a pause
		// seen before leaves maxGap as it was, which can only make the
		// server's bounds longer.
		if i > 0 {
			r.maxGap = max(r.maxGap, t.Sub(r.latest[i-1]))
		}
		if i+1 < len(r.latest) {
			r.maxGap = max(r.maxGap, r.latest[i+1].Sub(t))
		}
		if len(r.latest) > api.MaxTrafficAges {
			r.latest = r.latest[1:]
		}
	}
	// Reslicing from the front never frees; copy now and then so that a
	// long watch keeps only what it uses.
	if cap(r.latest) > 4*api.MaxTrafficAges {
		r.latest = slices.Clone(r.latest)
	}
}

// looked notes that look i (counted from the baseline's, 0) found an
// arrival from the source; each look finds at most one.
func (r *record) looked(i int) {
	if n := len(r.looks); n == 0 {
		r.firstLook = i
	} else {
		g := i - r.looks[n-1]
		if g > 1 {
			r.pauses++
		}
		b := &r.gaps[api.GapBinOf(g)]
		b.N, b.Sum, r.gapped = b.N+1, min(b.Sum+g, maxArrivals), true
	}
	r.looks = append(r.looks, i)
	if len(r.looks) > api.MaxTrafficAges {
		r.looks = r.looks[1:]
	}
	if cap(r.looks) > 4*api.MaxTrafficAges {
		r.looks = slices.Clone(r.looks)
	}
}

// lookCounts is what r's looks say (api.SourceTraffic.Looks and
// RecentLooks); zero for a record without looks (Unknown).
func (r *record) lookCounts() (all, recent api.Looks) {
	n := len(r.looks)
	if n == 0 {
		return
	}
	all = api.Looks{N: r.looks[n-1] - r.firstLook, Pauses: r.pauses}
	recent.N = r.looks[n-1] - r.looks[0]
	for i := 1; i < n; i++ {
		if r.looks[i] > r.looks[i-1]+1 {
			recent.Pauses++
		}
	}
	return all, recent
}

// merge adds o's arrivals to r.
func (r *record) merge(o *record) {
	if o.arrivals == 0 {
		return
	}
	if r.arrivals == 0 || o.first.Before(r.first) {
		r.first = o.first
	}
	r.arrivals = min(r.arrivals+o.arrivals, maxArrivals)
	all := append(slices.Clone(r.latest), o.latest...)
	slices.SortStableFunc(all, func(a, b time.Time) int { return a.Compare(b) })
	// Merged streams pause less than either alone; the longer of the two
	// kept pauses stays, which only lengthens bounds.
	r.maxGap = max(r.maxGap, o.maxGap)
	r.latest = all[max(0, len(all)-api.MaxTrafficAges):]
}

func (r *record) lastAt() time.Time {
	if len(r.latest) == 0 {
		return time.Time{}
	}
	return r.latest[len(r.latest)-1]
}

// Summary is the evidence as of now: nil before the baseline sample and
// after a failed one. It always passes api.ParseTraffic once encoded.
func (w *Watcher) Summary(now time.Time) *api.Traffic {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.started || w.err != nil || now.Sub(w.last) > staleAfter {
		return nil
	}
	// Ages count from the latest look, not from now: the time since it
	// was not watched, and must not pass for silence (a sampler late by
	// up to staleAfter, a watcher throttled).
	age := func(t time.Time) time.Duration { return min(max(w.last.Sub(t), 0), maxAge) }
	// An ask may read its clock just before a sample takes the lock:
	// the watch still covers that sample's look (else Every, from the
	// looks, could exceed Watched, and the server refuse the summary).
	t := &api.Traffic{Watched: max(min(max(now.Sub(w.start), 0), maxAge), age(w.start))}
	if w.looks > 1 {
		t.Every = w.last.Sub(w.start) / time.Duration(w.looks-1)
	}
	// NewConns and Open travel beside Every (which a clock standing still
	// can leave zero); before a second look nothing is new.
	t.ConnsCounted = t.Every > 0

	srcs := make([]source, 0, len(w.keys))
	for s := range w.keys {
		srcs = append(srcs, s)
	}
	slices.SortFunc(srcs, func(a, b source) int {
		ra, rb := w.keys[a], w.keys[b]
		if c := cmp.Compare(rb.arrivals, ra.arrivals); c != 0 {
			return c
		}
		if c := rb.lastAt().Compare(ra.lastAt()); c != 0 {
			return c
		}
		if c := a.addr.Compare(b.addr); c != 0 {
			return c
		}
		return cmp.Compare(a.port, b.port)
	})
	summarise := func(r *record) api.SourceTraffic {
		st := api.SourceTraffic{Arrivals: r.arrivals, First: age(r.first)}
		st.MaxGap = min(r.maxGap, st.First)
		st.Looks, st.RecentLooks = r.lookCounts()
		if r.gapped {
			st.Gaps = slices.Clone(r.gaps[:])
		}
		for i := len(r.latest) - 1; i >= 0; i-- {
			st.Last = append(st.Last, age(r.latest[i]))
		}
		return st
	}
	open := map[source]int{}
	for _, c := range w.conns {
		if c.inbound && c.state == Established {
			open[c.src]++
		}
	}
	unknown := w.unknown
	unknown.latest = slices.Clone(unknown.latest)
	for i, s := range srcs {
		r := w.keys[s]
		if i >= api.MaxTrafficSources {
			// Left out of the summary but not of the evidence: with
			// the summary at its bound, the server weighs Unknown as
			// one more source on every route. Its new connections
			// count there as arrivals, the safe side.
			unknown.merge(r)
			continue
		}
		st := summarise(r)
		st.Addr, st.Port = s.addr, s.port
		if n := w.newConns[s]; t.ConnsCounted {
			st.Open = open[s]
			if n != nil {
				nt := summarise(n)
				nt.Addr, nt.Port = s.addr, s.port
				t.NewConns = append(t.NewConns, nt)
			}
		}
		t.Sources = append(t.Sources, st)
	}
	if unknown.arrivals > 0 {
		t.Unknown = summarise(&unknown)
	}
	return t
}

// portSet is a set of ports, a bit each: 8 KiB whatever the pod listens on.
type portSet [1 << 16 / 64]uint64

func (p *portSet) add(port uint16)      { p[port/64] |= 1 << (port % 64) }
func (p *portSet) has(port uint16) bool { return p[port/64]&(1<<(port%64)) != 0 }
