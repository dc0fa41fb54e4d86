package gate

import (
	"fmt"
	"math"
	"net/netip"
	"slices"
	"time"
)

// Evidence is what the pod's own agent saw of its inbound traffic, with
// every source classified by the server: the ground truth of whether a
// load balancer still sends, weighed against a route's tail.
type Evidence struct {
	// At is when the server received the agent's summary. Every arrival is
	// before it, and silence is known only up to it: the gate never
	// extrapolates quiet past At.
	At time.Time
	// Sources is one entry per remote address and local port.
	Sources []Source
	// Unknown are arrivals the agent could not attribute (connections
	// that opened and closed between two of its samples). Their port and
	// source are unknown, and most are not a route's traffic: load
	// balancer health checks (the load balancer node closes each check's
	// connection) and kubelet probes close before a sample sees them, and
	// go on whether the pod is routed to or not. So they never hold a
	// route past its tail; they only stop the evidence from closing one
	// before its tail when they are as many as the arrivals it attributed
	// (see judgeTraffic).
	Unknown Arrivals
	// UnknownHoldsSources says that Unknown also holds sources the agent
	// could not list apart (a summary at its bound of sources merges the
	// rest into it): real, attributed arrivals, possibly a load balancer
	// node's. Unknown then weighs on every route as one more source, past
	// the tail too.
	UnknownHoldsSources bool
	// Epsilon is the chance of a false quiet the server accepts per route
	// and source: the probability that a source still sending at its
	// fitted rate stays silent for its quiet bound. Zero takes
	// DefaultEpsilon.
	Epsilon float64
}

// DefaultEpsilon is Evidence.Epsilon's default.
const DefaultEpsilon = 1e-6

// EvidenceRefresh is how old the evidence of a route that is out and open
// may grow before the gate wants it afresh (api.Route.AskBy): the close
// time the evidence gives can only be judged again on newer evidence (a
// source fitted since, or quiet since, closes the route sooner), and an
// agent reports only when it asks. So a route waiting on evidence has its
// agent ask about once a second, and closes at most about that long after
// the evidence would have allowed.
const EvidenceRefresh = time.Second

// Class says who a source is, as far as the server knows.
type Class string

const (
	// ClassNode is the pod's own node (its host addresses, its network
	// gateway): kubelet probes, SNAT, hostNetwork clients. Never a load
	// balancer's traffic.
	ClassNode Class = "node"
	// ClassRemote is anything else: load balancer nodes, outside clients,
	// other pods. A target group route weighs every remote source on its
	// ports.
	ClassRemote Class = "remote"
)

// Source is one remote address sending to one of the pod's ports.
type Source struct {
	Addr  netip.Addr
	Port  uint16
	Class Class
	Arrivals
}

// Arrivals is a count of arrivals and when they came.
type Arrivals struct {
	// N counts them while the agent watched.
	N int
	// First is the first counted; Last the latest ones, most recent first.
	First time.Time
	Last  []time.Time
	// MaxGap is the longest pause between two consecutive arrivals.
	MaxGap time.Duration
	// Every, when set, says the arrivals are samples: the agent looked
	// every Every (on average) and counted at most one arrival per look,
	// whatever came in between. FitArrivals then fits the chance that a
	// look finds data rather than a rate of single arrivals, which a busy
	// source would saturate. Zero: each arrival was counted on its own, or
	// several as one (an older agent's summary, Unknown).
	Every time.Duration
	// Looks and RecentLooks are the agent's own count of a sampled
	// source's looks: from the one that found its first arrival to the
	// one that found its latest, and over the arrivals in Last alone. They
	// let the fit weigh how regular the source is (fitSampled). Zero: not
	// counted (an older agent); the fit estimates the looks from the span.
	Looks, RecentLooks Looks
}

// Looks counts a sampled source's looks over a stretch of its arrivals.
type Looks struct {
	// N is the looks after the stretch's first arrival's, up to its
	// latest's (the number of arrivals less one, plus the empty ones).
	N int
	// Pauses is how many runs of empty looks there were among them.
	Pauses int
}

// latest is the time of the most recent arrival (zero if none).
func (a Arrivals) latest() time.Time {
	if len(a.Last) == 0 {
		return time.Time{}
	}
	return a.Last[0]
}

