package inject

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	"k8s.io/utils/ptr"

	"draingate.dev/draingate/api"
)

// MaxReviewBytes bounds an AdmissionReview body. The API server stores
// objects of at most about 1.5 MiB, so a pod's review never comes near it;
// a larger body is admitted unchanged rather than read.
const MaxReviewBytes = 3 << 20

const (
	admissionGroup   = "admission.k8s.io"
	admissionV1      = admissionGroup + "/v1"
	admissionV1beta1 = admissionGroup + "/v1beta1"
	reviewKind       = "AdmissionReview"
)

// NewHandler serves the mutating admission webhook for pod CREATE.
//
// settings is read once per request, so the caller may change it at run
// time; nsLabels returns a namespace's labels (from a cache, typically) and
// is asked only when the pod's own label does not decide. log may be nil.
//
// What it answers:
//   - a pod to inject: allowed, with a JSONPatch and Mutate's warnings;
//   - a pod it does not inject for a reason of its own (an invalid
//     annotation, a hook the agent cannot reproduce, a pod too large to
//     read, a pod that does not decode): allowed unchanged, with a warning;
//   - a request it should not have been sent (another kind, resource,
//     subresource or operation): allowed unchanged;
//   - a body that is not an AdmissionReview at all: 400 with a JSON error,
//     413 for one too large to find its uid in, 405 for a method other
//     than POST;
//   - a failure on its own side (settings that do not work, the namespace
//     lookup failing): 500, so the webhook's failurePolicy decides, which
//     fails open unless the operator chose otherwise.
//
// It never answers 5xx for anything in the request.
func NewHandler(settings func() Settings, nsLabels func(ctx context.Context, ns string) (map[string]string, error), log *slog.Logger) *Handler {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Handler{settings: settings, nsLabels: nsLabels, log: log}
}

// Handler is the webhook's http.Handler; make it with NewHandler.
type Handler struct {
	settings func() Settings
	nsLabels func(ctx context.Context, ns string) (map[string]string, error)
	log      *slog.Logger

	// ExtraWait, when set before serving, is asked for each pod to inject
	// how much longer than Settings.MaxWait its routes may need (the server
	// answers with its NLB tail beyond the ALB one for a pod behind an
	// NLB); why names the route, for the log. A pod's max-wait annotation
	// still wins. An error says the routes could not be sized: extra is
	// then the longest they may need, which the pod gets, and the
	// admission says so in a warning (and NotSized): a lookup never fails
	// an admission, nor shortens the pod's wait.
	ExtraWait func(ctx context.Context, pod *corev1.Pod) (extra time.Duration, why string, err error)

	// Need, when set before serving, is asked for each pod to inject how
	// long its routes need by what the cluster learnt (a controller seen
	// taking pods out late, plus the routes' tails; zero when nothing was
	// learnt), and why. A pod whose max-wait (sized by ExtraWait) is
	// shorter gets the need, up to Settings.MaxWaitCeiling; it only ever
	// lengthens a wait. A pod's max-wait annotation still wins.
	Need func(ctx context.Context, pod *corev1.Pod) (need time.Duration, why string)

	// NotSized, when set before serving, is told of every pod whose
	// max-wait could not be sized from its routes (ExtraWait's error), as
	// NotInjected is of pods not injected; Why is the warning's reason.
	NotSized func(ctx context.Context, n NotInjected)

	// NotInjected, when set before serving, is told of every pod CREATE
	// admitted with a "not injected" warning. The warning goes back to
	// whoever created the pod, which for a Deployment's pods is the
	// ReplicaSet controller, and it drops warnings: this is how the
	// server makes them seen (a metric, an Event on the pod's owner).
	NotInjected func(ctx context.Context, n NotInjected)

	// LimitRanges, when set before serving, lists a namespace's
	// LimitRanges, so that the installer's resources fit them (see
	// FitLimitRanges). An error is logged and the settings' resources are
	// used as they are.
	LimitRanges func(ctx context.Context, namespace string) ([]corev1.LimitRange, error)
}

