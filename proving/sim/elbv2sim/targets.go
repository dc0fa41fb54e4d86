package elbv2sim

// This file is long because it holds one target group's whole life as AWS
// shows it (registration, health checks, draining, deregistration delay):
// the states move together under one lock.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"sort"
	"strconv"
	"time"
)

// LoadBalancerType is the kind of load balancer a target group is attached to.
type LoadBalancerType string

// Load balancer types.
const (
	Application LoadBalancerType = "application" // ALB: protocol HTTP
	Network     LoadBalancerType = "network"     // NLB: protocol TCP
)

// Target types accepted by [TargetGroupSpec.TargetType] and CreateTargetGroup.
const (
	TargetTypeIP       = "ip"
	TargetTypeInstance = "instance"
)

// TargetGroupSpec describes a target group created through the Go API.
// Zero fields take the defaults given beside them.
type TargetGroupSpec struct {
	Name             string           // 1–32 letters, digits or hyphens
	LoadBalancerType LoadBalancerType // default Application; decides Protocol and the fake load balancer ARN
	Port             int32            // default port of targets registered without one

	// TargetType is TargetTypeIP (default) or TargetTypeInstance. An ip
	// target's Id must be an IP address. An instance target's Id may be
	// anything, but only an IP address (or "localhost") is health-checked:
	// the lab gives node addresses; anything else (e.g. "i-0abc…") fails
	// its checks, so the emulator never resolves names.
	TargetType string
	// PreserveClientIP sets an NLB ip group's preserve_client_ip.enabled,
	// false by default as in AWS for TCP ip targets; instance groups keep
	// their clients' addresses always (AWS's default for them).
	PreserveClientIP bool
	// CrossZone is the group's load_balancing.cross_zone.enabled: "true",
	// "false", or "" for AWS's default, "use_load_balancer_configuration".
	CrossZone string

	HealthCheckPath     string        // default "/"
	HealthCheckPort     int32         // 0: the target's own port (AWS's "traffic-port")
	HealthCheckInterval time.Duration // default 5s; any > 0 (AWS: 5–300 s)
	HealthCheckTimeout  time.Duration // default 2s
	HealthyThreshold    int           // default 2
	UnhealthyThreshold  int           // default 2

	// DeregistrationDelay is how long a target stays draining. Zero means the
	// AWS default, 300s; use a tiny value such as time.Nanosecond for an
	// (almost) immediate removal.
	DeregistrationDelay time.Duration
}

// Target is a registered target: an IP address (or instance id) and a port.
type Target struct {
	ID   string
	Port int32
}

// State is a target's health state as DescribeTargetHealth reports it.
type State string

// Target states. StateUnhealthyDraining and StateUnavailable exist in the AWS
// API but this emulator never enters them.
const (
	StateInitial           State = "initial"
	StateHealthy           State = "healthy"
	StateUnhealthy         State = "unhealthy"
	StateUnhealthyDraining State = "unhealthy.draining"
	StateUnused            State = "unused"
	StateDraining          State = "draining"
	StateUnavailable       State = "unavailable"
)

// Reason codes (TargetHealth.Reason) the emulator produces.
const (
	ReasonRegistrationInProgress   = "Elb.RegistrationInProgress"
	ReasonInitialHealthChecking    = "Elb.InitialHealthChecking"
	ReasonFailedHealthChecks       = "Target.FailedHealthChecks"
	ReasonTimeout                  = "Target.Timeout"
	ReasonResponseCodeMismatch     = "Target.ResponseCodeMismatch"
	ReasonNotRegistered            = "Target.NotRegistered"
	ReasonDeregistrationInProgress = "Target.DeregistrationInProgress"
)

// Event is one change of a target's state or reason.
//
// From is "" for a new registration. A target that vanishes after draining
// yields To=StateUnused with Reason Target.NotRegistered. An event is also
// emitted when only the reason changes within a state, which happens for
// initial (Elb.RegistrationInProgress → Elb.InitialHealthChecking when the
// first health check starts) and for unhealthy (e.g. Target.Timeout →
// Target.ResponseCodeMismatch); there From == To.
type Event struct {
	TargetGroupARN string
	Target         Target
	From, To       State
	Reason         string
	// Description is AWS's TargetHealth.Description for the new state,
	// e.g. "Health checks failed with these codes: [503]".
	Description string
	At          time.Time
}

