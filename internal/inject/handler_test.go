package inject

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"

	"draingate.dev/draingate/api"
)

const testUID = types.UID("705ab4f5-6393-11e8-b7cc-42010a800002")

// reviewBody is an AdmissionReview as the API server sends one for a pod
// CREATE from a ReplicaSet: the pod's name and namespace are empty in the
// object, the namespace is in the request.
func reviewBody(t testing.TB, pod *corev1.Pod, edit func(r *admissionv1.AdmissionReview)) []byte {
	t.Helper()
	p := pod.DeepCopy()
	p.Namespace = ""
	raw, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	r := &admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
		Request: &admissionv1.AdmissionRequest{
			UID:             testUID,
			Kind:            metav1.GroupVersionKind{Version: "v1", Kind: "Pod"},
			Resource:        metav1.GroupVersionResource{Version: "v1", Resource: "pods"},
			RequestKind:     &metav1.GroupVersionKind{Version: "v1", Kind: "Pod"},
			RequestResource: &metav1.GroupVersionResource{Version: "v1", Resource: "pods"},
			Namespace:       testNS,
			Operation:       admissionv1.Create,
			UserInfo:        authUser(),
			Object:          runtime.RawExtension{Raw: raw},
			DryRun:          new(bool),
			Options:         runtime.RawExtension{Raw: []byte(`{"kind":"CreateOptions","apiVersion":"meta.k8s.io/v1"}`)},
		},
	}
	if edit != nil {
		edit(r)
	}
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func authUser() authenticationv1.UserInfo {
	return authenticationv1.UserInfo{
		Username: "system:serviceaccount:kube-system:replicaset-controller",
		Groups:   []string{"system:serviceaccounts", "system:serviceaccounts:kube-system", "system:authenticated"},
	}
}

type fakeNamespaces struct {
	labels map[string]map[string]string
	err    error
	asked  int
}

func (f *fakeNamespaces) lookup(_ context.Context, ns string) (map[string]string, error) {
	f.asked++
	return f.labels[ns], f.err
}

func optedIn() *fakeNamespaces {
	return &fakeNamespaces{labels: map[string]map[string]string{testNS: {api.LabelInject: api.Enabled, "kubernetes.io/metadata.name": testNS}}}
}

func newTestHandler(ns *fakeNamespaces, s Settings) http.Handler {
	return NewHandler(func() Settings { return s }, ns.lookup, nil)
}

