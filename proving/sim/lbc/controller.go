package lbc

// This file is long because it is the simulated controller's one
// reconcile loop: its queue and lag, the desired targets from bindings and
// endpoints, register and deregister calls, and readiness gates, which
// share one state.

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	elbv2 "github.com/aws/aws-sdk-go-v2/service/elasticloadbalancingv2"
	elbv2types "github.com/aws/aws-sdk-go-v2/service/elasticloadbalancingv2/types"
	"golang.org/x/time/rate"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
)

// Config holds the controller's knobs. Zero values take the real
// controller's figures (docs/facts.md#aws-load-balancer-controller).
type Config struct {
	// Namespace limits the watch; empty watches all namespaces.
	Namespace string
	// ReconcileLag delays every reconcile after a change by Lag plus a
	// uniform random part in [0, Jitter): the slow-controller knob.
	ReconcileLag, ReconcileJitter time.Duration
	// RegistrationQPS and RegistrationBurst throttle Register/Deregister
	// calls on the client side: default 4/s, burst 20.
	RegistrationQPS   float64
	RegistrationBurst int
	// ChunkSize is the most targets per call: default 200.
	ChunkSize int
	// Workers reconcile bindings in parallel: default 3.
	Workers int
	// GatePoll is how often pods waiting on their readiness gate are
	// checked: default 2s.
	GatePoll time.Duration
	// Seed makes the random lag repeatable.
	Seed uint64
	// Logf, if set, receives one line per AWS call.
	Logf func(format string, args ...any)
}

func (c *Config) fill() {
	if c.RegistrationQPS == 0 {
		c.RegistrationQPS = 4
	}
	if c.RegistrationBurst == 0 {
		c.RegistrationBurst = 20
	}
	if c.ChunkSize == 0 {
		c.ChunkSize = 200
	}
	if c.Workers == 0 {
		c.Workers = 3
	}
	if c.GatePoll == 0 {
		c.GatePoll = 2 * time.Second
	}
	if c.Logf == nil {
		c.Logf = func(string, ...any) {}
	}
}

// Controller is the simulated load balancer controller.
type Controller struct {
	cfg     Config
	kube    kubernetes.Interface
	elb     *elbv2.Client
	limiter *rate.Limiter
	queue   workqueue.TypedRateLimitingInterface[string]

	mu  sync.Mutex
	rnd *rand.Rand

	bindings cache.GenericLister
	slices   cache.Indexer
	services cache.Indexer
	pods     cache.Indexer
	factory  informers.SharedInformerFactory
	dfactory dynamicinformer.DynamicSharedInformerFactory
}

// New makes a controller; Run starts it.
func New(cfg Config, kube kubernetes.Interface, dyn dynamic.Interface, elb *elbv2.Client) *Controller {
	cfg.fill()
	c := &Controller{
		cfg: cfg, kube: kube, elb: elb,
		limiter: rate.NewLimiter(rate.Limit(cfg.RegistrationQPS), cfg.RegistrationBurst),
		queue:   workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[string]()),
		rnd:     rand.New(rand.NewPCG(cfg.Seed, cfg.Seed^0x9e3779b97f4a7c15)),
	}
	c.factory = informers.NewSharedInformerFactoryWithOptions(kube, 0, informers.WithNamespace(cfg.Namespace))
	c.dfactory = dynamicinformer.NewFilteredDynamicSharedInformerFactory(dyn, 0, cfg.Namespace, nil)
	return c
}

