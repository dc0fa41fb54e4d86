package sidecar

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"reflect"
	"sync/atomic"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"
)

var (
	mwcGVR = admissionregistrationv1.SchemeGroupVersion.WithResource("mutatingwebhookconfigurations")
	nsGVR  = corev1.SchemeGroupVersion.WithResource("namespaces")
)

// apiServer makes a fake clientset call the sidecar webhook on pod CREATE
// as the API server would: it reads the configuration, matches the pod's
// namespace against its namespaceSelector, posts an AdmissionReview to its
// URL trusting only its caBundle, and applies the JSON patch it gets. calls
// counts the webhook calls. Reactors run under the fake's lock, so they
// read objects from its tracker, never through the clientset.
func apiServer(cl *fake.Clientset, calls *atomic.Int32) {
	cl.PrependReactor("create", "mutatingwebhookconfigurations", func(a k8stesting.Action) (bool, runtime.Object, error) {
		obj := a.(k8stesting.CreateAction).GetObject().(*admissionregistrationv1.MutatingWebhookConfiguration)
		obj.UID = uuid.NewUUID() // the tracker sets none
		return false, nil, nil
	})
	cl.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		pod := a.(k8stesting.CreateAction).GetObject().(*corev1.Pod).DeepCopy()
		pod.Namespace = a.GetNamespace()
		o, err := cl.Tracker().Get(mwcGVR, "", ConfigName)
		if apierrors.IsNotFound(err) {
			return true, pod, nil
		}
		if err != nil {
			return true, nil, err
		}
		wh := o.(*admissionregistrationv1.MutatingWebhookConfiguration).Webhooks[0]
		nso, err := cl.Tracker().Get(nsGVR, "", pod.Namespace)
		if err != nil {
			return true, nil, err
		}
		sel, err := metav1.LabelSelectorAsSelector(wh.NamespaceSelector)
		if err != nil {
			return true, nil, err
		}
		if !sel.Matches(labels.Set(nso.(*corev1.Namespace).Labels)) {
			return true, pod, nil
		}
		calls.Add(1)
		out, err := callWebhook(wh, pod)
		if err != nil && *wh.FailurePolicy == admissionregistrationv1.Fail {
			return true, nil, apierrors.NewInternalError(err)
		}
		return true, out, nil
	})
}

func callWebhook(wh admissionregistrationv1.MutatingWebhook, pod *corev1.Pod) (*corev1.Pod, error) {
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(wh.ClientConfig.CABundle) {
		return nil, errors.New("caBundle holds no certificate")
	}
	raw, err := json.Marshal(pod)
	if err != nil {
		return nil, err
	}
	body, err := json.Marshal(admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
		Request: &admissionv1.AdmissionRequest{
			UID: "probe", Kind: metav1.GroupVersionKind{Version: "v1", Kind: "Pod"},
			Resource: metav1.GroupVersionResource{Version: "v1", Resource: "pods"}, Namespace: pod.Namespace,
			Operation: admissionv1.Create, Object: runtime.RawExtension{Raw: raw}, DryRun: ptr.To(true),
		},
	})
	if err != nil {
		return nil, err
	}
	c := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}, Timeout: time.Minute}
	defer c.CloseIdleConnections()
	res, err := c.Post(*wh.ClientConfig.URL, "application/json", bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	defer res.Body.Close()
	var review admissionv1.AdmissionReview
	if err := json.NewDecoder(res.Body).Decode(&review); err != nil {
		return nil, fmt.Errorf("status %d: %w", res.StatusCode, err)
	}
	if review.Response == nil || !review.Response.Allowed {
		return nil, fmt.Errorf("not allowed: %+v", review.Response)
	}
	if review.Response.Patch == nil {
		return pod, nil
	}
	return patchPod(pod, review.Response.Patch)
}

