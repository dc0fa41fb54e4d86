package scale

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	mrand "math/rand/v2"
	"net/http"
	"net/netip"
	"slices"
	"sort"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"draingate.dev/draingate/proving/sim/elbv2sim"
	"draingate.dev/draingate/proving/sim/lbc"
)

// Config is one cell of the benchmark.
type Config struct {
	Pods, Waiters int
	// Services is how many Services the pods are spread over (default
	// 200), PerNamespace how many share a namespace (default 10), and
	// every TargetGroupEvery-th Service has a target group (default 5).
	Services, PerNamespace, TargetGroupEvery int
	// Steady is how long the run measures while every agent waits
	// (default 20 s); SampleEvery the time between two answer-latency
	// samples (default 20 ms); ReleaseTimeout the longest it waits for
	// the releases after the route change (default 5 min).
	Steady, SampleEvery, ReleaseTimeout time.Duration
	// Seed picks the waiting pods.
	Seed uint64
	// ServerEnv is added to the server's environment (e.g. GOGC=50,
	// GOMEMLIMIT=100MiB), for sizing experiments.
	ServerEnv []string
}

func (c *Config) fill() error {
	if c.Pods < 1 || c.Waiters < 1 || c.Waiters > c.Pods {
		return fmt.Errorf("want at least one pod and between 1 and %d waiters, got %d pods and %d waiters", c.Pods, c.Pods, c.Waiters)
	}
	if c.Pods > 1<<20 {
		return fmt.Errorf("at most %d pods (their addresses come from 100.64.0.0/10)", 1<<20)
	}
	if c.Waiters > 60000 {
		return errors.New("at most 60000 waiters (one loopback address each)")
	}
	c.Services = cmpOr(c.Services, 200)
	c.PerNamespace = cmpOr(c.PerNamespace, 10)
	c.TargetGroupEvery = cmpOr(c.TargetGroupEvery, 5)
	c.Services = min(c.Services, c.Pods)
	if c.Steady == 0 {
		c.Steady = 20 * time.Second
	}
	if c.SampleEvery == 0 {
		c.SampleEvery = 20 * time.Millisecond
	}
	if c.ReleaseTimeout == 0 {
		c.ReleaseTimeout = 5 * time.Minute
	}
	return nil
}

func cmpOr(v, d int) int {
	if v > 0 {
		return v
	}
	return d
}

// Env is where a run happens.
type Env struct {
	Config     *rest.Config
	Kubeconfig string
	// Server is the draingate binary; Dir gets its log.
	Server, Dir string
	Progress    io.Writer
}

// Result is one cell's figures.
type Result struct {
	Pods, Waiters, Services, TargetGroups, Namespaces int
	// ServerEnv is what Config.ServerEnv added to the server's environment.
	ServerEnv []string `json:",omitempty"`

	// RSS is the server's resident memory at the end of the steady
	// window, PeakRSS its high-water mark over the whole run (the initial
	// lists included), HeapInuse the Go heap in use then (its own
	// go_memstats_heap_inuse_bytes).
	RSS, PeakRSS, HeapInuse uint64
	// StackInuse is the goroutine stacks' memory then.
	StackInuse uint64
	// HeapProfile is the server's heap profile then (go tool pprof).
	HeapProfile string `json:",omitempty"`
	// CPU is the cores the server used on average over the steady window.
	CPU float64
	// Ready is how long the server took from its start to ready.
	Ready time.Duration

	// Answers are wait=0 asks about waiting pods during the steady
	// window, and their latency.
	Answers              int
	AnswerP50, AnswerP99 time.Duration

	// Releases: from the pod's last route change to the release answered
	// to its agent. Early counts releases before that change (a bug),
	// Unreleased the agents still waiting at ReleaseTimeout.
	Released, Early, Unreleased        int
	ReleaseP50, ReleaseP99, ReleaseMax time.Duration
	// Behind a target group, the release waits for a poll of the group
	// (the AWS budget decides how often); the others only for the
	// EndpointSlice's watch event. TargetGroupReleased counts the former.
	TargetGroupReleased                 int
	TargetGroupReleaseP50, SliceOnlyP50 time.Duration
	TargetGroupReleaseP99, SliceOnlyP99 time.Duration
	// EarlyVerdicts are the messages of a few early releases.
	EarlyVerdicts []string `json:",omitempty"`

	// DescribePerSecond is the server's DescribeTargetHealth calls per
	// second over the steady window, DescribeBudget what its --aws-rate
	// allows; OtherCalls counts its other ELBv2 calls over the whole run.
	DescribePerSecond, DescribeBudget float64
	// Window is the steady window's length.
	Window     time.Duration
	OtherCalls int
	// AgentErrors counts the agents' asks answered with anything but 200.
	AgentErrors int
	// LeaseWrites counts the server's writes of the shared route memory
	// (a Lease per waiting pod, in the run's first namespace), every
	// waiter released: creates and updates, conflicts and errors included.
	LeaseWrites int
}

