package server

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apiextensions "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"draingate.dev/draingate/api"
	"draingate.dev/draingate/internal/drain"
	"draingate.dev/draingate/internal/gate"
	"draingate.dev/draingate/internal/route"
	"draingate.dev/draingate/proving/sim/elbv2sim"
	"draingate.dev/draingate/proving/sim/lbc"
	"draingate.dev/draingate/proving/testenv"
	"draingate.dev/draingate/proving/testutil"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// Short tails keep the tests quick; the tests assert orders and states.
const testALBTail = 3 * time.Second

var testTails = []string{"--tail-endpointslice=1s", "--tail-alb=3s", "--tail-nlb=3s"}

// fixture is one terminating-to-be pod behind two Services ("a", "b") and
// one `ip` target group (bound to "a"), with the emulator holding its
// target healthy until the test deregisters it.
type fixture struct {
	t      *testing.T
	c      *testenv.Cluster
	ns     string
	emu    *elbv2sim.Server
	emuURL string
	arn    string
	pod    *corev1.Pod
	target elbv2sim.Target
	// listen is where the next server listens; "" means 127.0.0.1:0.
	listen string
}

// newFixture builds the fixture; beforeCRD, when set, runs once the
// emulator and its client exist and before the TargetGroupBinding CRD is
// installed.
func newFixture(t *testing.T, ctx context.Context, beforeCRD ...func(*fixture)) *fixture {
	c := testenv.Get(t)
	f := &fixture{t: t, c: c, ns: c.Namespace(t)}
	f.emu = elbv2sim.New(elbv2sim.Config{})
	t.Cleanup(func() { f.emu.Close() })
	var err error
	if f.emuURL, err = f.emu.Listen("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	// The server reaches the emulator as it reaches AWS: the SDK's default
	// chain, with credentials from the environment (the emulator checks
	// no signature) and --elbv2-endpoint.
	t.Setenv("AWS_ACCESS_KEY_ID", "AKIDELBV2SIM")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "elbv2sim-secret")
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true")
	for _, b := range beforeCRD {
		b(f)
	}
	if err := lbc.InstallCRD(ctx, c.Config); err != nil {
		t.Fatal(err)
	}
	f.arn, err = f.emu.CreateTargetGroup(elbv2sim.TargetGroupSpec{
		Name: "web", LoadBalancerType: elbv2sim.Application, Port: 8080, TargetType: "ip",
		HealthCheckPath: "/", HealthCheckInterval: 300 * time.Millisecond, DeregistrationDelay: 10 * time.Minute,
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.LoadGoImage(ctx, testenv.TestAppImage, "./proving/testenv/cmd/testapp"); err != nil {
		t.Fatal(err)
	}
	labels := map[string]string{"app": "web"}
	for _, name := range []string{"a", "b"} {
		if _, err := c.Client.CoreV1().Services(f.ns).Create(ctx, &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec:       corev1.ServiceSpec{Selector: labels, Ports: []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromString("http")}}},
		}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	dyn, err := dynamic.NewForConfig(c.Config)
	if err != nil {
		t.Fatal(err)
	}
	b := lbc.Binding{Namespace: f.ns, Name: "web", TargetGroupARN: f.arn, TargetType: "ip", ServiceName: "a", ServicePort: intstr.FromString("http")}
	if _, err := dyn.Resource(lbc.GVR).Namespace(f.ns).Create(ctx, b.Object(), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// A native sleep hook holds the pod terminating for the whole test;
	// the test deletes it with no grace at the end.
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Labels: labels},
		Spec: corev1.PodSpec{
			TerminationGracePeriodSeconds: ptr.To[int64](600),
			Containers: []corev1.Container{{
				Name: "app", Image: testenv.TestAppImage, ImagePullPolicy: corev1.PullNever, Args: []string{"serve"},
				Ports:     []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}},
				Lifecycle: &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{Sleep: &corev1.SleepAction{Seconds: 590}}},
				ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{
					Path: "/", Port: intstr.FromString("http")}}, PeriodSeconds: 1},
			}},
		},
	}
	// A ready peer behind the same Services: without one, kube-proxy keeps
	// sending to the terminating pod (its serving fallback) and the
	// EndpointSlice routes rightly stay open.
	peer := pod.DeepCopy()
	peer.Name = "peer"
	peer.Spec.Containers[0].Lifecycle = nil
	for _, p := range []*corev1.Pod{pod, peer} {
		if _, err := c.Client.CoreV1().Pods(f.ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		c.Client.CoreV1().Pods(f.ns).Delete(context.Background(), "web", metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
	})
	waitFor(t, ctx, "pod Ready and listed by both Services' slices", func() bool {
		p, err := c.Client.CoreV1().Pods(f.ns).Get(ctx, "web", metav1.GetOptions{})
		if err != nil || p.Status.PodIP == "" {
			return false
		}
		f.pod = p
		for _, svc := range []string{"a", "b"} {
			l, err := c.Client.DiscoveryV1().EndpointSlices(f.ns).List(ctx, metav1.ListOptions{LabelSelector: "kubernetes.io/service-name=" + svc})
			if err != nil {
				return false
			}
			found := false
			for _, sl := range l.Items {
				for _, e := range sl.Endpoints {
					if len(e.Addresses) > 0 && e.Addresses[0] == p.Status.PodIP && ptr.Deref(e.Conditions.Ready, false) {
						found = true
					}
				}
			}
			if !found {
				return false
			}
		}
		return true
	})
	f.target = elbv2sim.Target{ID: f.pod.Status.PodIP, Port: 8080}
	if err := f.emu.RegisterTargets(f.arn, f.target); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, "target healthy", func() bool { return f.emu.Targets(f.arn)[f.target] == elbv2sim.StateHealthy })
	return f
}

// running is one in-process `draingate serve`.
type running struct {
	srv       *Server
	url       string
	reg       *prometheus.Registry
	stop      func()
	startedAt time.Time
}

func (f *fixture) serve(ctx context.Context) *running {
	return f.serveWith(ctx, Options{})
}

