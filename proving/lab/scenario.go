package lab

import (
	"flag"
	"fmt"
	"math"
	"sort"
	"strings"
	"time"

	"draingate.dev/draingate/proving/sim/dataplane"
	"draingate.dev/draingate/proving/sim/elbv2sim"
)

// MaxLBNodes is how many load balancer nodes the lab can play: one source
// address each on the cluster's bridge (testenv.LBNodeIPs).
const MaxLBNodes = 8

// The workloads a scenario plays: how pods come to stop.
const (
	// Rolling is a Deployment's rolling update (maxSurge 1, maxUnavailable
	// 0), Options.Rollouts times.
	Rolling = "rolling"
	// BlueGreen is a blue/green switch as Argo Rollouts does it: a second
	// ReplicaSet (green) comes up outside the Service, the Service's
	// selector flips to it once it is ready, and the old pods (blue) are
	// deleted ScaleDownDelay later.
	BlueGreen = "bluegreen"
	// Restart makes one pod's liveness probe fail: the kubelet runs the
	// preStop hook and restarts the container; the pod is not deleted.
	Restart = "restart"
)

// The propagation distributions of the data plane's nodes.
const (
	// Uniform draws from [PropagationMin, PropagationMax].
	Uniform = "uniform"
	// LogNormal is heavy-tailed: PropagationMin plus a log-normal draw of
	// median PropagationMedian and 99th percentile PropagationP99.
	LogNormal = "lognormal"
)

// Scenario is a named set of knobs. Every knob is also a flag.
type Scenario struct {
	Name string
	// Workload is Rolling, BlueGreen or Restart.
	Workload string
	// ScaleDownDelay is, for BlueGreen, how long the old pods stay after
	// the selector flip (Argo Rollouts' scaleDownDelaySeconds).
	ScaleDownDelay time.Duration
	// LivenessPeriod is, for Restart, the app's liveness probe period
	// (whole seconds; it fails after 3 failed probes).
	LivenessPeriod time.Duration
	// Sidecar has a lab-only mutating webhook, called after draingate's,
	// add a proxy sidecar that receives the pod's traffic and stops
	// accepting on SIGTERM, as mesh proxies do (proving/lab/sidecar).
	Sidecar bool
	// LoadBalancer is "application" (ALB) or "network" (NLB).
	LoadBalancer string
	// GenericLB plays a load balancer draingate cannot query (GKE, Azure,
	// MetalLB): the app's Service is of type LoadBalancer, and draingate is
	// installed with targetGroups=false, what a user of such a platform
	// sets. The data plane still follows the emulator's target group, which
	// draingate then never reads.
	GenericLB bool
	// Ingress plays an in-cluster ingress with a real proxy instead of the
	// emulated load balancer: LBNodes HAProxy replicas fed from the app
	// Service's EndpointSlices (proving/lab/ingress.go), syncs at most one
	// per IngressSyncEvery, picked up at the next IngressPickup tick. No
	// target group: the pods' only route is their EndpointSlice.
	Ingress                         bool
	IngressSyncEvery, IngressPickup time.Duration
	// TargetType is the target group's: "ip" (pods are the targets, the
	// default) or "instance" (nodes are, at the Service's node port, and
	// kube-proxy forwards to pods).
	TargetType string
	// LocalPolicy plays a LoadBalancer Service with externalTrafficPolicy
	// Local behind instance targets, on two nodes (Env.AddNode): one pod
	// per node (required anti-affinity; maxSurge 0, maxUnavailable 1), so
	// that every pod that stops is the last of its node. The target group
	// checks each node at the Service's healthCheckNodePort, where
	// kube-proxy answers 503 once its node has no ready pod: the load
	// balancer drains a node by its health checks, never by a
	// deregistration. Implies TargetType instance.
	LocalPolicy bool
	// LBNodes is how many nodes the load balancer's data plane has: each
	// draws its own propagation delay per target change and connects to
	// targets from its own source address; clients spread over them as DNS
	// round robin would.
	LBNodes int
	// LBRouting is how each node picks a target: rr (round robin, an
	// ALB's default), lor (least outstanding requests, an ALB's other
	// algorithm; requests only, not an NLB's flows) or random.
	LBRouting string
	// LBScaleOut, when set, has one more data plane node join the load
	// balancer this long after each rollout starts (an ALB scaling out as
	// the load rises), taking its share of the clients from then on; the
	// load balancer's network interfaces list it only from then on, and it
	// leaves again as the next rollout starts.
	LBScaleOut time.Duration
	// ReconcileLag + a uniform random part in [0, ReconcileJitter) delays
	// each reconcile of the load balancer controller.
	ReconcileLag, ReconcileJitter time.Duration
	// Propagation is Uniform or LogNormal: the delay after which each data
	// plane node applies a target change.
	Propagation                    string
	PropagationMin, PropagationMax time.Duration
	// PropagationMedian and PropagationP99 shape LogNormal (on top of
	// PropagationMin).
	PropagationMedian, PropagationP99 time.Duration
	// DeregistrationDelay is the target group's deregistration_delay.
	DeregistrationDelay time.Duration
	// HealthCheckInterval and thresholds drive the emulator's checks.
	HealthCheckInterval time.Duration
	HealthyThreshold    int
	// AppLatency keeps requests in flight in the app, so some are at SIGTERM.
	AppLatency time.Duration
	// RegistrationRefill, when set, slows AWS: the registration bucket
	// refills at this rate (calls/s) from a capacity of RegistrationCapacity,
	// so Register/Deregister are throttled and retried with backoff.
	RegistrationRefill   float64
	RegistrationCapacity float64
}

