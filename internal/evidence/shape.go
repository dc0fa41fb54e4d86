package evidence

import (
	"fmt"
	"math"
	"time"

	"draingate.dev/draingate/api"
)

// The shape of a source's silences (see gapBound and rateFell).
const (
	// minLongGaps is the fewest gaps at or past a threshold that gapBound
	// fits a tail to.
	minLongGaps = 3
	// outlierAlpha is the chance below which the longest gap, set against
	// the others, says the source pauses longer than they foretell.
	outlierAlpha = 1e-2
	// fellZ is how many standard deviations below the whole watch's share
	// of looks with data the latest arrivals' must fall to say the rate
	// fell.
	fellZ = 2.5
	// spanFactor is how many times its bound a source must have been
	// watched (from its first arrival to its latest) before a silence of
	// that bound says it stopped, at ε of spanEps and above; below, it
	// grows with log(1/ε) (spanFor).
	spanFactor = 3
	spanEps    = 5e-3
	// spanPerLog is how much the factor grows per factor e that ε shrinks:
	// bursts that chain for a longer run are rarer by about 5 times per
	// 0.75 more of the factor (docs/evidence.md, "Why the constants"), and
	// the factor keeps their rate near a tenth of ε.
	spanPerLog = 0.75 / 1.609
	// regularAlpha is the chance below which a source's longest gap,
	// set against as many gaps of random arrivals at its rate, says it
	// sends more regularly than random arrivals (see irregular).
	regularAlpha = 0.1
	// fallFactor is how many times its longest gap a silence must last
	// before it says that a source shown regular stopped: a rate that
	// falls at once by up to this much is not taken for a stop. The
	// whole watch's longest gap, not a mean: the longest gap is what holds
	// a source that pauses between bursts, which a mean forgets.
	fallFactor = 8
	// paceWatch is the watch past which the sudden-fall floor weighs the
	// source's pace instead of its longest gap (fallGap): half a minute,
	// long enough for a pausing source to have paused many times.
	paceWatch = 30 * time.Second
	// spreadZ is how many standard deviations above its mean the chance
	// that an empty look follows an empty one must stay under the share of
	// empty looks for fallGap to weigh the pace (99.9 %).
	spreadZ = 3.09
	// longPause is where a bound's pause stops being a figure worth
	// printing: the source is simply too bursty.
	longPause = 10 * time.Minute
	// minHeavyGaps, heavyAlpha, heavyReject: the heavy-tail test (see
	// gapBound).
	minHeavyGaps = 5
	heavyAlpha   = 1.5
	heavyReject  = 1e-2
)

// shapeCheck turns the shape check on; tests turn it off to show what it
// guards (export_test.go).
var shapeCheck = true

