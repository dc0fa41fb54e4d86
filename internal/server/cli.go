package server

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"runtime/debug"
	"strconv"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"draingate.dev/draingate/internal/cli"
	"draingate.dev/draingate/internal/evidence"
	"draingate.dev/draingate/internal/route"
	"draingate.dev/draingate/internal/webhook"
)

// serveFlags are `draingate serve`'s flags. Each also reads DRAINGATE_<NAME>
// (internal/cli); a flag on the command line wins.
type serveFlags struct {
	kubeconfig, listen, metricsListen  string
	namespace                          string
	kubeQPS                            float64
	kubeBurst                          int
	maxWait, reserve                   time.Duration
	logFormat, logLevel                string
	trafficEvidence, profiling         bool
	earlyClose                         bool
	learnTails, shortenTails, learnLag bool
	maxWaitCeiling                     time.Duration
	trafficEpsilon                     float64
	waitAPISources                     string
	// routes are the kinds of route, each with its own flags; webhook
	// the injection webhook's.
	routes  []route.Kind
	webhook webhook.Flags
}

// newServeFlagSet registers the server's own flags and every kind of
// route's on one flag set.
func newServeFlagSet(f *serveFlags, routes []route.Kind, out io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("draingate serve", flag.ContinueOnError)
	fs.SetOutput(out)
	f.routes = routes
	fs.StringVar(&f.kubeconfig, "kubeconfig", "", "kubeconfig file; empty: $KUBECONFIG, else the in-cluster ServiceAccount")
	fs.StringVar(&f.listen, "listen", ":8080", "address of the wait API, /healthz and /readyz")
	fs.StringVar(&f.metricsListen, "metrics-listen", ":9090", "address of /metrics; empty: no metrics listener")
	fs.StringVar(&f.namespace, "namespace", "", "draingate's own namespace, where the replicas share when each waiting pod's routes went out (a Lease per pod), so that a second replica or a restart never starts a tail again; empty: the pod's own namespace when running in a pod, else nothing is shared")
	fs.Float64Var(&f.kubeQPS, "kube-api-qps", 50, "Kubernetes API requests per second the server may make (Events, the shared route memory, token reviews, live reads); a 1,000-pod rollout writes about six per pod")
	fs.IntVar(&f.kubeBurst, "kube-api-burst", 100, "Kubernetes API requests the server may make at once, above --kube-api-qps")
	for _, k := range routes {
		k.Flags(fs)
	}
	fs.BoolVar(&f.trafficEvidence, "traffic-evidence", true, "weigh the traffic the agents see arriving at their pods: a target group route closes once every load balancer source has gone quiet (before its tail when all of them sent enough to fit a rate, after it while one still sends); false: tails alone")
	fs.BoolVar(&f.earlyClose, "traffic-early-close", false, "let the traffic evidence close a target group route before its tail's end when every load balancer node, listed by EC2 DescribeNetworkInterfaces, was seen, fitted and quiet (opt-in: its limits are in docs/evidence.md); false: the evidence only lengthens a tail, a route closing at its tail's end or later while a source still sends")
	fs.StringVar(&f.waitAPISources, "wait-api-sources", SourcesPod, "whom the wait API answers about a pod: pod (requests from one of the pod's own addresses, where its agent asks from, or with a token bound to the pod; others get the answer about an unknown pod) or any (for a server behind a proxy or mesh sidecar that hides the agents' addresses)")
	fs.BoolVar(&f.learnTails, "learn-tails", true, "measure each load balancer's propagation from every drain's traffic evidence (how late each of its nodes sent to the pod after the target went out), per namespace, share it among replicas in Leases of --namespace, and lengthen a tail at once to the latest a node was seen sending")
	fs.BoolVar(&f.shortenTails, "learn-tails-shorten", true, "also shorten a tail to what was measured, once 299 propagations from 30 drains bound its 0.99-quantile at 95 % (one drain in 16 keeps the configured tail, so that later stops are still seen); false: learnt tails only lengthen")
	fs.BoolVar(&f.learnLag, "learn-lag", true, "learn how long after each pod's deletion its target groups took it out (a controller's lag, per load balancer; pods released at their deadline are watched on until then), share it among replicas in Leases of --namespace, and give injected pods a max-wait at least that lag plus the tail (up to --max-wait-ceiling)")
	fs.DurationVar(&f.maxWaitCeiling, "max-wait-ceiling", 10*time.Minute, "the longest max-wait what was learnt (--learn-lag) may give an injected pod, and how long after a pod's deletion its routes are watched for their lag; at least --inject-max-wait")
	fs.Float64Var(&f.trafficEpsilon, "traffic-epsilon", evidence.DefaultEpsilon, "chance of a false quiet accepted per route and source: the probability that a source still sending at its fitted rate stays silent as long as its quiet bound (smaller: longer bounds)")
	fs.DurationVar(&f.maxWait, "max-wait", 30*time.Second, "longest one wait API long-poll is held (agents ask again)")
	fs.DurationVar(&f.reserve, "shutdown-reserve", 5*time.Second, "release a pod this long before its grace period ends, whatever its routes say, so the app still shuts down cleanly")
	fs.StringVar(&f.logFormat, "log-format", "text", "log format: text or json")
	fs.StringVar(&f.logLevel, "log-level", "info", "the least important log lines written: debug, info, warn or error")
	fs.BoolVar(&f.profiling, "profiling", false, "also serve Go's runtime profiles (heap, CPU, goroutines) at /debug/pprof/ on --metrics-listen, for diagnosing memory or CPU; they reveal the process's internals, so keep that port private")

	f.webhook.Register(fs)
	return fs
}

