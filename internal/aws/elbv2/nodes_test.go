package elbv2

import (
	"context"
	"errors"
	"log/slog"
	"net/netip"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/elasticloadbalancingv2"
	"github.com/aws/smithy-go"

	"draingate.dev/draingate/proving/sim/elbv2sim"
	"draingate.dev/draingate/proving/testutil"
)

// nodesBench is the emulator with a group whose load balancer has nodes.
type nodesBench struct {
	*bench
	arn, lb string
}

func newNodesBench(t *testing.T, spec elbv2sim.TargetGroupSpec, nodes ...string) *nodesBench {
	t.Helper()
	b := &nodesBench{bench: newBench(t)}
	var err error
	if b.arn, err = b.sim.CreateTargetGroup(spec); err != nil {
		t.Fatal(err)
	}
	if b.lb, err = b.sim.LoadBalancerARN(b.arn); err != nil {
		t.Fatal(err)
	}
	b.setNodes(t, nodes...)
	return b
}

func (b *nodesBench) setNodes(t *testing.T, nodes ...string) {
	t.Helper()
	var addrs []netip.Addr
	for _, n := range nodes {
		addrs = append(addrs, netip.MustParseAddr(n))
	}
	if err := b.sim.SetLoadBalancerNodes(b.lb, addrs); err != nil {
		t.Fatal(err)
	}
}

// ec2Calls is what the emulator counted of DescribeNetworkInterfaces, by
// result.
func (b *nodesBench) ec2Calls() map[string]int {
	return b.sim.Calls()[elbv2sim.DescribeNetworkInterfacesAction]
}

// allCalls is every call the emulator counted, ELBv2's and EC2's.
func (b *nodesBench) allCalls() int {
	n := 0
	for _, m := range b.sim.Calls() {
		for _, c := range m {
			n += c
		}
	}
	return n
}

func addrStrings(as []netip.Addr) []string {
	var out []string
	for _, a := range as {
		out = append(out, a.String())
	}
	return out
}

// A watched group behind an ALB knows its senders: the addresses of its
// load balancer's network interfaces, read with the real SDK ec2 client,
// in one call, counted in the poller's calls and its metrics beside the
// poll and the type read.
func TestNodesListed(t *testing.T) {
	b := newNodesBench(t, elbv2sim.TargetGroupSpec{Name: "web", Port: 80}, "10.0.2.7", "10.0.1.5", "2001:db8::5")
	var res results
	// One poll: the counts settle once the senders are known.
	p := New(b.client, Config{Rate: 100, Burst: 10, Interval: time.Hour, EC2: b.sim.EC2Client(), Metrics: res.hook})
	defer p.Close()
	w := p.Watch(b.arn)
	waitFor(t, "the senders", func() bool { o, ok := w.Latest(); return ok && o.SendersKnown })
	o, _ := w.Latest()
	// An IPv4 target group hears the nodes' IPv4 addresses only.
	if want := []string{"10.0.1.5", "10.0.2.7"}; !slices.Equal(addrStrings(o.Senders), want) || o.SendersWhy != "" || o.SendersErr != nil {
		t.Errorf("senders %v (why %q, err %v), want %v", o.Senders, o.SendersWhy, o.SendersErr, want)
	}
	if lbs := p.LoadBalancers(); len(lbs) != 1 || lbs[0].ARN != b.lb || !lbs[0].Known || lbs[0].Nodes != 3 {
		t.Errorf("LoadBalancers() = %+v, want %s known with 3 nodes", lbs, b.lb)
	}
	if got := b.ec2Calls(); got["OK"] != 1 || len(got) != 1 {
		t.Errorf("DescribeNetworkInterfaces calls %v, want one OK", got)
	}
	res.mu.Lock()
	reported := res.n[DescribeNetworkInterfacesAction+" ok"]
	res.mu.Unlock()
	if calls, _ := p.Stats(); calls != 3 || b.allCalls() != 3 || reported != 1 {
		t.Errorf("the poller counted %d calls and reported %d DescribeNetworkInterfaces, the emulator saw %d calls; want 3 (a poll, the type, the nodes) and 1",
			calls, reported, b.allCalls())
	}
	w.Close()
	if lbs := p.LoadBalancers(); len(lbs) != 0 {
		t.Errorf("load balancers of no watched group: %+v", lbs)
	}
}

