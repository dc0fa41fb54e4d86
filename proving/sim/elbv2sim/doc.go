// Package elbv2sim is an in-process emulator of the AWS Elastic Load
// Balancing v2 API, for draingate's test bench ("the lab") only.
//
// It exists so that the lab can watch what draingate and the AWS Load
// Balancer Controller do to a target group without an AWS account: the real
// aws-sdk-go-v2 elasticloadbalancingv2 client talks to it over HTTP (AWS Query
// protocol, BaseEndpoint pointed at [Server.Listen]'s URL, any static
// credentials: [Server.Client] builds such a client), and the lab drives and
// observes it through the Go API
// ([Server.CreateTargetGroup], [Server.Subscribe], [Server.Targets], ...).
//
// What it models, because the gate depends on it:
//   - the per-target state machine (initial, healthy, unhealthy, draining,
//     then gone / unused), driven by real HTTP GET health checks against the
//     registered targets and by the deregistration delay;
//   - the ELB API rate limits (Describe, Registration and account-wide token
//     buckets), so a lab can show a polling gate starving the controller;
//   - per-action latency, so a lab can show a slow API.
//
// What it never does: it is never imported by production packages (only by
// the lab and tests); it does not check SigV4 signatures or credentials; it
// routes no traffic (there are no listeners or load balancers, only target
// groups that name a fake load balancer); it keeps nothing on disk; and it
// implements only the actions draingate and the lab need
// (CreateTargetGroup, DescribeTargetGroups, DescribeTargetGroupAttributes,
// DescribeLoadBalancerAttributes of a group's fake load balancer,
// DescribeTargetHealth, RegisterTargets, DeregisterTargets). Any other action
// answers InvalidAction.
//
// The same server also answers one EC2 action, DescribeNetworkInterfaces
// (EC2 Query protocol, version 2016-11-15; [Server.EC2Client]), with the
// network interfaces of the load balancers' nodes that the lab sets
// ([Server.SetLoadBalancerNodes]), so that the gate can list every sender
// of a target group's traffic. It has EC2's own rate limit (Config.EC2),
// and [Server.DenyEC2] makes it answer UnauthorizedOperation, as AWS does
// for a role without the permission.
//
// Timers are real: the lab makes runs fast by giving target groups short
// health-check intervals and deregistration delays (milliseconds are
// accepted, although AWS only allows whole seconds; the API reports such
// values rounded up to whole seconds).
package elbv2sim
