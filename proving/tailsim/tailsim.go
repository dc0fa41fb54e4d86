// Package tailsim plays many drains of one load balancer through the
// product's own decision and learning (internal/gate, internal/evidence,
// internal/learn), in simulated time, and counts what each strategy of
// closing routes loses: the catalogue of measured tails
// (docs/evidence.md, "Measured tails").
//
// Each drain is one pod behind a load balancer of Nodes nodes. Each node
// sends the pod requests (round robin with jitter, or Poisson) from two
// minutes before the drain (the watcher's history) until it stops: its
// propagation after the controller deregistered the target, drawn per
// node and drain. The server sees the target draining at its next poll.
// The pod's agent reports what arrived (sampled per look, as the agent
// counts; or, with Sockets, what the agent's own code makes of the pod's
// simulated sockets) each Step, and the gate decides on it with the tail
// learning gives the pod; once released, every arrival after the release is a
// request lost, and the release teaches learning as the server's would.
package tailsim

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"net/netip"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"draingate.dev/draingate/api"
	"draingate.dev/draingate/internal/drain"
	"draingate.dev/draingate/internal/evidence"
	et "draingate.dev/draingate/internal/evidence/evidencetest"
	"draingate.dev/draingate/internal/gate"
	"draingate.dev/draingate/internal/learn"
	"draingate.dev/draingate/internal/prestop"
	"draingate.dev/draingate/internal/route"
	"draingate.dev/draingate/internal/route/targetgroup"
	"draingate.dev/draingate/internal/traffic"
)

// Shape is one load balancer and its traffic, as a catalogue row.
type Shape struct {
	Name string
	// Nodes is the load balancer's nodes; Rate each node's requests per
	// second to the pod; Poisson draws the arrivals at random (else a
	// round robin, ±30 %).
	Nodes   int
	Rate    float64
	Poisson bool
	// Propagation draws a node's stop after the deregistration, for drain
	// i of n.
	Propagation func(rng *rand.Rand, i, n int) time.Duration
	// Fall, when above 1, divides a node's rate by a factor drawn from
	// [2, Fall] at a random moment within 3 s of the deregistration (a
	// weight moving to another target group).
	Fall float64
	// Tail is the configured tail; Poll the target health poll interval.
	Tail, Poll time.Duration
	// EarlyClose plays the opt-in early close instead of the defaults.
	EarlyClose bool
	// Watch is how long before the deregistration the pod's traffic is
	// watched: the watcher's two minutes (the default), or about a second
	// without it (the agent watches from the preStop hook, at the
	// deletion).
	Watch time.Duration
	// Sockets sends the arrivals through the agent's own summary: the
	// pod's sockets (keep-alive connections, two per node; or one new
	// connection per request with NewConns), looked at every 100 ms by the
	// watcher's code from the pod's start 2 to 4 minutes before the drain
	// (its window). Without it the arrivals are counted as that code
	// counts them (evidencetest), from Watch before the deregistration.
	Sockets bool
	// NewConns is an NLB's route: only new connections are its traffic,
	// and each request opens one that the pod closes after its answer
	// (clients sending "Connection: close": TIME_WAIT on the pod's side).
	NewConns bool
	// HealthCheck is each node's health-check interval until the target
	// goes out (0: none; with Sockets only): a connection of its own to
	// the traffic port, closed by the node once answered.
	HealthCheck time.Duration
	// Unlisted of the Nodes (the last ones) joined JoinBefore before the
	// deregistration (an ALB scaling out) and are missing from the
	// senders' list the early close is given.
	Unlisted   int
	JoinBefore time.Duration
	// MaxWait is the pod's max-wait (90 s if zero); TailName names the
	// tail in sentences ("ALB" if empty).
	MaxWait  time.Duration
	TailName string
	// MaxDrains, when set, caps the drains the catalogue plays of the
	// shape (an NLB's drains take minutes of looks each to play).
	MaxDrains int
}

// Result is what the drains of a Shape gave.
type Result struct {
	Drains int
	// Lost counts the requests nodes sent after their pod's release;
	// DrainsLosing the drains that lost any.
	Lost, DrainsLosing int
	// Release are the releases' times after the deregistration, in drain
	// order.
	Release []time.Duration
	// Tail is the tail a pod takes after the last drain (not one of the
	// drains that keep the configured tail), and TailWhy what learning
	// said of it.
	Tail    time.Duration
	TailWhy string
	// AtDeadline counts the drains released at their deadline.
	AtDeadline int
}

// LosingBound is the Clopper-Pearson 95 % upper bound of the share of
// drains that lose requests: for the early close, its false quiets.
func (r Result) LosingBound() float64 {
	_, hi := et.ClopperPearson(r.DrainsLosing, r.Drains, 0.05)
	return hi
}

// P50 is the median release after the deregistration of the later half
// of the drains (the first ones learn).
func (r Result) P50() time.Duration {
	late := slices.Clone(r.Release[len(r.Release)/2:])
	if len(late) == 0 {
		return 0
	}
	slices.Sort(late)
	return late[len(late)/2]
}

