package targetgroup

import (
	"context"
	"log/slog"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	promtest "github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/intstr"

	"draingate.dev/draingate/internal/aws/elbv2"
	"draingate.dev/draingate/internal/gate"
	"draingate.dev/draingate/internal/route"
	"draingate.dev/draingate/proving/sim/elbv2sim"
	"draingate.dev/draingate/proving/sim/lbc"
)

// TestJudge has one case per DescribeTargetHealth state (docs/facts.md,
// "Target states").
func TestJudge(t *testing.T) {
	s := New(Options{ALBTail: DefaultALBTail, NLBTail: DefaultNLBTail})
	for _, c := range []struct {
		name, state, reason string
		registered          bool
		out, notRoute       bool
		detail              string
	}{
		{"initial", "initial", "Elb.RegistrationInProgress", true, false, false, "may send"},
		{"initial health checking", "initial", "Elb.InitialHealthChecking", true, false, false, "InitialHealthChecking"},
		{"healthy", "healthy", "", true, false, false, "may send"},
		{"unhealthy", "unhealthy", "Target.FailedHealthChecks", true, false, false, "may send"},
		{"unhealthy.draining", "unhealthy.draining", "", true, false, false, "NLB may still send"},
		{"unavailable", "unavailable", "Elb.InternalError", true, false, false, "health checks are disabled"},
		{"unknown state", "sleeping", "", true, false, false, "unknown to draingate"},
		{"healthy never expected is still a route", "healthy", "", false, false, false, "may send"},
		{"draining", "draining", "Target.DeregistrationInProgress", true, true, false, "DeregistrationInProgress"},
		{"draining proves registration", "draining", "Target.DeregistrationInProgress", false, true, false, "draining"},
		{"unused NotRegistered", "unused", "Target.NotRegistered", true, true, false, "NotRegistered"},
		{"unused NotInUse", "unused", "Target.NotInUse", true, true, false, "NotInUse"},
		{"unused InvalidState", "unused", "Target.InvalidState", true, true, false, "InvalidState"},
		{"unused IpUnusable", "unused", "Target.IpUnusable", true, true, false, "IpUnusable"},
		{"absent after registered", "", "", true, true, false, "absent from the full listing"},
		{"NotRegistered from the start", "unused", "Target.NotRegistered", false, true, true, "never registered"},
		{"absent from the start", "", "", false, true, true, "never registered"},
	} {
		o := s.Judge(c.state, c.reason, elbv2.TypeApplication, c.registered)
		if o.Out != c.out || o.NotRoute != c.notRoute || !o.Synced || o.Kind != Kind || !strings.Contains(o.What, c.detail) {
			t.Errorf("%s: %+v, want out %v notRoute %v, detail with %q", c.name, o, c.out, c.notRoute, c.detail)
		}
		if want := c.state; want == "" && o.State != StateAbsent || want != "" && o.State != want {
			t.Errorf("%s: state %q", c.name, o.State)
		}
	}
}

func TestTailByLoadBalancerType(t *testing.T) {
	s := New(Options{ALBTail: time.Second, NLBTail: 2 * time.Second})
	// Only an NLB's new connections are its traffic (it keeps passing a
	// draining target the flows it had); any other type has every arrival
	// weighed, which can only lengthen a wait.
	for _, c := range []struct {
		lbType   string
		tail     time.Duration
		name     string
		newConns bool
	}{
		{elbv2.TypeApplication, time.Second, "ALB", false},
		{elbv2.TypeNetwork, 2 * time.Second, "NLB", true},
		{"", 2 * time.Second, "unknown type", false},
		{elbv2.TypeGateway, 2 * time.Second, `"gateway"`, false},
	} {
		o := s.Judge("draining", "", c.lbType, true)
		if o.Tail != c.tail || !strings.Contains(o.TailName, c.name) || o.NewConns != c.newConns {
			t.Errorf("type %q: tail %v %q, new connections only %v; want %v naming %s, %v", c.lbType, o.Tail, o.TailName, o.NewConns, c.tail, c.name, c.newConns)
		}
	}
	if s := New(Options{ALBTail: -time.Second}); s.Judge("draining", "", elbv2.TypeApplication, true).Tail != 0 {
		t.Errorf("a negative tail does not count as zero")
	}
}