func (f *serveFlags) validate() error {
	errs := []error{cli.Positive("--max-wait", f.maxWait), cli.Positive("--shutdown-reserve", f.reserve)}
	if f.maxWaitCeiling < f.webhook.MaxWait() {
		errs = append(errs, fmt.Errorf("--max-wait-ceiling %s is below --inject-max-wait %s: what was learnt could never lengthen a wait; raise it", f.maxWaitCeiling, f.webhook.MaxWait()))
	}
	var tails []string
	zero := true
	for _, k := range f.routes {
		errs = append(errs, k.Validate())
		for _, t := range k.Tails() {
			tails = append(tails, "--"+t.Flag)
			zero = zero && t.Value == 0
		}
	}
	if zero && len(tails) > 0 {
		errs = append(errs, fmt.Errorf("%s are all zero: every route would close the moment its owner took the pod out, which no load balancer does; "+
			"give at least one a length (a zero tail is fine for some kinds)", andList(tails)))
	}
	if !(f.kubeQPS > 0) {
		errs = append(errs, fmt.Errorf("--kube-api-qps must be positive, got %s", strconv.FormatFloat(f.kubeQPS, 'g', -1, 64)))
	}
	if f.kubeBurst < 1 {
		errs = append(errs, fmt.Errorf("--kube-api-burst must be at least 1, got %d", f.kubeBurst))
	}
	if f.waitAPISources != SourcesPod && f.waitAPISources != SourcesAny {
		errs = append(errs, fmt.Errorf("--wait-api-sources must be %s or %s, got %q", SourcesPod, SourcesAny, f.waitAPISources))
	}
	if !(f.trafficEpsilon > 0 && f.trafficEpsilon < 0.01) {
		errs = append(errs, fmt.Errorf("--traffic-epsilon must be in (0, 0.01), got %s", strconv.FormatFloat(f.trafficEpsilon, 'g', -1, 64)))
	}
	if f.profiling && f.metricsListen == "" {
		errs = append(errs, errors.New("--profiling serves on --metrics-listen, which is empty: give it an address (keep it private)"))
	}
	if f.logFormat != "text" && f.logFormat != "json" {
		errs = append(errs, fmt.Errorf("--log-format must be text or json, got %q", f.logFormat))
	}
	if _, err := logLevel(f.logLevel); err != nil {
		errs = append(errs, err)
	}
	errs = append(errs, f.webhook.Validate())
	return errors.Join(errs...)
}