// The node lists come out of the same budget as the polls: read as often
// as the configuration would let them (every 5 ms), they never push the
// total past Rate and Burst, and the polls still get their turns.
func TestNodesShareTheBudget(t *testing.T) {
	b := newNodesBench(t, elbv2sim.TargetGroupSpec{Name: "web", Port: 80}, "10.0.1.5")
	var res results
	cfg := Config{Rate: 20, Burst: 2, Interval: 5 * time.Millisecond, NodesRefresh: 5 * time.Millisecond, EC2: b.sim.EC2Client(), Metrics: res.hook}
	start := time.Now()
	p := New(b.client, cfg)
	defer p.Close()
	w := p.Watch(b.arn)
	waitFor(t, "10 node reads", func() bool { return b.ec2Calls()["OK"] >= 10 })
	w.Close()
	elapsed := time.Since(start)
	calls, _ := p.Stats() // made, cancelled ones included: at least what the emulator saw
	withinBudget(t, calls, cfg, elapsed)
	if res.get("ok") < 5 {
		t.Errorf("%d polls beside %d node reads: the polls did not get their turns", res.get("ok"), b.ec2Calls()["OK"])
	}
}

// An ALB adds nodes as it scales: the list is read again every
// NodesRefresh while the group is watched, and the new node joins the
// senders.
func TestNodesRefresh(t *testing.T) {
	b := newNodesBench(t, elbv2sim.TargetGroupSpec{Name: "web", Port: 80}, "10.0.1.5")
	p := New(b.client, Config{Rate: 100, Burst: 10, Interval: 10 * time.Millisecond, NodesRefresh: 50 * time.Millisecond, EC2: b.sim.EC2Client()})
	defer p.Close()
	w := p.Watch(b.arn)
	defer w.Close()
	waitFor(t, "the first node", func() bool {
		o, ok := w.Latest()
		return ok && slices.Equal(addrStrings(o.Senders), []string{"10.0.1.5"})
	})
	b.setNodes(t, "10.0.1.5", "10.0.3.9")
	waitFor(t, "the new node", func() bool {
		o, ok := w.Latest()
		return ok && o.SendersKnown && slices.Equal(addrStrings(o.Senders), []string{"10.0.1.5", "10.0.3.9"})
	})
	if lbs := p.LoadBalancers(); len(lbs) != 1 || lbs[0].ARN != b.lb || !lbs[0].Known || lbs[0].Nodes != 2 {
		t.Errorf("LoadBalancers() = %+v, want %s known with 2 nodes", lbs, b.lb)
	}
}

