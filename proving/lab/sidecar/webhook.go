package sidecar

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
)

const (
	// Label on a namespace, with the value Enabled, sends its pods to the
	// sidecar webhook.
	Label   = "draingate.dev/lab-sidecar"
	Enabled = "enabled"
	// Annotation, with the value Injected, marks a pod that got the proxy;
	// a pod that carries the annotation, whatever its value, is left alone.
	Annotation = "draingate.dev/lab-sidecar"
	Injected   = "injected"

	// ProxyContainer is the name of the container Mutate appends.
	ProxyContainer = "proxy"
	// TrafficPort is the name of the port the pod's traffic arrives on (the
	// lab's Service targets it by name): the app's before the mutation, the
	// proxy's after.
	TrafficPort = "http"
	// AppPortName is the app's port once the proxy has taken TrafficPort.
	AppPortName = "app"

	// Defaults of Options.
	DefaultAppContainer = "app"
	DefaultAppPort      = 18080
)

// Options say which container is the app and how to run the proxy.
type Options struct {
	// Image runs the proxy (the demo app's image: its binary runs the proxy
	// when its first argument is "proxy"). Required by Install.
	Image string
	// PullPolicy is the proxy's imagePullPolicy; empty means IfNotPresent.
	PullPolicy corev1.PullPolicy
	// AppContainer is the container the proxy fronts (default "app").
	AppContainer string
	// AppPort is where the app listens once the proxy has its port
	// (default 18080).
	AppPort int32
	// Drain is the proxy's -drain; zero leaves the proxy's default
	// (DefaultDrain).
	Drain time.Duration
}

func (o Options) withDefaults() Options {
	if o.AppContainer == "" {
		o.AppContainer = DefaultAppContainer
	}
	if o.AppPort == 0 {
		o.AppPort = DefaultAppPort
	}
	if o.PullPolicy == "" {
		o.PullPolicy = corev1.PullIfNotPresent
	}
	return o
}

// Mutate gives pod the proxy sidecar, as a mesh's injector would, and never
// changes pod: the result is a copy, or pod itself when there is nothing to
// do (see Skipped for why).
//
// In the container named opts.AppContainer, the port named "http" becomes
// the port "app" numbered opts.AppPort, the args get -addr=:<AppPort> (the
// demo app's flag; the last one wins), and the readiness, liveness and
// startup probes aimed at "http" or at its number are aimed at AppPort, so
// the kubelet keeps probing the app itself. Everything else of the
// container is kept, the preStop hook draingate's webhook may have put
// there included. Then a container "proxy" is appended: opts.Image with
// args ["proxy", "-listen=:<http's number>", "-to=127.0.0.1:<AppPort>"],
// the port "http" with the app's former number, and no probe and no
// lifecycle hook: like a mesh's proxy, it gets SIGTERM as soon as the pod
// is deleted. The pod is annotated Annotation=Injected.
func Mutate(pod *corev1.Pod, opts Options) (patched *corev1.Pod) {
	out, _ := mutate(pod, opts)
	return out
}

// Skipped says why Mutate leaves pod as it is: "" when it injects, or when
// the pod already carries Annotation.
func Skipped(pod *corev1.Pod, opts Options) string {
	_, why := mutate(pod, opts)
	return why
}

func mutate(pod *corev1.Pod, opts Options) (*corev1.Pod, string) {
	if pod == nil {
		return nil, "no pod"
	}
	if _, done := pod.Annotations[Annotation]; done {
		return pod, ""
	}
	o := opts.withDefaults()
	app := -1
	for i, c := range pod.Spec.Containers {
		switch c.Name {
		case o.AppContainer:
			app = i
		case ProxyContainer:
			return pod, fmt.Sprintf("the pod already has a container %q", ProxyContainer)
		}
	}
	if app < 0 {
		return pod, fmt.Sprintf("the pod has no container %q", o.AppContainer)
	}
	port := -1
	for i, p := range pod.Spec.Containers[app].Ports {
		if p.Name == TrafficPort {
			port = i
		}
	}
	if port < 0 {
		return pod, fmt.Sprintf("container %q has no port named %q", o.AppContainer, TrafficPort)
	}
	front := pod.Spec.Containers[app].Ports[port]
	if front.ContainerPort == o.AppPort {
		return pod, fmt.Sprintf("container %q's port %q is already %d, where the app is to move", o.AppContainer, TrafficPort, o.AppPort)
	}

	out := pod.DeepCopy()
	c := &out.Spec.Containers[app]
	c.Ports[port].Name = AppPortName
	c.Ports[port].ContainerPort = o.AppPort
	c.Args = append(c.Args, "-addr=:"+strconv.Itoa(int(o.AppPort)))
	for _, p := range []*corev1.Probe{c.ReadinessProbe, c.LivenessProbe, c.StartupProbe} {
		retarget(p, front.ContainerPort, o.AppPort)
	}

	args := []string{"proxy", "-listen=:" + strconv.Itoa(int(front.ContainerPort)), "-to=127.0.0.1:" + strconv.Itoa(int(o.AppPort))}
	if o.Drain > 0 {
		args = append(args, "-drain="+o.Drain.String())
	}
	out.Spec.Containers = append(out.Spec.Containers, corev1.Container{
		Name:            ProxyContainer,
		Image:           o.Image,
		ImagePullPolicy: o.PullPolicy,
		Args:            args,
		Ports:           []corev1.ContainerPort{{Name: TrafficPort, ContainerPort: front.ContainerPort, Protocol: front.Protocol}},
	})
	if out.Annotations == nil {
		out.Annotations = map[string]string{}
	}
	out.Annotations[Annotation] = Injected
	return out, ""
}

