package targetgroup

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/elasticloadbalancingv2"
	"github.com/prometheus/client_golang/prometheus"

	"draingate.dev/draingate/internal/aws/elbv2"
	"draingate.dev/draingate/internal/cli"
	"draingate.dev/draingate/internal/route"
)

// Config is the kind as the server configures it (a route.Kind): whether
// it is on, how to reach ELBv2 and EC2, the budget of calls, and the
// tails.
type Config struct {
	on               bool
	region, endpoint string
	ec2Endpoint      string
	rate             float64
	burst            int
	pollInterval     time.Duration
	nodesRefresh     time.Duration
	albTail, nlbTail time.Duration
}

// NewKind returns the kind at its defaults.
func NewKind() *Config {
	return &Config{on: true, rate: 1, burst: 5, pollInterval: 2 * time.Second, nodesRefresh: time.Minute,
		albTail: DefaultALBTail, nlbTail: DefaultNLBTail}
}

// Name implements route.Kind.
func (c *Config) Name() string { return Kind }

// Flags implements route.Kind.
func (c *Config) Flags(fs *flag.FlagSet) {
	d := NewKind()
	fs.BoolVar(&c.on, "target-groups", d.on, "wait for AWS target groups (TargetGroupBindings); false: EndpointSlices only, no AWS calls")
	fs.StringVar(&c.region, "aws-region", "", "AWS region of the target groups; empty: $AWS_REGION or the SDK's shared config")
	fs.StringVar(&c.endpoint, "elbv2-endpoint", "", "ELBv2 API endpoint URL override (a VPC endpoint, or an emulator)")
	fs.StringVar(&c.ec2Endpoint, "ec2-endpoint", "", "EC2 API endpoint URL override (a VPC endpoint, or an emulator), for the load balancers' nodes; "+
		"empty: --elbv2-endpoint when that is set (the lab's emulator serves both), else AWS's")
	fs.Float64Var(&c.rate, "aws-rate", d.rate, "ELBv2 calls per second this replica may make, retries included. "+
		"Every replica has its own budget, so N replicas may make N times this: set it to the total you grant draingate divided by the replicas. "+
		"Keep the total well under the account's 10/s Describe refill, which the AWS Load Balancer Controller needs too")
	fs.IntVar(&c.burst, "aws-burst", d.burst, "ELBv2 calls this replica may make at once (the budget's bucket size)")
	fs.DurationVar(&c.pollInterval, "poll-interval", d.pollInterval, "least time between two polls of one target group")
	fs.DurationVar(&c.nodesRefresh, "lb-nodes-refresh", d.nodesRefresh, "how often a load balancer's nodes (its senders, for traffic evidence) are read again "+
		"while a group behind it is watched: one EC2 DescribeNetworkInterfaces per load balancer, from --aws-rate; a list 3 times this old no longer counts")
	fs.DurationVar(&c.albTail, "tail-alb", d.albTail, "how long after its target is draining an Application Load Balancer may still send new requests")
	fs.DurationVar(&c.nlbTail, "tail-nlb", d.nlbTail, "how long after its target is draining a Network Load Balancer (or one of unknown type) may still open connections")
}

// Validate implements route.Kind.
func (c *Config) Validate() error {
	errs := []error{
		cli.Positive("--poll-interval", c.pollInterval), cli.Positive("--lb-nodes-refresh", c.nodesRefresh),
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

// Open implements route.Kind: with --target-groups it makes the ELBv2 and
// EC2 clients (the SDK's default credential chain), the shared poller
// under the flags' budget, its call counter and the gauge of the load
// balancers whose nodes are known; without, it says that only
// EndpointSlices are waited for.
func (c *Config) Open(ctx context.Context, env route.Env) (route.Source, error) {
	if !c.on {
		env.Log.Warn("--target-groups=false: target-group routes are off; only EndpointSlices are waited for, and no AWS calls made")
		return nil, nil
	}
	client, ec2Client, err := c.clients(ctx)
	if err != nil {
		return nil, err
	}
	calls := newCalls()
	if err := env.Registry.Register(calls); err != nil {
		return nil, fmt.Errorf("target-group metrics: %w", err)
	}
	poller := elbv2.New(client, elbv2.Config{Rate: c.rate, Burst: c.burst, Interval: c.pollInterval,
		EC2: nodeReader(env.WeighTraffic && env.EarlyClose, ec2Client), NodesRefresh: c.nodesRefresh, Log: env.Log,
		Metrics: func(action, result string) { calls.WithLabelValues(action, result).Inc() }})
	if err := env.Registry.Register(sendersGauge{poller}); err != nil {
		return nil, fmt.Errorf("target-group metrics: %w", err)
	}
	env.Log.Info("target-group routes: waiting for TargetGroupBindings' target groups", "aws_rate", c.rate, "aws_burst", c.burst,
		"poll_interval", c.pollInterval.String(), "lb_nodes_refresh", c.nodesRefresh.String())
	if c.ec2Endpoint == "" && c.endpoint != "" && env.WeighTraffic {
		env.Log.Info("EC2 calls (the load balancers' nodes) go to --elbv2-endpoint, as no --ec2-endpoint is given", "endpoint", c.endpoint)
	}
	return New(Options{Poller: poller, Kube: env.Kube, ALBTail: c.albTail, NLBTail: c.nlbTail, Log: env.Log, Learned: env.Learned, EarlyClose: env.EarlyClose}), nil
}

// newCalls is draingate_elbv2_calls_total, the AWS calls by action and
// result. Every action's and result's series exists from the start, at 0,
// so that an alert on increase() counts a replica's first throttled or
// denied call too (a series born at 1 shows no increase).
func newCalls() *prometheus.CounterVec {
	calls := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "draingate_elbv2_calls_total",
		Help: "AWS API calls made by this replica, by action and result (ok, throttled, denied, error): the ELBv2 ones and EC2's DescribeNetworkInterfaces, " +
			"which lists the load balancers' nodes. Every call, retries included, comes out of --aws-rate; each throttled ELBv2 one slows this replica's budget down for a while.",
	}, []string{"action", "result"})
	for _, a := range []string{elbv2.DescribeTargetHealthAction, elbv2.DescribeTargetGroupsAction, elbv2.DescribeTargetGroupAttributesAction, elbv2.DescribeLoadBalancerAttributesAction, elbv2.DescribeNetworkInterfacesAction} {
		for _, r := range []string{"ok", "throttled", "denied", "error"} {
			calls.WithLabelValues(a, r)
		}
	}
	return calls
}

