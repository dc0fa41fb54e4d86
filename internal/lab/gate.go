package lab

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
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
	gateName      = "draingate" // the server's Deployment, Service, ServiceAccount
	gatePort      = 8080        // wait API, /healthz, /readyz
	gateMetrics   = 9090
	agentVolume   = "draingate"
	agentDir      = "/draingate"
	gateReadyBy   = 2 * time.Minute
	gateLogLines  = 30
	gateLongPoll  = 30 * time.Second // the server's cap on one long-poll: not a race timing, never scaled
	gateAWSRate   = "2"
	gateAWSBurst  = "5"
	gateAWSRegion = "us-east-1"
)

// gateTimings are the gate server's and the agent's durations for one run.
type gateTimings struct {
	Poll                    time.Duration // DescribeTargetHealth interval per target group
	EndpointSlice, ALB, NLB time.Duration // the propagation tails
	Fallback                time.Duration // the agent's wait when no gate server answers
}

// timingsFor scales the gate's defaults (FACTS.md: ALB up to ~20 s after
// draining, NLB minutes; the gate's own defaults, internal/gate.DefaultTails)
// by the run's time scale, as the scenario's durations are. The poll
// interval keeps a floor so a small scale does not hammer the emulator.
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
	if sc.LoadBalancer == "network" {
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

// serverArgs are the gate server's command line (each flag also has a
// DRAINGATE_* variable; the command line makes a run's settings plain in
// kubectl get -o yaml).
func serverArgs(elbv2URL string, t gateTimings) []string {
	return []string{
		"serve",
		"--listen=:" + fmt.Sprint(gatePort),
		"--metrics-listen=:" + fmt.Sprint(gateMetrics),
		"--aws-region=" + gateAWSRegion,
		"--elbv2-endpoint=" + elbv2URL,
		"--aws-rate=" + gateAWSRate,
		"--aws-burst=" + gateAWSBurst,
		"--poll-interval=" + t.Poll.String(),
		"--tail-endpointslice=" + t.EndpointSlice.String(),
		"--tail-alb=" + t.ALB.String(),
		"--tail-nlb=" + t.NLB.String(),
		"--max-wait=" + gateLongPoll.String(),
	}
}

// gateRBAC is what the gate server reads and writes cluster-wide.
func gateRBAC(name, ns string) (*rbacv1.ClusterRole, *rbacv1.ClusterRoleBinding) {
	read := []string{"get", "list", "watch"}
	role := &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"pods", "services"}, Verbs: read},
			{APIGroups: []string{"discovery.k8s.io"}, Resources: []string{"endpointslices"}, Verbs: read},
			{APIGroups: []string{"elbv2.k8s.aws"}, Resources: []string{"targetgroupbindings"}, Verbs: read},
			{APIGroups: []string{"apiextensions.k8s.io"}, Resources: []string{"customresourcedefinitions"}, Verbs: read},
			{APIGroups: []string{"", "events.k8s.io"}, Resources: []string{"events"}, Verbs: []string{"create", "patch"}},
		},
	}
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: gateName, Namespace: ns}},
	}
	return role, binding
}

// gateDeployment is one gate server, reaching the ELBv2 emulator at elbv2URL.
func gateDeployment(elbv2URL string, t gateTimings) *appsv1.Deployment {
	labels := map[string]string{"app": gateName}
	probe := func(path string) *corev1.Probe {
		return &corev1.Probe{
			ProbeHandler:  corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: path, Port: intstr.FromString("http")}},
			PeriodSeconds: 1,
		}
	}
	liveness := probe("/healthz")
	liveness.PeriodSeconds, liveness.FailureThreshold = 5, 3
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: gateName},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(int32(1)),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					ServiceAccountName: gateName,
					Containers: []corev1.Container{{
						Name:            gateName,
						Image:           ServerImage,
						ImagePullPolicy: corev1.PullNever,
						Args:            serverArgs(elbv2URL, t),
						// The emulator ignores signatures; static keys keep
						// the SDK off the instance metadata service.
						Env: []corev1.EnvVar{
							{Name: "AWS_ACCESS_KEY_ID", Value: "lab"},
							{Name: "AWS_SECRET_ACCESS_KEY", Value: "lab"},
							{Name: "AWS_EC2_METADATA_DISABLED", Value: "true"},
						},
						Ports: []corev1.ContainerPort{
							{Name: "http", ContainerPort: gatePort},
							{Name: "metrics", ContainerPort: gateMetrics},
						},
						ReadinessProbe: probe("/readyz"),
						LivenessProbe:  liveness,
					}},
				},
			},
		},
	}
}

func gateService() *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: gateName},
		Spec: corev1.ServiceSpec{
			Selector: map[string]string{"app": gateName},
			Ports:    []corev1.ServicePort{{Name: "http", Port: gatePort, TargetPort: intstr.FromString("http")}},
		},
	}
}