func TestTargetOfPrefersTheMostInState(t *testing.T) {
	targets := map[elbv2.Target]elbv2.Health{
		{ID: "10.0.0.1", Port: 80}:   {State: "draining", Reason: "Target.DeregistrationInProgress"},
		{ID: "10.0.0.1", Port: 9090}: {State: "healthy"},
		{ID: "10.0.0.2", Port: 80}:   {State: "healthy"},
	}
	if s, _ := TargetOf(targets, []string{"10.0.0.1"}); s != "healthy" {
		t.Errorf("state %q: a pod with one target still healthy is still in", s)
	}
	delete(targets, elbv2.Target{ID: "10.0.0.1", Port: 9090})
	if s, r := TargetOf(targets, []string{"10.0.0.1"}); s != "draining" || r != "Target.DeregistrationInProgress" {
		t.Errorf("state %q reason %q, want draining", s, r)
	}
	if s, _ := TargetOf(targets, []string{"10.0.0.9"}); s != "" {
		t.Errorf("absent target has state %q", s)
	}
}

// TargetPorts: the pod's own targets' ports, sorted and once each; other
// pods' and absent targets give none.
func TestTargetPorts(t *testing.T) {
	targets := map[elbv2.Target]elbv2.Health{
		{ID: "10.0.0.1", Port: 8080}: {State: "draining"},
		{ID: "fd00::1", Port: 80}:    {State: "draining"},
		{ID: "10.0.0.1", Port: 80}:   {State: "healthy"},
		{ID: "10.0.0.2", Port: 9090}: {State: "healthy"},
	}
	if got := TargetPorts(targets, []string{"10.0.0.1", "fd00::1"}); !slices.Equal(got, []uint16{80, 8080}) {
		t.Errorf("TargetPorts = %v, want [80 8080]", got)
	}
	if got := TargetPorts(targets, []string{"10.0.0.9"}); len(got) != 0 {
		t.Errorf("TargetPorts of an absent pod = %v, want none", got)
	}
}

// A target's Id and the pod's IP may spell one address differently (IPv6
// forms, IPv4-mapped): the pod's target is found all the same.
func TestTargetIDsCompareAsAddresses(t *testing.T) {
	targets := map[elbv2.Target]elbv2.Health{
		{ID: "2001:0db8:0000:0000:0000:0000:0000:000a", Port: 8080}: {State: "draining"},
		{ID: "::ffff:10.0.0.1", Port: 80}:                           {State: "healthy"},
		{ID: "i-0123456789abcdef0", Port: 80}:                       {State: "healthy"},
	}
	if s, _ := TargetOf(targets, []string{"2001:db8::a"}); s != "draining" {
		t.Errorf("IPv6 target in another spelling: state %q, want draining", s)
	}
	if got := TargetPorts(targets, []string{"10.0.0.1", "2001:db8::a"}); !slices.Equal(got, []uint16{80, 8080}) {
		t.Errorf("TargetPorts = %v, want [80 8080]", got)
	}
	for _, c := range []struct {
		id, ip string
		want   bool
	}{
		{"10.0.0.1", "10.0.0.1", true},
		{"2001:DB8::A", "2001:db8::a", true},
		{"10.0.0.1", "10.0.0.10", false},
		{"i-0123456789abcdef0", "i-0123456789abcdef0", true},
		{"i-0123456789abcdef0", "10.0.0.1", false},
		{"", "", true},
	} {
		if got := SameIP(c.id, c.ip); got != c.want {
			t.Errorf("SameIP(%q, %q) = %t, want %t", c.id, c.ip, got, c.want)
		}
	}
}

