package elbv2

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"github.com/aws/aws-sdk-go-v2/service/elasticloadbalancingv2"
	"github.com/aws/smithy-go"
)

// The load balancers' nodes: who sends a group's traffic. Traffic evidence
// may close a route before its tail only when every sender is known (see
// internal/evidence), and an ALB's or NLB's senders are its nodes, whose
// network interfaces AWS describes as "ELB app/NAME/ID" or "ELB
// net/NAME/ID" (docs/facts.md, "Who sends a target group's traffic"). A node list is read per load
// balancer while a group behind it is watched, from the budget, and read
// again every Config.NodesRefresh: an ALB adds nodes as it scales.

// EC2API is the one EC2 call the poller makes, from the same budget as the
// ELBv2 calls: DescribeNetworkInterfaces, filtered on a load balancer's
// interface description. *ec2.Client implements it.
type EC2API interface {
	DescribeNetworkInterfaces(ctx context.Context, in *ec2.DescribeNetworkInterfacesInput, optFns ...func(*ec2.Options)) (*ec2.DescribeNetworkInterfacesOutput, error)
}

// Action names passed to Config.Metrics.
const (
	DescribeTargetGroupAttributesAction  = "DescribeTargetGroupAttributes"
	DescribeLoadBalancerAttributesAction = "DescribeLoadBalancerAttributes"
	DescribeNetworkInterfacesAction      = "DescribeNetworkInterfaces"
)

// ErrNodesDenied is wrapped by Observation.SendersErr when AWS refused the
// server's role ec2:DescribeNetworkInterfaces.
var ErrNodesDenied = errors.New("ec2:DescribeNetworkInterfaces is denied to the server's role")

// staleAfter is how many refresh intervals a node list stays good without
// a successful read.
const staleAfter = 3

// maxNodePages bounds the pages of one node list read (1000 interfaces
// each, every page a call from the budget). EC2 filters an account's
// interfaces page by page, so a large account may answer a few pages, some
// of them empty.
const maxNodePages = 10

// nodeList is one load balancer's nodes, guarded by Poller.mu.
type nodeList struct {
	addrs    []netip.Addr          // from the last good read, sorted
	zones    map[netip.Addr]string // each address's Availability Zone, from the same read
	readAt   time.Time             // when the last good read ended; zero: none yet
	err      error                 // the last read's error; nil after a good one
	failures int                   // consecutive failed reads
	next     time.Time             // no read before
	reading  bool                  // a group's goroutine reads it now

	// crossZone is an NLB's load_balancing.cross_zone.enabled ("true" or
	// "false"; "" until read), read with the node list; czDenied: AWS
	// refused the read (said once in the log).
	crossZone string
	czDenied  bool
	czRetry   time.Time // no read before: DeniedPause after a denial
}

// readSenders keeps the node lists of g's load balancers fresh: for a
// group behind an NLB, once it is known that the NLB does not pass its
// clients' addresses on (read once); none for a Gateway Load Balancer,
// whose senders are its clients. g's goroutine calls it after a good
// listing.
func (p *Poller) readSenders(ctx context.Context, g *group, now time.Time) {
	if p.cfg.EC2 == nil {
		return
	}
	p.mu.Lock()
	info, ok := p.infos[g.arn]
	p.mu.Unlock()
	switch {
	case !ok:
		return
	case info.lbType == TypeNetwork:
		if why, known := p.readClientIP(ctx, g, now); !known || why != "" {
			return
		}
	case info.lbType != TypeApplication:
		return
	}
	for _, lb := range info.lbARNs {
		if ctx.Err() != nil {
			return
		}
		p.readNodes(ctx, lb, info.vpcID, info.lbType == TypeNetwork)
	}
}

// minReread is the least time between two reads of a load balancer's
// nodes that ReadNodesSoon asks for: a source missing from the list may be
// a client, not a node, and must not cost a call per ask.
const minReread = 10 * time.Second

