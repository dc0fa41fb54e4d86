// Package learn is learning: what the cluster's drains teach about its
// load balancers, for the waits to be sized by. It is one room: the
// bounded, decaying summaries of durations per key (a load balancer:
// Summary, Book), their sharing among replicas and across restarts in
// Leases (Leases), and Timings, which takes each drain's decision
// (drain.Consumer) and records what it teaches: how long each of a load
// balancer's nodes kept sending after a route went out (its propagation,
// which lengthens that load balancer's tails: route.LearnedTails), and how
// long after a pod's deletion its routes went out (the lag, which sizes
// new pods' max-wait: AdmissionNeed), watching the routes of pods released
// at their deadline until they go out. The kinds of route give it their
// keys (route.Learner); it names no kind.
//
// What a learned value may do: lengthen a wait whenever it says a load
// balancer sends later than its configured tail, and shorten one only
// when the user opted in and the bound is sure (Summary.Upper's ok).
package learn

import (
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"math"
	"slices"
	"time"
)

// Bounds of a summary: the latest MaxSamples, none older than MaxAge. A
// load balancer that changed (another configuration, a new version of
// AWS's data plane) is forgotten within MaxAge, or sooner when busy.
const (
	MaxSamples = 512
	MaxAge     = 7 * 24 * time.Hour
)

// Sample is one duration learnt at a time. D is what the bounds take: for
// a propagation, how late the node may have sent at the latest (its stop's
// upper bound, evidence.Sample.Stop); Seen, how late it was seen sending
// (its latest arrival: a node seen sending that late may do so again). A
// lag's Seen is its D.
type Sample struct {
	At   time.Time
	D    time.Duration
	Seen time.Duration
	// Drain names the drain the sample came from (DrainID of the pod's
	// UID; 0: not known, as in formats 1 and 2) and Src its source within
	// the drain (SourceID of the node's address; 0 for a lag). Every
	// replica decides every drain, so each teaches what it saw of it: the
	// same drain and source are one sample (the longer kept), or the
	// samples would count a drain as many times as there are replicas and
	// the bounds would be surer than the drains allow.
	Drain uint32
	Src   uint16
}

// DrainID is the Sample.Drain of the pod with this UID: a 32-bit hash,
// never 0.
func DrainID(uid string) uint32 {
	h := fnv.New32a()
	h.Write([]byte(uid))
	return max(h.Sum32(), 1)
}

// SourceID is the Sample.Src of a source at addr within a drain: a 16-bit
// hash, never 0. Two sources of one drain that share it are one sample,
// the longer: a drain teaches one sample less, never a shorter one.
func SourceID(addr string) uint16 {
	h := fnv.New32a()
	h.Write([]byte(addr))
	v := h.Sum32()
	return max(uint16(v^v>>16), 1)
}

// same reports whether a and b are one drain's sample of one source.
func (a Sample) same(b Sample) bool { return a.Drain != 0 && a.Drain == b.Drain && a.Src == b.Src }

// fold keeps in a what b adds: the longer bound and the later seen.
func (a *Sample) fold(b Sample) {
	a.D, a.Seen = max(a.D, b.D), max(a.Seen, b.Seen)
}

// Summary is the samples of one key, oldest first. The zero value is
// empty and usable.
type Summary struct {
	Samples []Sample
}

// Add records d, learnt at at, and drops what falls out of the bounds as
// of at. Negative durations count as zero.
func (s *Summary) Add(at time.Time, d time.Duration) { s.AddSeen(at, d, d) }

// AddSeen records a sample whose bound is d and whose seen part is seen
// (at most d), learnt at at, as Add does.
func (s *Summary) AddSeen(at time.Time, d, seen time.Duration) {
	s.AddSample(Sample{At: at, D: d, Seen: seen})
}

// AddSample records x (its seen part at most its bound), or folds it into
// the sample of the same drain and source, and drops what falls out of the
// bounds as of x.At.
func (s *Summary) AddSample(x Sample) {
	x.D = max(x.D, 0)
	x.Seen = min(max(x.Seen, 0), x.D)
	if i := s.index(x); i >= 0 {
		s.Samples[i].fold(x)
	} else {
		i, _ := slices.BinarySearchFunc(s.Samples, x.At, func(y Sample, t time.Time) int { return y.At.Compare(t) })
		s.Samples = slices.Insert(s.Samples, i, x)
	}
	s.Prune(x.At)
}

