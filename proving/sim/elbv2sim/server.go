package elbv2sim

// This file is long because it is the emulator's whole wire protocol: the
// AWS Query request parsing, throttling and latency, one handler per ELBv2
// action and the XML answers and errors, which read best side by side.

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/xml"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

// APIVersion is the ELBv2 API version the emulator speaks.
const APIVersion = "2015-12-01"

const xmlNamespace = "http://elasticloadbalancing.amazonaws.com/doc/" + APIVersion + "/"

// Config configures a Server. The zero value is usable.
type Config struct {
	// Token buckets; a zero BucketConfig means the AWS default:
	// Describe 40/10, Registration 20/4, Account 40/10 (capacity/refill per s).
	Describe, Registration, Account BucketConfig

	// EC2 is the bucket of the EC2 action DescribeNetworkInterfaces, apart
	// from ELB's as in AWS; zero means EC2's default for a non-mutating
	// action, 100/20.
	EC2 BucketConfig

	// Latency per action name, waited before the action is processed (so a
	// slow RegisterTargets also takes effect late) and answered.
	Latency map[string]time.Duration

	// HTTPClient runs the health checks; each check also gets its target
	// group's timeout through the request context. Default: a client that
	// uses no proxy, keeps no idle connections and follows no redirects (an
	// ELB health check counts a 3xx as the code it is), and that sends each
	// check from one of the load balancer's nodes' addresses, in turn, once
	// SetLoadBalancerNodes gave them (as each AWS node checks each target);
	// from the host's before.
	HTTPClient *http.Client

	// Now stamps events; default time.Now. Timers and rate limits always use
	// the real clock.
	Now func() time.Time

	// EventBuffer is each subscriber's channel capacity; default 8192.
	EventBuffer int
}

// Server is the emulator. Create it with New; it serves HTTP through
// ServeHTTP (mount it anywhere) or Listen, and must be closed with Close.
type Server struct {
	cfg       Config
	client    *http.Client
	transport *http.Transport // ours, when cfg.HTTPClient is nil
	// fromNode are the health check clients that send from a load
	// balancer node's address (ours only), by address; guarded by mu.
	fromNode map[netip.Addr]*http.Client
	lim      limiter

	ctx    context.Context // cancelled by Close: stops health checks
	cancel context.CancelFunc
	done   chan struct{} // closed by Close: aborts injected latency
	wg     sync.WaitGroup

	// mu guards the state below and serialises events.
	mu      sync.Mutex
	closed  bool
	groups  map[string]*targetGroup // by ARN
	byName  map[string]string       // name → ARN
	order   []string                // ARNs in creation order
	seq     uint64
	gen     uint64
	subs    map[*subscriber]struct{}
	dropped uint64
	servers []*http.Server
	urls    []string // what Listen answered, in order
	// nodes are the load balancers' node addresses, by load balancer ARN
	// (SetLoadBalancerNodes); ec2Denied makes DescribeNetworkInterfaces
	// answer UnauthorizedOperation (DenyEC2).
	nodes     map[string][]netip.Addr
	ec2Denied bool
	// crossZone is each NLB's load_balancing.cross_zone.enabled, by load
	// balancer ARN (SetLoadBalancerCrossZone; absent: AWS's default, off).
	crossZone map[string]bool

	// clientTransports are the HTTP transports of the SDK clients Client
	// handed out; Close closes their idle connections.
	clientTransports []*http.Transport

	statsMu sync.Mutex
	latency map[string]time.Duration
	calls   map[string]map[string]int
	callers map[string]map[string]int // access key ID → action → calls
}

// New returns a Server with no target groups.
func New(cfg Config) *Server {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.EventBuffer <= 0 {
		cfg.EventBuffer = 8192
	}
	s := &Server{
		cfg:       cfg,
		client:    cfg.HTTPClient,
		done:      make(chan struct{}),
		groups:    map[string]*targetGroup{},
		byName:    map[string]string{},
		nodes:     map[string][]netip.Addr{},
		crossZone: map[string]bool{},
		subs:      map[*subscriber]struct{}{},
		latency:   map[string]time.Duration{},
		calls:     map[string]map[string]int{},
		callers:   map[string]map[string]int{},
	}
	for a, d := range cfg.Latency {
		s.SetLatency(a, d)
	}
	if s.client == nil {
		// Targets are pod or node addresses: never through a proxy.
		s.transport = &http.Transport{
			Proxy:             nil,
			DialContext:       (&net.Dialer{}).DialContext,
			DisableKeepAlives: true,
		}
		s.client = &http.Client{
			Transport:     s.transport,
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		}
	}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	s.lim.set(cfg.Describe, cfg.Registration, cfg.Account, time.Now())
	s.lim.setEC2(cfg.EC2, time.Now())
	return s
}