// ReadNodesSoon has the node lists of the load balancers in front of arn
// read again at its group's next poll rather than at their refresh (a
// source the list lacks sent to a pod: the load balancer may have scaled
// out), unless read less than minReread ago. The read comes from the
// budget like any other.
func (p *Poller) ReadNodesSoon(arn string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := time.Now()
	for _, lb := range p.infos[arn].lbARNs {
		if n := p.lbs[lb]; n != nil && !n.reading && now.Sub(n.readAt) >= minReread && now.Before(n.next) && n.failures == 0 {
			n.next = now
		}
	}
}

// readClientIP says whether the NLB in front of g keeps its clients'
// addresses (why is then not empty): from memory, or with one
// DescribeTargetGroupAttributes call from the budget (again every
// NodesRefresh, the attributes may change), again after a backoff when it
// fails, or after DeniedPause when the permission is denied (said once in
// the log). known is false until read, and once the last read is stale.
func (p *Poller) readClientIP(ctx context.Context, g *group, now time.Time) (why string, known bool) {
	p.mu.Lock()
	cached, known := p.clientIP[g.arn]
	at := p.clientIPAt[g.arn]
	p.mu.Unlock()
	fresh := known && now.Sub(at) <= staleAfter*p.cfg.NodesRefresh
	if known && now.Sub(at) < p.cfg.NodesRefresh {
		return cached, true
	}
	if now.Before(g.attrRetry) || p.budget.takeLow(ctx) != nil {
		return cached, fresh
	}
	why, crossZone, err := p.describeClientIP(ctx, g.arn)
	if ctx.Err() != nil {
		return "", false
	}
	p.mu.Lock()
	if err != nil {
		p.clientIPErr[g.arn] = err
	} else {
		delete(p.clientIPErr, g.arn)
		p.clientIP[g.arn] = why
		p.tgCrossZone[g.arn] = crossZone
		p.clientIPAt[g.arn] = now
	}
	denied := err != nil && isDenied(err)
	say := denied && !p.attrDeniedSaid
	p.attrDeniedSaid = p.attrDeniedSaid || denied
	p.mu.Unlock()
	switch {
	case denied:
		g.attrRetry = now.Add(p.cfg.DeniedPause)
		if say {
			p.cfg.Log.Warn("the server's role may not call elasticloadbalancing:DescribeTargetGroupAttributes: add it to the server's role "+
				"to let traffic evidence close routes behind an NLB early; without it they close at their tail or later",
				"error", err, "asking_again_every", p.cfg.DeniedPause.String())
		}
		return cached, fresh
	case err != nil:
		g.attrFailures++
		g.attrRetry = now.Add(p.backoff.Next(g.attrFailures))
		return cached, fresh
	}
	g.attrFailures = 0
	g.signal()
	return why, true
}

// describeClientIP reads the group's preserve_client_ip.enabled: why its
// NLB's nodes are not its senders, "" when they are; and, from the same
// answer, its load_balancing.cross_zone.enabled ("" when absent).
func (p *Poller) describeClientIP(ctx context.Context, arn string) (why, crossZone string, err error) {
	cctx, cancel := context.WithTimeout(ctx, p.cfg.Timeout)
	defer cancel()
	p.calls.Add(1)
	out, err := p.api.DescribeTargetGroupAttributes(cctx,
		&elasticloadbalancingv2.DescribeTargetGroupAttributesInput{TargetGroupArn: aws.String(arn)}, singleAttempt)
	if err != nil && ctx.Err() != nil {
		return "", "", err
	}
	p.outcome(DescribeTargetGroupAttributesAction, err)
	if err != nil {
		return "", "", fmt.Errorf("describe target group attributes %s: %w", arn, err)
	}
	why = "the target group has no preserve_client_ip.enabled attribute: whether its NLB passes its clients' addresses on is not known"
	for _, a := range out.Attributes {
		switch v := aws.ToString(a.Value); aws.ToString(a.Key) {
		case "preserve_client_ip.enabled":
			why = ""
			if v != "false" {
				why = fmt.Sprintf("the NLB passes its clients' own addresses on (preserve_client_ip.enabled=%s): its nodes are not the senders", v)
			}
		case "load_balancing.cross_zone.enabled":
			crossZone = v
		}
	}
	return why, crossZone, nil
}

