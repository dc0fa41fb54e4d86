package elbv2sim

// The one EC2 action the gate makes: DescribeNetworkInterfaces, which lists
// a load balancer's nodes (its network interfaces, described
// "ELB app/NAME/ID" or "ELB net/NAME/ID") and their addresses. It speaks
// the EC2 Query protocol, which differs from ELBv2's in its answers: no
// <ActionResult> wrapper, lists of <item>, and errors as
// <Response><Errors><Error>.

import (
	"bytes"
	"cmp"
	"encoding/xml"
	"fmt"
	"maps"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
)

// EC2APIVersion is the EC2 API version the emulator speaks.
const EC2APIVersion = "2016-11-15"

const ec2Namespace = "http://ec2.amazonaws.com/doc/" + EC2APIVersion + "/"

// DescribeNetworkInterfacesAction is the EC2 action the emulator answers,
// as Calls and CallsBy name it.
const DescribeNetworkInterfacesAction = "DescribeNetworkInterfaces"

// Errors EC2 answers that the emulator produces.
const (
	ErrUnauthorizedOperation = "UnauthorizedOperation"
	ErrRequestLimitExceeded  = "RequestLimitExceeded"
)

// defaultEC2 is EC2's request bucket for a non-mutating action such as
// DescribeNetworkInterfaces (ec2-api-throttling.html): each EC2 action has
// its own, apart from ELB's.
var defaultEC2 = BucketConfig{Capacity: 100, RefillPerSecond: 20}

// SetLoadBalancerNodes sets the addresses of a load balancer's nodes, as
// DescribeNetworkInterfaces lists them: one network interface per address
// (an IPv6 address as the interface's IPv6 address), described as AWS
// describes a load balancer's interfaces. lbARN is a load balancer a
// target group names ([Server.LoadBalancerARN]); no addresses removes
// them. It bypasses rate limits, latency and Calls.
func (s *Server) SetLoadBalancerNodes(lbARN string, addrs []netip.Addr) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	found := false
	for _, tg := range s.groups {
		found = found || tg.lbARN == lbARN
	}
	if !found {
		return errorf("LoadBalancerNotFound", "no target group names load balancer %s", lbARN)
	}
	if len(addrs) == 0 {
		delete(s.nodes, lbARN)
		return nil
	}
	s.nodes[lbARN] = slices.Clone(addrs)
	return nil
}

// LoadBalancerARN returns the ARN of the (fake) load balancer in front of
// a target group, as DescribeTargetGroups reports it.
func (s *Server) LoadBalancerARN(targetGroupARN string) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	tg, err := s.groupLocked(targetGroupARN)
	if err != nil {
		return "", err
	}
	return tg.lbARN, nil
}

// DenyEC2 makes DescribeNetworkInterfaces answer UnauthorizedOperation
// (deny true), as AWS does for a role without ec2:DescribeNetworkInterfaces,
// or answer again (false).
func (s *Server) DenyEC2(deny bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ec2Denied = deny
}

// SetEC2Throttle replaces the bucket of DescribeNetworkInterfaces (the
// new one starts full); the zero BucketConfig means EC2's default, as in
// Config.EC2.
func (s *Server) SetEC2Throttle(b BucketConfig) { s.lim.setEC2(b, time.Now()) }

// serveEC2 answers one EC2 Query request, in the order ServeHTTP keeps
// for ELBv2 (latency already waited): version, rate limit, permission,
// then the action.
func (s *Server) serveEC2(w http.ResponseWriter, r *http.Request, action, reqID string) {
	if v := r.Form.Get("Version"); r.Form.Has("Version") && v != EC2APIVersion {
		s.count(r, action, "InvalidAction")
		writeEC2Error(w, reqID, http.StatusBadRequest, "InvalidAction", fmt.Sprintf("The action %s is not valid for version %s", action, v))
		return
	}
	if !s.lim.allowEC2(time.Now()) {
		s.count(r, action, ErrRequestLimitExceeded)
		writeEC2Error(w, reqID, http.StatusServiceUnavailable, ErrRequestLimitExceeded, "Request limit exceeded.")
		return
	}
	s.mu.Lock()
	denied := s.ec2Denied
	s.mu.Unlock()
	if denied {
		s.count(r, action, ErrUnauthorizedOperation)
		writeEC2Error(w, reqID, http.StatusForbidden, ErrUnauthorizedOperation, "You are not authorized to perform this operation. User: arn:aws:sts::"+fakeAccount+":assumed-role/draingate is not authorized to perform: ec2:DescribeNetworkInterfaces")
		return
	}
	res, err := s.describeNetworkInterfaces(r.Form)
	if err != nil {
		ae, ok := err.(*APIError)
		if !ok {
			ae = &APIError{Code: "InternalError", Message: err.Error(), status: http.StatusInternalServerError}
		}
		s.count(r, action, ae.Code)
		writeEC2Error(w, reqID, cmp.Or(ae.status, http.StatusBadRequest), ae.Code, ae.Message)
		return
	}
	s.count(r, action, "OK")
	res.XMLNS, res.RequestID = ec2Namespace, reqID
	var buf bytes.Buffer
	if err := xml.NewEncoder(&buf).Encode(res); err != nil {
		writeEC2Error(w, reqID, http.StatusInternalServerError, "InternalError", err.Error())
		return
	}
	w.Header().Set("Content-Type", "text/xml;charset=UTF-8")
	w.Header().Set("x-amzn-RequestId", reqID)
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(buf.Bytes())
}