// NotInjected is one pod admitted without the agent although it may have
// wanted it.
type NotInjected struct {
	// Namespace, and Name or GenerateName, name the pod (a ReplicaSet's
	// pods have only a GenerateName at admission).
	Namespace, Name, GenerateName string
	// Owner is the pod's controller (a ReplicaSet, a StatefulSet...), nil
	// when it has none or its metadata did not decode.
	Owner *metav1.OwnerReference
	// Why is the warning, without the "draingate: not injected: " prefix.
	Why string
}

// httpError is an answer that is not an AdmissionReview.
type httpError struct {
	status int
	msg    string
}

func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		writeError(w, httpError{http.StatusMethodNotAllowed, "only POST: this is an admission webhook"})
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, MaxReviewBytes+1))
	if err != nil {
		writeError(w, httpError{http.StatusBadRequest, "reading the body: " + err.Error()})
		return
	}
	var (
		resp    *admissionv1.AdmissionReview
		failure *httpError
	)
	if len(body) > MaxReviewBytes {
		resp, failure = tooLarge(body)
	} else {
		resp, failure = h.review(r.Context(), body)
	}
	if failure != nil {
		h.log.Warn("admission request not answered with a review", "status", failure.status, "error", failure.msg)
		writeError(w, *failure)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(resp)
}

func writeError(w http.ResponseWriter, e httpError) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(e.status)
	json.NewEncoder(w).Encode(struct {
		Error string `json:"error"`
	}{e.msg})
}

// review answers one AdmissionReview body of acceptable size.
func (h *Handler) review(ctx context.Context, body []byte) (*admissionv1.AdmissionReview, *httpError) {
	var in admissionv1.AdmissionReview
	if err := utiljson.Unmarshal(body, &in); err != nil {
		// Valid JSON with a field of the wrong type still has a uid to
		// answer to; anything less is not a review.
		head, ok := reviewHead(body)
		if !ok {
			return nil, &httpError{http.StatusBadRequest, "not an AdmissionReview: " + short(err)}
		}
		return allow(head.APIVersion, head.Request.UID, warnPrefix+"not injected: the admission request did not decode: "+short(err)), nil
	}
	if in.Kind != reviewKind || !knownVersion(in.APIVersion) || in.Request == nil {
		return nil, &httpError{http.StatusBadRequest, fmt.Sprintf("not an AdmissionReview with a request (apiVersion %q, kind %q)", in.APIVersion, in.Kind)}
	}
	req := in.Request
	log := h.log.With("uid", req.UID, "namespace", req.Namespace, "name", req.Name)
	if !isPodCreate(req) {
		log.Warn("not a pod CREATE: check the webhook's rules", "kind", req.Kind.String(), "resource", req.Resource.String(), "subResource", req.SubResource, "operation", req.Operation)
		return allow(in.APIVersion, req.UID), nil
	}
	out, failure := h.mutate(ctx, log, req)
	if failure != nil {
		return nil, failure
	}
	h.tell(ctx, req, out.Warnings, notInjectedPrefix, h.NotInjected)
	h.tell(ctx, req, out.Warnings, notSizedPrefix, h.NotSized)
	out.UID = req.UID
	return &admissionv1.AdmissionReview{TypeMeta: reviewType(in.APIVersion), Response: out}, nil
}

func isPodCreate(req *admissionv1.AdmissionRequest) bool {
	pods := metav1.GroupVersionResource{Version: "v1", Resource: "pods"}
	return req.Operation == admissionv1.Create && req.Resource == pods && req.SubResource == "" &&
		req.Kind.Group == "" && req.Kind.Kind == "Pod"
}

