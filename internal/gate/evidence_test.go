package gate

import (
	"fmt"
	"math"
	"math/rand/v2"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"draingate.dev/draingate/api"
)

// stream is one source's arrival times, in order.
type stream struct {
	addr  string
	port  uint16
	class Class
	times []time.Time
	// every is the agent's sampling interval when times are what it
	// reports of a sampled source (see sampled), else zero; origin is its
	// first look. count says the agent counts its looks too
	// (Arrivals.Looks).
	every  time.Duration
	origin time.Time
	count  bool
}

// sampled is what an agent looking every `every` from origin reports of s:
// per interval at most one arrival, the latest. Zero every leaves s as it
// is.
func sampled(s stream, origin time.Time, every time.Duration) stream {
	if every <= 0 {
		return s
	}
	out := s
	out.every, out.origin, out.times = every, origin, nil
	for i, t := range s.times {
		k := t.Sub(origin) / every
		if i+1 < len(s.times) && s.times[i+1].Sub(origin)/every == k {
			continue
		}
		out.times = append(out.times, t)
	}
	return out
}

// model is one way an agent counts.
type model struct {
	name  string
	every time.Duration
	count bool
}

// sample is what an agent counting as m reports of s.
func (m model) sample(s stream, origin time.Time) stream {
	s = sampled(s, origin, m.every)
	s.count = m.count && m.every > 0
	return s
}

// models names the ways an agent counts: each arrival on its own (an
// older agent, Unknown), at most one per source and look (every 100 ms),
// and so with its looks and pauses counted (this agent).
var models = []model{
	{"single arrivals", 0, false},
	{"sampled every 100ms", 100 * time.Millisecond, false},
	{"sampled every 100ms, looks counted", 100 * time.Millisecond, true},
}

// poisson is a source sending at rate per second from start until stop.
func poisson(rng *rand.Rand, addr string, rate float64, start, stop time.Time) stream {
	s := stream{addr: addr, port: 8080, class: ClassRemote}
	for t := start; ; {
		t = t.Add(time.Duration(rng.ExpFloat64() / rate * float64(time.Second)))
		if !t.Before(stop) {
			return s
		}
		s.times = append(s.times, t)
	}
}

// regular is a source sending every 1/rate seconds, each gap off by up
// to ±jitter of it, from a random phase: a load balancer node's round
// robin over its targets.
func regular(rng *rand.Rand, addr string, rate, jitter float64, start, stop time.Time) stream {
	s := stream{addr: addr, port: 8080, class: ClassRemote}
	per := float64(time.Second) / rate
	for t := start.Add(time.Duration(rng.Float64() * per)); t.Before(stop); t = t.Add(time.Duration(per * (1 + jitter*(2*rng.Float64()-1)))) {
		s.times = append(s.times, t)
	}
	return s
}

// onOff is a bursty source: bursts at rate per second lasting `on` on
// average, separated by pauses of `off` on average (both exponential).
func onOff(rng *rand.Rand, addr string, rate float64, on, off time.Duration, start, stop time.Time) stream {
	s := stream{addr: addr, port: 8080, class: ClassRemote}
	exp := func(mean time.Duration) time.Duration { return time.Duration(rng.ExpFloat64() * float64(mean)) }
	for t := start; t.Before(stop); t = t.Add(exp(off)) {
		end := t.Add(exp(on))
		for ; t.Before(end) && t.Before(stop); t = t.Add(exp(time.Duration(float64(time.Second) / rate))) {
			s.times = append(s.times, t)
		}
		t = end
	}
	return s
}

// arrivals is what an agent reporting at `at` would say of the times (in
// order): found by binary search, so that the tests can ask often.
func arrivals(times []time.Time, at time.Time) Arrivals {
	k, _ := slices.BinarySearchFunc(times, at, func(t, at time.Time) int {
		if t.After(at) {
			return 1
		}
		return -1
	})
	if k == 0 {
		return Arrivals{}
	}
	a := Arrivals{N: k, First: times[0]}
	for i := k - 1; i >= 0 && len(a.Last) < api.MaxTrafficAges; i-- {
		a.Last = append(a.Last, times[i])
	}
	a.MaxGap = maxGap(times[:k])
	return a
}

// maxGap memoizes the longest gap of each prefix of the streams' times, by
// the address of their first element.
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

// lookCounts is what an agent counting its looks says of the first k
// arrivals of the sampled stream s (Arrivals.Looks and RecentLooks).
func lookCounts(s stream, k int) (all, recent Looks) {
	idx, paused := lookIndex(s)
	count := func(from, to int) Looks {
		return Looks{N: idx[to] - idx[from], Pauses: paused[to] - paused[from]}
	}
	return count(0, k-1), count(max(0, k-api.MaxTrafficAges), k-1)
}

// lookIndex memoizes, per sampled stream (by the address of its first
// time), each arrival's look and how many pauses came before it.
var lookIndexes = map[*time.Time][2][]int{}

func lookIndex(s stream) (idx, paused []int) {
	if v, ok := lookIndexes[&s.times[0]]; ok && len(v[0]) == len(s.times) {
		return v[0], v[1]
	}
	idx, paused = make([]int, len(s.times)), make([]int, len(s.times))
	for i, t := range s.times {
		idx[i] = int(t.Sub(s.origin) / s.every)
		if i > 0 {
			paused[i] = paused[i-1]
			if idx[i]-idx[i-1] > 1 {
				paused[i]++
			}
		}
	}
	lookIndexes[&s.times[0]] = [2][]int{idx, paused}
	return idx, paused
}

