package lab

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"helm.sh/helm/v4/pkg/strvals"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"draingate.dev/draingate/release/chart"
)

// The draingate strategy's images, built offline from this module like
// DemoImage (testenv's LoadGoImage): the gate server (cmd/draingate, run as
// /bin/draingate) and the agent (cmd/draingate-prestop, run as
// /bin/draingate-prestop).
const (
	ServerImage = "draingate.local/draingate:1"
	AgentImage  = "draingate.local/draingate-prestop:1"
)

const (
	gatePort      = 8080 // the chart's wait API port
	gateReadyBy   = 2 * time.Minute
	gateLogLines  = 30
	gateAWSRegion = "us-east-1"
	// gateAccessKey is the gate server's AWS access key ID: the emulator
	// counts calls per key, so the report tells draingate's own ELBv2 calls
	// from the load balancer controller's.
	gateAccessKey = "draingate-lab-gate"
)

// gateSetup is one strategy's running gate server, as the app pods see it.
type gateSetup struct {
	Namespace string
	Server    string        // the wait API's root URL, in-cluster
	MaxWait   time.Duration // the injected agents' max-wait, as the values say
	// Set is every value the lab gave the chart, flattened ("a.b=v"),
	// for the report.
	Set []string
}

// startGate installs draingate with its Helm chart into its own namespace,
// pointed at the ELBv2 emulator, as an operator would, and waits until the
// gate server is ready (caches synced, webhook certificate in place). Its
// injection webhook then gives every pod of a namespace labelled
// draingate.dev/inject=enabled the agent. The returned cleanup, never nil,
// uninstalls the release and deletes the namespace; the caller defers it at
// once, error or not.
func (r *runner) startGate(ctx context.Context, ns string, st Strategy) (*gateSetup, func(), error) {
	cl := r.env.Client
	bg := context.Background() // cleanup must run after ctx is cancelled (Ctrl-C)
	var rel *chart.Release
	cleanup := func() {
		if rel != nil {
			if err := rel.Uninstall(2 * time.Minute); err != nil {
				r.notes = append(r.notes, fmt.Sprintf("gate server release %s: %v", ns, err))
			}
		}
		cl.CoreV1().Namespaces().Delete(bg, ns, metav1.DeleteOptions{})
	}
	sets := slices.Clone(st.Set)
	if r.o.Scenario.GenericLB {
		// What a user of a load balancer draingate cannot query sets.
		sets = append(sets, "targetGroups=false")
	}
	vals, err := gateValues(r.emuURL, r.o.TimeScale, append(sets, r.o.DraingateSet...))
	if err != nil {
		return nil, cleanup, err
	}
	maxWait, err := agentMaxWait(vals)
	if err != nil {
		return nil, cleanup, err
	}
	// The release is named after its namespace, which contains "draingate",
	// so the chart names every object (cluster-scoped ones too) after it.
	rel, err = chart.Install(ctx, r.env.Kubeconfig, ns, ns, vals, gateReadyBy, nil)
	if err != nil {
		if ctx.Err() != nil {
			return nil, cleanup, err
		}
		return nil, cleanup, fmt.Errorf("gate server in namespace %s: %w%s", ns, err, gateDiagnosis(cl, ns))
	}
	return &gateSetup{
		Namespace: ns,
		Server:    fmt.Sprintf("http://%s.%s.svc:%d", ns, ns, gatePort),
		MaxWait:   maxWait,
		Set:       flatten("", vals),
	}, cleanup, nil
}

// gateValues are the chart's values for one lab run, as a user installs
// it: the chart's own defaults, and on top only what the lab itself
// requires (the images it built offline; the emulator's endpoint, region
// and static keys, which it ignores) and, when the run is scaled, every
// duration of the defaults multiplied by the time scale, like every other
// duration of the run. Nothing comes from the scenario. sets (Helm --set
// syntax) come last: the operator's explicit experiments.
func gateValues(elbv2URL string, scale float64, sets []string) (map[string]any, error) {
	ch, err := chart.Load()
	if err != nil {
		return nil, err
	}
	vals := map[string]any{}
	if scale > 0 && scale != 1 {
		vals = scaleDurations(ch.Values, scale)
	}
	repo, tag, _ := strings.Cut(ServerImage, ":")
	agentRepo, agentTag, _ := strings.Cut(AgentImage, ":")
	env := func(name, value string) map[string]any { return map[string]any{"name": name, "value": value} }
	required := map[string]any{
		"image":    map[string]any{"repository": repo, "tag": tag},
		"aws":      map[string]any{"region": gateAWSRegion, "elbv2Endpoint": elbv2URL},
		"extraEnv": []any{env("AWS_ACCESS_KEY_ID", gateAccessKey), env("AWS_SECRET_ACCESS_KEY", "lab"), env("AWS_EC2_METADATA_DISABLED", "true")},
		"agent":    map[string]any{"image": map[string]any{"repository": agentRepo, "tag": agentTag}},
	}
	vals = mergeValues(vals, required)
	for _, s := range sets {
		if err := strvals.ParseInto(s, vals); err != nil {
			return nil, fmt.Errorf("--draingate-set %q: %w", s, err)
		}
	}
	return vals, nil
}