// Run watches and reconciles until ctx ends.
func (c *Controller) Run(ctx context.Context) error {
	bi := c.dfactory.ForResource(GVR)
	c.bindings = bi.Lister()
	si := c.factory.Discovery().V1().EndpointSlices().Informer()
	svi := c.factory.Core().V1().Services().Informer()
	pi := c.factory.Core().V1().Pods().Informer()
	c.slices, c.services, c.pods = si.GetIndexer(), svi.GetIndexer(), pi.GetIndexer()

	onBinding := cache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { c.enqueueObj(o) },
		UpdateFunc: func(_, o any) { c.enqueueObj(o) },
	}
	onSlice := func(o any) {
		if d, ok := o.(cache.DeletedFinalStateUnknown); ok {
			o = d.Obj
		}
		s, ok := o.(*discoveryv1.EndpointSlice)
		if !ok {
			return
		}
		c.enqueueForService(s.Namespace, s.Labels[discoveryv1.LabelServiceName])
	}
	if _, err := bi.Informer().AddEventHandler(onBinding); err != nil {
		return err
	}
	if _, err := si.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: onSlice, UpdateFunc: func(_, o any) { onSlice(o) }, DeleteFunc: onSlice,
	}); err != nil {
		return err
	}
	// A pod whose containers became ready changes no EndpointSlice while a
	// readiness gate holds it unready: the real controller watches pods too.
	onPod := func(o any) {
		if p, ok := o.(*corev1.Pod); ok {
			c.enqueueNamespace(p.Namespace)
		}
	}
	if _, err := pi.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: onPod, UpdateFunc: func(_, o any) { onPod(o) },
	}); err != nil {
		return err
	}
	c.factory.Start(ctx.Done())
	c.dfactory.Start(ctx.Done())
	for _, synced := range []cache.InformerSynced{bi.Informer().HasSynced, si.HasSynced, svi.HasSynced, pi.HasSynced} {
		if !cache.WaitForCacheSync(ctx.Done(), synced) {
			return ctx.Err()
		}
	}
	var wg sync.WaitGroup
	for range c.cfg.Workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for c.next(ctx) {
			}
		}()
	}
	<-ctx.Done()
	c.queue.ShutDown()
	wg.Wait()
	c.factory.Shutdown()
	c.dfactory.Shutdown()
	return nil
}

func (c *Controller) lag() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	d := c.cfg.ReconcileLag
	if c.cfg.ReconcileJitter > 0 {
		d += time.Duration(c.rnd.Int64N(int64(c.cfg.ReconcileJitter)))
	}
	return d
}

func (c *Controller) enqueueObj(o any) {
	if key, err := cache.MetaNamespaceKeyFunc(o); err == nil {
		c.queue.AddAfter(key, c.lag())
	}
}

func (c *Controller) enqueueForService(ns, svc string) {
	objs, err := c.bindings.ByNamespace(ns).List(labels.Everything())
	if err != nil {
		return
	}
	for _, o := range objs {
		u, ok := o.(*unstructured.Unstructured)
		if !ok {
			continue
		}
		if b, err := BindingFrom(u); err == nil && b.ServiceName == svc {
			c.queue.AddAfter(ns+"/"+b.Name, c.lag())
		}
	}
}

func (c *Controller) enqueueNamespace(ns string) {
	objs, err := c.bindings.ByNamespace(ns).List(labels.Everything())
	if err != nil {
		return
	}
	for _, o := range objs {
		c.enqueueObj(o)
	}
}

func (c *Controller) next(ctx context.Context) bool {
	key, quit := c.queue.Get()
	if quit {
		return false
	}
	defer c.queue.Done(key)
	requeue, err := c.reconcile(ctx, key)
	switch {
	case err != nil:
		c.cfg.Logf("reconcile %s: %v", key, err)
		c.queue.AddRateLimited(key)
	case requeue:
		c.queue.Forget(key)
		c.queue.AddAfter(key, c.cfg.GatePoll)
	default:
		c.queue.Forget(key)
	}
	return true
}

type target struct {
	ip   string
	port int32
	pod  string // namespace-less pod name, when known
}

func (t target) key() string { return fmt.Sprintf("%s:%d", t.ip, t.port) }

