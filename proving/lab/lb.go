package lab

import (
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"draingate.dev/draingate/proving/lab/report"
	"draingate.dev/draingate/proving/sim/dataplane"
	"draingate.dev/draingate/proving/sim/elbv2sim"
)

// loadBalancer is one strategy's data plane: Scenario.LBNodes nodes, each
// with its own propagation draws (seeded apart), its own source address
// (Env.LBSources) and its own listener on loopback, where the load spreads
// over them round robin as clients resolving a load balancer's DNS name do.
type loadBalancer struct {
	bal     *dataplane.Balancer
	nodes   []*dataplane.Proxy
	urls    []string
	servers []*http.Server
	unsub   func()
	ing     *ingress // Scenario.Ingress: the nodes mirror its replicas

	// extra is the node that joins each rollout (Scenario.LBScaleOut), -1
	// without; joined says it is in now. lbARN and addrs are what
	// network interfaces the emulator lists: addrs without extra's until
	// it joined.
	extra  int
	joined atomic.Bool
	lbARN  string
	addrs  []netip.Addr

	mu       sync.Mutex
	drainedA map[string]time.Time // target IP → first draining event
	// failedChecks are the targets' turns from healthy to unhealthy, as
	// the report says them: a target out of rotation for its health checks.
	failedChecks []string
}

// startLB builds the nodes and feeds them the target group's events; the
// caller defers close.
func (r *runner) startLB(idx int, arn string) (*loadBalancer, error) {
	sc := r.o.Scenario
	nodes := sc.LBNodes
	if sc.LBScaleOut > 0 {
		nodes++
	}
	if len(r.env.LBSources) > 0 && nodes > len(r.env.LBSources) {
		return nil, fmt.Errorf("%d load balancer nodes, but the cluster has %d source addresses for them", nodes, len(r.env.LBSources))
	}
	if n := r.o.Load.Clients; r.o.Load.PreserveClientIP && n > len(r.env.ClientSources) {
		return nil, fmt.Errorf("--preserve-client-ip with %d clients, but the cluster has %d client addresses: use at most %d", n, len(r.env.ClientSources), len(r.env.ClientSources))
	}
	lb := &loadBalancer{drainedA: map[string]time.Time{}, extra: -1}
	if sc.LBScaleOut > 0 {
		lb.extra = sc.LBNodes
	}
	var cfgs []dataplane.Config
	for i := range nodes {
		c := dataplane.Config{
			Name: fmt.Sprintf("lb-%d", i+1),
			// An NLB passes connections through; an ALB routes requests.
			Flows:            sc.lbType() == elbv2sim.Network,
			PreserveClientIP: r.o.Load.PreserveClientIP,
			// Apart per strategy and per node, repeatable from the seed.
			Propagation: sc.propagation(r.o.Seed + uint64(idx)*1000 + uint64(i)),
			Routing:     sc.routing(),
			Seed:        r.o.Seed + uint64(idx)*1000 + uint64(i) + 500,
		}
		if len(r.o.RolloutPropagationMax) > 0 {
			c.Propagation = uniformTo(sc.PropagationMin, func() time.Duration { return time.Duration(r.propMax.Load()) },
				r.o.Seed+uint64(idx)*1000+uint64(i))
		}
		if i < len(r.o.Load.NodeDelays) && r.o.Load.NodeDelays[i] > 0 {
			base, extra := c.Propagation, r.o.Load.NodeDelays[i]
			c.Propagation = func(ev dataplane.Event) time.Duration { return base(ev) + extra }
		}
		if i < len(r.env.LBSources) {
			addr, err := netip.ParseAddr(r.env.LBSources[i])
			if err != nil {
				return nil, fmt.Errorf("load balancer node source %q: %w", r.env.LBSources[i], err)
			}
			c.SourceIP = addr
		}
		cfgs = append(cfgs, c)
	}
	if err := r.registerNodes(lb, arn, cfgs); err != nil {
		return nil, err
	}
	lb.bal = dataplane.NewBalancer(cfgs)
	lb.nodes = lb.bal.Nodes()
	events, unsubscribe := r.emu.Subscribe()
	lb.unsub = unsubscribe
	go func() {
		for ev := range events {
			if ev.TargetGroupARN != arn {
				continue
			}
			if ev.To == elbv2sim.StateUnhealthy && ev.From == elbv2sim.StateHealthy {
				lb.mu.Lock()
				lb.failedChecks = append(lb.failedChecks, fmt.Sprintf("%s unhealthy at %s (%s: %s)", ev.Target.ID+":"+strconv.Itoa(int(ev.Target.Port)), ev.At.Format("15:04:05.000"), ev.Reason, ev.Description))
				lb.mu.Unlock()
			}
			if ev.To == "draining" {
				lb.mu.Lock()
				if _, seen := lb.drainedA[ev.Target.ID]; !seen {
					lb.drainedA[ev.Target.ID] = ev.At
				}
				lb.mu.Unlock()
			}
			lb.bal.Apply(dataplane.Event{Target: dataplane.Target{ID: ev.Target.ID, Port: ev.Target.Port}, To: string(ev.To), At: ev.At})
		}
	}()
	// Clients that connect from their own addresses reach the nodes on the
	// host's, as the internet reaches a load balancer.
	listen := "127.0.0.1"
	if r.o.Load.PreserveClientIP && r.env.HostIP != "" {
		listen = r.env.HostIP
	}
	for _, n := range lb.nodes {
		ln, err := net.Listen("tcp", net.JoinHostPort(listen, "0"))
		if err != nil {
			lb.close()
			return nil, err
		}
		srv := n.Server()
		go srv.Serve(ln)
		lb.servers = append(lb.servers, srv)
		lb.urls = append(lb.urls, "http://"+ln.Addr().String()+"/")
	}
	return lb, nil
}

