package lab

import (
	"errors"
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"draingate.dev/draingate/proving/sim/elbv2sim"
)

// The load's shapes (--load): how the requests' arrival times are drawn.
// Every shape sends the run's --rps on average; they differ in how the
// requests cluster, and so in what a pod's traffic evidence sees.
const (
	// Constant is evenly spaced requests (the lab's first load, and the
	// evidence model's best case).
	Constant = "constant"
	// Poisson is independent arrivals: exponential gaps.
	Poisson = "poisson"
	// OnOff is bursts: a rate for --onoff-on, then a pause drawn from an
	// exponential or Pareto distribution (--onoff-pause), again and again,
	// as batch jobs, retries and page loads that fan out send.
	OnOff = "onoff"
	// Shift is a rate that steps down and back up: --shift-period at a high
	// rate, then as long at --shift-factor of it, so that many drains see
	// the rate fall while they are watched.
	Shift = "shift"
	// ShortConn is Poisson arrivals, each on a new TCP connection the
	// client closes after the answer (no keep-alive).
	ShortConn = "shortconn"
	// Stream is long-lived streams (WebSocket-like, through the load
	// balancer), each sending a message every --stream-period and living
	// an exponential time of mean --stream-life; each message is a request.
	Stream = "stream"
)

// Shapes lists the shapes --load takes.
var Shapes = []string{Constant, Poisson, OnOff, Shift, ShortConn, Stream}

// Load is the traffic the lab sends through the data plane, on top of the
// run's rate (Options.RPS, at full scale).
type Load struct {
	// Shape is one of Shapes.
	Shape string
	// active, when set, says whether the load balancer node i is in the
	// load balancer now (Scenario.LBScaleOut): the clients spread over
	// those that are.
	active func(i int) bool
	// OnTime is how long an onoff burst lasts; PauseDist ("exp" or
	// "pareto", shape 1.5) and PauseMean draw the pauses between bursts.
	// The rate during a burst is OnRate (requests/s at full scale, over
	// every client), or when 0 what keeps the run's mean rate.
	OnRate    int
	OnTime    time.Duration
	PauseDist string
	PauseMean time.Duration
	// ShiftPeriod and ShiftFactor shape Shift: the high rate for a period,
	// ShiftFactor times it for the next, keeping the mean rate.
	ShiftPeriod time.Duration
	ShiftFactor float64
	// StreamPeriod is how often a stream sends a message; StreamLife is
	// the mean of a stream's life (exponential), after which its client
	// closes it and opens another.
	StreamPeriod time.Duration
	StreamLife   time.Duration
	// Clients is how many independent clients send the load, each with
	// its own connections, its own draws and a share of the rate.
	Clients int
	// NodeWeights is each load balancer node's share of the requests
	// (nil: equal shares); NodeDelays is extra propagation per node (a
	// straggler that learns late), on top of the scenario's draws.
	NodeWeights []float64
	NodeDelays  []time.Duration
	// InClusterRPS is the rate (at full scale) of a client pod calling the
	// Service's ClusterIP on the app's port during the rollouts: in-cluster
	// traffic, through kube-proxy, beside the load balancer's.
	InClusterRPS int
	// PreserveClientIP plays an NLB target group with client IP
	// preservation (preserve_client_ip.enabled): each client connects from
	// its own address (Env.ClientSources), which the pods see as the
	// source instead of the load balancer node's.
	PreserveClientIP bool
}

// DefaultLoad is what a run sends unless told otherwise.
func DefaultLoad() Load {
	return Load{Shape: Constant, OnTime: time.Second, PauseDist: "exp", PauseMean: 2 * time.Second,
		ShiftPeriod: 10 * time.Second, ShiftFactor: 0.15, StreamPeriod: time.Second, StreamLife: 30 * time.Second, Clients: 1}
}

