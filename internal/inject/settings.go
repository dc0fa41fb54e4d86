package inject

import (
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/version"

	"draingate.dev/draingate/api"
	"draingate.dev/draingate/internal/cli"
)

// The injector's own defaults (the names it writes are api's).
const (
	tokenSeconds      = 3600           // the kubelet renews the token at 80% of this
	installerUser     = 65532          // distroless "nonroot"
	agentLogPath      = "/proc/1/fd/1" // the app's stdout: the kubelet drops a successful hook's output
	defaultGraceSecs  = 30             // the API's default terminationGracePeriodSeconds
	maxOverride       = time.Hour
	defaultMaxWait    = 90 * time.Second
	defaultCeiling    = 10 * time.Minute
	defaultFallback   = 30 * time.Second
	defaultShutdown   = 30 * time.Second
	defaultSizeLimit  = "16Mi"
	defaultVersion    = "unknown"
	installerCPU      = "10m"
	installerMemory   = "16Mi"
	watcherCPU        = "50m"
	watcherMemory     = "32Mi"
	warnPrefix        = "draingate: "
	notInjectedPrefix = warnPrefix + "not injected: "
	notSizedPrefix    = warnPrefix + "max-wait not sized from the pod's routes: "
)

// Settings are the injector's configuration, the same for every pod except
// where a pod's annotations override MaxWait, Fallback or ShutdownBudget.
// Zero values take the defaults noted.
type Settings struct {
	// AgentImage holds the agent at /bin/draingate-prestop. Required.
	AgentImage string
	// Server is the gate server's wait API root URL, http:// only (the agent
	// carries no TLS). Required.
	Server string
	// MaxWait is the agent's longest wait (default 90s).
	MaxWait time.Duration
	// MaxWaitCeiling bounds the max-wait that what the cluster learnt
	// (Handler.Need) may size a pod with (default 10m, the cluster
	// autoscaler's default --max-graceful-termination-sec). Not below
	// MaxWait.
	MaxWaitCeiling time.Duration
	// SizedBy, set per pod by the Handler, says why the pod's max-wait is
	// not the configured one; Mutate writes it, after the max-wait, in
	// api.AnnotationMaxWaitSized.
	SizedBy string
	// Fallback is how long the agent tries when no gate server answers at
	// all (default 30s).
	Fallback time.Duration
	// ShutdownBudget is the app's own time after the hook, between SIGTERM
	// and SIGKILL (default 30s).
	ShutdownBudget time.Duration
	// ImageVolume mounts AgentImage as an OCI image volume instead of
	// copying the agent into an emptyDir with an init container. Turn it on
	// only when every node's kubelet and runtime can mount image volumes
	// (API server 1.35+ is necessary, not sufficient) and the operator
	// allows it: a node that cannot fails the pod's start.
	ImageVolume bool
	// EmptyDirSizeLimit bounds the emptyDir (default 16Mi; the agent is a
	// few MB).
	EmptyDirSizeLimit resource.Quantity
	// Version is the value of the draingate.dev/injected annotation
	// (default "unknown").
	Version string
	// ServerNamespace is draingate's own namespace: its pods are never
	// mutated, so the gate server cannot end up waiting on itself.
	ServerNamespace string
	// InstallerResources are the installer init container's (default:
	// requests and limits of 10m CPU and 16Mi memory). Raise them where a
	// LimitRange sets a higher minimum, add ephemeral-storage where a
	// ResourceQuota requires it: the pod is refused after the webhook ran.
	InstallerResources corev1.ResourceRequirements
	// Watcher adds the watcher, a native sidecar (an init container with
	// restartPolicy Always) running the agent image's "watch": it watches
	// the pod's inbound traffic from the pod's start, and the preStop
	// agent sends its history, minutes long, instead of the seconds since
	// the hook began, which is what lets traffic evidence close a route
	// before its tail (docs/evidence.md). Native sidecars need every
	// kubelet at 1.29 or newer: the server turns this off below API server
	// 1.32, whose oldest kubelets (three minor versions back) are 1.29.
	// Not for hostNetwork pods, whose sockets are the node's.
	Watcher bool
	// WatcherResources are the watcher's (default: requests and limits of
	// 50m CPU and 32Mi memory; equal, so that a LimitRange's
	// maxLimitRequestRatio never refuses the pod). Its looks cost about
	// 47m on a node whose TCP hash has 262,144 buckets: each netlink dump
	// walks the whole hash, every namespace's, not the pod's sockets alone;
	// at 20m it was throttled past its agent's ask timeout.
	WatcherResources corev1.ResourceRequirements
	// PullSecrets are Secret names added to every injected pod's
	// imagePullSecrets (each must exist in the pod's namespace), for an
	// agent image in a private registry the pods' own secrets do not open.
	PullSecrets []string
}

// installerResources is r, or when r sets nothing the default: 10m CPU and
// 16Mi memory as requests and limits.
func installerResources(r corev1.ResourceRequirements) corev1.ResourceRequirements {
	if len(r.Requests) > 0 || len(r.Limits) > 0 {
		return r
	}
	small := corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse(installerCPU),
		corev1.ResourceMemory: resource.MustParse(installerMemory),
	}
	return corev1.ResourceRequirements{Requests: small, Limits: small.DeepCopy()}
}

// watcherResources is r, or when r sets nothing the default (see
// Settings.WatcherResources).
func watcherResources(r corev1.ResourceRequirements) corev1.ResourceRequirements {
	if len(r.Requests) > 0 || len(r.Limits) > 0 {
		return r
	}
	l := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(watcherCPU), corev1.ResourceMemory: resource.MustParse(watcherMemory)}
	return corev1.ResourceRequirements{Requests: l, Limits: l.DeepCopy()}
}