// serverRate is the --aws-rate the run gives its one server, and the
// budget it checks the Describe rate against: 2/s, the chart's total at
// its defaults (aws.rate 1/s on each of 2 replicas), so that one server
// stands for the whole install.
const serverRate = 2

// run is one cell's state.
type run struct {
	env  Env
	cfg  Config
	kube kubernetes.Interface
	dyn  dynamic.Interface
	id   string
	emu  *elbv2sim.Server
	// emuURL is where the emulator listens.
	emuURL string

	pods       []podInfo
	namespaces []string
	arns       map[int]string // service index → target group ARN
	slices     map[string]*discoveryv1.EndpointSlice
	waiters    []int // pod indices
}

type podInfo struct {
	ns, name, ip string
	uid          types.UID
	svc          int
	slice        string
}

const (
	nodeName  = "draingate-scale"
	nodeIP    = "100.127.255.254"
	finalizer = "scale.draingate.dev/hold"
	// proxyName keeps the host's kube-proxy away from the run's Services
	// and EndpointSlices (it ignores those carrying this label).
	proxyNameLabel = "service.kubernetes.io/service-proxy-name"
	managedBy      = "scale.draingate.dev"
	// accessKey is the server's AWS access key ID: the emulator counts
	// calls per key.
	accessKey = "draingate-scale-server"
	sliceMax  = 100
)

func (r *run) progress(format string, args ...any) {
	if r.env.Progress != nil {
		fmt.Fprintf(r.env.Progress, "scale %d pods, %d waiters: "+format+"\n", append([]any{r.cfg.Pods, r.cfg.Waiters}, args...)...)
	}
}

// Run measures one cell; see the package comment.
func Run(ctx context.Context, env Env, cfg Config) (res Result, err error) {
	if err := cfg.fill(); err != nil {
		return Result{}, err
	}
	conf := rest.CopyConfig(env.Config)
	conf.QPS, conf.Burst = 1000, 2000
	kube, err := kubernetes.NewForConfig(conf)
	if err != nil {
		return Result{}, err
	}
	dyn, err := dynamic.NewForConfig(conf)
	if err != nil {
		return Result{}, err
	}
	b := make([]byte, 3)
	rand.Read(b)
	r := &run{env: env, cfg: cfg, kube: kube, dyn: dyn, id: hex.EncodeToString(b), arns: map[int]string{}, slices: map[string]*discoveryv1.EndpointSlice{}}
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Minute)
		defer cancel()
		if cerr := r.cleanup(cctx); cerr != nil {
			err = errors.Join(err, fmt.Errorf("clean up: %w", cerr))
		}
	}()
	start := time.Now()
	if err := r.setup(ctx); err != nil {
		return Result{}, err
	}
	r.progress("cluster objects written in %s", time.Since(start).Round(time.Second))
	return r.measure(ctx)
}

// setup writes the Node, namespaces, Services, target groups and their
// bindings, the pods with their addresses, and the EndpointSlices.
func (r *run) setup(ctx context.Context) error {
	r.emu = elbv2sim.New(elbv2sim.Config{HTTPClient: &http.Client{Transport: healthy{}}})
	url, err := r.emu.Listen("127.0.0.1:0")
	if err != nil {
		return err
	}
	r.emuURL = url
	if err := lbc.InstallCRD(ctx, r.env.Config); err != nil {
		return err
	}
	if err := r.ensureNode(ctx); err != nil {
		return err
	}
	if err := r.createNamespaces(ctx); err != nil {
		return err
	}
	if err := r.createServices(ctx); err != nil {
		return err
	}
	if err := r.bindTargetGroups(ctx); err != nil {
		return err
	}
	if err := r.createPods(ctx); err != nil {
		return err
	}
	if err := r.writeSlices(ctx); err != nil {
		return err
	}
	if err := r.registerTargets(); err != nil {
		return err
	}
	rng := mrand.New(mrand.NewPCG(r.cfg.Seed, 0x5ca1e))
	r.waiters = rng.Perm(r.cfg.Pods)[:r.cfg.Waiters]
	sort.Ints(r.waiters)
	return nil
}