// registerNodes gives the emulator the nodes' source addresses as the
// network interfaces of the target group's load balancer, so that the gate
// lists them as the route's senders (EC2 DescribeNetworkInterfaces), as it
// does in AWS, and its health checks come from them; the node that joins
// later (lb.extra) not yet. Nodes without their own address (no
// Env.LBSources) connect from the host's: none is registered, and the gate
// knows no senders.
func (r *runner) registerNodes(lb *loadBalancer, arn string, cfgs []dataplane.Config) error {
	var addrs []netip.Addr
	for _, c := range cfgs {
		if !c.SourceIP.IsValid() {
			return nil
		}
		addrs = append(addrs, c.SourceIP)
	}
	lbARN, err := r.emu.LoadBalancerARN(arn)
	if err != nil {
		return err
	}
	lb.lbARN, lb.addrs = lbARN, addrs
	return r.listNodes(lb)
}

// listNodes has the emulator list lb's nodes in now.
func (r *runner) listNodes(lb *loadBalancer) error {
	if lb.lbARN == "" {
		return nil
	}
	addrs := lb.addrs
	if lb.extra >= 0 && !lb.joined.Load() {
		addrs = slices.Delete(slices.Clone(addrs), lb.extra, lb.extra+1)
	}
	return r.emu.SetLoadBalancerNodes(lb.lbARN, addrs)
}

// scale has lb's extra node join (in) or leave the load balancer: the
// clients' spread and the network interfaces follow.
func (r *runner) scale(lb *loadBalancer, in bool) error {
	if lb.extra < 0 || lb.joined.Load() == in {
		return nil
	}
	lb.joined.Store(in)
	return r.listNodes(lb)
}

// uniformTo draws uniformly from [lo, hi()], hi read at each draw (the
// current rollout's maximum), with its own seeded generator.
func uniformTo(lo time.Duration, hi func() time.Duration, seed uint64) dataplane.Propagation {
	var mu sync.Mutex
	rng := rand.New(rand.NewPCG(seed, seed))
	return func(dataplane.Event) time.Duration {
		h := hi()
		if h <= lo {
			return lo
		}
		mu.Lock()
		defer mu.Unlock()
		return lo + time.Duration(rng.Int64N(int64(h-lo)+1))
	}
}

func (lb *loadBalancer) close() {
	for _, s := range lb.servers {
		s.Close()
	}
	if lb.unsub != nil {
		lb.unsub()
	}
	if lb.ing != nil {
		lb.ing.close()
	}
	lb.bal.Close()
}

// draining is when the control plane first put ip's target to draining;
// for the ingress, when the EndpointSlices first said it was not ready.
func (lb *loadBalancer) draining(ip string) time.Time {
	if lb.ing != nil {
		return lb.ing.draining(ip)
	}
	lb.mu.Lock()
	defer lb.mu.Unlock()
	return lb.drainedA[ip]
}

// allOut says whether no node sends new requests to ip any more and each
// took it out of rotation at some point.
func (lb *loadBalancer) allOut(ip string) bool {
	_, ok := lb.bal.StoppedAt(dataplane.Target{ID: ip, Port: appPort})
	return ok && !lb.bal.InRotation(dataplane.Target{ID: ip, Port: appPort})
}

// rotationSteps turns the nodes' change logs into "pods in rotation", a pod
// counting while at least one node sends it new requests.
func rotationSteps(bal *dataplane.Balancer) []report.Step {
	type change struct {
		at   time.Time
		node int
		s    dataplane.Sample
	}
	var all []change
	for i, n := range bal.Nodes() {
		for _, s := range n.Timeline() {
			all = append(all, change{s.AppliedAt, i, s})
		}
	}
	sortChanges := func(a, b change) int { return a.at.Compare(b.at) }
	slices.SortFunc(all, sortChanges)
	in := map[dataplane.Target]map[int]bool{}
	var out []report.Step
	for _, c := range all {
		if in[c.s.Target] == nil {
			in[c.s.Target] = map[int]bool{}
		}
		in[c.s.Target][c.node] = c.s.InRotation
		n := 0
		for _, nodes := range in {
			for _, v := range nodes {
				if v {
					n++
					break
				}
			}
		}
		out = append(out, report.Step{At: c.at, N: n})
	}
	return out
}

// clientSources are the addresses the load's clients connect from: their
// own (Env.ClientSources) when the load balancer keeps clients' addresses,
// else none (the host's).
func (r *runner) clientSources() []string {
	if !r.o.Load.PreserveClientIP {
		return nil
	}
	return r.env.ClientSources
}
