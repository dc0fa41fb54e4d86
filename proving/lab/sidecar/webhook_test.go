package sidecar

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	jsonpatch "github.com/evanphx/json-patch/v5"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"draingate.dev/draingate/api"
	"draingate.dev/draingate/internal/inject"
)

const image = "draingate.local/demoapp:1"

// labPod is a pod of the lab's Deployment (proving/lab's deployment): the
// container "app" with the port "http" 8080, a readiness probe on it by
// name, and under the restart workload a liveness probe too.
func labPod() *corev1.Pod {
	return &corev1.Pod{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{GenerateName: "demo-", Namespace: "lab-0-draingate-1", Labels: map[string]string{"app": "demo"}},
		Spec: corev1.PodSpec{
			TerminationGracePeriodSeconds: ptr.To[int64](30),
			Containers: []corev1.Container{{
				Name:            "app",
				Image:           image,
				ImagePullPolicy: corev1.PullNever,
				Args:            []string{"-latency=0s"},
				Ports:           []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}},
				ReadinessProbe: &corev1.Probe{
					ProbeHandler:  corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/healthz", Port: intstr.FromString("http")}},
					PeriodSeconds: 1,
				},
				LivenessProbe: &corev1.Probe{
					ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/livez", Port: intstr.FromString("http")}},
				},
			}},
		},
	}
}

// drainGated is labPod as draingate's webhook, called first, leaves it.
func drainGated(t *testing.T) *corev1.Pod {
	t.Helper()
	out, warnings, err := inject.Mutate(labPod(), gateSettings())
	if err != nil || out.Annotations[api.AnnotationInjected] == "" {
		t.Fatalf("draingate's Mutate: %v, warnings %q", err, warnings)
	}
	if out.Spec.Containers[0].Lifecycle == nil || out.Spec.Containers[0].Lifecycle.PreStop == nil {
		t.Fatal("draingate's Mutate gave the app no preStop hook")
	}
	return out
}

func gateSettings() inject.Settings {
	return inject.Settings{AgentImage: "draingate.local/prestop:1", Server: "http://draingate.draingate.svc:8080", Version: "test"}
}

func TestMutateLabPod(t *testing.T) {
	in := drainGated(t)
	before := in.DeepCopy()
	out := Mutate(in, Options{Image: image})
	if !reflect.DeepEqual(in, before) {
		t.Fatal("Mutate changed its argument")
	}
	if why := Skipped(in, Options{Image: image}); why != "" {
		t.Fatalf("Skipped = %q", why)
	}
	if len(out.Spec.Containers) != 2 {
		t.Fatalf("containers %d, want the app and the proxy", len(out.Spec.Containers))
	}
	app, proxy := out.Spec.Containers[0], out.Spec.Containers[1]

	// The app moved to 18080 and is probed there.
	if want := []corev1.ContainerPort{{Name: "app", ContainerPort: 18080}}; !reflect.DeepEqual(app.Ports, want) {
		t.Errorf("app ports %+v, want %+v", app.Ports, want)
	}
	if want := []string{"-latency=0s", "-addr=:18080"}; !slices.Equal(app.Args, want) {
		t.Errorf("app args %q, want %q", app.Args, want)
	}
	for name, p := range map[string]*corev1.Probe{"readiness": app.ReadinessProbe, "liveness": app.LivenessProbe} {
		if p.HTTPGet.Port != intstr.FromInt32(18080) {
			t.Errorf("%s probe port %s, want 18080", name, p.HTTPGet.Port.String())
		}
	}
	if app.ReadinessProbe.HTTPGet.Path != "/healthz" || app.LivenessProbe.HTTPGet.Path != "/livez" {
		t.Errorf("probe paths changed: %q %q", app.ReadinessProbe.HTTPGet.Path, app.LivenessProbe.HTTPGet.Path)
	}
	// Everything else of the app, draingate's hook first, is as it was.
	orig := in.Spec.Containers[0]
	app.Ports, app.Args, app.ReadinessProbe, app.LivenessProbe = orig.Ports, orig.Args, orig.ReadinessProbe, orig.LivenessProbe
	if !reflect.DeepEqual(app, orig) {
		t.Errorf("the app container changed beyond its port, args and probes:\n got %+v\nwant %+v", app, orig)
	}

	// The proxy has the traffic port and nothing that would delay its SIGTERM.
	want := corev1.Container{
		Name:            "proxy",
		Image:           image,
		ImagePullPolicy: corev1.PullIfNotPresent,
		Args:            []string{"proxy", "-listen=:8080", "-to=127.0.0.1:18080"},
		Ports:           []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}},
	}
	if !reflect.DeepEqual(proxy, want) {
		t.Errorf("proxy container\n got %+v\nwant %+v", proxy, want)
	}
	if out.Annotations[Annotation] != Injected || out.Annotations[api.AnnotationInjected] != "test" {
		t.Errorf("annotations %v, want %s=%s next to draingate's", out.Annotations, Annotation, Injected)
	}
	// The rest of the pod (draingate's volume, init container, grace
	// period) is untouched.
	out.Spec.Containers, in.Spec.Containers = nil, nil
	delete(out.Annotations, Annotation)
	if !reflect.DeepEqual(out, in) {
		t.Errorf("the pod changed beyond its containers and the annotation")
	}
}

