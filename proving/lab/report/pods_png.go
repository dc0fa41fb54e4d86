package report

import (
	"image/color"
	"maps"
	"slices"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/font"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/text"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// nodePalette colours load balancer nodes by their place in the sorted
// union of node names, so that a node keeps its colour in every strategy;
// it repeats past its length (the node's lane still tells them apart).
var nodePalette = []color.Color{
	color.RGBA{R: 0, G: 150, B: 136, A: 255},  // teal
	color.RGBA{R: 235, G: 120, B: 0, A: 255},  // orange
	color.RGBA{R: 200, G: 40, B: 130, A: 255}, // magenta
	color.RGBA{R: 90, G: 150, B: 0, A: 255},   // green
	color.RGBA{R: 140, G: 90, B: 40, A: 255},  // brown
}

var (
	black     = color.RGBA{A: 255}
	lightGrey = color.RGBA{R: 215, G: 215, B: 215, A: 255}
)

const (
	laneHeight  = vg.Length(7) // one lane of a pod's row
	glyphRadius = vg.Length(2.5)
	legendFont  = vg.Length(9)
)

var (
	lastRequestGlyph = draw.GlyphStyle{Color: grey, Radius: glyphRadius, Shape: draw.CircleGlyph{}}
	routeOutGlyph    = draw.GlyphStyle{Color: grey, Radius: laneHeight/2 - 0.2, Shape: barGlyph{}}
	drainingGlyph    = draw.GlyphStyle{Color: blue, Radius: glyphRadius, Shape: draw.BoxGlyph{}}
	releaseGlyph     = draw.GlyphStyle{Color: black, Radius: glyphRadius + 0.5, Shape: draw.PyramidGlyph{}}
	sigtermStyle     = draw.LineStyle{Color: violet, Width: vg.Points(1), Dashes: []vg.Length{vg.Points(3), vg.Points(2)}}
)

// barGlyph is a vertical bar as tall as the glyph's diameter: drawn under
// a smaller circle at the same time, its ends still show.
type barGlyph struct{}

func (barGlyph) DrawGlyph(c *draw.Canvas, sty draw.GlyphStyle, pt vg.Point) {
	c.StrokeLine2(draw.LineStyle{Color: sty.Color, Width: vg.Points(1.4)}, pt.X, pt.Y-sty.Radius, pt.X, pt.Y+sty.Radius)
}

func nodeColour(i int) color.Color { return nodePalette[i%len(nodePalette)] }

func withColour(g draw.GlyphStyle, c color.Color) draw.GlyphStyle {
	g.Color = c
	return g
}

// nodeNames is the sorted union of the node names of every pod.
func nodeNames(ss []Strategy) []string {
	set := map[string]bool{}
	for _, s := range ss {
		for _, p := range s.Pods {
			for n := range p.Nodes {
				set[n] = true
			}
		}
	}
	return slices.Sorted(maps.Keys(set))
}

// podTimes are the pod times the pods panel draws, zero or not.
func podTimes(pods []Pod) []time.Time {
	var ts []time.Time
	for _, p := range pods {
		ts = append(ts, p.SIGTERM, p.Draining, p.ReleasedAt)
		for _, pn := range p.Nodes {
			ts = append(ts, pn.LastRequest, pn.RouteOut)
		}
	}
	return ts
}

// rowHeight is the height of one pod's row: a lane for the pod's own marks
// and one per node, and at least enough room for its tick label.
func rowHeight(nodes int) vg.Length {
	return max(20*vg.Points(1), vg.Length(nodes+1)*laneHeight+4*vg.Points(1))
}

// podsPlot builds a strategy's pods panel and returns it with the height of
// its data area. Only the last strategy's carries the x axis label.
func podsPlot(s Strategy, nodes []string, xmin, xmax float64, xLabel bool) (*plot.Plot, vg.Length) {
	p := plot.New()
	p.Y.Label.Text = "stopped pods"
	if xLabel {
		p.X.Label.Text = "seconds since the strategy's start"
	}
	grid := plotter.NewGrid()
	grid.Horizontal.Color = nil // rows are separated by podRows itself
	p.Add(grid, podRows{pods: s.Pods, nodes: nodes, tl: s.Timeline})
	names := make([]string, len(s.Pods))
	for i, pod := range s.Pods {
		names[i] = shortName(pod.Name)
	}
	p.X.Min, p.X.Max = xmin, xmax
	p.Y.Min, p.Y.Max = -0.5, float64(len(s.Pods))-0.5
	p.Y.Tick.Marker = podTicks(names)
	p.Y.Tick.Label.Font.Size = vg.Points(8)
	return p, vg.Length(len(s.Pods)) * rowHeight(len(nodes))
}

// shortName keeps a pod name's end, which is what tells pods of one
// workload apart, when the whole name would widen every panel's margin.
func shortName(name string) string {
	const most = 28
	if r := []rune(name); len(r) > most {
		return "…" + string(r[len(r)-most+1:])
	}
	if name == "" {
		return "?"
	}
	return name
}

// podTicks labels each row with its pod's name, the first pod on top.
type podTicks []string

func (t podTicks) Ticks(lo, hi float64) []plot.Tick {
	ts := make([]plot.Tick, len(t))
	for i, name := range t {
		ts[i] = plot.Tick{Value: float64(len(t) - 1 - i), Label: name}
	}
	return ts
}

// podRows draws one row per pod, the first on top. A row has a lane on top
// for the pod's own marks (Draining: blue square; ReleasedAt: black
// triangle labelled with the release), then one lane per load balancer
// node, in nodes' order, with the node's last new request (filled circle)
// and route-out (vertical bar) in the node's colour, joined by a thin line. A
// dashed violet bar across the row is the pod's SIGTERM. Times that cannot
// be placed, and nodes the pod has no entry for, are left out.
type podRows struct {
	pods  []Pod
	nodes []string
	tl    Timeline
}

func (pr podRows) Plot(c draw.Canvas, p *plot.Plot) {
	tx, ty := p.Transforms(&c)
	at := func(t time.Time) (vg.Length, bool) {
		if !placeable(pr.tl, t) {
			return 0, false
		}
		x := offset(pr.tl, t)
		if x < p.X.Min || x > p.X.Max {
			return 0, false
		}
		return tx(x), true
	}
	step := 0.8 / float64(len(pr.nodes)+1)
	lane := func(row float64, i int) vg.Length { return ty(row + 0.4 - step/2 - float64(i)*step) }
	label := text.Style{
		Font: font.From(plot.DefaultFont, vg.Points(7)), Handler: plot.DefaultTextHandler,
		XAlign: text.XLeft, YAlign: text.YCenter,
	}
	sep := draw.LineStyle{Color: lightGrey, Width: vg.Points(0.6)}
	for i, pod := range pr.pods {
		row := float64(len(pr.pods) - 1 - i)
		if i > 0 {
			c.StrokeLine2(sep, c.Min.X, ty(row+0.5), c.Max.X, ty(row+0.5))
		}
		if x, ok := at(pod.SIGTERM); ok {
			c.StrokeLine2(sigtermStyle, x, ty(row-0.45), x, ty(row+0.45))
		}
		for k, name := range pr.nodes {
			pn, ok := pod.Nodes[name]
			if !ok {
				continue
			}
			y, col := lane(row, k+1), nodeColour(k)
			lx, lok := at(pn.LastRequest)
			rx, rok := at(pn.RouteOut)
			if lok && rok {
				c.StrokeLine2(draw.LineStyle{Color: col, Width: vg.Points(0.5)}, lx, y, rx, y)
			}
			if rok {
				c.DrawGlyph(withColour(routeOutGlyph, col), vg.Point{X: rx, Y: y})
			}
			if lok {
				c.DrawGlyph(withColour(lastRequestGlyph, col), vg.Point{X: lx, Y: y})
			}
		}
		y := lane(row, 0)
		if x, ok := at(pod.Draining); ok {
			c.DrawGlyph(drainingGlyph, vg.Point{X: x, Y: y})
		}
		if x, ok := at(pod.ReleasedAt); ok {
			c.DrawGlyph(releaseGlyph, vg.Point{X: x, Y: y})
			if pod.Release != "" {
				c.FillText(label, vg.Point{X: x + 2*glyphRadius, Y: y}, pod.Release)
			}
		}
	}
}

// podLegend is the pods panels' legend, one strip across the top of the
// image (gonum/plot's legends stack their entries vertically, which would
// take more room than the rows they explain). Its zero value is empty.
type podLegend struct {
	items []legendItem
	// line[i] is items[i]'s line, x[i] its offset from the strip's left.
	line []int
	x    []vg.Length
	sty  text.Style
}

type legendItem struct {
	text   string
	glyphs []draw.GlyphStyle
	line   *draw.LineStyle // a short vertical bar, as SIGTERM is drawn
}

const (
	legendThumb   = vg.Length(9)
	legendSpacing = vg.Length(12)
	legendLine    = vg.Length(13)
)

func newPodLegend(nodes []string, width vg.Length) podLegend {
	l := podLegend{sty: text.Style{
		Font: font.From(plot.DefaultFont, legendFont), Handler: plot.DefaultTextHandler,
		XAlign: text.XLeft, YAlign: text.YCenter,
	}}
	l.items = append(l.items, legendItem{text: "stopped pods, one row each:"})
	for k, n := range nodes {
		l.items = append(l.items, legendItem{text: n, glyphs: []draw.GlyphStyle{
			withColour(lastRequestGlyph, nodeColour(k)), withColour(routeOutGlyph, nodeColour(k)),
		}})
	}
	l.items = append(l.items,
		legendItem{text: "node's last new request", glyphs: []draw.GlyphStyle{lastRequestGlyph}},
		legendItem{text: "node's route out", glyphs: []draw.GlyphStyle{routeOutGlyph}},
		legendItem{text: "draining", glyphs: []draw.GlyphStyle{drainingGlyph}},
		legendItem{text: "released (by)", glyphs: []draw.GlyphStyle{releaseGlyph}},
		legendItem{text: "SIGTERM", line: &sigtermStyle},
	)
	var x vg.Length
	line := 0
	for _, it := range l.items {
		w := l.sty.Width(it.text) + legendSpacing
		if n := len(it.glyphs); n > 0 || it.line != nil {
			w += vg.Length(max(n, 1))*legendThumb + vg.Points(2)
		}
		if x > 0 && x+w > width {
			x, line = 0, line+1
		}
		l.line, l.x = append(l.line, line), append(l.x, x)
		x += w
	}
	return l
}

// height is the strip's height with the space below it; 0 when empty.
func (l podLegend) height() vg.Length {
	if len(l.items) == 0 {
		return 0
	}
	return vg.Length(l.line[len(l.line)-1]+1)*legendLine + blockGap
}

// draw draws the strip with its top at top, starting at left.
func (l podLegend) draw(dc draw.Canvas, left, top vg.Length) {
	for i, it := range l.items {
		x := left + l.x[i]
		y := top - (vg.Length(l.line[i])+0.5)*legendLine
		for _, g := range it.glyphs {
			dc.DrawGlyphNoClip(g, vg.Point{X: x + legendThumb/2, Y: y})
			x += legendThumb
		}
		if it.line != nil {
			dc.StrokeLine2(*it.line, x+legendThumb/2, y-legendLine/2+1, x+legendThumb/2, y+legendLine/2-1)
			x += legendThumb
		}
		if len(it.glyphs) > 0 || it.line != nil {
			x += vg.Points(2)
		}
		dc.FillText(l.sty, vg.Point{X: x, Y: y}, it.text)
	}
}