// gapBound is how many empty looks in a row, after the latest look with
// data, a sampled source still sending leaves with chance at most target,
// judged from its long gaps alone (gaps in looks between consecutive looks
// with data, binned: api.SourceTraffic.Gaps), or why its gaps cannot bound
// it.
//
// The Poisson and Markov fits (fitSampled) take a source's gaps to be all
// of one kind. A source that sends bursts between pauses of their own
// length (a batch client, page loads that fan out, retries) has two: many
// short gaps inside its bursts, a few long ones between. Fitted to all of
// them, either model foretells the short ones and not the pauses, and a
// pause then passes for the source having stopped. So the long gaps are
// weighed on their own: for each threshold u (2, 4, 8, ... looks) with at
// least minLongGaps gaps at or past it, a gap's excess over u is taken as
// geometric, its chance c to go on one more look unknown (Jeffreys'
// prior): from r such gaps whose excesses sum to S, c ~ Beta(S + ½, r + ½)
// and the chance that the next gap's excess reaches x is E[c^x]; the
// chance that a gap reaches u at all is (r + ½)/(gaps + 1). The silence
// that brings their product under target is that threshold's bound, and
// the bound is the longest over the thresholds: a source whose gaps are
// all of one kind gets about what the models give, a bursty one the bound
// of its pauses. Few long gaps leave c uncertain: a source seen to pause
// two or three times gets a bound longer than a tail, and so no early
// close.
//
// Then two checks. The longest gap, set against the others: if, fitted
// without it, they give a gap that long a chance under outlierAlpha among
// as many gaps, the source pauses longer than anything else it did
// foretells, and its gaps cannot bound it. And heavy tails: at the
// highest threshold with minHeavyGaps gaps past it, a Pareto tail of index
// heavyAlpha would have a share 2^−α of them reach twice the threshold;
// unless those that did are too few for that (chance under heavyReject),
// the tail may be that heavy, and the bound is at least the Pareto one,
// the silence x with π (x/u)^−α ≤ target.
func gapBound(gaps []api.GapBin, longest, target, maxN float64) (n float64, why string) {
	var total int
	for _, b := range gaps {
		total += b.N
	}
	// tail is the gaps at or past bin j's threshold, less one of length
	// skip (if it is there): how many, and their excesses' sum.
	tail := func(j int, skip float64) (r, s float64) {
		u := float64(int(1) << j)
		for _, b := range gaps[j:] {
			r += float64(b.N)
			s += float64(b.Sum) - u*float64(b.N)
		}
		if skip >= u {
			r, s = r-1, s-(skip-u)
		}
		return r, s
	}
	lt := math.Log(target)
	bins := min(len(gaps), api.GapBins)
	for j := 1; j < bins; j++ {
		r, s := tail(j, 0)
		if r < minLongGaps {
			break
		}
		u := float64(int(1) << j)
		lpi := math.Log((r + 0.5) / (float64(total) + 1))
		c := beta{s + 0.5, r + 0.5}
		x := fewestLooks(maxN, func(x float64) float64 { return lpi + c.moment(x) }, lt)
		n = max(n, u-1+x)
		// The longest gap against the others at this threshold: among
		// as many gaps, (lr + ½) of them reach u, each going on past the
		// longest with the others' chance.
		if lr, ls := tail(j, longest); lr >= minLongGaps-1 && longest >= u {
			lc := beta{ls + 0.5, lr + 0.5}
			if p := (lr + 0.5) * math.Exp(lc.moment(longest-u)); p < outlierAlpha {
				return 0, fmt.Sprintf("bursty: a gap of %.0f looks, longer than its other gaps foretell", longest)
			}
		}
	}
	for j := bins - 1; j >= 1; j-- {
		r, _ := tail(j, 0)
		if r < minHeavyGaps {
			continue
		}
		reached := 0.0
		if j+1 < bins {
			reached, _ = tail(j+1, 0)
		}
		if binomialAtMost(int(reached), int(r), math.Pow(2, -heavyAlpha)) >= heavyReject {
			u := float64(int(1) << j)
			pi := (r + 0.5) / (float64(total) + 1)
			n = max(n, u*math.Pow(max(pi/target, 1), 1/heavyAlpha))
		}
		break
	}
	return n, ""
}

// binomialAtMost is P(X ≤ x) for X ~ Binomial(n, p).
func binomialAtMost(x, n int, p float64) float64 {
	var sum float64
	for i := 0; i <= x && i <= n; i++ {
		lc := lgamma(float64(n+1)) - lgamma(float64(i+1)) - lgamma(float64(n-i+1))
		sum += math.Exp(lc + float64(i)*math.Log(p) + float64(n-i)*math.Log1p(-p))
	}
	return sum
}

// recentShare is the latest arrivals' share of looks with data (the gaps
// of Last, over RecentLooks) and how many looks it is out of; ok is false
// when the agent did not count them.
func recentShare(a Arrivals) (p, looks float64, ok bool) {
	r := a.RecentLooks
	if r.N <= 0 || len(a.Last) < 2 {
		return 0, 0, false
	}
	kr := float64(len(a.Last) - 1)
	looks = max(float64(r.N), kr)
	return kr / looks, looks, true
}

