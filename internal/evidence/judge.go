package evidence

import (
	"fmt"
	"net/netip"
	"slices"
	"time"

	"draingate.dev/draingate/api"
)

// Route is a route whose owner took the pod out, as the gate hands it to
// Judge.
type Route struct {
	// OutSince is when the owner was first seen to take the pod out; the
	// tail counts from it.
	OutSince time.Time
	// Tail is the route's propagation tail (negative counts as zero);
	// TailName names it in sentences ("ALB").
	Tail     time.Duration
	TailName string
	// Ports are the pod's ports the route's traffic arrives on; empty,
	// every port counts (which can only lengthen a wait).
	Ports []uint16
	// NewConns says the route's senders route flows, not requests (an AWS
	// NLB): only a new connection shows a sender still routes to the pod.
	// Bytes on a connection already open are the app's own to end (the
	// load balancer keeps passing a draining target the flows it had), so
	// they neither hold the route nor count as a sender seen. A source
	// whose new connections were not counted (an older agent) weighs all
	// its arrivals, which can only lengthen the wait.
	NewConns bool
	// Senders is who may send the route's traffic, as far as its owner
	// knows.
	Senders Senders
	// EarlyClose lets the evidence close the route before its tail's end
	// when every source was fitted, trusted and quiet and every listed
	// sender was seen (an opt-in: docs/evidence.md says what it cannot
	// see). Unset, the default, the evidence only lengthens: the route
	// closes at its tail's end, or later while a source still sends.
	EarlyClose bool
	// LateChance, without the early close, is the measured chance that a
	// sender still sends at the tail's end (internal/learn: at most 1 −
	// its quantile once the tail is the measured bound); 0 or 1: not
	// known. A source quiet at the tail's end then needs a silence whose
	// chance, for a source still sending, times LateChance is under ε: the
	// chance of a false quiet is that of a late sender staying silent.
	LateChance float64
	// What is the owner's word, one sentence, for the detail.
	What string
	// Err is the owner's last read error: a route whose read failed never
	// closes, whatever the evidence says.
	Err error
}

// Senders is who may send a route's traffic. The evidence can show that
// the sources it saw went quiet; only a list of every sender can show that
// none is missing: a load balancer node that sent the pod nothing while
// its agent watched (a new node, one with little traffic for this pod)
// may still route to it. So an early close (before the tail's end) needs
// that list, and each sender on it seen and fitted.
type Senders struct {
	// Known says Addrs lists every node of the route's load balancer. Only
	// their arrivals are then the route's traffic (in-cluster clients
	// calling the pod on the same port are not), and an early close needs
	// each of them fitted; one unseen or too sparse to fit keeps the tail
	// as the floor.
	Known bool
	Addrs []netip.Addr
	// Maybe, with Known, lists nodes of the load balancer that should not
	// send to the pod but may (another zone's, with cross-zone load
	// balancing off: a setting that can change): their arrivals are the
	// route's traffic, weighed like the others', but an early close does
	// not need them seen.
	Maybe []netip.Addr
	// SeenAreAll, with Known false, takes the remote sources the agent
	// saw for all the senders the route has: the rule before senders were
	// listed, which a node that sent nothing while the agent watched
	// breaks. Kept for the kinds that do not list their senders yet.
	// Neither set: the evidence may lengthen the route's wait (a source
	// still sending at the tail's end holds it), never shorten it.
	SeenAreAll bool
	// Why, with neither set, says why the senders are not known, as a
	// phrase for the route's detail ("the load balancer's nodes are not
	// known: ..."); empty, a generic phrase.
	Why string
}

// Closing is a route judged on the evidence at one time.
type Closing struct {
	// Closed says the route is closed; ClosedBy then says what closed it
	// (api.ClosedByTraffic, or api.ClosedByTail when the evidence let the
	// tail decide) and Why says so as a phrase for the release message:
	// "quiet 7.6s after 28 arrivals from 3 sources (…), 10.4s before its
	// tail's end".
	Closed        bool
	ClosedBy, Why string
	// Detail is one sentence saying what the evidence showed and what it
	// waits for.
	Detail string
	// QuietBy is when the route closes if nothing arrives before (nil
	// while the owner's last read failed); AskBy, when set, is when the
	// evidence has grown old enough (Refresh) that a newer report may
	// close the route sooner: the agent should ask by then.
	QuietBy, AskBy *time.Time
	// LastArrival is the latest arrival weighed (zero if none): should the
	// evidence go missing, the route is held a tail after it.
	LastArrival time.Time
	// Samples says, per source weighed, how late it sent after the route
	// went out, for internal/learn to measure the load balancer's
	// propagation with.
	Samples []Sample
	// Unlisted are the remote sources on the route's ports that are not
	// on its senders' list (Senders.Known): weighed as its senders, and a
	// sign that the list is out of date (a load balancer that scaled out).
	Unlisted []netip.Addr
}