func post(h http.Handler, body []byte) *httptest.ResponseRecorder {
	rec := httptest.NewRecorder()
	req := httptest.NewRequest(http.MethodPost, "/mutate-pods?timeout=10s", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	h.ServeHTTP(rec, req)
	return rec
}

// answer decodes a 200 AdmissionReview answer and checks what every one
// must have: the kind, the request's uid, allowed.
func answer(t *testing.T, rec *httptest.ResponseRecorder, apiVersion string) *admissionv1.AdmissionResponse {
	t.Helper()
	if rec.Code != http.StatusOK {
		t.Fatalf("status %d: %s", rec.Code, rec.Body)
	}
	var r admissionv1.AdmissionReview
	if err := json.Unmarshal(rec.Body.Bytes(), &r); err != nil {
		t.Fatalf("answer does not decode: %v\n%s", err, rec.Body)
	}
	if r.Kind != "AdmissionReview" || r.APIVersion != apiVersion || r.Response == nil {
		t.Fatalf("answer is not an %s AdmissionReview with a response: %s", apiVersion, rec.Body)
	}
	if r.Response.UID != testUID || !r.Response.Allowed {
		t.Fatalf("answer uid %q allowed %t; want %q, true", r.Response.UID, r.Response.Allowed, testUID)
	}
	return r.Response
}

func noPatch(t *testing.T, resp *admissionv1.AdmissionResponse) {
	t.Helper()
	if resp.Patch != nil || resp.PatchType != nil {
		t.Errorf("unexpected patch %s", resp.Patch)
	}
}

func jsonError(t *testing.T, rec *httptest.ResponseRecorder, status int) {
	t.Helper()
	if rec.Code != status {
		t.Fatalf("status %d, want %d: %s", rec.Code, status, rec.Body)
	}
	var e struct{ Error string }
	if err := json.Unmarshal(rec.Body.Bytes(), &e); err != nil || e.Error == "" || rec.Header().Get("Content-Type") != "application/json" {
		t.Errorf("not a JSON error (%v): %s", err, rec.Body)
	}
}

func TestHandlerInjects(t *testing.T) {
	ns := optedIn()
	pod := webPod()
	rec := post(newTestHandler(ns, testSettings()), reviewBody(t, pod, nil))
	resp := answer(t, rec, "admission.k8s.io/v1")
	if resp.PatchType == nil || *resp.PatchType != admissionv1.PatchTypeJSONPatch || len(resp.Warnings) > 0 {
		t.Fatalf("patchType %v, warnings %q", resp.PatchType, resp.Warnings)
	}
	if rec.Header().Get("Content-Type") != "application/json" {
		t.Errorf("Content-Type %q", rec.Header().Get("Content-Type"))
	}
	// The patch applies to the object the API server sent (namespace
	// empty) and gives what Mutate gives for it.
	got := patchedPod(t, pod, resp.Patch)
	want, _, _ := Mutate(pod, testSettings())
	want.Namespace = ""
	wantJSON, _ := json.Marshal(want)
	gotJSON, _ := json.Marshal(got)
	if !jsonEqual(t, gotJSON, wantJSON) {
		t.Errorf("patched pod differs from Mutate's:\n got %s\nwant %s", gotJSON, wantJSON)
	}
	if ns.asked != 1 {
		t.Errorf("namespace asked %d times", ns.asked)
	}
}

func TestHandlerAnswers(t *testing.T) {
	huge := with(annotate("example.com/blob", strings.Repeat("x", MaxReviewBytes)))
	tests := []struct {
		name     string
		body     func(t *testing.T) []byte
		ns       *fakeNamespaces
		settings func(*Settings)
		check    func(t *testing.T, rec *httptest.ResponseRecorder, ns *fakeNamespaces)
	}{
		{
			name: "malformed JSON",
			body: func(t *testing.T) []byte {
				return []byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":`)
			},
			check: func(t *testing.T, rec *httptest.ResponseRecorder, _ *fakeNamespaces) {
				jsonError(t, rec, http.StatusBadRequest)
			},
		},
		{
			name: "empty body",
			body: func(t *testing.T) []byte { return nil },
			check: func(t *testing.T, rec *httptest.ResponseRecorder, _ *fakeNamespaces) {
				jsonError(t, rec, http.StatusBadRequest)
			},
		},
		{
			name: "JSON that is not an AdmissionReview",
			body: func(t *testing.T) []byte { b, _ := json.Marshal(webPod()); return b },
			check: func(t *testing.T, rec *httptest.ResponseRecorder, _ *fakeNamespaces) {
				jsonError(t, rec, http.StatusBadRequest)
			},
		},
		{
			name: "AdmissionReview without a request",
			body: func(t *testing.T) []byte {
				return []byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}`)
			},
			check: func(t *testing.T, rec *httptest.ResponseRecorder, _ *fakeNamespaces) {
				jsonError(t, rec, http.StatusBadRequest)
			},
		},
		{
			name: "request field of the wrong type: the uid is still answered",
			body: func(t *testing.T) []byte {
				return []byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"` + string(testUID) + `","operation":5}}`)
			},
			check: func(t *testing.T, rec *httptest.ResponseRecorder, _ *fakeNamespaces) {
				resp := answer(t, rec, "admission.k8s.io/v1")
				noPatch(t, resp)
				wantWarning(t, resp.Warnings, "did not decode")
			},
		},
		{
			name: "pod that does not decode",
			body: func(t *testing.T) []byte {
				return reviewBody(t, webPod(), func(r *admissionv1.AdmissionReview) {
					r.Request.Object.Raw = []byte(`{"apiVersion":"v1","kind":"Pod","spec":{"containers":"web"}}`)
				})
			},
			check: func(t *testing.T, rec *httptest.ResponseRecorder, _ *fakeNamespaces) {
				resp := answer(t, rec, "admission.k8s.io/v1")
				noPatch(t, resp)
				wantWarning(t, resp.Warnings, "not injected", "did not decode")
			},
		},
		{
			name: "no object",
			body: func(t *testing.T) []byte {
				return reviewBody(t, webPod(), func(r *admissionv1.AdmissionReview) { r.Request.Object.Raw = nil })
			},
			check: func(t *testing.T, rec *httptest.ResponseRecorder, _ *fakeNamespaces) {
				resp := answer(t, rec, "admission.k8s.io/v1")
				noPatch(t, resp)
				wantWarning(t, resp.Warnings, "no pod")
			},
		},
		{
			name: "wrong kind",
			body: func(t *testing.T) []byte {
				return reviewBody(t, webPod(), func(r *admissionv1.AdmissionReview) {
					r.Request.Kind = metav1.GroupVersionKind{Group: "apps", Version: "v1", Kind: "Deployment"}
					r.Request.Resource = metav1.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}
				})
			},
			check: func(t *testing.T, rec *httptest.ResponseRecorder, ns *fakeNamespaces) {
				noPatch(t, answer(t, rec, "admission.k8s.io/v1"))
			},
		},
		{
			name: "wrong operation",
			body: func(t *testing.T) []byte {
				return reviewBody(t, webPod(), func(r *admissionv1.AdmissionReview) { r.Request.Operation = admissionv1.Update })
			},
			check: func(t *testing.T, rec *httptest.ResponseRecorder, ns *fakeNamespaces) {
				noPatch(t, answer(t, rec, "admission.k8s.io/v1"))
			},
		},
		{
			name: "subresource",
			body: func(t *testing.T) []byte {
				return reviewBody(t, webPod(), func(r *admissionv1.AdmissionReview) { r.Request.SubResource = "ephemeralcontainers" })
			},
			check: func(t *testing.T, rec *httptest.ResponseRecorder, ns *fakeNamespaces) {
				noPatch(t, answer(t, rec, "admission.k8s.io/v1"))
			},
		},
		{
			name: "huge object",
			body: func(t *testing.T) []byte { return reviewBody(t, huge, nil) },
			check: func(t *testing.T, rec *httptest.ResponseRecorder, ns *fakeNamespaces) {
				resp := answer(t, rec, "admission.k8s.io/v1")
				noPatch(t, resp)
				wantWarning(t, resp.Warnings, "not injected", "larger than 3 MiB")
				if ns.asked != 0 {
					t.Error("namespace asked for a pod not read")
				}
			},
		},
		{
			name: "huge body without a uid up front",
			body: func(t *testing.T) []byte {
				return append([]byte(`{"apiVersion":"admission.k8s.io/v1","padding":"`), bytes.Repeat([]byte("x"), MaxReviewBytes)...)
			},
			check: func(t *testing.T, rec *httptest.ResponseRecorder, _ *fakeNamespaces) {
				jsonError(t, rec, http.StatusRequestEntityTooLarge)
			},
		},
		{
			name: "invalid annotation",
			body: func(t *testing.T) []byte { return reviewBody(t, with(annotate(api.AnnotationMaxWait, "ages")), nil) },
			check: func(t *testing.T, rec *httptest.ResponseRecorder, _ *fakeNamespaces) {
				resp := answer(t, rec, "admission.k8s.io/v1")
				noPatch(t, resp)
				wantWarning(t, resp.Warnings, "not injected", api.AnnotationMaxWait, `"ages"`)
			},
		},
		{
			name: "namespace not opted in",
			body: func(t *testing.T) []byte { return reviewBody(t, webPod(), nil) },
			ns:   &fakeNamespaces{},
			check: func(t *testing.T, rec *httptest.ResponseRecorder, ns *fakeNamespaces) {
				noPatch(t, answer(t, rec, "admission.k8s.io/v1"))
			},
		},
		{
			name: "pod opted in: the namespace is not asked",
			body: func(t *testing.T) []byte {
				return reviewBody(t, with(func(p *corev1.Pod) { p.Labels[api.LabelInject] = api.Enabled }), nil)
			},
			ns: &fakeNamespaces{err: errors.New("must not be asked")},
			check: func(t *testing.T, rec *httptest.ResponseRecorder, ns *fakeNamespaces) {
				if resp := answer(t, rec, "admission.k8s.io/v1"); resp.Patch == nil {
					t.Error("no patch")
				}
				if ns.asked != 0 {
					t.Error("namespace asked")
				}
			},
		},
		{
			name: "pod opted out in an opted-in namespace",
			body: func(t *testing.T) []byte {
				return reviewBody(t, with(func(p *corev1.Pod) { p.Labels[api.LabelInject] = api.Disabled }), nil)
			},
			check: func(t *testing.T, rec *httptest.ResponseRecorder, ns *fakeNamespaces) {
				noPatch(t, answer(t, rec, "admission.k8s.io/v1"))
			},
		},
		{
			name: "unrecognised pod label value",
			body: func(t *testing.T) []byte {
				return reviewBody(t, with(func(p *corev1.Pod) { p.Labels[api.LabelInject] = "true" }), nil)
			},
			check: func(t *testing.T, rec *httptest.ResponseRecorder, ns *fakeNamespaces) {
				resp := answer(t, rec, "admission.k8s.io/v1")
				wantWarning(t, resp.Warnings, api.LabelInject, `"true"`, "ignored")
				if resp.Patch == nil {
					t.Error("the namespace opted in, yet no patch")
				}
			},
		},
		{
			name: "draingate's own namespace",
			body: func(t *testing.T) []byte {
				return reviewBody(t, with(func(p *corev1.Pod) { p.Labels[api.LabelInject] = api.Enabled }), func(r *admissionv1.AdmissionReview) {
					r.Request.Namespace = "draingate-system"
				})
			},
			check: func(t *testing.T, rec *httptest.ResponseRecorder, ns *fakeNamespaces) {
				noPatch(t, answer(t, rec, "admission.k8s.io/v1"))
			},
		},
		{
			name: "namespace lookup fails: failurePolicy decides",
			body: func(t *testing.T) []byte { return reviewBody(t, webPod(), nil) },
			ns:   &fakeNamespaces{err: errors.New("cache not synced")},
			check: func(t *testing.T, rec *httptest.ResponseRecorder, _ *fakeNamespaces) {
				jsonError(t, rec, http.StatusInternalServerError)
			},
		},
		{
			name:     "bad settings: failurePolicy decides",
			body:     func(t *testing.T) []byte { return reviewBody(t, webPod(), nil) },
			settings: func(s *Settings) { s.AgentImage = "" },
			check: func(t *testing.T, rec *httptest.ResponseRecorder, _ *fakeNamespaces) {
				jsonError(t, rec, http.StatusInternalServerError)
			},
		},
		{
			name: "v1beta1 review is answered in v1beta1",
			body: func(t *testing.T) []byte {
				return reviewBody(t, webPod(), func(r *admissionv1.AdmissionReview) { r.APIVersion = "admission.k8s.io/v1beta1" })
			},
			check: func(t *testing.T, rec *httptest.ResponseRecorder, _ *fakeNamespaces) {
				if resp := answer(t, rec, "admission.k8s.io/v1beta1"); resp.Patch == nil {
					t.Error("no patch")
				}
			},
		},
		{
			name: "a preStop field this build does not know",
			body: func(t *testing.T) []byte {
				pod := with(preStop(corev1.LifecycleHandler{Sleep: &corev1.SleepAction{Seconds: 5}}))
				return reviewBody(t, pod, func(r *admissionv1.AdmissionReview) {
					r.Request.Object.Raw = bytes.Replace(r.Request.Object.Raw, []byte(`"preStop":{`), []byte(`"preStop":{"signal":{"name":"SIGUSR1"},`), 1)
				})
			},
			check: func(t *testing.T, rec *httptest.ResponseRecorder, _ *fakeNamespaces) {
				resp := answer(t, rec, "admission.k8s.io/v1")
				noPatch(t, resp)
				wantWarning(t, resp.Warnings, "not injected", `"signal"`)
			},
		},
		{
			name: "unknown fields elsewhere do not matter",
			body: func(t *testing.T) []byte {
				return reviewBody(t, webPod(), func(r *admissionv1.AdmissionReview) {
					r.Request.Object.Raw = bytes.Replace(r.Request.Object.Raw, []byte(`"spec":{`), []byte(`"spec":{"futureField":{"a":1},`), 1)
				})
			},
			check: func(t *testing.T, rec *httptest.ResponseRecorder, _ *fakeNamespaces) {
				if resp := answer(t, rec, "admission.k8s.io/v1"); resp.Patch == nil {
					t.Error("no patch")
				}
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ns := tc.ns
			if ns == nil {
				ns = optedIn()
			}
			s := testSettings()
			if tc.settings != nil {
				tc.settings(&s)
			}
			tc.check(t, post(newTestHandler(ns, s), tc.body(t)), ns)
		})
	}
}

