package learn

import (
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"
)

// The quantile a learned tail covers, and the confidence of its bound:
// the 0.99-quantile at 95 %, which 299 samples can bound. With fewer, the
// longest sample stands for it, which can only lengthen a wait. A tail is
// shortened only once the samples also come from MinDrains drains (a
// drain gives one sample per load balancer node that sent to its pod).
// docs/evidence.md ("Measured tails") says why these.
const (
	TailQuantile = 0.99
	TailAlpha    = 0.05
	MinDrains    = 30
)

// Book holds one Summary per key (a load balancer, a route kind) and
// whether each changed since it was last persisted. Safe for concurrent
// use; the zero value is not: use NewBook.
type Book struct {
	mu    sync.Mutex
	sums  map[string]*Summary
	dirty map[string]bool
	now   func() time.Time
}

// NewBook returns an empty book.
func NewBook() *Book {
	return &Book{sums: map[string]*Summary{}, dirty: map[string]bool{}, now: time.Now}
}

// Add records a duration learnt for key at at.
func (b *Book) Add(key string, at time.Time, d time.Duration) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.summaryLocked(key).Add(at, d)
	b.dirty[key] = true
}

// summaryLocked is key's summary, made empty on first use.
func (b *Book) summaryLocked(key string) *Summary {
	s := b.sums[key]
	if s == nil {
		s = &Summary{}
		b.sums[key] = s
	}
	return s
}

// AddSample records a sample learnt for key (Summary.AddSample): a
// propagation (D bounds it, Seen is how late the node was seen sending),
// or a lag, of the drain and source it names.
func (b *Book) AddSample(key string, x Sample) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.summaryLocked(key).AddSample(x)
	b.dirty[key] = true
}

// Merge adds what another replica learnt, or what was persisted, for key.
// It does not mark the key changed: persisting merges with the store, so
// what this replica added itself (Add) is what it must write.
func (b *Book) Merge(key string, other Summary) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.summaryLocked(key).Merge(other, b.now())
}

// Get returns a copy of key's summary.
func (b *Book) Get(key string) Summary {
	b.mu.Lock()
	defer b.mu.Unlock()
	if s := b.sums[key]; s != nil {
		return Summary{Samples: slices.Clone(s.Samples)}
	}
	return Summary{}
}

// Keys lists the keys, sorted.
func (b *Book) Keys() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Sorted(maps.Keys(b.sums))
}

// Dirty returns the keys changed since they were last marked clean, and
// marks them clean: the caller persists them (and marks one dirty again
// with Touch if that fails).
func (b *Book) Dirty() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	keys := slices.Sorted(maps.Keys(b.dirty))
	clear(b.dirty)
	return keys
}

// Touch marks key changed again (its persisting failed).
func (b *Book) Touch(key string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.dirty[key] = true
}

// Estimate is what a key's summary says of a tail: Bound is the
// TailQuantile's upper bound when the samples suffice (Sure), else the
// longest sample; N is the number of samples. The zero value is nothing
// learnt.
type Estimate struct {
	Bound time.Duration
	N     int
	Sure  bool
	// Seen is the latest a node was seen sending (Summary.MaxSeen);
	// Drains the drains the samples came from (Summary.Drains).
	Seen   time.Duration
	Drains int
	// Spread, when not Sure, is how far the longest sample lies above
	// the samples' median: what a few samples say of how much longer the
	// next may be (Generous).
	Spread time.Duration
}

// Estimate returns what key's summary says now.
func (b *Book) Estimate(key string) Estimate {
	s := b.Get(key)
	s.Prune(b.now())
	seen, _ := s.MaxSeen()
	if d, ok := s.Upper(TailQuantile, TailAlpha); ok {
		return Estimate{Bound: d, N: len(s.Samples), Sure: true, Seen: seen, Drains: s.Drains()}
	}
	d, ok := s.Max()
	if !ok {
		return Estimate{}
	}
	return Estimate{Bound: d, N: len(s.Samples), Spread: d - s.Median(), Seen: seen, Drains: s.Drains()}
}

// Generous is a bound for a value that costs little when too long and
// requests when too short (a max-wait: the gate releases a pod as soon as
// its routes close, whatever its max-wait): the sure bound, else the
// longest sample plus its spread above the median, since the next sample
// of a few may well be longer than all of them. For 12 draws its mean lies
// above the 0.99-quantile of a uniform, normal, exponential or log-normal
// distribution, and it covers that quantile in 98 %, 83 %, 59 % and 41 %
// of such draws (20,000 simulated each): more than the longest alone, far
// from sure. what names the result as Phrase does.
func (l Estimate) Generous(what string) (time.Duration, string) {
	if l.Sure || l.Spread <= 0 {
		return l.Bound, l.Phrase(what)
	}
	return l.Bound + l.Spread, fmt.Sprintf("%s, plus its %s above their median", l.Phrase(what), l.Spread.Round(100*time.Millisecond))
}

// Tail is the tail a route takes given its configured tail and what was
// learnt. It rises at once: never shorter than the latest any node was
// seen sending after its target went out (Seen), so that a load balancer
// seen sending later than its tail holds the next routes longer. It falls
// slowly: shorter than the configured tail only when shorten is set, the
// bound is sure and the samples come from MinDrains drains, and then to
// the bound (or Seen, if later). why, when the learnt value decided, says
// so as a phrase ("shortened to 4.2s by the 0.99-quantile's bound at 95 %
// of 412 propagations learnt").
func (l Estimate) Tail(configured time.Duration, shorten bool) (tail time.Duration, why string) {
	switch {
	case l.N == 0:
		return configured, ""
	case l.Seen > configured:
		return l.Seen, fmt.Sprintf("lengthened to %s: a node was seen sending that late (%s)", l.Seen.Round(100*time.Millisecond), l.counted())
	case shorten && l.Sure && l.Drains >= MinDrains && l.Bound < configured:
		if l.Seen > l.Bound {
			return l.Seen, fmt.Sprintf("shortened to %s, the latest a node was seen sending (%s)", l.Seen.Round(100*time.Millisecond), l.counted())
		}
		return l.Bound, fmt.Sprintf("shortened to %s by %s", l.Bound.Round(100*time.Millisecond), l.phrase())
	}
	return configured, ""
}

// LateChance is the chance that a node stops later than tail, as far as
// the estimate is sure: 1 − TailQuantile once the bound is sure, from
// MinDrains drains, and tail at least the bound; 0 (not known) else.
func (l Estimate) LateChance(tail time.Duration) float64 {
	if l.Sure && l.Drains >= MinDrains && tail >= l.Bound {
		return 1 - TailQuantile
	}
	return 0
}

// counted says how many propagations and drains were learnt.
func (l Estimate) counted() string {
	return fmt.Sprintf("%d propagations learnt from %d drains", l.N, l.Drains)
}

func (l Estimate) phrase() string { return l.Phrase("propagations") }

// Phrase names the value a wait takes from what was learnt, counting the
// samples as what ("lags"): "the longest of 6 lags learnt".
func (l Estimate) Phrase(what string) string {
	if l.Sure {
		return fmt.Sprintf("the %g-quantile's bound at %.0f %% of %d %s learnt", TailQuantile, 100*(1-TailAlpha), l.N, what)
	}
	return fmt.Sprintf("the longest of %d %s learnt", l.N, what)
}

// LagPrefix starts the keys of lags (a pod's deletion to its route going
// out) in a book that holds propagations too: "lag:" and the load
// balancer's key.
const LagPrefix = "lag:"
