package prestop

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"testing/synctest"
	"time"
)

func TestHTTPGetFraming(t *testing.T) {
	big := bytes.Repeat([]byte("0123456789abcdef"), 4096) // 64 KiB: net/http chunks it
	url := serveMem(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Host == "" || r.Header.Get("User-Agent") != "draingate-prestop" || r.Header.Get("Connection") != "close" {
			http.Error(w, "bad request headers", 400)
			return
		}
		switch r.URL.Path {
		case "/chunked":
			w.Write(big[:1000])
			w.(http.Flusher).Flush()
			w.Write(big[1000:])
		case "/small":
			io.WriteString(w, `{"released":true}`)
		case "/empty":
			w.WriteHeader(204)
		case "/huge":
			for range 20 {
				w.Write(big)
			}
		}
	}))
	ctx := context.Background()

	r, err := httpGet(ctx, url+"/chunked", true, "")
	if err != nil || r.status != 200 || !bytes.Equal(r.body, big) {
		t.Errorf("chunked: status %d, %d bytes, %v", r.status, len(r.body), err)
	}
	r, err = httpGet(ctx, url+"/small?q=1", true, "")
	if err != nil || r.status != 200 || string(r.body) != `{"released":true}` {
		t.Errorf("content-length: %d %q %v", r.status, r.body, err)
	}
	r, err = httpGet(ctx, url+"/empty", true, "")
	if err != nil || r.status != 204 || len(r.body) != 0 {
		t.Errorf("204: %d %q %v", r.status, r.body, err)
	}
	if _, err = httpGet(ctx, url+"/huge", true, ""); !errors.Is(err, errTooLarge) {
		t.Errorf("1.25 MiB body: %v, want too large", err)
	}
}

// rawServer answers every connection with the given bytes, then closes it;
// "hang" answers nothing until the agent hangs up.
func rawServer(t *testing.T, answer string) string {
	t.Helper()
	l := testNet.listen()
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				c.Read(make([]byte, 4096))
				if answer == "hang" {
					io.Copy(io.Discard, c)
					return
				}
				io.WriteString(c, answer)
			}()
		}
	}()
	return "http://" + l.Addr().String()
}

func TestHTTPGetRawAnswers(t *testing.T) {
	ctx := context.Background()
	cases := []struct {
		answer  string
		status  int
		body    string
		wantErr string
	}{
		{"HTTP/1.0 200 OK\r\n\r\nto the end", 200, "to the end", ""},
		{"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", 200, "ok", ""},
		{"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2;ext=1\r\nok\r\n0\r\nTrailer: x\r\n\r\n", 200, "ok", ""},
		{"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort", 0, "", "unexpected EOF"},
		{"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n", 0, "", "unsupported transfer encoding"},
		{"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", 0, "", "bad chunk size"},
		{"SSH-2.0-OpenSSH\r\n", 0, "", "not an HTTP/1.x status line"},
		{"", 0, "", "unexpected EOF"},
	}
	for _, c := range cases {
		r, err := httpGet(ctx, rawServer(t, c.answer)+"/", true, "")
		if c.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), c.wantErr) {
				t.Errorf("%q: got %v, want an error with %q", c.answer, err, c.wantErr)
			}
			continue
		}
		if err != nil || r.status != c.status || string(r.body) != c.body {
			t.Errorf("%q: got %d %q %v", c.answer, r.status, r.body, err)
		}
	}
}

func TestHTTPGetHonoursContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		url := rawServer(t, "hang")
		const timeout = 200 * time.Millisecond
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		start := time.Now()
		_, err := httpGet(ctx, url+"/", true, "")
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("got %v, want the context's deadline", err)
		}
		if took := time.Since(start); took != timeout {
			t.Errorf("took %s, want the context's %s", took, timeout)
		}

		ctx, cancel = context.WithCancel(context.Background())
		time.AfterFunc(100*time.Millisecond, cancel)
		if _, err := httpGet(ctx, url+"/", true, ""); !errors.Is(err, context.Canceled) {
			t.Errorf("canceled: got %v", err)
		}
	})
}

// The other tests dial the in-memory network; this one the real one.
func TestHTTPGetOverTCP(t *testing.T) {
	saved := dial
	dial = (&net.Dialer{}).DialContext
	defer func() { dial = saved }()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, `{"released":true}`)
	}))
	defer srv.Close()
	r, err := httpGet(context.Background(), srv.URL+"/x", true, "")
	if err != nil || r.status != 200 || string(r.body) != `{"released":true}` {
		t.Errorf("loopback: %d %q %v", r.status, r.body, err)
	}

	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	if _, err := httpGet(context.Background(), "http://"+addr+"/", true, ""); err == nil || !strings.Contains(err.Error(), "connection refused") {
		t.Errorf("closed port: got %v, want connection refused", err)
	}
}

func TestCheckHTTPURL(t *testing.T) {
	for _, bad := range []string{"https://gate/", "gate:8080", "ftp://gate/", "http:///x", "http://u:p@gate/", "http://ga te/", "http:opaque"} {
		if _, err := checkHTTPURL(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
	for _, good := range []string{"http://gate", "http://[::1]:8080/x?y=1", DefaultServer} {
		if _, err := checkHTTPURL(good); err != nil {
			t.Errorf("%q: %v", good, err)
		}
	}
}