func (s *Server) now() time.Time { return s.cfg.Now() }

// Listen serves the API on addr (e.g. "127.0.0.1:0") until Close and returns
// its base URL, for the SDK's BaseEndpoint; Client builds an SDK client for
// it.
func (s *Server) Listen(addr string) (url string, err error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return "", err
	}
	srv := &http.Server{Handler: s, ReadHeaderTimeout: 10 * time.Second}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		ln.Close()
		return "", ErrClosed
	}
	url = "http://" + ln.Addr().String()
	s.servers = append(s.servers, srv)
	s.urls = append(s.urls, url)
	s.wg.Add(1)
	s.mu.Unlock()
	go func() {
		defer s.wg.Done()
		_ = srv.Serve(ln) // returns ErrServerClosed on Close
	}()
	return url, nil
}

// Close stops the listeners, every health-check loop and drain timer, and
// closes the subscriber channels. It waits for the emulator's own goroutines
// to end. Target state is frozen; the Go API answers ErrClosed and the HTTP
// API ServiceUnavailable afterwards.
func (s *Server) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	for _, tg := range s.groups {
		for _, t := range tg.targets {
			if t.stop != nil {
				t.stop()
			}
			if t.drain != nil {
				t.drain.Stop()
			}
		}
	}
	for sub := range s.subs {
		close(sub.ch)
	}
	clear(s.subs)
	servers, clients := s.servers, s.clientTransports
	s.mu.Unlock()

	s.cancel()
	close(s.done)
	var err error
	for _, srv := range servers {
		err = errors.Join(err, srv.Close())
	}
	s.wg.Wait()
	if s.transport != nil {
		s.transport.CloseIdleConnections()
	}
	for _, tr := range clients {
		tr.CloseIdleConnections()
	}
	return err
}

// Calls returns, per action, how many calls ended with each result: "OK",
// "Throttling" or another error code. The Go API is not counted.
func (s *Server) Calls() map[string]map[string]int {
	s.statsMu.Lock()
	defer s.statsMu.Unlock()
	out := make(map[string]map[string]int, len(s.calls))
	for a, m := range s.calls {
		c := make(map[string]int, len(m))
		for r, n := range m {
			c[r] = n
		}
		out[a] = c
	}
	return out
}

// CallsBy returns, per caller, how many calls of each action it made,
// whatever their result. The caller is the access key ID of the request's
// signature (the Credential of its Authorization header), or "" for an
// unsigned request: give each client its own key to tell them apart.
func (s *Server) CallsBy() map[string]map[string]int {
	s.statsMu.Lock()
	defer s.statsMu.Unlock()
	out := make(map[string]map[string]int, len(s.callers))
	for c, m := range s.callers {
		out[c] = maps.Clone(m)
	}
	return out
}

func (s *Server) count(r *http.Request, action, result string) {
	caller := accessKeyID(r.Header.Get("Authorization"))
	s.statsMu.Lock()
	defer s.statsMu.Unlock()
	m := s.calls[action]
	if m == nil {
		m = map[string]int{}
		s.calls[action] = m
	}
	m[result]++
	c := s.callers[caller]
	if c == nil {
		c = map[string]int{}
		s.callers[caller] = c
	}
	c[action]++
}

// accessKeyID reads the key ID of a Signature Version 4 Authorization
// header: "AWS4-HMAC-SHA256 Credential=AKID/20261203/us-east-1/elasticloadbalancing/aws4_request, ...".
func accessKeyID(auth string) string {
	_, cred, ok := strings.Cut(auth, "Credential=")
	if !ok {
		return ""
	}
	id, _, _ := strings.Cut(cred, "/")
	return id
}