// RegisterFlags binds the load's flags to fs, defaulting to l's values.
func (l *Load) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&l.Shape, "load", l.Shape, "the load's shape: "+strings.Join(Shapes, ", ")+" (every shape keeps --rps on average)")
	fs.IntVar(&l.OnRate, "onoff-rate", l.OnRate, "onoff: requests/s during a burst at full scale, over every client (0: what keeps --rps on average)")
	fs.DurationVar(&l.OnTime, "onoff-on", l.OnTime, "onoff: how long a burst lasts")
	fs.StringVar(&l.PauseDist, "onoff-pause", l.PauseDist, "onoff: the pauses' distribution, exp or pareto (shape 1.5, heavy-tailed)")
	fs.DurationVar(&l.PauseMean, "onoff-pause-mean", l.PauseMean, "onoff: the pauses' mean")
	fs.DurationVar(&l.ShiftPeriod, "shift-period", l.ShiftPeriod, "shift: how long the rate stays high, then low")
	fs.Float64Var(&l.ShiftFactor, "shift-factor", l.ShiftFactor, "shift: the low rate as a fraction of the high one")
	fs.DurationVar(&l.StreamPeriod, "stream-period", l.StreamPeriod, "stream: how often each stream sends a message (the streams are as many as carry --rps)")
	fs.DurationVar(&l.StreamLife, "stream-life", l.StreamLife, "stream: the mean of a stream's life (exponential), after which its client opens another")
	fs.IntVar(&l.Clients, "clients", l.Clients, "independent clients, each with its own connections and a share of the rate")
	fs.Func("lb-node-weights", "each load balancer node's share of the requests, e.g. 90,8,2 (default: equal)", func(v string) error {
		w, err := parseList(v, func(s string) (float64, error) {
			f, err := strconv.ParseFloat(s, 64)
			if err == nil && (f < 0 || math.IsInf(f, 0) || math.IsNaN(f)) {
				err = errors.New("must be a number at least 0")
			}
			return f, err
		})
		l.NodeWeights = w
		return err
	})
	fs.Func("lb-node-delays", "extra propagation per load balancer node, e.g. 0,0,15s: a straggler that learns of every change late", func(v string) error {
		d, err := parseList(v, func(s string) (time.Duration, error) {
			if s == "0" {
				return 0, nil
			}
			d, err := time.ParseDuration(s)
			if err == nil && d < 0 {
				err = errors.New("must not be negative")
			}
			return d, err
		})
		l.NodeDelays = d
		return err
	})
	fs.BoolVar(&l.PreserveClientIP, "preserve-client-ip", l.PreserveClientIP, "nlb: the target group keeps its clients' addresses (preserve_client_ip.enabled): each client connects from its own address, which the pods see")
	fs.IntVar(&l.InClusterRPS, "incluster-rps", l.InClusterRPS, "requests/s (at full scale) of a client pod calling the Service's ClusterIP during the rollouts (0: none)")
}

func parseList[T any](v string, parse func(string) (T, error)) ([]T, error) {
	var out []T
	for _, s := range strings.Split(v, ",") {
		x, err := parse(strings.TrimSpace(s))
		if err != nil {
			return nil, fmt.Errorf("%q: %w", s, err)
		}
		out = append(out, x)
	}
	return out, nil
}

