package status

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"draingate.dev/draingate/api"
)

// WriteTable prints pods as kubectl draingate status does: a line per pod
// (how long it has waited, its state, why) and under it a line per route.
func WriteTable(w io.Writer, pods []Pod, now time.Time) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "POD\tWAITED\tSTATE\tWHY")
	for _, p := range pods {
		waited := "-"
		if !p.DeletedAt.IsZero() {
			waited = round(now.Sub(p.DeletedAt)).String()
		}
		if p.Verdict != nil && p.Verdict.Released {
			waited = round(time.Duration(p.Verdict.Waited)).String()
		}
		fmt.Fprintf(tw, "%s/%s\t%s\t%s\t%s\n", p.Namespace, p.Name, waited, state(p), why(p, now))
		if p.Verdict == nil {
			continue
		}
		for _, r := range p.Verdict.Routes {
			fmt.Fprintf(tw, "  %s/%s\t\t%s\t%s\n", r.Kind, r.Name, r.State, routeWhy(r))
		}
	}
	return tw.Flush()
}

// state is one word for where the pod's drain is.
func state(p Pod) string {
	switch {
	case p.Verdict != nil && p.Verdict.Released:
		return "released (" + string(p.Verdict.Reason) + ")"
	case p.Verdict != nil:
		return "waiting"
	case p.DeletedAt.IsZero() && !p.Gone:
		return "running"
	case p.Injected == "":
		return "no agent"
	default:
		return "not asked"
	}
}

// why says what the pod waits for, or why draingate knows nothing of it.
func why(p Pod, now time.Time) string {
	switch {
	case p.Verdict != nil:
		return fmt.Sprintf("%s (%s, %s ago)", p.Verdict.Message, p.Event, round(now.Sub(p.At)))
	case p.DeletedAt.IsZero() && !p.Gone && p.Injected == "":
		return "not being deleted; draingate did not inject its agent into this pod (no " + api.AnnotationInjected + " annotation)"
	case p.DeletedAt.IsZero() && !p.Gone:
		return "not being deleted: its agent asks the gate when it terminates"
	case p.Injected == "":
		return "draingate did not inject its agent into this pod (no " + api.AnnotationInjected + " annotation): its preStop hook does not ask the gate"
	default:
		return "its agent has not asked the gate server yet: the preStop hook has not started, or the agent cannot reach the server " +
			"(it then sleeps its fallback; see the container's preStop output in kubectl describe pod)"
	}
}

// routeWhy is a route's closer, or its detail while open.
func routeWhy(r api.Route) string {
	if r.ClosedBy != "" {
		return "closed by its " + r.ClosedBy + ": " + r.Detail
	}
	return r.Detail
}

// WriteExplain prints p's latest verdict in full, as kubectl draingate
// explain does.
func WriteExplain(w io.Writer, p Pod, now time.Time) error {
	var b strings.Builder
	fmt.Fprintf(&b, "Pod:        %s/%s (uid %s)\n", p.Namespace, p.Name, p.UID)
	switch {
	case p.Gone:
		b.WriteString("Exists:     no (deleted; read from its Events)\n")
	case !p.DeletedAt.IsZero():
		fmt.Fprintf(&b, "Deleted:    %s (%s ago)\n", p.DeletedAt.Format(time.RFC3339), round(now.Sub(p.DeletedAt)))
	default:
		b.WriteString("Deleted:    no\n")
	}
	if !p.Gone {
		inj := p.Injected
		if inj == "" {
			inj = "no"
		}
		fmt.Fprintf(&b, "Injected:   %s\n", inj)
	}
	if p.Verdict == nil {
		fmt.Fprintf(&b, "Verdict:    none: %s\n", why(p, now))
		_, err := io.WriteString(w, b.String())
		return err
	}
	v := p.Verdict
	fmt.Fprintf(&b, "Event:      %s at %s (%s ago)\n", p.Event, p.At.Format(time.RFC3339), round(now.Sub(p.At)))
	if v.Released {
		fmt.Fprintf(&b, "Released:   yes, %s, after %s\n", v.Reason, round(time.Duration(v.Waited)))
	} else {
		fmt.Fprintf(&b, "Released:   no, waited %s then\n", round(time.Duration(v.Waited)))
	}
	fmt.Fprintf(&b, "Message:    %s\n", v.Message)
	if len(v.Routes) == 0 {
		b.WriteString("Routes:     none\n")
	} else {
		b.WriteString("Routes:\n")
	}
	for _, r := range v.Routes {
		fmt.Fprintf(&b, "  %s/%s\n    State:      %s", r.Kind, r.Name, r.State)
		if !r.Since.IsZero() {
			fmt.Fprintf(&b, " since %s", r.Since.Format(time.RFC3339Nano))
		}
		b.WriteString("\n")
		for _, f := range []struct {
			name string
			at   *time.Time
		}{{"Tail ends", r.TailEnds}, {"Quiet by", r.QuietBy}, {"Ask by", r.AskBy}} {
			if f.at != nil {
				fmt.Fprintf(&b, "    %-11s %s\n", f.name+":", f.at.Format(time.RFC3339Nano))
			}
		}
		if r.ClosedBy != "" {
			fmt.Fprintf(&b, "    Closed by:  %s\n", r.ClosedBy)
		}
		if r.Detail != "" {
			fmt.Fprintf(&b, "    Detail:     %s\n", r.Detail)
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func round(d time.Duration) time.Duration {
	if d < 0 {
		return 0
	}
	return d.Round(100 * time.Millisecond)
}