// createNamespaces creates the run's namespaces, one per PerNamespace
// Services, and waits until each has its default ServiceAccount.
func (r *run) createNamespaces(ctx context.Context) error {
	cfg := r.cfg
	nsCount := (cfg.Services + cfg.PerNamespace - 1) / cfg.PerNamespace
	for i := range nsCount {
		ns := fmt.Sprintf("scale-%s-%d", r.id, i)
		if _, err := r.kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			return err
		}
		r.namespaces = append(r.namespaces, ns)
	}
	// Every namespace gets its default ServiceAccount from the
	// controller manager; pods are refused until it exists.
	for _, ns := range r.namespaces {
		if err := poll(ctx, time.Minute, func() bool {
			_, err := r.kube.CoreV1().ServiceAccounts(ns).Get(ctx, "default", metav1.GetOptions{})
			return err == nil
		}); err != nil {
			return fmt.Errorf("namespace %s has no default ServiceAccount: %w", ns, err)
		}
	}
	return nil
}

// createServices creates the Services, each on port 80 to the pods' 8080.
func (r *run) createServices(ctx context.Context) error {
	return parallel(ctx, r.cfg.Services, func(ctx context.Context, s int) error {
		ns, name := r.serviceRef(s)
		labels := map[string]string{proxyNameLabel: nodeName}
		if _, err := r.kube.CoreV1().Services(ns).Create(ctx, &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
			Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080)}}},
		}, metav1.CreateOptions{}); err != nil {
			return err
		}
		return nil
	})
}

// bindTargetGroups gives every TargetGroupEvery-th Service a target group
// in the emulator and a TargetGroupBinding to it; r.arns records the
// target groups.
func (r *run) bindTargetGroups(ctx context.Context) error {
	for s := 0; s < r.cfg.Services; s += r.cfg.TargetGroupEvery {
		arn, err := r.emu.CreateTargetGroup(elbv2sim.TargetGroupSpec{
			Name: fmt.Sprintf("s-%s-%d", r.id, s), LoadBalancerType: elbv2sim.Application, Port: 8080, TargetType: "ip",
			// Checks answer 200 without a network (healthy); slow ones
			// keep the emulator's work small.
			HealthCheckInterval: 30 * time.Second, DeregistrationDelay: time.Hour,
		})
		if err != nil {
			return err
		}
		r.arns[s] = arn
		ns, name := r.serviceRef(s)
		b := lbc.Binding{Namespace: ns, Name: name, TargetGroupARN: arn, TargetType: "ip", ServiceName: name, ServicePort: intstr.FromString("http")}
		if _, err := r.dyn.Resource(lbc.GVR).Namespace(ns).Create(ctx, b.Object(), metav1.CreateOptions{}); err != nil {
			return err
		}
	}
	return nil
}

// createPods creates the run's pods in parallel, saying every 2000.
func (r *run) createPods(ctx context.Context) error {
	r.pods = make([]podInfo, r.cfg.Pods)
	var done int64
	var mu sync.Mutex
	return parallel(ctx, r.cfg.Pods, func(ctx context.Context, i int) error {
		if err := r.createPod(ctx, i); err != nil {
			return err
		}
		mu.Lock()
		done++
		if done%2000 == 0 {
			r.progress("%d pods written", done)
		}
		mu.Unlock()
		return nil
	})
}

// registerTargets registers in each target group the pods of its Service.
func (r *run) registerTargets() error {
	for s, arn := range r.arns {
		var ts []elbv2sim.Target
		for _, p := range r.pods {
			if p.svc == s {
				ts = append(ts, elbv2sim.Target{ID: p.ip, Port: 8080})
			}
		}
		if err := r.emu.RegisterTargets(arn, ts...); err != nil {
			return err
		}
	}
	return nil
}

func (r *run) serviceRef(s int) (ns, name string) {
	return r.namespaces[s/r.cfg.PerNamespace], fmt.Sprintf("svc-%d", s)
}