// The arrival model (see Fit and the README's "Traffic evidence"):
const (
	// MinArrivals is the fewest arrivals a source needs for a rate fit;
	// with fewer it gives no evidence and the route's tail applies.
	MinArrivals = 8
	// fitZ is the normal quantile of the fit's one-sided confidence
	// (99 %): the rate a quiet bound uses is the lower confidence limit,
	// so that a source whose few arrivals happened to come fast is not
	// taken for a busy one.
	fitZ = 2.326
	// maxQuiet caps a bound, so that the arithmetic stays in range; no
	// deadline is that long.
	maxQuiet = 24 * time.Hour
	// burstGaps: see FitArrivals.
	burstGaps = 2
)

// Fit is one source's arrival rate and the silence that proves, under the
// model, that it stopped sending.
type Fit struct {
	// OK is false when the source sent too little to fit a rate: fewer
	// than MinArrivals arrivals, or all at one instant.
	OK bool
	// Rate is the point estimate (arrivals per second over the span from
	// the first to the latest arrival; for sampled arrivals the Poisson
	// rate of the share of looks that found data); Low the lowest rate the
	// bound trusts: for single arrivals the lower 99 % confidence limit,
	// for sampled ones the point estimate (the bound weighs its
	// uncertainty itself, see fitSampled); either capped by the rate of
	// the latest arrivals alone (a source slowing down gets the slower
	// rate).
	Rate, Low float64
	// Quiet is the silence after its latest arrival that closes the
	// source: ln(K/ε)/Low, where K = max(1, Rate × tail) counts the gaps a
	// still-sending source would have during the route's tail, so that ε
	// bounds the chance of a false quiet over the whole tail, not one gap
	// (for sampled arrivals, see fitSampled); and at least twice the
	// longest pause the source made, for bursty sources.
	Quiet time.Duration
}

// FitArrivals fits a Poisson arrival model to a: while a source sends, its
// arrivals come at a steady rate λ, independently, so the chance that it
// stays silent for q while still sending is exp(−λq). For sampled arrivals
// (a.Every set) see fitSampled. Otherwise the bound uses a lower confidence
// limit of λ (Wilson–Hilferty approximation of the χ² quantile for N−1
// gaps), so a short or lucky sample lengthens the bound.
func FitArrivals(a Arrivals, tail time.Duration, eps float64) Fit {
	if eps <= 0 || eps >= 1 {
		eps = DefaultEpsilon
	}
	if a.N < MinArrivals || len(a.Last) == 0 {
		return Fit{}
	}
	span := a.Last[0].Sub(a.First).Seconds()
	if span <= 0 {
		return Fit{}
	}
	if a.Every > 0 {
		return fitSampled(a, span, tail, eps)
	}
	gaps := float64(a.N - 1)
	f := Fit{Rate: gaps / span}
	f.Low = chi2Lower(2*gaps) / (2 * span)
	if m := len(a.Last); m >= 4 {
		if rs := a.Last[0].Sub(a.Last[m-1]).Seconds(); rs > 0 {
			f.Low = min(f.Low, float64(m-1)/rs)
		}
	}
	if f.Low <= 0 || math.IsNaN(f.Low) {
		return Fit{Rate: f.Rate}
	}
	k := max(1, f.Rate*max(tail, 0).Seconds())
	return f.done(a, math.Log(k/eps)/f.Low)
}

// done completes a fit with its quiet bound q (seconds): bursts break the
// model, many arrivals at once making a high rate out of a source that
// then pauses, so whatever the fit says the bound is at least burstGaps
// times the longest pause the source made while the agent watched. For a
// Poisson source that rarely binds (its longest of n gaps is about
// ln(n)/λ, the bound at least ln(1/ε)/λ, 14/λ).
func (f Fit) done(a Arrivals, q float64) Fit {
	q = max(q, burstGaps*a.MaxGap.Seconds())
	for i := 1; i < len(a.Last); i++ {
		q = max(q, burstGaps*a.Last[i-1].Sub(a.Last[i]).Seconds())
	}
	f.Quiet = time.Duration(min(q, maxQuiet.Seconds()) * float64(time.Second))
	f.OK = true
	return f
}