// APIError is an ELB API error, as returned by the Go API and sent over the
// wire as an ErrorResponse.
type APIError struct {
	Code    string // e.g. "TargetGroupNotFound", "ValidationError"
	Message string
	status  int // HTTP status; 0 means 400
}

func (e *APIError) Error() string { return e.Code + ": " + e.Message }

func errorf(code, format string, args ...any) *APIError {
	return &APIError{Code: code, Message: fmt.Sprintf(format, args...)}
}

// ErrClosed is returned by the Go API after [Server.Close].
var ErrClosed = errors.New("elbv2sim: server closed")

// targetGroup is immutable after creation except for targets, which is
// guarded by Server.mu.
type targetGroup struct {
	arn      string
	spec     TargetGroupSpec // defaults applied
	protocol string
	lbARN    string
	targets  map[Target]*target
}

type target struct {
	state          State
	reason, desc   string
	okRun, failRun int // consecutive health-check results

	// gen identifies the current registration or drain (server-wide unique),
	// so a health-check loop or drain timer that lost a race with a newer
	// register/deregister recognises itself as stale and does nothing.
	gen   uint64
	stop  context.CancelFunc // stops the health-check loop; nil while draining
	drain *time.Timer        // removes the target when draining ends
}

const (
	fakeRegion  = "us-east-1"
	fakeAccount = "123456789012"
	fakeVPC     = "vpc-0123456789abcdef0"
)

func (spec TargetGroupSpec) withDefaults() (TargetGroupSpec, error) {
	if err := validName(spec.Name); err != nil {
		return spec, err
	}
	switch spec.LoadBalancerType {
	case "":
		spec.LoadBalancerType = Application
	case Application, Network:
	default:
		return spec, errorf("ValidationError", "unsupported load balancer type %q", spec.LoadBalancerType)
	}
	if spec.Port < 1 || spec.Port > 65535 {
		return spec, errorf("ValidationError", "port %d is not between 1 and 65535", spec.Port)
	}
	switch spec.TargetType {
	case "":
		spec.TargetType = TargetTypeIP
	case TargetTypeIP, TargetTypeInstance:
	default:
		return spec, errorf("ValidationError", "target type %q is not supported by the emulator (ip, instance)", spec.TargetType)
	}
	if spec.HealthCheckPath == "" {
		spec.HealthCheckPath = "/"
	}
	if spec.HealthCheckPath[0] != '/' {
		return spec, errorf("ValidationError", "health check path %q must begin with '/'", spec.HealthCheckPath)
	}
	durations := []struct {
		d   *time.Duration
		def time.Duration
		n   string
	}{
		{&spec.HealthCheckInterval, 5 * time.Second, "health check interval"},
		{&spec.HealthCheckTimeout, 2 * time.Second, "health check timeout"},
		{&spec.DeregistrationDelay, 300 * time.Second, "deregistration delay"},
	}
	for _, x := range durations {
		if *x.d < 0 {
			return spec, errorf("ValidationError", "%s must not be negative", x.n)
		}
		if *x.d == 0 {
			*x.d = x.def
		}
	}
	for _, x := range []*int{&spec.HealthyThreshold, &spec.UnhealthyThreshold} {
		if *x < 0 {
			return spec, errorf("ValidationError", "threshold counts must not be negative")
		}
		if *x == 0 {
			*x = 2
		}
	}
	return spec, nil
}

func validName(n string) error {
	if len(n) < 1 || len(n) > 32 || n[0] == '-' || n[len(n)-1] == '-' {
		return errorf("ValidationError", "target group name %q must be 1–32 characters and must not begin or end with a hyphen", n)
	}
	for _, c := range n {
		if !(c == '-' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z') {
			return errorf("ValidationError", "target group name %q may contain only letters, digits and hyphens", n)
		}
	}
	return nil
}