func TestTransformKeepsWhatTheGateReads(t *testing.T) {
	b := lbc.Binding{Namespace: "ns", Name: "web", TargetGroupARN: "arn:tg", TargetType: "ip", ServiceName: "a", ServicePort: intstr.FromInt32(80)}.Object()
	b.Object["status"] = map[string]any{"observedGeneration": int64(3)}
	o, ok := New(Options{}).Transform(b)
	u := o.(*unstructured.Unstructured)
	if got := BindingFrom(u); !ok || got != (Binding{Namespace: "ns", Name: "web", ARN: "arn:tg", TargetType: "ip", Service: "a"}) {
		t.Errorf("binding after transform: %+v", got)
	}
	if _, ok := u.Object["status"]; ok {
		t.Errorf("binding transform kept the status")
	}
	other := &unstructured.Unstructured{}
	other.SetAPIVersion("v1")
	other.SetKind("ConfigMap")
	if _, ok := New(Options{}).Transform(other); ok {
		t.Errorf("the target-group source claimed a ConfigMap")
	}
}

// TestRoutesOutliveForget: which groups were a pod's routes is kept when
// nobody waits for it any more (the janitor's Forget), and learnt from
// what the gate remembers (another replica's, or before a restart); only
// the pod's going (Drop) forgets it. Else a group whose listing dropped
// the target, behind a Service that no longer lists the pod, would look
// like no route at all and release the pod early.
func TestRoutesOutliveForget(t *testing.T) {
	s := New(Options{})
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web", UID: "u1"}}
	key := route.KeyOf(pod)
	if _, err := s.Observe(context.Background(), pod, []gate.Known{{Name: "arn:known", WasRoute: true}, {Name: "arn:never"}}, false); err != nil {
		t.Fatal(err)
	}
	if !s.wasRoute(key, "arn:known") || s.wasRoute(key, "arn:never") {
		t.Errorf("from what the gate remembers: arn:known %v (want true), arn:never %v (want false)", s.wasRoute(key, "arn:known"), s.wasRoute(key, "arn:never"))
	}
	s.noteRoute(key, "arn:seen")
	s.Forget(key)
	if !s.wasRoute(key, "arn:seen") {
		t.Error("Forget erased the pod's routes")
	}
	s.Drop(key)
	if s.wasRoute(key, "arn:seen") || s.wasRoute(key, "arn:known") {
		t.Error("Drop kept the pod's routes")
	}
}

// Senders hands the evidence the load balancer's nodes only when the
// poller knows them all; otherwise nobody is known, never the sources
// seen, and the reason travels with it.
func TestSenders(t *testing.T) {
	nodes := []netip.Addr{netip.MustParseAddr("10.0.1.5"), netip.MustParseAddr("10.0.2.7")}
	if got := Senders(elbv2.Observation{Senders: nodes, SendersKnown: true}, "eu-west-1a"); !got.Known || !slices.Equal(got.Addrs, nodes) || got.SeenAreAll {
		t.Errorf("known: %+v", got)
	}
	why := "the load balancer's nodes are not known: the list is stale, read 3m1s ago"
	if got := Senders(elbv2.Observation{Senders: nodes, SendersWhy: why}, ""); got.Known || got.SeenAreAll || got.Addrs != nil || got.Why != why {
		t.Errorf("not known: %+v, want no senders and the reason", got)
	}
}

// With cross-zone load balancing off, a pod in a known zone needs only its
// zone's nodes seen; the other zones' may send and are weighed if they do.
// An unknown zone, a zone without a node, or cross-zone on: every node.
func TestSendersByZone(t *testing.T) {
	a, b, c := netip.MustParseAddr("10.0.1.5"), netip.MustParseAddr("10.0.2.7"), netip.MustParseAddr("10.0.3.9")
	obs := elbv2.Observation{Senders: []netip.Addr{a, b, c}, SendersKnown: true, CrossZoneOff: true,
		SenderZones: map[netip.Addr]string{a: "eu-west-1a", b: "eu-west-1b", c: "eu-west-1c"}}
	got := Senders(obs, "eu-west-1b")
	if !got.Known || !slices.Equal(got.Addrs, []netip.Addr{b}) || !slices.Equal(got.Maybe, []netip.Addr{a, c}) {
		t.Errorf("zone b, cross-zone off: %+v; want b needed, a and c maybe", got)
	}
	for _, zone := range []string{"", "eu-west-1d"} {
		if got := Senders(obs, zone); !slices.Equal(got.Addrs, obs.Senders) || got.Maybe != nil {
			t.Errorf("zone %q: %+v; want every node needed", zone, got)
		}
	}
	obs.CrossZoneOff = false
	if got := Senders(obs, "eu-west-1b"); !slices.Equal(got.Addrs, obs.Senders) || got.Maybe != nil {
		t.Errorf("cross-zone on: %+v; want every node needed", got)
	}
}