// Describe implements route.Describer: the metrics Open registers.
func (c *Config) Describe(ch chan<- *prometheus.Desc) {
	newCalls().Describe(ch)
	ch <- sendersDesc
}

// nodeReader is what reads the load balancers' nodes: the EC2 client, or
// none unless the evidence may close routes early (the senders' list
// serves the early close only: a source on a route's ports counts as a
// sender, listed or not; no node lists, no EC2 calls, the whole budget
// for target health).
// None is a nil interface, never an interface holding a nil client, which
// the poller would call.
func nodeReader(weigh bool, c *ec2.Client) elbv2.EC2API {
	if !weigh || c == nil {
		return nil
	}
	return c
}

// clients makes the ELBv2 and EC2 clients from the SDK's shared
// configuration and the flags. EC2 goes to --ec2-endpoint, else to
// --elbv2-endpoint when that is set (an emulator answering both), else to
// AWS.
func (c *Config) clients(ctx context.Context) (*elasticloadbalancingv2.Client, *ec2.Client, error) {
	var opts []func(*awsconfig.LoadOptions) error
	if c.region != "" {
		opts = append(opts, awsconfig.WithRegion(c.region))
	}
	cfg, err := awsconfig.LoadDefaultConfig(ctx, opts...)
	if err != nil {
		return nil, nil, fmt.Errorf("AWS config: %w", err)
	}
	if cfg.Region == "" {
		return nil, nil, errors.New("no AWS region: give --aws-region (or set AWS_REGION), or --target-groups=false to wait for EndpointSlices only")
	}
	elb := elasticloadbalancingv2.NewFromConfig(cfg, func(o *elasticloadbalancingv2.Options) {
		if c.endpoint != "" {
			o.BaseEndpoint = aws.String(c.endpoint)
		}
	})
	ec2Endpoint := cmp.Or(c.ec2Endpoint, c.endpoint)
	return elb, ec2.NewFromConfig(cfg, func(o *ec2.Options) {
		if ec2Endpoint != "" {
			o.BaseEndpoint = aws.String(ec2Endpoint)
		}
	}), nil
}

// sendersGauge is draingate_lb_senders_known: per load balancer in front
// of a watched group, 1 while the server holds a fresh list of its nodes,
// judged at each scrape.
type sendersGauge struct{ p *elbv2.Poller }

const sendersHelp = "1 while this replica holds a fresh list of the load balancer's nodes (EC2 DescribeNetworkInterfaces), which traffic evidence needs to close a route before its tail; " +
	"0 when it cannot read one (see draingate_elbv2_calls_total{action=\"DescribeNetworkInterfaces\"}). Only load balancers in front of a watched target group."

var sendersDesc = prometheus.NewDesc("draingate_lb_senders_known", sendersHelp, []string{"load_balancer"}, nil)

// Describe implements prometheus.Collector.
func (g sendersGauge) Describe(ch chan<- *prometheus.Desc) { ch <- sendersDesc }

// Collect implements prometheus.Collector.
func (g sendersGauge) Collect(ch chan<- prometheus.Metric) {
	for _, lb := range g.p.LoadBalancers() {
		v := 0.0
		if lb.Known {
			v = 1
		}
		ch <- prometheus.MustNewConstMetric(sendersDesc, prometheus.GaugeValue, v, lb.ARN)
	}
}
