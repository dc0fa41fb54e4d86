package lab

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"

	"draingate.dev/draingate/proving/lab/sidecar"
	"draingate.dev/draingate/proving/sim/lbc"
)

// play is one strategy's workload: how its pods come up, and how they are
// made to stop (Scenario.Workload).
type play struct {
	r       *runner
	st      Strategy
	sc      Scenario
	ns      string
	gate    *gateSetup
	lb      *loadBalancer
	pods    *tracker
	readyBy time.Duration

	current string // bluegreen: the Deployment the Service selects
	nodes   int    // instance targets: the Ready nodes at setup
}

const versionLabel = "version" // bluegreen: one value per ReplicaSet

// setup creates the Service, the binding to the target group arn (none
// when arn is empty) and the first pods, and waits until every target is
// in every node's rotation.
func (p *play) setup(ctx context.Context, arn string) error {
	cl := p.r.env.Client
	selector := map[string]string{"app": appName}
	name, gated := appName, true
	if p.sc.Workload == BlueGreen {
		name, gated = appName+"-0", false
		selector = map[string]string{"app": appName, versionLabel: "0"}
		p.current = name
	}
	svc, err := cl.CoreV1().Services(p.ns).Create(ctx, service(selector, p.sc), metav1.CreateOptions{})
	if err != nil {
		return err
	}
	if p.sc.LocalPolicy && arn != "" {
		// What the AWS Load Balancer Controller sets on the group.
		if err := p.r.emu.SetHealthCheckPort(arn, svc.Spec.HealthCheckNodePort); err != nil {
			return err
		}
	}
	if p.sc.instance() {
		if p.nodes, err = readyNodes(ctx, cl); err != nil {
			return err
		}
	}
	if arn != "" {
		b := lbc.Binding{Namespace: p.ns, Name: tgbName, TargetGroupARN: arn, ServiceName: appName, ServicePort: intstr.FromInt32(80), TargetType: p.sc.targetType()}
		if _, err := p.r.dyn.Resource(lbc.GVR).Namespace(p.ns).Create(ctx, b.Object(), metav1.CreateOptions{}); err != nil {
			return err
		}
	}
	if arn == "" || p.sc.instance() {
		// No target group (the ingress), or one of nodes: the load
		// balancer controller gives pods no readiness gate.
		gated = false
	}
	if _, err := cl.AppsV1().Deployments(p.ns).Create(ctx, deployment(name, selector, int32(p.r.o.Replicas), p.st, p.sc, gated), metav1.CreateOptions{}); err != nil {
		return err
	}
	if err := p.rolledOut(ctx, name); err != nil {
		return err
	}
	wctx, cancel := context.WithTimeout(ctx, p.readyBy)
	defer cancel()
	if err := p.lb.bal.WaitInRotation(wctx, p.targets()); err != nil {
		return fmt.Errorf("waiting for %d targets in every load balancer node's rotation: %w", p.targets(), err)
	}
	return nil
}

// rolledOut waits for a Deployment's rollout and checks the gate's
// injection.
func (p *play) rolledOut(ctx context.Context, name string) error {
	by := p.readyBy
	if p.sc.LocalPolicy {
		// maxSurge 0: each new pod waits for the stop of the one it
		// replaces, then minReadySeconds.
		by += time.Duration(p.r.o.Replicas) * (p.stopBy() + localMinReady(p.sc))
	}
	if err := p.r.waitRollout(ctx, p.ns, name, by); err != nil {
		return fmt.Errorf("deployment %s: %w", name, err)
	}
	if p.gate != nil {
		if err := injected(ctx, p.r.env.Client, p.ns); err != nil {
			// A fault may take the webhook away (it fails open): that
			// pod stops ungated, which the report must show, not hide.
			if p.r.o.Chaos.Kind == "" {
				return err
			}
			p.r.notes = append(p.r.notes, fmt.Sprintf("%s: under chaos %s: %v", p.st.Name, p.r.o.Chaos.Kind, err))
		}
	}
	if p.sc.Sidecar {
		return sidecarInjected(ctx, p.r.env.Client, p.ns)
	}
	return nil
}

// sidecarInjected checks that the lab's sidecar webhook gave every running
// pod of ns its proxy: a pod without one would measure another scenario.
func sidecarInjected(ctx context.Context, cl kubernetes.Interface, ns string) error {
	pods, err := cl.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=" + appName})
	if err != nil {
		return err
	}
	for _, pod := range pods.Items {
		if pod.DeletionTimestamp == nil && pod.Annotations[sidecar.Annotation] != sidecar.Injected {
			return fmt.Errorf("pod %s/%s has no lab sidecar (no %s annotation): see the webhook's warning in the pod's events", ns, pod.Name, sidecar.Annotation)
		}
	}
	return nil
}

