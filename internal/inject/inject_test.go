package inject

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	jsonpatch "github.com/evanphx/json-patch/v5"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"draingate.dev/draingate/api"
	"draingate.dev/draingate/internal/prestop"
)

const (
	testImage  = "registry.example.com/draingate/draingate-prestop:0.4.0"
	testServer = "http://draingate.draingate-system.svc:8080"
	testNS     = "shop"
)

func testSettings() Settings {
	return Settings{
		AgentImage:      testImage,
		Server:          testServer,
		Version:         "0.4.0",
		ServerNamespace: "draingate-system",
	}
}

// webPod is a Deployment's pod as the API server hands it to a mutating
// webhook: named by generateName (metadata.name still empty), defaulted, a
// distroless app with a named port, probes, resources and no hook.
func webPod() *corev1.Pod {
	return &corev1.Pod{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{
			GenerateName: "web-7d9c6b5f4-",
			Namespace:    testNS,
			Labels:       map[string]string{"app": "web", "pod-template-hash": "7d9c6b5f4"},
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "web-7d9c6b5f4", UID: "0e6f4a52-9a9e-4c55-8a35-6f1d1b0f0a11",
				Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true),
			}},
		},
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{{
				Name:  "web",
				Image: "gcr.io/distroless/static-debian12:nonroot",
				Args:  []string{"--listen=:8080"},
				Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080, Protocol: corev1.ProtocolTCP}},
				Env:   []corev1.EnvVar{{Name: "LOG_LEVEL", Value: "info"}},
				Resources: corev1.ResourceRequirements{
					Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("64Mi")},
				},
				ReadinessProbe: &corev1.Probe{
					ProbeHandler:     corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/healthz", Port: intstr.FromString("http"), Scheme: corev1.URISchemeHTTP}},
					PeriodSeconds:    5,
					TimeoutSeconds:   1,
					SuccessThreshold: 1,
					FailureThreshold: 3,
				},
				TerminationMessagePath:   corev1.TerminationMessagePathDefault,
				TerminationMessagePolicy: corev1.TerminationMessageReadFile,
				ImagePullPolicy:          corev1.PullIfNotPresent,
				VolumeMounts: []corev1.VolumeMount{{
					Name: "kube-api-access-x7k2p", MountPath: "/var/run/secrets/kubernetes.io/serviceaccount", ReadOnly: true,
				}},
			}},
			Volumes: []corev1.Volume{{
				Name: "kube-api-access-x7k2p",
				VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
					Sources: []corev1.VolumeProjection{{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{ExpirationSeconds: ptr.To(int64(3607)), Path: "token"}}},
				}},
			}},
			RestartPolicy:                 corev1.RestartPolicyAlways,
			TerminationGracePeriodSeconds: ptr.To(int64(30)),
			DNSPolicy:                     corev1.DNSClusterFirst,
			ServiceAccountName:            "default",
			SecurityContext:               &corev1.PodSecurityContext{RunAsNonRoot: ptr.To(true)},
			SchedulerName:                 corev1.DefaultSchedulerName,
			EnableServiceLinks:            ptr.To(true),
			PreemptionPolicy:              ptr.To(corev1.PreemptLowerPriority),
		},
	}
}

// with returns webPod changed by f.
func with(f func(p *corev1.Pod)) *corev1.Pod {
	p := webPod()
	f(p)
	return p
}

func annotate(kv ...string) func(p *corev1.Pod) {
	return func(p *corev1.Pod) {
		if p.Annotations == nil {
			p.Annotations = map[string]string{}
		}
		for i := 0; i+1 < len(kv); i += 2 {
			p.Annotations[kv[i]] = kv[i+1]
		}
	}
}

func preStop(h corev1.LifecycleHandler) func(p *corev1.Pod) {
	return func(p *corev1.Pod) { p.Spec.Containers[0].Lifecycle = &corev1.Lifecycle{PreStop: &h} }
}

// waitCmd is the agent's command for the default settings, then the hook.
func waitCmd(then ...string) []string {
	return append([]string{"/draingate/draingate-prestop", "wait", "--max-wait", "1m30s", "--fallback", "30s", "--log", "/proc/1/fd/1"}, then...)
}

func container(p *corev1.Pod, name string) *corev1.Container {
	for i := range p.Spec.Containers {
		if p.Spec.Containers[i].Name == name {
			return &p.Spec.Containers[i]
		}
	}
	return nil
}

func preStopCmd(t *testing.T, p *corev1.Pod, name string) []string {
	t.Helper()
	c := container(p, name)
	if c == nil || c.Lifecycle == nil || c.Lifecycle.PreStop == nil || c.Lifecycle.PreStop.Exec == nil {
		t.Fatalf("container %s has no preStop exec hook", name)
	}
	return c.Lifecycle.PreStop.Exec.Command
}

func wantCmd(t *testing.T, p *corev1.Pod, name string, want []string) {
	t.Helper()
	if got := preStopCmd(t, p, name); !slices.Equal(got, want) {
		t.Errorf("container %s preStop:\n got %q\nwant %q", name, got, want)
	}
}

func wantGrace(t *testing.T, p *corev1.Pod, want int64) {
	t.Helper()
	if got := p.Spec.TerminationGracePeriodSeconds; got == nil || *got != want {
		t.Errorf("terminationGracePeriodSeconds = %v, want %d", ptr.Deref(got, -1), want)
	}
}

func wantWarning(t *testing.T, warnings []string, parts ...string) {
	t.Helper()
	for _, w := range warnings {
		all := true
		for _, p := range parts {
			all = all && strings.Contains(w, p)
		}
		if all {
			if len(w) > 256 {
				t.Errorf("warning longer than the API server's 256 characters: %q", w)
			}
			return
		}
	}
	t.Errorf("no warning containing all of %q in %q", parts, warnings)
}

// injected runs the checks every injected pod must pass: what Mutate adds
// is there, the installer passes restricted Pod Security, nothing of the
// original was lost, Mutate is idempotent, and Patch reproduces the result.
func injected(t *testing.T, orig, out *corev1.Pod, s Settings) {
	t.Helper()
	s, err := s.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	if out == orig {
		t.Fatal("pod not injected")
	}
	if out.Annotations[api.AnnotationInjected] != s.Version {
		t.Errorf("annotation %s = %q, want %q", api.AnnotationInjected, out.Annotations[api.AnnotationInjected], s.Version)
	}
	checkVolume(t, out, s)
	checkInstaller(t, orig, out, s)
	for i := range out.Spec.Containers {
		checkContainer(t, &orig.Spec.Containers[i], &out.Spec.Containers[i], s)
	}
	if len(out.Spec.Containers) != len(orig.Spec.Containers) {
		t.Errorf("containers: %d, was %d", len(out.Spec.Containers), len(orig.Spec.Containers))
	}
	if g, o := ptr.Deref(out.Spec.TerminationGracePeriodSeconds, 30), ptr.Deref(orig.Spec.TerminationGracePeriodSeconds, 30); g < o {
		t.Errorf("grace period lowered from %d to %d", o, g)
	}
	again, warnings, err := Mutate(out, s)
	if err != nil || again != out || len(warnings) > 0 {
		t.Errorf("second Mutate: changed %t, warnings %q, err %v", again != out, warnings, err)
	}
	if p, err := Patch(out, again); err != nil || p != nil {
		t.Errorf("Patch after the second Mutate = %s, %v; want nothing", p, err)
	}
	checkPatch(t, orig, out)
}