// Scenarios are the named ones; alb is the default. Health checks run every
// 3 s (AWS allows 5 s at least): they only pace rollouts through the
// readiness gate, not the termination race, and a faster pace keeps the
// default demo short. Figures from docs/facts.md ("Load balancer tails", "AWS
// Load Balancer Controller", "Blue/green"): ALB data planes keep sending new
// requests up to ~20 s after deregistration, NLBs 180-300 s as AWS Support
// states it; a throttled or lagging controller deregisters 20-60 s late;
// Argo Rollouts scales blue down 30 s after the switch. A scenario exists to
// find where a strategy fails: alb-slow has a heavy tail past draingate's
// default ALB tail (20 s), lag-past-deadline deregisters after its default
// agent max-wait (90 s).
var Scenarios = func() map[string]Scenario {
	alb := Scenario{
		Name: "alb", Workload: Rolling, LoadBalancer: string(elbv2sim.Application), LBNodes: 3,
		ReconcileLag: 500 * time.Millisecond, ReconcileJitter: 1500 * time.Millisecond,
		Propagation: Uniform, PropagationMin: 0, PropagationMax: 20 * time.Second,
		DeregistrationDelay: 60 * time.Second,
		HealthCheckInterval: 3 * time.Second, HealthyThreshold: 2,
		AppLatency: 50 * time.Millisecond,
	}
	// The others say how they differ from alb.
	nlb := alb
	nlb.Name, nlb.LoadBalancer = "nlb", string(elbv2sim.Network)
	nlb.PropagationMin, nlb.PropagationMax = 180*time.Second, 300*time.Second
	nlb.DeregistrationDelay = 300 * time.Second
	albSlow := alb
	albSlow.Name = "alb-slow"
	albSlow.Propagation, albSlow.PropagationMedian, albSlow.PropagationP99 = LogNormal, 10*time.Second, 40*time.Second
	lagging := alb
	lagging.Name = "lag-past-deadline"
	lagging.ReconcileLag, lagging.ReconcileJitter = 100*time.Second, 20*time.Second
	slowAWS := alb
	slowAWS.Name = "slow-aws"
	slowAWS.ReconcileLag, slowAWS.ReconcileJitter = 20*time.Second, 40*time.Second
	slowAWS.RegistrationRefill, slowAWS.RegistrationCapacity = 0.5, 2
	blueGreen := nlb
	blueGreen.Name, blueGreen.Workload, blueGreen.ScaleDownDelay = "bluegreen", BlueGreen, 30*time.Second
	restart := alb
	restart.Name, restart.Workload, restart.LivenessPeriod = "restart", Restart, 10*time.Second
	sidecar := alb
	sidecar.Name, sidecar.Sidecar = "sidecar", true
	generic := alb
	generic.Name, generic.GenericLB = "generic-lb", true
	// ingress-nginx's figures: --sync-rate-limit 0.3/s, Lua workers
	// polling every second. The ALB's knobs do not apply.
	ing := alb
	ing.Name, ing.Ingress = "ingress", true
	ing.IngressSyncEvery, ing.IngressPickup = 3333*time.Millisecond, time.Second
	ing.ReconcileLag, ing.ReconcileJitter, ing.PropagationMax = 0, 0, 0
	// The AWS Load Balancer Controller's default target type for Ingress.
	instance := alb
	instance.Name, instance.TargetType = "alb-instance", elbv2sim.TargetTypeInstance
	// A LoadBalancer Service, which the AWS Load Balancer Controller
	// gives an NLB, with the Local policy: instance targets checked at
	// healthCheckNodePort every 10 s, unhealthy after 2 failures. AWS
	// documents no time for an NLB to stop new connections to an unhealthy
	// target; users measured 30–40 s: the data plane draws 10–40 s.
	local := nlb
	local.Name, local.LocalPolicy, local.TargetType = "local-policy", true, elbv2sim.TargetTypeInstance
	local.PropagationMin, local.PropagationMax = 10*time.Second, 40*time.Second
	local.HealthCheckInterval = 10 * time.Second
	out := map[string]Scenario{}
	for _, sc := range []Scenario{alb, nlb, albSlow, lagging, slowAWS, blueGreen, restart, sidecar, generic, ing, instance, local} {
		out[sc.Name] = sc
	}
	return out
}()