// SetLatency sets the latency of an action; d <= 0 removes it.
func (s *Server) SetLatency(action string, d time.Duration) {
	s.statsMu.Lock()
	defer s.statsMu.Unlock()
	if d <= 0 {
		delete(s.latency, action)
		return
	}
	s.latency[action] = d
}

// SetThrottle replaces the three token buckets; the new buckets start full.
// A zero BucketConfig means the AWS default, as in Config.
func (s *Server) SetThrottle(describe, registration, account BucketConfig) {
	s.lim.set(describe, registration, account, time.Now())
}

// handler runs one action on parsed form values and returns the value to
// encode as <ActionResult>.
type handler func(s *Server, f url.Values) (any, error)

var handlers = map[string]handler{
	"CreateTargetGroup":              (*Server).apiCreateTargetGroup,
	"DescribeTargetGroups":           (*Server).apiDescribeTargetGroups,
	"DescribeTargetGroupAttributes":  (*Server).apiDescribeTargetGroupAttributes,
	"DescribeLoadBalancerAttributes": (*Server).apiDescribeLoadBalancerAttributes,
	"DescribeTargetHealth":           (*Server).apiDescribeTargetHealth,
	"RegisterTargets":                (*Server).apiRegisterTargets,
	"DeregisterTargets":              (*Server).apiDeregisterTargets,
}

// ServeHTTP answers one AWS Query request, ELBv2's or EC2's
// DescribeNetworkInterfaces. Signatures are not checked. Order: injected
// latency, then rate limits (a throttled call changes nothing), then the
// action.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	reqID := newRequestID()
	if err := r.ParseForm(); err != nil {
		s.count(r, "", "ValidationError")
		writeError(w, reqID, errorf("ValidationError", "cannot parse the request: %v", err))
		return
	}
	action := r.Form.Get("Action")

	s.statsMu.Lock()
	lat := s.latency[action]
	s.statsMu.Unlock()
	if lat > 0 {
		t := time.NewTimer(lat)
		select {
		case <-t.C:
		case <-r.Context().Done():
			t.Stop()
			return
		case <-s.done:
			t.Stop()
		}
	}

	s.mu.Lock()
	closed := s.closed
	s.mu.Unlock()
	if closed {
		writeError(w, reqID, &APIError{Code: "ServiceUnavailable", Message: "the emulator is closed", status: http.StatusServiceUnavailable})
		return
	}

	if action == DescribeNetworkInterfacesAction {
		s.serveEC2(w, r, action, reqID)
		return
	}
	h, ok := handlers[action]
	switch {
	case action == "":
		s.count(r, action, "MissingAction")
		writeError(w, reqID, errorf("MissingAction", "the request has no Action"))
		return
	case !ok:
		s.count(r, action, "InvalidAction")
		writeError(w, reqID, errorf("InvalidAction", "Could not find operation %s for version %s", action, APIVersion))
		return
	case r.Form.Has("Version") && r.Form.Get("Version") != APIVersion:
		// What AWS answers for a known action at an unknown version.
		s.count(r, action, "InvalidAction")
		writeError(w, reqID, errorf("InvalidAction", "Could not find operation %s for version %s", action, r.Form.Get("Version")))
		return
	}
	if !s.lim.allow(classOf(action), time.Now()) {
		s.count(r, action, "Throttling")
		writeError(w, reqID, errorf("Throttling", "Rate exceeded"))
		return
	}
	result, err := h(s, r.Form)
	if err != nil {
		var ae *APIError
		if !errors.As(err, &ae) {
			ae = &APIError{Code: "ServiceUnavailable", Message: err.Error(), status: http.StatusServiceUnavailable}
		}
		s.count(r, action, ae.Code)
		writeError(w, reqID, ae)
		return
	}
	s.count(r, action, "OK")
	writeResult(w, action, reqID, result)
}

// newRequestID makes a random UUID-shaped id, like AWS's request ids.
func newRequestID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:])
}

