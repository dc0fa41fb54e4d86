package inject

import (
	"bytes"
	"context"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"
)

func TestQuantityTooCostly(t *testing.T) {
	for s, want := range map[string]bool{
		"":                             false,
		"100m":                         false,
		"1e3":                          false,
		"1E-9999":                      false,
		"-1.5e+0009999":                false, // leading zeros do not count
		"9223372036854775807":          false,
		"1e10000":                      true,
		"1e-3000000":                   true,
		"1e2147483648":                 true,
		".5E-12345":                    true,
		strings.Repeat("9", 64):        false,
		strings.Repeat("9", 65):        true,
		strings.Repeat("9", 65) + "Mi": true,
		"1.2.3e99999":                  false, // not a number
		"e99999":                       false,
		"1e99999x":                     false, // not a decimal exponent
		"v1e99999":                     false,
		"1Ei":                          false,
	} {
		if got := quantityTooCostly(s); got != want {
			t.Errorf("quantityTooCostly(%.30q) = %t, want %t", s, got, want)
		}
	}
}

// TestHandlerRefusesCostlyQuantities: a pod whose resource quantity would
// take the quantity parser forever ("1e2147483648", found by FuzzHandler:
// the handler then never answered) or a long while is admitted at once,
// not injected, with a warning that says why; as a string or as a JSON
// number, in any field.
func TestHandlerRefusesCostlyQuantities(t *testing.T) {
	pod := with(func(p *corev1.Pod) {
		p.Spec.Containers[0].Resources.Limits = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("7")}
	})
	body := reviewBody(t, pod, nil)
	if !bytes.Contains(body, []byte(`"cpu":"7"`)) {
		t.Fatalf("no cpu limit to replace in %s", body)
	}
	h := newTestHandler(optedIn(), testSettings())
	for _, v := range []string{`"1e2147483648"`, `1e2147483648`, `"1e-3000000"`, `"` + strings.Repeat("1", 100000) + `"`} {
		b := bytes.Replace(body, []byte(`"cpu":"7"`), []byte(`"cpu":`+v), 1)
		resp := answer(t, post(h, b), "admission.k8s.io/v1")
		noPatch(t, resp)
		wantWarning(t, resp.Warnings, "not injected", "resource quantity")
	}
	// The same pod with its real quantity is injected.
	if resp := answer(t, post(h, body), "admission.k8s.io/v1"); resp.Patch == nil {
		t.Errorf("the pod with cpu 7 was not injected: %q", resp.Warnings)
	}
}

// BenchmarkHandler is the handler's cost per review: a Deployment's pod,
// and one near the largest review it reads whole (MaxReviewBytes, mostly
// environment variables); both injected.
func BenchmarkHandler(b *testing.B) {
	h := newTestHandler(optedIn(), testSettings())
	typical := reviewBody(b, webPod(), nil)
	big := with(func(p *corev1.Pod) {
		c := &p.Spec.Containers[0]
		for len(c.Env)*80 < MaxReviewBytes-64<<10 {
			c.Env = append(c.Env, corev1.EnvVar{Name: "V", Value: strings.Repeat("x", 50)})
		}
	})
	for _, bc := range []struct {
		name string
		body []byte
	}{{"typical", typical}, {"max", reviewBody(b, big, nil)}} {
		b.Run(bc.name, func(b *testing.B) {
			b.SetBytes(int64(len(bc.body)))
			for b.Loop() {
				if rec := post(h, bc.body); rec.Code != 200 {
					b.Fatalf("status %d", rec.Code)
				}
			}
		})
	}
}

// NotInjected hears of every opted-in pod admitted without the agent, with
// its controller and why (the ReplicaSet controller that created it drops
// the warning); of no pod injected or not opted in.
func TestHandlerTellsNotInjected(t *testing.T) {
	var told []NotInjected
	hd := NewHandler(func() Settings { return testSettings() }, optedIn().lookup, nil)
	hd.NotInjected = func(_ context.Context, n NotInjected) { told = append(told, n) }

	body := reviewBody(t, webPod(), nil)
	answer(t, post(hd, body), "admission.k8s.io/v1")
	if len(told) != 0 {
		t.Fatalf("an injected pod was reported not injected: %+v", told)
	}
	hd.nsLabels = (&fakeNamespaces{}).lookup // the namespace opts nothing in
	answer(t, post(hd, body), "admission.k8s.io/v1")
	if len(told) != 0 {
		t.Fatalf("a pod not opted in was reported: %+v", told)
	}
	hd.nsLabels = optedIn().lookup
	bad := bytes.Replace(body, []byte(`"containers":[`), []byte(`"overhead":{"cpu":"1e2147483648"},"containers":[`), 1)
	resp := answer(t, post(hd, bad), "admission.k8s.io/v1")
	wantWarning(t, resp.Warnings, "not injected")
	if len(told) != 1 {
		t.Fatalf("told %+v, want the one pod", told)
	}
	dry := reviewBody(t, webPod(), func(r *admissionv1.AdmissionReview) { r.Request.DryRun = ptr.To(true) })
	dry = bytes.Replace(dry, []byte(`"containers":[`), []byte(`"overhead":{"cpu":"1e2147483648"},"containers":[`), 1)
	answer(t, post(hd, dry), "admission.k8s.io/v1")
	if len(told) != 1 {
		t.Errorf("a dry run was reported too: %+v", told)
	}
	n := told[0]
	if n.Namespace != testNS || n.GenerateName != "web-7d9c6b5f4-" || n.Owner == nil || n.Owner.Kind != "ReplicaSet" || n.Owner.Name != "web-7d9c6b5f4" ||
		!strings.Contains(n.Why, "resource quantity") || strings.HasPrefix(n.Why, "draingate:") {
		t.Errorf("told %+v (owner %+v); want the ReplicaSet web-7d9c6b5f4 in %s and why, unprefixed", n, n.Owner, testNS)
	}
}