func evidenceAt(at time.Time, eps float64, unknown []time.Time, ss ...stream) *Evidence {
	ev := &Evidence{At: at, Epsilon: eps, Unknown: arrivals(unknown, at)}
	for _, s := range ss {
		if a := arrivals(s.times, at); a.N > 0 {
			a.Every = s.every
			if s.count {
				a.Looks, a.RecentLooks = lookCounts(s, a.N)
			}
			ev.Sources = append(ev.Sources, Source{Addr: netip.MustParseAddr(s.addr), Port: s.port, Class: s.class, Arrivals: a})
		}
	}
	return ev
}

// tgOut is a target group route whose owner took the pod out, on port 8080.
func tgOut(tail time.Duration) Observation {
	return Observation{Kind: "targetgroup", Name: "tg", Synced: true, Out: true, State: "draining",
		What: "the target is draining", Tail: tail, TailName: "ALB", WeighTraffic: true, Ports: []uint16{8080}}
}

// closeTime is when the route first closes as the agent reports every
// `every` from `from` until `until` (zero if it does not), with the last
// assessment. Between arrivals the evidence only ages, so it assesses at
// each report right after an arrival, at the first report at or after each
// arrival's quiet end and the tail's end, and at until: the same answer as
// assessing at every report, in a fraction of the time.
func closeTime(o Observation, outSince, from, until time.Time, every time.Duration, eps float64, unknown []time.Time, ss ...stream) (time.Time, Assessment) {
	grid := func(t time.Time) time.Time {
		if !t.After(from) {
			return from
		}
		n := (t.Sub(from) + every - 1) / every
		return from.Add(n * every)
	}
	var at []time.Time
	add := func(t time.Time) {
		if t = grid(t); !t.After(until) {
			at = append(at, t)
		}
	}
	add(from)
	add(outSince.Add(o.Tail))
	add(until)
	for _, s := range append(ss, stream{times: unknown}) {
		for _, t := range s.times {
			add(t)
		}
	}
	slices.SortFunc(at, func(a, b time.Time) int { return a.Compare(b) })
	at = slices.Compact(at)
	var a Assessment
	for i := 0; i < len(at); i++ {
		now := at[i]
		a = Assess(now, o, outSince, evidenceAt(now, eps, unknown, ss...))
		if a.Phase == PhaseClosed {
			return now, a
		}
		// The next candidate: the route's own close time, if before the
		// next report already listed.
		if a.Route.QuietBy != nil {
			if q := grid(*a.Route.QuietBy); q.After(now) && !q.After(until) && (i+1 == len(at) || q.Before(at[i+1])) {
				at = slices.Insert(at, i+1, q)
			}
		}
	}
	return time.Time{}, a
}

func lastArrival(ss ...stream) time.Time {
	var last time.Time
	for _, s := range ss {
		if n := len(s.times); n > 0 {
			last = later(last, s.times[n-1])
		}
	}
	return last
}

// TestFalseQuietRate measures, for several ε, how often the gate closes a
// route while its one source is still sending: the source is Poisson at
// its rate from the agent's start until a full tail after the owner's
// word (the worst a load balancer node is meant to do), and the agent
// reports every 100 ms. The measured rate must not exceed ε (with room for
// the count's own noise); it is printed beside ε.
func TestFalseQuietRate(t *testing.T) {
	const tail = 20 * time.Second
	trials := 2000
	if testing.Short() {
		trials = 500
	}
	for _, m := range models {
		for _, eps := range []float64{0.2, 0.05, 1e-2, DefaultEpsilon} {
			// 40/s saturates the looks: four in five find data.
			for _, rate := range []float64{0.5, 3, 20, 40} {
				rng := rand.New(rand.NewPCG(uint64(rate*1000), math.Float64bits(eps)))
				false_ := 0
				for range trials {
					start := t0
					outSince := t0.Add(5 * time.Second)
					stop := outSince.Add(tail)
					s := m.sample(poisson(rng, "10.0.0.1", rate, start, stop), start)
					at, _ := closeTime(tgOut(tail), outSince, outSince, stop, 100*time.Millisecond, eps, nil, s)
					if !at.IsZero() && at.Before(lastArrival(s)) {
						false_++
					}
				}
				got := float64(false_) / float64(trials)
				t.Logf("%s: ε %-6g rate %4.1f/s: %d false quiets in %d drains (%.4f)", m.name, eps, rate, false_, trials, got)
				// Allow three standard deviations of a binomial count at ε.
				if allowed := eps*float64(trials) + 3*math.Sqrt(eps*float64(trials)) + 1; float64(false_) > allowed {
					t.Errorf("%s: ε %g, rate %g/s: %d false quiets in %d drains, more than ε allows (%.1f)", m.name, eps, rate, false_, trials, allowed)
				}
			}
		}
	}
}

