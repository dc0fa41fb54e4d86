package report

import (
	"cmp"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// WriteTable writes a header line, an aligned table with one row per
// strategy, every caller's ELBv2 calls, one line per pod worth a look (see
// below), a short legend and the notes. Durations are in seconds with one
// decimal, as measured (not rescaled by the time scale); "-" marks a figure
// with no sample.
//
// A pod is worth a look when a load balancer node sent it requests at or
// after its SIGTERM, when a node took it out of rotation only after its
// SIGTERM (a negative slack on that node), or when its preStop agent
// released it other than "drained". Its line gives its times in seconds
// relative to its own SIGTERM ("+" after it) and "?" for a time not seen.
func (r Report) WriteTable(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "scenario %s  replicas %d  rollouts %d  rps %d  load %s  time scale %g\n\n",
		r.Scenario, r.Replicas, r.Rollouts, r.RPS, cmp.Or(r.Load, "constant"), r.TimeScale)
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "strategy\trequests\tfailed\tfailure %\tterm p50 s\tterm p99 s\trestart p50 s\t"+
		"slack p50 s\tslack min s\tafter SIGTERM\treleased by\tdraingate ELBv2")
	for _, s := range r.Strategies {
		tp50, ok50 := s.TerminationP50()
		tp99, ok99 := s.TerminationP99()
		rp50, okR := s.RestartP50()
		sp50, okS := s.SlackP50()
		smin, okM := s.SlackMin()
		fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n",
			s.Name, s.Requests, s.Failed, percentNoTarget(s),
			seconds(tp50, ok50), seconds(tp99, ok99), seconds(rp50, okR),
			seconds(sp50, okS), seconds(smin, okM), count(s.AfterSIGTERM()),
			counts(s.Releases), counts(s.GateELBv2Calls))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if err := writeAllCallers(&b, r.Strategies); err != nil {
		return err
	}
	writeChaos(&b, r.Strategies)
	writeEvidence(&b, r.Strategies)
	writeTailCloses(&b, r.Strategies)
	writePodLines(&b, r.Strategies)
	b.WriteString("\n" +
		"termination: pod deletion seen -> container exit. restart: first failed liveness probe -> container restart seen.\n" +
		"slack: SIGTERM - data plane stopped sending the pod new requests (negative: SIGTERM while still in rotation).\n" +
		"failed %: with \"N no target\", N of them answered 503 by a load balancer node whose rotation was empty, never sent to a pod.\n" +
		"after SIGTERM: requests load balancer nodes sent pods at or after their SIGTERM (they fail unless the app still accepts).\n" +
		"released by: how each pod's preStop agent let it go (the gate's reason; max-wait: the agent's own deadline; fallback: no gate server answered).\n" +
		"draingate ELBv2: draingate's own ELBv2 calls per action; every caller's (controller included) are listed below the table when there are any.\n")
	for _, n := range r.Notes {
		fmt.Fprintf(&b, "note: %s\n", n)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// writeChaos lists what each injected fault did, per strategy.
func writeChaos(b *strings.Builder, ss []Strategy) {
	for _, s := range ss {
		if len(s.Chaos) == 0 {
			continue
		}
		fmt.Fprintf(b, "\nchaos (%s):\n", s.Name)
		for _, c := range s.Chaos {
			fmt.Fprintf(b, "  %s\n", c)
		}
	}
}

// writeEvidence lists, for strategies whose gate named target group routes
// in its release messages, what closed them: the traffic evidence or the
// tail, with the quiet bounds and the sources' fitted rates.
func writeEvidence(b *strings.Builder, ss []Strategy) {
	head := false
	for _, s := range ss {
		e := s.EvidenceSummary()
		if e == "" {
			continue
		}
		if !head {
			b.WriteString("\ntraffic evidence (from the gate's release messages):\n")
			head = true
		}
		fmt.Fprintf(b, "  %s: %s\n", s.Name, e)
	}
}

// writeTailCloses quotes the agent for every pod whose target group route
// its tail closed while the agent watched its traffic: why the evidence
// did not end the wait is in its words.
func writeTailCloses(b *strings.Builder, ss []Strategy) {
	head := false
	for _, s := range ss {
		for _, p := range s.Pods {
			if p.Closes.Tail == 0 || len(p.AgentLines) == 0 {
				continue
			}
			if !head {
				b.WriteString("\ntarget group routes closed by their tail, in the agent's words:\n")
				head = true
			}
			fmt.Fprintf(b, "  %s %s:\n", s.Name, p.Name)
			for _, l := range p.AgentLines {
				fmt.Fprintf(b, "    %s\n", l)
			}
		}
	}
}

// writeAllCallers lists each strategy's ELBv2 calls from every caller, the
// figure that counts against the account's quotas, if any strategy has one.
func writeAllCallers(b *strings.Builder, ss []Strategy) error {
	if !slices.ContainsFunc(ss, func(s Strategy) bool { return len(s.ELBv2Calls) > 0 }) {
		return nil
	}
	b.WriteString("\nELBv2 calls by every caller (load balancer controller and draingate):\n")
	tw := tabwriter.NewWriter(b, 0, 0, 2, ' ', 0)
	for _, s := range ss {
		fmt.Fprintf(tw, "  %s\t%s\n", s.Name, counts(s.ELBv2Calls))
	}
	return tw.Flush()
}

// writePodLines writes one line per pod worth a look, grouped by strategy,
// under a header that says how to read them; nothing when there is none.
func writePodLines(b *strings.Builder, ss []Strategy) {
	header := false
	for _, s := range ss {
		for _, p := range s.Pods {
			if !notable(p) {
				continue
			}
			if !header {
				b.WriteString("\npods with requests after SIGTERM, a node still routing to them at SIGTERM, or a release other than drained" +
					" (seconds relative to the pod's SIGTERM, + after it; ? not seen):\n")
				header = true
			}
			fmt.Fprintf(b, "  %s %s\n", s.Name, podLine(p))
		}
	}
}

// notable reports whether p deserves its own line in the table's output.
func notable(p Pod) bool {
	if p.AfterSIGTERM() > 0 || len(p.InRotationAtSIGTERM()) > 0 {
		return true
	}
	if p.Release != "" && p.Release != "drained" {
		return true
	}
	if p.SIGTERM.IsZero() {
		return false
	}
	for _, pn := range p.Nodes {
		if !pn.LastRequest.IsZero() && !pn.LastRequest.Before(p.SIGTERM) {
			return true
		}
	}
	return false
}

// podLine formats one pod, e.g.
//
//	demo-abc (10.244.0.7): released by deadline at +25.0s; draining -3.2s;
//	after SIGTERM 4 (lb-1=3 lb-2=0 lb-3=1); last request lb-1=+0.4s
//	lb-2=-2.1s lb-3=?; route out lb-1=+0.5s lb-2=-2.0s lb-3=?
//
// on one line. Without a SIGTERM there is nothing to be relative to, so
// only the release is given.
func podLine(p Pod) string {
	var parts []string
	head := p.Name
	if p.IP != "" {
		head += " (" + p.IP + ")"
	}
	rel := func(t time.Time) string {
		if t.IsZero() {
			return "?"
		}
		return fmt.Sprintf("%+.1fs", t.Sub(p.SIGTERM).Seconds())
	}
	if p.SIGTERM.IsZero() {
		parts = append(parts, "SIGTERM not seen")
		if p.Release != "" {
			parts = append(parts, "released by "+p.Release)
		}
		return head + ": " + strings.Join(parts, "; ")
	}
	if p.Release != "" {
		parts = append(parts, fmt.Sprintf("released by %s at %s", p.Release, rel(p.ReleasedAt)))
	}
	parts = append(parts, "draining "+rel(p.Draining))
	nodes := slices.Sorted(maps.Keys(p.Nodes))
	if len(nodes) == 0 {
		parts = append(parts, "no load balancer node seen")
		return head + ": " + strings.Join(parts, "; ")
	}
	after := make([]string, len(nodes))
	last := make([]string, len(nodes))
	out := make([]string, len(nodes))
	for i, n := range nodes {
		pn := p.Nodes[n]
		after[i] = fmt.Sprintf("%s=%d", n, pn.AfterSIGTERM)
		last[i] = n + "=" + rel(pn.LastRequest)
		out[i] = n + "=" + rel(pn.RouteOut)
	}
	parts = append(parts,
		fmt.Sprintf("after SIGTERM %d (%s)", p.AfterSIGTERM(), strings.Join(after, " ")),
		"last request "+strings.Join(last, " "),
		"route out "+strings.Join(out, " "))
	return head + ": " + strings.Join(parts, "; ")
}

// percent formats failed/requests in percent with two decimals, but never
// prints a nonzero rate as 0.00: a handful of failures is the finding.
func percent(failed, requests int) string {
	if requests == 0 {
		return "-"
	}
	v := 100 * float64(failed) / float64(requests)
	if failed > 0 && v < 0.005 {
		return "<0.01"
	}
	return fmt.Sprintf("%.2f", v)
}

func seconds(d time.Duration, ok bool) string {
	if !ok {
		return "-"
	}
	return fmt.Sprintf("%.1f", d.Seconds())
}

func count(n int, ok bool) string {
	if !ok {
		return "-"
	}
	return fmt.Sprint(n)
}

// counts lists key=count sorted by key, full names (ELBv2 actions share
// prefixes such as "Describe").
func counts(m map[string]int) string {
	if len(m) == 0 {
		return "-"
	}
	var parts []string
	for _, a := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, fmt.Sprintf("%s=%d", a, m[a]))
	}
	return strings.Join(parts, " ")
}

// percentNoTarget is the failure rate, with how many failures no pod saw
// ("0.31 (64 no target)").
func percentNoTarget(s Strategy) string {
	p := percent(s.Failed, s.Requests)
	if s.NoTarget > 0 {
		p += fmt.Sprintf(" (%d no target)", s.NoTarget)
	}
	return p
}
