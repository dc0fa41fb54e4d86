package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"draingate.dev/draingate/internal/aws/elbv2"
	"draingate.dev/draingate/internal/gate"
	"draingate.dev/draingate/internal/inject"
	"draingate.dev/draingate/internal/inject/certs"
	"draingate.dev/draingate/internal/waitapi"
)

// Options configure a Server. Zero durations take the defaults beside them.
type Options struct {
	// Kube is the cluster to watch.
	Kube *rest.Config
	// ELBv2 reads target health and target groups (an
	// *elasticloadbalancingv2.Client). Nil turns target-group routes off:
	// only EndpointSlices are waited for.
	ELBv2 elbv2.DescribeTargetHealthAPI
	// Poller sizes the target-health poller (rate budget, interval). Its
	// Metrics field is set by the server.
	Poller elbv2.Config
	// Tails per route kind (gate.DefaultTails when zero).
	Tails gate.Tails
	// ShutdownReserve is the part of a pod's grace period left to the app
	// after a deadline release (default 5 s): the server releases a pod at
	// its deletionTimestamp minus this, whatever its routes say.
	ShutdownReserve time.Duration
	// MaxWait caps one long-poll (default 30 s).
	MaxWait time.Duration
	// Linger is how long a pod counts as waiting after its agent last asked
	// (default 60 s): its target groups stay polled that long.
	Linger time.Duration
	// CRDInterval is how often the server looks for the TargetGroupBinding
	// CRD while it is absent (default 10 s).
	CRDInterval time.Duration

	// Webhook, when set, serves the pod-injection admission webhook.
	Webhook *WebhookOptions

	// Listener serves the wait API and probes; Metrics serves /metrics.
	// Either may be nil to serve nothing there.
	Listener, Metrics net.Listener
	// Registry receives the metrics (a new one when nil).
	Registry *prometheus.Registry
	// Log receives the server's log lines (slog.Default when nil).
	Log *slog.Logger
	// Now is the clock of observations and verdicts (time.Now when nil).
	Now func() time.Time
}

// WebhookOptions configure the admission webhook.
type WebhookOptions struct {
	// Listener is where it serves (TLS is added by the server).
	Listener net.Listener
	// Certs keeps its certificate; the server fills in Client and Log.
	Certs *certs.Certs
	// Settings are the injector's.
	Settings inject.Settings
}

