package server

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"net/netip"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"draingate.dev/draingate/internal/agentauth"
	"draingate.dev/draingate/internal/drain"
	"draingate.dev/draingate/internal/events"
	"draingate.dev/draingate/internal/learn"
	"draingate.dev/draingate/internal/ledger"
	"draingate.dev/draingate/internal/route"
	"draingate.dev/draingate/internal/waitapi"
	"draingate.dev/draingate/internal/webhook"
)

// Options configure a Server. Zero values take the defaults beside them.
type Options struct {
	// Kube is the cluster to watch.
	Kube *rest.Config
	// Routes are the kinds of route to wait for, configured (their flags
	// parsed): Kinds() at their defaults when nil. A kind whose Open
	// returns no source (target groups turned off) is not waited for.
	Routes []route.Kind
	// Namespace is draingate's own, where every replica shares what the
	// gate remembers of each waiting pod, in a Lease per pod (see
	// internal/ledger). Empty: each replica remembers alone, and a
	// restart starts every tail again.
	Namespace string
	// ShutdownReserve is the part of a pod's grace period left to the app
	// after a deadline release (default 5 s, also when zero: the command
	// line refuses zero): the server releases a pod at its
	// deletionTimestamp minus this, whatever its routes say.
	ShutdownReserve time.Duration
	// MaxWait caps one long-poll (default 30 s).
	MaxWait time.Duration
	// Linger is how long a pod counts as waiting after its agent last asked
	// (default 60 s): its target groups stay polled that long.
	Linger time.Duration
	// LearnTails keeps what the drains teach of each load balancer's
	// propagation and lengthens the tails by it (internal/learn);
	// ShortenTails also lets a sure bound shorten them (the user opts in).
	LearnTails, ShortenTails bool
	// LearnLag keeps how long after each pod's deletion its routes went
	// out, per load balancer (internal/learn), which the webhook sizes new
	// pods' max-wait by; LagCeiling is how long after a deletion routes
	// are watched for it (default 10m).
	LearnLag   bool
	LagCeiling time.Duration
	// IgnoreTraffic turns traffic evidence off: the agents' summaries are
	// ignored and every route waits for its tail (the lab's draingate-tail).
	IgnoreTraffic bool
	// EarlyClose lets the evidence close routes before their tails
	// (route.Env.EarlyClose).
	EarlyClose bool
	// Epsilon is the chance of a false quiet accepted per route and source
	// (evidence.DefaultEpsilon when zero).
	Epsilon float64
	// WaitAPISources says whom the wait API answers about a pod:
	// SourcesPod (the default) only requests from one of the pod's own
	// addresses, which is where its agent asks from (the preStop hook runs
	// in the pod's network namespace); SourcesAny anyone, for a server
	// behind a proxy or mesh sidecar that hides the source address.
	WaitAPISources string

	// Webhook, when set, serves the pod-injection admission webhook.
	Webhook *webhook.Options

	// Listener serves the wait API and probes; Metrics serves /metrics.
	// Either may be nil to serve nothing there.
	Listener, Metrics net.Listener
	// Profiling also serves Go's runtime profiles (net/http/pprof) at
	// /debug/pprof/ on the Metrics listener.
	Profiling bool
	// Registry receives the metrics (a new one when nil).
	Registry *prometheus.Registry
	// Log receives the server's log lines (slog.Default when nil).
	Log *slog.Logger
	// Now is the clock of observations and verdicts (time.Now when nil).
	Now func() time.Time
}

// Options.WaitAPISources values.
const (
	SourcesPod = "pod"
	SourcesAny = "any"
)

func (o Options) withDefaults() Options {
	if o.Routes == nil {
		o.Routes = Kinds()
	}
	o.ShutdownReserve = cmp.Or(o.ShutdownReserve, 5*time.Second)
	o.MaxWait = cmp.Or(o.MaxWait, waitapi.DefaultMaxWait)
	o.Linger = cmp.Or(o.Linger, 60*time.Second)
	o.LagCeiling = cmp.Or(o.LagCeiling, 10*time.Minute)
	o.Registry = cmp.Or(o.Registry, prometheus.NewRegistry())
	o.Log = cmp.Or(o.Log, slog.Default())
	if o.Now == nil {
		o.Now = time.Now
	}
	return o
}