// ScenarioNames lists the scenarios, sorted.
func ScenarioNames() []string {
	var out []string
	for n := range Scenarios {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// Scaled returns s with every duration multiplied by f.
func (s Scenario) Scaled(f float64) Scenario {
	m := func(d time.Duration) time.Duration { return time.Duration(math.Round(float64(d) * f)) }
	s.ReconcileLag, s.ReconcileJitter = m(s.ReconcileLag), m(s.ReconcileJitter)
	s.PropagationMin, s.PropagationMax = m(s.PropagationMin), m(s.PropagationMax)
	s.PropagationMedian, s.PropagationP99 = m(s.PropagationMedian), m(s.PropagationP99)
	s.ScaleDownDelay, s.LivenessPeriod = m(s.ScaleDownDelay), m(s.LivenessPeriod)
	s.DeregistrationDelay, s.HealthCheckInterval, s.AppLatency = m(s.DeregistrationDelay), m(s.HealthCheckInterval), m(s.AppLatency)
	s.IngressSyncEvery, s.IngressPickup = m(s.IngressSyncEvery), m(s.IngressPickup)
	s.LBScaleOut = m(s.LBScaleOut)
	if f > 0 && s.RegistrationRefill > 0 {
		s.RegistrationRefill /= f
	}
	return s
}

// MaxRouteDelay is the longest a deregistered pod may stay in the data
// plane's rotation, throttling aside: lag plus the longest propagation; for
// the ingress, a sync interval and a pickup tick.
func (s Scenario) MaxRouteDelay() time.Duration {
	if s.Ingress {
		return s.IngressSyncEvery + s.IngressPickup
	}
	return s.ReconcileLag + s.ReconcileJitter + s.PropagationBound()
}

// PropagationBound is the longest propagation delay a node draws: the
// uniform maximum, or for LogNormal PropagationMin plus lognormalCap times
// PropagationP99, where the lab cuts the tail so that a run ends.
func (s Scenario) PropagationBound() time.Duration {
	if s.Propagation == LogNormal {
		return s.PropagationMin + lognormalCap*s.PropagationP99
	}
	return s.PropagationMax
}

// lognormalCap cuts log-normal draws at this many times their p99: with the
// p99 at four times the median, a draw beyond it has a chance of about 1 in
// 10^5.
const lognormalCap = 4

// propagation returns the delay distribution of data plane node i.
func (s Scenario) propagation(seed uint64) dataplane.Propagation {
	if s.Propagation != LogNormal {
		return dataplane.Uniform(s.PropagationMin, s.PropagationMax, seed)
	}
	draw := dataplane.LogNormal(s.PropagationMedian, s.PropagationP99, seed)
	bound := lognormalCap * s.PropagationP99
	return func(ev dataplane.Event) time.Duration { return s.PropagationMin + min(draw(ev), bound) }
}

// routing is the nodes' dataplane.Routing for LBRouting.
func (s Scenario) routing() dataplane.Routing {
	switch s.LBRouting {
	case "lor":
		return dataplane.LeastOutstanding
	case "random":
		return dataplane.Random
	}
	return dataplane.RoundRobin
}

// instance says the target group's targets are nodes.
func (s Scenario) instance() bool {
	return s.TargetType == elbv2sim.TargetTypeInstance || s.LocalPolicy
}

// targetType is the target group's type, ip unless instance.
func (s Scenario) targetType() string {
	if s.instance() {
		return elbv2sim.TargetTypeInstance
	}
	return elbv2sim.TargetTypeIP
}

func (s Scenario) lbType() elbv2sim.LoadBalancerType {
	if s.LoadBalancer == string(elbv2sim.Network) {
		return elbv2sim.Network
	}
	return elbv2sim.Application
}

// RegisterFlags binds every knob to a flag of fs, defaulting to s's values.
// Flags set on the command line override the chosen scenario's knobs: call
// Apply after parsing.
func (s *Scenario) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&s.Workload, "workload", s.Workload, "how pods stop: rolling (rolling updates), bluegreen (selector flip, old pods deleted after --scale-down-delay) or restart (a failing liveness probe)")
	fs.DurationVar(&s.ScaleDownDelay, "scale-down-delay", s.ScaleDownDelay, "bluegreen: how long the old pods stay after the selector flip")
	fs.DurationVar(&s.LivenessPeriod, "liveness-period", s.LivenessPeriod, "restart: the app's liveness probe period (Kubernetes' default 10s; 3 failures restart it)")
	fs.BoolVar(&s.Sidecar, "sidecar", s.Sidecar, "a lab webhook called after draingate's adds a proxy sidecar that stops accepting on SIGTERM")
	fs.StringVar(&s.LoadBalancer, "lb", s.LoadBalancer, "load balancer type: application or network")
	fs.BoolVar(&s.GenericLB, "generic-lb", s.GenericLB, "a load balancer draingate cannot query (GKE, Azure, MetalLB): the app's Service of type LoadBalancer, draingate installed with targetGroups=false")
	fs.BoolVar(&s.LocalPolicy, "local-policy", s.LocalPolicy, "a LoadBalancer Service with externalTrafficPolicy Local on two nodes, one pod each: instance targets health-checked at its healthCheckNodePort, each node drained by its checks")
	fs.BoolVar(&s.Ingress, "ingress", s.Ingress, "an in-cluster ingress instead of the load balancer: --lb-nodes HAProxy replicas on the host's network fed from the app Service's EndpointSlices (hack/install-haproxy.sh unpacks Debian's HAProxy)")
	fs.DurationVar(&s.IngressSyncEvery, "ingress-sync-every", s.IngressSyncEvery, "ingress: least time between two syncs of a replica (ingress-nginx's --sync-rate-limit 0.3/s: 3.333s)")
	fs.DurationVar(&s.IngressPickup, "ingress-pickup", s.IngressPickup, "ingress: a sync takes effect at the next tick of this period, each replica's phase drawn (ingress-nginx's Lua workers poll every 1s)")
	fs.StringVar(&s.TargetType, "target-type", s.targetType(), "the target group's target type: ip (pods) or instance (nodes at the Service's node port; kube-proxy forwards)")
	fs.DurationVar(&s.LBScaleOut, "lb-scale-out", 0, "a load balancer node joins this long after each rollout starts and takes its share (the load balancer's network interfaces list it only from then on); it leaves as the next rollout starts; 0: none")
	fs.StringVar(&s.LBRouting, "lb-routing", "rr", "how each load balancer node picks a target: rr (round robin), lor (least outstanding requests; ALB only) or random")
	fs.IntVar(&s.LBNodes, "lb-nodes", s.LBNodes, fmt.Sprintf("data plane nodes, each with its own propagation draws and source address (1-%d)", MaxLBNodes))
	fs.StringVar(&s.Propagation, "propagation", s.Propagation, "propagation distribution: uniform (--propagation-min..max) or lognormal (--propagation-min plus --propagation-median/-p99)")
	fs.DurationVar(&s.PropagationMedian, "propagation-median", s.PropagationMedian, "lognormal propagation: median")
	fs.DurationVar(&s.PropagationP99, "propagation-p99", s.PropagationP99, "lognormal propagation: 99th percentile")
	fs.DurationVar(&s.ReconcileLag, "reconcile-lag", s.ReconcileLag, "load balancer controller: fixed reconcile lag")
	fs.DurationVar(&s.ReconcileJitter, "reconcile-jitter", s.ReconcileJitter, "load balancer controller: random extra lag, uniform in [0, this)")
	fs.DurationVar(&s.PropagationMin, "propagation-min", s.PropagationMin, "data plane: least delay before it applies a target change")
	fs.DurationVar(&s.PropagationMax, "propagation-max", s.PropagationMax, "data plane: most delay before it applies a target change")
	fs.DurationVar(&s.DeregistrationDelay, "deregistration-delay", s.DeregistrationDelay, "target group deregistration_delay")
	fs.DurationVar(&s.HealthCheckInterval, "health-check-interval", s.HealthCheckInterval, "target group health check interval")
	fs.IntVar(&s.HealthyThreshold, "healthy-threshold", s.HealthyThreshold, "health checks in a row to become healthy")
	fs.DurationVar(&s.AppLatency, "app-latency", s.AppLatency, "demo app: latency of each request")
	fs.Float64Var(&s.RegistrationRefill, "aws-registration-rate", s.RegistrationRefill, "slow AWS: Register/Deregister calls/s the account allows (0 = AWS's 4/s)")
	fs.Float64Var(&s.RegistrationCapacity, "aws-registration-burst", s.RegistrationCapacity, "slow AWS: Register/Deregister burst (0 = AWS's 20)")
}

