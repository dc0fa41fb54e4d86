package lab

// This file is long because it is one lab run in order: install, load,
// rollouts per strategy, measurement and the report, each step feeding the
// next.

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"net"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	elbv2 "github.com/aws/aws-sdk-go-v2/service/elasticloadbalancingv2"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"draingate.dev/draingate/api"
	"draingate.dev/draingate/proving/lab/report"
	"draingate.dev/draingate/proving/lab/sidecar"
	"draingate.dev/draingate/proving/sim/dataplane"
	"draingate.dev/draingate/proving/sim/elbv2sim"
	"draingate.dev/draingate/proving/sim/lbc"
	"draingate.dev/draingate/release/chart"
)

// Options is one lab run.
type Options struct {
	Scenario  Scenario // already scaled
	TimeScale float64  // also scales every duration of the draingate chart's defaults
	// DraingateSet are chart values in Helm --set syntax for the draingate
	// strategy, on top of its defaults: explicit experiments, echoed in the
	// report.
	DraingateSet []string
	Strategies   []Strategy // sleeps already scaled
	Replicas     int
	Rollouts     int
	RPS          int
	// RolloutRPS, when set, is the load's rate (requests/s at full scale)
	// during each rollout, one per rollout (RPS is then the first): a busy
	// rollout may precede a quiet one.
	RolloutRPS []int
	// RolloutPropagationMax, when set, is each rollout's propagation
	// maximum at full scale, one per rollout (a load balancer that becomes
	// slower, as in an AWS incident): the nodes draw uniformly from the
	// scenario's minimum up to the current rollout's.
	RolloutPropagationMax []time.Duration
	// RateMidDrain changes the rate as soon as the previous rollout's
	// Deployment step ends, while its last pods still drain (a load that
	// falls mid-drain: the sudden-fall limit of docs/evidence.md); by
	// default a rollout whose rate differs waits for them.
	RateMidDrain bool
	// Load is the traffic's shape, clients and spread over the load
	// balancer's nodes (already scaled).
	Load     Load
	Seed     uint64
	Progress io.Writer
	// Chaos is a fault injected during every rollout (already scaled);
	// the zero value injects none.
	Chaos Chaos
}

// loadPer is the period the load sends RPS requests in: a second at full
// scale, and scaled like every other duration, so that a scaled run is the
// full-scale one played faster (a rate is per time too: a per-source rate,
// hence the gate's quiet bound, keeps its proportion to the tails).
func (o Options) loadPer() time.Duration {
	if o.TimeScale <= 0 {
		return time.Second
	}
	return time.Duration(float64(time.Second) * o.TimeScale)
}

// loadRate says the load's rate, e.g. "50 requests/s" or "50 requests/s at
// full scale, played at 100/s".
func (o Options) loadRate() string {
	played := float64(o.RPS) * float64(time.Second) / float64(o.loadPer())
	if played == float64(o.RPS) {
		return fmt.Sprintf("%d requests/s", o.RPS)
	}
	return fmt.Sprintf("%d requests/s at full scale, played at %.4g/s", o.RPS, played)
}

// Env is what a run needs of the cluster: an admin config and a clientset
// (proving/testenv provides both), and the host's address on the cluster's
// bridge (testenv.HostIP), where the ELBv2 emulator listens so that pods
// (the gate server) reach it too. The demo image (DemoImage) must already be
// loaded, and ServerImage and AgentImage when a strategy uses the gate
// (UsesGate); the caller does that with testenv's LoadGoImage.
type Env struct {
	Config *rest.Config
	Client kubernetes.Interface
	// Kubeconfig is the admin kubeconfig's path; the draingate strategy
	// installs the chart with it (the Helm library reads a file).
	Kubeconfig string
	HostIP     string // empty: the emulator listens on 127.0.0.1, out of the pods' reach
	// HAProxy is the haproxy binary the ingress scenario runs (the
	// wrapper hack/install-haproxy.sh writes); empty: not installed.
	HAProxy string
	// LBSources are the addresses the load balancer's nodes connect from
	// (testenv.LBNodeIPs), one per node: on this host, and neither the
	// node's nor a pod's, so the app tells the nodes apart. Empty: every
	// node connects from the host's own address.
	LBSources []string
	// ClientSources are the addresses the load's clients connect from when
	// the load balancer keeps its clients' addresses (testenv.LBClientIPs),
	// one per client; like LBSources, the host's own.
	ClientSources []string
	// RestartAPIServer stops the cluster's API server, waits down, starts
	// it again and returns how long the stop took (testenv's
	// Cluster.RestartAPIServer); nil when the lab cannot.
	RestartAPIServer func(ctx context.Context, down time.Duration) (stopping time.Duration, err error)
	// AddNode starts the cluster's second node, tainted with testenv's
	// SecondNodeTaint, if not yet running (testenv's Cluster.AddNode);
	// nil when the lab cannot. The local-policy scenario needs it.
	AddNode func(ctx context.Context) error
}

