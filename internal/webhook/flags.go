package webhook

import (
	"cmp"
	"errors"
	"flag"
	"fmt"
	"net"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"draingate.dev/draingate/internal/cli"
	"draingate.dev/draingate/internal/inject"
	"draingate.dev/draingate/internal/inject/certs"
	"draingate.dev/draingate/internal/version"
)

// Flags are the webhook's flags on `draingate serve`'s command line. Each
// also reads DRAINGATE_<NAME> (internal/cli).
type Flags struct {
	listen, config, secret             string
	service, namespace                 string
	certManager, imageVolume           bool
	watcher                            bool
	watcherRequests, watcherLimits     string
	agentImage, agentServer            string
	maxWait, fallback, shutdownBudget  time.Duration
	installerRequests, installerLimits string
	pullSecrets                        string
}

// Register registers the flags on fs, with their defaults.
func (f *Flags) Register(fs *flag.FlagSet) {
	fs.StringVar(&f.listen, "webhook-listen", "", "address of the pod-injection admission webhook (TLS); empty: no webhook")
	fs.StringVar(&f.config, "webhook-config", "draingate", "MutatingWebhookConfiguration whose caBundle the server keeps current (with its own CA)")
	fs.StringVar(&f.secret, "webhook-secret", "draingate-webhook-tls", "Secret holding the webhook's CA and serving certificate (ca.crt, tls.crt, tls.key)")
	fs.StringVar(&f.service, "webhook-service", "draingate", "the webhook's Service name: its certificate covers <service>.<namespace>.svc")
	fs.StringVar(&f.namespace, "webhook-namespace", "", "namespace of the webhook's Service and Secret, and draingate's own (its pods are never injected); empty: the pod's own namespace")
	fs.BoolVar(&f.certManager, "webhook-cert-manager", false, "cert-manager writes the Secret and the caBundle; the server only reads the Secret")
	fs.StringVar(&f.agentImage, "agent-image", "", "image holding /bin/draingate-prestop, injected into opted-in pods (required with --webhook-listen)")
	fs.StringVar(&f.agentServer, "agent-server", "", "wait API URL the injected agents ask; empty: http://<webhook-service>.<webhook-namespace>.svc:<listen port>")
	fs.DurationVar(&f.maxWait, "inject-max-wait", 90*time.Second, "injected agents' longest wait (pod annotation draingate.dev/max-wait overrides)")
	fs.DurationVar(&f.fallback, "inject-fallback", 30*time.Second, "injected agents' wait when no gate server answers (annotation draingate.dev/fallback)")
	fs.DurationVar(&f.shutdownBudget, "inject-shutdown-budget", 30*time.Second, "the app's time after the hook, added to the grace period (annotation draingate.dev/shutdown-budget)")
	fs.StringVar(&f.installerRequests, "inject-installer-requests", "", "the installer init container's requests, e.g. cpu=50m,memory=16Mi,ephemeral-storage=32Mi (a LimitRange minimum or a ResourceQuota refuses pods after the webhook); empty with --inject-installer-limits also empty: cpu=10m,memory=16Mi for both")
	fs.StringVar(&f.installerLimits, "inject-installer-limits", "", "the installer init container's limits, same form as --inject-installer-requests")
	fs.StringVar(&f.pullSecrets, "inject-pull-secrets", "", "comma-separated Secret names added to injected pods' imagePullSecrets, for an agent image in a private registry (each must exist in the pods' namespaces)")
	fs.BoolVar(&f.watcher, "inject-watcher", true, "add the watcher, a native sidecar watching each injected pod's traffic from its start, so that traffic evidence can close routes before their tails (docs/evidence.md); false: evidence from the hook on; off by itself with --traffic-evidence=false, below Kubernetes 1.32 (kubelets without native sidecars) and for hostNetwork pods")
	fs.StringVar(&f.watcherRequests, "inject-watcher-requests", "", "the watcher's requests, same form as --inject-installer-requests; empty with --inject-watcher-limits also empty: cpu=50m,memory=32Mi for both")
	fs.StringVar(&f.watcherLimits, "inject-watcher-limits", "", "the watcher's limits, same form; empty with --inject-watcher-requests also empty: as the requests")
	fs.BoolVar(&f.imageVolume, "inject-image-volume", false, "mount the agent image as an image volume instead of copying it with an init container (needs Kubernetes 1.35+ nodes)")
}

// MaxWait is --inject-max-wait: the server checks its --max-wait-ceiling
// against it.
func (f *Flags) MaxWait() time.Duration { return f.maxWait }