// Server is a running gate server; see Run.
type Server struct {
	o        Options
	log      *slog.Logger
	kube     kubernetes.Interface
	cache    cache.Cache
	events   record.EventBroadcaster
	metrics  *metrics
	sources  []route.Source
	services *route.Services
	tracker  *drain.Tracker
	auth     *agentauth.Authorizer
	ledger   *ledger.Ledger[drain.Record] // nil without Options.Namespace
	timings  *learn.Timings               // nil without Options.LearnTails nor LearnLag
}

// New prepares a server: its route sources, cache, clients, metrics and
// the drain tracker with what consumes its decisions. Run starts it.
func New(o Options) (*Server, error) {
	o = o.withDefaults()
	if o.Kube == nil {
		return nil, errors.New("server: no Kubernetes config")
	}
	cs, err := kubernetes.NewForConfig(o.Kube)
	if err != nil {
		return nil, err
	}
	s := &Server{o: o, log: o.Log, kube: cs, metrics: newMetrics(o.Registry), services: route.NewServices()}
	env := route.Env{Kube: cs, Registry: o.Registry, Log: o.Log, WeighTraffic: !o.IgnoreTraffic, EarlyClose: o.EarlyClose}
	if o.LearnTails || o.LearnLag {
		s.timings = learn.New(learn.Options{Tails: o.LearnTails, Shorten: o.ShortenTails, Lags: o.LearnLag, Ceiling: o.LagCeiling,
			Kube: cs, Namespace: o.Namespace, InCluster: s.inCluster, Log: o.Log, Now: o.Now})
		o.Registry.MustRegister(s.timings.Collector())
		if o.LearnTails {
			env.Learned = s.timings
		}
	}
	if err := s.openRoutes(env); err != nil {
		return nil, err
	}
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return nil, err
	}
	s.cache, err = cache.New(o.Kube, cache.Options{
		Scheme: scheme,
		// Reads of a type without an informer fail instead of starting one
		// behind the server's back (the TargetGroupBinding CRD may be absent).
		ReaderFailOnMissingInformer: true,
		DefaultTransform:            transform(s.services, s.sources),
	})
	if err != nil {
		s.closeRoutes()
		return nil, fmt.Errorf("server: cache: %w", err)
	}
	if err := s.cache.IndexField(context.Background(), &corev1.Pod{}, podIPField, podIPs); err != nil {
		s.closeRoutes()
		return nil, fmt.Errorf("server: cache: %w", err)
	}
	s.events = record.NewBroadcaster()
	s.events.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: cs.CoreV1().Events("")})
	consumers := []drain.Consumer{}
	if s.timings != nil {
		consumers = append(consumers, s.timings)
	}
	consumers = append(consumers, events.New(s.events.NewRecorder(scheme, corev1.EventSource{Component: "draingate"}), o.Log, o.Registry))
	var memory drain.Store
	if o.Namespace != "" {
		if s.ledger, err = ledger.New[drain.Record](cs, o.Namespace, o.Registry, o.Log); err != nil {
			s.closeRoutes()
			s.events.Shutdown()
			return nil, fmt.Errorf("server: route memory: %w", err)
		}
		memory = s.ledger
	}
	s.tracker = drain.New(drain.Options{Sources: s.sources, Get: s.getPod, InCluster: s.inCluster, Memory: memory, Consumers: consumers,
		Reserve: o.ShutdownReserve, Linger: o.Linger, IgnoreTraffic: o.IgnoreTraffic, Epsilon: o.Epsilon,
		Tracked: s.metrics.setTracked, Now: o.Now,
		Live: func(ctx context.Context, ns, name string) (*corev1.Pod, error) {
			return cs.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		}})
	s.auth = agentauth.New(s.tracker.Ready, s.getPod, s.reviewToken, o.Now)
	if w := o.Webhook; w != nil {
		if w.Certs == nil || w.Listener == nil {
			s.shutdown()
			return nil, errors.New("server: the webhook needs a listener and certificates")
		}
		webhook.Prepare(w, cs, o.Log)
	}
	return s, nil
}