// step makes pods stop once, the i-th time.
func (p *play) step(ctx context.Context, i int) error {
	cl := p.r.env.Client
	switch p.sc.Workload {
	case BlueGreen:
		// The new ReplicaSet comes up outside the Service; once it is
		// ready the Service flips to it, and after the scale-down delay the
		// old one is scaled to zero.
		name := appName + "-" + strconv.Itoa(i)
		selector := map[string]string{"app": appName, versionLabel: strconv.Itoa(i)}
		if _, err := cl.AppsV1().Deployments(p.ns).Create(ctx, deployment(name, selector, int32(p.r.o.Replicas), p.st, p.sc, false), metav1.CreateOptions{}); err != nil {
			return err
		}
		if err := p.rolledOut(ctx, name); err != nil {
			return err
		}
		if _, err := cl.CoreV1().Services(p.ns).Patch(ctx, appName, types.MergePatchType, selectorPatch(selector), metav1.PatchOptions{}); err != nil {
			return err
		}
		p.r.progress(p.st, "service switched to %s; old pods go in %s", name, p.sc.ScaleDownDelay)
		select {
		case <-time.After(p.sc.ScaleDownDelay):
		case <-ctx.Done():
			return ctx.Err()
		}
		old := p.current
		p.current = name
		oldPods, err := cl.CoreV1().Pods(p.ns).List(ctx, metav1.ListOptions{LabelSelector: versionLabel + "=" + strconv.Itoa(i-1)})
		if err != nil {
			return err
		}
		if _, err := cl.AppsV1().Deployments(p.ns).Patch(ctx, old, types.MergePatchType, []byte(`{"spec":{"replicas":0}}`), metav1.PatchOptions{}); err != nil {
			return err
		}
		// settle waits for the pods it has seen deleted: it must see all
		// of the old ones first, or it ends the run before they even stop.
		return waitFor(ctx, p.readyBy, func() bool { return p.pods.allDeleted(oldPods.Items) })
	case Restart:
		return p.restartOne(ctx, i)
	default:
		if _, err := cl.AppsV1().Deployments(p.ns).Patch(ctx, appName, types.StrategicMergePatchType, restartPatch(time.Now()), metav1.PatchOptions{}); err != nil {
			return err
		}
		return p.rolledOut(ctx, appName)
	}
}

// restartOne makes the liveness probe of one pod not restarted yet fail,
// then waits until the kubelet restarted its container and it is back in
// every node's rotation.
func (p *play) restartOne(ctx context.Context, i int) error {
	var candidates []podRecord
	for _, r := range p.pods.snapshot() {
		if r.deletedAt.IsZero() && r.restarted.IsZero() && r.ip != "" {
			candidates = append(candidates, r)
		}
	}
	if len(candidates) == 0 {
		return fmt.Errorf("restart %d: no running pod left that was not restarted", i)
	}
	slices.SortFunc(candidates, func(a, b podRecord) int { return strings.Compare(a.name, b.name) })
	victim := candidates[0]
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, fmt.Sprintf("http://%s:%d/fail-liveness", victim.ip, appPort), nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("making pod %s's liveness probe fail: %w", victim.name, err)
	}
	resp.Body.Close()
	if resp.StatusCode >= 300 {
		return fmt.Errorf("making pod %s's liveness probe fail: %s", victim.name, resp.Status)
	}
	p.r.progress(p.st, "pod %s: liveness probe failing from now on", victim.name)
	restartBy := p.readyBy + p.stopBy() + 4*p.sc.LivenessPeriod
	if err := waitFor(ctx, restartBy, func() bool { return p.pods.restartedAt(victim.name) }); err != nil {
		return fmt.Errorf("pod %s's container was not restarted: %w", victim.name, err)
	}
	wctx, cancel := context.WithTimeout(ctx, p.readyBy)
	defer cancel()
	return p.lb.bal.WaitInRotation(wctx, p.targets())
}

// targets is how many targets the load balancer has once every pod is up:
// one per pod, or with instance targets the cluster's one node.
func (p *play) targets() int {
	if p.sc.instance() {
		return p.nodes
	}
	return p.r.o.Replicas
}

// readyNodes counts the cluster's Ready nodes: an instance group's targets.
func readyNodes(ctx context.Context, cl kubernetes.Interface) (int, error) {
	nodes, err := cl.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return 0, err
	}
	n := 0
	for _, nd := range nodes.Items {
		if lbc.NodeReady(nd) {
			n++
		}
	}
	return n, nil
}

// stopBy is the longest the kubelet may take to stop one of the pods:
// their longest grace period as created (the injection webhook sizes it,
// and the agent's max-wait, from each pod's routes), and at least the
// strategy's own hook plus the app's grace.
func (p *play) stopBy() time.Duration {
	hook := p.st.Sleep
	if p.gate != nil {
		hook = p.gate.MaxWait
	}
	return max(grace+hook, p.pods.longestGrace())
}

// settle waits until every stopped pod has exited and, when it was deleted,
// left every node's rotation.
func (p *play) settle(ctx context.Context) error {
	tailBy := p.stopBy() + p.sc.MaxRouteDelay() + p.sc.ScaleDownDelay + time.Minute
	if err := waitFor(ctx, tailBy, func() bool { return p.pods.exitPending() == 0 }); err != nil {
		return fmt.Errorf("stopped pods did not exit: %w", err)
	}
	out := func() bool {
		for _, r := range p.pods.snapshot() {
			if !r.deletedAt.IsZero() && r.ip != "" && !p.lb.allOut(r.ip) {
				return false
			}
		}
		return true
	}
	if p.sc.instance() {
		// Pods are never the load balancer's targets: nothing takes them
		// out of its rotation but their exit.
		return nil
	}
	if err := waitFor(ctx, p.sc.MaxRouteDelay()+time.Minute, out); err != nil && !throttled(p.sc) {
		return fmt.Errorf("deleted pods still in the data plane's rotation: %w", err)
	}
	return nil
}
