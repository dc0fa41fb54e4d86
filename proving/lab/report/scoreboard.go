package report

import (
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"strings"
)

// Scoreboard gathers the runs of a matrix of scenarios, one Report each, for
// a single summary.
type Scoreboard struct {
	// TimeScale is the scale every run was played at.
	TimeScale float64
	Runs      []Report
	// Notes are the matrix's own, e.g. a scenario that did not complete;
	// each run's notes are kept with it.
	Notes []string
}

// WriteMarkdown writes a heading, one Markdown table with one row per
// scenario and strategy, a short legend, and the notes: the board's own,
// then each run's prefixed by its scenario. Figures are as in
// Report.WriteTable: seconds as measured, "-" without a sample, and a
// failure rate that is never rounded to zero.
func (b Scoreboard) WriteMarkdown(w io.Writer) error {
	var sb strings.Builder
	fmt.Fprintf(&sb, "# draingate lab scoreboard\n\ntime scale %g (durations as measured, not rescaled)\n\n", b.TimeScale)
	sb.WriteString("| scenario | load | strategy | requests | failed | term p50 / p99 s | restart p50 s | slack p50 / min s | after SIGTERM | released by | routes closed by | draingate ELBv2 calls |\n")
	sb.WriteString("|---|---|---|--:|--:|--:|--:|--:|--:|---|---|---|\n")
	for _, r := range b.Runs {
		for _, s := range r.Strategies {
			tp50, ok50 := s.TerminationP50()
			tp99, ok99 := s.TerminationP99()
			rp50, okR := s.RestartP50()
			sp50, okS := s.SlackP50()
			smin, okM := s.SlackMin()
			cells := []string{
				r.Scenario, cmp.Or(r.Load, "constant"), s.Name, fmt.Sprint(s.Requests), failedCell(s),
				seconds(tp50, ok50) + " / " + seconds(tp99, ok99),
				seconds(rp50, okR), seconds(sp50, okS) + " / " + seconds(smin, okM), count(s.AfterSIGTERM()),
				counts(s.Releases), s.closesCell(), counts(s.GateELBv2Calls),
			}
			for i, c := range cells {
				cells[i] = mdCell(c)
			}
			sb.WriteString("| " + strings.Join(cells, " | ") + " |\n")
		}
	}
	sb.WriteString("\nterm: pod deletion seen -> container exit. restart: first failed liveness probe -> container restart seen. " +
		"slack: SIGTERM - data plane stopped sending the pod new requests (negative: SIGTERM while still in rotation). " +
		"failed: no target: answered 503 by a load balancer node whose rotation was empty (it learnt the old targets' removal before the new ones'), never sent to a pod. " +
		"after SIGTERM: requests load balancer nodes sent pods at or after their SIGTERM. " +
		"released by: how each pod's preStop agent let it go. " +
		"routes closed by: what closed the pods' target group routes, the traffic evidence (with the quiet bound's p50) or the tail. " +
		"draingate ELBv2 calls: draingate's own, per action (every caller's are in the JSON).\n")
	var notes []string
	notes = append(notes, b.Notes...)
	for _, r := range b.Runs {
		for _, n := range r.Notes {
			notes = append(notes, r.Scenario+": "+n)
		}
		for _, s := range r.Strategies {
			for _, c := range s.Chaos {
				notes = append(notes, r.Scenario+": "+s.Name+": chaos "+c)
			}
		}
	}
	if len(notes) > 0 {
		sb.WriteString("\n")
		for _, n := range notes {
			sb.WriteString("- " + mdCell(n) + "\n")
		}
	}
	_, err := io.WriteString(w, sb.String())
	return err
}

// closesCell is a strategy's target group route closes in short, e.g.
// "traffic=5 tail=1 (bound p50 7.1 s)", or "-" when no release message
// named one.
func (s Strategy) closesCell() string {
	tail, traffic, bounds, _ := s.closes()
	if tail+traffic == 0 {
		return "-"
	}
	out := fmt.Sprintf("traffic=%d (early %d) tail=%d", traffic, s.early(), tail)
	if p50, ok := pct(bounds, 50); ok {
		out += fmt.Sprintf(" (bound p50 %.1f s)", p50.Seconds())
	}
	return out
}

// failedCell is the failed count with its rate, e.g. "314 (6.56%)", and
// how many of them no pod saw ("64 (0.31%; 64 no target)"); just the count
// when there were no requests to take a rate of.
func failedCell(s Strategy) string {
	if s.Requests == 0 {
		return fmt.Sprint(s.Failed)
	}
	if s.NoTarget > 0 {
		return fmt.Sprintf("%d (%s%%; %d no target)", s.Failed, percent(s.Failed, s.Requests), s.NoTarget)
	}
	return fmt.Sprintf("%d (%s%%)", s.Failed, percent(s.Failed, s.Requests))
}

// mdCell keeps a text on one table cell: a "|" would end the cell and a
// newline the row.
func mdCell(s string) string {
	s = strings.ReplaceAll(s, "|", `\|`)
	return strings.Join(strings.Fields(s), " ")
}

type jsonScoreboard struct {
	TimeScale float64      `json:"time_scale"`
	Runs      []jsonReport `json:"runs"`
	Notes     []string     `json:"notes"`
}

// WriteJSON writes the scoreboard as one indented JSON object:
//
//	{"time_scale", "runs": [report, ...], "notes": [...]}
//
// where each report is the object Report.WriteJSON writes. runs and notes
// are never null, possibly empty.
func (b Scoreboard) WriteJSON(w io.Writer) error {
	out := jsonScoreboard{
		TimeScale: b.TimeScale,
		Runs:      []jsonReport{},
		Notes:     append([]string{}, b.Notes...),
	}
	for _, r := range b.Runs {
		out.Runs = append(out.Runs, r.jsonReport())
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(out)
}