// mutate decides one pod CREATE. The response's UID is set by the caller.
func (h *Handler) mutate(ctx context.Context, log *slog.Logger, req *admissionv1.AdmissionRequest) (*admissionv1.AdmissionResponse, *httpError) {
	var pod corev1.Pod
	if notDecoded := decodePod(log, req, &pod); notDecoded != nil {
		return notDecoded, nil
	}
	s := h.settings()
	wanted, err := h.wanted(ctx, &pod, s)
	if err != nil {
		log.Error("namespace labels", "error", err)
		return nil, &httpError{http.StatusInternalServerError, fmt.Sprintf("reading namespace %s's labels: %v", pod.Namespace, err)}
	}
	var warnings []string
	if v, ok := pod.Labels[api.LabelInject]; ok && v != api.Enabled && v != api.Disabled {
		warnings = append(warnings, fmt.Sprintf("%slabel %s=%s is neither %s nor %s, and is ignored", warnPrefix, api.LabelInject, api.Quote(v, maxQuoted), api.Enabled, api.Disabled))
	}
	if !wanted {
		log.Debug("not wanted")
		return allowed(warnings...), nil
	}
	s, unsized := h.sizeMaxWait(ctx, log, &pod, s)
	s = h.sizeByNeed(ctx, log, &pod, s)
	s = h.fitInstaller(ctx, log, &pod, s)
	out, ws, err := Mutate(&pod, s)
	if err != nil {
		log.Error("mutate", "error", err)
		return nil, &httpError{http.StatusInternalServerError, err.Error()}
	}
	warnings = append(warnings, ws...)
	if unsized != "" && out != &pod {
		warnings = append(warnings, unsized)
	}
	if out != &pod && s.SizedBy != "" {
		warnings = append(warnings, fmt.Sprintf("%smax-wait %s: %s", warnPrefix, s.MaxWait, s.SizedBy))
	}
	if out == &pod {
		log.Info("not injected", "warnings", ws)
		return allowed(warnings...), nil
	}
	if w := unknownHookFields(req.Object.Raw, &pod, out); w != "" {
		log.Warn("not injected: unknown preStop fields", "warning", w)
		return allowed(append(warnings, w)...), nil
	}
	patch, err := Patch(&pod, out)
	if err != nil {
		log.Error("patch", "error", err)
		return nil, &httpError{http.StatusInternalServerError, err.Error()}
	}
	log.Info("injected", "generateName", pod.GenerateName, "warnings", ws)
	resp := allowed(warnings...)
	resp.Patch = patch
	resp.PatchType = ptr.To(admissionv1.PatchTypeJSONPatch)
	return resp, nil
}

// decodePod decodes the pod of a CREATE into pod, its namespace filled in
// from the request's when the object leaves it out. A request with no pod,
// or whose pod does not decode or holds a quantity too costly to decode, is
// let through uninjected: the response returned says why; it is nil when
// pod is ready.
func decodePod(log *slog.Logger, req *admissionv1.AdmissionRequest, pod *corev1.Pod) *admissionv1.AdmissionResponse {
	if len(req.Object.Raw) == 0 {
		return allowed(warnPrefix + "not injected: the admission request carries no pod")
	}
	if v, costly := costlyQuantity(req.Object.Raw); costly {
		err := errCostlyQuantity(v)
		log.Warn("pod not decoded", "error", err)
		return allowed(warnPrefix + "not injected: " + err.Error())
	}
	if err := utiljson.Unmarshal(req.Object.Raw, pod); err != nil {
		log.Warn("pod did not decode", "error", err)
		return allowed(warnPrefix + "not injected: the pod did not decode: " + short(err))
	}
	if pod.Namespace == "" {
		pod.Namespace = req.Namespace
	}
	return nil
}

