package scale

import (
	"cmp"
	"encoding/json"
	"fmt"
	"image/color"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

const mib = 1 << 20

// WriteTable prints the results as a Markdown table, then the memory slopes.
func WriteTable(w io.Writer, rs []Result) error {
	fmt.Fprintln(w, "| pods | waiters | Services / target groups | RSS MiB | peak RSS MiB | Go heap MiB | stacks MiB | CPU cores | answer p50 / p99 ms | release p50 / p99 / max s | EndpointSlices only: release p50 / p99 s | behind a target group: pods, release p50 / p99 s | released / early / still waiting | DescribeTargetHealth/s (budget) | ready s |")
	fmt.Fprintln(w, "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	for _, r := range rs {
		fmt.Fprintf(w, "| %d | %d | %d / %d | %.1f | %.1f | %.1f | %.1f | %.2f | %s / %s | %s / %s / %s | %s / %s | %d, %s / %s | %d / %d / %d | %.2f (%g) | %.1f |\n",
			r.Pods, r.Waiters, r.Services, r.TargetGroups,
			float64(r.RSS)/mib, float64(r.PeakRSS)/mib, float64(r.HeapInuse)/mib, float64(r.StackInuse)/mib, r.CPU,
			ms(r.AnswerP50), ms(r.AnswerP99), sec(r.ReleaseP50), sec(r.ReleaseP99), sec(r.ReleaseMax),
			sec(r.SliceOnlyP50), sec(r.SliceOnlyP99), r.TargetGroupReleased, sec(r.TargetGroupReleaseP50), sec(r.TargetGroupReleaseP99),
			r.Released, r.Early, r.Unreleased, r.DescribePerSecond, r.DescribeBudget, r.Ready.Seconds())
	}
	fmt.Fprintln(w)
	for _, r := range rs {
		if len(r.ServerEnv) > 0 {
			fmt.Fprintf(w, "- %d pods, %d waiters: the server ran with %s\n", r.Pods, r.Waiters, strings.Join(r.ServerEnv, " "))
		}
		if r.LeaseWrites > 0 {
			fmt.Fprintf(w, "- %d pods, %d waiters: %d writes of the shared route memory's Leases until every waiter was released (%.1f per waiter; their deletes come as the pods go)\n",
				r.Pods, r.Waiters, r.LeaseWrites, float64(r.LeaseWrites)/float64(max(r.Waiters, 1)))
		}
	}
	for _, s := range Slopes(rs) {
		fmt.Fprintf(w, "- %d waiters: RSS grows %.0f bytes per pod (Go heap in use: %.0f bytes per pod), least squares over %d sizes\n",
			s.Waiters, s.RSS, s.Heap, s.Points)
	}
	return nil
}

func ms(d time.Duration) string  { return fmt.Sprintf("%.1f", float64(d)/float64(time.Millisecond)) }
func sec(d time.Duration) string { return fmt.Sprintf("%.1f", d.Seconds()) }

// Slope is memory per pod for one waiter count: the least-squares slope of
// RSS and of the Go heap in use against the pods.
type Slope struct {
	Waiters, Points int
	RSS, Heap       float64 // bytes per pod
}

// Slopes fits one Slope per waiter count with at least two pod counts.
func Slopes(rs []Result) []Slope {
	by := byWaiters(rs)
	var out []Slope
	for _, w := range slices.Sorted(maps.Keys(by)) {
		g := by[w]
		xs := make([]float64, len(g))
		rss := make([]float64, len(g))
		heap := make([]float64, len(g))
		for i, r := range g {
			xs[i], rss[i], heap[i] = float64(r.Pods), float64(r.RSS), float64(r.HeapInuse)
		}
		a, okA := slope(xs, rss)
		b, okB := slope(xs, heap)
		if okA && okB {
			out = append(out, Slope{Waiters: w, Points: len(g), RSS: a, Heap: b})
		}
	}
	return out
}

// slope is the least-squares slope of ys against xs; false when xs has
// fewer than two distinct values.
func slope(xs, ys []float64) (float64, bool) {
	n := float64(len(xs))
	var sx, sy float64
	for i := range xs {
		sx += xs[i]
		sy += ys[i]
	}
	mx, my := sx/n, sy/n
	var sxy, sxx float64
	for i := range xs {
		sxy += (xs[i] - mx) * (ys[i] - my)
		sxx += (xs[i] - mx) * (xs[i] - mx)
	}
	if sxx == 0 {
		return 0, false
	}
	return sxy / sxx, true
}

// byWaiters groups the results by their waiter count.
func byWaiters(rs []Result) map[int][]Result {
	by := map[int][]Result{}
	for _, r := range rs {
		by[r.Waiters] = append(by[r.Waiters], r)
	}
	return by
}

// WriteJSON writes the results.
func WriteJSON(w io.Writer, rs []Result) error {
	e := json.NewEncoder(w)
	e.SetIndent("", "  ")
	return e.Encode(rs)
}

var palette = []color.Color{
	color.RGBA{R: 30, G: 90, B: 200, A: 255},
	color.RGBA{R: 210, G: 30, B: 30, A: 255},
	color.RGBA{R: 40, G: 150, B: 60, A: 255},
	color.RGBA{R: 120, G: 40, B: 160, A: 255},
}

// WritePNG draws memory against pods: the server's RSS (solid) and Go heap
// in use (dashed), one colour per waiter count.
func WritePNG(path string, rs []Result) error {
	p := plot.New()
	p.Title.Text = "draingate serve: memory against pods"
	p.X.Label.Text = "pods in the cluster"
	p.Y.Label.Text = "MiB"
	p.Y.Min = 0
	p.Add(plotter.NewGrid())
	by := byWaiters(rs)
	for k, w := range slices.Sorted(maps.Keys(by)) {
		g := slices.SortedFunc(slices.Values(by[w]), func(a, b Result) int { return cmp.Compare(a.Pods, b.Pods) })
		rss, heap := make(plotter.XYs, len(g)), make(plotter.XYs, len(g))
		for i, r := range g {
			rss[i] = plotter.XY{X: float64(r.Pods), Y: float64(r.RSS) / mib}
			heap[i] = plotter.XY{X: float64(r.Pods), Y: float64(r.HeapInuse) / mib}
		}
		c := palette[k%len(palette)]
		for _, s := range []struct {
			xy     plotter.XYs
			name   string
			dashes []vg.Length
		}{{rss, fmt.Sprintf("RSS, %d waiters", w), nil}, {heap, fmt.Sprintf("Go heap in use, %d waiters", w), []vg.Length{vg.Points(4), vg.Points(3)}}} {
			l, pts, err := plotter.NewLinePoints(s.xy)
			if err != nil {
				return err
			}
			l.Color, l.Dashes, pts.Color, pts.Shape = c, s.dashes, c, draw.CircleGlyph{}
			p.Add(l, pts)
			p.Legend.Add(s.name, l, pts)
		}
	}
	// Bottom right: below the lines, which all rise with the pods.
	p.Legend.Top, p.Legend.Left = false, false
	p.Title.Padding = vg.Points(8)
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	tmp.Close()
	defer os.Remove(tmp.Name())
	defer os.Remove(tmp.Name() + ".png")
	if err := p.Save(7*vg.Inch, 4.5*vg.Inch, tmp.Name()+".png"); err != nil {
		return err
	}
	return os.Rename(tmp.Name()+".png", path)
}
