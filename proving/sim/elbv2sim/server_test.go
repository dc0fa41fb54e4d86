package elbv2sim

import (
	"encoding/xml"
	"io"
	"net/http"
	"net/url"
	"reflect"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	elbv2 "github.com/aws/aws-sdk-go-v2/service/elasticloadbalancingv2"
	"github.com/aws/aws-sdk-go-v2/service/elasticloadbalancingv2/types"
)

// never refills within a test
const frozen = 1e-9

func TestThrottling(t *testing.T) {
	s, _ := start(t, Config{Describe: BucketConfig{Capacity: 1, RefillPerSecond: frozen}})
	once := s.Client(noBackoff, oneAttempt)
	retrying := s.Client(noBackoff) // the SDK's default 3 attempts
	arn, err := s.CreateTargetGroup(TargetGroupSpec{Name: "web", Port: 80, HealthCheckInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	in := &elbv2.DescribeTargetHealthInput{TargetGroupArn: aws.String(arn)}

	if _, err := once.DescribeTargetHealth(bg, in); err != nil {
		t.Fatalf("first call: %v", err)
	}
	if _, err := once.DescribeTargetHealth(bg, in); apiCode(err) != "Throttling" {
		t.Fatalf("burst exhausted, one attempt: err = %v, want Throttling", err)
	}
	if _, err := retrying.DescribeTargetHealth(bg, in); apiCode(err) != "Throttling" {
		t.Fatalf("burst exhausted, default retries: err = %v, want Throttling", err)
	}
	if got := s.Calls()["DescribeTargetHealth"]; !reflect.DeepEqual(got, map[string]int{"OK": 1, "Throttling": 4}) {
		t.Errorf("calls = %v, want OK 1, Throttling 1+3", got)
	}

	// Registration bucket: a throttled call changes nothing.
	s.SetThrottle(BucketConfig{}, BucketConfig{Capacity: 1, RefillPerSecond: frozen}, BucketConfig{})
	reg := func(port int32) error {
		_, err := once.RegisterTargets(bg, &elbv2.RegisterTargetsInput{TargetGroupArn: aws.String(arn),
			Targets: []types.TargetDescription{{Id: aws.String("127.0.0.1"), Port: aws.Int32(port)}}})
		return err
	}
	if err := reg(1); err != nil {
		t.Fatal(err)
	}
	if err := reg(2); apiCode(err) != "Throttling" {
		t.Fatalf("second registration: err = %v, want Throttling", err)
	}
	_, err = once.DeregisterTargets(bg, &elbv2.DeregisterTargetsInput{TargetGroupArn: aws.String(arn),
		Targets: []types.TargetDescription{{Id: aws.String("127.0.0.1"), Port: aws.Int32(1)}}})
	if apiCode(err) != "Throttling" {
		t.Fatalf("deregistration: err = %v, want Throttling", err)
	}
	if got := s.Targets(arn); !reflect.DeepEqual(got, map[Target]State{{"127.0.0.1", 1}: StateInitial}) {
		t.Errorf("targets after throttled calls = %v", got)
	}
	// Describe is not limited by the registration bucket.
	if _, err := once.DescribeTargetHealth(bg, in); err != nil {
		t.Errorf("describe after registration throttling: %v", err)
	}

	// Account bucket: shared by every action.
	s.SetThrottle(BucketConfig{}, BucketConfig{}, BucketConfig{Capacity: 2, RefillPerSecond: frozen})
	if _, err := once.DescribeTargetGroups(bg, &elbv2.DescribeTargetGroupsInput{}); err != nil {
		t.Fatal(err)
	}
	if err := reg(3); err != nil {
		t.Fatal(err)
	}
	if _, err := once.CreateTargetGroup(bg, &elbv2.CreateTargetGroupInput{Name: aws.String("x"), Protocol: types.ProtocolEnumHttp, Port: aws.Int32(80)}); apiCode(err) != "Throttling" {
		t.Errorf("account bucket exhausted: err = %v, want Throttling", err)
	}
}

func TestLimiter(t *testing.T) {
	t0 := time.Unix(1000, 0)
	var l limiter
	l.set(BucketConfig{Capacity: 1, RefillPerSecond: 10}, BucketConfig{}, BucketConfig{Capacity: 2}, t0)
	steps := []struct {
		c    actionClass
		at   time.Duration
		want bool
	}{
		{classDescribe, 0, true},
		{classDescribe, 0, false},                      // describe empty: takes nothing from account
		{classOther, 0, true},                          // account had 1 left
		{classDescribe, 100 * time.Millisecond, false}, // describe refilled, account empty
		{classRegistration, time.Second, false},        // account never refills (rate 0)
	}
	for i, st := range steps {
		if got := l.allow(st.c, t0.Add(st.at)); got != st.want {
			t.Errorf("step %d: allow = %v, want %v", i, got, st.want)
		}
	}

	// Zero config = AWS defaults: a Describe burst of 40, refill 10/s.
	l.set(BucketConfig{}, BucketConfig{}, BucketConfig{}, t0)
	n := 0
	for l.allow(classDescribe, t0) {
		n++
	}
	if n != 40 {
		t.Errorf("default describe burst = %d, want 40", n)
	}
	if !l.allow(classDescribe, t0.Add(100*time.Millisecond)) || l.allow(classDescribe, t0.Add(100*time.Millisecond)) {
		t.Errorf("default refill is not one token per 100 ms")
	}
	l.set(BucketConfig{}, BucketConfig{}, BucketConfig{}, t0)
	n = 0
	for l.allow(classRegistration, t0) {
		n++
	}
	if n != 20 {
		t.Errorf("default registration burst = %d, want 20", n)
	}
}

func TestLatency(t *testing.T) {
	const lat = 200 * time.Millisecond
	s, _ := start(t, Config{Latency: map[string]time.Duration{"DescribeTargetGroups": lat}})
	c := s.Client(noBackoff)
	arn, err := s.CreateTargetGroup(TargetGroupSpec{Name: "web", Port: 80, HealthCheckInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	if _, err := c.DescribeTargetGroups(bg, &elbv2.DescribeTargetGroupsInput{}); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(t0); d < lat {
		t.Errorf("DescribeTargetGroups answered after %v, before its latency %v", d, lat)
	}

	// Latency comes before processing: a slow RegisterTargets takes
	// effect no earlier than its latency, and answers after that.
	s.SetLatency("RegisterTargets", lat)
	s.SetLatency("DescribeTargetGroups", 0)
	events, cancel := s.Subscribe()
	defer cancel()
	t0 = time.Now()
	regDone := make(chan error, 1)
	go func() {
		_, err := c.RegisterTargets(bg, &elbv2.RegisterTargetsInput{TargetGroupArn: aws.String(arn),
			Targets: []types.TargetDescription{{Id: aws.String("127.0.0.1"), Port: aws.Int32(1)}}})
		regDone <- err
	}()
	select {
	case <-events:
		if d := time.Since(t0); d < lat {
			t.Errorf("registration took effect after %v, before its latency %v", d, lat)
		}
	case <-time.After(waitLimit):
		t.Fatal("no registration event")
	}
	if err := <-regDone; err != nil {
		t.Fatal(err)
	}
	if d := time.Since(t0); d < lat {
		t.Errorf("RegisterTargets answered after %v, before its latency %v", d, lat)
	}
	// Removing the latency works; nothing asserted about speed.
	if _, err := c.DescribeTargetGroups(bg, &elbv2.DescribeTargetGroupsInput{}); err != nil {
		t.Fatal(err)
	}
}

func TestCalls(t *testing.T) {
	s, url := start(t, Config{})
	c := s.Client(noBackoff, oneAttempt)
	arn, err := s.CreateTargetGroup(TargetGroupSpec{Name: "web", Port: 80, HealthCheckInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if _, err := c.DescribeTargetHealth(bg, &elbv2.DescribeTargetHealthInput{TargetGroupArn: aws.String(arn)}); err != nil {
			t.Fatal(err)
		}
	}
	_, _ = c.DescribeTargetHealth(bg, &elbv2.DescribeTargetHealthInput{TargetGroupArn: aws.String("arn:nope")})
	_, _ = c.RegisterTargets(bg, &elbv2.RegisterTargetsInput{TargetGroupArn: aws.String(arn),
		Targets: []types.TargetDescription{{Id: aws.String("127.0.0.1"), Port: aws.Int32(0)}}})
	postForm(t, url, map[string][]string{"Action": {"Frobnicate"}})
	want := map[string]map[string]int{
		"DescribeTargetHealth": {"OK": 2, "TargetGroupNotFound": 1},
		"RegisterTargets":      {"ValidationError": 1},
		"Frobnicate":           {"InvalidAction": 1},
	}
	got := s.Calls()
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Calls = %v, want %v", got, want)
	}
	got["RegisterTargets"]["OK"] = 99 // a snapshot: no effect on the server
	if s.Calls()["RegisterTargets"]["OK"] != 0 {
		t.Errorf("Calls returned a live map")
	}
}

type errorResponse struct {
	XMLName xml.Name `xml:"ErrorResponse"`
	Error   struct {
		Type, Code, Message string
	}
	RequestID string `xml:"RequestId"`
}

func postForm(t *testing.T, base string, form url.Values) (*http.Response, []byte) {
	t.Helper()
	resp, err := http.PostForm(base+"/", form)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, body
}

// The wire format itself, without the SDK: malformed requests get a 400
// ErrorResponse, and a good one the documented envelope.
func TestWireFormat(t *testing.T) {
	s, base := start(t, Config{})
	arn, err := s.CreateTargetGroup(TargetGroupSpec{Name: "web", Port: 80, HealthCheckInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	v := APIVersion
	bad := []struct {
		form url.Values
		code string
	}{
		{url.Values{"Action": {"DescribeNothing"}, "Version": {v}}, "InvalidAction"},
		{url.Values{"Version": {v}}, "MissingAction"},
		{url.Values{"Action": {"DescribeTargetHealth"}, "Version": {"2012-06-01"}, "TargetGroupArn": {arn}}, "InvalidAction"},
		{url.Values{"Action": {"DescribeTargetHealth"}, "Version": {v}}, "ValidationError"},
		{url.Values{"Action": {"DescribeTargetHealth"}, "Version": {v}, "TargetGroupArn": {arn}, "Targets.member.1.Id": {"127.0.0.1"}, "Targets.member.1.Port": {"http"}}, "ValidationError"},
		{url.Values{"Action": {"RegisterTargets"}, "Version": {v}, "TargetGroupArn": {arn}}, "ValidationError"},
		{url.Values{"Action": {"DescribeTargetHealth"}, "Version": {v}, "TargetGroupArn": {arn + "x"}}, "TargetGroupNotFound"},
		{url.Values{"Action": {"DescribeTargetGroups"}, "Version": {v}, "Names.member.1": {"web"}, "TargetGroupArns.member.1": {arn}}, "ValidationError"},
		{url.Values{"Action": {"CreateTargetGroup"}, "Version": {v}, "Name": {"x"}, "Port": {"80"}}, "ValidationError"},
	}
	for _, tc := range bad {
		resp, body := postForm(t, base, tc.form)
		var er errorResponse
		if err := xml.Unmarshal(body, &er); err != nil {
			t.Errorf("%v: body %q: %v", tc.form, body, err)
			continue
		}
		if resp.StatusCode != http.StatusBadRequest || er.Error.Type != "Sender" || er.Error.Code != tc.code ||
			er.Error.Message == "" || er.RequestID == "" || resp.Header.Get("x-amzn-RequestId") != er.RequestID {
			t.Errorf("%v: status %d, %+v, header id %q; want 400 Sender %s", tc.form, resp.StatusCode, er, resp.Header.Get("x-amzn-RequestId"), tc.code)
		}
	}

	// Lists are read by index, not by position in the body.
	resp, body := postForm(t, base, url.Values{"Action": {"DescribeTargetHealth"}, "Version": {v}, "TargetGroupArn": {arn},
		"Targets.member.2.Id": {"127.0.0.2"}, "Targets.member.1.Id": {"127.0.0.1"}, "Targets.member.1.Port": {"81"}})
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	id := resp.Header.Get("x-amzn-RequestId")
	want := `<DescribeTargetHealthResponse xmlns="http://elasticloadbalancing.amazonaws.com/doc/2015-12-01/">` +
		`<DescribeTargetHealthResult><TargetHealthDescriptions>` +
		`<member><Target><Id>127.0.0.1</Id><Port>81</Port></Target><TargetHealth><State>unused</State><Reason>Target.NotRegistered</Reason><Description>Target is not registered to the target group</Description></TargetHealth></member>` +
		`<member><Target><Id>127.0.0.2</Id><Port>80</Port></Target><TargetHealth><State>unused</State><Reason>Target.NotRegistered</Reason><Description>Target is not registered to the target group</Description></TargetHealth></member>` +
		`</TargetHealthDescriptions></DescribeTargetHealthResult>` +
		`<ResponseMetadata><RequestId>` + id + `</RequestId></ResponseMetadata></DescribeTargetHealthResponse>`
	if id == "" || string(body) != want {
		t.Errorf("body\n%s\nwant\n%s", body, want)
	}

	// An empty list still has its wrapper.
	_, body = postForm(t, base, url.Values{"Action": {"DescribeTargetHealth"}, "Version": {v}, "TargetGroupArn": {arn}})
	if !strings.Contains(string(body), "<DescribeTargetHealthResult><TargetHealthDescriptions></TargetHealthDescriptions></DescribeTargetHealthResult>") {
		t.Errorf("empty listing: %s", body)
	}
}

// Close stops health checks, drain timers, latency waits, listeners and
// subscriptions: the goroutine count returns to where it was.
func TestCloseLeavesNoGoroutines(t *testing.T) {
	scenario := func() {
		var backends []*backend
		s := New(Config{Latency: map[string]time.Duration{"DescribeTargetGroups": time.Hour}})
		if _, err := s.Listen("127.0.0.1:0"); err != nil {
			t.Fatal(err)
		}
		hc := &http.Client{Transport: &http.Transport{Proxy: nil}}
		c := s.Client(noBackoff, oneAttempt, func(o *elbv2.Options) { o.HTTPClient = hc })
		arn, err := s.CreateTargetGroup(TargetGroupSpec{Name: "web", Port: 80,
			HealthCheckInterval: 20 * time.Millisecond, DeregistrationDelay: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		var tds []types.TargetDescription
		for range 3 {
			b := newBackend(t)
			backends = append(backends, b)
			tds = append(tds, types.TargetDescription{Id: aws.String(b.target().ID), Port: aws.Int32(b.target().Port)})
		}
		if _, err := c.RegisterTargets(bg, &elbv2.RegisterTargetsInput{TargetGroupArn: aws.String(arn), Targets: tds}); err != nil {
			t.Fatal(err)
		}
		for _, b := range backends {
			waitState(t, s, arn, b.target(), StateHealthy)
		}
		if err := s.DeregisterTargets(arn, backends[0].target()); err != nil { // leaves a drain timer
			t.Fatal(err)
		}
		events, _ := s.Subscribe()
		slow := make(chan error, 1)
		go func() { // stuck in injected latency until Close
			_, err := c.DescribeTargetGroups(bg, &elbv2.DescribeTargetGroupsInput{})
			slow <- err
		}()
		// Give the slow call time to reach its latency wait; if it has not,
		// it fails at the closed listener instead, which is fine too.
		time.Sleep(50 * time.Millisecond)

		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
		if err := s.Close(); err != nil {
			t.Errorf("second Close: %v", err)
		}
		select {
		case <-slow:
		case <-time.After(waitLimit):
			t.Fatal("a call waiting in injected latency outlived Close")
		}
		for range events {
		}
		if err := s.RegisterTargets(arn, backends[1].target()); err != ErrClosed {
			t.Errorf("RegisterTargets after Close = %v, want ErrClosed", err)
		}
		if _, err := s.Listen("127.0.0.1:0"); err != ErrClosed {
			t.Errorf("Listen after Close = %v, want ErrClosed", err)
		}
		for _, b := range backends {
			b.srv.Close()
		}
		hc.CloseIdleConnections()
	}

	scenario() // warm up: lazily started runtime/library goroutines are not leaks
	base := settledGoroutines()
	scenario()
	deadline := time.Now().Add(waitLimit)
	for runtime.NumGoroutine() > base {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			t.Fatalf("%d goroutines after Close, %d before:\n%s", runtime.NumGoroutine(), base, buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// settledGoroutines waits until the goroutine count stops falling (the warm-up
// run's connections and timers winding down) and returns it, so a leak in the
// measured run cannot hide behind the warm-up's stragglers.
func settledGoroutines() int {
	n, stable := runtime.NumGoroutine(), 0
	for deadline := time.Now().Add(waitLimit); stable < 10 && time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
		if m := runtime.NumGoroutine(); m < n {
			n, stable = m, 0
		} else {
			stable++
		}
	}
	return n
}

// TestCallsByCaller tells clients apart by the access key of their
// signature, as the lab does to count draingate's calls apart from the load
// balancer controller's.
func TestCallsByCaller(t *testing.T) {
	s, _ := start(t, Config{})
	keyed := func(id string) func(*elbv2.Options) {
		return func(o *elbv2.Options) { o.Credentials = credentials.NewStaticCredentialsProvider(id, "secret", "") }
	}
	gate, ctrl := s.Client(keyed("gate")), s.Client(keyed("controller"))
	arn, err := s.CreateTargetGroup(TargetGroupSpec{Name: "web", Port: 80, HealthCheckInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if _, err := gate.DescribeTargetHealth(bg, &elbv2.DescribeTargetHealthInput{TargetGroupArn: aws.String(arn)}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := ctrl.RegisterTargets(bg, &elbv2.RegisterTargetsInput{TargetGroupArn: aws.String(arn),
		Targets: []types.TargetDescription{{Id: aws.String("127.0.0.1"), Port: aws.Int32(1)}}}); err != nil {
		t.Fatal(err)
	}
	want := map[string]map[string]int{"gate": {"DescribeTargetHealth": 2}, "controller": {"RegisterTargets": 1}}
	if got := s.CallsBy(); !reflect.DeepEqual(got, want) {
		t.Errorf("CallsBy() = %v, want %v", got, want)
	}
}
