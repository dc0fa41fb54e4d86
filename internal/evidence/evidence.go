package evidence

import (
	"net/netip"
	"time"

	"draingate.dev/draingate/api"
)

// Evidence is what the pod's own agent saw of its inbound traffic, with
// every source classified (Read): the ground truth of whether a load
// balancer still sends, weighed against a route's tail (Judge).
type Evidence struct {
	// At is when the server received the agent's summary. Every arrival is
	// before it, and silence is known only up to it: the gate never
	// extrapolates quiet past At.
	At time.Time
	// Sources is one entry per remote address and local port.
	Sources []Source
	// Unknown are arrivals the agent could not attribute (connections
	// that opened and closed between two of its samples). Their port and
	// source are unknown, and most are not a route's traffic: load
	// balancer health checks (the load balancer node closes each check's
	// connection) and kubelet probes close before a sample sees them, and
	// go on whether the pod is routed to or not. So they never hold a
	// route past its tail; they only stop the evidence from closing one
	// before its tail when they are as many as the arrivals it attributed
	// (see Judge).
	Unknown Arrivals
	// UnknownHoldsSources says that Unknown also holds sources the agent
	// could not list apart (a summary at its bound of sources merges the
	// rest into it): real, attributed arrivals, possibly a load balancer
	// node's. Unknown then weighs on every route as one more source, past
	// the tail too.
	UnknownHoldsSources bool
	// Epsilon is the chance of a false quiet the server accepts per route
	// and source: the probability that a source still sending at its
	// fitted rate stays silent for its quiet bound. Zero takes
	// DefaultEpsilon.
	Epsilon float64
}

// DefaultEpsilon is Evidence.Epsilon's default.
const DefaultEpsilon = 1e-6

// Refresh is how old the evidence of a route that is out and open
// may grow before the gate wants it afresh (api.Route.AskBy): the close
// time the evidence gives can only be judged again on newer evidence (a
// source fitted since, or quiet since, closes the route sooner), and an
// agent reports only when it asks. So a route waiting on evidence has its
// agent ask about once a second, and closes at most about that long after
// the evidence would have allowed.
const Refresh = time.Second

// Class says who a source is, as far as the server knows.
type Class string

const (
	// ClassNode is the pod's own node (its host addresses, its network
	// gateway): kubelet probes, SNAT, hostNetwork clients. Never a load
	// balancer's traffic.
	ClassNode Class = "node"
	// ClassCluster is another pod of the cluster (an in-cluster client
	// calling through a Service or the pod's address). It is not a load
	// balancer's traffic, and no route weighs it: its keep-alive
	// connections stay pinned to the pod (conntrack) and go on sending
	// until the app closes them after SIGTERM, so holding a route for them
	// could only run the pod to its deadline.
	ClassCluster Class = "cluster"
	// ClassRemote is anything else: load balancer nodes, outside clients.
	// A route that weighs traffic weighs the remote sources on its ports
	// (only its senders', when it lists them: Senders).
	ClassRemote Class = "remote"
)

// Source is one remote address sending to one of the pod's ports.
type Source struct {
	Addr  netip.Addr
	Port  uint16
	Class Class
	Arrivals
	// Conns are the arrivals that opened a new connection (a subset of
	// Arrivals, sampled alike), and Open the connections from the source
	// established at the agent's latest look; Conns is nil when the agent
	// did not count them (an older agent), and then a route that weighs
	// new connections only (Route.NewConns) weighs every arrival, which
	// can only lengthen its wait.
	Conns *Arrivals
	Open  int
}

// Arrivals is a count of arrivals and when they came.
type Arrivals struct {
	// N counts them while the agent watched.
	N int
	// First is the first counted; Last the latest ones, most recent first.
	First time.Time
	Last  []time.Time
	// MaxGap is the longest pause between two consecutive arrivals.
	MaxGap time.Duration
	// Every, when set, says the arrivals are samples: the agent looked
	// every Every (on average) and counted at most one arrival per look,
	// whatever came in between. FitArrivals then fits the chance that a
	// look finds data rather than a rate of single arrivals, which a busy
	// source would saturate. Zero: each arrival was counted on its own, or
	// several as one (an older agent's summary, Unknown).
	Every time.Duration
	// Looks and RecentLooks are the agent's own count of a sampled
	// source's looks: from the one that found its first arrival to the
	// one that found its latest, and over the arrivals in Last alone. They
	// let the fit weigh how regular the source is (fitSampled). Zero: not
	// counted (an older agent); the fit estimates the looks from the span.
	Looks, RecentLooks Looks
	// Gaps bins the gaps between the sampled source's consecutive looks
	// with data, in looks (api.SourceTraffic.Gaps): what tells a steady
	// source from one that pauses between bursts (see gapBound). Nil: not
	// counted (an older agent), and the source gives no early close.
	Gaps []api.GapBin
}

