package lab

import (
	"encoding/json"
	"fmt"
	"math"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"draingate.dev/draingate/proving/sim/lbc"
	"draingate.dev/draingate/proving/testenv"
)

// DemoImage is the demo app's image (cmd/draingate-demoapp), built offline.
const DemoImage = "draingate.local/demoapp:1"

const (
	appName  = "demo"
	appPort  = 8080
	tgbName  = "demo"
	grace    = 30 * time.Second // the app's own shutdown budget after SIGTERM
	restartA = "draingate.dev/restarted-at"
)

// sleepSeconds is the native sleep action's whole seconds, rounded up.
func sleepSeconds(d time.Duration) int64 { return int64(math.Ceil(d.Seconds())) }

// deployment is the lab's app under one strategy: maxSurge 1,
// maxUnavailable 0. labels select its pods; gated pods carry the load
// balancer controller's readiness gate (a pod outside every Service when it
// is created, as blue/green's new pods are, can never pass it: the
// controller's webhook would not give it one). Under the restart workload
// the app has a liveness probe on /livez, which the lab makes fail. Under
// the draingate strategy the pods are plain: draingate's webhook injects the
// agent because their namespace is labelled for it.
func deployment(name string, labels map[string]string, replicas int32, st Strategy, sc Scenario, gated bool) *appsv1.Deployment {
	c := corev1.Container{
		Name:            "app",
		Image:           DemoImage,
		ImagePullPolicy: corev1.PullNever,
		Args:            []string{"-latency=" + sc.AppLatency.String()},
		Ports:           []corev1.ContainerPort{{Name: "http", ContainerPort: appPort}},
		ReadinessProbe: &corev1.Probe{
			ProbeHandler:  corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/healthz", Port: intstr.FromString("http")}},
			PeriodSeconds: 1,
		},
	}
	if sc.Workload == Restart {
		c.LivenessProbe = &corev1.Probe{
			ProbeHandler:     corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/livez", Port: intstr.FromString("http")}},
			PeriodSeconds:    int32(max(1, sleepSeconds(sc.LivenessPeriod))),
			FailureThreshold: 3,
		}
	}
	graceSeconds := int64(grace.Seconds())
	if st.Sleep > 0 {
		c.Lifecycle = &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{Sleep: &corev1.SleepAction{Seconds: sleepSeconds(st.Sleep)}}}
		graceSeconds += sleepSeconds(st.Sleep)
	}
	var gates []corev1.PodReadinessGate
	if gated {
		gates = []corev1.PodReadinessGate{{ConditionType: lbc.ReadinessGatePrefix + tgbName}}
	}
	maxSurge, maxUnavailable := intstr.FromInt32(1), intstr.FromInt32(0)
	var spec corev1.PodSpec
	var minReady int32
	if sc.LocalPolicy {
		// One pod per node, on both nodes, each the last of its node when
		// it stops; the next one stops only once the load balancer has
		// its replacement's node back (healthy checks, then propagation),
		// as users of such Services set minReadySeconds for.
		maxSurge, maxUnavailable = intstr.FromInt32(0), intstr.FromInt32(1)
		spec.Tolerations = []corev1.Toleration{{Key: testenv.SecondNodeTaint, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}}
		spec.Affinity = &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{
			RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{
				LabelSelector: &metav1.LabelSelector{MatchLabels: labels}, TopologyKey: corev1.LabelHostname}},
		}}
		minReady = int32(localMinReady(sc).Seconds())
	}
	spec.TerminationGracePeriodSeconds = ptr.To(graceSeconds)
	spec.ReadinessGates = gates
	spec.Containers = []corev1.Container{c}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: appsv1.DeploymentSpec{
			Replicas:        ptr.To(replicas),
			MinReadySeconds: minReady,
			Selector:        &metav1.LabelSelector{MatchLabels: labels},
			Strategy: appsv1.DeploymentStrategy{
				Type:          appsv1.RollingUpdateDeploymentStrategyType,
				RollingUpdate: &appsv1.RollingUpdateDeployment{MaxSurge: &maxSurge, MaxUnavailable: &maxUnavailable},
			},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       spec,
			},
		},
	}
}

// localMinReady is the local-policy Deployment's minReadySeconds: a new
// pod's node turns healthy again after the healthy threshold's checks, and
// every load balancer node learns it within the propagation bound.
func localMinReady(sc Scenario) time.Duration {
	d := time.Duration(sc.HealthyThreshold)*sc.HealthCheckInterval + sc.PropagationBound()
	return time.Duration(math.Ceil(d.Seconds())) * time.Second
}

// service selects the app's pods by selector, of the type sc needs.
func service(selector map[string]string, sc Scenario) *corev1.Service {
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: appName},
		Spec: corev1.ServiceSpec{
			Selector: selector,
			Ports:    []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromString("http")}},
		},
	}
	switch {
	case sc.LocalPolicy:
		// kube-proxy serves it per node, and answers its
		// healthCheckNodePort for the load balancer's checks.
		svc.Spec.Type = corev1.ServiceTypeLoadBalancer
		svc.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
	case sc.GenericLB:
		// No cloud controller gives it an address; its type is what
		// draingate's external routes look for.
		svc.Spec.Type = corev1.ServiceTypeLoadBalancer
	case sc.instance():
		// Instance targets are nodes: the load balancer sends to the
		// node port (Cluster policy, kube-proxy's default, forwards to
		// any ready pod).
		svc.Spec.Type = corev1.ServiceTypeNodePort
	}
	return svc
}

// selectorPatch points the Service at other pods, as a blue/green switch does.
func selectorPatch(selector map[string]string) []byte {
	b, _ := json.Marshal(map[string]any{"spec": map[string]any{"selector": selector}})
	return b
}

// restartPatch is what `kubectl rollout restart` sends.
func restartPatch(at time.Time) []byte {
	return fmt.Appendf(nil, `{"spec":{"template":{"metadata":{"annotations":{%q:%q}}}}}`, restartA, at.UTC().Format(time.RFC3339Nano))
}