// Run measures every strategy in turn and returns the report.
func Run(ctx context.Context, env Env, o Options) (rep report.Report, err error) {
	var localNotes []string
	if o.Scenario.LocalPolicy {
		if env.AddNode == nil {
			return rep, errors.New("the local-policy scenario needs a second node (Env.AddNode): run it on the lab's own cluster")
		}
		if o.Replicas != 2 {
			localNotes = append(localNotes, fmt.Sprintf("2 replicas, one per node (--replicas %d does not apply)", o.Replicas))
		}
		o.Replicas = 2
	}
	rep = report.Report{Scenario: o.Scenario.Name, TimeScale: o.TimeScale, Replicas: o.Replicas, Rollouts: o.Rollouts, RPS: o.RPS}
	if o.Load.Shape == "" {
		o.Load = DefaultLoad().Scaled(o.TimeScale)
	}
	if err := o.Load.Validate(o.Scenario); err != nil {
		return rep, err
	}
	if err := o.ValidateRolloutPropagation(); err != nil {
		return rep, err
	}
	for _, d := range o.RolloutPropagationMax {
		// The scenario's bounds (how long a pod may stay in rotation)
		// cover the slowest rollout.
		o.Scenario.PropagationMax = max(o.Scenario.PropagationMax, time.Duration(float64(d)*o.TimeScale))
	}
	if err := o.ValidateRolloutRPS(); err != nil {
		return rep, err
	}
	if o.Scenario.LocalPolicy {
		if err := env.AddNode(ctx); err != nil {
			return rep, fmt.Errorf("local-policy: start the second node: %w", err)
		}
	}
	if o.Scenario.LocalPolicy && !o.Load.PreserveClientIP {
		// An NLB's instance targets keep their clients' addresses,
		// always; the Local policy is what keeps them to the pod.
		o.Load.PreserveClientIP = true
		localNotes = append(localNotes, "the load balancer keeps its clients' addresses (instance targets always do)")
	}
	rep.Load = o.Load.String()
	rep.Notes = append(rep.Notes, fmt.Sprintf("seed %d (repeat the random draws with --seed %d)", o.Seed, o.Seed))
	rep.Notes = append(rep.Notes, localNotes...)
	if o.TimeScale != 1 {
		rep.Notes = append(rep.Notes, fmt.Sprintf("time-scale %g: every scenario duration and sleep multiplied by %g, and the load's rate divided by it (%s)", o.TimeScale, o.TimeScale, o.loadRate()))
	}
	if UsesGate(o.Strategies) && env.HostIP == "" {
		return rep, errors.New("the draingate strategy needs Env.HostIP: its gate server, in a pod, must reach the ELBv2 emulator")
	}
	if o.Scenario.Sidecar && env.HostIP == "" {
		return rep, errors.New("the sidecar scenario needs Env.HostIP: the API server calls the lab's sidecar webhook there")
	}
	if err := lbc.InstallCRD(ctx, env.Config); err != nil {
		return rep, err
	}
	if o.Scenario.Sidecar {
		uninstall, err := sidecar.Install(ctx, env.Client, env.HostIP, sidecar.Options{Image: DemoImage, PullPolicy: corev1.PullNever})
		if err != nil {
			return rep, fmt.Errorf("the lab's sidecar webhook: %w", err)
		}
		defer func() {
			if err := uninstall(context.Background()); err != nil {
				rep.Notes = append(rep.Notes, fmt.Sprintf("removing the lab's sidecar webhook: %v", err))
			}
		}()
		rep.Notes = append(rep.Notes, "sidecar: a lab webhook called after draingate's added a proxy sidecar that receives the traffic and stops accepting on SIGTERM")
	}
	emu := elbv2sim.New(elbv2sim.Config{})
	defer emu.Close()
	var registration elbv2sim.BucketConfig // zero: AWS's
	if o.Scenario.RegistrationRefill > 0 {
		capacity := o.Scenario.RegistrationCapacity
		if capacity <= 0 {
			capacity = 1
		}
		registration = elbv2sim.BucketConfig{Capacity: capacity, RefillPerSecond: o.Scenario.RegistrationRefill}
		emu.SetThrottle(elbv2sim.BucketConfig{}, registration, elbv2sim.BucketConfig{})
	}
	if o.Chaos.Kind != "" {
		rep.Notes = append(rep.Notes, "chaos: "+o.Chaos.String())
	}
	listen := "127.0.0.1"
	if env.HostIP != "" {
		listen = env.HostIP
	}
	url, err := emu.Listen(net.JoinHostPort(listen, "0"))
	if err != nil {
		return rep, fmt.Errorf("ELBv2 emulator: %w", err)
	}
	elb := emu.Client()
	dyn, err := dynamic.NewForConfig(env.Config)
	if err != nil {
		return rep, err
	}
	r := &runner{env: env, o: o, emu: emu, emuURL: url, elb: elb, dyn: dyn, start: time.Now(), registration: registration}
	for i, st := range o.Strategies {
		res, err := r.strategy(ctx, i, st)
		if err != nil {
			return rep, fmt.Errorf("strategy %s: %w", st.Name, err)
		}
		rep.Strategies = append(rep.Strategies, res)
	}
	rep.Notes = append(rep.Notes, r.notes...)
	return rep, nil
}

