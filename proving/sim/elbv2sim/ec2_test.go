package elbv2sim

import (
	"errors"
	"io"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsmiddleware "github.com/aws/aws-sdk-go-v2/aws/middleware"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"github.com/aws/smithy-go"
)

// nodesOf lists, through the SDK, the addresses of the interfaces whose
// description is desc, page by page.
func nodesOf(t *testing.T, c *ec2.Client, desc string, pageSize int32) (addrs []string, pages int) {
	t.Helper()
	in := &ec2.DescribeNetworkInterfacesInput{
		Filters: []ec2types.Filter{
			{Name: aws.String("description"), Values: []string{desc}},
			{Name: aws.String("vpc-id"), Values: []string{fakeVPC}},
		},
		MaxResults: aws.Int32(pageSize),
	}
	for {
		out, err := c.DescribeNetworkInterfaces(bg, in)
		if err != nil {
			t.Fatal(err)
		}
		pages++
		if id, ok := awsmiddleware.GetRequestIDMetadata(out.ResultMetadata); !ok || id == "" {
			t.Errorf("SDK saw no request id")
		}
		for _, ni := range out.NetworkInterfaces {
			if aws.ToString(ni.Description) != desc || !strings.HasPrefix(aws.ToString(ni.NetworkInterfaceId), "eni-") || aws.ToString(ni.VpcId) != fakeVPC {
				t.Errorf("interface %+v: want description %q, an eni- id and the VPC", ni, desc)
			}
			for _, p := range ni.PrivateIpAddresses {
				if !aws.ToBool(p.Primary) || aws.ToString(p.PrivateIpAddress) != aws.ToString(ni.PrivateIpAddress) {
					t.Errorf("private address %+v of %s: want the primary one", p, aws.ToString(ni.PrivateIpAddress))
				}
				addrs = append(addrs, aws.ToString(p.PrivateIpAddress))
			}
			for _, a := range ni.Ipv6Addresses {
				addrs = append(addrs, aws.ToString(a.Ipv6Address))
			}
		}
		if out.NextToken == nil {
			return addrs, pages
		}
		in.NextToken = out.NextToken
	}
}

// A load balancer's nodes through the real SDK ec2 client: listed by the
// interfaces' description as AWS writes it ("ELB app/NAME/ID"), IPv4 as
// private addresses and IPv6 as IPv6 addresses, paged, other load
// balancers' left out, changed by SetLoadBalancerNodes, and every call
// counted.
func TestSDKDescribeNetworkInterfaces(t *testing.T) {
	s, _ := start(t, Config{})
	c := s.EC2Client()
	alb, err := s.CreateTargetGroup(TargetGroupSpec{Name: "web", Port: 80})
	if err != nil {
		t.Fatal(err)
	}
	nlb, err := s.CreateTargetGroup(TargetGroupSpec{Name: "db", LoadBalancerType: Network, Port: 5432})
	if err != nil {
		t.Fatal(err)
	}
	albLB, _ := s.LoadBalancerARN(alb)
	nlbLB, _ := s.LoadBalancerARN(nlb)
	albDesc := "ELB " + albLB[strings.Index(albLB, "app/"):]
	if !strings.HasPrefix(albDesc, "ELB app/web/") || !strings.Contains(nlbLB, ":loadbalancer/net/db/") {
		t.Fatalf("load balancers %s and %s", albLB, nlbLB)
	}
	want := []string{"10.0.1.10", "10.0.2.10", "10.0.3.10", "10.0.4.10", "10.0.5.10", "10.0.6.10", "2001:db8::a"}
	var addrs []netip.Addr
	for _, a := range want {
		addrs = append(addrs, netip.MustParseAddr(a))
	}
	if err := s.SetLoadBalancerNodes(albLB, addrs); err != nil {
		t.Fatal(err)
	}
	if err := s.SetLoadBalancerNodes(nlbLB, []netip.Addr{netip.MustParseAddr("10.9.0.1")}); err != nil {
		t.Fatal(err)
	}
	got, pages := nodesOf(t, c, albDesc, 5)
	if !slices.Equal(got, want) || pages != 2 {
		t.Errorf("ALB nodes %v in %d pages, want %v in 2 pages of 5", got, pages, want)
	}
	if got, _ := nodesOf(t, c, "ELB "+nlbLB[strings.Index(nlbLB, "net/"):], 1000); !slices.Equal(got, []string{"10.9.0.1"}) {
		t.Errorf("NLB nodes %v", got)
	}
	if got, _ := nodesOf(t, c, "ELB app/other/0123", 1000); len(got) != 0 {
		t.Errorf("an unknown load balancer has nodes %v", got)
	}
	// A new node.
	if err := s.SetLoadBalancerNodes(albLB, append(addrs, netip.MustParseAddr("10.0.7.10"))); err != nil {
		t.Fatal(err)
	}
	if got, _ := nodesOf(t, c, albDesc, 1000); !slices.Equal(got, append(want, "10.0.7.10")) {
		t.Errorf("after a new node: %v", got)
	}
	if err := s.SetLoadBalancerNodes("arn:aws:elasticloadbalancing:us-east-1:1:loadbalancer/app/nope/1", addrs); err == nil {
		t.Errorf("nodes set for a load balancer no group names")
	}
	if n := s.Calls()[DescribeNetworkInterfacesAction]["OK"]; n != 5 {
		t.Errorf("%d DescribeNetworkInterfaces counted OK, want 5: %v", n, s.Calls())
	}
	if n := s.CallsBy()["AKIDELBV2SIM"][DescribeNetworkInterfacesAction]; n != 5 {
		t.Errorf("%d calls counted for the client's key, want 5", n)
	}
}