// Validate says what is wrong with the load for sc, if anything.
func (l Load) Validate(sc Scenario) error {
	known := false
	for _, s := range Shapes {
		known = known || s == l.Shape
	}
	sum := 0.0
	for _, w := range l.NodeWeights {
		sum += w
	}
	switch {
	case !known:
		return fmt.Errorf("--load %q: want one of %s", l.Shape, strings.Join(Shapes, ", "))
	case l.Shape == OnOff && (l.OnTime <= 0 || l.PauseMean <= 0 || l.OnRate < 0):
		return errors.New("--load onoff needs a positive --onoff-on and --onoff-pause-mean, and an --onoff-rate of at least 0")
	case l.Shape == OnOff && l.PauseDist != "exp" && l.PauseDist != "pareto":
		return fmt.Errorf("--onoff-pause %q: want exp or pareto", l.PauseDist)
	case l.Shape == Shift && (l.ShiftPeriod <= 0 || l.ShiftFactor <= 0 || l.ShiftFactor > 1):
		return errors.New("--load shift needs a positive --shift-period and a --shift-factor in (0, 1]")
	case l.Shape == Stream && (l.StreamPeriod <= 0 || l.StreamLife <= 0):
		return errors.New("--load stream needs a positive --stream-period and --stream-life")
	case l.Clients < 1 || l.Clients > 1000:
		return fmt.Errorf("--clients %d: want 1 to 1000", l.Clients)
	case l.NodeWeights != nil && len(l.NodeWeights) != sc.LBNodes:
		return fmt.Errorf("--lb-node-weights has %d weights for %d load balancer nodes", len(l.NodeWeights), sc.LBNodes)
	case l.NodeWeights != nil && sum <= 0:
		return errors.New("--lb-node-weights must not all be 0")
	case l.NodeDelays != nil && len(l.NodeDelays) != sc.LBNodes:
		return fmt.Errorf("--lb-node-delays has %d delays for %d load balancer nodes", len(l.NodeDelays), sc.LBNodes)
	case sc.Ingress && (l.PreserveClientIP || l.NodeDelays != nil):
		return errors.New("--preserve-client-ip and --lb-node-delays play a load balancer's nodes, not the ingress's replicas")
	case l.PreserveClientIP && sc.LoadBalancer != string(elbv2sim.Network):
		return errors.New("--preserve-client-ip is an NLB target group's attribute: use it with --lb network (or the nlb and bluegreen scenarios)")
	case l.InClusterRPS < 0:
		return errors.New("--incluster-rps must not be negative")
	}
	return nil
}

// Scaled returns l with every duration multiplied by f (rates follow
// Options.loadPer).
func (l Load) Scaled(f float64) Load {
	m := func(d time.Duration) time.Duration { return time.Duration(math.Round(float64(d) * f)) }
	l.OnTime, l.PauseMean, l.ShiftPeriod = m(l.OnTime), m(l.PauseMean), m(l.ShiftPeriod)
	l.StreamPeriod, l.StreamLife = m(l.StreamPeriod), m(l.StreamLife)
	if l.NodeDelays != nil {
		d := make([]time.Duration, len(l.NodeDelays))
		for i, x := range l.NodeDelays {
			d[i] = m(x)
		}
		l.NodeDelays = d
	}
	return l
}

// String says the load in a few words for the report, e.g. "onoff (on 1s,
// pareto pauses of mean 2s), 50 clients, node weights 90,8,2"; the
// constant default with one client says "constant".
func (l Load) String() string {
	var b strings.Builder
	b.WriteString(l.Shape)
	switch l.Shape {
	case OnOff:
		rate := ""
		if l.OnRate > 0 {
			rate = fmt.Sprintf("%d/s ", l.OnRate)
		}
		fmt.Fprintf(&b, " (%son %s, %s pauses of mean %s)", rate, l.OnTime, l.PauseDist, l.PauseMean)
	case Shift:
		fmt.Fprintf(&b, " (%g of the rate every other %s)", l.ShiftFactor, l.ShiftPeriod)
	case Stream:
		fmt.Fprintf(&b, " (a message every %s, streams living %s on average)", l.StreamPeriod, l.StreamLife)
	}
	if l.Clients > 1 {
		fmt.Fprintf(&b, ", %d clients", l.Clients)
	}
	if l.NodeWeights != nil {
		b.WriteString(", node weights " + joinList(l.NodeWeights, func(w float64) string { return strconv.FormatFloat(w, 'g', -1, 64) }))
	}
	if l.NodeDelays != nil {
		b.WriteString(", node delays " + joinList(l.NodeDelays, time.Duration.String))
	}
	if l.PreserveClientIP {
		b.WriteString(", client IP preserved")
	}
	if l.InClusterRPS > 0 {
		fmt.Fprintf(&b, ", in-cluster %d/s", l.InClusterRPS)
	}
	return b.String()
}