// readNodes reads a load balancer's node list when it is due (never read,
// or read NodesRefresh ago, or a failed read's backoff passed) and no
// other group reads it, unless AWS denied the permission less than
// DeniedPause ago. The groups behind it hear of a change.
func (p *Poller) readNodes(ctx context.Context, lb, vpc string, nlb bool) {
	p.mu.Lock()
	n := p.lbs[lb]
	if n == nil {
		n = &nodeList{}
		p.lbs[lb] = n
	}
	now := time.Now()
	if n.reading || now.Before(n.next) || now.Before(p.deniedUntil) {
		p.mu.Unlock()
		return
	}
	n.reading = true
	askCrossZone := nlb && !now.Before(n.czRetry)
	p.mu.Unlock()

	addrs, zones, err := p.describeNodes(ctx, lb, vpc)
	crossZone, czErr := "", error(nil)
	if err == nil && askCrossZone {
		crossZone, czErr = p.describeCrossZone(ctx, lb)
	}

	p.mu.Lock()
	defer p.mu.Unlock()
	n.reading = false
	if ctx.Err() != nil {
		return // the group's last waiter left: the list is as it was
	}
	if askCrossZone && err == nil {
		p.noteCrossZoneLocked(n, lb, crossZone, czErr)
	}
	done := time.Now()
	wasKnown := n.fresh(done, p.cfg.NodesRefresh)
	before := n.addrs
	switch {
	case err == nil:
		n.addrs, n.zones, n.readAt, n.err, n.failures = addrs, zones, done, nil, 0
		n.next = done.Add(p.cfg.NodesRefresh)
		p.deniedErr = nil
	case errors.Is(err, ErrNodesDenied):
		n.err = err
		p.deniedErr = err
		p.deniedUntil = done.Add(p.cfg.DeniedPause)
		n.next = p.deniedUntil
		if !p.deniedSaid {
			p.deniedSaid = true
			p.cfg.Log.Warn("the server's role may not call ec2:DescribeNetworkInterfaces: add ec2:DescribeNetworkInterfaces to the server's role "+
				"to let traffic evidence close routes early; without it routes close at their tail or later",
				"error", err, "asking_again_every", p.cfg.DeniedPause.String())
		}
	default:
		n.err = err
		n.failures++
		n.next = done.Add(min(p.backoff.Next(n.failures), p.cfg.NodesRefresh))
	}
	if wasKnown != n.fresh(done, p.cfg.NodesRefresh) || !slices.Equal(before, n.addrs) {
		p.signalLBLocked(lb)
	}
}

// fresh says whether the list is good at now: read, not empty, and read
// less than staleAfter × refresh ago.
func (n *nodeList) fresh(now time.Time, refresh time.Duration) bool {
	return !n.readAt.IsZero() && len(n.addrs) > 0 && now.Sub(n.readAt) <= staleAfter*refresh
}

// signalLBLocked tells the watched groups behind lb that their senders
// changed; p.mu is held.
func (p *Poller) signalLBLocked(lb string) {
	for arn, g := range p.groups {
		if slices.Contains(p.infos[arn].lbARNs, lb) {
			g.signal()
		}
	}
}

// nodesDescription is the description AWS gives a load balancer's network
// interfaces: "ELB app/NAME/ID" for arn:...:loadbalancer/app/NAME/ID
// ("net/" for an NLB).
func nodesDescription(lb string) (string, bool) {
	_, rest, ok := strings.Cut(lb, ":loadbalancer/")
	if !ok || !strings.HasPrefix(rest, "app/") && !strings.HasPrefix(rest, "net/") || strings.Count(rest, "/") != 2 {
		return "", false
	}
	return "ELB " + rest, true
}

