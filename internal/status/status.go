// Package status reads, for an operator, why pods are still terminating:
// the gate server's Events on each pod (api.EventWaitStarted and the
// rest), each annotated with the verdict the pod's agent got then. It is
// kubectl draingate's library, and reads with the caller's own rights:
// whoever may list a namespace's pods and Events may read its drains.
package status

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"

	"draingate.dev/draingate/api"
)

// Pod is one pod's drain as the gate server last told it.
type Pod struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	UID       string `json:"uid"`
	// Gone: the pod no longer exists; what is known of it comes from its
	// Events (kept by the API server for an hour by default).
	Gone bool `json:"gone,omitempty"`
	// DeletedAt is when its deletion began; zero when it is not being
	// deleted (a container stopping for another reason) or Gone.
	DeletedAt time.Time `json:"deleted_at,omitzero"`
	// Injected is the draingate version the webhook injected its agent
	// with; empty: the pod has no agent (or is Gone).
	Injected string `json:"injected,omitempty"`
	// Event is the reason of the gate server's latest Event on the pod,
	// At when it was written, and Verdict the verdict it carries; all
	// empty when the server wrote none (its agent never asked).
	Event   string       `json:"event,omitempty"`
	At      time.Time    `json:"at,omitzero"`
	Verdict *api.Verdict `json:"verdict,omitempty"`
}

// reasons are the Events the gate server writes on a waiting pod, in the
// order a drain writes them (for Events of the same second).
var reasons = []string{api.EventWaitStarted, api.EventRoutesChanged, api.EventReleased, api.EventDeadline}

// Terminating lists the pods being deleted in namespace (every namespace
// when empty), each with its latest verdict, sorted by namespace and name.
func Terminating(ctx context.Context, c kubernetes.Interface, namespace string) ([]Pod, error) {
	pods, err := c.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("list pods: %w", err)
	}
	var events []corev1.Event
	for _, r := range reasons {
		l, err := c.CoreV1().Events(namespace).List(ctx, metav1.ListOptions{
			FieldSelector: fields.Set{"involvedObject.kind": "Pod", "reason": r}.String()})
		if err != nil {
			return nil, fmt.Errorf("list Events: %w", err)
		}
		events = append(events, l.Items...)
	}
	var out []Pod
	for i := range pods.Items {
		p := &pods.Items[i]
		if p.DeletionTimestamp == nil {
			continue
		}
		out = append(out, fromEvents(of(p), events))
	}
	slices.SortFunc(out, func(a, b Pod) int {
		return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name))
	})
	return out, nil
}

// One reads one pod, terminating or not, or one that is gone: then its
// latest incarnation the Events tell of. A pod that is neither in the API
// nor in any draingate Event is an error.
func One(ctx context.Context, c kubernetes.Interface, namespace, name string) (Pod, error) {
	l, err := c.CoreV1().Events(namespace).List(ctx, metav1.ListOptions{
		FieldSelector: fields.Set{"involvedObject.kind": "Pod", "involvedObject.name": name}.String()})
	if err != nil {
		return Pod{}, fmt.Errorf("list Events: %w", err)
	}
	p, err := c.CoreV1().Pods(namespace).Get(ctx, name, metav1.GetOptions{})
	switch {
	case err == nil:
		return fromEvents(of(p), l.Items), nil
	case !apierrors.IsNotFound(err):
		return Pod{}, fmt.Errorf("get pod: %w", err)
	}
	gone := Pod{Namespace: namespace, Name: name, Gone: true}
	var latest *corev1.Event
	for i := range l.Items {
		if e := &l.Items[i]; slices.Contains(reasons, e.Reason) && (latest == nil || later(e, latest)) {
			latest = e
		}
	}
	if latest == nil {
		return Pod{}, fmt.Errorf("pod %s/%s not found, and no draingate Event on a pod of that name (Events last an hour by default)", namespace, name)
	}
	gone.UID = string(latest.InvolvedObject.UID)
	return fromEvents(gone, l.Items), nil
}

func of(p *corev1.Pod) Pod {
	out := Pod{Namespace: p.Namespace, Name: p.Name, UID: string(p.UID), Injected: p.Annotations[api.AnnotationInjected]}
	if p.DeletionTimestamp != nil {
		// The API server sets the deletion timestamp to the deletion's
		// time plus the grace period.
		grace := int64(0)
		if p.DeletionGracePeriodSeconds != nil {
			grace = *p.DeletionGracePeriodSeconds
		}
		out.DeletedAt = p.DeletionTimestamp.Add(-time.Duration(grace) * time.Second)
	}
	return out
}

// fromEvents fills p's latest verdict from the gate server's Events on
// that pod (by UID).
func fromEvents(p Pod, events []corev1.Event) Pod {
	var latest *corev1.Event
	for i := range events {
		e := &events[i]
		if string(e.InvolvedObject.UID) != p.UID || e.InvolvedObject.Namespace != p.Namespace || !slices.Contains(reasons, e.Reason) {
			continue
		}
		if latest == nil || later(e, latest) {
			latest = e
		}
	}
	if latest == nil {
		return p
	}
	p.Event, p.At = latest.Reason, when(latest)
	var v api.Verdict
	if err := json.Unmarshal([]byte(latest.Annotations[api.VerdictAnnotation]), &v); err == nil {
		p.Verdict = &v
	}
	return p
}

// when is an Event's latest occurrence.
func when(e *corev1.Event) time.Time {
	t := e.CreationTimestamp.Time
	for _, u := range []time.Time{e.LastTimestamp.Time, e.EventTime.Time} {
		if u.After(t) {
			t = u
		}
	}
	if e.Series != nil && e.Series.LastObservedTime.After(t) {
		t = e.Series.LastObservedTime.Time
	}
	return t
}

// later says whether a happened after b: by time; Events' times have a
// second's precision, so then by name (client-go names an Event after
// its object and the nanosecond it was made, in hex), then by where their
// reasons come in a drain.
func later(a, b *corev1.Event) bool {
	if ta, tb := when(a), when(b); !ta.Equal(tb) {
		return ta.After(tb)
	}
	if len(a.Name) == len(b.Name) && a.Name != b.Name {
		return a.Name > b.Name
	}
	return slices.Index(reasons, a.Reason) > slices.Index(reasons, b.Reason)
}
