package app

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// openStream opens a stream on the app at addr.
func openStream(t *testing.T, addr string) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(30 * time.Second)) // only keeps a broken app from hanging the test
	br := bufio.NewReader(c)
	io.WriteString(c, "GET /stream HTTP/1.1\r\nHost: pod-a\r\nConnection: Upgrade\r\nUpgrade: "+StreamProtocol+"\r\n\r\n")
	res, err := http.ReadResponse(br, nil)
	if err != nil || res.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("open stream: %v, %v; want 101", res, err)
	}
	return c, br
}

// A stream answers every message; at SIGTERM it says bye between two
// messages and closes, and the app exits only once it did.
func TestStreamSaysByeAtSigterm(t *testing.T) {
	r := start(t, New(Config{Hostname: "pod-a"}))
	c, br := openStream(t, r.addr)
	for range 3 {
		io.WriteString(c, "m\n")
		if got, err := br.ReadString('\n'); err != nil || got != "ok pod-a\n" {
			t.Fatalf("message answered %q, %v; want ok pod-a", got, err)
		}
	}
	r.sigterm()
	if got, err := br.ReadString('\n'); err != nil || got != "bye\n" {
		t.Fatalf("at SIGTERM the stream said %q, %v; want bye", got, err)
	}
	if n, err := br.Read(make([]byte, 1)); err != io.EOF {
		t.Fatalf("after bye: read %d, %v; want EOF", n, err)
	}
	r.exited(t)
	if !strings.Contains(r.log.String(), "source 127.0.0.1 3 0") {
		t.Errorf("log %q; want the 3 messages counted against their source", r.log.String())
	}
}

// A GET /stream without the Upgrade is refused.
func TestStreamWantsUpgrade(t *testing.T) {
	r := start(t, New(Config{Hostname: "pod-a"}))
	res, err := http.Get("http://" + r.addr + "/stream")
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusUpgradeRequired {
		t.Errorf("GET /stream without Upgrade: %d; want 426", res.StatusCode)
	}
}
