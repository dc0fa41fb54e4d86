package api

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestVerdictJSON(t *testing.T) {
	since := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	tail := since.Add(20 * time.Second)
	v := Verdict{
		Pod: "web-0", Namespace: "shop", UID: "abc-123",
		Released: true, Reason: ReasonDrained, Waited: Duration(12500 * time.Millisecond),
		Routes: []Route{
			{Kind: "endpointslice", Name: "web-x7k2p", State: "closed", Since: since, TailEnds: &tail},
			{Kind: "targetgroup", Name: "tg-web", State: "draining", Detail: "arn:aws:elasticloadbalancing:eu-west-1:1:targetgroup/tg-web/1"},
		},
		Message: "all routes closed",
	}
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"pod":"web-0","namespace":"shop","uid":"abc-123","released":true,"reason":"drained","waited":"12.5s",` +
		`"routes":[{"kind":"endpointslice","name":"web-x7k2p","state":"closed","since":"2026-01-02T03:04:05Z","tail_ends":"2026-01-02T03:04:25Z"},` +
		`{"kind":"targetgroup","name":"tg-web","state":"draining","detail":"arn:aws:elasticloadbalancing:eu-west-1:1:targetgroup/tg-web/1"}],` +
		`"message":"all routes closed"}`
	if string(b) != want {
		t.Errorf("got  %s\nwant %s", b, want)
	}
	var back Verdict
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back, v) {
		t.Errorf("round trip: got %+v, want %+v", back, v)
	}

	// A waiting verdict keeps released and waited, drops what is empty.
	b, _ = json.Marshal(Verdict{Pod: "p", Namespace: "n"})
	if string(b) != `{"pod":"p","namespace":"n","released":false,"waited":"0s"}` {
		t.Errorf("empty verdict: %s", b)
	}
}

func TestDurationRejectsNonStrings(t *testing.T) {
	for _, in := range []string{`{"waited":12.5}`, `{"waited":"12.5"}`, `{"waited":"soon"}`} {
		var v Verdict
		err := json.Unmarshal([]byte(in), &v)
		if err == nil {
			t.Errorf("%s: accepted as %v", in, v.Waited)
		}
	}
	var v Verdict
	if err := json.Unmarshal([]byte(`{"waited":"1m2.5s"}`), &v); err != nil || time.Duration(v.Waited) != 62500*time.Millisecond {
		t.Errorf("1m2.5s: got %v, %v", v.Waited, err)
	}
	if err := json.Unmarshal([]byte(`{"waited":"soon"}`), &v); err == nil || !strings.Contains(err.Error(), "12.5s") {
		t.Errorf("error should show the expected form: %v", err)
	}
}

func TestRouteString(t *testing.T) {
	if got := (Route{Kind: "targetgroup", Name: "tg-web", State: "draining"}).String(); got != "targetgroup/tg-web draining" {
		t.Errorf("got %q", got)
	}
}
