package lab

import (
	"strings"
	"testing"
	"time"

	"draingate.dev/draingate/internal/chart"
)

func TestGateTimingsScale(t *testing.T) {
	cases := []struct {
		f    float64
		want gateTimings
	}{
		{1, gateTimings{Poll: 2 * time.Second, EndpointSlice: 5 * time.Second, ALB: 20 * time.Second, NLB: 180 * time.Second, Fallback: 30 * time.Second}},
		{0.25, gateTimings{Poll: 500 * time.Millisecond, EndpointSlice: 1250 * time.Millisecond, ALB: 5 * time.Second, NLB: 45 * time.Second, Fallback: 8 * time.Second}},
		// The poll interval keeps its floor; the tails scale all the way.
		{0.05, gateTimings{Poll: 200 * time.Millisecond, EndpointSlice: 250 * time.Millisecond, ALB: time.Second, NLB: 9 * time.Second, Fallback: 2 * time.Second}},
	}
	for _, c := range cases {
		if got := timingsFor(c.f); got != c.want {
			t.Errorf("scale %g: %+v, want %+v", c.f, got, c.want)
		}
	}
}

// The agent's deadline must leave the release to the gate in each named
// scenario's worst case: past the controller's lag plus the load balancer's
// tail, and past the data plane's last possible request.
func TestGateMaxWaitCoversScenario(t *testing.T) {
	for _, name := range ScenarioNames() {
		for _, f := range []float64{1, 0.25} {
			sc := Scenarios[name].Scaled(f)
			tm := timingsFor(f)
			mw := tm.maxWait(sc)
			lag := sc.ReconcileLag + sc.ReconcileJitter
			if least := max(lag+tm.lbTail(sc), sc.MaxRouteDelay()) + tm.Poll; mw <= least {
				t.Errorf("%s at %g: max-wait %s does not pass the worst case %s", name, f, mw, least)
			}
			if mw%time.Second != 0 {
				t.Errorf("%s at %g: max-wait %s is not whole seconds", name, f, mw)
			}
		}
	}
	if nlb, alb := timingsFor(1).lbTail(Scenarios["nlb"]), timingsFor(1).lbTail(Scenarios["alb"]); nlb != 180*time.Second || alb != 20*time.Second {
		t.Errorf("tails: nlb %s, alb %s", nlb, alb)
	}
}

// TestGateValuesRenderTheChart: the lab's chart values render, and the
// server gets the run's emulator endpoint, scaled tails and the agent's
// max-wait for the scenario; the app Deployment itself carries no hook.
func TestGateValuesRenderTheChart(t *testing.T) {
	sc := Scenarios["slow-aws"].Scaled(0.25)
	tm := timingsFor(0.25)
	files, err := chart.Render("lab-3-draingate-sys-1", "lab-3-draingate-sys-1", gateValues("http://10.244.0.1:40000", tm, tm.maxWait(sc)), "")
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
		"--elbv2-endpoint=http://10.244.0.1:40000", "--tail-alb=" + tm.ALB.String(), "--tail-endpointslice=" + tm.EndpointSlice.String(),
		"--poll-interval=" + tm.Poll.String(), "--inject-max-wait=" + tm.maxWait(sc).String(), "--agent-image=" + AgentImage,
		`image: "` + ServerImage + `"`, "AWS_ACCESS_KEY_ID",
	} {
		if !strings.Contains(deploy, want) {
			t.Errorf("the gate server's Deployment lacks %q:\n%s", want, deploy)
		}
	}
	d := deployment(3, Strategy{Name: "draingate", Gate: true}, sc)
	if d.Spec.Template.Spec.Containers[0].Lifecycle != nil || len(d.Spec.Template.Spec.InitContainers) != 0 {
		t.Errorf("the draingate strategy's Deployment has a hand-written hook: injection adds it")
	}
}
