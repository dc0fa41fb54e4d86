package inject

import (
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/version"
	"k8s.io/utils/ptr"

	"draingate.dev/draingate/api"
)

// With Settings.Watcher the pod gets the watcher, a native sidecar serving
// its socket from its own volume, and each gated container's agent is
// pointed at it through a read-only mount; the installer still runs first.
func TestMutateAddsTheWatcher(t *testing.T) {
	s := testSettings()
	s.Watcher = true
	sidecar := corev1.ContainerRestartPolicyAlways
	for _, tc := range []struct {
		name      string
		pod       *corev1.Pod
		imageVol  bool
		wantInits []string
	}{
		{"emptyDir", webPod(), false, []string{api.InstallerName, api.WatcherName}},
		{"image volume", webPod(), true, []string{api.WatcherName}},
		{"with the pod's own init containers and sidecars", with(func(p *corev1.Pod) {
			p.Spec.InitContainers = []corev1.Container{{Name: "migrate", Image: "m"}, {Name: "envoy", Image: "e", RestartPolicy: &sidecar}}
		}), false, []string{api.InstallerName, api.WatcherName, "migrate", "envoy"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := s
			s.ImageVolume = tc.imageVol
			out, warnings, err := Mutate(tc.pod, s)
			if err != nil || out == tc.pod {
				t.Fatalf("not injected: %v %q", err, warnings)
			}
			if got := containerNames(out.Spec.InitContainers); got != containerNames(namesOnly(tc.wantInits)) {
				t.Fatalf("init containers %s, want %v", got, tc.wantInits)
			}
			w := out.Spec.InitContainers[slices.Index(tc.wantInits, api.WatcherName)]
			if ptr.Deref(w.RestartPolicy, "") != corev1.ContainerRestartPolicyAlways || w.Image != testImage ||
				!slices.Equal(w.Command, []string{api.AgentInImage, "watch", "--socket", api.WatchDir + "/watch.sock", "--memory-limit", "25165824"}) ||
				w.StartupProbe != nil || w.ReadinessProbe != nil || w.LivenessProbe != nil {
				t.Errorf("watcher %+v: want a native sidecar running the agent image's watch, no probes", w)
			}
			if len(w.VolumeMounts) != 1 || w.VolumeMounts[0].Name != api.WatchVolumeName || w.VolumeMounts[0].ReadOnly {
				t.Errorf("watcher mounts %+v, want its own volume, writable", w.VolumeMounts)
			}
			if w.SecurityContext == nil || !ptr.Deref(w.SecurityContext.RunAsNonRoot, false) || ptr.Deref(w.SecurityContext.AllowPrivilegeEscalation, true) {
				t.Errorf("watcher security context %+v, want Pod Security restricted", w.SecurityContext)
			}
			if r := w.Resources; r.Requests.Memory().String() != watcherMemory || r.Limits.Memory().String() != watcherMemory ||
				r.Requests.Cpu().String() != watcherCPU || r.Limits.Cpu().String() != watcherCPU {
				t.Errorf("watcher resources %+v, want the defaults, requests equal to limits", r)
			}
			if !slices.ContainsFunc(out.Spec.Volumes, func(v corev1.Volume) bool { return v.Name == api.WatchVolumeName && v.EmptyDir != nil }) {
				t.Errorf("no %s emptyDir in %+v", api.WatchVolumeName, out.Spec.Volumes)
			}
			app := container(out, "web")
			if !slices.ContainsFunc(app.VolumeMounts, func(m corev1.VolumeMount) bool {
				return m.Name == api.WatchVolumeName && m.MountPath == api.WatchDir && m.ReadOnly
			}) {
				t.Errorf("app mounts %+v, want the watch volume read-only at %s", app.VolumeMounts, api.WatchDir)
			}
			if !hasWatchEnv(app) || slices.Contains(preStopCmd(t, out, "web"), "--watch-socket") {
				t.Errorf("app env %+v, hook %q: want the watcher's socket in %s, not on the command line (an older agent would refuse the flag)",
					app.Env, preStopCmd(t, out, "web"), api.EnvWatchSocket)
			}
		})
	}
}