// Looks counts a sampled source's looks over a stretch of its arrivals.
type Looks struct {
	// N is the looks after the stretch's first arrival's, up to its
	// latest's (the number of arrivals less one, plus the empty ones).
	N int
	// Pauses is how many runs of empty looks there were among them.
	Pauses int
}

// latest is the time of the most recent arrival (zero if none).
func (a Arrivals) latest() time.Time {
	if len(a.Last) == 0 {
		return time.Time{}
	}
	return a.Last[0]
}

// Read turns the agent's summary, received at now, into evidence: ages
// become times on the server's clock (the agent's clock never counts), and
// each source is the node's (the node's addresses, given, and the
// gateways the agent reported: probes, SNAT, hostNetwork clients) or
// another pod of the cluster (inCluster says so; nil: none is known) or
// remote (load balancer nodes, outside clients). epsilon is the
// false-quiet chance accepted (DefaultEpsilon when zero).
func Read(t *api.Traffic, now time.Time, node []netip.Addr, inCluster func(netip.Addr) bool, epsilon float64) *Evidence {
	isNode := map[netip.Addr]bool{}
	for _, g := range t.Gateways {
		isNode[g] = true
	}
	for _, a := range node {
		isNode[a.Unmap()] = true
	}
	ev := &Evidence{At: now, Epsilon: epsilon, Unknown: arrivalsAt(t.Unknown, now),
		// A summary at its bound merged the agent's other sources into
		// Unknown.
		UnknownHoldsSources: len(t.Sources) >= api.MaxTrafficSources}
	conns := map[netip.AddrPort]api.SourceTraffic{}
	for _, s := range t.NewConns {
		conns[netip.AddrPortFrom(s.Addr, s.Port)] = s
	}
	for _, s := range t.Sources {
		c := ClassRemote
		switch {
		case isNode[s.Addr]:
			c = ClassNode
		case inCluster != nil && inCluster(s.Addr):
			c = ClassCluster
		}
		src := Source{Addr: s.Addr, Port: s.Port, Class: c, Arrivals: sampled(s, t.Every, now)}
		if t.ConnsCounted {
			// A source without an entry opened no connection while the
			// agent watched.
			a := Arrivals{}
			if n, ok := conns[netip.AddrPortFrom(s.Addr, s.Port)]; ok {
				a = sampled(n, t.Every, now)
			}
			src.Conns, src.Open = &a, s.Open
		}
		ev.Sources = append(ev.Sources, src)
	}
	return ev
}

// sampled is a listed source's arrivals at now, with the agent's count of
// its looks when it sampled (every set). Only the sources count per look;
// Unknown counts every connection it could not see.
func sampled(s api.SourceTraffic, every time.Duration, now time.Time) Arrivals {
	a := arrivalsAt(s, now)
	a.Every = every
	if every > 0 {
		a.Looks = Looks{N: s.Looks.N, Pauses: s.Looks.Pauses}
		a.RecentLooks = Looks{N: s.RecentLooks.N, Pauses: s.RecentLooks.Pauses}
		a.Gaps = s.Gaps
	}
	return a
}

// arrivalsAt is a source's arrivals as the agent reported them at now.
func arrivalsAt(s api.SourceTraffic, now time.Time) Arrivals {
	if s.Arrivals == 0 {
		return Arrivals{}
	}
	a := Arrivals{N: s.Arrivals, First: now.Add(-s.First), MaxGap: s.MaxGap}
	for _, age := range s.Last {
		a.Last = append(a.Last, now.Add(-age))
	}
	return a
}
