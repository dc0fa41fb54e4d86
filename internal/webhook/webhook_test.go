package webhook

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"draingate.dev/draingate/internal/inject"
)

// A not-injected pod's Event goes on its controller, where whoever looks
// at the Deployment's ReplicaSet sees it, else on its namespace.
func TestNotInjectedRef(t *testing.T) {
	owner := &metav1.OwnerReference{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "web-7d9c6b5f4", UID: "u-rs"}
	ref, what := notInjectedRef(inject.NotInjected{Namespace: "shop", GenerateName: "web-7d9c6b5f4-", Owner: owner})
	if ref.Kind != "ReplicaSet" || ref.Name != "web-7d9c6b5f4" || ref.Namespace != "shop" || ref.UID != "u-rs" || ref.APIVersion != "apps/v1" ||
		what != "a pod shop/web-7d9c6b5f4-*" {
		t.Errorf("owned: %+v, %q", ref, what)
	}
	ref, what = notInjectedRef(inject.NotInjected{Namespace: "shop", Name: "debug"})
	if ref.Kind != "Namespace" || ref.Name != "shop" || ref.APIVersion != "v1" || what != "pod shop/debug" {
		t.Errorf("bare pod: %+v, %q", ref, what)
	}
}