// PerThousand is the requests lost per 1,000 drains.
func (r Result) PerThousand() float64 {
	if r.Drains == 0 {
		return 0
	}
	return 1000 * float64(r.Lost) / float64(r.Drains)
}

// Step is how often the agent reports and the gate decides.
const Step = 200 * time.Millisecond

const (
	namespace = "shop"
	arn       = "arn:aws:elasticloadbalancing:eu-west-1:123456789012:targetgroup/web/0123456789abcdef"
	history   = 2 * time.Minute
	maxWait   = 90 * time.Second
	// keepAlive is the connections a node holds to the pod (Sockets).
	keepAlive = 2
	// every is the agent's look interval.
	every = 100 * time.Millisecond
)

// Run plays drains of s with seed and returns what they gave.
func Run(s Shape, drains int, seed uint64) Result {
	rng := rand.New(rand.NewPCG(seed, seed^0x5eed))
	tm := learn.New(learn.Options{Tails: true, Shorten: true})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	tm.Start(ctx, []route.Source{targetgroup.New(targetgroup.Options{})})
	if s.Poll <= 0 {
		s.Poll = 2 * time.Second
	}
	if s.MaxWait <= 0 {
		s.MaxWait = maxWait
	}
	if s.TailName == "" {
		s.TailName = "ALB"
	}
	var res Result
	// Drains apart by more than one lasts, ending now (learning prunes by
	// the clock).
	spacing := max(time.Minute, s.MaxWait+30*time.Second)
	start := time.Now().Add(-time.Duration(drains) * spacing)
	for i := range drains {
		dereg := start.Add(time.Duration(i) * spacing)
		d := playDrain(s, rng, tm, i, drains, dereg)
		res.Drains++
		res.Lost += d.lost
		if d.lost > 0 {
			res.DrainsLosing++
		}
		if d.deadline {
			res.AtDeadline++
		}
		res.Release = append(res.Release, d.release.Sub(dereg))
		et.Forget()
	}
	// The shortest of a few pods' tails: one in 16 keeps the configured.
	res.Tail = s.Tail + time.Hour
	for k := range 4 {
		t, why := tm.Tail("tg:"+arn, route.PodKey{Namespace: namespace, Name: "next", UID: fmt.Sprint("next-", k)}, s.Tail)
		if t < res.Tail {
			res.Tail, res.TailWhy = t, why
		}
	}
	return res
}

type drained struct {
	release  time.Time
	lost     int
	deadline bool
}

// playDrain plays drain i of n, deregistered at dereg.
func playDrain(s Shape, rng *rand.Rand, tm *learn.Timings, i, n int, dereg time.Time) drained {
	uid := fmt.Sprintf("%016x", rng.Uint64())
	from := dereg.Add(-history)
	if s.Watch > 0 {
		from = dereg.Add(-s.Watch)
	}
	podStart := dereg.Add(-history - time.Duration(rng.Int64N(int64(history))))
	if s.Sockets {
		from = podStart
	}
	// raw are the requests as the nodes send them; senders what the
	// early close is told of the nodes (at the defaults the server reads
	// no node lists: nobody is listed).
	var raw []et.Stream
	var checks []event
	senders := evidence.Senders{}
	if s.EarlyClose {
		senders.Known = true
	}
	for j := range s.Nodes {
		addr := fmt.Sprintf("10.0.%d.%d", j/250, j%250+1)
		begin := from
		if j >= s.Nodes-s.Unlisted {
			begin = dereg.Add(-s.JoinBefore)
		} else if s.EarlyClose {
			senders.Addrs = append(senders.Addrs, netip.MustParseAddr(addr))
		}
		stop := dereg.Add(s.Propagation(rng, i, n))
		var st et.Stream
		if s.Fall > 1 {
			at := dereg.Add(time.Duration((rng.Float64()*6 - 3) * float64(time.Second)))
			f := 2 + rng.Float64()*(s.Fall-2)
			fall := at
			if stop.Before(at) {
				fall = stop
			}
			st = et.Merge(addr, arrivals(rng, s, addr, s.Rate, begin, fall), arrivals(rng, s, addr, s.Rate/f, fall, stop))
		} else {
			st = arrivals(rng, s, addr, s.Rate, begin, stop)
		}
		st.Port = 8080
		raw = append(raw, st)
		if s.HealthCheck > 0 {
			for t := begin.Add(time.Duration(rng.Int64N(int64(s.HealthCheck)))); t.Before(dereg); t = t.Add(s.HealthCheck) {
				checks = append(checks, event{at: t, from: netip.MustParseAddr(addr), check: true})
			}
		}
	}
	var summary func(now time.Time) *api.Traffic
	if s.Sockets {
		summary = watchSockets(rng, s, raw, checks, podStart)
	} else {
		var sampled []et.Stream
		for _, st := range raw {
			sampled = append(sampled, et.Models[len(et.Models)-1].Sample(st, from))
		}
		summary = func(now time.Time) *api.Traffic { return et.Summary(now, nil, sampled...) }
	}
	seen := dereg.Add(time.Duration(rng.Int64N(int64(s.Poll))))
	deletion := dereg.Add(-time.Second)
	pod := gate.Pod{Namespace: namespace, Name: "web-" + uid[:5], UID: uid, Terminating: true, Deadline: deletion.Add(s.MaxWait)}
	key := route.PodKey{Namespace: namespace, Name: pod.Name, UID: uid}
	kpod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: pod.Name, UID: types.UID(uid),
		DeletionTimestamp: &metav1.Time{Time: deletion.Add(s.MaxWait + 5*time.Second)}}}
	tail, _ := tm.Tail("tg:"+arn, key, s.Tail)
	late := tm.LateChance("tg:"+arn, key, tail)
	var mem gate.Memory
	for now := deletion; ; now = now.Add(Step) {
		o := gate.Observation{Kind: targetgroup.Kind, Name: arn, Synced: true, State: "healthy", What: "the target is healthy",
			Tail: tail, TailName: s.TailName, WeighTraffic: true, Ports: []uint16{8080}, NewConns: s.NewConns,
			EarlyClose: s.EarlyClose, LateChance: late, Senders: senders}
		if !now.Before(seen) {
			o.State, o.Out, o.What = "draining", true, "the target is draining"
		}
		pod.Traffic = &gate.Traffic{Summary: summary(now), At: now}
		v, next := gate.Step(now, pod, mem, []gate.Observation{o})
		mem = next
		if !v.Released {
			continue
		}
		tm.Decided(&drain.Decision{Key: key, Pod: kpod, At: now, Verdict: v, Next: mem, Observations: []gate.Observation{o}})
		lost := 0
		for _, st := range raw {
			lost += len(st.Times) - sortSearch(st.Times, now)
		}
		return drained{release: now, lost: lost, deadline: v.Reason == api.ReasonDeadline}
	}
}