// podAddr is the i-th pod's address in 100.64.0.0/10 (shared address
// space: neither this host's nor the cluster's).
func podAddr(i int) string {
	return netip.AddrFrom4([4]byte{100, 64 + byte(i>>16), byte(i >> 8), byte(i)}).String()
}

// ensureNode creates the Node the pods are bound to. It has no kubelet: the
// node controller soon marks it unreachable, which the pods tolerate.
func (r *run) ensureNode(ctx context.Context) error {
	_, err := r.kube.CoreV1().Nodes().Create(ctx, &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: nodeName, Labels: map[string]string{"app.kubernetes.io/managed-by": managedBy}},
		Spec:       corev1.NodeSpec{Taints: []corev1.Taint{{Key: managedBy + "/no-kubelet", Effect: corev1.TaintEffectNoSchedule}}},
	}, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		return nil
	}
	return err
}

func (r *run) createPod(ctx context.Context, i int) error {
	s := i % r.cfg.Services
	ns, svc := r.serviceRef(s)
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("p-%d", i), Labels: map[string]string{"app": svc}},
		Spec: corev1.PodSpec{
			NodeName: nodeName,
			// Long enough that no deadline releases a waiter during a run.
			TerminationGracePeriodSeconds: ptr.To[int64](3600),
			Containers:                    []corev1.Container{{Name: "app", Image: "scale.invalid/none", Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}}}},
			Tolerations: []corev1.Toleration{
				{Key: corev1.TaintNodeUnreachable, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute},
				{Key: corev1.TaintNodeNotReady, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute},
			},
		},
	}
	created, err := r.kube.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{})
	if err != nil {
		return err
	}
	ip := podAddr(i)
	// No Ready condition: the node controller would flip it when the Node
	// turns unreachable (thousands of writes the server would see).
	created.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: ip, PodIPs: []corev1.PodIP{{IP: ip}},
		HostIP: nodeIP, HostIPs: []corev1.HostIP{{IP: nodeIP}}}
	if _, err := r.kube.CoreV1().Pods(ns).UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
		return err
	}
	r.pods[i] = podInfo{ns: ns, name: created.Name, ip: ip, uid: created.UID, svc: s}
	return nil
}

// writeSlices writes each Service's EndpointSlices, sliceMax endpoints
// each, every pod ready.
func (r *run) writeSlices(ctx context.Context) error {
	bySvc := map[int][]int{}
	for i, p := range r.pods {
		bySvc[p.svc] = append(bySvc[p.svc], i)
	}
	var list []*discoveryv1.EndpointSlice
	for s := range r.cfg.Services {
		ns, svc := r.serviceRef(s)
		for k := 0; k < len(bySvc[s]); k += sliceMax {
			sl := &discoveryv1.EndpointSlice{
				ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("%s-%d", svc, k/sliceMax), Labels: map[string]string{
					discoveryv1.LabelServiceName: svc, discoveryv1.LabelManagedBy: managedBy, proxyNameLabel: nodeName,
				}},
				AddressType: discoveryv1.AddressTypeIPv4,
				Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("http"), Port: ptr.To[int32](8080), Protocol: ptr.To(corev1.ProtocolTCP)}},
			}
			for _, i := range bySvc[s][k:min(k+sliceMax, len(bySvc[s]))] {
				p := &r.pods[i]
				p.slice = sl.Name
				sl.Endpoints = append(sl.Endpoints, discoveryv1.Endpoint{
					Addresses:  []string{p.ip},
					Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true), Serving: ptr.To(true), Terminating: ptr.To(false)},
					NodeName:   ptr.To(nodeName),
					TargetRef:  &corev1.ObjectReference{Kind: "Pod", Namespace: ns, Name: p.name, UID: p.uid},
				})
			}
			list = append(list, sl)
		}
	}
	var mu sync.Mutex
	return parallel(ctx, len(list), func(ctx context.Context, i int) error {
		out, err := r.kube.DiscoveryV1().EndpointSlices(list[i].Namespace).Create(ctx, list[i], metav1.CreateOptions{})
		if err != nil {
			return err
		}
		mu.Lock()
		r.slices[out.Namespace+"/"+out.Name] = out
		mu.Unlock()
		return nil
	})
}