// index is where the sample of x's drain and source is, or -1.
func (s *Summary) index(x Sample) int {
	if x.Drain == 0 {
		return -1
	}
	return slices.IndexFunc(s.Samples, x.same)
}

// Prune drops samples older than MaxAge at now, then the oldest beyond
// MaxSamples.
func (s *Summary) Prune(now time.Time) {
	cut := 0
	for cut < len(s.Samples) && now.Sub(s.Samples[cut].At) > MaxAge {
		cut++
	}
	if over := len(s.Samples) - cut - MaxSamples; over > 0 {
		cut += over
	}
	s.Samples = slices.Delete(s.Samples, 0, cut)
}

// Merge adds other's samples that s lacks (a sample is its drain and
// source, or without them its time, to the second as Encode keeps it, and
// its durations, to the millisecond): what another replica learnt, or what
// was persisted. One drain's sample of one source that both hold is
// folded into one, the longer.
func (s *Summary) Merge(other Summary, now time.Time) {
	type key struct{ at, ms, seen int64 }
	keyOf := func(x Sample) key { return key{x.At.Unix(), x.D.Milliseconds(), x.Seen.Milliseconds()} }
	seen := map[key]bool{}
	for _, x := range s.Samples {
		seen[keyOf(x)] = true
	}
	for _, x := range other.Samples {
		if i := s.index(x); i >= 0 {
			s.Samples[i].fold(x)
			continue
		}
		if k := keyOf(x); !seen[k] {
			seen[k] = true
			s.Samples = append(s.Samples, x)
		}
	}
	slices.SortStableFunc(s.Samples, func(a, b Sample) int { return a.At.Compare(b.At) })
	s.Prune(now)
}

// Max is the longest duration learnt, and whether there is any: a load
// balancer seen sending that late may do so again, which may lengthen a
// wait whatever the sample's size.
func (s Summary) Max() (time.Duration, bool) {
	if len(s.Samples) == 0 {
		return 0, false
	}
	m := s.Samples[0].D
	for _, x := range s.Samples[1:] {
		m = max(m, x.D)
	}
	return m, true
}

// MaxSeen is the latest a node was seen sending (Sample.Seen), and whether
// there is any sample.
func (s Summary) MaxSeen() (time.Duration, bool) {
	if len(s.Samples) == 0 {
		return 0, false
	}
	m := s.Samples[0].Seen
	for _, x := range s.Samples[1:] {
		m = max(m, x.Seen)
	}
	return m, true
}

// Drains counts the distinct times the samples were learnt at, to the
// second: a drain's samples share its release time, so this is the drains
// they came from (two released in one second count as one).
func (s Summary) Drains() int {
	drains, times := map[uint32]bool{}, map[int64]bool{}
	for _, x := range s.Samples {
		if x.Drain != 0 {
			drains[x.Drain] = true
		} else {
			times[x.At.Unix()] = true
		}
	}
	return len(drains) + len(times)
}

// Median is the samples' median (the lower of the two middle ones for an
// even count); zero without samples.
func (s Summary) Median() time.Duration {
	if len(s.Samples) == 0 {
		return 0
	}
	ds := make([]time.Duration, len(s.Samples))
	for i, x := range s.Samples {
		ds[i] = x.D
	}
	slices.Sort(ds)
	return ds[(len(ds)-1)/2]
}

// Upper is an upper confidence bound, at confidence 1 − alpha, of the
// q-quantile of the durations, taking the samples for independent draws
// of one distribution: the k-th smallest sample, k the least for which
// the q-quantile lies at or below it with chance at least 1 − alpha
// (P[Binomial(n, q) < k] ≥ 1 − alpha). ok is false when the samples are
// too few for any (n below log(alpha)/log(q): 299 for the 0.99-quantile
// at 95 %): then nothing sure can be said below the longest sample.
func (s Summary) Upper(q, alpha float64) (d time.Duration, ok bool) {
	n := len(s.Samples)
	if n == 0 || q <= 0 || q >= 1 || alpha <= 0 || alpha >= 1 {
		return 0, false
	}
	ds := make([]time.Duration, n)
	for i, x := range s.Samples {
		ds[i] = x.D
	}
	slices.Sort(ds)
	// cdf accumulates P[Binomial(n, q) ≤ j] for j = 0, 1, ...
	cdf := 0.0
	for k := 1; k <= n; k++ {
		cdf += binomPMF(n, k-1, q)
		if cdf >= 1-alpha {
			return ds[k-1], true
		}
	}
	return 0, false
}