// TestFalseQuietRateOfShapes measures the false-quiet rate as
// TestFalseQuietRate does, for sources that are not Poisson, seen by an
// agent that counts its looks (which weighs how regular a source is) and
// by one that does not, on the same streams: round robin with jitter (more
// regular than Poisson, the Markov model's bound the shorter) must stay
// within ε; bursts break both models (the README says so), and counting
// looks must not make them worse: their rates are printed.
func TestFalseQuietRateOfShapes(t *testing.T) {
	const tail = 20 * time.Second
	trials := 1000
	if testing.Short() {
		trials = 300
	}
	shapes := []struct {
		name   string
		bursty bool
		gen    func(rng *rand.Rand, start, stop time.Time) stream
	}{
		{"round robin 7/s ±30 %", false, func(rng *rand.Rand, start, stop time.Time) stream {
			return regular(rng, "10.0.0.1", 7, 0.3, start, stop)
		}},
		{"round robin 2/s ±90 %", false, func(rng *rand.Rand, start, stop time.Time) stream {
			return regular(rng, "10.0.0.1", 2, 0.9, start, stop)
		}},
		{"bursts 30/s for 0.3s, pauses 0.3s", true, func(rng *rand.Rand, start, stop time.Time) stream {
			return onOff(rng, "10.0.0.1", 30, 300*time.Millisecond, 300*time.Millisecond, start, stop)
		}},
		{"bursts 10/s for 1s, pauses 0.5s", true, func(rng *rand.Rand, start, stop time.Time) stream {
			return onOff(rng, "10.0.0.1", 10, time.Second, 500*time.Millisecond, start, stop)
		}},
	}
	for i, sh := range shapes {
		for _, eps := range []float64{0.2, 0.05, 1e-2, DefaultEpsilon} {
			allowed := eps*float64(trials) + 3*math.Sqrt(eps*float64(trials)) + 1
			var false_ [2]int // looks not counted, counted
			for j, m := range models[1:] {
				rng := rand.New(rand.NewPCG(uint64(i+1), math.Float64bits(eps)))
				for range trials {
					start := t0
					outSince := t0.Add(5 * time.Second)
					stop := outSince.Add(tail)
					s := m.sample(sh.gen(rng, start, stop), start)
					at, _ := closeTime(tgOut(tail), outSince, outSince, stop, 100*time.Millisecond, eps, nil, s)
					if !at.IsZero() && at.Before(lastArrival(s)) {
						false_[j]++
					}
				}
				t.Logf("%s, %s: ε %-6g: %d false quiets in %d drains (%.4f)", sh.name, m.name, eps, false_[j], trials, float64(false_[j])/float64(trials))
				if !sh.bursty && float64(false_[j]) > allowed {
					t.Errorf("%s, %s: ε %g: %d false quiets in %d drains, more than ε allows (%.1f)", sh.name, m.name, eps, false_[j], trials, allowed)
				}
			}
			if sh.bursty && float64(false_[1]) > float64(false_[0])+3*math.Sqrt(float64(false_[0]))+1 {
				t.Errorf("%s: ε %g: %d false quiets with looks counted, %d without: counting made bursts worse", sh.name, eps, false_[1], false_[0])
			}
		}
	}
}

// TestLooksCountedBounds: with its looks counted, a round robin source
// gets a much shorter bound than the Poisson model alone gives it, a
// Poisson source about the same (at most ln 2/λ and a look more: each model
// has ε/2), and a bursty one the Markov bound, much longer, since its empty
// looks cluster (medians over 200 streams watched 8 s).
func TestLooksCountedBounds(t *testing.T) {
	const (
		every   = 100 * time.Millisecond
		watched = 8 * time.Second
		tail    = 8 * time.Second
	)
	rng := rand.New(rand.NewPCG(23, 24))
	bounds := func(gen func() stream) (plain, counted float64) {
		var ps, cs []float64
		for range 200 {
			s := models[2].sample(gen(), t0)
			a := arrivals(s.times, t0.Add(watched))
			if a.N < MinArrivals {
				continue
			}
			a.Every = every
			ps = append(ps, FitArrivals(a, tail, DefaultEpsilon).Quiet.Seconds())
			a.Looks, a.RecentLooks = lookCounts(s, a.N)
			cs = append(cs, FitArrivals(a, tail, DefaultEpsilon).Quiet.Seconds())
		}
		slices.Sort(ps)
		slices.Sort(cs)
		return ps[len(ps)/2], cs[len(cs)/2]
	}
	p, c := bounds(func() stream { return regular(rng, "10.0.0.1", 7, 0.3, t0, t0.Add(watched)) })
	t.Logf("round robin 7/s ±30 %%: bound p50 %.2fs, %.2fs with looks counted", p, c)
	if !(c < 0.7*p) {
		t.Errorf("round robin 7/s: bound p50 %.2fs with looks counted, %.2fs without: want under 70 %%", c, p)
	}
	for _, rate := range []float64{3, 11, 30} {
		p, c := bounds(func() stream { return poisson(rng, "10.0.0.1", rate, t0, t0.Add(watched)) })
		t.Logf("Poisson %g/s: bound p50 %.2fs, %.2fs with looks counted", rate, p, c)
		if c > p+math.Ln2/rate+every.Seconds()+1e-9 {
			t.Errorf("Poisson %g/s: bound p50 %.2fs with looks counted, %.2fs without: want at most ln 2/λ and a look more", rate, c, p)
		}
	}
	p, c = bounds(func() stream {
		return onOff(rng, "10.0.0.1", 30, 300*time.Millisecond, 300*time.Millisecond, t0, t0.Add(watched))
	})
	t.Logf("bursts 30/s: bound p50 %.2fs, %.2fs with looks counted", p, c)
	if c < 2*p {
		t.Errorf("bursts: bound p50 %.2fs with looks counted, %.2fs without: want the Markov bound, at least twice as long (its empty looks cluster)", c, p)
	}
}

