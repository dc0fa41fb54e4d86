package server

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"runtime/debug"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/elasticloadbalancingv2"
	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"draingate.dev/draingate/internal/aws/elbv2"
	"draingate.dev/draingate/internal/cli"
	"draingate.dev/draingate/internal/gate"
	"draingate.dev/draingate/internal/inject"
	"draingate.dev/draingate/internal/inject/certs"
	"draingate.dev/draingate/internal/version"
)

// serveFlags are `draingate serve`'s flags. Each also reads DRAINGATE_<NAME>
// (see envflag); a flag on the command line wins.
type serveFlags struct {
	kubeconfig, listen, metricsListen string
	region, endpoint                  string
	targetGroups                      bool
	rate                              float64
	burst                             int
	pollInterval, maxWait, reserve    time.Duration
	tailSlice, tailALB, tailNLB       time.Duration
	logFormat                         string
	trafficEvidence, profiling        bool
	trafficEpsilon                    float64
	waitAPISources                    string

	webhookListen, webhookConfig, webhookSecret         string
	webhookService, webhookNamespace                    string
	webhookCertManager, injectImageVolume               bool
	agentImage, agentServer                             string
	injectMaxWait, injectFallback, injectShutdownBudget time.Duration
	injectInstallerRequests, injectInstallerLimits      string
	injectPullSecrets                                   string
}

