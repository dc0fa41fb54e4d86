package api

// The contract between the injection webhook, the agent, the gate server
// and kubectl draingate: the names the webhook writes on a pod and the
// others read. Each component imports these, never another component.

// Labels and annotations on pods and namespaces.
const (
	// LabelInject on a pod or a namespace: "enabled" opts in, "disabled" (on
	// a pod) opts out whatever its namespace says.
	LabelInject = "draingate.dev/inject"
	// Values of LabelInject.
	Enabled  = "enabled"
	Disabled = "disabled"
	// AnnotationInjected marks an injected pod; its value is the version
	// of the webhook that injected it. The gate server shares the memory
	// of a pod so marked among its replicas from its first observation.
	AnnotationInjected = "draingate.dev/injected"
	// Per-pod overrides of the webhook's max-wait, fallback and shutdown
	// budget (Go durations).
	AnnotationMaxWait        = "draingate.dev/max-wait"
	AnnotationFallback       = "draingate.dev/fallback"
	AnnotationShutdownBudget = "draingate.dev/shutdown-budget"
	// AnnotationMaxWaitSized, written on an injected pod whose max-wait
	// is not the configured one, says what sized it: "2m20s: why".
	AnnotationMaxWaitSized = "draingate.dev/max-wait-sized"
	// AnnotationContainers names the containers to gate, comma-separated,
	// instead of "every container with ports".
	AnnotationContainers = "draingate.dev/containers"
)

// Containers, volumes and paths the webhook adds to a pod.
const (
	// VolumeName is the agent's volume: an emptyDir the installer copies
	// the agent into, mounted at AgentDir, or the agent's image itself,
	// mounted at ImageDir.
	VolumeName    = "draingate-agent"
	InstallerName = "draingate-agent-install"
	AgentDir      = "/draingate"
	ImageDir      = "/draingate-image"
	// AgentFile is the agent's file name where it is installed (AgentDir),
	// and AgentInImage its path in its own image.
	AgentFile    = "draingate-prestop"
	AgentInImage = "/bin/draingate-prestop"
	// The watcher is a native sidecar watching the pod's traffic from its
	// start, serving it on WatchSocket in its own emptyDir, which gated
	// containers mount read-only at WatchDir.
	WatcherName     = "draingate-agent-watch"
	WatchVolumeName = "draingate-watch"
	WatchDir        = "/draingate-watch"
	WatchSocket     = "watch.sock"
	// A hostNetwork pod's agent proves which pod it runs in with a
	// ServiceAccount token the kubelet projects for the pod, with audience
	// TokenAudience, into TokenDir/TokenFile (its address is the node's,
	// shared with the node's other hostNetwork pods).
	TokenVolumeName = "draingate-token"
	TokenDir        = "/var/run/secrets/draingate.dev"
	TokenFile       = "token"
	TokenAudience   = "draingate"
)

// The agent's environment as the webhook sets it: each is also the
// fallback of the agent's flag of the same name (--pod-name and so on).
const (
	EnvServer       = "DRAINGATE_SERVER"
	EnvWatchSocket  = "DRAINGATE_WATCH_SOCKET"
	EnvPodName      = "DRAINGATE_POD_NAME"
	EnvPodNamespace = "DRAINGATE_POD_NAMESPACE"
	EnvPodUID       = "DRAINGATE_POD_UID"
	EnvPodIP        = "DRAINGATE_POD_IP"
	EnvHostIP       = "DRAINGATE_HOST_IP"
)