// TestQuietClosesBeforeTheTail: a busy source that stops soon after the
// owner's word closes the route before the tail's end, after its last
// arrival, within its bound; the verdict says traffic closed it.
func TestQuietClosesBeforeTheTail(t *testing.T) {
	const tail = 20 * time.Second
	rng := rand.New(rand.NewPCG(1, 2))
	outSince := t0.Add(5 * time.Second)
	s := poisson(rng, "10.0.0.1", 3, t0, outSince.Add(2*time.Second))
	at, a := closeTime(tgOut(tail), outSince, outSince, outSince.Add(tail), 100*time.Millisecond, 0, nil, s)
	last := lastArrival(s)
	f := FitArrivals(arrivals(s.times, at), tail, DefaultEpsilon)
	if at.IsZero() || !at.Before(outSince.Add(tail)) {
		t.Fatalf("closed at %v, want before the tail's end %v: %s", at, outSince.Add(tail), a.Route.Detail)
	}
	if at.Before(last.Add(f.Quiet)) || at.After(last.Add(f.Quiet+100*time.Millisecond)) {
		t.Errorf("closed %s after the last arrival, want its bound %s (+ one report)", at.Sub(last), f.Quiet)
	}
	if a.Route.ClosedBy != api.ClosedByTraffic || !strings.Contains(a.Route.Detail, "before the tail's end") {
		t.Errorf("closed by %q: %s", a.Route.ClosedBy, a.Route.Detail)
	}
	t.Logf("rate 3/s: bound %s, closed %s after the owner's word (tail %s): %s", f.Quiet.Round(time.Millisecond), at.Sub(outSince), tail, a.Route.Detail)
}

// TestSourcesFadeOneByOne: three load balancer nodes stop at their own
// times; the route closes only after the last one's last arrival.
func TestSourcesFadeOneByOne(t *testing.T) {
	const tail = 60 * time.Second
	for _, m := range models {
		t.Run(m.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(3, 4))
			outSince := t0.Add(5 * time.Second)
			ss := []stream{
				m.sample(poisson(rng, "10.0.0.1", 3, t0, outSince.Add(1*time.Second)), t0),
				m.sample(poisson(rng, "10.0.0.2", 3, t0, outSince.Add(9*time.Second)), t0),
				m.sample(poisson(rng, "10.0.0.3", 3, t0, outSince.Add(20*time.Second)), t0),
			}
			at, a := closeTime(tgOut(tail), outSince, outSince, outSince.Add(tail), 100*time.Millisecond, 0, nil, ss...)
			if at.IsZero() || at.Before(lastArrival(ss...)) {
				t.Fatalf("closed at %v, before the last source's last arrival %v: %s", at, lastArrival(ss...), a.Route.Detail)
			}
			if !at.Before(outSince.Add(tail)) {
				t.Errorf("closed at the tail's end, want before: %s", a.Route.Detail)
			}
			if !strings.Contains(a.Route.Detail, "from 3 sources (3 fitted") {
				t.Errorf("detail does not count 3 fitted sources: %s", a.Route.Detail)
			}
		})
	}
}

// TestSlowSourceLeavesTheTail: a source too sparse to fit keeps the tail;
// if it sends after the tail's end, the route stays open a tail after its
// last arrival.
func TestSlowSourceLeavesTheTail(t *testing.T) {
	const tail = 20 * time.Second
	outSince := t0.Add(5 * time.Second)
	rng := rand.New(rand.NewPCG(5, 6))
	busy := poisson(rng, "10.0.0.1", 5, t0, outSince.Add(time.Second))
	slow := stream{addr: "10.0.0.9", port: 8080, class: ClassRemote, times: []time.Time{t0.Add(time.Second), outSince.Add(3 * time.Second)}}
	at, a := closeTime(tgOut(tail), outSince, outSince, outSince.Add(3*tail), 100*time.Millisecond, 0, nil, busy, slow)
	if !at.Equal(outSince.Add(tail)) || a.Route.ClosedBy != api.ClosedByTail {
		t.Errorf("closed at %v by %q, want at the tail's end %v by the tail: %s", at, a.Route.ClosedBy, outSince.Add(tail), a.Route.Detail)
	}

	// When a busy source keeps the route open past the tail's end, a sparse
	// one sending then proves the tail too short: a tail after its arrival.
	busyLate := poisson(rng, "10.0.0.1", 5, t0, outSince.Add(tail+5*time.Second))
	late := slow
	late.times = append(slices.Clone(slow.times), outSince.Add(tail+2*time.Second))
	at, a = closeTime(tgOut(tail), outSince, outSince, outSince.Add(3*tail), 100*time.Millisecond, 0, nil, busyLate, late)
	if want := outSince.Add(2*tail + 2*time.Second); !at.Equal(want) || a.Route.ClosedBy != api.ClosedByTraffic {
		t.Errorf("closed at %v by %q, want a tail after the late arrival (%v) by traffic: %s", at, a.Route.ClosedBy, want, a.Route.Detail)
	}
}

// TestStillSendingPastTheTail: a busy source that keeps sending after the
// tail's end keeps the route open until it goes quiet.
func TestStillSendingPastTheTail(t *testing.T) {
	const tail = 10 * time.Second
	for _, m := range models {
		t.Run(m.name, func(t *testing.T) {
			outSince := t0.Add(5 * time.Second)
			rng := rand.New(rand.NewPCG(7, 8))
			s := m.sample(poisson(rng, "10.0.0.1", 4, t0, outSince.Add(tail+15*time.Second)), t0)
			at, a := closeTime(tgOut(tail), outSince, outSince, outSince.Add(5*tail), 100*time.Millisecond, 0, nil, s)
			if at.IsZero() || at.Before(lastArrival(s)) {
				t.Fatalf("closed at %v while the source still sent (last %v)", at, lastArrival(s))
			}
			if a.Route.ClosedBy != api.ClosedByTraffic || !strings.Contains(a.Route.Detail, "past the tail's end") {
				t.Errorf("closed by %q: %s", a.Route.ClosedBy, a.Route.Detail)
			}
		})
	}
}