func hasWatchEnv(c *corev1.Container) bool {
	return slices.ContainsFunc(c.Env, func(e corev1.EnvVar) bool {
		return e.Name == api.EnvWatchSocket && e.Value == api.WatchDir+"/watch.sock"
	})
}

func namesOnly(names []string) []corev1.Container {
	cs := make([]corev1.Container, len(names))
	for i, n := range names {
		cs[i].Name = n
	}
	return cs
}

// No watcher where it cannot watch the pod's own traffic (hostNetwork: the
// node's sockets) or when off; a pod with its names already is refused.
func TestMutateWatcherWhereNot(t *testing.T) {
	s := testSettings()
	s.Watcher = true
	out, _, err := Mutate(with(func(p *corev1.Pod) { p.Spec.HostNetwork = true }), s)
	if err != nil || slices.ContainsFunc(out.Spec.InitContainers, func(c corev1.Container) bool { return c.Name == api.WatcherName }) ||
		hasWatchEnv(container(out, "web")) {
		t.Errorf("hostNetwork pod: %v, init containers %s; want no watcher", err, containerNames(out.Spec.InitContainers))
	}
	out, _, _ = Mutate(webPod(), testSettings())
	if slices.ContainsFunc(out.Spec.Volumes, func(v corev1.Volume) bool { return v.Name == api.WatchVolumeName }) || hasWatchEnv(container(out, "web")) {
		t.Errorf("watcher off: %+v", out.Spec)
	}
	// A name of the watcher's already taken costs the watcher, not the gate.
	clash := with(func(p *corev1.Pod) {
		p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: api.WatcherName, Image: "x"})
	})
	got, w, _ := Mutate(clash, s)
	if got == clash || got.Annotations[api.AnnotationInjected] == "" || hasWatchEnv(container(got, "web")) ||
		slices.ContainsFunc(got.Spec.InitContainers, func(c corev1.Container) bool { return c.Name == api.WatcherName }) {
		t.Errorf("pod with a container named %s: want injected without the watcher; init containers %s", api.WatcherName, containerNames(got.Spec.InitContainers))
	}
	wantWarning(t, w, "no watcher", api.WatcherName)
}

// A container added to a pod injected with the watcher is pointed at it too.
func TestMutateAddedContainerGetsTheWatcher(t *testing.T) {
	s := testSettings()
	s.Watcher = true
	first, _, err := Mutate(webPod(), s)
	if err != nil {
		t.Fatal(err)
	}
	again := first.DeepCopy()
	again.Spec.Containers = append(again.Spec.Containers, corev1.Container{Name: "proxy", Image: "p", Ports: []corev1.ContainerPort{{ContainerPort: 15001}}})
	out, _, err := Mutate(again, s)
	if err != nil || out == again {
		t.Fatalf("not mutated: %v", err)
	}
	if !hasWatchEnv(container(out, "proxy")) || len(out.Spec.InitContainers) != len(first.Spec.InitContainers) {
		t.Errorf("added container's env %+v, init containers %s", container(out, "proxy").Env, containerNames(out.Spec.InitContainers))
	}
}

func TestNativeSidecarsEverywhere(t *testing.T) {
	for _, c := range []struct {
		major, minor string
		want         bool
	}{{"1", "29", false}, {"1", "31", false}, {"1", "32", true}, {"1", "33+", true}, {"2", "0", true}, {"", "", false}} {
		if got := NativeSidecarsEverywhere(&version.Info{Major: c.major, Minor: c.minor}); got != c.want {
			t.Errorf("%s.%s: %v, want %v", c.major, c.minor, got, c.want)
		}
	}
}