func checkVolume(t *testing.T, out *corev1.Pod, s Settings) {
	t.Helper()
	i := slices.IndexFunc(out.Spec.Volumes, func(v corev1.Volume) bool { return v.Name == api.VolumeName })
	if i < 0 {
		t.Fatalf("no volume %s", api.VolumeName)
	}
	v := out.Spec.Volumes[i]
	if s.ImageVolume {
		if v.Image == nil || v.Image.Reference != s.AgentImage || v.Image.PullPolicy != corev1.PullIfNotPresent || v.EmptyDir != nil {
			t.Errorf("image volume: %+v", v.VolumeSource)
		}
		return
	}
	if v.EmptyDir == nil || v.EmptyDir.SizeLimit == nil || v.EmptyDir.SizeLimit.Cmp(s.EmptyDirSizeLimit) != 0 || v.EmptyDir.Medium != corev1.StorageMediumDefault {
		t.Errorf("emptyDir volume: %+v", v.VolumeSource)
	}
}

// checkInstaller asserts the restricted Pod Security fields one by one
// (k8s.io/kubernetes's validation is not importable here).
func checkInstaller(t *testing.T, orig, out *corev1.Pod, s Settings) {
	t.Helper()
	if s.ImageVolume {
		if !reflect.DeepEqual(out.Spec.InitContainers, orig.Spec.InitContainers) {
			t.Errorf("image-volume mode changed the init containers: %+v", out.Spec.InitContainers)
		}
		return
	}
	if len(out.Spec.InitContainers) != len(orig.Spec.InitContainers)+1 {
		t.Fatalf("init containers: %d, was %d", len(out.Spec.InitContainers), len(orig.Spec.InitContainers))
	}
	if !reflect.DeepEqual(out.Spec.InitContainers[1:], orig.Spec.InitContainers) && len(orig.Spec.InitContainers) > 0 {
		t.Errorf("the pod's own init containers changed or moved")
	}
	c := out.Spec.InitContainers[0]
	if c.Name != api.InstallerName || c.Image != s.AgentImage || !slices.Equal(c.Command, []string{"/bin/draingate-prestop", "install", "/draingate"}) {
		t.Errorf("installer: name %s image %s command %q", c.Name, c.Image, c.Command)
	}
	if c.RestartPolicy != nil {
		t.Errorf("installer is a sidecar")
	}
	if !reflect.DeepEqual(c.VolumeMounts, []corev1.VolumeMount{{Name: api.VolumeName, MountPath: "/draingate"}}) {
		t.Errorf("installer mounts %+v", c.VolumeMounts)
	}
	sc := c.SecurityContext
	switch {
	case sc == nil:
		t.Fatal("installer has no securityContext")
	case !ptr.Deref(sc.RunAsNonRoot, false):
		t.Error("installer: runAsNonRoot is not true")
	case ptr.Deref(sc.RunAsUser, 0) != 65532:
		t.Errorf("installer: runAsUser %v", sc.RunAsUser)
	case ptr.Deref(sc.AllowPrivilegeEscalation, true):
		t.Error("installer: allowPrivilegeEscalation is not false")
	case sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(sc.Capabilities.Add) > 0:
		t.Errorf("installer: capabilities %+v", sc.Capabilities)
	case sc.SeccompProfile == nil || sc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault:
		t.Errorf("installer: seccompProfile %+v", sc.SeccompProfile)
	case !ptr.Deref(sc.ReadOnlyRootFilesystem, false):
		t.Error("installer: readOnlyRootFilesystem is not true")
	case ptr.Deref(sc.Privileged, false) || sc.ProcMount != nil || sc.SELinuxOptions != nil || sc.WindowsOptions != nil:
		t.Errorf("installer: extra security settings %+v", sc)
	case len(c.Ports) > 0:
		t.Error("installer has ports")
	}
	if len(s.InstallerResources.Requests)+len(s.InstallerResources.Limits) > 0 {
		return // the case checks the settings' own
	}
	for _, l := range []corev1.ResourceList{c.Resources.Requests, c.Resources.Limits} {
		if l.Cpu().Cmp(resource.MustParse("10m")) != 0 || l.Memory().Cmp(resource.MustParse("16Mi")) != 0 {
			t.Errorf("installer resources %+v", c.Resources)
		}
	}
}

// checkContainer asserts a container is either untouched or gated with
// everything it had kept.
func checkContainer(t *testing.T, orig, out *corev1.Container, s Settings) {
	t.Helper()
	if reflect.DeepEqual(orig, out) {
		return
	}
	dir := "/draingate"
	if s.ImageVolume {
		dir = "/draingate-image"
	}
	want := corev1.VolumeMount{Name: api.VolumeName, MountPath: dir, ReadOnly: true}
	if !slices.ContainsFunc(out.VolumeMounts, func(m corev1.VolumeMount) bool { return reflect.DeepEqual(m, want) }) {
		t.Errorf("%s: no read-only mount of %s at %s: %+v", out.Name, api.VolumeName, dir, out.VolumeMounts)
	}
	same := func(a, b any) bool { return reflect.DeepEqual(a, b) }
	if !slices.EqualFunc(out.VolumeMounts[:len(orig.VolumeMounts)], orig.VolumeMounts, func(a, b corev1.VolumeMount) bool { return same(a, b) }) ||
		!slices.EqualFunc(out.Env[:len(orig.Env)], orig.Env, func(a, b corev1.EnvVar) bool { return same(a, b) }) {
		t.Errorf("%s: its own mounts or env changed", out.Name)
	}
	seen := map[string]int{}
	for _, e := range out.Env {
		seen[e.Name]++
	}
	for name, field := range map[string]string{
		"DRAINGATE_POD_NAME": "metadata.name", "DRAINGATE_POD_NAMESPACE": "metadata.namespace", "DRAINGATE_POD_UID": "metadata.uid",
		"DRAINGATE_POD_IP": "status.podIP", "DRAINGATE_HOST_IP": "status.hostIP",
	} {
		i := slices.IndexFunc(out.Env, func(e corev1.EnvVar) bool { return e.Name == name })
		if i < 0 || fieldPath(out.Env[i]) != field || seen[name] != 1 {
			t.Errorf("%s: env %s is not the downward API's %s exactly once: %+v", out.Name, name, field, out.Env)
		}
	}
	if seen["DRAINGATE_SERVER"] != 1 {
		t.Errorf("%s: DRAINGATE_SERVER set %d times", out.Name, seen["DRAINGATE_SERVER"])
	}
	cmd := preStopCmdOf(out)
	if len(cmd) < 2 || cmd[1] != "wait" || !strings.HasPrefix(cmd[0], dir+"/") {
		t.Errorf("%s: preStop %q does not run the agent from %s", out.Name, cmd, dir)
	}
	if orig.Lifecycle != nil && out.Lifecycle.PostStart != orig.Lifecycle.PostStart && !reflect.DeepEqual(out.Lifecycle.PostStart, orig.Lifecycle.PostStart) {
		t.Errorf("%s: postStart changed", out.Name)
	}
	o, g := *orig, *out
	o.VolumeMounts, g.VolumeMounts, o.Env, g.Env, o.Lifecycle, g.Lifecycle = nil, nil, nil, nil, nil, nil
	if !reflect.DeepEqual(o, g) {
		t.Errorf("%s: fields other than mounts, env and lifecycle changed", out.Name)
	}
}

