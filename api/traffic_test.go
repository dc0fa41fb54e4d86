package api

import (
	"errors"
	"net/netip"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestTrafficRoundTrip(t *testing.T) {
	in := &Traffic{
		Watched: 42 * time.Second,
		Sources: []SourceTraffic{
			{Addr: netip.MustParseAddr("10.245.0.11"), Port: 8080, Arrivals: 120, First: 41 * time.Second, MaxGap: 1500 * time.Millisecond,
				Last: []time.Duration{300 * time.Millisecond, 650 * time.Millisecond, time.Second}},
			{Addr: netip.MustParseAddr("fd00::7"), Port: 443, Arrivals: 1, First: 2 * time.Second, Last: []time.Duration{2 * time.Second}},
		},
		Unknown:  SourceTraffic{Arrivals: 2, First: 5 * time.Second, Last: []time.Duration{time.Second, 5 * time.Second}},
		Gateways: []netip.Addr{netip.MustParseAddr("10.244.0.1")},
	}
	s := EncodeTraffic(in)
	if want := "1;w=42000;s=10.245.0.11,8080,120,41000,1500,300.650.1000;s=fd00::7,443,1,2000,0,2000;u=2,5000,0,1000.5000;g=10.244.0.1"; s != want {
		t.Errorf("EncodeTraffic = %q, want %q", s, want)
	}
	out, err := ParseTraffic(s)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(out, in) {
		t.Errorf("round trip: got %+v, want %+v", out, in)
	}
	if EncodeTraffic(nil) != "" {
		t.Error("EncodeTraffic(nil) is not empty")
	}
}

func TestTrafficBoundsOnEncode(t *testing.T) {
	in := &Traffic{Watched: time.Hour}
	for i := range MaxTrafficSources + 5 {
		st := SourceTraffic{Addr: netip.AddrFrom4([4]byte{10, 0, byte(i), 1}), Port: 80, Arrivals: 100, First: time.Hour}
		for j := range MaxTrafficAges + 3 {
			st.Last = append(st.Last, time.Duration(j)*time.Second)
		}
		in.Sources = append(in.Sources, st)
	}
	out, err := ParseTraffic(EncodeTraffic(in))
	if err != nil {
		t.Fatal(err)
	}
	if len(out.Sources) != MaxTrafficSources || len(out.Sources[0].Last) != MaxTrafficAges {
		t.Errorf("kept %d sources with %d ages, want %d and %d", len(out.Sources), len(out.Sources[0].Last), MaxTrafficSources, MaxTrafficAges)
	}
}

func TestParseTrafficRefuses(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"2;w=5", "version"},
		{"1", "watched"},
		{"1;w=-5", "milliseconds"},
		{"1;w=+5", "milliseconds"},
		{"1;w=05", "milliseconds"},
		{"1;w=999999999999", "milliseconds"},
		{"1;w=10;s=10.0.0.1,80,1,20,0,5", "before the watch began"},
		{"1;w=10;s=10.0.0.1,80,1,5,0,3.4", "2 ages for 1 arrivals"},
		{"1;w=10;s=10.0.0.1,80,2,5,1,4.3", "ages must grow"},
		{"1;w=10;s=10.0.0.1,80,2,5,1,", "no ages"},
		{"1;w=10;s=10.0.0.1,0,1,5,0,5", "port"},
		{"1;w=10;s=host,80,1,5,0,5", "not an IP"},
		{"1;w=10;s=fe80::1%eth0,80,1,5,0,5", "not an IP"},
		{"1;w=10;s=10.0.0.1,80,1,5,0,5;s=::ffff:10.0.0.1,80,1,5,0,5", "twice"},
		{"1;w=10;s=10.0.0.1,80,0,5,0,5", "count from 1"},
		{"1;w=10;u=1,5,0,5;u=1,5,0,5", "twice"},
		{"1;w=10;x=1", "not s=, u= nor g="},
		{"1;w=10;g=gw", "gateway"},
		{"1;w=10;g=1.1.1.1;g=1.1.1.2;g=1.1.1.3;g=1.1.1.4;g=1.1.1.5", "more than 4 gateways"},
		{"1;w=10;s=10.0.0.1,80,2,5,6,4.3", "longest gap"},
		{"1;w=10;s=10.0.0.1,80", "want addr"},
		{"1;w=10;" + strings.Repeat("x", 9000), "bytes"},
	} {
		_, err := ParseTraffic(c.in)
		var re *RequestError
		if !errors.As(err, &re) || re.Status != 400 || !strings.Contains(re.Message, c.want) {
			t.Errorf("ParseTraffic(%q) = %v, want a 400 mentioning %q", c.in, err, c.want)
		}
	}
}

// FuzzParseTraffic: the summary the server accepts never panics the parser,
// is refused only with a 400, and survives EncodeTraffic unchanged.
func FuzzParseTraffic(f *testing.F) {
	f.Add("1;w=42000;s=10.245.0.11,8080,120,41000,1500,300.650.1000;s=fd00::7,443,1,2000,0,2000;u=2,5000,0,1000.5000")
	f.Add("1;w=0")
	f.Add("1;w=5;g=10.244.0.1;g=fd00::1")
	f.Add("1;w=10;s=::ffff:10.0.0.1,80,1,5,0,5")
	f.Fuzz(func(t *testing.T, s string) {
		tr, err := ParseTraffic(s)
		if err != nil {
			var re *RequestError
			if !errors.As(err, &re) || re.Status != 400 || re.Message == "" {
				t.Fatalf("refusal is not a 400 *RequestError: %#v", err)
			}
			return
		}
		enc := EncodeTraffic(tr)
		tr2, err := ParseTraffic(enc)
		if err != nil {
			t.Fatalf("EncodeTraffic %q of accepted %q is refused: %v", enc, s, err)
		}
		if !reflect.DeepEqual(tr2, tr) {
			t.Fatalf("round trip through %q: got %+v, want %+v", enc, tr2, tr)
		}
	})
}
