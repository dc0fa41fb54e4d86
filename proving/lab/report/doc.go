// Package report turns the lab's measurements into its outputs: an aligned
// text table for a terminal (with a line for each pod worth a look), a JSON
// document for machines, a PNG of each strategy's run over time with one
// row per stopped pod, and a scoreboard (Markdown and JSON) over a matrix of
// scenarios.
//
// The lab (draingate-lab) is the project's benchmark, so the outputs show
// exactly what was measured: figures are not rescaled by the run's time
// scale (the header and the notes say which scale applied), a figure with
// no sample is shown as "-" in the table and null in JSON rather than as
// zero, and every request the timeline saw is plotted.
//
// Lab-only: production packages never import it (it pulls in gonum/plot).
package report
