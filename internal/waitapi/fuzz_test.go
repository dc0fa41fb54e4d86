package waitapi

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"
	"time"

	"draingate.dev/draingate/api"
)

// FuzzHandler feeds arbitrary methods, paths and queries to the handler: it
// must never panic, and never answer a 5xx (the fake gate never fails, so
// every request is either the caller's mistake or answerable). Waits are
// capped to a millisecond so long-polls end fast.
func FuzzHandler(f *testing.F) {
	for _, s := range []struct{ method, path, query string }{
		{"GET", "/v1/namespaces/shop/pods/web-0/drain", "uid=" + testUID + "&wait=20s"},
		{"GET", "/v1/namespaces/shop/pods/web-1/drain", "wait=1h"},
		{"GET", "/v1/namespaces/shop/pods/web-2/drain", ""},
		{"GET", "/v1/namespaces/shop/pods/web-0/drain", "uid=aaaaaaaa-bbbb&wait=0"},
		{"GET", "/v1/namespaces/shop/pods/web-0/drain", "wait=1e9h"},
		{"GET", "/v1/namespaces/shop/pods/web-0/drain", "wait=-1s&uid=x"},
		{"GET", "/v1/namespaces/shop/pods/a/b/drain", "%zz"},
		{"POST", "/v1/namespaces/shop/pods/web-0/drain", ""},
		{"", "/v1/namespaces//drain", ""},
		{"HEAD", "/healthz", ""},
		{"GET", "/readyz", ""},
		{"DELETE", "/readyz", ""},
		{"GET", "/", ""},
		{"GET\x00", "\xff/v1/namespaces/\x00/pods/web/drain", "wait=\xff"},
	} {
		f.Add(s.method, s.path, s.query)
	}
	g := newFakeGate()
	g.set(drained("shop", "web-0"))
	g.set(waiting("shop", "web-1"))
	h := NewHandler(g, Config{MaxWait: time.Millisecond, Metrics: NewMetrics(nil), Ready: func() error { return nil }})
	f.Fuzz(func(t *testing.T, method, path, query string) {
		r := httptest.NewRequest("GET", "/", nil)
		r.Method = method
		r.URL = &url.URL{Path: path, RawQuery: query}
		r.RequestURI = ""
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		code := w.Code
		if code >= 500 || code < 200 {
			t.Fatalf("%q %q ?%q: status %d: %s", method, path, query, code, w.Body)
		}
		if ct := w.Header().Get("Content-Type"); ct != "application/json" {
			t.Fatalf("%q %q ?%q: Content-Type %q", method, path, query, ct)
		}
		if code == http.StatusMethodNotAllowed && w.Header().Get("Allow") == "" {
			t.Fatalf("%q %q: 405 without Allow", method, path)
		}
		// What the parser accepts, the handler answers with a verdict
		// (200) or a pod it does not know (404); what it refuses, with the
		// parser's status.
		_, err := api.ParseDrainRequest(method, r.URL)
		if err == nil && code != 200 && code != 404 {
			t.Fatalf("%q %q ?%q: a valid request answered %d: %s", method, path, query, code, w.Body)
		}
	})
}