// sizeMaxWait adds to s.MaxWait (defaultMaxWait when unset) how much longer
// ExtraWait says the pod's routes may need. When ExtraWait could not size
// them it adds the longest they may need, and returns the warning that
// says so (a lookup never fails an admission, nor shortens a wait).
func (h *Handler) sizeMaxWait(ctx context.Context, log *slog.Logger, pod *corev1.Pod, s Settings) (Settings, string) {
	if h.ExtraWait == nil {
		return s, ""
	}
	extra, why, err := h.ExtraWait(ctx, pod)
	if extra > 0 {
		if s.MaxWait == 0 {
			s.MaxWait = defaultMaxWait
		}
		s.MaxWait += extra
	}
	if err != nil {
		log.Warn("could not size max-wait from the pod's routes; it gets the longest they may need", "error", err, "max_wait", s.MaxWait)
		return s, fmt.Sprintf("%s%s; sized for the longest they may need: %s", notSizedPrefix, api.OneLine(err.Error()), cmp.Or(why, "the default"))
	}
	if extra > 0 {
		log.Info("max-wait sized from the pod's routes", "max_wait", s.MaxWait, "why", why)
		s.SizedBy = fmt.Sprintf("longer than the configured %s by %s, for %s", s.MaxWait-extra, extra, why)
	}
	return s, ""
}

// sizeByNeed lengthens s.MaxWait to what Need says the pod's routes need
// by what was learnt, up to the ceiling; a pod whose max-wait annotation
// sets its own keeps it (and no SizedBy).
func (h *Handler) sizeByNeed(ctx context.Context, log *slog.Logger, pod *corev1.Pod, s Settings) Settings {
	if _, own := pod.Annotations[api.AnnotationMaxWait]; own {
		s.SizedBy = ""
		return s
	}
	if h.Need == nil {
		return s
	}
	need, why := h.Need(ctx, pod)
	if s.MaxWait == 0 {
		s.MaxWait = defaultMaxWait
	}
	ceiling := s.MaxWaitCeiling
	if ceiling == 0 {
		ceiling = max(defaultCeiling, s.MaxWait)
	}
	if need <= s.MaxWait || ceiling <= s.MaxWait {
		return s
	}
	sized := min(need, ceiling)
	s.SizedBy = fmt.Sprintf("learnt: %s", why)
	if need > ceiling {
		s.SizedBy += fmt.Sprintf("; %s, capped at the ceiling %s", need, ceiling)
	}
	s.MaxWait = sized
	log.Info("max-wait sized from what the cluster learnt", "max_wait", s.MaxWait, "why", s.SizedBy)
	return s
}

// fitInstaller fits the installer init container's resources to the pod's
// namespace's LimitRanges, which would otherwise reject the pod. There is
// no installer with image volumes; a failed lookup only logs, and the
// installer keeps its resources.
func (h *Handler) fitInstaller(ctx context.Context, log *slog.Logger, pod *corev1.Pod, s Settings) Settings {
	if h.LimitRanges == nil || s.ImageVolume && !s.Watcher {
		return s
	}
	ranges, err := h.LimitRanges(ctx, pod.Namespace)
	if err != nil {
		log.Warn("reading the namespace's LimitRanges failed; the installer and watcher keep their resources", "error", err)
	} else if len(ranges) > 0 {
		var notes, wnotes []string
		s.InstallerResources, notes = FitLimitRanges("installer", installerResources(s.InstallerResources), ranges)
		s.WatcherResources, wnotes = FitLimitRanges("watcher", watcherResources(s.WatcherResources), ranges)
		if len(notes) > 0 && !s.ImageVolume {
			log.Info("installer resources fitted to the namespace's LimitRanges", "changes", notes)
		}
		if len(wnotes) > 0 && s.Watcher {
			log.Info("watcher resources fitted to the namespace's LimitRanges", "changes", wnotes)
		}
	}
	return s
}

