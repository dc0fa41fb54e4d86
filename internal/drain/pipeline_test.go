package drain_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"draingate.dev/draingate/api"
	"draingate.dev/draingate/internal/drain"
	"draingate.dev/draingate/internal/drain/draintest"
	"draingate.dev/draingate/internal/gate"
	"draingate.dev/draingate/internal/route"
	"draingate.dev/draingate/internal/waitapi"
)

// counting is a new consumer of decisions: it counts what it is told.
type counting struct {
	mu                 sync.Mutex
	decided, asked     int
	gone               []route.PodKey
	verdicts           []api.Verdict
	lastPrev, lastNext gate.Memory
}

func (c *counting) Decided(d *drain.Decision) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.decided++
	if d.Asked {
		c.asked++
	}
	c.verdicts = append(c.verdicts, d.Verdict)
	c.lastPrev, c.lastNext = d.Prev, d.Next
}

func (c *counting) Gone(pod route.PodKey) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gone = append(c.gone, pod)
}

// A consumer added beside the others (no change to the tracker or the
// server) is told each decision once: as many as the route source was
// asked to observe, whether an ask, a route change or the clock (a tail's
// end) made it; the asks among them marked; the pod's going once.
func TestEachConsumerToldOncePerDecision(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := &counting{}
		r := draintest.NewRig(drain.Options{Consumers: []drain.Consumer{c}})
		r.Put(draintest.Pod("u1", true)) // the informer: a decision
		r.Ask(t, "u1")                   // the agent: a decision
		r.Src.Set(map[string]bool{"a": true})
		r.RoutesChanged("shop", "") // the source: a decision
		r.Ask(t, "u1")
		time.Sleep(draintest.Tail + time.Second) // the tail's end: the timer's decision
		v := r.Ask(t, "u1")
		if !v.Released {
			t.Fatalf("after the tail: %+v", v)
		}
		r.Remove(true)
		c.mu.Lock()
		defer c.mu.Unlock()
		if c.decided != r.Src.Observed() || c.decided != 6 || c.asked != 3 {
			t.Errorf("told %d decisions (%d asked); the source observed %d times: want one each, 6 with 3 asked", c.decided, c.asked, r.Src.Observed())
		}
		if last := c.verdicts[len(c.verdicts)-1]; !last.Released || last.Reason != api.ReasonDrained {
			t.Errorf("the last decision told: %+v, want the release", last)
		}
		if !c.lastNext.Routes[gate.RouteKey{Kind: draintest.Kind, Name: "a"}].WasRoute {
			t.Errorf("the decision's memory lacks the route: %+v", c.lastNext)
		}
		if want := []route.PodKey{{Namespace: "shop", Name: "web", UID: "u1"}}; !slices.Equal(c.gone, want) {
			t.Errorf("gone %v, want %v once", c.gone, want)
		}
	})
}

// memory is a shared memory (drain.Store) that notes what it is asked.
type memory struct {
	log  func(string)
	recs map[types.UID]drain.Record
}

func (m *memory) Record(uid types.UID) drain.Record {
	m.log("memory: load")
	return m.recs[uid]
}

func (m *memory) Note(uid types.UID, r drain.Record) {
	m.log("memory: note")
	m.recs[uid] = m.recs[uid].Union(r)
}
func (m *memory) Drop(uid types.UID)         { delete(m.recs, uid) }
func (m *memory) Pods() map[types.UID]string { return nil }

// tracing is the scripted source, noting each observation.
type tracing struct {
	*draintest.Source
	log func(string)
}

func (s tracing) Observe(ctx context.Context, pod *corev1.Pod, known []gate.Known, waiting bool) ([]gate.Observation, error) {
	s.log("route: observe")
	return s.Source.Observe(ctx, pod, known, waiting)
}

// consumer notes each decision it is told.
type consumer struct {
	name string
	log  func(string)
}

func (c consumer) Decided(*drain.Decision) { c.log(c.name + ": decided") }
func (c consumer) Gone(route.PodKey)       {}