// Sample is what one source on a route's ports showed of when it stopped
// sending to the pod (a load balancer node learning that the target went
// out).
type Sample struct {
	Addr netip.Addr
	// Last is its latest arrival: it sent at least that late.
	Last time.Time
	// Stop is when it stopped at the latest, with chance 1 − SampleEpsilon
	// of being right for a source still sending at its fitted rate: its
	// latest arrival plus its models' bound at SampleEpsilon (Fit.Model:
	// without the floors that guard a quiet against bursts and falling
	// rates). A source too
	// sparse to fit is given the route's tail after its latest arrival (it
	// shows nothing shorter). A sparse source's latest arrival can lie well
	// before its stop; Stop is what accounts for that.
	Stop time.Time
	// Sending says it had not gone quiet when judged (a pod released at its
	// deadline while it sent): its stop is later than anything seen.
	Sending bool

	quietEnd time.Time // when weigh takes it for quiet
}

// SampleEpsilon is the chance that a Sample's Stop is earlier than the
// source's stop, for a source sending at its fitted rate.
const SampleEpsilon = 0.01

// Judge judges, at now, a route whose owner took the pod out. ok is false
// when there is no evidence (a nil ev): the tail alone decides then.
//
// The rules: the route closes once every source weighed has gone quiet
// (see weigh): before the tail's end only if every one was fitted, and the
// unknown arrivals are fewer than the attributed ones; past it for as long
// as a source keeps sending. Quiet is known only up to Evidence.At: a route
// whose sources' quiet ends after the evidence stays open until the agent
// reports again. A route whose owner's last read failed stays open.
func (ev *Evidence) Judge(now time.Time, r Route) (c Closing, ok bool) {
	if ev == nil {
		return c, false
	}
	tail := max(r.Tail, 0)
	end := r.OutSince.Add(tail)
	j := ev.weigh(r, tail)
	c.LastArrival, c.Unlisted = j.lastArrival, j.unlisted
	for _, s := range j.samples {
		s.Sending = now.Before(s.quietEnd)
		c.Samples = append(c.Samples, s)
	}
	what := fmt.Sprintf("%s since %s; the %s tail (%s) ends at %s; the pod's traffic: %s",
		r.What, api.Stamp(r.OutSince), r.TailName, tail, api.Stamp(end), j.describe(ev.Epsilon))
	if r.Err == nil {
		at := j.closeAt
		c.QuietBy = &at
		if ask := j.evidenceAt.Add(Refresh); ask.Before(at) && now.Before(at) {
			c.AskBy = &ask
		}
	}
	switch {
	case now.Before(j.closeAt):
		c.Detail = what + fmt.Sprintf(": closes at %s if nothing arrives before", api.Stamp(j.closeAt))
		if j.lengthened != "" {
			c.Detail += " (" + j.lengthened + ")"
		}
		if j.untrusted != "" && !j.closeAt.After(r.OutSince.Add(tail)) {
			c.Detail += "; not before the tail's end: " + j.untrusted
		}
		c.Detail += api.LastReadFailed(r.Err)
		return c, true
	case !j.fresh:
		c.Detail = what + fmt.Sprintf(": quiet from %s if the agent's next report shows nothing new", api.Stamp(j.closeAt)) + api.LastReadFailed(r.Err)
		return c, true
	case r.Err != nil:
		c.Detail = what + fmt.Sprintf(": quiet since %s, but the last read failed (%v): "+
			"open until a successful read confirms the pod is still out", api.Stamp(j.closeAt), r.Err)
		return c, true
	}
	c.Closed = true
	c.ClosedBy, c.Detail, c.Why = j.closed(now, end, what, r.TailName, tail)
	return c, true
}