// describeNodes lists the addresses of a load balancer's nodes: every
// private IPv4 and IPv6 address of every network interface described as
// the load balancer's, in its VPC, page by page, each page a call from
// the budget.
func (p *Poller) describeNodes(ctx context.Context, lb, vpc string) ([]netip.Addr, map[netip.Addr]string, error) {
	desc, ok := nodesDescription(lb)
	if !ok {
		return nil, nil, fmt.Errorf("load balancer ARN %q names no ALB or NLB (loadbalancer/app/NAME/ID or net/NAME/ID)", lb)
	}
	in := &ec2.DescribeNetworkInterfacesInput{
		Filters:    []ec2types.Filter{{Name: aws.String("description"), Values: []string{desc}}},
		MaxResults: aws.Int32(1000),
	}
	if vpc != "" {
		in.Filters = append(in.Filters, ec2types.Filter{Name: aws.String("vpc-id"), Values: []string{vpc}})
	}
	var addrs []netip.Addr
	zones := map[netip.Addr]string{}
	add := func(s *string, zone string) {
		if a, err := netip.ParseAddr(aws.ToString(s)); err == nil {
			addrs = append(addrs, a.Unmap())
			zones[a.Unmap()] = zone
		}
	}
	for page := 0; ; page++ {
		if page == maxNodePages {
			return nil, nil, fmt.Errorf("describe network interfaces of load balancer %s: more than %d pages", lb, maxNodePages)
		}
		if err := p.budget.takeLow(ctx); err != nil {
			return nil, nil, err
		}
		out, err := p.callNodes(ctx, in)
		if err != nil {
			return nil, nil, fmt.Errorf("describe network interfaces of load balancer %s: %w", lb, err)
		}
		for _, ni := range out.NetworkInterfaces {
			zone := aws.ToString(ni.AvailabilityZone)
			add(ni.PrivateIpAddress, zone)
			for _, a := range ni.PrivateIpAddresses {
				add(a.PrivateIpAddress, zone)
			}
			add(ni.Ipv6Address, zone)
			for _, a := range ni.Ipv6Addresses {
				add(a.Ipv6Address, zone)
			}
		}
		if aws.ToString(out.NextToken) == "" {
			break
		}
		in.NextToken = out.NextToken
	}
	slices.SortFunc(addrs, netip.Addr.Compare)
	return slices.Compact(addrs), zones, nil
}

// describeCrossZone reads an NLB's load_balancing.cross_zone.enabled, with
// one DescribeLoadBalancerAttributes call from the budget.
func (p *Poller) describeCrossZone(ctx context.Context, lb string) (string, error) {
	if err := p.budget.takeLow(ctx); err != nil {
		return "", err
	}
	cctx, cancel := context.WithTimeout(ctx, p.cfg.Timeout)
	defer cancel()
	p.calls.Add(1)
	out, err := p.api.DescribeLoadBalancerAttributes(cctx,
		&elasticloadbalancingv2.DescribeLoadBalancerAttributesInput{LoadBalancerArn: aws.String(lb)}, singleAttempt)
	if err != nil && ctx.Err() != nil {
		return "", err
	}
	p.outcome(DescribeLoadBalancerAttributesAction, err)
	if err != nil {
		return "", fmt.Errorf("describe load balancer attributes %s: %w", lb, err)
	}
	for _, a := range out.Attributes {
		if aws.ToString(a.Key) == "load_balancing.cross_zone.enabled" {
			return aws.ToString(a.Value), nil
		}
	}
	return "", nil
}

// noteCrossZoneLocked keeps what a read of an NLB's cross-zone setting
// found: a failed read forgets it (unknown counts as on: every zone's node
// is a sender), a denied one says so once. p.mu is held.
func (p *Poller) noteCrossZoneLocked(n *nodeList, lb, crossZone string, err error) {
	if err == nil {
		n.crossZone = crossZone
		return
	}
	n.crossZone = ""
	if !isDenied(err) {
		return
	}
	n.czRetry = time.Now().Add(p.cfg.DeniedPause)
	if !n.czDenied {
		n.czDenied = true
		p.cfg.Log.Warn("the server's role may not call elasticloadbalancing:DescribeLoadBalancerAttributes: add it to the server's role "+
			"to let traffic evidence close routes early behind an NLB whose cross-zone load balancing is off; without it every zone's node must be seen",
			"load_balancer", lb, "error", err)
	}
}