// Validate says what is wrong with a knob, if anything.
func (s Scenario) Validate() error {
	switch {
	case s.LoadBalancer != string(elbv2sim.Application) && s.LoadBalancer != string(elbv2sim.Network):
		return fmt.Errorf("load balancer %q: want application or network", s.LoadBalancer)
	case s.Workload != Rolling && s.Workload != BlueGreen && s.Workload != Restart:
		return fmt.Errorf("workload %q: want %s, %s or %s", s.Workload, Rolling, BlueGreen, Restart)
	case s.LBNodes < 1 || s.LBNodes > MaxLBNodes:
		return fmt.Errorf("lb-nodes %d: want 1 to %d", s.LBNodes, MaxLBNodes)
	case s.LBScaleOut < 0:
		return fmt.Errorf("lb-scale-out must not be negative")
	case s.LBScaleOut > 0 && s.LBNodes+1 > MaxLBNodes:
		return fmt.Errorf("lb-scale-out adds a node to --lb-nodes %d: at most %d nodes", s.LBNodes, MaxLBNodes)
	case s.LBScaleOut > 0 && (s.Ingress || s.GenericLB):
		return fmt.Errorf("lb-scale-out plays the emulated load balancer: not with ingress or generic-lb")
	case s.LBRouting != "" && s.routing() == "" && s.LBRouting != "rr":
		return fmt.Errorf("lb-routing %q: want rr, lor or random", s.LBRouting)
	case s.routing() == dataplane.LeastOutstanding && s.lbType() == elbv2sim.Network:
		return fmt.Errorf("lb-routing lor is an ALB's: an NLB routes flows (use rr or random)")
	case s.Propagation != Uniform && s.Propagation != LogNormal:
		return fmt.Errorf("propagation %q: want %s or %s", s.Propagation, Uniform, LogNormal)
	case s.Propagation == Uniform && s.PropagationMax < s.PropagationMin:
		return fmt.Errorf("propagation-max %s is below propagation-min %s", s.PropagationMax, s.PropagationMin)
	case s.Propagation == LogNormal && (s.PropagationMedian <= 0 || s.PropagationP99 < s.PropagationMedian):
		return fmt.Errorf("lognormal propagation needs a positive --propagation-median and --propagation-p99 at least as long (have %s and %s)", s.PropagationMedian, s.PropagationP99)
	case s.Workload == Restart && s.LivenessPeriod <= 0:
		return fmt.Errorf("restart needs a positive --liveness-period")
	case s.ScaleDownDelay < 0:
		return fmt.Errorf("scale-down-delay must not be negative")
	case s.ReconcileLag < 0 || s.ReconcileJitter < 0 || s.PropagationMin < 0:
		return fmt.Errorf("durations must not be negative")
	case s.TargetType != "" && s.TargetType != elbv2sim.TargetTypeIP && s.TargetType != elbv2sim.TargetTypeInstance:
		return fmt.Errorf("target-type %q: want ip or instance", s.TargetType)
	case s.LocalPolicy && s.Workload != Rolling:
		return fmt.Errorf("local-policy plays the %s workload only", Rolling)
	case s.instance() && (s.Ingress || s.GenericLB || s.Workload == BlueGreen):
		return fmt.Errorf("instance targets play the emulated load balancer with rolling updates or restarts: not with ingress, generic-lb or bluegreen")
	case s.Ingress && s.GenericLB:
		return fmt.Errorf("ingress and generic-lb are two different routes: choose one")
	case s.IngressSyncEvery < 0 || s.IngressPickup < 0:
		return fmt.Errorf("ingress durations must not be negative")
	case s.HealthCheckInterval <= 0 || s.HealthyThreshold < 1:
		return fmt.Errorf("health checks need a positive interval and threshold")
	}
	return nil
}

