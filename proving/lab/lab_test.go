package lab

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"draingate.dev/draingate/internal/status"
	"draingate.dev/draingate/proving/lab/report"
	"draingate.dev/draingate/proving/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// loadImages builds the demo app, gate server and agent images into c.
func loadImages(ctx context.Context, t *testing.T, c *testenv.Cluster) {
	t.Helper()
	for _, img := range []struct{ ref, pkg string }{
		{DemoImage, "./cmd/draingate-demoapp"},
		{ServerImage, "./cmd/draingate"},
		{AgentImage, "./cmd/draingate-prestop"},
	} {
		if err := c.LoadGoImage(ctx, img.ref, img.pkg); err != nil {
			t.Fatal(err)
		}
	}
}

// TestRolloutFailsWithoutHookAndNotWithLongSleepOrGate is the lab end to end
// on the real cluster, shortened by a time scale: a rollout under load fails
// requests with no preStop hook, and fails none with a sleep longer than the
// controller's lag plus the data plane's propagation, nor with the draingate
// agent waiting for the gate server.
func TestRolloutFailsWithoutHookAndNotWithLongSleepOrGate(t *testing.T) {
	c := testenv.Get(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	loadImages(ctx, t, c)
	const scale = 0.25
	sc := Scenarios["alb"].Scaled(scale)
	long := Strategy{Name: "sleep:long", Sleep: sc.MaxRouteDelay() + 3*time.Second}
	gate := Strategy{Name: "draingate", Gate: true}
	env := Env{Config: c.Config, Client: c.Client, Kubeconfig: c.Kubeconfig, HostIP: testenv.HostIP, LBSources: testenv.LBNodeIPs()}
	plugin := watchPlugin(ctx, t, c)
	rep, err := Run(ctx, env, Options{
		Scenario: sc, TimeScale: scale, Replicas: 3, Rollouts: 1, RPS: 40, Seed: 7,
		Strategies: []Strategy{{Name: "none"}, long, gate}, Progress: os.Stderr,
	})
	plugin.check(t)
	if err != nil {
		t.Fatal(err)
	}
	rep.WriteTable(os.Stderr)
	for _, n := range rep.Notes {
		if strings.Contains(n, "MISMATCH") {
			t.Error(n)
		}
	}
	if len(rep.Strategies) != 3 {
		t.Fatalf("%d strategies reported, want 3", len(rep.Strategies))
	}
	none, slept, gated := rep.Strategies[0], rep.Strategies[1], rep.Strategies[2]
	for _, s := range rep.Strategies {
		sent, failed := 0, 0
		for _, b := range s.Timeline.Buckets() {
			sent, failed = sent+b.Sent, failed+b.Failed
		}
		if sent != s.Requests || failed != s.Failed {
			t.Errorf("%s: report says %d requests, %d failed; the timeline holds %d and %d", s.Name, s.Requests, s.Failed, sent, failed)
		}
	}
	if none.Requests == 0 || slept.Requests == 0 || gated.Requests == 0 {
		t.Fatalf("no load: %d, %d and %d requests", none.Requests, slept.Requests, gated.Requests)
	}
	if none.Failed == 0 {
		t.Errorf("none: 0 of %d requests failed; the race did not show", none.Requests)
	}
	if slept.Failed != 0 {
		t.Errorf("%s: %d of %d requests failed; a sleep beyond lag+propagation must lose none", long.Name, slept.Failed, slept.Requests)
	}
	if gated.Failed != 0 {
		t.Errorf("%s: %d of %d requests failed; the agent must hold SIGTERM until the gate saw every route close", gate.Name, gated.Failed, gated.Requests)
	}
	// Every gated pod is let go by the gate once its routes drained; the
	// other strategies have no agent to say so.
	if gated.Releases["drained"] != 3 || len(gated.Releases) != 1 || len(none.Releases) != 0 || len(slept.Releases) != 0 {
		t.Errorf("released by: draingate %v, none %v, sleep %v; want drained=3, and nothing without the agent", gated.Releases, none.Releases, slept.Releases)
	}
	// Each gated pod's agent reported its pod's traffic, and the gate
	// weighed it on the target group route: the kubelet's readiness
	// probes on the same port, from the node's side of the pod's network,
	// were seen and not counted, and a close by traffic weighed no more
	// sources than the load balancer's nodes (and the unknown arrivals).
	for _, p := range gated.Pods {
		c := p.Closes
		if c.Traffic+c.Tail != 1 || c.NodeArrivals == 0 || c.Sources > sc.LBNodes {
			t.Errorf("%s: target group closes %+v: want one route closed, the node's probes seen and not counted, at most %d sources (the load balancer's nodes); the agent said: %s", p.Name, c, sc.LBNodes, strings.Join(p.AgentLines, " / "))
		}
	}
	if len(none.Terminations) != 3 || len(slept.Terminations) != 3 || len(gated.Terminations) != 3 {
		t.Errorf("terminations measured: %d, %d and %d, want 3 each", len(none.Terminations), len(slept.Terminations), len(gated.Terminations))
	}
	for _, s := range []struct {
		name   string
		slacks []time.Duration
	}{{long.Name, slept.Slacks}, {gate.Name, gated.Slacks}} {
		if len(s.slacks) != 3 {
			t.Errorf("%s: %d slacks measured, want 3", s.name, len(s.slacks))
		}
		for _, d := range s.slacks {
			if d < 0 {
				t.Errorf("%s: a pod got SIGTERM %s before the data plane stopped sending to it", s.name, -d)
			}
		}
	}
	for _, s := range []report.Strategy{slept, gated} {
		if s.ELBv2Calls["DeregisterTargets"] == 0 || s.ELBv2Calls["RegisterTargets"] == 0 {
			t.Errorf("%s: ELBv2 calls %v: want registrations and deregistrations", s.Name, s.ELBv2Calls)
		}
	}
	// draingate's own calls are told apart from the controller's: it only
	// reads.
	if g := gated.GateELBv2Calls; g["DescribeTargetHealth"] == 0 || g["RegisterTargets"]+g["DeregisterTargets"] != 0 || len(slept.GateELBv2Calls) != 0 {
		t.Errorf("draingate's ELBv2 calls %v (sleep: %v): want DescribeTargetHealth and no registration", g, slept.GateELBv2Calls)
	}
	// The app sees each load balancer node by its own source address: one
	// per node, neither the node's (kubelet, kube-proxy) nor a pod's.
	podIPs := map[string]bool{}
	for _, s := range rep.Strategies {
		for _, p := range s.Pods {
			podIPs[p.IP] = true
		}
	}
	for _, p := range none.Pods {
		want := map[string]bool{}
		for _, ip := range env.LBSources[:sc.LBNodes] {
			want[ip] = true
		}
		for src := range p.Sources {
			if !want[src] || src == testenv.HostIP || podIPs[src] {
				t.Errorf("pod %s got requests from %s; want only the load balancer nodes' addresses %v", p.Name, src, env.LBSources[:sc.LBNodes])
			}
			delete(want, src)
		}
		if len(want) != 0 {
			t.Errorf("pod %s got no request from %v", p.Name, want)
		}
	}
	// The report says where the gate ran and every chart value the lab set:
	// the chart's durations at the run's scale, nothing from the scenario.
	noted := false
	for _, n := range rep.Notes {
		noted = noted || strings.HasPrefix(n, gate.Name+": the chart's defaults in namespace ") &&
			strings.Contains(n, "agent.maxWait=22.5s") && strings.Contains(n, "tails.alb=5s")
	}
	if !noted {
		t.Errorf("notes %q: want where the gate server ran and the chart values the lab set (90s max-wait and 20s ALB tail at scale 0.25)", rep.Notes)
	}
}

// TestScenariosRunAtSmallScale plays every scenario but alb (played above)
// once with draingate, shortened, and checks that each measured what makes
// it that scenario: its stopped pods, restarts, sidecars. Whether draingate
// fails there is the scoreboard's finding, not this test's.
func TestScenariosRunAtSmallScale(t *testing.T) {
	c := testenv.Get(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Minute)
	defer cancel()
	loadImages(ctx, t, c)
	const scale, replicas = 0.2, 2
	env := Env{Config: c.Config, Client: c.Client, Kubeconfig: c.Kubeconfig, HostIP: testenv.HostIP, LBSources: testenv.LBNodeIPs(),
		ClientSources: testenv.LBClientIPs(), HAProxy: FindHAProxy(), AddNode: c.AddNode}
	for _, name := range ScenarioNames() {
		if name == "alb" {
			continue
		}
		t.Run(name, func(t *testing.T) {
			sc := Scenarios[name].Scaled(scale)
			rep, err := Run(ctx, env, Options{
				Scenario: sc, TimeScale: scale, Replicas: replicas, Rollouts: 1, RPS: 20, Seed: 11,
				Strategies: []Strategy{{Name: "draingate", Gate: true}}, Progress: os.Stderr,
			})
			if err != nil {
				t.Fatal(err)
			}
			rep.WriteTable(os.Stderr)
			s := rep.Strategies[0]
			if s.Requests == 0 {
				t.Fatal("no load")
			}
			stopped := replicas
			if sc.Workload == Restart {
				stopped = 1
				if len(s.Restarts) != 1 {
					t.Errorf("restart delays measured: %v, want one", s.Restarts)
				}
				// A liveness restart deletes nothing: the gate releases
				// the agent at once, once the API server confirms it.
				if s.Releases["not-terminating"] != 1 {
					t.Errorf("restart released by %v, want not-terminating", s.Releases)
				}
			} else if len(s.Terminations) != replicas {
				t.Errorf("terminations measured: %d, want %d", len(s.Terminations), replicas)
			}
			// Whether draingate asked AWS at all is a finding, not a
			// requirement: it does not for pods it sees out of every route
			// (bluegreen) or not terminating (restart).
			if len(s.Pods) != stopped {
				t.Errorf("%d stopped pods reported, want %d", len(s.Pods), stopped)
			}
			released := 0
			for _, n := range s.Releases {
				released += n
			}
			if released != stopped {
				t.Errorf("released by %v: want one closing line per stopped pod (%d)", s.Releases, stopped)
			}
			for _, p := range s.Pods {
				if p.SIGTERM.IsZero() || p.Exit.IsZero() || len(p.Nodes) < sc.LBNodes {
					t.Errorf("pod %s: SIGTERM %v, exit %v, %d load balancer nodes reported (want %d)", p.Name, p.SIGTERM, p.Exit, len(p.Nodes), sc.LBNodes)
				}
				// The ingress's replicas took every stopped pod out of
				// their rotation, as read from HAProxy's runtime API calls.
				for name, n := range p.Nodes {
					if sc.Ingress && (n.RouteOut.IsZero() || n.LastRequest.IsZero()) {
						t.Errorf("pod %s, ingress replica %s: route out %v, last request %v: the replica never sent it a request or never took it out", p.Name, name, n.RouteOut, n.LastRequest)
					}
				}
			}
			// Every request through the ingress was logged by HAProxy:
			// the load's and HAProxy's counts agree.
			for _, n := range rep.Notes {
				if sc.Ingress && strings.Contains(n, "MISMATCH") {
					t.Error(n)
				}
			}
		})
	}
}

// TestChaosFaultsHappen plays the alb scenario once with draingate per
// fault, shortened, and checks that each fault happened and was undone as
// the report says, and that every stopped pod was still let go by its
// agent. What the faults cost is the lab runs' finding, not this test's.
func TestChaosFaultsHappen(t *testing.T) {
	c := testenv.Get(t)
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Minute)
	defer cancel()
	loadImages(ctx, t, c)
	const scale, replicas = 0.2, 2
	env := Env{Config: c.Config, Client: c.Client, Kubeconfig: c.Kubeconfig, HostIP: testenv.HostIP, LBSources: testenv.LBNodeIPs(),
		RestartAPIServer: c.RestartAPIServer}
	want := map[string][]string{
		ChaosKillOne:   {"deleted with no grace (of 2 replicas)"},
		ChaosKillAll:   {"deleted with no grace (of 2 replicas)", "scaled back to 2 replicas"},
		ChaosAPIServer: {"API server stopping (SIGTERM)", "API server ready again"},
		ChaosThrottle:  {"Describe bucket shrunk to 1, refill 0.2/s", "Describe bucket back"},
	}
	for _, kind := range ChaosKinds {
		t.Run(kind, func(t *testing.T) {
			if kind == ChaosAPIServer && !c.Owned {
				t.Skip("the cluster was started by make cluster-up, not by this test binary: its API server is not this test's to restart")
			}
			ch := Chaos{Kind: kind, At: 2 * time.Second, For: 20 * time.Second, Capacity: 1, Refill: 0.2}.Scaled(scale)
			rep, err := Run(ctx, env, Options{
				Scenario: Scenarios["alb"].Scaled(scale), TimeScale: scale, Replicas: replicas, Rollouts: 1, RPS: 20, Seed: 13,
				Strategies: []Strategy{{Name: "draingate", Gate: true}}, Progress: os.Stderr, Chaos: ch,
			})
			if err != nil {
				t.Fatal(err)
			}
			rep.WriteTable(os.Stderr)
			s := rep.Strategies[0]
			got := strings.Join(s.Chaos, "\n")
			for _, w := range want[kind] {
				if !strings.Contains(got, w) {
					t.Errorf("chaos record lacks %q:\n%s", w, got)
				}
			}
			released := 0
			for _, n := range s.Releases {
				released += n
			}
			if released != len(s.Pods) || len(s.Pods) != replicas {
				t.Errorf("released by %v for %d stopped pods: want one closing line for each of %d", s.Releases, len(s.Pods), replicas)
			}
			if !slices.ContainsFunc(rep.Notes, func(n string) bool { return strings.HasPrefix(n, "chaos: ") }) {
				t.Errorf("the report's notes do not name the fault: %v", rep.Notes)
			}
		})
	}
}