func (o Options) withDefaults() Options {
	if o.Tails == (gate.Tails{}) {
		o.Tails = gate.DefaultTails()
	}
	if o.ShutdownReserve <= 0 {
		o.ShutdownReserve = 5 * time.Second
	}
	if o.MaxWait <= 0 {
		o.MaxWait = waitapi.DefaultMaxWait
	}
	if o.Linger <= 0 {
		o.Linger = 60 * time.Second
	}
	if o.CRDInterval <= 0 {
		o.CRDInterval = 10 * time.Second
	}
	if o.Registry == nil {
		o.Registry = prometheus.NewRegistry()
	}
	if o.Log == nil {
		o.Log = slog.Default()
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return o
}

// Server is a running gate server; see Run.
type Server struct {
	o        Options
	log      *slog.Logger
	cache    cache.Cache
	disc     discovery.DiscoveryInterface
	recorder record.EventRecorder
	events   record.EventBroadcaster
	poller   *elbv2.Poller
	metrics  *metrics

	synced        atomic.Bool // pods and slices
	bindingsKnown atomic.Bool // discovery said whether the TargetGroupBinding CRD exists
	bindingsOn    atomic.Bool // the TargetGroupBinding CRD was found
	bindingsSync  atomic.Bool // ... and its informer synced

	mu      sync.Mutex
	closed  bool
	pods    map[string]*podState // "namespace/name" → state of a terminating pod
	subs    map[string]map[chan struct{}]struct{}
	lbTypes map[string]string   // ARN → load balancer type, once known
	lookups map[string]struct{} // ARNs whose type is being read
	runCtx  context.Context
}

// podState is what the server remembers about one terminating pod.
type podState struct {
	key, uid         string
	terminatingSince time.Time
	asked            time.Time // last drain request; zero when not waiting
	services         map[string]*routeMem
	groups           map[string]*groupMem
	timer            *time.Timer
	startNoted       bool
	releaseNoted     bool
}

type routeMem struct{ outSince time.Time }

type groupMem struct {
	routeMem
	waiter *elbv2.Waiter
}

// New prepares a server: its cache, clients and metrics. Run starts it.
func New(o Options) (*Server, error) {
	o = o.withDefaults()
	if o.Kube == nil {
		return nil, errors.New("server: no Kubernetes config")
	}
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return nil, err
	}
	c, err := cache.New(o.Kube, cache.Options{
		Scheme: scheme,
		// Reads of a type without an informer fail instead of starting one
		// behind the server's back (the TargetGroupBinding CRD may be absent).
		ReaderFailOnMissingInformer: true,
		// One transform for every type, picking by the object's type: a
		// ByObject entry for TargetGroupBindings would make cache.New look
		// up their REST mapping, and fail, when the CRD is not installed.
		DefaultTransform: transform,
	})
	if err != nil {
		return nil, fmt.Errorf("server: cache: %w", err)
	}
	cs, err := kubernetes.NewForConfig(o.Kube)
	if err != nil {
		return nil, err
	}
	s := &Server{
		o: o, log: o.Log, cache: c, disc: cs.Discovery(),
		pods: map[string]*podState{}, subs: map[string]map[chan struct{}]struct{}{},
		lbTypes: map[string]string{}, lookups: map[string]struct{}{},
	}
	s.metrics = newMetrics(o.Registry, s)
	s.events = record.NewBroadcaster()
	s.events.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: cs.CoreV1().Events("")})
	s.recorder = s.events.NewRecorder(scheme, corev1.EventSource{Component: "draingate"})
	if w := o.Webhook; w != nil {
		if w.Certs == nil || w.Listener == nil {
			return nil, errors.New("server: the webhook needs a listener and certificates")
		}
		w.Certs.Client, w.Certs.Log = cs, o.Log
		if w.Settings.ImageVolume && !imageVolumesByDefault(cs.Discovery(), o.Log) {
			w.Settings.ImageVolume = false
		}
	}
	if o.ELBv2 != nil {
		pc := o.Poller
		pc.Metrics = s.metrics.elbv2Call
		s.poller = elbv2.New(o.ELBv2, pc)
	}
	return s, nil
}

func bindingObject() *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(TargetGroupBindingGVK)
	return u
}

// Run watches the cluster and serves until ctx ends, then shuts down: the
// long-polls in progress answer at once, the HTTP servers stop, target
// groups stop being polled. It returns nil after a clean shutdown.
func (s *Server) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	s.mu.Lock()
	s.runCtx = ctx
	s.mu.Unlock()
	defer s.shutdown()

	if err := s.cache.IndexField(ctx, &discoveryv1.EndpointSlice{}, addressIndex, sliceAddresses); err != nil {
		return fmt.Errorf("server: index EndpointSlices: %w", err)
	}
	podInf, err := s.cache.GetInformer(ctx, &corev1.Pod{}, cache.BlockUntilSynced(false))
	if err != nil {
		return fmt.Errorf("server: pod informer: %w", err)
	}
	if _, err := podInf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { s.podChanged(o) },
		UpdateFunc: func(_, o any) { s.podChanged(o) },
		DeleteFunc: s.podDeleted,
	}); err != nil {
		return err
	}
	sliceInf, err := s.cache.GetInformer(ctx, &discoveryv1.EndpointSlice{}, cache.BlockUntilSynced(false))
	if err != nil {
		return fmt.Errorf("server: EndpointSlice informer: %w", err)
	}
	if _, err := sliceInf.AddEventHandler(namespaceHandler(s.namespaceChanged)); err != nil {
		return err
	}

	errc := make(chan error, 3)
	go func() { errc <- s.cache.Start(ctx) }()

	shutdown := make(chan struct{})
	var servers []*http.Server
	serve := func(ln net.Listener, h http.Handler) {
		srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, WriteTimeout: s.o.MaxWait + 15*time.Second, IdleTimeout: 2 * time.Minute}
		servers = append(servers, srv)
		go func() {
			if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				errc <- fmt.Errorf("server: serve %s: %w", ln.Addr(), err)
			}
		}()
	}
	if s.o.Listener != nil {
		serve(s.o.Listener, waitapi.NewHandler(s, waitapi.Config{
			MaxWait: s.o.MaxWait, Metrics: s.metrics.wait, Ready: s.ready, Shutdown: shutdown,
		}))
		s.log.Info("serving the wait API", "addr", s.o.Listener.Addr().String())
	}
	if w := s.o.Webhook; w != nil {
		if err := s.startWebhook(ctx, w, serve); err != nil {
			return err
		}
	}
	if s.o.Metrics != nil {
		mux := http.NewServeMux()
		mux.Handle("/metrics", promhttp.HandlerFor(s.o.Registry, promhttp.HandlerOpts{Registry: s.o.Registry}))
		serve(s.o.Metrics, mux)
	}

	syncCtx, syncDone := context.WithCancel(ctx)
	go func() {
		// A fatal error (the cache or a listener failing) ends the wait.
		select {
		case err := <-errc:
			errc <- err
			syncDone()
		case <-syncCtx.Done():
		}
	}()
	synced := toolscache.WaitForCacheSync(syncCtx.Done(), podInf.HasSynced, sliceInf.HasSynced)
	syncDone()
	if !synced {
		return s.stop(ctx, errc, shutdown, servers)
	}
	s.synced.Store(true)
	s.log.Info("caches synced: pods and EndpointSlices")
	go s.watchBindings(ctx)
	go s.janitor(ctx)
	return s.stop(ctx, errc, shutdown, servers)
}