// TestOneAskOnePass: one agent's ask through the wait API's handler goes
// through the drain's stages once each, in order: the pod's memory, the
// observation of its routes, then each consumer of the decision (the
// shared memory first). At each of them the stack holds the draingate
// packages waitapi → drain → the stage's own, each once: no stage calls
// back into the tracker or the handler.
func TestOneAskOnePass(t *testing.T) {
	var mu sync.Mutex
	var steps []string
	var stacks [][]string
	log := func(step string) {
		mu.Lock()
		defer mu.Unlock()
		steps = append(steps, step)
		stacks = append(stacks, rooms())
	}
	src := tracing{Source: draintest.NewSource(map[string]bool{"a": true}), log: log}
	r := draintest.NewRig(drain.Options{Sources: []route.Source{src}, Memory: &memory{log: log, recs: map[types.UID]drain.Record{}},
		Consumers: []drain.Consumer{consumer{"learning", log}, consumer{"events", log}}})
	const uid = "0f7e2c1a-9b3d-4e5f-8a6b-7c8d9e0f1a2b"
	p := draintest.Pod(uid, true)
	p.Annotations = map[string]string{api.AnnotationInjected: "v1"} // its memory is shared
	r.Put(p)
	mu.Lock()
	steps, stacks = nil, nil
	mu.Unlock()

	srv := httptest.NewServer(waitapi.NewHandler(r.Tracker, waitapi.Config{Ready: r.Ready}))
	defer srv.Close()
	resp, err := http.Get(api.DrainRequest{Namespace: "shop", Pod: "web", UID: uid}.URL(srv.URL))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("wait API answered %d: %s", resp.StatusCode, body)
	}
	mu.Lock()
	defer mu.Unlock()
	want := []string{"memory: load", "route: observe", "memory: note", "learning: decided", "events: decided"}
	if !slices.Equal(steps, want) {
		t.Errorf("one ask went through %q, want %q", steps, want)
	}
	for i, st := range stacks {
		if len(st) != 3 || st[0] != "internal/waitapi" || st[1] != "internal/drain" {
			t.Errorf("%s: the stack holds %q; want internal/waitapi, internal/drain, then the stage's own package", steps[i], st)
		}
	}
}

// rooms lists the draingate packages on the caller's stack, outermost
// first, each run of one package once.
func rooms() []string {
	pcs := make([]uintptr, 64)
	n := runtime.Callers(3, pcs)
	frames := runtime.CallersFrames(pcs[:n])
	var out []string
	for {
		f, more := frames.Next()
		const mod = "draingate.dev/draingate/"
		if name, ok := strings.CutPrefix(f.Function, mod); ok {
			pkg := name[:strings.LastIndex(name[:strings.Index(name+".", ".")], "/")+1]
			rest := name[len(pkg):]
			pkg += rest[:strings.Index(rest, ".")]
			if len(out) == 0 || out[0] != pkg {
				out = append([]string{pkg}, out...)
			}
		}
		if !more {
			return out
		}
	}
}

// keeping is a consumer that keeps the "test" kind's work for the pods it
// names (as learning does for a gone pod whose lag is still to learn).
type keeping struct {
	counting
	keep map[route.PodKey]bool
}

func (k *keeping) Keeps(pod route.PodKey, kind string) bool {
	return kind == draintest.Kind && k.keep[pod]
}

// A source's work for a pod a keeper keeps is neither forgotten when its
// agent stops asking nor dropped when it is gone: the keeper does that;
// another pod's is.
func TestKeeperKeepsTheSourcesWork(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		u1 := route.PodKey{Namespace: "shop", Name: "web", UID: "u1"}
		k := &keeping{keep: map[route.PodKey]bool{u1: true}}
		r := draintest.NewRig(drain.Options{Consumers: []drain.Consumer{k}})
		r.Put(draintest.Pod("u1", true))
		r.Ask(t, "u1")
		r.Janitor(time.Now().Add(time.Hour))
		r.Remove(true)
		if got := r.Src.Forgot(); len(got) != 0 {
			t.Errorf("the source forgot or dropped %v, which the keeper keeps", got)
		}
		if len(k.gone) != 1 {
			t.Errorf("the keeper was told of %v gone, want the pod", k.gone)
		}
		r.Put(draintest.Pod("u2", true))
		r.Remove(true)
		if got := r.Src.Forgot(); len(got) != 1 || got[0].UID != "u2" {
			t.Errorf("dropped %v; want the pod the keeper does not keep", got)
		}
	})
}
