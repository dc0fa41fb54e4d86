package lbc

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	elbv2 "github.com/aws/aws-sdk-go-v2/service/elasticloadbalancingv2"
	elbv2types "github.com/aws/aws-sdk-go-v2/service/elasticloadbalancingv2/types"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/dynamic"
	"k8s.io/utils/ptr"

	"draingate.dev/draingate/proving/sim/elbv2sim"
	"draingate.dev/draingate/proving/testenv"
	"draingate.dev/draingate/proving/testutil"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// TestControllerFollowsEndpoints runs the controller against the real
// cluster and the emulator: ready pods are registered and get their
// readiness gate once healthy; a deleted pod is deregistered while it is
// still terminating (its preStop hook holds it), no earlier than the
// configured lag; and with AWS's registration bucket nearly empty the
// controller's calls are throttled and retried until they succeed.
func TestControllerFollowsEndpoints(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	const lag = 2 * time.Second
	c, ns, emu, arn, dyn := startController(ctx, t, elbv2sim.TargetGroupSpec{
		Name: "lbc-test", LoadBalancerType: elbv2sim.Application, Port: 8080,
		HealthCheckPath: "/", HealthCheckInterval: 500 * time.Millisecond, DeregistrationDelay: time.Minute,
	}, lag)
	elb := emu.Client()

	events, unsubscribe := emu.Subscribe()
	defer unsubscribe()
	if err := c.LoadGoImage(ctx, testenv.TestAppImage, "./proving/testenv/cmd/testapp"); err != nil {
		t.Fatal(err)
	}
	labels := map[string]string{"app": "web"}
	if _, err := c.Client.CoreV1().Services(ns).Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec:       corev1.ServiceSpec{Selector: labels, Ports: []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromString("http")}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	b := Binding{Namespace: ns, Name: "web", TargetGroupARN: arn, ServiceName: "web", ServicePort: intstr.FromString("http")}
	if _, err := dyn.Resource(GVR).Namespace(ns).Create(ctx, b.Object(), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Client.AppsV1().Deployments(ns).Create(ctx, &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](2),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					ReadinessGates: []corev1.PodReadinessGate{{ConditionType: ReadinessGatePrefix + "web"}},
					Containers: []corev1.Container{{
						Name: "app", Image: testenv.TestAppImage, ImagePullPolicy: corev1.PullNever, Args: []string{"serve"},
						Ports:     []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}},
						Lifecycle: &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{Sleep: &corev1.SleepAction{Seconds: 20}}},
						ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{
							Path: "/", Port: intstr.FromString("http")}}, PeriodSeconds: 1},
					}},
				},
			},
		},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	// Both pods Ready means both gates were set, which the controller does
	// only for targets the emulator reports healthy.
	var pods []corev1.Pod
	testutil.Eventually(t, ctx, "both pods Ready through their readiness gate", func() (bool, error) {
		l, err := c.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		ready := 0
		for _, p := range l.Items {
			for _, cond := range p.Status.Conditions {
				if cond.Type == corev1.PodReady && cond.Status == corev1.ConditionTrue {
					ready++
				}
			}
		}
		pods = l.Items
		return ready == 2, nil
	})
	for _, p := range pods {
		if st := emu.Targets(arn)[elbv2sim.Target{ID: p.Status.PodIP, Port: 8080}]; st != elbv2sim.StateHealthy {
			t.Fatalf("pod %s is Ready but its target is %q", p.Name, st)
		}
	}

	// Slow AWS from here on: one registration call every 4 s, and the one
	// token there is spent now, so the controller's deregistration is
	// throttled, retried by the SDK and requeued until it goes through.
	inf := elbv2sim.BucketConfig{Capacity: math.Inf(1), RefillPerSecond: math.Inf(1)}
	emu.SetThrottle(inf, elbv2sim.BucketConfig{Capacity: 1, RefillPerSecond: 0.25}, inf)
	// The token goes on a documentation address (RFC 5737), never a pod's:
	// a pod IP here once matched the victim's and looked like an early
	// deregistration.
	if _, err := elb.DeregisterTargets(ctx, &elbv2.DeregisterTargetsInput{TargetGroupArn: aws.String(arn),
		Targets: []elbv2types.TargetDescription{{Id: aws.String("192.0.2.10"), Port: aws.Int32(8080)}}}); err != nil {
		t.Fatal(err)
	}
	victim := pods[0]
	deletedAt := time.Now()
	if err := c.Client.CoreV1().Pods(ns).Delete(ctx, victim.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	var drainingAt time.Time
	for drainingAt.IsZero() {
		select {
		case ev := <-events:
			if ev.TargetGroupARN == arn && ev.Target.ID == victim.Status.PodIP && ev.To == elbv2sim.StateDraining {
				drainingAt = time.Now()
			}
		case <-ctx.Done():
			t.Fatalf("pod %s was never deregistered", victim.Name)
		}
	}
	if drainingAt.Sub(deletedAt) < lag {
		t.Errorf("deregistered %s after deletion, before the %s reconcile lag", drainingAt.Sub(deletedAt), lag)
	}
	p, err := c.Client.CoreV1().Pods(ns).Get(ctx, victim.Name, metav1.GetOptions{})
	if err != nil || p.DeletionTimestamp == nil {
		t.Errorf("pod %s should still be terminating (its preStop sleeps 20 s) when deregistered: %v", victim.Name, err)
	}
	// Its replacement is registered once ready, through the same throttle.
	testutil.Eventually(t, ctx, "replacement registered and healthy", func() (bool, error) {
		healthy := 0
		for _, st := range emu.Targets(arn) {
			if st == elbv2sim.StateHealthy {
				healthy++
			}
		}
		return healthy == 2, nil
	})
	calls := emu.Calls()
	if calls["RegisterTargets"]["OK"] < 2 || calls["DeregisterTargets"]["OK"] < 2 {
		t.Errorf("calls %v: want registrations of both pods and the replacement, and the deregistration, to succeed", calls)
	}
	if calls["DeregisterTargets"]["Throttling"] == 0 {
		t.Errorf("calls %v: the deregistration was never throttled, so the slow-AWS path was not exercised", calls)
	}
	t.Logf("ELBv2 calls: %v; deregistered %s after deletion", calls, drainingAt.Sub(deletedAt).Round(time.Millisecond))
}