// CreateTargetGroup creates a target group, or returns the ARN of the
// existing one if a group of that name with the same settings exists (as AWS
// does); a group of that name with other settings is DuplicateTargetGroupName.
// It bypasses rate limits, latency and Calls: it is the lab's hand, not an API
// caller.
func (s *Server) CreateTargetGroup(spec TargetGroupSpec) (arn string, err error) {
	tg, err := s.createTargetGroup(spec)
	if err != nil {
		return "", err
	}
	return tg.arn, nil
}

func (s *Server) createTargetGroup(spec TargetGroupSpec) (*targetGroup, error) {
	spec, err := spec.withDefaults()
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, ErrClosed
	}
	if arn, ok := s.byName[spec.Name]; ok {
		tg := s.groups[arn]
		if tg.spec != spec {
			return nil, errorf("DuplicateTargetGroupName", "A target group with the same name '%s' exists, but with different settings", spec.Name)
		}
		return tg, nil
	}
	s.seq++
	// The id part of an ARN is 16 hex digits in AWS; derive it from a
	// sequence number so runs are reproducible.
	id := fmt.Sprintf("%016x", s.seq*0x9e3779b97f4a7c15)
	lbKind, proto := "app", "HTTP"
	if spec.LoadBalancerType == Network {
		lbKind, proto = "net", "TCP"
	}
	prefix := "arn:aws:elasticloadbalancing:" + fakeRegion + ":" + fakeAccount + ":"
	tg := &targetGroup{
		arn:      prefix + "targetgroup/" + spec.Name + "/" + id,
		spec:     spec,
		protocol: proto,
		lbARN:    prefix + "loadbalancer/" + lbKind + "/" + spec.Name + "/" + id,
		targets:  map[Target]*target{},
	}
	s.groups[tg.arn] = tg
	s.byName[spec.Name] = tg.arn
	s.order = append(s.order, tg.arn)
	return tg, nil
}

// RegisterTargets registers targets as the RegisterTargets action does (a
// target with Port 0 gets the group's port). Like [Server.CreateTargetGroup]
// it bypasses rate limits, latency and Calls.
func (s *Server) RegisterTargets(arn string, targets ...Target) error {
	return s.registerTargets(arn, targets)
}

// DeregisterTargets deregisters targets as the DeregisterTargets action does.
// It bypasses rate limits, latency and Calls.
func (s *Server) DeregisterTargets(arn string, targets ...Target) error {
	return s.deregisterTargets(arn, targets)
}

// Targets returns a snapshot of the registered targets of a group (draining
// ones included, vanished ones not); nil if the group does not exist.
func (s *Server) Targets(arn string) map[Target]State {
	s.mu.Lock()
	defer s.mu.Unlock()
	tg := s.groups[arn]
	if tg == nil {
		return nil
	}
	m := make(map[Target]State, len(tg.targets))
	for k, t := range tg.targets {
		m[k] = t.state
	}
	return m
}

// groupLocked finds a group; s.mu must be held.
func (s *Server) groupLocked(arn string) (*targetGroup, error) {
	if s.closed {
		return nil, ErrClosed
	}
	tg := s.groups[arn]
	if tg == nil {
		return nil, errorf("TargetGroupNotFound", "Target groups '%s' not found", arn)
	}
	return tg, nil
}

// resolveTargets validates targets and fills in the group's port, before
// anything changes, so that a request with one bad target changes nothing.
func resolveTargets(tg *targetGroup, targets []Target) ([]Target, error) {
	if len(targets) == 0 {
		return nil, errorf("ValidationError", "at least one target must be given")
	}
	out := make([]Target, len(targets))
	for i, t := range targets {
		if t.ID == "" {
			return nil, errorf("ValidationError", "target id must not be empty")
		}
		if t.Port == 0 {
			t.Port = tg.spec.Port
		}
		if t.Port < 1 || t.Port > 65535 {
			return nil, errorf("ValidationError", "port %d is not between 1 and 65535", t.Port)
		}
		if tg.spec.TargetType == TargetTypeIP && net.ParseIP(t.ID) == nil {
			return nil, errorf("InvalidTarget", "The IP address '%s' is not a valid IPv4 or IPv6 address", t.ID)
		}
		out[i] = t
	}
	return out, nil
}