// openRoutes opens every configured kind of route; a kind turned off
// opens no source.
func (s *Server) openRoutes(env route.Env) error {
	for _, k := range s.o.Routes {
		src, err := k.Open(context.Background(), env)
		if err != nil {
			s.closeRoutes()
			return fmt.Errorf("server: %s routes: %w", k.Name(), err)
		}
		if src != nil {
			s.sources = append(s.sources, src)
		}
	}
	return nil
}

// closeRoutes closes the route sources opened that hold work of their own.
func (s *Server) closeRoutes() {
	for _, src := range s.sources {
		if c, ok := src.(route.Closer); ok {
			c.Close()
		}
	}
}

// getPod reads a pod from the cache. No deep copy: every route change
// re-reads the terminating pods of its namespace, and nothing writes to
// what it reads.
func (s *Server) getPod(ctx context.Context, ns, name string) (*corev1.Pod, error) {
	pod := &corev1.Pod{}
	return pod, s.cache.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, pod, client.UnsafeDisableDeepCopy)
}

// inCluster says whether an address is a pod's of the cluster (the pod
// cache's address index).
func (s *Server) inCluster(a netip.Addr) bool {
	var l corev1.PodList
	err := s.cache.List(context.Background(), &l, client.MatchingFields{podIPField: a.String()}, client.UnsafeDisableDeepCopy)
	return err == nil && len(l.Items) > 0
}

// reviewToken sends one TokenReview (agentauth).
func (s *Server) reviewToken(ctx context.Context, token, audience string) (authenticationv1.TokenReviewStatus, error) {
	tr, err := s.kube.AuthenticationV1().TokenReviews().Create(ctx, &authenticationv1.TokenReview{
		Spec: authenticationv1.TokenReviewSpec{Token: token, Audiences: []string{audience}},
	}, metav1.CreateOptions{})
	if err != nil {
		return authenticationv1.TokenReviewStatus{}, err
	}
	return tr.Status, nil
}

// routesChanged is told by the route sources whenever the routes of pods
// may have changed: the tracker decides again for its pods, learning
// watches on for the gone ones.
func (s *Server) routesChanged(namespace, name string) {
	s.tracker.RoutesChanged(namespace, name)
	if s.timings != nil {
		s.timings.RoutesChanged(namespace, name)
	}
}

// Run watches the cluster and serves until ctx ends, then shuts down: the
// long-polls in progress answer at once, the HTTP servers stop, target
// groups stop being polled. It returns nil after a clean shutdown.
func (s *Server) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer s.shutdown()

	podInf, err := s.cache.GetInformer(ctx, &corev1.Pod{}, cache.BlockUntilSynced(false))
	if err != nil {
		return fmt.Errorf("server: pod informer: %w", err)
	}
	if _, err := podInf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    s.tracker.PodChanged,
		UpdateFunc: func(_, o any) { s.tracker.PodChanged(o) },
		DeleteFunc: s.tracker.PodDeleted,
	}); err != nil {
		return err
	}
	if s.ledger != nil {
		if err := s.ledger.Start(ctx, s.tracker.RoutesChanged); err != nil {
			return fmt.Errorf("server: route memory: %w", err)
		}
	} else {
		s.log.Warn("no namespace of its own (--namespace): each replica remembers terminating pods alone, and a restart starts their tails again")
	}
	if s.timings != nil {
		s.timings.Start(ctx, s.sources)
	}
	if err := s.services.Start(ctx, s.cache, s.routesChanged); err != nil {
		return fmt.Errorf("server: Services: %w", err)
	}
	host := route.Host{Cache: s.cache, Changed: s.routesChanged, Services: s.services}
	for _, src := range s.sources {
		if lb, ok := src.(route.LoadBalancers); ok {
			host.LoadBalancers = lb
		}
	}
	for _, src := range s.sources {
		if err := src.Start(ctx, host); err != nil {
			return fmt.Errorf("server: %s routes: %w", src.Kind(), err)
		}
	}

	errc := make(chan error, 4) // fatal errors: the cache or a listener failing
	go func() { errc <- s.cache.Start(ctx) }()
	h, err := s.serve(ctx, errc)
	if err != nil {
		return err
	}
	if s.waitSynced(ctx, errc, podInf) {
		s.log.Info("caches synced: pods")
		s.tracker.Synced()
		go wait.UntilWithContext(ctx, func(context.Context) { s.tracker.Janitor(s.o.Now()) }, janitorEvery)
	}
	select {
	case <-ctx.Done():
	case err = <-errc:
	}
	h.stop()
	return err
}