// ec2Filters reads "Filter.N.Name" and "Filter.N.Value.M" into name →
// values. A name given twice merges its values.
func ec2Filters(f url.Values) (map[string][]string, error) {
	type filter struct {
		name   string
		values map[int]string
	}
	byIndex := map[int]*filter{}
	for k, v := range f {
		rest, ok := strings.CutPrefix(k, "Filter.")
		if !ok {
			continue
		}
		idx, field, _ := strings.Cut(rest, ".")
		n, err := strconv.Atoi(idx)
		if err != nil || n < 1 {
			return nil, errorf("InvalidParameterValue", "bad filter index in %q", k)
		}
		if byIndex[n] == nil {
			byIndex[n] = &filter{values: map[int]string{}}
		}
		switch {
		case field == "Name":
			byIndex[n].name = v[0]
		case strings.HasPrefix(field, "Value."):
			m, err := strconv.Atoi(strings.TrimPrefix(field, "Value."))
			if err != nil || m < 1 {
				return nil, errorf("InvalidParameterValue", "bad filter value index in %q", k)
			}
			byIndex[n].values[m] = v[0]
		default:
			return nil, errorf("InvalidParameterValue", "unknown filter field %q", k)
		}
	}
	out := map[string][]string{}
	for _, n := range slices.Sorted(maps.Keys(byIndex)) {
		fl := byIndex[n]
		if fl.name == "" {
			return nil, errorf("InvalidParameterValue", "filter %d has no name", n)
		}
		for _, m := range slices.Sorted(maps.Keys(fl.values)) {
			out[fl.name] = append(out[fl.name], fl.values[m])
		}
	}
	return out, nil
}

// describeNetworkInterfaces answers the action: the load balancers'
// interfaces that pass every filter (description and vpc-id, each
// matching any of its values exactly; other filters are refused rather
// than ignored), sorted, paged by MaxResults (5–1000) and NextToken.
func (s *Server) describeNetworkInterfaces(f url.Values) (*xmlDescribeNetworkInterfaces, error) {
	filters, err := ec2Filters(f)
	if err != nil {
		return nil, err
	}
	for name := range filters {
		if name != "description" && name != "vpc-id" {
			return nil, errorf("InvalidParameterValue", "The filter '%s' is not supported by the emulator (description, vpc-id)", name)
		}
	}
	if f.Has("NetworkInterfaceId.1") {
		return nil, errorf("InvalidParameterValue", "the emulator does not look interfaces up by id")
	}
	pageSize := 0
	if f.Has("MaxResults") {
		n, err := strconv.Atoi(f.Get("MaxResults"))
		if err != nil || n < 5 || n > 1000 {
			return nil, errorf("InvalidParameterValue", "MaxResults %q must be between 5 and 1000", f.Get("MaxResults"))
		}
		pageSize = n
	}
	start := 0
	if tok := f.Get("NextToken"); tok != "" {
		n, err := strconv.Atoi(strings.TrimPrefix(tok, "eni-page-"))
		if err != nil || n < 0 || !strings.HasPrefix(tok, "eni-page-") {
			return nil, errorf("InvalidNextToken", "The token '%s' is invalid", tok)
		}
		start = n
	}

	s.mu.Lock()
	var all []xmlNetworkInterface
	for _, lb := range slices.Sorted(maps.Keys(s.nodes)) {
		desc := "ELB " + lb[strings.Index(lb, ":loadbalancer/")+len(":loadbalancer/"):]
		if v, ok := filters["description"]; ok && !slices.Contains(v, desc) {
			continue
		}
		if v, ok := filters["vpc-id"]; ok && !slices.Contains(v, fakeVPC) {
			continue
		}
		for i, a := range s.nodes[lb] {
			all = append(all, eniOf(lb, desc, i, a))
		}
	}
	s.mu.Unlock()

	res := &xmlDescribeNetworkInterfaces{}
	if start > len(all) {
		return nil, errorf("InvalidNextToken", "The token 'eni-page-%d' is invalid", start)
	}
	end := len(all)
	if pageSize > 0 && start+pageSize < end {
		end = start + pageSize
		res.NextToken = fmt.Sprintf("eni-page-%d", end)
	}
	res.Interfaces.Items = all[start:end]
	return res, nil
}

