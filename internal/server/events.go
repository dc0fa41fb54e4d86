package server

import (
	"encoding/json"
	"log/slog"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/record"

	"draingate.dev/draingate/api"
)

// Event reasons on the pod.
const (
	EventWaitStarted   = api.EventWaitStarted
	EventRoutesChanged = api.EventRoutesChanged
	EventReleased      = api.EventReleased
	EventDeadline      = api.EventDeadline
	// EventNotInjected is on a pod's owner (or its namespace): the webhook
	// admitted the pod without the agent.
	EventNotInjected = "DraingateNotInjected"
	// EventNotSized is on a pod's owner (or its namespace): the webhook
	// could not size the pod's max-wait from its routes and gave it the
	// longest they may need.
	EventNotSized = "DraingateMaxWaitNotSized"
)

// events tells the pod's Events and the log when its wait starts, when a
// route changes state while it waits, and when it is released: once each,
// every Event annotated with the verdict in full (api.VerdictAnnotation),
// which kubectl draingate reads.
type events struct {
	rec record.EventRecorder
	log *slog.Logger
	// released, when set, is told of each release once (metrics).
	released func(v api.Verdict, now time.Time)
}

// noteLocked writes the pod's Events for the verdict v its agent got.
func (e *events) noteLocked(pod *corev1.Pod, st *podState, v api.Verdict) {
	routes := routeSignature(v)
	if !st.startNoted {
		st.startNoted, st.routesNoted = true, routes
		e.rec.AnnotatedEventf(pod, verdictAnnotation(v), corev1.EventTypeNormal, EventWaitStarted, "preStop wait started: %s", v.Message)
		e.log.Info("wait started", "pod", st.key.String(), "uid", st.key.UID, "routes", len(v.Routes), "verdict", v.Message)
	}
	if v.Released && !st.releaseNoted {
		st.releaseNoted = true
		kind, reason := corev1.EventTypeNormal, EventReleased
		if v.Reason == api.ReasonDeadline {
			kind, reason = corev1.EventTypeWarning, EventDeadline
		}
		e.rec.AnnotatedEventf(pod, verdictAnnotation(v), kind, reason, "released after %s (%s): %s",
			time.Duration(v.Waited).Round(100*time.Millisecond), v.Reason, v.Message)
		if e.released != nil {
			e.released(v, time.Now())
		}
		e.log.Info("released", "pod", st.key.String(), "uid", st.key.UID, "reason", v.Reason, "waited", time.Duration(v.Waited).String(), "verdict", v.Message)
		return
	}
	if !v.Released && routes != st.routesNoted {
		st.routesNoted = routes
		e.rec.AnnotatedEventf(pod, verdictAnnotation(v), corev1.EventTypeNormal, EventRoutesChanged, "%s", v.Message)
	}
}

// routeSignature is what a change of which is worth an Event: each route's
// kind, name, state and what closed it (not its times, which move with
// every ask).
func routeSignature(v api.Verdict) string {
	var b strings.Builder
	for _, r := range v.Routes {
		b.WriteString(r.String())
		b.WriteString(" " + r.ClosedBy + "\n")
	}
	return b.String()
}

// verdictAnnotation is v as an Event's annotations.
func verdictAnnotation(v api.Verdict) map[string]string {
	b, err := json.Marshal(v)
	if err != nil {
		return nil // a Verdict always marshals; the Event still says what happened
	}
	return map[string]string{api.VerdictAnnotation: string(b)}
}
