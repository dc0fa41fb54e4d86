package waitapi

import (
	"github.com/prometheus/client_golang/prometheus"

	"draingate.dev/draingate/api"
)

// Metrics are the wait API's Prometheus metrics. A nil *Metrics records
// nothing.
type Metrics struct {
	// Requests counts answered requests (probes excluded) by HTTP status
	// code, or "canceled" when the client went away before an answer.
	Requests *prometheus.CounterVec
	// Waits counts drain requests that passed parsing by how they ended:
	// the verdict's reason when released ("drained", "deadline",
	// "no-routes", "not-terminating", "not-found"; "other" for a reason
	// this package does not know, "released" for none), "unreleased" when
	// answered not released (wait=0 or the wait passed), "canceled" when
	// the client went away, "unknown-pod", "uid-mismatch" or "error".
	Waits *prometheus.CounterVec
	// WaitSeconds observes Verdict.Waited of every released answer.
	WaitSeconds prometheus.Histogram
	// PollsInFlight is the number of long-polls being held: requests
	// waiting for their pod's verdict to change or their wait to pass. It
	// counts requests, not pods: an agent between two polls is not in it.
	PollsInFlight prometheus.Gauge
}

// Outcomes of Metrics.Waits other than a verdict's reason.
const (
	OutcomeUnreleased  = "unreleased"
	OutcomeCanceled    = "canceled"
	OutcomeUnknownPod  = "unknown-pod"
	OutcomeUIDMismatch = "uid-mismatch"
	OutcomeError       = "error"
	OutcomeForbidden   = "forbidden"
	outcomeReleased    = "released"
	outcomeOther       = "other"
	codeCanceled       = "canceled"
)

// NewMetrics creates the wait API's metrics and registers them with reg
// (none when reg is nil). It panics if they are already registered, as
// prometheus.MustRegister does: that is a wiring bug, found at start-up.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		Requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "draingate_wait_requests_total",
			Help: "Wait API requests answered, by HTTP status code (\"canceled\": the client went away first). Probes are not counted.",
		}, []string{"code"}),
		Waits: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "draingate_waits_total",
			Help: "Drain requests by outcome: the verdict's reason when released, else unreleased, canceled, unknown-pod, uid-mismatch or error.",
		}, []string{"outcome"}),
		WaitSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "draingate_wait_seconds",
			Help:    "How long pods had waited (the verdict's waited) when the wait API released them.",
			Buckets: []float64{0.5, 1, 2, 5, 10, 15, 20, 30, 45, 60, 90, 120, 180, 240, 300, 450, 600},
		}),
		PollsInFlight: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "draingate_wait_polls_in_flight",
			Help: "Wait API long-polls being held (requests, not pods: an agent between two polls is not counted).",
		}),
	}
	// The releases' series exist from the start, at 0, so that an alert
	// on increase() counts a replica's first deadline release too (a
	// series born at 1 shows no increase).
	for _, r := range []api.Reason{api.ReasonDrained, api.ReasonDeadline, api.ReasonNoRoutes} {
		m.Waits.WithLabelValues(string(r))
	}
	if reg != nil {
		reg.MustRegister(m.Requests, m.Waits, m.WaitSeconds, m.PollsInFlight)
	}
	return m
}

func (m *Metrics) request(code string) {
	if m != nil {
		m.Requests.WithLabelValues(code).Inc()
	}
}

func (m *Metrics) outcome(o string) {
	if m != nil {
		m.Waits.WithLabelValues(o).Inc()
	}
}

func (m *Metrics) pollsInFlight(delta float64) {
	if m != nil {
		m.PollsInFlight.Add(delta)
	}
}

func (m *Metrics) released(seconds float64) {
	if m != nil {
		m.WaitSeconds.Observe(seconds)
	}
}