type runner struct {
	env    Env
	o      Options
	emu    *elbv2sim.Server
	emuURL string
	elb    *elbv2.Client
	dyn    dynamic.Interface
	start  time.Time
	notes  []string
	// registration is the emulator's Registration bucket outside a storm.
	registration elbv2sim.BucketConfig
	// propMax is the current rollout's propagation maximum, scaled
	// (Options.RolloutPropagationMax).
	propMax atomic.Int64
}

func (r *runner) progress(st Strategy, format string, args ...any) {
	if r.o.Progress == nil {
		return
	}
	fmt.Fprintf(r.o.Progress, "lab [%5.0fs] %-10s %s\n", time.Since(r.start).Seconds(), st.Name, fmt.Sprintf(format, args...))
}

// strategy measures one strategy: its namespace (and, for a gate strategy,
// draingate), the target group, the load balancer's nodes and controller,
// the workload, then load through every rollout until the stopped pods are
// out of rotation. What it set up is torn down, in reverse, when it
// returns, error or not.
func (r *runner) strategy(ctx context.Context, idx int, st Strategy) (res report.Strategy, err error) {
	res.Name = st.Name
	sc := r.o.Scenario
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	// A run-unique name: an earlier run's namespace may still be terminating.
	ns := fmt.Sprintf("lab-%d-%s-%d", idx, strings.NewReplacer(":", "-", ".", "-").Replace(st.Name), r.start.Unix()%100000)
	gate, nsLabels, stopGate, err := r.gateFor(ctx, idx, st)
	defer stopGate()
	if err != nil {
		return res, err
	}
	cl := r.env.Client
	if _, err := cl.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: nsLabels}}, metav1.CreateOptions{}); err != nil {
		return res, err
	}
	defer func() {
		// Never leave a half-run strategy's objects behind.
		cl.CoreV1().Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{})
	}()
	if err := namespaceReady(ctx, cl, ns, gate != nil); err != nil {
		return res, err
	}

	var arn string
	var lb *loadBalancer
	if sc.Ingress {
		lb, err = r.ingressLB(idx, ns)
	} else {
		arn, lb, err = r.startDataPlane(idx)
	}
	if err != nil {
		return res, err
	}
	defer lb.close()

	// The load balancer controller for this namespace.
	ctrl := lbc.New(lbc.Config{Namespace: ns, ReconcileLag: sc.ReconcileLag, ReconcileJitter: sc.ReconcileJitter, GatePoll: time.Second, Seed: r.o.Seed + uint64(idx)}, cl, r.dyn, r.elb)
	ctrlDone := make(chan error, 1)
	go func() { ctrlDone <- ctrl.Run(ctx) }()
	defer func() { cancel(); <-ctrlDone }()

	pods := newTracker(cl, ns)
	if err := pods.run(ctx); err != nil {
		return res, err
	}
	p := &play{r: r, st: st, sc: sc, ns: ns, gate: gate, lb: lb, pods: pods}
	p.readyBy = 3*time.Minute + time.Duration(r.o.Replicas)*(sc.MaxRouteDelay()+time.Duration(sc.HealthyThreshold+1)*sc.HealthCheckInterval)
	r.progress(st, "setup: %s workload of %d, service, target group, binding, %d load balancer nodes", sc.Workload, r.o.Replicas, len(lb.nodes))
	if err := p.setup(ctx, arn); err != nil {
		return res, err
	}

	// Load, rollouts, and the wait for every stopped pod to be out of rotation.
	callsBefore, byBefore := r.emu.Calls(), r.emu.CallsBy()
	if err := r.underLoad(ctx, p, &res); err != nil {
		return res, err
	}
	r.measure(&res, pods, lb)
	if len(res.Rollouts) > 1 {
		for _, ro := range res.Rollouts {
			r.notes = append(r.notes, st.Name+": "+ro.RolloutLine())
		}
	}
	res.ELBv2Calls = diffCalls(callsBefore, r.emu.Calls())
	if st.Gate {
		r.noteGateCalls(st, &res, byBefore[gateAccessKey])
	}
	if res.NoTarget > 0 {
		r.progress(st, "done: %d requests, %d failed (%d answered by a load balancer node with no target in rotation)", res.Requests, res.Failed, res.NoTarget)
	} else {
		r.progress(st, "done: %d requests, %d failed", res.Requests, res.Failed)
	}
	return res, nil
}