// serveWith starts a server with the fixture's cluster, the emulator and
// test settings on top of o; flags configure the kinds of route after the
// test's own (a later flag wins).
func (f *fixture) serveWith(ctx context.Context, o Options, flags ...string) *running {
	t := f.t
	addr := f.listen
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	if o.Kube == nil {
		o.Kube = f.c.Config
	}
	if o.Namespace == "" {
		o.Namespace = f.ns // the replicas' shared route memory
	}
	args := append(slices.Clone(testTails), "--aws-region=us-east-1", "--elbv2-endpoint="+f.emuURL,
		"--aws-rate=20", "--aws-burst=5", "--poll-interval=200ms")
	o.Routes = routeKinds(t, append(args, flags...)...)
	o.Listener, o.Registry = ln, reg
	if o.WaitAPISources == "" {
		o.WaitAPISources = SourcesAny // the tests ask from the host, not from the pod
	}
	o.Log = slog.New(slog.NewTextHandler(testWriter{t}, nil))
	s, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	r := &running{srv: s, url: "http://" + ln.Addr().String(), reg: reg, startedAt: time.Now()}
	go func() { done <- s.Run(rctx) }()
	stopped := false
	r.stop = func() {
		if !stopped {
			stopped = true
			cancel()
			if err := <-done; err != nil {
				t.Errorf("server stopped with %v", err)
			}
		}
	}
	t.Cleanup(r.stop)
	waitFor(t, ctx, "server ready", func() bool {
		resp, err := http.Get(r.url + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	return r
}

// ask asks the wait API about the fixture's pod; anything but a 200 fails
// the test.
func (f *fixture) ask(ctx context.Context, r *running, wait time.Duration) api.Verdict {
	f.t.Helper()
	v, status, body := f.tryAsk(ctx, r, wait)
	if status != http.StatusOK {
		f.t.Fatalf("wait API answered %d: %s", status, body)
	}
	return v
}

// tryAsk asks the wait API and returns the verdict (on a 200), the status
// and the body.
func (f *fixture) tryAsk(ctx context.Context, r *running, wait time.Duration) (api.Verdict, int, []byte) {
	f.t.Helper()
	req := api.DrainRequest{Namespace: f.ns, Pod: "web", UID: string(f.pod.UID), Wait: wait}
	hreq, _ := http.NewRequestWithContext(ctx, http.MethodGet, req.URL(r.url), nil)
	resp, err := http.DefaultClient.Do(hreq)
	if err != nil {
		f.t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	var v api.Verdict
	if resp.StatusCode == http.StatusOK {
		if err := json.Unmarshal(body, &v); err != nil {
			f.t.Fatal(err)
		}
	}
	return v, resp.StatusCode, body
}

func (f *fixture) deletePod(ctx context.Context) {
	if err := f.c.Client.CoreV1().Pods(f.ns).Delete(ctx, "web", metav1.DeleteOptions{}); err != nil {
		f.t.Fatal(err)
	}
}

func routeStates(v api.Verdict) map[string]api.Route {
	m := map[string]api.Route{}
	for _, r := range v.Routes {
		m[r.Kind+" "+r.Name] = r
	}
	return m
}

// TestReleasedAfterEveryRouteCloses: a pod behind two Services and one
// target group is held while the target group still holds it, although both
// EndpointSlice routes closed; it is released once the target is draining
// and the ALB tail passed, and the pod's Events say so.
func TestReleasedAfterEveryRouteCloses(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	f := newFixture(t, ctx)
	// A server as installed answers the pod's own agent only: this test
	// asks from the host.
	closed := f.serveWith(ctx, Options{WaitAPISources: SourcesPod})
	if _, status, body := f.tryAsk(ctx, closed, 0); status != http.StatusNotFound || !strings.Contains(string(body), "not known") || strings.Contains(string(body), f.pod.Status.PodIP) {
		t.Errorf("asked from the host: %d %s; want the answer about an unknown pod, not the pod's address", status, body)
	}
	closed.stop()
	r := f.serve(ctx)

	// Before deletion the pod's hook would run only for a restart: the API
	// server confirms the pod is not being deleted, so its agent goes at
	// once.
	if v := f.ask(ctx, r, 0); !v.Released || v.Reason != api.ReasonNotTerminating {
		t.Fatalf("before deletion: %+v, want released, not-terminating", v)
	}
	f.deletePod(ctx)
	slices := []string{"endpointslice " + f.ns + "/a", "endpointslice " + f.ns + "/b"}
	group := "targetgroup " + f.arn
	var v api.Verdict
	waitFor(t, ctx, "both EndpointSlice routes closed", func() bool {
		v = f.ask(ctx, r, 0)
		m := routeStates(v)
		return m[slices[0]].State == gate.StateClosed && m[slices[1]].State == gate.StateClosed
	})
	if len(v.Routes) != 3 {
		t.Fatalf("routes %+v, want the two Services and the target group", v.Routes)
	}
	if g := routeStates(v)[group]; v.Released || g.State != "healthy" {
		t.Fatalf("slices closed, target group %q: released=%v (%s), want held while the target is healthy", g.State, v.Released, v.Message)
	}
	// One more long-poll that ends by its wait, not by a release.
	if v := f.ask(ctx, r, 2*time.Second); v.Released {
		t.Fatalf("released while the target is healthy: %s", v.Message)
	}

	deregistered := time.Now()
	if err := f.emu.DeregisterTargets(f.arn, f.target); err != nil {
		t.Fatal(err)
	}
	for !v.Released {
		v = f.ask(ctx, r, 20*time.Second)
	}
	answered := time.Now()
	if v.Reason != api.ReasonDrained {
		t.Errorf("reason %q (%s), want drained", v.Reason, v.Message)
	}
	m := routeStates(v)
	for _, name := range append(slices, group) {
		if m[name].State != gate.StateClosed {
			t.Errorf("released with route %s %q, want closed", name, m[name].State)
		}
	}
	g := m[group]
	if g.Since.Before(deregistered) || g.TailEnds == nil || g.TailEnds.After(answered) || g.TailEnds.Sub(g.Since) != testALBTail {
		t.Errorf("target group route went out at %s, tail ends %v, answered %s, deregistered %s: want out after deregistration and the ALB tail (%s) over before the answer",
			g.Since.Format(time.StampMilli), g.TailEnds, answered.Format(time.StampMilli), deregistered.Format(time.StampMilli), testALBTail)
	}
	t.Logf("released: %s (waited %s)", v.Message, time.Duration(v.Waited))

	waitFor(t, ctx, "wait-started and released Events on the pod", func() bool {
		l, err := f.c.Client.CoreV1().Events(f.ns).List(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("involvedObject.name", "web").String()})
		if err != nil {
			return false
		}
		seen, verdicts := map[string]string{}, map[string]string{}
		for _, e := range l.Items {
			seen[e.Reason], verdicts[e.Reason] = e.Message, e.Annotations[api.VerdictAnnotation]
		}
		if seen[api.EventWaitStarted] == "" || seen[api.EventReleased] == "" {
			return false
		}
		if !strings.Contains(seen[api.EventReleased], "drained") {
			t.Errorf("release Event %q does not say why", seen[api.EventReleased])
		}
		// The release Event carries the verdict in full (kubectl draingate
		// explain prints it).
		var rv api.Verdict
		if err := json.Unmarshal([]byte(verdicts[api.EventReleased]), &rv); err != nil || !rv.Released || routeStates(rv)[group].ClosedBy == "" {
			t.Errorf("release Event's %s annotation %q (%v): want the released verdict, the target group closed and by what", api.VerdictAnnotation, verdicts[api.EventReleased], err)
		}
		return true
	})
	if n := counter(t, r.reg, "draingate_elbv2_calls_total", map[string]string{"action": "DescribeTargetHealth", "result": "ok"}); n < 1 {
		t.Errorf("draingate_elbv2_calls_total{DescribeTargetHealth,ok} = %v, want some", n)
	}
	if n := counter(t, r.reg, "draingate_waits_total", map[string]string{"outcome": "drained"}); n != 1 {
		t.Errorf("draingate_waits_total{drained} = %v, want 1", n)
	}
}

// TestBlueGreenRouteLearntFromTheGroup: the Services switch to other pods
// (a blue/green switch), the controller deregisters the pod's target, and
// the pod is deleted a moment later. No Service lists it any more, but its
// target is still draining in the group, where the load balancer may still
// send to it: the group is its route, held for the tail, never "no routes".
func TestBlueGreenRouteLearntFromTheGroup(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	f := newFixture(t, ctx)
	r := f.serve(ctx)
	for _, name := range []string{"a", "b"} {
		svc, err := f.c.Client.CoreV1().Services(f.ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		svc.Spec.Selector = map[string]string{"app": "green"}
		if _, err := f.c.Client.CoreV1().Services(f.ns).Update(ctx, svc, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.emu.DeregisterTargets(f.arn, f.target); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, "no Service's slices list the pod", func() bool {
		l, err := f.c.Client.DiscoveryV1().EndpointSlices(f.ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false
		}
		for _, sl := range l.Items {
			for _, e := range sl.Endpoints {
				if slices.Contains(e.Addresses, f.pod.Status.PodIP) {
					return false
				}
			}
		}
		return true
	})
	f.deletePod(ctx)
	group := "targetgroup " + f.arn
	var v api.Verdict
	waitFor(t, ctx, "the target group route draining", func() bool {
		v = f.ask(ctx, r, 0)
		if v.Released {
			t.Fatalf("released before the group was read: %s (%s)", v.Reason, v.Message)
		}
		return routeStates(v)[group].State == "draining"
	})
	for !v.Released {
		v = f.ask(ctx, r, 20*time.Second)
	}
	g := routeStates(v)[group]
	if v.Reason != api.ReasonDrained || g.State != gate.StateClosed || g.TailEnds == nil {
		t.Errorf("released %s (%s) with the group %q: want drained after its tail", v.Reason, v.Message, g.State)
	}
	// No Service lists the pod any more: besides the group, only the
	// Services it left (remembered for their tail) may be routes.
	for key := range routeStates(v) {
		if key != group && key != "endpointslice "+f.ns+"/a" && key != "endpointslice "+f.ns+"/b" {
			t.Errorf("route %s: want the target group and the Services the pod left only (%+v)", key, v.Routes)
		}
	}
}

// TestRestartMidWait: the target is draining and the first server has
// started its tail when it is stopped; the server started after it
// continues that tail (the pod's route memory is shared through a Lease in
// draingate's namespace) instead of starting it again from its own first
// observation, and releases the pod when that tail ends.
func TestRestartMidWait(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	f := newFixture(t, ctx)
	first := f.serve(ctx)
	f.deletePod(ctx)
	group := "targetgroup " + f.arn
	if err := f.emu.DeregisterTargets(f.arn, f.target); err != nil {
		t.Fatal(err)
	}
	var v api.Verdict
	waitFor(t, ctx, "the first server sees the target draining", func() bool {
		v = f.ask(ctx, first, 0)
		return routeStates(v)[group].State == "draining"
	})
	firstSince, firstTail := routeStates(v)[group].Since, routeStates(v)[group].TailEnds
	if v.Released || firstTail == nil {
		t.Fatalf("first server: %+v: want held with the ALB tail running", v)
	}
	waitFor(t, ctx, "the first server's memory shared", func() bool {
		return !sharedOut(t, ctx, f, "targetgroup", f.arn).IsZero()
	})
	first.stop()

	second := f.serve(ctx)
	v = f.ask(ctx, second, 0)
	if v.Released {
		t.Fatalf("the restarted server released at once: %s", v.Message)
	}
	for !v.Released {
		v = f.ask(ctx, second, 20*time.Second)
	}
	g := routeStates(v)[group]
	if g.State != gate.StateClosed || !g.Since.Equal(firstSince) || !g.TailEnds.Equal(*firstTail) {
		t.Errorf("second server released with the target group route %q out since %s, tail ending %v; the first server saw it out at %s, its tail ending %s: want the first server's tail continued",
			g.State, g.Since.Format(time.StampMilli), g.TailEnds, firstSince.Format(time.StampMilli), firstTail.Format(time.StampMilli))
	}
	t.Logf("first server's tail ends %s; second server released: %s", firstTail.Format(time.StampMilli), v.Message)
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

// sharedOut is when the fixture pod's shared record has the route going
// out (zero if it has not), as the Lease in the fixture's namespace says.
func sharedOut(t *testing.T, ctx context.Context, f *fixture, kind, name string) time.Time {
	t.Helper()
	le, err := f.c.Client.CoordinationV1().Leases(f.ns).Get(ctx, "draingate-pod-"+string(f.pod.UID), metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return time.Time{}
	}
	if err != nil {
		t.Fatal(err)
	}
	var r drain.Record
	if err := json.Unmarshal([]byte(le.Annotations["draingate.dev/record"]), &r); err != nil {
		t.Fatalf("the Lease's record: %v", err)
	}
	for _, x := range r.Routes {
		if x.Kind == kind && x.Name == name {
			return x.Out()
		}
	}
	return time.Time{}
}

// TestReplicasShareWhenARouteWentOut: two replicas against one API server,
// the agent asking only the first until its target group route is out
// (the second polls the group only once asked, so it sees the route out
// later). Asked then, the second counts the tail from the first's
// observation: a second replica never adds a tail.
func TestReplicasShareWhenARouteWentOut(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	f := newFixture(t, ctx)
	a, b := f.serve(ctx), f.serve(ctx)
	f.deletePod(ctx)
	group := "targetgroup " + f.arn
	waitFor(t, ctx, "the first replica holds the pod", func() bool {
		return routeStates(f.ask(ctx, a, 0))[group].State == "healthy"
	})
	if err := f.emu.DeregisterTargets(f.arn, f.target); err != nil {
		t.Fatal(err)
	}
	var va api.Verdict
	waitFor(t, ctx, "the first replica sees the target draining", func() bool {
		va = f.ask(ctx, a, 0)
		return routeStates(va)[group].State == "draining"
	})
	since := routeStates(va)[group].Since
	time.Sleep(2 * time.Second)
	var vb api.Verdict
	waitFor(t, ctx, "the second replica sees the route out", func() bool {
		vb = f.ask(ctx, b, 0)
		g := routeStates(vb)[group]
		return vb.Released || !g.Since.IsZero()
	})
	if g := routeStates(vb)[group]; !g.Since.Equal(since) {
		t.Errorf("second replica: the target group route out since %s, first replica %s: want the first observation", g.Since.Format(time.StampMilli), since.Format(time.StampMilli))
	}
}

// TestAgentFallbackWithoutServer: the agent in a real pod's preStop hook,
// with no gate server reachable, waits its fallback and returns within its
// deadline, so the kubelet sends SIGTERM.
func TestAgentFallbackWithoutServer(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c := testenv.Get(t)
	ns := c.Namespace(t)
	const agentImage = "draingate.local/draingate-prestop:1"
	for ref, pkg := range map[string]string{agentImage: "./cmd/draingate-prestop", testenv.TestAppImage: "./proving/testenv/cmd/testapp"} {
		if err := c.LoadGoImage(ctx, ref, pkg); err != nil {
			t.Fatal(err)
		}
	}
	// Nothing listens on the discard port of the host: connections are refused.
	const fallback, maxWait = 3 * time.Second, 30 * time.Second
	env := []corev1.EnvVar{{Name: "DRAINGATE_SERVER", Value: "http://" + testenv.HostIP + ":9"}}
	for name, path := range map[string]string{"DRAINGATE_POD_NAME": "metadata.name", "DRAINGATE_POD_NAMESPACE": "metadata.namespace", "DRAINGATE_POD_UID": "metadata.uid"} {
		env = append(env, corev1.EnvVar{Name: name, ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: path}}})
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "lonely"},
		Spec: corev1.PodSpec{
			TerminationGracePeriodSeconds: ptr.To[int64](60),
			InitContainers: []corev1.Container{{Name: "agent", Image: agentImage, ImagePullPolicy: corev1.PullNever,
				Args: []string{"install", "/draingate"}, VolumeMounts: []corev1.VolumeMount{{Name: "draingate", MountPath: "/draingate"}}}},
			Containers: []corev1.Container{{
				Name: "app", Image: testenv.TestAppImage, ImagePullPolicy: corev1.PullNever, Args: []string{"serve"}, Env: env,
				VolumeMounts: []corev1.VolumeMount{{Name: "draingate", MountPath: "/draingate", ReadOnly: true}},
				Lifecycle: &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{Exec: &corev1.ExecAction{Command: []string{
					"/draingate/draingate-prestop", "wait", "--fallback", fallback.String(), "--max-wait", maxWait.String(), "--log", "/proc/1/fd/1"}}}},
			}},
			Volumes: []corev1.Volume{{Name: "draingate", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}},
		},
	}
	if _, err := c.Client.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, "pod running", func() bool {
		p, err := c.Client.CoreV1().Pods(ns).Get(ctx, "lonely", metav1.GetOptions{})
		return err == nil && p.Status.Phase == corev1.PodRunning
	})
	logs, err := c.Client.CoreV1().Pods(ns).GetLogs("lonely", &corev1.PodLogOptions{Container: "app", Follow: true}).Stream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer logs.Close()
	deleted := time.Now()
	if err := c.Client.CoreV1().Pods(ns).Delete(ctx, "lonely", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	var agent []string
	var sigterm time.Time
	sc := bufio.NewScanner(logs)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "draingate-prestop: ") {
			agent = append(agent, line)
		}
		if strings.HasPrefix(line, "sigterm ") {
			var ns int64
			fmt.Sscan(strings.TrimPrefix(line, "sigterm "), &ns)
			sigterm = time.Unix(0, ns)
		}
	}
	t.Logf("agent said:\n%s", strings.Join(agent, "\n"))
	said := strings.Join(agent, "\n")
	if !strings.Contains(said, "no gate server answered") || !strings.Contains(said, "waited fallback "+fallback.String()) {
		t.Errorf("the agent did not report waiting out its fallback")
	}
	if sigterm.IsZero() {
		t.Fatal("the app never logged SIGTERM: the hook did not return before the pod was killed")
	}
	if sigterm.Before(deleted.Add(fallback)) || sigterm.After(deleted.Add(maxWait)) {
		t.Errorf("SIGTERM %s after deletion: want after the fallback (%s) and within the agent's deadline (%s)", sigterm.Sub(deleted), fallback, maxWait)
	}
	t.Logf("SIGTERM %s after deletion (fallback %s, max wait %s)", sigterm.Sub(deleted).Round(time.Millisecond), fallback, maxWait)
}