func joinList[T any](xs []T, f func(T) string) string {
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = f(x)
	}
	return strings.Join(s, ",")
}

// arrivals draws the arrival times of one client sending rate requests per
// second on average (rate at the played scale; onRate, when positive, its
// rate during onoff bursts instead), from its own seed: next returns the
// time of the next request since the start.
type arrivals struct {
	l      Load
	rate   float64
	onRate float64
	// factor, when set, scales rate and onRate from base and baseOn at
	// each arrival (float64 bits): a load whose rate changes between
	// rollouts (--rollout-rps).
	factor       *atomic.Uint64
	base, baseOn float64
	rng          *rand.Rand
	at           time.Duration
	// onoff: when the current burst ends; shift: nothing kept.
	burstEnd time.Duration
}

func newArrivals(l Load, rate float64, seed uint64) *arrivals {
	a := &arrivals{l: l, rate: rate, rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))}
	if l.Shape == Constant {
		a.at = time.Duration(a.rng.Float64() * float64(time.Second) / rate)
	}
	if l.Shape == OnOff {
		// Start at a random phase, so that clients do not burst together.
		a.at = time.Duration(a.rng.Float64() * float64(l.OnTime+l.PauseMean))
		a.burstEnd = a.at + l.OnTime
	}
	return a
}

func (a *arrivals) exp(rate float64) time.Duration {
	return time.Duration(a.rng.ExpFloat64() / rate * float64(time.Second))
}

// next returns the next arrival's time since the start.
func (a *arrivals) next() time.Duration {
	if a.factor != nil {
		f := math.Float64frombits(a.factor.Load())
		a.rate, a.onRate = a.base*f, a.baseOn*f
	}
	switch a.l.Shape {
	case Constant:
		a.at += time.Duration(float64(time.Second) / a.rate)
	case OnOff:
		on := a.onRate
		if on <= 0 {
			// The rate within bursts that keeps the mean.
			on = a.rate * float64(a.l.OnTime+a.l.PauseMean) / float64(a.l.OnTime)
		}
		a.at += a.exp(on)
		for a.at > a.burstEnd {
			// The rest of the gap runs on after the pause (memoryless).
			over := a.at - a.burstEnd
			start := a.burstEnd + a.pause()
			a.at, a.burstEnd = start+over, start+a.l.OnTime
		}
	case Shift:
		// A non-homogeneous Poisson process by thinning: draw at the high
		// rate, keep a draw in a low period with probability ShiftFactor.
		high := 2 * a.rate / (1 + a.l.ShiftFactor)
		for {
			a.at += a.exp(high)
			if int64(a.at/a.l.ShiftPeriod)%2 == 0 || a.rng.Float64() < a.l.ShiftFactor {
				break
			}
		}
	default: // Poisson, ShortConn
		a.at += a.exp(a.rate)
	}
	return a.at
}

// pause draws one onoff pause.
func (a *arrivals) pause() time.Duration {
	mean := float64(a.l.PauseMean)
	if a.l.PauseDist == "pareto" {
		// Pareto of shape alpha has mean xm*alpha/(alpha-1).
		const alpha = 1.5
		xm := mean * (alpha - 1) / alpha
		return time.Duration(xm / math.Pow(1-a.rng.Float64(), 1/alpha))
	}
	return time.Duration(a.rng.ExpFloat64() * mean)
}

// schedule is a vegeta pacer over arrivals: the attack fires request n at
// the n-th arrival time. Vegeta asks for hits in order, one at a time.
type schedule struct {
	a    *arrivals
	hits uint64        // the hit next is for
	next time.Duration // its time
}

func (s *schedule) Pace(elapsed time.Duration, hits uint64) (time.Duration, bool) {
	for s.hits <= hits {
		s.next = s.a.next()
		s.hits++
	}
	return max(0, s.next-elapsed), false
}

func (s *schedule) Rate(time.Duration) float64 { return s.a.rate }