// scaleDurations returns the duration values of defaults (strings such as
// "20s"), each multiplied by f, at their places; nothing else. Resource
// requests and limits are Kubernetes quantities, not durations, even where
// they read like one ("50m" CPU): their subtrees are skipped.
func scaleDurations(defaults map[string]any, f float64) map[string]any {
	out := map[string]any{}
	for k, v := range defaults {
		switch v := v.(type) {
		case map[string]any:
			if k == "resources" {
				continue
			}
			if sub := scaleDurations(v, f); len(sub) > 0 {
				out[k] = sub
			}
		case string:
			if d, err := time.ParseDuration(v); err == nil && d > 0 {
				out[k] = time.Duration(float64(d) * f).Round(time.Millisecond).String()
			}
		}
	}
	return out
}

// mergeValues puts src's values into dst, maps merged key by key.
func mergeValues(dst, src map[string]any) map[string]any {
	for k, v := range src {
		if sm, ok := v.(map[string]any); ok {
			if dm, ok := dst[k].(map[string]any); ok {
				dst[k] = mergeValues(dm, sm)
				continue
			}
		}
		dst[k] = v
	}
	return dst
}

// flatten lists values as sorted "a.b=v" lines.
func flatten(prefix string, vals map[string]any) []string {
	var out []string
	for k, v := range vals {
		switch v := v.(type) {
		case map[string]any:
			out = append(out, flatten(prefix+k+".", v)...)
		case []any:
			out = append(out, fmt.Sprintf("%s%s=[%d entries]", prefix, k, len(v)))
		default:
			out = append(out, fmt.Sprintf("%s%s=%v", prefix, k, v))
		}
	}
	slices.Sort(out)
	return out
}

// agentMaxWait is the injected agents' max-wait the chart will use: the
// values' own, else the chart's default (a fresh copy of the defaults is
// merged into, never the values).
func agentMaxWait(vals map[string]any) (time.Duration, error) {
	ch, err := chart.Load()
	if err != nil {
		return 0, err
	}
	agent, _ := mergeValues(ch.Values, vals)["agent"].(map[string]any)
	s, _ := agent["maxWait"].(string)
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("agent.maxWait %q: %w", s, err)
	}
	return d, nil
}

func gateReady(ctx context.Context, cl kubernetes.Interface, ns string) bool {
	pods, err := cl.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/instance=" + ns})
	if err != nil {
		return false
	}
	for _, p := range pods.Items {
		if p.DeletionTimestamp != nil {
			continue
		}
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
				return true
			}
		}
	}
	return false
}

// gateDiagnosis says what the server pod is doing and the tail of its log,
// for the error when it never got ready. It never fails: it is already an
// error's explanation.
func gateDiagnosis(cl kubernetes.Interface, ns string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	pods, err := cl.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/instance=" + ns})
	if err != nil {
		return fmt.Sprintf("; listing its pods: %v", err)
	}
	if len(pods.Items) == 0 {
		return "; no server pod exists (see the Deployment's events)"
	}
	var b strings.Builder
	for _, p := range pods.Items {
		fmt.Fprintf(&b, "\npod %s: phase %s", p.Name, p.Status.Phase)
		restarted := false
		for _, cs := range p.Status.ContainerStatuses {
			switch {
			case cs.State.Waiting != nil:
				fmt.Fprintf(&b, ", waiting: %s %s", cs.State.Waiting.Reason, cs.State.Waiting.Message)
			case cs.State.Terminated != nil:
				fmt.Fprintf(&b, ", terminated: %s exit %d", cs.State.Terminated.Reason, cs.State.Terminated.ExitCode)
			}
			if cs.RestartCount > 0 {
				fmt.Fprintf(&b, ", %d restarts", cs.RestartCount)
				restarted = true
			}
		}
		tail := logTail(ctx, cl, ns, p.Name, false)
		if tail == "" && restarted {
			tail = logTail(ctx, cl, ns, p.Name, true)
		}
		if tail == "" {
			tail = "(empty)"
		}
		fmt.Fprintf(&b, "\nits log's last %d lines:\n%s", gateLogLines, tail)
	}
	return b.String()
}

func logTail(ctx context.Context, cl kubernetes.Interface, ns, pod string, previous bool) string {
	rc, err := cl.CoreV1().Pods(ns).GetLogs(pod, &corev1.PodLogOptions{Container: "draingate", TailLines: ptr.To(int64(gateLogLines)), Previous: previous}).Stream(ctx)
	if err != nil {
		if previous {
			return ""
		}
		return fmt.Sprintf("(no log: %v)", err)
	}
	defer rc.Close()
	b, _ := io.ReadAll(io.LimitReader(rc, 64<<10))
	return strings.TrimRight(string(b), "\n")
}

// UsesGate says whether any strategy runs the gate server, so the caller
// knows to load ServerImage and AgentImage.
func UsesGate(sts []Strategy) bool {
	for _, st := range sts {
		if st.Gate {
			return true
		}
	}
	return false
}