// Observe with the early close on, against the emulator through the real
// SDK clients, gives a
// route the nodes of its load balancer as senders; without
// ec2:DescribeNetworkInterfaces none, and its tail says why it cannot
// close early.
func TestObserveSenders(t *testing.T) {
	sim := elbv2sim.New(elbv2sim.Config{})
	if _, err := sim.Listen("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	defer sim.Close()
	arn, err := sim.CreateTargetGroup(elbv2sim.TargetGroupSpec{Name: "web", Port: 8080})
	if err != nil {
		t.Fatal(err)
	}
	lb, _ := sim.LoadBalancerARN(arn)
	nodes := []netip.Addr{netip.MustParseAddr("10.0.1.5"), netip.MustParseAddr("10.0.2.7")}
	if err := sim.SetLoadBalancerNodes(lb, nodes); err != nil {
		t.Fatal(err)
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web", UID: "u1"},
		Status: corev1.PodStatus{PodIP: "10.244.0.9"}}
	// observe observes the pod through a new source until it sees what
	// until wants, and hands the gauge of its poller to check.
	observe := func(t *testing.T, until func(gate.Observation) bool, gauge func(prometheus.Collector)) gate.Observation {
		t.Helper()
		p := elbv2.New(sim.Client(), elbv2.Config{Rate: 100, Burst: 10, Interval: 10 * time.Millisecond, EC2: sim.EC2Client(),
			Log: slog.New(slog.DiscardHandler)})
		s := New(Options{Poller: p, ALBTail: DefaultALBTail, NLBTail: DefaultNLBTail, EarlyClose: true})
		s.changed = func(string, string) {} // as Start sets it
		defer s.Close()
		defer gauge(sendersGauge{p})
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		for {
			obs, err := s.Observe(ctx, pod, []gate.Known{{Name: arn, WasRoute: true}}, true)
			if err != nil {
				t.Fatal(err)
			}
			if len(obs) == 1 && until(obs[0]) {
				return obs[0]
			}
			select {
			case <-ctx.Done():
				t.Fatalf("never: %+v", obs)
			case <-time.After(10 * time.Millisecond):
			}
		}
	}

	gaugeIs := func(v string) func(prometheus.Collector) {
		return func(c prometheus.Collector) {
			if err := promtest.CollectAndCompare(c, strings.NewReader(`
# HELP draingate_lb_senders_known `+sendersHelp+`
# TYPE draingate_lb_senders_known gauge
draingate_lb_senders_known{load_balancer="`+lb+`"} `+v+"\n"), "draingate_lb_senders_known"); err != nil {
				t.Errorf("gauge: %v", err)
			}
		}
	}
	o := observe(t, func(o gate.Observation) bool { return o.Senders.Known }, gaugeIs("1"))
	if !slices.Equal(o.Senders.Addrs, nodes) || !o.Out || o.TailName != "ALB" {
		t.Errorf("senders %+v, out %v, tail %q; want the nodes, out (absent), the ALB tail", o.Senders, o.Out, o.TailName)
	}

	sim.DenyEC2(true)
	o = observe(t, func(o gate.Observation) bool { return strings.Contains(o.TailName, "ec2:DescribeNetworkInterfaces") }, gaugeIs("0"))
	if o.Senders.Known || o.Senders.SeenAreAll || !strings.Contains(o.Senders.Why, "denied") || o.Err != nil {
		t.Errorf("denied: senders %+v, err %v; want none known, saying why, and no route error", o.Senders, o.Err)
	}
}