// rateFell says whether the latest arrivals (recentShare) found data in a
// share of looks below the whole watch's share p by more than fellZ
// standard deviations: a source slowing down while watched, whose next
// gaps the whole watch's fit would take for silence.
func rateFell(a Arrivals, p, d float64) string {
	pr, mr, ok := recentShare(a)
	if !ok {
		return ""
	}
	if sd := math.Sqrt(p * (1 - p) / mr); pr >= p-fellZ*sd {
		return ""
	}
	rate := func(p float64) float64 { return -math.Log1p(-min(p, 1-1/(2*mr))) / d }
	return fmt.Sprintf("its rate fell while watched (%.1f/s lately, %.1f/s overall)", rate(pr), rate(p))
}

// shape applies the shape check to sampled arrivals with looks counted
// (k with data of m, looks of d seconds) and the bound n (looks) the
// models gave: the longer bound the gaps need and what set it ("" for the
// models), or why the source gives no early close. target is the chance
// the bound must bring a false quiet under. In order: the rate must not
// have fallen while watched (rateFell), the gaps must be more regular than
// random arrivals' (irregular) and bounded by their long ones (gapBound),
// that bound scaled to the latest arrivals' rate (recentBound); it is then
// at least fallFactor times the longest gap or the pace (fallGap: a sudden
// fall of the rate, which no earlier gap foretells, up to that factor),
// and the span watched at least spanFor(ε) times it (one burst seen is not
// a source's shape).
func shape(a Arrivals, k, m, d, n, target, eps float64) (_ float64, by, why string) {
	if !shapeCheck {
		return n, "", ""
	}
	if a.Gaps == nil {
		return 0, "", "its agent does not count its gaps (an older version)"
	}
	if why := rateFell(a, k/m, d); why != "" {
		return 0, "", why
	}
	longest := math.Round(a.MaxGap.Seconds() / d)
	if why := irregular(a.Gaps, longest, k, m); why != "" {
		return 0, "", why
	}
	maxN := math.Ceil(maxQuiet.Seconds() / d)
	g, why := gapBound(a.Gaps, longest, target, maxN)
	if why != "" {
		return 0, "", why
	}
	if g > n {
		n, by = g, "its long gaps"
	}
	// The models and the long gaps at the latest arrivals' rate, when it
	// is lower; not the sudden-fall floor, whose gap is already at least
	// the latest arrivals' (their mean gap is no longer than the longest,
	// and the pace takes it): scaled again, a slowdown of a fifth would
	// hold a source for a fall of 10 times its latest pace, not 8.
	if r := recentBound(a, k/m, n); r > n {
		n, by = r, byRecent
	}
	span := a.Last[0].Sub(a.First).Seconds()
	gap, pace := fallGap(a, longest, k, m, span, d)
	if fall := fallFactor * gap; fall > n {
		what := "longest gap"
		if pace {
			what = "pace"
		}
		n, by = fall, fmt.Sprintf("%d × its %s (%s)", fallFactor, what, time.Duration(gap*d*float64(time.Second)).Round(10*time.Millisecond))
	}
	n = min(n, maxN)
	// A source seen for a moment (one burst) has not shown how long it
	// pauses: its silence must be short against how long it was watched.
	if span < spanFor(eps)*(n+1)*d {
		pause := time.Duration((n + 1) * d * float64(time.Second))
		if pause > longPause {
			return 0, "", fmt.Sprintf("watched for %.1fs, its gaps make pauses of over %s plausible: too bursty to tell a pause from a stop", span, longPause)
		}
		return 0, "", fmt.Sprintf("watched for %.1fs, too short to tell a pause of %s from a stop", span, pause.Round(100*time.Millisecond))
	}
	return n, by, ""
}

