package server

import (
	"regexp"
	"runtime"
	"slices"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"draingate.dev/draingate/internal/events"
	"draingate.dev/draingate/internal/learn"
	"draingate.dev/draingate/internal/ledger"
	"draingate.dev/draingate/internal/route"
	"draingate.dev/draingate/internal/version"
	"draingate.dev/draingate/internal/waitapi"
	"draingate.dev/draingate/internal/webhook"
)

// metrics are the server's Prometheus metrics beyond the wait API's own,
// each kind of route's (route.Env.Registry) and those of the parts it
// wires (events, learn, ledger, webhook).
type metrics struct {
	wait    *waitapi.Metrics
	tracked prometheus.Gauge
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		wait: waitapi.NewMetrics(reg),
		tracked: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "draingate_terminating_pods",
			Help: "Terminating pods the server tracks (whether or not their agent asks).",
		}),
	}
	build := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "draingate_build_info",
		Help: "Always 1; its labels say which build runs: version (set at build time, as draingate version prints it) and goversion.",
	}, []string{"version", "goversion"})
	build.WithLabelValues(version.Version, runtime.Version()).Set(1)
	reg.MustRegister(m.tracked, build,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// MetricNames names, sorted, every metric family a server with all its
// parts on (the webhook, the shared route memory, every kind of route)
// may export on /metrics, as the collectors it registers describe them;
// a histogram by its family name (its series add _bucket, _sum and
// _count). Nothing is opened or started. Alerts and dashboards may query
// these (the chart's tests check its own against them).
func MetricNames() []string { return metricNames(Kinds()) }

// metricNames is MetricNames with the kinds of route given.
func metricNames(kinds []route.Kind) []string {
	var cs collected
	newMetrics(&cs)
	ch := make(chan *prometheus.Desc)
	go func() {
		defer close(ch)
		for _, c := range cs {
			c.Describe(ch)
		}
		events.Describe(ch)
		learn.Describe(ch)
		ledger.Describe(ch)
		webhook.Describe(ch)
		for _, k := range kinds {
			if d, ok := k.(route.Describer); ok {
				d.Describe(ch)
			}
		}
	}()
	var names []string
	for d := range ch {
		// A Desc tells its name only in its String(), which starts
		// Desc{fqName: "name", ...
		if sm := descName.FindStringSubmatch(d.String()); sm != nil && !slices.Contains(names, sm[1]) {
			names = append(names, sm[1])
		}
	}
	slices.Sort(names)
	return names
}

var descName = regexp.MustCompile(`^Desc\{fqName: "([a-zA-Z_:][a-zA-Z0-9_:]*)"`)

// collected is a prometheus.Registerer that keeps what is registered, for
// MetricNames.
type collected []prometheus.Collector

func (c *collected) Register(x prometheus.Collector) error   { *c = append(*c, x); return nil }
func (c *collected) MustRegister(xs ...prometheus.Collector) { *c = append(*c, xs...) }
func (c *collected) Unregister(prometheus.Collector) bool    { return false }

func (m *metrics) setTracked(n int) { m.tracked.Set(float64(n)) }
