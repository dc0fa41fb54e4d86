package events

import (
	"encoding/json"
	"io"
	"log/slog"
	"reflect"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/tools/record"

	"draingate.dev/draingate/api"
	"draingate.dev/draingate/internal/drain"
	"draingate.dev/draingate/internal/drain/draintest"
)

// rig is a tracker (draintest) whose decisions a Writer follows, its
// Events in a fake recorder.
func rig() (*draintest.Rig, *record.FakeRecorder) {
	rec := record.NewFakeRecorder(100)
	w := New(rec, slog.New(slog.NewTextHandler(io.Discard, nil)), prometheus.NewRegistry())
	return draintest.NewRig(drain.Options{Consumers: []drain.Consumer{w}}), rec
}

func reasons(rec *record.FakeRecorder) []string {
	var out []string
	for {
		select {
		case e := <-rec.Events:
			out = append(out, strings.Fields(e)[1])
		default:
			return out
		}
	}
}

// A pod's wait start and release are written once each, for the decisions
// that answer its agent only: the tracker's own (a route change, a
// tail's end) write nothing.
func TestStartAndReleaseOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r, rec := rig()
		r.Put(draintest.Pod("u1", true))
		if got := reasons(rec); len(got) != 0 {
			t.Fatalf("events %v before the agent asked", got)
		}
		r.Src.Set(map[string]bool{"a": true})
		r.RoutesChanged("shop", "")
		r.Ask(t, "u1")
		time.Sleep(draintest.Tail + time.Second)
		r.Ask(t, "u1")
		r.Ask(t, "u1")
		if got := reasons(rec); !slices.Equal(got, []string{api.EventWaitStarted, api.EventReleased}) {
			t.Errorf("events %v, want one wait-started and one released", got)
		}
	})
}

// A waiting pod's Events: one when its wait starts, one each time a route
// changes state (not on every ask), and the release; each carries the
// verdict its agent got.
func TestEventOnRouteChange(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r, rec := rig()
		r.Put(draintest.Pod("u1", true))
		r.Ask(t, "u1")
		r.Ask(t, "u1")
		if got := reasons(rec); !slices.Equal(got, []string{api.EventWaitStarted}) {
			t.Fatalf("events %v after two asks with the route in, want one wait-started", got)
		}
		r.Src.Set(map[string]bool{"a": true})
		r.RoutesChanged("shop", "")
		r.Ask(t, "u1")
		time.Sleep(time.Second)
		r.Ask(t, "u1")
		if got := reasons(rec); !slices.Equal(got, []string{api.EventRoutesChanged}) {
			t.Fatalf("events %v after the route went out and two asks, want one routes-changed", got)
		}
		time.Sleep(draintest.Tail)
		if v := r.Ask(t, "u1"); !v.Released {
			t.Fatalf("after the tail: %+v", v)
		}
		if got := reasons(rec); !slices.Equal(got, []string{api.EventReleased}) {
			t.Fatalf("events %v at the release, want only released (it tells the closed routes)", got)
		}
	})
}

// Every Event on a waiting pod carries the verdict in full, as JSON that
// reads back the same.
func TestVerdictAnnotation(t *testing.T) {
	tail := time.Date(2026, 12, 5, 20, 0, 0, 0, time.UTC)
	v := api.Verdict{Pod: "web", Namespace: "shop", UID: "u1", Released: true, Reason: api.ReasonDrained, Waited: api.Duration(12 * time.Second),
		Routes: []api.Route{{Kind: "targetgroup", Name: "tg", State: "closed", TailEnds: &tail, ClosedBy: api.ClosedByTraffic, Detail: "quiet"}}, Message: "released"}
	var back api.Verdict
	if err := json.Unmarshal([]byte(annotation(v)[api.VerdictAnnotation]), &back); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back, v) {
		t.Errorf("read back %+v, want %+v", back, v)
	}
}