// fitSampled fits sampled arrivals (a.Every set): the agent looks every
// Δ = a.Every and counts at most one arrival per look. For a Poisson source
// of rate λ a look finds data with chance p = 1 − exp(−λΔ), whatever the
// number of connections, and n looks in a row find none with chance
// (1 − p)^n = exp(−λnΔ): the same silence as the unsampled model, without
// the undercount of a busy source (several arrivals per look are one).
//
// p is estimated from the looks after the first arrival's up to the
// latest's: k = N − 1 found data out of m ≥ k (the agent's count, a.Looks,
// or else from the span over Δ, rounded up: more looks, a lower p). Rather
// than a confidence limit, the bound takes p's uncertainty whole: with
// p ~ Beta(k + ½, m − k + ½) (the posterior from Jeffreys' prior), the
// chance that a source still sending leaves n looks in a row empty is the
// mean of (1 − p)^n over it, B(k + ½, m − k + ½ + n) / B(k + ½, m − k + ½),
// and n is the fewest that brings it under ε/K, K = max(1, p × tail/Δ)
// being the silences a source still sending starts during the tail (one
// after each look with data), so that ε bounds a false quiet over the
// whole tail. The latest arrivals alone give a second estimate (a source
// slowing down gets the slower rate): its point estimate must bring
// (1 − p)^n under ε/K too.
//
// When the agent also counted the source's pauses (a.Looks set), a second
// model weighs how regular the source is: whether a look finds data
// depends on whether the previous one did (a two-state Markov chain). A
// load balancer node spreading its requests round robin sends each target
// more regularly than Poisson: an empty look is seldom followed by
// another, and the chance of a long silence falls much faster than
// (1 − p)^n. A bursty source is the opposite. With b the chance that a
// look with data is followed by an empty one and c that an empty one is,
// each with its Jeffreys posterior from the counted transitions (Pauses
// runs of empty looks start after k looks with data and end among m − k
// empty ones), n empty looks in a row come with chance E[b]·E[c^(n−1)];
// the latest arrivals' pauses give its point estimate as a second check,
// as above. Each model then has ε/2K, and the bound is the shorter of the
// two: when the source is at least as regular as Poisson both are sound,
// and a false quiet needs one of them to err (chance at most ε/2K + ε/2K).
// When the empty looks cluster beyond doubt (c's lower confidence limit
// above the share of empty looks: bursts), the Poisson model is the one
// that errs, and the Markov bound is taken however long.
//
// The silence starts at the latest arrival, which can lie anywhere in its
// own look's interval: the bound is n + 1 intervals.
func fitSampled(a Arrivals, span float64, tail time.Duration, eps float64) Fit {
	d := a.Every.Seconds()
	looks := func(span float64) float64 { return math.Floor(span/d) + 1 }
	m := looks(span)
	k := min(float64(a.N-1), m)
	counted := a.Looks.N > 0
	if counted {
		m = max(float64(a.Looks.N), k)
	}
	// A rate for the reports: p's point estimate as a Poisson rate, a
	// look with data every time read as one short of every time.
	rate := func(k, m float64) float64 { return -math.Log1p(-min(k/m, 1-1/(2*m))) / d }
	f := Fit{Rate: rate(k, m)}
	f.Low = f.Rate
	target := eps / max(1, k/m*max(tail, 0).Seconds()/d)
	if counted {
		target /= 2
	}
	lt := math.Log(target)
	maxN := math.Ceil(maxQuiet.Seconds() / d)

	// The Poisson model: the mean of (1 − p)^n over p's posterior.
	q := beta{m - k + 0.5, k + 0.5} // 1 − p
	n := fewestLooks(maxN, q.moment, lt)
	if r := len(a.Last); r >= 4 {
		if rs := a.Last[0].Sub(a.Last[r-1]).Seconds(); rs > 0 {
			kr, mr := float64(r-1), looks(rs)
			if recent := rate(min(kr, mr), mr); recent < f.Low {
				f.Low = recent
			}
			n = max(n, math.Ceil(lt/(-f.Low*d)))
		}
	}
	if !counted {
		return f.done(a, (min(n, maxN)+1)*d)
	}

	// The Markov model: transitions out of the k looks with data (the
	// first's and those before the latest's), Pauses of them to an empty
	// look; out of the m − k empty ones, Pauses back to data.
	b, c := transitions(k, m, a.Looks.Pauses)
	nm := 1 + fewestLooks(maxN, func(j float64) float64 {
		return math.Log(b.mean()) + c.moment(j)
	}, lt)
	if kr := float64(len(a.Last) - 1); kr >= 3 && a.RecentLooks.N > 0 {
		// The latest arrivals' own chain, as point estimates.
		mr := max(float64(a.RecentLooks.N), kr)
		br, cr := transitions(kr, mr, a.RecentLooks.Pauses)
		nm = max(nm, 1+math.Ceil((lt-math.Log(br.mean()))/math.Log(cr.mean())))
	}
	// A source whose empty looks cluster, beyond doubt at the fit's
	// confidence, is burstier than Poisson: the Markov bound is the
	// sound one then, however long.
	if sd := math.Sqrt(c.mean() * (1 - c.mean()) / (c.al + c.be + 1)); c.mean()-fitZ*sd > (m-k)/m {
		return f.done(a, (min(max(n, nm), maxN)+1)*d)
	}
	return f.done(a, (min(n, nm, maxN)+1)*d)
}