// The scenario's premise, and what draingate does about it: its webhook,
// reinvoked after the sidecar's, gates the proxy it finds added, so the
// proxy keeps accepting until the pod is released.
func TestDraingateReinvokedGatesTheProxy(t *testing.T) {
	out := Mutate(drainGated(t), Options{Image: image})
	if out.Spec.Containers[1].Lifecycle != nil {
		t.Fatal("the sidecar's webhook gave the proxy a lifecycle hook")
	}
	again, _, err := inject.Mutate(out, gateSettings())
	if err != nil || again == out {
		t.Fatalf("draingate's reinvocation left the pod as it was (err %v)", err)
	}
	proxy := again.Spec.Containers[1]
	if proxy.Lifecycle == nil || proxy.Lifecycle.PreStop == nil || proxy.Lifecycle.PreStop.Exec == nil ||
		!slices.Equal(proxy.Lifecycle.PreStop.Exec.Command[:2], again.Spec.Containers[0].Lifecycle.PreStop.Exec.Command[:2]) {
		t.Errorf("the proxy's hook %+v: want the agent's wait, as the app has", proxy.Lifecycle)
	}
}

func TestMutateIsIdempotent(t *testing.T) {
	once := Mutate(labPod(), Options{Image: image})
	if twice := Mutate(once, Options{Image: image}); twice != once {
		t.Error("a pod already annotated was changed again")
	}
	marked := labPod()
	marked.Annotations = map[string]string{Annotation: "anything"}
	if Mutate(marked, Options{Image: image}) != marked {
		t.Error("a pod carrying the annotation was changed")
	}
}

