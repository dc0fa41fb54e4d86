// Package evidencetest makes traffic for tests of the evidence and the
// gate: sources of known shapes (Poisson, round robin, bursts), what an
// agent reports of them at a given time, sampled and counted as it
// samples and counts, and the evidence that report makes.
package evidencetest

import (
	"math"
	"math/rand/v2"
	"net/netip"
	"slices"
	"time"

	"draingate.dev/draingate/api"
	"draingate.dev/draingate/internal/evidence"
)

// Stream is one source's arrival times, in order.
type Stream struct {
	Addr  string
	Port  uint16
	Class evidence.Class
	Times []time.Time
	// Every is the agent's sampling interval when Times are what it
	// reports of a sampled source (see Sampled), else zero; Origin is its
	// first look. Count says the agent counts its looks too
	// (Arrivals.Looks).
	Every  time.Duration
	Origin time.Time
	Count  bool
	// CountConns says the agent counted new connections: Conns are the
	// times of the arrivals that opened one (a subset of Times), Open the
	// connections established at its report.
	CountConns bool
	Conns      []time.Time
	Open       int
}

// Sampled is what an agent looking every `every` from origin reports of s:
// per interval at most one arrival, the latest. Zero every leaves s as it
// is.
func Sampled(s Stream, origin time.Time, every time.Duration) Stream {
	if every <= 0 {
		return s
	}
	out := s
	out.Every, out.Origin, out.Times = every, origin, nil
	for i, t := range s.Times {
		k := t.Sub(origin) / every
		if i+1 < len(s.Times) && s.Times[i+1].Sub(origin)/every == k {
			continue
		}
		out.Times = append(out.Times, t)
	}
	return out
}

// Model is one way an agent counts.
type Model struct {
	Name  string
	Every time.Duration
	Count bool
}

// Sample is what an agent counting as m reports of s.
func (m Model) Sample(s Stream, origin time.Time) Stream {
	s = Sampled(s, origin, m.Every)
	s.Count = m.Count && m.Every > 0
	return s
}

// Models names the ways an agent counts: each arrival on its own (an
// older agent, Unknown), at most one per source and look (every 100 ms),
// and so with its looks and pauses counted (this agent).
var Models = []Model{
	{"single arrivals", 0, false},
	{"sampled every 100ms", 100 * time.Millisecond, false},
	{"sampled every 100ms, looks counted", 100 * time.Millisecond, true},
}

// Poisson is a source sending at rate per second from start until stop.
func Poisson(rng *rand.Rand, addr string, rate float64, start, stop time.Time) Stream {
	s := Stream{Addr: addr, Port: 8080, Class: evidence.ClassRemote}
	for t := start; ; {
		t = t.Add(time.Duration(rng.ExpFloat64() / rate * float64(time.Second)))
		if !t.Before(stop) {
			return s
		}
		s.Times = append(s.Times, t)
	}
}

// Regular is a source sending every 1/rate seconds, each gap off by up
// to ±jitter of it, from a random phase: a load balancer node's round
// robin over its targets.
func Regular(rng *rand.Rand, addr string, rate, jitter float64, start, stop time.Time) Stream {
	s := Stream{Addr: addr, Port: 8080, Class: evidence.ClassRemote}
	per := float64(time.Second) / rate
	for t := start.Add(time.Duration(rng.Float64() * per)); t.Before(stop); t = t.Add(time.Duration(per * (1 + jitter*(2*rng.Float64()-1)))) {
		s.Times = append(s.Times, t)
	}
	return s
}

// OnOff is a bursty source: bursts at rate per second lasting `on` on
// average, separated by pauses of `off` on average (both exponential).
func OnOff(rng *rand.Rand, addr string, rate float64, on, off time.Duration, start, stop time.Time) Stream {
	return Bursts(rng, addr, rate, on, Exponential(rng, off), start, stop)
}