func (s *Server) registerTargets(arn string, targets []Target) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	tg, err := s.groupLocked(arn)
	if err != nil {
		return err
	}
	targets, err = resolveTargets(tg, targets)
	if err != nil {
		return err
	}
	for _, key := range targets {
		t := tg.targets[key]
		switch {
		case t == nil:
			t = &target{}
			tg.targets[key] = t
		case t.state == StateDraining:
			// Re-registration cancels the drain and starts over.
			t.drain.Stop()
			t.drain = nil
		default:
			continue // already registered: no-op, as in AWS
		}
		t.gen = s.nextGenLocked()
		t.okRun, t.failRun = 0, 0
		s.setLocked(tg, key, t, StateInitial, ReasonRegistrationInProgress, "Target registration is in progress")
		s.startChecksLocked(tg, key, t)
	}
	return nil
}

func (s *Server) deregisterTargets(arn string, targets []Target) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	tg, err := s.groupLocked(arn)
	if err != nil {
		return err
	}
	targets, err = resolveTargets(tg, targets)
	if err != nil {
		return err
	}
	for _, key := range targets {
		t := tg.targets[key]
		// Deregistering a target that is not registered (or already
		// draining) is accepted and does nothing: callers such as the LBC
		// retry deregistrations, and failing them would only add noise.
		if t == nil || t.state == StateDraining {
			continue
		}
		t.stop()
		t.stop = nil
		t.gen = s.nextGenLocked()
		t.okRun, t.failRun = 0, 0
		s.setLocked(tg, key, t, StateDraining, ReasonDeregistrationInProgress, "Target deregistration is in progress")
		gen := t.gen
		t.drain = time.AfterFunc(tg.spec.DeregistrationDelay, func() { s.finishDrain(tg, key, gen) })
	}
	return nil
}

func (s *Server) finishDrain(tg *targetGroup, key Target, gen uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	t := tg.targets[key]
	if s.closed || t == nil || t.gen != gen {
		return
	}
	delete(tg.targets, key)
	s.emitLocked(Event{TargetGroupARN: tg.arn, Target: key, From: t.state, To: StateUnused, Reason: ReasonNotRegistered, At: s.now()})
}

func (s *Server) nextGenLocked() uint64 {
	s.gen++
	return s.gen
}

// setLocked moves a target to a state and emits an Event if the state or the
// reason changed (a new description alone is not an event).
func (s *Server) setLocked(tg *targetGroup, key Target, t *target, to State, reason, desc string) {
	from := t.state
	changed := from != to || t.reason != reason
	t.state, t.reason, t.desc = to, reason, desc
	if changed {
		s.emitLocked(Event{TargetGroupARN: tg.arn, Target: key, From: from, To: to, Reason: reason, Description: desc, At: s.now()})
	}
}

// startChecksLocked starts the health-check loop of the target's current
// registration. s.mu must be held and the server open, so that wg.Add never
// races with Close's wg.Wait.
func (s *Server) startChecksLocked(tg *targetGroup, key Target, t *target) {
	ctx, cancel := context.WithCancel(s.ctx)
	t.stop = cancel
	s.wg.Add(1)
	go s.checkLoop(ctx, tg, key, t.gen)
}

// checkResult is the outcome of one health check.
type checkResult struct {
	ok           bool
	reason, desc string
}