// The refusals the gate must tell apart, through the SDK: a role without
// the permission (UnauthorizedOperation, HTTP 403, no retry helps) and
// EC2's own rate limit (RequestLimitExceeded, which the SDK's retryer
// knows as throttling), neither touching ELB's buckets; a filter the
// emulator does not know is refused rather than ignored.
func TestSDKDescribeNetworkInterfacesErrors(t *testing.T) {
	s, base := start(t, Config{EC2: BucketConfig{Capacity: 2, RefillPerSecond: 0.001}})
	c := s.EC2Client(func(o *ec2.Options) { o.RetryMaxAttempts = 1 })
	call := func(filter string) error {
		_, err := c.DescribeNetworkInterfaces(bg, &ec2.DescribeNetworkInterfacesInput{
			Filters: []ec2types.Filter{{Name: aws.String(filter), Values: []string{"ELB app/web/1"}}}})
		return err
	}
	code := func(err error) string {
		var ae smithy.APIError
		if !errors.As(err, &ae) {
			return ""
		}
		return ae.ErrorCode()
	}
	s.DenyEC2(true)
	err := call("description")
	var re interface{ HTTPStatusCode() int }
	if code(err) != ErrUnauthorizedOperation || !errors.As(err, &re) || re.HTTPStatusCode() != http.StatusForbidden ||
		!strings.Contains(err.Error(), "not authorized") {
		t.Errorf("denied: %v, want UnauthorizedOperation with HTTP 403", err)
	}
	s.DenyEC2(false)
	if err := call("requester-id"); code(err) != "InvalidParameterValue" {
		t.Errorf("unknown filter: %v, want InvalidParameterValue", err)
	}
	if err := call("description"); code(err) != ErrRequestLimitExceeded {
		t.Errorf("third call on a bucket of 2: %v, want RequestLimitExceeded", err)
	}
	calls := s.Calls()[DescribeNetworkInterfacesAction]
	if calls[ErrUnauthorizedOperation] != 1 || calls["InvalidParameterValue"] != 1 || calls[ErrRequestLimitExceeded] != 1 {
		t.Errorf("calls %v", calls)
	}
	// ELB's Describe bucket is untouched by EC2's limit.
	if _, err := s.Client(oneAttempt).DescribeTargetGroups(bg, nil); err != nil {
		t.Errorf("ELBv2 after EC2's limit: %v", err)
	}

	// The raw error body, as EC2 sends it.
	resp, err := http.PostForm(base, url.Values{"Action": {"DescribeNetworkInterfaces"}, "Version": {"2016-11-15"}})
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(string(body), "<Response><Errors><Error><Code>RequestLimitExceeded</Code>") ||
		!strings.Contains(string(body), "<RequestID>") {
		t.Errorf("raw throttled answer %d %s", resp.StatusCode, body)
	}
	resp, err = http.PostForm(base, url.Values{"Action": {"DescribeNetworkInterfaces"}, "Version": {"2015-12-01"}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Errorf("the ELBv2 version for an EC2 action: HTTP %d, want 400", resp.StatusCode)
	}
}