// writeResult sends <ActionResponse><ActionResult>…</ActionResult>
// <ResponseMetadata><RequestId/></ResponseMetadata></ActionResponse>. The SDK
// finds <ActionResult> by name and takes the request id from the header.
func writeResult(w http.ResponseWriter, action, reqID string, result any) {
	var buf bytes.Buffer
	fmt.Fprintf(&buf, `<%sResponse xmlns="%s">`, action, xmlNamespace)
	enc := xml.NewEncoder(&buf)
	if err := enc.EncodeElement(result, xml.StartElement{Name: xml.Name{Local: action + "Result"}}); err != nil {
		writeError(w, reqID, &APIError{Code: "InternalFailure", Message: err.Error(), status: http.StatusInternalServerError})
		return
	}
	_ = enc.Flush()
	fmt.Fprintf(&buf, `<ResponseMetadata><RequestId>%s</RequestId></ResponseMetadata></%sResponse>`, reqID, action)
	w.Header().Set("Content-Type", "text/xml")
	w.Header().Set("x-amzn-RequestId", reqID)
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(buf.Bytes())
}

type xmlErrorResponse struct {
	XMLName   xml.Name `xml:"ErrorResponse"`
	Xmlns     string   `xml:"xmlns,attr"`
	Type      string   `xml:"Error>Type"`
	Code      string   `xml:"Error>Code"`
	Message   string   `xml:"Error>Message"`
	RequestID string   `xml:"RequestId"`
}

func writeError(w http.ResponseWriter, reqID string, e *APIError) {
	status, typ := e.status, "Sender"
	if status == 0 {
		status = http.StatusBadRequest
	}
	if status >= 500 {
		typ = "Receiver"
	}
	body, _ := xml.Marshal(xmlErrorResponse{Xmlns: xmlNamespace, Type: typ, Code: e.Code, Message: e.Message, RequestID: reqID})
	w.Header().Set("Content-Type", "text/xml")
	w.Header().Set("x-amzn-RequestId", reqID)
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

// ---- request parsing ----

// members returns the entries of a query list "NAME.member.N[.FIELD]" as
// field → value maps ("" for scalar members), ordered by N. Indexes need not
// be contiguous.
func members(f url.Values, name string) ([]map[string]string, error) {
	prefix := name + ".member."
	byIndex := map[int]map[string]string{}
	for k, v := range f {
		rest, ok := strings.CutPrefix(k, prefix)
		if !ok {
			continue
		}
		idx, field, _ := strings.Cut(rest, ".")
		n, err := strconv.Atoi(idx)
		if err != nil || n < 1 {
			return nil, errorf("ValidationError", "bad list index in %q", k)
		}
		if byIndex[n] == nil {
			byIndex[n] = map[string]string{}
		}
		byIndex[n][field] = v[0]
	}
	idx := make([]int, 0, len(byIndex))
	for n := range byIndex {
		idx = append(idx, n)
	}
	sort.Ints(idx)
	out := make([]map[string]string, len(idx))
	for i, n := range idx {
		out[i] = byIndex[n]
	}
	return out, nil
}

func stringMembers(f url.Values, name string) ([]string, error) {
	ms, err := members(f, name)
	if err != nil {
		return nil, err
	}
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = m[""]
	}
	return out, nil
}

func targetMembers(f url.Values) ([]Target, error) {
	ms, err := members(f, "Targets")
	if err != nil {
		return nil, err
	}
	out := make([]Target, len(ms))
	for i, m := range ms {
		out[i].ID = m["Id"]
		if p, ok := m["Port"]; ok {
			port, err := parseInt32(p, "Targets.member."+strconv.Itoa(i+1)+".Port")
			if err != nil {
				return nil, err
			}
			if port < 1 || port > 65535 {
				return nil, errorf("ValidationError", "port %d is not between 1 and 65535", port)
			}
			out[i].Port = port
		}
	}
	return out, nil
}

func parseInt32(v, name string) (int32, error) {
	n, err := strconv.ParseInt(v, 10, 32)
	if err != nil {
		return 0, errorf("ValidationError", "%s: %q is not an integer", name, v)
	}
	return int32(n), nil
}

func required(f url.Values, name string) (string, error) {
	v := f.Get(name)
	if v == "" {
		return "", errorf("ValidationError", "1 validation error detected: Value null at '%s' failed to satisfy constraint: Member must not be null", name)
	}
	return v, nil
}

// seconds reports a duration in whole seconds, rounded up, so a lab's
// sub-second interval or delay never reads as 0 (which means "none").
func seconds(d time.Duration) int32 {
	return int32((d + time.Second - 1) / time.Second)
}