// beta is a Beta(al, be) distribution: a chance's posterior.
type beta struct{ al, be float64 }

func (x beta) mean() float64 { return x.al / (x.al + x.be) }

// moment is ln E[x^n]: ln B(al + n, be) − ln B(al, be).
func (x beta) moment(n float64) float64 {
	return lgamma(x.al+n) - lgamma(x.al) + lgamma(x.al+x.be) - lgamma(x.al+x.be+n)
}

// transitions is the posterior (from Jeffreys' prior) of a two-state
// chain of looks: b, the chance that a look with data is followed by an
// empty one, and c, that an empty one is, from k looks with data that
// have a successor and m − k empty ones, with pauses runs of empty looks
// (each begun after a look with data and ended by one). Counts that cannot
// all hold (looks estimated from a span, a capped count) are clamped: at
// least one pause when there are empty looks, at most one per look of
// either kind.
func transitions(k, m float64, pauses int) (b, c beta) {
	empty := max(m-k, 0)
	p := min(max(float64(pauses), min(1, empty)), k, empty)
	return beta{p + 0.5, k - p + 0.5}, beta{empty - p + 0.5, p + 0.5}
}

// fewestLooks is the fewest n in [0, maxN] with logChance(n) ≤ lt, for a
// logChance that falls with n (maxN if none).
func fewestLooks(maxN float64, logChance func(n float64) float64, lt float64) float64 {
	lo, hi := 0.0, maxN
	for lo < hi {
		mid := math.Floor((lo + hi) / 2)
		if logChance(mid) <= lt {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	return lo
}

func lgamma(x float64) float64 {
	v, _ := math.Lgamma(x)
	return v
}

// chi2Lower is the lower fitZ quantile of the χ² distribution with nu
// degrees of freedom (Wilson–Hilferty), never below zero.
func chi2Lower(nu float64) float64 {
	c := 2 / (9 * nu)
	v := 1 - c - fitZ*math.Sqrt(c)
	if v <= 0 {
		return 0
	}
	return nu * v * v * v
}

// quietJudgement is a route's traffic judged against its tail.
type quietJudgement struct {
	sources int // sources weighed (Unknown as one when it holds sources)
	fitted  int // of which fitted
	arrived int // their arrivals
	// closeAt is when the route closes if nothing arrives before: the
	// latest quiet end of the sources, or the tail's end when a source
	// could not be fitted (the tail applies) and nothing sent after it.
	closeAt time.Time
	// fresh is false when closeAt is after the evidence: the agent must
	// report again before the route closes.
	fresh bool
	// evidenceAt is when the server received the evidence (Evidence.At).
	evidenceAt time.Time
	// lengthened names why closeAt is past the tail's end.
	lengthened  string
	bound       time.Duration // the longest fitted quiet bound
	lastArrival time.Time     // the latest arrival of any source weighed
	// minRate and maxRate span the fitted sources' rates (per second).
	minRate, maxRate float64
	// fromNode counts the arrivals on the ports from the node's own
	// addresses (probes): shown, never weighed.
	fromNode int
	// unknown counts the arrivals of unknown source: shown, weighed only
	// against an early close; unknownBlocked says they blocked one.
	unknown        int
	unknownBlocked bool
}

// judgeTraffic weighs the evidence for a route on ports whose owner took
// the pod out at outSince with the given tail. ok is false when there is
// no evidence or the route does not weigh traffic: the tail alone decides.
// No ports means every port. With no
// source on the ports, the route closes at the tail's end on a report from
// then on.
//
// Per source: a fitted source is quiet once the evidence shows it silent
// for its bound, before or after the tail's end: the tail is a floor only
// for what evidence cannot judge, never a promise that beats it. One that
// could not be fitted gives no evidence: it is quiet at the tail's end if
// it sent nothing after it, else a tail after its latest arrival (it proved
// the tail too short). The route closes when every source is quiet; only
// when every source was fitted, and the unknown arrivals are fewer than the
// sources' own, may that be before the tail's end. Unknown arrivals are
// not a source (see Evidence.Unknown): they never keep a route open past
// its tail, unless they hold sources the agent could not list apart
// (Evidence.UnknownHoldsSources), which weigh as one more source. Every
// close needs evidence from at or after the close time (fresh): at the
// tail's end too, so that a source sending then is seen.
func judgeTraffic(ev *Evidence, applies bool, ports []uint16, outSince time.Time, tail time.Duration) (j quietJudgement, ok bool) {
	if ev == nil || !applies {
		return j, false
	}
	tailEnd := outSince.Add(tail)
	j.evidenceAt = ev.At
	var weigh []Arrivals
	for _, s := range ev.Sources {
		switch {
		case len(ports) > 0 && !slices.Contains(ports, s.Port) || s.N <= 0:
		case s.Class == ClassRemote:
			weigh = append(weigh, s.Arrivals)
		default:
			j.fromNode += s.N
		}
	}
	if ev.UnknownHoldsSources && ev.Unknown.N > 0 {
		weigh = append(weigh, ev.Unknown)
	} else {
		j.unknown = ev.Unknown.N
	}
	// No source yet is evidence too, once it is fresh: the agent's first
	// ask comes before the pod's traffic was watched for long, so the
	// route closes at the tail's end only on a report from then on.
	var end time.Time // the latest of the sources' quiet ends
	for _, a := range weigh {
		j.sources++
		j.arrived += a.N
		last := a.latest()
		j.lastArrival = later(j.lastArrival, last)
		f := FitArrivals(a, tail, ev.Epsilon)
		if f.OK {
			j.fitted++
			j.bound = max(j.bound, f.Quiet)
			if j.fitted == 1 || f.Rate < j.minRate {
				j.minRate = f.Rate
			}
			j.maxRate = max(j.maxRate, f.Rate)
		}
		var se time.Time
		switch {
		case f.OK:
			se = last.Add(f.Quiet)
		case last.After(tailEnd):
			se = last.Add(tail)
		default:
			se = tailEnd
		}
		switch {
		case last.After(tailEnd):
			j.lengthened = fmt.Sprintf("a source sent at %s, after the tail's end", stamp(last))
		case se.After(tailEnd) && j.lengthened == "":
			j.lengthened = "a source's quiet bound ends after the tail's end"
		}
		end = later(end, se)
	}
	allFitted := j.sources > 0 && j.fitted == j.sources
	j.unknownBlocked = allFitted && j.unknown >= j.arrived
	if allFitted && !j.unknownBlocked {
		j.closeAt = end
	} else {
		j.closeAt = later(end, tailEnd)
	}
	// Silence is known only up to the evidence: a close needs a report
	// from at or after the close time.
	j.fresh = !ev.At.Before(j.closeAt)
	return j, true
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// describe is the judgement as a phrase for a route's detail.
func (j quietJudgement) describe(eps float64) string {
	if eps <= 0 || eps >= 1 {
		eps = DefaultEpsilon
	}
	s := fmt.Sprintf("%d arrivals from %s", j.arrived, countNoun(j.sources, "source"))
	if j.fitted > 0 {
		s += fmt.Sprintf(" (%d fitted at %s, longest quiet bound %s at ε %.0e)", j.fitted, j.rates(), j.bound.Round(time.Millisecond), eps)
	}
	return s + j.nodeNote()
}

// nodeNote mentions the node's own arrivals, which the judgement ignored,
// and the unknown ones, which it did not count as a source.
func (j quietJudgement) nodeNote() string {
	var s string
	if j.fromNode > 0 {
		s += fmt.Sprintf(", %d arrivals from the node not counted", j.fromNode)
	}
	if j.unknown > 0 {
		s += fmt.Sprintf(", %d of unknown source (too short to see) not counted as a source", j.unknown)
	}
	return s
}

// rates is the fitted sources' rates: "2.8/s" or "2.1-3.4/s".
func (j quietJudgement) rates() string {
	if j.fitted == 0 {
		return "no rate"
	}
	if fmt.Sprintf("%.1f", j.minRate) == fmt.Sprintf("%.1f", j.maxRate) {
		return fmt.Sprintf("%.1f/s", j.maxRate)
	}
	return fmt.Sprintf("%.1f-%.1f/s", j.minRate, j.maxRate)
}
