package elbv2sim

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsmiddleware "github.com/aws/aws-sdk-go-v2/aws/middleware"
	elbv2 "github.com/aws/aws-sdk-go-v2/service/elasticloadbalancingv2"
	"github.com/aws/aws-sdk-go-v2/service/elasticloadbalancingv2/types"

	"draingate.dev/draingate/proving/testutil"
)

// Target groups through the SDK: create, describe (all, by ARNs, by names,
// by load balancer), attributes, idempotent create, duplicates, not found.
func TestSDKTargetGroups(t *testing.T) {
	s, _ := start(t, Config{})
	c := s.Client(noBackoff)

	in := &elbv2.CreateTargetGroupInput{
		Name:                       aws.String("web"),
		Protocol:                   types.ProtocolEnumHttp,
		Port:                       aws.Int32(8080),
		TargetType:                 types.TargetTypeEnumIp,
		VpcId:                      aws.String("vpc-lab"),
		HealthCheckPath:            aws.String("/healthz"),
		HealthCheckIntervalSeconds: aws.Int32(10),
		HealthCheckTimeoutSeconds:  aws.Int32(3),
		HealthyThresholdCount:      aws.Int32(3),
		UnhealthyThresholdCount:    aws.Int32(4),
	}
	out, err := c.CreateTargetGroup(bg, in)
	if err != nil {
		t.Fatal(err)
	}
	if id, ok := awsmiddleware.GetRequestIDMetadata(out.ResultMetadata); !ok || id == "" {
		t.Errorf("SDK saw no request id (x-amzn-RequestId)")
	}
	if len(out.TargetGroups) != 1 {
		t.Fatalf("CreateTargetGroup returned %d groups", len(out.TargetGroups))
	}
	web := out.TargetGroups[0]
	webARN := aws.ToString(web.TargetGroupArn)
	if !strings.Contains(webARN, ":targetgroup/web/") || aws.ToString(web.TargetGroupName) != "web" ||
		web.Protocol != types.ProtocolEnumHttp || aws.ToInt32(web.Port) != 8080 || web.TargetType != types.TargetTypeEnumIp ||
		aws.ToString(web.HealthCheckPath) != "/healthz" || aws.ToInt32(web.HealthCheckIntervalSeconds) != 10 ||
		aws.ToInt32(web.HealthCheckTimeoutSeconds) != 3 || aws.ToInt32(web.HealthyThresholdCount) != 3 ||
		aws.ToInt32(web.UnhealthyThresholdCount) != 4 || !aws.ToBool(web.HealthCheckEnabled) ||
		web.Matcher == nil || aws.ToString(web.Matcher.HttpCode) != "200-299" {
		t.Errorf("created group = %+v", web)
	}
	if len(web.LoadBalancerArns) != 1 || !strings.Contains(web.LoadBalancerArns[0], ":loadbalancer/app/web/") {
		t.Errorf("LoadBalancerArns = %v, want one app/web ARN", web.LoadBalancerArns)
	}

	// Same name, same settings: AWS returns the existing group.
	again, err := c.CreateTargetGroup(bg, in)
	if err != nil || aws.ToString(again.TargetGroups[0].TargetGroupArn) != webARN {
		t.Errorf("idempotent create: %v, %v", again, err)
	}
	// Same name, other settings.
	in2 := *in
	in2.Port = aws.Int32(8081)
	var dup *types.DuplicateTargetGroupNameException
	if _, err := c.CreateTargetGroup(bg, &in2); !errors.As(err, &dup) {
		t.Errorf("duplicate name: err = %v, want DuplicateTargetGroupName", err)
	}

	nlbARN, err := s.CreateTargetGroup(TargetGroupSpec{Name: "nlb", LoadBalancerType: Network, Port: 9000,
		HealthCheckInterval: 50 * time.Millisecond, DeregistrationDelay: 1500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}

	names := func(tgs []types.TargetGroup) (n []string) {
		for _, g := range tgs {
			n = append(n, aws.ToString(g.TargetGroupName))
		}
		return n
	}
	all, err := c.DescribeTargetGroups(bg, &elbv2.DescribeTargetGroupsInput{})
	if err != nil || strings.Join(names(all.TargetGroups), ",") != "web,nlb" {
		t.Fatalf("describe all: %v %v", names(all.TargetGroups), err)
	}
	byARN, err := c.DescribeTargetGroups(bg, &elbv2.DescribeTargetGroupsInput{TargetGroupArns: []string{nlbARN, webARN}})
	if err != nil || strings.Join(names(byARN.TargetGroups), ",") != "nlb,web" {
		t.Fatalf("describe by ARNs: %v %v", names(byARN.TargetGroups), err)
	}
	nlb := byARN.TargetGroups[0]
	if nlb.Protocol != types.ProtocolEnumTcp || aws.ToInt32(nlb.HealthCheckIntervalSeconds) != 1 ||
		nlb.TargetType != types.TargetTypeEnumIp || !strings.Contains(nlb.LoadBalancerArns[0], ":loadbalancer/net/nlb/") {
		t.Errorf("nlb group = %+v (LB %v)", nlb, nlb.LoadBalancerArns)
	}
	byName, err := c.DescribeTargetGroups(bg, &elbv2.DescribeTargetGroupsInput{Names: []string{"nlb"}})
	if err != nil || strings.Join(names(byName.TargetGroups), ",") != "nlb" {
		t.Errorf("describe by name: %v %v", names(byName.TargetGroups), err)
	}
	byLB, err := c.DescribeTargetGroups(bg, &elbv2.DescribeTargetGroupsInput{LoadBalancerArn: aws.String(web.LoadBalancerArns[0])})
	if err != nil || strings.Join(names(byLB.TargetGroups), ",") != "web" {
		t.Errorf("describe by load balancer: %v %v", names(byLB.TargetGroups), err)
	}
	var nf *types.TargetGroupNotFoundException
	if _, err := c.DescribeTargetGroups(bg, &elbv2.DescribeTargetGroupsInput{Names: []string{"nope"}}); !errors.As(err, &nf) {
		t.Errorf("unknown name: err = %v, want TargetGroupNotFound", err)
	}
	if _, err := c.DescribeTargetGroups(bg, &elbv2.DescribeTargetGroupsInput{TargetGroupArns: []string{webARN + "x"}}); !errors.As(err, &nf) {
		t.Errorf("unknown ARN: err = %v, want TargetGroupNotFound", err)
	}

	attrs := func(arn string) map[string]string {
		t.Helper()
		out, err := c.DescribeTargetGroupAttributes(bg, &elbv2.DescribeTargetGroupAttributesInput{TargetGroupArn: aws.String(arn)})
		if err != nil {
			t.Fatal(err)
		}
		m := map[string]string{}
		for _, a := range out.Attributes {
			m[aws.ToString(a.Key)] = aws.ToString(a.Value)
		}
		return m
	}
	if v := attrs(webARN)["deregistration_delay.timeout_seconds"]; v != "300" {
		t.Errorf("web deregistration delay = %q, want 300 (default)", v)
	}
	if v := attrs(nlbARN)["deregistration_delay.timeout_seconds"]; v != "2" {
		t.Errorf("nlb deregistration delay = %q, want 2 (1.5s rounded up)", v)
	}
	if _, err := c.DescribeTargetGroupAttributes(bg, &elbv2.DescribeTargetGroupAttributesInput{TargetGroupArn: aws.String("arn:nope")}); !errors.As(err, &nf) {
		t.Errorf("attributes of unknown group: err = %v, want TargetGroupNotFound", err)
	}
}

// Register, describe (all, by Id, never registered, no port), deregister,
// drain and vanish, all through the SDK.
func TestSDKTargetHealth(t *testing.T) {
	s, _ := start(t, Config{})
	c := s.Client(noBackoff)
	a, b := newBackend(t), newBackend(t)
	ta, tb := a.target(), b.target()

	health := func(arn string, ts ...types.TargetDescription) []types.TargetHealthDescription {
		t.Helper()
		out, err := c.DescribeTargetHealth(bg, &elbv2.DescribeTargetHealthInput{TargetGroupArn: aws.String(arn), Targets: ts})
		if err != nil {
			t.Fatal(err)
		}
		return out.TargetHealthDescriptions
	}
	desc := func(tg Target) types.TargetDescription {
		return types.TargetDescription{Id: aws.String(tg.ID), Port: aws.Int32(tg.Port)}
	}
	type row struct {
		id     string
		port   int32
		state  types.TargetHealthStateEnum
		reason types.TargetHealthReasonEnum
	}
	rows := func(ds []types.TargetHealthDescription) (out []row) {
		for _, d := range ds {
			out = append(out, row{aws.ToString(d.Target.Id), aws.ToInt32(d.Target.Port), d.TargetHealth.State, d.TargetHealth.Reason})
		}
		return out
	}

	// A group whose first health check never comes: targets stay initial.
	slow, err := s.CreateTargetGroup(TargetGroupSpec{Name: "slow", Port: 80, HealthCheckInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.RegisterTargets(bg, &elbv2.RegisterTargetsInput{TargetGroupArn: aws.String(slow),
		Targets: []types.TargetDescription{desc(tb), desc(ta), {Id: aws.String("127.0.0.7")}}}); err != nil {
		t.Fatal(err)
	}
	got := rows(health(slow))
	want := []row{ // sorted by Id, then Port; the port-less target got the group's port
		{ta.ID, min(ta.Port, tb.Port), types.TargetHealthStateEnumInitial, types.TargetHealthReasonEnumRegistrationInProgress},
		{ta.ID, max(ta.Port, tb.Port), types.TargetHealthStateEnumInitial, types.TargetHealthReasonEnumRegistrationInProgress},
		{"127.0.0.7", 80, types.TargetHealthStateEnumInitial, types.TargetHealthReasonEnumRegistrationInProgress},
	}
	if len(got) != 3 || got[0] != want[0] || got[1] != want[1] || got[2] != want[2] {
		t.Errorf("initial listing = %+v, want %+v", got, want)
	}

	// The lab's group: fast checks, long drain so draining is observable.
	web, err := s.CreateTargetGroup(TargetGroupSpec{Name: "web", Port: 80,
		HealthCheckInterval: 50 * time.Millisecond, DeregistrationDelay: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.RegisterTargets(bg, &elbv2.RegisterTargetsInput{TargetGroupArn: aws.String(web),
		Targets: []types.TargetDescription{desc(ta), desc(tb)}}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(bg, waitLimit)
	defer cancel()
	testutil.Eventually(t, ctx, "both targets healthy through the SDK", func() (bool, error) {
		ds := health(web)
		return len(ds) == 2 && ds[0].TargetHealth.State == types.TargetHealthStateEnumHealthy &&
			ds[1].TargetHealth.State == types.TargetHealthStateEnumHealthy, nil
	})
	if a.hits.Load() == 0 || b.hits.Load() == 0 {
		t.Errorf("health checks did not reach the targets: %d, %d", a.hits.Load(), b.hits.Load())
	}

	// By Id, in the order asked, including one never registered and one
	// without a port (the group's port, also never registered).
	ds := health(web, desc(tb), types.TargetDescription{Id: aws.String("127.0.0.9"), Port: aws.Int32(8080)}, desc(ta),
		types.TargetDescription{Id: aws.String(ta.ID)})
	got = rows(ds)
	want = []row{
		{tb.ID, tb.Port, types.TargetHealthStateEnumHealthy, ""},
		{"127.0.0.9", 8080, types.TargetHealthStateEnumUnused, types.TargetHealthReasonEnumNotRegistered},
		{ta.ID, ta.Port, types.TargetHealthStateEnumHealthy, ""},
		{ta.ID, 80, types.TargetHealthStateEnumUnused, types.TargetHealthReasonEnumNotRegistered},
	}
	if len(got) != len(want) {
		t.Fatalf("by Id = %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("by Id row %d = %+v, want %+v", i, got[i], want[i])
		}
	}
	if p := aws.ToString(ds[0].HealthCheckPort); p != strconv.Itoa(int(tb.Port)) {
		t.Errorf("HealthCheckPort = %q, want %d", p, tb.Port)
	}

	// Deregister a: draining, health checks stop.
	if _, err := c.DeregisterTargets(bg, &elbv2.DeregisterTargetsInput{TargetGroupArn: aws.String(web),
		Targets: []types.TargetDescription{desc(ta)}}); err != nil {
		t.Fatal(err)
	}
	got = rows(health(web, desc(ta)))
	if len(got) != 1 || got[0].state != types.TargetHealthStateEnumDraining || got[0].reason != types.TargetHealthReasonEnumDeregistrationInProgress {
		t.Errorf("after deregistration = %+v, want draining/Target.DeregistrationInProgress", got)
	}
	// Deregistering an unknown target, or a draining one, is accepted.
	if _, err := c.DeregisterTargets(bg, &elbv2.DeregisterTargetsInput{TargetGroupArn: aws.String(web),
		Targets: []types.TargetDescription{desc(ta), {Id: aws.String("127.0.0.3"), Port: aws.Int32(1)}}}); err != nil {
		t.Errorf("deregistering unknown/draining targets: %v", err)
	}

	// A group with a short drain: the target vanishes from the full
	// listing, and by Id answers unused/Target.NotRegistered.
	quick, err := s.CreateTargetGroup(TargetGroupSpec{Name: "quick", Port: 80,
		HealthCheckInterval: 50 * time.Millisecond, DeregistrationDelay: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.RegisterTargets(bg, &elbv2.RegisterTargetsInput{TargetGroupArn: aws.String(quick),
		Targets: []types.TargetDescription{desc(ta)}}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.DeregisterTargets(bg, &elbv2.DeregisterTargetsInput{TargetGroupArn: aws.String(quick),
		Targets: []types.TargetDescription{desc(ta)}}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel = context.WithTimeout(bg, waitLimit)
	defer cancel()
	testutil.Eventually(t, ctx, "drained target to vanish", func() (bool, error) { return len(health(quick)) == 0, nil })
	got = rows(health(quick, desc(ta)))
	if len(got) != 1 || got[0].state != types.TargetHealthStateEnumUnused || got[0].reason != types.TargetHealthReasonEnumNotRegistered {
		t.Errorf("vanished target by Id = %+v, want unused/Target.NotRegistered", got)
	}

	// Errors the SDK maps to modeled types.
	var nf *types.TargetGroupNotFoundException
	if _, err := c.DescribeTargetHealth(bg, &elbv2.DescribeTargetHealthInput{TargetGroupArn: aws.String(web + "x")}); !errors.As(err, &nf) {
		t.Errorf("unknown group: err = %v, want TargetGroupNotFound", err)
	}
	var inv *types.InvalidTargetException
	if _, err := c.RegisterTargets(bg, &elbv2.RegisterTargetsInput{TargetGroupArn: aws.String(web),
		Targets: []types.TargetDescription{{Id: aws.String("i-0123456789abcdef0")}}}); !errors.As(err, &inv) {
		t.Errorf("non-IP id in an ip group: err = %v, want InvalidTarget", err)
	}
}