// gateFor starts draingate for a gate strategy, installed with its chart in
// its own run-unique namespace, and returns the labels of the app's
// namespace: for injection then, and for the lab's sidecar in a sidecar
// scenario. stop, never nil, uninstalls draingate (it does nothing for
// another strategy); the caller defers it at once, error or not.
func (r *runner) gateFor(ctx context.Context, idx int, st Strategy) (gate *gateSetup, nsLabels map[string]string, stop func(), err error) {
	nsLabels = map[string]string{}
	if r.o.Scenario.Sidecar {
		nsLabels[sidecar.Label] = sidecar.Enabled
	}
	if !st.Gate {
		return nil, nsLabels, func() {}, nil
	}
	gns := fmt.Sprintf("lab-%d-draingate-sys-%d", idx, r.start.Unix()%100000)
	r.progress(st, "setup: gate server in namespace %s", gns)
	gate, stop, err = r.startGate(ctx, gns, st)
	if err != nil {
		return nil, nsLabels, stop, err
	}
	nsLabels[api.LabelInject] = api.Enabled
	r.progress(st, "gate server ready; agent max-wait %s", gate.MaxWait)
	r.notes = append(r.notes, fmt.Sprintf("%s: the chart's defaults in namespace %s; the lab set %s", st.Name, gns, strings.Join(gate.Set, ", ")))
	return gate, nsLabels, stop, nil
}

// namespaceReady waits until the new namespace ns can take the workload:
// its default ServiceAccount exists and, with a gate, draingate's webhook
// injects its pods.
func namespaceReady(ctx context.Context, cl kubernetes.Interface, ns string, gate bool) error {
	if err := waitFor(ctx, 30*time.Second, func() bool {
		_, err := cl.CoreV1().ServiceAccounts(ns).Get(ctx, "default", metav1.GetOptions{})
		return err == nil
	}); err != nil {
		return fmt.Errorf("namespace %s never got its default ServiceAccount", ns)
	}
	if gate {
		return chart.WaitInjecting(ctx, cl, ns, gateReadyBy)
	}
	return nil
}

