package server

import (
	"regexp"
	"runtime"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"draingate.dev/draingate/api"
	"draingate.dev/draingate/internal/ledger"
	"draingate.dev/draingate/internal/route"
	"draingate.dev/draingate/internal/version"
	"draingate.dev/draingate/internal/waitapi"
)

// metrics are the server's Prometheus metrics beyond the wait API's own and
// each kind of route's (route.Env.Registry).
type metrics struct {
	wait    *waitapi.Metrics
	tracked prometheus.Gauge
	closes  *prometheus.CounterVec
	saved   prometheus.Counter
	// notInjected counts pods the webhook admitted with a "not injected"
	// warning, notSized those whose max-wait it could not size from their
	// routes (registered with the webhook).
	notInjected, notSized prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		wait: waitapi.NewMetrics(reg),
		tracked: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "draingate_terminating_pods",
			Help: "Terminating pods the server tracks (whether or not their agent asks).",
		}),
		closes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "draingate_route_closes_total",
			Help: "Routes of released pods by what closed them: tail (the route's propagation tail passed) or traffic (the pod's own traffic evidence ended the wait before the tail's end, or kept it open past it).",
		}, []string{"by"}),
		saved: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "draingate_traffic_saved_seconds_total",
			Help: "Seconds of waiting that traffic evidence saved: for each pod released drained, how much later its routes' tails alone would have released it.",
		}),
		notSized: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "draingate_webhook_not_sized_total",
			Help: "Pods the webhook admitted with a max-wait it could not size from their routes (a cache not synced, a bound Service not seen yet): they got the longest their routes may need, with a warning saying why (also an Event on the pod's owner, or its namespace).",
		}),
		notInjected: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "draingate_webhook_not_injected_total",
			Help: "Pods the webhook admitted without the agent, with a warning saying why (also an Event on the pod's owner, or its namespace): the warning itself reaches only whoever created the pod, and a ReplicaSet controller drops it.",
		}),
	}
	build := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "draingate_build_info",
		Help: "Always 1; its labels say which build runs: version (set at build time, as draingate version prints it) and goversion.",
	}, []string{"version", "goversion"})
	build.WithLabelValues(version.Version, runtime.Version()).Set(1)
	reg.MustRegister(m.tracked, m.closes, m.saved, build,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// certificateReady is draingate_webhook_certificate_ready, read from ready
// at each scrape.
func certificateReady(ready func() bool) prometheus.Collector {
	return prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "draingate_webhook_certificate_ready",
		Help: "1 once the webhook's certificate is loaded and (unless cert-manager manages it) trusted by the caBundle; while 0 the API server cannot call the webhook and admits pods without the agent.",
	}, func() float64 {
		if ready() {
			return 1
		}
		return 0
	})
}

// MetricNames names, sorted, every metric family a server with all its
// parts on (the webhook, the shared route memory, every kind of route)
// may export on /metrics, as the collectors it registers describe them;
// a histogram by its family name (its series add _bucket, _sum and
// _count). Nothing is opened or started. Alerts and dashboards may query
// these (the chart's tests check its own against them).
func MetricNames() []string {
	var cs collected
	m := newMetrics(&cs)
	cs = append(cs, m.notInjected, m.notSized, certificateReady(func() bool { return false }), learnedCollector{})
	ch := make(chan *prometheus.Desc)
	go func() {
		defer close(ch)
		for _, c := range cs {
			c.Describe(ch)
		}
		ledger.Describe(ch)
		for _, k := range Kinds() {
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

// released counts a drained pod's routes by what closed them, and the time
// its tails alone would have kept it longer.
func (m *metrics) released(v api.Verdict, now time.Time) {
	var tailsEnd time.Time
	for _, r := range v.Routes {
		if r.ClosedBy != "" {
			m.closes.WithLabelValues(r.ClosedBy).Inc()
		}
		if r.TailEnds != nil && r.TailEnds.After(tailsEnd) {
			tailsEnd = *r.TailEnds
		}
	}
	if v.Reason == api.ReasonDrained && tailsEnd.After(now) {
		m.saved.Add(tailsEnd.Sub(now).Seconds())
	}
}