// serverGOGC is the Go collector's target the server runs with unless
// GOGC is set: it holds mostly small long-lived objects (its caches) and
// one goroutine per held long-poll, and at 50 instead of Go's 100 its RSS
// measured 124.6 MiB instead of 146.8–150.3 MiB at 5,000 pods and 1,000
// waiting agents, for no CPU the scale benchmark could tell apart (0.10
// cores against 0.09–0.11).
const serverGOGC = 50

// gcTarget says what the collector's target is (for the log) and whether
// the server must set it: GOGC from the environment, which the runtime
// already applied, wins.
func gcTarget(getenv func(string) string) (gogc string, apply bool) {
	if v := getenv("GOGC"); v != "" {
		return v, false
	}
	return strconv.Itoa(serverGOGC), true
}

// Main is the draingate command line; it returns the exit code.
func Main(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	return cli.Dispatch("draingate", usage, map[string]func([]string) int{
		"serve": func(args []string) int { return serve(ctx, args, getenv, stdout, stderr) },
	}, args, stdout, stderr)
}

const usage = `usage:
  draingate serve [flags]
      watch the cluster and AWS target health, answer the preStop agents'
      wait API; "draingate serve -h" lists the flags
  draingate version
      print the version
`

// logLevel reads --log-level: one of slog's level names.
func logLevel(s string) (slog.Level, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(s)); err != nil || strings.ContainsAny(s, "+-") {
		return 0, fmt.Errorf("--log-level must be debug, info, warn or error, got %q", s)
	}
	return l, nil
}

func serve(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	f, code := parseServe(args, getenv, stderr)
	if f == nil {
		return code
	}
	level, _ := logLevel(f.logLevel) // validated
	hopts := &slog.HandlerOptions{Level: level}
	var handler slog.Handler = slog.NewTextHandler(stderr, hopts)
	if f.logFormat == "json" {
		handler = slog.NewJSONHandler(stderr, hopts)
	}
	log := slog.New(handler)
	o, err := f.options(getenv, log)
	if err != nil {
		fmt.Fprintf(stderr, "draingate serve: %v\n", err)
		return 1
	}
	routeLibraryLogs(log)
	s, err := New(o)
	if err != nil {
		o.close()
		fmt.Fprintf(stderr, "draingate serve: %v\n", err)
		return 1
	}
	gc, apply := gcTarget(getenv)
	if apply {
		debug.SetGCPercent(serverGOGC)
	}
	var tails []string
	for _, k := range f.routes {
		for _, t := range k.Tails() {
			tails = append(tails, fmt.Sprintf("%s=%s", t.Name, t.Value))
		}
	}
	log.Info("draingate serve starting", "tails", strings.Join(tails, " "),
		"traffic_evidence", f.trafficEvidence, "traffic_epsilon", f.trafficEpsilon, "gogc", gc)
	if err := s.Run(ctx); err != nil {
		log.Error("draingate serve stopped", "err", err)
		return 1
	}
	log.Info("draingate serve stopped")
	return 0
}

// parseServe reads serve's command line and environment; on a mistake or
// -h it says so on stderr and returns no flags and the exit code.
func parseServe(args []string, getenv func(string) string, stderr io.Writer) (*serveFlags, int) {
	f := &serveFlags{}
	fs := newServeFlagSet(f, Kinds(), stderr)
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: draingate serve [flags]\n\n"+cli.Help)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil, 0
		}
		return nil, 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "draingate serve: unexpected argument %q\n", fs.Arg(0))
		return nil, 2
	}
	if err := cli.Apply(fs, getenv); err != nil {
		fmt.Fprintf(stderr, "draingate serve: %v\n", err)
		return nil, 2
	}
	if err := f.validate(); err != nil {
		fmt.Fprintf(stderr, "draingate serve: %v\n", err)
		return nil, 2
	}
	return f, 0
}

