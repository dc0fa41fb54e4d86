// Package events tells what happens to a waiting pod: its Events, the
// log lines, and the release metrics. It is a consumer of the drain
// tracker's decisions (drain.Consumer) and writes for those that answer
// the pod's agent: when its wait starts, when a route changes state while
// it waits, and when it is released, once each. Every Event carries the
// verdict in full (api.VerdictAnnotation), which kubectl draingate reads.
//
// It never decides anything: what it writes follows from the decision.
package events

import (
	"encoding/json"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/record"

	"draingate.dev/draingate/api"
	"draingate.dev/draingate/internal/drain"
	"draingate.dev/draingate/internal/route"
)

// Writer writes a waiting pod's Events and log lines, and counts its
// release. Make it with New.
type Writer struct {
	rec     record.EventRecorder
	log     *slog.Logger
	metrics *metrics
	now     func() time.Time

	mu   sync.Mutex
	pods map[route.PodKey]*noted
}

// noted is what was told of one pod: its start and its release were
// written; routes, the route states the last Event told (signature).
type noted struct {
	start, release bool
	routes         string
}

// New returns a Writer recording with rec, logging to log; its metrics
// are registered on reg (none when nil).
func New(rec record.EventRecorder, log *slog.Logger, reg prometheus.Registerer) *Writer {
	w := &Writer{rec: rec, log: log, now: time.Now, pods: map[route.PodKey]*noted{}}
	if reg != nil {
		w.metrics = newMetrics()
		reg.MustRegister(w.metrics.closes, w.metrics.saved)
	}
	return w
}

// Decided implements drain.Consumer: it writes the pod's Events for the
// verdict its agent got.
func (w *Writer) Decided(d *drain.Decision) {
	if !d.Asked {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	n := w.pods[d.Key]
	if n == nil {
		n = &noted{}
		w.pods[d.Key] = n
	}
	v, pod, key := d.Verdict, d.Pod, d.Key
	routes := signature(v)
	if !n.start {
		n.start, n.routes = true, routes
		w.rec.AnnotatedEventf(pod, annotation(v), corev1.EventTypeNormal, api.EventWaitStarted, "preStop wait started: %s", v.Message)
		w.log.Info("wait started", "pod", key.String(), "uid", key.UID, "routes", len(v.Routes), "verdict", v.Message)
	}
	if v.Released && !n.release {
		n.release = true
		kind, reason := corev1.EventTypeNormal, api.EventReleased
		if v.Reason == api.ReasonDeadline {
			kind, reason = corev1.EventTypeWarning, api.EventDeadline
		}
		w.rec.AnnotatedEventf(pod, annotation(v), kind, reason, "released after %s (%s): %s",
			time.Duration(v.Waited).Round(100*time.Millisecond), v.Reason, v.Message)
		if w.metrics != nil {
			w.metrics.released(v, w.now())
		}
		w.log.Info("released", "pod", key.String(), "uid", key.UID, "reason", v.Reason, "waited", time.Duration(v.Waited).String(), "verdict", v.Message)
		return
	}
	if !v.Released && routes != n.routes {
		n.routes = routes
		w.rec.AnnotatedEventf(pod, annotation(v), corev1.EventTypeNormal, api.EventRoutesChanged, "%s", v.Message)
	}
}

// Gone implements drain.Consumer.
func (w *Writer) Gone(pod route.PodKey) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.pods, pod)
}

// signature is what a change of which is worth an Event: each route's
// kind, name, state and what closed it (not its times, which move with
// every ask).
func signature(v api.Verdict) string {
	var b strings.Builder
	for _, r := range v.Routes {
		b.WriteString(r.String())
		b.WriteString(" " + r.ClosedBy + "\n")
	}
	return b.String()
}

// annotation is v as an Event's annotations.
func annotation(v api.Verdict) map[string]string {
	b, err := json.Marshal(v)
	if err != nil {
		return nil // a Verdict always marshals; the Event still says what happened
	}
	return map[string]string{api.VerdictAnnotation: string(b)}
}

// metrics count releases by what closed their routes.
type metrics struct {
	closes *prometheus.CounterVec
	saved  prometheus.Counter
}

func newMetrics() *metrics {
	return &metrics{
		closes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "draingate_route_closes_total",
			Help: "Routes of released pods by what closed them: tail (the route's propagation tail passed) or traffic (the pod's own traffic evidence ended the wait before the tail's end, or kept it open past it).",
		}, []string{"by"}),
		saved: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "draingate_traffic_saved_seconds_total",
			Help: "Seconds of waiting that traffic evidence saved: for each pod released drained, how much later its routes' tails alone would have released it.",
		}),
	}
}

// Describe sends the descriptions of the metrics New registers.
func Describe(ch chan<- *prometheus.Desc) {
	m := newMetrics()
	m.closes.Describe(ch)
	m.saved.Describe(ch)
}

// released counts a released pod's routes by what closed them, and the
// time its tails alone would have kept it longer.
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
