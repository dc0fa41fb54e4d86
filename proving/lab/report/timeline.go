package report

import (
	"maps"
	"slices"
	"sync"
	"time"
)

// Timeline is one strategy's run over time, for the PNG.
//
// Requests are counted per whole second since Start by AddRequest rather
// than kept one by one: a run at a few hundred requests/s for many minutes
// would otherwise hold millions of timestamps for a plot whose resolution is
// a second. Rotation and SIGTERMs are filled by the caller directly.
//
// A Timeline is used as a value (Strategy's methods copy it), so its counts
// live behind a reference: copies made after the first AddRequest share
// them. Fill it before copying it anywhere.
type Timeline struct {
	Start, End time.Time
	// Rotation is how many pods are in the data plane's rotation: a step
	// function, each Step holding from its At until the next one.
	Rotation []Step
	// SIGTERMs has one mark per pod, when it was sent SIGTERM.
	SIGTERMs []time.Time

	counts map[int64]*Bucket // by second offset from Start
}

// Step is one change of a step function: from At on, the value is N.
type Step struct {
	At time.Time
	N  int
}

// Bucket is one second of requests: those sent in
// [Start+Second s, Start+Second+1 s). Second is negative for requests sent
// before Start, which are kept rather than dropped.
type Bucket struct {
	Second       int64
	Sent, Failed int
}

// timelineMu guards every Timeline's counts. A Timeline cannot hold its own
// lock (it is copied by value, and its zero value must work), and one lock
// for the lab's load of at most some thousands of requests/s costs nothing.
var timelineMu sync.Mutex

// AddRequest counts one request sent at at, failed or not. It is safe for
// concurrent use. If Start is still zero, at becomes Start, so that a
// forgotten Start cannot turn offsets into centuries.
func (t *Timeline) AddRequest(at time.Time, failed bool) {
	timelineMu.Lock()
	defer timelineMu.Unlock()
	if t.Start.IsZero() {
		t.Start = at
	}
	if t.counts == nil {
		t.counts = make(map[int64]*Bucket)
	}
	sec := floorSeconds(at.Sub(t.Start))
	b := t.counts[sec]
	if b == nil {
		b = &Bucket{Second: sec}
		t.counts[sec] = b
	}
	b.Sent++
	if failed {
		b.Failed++
	}
}

// Buckets returns the seconds that saw at least one request, in order.
// Seconds without requests are absent, not zero-filled, so that one stray
// timestamp cannot allocate a huge slice.
func (t Timeline) Buckets() []Bucket {
	timelineMu.Lock()
	defer timelineMu.Unlock()
	out := make([]Bucket, 0, len(t.counts))
	for _, sec := range slices.Sorted(maps.Keys(t.counts)) {
		out = append(out, *t.counts[sec])
	}
	return out
}

// floorSeconds rounds toward minus infinity, so that a request 0.5 s before
// Start lands in second -1, not 0.
func floorSeconds(d time.Duration) int64 {
	s := int64(d / time.Second)
	if d < 0 && d%time.Second != 0 {
		s--
	}
	return s
}