// startGate runs a gate server in its own namespace and waits until it is
// ready (its caches synced). Every object it creates, cluster-scoped ones
// included, is deleted by the returned cleanup, never nil, which the caller
// defers at once, error or not.
func (r *runner) startGate(ctx context.Context, ns string, sc Scenario) (*gateSetup, func(), error) {
	cl := r.env.Client
	var undo []func()
	cleanup := func() {
		for i := len(undo) - 1; i >= 0; i-- {
			undo[i]()
		}
	}
	bg := context.Background() // cleanup must run after ctx is cancelled (Ctrl-C)
	if _, err := cl.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		return nil, cleanup, fmt.Errorf("gate server namespace: %w", err)
	}
	undo = append(undo, func() { cl.CoreV1().Namespaces().Delete(bg, ns, metav1.DeleteOptions{}) })
	role, binding := gateRBAC(ns, ns)
	if _, err := cl.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{}); err != nil {
		return nil, cleanup, fmt.Errorf("gate server ClusterRole: %w", err)
	}
	undo = append(undo, func() { cl.RbacV1().ClusterRoles().Delete(bg, role.Name, metav1.DeleteOptions{}) })
	if _, err := cl.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		return nil, cleanup, fmt.Errorf("gate server ClusterRoleBinding: %w", err)
	}
	undo = append(undo, func() { cl.RbacV1().ClusterRoleBindings().Delete(bg, binding.Name, metav1.DeleteOptions{}) })
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: gateName}}
	if _, err := cl.CoreV1().ServiceAccounts(ns).Create(ctx, sa, metav1.CreateOptions{}); err != nil {
		return nil, cleanup, fmt.Errorf("gate server ServiceAccount: %w", err)
	}
	t := timingsFor(r.o.TimeScale)
	if _, err := cl.AppsV1().Deployments(ns).Create(ctx, gateDeployment(r.emuURL, t), metav1.CreateOptions{}); err != nil {
		return nil, cleanup, fmt.Errorf("gate server Deployment: %w", err)
	}
	if _, err := cl.CoreV1().Services(ns).Create(ctx, gateService(), metav1.CreateOptions{}); err != nil {
		return nil, cleanup, fmt.Errorf("gate server Service: %w", err)
	}
	if err := waitFor(ctx, gateReadyBy, func() bool { return gateReady(ctx, cl, ns) }); err != nil {
		if !errors.Is(err, errTimeout) {
			return nil, cleanup, err // cancelled: no time for a diagnosis
		}
		return nil, cleanup, fmt.Errorf("gate server in namespace %s not ready (caches synced, /readyz): %w%s", ns, err, gateDiagnosis(cl, ns))
	}
	return &gateSetup{
		Namespace: ns,
		Server:    fmt.Sprintf("http://%s.%s.svc:%d", gateName, ns, gatePort),
		MaxWait:   t.maxWait(sc),
		Fallback:  t.Fallback,
		Timings:   t,
	}, cleanup, nil
}

func gateReady(ctx context.Context, cl kubernetes.Interface, ns string) bool {
	pods, err := cl.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=" + gateName})
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
	pods, err := cl.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=" + gateName})
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
	rc, err := cl.CoreV1().Pods(ns).GetLogs(pod, &corev1.PodLogOptions{Container: gateName, TailLines: ptr.To(int64(gateLogLines)), Previous: previous}).Stream(ctx)
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

// withAgent makes the pod spec wait for the gate before SIGTERM: an init
// container copies the agent into an emptyDir, the app container runs it
// as its preStop hook with its pod's identity from the downward API.
func withAgent(spec *corev1.PodSpec, g *gateSetup) {
	mount := corev1.VolumeMount{Name: agentVolume, MountPath: agentDir}
	spec.Volumes = append(spec.Volumes, corev1.Volume{Name: agentVolume, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}})
	spec.InitContainers = append(spec.InitContainers, corev1.Container{
		Name:            "draingate-agent",
		Image:           AgentImage,
		ImagePullPolicy: corev1.PullNever,
		Command:         []string{"/bin/draingate-prestop", "install", agentDir},
		VolumeMounts:    []corev1.VolumeMount{mount},
	})
	field := func(name, path string) corev1.EnvVar {
		return corev1.EnvVar{Name: name, ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: path}}}
	}
	for i := range spec.Containers {
		c := &spec.Containers[i]
		if c.Name != "app" {
			continue
		}
		c.VolumeMounts = append(c.VolumeMounts, mount)
		c.Env = append(c.Env,
			field("DRAINGATE_POD_NAME", "metadata.name"),
			field("DRAINGATE_POD_NAMESPACE", "metadata.namespace"),
			field("DRAINGATE_POD_UID", "metadata.uid"),
			corev1.EnvVar{Name: "DRAINGATE_SERVER", Value: g.Server},
		)
		c.Lifecycle = &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{Exec: &corev1.ExecAction{Command: []string{
			agentDir + "/draingate-prestop", "wait",
			"--max-wait", g.MaxWait.String(),
			"--fallback", g.Fallback.String(),
			"--log", "/proc/1/fd/1",
		}}}}
	}
	spec.TerminationGracePeriodSeconds = ptr.To(int64(grace.Seconds()) + sleepSeconds(g.MaxWait))
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