// TestControllerRegistersNodesForInstanceBindings: an instance binding's
// targets are the cluster's nodes at the Service's node port, never its
// pods, and the emulator's health checks reach a pod through kube-proxy
// there; a pod's deletion leaves the node registered.
func TestControllerRegistersNodesForInstanceBindings(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c, ns, emu, arn, dyn := startController(ctx, t, elbv2sim.TargetGroupSpec{
		Name: "lbc-instance", LoadBalancerType: elbv2sim.Application, TargetType: elbv2sim.TargetTypeInstance, Port: 8080,
		HealthCheckPath: "/", HealthCheckInterval: 500 * time.Millisecond,
	}, 0)
	if err := c.LoadGoImage(ctx, testenv.TestAppImage, "./proving/testenv/cmd/testapp"); err != nil {
		t.Fatal(err)
	}
	labels := map[string]string{"app": "web"}
	svc, err := c.Client.CoreV1().Services(ns).Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeNodePort, Selector: labels,
			Ports: []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromString("http")}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	b := Binding{Namespace: ns, Name: "web", TargetGroupARN: arn, ServiceName: "web", ServicePort: intstr.FromString("http"), TargetType: "instance"}
	if _, err := dyn.Resource(GVR).Namespace(ns).Create(ctx, b.Object(), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pod, err := c.Client.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Labels: labels},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{
			Name: "app", Image: testenv.TestAppImage, ImagePullPolicy: corev1.PullNever, Args: []string{"serve"},
			Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}},
			ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{
				Path: "/", Port: intstr.FromString("http")}}, PeriodSeconds: 1},
		}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// The first node (a run's second, testenv's AddNode, is registered
	// too when it runs).
	first, err := c.Client.CoreV1().Nodes().Get(ctx, testenv.NodeName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var nodeIP string
	for _, a := range first.Status.Addresses {
		if a.Type == corev1.NodeInternalIP {
			nodeIP = a.Address
		}
	}
	node := elbv2sim.Target{ID: nodeIP, Port: svc.Spec.Ports[0].NodePort}
	testutil.Eventually(t, ctx, "the node registered at the node port and healthy through kube-proxy", func() (bool, error) {
		return emu.Targets(arn)[node] == elbv2sim.StateHealthy, nil
	})
	if err := c.Client.CoreV1().Pods(ns).Delete(ctx, pod.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, ctx, "the pod gone", func() (bool, error) {
		_, err := c.Client.CoreV1().Pods(ns).Get(ctx, pod.Name, metav1.GetOptions{})
		return err != nil, nil
	})
	targets := emu.Targets(arn)
	if targets[node] == "" || targets[node] == elbv2sim.StateDraining {
		t.Errorf("targets after the pod's deletion: %v; want the node %v still registered", targets, node)
	}
	for tg := range targets {
		if tg.Port != node.Port {
			t.Errorf("target %v: want nodes at the node port %d only, never a pod", tg, node.Port)
		}
	}
}

// startController installs the binding CRD, starts the emulator with one
// target group of spec and a controller of lag for a new namespace; all
// stop when the test ends.
func startController(ctx context.Context, t *testing.T, spec elbv2sim.TargetGroupSpec, lag time.Duration) (*testenv.Cluster, string, *elbv2sim.Server, string, dynamic.Interface) {
	t.Helper()
	c := testenv.Get(t)
	ns := c.Namespace(t)
	if err := InstallCRD(ctx, c.Config); err != nil {
		t.Fatal(err)
	}
	emu := elbv2sim.New(elbv2sim.Config{})
	t.Cleanup(func() { emu.Close() })
	if _, err := emu.Listen("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	arn, err := emu.CreateTargetGroup(spec)
	if err != nil {
		t.Fatal(err)
	}
	dyn, err := dynamic.NewForConfig(c.Config)
	if err != nil {
		t.Fatal(err)
	}
	ctrl := New(Config{Namespace: ns, ReconcileLag: lag, GatePoll: 500 * time.Millisecond, Logf: t.Logf}, c.Client, dyn, emu.Client())
	runCtx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- ctrl.Run(runCtx) }()
	t.Cleanup(func() { stop(); <-done })
	return c, ns, emu, arn, dyn
}
