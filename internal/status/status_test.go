package status

import (
	"encoding/json"
	"io"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"draingate.dev/draingate/api"
)

func event(name, uid, reason string, at time.Time, v *api.Verdict) corev1.Event {
	e := corev1.Event{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "shop", CreationTimestamp: metav1.NewTime(at.Truncate(time.Second))},
		InvolvedObject: corev1.ObjectReference{Kind: "Pod", Namespace: "shop", Name: "web", UID: types.UID("u" + uid)},
		Reason:         reason, LastTimestamp: metav1.NewTime(at.Truncate(time.Second))}
	if v != nil {
		b, _ := json.Marshal(v)
		e.Annotations = map[string]string{api.VerdictAnnotation: string(b)}
	}
	return e
}

// The latest of the gate's Events on the pod (this incarnation, by UID)
// is the one read: by time, then, within the Events' one second, by the
// nanoseconds in their names; other reasons are not the gate's.
func TestLatestVerdict(t *testing.T) {
	t0 := time.Date(2026, 12, 5, 20, 0, 0, 0, time.UTC)
	verdict := func(msg string) *api.Verdict { return &api.Verdict{Pod: "web", Namespace: "shop", Message: msg} }
	events := []corev1.Event{
		event("web.1880000000000001", "1", api.EventWaitStarted, t0, verdict("started")),
		event("web.1880000000000002", "1", api.EventRoutesChanged, t0.Add(200*time.Millisecond), verdict("first change")),
		event("web.1880000000000003", "1", api.EventRoutesChanged, t0.Add(300*time.Millisecond), verdict("second change")),
		event("web.1880000000000009", "1", "Killing", t0.Add(2*time.Second), nil),
		event("web.1880000000000010", "2", api.EventReleased, t0.Add(5*time.Second), verdict("another incarnation")),
	}
	p := fromEvents(Pod{Namespace: "shop", Name: "web", UID: "u1"}, events)
	if p.Event != api.EventRoutesChanged || p.Verdict == nil || p.Verdict.Message != "second change" {
		t.Errorf("read %s %+v, want the second routes-changed Event's verdict", p.Event, p.Verdict)
	}
	events = append(events, event("web.1880000000000004", "1", api.EventReleased, t0.Add(time.Second), verdict("released")))
	if p := fromEvents(Pod{Namespace: "shop", Name: "web", UID: "u1"}, events); p.Event != api.EventReleased || p.Verdict.Message != "released" {
		t.Errorf("read %s %+v, want the release", p.Event, p.Verdict)
	}
	if p := fromEvents(Pod{Namespace: "shop", Name: "web", UID: "u3"}, events); p.Event != "" || p.Verdict != nil {
		t.Errorf("a pod with no Event of the gate's read %s %+v", p.Event, p.Verdict)
	}
}

// status says for each pod where its drain is, and each route's state.
func TestWriteTable(t *testing.T) {
	now := time.Date(2026, 12, 5, 20, 0, 30, 0, time.UTC)
	tail := now.Add(5 * time.Second)
	pods := []Pod{
		{Namespace: "shop", Name: "held", UID: "u1", DeletedAt: now.Add(-12 * time.Second), Injected: "v0.1.0", Event: api.EventRoutesChanged, At: now.Add(-2 * time.Second),
			Verdict: &api.Verdict{Message: "waiting for 1 route of 2: targetgroup/tg draining", Routes: []api.Route{
				{Kind: "targetgroup", Name: "tg", State: "draining", TailEnds: &tail, Detail: "the target is draining; the ALB tail ends at 20:00:35"},
				{Kind: "endpointslice", Name: "web-abc", State: "closed", ClosedBy: api.ClosedByTail, Detail: "dropped, and the tail ended"}}}},
		{Namespace: "shop", Name: "bare", UID: "u2", DeletedAt: now.Add(-3 * time.Second)},
		{Namespace: "shop", Name: "silent", UID: "u3", DeletedAt: now.Add(-3 * time.Second), Injected: "v0.1.0"},
		{Namespace: "shop", Name: "serving", UID: "u4", Injected: "v0.1.0"},
	}
	var b strings.Builder
	if err := WriteTable(&b, pods, now); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		"shop/held", "12s", "waiting", "waiting for 1 route of 2", "(DrainRoutesChanged, 2s ago)",
		"targetgroup/tg", "draining", "the ALB tail ends at 20:00:35",
		"endpointslice/web-abc", "closed by its tail: dropped",
		"shop/bare", "no agent", "did not inject",
		"shop/silent", "not asked", "has not asked the gate server yet",
		"shop/serving", "running", "not being deleted: its agent asks the gate when it terminates",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("status printed no %q:\n%s", want, out)
		}
	}
	var e strings.Builder
	if err := WriteExplain(&e, pods[0], now); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"shop/held (uid u1)", "Released:   no", "Tail ends:  2026-12-05T20:00:35Z", "Closed by:  tail", "Detail:     dropped"} {
		if !strings.Contains(e.String(), want) {
			t.Errorf("explain printed no %q:\n%s", want, e.String())
		}
	}
}

// The command line reads flags before and after the pod, as kubectl does,
// and refuses what cannot mean anything.
func TestParse(t *testing.T) {
	o, err := parse("status", []string{"web", "-n", "shop", "-o", "json"}, io.Discard)
	if err != nil || o.pod != "web" || o.namespace != "shop" || o.output != "json" {
		t.Errorf("status web -n shop -o json: %+v, %v", o, err)
	}
	if o, err := parse("status", []string{"-A"}, io.Discard); err != nil || !o.all {
		t.Errorf("status -A: %+v, %v", o, err)
	}
	for _, c := range []struct {
		cmd  string
		args []string
		want string
	}{
		{"explain", nil, "needs a pod"},
		{"status", []string{"a", "b"}, "takes one pod"},
		{"status", []string{"web", "-A"}, "not both"},
		{"status", []string{"-A", "-n", "shop"}, "not both"},
		{"status", []string{"-o", "yaml"}, "want table, text or json"},
		{"explain", []string{"web", "-A"}, "flag provided but not defined"},
	} {
		if _, err := parse(c.cmd, c.args, io.Discard); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s %q: %v, want an error saying %q", c.cmd, c.args, err, c.want)
		}
	}
}