func counter(t *testing.T, reg *prometheus.Registry, name string, labels map[string]string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	metric:
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if v, ok := labels[lp.GetName()]; ok && v != lp.GetValue() {
					continue metric
				}
			}
			return m.GetCounter().GetValue()
		}
	}
	return 0
}

func waitFor(t *testing.T, ctx context.Context, what string, cond func() bool) {
	t.Helper()
	testutil.Eventually(t, ctx, what, func() (bool, error) { return cond(), nil })
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// TestTargetGroupCRDAppearsLater: with the TargetGroupBinding CRD absent
// the server starts and answers (EndpointSlices only); once the CRD is
// installed it picks it up, and a pod behind a binding waits for its
// target group.
func TestTargetGroupCRDAppearsLater(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	var r *running
	f := newFixture(t, ctx, func(f *fixture) {
		removeCRD(t, ctx, f.c)
		r = f.serveWith(ctx, Options{})
	})
	// The server looks for the CRD every 10 s; it has found it once it
	// reads the bound group's load balancer type.
	waitFor(t, ctx, "the CRD found and the binding seen", func() bool {
		return counter(t, r.reg, "draingate_elbv2_calls_total", map[string]string{"action": "DescribeTargetGroups", "result": "ok"}) >= 1
	})
	f.deletePod(ctx)
	group := "targetgroup " + f.arn
	waitFor(t, ctx, "the target group route in the verdict", func() bool {
		// 503 while the new TargetGroupBinding cache syncs: ask again.
		v, status, _ := f.tryAsk(ctx, r, 0)
		if status != http.StatusOK {
			return false
		}
		if v.Released {
			t.Fatalf("released with the target still healthy: %s", v.Message)
		}
		return routeStates(v)[group].State == "healthy"
	})
}

// removeCRD deletes the TargetGroupBinding CRD and waits until the API no
// longer serves it.
func removeCRD(t *testing.T, ctx context.Context, c *testenv.Cluster) {
	t.Helper()
	cl, err := apiextensions.NewForConfig(c.Config)
	if err != nil {
		t.Fatal(err)
	}
	name := lbc.CRD().Name
	if err := cl.ApiextensionsV1().CustomResourceDefinitions().Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	waitFor(t, ctx, "the TargetGroupBinding CRD gone", func() bool {
		_, err := c.Client.Discovery().ServerResourcesForGroupVersion(lbc.GVR.GroupVersion().String())
		return apierrors.IsNotFound(err)
	})
}

// TestExtraWaitFollowsTheLoadBalancerType: the server reads a group's load
// balancer type when its TargetGroupBinding appears, before any pod of it
// drains, so a new pod selected by the bound Service gets nothing added to
// its max-wait (an ALB here); a pod no bound Service selects, nothing; a
// group whose type cannot be read (a binding to a group the emulator does
// not know) gets the NLB tail beyond the ALB one, naming the group.
func TestExtraWaitFollowsTheLoadBalancerType(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	f := newFixture(t, ctx)
	albTail, nlbTail := 3*time.Second, time.Minute
	// Admission sizing reads the caches only: no request for one Service
	// (a live read, throttled with the rest of the server's requests,
	// timed out and left a pod behind an NLB with the default max-wait).
	var serviceReads atomic.Int64
	kube := rest.CopyConfig(f.c.Config)
	kube.WrapTransport = func(rt http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(req *http.Request) (*http.Response, error) {
			if strings.Contains(req.URL.Path, "/services/") {
				serviceReads.Add(1)
			}
			return rt.RoundTrip(req)
		})
	}
	r := f.serveWith(ctx, Options{Kube: kube}, "--tail-alb="+albTail.String(), "--tail-nlb="+nlbTail.String())
	defer func() {
		if n := serviceReads.Load(); n != 0 {
			t.Errorf("%d reads of single Services: admission sizing must read the caches only", n)
		}
	}()
	newPod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, GenerateName: "web-", Labels: map[string]string{"app": "web"}}}
	// Nothing asks for the group (no webhook call, no pod draining): the
	// binding's appearance alone has its type read.
	waitFor(t, ctx, "the group's type read from its binding", func() bool {
		return counter(t, r.reg, "draingate_elbv2_calls_total", map[string]string{"action": "DescribeTargetGroups", "result": "ok"}) >= 1
	})
	if extra, why, err := route.AdmissionWait(ctx, r.srv.sources, newPod); err != nil || extra != 0 {
		t.Errorf("an ALB's pod: extra %s (%q, %v), want none", extra, why, err)
	}
	other := newPod.DeepCopy()
	other.Labels = map[string]string{"app": "other"}
	if extra, _, err := route.AdmissionWait(ctx, r.srv.sources, other); err != nil || extra != 0 {
		t.Errorf("unselected pod: extra %s (%v), want none", extra, err)
	}

	dyn, err := dynamic.NewForConfig(f.c.Config)
	if err != nil {
		t.Fatal(err)
	}
	ghost := "arn:aws:elasticloadbalancing:us-east-1:123456789012:targetgroup/ghost/0123456789abcdef"
	b := lbc.Binding{Namespace: f.ns, Name: "ghost", TargetGroupARN: ghost, TargetType: "ip", ServiceName: "b", ServicePort: intstr.FromString("http")}
	if _, err := dyn.Resource(lbc.GVR).Namespace(f.ns).Create(ctx, b.Object(), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, "the NLB tail for a group of unknown type", func() bool {
		extra, why, err := route.AdmissionWait(ctx, r.srv.sources, newPod)
		return err == nil && extra == nlbTail-albTail && strings.Contains(why, ghost)
	})
}

