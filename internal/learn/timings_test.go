package learn

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"draingate.dev/draingate/api"
	"draingate.dev/draingate/internal/drain"
	"draingate.dev/draingate/internal/evidence"
	"draingate.dev/draingate/internal/gate"
	"draingate.dev/draingate/internal/route"
	"draingate.dev/draingate/internal/route/targetgroup"
)

var tgKey = gate.RouteKey{Kind: "targetgroup", Name: "arn:tg"}

// released is the decision releasing pod (namespace ns, UID uid) at at,
// its target group route out since out with these samples.
func released(ns, uid string, out, at time.Time, samples ...evidence.Sample) *drain.Decision {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web-" + uid, UID: types.UID("u" + uid),
		DeletionTimestamp: &metav1.Time{Time: out.Add(time.Minute)}}}
	mem := gate.Memory{Routes: map[gate.RouteKey]gate.RouteMemory{
		tgKey: {OutSince: out, Samples: samples},
		{Kind: "endpointslice", Name: ns + "/web"}: {OutSince: out},
	}}
	return &drain.Decision{Key: route.KeyOf(pod), Pod: pod, At: at, Next: mem, Verdict: api.Verdict{Released: true}}
}

// quiet is a node that sent last at out+last and stopped by out+stop.
func quiet(addr string, out time.Time, last, stop time.Duration) evidence.Sample {
	return evidence.Sample{Addr: netip.MustParseAddr(addr), Last: out.Add(last), Stop: out.Add(stop)}
}

func newTimings() *Timings {
	tm := New(Options{Tails: true, Shorten: true})
	tm.use([]route.Source{targetgroup.New(targetgroup.Options{})})
	return tm
}

// A released pod's route teaches once, under its kind's key and the pod's
// namespace, per source: its stop's bound and how late it was seen; a
// source still sending at the release, the release; an arrival dated
// after the decision or a source quiet before the route went out,
// nothing. A decision that does not release teaches nothing.
func TestReleasesTeachOnce(t *testing.T) {
	tm := newTimings()
	out := t0
	at := out.Add(20 * time.Second)
	d := released("shop", "1", out, at,
		quiet("10.0.0.1", out, 3*time.Second, 4*time.Second),
		evidence.Sample{Addr: netip.MustParseAddr("10.0.0.2"), Last: out.Add(19 * time.Second), Stop: out.Add(19500 * time.Millisecond), Sending: true},
		quiet("10.0.0.3", out, -5*time.Second, -3*time.Second),
		quiet("10.0.0.4", out, 25*time.Second, 26*time.Second))
	d.Verdict.Released = false
	tm.Decided(d)
	if keys := tm.book.Keys(); len(keys) != 0 {
		t.Fatalf("a pod not released taught %v", keys)
	}
	d.Verdict.Released = true
	tm.Decided(d)
	tm.Decided(d)
	s := tm.book.Get("tg:arn:tg ns:shop")
	drain := DrainID("u1")
	want := []Sample{{At: at, D: 20 * time.Second, Seen: 19 * time.Second, Drain: drain, Src: SourceID("10.0.0.2")},
		{At: at, D: 4 * time.Second, Seen: 3 * time.Second, Drain: drain, Src: SourceID("10.0.0.1")}}
	if len(s.Samples) != 2 || s.Samples[0] != want[0] && s.Samples[0] != want[1] || s.Samples[1] != want[0] && s.Samples[1] != want[1] || s.Samples[0] == s.Samples[1] {
		t.Errorf("samples %+v, want %+v", s.Samples, want)
	}
	if keys := tm.book.Keys(); len(keys) != 1 {
		t.Errorf("keys %v, want the target group's in the pod's namespace alone", keys)
	}
}

// Every replica decides every drain and teaches what it saw of it: two
// replicas' samples of one drain, their bounds apart by their own polls
// and releases, are one sample per source once merged (the longer kept),
// through the Leases' encoding too, and count one drain.
func TestOneDrainTeachesOnceAcrossReplicas(t *testing.T) {
	a, b := newTimings(), newTimings()
	out := t0
	a.Decided(released("shop", "1", out, out.Add(20*time.Second),
		quiet("10.0.0.1", out, 3*time.Second, 4*time.Second), quiet("10.0.0.2", out, 5*time.Second, 6*time.Second)))
	b.Decided(released("shop", "1", out.Add(time.Second), out.Add(21*time.Second),
		quiet("10.0.0.1", out.Add(time.Second), 2*time.Second, 3500*time.Millisecond), quiet("10.0.0.2", out.Add(time.Second), 4*time.Second, 6*time.Second)))
	const key = "tg:arn:tg ns:shop"
	merged := a.book.Get(key)
	other, err := Decode(b.book.Get(key).Encode())
	if err != nil {
		t.Fatal(err)
	}
	merged.Merge(other, out.Add(time.Minute))
	if len(merged.Samples) != 2 || merged.Drains() != 1 {
		t.Fatalf("merged %+v: %d samples from %d drains, want 2 from 1", merged.Samples, len(merged.Samples), merged.Drains())
	}
	for _, x := range merged.Samples {
		want := 6 * time.Second // 10.0.0.2's bound, the same on both
		if x.Src == SourceID("10.0.0.1") {
			want = 4 * time.Second // a's, the longer
		}
		if x.D != want {
			t.Errorf("source %d: bound %v, want %v", x.Src, x.D, want)
		}
	}
}

