package chart

import (
	"bufio"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"draingate.dev/draingate/api"
	"draingate.dev/draingate/internal/waitapi"
	"draingate.dev/draingate/proving/testenv"
	"draingate.dev/draingate/proving/testutil"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// Images the tests build offline and load; the chart's values point at them.
const (
	serverImage = "draingate.local/draingate"
	agentImage  = "draingate.local/draingate-prestop"
	imageTag    = "1"
)

func loadImages(t *testing.T, ctx context.Context, c *testenv.Cluster) {
	t.Helper()
	for ref, pkg := range map[string]string{
		serverImage + ":" + imageTag: "./cmd/draingate",
		agentImage + ":" + imageTag:  "./cmd/draingate-prestop",
		testenv.TestAppImage:         "./proving/testenv/cmd/testapp",
	} {
		if err := c.LoadGoImage(ctx, ref, pkg); err != nil {
			t.Fatal(err)
		}
	}
}

// restricted makes a pod spec pass Pod Security `restricted`.
func restricted(spec *corev1.PodSpec) {
	spec.SecurityContext = &corev1.PodSecurityContext{RunAsNonRoot: ptr.To(true), RunAsUser: ptr.To[int64](65532),
		SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}}
	for i := range spec.Containers {
		spec.Containers[i].SecurityContext = &corev1.SecurityContext{AllowPrivilegeEscalation: ptr.To(false),
			Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}}
	}
}