// TestHostNetworkAgentShowsItsToken: a hostNetwork pod's address is its
// node's, so a request from that address alone is refused (answered as
// about an unknown pod); a token bound to the pod (TokenReview on the real
// API server) lets its agent in, and a token bound to another pod or made
// for another audience does not.
func TestHostNetworkAgentShowsItsToken(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	f := newFixture(t, ctx)
	c := f.c
	hostnet := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "hostnet"},
		Spec: corev1.PodSpec{
			HostNetwork: true, TerminationGracePeriodSeconds: ptr.To[int64](1),
			Containers: []corev1.Container{{Name: "app", Image: testenv.TestAppImage, ImagePullPolicy: corev1.PullNever,
				Args: []string{"serve", "-addr", "127.0.0.1:0"}}},
		},
	}
	if _, err := c.Client.CoreV1().Pods(f.ns).Create(ctx, hostnet, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, "hostNetwork pod with its node's address", func() bool {
		p, err := c.Client.CoreV1().Pods(f.ns).Get(ctx, "hostnet", metav1.GetOptions{})
		if err != nil || p.Status.PodIP == "" {
			return false
		}
		hostnet = p
		return true
	})
	token := func(pod *corev1.Pod, audience string) string {
		tr, err := c.Client.CoreV1().ServiceAccounts(f.ns).CreateToken(ctx, "default", &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{
			Audiences: []string{audience}, ExpirationSeconds: ptr.To[int64](600),
			BoundObjectRef: &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID},
		}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return tr.Status.Token
	}
	// The test runs on the node: it asks from the node's address, as every
	// hostNetwork process there could, to a server listening there (Linux
	// drops a packet to 127.0.0.1 whose source is not a loopback address).
	node := net.ParseIP(hostnet.Status.PodIP)
	f.listen = net.JoinHostPort(node.String(), "0")
	r := f.serveWith(ctx, Options{WaitAPISources: SourcesPod})
	client := &http.Client{Transport: &http.Transport{DialContext: (&net.Dialer{LocalAddr: &net.TCPAddr{IP: node}}).DialContext}}
	ask := func(tok string) (int, string) {
		req := api.DrainRequest{Namespace: f.ns, Pod: "hostnet", UID: string(hostnet.UID)}
		hreq, _ := http.NewRequestWithContext(ctx, http.MethodGet, req.URL(r.url), nil)
		if tok != "" {
			hreq.Header.Set("Authorization", "Bearer "+tok)
		}
		resp, err := client.Do(hreq)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	// Refused callers get the answer about an unknown pod, word for word;
	// why is in the server's log.
	unknown := "is not known to the gate server"
	for _, tc := range []struct {
		name, token string
		status      int
		says        string
	}{
		{"no token, from the node's address", "", http.StatusNotFound, unknown},
		{"a token bound to another pod", token(f.pod, api.TokenAudience), http.StatusNotFound, unknown},
		{"a token for the API server's audience", token(hostnet, "https://kubernetes.default.svc"), http.StatusNotFound, unknown},
		{"a forged token", "eyJhbGciOiJSUzI1NiJ9.e30.c2ln", http.StatusNotFound, unknown},
		{"the pod's own token", token(hostnet, api.TokenAudience), http.StatusOK, `"released":true`},
	} {
		if status, body := ask(tc.token); status != tc.status || !strings.Contains(body, tc.says) {
			t.Errorf("%s: %d %s; want %d saying %q", tc.name, status, body, tc.status, tc.says)
		}
	}
}