// Validate reports settings no pod could be injected with (see the
// fields), so that a server can refuse to start with them rather than
// fail every admission.
func (s Settings) Validate() error {
	_, err := s.withDefaults()
	return err
}

// withDefaults fills zero values and reports settings no pod could be
// injected with: those are the operator's mistakes, not the pod's.
func (s Settings) withDefaults() (Settings, error) {
	if s.MaxWait == 0 {
		s.MaxWait = defaultMaxWait
	}
	if s.MaxWaitCeiling == 0 {
		s.MaxWaitCeiling = max(defaultCeiling, s.MaxWait)
	}
	if s.Fallback == 0 {
		s.Fallback = defaultFallback
	}
	if s.ShutdownBudget == 0 {
		s.ShutdownBudget = defaultShutdown
	}
	if s.EmptyDirSizeLimit.IsZero() {
		s.EmptyDirSizeLimit = resource.MustParse(defaultSizeLimit)
	}
	if s.Version == "" {
		s.Version = defaultVersion
	}
	s.InstallerResources = installerResources(s.InstallerResources)
	s.WatcherResources = watcherResources(s.WatcherResources)
	var errs []error
	if strings.TrimSpace(s.AgentImage) == "" {
		errs = append(errs, errors.New("no agent image"))
	}
	if u, err := url.Parse(s.Server); err != nil || u.Scheme != "http" || u.Host == "" {
		errs = append(errs, fmt.Errorf("server %q is not an http://host[:port] URL (the agent speaks plain http)", s.Server))
	}
	if s.MaxWaitCeiling < s.MaxWait {
		errs = append(errs, fmt.Errorf("max-wait ceiling %s is below max-wait %s", s.MaxWaitCeiling, s.MaxWait))
	}
	errs = append(errs, cli.NotNegative("max-wait", s.MaxWait), cli.NotNegative("fallback", s.Fallback),
		cli.NotNegative("shutdown budget", s.ShutdownBudget))
	if s.EmptyDirSizeLimit.Sign() < 0 {
		errs = append(errs, fmt.Errorf("emptyDir size limit %s is negative", s.EmptyDirSizeLimit.String()))
	}
	for name, q := range s.InstallerResources.Requests {
		if l, ok := s.InstallerResources.Limits[name]; ok && q.Cmp(l) > 0 {
			errs = append(errs, fmt.Errorf("installer %s request %s is above its limit %s", name, q.String(), l.String()))
		}
	}
	for name, q := range s.WatcherResources.Requests {
		if l, ok := s.WatcherResources.Limits[name]; ok && q.Cmp(l) > 0 {
			errs = append(errs, fmt.Errorf("watcher %s request %s is above its limit %s", name, q.String(), l.String()))
		}
	}
	for _, n := range s.PullSecrets {
		if strings.TrimSpace(n) == "" {
			errs = append(errs, errors.New("an empty pull secret name"))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return s, fmt.Errorf("inject: bad settings: %w", err)
	}
	return s, nil
}

// timings are one pod's effective durations.
type timings struct {
	maxWait, fallback, budget time.Duration
}

// podTimings applies the pod's duration annotations over s. Each bad value
// is one problem naming the annotation, the value and what is accepted.
func podTimings(pod *corev1.Pod, s Settings) (timings, []string) {
	t := timings{maxWait: s.MaxWait, fallback: s.Fallback, budget: s.ShutdownBudget}
	var problems []string
	for _, o := range []struct {
		key string
		dst *time.Duration
	}{{api.AnnotationMaxWait, &t.maxWait}, {api.AnnotationFallback, &t.fallback}, {api.AnnotationShutdownBudget, &t.budget}} {
		v, ok := pod.Annotations[o.key]
		if !ok {
			continue
		}
		d, err := time.ParseDuration(strings.TrimSpace(v))
		if err != nil || d <= 0 || d > maxOverride {
			problems = append(problems, fmt.Sprintf("annotation %s=%s: want a duration such as 90s or 2m, more than 0 and at most %s",
				o.key, api.Quote(v, maxQuoted), "1h"))
			continue
		}
		*o.dst = d
	}
	return t, problems
}

// maxQuoted bounds a user's value quoted in a warning: the API server
// truncates long warnings, and the point is to recognise the value, not
// reprint it.
const maxQuoted = 64

// NativeSidecarsEverywhere reports whether every kubelet an API server of
// this version may have supports native sidecars (Kubernetes 1.32 and
// newer: kubelets are at most three minor versions older, and sidecars are
// on by default from 1.29). A kubelet without them would run the watcher
// as an init container that never ends, and the pod would never start.
func NativeSidecarsEverywhere(v *version.Info) bool {
	return atLeast(v, 1, 32)
}

func atLeast(v *version.Info, wantMajor, wantMinor int) bool {
	var major, minor int
	fmt.Sscanf(v.Major, "%d", &major)
	fmt.Sscanf(strings.TrimSuffix(v.Minor, "+"), "%d", &minor)
	return major > wantMajor || major == wantMajor && minor >= wantMinor
}

// ImageVolumesOnByDefault reports whether an API server of this version
// has image volumes on by default (Kubernetes 1.35 and newer). Settings
// with ImageVolume on an older one fall back to the init container.
func ImageVolumesOnByDefault(v *version.Info) bool {
	return atLeast(v, 1, 35)
}