// Bursts is a bursty source: Poisson bursts at rate per second lasting
// `on` on average (exponential), separated by pauses drawn from pause,
// the first burst starting at start.
func Bursts(rng *rand.Rand, addr string, rate float64, on time.Duration, pause func() time.Duration, start, stop time.Time) Stream {
	s := Stream{Addr: addr, Port: 8080, Class: evidence.ClassRemote}
	exp := Exponential(rng, on)
	gap := Exponential(rng, time.Duration(float64(time.Second)/rate))
	for t := start; t.Before(stop); t = t.Add(pause()) {
		end := t.Add(exp())
		for ; t.Before(end) && t.Before(stop); t = t.Add(gap()) {
			s.Times = append(s.Times, t)
		}
		t = end
	}
	return s
}

// RegularBursts is a bursty source regular within its bursts: bursts of
// `on` (exactly) at rate per second, each gap off by up to ±jitter of it,
// separated by pauses drawn from pause: a batch client behind a load
// balancer node's round robin, regular while it sends.
func RegularBursts(rng *rand.Rand, addr string, rate, jitter float64, on time.Duration, pause func() time.Duration, start, stop time.Time) Stream {
	s := Stream{Addr: addr, Port: 8080, Class: evidence.ClassRemote}
	per := float64(time.Second) / rate
	for t := start.Add(-time.Duration(rng.Float64() * float64(on))); t.Before(stop); t = t.Add(pause()) {
		end := t.Add(on)
		for ; t.Before(end) && t.Before(stop); t = t.Add(time.Duration(per * (1 + jitter*(2*rng.Float64()-1)))) {
			if !t.Before(start) {
				s.Times = append(s.Times, t)
			}
		}
		t = end
	}
	return s
}

// Exponential draws durations of the given mean, exponentially.
func Exponential(rng *rand.Rand, mean time.Duration) func() time.Duration {
	return func() time.Duration { return time.Duration(rng.ExpFloat64() * float64(mean)) }
}

// Pareto draws durations of the given mean from a Pareto distribution of
// shape alpha (> 1; the smaller, the heavier its tail: at 1.5 its variance
// is infinite).
func Pareto(rng *rand.Rand, mean time.Duration, alpha float64) func() time.Duration {
	xm := float64(mean) * (alpha - 1) / alpha
	return func() time.Duration { return time.Duration(xm / math.Pow(1-rng.Float64(), 1/alpha)) }
}

// Varying is a Poisson source whose rate per second changes with time
// (rate(t), never above peak), from start until stop.
func Varying(rng *rand.Rand, addr string, rate func(time.Time) float64, peak float64, start, stop time.Time) Stream {
	s := Stream{Addr: addr, Port: 8080, Class: evidence.ClassRemote}
	for t := start; ; {
		t = t.Add(time.Duration(rng.ExpFloat64() / peak * float64(time.Second)))
		if !t.Before(stop) {
			return s
		}
		if rng.Float64()*peak < rate(t) {
			s.Times = append(s.Times, t)
		}
	}
}

// RegularVarying is a regular source (Regular) whose rate per second
// changes with time (rate(t)), from start until stop.
func RegularVarying(rng *rand.Rand, addr string, rate func(time.Time) float64, jitter float64, start, stop time.Time) Stream {
	s := Stream{Addr: addr, Port: 8080, Class: evidence.ClassRemote}
	for t := start.Add(time.Duration(rng.Float64() * float64(time.Second) / rate(start))); t.Before(stop); {
		s.Times = append(s.Times, t)
		t = t.Add(time.Duration(float64(time.Second) / rate(t) * (1 + jitter*(2*rng.Float64()-1))))
	}
	return s
}

// Stalls are moments when everything upstream of a pod stops for a while
// (a client's or a proxy's pause, a busy node): each a start and a length.
type Stalls []struct {
	At  time.Time
	Len time.Duration
}

// NewStalls draws stalls between start and stop, at exponential intervals
// of mean every, each lasting a uniform time in [min, max].
func NewStalls(rng *rand.Rand, every, lo, hi time.Duration, start, stop time.Time) Stalls {
	var out Stalls
	next := Exponential(rng, every)
	for t := start.Add(next()); t.Before(stop); t = t.Add(next()) {
		l := lo + time.Duration(rng.Float64()*float64(hi-lo))
		out = append(out, struct {
			At  time.Time
			Len time.Duration
		}{t, l})
		t = t.Add(l)
	}
	return out
}