// TestSelectorFlipRemembered: a pod taken off Service "b" (its selector
// flips, as in a blue/green switch) and deleted at once is no longer in
// b's slices, yet kube-proxy and the rest may still send to it for the
// EndpointSlice tail: the server remembers the route it left.
func TestSelectorFlipRemembered(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	f := newFixture(t, ctx)
	r := f.serveWith(ctx, Options{}, "--tail-endpointslice=30s")
	svc, err := f.c.Client.CoreV1().Services(f.ns).Get(ctx, "b", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	svc.Spec.Selector = map[string]string{"app": "green"}
	if _, err := f.c.Client.CoreV1().Services(f.ns).Update(ctx, svc, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, "b's slices no longer list the pod", func() bool {
		l, err := f.c.Client.DiscoveryV1().EndpointSlices(f.ns).List(ctx, metav1.ListOptions{LabelSelector: "kubernetes.io/service-name=b"})
		if err != nil {
			return false
		}
		for _, sl := range l.Items {
			for _, e := range sl.Endpoints {
				if slices.Contains(e.Addresses, f.pod.Status.PodIP) {
					return false
				}
			}
		}
		return true
	})
	f.deletePod(ctx)
	b := "endpointslice " + f.ns + "/b"
	var v api.Verdict
	waitFor(t, ctx, "the server sees the pod terminating", func() bool {
		v = f.ask(ctx, r, 0)
		return routeStates(v)["endpointslice "+f.ns+"/a"].State != ""
	})
	if got, ok := routeStates(v)[b]; !ok || got.State == gate.StateClosed || v.Released {
		t.Errorf("right after deletion: routes %+v (released %v); want %s held open for its tail", v.Routes, v.Released, b)
	}
}

// TestInClusterClientsFromTheCache: the evidence's in-cluster test answers
// from the server's cache of the real cluster: a pod's address is an
// in-cluster client's, its node's (probes) and a load balancer node's are
// not.
func TestInClusterClientsFromTheCache(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	f := newFixture(t, ctx)
	r := f.serve(ctx)
	pod := netip.MustParseAddr(f.pod.Status.PodIP)
	waitFor(t, ctx, "the pod's address known as a pod's", func() bool { return r.srv.inCluster(pod) })
	for _, s := range append([]string{f.pod.Status.HostIP}, testenv.LBNodeIPs()[0]) {
		if a := netip.MustParseAddr(s); r.srv.inCluster(a) {
			t.Errorf("%s taken for a pod's address", a)
		}
	}
}

// TestLocalPolicyNodeDrain: a pod that is the last ready endpoint on its
// node of a LoadBalancer Service with externalTrafficPolicy Local (the
// Service's other ready endpoint on another node) is held, once
// terminating but serving, for the load balancer's drain of the node, the
// Service's draingate.dev/local-policy-tail, not the EndpointSlice tail.
// The slice is written by hand: the test cluster has one node.
func TestLocalPolicyNodeDrain(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	f := newFixture(t, ctx)
	const drain = 40 * time.Second
	lb, _ := localPolicyRoute(t, ctx, f, map[string]string{"draingate.dev/local-policy-tail": drain.String()}, func(api.Route) bool { return true })
	if got := lb.TailEnds.Sub(lb.Since); got != drain || !strings.Contains(lb.Detail, "Local-policy node drain") {
		t.Errorf("route: tail %s (%s); want the Service's %s", got, lb.Detail, drain)
	}
}

// TestLocalPolicyNodeDrainFromTargetGroup: as TestLocalPolicyNodeDrain,
// with an AWS instance target group in front of the Service (a
// TargetGroupBinding of targetType instance) and no annotation: the floor
// is the group's own drain of a node, its health checks (10 s × 3) then
// the ALB tail (3 s here), not the 60 s default (fails on the default).
func TestLocalPolicyNodeDrainFromTargetGroup(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	f := newFixture(t, ctx)
	arn, err := f.emu.CreateTargetGroup(elbv2sim.TargetGroupSpec{Name: "nodes", LoadBalancerType: elbv2sim.Application, Port: 30080,
		TargetType: "instance", HealthCheckInterval: 10 * time.Second, UnhealthyThreshold: 3})
	if err != nil {
		t.Fatal(err)
	}
	dyn, err := dynamic.NewForConfig(f.c.Config)
	if err != nil {
		t.Fatal(err)
	}
	b := lbc.Binding{Namespace: f.ns, Name: "nodes", TargetGroupARN: arn, TargetType: "instance", ServiceName: "lb", ServicePort: intstr.FromString("http")}
	if _, err := dyn.Resource(lbc.GVR).Namespace(f.ns).Create(ctx, b.Object(), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	const want = 30*time.Second + 3*time.Second // the health checks, then testTails' ALB tail
	lb, r := localPolicyRoute(t, ctx, f, nil, func(r api.Route) bool { return r.TailEnds.Sub(r.Since) == want })
	if !strings.Contains(lb.Detail, "health checks") || !strings.Contains(lb.Detail, arn) {
		t.Errorf("route: %s; want it to name group %s's health checks", lb.Detail, arn)
	}

	// Admission: a pod that a Local-policy Service bound to the group
	// selects gets the drain beyond what the default max-wait covers
	// (an ALB's 20 s): 13 s more.
	sel := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "lb-selected"},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, ExternalTrafficPolicy: corev1.ServiceExternalTrafficPolicyLocal,
			Selector: map[string]string{"app": "web"}, Ports: []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080)}}},
	}
	if _, err := f.c.Client.CoreV1().Services(f.ns).Create(ctx, sel, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	b = lbc.Binding{Namespace: f.ns, Name: "nodes-selected", TargetGroupARN: arn, TargetType: "instance", ServiceName: "lb-selected", ServicePort: intstr.FromString("http")}
	if _, err := dyn.Resource(lbc.GVR).Namespace(f.ns).Create(ctx, b.Object(), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	newPod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, GenerateName: "web-", Labels: map[string]string{"app": "web"}}}
	waitFor(t, ctx, "admission adding the group's drain beyond the ALB tail", func() bool {
		extra, why, err := route.AdmissionWait(ctx, r.srv.sources, newPod)
		return err == nil && extra == want-20*time.Second && strings.Contains(why, "lb-selected") && strings.Contains(why, "health checks")
	})
}