// ---- XML shapes (element names as in the ELBv2 model) ----

// memberList is a wrapped AWS Query list: <Name><member>…</member></Name>.
// It always writes the wrapper, as AWS does for empty lists.
type memberList[T any] struct {
	Items []T `xml:"member"`
}

type xmlTargetDescription struct {
	ID   string `xml:"Id"`
	Port int32  `xml:"Port"`
}

type xmlTargetHealth struct {
	State       State  `xml:"State"`
	Reason      string `xml:"Reason,omitempty"`
	Description string `xml:"Description,omitempty"`
}

type xmlTargetHealthDescription struct {
	Target          xmlTargetDescription `xml:"Target"`
	HealthCheckPort string               `xml:"HealthCheckPort,omitempty"`
	TargetHealth    xmlTargetHealth      `xml:"TargetHealth"`
}

type xmlMatcher struct {
	HTTPCode string `xml:"HttpCode"`
}

type xmlTargetGroup struct {
	TargetGroupArn             string             `xml:"TargetGroupArn"`
	TargetGroupName            string             `xml:"TargetGroupName"`
	Protocol                   string             `xml:"Protocol"`
	ProtocolVersion            string             `xml:"ProtocolVersion,omitempty"`
	Port                       int32              `xml:"Port"`
	VpcID                      string             `xml:"VpcId"`
	HealthCheckProtocol        string             `xml:"HealthCheckProtocol"`
	HealthCheckPort            string             `xml:"HealthCheckPort"`
	HealthCheckEnabled         bool               `xml:"HealthCheckEnabled"`
	HealthCheckIntervalSeconds int32              `xml:"HealthCheckIntervalSeconds"`
	HealthCheckTimeoutSeconds  int32              `xml:"HealthCheckTimeoutSeconds"`
	HealthyThresholdCount      int32              `xml:"HealthyThresholdCount"`
	UnhealthyThresholdCount    int32              `xml:"UnhealthyThresholdCount"`
	HealthCheckPath            string             `xml:"HealthCheckPath"`
	Matcher                    xmlMatcher         `xml:"Matcher"`
	LoadBalancerArns           memberList[string] `xml:"LoadBalancerArns"`
	TargetType                 string             `xml:"TargetType"`
	IPAddressType              string             `xml:"IpAddressType"`
}

type xmlAttribute struct {
	Key   string `xml:"Key"`
	Value string `xml:"Value"`
}

type targetGroupsResult struct {
	TargetGroups memberList[xmlTargetGroup] `xml:"TargetGroups"`
}

type describeTargetHealthResult struct {
	TargetHealthDescriptions memberList[xmlTargetHealthDescription] `xml:"TargetHealthDescriptions"`
}

type attributesResult struct {
	Attributes memberList[xmlAttribute] `xml:"Attributes"`
}

type emptyResult struct{}

func (tg *targetGroup) xml() xmlTargetGroup {
	sp := tg.spec
	x := xmlTargetGroup{
		TargetGroupArn:  tg.arn,
		TargetGroupName: sp.Name,
		Protocol:        tg.protocol,
		Port:            sp.Port,
		VpcID:           fakeVPC,
		// The emulator always checks over HTTP, for NLB groups too.
		HealthCheckProtocol:        "HTTP",
		HealthCheckPort:            healthCheckPort(sp.HealthCheckPort),
		HealthCheckEnabled:         true,
		HealthCheckIntervalSeconds: seconds(sp.HealthCheckInterval),
		HealthCheckTimeoutSeconds:  seconds(sp.HealthCheckTimeout),
		HealthyThresholdCount:      int32(sp.HealthyThreshold),
		UnhealthyThresholdCount:    int32(sp.UnhealthyThreshold),
		HealthCheckPath:            sp.HealthCheckPath,
		Matcher:                    xmlMatcher{HTTPCode: "200-299"},
		LoadBalancerArns:           memberList[string]{Items: []string{tg.lbARN}},
		TargetType:                 sp.TargetType,
		IPAddressType:              "ipv4",
	}
	if tg.protocol == "HTTP" {
		x.ProtocolVersion = "HTTP1"
	}
	return x
}

// ---- actions ----

