package report

import (
	"cmp"
	"errors"
	"fmt"
	"image/color"
	"os"
	"slices"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

var (
	grey = color.RGBA{R: 150, G: 150, B: 150, A: 255}
	red  = color.RGBA{R: 210, G: 30, B: 30, A: 255}
	// redFill is translucent (NRGBA: not premultiplied) so grid lines stay
	// visible under it.
	redFill = color.NRGBA{R: 210, G: 30, B: 30, A: 90}
	blue    = color.RGBA{R: 30, G: 90, B: 200, A: 255}
	violet  = color.RGBA{R: 120, G: 40, B: 160, A: 255}
)

// Sizes in points; vgimg renders at 96 dpi, so 1 pt = 4/3 px. Heights are
// those of the data areas: titles and labels get room on top of them, so
// that every strategy's panels have the same scale on paper.
const (
	pngWidth    = 9 * vg.Inch
	panelHeight = 1.9 * vg.Inch // requests and failures
	rotHeight   = 0.6 * vg.Inch // pods in rotation
	blockGap    = 0.15 * vg.Inch
	pngMargin   = 0.1 * vg.Inch
)

// WritePNG draws one block per strategy, stacked vertically: a panel of
// requests sent (grey) and failed (red, filled) per second, below it a
// small panel of pods in the data plane's rotation, and, when the strategy
// has Pods, a panel with one row per stopped pod (see podRows; its legend
// runs across the top of the image). Dashed violet lines mark each SIGTERM
// in every panel; a zero time, or a zero Start, cannot be placed and is
// left out of the picture (the table and JSON do not depend on the
// timeline). Every panel has the same x axis, seconds since its strategy's
// Start, so strategies line up. The file is written to a temporary name
// beside path and renamed, so a reader never sees half a PNG.
func (r Report) WritePNG(path string) error {
	if len(r.Strategies) == 0 {
		return errors.New("report: no strategy to plot")
	}
	xmin, xmax := xRange(r.Strategies)
	nodes := nodeNames(r.Strategies)

	var plots []*plot.Plot
	var dataHeights []vg.Length
	var gapAfter []bool
	withPods := false
	for i, s := range r.Strategies {
		last := i == len(r.Strategies)-1
		main, rot := strategyPlots(s, xmin, xmax, i == 0, last && len(s.Pods) == 0)
		plots = append(plots, main, rot)
		dataHeights = append(dataHeights, panelHeight, rotHeight)
		gapAfter = append(gapAfter, false, len(s.Pods) == 0)
		if len(s.Pods) > 0 {
			withPods = true
			// The pods panel below carries the tick labels.
			rot.X.Tick.Marker = unlabelled{rot.X.Tick.Marker}
			pods, h := podsPlot(s, nodes, xmin, xmax, last)
			plots = append(plots, pods)
			dataHeights = append(dataHeights, h)
			gapAfter = append(gapAfter, true)
		}
	}
	heights := outerHeights(plots, dataHeights)
	total := 2 * pngMargin
	for i, h := range heights {
		total += h
		if gapAfter[i] && i < len(heights)-1 {
			total += blockGap
		}
	}
	var legend podLegend
	if withPods {
		legend = newPodLegend(nodes, pngWidth-2*pngMargin)
		total += legend.height()
	}

	img := vgimg.NewWith(vgimg.UseWH(pngWidth, total), vgimg.UseDPI(96))
	dc := draw.New(img)
	top := dc.Max.Y - pngMargin - legend.height()
	canvases := stack(plots, heights, gapAfter, dc, top)
	for i, p := range plots {
		p.Draw(canvases[i])
	}
	if withPods {
		legend.draw(dc, dc.Min.X+pngMargin, dc.Max.Y-pngMargin)
	}
	return writeAtomic(path, func(f *os.File) error {
		_, err := vgimg.PngCanvas{Canvas: img}.WriteTo(f)
		return err
	})
}

// outerHeights returns, per plot, the height that gives its data area the
// wanted height: the title, x tick labels and x label above and below it
// depend on the plot, not on its height, so they are measured once on a
// scratch canvas.
func outerHeights(plots []*plot.Plot, data []vg.Length) []vg.Length {
	const probe = 4 * vg.Inch
	scratch := draw.New(vgimg.NewWith(vgimg.UseWH(pngWidth, probe), vgimg.UseDPI(96)))
	out := make([]vg.Length, len(plots))
	for i, p := range plots {
		d := p.DataCanvas(scratch)
		out[i] = data[i] + probe - (d.Max.Y - d.Min.Y)
	}
	return out
}

// stack lays plots out top to bottom, starting at top, with the given heights (a
// gap after each plot that ends a strategy's block), then aligns their data
// areas horizontally so the shared x axis really is shared. plot.Align
// would do the alignment but only for equal heights.
func stack(plots []*plot.Plot, heights []vg.Length, gapAfter []bool, dc draw.Canvas, top vg.Length) []draw.Canvas {
	out := make([]draw.Canvas, len(plots))
	for i := range plots {
		out[i] = draw.Canvas{Canvas: dc.Canvas, Rectangle: vg.Rectangle{
			Min: vg.Point{X: dc.Min.X + pngMargin, Y: top - heights[i]},
			Max: vg.Point{X: dc.Max.X - pngMargin, Y: top},
		}}
		top -= heights[i]
		if gapAfter[i] {
			top -= blockGap
		}
	}
	var maxLeft, maxRight vg.Length
	for i, p := range plots {
		d := p.DataCanvas(out[i])
		maxLeft = max(maxLeft, d.Min.X-out[i].Min.X)
		maxRight = max(maxRight, out[i].Max.X-d.Max.X)
	}
	for i, p := range plots {
		d := p.DataCanvas(out[i])
		left, right := d.Min.X-out[i].Min.X, out[i].Max.X-d.Max.X
		out[i] = draw.Crop(out[i], maxLeft-left, right-maxRight, 0, 0)
	}
	return out
}

// xRange is the x extent shared by all panels, in seconds since each
// strategy's Start: from 0 (or the earliest data, if any came before Start)
// to the latest End, bucket, step, SIGTERM or pod mark of any strategy.
func xRange(ss []Strategy) (lo, hi float64) {
	lo, hi = 0, 1
	for _, s := range ss {
		tl := s.Timeline
		if placeable(tl, tl.End) {
			hi = max(hi, offset(tl, tl.End))
		}
		for _, b := range tl.Buckets() {
			lo = min(lo, float64(b.Second))
			hi = max(hi, float64(b.Second+1))
		}
		for _, st := range tl.Rotation {
			if placeable(tl, st.At) {
				lo, hi = min(lo, offset(tl, st.At)), max(hi, offset(tl, st.At))
			}
		}
		for _, t := range slices.Concat(tl.SIGTERMs, podTimes(s.Pods)) {
			if placeable(tl, t) {
				lo, hi = min(lo, offset(tl, t)), max(hi, offset(tl, t))
			}
		}
	}
	return lo, hi
}

func offset(tl Timeline, t time.Time) float64 { return t.Sub(tl.Start).Seconds() }

// placeable reports whether t can be drawn: a zero Start or a zero t (a
// mark the caller never filled in) would sit two thousand years away and
// squash every panel to a line.
func placeable(tl Timeline, t time.Time) bool { return !tl.Start.IsZero() && !t.IsZero() }

// strategyPlots builds one strategy's two panels. Only the first strategy
// carries the legend and only the last the x axis label, to save room.
func strategyPlots(s Strategy, xmin, xmax float64, legend, xLabel bool) (main, rot *plot.Plot) {
	tl := s.Timeline
	buckets := tl.Buckets()

	main = plot.New()
	main.Title.Text = fmt.Sprintf("%s: failed %d of %d", s.Name, s.Failed, s.Requests)
	main.Title.TextStyle.Font.Size = vg.Points(13)
	main.Y.Label.Text = "requests/s"
	main.X.Tick.Marker = unlabelled{plot.DefaultTicks{}}
	main.Add(plotter.NewGrid())

	sent := perSecond(buckets, func(b Bucket) int { return b.Sent })
	failed := perSecond(buckets, func(b Bucket) int { return b.Failed })
	sentLine := stepLine(sent, grey, nil)
	failedLine := stepLine(failed, red, redFill)
	marks := sigtermMarks(tl)
	main.Add(sentLine, failedLine, marks)
	// Set after Add, which widens axes to the data: every panel must keep
	// the shared x range. An empty panel still needs a y range, and the top
	// gets some headroom for the legend.
	main.X.Min, main.X.Max = xmin, xmax
	main.Y.Min, main.Y.Max = 0, 1.15*max(1, main.Y.Max)
	if legend {
		main.Legend.Add("sent", sentLine)
		main.Legend.Add("failed", failedLine)
		main.Legend.Add("SIGTERM", marks)
		main.Legend.Top = true
		main.Legend.TextStyle.Font.Size = vg.Points(9)
	}

	rot = plot.New()
	rot.Y.Label.Text = "in rotation"
	if xLabel {
		rot.X.Label.Text = "seconds since the strategy's start"
	}
	rot.Add(plotter.NewGrid())
	pods := rotationXYs(tl, xmax)
	rot.Add(stepLine(pods, blue, nil), sigtermMarks(tl))
	top := 1
	for _, st := range tl.Rotation {
		top = max(top, st.N)
	}
	rot.X.Min, rot.X.Max = xmin, xmax
	rot.Y.Min, rot.Y.Max = 0, float64(top)+0.5
	rot.Y.Tick.Marker = integerTicks{}
	return main, rot
}

// perSecond turns sparse buckets into points for a post-step line: each
// second's count holds for that second, and a gap between buckets drops to
// zero, because a second without a bucket saw no request.
func perSecond(buckets []Bucket, v func(Bucket) int) plotter.XYs {
	var xys plotter.XYs
	for i, b := range buckets {
		if i > 0 && buckets[i-1].Second+1 < b.Second {
			xys = append(xys, plotter.XY{X: float64(buckets[i-1].Second + 1), Y: 0})
		}
		xys = append(xys, plotter.XY{X: float64(b.Second), Y: float64(v(b))})
	}
	if n := len(buckets); n > 0 {
		xys = append(xys, plotter.XY{X: float64(buckets[n-1].Second + 1), Y: 0})
	}
	return xys
}

// rotationXYs draws the rotation step function, holding its last value until
// the timeline's End (or the shared x maximum when End is unknown).
func rotationXYs(tl Timeline, xmax float64) plotter.XYs {
	var xys plotter.XYs
	for _, st := range tl.Rotation {
		if placeable(tl, st.At) {
			xys = append(xys, plotter.XY{X: offset(tl, st.At), Y: float64(st.N)})
		}
	}
	// Steps recorded out of order would otherwise draw backwards.
	slices.SortStableFunc(xys, func(a, b plotter.XY) int { return cmp.Compare(a.X, b.X) })
	if n := len(xys); n > 0 {
		end := xmax
		if placeable(tl, tl.End) {
			end = offset(tl, tl.End)
		}
		if end > xys[n-1].X {
			xys = append(xys, plotter.XY{X: end, Y: xys[n-1].Y})
		}
	}
	return xys
}

func stepLine(xys plotter.XYs, c, fill color.Color) *plotter.Line {
	l := &plotter.Line{XYs: xys, StepStyle: plotter.PostStep, LineStyle: plotter.DefaultLineStyle, FillColor: fill}
	l.LineStyle.Color = c
	l.LineStyle.Width = vg.Points(1.2)
	return l
}

// marks draws a full-height vertical line at each x; gonum/plot has no
// such plotter.
type marks struct {
	xs    []float64
	style draw.LineStyle
}

func sigtermMarks(tl Timeline) marks {
	m := marks{style: draw.LineStyle{Color: violet, Width: vg.Points(0.8), Dashes: []vg.Length{vg.Points(3), vg.Points(2)}}}
	for _, t := range tl.SIGTERMs {
		if placeable(tl, t) {
			m.xs = append(m.xs, offset(tl, t))
		}
	}
	return m
}

func (m marks) Plot(c draw.Canvas, p *plot.Plot) {
	tx, _ := p.Transforms(&c)
	for _, x := range m.xs {
		if x < p.X.Min || x > p.X.Max {
			continue
		}
		c.StrokeLine2(m.style, tx(x), c.Min.Y, tx(x), c.Max.Y)
	}
}

func (m marks) Thumbnail(c *draw.Canvas) {
	x := (c.Min.X + c.Max.X) / 2
	c.StrokeLine2(m.style, x, c.Min.Y, x, c.Max.Y)
}
