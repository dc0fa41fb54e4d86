package lab

import (
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"draingate.dev/draingate/internal/evidence"
	et "draingate.dev/draingate/internal/evidence/evidencetest"
	"draingate.dev/draingate/internal/gate"
	"draingate.dev/draingate/proving/lab/report"
	"draingate.dev/draingate/release/chart"
)

// The lab installs draingate as a user would: the chart's defaults, and on
// top only the images it built, the emulator's endpoint, region and keys,
// and (when scaled) each duration of the defaults times the scale.
func TestGateValuesAreTheChartDefaults(t *testing.T) {
	required := []string{
		"agent.image.repository=draingate.local/draingate-prestop", "agent.image.tag=1",
		"aws.elbv2Endpoint=http://10.244.0.1:40000", "aws.region=us-east-1", "extraEnv=[3 entries]",
		"image.repository=draingate.local/draingate", "image.tag=1",
	}
	vals, err := gateValues("http://10.244.0.1:40000", 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := flatten("", vals); !slices.Equal(got, required) {
		t.Errorf("at scale 1 the lab sets\n%s\nwant only\n%s", strings.Join(got, "\n"), strings.Join(required, "\n"))
	}
	if mw, err := agentMaxWait(vals); err != nil || mw != 90*time.Second {
		t.Errorf("agent max-wait %s (%v), want the chart's 90s", mw, err)
	}

	ch, err := chart.Load()
	if err != nil {
		t.Fatal(err)
	}
	vals, err = gateValues("http://10.244.0.1:40000", 0.25, []string{"agent.fallback=7s", "replicaCount=1"})
	if err != nil {
		t.Fatal(err)
	}
	want := slices.Clone(required)
	for _, kv := range flatten("", ch.Values) {
		k, v, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(k, "resources.") {
			continue // quantities: "50m" is 50 millicores, not minutes
		}
		if d, err := time.ParseDuration(v); err == nil && d > 0 {
			if k == "agent.fallback" {
				v = "7s"
			} else {
				v = (d / 4).String()
			}
			want = append(want, k+"="+v)
		}
	}
	want = append(want, "replicaCount=1")
	slices.Sort(want)
	if got := flatten("", vals); !slices.Equal(got, want) {
		t.Errorf("at scale 0.25 with two --draingate-set the lab sets\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if !slices.Contains(want, "tails.alb=5s") || !slices.Contains(want, "agent.maxWait=22.5s") || slices.ContainsFunc(want, func(kv string) bool { return strings.HasPrefix(kv, "resources.") }) {
		t.Errorf("the chart's defaults moved: %v", want)
	}
	if _, err := gateValues("", 1, []string{"replicaCount"}); err == nil {
		t.Error("a bad --draingate-set was accepted")
	}
}

// TestGateValuesRenderTheChart: the lab's chart values render, and the
// server gets the run's emulator endpoint and the chart's durations scaled;
// the app Deployment itself carries no hook.
func TestGateValuesRenderTheChart(t *testing.T) {
	sc := Scenarios["slow-aws"].Scaled(0.25)
	vals, err := gateValues("http://10.244.0.1:40000", 0.25, nil)
	if err != nil {
		t.Fatal(err)
	}
	files, err := chart.Render("lab-3-draingate-sys-1", "lab-3-draingate-sys-1", vals, "")
	if err != nil {
		t.Fatal(err)
	}
	var deploy string
	for name, text := range files {
		if strings.HasSuffix(name, "/deployment.yaml") {
			deploy = text
		}
	}
	for _, want := range []string{
		"--elbv2-endpoint=http://10.244.0.1:40000", "--tail-alb=5s", "--tail-endpointslice=1.25s",
		"--poll-interval=500ms", "--inject-max-wait=22.5s", "--agent-image=" + AgentImage, "cpu: 50m",
		`image: "` + ServerImage + `"`, "AWS_ACCESS_KEY_ID",
	} {
		if !strings.Contains(deploy, want) {
			t.Errorf("the gate server's Deployment lacks %q:\n%s", want, deploy)
		}
	}
	d := deployment(appName, map[string]string{"app": appName}, 3, Strategy{Name: "draingate", Gate: true}, sc, true)
	if d.Spec.Template.Spec.Containers[0].Lifecycle != nil || len(d.Spec.Template.Spec.InitContainers) != 0 {
		t.Errorf("the draingate strategy's Deployment has a hand-written hook: injection adds it")
	}
}

// The agent's closing lines, as internal/prestop writes them, name how it
// let the pod go; its other lines and the app's are not closing lines.
func TestReleaseReason(t *testing.T) {
	for _, c := range []struct{ line, want string }{
		{"draingate-prestop: released after 21.6s: drained (endpointslice/lab/web closed, targetgroup/arn closed): released: all 2 routes closed", "drained"},
		{"draingate-prestop: released after 0s: no-routes (): released: no route holds the pod", "no-routes"},
		{"draingate-prestop: released after 12ms: not-terminating (): the pod is not being deleted (the API server confirms it)", "not-terminating"},
		{"draingate-prestop: released after 1m25s: deadline (targetgroup/arn draining): released at the deadline", "deadline"},
		{"draingate-prestop: deadline reached after 1m30s, not released (last verdict: not-terminating ())", "max-wait"},
		{"draingate-prestop: no gate server answered in 30s (12 asks, last error: refused); waited fallback 30s", "fallback"},
		{"draingate-prestop: gate server refused the request: 403 nope; not asking again, waiting out the fallback (29s more)", "refused"},
		{"draingate-prestop: wait canceled after 3s: context canceled", "canceled"},
		{"draingate-prestop: not waiting: pod name missing", "invalid"},
		{"draingate-prestop: waiting after 2s: not released yet (targetgroup/arn healthy)", ""},
		{"draingate-prestop: asking http://x whether a/b may stop: max wait 90s, fallback 30s", ""},
		{"sigterm 1764700000000000000", ""},
	} {
		got, ok := releaseReason(c.line)
		if got != c.want || ok != (c.want != "") {
			t.Errorf("%q: %q %v, want %q", c.line, got, ok, c.want)
		}
	}
}

// The scenarios that probe draingate's defaults go past them, read from
// the chart: alb-slow's data plane propagates past the default ALB tail,
// lag-past-deadline's controller deregisters after the agent's default
// max-wait. Every named scenario is valid.
func TestScenariosProbeTheDefaults(t *testing.T) {
	ch, err := chart.Load()
	if err != nil {
		t.Fatal(err)
	}
	def := map[string]time.Duration{}
	for _, kv := range flatten("", ch.Values) {
		k, v, _ := strings.Cut(kv, "=")
		if d, err := time.ParseDuration(v); err == nil {
			def[k] = d
		}
	}
	if sc := Scenarios["alb-slow"]; sc.PropagationP99 <= def["tails.alb"] || sc.LoadBalancer != "application" {
		t.Errorf("alb-slow propagates with a p99 of %s behind an %s load balancer; the default ALB tail is %s", sc.PropagationP99, sc.LoadBalancer, def["tails.alb"])
	}
	if sc := Scenarios["nlb"]; sc.PropagationMax <= def["agent.maxWait"] || sc.LoadBalancer != "network" {
		t.Errorf("nlb propagates up to %s behind an %s load balancer; the default max-wait is %s", sc.PropagationMax, sc.LoadBalancer, def["agent.maxWait"])
	}
	if sc := Scenarios["lag-past-deadline"]; sc.ReconcileLag <= def["agent.maxWait"] {
		t.Errorf("lag-past-deadline's controller lags %s; the default max-wait is %s", sc.ReconcileLag, def["agent.maxWait"])
	}
	for _, name := range ScenarioNames() {
		if sc := Scenarios[name]; sc.Name != name || sc.Validate() != nil {
			t.Errorf("scenario %s: name %q, %v", name, sc.Name, sc.Validate())
		}
	}
}

// TestDraingateTailTurnsEvidenceOff: the draingate-tail strategy is the
// chart at its defaults but for traffic evidence, which it turns off on the
// server's command line; draingate leaves it at the default (on).
func TestDraingateTailTurnsEvidenceOff(t *testing.T) {
	sts, err := ParseStrategies("draingate,draingate-tail")
	if err != nil {
		t.Fatal(err)
	}
	for _, st := range sts {
		vals, err := gateValues("http://10.0.0.1:1", 1, st.Set)
		if err != nil {
			t.Fatal(err)
		}
		te, _ := vals["trafficEvidence"].(map[string]any)
		got, set := te["enabled"]
		switch {
		case st.Name == "draingate" && set:
			t.Errorf("draingate sets trafficEvidence.enabled=%v, want the chart's default", got)
		case st.Name == "draingate-tail" && got != false:
			t.Errorf("draingate-tail: trafficEvidence.enabled=%v, want false", got)
		}
	}
}

// TestTargetGroupCloses reads what closed the target group routes from the
// gate's release message as the agent logs it; the phrases are the gate's
// own (evidence.Closing.Why, as gate.Assessment.Why carries it), so this
// also pins them.
func TestTargetGroupCloses(t *testing.T) {
	line := "draingate-prestop: released after 9.6s: drained (routes: endpointslice/lab/web closed, targetgroup/arn:a closed, targetgroup/arn:b closed): " +
		"released: all 3 routes closed (endpointslice/lab/web by its EndpointSlice tail (5s); " +
		"targetgroup/arn:a by quiet 7.6s after 28 arrivals from 3 sources (3 fitted at 2.1-3.4/s, longest quiet bound 7.5s at ε 1e-06), 10.4s before its tail's end, 12 arrivals from the node not counted, 5 of unknown source (too short to see) not counted as a source; " +
		"targetgroup/arn:b by its ALB tail (20s))"
	got := targetGroupCloses(line)
	if want := (report.Closes{Tail: 1, Traffic: 1, Early: 1, Bound: 7500 * time.Millisecond, Rates: "2.1-3.4/s", Sources: 3, NodeArrivals: 12, Unknown: 5}); got != want {
		t.Errorf("targetGroupCloses = %+v, want %+v", got, want)
	}
	// An NLB route weighs new connections, and says so.
	nlb := "draingate-prestop: released after 2m5s: drained (routes: targetgroup/arn:n closed): released: all 1 routes closed (" +
		"targetgroup/arn:n by quiet 25.6s after 414 new connections from 3 sources (none trusted; its gaps are no more regular than random arrivals'), " +
		"4.4s past its tail's end, 67 arrivals from the node not counted, 1485 of unknown source (too short to see) not counted as a source)"
	if got, want := targetGroupCloses(nlb), (report.Closes{Traffic: 1, Sources: 3, NodeArrivals: 67, Unknown: 1485}); got != want {
		t.Errorf("NLB route: targetGroupCloses = %+v, want %+v", got, want)
	}
	if got := targetGroupCloses("draingate-prestop: released after 1s: no-routes (no routes): released: no route holds the pod"); got != (report.Closes{}) {
		t.Errorf("no routes: %+v", got)
	}
}

// TestTargetGroupClosesReadsTheGate: the phrase the gate really writes
// when traffic evidence closes a route before its tail (the opt-in early
// close) parses.
func TestTargetGroupClosesReadsTheGate(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	// A load balancer node's round robin (a request every 300 ms for 45 s)
	// as this agent reports it, and the node's own probes on the same port
	// at the same times.
	const n = 150
	s := et.Stream{Addr: "10.245.0.11", Port: 8080, Class: evidence.ClassRemote}
	for i := range n {
		s.Times = append(s.Times, t0.Add(time.Duration(i)*300*time.Millisecond+time.Millisecond))
	}
	s = et.Models[len(et.Models)-1].Sample(s, t0)
	now := t0.Add(time.Minute)
	summary := et.Summary(now, nil, s)
	remote := summary.Sources[0]
	node := remote
	node.Addr = netip.MustParseAddr("10.244.0.1")
	summary.Sources = append(summary.Sources, node)
	tr := &gate.Traffic{Summary: summary, At: now, Node: []netip.Addr{node.Addr}}
	o := gate.Observation{Kind: "targetgroup", Name: "arn:a", Synced: true, Out: true, State: "draining", What: "draining",
		Tail: 5 * time.Minute, TailName: "NLB", WeighTraffic: true, Ports: []uint16{8080}, Senders: evidence.Senders{SeenAreAll: true}, EarlyClose: true}
	mem := gate.Memory{TerminatingSince: t0, Routes: map[gate.RouteKey]gate.RouteMemory{{Kind: "targetgroup", Name: "arn:a"}: {OutSince: t0.Add(5 * time.Second)}}}
	v, _ := gate.Step(now, gate.Pod{Name: "p", Terminating: true, Traffic: tr}, mem, []gate.Observation{o})
	if !v.Released {
		t.Fatalf("not released: %s: %s", v.Message, v.Routes[0].Detail)
	}
	got := targetGroupCloses("draingate-prestop: released after 1m0s: drained (): " + v.Message)
	if got.Traffic != 1 || got.Early != 1 || got.Tail != 0 || got.Bound <= 0 || got.Rates == "" || got.Sources != 1 || got.NodeArrivals != n {
		t.Errorf("targetGroupCloses(%q) = %+v, want one close by traffic with its bound and rates", v.Message, got)
	}
}

// TestLoadFollowsTheTimeScale: a scaled run plays the full-scale load
// faster, as it plays every duration, so per-source rates keep their
// proportion to the tails and the quiet bound.
func TestLoadFollowsTheTimeScale(t *testing.T) {
	for _, c := range []struct {
		scale float64
		per   time.Duration
		says  string
	}{
		{1, time.Second, "50 requests/s"},
		{0, time.Second, "50 requests/s"},
		{0.5, 500 * time.Millisecond, "50 requests/s at full scale, played at 100/s"},
		{0.25, 250 * time.Millisecond, "50 requests/s at full scale, played at 200/s"},
		{2, 2 * time.Second, "50 requests/s at full scale, played at 25/s"},
	} {
		o := Options{RPS: 50, TimeScale: c.scale}
		if got := o.loadPer(); got != c.per {
			t.Errorf("scale %g: per %v, want %v", c.scale, got, c.per)
		}
		if got := o.loadRate(); got != c.says {
			t.Errorf("scale %g: %q, want %q", c.scale, got, c.says)
		}
	}
}
