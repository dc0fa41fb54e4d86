package server

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"draingate.dev/draingate/internal/waitapi"
)

// metrics are the server's Prometheus metrics beyond the wait API's own.
type metrics struct {
	wait     *waitapi.Metrics
	calls    *prometheus.CounterVec
	throttle prometheus.Counter
	tracked  prometheus.Gauge
	s        *Server
}

func newMetrics(reg *prometheus.Registry, s *Server) *metrics {
	m := &metrics{
		wait: waitapi.NewMetrics(reg),
		calls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "draingate_elbv2_calls_total",
			Help: "ELBv2 API calls made by this replica, by action and result (ok, throttled, error). Every call, retries included, comes out of --aws-rate.",
		}, []string{"action", "result"}),
		throttle: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "draingate_elbv2_throttles_total",
			Help: "ELBv2 calls answered with a throttling error; each one slows this replica's budget down for a while.",
		}),
		tracked: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "draingate_terminating_pods",
			Help: "Terminating pods the server tracks (whether or not their agent asks).",
		}),
		s: s,
	}
	reg.MustRegister(m.calls, m.throttle, m.tracked,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

func (m *metrics) elbv2Call(action, result string) {
	m.calls.WithLabelValues(action, result).Inc()
	if result == "throttled" {
		m.throttle.Inc()
	}
}

func (m *metrics) setTrackedLocked(n int) { m.tracked.Set(float64(n)) }

func (m *metrics) setTracked() {
	m.s.mu.Lock()
	n := len(m.s.pods)
	m.s.mu.Unlock()
	m.tracked.Set(float64(n))
}