func TestMutateProbesByNumberAndOptions(t *testing.T) {
	pod := labPod()
	c := &pod.Spec.Containers[0]
	c.ReadinessProbe.HTTPGet.Port = intstr.FromInt32(8080)
	c.LivenessProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromString("http")}}}
	c.StartupProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{GRPC: &corev1.GRPCAction{Port: 8080}}}
	c.Ports = append(c.Ports, corev1.ContainerPort{Name: "metrics", ContainerPort: 9090})
	other := &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Port: intstr.FromString("metrics")}}}
	pod.Spec.Containers = append(pod.Spec.Containers, corev1.Container{Name: "side", ReadinessProbe: other})
	pod.Spec.Containers[0].Name = "web"

	out := Mutate(pod, Options{Image: "img", AppContainer: "web", AppPort: 9000, Drain: 2 * time.Second, PullPolicy: corev1.PullNever})
	a := out.Spec.Containers[0]
	if a.ReadinessProbe.HTTPGet.Port != intstr.FromInt32(9000) || a.LivenessProbe.TCPSocket.Port != intstr.FromInt32(9000) || a.StartupProbe.GRPC.Port != 9000 {
		t.Errorf("probes not moved to 9000: %+v %+v %+v", a.ReadinessProbe.ProbeHandler, a.LivenessProbe.ProbeHandler, a.StartupProbe.ProbeHandler)
	}
	if a.Ports[1].Name != "metrics" || a.Ports[1].ContainerPort != 9090 || out.Spec.Containers[1].ReadinessProbe.HTTPGet.Port != intstr.FromString("metrics") {
		t.Error("a port or probe unrelated to the traffic port changed")
	}
	p := out.Spec.Containers[2]
	if want := []string{"proxy", "-listen=:8080", "-to=127.0.0.1:9000", "-drain=2s"}; !slices.Equal(p.Args, want) || p.Image != "img" || p.ImagePullPolicy != corev1.PullNever {
		t.Errorf("proxy %q %s %s; want args %q", p.Args, p.Image, p.ImagePullPolicy, want)
	}
}

func TestMutateSkips(t *testing.T) {
	noApp := labPod()
	noApp.Spec.Containers[0].Name = "web"
	noPort := labPod()
	noPort.Spec.Containers[0].Ports[0].Name = "web"
	hasProxy := labPod()
	hasProxy.Spec.Containers = append(hasProxy.Spec.Containers, corev1.Container{Name: "proxy"})
	samePort := labPod()
	samePort.Spec.Containers[0].Ports[0].ContainerPort = 18080
	for name, pod := range map[string]*corev1.Pod{"no app": noApp, "no http port": noPort, "has a proxy": hasProxy, "same port": samePort} {
		if out := Mutate(pod, Options{Image: image}); out != pod {
			t.Errorf("%s: the pod was changed", name)
		}
		if Skipped(pod, Options{Image: image}) == "" {
			t.Errorf("%s: Skipped gives no reason", name)
		}
	}
	if Mutate(nil, Options{}) != nil {
		t.Error("Mutate(nil) != nil")
	}
}