// reconcile makes the target group hold exactly the binding's desired
// targets, and reports whether pods still wait for their readiness gate.
func (c *Controller) reconcile(ctx context.Context, key string) (bool, error) {
	ns, name, _ := cache.SplitMetaNamespaceKey(key)
	o, err := c.bindings.ByNamespace(ns).Get(name)
	if err != nil {
		return false, nil // deleted: the lab deletes the group itself
	}
	b, err := BindingFrom(o.(*unstructured.Unstructured))
	if err != nil {
		return false, err
	}
	var desired []target
	switch b.TargetType {
	case "ip":
		desired, err = c.desired(b)
	case "instance":
		desired, err = c.desiredNodes(ctx, b)
	default:
		return false, nil
	}
	if err != nil {
		return false, err
	}
	health, err := c.elb.DescribeTargetHealth(ctx, &elbv2.DescribeTargetHealthInput{TargetGroupArn: aws.String(b.TargetGroupARN)})
	if err != nil {
		return false, fmt.Errorf("describe target health: %w", err)
	}
	current := map[string]elbv2types.TargetHealthStateEnum{}
	for _, d := range health.TargetHealthDescriptions {
		t := target{ip: aws.ToString(d.Target.Id), port: aws.ToInt32(d.Target.Port)}
		current[t.key()] = d.TargetHealth.State
	}
	var register, deregister []elbv2types.TargetDescription
	want := map[string]bool{}
	for _, t := range desired {
		want[t.key()] = true
		if st, ok := current[t.key()]; !ok || st == elbv2types.TargetHealthStateEnumDraining {
			register = append(register, elbv2types.TargetDescription{Id: aws.String(t.ip), Port: aws.Int32(t.port)})
		}
	}
	for _, d := range health.TargetHealthDescriptions {
		t := target{ip: aws.ToString(d.Target.Id), port: aws.ToInt32(d.Target.Port)}
		if !want[t.key()] && d.TargetHealth.State != elbv2types.TargetHealthStateEnumDraining {
			deregister = append(deregister, elbv2types.TargetDescription{Id: d.Target.Id, Port: d.Target.Port})
		}
	}
	sortTargets(register)
	sortTargets(deregister)
	// Deregistering first is what matters for terminating pods.
	for chunk := range slices.Chunk(deregister, c.cfg.ChunkSize) {
		if err := c.limiter.Wait(ctx); err != nil {
			return false, err
		}
		c.cfg.Logf("%s: deregister %s", key, ids(chunk))
		if _, err := c.elb.DeregisterTargets(ctx, &elbv2.DeregisterTargetsInput{TargetGroupArn: aws.String(b.TargetGroupARN), Targets: chunk}); err != nil {
			return false, fmt.Errorf("deregister targets: %w", err)
		}
	}
	for chunk := range slices.Chunk(register, c.cfg.ChunkSize) {
		if err := c.limiter.Wait(ctx); err != nil {
			return false, err
		}
		c.cfg.Logf("%s: register %s", key, ids(chunk))
		if _, err := c.elb.RegisterTargets(ctx, &elbv2.RegisterTargetsInput{TargetGroupArn: aws.String(b.TargetGroupARN), Targets: chunk}); err != nil {
			return false, fmt.Errorf("register targets: %w", err)
		}
	}
	return c.updateGates(ctx, b, desired, current)
}

// desired lists the binding's targets: endpoints that are ready, plus pods
// that wait only for this binding's readiness gate (they cannot become ready
// before they are registered). Terminating endpoints are never desired.
func (c *Controller) desired(b Binding) ([]target, error) {
	sp, ok, err := c.servicePort(b)
	if err != nil || !ok {
		return nil, err
	}
	portName := sp.Name
	var out []target
	for _, o := range c.slices.List() {
		s := o.(*discoveryv1.EndpointSlice)
		if s.Namespace != b.Namespace || s.Labels[discoveryv1.LabelServiceName] != b.ServiceName {
			continue
		}
		var port int32
		for _, p := range s.Ports {
			if p.Port != nil && (p.Name == nil && portName == "" || p.Name != nil && *p.Name == portName) {
				port = *p.Port
			}
		}
		if port == 0 {
			continue
		}
		for _, e := range s.Endpoints {
			if len(e.Addresses) == 0 || deref(e.Conditions.Terminating) {
				continue
			}
			t := target{ip: e.Addresses[0], port: port}
			if e.TargetRef != nil && e.TargetRef.Kind == "Pod" {
				t.pod = e.TargetRef.Name
			}
			if deref(e.Conditions.Ready) || c.waitsOnlyForGate(b, t.pod) {
				out = append(out, t)
			}
		}
	}
	return out, nil
}