// Apply holds back s's arrivals that fall in a stall to its end, where
// they come a few milliseconds apart, as queued requests do.
func (st Stalls) Apply(rng *rand.Rand, s Stream) Stream {
	out := s
	out.Times = slices.Clone(s.Times)
	j := 0
	for i, t := range out.Times {
		for j < len(st) && !t.Before(st[j].At.Add(st[j].Len)) {
			j++
		}
		if j < len(st) && !t.Before(st[j].At) {
			out.Times[i] = st[j].At.Add(st[j].Len + time.Duration(rng.IntN(5)+1)*time.Millisecond)
		}
	}
	slices.SortFunc(out.Times, func(a, b time.Time) int { return a.Compare(b) })
	return out
}

// Merge is the streams' arrivals as one source's (addr's): a load
// balancer node carrying several clients' requests.
func Merge(addr string, ss ...Stream) Stream {
	out := Stream{Addr: addr, Port: 8080, Class: evidence.ClassRemote}
	for _, s := range ss {
		out.Times = append(out.Times, s.Times...)
	}
	slices.SortFunc(out.Times, func(a, b time.Time) int { return a.Compare(b) })
	return out
}

// Arrivals is what an agent reporting at `at` would say of the times (in
// order): found by binary search, so that the tests can ask often.
func Arrivals(times []time.Time, at time.Time) evidence.Arrivals {
	k, _ := slices.BinarySearchFunc(times, at, func(t, at time.Time) int {
		if t.After(at) {
			return 1
		}
		return -1
	})
	if k == 0 {
		return evidence.Arrivals{}
	}
	a := evidence.Arrivals{N: k, First: times[0]}
	for i := k - 1; i >= 0 && len(a.Last) < api.MaxTrafficAges; i-- {
		a.Last = append(a.Last, times[i])
	}
	a.MaxGap = maxGap(times[:k])
	return a
}

// maxGaps memoizes the longest gap of each prefix of the streams' times,
// by the address of their first element (tests run one at a time).
var maxGaps = map[*time.Time][]time.Duration{}

func maxGap(times []time.Time) time.Duration {
	pm, ok := maxGaps[&times[0]]
	if !ok || len(pm) < len(times) {
		full := times[:cap(times)]
		pm = make([]time.Duration, len(full))
		for i := 1; i < len(full); i++ {
			pm[i] = max(pm[i-1], full[i].Sub(full[i-1]))
		}
		maxGaps[&times[0]] = pm
	}
	return pm[len(times)-1]
}

// LookCounts is what an agent counting its looks says of the first k
// arrivals of the sampled stream s (Arrivals.Looks and RecentLooks).
func LookCounts(s Stream, k int) (all, recent evidence.Looks) {
	idx, paused := lookIndex(s)
	count := func(from, to int) evidence.Looks {
		return evidence.Looks{N: idx[to] - idx[from], Pauses: paused[to] - paused[from]}
	}
	return count(0, k-1), count(max(0, k-api.MaxTrafficAges), k-1)
}

// GapCounts is what an agent counting its looks says of the gaps between
// the first k arrivals of the sampled stream s (Arrivals.Gaps): nil with
// fewer than two.
func GapCounts(s Stream, k int) []api.GapBin {
	if k < 2 {
		return nil
	}
	idx, _ := lookIndex(s)
	g := make([]api.GapBin, api.GapBins)
	for i := 1; i < k; i++ {
		d := idx[i] - idx[i-1]
		b := &g[api.GapBinOf(d)]
		b.N, b.Sum = b.N+1, b.Sum+d
	}
	return g
}

// lookIndexes memoizes, per sampled stream (by the address of its first
// time), each arrival's look and how many pauses came before it.
var lookIndexes = map[*time.Time][2][]int{}

func lookIndex(s Stream) (idx, paused []int) {
	if v, ok := lookIndexes[&s.Times[0]]; ok && len(v[0]) == len(s.Times) {
		return v[0], v[1]
	}
	idx, paused = make([]int, len(s.Times)), make([]int, len(s.Times))
	for i, t := range s.Times {
		idx[i] = int(t.Sub(s.Origin) / s.Every)
		if i > 0 {
			paused[i] = paused[i-1]
			if idx[i]-idx[i-1] > 1 {
				paused[i]++
			}
		}
	}
	lookIndexes[&s.Times[0]] = [2][]int{idx, paused}
	return idx, paused
}

