package elbv2sim

import (
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	elbv2 "github.com/aws/aws-sdk-go-v2/service/elasticloadbalancingv2"
	"github.com/aws/aws-sdk-go-v2/service/elasticloadbalancingv2/types"
)

// The whole life of a target, as events: registration, first check,
// healthy, unhealthy on 500, healthy again, draining, gone.
func TestStateMachineEvents(t *testing.T) {
	fixed := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	s, _ := start(t, Config{Now: func() time.Time { return fixed }})
	c := s.Client(noBackoff)
	arn, err := s.CreateTargetGroup(TargetGroupSpec{Name: "web", Port: 80, HealthCheckPath: "/ready",
		HealthCheckInterval: 50 * time.Millisecond, HealthCheckTimeout: time.Second, DeregistrationDelay: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	b := newBackend(t)
	tgt := b.target()
	events, cancel := s.Subscribe()
	defer cancel()

	if err := s.RegisterTargets(arn, tgt); err != nil {
		t.Fatal(err)
	}
	evs := expectSteps(t, events, tgt,
		step{"", StateInitial, ReasonRegistrationInProgress},
		step{StateInitial, StateInitial, ReasonInitialHealthChecking},
		step{StateInitial, StateHealthy, ""},
	)
	if evs[0].TargetGroupARN != arn || !evs[0].At.Equal(fixed) {
		t.Errorf("event = %+v, want group %s at the injected time", evs[0], arn)
	}
	// Registering again while registered is a no-op: no event.
	if err := s.RegisterTargets(arn, tgt); err != nil {
		t.Fatal(err)
	}

	b.code.Store(http.StatusInternalServerError)
	expectSteps(t, events, tgt, step{StateHealthy, StateUnhealthy, ReasonResponseCodeMismatch})
	out, err := c.DescribeTargetHealth(bg, &elbv2.DescribeTargetHealthInput{TargetGroupArn: aws.String(arn)})
	if err != nil {
		t.Fatal(err)
	}
	th := out.TargetHealthDescriptions[0].TargetHealth
	if th.State != types.TargetHealthStateEnumUnhealthy || th.Reason != types.TargetHealthReasonEnumResponseCodeMismatch ||
		aws.ToString(th.Description) != "Health checks failed with these codes: [500]" {
		t.Errorf("unhealthy health = %+v / %q", th, aws.ToString(th.Description))
	}

	b.code.Store(http.StatusNoContent) // any 2xx passes
	expectSteps(t, events, tgt, step{StateUnhealthy, StateHealthy, ""})

	if err := s.DeregisterTargets(arn, tgt); err != nil {
		t.Fatal(err)
	}
	expectSteps(t, events, tgt,
		step{StateHealthy, StateDraining, ReasonDeregistrationInProgress},
		step{StateDraining, StateUnused, ReasonNotRegistered},
	)
	if got := s.Targets(arn); len(got) != 0 {
		t.Errorf("Targets after drain = %v, want none", got)
	}
}

func TestReRegisterWhileDraining(t *testing.T) {
	s, _ := start(t, Config{})
	const delay = 300 * time.Millisecond
	arn, err := s.CreateTargetGroup(TargetGroupSpec{Name: "web", Port: 80,
		HealthCheckInterval: 50 * time.Millisecond, DeregistrationDelay: delay})
	if err != nil {
		t.Fatal(err)
	}
	tgt := newBackend(t).target()
	events, cancel := s.Subscribe()
	defer cancel()

	if err := s.RegisterTargets(arn, tgt); err != nil {
		t.Fatal(err)
	}
	expectSteps(t, events, tgt,
		step{"", StateInitial, ReasonRegistrationInProgress},
		step{StateInitial, StateInitial, ReasonInitialHealthChecking},
		step{StateInitial, StateHealthy, ""},
	)
	if err := s.DeregisterTargets(arn, tgt); err != nil {
		t.Fatal(err)
	}
	if err := s.RegisterTargets(arn, tgt); err != nil {
		t.Fatal(err)
	}
	expectSteps(t, events, tgt,
		step{StateHealthy, StateDraining, ReasonDeregistrationInProgress},
		step{StateDraining, StateInitial, ReasonRegistrationInProgress},
		step{StateInitial, StateInitial, ReasonInitialHealthChecking},
		step{StateInitial, StateHealthy, ""},
	)
	// The cancelled drain must not remove the target later.
	time.Sleep(2 * delay)
	if got := s.Targets(arn)[tgt]; got != StateHealthy {
		t.Errorf("state after the old drain would have ended = %q, want healthy", got)
	}
	for {
		select {
		case ev := <-events:
			if ev.To == StateUnused {
				t.Errorf("stale drain fired: %+v", ev)
			}
			continue
		default:
		}
		break
	}
}

func TestFailureReasons(t *testing.T) {
	s, _ := start(t, Config{})
	arn, err := s.CreateTargetGroup(TargetGroupSpec{Name: "web", Port: 80,
		HealthCheckInterval: 50 * time.Millisecond, HealthCheckTimeout: 50 * time.Millisecond, UnhealthyThreshold: 3})
	if err != nil {
		t.Fatal(err)
	}
	slow := newBackend(t)
	slow.delay.Store(int64(time.Minute))
	refused := Target{ID: "127.0.0.1", Port: deadPort(t)}
	// An instance-type group whose target is not an address: failed checks,
	// and no name lookup.
	inst, err := s.CreateTargetGroup(TargetGroupSpec{Name: "inst", Port: 80, TargetType: TargetTypeInstance,
		HealthCheckInterval: 50 * time.Millisecond, HealthCheckTimeout: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	named := Target{ID: "i-0123456789abcdef0", Port: 80}
	if err := s.RegisterTargets(inst, named); err != nil {
		t.Fatal(err)
	}
	events, cancel := s.Subscribe()
	defer cancel()
	if err := s.RegisterTargets(arn, slow.target(), refused); err != nil {
		t.Fatal(err)
	}
	// Failures from initial go straight to unhealthy after the threshold.
	expectSteps(t, events, slow.target(),
		step{"", StateInitial, ReasonRegistrationInProgress},
		step{StateInitial, StateInitial, ReasonInitialHealthChecking},
		step{StateInitial, StateUnhealthy, ReasonTimeout},
	)
	waitState(t, s, arn, refused, StateUnhealthy)
	rows, err := s.describeHealth(arn, []Target{refused})
	if err != nil || rows[0].reason != ReasonFailedHealthChecks {
		t.Errorf("refused target: %+v %v, want Target.FailedHealthChecks", rows, err)
	}

	waitState(t, s, inst, named, StateUnhealthy)
	if rows, _ := s.describeHealth(inst, []Target{named}); rows[0].reason != ReasonFailedHealthChecks {
		t.Errorf("instance id target: %+v, want Target.FailedHealthChecks", rows)
	}

	// Once unhealthy, the reason follows the latest failure.
	slow.delay.Store(0)
	slow.code.Store(http.StatusServiceUnavailable)
	expectSteps(t, events, slow.target(), step{StateUnhealthy, StateUnhealthy, ReasonResponseCodeMismatch})
}

func TestGoAPIValidation(t *testing.T) {
	s, _ := start(t, Config{})
	bad := []TargetGroupSpec{
		{Name: "", Port: 80},
		{Name: "-web", Port: 80},
		{Name: "web_1", Port: 80},
		{Name: strings.Repeat("a", 33), Port: 80},
		{Name: "web", Port: 0},
		{Name: "web", Port: 80, LoadBalancerType: "gateway"},
		{Name: "web", Port: 80, TargetType: "lambda"},
		{Name: "web", Port: 80, HealthCheckPath: "health"},
		{Name: "web", Port: 80, HealthCheckInterval: -time.Second},
	}
	for _, spec := range bad {
		var ae *APIError
		if _, err := s.CreateTargetGroup(spec); !errors.As(err, &ae) || ae.Code != "ValidationError" {
			t.Errorf("CreateTargetGroup(%+v) = %v, want ValidationError", spec, err)
		}
	}
	arn, err := s.CreateTargetGroup(TargetGroupSpec{Name: "web", Port: 80})
	if err != nil {
		t.Fatal(err)
	}
	if again, err := s.CreateTargetGroup(TargetGroupSpec{Name: "web", Port: 80, HealthCheckPath: "/", DeregistrationDelay: 300 * time.Second}); err != nil || again != arn {
		t.Errorf("same spec with defaults spelled out = %q, %v; want %q", again, err, arn)
	}
	var ae *APIError
	if _, err := s.CreateTargetGroup(TargetGroupSpec{Name: "web", Port: 81}); !errors.As(err, &ae) || ae.Code != "DuplicateTargetGroupName" {
		t.Errorf("duplicate: %v", err)
	}
	if err := s.RegisterTargets(arn+"x", Target{ID: "127.0.0.1"}); !errors.As(err, &ae) || ae.Code != "TargetGroupNotFound" {
		t.Errorf("unknown group: %v", err)
	}
	if err := s.RegisterTargets(arn, Target{ID: "127.0.0.1", Port: 80}, Target{ID: "pod-a"}); !errors.As(err, &ae) || ae.Code != "InvalidTarget" {
		t.Errorf("bad ip: %v", err)
	}
	if got := s.Targets(arn); len(got) != 0 {
		t.Errorf("a rejected request registered %v", got)
	}
	if err := s.DeregisterTargets(arn, Target{ID: "127.0.0.1", Port: 80}); err != nil {
		t.Errorf("deregistering an unknown target: %v, want accepted", err)
	}
	if s.Targets("arn:nope") != nil {
		t.Errorf("Targets of an unknown group is not nil")
	}
}

// A stuck subscriber loses events (counted) and never blocks the emulator.
func TestSubscribeDropsAndCancel(t *testing.T) {
	s, _ := start(t, Config{EventBuffer: 1})
	arn, err := s.CreateTargetGroup(TargetGroupSpec{Name: "web", Port: 80, HealthCheckInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	stuck, cancelStuck := s.Subscribe()
	other, _ := s.Subscribe() // left to Close
	done := make(chan error, 1)
	go func() {
		done <- s.RegisterTargets(arn, Target{ID: "127.0.0.1", Port: 1}, Target{ID: "127.0.0.1", Port: 2}, Target{ID: "127.0.0.1", Port: 3})
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(waitLimit):
		t.Fatal("RegisterTargets blocked on a stuck subscriber")
	}
	// 3 events, buffer 1, two subscribers: 2 dropped for each.
	if d := s.DroppedEvents(); d != 4 {
		t.Errorf("DroppedEvents = %d, want 4", d)
	}
	cancelStuck()
	cancelStuck() // idempotent
	if ev, ok := <-stuck; !ok || ev.Target.Port != 1 {
		t.Errorf("first buffered event = %+v, %v", ev, ok)
	}
	if _, ok := <-stuck; ok {
		t.Errorf("channel still open after cancel")
	}
	s.Close()
	<-other
	if _, ok := <-other; ok {
		t.Errorf("channel still open after Close")
	}
	if ch, _ := s.Subscribe(); ch != nil {
		if _, ok := <-ch; ok {
			t.Errorf("Subscribe after Close gave an open channel")
		}
	}
}

// A group's health check port, once set, is where every target's checks go:
// a target whose own port answers but whose check port fails turns
// unhealthy, and back when the check port answers, as a node does under
// the Local traffic policy (kube-proxy's healthCheckNodePort).
func TestHealthCheckPort(t *testing.T) {
	s, _ := start(t, Config{})
	arn, err := s.CreateTargetGroup(TargetGroupSpec{Name: "local", Port: 80, TargetType: TargetTypeInstance,
		HealthCheckInterval: 50 * time.Millisecond, HealthCheckTimeout: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	traffic, health := newBackend(t), newBackend(t)
	tgt := traffic.target()
	if err := s.RegisterTargets(arn, tgt); err != nil {
		t.Fatal(err)
	}
	waitState(t, s, arn, tgt, StateHealthy)
	health.code.Store(http.StatusServiceUnavailable)
	if err := s.SetHealthCheckPort(arn, health.target().Port); err != nil {
		t.Fatal(err)
	}
	waitState(t, s, arn, tgt, StateUnhealthy)
	if health.hits.Load() == 0 {
		t.Fatal("no check reached the health check port")
	}
	rows, err := s.describeHealth(arn, nil)
	if err != nil || len(rows) != 1 || rows[0].checkPort != health.target().Port {
		t.Errorf("DescribeTargetHealth rows %+v, %v: want the check port %d", rows, err, health.target().Port)
	}
	health.code.Store(http.StatusOK)
	waitState(t, s, arn, tgt, StateHealthy)
	if err := s.SetHealthCheckPort("arn:nope", 1); err == nil {
		t.Error("SetHealthCheckPort on an unknown group: no error")
	}
}

// TestHealthChecksFromTheNodes: once the load balancer's nodes are known,
// health checks come from their addresses in turn, as each AWS node checks
// each target; before, from the host's.
func TestHealthChecksFromTheNodes(t *testing.T) {
	s, _ := start(t, Config{})
	arn, err := s.CreateTargetGroup(TargetGroupSpec{Name: "web", Port: 80,
		HealthCheckInterval: 30 * time.Millisecond, HealthCheckTimeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	from := map[string]int{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host, _, _ := net.SplitHostPort(r.RemoteAddr)
		mu.Lock()
		from[host]++
		mu.Unlock()
	}))
	t.Cleanup(srv.Close)
	host, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	p, _ := strconv.Atoi(port)
	tgt := Target{ID: host, Port: int32(p)}
	if err := s.RegisterTargets(arn, tgt); err != nil {
		t.Fatal(err)
	}
	waitState(t, s, arn, tgt, StateHealthy)
	lb, _ := s.LoadBalancerARN(arn)
	nodes := []netip.Addr{netip.MustParseAddr("127.0.0.2"), netip.MustParseAddr("127.0.0.3")}
	if err := s.SetLoadBalancerNodes(lb, nodes); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		mu.Lock()
		a, b, h := from["127.0.0.2"], from["127.0.0.3"], from["127.0.0.1"]
		mu.Unlock()
		if a >= 3 && b >= 3 {
			if h == 0 {
				t.Errorf("no check from the host's address before the nodes were known")
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("checks by source: %v, want several from each node", from)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