// retarget aims a probe that reaches the traffic port (by the name "http"
// or by number) at the app's new port.
func retarget(p *corev1.Probe, from, to int32) {
	if p == nil {
		return
	}
	hits := func(port intstr.IntOrString) bool {
		return (port.Type == intstr.String && port.StrVal == TrafficPort) || (port.Type == intstr.Int && port.IntVal == from)
	}
	switch h := &p.ProbeHandler; {
	case h.HTTPGet != nil && hits(h.HTTPGet.Port):
		h.HTTPGet.Port = intstr.FromInt32(to)
	case h.TCPSocket != nil && hits(h.TCPSocket.Port):
		h.TCPSocket.Port = intstr.FromInt32(to)
	case h.GRPC != nil && h.GRPC.Port == from:
		h.GRPC.Port = to
	}
}

// Patch is the RFC 6902 JSON patch from orig to Mutate's result: the
// containers replaced whole, and the annotation added. nil when patched is
// orig. Replacing the containers drops any container field this build's
// k8s.io/api does not know; the lab builds its pods with this very build,
// so there are none.
func Patch(orig, patched *corev1.Pod) ([]byte, error) {
	if orig == nil || patched == nil {
		return nil, fmt.Errorf("sidecar: patch of a nil pod")
	}
	if orig == patched {
		return nil, nil
	}
	type op struct {
		Op    string `json:"op"`
		Path  string `json:"path"`
		Value any    `json:"value"`
	}
	ops := []op{{Op: "replace", Path: "/spec/containers", Value: patched.Spec.Containers}}
	if len(orig.Annotations) == 0 {
		ops = append(ops, op{Op: "add", Path: "/metadata/annotations", Value: map[string]string{Annotation: patched.Annotations[Annotation]}})
	} else {
		ops = append(ops, op{Op: "add", Path: "/metadata/annotations/" + pointerEscape(Annotation), Value: patched.Annotations[Annotation]})
	}
	return json.Marshal(ops)
}

// pointerEscape escapes s for a JSON pointer (RFC 6901).
func pointerEscape(s string) string {
	return strings.NewReplacer("~", "~0", "/", "~1").Replace(s)
}

// maxReviewBytes bounds an AdmissionReview body: the API server stores
// objects of at most about 1.5 MiB.
const maxReviewBytes = 3 << 20

// NewHandler serves the mutating admission webhook for pod CREATE
// (AdmissionReview v1) with Mutate and Patch.
//
// It admits every pod. One it does not inject for a reason of the pod's
// (no container opts.AppContainer, no port "http", a pod that does not
// decode) passes unchanged with an admission warning and without the
// annotation, which is how a caller tells. A request that is no pod CREATE
// is admitted unchanged. A body that is no AdmissionReview is answered 400,
// a method other than POST 405.
func NewHandler(opts Options) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			w.Header().Set("Allow", http.MethodPost)
			http.Error(w, "only POST: this is an admission webhook", http.StatusMethodNotAllowed)
			return
		}
		body, err := io.ReadAll(io.LimitReader(r.Body, maxReviewBytes+1))
		if err != nil || len(body) > maxReviewBytes {
			http.Error(w, "reading the body: too large or cut off", http.StatusBadRequest)
			return
		}
		var in admissionv1.AdmissionReview
		if err := json.Unmarshal(body, &in); err != nil || in.Request == nil || in.Kind != "AdmissionReview" {
			http.Error(w, "not an AdmissionReview with a request", http.StatusBadRequest)
			return
		}
		resp := review(in.Request, opts)
		resp.UID = in.Request.UID
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(admissionv1.AdmissionReview{
			TypeMeta: metav1.TypeMeta{APIVersion: admissionv1.SchemeGroupVersion.String(), Kind: "AdmissionReview"},
			Response: resp,
		})
	})
}

const warnPrefix = "draingate lab sidecar: "

func review(req *admissionv1.AdmissionRequest, opts Options) *admissionv1.AdmissionResponse {
	allowed := &admissionv1.AdmissionResponse{Allowed: true}
	pods := metav1.GroupVersionResource{Version: "v1", Resource: "pods"}
	if req.Operation != admissionv1.Create || req.Resource != pods || req.SubResource != "" {
		return allowed
	}
	var pod corev1.Pod
	if err := json.Unmarshal(req.Object.Raw, &pod); err != nil {
		allowed.Warnings = []string{warnPrefix + "no sidecar: the pod did not decode: " + err.Error()}
		return allowed
	}
	out, why := mutate(&pod, opts)
	if why != "" {
		allowed.Warnings = []string{warnPrefix + "no sidecar: " + why}
		return allowed
	}
	patch, err := Patch(&pod, out)
	if err != nil {
		allowed.Warnings = []string{warnPrefix + "no sidecar: " + err.Error()}
		return allowed
	}
	if patch != nil {
		allowed.Patch = patch
		allowed.PatchType = ptr.To(admissionv1.PatchTypeJSONPatch)
	}
	return allowed
}