// TestChartInstallsAndInjects installs the chart with the Helm Go library,
// then: a Deployment in a namespace labelled for injection (and enforcing
// Pod Security `restricted`, and a LimitRange whose minimum is above the
// installer's default resources) gets mutated pods; deleting one, while
// another pod floods the wait API (see floodRun), runs the agent
// inside the app container, which waits for the gate's release, and then
// the original exec hook (its log line is the side effect); with the gate
// server scaled to zero, pods are still created, unmutated, and the API
// server counts the webhook's fail-open.
func TestChartInstallsAndInjects(t *testing.T) {
	c := testenv.Get(t)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	loadImages(t, ctx, c)
	sys := c.Namespace(t)
	release := "draingate-" + sys[len(sys)-6:]
	rel, err := Install(ctx, c.Kubeconfig, sys, release, map[string]any{
		"replicaCount": 1,
		"targetGroups": false,
		"image":        map[string]any{"repository": serverImage, "tag": imageTag, "pullPolicy": "Never"},
		"tails":        map[string]any{"endpointSlice": "1s"},
		"agent": map[string]any{"image": map[string]any{"repository": agentImage, "tag": imageTag},
			"maxWait": "60s", "fallback": "5s", "shutdownBudget": "10s", "watcher": map[string]any{"enabled": true}},
	}, 3*time.Minute, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := rel.Uninstall(2 * time.Minute); err != nil {
			t.Errorf("uninstall: %v", err)
		}
	}()

	app := "app-" + sys[len(sys)-6:]
	if _, err := c.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: app, Labels: map[string]string{
		api.LabelInject: api.Enabled, "pod-security.kubernetes.io/enforce": "restricted",
	}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	defer c.Client.CoreV1().Namespaces().Delete(context.Background(), app, metav1.DeleteOptions{})

	if err := WaitInjecting(ctx, c.Client, app, 2*time.Minute); err != nil {
		t.Fatal(err)
	}
	// A LimitRange whose minimum is above the installer's default
	// resources: the API server's LimitRanger (after the webhook) would
	// refuse every injected pod, and the ReplicaSet would create none,
	// unless the webhook fits the installer to it.
	q := resource.MustParse
	if _, err := c.Client.CoreV1().LimitRanges(app).Create(ctx, &corev1.LimitRange{ObjectMeta: metav1.ObjectMeta{Name: "floor"},
		Spec: corev1.LimitRangeSpec{Limits: []corev1.LimitRangeItem{{Type: corev1.LimitTypeContainer,
			Min:            corev1.ResourceList{corev1.ResourceCPU: q("20m"), corev1.ResourceMemory: q("24Mi")},
			DefaultRequest: corev1.ResourceList{corev1.ResourceCPU: q("50m"), corev1.ResourceMemory: q("32Mi")},
			Default:        corev1.ResourceList{corev1.ResourceCPU: q("100m"), corev1.ResourceMemory: q("64Mi")},
		}}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	labels := map[string]string{"app": "web"}
	spec := corev1.PodSpec{Containers: []corev1.Container{{
		Name: "app", Image: testenv.TestAppImage, ImagePullPolicy: corev1.PullNever, Args: []string{"serve"},
		Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}},
		ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{
			Path: "/", Port: intstr.FromString("http")}}, PeriodSeconds: 1},
		Lifecycle: &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{Exec: &corev1.ExecAction{
			Command: []string{"/bin/testapp", "hook", "-sleep", "0s"}}}},
	}}}
	restricted(&spec)
	if _, err := c.Client.CoreV1().Services(app).Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec: corev1.ServiceSpec{Selector: labels, Ports: []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromString("http")}}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Client.AppsV1().Deployments(app).Create(ctx, &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec: appsv1.DeploymentSpec{Replicas: ptr.To[int32](2), Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: spec}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var pods []corev1.Pod
	testutil.Eventually(t, ctx, "two Ready pods", func() (bool, error) {
		l, err := c.Client.CoreV1().Pods(app).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		pods = nil
		for _, p := range l.Items {
			for _, cond := range p.Status.Conditions {
				if cond.Type == corev1.PodReady && cond.Status == corev1.ConditionTrue && p.DeletionTimestamp == nil {
					pods = append(pods, p)
				}
			}
		}
		return len(pods) == 2, nil
	})
	victim := pods[0]
	if victim.Annotations[api.AnnotationInjected] == "" {
		t.Fatalf("pod %s was not injected: annotations %v", victim.Name, victim.Annotations)
	}
	hook := victim.Spec.Containers[0].Lifecycle.PreStop.Exec.Command
	if len(hook) == 0 || !strings.HasSuffix(hook[0], "/draingate-prestop") {
		t.Fatalf("preStop of the injected pod is %q, want the agent", hook)
	}
	if g := ptr.Deref(victim.Spec.TerminationGracePeriodSeconds, 30); g < 70 {
		t.Errorf("grace period %d s: want raised to fit max-wait 60 s and the shutdown budget 10 s", g)
	}
	t.Logf("injected preStop: %q", hook)
	if inst := victim.Spec.InitContainers[0]; inst.Name != api.InstallerName || inst.Resources.Requests.Cpu().Cmp(q("20m")) < 0 {
		t.Errorf("first init container %s with requests %v: want the installer fitted to the LimitRange's minimum", inst.Name, inst.Resources.Requests)
	}

	// The watcher, a native sidecar after the installer, fitted to the
	// LimitRange too; the agent's lines below must show its history sent.
	if len(victim.Spec.InitContainers) < 2 || victim.Spec.InitContainers[1].Name != api.WatcherName ||
		ptr.Deref(victim.Spec.InitContainers[1].RestartPolicy, "") != corev1.ContainerRestartPolicyAlways ||
		victim.Spec.InitContainers[1].Resources.Requests.Cpu().Cmp(q("20m")) < 0 {
		t.Errorf("init containers %+v: want the installer, then the watcher as a native sidecar fitted to the LimitRange", victim.Spec.InitContainers)
	}
	watcherUp := false
	for _, st := range victim.Status.InitContainerStatuses {
		watcherUp = watcherUp || st.Name == api.WatcherName && st.State.Running != nil && st.Started != nil && *st.Started
	}
	if !watcherUp {
		t.Errorf("watcher not running in the Ready pod: %+v", victim.Status.InitContainerStatuses)
	}

	flood := startFlood(t, ctx, c, app, victim)

	logs, err := c.Client.CoreV1().Pods(app).GetLogs(victim.Name, &corev1.PodLogOptions{Container: "app", Follow: true}).Stream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer logs.Close()
	if err := c.Client.CoreV1().Pods(app).Delete(ctx, victim.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	var order []string
	history := false
	sc := bufio.NewScanner(logs)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "draingate-prestop: released"):
			order = append(order, "released")
			t.Log(line)
			if !strings.Contains(line, string(api.ReasonDrained)) {
				t.Errorf("victim released %q during the flood: want released because its routes closed (%s)", line, api.ReasonDrained)
			}
		case strings.HasPrefix(line, "draingate-prestop: "):
			t.Log(line)
			history = history || strings.Contains(line, "the pod's watcher has watched for")
		case strings.HasPrefix(line, "hook-start "):
			order = append(order, "original-hook")
		case strings.HasPrefix(line, "sigterm "):
			order = append(order, "sigterm")
		}
	}
	if !history {
		t.Error("the agent never said it sent the watcher's history")
	}
	if strings.Join(order, ",") != "released,original-hook,sigterm" {
		t.Errorf("container log order %q: want the gate's release, then the original hook, then SIGTERM", order)
	}
	flood.check(t, ctx)

	// The gate server down: pods are still created, unmutated.
	deploy := release
	scale, err := c.Client.AppsV1().Deployments(sys).GetScale(ctx, deploy, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	scale.Spec.Replicas = 0
	if _, err := c.Client.AppsV1().Deployments(sys).UpdateScale(ctx, deploy, scale, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, ctx, "gate server pods gone", func() (bool, error) {
		l, err := c.Client.CoreV1().Pods(sys).List(ctx, metav1.ListOptions{})
		return err == nil && len(l.Items) == 0, err
	})
	before := failOpen(t, ctx, c)
	lone := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "while-down"}, Spec: *spec.DeepCopy()}
	created, err := c.Client.CoreV1().Pods(app).Create(ctx, lone, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("with the gate server down, pod creation failed: %v", err)
	}
	if created.Annotations[api.AnnotationInjected] != "" || len(created.Spec.InitContainers) != 0 {
		t.Errorf("pod created while the webhook is down was mutated: %v", created.Annotations)
	}
	if after := failOpen(t, ctx, c); after <= before {
		t.Errorf("apiserver_admission_webhook_fail_open_count for draingate went %v → %v: the fail-open is not visible", before, after)
	}
}