func TestHandlerMethod(t *testing.T) {
	rec := httptest.NewRecorder()
	newTestHandler(optedIn(), testSettings()).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/mutate-pods", nil))
	jsonError(t, rec, http.StatusMethodNotAllowed)
}

// FuzzHandler: whatever the body, the handler answers a 200 AdmissionReview
// that allows, or a 4xx JSON error; never a panic, never a 5xx (the
// settings and the namespace lookup here do not fail).
func FuzzHandler(f *testing.F) {
	f.Add(reviewBody(f, webPod(), nil))
	f.Add(reviewBody(f, with(annotate(api.AnnotationContainers, "web,nope", api.AnnotationMaxWait, "1h")), nil))
	f.Add(reviewBody(f, with(preStop(corev1.LifecycleHandler{Sleep: &corev1.SleepAction{Seconds: 3}})), func(r *admissionv1.AdmissionReview) {
		r.Request.Operation = admissionv1.Update
	}))
	f.Add([]byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u","object":{"spec":{"containers":[{"name":"a","ports":[{"containerPort":1}],"lifecycle":{"preStop":{"httpGet":{"port":"x"}}}}]}}}}`))
	f.Add([]byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u","operation":"CREATE","kind":{"version":"v1","kind":"Pod"},"resource":{"version":"v1","resource":"pods"},"object":{"metadata":{"annotations":{"draingate.dev/max-wait":"1e9h"}},"spec":{"containers":[{"name":"a","ports":[{"containerPort":80}],"resources":{"limits":{"cpu":"1e999"}}}]}}}}`))
	// Parsing this quantity never ended (found by this target).
	f.Add([]byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u","operation":"CREATE","kind":{"version":"v1","kind":"Pod"},"resource":{"version":"v1","resource":"pods"},"object":{"spec":{"containers":[{"name":"a","ports":[{"containerPort":80}],"resources":{"limits":{"cpu":"1e2147483648"}}}]}}}}`))
	f.Add([]byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":5}}`))
	f.Add([]byte(`[]`))
	f.Add([]byte(`null`))
	f.Add([]byte{})
	h := newTestHandler(optedIn(), testSettings())
	f.Fuzz(func(t *testing.T, body []byte) {
		rec := post(h, body)
		switch rec.Code {
		case http.StatusOK:
			var r admissionv1.AdmissionReview
			if err := json.Unmarshal(rec.Body.Bytes(), &r); err != nil || r.Kind != "AdmissionReview" || r.Response == nil || !r.Response.Allowed {
				t.Fatalf("200 without an allowing AdmissionReview (%v): %s", err, rec.Body)
			}
			if r.Response.Patch != nil {
				if _, err := json.Marshal(json.RawMessage(r.Response.Patch)); err != nil {
					t.Fatalf("patch is not JSON: %s", r.Response.Patch)
				}
			}
		case http.StatusBadRequest, http.StatusRequestEntityTooLarge:
			var e struct{ Error string }
			if err := json.Unmarshal(rec.Body.Bytes(), &e); err != nil || e.Error == "" {
				t.Fatalf("%d without a JSON error: %s", rec.Code, rec.Body)
			}
		default:
			t.Fatalf("status %d: %s", rec.Code, rec.Body)
		}
	})
}

// TestHandlerSizesMaxWaitFromRoutes: ExtraWait lengthens the agent's
// max-wait (and with it the grace period) for a pod whose routes need it,
// a pod's max-wait annotation still wins, a lookup that could not size the
// routes gives the longest they may need, and says so in a warning and to
// NotSized, and a failed lookup never fails the admission.
func TestHandlerSizesMaxWaitFromRoutes(t *testing.T) {
	patched := func(t *testing.T, pod *corev1.Pod, extra func(context.Context, *corev1.Pod) (time.Duration, string, error)) *corev1.Pod {
		t.Helper()
		h := NewHandler(func() Settings { return testSettings() }, optedIn().lookup, nil)
		h.ExtraWait = extra
		resp := answer(t, post(h, reviewBody(t, pod, nil)), "admission.k8s.io/v1")
		return patchedPod(t, pod, resp.Patch)
	}
	maxWaitOf := func(p *corev1.Pod) string {
		cmd := p.Spec.Containers[0].Lifecycle.PreStop.Exec.Command
		for i, a := range cmd {
			if a == "--max-wait" && i+1 < len(cmd) {
				return cmd[i+1]
			}
		}
		return ""
	}
	nlb := func(context.Context, *corev1.Pod) (time.Duration, string, error) {
		return 280 * time.Second, "the NLB tail of target group arn", nil
	}
	plain := patched(t, webPod(), nil)
	sized := patched(t, webPod(), nlb)
	if got := maxWaitOf(sized); got != "6m10s" {
		t.Errorf("max-wait behind an NLB %q, want 6m10s (90s + 280s)", got)
	}
	if g, p := *sized.Spec.TerminationGracePeriodSeconds, *plain.Spec.TerminationGracePeriodSeconds; g != p+280 {
		t.Errorf("grace period %ds behind an NLB, want the plain pod's %ds + 280s", g, p)
	}
	if got := maxWaitOf(patched(t, with(annotate(api.AnnotationMaxWait, "45s")), nlb)); got != "45s" {
		t.Errorf("max-wait with the annotation %q, want the annotation's 45s", got)
	}
	failing := func(context.Context, *corev1.Pod) (time.Duration, string, error) {
		return 0, "", errors.New("API down")
	}
	if got, want := maxWaitOf(patched(t, webPod(), failing)), maxWaitOf(plain); got != want {
		t.Errorf("max-wait after a failed lookup %q, want the default %q", got, want)
	}
	unsure := func(context.Context, *corev1.Pod) (time.Duration, string, error) {
		return 280 * time.Second, "the NLB tail (5m0s), the longest", errors.New("the TargetGroupBinding cache has not synced yet")
	}
	h := NewHandler(func() Settings { return testSettings() }, optedIn().lookup, nil)
	h.ExtraWait = unsure
	var told []NotInjected
	h.NotSized = func(_ context.Context, n NotInjected) { told = append(told, n) }
	resp := answer(t, post(h, reviewBody(t, webPod(), nil)), "admission.k8s.io/v1")
	if got := maxWaitOf(patchedPod(t, webPod(), resp.Patch)); got != "6m10s" {
		t.Errorf("max-wait when the routes could not be sized %q, want the longest, 6m10s", got)
	}
	if !slices.ContainsFunc(resp.Warnings, func(w string) bool { return strings.Contains(w, "not sized") && strings.Contains(w, "has not synced") }) ||
		len(told) != 1 || !strings.Contains(told[0].Why, "has not synced") {
		t.Errorf("warnings %q, told %+v: want both to say the routes could not be sized, and why", resp.Warnings, told)
	}
}

// TestHandlerSizesMaxWaitFromWhatWasLearnt: Need lengthens a max-wait
// shorter than what the cluster learnt the pod's routes need, up to the
// ceiling, never shortens one, and the pod's annotation and an admission
// warning say why the max-wait is not the configured one; a pod's own
// max-wait annotation still wins.
func TestHandlerSizesMaxWaitFromWhatWasLearnt(t *testing.T) {
	admit := func(t *testing.T, pod *corev1.Pod, ceiling time.Duration, extra time.Duration, need time.Duration) (*corev1.Pod, []string) {
		t.Helper()
		s := testSettings()
		s.MaxWaitCeiling = ceiling
		h := NewHandler(func() Settings { return s }, optedIn().lookup, nil)
		h.ExtraWait = func(context.Context, *corev1.Pod) (time.Duration, string, error) { return extra, "the NLB tail", nil }
		h.Need = func(context.Context, *corev1.Pod) (time.Duration, string) { return need, "the controller's lag" }
		resp := answer(t, post(h, reviewBody(t, pod, nil)), "admission.k8s.io/v1")
		return patchedPod(t, pod, resp.Patch), resp.Warnings
	}
	maxWaitOf := func(p *corev1.Pod) string {
		cmd := p.Spec.Containers[0].Lifecycle.PreStop.Exec.Command
		return cmd[slices.Index(cmd, "--max-wait")+1]
	}
	plain, ws := admit(t, webPod(), 10*time.Minute, 0, 0)
	if maxWaitOf(plain) != "1m30s" || plain.Annotations[api.AnnotationMaxWaitSized] != "" || len(ws) != 0 {
		t.Fatalf("nothing learnt: max-wait %s, annotation %q, warnings %q; want the configured 1m30s, and nothing said",
			maxWaitOf(plain), plain.Annotations[api.AnnotationMaxWaitSized], ws)
	}
	for _, c := range []struct {
		name               string
		extra, need, ceil  time.Duration
		want, wantSaid     string
		wantGraceOverPlain int64
	}{
		{"shorter need", 0, 60 * time.Second, 10 * time.Minute, "1m30s", "", 0},
		{"longer need", 0, 140 * time.Second, 10 * time.Minute, "2m20s", "learnt: the controller's lag", 50},
		{"over the ceiling", 0, 20 * time.Minute, 4 * time.Minute, "4m0s", "capped at the ceiling 4m0s", 150},
		{"routes' tail beats it", 280 * time.Second, 140 * time.Second, 10 * time.Minute, "6m10s", "by 4m40s, for the NLB tail", 280},
	} {
		t.Run(c.name, func(t *testing.T) {
			pod, ws := admit(t, webPod(), c.ceil, c.extra, c.need)
			if got := maxWaitOf(pod); got != c.want {
				t.Errorf("max-wait %s, want %s", got, c.want)
			}
			if g := *pod.Spec.TerminationGracePeriodSeconds - *plain.Spec.TerminationGracePeriodSeconds; g != c.wantGraceOverPlain {
				t.Errorf("grace period %ds over the plain pod's, want %ds", g, c.wantGraceOverPlain)
			}
			said := pod.Annotations[api.AnnotationMaxWaitSized]
			if c.wantSaid == "" {
				if said != "" || len(ws) != 0 {
					t.Errorf("annotation %q, warnings %q; want nothing said", said, ws)
				}
				return
			}
			if !strings.HasPrefix(said, c.want+": ") || !strings.Contains(said, c.wantSaid) {
				t.Errorf("annotation %q, want %q and %q", said, c.want, c.wantSaid)
			}
			if !slices.ContainsFunc(ws, func(w string) bool { return strings.Contains(w, "max-wait "+c.want) && strings.Contains(w, c.wantSaid) }) {
				t.Errorf("warnings %q, want one naming max-wait %s and %q", ws, c.want, c.wantSaid)
			}
		})
	}
	own, ws := admit(t, with(annotate(api.AnnotationMaxWait, "45s")), 10*time.Minute, 0, 140*time.Second)
	if maxWaitOf(own) != "45s" || own.Annotations[api.AnnotationMaxWaitSized] != "" || len(ws) != 0 {
		t.Errorf("own annotation: max-wait %s, sized %q, warnings %q; want 45s and nothing said", maxWaitOf(own), own.Annotations[api.AnnotationMaxWaitSized], ws)
	}
}

// patchedPod applies an answer's patch to pod as the API server sent it
// (reviewBody leaves the namespace out) and decodes the result.
func patchedPod(t *testing.T, pod *corev1.Pod, patch []byte) *corev1.Pod {
	t.Helper()
	sent := pod.DeepCopy()
	sent.Namespace = ""
	raw, _ := json.Marshal(sent)
	var got corev1.Pod
	if err := json.Unmarshal(applyPatch(t, raw, patch), &got); err != nil {
		t.Fatal(err)
	}
	return &got
}