// closed says what closed a route that closes now: the evidence, before or
// past the tail's end, or the tail when the evidence left it to decide.
func (j quietJudgement) closed(now, end time.Time, what, tailName string, tail time.Duration) (by, detail, why string) {
	arrivals, nothing, none := "arrivals", "nothing having arrived on its ports", "no traffic on its ports"
	if j.conns {
		arrivals, nothing, none = "new connections", "no new connection having opened on its ports", "no new connection on its ports"
	}
	fit := fmt.Sprintf("%d fitted at %s, bound %s%s", j.fitted, j.rates(), j.bound.Round(100*time.Millisecond), j.boundWhy())
	if j.fitted == 0 {
		// Each held by its own gaps or a tail after it (weigh).
		fit = "none trusted"
		if j.untrusted != "" {
			fit += "; " + j.untrusted
		}
	}
	quiet := fmt.Sprintf("quiet %s after %d %s from %s (%s)", now.Sub(j.lastArrival).Round(100*time.Millisecond),
		j.arrived, arrivals, api.CountNoun(j.sources, "source"), fit)
	by = api.ClosedByTail
	switch {
	case j.closeAt.Before(end):
		by = api.ClosedByTraffic
		detail = what + fmt.Sprintf(": every source quiet at %s, %s before the tail's end", api.Stamp(j.closeAt), end.Sub(j.closeAt).Round(time.Millisecond))
		why = fmt.Sprintf("%s, %s before its tail's end", quiet, end.Sub(now).Round(100*time.Millisecond))
	case j.closeAt.After(end):
		by = api.ClosedByTraffic
		detail = what + fmt.Sprintf(": open past the tail's end until %s, as %s", api.Stamp(j.closeAt), j.lengthened)
		why = fmt.Sprintf("%s, %s past the end of its %s tail (%s)", quiet, now.Sub(end).Round(100*time.Millisecond), tailName, tail)
	case j.sources == 0:
		detail = what + ": closed at the tail's end, " + nothing
		why = fmt.Sprintf("its %s tail (%s; %s)", tailName, tail, none)
	case !j.early:
		detail = what + ": closed at the tail's end, every source quiet by then (the evidence only lengthens a tail)"
		why = fmt.Sprintf("its %s tail (%s; %s quiet by then)", tailName, tail, api.CountNoun(j.sources, "source"))
	case j.unknownBlocked:
		detail = what + ": closed at the tail's end (as many arrivals of unknown source as attributed ones: the evidence does not shorten the tail)"
		why = fmt.Sprintf("its %s tail (%s; too many arrivals of unknown source)", tailName, tail)
	case j.untrusted != "":
		detail = what + ": closed at the tail's end (" + j.untrusted + ": the evidence does not shorten the tail)"
		why = fmt.Sprintf("its %s tail (%s; %s)", tailName, tail, j.untrusted)
	default:
		detail = what + ": closed at the tail's end (a source too sparse to fit a rate gives no evidence)"
		why = fmt.Sprintf("its %s tail (%s; a source too sparse to fit a rate)", tailName, tail)
	}
	return by, detail, why + j.nodeNote()
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
	boundBy     string        // what set it (Fit.By)
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
	// inCluster counts the arrivals on the ports from other pods of the
	// cluster (ClassCluster): shown, never weighed.
	inCluster int
	// unlisted are the remote sources on the ports missing from the
	// route's senders' list (Senders.Known), weighed as its senders;
	// others counts their arrivals.
	unlisted []netip.Addr
	others   int
	// early says the route may close before its tail's end
	// (Route.EarlyClose).
	early bool
	// samples are the sources' Samples.
	// conns says the arrivals weighed are new connections (Route.NewConns,
	// from an agent that counted them); open counts the flows from the
	// route's senders still established at the agent's latest look: the
	// app's to close, shown, never weighed.
	conns   bool
	open    int
	samples []Sample
	// untrusted, when set, says why the evidence may not close the route
	// before its tail's end although every source it weighed was fitted:
	// its senders are not known, one was not seen, or a source's shape
	// is one the model cannot bound.
	untrusted string
}