// At is the evidence of an agent reporting at `at` on the streams, with
// the unknown arrivals' times, at the given ε.
func At(at time.Time, eps float64, unknown []time.Time, ss ...Stream) *evidence.Evidence {
	ev := &evidence.Evidence{At: at, Epsilon: eps, Unknown: Arrivals(unknown, at)}
	for _, s := range ss {
		if a := Arrivals(s.Times, at); a.N > 0 {
			a.Every = s.Every
			if s.Count {
				a.Looks, a.RecentLooks = LookCounts(s, a.N)
				a.Gaps = GapCounts(s, a.N)
			}
			src := evidence.Source{Addr: netip.MustParseAddr(s.Addr), Port: s.Port, Class: s.Class, Arrivals: a}
			if s.CountConns {
				c := Arrivals(s.Conns, at)
				c.Every = s.Every
				src.Conns, src.Open = &c, s.Open
			}
			ev.Sources = append(ev.Sources, src)
		}
	}
	return ev
}

// Last is the latest arrival of any of the streams (zero if none).
func Last(ss ...Stream) time.Time {
	var last time.Time
	for _, s := range ss {
		if n := len(s.Times); n > 0 && s.Times[n-1].After(last) {
			last = s.Times[n-1]
		}
	}
	return last
}

// Summary is what an agent reporting at `at` sends of the streams and the
// unknown arrivals' times: the evidence At makes, as ages on the wire
// (evidence.Read turns it back). The streams share one sampling interval
// and way of counting, the first's.
func Summary(at time.Time, unknown []time.Time, ss ...Stream) *api.Traffic {
	t := &api.Traffic{Unknown: ages(Arrivals(unknown, at), at)}
	for i, s := range ss {
		if i == 0 {
			t.Every = s.Every
		}
		a := Arrivals(s.Times, at)
		if a.N == 0 {
			continue
		}
		st := ages(a, at)
		st.Addr, st.Port = netip.MustParseAddr(s.Addr), s.Port
		if s.Count {
			all, recent := LookCounts(s, a.N)
			st.Looks, st.RecentLooks = api.Looks{N: all.N, Pauses: all.Pauses}, api.Looks{N: recent.N, Pauses: recent.Pauses}
			st.Gaps = GapCounts(s, a.N)
		}
		t.Sources = append(t.Sources, st)
		if s.CountConns {
			t.ConnsCounted, t.Sources[len(t.Sources)-1].Open = true, s.Open
			if c := Arrivals(s.Conns, at); c.N > 0 {
				nc := ages(c, at)
				nc.Addr, nc.Port = st.Addr, st.Port
				t.NewConns = append(t.NewConns, nc)
			}
		}
	}
	return t
}

// ages is a's times as ages at `at`.
func ages(a evidence.Arrivals, at time.Time) api.SourceTraffic {
	if a.N == 0 {
		return api.SourceTraffic{}
	}
	st := api.SourceTraffic{Arrivals: a.N, First: at.Sub(a.First), MaxGap: a.MaxGap}
	for _, l := range a.Last {
		st.Last = append(st.Last, at.Sub(l))
	}
	return st
}

// From is s without its arrivals before start: a source generated from
// earlier, so that it is already in its stride (mid-burst, mid-pause) when
// the agent starts watching.
func From(s Stream, start time.Time) Stream {
	i, _ := slices.BinarySearchFunc(s.Times, start, func(t, start time.Time) int { return t.Compare(start) })
	s.Times = s.Times[i:]
	return s
}

// Until is s without its arrivals after stop: a source that stopped
// sending then.
func Until(s Stream, stop time.Time) Stream {
	i, _ := slices.BinarySearchFunc(s.Times, stop, func(t, stop time.Time) int { return t.Compare(stop) })
	for i < len(s.Times) && !s.Times[i].After(stop) {
		i++
	}
	s.Times = s.Times[:i]
	return s
}

// Forget drops what Arrivals and LookCounts memoized of the streams seen so
// far: a long simulation calls it between drains, so that its memory stays
// that of one drain.
func Forget() {
	clear(maxGaps)
	clear(lookIndexes)
}