// startDataPlane creates the strategy's target group in the emulator and
// the load balancer's nodes that learn from it; the caller defers the load
// balancer's close.
func (r *runner) startDataPlane(idx int) (arn string, lb *loadBalancer, err error) {
	sc := r.o.Scenario
	arn, err = r.emu.CreateTargetGroup(elbv2sim.TargetGroupSpec{
		Name: fmt.Sprintf("lab-%d-%d", idx, time.Now().Unix()%100000), LoadBalancerType: sc.lbType(), Port: appPort, TargetType: sc.targetType(),
		HealthCheckPath: "/healthz", HealthCheckInterval: sc.HealthCheckInterval, HealthCheckTimeout: min(2*time.Second, sc.HealthCheckInterval),
		HealthyThreshold: sc.HealthyThreshold, UnhealthyThreshold: 2,
		DeregistrationDelay: max(sc.DeregistrationDelay, time.Millisecond),
		PreserveClientIP:    r.o.Load.PreserveClientIP,
	})
	if err != nil {
		return "", nil, err
	}
	lb, err = r.startLB(idx, arn)
	if err != nil {
		return "", nil, err
	}
	return arn, lb, nil
}

// underLoad sends the load through p's load balancer while the rollouts
// stop pods, until every stopped pod is out of rotation, and fills in res
// what the load counted. The load stops before it returns, error or not.
func (r *runner) underLoad(ctx context.Context, p *play, res *report.Strategy) error {
	st := p.st
	var ic *inCluster
	if r.o.Load.InClusterRPS > 0 {
		var err error
		if ic, err = r.startInCluster(ctx, p.ns); err != nil {
			return err
		}
		r.progress(st, "in-cluster client: %d requests/s at full scale through the Service's ClusterIP", r.o.Load.InClusterRPS)
	}
	res.Timeline.Start = time.Now()
	spec := r.o.Load
	if lb := p.lb; lb.extra >= 0 {
		spec.active = func(i int) bool { return i != lb.extra || lb.joined.Load() }
	}
	l := startTraffic(spec, p.lb.urls, r.clientSources(), r.o.RPS, r.o.loadPer(), r.o.Seed, res.Timeline.AddRequest)
	loadStopped := false
	defer func() {
		if !loadStopped {
			l.stop()
		}
	}()
	r.progress(st, "load: %s, %s, through %d load balancer nodes", r.o.Load, r.o.loadRate(), len(p.lb.nodes))
	time.Sleep(2 * time.Second) // a steady state before the first rollout
	if err := r.rollouts(ctx, p, res, l); err != nil {
		return err
	}
	r.progress(st, "%s done; waiting for stopped pods to exit and leave the data plane", r.o.Scenario.Workload)
	if err := p.settle(ctx); err != nil {
		return err
	}
	time.Sleep(time.Second)
	res.Requests, res.Failed = l.stop()
	loadStopped = true
	if r.o.Load.Shape == Stream {
		r.notes = append(r.notes, fmt.Sprintf("%s: streams: %s", st.Name, l.statuses()))
	}
	res.Timeline.End = time.Now()
	if ic != nil {
		n, err := ic.counts(ctx)
		if err != nil {
			return err
		}
		res.InClusterRequests, res.InClusterFailed = int(n.Requests), int(n.Failed)
		note := fmt.Sprintf("%s: in-cluster client (%d requests/s at full scale, through the Service's ClusterIP): %d requests, %d failed", st.Name, r.o.Load.InClusterRPS, n.Requests, n.Failed)
		if len(n.Errors) > 0 {
			note += " (" + strings.Join(n.Errors, "; ") + ")"
		}
		r.notes = append(r.notes, note)
	}
	ds := r.checkCounts(st, res, p.lb, l)
	res.NoTarget = int(ds.NoTarget)
	if len(ds.Causes) > 0 {
		causes := make([]string, 0, len(ds.Causes))
		for _, c := range slices.Sorted(maps.Keys(ds.Causes)) {
			causes = append(causes, fmt.Sprintf("%s=%d", c, ds.Causes[c]))
		}
		r.notes = append(r.notes, fmt.Sprintf("%s: the load balancer's own error answers by cause: %s", st.Name, strings.Join(causes, ", ")))
	}
	p.lb.mu.Lock()
	if len(p.lb.failedChecks) > 0 {
		r.notes = append(r.notes, fmt.Sprintf("%s: targets that failed their health checks under load: %s", st.Name, strings.Join(p.lb.failedChecks, "; ")))
	}
	p.lb.mu.Unlock()
	if p.lb.ing != nil {
		if n := p.lb.ing.unanswered(); n > 0 {
			r.notes = append(r.notes, fmt.Sprintf("%s: the ingress closed %d client connections instead of answering (its log: 503, no byte sent; a connect to a pod gone timed out): the clients sent those GETs again on new connections, counted once", st.Name, n))
		}
	}
	return nil
}