// applyPatch applies patch to pod's JSON as the API server does.
func applyPatch(t *testing.T, pod *corev1.Pod, patch []byte) *corev1.Pod {
	t.Helper()
	out, err := patchPod(pod, patch)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func patchPod(pod *corev1.Pod, patch []byte) (*corev1.Pod, error) {
	raw, err := json.Marshal(pod)
	if err != nil {
		return nil, err
	}
	p, err := jsonpatch.DecodePatch(patch)
	if err != nil {
		return nil, fmt.Errorf("patch %s: %w", patch, err)
	}
	patched, err := p.Apply(raw)
	if err != nil {
		return nil, fmt.Errorf("applying %s: %w", patch, err)
	}
	var out corev1.Pod
	if err := json.Unmarshal(patched, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

func TestPatchGivesMutatesResult(t *testing.T) {
	withAnnotations := labPod()
	withAnnotations.Annotations = map[string]string{"a/b": "c"}
	for name, pod := range map[string]*corev1.Pod{"no annotations": labPod(), "annotations": withAnnotations, "draingate's": drainGated(t)} {
		out := Mutate(pod, Options{Image: image})
		patch, err := Patch(pod, out)
		if err != nil {
			t.Fatal(err)
		}
		if got := applyPatch(t, pod, patch); !reflect.DeepEqual(got, out) {
			t.Errorf("%s: the patched pod is not Mutate's\n got %+v\nwant %+v", name, got, out)
		}
	}
	pod := labPod()
	if patch, err := Patch(pod, pod); patch != nil || err != nil {
		t.Errorf("Patch of an unchanged pod = %s, %v; want nil", patch, err)
	}
}

// reviewOf posts an AdmissionReview for obj to url and decodes the answer.
func reviewOf(t *testing.T, url string, req admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
	t.Helper()
	body, err := json.Marshal(admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
		Request:  &req,
	})
	if err != nil {
		t.Fatal(err)
	}
	res, err := http.Post(url, "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		t.Fatalf("status %d", res.StatusCode)
	}
	var out admissionv1.AdmissionReview
	if err := json.NewDecoder(res.Body).Decode(&out); err != nil {
		t.Fatal(err)
	}
	if out.APIVersion != "admission.k8s.io/v1" || out.Kind != "AdmissionReview" || out.Response == nil || out.Response.UID != req.UID {
		t.Fatalf("answer %+v: want a v1 AdmissionReview for uid %s", out, req.UID)
	}
	return out.Response
}

func podCreate(t *testing.T, uid string, pod *corev1.Pod) admissionv1.AdmissionRequest {
	t.Helper()
	raw, err := json.Marshal(pod)
	if err != nil {
		t.Fatal(err)
	}
	return admissionv1.AdmissionRequest{
		UID:       types.UID("uid-" + uid),
		Kind:      metav1.GroupVersionKind{Version: "v1", Kind: "Pod"},
		Resource:  metav1.GroupVersionResource{Version: "v1", Resource: "pods"},
		Namespace: pod.Namespace,
		Operation: admissionv1.Create,
		Object:    runtime.RawExtension{Raw: raw},
	}
}

func TestHandlerRoundTrip(t *testing.T) {
	srv := httptest.NewServer(NewHandler(Options{Image: image}))
	defer srv.Close()

	pod := drainGated(t)
	resp := reviewOf(t, srv.URL, podCreate(t, "1", pod))
	if !resp.Allowed || resp.PatchType == nil || *resp.PatchType != admissionv1.PatchTypeJSONPatch || len(resp.Warnings) != 0 {
		t.Fatalf("response %+v: want allowed with a JSON patch", resp)
	}
	if got := applyPatch(t, pod, resp.Patch); !reflect.DeepEqual(got, Mutate(pod, Options{Image: image})) {
		t.Errorf("the webhook's patch does not give Mutate's pod: %+v", got)
	}

	// Already injected: admitted as it is.
	resp = reviewOf(t, srv.URL, podCreate(t, "2", Mutate(pod, Options{Image: image})))
	if !resp.Allowed || resp.Patch != nil || len(resp.Warnings) != 0 {
		t.Errorf("an injected pod: %+v; want allowed unchanged", resp)
	}

	// Nothing to front: admitted unchanged, with a warning.
	noPort := labPod()
	noPort.Spec.Containers[0].Ports = nil
	resp = reviewOf(t, srv.URL, podCreate(t, "3", noPort))
	if !resp.Allowed || resp.Patch != nil || len(resp.Warnings) != 1 || !strings.Contains(resp.Warnings[0], `no port named "http"`) {
		t.Errorf("a pod without the port: %+v; want allowed unchanged with a warning", resp)
	}

	// Not a pod CREATE: admitted unchanged.
	update := podCreate(t, "4", pod)
	update.Operation = admissionv1.Update
	if resp := reviewOf(t, srv.URL, update); !resp.Allowed || resp.Patch != nil {
		t.Errorf("an UPDATE: %+v; want allowed unchanged", resp)
	}
}

func TestHandlerRejectsWhatIsNoReview(t *testing.T) {
	srv := httptest.NewServer(NewHandler(Options{Image: image}))
	defer srv.Close()
	res, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("GET: %d, want 405", res.StatusCode)
	}
	for _, body := range []string{"not json", `{"kind":"AdmissionReview"}`, `{"kind":"Pod","request":{"uid":"x"}}`} {
		res, err := http.Post(srv.URL, "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != http.StatusBadRequest {
			t.Errorf("POST %s: %d, want 400", body, res.StatusCode)
		}
	}
}