// failOpen sums the API server's fail-open counter for draingate's webhooks.
func failOpen(t *testing.T, ctx context.Context, c *testenv.Cluster) float64 {
	t.Helper()
	raw, err := c.Client.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		t.Fatal(err)
	}
	sum := 0.0
	for _, line := range strings.Split(string(raw), "\n") {
		if strings.HasPrefix(line, "apiserver_admission_webhook_fail_open_count{") && strings.Contains(line, "pods.draingate.dev") {
			var v float64
			fmt.Sscan(line[strings.LastIndex(line, " ")+1:], &v)
			sum += v
		}
	}
	return sum
}

func sum(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

// floodRun is a pod that abuses the wait API while the test's victim is
// released: one of its containers asks about the victim (every answer must
// be the one about an unknown pod, 404) and holds 40 long-polls about its own terminating pod, which is
// held (it is its Service's only endpoint, so the route stays open); the
// server holds at most waitapi.DefaultMaxWaitingPerSource of them at once
// and answers the rest at once, so the flood cannot take the long-poll cap
// from the victim's agent.
type floodRun struct {
	victimURL, selfURL string
	lines              chan []string
}

const flooders = 40

func startFlood(t *testing.T, ctx context.Context, c *testenv.Cluster, ns string, victim corev1.Pod) *floodRun {
	t.Helper()
	server := ""
	for _, e := range victim.Spec.Containers[0].Env {
		if e.Name == "DRAINGATE_SERVER" {
			server = e.Value
		}
	}
	if server == "" {
		t.Fatalf("the victim's gated container has no DRAINGATE_SERVER: %+v", victim.Spec.Containers[0].Env)
	}
	f := &floodRun{
		victimURL: api.DrainRequest{Namespace: ns, Pod: victim.Name, UID: string(victim.UID)}.URL(server),
		selfURL:   api.DrainRequest{Namespace: ns, Pod: "abuse", Wait: 10 * time.Second}.URL(server),
		lines:     make(chan []string, 1),
	}
	labels := map[string]string{"app": "abuse"}
	if _, err := c.Client.CoreV1().Services(ns).Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "abuse"},
		Spec: corev1.ServiceSpec{Selector: labels, Ports: []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromString("http")}}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	spec := corev1.PodSpec{Containers: []corev1.Container{{
		Name: "app", Image: testenv.TestAppImage, ImagePullPolicy: corev1.PullNever, Args: []string{"serve"},
		Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}},
		ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{
			Path: "/", Port: intstr.FromString("http")}}, PeriodSeconds: 1},
	}, {
		Name: "flood", Image: testenv.TestAppImage, ImagePullPolicy: corev1.PullNever,
		Args: []string{"flood", "-for", "45s", "4=" + f.victimURL, fmt.Sprintf("%d=%s", flooders, f.selfURL)},
	}}}
	restricted(&spec)
	if _, err := c.Client.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "abuse", Labels: labels}, Spec: spec},
		metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, ctx, "the flooding pod Ready", func() (bool, error) {
		p, err := c.Client.CoreV1().Pods(ns).Get(ctx, "abuse", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		for _, cond := range p.Status.Conditions {
			if cond.Type == corev1.PodReady && cond.Status == corev1.ConditionTrue {
				return true, nil
			}
		}
		return false, nil
	})
	logs, err := c.Client.CoreV1().Pods(ns).GetLogs("abuse", &corev1.PodLogOptions{Container: "flood", Follow: true}).Stream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		defer logs.Close()
		var lines []string
		sc := bufio.NewScanner(logs)
		for sc.Scan() {
			lines = append(lines, sc.Text())
		}
		f.lines <- lines
	}()
	// Terminating, it is held: its agent waits, and so do its long-polls.
	if err := c.Client.CoreV1().Pods(ns).Delete(ctx, "abuse", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	return f
}