// rollouts makes the pods stop r.o.Rollouts times, each under the run's
// chaos if it has one; a fault is over before the next rollout starts, and
// what it did goes to res.Chaos.
func (r *runner) rollouts(ctx context.Context, p *play, res *report.Strategy, l traffic) error {
	st := p.st
	stopScale := func() {}
	defer func() { stopScale() }()
	for i := 1; i <= r.o.Rollouts; i++ {
		rps := r.o.RPS
		if len(r.o.RolloutRPS) >= i {
			rps = r.o.RolloutRPS[i-1]
			if i > 1 && rps != r.o.RolloutRPS[i-2] && !r.o.RateMidDrain {
				// Each rollout's pods drain at its own rate: a rollout
				// ends when its last pod is deleted, and its drains go on
				// after it (a busy day's rollout, a quiet night's).
				r.progress(st, "waiting for rollout %d's stopped pods to exit and leave the data plane before the rate changes", i-1)
				if err := p.settle(ctx); err != nil {
					return err
				}
			}
			l.scale(float64(rps) / float64(r.o.RPS))
		}
		ro := report.Rollout{Index: i, RPS: rps, Start: time.Now()}
		if n := len(r.o.RolloutPropagationMax); n > 0 {
			d := time.Duration(float64(r.o.RolloutPropagationMax[min(i, n)-1]) * r.o.TimeScale)
			r.propMax.Store(int64(d))
			ro.PropagationMax = d
		}
		res.Rollouts = append(res.Rollouts, ro)
		r.progress(st, "%s %d/%d, %d requests/s at full scale", r.o.Scenario.Workload, i, r.o.Rollouts, rps)
		if sc := r.o.Scenario; sc.LBScaleOut > 0 {
			// The previous rollout's node leaves (if it joined), and
			// joins again LBScaleOut into this one.
			stopScale()
			if err := r.scale(p.lb, false); err != nil {
				return err
			}
			sctx, cancel := context.WithCancel(ctx)
			stopScale = cancel
			go func() {
				select {
				case <-sctx.Done():
				case <-time.After(sc.LBScaleOut):
					if err := r.scale(p.lb, true); err != nil {
						r.progress(st, "scale-out: %v", err)
						return
					}
					r.progress(st, "scale-out: load balancer node %s joined", p.lb.nodes[p.lb.extra].Name())
				}
			}()
		}
		chaosDone := make(chan error, 1)
		if r.o.Chaos.Kind != "" {
			go func() {
				chaosDone <- r.chaos(ctx, st, p.gate, func(s string) {
					r.progress(st, "chaos: %s", s)
					res.Chaos = append(res.Chaos, fmt.Sprintf("rollout %d: %s", i, s))
				})
			}()
		} else {
			chaosDone <- nil
		}
		err := p.step(ctx, i)
		// The fault is over before the next rollout or the settling.
		if cerr := <-chaosDone; cerr != nil && err == nil {
			err = fmt.Errorf("chaos %s: %w", r.o.Chaos.Kind, cerr)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// checkCounts is the lab's own consistency check, once the load l has
// stopped: every request went through the data plane, so both sides must
// count the same, else a MISMATCH note says where they differ. It returns
// the data plane's counts.
func (r *runner) checkCounts(st Strategy, res *report.Strategy, lb *loadBalancer, l traffic) dataplane.Stats {
	// A node records a request once its answer is written, which the
	// client may read first: give the last ones a moment.
	requests, failed := l.routed()
	ds := lb.bal.Stats()
	for wait := time.Now().Add(2 * time.Second); int(ds.Total) < requests && time.Now().Before(wait); ds = lb.bal.Stats() {
		time.Sleep(20 * time.Millisecond)
	}
	if int(ds.Total) != requests || int(ds.Failed) != failed {
		// Both sides' answers by status, so that a mismatch says where
		// the two differ.
		byStatus := make([]string, 0, len(ds.ByStatus))
		for _, c := range slices.Sorted(maps.Keys(ds.ByStatus)) {
			byStatus = append(byStatus, fmt.Sprintf("%d=%d", c, ds.ByStatus[c]))
		}
		r.notes = append(r.notes, fmt.Sprintf("%s: MISMATCH: the load generator counted %d requests, %d failed; the data plane %d and %d (load generator: %s; data plane: %s, %d cut off mid-body)",
			st.Name, requests, failed, ds.Total, ds.Failed, l.statuses(), strings.Join(byStatus, " "), ds.Aborted))
	}
	return ds
}

// noteGateCalls puts in res the ELBv2 calls draingate's gate server made
// during the load, counted from before (the emulator's per-key counts when
// the load started), and notes their rate.
func (r *runner) noteGateCalls(st Strategy, res *report.Strategy, before map[string]int) {
	res.GateELBv2Calls = diffCounts(before, r.emu.CallsBy()[gateAccessKey])
	n := 0
	for _, c := range res.GateELBv2Calls {
		n += c
	}
	span := res.Timeline.End.Sub(res.Timeline.Start).Seconds()
	r.notes = append(r.notes, fmt.Sprintf("%s: draingate made %d ELBv2 calls in the %.0f s of load (%.2f/s, every replica together; throttled ones included)", st.Name, n, span, float64(n)/span))
}

// measure fills res with every stopped pod: deleted, or restarted.
func (r *runner) measure(res *report.Strategy, pods *tracker, lb *loadBalancer) {
	for _, p := range pods.snapshot() {
		if p.deletedAt.IsZero() && p.restarted.IsZero() {
			continue
		}
		if p.logLost && p.exit.IsZero() {
			r.notes = append(r.notes, fmt.Sprintf("%s: pod %s was gone before its log could be read to the end (its stream was cut, e.g. by an API server outage): its exit is not measured", res.Name, p.name))
		}
		if !p.deletedAt.IsZero() && !p.exit.IsZero() {
			res.Terminations = append(res.Terminations, p.exit.Sub(p.deletedAt))
		}
		if !p.restarted.IsZero() && !p.failedProbe.IsZero() {
			res.Restarts = append(res.Restarts, p.restarted.Sub(p.failedProbe))
		}
		if p.release != "" {
			if res.Releases == nil {
				res.Releases = map[string]int{}
			}
			res.Releases[p.release]++
		}
		target := dataplane.Target{ID: p.ip, Port: appPort}
		if !p.sigterm.IsZero() {
			res.Timeline.SIGTERMs = append(res.Timeline.SIGTERMs, p.sigterm)
			if at, ok := lb.bal.StoppedAt(target); ok {
				res.Slacks = append(res.Slacks, p.sigterm.Sub(at))
			}
		}
		rp := report.Pod{
			Name: p.name, IP: p.ip, Deleted: p.deletedAt, FailedProbe: p.failedProbe, Restarted: p.restarted,
			SIGTERM: p.sigterm, Exit: p.exit, Release: p.release, ReleasedAt: p.releasedAt, Closes: p.closes, AgentLines: p.agentLines,
			Draining: lb.draining(p.ip), Nodes: map[string]report.PodNode{}, Sources: p.sources, MaxWaitSized: p.sized,
		}
		for _, n := range lb.bal.Nodes() {
			var pn report.PodNode
			pn.LastRequest = n.Stats().ByTarget[target].Last
			pn.RouteOut, _ = n.StoppedAt(target)
			if !p.sigterm.IsZero() {
				pn.AfterSIGTERM = n.SentSince(target, p.sigterm)
			}
			rp.Nodes[n.Name()] = pn
		}
		res.Pods = append(res.Pods, rp)
	}
	slices.SortFunc(res.Pods, func(a, b report.Pod) int {
		return cmp.Or(a.SIGTERM.Compare(b.SIGTERM), strings.Compare(a.Name, b.Name))
	})
	res.Timeline.Rotation = rotationSteps(lb.bal)
	res.FillRollouts()
}

// ValidateRolloutPropagation checks --rollout-propagation-max: one
// maximum per rollout, for a uniform propagation, none below its minimum.
func (o Options) ValidateRolloutPropagation() error {
	switch n := len(o.RolloutPropagationMax); {
	case n == 0:
		return nil
	case n != o.Rollouts:
		return fmt.Errorf("--rollout-propagation-max has %d maxima for %d rollouts: give one per rollout", n, o.Rollouts)
	case o.Scenario.Propagation != Uniform:
		return fmt.Errorf("--rollout-propagation-max sets a uniform propagation's maximum: not with --propagation %s", o.Scenario.Propagation)
	}
	for _, d := range o.RolloutPropagationMax {
		if s := time.Duration(float64(d) * o.TimeScale); s < o.Scenario.PropagationMin {
			return fmt.Errorf("--rollout-propagation-max %s is below the propagation's minimum", d)
		}
	}
	return nil
}

// ValidateRolloutRPS checks --rollout-rps: one rate per rollout, each at
// least 1, its first the run's RPS, and a load whose rate can change.
func (o Options) ValidateRolloutRPS() error {
	switch {
	case len(o.RolloutRPS) == 0 && o.RateMidDrain:
		return errors.New("--rate-mid-drain changes the rate between rollouts: give --rollout-rps too")
	case len(o.RolloutRPS) == 0:
		return nil
	case len(o.RolloutRPS) != o.Rollouts:
		return fmt.Errorf("--rollout-rps has %d rates for %d rollouts: give one per rollout", len(o.RolloutRPS), o.Rollouts)
	case o.RolloutRPS[0] != o.RPS:
		return fmt.Errorf("--rollout-rps starts at %d requests/s but the load starts at --rps %d", o.RolloutRPS[0], o.RPS)
	case o.Load.Shape == Stream:
		return errors.New("--rollout-rps: the stream load keeps its rate; use another --load")
	}
	for _, n := range o.RolloutRPS {
		if n < 1 {
			return fmt.Errorf("--rollout-rps: %d requests/s: each rate must be at least 1", n)
		}
	}
	return nil
}

func throttled(sc Scenario) bool { return sc.RegistrationRefill > 0 }

// diffCounts is after − before per key, keeping positive differences.
func diffCounts(before, after map[string]int) map[string]int {
	out := map[string]int{}
	for k, n := range after {
		if d := n - before[k]; d > 0 {
			out[k] = d
		}
	}
	return out
}

func diffCalls(before, after map[string]map[string]int) map[string]int {
	out := map[string]int{}
	for action, results := range after {
		for result, n := range results {
			if d := n - before[action][result]; d > 0 {
				out[action] += d
			}
		}
	}
	return out
}

// waitRollout waits until the Deployment has rolled out completely: every
// replica updated, ready and available, and no old replica left.
func (r *runner) waitRollout(ctx context.Context, ns, name string, timeout time.Duration) error {
	return waitFor(ctx, timeout, func() bool {
		d, err := r.env.Client.AppsV1().Deployments(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false
		}
		want := *d.Spec.Replicas
		s := d.Status
		return s.ObservedGeneration >= d.Generation && s.UpdatedReplicas == want && s.ReadyReplicas == want &&
			s.AvailableReplicas == want && s.Replicas == want
	})
}

var errTimeout = errors.New("timed out")

func waitFor(ctx context.Context, timeout time.Duration, cond func() bool) error {
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			return fmt.Errorf("%w after %s", errTimeout, timeout.Round(time.Second))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
	return nil
}

// ScaleStrategies multiplies every sleep by f, rounding up to whole seconds
// as the native sleep action takes them. The gate's tails are scaled at run
// time from Options.TimeScale.
func ScaleStrategies(sts []Strategy, f float64) []Strategy {
	out := append([]Strategy(nil), sts...)
	for i := range out {
		if out[i].Sleep > 0 {
			out[i].Sleep = time.Duration(math.Ceil(out[i].Sleep.Seconds()*f)) * time.Second
		}
	}
	return out
}

// injected checks that draingate's webhook gave every running pod of ns the
// agent: a pod admitted while the webhook failed open would measure the
// strategy none under the name draingate.
func injected(ctx context.Context, cl kubernetes.Interface, ns string) error {
	pods, err := cl.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=" + appName})
	if err != nil {
		return err
	}
	for _, p := range pods.Items {
		if p.DeletionTimestamp == nil && p.Annotations[api.AnnotationInjected] == "" {
			return fmt.Errorf("pod %s/%s was not injected with the agent (no %s annotation): the webhook failed open or refused it; see the API server log and the pod's events",
				ns, p.Name, api.AnnotationInjected)
		}
	}
	return nil
}