// Without ec2:DescribeNetworkInterfaces the senders are not known, and say
// why; the poller stops asking for DeniedPause, for every load balancer
// (the permission is the role's), says so once in the log, reports
// "denied" to the metrics, and picks the list up once the permission is
// there.
func TestNodesDenied(t *testing.T) {
	b := newNodesBench(t, elbv2sim.TargetGroupSpec{Name: "web", Port: 80}, "10.0.1.5")
	other, err := b.sim.CreateTargetGroup(elbv2sim.TargetGroupSpec{Name: "api", Port: 80})
	if err != nil {
		t.Fatal(err)
	}
	otherLB, _ := b.sim.LoadBalancerARN(other)
	if err := b.sim.SetLoadBalancerNodes(otherLB, []netip.Addr{netip.MustParseAddr("10.0.9.9")}); err != nil {
		t.Fatal(err)
	}
	b.sim.DenyEC2(true)
	var res results
	var log testutil.SyncBuffer
	p := New(b.client, Config{Rate: 100, Burst: 10, Interval: 10 * time.Millisecond, EC2: b.sim.EC2Client(), Metrics: res.hook,
		Log: slog.New(slog.NewTextHandler(&log, nil))})
	w := p.Watch(b.arn)
	waitFor(t, "the denial", func() bool { o, ok := w.Latest(); return ok && o.SendersErr != nil })
	wOther := p.Watch(other)
	waitFor(t, "the other group's denial", func() bool { o, ok := wOther.Latest(); return ok && errors.Is(o.SendersErr, ErrNodesDenied) })
	wOther.Close()
	o, _ := w.Latest()
	if o.SendersKnown || !errors.Is(o.SendersErr, ErrNodesDenied) || !strings.Contains(o.SendersWhy, "ec2:DescribeNetworkInterfaces is denied") {
		t.Errorf("denied: known %v, why %q, err %v", o.SendersKnown, o.SendersWhy, o.SendersErr)
	}
	// Many polls later, still one call: the default pause is 10 minutes.
	polls := res.get("ok")
	waitFor(t, "20 more polls", func() bool { return res.get("ok") >= polls+20 })
	w.Close()
	p.Close()
	res.mu.Lock()
	denied := res.n[DescribeNetworkInterfacesAction+" denied"]
	res.mu.Unlock()
	if got := b.ec2Calls(); got[elbv2sim.ErrUnauthorizedOperation] != 1 || len(got) != 1 || denied != 1 {
		t.Errorf("DescribeNetworkInterfaces calls %v, reported denied %d; want one, denied", got, denied)
	}
	if n := strings.Count(log.String(), "add ec2:DescribeNetworkInterfaces to the server's role"); n != 1 {
		t.Errorf("the log says it %d times, want once:\n%s", n, log.String())
	}

	// A short pause: asked again, still said once, and known once allowed.
	p = New(b.client, Config{Rate: 100, Burst: 10, Interval: 10 * time.Millisecond, DeniedPause: 30 * time.Millisecond,
		EC2: b.sim.EC2Client(), Log: slog.New(slog.NewTextHandler(&log, nil))})
	defer p.Close()
	w = p.Watch(b.arn)
	defer w.Close()
	waitFor(t, "three more denials", func() bool { return b.ec2Calls()[elbv2sim.ErrUnauthorizedOperation] >= 4 })
	if n := strings.Count(log.String(), "add ec2:DescribeNetworkInterfaces to the server's role"); n != 2 {
		t.Errorf("two pollers said it %d times, want once each:\n%s", n, log.String())
	}
	b.sim.DenyEC2(false)
	waitFor(t, "the senders once allowed", func() bool { o, ok := w.Latest(); return ok && o.SendersKnown && o.SendersErr == nil })
}

// A list whose refreshes fail is kept, then turns stale: the senders are
// then not known, with the read's error.
func TestNodesStale(t *testing.T) {
	b := newNodesBench(t, elbv2sim.TargetGroupSpec{Name: "web", Port: 80}, "10.0.1.5")
	p := New(b.client, Config{Rate: 100, Burst: 10, Interval: 10 * time.Millisecond, NodesRefresh: 20 * time.Millisecond, EC2: b.sim.EC2Client()})
	defer p.Close()
	w := p.Watch(b.arn)
	defer w.Close()
	waitFor(t, "the senders", func() bool { o, ok := w.Latest(); return ok && o.SendersKnown })
	b.sim.SetEC2Throttle(elbv2sim.BucketConfig{Capacity: 0.5}) // admits nothing
	waitFor(t, "a stale list", func() bool { o, ok := w.Latest(); return ok && !o.SendersKnown })
	o, _ := w.Latest()
	if o.Senders != nil || !strings.Contains(o.SendersWhy, "stale") || !isThrottle(o.SendersErr) {
		t.Errorf("stale: senders %v, why %q, err %v; want none, stale, the throttling", o.Senders, o.SendersWhy, o.SendersErr)
	}
	if lbs := p.LoadBalancers(); len(lbs) != 1 || lbs[0].Known {
		t.Errorf("LoadBalancers() = %+v, want one, not known", lbs)
	}
}