func newServeFlagSet(f *serveFlags, out io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("draingate serve", flag.ContinueOnError)
	fs.SetOutput(out)
	d := DefaultTails()
	fs.StringVar(&f.kubeconfig, "kubeconfig", "", "kubeconfig file; empty: $KUBECONFIG, else the in-cluster ServiceAccount")
	fs.StringVar(&f.listen, "listen", ":8080", "address of the wait API, /healthz and /readyz")
	fs.StringVar(&f.metricsListen, "metrics-listen", ":9090", "address of /metrics; empty: no metrics listener")
	fs.BoolVar(&f.targetGroups, "target-groups", true, "wait for AWS target groups (TargetGroupBindings); false: EndpointSlices only, no AWS calls")
	fs.StringVar(&f.region, "aws-region", "", "AWS region of the target groups; empty: $AWS_REGION or the SDK's shared config")
	fs.StringVar(&f.endpoint, "elbv2-endpoint", "", "ELBv2 API endpoint URL override (a VPC endpoint, or an emulator)")
	fs.Float64Var(&f.rate, "aws-rate", 2, "ELBv2 calls per second this replica may make, retries included. "+
		"Every replica has its own budget, so N replicas may make N times this: set it to the total you grant draingate divided by the replicas. "+
		"Keep the total well under the account's 10/s Describe refill, which the AWS Load Balancer Controller needs too")
	fs.IntVar(&f.burst, "aws-burst", 5, "ELBv2 calls this replica may make at once (the budget's bucket size)")
	fs.DurationVar(&f.pollInterval, "poll-interval", 2*time.Second, "least time between two polls of one target group")
	fs.DurationVar(&f.tailSlice, "tail-endpointslice", d.EndpointSlice, "how long after an EndpointSlice drops the pod kube-proxy, ingress controllers and meshes may still send to it")
	fs.DurationVar(&f.tailALB, "tail-alb", d.ALB, "how long after its target is draining an Application Load Balancer may still send new requests")
	fs.DurationVar(&f.tailNLB, "tail-nlb", d.NLB, "how long after its target is draining a Network Load Balancer (or one of unknown type) may still open connections")
	fs.BoolVar(&f.trafficEvidence, "traffic-evidence", true, "weigh the traffic the agents see arriving at their pods: a target group route closes once every load balancer source has gone quiet (before its tail when all of them sent enough to fit a rate, after it while one still sends); false: tails alone")
	fs.StringVar(&f.waitAPISources, "wait-api-sources", SourcesPod, "whom the wait API answers about a pod: pod (requests from one of the pod's own addresses, where its agent asks from; others get 403) or any (for a server behind a proxy or mesh sidecar that hides the agents' addresses)")
	fs.Float64Var(&f.trafficEpsilon, "traffic-epsilon", gate.DefaultEpsilon, "chance of a false quiet accepted per route and source: the probability that a source still sending at its fitted rate stays silent as long as its quiet bound (smaller: longer bounds)")
	fs.DurationVar(&f.maxWait, "max-wait", 30*time.Second, "longest one wait API long-poll is held (agents ask again)")
	fs.DurationVar(&f.reserve, "shutdown-reserve", 5*time.Second, "release a pod this long before its grace period ends, whatever its routes say, so the app still shuts down cleanly")
	fs.StringVar(&f.logFormat, "log-format", "text", "log format: text or json")
	fs.BoolVar(&f.profiling, "profiling", false, "also serve Go's runtime profiles (heap, CPU, goroutines) at /debug/pprof/ on --metrics-listen, for diagnosing memory or CPU; they reveal the process's internals, so keep that port private")

	fs.StringVar(&f.webhookListen, "webhook-listen", "", "address of the pod-injection admission webhook (TLS); empty: no webhook")
	fs.StringVar(&f.webhookConfig, "webhook-config", "draingate", "MutatingWebhookConfiguration whose caBundle the server keeps current (with its own CA)")
	fs.StringVar(&f.webhookSecret, "webhook-secret", "draingate-webhook-tls", "Secret holding the webhook's CA and serving certificate (ca.crt, tls.crt, tls.key)")
	fs.StringVar(&f.webhookService, "webhook-service", "draingate", "the webhook's Service name: its certificate covers <service>.<namespace>.svc")
	fs.StringVar(&f.webhookNamespace, "webhook-namespace", "", "namespace of the webhook's Service and Secret, and draingate's own (its pods are never injected); empty: the pod's own namespace")
	fs.BoolVar(&f.webhookCertManager, "webhook-cert-manager", false, "cert-manager writes the Secret and the caBundle; the server only reads the Secret")
	fs.StringVar(&f.agentImage, "agent-image", "", "image holding /bin/draingate-prestop, injected into opted-in pods (required with --webhook-listen)")
	fs.StringVar(&f.agentServer, "agent-server", "", "wait API URL the injected agents ask; empty: http://<webhook-service>.<webhook-namespace>.svc:<listen port>")
	fs.DurationVar(&f.injectMaxWait, "inject-max-wait", 90*time.Second, "injected agents' longest wait (pod annotation draingate.dev/max-wait overrides)")
	fs.DurationVar(&f.injectFallback, "inject-fallback", 30*time.Second, "injected agents' wait when no gate server answers (annotation draingate.dev/fallback)")
	fs.DurationVar(&f.injectShutdownBudget, "inject-shutdown-budget", 30*time.Second, "the app's time after the hook, added to the grace period (annotation draingate.dev/shutdown-budget)")
	fs.StringVar(&f.injectInstallerRequests, "inject-installer-requests", "", "the installer init container's requests, e.g. cpu=50m,memory=16Mi,ephemeral-storage=32Mi (a LimitRange minimum or a ResourceQuota refuses pods after the webhook); empty with --inject-installer-limits also empty: cpu=10m,memory=16Mi for both")
	fs.StringVar(&f.injectInstallerLimits, "inject-installer-limits", "", "the installer init container's limits, same form as --inject-installer-requests")
	fs.StringVar(&f.injectPullSecrets, "inject-pull-secrets", "", "comma-separated Secret names added to injected pods' imagePullSecrets, for an agent image in a private registry (each must exist in the pods' namespaces)")
	fs.BoolVar(&f.injectImageVolume, "inject-image-volume", false, "mount the agent image as an image volume instead of copying it with an init container (needs Kubernetes 1.35+ nodes)")
	return fs
}