func (s *Server) apiCreateTargetGroup(f url.Values) (any, error) {
	name, err := required(f, "Name")
	if err != nil {
		return nil, err
	}
	spec := TargetGroupSpec{Name: name, TargetType: TargetTypeInstance, HealthCheckPath: f.Get("HealthCheckPath")}
	switch p := f.Get("Protocol"); p {
	// Only the two protocols the emulator reports back (it derives the
	// protocol from the load balancer type).
	case "HTTP":
		spec.LoadBalancerType = Application
	case "TCP":
		spec.LoadBalancerType = Network
	case "":
		return nil, errorf("ValidationError", "a protocol must be specified")
	default:
		return nil, errorf("ValidationError", "protocol %q is not supported by the emulator (HTTP, TCP)", p)
	}
	// AWS defaults TargetType to instance when it is omitted.
	if tt := f.Get("TargetType"); tt != "" {
		spec.TargetType = tt
	}
	if spec.Port, err = parseInt32(f.Get("Port"), "Port"); err != nil {
		return nil, err
	}
	ints := []struct {
		name string
		set  func(int32)
	}{
		{"HealthCheckIntervalSeconds", func(n int32) { spec.HealthCheckInterval = time.Duration(n) * time.Second }},
		{"HealthCheckTimeoutSeconds", func(n int32) { spec.HealthCheckTimeout = time.Duration(n) * time.Second }},
		{"HealthyThresholdCount", func(n int32) { spec.HealthyThreshold = int(n) }},
		{"UnhealthyThresholdCount", func(n int32) { spec.UnhealthyThreshold = int(n) }},
	}
	for _, x := range ints {
		if !f.Has(x.name) {
			continue
		}
		n, err := parseInt32(f.Get(x.name), x.name)
		if err != nil {
			return nil, err
		}
		if n < 1 {
			return nil, errorf("ValidationError", "%s must be at least 1", x.name)
		}
		x.set(n)
	}
	tg, err := s.createTargetGroup(spec)
	if err != nil {
		return nil, err
	}
	return targetGroupsResult{TargetGroups: memberList[xmlTargetGroup]{Items: []xmlTargetGroup{tg.xml()}}}, nil
}

func (s *Server) apiDescribeTargetGroups(f url.Values) (any, error) {
	arns, err := stringMembers(f, "TargetGroupArns")
	if err != nil {
		return nil, err
	}
	names, err := stringMembers(f, "Names")
	if err != nil {
		return nil, err
	}
	lb := f.Get("LoadBalancerArn")
	given := 0
	for _, b := range []bool{len(arns) > 0, len(names) > 0, lb != ""} {
		if b {
			given++
		}
	}
	if given > 1 {
		return nil, errorf("ValidationError", "only one of LoadBalancerArn, TargetGroupArns and Names may be given")
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, ErrClosed
	}
	var tgs []*targetGroup
	switch {
	case len(arns) > 0:
		for _, a := range arns {
			tg := s.groups[a]
			if tg == nil {
				return nil, errorf("TargetGroupNotFound", "Target groups '%s' not found", a)
			}
			tgs = append(tgs, tg)
		}
	case len(names) > 0:
		for _, n := range names {
			a, ok := s.byName[n]
			if !ok {
				return nil, errorf("TargetGroupNotFound", "One or more target groups not found")
			}
			tgs = append(tgs, s.groups[a])
		}
	default:
		for _, a := range s.order {
			if tg := s.groups[a]; lb == "" || tg.lbARN == lb {
				tgs = append(tgs, tg)
			}
		}
	}
	res := targetGroupsResult{}
	for _, tg := range tgs {
		res.TargetGroups.Items = append(res.TargetGroups.Items, tg.xml())
	}
	return res, nil
}