// checkLoop runs health checks every interval until the registration ends.
// The first check comes one interval after registration, so the
// RegistrationInProgress phase is observable.
func (s *Server) checkLoop(ctx context.Context, tg *targetGroup, key Target, gen uint64) {
	defer s.wg.Done()
	checkable := key.ID == "localhost" || net.ParseIP(key.ID) != nil
	tick := time.NewTicker(tg.spec.HealthCheckInterval)
	defer tick.Stop()
	for n := 0; ; n++ {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		s.update(tg, key, gen, func(t *target) {
			if t.state == StateInitial && t.reason == ReasonRegistrationInProgress {
				s.setLocked(tg, key, t, StateInitial, ReasonInitialHealthChecking, "Initial health checks in progress")
			}
		})
		res := checkResult{reason: ReasonFailedHealthChecks, desc: "Health checks failed (the emulator checks IP addresses only)"}
		if checkable {
			res = s.check(ctx, s.checkClient(tg, n), s.checkURL(tg, key), tg.spec.HealthCheckTimeout)
		}
		if ctx.Err() != nil {
			return // deregistered or closed while checking: the result is moot
		}
		s.update(tg, key, gen, func(t *target) { s.applyLocked(tg, key, t, res) })
	}
}

// checkClient is the client of a target's n-th health check: from the
// load balancer's nodes' addresses in turn, once they are known and the
// emulator runs its own checks (Config.HTTPClient).
func (s *Server) checkClient(tg *targetGroup, n int) *http.Client {
	s.mu.Lock()
	defer s.mu.Unlock()
	nodes := s.nodes[tg.lbARN]
	if s.transport == nil || len(nodes) == 0 {
		return s.client
	}
	addr := nodes[n%len(nodes)]
	c := s.fromNode[addr]
	if c == nil {
		if s.fromNode == nil {
			s.fromNode = map[netip.Addr]*http.Client{}
		}
		tr := s.transport.Clone()
		tr.DialContext = (&net.Dialer{LocalAddr: net.TCPAddrFromAddrPort(netip.AddrPortFrom(addr, 0))}).DialContext
		c = &http.Client{Transport: tr, CheckRedirect: s.client.CheckRedirect}
		s.fromNode[addr] = c
	}
	return c
}

// checkURL is where the next health check of the target goes: its port,
// or the group's health check port (which SetHealthCheckPort may change
// between checks).
func (s *Server) checkURL(tg *targetGroup, key Target) string {
	s.mu.Lock()
	port, path := key.Port, tg.spec.HealthCheckPath
	if tg.spec.HealthCheckPort != 0 {
		port = tg.spec.HealthCheckPort
	}
	s.mu.Unlock()
	return "http://" + net.JoinHostPort(key.ID, strconv.Itoa(int(port))) + path
}

// SetHealthCheckPort sets the group's health check port (0: each target's
// own), as ModifyTargetGroup does: the AWS Load Balancer Controller points
// an instance group of a Service with the Local traffic policy at the
// Service's healthCheckNodePort. It applies from each target's next check.
func (s *Server) SetHealthCheckPort(arn string, port int32) error {
	if port < 0 || port > 65535 {
		return errorf("ValidationError", "health check port %d is not between 1 and 65535", port)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	tg, ok := s.groups[arn]
	if !ok {
		return errorf("TargetGroupNotFound", "target group %q not found", arn)
	}
	tg.spec.HealthCheckPort = port
	return nil
}

// update runs f on the target if gen is still its current registration.
func (s *Server) update(tg *targetGroup, key Target, gen uint64, f func(*target)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if t := tg.targets[key]; !s.closed && t != nil && t.gen == gen && t.state != StateDraining {
		f(t)
	}
}

func (s *Server) applyLocked(tg *targetGroup, key Target, t *target, res checkResult) {
	if res.ok {
		t.okRun, t.failRun = t.okRun+1, 0
		if t.state != StateHealthy && t.okRun >= tg.spec.HealthyThreshold {
			s.setLocked(tg, key, t, StateHealthy, "", "")
		}
		return
	}
	t.okRun, t.failRun = 0, t.failRun+1
	if t.state == StateUnhealthy || t.failRun >= tg.spec.UnhealthyThreshold {
		// Once unhealthy, the reason follows the latest failure, as in AWS.
		s.setLocked(tg, key, t, StateUnhealthy, res.reason, res.desc)
	}
}

// check performs one HTTP GET health check. Any 2xx is a success (AWS's
// matcher is configurable; the emulator's is fixed at 200-299).
func (s *Server) check(ctx context.Context, client *http.Client, url string, timeout time.Duration) checkResult {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return checkResult{reason: ReasonFailedHealthChecks, desc: "Health checks failed"}
	}
	req.Header.Set("User-Agent", "ELB-HealthChecker/2.0")
	resp, err := client.Do(req)
	if err != nil {
		var ne net.Error
		if errors.Is(err, context.DeadlineExceeded) || errors.As(err, &ne) && ne.Timeout() {
			return checkResult{reason: ReasonTimeout, desc: "Request timed out"}
		}
		return checkResult{reason: ReasonFailedHealthChecks, desc: "Health checks failed"}
	}
	// Drain a little so small bodies do not count as errors on the target's
	// side; a health check has no use for the body.
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return checkResult{reason: ReasonResponseCodeMismatch, desc: fmt.Sprintf("Health checks failed with these codes: [%d]", resp.StatusCode)}
	}
	return checkResult{ok: true}
}

