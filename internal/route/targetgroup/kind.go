package targetgroup

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/elasticloadbalancingv2"
	"github.com/prometheus/client_golang/prometheus"

	"draingate.dev/draingate/internal/aws/elbv2"
	"draingate.dev/draingate/internal/cli"
	"draingate.dev/draingate/internal/route"
)

// Config is the kind as the server configures it (a route.Kind): whether
// it is on, how to reach ELBv2, the budget of calls, and the tails.
type Config struct {
	on               bool
	region, endpoint string
	rate             float64
	burst            int
	pollInterval     time.Duration
	albTail, nlbTail time.Duration
}

// NewKind returns the kind at its defaults.
func NewKind() *Config {
	return &Config{on: true, rate: 2, burst: 5, pollInterval: 2 * time.Second, albTail: DefaultALBTail, nlbTail: DefaultNLBTail}
}

// Name implements route.Kind.
func (c *Config) Name() string { return Kind }

// Flags implements route.Kind.
func (c *Config) Flags(fs *flag.FlagSet) {
	d := NewKind()
	fs.BoolVar(&c.on, "target-groups", d.on, "wait for AWS target groups (TargetGroupBindings); false: EndpointSlices only, no AWS calls")
	fs.StringVar(&c.region, "aws-region", "", "AWS region of the target groups; empty: $AWS_REGION or the SDK's shared config")
	fs.StringVar(&c.endpoint, "elbv2-endpoint", "", "ELBv2 API endpoint URL override (a VPC endpoint, or an emulator)")
	fs.Float64Var(&c.rate, "aws-rate", d.rate, "ELBv2 calls per second this replica may make, retries included. "+
		"Every replica has its own budget, so N replicas may make N times this: set it to the total you grant draingate divided by the replicas. "+
		"Keep the total well under the account's 10/s Describe refill, which the AWS Load Balancer Controller needs too")
	fs.IntVar(&c.burst, "aws-burst", d.burst, "ELBv2 calls this replica may make at once (the budget's bucket size)")
	fs.DurationVar(&c.pollInterval, "poll-interval", d.pollInterval, "least time between two polls of one target group")
	fs.DurationVar(&c.albTail, "tail-alb", d.albTail, "how long after its target is draining an Application Load Balancer may still send new requests")
	fs.DurationVar(&c.nlbTail, "tail-nlb", d.nlbTail, "how long after its target is draining a Network Load Balancer (or one of unknown type) may still open connections")
}

// Validate implements route.Kind.
func (c *Config) Validate() error {
	errs := []error{
		cli.Positive("--poll-interval", c.pollInterval),
		cli.NotNegative("--tail-alb", c.albTail), cli.NotNegative("--tail-nlb", c.nlbTail),
	}
	if c.rate <= 0 || c.rate > 100 {
		errs = append(errs, fmt.Errorf("--aws-rate must be in (0, 100] calls/s, got %s", strconv.FormatFloat(c.rate, 'g', -1, 64)))
	}
	if c.burst < 1 {
		errs = append(errs, fmt.Errorf("--aws-burst must be at least 1, got %d", c.burst))
	}
	return errors.Join(errs...)
}

// Tails implements route.Kind.
func (c *Config) Tails() []route.Tail {
	return []route.Tail{{Name: "alb", Flag: "tail-alb", Value: c.albTail}, {Name: "nlb", Flag: "tail-nlb", Value: c.nlbTail}}
}

// Open implements route.Kind: with --target-groups it makes the ELBv2
// client (the SDK's default credential chain), the shared poller under
// the flags' budget and its call counter; without, it says that only
// EndpointSlices are waited for.
func (c *Config) Open(ctx context.Context, env route.Env) (route.Source, error) {
	if !c.on {
		env.Log.Warn("--target-groups=false: target-group routes are off; only EndpointSlices are waited for, and no AWS calls made")
		return nil, nil
	}
	client, err := c.client(ctx)
	if err != nil {
		return nil, err
	}
	calls := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "draingate_elbv2_calls_total",
		Help: "ELBv2 API calls made by this replica, by action and result (ok, throttled, error). Every call, retries included, comes out of --aws-rate; each throttled one slows this replica's budget down for a while.",
	}, []string{"action", "result"})
	if err := env.Registry.Register(calls); err != nil {
		return nil, fmt.Errorf("target-group metrics: %w", err)
	}
	poller := elbv2.New(client, elbv2.Config{Rate: c.rate, Burst: c.burst, Interval: c.pollInterval,
		Metrics: func(action, result string) { calls.WithLabelValues(action, result).Inc() }})
	env.Log.Info("target-group routes: waiting for TargetGroupBindings' target groups", "aws_rate", c.rate, "aws_burst", c.burst,
		"poll_interval", c.pollInterval.String())
	return New(Options{Poller: poller, Kube: env.Kube, ALBTail: c.albTail, NLBTail: c.nlbTail, Log: env.Log}), nil
}

// client makes the ELBv2 client from the SDK's shared configuration and
// the flags.
func (c *Config) client(ctx context.Context) (*elasticloadbalancingv2.Client, error) {
	var opts []func(*awsconfig.LoadOptions) error
	if c.region != "" {
		opts = append(opts, awsconfig.WithRegion(c.region))
	}
	cfg, err := awsconfig.LoadDefaultConfig(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("AWS config: %w", err)
	}
	if cfg.Region == "" {
		return nil, errors.New("no AWS region: give --aws-region (or set AWS_REGION), or --target-groups=false to wait for EndpointSlices only")
	}
	return elasticloadbalancingv2.NewFromConfig(cfg, func(o *elasticloadbalancingv2.Options) {
		if c.endpoint != "" {
			o.BaseEndpoint = aws.String(c.endpoint)
		}
	}), nil
}
