package evidence

import (
	"math"
	"time"
)

// The arrival model (see Fit, and docs/evidence.md):
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
	// Unfit, when set, says why the fit may not close a route before its
	// tail's end (see shape): the source's arrivals are not what the
	// models describe (bursts whose pauses outlast what its gaps foretell,
	// a rate that fell while the agent watched, a watch too short to tell),
	// or its agent does not report what the check needs. Its Quiet then
	// only lengthens a wait: a source still sending holds its route.
	Unfit string
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
	// Model is the models' own bound, before the shape check's and the
	// longest pauses' floors that Quiet adds (those guard a quiet against
	// bursts and falling rates): the silence a source sending at its
	// fitted rate makes unlikely, used to bound when a source stopped
	// (Sample.Stop).
	Model time.Duration
	// By says what set Quiet, as a phrase for a route's detail: "the
	// Poisson model", "8 × its longest gap (360ms)", ...
	By string
}

// What can set a fit's bound (Fit.By), besides the shape's floors.
const (
	byPoisson = "the Poisson model"
	byMarkov  = "the Markov model"
	byPause   = "twice its longest pause"
	byRecent  = "its latest arrivals' lower rate"
)

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
	if shapeCheck {
		// Counted one by one, not per look: an older agent's summary,
		// or the arrivals of unknown source.
		f.Unfit = "its arrivals were counted one by one, not per look (an older agent, or arrivals of unknown source)"
	}
	f.Low = chi2Lower(2*gaps) / (2 * span)
	if m := len(a.Last); m >= 4 {
		if rs := a.Last[0].Sub(a.Last[m-1]).Seconds(); rs > 0 {
			f.Low = min(f.Low, float64(m-1)/rs)
		}
	}
	if f.Low <= 0 || math.IsNaN(f.Low) {
		return Fit{Rate: f.Rate, Unfit: f.Unfit}
	}
	k := max(1, f.Rate*max(tail, 0).Seconds())
	f.By = byPoisson
	return f.done(a, math.Log(k/eps)/f.Low)
}

// done completes a fit with its quiet bound q (seconds): bursts break the
// model, many arrivals at once making a high rate out of a source that
// then pauses, so whatever the fit says the bound is at least burstGaps
// times the longest pause the source made while the agent watched. For a
// Poisson source that rarely binds (its longest of n gaps is about
// ln(n)/λ, the bound at least ln(1/ε)/λ, 14/λ).
func (f Fit) done(a Arrivals, q float64) Fit {
	pause := a.MaxGap.Seconds()
	for i := 1; i < len(a.Last); i++ {
		pause = max(pause, a.Last[i-1].Sub(a.Last[i]).Seconds())
	}
	if f.Model == 0 {
		f.Model = time.Duration(min(q, maxQuiet.Seconds()) * float64(time.Second))
	}
	if burstGaps*pause > q {
		q, f.By = burstGaps*pause, byPause
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
	perGap := eps / max(1, k/m*max(tail, 0).Seconds()/d)
	target := perGap
	if counted {
		target /= 2
	}
	lt := math.Log(target)
	maxN := math.Ceil(maxQuiet.Seconds() / d)
	// done ends the fit with the models' bound of n looks, once the
	// source's shape allows it (see shape).
	done := func(n float64, by string) Fit {
		f.By = by
		f.Model = time.Duration((min(n, maxN) + 1) * d * float64(time.Second))
		checked, checkedBy, why := shape(a, k, m, d, n, perGap, eps)
		if why != "" {
			f.Unfit = why
			return f.done(a, (min(n, maxN)+1)*d)
		}
		if checkedBy != "" {
			f.By = checkedBy
		}
		return f.done(a, (min(checked, maxN)+1)*d)
	}

	// The Poisson model: the mean of (1 − p)^n over p's posterior.
	q := beta{m - k + 0.5, k + 0.5} // 1 − p
	n, by := fewestLooks(maxN, q.moment, lt), byPoisson
	if r := len(a.Last); r >= 4 {
		if rs := a.Last[0].Sub(a.Last[r-1]).Seconds(); rs > 0 {
			kr, mr := float64(r-1), looks(rs)
			if recent := rate(min(kr, mr), mr); recent < f.Low {
				f.Low = recent
			}
			if nr := math.Ceil(lt / (-f.Low * d)); nr > n {
				n, by = nr, byRecent
			}
		}
	}
	if !counted {
		return done(n, by)
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
	sd := math.Sqrt(c.mean() * (1 - c.mean()) / (c.al + c.be + 1))
	if bursty := c.mean()-fitZ*sd > (m-k)/m; bursty && nm > n || !bursty && nm < n {
		return done(nm, byMarkov)
	}
	return done(n, by)
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
