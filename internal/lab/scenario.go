package lab

import (
	"flag"
	"fmt"
	"math"
	"sort"
	"strings"
	"time"

	"draingate.dev/draingate/internal/sim/elbv2sim"
)

// Scenario is a named set of knobs. Every knob is also a flag.
type Scenario struct {
	Name string
	// LoadBalancer is "application" (ALB) or "network" (NLB).
	LoadBalancer string
	// ReconcileLag + a uniform random part in [0, ReconcileJitter) delays
	// each reconcile of the load balancer controller.
	ReconcileLag, ReconcileJitter time.Duration
	// PropagationMin..Max bounds the uniform delay after which the data
	// plane applies each target change.
	PropagationMin, PropagationMax time.Duration
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
// Load Balancer Controller"): ALB data planes keep sending new requests up to
// ~20 s after deregistration, NLBs 2-5 minutes; a throttled or lagging
// controller deregisters 20-60 s late. A scenario exists to find where a
// strategy fails: alb-slow propagates past draingate's default ALB tail
// (20 s), lag-past-deadline deregisters after its default agent max-wait
// (90 s).
var Scenarios = func() map[string]Scenario {
	alb := Scenario{
		Name: "alb", LoadBalancer: string(elbv2sim.Application),
		ReconcileLag: 500 * time.Millisecond, ReconcileJitter: 1500 * time.Millisecond,
		PropagationMin: 0, PropagationMax: 20 * time.Second,
		DeregistrationDelay: 60 * time.Second,
		HealthCheckInterval: 3 * time.Second, HealthyThreshold: 2,
		AppLatency: 50 * time.Millisecond,
	}
	// The others say how they differ from alb.
	nlb := alb
	nlb.Name, nlb.LoadBalancer = "nlb", string(elbv2sim.Network)
	nlb.PropagationMin, nlb.PropagationMax = 120*time.Second, 300*time.Second
	nlb.DeregistrationDelay = 300 * time.Second
	albSlow := alb
	albSlow.Name = "alb-slow"
	albSlow.PropagationMin, albSlow.PropagationMax = 10*time.Second, 40*time.Second
	lagging := alb
	lagging.Name = "lag-past-deadline"
	lagging.ReconcileLag, lagging.ReconcileJitter = 100*time.Second, 20*time.Second
	slowAWS := alb
	slowAWS.Name = "slow-aws"
	slowAWS.ReconcileLag, slowAWS.ReconcileJitter = 20*time.Second, 40*time.Second
	slowAWS.RegistrationRefill, slowAWS.RegistrationCapacity = 0.5, 2
	out := map[string]Scenario{}
	for _, sc := range []Scenario{alb, nlb, albSlow, lagging, slowAWS} {
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
	s.DeregistrationDelay, s.HealthCheckInterval, s.AppLatency = m(s.DeregistrationDelay), m(s.HealthCheckInterval), m(s.AppLatency)
	if f > 0 && s.RegistrationRefill > 0 {
		s.RegistrationRefill /= f
	}
	return s
}

// MaxRouteDelay is the longest a deregistered pod may stay in the data
// plane's rotation, throttling aside: lag plus propagation.
func (s Scenario) MaxRouteDelay() time.Duration {
	return s.ReconcileLag + s.ReconcileJitter + s.PropagationMax
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
	fs.StringVar(&s.LoadBalancer, "lb", s.LoadBalancer, "load balancer type: application or network")
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
	case s.PropagationMax < s.PropagationMin:
		return fmt.Errorf("propagation-max %s is below propagation-min %s", s.PropagationMax, s.PropagationMin)
	case s.ReconcileLag < 0 || s.ReconcileJitter < 0 || s.PropagationMin < 0:
		return fmt.Errorf("durations must not be negative")
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
}

// ParseStrategies reads a comma-separated list: none, sleep:DURATION,
// draingate.
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
		case strings.HasPrefix(item, "sleep:"):
			d, err := time.ParseDuration(strings.TrimPrefix(item, "sleep:"))
			if err != nil || d <= 0 {
				return nil, fmt.Errorf("strategy %q: want sleep:DURATION with a positive duration such as sleep:5s", item)
			}
			st = Strategy{Name: item, Sleep: d}
		case item == "":
			return nil, fmt.Errorf("empty strategy in %q", list)
		default:
			return nil, fmt.Errorf("unknown strategy %q: want none, sleep:DURATION or draingate", item)
		}
		if seen[st.Name] {
			return nil, fmt.Errorf("strategy %q given twice", st.Name)
		}
		seen[st.Name] = true
		out = append(out, st)
	}
	return out, nil
}
