// Package elbv2 is draingate's target-health poller: it tells the gate which
// targets each AWS target group lists, and in which state, and which type
// of load balancer is in front of the group (read once per group with
// DescribeTargetGroups, from the same budget), so that the gate can hold a
// terminating pod until its target is out of every target group.
//
// It also tells who sends the group's traffic (Observation.Senders): the
// addresses of its ALB's or NLB's nodes, from the load balancer's network
// interfaces (EC2 DescribeNetworkInterfaces filtered on their description,
// "ELB app/NAME/ID"), which traffic evidence needs before it may close a
// route early. Cost: one EC2 call per load balancer per Config.NodesRefresh
// (60 s) while a group behind it is watched, from the same budget but only
// when no poll waits for a token (a poll releases pods; a node list only
// lets a route close early), and one DescribeTargetGroupAttributes per
// group behind an NLB, once, likewise (an NLB that
// passes its clients' addresses on has no list of senders). A list whose
// refreshes fail is kept for 3 × NodesRefresh, then the senders are not
// known. The permissions ec2:DescribeNetworkInterfaces and
// elasticloadbalancing:DescribeTargetGroupAttributes are optional: denied,
// the poller says so once in the log, asks again after Config.DeniedPause
// (10 min), and the senders are not known meanwhile, which can only
// lengthen waits.
//
// AWS's Describe budget (10 calls/s, 40 burst per account and region; see
// docs/facts.md, "ELBv2 API rate limits") is shared with the AWS Load
// Balancer Controller, and a controller starved of it deregisters late,
// which is the very race draingate exists to cover. So
// the cost of polling grows with target groups, never with pods:
//
//   - a target group is polled only while it has waiters ([Poller.Watch]
//     until [Waiter.Close]), and every waiter of a group shares its polls:
//     one DescribeTargetHealth per poll, a full listing, no Targets filter;
//   - a group is polled at most once per Config.Interval;
//   - every call, retries included, takes a token from one bucket shared by
//     all groups (Config.Rate, Config.Burst); groups due for a poll take
//     turns, so a busy group cannot starve another;
//   - the SDK's own retries are switched off per call and the poller retries
//     by itself, so no attempt escapes the bucket; on Throttling the group
//     backs off exponentially with jitter (Config.BackoffMin to BackoffMax),
//     and the shared bucket gives up its saved burst and refills at half
//     rate for 5 s, halving again on each further Throttling in that window
//     (down to 1/8), because the account's bucket is empty for everyone.
//
// EC2 throttles its actions apart from ELB's, so a throttled
// DescribeNetworkInterfaces backs off that list's reads only and leaves the
// shared budget's rate alone.
//
// It must never: poll per pod; make more calls than Config.Rate and
// Config.Burst allow; report a state it did not read; or call senders
// known from a list that is stale, empty, or of a load balancer that
// passes its clients' addresses on. A failed call
// keeps the last good listing and reports the error beside it, and a target
// missing from a listing is simply absent: deciding that "absent after
// being present" means deregistered is the caller's business.
package elbv2