// TestBurstsKeepTheirPauses: a source that sends bursts (25 arrivals in
// half a second, then 8 s of silence) is not taken for quiet in a pause.
func TestBurstsKeepTheirPauses(t *testing.T) {
	const tail = 60 * time.Second
	outSince := t0.Add(30 * time.Second)
	s := stream{addr: "10.0.0.1", port: 8080, class: ClassRemote}
	for b := t0; b.Before(outSince.Add(40 * time.Second)); b = b.Add(8 * time.Second) {
		for i := range 25 {
			s.times = append(s.times, b.Add(time.Duration(i)*20*time.Millisecond))
		}
	}
	for _, m := range models {
		s := m.sample(s, t0)
		at, a := closeTime(tgOut(tail), outSince, outSince, outSince.Add(tail), 100*time.Millisecond, 0, nil, s)
		if !at.IsZero() && at.Before(lastArrival(s)) {
			t.Fatalf("%s: closed at %v in a pause between bursts (last burst %v): %s", m.name, at, lastArrival(s), a.Route.Detail)
		}
	}
}

// TestUnknownArrivals: arrivals of unknown source (connections too short to
// see: load balancer health checks, probes) are not a source. A steady
// stream of them, going on past the tail as health checks do, never holds
// a route past its tail's end; a few of them do not stop an early close
// by the sources' evidence; as many as the attributed arrivals do, and
// the route then closes at its tail's end.
func TestUnknownArrivals(t *testing.T) {
	const tail = 20 * time.Second
	outSince := t0.Add(5 * time.Second)
	until := outSince.Add(3 * tail)
	t.Run("a steady stream past the tail", func(t *testing.T) {
		rng := rand.New(rand.NewPCG(9, 10))
		known := poisson(rng, "10.0.0.1", 5, t0, outSince.Add(time.Second))
		checks := poisson(rng, "0.0.0.0", 0.2, t0, until).times
		at, a := closeTime(tgOut(tail), outSince, outSince, until, 100*time.Millisecond, 0, checks, known)
		if at.IsZero() || at.After(outSince.Add(tail)) {
			t.Fatalf("closed at %v, want by the tail's end %v: %s", at, outSince.Add(tail), a.Route.Detail)
		}
		if a.Route.ClosedBy != api.ClosedByTraffic || !strings.Contains(a.Why, "of unknown source (too short to see) not counted as a source") {
			t.Errorf("closed by %q (%s), want by traffic, the unknown arrivals shown", a.Route.ClosedBy, a.Why)
		}
	})
	t.Run("as many as the attributed ones", func(t *testing.T) {
		rng := rand.New(rand.NewPCG(11, 10))
		known := poisson(rng, "10.0.0.1", 5, t0, outSince.Add(time.Second))
		many := poisson(rng, "0.0.0.0", 8, t0, outSince.Add(time.Second)).times
		at, a := closeTime(tgOut(tail), outSince, outSince, until, 100*time.Millisecond, 0, many, known)
		if !at.Equal(outSince.Add(tail)) || a.Route.ClosedBy != api.ClosedByTail || !strings.Contains(a.Why, "too many arrivals of unknown source") {
			t.Errorf("closed at %v by %q (%s), want at the tail's end %v by the tail: %s", at, a.Route.ClosedBy, a.Why, outSince.Add(tail), a.Route.Detail)
		}
	})
	t.Run("exactly as many as the attributed ones", func(t *testing.T) {
		rng := rand.New(rand.NewPCG(13, 10))
		known := poisson(rng, "10.0.0.1", 5, t0, outSince.Add(time.Second))
		same := make([]time.Time, len(known.times))
		for i, at := range known.times {
			same[i] = at.Add(time.Millisecond)
		}
		at, a := closeTime(tgOut(tail), outSince, outSince, until, 100*time.Millisecond, 0, same, known)
		if !at.Equal(outSince.Add(tail)) || a.Route.ClosedBy != api.ClosedByTail {
			t.Errorf("closed at %v by %q, want at the tail's end %v by the tail: %s", at, a.Route.ClosedBy, outSince.Add(tail), a.Route.Detail)
		}
	})
	t.Run("holding sources the agent could not list", func(t *testing.T) {
		rng := rand.New(rand.NewPCG(14, 10))
		known := poisson(rng, "10.0.0.1", 5, t0, outSince.Add(time.Second))
		merged := poisson(rng, "0.0.0.0", 5, t0, outSince.Add(2*tail)).times
		last := merged[len(merged)-1]
		var closed time.Time
		var detail string
		for now := outSince; !now.After(until); now = now.Add(100 * time.Millisecond) {
			ev := evidenceAt(now, 0, merged, known)
			ev.UnknownHoldsSources = true
			if a := Assess(now, tgOut(tail), outSince, ev); a.Phase == PhaseClosed {
				closed, detail = now, a.Route.Detail
				break
			}
		}
		if closed.IsZero() || closed.Before(last) {
			t.Errorf("closed at %v, want after the merged sources' last arrival %v: %s", closed, last, detail)
		}
	})
	t.Run("alone", func(t *testing.T) {
		rng := rand.New(rand.NewPCG(12, 10))
		checks := poisson(rng, "0.0.0.0", 3, t0, until).times
		at, a := closeTime(tgOut(tail), outSince, outSince, until, 100*time.Millisecond, 0, checks)
		if !at.Equal(outSince.Add(tail)) || a.Route.ClosedBy != api.ClosedByTail {
			t.Errorf("closed at %v by %q, want at the tail's end %v by the tail: %s", at, a.Route.ClosedBy, outSince.Add(tail), a.Route.Detail)
		}
	})
}