// subscriber is one Subscribe channel.
type subscriber struct {
	ch chan Event
}

// Subscribe returns every target event from now on, in order. The channel is
// buffered (Config.EventBuffer); if a subscriber falls that far behind, later
// events are dropped for it (never blocking the emulator) and counted in
// [Server.DroppedEvents]. cancel, and Close, close the channel.
func (s *Server) Subscribe() (events <-chan Event, cancel func()) {
	sub := &subscriber{ch: make(chan Event, s.cfg.EventBuffer)}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		close(sub.ch)
		return sub.ch, func() {}
	}
	s.subs[sub] = struct{}{}
	return sub.ch, func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		if _, ok := s.subs[sub]; ok {
			delete(s.subs, sub)
			close(sub.ch)
		}
	}
}

// DroppedEvents is the number of events dropped because a subscriber's
// buffer was full, over all subscribers.
func (s *Server) DroppedEvents() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.dropped
}

// emitLocked sends under s.mu, which is what keeps each subscriber's events
// in the order the state changes happened.
func (s *Server) emitLocked(ev Event) {
	for sub := range s.subs {
		select {
		case sub.ch <- ev:
		default:
			s.dropped++
		}
	}
}

// healthDescription is one row of DescribeTargetHealth.
type healthDescription struct {
	target       Target
	registered   bool
	checkPort    int32 // the group's health check port; 0: the target's
	state        State
	reason, desc string
}

// describeHealth answers DescribeTargetHealth. With no targets it lists every
// registered target, sorted by Id then Port. Asked for by Id, a target that is
// not registered (never was, or has vanished after draining) answers unused /
// Target.NotRegistered; a requested target without a port means the group's
// port, as for registration.
func (s *Server) describeHealth(arn string, want []Target) ([]healthDescription, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	tg, err := s.groupLocked(arn)
	if err != nil {
		return nil, err
	}
	var out []healthDescription
	row := func(key Target) healthDescription {
		if t := tg.targets[key]; t != nil {
			return healthDescription{target: key, registered: true, checkPort: tg.spec.HealthCheckPort, state: t.state, reason: t.reason, desc: t.desc}
		}
		return healthDescription{target: key, state: StateUnused, reason: ReasonNotRegistered, desc: "Target is not registered to the target group"}
	}
	if len(want) == 0 {
		keys := make([]Target, 0, len(tg.targets))
		for k := range tg.targets {
			keys = append(keys, k)
		}
		sort.Slice(keys, func(i, j int) bool {
			if keys[i].ID != keys[j].ID {
				return keys[i].ID < keys[j].ID
			}
			return keys[i].Port < keys[j].Port
		})
		for _, k := range keys {
			out = append(out, row(k))
		}
		return out, nil
	}
	for _, k := range want {
		if k.ID == "" {
			return nil, errorf("ValidationError", "target id must not be empty")
		}
		if k.Port == 0 {
			k.Port = tg.spec.Port
		}
		out = append(out, row(k))
	}
	return out, nil
}