// pluginWatch runs kubectl draingate (the plugin binary, as a user runs
// it) during a lab rollout and keeps what it saw.
type pluginWatch struct {
	stop func()
	mu   sync.Mutex
	runs int
	errs []string
	// waiting: a pod the gate held, with its routes; noAgent: a
	// terminating pod without the agent (the sleep strategy's);
	// explained: explain's output for a waiting pod.
	waiting, noAgent *status.Pod
	explained        string
}

// watchPlugin runs kubectl draingate status -A -o json every half second
// until check, and explain on the first pod it shows waiting.
func watchPlugin(ctx context.Context, t *testing.T, c *testenv.Cluster) *pluginWatch {
	t.Helper()
	bin, err := c.GoBinary(ctx, "./cmd/kubectl-draingate")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(ctx)
	w := &pluginWatch{}
	var wg sync.WaitGroup
	wg.Add(1)
	w.stop = func() { cancel(); wg.Wait() }
	plugin := func(args ...string) ([]byte, error) {
		cmd := exec.CommandContext(ctx, bin, append(args, "--kubeconfig", c.Kubeconfig)...)
		var stderr strings.Builder
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil && ctx.Err() == nil {
			w.mu.Lock()
			w.errs = append(w.errs, strings.Join(args, " ")+": "+err.Error()+": "+stderr.String())
			w.mu.Unlock()
		}
		return out, err
	}
	go func() {
		defer wg.Done()
		tick := time.NewTicker(500 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			out, err := plugin("status", "-A", "-o", "json")
			if err != nil {
				continue
			}
			var pods []status.Pod
			if err := json.Unmarshal(out, &pods); err != nil {
				w.mu.Lock()
				w.errs = append(w.errs, "status -A -o json printed no JSON: "+err.Error()+": "+string(out))
				w.mu.Unlock()
				continue
			}
			w.mu.Lock()
			explained := w.explained != ""
			w.mu.Unlock()
			for _, p := range pods {
				switch {
				case p.Verdict != nil && !p.Verdict.Released && len(p.Verdict.Routes) > 0 && !explained:
					explained = true
					text, err := plugin("explain", p.Name, "-n", p.Namespace)
					w.mu.Lock()
					if err == nil && w.waiting == nil {
						w.waiting, w.explained = &p, string(text)
					}
					w.mu.Unlock()
				case p.Verdict == nil && p.Injected == "" && p.Event == "":
					w.mu.Lock()
					w.noAgent = &p
					w.mu.Unlock()
				}
			}
			w.mu.Lock()
			w.runs++
			w.mu.Unlock()
		}
	}()
	return w
}

// check stops the watch and says what it should have seen: a pod held by
// the gate with its routes, explained in full, and one without the agent.
func (w *pluginWatch) check(t *testing.T) {
	t.Helper()
	w.stop()
	for _, e := range w.errs {
		t.Errorf("kubectl draingate %s", e)
	}
	if w.waiting == nil {
		t.Errorf("kubectl draingate status ran %d times during the rollout and never showed a pod held by the gate with its routes", w.runs)
		return
	}
	t.Logf("kubectl draingate status showed %s/%s waiting: %s; explain printed:\n%s", w.waiting.Namespace, w.waiting.Name, w.waiting.Verdict.Message, w.explained)
	for _, want := range []string{w.waiting.Namespace + "/" + w.waiting.Name, "Released:   no", "Routes:", w.waiting.Verdict.Routes[0].Kind + "/" + w.waiting.Verdict.Routes[0].Name} {
		if !strings.Contains(w.explained, want) {
			t.Errorf("kubectl draingate explain %s printed no %q:\n%s", w.waiting.Name, want, w.explained)
		}
	}
	if w.noAgent == nil {
		t.Errorf("kubectl draingate status never showed a terminating pod without the agent (the sleep strategy's)")
	}
}