// TestNodeProbesAreNotRouteTraffic: the node's own probes on the route's
// port, and remote traffic on another port, weigh nothing: with nothing
// else the tail alone decides.
func TestNodeProbesAreNotRouteTraffic(t *testing.T) {
	const tail = 20 * time.Second
	outSince := t0.Add(5 * time.Second)
	rng := rand.New(rand.NewPCG(11, 12))
	probes := poisson(rng, "10.244.0.1", 2, t0, outSince.Add(3*tail))
	probes.class = ClassNode
	metrics := poisson(rng, "10.0.0.7", 2, t0, outSince.Add(3*tail))
	metrics.port = 9090
	at, a := closeTime(tgOut(tail), outSince, outSince, outSince.Add(3*tail), 100*time.Millisecond, 0, nil, probes, metrics)
	if !at.Equal(outSince.Add(tail)) || a.Route.ClosedBy != api.ClosedByTail || !strings.Contains(a.Why, "no traffic on its ports") ||
		!strings.Contains(a.Why, "arrivals from the node not counted") {
		t.Errorf("closed at %v by %q (%s), want at the tail's end by the tail, the node's arrivals shown: %s", at, a.Route.ClosedBy, a.Why, a.Route.Detail)
	}
}

// TestEvidenceNeverClosesARouteStillIn: a quiet pod whose owner still
// routes to it is not released.
func TestEvidenceNeverClosesARouteStillIn(t *testing.T) {
	rng := rand.New(rand.NewPCG(13, 14))
	s := poisson(rng, "10.0.0.1", 5, t0, t0.Add(2*time.Second))
	o := tgOut(20 * time.Second)
	o.Out, o.State = false, "healthy"
	now := t0.Add(time.Minute)
	if a := Assess(now, o, time.Time{}, evidenceAt(now, 0, nil, s)); a.Phase != PhaseIn {
		t.Errorf("phase %s, want in: %s", a.Phase, a.Route.Detail)
	}
}

// TestStaleEvidenceWaitsForTheAgent: quiet is known only up to the
// evidence's time; the route stays open, with QuietBy in the past, until a
// fresh report; NextChange wakes the server at QuietBy.
func TestStaleEvidenceWaitsForTheAgent(t *testing.T) {
	const tail = 20 * time.Second
	rng := rand.New(rand.NewPCG(15, 16))
	outSince := t0.Add(5 * time.Second)
	s := poisson(rng, "10.0.0.1", 5, t0, outSince)
	reported := lastArrival(s).Add(100 * time.Millisecond)
	ev := evidenceAt(reported, 0, nil, s)
	p := Pod{Name: "p", Terminating: true, Evidence: ev}
	mem := Memory{TerminatingSince: t0, Routes: map[RouteKey]RouteMemory{{"targetgroup", "tg"}: {OutSince: outSince}}}
	v, _ := Step(reported, p, mem, []Observation{tgOut(tail)})
	if v.Released || v.Routes[0].QuietBy == nil {
		t.Fatalf("released %v, quiet by %v: %s", v.Released, v.Routes[0].QuietBy, v.Message)
	}
	quietBy := *v.Routes[0].QuietBy
	want := quietBy
	if a := v.Routes[0].AskBy; a != nil && a.Before(want) {
		want = *a
	}
	if next := NextChange(reported, p, v); !next.Equal(want) {
		t.Errorf("NextChange = %v, want the earlier of QuietBy %v and AskBy %v", next, quietBy, v.Routes[0].AskBy)
	}
	v, _ = Step(quietBy.Add(time.Second), p, mem, []Observation{tgOut(tail)})
	if v.Released {
		t.Fatalf("released on stale evidence: %s", v.Message)
	}
	p.Evidence = evidenceAt(quietBy.Add(time.Second), 0, nil, s)
	v, _ = Step(quietBy.Add(time.Second), p, mem, []Observation{tgOut(tail)})
	if !v.Released || v.Routes[0].ClosedBy != api.ClosedByTraffic {
		t.Errorf("fresh quiet evidence: released %v, closed by %q: %s", v.Released, v.Routes[0].ClosedBy, v.Message)
	}
}

// TestHeldEvidenceIsAskedAgain: the agent's first ask comes before its
// sources sent enough to fit, and the server holds that evidence through
// the long-poll: by it the route closes only at the tail's end. AskBy, an
// EvidenceRefresh after the evidence arrived, is the verdict's next change,
// and the evidence the agent then brings (every source fitted and quiet)
// closes the route long before the tail's end.
func TestHeldEvidenceIsAskedAgain(t *testing.T) {
	const tail = 20 * time.Second
	rng := rand.New(rand.NewPCG(17, 18))
	outSince := t0.Add(200 * time.Millisecond)
	s := sampled(poisson(rng, "10.0.0.1", 10, t0, outSince.Add(3*time.Second)), t0, 100*time.Millisecond)
	first := t0.Add(300 * time.Millisecond)
	p := Pod{Name: "p", Terminating: true, Evidence: evidenceAt(first, 0, nil, s)}
	mem := Memory{TerminatingSince: t0, Routes: map[RouteKey]RouteMemory{{"targetgroup", "tg"}: {OutSince: outSince}}}
	v, _ := Step(first, p, mem, []Observation{tgOut(tail)})
	r := v.Routes[0]
	if v.Released || r.QuietBy == nil || !r.QuietBy.Equal(outSince.Add(tail)) || r.AskBy == nil {
		t.Fatalf("on the first ask's evidence: released %v, quiet by %v (want the tail's end), ask by %v: %s", v.Released, r.QuietBy, r.AskBy, r.Detail)
	}
	if want := first.Add(EvidenceRefresh); !r.AskBy.Equal(want) || !NextChange(first, p, v).Equal(want) {
		t.Errorf("AskBy %v, next change %v; want both %v", r.AskBy, NextChange(first, p, v), want)
	}
	// The server's timer then: the same evidence, AskBy passed (the wait
	// API answers the long-poll), the route still open.
	v, _ = Step(first.Add(EvidenceRefresh), p, mem, []Observation{tgOut(tail)})
	if r := v.Routes[0]; v.Released || r.AskBy == nil || r.AskBy.After(first.Add(EvidenceRefresh)) {
		t.Errorf("at AskBy on the same evidence: released %v, ask by %v: %s", v.Released, r.AskBy, v.Message)
	}
	later := outSince.Add(8 * time.Second)
	p.Evidence = evidenceAt(later, 0, nil, s)
	v, _ = Step(later, p, mem, []Observation{tgOut(tail)})
	if !v.Released || v.Routes[0].ClosedBy != api.ClosedByTraffic || v.Routes[0].AskBy != nil {
		t.Errorf("newer evidence, every source fitted and quiet: released %v, closed by %q, ask by %v: %s", v.Released, v.Routes[0].ClosedBy, v.Routes[0].AskBy, v.Message)
	}
}