func preStopCmdOf(c *corev1.Container) []string {
	if c.Lifecycle == nil || c.Lifecycle.PreStop == nil || c.Lifecycle.PreStop.Exec == nil {
		return nil
	}
	return c.Lifecycle.PreStop.Exec.Command
}

// checkPatch applies Patch to orig's JSON with an independent RFC 6902
// implementation and expects mutated's JSON.
func checkPatch(t *testing.T, orig, mutated *corev1.Pod) {
	t.Helper()
	p, err := Patch(orig, mutated)
	if err != nil {
		t.Fatalf("Patch: %v", err)
	}
	origJSON, _ := json.Marshal(orig)
	got := applyPatch(t, origJSON, p)
	wantJSON, _ := json.Marshal(mutated)
	if !jsonEqual(t, got, wantJSON) {
		t.Errorf("patch applied to the original is not the mutated pod\npatch: %s\n got: %s\nwant: %s", p, got, wantJSON)
	}
}

func applyPatch(t *testing.T, doc, patch []byte) []byte {
	t.Helper()
	if patch == nil {
		return doc
	}
	ops, err := jsonpatch.DecodePatch(patch)
	if err != nil {
		t.Fatalf("patch %s does not decode: %v", patch, err)
	}
	out, err := ops.Apply(doc)
	if err != nil {
		t.Fatalf("patch %s does not apply: %v", patch, err)
	}
	return out
}

func jsonEqual(t *testing.T, a, b []byte) bool {
	t.Helper()
	var av, bv any
	if err := json.Unmarshal(a, &av); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &bv); err != nil {
		t.Fatal(err)
	}
	return reflect.DeepEqual(av, bv)
}

// unchanged asserts Mutate gave the pod back as it was.
func unchanged(t *testing.T, orig, out *corev1.Pod) {
	t.Helper()
	if out != orig {
		t.Errorf("pod was changed")
	}
}