// check reads the flood's counts once it ends.
func (f *floodRun) check(t *testing.T, ctx context.Context) {
	t.Helper()
	var lines []string
	select {
	case lines = <-f.lines:
	case <-ctx.Done():
		t.Fatal("the flood did not end")
	}
	// "flood <url> <key>=<n>...": answers by status, and held-max.
	counts := map[string]map[string]int{}
	for _, l := range lines {
		t.Log(l)
		fields := strings.Fields(l)
		if len(fields) < 2 || fields[0] != "flood" {
			continue
		}
		if counts[fields[1]] == nil {
			counts[fields[1]] = map[string]int{}
		}
		for _, kv := range fields[2:] {
			k, v, _ := strings.Cut(kv, "=")
			n := 0
			fmt.Sscan(v, &n)
			counts[fields[1]][k] = n
		}
	}
	// The answer about an unknown pod (404), whether the victim exists or
	// is gone: another pod learns nothing of it. Never a verdict.
	victim := counts[f.victimURL]
	delete(victim, "held-max")
	if victim["404"] == 0 || victim["404"] != sum(victim) {
		t.Errorf("answers to another pod asking about the victim: %v; want 404 every time, as for an unknown pod", victim)
	}
	held := counts[f.selfURL]["held-max"]
	if held == 0 || held > waitapi.DefaultMaxWaitingPerSource {
		t.Errorf("the server held %d of the flooding pod's %d long-polls at once; want some, at most %d", held, flooders, waitapi.DefaultMaxWaitingPerSource)
	}
}