func (f *serveFlags) validate() error {
	errs := []error{
		cli.Positive("--poll-interval", f.pollInterval), cli.Positive("--max-wait", f.maxWait),
		cli.NotNegative("--tail-endpointslice", f.tailSlice), cli.NotNegative("--tail-alb", f.tailALB),
		cli.NotNegative("--tail-nlb", f.tailNLB), cli.Positive("--shutdown-reserve", f.reserve),
	}
	// Options read zero as "the default": say so rather than run with
	// what the flags did not ask for.
	if f.tailSlice == 0 && f.tailALB == 0 && f.tailNLB == 0 {
		errs = append(errs, errors.New("--tail-endpointslice, --tail-alb and --tail-nlb are all zero: every route would close the moment its owner took the pod out, which no load balancer does; give at least one a length (a zero tail is fine for one or two kinds)"))
	}
	if f.rate <= 0 || f.rate > 100 {
		errs = append(errs, fmt.Errorf("--aws-rate must be in (0, 100] calls/s, got %s", strconv.FormatFloat(f.rate, 'g', -1, 64)))
	}
	if f.burst < 1 {
		errs = append(errs, fmt.Errorf("--aws-burst must be at least 1, got %d", f.burst))
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
	if _, _, err := f.installerSettings(); err != nil {
		errs = append(errs, err)
	}
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

func serve(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	var f serveFlags
	fs := newServeFlagSet(&f, stderr)
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: draingate serve [flags]\n\n"+cli.Help)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "draingate serve: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	if err := cli.Apply(fs, getenv); err != nil {
		fmt.Fprintf(stderr, "draingate serve: %v\n", err)
		return 2
	}
	if err := f.validate(); err != nil {
		fmt.Fprintf(stderr, "draingate serve: %v\n", err)
		return 2
	}
	var handler slog.Handler = slog.NewTextHandler(stderr, nil)
	if f.logFormat == "json" {
		handler = slog.NewJSONHandler(stderr, nil)
	}
	log := slog.New(handler)

	kube, err := kubeConfig(f.kubeconfig, getenv)
	if err != nil {
		fmt.Fprintf(stderr, "draingate serve: %v\n", err)
		return 1
	}
	o := Options{
		Kube:            kube,
		Poller:          elbv2.Config{Rate: f.rate, Burst: f.burst, Interval: f.pollInterval},
		Tails:           Tails{EndpointSlice: f.tailSlice, ALB: f.tailALB, NLB: f.tailNLB},
		ShutdownReserve: f.reserve,
		MaxWait:         f.maxWait,
		IgnoreTraffic:   !f.trafficEvidence,
		Epsilon:         f.trafficEpsilon,
		WaitAPISources:  f.waitAPISources,
		Profiling:       f.profiling,
		Log:             log,
	}
	if f.targetGroups {
		client, err := elbv2Client(ctx, f.region, f.endpoint)
		if err != nil {
			fmt.Fprintf(stderr, "draingate serve: %v\n", err)
			return 1
		}
		o.ELBv2 = client
	}
	if o.Listener, err = net.Listen("tcp", f.listen); err != nil {
		fmt.Fprintf(stderr, "draingate serve: --listen: %v\n", err)
		return 1
	}
	if f.metricsListen != "" {
		if o.Metrics, err = net.Listen("tcp", f.metricsListen); err != nil {
			o.Listener.Close()
			fmt.Fprintf(stderr, "draingate serve: --metrics-listen: %v\n", err)
			return 1
		}
	}
	if f.webhookListen != "" {
		if o.Webhook, err = webhookOptions(&f); err != nil {
			o.Listener.Close()
			if o.Metrics != nil {
				o.Metrics.Close()
			}
			fmt.Fprintf(stderr, "draingate serve: %v\n", err)
			return 1
		}
	}
	routeLibraryLogs(log)
	s, err := New(o)
	if err != nil {
		fmt.Fprintf(stderr, "draingate serve: %v\n", err)
		return 1
	}
	gc, apply := gcTarget(getenv)
	if apply {
		debug.SetGCPercent(serverGOGC)
	}
	log.Info("draingate serve starting", "target_groups", f.targetGroups, "aws_rate", f.rate, "aws_burst", f.burst,
		"tails", fmt.Sprintf("endpointslice=%s alb=%s nlb=%s", f.tailSlice, f.tailALB, f.tailNLB),
		"traffic_evidence", f.trafficEvidence, "traffic_epsilon", f.trafficEpsilon, "gogc", gc)
	if err := s.Run(ctx); err != nil {
		log.Error("draingate serve stopped", "err", err)
		return 1
	}
	log.Info("draingate serve stopped")
	return 0
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

func elbv2Client(ctx context.Context, region, endpoint string) (*elasticloadbalancingv2.Client, error) {
	var opts []func(*awsconfig.LoadOptions) error
	if region != "" {
		opts = append(opts, awsconfig.WithRegion(region))
	}
	cfg, err := awsconfig.LoadDefaultConfig(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("AWS config: %w", err)
	}
	if cfg.Region == "" {
		return nil, errors.New("no AWS region: give --aws-region (or set AWS_REGION), or --target-groups=false to wait for EndpointSlices only")
	}
	return elasticloadbalancingv2.NewFromConfig(cfg, func(o *elasticloadbalancingv2.Options) {
		if endpoint != "" {
			o.BaseEndpoint = aws.String(endpoint)
		}
	}), nil
}

// serviceAccountNamespace is where the in-cluster ServiceAccount lives.
const serviceAccountNamespace = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"

// webhookOptions builds the webhook's settings from the flags and opens its
// listener.
func webhookOptions(f *serveFlags) (*WebhookOptions, error) {
	if f.agentImage == "" {
		return nil, errors.New("--webhook-listen needs --agent-image, the image holding /bin/draingate-prestop")
	}
	ns := f.webhookNamespace
	if ns == "" {
		b, err := os.ReadFile(serviceAccountNamespace)
		if err != nil {
			return nil, errors.New("--webhook-listen needs --webhook-namespace (draingate's own namespace) when not running in a pod")
		}
		ns = strings.TrimSpace(string(b))
	}
	server := f.agentServer
	if server == "" {
		_, port, err := net.SplitHostPort(f.listen)
		if err != nil {
			return nil, fmt.Errorf("--listen %q: %v", f.listen, err)
		}
		server = fmt.Sprintf("http://%s.%s.svc:%s", f.webhookService, ns, port)
	}
	ln, err := net.Listen("tcp", f.webhookListen)
	if err != nil {
		return nil, fmt.Errorf("--webhook-listen: %v", err)
	}
	settings := inject.Settings{
		AgentImage: f.agentImage, Server: server,
		MaxWait: f.injectMaxWait, Fallback: f.injectFallback, ShutdownBudget: f.injectShutdownBudget,
		ImageVolume: f.injectImageVolume, Version: version.Version, ServerNamespace: ns,
	}
	if settings.InstallerResources, settings.PullSecrets, err = f.installerSettings(); err == nil {
		err = settings.Validate()
	}
	if err != nil {
		ln.Close()
		return nil, err
	}
	c := &certs.Certs{Namespace: ns, SecretName: f.webhookSecret, Service: f.webhookService, External: f.webhookCertManager}
	if !f.webhookCertManager {
		c.ConfigName = f.webhookConfig
	}
	return &WebhookOptions{Listener: ln, Certs: c, Settings: settings}, nil
}

// installerSettings reads the installer's resources and the pull secrets
// from the flags.
func (f *serveFlags) installerSettings() (corev1.ResourceRequirements, []string, error) {
	var r corev1.ResourceRequirements
	var errs []error
	for _, x := range []struct {
		flag, v string
		dst     *corev1.ResourceList
	}{{"--inject-installer-requests", f.injectInstallerRequests, &r.Requests},
		{"--inject-installer-limits", f.injectInstallerLimits, &r.Limits}} {
		l, err := parseResources(x.v)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", x.flag, err))
		}
		*x.dst = l
	}
	for name, q := range r.Requests {
		if l, ok := r.Limits[name]; ok && q.Cmp(l) > 0 {
			errs = append(errs, fmt.Errorf("--inject-installer-requests %s=%s is above --inject-installer-limits %s=%s", name, q.String(), name, l.String()))
		}
	}
	var secrets []string
	for _, n := range strings.Split(f.injectPullSecrets, ",") {
		if n = strings.TrimSpace(n); n != "" {
			secrets = append(secrets, n)
		}
	}
	return r, secrets, errors.Join(errs...)
}

// parseResources reads "cpu=50m,memory=16Mi" (empty: none).
func parseResources(v string) (corev1.ResourceList, error) {
	if strings.TrimSpace(v) == "" {
		return nil, nil
	}
	l := corev1.ResourceList{}
	for _, kv := range strings.Split(v, ",") {
		name, q, ok := strings.Cut(strings.TrimSpace(kv), "=")
		name, q = strings.TrimSpace(name), strings.TrimSpace(q)
		if !ok || name == "" {
			return nil, fmt.Errorf("%q is not name=quantity (as in cpu=50m,memory=16Mi)", kv)
		}
		// A misspelt name would make the API server refuse every injected
		// pod: only the container resources it knows, or an extended
		// resource's qualified name.
		if name != "cpu" && name != "memory" && name != "ephemeral-storage" && !strings.HasPrefix(name, "hugepages-") && !strings.Contains(name, "/") {
			return nil, fmt.Errorf("%q is not a container resource: want cpu, memory, ephemeral-storage, hugepages-<size> or a domain-qualified extended resource", name)
		}
		qty, err := resource.ParseQuantity(q)
		if err != nil || qty.Sign() < 0 {
			return nil, fmt.Errorf("%s=%q is not a non-negative quantity", name, q)
		}
		l[corev1.ResourceName(name)] = qty
	}
	return l, nil
}