func TestMutate(t *testing.T) {
	sidecar := corev1.ContainerRestartPolicyAlways
	tests := []struct {
		name     string
		pod      *corev1.Pod
		settings func(*Settings)
		// check gets the original and the result; injected pods are also
		// checked by injected().
		check        func(t *testing.T, orig, out *corev1.Pod, warnings []string)
		wantInjected bool
	}{
		{
			name:         "distroless app without a hook",
			pod:          webPod(),
			wantInjected: true,
			check: func(t *testing.T, orig, out *corev1.Pod, warnings []string) {
				wantCmd(t, out, "web", waitCmd())
				wantGrace(t, out, 90+30)
				if len(warnings) > 0 {
					t.Errorf("warnings %q", warnings)
				}
				if container(out, "web").Lifecycle.PostStart != nil {
					t.Error("postStart appeared")
				}
			},
		},
		{
			name: "exec hook argv kept exactly",
			pod: with(preStop(corev1.LifecycleHandler{Exec: &corev1.ExecAction{Command: []string{
				"/bin/sh", "-c", `echo "bye now" && kill -TERM 1; sleep '5'`, "--", "--max-wait", "", " spaced arg ", `back\slash`,
			}}})),
			wantInjected: true,
			check: func(t *testing.T, orig, out *corev1.Pod, warnings []string) {
				wantCmd(t, out, "web", waitCmd("--", "/bin/sh", "-c", `echo "bye now" && kill -TERM 1; sleep '5'`, "--", "--max-wait", "", " spaced arg ", `back\slash`))
				wantGrace(t, out, 120)
			},
		},
		{
			name: "exec hook alongside postStart",
			pod: with(func(p *corev1.Pod) {
				p.Spec.Containers[0].Lifecycle = &corev1.Lifecycle{
					PostStart: &corev1.LifecycleHandler{Exec: &corev1.ExecAction{Command: []string{"/app/warmup"}}},
					PreStop:   &corev1.LifecycleHandler{Exec: &corev1.ExecAction{Command: []string{"/app/drain"}}},
				}
			}),
			wantInjected: true,
			check: func(t *testing.T, orig, out *corev1.Pod, warnings []string) {
				wantCmd(t, out, "web", waitCmd("--", "/app/drain"))
				if !slices.Equal(container(out, "web").Lifecycle.PostStart.Exec.Command, []string{"/app/warmup"}) {
					t.Error("postStart lost")
				}
			},
		},
		{
			name: "httpGet with a named port",
			pod: with(func(p *corev1.Pod) {
				p.Spec.Containers[0].Ports = append(p.Spec.Containers[0].Ports, corev1.ContainerPort{Name: "admin", ContainerPort: 9090})
				preStop(corev1.LifecycleHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/quitquitquit?grace=5s", Port: intstr.FromString("admin"), Scheme: corev1.URISchemeHTTP}})(p)
			}),
			wantInjected: true,
			check: func(t *testing.T, orig, out *corev1.Pod, warnings []string) {
				wantCmd(t, out, "web", waitCmd("--then-http-get", "http://127.0.0.1:9090/quitquitquit?grace=5s"))
				wantGrace(t, out, 120)
			},
		},
		{
			name:         "httpGet with a numeric port, no path, no scheme",
			pod:          with(preStop(corev1.LifecycleHandler{HTTPGet: &corev1.HTTPGetAction{Port: intstr.FromInt32(8080)}})),
			wantInjected: true,
			check: func(t *testing.T, orig, out *corev1.Pod, warnings []string) {
				wantCmd(t, out, "web", waitCmd("--then-http-get", "http://127.0.0.1:8080"))
			},
		},
		{
			name:         "httpGet with a relative path and spaces",
			pod:          with(preStop(corev1.LifecycleHandler{HTTPGet: &corev1.HTTPGetAction{Port: intstr.FromString("http"), Path: "drain now"}})),
			wantInjected: true,
			check: func(t *testing.T, orig, out *corev1.Pod, warnings []string) {
				wantCmd(t, out, "web", waitCmd("--then-http-get", "http://127.0.0.1:8080/drain%20now"))
			},
		},
		{
			name: "httpGet with a port name the container lacks",
			pod:  with(preStop(corev1.LifecycleHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/stop", Port: intstr.FromString("admin")}})),
			check: func(t *testing.T, orig, out *corev1.Pod, warnings []string) {
				unchanged(t, orig, out)
				wantWarning(t, warnings, "not injected", `container "web"`, `"admin"`)
			},
		},
		{
			name: "httpGet https",
			pod:  with(preStop(corev1.LifecycleHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/stop", Port: intstr.FromInt32(8443), Scheme: corev1.URISchemeHTTPS}})),
			check: func(t *testing.T, orig, out *corev1.Pod, warnings []string) {
				unchanged(t, orig, out)
				wantWarning(t, warnings, "not injected", `container "web"`, "HTTPS", "plain http", api.AnnotationContainers)
			},
		},
		{
			name: "httpGet with headers",
			pod: with(preStop(corev1.LifecycleHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/stop", Port: intstr.FromInt32(8080),
				HTTPHeaders: []corev1.HTTPHeader{{Name: "Authorization", Value: "Bearer s3cret"}}}})),
			check: func(t *testing.T, orig, out *corev1.Pod, warnings []string) {
				unchanged(t, orig, out)
				wantWarning(t, warnings, "not injected", `container "web"`, "headers")
				for _, w := range warnings {
					if strings.Contains(w, "s3cret") {
						t.Errorf("warning shows a header value: %q", w)
					}
				}
			},
		},
		{
			name: "httpGet with a host",
			pod:  with(preStop(corev1.LifecycleHandler{HTTPGet: &corev1.HTTPGetAction{Host: "10.0.0.7", Path: "/deregister", Port: intstr.FromInt32(80)}})),
			check: func(t *testing.T, orig, out *corev1.Pod, warnings []string) {
				unchanged(t, orig, out)
				wantWarning(t, warnings, "not injected", `"10.0.0.7"`, "from the node")
			},
		},
		{
			name:         "sleep hook",
			pod:          with(preStop(corev1.LifecycleHandler{Sleep: &corev1.SleepAction{Seconds: 15}})),
			wantInjected: true,
			check: func(t *testing.T, orig, out *corev1.Pod, warnings []string) {
				wantCmd(t, out, "web", waitCmd("--then-sleep", "15s"))
				wantGrace(t, out, 90+15+30)
			},
		},
		{
			name:         "zero sleep hook",
			pod:          with(preStop(corev1.LifecycleHandler{Sleep: &corev1.SleepAction{Seconds: 0}})),
			wantInjected: true,
			check: func(t *testing.T, orig, out *corev1.Pod, warnings []string) {
				wantCmd(t, out, "web", waitCmd("--then-sleep", "0s"))
			},
		},
		{
			name:         "tcpSocket hook is dropped with a warning",
			pod:          with(preStop(corev1.LifecycleHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt32(8080)}})),
			wantInjected: true,
			check: func(t *testing.T, orig, out *corev1.Pod, warnings []string) {
				wantCmd(t, out, "web", waitCmd())
				wantWarning(t, warnings, `container "web"`, "tcpSocket", "dropped")
			},
		},
		{
			name: "tcpSocket hook with a host",
			pod:  with(preStop(corev1.LifecycleHandler{TCPSocket: &corev1.TCPSocketAction{Host: "169.254.169.254", Port: intstr.FromInt32(80)}})),
			check: func(t *testing.T, orig, out *corev1.Pod, warnings []string) {
				unchanged(t, orig, out)
				wantWarning(t, warnings, "not injected", "tcpSocket", `"169.254.169.254"`)
			},
		},
		{
			name: "hook with two actions is left to validation",
			pod: with(preStop(corev1.LifecycleHandler{Exec: &corev1.ExecAction{Command: []string{"/x"}},
				Sleep: &corev1.SleepAction{Seconds: 1}})),
			check: func(t *testing.T, orig, out *corev1.Pod, warnings []string) {
				unchanged(t, orig, out)
				wantWarning(t, warnings, "not injected", "2 actions")
			},
		},
		{
			name: "exec hook without a command",
			pod:  with(preStop(corev1.LifecycleHandler{Exec: &corev1.ExecAction{}})),
			check: func(t *testing.T, orig, out *corev1.Pod, warnings []string) {
				unchanged(t, orig, out)
				wantWarning(t, warnings, "not injected", "no command")
			},
		},
		{
			name: "hook already runs the agent (injected by hand)",
			pod: with(func(p *corev1.Pod) {
				preStop(corev1.LifecycleHandler{Exec: &corev1.ExecAction{Command: []string{"/draingate/draingate-prestop", "wait", "--max-wait", "60s"}}})(p)
			}),
			check: func(t *testing.T, orig, out *corev1.Pod, warnings []string) {
				unchanged(t, orig, out)
				wantWarning(t, warnings, "not injected", "already runs draingate-prestop")
			},
		},
		{
			name: "several containers, some without ports",
			pod: with(func(p *corev1.Pod) {
				p.Spec.Containers = append(p.Spec.Containers,
					corev1.Container{Name: "log-shipper", Image: "fluent/fluent-bit:3.1", Args: []string{"-c", "/etc/fluent-bit/fluent-bit.conf"}},
					corev1.Container{Name: "metrics", Image: "prom/statsd-exporter:v0.27.1",
						Ports:     []corev1.ContainerPort{{Name: "metrics", ContainerPort: 9102}},
						Lifecycle: &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{Sleep: &corev1.SleepAction{Seconds: 40}}}},
				)
			}),
			wantInjected: true,
			check: func(t *testing.T, orig, out *corev1.Pod, warnings []string) {
				wantCmd(t, out, "web", waitCmd())
				wantCmd(t, out, "metrics", waitCmd("--then-sleep", "40s"))
				if !reflect.DeepEqual(container(out, "log-shipper"), container(orig, "log-shipper")) {
					t.Error("the container without ports was changed")
				}
				// Hooks run at the same time: the longest counts, once.
				wantGrace(t, out, 90+40+30)
			},
		},
		{
			name: "annotation names a container without ports",
			pod: with(func(p *corev1.Pod) {
				p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: "worker", Image: "example.com/worker:2",
					Lifecycle: &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{Exec: &corev1.ExecAction{Command: []string{"/worker", "drain"}}}}})
				annotate(api.AnnotationContainers, " worker ")(p)
			}),
			wantInjected: true,
			check: func(t *testing.T, orig, out *corev1.Pod, warnings []string) {
				wantCmd(t, out, "worker", waitCmd("--", "/worker", "drain"))
				if !reflect.DeepEqual(container(out, "web"), container(orig, "web")) {
					t.Error("a container with ports but not named was gated")
				}
			},
		},
		{
			name: "annotation names two containers, one twice",
			pod: with(func(p *corev1.Pod) {
				p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: "worker", Image: "example.com/worker:2"})
				annotate(api.AnnotationContainers, "worker,web,worker")(p)
			}),
			wantInjected: true,
			check: func(t *testing.T, orig, out *corev1.Pod, warnings []string) {
				wantCmd(t, out, "web", waitCmd())
				wantCmd(t, out, "worker", waitCmd())
			},
		},
		{
			name: "annotation names an unknown container",
			pod:  with(annotate(api.AnnotationContainers, "web,wbe")),
			check: func(t *testing.T, orig, out *corev1.Pod, warnings []string) {
				unchanged(t, orig, out)
				wantWarning(t, warnings, "not injected", api.AnnotationContainers, `"web,wbe"`, `"wbe"`, "(web)")
			},
		},
		{
			name: "annotation names a native sidecar",
			pod: with(func(p *corev1.Pod) {
				p.Spec.InitContainers = []corev1.Container{{Name: "envoy", Image: "envoyproxy/envoy:v1.31", RestartPolicy: &sidecar}}
				annotate(api.AnnotationContainers, "envoy")(p)
			}),
			check: func(t *testing.T, orig, out *corev1.Pod, warnings []string) {
				unchanged(t, orig, out)
				wantWarning(t, warnings, "not injected", api.AnnotationContainers, "init container", `"envoy"`)
			},
		},
		{
			name: "init containers and native sidecars stay, installer first",
			pod: with(func(p *corev1.Pod) {
				p.Spec.InitContainers = []corev1.Container{
					{Name: "migrate", Image: "example.com/web-migrate:41", Command: []string{"/migrate", "up"}},
					{Name: "istio-proxy", Image: "istio/proxyv2:1.23.0", RestartPolicy: &sidecar,
						Ports:        []corev1.ContainerPort{{Name: "http-envoy-prom", ContainerPort: 15090}},
						StartupProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/healthz/ready", Port: intstr.FromInt32(15021)}}},
						Lifecycle:    &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{Exec: &corev1.ExecAction{Command: []string{"pilot-agent", "request", "POST", "drain"}}}}},
				}
			}),
			wantInjected: true,
			check: func(t *testing.T, orig, out *corev1.Pod, warnings []string) {
				names := containerNames(out.Spec.InitContainers)
				if names != "draingate-agent-install, migrate, istio-proxy" {
					t.Errorf("init containers %s", names)
				}
				if !reflect.DeepEqual(out.Spec.InitContainers[2], orig.Spec.InitContainers[1]) {
					t.Error("the sidecar was changed")
				}
				wantCmd(t, out, "web", waitCmd())
			},
		},
		{
			name: "hostNetwork with the default dnsPolicy",
			pod: with(func(p *corev1.Pod) {
				p.Spec.HostNetwork = true
				p.Spec.Containers[0].Ports[0].HostPort = 8080
			}),
			wantInjected: true,
			check: func(t *testing.T, orig, out *corev1.Pod, warnings []string) {
				// Its address is the node's: the agent shows a token
				// bound to the pod instead.
				wantCmd(t, out, "web", []string{"/draingate/draingate-prestop", "wait", "--max-wait", "1m30s", "--fallback", "30s",
					"--token-file", "/var/run/secrets/draingate.dev/token", "--log", "/proc/1/fd/1"})
				i := slices.IndexFunc(out.Spec.Volumes, func(v corev1.Volume) bool { return v.Name == api.TokenVolumeName })
				if i < 0 || out.Spec.Volumes[i].Projected == nil || len(out.Spec.Volumes[i].Projected.Sources) != 1 {
					t.Fatalf("volumes %+v: want one projected %s", out.Spec.Volumes, api.TokenVolumeName)
				}
				if sat := out.Spec.Volumes[i].Projected.Sources[0].ServiceAccountToken; sat == nil || sat.Audience != "draingate" || sat.Path != "token" || ptr.Deref(sat.ExpirationSeconds, 0) != 3600 {
					t.Errorf("token projection %+v: want audience draingate, path token, 3600 s", sat)
				}
				want := corev1.VolumeMount{Name: api.TokenVolumeName, MountPath: api.TokenDir, ReadOnly: true}
				if !slices.ContainsFunc(container(out, "web").VolumeMounts, func(m corev1.VolumeMount) bool { return reflect.DeepEqual(m, want) }) {
					t.Errorf("mounts %+v: want %+v", container(out, "web").VolumeMounts, want)
				}
				wantWarning(t, warnings, "node's DNS", "ClusterFirstWithHostNet", "draingate.draingate-system.svc")
			},
		},
		{
			name: "hostNetwork with ClusterFirstWithHostNet",
			pod: with(func(p *corev1.Pod) {
				p.Spec.HostNetwork = true
				p.Spec.DNSPolicy = corev1.DNSClusterFirstWithHostNet
			}),
			wantInjected: true,
			check: func(t *testing.T, orig, out *corev1.Pod, warnings []string) {
				if len(warnings) > 0 {
					t.Errorf("warnings %q", warnings)
				}
			},
		},
		{
			name:         "hostNetwork with the server at an IP",
			pod:          with(func(p *corev1.Pod) { p.Spec.HostNetwork = true }),
			settings:     func(s *Settings) { s.Server = "http://10.96.0.42:8080" },
			wantInjected: true,
			check: func(t *testing.T, orig, out *corev1.Pod, warnings []string) {
				if len(warnings) > 0 {
					t.Errorf("warnings %q", warnings)
				}
			},
		},
		{
			name:         "shareProcessNamespace: no log to PID 1",
			pod:          with(func(p *corev1.Pod) { p.Spec.ShareProcessNamespace = ptr.To(true) }),
			wantInjected: true,
			check: func(t *testing.T, orig, out *corev1.Pod, warnings []string) {
				wantCmd(t, out, "web", []string{"/draingate/draingate-prestop", "wait", "--max-wait", "1m30s", "--fallback", "30s"})
			},
		},
		{
			name: "installer resources and pull secrets from the settings",
			pod:  with(func(p *corev1.Pod) { p.Spec.ImagePullSecrets = []corev1.LocalObjectReference{{Name: "app-registry"}} }),
			settings: func(s *Settings) {
				big := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("50m"), corev1.ResourceEphemeralStorage: resource.MustParse("32Mi")}
				s.InstallerResources = corev1.ResourceRequirements{Requests: big, Limits: big}
				s.PullSecrets = []string{"agent-registry", "app-registry"}
			},
			wantInjected: true,
			check: func(t *testing.T, orig, out *corev1.Pod, warnings []string) {
				r := out.Spec.InitContainers[0].Resources
				if q := r.Requests[corev1.ResourceCPU]; q.String() != "50m" || len(r.Requests) != 2 || len(r.Limits) != 2 {
					t.Errorf("installer resources %+v, want the settings'", r)
				}
				var names []string
				for _, s := range out.Spec.ImagePullSecrets {
					names = append(names, s.Name)
				}
				if !slices.Equal(names, []string{"app-registry", "agent-registry"}) {
					t.Errorf("imagePullSecrets %q, want the pod's and the agent's, once each", names)
				}
			},
		},
		{
			name:         "hostPID: no log to the host's PID 1",
			pod:          with(func(p *corev1.Pod) { p.Spec.HostPID = true }),
			wantInjected: true,
			check: func(t *testing.T, orig, out *corev1.Pod, warnings []string) {
				wantCmd(t, out, "web", []string{"/draingate/draingate-prestop", "wait", "--max-wait", "1m30s", "--fallback", "30s"})
			},
		},
		{
			name: "a sleep hook longer than any grace period",
			pod:  with(preStop(corev1.LifecycleHandler{Sleep: &corev1.SleepAction{Seconds: 1 << 40}})),
			check: func(t *testing.T, orig, out *corev1.Pod, warnings []string) {
				unchanged(t, orig, out)
				wantWarning(t, warnings, "not injected", "longer than any grace period")
			},
		},
		{
			name:         "image volume",
			pod:          with(preStop(corev1.LifecycleHandler{Sleep: &corev1.SleepAction{Seconds: 5}})),
			settings:     func(s *Settings) { s.ImageVolume = true },
			wantInjected: true,
			check: func(t *testing.T, orig, out *corev1.Pod, warnings []string) {
				wantCmd(t, out, "web", []string{"/draingate-image/bin/draingate-prestop", "wait", "--max-wait", "1m30s", "--fallback", "30s", "--log", "/proc/1/fd/1", "--then-sleep", "5s"})
				if len(out.Spec.InitContainers) != 0 {
					t.Errorf("init containers in image-volume mode: %s", containerNames(out.Spec.InitContainers))
				}
			},
		},
		{
			name: "settings and the user's DRAINGATE_SERVER",
			pod: with(func(p *corev1.Pod) {
				p.Spec.Containers[0].Env = append(p.Spec.Containers[0].Env,
					corev1.EnvVar{Name: "DRAINGATE_SERVER", Value: "http://gate.canary.svc:8080"},
					corev1.EnvVar{Name: "DRAINGATE_POD_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "metadata.name"}}})
			}),
			settings: func(s *Settings) {
				s.MaxWait, s.Fallback, s.ShutdownBudget = 3*time.Minute, 20*time.Second, 45*time.Second
				s.EmptyDirSizeLimit = resource.MustParse("32Mi")
				s.Version = ""
			},
			wantInjected: true,
			check: func(t *testing.T, orig, out *corev1.Pod, warnings []string) {
				wantCmd(t, out, "web", []string{"/draingate/draingate-prestop", "wait", "--max-wait", "3m0s", "--fallback", "20s", "--log", "/proc/1/fd/1"})
				wantGrace(t, out, 180+45)
				c := container(out, "web")
				if i := slices.IndexFunc(c.Env, func(e corev1.EnvVar) bool { return e.Name == "DRAINGATE_SERVER" }); c.Env[i].Value != "http://gate.canary.svc:8080" {
					t.Errorf("the user's DRAINGATE_SERVER lost: %+v", c.Env)
				}
				if out.Annotations[api.AnnotationInjected] != "unknown" {
					t.Errorf("version %q", out.Annotations[api.AnnotationInjected])
				}
			},
		},
		{
			name: "the user's identity variable differs",
			pod: with(func(p *corev1.Pod) {
				p.Spec.Containers[0].Env = append(p.Spec.Containers[0].Env, corev1.EnvVar{Name: "DRAINGATE_POD_UID", Value: "1234"})
			}),
			check: func(t *testing.T, orig, out *corev1.Pod, warnings []string) {
				unchanged(t, orig, out)
				wantWarning(t, warnings, "not injected", "DRAINGATE_POD_UID", "metadata.uid")
			},
		},
		{
			name: "per-pod overrides",
			pod: with(annotate(api.AnnotationMaxWait, "4m", api.AnnotationFallback, "15s", api.AnnotationShutdownBudget, "1m",
				"kubectl.kubernetes.io/restartedAt", "2026-11-02T10:00:00Z")),
			wantInjected: true,
			check: func(t *testing.T, orig, out *corev1.Pod, warnings []string) {
				wantCmd(t, out, "web", []string{"/draingate/draingate-prestop", "wait", "--max-wait", "4m0s", "--fallback", "15s", "--log", "/proc/1/fd/1"})
				wantGrace(t, out, 240+60)
				if out.Annotations["kubectl.kubernetes.io/restartedAt"] != "2026-11-02T10:00:00Z" {
					t.Error("the pod's own annotation was lost")
				}
			},
		},
		{
			name:         "sub-second overrides round the grace period up",
			pod:          with(annotate(api.AnnotationMaxWait, "90.5s", api.AnnotationShutdownBudget, "100ms")),
			wantInjected: true,
			check: func(t *testing.T, orig, out *corev1.Pod, warnings []string) {
				wantGrace(t, out, 91)
			},
		},
		{
			name:         "a longer grace period is kept",
			pod:          with(func(p *corev1.Pod) { p.Spec.TerminationGracePeriodSeconds = ptr.To(int64(600)) }),
			wantInjected: true,
			check: func(t *testing.T, orig, out *corev1.Pod, warnings []string) {
				wantGrace(t, out, 600)
			},
		},
		{
			name:         "nil grace period counts as 30",
			pod:          with(func(p *corev1.Pod) { p.Spec.TerminationGracePeriodSeconds = nil }),
			wantInjected: true,
			check: func(t *testing.T, orig, out *corev1.Pod, warnings []string) {
				wantGrace(t, out, 120)
			},
		},
		{
			name: "nil grace period that is long enough stays nil",
			pod: with(func(p *corev1.Pod) {
				p.Spec.TerminationGracePeriodSeconds = nil
				annotate(api.AnnotationMaxWait, "10s", api.AnnotationShutdownBudget, "20s")(p)
			}),
			wantInjected: true,
			check: func(t *testing.T, orig, out *corev1.Pod, warnings []string) {
				if out.Spec.TerminationGracePeriodSeconds != nil {
					t.Errorf("grace set to %d", *out.Spec.TerminationGracePeriodSeconds)
				}
			},
		},
		{
			name: "no container with ports",
			pod:  with(func(p *corev1.Pod) { p.Spec.Containers[0].Ports = nil }),
			check: func(t *testing.T, orig, out *corev1.Pod, warnings []string) {
				unchanged(t, orig, out)
				wantWarning(t, warnings, "not injected", "no container declares ports", api.AnnotationContainers)
			},
		},
		{
			name: "opt-out label",
			pod:  with(func(p *corev1.Pod) { p.Labels[api.LabelInject] = api.Disabled }),
			check: func(t *testing.T, orig, out *corev1.Pod, warnings []string) {
				unchanged(t, orig, out)
				if len(warnings) > 0 {
					t.Errorf("warnings %q", warnings)
				}
			},
		},
		{
			name: "draingate's own namespace",
			pod:  with(func(p *corev1.Pod) { p.Namespace = "draingate-system" }),
			check: func(t *testing.T, orig, out *corev1.Pod, warnings []string) {
				unchanged(t, orig, out)
			},
		},
		{
			name: "already injected, even by another version",
			pod:  with(annotate(api.AnnotationInjected, "0.1.0")),
			check: func(t *testing.T, orig, out *corev1.Pod, warnings []string) {
				unchanged(t, orig, out)
				if len(warnings) > 0 {
					t.Errorf("warnings %q", warnings)
				}
			},
		},
		{
			name: "Windows pod",
			pod:  with(func(p *corev1.Pod) { p.Spec.OS = &corev1.PodOS{Name: corev1.Windows} }),
			check: func(t *testing.T, orig, out *corev1.Pod, warnings []string) {
				unchanged(t, orig, out)
				wantWarning(t, warnings, "not injected", "Windows")
			},
		},
		{
			name: "Windows by nodeSelector",
			pod:  with(func(p *corev1.Pod) { p.Spec.NodeSelector = map[string]string{"kubernetes.io/os": "windows"} }),
			check: func(t *testing.T, orig, out *corev1.Pod, warnings []string) {
				unchanged(t, orig, out)
				wantWarning(t, warnings, "not injected", "Windows", "nodeSelector")
			},
		},
		{
			name: "Windows by required node affinity",
			pod: with(func(p *corev1.Pod) {
				p.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
					NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{
						{Key: "kubernetes.io/os", Operator: corev1.NodeSelectorOpIn, Values: []string{"windows"}}}}},
				}}}
			}),
			check: func(t *testing.T, orig, out *corev1.Pod, warnings []string) {
				unchanged(t, orig, out)
				wantWarning(t, warnings, "not injected", "Windows", "affinity")
			},
		},
		{
			name: "an affinity that also allows Linux",
			pod: with(func(p *corev1.Pod) {
				win := corev1.NodeSelectorRequirement{Key: "kubernetes.io/os", Operator: corev1.NodeSelectorOpIn, Values: []string{"windows"}}
				linux := corev1.NodeSelectorRequirement{Key: "kubernetes.io/os", Operator: corev1.NodeSelectorOpIn, Values: []string{"windows", "linux"}}
				p.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
					NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{win}}, {MatchExpressions: []corev1.NodeSelectorRequirement{linux}}},
				}}}
			}),
			wantInjected: true,
			check:        func(t *testing.T, orig, out *corev1.Pod, warnings []string) {},
		},
		{
			name: "names draingate needs are taken",
			pod: with(func(p *corev1.Pod) {
				p.Spec.Volumes = append(p.Spec.Volumes, corev1.Volume{Name: api.VolumeName, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}})
				p.Spec.InitContainers = append(p.Spec.InitContainers, corev1.Container{Name: api.InstallerName, Image: "x"})
				p.Spec.Containers[0].VolumeMounts = append(p.Spec.Containers[0].VolumeMounts, corev1.VolumeMount{Name: "cfg", MountPath: "/draingate/"})
			}),
			check: func(t *testing.T, orig, out *corev1.Pod, warnings []string) {
				unchanged(t, orig, out)
				wantWarning(t, warnings, "not injected", "volume named draingate-agent")
				wantWarning(t, warnings, "not injected", "container named draingate-agent-install")
				wantWarning(t, warnings, "not injected", "already mounts something at /draingate")
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := testSettings()
			if tc.settings != nil {
				tc.settings(&s)
			}
			before := tc.pod.DeepCopy()
			out, warnings, err := Mutate(tc.pod, s)
			if err != nil {
				t.Fatalf("Mutate: %v", err)
			}
			if !reflect.DeepEqual(tc.pod, before) {
				t.Fatal("Mutate changed its argument")
			}
			for _, w := range warnings {
				if len(w) > 256 || !strings.HasPrefix(w, "draingate: ") {
					t.Errorf("warning of %d characters, or without the prefix: %q", len(w), w)
				}
			}
			if tc.wantInjected {
				injected(t, tc.pod, out, s)
			} else if out != tc.pod {
				t.Fatalf("pod injected, warnings %q", warnings)
			} else if p, err := Patch(tc.pod, out); p != nil || err != nil {
				t.Errorf("Patch of an unchanged pod = %s, %v", p, err)
			}
			tc.check(t, tc.pod, out, warnings)
		})
	}
}