// Strategy is how pods are stopped: no hook, a native preStop sleep, or
// draingate's agent waiting for the gate server.
type Strategy struct {
	Name  string
	Sleep time.Duration // for "sleep:D"
	// Gate, for "draingate", installs draingate's chart at its defaults
	// (every duration scaled with Options.TimeScale) for the strategy: the
	// gate server (ServerImage) and, injected, the agent (AgentImage) as the
	// app's preStop hook.
	Gate bool
	// Set are chart values (Helm --set syntax) of this strategy alone, on
	// top of Options.DraingateSet: "draingate-tail" turns traffic evidence
	// off, to show what the tails alone do on the same scenario.
	Set []string
}

// ParseStrategies reads a comma-separated list: none, sleep:DURATION,
// draingate, draingate-tail.
func ParseStrategies(list string) ([]Strategy, error) {
	var out []Strategy
	seen := map[string]bool{}
	for _, item := range strings.Split(list, ",") {
		item = strings.TrimSpace(item)
		var st Strategy
		switch {
		case item == "none":
			st = Strategy{Name: "none"}
		case item == "draingate":
			st = Strategy{Name: "draingate", Gate: true}
		case item == "draingate-tail":
			st = Strategy{Name: "draingate-tail", Gate: true, Set: []string{"trafficEvidence.enabled=false"}}
		case strings.HasPrefix(item, "sleep:"):
			d, err := time.ParseDuration(strings.TrimPrefix(item, "sleep:"))
			if err != nil || d <= 0 {
				return nil, fmt.Errorf("strategy %q: want sleep:DURATION with a positive duration such as sleep:5s", item)
			}
			st = Strategy{Name: item, Sleep: d}
		case item == "":
			return nil, fmt.Errorf("empty strategy in %q", list)
		default:
			return nil, fmt.Errorf("unknown strategy %q: want none, sleep:DURATION, draingate or draingate-tail", item)
		}
		if seen[st.Name] {
			return nil, fmt.Errorf("strategy %q given twice", st.Name)
		}
		seen[st.Name] = true
		out = append(out, st)
	}
	return out, nil
}