func TestFitArrivals(t *testing.T) {
	a := Arrivals{N: 101, First: t0, Last: []time.Time{t0.Add(50 * time.Second)}}
	f := FitArrivals(a, 20*time.Second, 1e-6)
	if !f.OK || math.Abs(f.Rate-2) > 1e-9 || f.Low >= f.Rate || f.Low < 1.4 {
		t.Errorf("fit %+v: want rate 2/s and a lower limit a little below", f)
	}
	if want := math.Log(40/1e-6) / f.Low; math.Abs(f.Quiet.Seconds()-want) > 1e-3 {
		t.Errorf("quiet %s, want ln(K/ε)/low = %.3fs", f.Quiet, want)
	}
	for _, few := range []Arrivals{{N: MinArrivals - 1, First: t0, Last: []time.Time{t0.Add(time.Second)}}, {N: 50, First: t0, Last: []time.Time{t0}}, {}} {
		if f := FitArrivals(few, time.Minute, 1e-6); f.OK {
			t.Errorf("FitArrivals(%+v) fitted: %+v", few, f)
		}
	}
	// The fewer arrivals, the longer the bound at the same rate.
	small := FitArrivals(Arrivals{N: 11, First: t0, Last: []time.Time{t0.Add(5 * time.Second)}}, 0, 1e-6)
	large := FitArrivals(Arrivals{N: 1001, First: t0, Last: []time.Time{t0.Add(500 * time.Second)}}, 0, 1e-6)
	if !(small.Quiet > large.Quiet) {
		t.Errorf("10 gaps give %s, 1000 gaps %s: want the short sample's bound longer", small.Quiet, large.Quiet)
	}
	sSmall := FitArrivals(Arrivals{N: 11, First: t0, Last: []time.Time{t0.Add(5 * time.Second)}, Every: 100 * time.Millisecond}, 0, 1e-6)
	sLarge := FitArrivals(Arrivals{N: 1001, First: t0, Last: []time.Time{t0.Add(500 * time.Second)}, Every: 100 * time.Millisecond}, 0, 1e-6)
	if !(sSmall.Quiet > sLarge.Quiet) {
		t.Errorf("sampled: 10 looks with data give %s, 1000 give %s: want the short sample's bound longer", sSmall.Quiet, sLarge.Quiet)
	}
}

// TestFitSampledArrivals: a busy source seen by an agent looking every
// 100 ms. Counted once per look, its arrivals make at most 10/s: fitted
// as single arrivals its rate saturates below that and the bound is that
// of a 10/s source at best. Fitted as looks, the rate is the source's own
// (within the estimate's noise) and the bound shorter, still above what
// the exact rate would need for ε. A source found in every look still
// gets a finite bound of a few looks, and at least two of its pauses.
func TestFitSampledArrivals(t *testing.T) {
	const (
		rate  = 30.0
		every = 100 * time.Millisecond
		tail  = 20 * time.Second
	)
	rng := rand.New(rand.NewPCG(11, 12))
	s := sampled(poisson(rng, "10.0.0.1", rate, t0, t0.Add(20*time.Second)), t0, every)
	a := arrivals(s.times, t0.Add(20*time.Second))
	single := FitArrivals(a, tail, DefaultEpsilon)
	a.Every = every
	looks := FitArrivals(a, tail, DefaultEpsilon)
	if !single.OK || !looks.OK {
		t.Fatalf("fits: single %+v, looks %+v", single, looks)
	}
	if single.Rate > 10 || math.Abs(looks.Rate-rate)/rate > 0.2 {
		t.Errorf("rates: %.1f/s as single arrivals (want at most 10), %.1f/s as looks (want %.0f ± 20 %%)", single.Rate, looks.Rate, rate)
	}
	exact := math.Log(looks.Rate*tail.Seconds()/DefaultEpsilon) / rate
	if !(looks.Quiet < single.Quiet) || looks.Quiet.Seconds() < exact {
		t.Errorf("bounds: %s as looks, %s as single arrivals; want the first shorter, and at least %.2fs (ln(K/ε)/λ at the true rate)", looks.Quiet, single.Quiet, exact)
	}
	t.Logf("30/s sampled every 100ms for 20s: %d looks with data; single arrivals %.1f/s, bound %s; looks %.1f/s, bound %s (exact rate: %.2fs)",
		a.N, single.Rate, single.Quiet, looks.Rate, looks.Quiet, exact)

	full := Arrivals{N: 100, First: t0, Every: every}
	for i := range api.MaxTrafficAges {
		full.Last = append(full.Last, t0.Add(time.Duration(99-i)*every))
	}
	full.MaxGap = every
	f := FitArrivals(full, tail, DefaultEpsilon)
	if !f.OK || f.Quiet < 2*every || f.Quiet > time.Second {
		t.Errorf("a source in all of 100 looks: %+v, want a bound of a few looks", f)
	}
}

