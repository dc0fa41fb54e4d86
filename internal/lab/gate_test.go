package lab

import (
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"draingate.dev/draingate/internal/sim/lbc"
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

func TestDeploymentWithAgent(t *testing.T) {
	sc := Scenarios["alb"]
	g := &gateSetup{Namespace: "gate-ns", Server: "http://draingate.gate-ns.svc:8080", MaxWait: 36 * time.Second, Fallback: 30 * time.Second}
	d := deployment(3, Strategy{Name: "draingate", Gate: true}, sc, g)
	spec := d.Spec.Template.Spec

	if got, want := *spec.TerminationGracePeriodSeconds, int64(30+36); got != want {
		t.Errorf("terminationGracePeriodSeconds = %d, want grace + max-wait = %d", got, want)
	}
	if len(spec.ReadinessGates) != 1 || spec.ReadinessGates[0].ConditionType != lbc.ReadinessGatePrefix+tgbName {
		t.Errorf("readiness gates %v: want the controller's one kept", spec.ReadinessGates)
	}
	if len(spec.Volumes) != 1 || spec.Volumes[0].Name != "draingate" || spec.Volumes[0].EmptyDir == nil {
		t.Fatalf("volumes %+v: want one emptyDir named draingate", spec.Volumes)
	}
	if len(spec.InitContainers) != 1 {
		t.Fatalf("init containers: %d, want 1", len(spec.InitContainers))
	}
	ic := spec.InitContainers[0]
	if ic.Image != AgentImage || ic.ImagePullPolicy != corev1.PullNever ||
		!slices.Equal(ic.Command, []string{"/bin/draingate-prestop", "install", "/draingate"}) ||
		len(ic.VolumeMounts) != 1 || ic.VolumeMounts[0].MountPath != "/draingate" {
		t.Errorf("init container %+v", ic)
	}
	app := spec.Containers[0]
	if len(app.VolumeMounts) != 1 || app.VolumeMounts[0].Name != "draingate" || app.VolumeMounts[0].MountPath != "/draingate" {
		t.Errorf("app mounts %+v", app.VolumeMounts)
	}
	env := map[string]corev1.EnvVar{}
	for _, e := range app.Env {
		env[e.Name] = e
	}
	for name, path := range map[string]string{"DRAINGATE_POD_NAME": "metadata.name", "DRAINGATE_POD_NAMESPACE": "metadata.namespace", "DRAINGATE_POD_UID": "metadata.uid"} {
		if e := env[name]; e.ValueFrom == nil || e.ValueFrom.FieldRef == nil || e.ValueFrom.FieldRef.FieldPath != path {
			t.Errorf("%s = %+v, want the downward API's %s", name, e, path)
		}
	}
	if got := env["DRAINGATE_SERVER"].Value; got != g.Server {
		t.Errorf("DRAINGATE_SERVER = %q, want %q", got, g.Server)
	}
	if app.Lifecycle == nil || app.Lifecycle.PreStop == nil || app.Lifecycle.PreStop.Exec == nil {
		t.Fatalf("lifecycle %+v: want an exec preStop hook", app.Lifecycle)
	}
	want := []string{"/draingate/draingate-prestop", "wait", "--max-wait", "36s", "--fallback", "30s", "--log", "/proc/1/fd/1"}
	if got := app.Lifecycle.PreStop.Exec.Command; !slices.Equal(got, want) {
		t.Errorf("preStop %q, want %q", got, want)
	}

	// The other strategies get no agent.
	for _, st := range []Strategy{{Name: "none"}, {Name: "sleep:5s", Sleep: 5 * time.Second}} {
		s := deployment(3, st, sc, nil).Spec.Template.Spec
		if len(s.InitContainers) != 0 || len(s.Volumes) != 0 || len(s.Containers[0].Env) != 0 {
			t.Errorf("%s: got the agent: %+v", st.Name, s)
		}
	}
}

func TestGateServerArgsAndRBAC(t *testing.T) {
	d := gateDeployment("http://10.244.0.1:4567", timingsFor(0.25))
	c := d.Spec.Template.Spec.Containers[0]
	want := []string{"serve", "--listen=:8080", "--metrics-listen=:9090", "--aws-region=us-east-1",
		"--elbv2-endpoint=http://10.244.0.1:4567", "--aws-rate=2", "--aws-burst=5", "--poll-interval=500ms",
		"--tail-endpointslice=1.25s", "--tail-alb=5s", "--tail-nlb=45s", "--max-wait=30s"}
	if !slices.Equal(c.Args, want) {
		t.Errorf("args %q, want %q", c.Args, want)
	}
	if c.Image != ServerImage || d.Spec.Template.Spec.ServiceAccountName != "draingate" ||
		c.ReadinessProbe == nil || c.ReadinessProbe.HTTPGet.Path != "/readyz" || c.LivenessProbe.HTTPGet.Path != "/healthz" {
		t.Errorf("server pod %+v", d.Spec.Template.Spec)
	}
	role, binding := gateRBAC("lab-0-draingate-sys-1", "lab-0-draingate-sys-1")
	can := func(group, resource, verb string) bool {
		for _, r := range role.Rules {
			if slices.Contains(r.APIGroups, group) && slices.Contains(r.Resources, resource) && slices.Contains(r.Verbs, verb) {
				return true
			}
		}
		return false
	}
	for _, need := range [][3]string{
		{"", "pods", "watch"}, {"", "services", "list"}, {"discovery.k8s.io", "endpointslices", "watch"},
		{"elbv2.k8s.aws", "targetgroupbindings", "watch"}, {"apiextensions.k8s.io", "customresourcedefinitions", "get"},
		{"", "events", "create"}, {"events.k8s.io", "events", "patch"},
	} {
		if !can(need[0], need[1], need[2]) {
			t.Errorf("ClusterRole lacks %s %s/%s", need[2], need[0], need[1])
		}
	}
	if s := binding.Subjects[0]; s.Name != "draingate" || s.Namespace != "lab-0-draingate-sys-1" || binding.RoleRef.Name != role.Name {
		t.Errorf("binding %+v", binding)
	}
}