// weigh weighs the evidence for route r with the given tail. No ports
// means every port. With no source on the ports, the route closes at the
// tail's end on a report from then on.
//
// Per source: a fitted source is quiet once the evidence shows it silent
// for its bound, before or after the tail's end: the tail is a floor only
// for what evidence cannot judge, never a promise that beats it. One that
// could not be fitted (too sparse) gives no evidence: it is quiet at the
// tail's end if it sent nothing after it, else a tail after its latest
// arrival (it proved the tail too short); one fitted but not trusted (of a
// shape the models cannot bound, or from an older agent: Fit.Unfit) is
// held so too, and at least its bound after its latest arrival. The route
// closes when every source is quiet; that
// may be before the tail's end only when every source was fitted, the
// unknown arrivals are fewer than the sources' own, and the route's
// senders are known, each of them seen (Senders). Unknown arrivals are
// not a source (see Evidence.Unknown): they never keep a route open past
// its tail, unless they hold sources the agent could not list apart
// (Evidence.UnknownHoldsSources), which weigh as one more source. Every
// close needs evidence from at or after the close time (fresh): at the
// tail's end too, so that a source sending then is seen.
func (ev *Evidence) weigh(r Route, tail time.Duration) (j quietJudgement) {
	tailEnd := r.OutSince.Add(tail)
	j.evidenceAt = ev.At
	var weigh []Arrivals
	var addrs []netip.Addr // weigh's sources' addresses (none for Unknown)
	seen := map[netip.Addr]bool{}
	for _, s := range ev.Sources {
		a := s.Arrivals
		if r.NewConns && s.Conns != nil {
			a = *s.Conns
			j.conns = true
			if s.Class == ClassRemote && (len(r.Ports) == 0 || slices.Contains(r.Ports, s.Port)) &&
				r.Senders.sends(s.Addr) {
				j.open += s.Open
			}
		}
		switch {
		case len(r.Ports) > 0 && !slices.Contains(r.Ports, s.Port) || a.N <= 0:
		case s.Class == ClassCluster:
			j.inCluster += a.N
		case s.Class != ClassRemote:
			j.fromNode += a.N
		default:
			if !r.Senders.sends(s.Addr) {
				// Not on the list: a node the list missed (a load
				// balancer that scaled out since it was read), or a
				// client calling the pod directly. Either may still
				// send, so it is weighed like a listed node.
				j.others += a.N
				j.unlisted = append(j.unlisted, s.Addr)
			}
			weigh = append(weigh, a)
			addrs = append(addrs, s.Addr)
			seen[s.Addr] = true
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
	for i, a := range weigh {
		j.sources++
		j.arrived += a.N
		last := a.latest()
		j.lastArrival = later(j.lastArrival, last)
		f := FitArrivals(a, tail, ev.Epsilon)
		if f.OK && f.Unfit == "" && r.OutSince.Sub(last) > f.Quiet {
			// Silent past its bound while the pod was still in the
			// route: a pause the fit did not foresee (clients idle),
			// not the load balancer leaving the pod, which it had not
			// yet. With a watch from the pod's start such a source is
			// seen, and quiet already when the route goes out; it may
			// send again while the route still routes.
			f.Unfit = fmt.Sprintf("silent for %s before its route went out, past its bound of %s: a pause while still routed",
				r.OutSince.Sub(last).Round(100*time.Millisecond), f.Quiet.Round(100*time.Millisecond))
		}
		trusted := f.OK && f.Unfit == ""
		if trusted {
			j.fitted++
			if f.Quiet >= j.bound {
				j.bound, j.boundBy = f.Quiet, f.By
			}
			if j.fitted == 1 || f.Rate < j.minRate {
				j.minRate = f.Rate
			}
			j.maxRate = max(j.maxRate, f.Rate)
		} else if f.Unfit != "" && j.untrusted == "" {
			j.untrusted = f.Unfit
		}
		var se time.Time
		switch {
		case trusted && !r.EarlyClose && r.LateChance > 0 && r.LateChance < 1 && !last.After(tailEnd):
			// Quiet by the tail's end is a false quiet only for a
			// sender that is late, which the measured tail makes rare:
			// its silence needs a chance under ε/LateChance.
			q := FitArrivals(a, tail, min(ev.eps()/r.LateChance, SampleEpsilon)).Quiet
			se = later(last, r.OutSince).Add(q)
		case trusted:
			// Silence counts from the route going out: before it, the
			// load balancer still routed to the pod.
			se = later(last, r.OutSince).Add(f.Quiet)
		case last.After(tailEnd):
			// It proved the tail too short.
			se = last.Add(tail)
		default:
			se = tailEnd
		}
		if f.OK && !trusted {
			// A bound the shape check does not trust still holds a
			// source that sends, up to a tail after its latest arrival:
			// a bursty source's bound can run to hours, and the tail is
			// what the load balancer promises once it stops sending.
			// At least the sudden-fall floor too (fallFactor times its
			// longest gap), as for a trusted source: a source still
			// sending at the tail's end whose rate falls then is no
			// rarer for being untrusted.
			se = later(se, last.Add(min(max(f.Quiet, fallFactor*a.MaxGap), tail)))
		}
		if !trusted && last.After(r.OutSince) {
			// A source with no bound that sent after the route went out
			// showed it still routed then (a node that learns late, and
			// sends little): its silence counts only once it outlasts
			// its own gaps, twice its longest (at most a tail).
			se = later(se, last.Add(min(sparseGaps*a.MaxGap, tail)))
		}
		switch {
		case last.After(tailEnd):
			j.lengthened = fmt.Sprintf("a source sent at %s, after the tail's end", api.Stamp(last))
		case se.After(tailEnd) && j.lengthened == "":
			j.lengthened = "a source's quiet bound ends after the tail's end"
		}
		end = later(end, se)
		if i < len(addrs) {
			j.samples = append(j.samples, sampleOf(addrs[i], a, last, tail, se))
		}
	}
	allFitted := j.sources > 0 && j.fitted == j.sources
	j.unknownBlocked = allFitted && j.unknown >= j.arrived
	if allFitted && !j.unknownBlocked {
		j.untrusted = r.Senders.untrusted(seen)
		if j.untrusted == "" && len(j.unlisted) > 0 {
			j.untrusted = fmt.Sprintf("%s not on the load balancer's node list sent (%s): the list is out of date",
				api.CountNoun(len(j.unlisted), "source"), j.unlisted[0])
		}
	}
	j.early = r.EarlyClose
	if r.EarlyClose && allFitted && !j.unknownBlocked && j.untrusted == "" {
		j.closeAt = end
	} else {
		j.closeAt = later(end, tailEnd)
	}
	// Silence is known only up to the evidence: a close needs a report
	// from at or after the close time.
	j.fresh = !ev.At.Before(j.closeAt)
	return j
}

// sends says whether a's arrivals are the route's traffic: any remote
// address's when the senders are not listed, else a listed node's.
func (s Senders) sends(a netip.Addr) bool {
	return !s.Known || slices.Contains(s.Addrs, a) || slices.Contains(s.Maybe, a)
}

// untrusted says why the sources seen may not be all the route's senders
// ("" when they are).
func (s Senders) untrusted(seen map[netip.Addr]bool) string {
	switch {
	case s.Known:
		var unseen []netip.Addr
		for _, a := range s.Addrs {
			if !seen[a] {
				unseen = append(unseen, a)
			}
		}
		switch len(unseen) {
		case 0:
			return ""
		case 1:
			return fmt.Sprintf("the load balancer's node %s sent nothing while the agent watched", unseen[0])
		}
		return fmt.Sprintf("%d of the load balancer's %d nodes sent nothing while the agent watched (%s, ...)", len(unseen), len(s.Addrs), unseen[0])
	case s.SeenAreAll:
		return ""
	case s.Why != "":
		return s.Why
	}
	return "the route's senders cannot be listed"
}

// eps is the evidence's ε (DefaultEpsilon when unset).
func (ev *Evidence) eps() float64 {
	if ev.Epsilon <= 0 || ev.Epsilon >= 1 {
		return DefaultEpsilon
	}
	return ev.Epsilon
}

// sampleOf is a weighed source's Sample: its stop is its quiet bound at
// SampleEpsilon after its latest arrival (the route's tail when it is too
// sparse to fit); quietEnd is when weigh takes it for quiet (Judge says
// from it whether it still sends).
func sampleOf(addr netip.Addr, a Arrivals, last time.Time, tail time.Duration, quietEnd time.Time) Sample {
	s := Sample{Addr: addr, Last: last, Stop: last.Add(tail), quietEnd: quietEnd}
	if f := FitArrivals(a, 0, SampleEpsilon); f.OK {
		s.Stop = last.Add(f.Model)
	}
	return s
}

// sparseGaps is how many of its longest gaps a source without a bound
// must be silent, once it sent after its route went out.
const sparseGaps = 2

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
	what := "arrivals"
	if j.conns {
		what = "new connections"
	}
	s := fmt.Sprintf("%d %s from %s", j.arrived, what, api.CountNoun(j.sources, "source"))
	if j.fitted > 0 {
		s += fmt.Sprintf(" (%d fitted at %s, longest quiet bound %s at ε %.0e%s)", j.fitted, j.rates(), j.bound.Round(time.Millisecond), eps, j.boundWhy())
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
	if j.inCluster > 0 {
		s += fmt.Sprintf(", %d from in-cluster clients not counted", j.inCluster)
	}
	if j.others > 0 {
		s += fmt.Sprintf(", %d from %s not on the load balancer's node list, weighed as its nodes", j.others, api.CountNoun(len(j.unlisted), "address"))
	}
	if j.open > 0 {
		s += fmt.Sprintf(", %s from the load balancer still open (the app's to close; bytes on them are no new routing)",
			api.CountNoun(j.open, "established flow"))
	}
	return s
}

// boundWhy says what set the longest bound, as ", set by ..." ("" if
// unknown).
func (j quietJudgement) boundWhy() string {
	if j.boundBy == "" {
		return ""
	}
	return ", set by " + j.boundBy
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
