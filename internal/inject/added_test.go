package inject

import (
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	"draingate.dev/draingate/api"
)

// A webhook called after draingate's adds a proxy that takes the pod's
// traffic; the API server calls draingate again. The proxy is gated as the
// app is (same max-wait and fallback, its own hook after), nothing else
// changes, and a third call changes nothing.
func TestMutateGatesContainersAddedLater(t *testing.T) {
	s := testSettings()
	s.MaxWait = 150 * time.Second // as sized from the pod's routes
	first, _, err := Mutate(webPod(), s)
	if err != nil || first == nil {
		t.Fatal(err)
	}
	app, _ := agentCommand(&first.Spec.Containers[0])

	reinvoked := first.DeepCopy()
	reinvoked.Spec.Containers = append(reinvoked.Spec.Containers,
		corev1.Container{Name: "proxy", Image: "proxy:1", Ports: []corev1.ContainerPort{{ContainerPort: 15001}},
			Lifecycle: &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{Sleep: &corev1.SleepAction{Seconds: 20}}}},
		corev1.Container{Name: "logs", Image: "logs:1"}) // no ports: not gated
	s.MaxWait = 0 // a failed route lookup this time: the first answer still holds
	out, warnings, err := Mutate(reinvoked, s)
	if err != nil || out == reinvoked {
		t.Fatalf("reinvoked: not mutated (%v, %q)", err, warnings)
	}
	proxy, ok := agentCommand(&out.Spec.Containers[1])
	if !ok || proxy != app || app.maxWait != 150*time.Second {
		t.Fatalf("proxy hook %q: want the agent waiting as the app does (%+v)", out.Spec.Containers[1].Lifecycle.PreStop.Exec.Command, app)
	}
	if cmd := out.Spec.Containers[1].Lifecycle.PreStop.Exec.Command; !slices.Contains(cmd, "--then-sleep") {
		t.Errorf("proxy hook %q does not run its own sleep after the wait", cmd)
	}
	if !slices.ContainsFunc(out.Spec.Containers[1].VolumeMounts, func(m corev1.VolumeMount) bool { return m.Name == api.VolumeName }) {
		t.Errorf("proxy does not mount the agent")
	}
	if out.Spec.Containers[2].Lifecycle != nil || len(out.Spec.Volumes) != len(first.Spec.Volumes) ||
		len(out.Spec.InitContainers) != len(first.Spec.InitContainers) || !slices.Equal(out.Spec.Containers[0].Lifecycle.PreStop.Exec.Command, first.Spec.Containers[0].Lifecycle.PreStop.Exec.Command) {
		t.Errorf("more changed than the proxy's hook: %+v", out.Spec)
	}
	// The proxy's own 20 s sleep comes after the wait: the grace period
	// grows by it.
	if g, was := ptr.Deref(out.Spec.TerminationGracePeriodSeconds, 0), ptr.Deref(first.Spec.TerminationGracePeriodSeconds, 0); g != was+20 {
		t.Errorf("grace %d s, want %d + 20", g, was)
	}
	if again, w, _ := Mutate(out, s); again != out || len(w) != 0 {
		t.Errorf("a third call changed the pod (%q)", w)
	}

	// An added container that cannot be gated is said so, and nothing changes.
	bad := first.DeepCopy()
	bad.Spec.Containers = append(bad.Spec.Containers, corev1.Container{Name: "proxy", Ports: []corev1.ContainerPort{{ContainerPort: 15001}},
		VolumeMounts: []corev1.VolumeMount{{Name: "x", MountPath: api.AgentDir}}})
	if got, w, _ := Mutate(bad, s); got != bad || len(w) != 1 || !strings.Contains(w[0], "not gated") || strings.Contains(w[0], "not injected") || !strings.Contains(w[0], `"proxy"`) {
		t.Errorf("conflicting added container: changed %t, warnings %q", got != bad, w)
	}
}
