package server

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"draingate.dev/draingate/internal/waitapi"
)

// metrics are the server's Prometheus metrics beyond the wait API's own.
type metrics struct {
	wait    *waitapi.Metrics
	calls   *prometheus.CounterVec
	tracked prometheus.Gauge
}

func newMetrics(reg *prometheus.Registry) *metrics {
	m := &metrics{
		wait: waitapi.NewMetrics(reg),
		calls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "draingate_elbv2_calls_total",
			Help: "ELBv2 API calls made by this replica, by action and result (ok, throttled, error). Every call, retries included, comes out of --aws-rate; each throttled one slows this replica's budget down for a while.",
		}, []string{"action", "result"}),
		tracked: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "draingate_terminating_pods",
			Help: "Terminating pods the server tracks (whether or not their agent asks).",
		}),
	}
	reg.MustRegister(m.calls, m.tracked,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

func (m *metrics) elbv2Call(action, result string) {
	m.calls.WithLabelValues(action, result).Inc()
}

func (m *metrics) setTracked(n int) { m.tracked.Set(float64(n)) }