// stop waits for ctx or a fatal error, then stops the HTTP servers.
func (s *Server) stop(ctx context.Context, errc chan error, shutdown chan struct{}, servers []*http.Server) error {
	var err error
	select {
	case <-ctx.Done():
	case err = <-errc:
	}
	close(shutdown)
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, srv := range servers {
		srv.Shutdown(sctx)
	}
	return err
}

func (s *Server) shutdown() {
	s.mu.Lock()
	s.closed = true
	var waiters []*elbv2.Waiter
	for _, st := range s.pods {
		if st.timer != nil {
			st.timer.Stop()
		}
		for _, g := range st.groups {
			if g.waiter != nil {
				waiters = append(waiters, g.waiter)
				g.waiter = nil
			}
		}
	}
	s.mu.Unlock()
	for _, w := range waiters {
		w.Close()
	}
	if s.poller != nil {
		s.poller.Close()
	}
	s.events.Shutdown()
}

// ready is /readyz: the caches hold pods and slices (and
// TargetGroupBindings, once their CRD was found).
func (s *Server) ready() error {
	// Not the webhook's certificate: a replica that cannot serve the
	// webhook still answers agents, and an unready gate would send every
	// agent to its fallback timer. Certificate trouble is logged and shows
	// in draingate_webhook_certificate_ready; the webhook fails open.
	return s.cachesReady()
}

// cachesReady says whether the gate can answer.
func (s *Server) cachesReady() error {
	if !s.synced.Load() {
		return errors.New("the pod and EndpointSlice caches have not synced yet")
	}
	if s.poller != nil && !s.bindingsKnown.Load() {
		return errors.New("whether the TargetGroupBinding CRD is installed is not known yet")
	}
	if s.bindingsOn.Load() && !s.bindingsSync.Load() {
		return errors.New("the TargetGroupBinding cache has not synced yet")
	}
	return nil
}

