package api

import (
	"errors"
	"net/url"
	"reflect"
	"testing"
)

// FuzzParseDrainRequest: the parser never panics, refuses only with a
// *RequestError, and whatever it accepts is valid and survives URL() and a
// second parse unchanged, so server and agent agree on every request.
func FuzzParseDrainRequest(f *testing.F) {
	for _, s := range []string{
		"/v1/namespaces/default/pods/web-0/drain?uid=3f1c2a9e-7b1d-4c8e-9a6f-0d2b4e6f8a10&wait=20s",
		"/v1/namespaces/n/pods/a.b/drain?wait=1h2m3.5s",
		"/v1/namespaces/n/pods/p/drain?wait=1ns&x=y",
		"/v1/namespaces/n/pods/p%2Fq/drain",
		"/v1/namespaces/n/pods/p/drain?uid=a;b",
		"http://gate:8080/v1/namespaces/n/pods/p/drain?wait=-0s",
		"/v1/namespaces/n/pods/p/drain?wait=9223372036854775807ns",
		"/v1/namespaces/n/pods/p/drain?wait=20s&traffic=1%3Bw%3D9000%3Bs%3D10.0.0.1%2C8080%2C12%2C8000%2C700%2C5.300.900",
		"/v1/namespaces/n/pods/p/drain?traffic=1;w=100;s=::ffff:1.2.3.4,80,1,10,0,10;u=3,50,48,1.2.50",
		"/v1/namespaces/n/pods/p/drain?traffic=1;w=300;s=10.0.0.1,80,2,210,100,110.210&traffic-every-us=100250",
		"/v1/namespaces/n/pods/p/drain?traffic=1;w=300;s=10.0.0.1,80,2,210,100,110.210&traffic-every-us=100250&traffic-looks=2.1.2.1",
		"/v1/namespaces/n/pods/p/drain?traffic=1;w=300;s=10.0.0.1,80,2,210,100,110.210&traffic-every-us=100250&traffic-looks=2.1.2.1&traffic-gaps=0.0.1.2",
		"/v1/namespaces/n/pods/p/drain?traffic=1%3Bw%3D300%3Bs%3D10.0.0.1%2C80%2C2%2C210%2C100%2C110.210&traffic-every-us=100250&traffic-conns=3%2C1%2C110%2C0%2C110%2C0.0.0.0%2C",
		"/v1/namespaces/n/pods/p/drain?traffic=1%3Bw%3D300%3Bs%3D10.0.0.1%2C80%2C3%2C210%2C100%2C10.110.210%3Bs%3D10.0.0.2%2C80%2C1%2C5%2C0%2C5&traffic-every-us=100250&traffic-looks=2.0.2.0%2C0.0.0.0&traffic-conns=2%2C2%2C210%2C200%2C10.210%2C2.1.2.1%2C0.0.1.2%3B0",
		"/v1/namespaces/n/pods/p/drain?traffic=1%3Bw%3D300&traffic-every-us=100250&traffic-conns=",
	} {
		f.Add("GET", s)
	}
	f.Add("POST", "/v1/namespaces/n/pods/p/drain")
	f.Fuzz(func(t *testing.T, method, raw string) {
		u, err := url.Parse(raw)
		if err != nil {
			return
		}
		r, err := ParseDrainRequest(method, u)
		if err != nil {
			var re *RequestError
			if !errors.As(err, &re) || (re.Status != 400 && re.Status != 405) || re.Message == "" {
				t.Fatalf("refusal is not a 400/405 *RequestError: %#v", err)
			}
			return
		}
		if err := r.Validate(); err != nil {
			t.Fatalf("accepted %+v fails Validate: %v", r, err)
		}
		s := r.URL("http://draingate.draingate-system.svc:8080")
		u2, err := url.Parse(s)
		if err != nil {
			t.Fatalf("URL() %q does not parse: %v", s, err)
		}
		r2, err := ParseDrainRequest("GET", u2)
		if err != nil {
			t.Fatalf("URL() %q of accepted %+v is refused: %v", s, r, err)
		}
		if !reflect.DeepEqual(r2, r) {
			t.Fatalf("round trip through %q: got %+v, want %+v", s, r2, r)
		}
	})
}
