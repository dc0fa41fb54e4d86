package inject

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"draingate.dev/draingate/api"
)

func limitRange(name string, items ...corev1.LimitRangeItem) corev1.LimitRange {
	return corev1.LimitRange{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.LimitRangeSpec{Limits: items}}
}

func list(kv ...string) corev1.ResourceList {
	l := corev1.ResourceList{}
	for i := 0; i+1 < len(kv); i += 2 {
		l[corev1.ResourceName(kv[i])] = resource.MustParse(kv[i+1])
	}
	return l
}

func TestFitLimitRanges(t *testing.T) {
	def := installerResources(corev1.ResourceRequirements{})
	for _, c := range []struct {
		name         string
		ranges       []corev1.LimitRange
		wantRequests corev1.ResourceList
		wantLimits   corev1.ResourceList
	}{
		{"none", nil, def.Requests, def.Limits},
		{"pod ranges do not apply",
			[]corev1.LimitRange{limitRange("p", corev1.LimitRangeItem{Type: corev1.LimitTypePod, Min: list("cpu", "1")})},
			def.Requests, def.Limits},
		{"a minimum raises both",
			[]corev1.LimitRange{limitRange("min", corev1.LimitRangeItem{Type: corev1.LimitTypeContainer, Min: list("cpu", "50m", "ephemeral-storage", "1Mi")})},
			list("cpu", "50m", "memory", "16Mi", "ephemeral-storage", "1Mi"), list("cpu", "50m", "memory", "16Mi", "ephemeral-storage", "1Mi")},
		{"a maximum lowers both, and one for an unset resource takes a limit",
			[]corev1.LimitRange{limitRange("max", corev1.LimitRangeItem{Type: corev1.LimitTypeContainer, Max: list("memory", "8Mi", "ephemeral-storage", "64Mi")})},
			list("cpu", "10m", "memory", "8Mi"), list("cpu", "10m", "memory", "8Mi", "ephemeral-storage", "64Mi")},
	} {
		got, notes := FitLimitRanges("installer", def, c.ranges)
		if !equalLists(got.Requests, c.wantRequests) || !equalLists(got.Limits, c.wantLimits) {
			t.Errorf("%s: requests %v limits %v; want %v, %v (notes %q)", c.name, got.Requests, got.Limits, c.wantRequests, c.wantLimits, notes)
		}
		if len(c.ranges) > 0 && c.name != "pod ranges do not apply" && len(notes) == 0 {
			t.Errorf("%s: no note of the change", c.name)
		}
	}
	if q := def.Requests[corev1.ResourceCPU]; q.String() != "10m" {
		t.Errorf("FitLimitRanges changed its argument: %v", def.Requests)
	}
}

func equalLists(a, b corev1.ResourceList) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || v.Cmp(w) != 0 {
			return false
		}
	}
	return true
}

// The handler fits the installer to the namespace's LimitRanges: a 50m
// minimum would refuse the default 10m installer after the webhook ran.
func TestHandlerFitsLimitRanges(t *testing.T) {
	hd := NewHandler(func() Settings { return testSettings() }, optedIn().lookup, nil)
	hd.LimitRanges = func(_ context.Context, ns string) ([]corev1.LimitRange, error) {
		if ns != testNS {
			t.Errorf("LimitRanges of %q", ns)
		}
		return []corev1.LimitRange{limitRange("min", corev1.LimitRangeItem{Type: corev1.LimitTypeContainer, Min: list("cpu", "50m")})}, nil
	}
	pod := webPod()
	resp := answer(t, post(hd, reviewBody(t, pod, nil)), "admission.k8s.io/v1")
	inst := patchedPod(t, pod, resp.Patch).Spec.InitContainers[0]
	if inst.Name != api.InstallerName || inst.Resources.Requests.Cpu().String() != "50m" || inst.Resources.Limits.Cpu().String() != "50m" {
		t.Errorf("installer %s resources %+v, want cpu 50m", inst.Name, inst.Resources)
	}
}