// The staleness rule at chosen times: a list is good up to 3 × refresh
// after its last good read, whatever failed since, and not after; an
// empty list or none is never known.
func TestSendersStaleRule(t *testing.T) {
	const refresh = time.Minute
	lb := "arn:aws:elasticloadbalancing:eu-west-1:1:loadbalancer/app/web/1"
	read := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	failed := errors.New("describe network interfaces: RequestLimitExceeded")
	p := New(nil, Config{NodesRefresh: refresh, EC2: noEC2{}})
	defer p.Close()
	p.infos["tg"] = groupInfo{lbType: TypeApplication, lbARNs: []string{lb}}
	for _, c := range []struct {
		name  string
		n     *nodeList
		at    time.Time
		known bool
		why   string
	}{
		{"never read", nil, read, false, "not read yet"},
		{"fresh", &nodeList{addrs: []netip.Addr{netip.MustParseAddr("10.0.0.1")}, readAt: read}, read.Add(time.Second), true, ""},
		{"refreshes failed, kept", &nodeList{addrs: []netip.Addr{netip.MustParseAddr("10.0.0.1")}, readAt: read, err: failed}, read.Add(3 * refresh), true, ""},
		{"stale", &nodeList{addrs: []netip.Addr{netip.MustParseAddr("10.0.0.1")}, readAt: read, err: failed}, read.Add(3*refresh + time.Second), false, "stale, read 3m1s ago (describe"},
		{"empty", &nodeList{readAt: read}, read, false, "no IPv4 address on a network interface"},
		{"IPv6 only, to IPv4 targets", &nodeList{addrs: []netip.Addr{netip.MustParseAddr("2001:db8::1")}, readAt: read}, read, false, "no IPv4 address"},
		{"first read failed", &nodeList{err: failed}, read, false, "could not be read"},
	} {
		delete(p.lbs, lb)
		if c.n != nil {
			p.lbs[lb] = c.n
		}
		sd := p.sendersLocked("tg", c.at)
		addrs, why := sd.addrs, sd.why
		if (why == "") != c.known || !strings.Contains(why, c.why) || c.known && len(addrs) != 1 {
			t.Errorf("%s: senders %v, why %q; want known %v, why with %q", c.name, addrs, why, c.known, c.why)
		}
	}

	// A dual-stack load balancer: an IPv6 target group hears its IPv6
	// addresses, an IPv4 one its IPv4 addresses; two load balancers' lists
	// join, sorted.
	other := "arn:aws:elasticloadbalancing:eu-west-1:1:loadbalancer/app/api/2"
	p.lbs[lb] = &nodeList{addrs: []netip.Addr{netip.MustParseAddr("10.0.0.2"), netip.MustParseAddr("2001:db8::2")}, readAt: read}
	p.lbs[other] = &nodeList{addrs: []netip.Addr{netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("2001:db8::1")}, readAt: read}
	p.infos["tg6"] = groupInfo{lbType: TypeApplication, lbARNs: []string{lb, other}, ipv6: true}
	p.infos["tg4"] = groupInfo{lbType: TypeApplication, lbARNs: []string{lb, other}}
	for arn, want := range map[string][]string{"tg6": {"2001:db8::1", "2001:db8::2"}, "tg4": {"10.0.0.1", "10.0.0.2"}} {
		if sd := p.sendersLocked(arn, read); sd.why != "" || !slices.Equal(addrStrings(sd.addrs), want) {
			t.Errorf("%s: senders %v (%q), want %v", arn, sd.addrs, sd.why, want)
		}
	}
}

type noEC2 struct{ EC2API }

