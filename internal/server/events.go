package server

import (
	"log/slog"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/record"

	"draingate.dev/draingate/api"
)

// Event reasons on the pod.
const (
	EventWaitStarted = "DrainWaitStarted"
	EventReleased    = "DrainReleased"
	EventDeadline    = "DrainDeadline"
	// EventNotInjected is on a pod's owner (or its namespace): the webhook
	// admitted the pod without the agent.
	EventNotInjected = "DraingateNotInjected"
	// EventNotSized is on a pod's owner (or its namespace): the webhook
	// could not size the pod's max-wait from its routes and gave it the
	// longest they may need.
	EventNotSized = "DraingateMaxWaitNotSized"
)

// events tells the pod's Events and the log when its wait starts and when
// it is released, once each.
type events struct {
	rec record.EventRecorder
	log *slog.Logger
	// released, when set, is told of each release once (metrics).
	released func(v api.Verdict, now time.Time)
}

// noteLocked writes the pod's Events for the verdict v its agent got.
func (e *events) noteLocked(pod *corev1.Pod, st *podState, v api.Verdict) {
	if !st.startNoted {
		st.startNoted = true
		e.rec.Eventf(pod, corev1.EventTypeNormal, EventWaitStarted, "preStop wait started: %s", v.Message)
		e.log.Info("wait started", "pod", st.key.String(), "uid", st.key.UID, "routes", len(v.Routes), "verdict", v.Message)
	}
	if v.Released && !st.releaseNoted {
		st.releaseNoted = true
		kind, reason := corev1.EventTypeNormal, EventReleased
		if v.Reason == api.ReasonDeadline {
			kind, reason = corev1.EventTypeWarning, EventDeadline
		}
		e.rec.Eventf(pod, kind, reason, "released after %s (%s): %s", time.Duration(v.Waited).Round(100*time.Millisecond), v.Reason, v.Message)
		if e.released != nil {
			e.released(v, time.Now())
		}
		e.log.Info("released", "pod", st.key.String(), "uid", st.key.UID, "reason", v.Reason, "waited", time.Duration(v.Waited).String(), "verdict", v.Message)
	}
}
