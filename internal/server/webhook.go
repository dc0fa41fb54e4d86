package server

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sversion "k8s.io/apimachinery/pkg/version"
	"k8s.io/client-go/kubernetes"
	clientscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"draingate.dev/draingate/internal/backoff"
	"draingate.dev/draingate/internal/inject"
	"draingate.dev/draingate/internal/version"
)

// imageVolumes reports whether the API server has image volumes on by
// default; otherwise the injector copies the agent with an init container,
// and the log says why.
func (s *Server) imageVolumes(cs kubernetes.Interface) bool {
	return s.apiServerHas(cs, inject.ImageVolumesOnByDefault,
		"cannot read the API server's version: injecting the agent with an init container, not an image volume",
		"image volumes are on by default from Kubernetes 1.35; this API server is older: injecting the agent with an init container instead")
}

// nativeSidecars reports whether every kubelet of this cluster runs native
// sidecars (inject.NativeSidecarsEverywhere); otherwise the injector adds
// no watcher, and the log says why: the agents then watch from their hooks
// on, and traffic evidence rarely closes a route before its tail.
func (s *Server) nativeSidecars(cs kubernetes.Interface) bool {
	return s.apiServerHas(cs, inject.NativeSidecarsEverywhere,
		"cannot read the API server's version: injecting no watcher (its native sidecar needs every kubelet at 1.29+)",
		"the watcher is a native sidecar, which kubelets older than 1.29 run as an init container that never ends; below API server 1.32 such kubelets may be in the cluster: injecting no watcher")
}

// apiServerHas reads the API server's version and reports whether has
// says yes; an unreadable version logs unreadable, a version too old logs
// tooOld, and both answer no.
func (s *Server) apiServerHas(cs kubernetes.Interface, has func(*k8sversion.Info) bool, unreadable, tooOld string) bool {
	v, err := cs.Discovery().ServerVersion()
	if err != nil {
		s.log.Warn(unreadable, "err", err)
		return false
	}
	if !has(v) {
		s.log.Warn(tooOld, "version", v.GitVersion)
		return false
	}
	return true
}

// namespaceObject is the metadata-only Namespace the webhook caches: it
// needs their labels (draingate.dev/inject) and nothing else.
func namespaceObject() *metav1.PartialObjectMetadata {
	m := &metav1.PartialObjectMetadata{}
	m.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Namespace"))
	return m
}

// transformNamespace keeps a namespace's identity and labels.
func transformNamespace(m *metav1.PartialObjectMetadata) *metav1.PartialObjectMetadata {
	out := &metav1.PartialObjectMetadata{TypeMeta: m.TypeMeta}
	out.Name, out.UID, out.ResourceVersion, out.Labels = m.Name, m.UID, m.ResourceVersion, m.Labels
	return out
}

// certRetry paces attempts to load or make the webhook's certificate.
var certRetry = backoff.Policy{Min: time.Second, Max: 30 * time.Second}