// NodeReady says whether a node's Ready condition is true: an instance
// binding registers only such nodes.
func NodeReady(n corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// desiredNodes lists an instance binding's targets: every node that is
// ready, by its InternalIP (the emulator health-checks addresses; AWS names
// the EC2 instance), at the Service port's node port. Pods never are
// targets: the load balancer sends to the node port, and kube-proxy
// forwards.
func (c *Controller) desiredNodes(ctx context.Context, b Binding) ([]target, error) {
	sp, ok, err := c.servicePort(b)
	if err != nil || !ok {
		return nil, err
	}
	if sp.NodePort == 0 {
		return nil, fmt.Errorf("service %s/%s has no node port for %s: an instance binding needs a NodePort or LoadBalancer Service", b.Namespace, b.ServiceName, b.ServicePort.String())
	}
	nodes, err := c.kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	var out []target
	for _, n := range nodes.Items {
		if !NodeReady(n) {
			continue
		}
		for _, a := range n.Status.Addresses {
			if a.Type == corev1.NodeInternalIP {
				out = append(out, target{ip: a.Address, port: sp.NodePort})
				break
			}
		}
	}
	return out, nil
}

// servicePort is the port of the binding's Service it names (by name or
// number); ok is false while the Service is not in the cache, and an error
// says the Service has no such port.
func (c *Controller) servicePort(b Binding) (sp corev1.ServicePort, ok bool, err error) {
	o, ok, err := c.services.GetByKey(b.Namespace + "/" + b.ServiceName)
	if err != nil || !ok {
		return sp, false, err
	}
	for _, p := range o.(*corev1.Service).Spec.Ports {
		if (b.ServicePort.Type == intstr.String && p.Name == b.ServicePort.StrVal) ||
			(b.ServicePort.Type == intstr.Int && p.Port == b.ServicePort.IntVal) {
			sp, ok = p, true
		}
	}
	if !ok {
		return sp, false, fmt.Errorf("service %s/%s has no port %s", b.Namespace, b.ServiceName, b.ServicePort.String())
	}
	return sp, true, nil
}

func deref(b *bool) bool { return b != nil && *b }

func (c *Controller) pod(ns, name string) *corev1.Pod {
	if name == "" {
		return nil
	}
	o, ok, _ := c.pods.GetByKey(ns + "/" + name)
	if !ok {
		return nil
	}
	return o.(*corev1.Pod)
}

func hasGate(p *corev1.Pod, gate corev1.PodConditionType) bool {
	for _, g := range p.Spec.ReadinessGates {
		if g.ConditionType == gate {
			return true
		}
	}
	return false
}

func condition(p *corev1.Pod, t corev1.PodConditionType) corev1.ConditionStatus {
	for _, c := range p.Status.Conditions {
		if c.Type == t {
			return c.Status
		}
	}
	return corev1.ConditionUnknown
}

func (c *Controller) waitsOnlyForGate(b Binding, podName string) bool {
	p := c.pod(b.Namespace, podName)
	gate := corev1.PodConditionType(ReadinessGatePrefix + b.Name)
	return p != nil && p.DeletionTimestamp == nil && hasGate(p, gate) &&
		condition(p, corev1.ContainersReady) == corev1.ConditionTrue
}

// updateGates sets the readiness gate of pods whose target is healthy, and
// asks to be called again while some gate is still waiting.
func (c *Controller) updateGates(ctx context.Context, b Binding, desired []target, current map[string]elbv2types.TargetHealthStateEnum) (bool, error) {
	gate := corev1.PodConditionType(ReadinessGatePrefix + b.Name)
	pending := false
	var errs []error
	for _, t := range desired {
		p := c.pod(b.Namespace, t.pod)
		if p == nil || !hasGate(p, gate) || condition(p, gate) == corev1.ConditionTrue {
			continue
		}
		if current[t.key()] != elbv2types.TargetHealthStateEnumHealthy {
			pending = true
			continue
		}
		patch := fmt.Sprintf(`{"status":{"conditions":[{"type":%q,"status":"True","reason":"TargetHealthy","lastTransitionTime":%q}]}}`,
			gate, time.Now().UTC().Format(time.RFC3339))
		if _, err := c.kube.CoreV1().Pods(b.Namespace).Patch(ctx, p.Name, types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{}, "status"); err != nil {
			errs = append(errs, fmt.Errorf("set readiness gate of pod %s: %w", p.Name, err))
		}
	}
	return pending, errors.Join(errs...)
}

func sortTargets(ts []elbv2types.TargetDescription) {
	sort.Slice(ts, func(i, j int) bool { return aws.ToString(ts[i].Id) < aws.ToString(ts[j].Id) })
}

func ids(ts []elbv2types.TargetDescription) []string {
	out := make([]string, len(ts))
	for i, t := range ts {
		out[i] = fmt.Sprintf("%s:%d", aws.ToString(t.Id), aws.ToInt32(t.Port))
	}
	return out
}