// TestMutateInvalidAnnotations: each bad value leaves the pod unchanged
// with a warning naming the annotation, the value and what is accepted.
func TestMutateInvalidAnnotations(t *testing.T) {
	tests := []struct{ key, value, accepted string }{
		{api.AnnotationMaxWait, "90", "such as 90s"},
		{api.AnnotationMaxWait, "soon", "such as 90s"},
		{api.AnnotationMaxWait, "0s", "more than 0"},
		{api.AnnotationMaxWait, "-30s", "more than 0"},
		{api.AnnotationMaxWait, "2h", "at most 1h"},
		{api.AnnotationMaxWait, "", "such as 90s"},
		{api.AnnotationFallback, "30 s", "such as 90s"},
		{api.AnnotationFallback, "0", "more than 0"},
		{api.AnnotationShutdownBudget, "1h0m1s", "at most 1h"},
		{api.AnnotationShutdownBudget, "forever", "such as 90s"},
		{api.AnnotationContainers, "", "comma-separated list"},
		{api.AnnotationContainers, " , ", "comma-separated list"},
		{api.AnnotationContainers, "nginx", "comma-separated list"},
	}
	for _, tc := range tests {
		t.Run(tc.key+"="+tc.value, func(t *testing.T) {
			pod := with(annotate(tc.key, tc.value))
			out, warnings, err := Mutate(pod, testSettings())
			if err != nil {
				t.Fatal(err)
			}
			unchanged(t, pod, out)
			wantWarning(t, warnings, "not injected", tc.key, api.Quote(tc.value, maxQuoted), tc.accepted)
		})
	}
	t.Run("all problems at once", func(t *testing.T) {
		pod := with(annotate(api.AnnotationMaxWait, "x", api.AnnotationFallback, "y", api.AnnotationContainers, "z"))
		_, warnings, _ := Mutate(pod, testSettings())
		if len(warnings) != 3 {
			t.Errorf("want 3 warnings, got %q", warnings)
		}
	})
	t.Run("a long value is cut", func(t *testing.T) {
		pod := with(annotate(api.AnnotationMaxWait, strings.Repeat("é", 400)))
		_, warnings, _ := Mutate(pod, testSettings())
		wantWarning(t, warnings, api.AnnotationMaxWait, "…")
	})
}