// options are the server's options from the flags: the cluster's config
// and the listeners opened (closed again on an error).
func (f *serveFlags) options(getenv func(string) string, log *slog.Logger) (Options, error) {
	kube, err := kubeConfig(f.kubeconfig, getenv)
	if err != nil {
		return Options{}, err
	}
	kube.QPS, kube.Burst = float32(f.kubeQPS), f.kubeBurst
	o := Options{
		Kube:            kube,
		Routes:          f.routes,
		Namespace:       cmp.Or(f.namespace, cli.PodNamespace()),
		ShutdownReserve: f.reserve,
		MaxWait:         f.maxWait,
		IgnoreTraffic:   !f.trafficEvidence,
		EarlyClose:      f.earlyClose && f.trafficEvidence,
		LearnTails:      f.learnTails && f.trafficEvidence,
		ShortenTails:    f.shortenTails,
		LearnLag:        f.learnLag,
		LagCeiling:      f.maxWaitCeiling,
		Epsilon:         f.trafficEpsilon,
		WaitAPISources:  f.waitAPISources,
		Profiling:       f.profiling,
		Log:             log,
	}
	if o.Listener, err = net.Listen("tcp", f.listen); err != nil {
		return Options{}, fmt.Errorf("--listen: %v", err)
	}
	if f.metricsListen != "" {
		if o.Metrics, err = net.Listen("tcp", f.metricsListen); err != nil {
			o.close()
			return Options{}, fmt.Errorf("--metrics-listen: %v", err)
		}
	}
	o.Webhook, err = f.webhook.Options(f.webhookServer())
	if err != nil {
		o.close()
		return Options{}, err
	}
	return o, nil
}

// webhookServer is what the webhook takes from the server's own flags.
func (f *serveFlags) webhookServer() webhook.Server {
	return webhook.Server{Listen: f.listen, MaxWaitCeiling: f.maxWaitCeiling, TrafficEvidence: f.trafficEvidence}
}

// close closes the listeners the options hold, for a server that will not
// run.
func (o Options) close() {
	for _, ln := range []net.Listener{o.Listener, o.Metrics} {
		if ln != nil {
			ln.Close()
		}
	}
	if o.Webhook != nil && o.Webhook.Listener != nil {
		o.Webhook.Listener.Close()
	}
}

// andList is "a, b and c".
func andList(s []string) string {
	if len(s) < 2 {
		return strings.Join(s, "")
	}
	return strings.Join(s[:len(s)-1], ", ") + " and " + s[len(s)-1]
}

// routeLibraryLogs sends controller-runtime's and client-go's (klog's) logs
// through the server's own handler, in its format. Unset, controller-runtime
// drops its logs and complains with a stack trace, and klog writes its own
// format. Both are process-wide, so serve sets them only once it is about
// to start the server.
func routeLibraryLogs(log *slog.Logger) {
	ctrllog.SetLogger(logr.FromSlogHandler(log.Handler()))
	klog.SetSlogLogger(log)
}

func kubeConfig(path string, getenv func(string) string) (*rest.Config, error) {
	if path == "" {
		path = getenv("KUBECONFIG")
	}
	if path != "" {
		c, err := clientcmd.BuildConfigFromFlags("", path)
		if err != nil {
			return nil, fmt.Errorf("kubeconfig %s: %w", path, err)
		}
		return c, nil
	}
	c, err := rest.InClusterConfig()
	if err != nil {
		return nil, fmt.Errorf("not running in a pod (%v): give --kubeconfig or set KUBECONFIG", err)
	}
	return c, nil
}