// watchBindings looks for the TargetGroupBinding CRD until it appears, then
// starts its informer. Until then target-group routes are off, which the
// log says once.
func (s *Server) watchBindings(ctx context.Context) {
	if s.poller == nil {
		s.log.Warn("no ELBv2 client: target-group routes are off; only EndpointSlices are waited for")
		return
	}
	gv := TargetGroupBindingGVK.GroupVersion().String()
	said := false
	for {
		found, err := s.bindingsInstalled(gv)
		switch {
		case err != nil:
			// Not knowing is not "absent": until discovery answers, the
			// gate answers no verdicts (rule 1).
			s.log.Error("cannot tell whether the TargetGroupBinding CRD is installed; not answering until discovery does", "err", err)
		case found:
		default:
			s.bindingsKnown.Store(true)
			if !said {
				s.log.Warn("the TargetGroupBinding CRD (" + gv + ") is not installed: target-group routes are off until it appears")
				said = true
			}
		}
		if found {
			break
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(s.o.CRDInterval):
		}
	}
	s.bindingsOn.Store(true)
	s.bindingsKnown.Store(true)
	inf, err := s.cache.GetInformer(ctx, bindingObject(), cache.BlockUntilSynced(false))
	if err != nil {
		s.log.Error("TargetGroupBinding informer", "err", err)
		return
	}
	if _, err := inf.AddEventHandler(namespaceHandler(s.namespaceChanged)); err != nil {
		s.log.Error("TargetGroupBinding informer", "err", err)
		return
	}
	if !toolscache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		return
	}
	s.bindingsSync.Store(true)
	s.log.Info("caches synced: TargetGroupBindings; target-group routes are on")
	s.namespaceChanged("")
}

// bindingsInstalled asks discovery whether gv serves TargetGroupBindings. A
// group version that is not served at all is "not installed", any other
// error is an error.
func (s *Server) bindingsInstalled(gv string) (bool, error) {
	res, err := s.disc.ServerResourcesForGroupVersion(gv)
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	for _, r := range res.APIResources {
		if r.Kind == TargetGroupBindingGVK.Kind {
			return true, nil
		}
	}
	return false, nil
}

// janitor stops polling target groups for pods whose agents stopped asking,
// and forgets pods that are no longer in the cache.
func (s *Server) janitor(ctx context.Context) {
	t := time.NewTicker(5 * time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		now := s.o.Now()
		var closing []*elbv2.Waiter
		s.mu.Lock()
		for key, st := range s.pods {
			if !s.podCachedLocked(st) {
				// The delete event raced a verdict that re-made the state.
				s.dropLocked(key)
				continue
			}
			if len(s.subs[key]) > 0 || st.asked.IsZero() || now.Sub(st.asked) < s.o.Linger {
				continue
			}
			st.asked = time.Time{}
			for _, g := range st.groups {
				if g.waiter != nil {
					closing = append(closing, g.waiter)
					g.waiter = nil
				}
			}
		}
		s.mu.Unlock()
		for _, w := range closing {
			w.Close()
		}
		s.metrics.setTracked()
	}
}

func namespaceHandler(f func(ns string)) toolscache.ResourceEventHandler {
	ns := func(o any) {
		if t, ok := o.(toolscache.DeletedFinalStateUnknown); ok {
			o = t.Obj
		}
		if c, ok := o.(client.Object); ok {
			f(c.GetNamespace())
		}
	}
	return toolscache.ResourceEventHandlerFuncs{
		AddFunc:    ns,
		UpdateFunc: func(_, o any) { ns(o) },
		DeleteFunc: ns,
	}
}

// backoffLoop calls f until it succeeds or ctx ends, waiting 1 s, 2 s, ...
// up to 30 s (jittered) between failures.
func backoffLoop(ctx context.Context, f func() error) {
	for n := 0; ; n++ {
		if f() == nil {
			return
		}
		d := min(time.Second<<min(n, 5), 30*time.Second)
		d = d/2 + time.Duration(rand.Int64N(int64(d/2)+1))
		select {
		case <-ctx.Done():
			return
		case <-time.After(d):
		}
	}
}

// imageVolumesByDefault reports whether the API server is 1.35 or newer,
// where image volumes are on by default; otherwise the injector copies the
// agent with an init container, and the log says why.
func imageVolumesByDefault(d discovery.DiscoveryInterface, log *slog.Logger) bool {
	v, err := d.ServerVersion()
	if err != nil {
		log.Warn("cannot read the API server's version: injecting the agent with an init container, not an image volume", "err", err)
		return false
	}
	var major, minor int
	fmt.Sscanf(v.Major, "%d", &major)
	fmt.Sscanf(strings.TrimSuffix(v.Minor, "+"), "%d", &minor)
	if major > 1 || major == 1 && minor >= 35 {
		return true
	}
	log.Warn("image volumes are on by default from Kubernetes 1.35; this API server is older: injecting the agent with an init container instead", "version", v.GitVersion)
	return false
}
