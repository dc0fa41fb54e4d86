package api

import (
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"net/url"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestParseDrainRequest(t *testing.T) {
	const uid = "3f1c2a9e-7b1d-4c8e-9a6f-0d2b4e6f8a10"
	ok := []struct {
		url  string
		want DrainRequest
	}{
		{"/v1/namespaces/default/pods/web-7d9f8-abcde/drain?uid=" + uid + "&wait=20s",
			DrainRequest{Namespace: "default", Pod: "web-7d9f8-abcde", UID: uid, Wait: 20 * time.Second}},
		{"/v1/namespaces/kube-system/pods/a.b.c/drain", DrainRequest{Namespace: "kube-system", Pod: "a.b.c"}},
		{"/v1/namespaces/n/pods/p/drain?wait=1m30s", DrainRequest{Namespace: "n", Pod: "p", Wait: 90 * time.Second}},
		{"/v1/namespaces/n/pods/p/drain?wait=0", DrainRequest{Namespace: "n", Pod: "p"}},
		// A static pod's UID is a hash, not a UUID.
		{"/v1/namespaces/n/pods/p/drain?uid=0123456789abcdef0123456789ABCDEF", DrainRequest{Namespace: "n", Pod: "p", UID: "0123456789abcdef0123456789ABCDEF"}},
		// Unknown parameters are ignored so a newer agent can ask an older server.
		{"/v1/namespaces/n/pods/p/drain?future=1", DrainRequest{Namespace: "n", Pod: "p"}},
		// Escapes decode before checks.
		{"/v1/namespaces/n/pods/%70/drain", DrainRequest{Namespace: "n", Pod: "p"}},
	}
	for _, c := range ok {
		got, err := ParseDrainRequest(http.MethodGet, mustURL(t, c.url))
		if err != nil {
			t.Errorf("%s: %v", c.url, err)
			continue
		}
		if got != c.want {
			t.Errorf("%s: got %+v, want %+v", c.url, got, c.want)
		}
	}

	// One source of 2 arrivals, the first 210 ms ago, in a watch of 900 ms
	// looked at every 100 ms; then its traffic-conns.
	const conns = "/v1/namespaces/n/pods/p/drain?traffic=1%3Bw%3D900%3Bs%3D10.0.0.1%2C80%2C2%2C210%2C100%2C110.210&traffic-every-us=100000&traffic-conns="
	bad := []struct {
		method, url string
		status      int
		mentions    string
	}{
		{"POST", "/v1/namespaces/n/pods/p/drain", 405, "POST"},
		{"HEAD", "/v1/namespaces/n/pods/p/drain", 405, "GET only"},
		{"GET", "/v1/namespaces/n/pods/p/drain/", 400, "not a drain path"},
		{"GET", "/v1/namespaces/n/pods/p", 400, "not a drain path"},
		{"GET", "/v2/namespaces/n/pods/p/drain", 400, "not a drain path"},
		{"GET", "/v1/namespaces/n/pods/a%2Fb/drain", 400, "not a drain path"},
		{"GET", "/v1/namespaces/N/pods/p/drain", 400, "namespace"},
		{"GET", "/v1/namespaces/" + strings.Repeat("a", 64) + "/pods/p/drain", 400, "namespace"},
		{"GET", "/v1/namespaces/a.b/pods/p/drain", 400, "namespace"},
		{"GET", "/v1/namespaces/n/pods/-p/drain", 400, "pod name"},
		{"GET", "/v1/namespaces/n/pods/p..q/drain", 400, "pod name"},
		{"GET", "/v1/namespaces/n/pods/" + strings.Repeat("a", 254) + "/drain", 400, "pod name"},
		{"GET", "/v1/namespaces//pods/p/drain", 400, "namespace"},
		{"GET", "/v1/namespaces/n/pods/p/drain?uid=xyz", 400, "uid"},
		{"GET", "/v1/namespaces/n/pods/p/drain?uid=" + strings.Repeat("a", 65), 400, "uid"},
		{"GET", "/v1/namespaces/n/pods/p/drain?uid=-", 400, "uid"},
		{"GET", "/v1/namespaces/n/pods/p/drain?wait=20", 400, "wait"},
		{"GET", "/v1/namespaces/n/pods/p/drain?wait=-1s", 400, "negative"},
		{"GET", "/v1/namespaces/n/pods/p/drain?wait=1s&wait=2s", 400, "2 times"},
		{"GET", "/v1/namespaces/n/pods/p/drain?uid=a;b", 400, "malformed"},
		{"GET", "/v1/namespaces/n/pods/p/drain?uid=%zz", 400, "malformed"},
		{"GET", "/v1/namespaces/n/pods/p/drain?traffic=1%3Bw%3D900&traffic-every-us=0", 400, "traffic-every-us"},
		{"GET", "/v1/namespaces/n/pods/p/drain?traffic=1%3Bw%3D900&traffic-every-us=1e5", 400, "traffic-every-us"},
		{"GET", "/v1/namespaces/n/pods/p/drain?traffic=1%3Bw%3D900&traffic-every-us=-100", 400, "traffic-every-us"},
		{"GET", "/v1/namespaces/n/pods/p/drain?traffic=1%3Bw%3D900&traffic-every-us=60000001", 400, "a minute"},
		{"GET", "/v1/namespaces/n/pods/p/drain?traffic=1%3Bw%3D900&traffic-every-us=1000000", 400, "longer than the watch"},
		{"GET", "/v1/namespaces/n/pods/p/drain?traffic=1%3Bw%3D900&traffic-every-us=1&traffic-every-us=2", 400, "2 times"},
		{"GET", "/v1/namespaces/n/pods/p/drain?traffic=1%3Bw%3D900&traffic-every-us=100000&traffic-looks=1.0.0.0", 400, "gives 1 sources' looks, the traffic 0"},
		{"GET", "/v1/namespaces/n/pods/p/drain?traffic=1%3Bw%3D900%3Bs%3D10.0.0.1%2C80%2C2%2C210%2C100%2C110.210&traffic-every-us=100000&traffic-looks=3.4.0.0", 400, "more pauses than looks"},
		{"GET", "/v1/namespaces/n/pods/p/drain?traffic=1%3Bw%3D900%3Bs%3D10.0.0.1%2C80%2C2%2C210%2C100%2C110.210&traffic-every-us=100000&traffic-looks=3.1.4.0", 400, "more recent looks"},
		{"GET", "/v1/namespaces/n/pods/p/drain?traffic=1%3Bw%3D900%3Bs%3D10.0.0.1%2C80%2C2%2C210%2C100%2C110.210&traffic-every-us=100000&traffic-looks=3.1.2", 400, "want looks.pauses"},
		{"GET", "/v1/namespaces/n/pods/p/drain?traffic=1%3Bw%3D900%3Bs%3D10.0.0.1%2C80%2C2%2C210%2C100%2C110.210&traffic-every-us=100000&traffic-looks=3.1.2.-1", 400, "not a count"},
		{"GET", "/v1/namespaces/n/pods/p/drain?traffic=1%3Bw%3D900%3Bs%3D10.0.0.1%2C80%2C2%2C210%2C100%2C110.210&traffic-every-us=100000&traffic-looks=3.1.2.1&traffic-looks=3.1.2.1", 400, "2 times"},
		{"GET", "/v1/namespaces/n/pods/p/drain?traffic=1%3Bw%3D900&traffic-every-us=100000&traffic-gaps=1.1", 400, "gives 1 sources' gaps, the traffic 0"},
		{"GET", "/v1/namespaces/n/pods/p/drain?traffic=1%3Bw%3D900%3Bs%3D10.0.0.1%2C80%2C2%2C210%2C100%2C110.210&traffic-every-us=100000&traffic-gaps=1.1.1", 400, "pairs of a count and a sum"},
		{"GET", "/v1/namespaces/n/pods/p/drain?traffic=1%3Bw%3D900%3Bs%3D10.0.0.1%2C80%2C2%2C210%2C100%2C110.210&traffic-every-us=100000&traffic-gaps=0.0.1.4", 400, "1 gaps of bin 1 cannot sum to 4"},
		{"GET", "/v1/namespaces/n/pods/p/drain?traffic=1%3Bw%3D900%3Bs%3D10.0.0.1%2C80%2C2%2C210%2C100%2C110.210&traffic-every-us=100000&traffic-gaps=2.1", 400, "cannot sum"},
		{"GET", "/v1/namespaces/n/pods/p/drain?traffic=1%3Bw%3D900%3Bs%3D10.0.0.1%2C80%2C2%2C210%2C100%2C110.210&traffic-every-us=100000&traffic-gaps=1.x", 400, "not a count"},
		{"GET", "/v1/namespaces/n/pods/p/drain?traffic=1%3Bw%3D900%3Bs%3D10.0.0.1%2C80%2C2%2C210%2C100%2C110.210&traffic-every-us=100000&traffic-looks=3.1.2.1&traffic-gaps=4.4", 400, "more gaps than looks"},
		{"GET", "/v1/namespaces/n/pods/p/drain?traffic=1%3Bw%3D900%3Bs%3D10.0.0.1%2C80%2C2%2C210%2C100%2C110.210&traffic-every-us=100000&traffic-gaps=1.1&traffic-gaps=1.1", 400, "2 times"},
		{"GET", "/v1/namespaces/n/pods/p/drain?traffic=1%3Bw%3D900&traffic-every-us=100000&traffic-conns=0", 400, "gives 1 sources' connections, the traffic 0"},
		{"GET", conns + "1%3B2", 400, "gives 2 sources' connections, the traffic 1"},
		{"GET", conns, 400, "want the count of open connections first"},
		{"GET", conns + "1.2", 400, "want the count of open connections first"},
		{"GET", conns + "x", 400, "not a count"},
		{"GET", conns + "-1", 400, "not a count"},
		{"GET", conns + "1,1,210,0", 400, "want open,arrivals,first,gap,ages,looks,gaps"},
		{"GET", conns + "1,0,210,0,210,0.0.0.0,", 400, "count from 1"},
		{"GET", conns + "1,1,1000,0,1000,0.0.0.0,", 400, "before the watch began"},
		{"GET", conns + "1,3,210,100,110.210,2.0.2.0,2.2", 400, "not among the source's 2"},
		{"GET", conns + "1,1,300,0,300,0.0.0.0,", 400, "not among the source's 2 since 210ms ago"},
		{"GET", conns + "1,2,210,100,110.210,1.2.1.0,1.1", 400, "more pauses than looks"},
		{"GET", conns + "1,2,210,100,110.210,1.0.1", 400, "want open,arrivals"},
		{"GET", conns + "1,2,210,100,110.210,1.0.1.0,2.2", 400, "more gaps than looks (1)"},
		{"GET", conns + "1,1,210,0,210,0.0.0.0,1.1", 400, "more gaps than looks (0)"},
		{"GET", conns + "1,2,210,100,110.210,2.0.2.0,1.3", 400, "cannot sum"},
		{"GET", conns + "1&traffic-conns=1", 400, "2 times"},
		{"GET", conns + strings.Repeat("1", 17<<10), 400, "bytes"},
	}
	for _, c := range bad {
		_, err := ParseDrainRequest(c.method, mustURL(t, c.url))
		var re *RequestError
		if !errors.As(err, &re) {
			t.Errorf("%s %s: got %v, want a *RequestError", c.method, c.url, err)
			continue
		}
		if re.Status != c.status || !strings.Contains(re.Message, c.mentions) {
			t.Errorf("%s %s: got %d %q, want %d mentioning %q", c.method, c.url, re.Status, re.Message, c.status, c.mentions)
		}
		if strings.ContainsAny(re.Message, "\r\n") || len(re.Message) > 400 {
			t.Errorf("%s %s: message is not one short line: %q", c.method, c.url, re.Message)
		}
	}
	if _, err := ParseDrainRequest("GET", nil); err == nil {
		t.Error("a nil URL was accepted")
	}
}

func TestDrainRequestURL(t *testing.T) {
	r := DrainRequest{Namespace: "shop", Pod: "web-0", UID: "3f1c2a9e-7b1d-4c8e-9a6f-0d2b4e6f8a10", Wait: 12500 * time.Millisecond}
	for _, base := range []string{"http://draingate.draingate-system.svc:8080", "http://draingate.draingate-system.svc:8080/"} {
		got := r.URL(base)
		want := "http://draingate.draingate-system.svc:8080/v1/namespaces/shop/pods/web-0/drain?uid=3f1c2a9e-7b1d-4c8e-9a6f-0d2b4e6f8a10&wait=12.5s"
		if got != want {
			t.Errorf("URL(%q) = %s, want %s", base, got, want)
		}
		back, err := ParseDrainRequest("GET", mustURL(t, got))
		if err != nil || back != r {
			t.Errorf("round trip of %s: got %+v, %v", got, back, err)
		}
	}
	if got := (DrainRequest{Namespace: "n", Pod: "p"}).URL("http://g"); got != "http://g/v1/namespaces/n/pods/p/drain" {
		t.Errorf("bare request URL = %s", got)
	}

	// The sampling interval travels beside the summary, in microseconds;
	// without a summary it means nothing and is ignored.
	tr := DrainRequest{Namespace: "n", Pod: "p", Traffic: &Traffic{Watched: 5 * time.Second, Every: 100125 * time.Microsecond}}
	got := tr.URL("http://g")
	if want := "http://g/v1/namespaces/n/pods/p/drain?traffic=1%3Bw%3D5000&traffic-every-us=100125"; got != want {
		t.Errorf("URL with traffic = %s, want %s", got, want)
	}
	back, err := ParseDrainRequest("GET", mustURL(t, got))
	if err != nil || !reflect.DeepEqual(back.Traffic, tr.Traffic) {
		t.Errorf("round trip of %s: got %+v, %v", got, back.Traffic, err)
	}
	if back, err := ParseDrainRequest("GET", mustURL(t, "http://g/v1/namespaces/n/pods/p/drain?traffic-every-us=100000")); err != nil || back.Traffic != nil {
		t.Errorf("an interval without a summary: got %+v, %v; want it ignored", back.Traffic, err)
	}

	// The look counts travel beside the interval, one entry per source;
	// without the interval they mean nothing and are ignored, as are
	// counts nobody made.
	src := func(addr string, n int, looks, recent Looks) SourceTraffic {
		return SourceTraffic{Addr: netip.MustParseAddr(addr), Port: 80, Arrivals: n, First: time.Second, Last: []time.Duration{10 * time.Millisecond}, MaxGap: 100 * time.Millisecond, Looks: looks, RecentLooks: recent}
	}
	tr.Traffic.Sources = []SourceTraffic{src("10.0.0.1", 9, Looks{12, 3}, Looks{12, 3}), src("10.0.0.2", 1, Looks{}, Looks{})}
	got = tr.URL("http://g")
	if !strings.Contains(got, "&traffic-looks=12.3.12.3%2C0.0.0.0") {
		t.Errorf("URL with look counts = %s, want traffic-looks=12.3.12.3,0.0.0.0", got)
	}
	back, err = ParseDrainRequest("GET", mustURL(t, got))
	if err != nil || !reflect.DeepEqual(back.Traffic, tr.Traffic) {
		t.Errorf("round trip of %s: got %+v, %v", got, back.Traffic, err)
	}
	back, err = ParseDrainRequest("GET", mustURL(t, strings.Replace(got, "traffic-every-us=100125&", "", 1)))
	if err != nil || back.Traffic.Sources[0].Looks != (Looks{}) {
		t.Errorf("look counts without an interval: got %+v, %v; want them ignored", back.Traffic, err)
	}
	tr.Traffic.Sources = tr.Traffic.Sources[1:]
	if got := tr.URL("http://g"); strings.Contains(got, "traffic-looks") {
		t.Errorf("URL without counted looks = %s: want no traffic-looks", got)
	}

	// The gap bins travel beside the interval too, trailing empty bins
	// left out; a source with none counted is an empty entry.
	gaps := make([]GapBin, GapBins)
	gaps[0], gaps[2], gaps[GapBins-1] = GapBin{7, 7}, GapBin{2, 11}, GapBin{1, 400}
	tr.Traffic.Sources = []SourceTraffic{src("10.0.0.1", 11, Looks{428, 3}, Looks{428, 3}), src("10.0.0.2", 1, Looks{}, Looks{})}
	tr.Traffic.Sources[0].Gaps = gaps
	got = tr.URL("http://g")
	if !strings.Contains(got, "&traffic-gaps=7.7.0.0.2.11.0.0.0.0.0.0.0.0.1.400%2C&") {
		t.Errorf("URL with gap bins = %s, want traffic-gaps=7.7.0.0.2.11.0.0.0.0.0.0.0.0.1.400,", got)
	}
	back, err = ParseDrainRequest("GET", mustURL(t, got))
	if err != nil || !reflect.DeepEqual(back.Traffic, tr.Traffic) {
		t.Errorf("round trip of %s: got %+v, %v", got, back.Traffic, err)
	}
	back, err = ParseDrainRequest("GET", mustURL(t, strings.Replace(got, "traffic-every-us=100125&", "", 1)))
	if err != nil || back.Traffic.Sources[0].Gaps != nil {
		t.Errorf("gap bins without an interval: got %+v, %v; want them ignored", back.Traffic, err)
	}
	// The open connections and the new ones travel beside the interval,
	// one entry per source whenever the agent counted them: no new
	// connection from a source is then a bare count of open ones, and an
	// agent that counted with no source sends the parameter empty.
	tr.Traffic.Sources[0].Open, tr.Traffic.Sources[1].Open = 3, 0
	tr.Traffic.ConnsCounted = true
	nc := SourceTraffic{Addr: netip.MustParseAddr("10.0.0.1"), Port: 80, Arrivals: 2, First: 800 * time.Millisecond,
		Last: []time.Duration{200 * time.Millisecond, 800 * time.Millisecond}, MaxGap: 600 * time.Millisecond,
		Looks: Looks{6, 1}, RecentLooks: Looks{6, 1}, Gaps: make([]GapBin, GapBins)}
	nc.Gaps[2] = GapBin{1, 6}
	tr.Traffic.NewConns = []SourceTraffic{nc,
		// Not one of the sources: left out.
		{Addr: netip.MustParseAddr("10.0.0.9"), Port: 80, Arrivals: 1, Last: []time.Duration{0}}}
	got = tr.URL("http://g")
	if !strings.Contains(got, "&traffic-conns=3%2C2%2C800%2C600%2C200.800%2C6.1.6.1%2C0.0.0.0.1.6%3B0&") {
		t.Errorf("URL with connections = %s, want traffic-conns=3,2,800,600,200.800,6.1.6.1,0.0.0.0.1.6;0", got)
	}
	back, err = ParseDrainRequest("GET", mustURL(t, got))
	tr.Traffic.NewConns = tr.Traffic.NewConns[:1]
	if err != nil || !reflect.DeepEqual(back.Traffic, tr.Traffic) {
		t.Errorf("round trip of %s: got %+v, %v", got, back.Traffic, err)
	}
	back, err = ParseDrainRequest("GET", mustURL(t, strings.Replace(got, "traffic-every-us=100125&", "", 1)))
	if err != nil || back.Traffic.ConnsCounted || back.Traffic.NewConns != nil || back.Traffic.Sources[0].Open != 0 {
		t.Errorf("connections without an interval: got %+v, %v; want them ignored", back.Traffic, err)
	}
	tr.Traffic.ConnsCounted = false
	if got := tr.URL("http://g"); strings.Contains(got, "traffic-conns") {
		t.Errorf("URL without counted connections = %s: want no traffic-conns", got)
	}
	none := DrainRequest{Namespace: "n", Pod: "p", Traffic: &Traffic{Watched: time.Second, Every: 100 * time.Millisecond, ConnsCounted: true}}
	got = none.URL("http://g")
	if !strings.HasSuffix(got, "&traffic-conns=&traffic-every-us=100000") {
		t.Errorf("URL of counted connections without sources = %s, want traffic-conns empty", got)
	}
	back, err = ParseDrainRequest("GET", mustURL(t, got))
	if err != nil || !reflect.DeepEqual(back.Traffic, none.Traffic) {
		t.Errorf("round trip of %s: got %+v, %v", got, back.Traffic, err)
	}

	for g, want := range map[int]int{1: 0, 2: 1, 3: 1, 4: 2, 127: 6, 128: 7, 5000: 7} {
		if got := GapBinOf(g); got != want {
			t.Errorf("GapBinOf(%d) = %d, want %d", g, got, want)
		}
	}
}

func mustURL(t *testing.T, s string) *url.URL {
	t.Helper()
	u, err := url.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// TestFullSummaryURLFits: a summary at every bound (MaxTrafficSources
// IPv6 sources with MaxTrafficAges ages each, look counts and every gap bin
// full, ages of a week, and as much again of new connections) makes a URL
// of about 26 KB, under half the 64 KiB of headers the gate server accepts
// (internal/server); a usual one (IPv4, a few sources) is a small fraction
// of that.
func TestFullSummaryURLFits(t *testing.T) {
	week := 7 * 24 * time.Hour
	tr := &Traffic{Watched: week, Every: 100125 * time.Microsecond,
		Unknown: SourceTraffic{Arrivals: 1 << 20, First: week, MaxGap: week}}
	for i := range MaxTrafficGateways {
		tr.Gateways = append(tr.Gateways, netip.MustParseAddr(fmt.Sprintf("fd00:1234:5678:9abc:def0:1234:5678:%04x", i)))
	}
	for i := range MaxTrafficSources {
		s := SourceTraffic{Addr: netip.MustParseAddr(fmt.Sprintf("fd00:1234:5678:9abc:def0:1234:5678:%04x", 100+i)), Port: 65535,
			Arrivals: 1 << 20, First: week, MaxGap: week, Looks: Looks{N: 1 << 22, Pauses: 1 << 21}, RecentLooks: Looks{N: 1 << 20, Pauses: 1 << 19}}
		for j := range MaxTrafficAges {
			s.Last = append(s.Last, week-time.Duration(j)*time.Hour)
		}
		for j := range GapBins {
			s.Gaps = append(s.Gaps, GapBin{N: 1 << 18, Sum: (1 << 18) << j})
		}
		tr.Sources = append(tr.Sources, s)
		s.Open = 0
		tr.NewConns = append(tr.NewConns, s)
		tr.Sources[i].Open = 1 << 20
	}
	tr.ConnsCounted = true
	u := DrainRequest{Namespace: strings.Repeat("n", 63), Pod: strings.Repeat("p", 253), UID: "3f1c2a9e-7b1d-4c8e-9a6f-0d2b4e6f8a10", Wait: 30 * time.Second, Traffic: tr}.URL("http://draingate.draingate-system.svc:8080")
	t.Logf("a full summary's URL: %d bytes, traffic-conns %d before escaping", len(u), len(encodeConns(tr)))
	if n := len(encodeConns(tr)); n > maxConnsBytes {
		t.Errorf("a full traffic-conns is %d bytes: over the %d the server takes", n, maxConnsBytes)
	}
	if len(u) > 32<<10 {
		t.Errorf("a full summary's URL is %d bytes: over 32 KiB", len(u))
	}
}