// fallGap is the gap (in looks) the sudden-fall floor multiplies: the
// longest the source showed, or, over a watch of paceWatch or more of a
// source that spreads its arrivals (round robin), its pace: the longer of
// its whole watch's and its latest arrivals' mean gap.
//
// Over a watch of seconds the longest gap stands in for what the source's
// gaps cannot show yet: a source seen to pause once between bursts has a
// longest gap of that pause, and the floor holds it however regular it was
// otherwise. Over half a minute and more the gaps show it: a source that
// pauses has paused many times, and gapBound fits those pauses (its long
// gaps) on their own, the longest among them checked against the others.
// What is left for the floor is a fall of the pace itself, after the
// latest arrival, which no gap foretells. And the longest gap of a long
// watch is no pace: a regular source's is now and then a stall (everything
// upstream paused a few hundred milliseconds, its requests then came
// together), and 8 times it makes every bound seconds long where the
// models and the long gaps give about one. Why a watch's length and not a
// count of long gaps decides, and why half a minute: docs/evidence.md, "Why
// the constants".
func fallGap(a Arrivals, longest, k, m, span, d float64) (gap float64, pace bool) {
	if span < paceWatch.Seconds() || k <= 0 || a.Looks.N <= 0 {
		return longest, false
	}
	// Only a source shown to spread its arrivals, beyond doubt: an empty
	// look followed by another less often than random arrivals' would be
	// (a chance c, its upper confidence limit, against q, the share of
	// empty looks, which is c for random arrivals). Random
	// arrivals pass the regularity check one time in ten; their longest
	// gap is what holds them when their rate falls (their pace does not),
	// and bursts cluster their empty looks.
	_, c := transitions(k, m, a.Looks.Pauses)
	sd := math.Sqrt(c.mean() * (1 - c.mean()) / (c.al + c.be + 1))
	if q := (m - k) / m; c.mean()+spreadZ*sd >= q {
		return longest, false
	}
	gap = m / k
	if pr, _, ok := recentShare(a); ok && pr > 0 {
		gap = max(gap, 1/pr)
	}
	return gap, true
}

// spanFor is the span rule's factor at ε: spanFactor, and more below
// spanEps, so that a run of bursts chained for that long is rarer than ε.
// A false quiet that the span rule lets through does not get rarer with ε
// otherwise, whatever the bound (docs/evidence.md).
func spanFor(eps float64) float64 {
	if eps <= 0 || eps >= spanEps {
		return spanFactor
	}
	return spanFactor + spanPerLog*math.Log(spanEps/eps)
}

// recentBound is the models' bound n at the latest arrivals' share of
// looks with data (recentShare) instead of the whole watch's p, when it is
// lower: a source slowing down, whose latest gaps are longer than the
// watch's, gets a bound as much longer as its rate is lower.
func recentBound(a Arrivals, p, n float64) float64 {
	pr, _, ok := recentShare(a)
	if !ok || p >= 1 || pr >= p || pr <= 0 {
		return n
	}
	return n * math.Log1p(-p) / math.Log1p(-pr)
}

// irregular says why a source's gaps do not show it sending more
// regularly than random arrivals ("" when they do). The models bound the
// silence of a source that keeps its shape; what they cannot see is a
// source that sends in bursts and pauses longer than anything the watch
// caught, and over a watch of seconds bursts of random arrivals between
// pauses of a second look just like random arrivals. A load balancer node
// spreading its requests over its targets
// sends each one much more regularly than random arrivals, and that can
// be told: n gaps of random arrivals sampled in looks are geometric, with
// chance q that a look is empty ((m − k + ½)/(m + 1)), and all of them stay
// at or under the longest one seen, L looks, with chance (1 − q^L)^n. Only
// when that chance is under regularAlpha are the gaps regular beyond
// what random arrivals do, and the source may close its route early.
// A source found busy at every look (q ≈ 0) cannot show it: the looks are
// too coarse for its gaps.
func irregular(gaps []api.GapBin, longest, k, m float64) string {
	var n float64
	for _, b := range gaps {
		n += float64(b.N)
	}
	q := (m - k + 0.5) / (m + 1)
	lp := n * math.Log1p(-math.Pow(q, max(longest, 1)))
	if lp < math.Log(regularAlpha) {
		return ""
	}
	return fmt.Sprintf("its gaps are no more regular than random arrivals' (the longest of %.0f is %.0f looks), and such traffic can pause longer than a watch of seconds shows", n, longest)
}