// TestEmptyEarlyEvidenceWaitsForAReport: the agent's first ask comes
// before it saw any traffic; at the tail's end the route waits for a
// report from then on (QuietBy, which wakes the agent) instead of closing
// on that empty first one, and a fresh report with traffic still arriving
// keeps it open.
func TestEmptyEarlyEvidenceWaitsForAReport(t *testing.T) {
	const tail = 5 * time.Second
	outSince := t0.Add(time.Second)
	end := outSince.Add(tail)
	empty := &Evidence{At: t0}
	a := Assess(end.Add(time.Second), tgOut(tail), outSince, empty)
	if a.Phase != PhaseOut || a.Route.QuietBy == nil || !a.Route.QuietBy.Equal(end) {
		t.Fatalf("stale empty evidence after the tail: phase %s, quiet by %v: %s", a.Phase, a.Route.QuietBy, a.Route.Detail)
	}
	rng := rand.New(rand.NewPCG(17, 18))
	s := poisson(rng, "10.0.0.1", 5, t0, end.Add(10*time.Second))
	if a := Assess(end.Add(time.Second), tgOut(tail), outSince, evidenceAt(end.Add(time.Second), 0, nil, s)); a.Phase == PhaseClosed {
		t.Errorf("closed while the source still sends past the tail: %s", a.Route.Detail)
	}
	if a := Assess(end.Add(time.Second), tgOut(tail), outSince, &Evidence{At: end.Add(time.Second)}); a.Phase != PhaseClosed || a.Route.ClosedBy != api.ClosedByTail {
		t.Errorf("fresh empty evidence after the tail: phase %s by %q: %s", a.Phase, a.Route.ClosedBy, a.Route.Detail)
	}
}

// TestPortsOutliveTheListing: once a target group's listing drops the
// pod's target (its deregistration delay ended), the observation has no
// ports; the memory keeps them, and the evidence still weighs.
func TestPortsOutliveTheListing(t *testing.T) {
	const tail = 5 * time.Second
	rng := rand.New(rand.NewPCG(19, 20))
	outSince := t0.Add(time.Second)
	s := poisson(rng, "10.0.0.1", 5, t0, outSince.Add(3*tail))
	now := outSince.Add(2 * tail)
	p := Pod{Name: "p", Terminating: true, Evidence: evidenceAt(now, 0, nil, s)}
	_, mem := Step(outSince, p, Memory{}, []Observation{tgOut(tail)})
	absent := tgOut(tail)
	absent.Ports, absent.State = nil, "absent"
	v, _ := Step(now, p, mem, []Observation{absent})
	if v.Released || v.Routes[0].QuietBy == nil {
		t.Errorf("a source still sending past the tail, target no longer listed: released %v, quiet by %v: %s", v.Released, v.Routes[0].QuietBy, v.Message)
	}
}

// TestUnknownPortsWeighEveryPort: a target group route first observed
// after its target left the listing has no ports; every remote source
// counts then (which can only lengthen a wait).
func TestUnknownPortsWeighEveryPort(t *testing.T) {
	const tail = 5 * time.Second
	rng := rand.New(rand.NewPCG(21, 22))
	outSince := t0.Add(time.Second)
	s := poisson(rng, "10.0.0.1", 5, t0, outSince.Add(3*tail))
	s.port = 9999
	now := outSince.Add(2 * tail)
	o := tgOut(tail)
	o.Ports = nil
	if a := Assess(now, o, outSince, evidenceAt(now, 0, nil, s)); a.Phase == PhaseClosed {
		t.Errorf("closed with a source still sending on an unknown port: %s", a.Route.Detail)
	}
	o.WeighTraffic = false
	if a := Assess(now, o, outSince, evidenceAt(now, 0, nil, s)); a.Phase != PhaseClosed {
		t.Errorf("a route that weighs no traffic did not close at its tail: %s", a.Route.Detail)
	}
}

// BenchmarkQuietBound reports the quiet bound (p50 over 300 streams) of a
// Poisson source watched 8 s by an agent looking every 100 ms, with an 8 s
// tail at the default ε, fitted as looks (what the agent sends) and as
// single arrivals (an older agent's summary of the same looks):
//
//	go test ./internal/gate -run X -bench QuietBound
func BenchmarkQuietBound(b *testing.B) {
	const (
		every   = 100 * time.Millisecond
		watched = 8 * time.Second
		tail    = 8 * time.Second
	)
	for _, rate := range []float64{2.8, 6.9, 17.4} {
		b.Run(fmt.Sprintf("rate=%.1f", rate), func(b *testing.B) {
			var looks, single []float64
			for range b.N {
				rng := rand.New(rand.NewPCG(1, uint64(rate*10)))
				looks, single = looks[:0], single[:0]
				for range 300 {
					s := sampled(poisson(rng, "10.0.0.1", rate, t0, t0.Add(watched)), t0, every)
					a := arrivals(s.times, t0.Add(watched))
					if a.N < MinArrivals {
						continue
					}
					single = append(single, FitArrivals(a, tail, DefaultEpsilon).Quiet.Seconds())
					a.Every = every
					looks = append(looks, FitArrivals(a, tail, DefaultEpsilon).Quiet.Seconds())
				}
			}
			slices.Sort(looks)
			slices.Sort(single)
			b.ReportMetric(looks[len(looks)/2], "looks-p50-s")
			b.ReportMetric(single[len(single)/2], "single-p50-s")
			b.ReportMetric(math.Log(rate*tail.Seconds()/DefaultEpsilon)/rate, "exact-rate-s")
		})
	}
}
