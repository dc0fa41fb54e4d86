package targetgroup

import (
	"context"
	"flag"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func parsed(t *testing.T, args ...string) *Config {
	t.Helper()
	c := NewKind()
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	c.Flags(fs)
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	return c
}

// The node list's flags: a minute's refresh by default, never zero.
func TestNodesFlags(t *testing.T) {
	if c := parsed(t); c.nodesRefresh != time.Minute || c.ec2Endpoint != "" || c.Validate() != nil {
		t.Errorf("defaults: refresh %v, EC2 endpoint %q, %v", c.nodesRefresh, c.ec2Endpoint, c.Validate())
	}
	if err := parsed(t, "--lb-nodes-refresh=0s").Validate(); err == nil || !strings.Contains(err.Error(), "--lb-nodes-refresh must be positive") {
		t.Errorf("a zero refresh: %v", err)
	}
}

// EC2 goes where --ec2-endpoint says, else where --elbv2-endpoint says
// (the emulator serves both), else to AWS.
func TestEC2Endpoint(t *testing.T) {
	// Nothing from this machine's AWS setup.
	t.Setenv("AWS_CONFIG_FILE", "/nonexistent")
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent")
	t.Setenv("AWS_ENDPOINT_URL", "")
	t.Setenv("AWS_ENDPOINT_URL_EC2", "")
	t.Setenv("AWS_ENDPOINT_URL_ELASTIC_LOAD_BALANCING_V2", "")
	for _, c := range []struct {
		args     []string
		elb, ec2 string
	}{
		{nil, "", ""},
		{[]string{"--elbv2-endpoint=http://emulator:4000"}, "http://emulator:4000", "http://emulator:4000"},
		{[]string{"--elbv2-endpoint=https://vpce-1.elasticloadbalancing.example", "--ec2-endpoint=https://vpce-2.ec2.example"},
			"https://vpce-1.elasticloadbalancing.example", "https://vpce-2.ec2.example"},
		{[]string{"--ec2-endpoint=https://vpce-2.ec2.example"}, "", "https://vpce-2.ec2.example"},
	} {
		elb, ec2, err := parsed(t, append(c.args, "--aws-region=eu-west-1")...).clients(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if got, got2 := aws.ToString(elb.Options().BaseEndpoint), aws.ToString(ec2.Options().BaseEndpoint); got != c.elb || got2 != c.ec2 {
			t.Errorf("%q: ELBv2 at %q, EC2 at %q; want %q and %q", c.args, got, got2, c.elb, c.ec2)
		}
	}
}

// Without traffic evidence the poller gets no EC2 reader at all: a nil
// interface, which it checks for, not one holding a nil client, which it
// would call (the server panicked at the first node list so, and every
// webhook call failed open).
func TestNodeReader(t *testing.T) {
	c := ec2.New(ec2.Options{Region: "eu-west-1"})
	if r := nodeReader(false, c); r != nil {
		t.Errorf("evidence off: a reader %T, want none", r)
	}
	if r := nodeReader(true, nil); r != nil {
		t.Errorf("no client: a reader %T, want none", r)
	}
	if r := nodeReader(true, c); r == nil {
		t.Error("evidence on: no reader")
	}
}

// Every AWS call's series exists at 0 before the first call, so that an
// alert on increase() sees a replica's first throttled or denied call.
func TestCallSeriesStartAtZero(t *testing.T) {
	calls := newCalls()
	if n := testutil.CollectAndCount(calls); n != 20 {
		t.Errorf("%d series before any call, want 20 (5 actions × 4 results)", n)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(calls)
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			var action, result string
			for _, l := range m.GetLabel() {
				switch l.GetName() {
				case "action":
					action = l.GetValue()
				case "result":
					result = l.GetValue()
				}
			}
			seen[action+" "+result] = m.GetCounter().GetValue() == 0
		}
	}
	for _, k := range []string{"DescribeTargetHealth throttled", "DescribeTargetGroups denied", "DescribeNetworkInterfaces denied"} {
		if !seen[k] {
			t.Errorf("no draingate_elbv2_calls_total series at 0 for %s before any call: %v", k, seen)
		}
	}
}