// startWebhook loads the certificate (retrying in the background while it
// cannot: the webhook then refuses TLS and the API server applies the
// failurePolicy, Ignore by default), starts the namespace cache and serves
// the injector.
func (s *Server) startWebhook(ctx context.Context, w *WebhookOptions, serve func(net.Listener, http.Handler)) error {
	s.o.Registry.MustRegister(certificateReady(w.Certs.Ready))
	if _, err := s.cache.GetInformer(ctx, namespaceObject(), cache.BlockUntilSynced(false)); err != nil {
		return fmt.Errorf("server: namespace informer: %w", err)
	}
	if _, err := s.cache.GetInformer(ctx, &corev1.LimitRange{}, cache.BlockUntilSynced(false)); err != nil {
		return fmt.Errorf("server: LimitRange informer: %w", err)
	}
	go func() {
		backoff.Retry(ctx, certRetry, func() error {
			err := w.Certs.Sync(ctx)
			if err != nil {
				s.log.Error("webhook certificate not ready; pods are admitted without injection until it is", "err", err)
			}
			return err
		})
		w.Certs.Run(ctx)
	}()
	settings := w.Settings
	if settings.Version == "" {
		settings.Version = version.Version
	}
	h := inject.NewHandler(func() inject.Settings { return settings }, s.namespaceLabels, s.log.With("part", "webhook"))
	h.ExtraWait = s.admissionWait
	if s.o.LearnLag {
		h.Need = s.admissionNeed
	}
	h.LimitRanges = s.limitRanges
	s.o.Registry.MustRegister(s.metrics.notInjected, s.metrics.notSized)
	rec := s.events.NewRecorder(clientscheme.Scheme, corev1.EventSource{Component: "draingate-webhook"})
	h.NotInjected = func(_ context.Context, n inject.NotInjected) {
		s.metrics.notInjected.Inc()
		ref, what := notInjectedRef(n)
		rec.Eventf(ref, corev1.EventTypeWarning, EventNotInjected, "%s admitted without draingate's agent: %s", what, n.Why)
	}
	h.NotSized = func(_ context.Context, n inject.NotInjected) {
		s.metrics.notSized.Inc()
		ref, what := notInjectedRef(n)
		rec.Eventf(ref, corev1.EventTypeWarning, EventNotSized, "%s admitted with a max-wait not sized from its routes: %s", what, n.Why)
	}
	mux := http.NewServeMux()
	mux.Handle("/mutate-pods", h)
	ln := tls.NewListener(w.Listener, &tls.Config{GetCertificate: w.Certs.GetCertificate, MinVersion: tls.VersionTLS12})
	serve(ln, mux)
	s.log.Info("serving the injection webhook", "addr", w.Listener.Addr().String(), "agent_image", settings.AgentImage, "agent_server", settings.Server)
	return nil
}

// admissionWait is how much longer than the configured max-wait a new
// pod's routes may need: the longest any kind of route asks for (an NLB's
// tail beyond the ALB one), with why, naming the route. The kinds read
// their caches only. A kind that cannot tell answers its longest tail's
// and an error: the error is returned beside the longest, which the
// webhook applies, and says so.
func (s *Server) admissionWait(ctx context.Context, pod *corev1.Pod) (time.Duration, string, error) {
	var longest time.Duration
	var why string
	var errs []error
	for _, src := range s.sources {
		extra, w, err := src.AdmissionWait(ctx, pod)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s routes: %w", src.Kind(), err))
		}
		if extra > longest {
			longest, why = extra, w
		}
	}
	return longest, why, errors.Join(errs...)
}

// namespaceLabels reads a namespace's labels from the cache.
func (s *Server) namespaceLabels(ctx context.Context, ns string) (map[string]string, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	m := namespaceObject()
	if err := s.cache.Get(ctx, client.ObjectKey{Name: ns}, m); err != nil {
		return nil, fmt.Errorf("namespace %s: %w", ns, err)
	}
	return m.Labels, nil
}

// notInjectedRef is where a not-injected pod's Event goes, and how it names
// the pod: on its controller (a ReplicaSet, whose pods are gone or renamed
// by the time anybody looks), else on its namespace.
func notInjectedRef(n inject.NotInjected) (*corev1.ObjectReference, string) {
	what := "pod " + n.Namespace + "/" + n.Name
	if n.Name == "" {
		what = "a pod " + n.Namespace + "/" + n.GenerateName + "*"
	}
	if o := n.Owner; o != nil {
		return &corev1.ObjectReference{APIVersion: o.APIVersion, Kind: o.Kind, Name: o.Name, UID: o.UID, Namespace: n.Namespace}, what
	}
	return &corev1.ObjectReference{APIVersion: "v1", Kind: "Namespace", Name: n.Namespace}, what
}

// limitRanges lists a namespace's LimitRanges from the cache.
func (s *Server) limitRanges(ctx context.Context, ns string) ([]corev1.LimitRange, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	var l corev1.LimitRangeList
	if err := s.cache.List(ctx, &l, client.InNamespace(ns)); err != nil {
		return nil, fmt.Errorf("LimitRanges of namespace %s: %w", ns, err)
	}
	return l.Items, nil
}
