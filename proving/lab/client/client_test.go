package client

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"
)

// TestClientCounts: every request is counted once, a 5xx and a refused
// connection as failed, and GET /counts says so.
func TestClientCounts(t *testing.T) {
	var n atomic.Int64
	app := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if n.Add(1)%2 == 0 {
			w.WriteHeader(http.StatusBadGateway)
		}
	}))
	defer app.Close()
	c := New(app.URL, 200)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { c.Run(ctx); close(done) }()
	for c.Counts().Requests < 40 {
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	<-done
	got := c.Counts()
	if got.Requests != n.Load() {
		t.Errorf("counted %d requests, the app got %d", got.Requests, n.Load())
	}
	if want := n.Load() / 2; got.Failed != want {
		t.Errorf("counted %d failed, want %d (every second answer a 502)", got.Failed, want)
	}
	if len(got.Errors) == 0 || got.Errors[0] != "502 Bad Gateway" {
		t.Errorf("errors %q, want 502 Bad Gateway first", got.Errors)
	}

	// Nothing listens: every request fails.
	app.Close()
	c = New(app.URL, 200)
	ctx, cancel = context.WithCancel(context.Background())
	done = make(chan struct{})
	go func() { c.Run(ctx); close(done) }()
	for c.Counts().Requests < 5 {
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	<-done
	if got := c.Counts(); got.Failed != got.Requests {
		t.Errorf("with the app gone: %d of %d failed, want all", got.Failed, got.Requests)
	}
	rec := httptest.NewRecorder()
	c.ServeHTTP(rec, httptest.NewRequest("GET", "/counts", nil))
	var doc Counts
	if err := json.Unmarshal(rec.Body.Bytes(), &doc); err != nil || doc.Requests != c.Counts().Requests {
		t.Errorf("GET /counts = %s (%v), want the counts", rec.Body, err)
	}
}