// callNodes makes one DescribeNetworkInterfaces call and accounts for it.
// A throttled one does not slow the shared budget down: EC2 throttles each
// of its actions in its own bucket, apart from ELB's, so the load balancer
// controller's calls are not what ran out; the list's own backoff slows
// its reads.
func (p *Poller) callNodes(outer context.Context, in *ec2.DescribeNetworkInterfacesInput) (*ec2.DescribeNetworkInterfacesOutput, error) {
	ctx, cancel := context.WithTimeout(outer, p.cfg.Timeout)
	defer cancel()
	p.calls.Add(1)
	out, err := p.cfg.EC2.DescribeNetworkInterfaces(ctx, in, func(o *ec2.Options) { o.Retryer = aws.NopRetryer{} })
	if err != nil && outer.Err() != nil {
		return nil, err
	}
	result := "ok"
	switch {
	case err == nil:
	case isDenied(err):
		result = "denied"
		err = fmt.Errorf("%w: %w", ErrNodesDenied, err)
	case isThrottle(err):
		result = "throttled"
		p.throttled.Add(1)
	default:
		result = "error"
	}
	if p.cfg.Metrics != nil {
		p.cfg.Metrics(DescribeNetworkInterfacesAction, result)
	}
	return out, err
}

// isDenied reports whether err is AWS refusing the caller the action.
func isDenied(err error) bool {
	var ae smithy.APIError
	if !errors.As(err, &ae) {
		return false
	}
	switch ae.ErrorCode() {
	case "UnauthorizedOperation", "Client.UnauthorizedOperation", "AccessDenied", "AccessDeniedException":
		return true
	}
	return false
}

// senders is who sends a group's traffic, as sendersLocked judges it.
type senders struct {
	addrs        []netip.Addr
	zones        map[netip.Addr]string
	crossZoneOff bool
	why          string
	err          error
}

// sendersLocked is who sends arn's traffic, judged at now: the nodes of
// every load balancer in front of it when each list is fresh (why empty),
// with their zones and whether they send only within their zone; else why
// not, and the read error behind it if any. p.mu is held.
func (p *Poller) sendersLocked(arn string, now time.Time) senders {
	addrs, zones, why, err := p.nodesLocked(arn, now)
	if why != "" {
		return senders{why: why, err: err}
	}
	return senders{addrs: addrs, zones: zones, crossZoneOff: p.crossZoneOffLocked(arn), why: why, err: err}
}

// crossZoneOffLocked says whether arn's nodes are known to send only to
// targets of their own zone: an NLB group whose own cross-zone attribute
// is "false", or that follows its load balancers' and each of them has it
// "false" (an NLB's default). Anything unknown counts as on. p.mu is held.
func (p *Poller) crossZoneOffLocked(arn string) bool {
	info := p.infos[arn]
	if info.lbType != TypeNetwork {
		return false
	}
	switch p.tgCrossZone[arn] {
	case "false":
		return true
	case "use_load_balancer_configuration":
	default:
		return false
	}
	for _, lb := range info.lbARNs {
		if n := p.lbs[lb]; n == nil || n.crossZone != "false" {
			return false
		}
	}
	return len(info.lbARNs) > 0
}