// teach has n pods of ns released, each with its nodes stopping within
// spread of the route going out and seen up to a second before.
func teach(tm *Timings, ns string, n, nodes int, spread time.Duration) {
	for i := range n {
		out := t0.Add(time.Duration(i) * time.Minute)
		var ss []evidence.Sample
		for j := range nodes {
			stop := spread * time.Duration(1+(i*nodes+j)%10) / 10
			ss = append(ss, quiet(fmt.Sprintf("10.0.0.%d", j+1), out, stop-time.Second, stop))
		}
		tm.Decided(released(ns, fmt.Sprint(i), out, out.Add(20*time.Second), ss...))
	}
}

// A tail falls slowly: shortened only once MinDrains drains gave a sure
// bound, and never for a drain whose pod probes (one in probeEvery keeps
// the configured tail) or a pod not created yet; it rises at once: a node
// seen sending past the learnt tail raises it for the next pod.
func TestTailFallsSlowlyRisesAtOnce(t *testing.T) {
	tm := newTimings()
	tm.book.now = func() time.Time { return t0.Add(24 * time.Hour) }
	const configured = 20 * time.Second
	pod := route.PodKey{Namespace: "shop", Name: "web-x", UID: "u0"}
	for i := 1; probe(pod.UID); i++ {
		pod.UID = fmt.Sprint("u", i)
	}
	teach(tm, "shop", MinDrains-1, 12, 5*time.Second)
	if tail, why := tm.Tail("tg:arn:tg", pod, configured); tail != configured {
		t.Fatalf("%d samples from %d drains: tail %s (%s), want the configured", 12*(MinDrains-1), MinDrains-1, tail, why)
	}
	if c := tm.LateChance("tg:arn:tg", pod, configured); c != 0 {
		t.Errorf("too few drains: a late chance of %g, want none known", c)
	}
	teach(tm, "shop", 40, 12, 5*time.Second)
	tail, why := tm.Tail("tg:arn:tg", pod, configured)
	if tail != 5*time.Second || !strings.Contains(why, "shortened to 5s") {
		t.Fatalf("enough drains: tail %s (%s), want shortened to the longest stop, 5s", tail, why)
	}
	if c, short := tm.LateChance("tg:arn:tg", pod, tail), tm.LateChance("tg:arn:tg", pod, tail-time.Second); c != 1-TailQuantile || short != 0 {
		t.Errorf("late chance %g at the bound, %g below it: want %g, then none known", c, short, 1-TailQuantile)
	}
	if tail, _ := tm.Tail("tg:arn:tg", route.PodKey{Namespace: "shop"}, configured); tail != configured {
		t.Errorf("a pod not created yet: tail %s, want the configured (its max-wait must cover a probe)", tail)
	}
	probing := route.PodKey{Namespace: "shop", Name: "web-p", UID: "p0"}
	for i := 1; !probe(probing.UID); i++ {
		probing.UID = fmt.Sprint("p", i)
	}
	if tail, _ := tm.Tail("tg:arn:tg", probing, configured); tail != configured {
		t.Errorf("a probing pod: tail %s, want the configured", tail)
	}
	// One pod sees a node sending 9s after its route went out.
	out := t0.Add(2 * time.Hour)
	tm.Decided(released("shop", "late", out, out.Add(12*time.Second), evidence.Sample{Addr: netip.MustParseAddr("10.0.0.9"),
		Last: out.Add(9 * time.Second), Stop: out.Add(10 * time.Second)}))
	if tail, why := tm.Tail("tg:arn:tg", pod, configured); tail != 9*time.Second || !strings.Contains(why, "latest a node was seen sending") {
		t.Errorf("after a node seen at 9s: tail %s (%s), want 9s", tail, why)
	}
}

// One namespace's pods teach their own namespace alone: another
// namespace's pod reporting late arrivals (its agent is its own to forge)
// moves no tail of this one, shortened or configured.
func TestOneNamespaceMovesNoOther(t *testing.T) {
	tm := newTimings()
	tm.book.now = func() time.Time { return t0.Add(24 * time.Hour) }
	const configured = 20 * time.Second
	pod := route.PodKey{Namespace: "shop", Name: "web-x", UID: "u0"}
	for i := 1; probe(pod.UID); i++ {
		pod.UID = fmt.Sprint("u", i)
	}
	teach(tm, "shop", 60, 12, 5*time.Second)
	before, _ := tm.Tail("tg:arn:tg", pod, configured)
	other := route.PodKey{Namespace: "empty", Name: "web-y", UID: pod.UID}
	for i := range 100 {
		out := t0.Add(time.Duration(i) * time.Minute)
		tm.Decided(released("tenant", fmt.Sprint("f", i), out, out.Add(59*time.Second),
			evidence.Sample{Addr: netip.MustParseAddr("10.9.9.9"), Last: out.Add(58 * time.Second), Stop: out.Add(59 * time.Second)},
			evidence.Sample{Addr: netip.MustParseAddr("10.9.9.8"), Last: out.Add(time.Hour), Stop: out.Add(time.Hour)}))
	}
	if after, why := tm.Tail("tg:arn:tg", pod, configured); after != before || before != 5*time.Second {
		t.Errorf("shop's tail %s before, %s (%s) after another namespace's forged arrivals, want 5s both", before, after, why)
	}
	if tail, _ := tm.Tail("tg:arn:tg", other, configured); tail != configured {
		t.Errorf("a third namespace's tail %s, want the configured", tail)
	}
	if tail, _ := tm.Tail("tg:arn:tg", route.PodKey{Namespace: "tenant", UID: pod.UID}, configured); tail != 58*time.Second {
		t.Errorf("the forging namespace's own tail %s, want 58s (its own pods' waits lengthen; the arrival an hour late, after its pod's grace period, dropped)", tail)
	}
}
