package targetgroup

import (
	"context"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"

	"draingate.dev/draingate/internal/route"
)

// The TargetGroupBindings: their CRD may be installed after the server
// starts (or never), so the source looks for it until it appears, and
// keeps only the spec fields it reads.

// Transform implements route.Transformer: a binding keeps its identity and the
// spec fields the gate reads (targetGroupARN, targetType, serviceRef).
func (s *Source) Transform(obj any) (any, bool) {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok || u.GroupVersionKind().GroupKind() != BindingGVK.GroupKind() {
		return obj, false
	}
	out := &unstructured.Unstructured{Object: map[string]any{}}
	out.SetGroupVersionKind(u.GroupVersionKind())
	out.SetName(u.GetName())
	out.SetNamespace(u.GetNamespace())
	out.SetUID(u.GetUID())
	out.SetResourceVersion(u.GetResourceVersion())
	spec := map[string]any{}
	for _, k := range []string{"targetGroupARN", "targetType", "serviceRef"} {
		if v, ok, _ := unstructured.NestedFieldNoCopy(u.Object, "spec", k); ok {
			spec[k] = v
		}
	}
	out.Object["spec"] = spec
	return out, true
}

// Binding is the part of a TargetGroupBinding the gate reads.
type Binding struct {
	Namespace, Name string
	ARN             string
	TargetType      string
	Service         string
}

// BindingFrom reads a binding.
func BindingFrom(u *unstructured.Unstructured) Binding {
	b := Binding{Namespace: u.GetNamespace(), Name: u.GetName()}
	b.ARN, _, _ = unstructured.NestedString(u.Object, "spec", "targetGroupARN")
	b.TargetType, _, _ = unstructured.NestedString(u.Object, "spec", "targetType")
	b.Service, _, _ = unstructured.NestedString(u.Object, "spec", "serviceRef", "name")
	return b
}

// watchCRD looks for the CRD until it appears, then starts its informer.
// Until then target-group routes are off, which the log says once.
func (s *Source) watchCRD(ctx context.Context) {
	gv := BindingGVK.GroupVersion().String()
	said := false
	for {
		found, err := s.installed(gv)
		switch {
		case err != nil:
			// Not knowing is not "absent": until discovery answers, the
			// gate answers no verdicts (rule 1).
			s.cfg.Log.Error("cannot tell whether the TargetGroupBinding CRD is installed; not answering until discovery does", "err", err)
		case !found:
			s.known.Store(true)
			if !said {
				s.cfg.Log.Warn("the TargetGroupBinding CRD (" + gv + ") is not installed: target-group routes are off until it appears")
				said = true
			}
		}
		if found {
			break
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(s.cfg.CRDInterval):
		}
	}
	s.on.Store(true)
	s.known.Store(true)
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(BindingGVK)
	inf, err := s.cache.GetInformer(ctx, u, cache.BlockUntilSynced(false))
	if err == nil {
		_, err = inf.AddEventHandler(route.NamespaceHandler(s.changed))
	}
	if err == nil && s.cfg.Poller != nil {
		// Learn each group's load balancer type as its binding appears, so
		// that the injection webhook sizes the pods it creates from it,
		// and an instance group's health checks (NodeDrain).
		learn := func(obj any) {
			if u, ok := obj.(*unstructured.Unstructured); ok {
				if b := BindingFrom(u); b.ARN != "" {
					s.cfg.Poller.LearnType(b.ARN)
				}
			}
		}
		_, err = inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
			AddFunc:    learn,
			UpdateFunc: func(_, obj any) { learn(obj) },
		})
	}
	if err != nil {
		s.cfg.Log.Error("TargetGroupBinding informer", "err", err)
		return
	}
	if !toolscache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		return
	}
	s.synced.Store(true)
	s.cfg.Log.Info("caches synced: TargetGroupBindings; target-group routes are on")
	s.changed("", "")
}

// installed asks discovery whether gv serves TargetGroupBindings. A group
// version that is not served at all is "not installed", any other error is
// an error.
func (s *Source) installed(gv string) (bool, error) {
	res, err := s.cfg.Kube.Discovery().ServerResourcesForGroupVersion(gv)
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	for _, r := range res.APIResources {
		if r.Kind == BindingGVK.Kind {
			return true, nil
		}
	}
	return false, nil
}
