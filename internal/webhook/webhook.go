// Package webhook is the pod-injection admission webhook as `draingate
// serve` runs it: its flags, its certificate (internal/inject/certs), the
// caches it reads (namespaces, LimitRanges), the sizing the kinds of route
// and learning give it, its Events and metrics; internal/inject mutates.
//
// It fails open: a webhook that cannot serve (no certificate yet) leaves
// pods to the API server's failurePolicy, Ignore by default, and a pod it
// cannot size gets the longest its routes may need, with a warning.
package webhook

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sversion "k8s.io/apimachinery/pkg/version"
	"k8s.io/client-go/kubernetes"
	clientscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/record"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"draingate.dev/draingate/internal/backoff"
	"draingate.dev/draingate/internal/inject"
	"draingate.dev/draingate/internal/inject/certs"
	"draingate.dev/draingate/internal/version"
)

// Options configure the webhook (Flags.Options).
type Options struct {
	// Listener is where it serves (TLS is added here).
	Listener net.Listener
	// Certs keeps its certificate; Prepare fills in Client and Log.
	Certs *certs.Certs
	// Settings are the injector's.
	Settings inject.Settings
}

// Env is what the server gives the webhook.
type Env struct {
	Kube     kubernetes.Interface
	Cache    cache.Cache
	Events   record.EventBroadcaster
	Registry prometheus.Registerer
	Log      *slog.Logger
	// ExtraWait is how much longer than the configured max-wait a new
	// pod's routes may need (the kinds' AdmissionWait), Need the longest
	// wait what was learnt says it needs (nil: nothing is learnt).
	ExtraWait func(ctx context.Context, pod *corev1.Pod) (time.Duration, string, error)
	Need      func(ctx context.Context, pod *corev1.Pod) (time.Duration, string)
}

// Event reasons on a pod's owner (or its namespace).
const (
	// EventNotInjected: the webhook admitted the pod without the agent.
	EventNotInjected = "DraingateNotInjected"
	// EventNotSized: the webhook could not size the pod's max-wait from
	// its routes and gave it the longest they may need.
	EventNotSized = "DraingateMaxWaitNotSized"
)

// Prepare gives the certificates their client and log, and turns off
// what this cluster's version cannot run (image volumes, the watcher),
// saying why in the log. Call it once, before Start.
func Prepare(o *Options, cs kubernetes.Interface, log *slog.Logger) {
	o.Certs.Client, o.Certs.Log = cs, log
	if o.Settings.ImageVolume {
		o.Settings.ImageVolume = apiServerHas(cs, log, inject.ImageVolumesOnByDefault,
			"cannot read the API server's version: injecting the agent with an init container, not an image volume",
			"image volumes are on by default from Kubernetes 1.35; this API server is older: injecting the agent with an init container instead")
	}
	if o.Settings.Watcher {
		// Without every kubelet running native sidecars the injector adds
		// no watcher: the agents then watch from their hooks on, and
		// traffic evidence rarely closes a route before its tail.
		o.Settings.Watcher = apiServerHas(cs, log, inject.NativeSidecarsEverywhere,
			"cannot read the API server's version: injecting no watcher (its native sidecar needs every kubelet at 1.29+)",
			"the watcher is a native sidecar, which kubelets older than 1.29 run as an init container that never ends; below API server 1.32 such kubelets may be in the cluster: injecting no watcher")
	}
}

