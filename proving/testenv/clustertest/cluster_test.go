package clustertest

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"draingate.dev/draingate/proving/testenv"
	"draingate.dev/draingate/proving/testutil"
)

func appContainer() corev1.Container {
	return corev1.Container{
		Name:            "app",
		Image:           testenv.TestAppImage,
		ImagePullPolicy: corev1.PullNever,
		Args:            []string{"serve"},
		Ports:           []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}},
		ReadinessProbe: &corev1.Probe{
			ProbeHandler:  corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/", Port: intstr.FromString("http")}},
			PeriodSeconds: 1,
		},
	}
}

func service(name string, selector map[string]string) *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.ServiceSpec{
			Selector: selector,
			Ports:    []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromString("http")}},
		},
	}
}

// TestDeploymentServiceDNS: a Deployment of an offline-built image becomes
// Ready, its EndpointSlice lists both pods, the ClusterIP answers from the
// host (reaching both pods), and the Service's DNS name answers from a pod.
func TestDeploymentServiceDNS(t *testing.T) {
	c := testenv.Get(t)
	ns := c.Namespace(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	labels := map[string]string{"app": "web"}
	_, err := c.Client.AppsV1().Deployments(ns).Create(ctx, &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](2),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{appContainer()}},
			},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	svc, err := c.Client.CoreV1().Services(ns).Create(ctx, service("web", labels), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, ctx, "deployment ready", func() (bool, error) {
		d, err := c.Client.AppsV1().Deployments(ns).Get(ctx, "web", metav1.GetOptions{})
		return err == nil && d.Status.ReadyReplicas == 2, err
	})
	pods, err := c.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=web"})
	if err != nil || len(pods.Items) != 2 {
		t.Fatalf("pods: %v, %d", err, len(pods.Items))
	}
	want := map[string]string{} // pod IP → pod name
	for _, p := range pods.Items {
		want[p.Status.PodIP] = p.Name
	}
	testutil.Eventually(t, ctx, "EndpointSlice lists both pods ready", func() (bool, error) {
		ready := readyEndpoints(ctx, c.Client, ns, "web")
		for ip := range want {
			if !ready[ip] {
				return false, nil
			}
		}
		return len(ready) == 2, nil
	})

	// From the host, through kube-proxy's rules: both pods answer.
	url := "http://" + svc.Spec.ClusterIP + "/"
	seen := map[string]bool{}
	// A new connection per request: kube-proxy picks a backend per connection.
	cl := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	testutil.Eventually(t, ctx, "ClusterIP answers from both pods", func() (bool, error) {
		resp, err := cl.Get(url)
		if err != nil {
			return false, nil
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		seen[strings.TrimSpace(strings.TrimPrefix(string(body), "hello from "))] = true
		return len(seen) == 2, nil
	})
	for _, name := range want {
		if !seen[name] {
			t.Errorf("pod %s never answered on the ClusterIP; answers came from %v", name, seen)
		}
	}

	// From inside another pod, by the Service's DNS name.
	_, err = c.Client.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "client"},
		Spec: corev1.PodSpec{
			RestartPolicy: corev1.RestartPolicyNever,
			Containers: []corev1.Container{{
				Name: "get", Image: testenv.TestAppImage, ImagePullPolicy: corev1.PullNever,
				Args: []string{"get", fmt.Sprintf("http://web.%s.svc.cluster.local/", ns)},
			}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, ctx, "client pod succeeded", func() (bool, error) {
		p, err := c.Client.CoreV1().Pods(ns).Get(ctx, "client", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		if p.Status.Phase == corev1.PodFailed {
			return false, fmt.Errorf("client pod failed: %s", podLog(ctx, c.Client, ns, "client", "get"))
		}
		return p.Status.Phase == corev1.PodSucceeded, nil
	})
	out := podLog(ctx, c.Client, ns, "client", "get")
	if !strings.Contains(out, "hello from web-") {
		t.Fatalf("client pod output %q, want an answer from a web pod", out)
	}
}

// TestPreStopOrdering measures, on this cluster, the ordering draingate
// relies on: deleting a pod runs its preStop exec hook (a static binary an
// init container copied into an emptyDir) inside the app container; the
// EndpointSlice marks the endpoint terminating at deletion, not after the
// hook; SIGTERM comes only after the hook returned; and the app exits by
// itself within the grace period.
func TestPreStopOrdering(t *testing.T) {
	c := testenv.Get(t)
	ns := c.Namespace(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	const hookSleep = 4 * time.Second
	labels := map[string]string{"app": "gated"}
	app := appContainer()
	app.VolumeMounts = []corev1.VolumeMount{{Name: "hooks", MountPath: "/hooks", ReadOnly: true}}
	app.Lifecycle = &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{
		Exec: &corev1.ExecAction{Command: []string{"/hooks/testapp", "hook", "-sleep", hookSleep.String()}},
	}}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "gated", Labels: labels},
		Spec: corev1.PodSpec{
			TerminationGracePeriodSeconds: ptr.To[int64](60),
			InitContainers: []corev1.Container{{
				Name: "install", Image: testenv.TestAppImage, ImagePullPolicy: corev1.PullNever,
				Args:         []string{"copy", "/hooks"},
				VolumeMounts: []corev1.VolumeMount{{Name: "hooks", MountPath: "/hooks"}},
			}},
			Containers: []corev1.Container{app},
			Volumes: []corev1.Volume{{Name: "hooks", VolumeSource: corev1.VolumeSource{
				EmptyDir: &corev1.EmptyDirVolumeSource{SizeLimit: ptr.To(resourceMi(64))},
			}}},
		},
	}
	if _, err := c.Client.CoreV1().Services(ns).Create(ctx, service("gated", labels), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Client.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var podIP string
	testutil.Eventually(t, ctx, "pod ready and in its EndpointSlice", func() (bool, error) {
		p, err := c.Client.CoreV1().Pods(ns).Get(ctx, "gated", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		podIP = p.Status.PodIP
		return podIP != "" && readyEndpoints(ctx, c.Client, ns, "gated")[podIP], nil
	})

	// Watch everything before deleting: the container log, the slices, the pod.
	logLines := make(chan string, 64)
	logs, err := c.Client.CoreV1().Pods(ns).GetLogs("gated", &corev1.PodLogOptions{Container: "app", Follow: true}).Stream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		defer close(logLines)
		sc := bufio.NewScanner(logs)
		for sc.Scan() {
			logLines <- sc.Text()
		}
	}()
	sliceW, err := c.Client.DiscoveryV1().EndpointSlices(ns).Watch(ctx, metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=gated"})
	if err != nil {
		t.Fatal(err)
	}
	defer sliceW.Stop()
	terminatingAt := make(chan time.Time, 1)
	go func() {
		for ev := range sliceW.ResultChan() {
			es, ok := ev.Object.(*discoveryv1.EndpointSlice)
			if !ok {
				continue
			}
			for _, e := range es.Endpoints {
				if len(e.Addresses) > 0 && e.Addresses[0] == podIP && ptr.Deref(e.Conditions.Terminating, false) {
					select {
					case terminatingAt <- time.Now():
					default:
					}
				}
			}
		}
	}()
	podW, err := c.Client.CoreV1().Pods(ns).Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=gated"})
	if err != nil {
		t.Fatal(err)
	}
	defer podW.Stop()

	deletedAt := time.Now()
	if err := c.Client.CoreV1().Pods(ns).Delete(ctx, "gated", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	var last *corev1.Pod
	var goneAt time.Time
	for goneAt.IsZero() {
		select {
		case ev, ok := <-podW.ResultChan():
			if !ok {
				t.Fatal("pod watch closed before the pod was gone")
			}
			if p, ok := ev.Object.(*corev1.Pod); ok {
				last = p
			}
			if ev.Type == watch.Deleted {
				goneAt = time.Now()
			}
		case <-ctx.Done():
			t.Fatal("pod not gone in time")
		}
	}
	events := map[string]time.Time{}
	var pid1 string
	for line := range logLines {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		if ns, err := strconv.ParseInt(f[1], 10, 64); err == nil {
			events[f[0]] = time.Unix(0, ns)
		}
		if f[0] == "hook-start" && len(f) > 2 {
			pid1 = strings.Join(f[2:], " ")
		}
	}
	var terminating time.Time
	select {
	case terminating = <-terminatingAt:
	default:
		t.Fatal("the EndpointSlice never marked the endpoint terminating")
	}
	hookStart, hookEnd, sigterm, exit := events["hook-start"], events["hook-end"], events["sigterm"], events["exit"]
	for name, at := range map[string]time.Time{"hook-start": hookStart, "hook-end": hookEnd, "sigterm": sigterm, "exit": exit} {
		if at.IsZero() {
			t.Fatalf("no %q line in the container log; events: %v", name, events)
		}
	}
	if !strings.Contains(pid1, "testapp serve") {
		t.Errorf("hook saw PID 1 as %s: not inside the app container", pid1)
	}
	if hookStart.Before(deletedAt) {
		t.Errorf("hook started before the delete call")
	}
	if !terminating.Before(hookEnd) {
		t.Errorf("endpoint marked terminating at %s, after the hook returned at %s: want at deletion", terminating.Format(time.StampMicro), hookEnd.Format(time.StampMicro))
	}
	if sigterm.Before(hookEnd) {
		t.Errorf("SIGTERM at %s came before the hook returned at %s", sigterm.Format(time.StampMicro), hookEnd.Format(time.StampMicro))
	}
	if exit.Before(sigterm) {
		t.Errorf("app exit logged before SIGTERM")
	}
	// Exit code 0 means the app stopped by itself after SIGTERM, so the
	// kubelet never had to SIGKILL it at the end of the grace period.
	var term *corev1.ContainerStateTerminated
	for _, cs := range last.Status.ContainerStatuses {
		if cs.Name == "app" {
			term = cs.State.Terminated
		}
	}
	if term == nil || term.ExitCode != 0 {
		t.Errorf("app container final state %+v, want terminated with exit code 0", term)
	}
	if grace := time.Duration(*pod.Spec.TerminationGracePeriodSeconds) * time.Second; goneAt.Sub(deletedAt) > grace {
		t.Errorf("pod gone %s after delete, beyond its %s grace period", goneAt.Sub(deletedAt), grace)
	}
	ms := func(d time.Duration) string { return fmt.Sprintf("%.0f ms", float64(d)/float64(time.Millisecond)) }
	t.Logf("after delete: endpoint terminating %s, hook start %s, hook end %s (hook %s), SIGTERM %s (%s after hook end), app exit %s, pod gone %s",
		ms(terminating.Sub(deletedAt)), ms(hookStart.Sub(deletedAt)), ms(hookEnd.Sub(deletedAt)), hookSleep,
		ms(sigterm.Sub(deletedAt)), ms(sigterm.Sub(hookEnd)), ms(exit.Sub(deletedAt)), ms(goneAt.Sub(deletedAt)))
}

// readyEndpoints returns the addresses of a Service's ready endpoints.
func readyEndpoints(ctx context.Context, cl kubernetes.Interface, ns, svc string) map[string]bool {
	out := map[string]bool{}
	slices, err := cl.DiscoveryV1().EndpointSlices(ns).List(ctx, metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=" + svc})
	if err != nil {
		return out
	}
	for _, s := range slices.Items {
		for _, e := range s.Endpoints {
			if ptr.Deref(e.Conditions.Ready, false) {
				for _, a := range e.Addresses {
					out[a] = true
				}
			}
		}
	}
	return out
}

func podLog(ctx context.Context, cl kubernetes.Interface, ns, pod, container string) string {
	b, err := cl.CoreV1().Pods(ns).GetLogs(pod, &corev1.PodLogOptions{Container: container}).DoRaw(ctx)
	if err != nil {
		return "(log: " + err.Error() + ")"
	}
	return string(b)
}

func resourceMi(n int64) resource.Quantity { return *resource.NewQuantity(n<<20, resource.BinarySI) }