// deleteWaiters holds each waiting pod with the run's finalizer and
// deletes it: it stays terminating, as under a kubelet running its
// preStop hook.
func (r *run) deleteWaiters(ctx context.Context) error {
	return parallel(ctx, len(r.waiters), func(ctx context.Context, k int) error {
		p := r.pods[r.waiters[k]]
		patch := fmt.Appendf(nil, `{"metadata":{"finalizers":[%q]}}`, finalizer)
		if _, err := r.kube.CoreV1().Pods(p.ns).Patch(ctx, p.name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			return err
		}
		return r.kube.CoreV1().Pods(p.ns).Delete(ctx, p.name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &p.uid}})
	})
}

// changeRoutes takes every waiting pod out of its routes, as its Service's
// controllers would: its target deregistered (draining), then its
// endpoint dropped from its EndpointSlice. It returns when each pod's
// last change was asked for.
func (r *run) changeRoutes(ctx context.Context) (map[int]time.Time, error) {
	byGroup := map[string][]elbv2sim.Target{}
	bySlice := map[string][]int{}
	for _, i := range r.waiters {
		p := r.pods[i]
		if arn, ok := r.arns[p.svc]; ok {
			byGroup[arn] = append(byGroup[arn], elbv2sim.Target{ID: p.ip, Port: 8080})
		}
		bySlice[p.ns+"/"+p.slice] = append(bySlice[p.ns+"/"+p.slice], i)
	}
	for arn, ts := range byGroup {
		if err := r.emu.DeregisterTargets(arn, ts...); err != nil {
			return nil, err
		}
	}
	keys := slices.Sorted(maps.Keys(bySlice))
	changed := map[int]time.Time{}
	var mu sync.Mutex
	err := parallel(ctx, len(keys), func(ctx context.Context, k int) error {
		sl := r.slices[keys[k]].DeepCopy()
		gone := map[string]bool{}
		for _, i := range bySlice[keys[k]] {
			gone[r.pods[i].ip] = true
		}
		sl.Endpoints = slices.DeleteFunc(sl.Endpoints, func(e discoveryv1.Endpoint) bool { return gone[e.Addresses[0]] })
		// The change counts from the request: the server may see it
		// (and answer the agent) before the API server's answer is back.
		at := time.Now()
		if _, err := r.kube.DiscoveryV1().EndpointSlices(sl.Namespace).Update(ctx, sl, metav1.UpdateOptions{}); err != nil {
			return err
		}
		mu.Lock()
		for _, i := range bySlice[keys[k]] {
			changed[i] = at
		}
		mu.Unlock()
		return nil
	})
	return changed, err
}

// cleanup removes what the run created: the waiters' finalizers, every
// pod (no kubelet would finish them), the namespaces, the Node and the
// emulator.
func (r *run) cleanup(ctx context.Context) error {
	var errs []error
	for _, i := range r.waiters {
		p := r.pods[i]
		if p.name == "" {
			continue
		}
		_, err := r.kube.CoreV1().Pods(p.ns).Patch(ctx, p.name, types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, err)
		}
	}
	for _, ns := range r.namespaces {
		err := r.kube.CoreV1().Pods(ns).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}, metav1.ListOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, err)
		}
		if err := r.kube.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, err)
		}
	}
	if err := r.kube.CoreV1().Nodes().Delete(ctx, nodeName, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		errs = append(errs, err)
	}
	if r.emu != nil {
		if err := r.emu.Close(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// parallel runs f for 0..n-1 on a few workers and returns the first error.
func parallel(ctx context.Context, n int, f func(context.Context, int) error) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	next := make(chan int)
	var wg sync.WaitGroup
	for range min(n, 32) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				if err := f(ctx, i); err != nil {
					cancel(err)
				}
			}
		}()
	}
	for i := 0; i < n && ctx.Err() == nil; i++ {
		next <- i
	}
	close(next)
	wg.Wait()
	return context.Cause(ctx)
}

func poll(ctx context.Context, timeout time.Duration, ok func() bool) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for !ok() {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	return nil
}

// healthy answers every health check of the emulator with a 200, without
// a network: the run's pods do not exist.
type healthy struct{}

func (healthy) RoundTrip(req *http.Request) (*http.Response, error) {
	return &http.Response{StatusCode: http.StatusOK, Body: http.NoBody, Request: req, Header: http.Header{}}, nil
}

// quantile is the q-quantile of sorted durations (nearest rank).
func quantile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	k := int(math.Ceil(q*float64(len(ds)))) - 1
	return ds[max(0, min(k, len(ds)-1))]
}