// apiServerHas reads the API server's version and reports whether has
// says yes; an unreadable version logs unreadable, a version too old logs
// tooOld, and both answer no.
func apiServerHas(cs kubernetes.Interface, log *slog.Logger, has func(*k8sversion.Info) bool, unreadable, tooOld string) bool {
	v, err := cs.Discovery().ServerVersion()
	if err != nil {
		log.Warn(unreadable, "err", err)
		return false
	}
	if !has(v) {
		log.Warn(tooOld, "version", v.GitVersion)
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

// Transform slims what the webhook caches before it enters the cache: a
// namespace keeps its identity and labels. ok is false for any other
// object.
func Transform(obj any) (any, bool) {
	m, ok := obj.(*metav1.PartialObjectMetadata)
	if !ok {
		return obj, false
	}
	out := &metav1.PartialObjectMetadata{TypeMeta: m.TypeMeta}
	out.Name, out.UID, out.ResourceVersion, out.Labels = m.Name, m.UID, m.ResourceVersion, m.Labels
	return out, true
}

// certRetry paces attempts to load or make the webhook's certificate.
var certRetry = backoff.Policy{Min: time.Second, Max: 30 * time.Second}

// Start loads the certificate (retrying in the background while it
// cannot: the webhook then refuses TLS and the API server applies the
// failurePolicy, Ignore by default), starts the namespace and LimitRange
// caches and serves the injector with serve.
func Start(ctx context.Context, o *Options, env Env, serve func(net.Listener, http.Handler)) error {
	m := newMetrics()
	env.Registry.MustRegister(m.notInjected, m.notSized, certificateReady(o.Certs.Ready))
	if _, err := env.Cache.GetInformer(ctx, namespaceObject(), cache.BlockUntilSynced(false)); err != nil {
		return fmt.Errorf("webhook: namespace informer: %w", err)
	}
	if _, err := env.Cache.GetInformer(ctx, &corev1.LimitRange{}, cache.BlockUntilSynced(false)); err != nil {
		return fmt.Errorf("webhook: LimitRange informer: %w", err)
	}
	go func() {
		backoff.Retry(ctx, certRetry, func() error {
			err := o.Certs.Sync(ctx)
			if err != nil {
				env.Log.Error("webhook certificate not ready; pods are admitted without injection until it is", "err", err)
			}
			return err
		})
		o.Certs.Run(ctx)
	}()
	settings := o.Settings
	if settings.Version == "" {
		settings.Version = version.Version
	}
	c := env.Cache
	h := inject.NewHandler(func() inject.Settings { return settings }, func(ctx context.Context, ns string) (map[string]string, error) {
		return namespaceLabels(ctx, c, ns)
	}, env.Log.With("part", "webhook"))
	h.ExtraWait, h.Need = env.ExtraWait, env.Need
	h.LimitRanges = func(ctx context.Context, ns string) ([]corev1.LimitRange, error) { return limitRanges(ctx, c, ns) }
	rec := env.Events.NewRecorder(clientscheme.Scheme, corev1.EventSource{Component: "draingate-webhook"})
	h.NotInjected = func(_ context.Context, n inject.NotInjected) {
		m.notInjected.Inc()
		ref, what := notInjectedRef(n)
		rec.Eventf(ref, corev1.EventTypeWarning, EventNotInjected, "%s admitted without draingate's agent: %s", what, n.Why)
	}
	h.NotSized = func(_ context.Context, n inject.NotInjected) {
		m.notSized.Inc()
		ref, what := notInjectedRef(n)
		rec.Eventf(ref, corev1.EventTypeWarning, EventNotSized, "%s admitted with a max-wait not sized from its routes: %s", what, n.Why)
	}
	mux := http.NewServeMux()
	mux.Handle("/mutate-pods", h)
	ln := tls.NewListener(o.Listener, &tls.Config{GetCertificate: o.Certs.GetCertificate, MinVersion: tls.VersionTLS12})
	serve(ln, mux)
	env.Log.Info("serving the injection webhook", "addr", o.Listener.Addr().String(), "agent_image", settings.AgentImage, "agent_server", settings.Server)
	return nil
}

// namespaceLabels reads a namespace's labels from the cache.
func namespaceLabels(ctx context.Context, c cache.Cache, ns string) (map[string]string, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	m := namespaceObject()
	if err := c.Get(ctx, client.ObjectKey{Name: ns}, m); err != nil {
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
func limitRanges(ctx context.Context, c cache.Cache, ns string) ([]corev1.LimitRange, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	var l corev1.LimitRangeList
	if err := c.List(ctx, &l, client.InNamespace(ns)); err != nil {
		return nil, fmt.Errorf("LimitRanges of namespace %s: %w", ns, err)
	}
	return l.Items, nil
}

// metrics are the webhook's counts of pods it admitted with a warning.
type metrics struct{ notInjected, notSized prometheus.Counter }

func newMetrics() metrics {
	return metrics{
		notSized: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "draingate_webhook_not_sized_total",
			Help: "Pods the webhook admitted with a max-wait it could not size from their routes (a cache not synced, a bound Service not seen yet): they got the longest their routes may need, with a warning saying why (also an Event on the pod's owner, or its namespace).",
		}),
		notInjected: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "draingate_webhook_not_injected_total",
			Help: "Pods the webhook admitted without the agent, with a warning saying why (also an Event on the pod's owner, or its namespace): the warning itself reaches only whoever created the pod, and a ReplicaSet controller drops it.",
		}),
	}
}

// certificateReady is draingate_webhook_certificate_ready, read from ready
// at each scrape.
func certificateReady(ready func() bool) prometheus.Collector {
	return prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "draingate_webhook_certificate_ready",
		Help: "1 once the webhook's certificate is loaded and (unless cert-manager manages it) trusted by the caBundle; while 0 the API server cannot call the webhook and admits pods without the agent.",
	}, func() float64 {
		if ready() {
			return 1
		}
		return 0
	})
}

// Describe sends the descriptions of the metrics Start registers.
func Describe(ch chan<- *prometheus.Desc) {
	m := newMetrics()
	m.notInjected.Describe(ch)
	m.notSized.Describe(ch)
	certificateReady(func() bool { return false }).Describe(ch)
}