func TestInstall(t *testing.T) {
	cl := fake.NewClientset()
	var calls atomic.Int32
	apiServer(cl, &calls)
	ctx := context.Background()

	uninstall, err := Install(ctx, cl, "127.0.0.1", Options{Image: image})
	if err != nil {
		t.Fatal(err)
	}
	defer uninstall(ctx)
	if calls.Load() == 0 {
		t.Fatal("Install returned before its webhook was called")
	}

	got, err := cl.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, ConfigName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Webhooks) != 1 {
		t.Fatalf("webhooks %+v, want one", got.Webhooks)
	}
	wh := got.Webhooks[0]
	u, err := url.Parse(ptr.Deref(wh.ClientConfig.URL, ""))
	if err != nil || u.Scheme != "https" || u.Hostname() != "127.0.0.1" || u.Port() == "" || u.Path != "/mutate" || wh.ClientConfig.Service != nil {
		t.Errorf("clientConfig url %v (%v), service %v; want https://127.0.0.1:<port>/mutate", u, err, wh.ClientConfig.Service)
	}
	wantRules := []admissionregistrationv1.RuleWithOperations{{
		Operations: []admissionregistrationv1.OperationType{"CREATE"},
		Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods"}, Scope: ptr.To(admissionregistrationv1.NamespacedScope)},
	}}
	if !reflect.DeepEqual(wh.Rules, wantRules) ||
		!reflect.DeepEqual(wh.NamespaceSelector, &metav1.LabelSelector{MatchLabels: map[string]string{"draingate.dev/lab-sidecar": "enabled"}}) ||
		*wh.FailurePolicy != "Fail" || *wh.SideEffects != "None" || *wh.ReinvocationPolicy != "Never" ||
		!reflect.DeepEqual(wh.AdmissionReviewVersions, []string{"v1"}) || wh.ObjectSelector != nil {
		t.Errorf("webhook %+v: want pod CREATE in namespaces labelled %s=%s, Fail, None, Never, v1", wh, Label, Enabled)
	}
	// After every draingate configuration name the chart can make in the lab.
	for _, name := range []string{"draingate", "lab-0-draingate-sys-12345", "my-draingate"} {
		if ConfigName <= name {
			t.Errorf("%s does not sort after %s", ConfigName, name)
		}
	}

	// A lab pod in a labelled namespace gets the sidecar; the probe
	// namespace is gone.
	nss, _ := cl.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
	if len(nss.Items) != 0 {
		t.Errorf("namespaces left behind: %v", nss.Items)
	}
	cl.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "lab", Labels: map[string]string{Label: Enabled}}}, metav1.CreateOptions{})
	pod, err := cl.CoreV1().Pods("lab").Create(ctx, labPod(), metav1.CreateOptions{})
	if err != nil || pod.Annotations[Annotation] != Injected || len(pod.Spec.Containers) != 2 {
		t.Fatalf("a lab pod: %v, %+v; want it with the sidecar", err, pod)
	}

	if err := uninstall(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, ConfigName, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("configuration after uninstall: %v; want it deleted", err)
	}
	if _, err := callWebhook(wh, labPod()); err == nil {
		t.Error("the webhook still answers after uninstall")
	}
	if err := uninstall(ctx); err != nil {
		t.Errorf("a second uninstall: %v", err)
	}
}

func TestInstallTakesOverAStaleConfiguration(t *testing.T) {
	cl := fake.NewClientset()
	var calls atomic.Int32
	apiServer(cl, &calls)
	ctx := context.Background()
	stale := configuration("https://127.0.0.1:1/mutate", []byte("stale"))
	if _, err := cl.AdmissionregistrationV1().MutatingWebhookConfigurations().Create(ctx, stale, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	uninstall, err := Install(ctx, cl, "127.0.0.1", Options{Image: image})
	defer uninstall(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := cl.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, ConfigName, metav1.GetOptions{})
	if *got.Webhooks[0].ClientConfig.URL == *stale.Webhooks[0].ClientConfig.URL {
		t.Error("the stale configuration was kept")
	}
}

// A webhook the API server never calls fails Install, which then removes
// what it made.
func TestInstallFailsAndCleansUp(t *testing.T) {
	cl := fake.NewClientset() // no reactor: dry-run pods come back as sent
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	uninstall, err := Install(ctx, cl, "127.0.0.1", Options{Image: image})
	if err == nil {
		t.Fatal("Install succeeded with a webhook that is never called")
	}
	if uninstall == nil {
		t.Fatal("uninstall is nil")
	}
	if err := uninstall(context.Background()); err != nil {
		t.Errorf("uninstall after a failed Install: %v", err)
	}
	bg := context.Background()
	if _, err := cl.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(bg, ConfigName, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("configuration after a failed Install: %v; want none", err)
	}
	if nss, _ := cl.CoreV1().Namespaces().List(bg, metav1.ListOptions{}); len(nss.Items) != 0 {
		t.Errorf("namespaces after a failed Install: %v", nss.Items)
	}

	for _, bad := range []struct {
		ip   string
		opts Options
	}{{"127.0.0.1", Options{}}, {"localhost", Options{Image: image}}} {
		uninstall, err := Install(bg, cl, bad.ip, bad.opts)
		if err == nil || uninstall == nil || uninstall(bg) != nil {
			t.Errorf("Install(%q, %+v): %v; want an error and a harmless uninstall", bad.ip, bad.opts, err)
		}
	}
}