func TestMutateErrors(t *testing.T) {
	for name, s := range map[string]Settings{
		"no image":          {Server: testServer},
		"no server":         {AgentImage: testImage},
		"https server":      {AgentImage: testImage, Server: "https://gate:8443"},
		"negative max-wait": {AgentImage: testImage, Server: testServer, MaxWait: -time.Second},
	} {
		t.Run(name, func(t *testing.T) {
			pod := webPod()
			out, _, err := Mutate(pod, s)
			if err == nil || out != pod {
				t.Errorf("Mutate = changed %t, err %v; want the pod unchanged and an error", out != pod, err)
			}
		})
	}
	if _, _, err := Mutate(nil, testSettings()); err == nil {
		t.Error("Mutate(nil) did not fail")
	}
}

func TestWanted(t *testing.T) {
	s := testSettings()
	tests := []struct {
		podLabel, nsLabel, ns string
		want                  bool
	}{
		{"", "", testNS, false},
		{"enabled", "", testNS, true},
		{"", "enabled", testNS, true},
		{"enabled", "enabled", testNS, true},
		{"disabled", "enabled", testNS, false},
		{"disabled", "", testNS, false},
		{"", "disabled", testNS, false},
		{"enabled", "disabled", testNS, true},
		{"true", "", testNS, false},
		{"", "api.Enabled", testNS, false},
		{"enabled", "", "draingate-system", false},
		{"", "enabled", "draingate-system", false},
	}
	for _, tc := range tests {
		pod := webPod()
		pod.Namespace = tc.ns
		if tc.podLabel != "" {
			pod.Labels[api.LabelInject] = tc.podLabel
		}
		var ns map[string]string
		if tc.nsLabel != "" {
			ns = map[string]string{api.LabelInject: tc.nsLabel}
		}
		if got := Wanted(pod, ns, s); got != tc.want {
			t.Errorf("Wanted(pod label %q, namespace label %q, namespace %s) = %t, want %t", tc.podLabel, tc.nsLabel, tc.ns, got, tc.want)
		}
	}
	if Wanted(nil, map[string]string{api.LabelInject: api.Enabled}, s) {
		t.Error("Wanted(nil) = true")
	}
	s.ServerNamespace = ""
	pod := webPod()
	pod.Labels[api.LabelInject] = api.Enabled
	if !Wanted(pod, nil, s) {
		t.Error("no server namespace configured: an opted-in pod is not wanted")
	}
}