// watchSockets plays the pod's sockets under the nodes' requests and
// health checks, and the watcher's looks at them every 100 ms from the
// pod's start: it returns the agent's ask at now (a drain's first ask
// freezes the watcher's history), which plays the looks up to now.
func watchSockets(rng *rand.Rand, s Shape, raw []et.Stream, checks []event, podStart time.Time) func(now time.Time) *api.Traffic {
	var streams []nodeStream
	for _, st := range raw {
		streams = append(streams, nodeStream{addr: st.Addr, times: st.Times})
	}
	keep := keepAlive
	if s.NewConns {
		keep = 0
	}
	k := newSockets(rng, keep, streams, checks)
	look := podStart
	h := prestop.NewHistory(func() (traffic.Snapshot, error) { return k.read(look), nil }, prestop.DefaultHistory)
	return func(now time.Time) *api.Traffic {
		for ; !look.After(now); look = look.Add(every) {
			h.Sample(look)
		}
		return h.Summary(now)
	}
}

// arrivals is one node's requests to the pod at rate from start to stop.
func arrivals(rng *rand.Rand, s Shape, addr string, rate float64, start, stop time.Time) et.Stream {
	if s.Poisson {
		return et.Poisson(rng, addr, rate, start, stop)
	}
	return et.Regular(rng, addr, rate, 0.3, start, stop)
}

// sortSearch is the index of the first time after t.
func sortSearch(ts []time.Time, t time.Time) int {
	i, _ := slices.BinarySearchFunc(ts, t, func(a, b time.Time) int { return a.Compare(b) })
	for i < len(ts) && !ts[i].After(t) {
		i++
	}
	return i
}

// Uniform draws from [lo, hi].
func Uniform(lo, hi time.Duration) func(*rand.Rand, int, int) time.Duration {
	return func(rng *rand.Rand, _, _ int) time.Duration {
		return lo + time.Duration(rng.Float64()*float64(hi-lo))
	}
}

// LogNormal draws lo plus a log-normal of this median and 0.99-quantile.
func LogNormal(lo, median, p99 time.Duration) func(*rand.Rand, int, int) time.Duration {
	sigma := math.Log(float64(p99)/float64(median)) / 2.326
	return func(rng *rand.Rand, _, _ int) time.Duration {
		return lo + time.Duration(float64(median)*math.Exp(sigma*rng.NormFloat64()))
	}
}

// Bimodal draws from fast, or in share of the drains (all their nodes
// alike slow: the load balancer's bad moment) from slow.
func Bimodal(fast, slow func(*rand.Rand, int, int) time.Duration, share float64) func(*rand.Rand, int, int) time.Duration {
	return func(rng *rand.Rand, i, n int) time.Duration {
		// The drain's mode: a hash of its index, the same for its nodes.
		if float64((uint64(i)*0x9e3779b97f4a7c15)>>40)/float64(1<<24) < share {
			return slow(rng, i, n)
		}
		return fast(rng, i, n)
	}
}

// Drifting draws uniformly from [0, max], max growing from lo to hi over
// the drains (a load balancer becoming slower).
func Drifting(lo, hi time.Duration) func(*rand.Rand, int, int) time.Duration {
	return func(rng *rand.Rand, i, n int) time.Duration {
		m := lo + time.Duration(float64(hi-lo)*float64(i)/float64(max(n-1, 1)))
		return time.Duration(rng.Float64() * float64(m))
	}
}