// eniOf is the i-th interface of load balancer lb, holding addr.
func eniOf(lb, desc string, i int, addr netip.Addr) xmlNetworkInterface {
	var h uint64 = 14695981039346656037
	for _, c := range []byte(lb) {
		h = (h ^ uint64(c)) * 1099511628211
	}
	x := xmlNetworkInterface{
		ID:               fmt.Sprintf("eni-%012x%05x", h&0xffffffffffff, i),
		Description:      desc,
		InterfaceType:    "interface",
		OwnerID:          fakeAccount,
		RequesterID:      "amazon-elb",
		RequesterManaged: true,
		Status:           "in-use",
		VpcID:            fakeVPC,
		SubnetID:         fmt.Sprintf("subnet-%017x", i%3),
		AvailabilityZone: fakeRegion + string(rune('a'+i%3)),
	}
	if addr.Is4() || addr.Is4In6() {
		a := addr.Unmap().String()
		x.PrivateIPAddress = a
		x.PrivateIPAddresses.Items = []xmlPrivateIP{{Address: a, Primary: true}}
	} else {
		x.IPv6Address = addr.String()
		x.IPv6Addresses.Items = []xmlIPv6{{Address: addr.String(), Primary: true}}
	}
	return x
}

// ---- EC2 XML shapes (element names as in the EC2 model) ----

type xmlDescribeNetworkInterfaces struct {
	XMLName    xml.Name                      `xml:"DescribeNetworkInterfacesResponse"`
	XMLNS      string                        `xml:"xmlns,attr"`
	RequestID  string                        `xml:"requestId"`
	Interfaces itemList[xmlNetworkInterface] `xml:"networkInterfaceSet"`
	NextToken  string                        `xml:"nextToken,omitempty"`
}

// itemList is an EC2 list: <name><item>…</item></name>.
type itemList[T any] struct {
	Items []T `xml:"item"`
}

type xmlNetworkInterface struct {
	ID                 string                 `xml:"networkInterfaceId"`
	SubnetID           string                 `xml:"subnetId"`
	VpcID              string                 `xml:"vpcId"`
	AvailabilityZone   string                 `xml:"availabilityZone"`
	Description        string                 `xml:"description"`
	OwnerID            string                 `xml:"ownerId"`
	RequesterID        string                 `xml:"requesterId"`
	RequesterManaged   bool                   `xml:"requesterManaged"`
	Status             string                 `xml:"status"`
	InterfaceType      string                 `xml:"interfaceType"`
	PrivateIPAddress   string                 `xml:"privateIpAddress,omitempty"`
	PrivateIPAddresses itemList[xmlPrivateIP] `xml:"privateIpAddressesSet"`
	IPv6Address        string                 `xml:"ipv6Address,omitempty"`
	IPv6Addresses      itemList[xmlIPv6]      `xml:"ipv6AddressesSet"`
}

type xmlPrivateIP struct {
	Address string `xml:"privateIpAddress"`
	Primary bool   `xml:"primary"`
}

type xmlIPv6 struct {
	Address string `xml:"ipv6Address"`
	Primary bool   `xml:"isPrimaryIpv6"`
}

type xmlEC2ErrorResponse struct {
	XMLName   xml.Name `xml:"Response"`
	Code      string   `xml:"Errors>Error>Code"`
	Message   string   `xml:"Errors>Error>Message"`
	RequestID string   `xml:"RequestID"`
}

// writeEC2Error sends an EC2 error: <Response><Errors><Error><Code/>
// <Message/></Error></Errors><RequestID/></Response>, where the SDK reads
// the code, the message and the request id.
func writeEC2Error(w http.ResponseWriter, reqID string, status int, code, msg string) {
	body, _ := xml.Marshal(xmlEC2ErrorResponse{Code: code, Message: msg, RequestID: reqID})
	w.Header().Set("Content-Type", "text/xml;charset=UTF-8")
	w.WriteHeader(status)
	_, _ = w.Write(append([]byte(xml.Header), body...))
}