// TestPatchKeepsUnknownFields applies the patch to JSON holding fields this
// build does not know, as a newer API server would send: they must stay on
// the objects they belong to, though the installer is inserted before them.
func TestPatchKeepsUnknownFields(t *testing.T) {
	orig := with(func(p *corev1.Pod) {
		annotate("prometheus.io/scrape", "true")(p)
		p.Spec.InitContainers = []corev1.Container{{Name: "migrate", Image: "m"}, {Name: "seed", Image: "s"}}
		preStop(corev1.LifecycleHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/stop", Port: intstr.FromString("http")}})(p)
	})
	out, _, err := Mutate(orig, testSettings())
	if err != nil || out == orig {
		t.Fatalf("not injected: %v", err)
	}
	patch, err := Patch(orig, out)
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	raw, _ := json.Marshal(orig)
	json.Unmarshal(raw, &doc)
	spec := doc["spec"].(map[string]any)
	inits := spec["initContainers"].([]any)
	inits[0].(map[string]any)["futureField"] = "migrate's"
	inits[1].(map[string]any)["futureField"] = "seed's"
	spec["containers"].([]any)[0].(map[string]any)["futureField"] = "web's"
	spec["futurePodField"] = true
	raw, _ = json.Marshal(doc)

	var got map[string]any
	json.Unmarshal(applyPatch(t, raw, patch), &got)
	gspec := got["spec"].(map[string]any)
	ginits := gspec["initContainers"].([]any)
	for i, want := range []struct{ name, field any }{{api.InstallerName, nil}, {"migrate", "migrate's"}, {"seed", "seed's"}} {
		c := ginits[i].(map[string]any)
		if c["name"] != want.name || c["futureField"] != want.field {
			t.Errorf("init container %d: name %v futureField %v, want %v %v", i, c["name"], c["futureField"], want.name, want.field)
		}
	}
	web := gspec["containers"].([]any)[0].(map[string]any)
	if web["futureField"] != "web's" || gspec["futurePodField"] != true {
		t.Error("unknown fields lost")
	}
	if _, ok := web["lifecycle"].(map[string]any)["preStop"].(map[string]any)["httpGet"]; ok {
		t.Error("the old httpGet handler survived next to the exec")
	}
	if !strings.Contains(string(patch), `"path":"/metadata/annotations/draingate.dev~1injected"`) {
		t.Errorf("annotation key not escaped in %s", patch)
	}
}

func TestPatchShapes(t *testing.T) {
	a := webPod()
	if p, err := Patch(a, a.DeepCopy()); p != nil || err != nil {
		t.Errorf("Patch of equal pods = %s, %v", p, err)
	}
	b := a.DeepCopy()
	b.Spec.Containers[0].Args = []string{"--x"} // same length: element diff
	b.Spec.Volumes = nil                        // shrunk: replace
	b.Labels = nil                              // removed
	checkPatch(t, a, b)
	if _, err := Patch(nil, a); err == nil {
		t.Error("Patch(nil) did not fail")
	}
}

// TestAgentAcceptsCommands runs the agent's own command line on the hooks
// Mutate writes: on a flag it cannot read the agent skips its whole wait,
// so every command must parse and name the original hook as written. The
// durations become 0s and --log goes (it names the real PID 1 here), so the
// agent only parses, fails to reach a closed port, and runs the hook.
func TestAgentAcceptsCommands(t *testing.T) {
	// The httpGet hook's target: a listener of the test's own on loopback,
	// where the agent's rewritten hook must land.
	got := make(chan string, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- r.Method + " " + r.URL.RequestURI()
	}))
	defer srv.Close()
	port, _ := strconv.Atoi(srv.URL[strings.LastIndex(srv.URL, ":")+1:])
	httpPod := with(func(p *corev1.Pod) {
		p.Spec.Containers[0].Ports = append(p.Spec.Containers[0].Ports, corev1.ContainerPort{Name: "admin", ContainerPort: int32(port)})
		preStop(corev1.LifecycleHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/drain now?x=1", Port: intstr.FromString("admin")}})(p)
	})
	tests := []struct {
		pod      *corev1.Pod
		wantHook string
	}{
		{webPod(), "no original hook"},
		{with(preStop(corev1.LifecycleHandler{Exec: &corev1.ExecAction{Command: []string{"true", "--", "a b", `"q"`}}})), `running original hook: exec true -- a b "q"`},
		{with(preStop(corev1.LifecycleHandler{Sleep: &corev1.SleepAction{Seconds: 0}})), "no original hook"},
		{httpPod, fmt.Sprintf("running original hook: http-get http://127.0.0.1:%d/drain%%20now?x=1", port)},
	}
	watching := testSettings()
	watching.Watcher = true // the hooks then name the watcher's socket
	for i, tc := range tests {
		s := testSettings()
		if i%2 == 1 {
			s = watching
		}
		out, warnings, err := Mutate(tc.pod, s)
		if err != nil || out == tc.pod {
			t.Fatalf("not injected: %v %q", err, warnings)
		}
		args := slices.Clone(preStopCmd(t, out, "web")[1:])
		if s.Watcher != hasWatchEnv(container(out, "web")) {
			t.Errorf("watcher %v, app env %+v", s.Watcher, container(out, "web").Env)
		}
		for i := 0; i < len(args) && args[i] != "--"; i++ {
			switch args[i] {
			case "--max-wait", "--fallback", "--then-sleep":
				args[i+1] = "0s"
			case "--log":
				args = slices.Delete(args, i, i+2)
				i--
			}
		}
		env := map[string]string{
			"DRAINGATE_SERVER": "http://127.0.0.1:1", "DRAINGATE_POD_NAME": "web-7d9c6b5f4-abcde",
			"DRAINGATE_POD_NAMESPACE": testNS, "DRAINGATE_POD_UID": "4b1a5c9e-0000-4000-8000-000000000001",
		}
		for _, e := range container(out, "web").Env {
			if e.Name == api.EnvWatchSocket {
				env[e.Name] = e.Value // the agent must accept it too
			}
		}
		var stdout, stderr strings.Builder
		prestop.Main(t.Context(), args, func(k string) string { return env[k] }, &stdout, &stderr)
		log := stdout.String() + stderr.String()
		if strings.Contains(log, "bad flag") || !strings.Contains(log, tc.wantHook) {
			t.Errorf("agent %q:\n%s\nwant a line with %q and no bad flag", args, log, tc.wantHook)
		}
	}
	select {
	case req := <-got:
		if req != "GET /drain%20now?x=1" {
			t.Errorf("the hook's server got %q", req)
		}
	default:
		t.Error("the httpGet hook never reached its server")
	}
}