// wanted applies Wanted, asking for the namespace's labels only when the
// pod's own label leaves the answer open.
func (h *Handler) wanted(ctx context.Context, pod *corev1.Pod, s Settings) (bool, error) {
	if Wanted(pod, nil, s) || !Wanted(pod, map[string]string{api.LabelInject: api.Enabled}, s) {
		return Wanted(pod, nil, s), nil
	}
	if h.nsLabels == nil {
		return false, errors.New("no namespace lookup configured")
	}
	labels, err := h.nsLabels(ctx, pod.Namespace)
	if err != nil {
		return false, err
	}
	return Wanted(pod, labels, s), nil
}

// knownPreStop are the preStop handler fields this build's k8s.io/api
// knows; Mutate replaces the handler of a gated container.
var knownPreStop = []string{"exec", "httpGet", "tcpSocket", "sleep"}

// unknownHookFields guards against version skew: a newer API server may send
// a preStop handler of a kind this build does not know, which decoding drops.
// Replacing that handler would silently lose the user's hook, so such a pod
// is not injected. Only containers whose hook Mutate changed are checked.
func unknownHookFields(raw []byte, orig, mutated *corev1.Pod) string {
	var shape struct {
		Spec struct {
			Containers []struct {
				Lifecycle struct {
					PreStop map[string]json.RawMessage `json:"preStop"`
				} `json:"lifecycle"`
			} `json:"containers"`
		} `json:"spec"`
	}
	if err := json.Unmarshal(raw, &shape); err != nil || len(shape.Spec.Containers) != len(orig.Spec.Containers) {
		return ""
	}
	for i, c := range shape.Spec.Containers {
		if reflect.DeepEqual(orig.Spec.Containers[i].Lifecycle, mutated.Spec.Containers[i].Lifecycle) {
			continue
		}
		for k := range c.Lifecycle.PreStop {
			if !slices.Contains(knownPreStop, k) {
				return fmt.Sprintf("%snot injected: container %q: its preStop hook has field %s, which this draingate does not know (a newer Kubernetes?), so it cannot wrap the hook",
					warnPrefix, orig.Spec.Containers[i].Name, api.Quote(k, maxQuoted))
			}
		}
	}
	return ""
}

func allowed(warnings ...string) *admissionv1.AdmissionResponse {
	return &admissionv1.AdmissionResponse{Allowed: true, Warnings: warnings}
}

func allow(apiVersion string, uid types.UID, warnings ...string) *admissionv1.AdmissionReview {
	resp := allowed(warnings...)
	resp.UID = uid
	return &admissionv1.AdmissionReview{TypeMeta: reviewType(apiVersion), Response: resp}
}

// tellNotInjected calls NotInjected for the first "not injected" warning in
// warnings, with what the pod's metadata says of it. The metadata decodes
// on its own (no resource quantities in it), so a pod that did not decode
// whole still names its owner.
func (h *Handler) tell(ctx context.Context, req *admissionv1.AdmissionRequest, warnings []string, prefix string, fn func(context.Context, NotInjected)) {
	if fn == nil || req.DryRun != nil && *req.DryRun {
		return // a dry run has no side effects (sideEffects: None)
	}
	i := slices.IndexFunc(warnings, func(w string) bool { return strings.HasPrefix(w, prefix) })
	if i < 0 {
		return
	}
	n := NotInjected{Namespace: req.Namespace, Name: req.Name, Why: strings.TrimPrefix(warnings[i], prefix)}
	var obj struct {
		Metadata struct {
			Name, Namespace, GenerateName string
			OwnerReferences               []metav1.OwnerReference
		}
	}
	if json.Unmarshal(req.Object.Raw, &obj) == nil {
		m := obj.Metadata
		n.Name, n.Namespace, n.GenerateName = cmp.Or(n.Name, m.Name), cmp.Or(n.Namespace, m.Namespace), m.GenerateName
		for _, o := range m.OwnerReferences {
			if o.Controller != nil && *o.Controller {
				n.Owner = &o
				break
			}
		}
	}
	fn(ctx, n)
}