// Validate checks the flags' values; each error names its flag.
func (f *Flags) Validate() error {
	_, _, err := f.installerSettings()
	_, werr := f.watcherResources()
	return errors.Join(err, werr)
}

// Server is what the webhook takes from the server's own flags.
type Server struct {
	// Listen is the wait API's address (--listen): the agents' default
	// server URL takes its port.
	Listen string
	// MaxWaitCeiling is --max-wait-ceiling: the longest max-wait what was
	// learnt may give a pod.
	MaxWaitCeiling time.Duration
	// TrafficEvidence is --traffic-evidence: the watcher serves evidence
	// alone, so without it no pod gets one.
	TrafficEvidence bool
}

// Options builds the webhook's options from the flags and opens its
// listener; nil without --webhook-listen.
func (f *Flags) Options(srv Server) (*Options, error) {
	if f.listen == "" {
		return nil, nil
	}
	if f.agentImage == "" {
		return nil, errors.New("--webhook-listen needs --agent-image, the image holding /bin/draingate-prestop")
	}
	ns := cmp.Or(f.namespace, cli.PodNamespace())
	if ns == "" {
		return nil, errors.New("--webhook-listen needs --webhook-namespace (draingate's own namespace) when not running in a pod")
	}
	server := f.agentServer
	if server == "" {
		_, port, err := net.SplitHostPort(srv.Listen)
		if err != nil {
			return nil, fmt.Errorf("--listen %q: %v", srv.Listen, err)
		}
		server = fmt.Sprintf("http://%s.%s.svc:%s", f.service, ns, port)
	}
	ln, err := net.Listen("tcp", f.listen)
	if err != nil {
		return nil, fmt.Errorf("--webhook-listen: %v", err)
	}
	settings := inject.Settings{
		AgentImage: f.agentImage, Server: server,
		MaxWait: f.maxWait, MaxWaitCeiling: srv.MaxWaitCeiling, Fallback: f.fallback, ShutdownBudget: f.shutdownBudget,
		ImageVolume: f.imageVolume, Version: version.Version, ServerNamespace: ns,
		// The watcher serves traffic evidence alone: without it, it
		// would cost every pod a container for nothing.
		Watcher: f.watcher && srv.TrafficEvidence,
	}
	if settings.InstallerResources, settings.PullSecrets, err = f.installerSettings(); err == nil {
		settings.WatcherResources, err = f.watcherResources()
	}
	if err == nil {
		err = settings.Validate()
	}
	if err != nil {
		ln.Close()
		return nil, err
	}
	c := &certs.Certs{Namespace: ns, SecretName: f.secret, Service: f.service, External: f.certManager}
	if !f.certManager {
		c.ConfigName = f.config
	}
	return &Options{Listener: ln, Certs: c, Settings: settings}, nil
}

// installerSettings reads the installer's resources and the pull secrets
// from the flags.
func (f *Flags) installerSettings() (corev1.ResourceRequirements, []string, error) {
	r, err := resourceFlags("installer", f.installerRequests, f.installerLimits)
	var secrets []string
	for _, n := range strings.Split(f.pullSecrets, ",") {
		if n = strings.TrimSpace(n); n != "" {
			secrets = append(secrets, n)
		}
	}
	return r, secrets, err
}

// watcherResources reads the watcher's resources from the flags.
func (f *Flags) watcherResources() (corev1.ResourceRequirements, error) {
	return resourceFlags("watcher", f.watcherRequests, f.watcherLimits)
}

// resourceFlags reads --inject-<who>-requests and -limits.
func resourceFlags(who, requests, limits string) (corev1.ResourceRequirements, error) {
	var r corev1.ResourceRequirements
	var errs []error
	reqFlag, limFlag := "--inject-"+who+"-requests", "--inject-"+who+"-limits"
	for _, x := range []struct {
		flag, v string
		dst     *corev1.ResourceList
	}{{reqFlag, requests, &r.Requests}, {limFlag, limits, &r.Limits}} {
		l, err := parseResources(x.v)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", x.flag, err))
		}
		*x.dst = l
	}
	for name, q := range r.Requests {
		if l, ok := r.Limits[name]; ok && q.Cmp(l) > 0 {
			errs = append(errs, fmt.Errorf("%s %s=%s is above %s %s=%s", reqFlag, name, q.String(), limFlag, name, l.String()))
		}
	}
	return r, errors.Join(errs...)
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