// binomPMF is P[Binomial(n, p) = k].
func binomPMF(n, k int, p float64) float64 {
	lg := func(x float64) float64 { v, _ := math.Lgamma(x); return v }
	return math.Exp(lg(float64(n+1)) - lg(float64(k+1)) - lg(float64(n-k+1)) + float64(k)*math.Log(p) + float64(n-k)*math.Log1p(-p))
}

// Encode writes the summary compactly, for an annotation or a ConfigMap
// key: per sample its time (Unix seconds), duration and seen part
// (milliseconds), drain and source, as varints, base64 (RawURL). About 16
// bytes a sample. Format 3; formats 1 (without the seen part, taken for
// the duration) and 2 (without drain and source) are still read.
func (s Summary) Encode() string {
	b := make([]byte, 0, 1+20*len(s.Samples))
	b = append(b, 3) // format version
	var last int64
	for _, x := range s.Samples {
		t := x.At.Unix()
		b = binary.AppendVarint(b, t-last)
		b = binary.AppendUvarint(b, uint64(x.D.Milliseconds()))
		b = binary.AppendUvarint(b, uint64(x.Seen.Milliseconds()))
		b = binary.AppendUvarint(b, uint64(x.Drain))
		b = binary.AppendUvarint(b, uint64(x.Src))
		last = t
	}
	return base64.RawURLEncoding.EncodeToString(b)
}

// maxLearnt is the longest duration a decoded sample may hold: anything
// longer is a corrupt value, not a load balancer.
const maxLearnt = 24 * time.Hour

// Decode reads what Encode wrote, checking it: samples in time order, none
// longer than a day, at most MaxSamples (the latest kept). An empty string
// is an empty summary.
func Decode(v string) (Summary, error) {
	if v == "" {
		return Summary{}, nil
	}
	b, err := base64.RawURLEncoding.DecodeString(v)
	if err != nil {
		return Summary{}, fmt.Errorf("learned summary: %w", err)
	}
	if len(b) == 0 || b[0] < 1 || b[0] > 3 {
		return Summary{}, errors.New("learned summary: unknown format (written by a newer draingate?)")
	}
	withSeen, withDrain := b[0] >= 2, b[0] >= 3
	b = b[1:]
	var s Summary
	var last int64
	for len(b) > 0 {
		dt, n := binary.Varint(b)
		if n <= 0 {
			return Summary{}, errors.New("learned summary: truncated")
		}
		b = b[n:]
		ms, n := binary.Uvarint(b)
		if n <= 0 {
			return Summary{}, errors.New("learned summary: truncated")
		}
		b = b[n:]
		seen := ms
		if withSeen {
			if seen, n = binary.Uvarint(b); n <= 0 {
				return Summary{}, errors.New("learned summary: truncated")
			}
			b = b[n:]
		}
		var drain, src uint64
		if withDrain {
			if drain, n = binary.Uvarint(b); n <= 0 {
				return Summary{}, errors.New("learned summary: truncated")
			}
			b = b[n:]
			if src, n = binary.Uvarint(b); n <= 0 {
				return Summary{}, errors.New("learned summary: truncated")
			}
			b = b[n:]
		}
		if dt < 0 && len(s.Samples) > 0 || ms > uint64(maxLearnt.Milliseconds()) || seen > ms || drain > math.MaxUint32 || src > math.MaxUint16 {
			return Summary{}, errors.New("learned summary: corrupt (samples out of order, too long, seen later than their bound, or a drain out of range)")
		}
		last += dt
		s.Samples = append(s.Samples, Sample{At: time.Unix(last, 0), D: time.Duration(ms) * time.Millisecond,
			Seen: time.Duration(seen) * time.Millisecond, Drain: uint32(drain), Src: uint16(src)})
	}
	if over := len(s.Samples) - MaxSamples; over > 0 {
		s.Samples = s.Samples[over:]
	}
	return s, nil
}