// TestLocalPolicyNodeDrainGroupNotRead: an instance group that cannot be
// read (a binding to a group the emulator does not know) holds the route
// for the tail of a load balancer of unknown type, the NLB's (90 s here),
// longer than the 60 s default: not knowing never shortens the drain
// (fails when an unread group leaves the default alone).
func TestLocalPolicyNodeDrainGroupNotRead(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	f := newFixture(t, ctx)
	dyn, err := dynamic.NewForConfig(f.c.Config)
	if err != nil {
		t.Fatal(err)
	}
	ghost := "arn:aws:elasticloadbalancing:us-east-1:123456789012:targetgroup/ghost-nodes/0123456789abcdef"
	b := lbc.Binding{Namespace: f.ns, Name: "ghost-nodes", TargetGroupARN: ghost, TargetType: "instance", ServiceName: "lb", ServicePort: intstr.FromString("http")}
	if _, err := dyn.Resource(lbc.GVR).Namespace(f.ns).Create(ctx, b.Object(), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	const want = 90 * time.Second
	lb, _ := localPolicyRoute(t, ctx, f, nil, func(r api.Route) bool { return r.TailEnds.Sub(r.Since) == want }, "--tail-nlb="+want.String())
	if !strings.Contains(lb.Detail, "not read yet") || !strings.Contains(lb.Detail, ghost) {
		t.Errorf("route: %s; want it to name group %s, not read yet", lb.Detail, ghost)
	}
}

// localPolicyRoute creates the Service lb (type LoadBalancer, Local
// policy, the annotations given) with a hand-written slice listing the
// fixture's pod, the last ready endpoint on its node, and a ready one
// elsewhere; deletes the pod and marks its endpoint terminating but
// serving, as the EndpointSlice controller does; and returns the route
// once it is terminating-serving with its tail started and done says it
// is as expected (the test fails at ctx's end otherwise), and the server
// (run with flags besides the fixture's). The pod is held throughout.
func localPolicyRoute(t *testing.T, ctx context.Context, f *fixture, annotations map[string]string, done func(api.Route) bool, flags ...string) (api.Route, *running) {
	t.Helper()
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "lb", Annotations: annotations},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, ExternalTrafficPolicy: corev1.ServiceExternalTrafficPolicyLocal,
			Ports: []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080)}}},
	}
	if _, err := f.c.Client.CoreV1().Services(f.ns).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	slice := func(podReady bool) *discoveryv1.EndpointSlice {
		node, elsewhere := f.pod.Spec.NodeName, "another-node"
		return &discoveryv1.EndpointSlice{
			ObjectMeta:  metav1.ObjectMeta{Name: "lb-manual", Labels: map[string]string{discoveryv1.LabelServiceName: "lb"}},
			AddressType: discoveryv1.AddressTypeIPv4,
			Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("http"), Port: ptr.To[int32](8080)}},
			Endpoints: []discoveryv1.Endpoint{
				{Addresses: []string{f.pod.Status.PodIP}, NodeName: &node,
					TargetRef:  &corev1.ObjectReference{Kind: "Pod", Namespace: f.ns, Name: f.pod.Name, UID: f.pod.UID},
					Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(podReady), Serving: ptr.To(true), Terminating: ptr.To(!podReady)}},
				{Addresses: []string{"10.244.250.9"}, NodeName: &elsewhere,
					Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true), Serving: ptr.To(true), Terminating: ptr.To(false)}},
			},
		}
	}
	sl, err := f.c.Client.DiscoveryV1().EndpointSlices(f.ns).Create(ctx, slice(true), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	r := f.serveWith(ctx, Options{}, append([]string{"--tail-endpointslice=1s"}, flags...)...)
	f.deletePod(ctx)
	next := slice(false)
	next.ResourceVersion = sl.ResourceVersion
	if _, err := f.c.Client.DiscoveryV1().EndpointSlices(f.ns).Update(ctx, next, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	name := "endpointslice " + f.ns + "/lb"
	var v api.Verdict
	waitFor(t, ctx, "the Local-policy route terminating-serving, its tail started and as expected", func() bool {
		v = f.ask(ctx, r, 0)
		lb := routeStates(v)[name]
		return lb.State == "terminating-serving" && lb.TailEnds != nil && done(lb)
	})
	lb := routeStates(v)[name]
	if v.Released {
		t.Errorf("released while route %s holds (%s)", name, lb.Detail)
	}
	t.Logf("%s: %s", name, lb.Detail)
	return lb, r
}

// TestExternalRoute on the real cluster: with target groups off, a Service
// of type LoadBalancer is a route of a load balancer draingate cannot
// query. The terminating pod is held for the Service's external tail after
// its endpoint went out, though its EndpointSlice route closed long before
// (fails without the external kind: released once the 1 s EndpointSlice
// tail passed). With target groups on (auto), the kind finds no route.
func TestExternalRoute(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	f := newFixture(t, ctx)
	const tail = 45 * time.Second
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "gke", Annotations: map[string]string{"draingate.dev/external-tail": tail.String()}},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer,
			Ports: []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080)}}},
	}
	if _, err := f.c.Client.CoreV1().Services(f.ns).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	slice := func(ready bool) *discoveryv1.EndpointSlice {
		node := f.pod.Spec.NodeName
		return &discoveryv1.EndpointSlice{
			ObjectMeta:  metav1.ObjectMeta{Name: "gke-manual", Labels: map[string]string{discoveryv1.LabelServiceName: "gke"}},
			AddressType: discoveryv1.AddressTypeIPv4,
			Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("http"), Port: ptr.To[int32](8080)}},
			Endpoints: []discoveryv1.Endpoint{
				{Addresses: []string{f.pod.Status.PodIP}, NodeName: &node,
					TargetRef:  &corev1.ObjectReference{Kind: "Pod", Namespace: f.ns, Name: f.pod.Name, UID: f.pod.UID},
					Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(ready), Serving: ptr.To(ready), Terminating: ptr.To(!ready)}},
				{Addresses: []string{"10.244.250.9"}, NodeName: &node,
					Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true), Serving: ptr.To(true), Terminating: ptr.To(false)}},
			},
		}
	}
	sl, err := f.c.Client.DiscoveryV1().EndpointSlices(f.ns).Create(ctx, slice(true), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	name := "external " + f.ns + "/gke"

	f.deletePod(ctx)
	next := slice(false)
	next.ResourceVersion = sl.ResourceVersion
	if _, err := f.c.Client.DiscoveryV1().EndpointSlices(f.ns).Update(ctx, next, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	esName := "endpointslice " + f.ns + "/gke"

	// Target groups on, --external-routes auto: no external route.
	on := f.serveWith(ctx, Options{})
	var v api.Verdict
	waitFor(t, ctx, "the Service's EndpointSlice route terminating", func() bool {
		v = f.ask(ctx, on, 0)
		return routeStates(v)[esName].State == "terminating"
	})
	if r, ok := routeStates(v)[name]; ok {
		t.Errorf("with target groups on, the external kind at auto found route %s (%s); want none", name, r.Detail)
	}
	on.stop()

	r := f.serveWith(ctx, Options{}, "--target-groups=false")
	waitFor(t, ctx, "the external route out, its tail started, the EndpointSlice route closed", func() bool {
		v = f.ask(ctx, r, 0)
		st := routeStates(v)
		return st[name].TailEnds != nil && st[esName].TailEnds != nil && !st[esName].TailEnds.After(time.Now())
	})
	ext := routeStates(v)[name]
	if got := ext.TailEnds.Sub(ext.Since); got != tail || ext.State != "terminating" || v.Released {
		t.Errorf("route %s: %s, tail %s (%s), released %v; want terminating, the Service's %s, the pod held", name, ext.State, got, ext.Detail, v.Released, tail)
	}
	t.Logf("%s: %s", name, ext.Detail)
}

// TestInstanceTargetsSayWhatTheAppMustDo on the real cluster: a pod behind
// a NodePort Service (Cluster policy) that an instance target group sends
// to is held by its EndpointSlice route alone, and that route, once out,
// says that the load balancer's keep-alive connections to the pod end only
// when the app closes them, and how (fails without the note: the detail
// names no target group).
func TestInstanceTargetsSayWhatTheAppMustDo(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	f := newFixture(t, ctx)
	arn, err := f.emu.CreateTargetGroup(elbv2sim.TargetGroupSpec{Name: "np-nodes", LoadBalancerType: elbv2sim.Application, Port: 30080, TargetType: "instance"})
	if err != nil {
		t.Fatal(err)
	}
	dyn, err := dynamic.NewForConfig(f.c.Config)
	if err != nil {
		t.Fatal(err)
	}
	b := lbc.Binding{Namespace: f.ns, Name: "np-nodes", TargetGroupARN: arn, TargetType: "instance", ServiceName: "np", ServicePort: intstr.FromString("http")}
	if _, err := dyn.Resource(lbc.GVR).Namespace(f.ns).Create(ctx, b.Object(), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "np"},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeNodePort,
			Ports: []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080)}}},
	}
	if _, err := f.c.Client.CoreV1().Services(f.ns).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	slice := func(podReady bool) *discoveryv1.EndpointSlice {
		return &discoveryv1.EndpointSlice{
			ObjectMeta:  metav1.ObjectMeta{Name: "np-manual", Labels: map[string]string{discoveryv1.LabelServiceName: "np"}},
			AddressType: discoveryv1.AddressTypeIPv4,
			Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("http"), Port: ptr.To[int32](8080)}},
			Endpoints: []discoveryv1.Endpoint{
				{Addresses: []string{f.pod.Status.PodIP},
					TargetRef:  &corev1.ObjectReference{Kind: "Pod", Namespace: f.ns, Name: f.pod.Name, UID: f.pod.UID},
					Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(podReady), Serving: ptr.To(true), Terminating: ptr.To(!podReady)}},
				{Addresses: []string{"10.244.250.9"},
					Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true), Serving: ptr.To(true), Terminating: ptr.To(false)}},
			},
		}
	}
	sl, err := f.c.Client.DiscoveryV1().EndpointSlices(f.ns).Create(ctx, slice(true), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	r := f.serveWith(ctx, Options{}, "--tail-endpointslice=30s")
	f.deletePod(ctx)
	next := slice(false)
	next.ResourceVersion = sl.ResourceVersion
	if _, err := f.c.Client.DiscoveryV1().EndpointSlices(f.ns).Update(ctx, next, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	name := "endpointslice " + f.ns + "/np"
	var route api.Route
	waitFor(t, ctx, "the NodePort Service's route out, naming the instance group", func() bool {
		last := route.Detail
		route = routeStates(f.ask(ctx, r, 0))[name]
		if route.Detail != last {
			t.Logf("%s: %s: %s", name, route.State, route.Detail)
		}
		return route.State == "terminating" && strings.Contains(route.Detail, arn)
	})
	if !strings.Contains(route.Detail, "Connection: close") {
		t.Errorf("route %s: %s; want it to say what the app must do", name, route.Detail)
	}
}