// waitSynced waits for the pod cache, a fatal error or ctx; a fatal error
// is put back for Run.
func (s *Server) waitSynced(ctx context.Context, errc chan error, inf cache.Informer) bool {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case err := <-errc:
			errc <- err
			cancel()
		case <-ctx.Done():
		}
	}()
	return toolscache.WaitForCacheSync(ctx.Done(), inf.HasSynced)
}

// httpServers are the server's listeners in use.
type httpServers struct {
	servers  []*http.Server
	shutdown chan struct{} // closed at shutdown: long-polls answer at once
}

// serve starts the wait API, the webhook and the metrics, each where
// configured.
func (s *Server) serve(ctx context.Context, errc chan error) (*httpServers, error) {
	h := &httpServers{shutdown: make(chan struct{})}
	serve := func(ln net.Listener, handler http.Handler) {
		// A request (the webhook's review, up to 3 MiB) that takes longer
		// than ReadTimeout to arrive is not a client worth a goroutine.
		srv := &http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 30 * time.Second,
			WriteTimeout: s.o.MaxWait + 15*time.Second, IdleTimeout: 2 * time.Minute, MaxHeaderBytes: 64 << 10}
		h.servers = append(h.servers, srv)
		go func() {
			if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				errc <- fmt.Errorf("server: serve %s: %w", ln.Addr(), err)
			}
		}()
	}
	if s.o.Listener != nil {
		cfg := waitapi.Config{MaxWait: s.o.MaxWait, Metrics: s.metrics.wait, Ready: s.tracker.Ready, Shutdown: h.shutdown, Log: s.log}
		if s.o.WaitAPISources != SourcesAny {
			cfg.Authorize = s.auth.Authorize
		} else {
			// Behind a proxy every agent has the proxy's address: a cap
			// per source would cap them all.
			cfg.MaxWaitingPerSource = waitapi.DefaultMaxWaiting
		}
		serve(s.o.Listener, waitapi.NewHandler(s.tracker, cfg))
		s.log.Info("serving the wait API", "addr", s.o.Listener.Addr().String())
	}
	if w := s.o.Webhook; w != nil {
		env := webhook.Env{Kube: s.kube, Cache: s.cache, Events: s.events, Registry: s.o.Registry, Log: s.log, ExtraWait: func(ctx context.Context, pod *corev1.Pod) (time.Duration, string, error) {
			return route.AdmissionWait(ctx, s.sources, pod)
		}}
		if s.timings != nil && s.o.LearnLag {
			env.Need = s.timings.AdmissionNeed
		}
		if err := webhook.Start(ctx, w, env, serve); err != nil {
			h.stop()
			return nil, err
		}
	}
	if s.o.Metrics != nil {
		mux := http.NewServeMux()
		mux.Handle("/metrics", promhttp.HandlerFor(s.o.Registry, promhttp.HandlerOpts{Registry: s.o.Registry}))
		if s.o.Profiling {
			mux.HandleFunc("/debug/pprof/", pprof.Index)
			mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
			mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
			mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
			mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
		}
		serve(s.o.Metrics, mux)
	}
	return h, nil
}

// stop answers the long-polls in progress and stops the HTTP servers.
func (h *httpServers) stop() {
	close(h.shutdown)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, srv := range h.servers {
		srv.Shutdown(ctx)
	}
}

// shutdown stops the per-pod timers, the route sources' work (their
// polls) and the Events.
func (s *Server) shutdown() {
	s.tracker.Close()
	s.closeRoutes()
	s.events.Shutdown()
}

// janitorEvery is how often the tracker sweeps its pods (Tracker.Janitor).
const janitorEvery = 5 * time.Second

// podIPField indexes the cached pods by their addresses, so that the
// evidence tells an in-cluster client from a load balancer's node.
const podIPField = "draingate.podIP"

// podIPs are a pod's own addresses; none for a hostNetwork pod, whose
// addresses are its node's.
func podIPs(o client.Object) []string {
	pod, ok := o.(*corev1.Pod)
	if !ok {
		return nil
	}
	var out []string
	for _, a := range route.Addrs(pod) {
		out = append(out, a.String())
	}
	return out
}