// An NLB that passes its clients' addresses on (instance targets here:
// preserve_client_ip.enabled=true) has no list of senders, and its nodes
// are not even read; one with it off (ip targets) has. Either way the
// attribute is read once per group.
func TestNodesClientIPPreserved(t *testing.T) {
	for _, c := range []struct {
		targetType string
		known      bool
	}{{elbv2sim.TargetTypeInstance, false}, {elbv2sim.TargetTypeIP, true}} {
		t.Run(c.targetType, func(t *testing.T) {
			b := newNodesBench(t, elbv2sim.TargetGroupSpec{Name: "db", LoadBalancerType: elbv2sim.Network, TargetType: c.targetType, Port: 5432}, "10.0.1.5")
			var res results
			p := New(b.client, Config{Rate: 100, Burst: 10, Interval: 10 * time.Millisecond, EC2: b.sim.EC2Client(), Metrics: res.hook})
			defer p.Close()
			w := p.Watch(b.arn)
			waitFor(t, "the attribute read", func() bool {
				res.mu.Lock()
				defer res.mu.Unlock()
				return res.n[DescribeTargetGroupAttributesAction+" ok"] == 1
			})
			waitFor(t, "10 more polls", func() bool { return res.get("ok") >= 10 })
			o, _ := w.Latest()
			w.Close()
			if o.SendersKnown != c.known {
				t.Errorf("known %v (%q), want %v", o.SendersKnown, o.SendersWhy, c.known)
			}
			if !c.known && !strings.Contains(o.SendersWhy, "preserve_client_ip.enabled=true") {
				t.Errorf("why %q does not name the attribute", o.SendersWhy)
			}
			if reads, want := b.ec2Calls()["OK"], map[bool]int{false: 0, true: 1}[c.known]; reads != want {
				t.Errorf("%d node list reads, want %d", reads, want)
			}
			if n := b.sim.Calls()["DescribeTargetGroupAttributes"]["OK"]; n != 1 {
				t.Errorf("%d attribute reads, want 1", n)
			}
		})
	}
}

// nodesDescription follows the ARN to the interfaces' description.
func TestNodesDescription(t *testing.T) {
	for arn, want := range map[string]string{
		"arn:aws:elasticloadbalancing:eu-west-1:111122223333:loadbalancer/app/web/50dc6c495c0c9188": "ELB app/web/50dc6c495c0c9188",
		"arn:aws:elasticloadbalancing:eu-west-1:111122223333:loadbalancer/net/db/0123456789abcdef":  "ELB net/db/0123456789abcdef",
		"arn:aws:elasticloadbalancing:eu-west-1:111122223333:loadbalancer/gwy/fw/0123456789abcdef":  "",
		"arn:aws:elasticloadbalancing:eu-west-1:111122223333:targetgroup/web/50dc6c495c0c9188":      "",
	} {
		if got, ok := nodesDescription(arn); got != want || ok != (want != "") {
			t.Errorf("nodesDescription(%s) = %q, %v; want %q", arn, got, ok, want)
		}
	}
}

// noAttributes is a role without elasticloadbalancing:DescribeTargetGroupAttributes.
type noAttributes struct {
	API
	calls atomic.Int32
}

func (a *noAttributes) DescribeTargetGroupAttributes(context.Context, *elasticloadbalancingv2.DescribeTargetGroupAttributesInput, ...func(*elasticloadbalancingv2.Options)) (*elasticloadbalancingv2.DescribeTargetGroupAttributesOutput, error) {
	a.calls.Add(1)
	return nil, &smithy.GenericAPIError{Code: "AccessDenied", Message: "User is not authorized to perform: elasticloadbalancing:DescribeTargetGroupAttributes"}
}

// Without DescribeTargetGroupAttributes a group behind an NLB has no
// senders (whether the NLB passes its clients' addresses on is not
// known), the attribute is not asked again for DeniedPause, and the log
// says so once.
func TestClientIPDenied(t *testing.T) {
	b := newNodesBench(t, elbv2sim.TargetGroupSpec{Name: "db", LoadBalancerType: elbv2sim.Network, TargetType: elbv2sim.TargetTypeIP, Port: 5432}, "10.0.1.5")
	api := &noAttributes{API: b.client}
	var res results
	var log testutil.SyncBuffer
	p := New(api, Config{Rate: 100, Burst: 10, Interval: 10 * time.Millisecond, EC2: b.sim.EC2Client(), Metrics: res.hook,
		Log: slog.New(slog.NewTextHandler(&log, nil))})
	defer p.Close()
	w := p.Watch(b.arn)
	defer w.Close()
	waitFor(t, "20 polls", func() bool { return res.get("ok") >= 20 })
	o, _ := w.Latest()
	if o.SendersKnown || !strings.Contains(o.SendersWhy, "could not be read") || o.SendersErr == nil {
		t.Errorf("senders known %v, why %q, err %v; want not known, saying why", o.SendersKnown, o.SendersWhy, o.SendersErr)
	}
	res.mu.Lock()
	denied := res.n[DescribeTargetGroupAttributesAction+" denied"]
	res.mu.Unlock()
	if n := api.calls.Load(); n != 1 || denied != 1 || b.ec2Calls()["OK"] != 0 {
		t.Errorf("%d attribute calls (%d reported denied), %d node reads; want 1, 1, 0", n, denied, b.ec2Calls()["OK"])
	}
	if n := strings.Count(log.String(), "may not call elasticloadbalancing:DescribeTargetGroupAttributes"); n != 1 {
		t.Errorf("the log says it %d times, want once:\n%s", n, log.String())
	}
}