// nodesLocked is sendersLocked's node list. p.mu is held.
func (p *Poller) nodesLocked(arn string, now time.Time) (addrs []netip.Addr, zones map[netip.Addr]string, why string, err error) {
	const unknown = "the load balancer's nodes are not known: "
	if p.cfg.EC2 == nil {
		return nil, nil, unknown + "the server reads no node lists (no EC2 client)", nil
	}
	info, ok := p.infos[arn]
	switch {
	case !ok:
		return nil, nil, unknown + "the target group's load balancer is not read yet", nil
	case info.lbType == TypeNetwork:
		if why, ok := p.clientIP[arn]; ok && now.Sub(p.clientIPAt[arn]) > staleAfter*p.cfg.NodesRefresh {
			return nil, nil, fmt.Sprintf("the NLB's target group attributes are stale, read %s ago", now.Sub(p.clientIPAt[arn]).Round(time.Second)), p.clientIPErr[arn]
		} else if ok && why != "" {
			return nil, nil, why, nil
		} else if !ok {
			if err := p.clientIPErr[arn]; err != nil {
				return nil, nil, fmt.Sprintf("whether the NLB passes its clients' addresses on could not be read (%v)", err), err
			}
			return nil, nil, "whether the NLB passes its clients' addresses on (preserve_client_ip.enabled) is not read yet", nil
		}
	case info.lbType == TypeGateway:
		return nil, nil, "a Gateway Load Balancer forwards its clients' packets and opens no connections of its own", nil
	case info.lbType != TypeApplication:
		return nil, nil, fmt.Sprintf("a load balancer of type %q: its nodes are not listed", info.lbType), nil
	}
	if len(info.lbARNs) == 0 {
		return nil, nil, unknown + "the target group names no load balancer", nil
	}
	for _, lb := range info.lbARNs {
		n := p.lbs[lb]
		switch {
		case (n == nil || n.readAt.IsZero()) && p.deniedErr != nil:
			return nil, nil, unknown + ErrNodesDenied.Error() + " (add it to let traffic evidence close routes early)", p.deniedErr
		case n == nil || n.readAt.IsZero() && n.err == nil:
			return nil, nil, unknown + "not read yet", nil
		case n.readAt.IsZero():
			return nil, nil, fmt.Sprintf(unknown+"they could not be read (%v)", n.err), n.err
		case now.Sub(n.readAt) > staleAfter*p.cfg.NodesRefresh:
			why := fmt.Sprintf(unknown+"the list is stale, read %s ago", now.Sub(n.readAt).Round(time.Second))
			if n.err != nil {
				why += fmt.Sprintf(" (%v)", n.err)
			}
			return nil, nil, why, n.err
		}
		// A node connects to an IPv4 target from its IPv4 address and to an
		// IPv6 one from its IPv6 address: the other family never sends
		// this group anything, and listed it would forbid every early close.
		before := len(addrs)
		for _, a := range n.addrs {
			if a.Is6() == info.ipv6 {
				addrs = append(addrs, a)
				if zones == nil {
					zones = map[netip.Addr]string{}
				}
				zones[a] = n.zones[a]
			}
		}
		if len(addrs) == before {
			family := "IPv4"
			if info.ipv6 {
				family = "IPv6"
			}
			return nil, nil, unknown + "no " + family + " address on a network interface of load balancer " + lb, nil
		}
	}
	slices.SortFunc(addrs, netip.Addr.Compare)
	return slices.Compact(addrs), zones, "", nil
}

// LoadBalancerNodes is one load balancer's node list as the poller holds
// it.
type LoadBalancerNodes struct {
	ARN string
	// Known: a fresh, non-empty list (see Observation.Senders).
	Known bool
	// Nodes counts the addresses of the last good list.
	Nodes int
}

// LoadBalancers returns the node lists of the ALBs and NLBs in front of
// the groups watched now, sorted by ARN; for a gauge.
func (p *Poller) LoadBalancers() []LoadBalancerNodes {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := time.Now()
	seen := map[string]bool{}
	var out []LoadBalancerNodes
	for arn := range p.groups {
		for _, lb := range p.infos[arn].lbARNs {
			if _, ok := nodesDescription(lb); !ok || seen[lb] {
				continue
			}
			seen[lb] = true
			l := LoadBalancerNodes{ARN: lb}
			if n := p.lbs[lb]; n != nil {
				l.Known, l.Nodes = n.fresh(now, p.cfg.NodesRefresh), len(n.addrs)
			}
			out = append(out, l)
		}
	}
	slices.SortFunc(out, func(a, b LoadBalancerNodes) int { return strings.Compare(a.ARN, b.ARN) })
	return out
}