func (s *Server) apiDescribeTargetGroupAttributes(f url.Values) (any, error) {
	arn, err := required(f, "TargetGroupArn")
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	tg, err := s.groupLocked(arn)
	s.mu.Unlock()
	if err != nil {
		return nil, err
	}
	crossZone := tg.spec.CrossZone
	if crossZone == "" {
		crossZone = "use_load_balancer_configuration"
	}
	attrs := []xmlAttribute{
		{"deregistration_delay.timeout_seconds", strconv.Itoa(int(seconds(tg.spec.DeregistrationDelay)))},
		{"stickiness.enabled", "false"},
		{"load_balancing.cross_zone.enabled", crossZone},
	}
	if tg.spec.LoadBalancerType == Network {
		attrs = append(attrs,
			xmlAttribute{"stickiness.type", "source_ip"},
			xmlAttribute{"deregistration_delay.connection_termination.enabled", "false"},
			xmlAttribute{"preserve_client_ip.enabled", strconv.FormatBool(tg.spec.TargetType == TargetTypeInstance || tg.spec.PreserveClientIP)},
			xmlAttribute{"proxy_protocol_v2.enabled", "false"},
		)
	} else {
		attrs = append(attrs,
			xmlAttribute{"stickiness.type", "lb_cookie"},
			xmlAttribute{"load_balancing.algorithm.type", "round_robin"},
			xmlAttribute{"slow_start.duration_seconds", "0"},
		)
	}
	return attributesResult{Attributes: memberList[xmlAttribute]{Items: attrs}}, nil
}

// apiDescribeLoadBalancerAttributes answers for the fake load balancer in
// front of a target group: an NLB's cross-zone load balancing is off
// unless SetLoadBalancerCrossZone turned it on; an ALB's is always on.
func (s *Server) apiDescribeLoadBalancerAttributes(f url.Values) (any, error) {
	lb, err := required(f, "LoadBalancerArn")
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, tg := range s.groups {
		if tg.lbARN != lb {
			continue
		}
		attrs := []xmlAttribute{{"deletion_protection.enabled", "false"}}
		if tg.spec.LoadBalancerType == Network {
			attrs = append(attrs, xmlAttribute{"load_balancing.cross_zone.enabled", strconv.FormatBool(s.crossZone[lb])})
		} else {
			attrs = append(attrs, xmlAttribute{"idle_timeout.timeout_seconds", "60"}, xmlAttribute{"load_balancing.cross_zone.enabled", "true"})
		}
		return attributesResult{Attributes: memberList[xmlAttribute]{Items: attrs}}, nil
	}
	return nil, errorf("LoadBalancerNotFound", "load balancer %q not found", lb)
}

// SetLoadBalancerCrossZone sets an NLB's load_balancing.cross_zone.enabled
// (off by default, as in AWS).
func (s *Server) SetLoadBalancerCrossZone(lbARN string, on bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.crossZone[lbARN] = on
}

func (s *Server) apiDescribeTargetHealth(f url.Values) (any, error) {
	arn, err := required(f, "TargetGroupArn")
	if err != nil {
		return nil, err
	}
	want, err := targetMembers(f)
	if err != nil {
		return nil, err
	}
	rows, err := s.describeHealth(arn, want)
	if err != nil {
		return nil, err
	}
	res := describeTargetHealthResult{}
	for _, r := range rows {
		x := xmlTargetHealthDescription{
			Target:       xmlTargetDescription{ID: r.target.ID, Port: r.target.Port},
			TargetHealth: xmlTargetHealth{State: r.state, Reason: r.reason, Description: r.desc},
		}
		if r.registered {
			x.HealthCheckPort = strconv.Itoa(int(r.target.Port))
			if r.checkPort != 0 {
				x.HealthCheckPort = strconv.Itoa(int(r.checkPort))
			}
		}
		res.TargetHealthDescriptions.Items = append(res.TargetHealthDescriptions.Items, x)
	}
	return res, nil
}

func (s *Server) apiRegisterTargets(f url.Values) (any, error) {
	arn, err := required(f, "TargetGroupArn")
	if err != nil {
		return nil, err
	}
	ts, err := targetMembers(f)
	if err != nil {
		return nil, err
	}
	return emptyResult{}, s.registerTargets(arn, ts)
}

func (s *Server) apiDeregisterTargets(f url.Values) (any, error) {
	arn, err := required(f, "TargetGroupArn")
	if err != nil {
		return nil, err
	}
	ts, err := targetMembers(f)
	if err != nil {
		return nil, err
	}
	return emptyResult{}, s.deregisterTargets(arn, ts)
}

// healthCheckPort is a group's HealthCheckPort as the API writes it.
func healthCheckPort(p int32) string {
	if p == 0 {
		return "traffic-port"
	}
	return strconv.Itoa(int(p))
}