// Zones: each sender comes with its interface's zone. A group behind an
// NLB whose cross-zone load balancing is off (the NLB's default, which the
// group follows) has CrossZoneOff; one that turns it on for itself, or
// whose NLB has it on (read again with the nodes), does not; an ALB never.
func TestSenderZonesAndCrossZone(t *testing.T) {
	nodes := []string{"10.0.1.5", "10.0.2.5", "10.0.3.5"} // the emulator puts interface i in zone a, b, c
	for _, c := range []struct {
		name    string
		spec    elbv2sim.TargetGroupSpec
		lbOn    bool
		wantOff bool
	}{
		{"nlb, default", elbv2sim.TargetGroupSpec{LoadBalancerType: elbv2sim.Network}, false, true},
		{"nlb, group on", elbv2sim.TargetGroupSpec{LoadBalancerType: elbv2sim.Network, CrossZone: "true"}, false, false},
		{"nlb, group off, lb on", elbv2sim.TargetGroupSpec{LoadBalancerType: elbv2sim.Network, CrossZone: "false"}, true, true},
		{"nlb on", elbv2sim.TargetGroupSpec{LoadBalancerType: elbv2sim.Network}, true, false},
		{"alb", elbv2sim.TargetGroupSpec{LoadBalancerType: elbv2sim.Application}, false, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			c.spec.Name, c.spec.TargetType, c.spec.Port = "db", elbv2sim.TargetTypeIP, 5432
			b := newNodesBench(t, c.spec, nodes...)
			b.sim.SetLoadBalancerCrossZone(b.lb, c.lbOn)
			var res results
			p := New(b.client, Config{Rate: 100, Burst: 10, Interval: 10 * time.Millisecond, EC2: b.sim.EC2Client(), Metrics: res.hook})
			defer p.Close()
			w := p.Watch(b.arn)
			defer w.Close()
			var o Observation
			waitFor(t, "senders known", func() bool {
				o, _ = w.Latest()
				return o.SendersKnown
			})
			zones := map[string]bool{}
			for _, a := range o.Senders {
				zones[o.SenderZones[a]] = true
			}
			if len(zones) != 3 || zones[""] {
				t.Errorf("sender zones %v; want each of the three nodes' own", o.SenderZones)
			}
			if o.CrossZoneOff != c.wantOff {
				t.Errorf("CrossZoneOff %v; want %v", o.CrossZoneOff, c.wantOff)
			}
		})
	}
}

// A group's attributes (client IP preservation, cross-zone) may change:
// they are read again every NodesRefresh, like the node list.
func TestGroupAttributesReadAgain(t *testing.T) {
	b := newNodesBench(t, elbv2sim.TargetGroupSpec{Name: "db", LoadBalancerType: elbv2sim.Network, TargetType: elbv2sim.TargetTypeIP, Port: 5432}, "10.0.1.5")
	p := New(b.client, Config{Rate: 100, Burst: 10, Interval: 10 * time.Millisecond, EC2: b.sim.EC2Client(), NodesRefresh: 50 * time.Millisecond})
	defer p.Close()
	w := p.Watch(b.arn)
	defer w.Close()
	waitFor(t, "three reads of the group's attributes", func() bool {
		return b.sim.Calls()["DescribeTargetGroupAttributes"]["OK"] >= 3
	})
	if o, _ := w.Latest(); !o.SendersKnown {
		t.Errorf("senders not known (%s) while the attributes are read again", o.SendersWhy)
	}
}
