package lab

import (
	"context"
	"fmt"
	"io"
	"math"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"draingate.dev/draingate/internal/chart"
	"draingate.dev/draingate/internal/sim/elbv2sim"
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
	gateLongPoll  = 30 * time.Second // the server's cap on one long-poll: not a race timing, never scaled
	gateAWSRate   = 2
	gateAWSBurst  = 5
	gateAWSRegion = "us-east-1"
)

// gateTimings are the gate server's and the agent's durations for one run.
type gateTimings struct {
	Poll                    time.Duration // DescribeTargetHealth interval per target group
	EndpointSlice, ALB, NLB time.Duration // the propagation tails
	Fallback                time.Duration // the agent's wait when no gate server answers
}

// timingsFor scales the gate's defaults (docs/facts.md#load-balancer-tails:
// ALB up to ~20 s after draining, NLB minutes; the gate's own defaults,
// internal/gate.DefaultTails) by the run's time scale, as the scenario's
// durations are. The poll interval keeps a floor so a small scale does not
// hammer the emulator.
func timingsFor(f float64) gateTimings {
	if f <= 0 {
		f = 1
	}
	m := func(d time.Duration) time.Duration { return time.Duration(float64(d) * f).Round(time.Millisecond) }
	return gateTimings{
		Poll:          max(m(2*time.Second), 200*time.Millisecond),
		EndpointSlice: m(5 * time.Second),
		ALB:           m(20 * time.Second),
		NLB:           m(180 * time.Second),
		Fallback:      max(time.Duration(math.Ceil(30*f))*time.Second, time.Second),
	}
}

// lbTail is the tail the gate applies to the scenario's target group.
func (t gateTimings) lbTail(sc Scenario) time.Duration {
	if sc.LoadBalancer == string(elbv2sim.Network) {
		return t.NLB
	}
	return t.ALB
}

// maxWait is the agent's deadline: long enough that the gate, not the
// deadline, releases every pod in the scenario's worst case. The gate closes
// the target group route a poll after the controller's longest lag plus the
// load balancer's tail; the data plane stops sending after the lag plus its
// longest propagation. The larger of the two, plus a poll, plus a margin of
// half that (at least 10 s; the whole of it again when AWS throttles
// registrations, which delays deregistration past the lag), in whole seconds.
func (t gateTimings) maxWait(sc Scenario) time.Duration {
	lag := sc.ReconcileLag + sc.ReconcileJitter
	covered := max(lag+t.lbTail(sc), sc.MaxRouteDelay()) + t.Poll
	margin := max(covered/2, 10*time.Second)
	if throttled(sc) {
		margin = max(margin, covered)
	}
	return time.Duration(math.Ceil((covered + margin).Seconds())) * time.Second
}

// gateSetup is one strategy's running gate server, as the app pods see it.
type gateSetup struct {
	Namespace string
	Server    string // the wait API's root URL, in-cluster
	MaxWait   time.Duration
	Fallback  time.Duration
	Timings   gateTimings
}

// startGate installs draingate with its Helm chart into its own namespace,
// pointed at the ELBv2 emulator, as an operator would, and waits until the
// gate server is ready (caches synced, webhook certificate in place). Its
// injection webhook then gives every pod of a namespace labelled
// draingate.dev/inject=enabled the agent. The returned cleanup, never nil,
// uninstalls the release and deletes the namespace; the caller defers it at
// once, error or not.
func (r *runner) startGate(ctx context.Context, ns string, sc Scenario) (*gateSetup, func(), error) {
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
	t := timingsFor(r.o.TimeScale)
	maxWait := t.maxWait(sc)
	var err error
	// The release is named after its namespace, which contains "draingate",
	// so the chart names every object (cluster-scoped ones too) after it.
	rel, err = chart.Install(ctx, r.env.Kubeconfig, ns, ns, gateValues(r.emuURL, t, maxWait), gateReadyBy, nil)
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
		Fallback:  t.Fallback,
		Timings:   t,
	}, cleanup, nil
}

// gateValues are the chart's values for one lab run: one replica, the
// images built offline, the emulator's endpoint and static keys (it ignores
// signatures), the run's scaled tails, and the agent's max-wait for the
// scenario.
func gateValues(elbv2URL string, t gateTimings, maxWait time.Duration) map[string]any {
	repo, tag, _ := strings.Cut(ServerImage, ":")
	agentRepo, agentTag, _ := strings.Cut(AgentImage, ":")
	env := func(name, value string) map[string]any { return map[string]any{"name": name, "value": value} }
	return map[string]any{
		"replicaCount": 1,
		"image":        map[string]any{"repository": repo, "tag": tag, "pullPolicy": "Never"},
		"aws":          map[string]any{"region": gateAWSRegion, "elbv2Endpoint": elbv2URL, "rate": gateAWSRate, "burst": gateAWSBurst},
		"extraEnv":     []any{env("AWS_ACCESS_KEY_ID", "lab"), env("AWS_SECRET_ACCESS_KEY", "lab"), env("AWS_EC2_METADATA_DISABLED", "true")},
		"pollInterval": t.Poll.String(),
		"tails":        map[string]any{"endpointSlice": t.EndpointSlice.String(), "alb": t.ALB.String(), "nlb": t.NLB.String()},
		"maxWait":      gateLongPoll.String(),
		"agent": map[string]any{
			"image":   map[string]any{"repository": agentRepo, "tag": agentTag},
			"maxWait": maxWait.String(), "fallback": t.Fallback.String(), "shutdownBudget": grace.String(),
		},
	}
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
